//! Pipes of a copy island: the bytes cross in messages and this server
//! copies them between the frame and the ring (Cosh §5 *copy*).
//!
//! In the other islands a pipe's bytes never reach the server: clients map
//! the ring (`pipe.rs`, `atoll_proto::pipe`) and copy under its lock. A
//! process of a copy island maps no buffer cache at all (Cosh §3: no
//! shared memory between the islands), so it asks: `PipeRead` takes bytes
//! out of the ring into the reply, `PipeWrite` puts the request's bytes in,
//! `PipeState` reports what the header holds (readiness, `FIONREAD`, waits
//! in `open`); `PipeSetSize` (`F_SETPIPE_SZ`, `pipe.rs`) serves every
//! island. The ring and its header
//! are the same as ever, so counts, wake words and statistics need nothing
//! new, and the semantics are the ring's: writes of at most `PIPE_BUF`
//! bytes go in whole or not at all, a read takes what is there.
//!
//! The server never blocks: an empty pipe with writers, or a full one with
//! readers, answers `EAGAIN` and the client waits and asks again (as it
//! does for record locks). The ring lock is taken with a try-lock, as the
//! inotify queues are (`inotify.rs`): only a client mapping the ring could
//! hold it, which no client of a copy island does, but a ring is never
//! changed without it.

use atoll_proto::pipe as hdr;
use atoll_proto::{DescId, Errno, PipeStateInfo, Reply, SessionId, BLOCK_SIZE};

use super::{FileServer, MAX_DATA, R};
use crate::store::BlockStore;

/// A ring's blocks as a copy needs them: header, data blocks, capacity.
struct RingView {
    header: u32,
    data: Vec<u32>,
}

impl RingView {
    fn capacity(&self) -> u64 {
        (self.data.len() * BLOCK_SIZE) as u64
    }

    /// Data block and offset in it of ring position `pos`, and the bytes
    /// left in that block (positions wrap at the capacity).
    fn locate(&self, pos: u64) -> (u32, usize, usize) {
        let p = (pos % self.capacity()) as usize;
        let (k, within) = (p / BLOCK_SIZE, p % BLOCK_SIZE);
        (self.data[k], within, BLOCK_SIZE - within)
    }
}

impl<S: BlockStore> FileServer<S> {
    /// The ring behind `desc` (one of `session`'s descriptions of a pipe
    /// or FIFO), if `ok(flags)` allows the operation.
    fn pipe_ring(
        &self,
        session: SessionId,
        desc: DescId,
        ok: impl Fn(&super::Desc) -> bool,
    ) -> Result<RingView, Errno> {
        let d = self.desc(session, desc)?;
        if !ok(d) {
            return Err(Errno::EBADF);
        }
        let ring = self.pipes.ring_of(d.ino).ok_or(Errno::EINVAL)?;
        Ok(RingView {
            header: ring.0,
            data: ring.1.to_vec(),
        })
    }

    /// Take the ring lock without waiting (`EAGAIN`: the client asks
    /// again). The server's pid is the holder's id: clients take the lock
    /// back if this process dies holding it.
    pub(super) fn ring_try_lock(&mut self, h: u32) -> Result<(), Errno> {
        if !self
            .cache
            .store
            .cas_u32(h, hdr::LOCK, 0, std::process::id())
        {
            return Err(Errno::EAGAIN);
        }
        Ok(())
    }

    pub(super) fn ring_unlock(&mut self, h: u32) {
        if self.cache.store.swap_u32(h, hdr::LOCK, 0) & hdr::LOCK_WAITERS != 0 {
            self.cache.store.wake(h, hdr::LOCK);
        }
    }

    /// Bump a wait word, waking sleepers if any (none in a copy island:
    /// only processes that map the ring sleep on it).
    pub(super) fn ring_bump(&mut self, h: u32, seq: usize, sleep: usize) {
        let wake = self.cache.store.get_u32(h, sleep) > 0;
        self.cache.store.add_u32(h, seq, 1, wake);
    }

    fn ring_limit(&self, r: &RingView) -> u64 {
        match self.cache.store.get_u32(r.header, hdr::LIMIT) as u64 {
            0 => r.capacity(),
            l => l.min(r.capacity()),
        }
    }

    /// `Request::PipeRead`: up to `len` bytes out of the ring, into `out`.
    pub(super) fn pipe_read_copy<'o>(
        &mut self,
        session: SessionId,
        desc: DescId,
        len: u32,
        out: &'o mut Vec<u8>,
    ) -> R<'o> {
        let r = self.pipe_ring(session, desc, |d| d.readable())?;
        let h = r.header;
        self.ring_try_lock(h)?;
        let st = &self.cache.store;
        let head = st.get_u64(h, hdr::HEAD);
        let tail = st.get_u64(h, hdr::TAIL);
        let avail = head.wrapping_sub(tail).min(r.capacity());
        out.clear();
        if avail == 0 {
            let writers = st.get_u32(h, hdr::WRITERS);
            self.ring_unlock(h);
            // No writer left: end of file; else nothing yet.
            return if writers == 0 {
                Ok(Reply::Data(out))
            } else {
                Err(Errno::EAGAIN)
            };
        }
        let n = (avail as usize).min(len as usize).min(MAX_DATA);
        out.resize(n, 0);
        let mut done = 0;
        while done < n {
            let (block, within, room) = r.locate(tail + done as u64);
            let k = room.min(n - done);
            st.read(block, within, &mut out[done..done + k]);
            done += k;
        }
        let st = &mut self.cache.store;
        st.put_u64(h, hdr::TAIL, tail + n as u64);
        let ops = st.get_u64(h, hdr::OPS);
        st.put_u64(h, hdr::OPS, ops + 1);
        self.ring_bump(h, hdr::WSEQ, hdr::WSLEEP);
        self.ring_unlock(h);
        self.transfers.count_copy(n as u64);
        Ok(Reply::Data(out))
    }

    /// `Request::PipeWrite`: `data` into the ring, whole when it is at
    /// most `PIPE_BUF` bytes (atomic, as Linux), else as much as fits.
    pub(super) fn pipe_write_copy<'o>(
        &mut self,
        session: SessionId,
        desc: DescId,
        data: &[u8],
    ) -> R<'o> {
        let r = self.pipe_ring(session, desc, |d| d.writable())?;
        let h = r.header;
        self.ring_try_lock(h)?;
        if self.cache.store.get_u32(h, hdr::READERS) == 0 {
            self.ring_unlock(h);
            return Err(Errno::EPIPE);
        }
        let head = self.cache.store.get_u64(h, hdr::HEAD);
        let tail = self.cache.store.get_u64(h, hdr::TAIL);
        let room = self.ring_limit(&r).saturating_sub(head.wrapping_sub(tail)) as usize;
        let data = &data[..data.len().min(MAX_DATA)];
        let need = if data.len() <= hdr::PIPE_BUF {
            data.len()
        } else {
            1
        };
        if data.is_empty() || room < need {
            self.ring_unlock(h);
            return if data.is_empty() {
                Ok(Reply::Written(0))
            } else {
                Err(Errno::EAGAIN)
            };
        }
        let n = room.min(data.len());
        let mut done = 0;
        while done < n {
            let (block, within, left) = r.locate(head + done as u64);
            let k = left.min(n - done);
            self.cache.store.write(block, within, &data[done..done + k]);
            done += k;
        }
        let st = &mut self.cache.store;
        st.put_u64(h, hdr::HEAD, head + n as u64);
        let ops = st.get_u64(h, hdr::OPS);
        st.put_u64(h, hdr::OPS, ops + 1);
        self.ring_bump(h, hdr::RSEQ, hdr::RSLEEP);
        self.ring_unlock(h);
        self.transfers.count_copy(n as u64);
        Ok(Reply::Written(n as u64))
    }

    /// `Request::PipeState`: what the ring's header says.
    pub(super) fn pipe_state<'o>(&self, session: SessionId, desc: DescId) -> R<'o> {
        let r = self.pipe_ring(session, desc, |_| true)?;
        let (h, st) = (r.header, &self.cache.store);
        let used = st
            .get_u64(h, hdr::HEAD)
            .wrapping_sub(st.get_u64(h, hdr::TAIL))
            .min(r.capacity());
        Ok(Reply::PipeState(PipeStateInfo {
            used,
            limit: self.ring_limit(&r),
            readers: st.get_u32(h, hdr::READERS),
            writers: st.get_u32(h, hdr::WRITERS),
            ropens: st.get_u32(h, hdr::ROPENS),
            wopens: st.get_u32(h, hdr::WOPENS),
            rseq: st.get_u32(h, hdr::RSEQ),
            wseq: st.get_u32(h, hdr::WSEQ),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::FsConfig;
    use crate::store::MemStore;
    use atoll_proto::{Cred, Request};

    const S1: SessionId = SessionId(1);
    const ME: Cred = Cred::of(1000, 1000);

    fn server() -> FileServer<MemStore> {
        FileServer::new(
            FsConfig {
                index: 0,
                nservers: 1,
                first_block: 0,
                nblocks: 256,
                root_owner: ME,
                core: -1,
                track_lookups: false,
                track_absent: false,
                limits: crate::fs::Limits::for_memory(1 << 30),
            },
            MemStore::new(256),
        )
    }

    fn pipe(fs: &mut FileServer<MemStore>) -> (DescId, DescId) {
        let mut out = Vec::new();
        match fs.handle(S1, ME, Request::Pipe { flags: 0 }, &mut out) {
            Reply::Pipe { read, write, .. } => (read, write),
            other => panic!("{other:?}"),
        }
    }

    /// `Ok(bytes)` of a `PipeRead`, or its errno.
    fn read(fs: &mut FileServer<MemStore>, desc: DescId, len: u32) -> Result<Vec<u8>, Errno> {
        let mut out = Vec::new();
        match fs.handle(S1, ME, Request::PipeRead { desc, len }, &mut out) {
            Reply::Data(d) => Ok(d.to_vec()),
            Reply::Err(e) => Err(e),
            other => panic!("{other:?}"),
        }
    }

    fn write(fs: &mut FileServer<MemStore>, desc: DescId, data: &[u8]) -> Result<u64, Errno> {
        let mut out = Vec::new();
        match fs.handle(S1, ME, Request::PipeWrite { desc, data }, &mut out) {
            Reply::Written(n) => Ok(n),
            Reply::Err(e) => Err(e),
            other => panic!("{other:?}"),
        }
    }

    fn state(fs: &mut FileServer<MemStore>, desc: DescId) -> PipeStateInfo {
        let mut out = Vec::new();
        match fs.handle(S1, ME, Request::PipeState { desc }, &mut out) {
            Reply::PipeState(s) => s,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn bytes_cross_the_ring_in_order_and_wrap_around() {
        let mut fs = server();
        let (r, w) = pipe(&mut fs);
        assert_eq!(
            read(&mut fs, r, 10),
            Err(Errno::EAGAIN),
            "empty, writer open"
        );
        // More than the ring holds in all, in pieces that straddle blocks.
        let mut sent = Vec::new();
        let mut got = Vec::new();
        for round in 0..40u32 {
            let piece: Vec<u8> = (0..3000u32).map(|i| (i * 7 + round) as u8).collect();
            assert_eq!(write(&mut fs, w, &piece), Ok(3000));
            sent.extend_from_slice(&piece);
            got.extend(read(&mut fs, r, 2000).unwrap());
            got.extend(read(&mut fs, r, 2000).unwrap());
        }
        assert_eq!(got, sent);
        assert_eq!(fs.transfers.copy_bytes, 2 * sent.len() as u64);
        assert_eq!(fs.transfers.shares, 0);
    }

    #[test]
    fn small_writes_are_whole_or_refused_and_large_ones_fill_the_room() {
        let mut fs = server();
        let (r, w) = pipe(&mut fs);
        let limit = state(&mut fs, w).limit as usize;
        let big = vec![b'x'; MAX_DATA];
        let mut filled = 0;
        while filled + MAX_DATA <= limit {
            assert_eq!(write(&mut fs, w, &big), Ok(MAX_DATA as u64));
            filled += MAX_DATA;
        }
        let room = limit - filled;
        assert!(room > 50);
        assert_eq!(write(&mut fs, w, &big[..room - 50]), Ok(room as u64 - 50));
        // PIPE_BUF or less: all or nothing.
        assert_eq!(write(&mut fs, w, &[b'y'; 100]), Err(Errno::EAGAIN));
        // Larger: as much as fits.
        assert_eq!(write(&mut fs, w, &big), Ok(50));
        assert_eq!(write(&mut fs, w, &big), Err(Errno::EAGAIN), "full");
        let s = state(&mut fs, r);
        assert_eq!((s.used as usize, s.readers, s.writers), (limit, 1, 1));
        read(&mut fs, r, 5000).unwrap();
        assert_eq!(
            write(&mut fs, w, &[b'y'; 4096]),
            Ok(4096),
            "room for PIPE_BUF again"
        );
    }

    #[test]
    fn end_of_file_without_writers_and_epipe_without_readers() {
        let mut fs = server();
        let (r, w) = pipe(&mut fs);
        write(&mut fs, w, b"last").unwrap();
        let mut out = Vec::new();
        fs.handle(S1, ME, Request::Close { desc: w }, &mut out);
        assert_eq!(read(&mut fs, r, 100).unwrap(), b"last");
        assert_eq!(read(&mut fs, r, 100).unwrap(), b"", "EOF");
        let (r2, w2) = pipe(&mut fs);
        fs.handle(S1, ME, Request::Close { desc: r2 }, &mut out);
        assert_eq!(write(&mut fs, w2, b"x"), Err(Errno::EPIPE));
        // The wrong end of a pipe is EBADF, as on Linux.
        assert_eq!(read(&mut fs, w2, 1), Err(Errno::EBADF));
    }

    #[test]
    fn a_ring_locked_by_a_mapping_client_answers_eagain() {
        let mut fs = server();
        let (r, w) = pipe(&mut fs);
        let h = fs.pipes.ring_of(fs.desc(S1, r).unwrap().ino).unwrap().0;
        fs.cache.store.put_u32(h, hdr::LOCK, 1);
        assert_eq!(write(&mut fs, w, b"x"), Err(Errno::EAGAIN));
        fs.cache.store.put_u32(h, hdr::LOCK, 0);
        assert_eq!(write(&mut fs, w, b"x"), Ok(1));
        assert_eq!(fs.cache.store.get_u32(h, hdr::LOCK), 0, "unlocked after");
    }

    #[test]
    fn set_size_rounds_and_refuses_below_what_the_pipe_holds() {
        let mut fs = server();
        let (r, w) = pipe(&mut fs);
        let mut out = Vec::new();
        let mut set = |fs: &mut FileServer<MemStore>, size| match fs.handle(
            S1,
            ME,
            Request::PipeSetSize { desc: r, size },
            &mut out,
        ) {
            Reply::Offset(n) => Ok(n),
            Reply::Err(e) => Err(e),
            other => panic!("{other:?}"),
        };
        assert_eq!(set(&mut fs, 5000), Ok(8192));
        assert_eq!(state(&mut fs, w).limit, 8192);
        write(&mut fs, w, &[0; 6000]).unwrap();
        assert_eq!(set(&mut fs, 4096), Err(Errno::EBUSY));
        assert_eq!(set(&mut fs, 1 << 30), Err(Errno::EPERM));
    }

    /// `F_SETPIPE_SZ` grows the ring by blocks and shrinks it back: bytes
    /// buffered across the old wrap point come out in order, `GEN` moves
    /// with each new geometry, blocks return to the pool, and sizes past
    /// `pipe-max-size` need `CAP_SYS_RESOURCE`.
    #[test]
    fn set_size_grows_and_shrinks_the_ring_keeping_its_bytes() {
        let mut fs = server();
        let (r, w) = pipe(&mut fs);
        let h = fs.pipes.ring_of(fs.desc(S1, r).unwrap().ino).unwrap().0;
        let free = fs.cache.statfs().1;
        let set = |fs: &mut FileServer<MemStore>, cred: Cred, size| {
            let mut out = Vec::new();
            match fs.handle(S1, cred, Request::PipeSetSize { desc: w, size }, &mut out) {
                Reply::Offset(n) => Ok(n),
                Reply::Err(e) => Err(e),
                other => panic!("{other:?}"),
            }
        };
        // Messages carry 8 KiB at most: whole transfers in pieces.
        let put = |fs: &mut FileServer<MemStore>, data: &[u8]| {
            let mut done = 0;
            while done < data.len() {
                done += write(fs, w, &data[done..]).unwrap() as usize;
            }
        };
        let get = |fs: &mut FileServer<MemStore>, n: usize| {
            let mut got = Vec::new();
            while got.len() < n {
                got.extend(read(fs, r, (n - got.len()) as u32).unwrap());
            }
            got
        };
        // Put the tail near the end of the 64 KiB ring, the data wrapping.
        let pattern: Vec<u8> = (0..60_000u32).map(|i| (i % 251) as u8).collect();
        put(&mut fs, &pattern);
        assert_eq!(get(&mut fs, 50_000), pattern[..50_000]);
        let fill: Vec<u8> = (0..40_000u32).map(|i| (i % 13) as u8).collect();
        put(&mut fs, &fill); // wraps: 50,000 bytes in the ring
        let gen = fs.cache.store.get_u32(h, hdr::GEN);
        assert_eq!(set(&mut fs, ME, 200_000), Ok(256 * 1024));
        assert_eq!(fs.cache.store.get_u32(h, hdr::NBLOCKS), 64);
        assert_eq!(fs.cache.store.get_u32(h, hdr::GEN), gen + 1);
        assert_eq!(fs.cache.statfs().1, free - 48);
        assert_eq!(state(&mut fs, w).limit, 256 * 1024);
        // Room for 200,000 more bytes now.
        put(&mut fs, &vec![7u8; 200_000]);
        assert_eq!(state(&mut fs, w).used, 250_000);
        let mut want = pattern[50_000..].to_vec();
        want.extend(&fill);
        want.extend(vec![7u8; 200_000]);
        assert_eq!(get(&mut fs, 250_000), want);
        // Shrinking below what is buffered is EBUSY; empty, back to 16 blocks.
        write(&mut fs, w, &[1; 9000]).unwrap();
        assert_eq!(set(&mut fs, ME, 8192), Err(Errno::EBUSY));
        assert_eq!(set(&mut fs, ME, 16384), Ok(16384));
        assert_eq!(fs.cache.store.get_u32(h, hdr::NBLOCKS), 16);
        assert_eq!(fs.cache.statfs().1, free);
        assert_eq!(read(&mut fs, r, 10_000).unwrap(), vec![1; 9000]);
        // Past pipe-max-size: EPERM, unless the caller may.
        let max = super::super::pipe::tests_pipe_max_size();
        let root = Cred::of(0, 0);
        assert_eq!(set(&mut fs, ME, max * 2), Err(Errno::EPERM));
        assert_eq!(
            set(&mut fs, root, 8 << 20),
            Err(Errno::EPERM),
            "past the header's room"
        );
        // Root may pass pipe-max-size; this server's 256 blocks may not
        // hold it (ENOMEM, and the ring is as it was).
        match set(&mut fs, root, max * 2) {
            Ok(n) => assert_eq!(n, max * 2),
            Err(e) => {
                assert_eq!(e, Errno::ENOMEM);
                assert_eq!(fs.cache.store.get_u32(h, hdr::NBLOCKS), 16);
                assert_eq!(fs.cache.statfs().1, free);
            }
        }
    }
}
