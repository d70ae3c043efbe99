//! Keeping a pipe's writer out of a program that replaced its reader.
//!
//! A split's writer copies into the reader's buffer with
//! `process_vm_writev`, naming the reader by its thread id. When another
//! thread of the reader's process calls `execve`, the kernel ends the
//! reader and may give the leader's thread id (the reader's, if it was the
//! leader) to the new program, and a copy *into* a process cannot check
//! first whose memory it reaches (`imagetag` checks only reads). So the
//! process withdraws before its `execve` (Cosh §3: a transfer's rights are
//! revoked before the memory changes hands):
//!
//! * each reading thread that may post its buffer or run a split holds a
//!   slot in [`READING`] for the length of its `read` ([`Reading`]);
//! * [`quiesce_for_exec`] raises the process's exec fence (`ring`'s
//!   `ExecFence`: no other thread takes a ring lock from then on, so none
//!   posts or starts a split, and the locks held are released), takes
//!   each posted buffer back, and for a split already running closes its
//!   cursor and waits until the chunks the writer claimed are copied (or
//!   the writer gave up or is gone). From then on no writer copies into
//!   this process;
//! * if `execve` fails the fence comes down ([`ExecQuiesced`]'s drop) and
//!   the readers go on (a withdrawn buffer is a read that was not split).
//!
//! Slots are words of this process's memory: a forked child starts with
//! none ([`forget_after_fork`]); a `vfork` child shares them and names its
//! own process id in what it registers, so it never withdraws its parent's
//! buffers, and its `execve` leaves the parent's reads alone.

use core::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use atoll_proto::pipe as hdr;

use super::{close_cursor, cursor_now, enabled, gone, my_pid, COUNT, GAVE_UP, PATIENCE_NS};
use crate::imagetag;
use crate::pipeticket::writer_tag;
use crate::ring::{ExecFence, Ring};
use crate::sys;

/// Threads of one process reading at once with a buffer of split size;
/// a read that finds no free slot is simply not split.
const SLOTS: usize = 64;
/// Slot word values besides a `Ring` address (which is 8-aligned): being
/// filled in, and (or-ed in) being withdrawn by the execing thread.
const FILLING: usize = 2;
const BUSY: usize = 1;

struct Slot {
    /// Address of the reading thread's `Ring` (in its `read` frame), or
    /// 0 (free), `FILLING`, or an address with `BUSY`.
    ring: AtomicUsize,
    tid: AtomicU32,
    pid: AtomicU32,
}

#[allow(clippy::declare_interior_mutable_const)]
const FREE: Slot = Slot {
    ring: AtomicUsize::new(0),
    tid: AtomicU32::new(0),
    pid: AtomicU32::new(0),
};
// With the other big zero tables after `.bss` (`fdtable::DESCS` says why).
#[cfg_attr(target_os = "linux", link_section = ".bss.atoll_tables")]
static READING: [Slot; SLOTS] = [FREE; SLOTS];

/// A reading thread's slot, held for the length of one `read` that may
/// post its buffer or split.
pub struct Reading<'a> {
    slot: Option<&'static Slot>,
    ring: core::marker::PhantomData<&'a Ring>,
}

impl<'a> Reading<'a> {
    /// Register a `read` of `len` bytes on `ring` by this thread, if splits
    /// are on and the buffer is large enough to split.
    pub fn new(ring: &'a Ring, len: usize) -> Reading<'a> {
        let slot = (enabled() && len >= super::SPLIT_MIN)
            .then(|| claim_slot(ring))
            .flatten();
        Reading {
            slot,
            ring: core::marker::PhantomData,
        }
    }

    /// May this read post its buffer or start a split?
    pub fn may_split(&self) -> bool {
        self.slot.is_some()
    }
}

fn claim_slot(ring: &Ring) -> Option<&'static Slot> {
    let slot = READING.iter().find(|s| {
        s.ring
            .compare_exchange(0, FILLING, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    })?;
    // SAFETY: gettid takes no arguments.
    let tid = unsafe { sys::sc(libc::SYS_gettid, 0, 0, 0, 0) } as u32;
    slot.tid.store(tid, Ordering::Relaxed);
    slot.pid.store(my_pid(), Ordering::Relaxed);
    slot.ring
        .store(ring as *const Ring as usize, Ordering::Release);
    Some(slot)
}

impl Drop for Reading<'_> {
    fn drop(&mut self) {
        let Some(slot) = self.slot else {
            return;
        };
        // An execing thread withdrawing this buffer uses the `Ring` in our
        // frame: wait until it is done (a bounded wait: it only waits for
        // the writer's chunks in flight, as this read itself would).
        loop {
            let v = slot.ring.load(Ordering::Acquire);
            if v & BUSY == 0
                && slot
                    .ring
                    .compare_exchange(v, 0, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            {
                return;
            }
            sys::sleep_ns(20_000);
        }
    }
}

/// In a forked child: the parent's readers did not come along.
pub fn forget_after_fork() {
    // Read before written: a store to a free slot would copy its page in
    // the child for nothing (a write fault per page of the table).
    for s in &READING {
        if s.ring.load(Ordering::Relaxed) != 0 {
            s.ring.store(0, Ordering::Relaxed);
        }
    }
    crate::ring::forget_after_fork();
}

/// What [`quiesce_for_exec`] did; dropping it (the `execve` returned, so
/// it failed) lets this process's threads lock rings and split again.
pub struct ExecQuiesced {
    _fence: ExecFence,
}

/// Right before this process's `execve`: hold back the other threads'
/// ring locks, take back every buffer they posted and wait for the
/// writer's chunks in flight into a running split, so that no writer
/// copies into the new program and no ring is left locked by it.
pub fn quiesce_for_exec() -> ExecQuiesced {
    let fence = ExecFence::raise();
    let quiesced = ExecQuiesced { _fence: fence };
    if !enabled() {
        return quiesced;
    }
    let pid = my_pid();
    for slot in &READING {
        let v = slot.ring.load(Ordering::Acquire);
        if v == 0 || v & (BUSY | FILLING) != 0 || slot.pid.load(Ordering::Relaxed) != pid {
            continue;
        }
        if slot
            .ring
            .compare_exchange(v, v | BUSY, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            continue;
        }
        // SAFETY: the slot held `v` when we marked it busy, and its reader
        // waits for the mark to go before it leaves the `read` frame the
        // `Ring` lives in.
        let ring = unsafe { &*(v as *const Ring) };
        withdraw(ring, slot.tid.load(Ordering::Relaxed));
        slot.ring.fetch_and(!BUSY, Ordering::Release);
    }
    quiesced
}

/// Take back thread `tid`'s posted buffer on `ring`, or close the split
/// it reads and wait for the writer's chunks in flight.
fn withdraw(ring: &Ring, tid: u32) {
    let tag = imagetag::this_image();
    let sig = sys::SigBlock::new();
    ring.lock();
    let ours = ring.word(hdr::RBUF_PID).load(Ordering::Relaxed) == tid
        && ring.word64(hdr::RBUF_TAG).load(Ordering::Relaxed) == tag.value
        && ring.word64(hdr::RBUF_TAG_AT).load(Ordering::Relaxed) == tag.at;
    let state = ring.word(hdr::RBUF_STATE).load(Ordering::Acquire);
    if !ours || state == hdr::RBUF_NONE {
        ring.unlock();
        return;
    }
    if state == hdr::RBUF_POSTED {
        // Its reader sleeps on and, if the `execve` fails, reads as if it
        // had never posted (`claimed_after_sleep`).
        ring.word(hdr::RBUF_STATE)
            .store(hdr::RBUF_NONE, Ordering::Release);
        ring.unlock();
        return;
    }
    close_cursor(ring);
    let (gen, meet) = cursor_now(ring);
    let chunks =
        (ring.word(hdr::RBUF_LEN).load(Ordering::Relaxed) as usize).div_ceil(super::CHUNK) as u32;
    let claimed = chunks - meet.min(chunks);
    let writer = ring.word(hdr::TICKET_PID).load(Ordering::Relaxed);
    let writer_tag = writer_tag(ring);
    ring.unlock();
    drop(sig);
    let step = 50_000;
    let mut waited = 0;
    loop {
        let ended = ring.word(hdr::RBUF_STATE).load(Ordering::Acquire) != hdr::RBUF_SPLIT
            || cursor_now(ring).0 != gen;
        let done = ring.word(hdr::SPLIT_WDONE).load(Ordering::Acquire);
        if ended || done & COUNT >= claimed || done & GAVE_UP != 0 {
            return;
        }
        if waited >= PATIENCE_NS && gone(writer, writer_tag) {
            return;
        }
        sys::sleep_ns(step as u64);
        waited += step;
    }
}
