//! What the handlers share: find what a path or descriptor argument
//! names and run a closure on it with a lane, or answer `Host`; build the
//! replies of the stat and setattr families; run a call whose path left
//! atoll on Linux with the rewritten path.
//!
//! Every function here is on the path of the calls that use it (hot): the
//! cheap "is it atoll's?" check comes before a lane is taken, and nothing
//! allocates.

use atoll_proto::{SetAttr, TimeSet};

use super::{Dir, PathArg};
use crate::error::{err, Error, Result};
use crate::meta::{self, Target};
use crate::path::PathBuf;
use crate::session::{self, Client};
use crate::{
    exec, fdtable, incoherent, inotify, intr, pastend, pipefifo, procfd, proclink, procmounts, sys,
    walk, Out,
};

/// Does the path argument at `ptr` (relative to `dirfd`) concern atoll?
pub(crate) fn path_concerns(c: &Client, dirfd: i64, ptr: u64) -> bool {
    match sys::user_path(ptr) {
        Ok([]) => fdtable::is_atoll(dirfd) || (dirfd == libc::AT_FDCWD as i64 && c.cwd().is_some()),
        Ok(p) => {
            walk::concerns(c, dirfd, p)
                || names_atoll_fd(p)
                || (p.starts_with(b"/proc/") && proclink::through(c, p, true).is_some())
        }
        Err(libc::ENAMETOOLONG) => true,
        Err(_) => ptr == 0 && fdtable::is_atoll(dirfd),
    }
}

/// `/dev/fd/N`, `/proc/self/fd/N`, `/dev/stderr`, … of an atoll
/// descriptor: outside the mount, but opening it reopens an atoll file
/// (see `fdpath`).
pub(crate) fn names_atoll_fd(path: &[u8]) -> bool {
    path.first() == Some(&b'/') && pipefifo::fd_path(path).is_some_and(fdtable::is_atoll)
}

/// `/proc/self/mounts` and its relatives (see `procmounts`), or the
/// process's own fd directory (see `procfd`).
pub(crate) fn names_proc_table(ptr: u64) -> bool {
    sys::user_path(ptr).is_ok_and(|p| {
        procmounts::names_table(p).is_some()
            || procfd::names_fd_dir(p)
            || procfd::other_fd_dir(p).is_some()
    })
}

/// `/proc/self/exe` of an image started from the mount (see
/// `exec::readlink_self_exe`), or a cwd or descriptor link of `/proc`
/// that atoll answers (`proclink`).
pub(crate) fn names_proc_link(c: &Client, ptr: u64) -> bool {
    sys::user_path(ptr).is_ok_and(|p| {
        (exec::started_from_atoll() && exec::is_self_exe(p)) || proclink::answers(c, p)
    })
}

/// A descriptor argument: the low 32 bits, sign-extended, as Linux reads an
/// `int`.
pub(crate) fn fdarg(v: u64) -> i64 {
    v as i32 as i64
}

/// Run a path call on Linux with the path rewritten (it left atoll): the
/// path argument its row names (`Concerns::path`; a call naming two, such
/// as `rename`, rewrites its own), relative to the cwd.
pub(crate) fn rehost(nr: i64, a: &[u64; 6], p: &PathBuf) -> i64 {
    use libc::AT_FDCWD;
    let (pi, di) = rehosted_args(nr);
    let mut b = *a;
    b[pi] = p.as_ptr() as u64;
    if let Some(d) = di {
        b[d] = AT_FDCWD as u64;
    }
    // SAFETY: the program's own call with its path argument replaced by
    // our NUL-terminated buffer, which outlives the call. It may block (a
    // host FIFO): restarted for SA_RESTART handlers (see `intr`).
    unsafe { intr::restartable_host_syscall6(nr, b) }
}

/// Which argument of call `nr` a rewritten path replaces, and which dirfd
/// argument becomes `AT_FDCWD` with it.
fn rehosted_args(nr: i64) -> (usize, Option<usize>) {
    match super::lookup(nr).and_then(|call| call.concerns.path()) {
        Some(PathArg {
            dir: Dir::Arg(d),
            path,
        }) => (path as usize, Some(d as usize)),
        Some(PathArg {
            dir: Dir::Cwd,
            path,
        }) => (path as usize, None),
        None => (0, None),
    }
}

pub(crate) fn done(v: i64) -> Result<Out> {
    Ok(Out::Done(v))
}

/// Resolve a path argument and run `f` on the node (or hand the call back
/// to Linux). Checks cheaply before taking a lane.
#[inline(never)]
pub(crate) fn on_node(
    c: &Client,
    dirfd: i64,
    ptr: u64,
    follow: bool,
    empty_ok: bool,
    f: impl Fn(&session::Lane, atoll_proto::InodeId, atoll_proto::FileType) -> Result<Out>,
) -> Result<Out> {
    on_entry(c, dirfd, ptr, follow, empty_ok, |l, ino, ft, _| {
        f(l, ino, ft)
    })
}

/// [`on_node`] for a change the directory of the entry the path named must
/// hear of (`inotify`): `f` also gets that entry.
pub(crate) fn on_entry(
    c: &Client,
    dirfd: i64,
    ptr: u64,
    follow: bool,
    empty_ok: bool,
    f: impl Fn(
        &session::Lane,
        atoll_proto::InodeId,
        atoll_proto::FileType,
        Option<&walk::Entry>,
    ) -> Result<Out>,
) -> Result<Out> {
    if !(path_concerns(c, dirfd, ptr) || (ptr == 0 && empty_ok && fdtable::is_atoll(dirfd))) {
        return Ok(Out::Host);
    }
    let lane = c.lane()?;
    // The name was resolved to an inode with one message and the operation
    // goes to the inode with another; a rename or unlink in between can free
    // that inode (ENOENT from its owner) although the *name* still exists,
    // naming a new inode. Walk again, as Linux's lookup would have seen the
    // new inode: a reader of a name replaced by rename never sees it missing.
    let mut stale_retries = 8;
    loop {
        let outcome = match meta::resolve(c, &lane, dirfd, ptr, follow, empty_ok)? {
            Target::Host => Ok(Out::Host),
            Target::Rehost(p) => Ok(Out::Rehost(p)),
            Target::Node { ino, ftype, entry } => f(&lane, ino, ftype, entry.as_ref()),
        };
        match outcome {
            Err(Error::Errno(libc::ENOENT)) if ptr != 0 && stale_retries > 0 => stale_retries -= 1,
            other => return other,
        }
    }
}

/// Run `f` with the description behind atoll fd `fd`, else hand to Linux.
#[inline(never)]
pub(crate) fn on_fd(
    c: &Client,
    fd: i64,
    f: impl FnOnce(&session::Lane, &fdtable::DescRef) -> Result<Out>,
) -> Result<Out> {
    let Some(d) = fdtable::get(fd) else {
        return Ok(Out::Host);
    };
    let lane = c.lane()?;
    f(&lane, &d)
}

#[inline(never)]
pub(crate) fn stat_out(
    c: &Client,
    lane: &session::Lane,
    ino: atoll_proto::InodeId,
    buf: u64,
) -> Result<Out> {
    let a = attr_now(c, lane, ino)?;
    let mut st = meta::to_stat(&a);
    if a.nlink == 0 && inotify::is_queue_inode(ino) {
        inotify::anon_stat(&mut st);
    }
    sys::put_user(buf, st)?;
    done(0)
}

/// What `GetAttr` answers for `ino` now: kept from the open just before
/// when nothing can have changed since (`openattr`), else asked.
fn attr_now(
    c: &Client,
    lane: &session::Lane,
    ino: atoll_proto::InodeId,
) -> Result<atoll_proto::Attr> {
    match crate::openattr::fresh(c, lane, ino) {
        Some(a) => Ok(a),
        None => meta::getattr(c, lane, ino),
    }
}

#[inline(never)]
pub(crate) fn statx_out(
    c: &Client,
    lane: &session::Lane,
    ino: atoll_proto::InodeId,
    buf: u64,
) -> Result<Out> {
    let a = attr_now(c, lane, ino)?;
    let mut x = meta::to_statx(&a);
    if a.nlink == 0 && inotify::is_queue_inode(ino) {
        inotify::anon_statx(&mut x);
    }
    sys::put_user(buf, x)?;
    done(0)
}

pub(crate) fn chown_set(u: u64, g: u64) -> SetAttr {
    let u = u as u32;
    let g = g as u32;
    SetAttr {
        uid: (u != u32::MAX).then_some(u),
        gid: (g != u32::MAX).then_some(g),
        ..SetAttr::NONE
    }
}

pub(crate) fn chmod_set(mode: u64) -> SetAttr {
    SetAttr {
        perm: Some(mode as u32 & 0o7777),
        ..SetAttr::NONE
    }
}

pub(crate) fn times_set((atime, mtime): (TimeSet, TimeSet)) -> SetAttr {
    SetAttr {
        atime,
        mtime,
        ..SetAttr::NONE
    }
}

pub(crate) fn setattr(
    c: &Client,
    lane: &session::Lane,
    ino: atoll_proto::InodeId,
    via: Option<&walk::Entry>,
    set: SetAttr,
) -> Result<Out> {
    if set.size.is_some() {
        // Truncation zeroes and frees blocks at the server (and the inode
        // reuses freed blocks first): private copies of them must go back
        // and be dropped first, or stale bytes reappear (incoherent mode).
        incoherent::invalidate(c);
    }
    meta::setattr(c, lane, ino, via, set)?;
    if let Some(size) = set.size {
        pastend::truncated(c, ino, size);
    }
    done(0)
}

/// A path-and-parent entry (mkdir, unlink, …): cheap check, then `f`.
#[inline(never)]
pub(crate) fn on_path(
    c: &Client,
    dirfd: i64,
    ptr: u64,
    f: impl FnOnce(&session::Lane, &[u8]) -> Result<Out>,
) -> Result<Out> {
    let path = sys::user_path(ptr)?;
    if path.is_empty() || !walk::concerns(c, dirfd, path) {
        return Ok(Out::Host);
    }
    let lane = c.lane()?;
    f(&lane, path)
}

/// Offset argument of pread-style calls: negative is `EINVAL`.
pub(crate) fn offset(v: u64) -> Result<u64> {
    if (v as i64) < 0 {
        return err(libc::EINVAL);
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::rehosted_args;
    use libc::*;

    #[test]
    fn a_path_leaving_atoll_goes_back_in_the_argument_each_call_names() {
        for nr in [
            SYS_openat,
            SYS_openat2,
            SYS_newfstatat,
            SYS_statx,
            SYS_faccessat,
            SYS_faccessat2,
            SYS_mkdirat,
            SYS_unlinkat,
            SYS_readlinkat,
            SYS_fchmodat,
            SYS_fchmodat2,
            SYS_fchownat,
            SYS_utimensat,
            SYS_futimesat,
            SYS_mknodat,
            SYS_name_to_handle_at,
        ] {
            assert_eq!(rehosted_args(nr), (1, Some(0)), "{nr}");
        }
        assert_eq!(rehosted_args(SYS_symlink), (1, None));
        assert_eq!(rehosted_args(SYS_inotify_add_watch), (1, None));
        assert_eq!(rehosted_args(SYS_fanotify_mark), (4, Some(3)));
        assert_eq!(rehosted_args(SYS_symlinkat), (2, Some(1)));
        for nr in [
            SYS_open,
            SYS_creat,
            SYS_stat,
            SYS_lstat,
            SYS_access,
            SYS_mkdir,
            SYS_unlink,
            SYS_readlink,
            SYS_chdir,
            SYS_getxattr,
            SYS_truncate,
            SYS_execve,
        ] {
            assert_eq!(rehosted_args(nr), (0, None), "{nr}");
        }
    }
}
