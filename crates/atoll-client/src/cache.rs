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
//! flush (Hare §3.3.1); the incoherent emulation mode is not implemented
//! in the client yet.
// TODO(atoll): incoherent emulation (private copies, write back on
// close/fsync, invalidate on open) when `InstanceInfo.incoherent` is set.

use atoll_msg::SharedRegion;
use atoll_proto::{Extent, BLOCK_SIZE};

/// Sentinel block of a hole.
pub const HOLE: u32 = u32::MAX;

/// Byte offset in the cache of file offset `f` inside extent `e`.
fn cache_offset(e: &Extent, f: u64) -> u64 {
    e.block as u64 * BLOCK_SIZE as u64 + (e.file_offset % BLOCK_SIZE as u64) + (f - e.file_offset)
}

/// Copy file bytes `[start, start + dst.len())` out of the cache following
/// `extents`; bytes not covered by any extent or in holes read as zeros.
pub fn copy_out(cache: &SharedRegion, extents: &[Extent], start: u64, dst: &mut [u8]) -> bool {
    dst.fill(0);
    let end = start + dst.len() as u64;
    for e in extents {
        let lo = e.file_offset.max(start);
        let hi = (e.file_offset + e.len).min(end);
        if lo >= hi || e.block == HOLE {
            continue;
        }
        let off = cache_offset(e, lo);
        let n = (hi - lo) as usize;
        if off
            .checked_add(n as u64)
            .is_none_or(|x| x > cache.len() as u64)
        {
            return false;
        }
        let d = &mut dst[(lo - start) as usize..(hi - start) as usize];
        // SAFETY: [off, off+n) lies inside the cache mapping (checked
        // above); `d` is a distinct program buffer of length n. The cache
        // is shared memory other processes may write concurrently: like
        // Hare we accept torn reads of a concurrently written block.
        unsafe {
            core::ptr::copy_nonoverlapping(cache.as_ptr().add(off as usize), d.as_mut_ptr(), n)
        };
    }
    true
}

/// Copy `src` into the cache at file bytes `[start, start + src.len())`.
/// Every byte must be covered by a non-hole extent (the server allocated
/// them for the write).
pub fn copy_in(cache: &SharedRegion, extents: &[Extent], start: u64, src: &[u8]) -> bool {
    let end = start + src.len() as u64;
    let mut covered = 0u64;
    for e in extents {
        let lo = e.file_offset.max(start);
        let hi = (e.file_offset + e.len).min(end);
        if lo >= hi {
            continue;
        }
        if e.block == HOLE {
            return false;
        }
        let off = cache_offset(e, lo);
        let n = (hi - lo) as usize;
        if off
            .checked_add(n as u64)
            .is_none_or(|x| x > cache.len() as u64)
        {
            return false;
        }
        let s = &src[(lo - start) as usize..(hi - start) as usize];
        // SAFETY: [off, off+n) lies inside the cache mapping (checked
        // above); `s` is the program's buffer of length n.
        unsafe { core::ptr::copy_nonoverlapping(s.as_ptr(), cache.as_ptr().add(off as usize), n) };
        covered += n as u64;
    }
    covered == src.len() as u64
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
