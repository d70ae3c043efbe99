//! Polling that yields between polls, for a proxy thread that waits for
//! something it knows is coming soon (the edge's dispatcher, the head's
//! pump).

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
        self.may_poll_at(Instant::now())
    }

    fn may_poll_at(&mut self, now: Instant) -> bool {
        match self.costly_until {
            Some(t) if now < t => false,
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
        self.yielded(before, Instant::now());
    }

    /// A yield from `before` to `after`: note it if it was costly.
    fn yielded(&mut self, before: Instant, after: Instant) {
        if after - before >= COSTLY_YIELD {
            self.costly_until = Some(after + COSTLY_HOLD);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cheap yield keeps polling allowed; a costly one stops it for
    /// `COSTLY_HOLD`, after which polling is allowed again.
    #[test]
    fn a_costly_yield_holds_polling_off_for_a_while() {
        let mut y = Yielder::default();
        let t0 = Instant::now();
        y.yielded(t0, t0 + COSTLY_YIELD / 2);
        assert!(y.may_poll_at(t0 + COSTLY_YIELD));
        let after = t0 + COSTLY_YIELD;
        y.yielded(t0, after);
        assert!(!y.may_poll_at(after));
        assert!(!y.may_poll_at(after + COSTLY_HOLD / 2));
        assert!(y.may_poll_at(after + COSTLY_HOLD));
        assert!(
            y.may_poll_at(after + COSTLY_HOLD / 2),
            "the hold was cleared"
        );
    }
}
