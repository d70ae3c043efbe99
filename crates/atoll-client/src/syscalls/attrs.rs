//! Attributes: the stat family, `access`, `chmod`/`chown` and their
//! forms, `truncate`, the time setters, `statfs`.
//!
//! Path forms resolve the name to an inode, then ask (or tell) the inode's
//! owner (`on_node`, `on_entry`: the latter also passes the entry, whose
//! directory hears of the change for `inotify`).

use atoll_proto::{FileType, Request, SetAttr};
use libc::{
    SYS_fchmodat2, AT_EACCESS, AT_EMPTY_PATH, AT_FDCWD, AT_SYMLINK_NOFOLLOW, EBADF, EINVAL, EISDIR,
    EOPNOTSUPP, O_ACCMODE, O_PATH, O_RDONLY,
};

use super::common::{
    chmod_set, chown_set, done, fdarg, on_entry, on_fd, on_node, setattr, stat_out, statx_out,
    times_set,
};
use crate::error::{err, Error, Result};
use crate::session::Client;
use crate::{creds, meta, sys, Out};

const CWD: i64 = AT_FDCWD as i64;

/// `(follow, empty_ok)` of an `*at` call's flags.
fn at_flags(fl: i32) -> (bool, bool) {
    (fl & AT_SYMLINK_NOFOLLOW == 0, fl & AT_EMPTY_PATH != 0)
}

pub(super) fn stat(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    on_node(c, CWD, a[0], true, false, |l, ino, _| {
        stat_out(c, l, ino, a[1])
    })
}

pub(super) fn lstat(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    on_node(c, CWD, a[0], false, false, |l, ino, _| {
        stat_out(c, l, ino, a[1])
    })
}

pub(super) fn fstat(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    on_fd(c, fdarg(a[0]), |l, d| stat_out(c, l, d.ino(), a[1]))
}

pub(super) fn newfstatat(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    let (follow, empty_ok) = at_flags(a[3] as i32);
    on_node(c, fdarg(a[0]), a[1], follow, empty_ok, |l, ino, _| {
        stat_out(c, l, ino, a[2])
    })
}

pub(super) fn statx(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    let (follow, empty_ok) = at_flags(a[2] as i32);
    on_node(c, fdarg(a[0]), a[1], follow, empty_ok, |l, ino, _| {
        statx_out(c, l, ino, a[4])
    })
}

/// `access`, `faccessat`, `faccessat2`.
pub(super) fn access(c: &'static Client, nr: i64, a: &[u64; 6]) -> Result<Out> {
    let fd0 = fdarg(a[0]);
    let (dirfd, ptr, mode, fl) = match nr {
        libc::SYS_access => (CWD, a[0], a[1], 0),
        libc::SYS_faccessat => (fd0, a[1], a[2], 0),
        _ => (fd0, a[1], a[2], a[3] as i32),
    };
    if mode & !7 != 0 || fl & !(AT_EACCESS | AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH) != 0 {
        return err(EINVAL);
    }
    let (follow, empty_ok) = at_flags(fl);
    on_node(c, dirfd, ptr, follow, empty_ok, |l, ino, _| {
        if mode == 0 {
            return done(0);
        }
        let cred = if fl & AT_EACCESS != 0 {
            c.cred()
        } else {
            creds::access_cred(c)
        };
        l.call_cred(
            c,
            cred,
            ino.owner(),
            Request::Access {
                ino,
                mask: mode as u32,
            },
            |r| match r {
                atoll_proto::Reply::Ok => Ok(()),
                _ => Err(Error::Protocol("Access")),
            },
        )?;
        done(0)
    })
}

pub(super) fn chmod(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    on_entry(c, CWD, a[0], true, false, |l, ino, _, via| {
        setattr(c, l, ino, via, chmod_set(a[1]))
    })
}

pub(super) fn fchmod(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    on_fd(c, fdarg(a[0]), |l, d| {
        crate::postattr::setattr_fd(c, l, d, chmod_set(a[1]))?;
        done(0)
    })
}

/// `fchmodat` and `fchmodat2` (only the latter has flags).
pub(super) fn fchmodat(c: &'static Client, nr: i64, a: &[u64; 6]) -> Result<Out> {
    let fl = if nr == SYS_fchmodat2 { a[3] as i32 } else { 0 };
    if fl & !(AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH) != 0 {
        return err(EINVAL);
    }
    let (follow, empty_ok) = at_flags(fl);
    on_entry(c, fdarg(a[0]), a[1], follow, empty_ok, |l, ino, ft, via| {
        if ft == FileType::Symlink {
            return err(EOPNOTSUPP);
        }
        setattr(c, l, ino, via, chmod_set(a[2]))
    })
}

pub(super) fn chown(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    on_entry(c, CWD, a[0], true, false, |l, ino, _, via| {
        setattr(c, l, ino, via, chown_set(a[1], a[2]))
    })
}

pub(super) fn lchown(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    on_entry(c, CWD, a[0], false, false, |l, ino, _, via| {
        setattr(c, l, ino, via, chown_set(a[1], a[2]))
    })
}

pub(super) fn fchown(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    on_fd(c, fdarg(a[0]), |l, d| {
        crate::postattr::setattr_fd(c, l, d, chown_set(a[1], a[2]))?;
        done(0)
    })
}

pub(super) fn fchownat(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    let (follow, empty_ok) = at_flags(a[4] as i32);
    on_entry(c, fdarg(a[0]), a[1], follow, empty_ok, |l, ino, _, via| {
        setattr(c, l, ino, via, chown_set(a[2], a[3]))
    })
}

fn size_set(size: u64) -> SetAttr {
    SetAttr {
        size: Some(size),
        ..SetAttr::NONE
    }
}

pub(super) fn truncate(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    on_entry(c, CWD, a[0], true, false, |l, ino, ft, via| {
        if (a[1] as i64) < 0 {
            return err(EINVAL);
        }
        if ft == FileType::Directory {
            return err(EISDIR);
        }
        crate::fsize::check_growth(a[1], || crate::file::size_of(c, l, ino))?;
        setattr(c, l, ino, via, size_set(a[1]))
    })
}

pub(super) fn ftruncate(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    on_fd(c, fdarg(a[0]), |l, d| {
        if (a[1] as i64) < 0 || d.ftype() != FileType::Regular {
            return err(EINVAL);
        }
        let acc = d.flags() & O_ACCMODE as u32;
        if d.flags() & O_PATH as u32 != 0 {
            return err(EBADF);
        }
        if acc == O_RDONLY as u32 {
            return err(EINVAL);
        }
        crate::fsize::check_growth(a[1], || crate::file::size_of(c, l, d.ino()))?;
        setattr(c, l, d.ino(), None, size_set(a[1]))
    })
}

pub(super) fn utimensat(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    let fl = a[3] as i32;
    let times = meta::times_from_timespecs(a[2])?;
    if a[1] == 0 && fl == 0 && crate::fdtable::is_atoll(fdarg(a[0])) {
        // `futimens`: the descriptor itself.
        return on_fd(c, fdarg(a[0]), |l, d| {
            crate::postattr::setattr_fd(c, l, d, times_set(times))?;
            done(0)
        });
    }
    on_entry(
        c,
        fdarg(a[0]),
        a[1],
        fl & AT_SYMLINK_NOFOLLOW == 0,
        a[1] == 0 || fl & AT_EMPTY_PATH != 0,
        |l, ino, _, via| setattr(c, l, ino, via, times_set(times)),
    )
}

pub(super) fn futimesat(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    let times = meta::times_from_timevals(a[2])?;
    on_entry(c, fdarg(a[0]), a[1], true, a[1] == 0, |l, ino, _, via| {
        setattr(c, l, ino, via, times_set(times))
    })
}

pub(super) fn utimes(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    let times = meta::times_from_timevals(a[1])?;
    on_entry(c, CWD, a[0], true, false, |l, ino, _, via| {
        setattr(c, l, ino, via, times_set(times))
    })
}

pub(super) fn utime(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    let times = meta::times_from_utimbuf(a[1])?;
    on_entry(c, CWD, a[0], true, false, |l, ino, _, via| {
        setattr(c, l, ino, via, times_set(times))
    })
}

pub(super) fn statfs(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    on_node(c, CWD, a[0], true, false, |l, _, _| {
        sys::put_user(a[1], meta::statfs(c, l)?)?;
        done(0)
    })
}

pub(super) fn fstatfs(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    on_fd(c, fdarg(a[0]), |l, _| {
        sys::put_user(a[1], meta::statfs(c, l)?)?;
        done(0)
    })
}
