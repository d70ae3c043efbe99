//! Directories: `getdents`, `getdents64`, and the current directory
//! (`chdir`, `fchdir`, `getcwd`).
//!
//! While the cwd is in atoll the kernel's cwd is a removed directory (see
//! `ns`), so every relative path and `getcwd` is atoll's to answer.

use libc::{SYS_getdents64, AT_FDCWD};

use super::common::{done, fdarg, on_fd};
use crate::error::Result;
use crate::session::Client;
use crate::{fdtable, ns, procfd, sys, walk, Out};

/// `getdents` and `getdents64`: of an atoll directory, or of a listing of
/// `/proc/self/fd` that must not show atoll's private descriptors.
pub(super) fn getdents(c: &'static Client, nr: i64, a: &[u64; 6]) -> Result<Out> {
    let fd0 = fdarg(a[0]);
    if procfd::is_listing(fd0) {
        return done(procfd::getdents(c, nr, a));
    }
    on_fd(c, fd0, |l, d| {
        let buf = sys::user_slice_mut(a[1], a[2] as usize)?;
        if nr == SYS_getdents64 {
            done(ns::getdents64(c, l, d, buf)?)
        } else {
            done(ns::getdents(c, l, d, buf)?)
        }
    })
}

pub(super) fn getdents_concerns(_: &Client, _: i64, a: &[u64; 6]) -> bool {
    let fd0 = fdarg(a[0]);
    fdtable::is_atoll(fd0) || procfd::is_listing(fd0)
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
