//! Repair of a ring whose end was killed half way through a step.
//!
//! A file server may be a process of its own, killed at any instruction
//! and replaced by a successor that maps the same channels (fos §3.4:
//! servers restart from their state, their clients keep their channels).
//! Two steps of the ring protocol take more than one store, and a kill
//! between their stores leaves words that disagree:
//!
//! * **Releasing a frame** (`Consumer::take`): the consumer zeroes the
//!   `seq` word of every line of the slot, then stores `tail`. Killed in
//!   between, `tail` still names the frame while its first line already
//!   reads `seq == 0`: a successor polling at `tail` waits for a frame
//!   that will never be published again, and the producer waits for room
//!   that is never freed. The frame's `len` word is still there (only
//!   `seq` is zeroed), so the successor finishes the release:
//!   [`Consumer::finish_interrupted_release`].
//! * **Publishing a frame** (`Producer::try_send`): `seq`, then `head`.
//!   Killed in between, the consumer may take the frame and move `tail`
//!   past a `head` that never covered it — indices a successor producer
//!   would call corrupt — or a wrap's frame at offset 0 is published
//!   without its marker. The successor recomputes `head` from the frames
//!   the ring holds and frees every line outside `[tail, head)`:
//!   [`recover_head`].
//!
//! Both run when an end is built, before it is used, while no other end
//! of the same role exists (one producer, one consumer per ring).

use super::{seq_of, slot_size, Consumer, FrameAt, RingMem, FRAME_ALIGN, FRAME_HEADER, WRAP};
use crate::sync::Ordering;
use std::sync::atomic::Ordering as PrivateOrdering;

impl Consumer {
    /// Finish releasing a frame whose release a killed predecessor began:
    /// the producer published bytes at `tail` (`head` is past it) but the
    /// line at `tail` no longer holds the frame's `seq`. Only the consumer
    /// zeroes `seq` words inside `[tail, head)`, and the producer stores
    /// `head` after `seq`, so that state means "taken, not released".
    /// Anything that does not parse as a frame is left alone: `poll`
    /// reports a corrupt ring as before.
    pub(super) fn finish_interrupted_release(&self) {
        let m = &self.mem;
        let tail = self.tail.load(PrivateOrdering::Relaxed);
        let head = m.shared().head.load(Ordering::Acquire);
        let Ok(used) = m.used(head, tail) else {
            return;
        };
        if used == 0 || self.ready_at(tail) {
            return;
        }
        let mut pos = tail & m.mask();
        let mut skip = 0;
        let mut len = m.read_len(pos);
        if len == WRAP {
            if pos == 0 {
                return;
            }
            // The marker's line was zeroed first; the frame after it may
            // be zeroed too, but its `len` is intact.
            skip = m.cap - pos;
            pos = 0;
            len = m.read_len(0);
        }
        if len > m.max_frame {
            return;
        }
        let slot = slot_size(len as usize) as u32;
        if pos + slot > m.cap || skip + slot > used {
            return;
        }
        let at = FrameAt {
            offset: pos + FRAME_HEADER as u32,
            len,
            next_tail: tail.wrapping_add(skip + slot),
        };
        // Zero the rest of the slot's lines and store `tail`, as the
        // predecessor would have.
        self.take(at, |_| ());
    }
}

/// The `head` a new producer starts from, and the ring's free lines made
/// free again. `head` and `tail` are the shared indices (head aligned).
///
/// Starts from `tail` when the consumer is ahead of `head` (it took frames
/// whose `head` store was lost), walks the frames published from there
/// (each line's `seq` names its index), and zeroes the `seq` word of every
/// line outside `[tail, head)` — a wrap's frame published before its marker
/// would otherwise be taken for a frame laps later. The consumer touches
/// only lines inside `[tail, head)` (its own `tail` is at least the one
/// read here), so the zeroing races nothing.
pub(super) fn recover_head(m: &RingMem, head: u32, tail: u32) -> u32 {
    if tail & (FRAME_ALIGN as u32 - 1) != 0 {
        return head; // scribbled: `try_send` reports it
    }
    let mut h = match (m.used(head, tail), m.used(tail, head)) {
        (Ok(_), _) => head,
        (Err(_), Ok(_)) => tail,
        _ => return head, // indices out of range: `try_send` reports it
    };
    loop {
        let pos = h & m.mask();
        if m.seq_word(pos).load(PrivateOrdering::Acquire) != seq_of(h) {
            break;
        }
        let next = match m.read_len(pos) {
            WRAP if pos == 0 => break,
            WRAP => h.wrapping_add(m.cap - pos),
            len if len > m.max_frame => break,
            len => {
                let slot = slot_size(len as usize) as u32;
                if pos + slot > m.cap {
                    break;
                }
                h.wrapping_add(slot)
            }
        };
        if m.used(next, tail).is_err() {
            break;
        }
        h = next;
    }
    if head == 0 && tail == 0 {
        // A ring whose indices never moved (a new channel) wrote no line
        // outside the frames just walked; skipping the sweep leaves its
        // pages untouched until used.
        return h;
    }
    let used = h.wrapping_sub(tail);
    let start = tail & m.mask();
    let mut line = 0;
    while line < m.cap {
        if line.wrapping_sub(start) & m.mask() >= used {
            m.seq_word(line).store(0, PrivateOrdering::Relaxed);
        }
        line += FRAME_ALIGN as u32;
    }
    // Publish the recovered index (release: the zeroed lines first).
    m.shared().head.store(h, Ordering::Release);
    h
}

#[cfg(test)]
mod tests {
    use super::super::{Consumer, Producer, RingShared};
    use super::*;

    /// A ring in private memory whose ends can be rebuilt, as a successor
    /// process maps the same memory.
    struct Mem {
        shared: Box<RingShared>,
        data: Vec<u64>,
    }

    const CAP: usize = 1024;
    const MAX: usize = 300;

    impl Mem {
        fn new() -> Self {
            Mem {
                // SAFETY: all-zero bytes are a valid empty ring (atomics).
                shared: Box::new(unsafe { std::mem::zeroed() }),
                data: vec![0u64; CAP / 8],
            }
        }
        fn producer(&mut self) -> Producer {
            // SAFETY: `self` outlives every end in these tests.
            unsafe { Producer::new(&*self.shared, self.data.as_mut_ptr() as *mut u8, CAP, MAX) }
        }
        fn consumer(&mut self) -> Consumer {
            // SAFETY: as in `producer`.
            unsafe { Consumer::new(&*self.shared, self.data.as_mut_ptr() as *mut u8, CAP, MAX) }
        }
        fn seq_at(&self, offset: usize) -> u32 {
            // Little-endian: the `seq` word is the high half of the
            // line's first u64.
            (self.data[offset / 8] >> 32) as u32
        }
        fn zero_seq(&mut self, offset: usize) {
            self.data[offset / 8] &= 0xffff_ffff;
        }
    }

    /// Drain every frame, returning the first bytes of each.
    fn drain(c: &Consumer) -> Vec<u8> {
        let mut got = Vec::new();
        while let Some(b) = c.try_recv(|b| b[0]).unwrap() {
            got.push(b);
        }
        got
    }

    #[test]
    fn a_release_killed_after_zeroing_seq_is_finished_by_the_next_consumer() {
        let mut mem = Mem::new();
        let p = mem.producer();
        p.try_send(&[1; 100]).unwrap(); // 128-byte slot at 0
        p.try_send(&[2; 10]).unwrap(); // at 128
                                       // Killed in `take` of the first frame: its lines' `seq` zeroed,
                                       // `tail` not stored.
        mem.zero_seq(0);
        mem.zero_seq(64);
        let stuck = mem.consumer();
        assert_eq!(mem.shared.tail.load(Ordering::Relaxed), 128, "repaired");
        assert_eq!(drain(&stuck), vec![2]);
        // The channel works again, room freed for the producer.
        for i in 3..10u8 {
            p.try_send(&[i; 100]).unwrap();
        }
        assert_eq!(drain(&stuck), vec![3, 4, 5, 6, 7, 8, 9]);
    }

    #[test]
    fn a_release_killed_half_way_through_a_wrap_is_finished_too() {
        let mut mem = Mem::new();
        let p = mem.producer();
        let c = mem.consumer();
        for _ in 0..7 {
            p.try_send(&[1; 100]).unwrap();
        }
        assert_eq!(drain(&c).len(), 7);
        p.try_send(&[2; 200]).unwrap(); // marker at 896, frame at 0
        p.try_send(&[3; 10]).unwrap(); // at 256
                                       // Killed after zeroing the marker's line and the frame's first.
        mem.zero_seq(896);
        mem.zero_seq(0);
        let next = mem.consumer();
        assert_eq!(
            mem.shared.tail.load(Ordering::Relaxed),
            896 + 128 + 256,
            "marker and frame released"
        );
        assert_eq!(mem.seq_at(64), 0, "every line of the slot is free");
        assert_eq!(drain(&next), vec![3]);
    }

    #[test]
    fn a_whole_frame_still_published_is_not_released_by_the_repair() {
        let mut mem = Mem::new();
        let p = mem.producer();
        p.try_send(&[5; 10]).unwrap();
        let c = mem.consumer();
        assert_eq!(mem.shared.tail.load(Ordering::Relaxed), 0);
        assert_eq!(drain(&c), vec![5]);
    }

    #[test]
    fn a_producer_killed_before_storing_head_is_caught_up_by_the_next() {
        let mut mem = Mem::new();
        let p = mem.producer();
        let c = mem.consumer();
        p.try_send(&[1; 10]).unwrap();
        p.try_send(&[2; 10]).unwrap();
        // Killed after publishing the second frame, before `head` moved.
        mem.shared.head.store(64, Ordering::Relaxed);
        assert_eq!(drain(&c), vec![1, 2]);
        // The consumer is ahead of `head`: without repair the indices read
        // as corrupt.
        let next = mem.producer();
        assert_eq!(mem.shared.head.load(Ordering::Relaxed), 128);
        for i in 3..20u8 {
            next.try_send(&[i; 10]).unwrap();
            assert_eq!(drain(&c), vec![i]);
        }
    }

    #[test]
    fn a_frame_published_without_its_head_is_kept_for_the_consumer() {
        let mut mem = Mem::new();
        let p = mem.producer();
        p.try_send(&[1; 10]).unwrap();
        p.try_send(&[2; 10]).unwrap();
        mem.shared.head.store(64, Ordering::Relaxed);
        let next = mem.producer();
        next.try_send(&[3; 10]).unwrap();
        let c = mem.consumer();
        assert_eq!(drain(&c), vec![1, 2, 3], "nothing overwritten");
    }

    #[test]
    fn a_wrap_frame_published_without_its_marker_is_freed() {
        let mut mem = Mem::new();
        let p = mem.producer();
        let c = mem.consumer();
        for _ in 0..7 {
            p.try_send(&[1; 100]).unwrap();
        }
        assert_eq!(drain(&c).len(), 7);
        p.try_send(&[2; 200]).unwrap(); // frame at 0, then marker at 896
                                        // Killed between the two: the marker's seq never stored.
        mem.zero_seq(896);
        mem.shared.head.store(896, Ordering::Relaxed);
        let next = mem.producer();
        assert_eq!(mem.seq_at(0), 0, "the orphan frame is no frame");
        assert_eq!(mem.shared.head.load(Ordering::Relaxed), 896);
        // Two frames reach the end of the lap; the next index is the
        // orphan's (896 + 128), yet nothing is there.
        next.try_send(&[3; 50]).unwrap();
        next.try_send(&[4; 50]).unwrap();
        assert_eq!(drain(&c), vec![3, 4]);
        for i in 5..40u8 {
            next.try_send(&[i; 50]).unwrap();
            assert_eq!(drain(&c), vec![i]);
        }
    }
}
