//! Program signals that arrive while atoll code runs: the kernel's
//! `-ERESTARTSYS` model.
//!
//! A handler must run as program code (selector `BLOCK`, so its own system
//! calls reach atoll) and never nested inside an atoll call that holds a
//! lane, a descriptor reference, a ring sleeper count or a lock: a handler
//! that leaves with `longjmp` (bash does, from `wait`) would leave them
//! held for good. So every handler the program installs is *virtualised*:
//! the kernel's disposition is [`on_program_signal`] (our entry, with the
//! program's mask and flags, `SA_SIGINFO`, our restorer) and
//! [`PROGRAM_ACTIONS`] keeps the program's own action. The entry looks at
//! what the signal interrupted:
//!
//! * program code (selector `BLOCK`), or a synchronous fault: the program's
//!   handler runs at once, with the kernel's siginfo and ucontext;
//! * a host system call that atoll issues for the program and that holds
//!   nothing of atoll (a *host call*, see [`host_call`]: the wrappers' real
//!   functions, the SIGSYS net's pass-through): the handler runs at once as
//!   program code, exactly as Linux runs it in the middle of that call; the
//!   kernel restarts the call or makes it fail with `EINTR` by the
//!   program's own `SA_RESTART`, which it sees;
//! * any other atoll code: the signal is recorded for this thread
//!   (deferred) and the entry returns.
//!
//! Life cycle of a deferred signal:
//!
//! ```text
//!  arrives in atoll code ─ entry: record (signal, siginfo, SA_RESTART);
//!     │  move the futex word a wait is about to sleep on, and a thread on
//!     │  its way into an interruptible host call past it (`intr`)
//!     │  an atoll wait it cut short (futex, host poll: EINTR) sees
//!     │  `intr::pending` and unwinds, releasing what it held:
//!     │  ERESTARTSYS (pipe/FIFO read, write, open; F_SETLKW, flock;
//!     │  socket calls) or EINTR (poll, select, epoll_wait)
//!  boundary, in the program's frame (`FrameMode`):
//!     a trapped call's SIGSYS handler (`deliver_into_frame`), a wrapper's
//!     return (`retframe`), a rewritten site's own `syscall` after the
//!     entry served the call (`rewrite::site_end`): re-queued with rt_tgsigqueueinfo (same
//!     siginfo), blocked until a sigreturn installs the program's
//!     registers and mask; the kernel then delivers them into the entry,
//!     now `BLOCK`, in frames built from the program's registers
//!  boundary, in atoll's frame (the end of `client::dispatch`, the start
//!  of a host call, the outermost guard's drop; restarts through a
//!  wrapper, temporary masks):
//!     re-queued the same way while every signal is blocked, then the
//!     program's mask (or the call's temporary one) back: delivered into
//!     the entry, and the handlers run as program code
//!  ERESTARTSYS: issued again when every delivered action had SA_RESTART,
//!     else EINTR (man 7 signal); ERESTARTNOINTR (an exec atoll performs,
//!     `intr::exec_syscall6`): issued again whatever the handlers asked
//! ```
//!
//! A signal that arrives during short non-blocking atoll work is simply
//! delivered at the boundary, after the call's own effect. Signals the
//! program blocks are never delivered early: re-queued, they wait in the
//! kernel until the program unblocks them, except after `ppoll`,
//! `pselect6` and `epoll_pwait(2)`, whose temporary mask is in force while
//! they are delivered (as Linux runs the handler before restoring the mask).
//!
//! The kernel never sees `SA_RESETHAND`: the entry resets the action when
//! the handler actually runs (a second arrival while the first is deferred
//! is coalesced instead of meeting `SIG_DFL`). `SIG_DFL` and `SIG_IGN` go
//! to the kernel unchanged, so after `execve` the kernel's dispositions are
//! the program's view, and a fork child inherits the table with its memory.
//! glibc's two internal signals and handlers that atoll code installs with
//! raw system calls are not virtualised.
//!
//! Pending state is per thread, fixed-size, allocation-free: standard
//! signals coalesce as in the kernel; real-time signals queue up to
//! [`PENDING_SLOTS`]; once the slots are full, the entry blocks every
//! asynchronous signal in the atoll code it returns to, so further ones
//! wait in the kernel's own queue (none is lost) until the delivery puts
//! that code's mask back (`PendingSet::held_mask`). Departures from Linux:
//! those waiting in the kernel are delivered before the deferred ones (a
//! flood of one real-time signal keeps its order for the first
//! [`PENDING_SLOTS`] only); a handler delivered at a
//! wrapper's return sees the frame there, not inside libc's function; one
//! delivered in atoll's frame, or run in a host call of the SIGSYS net,
//! sees a ucontext inside libatoll (docs/COMPATIBILITY.md "Signals").

use core::cell::UnsafeCell;
use core::ffi::c_void;
use core::sync::atomic::{compiler_fence, AtomicBool, AtomicU32, AtomicU8, Ordering};

use crate::raw;
use crate::selector::{self, ALLOW, BLOCK};
use crate::sigfix::{self, KSigaction, VirtualAction, KSIGSET_SIZE};
use crate::sigsys;

mod frame;
pub use frame::*;

/// The program's action for each signal (index = signal number) whose
/// kernel disposition is the entry. Meaningless for the others: their
/// kernel disposition is the program's.
static PROGRAM_ACTIONS: [VirtualAction; 65] = [const { VirtualAction::new() }; 65];

/// Real-time signals queued per thread at most (standard ones coalesce).
pub const PENDING_SLOTS: usize = 16;

/// Words of a `siginfo_t`.
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
    /// Once the slots are full, the entry blocks further asynchronous
    /// signals in the atoll code it returns to, so the kernel keeps them
    /// queued instead of handing over one that has no room: the mask that
    /// code had, which the delivery puts back.
    held_mask: Option<u64>,
}

impl PendingSet {
    pub const fn new() -> PendingSet {
        PendingSet {
            len: 0,
            slots: [Deferred::EMPTY; PENDING_SLOTS],
            held_mask: None,
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

    pub fn as_slice(&self) -> &[Deferred] {
        &self.slots[..self.len]
    }

    pub fn is_full(&self) -> bool {
        self.len == PENDING_SLOTS
    }

    /// The mask the interrupted atoll code had before the entry held
    /// further signals back, if it did.
    pub fn held_mask(&self) -> Option<u64> {
        self.held_mask
    }

    /// Empty the set, returning what it held.
    pub fn take(&mut self) -> ([Deferred; PENDING_SLOTS], usize) {
        self.held_mask = None;
        let n = core::mem::replace(&mut self.len, 0);
        (self.slots, n)
    }
}

impl Default for PendingSet {
    fn default() -> Self {
        Self::new()
    }
}

/// May a call that ended with `ERESTARTSYS` be issued again after these
/// handlers ran? Only if every one asked for `SA_RESTART` (Linux decides
/// per handler; with several, the first that refuses wins).
pub fn all_restart(delivered: &[Deferred]) -> bool {
    delivered.iter().all(|d| d.restart)
}

/// This thread's deferred signals. `count` mirrors `set.len()` for the one
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
    /// A host call is in progress on this thread (see [`host_call`]).
    static IN_HOST_CALL: AtomicBool = const { AtomicBool::new(false) };
    /// Who delivers this thread's deferred signals into the program's own
    /// frame for the call in progress, as a [`FrameMode`] (see
    /// [`FrameDelivery`]).
    static FRAME_DELIVERY: AtomicU8 = const { AtomicU8::new(FrameMode::None as u8) };
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
/// guard drop, every atoll wait): one thread-local load.
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

/// Issue `f`, a system call that atoll leaves to Linux on the program's
/// behalf, as a *host call*: atoll holds nothing of its own meanwhile, so
/// a program handler that interrupts it runs right there as program code,
/// and the kernel restarts the call or not, as for any program. Only the
/// outermost atoll code of a thread (a wrapper's real function, the SIGSYS
/// net's pass-through) may use this.
#[inline]
pub fn host_call<R>(f: impl FnOnce() -> R) -> R {
    /// Lowers the flag also when a cancelled thread unwinds through the
    /// call (a handler's longjmp finds it lowered by the entry already).
    struct Window;
    impl Drop for Window {
        fn drop(&mut self) {
            compiler_fence(Ordering::SeqCst);
            set_in_host_call(false);
        }
    }
    set_in_host_call(true);
    let _window = Window;
    compiler_fence(Ordering::SeqCst);
    // A signal deferred before the flag was up would otherwise wait for
    // the end of a call that may block (wait4, a terminal read).
    if any_pending() {
        deliver_pending(None);
    }
    f()
}

fn in_host_call() -> bool {
    IN_HOST_CALL.with(|h| h.load(Ordering::Relaxed))
}

fn set_in_host_call(v: bool) {
    IN_HOST_CALL.with(|h| h.store(v, Ordering::Relaxed));
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
    let m = sigfix::strip_sigsys(mask);
    raw::syscall(
        libc::SYS_rt_sigprocmask,
        &[
            libc::SIG_SETMASK as u64,
            &m as *const u64 as u64,
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

/// The action the kernel gets for a program's handler: our entry, the
/// program's flags but `SA_RESETHAND` (the entry resets when the handler
/// runs), and every signal but SIGSYS blocked: the entry sets the
/// handler's own mask ([`handler_mask`]) once it knows where the handler
/// runs (`altstack`); a second signal delivered on top of the first, in
/// the same return to user mode, would not know that a handler already
/// ran on the program's alternate stack. `SA_RESTART` stays: host calls
/// interrupted by a handler restart in the kernel as for any program.
pub fn entry_action(program: KSigaction, entry: usize, restorer: usize) -> KSigaction {
    KSigaction {
        handler: entry,
        flags: (program.flags & !(libc::SA_RESETHAND as u64))
            | libc::SA_SIGINFO as u64
            | sigfix::SA_RESTORER,
        restorer,
        mask: sigfix::strip_sigsys(u64::MAX),
    }
}

/// The mask a program handler runs with, as the kernel would have set it:
/// the interrupted mask (`uc_sigmask`), the action's mask, and the signal
/// itself unless `SA_NODEFER`; never SIGSYS.
pub fn handler_mask(interrupted: u64, action: &KSigaction, sig: i32) -> u64 {
    let own = if action.flags & libc::SA_NODEFER as u64 != 0 {
        0
    } else {
        sigfix::bit(sig)
    };
    sigfix::strip_sigsys(interrupted | action.mask | own)
}

/// The mask a signal frame restores (the first word of `uc_sigmask`).
///
/// # Safety
/// `uc` is null or the kernel's ucontext of a signal being handled.
pub unsafe fn frame_mask(uc: *const libc::ucontext_t) -> u64 {
    if uc.is_null() {
        return 0;
    }
    // SAFETY: the caller's ucontext; the kernel's 64-signal mask is the
    // first word of `uc_sigmask`.
    unsafe { *(&(*uc).uc_sigmask as *const libc::sigset_t).cast::<u64>() }
}

/// Block every signal but SIGSYS until the sigreturn of the signal being
/// handled, which installs the mask its frame saved.
pub fn block_until_sigreturn() {
    core::mem::forget(BlockAll::new());
}

/// Set this thread's mask (SIGSYS always stays deliverable).
pub fn set_thread_mask(mask: u64) {
    set_mask(mask);
}

/// Block every signal but SIGSYS (raw system call); the mask before.
/// For a way back to the program that ends in a trap whose sigreturn
/// installs the mask (`rewrite::site_end`).
pub fn block_all_but_sigsys() -> u64 {
    let all = BlockAll::new();
    let old = all.old;
    core::mem::forget(all);
    old
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

/// Signals whose kernel disposition is always the entry, whatever the
/// program's: a `SIGBUS` may be a page of an atoll mapping that the file
/// has grown to cover since, which atoll maps before the program sees a
/// fault (client `pastend`).
fn always_entry(sig: i32) -> bool {
    sig == libc::SIGBUS
}

/// Take the kernel's `SIGBUS` disposition (at start, in client mode): the
/// one inherited becomes the program's view (`SIG_IGN` survives `execve`
/// on Linux; a handler cannot).
///
/// One `rt_sigaction` that installs the entry and reads the old action:
/// `execve` leaves no flags on an action (Linux clears them, `SIG_IGN`'s
/// too), so the entry made from the default is the one the inherited
/// action would give; should the flags differ after all, it is set again.
pub fn claim_faults() {
    let sig = libc::SIGBUS;
    let (entry, restorer) = (entry_address(), sigsys::restorer());
    let assumed = entry_action(KSigaction::default(), entry, restorer);
    let mut current = KSigaction::default();
    if kernel_sigaction(sig, Some(&assumed), Some(&mut current)) < 0 {
        return;
    }
    let program = if current.handler == libc::SIG_IGN {
        current
    } else {
        KSigaction::default()
    };
    PROGRAM_ACTIONS[sig as usize].set(program);
    let kernel = entry_action(program, entry, restorer);
    if kernel.flags != assumed.flags {
        kernel_sigaction(sig, Some(&kernel), None);
    }
}

/// A synchronous `SIGBUS` that atoll may resolve (see [`always_entry`]).
/// Returns true when the access may simply run again.
///
/// # Safety
/// `info` is the kernel's siginfo of this signal.
unsafe fn resolve_fault(info: *mut libc::siginfo_t) -> bool {
    // SAFETY: the caller's siginfo; `si_addr` is the fault address.
    let (code, addr) = unsafe { ((*info).si_code, (*info).si_addr() as u64) };
    // Only a fault in program code: atoll code holds lanes and locks, and
    // reaches program memory only after checking it with the kernel.
    if code == libc::BUS_ADRERR && selector::get() == BLOCK {
        let _atoll = selector::AtollGuard::enter();
        if crate::client::resolve_fault(addr) {
            return true;
        }
    }
    // A fault is never ignored: Linux takes the default action then.
    if PROGRAM_ACTIONS[libc::SIGBUS as usize].get().handler == libc::SIG_IGN {
        kernel_sigaction(libc::SIGBUS, Some(&KSigaction::default()), None);
        return true;
    }
    false
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

/// A trapped `rt_sigaction` for a signal other than SIGSYS. `new` is the
/// program's action (already read), `oact` its pointer for the old one
/// (null: not wanted). Returns the raw result.
pub fn program_sigaction(sig: i32, new: Option<KSigaction>, oact: *mut KSigaction) -> i64 {
    let mut current = KSigaction::default();
    let r = kernel_sigaction(sig, None, Some(&mut current));
    if r < 0 {
        return r;
    }
    let slot = virtualised(sig).then(|| &PROGRAM_ACTIONS[sig as usize]);
    let old = match slot {
        Some(s) if current.handler == entry_address() => s.get(),
        _ => current,
    };
    if let Some(new) = new {
        let kernel = match slot {
            Some(s) if is_handler(&new) || always_entry(sig) => {
                // Table first: a signal arriving in between finds it ready.
                s.set(new);
                entry_action(new, entry_address(), sigsys::restorer())
            }
            _ => sigfix::fix_action(new, sigsys::restorer()),
        };
        let r = kernel_sigaction(sig, Some(&kernel), None);
        if r < 0 {
            return r;
        }
    }
    if !oact.is_null() {
        // As the kernel: a bad pointer is EFAULT (the new action stays).
        if let Err(e) = crate::client::write_user(oact as u64, old) {
            return -(e as i64);
        }
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
    // SAFETY: the kernel's siginfo of this signal.
    if always_entry(sig) && is_synchronous_fault(sig, code) && unsafe { resolve_fault(info) } {
        return;
    }
    if selector::get() == BLOCK || is_synchronous_fault(sig, code) {
        // SAFETY: the kernel's own arguments.
        unsafe { run_program_handler(sig, info, uc) };
        return;
    }
    if in_host_call() {
        // A host call holds nothing of atoll: run the handler as program
        // code, as Linux would in the middle of that call. A handler that
        // leaves with longjmp leaves the selector at BLOCK and the thread
        // outside any host call, which is what program code needs.
        set_in_host_call(false);
        selector::set(BLOCK);
        // SAFETY: the kernel's own arguments.
        unsafe { run_program_handler(sig, info, uc) };
        selector::set(ALLOW);
        set_in_host_call(true);
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
    // SAFETY: the kernel passes a valid ucontext to an SA_SIGINFO handler.
    let uc = unsafe { &mut *(uc as *mut libc::ucontext_t) };
    let (pushed, hold) = with_pending(|s| {
        let pushed = s.push(d);
        let hold = s.is_full() && s.held_mask.is_none();
        if hold {
            // SAFETY: the kernel's ucontext of this signal.
            s.held_mask = Some(unsafe { frame_mask(uc) });
        }
        (pushed, hold)
    });
    if !pushed {
        sigsys::debug(&[b"deferred signal merged"], &[sig as i64]);
    }
    if hold {
        // No room for another: the rest stay queued in the kernel until the
        // delivery (`deliver_pending`, `deliver_into_frame`) lets them in.
        // Faults stay deliverable: atoll code learns of a bad pointer so.
        let faults = [
            libc::SIGSEGV,
            libc::SIGBUS,
            libc::SIGFPE,
            libc::SIGILL,
            libc::SIGTRAP,
        ]
        .iter()
        .fold(0u64, |m, &f| m | sigfix::bit(f));
        // SAFETY: the first word of `uc_sigmask` is the kernel's 64-signal
        // mask, which sigreturn installs.
        unsafe {
            *(&mut uc.uc_sigmask as *mut libc::sigset_t).cast::<u64>() =
                sigfix::strip_sigsys(u64::MAX) & !faults
        };
    }
    // A wait that looked for pending signals just before this one came
    // must not go to sleep on its futex now, nor an interruptible host
    // call enter (or, restarted by the kernel, re-enter) its system call.
    atoll_client::intr::interrupt_wait();
    // Sigreturn reloads the registers changed here.
    let g = &mut uc.uc_mcontext.gregs;
    if let Some(after) =
        atoll_client::intr::skip_interrupted_call(g[libc::REG_RIP as usize] as usize)
    {
        g[libc::REG_RIP as usize] = after as i64;
        g[libc::REG_RAX as usize] = -(libc::EINTR as i64);
    }
}

/// Call the program's handler for `sig` as the kernel would have.
///
/// # Safety
/// Arguments as received by the entry.
unsafe fn run_program_handler(sig: i32, info: *mut libc::siginfo_t, uc: *mut c_void) {
    // The handler is program code: a trapped call it makes delivers on its
    // own, and one interrupted here (a host call of the SIGSYS net) no
    // longer waits for its frame. A handler that leaves with longjmp
    // leaves the flag lowered, which is what program code needs.
    let outer_frame = FRAME_DELIVERY.with(|f| f.swap(FrameMode::None as u8, Ordering::Relaxed));
    let action = PROGRAM_ACTIONS[sig as usize].get();
    // SAFETY: the caller's contract; the kernel's ucontext of this signal.
    let mask = handler_mask(unsafe { frame_mask(uc.cast()) }, &action, sig);
    // The kernel delivered an SA_ONSTACK action on atoll's stack: the
    // handler runs on the program's own alternate stack (`altstack`).
    let onstack = action.flags & libc::SA_ONSTACK as u64 != 0;
    // SAFETY: the caller's contract; the kernel's ucontext of this signal.
    unsafe {
        crate::altstack::run_program_handler(onstack, uc.cast(), mask, || {
            run_program_action(sig, info, uc)
        })
    };
    FRAME_DELIVERY.with(|f| f.store(outer_frame, Ordering::Relaxed));
}

/// The program's action for `sig`: ignore, default or its handler.
///
/// # Safety
/// Arguments as received by the entry.
unsafe fn run_program_action(sig: i32, info: *mut libc::siginfo_t, uc: *mut c_void) {
    let slot = &PROGRAM_ACTIONS[sig as usize];
    let action = slot.get();
    match action.handler {
        libc::SIG_IGN => {}
        libc::SIG_DFL => {
            // The program reset the action while the signal was on its
            // way: take the default action for real (after sigreturn).
            kernel_sigaction(sig, Some(&KSigaction::default()), None);
            sigfix::raise_here(sig);
        }
        _ => {
            if action.flags & libc::SA_RESETHAND as u64 != 0 {
                slot.set(KSigaction::default());
                kernel_sigaction(sig, Some(&KSigaction::default()), None);
            }
            compiler_fence(Ordering::SeqCst);
            // SAFETY: the program installed this action; the caller's
            // contract gives `info` and `uc`.
            unsafe { sigfix::call_handler(&action, sig, info, uc) };
        }
    }
}

/// Deliver this thread's deferred signals now, at a boundary: atoll holds
/// nothing on this thread (a handler may leave with longjmp). Each is
/// re-queued to this thread with its siginfo while every signal is
/// blocked; then the mask becomes `during` (the call's temporary mask) or
/// the program's, and the kernel delivers what it lets through into the
/// entry, with the selector at `BLOCK`: the handlers run as program code.
/// Signals the mask blocks stay pending in the kernel. Returns whether the
/// interrupted call may restart (see [`all_restart`]).
#[cold]
pub fn deliver_pending(during: Option<u64>) -> bool {
    let mut all = BlockAll::new();
    let (held, (taken, n)) = with_pending(|s| (s.held_mask(), s.take()));
    if n == 0 {
        return true;
    }
    if let Some(m) = held {
        // The mask the interrupted code had: the one to go back to.
        all.old = m;
    }
    requeue(&taken[..n]);
    let restart = all_restart(&taken[..n]);
    let prev = selector::get();
    selector::set(BLOCK);
    // Delivered as each of these calls returns, one after the other; with
    // them the ones the entry held back in the kernel once the set was
    // full (after them: a queue of one signal number keeps its order up
    // to the set's size only).
    set_mask(during.unwrap_or(all.old));
    drop(all);
    selector::set(prev);
    restart
}

/// Queue `signals` to this thread again, each with its own siginfo (the
/// sender's pid, uid, code and value stay as they came). Caller has every
/// signal blocked.
fn requeue(signals: &[Deferred]) {
    let pid = raw::syscall(libc::SYS_getpid, &[]) as u64;
    let tid = raw::syscall(libc::SYS_gettid, &[]) as u64;
    for d in signals {
        let r = raw::syscall(
            libc::SYS_rt_tgsigqueueinfo,
            &[pid, tid, d.sig as u64, d.info.as_ptr() as u64],
        );
        if r < 0 {
            // Queue full (RLIMIT_SIGPENDING): the signal without its info.
            raw::syscall(libc::SYS_tgkill, &[pid, tid, d.sig as u64]);
        }
    }
}

/// A blocking `wait4` for the program, issued so that a handler that
/// leaves `wait` with `longjmp` never costs the program a child: `None`
/// for calls issued as they are (`WNOHANG`, other calls). Runs as a host
/// call.
///
/// Why: when a signal and a child's exit come together, Linux's `wait4`
/// reaps the child and the handler runs as the call returns; a handler that
/// leaves with `longjmp` (bash's `wait` builtin under `trap`) throws the
/// status away, and bash then waits forever for a job it already reaped.
/// On Linux the sender's `kill` usually wins that race by far; under atoll
/// the waiter may run later than the sender's exit. So the wait first looks
/// without reaping (`waitid` with `WNOWAIT`): a handler that runs as it
/// returns leaves the child a zombie for the next wait; then that child is
/// reaped with `WNOHANG`.
pub fn reaping_wait(nr: i64, args: &[u64; 6]) -> Option<i64> {
    const P_ALL: u64 = 0;
    const P_PID: u64 = 1;
    const P_PGID: u64 = 2;
    let options = args[2] as i32;
    let valid = libc::WNOHANG
        | libc::WUNTRACED
        | libc::WCONTINUED
        | libc::__WNOTHREAD
        | libc::__WCLONE
        | libc::__WALL;
    // Invalid options: the kernel answers EINVAL at once.
    if nr != libc::SYS_wait4 || options & libc::WNOHANG != 0 || options & !valid != 0 {
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

/// The temporary signal mask a readiness call carries (`ppoll`,
/// `pselect6`, `epoll_pwait(2)`), or `None`.
pub fn temporary_mask(nr: i64, args: &[u64; 6]) -> Option<u64> {
    let (ptr, size) = match nr {
        libc::SYS_pselect6 => {
            if args[5] == 0 {
                return None;
            }
            // 6th argument: { const sigset_t *ss; size_t ss_len }.
            let ss = raw::read_user_u64(args[5])?;
            let len = raw::read_user_u64(args[5] + 8)?;
            (ss, len)
        }
        libc::SYS_ppoll => (args[3], args[4]),
        libc::SYS_epoll_pwait | libc::SYS_epoll_pwait2 => (args[4], args[5]),
        _ => return None,
    };
    if ptr == 0 || size != KSIGSET_SIZE {
        return None;
    }
    raw::read_user_u64(ptr)
}

/// The client's question: does a deferred signal wait on this thread?
pub fn client_pending_hook() -> bool {
    any_pending()
}

/// The client's other question: would [`on_program_signal`] defer a
/// program signal arriving now on this thread? Exactly its own test: atoll
/// code runs (`ALLOW`) outside a host call. (A synchronous fault is the
/// exception there, but a fault in atoll code is a bug either way.)
pub fn client_defers_hook() -> bool {
    selector::get() == ALLOW && !in_host_call()
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
        assert!(s.is_full());
        s.held_mask = Some(0x1234);
        assert_eq!(s.held_mask(), Some(0x1234));
        let (_, n) = s.take();
        assert_eq!(n, PENDING_SLOTS);
        assert_eq!(s.held_mask(), None, "the delivery ends the hold");
    }

    #[test]
    fn restart_needs_every_delivered_action_to_ask_for_it() {
        assert!(all_restart(&[d(libc::SIGCHLD, true)]));
        assert!(!all_restart(&[
            d(libc::SIGCHLD, true),
            d(libc::SIGALRM, false)
        ]));
        assert!(all_restart(&[]));
    }

    #[test]
    fn a_trapped_call_ends_as_linux_handle_signal_decides() {
        let sys = -(atoll_client::intr::ERESTARTSYS as i64);
        let nointr = -(atoll_client::intr::ERESTARTNOINTR as i64);
        let eintr = FrameEnd::Result(-(libc::EINTR as i64));
        let restarting = [d(libc::SIGALRM, true)];
        let mixed = [d(libc::SIGALRM, true), d(libc::SIGUSR1, false)];
        assert_eq!(frame_end(sys, &restarting), FrameEnd::Restart);
        assert_eq!(frame_end(sys, &mixed), eintr);
        assert_eq!(frame_end(sys, &[]), eintr);
        assert_eq!(frame_end(nointr, &mixed), FrameEnd::Restart);
        assert_eq!(frame_end(nointr, &[]), FrameEnd::Restart);
        assert_eq!(frame_end(7, &mixed), FrameEnd::Result(7));
        assert_eq!(
            frame_end(-(libc::EAGAIN as i64), &restarting),
            FrameEnd::Result(-11)
        );
    }

    #[test]
    fn the_kernel_sees_restart_but_never_resethand() {
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
        // Every signal but SIGSYS: the entry sets the handler's mask.
        assert_eq!(k.mask, sigfix::strip_sigsys(u64::MAX));
        assert_eq!(k.flags & libc::SA_RESETHAND as u64, 0);
        let kept =
            (libc::SA_RESTART | libc::SA_NODEFER | libc::SA_ONSTACK | libc::SA_SIGINFO) as u64;
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
    fn glibc_internal_and_unblockable_signals_stay_with_the_kernel() {
        for sig in [libc::SIGSYS, libc::SIGKILL, libc::SIGSTOP, 32, 33, 0, 65] {
            assert!(!virtualised(sig), "{sig}");
        }
        for sig in [libc::SIGINT, libc::SIGALRM, libc::SIGCHLD, 34, 64] {
            assert!(virtualised(sig), "{sig}");
        }
    }

    #[test]
    fn temporary_masks_are_found_where_each_call_keeps_them() {
        let set: u64 = sigfix::bit(libc::SIGCHLD);
        let p = &set as *const u64 as u64;
        let mut a = [0u64; 6];
        a[3] = p;
        a[4] = KSIGSET_SIZE;
        assert_eq!(temporary_mask(libc::SYS_ppoll, &a), Some(set));
        let pair = [p, KSIGSET_SIZE];
        let mut b = [0u64; 6];
        b[5] = pair.as_ptr() as u64;
        assert_eq!(temporary_mask(libc::SYS_pselect6, &b), Some(set));
        assert_eq!(temporary_mask(libc::SYS_poll, &a), None);
        a[4] = 16;
        assert_eq!(temporary_mask(libc::SYS_ppoll, &a), None);
    }
}
