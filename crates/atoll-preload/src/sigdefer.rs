//! Asynchronous signals that arrive while atoll code runs: deferred to the
//! boundary back to program code, as a kernel defers them to the return
//! to user mode.
//!
//! The idea. Every handler the program installs is *virtualised*: the
//! kernel's disposition is [`on_program_signal`] (our entry, `SA_SIGINFO`,
//! the program's mask and flags, our restorer) and [`PROGRAM_ACTIONS`]
//! keeps the program's own action. When a signal comes, the entry reads the
//! thread's selector (see `selector`):
//!
//! * `BLOCK` — program code was interrupted: the program's handler runs at
//!   once, as program code (its system calls reach atoll);
//! * `ALLOW` — atoll code was interrupted (a wrapper, the SIGSYS handler,
//!   the client asleep on a pipe): running the handler there would bypass
//!   atoll (its `write` to an atoll pipe would hit the kernel placeholder)
//!   or re-enter the client at an arbitrary point. The signal is recorded
//!   as pending for this thread and the entry returns. Synchronous faults
//!   (SIGSEGV, SIGBUS, … raised by the faulting instruction) cannot wait
//!   and run at once, as before.
//!
//! Life cycle of a pending signal:
//!
//! ```text
//!  arrives in atoll code ─ entry: record (signal, siginfo, SA_RESTART)
//!     │  the interrupted host call or futex returns EINTR
//!     ├─ a wait that restarts (pipe read/write, FIFO open, host call that
//!     │  Linux restarts): all pending have SA_RESTART → delivered there
//!     │  (selector BLOCK for the moment), then the wait goes on
//!     ├─ a wait that does not (poll, select, epoll, no SA_RESTART):
//!     │  the call ends with EINTR
//!     └─ a wait for a server's reply: keeps waiting (request in flight)
//!  boundary: outermost AtollGuard drop (wrapper return, end of the SIGSYS
//!  handler) → deliver: re-queued with rt_tgsigqueueinfo (same siginfo)
//!  → the kernel delivers it into the entry, now BLOCK, as soon as the
//!  program's mask allows (at once, but for a call with a temporary mask,
//!  e.g. sigsuspend, then unblocked for the moment) → the program's
//!  handler runs as program code
//! ```
//!
//! The kernel never sees `SA_RESTART` or `SA_RESETHAND`: host calls made
//! by atoll code come back with EINTR and atoll restarts them itself after
//! delivery (otherwise a `SA_RESTART` handler would wait until, say, a
//! blocking `accept` returned), and the entry resets the action itself.
//! `SIG_DFL` and `SIG_IGN` go to the kernel unchanged, so after `execve`
//! the kernel's dispositions are the program's view (ignored stays
//! ignored) and a fork child inherits the table with its memory. glibc's
//! two internal signals and handlers atoll code installs with raw system
//! calls (the exec proxy) are not virtualised.
//!
//! Pending state is per thread, fixed-size, allocation-free: standard
//! signals coalesce as in the kernel; real-time signals queue up to
//! [`PENDING_SLOTS`] (more are dropped, with a debug line).
//!
//! Host calls made for the program: handlers deferred on the way to the
//! call run before it starts ([`deliver_before_host_call`]; what arrives in
//! the last instructions before the `syscall` still waits for the call to
//! return). A blocking `wait4` looks before it reaps ([`reaping_wait`]) so
//! that a handler deferred while it waited never costs the program a child.
//!
//! Departures from Linux: a handler run after deferral sees the entry's
//! `ucontext` (interrupted inside libatoll), not the program's registers;
//! with `SA_RESETHAND` a second arrival while the first is deferred is
//! coalesced instead of meeting `SIG_DFL`.

use core::cell::UnsafeCell;
use core::ffi::c_void;
use core::sync::atomic::{compiler_fence, AtomicU32, Ordering};

use crate::raw;
use crate::selector::{self, BLOCK};
use crate::sigfix::{self, KSigaction, VirtualAction, KSIGSET_SIZE};
use crate::sigsys;

/// The program's action for each signal (index = signal number) whose
/// kernel disposition is the entry. Meaningless for the others: their
/// kernel disposition is the program's.
static PROGRAM_ACTIONS: [VirtualAction; 65] = [const { VirtualAction::new() }; 65];

/// Real-time signals queued per thread at most (standard ones coalesce).
pub const PENDING_SLOTS: usize = 16;

/// Bytes of a `siginfo_t`.
const SIGINFO_WORDS: usize = 16;
const _: () = assert!(core::mem::size_of::<libc::siginfo_t>() == SIGINFO_WORDS * 8);

/// First real-time signal of the kernel (glibc's SIGRTMIN is higher).
const KERNEL_SIGRTMIN: i32 = 32;

/// One signal taken while atoll code ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deferred {
    pub sig: i32,
    /// The program's action had `SA_RESTART` when it arrived.
    pub restart: bool,
    /// The kernel's `siginfo_t`, as words.
    pub info: [u64; SIGINFO_WORDS],
}

impl Deferred {
    const EMPTY: Deferred = Deferred {
        sig: 0,
        restart: false,
        info: [0; SIGINFO_WORDS],
    };
}

/// Signals pending for one thread, in arrival order.
pub struct PendingSet {
    len: usize,
    slots: [Deferred; PENDING_SLOTS],
}

impl PendingSet {
    pub const fn new() -> PendingSet {
        PendingSet {
            len: 0,
            slots: [Deferred::EMPTY; PENDING_SLOTS],
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Record `d`. `false` when it was merged: a standard signal already
    /// pending (the kernel keeps one, with the first siginfo), or no room.
    pub fn push(&mut self, d: Deferred) -> bool {
        let pending = &self.slots[..self.len];
        if d.sig < KERNEL_SIGRTMIN && pending.iter().any(|p| p.sig == d.sig) {
            return false;
        }
        if self.len == PENDING_SLOTS {
            return false;
        }
        self.slots[self.len] = d;
        self.len += 1;
        true
    }

    /// May an interrupted call restart: something is pending and every
    /// pending action asked for `SA_RESTART`.
    pub fn all_restart(&self) -> bool {
        self.slots[..self.len].iter().all(|d| d.restart)
    }

    /// Empty the set, returning what it held.
    pub fn take(&mut self) -> ([Deferred; PENDING_SLOTS], usize) {
        let n = core::mem::replace(&mut self.len, 0);
        (self.slots, n)
    }
}

impl Default for PendingSet {
    fn default() -> Self {
        Self::new()
    }
}

/// This thread's pending signals. `count` mirrors `set.len()` for the one
/// load on the hot path; `set` is touched only with every signal blocked
/// (or from the entry, which blocks them first), so never concurrently.
struct ThreadPending {
    count: AtomicU32,
    set: UnsafeCell<PendingSet>,
}

thread_local! {
    // Const-initialised, no Drop: a plain fs-relative access, usable from
    // a signal handler (as the selector).
    static PENDING: ThreadPending = const {
        ThreadPending {
            count: AtomicU32::new(0),
            set: UnsafeCell::new(PendingSet::new()),
        }
    };
}

/// Run `f` on this thread's pending set. Caller has every signal blocked.
fn with_pending<R>(f: impl FnOnce(&mut PendingSet) -> R) -> R {
    PENDING.with(|p| {
        // SAFETY: signals are blocked (caller), so the entry cannot run on
        // this thread meanwhile, and no other thread sees this TLS slot.
        let set = unsafe { &mut *p.set.get() };
        let r = f(set);
        p.count.store(set.len() as u32, Ordering::Relaxed);
        r
    })
}

/// Does this thread hold deferred signals? Hot path (every outermost
/// guard drop): one thread-local load.
#[inline]
pub fn any_pending() -> bool {
    PENDING.with(|p| p.count.load(Ordering::Relaxed) != 0)
}

/// A fork child starts with no pending signals (Linux clears them).
pub fn forget_pending() {
    let _all = BlockAll::new();
    with_pending(|s| {
        s.take();
    });
}

/// Every signal but SIGSYS blocked until dropped (raw system calls).
struct BlockAll {
    old: u64,
}

impl BlockAll {
    fn new() -> BlockAll {
        let all = sigfix::strip_sigsys(u64::MAX);
        let mut old = 0u64;
        raw::syscall(
            libc::SYS_rt_sigprocmask,
            &[
                libc::SIG_BLOCK as u64,
                &all as *const u64 as u64,
                &mut old as *mut u64 as u64,
                KSIGSET_SIZE,
            ],
        );
        BlockAll { old }
    }
}

impl Drop for BlockAll {
    fn drop(&mut self) {
        set_mask(self.old);
    }
}

fn set_mask(mask: u64) {
    raw::syscall(
        libc::SYS_rt_sigprocmask,
        &[
            libc::SIG_SETMASK as u64,
            &mask as *const u64 as u64,
            0,
            KSIGSET_SIZE,
        ],
    );
}

/// Is the signal with this `si_code` raised by the instruction the thread
/// was executing? Such a fault cannot be deferred: returning would run
/// the instruction again.
pub fn is_synchronous_fault(sig: i32, si_code: i32) -> bool {
    matches!(
        sig,
        libc::SIGSEGV | libc::SIGBUS | libc::SIGFPE | libc::SIGILL | libc::SIGTRAP
    ) && si_code > 0
}

/// Does Linux restart system call `nr` after an `SA_RESTART` handler
/// (signal(7), "Interruption of system calls and library functions by
/// signal handlers")? Calls that always fail with EINTR (poll, select,
/// epoll, sleeps, sigsuspend, semop, …) are not listed. Socket calls are
/// listed although Linux does not restart them on a socket with a
/// timeout, which atoll cannot see.
#[allow(non_upper_case_globals)]
pub fn restarts_with_sa_restart(nr: i64, args: &[u64; 6]) -> bool {
    use libc::*;
    match nr {
        SYS_read | SYS_readv | SYS_write | SYS_writev | SYS_pread64 | SYS_pwrite64 | SYS_preadv
        | SYS_pwritev | SYS_preadv2 | SYS_pwritev2 | SYS_ioctl | SYS_open | SYS_openat
        | SYS_openat2 | SYS_creat | SYS_wait4 | SYS_waitid | SYS_accept | SYS_accept4
        | SYS_connect | SYS_recvfrom | SYS_recvmsg | SYS_sendto | SYS_sendmsg | SYS_sendmmsg
        | SYS_flock | SYS_getrandom | SYS_sendfile | SYS_splice | SYS_tee => true,
        SYS_fcntl => matches!(args[1] as i32, F_SETLKW | F_OFD_SETLKW),
        _ => false,
    }
}

/// The action the kernel gets for a program's handler: our entry, the
/// program's mask (minus SIGSYS) and flags, but no `SA_RESTART` (atoll
/// restarts after delivery) and no `SA_RESETHAND` (the entry resets).
pub fn entry_action(program: KSigaction, entry: usize, restorer: usize) -> KSigaction {
    let dropped = (libc::SA_RESTART | libc::SA_RESETHAND) as u64;
    KSigaction {
        handler: entry,
        flags: (program.flags & !dropped) | libc::SA_SIGINFO as u64 | sigfix::SA_RESTORER,
        restorer,
        mask: sigfix::strip_sigsys(program.mask),
    }
}

/// Is the action a function (not `SIG_DFL`/`SIG_IGN`)?
fn is_handler(a: &KSigaction) -> bool {
    a.handler != libc::SIG_DFL && a.handler != libc::SIG_IGN
}

/// Signals whose handlers stay as installed: SIGSYS (see `sigfix`),
/// SIGKILL/SIGSTOP (the kernel refuses), glibc's cancellation and setxid
/// signals (its own handlers, which must run where they land).
fn virtualised(sig: i32) -> bool {
    (1..=64).contains(&sig)
        && !matches!(sig, libc::SIGSYS | libc::SIGKILL | libc::SIGSTOP)
        && sig != KERNEL_SIGRTMIN
        && sig != KERNEL_SIGRTMIN + 1
}

fn entry_address() -> usize {
    on_program_signal as *const () as usize
}

fn kernel_sigaction(sig: i32, act: Option<&KSigaction>, old: Option<&mut KSigaction>) -> i64 {
    raw::syscall(
        libc::SYS_rt_sigaction,
        &[
            sig as u64,
            act.map_or(0, |a| a as *const KSigaction as u64),
            old.map_or(0, |o| o as *mut KSigaction as u64),
            KSIGSET_SIZE,
        ],
    )
}

/// A trapped `rt_sigaction` for a signal other than SIGSYS (`act`, `oact`
/// are the program's pointers, or null). Returns the raw result.
pub fn program_sigaction(sig: i32, act: *const KSigaction, oact: *mut KSigaction) -> i64 {
    if !virtualised(sig) {
        // SAFETY: the program asked the kernel to read a sigaction here.
        let fixed = (!act.is_null())
            .then(|| sigfix::fix_action(unsafe { act.read_unaligned() }, sigsys::restorer()));
        let mut old = KSigaction::default();
        let r = kernel_sigaction(sig, fixed.as_ref(), (!oact.is_null()).then_some(&mut old));
        if r == 0 && !oact.is_null() {
            // SAFETY: the program asked the kernel to write a sigaction here.
            unsafe { oact.write_unaligned(old) };
        }
        return r;
    }
    let mut current = KSigaction::default();
    let r = kernel_sigaction(sig, None, Some(&mut current));
    if r < 0 {
        return r;
    }
    let slot = &PROGRAM_ACTIONS[sig as usize];
    let old = if current.handler == entry_address() {
        slot.get()
    } else {
        current
    };
    if !act.is_null() {
        // SAFETY: the program asked the kernel to read a sigaction here.
        let new = unsafe { act.read_unaligned() };
        let kernel = if is_handler(&new) {
            // Table first: a signal arriving in between finds it ready.
            slot.set(new);
            entry_action(new, entry_address(), sigsys::restorer())
        } else {
            sigfix::fix_action(new, sigsys::restorer())
        };
        let r = kernel_sigaction(sig, Some(&kernel), None);
        if r < 0 {
            return r;
        }
    }
    if !oact.is_null() {
        // SAFETY: the program asked the kernel to write a sigaction here.
        unsafe { oact.write_unaligned(old) };
    }
    0
}

/// The kernel's disposition for every virtualised handler.
///
/// # Safety
/// Only the kernel calls this, with a valid `siginfo_t` and `ucontext_t`.
unsafe extern "C" fn on_program_signal(
    sig: libc::c_int,
    info: *mut libc::siginfo_t,
    uc: *mut c_void,
) {
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let code = unsafe { (*info).si_code };
    if selector::get() == BLOCK || is_synchronous_fault(sig, code) {
        // SAFETY: the kernel's own arguments.
        unsafe { run_program_handler(sig, info, uc) };
        return;
    }
    // Atoll code was interrupted. Nothing may interrupt the recording;
    // sigreturn restores the mask.
    core::mem::forget(BlockAll::new());
    let action = PROGRAM_ACTIONS[sig as usize].get();
    let mut d = Deferred {
        sig,
        restart: action.flags & libc::SA_RESTART as u64 != 0,
        info: [0; SIGINFO_WORDS],
    };
    // SAFETY: `info` points to a whole siginfo_t (128 bytes), `d.info` is
    // as large; distinct memory.
    unsafe {
        core::ptr::copy_nonoverlapping(info as *const u64, d.info.as_mut_ptr(), SIGINFO_WORDS)
    };
    if !with_pending(|s| s.push(d)) {
        sigsys::debug(&[b"deferred signal merged"], &[sig as i64]);
    }
}

/// Call the program's handler for `sig` as the kernel would have.
///
/// # Safety
/// Arguments as received by the entry.
unsafe fn run_program_handler(sig: i32, info: *mut libc::siginfo_t, uc: *mut c_void) {
    let slot = &PROGRAM_ACTIONS[sig as usize];
    let action = slot.get();
    match action.handler {
        libc::SIG_IGN => {}
        libc::SIG_DFL => {
            // The program reset the action while the signal was on its
            // way: take the default action for real (after sigreturn).
            kernel_sigaction(sig, Some(&KSigaction::default()), None);
            let pid = raw::syscall(libc::SYS_getpid, &[]);
            let tid = raw::syscall(libc::SYS_gettid, &[]);
            raw::syscall(libc::SYS_tgkill, &[pid as u64, tid as u64, sig as u64]);
        }
        h => {
            if action.flags & libc::SA_RESETHAND as u64 != 0 {
                slot.set(KSigaction::default());
                kernel_sigaction(sig, Some(&KSigaction::default()), None);
            }
            compiler_fence(Ordering::SeqCst);
            if action.flags & libc::SA_SIGINFO as u64 != 0 {
                // SAFETY: the program installed `h` as an SA_SIGINFO handler.
                let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut c_void) =
                    unsafe { core::mem::transmute(h) };
                f(sig, info, uc);
            } else {
                // SAFETY: the program installed `h` as a plain handler.
                let f: extern "C" fn(libc::c_int) = unsafe { core::mem::transmute(h) };
                f(sig);
            }
        }
    }
}

/// Deliver this thread's pending signals now. The selector must say
/// `BLOCK` (the handlers run as program code). Each is re-queued to this
/// thread with its siginfo while every signal is blocked; the mask then
/// comes back and the kernel delivers, as this call returns, every one the
/// program's mask lets through. One that the program blocked meanwhile
/// stays pending in the kernel until it unblocks it, as Linux would have
/// it, unless `unblock`: the interrupted call ran with a temporary mask
/// (sigsuspend, ppoll, pselect6, epoll_pwait) under which Linux would
/// have delivered it, so it is unblocked for the moment.
#[cold]
pub fn deliver_pending(unblock: bool) {
    let all = BlockAll::new();
    let (taken, n) = with_pending(|s| s.take());
    if n == 0 {
        return;
    }
    let pid = raw::syscall(libc::SYS_getpid, &[]) as u64;
    let tid = raw::syscall(libc::SYS_gettid, &[]) as u64;
    let mut bits = 0u64;
    for d in &taken[..n] {
        let r = raw::syscall(
            libc::SYS_rt_tgsigqueueinfo,
            &[pid, tid, d.sig as u64, d.info.as_ptr() as u64],
        );
        if r < 0 {
            // Queue full (RLIMIT_SIGPENDING): the signal without its info.
            raw::syscall(libc::SYS_tgkill, &[pid, tid, d.sig as u64]);
        }
        bits |= sigfix::bit(d.sig);
    }
    if unblock {
        // Delivered on the return of this call, one after the other.
        set_mask(all.old & !bits);
    }
    drop(all);
}

/// Does system call `nr` wait under a mask of its own, restored by the
/// kernel before the handlers of what it let through run?
pub fn waits_with_temporary_mask(nr: i64) -> bool {
    matches!(
        nr,
        libc::SYS_rt_sigsuspend
            | libc::SYS_ppoll
            | libc::SYS_pselect6
            | libc::SYS_epoll_pwait
            | libc::SYS_epoll_pwait2
    )
}

/// Deliver pending signals from inside atoll code, at a point that holds
/// no lock and no client state another call could need.
fn deliver_here() {
    let prev = selector::get();
    selector::set(BLOCK);
    deliver_pending(false);
    selector::set(prev);
}

/// What a blocking wait inside atoll does after EINTR.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AfterInterrupt {
    /// No program handler is pending (atoll's own handler ran): go on as
    /// if nothing happened.
    Resume,
    /// Pending handlers ran here; the call restarts (`SA_RESTART`).
    Restarted,
    /// The call ends with EINTR; handlers run at the boundary.
    Interrupted,
}

/// A blocking wait was interrupted; `restartable`: Linux restarts this
/// call for `SA_RESTART` handlers (pipe read/write, FIFO open, …).
pub fn wait_interrupted(restartable: bool) -> AfterInterrupt {
    let (n, all_restart) = {
        let _all = BlockAll::new();
        with_pending(|s| (s.len(), s.all_restart()))
    };
    if n == 0 {
        AfterInterrupt::Resume
    } else if restartable && all_restart {
        deliver_here();
        AfterInterrupt::Restarted
    } else {
        AfterInterrupt::Interrupted
    }
}

/// A host system call made by atoll code for the program failed with
/// EINTR: should it be issued again? Yes (after running the pending
/// handlers here) when Linux would have restarted it; otherwise the
/// program sees EINTR and the handlers run at the boundary.
pub fn restart_host_call(nr: i64, args: &[u64; 6]) -> bool {
    wait_interrupted(restarts_with_sa_restart(nr, args)) == AfterInterrupt::Restarted
}

/// Before a host call made for the program: run the handlers deferred
/// on the way here (the trap path's own work), as Linux would have run
/// them before the call. Otherwise a call that sleeps (`pause`, a
/// blocking `read`) would sleep with a handler still owed, perhaps
/// forever. Cold unless something is pending.
#[inline]
pub fn deliver_before_host_call() {
    if any_pending() {
        deliver_here();
    }
}

/// A blocking `wait4` for the program, done so that a handler deferred
/// while it waited never costs the program a child: `None` for calls
/// that are issued as they are (`WNOHANG`, other calls).
///
/// Why: a signal that interrupts a sleeping `wait4` on Linux makes it fail
/// with EINTR unless a child's change of state won the race; the handler
/// then runs, and shells leave it with `longjmp` (bash's `wait` builtin
/// under `trap`). Here the signal comes through our entry, and when the
/// child also ended before the waiter ran again, `wait4` reaps it and the
/// deferred handler, run after, throws the status away: bash then waits
/// forever for a job it already reaped. So the wait first looks without
/// reaping (`waitid` with `WNOWAIT`), answers EINTR if a handler is owed
/// by then — the child stays a zombie for the next wait — and only then
/// reaps that child with `WNOHANG`.
pub fn reaping_wait(nr: i64, args: &[u64; 6]) -> Option<i64> {
    const P_ALL: u64 = 0;
    const P_PID: u64 = 1;
    const P_PGID: u64 = 2;
    let options = args[2] as i32;
    if nr != libc::SYS_wait4 || options & libc::WNOHANG != 0 {
        return None;
    }
    let pid = args[0] as i32;
    let (idtype, id) = match pid {
        -1 => (P_ALL, 0),
        0 => (P_PGID, 0), // the caller's group (Linux ≥ 5.4)
        p if p < -1 => (P_PGID, (-(p as i64)) as u64),
        p => (P_PID, p as u64),
    };
    let mut look = libc::WEXITED
        | libc::WNOWAIT
        | (options & (libc::__WALL | libc::__WCLONE | libc::__WNOTHREAD));
    if options & libc::WUNTRACED != 0 {
        look |= libc::WSTOPPED;
    }
    if options & libc::WCONTINUED != 0 {
        look |= libc::WCONTINUED;
    }
    loop {
        let mut info = [0u64; SIGINFO_WORDS];
        let r = raw::syscall(
            libc::SYS_waitid,
            &[idtype, id, info.as_mut_ptr() as u64, look as u64, 0],
        );
        if r < 0 {
            return Some(r);
        }
        if any_pending() {
            return Some(-(libc::EINTR as i64));
        }
        // si_pid: the int after si_signo, si_errno, si_code and padding.
        let child = info[2] & 0xffff_ffff;
        let reaped = raw::syscall(
            libc::SYS_wait4,
            &[child, args[1], (options | libc::WNOHANG) as u64, args[3]],
        );
        if reaped != 0 {
            return Some(reaped);
        }
        // Another thread took it meanwhile: wait again.
    }
}

/// The client's hook for its own waits (pipes, FIFO opens, readiness):
/// `true` when the wait goes on.
pub fn client_wait_hook(restartable: bool) -> bool {
    wait_interrupted(restartable) != AfterInterrupt::Interrupted
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(sig: i32, restart: bool) -> Deferred {
        let mut info = [0u64; SIGINFO_WORDS];
        info[0] = sig as u64;
        Deferred { sig, restart, info }
    }

    #[test]
    fn standard_signals_coalesce_keeping_the_first_siginfo() {
        let mut s = PendingSet::new();
        assert!(s.push(d(libc::SIGALRM, true)));
        let mut again = d(libc::SIGALRM, false);
        again.info[1] = 99;
        assert!(!s.push(again));
        assert!(s.push(d(libc::SIGCHLD, true)));
        assert_eq!(s.len(), 2);
        let (t, n) = s.take();
        assert_eq!(n, 2);
        assert_eq!(t[0], d(libc::SIGALRM, true));
        assert_eq!(t[1].sig, libc::SIGCHLD);
        assert_eq!(s.len(), 0);
    }

    #[test]
    fn realtime_signals_queue_up_to_the_slots() {
        let mut s = PendingSet::new();
        for _ in 0..PENDING_SLOTS {
            assert!(s.push(d(40, true)));
        }
        assert!(!s.push(d(40, true)));
        assert_eq!(s.len(), PENDING_SLOTS);
    }

    #[test]
    fn restart_needs_every_pending_action_to_ask_for_it() {
        let mut s = PendingSet::new();
        assert!(s.push(d(libc::SIGCHLD, true)));
        assert!(s.all_restart());
        assert!(s.push(d(libc::SIGALRM, false)));
        assert!(!s.all_restart());
    }

    #[test]
    fn the_kernel_never_sees_restart_or_resethand() {
        let program = KSigaction {
            handler: 0x1234,
            flags: (libc::SA_RESTART | libc::SA_RESETHAND | libc::SA_NODEFER | libc::SA_ONSTACK)
                as u64,
            restorer: 0x9999,
            mask: sigfix::bit(libc::SIGSYS) | sigfix::bit(libc::SIGINT),
        };
        let k = entry_action(program, 0x4000, 0x5000);
        assert_eq!(k.handler, 0x4000);
        assert_eq!(k.restorer, 0x5000);
        assert_eq!(k.mask, sigfix::bit(libc::SIGINT));
        assert_eq!(k.flags & (libc::SA_RESTART | libc::SA_RESETHAND) as u64, 0);
        let kept = (libc::SA_NODEFER | libc::SA_ONSTACK | libc::SA_SIGINFO) as u64;
        assert_eq!(k.flags & kept, kept);
        assert_ne!(k.flags & sigfix::SA_RESTORER, 0);
    }

    #[test]
    fn faults_from_the_instruction_are_synchronous_and_kill_is_not() {
        assert!(is_synchronous_fault(libc::SIGSEGV, 1));
        assert!(is_synchronous_fault(libc::SIGFPE, 1));
        assert!(!is_synchronous_fault(libc::SIGSEGV, libc::SI_USER));
        assert!(!is_synchronous_fault(libc::SIGSEGV, libc::SI_TKILL));
        assert!(!is_synchronous_fault(libc::SIGALRM, 0x80));
    }

    #[test]
    fn only_calls_linux_restarts_are_restarted() {
        let z = [0u64; 6];
        assert!(restarts_with_sa_restart(libc::SYS_read, &z));
        assert!(restarts_with_sa_restart(libc::SYS_wait4, &z));
        for nr in [
            libc::SYS_poll,
            libc::SYS_select,
            libc::SYS_epoll_wait,
            libc::SYS_nanosleep,
            libc::SYS_rt_sigsuspend,
            libc::SYS_pause,
        ] {
            assert!(!restarts_with_sa_restart(nr, &z), "{nr}");
        }
        let mut lk = z;
        lk[1] = libc::F_SETLKW as u64;
        assert!(restarts_with_sa_restart(libc::SYS_fcntl, &lk));
        lk[1] = libc::F_SETLK as u64;
        assert!(!restarts_with_sa_restart(libc::SYS_fcntl, &lk));
    }

    #[test]
    fn glibc_internal_and_unblockable_signals_stay_with_the_kernel() {
        for sig in [libc::SIGSYS, libc::SIGKILL, libc::SIGSTOP, 32, 33, 0, 65] {
            assert!(!virtualised(sig), "{sig}");
        }
        for sig in [libc::SIGINT, libc::SIGALRM, libc::SIGCHLD, 34, 64] {
            assert!(virtualised(sig), "{sig}");
        }
    }
}
