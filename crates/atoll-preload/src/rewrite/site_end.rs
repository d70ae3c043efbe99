//! The end of a call at a rewritten site that has deferred signals to
//! deliver, or that the handlers decide whether to restart: delivered in
//! the program's own frame at the site, as for a trapped call.
//!
//! Linux delivers a signal that came during a system call as the call
//! returns, in a frame built from the program's registers right after
//! the `syscall` instruction (at it, with RAX = the number, when the call
//! restarts). The entry (`entry.rs`) runs the call on atoll's stack with
//! the program's registers saved, so it has no such frame; but it can go
//! back to the site with every register as the program had it and run
//! the site's own `syscall` (the way it already takes for calls that need
//! a signal frame). That instruction traps, and its SIGSYS frame is the
//! program's, made by the kernel: the handler ([`take`]) recognises the
//! call it already served by its number, the address after the
//! `syscall` and the program's stack pointer, and delivers the signals
//! into that frame with the result the entry computed
//! (`sigdefer::deliver_into_frame`). From the entry's return to the trap
//! every signal but SIGSYS is blocked, so no handler can run in between
//! (and no handler's own trap at the same site can be taken for it); the
//! mask the program had goes back into the frame.

use core::cell::Cell;

use super::entry::Frame;
use crate::sigdefer;

/// A call the entry served whose end waits for the site's trap.
#[derive(Clone, Copy)]
pub struct SiteEnd {
    nr: i64,
    /// The address after the site's `syscall` (the trap's RIP).
    resume: usize,
    /// The program's stack pointer at the site.
    rsp: u64,
    /// What the call returned (perhaps `-ERESTARTSYS`).
    pub ret: i64,
    /// The thread's mask before the entry blocked every signal.
    pub mask: u64,
}

thread_local! {
    // Const-initialised, no Drop: readable from the SIGSYS handler.
    static HELD: Cell<Option<SiteEnd>> = const { Cell::new(None) };
}

/// Keep the end of call `nr`, which returned `ret` at the site `frame`
/// was saved at, for the site's trap; blocks every signal but SIGSYS
/// until that trap's sigreturn.
pub fn hold(frame: &Frame, nr: i64, ret: i64) {
    let mask = sigdefer::block_all_but_sigsys();
    HELD.with(|h| {
        h.set(Some(SiteEnd {
            nr,
            resume: frame.resume(),
            rsp: frame.regs[libc::REG_RSP as usize] as u64,
            ret,
            mask,
        }))
    });
}

/// In the SIGSYS handler: the end held for the trap of call `nr` at
/// `rip` with stack pointer `rsp`, if this trap is the entry's way back.
pub fn take(nr: i64, rip: usize, rsp: u64) -> Option<SiteEnd> {
    HELD.with(|h| {
        let end = h.get()?;
        (end.nr == nr && end.resume == rip && end.rsp == rsp).then(|| {
            h.set(None);
            end
        })
    })
}
