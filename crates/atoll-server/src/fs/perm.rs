//! Linux's permission rules for one caller (`generic_permission`,
//! `inode_owner_or_capable`, `mode_strip_sgid`, `should_remove_suid`).
//!
//! The caller is described by its fsuid/fsgid (from the request frame),
//! the supplementary groups its session registered with `SetGroups`, and
//! the attributes of inodes owned elsewhere that the request carries
//! (`atoll_proto::Vouched`, for directories this server does not own).
//! Capabilities bypass the checks as in Linux: `CAP_DAC_OVERRIDE` read,
//! write and search, and execute too except that a non-directory needs at
//! least one execute bit; `CAP_DAC_READ_SEARCH` reading files and reading
//! or searching directories; `CAP_FOWNER` the owner checks; `CAP_CHOWN`,
//! `CAP_FSETID`, `CAP_MKNOD` and `CAP_SYS_ADMIN` their own operations. The
//! caller's effective set travels in each request (`Cred::caps`), so a
//! process that dropped them (`seteuid`, `capset`) is checked without them.

use std::rc::Rc;

use atoll_proto::{Cred, Errno, FileType, InodeId, Vouched};

use super::acl;
use super::inode::Inode;

pub const MAY_EXEC: u32 = 1;
pub const MAY_WRITE: u32 = 2;
pub const MAY_READ: u32 = 4;

/// Who is asking: fsuid, fsgid and supplementary groups, and what the
/// request says about inodes owned by other servers.
#[derive(Clone, Debug)]
pub struct Caller<'v> {
    pub uid: u32,
    pub gid: u32,
    /// Effective capabilities (`Cred::CAP_*` bits).
    pub caps: u32,
    pub groups: Rc<[u32]>,
    /// The number the session gave `groups` (`Cred::groups`).
    pub group_list: u32,
    pub vouched: &'v [Vouched],
}

impl Caller<'_> {
    /// The attributes the request carries for `ino`, if any.
    pub fn vouched_for(&self, ino: InodeId) -> Option<&Vouched> {
        self.vouched.iter().find(|v| v.ino == ino)
    }
    /// The credentials the request frame carried.
    pub fn cred(&self) -> Cred {
        Cred {
            uid: self.uid,
            gid: self.gid,
            caps: self.caps,
            groups: self.group_list,
        }
    }
    /// Does the caller hold capability `cap` (a `Cred::CAP_*` bit)?
    pub fn has(&self, cap: u32) -> bool {
        self.caps & cap == cap
    }
    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }
    /// `inode_owner_or_capable`: the owner, or `CAP_FOWNER`.
    pub fn owns(&self, uid: u32) -> bool {
        self.has(Cred::CAP_FOWNER) || self.uid == uid
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
    check_with_acl(ftype, perm, uid, gid, None, who, mask)
}

/// `generic_permission` of an inode owned here, with its access ACL.
pub fn may(i: &Inode, who: &Caller, mask: u32) -> Result<(), Errno> {
    let acl = i.xattrs.get(acl::ACL_ACCESS).map(Vec::as_slice);
    check_with_acl(i.ftype, i.perm, i.uid, i.gid, acl, who, mask)
}

/// `generic_permission` with the inode's access ACL, if it has one: as
/// Linux's `acl_permission_check`, the owner goes by the mode, and the ACL
/// decides for everyone else while the mode has group bits.
fn check_with_acl(
    ftype: FileType,
    perm: u32,
    uid: u32,
    gid: u32,
    acl: Option<&[u8]>,
    who: &Caller,
    mask: u32,
) -> Result<(), Errno> {
    let mask = mask & 7;
    let granted = match acl {
        Some(acl) if who.uid != uid && perm & 0o070 != 0 => acl::permits(acl, gid, who, mask),
        _ => {
            let class = if who.uid == uid {
                perm >> 6
            } else if who.in_group(gid) {
                perm >> 3
            } else {
                perm
            } & 7;
            class & mask == mask
        }
    };
    if granted {
        return Ok(());
    }
    // The capability overrides, in the order of Linux's generic_permission.
    if ftype == FileType::Directory {
        if mask & MAY_WRITE == 0 && who.has(Cred::CAP_DAC_READ_SEARCH) {
            return Ok(());
        }
        if who.has(Cred::CAP_DAC_OVERRIDE) {
            return Ok(());
        }
        return Err(Errno::EACCES);
    }
    if mask == MAY_READ && who.has(Cred::CAP_DAC_READ_SEARCH) {
        return Ok(());
    }
    if (mask & MAY_EXEC == 0 || perm & 0o111 != 0) && who.has(Cred::CAP_DAC_OVERRIDE) {
        return Ok(());
    }
    Err(Errno::EACCES)
}

/// `mask` on a directory owned elsewhere whose vouched attributes `v`
/// say it has an extended access ACL. Only its owner can evaluate the ACL
/// (`posix_acl_permission`), so the request carries the owner's verdict on
/// write and search for the caller (`atoll_proto::Verdict`, which says why
/// that is enough) and this takes it, for exactly the credentials it was
/// made for. Search alone the client asked the owner for before sending
/// (`Access`, Hare §3.7.1), as when nothing is vouched. A name change
/// without a verdict for these credentials is a client error (`EPROTO`).
pub fn acl_verdict(v: &Vouched, who: &Caller, mask: u32) -> Result<(), Errno> {
    if mask & MAY_WRITE == 0 {
        return Ok(());
    }
    match v.verdict {
        Some(d) if d.cred == who.cred() && mask & !(MAY_WRITE | MAY_EXEC) == 0 => {
            if d.granted {
                Ok(())
            } else {
                Err(Errno::EACCES)
            }
        }
        _ => Err(Errno::EPROTO),
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
            caps: Cred::of(uid, gid).caps,
            groups: groups.into(),
            group_list: 0,
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
    fn capabilities_not_the_uid_bypass_checks() {
        let mut root_without_caps = who(0, 0, &[]);
        root_without_caps.caps = 0;
        assert_eq!(
            check(FileType::Regular, 0o600, 1, 1, &root_without_caps, MAY_READ),
            Err(Errno::EACCES)
        );
        assert!(!root_without_caps.owns(1));
        let mut reader = who(7, 7, &[]);
        reader.caps = Cred::CAP_DAC_READ_SEARCH;
        assert!(check(FileType::Regular, 0o000, 1, 1, &reader, MAY_READ).is_ok());
        assert!(check(FileType::Regular, 0o000, 1, 1, &reader, MAY_WRITE).is_err());
        assert!(check(
            FileType::Directory,
            0o000,
            1,
            1,
            &reader,
            MAY_EXEC | MAY_READ
        )
        .is_ok());
        assert!(check(FileType::Directory, 0o000, 1, 1, &reader, MAY_WRITE).is_err());
        let mut fowner = who(7, 7, &[]);
        fowner.caps = Cred::CAP_FOWNER;
        assert!(fowner.owns(1));
        assert!(check(FileType::Regular, 0o000, 1, 1, &fowner, MAY_READ).is_err());
    }

    fn acl_dir(verdict: Option<atoll_proto::Verdict>) -> Vouched {
        Vouched {
            ino: InodeId(7),
            perm: 0o755,
            uid: 0,
            gid: 0,
            epoch: 0,
            default_acl: false,
            access_acl: true,
            verdict,
        }
    }

    #[test]
    fn an_extended_acl_directory_is_decided_by_the_verdict_for_these_credentials() {
        let nobody = who(65534, 65534, &[]);
        let said = |granted| {
            Some(atoll_proto::Verdict {
                cred: nobody.cred(),
                granted,
            })
        };
        let wx = MAY_WRITE | MAY_EXEC;
        // The mode (0755, owned by root) alone would refuse; the owner's
        // ACL said yes.
        let v = acl_dir(said(true));
        assert_eq!(
            check(FileType::Directory, v.perm, v.uid, v.gid, &nobody, wx),
            Err(Errno::EACCES)
        );
        assert!(acl_verdict(&v, &nobody, wx).is_ok());
        assert_eq!(
            acl_verdict(&acl_dir(said(false)), &nobody, wx),
            Err(Errno::EACCES)
        );
        // Search alone was asked of the owner before the request.
        assert!(acl_verdict(&acl_dir(said(false)), &nobody, MAY_EXEC).is_ok());
        // No verdict, or one made for other credentials: refused loudly.
        assert_eq!(acl_verdict(&acl_dir(None), &nobody, wx), Err(Errno::EPROTO));
        let mut grouped = nobody.clone();
        grouped.group_list = 3; // after setgroups
        assert_eq!(acl_verdict(&v, &grouped, wx), Err(Errno::EPROTO));
        let root = who(0, 0, &[]);
        assert_eq!(acl_verdict(&v, &root, wx), Err(Errno::EPROTO));
        let mut dropped = nobody.clone();
        dropped.caps = Cred::CAP_DAC_OVERRIDE;
        assert_eq!(acl_verdict(&v, &dropped, wx), Err(Errno::EPROTO));
    }

    #[test]
    fn kill_priv_keeps_sgid_without_group_exec() {
        assert_eq!(kill_priv(0o6755), 0o0755);
        assert_eq!(kill_priv(0o6745), 0o2745);
    }
}
