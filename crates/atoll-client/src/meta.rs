//! Inode metadata: stat/statx, access, chmod/chown/truncate/utimens
//! (`SetAttr`, Hare's FSTAT and friends on the inode's owner server),
//! extended attributes and statfs.

use atoll_proto::{Attr, FileType, InodeId, Reply, Request, SetAttr, TimeSet, Timespec};

use crate::error::{err, Error, Result};
use crate::fdtable;
use crate::session::{Client, Lane};
use crate::sys;
use crate::walk::{Entry, NodeStep, Walker};
use crate::Out;

/// Device number every atoll inode reports (major 0, an unused high minor,
/// encoded as the kernel's `new_encode_dev`): one fixed device for the mount.
pub const ATOLL_DEV_MAJOR: u32 = 0;
pub const ATOLL_DEV_MINOR: u32 = 0xa7011;
pub const ATOLL_DEV: u64 = (ATOLL_DEV_MINOR as u64 & 0xff)
    | ((ATOLL_DEV_MAJOR as u64) << 8)
    | ((ATOLL_DEV_MINOR as u64 & !0xff) << 12);
/// `f_type` reported by statfs (tmpfs's magic: atoll is an in-memory fs).
pub const ATOLL_FS_MAGIC: i64 = 0x0102_1994;

/// What a path argument resolved to.
pub enum Target {
    /// Not atoll's: let Linux run the call unchanged.
    Host,
    /// Leaves atoll: run the call with this host path.
    Rehost(crate::walk::HostPath),
    Node {
        ino: InodeId,
        ftype: FileType,
        /// The entry the path named, when it ended on a name.
        entry: Option<crate::walk::Entry>,
    },
}

/// Resolve `(dirfd, path)`; `path_ptr == 0` or an empty path with
/// `empty_ok` (AT_EMPTY_PATH) names `dirfd` itself.
#[inline(never)]
pub fn resolve(
    c: &Client,
    lane: &Lane,
    dirfd: i64,
    path_ptr: u64,
    follow: bool,
    empty_ok: bool,
) -> Result<Target> {
    let path = if path_ptr == 0 {
        if !empty_ok {
            return err(libc::EFAULT);
        }
        &[][..]
    } else {
        sys::user_path(path_ptr)?
    };
    if path.is_empty() {
        if !empty_ok {
            // Linux answers ENOENT itself, for atoll's paths as for others.
            return Ok(Target::Host);
        }
        if dirfd == libc::AT_FDCWD as i64 {
            return match c.cwd() {
                Some(cwd) => Ok(Target::Node {
                    ino: cwd.ino,
                    ftype: FileType::Directory,
                    entry: None,
                }),
                None => Ok(Target::Host),
            };
        }
        return match fdtable::get(dirfd) {
            Some(d) => Ok(Target::Node {
                ino: d.ino(),
                ftype: d.ftype(),
                entry: None,
            }),
            None => Ok(Target::Host),
        };
    }
    if follow && path.first() == Some(&b'/') {
        // `/proc/self/fd/N` of an atoll descriptor is a magic link to its
        // file, also when it has no name (`O_TMPFILE`, an unlinked file):
        // following it reaches the inode itself (`linkat(…,
        // AT_SYMLINK_FOLLOW)` gives such a file its name).
        if let Some(d) = crate::pipefifo::fd_path(path).and_then(fdtable::get) {
            return Ok(Target::Node {
                ino: d.ino(),
                ftype: d.ftype(),
                entry: None,
            });
        }
    }
    let Some(mut w) = Walker::start(c, lane, dirfd, path)? else {
        return Ok(Target::Host);
    };
    match w.node(follow)? {
        NodeStep::Host(p) => Ok(Target::Rehost(p)),
        NodeStep::Node { ino, ftype, entry } => Ok(Target::Node { ino, ftype, entry }),
    }
}

pub fn getattr(c: &Client, lane: &Lane, ino: InodeId) -> Result<Attr> {
    lane.call(c, ino.owner(), Request::GetAttr { ino }, |r| match r {
        Reply::Attr(a) => Ok(a),
        _ => Err(Error::Protocol("GetAttr")),
    })
}

/// `via`: the entry a path named, whose directory's watchers hear of the
/// change (`inotify`); `None` for a descriptor or a path without a name.
pub fn setattr(
    c: &Client,
    lane: &Lane,
    ino: InodeId,
    via: Option<&Entry>,
    set: SetAttr,
) -> Result<Attr> {
    let via = via.map(Entry::proto);
    lane.call(
        c,
        ino.owner(),
        Request::SetAttr { ino, set, via },
        |r| match r {
            Reply::Attr(a) => Ok(a),
            _ => Err(Error::Protocol("SetAttr")),
        },
    )
}

/// Fill a kernel `struct stat` exactly as Linux would for this inode.
pub fn to_stat(a: &Attr) -> libc::stat {
    let mut st: libc::stat = sys::zeroed();
    st.st_dev = ATOLL_DEV;
    st.st_ino = a.ino.0;
    st.st_nlink = a.nlink as u64;
    st.st_mode = a.ftype.mode_bits() | (a.perm & 0o7777);
    st.st_uid = a.uid;
    st.st_gid = a.gid;
    st.st_rdev = a.rdev;
    st.st_size = a.size as i64;
    st.st_blksize = atoll_proto::BLOCK_SIZE as i64;
    st.st_blocks = a.blocks as i64;
    st.st_atime = a.atime.sec;
    st.st_atime_nsec = a.atime.nsec as i64;
    st.st_mtime = a.mtime.sec;
    st.st_mtime_nsec = a.mtime.nsec as i64;
    st.st_ctime = a.ctime.sec;
    st.st_ctime_nsec = a.ctime.nsec as i64;
    st
}

fn ts(t: Timespec) -> libc::statx_timestamp {
    let mut x: libc::statx_timestamp = sys::zeroed();
    x.tv_sec = t.sec;
    x.tv_nsec = t.nsec;
    x
}

/// Fill a `struct statx` (every basic field plus birth time).
pub fn to_statx(a: &Attr) -> libc::statx {
    let mut x: libc::statx = sys::zeroed();
    x.stx_mask = libc::STATX_BASIC_STATS | libc::STATX_BTIME;
    x.stx_blksize = atoll_proto::BLOCK_SIZE as u32;
    x.stx_nlink = a.nlink;
    x.stx_uid = a.uid;
    x.stx_gid = a.gid;
    x.stx_mode = (a.ftype.mode_bits() | (a.perm & 0o7777)) as u16;
    x.stx_ino = a.ino.0;
    x.stx_size = a.size;
    x.stx_blocks = a.blocks;
    x.stx_atime = ts(a.atime);
    x.stx_btime = ts(a.btime);
    x.stx_ctime = ts(a.ctime);
    x.stx_mtime = ts(a.mtime);
    x.stx_rdev_major = ((a.rdev >> 8) & 0xfff) as u32 | ((a.rdev >> 32) & !0xfff) as u32;
    x.stx_rdev_minor = (a.rdev & 0xff) as u32 | ((a.rdev >> 12) & !0xff) as u32;
    x.stx_dev_major = ATOLL_DEV_MAJOR;
    x.stx_dev_minor = ATOLL_DEV_MINOR;
    x
}

/// `SetAttr` times from a `utimensat` times array (NULL = now, now).
pub fn times_from_timespecs(ptr: u64) -> Result<(TimeSet, TimeSet)> {
    if ptr == 0 {
        return Ok((TimeSet::Now, TimeSet::Now));
    }
    let t: [libc::timespec; 2] = sys::get_user(ptr)?;
    let conv = |t: libc::timespec| -> Result<TimeSet> {
        match t.tv_nsec {
            libc::UTIME_NOW => Ok(TimeSet::Now),
            libc::UTIME_OMIT => Ok(TimeSet::Omit),
            n if (0..1_000_000_000).contains(&n) => Ok(TimeSet::Set(Timespec {
                sec: t.tv_sec,
                nsec: n as u32,
            })),
            _ => err(libc::EINVAL),
        }
    };
    Ok((conv(t[0])?, conv(t[1])?))
}

/// Times from a `timeval[2]` (utimes/futimesat; NULL = now).
pub fn times_from_timevals(ptr: u64) -> Result<(TimeSet, TimeSet)> {
    if ptr == 0 {
        return Ok((TimeSet::Now, TimeSet::Now));
    }
    let t: [libc::timeval; 2] = sys::get_user(ptr)?;
    let conv = |t: libc::timeval| -> Result<TimeSet> {
        if !(0..1_000_000).contains(&t.tv_usec) {
            return err(libc::EINVAL);
        }
        Ok(TimeSet::Set(Timespec {
            sec: t.tv_sec,
            nsec: (t.tv_usec * 1000) as u32,
        }))
    };
    Ok((conv(t[0])?, conv(t[1])?))
}

/// Times from a `struct utimbuf` (utime; NULL = now).
pub fn times_from_utimbuf(ptr: u64) -> Result<(TimeSet, TimeSet)> {
    if ptr == 0 {
        return Ok((TimeSet::Now, TimeSet::Now));
    }
    let t: libc::utimbuf = sys::get_user(ptr)?;
    Ok((
        TimeSet::Set(Timespec {
            sec: t.actime,
            nsec: 0,
        }),
        TimeSet::Set(Timespec {
            sec: t.modtime,
            nsec: 0,
        }),
    ))
}

/// `statfs`'s `f_flags` bit saying the other bits are mount flags.
const ST_VALID: i64 = 0x0020;

/// Sum of every server's share (`statfs`).
pub fn statfs(c: &Client, lane: &Lane) -> Result<libc::statfs> {
    let total = match published_space(c, lane) {
        Some(t) => t,
        None => asked_space(c, lane)?,
    };
    Ok(statfs_of(total))
}

/// What the servers' `StatFs` would answer, read from the control block
/// without a message (a message wakes every idle server: ~130 µs where
/// the call costs ~4 µs on tmpfs). The inode counts are the control
/// block's gauges; the free blocks are the pool's root plus each free
/// list, which every server publishes as its share after each request,
/// before its reply (`Control::publish_space`). `None` (ask instead)
/// unless every member is up and has published, and every request this
/// lane sent has been served, so the counts reflect this thread's earlier
/// calls (posted `Close`s too) as the answers to messages sent after them
/// would.
fn published_space(c: &Client, lane: &Lane) -> Option<atoll_proto::StatFsInfo> {
    let ctl = c.control();
    if c.info.remote || !drained(lane) {
        return None;
    }
    let mut blocks = 0u64;
    let mut free = 0i64;
    for s in 0..c.members() {
        if ctl.is_down(s) {
            return None;
        }
        let (b, share) = ctl.space(s)?;
        blocks = b;
        free = free.saturating_add(share);
    }
    let (files, files_free) = ctl.files();
    Some(atoll_proto::StatFsInfo {
        blocks,
        blocks_free: (blocks as i64).saturating_add(free).clamp(0, blocks as i64) as u64,
        files,
        files_free,
    })
}

/// Wait a little for the servers to take this lane's requests: a posted
/// `Close` just before (`df` after a redirection, dbench's `Close` then
/// `Qfsinfo`) is served in microseconds, and its freed blocks count then,
/// as on Linux. `false` if they are still there (ask instead).
fn drained(lane: &Lane) -> bool {
    for _ in 0..64 {
        if lane.requests_taken() {
            return true;
        }
        // SAFETY: sched_yield takes no arguments.
        unsafe { sys::sc(libc::SYS_sched_yield, 0, 0, 0, 0) };
    }
    lane.requests_taken()
}

/// Ask every server for its share with `StatFs` (only server 0 counts:
/// the counts are instance-wide, server `fs::attrs`).
fn asked_space(c: &Client, lane: &Lane) -> Result<atoll_proto::StatFsInfo> {
    // A dead server's share is gone with it (fault containment): the
    // others still answer for theirs.
    let mut ids = Vec::with_capacity(c.members());
    for s in (0..c.members()).filter(|&s| !c.control().is_down(s)) {
        ids.push((s, lane.send(c, c.cred(), s, Request::StatFs)?));
    }
    let mut total = atoll_proto::StatFsInfo::default();
    for (s, id) in ids {
        let i = lane.recv(c, s, id, |r| match r {
            Reply::StatFs(i) => Ok(i),
            _ => Err(Error::Protocol("StatFs")),
        })?;
        total.blocks += i.blocks;
        total.blocks_free += i.blocks_free;
        total.files += i.files;
        total.files_free += i.files_free;
    }
    Ok(total)
}

/// The `statfs` record of the instance's counts.
fn statfs_of(total: atoll_proto::StatFsInfo) -> libc::statfs {
    let mut st: libc::statfs = sys::zeroed();
    st.f_type = ATOLL_FS_MAGIC;
    st.f_bsize = atoll_proto::BLOCK_SIZE as i64;
    st.f_frsize = atoll_proto::BLOCK_SIZE as i64;
    st.f_blocks = total.blocks;
    st.f_bfree = total.blocks_free;
    st.f_bavail = total.blocks_free;
    st.f_files = total.files;
    st.f_ffree = total.files_free;
    st.f_namelen = atoll_proto::MAX_NAME as i64;
    // Mount flags are valid (a read-write mount with no options): glibc's
    // `statvfs` then takes them from here instead of reading /proc/mounts.
    // SAFETY: `f_flags` is the word after `f_frsize` in the kernel's and
    // glibc's `struct statfs` (the libc crate keeps it in private spare
    // words), inside `st`.
    unsafe { core::ptr::addr_of_mut!(st.f_frsize).add(1).write(ST_VALID) };
    // A file system id, as tmpfs has one (fanotify's info records carry
    // it, and Linux refuses `FAN_REPORT_FID` marks where it is zero).
    // SAFETY: `fsid_t` is two `int`s (`__val`), private in the libc crate.
    unsafe { (core::ptr::addr_of_mut!(st.f_fsid) as *mut [i32; 2]).write(crate::fanotify::FSID) };
    st
}

/// `getxattr` family: returns the value length (size 0 = just ask).
pub fn getxattr(
    c: &Client,
    lane: &Lane,
    ino: InodeId,
    name: &[u8],
    buf: u64,
    size: usize,
) -> Result<i64> {
    // A directory's mode (adaptive directories, `adapt`), from its home.
    if name == crate::ns::XATTR_DISTRIBUTED {
        match crate::adapt::mode_value(c, lane, ino) {
            Ok(d) => return copy_sized(if d { b"1" } else { b"0" }, buf, size),
            Err(Error::Errno(e)) if e == libc::ENODATA => {}
            Err(e) => return Err(e),
        }
    }
    if name == crate::ns::XATTR_WIDTH {
        match crate::adapt::mode_width(c, lane, ino) {
            Ok(w) => return copy_sized(w.to_string().as_bytes(), buf, size),
            Err(Error::Errno(e)) if e == libc::ENODATA => {}
            Err(e) => return Err(e),
        }
    }
    lane.call(
        c,
        ino.owner(),
        Request::GetXattr { ino, name },
        |r| match r {
            Reply::Xattr(v) => copy_sized(v, buf, size),
            _ => Err(Error::Protocol("GetXattr")),
        },
    )
}

pub fn listxattr(c: &Client, lane: &Lane, ino: InodeId, buf: u64, size: usize) -> Result<i64> {
    lane.call(c, ino.owner(), Request::ListXattr { ino }, |r| match r {
        Reply::XattrNames(v) => copy_sized(v, buf, size),
        _ => Err(Error::Protocol("ListXattr")),
    })
}

fn copy_sized(v: &[u8], buf: u64, size: usize) -> Result<i64> {
    if size == 0 {
        return Ok(v.len() as i64);
    }
    if v.len() > size {
        return err(libc::ERANGE);
    }
    sys::copy_to_user(buf, v)?;
    Ok(v.len() as i64)
}

pub fn setxattr(
    c: &Client,
    lane: &Lane,
    ino: InodeId,
    via: Option<&Entry>,
    name: &[u8],
    value: &[u8],
    flags: u32,
) -> Result<i64> {
    // Setting a directory's mode swaps it (`adapt`, Hare §6.1.2).
    if name == crate::ns::XATTR_DISTRIBUTED && (value == b"1" || value == b"0") {
        match crate::adapt::swap(c, lane, ino, value == b"1") {
            Ok(()) => return Ok(0),
            Err(Error::Errno(e)) if e == libc::ENOTDIR => {}
            Err(e) => return Err(e),
        }
    }
    lane.call_ok(
        c,
        ino.owner(),
        Request::SetXattr {
            ino,
            name,
            value,
            flags,
            via: via.map(Entry::proto),
        },
    )?;
    Ok(0)
}

pub fn removexattr(
    c: &Client,
    lane: &Lane,
    ino: InodeId,
    via: Option<&Entry>,
    name: &[u8],
) -> Result<i64> {
    let via = via.map(Entry::proto);
    lane.call_ok(c, ino.owner(), Request::RemoveXattr { ino, name, via })?;
    Ok(0)
}

/// An xattr name argument: `ERANGE` when empty or longer than 255 bytes,
/// as Linux.
pub fn xattr_name<'a>(ptr: u64) -> Result<&'a [u8]> {
    let n = sys::user_path(ptr).map_err(|e| {
        Error::Errno(if e == libc::ENAMETOOLONG {
            libc::ERANGE
        } else {
            e
        })
    })?;
    if n.is_empty() || n.len() > 255 {
        return err(libc::ERANGE);
    }
    Ok(n)
}

// ---- the xattr system calls: name, value and list buffers of the program ----

/// Run `run` on the inode an xattr call names: descriptor `fd` (the
/// `f*xattr` calls) or the path at `path` (followed unless `l*xattr`).
fn on_xattr_target(
    c: &Client,
    fd: Option<i64>,
    path: u64,
    follow: bool,
    run: impl Fn(&Lane, InodeId, Option<&Entry>) -> Result<Out>,
) -> Result<Out> {
    match fd {
        Some(fd) => crate::syscalls::common::on_fd(c, fd, |l, d| run(l, d.ino(), None)),
        None => crate::syscalls::common::on_entry(
            c,
            libc::AT_FDCWD as i64,
            path,
            follow,
            false,
            |l, ino, _, via| run(l, ino, via),
        ),
    }
}

#[inline(never)]
pub(crate) fn xattr_get(
    c: &Client,
    dirfd_or_fd: Option<i64>,
    a: &[u64; 6],
    follow: bool,
) -> Result<Out> {
    let (name, buf, size) = (a[1], a[2], a[3] as usize);
    let run = |lane: &Lane, ino, _: Option<&Entry>| {
        let n = xattr_name(name)?;
        Ok(Out::Done(getxattr(c, lane, ino, n, buf, size)?))
    };
    on_xattr_target(c, dirfd_or_fd, a[0], follow, run)
}

#[inline(never)]
pub(crate) fn xattr_set(c: &Client, fd: Option<i64>, a: &[u64; 6], follow: bool) -> Result<Out> {
    let (name, val, size, flags) = (a[1], a[2], a[3] as usize, a[4] as u32);
    let run = |lane: &Lane, ino, via: Option<&Entry>| {
        let n = xattr_name(name)?;
        // Linux: E2BIG past XATTR_SIZE_MAX; a value no frame carries does
        // not fit the inode's xattr space (ENOSPC, as ext4 without ea_inode).
        if size > atoll_proto::XATTR_SIZE_MAX {
            return err(libc::E2BIG);
        }
        if size > atoll_proto::MAX_XATTR_VALUE {
            return err(libc::ENOSPC);
        }
        Ok(Out::Done(setxattr(
            c,
            lane,
            ino,
            via,
            n,
            sys::user_slice(val, size)?,
            flags,
        )?))
    };
    on_xattr_target(c, fd, a[0], follow, run)
}

#[inline(never)]
pub(crate) fn xattr_list(c: &Client, fd: Option<i64>, a: &[u64; 6], follow: bool) -> Result<Out> {
    let (buf, size) = (a[1], a[2] as usize);
    let run =
        |lane: &Lane, ino, _: Option<&Entry>| Ok(Out::Done(listxattr(c, lane, ino, buf, size)?));
    on_xattr_target(c, fd, a[0], follow, run)
}

#[inline(never)]
pub(crate) fn xattr_remove(c: &Client, fd: Option<i64>, a: &[u64; 6], follow: bool) -> Result<Out> {
    let name = a[1];
    let run = |lane: &Lane, ino, via: Option<&Entry>| {
        let n = xattr_name(name)?;
        Ok(Out::Done(removexattr(c, lane, ino, via, n)?))
    };
    on_xattr_target(c, fd, a[0], follow, run)
}
