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

/// Orders a sequentially consistent read-modify-write or store before a
/// later sequentially consistent load of another location (the Dekker /
/// store-buffering pattern of the quiescence counters and the gate).
///
/// The C11 model already forbids the reordering when every access is
/// `SeqCst`, so outside loom this compiles to nothing (on x86 the locked
/// instruction is a full barrier anyway). Loom models `SeqCst` accesses as
/// `AcqRel` and would report false alarms (loom README, "Unsupported
/// features"), but it does model `fence(SeqCst)`: the twin adds one.
#[inline(always)]
pub(crate) fn store_load_order() {
    #[cfg(loom)]
    loom::sync::atomic::fence(Ordering::SeqCst);
}
