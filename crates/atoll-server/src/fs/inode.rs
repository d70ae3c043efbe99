//! Inodes and their data blocks in the shared buffer cache.
//!
//! Life cycle of an inode (Hare §3.3 and Fig. 3-3):
//!
//! ```text
//!  created (links 1) ──Link/Ref──▶ links n ──Unlink/Unref──▶ links 0
//!        │                                                    │
//!        └── opens > 0 or maps > 0: descriptions and mappings ◀┘
//!            keep it alive └── last Close and last Unmap ──▶ freed
//!                                                 (blocks back to the pool)
//! ```
//!
//! An inode lives on its owner server only and is freed when its link
//! count, its count of open descriptions and its count of mapping sessions
//! (`super::mapping`) are all zero, so an unlinked file stays readable
//! through descriptors opened before and its blocks stay the mappings'.
//!
//! Blocks: `blocks` maps a file block index to a buffer-cache block; a
//! missing index is a hole (reads as zeros, not counted in `st_blocks`).
//! Clients copy data directly into blocks they were granted, so a block
//! freed by truncate or hole punch while the file is open could still be
//! written by a client holding an old extent list: such blocks are parked
//! on `deferred` (reused first by the same inode) and return to the free
//! pool when the last description closes. While the inode is mapped no
//! block leaves it: truncate and hole punch zero the blocks in place and
//! keep them at their offsets as *retained* blocks (`super::retain`), so
//! a mapping keeps showing the file's own page there. Every block is
//! zeroed when handed out, and truncation zeroes the exposed tail of a
//! partial block, so a hole or an extension never reveals old bytes.

use std::collections::{BTreeMap, BTreeSet};

use atoll_proto::{Errno, Extent, FileType, Timespec, BLOCK_SIZE};

pub use super::blocks::Cache;
use super::locks::Lock;
use crate::store::BlockStore;

const BS: u64 = BLOCK_SIZE as u64;
/// Hole marker in an [`Extent`].
pub const HOLE: u32 = u32::MAX;
/// Most extents in one reply, so that it fits in `MAX_FRAME` (each extent
/// encodes in at most 25 bytes); the client loops for the rest.
pub const MAX_EXTENTS: usize = 256;
/// Largest file size (16 TiB, like ext4 with 4 KiB blocks).
pub const MAX_FILE_SIZE: u64 = 1 << 44;

#[derive(serde::Serialize, serde::Deserialize)]
pub struct Inode {
    pub ftype: FileType,
    /// Permission bits, set-id and sticky (`0o7777`).
    pub perm: u32,
    pub uid: u32,
    pub gid: u32,
    pub rdev: u64,
    /// Directory entries naming this inode (a directory has 1 while linked).
    pub links: u32,
    pub size: u64,
    pub atime: Timespec,
    pub mtime: Timespec,
    pub ctime: Timespec,
    pub btime: Timespec,
    /// When `mtime` was last written, by this server's clock: a change
    /// here, an explicit `utimensat` (whose time may be any), or a
    /// `Touched` (the time of a change another server made). A `Touched`
    /// older than this lost the race to a later write and leaves `mtime`.
    #[serde(default)]
    pub mtime_set: Timespec,
    pub blocks: BTreeMap<u64, u32>,
    /// Symlink or socket target, when short (`limits::set_target`).
    pub target: Vec<u8>,
    /// Length of the target, held here or in block 0.
    pub target_len: u32,
    pub xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
    /// Open file descriptions of this inode.
    pub opens: u32,
    /// An `O_TMPFILE` file that `linkat` may still give its first name
    /// (Linux's `I_LINKABLE`); any other inode without links is gone.
    pub linkable: bool,
    pub deferred: Vec<u32>,
    /// Sessions mapping the inode (`super::mapping`).
    pub maps: u32,
    /// Sessions running the inode as their program (`super::text`).
    pub runs: u32,
    /// File block indexes in `blocks` that are holes or lie past the end
    /// of file as Linux would see them, kept only because a mapping shows
    /// them (`super::retain`): not counted in `st_blocks`, holes to
    /// `SEEK_DATA` while all zeros, freed (or kept as data) after the last
    /// mapping.
    pub retained: BTreeSet<u64>,
    pub locks: Vec<Lock>,
}

impl Inode {
    pub fn new(ftype: FileType, perm: u32, uid: u32, gid: u32, now: Timespec) -> Inode {
        Inode {
            ftype,
            perm,
            uid,
            gid,
            rdev: 0,
            links: 1,
            size: 0,
            atime: now,
            mtime: now,
            ctime: now,
            btime: now,
            mtime_set: now,
            blocks: BTreeMap::new(),
            target: Vec::new(),
            target_len: 0,
            xattrs: BTreeMap::new(),
            opens: 0,
            linkable: false,
            deferred: Vec::new(),
            maps: 0,
            runs: 0,
            retained: BTreeSet::new(),
            locks: Vec::new(),
        }
    }

    /// A change made here at `t`: contents (or entries) and status.
    pub fn modified(&mut self, t: Timespec) {
        self.mtime = t;
        self.mtime_set = t;
        self.ctime = t;
    }

    /// Give up block `b`. Never while mapped: a mapped inode retains its
    /// blocks instead (`super::retain`).
    pub(super) fn free_block<S: BlockStore>(&mut self, cache: &mut Cache<S>, b: u32) {
        debug_assert_eq!(self.maps, 0, "a mapped inode retains its blocks");
        if self.opens > 0 {
            self.deferred.push(b);
        } else {
            cache.release(b);
        }
    }

    /// The last description closed: parked blocks may be reused by anyone.
    pub fn release_deferred<S: BlockStore>(&mut self, cache: &mut Cache<S>) {
        cache.release_all(self.deferred.drain(..));
    }

    /// The inode is being destroyed.
    pub fn release_all<S: BlockStore>(&mut self, cache: &mut Cache<S>) {
        cache.release_all(std::mem::take(&mut self.blocks).into_values());
        self.retained.clear();
        self.release_deferred(cache);
    }

    /// Holes among file blocks `[first, last]`.
    pub fn missing(&self, first: u64, last: u64) -> u64 {
        (last - first + 1) - self.blocks.range(first..=last).count() as u64
    }

    /// Back file blocks `[first, last]` with data, allocating (zeroed)
    /// blocks for holes; a retained block there becomes data again, the
    /// same block a mapping shows. Stops when the pool is empty; returns
    /// how many leading blocks of the range are backed.
    pub fn ensure<S: BlockStore>(&mut self, cache: &mut Cache<S>, first: u64, last: u64) -> u64 {
        for fb in first..=last {
            if self.blocks.contains_key(&fb) {
                if !self.retained.is_empty() {
                    self.retained.remove(&fb);
                }
                continue;
            }
            match cache.alloc(&mut self.deferred) {
                Some(b) => {
                    self.blocks.insert(fb, b);
                }
                None => return fb - first,
            }
        }
        last - first + 1
    }

    /// Extents covering `[off, off + len)`, at most [`MAX_EXTENTS`] runs;
    /// returns them and the number of bytes covered (a prefix of `len`).
    pub fn extents(&self, off: u64, len: u64) -> (Vec<Extent>, u64) {
        let end = off.saturating_add(len);
        let mut out: Vec<Extent> = Vec::new();
        let mut pos = off;
        let mut it = self.blocks.range(off / BS..).peekable();
        while pos < end {
            let fb = pos / BS;
            let (run_end, block) = match it.peek() {
                Some(&(&b, &cb)) if b == fb => {
                    it.next();
                    (end.min((fb + 1) * BS), cb)
                }
                Some(&(&b, _)) => (end.min(b * BS), HOLE),
                None => (end, HOLE),
            };
            let merged = out.last_mut().is_some_and(|last| {
                let contiguous = last.file_offset + last.len == pos
                    && if block == HOLE {
                        last.block == HOLE
                    } else {
                        last.block != HOLE
                            && block as u64 == last.block as u64 + (fb - last.file_offset / BS)
                    };
                if contiguous {
                    last.len += run_end - pos;
                }
                contiguous
            });
            if !merged {
                if out.len() == MAX_EXTENTS {
                    break;
                }
                out.push(Extent {
                    file_offset: pos,
                    len: run_end - pos,
                    block,
                });
            }
            pos = run_end;
        }
        (out, pos - off)
    }

    /// Zero bytes `[from, to)` of file block `fb` if it is backed.
    pub(super) fn zero_in_block<S: BlockStore>(
        &self,
        cache: &mut Cache<S>,
        fb: u64,
        from: u64,
        to: u64,
    ) {
        if let Some(&b) = self.blocks.get(&fb) {
            cache.store.zero(b, from as usize, to as usize);
        }
    }

    /// Set the size, freeing blocks past the end (retaining them while
    /// mapped) and zeroing the exposed tail of the last partial block; an
    /// extension zeroes what it exposes.
    pub fn truncate<S: BlockStore>(&mut self, cache: &mut Cache<S>, new: u64) {
        if new < self.size {
            let keep = new.div_ceil(BS);
            if self.maps > 0 {
                self.retain_from(cache, keep);
            } else {
                let dropped = self.blocks.split_off(&keep);
                for b in dropped.into_values() {
                    self.free_block(cache, b);
                }
            }
            if new & (BS - 1) != 0 {
                self.zero_in_block(cache, new / BS, new % BS, BS);
            }
        } else {
            self.zero_past_eof(cache, new);
        }
        self.size = new;
    }

    /// `FALLOC_FL_PUNCH_HOLE`: free whole blocks, zero partial ones.
    pub fn punch<S: BlockStore>(&mut self, cache: &mut Cache<S>, off: u64, len: u64) {
        let end = off.saturating_add(len);
        let mut pos = off;
        while pos < end {
            let fb = pos / BS;
            let blk_end = (fb + 1) * BS;
            let to = end.min(blk_end);
            if pos & (BS - 1) == 0 && to == blk_end {
                // Skip over holes quickly: jump to the next backed block.
                if self.maps > 0 && self.blocks.contains_key(&fb) {
                    self.retain_block(cache, fb);
                } else if let Some(b) = self.blocks.remove(&fb) {
                    self.free_block(cache, b);
                } else {
                    // A hole: jump to the next backed block inside the range.
                    match self.blocks.range(fb..).next() {
                        Some((&next, _)) if next * BS < end => {
                            pos = next * BS;
                            continue;
                        }
                        _ => break,
                    }
                }
            } else {
                self.zero_in_block(cache, fb, pos % BS, to - fb * BS);
            }
            pos = to;
        }
    }

    /// `FALLOC_FL_ZERO_RANGE` (blocks already reserved by the caller's
    /// space check): back every block of the range and zero the bytes.
    pub fn zero_range<S: BlockStore>(&mut self, cache: &mut Cache<S>, off: u64, len: u64) -> bool {
        let end = off + len;
        if self.ensure(cache, off / BS, (end - 1) / BS) < (end - 1) / BS - off / BS + 1 {
            return false;
        }
        let mut pos = off;
        while pos < end {
            let fb = pos / BS;
            let to = end.min((fb + 1) * BS);
            self.zero_in_block(cache, fb, pos % BS, to - fb * BS);
            pos = to;
        }
        true
    }

    /// `SEEK_DATA`: first byte at or after `off` inside a data block (a
    /// retained block that still holds only zeros is a hole, `retain`).
    pub fn seek_data<S: BlockStore>(&self, cache: &Cache<S>, off: u64) -> Result<u64, Errno> {
        if off >= self.size {
            return Err(Errno::ENXIO);
        }
        let data = self
            .blocks
            .range(off / BS..)
            .find(|&(&fb, _)| !self.shows_hole(cache, fb));
        match data {
            Some((&b, _)) if (b * BS).max(off) < self.size => Ok((b * BS).max(off)),
            _ => Err(Errno::ENXIO),
        }
    }

    /// `SEEK_HOLE`: first byte at or after `off` in a hole (EOF counts).
    pub fn seek_hole<S: BlockStore>(&self, cache: &Cache<S>, off: u64) -> Result<u64, Errno> {
        if off >= self.size {
            return Err(Errno::ENXIO);
        }
        let mut fb = off / BS;
        for (&b, _) in self.blocks.range(fb..) {
            if b != fb || self.shows_hole(cache, b) {
                break;
            }
            fb += 1;
        }
        Ok((fb * BS).max(off).min(self.size))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemStore;

    fn setup() -> (Inode, Cache<MemStore>) {
        let cache = Cache::private(0, 64, MemStore::new(64));
        (
            Inode::new(FileType::Regular, 0o644, 0, 0, Timespec::default()),
            cache,
        )
    }

    #[test]
    fn contiguous_blocks_merge_into_one_extent_and_holes_are_marked() {
        let (mut ino, mut c) = setup();
        assert_eq!(ino.ensure(&mut c, 0, 3), 4);
        assert_eq!(ino.ensure(&mut c, 6, 6), 1);
        let (ext, covered) = ino.extents(100, 7 * BS - 100);
        assert_eq!(covered, 7 * BS - 100);
        assert_eq!(ext.len(), 3);
        assert_eq!(
            (ext[0].file_offset, ext[0].len, ext[0].block),
            (100, 4 * BS - 100, 0)
        );
        assert_eq!((ext[1].len, ext[1].block), (2 * BS, HOLE));
        assert_eq!((ext[2].file_offset, ext[2].block), (6 * BS, 4));
    }

    #[test]
    fn truncate_frees_blocks_and_zeroes_the_partial_tail() {
        let (mut ino, mut c) = setup();
        ino.ensure(&mut c, 0, 1);
        ino.size = 2 * BS;
        let b0 = ino.blocks[&0];
        c.store.fill(b0, 0xaa);
        ino.truncate(&mut c, 10);
        assert_eq!(ino.blocks.len(), 1);
        assert_eq!(c.statfs().1, 63);
        let mut buf = [0u8; 20];
        c.store.read(b0, 0, &mut buf);
        assert_eq!(&buf[..10], &[0xaa; 10]);
        assert_eq!(&buf[10..], &[0; 10]);
    }

    #[test]
    fn blocks_freed_while_open_are_parked_until_release() {
        let (mut ino, mut c) = setup();
        ino.opens = 1;
        ino.ensure(&mut c, 0, 3);
        ino.size = 4 * BS;
        ino.punch(&mut c, 0, 2 * BS);
        assert_eq!(ino.blocks.len(), 2);
        assert_eq!(ino.deferred.len(), 2);
        assert_eq!(c.statfs().1, 60);
        ino.release_deferred(&mut c);
        assert_eq!(c.statfs().1, 62);
    }

    #[test]
    fn seek_data_and_hole_follow_backed_blocks() {
        let (mut ino, mut c) = setup();
        ino.ensure(&mut c, 2, 3);
        ino.size = 10 * BS;
        assert_eq!(ino.seek_data(&c, 0), Ok(2 * BS));
        assert_eq!(ino.seek_hole(&c, 0), Ok(0));
        assert_eq!(ino.seek_hole(&c, 2 * BS + 5), Ok(4 * BS));
        assert_eq!(ino.seek_data(&c, 5 * BS), Err(Errno::ENXIO));
        assert_eq!(ino.seek_hole(&c, 10 * BS), Err(Errno::ENXIO));
    }

    #[test]
    fn extents_cap_and_report_a_covered_prefix() {
        let mut c = Cache::private(0, 1024, MemStore::new(1024));
        let mut ino = Inode::new(FileType::Regular, 0o644, 0, 0, Timespec::default());
        // Every other block backed: runs alternate, so the cap is reached.
        for fb in (0..1200).step_by(2) {
            ino.ensure(&mut c, fb, fb);
        }
        let (ext, covered) = ino.extents(0, 1200 * BS);
        assert_eq!(ext.len(), MAX_EXTENTS);
        assert_eq!(covered, MAX_EXTENTS as u64 * BS);
    }
}
