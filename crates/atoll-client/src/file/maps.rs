//! `mmap` of an atoll file: the buffer cache's pages mapped where the
//! program asked, by runs of the blocks the file's server names
//! (`MapBlocks`, Hare §3.3); copy islands map copies (`copymap`).

use atoll_proto::{FileType, InodeId, Reply, Request, BLOCK_SIZE};

use crate::error::{err, Error, Result};
use crate::fdtable::DescRef;
use crate::session::{Client, Lane};
use crate::{cache, sys};

/// `mmap` of an atoll fd: map the buffer-cache pages themselves.
///
/// `MAP_SHARED` maps the cache memfd shared (stores reach the file, Hare
/// §3.3); it asks `MapBlocks` to back holes and pages past the end of file
/// with blocks the owner retains for the file (server `fs/retain.rs`), so
/// a later write there shows through the mapping as on Linux.
/// `MAP_PRIVATE` maps the same pages copy-on-write; its holes (and pages
/// past the end of file) are anonymous zero pages of the reserved range.
#[inline(never)]
pub fn mmap(c: &Client, lane: &Lane, d: &DescRef, a: &[u64; 6]) -> Result<i64> {
    let (addr, len, prot, flags, off) = (a[0], a[1], a[2] as i32, a[3] as i32, a[5]);
    let f = d.flags();
    if f & libc::O_PATH as u32 != 0 {
        return err(libc::EBADF);
    }
    if d.ftype() != FileType::Regular {
        return err(libc::ENODEV);
    }
    if len == 0 || off % BLOCK_SIZE as u64 != 0 {
        return err(libc::EINVAL);
    }
    let acc = f & libc::O_ACCMODE as u32;
    if acc == libc::O_WRONLY as u32 {
        return err(libc::EACCES);
    }
    let shared = flags & libc::MAP_TYPE == libc::MAP_SHARED
        || flags & libc::MAP_TYPE == libc::MAP_SHARED_VALIDATE;
    let writable = prot & libc::PROT_WRITE != 0;
    if shared && writable && acc != libc::O_RDWR as u32 {
        return err(libc::EACCES);
    }
    let map_len = len.div_ceil(BLOCK_SIZE as u64) * BLOCK_SIZE as u64;
    let keep = flags
        & (libc::MAP_FIXED | libc::MAP_FIXED_NOREPLACE | libc::MAP_NORESERVE | libc::MAP_POPULATE);
    if !c.maps_cache() {
        // A copy island maps no cache page: the mapping is a copy.
        return crate::copymap::mmap(c, lane, d, addr, map_len, prot, keep, off, shared);
    }
    // SAFETY: reserving anonymous memory at the program's requested address
    // with the program's own MAP_FIXED choice, as its mmap would have.
    let base = unsafe {
        sys::syscall6(
            libc::SYS_mmap,
            [
                addr,
                map_len,
                prot as u64,
                (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | keep) as u64,
                u64::MAX,
                0,
            ],
        )
    };
    if base < 0 {
        return err((-base) as i32);
    }
    // Counted at the owner before any block reaches the mapping, so the
    // blocks stay this file's until the last unmap (`mapping`).
    let span = (base as u64, map_len);
    if let Err(e) = crate::mapping::track(c, lane, d.ino(), span, off, prot, shared) {
        // SAFETY: unmapping only the range we just reserved.
        unsafe { sys::sc(libc::SYS_munmap, base as u64, map_len, 0, 0) };
        return Err(e);
    }
    // Holes and pages past the end get blocks when first touched.
    let result = map_runs(
        c,
        lane,
        d.ino(),
        base as u64,
        off,
        map_len,
        prot,
        shared,
        false,
    );
    if let Err(e) = result {
        // SAFETY: unmapping only the range we just reserved.
        unsafe { sys::sc(libc::SYS_munmap, base as u64, map_len, 0, 0) };
        crate::mapping::forget(c, base as u64, map_len);
        return Err(e);
    }
    Ok(base)
}

/// Map `[at, at + len)` (inside a reservation of an atoll mapping) onto
/// the buffer-cache file from byte `offset` on: a file's blocks, or, at or
/// beyond the cache's end, pages that fault (`pastend`).
pub(crate) fn map_cache(
    c: &Client,
    at: u64,
    len: u64,
    prot: i32,
    shared: bool,
    offset: u64,
) -> Result<()> {
    let cache_fd = c.cache_fd.load(core::sync::atomic::Ordering::Relaxed);
    let kind = if shared {
        libc::MAP_SHARED
    } else {
        libc::MAP_PRIVATE
    };
    // SAFETY: replaces pages of the caller's own reservation (MAP_FIXED
    // inside it only) with pages of the cache file.
    let r = unsafe {
        sys::syscall6(
            libc::SYS_mmap,
            [
                at,
                len,
                prot as u64,
                (kind | libc::MAP_FIXED) as u64,
                cache_fd as u64,
                offset,
            ],
        )
    };
    if r < 0 {
        return err((-r) as i32);
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn map_runs(
    c: &Client,
    lane: &Lane,
    ino: InodeId,
    base: u64,
    off: u64,
    map_len: u64,
    prot: i32,
    shared: bool,
    allocate: bool,
) -> Result<u64> {
    let mut pos = off;
    let end = off + map_len;
    while pos < end {
        // `MapBlocks` backs holes once and then shows the same blocks: it
        // goes again when its server dies on it (`forkshare::again`).
        let got = crate::forkshare::again(|| {
            lane.call(
                c,
                ino.owner(),
                Request::MapBlocks {
                    ino,
                    offset: pos,
                    len: end - pos,
                    allocate,
                },
                |r| match r {
                    Reply::Extents { len, extents, .. } => {
                        for e in extents.iter() {
                            if e.file_offset < pos || e.file_offset % BLOCK_SIZE as u64 != 0 {
                                return err(libc::EIO);
                            }
                            let run = e.len.div_ceil(BLOCK_SIZE as u64) * BLOCK_SIZE as u64;
                            let run = run.min(end - e.file_offset);
                            let at = base + (e.file_offset - off);
                            if e.block == cache::HOLE {
                                // A shared mapping's hole gets its block when a
                                // page of it is first touched (`pastend`), as a
                                // page cache fills on a fault; a private one
                                // reads the reservation's zeros.
                                if shared {
                                    crate::pastend::map_past_end(c, at, run, prot, true)?;
                                }
                                continue;
                            }
                            let at_block = e.block as u64 * BLOCK_SIZE as u64;
                            map_cache(c, at, run, prot, shared, at_block)?;
                        }
                        Ok(len)
                    }
                    _ => Err(Error::Protocol("MapBlocks")),
                },
            )
        })?;
        if got == 0 {
            // Past the end of the file: touching these pages faults, as on
            // Linux, until the file grows (`pastend`).
            crate::pastend::map_past_end(c, base + (pos - off), end - pos, prot, shared)?;
            break;
        }
        pos += got.div_ceil(BLOCK_SIZE as u64) * BLOCK_SIZE as u64;
    }
    Ok(pos.min(end) - off)
}
