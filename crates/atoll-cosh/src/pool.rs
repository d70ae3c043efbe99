//! The block pool shared by the domains of one instance (Cosh §4: one
//! block manager owns one physical pool and every buffer is a range of
//! it).
//!
//! One memfd, made before the domains fork and held by all of them, with
//! a header and then the data, in page units:
//!
//! ```text
//!   header: magic, units, lock (its holder's thread id, 0 if free),
//!           next domain id, the range the lock's holder is changing
//!           (first unit, units; 0 units if none),
//!           used bitmap (a bit per unit),
//!           per unit, one 16-byte record (so a transfer touches one
//!           cache line of the header per block):
//!             run (units of the block starting here, 0 if none),
//!             refs (processes holding the block),
//!             to (pool domain the block is in flight to, 0 if none),
//!             view (process id of a sender whose view of the block is
//!                   still to go, 0 if none: see `Pool::send`)
//!   data:   units × page
//! ```
//!
//! A transfer between pool domains names blocks by their offset in the
//! memfd ([`PoolRef`]); no descriptor travels. The sender marks the block
//! in flight to the receiver ([`Pool::send`]); the receiver takes it only
//! if the header agrees ([`Pool::claim`]): the range starts a block of
//! exactly that length, inside the pool, in flight to it. So a malformed
//! or hostile ticket gets an error, never a mapping of memory other than
//! the block it was sent.
//!
//! Trust: every pool domain holds the memfd read/write and the header is
//! shared memory, as Cosh's domains trust their one block manager. A
//! process that ignores the library can map any range writable; the
//! mappings the library makes follow the rights (a read-only view faults
//! on a write, a moved-away view on any access). Peers that do not trust
//! each other use blocks of their own, sealed (`block`, `ticket`).
//!
//! Allocation is first fit over the bitmap under a spin lock held for a
//! few hundred instructions; a freed range is usually handed out again at
//! the same offset, which lets domains keep their mappings of it (see
//! `BlockManager`'s mapping cache).
//!
//! A process may die holding the lock (killed inside `alloc`): the lock
//! word names the holding thread, and a waiter that finds that thread
//! gone takes the lock back (as the client's ring locks do). Before it
//! changes anything, a holder writes down the range it is about to
//! allocate or free; whichever it was, a holder that died leaves nobody
//! holding that range (an allocation not yet returned, a block whose last
//! reference went), so the one that takes the lock back frees the range
//! whole and the header is consistent again.
//!
//! Free memory goes back to the kernel in batches: when a block of at
//! least [`PUNCH_MIN`] is freed and no give-back ran in the last
//! [`GIVE_BACK_EVERY`], every free run of at least `PUNCH_MIN` is punched
//! out of the memfd (`fallocate(PUNCH_HOLE)`), so a pool that once held a
//! large transfer does not keep the memory. Not at every large free: a
//! punched range costs its next holder a fresh zeroed page per page, and
//! a sender that copies megabytes in a loop reuses one range every hop
//! (punching it each time made a 1 MiB pool copy eight times slower).
//! Small blocks keep their pages, which the next holder reuses hot. A
//! range freed within `GIVE_BACK_EVERY` of a give-back stays until the
//! next large free after that.

use crate::sync::{self, AtomicU32, AtomicU64, Ordering};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use serde::{Deserialize, Serialize};

/// Under loom the header is model memory (`sync::model`), so the model
/// checks this very code.
#[cfg(loom)]
use crate::sync::model::Mem as Header;
use crate::sys;
#[cfg(not(loom))]
use crate::sys::Words as Header;
use crate::CoshError;

/// A domain's number in a pool (from 1; 0 means "none" in the header).
pub type PoolDomain = u32;

/// A block of the pool: its offset in the memfd and its length, both
/// whole pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PoolRef {
    pub off: u64,
    pub len: u64,
}

const MAGIC: u64 = 0x6174_6f6c_6c50_6f6f; // "atollPoo"

/// Word indices of the fixed header fields (in `u32` words).
const W_LOCK: usize = 2;
const W_NEXT_DOMAIN: usize = 3;
const W_UNITS: usize = 4;
/// The range the lock's holder is changing: first unit, units (0: none).
const W_FIX_START: usize = 5;
const W_FIX_UNITS: usize = 6;
/// When free memory last went back to the kernel (`now_ms`; 0: never).
const W_GAVE_BACK_AT: usize = 7;
/// `u32` words before the bitmap (the magic takes the first two).
const FIXED_WORDS: usize = 16;
/// A unit's record: `u32` words, and the index of each field.
const REC_WORDS: usize = 4;
const RUN: usize = 0;
const REFS: usize = 1;
const TO: usize = 2;
const VIEW: usize = 3;

/// Spins of a wait on the header before it asks whether the process it
/// waits for still exists (then it yields between looks).
#[cfg(not(loom))]
const SPINS: u32 = 64;
#[cfg(loom)]
const SPINS: u32 = 2;

/// The shortest free run given back to the kernel, and the shortest
/// freed block that starts a give-back (see the module's comment).
pub const PUNCH_MIN: usize = 1 << 20;
/// At most one give-back per this many milliseconds.
pub const GIVE_BACK_EVERY: u32 = 100;

/// The pool, as one process sees it.
#[derive(Debug)]
pub struct Pool {
    fd: OwnedFd,
    header: Header,
    units: usize,
    unit: usize,
    /// Offsets (in `u32` words) of the arrays in the header.
    used_at: usize,
    /// Where the per-unit records start.
    rec_at: usize,
    data_off: u64,
}

impl Pool {
    /// A new pool of at least `bytes` of data, zero-filled and sparse
    /// (pages cost memory only once written).
    pub fn create(bytes: usize) -> Result<Pool, CoshError> {
        let unit = sys::page_size();
        let units = bytes.div_ceil(unit).max(1);
        let used_words32 = units.div_ceil(64) * 2;
        let used_at = FIXED_WORDS;
        let rec_at = (used_at + used_words32).div_ceil(REC_WORDS) * REC_WORDS;
        let header_len = ((rec_at + units * REC_WORDS) * 4).div_ceil(unit) * unit;
        let data_off = header_len as u64;
        let total = header_len + units * unit;
        let fd = sys::memfd(total)?;
        #[cfg(not(loom))]
        let header = Header::new(fd.as_fd(), header_len)?;
        // The model's memory holds only the words in use: every word is a
        // loom object the checker follows.
        #[cfg(loom)]
        let header = Header::new((rec_at + units * REC_WORDS) * 4);
        let pool = Pool {
            fd,
            header,
            units,
            unit,
            used_at,
            rec_at,
            data_off,
        };
        pool.words(W_UNITS, 1)[0].store(units as u32, Ordering::Relaxed);
        pool.words(W_NEXT_DOMAIN, 1)[0].store(1, Ordering::Relaxed);
        pool.magic().store(MAGIC, Ordering::Release);
        Ok(pool)
    }

    fn words(&self, at: usize, n: usize) -> &[AtomicU32] {
        self.header.atomics32(at * 4, n)
    }

    fn magic(&self) -> &AtomicU64 {
        &self.header.atomics64(0, 1)[0]
    }

    fn used(&self) -> &[AtomicU64] {
        self.header
            .atomics64(self.used_at * 4, self.units.div_ceil(64))
    }

    /// Field `field` (`RUN`, `REFS`, `TO`) of unit `i`'s record.
    fn rec(&self, i: usize, field: usize) -> &AtomicU32 {
        &self.words(self.rec_at + i * REC_WORDS + field, 1)[0]
    }

    /// The memfd, for mapping blocks.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// The allocation unit (the page size).
    pub fn unit(&self) -> usize {
        self.unit
    }

    /// Bytes of the pool's data area (every unit).
    pub fn data_bytes(&self) -> usize {
        self.units * self.unit
    }

    /// A number for a new domain of the pool.
    pub fn join(&self) -> PoolDomain {
        self.words(W_NEXT_DOMAIN, 1)[0].fetch_add(1, Ordering::Relaxed)
    }

    /// Units not handed out.
    pub fn free_units(&self) -> usize {
        let _g = self.lock();
        let used: u32 = self
            .used()
            .iter()
            .map(|w| w.load(Ordering::Relaxed).count_ones())
            .sum();
        self.units - used as usize
    }

    /// Take the pool's lock; from a holder that is gone, take it back
    /// and undo what it left half done.
    fn lock(&self) -> PoolLock<'_> {
        let l = &self.words(W_LOCK, 1)[0];
        let me = sys::tid();
        let mut spins = 0u32;
        loop {
            let holder = match l.compare_exchange_weak(0, me, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => break,
                Err(holder) => holder,
            };
            spins = spins.wrapping_add(1);
            if spins < SPINS {
                sync::spin_loop();
                continue;
            }
            // A holder runs a few hundred instructions; one we waited
            // this long for was preempted, or is gone.
            if holder != 0
                && spins.is_multiple_of(SPINS)
                && sys::task_gone(holder)
                && l.compare_exchange(holder, me, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                self.repair();
                break;
            }
            sync::yield_now();
        }
        PoolLock(l)
    }

    /// Under the lock taken back from a dead holder: free the range it
    /// was changing, if any (see the module's comment).
    fn repair(&self) {
        let units = self.words(W_FIX_UNITS, 1)[0].load(Ordering::Relaxed) as usize;
        let start = self.words(W_FIX_START, 1)[0].load(Ordering::Relaxed) as usize;
        if units != 0
            && start
                .checked_add(units)
                .is_some_and(|end| end <= self.units)
        {
            self.free_range(start, units);
        }
        self.words(W_FIX_UNITS, 1)[0].store(0, Ordering::Relaxed);
    }

    /// Under the lock: note that `start..start + n` is being changed
    /// (`Some`), or that nothing is (`None`).
    fn changing(&self, range: Option<(usize, usize)>) {
        let (start, n) = range.unwrap_or((0, 0));
        self.words(W_FIX_START, 1)[0].store(start as u32, Ordering::Relaxed);
        self.words(W_FIX_UNITS, 1)[0].store(n as u32, Ordering::Relaxed);
    }

    /// Under the lock: units `start..start + n` hold no block.
    fn free_range(&self, start: usize, n: usize) {
        for f in [RUN, REFS, TO, VIEW] {
            self.rec(start, f).store(0, Ordering::Relaxed);
        }
        self.set_used(start, n, false);
    }

    fn is_used(&self, i: usize) -> bool {
        self.used()[i / 64].load(Ordering::Relaxed) & (1 << (i % 64)) != 0
    }

    fn set_used(&self, from: usize, n: usize, on: bool) {
        for i in from..from + n {
            let bit = 1u64 << (i % 64);
            let w = &self.used()[i / 64];
            if on {
                w.fetch_or(bit, Ordering::Relaxed);
            } else {
                w.fetch_and(!bit, Ordering::Relaxed);
            }
        }
    }

    /// A fresh block of at least `len` bytes (whole pages) held once, by
    /// the caller. Its bytes are whatever its last holder left: the block
    /// manager zeroes what it does not overwrite.
    pub fn alloc(&self, len: usize) -> Result<PoolRef, CoshError> {
        self.alloc_inner(len, None)
    }

    /// [`Pool::alloc`], calling `inside` half way through the critical
    /// section (the range noted, some of its bits set): for a test to
    /// kill the process there and check that the others recover.
    #[doc(hidden)]
    pub fn alloc_stopping_inside(
        &self,
        len: usize,
        inside: &dyn Fn(),
    ) -> Result<PoolRef, CoshError> {
        self.alloc_inner(len, Some(inside))
    }

    fn alloc_inner(&self, len: usize, inside: Option<&dyn Fn()>) -> Result<PoolRef, CoshError> {
        let n = len.max(1).div_ceil(self.unit);
        let _g = self.lock();
        let Some(start) = self.first_fit(n) else {
            return Err(CoshError::OutOfMemory {
                wanted: n,
                free: self.units - self.used_count(),
            });
        };
        // Noted first: a holder that dies from here on leaves the range
        // to be freed by the next one (`repair`).
        self.changing(Some((start, n)));
        self.set_used(start, n.div_ceil(2), true);
        if let Some(inside) = inside {
            inside();
        }
        self.set_used(start, n, true);
        self.rec(start, RUN).store(n as u32, Ordering::Relaxed);
        self.rec(start, REFS).store(1, Ordering::Relaxed);
        self.rec(start, TO).store(0, Ordering::Relaxed);
        self.rec(start, VIEW).store(0, Ordering::Relaxed);
        self.changing(None);
        Ok(self.range(start, n))
    }

    /// Under the lock: the first unit of the first `n` free units in a
    /// row.
    fn first_fit(&self, n: usize) -> Option<usize> {
        let (mut i, mut run) = (0usize, 0usize);
        while i < self.units {
            if run == 0 && i.is_multiple_of(64) && self.used()[i / 64].load(Ordering::Relaxed) == !0
            {
                i += 64;
                continue;
            }
            if self.is_used(i) {
                run = 0;
            } else {
                run += 1;
                if run == n {
                    return Some(i + 1 - n);
                }
            }
            i += 1;
        }
        None
    }

    fn used_count(&self) -> usize {
        self.used()
            .iter()
            .map(|w| w.load(Ordering::Relaxed).count_ones() as usize)
            .sum()
    }

    fn range(&self, start: usize, n: usize) -> PoolRef {
        PoolRef {
            off: self.data_off + (start * self.unit) as u64,
            len: (n * self.unit) as u64,
        }
    }

    /// The first unit and the unit count of `r`, if it names whole units
    /// inside the data area (says nothing of whether a block is there).
    fn units_of(&self, r: PoolRef) -> Option<(usize, usize)> {
        let unit = self.unit as u64;
        let rel = r.off.checked_sub(self.data_off)?;
        if !rel.is_multiple_of(unit) || r.len == 0 || !r.len.is_multiple_of(unit) {
            return None;
        }
        let (start, n) = ((rel / unit) as usize, (r.len / unit) as usize);
        (start.checked_add(n)? <= self.units).then_some((start, n))
    }

    /// Put our reference to block `r` in flight to `to`; with
    /// `extra_ref`, add a reference for the receiver and keep ours (a
    /// share), else ours travels (a move, or a fresh copy). Fails if the
    /// block is already in flight.
    ///
    /// `viewer` (0 if none) is the sending process when it still maps the
    /// block and will hide its view only once the ticket has left, so
    /// the two sides' system calls overlap; it calls [`Pool::revoked`]
    /// then, and the receiver waits for that ([`Pool::wait_revoked`])
    /// before it hands the block to its program.
    pub fn send(
        &self,
        r: PoolRef,
        to: PoolDomain,
        extra_ref: bool,
        viewer: u32,
    ) -> Result<(), CoshError> {
        let (start, n) = self
            .units_of(r)
            .ok_or(CoshError::Protocol("not a pool block"))?;
        if to == 0 || self.rec(start, RUN).load(Ordering::Acquire) != n as u32 {
            return Err(CoshError::Protocol("not a pool block"));
        }
        const IN_FLIGHT: CoshError = CoshError::Protocol("a pool block is already in flight");
        // The mark goes first: once `to` is set, a receiver may claim the
        // block (even one that did not wait for the ticket) and must see
        // that it has to wait. A block whose last sender has not let go
        // of its view yet cannot be sent on (its receiver waits for that
        // before it has the block).
        let view = self.rec(start, VIEW);
        if viewer != 0
            && view
                .compare_exchange(0, viewer, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
        {
            return Err(IN_FLIGHT);
        }
        if extra_ref {
            self.rec(start, REFS).fetch_add(1, Ordering::AcqRel);
        }
        if self
            .rec(start, TO)
            .compare_exchange(0, to, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            if extra_ref {
                self.rec(start, REFS).fetch_sub(1, Ordering::AcqRel);
            }
            if viewer != 0 {
                let _ = view.compare_exchange(viewer, 0, Ordering::AcqRel, Ordering::Relaxed);
            }
            return Err(IN_FLIGHT);
        }
        Ok(())
    }

    /// The sender `viewer` no longer maps block `r` (see [`Pool::send`]).
    pub fn revoked(&self, r: PoolRef, viewer: u32) {
        if let Some((start, _)) = self.units_of(r) {
            // Only our own mark: a block freed and sent again by another
            // process after an error keeps that one's.
            let _ = self.rec(start, VIEW).compare_exchange(
                viewer,
                0,
                Ordering::Release,
                Ordering::Relaxed,
            );
        }
    }

    /// Wait until no sender maps block `r`, which we claimed: its sender
    /// hid its view ([`Pool::revoked`]) or died (a process that is gone
    /// maps nothing). A strong move gives the receiver a block no other
    /// process can reach (Cosh §3.3); this is the last step of that.
    pub fn wait_revoked(&self, r: PoolRef) {
        let Some((start, _)) = self.units_of(r) else {
            return;
        };
        let view = self.rec(start, VIEW);
        let mut spins = 0u32;
        loop {
            let viewer = view.load(Ordering::Acquire);
            if viewer == 0 {
                return;
            }
            // The sender's hide takes a microsecond or two, so spin as
            // long as a channel wait does before asking about its process
            // (a `kill` and a read of /proc, tens of microseconds: after
            // 64 spins, 0.75% of 4 KiB hops paid it); one this late was
            // preempted or died, and is asked about now and then.
            spins = spins.wrapping_add(1);
            if spins < crate::chan::SPINS {
                sync::spin_loop();
                continue;
            }
            if spins.is_multiple_of(SPINS) && sys::task_gone(viewer) {
                let _ = view.compare_exchange(viewer, 0, Ordering::AcqRel, Ordering::Relaxed);
                return;
            }
            sync::yield_now();
        }
    }

    /// Take block `r`, sent to `me`: the reference in flight becomes
    /// ours. A range that is not a whole block of the pool in flight to
    /// `me` is refused, and nothing changes.
    pub fn claim(&self, r: PoolRef, me: PoolDomain) -> Result<PoolRef, CoshError> {
        let (start, n) = self.units_of(r).ok_or(CoshError::Protocol(
            "a ticket names a range outside the pool",
        ))?;
        if self.rec(start, RUN).load(Ordering::Acquire) != n as u32 {
            return Err(CoshError::Protocol("a ticket names no block of the pool"));
        }
        if me == 0
            || self
                .rec(start, TO)
                .compare_exchange(me, 0, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
        {
            return Err(CoshError::Protocol("a ticket names a block not sent to us"));
        }
        Ok(r)
    }

    /// Let go of our reference to `r`; the last one frees the block.
    pub fn release(&self, r: PoolRef) {
        let Some((start, n)) = self.units_of(r) else {
            debug_assert!(false, "releasing a range outside the pool");
            return;
        };
        if self.rec(start, REFS).fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        let _g = self.lock();
        self.changing(Some((start, n)));
        self.free_range(start, n);
        self.changing(None);
        if r.len as usize >= PUNCH_MIN {
            let now = sys::now_ms().max(1);
            let at = &self.words(W_GAVE_BACK_AT, 1)[0];
            let last = at.load(Ordering::Relaxed);
            if last == 0 || now.wrapping_sub(last) >= GIVE_BACK_EVERY {
                at.store(now, Ordering::Relaxed);
                self.give_back_free();
            }
        }
    }

    /// Under the lock: punch every free run of at least [`PUNCH_MIN`] out
    /// of the memfd. Free units belong to nobody, and the lock keeps them
    /// free meanwhile; the header does not change, so a holder that dies
    /// here leaves it consistent.
    fn give_back_free(&self) {
        let min = PUNCH_MIN.div_ceil(self.unit);
        let mut run_start = 0;
        for i in 0..=self.units {
            if i < self.units && !self.is_used(i) {
                continue;
            }
            if i - run_start >= min {
                let r = self.range(run_start, i - run_start);
                let _ = sys::punch_range(self.fd(), r.off, r.len);
            }
            run_start = i + 1;
        }
    }
}

/// The pool's spin lock, held.
struct PoolLock<'a>(&'a AtomicU32);

impl Drop for PoolLock<'_> {
    fn drop(&mut self) {
        self.0.store(0, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(pages: usize) -> Pool {
        Pool::create(pages * sys::page_size()).unwrap()
    }

    #[test]
    fn first_fit_reuses_a_freed_range_and_refuses_when_full() {
        let p = pool(8);
        let page = p.unit() as u64;
        let a = p.alloc(1).unwrap();
        let b = p.alloc(3 * page as usize).unwrap();
        assert_eq!(b.off, a.off + page);
        assert_eq!(b.len, 3 * page);
        assert_eq!(p.free_units(), 4);
        assert!(matches!(
            p.alloc(5 * page as usize),
            Err(CoshError::OutOfMemory { wanted: 5, free: 4 })
        ));
        p.release(a);
        assert_eq!(
            p.alloc(1).unwrap(),
            a,
            "first fit hands the range out again"
        );
        p.release(a);
        p.release(b);
        assert_eq!(p.free_units(), 8);
        assert_eq!(p.alloc(8 * page as usize).unwrap().off, a.off);
    }

    #[test]
    fn the_last_reference_frees() {
        let p = pool(2);
        let a = p.alloc(1).unwrap();
        p.send(a, 7, true, 0).unwrap();
        p.claim(a, 7).unwrap();
        p.release(a);
        assert_eq!(p.free_units(), 1, "the receiver still holds it");
        p.release(a);
        assert_eq!(p.free_units(), 2);
    }

    #[test]
    fn a_claim_takes_only_a_whole_block_in_flight_to_us() {
        let p = pool(8);
        let page = p.unit() as u64;
        let a = p.alloc(2 * page as usize).unwrap();
        // Not sent yet.
        assert!(p.claim(a, 2).is_err());
        p.send(a, 2, false, 0).unwrap();
        // Sent to someone else, twice, or a second time while in flight.
        assert!(p.claim(a, 3).is_err());
        assert!(p.send(a, 3, false, 0).is_err());
        // A part of it, more than it, or a range beside it.
        let part = PoolRef {
            off: a.off,
            len: page,
        };
        let more = PoolRef {
            off: a.off,
            len: 3 * page,
        };
        let inner = PoolRef {
            off: a.off + page,
            len: page,
        };
        for r in [part, more, inner] {
            assert!(p.claim(r, 2).is_err(), "{r:?}");
        }
        // Outside the data: the header, past the end, misaligned, empty,
        // overflowing.
        let hostile = [
            PoolRef { off: 0, len: page },
            PoolRef {
                off: a.off + 8 * page,
                len: page,
            },
            PoolRef {
                off: a.off + 1,
                len: page,
            },
            PoolRef { off: a.off, len: 0 },
            PoolRef {
                off: u64::MAX - page + 1,
                len: page,
            },
            PoolRef {
                off: a.off,
                len: u64::MAX - page + 1,
            },
        ];
        for r in hostile {
            assert!(p.claim(r, 2).is_err(), "{r:?}");
            assert!(p.send(r, 2, true, 0).is_err(), "{r:?}");
        }
        // None of that took it: the right claim works once.
        assert_eq!(p.claim(a, 2).unwrap(), a);
        assert!(p.claim(a, 2).is_err(), "claimed twice");
        p.release(a);
        assert_eq!(p.free_units(), 8);
        // A freed block is no block.
        assert!(p.send(a, 2, false, 0).is_err());
    }

    #[test]
    fn domains_get_distinct_numbers() {
        let p = pool(1);
        let (a, b) = (p.join(), p.join());
        assert!(a != 0 && b != 0 && a != b);
    }

    mod prop {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            /// Live blocks never overlap and always lie in the data area;
            /// freeing everything gives the whole pool back.
            #[test]
            fn blocks_never_overlap(ops in proptest::collection::vec((0usize..4, 1usize..5), 1..60)) {
                let p = pool(16);
                let page = p.unit();
                let mut live: Vec<PoolRef> = Vec::new();
                for (op, pages) in ops {
                    if op == 0 && !live.is_empty() {
                        p.release(live.swap_remove(pages % live.len()));
                        continue;
                    }
                    if let Ok(r) = p.alloc(pages * page) {
                        prop_assert!(p.units_of(r).is_some());
                        for o in &live {
                            prop_assert!(r.off + r.len <= o.off || o.off + o.len <= r.off);
                        }
                        live.push(r);
                    }
                }
                for r in live.drain(..) {
                    p.release(r);
                }
                prop_assert_eq!(p.free_units(), 16);
            }
        }
    }
}
