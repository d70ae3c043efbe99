//! No ring lock held across `execve`.
//!
//! `execve` ends every other thread of the process wherever it is, and
//! the thread that calls it takes over the leader's thread id. A ring lock
//! word holds its holder's thread id, and a waiter takes a lock back only
//! from a holder that no longer exists (`Ring::recover`): a lock the
//! leader held when another thread called `execve` would seem held by the
//! new program for ever, and every process using that pipe would wait.
//! So the thread about to `execve` raises a fence ([`ExecFence::raise`]):
//! from then on the process's other threads wait before taking a ring
//! lock, and the fence waits until the locks they hold are released. If
//! `execve` fails the fence comes down and they go on.
//!
//! The counts are words of this process's memory: a forked child starts
//! with none held ([`forget_after_fork`]); a `vfork` child shares them
//! with its parent and names itself by its own process id, so its fence
//! holds back none of the parent's threads (it waits for their locks
//! only, which they release at once).

use core::cell::Cell;
use core::sync::atomic::{AtomicU32, Ordering};

use crate::sys;

/// Ring locks this process's threads hold.
static HELD: AtomicU32 = AtomicU32::new(0);
/// The process about to `execve` (0: none), and its execing thread.
static EXECING: AtomicU32 = AtomicU32::new(0);
static EXEC_TID: AtomicU32 = AtomicU32::new(0);

std::thread_local! {
    /// Ring locks this thread holds: one holding a lock is never held
    /// back from the next (the fence waits for it to release both).
    static MINE: Cell<u32> = const { Cell::new(0) };
}

fn getpid() -> u32 {
    // SAFETY: getpid takes no arguments.
    unsafe { sys::sc(libc::SYS_getpid, 0, 0, 0, 0) as u32 }
}

/// Is this process about to `execve` (its fence is up)?
pub fn exec_pending() -> bool {
    let execing = EXECING.load(Ordering::SeqCst);
    execing != 0 && execing == getpid()
}

/// Thread `tid` is about to take a ring lock: count it, after waiting
/// while another thread of this process is about to `execve`.
pub(super) fn enter(tid: u32) {
    let mine = MINE.with(|m| {
        m.set(m.get() + 1);
        m.get()
    });
    loop {
        // SeqCst pairs with the fence's store of `EXECING` and load of
        // `HELD`: either it sees this count or this sees its mark.
        HELD.fetch_add(1, Ordering::SeqCst);
        let execing = EXECING.load(Ordering::SeqCst);
        if mine > 1
            || execing == 0
            || EXEC_TID.load(Ordering::Relaxed) == tid
            || execing != getpid()
        {
            return;
        }
        HELD.fetch_sub(1, Ordering::SeqCst);
        sys::sleep_ns(100_000);
    }
}

/// A ring lock taken after [`enter`] was released.
pub(super) fn leave() {
    MINE.with(|m| m.set(m.get().saturating_sub(1)));
    HELD.fetch_sub(1, Ordering::Release);
}

/// In a forked child: the locks the parent's other threads held are not
/// this process's.
pub fn forget_after_fork() {
    HELD.store(MINE.with(Cell::get), Ordering::Relaxed);
    EXECING.store(0, Ordering::Relaxed);
}

/// The fence of a thread about to `execve`; dropping it (the `execve`
/// returned, so it failed) lets the other threads go on.
pub struct ExecFence {
    pid: u32,
}

impl ExecFence {
    /// Hold back the other threads' ring locks and wait until those they
    /// hold are released.
    pub fn raise() -> ExecFence {
        let pid = getpid();
        // SAFETY: gettid takes no arguments.
        let tid = unsafe { sys::sc(libc::SYS_gettid, 0, 0, 0, 0) } as u32;
        EXEC_TID.store(tid, Ordering::Relaxed);
        EXECING.store(pid, Ordering::SeqCst);
        let mine = MINE.with(Cell::get);
        while HELD.load(Ordering::SeqCst) > mine {
            sys::sleep_ns(20_000);
        }
        ExecFence { pid }
    }
}

impl Drop for ExecFence {
    fn drop(&mut self) {
        let _ = EXECING.compare_exchange(self.pid, 0, Ordering::SeqCst, Ordering::Relaxed);
    }
}
