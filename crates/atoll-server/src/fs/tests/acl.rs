//! Default ACLs of directories and the inodes made in them (Linux's
//! `posix_acl_create`), at the directory's owner and at a server that
//! makes an inode in a directory it does not own.

use super::*;
use atoll_proto::Inherit;

const ACL_ACCESS: &[u8] = b"system.posix_acl_access";
const ACL_DEFAULT: &[u8] = b"system.posix_acl_default";
const USER_OBJ: u16 = 0x01;
const NAMED_USER: u16 = 0x02;
const GROUP_OBJ: u16 = 0x04;
const MASK: u16 = 0x10;
const OTHER_ENTRY: u16 = 0x20;
const X: u32 = u32::MAX;

/// An ACL in its xattr form (`posix_acl_xattr_header`, version 2).
fn acl(entries: &[(u16, u16, u32)]) -> Vec<u8> {
    let mut v = 2u32.to_le_bytes().to_vec();
    for &(tag, perm, id) in entries {
        v.extend_from_slice(&tag.to_le_bytes());
        v.extend_from_slice(&perm.to_le_bytes());
        v.extend_from_slice(&id.to_le_bytes());
    }
    v
}

/// `setfacl -d -m u:65534:rwx,g::r-x,o::-`: a named user, so a mask.
fn with_named_user() -> Vec<u8> {
    acl(&[
        (USER_OBJ, 7, X),
        (NAMED_USER, 7, 65534),
        (GROUP_OBJ, 5, X),
        (MASK, 7, X),
        (OTHER_ENTRY, 0, X),
    ])
}

/// `setfacl -d -m g::r-x,o::-`: no more than a mode says.
fn minimal() -> Vec<u8> {
    acl(&[(USER_OBJ, 7, X), (GROUP_OBJ, 5, X), (OTHER_ENTRY, 0, X)])
}

impl T {
    fn set_default_acl(&mut self, dir: InodeId, value: &[u8]) {
        self.ok(
            S1,
            USER,
            Request::SetXattr {
                ino: dir,
                name: ACL_DEFAULT,
                value,
                flags: 0,
                via: None,
            },
        );
    }
    fn xattr(&mut self, ino: InodeId, name: &[u8]) -> Option<Vec<u8>> {
        match self.call(S1, USER, Request::GetXattr { ino, name }) {
            Own::Bytes(b) => Some(b),
            Own::Err(Errno::ENODATA) => None,
            other => panic!("GetXattr: {other:?}"),
        }
    }
    fn perm_of(&mut self, ino: InodeId) -> u32 {
        match self.call(S1, USER, Request::GetAttr { ino }) {
            Own::Attr(a) => a.perm,
            other => panic!("GetAttr: {other:?}"),
        }
    }
}

fn with<'a>(dir: InodeId, name: &'a str, inherit: Inherit<'a>) -> Request<'a> {
    Request::Open {
        dir,
        name: name.as_bytes(),
        flags: RW | CREAT,
        perm: 0o666,
        umask: 0o022,
        inherit,
    }
}

fn make(dir: InodeId, name: &str, ftype: FileType, perm: u32, umask: u32) -> Request<'_> {
    Request::MakeNode {
        dir,
        name: name.as_bytes(),
        ftype,
        perm,
        rdev: 0,
        target: b"t",
        home: 0,
        spread: 0,
        umask,
        inherit: Inherit::Unread,
    }
}

#[test]
fn a_new_file_takes_the_default_acl_instead_of_the_umask() {
    let mut t = server(16);
    let d = t.mkdir(ROOT, "d");
    t.set_default_acl(d, &with_named_user());
    let r = t.call(
        S1,
        USER,
        Request::Open {
            dir: d,
            name: b"f",
            flags: RW | CREAT,
            perm: 0o666,
            umask: 0o077,
            inherit: Inherit::Unread,
        },
    );
    let Own::Opened(_, a, true) = r else {
        panic!("{r:?}");
    };
    // Group class from the mask (rw- of 0666), not the umask's 0600.
    assert_eq!(a.perm, 0o660);
    let access = acl(&[
        (USER_OBJ, 6, X),
        (NAMED_USER, 7, 65534),
        (GROUP_OBJ, 5, X),
        (MASK, 6, X),
        (OTHER_ENTRY, 0, X),
    ]);
    assert_eq!(t.xattr(a.ino, ACL_ACCESS), Some(access));
    assert_eq!(t.xattr(a.ino, ACL_DEFAULT), None, "only directories");
    // Without a default ACL the umask applies, as before.
    let (_, plain) = t
        .open_as(S1, USER, ROOT, "plain", RW | CREAT, 0o666)
        .unwrap();
    assert_eq!(plain.perm, 0o644);
    assert_eq!(t.xattr(plain.ino, ACL_ACCESS), None);
}

#[test]
fn a_new_directory_inherits_both_acls_and_passes_them_on() {
    let mut t = server(16);
    let d = t.mkdir(ROOT, "d");
    t.set_default_acl(d, &with_named_user());
    let Own::Entry(sub, _) = t.ok(S1, USER, make(d, "sub", FileType::Directory, 0o777, 0o022))
    else {
        panic!()
    };
    assert_eq!(t.perm_of(sub), 0o770, "group class from the mask");
    assert_eq!(t.xattr(sub, ACL_DEFAULT), Some(with_named_user()));
    assert!(t.xattr(sub, ACL_ACCESS).is_some());
    // Two levels down, with the same rules.
    let Own::Entry(f, _) = t.ok(S1, USER, make(sub, "fifo", FileType::Fifo, 0o644, 0o077)) else {
        panic!()
    };
    assert_eq!(t.perm_of(f), 0o640);
    // Symlinks inherit nothing and keep 0777.
    let Own::Entry(l, _) = t.ok(S1, USER, make(sub, "l", FileType::Symlink, 0, 0o077)) else {
        panic!()
    };
    assert_eq!(t.perm_of(l), 0o777);
    assert!(matches!(
        t.call(
            S1,
            USER,
            Request::GetXattr {
                ino: l,
                name: ACL_ACCESS
            }
        ),
        Own::Err(Errno::EOPNOTSUPP)
    ));
}

#[test]
fn an_inherited_acl_equivalent_to_the_mode_is_not_stored() {
    let mut t = server(16);
    let d = t.mkdir(ROOT, "d");
    t.set_default_acl(d, &minimal());
    let Own::Entry(f, _) = t.ok(S1, USER, make(d, "f", FileType::Regular, 0o666, 0o077)) else {
        panic!()
    };
    assert_eq!(t.perm_of(f), 0o640);
    assert_eq!(t.xattr(f, ACL_ACCESS), None);
    // A directory still keeps the default ACL itself.
    let Own::Entry(sub, _) = t.ok(S1, USER, make(d, "sub", FileType::Directory, 0o700, 0)) else {
        panic!()
    };
    assert_eq!(t.perm_of(sub), 0o700);
    assert_eq!(t.xattr(sub, ACL_ACCESS), None);
    assert_eq!(t.xattr(sub, ACL_DEFAULT), Some(minimal()));
    // O_TMPFILE files inherit too (at the directory's owner).
    let r = t.call(
        S1,
        USER,
        Request::CreateTmpfile {
            dir: d,
            perm: 0o666,
            flags: RW,
            umask: 0o077,
        },
    );
    let Own::Opened(_, a, _) = r else {
        panic!("{r:?}")
    };
    assert_eq!(a.perm, 0o640);
}

#[test]
fn attributes_say_whether_a_directory_has_a_default_acl() {
    let mut t = server(16);
    let d = t.mkdir(ROOT, "d");
    let flag = |t: &mut T| match t.call(S1, USER, Request::GetAttr { ino: d }) {
        Own::Attr(a) => a.default_acl,
        other => panic!("{other:?}"),
    };
    assert!(!flag(&mut t));
    t.set_default_acl(d, &minimal());
    assert!(flag(&mut t));
    t.set_default_acl(d, b"");
    assert!(!flag(&mut t));
}

#[test]
fn attributes_say_whether_an_access_acl_says_more_than_the_mode() {
    let mut t = server(16);
    let d = t.mkdir(ROOT, "d");
    let flag = |t: &mut T| match t.call(S1, USER, Request::GetAttr { ino: d }) {
        Own::Attr(a) => a.access_acl,
        other => panic!("{other:?}"),
    };
    let set = |t: &mut T, value: &[u8]| {
        t.ok(
            S1,
            USER,
            Request::SetXattr {
                ino: d,
                name: ACL_ACCESS,
                value,
                flags: 0,
                via: None,
            },
        )
    };
    assert!(!flag(&mut t));
    // No more than the mode: not kept, so nothing to ask the owner.
    set(&mut t, &minimal());
    assert!(!flag(&mut t));
    set(&mut t, &with_named_user());
    assert!(flag(&mut t));
    assert!(!matches!(
        t.call(S1, USER, Request::GetAttr { ino: d }),
        Own::Attr(a) if a.default_acl
    ));
    set(&mut t, b"");
    assert!(!flag(&mut t));
}

/// Server 1 of 2 makes inodes in a directory server 0 owns (a shard of a
/// distributed directory): the ACL comes with the request.
#[test]
fn a_server_not_owning_the_directory_applies_the_acl_the_request_carries() {
    let mut t = server_n(1, 2, 16);
    let dir = InodeId::new(0, 0, true, 77);
    let names: Vec<String> = (0..)
        .map(|i| format!("n{i}"))
        .filter(|n| entry_server(dir, n.as_bytes(), 2) == 1)
        .take(3)
        .collect();
    let mut attrs = attrs_of(dir, 0o755, USER.uid, USER.gid);
    attrs.default_acl = true;
    let default = with_named_user();
    // The attributes say there is one, the request carries none.
    assert_eq!(
        t.callv(S1, USER, &[attrs], with(dir, &names[0], Inherit::Unread)),
        Own::Err(Errno::EPROTO)
    );
    let r = t.callv(
        S1,
        USER,
        &[attrs],
        with(dir, &names[0], Inherit::Acl(&default)),
    );
    let Own::Opened(_, a, true) = r else {
        panic!("{r:?}")
    };
    assert_eq!(a.perm, 0o660);
    assert!(t.xattr(a.ino, ACL_ACCESS).is_some());
    // Removed meanwhile (the owner had none any more): the umask.
    let r = t.callv(S1, USER, &[attrs], with(dir, &names[1], Inherit::Acl(b"")));
    let Own::Opened(_, a, true) = r else {
        panic!("{r:?}")
    };
    assert_eq!(a.perm, 0o644);
    // A malformed ACL is refused.
    let bad = [2, 0, 0, 0, 1];
    assert_eq!(
        t.callv(S1, USER, &[attrs], with(dir, &names[2], Inherit::Acl(&bad))),
        Own::Err(Errno::EINVAL)
    );
    // A directory made here keeps the default ACL that came with it.
    let mk = Request::MakeNode {
        dir,
        name: names[2].as_bytes(),
        ftype: FileType::Directory,
        perm: 0o777,
        rdev: 0,
        target: b"",
        home: 1,
        spread: 0,
        umask: 0o022,
        inherit: Inherit::Acl(&default),
    };
    let Own::Entry(sub, _) = t.callv(S1, USER, &[attrs], mk) else {
        panic!()
    };
    assert_eq!(t.perm_of(sub), 0o770, "group class from the mask");
    assert_eq!(t.xattr(sub, ACL_DEFAULT), Some(default.clone()));
}

/// Creation affinity: `CreateInode` at a server that owns neither the
/// directory nor its entries.
#[test]
fn a_placed_inode_inherits_the_acl_the_request_carries() {
    let mut t = server_n(1, 2, 16);
    let mut attrs = attrs_of(ROOT, 0o755, USER.uid, USER.gid);
    attrs.default_acl = true;
    let default = minimal();
    let r = t.callv(
        S1,
        USER,
        &[attrs],
        Request::CreateInode {
            dir: ROOT,
            name: b"placed",
            ftype: FileType::Regular,
            perm: 0o666,
            rdev: 0,
            target: b"",
            open: None,
            umask: 0o077,
            inherit: Inherit::Acl(&default),
        },
    );
    let Own::Entry(ino, _) = r else {
        panic!("{r:?}")
    };
    assert_eq!(t.perm_of(ino), 0o640);
}
