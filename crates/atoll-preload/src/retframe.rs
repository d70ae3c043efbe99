//! Deferred program signals delivered in the program's own frame at a
//! libc wrapper's return.
//!
//! Linux delivers a signal that came during a system call as the call
//! returns: the handler's `ucontext` holds the program's registers there.
//! A trapped call gets that from its SIGSYS frame (`sigdefer::
//! deliver_into_frame`). A wrapper (`wrappers`) is a function the program
//! called, so the state to show is the program's *after the call returns*:
//! RIP = the return address, RSP = the caller's stack pointer after the
//! return, RAX = the result, and the callee-saved registers (RBX, RBP,
//! R12-R15) as the program will find them. The compiled wrapper does not
//! know where its caller's registers are saved, but its unwind tables do:
//! the unwinder (`_Unwind_Backtrace`, as a debugger walks a stack) finds
//! the first frame outside libatoll, its return address, the stack pointer
//! its callee's frame ends at (that frame's CFA), and its callee-saved
//! registers restored as the return will restore them.
//!
//! Those go to a *gate*: a `syscall` instruction on a page of its own,
//! outside libatoll's text, so Syscall User Dispatch traps it. Its SIGSYS
//! frame is a real kernel frame (FP state, mask, alternate stack); the
//! handler ([`enter_program_frame`]) writes the program's registers into
//! it and queues the deferred signals again, blocked until its sigreturn.
//! The sigreturn then lands in the program at the return address with the
//! result in RAX, and the kernel delivers the signals there, in frames
//! built from those registers, as after a real system call; a handler's
//! change to `uc_mcontext` holds when it returns. The wrapper's own frames
//! are abandoned (they hold nothing: the guard is dropped first).
//!
//! Caller-saved registers other than RAX show what atoll left in them
//! (Linux shows what libc left); a wrapper whose unwinding fails, or a
//! thread without Syscall User Dispatch, delivers in atoll's frame at the
//! end of the call, as before.

use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicUsize, Ordering};

use crate::raw;
use crate::selector::{self, AtollGuard};
use crate::sigdefer::{self, FrameDelivery};

/// The number the gate traps with: no Linux system call has it.
pub const GATE_NR: i64 = 0x4154_4f4c;

/// The gate's `syscall` instruction within its page (the bytes before it
/// are zero, which no rewriting pattern matches).
const GATE_OFFSET: usize = 64;
/// `syscall`, then `ret` (reached only where Syscall User Dispatch is off:
/// the SIGSYS handler never returns to the gate).
const GATE_CODE: [u8; 3] = [0x0f, 0x05, 0xc3];
const PAGE: usize = 4096;

/// Address of the gate's `syscall` (0: not made yet). Shared by threads;
/// a fork child inherits the page.
static GATE: AtomicUsize = AtomicUsize::new(0);

/// DWARF numbers of the callee-saved registers, in [`ProgramFrame::saved`]
/// order: RBX, RBP, R12, R13, R14, R15.
const CALLEE_SAVED_DWARF: [c_int; 6] = [3, 6, 12, 13, 14, 15];
/// `REG_*` indexes of the same registers in `mcontext_t.gregs`.
const CALLEE_SAVED_GREGS: [i32; 6] = [
    libc::REG_RBX,
    libc::REG_RBP,
    libc::REG_R12,
    libc::REG_R13,
    libc::REG_R14,
    libc::REG_R15,
];

/// The program's registers at a wrapper's return.
#[derive(Clone, Copy, Default)]
struct ProgramFrame {
    rip: u64,
    rsp: u64,
    rax: u64,
    saved: [u64; 6],
}

thread_local! {
    // Const-initialised, no Drop: readable from the SIGSYS handler.
    static FRAME: core::cell::Cell<Option<ProgramFrame>> = const { core::cell::Cell::new(None) };
    /// Wrappers built on other wrappers running on this thread ([`Nested`]).
    static NESTED: core::cell::Cell<u32> = const { core::cell::Cell::new(0) };
}

/// While alive, this thread runs a wrapper built on other wrappers
/// (`remove` on `unlink` and `rmdir`, `statvfs` on `statfs`, directory
/// streams on `open`, `getdents64`, `lseek`, `close`). The inner wrapper's
/// return is not the program's: the first frame outside libatoll is the
/// program's call of the *outer* wrapper, so delivering there would hand
/// the program the inner call's result as the outer one's and skip the
/// outer wrapper's own work (a `statvfs` returning 0 with the caller's
/// buffer never filled, an `opendir` returning a descriptor as a stream).
/// Signals deferred under it are delivered in atoll's frame at the inner
/// call's end instead (the fallback of [`finish`]); the outer wrapper then
/// completes and returns as usual. A handler that leaves by `siglongjmp`
/// from inside one skips its drop: the thread's later deliveries then take
/// the fallback too (the handler's `ucontext` shows atoll's frame; what
/// the program gets is unchanged).
pub struct Nested {
    _not_send: core::marker::PhantomData<*const ()>,
}

impl Nested {
    #[inline]
    pub fn enter() -> Nested {
        NESTED.with(|n| n.set(n.get() + 1));
        Nested {
            _not_send: core::marker::PhantomData,
        }
    }
}

impl Drop for Nested {
    #[inline]
    fn drop(&mut self) {
        NESTED.with(|n| n.set(n.get().saturating_sub(1)));
    }
}

/// Is a wrapper built on other wrappers running on this thread?
fn nested() -> bool {
    NESTED.with(|n| n.get() > 0)
}

#[allow(improper_ctypes)]
extern "C" {
    fn _Unwind_Backtrace(
        trace: extern "C" fn(*mut c_void, *mut c_void) -> c_int,
        arg: *mut c_void,
    ) -> c_int;
    fn _Unwind_GetIP(ctx: *mut c_void) -> usize;
    fn _Unwind_GetGR(ctx: *mut c_void, reg: c_int) -> usize;
    fn _Unwind_GetCFA(ctx: *mut c_void) -> usize;
}

/// The end of a wrapper whose call atoll answered with `rax` (as the
/// program reads it; errno is already set). With deferred signals, they
/// are delivered in the program's frame at the return (never returns);
/// otherwise the guard and the frame mode are dropped as usual.
/// Hot path (every wrapper call atoll answers): one thread-local load
/// when nothing is pending.
#[inline]
pub fn finish(guard: AtollGuard, frame: FrameDelivery, rax: i64) {
    if !sigdefer::any_pending() {
        // Mode first: a signal deferred since the look is delivered by the
        // guard's drop.
        drop(frame);
        drop(guard);
        return;
    }
    deliver_at_return(guard, frame, rax);
}

/// [`finish`] with signals pending.
#[cold]
#[inline(never)]
fn deliver_at_return(guard: AtollGuard, frame: FrameDelivery, rax: i64) {
    // The program's errno, as the wrapper set it; the unwinder may touch it.
    let errno = raw::errno();
    // Inside a wrapper built on wrappers the program's frame is not this
    // call's return (see `Nested`): deliver in atoll's frame.
    let program = if nested() { None } else { caller_frame() };
    let gate = gate();
    let (Some(mut program), Some(gate)) = (program, gate) else {
        // Delivered by the guard's drop, in atoll's frame, as before.
        raw::set_errno(errno);
        drop(frame);
        drop(guard);
        return;
    };
    program.rax = rax as u64;
    FRAME.with(|f| f.set(Some(program)));
    // The selector goes back to BLOCK (the gate must trap); the frame mode
    // still says the signals are ours, so the drop leaves them pending.
    drop(guard);
    drop(frame);
    raw::set_errno(errno);
    // SAFETY: the gate's `syscall` traps; its SIGSYS handler sends the
    // thread to the program's return address with the program's stack
    // pointer, so nothing of this frame or its callers' is used again
    // (none holds anything that needs dropping: guard and mode are gone).
    // Only if Syscall User Dispatch is off on this thread does the gate
    // return, with ENOSYS.
    unsafe {
        core::arch::asm!(
            "call {gate}",
            gate = in(reg) gate,
            inout("rax") GATE_NR => _,
            clobber_abi("C"),
        );
    }
    FRAME.with(|f| f.set(None));
    sigdefer::deliver_pending(None);
}

/// In the SIGSYS handler, a trap with [`GATE_NR`]: if it came from the
/// gate with a program frame waiting, put that frame into `uc` and deliver
/// the deferred signals into it. False for anything else (a program that
/// issues the number itself gets `ENOSYS` as usual).
pub fn enter_program_frame(uc: &mut libc::ucontext_t) -> bool {
    let gate = GATE.load(Ordering::Acquire);
    let g = &mut uc.uc_mcontext.gregs;
    if gate == 0 || g[libc::REG_RIP as usize] as usize != gate + 2 {
        return false;
    }
    let Some(program) = FRAME.with(|f| f.take()) else {
        return false;
    };
    g[libc::REG_RIP as usize] = program.rip as i64;
    g[libc::REG_RSP as usize] = program.rsp as i64;
    for (i, reg) in CALLEE_SAVED_GREGS.iter().enumerate() {
        g[*reg as usize] = program.saved[i] as i64;
    }
    sigdefer::deliver_into_frame(uc, GATE_NR, program.rax as i64, true);
    true
}

/// What the unwinder walk keeps between frames.
struct Walk {
    frames: u32,
    found: Option<ProgramFrame>,
}

/// Frames of atoll code at most between here and the program.
const MAX_ATOLL_FRAMES: u32 = 32;

/// One frame of the walk: the first outside libatoll (after our own) is
/// the program's. libgcc's context for a frame carries the CFA of the
/// frame it was reached from (its callee, here the wrapper): the stack
/// pointer the program has once the call returns.
extern "C" fn step(ctx: *mut c_void, arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the `Walk` that `caller_frame` passed; `ctx` the
    // unwinder's live context for this frame.
    let (walk, ip) = unsafe { (&mut *(arg as *mut Walk), _Unwind_GetIP(ctx)) };
    let (start, len) = selector::region();
    walk.frames += 1;
    if ip == 0 || walk.frames > MAX_ATOLL_FRAMES {
        return 1;
    }
    if walk.frames == 1 || (start..start + len).contains(&ip) {
        return 0;
    }
    let mut saved = [0u64; 6];
    for (i, reg) in CALLEE_SAVED_DWARF.iter().enumerate() {
        // SAFETY: as above; the indexes are valid x86-64 registers.
        saved[i] = unsafe { _Unwind_GetGR(ctx, *reg) } as u64;
    }
    walk.found = Some(ProgramFrame {
        rip: ip as u64,
        // SAFETY: as above.
        rsp: unsafe { _Unwind_GetCFA(ctx) } as u64,
        rax: 0,
        saved,
    });
    1
}

/// The program's frame that called the wrapper running on this thread.
fn caller_frame() -> Option<ProgramFrame> {
    let mut walk = Walk {
        frames: 0,
        found: None,
    };
    // SAFETY: `step` only reads the contexts the unwinder hands it and
    // writes `walk`, which outlives the call.
    unsafe { _Unwind_Backtrace(step, &mut walk as *mut Walk as *mut c_void) };
    walk.found.filter(|f| f.rsp != 0 && f.rip != 0)
}

/// The gate's address, its page made on first use.
fn gate() -> Option<usize> {
    let have = GATE.load(Ordering::Acquire);
    if have != 0 {
        return Some(have);
    }
    let page = raw::syscall(
        libc::SYS_mmap,
        &[
            0,
            PAGE as u64,
            (libc::PROT_READ | libc::PROT_WRITE) as u64,
            (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS) as u64,
            u64::MAX,
            0,
        ],
    );
    if page <= 0 {
        return None;
    }
    let at = page as usize + GATE_OFFSET;
    // SAFETY: a fresh private page of ours, writable until the mprotect.
    unsafe { core::ptr::copy_nonoverlapping(GATE_CODE.as_ptr(), at as *mut u8, GATE_CODE.len()) };
    let rx = (libc::PROT_READ | libc::PROT_EXEC) as u64;
    if raw::syscall(libc::SYS_mprotect, &[page as u64, PAGE as u64, rx]) != 0 {
        raw::syscall(libc::SYS_munmap, &[page as u64, PAGE as u64]);
        return None;
    }
    match GATE.compare_exchange(0, at, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => Some(at),
        Err(other) => {
            raw::syscall(libc::SYS_munmap, &[page as u64, PAGE as u64]);
            Some(other)
        }
    }
}
