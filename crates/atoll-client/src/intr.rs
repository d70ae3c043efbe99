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
/// The kernel's internal "restart whatever the handler asked" code: the
/// call runs again once the handlers ran (never `EINTR`).
pub const ERESTARTNOINTR: i32 = 513;

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

static DEFERRING: OnceLock<fn() -> bool> = OnceLock::new();

/// Install the question "would a program signal arriving now on this
/// thread be deferred?" (once per process image).
pub fn set_deferring_hook(hook: fn() -> bool) {
    let _ = DEFERRING.set(hook);
}

/// Would a program signal that arrives now on this thread be deferred
/// (atoll code runs, not a host call)? Its handler then cannot run before
/// this call returns to the program, so a process-local lock that only
/// atoll code takes needs no signal mask (`sys::SpinLock::lock_in_call`).
/// `false` without the interposition layer.
#[inline]
pub fn signals_deferred() -> bool {
    DEFERRING.get().is_some_and(|h| h())
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

// A system call that atoll issues for the program and that may block (a
// rewritten `accept`, `recvmsg`, `connect` on a socket in the mount, an
// open of a host path reached through the mount, a host poll): the signal
// entry moves a thread caught between the look at `pending` and the
// `syscall` instruction, or put back on it by the kernel's restart, past
// it with `EINTR` (as glibc's cancellable calls do). The range
// [atoll_intr_syscall, atoll_intr_syscall_insn] is that stretch.
core::arch::global_asm!(
    ".text",
    ".globl atoll_intr_syscall",
    ".hidden atoll_intr_syscall",
    ".type atoll_intr_syscall,@function",
    ".p2align 4",
    "atoll_intr_syscall:",
    "    mov rax, rdi",
    "    mov rdi, [rsi]",
    "    mov rdx, [rsi + 16]",
    "    mov r10, [rsi + 24]",
    "    mov r8, [rsi + 32]",
    "    mov r9, [rsi + 40]",
    "    mov rsi, [rsi + 8]",
    ".globl atoll_intr_syscall_insn",
    ".hidden atoll_intr_syscall_insn",
    "atoll_intr_syscall_insn:",
    "    syscall",
    ".globl atoll_intr_syscall_after",
    ".hidden atoll_intr_syscall_after",
    "atoll_intr_syscall_after:",
    "    ret",
    ".size atoll_intr_syscall, .-atoll_intr_syscall",
);

extern "C" {
    fn atoll_intr_syscall(nr: i64, args: *const [u64; 6]) -> i64;
    fn atoll_intr_syscall_insn();
    fn atoll_intr_syscall_after();
}

/// Issue `nr` so that a deferred program signal ends it with `-EINTR`,
/// also one that comes just before it sleeps.
///
/// # Safety
/// As the system call itself: pointer arguments must be valid for it.
pub unsafe fn host_syscall6(nr: i64, args: [u64; 6]) -> i64 {
    if pending() {
        return -(libc::EINTR as i64);
    }
    // SAFETY: the stub only loads the six words of `args` and issues the
    // call; the call's own safety is the caller's.
    unsafe { atoll_intr_syscall(nr, &args) }
}

/// As [`host_syscall6`], with a call that Linux restarts for `SA_RESTART`
/// handlers: `EINTR` caused by a deferred signal becomes `ERESTARTSYS`.
///
/// # Safety
/// As [`host_syscall6`].
pub unsafe fn restartable_host_syscall6(nr: i64, args: [u64; 6]) -> i64 {
    // SAFETY: the caller's contract.
    let r = unsafe { host_syscall6(nr, args) };
    if r == -(libc::EINTR as i64) && pending() {
        -(ERESTARTSYS as i64)
    } else {
        r
    }
}

/// `execve`/`execveat` as the last step of an exec atoll performs: a
/// program signal deferred while atoll prepared the exec, or arriving on
/// the way into the system call, would otherwise be lost with the old
/// image, where Linux runs its handler before the call (or, once the
/// call is under way, delivers it to the new image by its default
/// action). So such a signal makes the exec fail with
/// [`ERESTARTNOINTR`]: the caller lets go of what it prepared, the
/// handlers run at the boundary as program code, and the exec is issued
/// again. A signal that lands inside the system call stays the kernel's,
/// as on Linux.
///
/// # Safety
/// As the system call itself: pointer arguments must be valid for it.
pub unsafe fn exec_syscall6(nr: i64, args: [u64; 6]) -> i64 {
    // SAFETY: the caller's contract.
    let r = unsafe { host_syscall6(nr, args) };
    if r == -(libc::EINTR as i64) && pending() {
        -(ERESTARTNOINTR as i64)
    } else {
        r
    }
}

/// For the signal entry, right after it deferred a signal: where to move
/// an interrupted instruction pointer `rip` (with RAX = `-EINTR`), if it
/// lies on the way into an interruptible host call.
pub fn skip_interrupted_call(rip: usize) -> Option<usize> {
    let start = atoll_intr_syscall as *const () as usize;
    let insn = atoll_intr_syscall_insn as *const () as usize;
    let after = atoll_intr_syscall_after as *const () as usize;
    (start..=insn).contains(&rip).then_some(after)
}

/// Send `sig` to the calling thread, as the kernel does for the signals a
/// call raises in its caller (`SIGPIPE` with `EPIPE`, `SIGXFSZ` with
/// `EFBIG`): a raw `tgkill` of ourselves, delivered as the call returns.
pub fn raise_in_this_thread(sig: i32) {
    // SAFETY: integer arguments; signals this very thread.
    unsafe {
        let pid = crate::sys::sc(libc::SYS_getpid, 0, 0, 0, 0);
        let tid = crate::sys::sc(libc::SYS_gettid, 0, 0, 0, 0);
        crate::sys::sc(libc::SYS_tgkill, pid as u64, tid as u64, sig as u64, 0);
    }
}
