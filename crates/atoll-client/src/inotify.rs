//! `inotify` on atoll paths: the client's half.
//!
//! A notification queue is a server object (server `fs/inotify.rs`,
//! layout `atoll_proto::inotify`): a ring like a pipe's whose reader is
//! the program's inotify descriptor and whose writers are the file
//! servers, which append `struct inotify_event` records where changes
//! happen. On the client the descriptor is a pipe read end in every
//! respect but `read` (whole records, `EINVAL` for a buffer too small for
//! the next one), so readiness (`poll`, `select`, `epoll`), `FIONREAD`,
//! blocking and interruptible sleeps, `dup`, `fork` and `exec` are the
//! pipe layer's (`pipe.rs`).
//!
//! Where a queue comes from: `inotify_init1` stays Linux's, since a
//! program may watch host paths only. The first `inotify_add_watch` of an
//! atoll path on a host inotify descriptor that has no watch yet turns
//! that descriptor into an atoll queue in place (same number, same
//! `O_NONBLOCK` and close-on-exec flags). Mixing is refused with `EXDEV`:
//! an atoll path on a host queue that already watches something, and a
//! host path on an atoll queue.
//!
//! `inotify_add_watch`: the queue's owner server hands out the watch
//! descriptor; the client then registers the watch with the servers that
//! see changes of the inode (its owner; every server for a directory),
//! since servers never message each other (Hare §6.2.3).

use core::sync::atomic::Ordering;

use atoll_proto::inotify::{self as ino_hdr, EVENT_HEADER, IN_DONT_FOLLOW, IN_ONLYDIR};
use atoll_proto::{FileType, InodeId, QueueRef, Reply, Request};

use crate::error::{err, Error, Result};
use crate::fdtable::{self, DescInfo, DescRef};
use crate::meta::{self, Target};
use crate::ring::Ring;
use crate::session::{Client, Lane};
use crate::{file, sys, Out};

pub(crate) mod unmount;

/// Marks a pipe cookie as a notification queue's (`pipe::cookie` holds
/// the header block + 1 in the low 32 bits).
pub const QUEUE_COOKIE: u64 = 1 << 40;

/// Is this description a notification queue?
pub fn is_queue(d: &DescRef) -> bool {
    d.ftype() == FileType::Fifo && d.cookie().load(Ordering::Relaxed) & QUEUE_COOKIE != 0
}

/// Is `ino` the inode of a queue this process holds? Its `fstat` shows
/// Linux's anonymous inode (`lib.rs`); queue inodes are never named, so
/// only a descriptor of one reaches it. Asked only of inodes with no link.
pub fn is_queue_inode(ino: InodeId) -> bool {
    fdtable::fds()
        .into_iter()
        .filter_map(|fd| fdtable::get(fd as i64))
        .any(|d| is_queue(&d) && d.ino() == ino)
}

/// Run `f` on a kernel inotify descriptor made for the purpose.
fn with_kernel_queue<T>(f: impl FnOnce(i32) -> Option<T>) -> Option<T> {
    // SAFETY: integer arguments only.
    let k = unsafe { sys::sc(libc::SYS_inotify_init1, libc::IN_CLOEXEC as u64, 0, 0, 0) };
    if k < 0 {
        return None;
    }
    let r = f(k as i32);
    sys::close(k as i32);
    r
}

/// `fstat` of a queue: Linux shows the inode of the anonymous-inode file
/// system every inotify and fanotify descriptor shares (its device, inode
/// number, owner, times), so take it from the kernel's own. Without a
/// descriptor to spare (`EMFILE`), what can be said without one: mode
/// `0600` of no file type, one link.
pub fn anon_stat(st: &mut libc::stat) {
    let kernel = with_kernel_queue(|k| {
        let mut s = core::mem::MaybeUninit::<libc::stat>::zeroed();
        // SAFETY: `s` is a properly sized local buffer the kernel fills.
        let r = unsafe { sys::sc(libc::SYS_fstat, k as u64, s.as_mut_ptr() as u64, 0, 0) };
        // SAFETY: zeroed, then filled by the kernel on success.
        (r == 0).then(|| unsafe { s.assume_init() })
    });
    match kernel {
        Some(s) => *st = s,
        None => {
            st.st_mode = 0o600;
            st.st_nlink = 1;
        }
    }
}

/// [`anon_stat`] for `statx`.
pub fn anon_statx(x: &mut libc::statx) {
    let kernel = with_kernel_queue(|k| {
        let mut s = core::mem::MaybeUninit::<libc::statx>::zeroed();
        let mask = libc::STATX_BASIC_STATS | libc::STATX_BTIME;
        // SAFETY: an empty NUL-terminated path of ours and a properly
        // sized local buffer the kernel fills.
        let r = unsafe {
            sys::syscall6(
                libc::SYS_statx,
                [
                    k as u64,
                    c"".as_ptr() as u64,
                    libc::AT_EMPTY_PATH as u64,
                    mask as u64,
                    s.as_mut_ptr() as u64,
                    0,
                ],
            )
        };
        // SAFETY: zeroed, then filled by the kernel on success.
        (r == 0).then(|| unsafe { s.assume_init() })
    });
    match kernel {
        Some(s) => *x = s,
        None => {
            x.stx_mode = 0o600;
            x.stx_nlink = 1;
        }
    }
}

/// Set once a server said that a file this process opened or wrote may
/// be watched: from then on its closes and write reports wait for the
/// server (a round trip), so the events are queued before the call
/// returns, as on Linux.
static WATCHED: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);

/// Note a reply's `watched` flag.
pub fn saw_watched(watched: bool) {
    if watched {
        WATCHED.store(true, Ordering::Relaxed);
    }
}

/// May files of this process be watched? (Closes then wait.)
pub fn watched_seen() -> bool {
    WATCHED.load(Ordering::Relaxed)
}

std::thread_local! {
    /// Reads of the call under way, when it gathers them into one
    /// `IN_ACCESS` ([`one_access`]): how deep, and the description read
    /// through that a reply said is watched.
    static GATHER: core::cell::Cell<(u32, Option<atoll_proto::DescId>)> =
        const { core::cell::Cell::new((0, None)) };
    /// A read of the [`one_access`] call under way was sent to report
    /// itself (`reports_read`).
    static DATA_REPORTED: core::cell::Cell<bool> = const { core::cell::Cell::new(false) };
    /// A `ReadDir` reply of the `getdents` under way said `watched`.
    static DIR_WATCHED: core::cell::Cell<bool> = const { core::cell::Cell::new(false) };
}

/// Report that a read through `desc`, whose reply said the file is
/// watched, returned bytes (`IN_ACCESS`). A round trip, so the event is
/// queued before the call returns, as on Linux; inside [`one_access`]
/// noted and sent once at its end.
pub fn accessed(c: &Client, lane: &Lane, desc: atoll_proto::DescId) {
    saw_watched(true);
    let gathering = GATHER.with(|g| {
        let (depth, _) = g.get();
        if depth > 0 {
            g.set((depth, Some(desc)));
        }
        depth > 0
    });
    if !gathering {
        let _ = lane.call_ok(c, desc.server(), Request::InotifyAccessed { desc });
    }
}

/// Run `f`, one call of the program that may read several times
/// (`readv`'s buffers, a copy's chunks): its reads make one `IN_ACCESS`,
/// as Linux reports once per call (`fsnotify_access`).
pub fn one_access<R>(c: &Client, lane: &Lane, f: impl FnOnce() -> R) -> R {
    GATHER.with(|g| {
        let (depth, d) = g.get();
        g.set((depth + 1, d));
    });
    let r = f();
    let desc = GATHER.with(|g| {
        let (depth, d) = g.get();
        let depth = depth.saturating_sub(1);
        g.set((depth, if depth == 0 { None } else { d }));
        if depth == 0 {
            DATA_REPORTED.with(|r| r.set(false));
            d
        } else {
            None
        }
    });
    if let Some(desc) = desc {
        accessed(c, lane, desc);
    }
    r
}

/// Should the `ReadData` requests of this read report it (their first
/// one, `msgdata`)? Yes, unless the call gathers reads ([`one_access`])
/// and an earlier read of it already did.
pub fn reports_read() -> bool {
    let gathering = GATHER.with(|g| g.get().0 > 0);
    !gathering || !DATA_REPORTED.with(|r| r.replace(true))
}

/// Note a `ReadDir` reply's `watched` flag (see [`dir_listed`]).
pub fn saw_dir_watched(watched: bool) {
    if watched {
        DIR_WATCHED.with(|w| w.set(true));
    }
}

/// Around one `getdents`: `f` lists, then, if a `ReadDir` reply said the
/// directory is watched, its read is reported (`IN_ACCESS`, which Linux's
/// `iterate_dir` reports for every call, even one at the end).
pub fn dir_listed<R>(c: &Client, lane: &Lane, d: &DescRef, f: impl FnOnce() -> R) -> R {
    DIR_WATCHED.with(|w| w.set(false));
    let r = f();
    if DIR_WATCHED.with(|w| w.replace(false)) {
        accessed(c, lane, d.desc());
    }
    r
}

/// `inotify_add_watch(fd, path, mask)`.
pub fn add_watch(c: &Client, fd: i64, path: u64, mask: u32) -> Result<Out> {
    let lane = c.lane()?;
    let follow = mask & IN_DONT_FOLLOW == 0;
    let queue = fdtable::get(fd).filter(is_queue);
    if queue.is_none() && fdtable::is_atoll(fd) {
        return err(libc::EINVAL); // an atoll descriptor, not a queue
    }
    let target = meta::resolve(c, &lane, libc::AT_FDCWD as i64, path, follow, false)?;
    let (ino, ftype) = match (target, &queue) {
        (Target::Node { ino, ftype, .. }, _) => (ino, ftype),
        (Target::Host, None) => return Ok(Out::Host),
        (Target::Rehost(p), None) => return Ok(Out::Rehost(p)),
        // A host path on an atoll queue: not supported (see module docs).
        (_, Some(_)) => return err(libc::EXDEV),
    };
    if mask & IN_ONLYDIR != 0 && ftype != FileType::Directory {
        return err(libc::ENOTDIR);
    }
    check_readable(c, &lane, ino)?;
    let queue = match queue {
        Some(q) => q,
        None => convert_host_queue(c, &lane, fd, Kind::Inotify)?,
    };
    let desc = queue.desc();
    let (wd, mask, qref, replaced) = lane.call(
        c,
        desc.server(),
        Request::InotifyAddWatch { desc, ino, mask },
        |r| match r {
            Reply::Watch {
                wd,
                mask,
                queue,
                replaced,
                ..
            } => Ok((wd, mask, queue, replaced)),
            _ => Err(Error::Protocol("InotifyAddWatch")),
        },
    )?;
    if replaced != 0 {
        unregister(c, &lane, qref, ino, replaced);
        unmount::removed(queue.ino(), replaced);
    }
    unmount::added(queue.ino(), wd, ftype == FileType::Directory);
    for server in watch_servers(c, ino, ftype) {
        lane.call_ok(
            c,
            server,
            Request::InotifyRegister {
                queue: qref,
                ino,
                wd,
                mask,
            },
        )?;
    }
    Ok(Out::Done(wd as i64))
}

/// The servers that see changes of `ino`: every one. A directory's
/// entries, and the inodes they name, may live on any of them; a file's
/// own changes are its owner's, but a rename is reported by the server
/// that moved its entry (`IN_MOVE_SELF` after `IN_MOVED_TO`, in order),
/// which may be another (coreutils' `tail -F` of a renamed file).
fn watch_servers(c: &Client, _ino: InodeId, _ftype: FileType) -> Vec<usize> {
    (0..c.members().max(1)).collect()
}

/// `inotify_rm_watch(fd, wd)`.
pub fn rm_watch(c: &Client, fd: i64, wd: i32) -> Result<Out> {
    let Some(queue) = fdtable::get(fd) else {
        return Ok(Out::Host);
    };
    if !is_queue(&queue) {
        return err(libc::EINVAL);
    }
    let lane = c.lane()?;
    let desc = queue.desc();
    let (ino, qref, gone) = lane.call(
        c,
        desc.server(),
        Request::InotifyRmWatch { desc, wd },
        |r| match r {
            Reply::Watch {
                ino,
                queue,
                replaced,
                ..
            } => Ok((ino, queue, replaced != 0)),
            _ => Err(Error::Protocol("InotifyRmWatch")),
        },
    )?;
    unregister(c, &lane, qref, ino, wd);
    unmount::removed(queue.ino(), wd);
    if gone {
        // Its inode was freed (or its `IN_ONESHOT` fired) and its
        // `IN_IGNORED` queued: Linux's mark went then, so removing it now
        // is `EINVAL`.
        return err(libc::EINVAL);
    }
    Ok(Out::Done(0))
}

fn unregister(c: &Client, lane: &Lane, queue: QueueRef, ino: InodeId, wd: i32) {
    for server in 0..c.members().max(1) {
        let req = Request::InotifyRegister {
            queue,
            ino,
            wd,
            mask: 0,
        };
        let _ = lane.call_ok(c, server, req);
    }
}

/// Which host descriptor becomes an atoll queue.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Inotify,
    /// A fanotify group (`fanotify.rs`).
    Fanotify,
}

/// Turn host inotify (or fanotify) descriptor `fd`, which watches nothing
/// yet, into an atoll queue at the same number. `EXDEV` if it already
/// watches host paths (one queue cannot mix both, see the module docs);
/// `EINVAL` if it is not a descriptor of that kind, as Linux.
pub(crate) fn convert_host_queue(c: &Client, lane: &Lane, fd: i64, kind: Kind) -> Result<DescRef> {
    // A notification queue is a ring in the buffer cache, which a process
    // of a copy island does not map: watches of atoll paths there answer
    // `ENOSPC`, the error on which watchers (`tail -f`) fall back to
    // polling (docs/COMPATIBILITY.md).
    if !c.maps_cache() {
        return err(libc::ENOSPC);
    }
    let link =
        std::fs::read_link(format!("/proc/self/fd/{fd}")).map_err(|_| Error::Errno(libc::EBADF))?;
    let want: &[u8] = match kind {
        Kind::Inotify => b"anon_inode:inotify",
        Kind::Fanotify => b"anon_inode:[fanotify]",
    };
    if link.as_os_str().as_encoded_bytes() != want {
        return err(libc::EINVAL);
    }
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}"))
        .map_err(|_| Error::Errno(libc::EBADF))?;
    let marked = match kind {
        Kind::Inotify => info.lines().any(|l| l.starts_with("inotify wd:")),
        Kind::Fanotify => crate::fanotify::host_has_marks(&info),
    };
    if marked {
        return err(libc::EXDEV);
    }
    let status = sys::fcntl_int(fd as i32, libc::F_GETFL, 0);
    let fdflags = sys::fcntl_int(fd as i32, libc::F_GETFD, 0);
    if status < 0 || fdflags < 0 {
        return err(libc::EBADF);
    }
    let nonblock = status as u32 & libc::O_NONBLOCK as u32;
    let cloexec = fdflags as i32 & libc::FD_CLOEXEC != 0;
    let max_events = match kind {
        Kind::Inotify => max_queued_events("inotify"),
        Kind::Fanotify => crate::fanotify::max_events(&info),
    };
    // Spread queues over servers by process, as pipes.
    let server = c.live_server(std::process::id() as usize % c.members().max(1));
    let (ino, desc, header) = lane.call(
        c,
        server,
        Request::InotifyInit {
            flags: nonblock,
            max_events,
        },
        |r| match r {
            Reply::Pipe {
                ino, read, header, ..
            } => Ok((ino, read, header)),
            _ => Err(Error::Protocol("InotifyInit")),
        },
    )?;
    crate::pipe::mark_active();
    let info = DescInfo {
        desc,
        ino,
        flags: libc::O_RDONLY as u32 | nonblock,
        ftype: FileType::Fifo,
        cookie: (header as u64 + 1)
            | QUEUE_COOKIE
            | if kind == Kind::Fanotify {
                crate::fanotify::FAN_COOKIE
            } else {
                0
            },
        path: None,
    };
    let tmp = file::new_fd(c, info, true)?;
    let flags = if cloexec { libc::O_CLOEXEC } else { 0 };
    let r = file::dup3(c, tmp, fd, flags, false);
    let _ = file::close(c, lane, tmp);
    r?;
    fdtable::get(fd)
        .filter(is_queue)
        .ok_or(Error::Errno(libc::EBADF))
}

/// Linux's limit on a queue's events (`/proc/sys/fs/{kind}/
/// max_queued_events`), read when the queue is made, as Linux reads it
/// when the group is made.
pub(crate) fn max_queued_events(kind: &str) -> u32 {
    std::fs::read_to_string(format!("/proc/sys/fs/{kind}/max_queued_events"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(ino_hdr::DEFAULT_MAX_EVENTS)
}

/// `records` records were read (lock held): the queue holds fewer.
pub(crate) fn consumed(ring: &Ring, records: u32) {
    let w = ring.word(ino_hdr::COUNT);
    let left = w.load(Ordering::Acquire).saturating_sub(records);
    w.store(left, Ordering::Release);
}

/// `read(2)` on a queue: whole records only, as Linux's `inotify_read`.
pub fn read(c: &Client, d: &DescRef, ring: &Ring, buf: &mut [u8]) -> Result<usize> {
    let _ = c;
    loop {
        let sig = sys::SigBlock::new();
        ring.lock();
        let tail = ring.word64(ino_hdr::TAIL).load(Ordering::Acquire);
        let mut head = ring.word64(ino_hdr::HEAD).load(Ordering::Acquire);
        if head == tail && unmount::report(d.ino(), ring) {
            head = ring.word64(ino_hdr::HEAD).load(Ordering::Acquire);
        }
        if head != tail {
            let r = copy_records(ring, head, tail, buf);
            if let Ok((n, records)) = r {
                ring.word64(ino_hdr::TAIL)
                    .store(tail + n as u64, Ordering::Release);
                consumed(ring, records);
                unmount::read(d.ino(), &buf[..n]);
            }
            ring.unlock();
            return r.map(|(n, _)| n);
        }
        wait_for_records(ring, d.flags(), sig)?;
    }
}

/// Linux asks for read permission on the object an inotify watch or a
/// fanotify mark is set on.
pub(crate) fn check_readable(c: &Client, lane: &Lane, ino: InodeId) -> Result<()> {
    lane.call_ok(
        c,
        ino.owner(),
        Request::Access {
            ino,
            mask: libc::R_OK as u32,
        },
    )?;
    Ok(())
}

/// A queue with nothing to read (its ring lock held, signals blocked by
/// `sig`): `EAGAIN` for a non-blocking descriptor, else release both and
/// sleep until a server appends (inotify and fanotify alike); once the
/// instance is gone, until a signal, as Linux's after an unmount.
pub(crate) fn wait_for_records(ring: &Ring, flags: u32, sig: sys::SigBlock) -> Result<()> {
    if flags & libc::O_NONBLOCK as u32 != 0 {
        ring.unlock();
        return err(libc::EAGAIN);
    }
    if atoll_msg::liveness::peers_gone() {
        return unmount::sleep(ring, sig);
    }
    let seen = ring.word(ino_hdr::RSEQ).load(Ordering::Acquire);
    ring.word(ino_hdr::RSLEEP).fetch_add(1, Ordering::AcqRel);
    ring.unlock();
    drop(sig);
    match crate::pipe::sleep(ring, ino_hdr::RSEQ, ino_hdr::RSLEEP, seen) {
        // The instance went while this slept: look again (`unmount`).
        Err(Error::Errno(libc::EIO)) if atoll_msg::liveness::peers_gone() => Ok(()),
        r => r,
    }
}

/// Copy the whole records in `[tail, head)` that fit `buf` (lock held):
/// the bytes and records copied.
fn copy_records(ring: &Ring, head: u64, tail: u64, buf: &mut [u8]) -> Result<(usize, u32)> {
    let avail = head.wrapping_sub(tail).min(ring.capacity());
    let (mut done, mut records) = (0usize, 0u32);
    while (done as u64) < avail {
        let mut h = [0u8; EVENT_HEADER];
        if !ring.copy_out(tail + done as u64, &mut h) {
            return err(libc::EIO);
        }
        let (_, _, _, len) = ino_hdr::decode_header(&h);
        let n = EVENT_HEADER + len as usize;
        if (done + n) as u64 > avail {
            return err(libc::EIO); // a server wrote a torn record
        }
        if done + n > buf.len() {
            break;
        }
        if !ring.copy_out(tail + done as u64, &mut buf[done..done + n]) {
            return err(libc::EIO);
        }
        done += n;
        records += 1;
    }
    if done == 0 {
        return err(libc::EINVAL); // the next event does not fit
    }
    Ok((done, records))
}
