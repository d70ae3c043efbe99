//! Close-to-open consistency on hardware without cache coherence (Hare
//! §3.3.1), emulated: with `atoll run --incoherent` every process reads and
//! writes *private copies* of buffer-cache blocks, as a core with a
//! non-coherent private cache would, and the protocol's flushes are what
//! makes data move:
//!
//! * first access to a block copies it in from the shared cache;
//! * writes change only the private copy and mark the bytes written dirty;
//! * `close`, `fsync`/`fdatasync`/`syncfs`, `execve` and `exit` write the
//!   dirty bytes back to the shared cache (only the bytes written, so
//!   processes appending to one block do not overwrite each other);
//! * `open` drops every private copy (after writing dirty bytes back), so
//!   the opener sees everything written back before it opened.
//!
//! Guarantees, as Hare's: a process that opens a file after another closed
//! it (or called `fsync`) sees the other's writes (close-to-open). A process
//! that keeps a file open and reads again may see old data. Metadata (size,
//! names) is always coherent: it lives on the servers. Not covered: shared
//! `mmap` mappings (they map the shared cache directly), and a process
//! killed by a signal loses its unwritten data (as a crashed core would).
//!
//! Blocks are only written back while this process still holds the
//! description that wrote them (close writes back before `Close` is sent),
//! so a block freed by truncation is never written into after reuse while
//! the writer keeps its file open (the servers do not reuse such blocks).

use crate::fixedhash::Map as HashMap;

use atoll_proto::{Extent, BLOCK_SIZE};

use crate::cache::{self, HOLE};
use crate::session::Client;
use crate::sys::SpinLock;

const BS: u64 = BLOCK_SIZE as u64;

struct Copy {
    data: Box<[u8; BLOCK_SIZE]>,
    /// One bit per byte written here since the last write-back: only those
    /// bytes go back (writers sharing a block must not overwrite each
    /// other's bytes with their stale copies).
    dirty: Box<[u64; BLOCK_SIZE / 64]>,
    any_dirty: bool,
}

impl Copy {
    fn mark(&mut self, off: usize, n: usize) {
        for i in off..off + n {
            self.dirty[i / 64] |= 1 << (i % 64);
        }
        self.any_dirty |= n > 0;
    }
    fn is_dirty(&self, i: usize) -> bool {
        self.dirty[i / 64] & (1 << (i % 64)) != 0
    }
    /// Maximal runs `[lo, hi)` of dirty bytes.
    fn runs(&self) -> Vec<(usize, usize)> {
        let mut v = Vec::new();
        let mut i = 0;
        while i < BLOCK_SIZE {
            if i % 64 == 0 && self.dirty[i / 64] == 0 {
                i += 64;
                continue;
            }
            if self.is_dirty(i) {
                let lo = i;
                while i < BLOCK_SIZE && self.is_dirty(i) {
                    i += 1;
                }
                v.push((lo, i));
            } else {
                i += 1;
            }
        }
        v
    }
}

struct Copies {
    map: core::cell::UnsafeCell<Option<HashMap<u32, Copy>>>,
}

// SAFETY: `map` is only touched under `fork_lock()`.
unsafe impl Sync for Copies {}

static COPIES: Copies = Copies {
    map: core::cell::UnsafeCell::new(None),
};

/// The copies' lock, for [`crate::forkgate`].
pub fn fork_lock() -> &'static SpinLock {
    &crate::forkgate::LOCKS.incoherent
}

fn with<R>(f: impl FnOnce(&mut HashMap<u32, Copy>) -> R) -> R {
    let _g = fork_lock().lock();
    // SAFETY: the lock is held for the whole use of the map.
    let m = unsafe { &mut *COPIES.map.get() };
    f(m.get_or_insert_with(HashMap::default))
}

/// Is the emulation on for this instance?
pub fn active(c: &Client) -> bool {
    c.info.island == atoll_proto::boot::Island::Incoherent
}

/// Whole shared block `b` as an extent (for the audited copy routines).
fn whole(b: u32) -> Extent {
    Extent {
        file_offset: 0,
        len: BS,
        block: b,
    }
}

/// The private copy of block `b`, copied in on first use.
fn copy_of<'m>(c: &Client, m: &'m mut HashMap<u32, Copy>, b: u32) -> Option<&'m mut Copy> {
    if let std::collections::hash_map::Entry::Vacant(v) = m.entry(b) {
        let mut data = Box::new([0u8; BLOCK_SIZE]);
        cache::copy_out_one(c.cache(), &whole(b), 0, &mut data[..])?;
        v.insert(Copy {
            data,
            dirty: Box::new([0; BLOCK_SIZE / 64]),
            any_dirty: false,
        });
    }
    m.get_mut(&b)
}

/// Visit the blocks of extent `e` overlapping file bytes `[start, start +
/// len)`: `f(block, offset in block, offset in buffer, length)`.
fn pieces(
    e: &Extent,
    start: u64,
    len: usize,
    mut f: impl FnMut(u32, usize, usize, usize) -> bool,
) -> Option<usize> {
    let lo = e.file_offset.max(start);
    let hi = e.file_offset.saturating_add(e.len).min(start + len as u64);
    if lo >= hi {
        return Some(0);
    }
    // Block-aligned position of the extent's first byte.
    let base = e.file_offset - e.file_offset % BS;
    let mut pos = lo;
    while pos < hi {
        let k = (pos - base) / BS;
        let in_block = ((pos - base) % BS) as usize;
        let n = ((BS - in_block as u64).min(hi - pos)) as usize;
        let b = e.block.checked_add(u32::try_from(k).ok()?)?;
        if !f(b, in_block, (pos - start) as usize, n) {
            return None;
        }
        pos += n as u64;
    }
    Some((hi - lo) as usize)
}

/// `cache::copy_out_one`, through private copies when incoherent.
pub fn copy_out(c: &Client, e: &Extent, start: u64, dst: &mut [u8]) -> Option<usize> {
    if !active(c) || e.block == HOLE {
        return cache::copy_out_one(c.cache(), e, start, dst);
    }
    let len = dst.len();
    with(|m| {
        pieces(e, start, len, |b, off, at, n| match copy_of(c, m, b) {
            Some(cp) => {
                dst[at..at + n].copy_from_slice(&cp.data[off..off + n]);
                true
            }
            None => false,
        })
    })
}

/// `cache::copy_in_one`, into private copies when incoherent.
pub fn copy_in(c: &Client, e: &Extent, start: u64, src: &[u8]) -> Option<usize> {
    if !active(c) || e.block == HOLE {
        return cache::copy_in_one(c.cache(), e, start, src);
    }
    with(|m| {
        pieces(e, start, src.len(), |b, off, at, n| {
            match copy_of(c, m, b) {
                Some(cp) => {
                    cp.data[off..off + n].copy_from_slice(&src[at..at + n]);
                    cp.mark(off, n);
                    true
                }
                None => false,
            }
        })
    })
}

/// Write every dirty byte back to the shared cache (close, fsync, exec,
/// exit).
pub fn write_back(c: &Client) {
    if !active(c) {
        return;
    }
    with(|m| write_back_locked(c, m));
}

fn write_back_locked(c: &Client, m: &mut HashMap<u32, Copy>) {
    for (b, cp) in m.iter_mut() {
        if !cp.any_dirty {
            continue;
        }
        let e = whole(*b);
        for (lo, hi) in cp.runs() {
            let _ = cache::copy_in_one(c.cache(), &e, lo as u64, &cp.data[lo..hi]);
        }
        cp.dirty.fill(0);
        cp.any_dirty = false;
    }
}

/// At `open`: write back, then forget every private copy, so the opener
/// sees what others wrote back before.
pub fn invalidate(c: &Client) {
    if !active(c) {
        return;
    }
    with(|m| {
        write_back_locked(c, m);
        m.clear();
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_split_an_extent_at_block_boundaries() {
        let e = Extent {
            file_offset: 4000,
            len: 5000,
            block: 10,
        };
        let mut seen = Vec::new();
        let n = pieces(&e, 3990, 600, |b, off, at, n| {
            seen.push((b, off, at, n));
            true
        });
        assert_eq!(n, Some(590));
        assert_eq!(seen, vec![(10, 4000, 10, 96), (11, 0, 106, 494)]);
    }

    #[test]
    fn only_written_bytes_are_dirty() {
        let mut cp = Copy {
            data: Box::new([0; BLOCK_SIZE]),
            dirty: Box::new([0; BLOCK_SIZE / 64]),
            any_dirty: false,
        };
        cp.mark(10, 5);
        cp.mark(60, 10);
        cp.mark(4090, 6);
        assert_eq!(cp.runs(), vec![(10, 15), (60, 70), (4090, 4096)]);
    }
}
