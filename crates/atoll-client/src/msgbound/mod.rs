//! Threads bound by their round trips: placed beside the server they talk
//! to, or off its core, whichever their own measurements say is faster.
//!
//! Where servers timeshare cores with programs (the default), where a
//! thread runs relative to its server decides what a round trip costs,
//! and which side wins depends on what else the machine runs (Hare
//! §5.3.2 measures the two extremes as its split and timeshare
//! configurations). PostMark (5,000 transactions) pinned by `taskset`,
//! with server 0, which holds its files, on core 0:
//!
//! | | on core 0 (beside its server) | on core 1 |
//! |---|---:|---:|
//! | quiet machine | 0.96 s | 0.36 s |
//! | two CPU hogs, one per core | 1.02–1.11 s | 2.20–2.22 s |
//!
//! On a quiet machine the other core wins: a round trip is a hand-off of
//! a cache line between two threads that each spin briefly before
//! sleeping, while beside the server it is two context switches. With
//! every core busy, beside wins: the client yields its core straight to
//! the server, while a wake-up across cores waits for whatever else runs
//! there. Left alone, Linux picks neither on purpose: waking a thread
//! pulls it towards its waker's CPU (wake-affine), and atoll's placement
//! pins a program wherever its round-robin cursor points, so where a
//! program landed decided its speed (`tar xf` of /usr/include: 1.65 s
//! beside its server, 0.69 s on the other core).
//!
//! So each thread that atoll's placement pinned to a core samples its
//! own traffic, and moves by experiment (one that Linux may run anywhere
//! is left to Linux's balancer, which can dodge other work better than a
//! pin can). Every
//! [`WINDOW`] requests it looks at how long the window took, how much of
//! it the thread spent waiting for replies, and where the servers it sent
//! to run (each server publishes its core in the control block,
//! `Control::core`). A thread *bound by its round trips* (waiting at least
//! half the window; waiting, not time per request, says so: beside its
//! server a round trip may take 60 µs, which is what a move cures) tries
//! the other side:
//!
//! * if at least three quarters of its requests went to a server on its
//!   own CPU, it moves to the instance's other cores (*off*);
//! * if at most a quarter did and most went to a server on one other
//!   core, it moves onto that core (*beside*).
//!
//! The move must pay: a moved thread whose requests got 10 % slower than
//! in the window before the move gets its affinity back (*undone*) and
//! tries nothing for a while (0.1 s, doubling up to 10 s; a move that
//! pays resets it). One that stops being bound by its round trips
//! (waiting under a quarter: it computes more than it asks, like a
//! compiler between two files) gets its affinity back too, so computing
//! work spreads over every core again.
//!
//! Only what is atoll's changes: once a program sets its own affinity
//! (`taskset`, `cpus`), it is left alone, and `sched_getaffinity` keeps
//! answering the instance's cores either way. Servers on cores of their
//! own (`--split`, `--poll spin`) are never on a program's CPU and never
//! one it may move to; servers that publish no core (a node's forwarders)
//! are left out. Before an `execve` a move is undone (`before_exec`): the
//! new image samples afresh, and placement pins it where policy says.
//! `ATOLL_MOVES=off` switches this off (to measure what it gains);
//! `ATOLL_MOVES=always` moves whenever the traffic says so, whatever the
//! timing (for tests, which must not depend on timing).

use std::cell::Cell;
use std::sync::atomic::{AtomicU8, Ordering};

use atoll_msg::PollMode;
use rustix::thread::CpuSet;

use crate::session::Client;
use crate::sys;

mod affinity;

/// Requests per sample.
const WINDOW: u32 = 256;
/// Percent of a window spent waiting for replies at or above which a
/// thread is bound by its round trips, and under which a moved one
/// computes more than it asks.
const BOUND_PERCENT: i64 = 50;
const FREE_PERCENT: i64 = 25;
/// After a move that did not pay, wait this long before trying again;
/// twice as long after each further one, up to [`MAX_HOLD_NS`].
const FIRST_HOLD_NS: i64 = 100_000_000;
const MAX_HOLD_NS: i64 = 10_000_000_000;

/// Environment switch: `off`, `on` (the default) or `always`.
pub const ENV_MOVES: &str = "ATOLL_MOVES";

const MODE_ON: u8 = 0;
const MODE_OFF: u8 = 1;
const MODE_ALWAYS: u8 = 2;
static MODE: AtomicU8 = AtomicU8::new(MODE_ON);

/// At start: how moving is switched.
pub fn init_from_env() {
    let mode = match std::env::var_os(ENV_MOVES) {
        Some(v) if v == "off" => MODE_OFF,
        Some(v) if v == "always" => MODE_ALWAYS,
        _ => MODE_ON,
    };
    MODE.store(mode, Ordering::Relaxed);
}

fn mode() -> u8 {
    MODE.load(Ordering::Relaxed)
}

/// One thread's sampling state.
struct Sample {
    /// Requests in this window, and how many went to a server on the CPU
    /// the thread ran on when it sent them.
    sent: Cell<u32>,
    beside: Cell<u32>,
    /// The core most of the window's requests went to (a majority vote:
    /// the candidate and its margin).
    core: Cell<usize>,
    margin: Cell<u32>,
    /// When the window began (0: not yet), and the time in it spent
    /// waiting for replies.
    since: Cell<i64>,
    waited: Cell<i64>,
    /// While moved: the affinity from before, and the time per request
    /// of the window that decided the move (what the move must beat).
    before: Cell<Option<CpuSet>>,
    moved_from_ns: Cell<i64>,
    /// No new move before this time; the hold after the next failure.
    hold_until: Cell<i64>,
    hold_ns: Cell<i64>,
    /// Not pinned and not moved: the thread only counts its requests,
    /// and looks again at each window's end whether it got pinned.
    idle: Cell<bool>,
}

impl Sample {
    const fn new() -> Sample {
        Sample {
            sent: Cell::new(0),
            beside: Cell::new(0),
            core: Cell::new(0),
            margin: Cell::new(0),
            since: Cell::new(0),
            waited: Cell::new(0),
            before: Cell::new(None),
            moved_from_ns: Cell::new(0),
            hold_until: Cell::new(0),
            hold_ns: Cell::new(FIRST_HOLD_NS),
            idle: Cell::new(false),
        }
    }
}

std::thread_local! {
    static SAMPLE: Sample = const { Sample::new() };
}

/// One finished window as the rule sees it.
#[derive(Clone, Copy, Debug)]
struct Window {
    /// Time per request.
    per_request: i64,
    /// Percent of the window spent waiting for replies.
    waiting: i64,
    /// Requests that went to a server on the thread's CPU.
    beside: u32,
    /// The core most requests went to, if one won the vote, and whether
    /// it is the thread's CPU now.
    majority: Option<usize>,
    on_majority: bool,
}

/// What a finished window says to do.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    /// Leave the thread where it is.
    Stay,
    /// Try the instance's cores but this one.
    Off,
    /// Try the core of the server most requests went to.
    Beside(usize),
    /// Give the thread its affinity back: it computes more than it asks.
    Return,
    /// Give the thread its affinity back: the move made its requests
    /// slower; hold off a while.
    Undo,
    /// The move paid: keep it, and forget earlier failures.
    Keep,
}

/// The rule, apart from the system calls (unit-tested). `moved_from`:
/// while moved, the time per request before the move; `held`: a failed
/// move is too recent.
fn judge(w: Window, moved_from: Option<i64>, held: bool) -> Verdict {
    if let Some(base) = moved_from {
        return if w.waiting < FREE_PERCENT {
            Verdict::Return
        } else if w.per_request * 10 > base * 11 {
            Verdict::Undo
        } else {
            Verdict::Keep
        };
    }
    if held || w.waiting < BOUND_PERCENT {
        return Verdict::Stay;
    }
    if w.beside * 4 >= WINDOW * 3 {
        return Verdict::Off;
    }
    match w.majority {
        Some(core) if w.beside * 4 <= WINDOW && !w.on_majority => Verdict::Beside(core),
        _ => Verdict::Stay,
    }
}

/// The clock for [`replied`]: 0 when moving is switched off, so that it
/// then costs nothing.
#[inline]
pub fn waiting() -> i64 {
    let idle = mode() == MODE_OFF || SAMPLE.try_with(|s| s.idle.get()).unwrap_or(true);
    match idle {
        true => 0,
        false => sys::monotonic_ns(),
    }
}

/// The reply to a request sent at `since` ([`waiting`]) is in.
#[inline]
pub fn replied(since: i64) {
    if since != 0 {
        let _ = SAMPLE.try_with(|s| s.waited.set(s.waited.get() + sys::monotonic_ns() - since));
    }
}

/// A request to `server` is about to be sent by this thread.
#[inline]
pub fn sending(c: &Client, server: usize) {
    if c.poll == PollMode::Spin || mode() == MODE_OFF {
        return;
    }
    let Some(core) = c.control().core(server) else {
        return;
    };
    let _ = SAMPLE.try_with(|s| {
        if s.idle.get() {
            let n = s.sent.get() + 1;
            s.sent.set(if n < WINDOW { n } else { 0 });
            if n >= WINDOW && !crate::cpus::own_affinity() && affinity::pinned() {
                // Placed since: sample from the next window on.
                s.idle.set(false);
                s.since.set(0);
            }
            return;
        }
        let cpu = rustix::thread::sched_getcpu();
        if core == cpu {
            s.beside.set(s.beside.get() + 1);
        }
        vote(s, core);
        let n = s.sent.get() + 1;
        if n < WINDOW {
            s.sent.set(n);
            return;
        }
        let now = sys::monotonic_ns();
        let began = s.since.replace(now);
        let beside = s.beside.replace(0);
        let waited = s.waited.replace(0);
        let majority = (s.margin.replace(0) > 0).then(|| s.core.get());
        s.sent.set(0);
        if began == 0 {
            return;
        }
        // A thread Linux may run anywhere is left to Linux: pinning it
        // could only take away the balancer's freedom to dodge other work
        // (measured: PostMark beside two CPU hogs, unpinned, 24–25 s left
        // alone and 30–36 s moved). A pinned one has no such freedom to
        // lose. Until it is pinned it samples nothing; nor does a thread
        // whose affinity is the program's own.
        if crate::cpus::own_affinity() || (s.before.get().is_none() && !affinity::pinned()) {
            s.idle.set(true);
            return;
        }
        let took = (now - began).max(1);
        let mut w = Window {
            per_request: took / i64::from(WINDOW),
            waiting: waited * 100 / took,
            beside,
            majority,
            on_majority: majority == Some(cpu),
        };
        if mode() == MODE_ALWAYS {
            // As fast as can be and all waiting: never slower, never free.
            (w.per_request, w.waiting) = (1, 100);
        }
        act(c, s, w, now);
    });
}

/// Boyer–Moore majority vote over the window's requests' cores.
fn vote(s: &Sample, core: usize) {
    match s.margin.get() {
        0 => {
            s.core.set(core);
            s.margin.set(1);
        }
        m if s.core.get() == core => s.margin.set(m + 1),
        m => s.margin.set(m - 1),
    }
}

fn act(c: &Client, s: &Sample, w: Window, now: i64) {
    let moved_from = s.before.get().map(|_| s.moved_from_ns.get());
    match judge(w, moved_from, now < s.hold_until.get()) {
        Verdict::Stay => {}
        Verdict::Keep => s.hold_ns.set(FIRST_HOLD_NS),
        Verdict::Off => {
            if let Some(off) = affinity::all_but(c, rustix::thread::sched_getcpu()) {
                move_to(s, &off, w.per_request);
            }
        }
        Verdict::Beside(core) => {
            if let Some(on) = affinity::only(c, core) {
                move_to(s, &on, w.per_request);
            }
        }
        Verdict::Return => {
            give_back(s);
        }
        Verdict::Undo => {
            if give_back(s) {
                crate::counters::bump(&crate::counters::MSGBOUND_UNDONE);
                let hold = s.hold_ns.get();
                s.hold_until.set(now + hold);
                s.hold_ns.set((hold * 2).min(MAX_HOLD_NS));
            }
        }
    }
}

/// Move this thread to `cpus`, remembering where it was.
fn move_to(s: &Sample, cpus: &CpuSet, per_request: i64) {
    let Some(before) = affinity::current() else {
        return;
    };
    if affinity::set(cpus) {
        s.before.set(Some(before));
        s.moved_from_ns.set(per_request);
        crate::counters::bump(&crate::counters::MSGBOUND_MOVES);
    }
}

/// Give this thread the affinity it had before it moved.
fn give_back(s: &Sample) -> bool {
    let Some(before) = s.before.take() else {
        return false;
    };
    if !affinity::set(&before) {
        s.before.set(Some(before));
        return false;
    }
    crate::counters::bump(&crate::counters::MSGBOUND_RETURNS);
    true
}

/// Has this thread been moved (its affinity is `msgbound`'s now)?
pub fn moved() -> bool {
    SAMPLE
        .try_with(|s| s.before.get().is_some())
        .unwrap_or(false)
}

/// Before this thread `execve`s: undo a move, so that the new image,
/// which samples afresh, starts as the program left it (and placement
/// pins it where policy says).
pub fn before_exec() {
    let _ = SAMPLE.try_with(|s| {
        give_back(s);
        s.sent.set(0);
        s.since.set(0);
        s.beside.set(0);
        s.waited.set(0);
        s.margin.set(0);
        s.idle.set(false);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    const FAST: i64 = 5_000;

    fn w(per_request: i64, waiting: i64, beside: u32) -> Window {
        Window {
            per_request,
            waiting,
            beside,
            majority: None,
            on_majority: false,
        }
    }

    fn toward(core: usize, on: bool) -> Window {
        Window {
            majority: Some(core),
            on_majority: on,
            ..w(FAST, 90, 0)
        }
    }

    #[test]
    fn a_thread_bound_by_its_round_trips_beside_its_server_tries_the_other_cores() {
        assert_eq!(judge(w(FAST, 90, WINDOW), None, false), Verdict::Off);
        assert_eq!(
            judge(w(FAST, 50, WINDOW * 3 / 4), None, false),
            Verdict::Off
        );
        // Slow round trips are what being beside the server may cost.
        assert_eq!(judge(w(60_000, 95, WINDOW), None, false), Verdict::Off);
        // It computes between requests: where it runs matters little.
        assert_eq!(judge(w(FAST, 30, WINDOW), None, false), Verdict::Stay);
        // A move that failed is too recent.
        assert_eq!(judge(w(FAST, 90, WINDOW), None, true), Verdict::Stay);
    }

    #[test]
    fn a_thread_away_from_the_server_it_talks_to_tries_its_core() {
        assert_eq!(judge(toward(3, false), None, false), Verdict::Beside(3));
        // Already there, or no server had most of its requests.
        assert_eq!(judge(toward(3, true), None, false), Verdict::Stay);
        assert_eq!(judge(w(FAST, 90, 0), None, false), Verdict::Stay);
        // Half its requests beside it already: neither side is clear.
        let split = Window {
            beside: WINDOW / 2,
            ..toward(3, false)
        };
        assert_eq!(judge(split, None, false), Verdict::Stay);
        assert_eq!(judge(toward(3, false), None, true), Verdict::Stay);
    }

    #[test]
    fn a_moved_thread_stays_only_while_the_move_pays() {
        // Faster than before the move, or about as fast: keep it.
        assert_eq!(judge(w(FAST / 2, 90, 0), Some(FAST), false), Verdict::Keep);
        assert_eq!(
            judge(w(FAST * 105 / 100, 90, 0), Some(FAST), false),
            Verdict::Keep
        );
        // Slower: the other side is busy with other work; undo.
        assert_eq!(judge(w(FAST * 2, 90, 0), Some(FAST), false), Verdict::Undo);
        // Computing now: its affinity back, no hold.
        assert_eq!(judge(w(FAST, 10, 0), Some(FAST), false), Verdict::Return);
    }

    #[test]
    fn the_vote_finds_the_core_most_requests_went_to() {
        let s = Sample::new();
        for core in [2, 1, 2, 2, 0, 2, 2, 1, 2] {
            vote(&s, core);
        }
        assert_eq!((s.core.get(), s.margin.get() > 0), (2, true));
    }
}
