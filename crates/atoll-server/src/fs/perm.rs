//! Linux's permission rules for one caller (`generic_permission`,
//! `inode_owner_or_capable`, `mode_strip_sgid`, `should_remove_suid`).
//!
//! The caller is described by its fsuid/fsgid (from the request frame),
//! the supplementary groups its session registered with `SetGroups`, and
//! the attributes of inodes owned elsewhere that the request carries
//! (`atoll_proto::Vouched`, for directories this server does not own). Root
//! (fsuid 0) bypasses read/write checks, and execute checks too except that
//! a non-directory needs at least one execute bit, exactly as Linux's
//! `CAP_DAC_OVERRIDE`.

use std::rc::Rc;

use atoll_proto::{Errno, FileType, InodeId, Vouched};

pub const MAY_EXEC: u32 = 1;
pub const MAY_WRITE: u32 = 2;
pub const MAY_READ: u32 = 4;

/// Who is asking: fsuid, fsgid and supplementary groups, and what the
/// request says about inodes owned by other servers.
#[derive(Clone, Debug)]
pub struct Caller<'v> {
    pub uid: u32,
    pub gid: u32,
    pub groups: Rc<[u32]>,
    pub vouched: &'v [Vouched],
}

impl Caller<'_> {
    /// The attributes the request carries for `ino`, if any.
    pub fn vouched_for(&self, ino: InodeId) -> Option<&Vouched> {
        self.vouched.iter().find(|v| v.ino == ino)
    }
    pub fn is_root(&self) -> bool {
        self.uid == 0
    }
    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }
    /// `inode_owner_or_capable`: the owner, or root (`CAP_FOWNER`).
    pub fn owns(&self, uid: u32) -> bool {
        self.is_root() || self.uid == uid
    }
}

/// `generic_permission` for `mask` (a combination of `MAY_*`).
pub fn check(
    ftype: FileType,
    perm: u32,
    uid: u32,
    gid: u32,
    who: &Caller,
    mask: u32,
) -> Result<(), Errno> {
    let mask = mask & 7;
    if who.is_root() {
        if mask & MAY_EXEC != 0 && ftype != FileType::Directory && perm & 0o111 == 0 {
            return Err(Errno::EACCES);
        }
        return Ok(());
    }
    let class = if who.uid == uid {
        perm >> 6
    } else if who.in_group(gid) {
        perm >> 3
    } else {
        perm
    } & 7;
    if class & mask == mask {
        Ok(())
    } else {
        Err(Errno::EACCES)
    }
}

/// Bits a data change (write, truncate) clears when done by a non-root
/// caller: set-user-id always, set-group-id only with group execute (a
/// set-group-id bit without it means mandatory locking, kept by Linux).
pub fn kill_priv(perm: u32) -> u32 {
    let mut p = perm & !(libc::S_ISUID);
    if perm & (libc::S_ISGID | libc::S_IXGRP) == (libc::S_ISGID | libc::S_IXGRP) {
        p &= !libc::S_ISGID;
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    fn who(uid: u32, gid: u32, groups: &[u32]) -> Caller<'static> {
        Caller {
            uid,
            gid,
            groups: groups.into(),
            vouched: &[],
        }
    }

    #[test]
    fn owner_group_other_classes_are_exclusive() {
        // Owner without read is denied even though others may read.
        let r = check(FileType::Regular, 0o044, 5, 6, &who(5, 6, &[]), MAY_READ);
        assert_eq!(r, Err(Errno::EACCES));
        assert!(check(FileType::Regular, 0o040, 1, 6, &who(5, 9, &[6]), MAY_READ).is_ok());
        assert!(check(FileType::Regular, 0o004, 1, 6, &who(5, 9, &[]), MAY_READ).is_ok());
        assert!(check(FileType::Regular, 0o004, 1, 6, &who(5, 9, &[]), MAY_WRITE).is_err());
    }

    #[test]
    fn root_needs_some_exec_bit_for_files_only() {
        let root = who(0, 0, &[]);
        assert!(check(FileType::Regular, 0o000, 1, 1, &root, MAY_READ | MAY_WRITE).is_ok());
        assert_eq!(
            check(FileType::Regular, 0o600, 1, 1, &root, MAY_EXEC),
            Err(Errno::EACCES)
        );
        assert!(check(FileType::Regular, 0o010, 1, 1, &root, MAY_EXEC).is_ok());
        assert!(check(FileType::Directory, 0o000, 1, 1, &root, MAY_EXEC).is_ok());
    }

    #[test]
    fn kill_priv_keeps_sgid_without_group_exec() {
        assert_eq!(kill_priv(0o6755), 0o0755);
        assert_eq!(kill_priv(0o6745), 0o2745);
    }
}
