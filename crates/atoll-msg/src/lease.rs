//! The lease board: each server publishes, per regular file a client
//! reads, a *data version* that lets the client copy from blocks it
//! already knows without a message (Hare §3.3: the client reads the
//! buffer cache directly "provided the blocks are known").
//!
//! Beside the size board (`sizes`), every server has [`LEASE_SLOTS`]
//! slots in the control block, direct-mapped by the same hash
//! ([`slot_of`](crate::slot_of)). A slot holds `{ seq, ino, generation,
//! version, until }` on its own 64 bytes and is a seqlock with a single
//! writer, the owning server. `version` moves on every change that could
//! make a block list a client learnt from a `Read` reply wrong, or a
//! read without a message observable (a write grant, a size change, a
//! change of the block map, a watch appearing); `until` is the wall-clock
//! second before which a read would not move the file's atime under
//! relatime (0: a read now must go to the server).
//!
//! A client reads *around its copy*, not around the slot alone:
//!
//! ```text
//!  reader:  t = begin(ino, gen)  (seq even, ino and generation its own)
//!           version == the one its extents were learnt at? until > now?
//!           copy from the cache blocks
//!           still(t)             (fence, seq unchanged)
//! ```
//!
//! The server publishes a new version *before* it makes the change
//! visible (before a grant's reply, before it zeroes a truncated tail),
//! so a copy that overlapped a change fails `still` and is discarded.

use crate::sync::{fence, AtomicU64, Ordering};

/// Slots per server (32 KiB of the control block each).
pub const LEASE_SLOTS: usize = crate::sizes::SIZE_SLOTS;

/// How often a reader retries a slot being written before it gives up.
const READ_TRIES: usize = 4;

/// One slot of the lease board (see the module docs). Atomics only, so
/// any bytes are a valid slot.
#[repr(C, align(64))]
pub struct LeaseSlot {
    seq: AtomicU64,
    ino: AtomicU64,
    generation: AtomicU64,
    version: AtomicU64,
    until: AtomicU64,
}

/// What a reader saw at [`LeaseSlot::begin`]: the word to check again
/// after its copy, and the slot's version and `until`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseTicket {
    seq: u64,
    generation: u64,
    pub version: u64,
    pub until: u64,
}

impl LeaseSlot {
    #[cfg(any(loom, test))]
    pub(crate) fn new() -> Self {
        LeaseSlot {
            seq: AtomicU64::new(0),
            ino: AtomicU64::new(0),
            generation: AtomicU64::new(0),
            version: AtomicU64::new(0),
            until: AtomicU64::new(0),
        }
    }

    /// Writer side (the owning server only): the slot now says inode
    /// `ino` (0: nobody) is at data version `version`, reads allowed
    /// without a message before second `until`, in incarnation
    /// `generation`.
    pub fn publish(&self, ino: u64, version: u64, until: u64, generation: u64) {
        let s = self.seq.load(Ordering::Relaxed);
        let odd = s.wrapping_add(1) | 1;
        self.seq.store(odd, Ordering::Relaxed);
        // The odd `seq` is ordered before the fields and before whatever
        // the server changes next (a reader that sees a new field, or a
        // byte changed after this publish, also sees `seq` moved).
        fence(Ordering::Release);
        self.ino.store(ino, Ordering::Relaxed);
        self.generation.store(generation, Ordering::Relaxed);
        self.version.store(version, Ordering::Relaxed);
        self.until.store(until, Ordering::Relaxed);
        self.seq.store(odd.wrapping_add(1), Ordering::Release);
    }

    /// Writer side: the slot holds no inode.
    pub fn clear(&self) {
        self.publish(0, 0, 0, 0);
    }

    /// Reader side, before the copy: the slot's version and `until` if it
    /// holds `ino`, whole, written in incarnation `generation`.
    pub fn begin(&self, ino: u64, generation: u64) -> Option<LeaseTicket> {
        for _ in 0..READ_TRIES {
            let s1 = self.seq.load(Ordering::Acquire);
            if s1 & 1 == 0 {
                let i = self.ino.load(Ordering::Relaxed);
                let g = self.generation.load(Ordering::Relaxed);
                let version = self.version.load(Ordering::Relaxed);
                let until = self.until.load(Ordering::Relaxed);
                fence(Ordering::Acquire);
                if self.seq.load(Ordering::Relaxed) == s1 {
                    return (i == ino && g == generation && ino != 0).then_some(LeaseTicket {
                        seq: s1,
                        generation,
                        version,
                        until,
                    });
                }
            }
            crate::sync::spin_hint();
        }
        None
    }

    /// The incarnation a ticket was read for.
    pub fn generation(t: &LeaseTicket) -> u64 {
        t.generation
    }

    /// Reader side, after the copy: nothing was published since `t`, so
    /// every byte copied since `begin` is the version's (the loads of the
    /// copy are ordered before this look at `seq`: Boehm, "Can seqlocks
    /// get along with programming language memory models?", 2012).
    pub fn still(&self, t: &LeaseTicket) -> bool {
        fence(Ordering::Acquire);
        self.seq.load(Ordering::Relaxed) == t.seq
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_slot_answers_only_its_inode_in_its_generation() {
        let s = LeaseSlot::new();
        assert_eq!(s.begin(0, 0), None, "an empty slot names nobody");
        s.publish(7, 3, 100, 2);
        let t = s.begin(7, 2).expect("its own slot");
        assert_eq!((t.version, t.until), (3, 100));
        assert!(s.still(&t));
        assert_eq!(s.begin(8, 2), None, "another inode");
        assert_eq!(s.begin(7, 3), None, "another incarnation");
        s.clear();
        assert_eq!(s.begin(7, 2), None);
        assert!(!s.still(&t), "a publish after begin fails the copy");
    }

    #[test]
    fn a_publish_of_the_same_version_still_fails_a_copy_under_way() {
        let s = LeaseSlot::new();
        s.publish(7, 3, 100, 2);
        let t = s.begin(7, 2).unwrap();
        s.publish(7, 3, 100, 2);
        assert!(!s.still(&t));
        // A writer that died half way leaves `seq` odd: refused, not waited for.
        s.seq.fetch_add(1, Ordering::Relaxed);
        assert_eq!(s.begin(7, 2), None);
    }

    /// The server's order around a change it makes itself: `until` 0
    /// ("ask") with the new version before the change, then the version
    /// allowed again after it. A reader that accepts a copy (allowed at
    /// `begin`, `still` after) has the whole block of that version, never
    /// a mixture of two.
    #[test]
    fn copies_that_overlap_a_change_are_refused() {
        let s = LeaseSlot::new();
        let block: Vec<AtomicU64> = (0..64).map(|_| AtomicU64::new(0)).collect();
        s.publish(1, 0, u64::MAX, 1);
        std::thread::scope(|t| {
            t.spawn(|| {
                for v in 1..50_000u64 {
                    s.publish(1, v, 0, 1);
                    for w in &block {
                        w.store(v, Ordering::Relaxed);
                    }
                    s.publish(1, v, u64::MAX, 1);
                }
            });
            for _ in 0..50_000 {
                let Some(t) = s.begin(1, 1).filter(|t| t.until != 0) else {
                    continue;
                };
                let copy: Vec<u64> = block.iter().map(|w| w.load(Ordering::Relaxed)).collect();
                if s.still(&t) {
                    assert!(
                        copy.iter().all(|&w| w == t.version),
                        "a torn copy was accepted"
                    );
                }
            }
        });
    }
}
