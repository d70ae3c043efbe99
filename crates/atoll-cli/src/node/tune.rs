//! Temporary knobs for measuring the relay's waiting (`ATOLL_RELAY_EXP`,
//! `key=value,…`); removed once the choices are made.

use std::sync::OnceLock;

fn table() -> &'static Vec<(String, u64)> {
    static T: OnceLock<Vec<(String, u64)>> = OnceLock::new();
    T.get_or_init(|| {
        std::env::var("ATOLL_RELAY_EXP")
            .unwrap_or_default()
            .split(',')
            .filter_map(|kv| {
                let (k, v) = kv.split_once('=')?;
                Some((k.trim().to_string(), v.trim().parse().ok()?))
            })
            .collect()
    })
}

pub fn get(key: &str, default: u64) -> u64 {
    table()
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| *v)
        .unwrap_or(default)
}

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
