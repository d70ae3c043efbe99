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

/// The futex word this thread is about to sleep on (0: none).
///
/// Closes the gap between a wait's look at [`pending`] and its futex
/// system call: a signal deferred in that gap bumps the word (see
/// [`interrupt_wait`]), so the futex does not sleep (`EAGAIN`) and the wait
/// looks again. A bump is a spurious wake-up notice to anyone else who
/// reads the word, which every wait tolerates.
mod waiting {
    use core::sync::atomic::AtomicUsize;
    thread_local! {
        // Const-initialised, no Drop: readable from a signal handler.
        pub static WORD: AtomicUsize = const { AtomicUsize::new(0) };
    }
}

/// Marks a futex sleep on `word` for [`interrupt_wait`] until dropped.
pub struct Waiting {
    _not_send: core::marker::PhantomData<*const ()>,
}

impl Waiting {
    /// `word` must stay mapped while the guard lives (the caller holds its
    /// ring).
    pub fn on(word: &core::sync::atomic::AtomicU32) -> Waiting {
        let addr = word as *const core::sync::atomic::AtomicU32 as usize;
        waiting::WORD.with(|w| w.store(addr, core::sync::atomic::Ordering::SeqCst));
        Waiting {
            _not_send: core::marker::PhantomData,
        }
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        waiting::WORD.with(|w| w.store(0, core::sync::atomic::Ordering::SeqCst));
    }
}

/// Called by the interposition layer on this thread right after it
/// deferred a signal: move the word a wait is about to sleep on.
pub fn interrupt_wait() {
    let addr = waiting::WORD.with(|w| w.load(core::sync::atomic::Ordering::SeqCst));
    if addr != 0 {
        // SAFETY: `addr` was set by a live `Waiting` of this very thread,
        // which the signal interrupted; its ring (and so the word) stays
        // mapped until the guard is dropped after the futex call.
        let word = unsafe { &*(addr as *const core::sync::atomic::AtomicU32) };
        word.fetch_add(1, core::sync::atomic::Ordering::SeqCst);
    }
}
