//! The synchronisation primitives the protocol is written against, with a
//! `loom` twin selected by `cfg(loom)` so the very same ring and wait code is
//! model-checked (see the crate docs for the command).
//!
//! * atomics: `std` atomics normally (they have the layout of plain integers,
//!   so they can live in a shared mapping), loom's atomics under loom;
//! * futex wait/wake on a 32-bit word: the raw `futex(2)` system call through
//!   rustix normally (shared, *not* `FUTEX_PRIVATE_FLAG`, because the word
//!   lives in memory mapped by several processes), a mutex + condition
//!   variable emulation under loom that keeps the futex contract ("sleep only
//!   if the word still holds the expected value; a waker changes the word
//!   first, then wakes");
//! * spin hints, yields and naps, which under loom become `yield_now` so the
//!   model checker can schedule the peer.
//!
//! Everything here is on the per-message hot path and allocation-free.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

/// Sleep while `*word == expected`. May return spuriously (signals, a wake
/// meant for another value): callers always re-check their condition.
#[cfg(not(loom))]
#[inline]
pub(crate) fn futex_wait(word: &AtomicU32, expected: u32) {
    use rustix::thread::futex;
    // EAGAIN (the word changed), EINTR and ETIMEDOUT are all "re-check and
    // go on". The bound lets a waiter notice that its peers died without
    // waking it (`liveness`).
    let bound = futex::Timespec {
        tv_sec: 0,
        tv_nsec: crate::liveness::PEER_CHECK_NS as _,
    };
    let _ = futex::wait(word, futex::Flags::empty(), expected, Some(&bound));
}

/// Wake every thread (in any process) sleeping on `word`.
#[cfg(not(loom))]
#[inline]
pub(crate) fn futex_wake_all(word: &AtomicU32) {
    use rustix::thread::futex;
    let _ = futex::wake(word, futex::Flags::empty(), i32::MAX as u32);
}

#[cfg(loom)]
mod loom_futex {
    use loom::sync::{Condvar, Mutex};

    loom::lazy_static! {
        // One "hash bucket" for every word: spurious wake-ups are allowed by
        // the futex contract, so sharing it loses nothing.
        pub(super) static ref BUCKET: (Mutex<()>, Condvar) = (Mutex::new(()), Condvar::new());
    }
}

#[cfg(loom)]
pub(crate) fn futex_wait(word: &AtomicU32, expected: u32) {
    let (lock, cv) = &*loom_futex::BUCKET;
    let guard = lock.lock().unwrap();
    // The kernel compares the word under the bucket lock; so do we.
    if word.load(Ordering::SeqCst) == expected {
        drop(cv.wait(guard).unwrap());
    }
}

#[cfg(loom)]
pub(crate) fn futex_wake_all(_word: &AtomicU32) {
    let (lock, cv) = &*loom_futex::BUCKET;
    let _guard = lock.lock().unwrap();
    cv.notify_all();
}

/// One step of a busy-wait loop.
#[inline]
pub(crate) fn spin_hint() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    core::hint::spin_loop();
}

/// Give the core away (used when spinning has gone on for long).
#[inline]
pub(crate) fn yield_now() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    rustix::thread::sched_yield();
}

/// Sleep a little (the last stage of a producer's back-off on a full ring).
#[inline]
pub(crate) fn nap() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    {
        let ts = rustix::thread::Timespec {
            tv_sec: 0,
            tv_nsec: 50_000,
        };
        let _ = rustix::thread::nanosleep(&ts);
    }
}

/// Monotonic nanoseconds, read through the vDSO by rustix (no libc call, so
/// it is safe inside the preload library). Under loom there is no time.
#[inline]
pub(crate) fn now_ns() -> u64 {
    #[cfg(loom)]
    {
        0
    }
    #[cfg(not(loom))]
    {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
        (t.tv_sec as u64)
            .wrapping_mul(1_000_000_000)
            .wrapping_add(t.tv_nsec as u64)
    }
}
