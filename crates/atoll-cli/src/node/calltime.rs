//! Where a remote call's time goes, counted by the proxies on its path:
//! the edge times each call from the moment it leaves for the head until
//! its reply is back (two network crossings, the head and the server),
//! and the head from the moment it put the request in the server's ring
//! until it took the reply (the server alone, and the hand-offs to it).
//! Compared with the program's own round trip (`atoll bench --hosts`,
//! `remote_rtt_ns`), they split it into the three legs of docs/BENCHMARKS.md,
//! "Where a remote round trip's time goes, leg by leg".
//!
//! Only a call sent while none was owed on its channel is timed (a lane
//! has one call outstanding, so that is almost every call; a window of
//! reads or write pieces is timed from its first piece to its last reply).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

/// Nanoseconds since the first call in this process (0 is never returned,
/// so a zero start means "not timing").
pub fn now_ns() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    let epoch = *EPOCH.get_or_init(Instant::now);
    epoch.elapsed().as_nanos() as u64 + 1
}

/// Timed calls and their total time, one leg of the path.
#[derive(Default)]
pub struct CallTimes {
    ns: AtomicU64,
    calls: AtomicU64,
}

impl CallTimes {
    pub const fn new() -> CallTimes {
        CallTimes {
            ns: AtomicU64::new(0),
            calls: AtomicU64::new(0),
        }
    }

    /// A call on a channel that owed none before it starts now.
    pub fn start(started: &AtomicU64) {
        started.store(now_ns(), Ordering::Relaxed);
    }

    /// The last reply owed on a channel came: count the call it ends.
    pub fn end(&self, started: &AtomicU64) {
        let t = started.swap(0, Ordering::Relaxed);
        if t != 0 {
            self.ns
                .fetch_add(now_ns().saturating_sub(t), Ordering::Relaxed);
            self.calls.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The counters, as `atoll status` shows them: total nanoseconds and calls.
    pub fn counters(&self) -> (&AtomicU64, &AtomicU64) {
        (&self.ns, &self.calls)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A call is counted once, from its start; an end without a start
    /// (a call sent while another was owed) counts nothing.
    #[test]
    fn a_call_is_counted_from_its_start_once() {
        let t = CallTimes::new();
        let started = AtomicU64::new(0);
        t.end(&started);
        assert_eq!(t.calls.load(Ordering::Relaxed), 0);
        CallTimes::start(&started);
        std::thread::sleep(std::time::Duration::from_millis(2));
        t.end(&started);
        t.end(&started);
        assert_eq!(t.calls.load(Ordering::Relaxed), 1);
        assert!(t.ns.load(Ordering::Relaxed) >= 2_000_000);
    }
}
