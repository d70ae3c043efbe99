//! What client processes report about themselves (`Request::ClientCounters`,
//! sent to server 0): the instance-wide sums that `atoll status` shows per
//! Hare technique (§5.4), and per session the few figures `atoll top`
//! shows per process (lookup-cache hits and misses, traps). Forgotten with
//! the session.

use super::ordered::Map;
use std::time::Instant;

use atoll_proto::{ClientCounters, SessionId};

use super::{FileServer, OP_NAMES};

/// The request a server served last: what a message trace records.
#[derive(Clone, Copy, Debug)]
pub struct LastOp {
    pub op: u16,
    pub start: Instant,
    pub ns: u64,
    pub ok: bool,
    /// It did the work of several protocol steps (Hare §3.7.4).
    pub coalesced: bool,
}

impl Default for LastOp {
    fn default() -> Self {
        LastOp {
            op: 0,
            start: Instant::now(),
            ns: 0,
            ok: true,
            coalesced: false,
        }
    }
}

/// The name of operation index `op` (as in `ServerStats::ops`).
pub fn op_name(op: u16) -> &'static str {
    OP_NAMES.get(op as usize).copied().unwrap_or("?")
}

impl<S> FileServer<S> {
    /// The request served last.
    pub fn last_op(&self) -> LastOp {
        self.last_op
    }

    /// `(dcache hits, dcache misses, traps)` that `session`'s process
    /// reported to this server (server 0 receives the reports).
    pub fn session_reports(&self, session: SessionId) -> (u64, u64, u64) {
        self.client_counters.of(session)
    }

    /// Sessions whose processes reported counters here, or for which
    /// this server transferred data.
    pub fn reporting_sessions(&self) -> Vec<SessionId> {
        let mut v: Vec<SessionId> = self.client_counters.sessions().collect();
        v.extend(self.session_transfers.keys().copied());
        v
    }

    /// `(copied, shared)` bytes of data this server moved for `session`.
    pub fn session_transfers(&self, session: SessionId) -> (u64, u64) {
        self.session_transfers
            .get(&session)
            .copied()
            .unwrap_or_default()
    }
}

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub(super) struct ClientReports {
    /// Sums over every report since boot.
    pub(super) totals: ClientCounters,
    /// `(dcache hits, dcache misses, traps)` per live session.
    per_session: Map<SessionId, (u64, u64, u64)>,
}

impl ClientReports {
    pub(super) fn add(&mut self, session: SessionId, k: &ClientCounters) {
        let t = &mut self.totals;
        t.dcache_hits += k.dcache_hits;
        t.dcache_misses += k.dcache_misses;
        t.dcache_invalidations += k.dcache_invalidations;
        t.dcache_flushes += k.dcache_flushes;
        t.broadcasts += k.broadcasts;
        t.three_phase_rmdirs += k.three_phase_rmdirs;
        t.local_offset_ops += k.local_offset_ops;
        t.offsets_shared += k.offsets_shared;
        t.uncoalesced_opens += k.uncoalesced_opens;
        t.offsets_reclaimed += k.offsets_reclaimed;
        t.traps += k.traps;
        t.pipe_split_bytes += k.pipe_split_bytes;
        t.name_rebinds += k.name_rebinds;
        t.msgbound_moves += k.msgbound_moves;
        t.msgbound_returns += k.msgbound_returns;
        t.msgbound_undone += k.msgbound_undone;
        t.remote_copy_hits += k.remote_copy_hits;
        t.remote_copy_fetches += k.remote_copy_fetches;
        t.size_board_hits += k.size_board_hits;
        t.size_board_misses += k.size_board_misses;
        t.read_lease_hits += k.read_lease_hits;
        t.read_lease_misses += k.read_lease_misses;
        let s = self.per_session.entry(session).or_default();
        s.0 += k.dcache_hits;
        s.1 += k.dcache_misses;
        s.2 += k.traps;
    }

    pub(super) fn forget(&mut self, session: SessionId) {
        self.per_session.remove(&session);
    }

    /// `(dcache hits, dcache misses, traps)` reported by `session`.
    pub(super) fn of(&self, session: SessionId) -> (u64, u64, u64) {
        self.per_session.get(&session).copied().unwrap_or_default()
    }

    /// Sessions that reported something.
    pub(super) fn sessions(&self) -> impl Iterator<Item = SessionId> + '_ {
        self.per_session.keys().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_add_up_per_session_and_in_total_and_are_forgotten() {
        let mut r = ClientReports::default();
        let k = ClientCounters {
            dcache_hits: 3,
            dcache_misses: 1,
            traps: 7,
            ..Default::default()
        };
        r.add(SessionId(1), &k);
        r.add(SessionId(1), &k);
        r.add(SessionId(2), &k);
        assert_eq!(r.of(SessionId(1)), (6, 2, 14));
        assert_eq!(r.totals.traps, 21);
        r.forget(SessionId(1));
        assert_eq!(r.of(SessionId(1)), (0, 0, 0));
        assert_eq!(r.sessions().collect::<Vec<_>>(), vec![SessionId(2)]);
        assert_eq!(r.totals.dcache_hits, 9, "totals outlive sessions");
    }
}
