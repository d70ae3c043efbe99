//! Which parts of this process's address space map which atoll file, so
//! that the owner server keeps the file's blocks while they are mapped.
//!
//! `mmap` of an atoll file maps buffer-cache pages (`file::mmap`, Hare
//! §3.3): the process reaches those blocks with no further message. The
//! owner therefore counts mappings as it counts open descriptions
//! (`Request::Map`/`Unmap`, server `fs/mapping.rs`) and gives no block of a
//! mapped inode to another file. This module keeps the client's half:
//!
//! * every `mmap` call of an atoll file is one *mapping*, with an id
//!   (unique in the process; a forked child inherits them), one `Map` at
//!   the owner naming it (sent before any block is asked for) and one or
//!   more *pieces* `[start, end)` of address space. The id makes `Map` and
//!   `Unmap` idempotent, so each goes again when its server dies on it
//!   (`forkshare::again`);
//! * `munmap`, `mremap` and a `MAP_FIXED` mapping placed over a piece cut,
//!   move or drop pieces *after* the kernel did; the mapping's last piece
//!   gone, its `Unmap` goes to the owner. Never before: a block must not
//!   be reused while any page still maps it;
//! * `fork` gives the child session a `Map` for every mapping (the child
//!   has a copy of this table); `execve` and exit need nothing, since the
//!   old image's session dies with it and its references with it.
//!
//! Growing a piece with `mremap` would extend its last run of cache pages
//! into the blocks after it, which belong to other files: the growth is
//! mapped here instead, as `mmap` maps, from the file's own blocks (and a
//! shared piece is moved the same way, see [`remap`]).
//!
//! Mistakes are allowed in one direction only: a mapping this table thinks
//! alive when it is gone (a host call it did not see, a piece that could
//! not be split for want of room) holds blocks until exit; a mapping it
//! thinks gone while pages remain could let a store reach another file, so
//! every uncertainty keeps the piece.
//!
//! Locking: one spin lock, taken with signals blocked, never across a
//! message. `COUNT` and the span the pieces cover (`LOW`, `HIGH`) let a
//! `munmap` outside every mapping pass with a few atomic loads. Window: a `fork` racing with another
//! thread's `mmap` of an atoll file gives the child that mapping without a
//! reference of its own.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use atoll_proto::{InodeId, Request};

use crate::error::{err, Result};
use crate::forkshare::again;
use crate::session::{Client, Lane};
use crate::sys::{self, SpinLock};
use crate::Out;

const PAGE: u64 = 4096;
/// Pieces one process can track (Linux allows 65530 mappings in all).
const MAX_PIECES: usize = 1 << 13;

/// A stretch of address space mapping part of an atoll file.
#[derive(Clone, Copy)]
struct Piece {
    start: u64,
    end: u64,
    ino: InodeId,
    /// The `mmap` call it came from.
    id: u64,
    /// File offset mapped at `start`.
    off: u64,
    prot: i32,
    shared: bool,
}

const EMPTY: Piece = Piece {
    start: 0,
    end: 0,
    ino: InodeId(0),
    id: 0,
    off: 0,
    prot: 0,
    shared: false,
};

struct Table {
    len: UnsafeCell<usize>,
    pieces: UnsafeCell<[Piece; MAX_PIECES]>,
}

// SAFETY: `len` and `pieces` are only touched under `fork_lock()`.
unsafe impl Sync for Table {}

// With the other big zero-initialised tables (see `fdtable::DESCS`).
#[cfg_attr(target_os = "linux", link_section = ".bss.atoll_tables")]
static TABLE: Table = Table {
    len: UnsafeCell::new(0),
    pieces: UnsafeCell::new([EMPTY; MAX_PIECES]),
};

/// Pieces tracked and the span of addresses they cover, read without the
/// lock as a fast filter (every `munmap` of the process asks).
static COUNT: AtomicUsize = AtomicUsize::new(0);

/// Does this process map no atoll file?
pub fn is_empty() -> bool {
    COUNT.load(Ordering::Acquire) == 0
}
static LOW: AtomicU64 = AtomicU64::new(0);
static HIGH: AtomicU64 = AtomicU64::new(0);
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// The table under its lock.
struct Pieces<'a> {
    len: &'a mut usize,
    all: &'a mut [Piece; MAX_PIECES],
}

impl Pieces<'_> {
    fn live(&self) -> &[Piece] {
        &self.all[..*self.len]
    }

    fn push(&mut self, p: Piece) -> bool {
        if *self.len == MAX_PIECES {
            return false;
        }
        self.all[*self.len] = p;
        *self.len += 1;
        true
    }

    fn has(&self, id: u64) -> bool {
        self.live().iter().any(|p| p.id == id)
    }

    /// The kernel no longer maps `[start, end)`: cut it out of every piece.
    /// Adds to `gone` the mappings whose last piece went.
    fn carve(&mut self, start: u64, end: u64, gone: &mut Vec<(u64, InodeId)>) {
        let mut touched: Vec<(u64, InodeId)> = Vec::new();
        let mut i = 0;
        while i < *self.len {
            let p = self.all[i];
            if p.end <= start || p.start >= end {
                i += 1;
                continue;
            }
            if !touched.iter().any(|t| t.0 == p.id) {
                touched.push((p.id, p.ino));
            }
            let (left, right) = (p.start < start, p.end > end);
            let tail = Piece {
                start: end,
                off: p.off + (end - p.start),
                ..p
            };
            match (left, right) {
                (false, false) => {
                    *self.len -= 1;
                    self.all[i] = self.all[*self.len];
                    continue;
                }
                (true, false) => self.all[i].end = start,
                (false, true) => self.all[i] = tail,
                (true, true) => {
                    // No room for the tail: keep the piece whole (it then
                    // covers a hole, which only delays its release).
                    if self.push(tail) {
                        self.all[i].end = start;
                    }
                }
            }
            i += 1;
        }
        for t in touched {
            if !self.has(t.0) {
                gone.push(t);
            }
        }
    }
}

fn with<R>(f: impl FnOnce(&mut Pieces) -> R) -> R {
    let _g = fork_lock().lock();
    // SAFETY: the lock is held for the whole use of the table.
    let mut t = unsafe {
        Pieces {
            len: &mut *TABLE.len.get(),
            all: &mut *TABLE.pieces.get(),
        }
    };
    let r = f(&mut t);
    let live = t.live();
    LOW.store(
        live.iter().map(|p| p.start).min().unwrap_or(0),
        Ordering::Relaxed,
    );
    HIGH.store(
        live.iter().map(|p| p.end).max().unwrap_or(0),
        Ordering::Relaxed,
    );
    COUNT.store(*t.len, Ordering::Release);
    r
}

/// The table's lock, for [`crate::forkgate`].
pub fn fork_lock() -> &'static SpinLock {
    &crate::forkgate::LOCKS.mapping
}

fn round_up(len: u64) -> u64 {
    len.saturating_add(PAGE - 1) & !(PAGE - 1)
}

/// May `[addr, addr + len)` hold a piece? Hot path (every `munmap`, and
/// every `MAP_FIXED` mapping, of the process): lock-free unless it lies
/// within the span the pieces cover.
pub fn overlaps(addr: u64, len: u64) -> bool {
    if COUNT.load(Ordering::Acquire) == 0 {
        return false;
    }
    let end = addr.saturating_add(round_up(len));
    if end <= LOW.load(Ordering::Relaxed) || addr >= HIGH.load(Ordering::Relaxed) {
        return false;
    }
    with(|t| t.live().iter().any(|p| p.start < end && p.end > addr))
}

/// The part of a mapping at `addr`: `(start, end, ino, file offset at
/// start, prot, shared)` of the piece holding that page.
pub fn piece_at(addr: u64) -> Option<(u64, u64, InodeId, u64, i32, bool)> {
    if !overlaps(addr, 1) {
        return None;
    }
    with(|t| {
        t.live()
            .iter()
            .find(|p| p.start <= addr && addr < p.end)
            .map(|p| (p.start, p.end, p.ino, p.off, p.prot, p.shared))
    })
}

/// Every piece of this process mapping `ino`: `(start, end, file offset
/// at start, prot, shared)`.
pub fn pieces_of(ino: InodeId) -> Vec<(u64, u64, u64, i32, bool)> {
    if COUNT.load(Ordering::Acquire) == 0 {
        return Vec::new();
    }
    with(|t| {
        t.live()
            .iter()
            .filter(|p| p.ino == ino)
            .map(|p| (p.start, p.end, p.off, p.prot, p.shared))
            .collect()
    })
}

/// Tell the owners that these mappings are gone (after the kernel removed
/// their last pages). An `Unmap` names its mapping, so one whose server
/// died on it goes again (`again`); a failed message leaves the reference
/// held until the session ends.
fn release(c: &Client, gone: &[(u64, InodeId)]) {
    if gone.is_empty() {
        return;
    }
    if let Ok(lane) = c.lane() {
        for &(mapping, ino) in gone {
            let _ = again(|| lane.call_ok(c, ino.owner(), Request::Unmap { ino, mapping }));
        }
    }
}

/// `mmap` of `ino` placed at `[start, start + len)` (already reserved):
/// count it at the owner before any block is asked for. Whatever was
/// tracked there before was replaced by the reservation (`MAP_FIXED`).
pub fn track(
    c: &Client,
    lane: &Lane,
    ino: InodeId,
    (start, len): (u64, u64),
    off: u64,
    prot: i32,
    shared: bool,
) -> Result<()> {
    let end = start + round_up(len);
    let mut gone = Vec::new();
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let piece = Piece {
        start,
        end,
        ino,
        id,
        off,
        prot,
        shared,
    };
    let room = with(|t| {
        t.carve(start, end, &mut gone);
        t.push(piece)
    });
    release(c, &gone);
    if !room {
        return err(libc::ENOMEM);
    }
    let me = c.session_id();
    // Named by its id, the `Map` may go again when its server dies on it
    // (the successor applies it only if the dead one had not).
    let map = || Request::Map {
        ino,
        to: me,
        mapping: id,
    };
    if let Err(e) = again(|| lane.call_ok(c, ino.owner(), map())) {
        with(|t| t.carve(start, end, &mut Vec::new()));
        return Err(e);
    }
    Ok(())
}

/// The kernel no longer maps `[addr, addr + len)` (a failed `mmap` undone,
/// a host `MAP_FIXED` mapping placed over it).
pub fn forget(c: &Client, addr: u64, len: u64) {
    let mut gone = Vec::new();
    with(|t| t.carve(addr, addr.saturating_add(round_up(len)), &mut gone));
    release(c, &gone);
}

/// `munmap` touching a piece: unmap, then drop what went. The kernel call
/// and the table change are one step under the table's lock: otherwise
/// another thread's `mmap` could be given the freed range in between and
/// have its new piece dropped by this `munmap` (its mapping then
/// uncounted at the owner, its old count never released).
pub fn munmap(c: &Client, a: &[u64; 6]) -> Result<Out> {
    let mut gone = Vec::new();
    let r = with(|t| {
        // SAFETY: the program's own munmap, unchanged.
        let r = unsafe { sys::syscall6(libc::SYS_munmap, *a) };
        if r == 0 {
            t.carve(a[0], a[0].saturating_add(round_up(a[1])), &mut gone);
        }
        r
    });
    release(c, &gone);
    Ok(Out::Done(r))
}

/// `mmap` with `MAP_FIXED` of anonymous memory or a host file over a
/// piece: map, then drop what it replaced (one step, as `munmap`).
pub fn host_fixed(c: &Client, a: &[u64; 6]) -> Result<Out> {
    let mut gone = Vec::new();
    let r = with(|t| {
        // SAFETY: the program's own mmap, unchanged.
        let r = unsafe { sys::syscall6(libc::SYS_mmap, *a) };
        if r >= 0 {
            t.carve(
                r as u64,
                (r as u64).saturating_add(round_up(a[1])),
                &mut gone,
            );
        }
        r
    });
    release(c, &gone);
    Ok(Out::Done(r))
}

/// Fork: the child session maps what this process maps (the child gets a
/// copy of the table with its memory). Called before the fork.
pub fn share_with(c: &Client, lane: &Lane, given: &mut crate::forkshare::Ledger) {
    if COUNT.load(Ordering::Acquire) == 0 {
        return;
    }
    let mut maps: Vec<(u64, InodeId)> = Vec::new();
    with(|t| {
        for p in t.live() {
            if !maps.iter().any(|m| m.0 == p.id) {
                maps.push((p.id, p.ino));
            }
        }
    });
    for (mapping, ino) in maps {
        let _ = given.map(c, lane, ino, mapping);
    }
}

/// `mremap` touching a piece. Moves and shrinks are the kernel's, with the
/// pieces moved after it; growth of a piece is mapped from the file.
pub fn mremap(c: &Client, a: &[u64; 6]) -> Result<Out> {
    let (old, old_size, new_size, flags) = (a[0], round_up(a[1]), round_up(a[2]), a[3] as i32);
    let old_end = old.saturating_add(old_size);
    let inside = with(|t| {
        t.live()
            .iter()
            .find(|p| p.start <= old && old < p.end)
            .copied()
    });
    if let Some(p) = inside {
        let grows = new_size > old_size;
        if old_size == 0 {
            // A second mapping of a shared one: the kernel would map
            // `new_size` bytes of the cache from that page on.
            if p.shared {
                return remap(c, a, p);
            }
        } else {
            if old_end > p.end && grows {
                return err(libc::EFAULT);
            }
            if grows || (p.shared && flags & libc::MREMAP_FIXED != 0) {
                return remap(c, a, p);
            }
        }
    }
    // Room for the moved pieces, checked first: a move the table could not
    // follow would lose track of live pages.
    let room = with(|t| {
        let k = t
            .live()
            .iter()
            .filter(|p| p.start < old_end.max(old + 1) && p.end > old)
            .count();
        *t.len + k + 2 <= MAX_PIECES
    });
    if !room {
        return err(libc::ENOMEM);
    }
    let mut gone = Vec::new();
    // The kernel call and the table change in one step (see `munmap`).
    let r = with(|t| {
        // SAFETY: the program's own mremap, unchanged.
        let r = unsafe { sys::syscall6(libc::SYS_mremap, *a) };
        if r < 0 {
            return r;
        }
        let new = r as u64;
        // What `[old, old_end)` mapped now lies at `new` (clipped to the
        // new size); a zero `old_size` duplicates a shared mapping.
        let span = if old_size == 0 { new_size } else { old_size };
        let moved: Vec<Piece> = t
            .live()
            .iter()
            .filter(|p| p.start < old + span && p.end > old)
            .map(|p| {
                let s = p.start.max(old);
                let e = p.end.min(old + span).min(old + new_size);
                Piece {
                    start: new + (s - old),
                    end: new + (e.max(s) - old),
                    off: p.off + (s - p.start),
                    ..*p
                }
            })
            .filter(|p| p.end > p.start)
            .collect();
        if old_size != 0 && flags & libc::MREMAP_DONTUNMAP == 0 {
            t.carve(old, old_end, &mut gone);
        }
        t.carve(new, new + new_size, &mut gone);
        for p in moved {
            t.push(p);
        }
        // A mapping whose pieces all moved lives on.
        gone.retain(|g| !t.has(g.0));
        r
    });
    release(c, &gone);
    Ok(Out::Done(r))
}

/// `mremap` of piece `p` that the kernel cannot be left to do: growing
/// it would extend its last run of cache pages into the blocks after it,
/// which belong to other files, and moving it fails as soon as the file's
/// blocks are not contiguous in the cache (one mapping, several runs).
/// Shared pages are the file's blocks, so the destination is mapped from
/// the file afresh, as `mmap` maps (also for a duplicate, `old_size` 0);
/// a private piece's own copies move with the kernel and only the growth
/// is mapped from the file.
fn remap(c: &Client, a: &[u64; 6], p: Piece) -> Result<Out> {
    let (old, old_size, new_size, flags) = (a[0], round_up(a[1]), round_up(a[2]), a[3] as i32);
    if flags & libc::MREMAP_DONTUNMAP != 0 {
        return err(libc::EINVAL);
    }
    if !with(|t| *t.len + 3 <= MAX_PIECES) {
        return err(libc::ENOMEM);
    }
    let lane = c.lane()?;
    let anon = (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS) as u64;
    let in_place = flags & libc::MREMAP_MAYMOVE == 0;
    if in_place && old_size == 0 {
        return err(libc::EINVAL); // a duplicate needs somewhere to go
    }
    let base = if in_place {
        // Grow where it is, or not at all (ENOMEM, as Linux).
        let extra = new_size - old_size;
        // SAFETY: anonymous memory where nothing is mapped (NOREPLACE).
        let r = unsafe {
            sys::syscall6(
                libc::SYS_mmap,
                [
                    old + old_size,
                    extra,
                    p.prot as u64,
                    anon | libc::MAP_FIXED_NOREPLACE as u64,
                    u64::MAX,
                    0,
                ],
            )
        };
        if r < 0 {
            return err(libc::ENOMEM);
        }
        old
    } else {
        let fixed = flags & libc::MREMAP_FIXED != 0;
        let (hint, fix) = if fixed {
            (a[4], libc::MAP_FIXED as u64)
        } else {
            (0, 0)
        };
        // SAFETY: a fresh anonymous reservation (at the program's fixed
        // address when it asked for one, as its mremap would have).
        let r = unsafe {
            sys::syscall6(
                libc::SYS_mmap,
                [hint, new_size, p.prot as u64, anon | fix, u64::MAX, 0],
            )
        };
        if r < 0 {
            return Ok(Out::Done(r));
        }
        r as u64
    };
    // What of [base, base + new_size) is mapped from the file.
    let from = if in_place {
        old_size
    } else if p.shared {
        0
    } else {
        // SAFETY: moves the program's private pages into our reservation.
        let m = unsafe {
            sys::syscall6(
                libc::SYS_mremap,
                [
                    old,
                    old_size,
                    old_size,
                    (libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED) as u64,
                    base,
                    0,
                ],
            )
        };
        if m < 0 {
            // SAFETY: our own reservation.
            unsafe { sys::sc(libc::SYS_munmap, base, new_size, 0, 0) };
            return Ok(Out::Done(m));
        }
        old_size
    };
    let file_off = p.off + (old - p.start);
    let piece = Piece {
        start: base,
        end: base + new_size,
        off: file_off,
        ..p
    };
    // The new piece first: the mapping lives on while the old one goes.
    with(|t| {
        t.carve(base, base + new_size, &mut Vec::new());
        t.push(piece);
    });
    let allocate = p.shared;
    let mapped = if new_size > from {
        crate::file::map_runs(
            c,
            &lane,
            p.ino,
            base + from,
            file_off + from,
            new_size - from,
            p.prot,
            p.shared,
            allocate,
        )
    } else {
        Ok(0)
    };
    if base != old {
        if p.shared {
            // SAFETY: the program's old range, which its mremap would have
            // unmapped (its pages now mapped at `base`).
            unsafe { sys::sc(libc::SYS_munmap, old, old_size, 0, 0) };
        }
        forget(c, old, old_size);
    }
    mapped?;
    Ok(Out::Done(base as i64))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn piece(start: u64, end: u64, id: u64) -> Piece {
        Piece {
            start,
            end,
            ino: InodeId(id),
            id,
            off: 0,
            ..EMPTY
        }
    }

    fn spans(t: &Pieces) -> Vec<(u64, u64, u64, u64)> {
        let mut v: Vec<_> = t
            .live()
            .iter()
            .map(|p| (p.start, p.end, p.id, p.off))
            .collect();
        v.sort();
        v
    }

    #[test]
    fn carving_trims_splits_and_drops_pieces_and_names_mappings_gone() {
        let mut len = 0;
        let mut all = Box::new([EMPTY; MAX_PIECES]);
        let mut t = Pieces {
            len: &mut len,
            all: &mut all,
        };
        t.push(piece(0x1000, 0x5000, 1));
        t.push(piece(0x8000, 0x9000, 2));
        let mut gone = vec![];
        // A hole in the middle: two pieces of one mapping, offsets kept.
        t.carve(0x2000, 0x3000, &mut gone);
        assert_eq!(
            spans(&t),
            [
                (0x1000, 0x2000, 1, 0),
                (0x3000, 0x5000, 1, 0x2000),
                (0x8000, 0x9000, 2, 0)
            ]
        );
        assert!(gone.is_empty());
        // One piece goes, the mapping stays; then the last one goes.
        t.carve(0x0, 0x2000, &mut gone);
        assert!(gone.is_empty());
        t.carve(0x3000, 0x9000, &mut gone);
        gone.sort();
        assert_eq!(gone, [(1, InodeId(1)), (2, InodeId(2))]);
        assert!(t.live().is_empty());
    }

    #[test]
    fn a_split_without_room_keeps_the_whole_piece() {
        let mut len = 0;
        let mut all = Box::new([EMPTY; MAX_PIECES]);
        let mut t = Pieces {
            len: &mut len,
            all: &mut all,
        };
        for i in 0..MAX_PIECES as u64 {
            assert!(t.push(piece(i * 0x10000, i * 0x10000 + 0x3000, i + 1)));
        }
        let mut gone = vec![];
        t.carve(0x1000, 0x2000, &mut gone);
        assert_eq!((t.live()[0].start, t.live()[0].end), (0, 0x3000));
        assert!(gone.is_empty());
    }
}
