//! The size board: each server publishes the sizes of some of the regular
//! files it owns in shared memory, so that a client answers
//! `lseek(fd, 0, SEEK_END)` without a message.
//!
//! Only a file's owner knows its size, so `SEEK_END` used to be a round
//! trip; PostgreSQL asks each relation's size that way (`smgrnblocks`)
//! about ten times per transaction. Now every server has [`SIZE_SLOTS`]
//! slots in the control block, which every process of the instance maps.
//! The slots are *direct-mapped*: inode `ino` may only ever sit in slot
//! [`slot_of`]`(ino)`, so a reader looks at exactly one slot. A slot
//! holds `{ seq, ino, size, generation }` on its own 32 bytes, and is a
//! *seqlock* with a single writer, the owning server:
//!
//! ```text
//!  writer:  seq += 1 (odd) ─ fence ─ ino, size, generation ─ seq += 1 (even, release)
//!  reader:  s1 = seq (acquire) ─ ino, size, generation ─ fence ─ s2 = seq
//!           accept iff s1 == s2, s1 even, ino and generation are the reader's
//! ```
//!
//! A reader that sees `seq` odd or changed retries a few times, then gives
//! up and asks the server ([`SizeSlot::read`] returns `None`). It never
//! waits for the writer, so a server that dies half way through a write
//! blocks nobody.
//!
//! Freshness: the server writes the slot before it sends the reply of the
//! request that changed the size, so every size change acknowledged before
//! a reader's call is in the slot it reads (a reply and the slot both
//! travel through release stores and acquire loads): a size read this way
//! is as fresh as Linux's `i_size` read without the inode lock.
//!
//! Staleness across incarnations: each slot carries the generation of the
//! server incarnation that wrote it (`Control::generation`). A reader
//! accepts it only while that is still the server's generation and the
//! server is not down, so nothing a dead or rebuilt server published is
//! trusted. Clients map the block writable (they ring doorbells) and are
//! trusted not to write the board (Hare's single fault domain); the
//! server never reads the board back as truth, it keeps its own mirror.

use crate::sync::{fence, AtomicU64, Ordering};

/// Slots per server (16 KiB of the control block each).
pub const SIZE_SLOTS: usize = 512;

/// How often a reader retries a slot being written before it gives up.
const READ_TRIES: usize = 4;

/// The slot inode `ino` (its raw id) may occupy: a multiplicative hash,
/// so the serials a server hands out in a row spread over the slots.
#[inline]
pub fn slot_of(ino: u64) -> usize {
    (ino.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 55) as usize % SIZE_SLOTS
}

/// One slot of the board (see the module docs). Atomics only, so any
/// bytes are a valid slot.
#[repr(C, align(32))]
pub struct SizeSlot {
    seq: AtomicU64,
    ino: AtomicU64,
    size: AtomicU64,
    generation: AtomicU64,
}

impl SizeSlot {
    #[cfg(loom)]
    pub(crate) fn new() -> Self {
        SizeSlot {
            seq: AtomicU64::new(0),
            ino: AtomicU64::new(0),
            size: AtomicU64::new(0),
            generation: AtomicU64::new(0),
        }
    }

    /// Writer side (the owning server only): the slot now says inode
    /// `ino` (0: nobody) has `size` bytes, in incarnation `generation`.
    pub fn publish(&self, ino: u64, size: u64, generation: u64) {
        let s = self.seq.load(Ordering::Relaxed);
        // Odd: readers that overlap what follows see it, or see the
        // second store below and reject.
        self.seq.store(s.wrapping_add(1) | 1, Ordering::Relaxed);
        // The odd `seq` is ordered before the fields (a reader that sees
        // a new field also sees `seq` moved, through its closing fence).
        fence(Ordering::Release);
        self.ino.store(ino, Ordering::Relaxed);
        self.size.store(size, Ordering::Relaxed);
        self.generation.store(generation, Ordering::Relaxed);
        self.seq
            .store((s.wrapping_add(1) | 1).wrapping_add(1), Ordering::Release);
    }

    /// Writer side: the slot holds no inode.
    pub fn clear(&self) {
        self.publish(0, 0, 0);
    }

    /// Reader side: `ino`'s size if the slot holds it, whole, written in
    /// incarnation `generation`; `None` if it holds another inode, an
    /// older incarnation's word, or was being written each time it looked.
    pub fn read(&self, ino: u64, generation: u64) -> Option<u64> {
        for _ in 0..READ_TRIES {
            let s1 = self.seq.load(Ordering::Acquire);
            if s1 & 1 == 0 {
                let i = self.ino.load(Ordering::Relaxed);
                let size = self.size.load(Ordering::Relaxed);
                let g = self.generation.load(Ordering::Relaxed);
                // The field loads are ordered before the second look at
                // `seq` (Boehm, "Can seqlocks get along with programming
                // language memory models?", 2012).
                fence(Ordering::Acquire);
                if self.seq.load(Ordering::Relaxed) == s1 {
                    return (i == ino && g == generation && ino != 0).then_some(size);
                }
            }
            crate::sync::spin_hint();
        }
        None
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn slot() -> SizeSlot {
        SizeSlot {
            seq: AtomicU64::new(0),
            ino: AtomicU64::new(0),
            size: AtomicU64::new(0),
            generation: AtomicU64::new(0),
        }
    }

    #[test]
    fn a_slot_answers_only_its_inode_in_its_generation() {
        let s = slot();
        assert_eq!(s.read(0, 0), None, "an empty slot names nobody");
        assert_eq!(s.read(7, 0), None);
        s.publish(7, 4096, 3);
        assert_eq!(s.read(7, 3), Some(4096));
        assert_eq!(s.read(8, 3), None, "another inode");
        assert_eq!(s.read(7, 4), None, "a newer incarnation");
        assert_eq!(s.read(7, 2), None, "an older incarnation");
        s.publish(7, 0, 3);
        assert_eq!(s.read(7, 3), Some(0));
        s.clear();
        assert_eq!(s.read(7, 3), None);
    }

    #[test]
    fn a_slot_being_written_is_refused_not_waited_for() {
        let s = slot();
        s.publish(7, 10, 1);
        // A writer that died half way leaves `seq` odd.
        s.seq.fetch_add(1, Ordering::Relaxed);
        assert_eq!(s.read(7, 1), None);
        // Its successor's next write makes it whole again.
        s.publish(7, 20, 1);
        assert_eq!(s.seq.load(Ordering::Relaxed) & 1, 0);
        assert_eq!(s.read(7, 1), Some(20));
    }

    #[test]
    fn slots_spread_consecutive_serials() {
        let mut used = std::collections::HashSet::new();
        for serial in 0..256u64 {
            assert!(slot_of(serial) < SIZE_SLOTS);
            used.insert(slot_of((3u64 << 58) | serial));
        }
        assert!(used.len() > 128, "{} slots for 256 serials", used.len());
    }

    /// A reader racing a writer that alternates two (ino, size) pairs
    /// never sees a mixture: the size it accepts is the one written with
    /// the ino it asked for.
    #[test]
    fn readers_never_see_a_torn_slot() {
        let s = slot();
        std::thread::scope(|t| {
            t.spawn(|| {
                for n in 0..200_000u64 {
                    if n % 2 == 0 {
                        s.publish(1, 1000 + n, 5);
                    } else {
                        s.publish(2, 2_000_000 + n, 5);
                    }
                }
            });
            for _ in 0..200_000 {
                if let Some(v) = s.read(1, 5) {
                    assert!(v < 2_000_000 && v % 2 == 0, "torn: {v}");
                }
                if let Some(v) = s.read(2, 5) {
                    assert!(v >= 2_000_000 && v % 2 == 1, "torn: {v}");
                }
            }
        });
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::Arc;

    /// The seqlock under every interleaving loom explores: a reader racing
    /// a write that moves the slot from (1, 10) to (2, 20) accepts only a
    /// whole pair, never inode 2 with 10 bytes or inode 1 with 20, and a
    /// reader after the writer finished (joined) sees the new pair.
    #[test]
    fn loom_size_slot_is_never_torn_and_never_stale_after_the_write() {
        loom::model(|| {
            let s = Arc::new(SizeSlot::new());
            s.publish(1, 10, 1);
            let w = s.clone();
            let t = loom::thread::spawn(move || w.publish(2, 20, 1));
            if let Some(v) = s.read(2, 1) {
                assert_eq!(v, 20, "torn");
            }
            t.join().unwrap();
            assert_eq!(s.read(2, 1), Some(20));
            assert_eq!(s.read(1, 1), None);
        });
    }
}
