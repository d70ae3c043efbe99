//! Interrupted waits: how a blocking atoll call learns that a program
//! signal is waiting for it to unwind.
//!
//! The interposition layer (libatoll) defers a program signal that lands
//! while atoll code runs: its handler must run as program code, at the
//! boundary back to the program, never nested inside a call that holds a
//! lane, a descriptor reference or a ring sleeper count. A blocking wait
//! here therefore looks at [`pending`] after every sleep (the signal cuts
//! the sleep short with `EINTR`) and, when a signal waits, unwinds:
//!
//! * calls that Linux restarts for `SA_RESTART` handlers (pipe and FIFO
//!   reads, writes and opens, `F_SETLKW`, blocking `flock`) fail with
//!   [`ERESTARTSYS`], as in the kernel; the interposition layer runs the
//!   handlers and issues the call again, or turns it into `EINTR`;
//! * calls that never restart (`poll`, `select`, `epoll_wait`) fail with
//!   `EINTR` at once.
//!
//! Without the interposition layer (no hook) nothing is ever pending.

use std::sync::OnceLock;

/// The kernel's internal "restart if the handler asked for it" code; never
/// seen by a program (the interposition layer maps it).
pub const ERESTARTSYS: i32 = 512;

static PENDING: OnceLock<fn() -> bool> = OnceLock::new();

/// Install the question "does a deferred program signal wait on this
/// thread?" (once per process image).
pub fn set_pending_hook(hook: fn() -> bool) {
    let _ = PENDING.set(hook);
}

/// Does a deferred program signal wait for this thread's call to unwind?
#[inline]
pub fn pending() -> bool {
    PENDING.get().is_some_and(|h| h())
}
