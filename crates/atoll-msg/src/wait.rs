//! Waiting for something to happen: spin, sleep on a futex, or spin then
//! sleep (the three [`PollMode`]s, Popcorn ch. 5 and fos §3.2), and the
//! wake-up rule that makes sleeping safe.
//!
//! # The sleep/wake protocol
//!
//! A waiter waits for a condition (`ready()`: "the ring is not empty",
//! "the doorbell was rung", "the channel was closed") that a notifier makes
//! true. They meet on an [`Event`]: one 32-bit futex word whose low 8 bits
//! count announced sleepers and whose high 24 bits count notifications.
//!
//! ```text
//!  waiter                                 notifier
//!  v = event.fetch_add(1) + 1    (A)      make the condition true       (C)
//!  if !ready():                           old = event.fetch_add(TICK)   (D)
//!      futex_wait(event, v)      (B)      if sleepers(old) != 0:
//!  event.fetch_sub(1)                         futex_wake(event)
//! ```
//!
//! Why no wake-up is lost: (A) and (D) are read-modify-writes of one word,
//! so one of them comes first in its modification order.
//! * (D) first: (A) reads from (D)'s release sequence and synchronises with
//!   it (both are acquire-release), so (C), sequenced before (D), happens
//!   before the waiter's `ready()`: the waiter sees it and does not sleep.
//! * (A) first: (D) sees a sleeper and wakes; and since (D) changed the word,
//!   a waiter that has not reached (B) yet finds `event != v` when the kernel
//!   compares under its bucket lock, and returns at once.
//!
//! The notifier's common case (nobody sleeps) is one uncontended locked
//! instruction and no system call. Using read-modify-writes instead of the
//! textbook "store, SeqCst fence, load" costs the same on x86 (a locked
//! instruction is a full barrier) and is modelled exactly by `loom`, which
//! checks this protocol (`loom_*` tests).
//!
//! The counters wrap; a waiter is fooled only if exactly 2^24 notifications
//! happen between its (A) and (B), which cannot happen in practice.

use atoll_proto::boot::PollMode;

use crate::sync::{self, AtomicU32, Ordering};

/// How long [`PollMode::Adaptive`] spins before it sleeps.
///
/// Spinning for about two sleep/wake hand-offs keeps a client awake through
/// a typical server operation (a few µs) and a server awake through a
/// client's work between two requests, so the hot path never sleeps, while
/// an idle wait pays at most ~3x what an oracle that knew when to sleep
/// would pay (the classic competitive argument). What a hand-off costs
/// depends on the machine: ~5.6 µs on a 2-vCPU development machine
/// (`examples/rpc_bench.rs`: 11.3 µs per round trip when both sides sleep),
/// but ~22 µs on a 2-vCPU container guest (`atoll bench rpc`: 45 µs per
/// blocking round trip, as a pipe ping-pong there), where waking an idle
/// virtual CPU is an inter-processor interrupt through the hypervisor. The
/// budget follows the slower kind: 10 µs there meant a sleep and a wake-up
/// on about one request in ten (postmark: 15k server sleeps for 190k
/// requests) and most of the run's time in `futex` (docs/BENCHMARKS.md,
/// "Where the time went"). Spinning is cheap to give up on an
/// oversubscribed core: the spin yields every 64 polls.
pub const ADAPTIVE_SPIN_NS: u64 = 50_000;

/// In [`PollMode::Spin`], give the core away after this many polls, so that
/// a spinner on an oversubscribed machine lets its peer run (on a dedicated
/// core `sched_yield` returns at once, so this costs nothing there).
const SPIN_ROUND: u32 = 1 << 14;

const SLEEPER: u32 = 1;
const SLEEPER_MASK: u32 = 0xff;
const TICK: u32 = 0x100;

/// The futex word a waiter sleeps on and a notifier bumps. All-zero bytes
/// are a valid, quiet event, so it can live in a fresh shared mapping.
#[repr(transparent)]
pub(crate) struct Event(AtomicU32);

impl Event {
    #[cfg(loom)]
    pub(crate) fn new() -> Self {
        Event(AtomicU32::new(0))
    }

    /// Notifier: call after making the condition true (step D).
    /// Hot path: one locked instruction unless someone sleeps.
    #[inline]
    pub(crate) fn notify(&self) {
        if self.0.fetch_add(TICK, Ordering::AcqRel) & SLEEPER_MASK != 0 {
            sync::futex_wake_all(&self.0);
        }
    }

    /// Notifications so far (24 bits, wrapping). Acquire: a caller that sees
    /// a count also sees what every counted notifier did before notifying.
    #[inline]
    pub(crate) fn ticks(&self) -> u32 {
        self.0.load(Ordering::Acquire) >> 8
    }

    /// Announced sleepers right now (for tests and statistics).
    #[allow(dead_code)]
    pub(crate) fn sleepers(&self) -> u32 {
        self.0.load(Ordering::Relaxed) & SLEEPER_MASK
    }

    /// All-zero: no sleeper, no notification yet.
    #[cfg(not(loom))]
    pub(crate) const fn quiet() -> Self {
        Event(AtomicU32::new(0))
    }

    /// Step A alone, for a waiter on many events (`watch`): the value to
    /// sleep on.
    #[cfg(not(loom))]
    pub(crate) fn announce(&self) -> u32 {
        self.0
            .fetch_add(SLEEPER, Ordering::AcqRel)
            .wrapping_add(SLEEPER)
    }

    /// Take back an [`announce`](Self::announce) after the sleep.
    #[cfg(not(loom))]
    pub(crate) fn withdraw(&self) {
        self.0.fetch_sub(SLEEPER, Ordering::AcqRel);
    }

    /// The futex word itself.
    #[cfg(not(loom))]
    pub(crate) fn word(&self) -> &AtomicU32 {
        &self.0
    }

    /// Waiter: announce, re-check, sleep (steps A, B).
    pub(crate) fn sleep_unless(&self, ready: impl Fn() -> bool) {
        let v = self
            .0
            .fetch_add(SLEEPER, Ordering::AcqRel)
            .wrapping_add(SLEEPER);
        if !ready() {
            sync::futex_wait(&self.0, v);
        }
        self.0.fetch_sub(SLEEPER, Ordering::AcqRel);
    }
}

/// A `sched_yield` that kept the core from us longer than this gave it to
/// other work (a timeslice, milliseconds), not just to our peer.
const COSTLY_YIELD_NS: u64 = 200_000;
/// After such a yield, a thread sleeps at once instead of yielding for
/// this long.
const COSTLY_HOLD_NS: u64 = 50_000_000;

#[cfg(not(loom))]
std::thread_local! {
    /// Until when (`now_ns`) this thread's yields are known to be costly.
    static YIELDS_COSTLY_UNTIL: core::cell::Cell<u64> = const { core::cell::Cell::new(0) };
}

/// Are this thread's yields known to cost a timeslice right now?
fn yields_costly(now: u64) -> bool {
    #[cfg(not(loom))]
    return YIELDS_COSTLY_UNTIL.with(|c| now < c.get());
    #[cfg(loom)]
    {
        let _ = now;
        false
    }
}

fn note_costly_yield(now: u64) {
    let until = now + COSTLY_HOLD_NS;
    #[cfg(not(loom))]
    YIELDS_COSTLY_UNTIL.with(|c| c.set(until));
    #[cfg(loom)]
    let _ = until;
}

/// Spin until `ready()`; false if `budget_ns` ran out first.
#[inline]
fn spin(budget_ns: u64, ready: &impl Fn() -> bool) -> bool {
    let start = sync::now_ns();
    let mut i: u32 = 0;
    loop {
        if ready() {
            return true;
        }
        sync::spin_hint();
        i = i.wrapping_add(1);
        if cfg!(loom) && i >= 2 {
            return false;
        }
        // Every 64 polls: give the core to anyone waiting for it, then look
        // at the clock (~20 ns). On a timeshared core the peer we wait for
        // may be queued behind us (a server pinned to the client's core, or
        // the client its server just answered): spinning out the whole
        // budget would only delay it. On a core of our own `sched_yield`
        // returns at once (~0.2 µs per 64 polls). On an oversubscribed
        // machine a yield puts us behind every other runnable task for a
        // timeslice, while a sleeper is woken with preemption: once a
        // yield has cost that, sleep instead of yielding for a while.
        if i & 63 == 0 {
            let before = sync::now_ns();
            if yields_costly(before) {
                return false;
            }
            sync::yield_now();
            let after = sync::now_ns();
            if after.wrapping_sub(before) >= COSTLY_YIELD_NS {
                note_costly_yield(after);
                return false;
            }
            if after.wrapping_sub(start) >= budget_ns {
                return false;
            }
        }
    }
}

/// Wait (once) until `ready()`, honouring `mode`, on `event`.
///
/// Returns when `ready()` held, or spuriously (after a spin round in
/// `Spin` mode, after a signal, ...): callers re-check in a loop.
pub(crate) fn wait(mode: PollMode, event: &Event, ready: impl Fn() -> bool) {
    match mode {
        PollMode::Spin => {
            let mut i: u32 = 0;
            while !ready() {
                sync::spin_hint();
                i += 1;
                if i == SPIN_ROUND || (cfg!(loom) && i >= 2) {
                    sync::yield_now();
                    return;
                }
            }
        }
        PollMode::Block => event.sleep_unless(ready),
        PollMode::Adaptive => {
            if !spin(ADAPTIVE_SPIN_NS, &ready) {
                event.sleep_unless(ready);
            }
        }
    }
}

/// Escalating back-off for a producer facing a full ring: spin, then yield,
/// then nap. A full ring means the consumer is behind (or gone), so the
/// producer needs no futex of its own: it only has to stay out of the way
/// until `send` can complete (Hare §3.7.2: `send` returns once the message
/// is in the ring).
pub(crate) struct Backoff {
    step: u32,
}

impl Backoff {
    pub(crate) fn new() -> Self {
        Backoff { step: 0 }
    }

    pub(crate) fn snooze(&mut self) {
        if cfg!(loom) {
            sync::yield_now();
            return;
        }
        match self.step {
            0..=6 => {
                for _ in 0..(1u32 << self.step) {
                    sync::spin_hint();
                }
            }
            7..=16 => sync::yield_now(),
            _ => sync::nap(),
        }
        self.step = self.step.saturating_add(1);
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::atomic::AtomicBool;
    use loom::sync::Arc;

    /// The waiter blocks at once; a lost wake-up would deadlock, which loom
    /// reports as a failure.
    #[test]
    fn loom_event_wakes_a_sleeper_or_it_never_sleeps() {
        loom::model(|| {
            let ev = Arc::new((Event::new(), AtomicBool::new(false)));
            let ev2 = ev.clone();
            let t = loom::thread::spawn(move || {
                ev2.1.store(true, Ordering::Relaxed); // (C), ordered by (D)
                ev2.0.notify();
            });
            while !ev.1.load(Ordering::Relaxed) {
                wait(PollMode::Block, &ev.0, || ev.1.load(Ordering::Relaxed));
            }
            t.join().unwrap();
        });
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// One costly yield makes the thread sleep instead of yielding for the
    /// hold time, and only its own thread.
    #[test]
    fn a_costly_yield_holds_yields_off_for_a_while_on_its_thread() {
        let now = 1_000_000_000;
        assert!(!yields_costly(now));
        note_costly_yield(now);
        assert!(yields_costly(now + 1));
        assert!(yields_costly(now + COSTLY_HOLD_NS - 1));
        assert!(!yields_costly(now + COSTLY_HOLD_NS));
        std::thread::spawn(move || assert!(!yields_costly(now + 1)))
            .join()
            .unwrap();
    }

    /// A wait whose condition holds at once returns without spinning.
    #[test]
    fn a_ready_condition_ends_the_spin_at_once() {
        assert!(spin(ADAPTIVE_SPIN_NS, &|| true));
        assert!(!spin(1, &|| false), "a spent budget ends it");
    }
}
