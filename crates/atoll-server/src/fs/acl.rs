//! POSIX access control lists as tmpfs keeps them: the extended
//! attributes `system.posix_acl_access` and `system.posix_acl_default`
//! in Linux's xattr form (`posix_acl_xattr_header`, version 2, then one
//! `{tag: u16, perm: u16, id: u32}` per entry, little-endian).
//!
//! What Linux does, and this module with it (`fs/posix_acl.c`):
//!
//! * setting one parses and validates it (`posix_acl_from_xattr`,
//!   `posix_acl_valid`); only the owner (or `CAP_FOWNER`) may, a default
//!   ACL only on a directory, none on a symlink; a value with no entries
//!   removes the ACL;
//! * an access ACL is the mode's other half (`posix_acl_update_mode`): its
//!   owner, group-class (the mask, or the owning group's entry) and other
//!   permissions become the mode's, and an ACL that says no more than the
//!   mode is not kept at all;
//! * `chmod` rewrites the same three entries (`posix_acl_chmod`);
//! * permission checks of an inode with an access ACL follow its entries
//!   (`posix_acl_permission`) whenever the mode has group bits;
//! * a new inode in a directory with a default ACL (`posix_acl_create`)
//!   takes no umask: the ACL masks the mode asked for, becomes the new
//!   inode's access ACL masked by that mode (`posix_acl_create_masq`),
//!   kept only if it says more than the mode, and a new directory keeps
//!   it as its own default ACL too. The server making the inode may not
//!   own the directory (creation affinity, distributed directories); the
//!   client then sends the ACL with the request (`atoll_proto::Inherit`,
//!   which says why that is fresh enough).
//!
//! Stored as ordinary attributes of the inode, so the journal, `listxattr`
//! and the xattr space accounting see them as tmpfs's `simple_xattr`s.

use atoll_proto::{Cred, Errno, FileType, Inherit, InodeId, Reply};

use super::perm::{Caller, MAY_EXEC, MAY_READ, MAY_WRITE};
use super::{now, FileServer, R};
use crate::store::BlockStore;

pub const ACL_ACCESS: &[u8] = b"system.posix_acl_access";
pub const ACL_DEFAULT: &[u8] = b"system.posix_acl_default";

const ACL_VERSION: u32 = 2;
const USER_OBJ: u16 = 0x01;
const USER: u16 = 0x02;
const GROUP_OBJ: u16 = 0x04;
const GROUP: u16 = 0x08;
const MASK: u16 = 0x10;
const OTHER: u16 = 0x20;
const HEADER: usize = 4;
const ENTRY: usize = 8;

/// One entry of an ACL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct AclEntry {
    tag: u16,
    perm: u16,
    id: u32,
}

pub fn is_acl(name: &[u8]) -> bool {
    name == ACL_ACCESS || name == ACL_DEFAULT
}

/// The entries of a stored (so already validated) ACL.
fn entries(value: &[u8]) -> impl Iterator<Item = AclEntry> + '_ {
    value
        .get(HEADER..)
        .unwrap_or(&[])
        .chunks_exact(ENTRY)
        .map(|e| AclEntry {
            tag: u16::from_le_bytes([e[0], e[1]]),
            perm: u16::from_le_bytes([e[2], e[3]]),
            id: u32::from_le_bytes([e[4], e[5], e[6], e[7]]),
        })
}

fn encode(list: &[AclEntry]) -> Vec<u8> {
    let mut v = Vec::with_capacity(HEADER + ENTRY * list.len());
    v.extend_from_slice(&ACL_VERSION.to_le_bytes());
    for e in list {
        v.extend_from_slice(&e.tag.to_le_bytes());
        v.extend_from_slice(&e.perm.to_le_bytes());
        v.extend_from_slice(&e.id.to_le_bytes());
    }
    v
}

/// `posix_acl_from_xattr` then `posix_acl_valid`: `None` for a value with
/// no entries (which removes the ACL); `EOPNOTSUPP` for another version,
/// `EINVAL` for a malformed list or entries out of Linux's order
/// (owner, named users, owning group, named groups, mask, other; the mask
/// required exactly when there are named entries).
fn parse(value: &[u8]) -> Result<Option<Vec<AclEntry>>, Errno> {
    if value.is_empty() {
        return Ok(None);
    }
    if value.len() < HEADER {
        return Err(Errno::EINVAL);
    }
    if u32::from_le_bytes([value[0], value[1], value[2], value[3]]) != ACL_VERSION {
        return Err(Errno::EOPNOTSUPP);
    }
    if !(value.len() - HEADER).is_multiple_of(ENTRY) {
        return Err(Errno::EINVAL);
    }
    let list: Vec<AclEntry> = entries(value).collect();
    if list.is_empty() {
        return Ok(None);
    }
    // The state machine of `posix_acl_valid`; 0 is "complete".
    let mut state = USER_OBJ;
    let mut needs_mask = false;
    for e in &list {
        if e.perm & !7 != 0 {
            return Err(Errno::EINVAL);
        }
        state = match (e.tag, state) {
            (USER_OBJ, USER_OBJ) => USER,
            (USER, USER) => {
                needs_mask = true;
                USER
            }
            (GROUP_OBJ, USER) => GROUP,
            (GROUP, GROUP) => {
                needs_mask = true;
                GROUP
            }
            (MASK, GROUP) => OTHER,
            (OTHER, OTHER) => 0,
            (OTHER, GROUP) if !needs_mask => 0,
            _ => return Err(Errno::EINVAL),
        };
    }
    if state != 0 {
        return Err(Errno::EINVAL);
    }
    Ok(Some(list))
}

/// `posix_acl_equiv_mode`: the permission bits the ACL gives the three
/// classes, and whether it says more than they can (named entries or a
/// mask).
fn equiv_mode(list: &[AclEntry]) -> (u32, bool) {
    let mut mode = 0;
    let mut more = false;
    for e in list {
        let p = u32::from(e.perm & 7);
        match e.tag {
            USER_OBJ => mode |= p << 6,
            GROUP_OBJ => mode |= p << 3,
            OTHER => mode |= p,
            MASK => {
                mode = (mode & !0o070) | (p << 3);
                more = true;
            }
            _ => more = true,
        }
    }
    (mode, more)
}

/// `posix_acl_chmod`: the access ACL `value` after the mode became `perm`.
pub fn chmod(value: &[u8], perm: u32) -> Vec<u8> {
    let mut list: Vec<AclEntry> = entries(value).collect();
    let has_mask = list.iter().any(|e| e.tag == MASK);
    for e in &mut list {
        let bits = match e.tag {
            USER_OBJ => perm >> 6,
            MASK => perm >> 3,
            GROUP_OBJ if !has_mask => perm >> 3,
            OTHER => perm,
            _ => continue,
        };
        e.perm = (bits & 7) as u16;
    }
    encode(&list)
}

/// `posix_acl_create_masq`: mask the entries of `acl` (a valid default
/// ACL, becoming a new inode's access ACL) by the mode `mode` asked for,
/// and the mode's permission bits by the ACL's owner, group-class (the
/// mask, or the owning group's entry without one) and other entries.
/// Returns the new mode (set-id and sticky bits kept) and whether the
/// ACL says more than it (named entries or a mask), i.e. must be kept.
fn create_masq(acl: &mut [AclEntry], mode: u32) -> (u32, bool) {
    let mut perm = mode & 0o777;
    let mut more = false;
    let mut group_class = None;
    for (n, e) in acl.iter_mut().enumerate() {
        let p = u32::from(e.perm);
        match e.tag {
            USER_OBJ => {
                e.perm = (p & (perm >> 6)) as u16;
                perm &= (u32::from(e.perm) << 6) | !0o700;
            }
            OTHER => {
                e.perm = (p & perm) as u16;
                perm &= u32::from(e.perm) | !0o007;
            }
            MASK => {
                group_class = Some(n);
                more = true;
            }
            GROUP_OBJ if group_class.is_none() => group_class = Some(n),
            USER | GROUP => more = true,
            _ => {}
        }
    }
    // A valid ACL has an owning group's entry, and a mask after it if any.
    if let Some(g) = group_class.and_then(|n| acl.get_mut(n)) {
        g.perm &= ((perm >> 3) & 7) as u16;
        perm &= (u32::from(g.perm) << 3) | !0o070;
    }
    ((mode & !0o777) | perm, more)
}

/// What a new inode takes from its parent's default ACL, between the
/// request (`FileServer::inheritance`) and the new inode
/// (`FileServer::inherit`): `None` when the parent has none.
pub struct Inheritance(Option<Vec<AclEntry>>);

impl Inheritance {
    /// The mode to make the inode of type `ftype` with, for `perm` asked
    /// for: `posix_acl_create` takes away the umask only when the parent
    /// has no default ACL (the ACL masks the mode later, in `inherit`,
    /// after the set-group-id rules of `new_inode`, as Linux masks it
    /// after `vfs_prepare_mode`). A symlink's mode is fixed.
    pub fn perm(&self, ftype: FileType, perm: u32, umask: u32) -> u32 {
        match (&self.0, ftype) {
            (_, FileType::Symlink) | (Some(_), _) => perm,
            (None, _) => perm & !(umask & 0o777),
        }
    }
}

/// `posix_acl_permission` for a caller that does not own the inode: does
/// the stored access ACL `value` grant `want` (`MAY_*` bits)?
pub fn permits(value: &[u8], gid: u32, who: &Caller, want: u32) -> bool {
    let want = want & (MAY_READ | MAY_WRITE | MAY_EXEC);
    let list: Vec<AclEntry> = entries(value).collect();
    let mask = list
        .iter()
        .find(|e| e.tag == MASK)
        .map_or(7, |e| u32::from(e.perm));
    let mut found_group = false;
    for e in &list {
        let p = u32::from(e.perm);
        match e.tag {
            USER if e.id == who.uid => return p & mask & want == want,
            GROUP_OBJ | GROUP => {
                let id = if e.tag == GROUP_OBJ { gid } else { e.id };
                if who.in_group(id) {
                    found_group = true;
                    if p & want == want {
                        return p & mask & want == want;
                    }
                }
            }
            OTHER => return !found_group && p & want == want,
            _ => {}
        }
    }
    false
}

impl<S: BlockStore> FileServer<S> {
    /// The default ACL a new inode of type `ftype` in `dir` inherits: the
    /// directory's own when this server owns it, otherwise the one the
    /// request carries (`inherit`, see `atoll_proto::Inherit`). A request
    /// whose vouched attributes say the directory has one but that
    /// carries none is a client error (`EPROTO`), as a name change
    /// without vouched attributes is. Symlinks inherit nothing. Hot path
    /// of every creation: a directory without extended attributes costs
    /// one lookup of its inode.
    pub(super) fn inheritance(
        &self,
        dir: InodeId,
        who: &Caller,
        ftype: FileType,
        inherit: Inherit,
    ) -> Result<Inheritance, Errno> {
        if ftype == FileType::Symlink {
            return Ok(Inheritance(None));
        }
        if self.owns(dir) {
            let acl = self
                .inodes
                .get(&dir)
                .filter(|d| !d.xattrs.is_empty())
                .and_then(|d| d.xattrs.get(ACL_DEFAULT))
                .map(|v| entries(v).collect());
            return Ok(Inheritance(acl));
        }
        match inherit {
            Inherit::Acl(v) => Ok(Inheritance(parse(v).map_err(|_| Errno::EINVAL)?)),
            Inherit::Unread if who.vouched_for(dir).is_some_and(|v| v.default_acl) => {
                Err(Errno::EPROTO)
            }
            Inherit::Unread => Ok(Inheritance(None)),
        }
    }

    /// Give new inode `ino` (made with `Inheritance::perm`) what it
    /// inherits: its mode masked by the default ACL, the masked ACL as its
    /// access ACL when that says more than the mode, and, for a directory,
    /// the default ACL itself (Linux's `simple_acl_create`). On failure
    /// (no room for the attributes: `ENOSPC`) the inode, which nothing
    /// names or opens yet, is gone.
    pub(super) fn inherit(&mut self, ino: InodeId, from: Inheritance) -> Result<(), Errno> {
        let Some(default) = from.0 else {
            return Ok(());
        };
        let i = self.inode_mut(ino)?;
        let mut access = default.clone();
        let (perm, more) = create_masq(&mut access, i.perm);
        i.perm = perm;
        let is_dir = i.ftype == FileType::Directory;
        let mut stored = Ok(Reply::Ok);
        if more {
            stored = self.store_xattr(ino, ACL_ACCESS, Some(&encode(&access)), 0);
        }
        if is_dir && stored.is_ok() {
            stored = self.store_xattr(ino, ACL_DEFAULT, Some(&encode(&default)), 0);
        }
        if let Err(e) = stored {
            if let Some(i) = self.inodes.remove(&ino) {
                self.acct.xattr_bytes -= super::limits::xattr_size(&i);
            }
            return Err(e);
        }
        Ok(())
    }

    /// `setxattr`/`removexattr` of an ACL name (`value` `None` removes):
    /// Linux's `set_posix_acl` with `posix_acl_update_mode`.
    pub(super) fn set_acl<'o>(
        &mut self,
        who: &Caller,
        ino: InodeId,
        name: &[u8],
        value: Option<&[u8]>,
    ) -> R<'o> {
        let list = value.map(parse).transpose()?.flatten();
        let i = self.inode(ino)?;
        if i.ftype == FileType::Symlink {
            return Err(Errno::EOPNOTSUPP);
        }
        if name == ACL_DEFAULT && i.ftype != FileType::Directory {
            return if list.is_some() {
                Err(Errno::EACCES)
            } else {
                Ok(Reply::Ok)
            };
        }
        if !who.owns(i.uid) {
            return Err(Errno::EPERM);
        }
        let mut perm = i.perm;
        let mut keep = list;
        if name == ACL_ACCESS {
            if let Some(l) = &keep {
                let (mode, more) = equiv_mode(l);
                perm = (perm & !0o777) | mode;
                if !more {
                    keep = None;
                }
                if !who.in_group(i.gid) && !who.has(Cred::CAP_FSETID) {
                    perm &= !libc::S_ISGID;
                }
            }
        }
        let stored = keep.as_deref().map(encode);
        if stored.is_some() || i.xattrs.contains_key(name) {
            self.store_xattr(ino, name, stored.as_deref(), 0)?;
        }
        let i = self.inode_mut(ino)?;
        i.perm = perm;
        i.ctime = now();
        if i.ftype == FileType::Directory {
            // Cached search grants in it may no longer hold (Hare §3.7.1);
            // nor may its cached attributes' `default_acl`, which decides
            // whether a creation elsewhere carries the default ACL
            // (`atoll_proto::Inherit`): dropped before this returns.
            let sessions = self.sessions.keys().copied();
            self.track.dir_access_changed(ino, sessions);
        }
        Ok(Reply::Ok)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const X: u32 = u32::MAX;

    fn acl(list: &[(u16, u16, u32)]) -> Vec<u8> {
        let l: Vec<AclEntry> = list
            .iter()
            .map(|&(tag, perm, id)| AclEntry { tag, perm, id })
            .collect();
        encode(&l)
    }

    fn who(uid: u32, gid: u32, groups: &[u32]) -> Caller<'static> {
        Caller {
            uid,
            gid,
            caps: 0,
            groups: groups.into(),
            group_list: 0,
            vouched: &[],
        }
    }

    #[test]
    fn parse_follows_posix_acl_valid() {
        let minimal = acl(&[(USER_OBJ, 7, X), (GROUP_OBJ, 0, X), (OTHER, 5, X)]);
        assert_eq!(parse(&minimal).unwrap().unwrap().len(), 3);
        assert_eq!(parse(b"").unwrap(), None);
        assert_eq!(parse(&2u32.to_le_bytes()).unwrap(), None);
        let mut v1 = minimal.clone();
        v1[0] = 1;
        assert_eq!(parse(&v1), Err(Errno::EOPNOTSUPP));
        let mut odd = minimal.clone();
        odd.push(0);
        assert_eq!(parse(&odd), Err(Errno::EINVAL));
        let no_mask = acl(&[
            (USER_OBJ, 6, X),
            (USER, 7, 9),
            (GROUP_OBJ, 4, X),
            (OTHER, 0, X),
        ]);
        assert_eq!(parse(&no_mask), Err(Errno::EINVAL));
        let unordered = acl(&[(GROUP_OBJ, 4, X), (USER_OBJ, 6, X), (OTHER, 0, X)]);
        assert_eq!(parse(&unordered), Err(Errno::EINVAL));
        let bad_perm = acl(&[(USER_OBJ, 8, X), (GROUP_OBJ, 4, X), (OTHER, 0, X)]);
        assert_eq!(parse(&bad_perm), Err(Errno::EINVAL));
    }

    #[test]
    fn equiv_mode_and_chmod_keep_mode_and_acl_in_step() {
        let l = parse(&acl(&[
            (USER_OBJ, 6, X),
            (USER, 7, 9),
            (GROUP_OBJ, 4, X),
            (MASK, 5, X),
            (OTHER, 0, X),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(equiv_mode(&l), (0o650, true));
        let changed = chmod(&encode(&l), 0o741);
        let after: Vec<AclEntry> = entries(&changed).collect();
        let perms: Vec<u16> = after.iter().map(|e| e.perm).collect();
        // Owner 7, named user untouched, owning group untouched, mask 4, other 1.
        assert_eq!(perms, [7, 7, 4, 4, 1]);
    }

    /// `create_masq` of `default` for `mode`: the new mode, whether the
    /// ACL is kept, and its entries' permissions.
    fn masq(default: &[(u16, u16, u32)], mode: u32) -> (u32, bool, Vec<u16>) {
        let mut l = parse(&acl(default)).unwrap().unwrap();
        let (mode, more) = create_masq(&mut l, mode);
        (mode, more, l.iter().map(|e| e.perm).collect())
    }

    #[test]
    fn create_masq_without_a_mask_masks_the_owning_group_and_is_not_kept() {
        // setfacl -d -m u::rwx,g::r-x,o::--- ; creat(f, 0666).
        let d = [(USER_OBJ, 7, X), (GROUP_OBJ, 5, X), (OTHER, 0, X)];
        assert_eq!(masq(&d, 0o666), (0o640, false, vec![6, 4, 0]));
        // mkdir(d, 0777): the mode is the ACL's; set-id and sticky bits stay.
        assert_eq!(masq(&d, 0o3777), (0o3750, false, vec![7, 5, 0]));
        // The mode takes away what the ACL grants, and the reverse.
        let d = [(USER_OBJ, 6, X), (GROUP_OBJ, 7, X), (OTHER, 4, X)];
        assert_eq!(masq(&d, 0o751), (0o650, false, vec![6, 5, 0]));
    }

    #[test]
    fn create_masq_with_a_mask_masks_the_mask_and_keeps_named_entries() {
        // setfacl -d -m u:65534:rwx,g:50:rw-,g::r-x,o::- ; creat(f, 0666).
        let d = [
            (USER_OBJ, 7, X),
            (USER, 7, 65534),
            (GROUP_OBJ, 5, X),
            (GROUP, 6, 50),
            (MASK, 7, X),
            (OTHER, 0, X),
        ];
        // The group class is the mask's: rw- from 0666; the named entries
        // and the owning group keep theirs (the mask limits them).
        assert_eq!(masq(&d, 0o666), (0o660, true, vec![6, 7, 5, 6, 6, 0]));
        // A mask narrower than the mode narrows the mode's group bits.
        let mut narrow = d;
        narrow[4].1 = 4;
        assert_eq!(masq(&narrow, 0o777), (0o740, true, vec![7, 7, 5, 6, 4, 0]));
        // A mask alone (no named entry) still says more than the mode.
        let d = [
            (USER_OBJ, 7, X),
            (GROUP_OBJ, 7, X),
            (MASK, 5, X),
            (OTHER, 5, X),
        ];
        assert_eq!(masq(&d, 0o777), (0o755, true, vec![7, 7, 5, 5]));
    }

    #[test]
    fn inheritance_replaces_the_umask_only_with_a_default_acl() {
        let d = parse(&acl(&[(USER_OBJ, 7, X), (GROUP_OBJ, 5, X), (OTHER, 0, X)])).unwrap();
        let with = Inheritance(d);
        let without = Inheritance(None);
        assert_eq!(with.perm(FileType::Regular, 0o666, 0o077), 0o666);
        assert_eq!(without.perm(FileType::Regular, 0o666, 0o077), 0o600);
        assert_eq!(without.perm(FileType::Directory, 0o1777, 0o022), 0o1755);
        assert_eq!(without.perm(FileType::Symlink, 0o777, 0o077), 0o777);
    }

    #[test]
    fn permission_follows_named_entries_and_the_mask() {
        let a = acl(&[
            (USER_OBJ, 6, X),
            (USER, 4, 65534),
            (GROUP_OBJ, 0, X),
            (GROUP, 6, 50),
            (MASK, 4, X),
            (OTHER, 0, X),
        ]);
        assert!(permits(&a, 0, &who(65534, 1, &[]), MAY_READ));
        assert!(!permits(&a, 0, &who(65534, 1, &[]), MAY_WRITE));
        // A member of a named group: its write is masked off.
        assert!(permits(&a, 0, &who(7, 50, &[]), MAY_READ));
        assert!(!permits(&a, 0, &who(7, 50, &[]), MAY_WRITE));
        // In the owning group (no permissions) only: denied, not "other".
        assert!(!permits(&a, 0, &who(7, 0, &[]), MAY_READ));
        assert!(!permits(&a, 0, &who(7, 1, &[]), MAY_READ));
    }
}
