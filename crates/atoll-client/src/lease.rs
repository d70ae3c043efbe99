//! Reads without a message (Hare §3.3, "reads the buffer cache directly
//! provided the blocks are known"): a description remembers the block
//! runs the last `Read` reply named, with the data version its file's
//! server had published for the file just before the request
//! (`atoll_msg::lease`). A later read inside those runs copies from the
//! mapped buffer cache itself while the slot still shows that version
//! and allows reads (nothing was granted, truncated, punched or
//! reallocated since; relatime would leave the atime alone; nothing is
//! watched), checked again after the copy; anything else, or a slot that
//! moved during the copy, is a `Read` round trip as before.
//!
//! Why the bytes are the file's: while a description is open its file's
//! freed blocks stay parked for that file (server `inode.rs`, Hare
//! §3.3.1), and every server change to bytes a client may know is
//! preceded by a new version, so a copy that overlaps one fails its
//! second look and is discarded (and zeroed: the read that replaces it
//! may return fewer bytes).
//!
//! Only reads at an offset the client knows (`pread`, or the hybrid
//! descriptor's local offset, which the caller advances as for a message
//! read) and only where the slot is right: the coherent island with the
//! cache mapped, programs on the file server's host, not `--without
//! read-lease`. A version is learnt with one `Read` and used from the
//! next one on; the learning `Read` asks for a window past the bytes the
//! program wants, so that small sequential reads find their blocks.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicU32, Ordering};

use atoll_msg::LeaseTicket;
use atoll_proto::boot::Island;
use atoll_proto::{Extent, FileType, InodeId};

use crate::counters;
use crate::fdtable::{DescRef, MAX_DESCS};
use crate::session::Client;

/// Block runs remembered per description (a longer list is not kept).
const RUNS: usize = 8;

/// Bytes a learning `Read` asks for at least: what small reads that
/// follow it may find without a message.
pub const WINDOW: u64 = 256 << 10;

/// What one description learnt.
#[derive(Clone, Copy)]
struct Known {
    /// The description (raw `DescId`; 0: nothing known).
    desc: u64,
    ino: u64,
    version: u64,
    generation: u64,
    n: usize,
    runs: [Extent; RUNS],
}

const NOTHING: Known = Known {
    desc: 0,
    ino: 0,
    version: 0,
    generation: 0,
    n: 0,
    runs: [Extent {
        file_offset: 0,
        len: 0,
        block: 0,
    }; RUNS],
};

/// One description slot's knowledge, behind a try-lock: a thread that
/// finds it taken reads by message instead of waiting.
struct Cell {
    busy: AtomicU32,
    known: UnsafeCell<Known>,
}

// SAFETY: `known` is only touched by the thread that holds `busy`
// (`with`).
unsafe impl Sync for Cell {}

#[allow(clippy::declare_interior_mutable_const)]
const CELL0: Cell = Cell {
    busy: AtomicU32::new(0),
    known: UnsafeCell::new(NOTHING),
};

// Beside the description table (`fdtable`), zero until used.
#[cfg_attr(target_os = "linux", link_section = ".bss.atoll_tables")]
static CELLS: [Cell; MAX_DESCS] = [CELL0; MAX_DESCS];

/// `f` on `d`'s knowledge, unless another thread of the process holds it.
fn with<R>(d: &DescRef, f: impl FnOnce(&mut Known) -> R) -> Option<R> {
    let cell = CELLS.get(d.slot_index())?;
    cell.busy
        .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
        .ok()?;
    // SAFETY: `busy` is ours until the store below.
    let r = f(unsafe { &mut *cell.known.get() });
    cell.busy.store(0, Ordering::Release);
    Some(r)
}

/// May this process read without a message at all?
pub fn enabled(c: &Client) -> bool {
    !c.info.without.read_lease
        && c.info.island == Island::Coherent
        && !c.info.remote
        && c.direct_data()
        && !crate::rcache::active(c)
}

/// May `d` learn and use versions here (its file's slot is this host's)?
fn usable(c: &Client, d: &DescRef) -> bool {
    if !enabled(c) || d.ftype() != FileType::Regular {
        return false;
    }
    let near = &c.info.node_members;
    near.is_empty() || near.contains(&(d.ino().owner() as u32))
}

/// Wall-clock seconds, as the server's atimes count them.
fn wall_secs() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::RealtimeCoarse);
    t.tv_sec.max(0) as u64
}

/// Read `buf.len()` bytes at `at` without a message, if `d` knows the
/// blocks and its file's slot still shows their version: `Some(bytes)`.
/// `None`: read by message. With `probe`, `buf` is unchecked program
/// memory, probed writable before any byte is copied.
pub fn read(c: &Client, d: &DescRef, buf: &mut [u8], at: u64, probe: bool) -> Option<usize> {
    if buf.is_empty() || !usable(c, d) {
        return None;
    }
    let end = at.checked_add(buf.len() as u64)?;
    // `None`: nothing known of these bytes; `Some(None)`: known, but the
    // slot says ask.
    let r = with(d, |k| {
        if k.desc != d.desc().0 || k.ino != d.ino().0 || k.n == 0 {
            return None;
        }
        let runs = &k.runs[..k.n];
        let (lo, hi) = (
            runs[0].file_offset,
            runs[k.n - 1].file_offset + runs[k.n - 1].len,
        );
        if at < lo || end > hi {
            return None;
        }
        Some(copy_known(c, d, k, buf, at, probe))
    })
    .flatten()?;
    match r {
        Some(_) => counters::bump(&counters::READ_LEASE_HITS),
        None => counters::bump(&counters::READ_LEASE_MISSES),
    };
    r
}

/// The copy of [`read`], between the two looks at the slot.
fn copy_known(
    c: &Client,
    d: &DescRef,
    k: &Known,
    buf: &mut [u8],
    at: u64,
    probe: bool,
) -> Option<usize> {
    let server = d.ino().owner();
    let control = c.control();
    let t = control.lease_begin(server, k.ino)?;
    if t.version != k.version || atoll_msg::LeaseSlot::generation(&t) != k.generation {
        return None;
    }
    // 0: the server wants every read (a watch, a mapping); otherwise the
    // second from which a read moves the atime (1: now), which an
    // `O_NOATIME` description never does. Within a second of it the
    // server's read may already (its clock and this coarse one differ by
    // a tick).
    let noatime = d.flags() & libc::O_NOATIME as u32 != 0;
    if t.until == 0 || !noatime && wall_secs() + 1 >= t.until {
        return None;
    }
    if probe && crate::sys::check_writable_as_is(buf).is_err() {
        return None;
    }
    for e in &k.runs[..k.n] {
        crate::cache::copy_out_one(c.cache(), e, at, buf)?;
    }
    if !control.lease_still(server, k.ino, &t) {
        // Moved under the copy: none of it is the program's.
        buf.fill(0);
        return None;
    }
    Some(buf.len())
}

/// What a `Read` may teach its description: the version published before
/// it was sent, and the runs its reply names.
pub struct Learner {
    ticket: LeaseTicket,
    n: usize,
    runs: [Extent; RUNS],
    /// More runs than kept, a hole, or runs out of order: learn nothing.
    spoilt: bool,
}

impl Learner {
    /// Before a `Read` of `d` at a known offset: the slot's version now.
    pub fn before(c: &Client, d: &DescRef) -> Option<Learner> {
        if !usable(c, d) {
            return None;
        }
        let ticket = c.control().lease_begin(d.ino().owner(), d.ino().0)?;
        Some(Learner {
            ticket,
            n: 0,
            runs: NOTHING.runs,
            spoilt: false,
        })
    }

    /// One extent of the reply, as decoded.
    pub fn saw(&mut self, e: &Extent) {
        let follows = match self.n {
            0 => true,
            n => {
                let last = &self.runs[n - 1];
                last.file_offset + last.len == e.file_offset
            }
        };
        if e.block == crate::cache::HOLE || !follows || self.n == RUNS {
            self.spoilt = true;
            return;
        }
        self.runs[self.n] = *e;
        self.n += 1;
    }

    /// The reply granted `[offset, offset + len)` (`watched`: the file is
    /// watched, every read must be reported by message): remember the
    /// runs if they are exactly that range.
    pub fn learnt(self, d: &DescRef, offset: u64, len: u64, watched: bool) {
        let runs = &self.runs[..self.n];
        let whole = self.n > 0
            && runs[0].file_offset == offset
            && runs[self.n - 1].file_offset + runs[self.n - 1].len == offset + len;
        if self.spoilt || watched || len == 0 || !whole {
            // Nothing new to keep; what was known stays, guarded by its
            // own version (a read at the end of the file learns nothing).
            return;
        }
        let ino: InodeId = d.ino();
        with(d, |k| {
            *k = Known {
                desc: d.desc().0,
                ino: ino.0,
                version: self.ticket.version,
                generation: atoll_msg::LeaseSlot::generation(&self.ticket),
                n: self.n,
                runs: self.runs,
            };
        });
    }
}
