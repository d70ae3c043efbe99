//! Descriptor operations: open, read/write through the shared buffer cache,
//! seek, close, dup, fcntl (flags and record locks), flock, ioctl, mmap,
//! copies between descriptors and poll-style readiness.
//!
//! Data path (Hare §3.3): `Read`/`Write` reserve a range at the server,
//! which answers with the buffer-cache blocks backing it; the client copies
//! between those blocks and the program's buffer itself (Cosh *share*). In
//! a copy island, which maps no cache, the bytes travel in `ReadData`/
//! `WriteData` and the server copies (Cosh §5 *copy*; `Client::direct_data`,
//! `crate::msgdata`). The read/write calls themselves are in `rw`.
//! File offsets live at the server for now (Hare §3.5's hybrid tracking
//! comes later).
//!
//! Hot path: `read`, `write`, `pread64`, `pwrite64`, `lseek`, `close` take
//! no lock and allocate nothing.
//
// `Extents` replies are decoded in place (`fast`), so reads and writes do
// not allocate even when a signal handler interrupted `malloc`.

use atoll_proto::{DescId, FileType, InodeId, Reply, Request};

use crate::error::{err, Error, Result};
use crate::fdtable::{self, DescInfo, DescRef};
use crate::session::Client;
use crate::session::Lane;
use crate::sys;
use crate::walk::{LastKind, Step, Walker};
use crate::Out;

mod locks;
pub use locks::flock;
mod maps;
pub use maps::mmap;
pub(crate) use maps::{map_cache, map_runs};
mod rw;
pub(crate) use rw::await_writers;
use rw::check_writable;
pub use rw::{
    any_read, any_write, read_at, read_desc, read_id, read_where_copied, readv, write_desc, writev,
};

/// Flags `open` keeps for `F_GETFL` (creation flags are dropped).
pub(crate) fn status_flags(flags: u32) -> u32 {
    let drop =
        (libc::O_CREAT | libc::O_EXCL | libc::O_NOCTTY | libc::O_TRUNC | libc::O_CLOEXEC) as u32;
    (flags & !drop) | libc::O_LARGEFILE as u32
}

/// Turn a server description into a program descriptor: a placeholder dup
/// of the template memfd, so Linux picks the number.
pub fn new_fd(c: &Client, info: DescInfo, cloexec: bool) -> Result<i64> {
    let desc = info.desc;
    let ino = info.ino;
    let Some(r) = fdtable::alloc(info) else {
        close_desc(c, desc, ino);
        return err(libc::ENFILE);
    };
    crate::hybrid::adopt(c, &r);
    // Close-to-open (Hare §3.3.1): see what others wrote back.
    crate::incoherent::invalidate(c);
    let cmd = if cloexec {
        libc::F_DUPFD_CLOEXEC
    } else {
        libc::F_DUPFD
    };
    let template = match c.template() {
        Ok(t) => t,
        Err(e) => {
            drop(r);
            return Err(e);
        }
    };
    let fd = sys::fcntl_int(template, cmd, 0);
    if fd < 0 {
        drop(r);
        return err((-fd) as i32);
    }
    if fd as usize >= fdtable::MAX_FDS {
        sys::close(fd as i32);
        drop(r);
        return err(libc::EMFILE);
    }
    drop(fdtable::install(fd as i32, r));
    Ok(fd)
}

/// Send `Close` for a description (Hare CLOSE). Errors are ignored: the
/// session's death releases it anyway.
pub fn close_desc(c: &Client, desc: DescId, ino: InodeId) {
    close_desc_as(c, desc, ino, false);
}

/// `Close`, *posted* (no round trip: nobody reads its reply) when `post`
/// and the process took no lock on the inode (`lockmarks`): a lock's
/// release must be ordered before the program's next step.
fn close_desc_as(c: &Client, desc: DescId, ino: InodeId, post: bool) {
    // Close-to-open (Hare §3.3.1): data goes back before the description.
    crate::incoherent::write_back(c);
    if let Ok(lane) = c.lane() {
        let req = Request::Close { desc };
        if post && !c.lock_marks.may_hold_any(ino) {
            let _ = lane.post(c, desc.server(), req);
        } else {
            let _ = lane.call_ok(c, desc.server(), req);
        }
    }
}

/// The closer installed in the descriptor table. Files and directories
/// are closed posted; a pipe or FIFO end waits, because its peer learns
/// of the close through the ring's end counts, which the server updates
/// (a write after the last reader's close must see `EPIPE`).
pub fn closer(desc: DescId, ino: InodeId, ftype: FileType) {
    if let Some(c) = crate::session::client() {
        let post = matches!(ftype, FileType::Regular | FileType::Directory)
            && !crate::inotify::watched_seen();
        close_desc_as(c, desc, ino, post);
        if ftype == FileType::Directory {
            crate::dnotify::closed(c, desc);
        }
    }
}

/// Open a description for an inode the caller already resolved.
pub fn open_inode(
    c: &Client,
    lane: &Lane,
    ino: InodeId,
    flags: u32,
) -> Result<(DescId, atoll_proto::Attr)> {
    open_inode_via(c, lane, ino, flags, None)
}

/// The description and attributes of an `Opened` reply, noting whether
/// the server reported the file watched (inotify).
pub(crate) fn opened(r: Reply<'_>) -> Option<(DescId, atoll_proto::Attr)> {
    match r {
        Reply::Opened {
            desc,
            attr,
            watched,
            ..
        } => {
            crate::inotify::saw_watched(watched);
            Some((desc, attr))
        }
        _ => None,
    }
}

/// [`open_inode`] of the inode entry `via` names (`Request::OpenInode`).
pub fn open_inode_via(
    c: &Client,
    lane: &Lane,
    ino: InodeId,
    flags: u32,
    via: Option<atoll_proto::EntryName<'_>>,
) -> Result<(DescId, atoll_proto::Attr)> {
    let posted = crate::openattr::posted_mark(c, ino.owner());
    lane.call(
        c,
        ino.owner(),
        Request::OpenInode { ino, flags, via },
        |r| {
            let served = match r {
                Reply::Opened { served, .. } => served,
                _ => 0,
            };
            let (desc, attr) = opened(r).ok_or(Error::Protocol("OpenInode"))?;
            crate::openattr::opened(c, ino.owner(), served, posted, &attr);
            Ok((desc, attr))
        },
    )
}

/// `open(dir, O_TMPFILE | access, mode)`: an unnamed regular file in
/// `dir` (the path), made by the directory's owner (`fs/tmpfile.rs` there).
fn tmpfile(c: &Client, lane: &Lane, mut w: Box<Walker<'_>>, flags: u32, mode: u32) -> Result<Out> {
    let dir = match w.node(true)? {
        crate::walk::NodeStep::Host(p) => return Ok(Out::Rehost(p)),
        crate::walk::NodeStep::Node {
            ino,
            ftype: FileType::Directory,
            ..
        } => ino,
        crate::walk::NodeStep::Node { .. } => return err(libc::ENOTDIR),
    };
    let acc = flags & libc::O_ACCMODE as u32;
    if acc != libc::O_WRONLY as u32 && acc != libc::O_RDWR as u32 {
        return err(libc::EINVAL);
    }
    let open = flags & !(libc::O_TMPFILE as u32);
    let (desc, attr) = lane.call(
        c,
        dir.owner(),
        Request::CreateTmpfile {
            dir,
            perm: mode & 0o7777,
            flags: open,
            umask: crate::ns::umask(c),
        },
        |r| opened(r).ok_or(Error::Protocol("CreateTmpfile")),
    )?;
    let info = DescInfo {
        desc,
        ino: attr.ino,
        flags: status_flags(open),
        ftype: FileType::Regular,
        cookie: 0,
        path: Some(crate::fdname::tmpfile_path(w.canon.as_bytes(), attr.ino)),
    };
    let cloexec = flags & libc::O_CLOEXEC as u32 != 0;
    Ok(Out::Done(new_fd(c, info, cloexec)?))
}

/// `openat(dirfd, path, flags, mode)` (also open/creat/openat2).
#[inline(never)]
pub fn open(
    c: &Client,
    lane: &Lane,
    dirfd: i64,
    path: &[u8],
    flags: u32,
    mode: u32,
    resolve: u64,
) -> Result<Out> {
    // Not flags a program may pass (`atoll_proto::inotify`).
    let flags = flags & !(atoll_proto::inotify::OPEN_NONOTIFY | atoll_proto::inotify::OPEN_EXEC);
    let Some(mut w) = Walker::start_restricted(c, lane, dirfd, path, resolve)? else {
        return Ok(Out::Host);
    };
    if flags & libc::O_TMPFILE as u32 == libc::O_TMPFILE as u32 {
        return tmpfile(c, lane, w, flags, mode);
    }
    let creat = flags & libc::O_CREAT as u32 != 0;
    loop {
        let last = match w.advance()? {
            Step::Host(p) => return Ok(Out::Rehost(p)),
            Step::Last(l) => l,
        };
        if last.kind != LastKind::Name {
            return open_dir_itself(c, lane, &mut w, last.kind, flags);
        }
        let name = last.name.as_bytes();
        if last.trailing_slash && creat {
            return err(libc::EISDIR);
        }
        let oflags = final_flags(flags, last.trailing_slash);
        let server = crate::adapt::entry_server(c, w.dir, name);
        // A name this session knows is absent (`dcache`): `ENOENT` without
        // a message. Only without `O_CREAT`: a creation goes to the server.
        let absent = if creat { None } else { c.absent_cache() };
        let gen = match absent {
            Some(dc) if dc.absent(c.session().channels(), w.dir, name) => return err(libc::ENOENT),
            Some(dc) => dc.generation(),
            None => 0,
        };
        crate::dirperm::check_search(c, lane, w.dir, server)?;
        let umask = c.umask.load(core::sync::atomic::Ordering::Relaxed);
        let separate = if crate::uncoalesced::active(c) {
            crate::uncoalesced::open(c, &w, name, oflags, mode & 0o7777)?
        } else {
            None
        };
        // Creation affinity (Hare §3.7.5): a new inode whose entry lives on
        // another socket goes to this process's local server.
        let separate = match separate {
            Some(s) => Some(s),
            None => crate::affinity::try_open(c, lane, w.dir, name, oflags, mode & 0o7777)?,
        };
        use Resolved as R;
        // A creation there needs the directory's attributes (dirperm.rs).
        let vouched = if creat {
            crate::dirperm::vouches_for(c, lane, w.dir, server)?
        } else {
            crate::dirperm::Vouches::new()
        };
        let call = || {
            let posted = crate::openattr::posted_mark(c, server);
            lane.call_vouched(
                c,
                server,
                vouched.as_slice(),
                Request::Open {
                    dir: w.dir,
                    name,
                    flags: oflags,
                    perm: mode & 0o7777,
                    umask,
                    inherit: atoll_proto::Inherit::Unread,
                },
                |r| match r {
                    Reply::Opened {
                        desc,
                        attr,
                        watched,
                        served,
                        ..
                    } => {
                        crate::inotify::saw_watched(watched);
                        crate::openattr::opened(c, server, served, posted, &attr);
                        Ok(R::Opened(desc, attr))
                    }
                    Reply::Entry { ino, ftype } => Ok(R::Entry(ino, ftype)),
                    Reply::Symlink { target, .. } => Ok(R::Symlink(Box::new(
                        crate::path::PathBuf::from_bytes(target)?,
                    ))),
                    _ => Err(Error::Protocol("Open")),
                },
            )
        };
        let r = if let Some((d, a)) = separate {
            R::Opened(d, a)
        } else if creat {
            crate::session::retry_marked(call)?
        } else {
            match (call(), absent) {
                (Err(Error::Errno(libc::ENOENT)), Some(dc)) => {
                    dc.insert_absent(gen, w.dir, name);
                    return err(libc::ENOENT);
                }
                (r, _) => r?,
            }
        };
        // A symlink whose inode lives on another server (creation affinity
        // or a cross-server rename): read its target from the owner.
        let r = match r {
            R::Entry(ino, FileType::Symlink) if oflags & libc::O_NOFOLLOW as u32 == 0 => lane
                .call(c, ino.owner(), Request::ReadLink { ino }, |r| match r {
                    Reply::Target(t) => {
                        Ok(R::Symlink(Box::new(crate::path::PathBuf::from_bytes(t)?)))
                    }
                    _ => Err(Error::Protocol("ReadLink")),
                })?,
            r => r,
        };
        let (desc, attr) = match r {
            R::Opened(d, a) => (d, a),
            R::Entry(ino, ftype) => {
                let via = atoll_proto::EntryName { dir: w.dir, name };
                open_entry_elsewhere(c, lane, via, (ino, ftype), oflags, call)?
            }
            R::Symlink(t) => {
                if let Some(h) = w.follow_final(t.as_bytes(), last.trailing_slash)? {
                    return Ok(Out::Rehost(h));
                }
                continue;
            }
        };
        return open_finish(c, lane, &w, name, (desc, attr), flags);
    }
}

/// The flags `open` sends for its final name. A trailing slash asks for a
/// directory and follows a final symlink even under `O_NOFOLLOW`, as
/// Linux's lookup does (`du slink/`: fts opens `slink/` with `O_NOFOLLOW |
/// O_DIRECTORY`).
fn final_flags(flags: u32, trailing_slash: bool) -> u32 {
    if trailing_slash {
        (flags | libc::O_DIRECTORY as u32) & !(libc::O_NOFOLLOW as u32)
    } else {
        flags
    }
}

/// What an `Open` request found under its name.
enum Resolved {
    Opened(DescId, atoll_proto::Attr),
    Entry(InodeId, FileType),
    Symlink(Box<crate::path::PathBuf>),
}

/// The entry `via` names an inode on another server: open it there. If a
/// rename replaced the entry in between and the inode is gone, ask the
/// entry's server again (`ask`), as Linux's lookup would have found the
/// new inode.
fn open_entry_elsewhere(
    c: &Client,
    lane: &Lane,
    via: atoll_proto::EntryName,
    (mut ino, mut ftype): (InodeId, FileType),
    oflags: u32,
    ask: impl Fn() -> Result<Resolved>,
) -> Result<(DescId, atoll_proto::Attr)> {
    let mut stale_retries = 8;
    loop {
        if oflags & (libc::O_CREAT | libc::O_EXCL) as u32 == (libc::O_CREAT | libc::O_EXCL) as u32 {
            return err(libc::EEXIST);
        }
        // A directory is asked for before a link is refused, as Linux's
        // `do_open`; `O_PATH | O_NOFOLLOW` opens the link itself.
        if oflags & libc::O_DIRECTORY as u32 != 0 && ftype != FileType::Directory {
            return err(libc::ENOTDIR);
        }
        if ftype == FileType::Symlink && oflags & libc::O_PATH as u32 == 0 {
            return err(libc::ELOOP);
        }
        let plain = oflags & !(libc::O_CREAT | libc::O_EXCL) as u32;
        match open_inode_via(c, lane, ino, plain, Some(via)) {
            Err(Error::Errno(libc::ENOENT)) if stale_retries > 0 => {
                stale_retries -= 1;
                match ask()? {
                    Resolved::Entry(i, f) => (ino, ftype) = (i, f),
                    Resolved::Opened(d, a) => return Ok((d, a)),
                    Resolved::Symlink(_) => return err(libc::ENOENT),
                }
            }
            r => return r,
        }
    }
}

/// `open` of a path naming a directory itself (`/atoll`, `.`, `..`).
fn open_dir_itself(
    c: &Client,
    lane: &Lane,
    w: &mut Walker,
    kind: LastKind,
    flags: u32,
) -> Result<Out> {
    if kind == LastKind::DotDot {
        let (ino, _) = w.lookup(w.dir, b"..")?;
        w.dir = ino;
        let f = c.mount.len();
        w.canon.pop_component(f);
    }
    if flags & libc::O_CREAT as u32 != 0 && flags & libc::O_DIRECTORY as u32 == 0 {
        return err(libc::EISDIR);
    }
    let acc = flags & libc::O_ACCMODE as u32;
    let trunc = flags & libc::O_TRUNC as u32 != 0;
    if (acc != libc::O_RDONLY as u32 || trunc) && flags & libc::O_PATH as u32 == 0 {
        return err(libc::EISDIR);
    }
    let (desc, attr) = open_inode(c, lane, w.dir, flags)?;
    let info = DescInfo {
        desc,
        ino: attr.ino,
        flags: status_flags(flags),
        ftype: FileType::Directory,
        cookie: 0,
        path: Some(w.canon.as_bytes().to_vec()),
    };
    let cloexec = flags & libc::O_CLOEXEC as u32 != 0;
    Ok(Out::Done(new_fd(c, info, cloexec)?))
}

/// A descriptor for what `open` reached by the name `name` in the walk's
/// directory.
fn open_finish(
    c: &Client,
    lane: &Lane,
    w: &Walker,
    name: &[u8],
    (desc, attr): (DescId, atoll_proto::Attr),
    flags: u32,
) -> Result<Out> {
    // Kept for every type: `/proc/self/fd/N` names it (`proclink`).
    let path = {
        let mut p = w.canon.clone();
        let _ = p.push_component(name);
        Some(p.as_bytes().to_vec())
    };
    // A FIFO's descriptor carries its ring (and its open may wait).
    let cookie = if attr.ftype == FileType::Fifo {
        crate::pipefifo::fifo_opened(c, lane, desc, flags, true)?
    } else {
        0
    };
    if attr.ftype == FileType::Regular && attr.size == 0 && flags & libc::O_TRUNC as u32 != 0 {
        // This process's own pages of the file fault now, as on Linux.
        crate::pastend::truncated(c, attr.ino, 0);
    }
    let info = DescInfo {
        desc,
        ino: attr.ino,
        flags: status_flags(flags),
        ftype: attr.ftype,
        cookie,
        path,
    };
    let cloexec = flags & libc::O_CLOEXEC as u32 != 0;
    Ok(Out::Done(new_fd(c, info, cloexec)?))
}

/// Current size of the description's inode.
pub fn size_of(c: &Client, lane: &Lane, ino: InodeId) -> Result<u64> {
    lane.call(c, ino.owner(), Request::GetAttr { ino }, |r| match r {
        Reply::Attr(a) => Ok(a.size),
        _ => Err(Error::Protocol("GetAttr")),
    })
}

/// `lseek`; on a directory it moves the readdir cookie (rewinddir/seekdir).
pub fn lseek(c: &Client, lane: &Lane, d: &DescRef, offset: i64, whence: u32) -> Result<i64> {
    if d.flags() & libc::O_PATH as u32 != 0 {
        return err(libc::EBADF);
    }
    match d.ftype() {
        FileType::Directory => {
            let cur = d.cookie().load(core::sync::atomic::Ordering::Relaxed);
            let new = match whence as i32 {
                libc::SEEK_SET if offset >= 0 => {
                    // `seekdir`/`rewinddir` leave the end (Linux sets the
                    // position; entries made since show again).
                    d.listed_to()
                        .store(0, core::sync::atomic::Ordering::Relaxed);
                    offset as u64
                }
                libc::SEEK_CUR if offset == 0 => cur,
                _ => return err(libc::EINVAL),
            };
            d.cookie().store(new, core::sync::atomic::Ordering::Relaxed);
            Ok(new as i64)
        }
        FileType::Fifo | FileType::Socket => err(libc::ESPIPE),
        _ => {
            if let Some(r) = crate::hybrid::seek(c, lane, d, offset, whence) {
                return r;
            }
            server_seek(c, lane, d, offset, whence)
        }
    }
}

/// `lseek` of a regular file by its server. A `Seek` changes no
/// attribute, so attributes kept from the `open` just before stay usable
/// across it when it was all the server served (`openattr`).
pub fn server_seek(c: &Client, lane: &Lane, d: &DescRef, offset: i64, whence: u32) -> Result<i64> {
    let desc = d.desc();
    let ino = d.ino();
    let kept = if desc.server() == ino.owner() {
        crate::openattr::before_neutral(c, lane, ino)
    } else {
        None
    };
    let r = lane.call(
        c,
        desc.server(),
        Request::Seek {
            desc,
            offset,
            whence,
        },
        |r| match r {
            Reply::Offset(o) => Ok(o as i64),
            _ => Err(Error::Protocol("Seek")),
        },
    );
    if r.is_ok() {
        crate::openattr::after_neutral(c, ino, kept);
    }
    r
}

/// `close(fd)` of an atoll fd: forget it, close the placeholder, and drop
/// the description reference (the last one sends `Close`).
pub fn close(c: &Client, lane: &Lane, fd: i64) -> Result<i64> {
    drop(close_keeping(c, lane, fd)?);
    Ok(0)
}

/// [`close`], but the descriptor's reference is handed back to be dropped
/// by the caller, once it has let `lane` go: the last reference's closer
/// then posts its `Close` on the first free lane, usually this one, where
/// the thread's next request follows it in the same ring. (Dropped while
/// `lane` is held, the `Close` goes on another lane, which the server may
/// serve after that next request: an `Open` just after could then not
/// vouch for its attributes, `openattr`.)
pub fn close_keeping(c: &Client, lane: &Lane, fd: i64) -> Result<DescRef> {
    let Some(d) = fdtable::remove(fd) else {
        return Err(Error::Errno(libc::EBADF));
    };
    locks::drop_posix_locks(c, lane, &d);
    crate::incoherent::write_back(c);
    crate::copymap::sync_inode(c, d.ino());
    sys::close(fd as i32);
    Ok(d)
}

/// `dup`-family bookkeeping after the kernel duplicated the placeholder.
pub fn after_dup(newfd: i64, d: &DescRef) {
    if newfd >= 0 && (newfd as usize) < fdtable::MAX_FDS {
        drop(fdtable::install(newfd as i32, d.clone_ref()));
    } else if newfd >= 0 {
        sys::close(newfd as i32);
    }
}

/// `dup2`/`dup3` where either side is atoll's or `new` is private.
pub fn dup3(c: &Client, old: i64, new: i64, flags: i32, is_dup2: bool) -> Result<i64> {
    if c.is_private_fd(old as i32) {
        return err(libc::EBADF);
    }
    if old == new {
        if !is_dup2 {
            return err(libc::EINVAL);
        }
        // dup2(fd, fd) validates fd and returns it.
        if fdtable::is_atoll(old) || sys::fcntl_int(old as i32, libc::F_GETFD, 0) >= 0 {
            return Ok(new);
        }
        return err(libc::EBADF);
    }
    if c.is_private_fd(new as i32) {
        c.relocate_private(new as i32);
    }
    let src = fdtable::get(old);
    let r = sys::dup3(old as i32, new as i32, flags);
    if r < 0 {
        return err((-r) as i32);
    }
    match src {
        Some(d) => after_dup(new, &d),
        None => drop(fdtable::remove(new)),
    }
    Ok(new)
}

/// `fcntl` on an atoll fd.
#[inline(never)]
pub fn fcntl(c: &Client, lane: &Lane, fd: i64, d: &DescRef, cmd: i32, arg: u64) -> Result<Out> {
    match cmd {
        libc::F_GETFD | libc::F_SETFD => Ok(Out::Host),
        libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => {
            let r = sys::fcntl_int(fd as i32, cmd, arg as i64);
            if r < 0 {
                return err((-r) as i32);
            }
            after_dup(r, d);
            Ok(Out::Done(r))
        }
        libc::F_GETFL => Ok(Out::Done(d.flags() as i64)),
        libc::F_SETFL => {
            let changeable = (libc::O_APPEND
                | libc::O_NONBLOCK
                | libc::O_ASYNC
                | libc::O_DIRECT
                | libc::O_NOATIME) as u32;
            let new = (d.flags() & !changeable) | (arg as u32 & changeable);
            let desc = d.desc();
            lane.call_ok(c, desc.server(), Request::SetFlags { desc, flags: new })?;
            d.set_flags(new);
            Ok(Out::Done(0))
        }
        libc::F_GETLK
        | libc::F_SETLK
        | libc::F_SETLKW
        | libc::F_OFD_GETLK
        | libc::F_OFD_SETLK
        | libc::F_OFD_SETLKW => locks::record_lock(c, lane, d, cmd, arg),
        libc::F_GETOWN | libc::F_SETOWN | 10 | 11 | 15 | 16 => Ok(Out::Host),
        libc::F_NOTIFY => crate::dnotify::fcntl_notify(c, lane, fd, d, arg),
        libc::F_GET_SEALS => err(libc::EINVAL),
        _ => err(libc::EINVAL),
    }
}

/// `ioctl` on an atoll fd.
pub fn ioctl(c: &Client, lane: &Lane, d: &DescRef, req: u64, arg: u64) -> Result<Out> {
    match req {
        r if r == libc::FIOCLEX || r == libc::FIONCLEX => Ok(Out::Host),
        r if r == libc::FIONREAD => {
            if d.ftype() == FileType::Directory {
                return err(libc::EINVAL);
            }
            let pos = lseek(c, lane, d, 0, libc::SEEK_CUR as u32)?;
            let size = size_of(c, lane, d.ino())? as i64;
            sys::put_user(arg, (size - pos).max(0) as i32)?;
            Ok(Out::Done(0))
        }
        r if r == libc::FIONBIO => {
            let on: i32 = sys::get_user(arg)?;
            let f = if on != 0 {
                d.flags() | libc::O_NONBLOCK as u32
            } else {
                d.flags() & !(libc::O_NONBLOCK as u32)
            };
            d.set_flags(f);
            Ok(Out::Done(0))
        }
        _ => err(libc::ENOTTY),
    }
}

/// `copy_file_range`/`sendfile`/`splice` with an atoll fd on either side:
/// emulated by reads and writes through the client. `in_off`/`out_off` are
/// program pointers to `loff_t` (0 = use the descriptor's offset).
#[inline(never)]
pub fn copy(
    c: &Client,
    lane: &Lane,
    fd_in: i64,
    in_off: u64,
    fd_out: i64,
    out_off: u64,
    len: u64,
) -> Result<i64> {
    let mut buf = vec![0u8; (len as usize).clamp(1, 1 << 16)];
    let mut ioff: Option<u64> = if in_off != 0 {
        Some(sys::get_user::<i64>(in_off)? as u64)
    } else {
        None
    };
    let mut ooff: Option<u64> = if out_off != 0 {
        Some(sys::get_user::<i64>(out_off)? as u64)
    } else {
        None
    };
    let len = copy_within_limit(c, lane, fd_out, ooff, len)?;
    let mut total = 0u64;
    while total < len {
        let want = ((len - total) as usize).min(buf.len());
        let n = match any_read(c, lane, fd_in, &mut buf[..want], ioff) {
            Ok(n) => n,
            Err(_) if total > 0 => break,
            Err(e) => return Err(e),
        };
        if n == 0 {
            break;
        }
        let w = match any_write(c, lane, fd_out, &buf[..n], ooff) {
            Ok(w) => w,
            Err(_) if total > 0 => break,
            Err(e) => return Err(e),
        };
        total += w as u64;
        ioff = ioff.map(|o| o + w as u64);
        ooff = ooff.map(|o| o + w as u64);
        if w < n {
            if ioff.is_none() {
                // The input's own offset moved past what was copied: give
                // the rest back, as a copy that read only what it wrote.
                unread(c, lane, fd_in, (n - w) as i64);
            }
            break;
        }
    }
    if let Some(o) = ioff {
        sys::put_user(in_off, o as i64)?;
    }
    if let Some(o) = ooff {
        sys::put_user(out_off, o as i64)?;
    }
    Ok(total as i64)
}

/// The length a copy into `fd_out` at `out` (its own offset if `None`)
/// may have under the caller's file size limit: Linux checks the limit
/// before it reads anything (`generic_write_check_limits` in
/// `generic_copy_file_checks`): at or past it `EFBIG` and `SIGXFSZ`, as a
/// `write` there; else the copy is cut short at it, with no signal. Host
/// outputs are the kernel's to check.
fn copy_within_limit(
    c: &Client,
    lane: &Lane,
    fd_out: i64,
    out: Option<u64>,
    len: u64,
) -> Result<u64> {
    let (Some(limit), Some(d)) = (crate::fsize::limit(), fdtable::get(fd_out)) else {
        return Ok(len);
    };
    if d.ftype() != FileType::Regular {
        return Ok(len);
    }
    let pos = match out {
        Some(o) => o,
        None => lseek(c, lane, &d, 0, libc::SEEK_CUR as u32)? as u64,
    };
    if pos >= limit {
        crate::intr::raise_in_this_thread(libc::SIGXFSZ);
        return err(libc::EFBIG);
    }
    Ok(len.min(limit - pos))
}

/// Move `fd`'s offset back by `n` bytes read but not copied (best effort:
/// a descriptor that cannot seek has nothing to give back).
fn unread(c: &Client, lane: &Lane, fd: i64, n: i64) {
    if let Some(d) = fdtable::get(fd) {
        let _ = lseek(c, lane, &d, -n, libc::SEEK_CUR as u32);
    } else {
        // SAFETY: integer arguments on the program's own descriptor.
        unsafe {
            sys::sc(
                libc::SYS_lseek,
                fd as u64,
                (-n) as u64,
                libc::SEEK_CUR as u64,
                0,
            )
        };
    }
}

/// `poll`/`ppoll` with atoll fds: regular files are always ready (as on
/// Linux). The host part is polled without waiting when anything atoll is
/// ready, else with the program's timeout.
#[inline(never)]
pub fn poll(fds: u64, nfds: u64, host_call: impl Fn(u64, u64, bool) -> i64) -> Result<i64> {
    if nfds > 1 << 20 {
        return err(libc::EINVAL);
    }
    let user: Vec<libc::pollfd> = sys::get_user_vec(fds, nfds as usize)?;
    let mut copy: Vec<libc::pollfd> = Vec::with_capacity(nfds as usize);
    let mut ready = 0i64;
    let mut atoll_rev: Vec<i16> = vec![0; nfds as usize];
    for i in 0..nfds {
        let mut p = user[i as usize];
        if fdtable::is_atoll(p.fd as i64) {
            let rev =
                p.events & (libc::POLLIN | libc::POLLOUT | libc::POLLRDNORM | libc::POLLWRNORM);
            atoll_rev[i as usize] = rev;
            if rev != 0 {
                ready += 1;
            }
            p.fd = -1;
        }
        copy.push(p);
    }
    let r = host_call(copy.as_mut_ptr() as u64, nfds, ready > 0);
    if r < 0 {
        return err((-r) as i32);
    }
    let mut user = user;
    for (i, p) in user.iter_mut().enumerate() {
        p.revents = if fdtable::is_atoll(p.fd as i64) {
            atoll_rev[i]
        } else {
            copy[i].revents
        };
    }
    sys::put_user_slice(fds, &user)?;
    Ok(r + ready)
}

#[cfg(test)]
mod tests;
