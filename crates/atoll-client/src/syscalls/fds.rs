//! Descriptors: `close`, `close_range`, `dup`, `dup2`, `dup3`, `fcntl`,
//! `flock`, `ioctl`.
//!
//! An atoll descriptor is a duplicate of the placeholder memfd (see
//! `fdtable`), so the kernel numbers it and `dup` on Linux gives the new
//! number; atoll then points it at the same open description. atoll's
//! private descriptors (session socket, template, buffer cache, published
//! table) answer `EBADF` as if they were not there.

use libc::{EBADF, EINVAL, F_DUPFD, O_CLOEXEC};

use super::common::{done, fdarg, on_fd};
use crate::error::{err, Result};
use crate::session::Client;
use crate::{fdtable, file, procfd, sys, Out};

pub(super) fn close(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    let fd0 = fdarg(a[0]);
    if c.is_private_fd(fd0 as i32) {
        return err(EBADF);
    }
    procfd::mark(fd0, false);
    if !fdtable::is_atoll(fd0) {
        return Ok(Out::Host);
    }
    let Ok(lane) = c.lane() else {
        return done(forget(fd0)?);
    };
    let d = file::close_keeping(c, &lane, fd0)?;
    drop(lane);
    drop(d);
    done(0)
}

/// `close` of an atoll descriptor without a lane: the instance is gone (a
/// process that outlived it) or refuses this process a new lane. Linux's
/// `close` always frees the number, and a pipe's never fails (coreutils
/// report a failed `close` of stdout as a write error), so the number is
/// freed and the call succeeds; the servers, if any, release what the
/// description held when this session ends.
fn forget(fd: i64) -> Result<i64> {
    let Some(d) = fdtable::remove(fd) else {
        return err(EBADF);
    };
    sys::close(fd as i32);
    drop(d);
    Ok(0)
}

/// `close`: an atoll or private descriptor, or a listing of `/proc/self/fd`
/// (`procfd`) whose mark must go.
pub(super) fn close_concerns(c: &Client, _: i64, a: &[u64; 6]) -> bool {
    let fd0 = fdarg(a[0]);
    fdtable::is_atoll(fd0) || c.is_private_fd(a[0] as i32) || procfd::is_listing(fd0)
}

pub(super) fn close_range(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    close_range_of(c, a[0], a[1], a[2])
}

/// `dup` (a private descriptor was refused before: `Concerns::OnFd`).
pub(super) fn dup(_: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    let fd0 = fdarg(a[0]);
    let Some(d) = fdtable::get(fd0) else {
        return Ok(Out::Host);
    };
    let r = sys::fcntl_int(fd0 as i32, F_DUPFD, 0);
    if r >= 0 {
        file::after_dup(r, &d);
    }
    done(r)
}

pub(super) fn dup2(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    done(file::dup3(c, fdarg(a[0]), fdarg(a[1]), 0, true)?)
}

pub(super) fn dup3(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    if a[2] as i32 & !O_CLOEXEC != 0 {
        return err(EINVAL);
    }
    done(file::dup3(c, fdarg(a[0]), fdarg(a[1]), a[2] as i32, false)?)
}

/// `dup2`, `dup3`: either descriptor is atoll's (the new one is closed
/// first), or the new one is private.
pub(super) fn dup2_concerns(c: &Client, _: i64, a: &[u64; 6]) -> bool {
    fdtable::is_atoll(fdarg(a[0])) || fdtable::is_atoll(fdarg(a[1])) || c.is_private_fd(a[1] as i32)
}

pub(super) fn fcntl(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    let fd0 = fdarg(a[0]);
    on_fd(c, fd0, |l, d| file::fcntl(c, l, fd0, d, a[1] as i32, a[2]))
}

pub(super) fn flock(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    on_fd(c, fdarg(a[0]), |l, d| {
        done(file::flock(c, l, d, a[1] as i32)?)
    })
}

pub(super) fn ioctl(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    on_fd(c, fdarg(a[0]), |l, d| file::ioctl(c, l, d, a[1], a[2]))
}

/// `close_range(first, last, flags)`: never touches private fds, and drops
/// atoll fds from the table.
#[inline(never)]
fn close_range_of(c: &Client, first: u64, last: u64, flags: u64) -> Result<Out> {
    if first > last {
        return err(libc::EINVAL);
    }
    let (first, last) = (
        first.min(u32::MAX as u64) as u32,
        last.min(u32::MAX as u64) as u32,
    );
    let mut private: Vec<u32> = c
        .private_fds()
        .into_iter()
        .filter(|&f| f >= 0 && (first..=last).contains(&(f as u32)))
        .map(|f| f as u32)
        .collect();
    private.sort_unstable();
    let cloexec = flags & libc::CLOSE_RANGE_CLOEXEC as u64 != 0;
    if !cloexec {
        // The references are dropped once the lane is let go: their
        // closers then post on it rather than take a second lane
        // (`file::close_keeping`).
        let mut closed = Vec::new();
        let lane = c.lane().ok();
        for fd in fdtable::fds() {
            if (first..=last).contains(&(fd as u32)) {
                match &lane {
                    Some(lane) => closed.extend(file::close_keeping(c, lane, fd as i64).ok()),
                    None => {
                        let _ = forget(fd as i64);
                    }
                }
            }
        }
        drop(lane);
        drop(closed);
    }
    let mut lo = first;
    for p in private.iter().copied().chain(core::iter::once(u32::MAX)) {
        let hi = if p == u32::MAX {
            last
        } else {
            p.wrapping_sub(1)
        };
        if p != lo && lo <= hi && (p == u32::MAX || p > lo) {
            // SAFETY: integer arguments only.
            let r = unsafe { sys::sc(libc::SYS_close_range, lo as u64, hi as u64, flags, 0) };
            if r < 0 {
                return done(r);
            }
        }
        if p == u32::MAX {
            break;
        }
        lo = p + 1;
        if lo > last || lo == 0 {
            break;
        }
    }
    done(0)
}
