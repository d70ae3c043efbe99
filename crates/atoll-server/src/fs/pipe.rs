//! Pipes and FIFOs as file-server objects (Hare §3.6, fos §4.2).
//!
//! A pipe is an inode of type FIFO owned by this server (anonymous, with no
//! link, for `pipe(2)`; named, for `mkfifo` in the mount) plus a *ring*:
//! one header block and up to [`pipe::MAX_DATA_BLOCKS`] data blocks taken
//! from this server's partition of the buffer cache. Layout and protocol
//! of the header: `atoll_proto::pipe`.
//!
//! Division of labour (Cosh §4-5, *share* semantics): the server allocates
//! and frees the ring and keeps the reader/writer counts, which only it can
//! know (descriptions come and go with `Open`, `Close`, `Share` and session
//! death); clients move the bytes themselves, under the ring lock, and
//! sleep on futex words in the header. The server never touches the data
//! and never blocks: a reader waiting for data costs it nothing.
//!
//! Counting follows Linux: a pipe end is an open file description, shared
//! across fork (same description, no count change); `O_RDWR` on a FIFO
//! counts as both. When a count changes the server bumps the matching wait
//! word and wakes every sleeper, so a reader sees EOF when the last writer
//! closes or its process dies, and a writer sees `EPIPE` when the last
//! reader goes. A FIFO's ring is freed (its data discarded, as Linux does)
//! when no description of it remains; the next open makes a fresh one.

use std::ops::Range;

use super::ordered::{Map, Set};

use atoll_proto::pipe as hdr;
use atoll_proto::{Cred, DescId, Errno, FileType, InodeId, Reply, SessionId, BLOCK_SIZE};

use super::perm::Caller;
use super::{FileServer, R};
use crate::store::BlockStore;

/// Data blocks of a new ring.
const DATA_BLOCKS: usize = hdr::DEFAULT_DATA_BLOCKS;

/// Linux's `/proc/sys/fs/pipe-max-size`: the most an unprivileged
/// `F_SETPIPE_SZ` may ask (1 MiB when it cannot be read).
#[cfg(test)]
pub(super) fn tests_pipe_max_size() -> u64 {
    pipe_max_size()
}

fn pipe_max_size() -> u64 {
    std::fs::read_to_string("/proc/sys/fs/pipe-max-size")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(1 << 20)
}

/// One live ring.
#[derive(serde::Serialize, serde::Deserialize)]
struct Ring {
    header: u32,
    data: Vec<u32>,
    readers: u32,
    writers: u32,
}

/// Every ring of this server, by FIFO inode, and the pipe counters.
#[derive(Default, serde::Serialize, serde::Deserialize)]
pub(super) struct Pipes {
    rings: Map<InodeId, Ring>,
    /// Inodes of `pipe(2)` pipes (no name): not counted as inodes of the
    /// file system, as Linux's pipefs inodes are not tmpfs's (`limits`).
    pub(super) anonymous: Set<InodeId>,
    created: u64,
    /// Bytes and operations of rings already freed.
    bytes_done: u64,
    ops_done: u64,
}

impl Pipes {
    /// The header and data blocks of `ino`'s ring, if it has one.
    pub(super) fn ring_of(&self, ino: InodeId) -> Option<(u32, &[u32])> {
        self.rings.get(&ino).map(|r| (r.header, &r.data[..]))
    }
}

/// Ring positions `range` of a ring of data blocks `data`, piece by piece
/// within one block: `f(block, offset in the block, the piece's bytes as
/// a range from the start of `range`)`. Positions wrap at the capacity.
fn ring_pieces(data: &[u32], range: Range<u64>, mut f: impl FnMut(u32, usize, Range<usize>)) {
    let cap = (data.len() * BLOCK_SIZE) as u64;
    let (mut pos, mut at) = (range.start, 0usize);
    while pos < range.end {
        let p = (pos % cap) as usize;
        let (k, within) = (p / BLOCK_SIZE, p % BLOCK_SIZE);
        let n = ((BLOCK_SIZE - within) as u64).min(range.end - pos) as usize;
        f(data[k], within, at..at + n);
        pos += n as u64;
        at += n;
    }
}

fn can_read(flags: u32) -> bool {
    flags & libc::O_ACCMODE as u32 != libc::O_WRONLY as u32
}

fn can_write(flags: u32) -> bool {
    flags & libc::O_ACCMODE as u32 != libc::O_RDONLY as u32
}

fn is_path(flags: u32) -> bool {
    flags & libc::O_PATH as u32 != 0
}

impl<S: BlockStore> FileServer<S> {
    /// `Request::Pipe`: an anonymous FIFO inode and its two ends.
    pub(super) fn pipe_create<'o>(
        &mut self,
        session: SessionId,
        who: &Caller,
        flags: u32,
    ) -> R<'o> {
        if flags & !(libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_DIRECT) as u32 != 0 {
            return Err(Errno::EINVAL);
        }
        let nb = flags & libc::O_NONBLOCK as u32;
        let ino = self.new_inode(who, InodeId(0), FileType::Fifo, 0o600, 0, 0);
        if let Some(i) = self.inodes.get_mut(&ino) {
            i.links = 0; // anonymous: lives while a description does
        }
        self.pipes.anonymous.insert(ino);
        let read = match self.open_inode(session, who, ino, libc::O_RDONLY as u32 | nb, false) {
            Ok((d, _)) => d,
            Err(e) => {
                self.maybe_free(ino);
                return Err(e);
            }
        };
        let write = match self.open_inode(session, who, ino, libc::O_WRONLY as u32 | nb, false) {
            Ok((d, _)) => d,
            Err(e) => {
                self.release_desc(read);
                return Err(e);
            }
        };
        let header = self.pipes.rings.get(&ino).map_or(0, |r| r.header);
        Ok(Reply::Pipe {
            ino,
            read,
            write,
            header,
            partner_opens: None,
        })
    }

    /// `Request::PipeHeader`: the ring behind an open FIFO description.
    pub(super) fn pipe_header<'o>(&self, session: SessionId, desc: DescId) -> R<'o> {
        let d = self.desc(session, desc)?;
        let ring = self.pipes.rings.get(&d.ino).ok_or(Errno::EINVAL)?;
        Ok(Reply::Pipe {
            ino: d.ino,
            read: desc,
            write: desc,
            header: ring.header,
            partner_opens: d.partner_opens,
        })
    }

    /// A description of `ino` with `flags` is being opened: if `ino` is a
    /// FIFO, make sure it has a ring and count the new end. Called by
    /// `open_inode` before the description exists, so a failure (no blocks
    /// left: `ENFILE`, as Linux when pipe buffers run out) opens nothing.
    /// Returns the partner-open count this end waits on (`Reply::Pipe`),
    /// read in the same step that counts this end.
    pub(super) fn pipe_opening(&mut self, ino: InodeId, flags: u32) -> Result<Option<u32>, Errno> {
        let fifo = self
            .inodes
            .get(&ino)
            .is_some_and(|i| i.ftype == FileType::Fifo);
        if !fifo || is_path(flags) {
            return Ok(None);
        }
        if !self.pipes.rings.contains_key(&ino) {
            let ring = self.ring_alloc()?;
            self.pipes.rings.insert(ino, ring);
            self.pipes.created += 1;
        }
        let (r, w) = (can_read(flags), can_write(flags));
        let Some(ring) = self.pipes.rings.get_mut(&ino) else {
            return Ok(None);
        };
        let h = ring.header;
        let st = &mut self.cache.store;
        let partner_opens = match (r, w) {
            (true, false) if ring.writers == 0 => Some(st.get_u32(h, hdr::WOPENS)),
            (false, true) if ring.readers == 0 => Some(st.get_u32(h, hdr::ROPENS)),
            _ => None,
        };
        if r {
            ring.readers += 1;
            st.put_u32(h, hdr::READERS, ring.readers);
            st.add_u32(h, hdr::ROPENS, 1, false);
            // A FIFO writer waiting in open, or a writer that saw no
            // reader, looks again.
            st.add_u32(h, hdr::WSEQ, 1, true);
        }
        if w {
            ring.writers += 1;
            st.put_u32(h, hdr::WRITERS, ring.writers);
            st.add_u32(h, hdr::WOPENS, 1, false);
            st.add_u32(h, hdr::RSEQ, 1, true);
        }
        Ok(partner_opens)
    }

    /// A description of `ino` with `flags` died (last `Close`, or the death
    /// of the last session referencing it): uncount the end, wake the other
    /// side, and free the ring when no end remains.
    pub(super) fn pipe_released(&mut self, ino: InodeId, flags: u32) {
        if is_path(flags) {
            return;
        }
        let Some(ring) = self.pipes.rings.get_mut(&ino) else {
            return;
        };
        let h = ring.header;
        let st = &mut self.cache.store;
        if can_read(flags) {
            ring.readers = ring.readers.saturating_sub(1);
            st.put_u32(h, hdr::READERS, ring.readers);
            // Writers blocked on a full ring must see EPIPE now.
            st.add_u32(h, hdr::WSEQ, 1, true);
        }
        if can_write(flags) {
            ring.writers = ring.writers.saturating_sub(1);
            st.put_u32(h, hdr::WRITERS, ring.writers);
            // Readers blocked on an empty ring must see EOF now.
            st.add_u32(h, hdr::RSEQ, 1, true);
        }
        if ring.readers == 0 && ring.writers == 0 {
            if let Some(ring) = self.pipes.rings.remove(&ino) {
                self.pipes.bytes_done += self.cache.store.get_u64(ring.header, hdr::HEAD);
                self.pipes.ops_done += self.cache.store.get_u64(ring.header, hdr::OPS);
                self.cache.release(ring.header);
                self.cache.release_all(ring.data);
            }
        }
    }

    /// `(pipes created, bytes written, data operations)` for `Stats`.
    pub(super) fn pipe_stats(&self) -> (u64, u64, u64) {
        let st = &self.cache.store;
        let (mut bytes, mut ops) = (self.pipes.bytes_done, self.pipes.ops_done);
        for r in self.pipes.rings.values() {
            bytes += st.get_u64(r.header, hdr::HEAD);
            ops += st.get_u64(r.header, hdr::OPS);
        }
        (self.pipes.created, bytes, ops)
    }

    /// `Request::PipeSetSize`, as Linux's `pipe_set_size`: the size is
    /// rounded up to a power-of-two number of pages; growing past
    /// `pipe-max-size` needs `CAP_SYS_RESOURCE` (else `EPERM`), past the
    /// header's room for blocks it is `EPERM` for everyone; shrinking below
    /// the bytes the pipe holds is `EBUSY` (Linux counts pages there,
    /// atoll bytes). A ring grows or shrinks by its blocks (never below
    /// the default 16; `LIMIT` bounds a smaller size), the buffered bytes
    /// moved to where the new geometry puts their positions, under the
    /// ring lock (a try-lock: `EAGAIN` while a client holds it, and the
    /// client asks again), and `GEN` tells every mapping client to read
    /// the block list again.
    pub(super) fn pipe_set_size<'o>(
        &mut self,
        session: SessionId,
        who: &Caller,
        desc: DescId,
        want: u64,
    ) -> R<'o> {
        let ino = self.desc(session, desc)?.ino;
        let size = match want {
            w if w > 1 << 31 => return Err(Errno::EINVAL),
            w if w <= BLOCK_SIZE as u64 => BLOCK_SIZE as u64,
            w => w.next_power_of_two(),
        };
        let ring = self.pipes.rings.get(&ino).ok_or(Errno::EINVAL)?;
        let h = ring.header;
        let st = &self.cache.store;
        let now = match st.get_u32(h, hdr::LIMIT) as u64 {
            0 => (ring.data.len() * BLOCK_SIZE) as u64,
            l => l,
        };
        if size > now && size > pipe_max_size() && !who.has(Cred::CAP_SYS_RESOURCE) {
            return Err(Errno::EPERM);
        }
        let blocks = (size as usize / BLOCK_SIZE).max(DATA_BLOCKS);
        if blocks > hdr::MAX_DATA_BLOCKS {
            return Err(Errno::EPERM);
        }
        self.ring_try_lock(h)?;
        let st = &self.cache.store;
        let used = st
            .get_u64(h, hdr::HEAD)
            .wrapping_sub(st.get_u64(h, hdr::TAIL));
        if used > size {
            self.ring_unlock(h);
            return Err(Errno::EBUSY);
        }
        if let Err(e) = self.ring_regeometry(ino, blocks) {
            self.ring_unlock(h);
            return Err(e);
        }
        self.cache.store.put_u32(h, hdr::LIMIT, size as u32);
        // Writers asleep for room may have more now.
        self.ring_bump(h, hdr::WSEQ, hdr::WSLEEP);
        self.ring_unlock(h);
        Ok(Reply::Offset(size))
    }

    /// Give `ino`'s ring `blocks` data blocks (caller holds the ring lock):
    /// keep the first blocks, take more or give the rest back, and move the
    /// buffered bytes `[TAIL, HEAD)` to their places in the new geometry
    /// (positions wrap at the capacity). `ENOMEM` when the instance's
    /// memory is all in use, as Linux when it cannot allocate the slots.
    fn ring_regeometry(&mut self, ino: InodeId, blocks: usize) -> Result<(), Errno> {
        let Some(ring) = self.pipes.rings.get(&ino) else {
            return Err(Errno::EINVAL);
        };
        let (h, old) = (ring.header, ring.data.clone());
        if blocks == old.len() {
            return Ok(());
        }
        let mut new: Vec<u32> = old[..blocks.min(old.len())].to_vec();
        while new.len() < blocks {
            match self.cache.take() {
                Some(b) => new.push(b),
                None => {
                    self.cache.release_all(new.drain(old.len()..));
                    return Err(Errno::ENOMEM);
                }
            }
        }
        let st = &mut self.cache.store;
        let (head, tail) = (st.get_u64(h, hdr::HEAD), st.get_u64(h, hdr::TAIL));
        let mut bytes = vec![0u8; head.wrapping_sub(tail) as usize];
        ring_pieces(&old, tail..head, |b, off, at| {
            st.read(b, off, &mut bytes[at])
        });
        ring_pieces(&new, tail..head, |b, off, at| st.write(b, off, &bytes[at]));
        st.put_u32(h, hdr::NBLOCKS, blocks as u32);
        for (k, b) in new.iter().enumerate() {
            st.put_u32(h, hdr::BLOCKS + 4 * k, *b);
        }
        st.add_u32(h, hdr::GEN, 1, false);
        if old.len() > blocks {
            self.cache.release_all(old[blocks..].iter().copied());
        }
        if let Some(ring) = self.pipes.rings.get_mut(&ino) {
            ring.data = new;
        }
        Ok(())
    }

    /// A zeroed header block and its data blocks, or `ENFILE`.
    fn ring_alloc(&mut self) -> Result<Ring, Errno> {
        let mut blocks = Vec::with_capacity(1 + DATA_BLOCKS);
        for _ in 0..1 + DATA_BLOCKS {
            match self.cache.take() {
                Some(b) => blocks.push(b),
                None => {
                    self.cache.release_all(blocks);
                    return Err(Errno::ENFILE);
                }
            }
        }
        for &b in &blocks {
            self.cache.store.zero(b, 0, BLOCK_SIZE);
        }
        let header = blocks[0];
        let data: Vec<u32> = blocks[1..].to_vec();
        let st = &mut self.cache.store;
        st.put_u32(header, hdr::NBLOCKS, DATA_BLOCKS as u32);
        for (k, b) in data.iter().enumerate() {
            st.put_u32(header, hdr::BLOCKS + 4 * k, *b);
        }
        Ok(Ring {
            header,
            data,
            readers: 0,
            writers: 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::FsConfig;
    use crate::store::MemStore;
    use atoll_proto::{Cred, Request};

    const S1: SessionId = SessionId(1);
    const S2: SessionId = SessionId(2);
    const ME: Cred = Cred::of(1000, 1000);

    fn server(blocks: u32) -> FileServer<MemStore> {
        FileServer::new(
            FsConfig {
                index: 0,
                nservers: 1,
                first_block: 0,
                nblocks: blocks,
                root_owner: ME,
                core: -1,
                track_lookups: false,
                track_absent: false,
                limits: crate::fs::Limits::for_memory(1 << 30),
            },
            MemStore::new(blocks as usize),
        )
    }

    fn pipe(fs: &mut FileServer<MemStore>, s: SessionId) -> (InodeId, DescId, DescId, u32) {
        let mut out = Vec::new();
        match fs.handle(s, ME, Request::Pipe { flags: 0 }, &mut out) {
            Reply::Pipe {
                ino,
                read,
                write,
                header,
                ..
            } => (ino, read, write, header),
            other => panic!("{other:?}"),
        }
    }

    fn word(fs: &FileServer<MemStore>, h: u32, off: usize) -> u32 {
        fs.cache.store.get_u32(h, off)
    }

    #[test]
    fn pipe_counts_ends_and_frees_the_ring_with_the_last_close() {
        let mut fs = server(64);
        let before = fs.cache.statfs().1;
        let (ino, r, w, h) = pipe(&mut fs, S1);
        assert_eq!(fs.cache.statfs().1, before - 1 - DATA_BLOCKS as u64);
        assert_eq!(word(&fs, h, hdr::READERS), 1);
        assert_eq!(word(&fs, h, hdr::WRITERS), 1);
        assert_eq!(word(&fs, h, hdr::NBLOCKS), DATA_BLOCKS as u32);
        let mut out = Vec::new();
        // fstat of the anonymous inode says FIFO.
        match fs.handle(S1, ME, Request::GetAttr { ino }, &mut out) {
            Reply::Attr(a) => assert_eq!(a.ftype, FileType::Fifo),
            other => panic!("{other:?}"),
        }
        let rseq = word(&fs, h, hdr::RSEQ);
        assert!(matches!(
            fs.handle(S1, ME, Request::Close { desc: w }, &mut out),
            Reply::Ok
        ));
        assert_eq!(word(&fs, h, hdr::WRITERS), 0);
        assert_ne!(word(&fs, h, hdr::RSEQ), rseq, "readers are woken for EOF");
        assert!(matches!(
            fs.handle(S1, ME, Request::Close { desc: r }, &mut out),
            Reply::Ok
        ));
        assert_eq!(fs.cache.statfs().1, before);
        assert!(matches!(
            fs.handle(S1, ME, Request::GetAttr { ino }, &mut out),
            Reply::Err(Errno::ENOENT)
        ));
        assert_eq!(fs.pipe_stats().0, 1);
    }

    #[test]
    fn a_dead_session_drops_its_ends_but_shared_ends_survive() {
        let mut fs = server(64);
        let (_, r, w, h) = pipe(&mut fs, S1);
        let mut out = Vec::new();
        assert!(matches!(
            fs.handle(
                S1,
                ME,
                Request::Share {
                    desc: w,
                    to: S2,
                    held: 0
                },
                &mut out
            ),
            Reply::Ok
        ));
        fs.handle(S1, ME, Request::Close { desc: w }, &mut out);
        assert_eq!(word(&fs, h, hdr::WRITERS), 1, "S2 still holds the end");
        fs.session_closed(S2);
        assert_eq!(word(&fs, h, hdr::WRITERS), 0, "killed writer: EOF");
        assert_eq!(word(&fs, h, hdr::READERS), 1);
        assert!(matches!(
            fs.handle(S1, ME, Request::PipeHeader { desc: r }, &mut out),
            Reply::Pipe { header, .. } if header == h
        ));
    }

    /// A FIFO named `f` in the root directory.
    fn make_fifo(fs: &mut FileServer<MemStore>) {
        let mut out = Vec::new();
        let r = fs.handle(
            S1,
            ME,
            Request::MakeNode {
                dir: atoll_proto::ROOT,
                name: b"f",
                ftype: FileType::Fifo,
                perm: 0o644,
                rdev: 0,
                target: b"",
                home: 0,
                spread: 0,
                inherit: atoll_proto::Inherit::Unread,
                umask: 0,
            },
            &mut out,
        );
        assert!(matches!(r, Reply::Entry { .. }), "{r:?}");
    }

    #[test]
    fn fifo_gets_a_ring_on_open_and_rdwr_counts_both() {
        let mut fs = server(64);
        let mut out = Vec::new();
        make_fifo(&mut fs);
        let open = |fs: &mut FileServer<MemStore>, flags: i32| {
            let mut out = Vec::new();
            match fs.handle(
                S1,
                ME,
                Request::Open {
                    dir: atoll_proto::ROOT,
                    name: b"f",
                    flags: flags as u32,
                    perm: 0,
                    umask: 0,
                    inherit: atoll_proto::Inherit::Unread,
                },
                &mut out,
            ) {
                Reply::Opened { desc, .. } => desc,
                other => panic!("{other:?}"),
            }
        };
        let d = open(&mut fs, libc::O_RDWR);
        let h = match fs.handle(S1, ME, Request::PipeHeader { desc: d }, &mut out) {
            Reply::Pipe { header, .. } => header,
            other => panic!("{other:?}"),
        };
        assert_eq!(word(&fs, h, hdr::READERS), 1);
        assert_eq!(word(&fs, h, hdr::WRITERS), 1);
        let d2 = open(&mut fs, libc::O_WRONLY);
        assert_eq!(word(&fs, h, hdr::WRITERS), 2);
        assert_eq!(word(&fs, h, hdr::WOPENS), 2);
        fs.handle(S1, ME, Request::Close { desc: d }, &mut out);
        fs.handle(S1, ME, Request::Close { desc: d2 }, &mut out);
        assert!(matches!(
            fs.handle(S1, ME, Request::PipeHeader { desc: d2 }, &mut out),
            Reply::Err(Errno::EBADF)
        ));
        // O_PATH opens no end and needs no ring.
        let p = open(&mut fs, libc::O_PATH);
        assert!(matches!(
            fs.handle(S1, ME, Request::PipeHeader { desc: p }, &mut out),
            Reply::Err(Errno::EINVAL)
        ));
    }

    /// A FIFO open decides whether it must wait for a partner in the step
    /// that counts it: a writer that opens and closes before the reader
    /// asks for its ring is still seen.
    #[test]
    fn fifo_opens_record_whether_a_partner_was_there() {
        let mut fs = server(64);
        let mut out = Vec::new();
        make_fifo(&mut fs);
        let mut open = |fs: &mut FileServer<MemStore>, flags: i32| {
            let open = Request::Open {
                dir: atoll_proto::ROOT,
                name: b"f",
                flags: flags as u32,
                perm: 0,
                umask: 0,
                inherit: atoll_proto::Inherit::Unread,
            };
            let desc = match fs.handle(S1, ME, open, &mut out) {
                Reply::Opened { desc, .. } => desc,
                other => panic!("{other:?}"),
            };
            match fs.handle(S1, ME, Request::PipeHeader { desc }, &mut out) {
                Reply::Pipe { partner_opens, .. } => (desc, partner_opens),
                other => panic!("{other:?}"),
            }
        };
        // A reader alone waits on the write-open count as it was (0).
        let (reader, seen) = open(&mut fs, libc::O_RDONLY);
        assert_eq!(seen, Some(0));
        // A writer finds the reader: no wait. It closes before the reader
        // looks; the count the reader waits on has moved on.
        let (writer, seen) = open(&mut fs, libc::O_WRONLY);
        assert_eq!(seen, None);
        let mut out2 = Vec::new();
        fs.handle(S1, ME, Request::Close { desc: writer }, &mut out2);
        let h = match fs.handle(S1, ME, Request::PipeHeader { desc: reader }, &mut out2) {
            Reply::Pipe { header, .. } => header,
            other => panic!("{other:?}"),
        };
        assert_eq!(word(&fs, h, hdr::WOPENS), 1);
        assert_eq!(word(&fs, h, hdr::WRITERS), 0);
        // A second reader, opened while no writer is open, waits from 1.
        let (_, seen) = open(&mut fs, libc::O_RDONLY);
        assert_eq!(seen, Some(1));
    }

    #[test]
    fn out_of_blocks_is_enfile_and_leaks_nothing() {
        let mut fs = server(8);
        let mut out = Vec::new();
        let (before, inodes) = (fs.cache.statfs().1, fs.stats().inodes);
        assert!(matches!(
            fs.handle(S1, ME, Request::Pipe { flags: 0 }, &mut out),
            Reply::Err(Errno::ENFILE)
        ));
        assert_eq!(fs.cache.statfs().1, before);
        assert_eq!(fs.stats().inodes, inodes);
        assert!(matches!(
            fs.handle(S1, ME, Request::Pipe { flags: 0x1234_0000 }, &mut out),
            Reply::Err(Errno::EINVAL)
        ));
    }
}
