//! Alternate signal stacks: atoll's for the kernel, the program's virtual.
//!
//! Every trapped system call is a SIGSYS, and the kernel writes its frame
//! (about 3 KiB with the extended state) where the thread's stack pointer
//! is, before atoll's handler can move to its own stack (`stack`). A Go
//! goroutine's stack is a few KiB, grown only where Go itself checks: the
//! frame ran over it (`unexpected return pc`, `signal arrived on non-Go
//! stack`). So SIGSYS is handled on an alternate stack (`SA_ONSTACK`), and
//! the kernel's alternate stack of every thread is atoll's own stack
//! ([`crate::stack::region`]): armed at start and in a new thread's first
//! instructions (the clone trampoline), or, for a thread that missed both,
//! by the first trap's sigreturn (the frame's `uc_stack` is what it
//! installs). A trap that comes while the thread already runs on atoll's
//! stack is pushed below, as the kernel does on an alternate stack.
//!
//! The program's own `sigaltstack` is kept here, per thread, and never
//! reaches the kernel: a trapped `sigaltstack` reads and sets it with the
//! kernel's rules, judged by the program's stack pointer ([`sigaltstack`]).
//! A program handler installed with `SA_ONSTACK` is delivered by the
//! kernel on atoll's stack, into atoll's entry (`sigdefer`), which runs it
//! on the program's alternate stack as Linux would have
//! ([`run_program_handler`]): at its top, or below the stack pointer when
//! the program already runs there; its `ucontext` shows the program's
//! alternate stack. Go checks that its handlers run on its `gsignal` stack,
//! and that `sigaltstack` reports what it set.
//!
//! While a handler runs on the program's stack, atoll's stack holds live
//! frames (the kernel's frame of that signal, the entry's); a trap in the
//! handler would be placed at the top of the kernel's alternate stack, and
//! a wrapper's work would start there (`stack::run`), over them. So both
//! start below them for the handler's time (one `sigaltstack` call, issued
//! off atoll's stack, where the kernel allows it, and
//! `stack::set_free_top`); the sigreturn of the signal's frame restores
//! the whole alternate stack from its `uc_stack`, and the entry gives it
//! back before it returns to atoll's stack. Should a handler leave with
//! `longjmp`, the next trap from program code outside it undoes the cut.
//!
//! The kernel writes an `SA_ONSTACK` frame at the top of the alternate
//! stack whenever the thread's stack pointer is not on it. So no signal
//! may come while live frames of atoll lie inside the kernel's alternate
//! stack and the thread runs off it, nor before an entry has recorded
//! where the program was (a handler started at the top of the program's
//! alternate stack, not knowing one ran there already): the SIGSYS handler
//! and the entry of program handlers are installed with every other
//! signal blocked, and let them in only where that holds (`sigsys`,
//! `sigdefer::entry_action`, [`run_program_handler`]).

use core::cell::Cell;

use crate::raw;
use crate::stack;

/// The kernel's `MINSIGSTKSZ` on x86-64: smaller stacks are `ENOMEM`.
const MIN_SIGSTACK: usize = 2048;
/// `SS_AUTODISARM`: the stack is disabled while a handler runs on it.
const SS_AUTODISARM: i32 = 1 << 31;
/// The System V red zone below a function's stack pointer.
const RED_ZONE: usize = 128;

/// The program's alternate stack of one thread, as `sigaltstack` set it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProgramStack {
    /// Lowest address; 0 with `size` 0 when disabled (never set).
    pub sp: usize,
    pub size: usize,
    /// `SS_AUTODISARM` when asked for.
    pub flags: i32,
}

impl ProgramStack {
    const DISABLED: ProgramStack = ProgramStack {
        sp: 0,
        size: 0,
        flags: 0,
    };

    fn enabled(&self) -> bool {
        self.size != 0
    }

    /// Is `sp` (a stack pointer) on this stack? Never with `SS_AUTODISARM`
    /// (the kernel's `on_sig_stack`).
    fn holds(&self, sp: usize) -> bool {
        self.flags & SS_AUTODISARM == 0 && sp > self.sp && sp - self.sp <= self.size
    }

    /// What `sigaltstack` reports to a program at stack pointer `sp`.
    pub fn report(&self, sp: usize) -> libc::stack_t {
        let state = if !self.enabled() {
            libc::SS_DISABLE
        } else if self.holds(sp) {
            libc::SS_ONSTACK
        } else {
            0
        };
        libc::stack_t {
            ss_sp: self.sp as *mut libc::c_void,
            ss_flags: state | (self.flags & SS_AUTODISARM),
            ss_size: self.size,
        }
    }

    /// The stack after a `sigaltstack(new)` by a program at `sp`, or the
    /// errno the kernel gives (`do_sigaltstack`).
    pub fn set(&self, new: &libc::stack_t, sp: usize) -> Result<ProgramStack, i32> {
        if self.enabled() && self.holds(sp) {
            return Err(libc::EPERM);
        }
        let mode = new.ss_flags & !SS_AUTODISARM;
        if mode != libc::SS_DISABLE && mode != libc::SS_ONSTACK && mode != 0 {
            return Err(libc::EINVAL);
        }
        if mode == libc::SS_DISABLE {
            return Ok(ProgramStack::DISABLED);
        }
        if new.ss_size < MIN_SIGSTACK {
            return Err(libc::ENOMEM);
        }
        Ok(ProgramStack {
            sp: new.ss_sp as usize,
            size: new.ss_size,
            flags: new.ss_flags & SS_AUTODISARM,
        })
    }

    /// Where a handler delivered to a program at `sp` starts on this
    /// stack: below `sp` (past its red zone) when it already runs there,
    /// else at the top. 16-byte aligned, as the ABI wants at a call.
    pub fn handler_top(&self, sp: usize) -> usize {
        let top = if self.holds(sp) {
            sp - RED_ZONE
        } else {
            self.sp + self.size
        };
        top & !15
    }
}

thread_local! {
    // Const-initialised, no Drop: read from signal handlers.
    /// This thread's alternate stack as the program set it.
    static PROGRAM: Cell<ProgramStack> = const { Cell::new(ProgramStack::DISABLED) };
    /// The program's stack pointer at the trap in progress on this thread,
    /// or 0: a handler delivered inside that trap's host call finds the
    /// program's stack pointer here, not in its own frame (which is
    /// atoll's).
    static TRAP_SP: Cell<usize> = const { Cell::new(0) };
    /// `(lowest, highest)` address of the program's alternate stack while
    /// a handler that atoll runs there has the kernel's stack cut, or
    /// `(0, 0)`.
    static CUT_FOR: Cell<(usize, usize)> = const { Cell::new((0, 0)) };
}

/// Make atoll's stack this thread's alternate signal stack. Must run off
/// that stack (the kernel refuses a change while on it). Returns the raw
/// `sigaltstack` result.
pub fn arm() -> i64 {
    let Some((lo, size)) = stack::region() else {
        return -(libc::ENOMEM as i64);
    };
    kernel_sigaltstack(lo, size)
}

/// Give the kernel back the alternate stack a signal frame saved
/// (`uc_stack`), as its sigreturn would. Must run off that stack.
fn set_kernel_stack(saved: &libc::stack_t) {
    let ss = libc::stack_t {
        ss_sp: saved.ss_sp,
        // SS_ONSTACK in a saved stack only says where the thread was.
        ss_flags: saved.ss_flags & !libc::SS_ONSTACK,
        ss_size: saved.ss_size,
    };
    raw::syscall(libc::SYS_sigaltstack, &[&ss as *const _ as u64, 0]);
}

fn kernel_sigaltstack(lo: usize, size: usize) -> i64 {
    let ss = libc::stack_t {
        ss_sp: lo as *mut libc::c_void,
        ss_flags: 0,
        ss_size: size,
    };
    raw::syscall(libc::SYS_sigaltstack, &[&ss as *const _ as u64, 0])
}

/// In the SIGSYS handler (on atoll's stack): a trap from program code
/// leaves with atoll's whole stack as the alternate stack (the sigreturn
/// installs `uc_stack`), which arms a thread that missed it. Not a trap
/// from atoll's stack (nested), nor one from a handler that atoll runs on
/// the program's alternate stack (its cut holds); a cut left behind by a
/// handler that left with `longjmp` is undone. Returns the program's stack
/// pointer at the trap, for [`TrapScope`].
pub fn on_trap(uc: &mut libc::ucontext_t) -> usize {
    let sp = uc.uc_mcontext.gregs[libc::REG_RSP as usize] as usize;
    let Some((lo, size)) = stack::region() else {
        return sp;
    };
    if sp > lo && sp - lo <= size {
        return sp;
    }
    let (cut_lo, cut_hi) = CUT_FOR.get();
    if cut_hi != 0 {
        if sp > cut_lo && sp <= cut_hi {
            return sp;
        }
        CUT_FOR.set((0, 0));
        stack::set_free_top(0);
    }
    // Program code outside any handler atoll runs: no trap is in progress
    // (a handler that left one with `longjmp` left its mark behind).
    TRAP_SP.set(0);
    uc.uc_stack = libc::stack_t {
        ss_sp: lo as *mut libc::c_void,
        ss_flags: 0,
        ss_size: size,
    };
    sp
}

/// While alive, handlers run inside this trap see `sp` as the program's
/// stack pointer, unless `sp` is on atoll's stack (a trap from a handler
/// running there keeps the one of the trap it runs in).
pub struct TrapScope {
    prev: usize,
}

impl TrapScope {
    pub fn enter(sp: usize) -> TrapScope {
        let prev = TRAP_SP.get();
        let inside = stack::region().is_some_and(|(lo, size)| sp > lo && sp - lo <= size);
        if !inside {
            TRAP_SP.set(sp);
        }
        TrapScope { prev }
    }
}

impl Drop for TrapScope {
    fn drop(&mut self) {
        TRAP_SP.set(self.prev);
    }
}

/// Is a handler that atoll runs on the program's alternate stack in
/// progress on this thread (or one that left it with `longjmp`)?
pub fn handler_on_program_stack() -> bool {
    CUT_FOR.get().1 != 0
}

/// A trapped `sigaltstack(new, old)` by a program at stack pointer `sp`:
/// the program's own stack, read and set as the kernel would. The old
/// value is written only when the call succeeds, as the kernel does.
pub fn sigaltstack(args: [u64; 6], sp: usize) -> i64 {
    let (new, old) = (args[0], args[1]);
    let current = PROGRAM.get();
    let mut next = current;
    if new != 0 {
        let ss: libc::stack_t = match crate::client::read_user(new) {
            Ok(ss) => ss,
            Err(e) => return -(e as i64),
        };
        next = match current.set(&ss, sp) {
            Ok(n) => n,
            Err(e) => return -(e as i64),
        };
    }
    if old != 0 {
        if let Err(e) = crate::client::write_user(old, current.report(sp)) {
            return -(e as i64);
        }
    }
    PROGRAM.set(next);
    0
}

/// Run a program handler for a signal whose action has `SA_ONSTACK`
/// (`onstack`), delivered into atoll's entry with frame `uc`, where Linux
/// would have run it: on the program's alternate stack when it has one,
/// with `handler_mask` as the thread's mask. `run` calls the handler.
/// Signals stay blocked after it until the delivery's sigreturn.
///
/// # Safety
/// `uc` is the kernel's ucontext of the signal being handled; `run` does
/// not unwind.
pub unsafe fn run_program_handler(
    onstack: bool,
    uc: *mut libc::ucontext_t,
    handler_mask: u64,
    run: impl FnOnce(),
) {
    let program = PROGRAM.get();
    if !onstack || !program.enabled() || uc.is_null() {
        crate::sigdefer::set_thread_mask(handler_mask);
        run();
        crate::sigdefer::block_until_sigreturn();
        return;
    }
    // SAFETY: the caller's ucontext, alive for the whole delivery.
    let frame = unsafe { &mut *uc };
    let interrupted = frame.uc_mcontext.gregs[libc::REG_RSP as usize] as usize;
    // The lowest of the program's stack pointers on its alternate stack:
    // the one interrupted, or the one at the trap whose host call was.
    let program_sp = [interrupted, TRAP_SP.get()]
        .into_iter()
        .filter(|&sp| sp != 0 && program.holds(sp))
        .min()
        .unwrap_or(interrupted);
    let top = program.handler_top(program_sp);
    // The handler's view of the alternate stack; the kernel's (atoll's)
    // goes back before the sigreturn installs it.
    let kernel_view = frame.uc_stack;
    frame.uc_stack = program.report(program_sp);
    let armed = stack::region();
    if program.flags & SS_AUTODISARM != 0 {
        PROGRAM.set(ProgramStack::DISABLED);
    }
    let outer_cut = CUT_FOR.replace((program.sp, program.sp + program.size));
    // The kernel puts an `SA_ONSTACK` frame at the top of the alternate
    // stack unless the thread's stack pointer is already on it. So while
    // the thread runs off atoll's stack, or on atoll's above the kernel's
    // alternate stack, that stack must lie wholly below atoll's live
    // frames, and it covers them again before the thread comes back. Both
    // changes are made on the program's stack with every signal blocked
    // (the entry runs so, `sigdefer::entry_action`; the handler's own mask
    // holds only while it runs): a signal let in before the cut put its
    // frame over this very
    // delivery (CPython's test_signal crashed so, 3 runs in 3: its SIGALRM
    // came at the page fault of the handler's first push on a fresh
    // alternate stack), and one let in after the handler, back on atoll's
    // stack above the cut, pushed its frame below the stack pointer, into
    // the cut part, where the next trap's frame went too.
    let mut cut = Cut::NoRoom;
    let mut run = Some(run);
    // SAFETY: `top` is the end of the program's alternate stack, or below
    // the program's stack pointer on it: free for the handler, as Linux
    // would use it. Nothing of atoll lives there.
    unsafe {
        stack::run_at(top, |left| {
            cut = cut_kernel_stack(armed, left);
            if cut == Cut::NoRoom {
                return;
            }
            crate::sigdefer::set_thread_mask(handler_mask);
            if let Some(run) = run.take() {
                run();
            }
            // Blocked until this delivery's sigreturn, which installs the
            // program's mask (and `uc_stack`).
            crate::sigdefer::block_until_sigreturn();
            if cut != Cut::NotNeeded {
                set_kernel_stack(&kernel_view);
            }
        })
    };
    if let Some(run) = run.take() {
        // No room below atoll's frames for the kernel's alternate stack:
        // the handler runs here, on atoll's stack, where nested frames go
        // below it, rather than on the program's with frames landing over
        // this delivery.
        crate::sigdefer::set_thread_mask(handler_mask);
        run();
    }
    if let Cut::Made { free_top } = cut {
        stack::set_free_top(free_top);
    }
    CUT_FOR.set(outer_cut);
    if program.flags & SS_AUTODISARM != 0 {
        PROGRAM.set(program);
    }
    frame.uc_stack = kernel_view;
}

/// What [`cut_kernel_stack`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cut {
    /// The kernel's alternate stack and atoll's work now start below
    /// atoll's live frames; `free_top` is where work started before.
    Made { free_top: usize },
    /// This delivery is not on atoll's stack (the thread's alternate stack
    /// is not armed, or it has no atoll stack): nothing of atoll is in the
    /// kernel's way.
    NotNeeded,
    /// Too little of atoll's stack is left below its live frames, or the
    /// kernel refused the smaller stack: the kernel's alternate stack
    /// still covers those frames.
    NoRoom,
}

/// Off atoll's stack, with `left` the lowest live address on it: the
/// kernel's alternate stack, and where atoll's work starts, become the
/// part below (see the module doc). Signals are blocked (the caller).
fn cut_kernel_stack(armed: Option<(usize, usize)>, left: usize) -> Cut {
    let Some((lo, size)) = armed else {
        return Cut::NotNeeded;
    };
    if !(left > lo && left - lo <= size) {
        return Cut::NotNeeded;
    }
    let cut = (left - RED_ZONE) & !15;
    // Room for a trap's frame and the client's work below it; a stack
    // used up that far (handlers nested dozens deep) is not cut.
    if cut - lo < size / 4 || kernel_sigaltstack(lo, cut - lo) != 0 {
        return Cut::NoRoom;
    }
    Cut::Made {
        free_top: stack::set_free_top(cut),
    }
}

/// The program's alternate stack on this thread (tests).
#[cfg(test)]
fn program() -> ProgramStack {
    PROGRAM.get()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ss(sp: usize, flags: i32, size: usize) -> libc::stack_t {
        libc::stack_t {
            ss_sp: sp as *mut libc::c_void,
            ss_flags: flags,
            ss_size: size,
        }
    }

    #[test]
    fn a_new_thread_reports_a_disabled_stack() {
        let r = program().report(0x1000);
        assert_eq!(r.ss_flags, libc::SS_DISABLE);
        assert_eq!((r.ss_sp as usize, r.ss_size), (0, 0));
    }

    #[test]
    fn set_follows_the_kernel_rules() {
        let off = ProgramStack::DISABLED;
        let on = off.set(&ss(0x10000, 0, 0x8000), 0x7000_0000).unwrap();
        assert_eq!((on.sp, on.size, on.flags), (0x10000, 0x8000, 0));
        assert_eq!(off.set(&ss(0x10000, 0, 1024), 0).unwrap_err(), libc::ENOMEM);
        assert_eq!(
            off.set(&ss(0x10000, 7, 0x8000), 0).unwrap_err(),
            libc::EINVAL
        );
        // On the stack: no change.
        assert_eq!(
            on.set(&ss(0, libc::SS_DISABLE, 0), 0x17000).unwrap_err(),
            libc::EPERM
        );
        let disabled = on
            .set(&ss(0x55, libc::SS_DISABLE, 99), 0x7000_0000)
            .unwrap();
        assert_eq!(disabled, ProgramStack::DISABLED);
        let auto = off.set(&ss(0x10000, SS_AUTODISARM, 0x8000), 0).unwrap();
        assert_eq!(auto.flags, SS_AUTODISARM);
        // SS_AUTODISARM: never "on" it, so it may change.
        assert!(auto.set(&ss(0, libc::SS_DISABLE, 0), 0x17000).is_ok());
    }

    #[test]
    fn report_says_whether_the_program_runs_on_it() {
        let on = ProgramStack {
            sp: 0x10000,
            size: 0x8000,
            flags: 0,
        };
        assert_eq!(on.report(0x17000).ss_flags, libc::SS_ONSTACK);
        assert_eq!(on.report(0x18000).ss_flags, libc::SS_ONSTACK);
        assert_eq!(on.report(0x18001).ss_flags, 0);
        assert_eq!(on.report(0x10000).ss_flags, 0);
    }

    #[test]
    fn handlers_start_at_the_top_or_below_the_program_on_it() {
        let on = ProgramStack {
            sp: 0x10000,
            size: 0x8000,
            flags: 0,
        };
        assert_eq!(on.handler_top(0x7000_0000), 0x18000);
        assert_eq!(on.handler_top(0x17008), (0x17008 - RED_ZONE) & !15);
    }

    #[test]
    fn trapped_sigaltstack_round_trips_without_touching_the_kernel() {
        let mut mem = vec![0u8; 0x4000];
        let new = ss(mem.as_mut_ptr() as usize, 0, mem.len());
        let mut old = ss(1, 1, 1);
        let r = sigaltstack(
            [
                &new as *const _ as u64,
                &mut old as *mut _ as u64,
                0,
                0,
                0,
                0,
            ],
            0,
        );
        assert_eq!(r, 0);
        assert_eq!(old.ss_flags, libc::SS_DISABLE);
        let mut now = ss(1, 1, 1);
        sigaltstack([0, &mut now as *mut _ as u64, 0, 0, 0, 0], 0);
        assert_eq!(
            (now.ss_sp as usize, now.ss_size, now.ss_flags),
            (new.ss_sp as usize, new.ss_size, 0)
        );
        let mut kernel = ss(1, 1, 1);
        raw::syscall(libc::SYS_sigaltstack, &[0, &mut kernel as *mut _ as u64]);
        assert_ne!(
            kernel.ss_sp as usize, new.ss_sp as usize,
            "the kernel never saw it"
        );
        PROGRAM.set(ProgramStack::DISABLED);
    }
}
