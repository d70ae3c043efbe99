//! Extended attributes (`user.*`, `trusted.*`, `security.*`, and the
//! POSIX ACLs of `super::acl` under `system.*`) of inodes owned here,
//! with Linux's permission rules (`xattr_permission`) and bounds: a value
//! past `XATTR_SIZE_MAX` is `E2BIG`; one that fits no frame, or past the
//! inode's space or the instance's share of memory (`limits`), `ENOSPC`.

use atoll_proto::{Cred, Errno, FileType, InodeId, Reply, MAX_XATTR_VALUE};

use super::acl;
use super::perm::{may, Caller, MAY_READ, MAY_WRITE};
use super::{limits, now, FileServer, R};
use crate::store::BlockStore;

/// Bytes of names + values one inode's extended attributes may use.
const MAX_XATTR_TOTAL: usize = 64 * 1024;
/// Bytes of names one inode's extended attributes may use (a `ListXattr`
/// reply must fit one frame).
const MAX_XATTR_NAMES: usize = 8 * 1024;
pub(super) const XATTR_CREATE: u32 = 1;
pub(super) const XATTR_REPLACE: u32 = 2;

impl<S: BlockStore> FileServer<S> {
    /// Linux's `xattr_permission` for `name` with `mask`.
    fn xattr_check(&self, who: &Caller, ino: InodeId, name: &[u8], mask: u32) -> Result<(), Errno> {
        if name.len() > 255 {
            return Err(Errno::ERANGE);
        }
        let i = self.inode(ino)?;
        let write = mask & MAY_WRITE != 0;
        // Linux's VFS leaves `system.*` to the handler: an ACL is read by
        // anyone, set by its owner (`acl::set_acl`).
        if acl::is_acl(name) {
            return if i.ftype == FileType::Symlink {
                Err(Errno::EOPNOTSUPP)
            } else {
                Ok(())
            };
        }
        // `security.*` on any type: read by anyone, written with
        // `CAP_SYS_ADMIN` (`cap_inode_setxattr`), as tmpfs keeps them.
        if let Some(rest) = name.strip_prefix(b"security.") {
            if rest.is_empty() {
                return Err(Errno::EINVAL);
            }
            if write && !who.has(Cred::CAP_SYS_ADMIN) {
                return Err(Errno::EPERM);
            }
            return Ok(());
        }
        if let Some(rest) = name.strip_prefix(b"trusted.") {
            if rest.is_empty() {
                return Err(Errno::EINVAL);
            }
            if !who.has(Cred::CAP_SYS_ADMIN) {
                return Err(if write { Errno::EPERM } else { Errno::ENODATA });
            }
            return Ok(());
        }
        let Some(rest) = name.strip_prefix(b"user.") else {
            return Err(Errno::ENOTSUP);
        };
        if rest.is_empty() {
            return Err(Errno::EINVAL);
        }
        if !matches!(i.ftype, FileType::Regular | FileType::Directory) {
            return Err(if write { Errno::EPERM } else { Errno::ENODATA });
        }
        if write
            && i.ftype == FileType::Directory
            && i.perm & libc::S_ISVTX != 0
            && !who.owns(i.uid)
        {
            return Err(Errno::EPERM);
        }
        may(i, who, mask)
    }

    pub(super) fn get_xattr<'o>(
        &self,
        who: &Caller,
        ino: InodeId,
        name: &[u8],
        out: &'o mut Vec<u8>,
    ) -> R<'o> {
        self.xattr_check(who, ino, name, MAY_READ)?;
        let v = self.inode(ino)?.xattrs.get(name).ok_or(Errno::ENODATA)?;
        out.clear();
        out.extend_from_slice(v);
        Ok(Reply::Xattr(out))
    }

    /// `setxattr` (`value` set) or `removexattr` (`None`).
    pub(super) fn set_xattr<'o>(
        &mut self,
        who: &Caller,
        ino: InodeId,
        name: &[u8],
        value: Option<&[u8]>,
        flags: u32,
    ) -> R<'o> {
        if flags & !(XATTR_CREATE | XATTR_REPLACE) != 0 {
            return Err(Errno::EINVAL);
        }
        self.xattr_check(who, ino, name, MAY_WRITE)?;
        if acl::is_acl(name) {
            return self.set_acl(who, ino, name, value);
        }
        self.store_xattr(ino, name, value, flags)
    }

    /// Set (or remove) an attribute once the caller may: bounds, the
    /// xattr space of the inode and the instance (`limits`).
    pub(super) fn store_xattr<'o>(
        &mut self,
        ino: InodeId,
        name: &[u8],
        value: Option<&[u8]>,
        flags: u32,
    ) -> R<'o> {
        // Linux refuses values past `XATTR_SIZE_MAX` before any file
        // system sees them; a value that fits no frame is one that does
        // not fit the inode's xattr space (as ext4 without `ea_inode`).
        match value.map_or(0, |v| v.len()) {
            n if n > limits::XATTR_SIZE_MAX => return Err(Errno::E2BIG),
            n if n > MAX_XATTR_VALUE => return Err(Errno::ENOSPC),
            _ => {}
        }
        let before = limits::xattr_size(self.inode(ino)?);
        let grows = match (value, self.inode(ino)?.xattrs.get(name)) {
            (Some(v), Some(old)) => v.len().saturating_sub(old.len()),
            (Some(v), None) => name.len() + 1 + v.len(),
            (None, _) => 0,
        } as u64;
        if grows > 0 {
            self.admit(limits::XATTR_BYTES, grows)?;
        }
        let r = self.set_xattr_here(ino, name, value, flags);
        let after = self.inode(ino).map_or(before, limits::xattr_size);
        self.acct.xattr_bytes = self.acct.xattr_bytes + after - before;
        r
    }

    /// `set_xattr` once the request is allowed and its bytes reserved.
    fn set_xattr_here<'o>(
        &mut self,
        ino: InodeId,
        name: &[u8],
        value: Option<&[u8]>,
        flags: u32,
    ) -> R<'o> {
        let i = self.inode_mut(ino)?;
        let exists = i.xattrs.contains_key(name);
        match value {
            None if !exists => return Err(Errno::ENODATA),
            None => {
                i.xattrs.remove(name);
            }
            Some(v) => {
                if flags & XATTR_CREATE != 0 && exists {
                    return Err(Errno::EEXIST);
                }
                if flags & XATTR_REPLACE != 0 && !exists {
                    return Err(Errno::ENODATA);
                }
                let old = i.xattrs.get(name).map_or(0, |o| o.len() + name.len() + 1);
                let total: usize = i.xattrs.iter().map(|(k, v)| k.len() + 1 + v.len()).sum();
                let names: usize = i.xattrs.keys().map(|k| k.len() + 1).sum();
                let old_name = if exists { name.len() + 1 } else { 0 };
                if total - old + name.len() + 1 + v.len() > MAX_XATTR_TOTAL
                    || names - old_name + name.len() + 1 > MAX_XATTR_NAMES
                {
                    return Err(Errno::ENOSPC);
                }
                i.xattrs.insert(name.to_vec(), v.to_vec());
            }
        }
        i.ctime = now();
        Ok(Reply::Ok)
    }

    pub(super) fn list_xattr<'o>(&self, who: &Caller, ino: InodeId, out: &'o mut Vec<u8>) -> R<'o> {
        let i = self.inode(ino)?;
        out.clear();
        for k in i.xattrs.keys() {
            if k.starts_with(b"trusted.") && !who.has(Cred::CAP_SYS_ADMIN) {
                continue;
            }
            out.extend_from_slice(k);
            out.push(0);
        }
        Ok(Reply::XattrNames(out))
    }
}
