//! Permission checks (owner, group, other, root's capabilities), set-id
//! and sticky bits, attributes vouched for by other servers, and the
//! group lists a session's threads register.

use super::*;

#[test]
fn permissions_follow_owner_group_other_and_root_bypass() {
    let mut t = server(8);
    let (d, f) = t.create(ROOT, "f");
    t.close(S1, d);
    t.ok(
        S1,
        USER,
        Request::SetAttr {
            ino: f,
            set: perm_only(0o640),
            via: None,
        },
    );
    assert_eq!(
        t.open_as(S2, OTHER, ROOT, "f", 0, 0).unwrap_err(),
        Errno::EACCES
    );
    t.ok(
        S2,
        OTHER,
        Request::SetGroups {
            set: 0,
            groups: vec![1000],
        },
    );
    assert!(
        t.open_as(S2, OTHER, ROOT, "f", 0, 0).is_ok(),
        "member of the file's group"
    );
    assert_eq!(
        t.open_as(S2, OTHER, ROOT, "f", RW, 0).unwrap_err(),
        Errno::EACCES
    );
    assert!(t.open_as(S2, ROOTC, ROOT, "f", RW, 0).is_ok());
    let acc = |t: &mut T, c, mask| t.call(S1, c, Request::Access { ino: f, mask });
    assert_eq!(
        acc(&mut t, ROOTC, libc::X_OK as u32),
        Own::Err(Errno::EACCES)
    );
    assert_eq!(
        acc(&mut t, ROOTC, libc::R_OK as u32 | libc::W_OK as u32),
        Own::Ok
    );
    assert_eq!(acc(&mut t, USER, libc::F_OK as u32), Own::Ok);
    // Creation needs write+search on the directory.
    let d = t.mkdir_as(USER, ROOT, "private", 0o500).unwrap();
    assert_eq!(
        t.open_as(S1, USER, d, "x", RW | CREAT, 0o644).unwrap_err(),
        Errno::EACCES
    );
    assert_eq!(t.lookup(d, "x"), Err(Errno::ENOENT));
    t.setattr(USER, d, perm_only(0o600)).unwrap();
    assert_eq!(t.lookup(d, "x"), Err(Errno::EACCES), "search needs x");
}

#[test]
fn chown_and_chmod_follow_linux_rules() {
    let mut t = server(8);
    let (d, f) = t.create(ROOT, "f");
    t.close(S1, d);
    let chown = |uid, gid| SetAttr {
        uid,
        gid,
        ..SetAttr::NONE
    };
    assert_eq!(t.setattr(OTHER, f, perm_only(0o777)), Err(Errno::EPERM));
    assert_eq!(
        t.setattr(USER, f, chown(Some(2000), None)),
        Err(Errno::EPERM)
    );
    assert_eq!(
        t.setattr(USER, f, chown(None, Some(3000))),
        Err(Errno::EPERM)
    );
    t.ok(
        S1,
        USER,
        Request::SetGroups {
            set: 0,
            groups: vec![3000],
        },
    );
    assert_eq!(
        t.setattr(USER, f, chown(None, Some(3000))).unwrap().gid,
        3000
    );
    // chmod by a non-member of the file's group drops set-group-id.
    t.ok(
        S1,
        USER,
        Request::SetGroups {
            set: 0,
            groups: vec![],
        },
    );
    assert_eq!(t.setattr(USER, f, perm_only(0o2755)).unwrap().perm, 0o755);
    t.setattr(ROOTC, f, perm_only(0o6755)).unwrap();
    // chown clears set-id bits, even for root.
    let a = t.setattr(ROOTC, f, chown(Some(2000), Some(2000))).unwrap();
    assert_eq!((a.uid, a.gid, a.perm), (2000, 2000, 0o755));
}

#[test]
fn write_by_non_root_clears_setuid() {
    let mut t = server(8);
    let (d, f) = t.create(ROOT, "f");
    t.setattr(USER, f, perm_only(0o4755)).unwrap();
    t.write(S1, d, b"x", None).unwrap();
    assert_eq!(t.stat(f).unwrap().perm, 0o755);
}

#[test]
fn setgid_directories_pass_their_group_down() {
    let mut t = server(8);
    let d = t.mkdir(ROOT, "shared");
    t.ok(
        S1,
        USER,
        Request::SetGroups {
            set: 0,
            groups: vec![500],
        },
    );
    t.setattr(
        USER,
        d,
        SetAttr {
            gid: Some(500),
            perm: Some(0o2777),
            ..SetAttr::NONE
        },
    )
    .unwrap();
    let sub = t.mkdir_as(OTHER, d, "sub", 0o755).unwrap();
    let a = t.stat(sub).unwrap();
    assert_eq!((a.gid, a.perm & libc::S_ISGID), (500, libc::S_ISGID));
    let (_, fa) = t.open_as(S2, OTHER, d, "f", RW | CREAT, 0o2775).unwrap();
    assert_eq!(fa.gid, 500);
    assert_eq!(
        fa.perm & libc::S_ISGID,
        0,
        "non-member cannot keep set-group-id"
    );
}

#[test]
fn sticky_directories_only_let_owners_remove_entries() {
    let mut t = server(8);
    let tmp = t.mkdir(ROOT, "tmp");
    t.setattr(USER, tmp, perm_only(0o1777)).unwrap();
    t.open_as(S2, OTHER, tmp, "theirs", RW | CREAT, 0o644)
        .unwrap();
    t.create(tmp, "mine");
    let rm = |t: &mut T, c, name: &str| {
        t.call(
            S1,
            c,
            Request::Unlink {
                dir: tmp,
                name: name.as_bytes(),
                kind: UnlinkKind::NonDirectory,
                expect: None,
            },
        )
    };
    let third = Cred::of(3000, 3000);
    assert_eq!(rm(&mut t, third, "theirs"), Own::Err(Errno::EPERM));
    assert!(matches!(rm(&mut t, OTHER, "theirs"), Own::Unlinked(..)));
    assert!(
        matches!(rm(&mut t, USER, "mine"), Own::Unlinked(..)),
        "directory owner"
    );
}

/// Server 1 of 2 holding a shard of a distributed directory that server 0
/// owns, and `n` names whose entries live here.
fn shard_of_foreign_directory(n: usize) -> (T, InodeId, Vec<String>) {
    let t = server_n(1, 2, 16);
    let dir = InodeId::new(0, 0, true, 77);
    let names = (0..)
        .map(|i| format!("n{i}"))
        .filter(|name| entry_server(dir, name.as_bytes(), 2) == 1)
        .take(n)
        .collect();
    (t, dir, names)
}

pub(super) fn attrs_of(dir: InodeId, perm: u32, uid: u32, gid: u32) -> Vouched {
    Vouched {
        ino: dir,
        perm,
        uid,
        gid,
        epoch: 0,
        default_acl: false,
        access_acl: false,
        verdict: None,
    }
}

fn make_node(dir: InodeId, name: &str, ftype: FileType) -> Request<'_> {
    Request::MakeNode {
        dir,
        name: name.as_bytes(),
        ftype,
        perm: 0o755,
        rdev: 0,
        target: b"x",
        home: 1,
        spread: 0,
        inherit: atoll_proto::Inherit::Unread,
        umask: 0,
    }
}

fn unlink(dir: InodeId, name: &str) -> Request<'_> {
    Request::Unlink {
        dir,
        name: name.as_bytes(),
        kind: UnlinkKind::NonDirectory,
        expect: None,
    }
}

fn create_req(dir: InodeId, name: &str, flags: u32) -> Request<'_> {
    Request::Open {
        dir,
        name: name.as_bytes(),
        flags: flags | CREAT,
        perm: 0o644,
        umask: 0,
        inherit: atoll_proto::Inherit::Unread,
    }
}

pub(super) fn rename_req<'a>(dir: InodeId, from: &'a str, to: &'a str) -> Request<'a> {
    Request::Rename {
        olddir: dir,
        oldname: from.as_bytes(),
        newdir: dir,
        newname: to.as_bytes(),
        flags: 0,
    }
}

#[test]
fn name_changes_in_a_directory_owned_elsewhere_need_its_attributes() {
    let (mut t, dir, names) = shard_of_foreign_directory(2);
    let (a, b) = (names[0].as_str(), names[1].as_str());
    // Search alone is the client's to have asked the owner for.
    assert_eq!(
        t.call(
            S1,
            OTHER,
            Request::Lookup {
                dir,
                name: a.as_bytes()
            }
        ),
        Own::Err(Errno::ENOENT)
    );
    // A name change without the directory's attributes is a client error.
    for ft in [FileType::Regular, FileType::Directory, FileType::Symlink] {
        assert_eq!(
            t.call(S1, ROOTC, make_node(dir, a, ft)),
            Own::Err(Errno::EPROTO)
        );
    }
    let root_0755 = [attrs_of(dir, 0o755, 0, 0)];
    assert_eq!(
        t.open_as(S1, OTHER, dir, a, RW | CREAT, 0o644).unwrap_err(),
        Errno::EPROTO
    );
    // With them the server applies Linux's rules as if it owned it.
    for ft in [FileType::Regular, FileType::Directory, FileType::Fifo] {
        assert_eq!(
            t.callv(S1, OTHER, &root_0755, make_node(dir, a, ft)),
            Own::Err(Errno::EACCES)
        );
    }
    assert_eq!(
        t.callv(S1, OTHER, &root_0755, create_req(dir, a, RW)),
        Own::Err(Errno::EACCES)
    );
    assert!(matches!(
        t.callv(S1, ROOTC, &root_0755, create_req(dir, a, RW)),
        Own::Opened(_, _, true)
    ));
    // Opening an existing name with O_CREAT needs no write permission.
    let rdonly = libc::O_RDONLY as u32;
    assert!(matches!(
        t.callv(S1, OTHER, &root_0755, create_req(dir, a, rdonly)),
        Own::Opened(_, _, false)
    ));
    assert_eq!(
        t.callv(S1, OTHER, &root_0755, unlink(dir, a)),
        Own::Err(Errno::EACCES)
    );
    assert_eq!(t.call(S1, OTHER, unlink(dir, a)), Own::Err(Errno::EPROTO));
    assert_eq!(
        t.callv(S1, OTHER, &root_0755, rename_req(dir, a, b)),
        Own::Err(Errno::EACCES)
    );
    let link = Request::Link {
        dir,
        name: b.as_bytes(),
        ino: InodeId::new(0, 0, false, 99),
        ftype: FileType::Regular,
        replace: false,
        moved_from: None,
    };
    assert_eq!(
        t.callv(S1, OTHER, &root_0755, link),
        Own::Err(Errno::EACCES)
    );
    // The group class: a member of the directory's group may write.
    t.ok(
        S2,
        OTHER,
        Request::SetGroups {
            set: 0,
            groups: vec![77],
        },
    );
    let group_writable = [attrs_of(dir, 0o775, 0, 77)];
    assert!(matches!(
        t.callv(S2, OTHER, &group_writable, unlink(dir, a)),
        Own::Unlinked(..)
    ));
}

#[test]
fn sticky_bit_of_a_directory_owned_elsewhere_protects_other_users_names() {
    let (mut t, dir, names) = shard_of_foreign_directory(3);
    let tmp = [attrs_of(dir, 0o1777, 0, 0)];
    let third = Cred::of(3000, 3000);
    // `theirs` lives here; `remote` names an inode server 0 owns.
    t.callv(
        S1,
        OTHER,
        &tmp,
        make_node(dir, &names[0], FileType::Regular),
    );
    let remote = InodeId::new(0, 0, false, 99);
    let link = Request::Link {
        dir,
        name: names[1].as_bytes(),
        ino: remote,
        ftype: FileType::Regular,
        replace: false,
        moved_from: None,
    };
    assert!(matches!(t.callv(S1, OTHER, &tmp, link), Own::Linked(None)));
    assert_eq!(
        t.callv(S1, third, &tmp, unlink(dir, &names[0])),
        Own::Err(Errno::EPERM)
    );
    // Nothing is known of the remote inode's owner: refused until vouched.
    assert_eq!(
        t.callv(S1, OTHER, &tmp, unlink(dir, &names[1])),
        Own::Err(Errno::EPERM)
    );
    let theirs = attrs_of(remote, 0o644, OTHER.uid, OTHER.gid);
    assert_eq!(
        t.callv(S1, third, &[tmp[0], theirs], unlink(dir, &names[1])),
        Own::Err(Errno::EPERM)
    );
    assert_eq!(
        t.callv(S1, third, &tmp, rename_req(dir, &names[0], &names[2])),
        Own::Err(Errno::EPERM)
    );
    assert!(matches!(
        t.callv(S1, OTHER, &[tmp[0], theirs], unlink(dir, &names[1])),
        Own::Unlinked(_, _, false)
    ));
    // The directory's owner may remove anything.
    let owned_by_third = [attrs_of(dir, 0o1777, third.uid, 0)];
    assert!(matches!(
        t.callv(S1, third, &owned_by_third, unlink(dir, &names[0])),
        Own::Unlinked(..)
    ));
}

#[test]
fn sticky_directory_owned_here_needs_the_owner_of_a_remote_victim() {
    // An ordinary sticky directory on server 0 naming an inode server 1
    // owns (creation affinity, a hard link or a rename put it there).
    let mut t = server_n(0, 2, 16);
    let tmp = t.mkdir(ROOT, "tmp");
    t.setattr(USER, tmp, perm_only(0o1777)).unwrap();
    let remote = InodeId::new(1, 1, false, 5);
    let link = Request::Link {
        dir: tmp,
        name: b"f",
        ino: remote,
        ftype: FileType::Regular,
        replace: false,
        moved_from: None,
    };
    assert!(matches!(t.call(S2, OTHER, link), Own::Linked(None)));
    let third = Cred::of(3000, 3000);
    assert_eq!(t.call(S1, third, unlink(tmp, "f")), Own::Err(Errno::EPERM));
    let theirs = [attrs_of(remote, 0o644, OTHER.uid, OTHER.gid)];
    assert_eq!(
        t.callv(S1, third, &theirs, unlink(tmp, "f")),
        Own::Err(Errno::EPERM)
    );
    assert!(matches!(
        t.callv(S2, OTHER, &theirs, unlink(tmp, "f")),
        Own::Unlinked(..)
    ));
}

#[test]
fn set_group_id_of_a_directory_owned_elsewhere_is_inherited() {
    let (mut t, dir, names) = shard_of_foreign_directory(2);
    let shared = [attrs_of(dir, 0o2777, 0, 500)];
    let Own::Entry(sub, _) = t.callv(
        S1,
        OTHER,
        &shared,
        make_node(dir, &names[0], FileType::Directory),
    ) else {
        panic!("mkdir refused")
    };
    let a = t.stat(sub).unwrap();
    assert_eq!((a.gid, a.perm & 0o7777), (500, 0o2755));
    let open = Request::Open {
        dir,
        name: names[1].as_bytes(),
        flags: RW | CREAT,
        perm: 0o2775,
        umask: 0,
        inherit: atoll_proto::Inherit::Unread,
    };
    let Own::Opened(_, fa, true) = t.callv(S1, OTHER, &shared, open) else {
        panic!("create refused")
    };
    assert_eq!(
        (fa.gid, fa.perm & 0o7777),
        (500, 0o775),
        "non-member loses set-group-id"
    );
}

#[test]
fn utimens_now_needs_write_access_and_explicit_times_need_ownership() {
    let mut t = server(8);
    let (_, f) = t.create(ROOT, "f");
    let now = SetAttr {
        atime: TimeSet::Now,
        mtime: TimeSet::Now,
        ..SetAttr::NONE
    };
    let explicit = SetAttr {
        mtime: TimeSet::Set(Timespec { sec: 5, nsec: 6 }),
        ..SetAttr::NONE
    };
    assert_eq!(t.setattr(OTHER, f, now), Err(Errno::EACCES));
    t.setattr(USER, f, perm_only(0o666)).unwrap();
    assert!(t.setattr(OTHER, f, now).is_ok());
    assert_eq!(t.setattr(OTHER, f, explicit), Err(Errno::EPERM));
    let a = t.setattr(USER, f, explicit).unwrap();
    assert_eq!(a.mtime, Timespec { sec: 5, nsec: 6 });
}

/// `Touched` is posted, so it can reach a directory's owner after a
/// `utimensat` that another process made once the change was done: the
/// explicit time stays. One that is not overtaken dates the directory at
/// the change; an older one than the last `Touched` does not go back;
/// one from the future is today.
#[test]
fn a_late_touched_never_undoes_a_later_time_set() {
    let mut t = server(8);
    let d = t.mkdir(ROOT, "d");
    let touched = |at: Timespec| Request::Touched { dir: d, at };
    let ts = |sec| Timespec { sec, nsec: 0 };
    let change_at = t.stat(d).unwrap().ctime;
    let explicit = SetAttr {
        mtime: TimeSet::Set(ts(5)),
        ..SetAttr::NONE
    };
    t.setattr(ROOTC, d, explicit).unwrap();
    t.ok(S1, ROOTC, touched(change_at));
    assert_eq!(t.stat(d).unwrap().mtime, ts(5), "the later utimensat wins");

    // A nanosecond after the set: before this server's next now.
    let set_at = t.stat(d).unwrap().ctime;
    let ns = set_at.sec as i128 * 1_000_000_000 + i128::from(set_at.nsec) + 1;
    let after = Timespec {
        sec: (ns / 1_000_000_000) as i64,
        nsec: (ns % 1_000_000_000) as u32,
    };
    let now = ts(after.sec + 1000);
    t.ok(S1, ROOTC, touched(after));
    let a = t.stat(d).unwrap();
    assert_eq!((a.mtime, a.ctime), (after, after), "a change after the set");
    t.ok(S1, ROOTC, touched(change_at));
    assert_eq!(t.stat(d).unwrap().mtime, after, "never backwards");
    t.ok(S1, ROOTC, touched(now));
    let a = t.stat(d).unwrap();
    assert!(a.mtime.sec < now.sec && a.mtime.sec >= after.sec, "{a:?}");
    assert_eq!(t.err(S1, OTHER, touched(now)), Errno::EACCES);
}

// ---------------------------------------------------------------- xattrs

/// Credentials are per thread: one session registers several group lists
/// and each request is checked with the list it names; a list never
/// registered grants nothing, and a number past the limit is refused.
#[test]
fn each_request_is_checked_with_the_group_list_it_names() {
    let mut t = server(8);
    let (_, f) = t.create(ROOT, "f");
    let chgrp = |gid| SetAttr {
        gid: Some(gid),
        ..SetAttr::NONE
    };
    t.setattr(
        ROOTC,
        f,
        SetAttr {
            uid: Some(1000),
            ..SetAttr::NONE
        },
    )
    .unwrap();
    t.ok(
        S1,
        USER,
        Request::SetGroups {
            set: 0,
            groups: vec![],
        },
    );
    t.ok(
        S1,
        USER,
        Request::SetGroups {
            set: 1,
            groups: vec![3000],
        },
    );
    let in_set = |set| Cred {
        groups: set,
        ..USER
    };
    assert_eq!(t.setattr(in_set(0), f, chgrp(3000)), Err(Errno::EPERM));
    assert_eq!(t.setattr(in_set(7), f, chgrp(3000)), Err(Errno::EPERM));
    assert_eq!(t.setattr(in_set(1), f, chgrp(3000)).unwrap().gid, 3000);
    let past = atoll_proto::MAX_GROUP_SETS;
    let refused = t.err(
        S1,
        USER,
        Request::SetGroups {
            set: past,
            groups: vec![1],
        },
    );
    assert_eq!(refused, Errno::EINVAL);
}

#[test]
fn extended_acl_of_a_directory_owned_elsewhere_is_decided_by_the_owners_verdict() {
    let (mut t, dir, names) = shard_of_foreign_directory(3);
    let (a, b) = (names[0].as_str(), names[1].as_str());
    let acl_dir = |perm, who: Cred, granted| Vouched {
        access_acl: true,
        verdict: Some(atoll_proto::Verdict { cred: who, granted }),
        ..attrs_of(dir, perm, 0, 0)
    };
    // `setfacl -m u:2000:rwx` on a root-owned 0755 directory: the mode
    // (its group bits the mask) would refuse OTHER; the owner's ACL allows.
    let allowed = [acl_dir(0o775, OTHER, true)];
    assert!(matches!(
        t.callv(S1, OTHER, &allowed, create_req(dir, a, RW)),
        Own::Opened(_, _, true)
    ));
    assert!(matches!(
        t.callv(S1, OTHER, &allowed, rename_req(dir, a, b)),
        Own::Renamed(..)
    ));
    // `u:2000:r-x`: refused, though the mode's group class says rwx.
    let denied = [acl_dir(0o775, OTHER, false)];
    assert_eq!(
        t.callv(S1, OTHER, &denied, unlink(dir, b)),
        Own::Err(Errno::EACCES)
    );
    assert_eq!(
        t.callv(S1, OTHER, &denied, make_node(dir, a, FileType::Directory)),
        Own::Err(Errno::EACCES)
    );
    // A verdict made for other credentials, or none: a client error.
    let third = Cred::of(3000, 3000);
    assert_eq!(
        t.callv(S1, third, &allowed, unlink(dir, b)),
        Own::Err(Errno::EPROTO)
    );
    let mut regrouped = OTHER;
    regrouped.groups = 1;
    assert_eq!(
        t.callv(S1, regrouped, &allowed, unlink(dir, b)),
        Own::Err(Errno::EPROTO)
    );
    let unasked = [Vouched {
        verdict: None,
        ..allowed[0]
    }];
    assert_eq!(
        t.callv(S1, OTHER, &unasked, unlink(dir, b)),
        Own::Err(Errno::EPROTO)
    );
    // The sticky bit still applies on top of a granted verdict.
    let sticky = [acl_dir(0o1775, third, true)];
    assert_eq!(
        t.callv(S1, third, &sticky, unlink(dir, b)),
        Own::Err(Errno::EPERM)
    );
    assert!(matches!(
        t.callv(S1, OTHER, &allowed, unlink(dir, b)),
        Own::Unlinked(..)
    ));
}
