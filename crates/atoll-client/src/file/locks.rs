//! Record locks (`fcntl`'s `F_*LK*`) and `flock`: the server keeps every
//! lock and never blocks (a waiting `F_SETLKW` retries from here); the
//! client marks the inodes it asked locks of (`lockmarks`) so that a close
//! releases a process's record locks only where it may hold some.

use atoll_proto::{DescId, FileType, LockOwner, LockSpec, Reply, Request};

use super::{check_writable, lseek, size_of};
use crate::error::{err, Error, Result};
use crate::fdtable::DescRef;
use crate::session::{Client, Lane};
use crate::{sys, Out};

/// The pid a lock records (`F_GETLK` reports it): cached, not a
/// `getpid` per request.
fn pid() -> u32 {
    sys::self_pid() as u32
}

/// Release-all of this process's POSIX locks on an inode, as Linux does on
/// any close of a descriptor for it (the server expects an explicit
/// whole-file unlock with the process owner).
pub(super) fn drop_posix_locks(c: &Client, lane: &Lane, d: &DescRef) {
    if d.ftype() != FileType::Regular || !c.lock_marks.may_hold_posix(d.ino()) {
        return;
    }
    let desc = d.desc();
    let lock = LockSpec {
        kind: libc::F_UNLCK as i16,
        start: 0,
        len: 0,
        owner: LockOwner::Process(c.session_id().0),
        pid: pid(),
    };
    let _ = lane.call(
        c,
        desc.server(),
        Request::SetLock { desc, lock },
        |_| Ok(()),
    );
}

/// Build the absolute lock range of a `struct flock`.
fn lock_range(c: &Client, lane: &Lane, d: &DescRef, fl: &libc::flock) -> Result<(u64, u64)> {
    let base: i64 = match fl.l_whence as i32 {
        libc::SEEK_SET => 0,
        libc::SEEK_CUR => lseek(c, lane, d, 0, libc::SEEK_CUR as u32)?,
        libc::SEEK_END => size_of(c, lane, d.ino())? as i64,
        _ => return err(libc::EINVAL),
    };
    let mut start = base
        .checked_add(fl.l_start)
        .ok_or(Error::Errno(libc::EOVERFLOW))?;
    let mut len = fl.l_len;
    if len < 0 {
        start += len;
        len = -len;
    }
    if start < 0 {
        return err(libc::EINVAL);
    }
    Ok((start as u64, len as u64))
}

/// Take or release a lock (`set_lock_wait`). Locks are also synchronisation
/// points of the incoherent emulation (`incoherent`), as NFS makes them:
/// what was written goes back to the shared cache before a lock changes,
/// and a lock taken drops the private copies, so its holder reads what the
/// last holder wrote. Programs that share a file they keep open, and order
/// their accesses by locks (sqlite's rollback journal), need no close.
fn set_lock(c: &Client, lane: &Lane, d: &DescRef, lock: LockSpec, wait: bool) -> Result<()> {
    let desc = d.desc();
    // Marked before the request goes out: a close racing with it on
    // another thread must not skip the release (`lockmarks`).
    c.lock_marks
        .mark(d.ino(), matches!(lock.owner, LockOwner::Process(_)));
    crate::incoherent::write_back(c);
    set_lock_wait(c, lane, desc, lock, wait)?;
    if lock.kind != libc::F_UNLCK as i16 {
        crate::incoherent::invalidate(c);
    }
    Ok(())
}

/// Retry a lock request that answers `EAGAIN` (`F_SETLKW`, blocking
/// `flock`): the server never blocks, so the client waits.
fn set_lock_wait(c: &Client, lane: &Lane, desc: DescId, lock: LockSpec, wait: bool) -> Result<()> {
    let mut backoff = 1_000_000u64;
    loop {
        match lane.call_ok(c, desc.server(), Request::SetLock { desc, lock }) {
            Err(Error::Errno(e)) if wait && e == libc::EAGAIN => {
                sys::sleep_ns(backoff);
                backoff = (backoff * 2).min(50_000_000);
                // Nothing is held between attempts: unwind for a deferred
                // program signal (restarted for SA_RESTART, as Linux).
                if crate::intr::pending() {
                    return err(crate::intr::ERESTARTSYS);
                }
            }
            r => return r,
        }
    }
}

/// `fcntl`'s record locks (`F_GETLK`, `F_SETLK`, `F_SETLKW` and their
/// open-description forms).
pub(super) fn record_lock(c: &Client, lane: &Lane, d: &DescRef, cmd: i32, arg: u64) -> Result<Out> {
    let ofd = matches!(
        cmd,
        libc::F_OFD_GETLK | libc::F_OFD_SETLK | libc::F_OFD_SETLKW
    );
    let mut fl: libc::flock = sys::get_user(arg)?;
    if ofd && fl.l_pid != 0 {
        return err(libc::EINVAL);
    }
    if d.ftype() == FileType::Directory && fl.l_type as i32 != libc::F_UNLCK {
        // Linux allows read locks on directories opened read-only.
    }
    let owner = if ofd {
        LockOwner::Description(d.desc())
    } else {
        LockOwner::Process(c.session_id().0)
    };
    let (start, len) = lock_range(c, lane, d, &fl)?;
    let lock = LockSpec {
        kind: fl.l_type,
        start,
        len,
        owner,
        pid: pid(),
    };
    let desc = d.desc();
    if matches!(cmd, libc::F_GETLK | libc::F_OFD_GETLK) {
        if !matches!(fl.l_type as i32, libc::F_RDLCK | libc::F_WRLCK) {
            return err(libc::EINVAL);
        }
        let got = lane.call(
            c,
            desc.server(),
            Request::GetLock { desc, lock },
            |r| match r {
                Reply::Lock(l) => Ok(l),
                _ => Err(Error::Protocol("GetLock")),
            },
        )?;
        match got {
            None => fl.l_type = libc::F_UNLCK as i16,
            Some(l) => {
                fl.l_type = l.kind;
                fl.l_whence = libc::SEEK_SET as i16;
                fl.l_start = l.start as i64;
                fl.l_len = l.len as i64;
                fl.l_pid = match l.owner {
                    LockOwner::Process(_) => l.pid as i32,
                    _ => -1,
                };
            }
        }
        sys::put_user(arg, fl)?;
        return Ok(Out::Done(0));
    }
    match fl.l_type as i32 {
        libc::F_RDLCK => check_readable_lock(d)?,
        libc::F_WRLCK => check_writable(d)?,
        libc::F_UNLCK => {}
        _ => return err(libc::EINVAL),
    }
    if !ofd {
        c.posix_locks
            .store(true, core::sync::atomic::Ordering::Relaxed);
    }
    let wait = matches!(cmd, libc::F_SETLKW | libc::F_OFD_SETLKW);
    set_lock(c, lane, d, lock, wait)?;
    Ok(Out::Done(0))
}

fn check_readable_lock(d: &DescRef) -> Result<()> {
    let f = d.flags();
    if f & libc::O_PATH as u32 != 0 || f & libc::O_ACCMODE as u32 == libc::O_WRONLY as u32 {
        return err(libc::EBADF);
    }
    Ok(())
}

/// `flock(fd, op)`: whole-file locks owned by the description.
pub fn flock(c: &Client, lane: &Lane, d: &DescRef, op: i32) -> Result<i64> {
    let kind = match op & !libc::LOCK_NB {
        libc::LOCK_SH => libc::F_RDLCK,
        libc::LOCK_EX => libc::F_WRLCK,
        libc::LOCK_UN => libc::F_UNLCK,
        _ => return err(libc::EINVAL),
    };
    if d.flags() & libc::O_PATH as u32 != 0 {
        return err(libc::EBADF);
    }
    let desc = d.desc();
    let lock = LockSpec {
        kind: kind as i16,
        start: 0,
        len: 0,
        owner: LockOwner::Flock(desc),
        pid: pid(),
    };
    set_lock(c, lane, d, lock, op & libc::LOCK_NB == 0)?;
    Ok(0)
}
