//! Directories: `getdents`, `getdents64`, and the current directory
//! (`chdir`, `fchdir`, `getcwd`).
//!
//! While the cwd is in atoll the kernel's cwd is a removed directory (see
//! `ns`), so every relative path and `getcwd` is atoll's to answer.

use core::sync::atomic::Ordering;

use atoll_proto::FileType;
use libc::{SYS_getdents64, AT_FDCWD};

use super::common::{done, fdarg, on_fd};
use crate::error::{err, Result};
use crate::fdtable::DescRef;
use crate::session::{Client, Lane};
use crate::{fdtable, ns, procfd, sys, walk, Out};

/// `getdents` and `getdents64`: of an atoll directory, of a listing of
/// `/proc/self/fd` that must not show atoll's private descriptors, or of
/// a host directory (the mount's parent shows the mount).
pub(super) fn getdents(c: &'static Client, nr: i64, a: &[u64; 6]) -> Result<Out> {
    let fd0 = fdarg(a[0]);
    if procfd::is_listing(fd0) {
        return done(procfd::getdents(c, nr, a));
    }
    if !fdtable::is_atoll(fd0) {
        return done(crate::mountentry::getdents(c, nr, a));
    }
    on_fd(c, fd0, |l, d| {
        let (ptr, len) = (a[1], a[2] as usize);
        if nr == SYS_getdents64 && d.ftype() == FileType::Directory && len <= BOUNCED_MAX {
            return getdents64_bounced(c, l, d, ptr, len);
        }
        let buf = sys::user_slice_mut(ptr, len)?;
        if nr == SYS_getdents64 {
            done(ns::getdents64(c, l, d, buf)?)
        } else {
            done(ns::getdents(c, l, d, buf)?)
        }
    })
}

/// Largest `getdents64` buffer listed through a bounce buffer.
const BOUNCED_MAX: usize = 1 << 20;

/// `getdents64` of a directory into a buffer of our own, then copied to
/// the program: the program's buffer (glibc's `readdir` passes 32 KiB) is
/// checked only where records land, as Linux writes only those, instead
/// of page by page whole before the listing (a `process_vm_readv` of 8
/// pages, ~6 µs, per call). A record that does not fit what the program
/// can write ends the listing there, as on Linux: the bytes of the
/// records before it (their `d_off` is where the next call goes on), or
/// `EFAULT` if none fits.
fn getdents64_bounced(
    c: &'static Client,
    l: &Lane,
    d: &DescRef,
    ptr: u64,
    len: usize,
) -> Result<Out> {
    let start = d.cookie().load(Ordering::Relaxed);
    let mut bounce = vec![0u8; len];
    let n = ns::getdents64(c, l, d, &mut bounce)? as usize;
    if n == 0 || sys::copy_to_user(ptr, &bounce[..n]).is_ok() {
        return done(n as i64);
    }
    let reached = sys::copy_to_user_prefix(ptr, &bounce[..n]);
    // Whole records within the bytes that reached the program.
    let (mut end, mut next) = (0usize, start);
    while end + 19 <= n {
        let reclen = u16::from_ne_bytes([bounce[end + 16], bounce[end + 17]]) as usize;
        if reclen == 0 || end + reclen > reached {
            break;
        }
        next = u64::from_ne_bytes(bounce[end + 8..end + 16].try_into().unwrap_or_default());
        end += reclen;
    }
    d.cookie().store(next, Ordering::Relaxed);
    if end == 0 {
        return err(libc::EFAULT);
    }
    done(end as i64)
}

pub(super) fn getdents_concerns(_: &Client, _: i64, _: &[u64; 6]) -> bool {
    // Every listing: a host one may be of the mount's parent, whose end
    // shows the mount (`mountentry`).
    true
}

pub(super) fn chdir(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    let p = sys::user_path(a[0])?;
    if p.is_empty() {
        return Ok(Out::Host);
    }
    if c.cwd().is_none() && !walk::concerns(c, AT_FDCWD as i64, p) {
        return Ok(Out::Host);
    }
    let lane = c.lane()?;
    ns::chdir(c, &lane, p)
}

pub(super) fn fchdir(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    ns::fchdir(c, fdarg(a[0]))
}

/// `fchdir`: to an atoll directory, or away from the mount.
pub(super) fn fchdir_concerns(c: &Client, _: i64, a: &[u64; 6]) -> bool {
    fdtable::is_atoll(fdarg(a[0])) || c.cwd().is_some()
}

pub(super) fn getcwd(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    ns::getcwd(c, a[0], a[1])
}

/// `getcwd`, and `chdir` out of the mount: while the cwd is in atoll.
pub(super) fn in_atoll_cwd(c: &Client, _: i64, _: &[u64; 6]) -> bool {
    c.cwd().is_some()
}
