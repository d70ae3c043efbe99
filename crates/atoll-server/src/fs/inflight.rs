//! Writes that extend a file, from the moment their blocks are handed out
//! until the writer says its bytes are in.
//!
//! A `Write` is a reservation (Hare §3.3): the owner allocates blocks,
//! raises the size and replies with the blocks; the client then copies the
//! bytes into the shared buffer cache itself. Between the two, the new end
//! of the file holds zeros. Linux raises a file's size only after copying
//! (`generic_perform_write`), so no reader ever sees bytes of a file that
//! nobody wrote. Here the writer posts `WriteDone` after its copy (one
//! enqueue, no round trip and no doorbell: see `client/src/file.rs`), and
//! until then a read that reaches the new part is answered [`RETRY`]: the
//! reader asks again, which wakes this server, which then serves the
//! writer's `WriteDone`, waiting in the writer's channel, before long.
//!
//! A writer that stops for good between the reservation and its
//! `WriteDone` (stopped by a signal, killed) cannot hold readers for ever:
//! after [`PATIENCE`] a read is answered up to the first byte still in
//! flight, as Linux answers a read that runs beside a write not yet done —
//! short, never zeros. A session that ends drops its writes.

use std::time::{Duration, Instant};

use super::*;

/// How long a read waits for a writer's bytes before it is answered
/// without them. Copies take microseconds; a writer this late is stopped
/// or descheduled for long.
pub(super) const PATIENCE: Duration = Duration::from_millis(50);

/// One extending write whose bytes are not in yet.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub(super) struct InFlight {
    session: SessionId,
    ino: InodeId,
    /// The part of the write past the old end of the file (bytes before it
    /// held data already, or a hole: both are valid to read meanwhile).
    start: u64,
    end: u64,
    #[serde(with = "crate::fs::tape::instant_serde")]
    since: Instant,
}

/// Every extending write in flight at this server. Usually empty or a few
/// entries (one per writer between its two messages), so a vector.
#[derive(Default, Debug, serde::Serialize, serde::Deserialize)]
pub(super) struct Writes {
    inflight: Vec<InFlight>,
}

/// What a read of a range may return.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum ReadLimit {
    /// Nothing in flight there: read it all.
    All,
    /// Ask again shortly (`RETRY`).
    Wait,
    /// The writer is overdue: read up to here.
    Upto(u64),
}

impl Writes {
    /// A `Write` of `[off, end)` to `ino` extended the file from `old_size`.
    pub(super) fn extended(
        &mut self,
        session: SessionId,
        ino: InodeId,
        off: u64,
        end: u64,
        old_size: u64,
    ) {
        self.inflight.push(InFlight {
            session,
            ino,
            start: off.max(old_size),
            end,
            since: super::tape::instant(),
        });
    }

    /// The writer's bytes of `[offset, offset + len)` are in. Only the
    /// session that wrote may say so. Returns whether it was in flight.
    pub(super) fn done(&mut self, session: SessionId, ino: InodeId, offset: u64, len: u64) -> bool {
        let end = offset.saturating_add(len);
        let before = self.inflight.len();
        self.inflight.retain(|w| {
            !(w.session == session && w.ino == ino && w.end == end && w.start >= offset)
        });
        self.inflight.len() != before
    }

    /// How much of `[off, off + len)` of `ino` a read may return now.
    pub(super) fn limit(&self, ino: InodeId, off: u64, len: u64, now: Instant) -> ReadLimit {
        if self.inflight.is_empty() || len == 0 {
            return ReadLimit::All;
        }
        let end = off.saturating_add(len);
        let mut upto = None::<u64>;
        for w in self.inflight.iter().filter(|w| w.ino == ino) {
            if w.start >= end || w.end <= off {
                continue;
            }
            if now.duration_since(w.since) < PATIENCE {
                return ReadLimit::Wait;
            }
            upto = Some(upto.map_or(w.start, |u| u.min(w.start)));
        }
        match upto {
            None => ReadLimit::All,
            Some(u) => ReadLimit::Upto(u.max(off)),
        }
    }

    /// A session ended: its writes will never say they are done.
    pub(super) fn forget_session(&mut self, session: SessionId) {
        self.inflight.retain(|w| w.session != session);
    }

    /// An inode is gone.
    pub(super) fn forget_inode(&mut self, ino: InodeId) {
        if !self.inflight.is_empty() {
            self.inflight.retain(|w| w.ino != ino);
        }
    }

    pub(super) fn len(&self) -> usize {
        self.inflight.len()
    }
}

impl<S: BlockStore> FileServer<S> {
    /// `WriteDone`: the client copied the bytes of an extending write.
    pub(super) fn write_done<'o>(
        &mut self,
        session: SessionId,
        ino: InodeId,
        offset: u64,
        len: u64,
    ) -> R<'o> {
        self.writes.done(session, ino, offset, len);
        Ok(Reply::Ok)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S1: SessionId = SessionId(1);
    const S2: SessionId = SessionId(2);

    fn ino(n: u64) -> InodeId {
        InodeId::new(0, 0, false, n)
    }

    #[test]
    fn a_read_of_bytes_in_flight_waits_until_the_writer_is_done() {
        let mut w = Writes::default();
        let t = Instant::now();
        w.extended(S1, ino(1), 100, 200, 150);
        // Below the old end: readable (old bytes or new, as Linux).
        assert_eq!(w.limit(ino(1), 0, 150, t), ReadLimit::All);
        assert_eq!(w.limit(ino(1), 140, 20, t), ReadLimit::Wait);
        // Another file is not held up.
        assert_eq!(w.limit(ino(2), 140, 20, t), ReadLimit::All);
        // Only the writer can say it is done, and only of its own range.
        assert!(!w.done(S2, ino(1), 100, 100));
        assert!(!w.done(S1, ino(1), 100, 50));
        assert!(w.done(S1, ino(1), 100, 100));
        assert_eq!(w.limit(ino(1), 140, 20, t), ReadLimit::All);
    }

    #[test]
    fn an_overdue_writer_lets_reads_through_up_to_its_bytes() {
        let mut w = Writes::default();
        w.extended(S1, ino(1), 4096, 8192, 4096);
        w.extended(S2, ino(1), 8192, 9000, 8192);
        let later = Instant::now() + PATIENCE + Duration::from_millis(1);
        assert_eq!(w.limit(ino(1), 0, 9000, later), ReadLimit::Upto(4096));
        assert_eq!(w.limit(ino(1), 8500, 100, later), ReadLimit::Upto(8500));
        w.forget_session(S1);
        assert_eq!(w.limit(ino(1), 0, 9000, later), ReadLimit::Upto(8192));
        w.forget_inode(ino(1));
        assert_eq!(w.len(), 0);
    }
}
