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
}

impl Kind {
    fn from_u8(v: u8) -> Option<Kind> {
        Some(match v {
            1 => Kind::Genesis,
            2 => Kind::Opened,
            3 => Kind::Closed,
            4 => Kind::Request,
            5 => Kind::Flush,
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
}
