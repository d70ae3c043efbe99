//! The exhaustive net: the SIGSYS handler behind Syscall User Dispatch.
//!
//! How a trapped system call flows (selector `BLOCK`, program code issued a
//! `syscall` instruction outside libatoll's text):
//!
//! ```text
//!  kernel: roll back, deliver SIGSYS (si_code = SYS_USER_DISPATCH)
//!  on_sigsys: AtollGuard (selector ALLOW) ─ save errno ─ count the trap
//!     ├─ signal plumbing (rt_sigaction, masks)   → sigfix, raw syscall
//!     ├─ clone/clone3/fork/vfork                 → clone_* below
//!     ├─ exit_group / execve                     → flush trap stats first
//!     └─ anything else: may_concern? dispatch : raw syscall
//!  write RAX; program signals deferred meanwhile are queued again, blocked
//!  until the sigreturn (`sigdefer::deliver_into_frame`; a restart points
//!  RIP back at the `syscall`) ─ restore errno ─ selector BLOCK ─ return
//!  through our own rt_sigreturn stub (inside the allowed region, so it
//!  never traps): the kernel restores the program's registers and mask and
//!  delivers those signals in the program's own frame
//! ```
//!
//! Clones with a new stack cannot return through this handler in the child
//! (the handler's frame is on the parent's stack), so the child goes
//! through a trampoline in our text: the interrupted registers are copied
//! just below the new stack pointer, the raw clone is issued, and the child
//! restores them, sets RAX = 0 and RSP = the new stack, and jumps to the
//! interrupted RIP, exactly as if the kernel had returned there. glibc's
//! clone child paths find `fn`/`arg` either on the new stack (`clone`) or
//! in registers the kernel preserves (`clone3`: RDX, R8), so both work.
//!
//! Handler flags: `SA_SIGINFO | SA_RESTORER | SA_NODEFER | SA_ONSTACK`.
//! NODEFER because a program signal handler that runs nested inside ours
//! may trap again, and a SIGSYS forced while blocked kills the process.
//! ONSTACK because the frame must not land on the program's stack (a
//! goroutine's is a few KiB): the kernel's alternate stack of every thread
//! is atoll's own, and the program's `sigaltstack` is virtual (`altstack`).
//! Mask: every other signal, until the handler has noted the program's
//! stack pointer (then the program's mask at the trap, `on_sigsys_here`).

use core::ffi::c_void;
use core::sync::atomic::{AtomicBool, Ordering};

use crate::altstack;
use crate::client::{self, Dispatch, ForkPrep, Mode};
use crate::raw::{self, StackBuf};
use crate::retframe;
use crate::rewrite::{self, Frame};
use crate::selector::{self, AtollGuard, BLOCK};
use crate::sigdefer;
use crate::sigfix::{self, KSigaction, VirtualAction, KSIGSET_SIZE};
use crate::stats;

mod clone;
mod spawn;
use clone::clone_any;

/// `si_code` of a SIGSYS raised by Syscall User Dispatch.
const SYS_USER_DISPATCH: i32 = 2;

/// `ATOLL_DEBUG=1`: log every trap to stderr.
pub static DEBUG: AtomicBool = AtomicBool::new(false);

static VIRTUAL_SIGSYS: VirtualAction = VirtualAction::new();

// Our own `rt_sigreturn` stub. It must live in libatoll's text: returning
// from a signal handler with the selector at BLOCK through glibc's
// `__restore_rt` would trap the `rt_sigreturn` itself.
core::arch::global_asm!(
    ".text",
    ".globl atoll_restore_rt",
    ".hidden atoll_restore_rt",
    ".type atoll_restore_rt,@function",
    ".p2align 4",
    "atoll_restore_rt:",
    "    mov eax, 15", // SYS_rt_sigreturn
    "    syscall",
    "    ud2",
    ".size atoll_restore_rt, .-atoll_restore_rt",
);

extern "C" {
    fn atoll_restore_rt();
}

/// Address of our `rt_sigreturn` stub, for every handler we install.
pub fn restorer() -> usize {
    atoll_restore_rt as *const () as usize
}

/// Install our SIGSYS handler. Returns the raw `rt_sigaction` result.
pub fn install() -> i64 {
    let act = KSigaction {
        handler: on_sigsys as *const () as usize,
        flags: (libc::SA_SIGINFO | libc::SA_NODEFER | libc::SA_ONSTACK) as u64
            | sigfix::SA_RESTORER,
        restorer: restorer(),
        // Every other signal waits until the handler knows the program's
        // stack pointer (see `on_sigsys_here`).
        mask: sigfix::strip_sigsys(u64::MAX),
    };
    raw::syscall(
        libc::SYS_rt_sigaction,
        &[
            libc::SIGSYS as u64,
            &act as *const KSigaction as u64,
            0,
            KSIGSET_SIZE,
        ],
    )
}

/// Log one line to stderr when `ATOLL_DEBUG=1` (raw write, no allocation).
pub fn debug(parts: &[&[u8]], nums: &[i64]) {
    if !DEBUG.load(Ordering::Relaxed) {
        return;
    }
    let mut b = StackBuf::<256>::default();
    b.push(b"atoll[");
    b.push_i64(raw::syscall(libc::SYS_gettid, &[]));
    b.push(b"]:");
    for p in parts {
        b.push(b" ");
        b.push(p);
    }
    for n in nums {
        b.push(b" ");
        b.push_i64(*n);
    }
    b.push(b"\n");
    raw::write_all(2, b.as_bytes());
}

/// The SIGSYS handler.
///
/// # Safety
/// Only the kernel calls this, with a valid `siginfo_t` and `ucontext_t`.
unsafe extern "C" fn on_sigsys(sig: libc::c_int, info: *mut libc::siginfo_t, ucv: *mut c_void) {
    // The kernel put this frame on atoll's stack, the thread's alternate
    // signal stack (`altstack`); on whatever stack the program was on for
    // a thread not armed yet: the rest runs on atoll's.
    // SAFETY: the kernel's own arguments, passed on.
    crate::stack::run(|| unsafe { on_sigsys_here(sig, info, ucv) });
}

/// The SIGSYS handler's work, on atoll's stack.
///
/// # Safety
/// As [`on_sigsys`].
unsafe fn on_sigsys_here(sig: libc::c_int, info: *mut libc::siginfo_t, ucv: *mut c_void) {
    // First thing, before anything that could issue a system call.
    let guard = AtollGuard::enter();
    let saved_errno = raw::errno();
    // SAFETY: the kernel passes a valid siginfo for an SA_SIGINFO handler.
    let code = unsafe { (*info).si_code };
    if code != SYS_USER_DISPATCH {
        // SAFETY: the kernel's ucontext of this signal.
        sigdefer::set_thread_mask(unsafe { sigdefer::frame_mask(ucv.cast()) });
        // SAFETY: forwarding the kernel's own arguments.
        unsafe { foreign_sigsys(sig, info, ucv, guard.prev()) };
        raw::set_errno(saved_errno);
        return;
    }
    // SAFETY: `_sigsys._syscall` is the int at byte 24 of siginfo_t on
    // x86-64 (after signo, errno, code, padding, and `_call_addr`).
    let nr = unsafe { *(info as *const u8).add(24).cast::<i32>() } as i64;
    // SAFETY: the kernel passes a valid ucontext for an SA_SIGINFO handler,
    // and nothing else references it while the handler runs.
    let uc = unsafe { &mut *(ucv as *mut libc::ucontext_t) };
    let program_sp = altstack::TrapScope::enter(altstack::on_trap(uc));
    // Delivered with every other signal blocked: a signal let in before
    // `TrapScope` found no sign of where the program was, and when the
    // trap came from a handler on the program's alternate stack, its own
    // handler started at that stack's top, over the live one. From here
    // atoll's work runs with the program's mask at the trap.
    // SAFETY: the kernel's ucontext of this signal.
    sigdefer::set_thread_mask(unsafe { sigdefer::frame_mask(uc) });
    if nr == retframe::GATE_NR && retframe::enter_program_frame(uc) {
        // A wrapper's return with signals to deliver (`retframe`).
        leave_trap(saved_errno, guard, program_sp);
        return;
    }
    let (rip, rsp) = (
        uc.uc_mcontext.gregs[libc::REG_RIP as usize] as usize,
        uc.uc_mcontext.gregs[libc::REG_RSP as usize] as u64,
    );
    if let Some(end) = rewrite::site_end::take(nr, rip, rsp) {
        // A call the entry of a rewritten site served, back at the site's
        // `syscall` to end in the program's frame (`rewrite::site_end`).
        // SAFETY: the first word of `uc_sigmask` is the kernel's 64-signal
        // mask, which sigreturn installs.
        unsafe { *(&mut uc.uc_sigmask as *mut libc::sigset_t).cast::<u64>() = end.mask };
        sigdefer::deliver_into_frame(uc, nr, end.ret, true);
        leave_trap(saved_errno, guard, program_sp);
        return;
    }
    let g = &uc.uc_mcontext.gregs;
    let args = [
        g[libc::REG_RDI as usize] as u64,
        g[libc::REG_RSI as usize] as u64,
        g[libc::REG_RDX as usize] as u64,
        g[libc::REG_R10 as usize] as u64,
        g[libc::REG_R8 as usize] as u64,
        g[libc::REG_R9 as usize] as u64,
    ];
    stats::count(nr);
    atoll_client::count_trap();
    // The next run of this site may call atoll without a trap.
    rewrite::on_trap(
        nr,
        uc.uc_mcontext.gregs[libc::REG_RIP as usize] as usize,
        &uc.uc_mcontext.gregs,
    );
    // Signals deferred meanwhile are delivered into the program's own
    // frame as this handler returns (`sigdefer::deliver_into_frame`),
    // except around a call whose temporary mask must be in force then.
    let frame = sigdefer::temporary_mask(nr, &args)
        .is_none()
        .then(|| sigdefer::FrameDelivery::enter(sigdefer::FrameMode::Trap));
    let ret = handle(nr, args, uc);
    drop(frame);
    debug(&[b"trap"], &[nr, ret]);
    sigdefer::deliver_into_frame(uc, nr, ret, false);
    leave_trap(saved_errno, guard, program_sp);
}

/// The end of a trap's handling: errno back, the program's selector, and
/// the end of `TrapScope`. When the trap came from a handler atoll runs on
/// the program's alternate stack, signals wait for the sigreturn, as on
/// the way in: from the end of `TrapScope` on, a new handler would not
/// know where that one is.
fn leave_trap(saved_errno: i32, guard: AtollGuard, program_sp: altstack::TrapScope) {
    if altstack::handler_on_program_stack() {
        sigdefer::block_until_sigreturn();
    }
    raw::set_errno(saved_errno);
    drop(guard);
    drop(program_sp);
}

/// A SIGSYS that SUD did not raise (seccomp, `kill`): give it to the
/// program's virtual disposition.
///
/// # Safety
/// Arguments as received by the signal handler.
unsafe fn foreign_sigsys(
    sig: libc::c_int,
    info: *mut libc::siginfo_t,
    ucv: *mut c_void,
    prev_selector: u8,
) {
    let v = VIRTUAL_SIGSYS.get();
    match v.handler {
        libc::SIG_IGN => {}
        libc::SIG_DFL => {
            // Default action is to dump core: do it for real.
            let dfl = KSigaction::default();
            raw::syscall(
                libc::SYS_rt_sigaction,
                &[sig as u64, &dfl as *const _ as u64, 0, KSIGSET_SIZE],
            );
            sigfix::raise_here(sig);
        }
        _ => {
            // The program's handler runs as program code.
            selector::set(prev_selector);
            // SAFETY: the program installed this action; the caller's
            // contract gives `info` and `ucv`.
            unsafe { sigfix::call_handler(&v, sig, info, ucv) };
            selector::set(selector::ALLOW);
        }
    }
}

/// Route one trapped system call; returns the value for RAX. The arms
/// here use the SIGSYS frame (`uc`, or the mask sigreturn restores); a
/// rewritten site's entry has none and does the same with what it has
/// ([`handle_from_entry`]: the saved registers for clones and
/// `sigaltstack`, the thread's own mask for `rt_sigprocmask` and `execve`)
/// or lets the site trap (`rewrite::keeps_trapping`).
fn handle(nr: i64, args: [u64; 6], uc: &mut libc::ucontext_t) -> i64 {
    let r = handle_in_context(nr, args, uc);
    spawn::note(nr, r);
    r
}

fn handle_in_context(nr: i64, args: [u64; 6], uc: &mut libc::ucontext_t) -> i64 {
    match nr {
        libc::SYS_rt_sigprocmask => sigprocmask_in_context(args, uc),
        libc::SYS_sigaltstack => {
            altstack::sigaltstack(args, uc.uc_mcontext.gregs[libc::REG_RSP as usize] as usize)
        }
        libc::SYS_kill
        | libc::SYS_tkill
        | libc::SYS_tgkill
        | libc::SYS_rt_sigqueueinfo
        | libc::SYS_rt_tgsigqueueinfo => {
            // A signal sent to ourselves (glibc's raise, kill(getpid()))
            // would be delivered the moment the call returns, i.e. inside
            // this handler, and its handler would run as atoll code whose
            // calls bypass atoll (Python's wakeup-fd write into an atoll
            // pipe was lost). Keep every signal blocked for the rest of
            // this handler: sigreturn restores the program's mask and the
            // kernel delivers it there, to program code.
            let all = sigfix::strip_sigsys(u64::MAX);
            raw::syscall(
                libc::SYS_rt_sigprocmask,
                &[
                    libc::SIG_BLOCK as u64,
                    &all as *const u64 as u64,
                    0,
                    KSIGSET_SIZE,
                ],
            );
            general(nr, args)
        }
        libc::SYS_clone | libc::SYS_clone3 | libc::SYS_fork | libc::SYS_vfork => {
            let mut regs = [0i64; 17];
            regs.copy_from_slice(&uc.uc_mcontext.gregs[..17]);
            clone_any(nr, args, &regs)
        }
        libc::SYS_execve | libc::SYS_execveat => {
            stats::flush();
            exec_with_program_mask(nr, args, uc)
        }
        _ => route_without_context(nr, args),
    }
}

/// Route a call from a rewritten site's entry (`rewrite::entry`), with
/// the registers it saved in place of a signal frame; `None` when the call
/// needs the frame after all (a number that keeps trapping, reached
/// through a site whose number is not a constant): the entry then runs the
/// site's own `syscall`, which traps. Clones and `vfork` take the
/// registers for a child on a new stack (`clone`), `sigaltstack` the
/// program's stack pointer. Hot path.
pub fn handle_from_entry(nr: i64, args: [u64; 6], frame: &Frame) -> Option<i64> {
    let r = match nr {
        libc::SYS_clone | libc::SYS_clone3 | libc::SYS_fork | libc::SYS_vfork => {
            if client::mode() == Mode::Off {
                return None;
            }
            let mut regs = frame.regs;
            regs[libc::REG_RIP as usize] = frame.resume() as i64;
            clone_any(nr, args, &regs)
        }
        libc::SYS_sigaltstack => {
            altstack::sigaltstack(args, frame.regs[libc::REG_RSP as usize] as usize)
        }
        _ if rewrite::keeps_trapping(nr) => return None,
        _ => route_without_context(nr, args),
    };
    spawn::note(nr, r);
    Some(r)
}

/// Route a system call that needs no signal frame: from the SIGSYS
/// handler, or from a rewritten site's entry ([`handle_from_entry`]). Hot
/// path.
fn route_without_context(nr: i64, mut args: [u64; 6]) -> i64 {
    match nr {
        libc::SYS_rt_sigaction => sig_action(args),
        // Never the kernel's (atoll's stack). A trap and a rewritten site
        // pass the program's stack pointer (`handle_in_context`,
        // `handle_from_entry`); this is for a caller that knows none.
        libc::SYS_sigaltstack => altstack::sigaltstack(args, 0),
        libc::SYS_exit_group => {
            spawn::at_exit(args[0]);
            stats::flush();
            atoll_client::before_exit();
            raw::syscall6(nr, args)
        }
        libc::SYS_execve | libc::SYS_execveat => {
            // From a rewritten site: the thread's mask is the program's
            // already (the SIGSYS handler's arm restores it first).
            stats::flush();
            general(nr, args)
        }
        libc::SYS_rt_sigprocmask => sigprocmask_direct(args),
        libc::SYS_prctl => {
            // A thread switching Syscall User Dispatch off runs its
            // rewritten sites as plain system calls from then on (`entry`).
            let r = general(nr, args);
            if r >= 0 && selector::note_prctl(args[0], args[1]) && !selector::dispatch_on() {
                // Its `execve` or `exit_group` will not come through atoll
                // to write the trap counts: written now.
                stats::flush();
            }
            r
        }
        libc::SYS_pselect6 if args[5] != 0 => {
            // 6th argument: pointer to { const sigset_t *ss; size_t ss_len }.
            // SAFETY: the program passed this pointer to pselect6, which
            // reads the same two words.
            let pair = unsafe { *(args[5] as *const [u64; 2]) };
            let mut set = 0u64;
            let mut new_pair = pair;
            if pair[0] != 0 && pair[1] == KSIGSET_SIZE {
                // SAFETY: as above, the kernel would read this sigset.
                set = sigfix::strip_sigsys(unsafe { *(pair[0] as *const u64) });
                new_pair[0] = &set as *const u64 as u64;
            }
            args[5] = &new_pair as *const [u64; 2] as u64;
            let r = general(nr, args);
            let _ = set;
            r
        }
        _ => match sigfix::mask_arg(nr) {
            Some((ptr_i, size_i)) if args[ptr_i] != 0 && args[size_i] == KSIGSET_SIZE => {
                // SAFETY: the program passed this sigset pointer to a system
                // call that reads 8 bytes from it.
                let set = sigfix::strip_sigsys(unsafe { *(args[ptr_i] as *const u64) });
                args[ptr_i] = &set as *const u64 as u64;
                general(nr, args)
            }
            _ => general(nr, args),
        },
    }
}

/// A trapped `rt_sigprocmask`. The mask that counts is the one the
/// kernel restores when this handler returns (`uc_sigmask`), not the
/// handler's own: changing the thread's mask here would be undone by
/// sigreturn (a shell's "unblock everything" after vfork was lost, and the
/// program it then exec'd started with every signal blocked). So change
/// `uc_sigmask`, with the kernel's rules: SIGKILL and SIGSTOP cannot be
/// blocked, and SIGSYS stays deliverable (see `sigfix`).
fn sigprocmask_in_context(args: [u64; 6], uc: &mut libc::ucontext_t) -> i64 {
    let (how, set, old, size) = (args[0] as i32, args[1], args[2], args[3]);
    if size != KSIGSET_SIZE {
        return -(libc::EINVAL as i64);
    }
    // SAFETY: `uc_sigmask` is a sigset_t; its first 8 bytes are the
    // kernel's 64-signal mask, restored by sigreturn.
    let mask = unsafe { &mut *(&mut uc.uc_sigmask as *mut libc::sigset_t).cast::<u64>() };
    let current = *mask;
    let mut next = current;
    if set != 0 {
        let Some(s) = raw::read_user_u64(set) else {
            return -(libc::EFAULT as i64);
        };
        next = match how {
            libc::SIG_BLOCK => current | s,
            libc::SIG_UNBLOCK => current & !s,
            libc::SIG_SETMASK => s,
            _ => return -(libc::EINVAL as i64),
        };
    }
    if old != 0 && !raw::write_user_u64(old, current) {
        return -(libc::EFAULT as i64);
    }
    let unblockable = (1u64 << (libc::SIGKILL - 1)) | (1u64 << (libc::SIGSTOP - 1));
    *mask = sigfix::strip_sigsys(next) & !unblockable;
    0
}

/// `rt_sigprocmask` from a rewritten site's entry: no signal frame, so
/// the thread's own mask is the program's, and the call changes it
/// directly (as the libc wrappers do, `wrappers::process`), with SIGSYS
/// kept deliverable; the kernel applies its own rules (SIGKILL, SIGSTOP;
/// `EINVAL`). Issued as a host call: a signal it unblocks is delivered as
/// it returns and its handler runs right there as program code, once
/// (`sigdefer`). A signal deferred while the entry ran before the call is
/// delivered at the host call's start under the old mask, or left pending
/// in the kernel if that mask blocks it, until a later unblock; one
/// deferred after it, at the guard's drop under the new mask.
fn sigprocmask_direct(mut args: [u64; 6]) -> i64 {
    let set_ptr = args[1];
    let mut set = 0u64;
    if set_ptr != 0 && args[3] == KSIGSET_SIZE {
        let Some(s) = raw::read_user_u64(set_ptr) else {
            return -(libc::EFAULT as i64);
        };
        set = sigfix::strip_sigsys(s);
        args[1] = &set as *const u64 as u64;
    }
    let r = general(libc::SYS_rt_sigprocmask, args);
    let _ = set;
    r
}

/// A trapped `execve`: the new image inherits the signal mask of the
/// thread that calls it, and inside this handler that is the handler's
/// mask (every signal but SIGSYS). Put the program's own mask back first,
/// as the kernel would have had it — otherwise a program exec'd through
/// the net starts with SIGPIPE, SIGINT, … blocked (a writer to a dangling
/// pipe then sees EPIPE instead of dying). A remote exec reads the mask it
/// carries to the scheduling server from here too. If the exec fails, the
/// handler's mask comes back before we return into the handler.
fn exec_with_program_mask(nr: i64, args: [u64; 6], uc: &libc::ucontext_t) -> i64 {
    // SAFETY: `uc_sigmask` is a plain sigset_t; its first 8 bytes are the
    // kernel's 64-signal mask, which is what rt_sigprocmask takes.
    let program = unsafe { *(&uc.uc_sigmask as *const libc::sigset_t as *const u64) };
    let program = sigfix::strip_sigsys(program);
    let mut handler_mask = 0u64;
    raw::syscall(
        libc::SYS_rt_sigprocmask,
        &[
            libc::SIG_SETMASK as u64,
            &program as *const u64 as u64,
            &mut handler_mask as *mut u64 as u64,
            KSIGSET_SIZE,
        ],
    );
    let ret = general(nr, args);
    raw::syscall(
        libc::SYS_rt_sigprocmask,
        &[
            libc::SIG_SETMASK as u64,
            &handler_mask as *const u64 as u64,
            0,
            KSIGSET_SIZE,
        ],
    );
    ret
}

/// Any system call without special plumbing. Hot path.
fn general(nr: i64, args: [u64; 6]) -> i64 {
    if client::may_concern(nr, &args) {
        match client::dispatch(nr, &args) {
            Dispatch::Done(v) => return v,
            Dispatch::Host => {}
        }
    }
    if nr == libc::SYS_exit {
        // The thread ends: its atoll stack goes with it.
        crate::stack::exit_thread(args[0]);
    }
    // Nothing of atoll is held: a program handler interrupting the call
    // runs in it as program code (see `sigdefer`).
    let r = sigdefer::host_call(|| match sigdefer::reaping_wait(nr, &args) {
        Some(r) => r,
        None => raw::syscall6(nr, args),
    });
    if r == -(libc::ENOENT as i64) {
        // A host symlink into the mount dangles for the kernel.
        if let Some(v) = client::through_host_link(nr, &args) {
            return v;
        }
    }
    r
}

/// `rt_sigaction` on the program's behalf: SIGSYS is answered from its
/// virtual disposition (see `sigfix`), every other signal's handler is
/// virtualised by `sigdefer`.
fn sig_action(args: [u64; 6]) -> i64 {
    let sig = args[0] as i32;
    let act = args[1] as *const KSigaction;
    let oact = args[2] as *mut KSigaction;
    if args[3] != KSIGSET_SIZE {
        return raw::syscall6(libc::SYS_rt_sigaction, args);
    }
    // The program's sigactions are read and written as the kernel does:
    // a bad pointer is EFAULT, not a fault in this handler.
    let new = if act.is_null() {
        None
    } else {
        match client::read_user::<KSigaction>(act as u64) {
            Ok(v) => Some(v),
            Err(e) => return -(e as i64),
        }
    };
    if sig == libc::SIGSYS {
        let old = VIRTUAL_SIGSYS.get();
        if let Some(v) = new {
            VIRTUAL_SIGSYS.set(v);
        }
        if !oact.is_null() {
            if let Err(e) = client::write_user(oact as u64, old) {
                return -(e as i64);
            }
        }
        return 0;
    }
    sigdefer::program_sigaction(sig, new, oact)
}
