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
//! * **Ends are never kept**: only whole 8 KiB chunks (of a `ReadData` of
//!   whole chunks at a chunk-aligned offset, what a program's copies
//!   fetch) are kept, so a reader following a growing file always asks
//!   past the last whole one.
//!
//! A read is answered only for the process that opened the description
//! (its boot connection): description ids are sequential, and another
//! process of the node must not read through one it does not hold.
//!
//! **Read-ahead** (`read_ahead`): a description read sequentially (each
//! read starting where the last one ended) has the node fetch the whole
//! chunks ahead of it, [`AHEAD_BYTES`] at most, in batches of at least
//! half that sent as one network write on the reader's own channel, so a
//! program's reads (up to 32 KiB) are answered here instead of each
//! crossing (the
//! page cache's read-ahead of an NFS client). Such a fetch is an ordinary
//! `ReadData` of the description with an id of the node's ([`AHEAD`]); it
//! keeps its chunk by the rules above (a ticket taken when it leaves). A
//! read of the program whose bytes lie within one fetch in flight on its
//! own channel *waits* for that reply and is answered from it
//! ([`Verdict::Wait`]): the fetch left before the read came, on the same
//! channel, so the servers serve it before they would have served the
//! read, and any change made through this node meanwhile advanced the
//! generation (the read then does not wait but crosses). Only whole chunks
//! within the size the description was opened with are fetched ahead:
//! never past its end, never the last partial chunk.
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

/// One chunk: what the node keeps and a program's copies keep (client
/// `rcache.rs`); a program's `ReadData` asks for up to four at once.
pub const CHUNK: usize = 8192;
/// Chunks of one read-ahead fetch at most: a program's largest `ReadData`
/// (`atoll_proto::MAX_DATA_CALL`, 32 KiB; issue 16).
const FETCH_CHUNKS: u64 = (atoll_proto::MAX_DATA_CALL / CHUNK) as u64;
/// Bytes of chunks a node keeps (four programs' worth of per-process
/// copies, 32 MiB each).
pub const LIMIT_BYTES: usize = 128 << 20;
/// Request ids of the node's own read-ahead (a program's lane counts its
/// ids from 1, never near this bit; posted ids have bit 63).
pub const AHEAD: u64 = 1 << 62;
/// How far ahead of a sequential reader the node fetches: 32 chunks, half
/// of them per network write once the reader has come half way.
pub const AHEAD_BYTES: u64 = 256 << 10;
/// Read-ahead fetches in flight at once on the whole node, past which no
/// more leave (it bounds the table of fetches waited for).
const AHEAD_LIMIT: usize = 4096;
/// Read-ahead fetches in flight at once on one channel, whatever number
/// of descriptions its lane reads: with a remote write's six 32 KiB pieces
/// their requests (about 40 bytes each) still fit the channel's 256 KiB
/// request ring at the head. The head's pump waits for room in a full
/// ring, and a server whose reply ring is full (of read-ahead replies the
/// pump would take) takes no more requests from it: past the ring, the
/// two would wait for each other.
pub const AHEAD_PER_CHAN: usize = 32;
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
    /// Where its last read ended: a read starting there is sequential.
    next: u64,
    /// Read ahead up to here.
    ahead: u64,
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

/// A program's read waiting for a read-ahead reply: its id, and the part
/// of the fetch's bytes it asked for.
struct Waiter {
    rid: u64,
    within: usize,
    len: usize,
}

/// A relayed request whose reply the node waits for.
enum Pending {
    /// Whole chunks from `index` on fetched through a description valid
    /// at the time: kept if the generations are still `ticket`.
    Read {
        ino: InodeId,
        index: u64,
        ticket: (u64, u64),
    },
    /// A change (`None`: of a file the node does not know): drop again
    /// when the servers have made it.
    Change(Option<InodeId>),
    /// The node's own read-ahead of `count` whole chunks from `index`:
    /// kept as `Read`, and answers the program's reads that wait for it.
    Ahead {
        ino: InodeId,
        index: u64,
        count: u64,
        ticket: (u64, u64),
        waiters: Vec<Waiter>,
    },
}

/// What to do with a program's request.
pub enum Verdict {
    /// Send it to the head.
    Forward,
    /// Answer it with this reply frame, here.
    Answer(Vec<u8>),
    /// A read answered here when the read-ahead of its chunk comes back
    /// (its request id; [`Copies::reply`] gives the answer).
    Wait(u64),
}

/// What to do with a reply of the head.
pub enum Relayed {
    /// Put it in the program's ring.
    Deliver,
    /// A reply to the node's read-ahead: not the program's; these answers
    /// (request id, reply frame) of reads that waited for it are.
    Ahead(Vec<(u64, Vec<u8>)>),
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
    /// Chunks being read ahead: the channel and id of the fetch.
    ahead: HashMap<(InodeId, u64), (ChanId, u64)>,
    /// Read-ahead fetches in flight per channel.
    ahead_on: HashMap<ChanId, usize>,
    next_ahead: u64,
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
            ahead: HashMap::new(),
            ahead_on: HashMap::new(),
            next_ahead: 0,
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

    /// Every whole chunk of `bytes`, read from chunk `index` on (a short
    /// reply's partial end is not kept).
    fn keep_all(&mut self, ino: InodeId, ticket: (u64, u64), index: u64, bytes: &[u8]) {
        for (i, b) in bytes.chunks_exact(CHUNK).enumerate() {
            self.keep(ino, ticket, index + i as u64, b);
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
    /// a read of a valid description that crosses. Read-ahead requests to
    /// send on `chan` after it (if it is forwarded) are added to `ahead`.
    pub fn request(
        &mut self,
        conn: ConnId,
        chan: ChanId,
        frame: &[u8],
        may_answer: bool,
        fetched: &mut bool,
        ahead: &mut Vec<Vec<u8>>,
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
                let Some(d) = self.descs.get_mut(&desc) else {
                    return Verdict::Forward;
                };
                let valid =
                    d.conn == conn && self.files.get(&d.ino).map(|f| f.stamp) == Some(d.stamp);
                if !valid {
                    return Verdict::Forward;
                }
                let sequential = d.next == at;
                d.next = at + u64::from(len);
                if !sequential {
                    d.ahead = 0;
                }
                let d = *d;
                if call && sequential {
                    // Fetches of the reader's own step, so that each of
                    // its reads falls within one (and may wait for it).
                    let unit = if at.is_multiple_of(CHUNK as u64)
                        && (len as usize).is_multiple_of(CHUNK)
                    {
                        (u64::from(len) / CHUNK as u64).min(FETCH_CHUNKS)
                    } else {
                        1
                    };
                    self.read_ahead(chan, &f, desc, d, unit, ahead);
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
                if call && may_answer && self.wait_ahead(chan, d.ino, at, len as usize, f.id) {
                    return Verdict::Wait(f.id);
                }
                *fetched = true;
                if call && at.is_multiple_of(CHUNK as u64) && (len as usize).is_multiple_of(CHUNK) {
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

    /// Fetch the whole chunks ahead of `d`'s sequential reader (which
    /// has asked up to `d.next`) that are neither held nor being fetched,
    /// up to [`AHEAD_BYTES`] past it and within the size `d` was opened
    /// with; only once the reader has come within half the window of
    /// where the last batch ended, so a batch is at least half a window
    /// in one network write. A fetch is `unit` chunks (the reader's step)
    /// unless a chunk held or being fetched cuts it short.
    fn read_ahead(
        &mut self,
        chan: ChanId,
        f: &RequestFrame<'_>,
        desc: DescId,
        d: Desc,
        unit: u64,
        out: &mut Vec<Vec<u8>>,
    ) {
        let chunk = CHUNK as u64;
        let whole = d.stamp.size / chunk * chunk;
        // From the reader on, not from where the last batch ended: a
        // change since may have dropped (or kept from being kept) chunks
        // between them; those held or being fetched are skipped below.
        let from = d.next.next_multiple_of(chunk);
        let end = (d.next + AHEAD_BYTES).min(whole) / chunk * chunk;
        if from >= end || d.ahead > d.next + AHEAD_BYTES / 2 || self.ahead.len() >= AHEAD_LIMIT {
            return;
        }
        let Some(ticket) = self.ticket(d.ino) else {
            return;
        };
        let mut reached = end;
        let free = |m: &Copies, i: u64| {
            !m.chunks.contains_key(&(d.ino, i)) && m.fetching(d.ino, i).is_none()
        };
        let mut index = from / chunk;
        while index < end / chunk {
            if !free(self, index) {
                index += 1;
                continue;
            }
            let on = self.ahead_on.entry(chan).or_default();
            if *on >= AHEAD_PER_CHAN {
                reached = index * chunk;
                break;
            }
            *on += 1;
            let mut count = 1;
            while count < unit && index + count < end / chunk && free(self, index + count) {
                count += 1;
            }
            let id = AHEAD | self.next_ahead;
            self.next_ahead = (self.next_ahead + 1) % AHEAD;
            let req = RequestFrame {
                id,
                cred: f.cred,
                pid: f.pid,
                req: Request::ReadData {
                    desc,
                    len: (count * chunk) as u32,
                    offset: Some(index * chunk),
                    report: false,
                },
                vouched: std::borrow::Cow::Borrowed(&[]),
            };
            let Ok(frame) = postcard::to_allocvec(&req) else {
                return;
            };
            self.pend(
                chan,
                id,
                Pending::Ahead {
                    ino: d.ino,
                    index,
                    count,
                    ticket,
                    waiters: Vec::new(),
                },
            );
            for i in index..index + count {
                self.ahead.insert((d.ino, i), (chan, id));
            }
            out.push(frame);
            index += count;
        }
        if let Some(dd) = self.descs.get_mut(&desc) {
            dd.ahead = reached;
        }
    }

    /// The read-ahead of chunk `index` of `ino` in flight whose chunk will
    /// be kept (its ticket is still valid): its channel and id.
    fn fetching(&self, ino: InodeId, index: u64) -> Option<(ChanId, u64)> {
        let (chan, id) = *self.ahead.get(&(ino, index))?;
        let ticket = self.ticket(ino)?;
        match self.pending.get(&(chan, id)) {
            Some(Pending::Ahead { ticket: t, .. }) if *t == ticket => Some((chan, id)),
            _ => None,
        }
    }

    /// A read of `[at, at + len)` (request `rid` on `chan`) within one
    /// fetch being read ahead on the same channel, which no change has
    /// overtaken: it waits for that fetch's reply. Another channel's
    /// fetch is not waited for (its reply may come after the read's own
    /// would have, and the answer could pass replies owed before it), nor
    /// are two fetches (the first one's bytes are gone when the second
    /// comes, unless kept).
    fn wait_ahead(&mut self, chan: ChanId, ino: InodeId, at: u64, len: usize, rid: u64) -> bool {
        let chunk = CHUNK as u64;
        match self.fetching(ino, at / chunk) {
            Some((c, id)) if c == chan => {
                if let Some(Pending::Ahead {
                    index,
                    count,
                    waiters,
                    ..
                }) = self.pending.get_mut(&(c, id))
                {
                    let start = *index * chunk;
                    if at + len as u64 > start + *count * chunk {
                        return false;
                    }
                    let within = (at - start) as usize;
                    waiters.push(Waiter { rid, within, len });
                    return true;
                }
                false
            }
            _ => false,
        }
    }

    fn pend(&mut self, chan: ChanId, id: u64, p: Pending) {
        if self.pending.len() >= LIMIT_ENTRIES {
            // Changes forgotten would not drop again at their replies.
            // Read-ahead stays (reads wait for it; bounded by
            // `AHEAD_LIMIT`), its chunks no longer kept.
            self.pending
                .retain(|_, p| matches!(p, Pending::Ahead { .. }));
            self.drop_all();
        }
        self.pending.insert((chan, id), p);
    }

    /// A reply of the head for `chan` of process `conn`, about to be put
    /// in its ring (unless it answers the node's read-ahead).
    pub fn reply(&mut self, conn: ConnId, chan: ChanId, frame: &[u8]) -> Relayed {
        let Ok(f) = atoll_proto::decode::<ReplyFrame<'_>>(frame) else {
            return Relayed::Deliver;
        };
        match self.pending.remove(&(chan, f.id)) {
            Some(Pending::Read { ino, index, ticket }) => {
                if let Reply::Data(bytes) = f.reply {
                    self.keep_all(ino, ticket, index, bytes);
                }
                return Relayed::Deliver;
            }
            Some(Pending::Change(ino)) => self.change(ino),
            Some(Pending::Ahead {
                ino,
                index,
                count,
                ticket,
                waiters,
            }) => {
                for i in index..index + count {
                    if self.ahead.get(&(ino, i)) == Some(&(chan, f.id)) {
                        self.ahead.remove(&(ino, i));
                    }
                }
                if let Some(on) = self.ahead_on.get_mut(&chan) {
                    *on = on.saturating_sub(1);
                }
                let answers = waiters
                    .iter()
                    .filter_map(|w| Some((w.rid, answer_from(frame, &f.reply, w)?)))
                    .collect();
                if let Reply::Data(bytes) = f.reply {
                    self.keep_all(ino, ticket, index, bytes);
                }
                return Relayed::Ahead(answers);
            }
            None if f.id & AHEAD != 0 && !atoll_proto::is_posted(f.id) => {
                return Relayed::Ahead(Vec::new());
            }
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
                        next: 0,
                        ahead: 0,
                    },
                );
            }
            Reply::Attr(attr) => self.saw(attr.ino, Stamp::of(&attr), false),
            _ => {}
        }
        Relayed::Deliver
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
        self.ahead.retain(|_, (c, _)| *c != chan);
        self.ahead_on.remove(&chan);
        for ino in changes {
            self.change(ino);
        }
    }

    /// Process `conn` ended: its descriptions are answered no more.
    pub fn conn_closed(&mut self, conn: ConnId) {
        self.descs.retain(|_, d| d.conn != conn);
    }
}

/// The answer to a read that waited for a read-ahead (`w`) from that
/// fetch's reply (`frame`, decoded as `reply`): the part of the fetch it
/// asked for, as much of it as the servers returned (a short reply is the
/// end of the file), or the same reply when it is not data (an error).
fn answer_from(frame: &[u8], reply: &Reply<'_>, w: &Waiter) -> Option<Vec<u8>> {
    match reply {
        Reply::Data(bytes) => {
            let from = w.within.min(bytes.len());
            let to = (w.within + w.len).min(bytes.len());
            postcard::to_allocvec(&ReplyFrame {
                id: w.rid,
                reply: Reply::Data(&bytes[from..to]),
            })
            .ok()
        }
        _ => {
            // A frame is its id then its reply: keep the reply's bytes.
            let (_, rest) = postcard::take_from_bytes::<u64>(frame).ok()?;
            let mut out = postcard::to_allocvec(&w.rid).ok()?;
            out.extend_from_slice(rest);
            Some(out)
        }
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
    /// Read-ahead fetches sent.
    pub ahead: AtomicU64,
    /// Reads answered from a read-ahead reply they waited for.
    pub ahead_waits: AtomicU64,
}

impl Default for NodeCopies {
    fn default() -> Self {
        NodeCopies {
            on: AtomicBool::new(false),
            copies: Mutex::new(Copies::new(LIMIT_BYTES)),
            hits: AtomicU64::new(0),
            fetches: AtomicU64::new(0),
            ahead: AtomicU64::new(0),
            ahead_waits: AtomicU64::new(0),
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
                "node_copies.ahead".to_string(),
                self.ahead.load(Ordering::Relaxed),
            ),
            (
                "node_copies.ahead_waits".to_string(),
                self.ahead_waits.load(Ordering::Relaxed),
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
