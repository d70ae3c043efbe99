//! Single-producer/single-consumer byte rings of variable-length frames, in
//! memory shared with a peer that may be hostile.
//!
//! # Layout
//!
//! A ring is a [`RingShared`] header (three cache lines) plus a data area of
//! `cap` bytes (`cap` a power of two). `head` and `tail` count bytes ever
//! produced and consumed, modulo 2^32; the byte at index `i` lives at
//! `data[i % cap]`. Frames start on 64-byte boundaries:
//!
//! ```text
//!  +--------+--------+----------------------+------ padding to 64 ------+
//!  | len u32| seq u32| len bytes of payload |                           |
//!  +--------+--------+----------------------+---------------------------+
//! ```
//!
//! A frame never straddles the end of the data area. When it would, the
//! producer writes a header whose `len` is [`WRAP`] at the current position
//! and puts the frame at offset 0; the consumer skips to the start.
//!
//! # Publication: the consumer watches the frame's own line
//!
//! `seq` is the frame's start index with the low bit set (`index | 1`). The
//! producer writes payload and `len`, then stores `seq` with release; the
//! consumer polls the `seq` word where the next frame will start and takes
//! the frame when it holds the expected value (acquire). So a message costs
//! one cache-line transfer for a frame of up to 56 bytes, not two (the
//! index line, then the data line), as in Barrelfish's UMP channels. After
//! a frame is consumed the consumer zeroes the `seq` word of every 64-byte
//! line of its slot before releasing `tail`: every line outside
//! `[tail, head)` reads `seq == 0`, so neither a stale header nor payload
//! bytes from an earlier lap can pass for a new frame. With a wrap, the
//! frame at offset 0 is published before the marker.
//!
//! # Who writes what
//!
//! * `head` — only the producer, after publishing a frame; the consumer
//!   does not need it (it reads `seq`), it is kept for inspection and for a
//!   producer that re-maps a ring.
//! * `tail` — only the consumer; published with release after the consumer
//!   is done reading the frame (the frame is lent *in place*) and has freed
//!   its lines.
//! * `event` — the consumer counts itself in before sleeping; a producer
//!   that wants the consumer awake bumps it after publishing (see
//!   [`crate::wait`] for why no wake-up is lost).
//!
//! Each end keeps its own index in private memory and trusts only that
//! one: the producer re-validates the consumer's `tail` (`tail <= head <=
//! tail + cap`, 64-byte aligned) on every use, and the consumer validates
//! every frame header (`seq`, length, bounds), so a scribbling peer yields
//! [`MsgError::Corrupt`] or garbage bytes that decoders reject, never an
//! out-of-bounds access.
//!
//! The `loom` models check the index and wake-up protocol; the `seq` word
//! lives in the data area, which loom does not model (its accesses are
//! plain atomics there, executed in sequentially consistent order).

use crate::liveness::Watch;
use std::sync::atomic::{AtomicU32 as PrivateU32, Ordering as PrivateOrdering};

use atoll_proto::boot::PollMode;

use crate::sync::{AtomicU32, Ordering};
use crate::wait::{self, Backoff, Event};
use crate::MsgError;

#[cfg(not(loom))]
mod repair;

/// Frames start on cache-line boundaries.
pub const FRAME_ALIGN: usize = 64;
/// Bytes of frame header before the payload.
pub const FRAME_HEADER: usize = 8;
/// `len` value of a wrap marker: "the next frame is at offset 0".
pub const WRAP: u32 = u32::MAX;

/// A value alone on its cache lines. 128 bytes, not 64: Intel's adjacent
/// line prefetcher pulls pairs of lines (as `crossbeam_utils::CachePadded`).
/// `repr(C)` pins the layout, which separately compiled binaries (servers,
/// the preload library) must agree on.
#[repr(C, align(128))]
pub(crate) struct Padded<T>(pub(crate) T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// The shared header of one ring. All-zero bytes are a valid empty ring.
#[repr(C)]
pub(crate) struct RingShared {
    /// Bytes ever produced. Written by the producer only.
    pub(crate) head: Padded<AtomicU32>,
    /// Bytes ever consumed. Written by the consumer only.
    pub(crate) tail: Padded<AtomicU32>,
    /// Where a consumer sleeps when the ring is empty.
    pub(crate) event: Padded<Event>,
}

#[cfg(loom)]
impl RingShared {
    pub(crate) fn new() -> Self {
        RingShared {
            head: Padded(AtomicU32::new(0)),
            tail: Padded(AtomicU32::new(0)),
            event: Padded(Event::new()),
        }
    }
}

/// The `seq` a frame header carries when the frame starts at byte index
/// `index` (never 0, the value of a free line: indices are 64-aligned).
#[inline]
const fn seq_of(index: u32) -> u32 {
    index | 1
}

/// Bytes a frame of `len` payload bytes occupies.
#[inline]
pub const fn slot_size(len: usize) -> usize {
    (FRAME_HEADER + len + FRAME_ALIGN - 1) & !(FRAME_ALIGN - 1)
}

/// Where a ring lives. Both ends hold one.
#[derive(Clone, Copy)]
struct RingMem {
    shared: *const RingShared,
    data: *mut u8,
    cap: u32,
    max_frame: u32,
}

impl RingMem {
    /// # Safety
    /// `shared` and `data .. data + cap` must stay valid (mapped, readable
    /// and writable) for as long as any end built on this value lives.
    unsafe fn new(shared: *const RingShared, data: *mut u8, cap: usize, max_frame: usize) -> Self {
        assert!(cap.is_power_of_two() && (2 * FRAME_ALIGN..=1 << 30).contains(&cap));
        // Progress guarantee: with at most `cap / 2` per frame, a frame plus
        // the padding before a wrap always fits in an empty ring.
        assert!(
            slot_size(max_frame) <= cap / 2,
            "max frame too big for ring"
        );
        RingMem {
            shared,
            data,
            cap: cap as u32,
            max_frame: max_frame as u32,
        }
    }

    #[inline]
    fn shared(&self) -> &RingShared {
        // SAFETY: valid for the life of the end (contract of `RingMem::new`);
        // every field is an atomic, for which any bit pattern is valid.
        unsafe { &*self.shared }
    }

    #[inline]
    fn mask(&self) -> u32 {
        self.cap - 1
    }

    /// Read a frame header at `pos` (64-byte aligned, `< cap`).
    #[inline]
    fn read_len(&self, pos: u32) -> u32 {
        debug_assert!(pos < self.cap && pos as usize & (FRAME_ALIGN - 1) == 0);
        // SAFETY: `pos + 4 <= cap` because `pos` is an aligned offset inside
        // the area; volatile because the peer may write it concurrently.
        unsafe { std::ptr::read_volatile(self.data.add(pos as usize) as *const u32) }
    }

    /// The `seq` word of the 64-byte line at `pos` (64-byte aligned).
    #[inline]
    fn seq_word(&self, pos: u32) -> &PrivateU32 {
        debug_assert!(pos < self.cap && pos as usize & (FRAME_ALIGN - 1) == 0);
        // SAFETY: `pos + 8 <= cap` (aligned offset inside the area), the
        // word is 4-byte aligned, and any bit pattern is a valid u32; both
        // ends access it only atomically or volatile.
        unsafe { &*(self.data.add(pos as usize + 4) as *const PrivateU32) }
    }

    /// Write a frame header: `len`, then publish it with its `seq`
    /// (release: the payload and `len` are visible before the frame is).
    #[inline]
    fn write_header(&self, pos: u32, len: u32, index: u32) {
        debug_assert!(pos < self.cap && pos as usize & (FRAME_ALIGN - 1) == 0);
        // SAFETY: as in `read_len`; the producer owns bytes in [head, tail+cap).
        unsafe { std::ptr::write_volatile(self.data.add(pos as usize) as *mut u32, len) };
        self.seq_word(pos)
            .store(seq_of(index), PrivateOrdering::Release);
    }

    /// Validate the distance between the two indices.
    #[inline]
    fn used(&self, head: u32, tail: u32) -> Result<u32, MsgError> {
        let used = head.wrapping_sub(tail);
        if used > self.cap || used as usize & (FRAME_ALIGN - 1) != 0 {
            return Err(MsgError::Corrupt("ring indices out of range"));
        }
        Ok(used)
    }
}

/// The producing end of a ring. `Send + Sync` so that it can sit in shared
/// structures, but the protocol admits one producer: callers serialise use
/// of one end (atoll gives each thread its own lane).
pub(crate) struct Producer {
    mem: RingMem,
    /// Private copy of `head`: the only one this end trusts.
    head: PrivateU32,
    /// Last `tail` read from the peer; re-read only when space seems short.
    cached_tail: PrivateU32,
}

// SAFETY: the raw pointers refer to a shared mapping that outlives the end
// (contract of `RingMem::new`); all shared accesses are atomic or volatile.
unsafe impl Send for Producer {}
// SAFETY: as above; the private indices are atomics.
unsafe impl Sync for Producer {}

impl Producer {
    /// # Safety
    /// As [`RingMem::new`]; and at most one `Producer` exists for the ring.
    pub(crate) unsafe fn new(
        shared: *const RingShared,
        data: *mut u8,
        cap: usize,
        max_frame: usize,
    ) -> Self {
        // SAFETY: forwarded contract.
        let mem = unsafe { RingMem::new(shared, data, cap, max_frame) };
        let head = mem.shared().head.load(Ordering::Relaxed);
        let tail = mem.shared().tail.load(Ordering::Acquire);
        // An aligned index; a misaligned one (scribbled) is caught below.
        let head = head & !(FRAME_ALIGN as u32 - 1);
        // A predecessor killed between publishing a frame and storing
        // `head` left `head` behind the ring's own words (`repair`).
        #[cfg(not(loom))]
        let head = repair::recover_head(&mem, head, tail);
        Producer {
            mem,
            head: PrivateU32::new(head),
            cached_tail: PrivateU32::new(tail),
        }
    }

    /// Largest payload this ring accepts.
    pub(crate) fn max_frame(&self) -> usize {
        self.mem.max_frame as usize
    }

    /// Has the consumer released every frame sent so far? Acquire: what
    /// it did before releasing the last one (it releases a frame only
    /// after handling it, `Consumer::take`) is visible to the caller.
    pub(crate) fn all_taken(&self) -> bool {
        self.mem.shared().tail.load(Ordering::Acquire) == self.head.load(PrivateOrdering::Relaxed)
    }

    /// Put `frame` in the ring if there is room now.
    /// Hot path (every request and reply): no allocation, no system call.
    pub(crate) fn try_send(&self, frame: &[u8]) -> Result<(), MsgError> {
        let m = &self.mem;
        let len = frame.len();
        if len > m.max_frame as usize {
            return Err(MsgError::TooLarge(len));
        }
        let slot = slot_size(len) as u32;
        let head = self.head.load(PrivateOrdering::Relaxed);
        let pos = head & m.mask();
        let pad = if pos + slot > m.cap { m.cap - pos } else { 0 };
        let need = pad + slot;

        let mut tail = self.cached_tail.load(PrivateOrdering::Relaxed);
        if m.cap - m.used(head, tail).unwrap_or(m.cap) < need {
            // Acquire: the consumer finished reading what it released.
            tail = m.shared().tail.load(Ordering::Acquire);
            let used = m.used(head, tail)?;
            self.cached_tail.store(tail, PrivateOrdering::Relaxed);
            if m.cap - used < need {
                return Err(MsgError::Full);
            }
        }

        let at = if pad != 0 { 0 } else { pos };
        // SAFETY: [at, at + slot) lies inside the data area (a frame never
        // straddles the end) and belongs to the producer until `head` moves
        // past it; `frame` is private memory, so the ranges do not overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(
                frame.as_ptr(),
                m.data.add(at as usize + FRAME_HEADER),
                len,
            );
        }
        m.write_header(at, len as u32, head.wrapping_add(pad));
        if pad != 0 {
            // The marker last: a consumer that sees it sees the frame.
            m.write_header(pos, WRAP, head);
        }
        let new_head = head.wrapping_add(need);
        self.head.store(new_head, PrivateOrdering::Relaxed);
        // Release: the frame bytes are visible before the index that covers them.
        m.shared().head.store(new_head, Ordering::Release);
        Ok(())
    }

    /// Put `frame` in the ring, waiting for room (atomic delivery, Hare
    /// §3.7.2). Gives up with `BrokenPipe` once `closed()` holds.
    pub(crate) fn send(&self, frame: &[u8], closed: impl Fn() -> bool) -> Result<(), MsgError> {
        let mut backoff = Backoff::new();
        let mut watch = Watch::new();
        loop {
            match self.try_send(frame) {
                Err(MsgError::Full) => {
                    if closed() {
                        return Err(broken_pipe());
                    }
                    backoff.snooze();
                    watch.waited();
                }
                other => return other,
            }
        }
    }

    /// Wake the consumer if it announced sleep. Call after `send`.
    #[inline]
    pub(crate) fn wake_consumer(&self) {
        self.mem.shared().event.notify();
    }
}

/// A validated frame waiting in the ring, not yet released.
#[derive(Clone, Copy)]
pub(crate) struct FrameAt {
    offset: u32,
    len: u32,
    /// `tail` once this frame (and a wrap before it) is released.
    next_tail: u32,
}

/// The consuming end of a ring (one per ring, as for [`Producer`]).
pub(crate) struct Consumer {
    mem: RingMem,
    /// Private copy of `tail`: the only one this end trusts.
    tail: PrivateU32,
}

// SAFETY: as for `Producer`.
unsafe impl Send for Consumer {}
// SAFETY: as for `Producer`.
unsafe impl Sync for Consumer {}

impl Consumer {
    /// # Safety
    /// As [`RingMem::new`]; and at most one `Consumer` exists for the ring.
    pub(crate) unsafe fn new(
        shared: *const RingShared,
        data: *mut u8,
        cap: usize,
        max_frame: usize,
    ) -> Self {
        // SAFETY: forwarded contract.
        let mem = unsafe { RingMem::new(shared, data, cap, max_frame) };
        let tail = mem.shared().tail.load(Ordering::Relaxed) & !(FRAME_ALIGN as u32 - 1);
        let consumer = Consumer {
            mem,
            tail: PrivateU32::new(tail),
        };
        // A predecessor killed inside `take` left a frame half released
        // (`repair`).
        #[cfg(not(loom))]
        consumer.finish_interrupted_release();
        consumer
    }

    /// Bytes the producer has published and this end not yet released
    /// (frames with their headers and padding): how full the ring is, for
    /// monitoring. The producer's `head` is not trusted: a value outside
    /// `[tail, tail + cap]` reads as a full ring.
    pub(crate) fn queued_bytes(&self) -> u32 {
        let m = &self.mem;
        let tail = self.tail.load(PrivateOrdering::Relaxed);
        let head = m.shared().head.load(Ordering::Relaxed);
        m.used(head, tail).unwrap_or(m.cap)
    }

    /// Find and validate the next frame, if any; does not release it.
    /// Hot path: no allocation, no system call.
    pub(crate) fn poll(&self) -> Result<Option<FrameAt>, MsgError> {
        let m = &self.mem;
        let tail = self.tail.load(PrivateOrdering::Relaxed);
        let mut pos = tail & m.mask();
        // Acquire: pairs with the producer's release of the frame's `seq`,
        // so `len` and the payload read below are the frame's.
        if !self.ready_at(tail) {
            return Ok(None);
        }
        let mut skip = 0;
        let mut len = m.read_len(pos);
        if len == WRAP {
            if pos == 0 {
                return Err(MsgError::Corrupt("wrap marker at ring start"));
            }
            skip = m.cap - pos;
            pos = 0;
            // The producer publishes the frame before the marker.
            if m.seq_word(0).load(PrivateOrdering::Acquire) != seq_of(tail.wrapping_add(skip)) {
                return Err(MsgError::Corrupt("wrap marker without a frame after it"));
            }
            len = m.read_len(0);
            if len == WRAP {
                return Err(MsgError::Corrupt("two wrap markers in a row"));
            }
        }
        if len > m.max_frame {
            return Err(MsgError::Corrupt("frame length exceeds the largest frame"));
        }
        let slot = slot_size(len as usize) as u32;
        if pos + slot > m.cap {
            return Err(MsgError::Corrupt("frame straddles the end of the ring"));
        }
        Ok(Some(FrameAt {
            offset: pos + FRAME_HEADER as u32,
            len,
            next_tail: tail.wrapping_add(skip + slot),
        }))
    }

    /// Lend the frame found by `poll` to `f` in place, then release it.
    pub(crate) fn take<R>(&self, at: FrameAt, f: impl FnOnce(&[u8]) -> R) -> R {
        // SAFETY: `poll` checked that [offset, offset + len) lies inside the
        // data area and before `head`, so the producer does not write it
        // until we move `tail`. (A hostile producer could still scribble on
        // it; the bytes are then garbage but the slice stays in bounds, and
        // every decoder of frames validates its input.)
        let bytes = unsafe {
            std::slice::from_raw_parts(self.mem.data.add(at.offset as usize), at.len as usize)
        };
        let r = f(bytes);
        // Free every line of the slot (and of a wrap marker before it): a
        // line outside [tail, head) always has `seq` 0, so stale headers
        // or payload bytes of earlier laps never look like a new frame.
        let m = &self.mem;
        let tail = self.tail.load(PrivateOrdering::Relaxed);
        let start = at.offset - FRAME_HEADER as u32;
        if at.next_tail.wrapping_sub(tail) != slot_size(at.len as usize) as u32 {
            m.seq_word(tail & m.mask())
                .store(0, PrivateOrdering::Relaxed);
        }
        let mut line = start;
        while line < start + slot_size(at.len as usize) as u32 {
            m.seq_word(line).store(0, PrivateOrdering::Relaxed);
            line += FRAME_ALIGN as u32;
        }
        self.tail.store(at.next_tail, PrivateOrdering::Relaxed);
        // Release: our reads of the frame are done before the producer may
        // reuse its bytes.
        self.mem
            .shared()
            .tail
            .store(at.next_tail, Ordering::Release);
        r
    }

    /// Has the producer published a frame (or wrap marker) at index `tail`?
    /// Reads only the frame's own header line: a spinning consumer then
    /// waits on the very line the frame travels in (one cross-core
    /// transfer per message, as Barrelfish's UMP channels), never on the
    /// producer's `head`.
    #[inline]
    fn ready_at(&self, tail: u32) -> bool {
        let m = &self.mem;
        m.seq_word(tail & m.mask()).load(PrivateOrdering::Acquire) == seq_of(tail)
    }

    /// Is a frame (or wrap marker) waiting? Consumes nothing.
    pub(crate) fn has_frame(&self) -> bool {
        self.ready_at(self.tail.load(PrivateOrdering::Relaxed))
    }

    /// The next frame, lent to `f`, if there is one.
    pub(crate) fn try_recv<R>(&self, f: impl FnOnce(&[u8]) -> R) -> Result<Option<R>, MsgError> {
        Ok(self.poll()?.map(|at| self.take(at, f)))
    }

    /// Lend the next frame, if any, to `f` without releasing it.
    pub(crate) fn peek<R>(&self, f: impl FnOnce(&[u8]) -> R) -> Result<Option<R>, MsgError> {
        Ok(self.poll()?.map(|at| {
            // SAFETY: as in `take`: `poll` checked the frame's bounds, and
            // the producer does not write it until `tail` moves past it.
            f(unsafe {
                std::slice::from_raw_parts(self.mem.data.add(at.offset as usize), at.len as usize)
            })
        }))
    }

    /// Fault injection: publish, where the next frame is due, a header
    /// whose length no frame can have — what a hostile producer could
    /// write — so the next [`Consumer::poll`] finds the ring corrupt.
    #[cfg(not(loom))]
    pub(crate) fn scribble_next_frame(&self) {
        let m = &self.mem;
        let tail = self.tail.load(PrivateOrdering::Relaxed);
        let pos = tail & m.mask();
        // SAFETY: `pos` is an aligned offset inside the data area (as in
        // `read_len`); the producer may race us, which is the point.
        unsafe { std::ptr::write_volatile(m.data.add(pos as usize) as *mut u32, m.max_frame + 1) };
        m.seq_word(pos)
            .store(seq_of(tail), PrivateOrdering::Release);
    }

    /// Wait for the next frame honouring `mode` and lend it to `f`. Gives up
    /// with `BrokenPipe` once `closed()` holds and the ring is empty.
    pub(crate) fn recv<R>(
        &self,
        mode: PollMode,
        closed: impl Fn() -> bool,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<R, MsgError> {
        let mut watch = Watch::new();
        loop {
            if let Some(at) = self.poll()? {
                return Ok(self.take(at, f));
            }
            if closed() {
                return Err(broken_pipe());
            }
            let s = self.mem.shared();
            let tail = self.tail.load(PrivateOrdering::Relaxed);
            wait::wait(mode, &s.event, || self.ready_at(tail) || closed());
            watch.waited();
        }
    }
}

pub(crate) fn broken_pipe() -> MsgError {
    MsgError::Io(std::io::Error::from(std::io::ErrorKind::BrokenPipe))
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// A ring in private memory, with direct access for scribbling.
    struct TestRing {
        shared: Box<RingShared>,
        data: Vec<u64>,
        cap: usize,
        max: usize,
    }

    impl TestRing {
        fn new(cap: usize, max: usize) -> Self {
            TestRing {
                // SAFETY: all-zero bytes are a valid empty ring (atomics).
                shared: Box::new(unsafe { std::mem::zeroed() }),
                data: vec![0u64; cap / 8],
                cap,
                max,
            }
        }
        fn ends(&mut self) -> (Producer, Consumer) {
            let s: *const RingShared = &*self.shared;
            let d = self.data.as_mut_ptr() as *mut u8;
            // SAFETY: the TestRing outlives both ends in every test below.
            unsafe {
                (
                    Producer::new(s, d, self.cap, self.max),
                    Consumer::new(s, d, self.cap, self.max),
                )
            }
        }
        fn word(&mut self, byte_offset: usize) -> *mut u32 {
            // SAFETY: test-only pointer into the data area.
            unsafe { (self.data.as_mut_ptr() as *mut u8).add(byte_offset) as *mut u32 }
        }
    }

    fn pattern(seed: u32, len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| (seed as usize * 31 + i * 7) as u8)
            .collect()
    }

    #[test]
    fn slot_sizes_are_cache_line_multiples() {
        assert_eq!(slot_size(0), 64);
        assert_eq!(slot_size(56), 64);
        assert_eq!(slot_size(57), 128);
        assert_eq!(slot_size(atoll_proto::MAX_FRAME), 33 * 1024 + 64);
    }

    #[test]
    fn frames_come_out_in_order_across_many_wraps() {
        let mut r = TestRing::new(1024, 300);
        let (p, c) = r.ends();
        let mut next_out = 0u32;
        for i in 0..2000u32 {
            let len = (i as usize * 37) % 301;
            let f = pattern(i, len);
            loop {
                match p.try_send(&f) {
                    Ok(()) => break,
                    Err(MsgError::Full) => {
                        let want = pattern(next_out, (next_out as usize * 37) % 301);
                        c.try_recv(|b| assert_eq!(b, &want[..])).unwrap().unwrap();
                        next_out += 1;
                    }
                    Err(e) => panic!("{e}"),
                }
            }
        }
        while let Some(()) = c
            .try_recv(|b| assert_eq!(b, &pattern(next_out, (next_out as usize * 37) % 301)[..]))
            .unwrap()
        {
            next_out += 1;
        }
        assert_eq!(next_out, 2000);
        // Indices wrapped past the data area many times.
        assert!(r.shared.head.load(Ordering::Relaxed) as usize > 100 * r.cap);
    }

    #[test]
    fn wrap_marker_moves_a_frame_that_does_not_fit_to_the_start() {
        let mut r = TestRing::new(1024, 300);
        let (p, c) = r.ends();
        // 896 bytes used: a 200-byte frame (256-byte slot) cannot fit before
        // the end, so it goes to offset 0 behind a wrap marker.
        for _ in 0..7 {
            p.try_send(&[1; 100]).unwrap();
        }
        for _ in 0..7 {
            c.try_recv(|b| assert_eq!(b, &[1; 100])).unwrap().unwrap();
        }
        p.try_send(&[2; 200]).unwrap();
        assert_eq!(r.shared.head.load(Ordering::Relaxed), 896 + 128 + 256);
        // SAFETY: test-only reads of the data area.
        unsafe {
            assert_eq!(*r.word(896), WRAP);
            assert_eq!(*r.word(0), 200);
        }
        c.try_recv(|b| assert_eq!(b, &[2; 200])).unwrap().unwrap();
        assert_eq!(c.try_recv(|_| ()).unwrap(), None);
    }

    #[test]
    fn max_size_frames_round_trip_and_larger_ones_are_refused() {
        let mut r = TestRing::new(256 * 1024, atoll_proto::MAX_FRAME);
        let (p, c) = r.ends();
        let big = pattern(9, atoll_proto::MAX_FRAME);
        for _ in 0..20 {
            p.try_send(&big).unwrap();
            c.try_recv(|b| assert_eq!(b, &big[..])).unwrap().unwrap();
        }
        let too_big = vec![0u8; atoll_proto::MAX_FRAME + 1];
        assert!(matches!(
            p.try_send(&too_big),
            Err(MsgError::TooLarge(n)) if n == atoll_proto::MAX_FRAME + 1
        ));
        // An empty frame is a frame too.
        p.try_send(&[]).unwrap();
        assert_eq!(c.try_recv(|b| b.len()).unwrap(), Some(0));
    }

    #[test]
    fn full_ring_reports_full_then_accepts_after_release() {
        let mut r = TestRing::new(1024, 300);
        let (p, c) = r.ends();
        for _ in 0..16 {
            p.try_send(&[7; 50]).unwrap();
        }
        assert!(matches!(p.try_send(&[7; 50]), Err(MsgError::Full)));
        c.try_recv(|_| ()).unwrap().unwrap();
        p.try_send(&[8; 50]).unwrap();
    }

    #[test]
    fn blocked_sender_progresses_when_consumer_drains() {
        let mut r = TestRing::new(1024, 300);
        let (p, c) = r.ends();
        std::thread::scope(|s| {
            s.spawn(|| {
                for i in 0..5000u32 {
                    p.send(&i.to_le_bytes(), || false).unwrap();
                    p.wake_consumer();
                }
            });
            for i in 0..5000u32 {
                let got = c
                    .recv(
                        PollMode::Adaptive,
                        || false,
                        |b| u32::from_le_bytes(b.try_into().unwrap()),
                    )
                    .unwrap();
                assert_eq!(got, i);
            }
        });
    }

    #[test]
    fn consumer_trusts_frame_headers_not_the_producer_index() {
        let mut r = TestRing::new(1024, 300);
        let (p, c) = r.ends();
        p.try_send(&[1; 10]).unwrap();
        r.shared.head.store(64 + 4096, Ordering::Relaxed); // beyond tail + cap
        assert_eq!(c.try_recv(|b| b.len()).unwrap(), Some(10));
        // A header whose seq is not the expected index is not a frame.
        p.try_send(&[2; 10]).unwrap();
        // SAFETY: test-only scribble on the second frame's seq word.
        unsafe { *r.word(64 + 4) = 1 };
        assert_eq!(c.try_recv(|_| ()).unwrap(), None);
    }

    #[test]
    fn stale_payload_of_an_earlier_lap_never_passes_for_a_frame() {
        let mut r = TestRing::new(1024, 300);
        let (p, c) = r.ends();
        // Lap 1: a 128-byte slot whose payload holds, exactly where the
        // header of a frame starting at index 1024 + 64 would carry its
        // seq, that very value.
        let mut f = vec![0u8; 120];
        f[60..64].copy_from_slice(&seq_of(1024 + 64).to_le_bytes());
        p.try_send(&f).unwrap();
        assert_eq!(c.try_recv(|b| b.to_vec()).unwrap().unwrap(), f);
        for _ in 0..14 {
            p.try_send(&[3; 10]).unwrap();
            c.try_recv(|_| ()).unwrap().unwrap();
        }
        // Lap 2: one frame at index 1024; the consumer then waits at 1088.
        p.try_send(&[4; 10]).unwrap();
        assert_eq!(c.try_recv(|b| b[0]).unwrap(), Some(4));
        assert_eq!(c.try_recv(|_| ()).unwrap(), None);
    }

    #[test]
    fn corrupt_consumer_index_is_detected_by_producer() {
        let mut r = TestRing::new(1024, 300);
        let (p, _c) = r.ends();
        for _ in 0..16 {
            p.try_send(&[7; 50]).unwrap();
        }
        // Tail claims more was consumed than was ever produced.
        r.shared.tail.store(4096, Ordering::Relaxed);
        assert!(matches!(p.try_send(&[7; 50]), Err(MsgError::Corrupt(_))));
    }

    #[test]
    fn corrupt_lengths_are_detected_never_read_out_of_bounds() {
        let cases: &[(u32, &str)] = &[(u32::MAX - 1, "huge"), (301, "over max frame")];
        for &(bad, what) in cases {
            let mut r = TestRing::new(1024, 300);
            let (p, c) = r.ends();
            p.try_send(&[1; 10]).unwrap(); // one 64-byte slot
                                           // SAFETY: test-only scribble on the header.
            unsafe { *r.word(0) = bad };
            assert!(
                matches!(c.try_recv(|_| ()), Err(MsgError::Corrupt(_))),
                "{what} not detected"
            );
        }
        // A wrap marker at offset 0, or one pointing at another marker.
        let mut r = TestRing::new(1024, 300);
        let (p, c) = r.ends();
        p.try_send(&[1; 10]).unwrap();
        // SAFETY: test-only scribble on the header.
        unsafe { *r.word(0) = WRAP };
        assert!(matches!(c.try_recv(|_| ()), Err(MsgError::Corrupt(_))));

        let mut r = TestRing::new(1024, 300);
        let (p, c) = r.ends();
        for _ in 0..15 {
            p.try_send(&[1; 10]).unwrap();
            c.try_recv(|_| ()).unwrap().unwrap();
        }
        p.try_send(&[1; 10]).unwrap(); // at offset 960, the last slot
                                       // SAFETY: test-only scribbles on headers.
        unsafe {
            *r.word(960) = WRAP;
            *r.word(0) = WRAP;
        }
        assert!(matches!(c.try_recv(|_| ()), Err(MsgError::Corrupt(_))));
        // A wrap whose skip covers everything that was produced.
        // SAFETY: test-only scribble.
        unsafe { *r.word(0) = 10 };
        assert!(matches!(c.try_recv(|_| ()), Err(MsgError::Corrupt(_))));
    }

    #[test]
    fn sleeping_consumer_is_woken_by_producer() {
        let mut r = TestRing::new(1024, 300);
        let (p, c) = r.ends();
        std::thread::scope(|s| {
            s.spawn(|| {
                for i in 0..200u32 {
                    p.send(&i.to_le_bytes(), || false).unwrap();
                    p.wake_consumer();
                    if i % 10 == 0 {
                        std::thread::yield_now();
                    }
                }
            });
            for i in 0..200u32 {
                let got = c
                    .recv(
                        PollMode::Block,
                        || false,
                        |b| u32::from_le_bytes(b.try_into().unwrap()),
                    )
                    .unwrap();
                assert_eq!(got, i);
            }
        });
        // Every announced sleeper counted itself out again.
        assert_eq!(r.shared.event.sleepers(), 0);
    }
}

/// `loom` model tests of the ring protocol: run with
/// `RUSTFLAGS="--cfg loom" cargo test -p atoll-msg --release --lib loom`.
#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::Arc;

    struct LoomRing {
        shared: RingShared,
        data: std::cell::UnsafeCell<[u64; 32]>, // 256 bytes
    }
    // SAFETY: accessed only through the ring ends, which follow the protocol.
    unsafe impl Sync for LoomRing {}
    unsafe impl Send for LoomRing {}

    fn ends(r: &LoomRing) -> (Producer, Consumer) {
        let d = r.data.get() as *mut u8;
        // SAFETY: the Arc'ed ring outlives both ends in each model.
        unsafe {
            (
                Producer::new(&r.shared, d, 256, 64),
                Consumer::new(&r.shared, d, 256, 64),
            )
        }
    }

    #[test]
    fn loom_frames_arrive_in_order_with_wrap_and_full() {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(|| {
            let r = Arc::new(LoomRing {
                shared: RingShared::new(),
                data: std::cell::UnsafeCell::new([0; 32]),
            });
            // Start both indices 64 bytes before the end of the 256-byte
            // ring: the first frame (128-byte slot) must wrap, and the
            // second finds the ring full until the first is released.
            r.shared.head.store(192, Ordering::Relaxed);
            r.shared.tail.store(192, Ordering::Relaxed);
            let (p, c) = ends(&r);
            let r2 = r.clone();
            let t = loom::thread::spawn(move || {
                let _keep = r2;
                for i in 0..2u8 {
                    p.send(&[i; 60], || false).unwrap();
                    p.wake_consumer();
                }
            });
            for i in 0..2u8 {
                let v = c
                    .recv(
                        PollMode::Block,
                        || false,
                        |b| {
                            assert_eq!(b.len(), 60);
                            b[59]
                        },
                    )
                    .unwrap();
                assert_eq!(v, i);
            }
            t.join().unwrap();
            assert_eq!(r.shared.tail.load(Ordering::Relaxed), 192 + 64 + 128 + 128);
        });
    }

    #[test]
    fn loom_no_lost_wakeup_for_a_blocking_consumer() {
        loom::model(|| {
            let r = Arc::new(LoomRing {
                shared: RingShared::new(),
                data: std::cell::UnsafeCell::new([0; 32]),
            });
            let (p, c) = ends(&r);
            let r2 = r.clone();
            let t = loom::thread::spawn(move || {
                let _keep = r2;
                p.send(&[5; 8], || false).unwrap();
                p.wake_consumer();
            });
            // Block mode sleeps at once: a lost wake-up deadlocks, which
            // loom reports.
            let v = c.recv(PollMode::Block, || false, |b| b[0]).unwrap();
            assert_eq!(v, 5);
            t.join().unwrap();
        });
    }
}
