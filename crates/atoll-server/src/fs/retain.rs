//! Retained blocks: how a mapped file keeps its pages coherent with the
//! file across truncate, hole punch and writes into holes.
//!
//! A `MAP_SHARED` mapping of an atoll file maps the buffer-cache blocks
//! themselves (Hare §3.3), so a page keeps reaching the block it was made
//! with for as long as the mapping lasts. Linux's page cache instead keeps
//! one page per file offset, and every mapping of the offset shows it: a
//! shrinking truncate or a hole punch drops the page (a later extension
//! shows a fresh zero page), and a write into a hole fills the page a
//! mapping of the hole faulted in. atoll gets the same effect by never
//! letting a block leave a mapped inode:
//!
//! * while `Inode::maps > 0`, a block that truncate or punch would free is
//!   zeroed in place and stays in `Inode::blocks` at its offset, its index
//!   in `Inode::retained` ([`Inode::retain_block`]);
//! * a shared mapping of a hole, or of pages past the end of file, gets
//!   real zeroed blocks at those offsets, also retained
//!   ([`Inode::back_for_mapping`]);
//! * a `write` or `fallocate` over a retained index makes it data again
//!   (`Inode::ensure`): the bytes land in the very block every mapping
//!   shows; an extension zeroes the retained bytes it brings inside the
//!   file ([`Inode::zero_past_eof`]), as Linux shows zeros there;
//! * after the last mapping ([`Inode::release_retained`]), retained blocks
//!   past the end of file are freed, and so are those inside it that hold
//!   only zeros (holes again); one a mapping stored into is kept as data,
//!   as Linux keeps a page a store through a mapping of a hole dirtied.
//!
//! Life of a retained block:
//!
//! ```text
//!  data ──truncate/punch while mapped──▶ retained (zeroed) ──write──▶ data
//!  hole ──MapBlocks{allocate}──────────▶ retained (zeroed)
//!  retained ──last unmap──▶ past EOF or all zeros: freed │ else: data
//! ```
//!
//! Retained blocks are holes to `st_blocks`, and to `SEEK_DATA`/`SEEK_HOLE`
//! while they hold only zeros (one a mapping stored into is data, as the
//! store's fault makes the page data on Linux); `read` reads them (zeros,
//! unless a mapping stored there, which Linux would show too). No block of a mapped inode ever goes to the free pool
//! or to another offset, so a store through any page reaches only the
//! file, and the offset, it was mapped from.

use atoll_proto::BLOCK_SIZE;

use super::inode::{Cache, Inode};
use crate::store::BlockStore;

const BS: u64 = BLOCK_SIZE as u64;

impl Inode {
    /// File block `fb` (backed) stops being data while the inode is
    /// mapped: zero it and keep it at its offset.
    pub(super) fn retain_block<S: BlockStore>(&mut self, cache: &mut Cache<S>, fb: u64) {
        self.zero_in_block(cache, fb, 0, BS);
        self.retained.insert(fb);
    }

    /// A shrinking truncate while mapped: every block from file block
    /// `keep` on is retained. A block already retained past the old end
    /// is left as it is (it was zeroed then; what a mapping stored there
    /// since is zeroed when an extension exposes it).
    pub(super) fn retain_from<S: BlockStore>(&mut self, cache: &mut Cache<S>, keep: u64) {
        let old_end = self.size.div_ceil(BS);
        let cut: Vec<u64> = self
            .blocks
            .range(keep..)
            .map(|(&fb, _)| fb)
            .filter(|&fb| fb < old_end || !self.retained.contains(&fb))
            .collect();
        for fb in cut {
            self.retain_block(cache, fb);
        }
    }

    /// The end of file moves up to `to` (an extension, or a write at
    /// `to`): the bytes it exposes must read as zeros. They are the tail
    /// of the old last block and whatever retained blocks lie between;
    /// other blocks past the end (`fallocate` with `FALLOC_FL_KEEP_SIZE`)
    /// were zeroed when allocated.
    pub fn zero_past_eof<S: BlockStore>(&mut self, cache: &mut Cache<S>, to: u64) {
        let from = self.size;
        if to <= from {
            return;
        }
        let mut exposed: Vec<u64> = self
            .retained
            .range(from / BS..=(to - 1) / BS)
            .copied()
            .collect();
        if !from.is_multiple_of(BS) && !exposed.contains(&(from / BS)) {
            exposed.push(from / BS);
        }
        for fb in exposed {
            let lo = (fb * BS).max(from) - fb * BS;
            let hi = to.min((fb + 1) * BS) - fb * BS;
            self.zero_in_block(cache, fb, lo, hi);
        }
    }

    /// Back file blocks `[first, last]` (one reply's worth of the mapping
    /// `[first, whole]`) for a shared mapping: holes get zeroed blocks,
    /// retained (a hole they stay until a write). Nothing is allocated
    /// unless every hole of the rest of the mapping can be backed, so a
    /// mapping of a huge sparse range fails whole (`None`, the caller
    /// answers `ENOMEM` as Linux's `mmap` does) rather than drain the
    /// pool another file needs.
    pub fn back_for_mapping<S: BlockStore>(
        &mut self,
        cache: &mut Cache<S>,
        first: u64,
        last: u64,
        whole: u64,
    ) -> Option<()> {
        if self.missing(first, last) == 0 {
            return Some(()); // nothing to allocate here (a dense file)
        }
        // Counting the rest's holes costs a walk of its blocks, so only
        // when the rest is larger than the pool could back outright.
        let room = cache.statfs().1 + self.deferred.len() as u64;
        if whole - first + 1 > room && self.missing(first, whole) > room {
            return None;
        }
        // Claim from the shared pool now what the holes need, so that
        // the loop below never finds the pool empty halfway.
        let need = self
            .missing(first, last)
            .saturating_sub(self.deferred.len() as u64);
        if !cache.reserve(usize::try_from(need).unwrap_or(usize::MAX)) {
            return None;
        }
        for fb in first..=last {
            if self.blocks.contains_key(&fb) {
                continue;
            }
            let b = cache.alloc(&mut self.deferred)?;
            self.blocks.insert(fb, b);
            self.retained.insert(fb);
        }
        Some(())
    }

    /// The last mapping went: retained blocks past the end of file, and
    /// those inside it that hold only zeros, are freed (parked while the
    /// file is open, as any block); one a mapping stored into stays data.
    pub fn release_retained<S: BlockStore>(&mut self, cache: &mut Cache<S>) {
        let eof_block = self.size.div_ceil(BS);
        for fb in std::mem::take(&mut self.retained) {
            let Some(&b) = self.blocks.get(&fb) else {
                continue;
            };
            if fb < eof_block && !block_is_zero(cache, b) {
                continue;
            }
            self.blocks.remove(&fb);
            self.free_block(cache, b);
        }
    }
}

impl Inode {
    /// Is file block `fb` a hole to `SEEK_DATA`/`SEEK_HOLE`? A retained
    /// block is, unless a mapping stored into it: Linux would have made
    /// that page data when the store faulted it in.
    pub(super) fn shows_hole<S: BlockStore>(&self, cache: &Cache<S>, fb: u64) -> bool {
        self.retained.contains(&fb)
            && self
                .blocks
                .get(&fb)
                .is_some_and(|&b| block_is_zero(cache, b))
    }
}

fn block_is_zero<S: BlockStore>(cache: &Cache<S>, b: u32) -> bool {
    let mut buf = [0u8; BLOCK_SIZE];
    cache.store.read(b, 0, &mut buf);
    buf.iter().all(|&x| x == 0)
}

#[cfg(test)]
mod tests {
    use atoll_proto::{Errno, FileType, Timespec};

    use super::*;
    use crate::store::MemStore;

    /// An inode of `blocks` data blocks filled with 0xaa, mapped once.
    fn mapped(blocks: u64) -> (Inode, Cache<MemStore>) {
        let mut c = Cache::private(0, 16, MemStore::new(16));
        let mut i = Inode::new(FileType::Regular, 0o644, 0, 0, Timespec::default());
        if blocks > 0 {
            assert_eq!(i.ensure(&mut c, 0, blocks - 1), blocks);
        }
        for &b in i.blocks.values() {
            c.store.fill(b, 0xaa);
        }
        i.size = blocks * BS;
        i.maps = 1;
        (i, c)
    }

    fn byte(c: &Cache<MemStore>, b: u32, at: usize) -> u8 {
        let mut x = [0u8; 1];
        c.store.read(b, at, &mut x);
        x[0]
    }

    #[test]
    fn a_truncate_while_mapped_zeroes_and_keeps_blocks_at_their_offsets() {
        let (mut i, mut c) = mapped(4);
        let before = i.blocks.clone();
        i.truncate(&mut c, BS + 10);
        assert_eq!(i.blocks, before, "no block leaves a mapped inode");
        assert_eq!(i.retained.iter().copied().collect::<Vec<_>>(), [2, 3]);
        assert_eq!(byte(&c, before[&1], 9), 0xaa);
        assert_eq!(byte(&c, before[&1], 10), 0);
        assert_eq!(byte(&c, before[&3], 0), 0);
        assert_eq!(c.statfs().1 as usize, 12);
        // Regrowing and writing lands in the block the mapping shows.
        i.truncate(&mut c, 4 * BS);
        assert_eq!(i.ensure(&mut c, 3, 3), 1);
        assert_eq!(i.blocks[&3], before[&3]);
        assert_eq!(i.retained.iter().copied().collect::<Vec<_>>(), [2]);
    }

    #[test]
    fn a_punch_while_mapped_retains_whole_blocks_as_holes() {
        let (mut i, mut c) = mapped(3);
        i.punch(&mut c, 0, 2 * BS);
        assert_eq!(i.blocks.len(), 3);
        assert_eq!(i.seek_data(&c, 0), Ok(2 * BS), "retained blocks are holes");
        assert_eq!(i.seek_hole(&c, 0), Ok(0));
        assert_eq!(byte(&c, i.blocks[&0], 0), 0);
        assert_eq!(c.statfs().1 as usize, 13);
        // A store through the mapping makes it data, as Linux's fault.
        c.store.fill(i.blocks[&1], 0x55);
        assert_eq!(i.seek_data(&c, 0), Ok(BS));
        assert_eq!(i.seek_hole(&c, BS), Ok(3 * BS));
    }

    #[test]
    fn the_last_unmap_frees_retained_blocks_past_eof_and_zero_ones_keeps_stored_ones() {
        let (mut i, mut c) = mapped(4);
        i.punch(&mut c, 0, 2 * BS);
        i.truncate(&mut c, 3 * BS);
        // A store through the mapping into the punched block 1.
        c.store.fill(i.blocks[&1], 0x55);
        // A store past the end (Linux: SIGBUS) is never data.
        c.store.fill(i.blocks[&3], 0x77);
        i.maps = 0;
        i.release_retained(&mut c);
        assert!(i.retained.is_empty());
        assert_eq!(i.blocks.keys().copied().collect::<Vec<_>>(), [1, 2]);
        assert_eq!(c.statfs().1 as usize, 14, "blocks 0 and 3 back in the pool");
        assert_eq!(i.seek_data(&c, 0), Ok(BS));
    }

    #[test]
    fn an_extension_zeroes_retained_bytes_it_exposes() {
        let (mut i, mut c) = mapped(2);
        i.truncate(&mut c, 100);
        let b1 = i.blocks[&1];
        c.store.fill(b1, 0x77); // a store past the end
        i.truncate(&mut c, BS + 50);
        assert_eq!(byte(&c, b1, 49), 0);
        assert_eq!(byte(&c, i.blocks[&0], 100), 0);
        assert_eq!(byte(&c, i.blocks[&0], 99), 0xaa);
        // A write at an offset past the end zeroes the gap before it.
        i.truncate(&mut c, 100);
        c.store.fill(b1, 0x77);
        i.zero_past_eof(&mut c, BS + 20);
        assert_eq!(byte(&c, b1, 19), 0);
        assert_eq!(byte(&c, b1, 20), 0x77, "the write itself covers the rest");
    }

    #[test]
    fn a_mapping_of_holes_backs_them_all_or_none() {
        let (mut i, mut c) = mapped(1);
        assert_eq!(c.statfs().1 as usize, 15);
        assert_eq!(i.back_for_mapping(&mut c, 0, 3, 3), Some(()));
        assert_eq!(i.retained.len(), 3);
        assert_eq!(c.statfs().1 as usize, 12);
        // 20 holes do not fit: nothing is taken.
        assert_eq!(i.back_for_mapping(&mut c, 4, 8, 23), None);
        assert_eq!(c.statfs().1 as usize, 12);
        i.maps = 0;
        i.release_retained(&mut c);
        assert_eq!(c.statfs().1 as usize, 15);
        assert_eq!(i.seek_data(&c, BS), Err(Errno::ENXIO));
    }
}
