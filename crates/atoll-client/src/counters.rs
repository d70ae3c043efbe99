//! Events of the Hare techniques that only a client sees (cache hits,
//! broadcasts, client-held offsets, …), counted in process-wide atomics and
//! reported to server 0 as deltas (`Request::ClientCounters`) when the
//! process exits through `exit`, before `execve` hands over, and every few
//! thousand events, so `atoll status` / `--stats-json` can show them.
//! A forked child starts from zero (its parent reports what came before).

use core::sync::atomic::{AtomicU64, Ordering};

use atoll_proto::{ClientCounters, Request};

use crate::session::{Client, Lane};

pub static DCACHE_HITS: AtomicU64 = AtomicU64::new(0);
pub static DCACHE_MISSES: AtomicU64 = AtomicU64::new(0);
pub static DCACHE_INVALIDATIONS: AtomicU64 = AtomicU64::new(0);
pub static DCACHE_FLUSHES: AtomicU64 = AtomicU64::new(0);
pub static BROADCASTS: AtomicU64 = AtomicU64::new(0);
pub static THREE_PHASE_RMDIRS: AtomicU64 = AtomicU64::new(0);
pub static LOCAL_OFFSET_OPS: AtomicU64 = AtomicU64::new(0);
pub static OFFSETS_SHARED: AtomicU64 = AtomicU64::new(0);
pub static UNCOALESCED_OPENS: AtomicU64 = AtomicU64::new(0);
pub static OFFSETS_RECLAIMED: AtomicU64 = AtomicU64::new(0);
/// System calls that reached atoll through the trap (counted by the
/// preload library's SIGSYS handler).
pub static TRAPS: AtomicU64 = AtomicU64::new(0);
/// Bytes this process, as a pipe writer, copied into a reader's buffer
/// (`pipesplit`); counted without triggering a report.
pub static PIPE_SPLIT_BYTES: AtomicU64 = AtomicU64::new(0);
/// File-server names re-bound to a new generation of their member
/// (`Client::bind_server`).
pub static NAME_REBINDS: AtomicU64 = AtomicU64::new(0);
/// Threads bound by their round trips moved to try another core, and
/// given their affinity back (`msgbound`).
pub static MSGBOUND_MOVES: AtomicU64 = AtomicU64::new(0);
pub static MSGBOUND_RETURNS: AtomicU64 = AtomicU64::new(0);
/// Moves undone because the thread's requests got slower.
pub static MSGBOUND_UNDONE: AtomicU64 = AtomicU64::new(0);
/// Reads answered wholly from a remote process's copies, and reads that
/// fetched (`rcache`).
pub static REMOTE_COPY_HITS: AtomicU64 = AtomicU64::new(0);
pub static REMOTE_COPY_FETCHES: AtomicU64 = AtomicU64::new(0);
/// `lseek(SEEK_END)`s answered from the size board, and ones that had to
/// ask (`sizes`).
pub static SIZE_BOARD_HITS: AtomicU64 = AtomicU64::new(0);
pub static SIZE_BOARD_MISSES: AtomicU64 = AtomicU64::new(0);
/// Reads of a regular file answered from blocks learnt before without a
/// message, and reads that could have been but asked (`lease`).
pub static READ_LEASE_HITS: AtomicU64 = AtomicU64::new(0);
pub static READ_LEASE_MISSES: AtomicU64 = AtomicU64::new(0);

/// Events since the last report that trigger a report on their own.
const REPORT_EVERY: u64 = 4096;

static PENDING: AtomicU64 = AtomicU64::new(0);
/// Seconds (coarse monotonic clock) of the last report: a process that
/// counted anything reports at least once a second when it walks a path,
/// so `atoll top` sees live figures.
static LAST_REPORT_SECS: AtomicU64 = AtomicU64::new(0);

/// How many counters [`all`] lists.
const COUNTERS: usize = 22;

static REPORTED: [AtomicU64; COUNTERS] = [const { AtomicU64::new(0) }; COUNTERS];

fn all() -> [&'static AtomicU64; COUNTERS] {
    [
        &DCACHE_HITS,
        &DCACHE_MISSES,
        &DCACHE_INVALIDATIONS,
        &DCACHE_FLUSHES,
        &BROADCASTS,
        &THREE_PHASE_RMDIRS,
        &LOCAL_OFFSET_OPS,
        &OFFSETS_SHARED,
        &UNCOALESCED_OPENS,
        &OFFSETS_RECLAIMED,
        &TRAPS,
        &PIPE_SPLIT_BYTES,
        &NAME_REBINDS,
        &MSGBOUND_MOVES,
        &MSGBOUND_RETURNS,
        &MSGBOUND_UNDONE,
        &REMOTE_COPY_HITS,
        &REMOTE_COPY_FETCHES,
        &SIZE_BOARD_HITS,
        &SIZE_BOARD_MISSES,
        &READ_LEASE_HITS,
        &READ_LEASE_MISSES,
    ]
}

/// Count one event; returns true when a report is due.
pub fn bump(c: &AtomicU64) -> bool {
    c.fetch_add(1, Ordering::Relaxed);
    PENDING.fetch_add(1, Ordering::Relaxed) + 1 >= REPORT_EVERY
}

/// Count one trap (from the SIGSYS handler: lock-free, no allocation).
pub fn count_trap() {
    TRAPS.fetch_add(1, Ordering::Relaxed);
    PENDING.fetch_add(1, Ordering::Relaxed);
}

fn coarse_secs() -> u64 {
    rustix::time::clock_gettime(rustix::time::ClockId::MonotonicCoarse).tv_sec as u64
}

/// Report if enough events piled up since the last report, or anything
/// did and a second passed.
pub fn maybe_report(c: &Client, lane: &Lane) {
    let pending = PENDING.load(Ordering::Relaxed);
    if pending >= REPORT_EVERY
        || (pending > 0 && coarse_secs() > LAST_REPORT_SECS.load(Ordering::Relaxed))
    {
        report(c, lane);
    }
}

/// Take the deltas since the last report.
fn take() -> ClientCounters {
    PENDING.store(0, Ordering::Relaxed);
    let mut d = [0u64; COUNTERS];
    for (i, c) in all().iter().enumerate() {
        let now = c.load(Ordering::Relaxed);
        let before = REPORTED[i].swap(now, Ordering::Relaxed);
        d[i] = now.saturating_sub(before);
    }
    // The clock only when there is something to report: the exit of an
    // image that counted nothing (most of those a shell starts) then
    // reads no clock, whose first use sets up rustix's vDSO (a symbol
    // lookup in the loader, a handful of page faults).
    if d.iter().any(|&n| n != 0) {
        LAST_REPORT_SECS.store(coarse_secs(), Ordering::Relaxed);
    }
    ClientCounters {
        dcache_hits: d[0],
        dcache_misses: d[1],
        dcache_invalidations: d[2],
        dcache_flushes: d[3],
        broadcasts: d[4],
        three_phase_rmdirs: d[5],
        local_offset_ops: d[6],
        offsets_shared: d[7],
        uncoalesced_opens: d[8],
        offsets_reclaimed: d[9],
        traps: d[10],
        pipe_split_bytes: d[11],
        name_rebinds: d[12],
        msgbound_moves: d[13],
        msgbound_returns: d[14],
        msgbound_undone: d[15],
        remote_copy_hits: d[16],
        remote_copy_fetches: d[17],
        size_board_hits: d[18],
        size_board_misses: d[19],
        read_lease_hits: d[20],
        read_lease_misses: d[21],
    }
}

/// Send what was counted since the last report to server 0.
pub fn report(c: &Client, lane: &Lane) {
    let k = take();
    if k != ClientCounters::default() {
        let _ = lane.call_ok(c, 0, Request::ClientCounters(k));
    }
}

/// Report at process exit, posted without ringing server 0's doorbell:
/// the session closes as the process ends, and a server serves what a
/// closed session left in its channels before it drops them
/// (`Admin::SessionClosed`), so the report arrives without a round trip
/// or a wake-up of its own. Before, every process start paid one of each
/// as it exited (docs/BENCHMARKS.md, "Start-up cost per process"). A
/// process without a lane (a new image or forked child that asked no
/// server anything) sends it on its session socket instead of asking for
/// a lane: the boot thread hands it to server 0 ahead of the
/// `SessionClosed` the exit causes.
pub(crate) fn report_at_exit() {
    let Some(c) = crate::session::client() else {
        return;
    };
    let k = take();
    if k == ClientCounters::default() {
        return;
    }
    if !c.holds_lane() {
        c.post_counters(k);
    } else if let Ok(lane) = c.lane() {
        if c.info.remote {
            // Through a node's proxy the frame and the session's end take
            // different paths to the first node (a forwarder relays the
            // ring, the connection's thread its end), so a posted report
            // could be dropped with the channel: wait for the answer. A
            // proxy that is gone fails the call at once (`EIO`).
            let _ = lane.call_ok(c, 0, Request::ClientCounters(k));
        } else {
            let _ = lane.post_quietly(c, 0, Request::ClientCounters(k));
        }
    }
}

/// Before `execve` without a lane: the deltas since the last report
/// (empty when there are none), for the new image to [`carry`]. Read, not
/// taken: should the exec fail, this image still reports them.
pub fn unreported() -> Vec<u64> {
    let mut d = [0u64; COUNTERS];
    for (i, c) in all().iter().enumerate() {
        d[i] = c
            .load(Ordering::Relaxed)
            .saturating_sub(REPORTED[i].load(Ordering::Relaxed));
    }
    if d.iter().all(|&n| n == 0) {
        return Vec::new();
    }
    d.to_vec()
}

/// In a new image: count what the old one left unreported (`unreported`),
/// so it goes out with this image's next report. Extra entries (a newer
/// sender) are ignored.
pub fn carry(deltas: &[u64]) {
    for (c, d) in all().iter().zip(deltas) {
        c.fetch_add(*d, Ordering::Relaxed);
        PENDING.fetch_add(*d, Ordering::Relaxed);
    }
}

/// In a forked child: what the parent counted is the parent's to report.
/// Unlike [`take`], the clock is not read: the child keeps the parent's
/// time of the last report (its first report of its own may come a little
/// sooner), and a child that only execs does not set up the vDSO, which
/// the parent may never have done (a symbol lookup in the loader and
/// about five page faults per fork).
pub fn forget() {
    PENDING.store(0, Ordering::Relaxed);
    for (i, c) in all().iter().enumerate() {
        let now = c.load(Ordering::Relaxed);
        if REPORTED[i].load(Ordering::Relaxed) != now {
            REPORTED[i].store(now, Ordering::Relaxed);
        }
    }
}

extern "C" fn at_exit() {
    if let Some(c) = crate::session::client() {
        crate::incoherent::write_back(c);
        crate::copymap::sync_all(c);
    }
    report_at_exit();
}

/// Report at `exit` (once per image).
pub fn install_exit_report() {
    // SAFETY: registering a plain `extern "C" fn()` with no captured state.
    unsafe { libc::atexit(at_exit) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_counter_is_carried_across_exec() {
        // The last counter in the list, too (a table one entry short
        // panicked in every exec that had something to carry).
        bump(all()[COUNTERS - 1]);
        let carried = unreported();
        assert_eq!(carried.len(), COUNTERS);
        assert_eq!(carried[COUNTERS - 1], 1);
        // A forked child reports none of it (other tests of this process
        // may count other counters meanwhile: only the last is looked at).
        forget();
        let last = |v: Vec<u64>| v.get(COUNTERS - 1).copied().unwrap_or(0);
        assert_eq!(last(unreported()), 0);
        assert_eq!(PENDING.load(Ordering::Relaxed), 0);
        // What it counts itself it does.
        bump(all()[COUNTERS - 1]);
        assert_eq!(last(unreported()), 1);
    }
}
