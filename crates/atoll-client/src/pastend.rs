//! Pages of a mapping past the end of its file: `SIGBUS`, as on Linux,
//! until the file grows.
//!
//! A mapping of an atoll file maps buffer-cache blocks (`file::mmap`).
//! Pages wholly past the end of the file have no block; Linux raises
//! `SIGBUS` on touching them, and once the file has grown (by anyone) the
//! same page shows the file's data. Here such pages map the buffer-cache
//! file *beyond its own end*, where the kernel raises `SIGBUS` for us.
//! atoll owns the kernel's `SIGBUS` disposition (the program's own is
//! virtual, `atoll-preload` `sigdefer`), so a fault on such a page first
//! comes here ([`resolve`]): if the file now covers the page, its blocks
//! are mapped there and the instruction runs again, as Linux's fault
//! handler maps the page; otherwise the program gets its `SIGBUS`.
//!
//! Holes of a shared mapping are mapped the same way: the first touch of
//! one asks the owner for a block there (`MapBlocks { allocate }`), so a
//! sparse file costs nothing until its pages are used, as Linux's page
//! cache fills on faults.
//!
//! A truncate by this process maps the pages it cut this way too. Another
//! process's truncate cannot reach this address space (there is no
//! shootdown between processes here): its pages keep the file's retained,
//! zeroed blocks (server `fs/retain.rs`) until this process truncates,
//! unmaps or exits.

use atoll_proto::InodeId;

use crate::error::Result;
use crate::session::Client;
use crate::sys;

const PAGE: u64 = 4096;
/// Pages mapped per fault: the faulting one and those after it (a program
/// that reaches past the old end usually reads on).
const RUN: u64 = 16 * PAGE;

/// Map `[at, at + len)` so that touching it raises `SIGBUS`: the cache
/// file, which never grows, beyond its end.
pub fn map_past_end(c: &Client, at: u64, len: u64, prot: i32, shared: bool) -> Result<()> {
    if len == 0 {
        return Ok(());
    }
    let beyond = (c.cache_len() as u64).div_ceil(PAGE) * PAGE;
    crate::file::map_cache(c, at, len.div_ceil(PAGE) * PAGE, prot, shared, beyond)
}

/// A `SIGBUS` at `addr` (`BUS_ADRERR`), raised in program code. Returns
/// whether the page is now the file's (the faulting access may run again):
/// a hole of a shared mapping gets its block here.
pub fn resolve(c: &Client, addr: u64) -> bool {
    let Some((start, end, ino, off, prot, shared)) = crate::mapping::piece_at(addr) else {
        return false;
    };
    let page = addr & !(PAGE - 1);
    let len = (end - page).min(RUN);
    let Ok(lane) = c.lane() else {
        return false;
    };
    if !shared {
        // A private mapping reads holes as zeros: anonymous pages first,
        // the file's blocks over them (as `file::mmap` reserves).
        // SAFETY: replaces pages of this piece of an atoll mapping.
        let r = unsafe {
            sys::syscall6(
                libc::SYS_mmap,
                [
                    page,
                    len,
                    prot as u64,
                    (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED) as u64,
                    u64::MAX,
                    0,
                ],
            )
        };
        if r < 0 {
            return false;
        }
    }
    let foff = off + (page - start);
    match crate::file::map_runs(c, &lane, ino, page, foff, len, prot, shared, shared) {
        Ok(covered) => covered > 0,
        // The page stays as it was (faulting): the program gets SIGBUS.
        Err(_) => {
            let _ = map_past_end(c, page, len, prot, shared);
            false
        }
    }
}

/// A system call's buffer `[addr, addr + len)` failed the kernel's check
/// and lies on an atoll mapping: resolve its pages as faults would.
/// Returns whether any page became the file's.
pub fn resolve_range(addr: u64, len: u64) -> bool {
    let Some(c) = crate::session::client() else {
        return false;
    };
    let mut any = false;
    let mut page = addr & !(PAGE - 1);
    let end = addr.saturating_add(len);
    while page < end {
        if !resolve(c, page) {
            break; // past the end still; so is every later page
        }
        any = true;
        page += RUN;
    }
    any
}

/// This process truncated `ino` to `size`: its own pages past the new end
/// fault from now on, as on Linux.
pub fn truncated(c: &Client, ino: InodeId, size: u64) {
    let eof = size.div_ceil(PAGE) * PAGE;
    for (start, end, off, prot, shared) in crate::mapping::pieces_of(ino) {
        let file_end = off + (end - start);
        if eof >= file_end {
            continue;
        }
        let from = start + eof.saturating_sub(off);
        let _ = map_past_end(c, from, end - from, prot, shared);
    }
}
