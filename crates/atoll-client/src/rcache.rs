//! A remote process's cache of file data (fos §3.2, Cosh §5 *copy*), with
//! close-to-open consistency (Hare §3.3.1, the rules of the incoherent
//! island, `incoherent.rs`).
//!
//! A program on another node than the file servers reads through
//! `ReadData` messages that cross both proxies and the network: tens of
//! microseconds per 8 KiB. Reading the same bytes again (a linker reading
//! an archive twice, sqlite its pages, `git` its packs, the loader a
//! library it maps twice) need not cross again. So such a process keeps
//! private copies of the whole 8 KiB chunks it read, as an NFS client
//! keeps pages, and answers later reads of them from memory.
//!
//! What holds, as on NFS and in the incoherent island:
//!
//! * **Open validates.** Every `Opened` reply carries the file's size,
//!   mtime and ctime (its *stamp*). Copies are kept only for files this
//!   process opened, with the stamp seen then; an open (or a `stat`
//!   answer) that shows another stamp drops the file's copies. So a
//!   process that opens a file after another closed it reads what the
//!   other wrote (close-to-open). A process that keeps a file open may
//!   read old bytes while another host rewrites it in place.
//! * **Own changes drop copies.** Every request of this process that can
//!   change file data (`Write`, `WriteData`, `Fallocate`, a truncating
//!   `SetAttr`; a shared mapping's bytes go back as `WriteData`) drops
//!   every copy before it is sent, so a process always reads its own
//!   writes.
//! * **Locks are synchronisation points.** `SetLock` (`fcntl`, `flock`)
//!   drops every copy too, so a program that orders its accesses with
//!   locks (sqlite) reads what the last holder wrote.
//! * **Ends are never cached.** A chunk the file ends in (a short reply)
//!   is not kept: a reader following a growing file (`tail -f`) always asks
//!   the server past the last whole chunk.
//!
//! Not reported: a read served here reaches no server, so it makes no
//! `IN_ACCESS` and moves no atime (an NFS client's cached reads do not
//! either). Only processes attached through a node's proxy
//! (`InstanceInfo::remote`) keep copies; on the servers' own host a
//! message is a few microseconds and the copy island stays exact.
//! `--without remote-copies` turns them off (every read crosses).
//!
//! Threads share the copies under one lock, held only for map work, never
//! across a message. A fetch that raced with a drop (another thread's
//! open saw a new stamp while the bytes were on their way) is not kept:
//! each file's copies carry a generation that every drop advances.

use crate::fixedhash::Map;

use atoll_proto::{Attr, DescId, InodeId, Reply, Request, Timespec};

use crate::error::Result;
use crate::session::{Client, Lane};
use crate::sys::SpinLock;

/// Bytes of copies one process keeps; past this every copy is dropped
/// (the common reader reads each file once; the bound keeps a long-lived
/// process from growing without limit).
const LIMIT_BYTES: usize = 32 << 20;
/// Bytes of one copy: the node's chunk (`node/copies.rs`), so the whole
/// chunks a process fetches are whole chunks its node may keep.
const CHUNK: usize = 8192;
/// Files whose stamps one process remembers; past this all are forgotten
/// (a process that opens millions of files keeps no list of them).
const LIMIT_FILES: usize = 16384;

type Chunk = Box<[u8; CHUNK]>;

/// What a file looked like when this process last opened or stat'ed it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Stamp {
    size: u64,
    mtime: Timespec,
    ctime: Timespec,
}

impl Stamp {
    fn of(a: &Attr) -> Stamp {
        Stamp {
            size: a.size,
            mtime: a.mtime,
            ctime: a.ctime,
        }
    }
}

struct File {
    stamp: Stamp,
    /// Advanced by every drop of this file's copies.
    generation: u64,
    /// Whole chunks by index (`offset / CHUNK`).
    chunks: Map<u64, Chunk>,
}

#[derive(Default)]
struct Copies {
    files: Map<InodeId, File>,
    bytes: usize,
    /// Advanced by every drop of all copies.
    generation: u64,
}

impl Copies {
    /// A stamp seen in an answer: a file already known with another stamp
    /// loses its copies; `open` also starts knowing the file.
    fn saw(&mut self, ino: InodeId, stamp: Stamp, open: bool) {
        match self.files.get_mut(&ino) {
            Some(f) if f.stamp != stamp => {
                self.bytes -= f.chunks.len() * CHUNK;
                f.chunks.clear();
                f.stamp = stamp;
                f.generation += 1;
            }
            Some(_) => {}
            None if open => {
                if self.files.len() >= LIMIT_FILES {
                    self.files.clear();
                    self.bytes = 0;
                    self.generation += 1;
                }
                self.files.insert(
                    ino,
                    File {
                        stamp,
                        generation: 0,
                        chunks: Map::default(),
                    },
                );
            }
            None => {}
        }
    }

    fn drop_all(&mut self) {
        for f in self.files.values_mut() {
            if !f.chunks.is_empty() {
                f.chunks.clear();
                f.generation += 1;
            }
        }
        self.bytes = 0;
        self.generation += 1;
    }

    /// The generations a fetch for `ino` must still find to keep its
    /// bytes; `None`: the file is not known (not opened here).
    fn ticket(&self, ino: InodeId) -> Option<(u64, u64)> {
        self.files
            .get(&ino)
            .map(|f| (self.generation, f.generation))
    }

    fn keep(&mut self, ino: InodeId, ticket: (u64, u64), index: u64, bytes: &[u8]) {
        if self.generation != ticket.0 {
            return;
        }
        let Some(f) = self.files.get_mut(&ino) else {
            return;
        };
        if f.generation != ticket.1 || f.chunks.contains_key(&index) {
            return;
        }
        let mut chunk: Chunk = Box::new([0u8; CHUNK]);
        chunk.copy_from_slice(bytes);
        f.chunks.insert(index, chunk);
        self.bytes += CHUNK;
        if self.bytes > LIMIT_BYTES {
            self.drop_all();
        }
    }

    /// Copy what the copies hold of `[at, at + dst.len())` from its start;
    /// how many bytes (stops at the first chunk not held).
    fn copy_out(&self, ino: InodeId, at: u64, dst: &mut [u8]) -> usize {
        let Some(f) = self.files.get(&ino) else {
            return 0;
        };
        let mut done = 0usize;
        while done < dst.len() {
            let pos = at + done as u64;
            let Some(chunk) = f.chunks.get(&(pos / CHUNK as u64)) else {
                break;
            };
            let within = (pos % CHUNK as u64) as usize;
            let n = (CHUNK - within).min(dst.len() - done);
            dst[done..done + n].copy_from_slice(&chunk[within..within + n]);
            done += n;
        }
        done
    }
}

struct Shared {
    copies: core::cell::UnsafeCell<Option<Copies>>,
}

// SAFETY: `copies` is only touched under `fork_lock()`.
unsafe impl Sync for Shared {}

static SHARED: Shared = Shared {
    copies: core::cell::UnsafeCell::new(None),
};

/// The copies' lock, for [`crate::forkgate`].
pub fn fork_lock() -> &'static SpinLock {
    &crate::forkgate::LOCKS.rcache
}

fn with<R>(f: impl FnOnce(&mut Copies) -> R) -> R {
    let _g = fork_lock().lock();
    // SAFETY: the lock is held for the whole use of the copies.
    let m = unsafe { &mut *SHARED.copies.get() };
    f(m.get_or_insert_with(Copies::default))
}

/// Does this process keep copies (attached through a node's proxy)?
#[inline]
pub fn active(c: &Client) -> bool {
    c.info.remote && !c.info.without.remote_copies
}

/// Can `req` change file data? (Checked before it is sent.)
fn changes_data(req: &Request<'_>) -> bool {
    match req {
        Request::Write { .. }
        | Request::WriteData { .. }
        | Request::Fallocate { .. }
        | Request::SetLock { .. } => true,
        Request::SetAttr { set, .. } => set.size.is_some(),
        _ => false,
    }
}

/// A request about to be sent: drop every copy if it may change data.
#[inline]
pub fn sending(c: &Client, req: &Request<'_>) {
    if active(c) && changes_data(req) {
        with(Copies::drop_all);
    }
}

/// A reply received: a stamp in it validates (or drops) the file's copies.
#[inline]
pub fn replied(c: &Client, reply: &Reply<'_>) {
    if !active(c) {
        return;
    }
    match reply {
        Reply::Opened { attr, .. } => with(|m| m.saw(attr.ino, Stamp::of(attr), true)),
        Reply::Attr(attr) => with(|m| m.saw(attr.ino, Stamp::of(attr), false)),
        _ => {}
    }
}

/// Read `[at, at + buf.len())` of `ino` through `desc`: held chunks from
/// memory, the rest fetched in whole chunks (kept if whole). `None` when
/// this process keeps no copies of `ino` (not remote, or not opened here,
/// e.g. a descriptor inherited across `execve`): the caller reads as usual.
pub fn read(
    c: &Client,
    lane: &Lane,
    ino: InodeId,
    desc: DescId,
    buf: &mut [u8],
    at: u64,
) -> Option<Result<usize>> {
    if !active(c) || buf.is_empty() {
        return None;
    }
    let ticket = with(|m| m.ticket(ino))?;
    let mut done = with(|m| m.copy_out(ino, at, buf));
    if done == buf.len() {
        crate::counters::bump(&crate::counters::REMOTE_COPY_HITS);
        return Some(Ok(done));
    }
    crate::counters::bump(&crate::counters::REMOTE_COPY_FETCHES);
    // Fetch from the first chunk not held to the end of the read, whole
    // chunks, in one windowed read (`msgdata`).
    let chunk = CHUNK as u64;
    let pos = at + done as u64;
    let first = pos / chunk;
    let end = (at + buf.len() as u64).div_ceil(chunk);
    let mut fetched = vec![0u8; ((end - first) * chunk) as usize];
    let got = match crate::msgdata::read(c, lane, desc, &mut fetched, Some(first * chunk)) {
        Ok(n) => n,
        Err(e) if done == 0 => return Some(Err(e)),
        Err(_) => return Some(Ok(done)),
    };
    with(|m| {
        for (i, bytes) in fetched[..got].chunks_exact(CHUNK).enumerate() {
            m.keep(ino, ticket, first + i as u64, bytes);
        }
    });
    let skip = (pos - first * chunk) as usize;
    if got > skip {
        let n = (got - skip).min(buf.len() - done);
        buf[done..done + n].copy_from_slice(&fetched[skip..skip + n]);
        done += n;
    }
    Some(Ok(done))
}

#[cfg(test)]
mod tests {
    use super::*;

    const F: InodeId = InodeId(0x0100_0000_0000_0009);

    fn stamp(size: u64, sec: i64) -> Stamp {
        let t = Timespec { sec, nsec: 0 };
        Stamp {
            size,
            mtime: t,
            ctime: t,
        }
    }

    fn chunk(b: u8) -> Vec<u8> {
        vec![b; CHUNK]
    }

    #[test]
    fn only_files_opened_here_keep_copies_and_a_new_stamp_drops_them() {
        let mut m = Copies::default();
        assert_eq!(m.ticket(F), None, "a stat alone does not start a file");
        m.saw(F, stamp(20000, 1), false);
        assert_eq!(m.ticket(F), None);
        m.saw(F, stamp(20000, 1), true);
        let t = m.ticket(F).unwrap();
        m.keep(F, t, 0, &chunk(7));
        m.keep(F, t, 1, &chunk(8));
        let mut out = vec![0u8; 3 * CHUNK];
        assert_eq!(m.copy_out(F, 100, &mut out), 2 * CHUNK - 100);
        assert_eq!((out[0], out[CHUNK - 101], out[CHUNK - 100]), (7, 7, 8));
        m.saw(F, stamp(20000, 1), true);
        assert_eq!(m.copy_out(F, 0, &mut out[..10]), 10, "same stamp keeps");
        m.saw(F, stamp(20000, 2), false);
        assert_eq!(m.copy_out(F, 0, &mut out[..10]), 0, "another stamp drops");
        assert_eq!(m.bytes, 0);
    }

    #[test]
    fn a_fetch_that_raced_with_a_drop_is_not_kept() {
        let mut m = Copies::default();
        m.saw(F, stamp(1, 1), true);
        let before_open = m.ticket(F).unwrap();
        m.saw(F, stamp(2, 2), true);
        m.keep(F, before_open, 0, &chunk(1));
        let before_write = m.ticket(F).unwrap();
        m.drop_all();
        m.keep(F, before_write, 0, &chunk(1));
        let mut out = [0u8; 4];
        assert_eq!(m.copy_out(F, 0, &mut out), 0);
        let now = m.ticket(F).unwrap();
        m.keep(F, now, 0, &chunk(1));
        assert_eq!(m.copy_out(F, 0, &mut out), 4);
    }

    #[test]
    fn the_bound_drops_everything_once_passed() {
        let mut m = Copies::default();
        m.saw(F, stamp(1, 1), true);
        let t = m.ticket(F).unwrap();
        let n = (LIMIT_BYTES / CHUNK) as u64;
        for i in 0..n {
            m.keep(F, t, i, &chunk(3));
        }
        assert_eq!(m.bytes, LIMIT_BYTES);
        m.keep(F, t, n, &chunk(3));
        assert_eq!(m.bytes, 0, "one past the bound drops all");
    }

    #[test]
    fn the_files_remembered_are_bounded_and_forgetting_voids_fetches() {
        let mut m = Copies::default();
        m.saw(F, stamp(1, 1), true);
        let t = m.ticket(F).unwrap();
        for i in 1..LIMIT_FILES as u64 {
            m.saw(InodeId(F.0 + i), stamp(1, 1), true);
        }
        assert_eq!(m.files.len(), LIMIT_FILES);
        m.saw(InodeId(F.0 + LIMIT_FILES as u64), stamp(1, 1), true);
        assert_eq!(m.files.len(), 1, "forgotten, then the new one");
        m.saw(F, stamp(1, 1), true);
        m.keep(F, t, 0, &chunk(1));
        assert_eq!(m.copy_out(F, 0, &mut [0u8; 4]), 0, "a fetch from before");
    }

    #[test]
    fn writes_locks_and_truncation_change_data_and_reads_do_not() {
        let d = DescId(5);
        assert!(changes_data(&Request::WriteData {
            desc: d,
            offset: Some(0),
            data: b"x",
            fsize: None,
            chain: None,
        }));
        assert!(!changes_data(&Request::ReadData {
            desc: d,
            len: 1,
            offset: Some(0),
            report: false,
        }));
        assert!(!changes_data(&Request::GetAttr { ino: F }));
        assert!(changes_data(&Request::SetAttr {
            ino: F,
            set: atoll_proto::SetAttr {
                size: Some(0),
                ..atoll_proto::SetAttr::NONE
            },
            via: None,
        }));
        assert!(!changes_data(&Request::SetAttr {
            ino: F,
            set: atoll_proto::SetAttr::NONE,
            via: None,
        }));
    }
}
