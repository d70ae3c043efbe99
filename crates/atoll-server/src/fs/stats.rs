//! What a server reports of itself for `atoll status` and `atoll top`:
//! its statistics (`ServerStats`) and named counters, split from the
//! server's core state (`fs/mod.rs`) by idea.

use super::*;

impl<S: BlockStore> FileServer<S> {
    pub fn stats(&self) -> ServerStats {
        ServerStats {
            server: self.cfg.index as u32,
            core: self.cfg.core,
            sessions: self.sessions.len() as u64,
            inodes: self.inodes.len() as u64,
            open_descriptions: self.descs.len() as u64,
            requests: self.requests,
            bad_requests: self.bad_requests,
            ops: OP_NAMES
                .iter()
                .zip(self.ops.iter())
                .filter(|(_, (n, _))| *n > 0)
                .map(|(name, (n, ns))| (name.to_string(), *n, *ns))
                .collect(),
            counters: self.counters(),
            mode_swaps: self.adapt.swaps,
            adapted_dirs: self.adapt.adapted(self.cfg.index),
            swapped_dirs: self.adapt.swapped_dirs(self.cfg.index),
            pipes: self.pipe_stats().0,
            pipe_bytes: self.pipe_stats().1,
            pipe_ops: self.pipe_stats().2,
            transfers: Box::new(self.transfers),
            // The server loop adds what only it knows (rings, sessions).
            ..self.cache.stats()
        }
    }

    /// Named counters of the Hare techniques (see `ServerStats::counters`).
    pub(super) fn counters(&self) -> Vec<(String, u64)> {
        let t = &self.track;
        let k = &self.client_counters.totals;
        let mut v: Vec<(String, u64)> = Vec::new();
        if t.enabled() {
            v.push(("dcache.lookups_tracked".into(), t.recorded));
            v.push(("dcache.absent_lookups_tracked".into(), t.recorded_absent));
            v.push(("dcache.invalidations_sent".into(), t.invalidations));
            v.push(("dcache.changes_invalidating".into(), t.changes_invalidating));
            v.push(("dcache.names_tracked".into(), t.tracked()));
            v.push(("dcache.records_evicted".into(), t.evicted));
        }
        for (name, n) in [
            ("dcache.hits", k.dcache_hits),
            ("dcache.misses", k.dcache_misses),
            ("dcache.invalidations_applied", k.dcache_invalidations),
            ("dcache.flushes", k.dcache_flushes),
            ("broadcasts", k.broadcasts),
            ("rmdir.three_phase", k.three_phase_rmdirs),
            ("hybrid_fd.local_ops", k.local_offset_ops),
            ("hybrid_fd.offsets_shared", k.offsets_shared),
            ("hybrid_fd.offsets_reclaimed", k.offsets_reclaimed),
            ("coalescing.uncoalesced_opens", k.uncoalesced_opens),
            ("client.traps", k.traps),
            ("pipe.split_bytes", k.pipe_split_bytes),
            ("names.rebinds", k.name_rebinds),
            ("msgbound.moves", k.msgbound_moves),
            ("msgbound.returns", k.msgbound_returns),
            ("msgbound.undone", k.msgbound_undone),
            ("remote_copies.hits", k.remote_copy_hits),
            ("remote_copies.fetches", k.remote_copy_fetches),
            ("size_board.hits", k.size_board_hits),
            ("size_board.misses", k.size_board_misses),
            ("read_lease.hits", k.read_lease_hits),
            ("read_lease.misses", k.read_lease_misses),
        ] {
            if n > 0 {
                v.push((name.into(), n));
            }
        }
        for (name, n) in self
            .coalesced
            .counters()
            .into_iter()
            .chain(self.adapt.counters())
        {
            if n > 0 {
                v.push((name.into(), n));
            }
        }
        for (name, n) in self.creating.counters() {
            if n > 0 {
                v.push((name.into(), n));
            }
        }
        for (name, n) in self.notify.counters() {
            if n > 0 {
                v.push((name.into(), n));
            }
        }
        // Namespace operations in flight right now (gauges, not counts):
        // a value that stays up on an idle instance is a stuck operation.
        let moving = self
            .inodes
            .values()
            .filter(|i| i.ftype == FileType::Directory && i.links > 1)
            .count() as u64;
        // Blocks kept only for mappings (`retain`): back to zero once the
        // last mapping of every file is gone.
        let retained = self.inodes.values().map(|i| i.retained.len() as u64).sum();
        for (name, n) in [
            ("mappings.retained_blocks", retained),
            ("in_flight.rmdir_marks", self.marks.len() as u64),
            ("in_flight.move_refs", self.move_refs.len() as u64),
            ("in_flight.move_links", self.move_links.len() as u64),
            ("in_flight.directories_moving", moving),
            ("in_flight.rename_lock", self.rename_lock.is_some() as u64),
            ("in_flight.extending_writes", self.writes.len() as u64),
        ] {
            if n > 0 {
                v.push((name.into(), n));
            }
        }
        v
    }
}
