//! Atoll's own stack for the client's work.
//!
//! A system call costs the program no stack on Linux: the kernel runs it on
//! a kernel stack. atoll's client runs on the caller's stack instead, and
//! needs tens of KiB of it (path buffers, message frames, the dispatch's
//! own frames). Programs budget their stacks for Linux: a handler on a
//! 16 KiB alternate signal stack (CPython's `faulthandler` gives every
//! handler one), a goroutine of a Go program (a few KiB, grown by copying
//! only where Go itself checks), a thread made with `PTHREAD_STACK_MIN`.
//! Run there, the client wrote below the stack into whatever lay next to
//! it: heap blocks, another goroutine's stack.
//!
//! So the client's work runs on a stack of atoll's own, one per thread:
//! 256 KiB of address space reserved without backing (`MAP_NORESERVE`;
//! only the pages a call touches are ever committed) above a guard page,
//! made at the thread's first atoll call and unmapped when the thread
//! exits (`SYS_exit`, [`exit_thread`]; the whole process's go with
//! `exit_group` and `execve`). The SIGSYS handler and the client's
//! dispatch run on it. A call that comes while the thread already runs on it (a
//! program handler's call during a host call atoll makes) stays there.
//!
//! The stack is also the thread's alternate signal stack (`altstack`), so
//! the kernel's SIGSYS frame of a trapped call (about 3 KiB with the
//! extended state) lands here too, and a rewritten site's entry moves here
//! before it saves the extended state (`rewrite::entry`, through
//! [`ENTRY_TOP_OFFSET`]). What still lands on the program's stack: the few
//! frames of a wrapper before the switch, and a rewritten site's saved
//! state while a program handler runs on the program's alternate stack
//! (the entry then stays there, whose handler budgets for it). Unwinding
//! stops at the switch: a debugger's backtrace from inside the client ends
//! there, and a panic is caught on the far side ([`crate::client`] wraps
//! every call in `catch_unwind`).
//!
//! Limits: the stack is found through the thread's TLS block, so two
//! threads that share one (a raw `clone(CLONE_VM)` without `CLONE_SETTLS`
//! whose parent keeps running) would share it; glibc, Go and every
//! threading library give each thread its own.

use core::cell::Cell;
use core::ffi::c_void;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::raw;

/// Usable bytes of a thread's atoll stack.
pub(crate) const STACK_BYTES: usize = 256 * 1024;
/// The inaccessible page below it: an overflow faults instead of writing
/// into the next mapping.
const GUARD_BYTES: usize = 4096;

thread_local! {
    // Const-initialised, no Drop: readable from the SIGSYS handler and
    // from a thread's first instructions.
    /// Lowest address of this thread's stack mapping (its guard page), or
    /// 0 when it has none.
    static BASE: Cell<usize> = const { Cell::new(0) };
    /// Where work coming from off the stack starts (0: at the top): below
    /// atoll's live frames while a program handler runs elsewhere
    /// (`altstack::run_program_handler`).
    static FREE_TOP: Cell<usize> = const { Cell::new(0) };
    /// Where a rewritten site's entry moves the stack pointer before it
    /// saves anything, or 0 where it stays on the program's stack: this
    /// stack's top, while it is mapped and no program handler runs on the
    /// program's alternate stack (a signal that came during the entry's
    /// first instructions would not know where that handler is). Read by
    /// the entry's assembly at [`ENTRY_TOP_OFFSET`] from the thread pointer.
    static ENTRY_TOP: Cell<usize> = const { Cell::new(0) };
}

/// Offset of [`ENTRY_TOP`] from the thread pointer (`%fs:0`), the same in
/// every thread while libatoll's TLS is in the static TLS block (it is
/// loaded at start, with `LD_PRELOAD`); 0 when unknown, and the entry then
/// never moves. Checked again in every thread the clone trampoline starts.
pub static ENTRY_TOP_OFFSET: AtomicU64 = AtomicU64::new(0);

/// Find [`ENTRY_TOP_OFFSET`] on this thread, or, when a thread finds
/// another offset than the one known (TLS not static), give up on it for
/// good: 0.
pub fn check_entry_offset() {
    let here = ENTRY_TOP.with(|c| c as *const Cell<usize> as u64);
    let offset = here.wrapping_sub(thread_pointer());
    let known = ENTRY_TOP_OFFSET.load(Ordering::Relaxed);
    let next = match known {
        0 if !REFUSED.load(Ordering::Relaxed) => offset,
        k if k == offset => k,
        _ => {
            REFUSED.store(true, Ordering::Relaxed);
            0
        }
    };
    ENTRY_TOP_OFFSET.store(next, Ordering::Relaxed);
}

/// A thread found another offset: the entry never moves again.
static REFUSED: AtomicBool = AtomicBool::new(false);

/// The thread pointer: the TCB's pointer to itself at `%fs:0`.
fn thread_pointer() -> u64 {
    let tp: u64;
    // SAFETY: on x86-64 Linux `%fs:0` holds the thread pointer (the TCB
    // points to itself, as the TLS ABI requires); a plain load.
    unsafe {
        core::arch::asm!("mov {}, qword ptr fs:[0]", out(reg) tp, options(nostack, readonly, preserves_flags))
    };
    tp
}

/// Make work that comes from off this thread's atoll stack start at
/// `free_top` (0: at the top again). Returns the previous setting.
pub fn set_free_top(free_top: usize) -> usize {
    let prev = FREE_TOP.replace(free_top);
    publish_entry_top();
    prev
}

/// Keep [`ENTRY_TOP`] in step with the stack and [`FREE_TOP`].
fn publish_entry_top() {
    let base = BASE.get();
    let top = if base == 0 || FREE_TOP.get() != 0 {
        0
    } else {
        base + GUARD_BYTES + STACK_BYTES
    };
    ENTRY_TOP.set(top);
}

/// Run `f` on this thread's atoll stack (made on first use). Runs it on
/// the current stack when that is already the atoll stack, or when none
/// can be mapped. `f` must not unwind: wrap it in `catch_unwind`.
#[inline]
pub fn run<F: FnOnce() -> R, R>(f: F) -> R {
    let Some(top) = top() else {
        return f();
    };
    let here = current_sp();
    if here <= top && here > top - STACK_BYTES {
        return f();
    }
    let start = match FREE_TOP.get() {
        free if free > top - STACK_BYTES && free < top => free & !15,
        _ => top,
    };
    let mut slot: (Option<F>, Option<R>) = (Some(f), None);
    // SAFETY: `start` is the 4096-aligned end of a fresh read-write mapping
    // of STACK_BYTES that nothing else uses while this thread runs on it,
    // or a 16-aligned point in it below which nothing lives;
    // `slot` lives on the caller's stack until the call returns.
    unsafe {
        call_on(
            start,
            trampoline::<F, R>,
            &mut slot as *mut _ as *mut c_void,
        )
    };
    slot.1
        .expect("the closure ran on the atoll stack and stored its result")
}

/// This thread's atoll stack as `(lowest usable address, usable bytes)`,
/// mapped first if needed (the guard page below is left out): the region
/// the kernel gets as the thread's alternate signal stack (`altstack`).
pub fn region() -> Option<(usize, usize)> {
    top().map(|top| (top - STACK_BYTES, STACK_BYTES))
}

/// Run `f` with the stack pointer at `top` (16-byte aligned, the end of
/// memory that `f` may use), then come back. `f` gets the stack pointer
/// this thread left: everything from it up stays live while `f` runs.
/// `f` must not unwind.
///
/// # Safety
/// `top` is the aligned end of writable memory large enough for `f`,
/// which nothing live on this thread lies in below `top`.
pub unsafe fn run_at<F: FnOnce(usize) -> R, R>(top: usize, f: F) -> R {
    let mut slot: (Option<F>, Option<R>) = (Some(f), None);
    // SAFETY: the caller's contract on `top`; `slot` lives on this stack
    // until the call returns.
    unsafe {
        call_on(
            top,
            trampoline_at::<F, R>,
            &mut slot as *mut _ as *mut c_void,
        )
    };
    slot.1
        .expect("the closure ran on the given stack and stored its result")
}

/// End this thread (`exit(2)` with `status`), giving its stack back.
/// Works on any stack, the atoll stack included: the unmapping and the
/// exit are two system calls with no stack access between them (as musl
/// frees a detached thread's stack).
pub fn exit_thread(status: u64) -> ! {
    let base = BASE.get();
    let len = if base == 0 {
        0
    } else {
        (GUARD_BYTES + STACK_BYTES) as u64
    };
    // The stack is also the thread's alternate signal stack (`altstack`):
    // a signal delivered between the unmapping and the exit would find
    // its frame's memory gone and kill the process. A dying thread needs
    // no signals (process-wide ones go to another thread).
    let all = u64::MAX;
    raw::syscall(
        libc::SYS_rt_sigprocmask,
        &[libc::SIG_SETMASK as u64, &all as *const u64 as u64, 0, 8],
    );
    // SAFETY: munmap of this thread's own stack mapping (or of nothing:
    // a zero length fails harmlessly), then exit; nothing touches memory
    // after the first `syscall`, and the thread never returns.
    unsafe {
        core::arch::asm!(
            "syscall",
            "mov eax, {exit}",
            "mov rdi, rdx",
            "syscall",
            "ud2",
            exit = const libc::SYS_exit,
            // Not RCX or R11, which the first `syscall` overwrites.
            in("rdx") status,
            in("rax") libc::SYS_munmap,
            in("rdi") base,
            in("rsi") len,
            options(noreturn, nostack),
        )
    }
}

/// Give back this thread's stack (tests; a thread's end uses
/// [`exit_thread`]). Must not be called while running on it.
#[cfg(test)]
fn release() {
    let base = BASE.get();
    if base != 0 {
        BASE.set(0);
        publish_entry_top();
        raw::syscall(
            libc::SYS_munmap,
            &[base as u64, (GUARD_BYTES + STACK_BYTES) as u64],
        );
    }
}

/// The top of this thread's stack, mapping it first if needed.
fn top() -> Option<usize> {
    let mut base = BASE.get();
    if base == 0 {
        base = map_stack()?;
        BASE.set(base);
        publish_entry_top();
    }
    Some(base + GUARD_BYTES + STACK_BYTES)
}

/// Map a stack with its guard page; its lowest address.
fn map_stack() -> Option<usize> {
    let len = (GUARD_BYTES + STACK_BYTES) as u64;
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_STACK;
    let base = raw::syscall(
        libc::SYS_mmap,
        &[
            0,
            len,
            (libc::PROT_READ | libc::PROT_WRITE) as u64,
            flags as u64,
            u64::MAX,
            0,
        ],
    );
    if base < 0 && base > -4096 {
        return None;
    }
    let base = base as usize;
    raw::syscall(
        libc::SYS_mprotect,
        &[base as u64, GUARD_BYTES as u64, libc::PROT_NONE as u64],
    );
    Some(base)
}

/// Run the closure in `slot` (a `(Option<F>, Option<R>)`) and store its
/// result there.
///
/// # Safety
/// `slot` points to a live `(Option<F>, Option<R>)` holding the closure.
unsafe extern "C" fn trampoline<F: FnOnce() -> R, R>(slot: *mut c_void, _left: usize) {
    // SAFETY: the caller passes the slot `run` made, alive until we return.
    let slot = unsafe { &mut *(slot as *mut (Option<F>, Option<R>)) };
    if let Some(f) = slot.0.take() {
        slot.1 = Some(f());
    }
}

/// Run the closure in `slot` (a `(Option<F>, Option<R>)`) with the stack
/// pointer left behind, and store its result there.
///
/// # Safety
/// `slot` points to a live `(Option<F>, Option<R>)` holding the closure.
unsafe extern "C" fn trampoline_at<F: FnOnce(usize) -> R, R>(slot: *mut c_void, left: usize) {
    // SAFETY: the caller passes the slot `run_at` made, alive until we return.
    let slot = unsafe { &mut *(slot as *mut (Option<F>, Option<R>)) };
    if let Some(f) = slot.0.take() {
        slot.1 = Some(f(left));
    }
}

/// Call `f(arg, sp)` with the stack pointer at `top`, where `sp` is the
/// stack pointer this stack is left with, then come back to this stack.
///
/// # Safety
/// `top` is the 16-byte aligned end of writable memory large enough for
/// `f`, used by nothing else meanwhile; `f` does not unwind.
#[inline(never)]
unsafe fn call_on(top: usize, f: unsafe extern "C" fn(*mut c_void, usize), arg: *mut c_void) {
    // SAFETY: R12 is callee-saved, so it still holds our stack pointer when
    // `f` returns; `out("r12")` keeps the inputs out of it. The call sees
    // an aligned stack (`top` is 16-byte aligned) and may clobber what the
    // C ABI lets it.
    unsafe {
        core::arch::asm!(
            "mov r12, rsp",
            "mov rsi, rsp",
            "mov rsp, {top}",
            "call {f}",
            "mov rsp, r12",
            top = in(reg) top,
            f = in(reg) f,
            in("rdi") arg,
            out("rsi") _,
            out("r12") _,
            clobber_abi("C"),
        );
    }
}

/// The stack pointer of the caller's frame (near enough: within it).
#[inline(always)]
fn current_sp() -> usize {
    let sp: usize;
    // SAFETY: reads RSP only.
    unsafe {
        core::arch::asm!("mov {}, rsp", out(reg) sp, options(nomem, nostack, preserves_flags))
    };
    sp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_runs_on_the_atoll_stack_and_nested_work_stays_there() {
        let outer = current_sp();
        let (inner, nested) = run(|| (current_sp(), run(current_sp)));
        let base = BASE.get();
        assert_ne!(base, 0);
        let (lo, hi) = (base + GUARD_BYTES, base + GUARD_BYTES + STACK_BYTES);
        assert!(
            !(lo..hi).contains(&outer),
            "the test starts on its own stack"
        );
        assert!(
            (lo..hi).contains(&inner),
            "the closure ran on the atoll stack"
        );
        assert!(
            (lo..hi).contains(&nested) && nested <= inner,
            "nested work stays below"
        );
        assert_eq!(run(|| 7 * 6), 42, "results come back");
    }

    #[test]
    fn deep_work_fits_and_release_unmaps() {
        let sum = run(|| {
            let big = [1u8; 128 * 1024];
            core::hint::black_box(&big)
                .iter()
                .map(|&b| b as usize)
                .sum::<usize>()
        });
        assert_eq!(sum, 128 * 1024);
        let base = BASE.get();
        release();
        assert_eq!(BASE.get(), 0);
        // The mapping is gone: mincore of an unmapped range is ENOMEM.
        let mut vec = [0u8; 1];
        let r = raw::syscall(
            libc::SYS_mincore,
            &[base as u64, 4096, vec.as_mut_ptr() as u64],
        );
        assert_eq!(r, -(libc::ENOMEM as i64));
        // A later call maps a new one.
        assert_eq!(run(|| 1), 1);
        assert_ne!(BASE.get(), 0);
    }
}
