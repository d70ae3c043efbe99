//! Memory: `mmap`, `munmap`, `msync`, `mremap`.
//!
//! A mapping of an atoll file maps buffer-cache blocks (`mapping`), or in a
//! copy island private memory filled and written back by copy (`copymap`,
//! Cosh §5). Anonymous and host mappings are Linux's, except where they
//! replace a piece of an atoll mapping.

use libc::{MAP_ANONYMOUS, MAP_FIXED, MREMAP_FIXED};

use super::common::{done, fdarg, on_fd};
use crate::error::Result;
use crate::session::Client;
use crate::{copymap, fdtable, file, mapping, Out};

pub(super) fn mmap(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    let anonymous = a[3] as i32 & MAP_ANONYMOUS != 0;
    if a[3] as i32 & MAP_FIXED != 0 && copymap::overlaps(a[0], a[1]) {
        // A copy island's shared mapping being replaced: its
        // stores go back first, as Linux's pages are already in.
        copymap::before_mremap(c, a[0], a[1]);
    }
    if anonymous || !fdtable::is_atoll(fdarg(a[4])) {
        // Over a piece of an atoll mapping, the kernel replaces it.
        if a[3] as i32 & MAP_FIXED != 0 && mapping::overlaps(a[0], a[1]) {
            return mapping::host_fixed(c, a);
        }
        return Ok(Out::Host);
    }
    on_fd(c, fdarg(a[4]), |l, d| done(file::mmap(c, l, d, a)?))
}

/// `mmap`: of an atoll file, or `MAP_FIXED` over an atoll mapping.
pub(super) fn mmap_concerns(_: &Client, _: i64, a: &[u64; 6]) -> bool {
    (a[3] as i32 & MAP_ANONYMOUS == 0 && fdtable::is_atoll(fdarg(a[4])))
        || (a[3] as i32 & MAP_FIXED != 0
            && (mapping::overlaps(a[0], a[1]) || copymap::overlaps(a[0], a[1])))
}

pub(super) fn munmap(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    if copymap::overlaps(a[0], a[1]) {
        return done(copymap::munmap(c, a));
    }
    if !mapping::overlaps(a[0], a[1]) {
        return Ok(Out::Host);
    }
    mapping::munmap(c, a)
}

/// `munmap`: over an atoll mapping.
pub(super) fn munmap_concerns(_: &Client, _: i64, a: &[u64; 6]) -> bool {
    mapping::overlaps(a[0], a[1]) || copymap::overlaps(a[0], a[1])
}

/// A copy island's shared mapping: its stores go back now; Linux then
/// runs the call.
pub(super) fn msync(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    copymap::sync_range(c, a[0], a[1]);
    Ok(Out::Host)
}

pub(super) fn msync_concerns(_: &Client, _: i64, a: &[u64; 6]) -> bool {
    copymap::overlaps(a[0], a[1])
}

pub(super) fn mremap(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    if copymap::overlaps(a[0], a[1].max(1)) {
        copymap::before_mremap(c, a[0], a[1].max(1));
        return Ok(Out::Host);
    }
    let fixed = a[3] as i32 & MREMAP_FIXED != 0;
    let ours = mapping::overlaps(a[0], a[1].max(1)) || (fixed && mapping::overlaps(a[4], a[2]));
    if !ours {
        return Ok(Out::Host);
    }
    mapping::mremap(c, a)
}

/// `mremap`: of an atoll mapping, or onto one (`MREMAP_FIXED`).
pub(super) fn mremap_concerns(_: &Client, _: i64, a: &[u64; 6]) -> bool {
    mapping::overlaps(a[0], a[1].max(1))
        || (a[3] as i32 & MREMAP_FIXED != 0 && mapping::overlaps(a[4], a[2]))
        || copymap::overlaps(a[0], a[1].max(1))
}
