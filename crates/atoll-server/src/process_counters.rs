//! Counters of components that share the instance's process but are no
//! file server (`atoll node`'s head proxy), reported by `atoll status`
//! beside the servers' named counters.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

static PUBLISHED: Mutex<Vec<(&'static str, &'static AtomicU64)>> = Mutex::new(Vec::new());

/// Report `counter` as `name` from now on (once per name).
pub fn publish(name: &'static str, counter: &'static AtomicU64) {
    let mut published = PUBLISHED.lock().unwrap_or_else(|e| e.into_inner());
    if !published.iter().any(|(n, _)| *n == name) {
        published.push((name, counter));
    }
}

/// Every published counter's name and value now.
pub fn snapshot() -> Vec<(String, u64)> {
    let published = PUBLISHED.lock().unwrap_or_else(|e| e.into_inner());
    published
        .iter()
        .map(|(n, c)| (n.to_string(), c.load(Ordering::Relaxed)))
        .collect()
}
