//! Names: `mkdir`, `rmdir`, `unlink`, `rename`, `link`, `symlink`,
//! `readlink`, `mknod` and their `*at` forms.
//!
//! Calls that change an entry resolve the parent and send one request to
//! the entry's server (`ns`); a rename across servers is the client's
//! protocol (Hare §3.7.5).

use libc::{SYS_readlink, AT_FDCWD, EINVAL};

use super::common::{fdarg, names_proc_link, on_path, path_concerns};
use crate::error::{err, Result};
use crate::session::Client;
use crate::{exec, ns, proclink, sys, Out};

const CWD: i64 = AT_FDCWD as i64;

pub(super) fn mkdir(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    on_path(c, CWD, a[0], |l, p| ns::mkdir(c, l, CWD, p, a[1] as u32))
}

pub(super) fn mkdirat(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    let fd0 = fdarg(a[0]);
    on_path(c, fd0, a[1], |l, p| ns::mkdir(c, l, fd0, p, a[2] as u32))
}

pub(super) fn rmdir(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    on_path(c, CWD, a[0], |l, p| ns::rmdir(c, l, p))
}

pub(super) fn unlink(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    on_path(c, CWD, a[0], |l, p| ns::unlink(c, l, CWD, p, 0))
}

pub(super) fn unlinkat(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    let fd0 = fdarg(a[0]);
    on_path(c, fd0, a[1], |l, p| ns::unlink(c, l, fd0, p, a[2] as i32))
}

/// `rename`, `renameat`, `renameat2`.
pub(super) fn rename(c: &'static Client, nr: i64, a: &[u64; 6]) -> Result<Out> {
    let fd0 = fdarg(a[0]);
    let (d1, p1, d2, p2, fl) = match nr {
        libc::SYS_rename => (CWD, a[0], CWD, a[1], 0),
        libc::SYS_renameat => (fd0, a[1], fdarg(a[2]), a[3], 0),
        _ => (fd0, a[1], fdarg(a[2]), a[3], a[4] as u32),
    };
    if !path_concerns(c, d1, p1) && !path_concerns(c, d2, p2) {
        return Ok(Out::Host);
    }
    let lane = c.lane()?;
    ns::rename(c, &lane, d1, p1, d2, p2, fl)
}

/// `link`, `linkat`.
pub(super) fn link(c: &'static Client, nr: i64, a: &[u64; 6]) -> Result<Out> {
    let (d1, p1, d2, p2, fl) = match nr {
        libc::SYS_link => (CWD, a[0], CWD, a[1], 0),
        _ => (fdarg(a[0]), a[1], fdarg(a[2]), a[3], a[4] as i32),
    };
    if !path_concerns(c, d1, p1) && !path_concerns(c, d2, p2) {
        return Ok(Out::Host);
    }
    let lane = c.lane()?;
    ns::link(c, &lane, d1, p1, d2, p2, fl)
}

pub(super) fn symlink(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    on_path(c, CWD, a[1], |l, p| {
        let t = sys::user_path(a[0])?;
        ns::symlink(c, l, t, CWD, p)
    })
}

pub(super) fn symlinkat(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    let d = fdarg(a[1]);
    on_path(c, d, a[2], |l, p| {
        let t = sys::user_path(a[0])?;
        ns::symlink(c, l, t, d, p)
    })
}

/// `readlink`, `readlinkat`: also `/proc/self/exe` of an image started
/// from the mount, and the `/proc` links atoll answers (`proclink`).
pub(super) fn readlink(c: &'static Client, nr: i64, a: &[u64; 6]) -> Result<Out> {
    let (d, p, buf, size) = if nr == SYS_readlink {
        (CWD, a[0], a[1], a[2] as i64)
    } else {
        (fdarg(a[0]), a[1], a[2], a[3] as i64)
    };
    if let Some(r) = sys::user_path(p)
        .ok()
        .and_then(|path| exec::readlink_self_exe(path, buf, size))
    {
        return r;
    }
    if let Some(t) = sys::user_path(p)
        .ok()
        .and_then(|path| proclink::link(c, path))
    {
        if size <= 0 {
            return err(EINVAL);
        }
        let n = t.len().min(size as usize);
        sys::copy_to_user(buf, &t[..n])?;
        return Ok(Out::Done(n as i64));
    }
    if !path_concerns(c, d, p) {
        return Ok(Out::Host);
    }
    let lane = c.lane()?;
    ns::readlink(c, &lane, d, p, buf, size)
}

/// `readlink` of a `/proc` link atoll answers (besides its path).
pub(super) fn readlink_concerns(c: &Client, _: i64, a: &[u64; 6]) -> bool {
    names_proc_link(c, a[0])
}

/// `readlinkat`: as `readlink`'s.
pub(super) fn readlinkat_concerns(c: &Client, _: i64, a: &[u64; 6]) -> bool {
    names_proc_link(c, a[1])
}

pub(super) fn mknod(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    on_path(c, CWD, a[0], |l, p| {
        ns::mknod(c, l, CWD, p, a[1] as u32, a[2])
    })
}

pub(super) fn mknodat(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    let fd0 = fdarg(a[0]);
    on_path(c, fd0, a[1], |l, p| {
        ns::mknod(c, l, fd0, p, a[2] as u32, a[3])
    })
}
