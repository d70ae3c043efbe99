//! Polling that yields between polls, for a proxy thread that waits for
//! something it knows is coming soon (the edge's dispatcher).

use std::time::{Duration, Instant};

/// A `sched_yield` that kept the core from us this long gave it to other
/// work for a timeslice, not just to the thread we wait for (as
/// `atoll_msg::wait`: on a loaded machine a yielder waits behind every
/// runnable task, while a sleeper is woken with preemption).
const COSTLY_YIELD: Duration = Duration::from_micros(200);
/// After such a yield, sleep instead of polling for this long.
const COSTLY_HOLD: Duration = Duration::from_millis(50);

/// Polling that yields the core between polls, and gives up polling for
/// a while once a yield turned out costly.
#[derive(Default)]
pub struct Yielder {
    costly_until: Option<Instant>,
}

impl Yielder {
    /// May the caller poll (and yield) now rather than sleep?
    pub fn may_poll(&mut self) -> bool {
        match self.costly_until {
            Some(t) if Instant::now() < t => false,
            Some(_) => {
                self.costly_until = None;
                true
            }
            None => true,
        }
    }

    /// Give the core to whoever waits for it; note a costly yield.
    pub fn yield_now(&mut self) {
        let before = Instant::now();
        std::thread::yield_now();
        let after = Instant::now();
        if after - before >= COSTLY_YIELD {
            self.costly_until = Some(after + COSTLY_HOLD);
        }
    }
}
