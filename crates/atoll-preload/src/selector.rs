//! The per-thread Syscall User Dispatch selector and the "inside atoll" rule.
//!
//! Linux's Syscall User Dispatch (SUD) reads one byte per thread, the
//! *selector*, on every system call issued from outside the allowed region:
//! `ALLOW` lets the call through, `BLOCK` turns it into a SIGSYS. libatoll
//! keeps the byte in a thread-local and gives it a second meaning:
//!
//! * `BLOCK` — program code is running on this thread;
//! * `ALLOW` — atoll code is running (a wrapper, the SIGSYS handler, the
//!   client library), which may use libc and malloc freely without trapping.
//!
//! [`AtollGuard`] flips the byte to `ALLOW` and restores the previous value
//! on drop, so nesting is safe. A wrapper entered while the byte already
//! says `ALLOW` knows it was reached from atoll's own code (e.g. the client
//! called `read`, which resolved to our exported `read`) and goes straight
//! to the real function.
//!
//! The outermost guard's drop is a boundary back to program code: it
//! delivers program signals deferred meanwhile (`sigdefer`), for atoll
//! code that does not reach the boundary at the end of a dispatch.
//!
//! Life cycle: a new thread's byte starts as `BLOCK` (the thread-local's
//! initial image), SUD is switched on per thread by [`enable_sud`] (it is
//! not inherited by threads or fork children and is cleared by `execve`).
//! Beside the byte, each thread knows whether SUD is on for it
//! ([`dispatch_on`]): set by [`enable_sud`], cleared when the thread
//! switches it off through atoll ([`note_prctl`]); a rewritten site's
//! entry runs a thread's calls as plain system calls without it.

use core::sync::atomic::{compiler_fence, AtomicBool, AtomicU8, AtomicUsize, Ordering};

use crate::raw;
use crate::sigdefer;

/// `SYSCALL_DISPATCH_FILTER_ALLOW`.
pub const ALLOW: u8 = 0;
/// `SYSCALL_DISPATCH_FILTER_BLOCK`.
pub const BLOCK: u8 = 1;

const PR_SET_SYSCALL_USER_DISPATCH: u64 = 59;
const PR_SYS_DISPATCH_ON: u64 = 1;

thread_local! {
    // Const-initialised and without Drop: no lazy-init state and no TLS
    // destructor registration, so access is a plain fs-relative load, usable
    // from a signal handler and from a freshly cloned thread.
    static SELECTOR: AtomicU8 = const { AtomicU8::new(BLOCK) };
    // Whether Syscall User Dispatch is on for this thread: set by
    // [`enable_sud`], cleared when the thread switches it off through
    // atoll ([`note_prctl`]). A rewritten site's entry passes every
    // call of a thread without it to the site's own `syscall`, which is
    // what the unrewritten code would have done (`rewrite::entry`).
    static DISPATCH_ON: AtomicBool = const { AtomicBool::new(false) };
}

/// Address of this thread's selector byte (what SUD is told to read).
#[inline]
pub fn selector_ptr() -> *const AtomicU8 {
    SELECTOR.with(|s| s as *const AtomicU8)
}

/// Current selector value of this thread.
#[inline]
pub fn get() -> u8 {
    SELECTOR.with(|s| s.load(Ordering::Relaxed))
}

/// Overwrite this thread's selector (used where no guard can restore it:
/// a cloned child about to jump back into program code).
#[inline]
pub fn set(v: u8) {
    compiler_fence(Ordering::SeqCst);
    SELECTOR.with(|s| s.store(v, Ordering::Relaxed));
    compiler_fence(Ordering::SeqCst);
}

/// Is atoll code already running on this thread?
#[inline]
pub fn inside_atoll() -> bool {
    get() == ALLOW
}

/// Marks a stretch of atoll code: selector `ALLOW` until dropped, then the
/// previous value. Not `Send`: it restores *this* thread's byte.
pub struct AtollGuard {
    prev: u8,
    _not_send: core::marker::PhantomData<*const ()>,
}

impl AtollGuard {
    #[inline]
    pub fn enter() -> AtollGuard {
        // The fences keep the compiler from moving libc calls (which may
        // issue system calls) across the selector update; the kernel reads
        // the byte on the same thread, so no CPU fence is needed.
        let prev = SELECTOR.with(|s| s.swap(ALLOW, Ordering::Relaxed));
        compiler_fence(Ordering::SeqCst);
        AtollGuard {
            prev,
            _not_send: core::marker::PhantomData,
        }
    }

    /// Value the selector had when the guard was created.
    pub fn prev(&self) -> u8 {
        self.prev
    }
}

impl Drop for AtollGuard {
    /// Hot path: one more thread-local load when nothing is pending.
    #[inline]
    fn drop(&mut self) {
        compiler_fence(Ordering::SeqCst);
        SELECTOR.with(|s| s.store(self.prev, Ordering::Relaxed));
        compiler_fence(Ordering::SeqCst);
        if self.prev == BLOCK
            && sigdefer::any_pending()
            && sigdefer::frame_mode() == sigdefer::FrameMode::None
        {
            sigdefer::deliver_pending(None);
        }
    }
}

/// The allowed region: libatoll's executable segment `[start, start+len)`.
static REGION_START: AtomicUsize = AtomicUsize::new(0);
static REGION_LEN: AtomicUsize = AtomicUsize::new(0);

pub fn set_region(start: usize, len: usize) {
    REGION_START.store(start, Ordering::Relaxed);
    REGION_LEN.store(len, Ordering::Relaxed);
}

pub fn region() -> (usize, usize) {
    (
        REGION_START.load(Ordering::Relaxed),
        REGION_LEN.load(Ordering::Relaxed),
    )
}

/// Switch SUD on for the calling thread. Returns the raw prctl result.
///
/// Must be called with the selector already meaning what the thread does
/// next: callers hold an [`AtollGuard`] (ALLOW) or set `BLOCK` right before
/// returning to program code.
pub fn enable_sud() -> i64 {
    let (start, len) = region();
    let r = raw::syscall(
        libc::SYS_prctl,
        &[
            PR_SET_SYSCALL_USER_DISPATCH,
            PR_SYS_DISPATCH_ON,
            start as u64,
            len as u64,
            selector_ptr() as u64,
        ],
    );
    DISPATCH_ON.with(|d| d.store(r == 0, Ordering::Relaxed));
    r
}

/// Is Syscall User Dispatch on for this thread (as far as atoll saw)?
/// Hot path: one thread-local load.
#[inline]
pub fn dispatch_on() -> bool {
    DISPATCH_ON.with(|d| d.load(Ordering::Relaxed))
}

/// A `prctl(option, arg, …)` that succeeded on this thread: note whether
/// it switched Syscall User Dispatch on or off (atoll's relay for static
/// programs switches it off in the child it execs from; a program may
/// too). Other options change nothing here. Whether it was one about
/// dispatch.
pub fn note_prctl(option: u64, arg: u64) -> bool {
    if option != PR_SET_SYSCALL_USER_DISPATCH {
        return false;
    }
    DISPATCH_ON.with(|d| d.store(arg == PR_SYS_DISPATCH_ON, Ordering::Relaxed));
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guard_allows_and_restores_nested() {
        assert_eq!(get(), BLOCK);
        assert!(!inside_atoll());
        {
            let g = AtollGuard::enter();
            assert_eq!(g.prev(), BLOCK);
            assert!(inside_atoll());
            {
                let inner = AtollGuard::enter();
                assert_eq!(inner.prev(), ALLOW);
            }
            assert!(inside_atoll());
        }
        assert_eq!(get(), BLOCK);
    }

    #[test]
    fn a_thread_knows_when_it_switched_dispatch_off() {
        std::thread::spawn(|| {
            assert!(!dispatch_on());
            assert!(note_prctl(PR_SET_SYSCALL_USER_DISPATCH, PR_SYS_DISPATCH_ON));
            assert!(dispatch_on());
            assert!(!note_prctl(libc::PR_SET_NAME as u64, 0));
            assert!(dispatch_on());
            assert!(note_prctl(PR_SET_SYSCALL_USER_DISPATCH, 0));
            assert!(!dispatch_on());
        })
        .join()
        .unwrap();
    }

    #[test]
    fn each_thread_has_its_own_selector_starting_blocked() {
        let _g = AtollGuard::enter();
        let main_ptr = selector_ptr() as usize;
        let (ptr, val) = std::thread::spawn(|| (selector_ptr() as usize, get()))
            .join()
            .unwrap();
        assert_ne!(ptr, main_ptr);
        assert_eq!(val, BLOCK);
    }
}
