//! Noticing that the other side is gone.
//!
//! A client waits for its server's reply in a shared ring; if the whole
//! instance dies (`atoll run` killed, machine-wide OOM), no one will ever
//! close the channel, and a process that outlived its instance — a daemon
//! left behind, a program whose `atoll run` was killed — would wait
//! forever, also in its exit path. So every sleep on a ring is bounded
//! ([`PEER_CHECK_NS`]), and a waiter that has waited that long without an
//! answer asks the check its process installed ([`set_peer_check`]; the
//! client looks at its boot connection, which the kernel hangs up when the
//! instance process dies). Once the check says the peers are gone,
//! [`peers_gone`] stays true, every wait and send of a client channel
//! fails at once with `BrokenPipe`, and the client answers `EIO`.
//!
//! Nothing here runs on the hot path: the check is consulted only after a
//! wait of [`PEER_CHECK_NS`] without an answer.

use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// How long a waiter waits between looks at its peers' liveness.
pub const PEER_CHECK_NS: u64 = 100_000_000;

static GONE: AtomicBool = AtomicBool::new(false);
static CHECK: AtomicUsize = AtomicUsize::new(0);

/// Install `check`, which answers true once the peers this process talks
/// to are gone for good. It must not block and must not use a channel.
pub fn set_peer_check(check: fn() -> bool) {
    CHECK.store(check as usize, Ordering::Release);
}

/// Are this process's peers known to be gone? (One relaxed load.)
#[inline]
pub fn peers_gone() -> bool {
    GONE.load(Ordering::Relaxed)
}

/// Declare the peers gone (the check said so, or the process knows).
pub fn mark_peers_gone() {
    GONE.store(true, Ordering::Relaxed);
}

/// Ask the installed check now; true if the peers are gone.
pub fn check_peers_now() -> bool {
    if peers_gone() {
        return true;
    }
    let f = CHECK.load(Ordering::Acquire);
    if f == 0 {
        return false;
    }
    // SAFETY: the only non-zero value ever stored is a `fn() -> bool`
    // (`set_peer_check`), and function pointers and usize have one size.
    let check: fn() -> bool = unsafe { core::mem::transmute::<usize, fn() -> bool>(f) };
    if check() {
        mark_peers_gone();
        return true;
    }
    false
}

/// One waiter's clock: consults the check once per [`PEER_CHECK_NS`] of
/// waiting. Created when a wait starts; costs nothing until the first
/// `waited` call.
pub(crate) struct Watch {
    since: u64,
}

impl Watch {
    pub(crate) fn new() -> Watch {
        Watch { since: 0 }
    }

    /// Call after each unsuccessful wait.
    pub(crate) fn waited(&mut self) {
        if cfg!(loom) {
            return;
        }
        let now = crate::sync::now_ns();
        if self.since == 0 {
            self.since = now;
        } else if now.wrapping_sub(self.since) >= PEER_CHECK_NS {
            self.since = now;
            check_peers_now();
        }
    }
}
