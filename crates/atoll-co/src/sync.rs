//! The atomics the lock-free parts (quiescence counters, the mediator's
//! gate) are written against, with a `loom` twin selected by `cfg(loom)` so
//! the very same code is model-checked (as in `atoll-msg`'s `sync`).

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// One step of a wait loop. Under loom it yields so the model checker can
/// schedule the thread being waited for; otherwise it spins a little, then
/// gives the core away, and at last naps: when the call being waited for
/// was preempted on this very CPU and other processes compete for it, a
/// yield may hand the CPU to them rather than to the caller, while a nap
/// lets the caller run.
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
        } else if *round < 128 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(std::time::Duration::from_micros(20));
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
