//! Deferred signals delivered into the program's own frame: by the
//! SIGSYS handler of a trapped call as it returns (restarting the call by
//! pointing RIP back at its `syscall`), or by a libc wrapper at its return
//! to the program (`retframe`), instead of as atoll code's own frames at
//! the end of the dispatch.

use super::*;

/// Who delivers deferred signals into the program's own frame for the
/// call in progress on this thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum FrameMode {
    /// Nobody: they are delivered at the end of the dispatch (as atoll
    /// code's own frames).
    None = 0,
    /// The SIGSYS handler of a trapped call, as it returns
    /// ([`deliver_into_frame`]); it also restarts the call, by pointing
    /// RIP back at the `syscall` instruction.
    Trap = 1,
    /// A libc wrapper, at its return to the program (`retframe`); calls
    /// that restart are issued again inside the dispatch, after the
    /// handlers ran there.
    Return = 2,
}

/// While alive, deferred signals of this thread are delivered into the
/// program's own frame by the [`FrameMode`] given, so the dispatch and
/// the SIGSYS net leave them pending. Not for calls with a temporary mask
/// (`ppoll`, `pselect6`, `epoll_pwait`): their mask must be in force
/// while the handlers run, so they deliver at the end of the dispatch.
pub struct FrameDelivery {
    prev: u8,
    _not_send: core::marker::PhantomData<*const ()>,
}

impl FrameDelivery {
    /// Hot path (every wrapper call): a plain load and store, no locked
    /// exchange; only this thread (and its signal entry, which restores
    /// what it changes) touches the byte.
    #[inline]
    pub fn enter(mode: FrameMode) -> FrameDelivery {
        let prev = FRAME_DELIVERY.with(|f| {
            let prev = f.load(Ordering::Relaxed);
            f.store(mode as u8, Ordering::Relaxed);
            prev
        });
        FrameDelivery {
            prev,
            _not_send: core::marker::PhantomData,
        }
    }
}

impl Drop for FrameDelivery {
    #[inline]
    fn drop(&mut self) {
        FRAME_DELIVERY.with(|f| f.store(self.prev, Ordering::Relaxed));
    }
}

/// Who delivers deferred signals for the call in progress (see
/// [`FrameDelivery`]).
#[inline]
pub fn frame_mode() -> FrameMode {
    match FRAME_DELIVERY.with(|f| f.load(Ordering::Relaxed)) {
        1 => FrameMode::Trap,
        2 => FrameMode::Return,
        _ => FrameMode::None,
    }
}

/// Would the deferred signals of this thread let an interrupted call
/// restart (see [`all_restart`])?
pub fn pending_would_restart() -> bool {
    let _all = BlockAll::new();
    with_pending(|s| all_restart(s.as_slice()))
}

/// How a trapped call ends once its deferred signals are queued again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameEnd {
    /// Return this value in RAX, after the `syscall` instruction.
    Result(i64),
    /// Point RIP back at the `syscall` instruction with RAX = the call's
    /// number: the program issues the call again after the handlers.
    Restart,
}

/// `-ERESTARTSYS` or `-ERESTARTNOINTR`: how the call ends is for its
/// handlers to decide ([`frame_end`]).
pub fn is_restart_code(ret: i64) -> bool {
    ret == -(atoll_client::intr::ERESTARTSYS as i64)
        || ret == -(atoll_client::intr::ERESTARTNOINTR as i64)
}

/// The end of a trapped call that returned `ret` while `signals` were
/// deferred: Linux's `handle_signal` rules. `ERESTARTNOINTR` always
/// restarts; `ERESTARTSYS` restarts when every handler asked for
/// `SA_RESTART`, else it is `EINTR`; any other value is the result.
pub fn frame_end(ret: i64, signals: &[Deferred]) -> FrameEnd {
    let nointr = -(atoll_client::intr::ERESTARTNOINTR as i64);
    let sys = -(atoll_client::intr::ERESTARTSYS as i64);
    match ret {
        r if r == nointr => FrameEnd::Restart,
        r if r == sys && !signals.is_empty() && all_restart(signals) => FrameEnd::Restart,
        r if r == sys => FrameEnd::Result(-(libc::EINTR as i64)),
        r => FrameEnd::Result(r),
    }
}

/// The end of the SIGSYS handler of trapped call `nr`, which returned
/// `ret`: signals deferred meanwhile are delivered as Linux delivers them
/// on the return from a system call, in the program's own frame. `uc`, the
/// trap's frame, is the program's state: RAX (and, for a restart, RIP) is
/// set here; the signals are queued again with their siginfo while every
/// signal stays blocked, and the handler's `rt_sigreturn` puts back the
/// program's registers and mask (`uc_sigmask`). The kernel then finds them
/// pending on its way back to the program and builds their frames from
/// the program's registers, FP state, mask and alternate stack, as for a
/// real system call: the handler sees the program's RIP, RSP, RAX and
/// callee-saved registers, and what it changes in `uc_mcontext` holds when
/// it returns. Restarts are Linux's too: RIP back by the two bytes of the
/// `syscall` instruction and RAX = `nr`, so the handler sees the frame of
/// a restarted call and the program traps again after it.
///
/// `uc_sigmask` is the program's mask for a trapped call. For the gate of a
/// wrapper's return (`retframe`) and a rewritten site's way back
/// (`rewrite::site_end`), `from_gate`, it is the thread's mask as the
/// call left: if the entry held further signals back meanwhile (a full
/// set, see `PendingSet::held_mask`), the mask the call ran with, the
/// program's, goes back into the frame.
pub fn deliver_into_frame(uc: &mut libc::ucontext_t, nr: i64, ret: i64, from_gate: bool) {
    if !any_pending() && !is_restart_code(ret) {
        uc.uc_mcontext.gregs[libc::REG_RAX as usize] = ret;
        return;
    }
    // Blocked until the handler's sigreturn installs `uc_sigmask`.
    core::mem::forget(BlockAll::new());
    let (held, (taken, n)) = with_pending(|s| (s.held_mask(), s.take()));
    requeue(&taken[..n]);
    if let (true, Some(m)) = (from_gate, held) {
        // SAFETY: the first word of `uc_sigmask` is the kernel's 64-signal
        // mask, which sigreturn installs.
        unsafe { *(&mut uc.uc_sigmask as *mut libc::sigset_t).cast::<u64>() = m };
    }
    let g = &mut uc.uc_mcontext.gregs;
    match frame_end(ret, &taken[..n]) {
        FrameEnd::Result(v) => g[libc::REG_RAX as usize] = v,
        FrameEnd::Restart => {
            g[libc::REG_RIP as usize] -= SYSCALL_INSN_BYTES;
            g[libc::REG_RAX as usize] = nr;
        }
    }
}

/// Length of the `syscall` instruction (`0f 05`), as the kernel's restart
/// (`regs->ip -= 2`) assumes.
const SYSCALL_INSN_BYTES: i64 = 2;
