//! Which inodes this process may hold locks on, so that `close` pays for
//! locks only where there can be some.
//!
//! Linux releases all of a process's POSIX record locks on an inode at
//! any `close` of a descriptor for it, and a lock's release must be
//! ordered before the program's next step. atoll does the first with an
//! explicit whole-file unlock (`SetLock`, a round trip) and the second by
//! waiting for `Close`'s reply instead of posting it. Doing both on every
//! close once the process had taken *one* lock made each later close of
//! any file two round trips instead of one posted message: dbench takes a
//! handful of `fcntl` locks early (NetBench `LockX`) and then closes
//! ~10 000 files a second, so a third of its messages were those unlocks.
//!
//! The marks are two hashed bitsets of inodes (one for POSIX record
//! locks, one for any lock: record, OFD or `flock`), set before the lock
//! request goes out and never cleared: a false positive (two inodes
//! sharing a bit, a lock long released, a child that inherited the marks
//! across `fork` but not the locks) costs one needless unlock or one
//! waited `Close`, as before; a false negative cannot happen. After
//! `execve` the new image does not know which inodes its locks are on
//! (they outlive exec, `exec::handover`), so it marks every inode.

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use atoll_proto::InodeId;

/// Bits per set: 4 096 inodes before two share a bit.
const WORDS: usize = 64;

/// A process's lock marks (in `Client`).
pub struct LockMarks {
    posix: [AtomicU64; WORDS],
    any: [AtomicU64; WORDS],
    /// Every inode counts as marked (a new image whose locks came across
    /// `execve`).
    all: AtomicBool,
}

impl Default for LockMarks {
    fn default() -> Self {
        Self::new()
    }
}

impl LockMarks {
    pub const fn new() -> Self {
        #[allow(clippy::declare_interior_mutable_const)]
        const Z: AtomicU64 = AtomicU64::new(0);
        LockMarks {
            posix: [Z; WORDS],
            any: [Z; WORDS],
            all: AtomicBool::new(false),
        }
    }

    /// Word and bit of an inode. The serial is in the low bits, the owner
    /// server in the high byte: mix both so that inodes of different
    /// servers with the same serial land apart.
    fn slot(ino: InodeId) -> (usize, u64) {
        let h = ino.0.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let bit = (h >> 52) as usize; // 12 bits: 0..4096
        (bit / 64, 1u64 << (bit % 64))
    }

    /// A lock request on `ino` is about to go out; `posix` for a record
    /// lock owned by the process (released by any close).
    pub fn mark(&self, ino: InodeId, posix: bool) {
        let (w, b) = Self::slot(ino);
        self.any[w].fetch_or(b, Ordering::Relaxed);
        if posix {
            self.posix[w].fetch_or(b, Ordering::Relaxed);
        }
    }

    /// Every inode from now on (see the module comment).
    pub fn mark_all(&self) {
        self.all.store(true, Ordering::Relaxed);
    }

    /// This process may hold a POSIX record lock on `ino`.
    pub fn may_hold_posix(&self, ino: InodeId) -> bool {
        let (w, b) = Self::slot(ino);
        self.all.load(Ordering::Relaxed) || self.posix[w].load(Ordering::Relaxed) & b != 0
    }

    /// Some lock on `ino` may have been taken through this process.
    pub fn may_hold_any(&self, ino: InodeId) -> bool {
        let (w, b) = Self::slot(ino);
        self.all.load(Ordering::Relaxed) || self.any[w].load(Ordering::Relaxed) & b != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unmarked_inodes_hold_nothing() {
        let m = LockMarks::new();
        for s in 0..1000 {
            let ino = InodeId::new(0, 0, false, s);
            assert!(!m.may_hold_posix(ino) && !m.may_hold_any(ino));
        }
    }

    #[test]
    fn marks_are_per_inode_and_kind() {
        let m = LockMarks::new();
        let a = InodeId::new(0, 0, false, 7);
        let b = InodeId::new(1, 1, false, 8);
        m.mark(a, true);
        m.mark(b, false);
        assert!(m.may_hold_posix(a) && m.may_hold_any(a));
        assert!(m.may_hold_any(b));
        // A flock or OFD lock is released by its description, not by
        // any close: no release-all for it.
        let (wa, ba) = LockMarks::slot(a);
        let (wb, bb) = LockMarks::slot(b);
        if (wa, ba) != (wb, bb) {
            assert!(!m.may_hold_posix(b));
        }
        // Most other inodes stay unmarked (hash spread).
        let marked = (0..4096u64)
            .map(|s| InodeId::new(0, 0, false, 1000 + s))
            .filter(|&i| m.may_hold_any(i))
            .count();
        assert!(marked < 64, "{marked} of 4096 inodes look marked");
    }

    #[test]
    fn mark_all_marks_every_inode() {
        let m = LockMarks::new();
        m.mark_all();
        let ino = InodeId::new(0, 0, false, 12345);
        assert!(m.may_hold_posix(ino) && m.may_hold_any(ino));
    }
}
