//! File data: reserving reads and writes over an inode's block map, and
//! copying between messages and buffer-cache blocks.

use super::*;
use atoll_proto::Chain;

impl<S: BlockStore> FileServer<S> {
    /// Reserve a read: extents of `[off, off + len)` clipped at EOF.
    pub(super) fn read(
        &mut self,
        session: SessionId,
        desc: DescId,
        len: u64,
        offset: Option<u64>,
    ) -> Result<(u64, u64, Vec<Extent>), Errno> {
        let d = self.desc(session, desc)?;
        if !d.readable() {
            return Err(Errno::EBADF);
        }
        let (ino, noatime) = (d.ino, d.flags & libc::O_NOATIME as u32 != 0);
        let off = offset.unwrap_or(d.offset);
        if off > i64::MAX as u64 {
            return Err(Errno::EINVAL);
        }
        let i = self.inodes.get_mut(&ino).ok_or(Errno::EBADF)?;
        match i.ftype {
            FileType::Regular => {}
            FileType::Directory => return Err(Errno::EISDIR),
            _ => return Err(Errno::EINVAL),
        }
        let mut want = len.min(i.size.saturating_sub(off));
        // Bytes a writer has not copied yet are not there to read (`inflight`).
        match self.writes.limit(ino, off, want, super::tape::instant()) {
            inflight::ReadLimit::All => {}
            inflight::ReadLimit::Wait => return Err(RETRY),
            inflight::ReadLimit::Upto(end) => want = end.saturating_sub(off).min(want),
        }
        let (extents, got) = i.extents(off, want);
        if !noatime {
            // relatime. Every read counts, also one that returns nothing
            // (at or past the end, or of no bytes): tmpfs's read calls
            // `file_accessed` whatever it copied.
            let t = now();
            if !older(i.mtime, i.atime) || !older(i.ctime, i.atime) || t.sec - i.atime.sec > 86_400
            {
                i.atime = t;
            }
        }
        if offset.is_none() {
            if let Some(d) = self.descs.get_mut(&desc) {
                d.offset = off + got;
            }
        }
        // Before the grant's reply: a size read without a message sees
        // every write acknowledged (`sizes`).
        self.size_changed(ino);
        // Its data version, for the client's next reads (`leases`).
        self.lease_claim(ino);
        Ok((off, got, extents))
    }

    /// Reserve a write: allocate blocks, extend the size, honour
    /// `O_APPEND` atomically (the offset is chosen here, under the
    /// server's serial order). Short if the pool runs dry part-way, or at
    /// the writer's file size limit `fsize` (`RLIMIT_FSIZE`: Linux's
    /// `generic_write_check_limits`, checked here because only here is
    /// the offset of an append or of the shared offset known).
    pub(super) fn write(
        &mut self,
        session: SessionId,
        who: &Caller,
        desc: DescId,
        len: u64,
        offset: Option<u64>,
        fsize: Option<u64>,
    ) -> Result<(u64, u64, Vec<Extent>), Errno> {
        let d = self.desc(session, desc)?;
        if !d.writable() {
            return Err(Errno::EBADF);
        }
        let ino = d.ino;
        let append = d.flags & libc::O_APPEND as u32 != 0;
        let shared_off = d.offset;
        let i = self.inodes.get_mut(&ino).ok_or(Errno::EBADF)?;
        if i.ftype != FileType::Regular {
            return Err(Errno::EINVAL);
        }
        let off = if append {
            i.size
        } else {
            offset.unwrap_or(shared_off)
        };
        if off > i64::MAX as u64 {
            return Err(Errno::EINVAL);
        }
        if len == 0 {
            return Ok((off, 0, vec![]));
        }
        let limit = fsize.unwrap_or(u64::MAX);
        // At or past the limit Linux also sends SIGXFSZ: the client does.
        if off >= MAX_FILE_SIZE || off >= limit {
            return Err(Errno::EFBIG);
        }
        // One reply covers at most MAX_EXTENTS blocks; the client loops.
        let len = len
            .min(MAX_FILE_SIZE - off)
            .min(limit - off)
            .min((MAX_EXTENTS as u64) * BS - off % BS);
        i.zero_past_eof(&mut self.cache, off);
        let first = off / BS;
        let backed = i.ensure(&mut self.cache, first, (off + len - 1) / BS);
        if backed == 0 {
            return Err(Errno::ENOSPC);
        }
        let avail = (off + len).min((first + backed) * BS) - off;
        let (extents, got) = i.extents(off, avail);
        if off + got > i.size {
            i.size = off + got;
        }
        i.modified(now());
        if !who.has(Cred::CAP_FSETID) && i.perm & (libc::S_ISUID | libc::S_ISGID) != 0 {
            i.perm = kill_priv(i.perm);
        }
        if offset.is_none() {
            if let Some(d) = self.descs.get_mut(&desc) {
                d.offset = off + got;
            }
        }
        // Before the grant's reply: a size read without a message sees
        // every write acknowledged (`sizes`), and block lists learnt
        // before are of an older version (`leases`).
        self.size_changed(ino);
        self.lease_granted(ino);
        Ok((off, got, extents))
    }

    /// Direct-cache ablation: copy granted extents out into `buf`.
    pub(super) fn copy_out(&self, extents: &[Extent], buf: &mut [u8]) {
        let base = extents.first().map_or(0, |e| e.file_offset);
        for e in extents.iter().filter(|e| e.block != inode::HOLE) {
            self.walk(e, |block, in_block, at, n| {
                let dst = (at - base) as usize;
                if let Some(slice) = buf.get_mut(dst..dst + n) {
                    self.cache.store.read(block, in_block, slice);
                }
            });
        }
    }

    pub(super) fn copy_in(&mut self, extents: &[Extent], data: &[u8]) {
        let base = extents.first().map_or(0, |e| e.file_offset);
        let mut writes = vec![];
        for e in extents.iter().filter(|e| e.block != inode::HOLE) {
            self.walk(e, |block, in_block, at, n| {
                writes.push((block, in_block, (at - base) as usize, n));
            });
        }
        for (block, in_block, src, n) in writes {
            if let Some(slice) = data.get(src..src + n) {
                self.cache.store.write(block, in_block, slice);
            }
        }
    }

    /// Visit the per-block pieces of an extent: `(block, offset in block,
    /// file offset, bytes)`.
    pub(super) fn walk(&self, e: &Extent, mut f: impl FnMut(u32, usize, u64, usize)) {
        let mut pos = e.file_offset;
        let end = e.file_offset + e.len;
        let first_fb = e.file_offset / BS;
        while pos < end {
            let fb = pos / BS;
            let n = end.min((fb + 1) * BS) - pos;
            f(
                e.block + (fb - first_fb) as u32,
                (pos % BS) as usize,
                pos,
                n as usize,
            );
            pos += n;
        }
    }

    /// A read the client copies itself from the blocks named.
    pub(super) fn read_extents<'o>(
        &mut self,
        session: SessionId,
        desc: DescId,
        len: u64,
        offset: Option<u64>,
    ) -> R<'o> {
        let (off, got, extents) = self.read(session, desc, len, offset)?;
        self.transfers.count_share(got);
        Ok(Reply::Extents {
            offset: off,
            len: got,
            extents,
            watched: got > 0 && self.desc_watched(desc),
            pending: false,
        })
    }

    /// A write the client copies itself into the blocks named.
    pub(super) fn write_extents<'o>(
        &mut self,
        session: SessionId,
        who: &Caller,
        desc: DescId,
        len: u64,
        offset: Option<u64>,
        fsize: Option<u64>,
    ) -> R<'o> {
        let before = self
            .descs
            .get(&desc)
            .and_then(|d| Some((d.ino, self.inodes.get(&d.ino)?.size)));
        let (off, got, extents) = self.write(session, who, desc, len, offset, fsize)?;
        self.transfers.count_share(got);
        let watched = got > 0 && self.desc_watched(desc);
        // The client copies after this reply: until it says it has, the
        // new end is held back from readers (`inflight`).
        let pending = match before {
            Some((ino, old_size)) if off + got > old_size => {
                self.writes.extended(session, ino, off, off + got, old_size);
                true
            }
            _ => false,
        };
        Ok(Reply::Extents {
            offset: off,
            len: got,
            extents,
            watched,
            pending,
        })
    }

    /// A read whose bytes travel in the reply.
    pub(super) fn read_data<'o>(
        &mut self,
        session: SessionId,
        desc: DescId,
        (len, offset): (u32, Option<u64>),
        report: bool,
        out: &'o mut Vec<u8>,
    ) -> R<'o> {
        let len = (len as usize).min(MAX_DATA) as u64;
        let (_, got, extents) = self.read(session, desc, len, offset)?;
        out.clear();
        out.resize(got as usize, 0);
        self.copy_out(&extents, out);
        self.transfers.count_copy(got);
        // The bytes are in the reply: the read is reported here (the
        // client's copy path, `msgdata`, has no second step), by the first
        // request of the call only, so a call makes one `IN_ACCESS`
        // however many messages carry its bytes.
        if report && got > 0 && self.desc_watched(desc) {
            if let Some(d) = self.descs.get(&desc) {
                let (ino, via) = (d.ino, d.via.clone());
                self.emit_changed_via(ino, atoll_proto::inotify::IN_ACCESS, via);
            }
        }
        Ok(Reply::Data(out))
    }

    /// A write whose bytes travel in the request; a piece of a chain only
    /// if the pieces before it were written in full (`chain`).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn write_data<'o>(
        &mut self,
        session: SessionId,
        who: &Caller,
        desc: DescId,
        data: &[u8],
        offset: Option<u64>,
        fsize: Option<u64>,
        chain: Option<Chain>,
    ) -> R<'o> {
        let sent = data.len() as u64;
        let data = &data[..data.len().min(MAX_DATA)];
        let Some(c) = chain else {
            let (_, got, extents) =
                self.write(session, who, desc, data.len() as u64, offset, fsize)?;
            return Ok(self.copied_in(&extents, data, got));
        };
        let admitted =
            c.seq == 0 || (self.sessions.get(&session)).is_some_and(|s| s.chains.admits(c));
        if !admitted {
            return Ok(Reply::Skipped);
        }
        let r = self.write(session, who, desc, data.len() as u64, offset, fsize);
        let full = matches!(r, Ok((_, got, _)) if got == sent);
        if let Some(s) = self.sessions.get_mut(&session) {
            s.chains.settle(c, full);
        }
        let (_, got, extents) = r?;
        Ok(self.copied_in(&extents, data, got))
    }

    /// Copy a `WriteData`'s granted bytes into the blocks: its reply.
    fn copied_in<'o>(&mut self, extents: &[Extent], data: &[u8], got: u64) -> Reply<'o> {
        self.copy_in(extents, &data[..got as usize]);
        self.transfers.count_copy(got);
        Reply::Written(got)
    }

    /// Close the session's write chains (`chain`: a request of it was
    /// answered `EIO` after its server died).
    pub fn cut_chains(&mut self, session: SessionId) {
        if let Some(s) = self.sessions.get_mut(&session) {
            s.chains.cut();
        }
    }
}
