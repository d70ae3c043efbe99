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
//! that word behind, and its successor answers the request `EIO` or
//! serves it again, depending on whether it reached the journal
//! (`process`).
//!
//! A journal that fills up stops (the server keeps serving, but can no
//! longer be rebuilt: `atoll status` says so); snapshots that would let
//! it start over are not built yet.
//!
//! ```text
//!   header (8 words)   record                       record …
//!   ┌───────────────┬──────┬────┬───────┬──────────┬────────┬──────┐
//!   │magic used full│ len  │kind│session│tape words│ frame  │ pad  │
//!   └───────────────┴──────┴────┴───────┴──────────┴────────┴──────┘
//! ```

use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;

use atoll_msg::SharedRegion;
use atoll_proto::SessionId;

use crate::sys::{LogRegion, LOG_WORDS};

const MAGIC: u64 = 0x6c61_6e72_756f_6a61; // "ajournal"
const W_MAGIC: usize = 0;
/// Bytes appended after the header.
const W_USED: usize = 1;
/// Non-zero once an append did not fit.
const W_FULL: usize = 2;
/// Records appended.
const W_RECORDS: usize = 3;
/// The request being served (`Journal::owe`): session, lane, id, and a
/// mark, 0 when none is owed, else 1 + the bytes used before it.
const W_OWED_SESSION: usize = 4;
const W_OWED_LANE: usize = 5;
const W_OWED_ID: usize = 6;
const W_OWED_MARK: usize = 7;
/// Rebuilds done inside the server's own process, and the last one's
/// microseconds (`atoll status` of a server process).
const W_REBUILDS: usize = 8;
const W_REBUILD_US: usize = 9;
const HEADER: usize = LOG_WORDS * 8;
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
            .store(self.used() + 1, Ordering::Release);
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
            journaled: self.used() > mark - 1,
        })
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

    /// Bytes of records.
    pub fn used(&self) -> u64 {
        self.log.word(W_USED).load(Ordering::Acquire)
    }

    /// Records appended.
    pub fn records(&self) -> u64 {
        self.log.word(W_RECORDS).load(Ordering::Relaxed)
    }

    /// Did an append not fit? (Then the journal is incomplete for good.)
    pub fn full(&self) -> bool {
        self.log.word(W_FULL).load(Ordering::Acquire) != 0
    }

    /// Start over empty (a server made afresh, with nothing to recover).
    pub fn clear(&self) {
        self.settle();
        self.log.word(W_USED).store(0, Ordering::Release);
        self.log.word(W_RECORDS).store(0, Ordering::Relaxed);
        self.log.word(W_FULL).store(0, Ordering::Release);
    }

    /// Append one record; false (and the journal marked full) if it does
    /// not fit. Hot path: two copies and three stores.
    pub fn append(&self, kind: Kind, session: SessionId, tape: &[u64], frame: &[u8]) -> bool {
        if self.full() {
            return false;
        }
        let body = RECORD_HEADER + tape.len() * 8 + frame.len();
        let len = body.next_multiple_of(8);
        let at = HEADER + self.used() as usize;
        let mut head = [0u8; RECORD_HEADER];
        head[0..4].copy_from_slice(&(len as u32).to_le_bytes());
        head[4] = kind as u8;
        head[8..16].copy_from_slice(&session.0.to_le_bytes());
        head[16..20].copy_from_slice(&(tape.len() as u32).to_le_bytes());
        head[20..24].copy_from_slice(&(frame.len() as u32).to_le_bytes());
        let mut words = [0u8; 8 * 16];
        let mut ok = at + len <= self.log.len();
        let mut off = at + RECORD_HEADER;
        for chunk in tape.chunks(16) {
            for (i, w) in chunk.iter().enumerate() {
                words[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
            }
            ok = ok && self.log.write_at(off, &words[..chunk.len() * 8]);
            off += chunk.len() * 8;
        }
        ok = ok && self.log.write_at(off, frame) && self.log.write_at(at, &head);
        if !ok {
            self.log.word(W_FULL).store(1, Ordering::Release);
            return false;
        }
        // The record is complete before `used` covers it.
        self.log
            .word(W_USED)
            .store((at + len - HEADER) as u64, Ordering::Release);
        self.log.word(W_RECORDS).fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Every record, in order; `None` if the journal is not one (a record
    /// that does not parse).
    pub fn read_all(&self) -> Option<Vec<Record>> {
        if self.log.word(W_MAGIC).load(Ordering::Acquire) != MAGIC {
            return None;
        }
        let end = HEADER + self.used() as usize;
        let mut at = HEADER;
        let mut out = Vec::new();
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
            });
            at += len;
        }
        Some(out)
    }
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
                frame: b"abc".to_vec()
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
}
