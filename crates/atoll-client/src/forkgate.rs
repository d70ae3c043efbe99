//! Process-local locks held across `fork`.
//!
//! `fork` copies only the calling thread. A lock that another thread of
//! the parent held at that instant stays held in the child's copy of
//! memory forever, and the child's first use of it spins without end (a
//! multithreaded `cargo` forking a child while another of its threads
//! opened a lane did exactly that). So the forking thread takes every
//! process-local atoll lock just before the clone, with every signal
//! blocked, and both sides release their copy after it: each lock is then
//! free, and the state it guards whole, in parent and child alike (the
//! `pthread_atfork` discipline, done inside the interposition layer).
//!
//! Locks that live in shared memory (pipe rings, inotify rings) are not
//! here: the parent's thread that holds one releases it for everyone.

use crate::session::Client;
use crate::sys::{SigBlock, SpinLock};

/// The process-local locks of the modules (each module's `fork_lock`),
/// kept together in one cache-line-aligned block: the gate takes and
/// releases every one of them around each clone, and each release is a
/// write in parent and child alike while they share every page, so each
/// page holding one is copied on both sides. Spread over the modules'
/// tables they lay on three pages (`.data`, `.bss` and a table of
/// `.bss.atoll_tables`); here, on one.
#[repr(C, align(64))]
pub struct Locks {
    pub mapping: SpinLock,
    pub incoherent: SpinLock,
    pub rcache: SpinLock,
    pub pipeepoll: SpinLock,
    pub creds: SpinLock,
    pub copymap: SpinLock,
    pub fdpub: SpinLock,
}

pub static LOCKS: Locks = Locks {
    mapping: SpinLock::new(),
    incoherent: SpinLock::new(),
    rcache: SpinLock::new(),
    pipeepoll: SpinLock::new(),
    creds: SpinLock::new(),
    copymap: SpinLock::new(),
    fdpub: SpinLock::new(),
};

/// Every process-local lock, taken (in this order, each held only briefly
/// and never while another of them is taken) by [`ForkGate::close`]. The
/// session's `boot_lock` lies in the `Client`, whose page the child writes
/// anyway as it switches sessions.
fn locks(c: &'static Client) -> [&'static SpinLock; 8] {
    [
        &c.boot_lock,
        crate::mapping::fork_lock(),
        crate::incoherent::fork_lock(),
        crate::rcache::fork_lock(),
        crate::pipeepoll::fork_lock(),
        crate::creds::fork_lock(),
        crate::copymap::fork_lock(),
        crate::fdpub::fork_lock(),
    ]
}

/// The locks of [`locks`], held from just before a fork until the clone
/// returned; dropped in the parent and in the child (its own copy).
pub struct ForkGate {
    held: [&'static SpinLock; 8],
    // Dropped after `Drop::drop` released the locks: signals stay blocked
    // until then.
    _signals: SigBlock,
}

impl ForkGate {
    pub fn close(c: &'static Client) -> ForkGate {
        let signals = SigBlock::new();
        let held = locks(c);
        for l in held {
            l.acquire_raw();
        }
        ForkGate {
            held,
            _signals: signals,
        }
    }
}

impl Drop for ForkGate {
    fn drop(&mut self) {
        for l in self.held.iter().rev() {
            l.release_raw();
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_modules_fork_locks_lie_on_one_page() {
        let at = |l: &'static crate::sys::SpinLock| l as *const _ as usize;
        let locks = [
            at(crate::mapping::fork_lock()),
            at(crate::incoherent::fork_lock()),
            at(crate::rcache::fork_lock()),
            at(crate::pipeepoll::fork_lock()),
            at(crate::creds::fork_lock()),
            at(crate::copymap::fork_lock()),
            at(crate::fdpub::fork_lock()),
        ];
        let page = |a: usize| a / 4096;
        assert!(
            locks.iter().all(|&a| page(a) == page(locks[0])),
            "{locks:x?}"
        );
    }
}
