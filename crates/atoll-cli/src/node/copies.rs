//! The node's copies of remote file data: one level below each program's
//! own copies (client `rcache.rs`), shared by every program of this node
//! (fos §3.2: the proxy on each machine stands for the remote servers; an
//! NFS client's page cache is shared by the machine's processes in the
//! same way). The edge proxy relays every `ReadData` of its programs, so
//! it is where a second program's read of what a first one read can be
//! answered without crossing the network — every compile of a `make -j`
//! reading the same headers.
//!
//! The rules are exactly those of the per-process copies (Hare §3.3.1's
//! close-to-open, the incoherent island's):
//!
//! * **An open's stamp validates.** The edge learns each description's
//!   inode and the stamp (size, mtime, ctime) its `Opened` reply carried.
//!   The node keeps one stamp per inode, the last seen (in an `Opened` or
//!   an `Attr` reply); another stamp drops the inode's chunks. A read is
//!   answered here only for a description whose open-time stamp is the
//!   inode's stamp now, and a chunk is kept only if it was fetched through
//!   such a description: so a program that opens a file after a writer on
//!   any host closed it (its open shows the writer's stamp) never reads a
//!   chunk kept before.
//! * **Changes made through this node drop chunks.** A `Write`,
//!   `WriteData`, `Fallocate`, truncating `SetAttr` or `SetLock` relayed
//!   from any program of the node drops the inode's chunks when it leaves
//!   *and again when its reply comes back*: a read that the servers served
//!   before the change but whose reply is relayed after it would otherwise
//!   be kept, and the writer could then read its old bytes (a lock holder,
//!   what the holder before it wrote). A change through a description the
//!   node does not know drops everything.
//! * **A fetch that raced with a drop is not kept**: every drop advances a
//!   generation (per inode, and one for all), and a relayed read keeps its
//!   chunk only if the generations it saw when it left are still there.
//! * **Ends are never kept**: only a whole 8 KiB chunk (a full `ReadData`
//!   of a chunk-aligned 8 KiB, what a program's copies fetch) is kept, so a
//!   reader following a growing file always asks past the last whole one.
//!
//! A read is answered only for the process that opened the description
//! (its boot connection): description ids are sequential, and another
//! process of the node must not read through one it does not hold.
//!
//! Memory is bounded: at most [`LIMIT_BYTES`] of chunks, evicted by a
//! clock (second chance, as a page cache's), and bounded tables of
//! descriptions, stamps and reads in flight (past a bound a table is
//! forgotten, which only costs hits).

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use atoll_proto::{
    Attr, DescId, FileType, InodeId, Reply, ReplyFrame, Request, RequestFrame, Timespec,
};

use super::wire::{ChanId, ConnId};

/// One chunk: what a program's copies fetch at a time (client
/// `msgdata::DATA_CHUNK`, the largest `ReadData`).
pub const CHUNK: usize = 8192;
/// Bytes of chunks a node keeps (four programs' worth of per-process
/// copies, 32 MiB each).
pub const LIMIT_BYTES: usize = 128 << 20;
/// Entries of each table past which that table is forgotten.
const LIMIT_ENTRIES: usize = 65536;

/// What a file looked like in an `Opened` or `Attr` reply.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Stamp {
    size: u64,
    mtime: Timespec,
    ctime: Timespec,
}

impl Stamp {
    pub fn of(a: &Attr) -> Stamp {
        Stamp {
            size: a.size,
            mtime: a.mtime,
            ctime: a.ctime,
        }
    }
}

#[derive(Clone, Copy)]
struct Desc {
    ino: InodeId,
    stamp: Stamp,
    /// The process that opened it: the only one answered here.
    conn: ConnId,
}

struct File {
    stamp: Stamp,
    /// Advanced by every drop of this file's chunks.
    generation: u64,
    /// Indexes of the chunks held.
    held: HashSet<u64>,
}

struct Held {
    bytes: Box<[u8]>,
    /// Matches the clock's entry for this chunk (a chunk dropped and kept
    /// again has a new one; the old entry is skipped).
    serial: u64,
    /// Read since the clock last passed (second chance).
    used: bool,
}

/// A relayed request whose reply the node waits for.
#[derive(Clone, Copy)]
enum Pending {
    /// A whole chunk fetched through a description valid at the time:
    /// kept if the generations are still `ticket`.
    Read {
        ino: InodeId,
        index: u64,
        ticket: (u64, u64),
    },
    /// A change (`None`: of a file the node does not know): drop again
    /// when the servers have made it.
    Change(Option<InodeId>),
}

/// What to do with a program's request.
pub enum Verdict {
    /// Send it to the head.
    Forward,
    /// Answer it with this reply frame, here.
    Answer(Vec<u8>),
}

/// The tables, under one lock (held for map work only, never across a
/// message or a ring).
pub struct Copies {
    limit_chunks: usize,
    descs: HashMap<DescId, Desc>,
    files: HashMap<InodeId, File>,
    chunks: HashMap<(InodeId, u64), Held>,
    /// Every kept chunk once, oldest first, with its serial.
    clock: VecDeque<((InodeId, u64), u64)>,
    next_serial: u64,
    /// Advanced by every drop of all chunks.
    generation: u64,
    pending: HashMap<(ChanId, u64), Pending>,
}

impl Copies {
    pub fn new(limit_bytes: usize) -> Copies {
        Copies {
            limit_chunks: (limit_bytes / CHUNK).max(1),
            descs: HashMap::new(),
            files: HashMap::new(),
            chunks: HashMap::new(),
            clock: VecDeque::new(),
            next_serial: 0,
            generation: 0,
            pending: HashMap::new(),
        }
    }

    pub fn bytes(&self) -> usize {
        self.chunks.len() * CHUNK
    }

    /// A stamp seen in a reply: a file known with another one loses its
    /// chunks; an open also starts knowing the file.
    fn saw(&mut self, ino: InodeId, stamp: Stamp, open: bool) {
        match self.files.get_mut(&ino) {
            Some(f) if f.stamp != stamp => {
                f.stamp = stamp;
                self.drop_file(ino);
            }
            Some(_) => {}
            None if open => {
                if self.files.len() >= LIMIT_ENTRIES {
                    self.drop_all();
                    self.files.clear();
                }
                self.files.insert(
                    ino,
                    File {
                        stamp,
                        generation: 0,
                        held: HashSet::new(),
                    },
                );
            }
            None => {}
        }
    }

    fn drop_file(&mut self, ino: InodeId) {
        let Some(f) = self.files.get_mut(&ino) else {
            return;
        };
        f.generation += 1;
        for index in f.held.drain() {
            self.chunks.remove(&(ino, index));
        }
    }

    fn drop_all(&mut self) {
        self.chunks.clear();
        for f in self.files.values_mut() {
            f.held.clear();
        }
        self.clock.clear();
        self.generation += 1;
    }

    fn change(&mut self, ino: Option<InodeId>) {
        match ino {
            Some(ino) => self.drop_file(ino),
            None => self.drop_all(),
        }
    }

    fn ticket(&self, ino: InodeId) -> Option<(u64, u64)> {
        self.files
            .get(&ino)
            .map(|f| (self.generation, f.generation))
    }

    fn keep(&mut self, ino: InodeId, ticket: (u64, u64), index: u64, bytes: &[u8]) {
        if bytes.len() != CHUNK || self.ticket(ino) != Some(ticket) {
            return;
        }
        let serial = self.next_serial;
        match self.chunks.entry((ino, index)) {
            Entry::Occupied(_) => return,
            Entry::Vacant(v) => {
                v.insert(Held {
                    bytes: bytes.into(),
                    serial,
                    used: false,
                });
            }
        }
        if let Some(f) = self.files.get_mut(&ino) {
            f.held.insert(index);
        }
        self.next_serial += 1;
        self.clock.push_back(((ino, index), serial));
        while self.chunks.len() > self.limit_chunks {
            self.evict_one();
        }
        // Entries of dropped chunks stay in the clock until the hand
        // passes them; keep them from outgrowing the chunks held.
        if self.clock.len() > 2 * self.limit_chunks + 64 {
            let chunks = &self.chunks;
            self.clock
                .retain(|(k, s)| chunks.get(k).is_some_and(|h| h.serial == *s));
        }
    }

    /// The clock's hand: the oldest chunk not read since it last passed.
    fn evict_one(&mut self) {
        while let Some((k, serial)) = self.clock.pop_front() {
            let Some(h) = self.chunks.get_mut(&k) else {
                continue;
            };
            if h.serial != serial {
                continue;
            }
            if h.used {
                h.used = false;
                self.clock.push_back((k, serial));
                continue;
            }
            self.chunks.remove(&k);
            if let Some(f) = self.files.get_mut(&k.0) {
                f.held.remove(&k.1);
            }
            return;
        }
    }

    /// `[at, at + len)` of `ino` if every chunk of it is held.
    fn copy_out(&mut self, ino: InodeId, at: u64, len: usize) -> Option<Vec<u8>> {
        let mut out = Vec::with_capacity(len);
        while out.len() < len {
            let pos = at + out.len() as u64;
            let h = self.chunks.get_mut(&(ino, pos / CHUNK as u64))?;
            h.used = true;
            let within = (pos % CHUNK as u64) as usize;
            let n = (CHUNK - within).min(len - out.len());
            out.extend_from_slice(&h.bytes[within..within + n]);
        }
        Some(out)
    }

    /// A program's request on `chan` of process `conn`, about to leave:
    /// answer it here (only if `may_answer`: no reply is owed on `chan`,
    /// so an answer cannot pass one), or forward it; `fetched` is set for
    /// a read of a valid description that crosses.
    pub fn request(
        &mut self,
        conn: ConnId,
        chan: ChanId,
        frame: &[u8],
        may_answer: bool,
        fetched: &mut bool,
    ) -> Verdict {
        let Ok(f) = atoll_proto::decode::<RequestFrame<'_>>(frame) else {
            return Verdict::Forward;
        };
        let call = !atoll_proto::is_posted(f.id);
        let changed = match f.req {
            Request::ReadData {
                desc,
                len,
                offset: Some(at),
                ..
            } if len > 0 => {
                let Some(d) = self.descs.get(&desc).copied() else {
                    return Verdict::Forward;
                };
                let valid =
                    d.conn == conn && self.files.get(&d.ino).map(|f| f.stamp) == Some(d.stamp);
                if !valid {
                    return Verdict::Forward;
                }
                if may_answer {
                    if let Some(bytes) = self.copy_out(d.ino, at, len as usize) {
                        let reply = ReplyFrame {
                            id: f.id,
                            reply: Reply::Data(&bytes),
                        };
                        if let Ok(v) = postcard::to_allocvec(&reply) {
                            return Verdict::Answer(v);
                        }
                    }
                }
                *fetched = true;
                if call && at % CHUNK as u64 == 0 && len as usize == CHUNK {
                    if let Some(ticket) = self.ticket(d.ino) {
                        self.pend(
                            chan,
                            f.id,
                            Pending::Read {
                                ino: d.ino,
                                index: at / CHUNK as u64,
                                ticket,
                            },
                        );
                    }
                }
                return Verdict::Forward;
            }
            Request::Write { desc, .. }
            | Request::WriteData { desc, .. }
            | Request::SetLock { desc, .. } => Some(self.descs.get(&desc).map(|d| d.ino)),
            Request::Fallocate { ino, .. } => Some(Some(ino)),
            Request::SetAttr { ino, set, .. } if set.size.is_some() => Some(Some(ino)),
            Request::Close { desc } => {
                // Only the opener's close forgets it (a child sharing the
                // description closes its own reference).
                if self.descs.get(&desc).is_some_and(|d| d.conn == conn) {
                    self.descs.remove(&desc);
                }
                None
            }
            _ => None,
        };
        if let Some(ino) = changed {
            self.change(ino);
            if call {
                self.pend(chan, f.id, Pending::Change(ino));
            }
        }
        Verdict::Forward
    }

    fn pend(&mut self, chan: ChanId, id: u64, p: Pending) {
        if self.pending.len() >= LIMIT_ENTRIES {
            // Changes forgotten would not drop again at their replies.
            self.pending.clear();
            self.drop_all();
        }
        self.pending.insert((chan, id), p);
    }

    /// A reply of the head for `chan` of process `conn`, about to be put
    /// in its ring.
    pub fn reply(&mut self, conn: ConnId, chan: ChanId, frame: &[u8]) {
        let Ok(f) = atoll_proto::decode::<ReplyFrame<'_>>(frame) else {
            return;
        };
        match self.pending.remove(&(chan, f.id)) {
            Some(Pending::Read { ino, index, ticket }) => {
                if let Reply::Data(bytes) = f.reply {
                    self.keep(ino, ticket, index, bytes);
                }
                return;
            }
            Some(Pending::Change(ino)) => self.change(ino),
            None => {}
        }
        match f.reply {
            // Only regular files have data to keep (directories, FIFOs
            // and devices would only fill the tables).
            Reply::Opened { desc, attr, .. } if attr.ftype == FileType::Regular => {
                let stamp = Stamp::of(&attr);
                self.saw(attr.ino, stamp, true);
                if self.descs.len() >= LIMIT_ENTRIES {
                    self.descs.clear();
                }
                self.descs.insert(
                    desc,
                    Desc {
                        ino: attr.ino,
                        stamp,
                        conn,
                    },
                );
            }
            Reply::Attr(attr) => self.saw(attr.ino, Stamp::of(&attr), false),
            _ => {}
        }
    }

    /// `chan` ended: the replies it waited for will not come (a change's
    /// second drop is made now).
    pub fn chan_closed(&mut self, chan: ChanId) {
        let mut changes = Vec::new();
        self.pending.retain(|(c, _), p| {
            if *c != chan {
                return true;
            }
            if let Pending::Change(ino) = p {
                changes.push(*ino);
            }
            false
        });
        for ino in changes {
            self.change(ino);
        }
    }

    /// Process `conn` ended: its descriptions are answered no more.
    pub fn conn_closed(&mut self, conn: ConnId) {
        self.descs.retain(|_, d| d.conn != conn);
    }
}

/// The node's copies as the edge uses them: switchable, counted.
pub struct NodeCopies {
    /// Off under `--without node-copies` (learnt from the instance's
    /// `Attached` answers) until the first program attaches.
    on: AtomicBool,
    copies: Mutex<Copies>,
    pub hits: AtomicU64,
    pub fetches: AtomicU64,
}

impl Default for NodeCopies {
    fn default() -> Self {
        NodeCopies {
            on: AtomicBool::new(false),
            copies: Mutex::new(Copies::new(LIMIT_BYTES)),
            hits: AtomicU64::new(0),
            fetches: AtomicU64::new(0),
        }
    }
}

impl NodeCopies {
    pub fn set_on(&self, on: bool) {
        self.on.store(on, Ordering::Relaxed);
    }

    #[inline]
    pub fn on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    pub fn with<R>(&self, f: impl FnOnce(&mut Copies) -> R) -> R {
        f(&mut self.copies.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Named counters for `atoll status` at this node.
    pub fn counters(&self) -> Vec<(String, u64)> {
        vec![
            (
                "node_copies.hits".to_string(),
                self.hits.load(Ordering::Relaxed),
            ),
            (
                "node_copies.fetches".to_string(),
                self.fetches.load(Ordering::Relaxed),
            ),
            (
                "node_copies.bytes".to_string(),
                self.with(|c| c.bytes()) as u64,
            ),
        ]
    }
}

#[cfg(test)]
#[path = "copies_tests.rs"]
mod tests;
