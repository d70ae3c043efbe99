//! File data: `read`, `write` and their positioned and vector forms,
//! `lseek`, the sync and advice calls, `fallocate`, and the copies
//! (`copy_file_range`, `splice`, `sendfile`).
//!
//! Reads and writes go through the buffer cache (`file`); a buffer the
//! program can only partly reach is handled by `partial` as Linux would
//! (the accessible part first).

use atoll_proto::Request;
use libc::{SYS_preadv2, SYS_read, SYS_write, EBADF, O_ACCMODE, O_RDONLY};

use super::common::{done, fdarg, offset, on_fd};
use crate::error::{err, Error, Result};
use crate::session::Client;
use crate::{copymap, fdtable, file, incoherent, inotify, partial, sys, Out};

/// `read` and `pread64`.
pub(super) fn read(c: &'static Client, nr: i64, a: &[u64; 6]) -> Result<Out> {
    on_fd(c, fdarg(a[0]), |l, d| {
        let off = if nr == SYS_read {
            None
        } else {
            Some(offset(a[3])?)
        };
        let (ptr, len) = (a[1], a[2] as usize);
        // Probe only what the reply grants (a short file into a large
        // buffer); a fault there is answered below, the careful way.
        if let Ok(buf) = sys::user_slice_mut_unchecked(ptr, len) {
            match file::read_where_copied(c, l, d, buf, off) {
                None | Some(Err(Error::Errno(libc::EFAULT))) => {}
                Some(r) => return done(r? as i64),
            }
        }
        match sys::user_slice_mut(ptr, len) {
            Ok(buf) => done(file::read_desc(c, l, d, buf, off)? as i64),
            Err(e) => partial::read(c, l, d, (ptr, len), off, e),
        }
    })
}

/// `write` and `pwrite64`.
pub(super) fn write(c: &'static Client, nr: i64, a: &[u64; 6]) -> Result<Out> {
    on_fd(c, fdarg(a[0]), |l, d| {
        let off = if nr == SYS_write {
            None
        } else {
            Some(offset(a[3])?)
        };
        let (ptr, len) = (a[1], a[2] as usize);
        match sys::user_slice(ptr, len) {
            Ok(buf) => done(file::write_desc(c, l, d, buf, off)? as i64),
            Err(e) => partial::write(c, l, d, (ptr, len), off, e),
        }
    })
}

pub(super) fn readv(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    on_fd(c, fdarg(a[0]), |l, d| {
        done(file::readv(c, l, d, a[1], a[2], None)?)
    })
}

pub(super) fn writev(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    on_fd(c, fdarg(a[0]), |l, d| {
        done(file::writev(c, l, d, a[1], a[2], None)?)
    })
}

pub(super) fn preadv(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    on_fd(c, fdarg(a[0]), |l, d| {
        done(file::readv(c, l, d, a[1], a[2], Some(offset(a[3])?))?)
    })
}

pub(super) fn pwritev(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    on_fd(c, fdarg(a[0]), |l, d| {
        done(file::writev(c, l, d, a[1], a[2], Some(offset(a[3])?))?)
    })
}

/// `preadv2` and `pwritev2`: offset -1 is the file offset.
pub(super) fn rwv2(c: &'static Client, nr: i64, a: &[u64; 6]) -> Result<Out> {
    on_fd(c, fdarg(a[0]), |l, d| {
        let off = if a[3] as i64 == -1 {
            None
        } else {
            Some(offset(a[3])?)
        };
        if nr == SYS_preadv2 {
            done(file::readv(c, l, d, a[1], a[2], off)?)
        } else {
            done(file::writev(c, l, d, a[1], a[2], off)?)
        }
    })
}

pub(super) fn lseek(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    on_fd(c, fdarg(a[0]), |l, d| {
        done(file::lseek(c, l, d, a[1] as i64, a[2] as u32)?)
    })
}

/// `fsync`, `fdatasync`, `syncfs`, `sync_file_range`, `fadvise64`,
/// `readahead`: coherent buffer cache, nothing to write back (Hare
/// §3.3.1); the incoherent emulation writes its private copies back, and
/// a copy island its mappings of the file.
pub(super) fn sync(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    if let Some(d) = fdtable::get(fdarg(a[0])) {
        incoherent::write_back(c);
        copymap::sync_inode(c, d.ino());
        done(0)
    } else {
        Ok(Out::Host)
    }
}

pub(super) fn fallocate(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    on_fd(c, fdarg(a[0]), |l, d| {
        if d.flags() & O_ACCMODE as u32 == O_RDONLY as u32 {
            return err(EBADF);
        }
        let ino = d.ino();
        // tmpfs checks the limit for every allocation, `FALLOC_FL_KEEP_SIZE`
        // too, but not for a punched hole (`shmem_fallocate`). A bad range
        // is `EINVAL` whatever the limit (`vfs_fallocate` checks it first):
        // left to the server.
        let (offset, len) = (a[2] as i64, a[3] as i64);
        if a[1] as i32 & libc::FALLOC_FL_PUNCH_HOLE == 0 && offset >= 0 && len > 0 {
            if let Some(end) = offset.checked_add(len) {
                crate::fsize::check_growth(end as u64, || file::size_of(c, l, ino))?;
            }
        }
        // Punching and zeroing change blocks at the server: as for
        // truncation, no private copy may outlive them.
        incoherent::invalidate(c);
        l.call(
            c,
            ino.owner(),
            Request::Fallocate {
                ino,
                mode: a[1] as u32,
                offset: a[2],
                len: a[3],
            },
            |_| Ok(()),
        )?;
        done(0)
    })
}

/// `copy_file_range` and `splice`: (in fd, in offset, out fd, out offset,
/// length).
pub(super) fn copy_range(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    let fd0 = fdarg(a[0]);
    if !fdtable::is_atoll(fd0) && !fdtable::is_atoll(fdarg(a[2])) {
        return Ok(Out::Host);
    }
    let lane = c.lane()?;
    let n = inotify::one_access(c, &lane, || {
        file::copy(c, &lane, fd0, a[1], fdarg(a[2]), a[3], a[4])
    })?;
    done(n)
}

/// `sendfile(out, in, offset, count)`.
pub(super) fn sendfile(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    let fd0 = fdarg(a[0]);
    if !fdtable::is_atoll(fd0) && !fdtable::is_atoll(fdarg(a[1])) {
        return Ok(Out::Host);
    }
    let lane = c.lane()?;
    let n = inotify::one_access(c, &lane, || {
        file::copy(c, &lane, fdarg(a[1]), a[2], fd0, 0, a[3])
    })?;
    done(n)
}
