//! Opening files: `open`, `creat`, `openat`, `openat2`.
//!
//! Before the walk, an open may name something atoll answers outside the
//! mount: `/proc/self/mounts` and its relatives (`procmounts`), the
//! process's own fd directory or another's (`procfd`), or `/dev/fd/N` of
//! an atoll descriptor or pipe (`fdpath`, `pipefifo::reopen`), which reopens
//! it as Linux's magic links do.

use libc::{AT_FDCWD, EAGAIN, EINVAL, O_CREAT, O_TMPFILE, O_TRUNC, O_WRONLY};

use super::common::{fdarg, names_proc_table};
use crate::error::{err, Result};
use crate::session::Client;
use crate::{fdpath, fdpub, fdtable, file, pipefifo, procfd, procmounts, sys, walk, Out};

const CWD: i64 = AT_FDCWD as i64;

pub(super) fn open(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    open_at(c, CWD, a[0], a[1] as u32, a[2] as u32)
}

pub(super) fn creat(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    open_at(
        c,
        CWD,
        a[0],
        (O_CREAT | O_WRONLY | O_TRUNC) as u32,
        a[1] as u32,
    )
}

pub(super) fn openat(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    open_at(c, fdarg(a[0]), a[1], a[2] as u32, a[3] as u32)
}

pub(super) fn openat2(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    if (a[3] as usize) < core::mem::size_of::<libc::open_how>() {
        return err(EINVAL);
    }
    let how: libc::open_how = sys::get_user(a[2])?;
    // Linux's build_open_how/copy_struct_from_user: unknown bits
    // and a mode without a creating flag are EINVAL.
    let creating = how.flags & (O_CREAT | O_TMPFILE) as u64 != 0;
    if how.flags > u32::MAX as u64
        || how.resolve & !walk::RESOLVE_ALL != 0
        || how.mode & !0o7777 != 0
        || (!creating && how.mode != 0)
        || how.resolve & (walk::RESOLVE_BENEATH | walk::RESOLVE_IN_ROOT)
            == (walk::RESOLVE_BENEATH | walk::RESOLVE_IN_ROOT)
    {
        return err(EINVAL);
    }
    if how.resolve & walk::RESOLVE_CACHED != 0 {
        // Linux answers EAGAIN when the lookup needs more than its
        // caches; atoll's lookups are messages, so always.
        return err(EAGAIN);
    }
    open_resolved(
        c,
        fdarg(a[0]),
        a[1],
        how.flags as u32,
        how.mode as u32,
        how.resolve,
    )
}

/// `open` of a `/proc` table atoll answers (besides its path).
pub(super) fn open_concerns(_: &Client, _: i64, a: &[u64; 6]) -> bool {
    names_proc_table(a[0])
}

/// `openat`: as `open`'s.
pub(super) fn openat_concerns(_: &Client, _: i64, a: &[u64; 6]) -> bool {
    names_proc_table(a[1])
}

/// `openat2` on an atoll dirfd: `RESOLVE_IN_ROOT` starts even an absolute
/// path there.
pub(super) fn openat2_concerns(_: &Client, _: i64, a: &[u64; 6]) -> bool {
    fdtable::is_atoll(fdarg(a[0]))
}

/// Open-style entry: cheap check, then the walk.
#[inline(never)]
pub(crate) fn open_at(c: &Client, dirfd: i64, ptr: u64, flags: u32, mode: u32) -> Result<Out> {
    open_resolved(c, dirfd, ptr, flags, mode, 0)
}

/// `open_at` under `openat2`'s `RESOLVE_*` flags.
fn open_resolved(
    c: &Client,
    dirfd: i64,
    ptr: u64,
    flags: u32,
    mode: u32,
    resolve: u64,
) -> Result<Out> {
    let path = sys::user_path(ptr)?;
    if let Some(o) = procmounts::open(c, path, flags)? {
        return Ok(o);
    }
    if resolve == 0 && procfd::names_fd_dir(path) {
        // SAFETY: the program's own path (checked) and flags.
        let r = unsafe {
            sys::sc(
                libc::SYS_openat,
                libc::AT_FDCWD as i64 as u64,
                ptr,
                flags as u64,
                mode as u64,
            )
        };
        procfd::mark(r, r >= 0);
        return Ok(Out::Done(r));
    }
    if resolve == 0 {
        if let Some(pid) = procfd::other_fd_dir(path) {
            // Another process's descriptors: without atoll's own, when it
            // is a process of the instance (its table says which).
            // SAFETY: the program's own path (checked) and flags.
            let r = unsafe {
                sys::sc(
                    libc::SYS_openat,
                    libc::AT_FDCWD as i64 as u64,
                    ptr,
                    flags as u64,
                    mode as u64,
                )
            };
            procfd::mark(r, false);
            if let Some(list) = (r >= 0).then(|| fdpub::private_of(pid)).flatten() {
                procfd::mark_other(r, &list);
            }
            return Ok(Out::Done(r));
        }
    }
    if path.first() == Some(&b'/') && resolve & walk::RESOLVE_NO_MAGICLINKS == 0 {
        if let Some(o) = pipefifo::reopen(c, path, flags)? {
            return Ok(o);
        }
        if let Some(o) = fdpath::reopen(c, path, flags)? {
            return Ok(o);
        }
    }
    // Under IN_ROOT an absolute path starts at `dirfd`, not at `/`.
    let rooted = resolve & walk::RESOLVE_IN_ROOT != 0 && path.first() == Some(&b'/');
    let concerns = if rooted {
        walk::concerns(c, dirfd, b".")
    } else {
        walk::concerns(c, dirfd, path)
    };
    if path.is_empty() || !concerns {
        return Ok(Out::Host);
    }
    let lane = c.lane()?;
    file::open(c, &lane, dirfd, path, flags, mode, resolve)
}
