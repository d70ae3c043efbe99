//! Copies between the shared buffer cache and program buffers (Hare §3.3:
//! file data never travels in messages; a server hands out the block list
//! and the client loads and stores the blocks itself).
//!
//! Audited `unsafe` module: the cache is a `MAP_SHARED` mapping of the
//! instance's memfd; every access is bounds-checked against its length
//! first, so a malformed extent from a server can cause `EIO`, never an
//! out-of-bounds access.
//!
//! Coherence: on coherent hardware close-to-open consistency needs no
//! flush (Hare §3.3.1); `--incoherent` goes through the private copies of
//! `crate::incoherent`, which uses these routines to copy whole blocks.

use atoll_msg::SharedRegion;
use atoll_proto::{Extent, BLOCK_SIZE};

/// Sentinel block of a hole.
pub const HOLE: u32 = u32::MAX;

/// Byte offset in the cache of file offset `f` inside extent `e`.
fn cache_offset(e: &Extent, f: u64) -> u64 {
    e.block as u64 * BLOCK_SIZE as u64 + (e.file_offset % BLOCK_SIZE as u64) + (f - e.file_offset)
}

/// Copy the part of file bytes `[start, start + dst.len())` that extent
/// `e` covers out of the cache (zeros for a hole). Returns the bytes
/// handled, or `None` when the extent points outside the cache.
pub fn copy_out_one(cache: &SharedRegion, e: &Extent, start: u64, dst: &mut [u8]) -> Option<usize> {
    let end = start + dst.len() as u64;
    let lo = e.file_offset.max(start);
    let hi = e.file_offset.saturating_add(e.len).min(end);
    if lo >= hi {
        return Some(0);
    }
    let d = &mut dst[(lo - start) as usize..(hi - start) as usize];
    if e.block == HOLE {
        d.fill(0);
        return Some(d.len());
    }
    let off = cache_offset(e, lo);
    let n = d.len();
    if !matches!(off.checked_add(n as u64), Some(x) if x <= cache.len() as u64) {
        return None;
    }
    // SAFETY: [off, off+n) lies inside the cache mapping (checked above);
    // `d` is a distinct program buffer of length n.
    unsafe { core::ptr::copy_nonoverlapping(cache.as_ptr().add(off as usize), d.as_mut_ptr(), n) };
    Some(n)
}

/// Copy the part of `src` (file bytes `[start, …)`) that extent `e` covers
/// into the cache. `None` for a hole or an extent outside the cache.
pub fn copy_in_one(cache: &SharedRegion, e: &Extent, start: u64, src: &[u8]) -> Option<usize> {
    let end = start + src.len() as u64;
    let lo = e.file_offset.max(start);
    let hi = e.file_offset.saturating_add(e.len).min(end);
    if lo >= hi {
        return Some(0);
    }
    if e.block == HOLE {
        return None;
    }
    let s = &src[(lo - start) as usize..(hi - start) as usize];
    let off = cache_offset(e, lo);
    let n = s.len();
    if !matches!(off.checked_add(n as u64), Some(x) if x <= cache.len() as u64) {
        return None;
    }
    // SAFETY: [off, off+n) lies inside the cache mapping (checked above);
    // `s` is the program's buffer of length n.
    unsafe { core::ptr::copy_nonoverlapping(s.as_ptr(), cache.as_ptr().add(off as usize), n) };
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extent_offsets_start_mid_block() {
        let e = Extent {
            file_offset: 5000,
            len: 100,
            block: 3,
        };
        assert_eq!(cache_offset(&e, 5000), 3 * 4096 + 904);
        assert_eq!(cache_offset(&e, 5010), 3 * 4096 + 914);
        let e0 = Extent {
            file_offset: 8192,
            len: 8192,
            block: 7,
        };
        assert_eq!(cache_offset(&e0, 12288), 8 * 4096);
    }
}
