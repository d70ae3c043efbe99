//! The atomics the lock-free parts (quiescence counters, the mediator's
//! gate) are written against, with a `loom` twin selected by `cfg(loom)` so
//! the very same code is model-checked (as in `atoll-msg`'s `sync`).

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// One step of a wait loop. Under loom it yields so the model checker can
/// schedule the thread being waited for; otherwise it spins a little and
/// then gives the core away (a 2-core machine must not starve the caller
/// whose call we wait for).
#[inline]
pub(crate) fn backoff(round: &mut u32) {
    #[cfg(loom)]
    {
        let _ = round;
        loom::thread::yield_now();
    }
    #[cfg(not(loom))]
    {
        *round = round.saturating_add(1);
        if *round < 64 {
            core::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}
