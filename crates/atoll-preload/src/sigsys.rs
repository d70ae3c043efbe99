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
use crate::rewrite;
use crate::selector::{self, AtollGuard, BLOCK};
use crate::sigdefer;
use crate::sigfix::{self, KSigaction, VirtualAction, KSIGSET_SIZE};
use crate::stats;

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

// Clone trampoline: `atoll_clone_raw(nr, args: *const [u64; 6], block)`.
// Parent (or error): returns RAX like a system call. Child: runs on the new
// stack, calls `clone_child(block)`, then restores the program's registers
// from `block` (layout = the first 17 gregs of `mcontext_t`: r8 … r15, rdi,
// rsi, rbp, rbx, rdx, rax, rcx, rsp, rip) and jumps to the saved RIP with
// RAX = 0. R9 carries `block` across the syscall: neither clone nor clone3
// reads it and the kernel preserves it in both parent and child.
core::arch::global_asm!(
    ".text",
    ".globl atoll_clone_raw",
    ".hidden atoll_clone_raw",
    ".type atoll_clone_raw,@function",
    ".p2align 4",
    "atoll_clone_raw:",
    "    mov r9, rdx",
    "    mov rax, rdi",
    "    mov rdi, [rsi]",
    "    mov rdx, [rsi + 16]",
    "    mov r10, [rsi + 24]",
    "    mov r8, [rsi + 32]",
    "    mov rsi, [rsi + 8]",
    "    syscall",
    "    test rax, rax",
    "    jz 2f",
    "    ret",
    "2:",
    "    mov rbx, r9",
    "    mov rsp, r9",
    "    and rsp, -16",
    "    xor ebp, ebp",
    "    mov rdi, rbx",
    "    call {child}",
    "    mov rax, rbx",
    "    mov r8, [rax + 0]",
    "    mov r9, [rax + 8]",
    "    mov r10, [rax + 16]",
    "    mov r11, [rax + 24]",
    "    mov r12, [rax + 32]",
    "    mov r13, [rax + 40]",
    "    mov r14, [rax + 48]",
    "    mov r15, [rax + 56]",
    "    mov rdi, [rax + 64]",
    "    mov rsi, [rax + 72]",
    "    mov rbp, [rax + 80]",
    "    mov rbx, [rax + 88]",
    "    mov rdx, [rax + 96]",
    "    mov rcx, [rax + 112]",
    "    mov rsp, [rax + 120]",
    "    push qword ptr [rax + 128]",
    "    xor eax, eax",
    "    ret",
    ".size atoll_clone_raw, .-atoll_clone_raw",
    child = sym clone_child,
);

extern "C" {
    fn atoll_restore_rt();
    fn atoll_clone_raw(nr: i64, args: *const [u64; 6], block: *mut c_void) -> i64;
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
    rewrite::on_trap(nr, uc.uc_mcontext.gregs[libc::REG_RIP as usize] as usize);
    // Signals deferred meanwhile are delivered into the program's own
    // frame as this handler returns (`sigdefer::deliver_into_frame`),
    // except around a call whose temporary mask must be in force then.
    let frame = sigdefer::temporary_mask(nr, &args)
        .is_none()
        .then(|| sigdefer::FrameDelivery::enter(sigdefer::FrameMode::Trap));
    let ret = handle(nr, args, uc);
    drop(frame);
    debug(&[b"trap"], &[nr, ret]);
    sigdefer::deliver_into_frame(uc, nr, ret);
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
            let pid = raw::syscall(libc::SYS_getpid, &[]);
            let tid = raw::syscall(libc::SYS_gettid, &[]);
            raw::syscall(libc::SYS_tgkill, &[pid as u64, tid as u64, sig as u64]);
        }
        h => {
            // The program's handler runs as program code.
            selector::set(prev_selector);
            if v.flags & libc::SA_SIGINFO as u64 != 0 {
                // SAFETY: the program installed `h` as an SA_SIGINFO handler.
                let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut c_void) =
                    unsafe { core::mem::transmute(h) };
                f(sig, info, ucv);
            } else {
                // SAFETY: the program installed `h` as a plain handler.
                let f: extern "C" fn(libc::c_int) = unsafe { core::mem::transmute(h) };
                f(sig);
            }
            selector::set(selector::ALLOW);
        }
    }
}

/// Route one trapped system call; returns the value for RAX. The arms
/// here need the SIGSYS frame (`uc`, or the mask sigreturn restores), so
/// their sites are never rewritten (`rewrite::keeps_trapping`).
fn handle(nr: i64, args: [u64; 6], uc: &mut libc::ucontext_t) -> i64 {
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
            clone_any(nr, args, uc)
        }
        libc::SYS_execve | libc::SYS_execveat => {
            stats::flush();
            exec_with_program_mask(nr, args, uc)
        }
        _ => handle_without_context(nr, args),
    }
}

/// Route a system call that needs no signal frame: from the SIGSYS
/// handler, or from a rewritten site's entry (`rewrite`). Hot path.
pub fn handle_without_context(nr: i64, mut args: [u64; 6]) -> i64 {
    match nr {
        libc::SYS_rt_sigaction => sig_action(args),
        // Never the kernel's (atoll's stack); its sites keep trapping, so
        // this comes only from an unknown caller's stack pointer.
        libc::SYS_sigaltstack => altstack::sigaltstack(args, 0),
        libc::SYS_exit_group => {
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

// ---------------------------------------------------------------------------
// clone, clone3, fork, vfork

/// What kind of child a clone creates, and with which flags we issue it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum CloneKind {
    /// A new process (own memory): client fork hooks, SUD re-enabled.
    Process,
    /// A new thread with its own TLS: SUD re-enabled with its own selector.
    Thread,
    /// Shares memory and TLS with the parent (`CLONE_VM` without
    /// `CLONE_SETTLS`): its selector byte *is* the parent's, so it runs
    /// without SUD (a known gap; glibc never does this).
    Unmonitored,
    /// Nothing we can reason about (e.g. `CLONE_VM` without a stack); issue
    /// unchanged.
    Raw,
}

/// Decide how to issue a clone with `flags`, given whether the caller
/// supplied a new stack. Returns the flags to use and the kind.
///
/// `CLONE_VM|CLONE_VFORK` (vfork, posix_spawn, system, popen) becomes a
/// plain fork: a child sharing our memory could not run the client (it
/// would scribble on the suspended parent's client state), and POSIX lets
/// vfork be a fork. The cost is that an exec failure in posix_spawn is
/// reported as exit status 127 rather than as an error return.
pub fn classify(flags: u64, has_stack: bool) -> (u64, CloneKind) {
    let vm = libc::CLONE_VM as u64;
    let vfork = libc::CLONE_VFORK as u64;
    if flags & vm != 0 && flags & vfork != 0 {
        return (flags & !(vm | vfork), CloneKind::Process);
    }
    if flags & vm == 0 {
        return (flags, CloneKind::Process);
    }
    if !has_stack {
        return (flags, CloneKind::Raw);
    }
    if flags & libc::CLONE_SETTLS as u64 != 0 {
        (flags, CloneKind::Thread)
    } else {
        (flags, CloneKind::Unmonitored)
    }
}

/// What the child of a trampolined clone finds below its new stack.
#[repr(C)]
struct CloneBlock {
    /// gregs 0..=16 of the interrupted context, RAX = 0, RSP = new stack.
    regs: [i64; 17],
    kind: CloneKind,
    /// Bitwise copy of the parent's `ForkPrep` (valid in the child's own
    /// copy of memory; the parent never drops this copy).
    prep: core::mem::MaybeUninit<ForkPrep>,
}

/// Bytes reserved below the new stack pointer for the block.
const BLOCK_ROOM: usize = 512;
const _: () = assert!(core::mem::size_of::<CloneBlock>() + 16 <= BLOCK_ROOM);

/// `struct clone_args` as far as we read it (clone3).
const CLONE_ARGS_WORDS: usize = 11;
const CA_FLAGS: usize = 0;
const CA_STACK: usize = 5;
const CA_STACK_SIZE: usize = 6;

fn clone_any(nr: i64, args: [u64; 6], uc: &libc::ucontext_t) -> i64 {
    if client::mode() == Mode::Off {
        return raw::syscall6(nr, args);
    }
    let waiter = if is_vfork(nr, &args) {
        VforkWait::new()
    } else {
        None
    };
    let r = clone_dispatch(nr, args, uc);
    if let Some(w) = waiter {
        w.finish(r);
    }
    r
}

/// Does this clone ask for vfork semantics (`vfork`, `CLONE_VFORK`)?
fn is_vfork(nr: i64, args: &[u64; 6]) -> bool {
    let vfork = libc::CLONE_VFORK as u64;
    match nr {
        libc::SYS_vfork => true,
        libc::SYS_clone => args[0] & vfork != 0,
        libc::SYS_clone3 if args[0] != 0 && args[1] >= 8 => {
            // SAFETY: the program passed clone3 at least `size` (≥ 8)
            // readable bytes; the first word is `flags`.
            unsafe { *(args[0] as *const u64) & vfork != 0 }
        }
        _ => false,
    }
}

/// A vfork-style clone becomes a fork (`classify`), but the caller must
/// still not run on until the child has called `execve` or exited, as
/// Linux suspends it: `posix_spawn`'s caller, say, then opens the program
/// it started and must get `ETXTBSY`, and sees the child's exec done. The
/// child holds the write end of a close-on-exec pipe, which its exec (or a
/// proxy's, or its exit) closes; the parent reads until end of file. Both
/// ends live high (as atoll's private descriptors do), out of the way of
/// a spawn's `dup2` file actions.
struct VforkWait {
    read: i32,
    write: i32,
}

impl VforkWait {
    fn new() -> Option<VforkWait> {
        let mut fds = [0i32; 2];
        if raw::syscall6(
            libc::SYS_pipe2,
            [fds.as_mut_ptr() as u64, libc::O_CLOEXEC as u64, 0, 0, 0, 0],
        ) != 0
        {
            return None;
        }
        let high = |fd: i32| {
            let n = raw::syscall6(
                libc::SYS_fcntl,
                [fd as u64, libc::F_DUPFD_CLOEXEC as u64, 900, 0, 0, 0],
            );
            if n < 0 {
                return fd;
            }
            raw::syscall6(libc::SYS_close, [fd as u64, 0, 0, 0, 0, 0]);
            n as i32
        };
        Some(VforkWait {
            read: high(fds[0]),
            write: high(fds[1]),
        })
    }

    /// After the clone returned `r` here (in the parent, or in a child
    /// that returns through this handler).
    fn finish(self, r: i64) {
        let close = |fd: i32| raw::syscall6(libc::SYS_close, [fd as u64, 0, 0, 0, 0, 0]);
        if r == 0 {
            close(self.read); // the child keeps only the write end
            return;
        }
        close(self.write);
        if r > 0 {
            let mut b = 0u8;
            loop {
                let n = raw::syscall6(
                    libc::SYS_read,
                    [self.read as u64, &mut b as *mut u8 as u64, 1, 0, 0, 0],
                );
                if n != -(libc::EINTR as i64) {
                    break; // 0 at the child's exec or exit
                }
            }
        }
        close(self.read);
    }
}

fn clone_dispatch(nr: i64, args: [u64; 6], uc: &libc::ucontext_t) -> i64 {
    match nr {
        // fork(): a process on the same stack.
        libc::SYS_fork => clone_inline(nr, args, CloneKind::Process),
        // vfork(): emulated as fork (see `classify`).
        libc::SYS_vfork => clone_inline(libc::SYS_fork, args, CloneKind::Process),
        libc::SYS_clone => {
            // clone(flags, stack, parent_tid, child_tid, tls)
            let (flags, kind) = classify(args[0], args[1] != 0);
            let mut a = args;
            a[0] = flags;
            if args[1] == 0 || kind == CloneKind::Raw {
                return clone_inline(nr, a, kind);
            }
            let mut top = args[1] as usize;
            let _stack = if kind == CloneKind::Process {
                let Some(s) = ChildStack::map() else {
                    return -(libc::ENOMEM as i64);
                };
                // glibc's clone() child pops `fn` and `arg` from the top
                // of the stack it was given: move them along.
                // SAFETY: glibc stored these two words at the stack
                // pointer it passed; the new top has room above it.
                unsafe {
                    core::ptr::copy_nonoverlapping(top as *const u64, s.top() as *mut u64, 2)
                };
                top = s.top();
                a[1] = top as u64;
                Some(s)
            } else {
                None
            };
            clone_trampoline(nr, a, top, kind, uc)
        }
        _ => {
            // clone3(struct clone_args *, size)
            let size = args[1] as usize;
            if args[0] == 0 || !(64..=CLONE_ARGS_WORDS * 8).contains(&size) {
                // Unknown layout (or invalid): let the kernel judge.
                return raw::syscall6(nr, args);
            }
            let mut ca = [0u64; CLONE_ARGS_WORDS];
            // SAFETY: the program passed `size` readable bytes to clone3.
            unsafe {
                core::ptr::copy_nonoverlapping(args[0] as *const u8, ca.as_mut_ptr().cast(), size)
            };
            let stack_top = if ca[CA_STACK] != 0 {
                (ca[CA_STACK] + ca[CA_STACK_SIZE]) as usize
            } else {
                0
            };
            let (flags, kind) = classify(ca[CA_FLAGS], stack_top != 0);
            ca[CA_FLAGS] = flags;
            let mut a = args;
            if stack_top == 0 || kind == CloneKind::Raw {
                a[0] = ca.as_ptr() as u64;
                return clone_inline(nr, a, kind);
            }
            let mut stack_top = stack_top;
            let _stack = if kind == CloneKind::Process {
                let Some(s) = ChildStack::map() else {
                    return -(libc::ENOMEM as i64);
                };
                stack_top = s.top();
                ca[CA_STACK] = s.base as u64;
                ca[CA_STACK_SIZE] = (stack_top - s.base) as u64;
                Some(s)
            } else {
                None
            };
            // Only now, after the last write to `ca`, hand out its address.
            a[0] = ca.as_ptr() as u64;
            clone_trampoline(nr, a, stack_top, kind, uc)
        }
    }
}

/// A roomy stack for the child of a fork-like clone that came with a small
/// one. posix_spawn (hence `system` and `popen`) gives its child a stack of
/// a few tens of KiB, sized for glibc's own child code; once the clone
/// becomes a fork, that child runs the client (its `execve` is emulated)
/// inside a signal frame, which needs more. The child has its own copy of
/// memory, so the parent unmaps its copy as soon as the clone returns, and
/// the child's goes away at its exec (or exit).
struct ChildStack {
    base: usize,
}

const CHILD_STACK_BYTES: usize = 1 << 20;

impl ChildStack {
    fn map() -> Option<ChildStack> {
        let r = raw::syscall(
            libc::SYS_mmap,
            &[
                0,
                CHILD_STACK_BYTES as u64,
                (libc::PROT_READ | libc::PROT_WRITE) as u64,
                (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK) as u64,
                u64::MAX,
                0,
            ],
        );
        (r > 0).then_some(ChildStack { base: r as usize })
    }

    /// Initial stack pointer: 16-aligned, leaving 256 bytes above it.
    fn top(&self) -> usize {
        (self.base + CHILD_STACK_BYTES - 256) & !15
    }
}

impl Drop for ChildStack {
    fn drop(&mut self) {
        raw::syscall(
            libc::SYS_munmap,
            &[self.base as u64, CHILD_STACK_BYTES as u64],
        );
    }
}

/// Clone without a new stack: the child returns through this very handler
/// (a process with its own copy of our stack).
fn clone_inline(nr: i64, args: [u64; 6], kind: CloneKind) -> i64 {
    if kind != CloneKind::Process {
        return raw::syscall6(nr, args);
    }
    let prep = match client::fork_prepare() {
        Ok(p) => p,
        Err(e) => return -(e as i64),
    };
    let r = raw::syscall6(nr, args);
    if r == 0 {
        after_fork_in_child(prep);
    } else {
        client::fork_parent(prep, r);
    }
    r
}

/// Common child-side work after a fork-like clone. Runs with the selector
/// at ALLOW; the caller returns to program code with it at BLOCK.
fn after_fork_in_child(prep: ForkPrep) {
    sigdefer::forget_pending();
    stats::reset();
    client::fork_child(prep);
    let r = selector::enable_sud();
    if r != 0 {
        debug(&[b"enable SUD in child failed"], &[r]);
    }
}

/// Clone with a new stack, through the trampoline.
fn clone_trampoline(
    nr: i64,
    args: [u64; 6],
    stack_top: usize,
    kind: CloneKind,
    uc: &libc::ucontext_t,
) -> i64 {
    debug(
        &[b"clone via trampoline, kind/stack top"],
        &[kind as i64, stack_top as i64],
    );
    let block_addr = (stack_top - BLOCK_ROOM) & !15;
    let block = block_addr as *mut CloneBlock;
    let mut regs = [0i64; 17];
    regs.copy_from_slice(&uc.uc_mcontext.gregs[..17]);
    regs[libc::REG_RAX as usize] = 0;
    regs[libc::REG_RSP as usize] = stack_top as i64;
    let prep = if kind == CloneKind::Process {
        match client::fork_prepare() {
            Ok(p) => Some(p),
            Err(e) => return -(e as i64),
        }
    } else {
        None
    };
    // SAFETY: `block` lies in the unused top of the new stack the program
    // handed to clone (at least BLOCK_ROOM bytes below its top belong to
    // it); nothing else uses that memory until the child starts.
    unsafe {
        block.write(CloneBlock {
            regs,
            kind,
            prep: core::mem::MaybeUninit::uninit(),
        });
        if let Some(p) = &prep {
            // Bitwise copy for the child; the parent keeps `prep`.
            (*block).prep.write(core::ptr::read(p as *const ForkPrep));
        }
    }
    // SAFETY: `args` are the program's clone arguments (flags adjusted);
    // the child never returns here (it jumps back into program code).
    let r = unsafe { atoll_clone_raw(nr, &args, block.cast()) };
    if let Some(p) = prep {
        client::fork_parent(p, r);
    }
    r
}

/// First Rust code of a trampolined child, on its new stack.
///
/// # Safety
/// Called only by `atoll_clone_raw` in the child, with the block the parent
/// wrote.
unsafe extern "C" fn clone_child(block: *mut CloneBlock) {
    // SAFETY: the parent wrote a whole CloneBlock here before the clone.
    let kind = unsafe { (*block).kind };
    match kind {
        CloneKind::Process => {
            // Own copy of memory: the selector byte copied from the parent
            // says ALLOW (it was in this handler); take a guard anyway.
            let g = AtollGuard::enter();
            // SAFETY: written by the parent for a Process clone.
            let prep = unsafe { (*block).prep.assume_init_read() };
            after_fork_in_child(prep);
            core::mem::forget(g);
            selector::set(BLOCK);
        }
        CloneKind::Thread => {
            // Fresh TLS: this thread's selector starts at BLOCK.
            let g = AtollGuard::enter();
            // Its SIGSYS frames go to atoll's stack from the first trap
            // (the kernel gives a new thread no alternate stack).
            let r = altstack::arm();
            if r != 0 {
                debug(&[b"arming the thread's alternate stack failed"], &[r]);
            }
            // A rewritten site's entry finds this thread's stack at the
            // offset the first thread found, or moves no more.
            crate::stack::check_entry_offset();
            let r = selector::enable_sud();
            if r != 0 {
                debug(&[b"enable SUD in thread failed"], &[r]);
            }
            core::mem::forget(g);
            selector::set(BLOCK);
        }
        // Shared TLS: touching the selector would change the parent's.
        CloneKind::Unmonitored | CloneKind::Raw => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VM: u64 = libc::CLONE_VM as u64;
    const VFORK: u64 = libc::CLONE_VFORK as u64;
    const THREAD_FLAGS: u64 = (libc::CLONE_VM
        | libc::CLONE_FS
        | libc::CLONE_FILES
        | libc::CLONE_SIGHAND
        | libc::CLONE_THREAD
        | libc::CLONE_SYSVSEM
        | libc::CLONE_SETTLS
        | libc::CLONE_PARENT_SETTID
        | libc::CLONE_CHILD_CLEARTID) as u64;

    #[test]
    fn posix_spawn_style_vfork_becomes_a_fork() {
        let flags = VM | VFORK | libc::SIGCHLD as u64;
        let (f, k) = classify(flags, true);
        assert_eq!(k, CloneKind::Process);
        assert_eq!(f, libc::SIGCHLD as u64);
    }

    #[test]
    fn glibc_fork_flags_are_a_process_and_kept() {
        let flags = (libc::CLONE_CHILD_SETTID | libc::CLONE_CHILD_CLEARTID | libc::SIGCHLD) as u64;
        assert_eq!(classify(flags, false), (flags, CloneKind::Process));
    }

    #[test]
    fn pthread_create_flags_are_a_thread() {
        assert_eq!(
            classify(THREAD_FLAGS, true),
            (THREAD_FLAGS, CloneKind::Thread)
        );
    }

    #[test]
    fn shared_vm_without_tls_or_stack_is_left_alone() {
        assert_eq!(classify(VM, true).1, CloneKind::Unmonitored);
        assert_eq!(
            classify(VM | libc::CLONE_SETTLS as u64, false).1,
            CloneKind::Raw
        );
    }

    #[test]
    fn block_layout_matches_the_trampoline() {
        assert_eq!(core::mem::offset_of!(CloneBlock, regs), 0);
        assert_eq!(libc::REG_RAX, 13);
        assert_eq!(libc::REG_RCX, 14);
        assert_eq!(libc::REG_RSP, 15);
        assert_eq!(libc::REG_RIP, 16);
    }
}
