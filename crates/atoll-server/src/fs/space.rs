//! File space: the requests that take blocks from this server's share of
//! the buffer cache for a file's range (`fallocate`, `MapBlocks`). Blocks
//! come from the server's representative of the block pool (`blocks`),
//! which borrows from the pool's root when its list runs out; `ENOSPC`
//! only when the instance's memory is all in use.

use atoll_proto::{Cred, Errno, FileType, InodeId, Reply, SessionId};

use super::inode::{MAX_EXTENTS, MAX_FILE_SIZE};
use super::perm::{kill_priv, may, Caller, MAY_WRITE};
use super::{now, FileServer, BS, R};
use crate::store::BlockStore;

/// `fallocate` mode bits (`linux/falloc.h`).
pub(super) const FALLOC_KEEP_SIZE: u32 = 1;
pub(super) const FALLOC_PUNCH_HOLE: u32 = 2;
pub(super) const FALLOC_ZERO_RANGE: u32 = 0x10;

impl<S: BlockStore> FileServer<S> {
    /// `fallocate(2)`: allocate (reserving every missing block first, so
    /// that a range either fits or fails with `ENOSPC` untouched), zero or
    /// punch a range.
    pub(super) fn fallocate<'o>(
        &mut self,
        session: SessionId,
        who: &Caller,
        ino: InodeId,
        mode: u32,
        offset: u64,
        len: u64,
    ) -> R<'o> {
        let has_w = self.has_writable_desc(session, ino);
        let i = self.inode(ino)?;
        match i.ftype {
            FileType::Regular => {}
            FileType::Directory => return Err(Errno::EISDIR),
            _ => return Err(Errno::ENODEV),
        }
        if len == 0 || offset > i64::MAX as u64 || len > i64::MAX as u64 {
            return Err(Errno::EINVAL);
        }
        let end = offset.checked_add(len).ok_or(Errno::EFBIG)?;
        if end > MAX_FILE_SIZE {
            return Err(Errno::EFBIG);
        }
        if !has_w {
            may(i, who, MAY_WRITE)?;
        }
        let keep = mode & FALLOC_KEEP_SIZE != 0;
        let (first, last) = (offset / BS, (end - 1) / BS);
        let need = i
            .missing(first, last)
            .saturating_sub(i.deferred.len() as u64);
        // Before bytes are zeroed or blocks freed: a copy under way fails
        // (`leases`).
        self.lease_revoke(ino);
        let i = self.inodes.get_mut(&ino).ok_or(Errno::ENOENT)?;
        let t = now();
        match mode & !FALLOC_KEEP_SIZE {
            0 | FALLOC_ZERO_RANGE => {
                if !self
                    .cache
                    .reserve(usize::try_from(need).unwrap_or(usize::MAX))
                {
                    return Err(Errno::ENOSPC);
                }
                if mode & FALLOC_ZERO_RANGE != 0 {
                    i.zero_range(&mut self.cache, offset, len);
                    i.mtime = t;
                    i.mtime_set = t;
                } else {
                    i.ensure(&mut self.cache, first, last);
                }
                if !keep && end > i.size {
                    i.truncate(&mut self.cache, end);
                    i.mtime = t;
                    i.mtime_set = t;
                }
            }
            FALLOC_PUNCH_HOLE if keep => {
                i.punch(&mut self.cache, offset, len);
                i.mtime = t;
                i.mtime_set = t;
            }
            _ => return Err(Errno::EOPNOTSUPP),
        }
        i.ctime = t;
        if !who.has(Cred::CAP_FSETID) {
            i.perm = kill_priv(i.perm);
        }
        self.size_changed(ino); // before the reply (`sizes`)
        Ok(Reply::Attr(self.attr(ino)?))
    }

    /// Extents of `[offset, offset + len)` up to the end of the file's last
    /// page, backing holes with blocks when `allocate` (a shared mapping).
    /// Pages wholly past the end are not the file's: the client maps them
    /// so that touching them faults (`SIGBUS`, as Linux), and asks again
    /// when one is touched after the file grew (`client/src/mapping.rs`).
    pub(super) fn map_blocks<'o>(
        &mut self,
        ino: InodeId,
        offset: u64,
        len: u64,
        allocate: bool,
    ) -> R<'o> {
        let i = self.inodes.get_mut(&ino).ok_or(Errno::ENOENT)?;
        if i.ftype != FileType::Regular {
            return Err(Errno::ENODEV);
        }
        let end = offset
            .saturating_add(len)
            .min(MAX_FILE_SIZE)
            .min(i.size.div_ceil(BS) * BS);
        if end <= offset {
            return Ok(Reply::Extents {
                offset,
                len: 0,
                extents: vec![],
                watched: false,
                pending: false,
            });
        }
        let whole = (end - 1) / BS;
        let end = end.min(offset + (MAX_EXTENTS as u64) * BS);
        if allocate {
            // A shared mapping shows the file's own blocks even in holes,
            // so a later write fills what it maps (`retain`); all of the
            // mapping's holes fit or none is taken.
            i.back_for_mapping(&mut self.cache, offset / BS, (end - 1) / BS, whole)
                .ok_or(Errno::ENOMEM)?;
        }
        let (extents, got) = i.extents(offset, end - offset);
        Ok(Reply::Extents {
            offset,
            len: got,
            extents,
            watched: false,
            pending: false,
        })
    }
}
