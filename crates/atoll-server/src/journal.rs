//! A file server's journal: what it served, kept where its death cannot
//! reach, so that a new server can rebuild its state (fos §3.5).
//!
//! Every message that changed the server's state is appended, with the
//! outside answers it depended on (its *tape*, `fs::tape`), before its
//! reply goes out: so every operation a client saw acknowledged is in the
//! journal. The journal is a memfd the instance creates and keeps, not
//! the server's own memory; a server that dies leaves it intact, and its
//! replacement replays it record by record into a fresh `FileServer`
//! (`server::rebuild`). Data blocks are not journaled: they live in the
//! shared buffer cache, which survives too.
//!
//! Records are 8-byte aligned, and a record's length word is written last
//! (after its bytes), so a record cut short by a crash is never read.
//! The header also says which request the server is serving, if any
//! ([`Journal::owe`]): a server process killed in the middle of one leaves
//! that word behind, and its successor answers the request with the reply
//! the replay of its record computes if it reached the journal, and else
//! serves it again (still in its ring) or answers it "not applied" (taken:
//! the client sends it again), `EIO` only where it cannot tell
//! (`server::take_over`).
//!
//! The records since boot would grow without end, so the server also
//! takes *snapshots* of its state (`crate::snapshot`): the space after the
//! header is two halves, and each half holds one snapshot followed by the
//! records appended after it (the first half starts with the `Genesis`
//! record instead). A new snapshot is written into the half not in use,
//! and only then does a release store of the generation word switch
//! halves; so a server killed while writing one leaves the old half,
//! snapshot and records, whole. A rebuild loads the active half's
//! snapshot and replays only the records after it. A snapshot is checked
//! by its length and a checksum seeded with its generation, so an old one
//! left in a half is never taken for the new one.
//!
//! A half whose records no longer fit stops the journal (the server keeps
//! serving, but can no longer be rebuilt: `atoll status` says so) until
//! the next snapshot, which makes it whole again; the server takes one
//! before that happens (`Journal::snapshot_due`).
//!
//! ```text
//!   header (32 words)  half 0                       half 1
//!   ┌───────────────┬─────────────────────────────┬──────────────────────┐
//!   │magic gen …    │ snapshot │ record record …  │ snapshot │ record …  │
//!   └───────────────┴─────────────────────────────┴──────────────────────┘
//!   record: │ len │kind│session│tape words│ frame │ pad │
//! ```

use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;

use atoll_msg::SharedRegion;
use atoll_proto::SessionId;

use crate::sys::{LogRegion, LOG_WORDS};

const MAGIC: u64 = 0x6c61_6e72_756f_6a61; // "ajournal"
const W_MAGIC: usize = 0;
/// Snapshots committed since boot; the active half is `gen & 1` (the
/// first half, with the `Genesis` record, while it is 0). Stored last,
/// with release, when a snapshot is committed.
const W_GEN: usize = 1;
/// Records appended to the active half.
const W_RECORDS: usize = 3;
/// The request being served (`Journal::owe`): session, lane, id, and a
/// mark, 0 when none is owed, else 1 + the bytes logged before it.
const W_OWED_SESSION: usize = 4;
const W_OWED_LANE: usize = 5;
const W_OWED_ID: usize = 6;
const W_OWED_MARK: usize = 7;
/// Rebuilds done inside the server's own process, and the last one's
/// microseconds (`atoll status` of a server process).
const W_REBUILDS: usize = 8;
const W_REBUILD_US: usize = 9;
/// Bytes of records appended since boot (never goes back: the owed mark
/// compares with it across snapshots).
const W_LOGGED: usize = 10;
/// The last snapshot's bytes and microseconds (`atoll status`, benches).
const W_SNAP_US: usize = 11;
/// Per half `h`: record bytes after its snapshot, its snapshot's bytes,
/// the snapshot's checksum, and non-zero once an append did not fit.
const W_USED: [usize; 2] = [12, 13];
const W_SNAP: [usize; 2] = [14, 15];
const W_SUM: [usize; 2] = [16, 17];
const W_FULL: [usize; 2] = [18, 19];
/// The pid of a child encoding a snapshot while its server serves
/// (`snapshot`: forked), 0 when none: a successor makes sure it is gone
/// before it writes the half that child writes.
const W_CHILD: usize = 20;
/// How the last snapshot was taken (`snapshot::Mode`, 0 before the
/// first) and the microseconds its encoding took (with its copy into the
/// journal); `W_SNAP_US` is how long its server stopped for it.
const W_SNAP_MODE: usize = 21;
const W_SNAP_ENCODE_US: usize = 22;
const HEADER: usize = LOG_WORDS * 8;
/// Blocks a claim note holds at most ([`Journal::note_claimed`]).
const CLAIM_NOTE_BLOCKS: usize = 4096;
/// A claim note: `mark:u64 count:u64 sum:u64` then `count` blocks (u32).
const CLAIM_NOTE_BYTES: usize = 24 + CLAIM_NOTE_BLOCKS * 4;
/// `len:u32 kind:u8 pad:3 session:u64 tape_words:u32 frame_len:u32`.
const RECORD_HEADER: usize = 24;

/// What a record says happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// The server was made (its tape: the root's creation time, …).
    Genesis = 1,
    /// A session got a channel here.
    Opened = 2,
    /// A session ended; everything it held here was released.
    Closed = 3,
    /// A request (the frame as the client sent it).
    Request = 4,
    /// Notification events were pushed out (`inotify`).
    Flush = 5,
    /// A successor dropped listed blocks that were not its own any more
    /// (`FileServer::reconcile_blocks`).
    Reconcile = 6,
    /// A successor answered a request of this session `EIO` (its outcome
    /// died with its server): the session's write chains were cut
    /// (`FileServer::cut_chains`).
    CutChains = 7,
}

/// The sum of a claim note with no blocks yet, for request `mark`.
fn note_start(mark: u64) -> u64 {
    0xcbf2_9ce4_8422_2325 ^ mark
}

/// A claim note's sum `h` once `blocks` are added (FNV-1a).
fn note_fold(mut h: u64, blocks: &[u32]) -> u64 {
    for &b in blocks {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

impl Kind {
    fn from_u8(v: u8) -> Option<Kind> {
        Some(match v {
            1 => Kind::Genesis,
            2 => Kind::Opened,
            3 => Kind::Closed,
            4 => Kind::Request,
            5 => Kind::Flush,
            6 => Kind::Reconcile,
            7 => Kind::CutChains,
            _ => return None,
        })
    }
}

/// One record read back.
#[derive(Debug, PartialEq, Eq)]
pub struct Record {
    pub kind: Kind,
    pub session: SessionId,
    pub tape: Vec<u64>,
    pub frame: Vec<u8>,
    /// Bytes of records appended since boot before this one (compared
    /// with [`Owed::began`]: is it the request that was owed?).
    pub at: u64,
}

/// Where a forked snapshot began ([`Journal::fork_point`]): the
/// generation then, and the bytes and records of the active half.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ForkPoint {
    gen: u64,
    used: u64,
    records: u64,
}

/// One server's journal.
pub struct Journal {
    log: LogRegion,
}

/// The request a server was serving when it stopped ([`Journal::owed`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owed {
    pub session: SessionId,
    pub lane: u32,
    pub id: u64,
    /// It is in the journal (so the rebuilt server has done it).
    pub journaled: bool,
    /// Bytes of records appended since boot when it began: its record,
    /// if journaled, is the first one at or after this ([`Record::at`]).
    pub began: u64,
}

impl Journal {
    /// A new, empty journal of `bytes` (a sparse memfd: pages cost memory
    /// only once written).
    pub fn create(bytes: usize) -> std::io::Result<(OwnedFd, Journal)> {
        let (fd, region) = SharedRegion::create("atoll-journal", bytes.max(HEADER + 4096))?;
        let j = Journal {
            log: LogRegion::new(region),
        };
        j.log.word(W_MAGIC).store(MAGIC, Ordering::Release);
        Ok((fd, j))
    }

    /// The journal in the memfd `fd` (made by [`Journal::create`], in
    /// another process: a server process maps its own).
    pub fn map(fd: std::os::fd::BorrowedFd<'_>) -> std::io::Result<Journal> {
        let region = SharedRegion::map(fd)?;
        if region.len() < HEADER + 4096 {
            return Err(std::io::Error::other("not a journal"));
        }
        let j = Journal {
            log: LogRegion::new(region),
        };
        if j.log.word(W_MAGIC).load(Ordering::Acquire) != MAGIC {
            return Err(std::io::Error::other("not a journal"));
        }
        Ok(j)
    }

    /// Request `id` of `session`'s lane `lane` is being served from now
    /// until [`Journal::settle`]. Hot path: four stores to a line the
    /// appends write anyway.
    pub fn owe(&self, session: SessionId, lane: u32, id: u64) {
        self.log
            .word(W_OWED_SESSION)
            .store(session.0, Ordering::Relaxed);
        self.log
            .word(W_OWED_LANE)
            .store(u64::from(lane), Ordering::Relaxed);
        self.log.word(W_OWED_ID).store(id, Ordering::Relaxed);
        self.log
            .word(W_OWED_MARK)
            .store(self.logged() + 1, Ordering::Release);
    }

    /// The request owed is answered (or needs no answer).
    pub fn settle(&self) {
        self.log.word(W_OWED_MARK).store(0, Ordering::Release);
    }

    /// The request the last server was serving when it stopped, if any.
    pub fn owed(&self) -> Option<Owed> {
        let mark = self.log.word(W_OWED_MARK).load(Ordering::Acquire);
        (mark != 0).then(|| Owed {
            session: SessionId(self.log.word(W_OWED_SESSION).load(Ordering::Relaxed)),
            lane: self.log.word(W_OWED_LANE).load(Ordering::Relaxed) as u32,
            id: self.log.word(W_OWED_ID).load(Ordering::Relaxed),
            journaled: self.logged() > mark - 1,
            began: mark - 1,
        })
    }

    /// Where the active half's claim note lives: its last bytes, which
    /// records reach last (`None` in a journal too small for one).
    fn claim_note_at(&self) -> Option<usize> {
        let (_, h) = self.active();
        let len = self.half_len();
        (len >= 4 * CLAIM_NOTE_BYTES).then(|| self.half_start(h) + len - CLAIM_NOTE_BYTES)
    }

    /// The request being served ([`Journal::owe`]) claimed `blocks` from
    /// the block pool. Noted outside the server, so that the successor of
    /// a process killed before that request reached the journal gives
    /// them back ([`Journal::claimed_unjournaled`]): the server rebuilt
    /// from the journal never heard of them, and they would stay with it,
    /// unused. Only while the half has room for the note past its
    /// records (a note is never written over one); checked by a sum that
    /// covers the owed mark, so a note of another request, or one a
    /// record of this request began to overwrite, is not taken.
    pub fn note_claimed(&self, blocks: &[u32]) {
        let mark = self.log.word(W_OWED_MARK).load(Ordering::Relaxed);
        let Some(at) = self.claim_note_at() else {
            return;
        };
        if mark == 0 || self.room() < 2 * CLAIM_NOTE_BYTES as u64 {
            return;
        }
        let (count, sum) = match self.read_note_head(at) {
            Some((m, count, sum)) if m == mark => (count, sum),
            _ => (0, note_start(mark)),
        };
        let total = count + blocks.len();
        if total > CLAIM_NOTE_BLOCKS {
            return; // the blocks of this claim stay with the server, as before
        }
        let bytes: Vec<u8> = blocks.iter().flat_map(|b| b.to_le_bytes()).collect();
        let sum = note_fold(sum, blocks);
        let mut head = [0u8; 24];
        head[0..8].copy_from_slice(&mark.to_le_bytes());
        head[8..16].copy_from_slice(&(total as u64).to_le_bytes());
        head[16..24].copy_from_slice(&sum.to_le_bytes());
        // The blocks first: a process killed in between leaves the old
        // head, which covers only the blocks before.
        if self.log.write_at(at + 24 + count * 4, &bytes) {
            let _ = self.log.write_at(at, &head);
        }
    }

    /// The note's `(mark, count, sum)`, if it reads.
    fn read_note_head(&self, at: usize) -> Option<(u64, usize, u64)> {
        let mut head = [0u8; 24];
        if !self.log.read_at(at, &mut head) {
            return None;
        }
        let word = |i: usize| u64::from_le_bytes(head[i * 8..i * 8 + 8].try_into().expect("8"));
        let count = usize::try_from(word(1)).ok()?;
        (count <= CLAIM_NOTE_BLOCKS).then(|| (word(0), count, word(2)))
    }

    /// The blocks `owed`, a request that did not reach the journal,
    /// claimed from the pool before its process died
    /// ([`Journal::note_claimed`]); empty for one that did, or without a
    /// note that checks.
    pub fn claimed_unjournaled(&self, owed: &Owed) -> Vec<u32> {
        let Some(at) = self.claim_note_at().filter(|_| !owed.journaled) else {
            return Vec::new();
        };
        let mark = owed.began + 1;
        let Some((m, count, sum)) = self.read_note_head(at).filter(|h| h.0 == mark) else {
            return Vec::new();
        };
        let mut bytes = vec![0u8; count * 4];
        if !self.log.read_at(at + 24, &mut bytes) {
            return Vec::new();
        }
        let blocks: Vec<u32> = bytes
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes(b.try_into().expect("4")))
            .collect();
        if note_fold(note_start(m), &blocks) != sum {
            return Vec::new();
        }
        blocks
    }

    /// Forget the claim note (its blocks were given back).
    pub fn clear_claim_note(&self) {
        if let Some(at) = self.claim_note_at() {
            let _ = self.log.write_at(at, &[0u8; 24]);
        }
    }

    /// The server rebuilt itself in its own process, in `micros`.
    pub fn note_rebuild(&self, micros: u64) {
        self.log.word(W_REBUILD_US).store(micros, Ordering::Relaxed);
        self.log.word(W_REBUILDS).fetch_add(1, Ordering::Release);
    }

    /// Rebuilds noted, and the last one's microseconds.
    pub fn rebuilds(&self) -> (u64, u64) {
        (
            self.log.word(W_REBUILDS).load(Ordering::Acquire),
            self.log.word(W_REBUILD_US).load(Ordering::Relaxed),
        )
    }

    /// The half in use: `(generation, index)`.
    fn active(&self) -> (u64, usize) {
        let gen = self.log.word(W_GEN).load(Ordering::Acquire);
        (gen, (gen & 1) as usize)
    }

    /// Bytes in each half.
    fn half_len(&self) -> usize {
        ((self.log.len() - HEADER) / 2) & !7
    }

    fn half_start(&self, half: usize) -> usize {
        HEADER + half * self.half_len()
    }

    /// Bytes in use: the active half's snapshot and records.
    pub fn used(&self) -> u64 {
        let (_, h) = self.active();
        self.snap_span(h) + self.log.word(W_USED[h]).load(Ordering::Acquire)
    }

    /// Bytes half `h`'s snapshot takes, up to its first record.
    fn snap_span(&self, h: usize) -> u64 {
        self.log
            .word(W_SNAP[h])
            .load(Ordering::Relaxed)
            .next_multiple_of(8)
    }

    /// Bytes of records appended since the last snapshot (since boot
    /// before the first).
    pub fn since_snapshot(&self) -> u64 {
        let (_, h) = self.active();
        self.log.word(W_USED[h]).load(Ordering::Acquire)
    }

    /// Bytes of records appended since boot.
    fn logged(&self) -> u64 {
        self.log.word(W_LOGGED).load(Ordering::Acquire)
    }

    /// Records appended since the last snapshot.
    pub fn records(&self) -> u64 {
        self.log.word(W_RECORDS).load(Ordering::Relaxed)
    }

    /// Snapshots taken since boot, the last one's bytes and microseconds.
    pub fn snapshots(&self) -> (u64, u64, u64) {
        let (gen, h) = self.active();
        (
            gen,
            self.log.word(W_SNAP[h]).load(Ordering::Relaxed),
            self.log.word(W_SNAP_US).load(Ordering::Relaxed),
        )
    }

    /// Did an append not fit since the last snapshot? (Then the journal
    /// is incomplete until the next one.)
    pub fn full(&self) -> bool {
        let (_, h) = self.active();
        self.log.word(W_FULL[h]).load(Ordering::Acquire) != 0
    }

    /// Start over empty (a server made afresh, with nothing to recover).
    pub fn clear(&self) {
        self.settle();
        for h in 0..2 {
            self.log.word(W_USED[h]).store(0, Ordering::Relaxed);
            self.log.word(W_SNAP[h]).store(0, Ordering::Relaxed);
            self.log.word(W_FULL[h]).store(0, Ordering::Relaxed);
        }
        self.log.word(W_RECORDS).store(0, Ordering::Relaxed);
        self.log.word(W_LOGGED).store(0, Ordering::Relaxed);
        self.log.word(W_GEN).store(0, Ordering::Release);
    }

    /// Append one record; false (and the journal marked full until the
    /// next snapshot) if it does not fit. Hot path: two copies and four
    /// stores.
    pub fn append(&self, kind: Kind, session: SessionId, tape: &[u64], frame: &[u8]) -> bool {
        if self.full() {
            return false;
        }
        let (_, h) = self.active();
        let body = RECORD_HEADER + tape.len() * 8 + frame.len();
        let len = body.next_multiple_of(8);
        let used = self.log.word(W_USED[h]).load(Ordering::Relaxed) as usize;
        let at = self.half_start(h) + self.snap_span(h) as usize + used;
        let mut head = [0u8; RECORD_HEADER];
        head[0..4].copy_from_slice(&(len as u32).to_le_bytes());
        head[4] = kind as u8;
        head[8..16].copy_from_slice(&session.0.to_le_bytes());
        head[16..20].copy_from_slice(&(tape.len() as u32).to_le_bytes());
        head[20..24].copy_from_slice(&(frame.len() as u32).to_le_bytes());
        let mut words = [0u8; 8 * 16];
        let mut ok = at + len <= self.half_start(h) + self.half_len();
        let mut off = at + RECORD_HEADER;
        for chunk in tape.chunks(16) {
            if !ok {
                break;
            }
            for (i, w) in chunk.iter().enumerate() {
                words[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
            }
            ok = self.log.write_at(off, &words[..chunk.len() * 8]);
            off += chunk.len() * 8;
        }
        ok = ok && self.log.write_at(off, frame) && self.log.write_at(at, &head);
        if !ok {
            self.log.word(W_FULL[h]).store(1, Ordering::Release);
            return false;
        }
        // The record is complete before `used` covers it. `logged` goes
        // first: a process killed between the two leaves a request owed
        // as journaled whose record is not read, which its successor
        // answers `EIO` (it cannot replay it); the other way round, it
        // would be replayed *and* served again.
        self.log
            .word(W_LOGGED)
            .fetch_add(len as u64, Ordering::Release);
        self.log
            .word(W_USED[h])
            .store((used + len) as u64, Ordering::Release);
        self.log.word(W_RECORDS).fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Room left for records in the active half.
    pub fn room(&self) -> u64 {
        (self.half_len() as u64).saturating_sub(self.used())
    }

    /// Largest snapshot a half takes: one that leaves at least half of it
    /// to the records after it (a larger one would be followed by another
    /// too soon to be worth its cost).
    pub fn snapshot_room(&self) -> usize {
        self.half_len() / 2
    }

    /// Bytes each half holds (snapshot and records).
    pub fn half_bytes(&self) -> u64 {
        self.half_len() as u64
    }

    /// Write `image` as the snapshot of the half not in use, with no
    /// records after it yet, then make that half the active one: the state
    /// it holds replaces every record before it. False (nothing changed)
    /// if it does not fit [`Journal::snapshot_room`]. A crash at any point
    /// before the generation's store leaves the old half in force, and the
    /// new one is never read.
    pub fn commit_snapshot(&self, image: &[u8]) -> bool {
        let Some(next) = self.stage_snapshot(image) else {
            return false;
        };
        // Everything `stage_snapshot` wrote is seen by whoever sees the
        // new generation.
        self.log.word(W_GEN).store(next, Ordering::Release);
        self.log.word(W_RECORDS).store(0, Ordering::Relaxed);
        true
    }

    /// Write `image` and its words into the half not in use; the
    /// generation that commits it, or `None` if it does not fit. Until
    /// that generation is stored nothing reads what this wrote.
    fn stage_snapshot(&self, image: &[u8]) -> Option<u64> {
        if image.is_empty() || image.len() > self.snapshot_room() {
            return None;
        }
        let (gen, h) = self.active();
        let (next, to) = (gen + 1, 1 - h);
        if !self.log.write_at(self.half_start(to), image) {
            return None;
        }
        self.log
            .word(W_SNAP[to])
            .store(image.len() as u64, Ordering::Relaxed);
        self.log
            .word(W_SUM[to])
            .store(checksum(next, image), Ordering::Relaxed);
        self.log.word(W_USED[to]).store(0, Ordering::Relaxed);
        self.log.word(W_FULL[to]).store(0, Ordering::Relaxed);
        Some(next)
    }

    /// Where a snapshot encoded by a forked child starts (`snapshot`):
    /// the state at this instant is the snapshot, the records the parent
    /// appends from here on follow it at the commit.
    pub fn fork_point(&self) -> ForkPoint {
        let (gen, h) = self.active();
        ForkPoint {
            gen,
            used: self.log.word(W_USED[h]).load(Ordering::Acquire),
            records: self.records(),
        }
    }

    /// The child's part of a forked snapshot: write `image`, the state at
    /// `at`, where the half not in use at `at` keeps its snapshot, and
    /// return its checksum; `None` if it does not fit
    /// [`Journal::snapshot_room`]. Writes nothing but those bytes: the
    /// words that describe them are the parent's to write, at the commit.
    pub fn write_forked(&self, at: ForkPoint, image: &[u8]) -> Option<u64> {
        if image.is_empty() || image.len() > self.snapshot_room() {
            return None;
        }
        let to = 1 - (at.gen & 1) as usize;
        self.log
            .write_at(self.half_start(to), image)
            .then(|| checksum(at.gen + 1, image))
    }

    /// The parent's part: the child wrote `len` bytes summing to `sum`
    /// ([`Journal::write_forked`]); copy the records appended since `at`
    /// after them, then commit as [`Journal::commit_snapshot`] does, with
    /// the generation's release store last. So a server killed at any
    /// point leaves the old half (its snapshot and every record) in
    /// force, or the new one (the state at `at` and every record since),
    /// which replays to the same state. Refused, nothing changed, if the
    /// journal moved on since `at` (another snapshot, a record that did
    /// not fit) or the records do not fit after the snapshot.
    pub fn commit_forked(&self, at: ForkPoint, len: usize, sum: u64) -> Result<(), &'static str> {
        let (gen, h) = self.active();
        if gen != at.gen {
            return Err("another snapshot was committed since its fork");
        }
        if self.full() {
            return Err("a record did not fit since its fork");
        }
        if len == 0 || len > self.snapshot_room() {
            return Err("it does not fit");
        }
        let to = 1 - h;
        let used = self.log.word(W_USED[h]).load(Ordering::Acquire);
        let Some(tail) = used.checked_sub(at.used) else {
            return Err("the journal went back since its fork");
        };
        let (span, tail) = (len.next_multiple_of(8), tail as usize);
        if span + tail > self.half_len() {
            return Err("the records since its fork do not fit after it");
        }
        let from = self.half_start(h) + self.snap_span(h) as usize + at.used as usize;
        let dst = self.half_start(to) + span;
        let mut buf = vec![0u8; tail.min(1 << 16)];
        let mut done = 0;
        while done < tail {
            let n = (tail - done).min(buf.len());
            if !self.log.read_at(from + done, &mut buf[..n])
                || !self.log.write_at(dst + done, &buf[..n])
            {
                return Err("the records since its fork do not copy");
            }
            done += n;
        }
        self.log
            .word(W_SNAP[to])
            .store(len as u64, Ordering::Relaxed);
        self.log.word(W_SUM[to]).store(sum, Ordering::Relaxed);
        self.log
            .word(W_USED[to])
            .store(tail as u64, Ordering::Relaxed);
        self.log.word(W_FULL[to]).store(0, Ordering::Relaxed);
        // Everything above is seen by whoever sees the new generation.
        self.log.word(W_GEN).store(at.gen + 1, Ordering::Release);
        self.log
            .word(W_RECORDS)
            .store(self.records().saturating_sub(at.records), Ordering::Relaxed);
        Ok(())
    }

    /// A child encoding a snapshot for this journal's server is `pid`
    /// (0: none any more).
    pub fn set_child(&self, pid: u32) {
        self.log
            .word(W_CHILD)
            .store(u64::from(pid), Ordering::Release);
    }

    /// The child last recorded by [`Journal::set_child`] (0: none).
    pub fn child(&self) -> u32 {
        self.log.word(W_CHILD).load(Ordering::Acquire) as u32
    }

    /// A server killed while writing a snapshot: all of it written but
    /// the generation (tests).
    #[cfg(test)]
    pub fn write_snapshot_uncommitted(&self, image: &[u8]) -> bool {
        self.stage_snapshot(image).is_some()
    }

    /// Flip a byte of the active snapshot (tests of the checksum).
    #[cfg(test)]
    pub fn scribble_on_snapshot(&self, at: usize) {
        let (_, h) = self.active();
        let mut b = [0u8; 1];
        self.log.read_at(self.half_start(h) + at, &mut b);
        b[0] ^= 0x5a;
        self.log.write_at(self.half_start(h) + at, &b);
    }

    /// The snapshot just committed was taken the way `mode` says
    /// (`snapshot::Mode`), its server stopped `pause_us` for it, and its
    /// encoding took `encode_us`.
    pub fn note_snapshot(&self, mode: u64, pause_us: u64, encode_us: u64) {
        self.log.word(W_SNAP_US).store(pause_us, Ordering::Relaxed);
        self.log
            .word(W_SNAP_ENCODE_US)
            .store(encode_us, Ordering::Relaxed);
        self.log.word(W_SNAP_MODE).store(mode, Ordering::Relaxed);
    }

    /// How the last snapshot was taken (0: none yet) and its encoding's
    /// microseconds ([`Journal::note_snapshot`]).
    pub fn snapshot_how(&self) -> (u64, u64) {
        (
            self.log.word(W_SNAP_MODE).load(Ordering::Relaxed),
            self.log.word(W_SNAP_ENCODE_US).load(Ordering::Relaxed),
        )
    }

    /// The newest snapshot, if one was committed, and every record after
    /// it, in order; `None` if the journal is not one (a snapshot whose
    /// checksum is wrong, or a record that does not parse).
    pub fn read(&self) -> Option<(Option<Vec<u8>>, Vec<Record>)> {
        if self.log.word(W_MAGIC).load(Ordering::Acquire) != MAGIC {
            return None;
        }
        let (gen, h) = self.active();
        let start = self.half_start(h);
        let snap = self.log.word(W_SNAP[h]).load(Ordering::Relaxed) as usize;
        let used = self.log.word(W_USED[h]).load(Ordering::Acquire) as usize;
        let image = match gen {
            0 => None,
            _ => {
                let mut image = vec![0u8; snap];
                if snap == 0
                    || snap > self.half_len()
                    || !self.log.read_at(start, &mut image)
                    || checksum(gen, &image) != self.log.word(W_SUM[h]).load(Ordering::Relaxed)
                {
                    return None;
                }
                Some(image)
            }
        };
        let first = start + self.snap_span(h) as usize;
        // What was appended since boot before this half's first record.
        let before = self.logged().saturating_sub(used as u64);
        let records = self.records_in(first, first + used, before)?;
        Some((image, records))
    }

    /// Every record since boot, with no snapshot taken (tests).
    #[cfg(test)]
    pub fn read_all(&self) -> Option<Vec<Record>> {
        match self.read()? {
            (None, records) => Some(records),
            (Some(_), _) => None,
        }
    }

    /// The records in bytes `[at, end)`, the first of them appended after
    /// `before` bytes of records since boot.
    fn records_in(&self, mut at: usize, end: usize, before: u64) -> Option<Vec<Record>> {
        let mut out = Vec::new();
        let first = at;
        while at < end {
            let mut head = [0u8; RECORD_HEADER];
            if !self.log.read_at(at, &mut head) {
                return None;
            }
            let len = u32::from_le_bytes(head[0..4].try_into().ok()?) as usize;
            let kind = Kind::from_u8(head[4])?;
            let session = SessionId(u64::from_le_bytes(head[8..16].try_into().ok()?));
            let ntape = u32::from_le_bytes(head[16..20].try_into().ok()?) as usize;
            let nframe = u32::from_le_bytes(head[20..24].try_into().ok()?) as usize;
            if len < RECORD_HEADER + ntape * 8 + nframe || at + len > end {
                return None;
            }
            let mut raw = vec![0u8; ntape * 8];
            let mut frame = vec![0u8; nframe];
            if !self.log.read_at(at + RECORD_HEADER, &mut raw)
                || !self.log.read_at(at + RECORD_HEADER + ntape * 8, &mut frame)
            {
                return None;
            }
            let tape = raw
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
                .collect();
            out.push(Record {
                kind,
                session,
                tape,
                frame,
                at: before + (at - first) as u64,
            });
            at += len;
        }
        Some(out)
    }
}

/// A snapshot's checksum, seeded with its generation and length: a word
/// at a time (a snapshot of 100,000 inodes is ten megabytes).
fn checksum(gen: u64, bytes: &[u8]) -> u64 {
    let mut h = 0x9e37_79b9_7f4a_7c15 ^ gen ^ ((bytes.len() as u64) << 32);
    let mut words = bytes.chunks_exact(8);
    for w in &mut words {
        let w = u64::from_le_bytes(w.try_into().expect("8 bytes"));
        h = (h.rotate_left(23) ^ w).wrapping_mul(0x0100_0000_01b3_a5a5);
    }
    let mut tail = [0u8; 8];
    tail[..words.remainder().len()].copy_from_slice(words.remainder());
    (h.rotate_left(23) ^ u64::from_le_bytes(tail)).wrapping_mul(0x0100_0000_01b3_a5a5)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_read_back_in_order_and_a_full_journal_stops() {
        let (_fd, j) = Journal::create(HEADER + 4096).unwrap();
        assert!(j.append(Kind::Genesis, SessionId(0), &[1, 2], b""));
        assert!(j.append(Kind::Request, SessionId(7), &[], b"abc"));
        let tape: Vec<u64> = (0..40).collect();
        assert!(j.append(Kind::Closed, SessionId(7), &tape, b"xy"));
        let all = j.read_all().unwrap();
        assert_eq!(all.len(), 3);
        assert_eq!(all[0].tape, vec![1, 2]);
        assert_eq!(
            all[1],
            Record {
                kind: Kind::Request,
                session: SessionId(7),
                tape: vec![],
                frame: b"abc".to_vec(),
                at: 40, // after the first: 24 bytes of header, two words
            }
        );
        assert_eq!(all[2].tape, tape);
        assert_eq!(j.records(), 3);
        let used = j.used();
        assert!(!j.append(Kind::Request, SessionId(1), &[], &[0u8; 5000]));
        assert!(j.full());
        assert_eq!(j.used(), used, "a record that did not fit is not there");
        assert!(
            !j.append(Kind::Request, SessionId(1), &[], b""),
            "full for good"
        );
        j.clear();
        assert!(j.append(Kind::Opened, SessionId(2), &[], b""));
        assert_eq!(j.read_all().unwrap().len(), 1);
    }

    #[test]
    fn the_request_owed_is_seen_by_another_mapping_with_whether_it_was_kept() {
        use std::os::fd::AsFd;
        let (fd, j) = Journal::create(HEADER + 8192).unwrap();
        let other = Journal::map(fd.as_fd()).unwrap();
        assert_eq!(other.owed(), None);
        j.owe(SessionId(3), 1, 77);
        let owed = other.owed().unwrap();
        assert_eq!((owed.session, owed.lane, owed.id), (SessionId(3), 1, 77));
        assert!(!owed.journaled, "nothing appended since");
        j.append(Kind::Request, SessionId(3), &[], b"req");
        assert!(other.owed().unwrap().journaled);
        j.settle();
        assert_eq!(other.owed(), None);
        j.note_rebuild(12);
        assert_eq!(other.rebuilds(), (1, 12));
        let (plain, _) = SharedRegion::create("not-a-journal", HEADER + 8192).unwrap();
        assert!(Journal::map(plain.as_fd()).is_err());
    }

    #[test]
    fn a_snapshot_switches_halves_and_only_later_records_follow_it() {
        let (_fd, j) = Journal::create(HEADER + 8192).unwrap();
        assert!(j.append(Kind::Genesis, SessionId(0), &[1], b""));
        assert!(j.append(Kind::Request, SessionId(1), &[], b"one"));
        j.owe(SessionId(1), 0, 9);
        assert!(j.commit_snapshot(b"state one"));
        assert_eq!(j.snapshots().0, 1);
        assert!(!j.owed().unwrap().journaled, "a snapshot is not a record");
        assert!(j.append(Kind::Request, SessionId(1), &[7], b"two"));
        assert!(j.owed().unwrap().journaled);
        let (image, records) = j.read().unwrap();
        assert_eq!(image.as_deref(), Some(&b"state one"[..]));
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].frame, b"two");
        // The next one goes back to the first half, over the records
        // since boot, which it replaces.
        assert!(j.commit_snapshot(b"state two, longer"));
        let (image, records) = j.read().unwrap();
        assert_eq!(image.as_deref(), Some(&b"state two, longer"[..]));
        assert!(records.is_empty());
        assert!(!j.commit_snapshot(&[1u8; 4000]), "more than half a half");
        // A half that fills stops the journal until the next snapshot.
        while j.append(Kind::Request, SessionId(1), &[], &[0u8; 500]) {}
        assert!(j.full());
        assert!(j.commit_snapshot(b"state three"));
        assert!(!j.full());
        assert_eq!(j.read().unwrap().1.len(), 0);
    }

    /// A forked snapshot: the child writes the state at the fork point
    /// into the other half; records appended meanwhile follow it at the
    /// commit, and only they. Until the commit the old half, with every
    /// record, is what a reader gets; a commit after the journal moved
    /// on is refused.
    #[test]
    fn a_forked_snapshot_takes_the_records_appended_after_its_fork() {
        let (_fd, j) = Journal::create(HEADER + 8192).unwrap();
        assert!(j.append(Kind::Genesis, SessionId(0), &[1], b""));
        assert!(j.append(Kind::Request, SessionId(1), &[], b"before"));
        let at = j.fork_point();
        assert!(j.append(Kind::Request, SessionId(1), &[2], b"during one"));
        let sum = j.write_forked(at, b"state at the fork").unwrap();
        assert!(j.append(Kind::Request, SessionId(1), &[], b"during two"));
        let (image, records) = j.read().unwrap();
        assert_eq!(image, None, "not committed: the old half");
        assert_eq!(records.len(), 4);
        let logged = j.logged();
        assert_eq!(j.commit_forked(at, 17, sum), Ok(()));
        let (image, records) = j.read().unwrap();
        assert_eq!(image.as_deref(), Some(&b"state at the fork"[..]));
        let frames: Vec<&[u8]> = records.iter().map(|r| &r.frame[..]).collect();
        assert_eq!(frames, [&b"during one"[..], b"during two"]);
        assert_eq!(records[0].tape, vec![2]);
        assert_eq!(j.records(), 2);
        assert_eq!(j.logged(), logged, "bytes since boot do not move");
        assert_eq!(records[1].at + 40, logged, "a record's place since boot");
        assert!(j.append(Kind::Request, SessionId(1), &[], b"after"));
        assert_eq!(j.read().unwrap().1.len(), 3);
        // A fork whose journal moved on (a snapshot committed since) is
        // not committed.
        let stale = j.fork_point();
        let sum = j.write_forked(stale, b"stale").unwrap();
        assert!(j.commit_snapshot(b"inline"));
        assert!(j.commit_forked(stale, 5, sum).is_err());
        assert_eq!(j.read().unwrap().0.as_deref(), Some(&b"inline"[..]));
    }

    #[test]
    fn the_claims_of_a_request_killed_before_its_record_are_noted_for_its_successor() {
        let (_fd, j) = Journal::create(1 << 20).unwrap();
        assert!(j.append(Kind::Genesis, SessionId(0), &[], b""));
        j.note_claimed(&[1, 2]);
        j.owe(SessionId(1), 0, 9);
        j.note_claimed(&[5, 6, 7]);
        j.note_claimed(&[8]);
        let owed = j.owed().unwrap();
        assert_eq!(j.claimed_unjournaled(&owed), vec![5, 6, 7, 8]);
        // Once journaled, its replay knows them: nothing to give back.
        assert!(j.append(Kind::Request, SessionId(1), &[], b"req"));
        assert!(j.claimed_unjournaled(&j.owed().unwrap()).is_empty());
        // The next request starts a note of its own.
        j.settle();
        j.owe(SessionId(1), 0, 10);
        assert!(j.claimed_unjournaled(&j.owed().unwrap()).is_empty());
        j.note_claimed(&[3]);
        let owed = j.owed().unwrap();
        assert_eq!(j.claimed_unjournaled(&owed), vec![3]);
        j.clear_claim_note();
        assert!(j.claimed_unjournaled(&owed).is_empty());
        // A note a record began to overwrite does not check.
        j.note_claimed(&[4]);
        let at = j.claim_note_at().unwrap();
        assert!(j.log.write_at(at + 24, &[0xff; 4]));
        assert!(j.claimed_unjournaled(&owed).is_empty());
    }
}
