//! `atoll bench rpc`: what one message round trip costs, next to the
//! alternatives and to the published numbers (fos: 11,892 cycles per round
//! trip, fos §5; Hare: roughly 1,000 cycles of messaging per operation,
//! Hare §5.3.3). The measurements themselves live in the messaging crate
//! (`atoll_msg::bench`), beside the code they measure:
//!
//! * `atoll_spin`, `atoll_block`: a 64-byte request and reply over a real
//!   channel, the server waiting on its doorbell by spinning or sleeping;
//! * `raw_pingpong`: one cache line bounced between two cores — the floor
//!   for any shared-memory message (target: atoll spin ≤ 2× this);
//! * `null_syscall`: `getppid`, the cost of entering the kernel at all;
//! * `pipe`, `unix_socket`: one byte there and back through the kernel
//!   (the path a FUSE- or socket-based server pays).
//!
//! The two sides are pinned to the first two CPUs this process may use.
//! Spinning benchmarks need two CPUs; with one they are skipped.
//!
//! Each figure is the best of [`TRIALS`] short trials: on a shared or
//! oversubscribed machine one long run measures mostly the scheduler (a
//! spinning peer preempted for a time slice), while the best trial is what
//! the mechanism costs when both sides run; the JSON also keeps the median
//! of the spinning round trip (`atoll_spin_median_ns`) to show the noise.

use std::collections::BTreeMap;

use atoll_msg::bench::{self as mb, RoundTrip};
use atoll_proto::boot::PollMode;
use serde::Serialize;

pub const FOS_ROUND_TRIP_CYCLES: u64 = 11_892;
pub const HARE_CYCLES_PER_OP: u64 = 1_000;
/// Trials per measurement (see the module comment).
pub const TRIALS: u64 = 10;

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct RpcResults {
    pub iterations: u64,
    pub atoll_spin_ns: Option<f64>,
    /// Median over the trials of the spinning round trip.
    pub atoll_spin_median_ns: Option<f64>,
    pub atoll_block_ns: Option<f64>,
    pub raw_pingpong_ns: Option<f64>,
    pub null_syscall_ns: Option<f64>,
    pub pipe_ns: Option<f64>,
    pub unix_socket_ns: Option<f64>,
    /// TSC cycles of each measurement above (keys without `_ns`).
    pub cycles: BTreeMap<String, f64>,
    pub cores: Vec<usize>,
    pub fos_round_trip_cycles: u64,
    pub hare_cycles_per_op: u64,
    pub notes: Vec<String>,
}

/// Run every measurement with about `iters` round trips each (the
/// kernel-mediated ones with a quarter of that).
pub fn run(iters: u64) -> RpcResults {
    let cpus = allowed_cpus();
    let (a, b) = (cpus.first().copied(), cpus.get(1).copied());
    let two = b.is_some();
    let mut r = RpcResults {
        iterations: iters,
        cores: cpus.iter().take(2).copied().collect(),
        fos_round_trip_cycles: FOS_ROUND_TRIP_CYCLES,
        hare_cycles_per_op: HARE_CYCLES_PER_OP,
        ..RpcResults::default()
    };
    let fast = (iters / TRIALS).max(1);
    let slow = iters / 4 / TRIALS + 1;
    let spin = two.then(|| {
        guarded(&mut r, "atoll spin", || {
            trials(|| mb::rpc_round_trip(PollMode::Spin, fast, a, b))
        })
    });
    let spin = spin.flatten();
    r.atoll_spin_median_ns = spin.map(|(_, median)| median);
    r.atoll_spin_ns = record(&mut r, "atoll_spin", spin.map(|(best, _)| best));
    let block = guarded(&mut r, "atoll block", || {
        trials(|| mb::rpc_round_trip(PollMode::Block, slow, a, b))
    });
    r.atoll_block_ns = record(&mut r, "atoll_block", block.map(|t| t.0));
    let raw = two.then(|| {
        guarded(&mut r, "raw ping-pong", || {
            trials(|| mb::raw_pingpong(fast, a, b))
        })
    });
    r.raw_pingpong_ns = record(&mut r, "raw_pingpong", raw.flatten().map(|t| t.0));
    let sys = guarded(&mut r, "null syscall", || trials(|| mb::null_syscall(fast)));
    r.null_syscall_ns = record(&mut r, "null_syscall", sys.map(|t| t.0));
    let pipe = guarded(&mut r, "pipe", || trials(|| mb::pipe_pingpong(slow, a, b)));
    r.pipe_ns = record(&mut r, "pipe", pipe.map(|t| t.0));
    let unix = guarded(&mut r, "unix socket", || {
        trials(|| mb::unix_socket_pingpong(slow, a, b))
    })
    .map(|t| t.0);
    r.unix_socket_ns = record(&mut r, "unix_socket", unix);
    if !two {
        r.notes
            .push("only one CPU allowed: spinning round trips skipped".into());
    }
    r
}

/// Run `f` [`TRIALS`] times: the best round trip, and the median
/// nanoseconds.
fn trials(mut f: impl FnMut() -> RoundTrip) -> (RoundTrip, f64) {
    let mut all: Vec<RoundTrip> = (0..TRIALS).map(|_| f()).collect();
    all.sort_by(|x, y| x.ns_per_op.total_cmp(&y.ns_per_op));
    (all[0], all[all.len() / 2].ns_per_op)
}

/// Keep the cycles of `rt` under `key` and return its nanoseconds.
fn record(r: &mut RpcResults, key: &str, rt: Option<RoundTrip>) -> Option<f64> {
    let rt = rt?;
    if rt.cycles_per_op > 0.0 {
        r.cycles.insert(key.to_string(), rt.cycles_per_op);
    }
    Some(rt.ns_per_op)
}

/// The messaging crate's benchmarks panic when the kernel refuses a
/// resource (a core, a memfd); turn that into a note.
fn guarded<T>(r: &mut RpcResults, what: &str, f: impl FnOnce() -> T) -> Option<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(rt) => Some(rt),
        Err(e) => {
            let msg = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            r.notes.push(format!("{what} failed: {msg}"));
            None
        }
    }
}

pub fn allowed_cpus() -> Vec<usize> {
    match rustix::thread::sched_getaffinity(None) {
        Ok(set) => (0..rustix::thread::CpuSet::MAX_CPU)
            .filter(|&c| set.is_set(c))
            .collect(),
        Err(_) => vec![],
    }
}

/// TSC ticks per nanosecond over `ms` milliseconds (None without a TSC).
pub fn tsc_ghz(ms: u64) -> Option<f64> {
    let t0 = std::time::Instant::now();
    let c0 = mb::cycles();
    std::thread::sleep(std::time::Duration::from_millis(ms));
    let c1 = mb::cycles();
    let ns = t0.elapsed().as_nanos() as f64;
    (c1 > c0).then(|| (c1 - c0) as f64 / ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_measurement_completes_or_explains_itself() {
        // No timing thresholds: each number is finite and positive, or
        // missing with a note.
        let r = run(200);
        let vals = [
            r.atoll_block_ns,
            r.null_syscall_ns,
            r.pipe_ns,
            r.unix_socket_ns,
        ];
        for v in vals.into_iter().flatten() {
            assert!(v.is_finite() && v > 0.0, "{v}");
        }
        if allowed_cpus().len() >= 2 {
            assert!(
                r.atoll_spin_ns.is_some() && r.raw_pingpong_ns.is_some(),
                "{:?}",
                r.notes
            );
        }
        assert_eq!(r.fos_round_trip_cycles, 11_892);
        assert_eq!(r.hare_cycles_per_op, 1_000);
    }
}
