//! Namespace operations: mkdir/mknod/symlink, unlink/rmdir (three-phase for
//! distributed directories, Hare §3.4.1), rename (one message when both
//! entries live on one server, client-coordinated otherwise, Hare §6.2.3),
//! link, readlink, getdents (directory broadcast, Hare §3.7.3), and the
//! working directory.
//!
//! Reference counting across servers. An entry is one reference to its
//! inode. A server that adds (`Link`, `MakeNode`, `Open` with `O_CREAT`) or
//! removes (`Unlink`, `Rename`) an entry adjusts the link count itself only
//! when it also owns the inode; otherwise the client sends `Ref`/`Unref` to
//! the owner (`Unlinked.freed_here` says which happened).

use atoll_proto::{FileType, InodeId, Reply, Request, UnlinkKind, ROOT};

use crate::error::{err, Error, Result};
use crate::fdtable::{self, DescRef};
use crate::path::matches_distribute;
use crate::session::{Client, Cwd, Lane};
use crate::sys;
use crate::walk::{HostPath, Last, LastKind, NodeStep, Step, Walker};
use crate::Out;

/// xattr a directory may carry to make its new subdirectories distributed.
pub const XATTR_DISTRIBUTED: &[u8] = b"user.atoll.distributed";

/// Resolve up to the final component. `Ok(Err(out))` when the path is not
/// atoll's (or leaves atoll).
fn parent<'a>(
    c: &'a Client,
    lane: &'a Lane,
    dirfd: i64,
    path: &[u8],
) -> Result<core::result::Result<(Box<Walker<'a>>, Last), Out>> {
    let Some(mut w) = Walker::start(c, lane, dirfd, path)? else {
        return Ok(Err(Out::Host));
    };
    match w.advance()? {
        Step::Host(p) => Ok(Err(Out::Rehost(p))),
        Step::Last(l) => Ok(Ok((w, l))),
    }
}

pub fn umask(c: &Client) -> u32 {
    c.umask.load(core::sync::atomic::Ordering::Relaxed)
}

/// Should a directory created as `name` in `w.dir` be distributed? Yes
/// in a distributed parent (made so, or swapped so by `setfattr -n
/// user.atoll.distributed -v 1`, `adapt`) and under a `--distribute`
/// path.
fn want_distributed(c: &Client, w: &Walker, name: &[u8]) -> bool {
    if c.info.without.dir_distribution || c.nservers < 2 {
        return false;
    }
    if crate::adapt::distributed(w.dir) {
        return true;
    }
    if let Ok(p) = w.child_path(name) {
        if matches_distribute(w.rel_to_mount(&p), &c.info.distribute) {
            return true;
        }
    }
    false
}

/// Linux's `filename_create` for a name that may not end in a slash
/// (anything but `mkdir`): given with one, the name is `EEXIST` when it
/// exists and `ENOENT` otherwise; without one, nothing to check here.
fn no_name_to_create(w: &Walker, name: &[u8], trailing_slash: bool) -> Result<()> {
    if !trailing_slash {
        return Ok(());
    }
    match w.lookup(w.dir, name) {
        Ok(_) => err(libc::EEXIST),
        Err(Error::Errno(e)) if e == libc::ENOENT => err(libc::ENOENT),
        Err(e) => Err(e),
    }
}

/// `MakeNode` in the final component's entry server; `perm` is the mode
/// asked for (the server applies the umask or the default ACL).
#[allow(clippy::too_many_arguments)]
fn make_node(
    c: &Client,
    w: &Walker,
    name: &[u8],
    ftype: FileType,
    perm: u32,
    rdev: u64,
    target: &[u8],
    distributed: bool,
) -> Result<InodeId> {
    // Creation affinity (Hare §3.7.5): a non-directory whose entry lives on
    // another socket goes to this process's local server; a new plain
    // directory to the server its name hashes to (`affinity`).
    if !distributed {
        // Placed elsewhere, the inode is made before its name is looked
        // at: an existing name is `EEXIST` also where the caller may not
        // write (Linux looks it up first, `filename_create`).
        match crate::affinity::try_make(c, w.lane, w.dir, name, ftype, perm, rdev, target) {
            Ok(Some(ino)) => return Ok(ino),
            Ok(None) => {}
            Err(Error::Errno(e)) if e == libc::EACCES && w.lookup(w.dir, name).is_ok() => {
                return err(libc::EEXIST)
            }
            Err(e) => return Err(e),
        }
    }
    let server = crate::adapt::entry_server(c, w.dir, name);
    // Otherwise the new inode lives where its entry is, and a directory's
    // own entries start on that same server.
    let home = server as u8;
    let vouched = crate::dirperm::vouches_for(c, w.lane, w.dir, server)?;
    crate::session::retry_marked(|| {
        w.lane.call_vouched(
            c,
            server,
            vouched.as_slice(),
            Request::MakeNode {
                dir: w.dir,
                name,
                ftype,
                perm,
                rdev,
                target,
                home,
                distributed,
                umask: umask(c),
                inherit: atoll_proto::Inherit::Unread,
            },
            |r| match r {
                Reply::Entry { ino, .. } => Ok(ino),
                _ => Err(Error::Protocol("MakeNode")),
            },
        )
    })
}

#[inline(never)]
pub fn mkdir(c: &Client, lane: &Lane, dirfd: i64, path: &[u8], mode: u32) -> Result<Out> {
    let (w, last) = match parent(c, lane, dirfd, path)? {
        Ok(x) => x,
        Err(o) => return Ok(o),
    };
    if last.kind != LastKind::Name {
        return err(libc::EEXIST);
    }
    let name = last.name.as_bytes();
    let dist = want_distributed(c, &w, name);
    make_node(
        c,
        &w,
        name,
        FileType::Directory,
        mode & 0o7777,
        0,
        b"",
        dist,
    )?;
    Ok(Out::Done(0))
}

#[inline(never)]
pub fn mknod(c: &Client, lane: &Lane, dirfd: i64, path: &[u8], mode: u32, dev: u64) -> Result<Out> {
    let (w, last) = match parent(c, lane, dirfd, path)? {
        Ok(x) => x,
        Err(o) => return Ok(o),
    };
    if last.kind != LastKind::Name {
        return err(libc::EEXIST);
    }
    let name = last.name.as_bytes();
    no_name_to_create(&w, name, last.trailing_slash)?;
    let perm = mode & 0o7777;
    let ftype = match mode & libc::S_IFMT {
        0 | libc::S_IFREG => {
            // A regular file: create (exclusively) and close at once.
            if crate::affinity::try_make(c, lane, w.dir, name, FileType::Regular, perm, 0, b"")?
                .is_some()
            {
                return Ok(Out::Done(0));
            }
            // A directory being removed answers EAGAIN: wait for its
            // outcome as every creation does (Hare §3.4.1).
            let server = crate::adapt::entry_server(c, w.dir, name);
            let vouched = crate::dirperm::vouches_for(c, lane, w.dir, server)?;
            let desc = crate::session::retry_marked(|| {
                lane.call_vouched(
                    c,
                    server,
                    vouched.as_slice(),
                    Request::Open {
                        dir: w.dir,
                        name,
                        flags: (libc::O_CREAT | libc::O_EXCL | libc::O_RDONLY) as u32,
                        perm: mode & 0o7777,
                        umask: umask(c),
                        inherit: atoll_proto::Inherit::Unread,
                    },
                    |r| match r {
                        Reply::Opened { desc, .. } => Ok(desc),
                        Reply::Entry { .. } | Reply::Symlink { .. } => err(libc::EEXIST),
                        _ => Err(Error::Protocol("Open")),
                    },
                )
            })?;
            lane.call_ok(c, desc.server(), Request::Close { desc })?;
            return Ok(Out::Done(0));
        }
        libc::S_IFDIR => return err(libc::EPERM),
        m => FileType::from_mode(m).ok_or(Error::Errno(libc::EINVAL))?,
    };
    make_node(c, &w, name, ftype, perm, dev, b"", false)?;
    Ok(Out::Done(0))
}

/// The node a Unix socket's `bind` makes at `path` (mode `0777 & ~umask`,
/// as Linux's `unix_bind`, which then goes through `vfs_mknod` as any
/// node: a default ACL of the directory masks it further), remembering
/// `address` for `getsockname`.
/// `Err(out)` when the path is not atoll's (`Host`) or leaves it (`Rehost`);
/// an existing name is `EADDRINUSE`.
pub fn make_socket(
    c: &Client,
    lane: &Lane,
    path: &[u8],
    address: &[u8],
) -> Result<core::result::Result<InodeId, Out>> {
    let (w, last) = match parent(c, lane, libc::AT_FDCWD as i64, path)? {
        Ok(x) => x,
        Err(o) => return Ok(Err(o)),
    };
    if last.kind != LastKind::Name || last.trailing_slash {
        return err(libc::EADDRINUSE);
    }
    let perm = 0o777 & !umask(c);
    let name = last.name.as_bytes();
    match make_node(c, &w, name, FileType::Socket, perm, 0, address, false) {
        Err(Error::Errno(libc::EEXIST)) => err(libc::EADDRINUSE),
        r => r.map(Ok),
    }
}

#[inline(never)]
pub fn symlink(c: &Client, lane: &Lane, target: &[u8], dirfd: i64, path: &[u8]) -> Result<Out> {
    let (w, last) = match parent(c, lane, dirfd, path)? {
        Ok(x) => x,
        Err(o) => return Ok(o),
    };
    if last.kind != LastKind::Name {
        return err(libc::EEXIST);
    }
    no_name_to_create(&w, last.name.as_bytes(), last.trailing_slash)?;
    if target.is_empty() {
        return err(libc::ENOENT);
    }
    make_node(
        c,
        &w,
        last.name.as_bytes(),
        FileType::Symlink,
        0o777,
        0,
        target,
        false,
    )?;
    Ok(Out::Done(0))
}

/// Remove entry `(dir, name)` and finish the owner's link count.
fn unlink_entry(
    c: &Client,
    lane: &Lane,
    dir: InodeId,
    name: &[u8],
    kind: UnlinkKind,
    expect: Option<InodeId>,
) -> Result<(InodeId, FileType)> {
    let server = crate::adapt::entry_server(c, dir, name);
    let mut vouched = crate::dirperm::vouches_for(c, lane, dir, server)?;
    let (ino, ftype, freed_here) =
        crate::dirperm::sticky_retry(c, lane, &[(dir, name)], &mut vouched, |v| {
            lane.call_vouched(
                c,
                server,
                v,
                Request::Unlink {
                    dir,
                    name,
                    kind,
                    expect,
                },
                |r| match r {
                    Reply::Unlinked {
                        ino,
                        ftype,
                        freed_here,
                    } => Ok((ino, ftype, freed_here)),
                    _ => Err(Error::Protocol("Unlink")),
                },
            )
        })?;
    if !freed_here {
        let via = Some(atoll_proto::EntryName { dir, name });
        let _ = lane.call_ok(c, ino.owner(), Request::Unref { ino, via });
    }
    Ok((ino, ftype))
}

#[inline(never)]
pub fn unlink(c: &Client, lane: &Lane, dirfd: i64, path: &[u8], flags: i32) -> Result<Out> {
    if flags & !libc::AT_REMOVEDIR != 0 {
        return err(libc::EINVAL);
    }
    let (w, last) = match parent(c, lane, dirfd, path)? {
        Ok(x) => x,
        Err(o) => return Ok(o),
    };
    if flags & libc::AT_REMOVEDIR != 0 {
        return rmdir_at(c, lane, &w, &last);
    }
    if last.kind != LastKind::Name {
        return err(libc::EISDIR);
    }
    let name = last.name.as_bytes();
    if last.trailing_slash {
        let (_, ft) = w.lookup(w.dir, name)?;
        return err(if ft == FileType::Directory {
            libc::EISDIR
        } else {
            libc::ENOTDIR
        });
    }
    unlink_entry(c, lane, w.dir, name, UnlinkKind::NonDirectory, None)?;
    Ok(Out::Done(0))
}

#[inline(never)]
pub fn rmdir(c: &Client, lane: &Lane, path: &[u8]) -> Result<Out> {
    let (w, last) = match parent(c, lane, libc::AT_FDCWD as i64, path)? {
        Ok(x) => x,
        Err(o) => return Ok(o),
    };
    rmdir_at(c, lane, &w, &last)
}

/// Servers an rmdir of directory `ino` marks (Hare §3.4.1): every server
/// that may hold its entries, home first (it serializes concurrent
/// rmdirs), and its owner, whose mark stops a cross-server move of it from
/// starting (and which waits for one under way), so a move's new name
/// never outlives the directory.
fn mark_servers(c: &Client, ino: InodeId) -> Vec<usize> {
    let mut v = vec![ino.home()];
    if crate::adapt::distributed(ino) && c.nservers > 1 {
        v.extend((0..c.nservers).filter(|&s| s != ino.home()));
    } else if ino.owner() != ino.home() {
        v.push(ino.owner());
    }
    v
}

/// rmdir: when the directory's entries all live on the server holding its
/// own entry, one `Unlink` does it (the server checks emptiness). Otherwise
/// the three-phase protocol of Hare §3.4.1: mark on every server holding
/// entries (home first; fails with ENOTEMPTY), remove the entry, then
/// commit — or abort every mark on any failure.
///
/// Concurrent rmdirs of one directory: the home server's mark serializes
/// them; a loser waits for the winner's outcome (its mark answers `EAGAIN`
/// until then) and sees `ENOENT` after a commit, or decides itself after an
/// abort — never `EBUSY`, as on Linux.
fn rmdir_at(c: &Client, lane: &Lane, w: &Walker, last: &Last) -> Result<Out> {
    match last.kind {
        LastKind::Dot => return err(libc::EINVAL),
        LastKind::DotDot => return err(libc::ENOTEMPTY),
        LastKind::Root => return err(libc::EBUSY),
        LastKind::Name => {}
    }
    let name = last.name.as_bytes();
    let mut attempts = 0;
    loop {
        attempts += 1;
        let (ino, ftype) = w.lookup(w.dir, name)?;
        if ftype != FileType::Directory {
            // Permission to remove the name comes first (`may_delete`).
            crate::dirperm::check_removable(c, lane, w.dir, ino)?;
            return err(libc::ENOTDIR);
        }
        if ino == ROOT {
            return err(libc::EBUSY);
        }
        // Linux allows removing the cwd (it becomes unreachable): no check.
        let servers = mark_servers(c, ino);
        let esrv = crate::adapt::entry_server(c, w.dir, name);
        let r = if servers == [esrv] {
            // The server waits out a move of the directory under way
            // (`EAGAIN`), as the owner's mark does below.
            crate::session::retry_marked(|| {
                unlink_entry(c, lane, w.dir, name, UnlinkKind::Directory, Some(ino))
            })
            .map(|_| ())
        } else {
            crate::counters::bump(&crate::counters::THREE_PHASE_RMDIRS);
            let marked = match mark_dir(c, lane, ino) {
                // Permission to remove the name comes before emptiness
                // (`may_delete`), which the marks found first.
                Err(Error::Errno(e)) if e == libc::ENOTEMPTY => {
                    crate::dirperm::check_removable(c, lane, w.dir, ino)?;
                    return err(e);
                }
                r => r?,
            };
            let r = unlink_entry(c, lane, w.dir, name, UnlinkKind::Directory, Some(ino));
            finish_marks(c, lane, ino, &marked, r.is_ok());
            r.map(|_| ())
        };
        match r {
            // The directory's mode changed (`adapt`): mark where it is now.
            Err(Error::Errno(e)) if e == crate::adapt::EMODE && attempts < 64 => {
                crate::adapt::refresh(c, lane, ino)?;
                continue;
            }
            // The name now names another inode (a rename won): look again.
            Err(Error::Errno(e)) if e == libc::ESTALE && attempts < 64 => continue,
            Err(Error::Errno(e)) if e == libc::ESTALE => return err(libc::ENOENT),
            r => return r.map(|()| Out::Done(0)),
        }
    }
}

/// Phases 1 and 2 of Hare §3.4.1 for directory `ino`: mark it for deletion
/// on its home server alone (the serialization point; a directory already
/// marked there makes us wait for that rmdir's outcome), then on every
/// other server holding its entries at once (directory broadcast, Hare
/// §3.7.3; one by one `--without broadcast`). Fails with `ENOTEMPTY` if any
/// server holds an entry, `ENOENT` if the directory is gone; on failure no
/// mark is left. Returns the servers marked, for [`finish_marks`].
fn mark_dir(c: &Client, lane: &Lane, ino: InodeId) -> Result<Vec<usize>> {
    crate::session::retry_marked(|| try_mark_dir(c, lane, ino))
}

/// One attempt of [`mark_dir`]: `EAGAIN` (another rmdir or a move of the
/// directory under way) leaves no mark behind.
fn try_mark_dir(c: &Client, lane: &Lane, ino: InodeId) -> Result<Vec<usize>> {
    let servers = mark_servers(c, ino);
    let epoch = crate::adapt::epoch(ino);
    let mark = || Request::MarkRmdir { dir: ino, epoch };
    {
        match lane.call_ok(c, servers[0], mark()) {
            // A swap moved (or moves) the entries (`adapt`): mark where
            // they are now, from phase 1 (`retry_marked`).
            Err(Error::Errno(e)) if e == crate::adapt::EMODE => {
                crate::adapt::refresh(c, lane, ino)?;
                return err(libc::EAGAIN);
            }
            r => r?,
        }
        let mut marked = vec![servers[0]];
        let rest = &servers[1..];
        let mut failure = None;
        let results = crate::bcast::all_ok(c, lane, rest, mark);
        for (&s, r) in rest.iter().zip(results) {
            match r {
                Ok(()) => marked.push(s),
                Err(e) => {
                    if failure.is_none() {
                        failure = Some(e)
                    }
                }
            }
        }
        match failure {
            None => Ok(marked),
            // EAGAIN here (a mark the home server did not serialize) is
            // retried from phase 1 after the abort.
            Some(e) => {
                finish_marks(c, lane, ino, &marked, false);
                match e {
                    Error::Errno(m) if m == crate::adapt::EMODE => {
                        crate::adapt::refresh(c, lane, ino)?;
                        err(libc::EAGAIN)
                    }
                    e => Err(e),
                }
            }
        }
    }
}

/// Phase 3 of Hare §3.4.1: commit (the directory is gone) or abort on
/// every server [`mark_dir`] marked.
fn finish_marks(c: &Client, lane: &Lane, ino: InodeId, marked: &[usize], commit: bool) {
    for &s in marked {
        let _ = lane.call_ok(c, s, Request::FinishRmdir { dir: ino, commit });
    }
}

/// Both paths of a two-path call, resolved to their parents.
enum Pair<'a> {
    /// Neither is atoll's.
    Host,
    /// Both leave atoll: run on the host with these paths.
    Rehost(Option<HostPath>, Option<HostPath>),
    Atoll(Box<(Box<Walker<'a>>, Last)>, Box<(Box<Walker<'a>>, Last)>),
}

fn pair<'a>(
    c: &'a Client,
    lane: &'a Lane,
    d1: i64,
    p1: &[u8],
    d2: i64,
    p2: &[u8],
) -> Result<Pair<'a>> {
    let a = parent(c, lane, d1, p1)?;
    let b = parent(c, lane, d2, p2)?;
    match (a, b) {
        (Err(Out::Host), Err(Out::Host)) => Ok(Pair::Host),
        (Ok(x), Ok(y)) => Ok(Pair::Atoll(Box::new(x), Box::new(y))),
        (Err(x), Err(y)) => {
            let f = |o| match o {
                Out::Rehost(p) => Some(p),
                _ => None,
            };
            Ok(Pair::Rehost(f(x), f(y)))
        }
        _ => err(libc::EXDEV),
    }
}

/// Issue a two-path `*at` call on the host with rewritten paths.
#[allow(clippy::too_many_arguments)]
fn host_pair(
    nr: i64,
    d1: i64,
    p1: u64,
    d2: i64,
    p2: u64,
    flags: u64,
    r1: &Option<HostPath>,
    r2: &Option<HostPath>,
) -> i64 {
    let (d1, p1) = match r1 {
        Some(p) => (libc::AT_FDCWD as i64, p.as_ptr() as u64),
        None => (d1, p1),
    };
    let (d2, p2) = match r2 {
        Some(p) => (libc::AT_FDCWD as i64, p.as_ptr() as u64),
        None => (d2, p2),
    };
    // SAFETY: the program's own arguments, with paths replaced by our
    // NUL-terminated buffers that outlive the call.
    unsafe { sys::syscall6(nr, [d1 as u64, p1, d2 as u64, p2, flags, 0]) }
}

/// `renameat2(d1, p1, d2, p2, flags)`.
#[inline(never)]
pub fn rename(
    c: &Client,
    lane: &Lane,
    d1: i64,
    p1: u64,
    d2: i64,
    p2: u64,
    flags: u32,
) -> Result<Out> {
    let (s1, s2) = (sys::user_path(p1)?, sys::user_path(p2)?);
    if s1.is_empty() || s2.is_empty() {
        return Ok(Out::Host);
    }
    let (mut a, b) = match pair(c, lane, d1, s1, d2, s2)? {
        Pair::Host => return Ok(Out::Host),
        Pair::Rehost(r1, r2) => {
            return Ok(Out::Done(host_pair(
                libc::SYS_renameat2,
                d1,
                p1,
                d2,
                p2,
                flags as u64,
                &r1,
                &r2,
            )))
        }
        Pair::Atoll(a, b) => (a, b),
    };
    let noreplace = flags & libc::RENAME_NOREPLACE != 0;
    let exchange = flags & libc::RENAME_EXCHANGE != 0;
    if flags & !(libc::RENAME_NOREPLACE | libc::RENAME_EXCHANGE) != 0 || (noreplace && exchange) {
        return err(libc::EINVAL);
    }
    let (w1, l1) = (&mut a.0, &a.1);
    let (w2, l2) = (&b.0, &b.1);
    if l1.kind != LastKind::Name || l2.kind != LastKind::Name {
        return err(libc::EBUSY);
    }
    let (n1, n2) = (l1.name.as_bytes(), l2.name.as_bytes());
    let (dir1, dir2) = (w1.dir, w2.dir);
    let srv1 = crate::adapt::entry_server(c, dir1, n1);
    let srv2 = crate::adapt::entry_server(c, dir2, n2);
    // Within one directory on one server no ancestry check is needed: one
    // message, and the server applies every rule atomically (Hare §3.7.4).
    let same_dir_fast_path =
        dir1 == dir2 && srv1 == srv2 && !l1.trailing_slash && !l2.trailing_slash;
    if same_dir_fast_path {
        // `ESTALE`: the server will not replace a directory whose entries
        // may live elsewhere without its marks; the checked path marks it.
        match same_server_rename(c, lane, srv1, (dir1, n1), (dir2, n2), flags) {
            Err(Error::Errno(e)) if e == libc::ESTALE => {}
            // The directory's mode changed (`adapt`): the checked path
            // routes again.
            Err(Error::Errno(e)) if e == crate::adapt::EMODE => {
                crate::adapt::refresh(c, lane, dir1)?;
            }
            r => return r,
        }
    }
    rename_checked(
        c,
        lane,
        w1,
        (dir1, n1, l1.trailing_slash),
        (dir2, n2, l2.trailing_slash),
        flags,
    )
}

/// Rename after the client-side checks that need lookups: trailing slashes,
/// moving a directory into its own subtree, and an empty directory to be
/// replaced whose entries may live on other servers (marked like an rmdir,
/// Hare §3.4.1, so no creation slips in). `ESTALE` from a server means the
/// names changed under us (a concurrent rename or mkdir): look again.
///
/// `EAGAIN` means another rename or an rmdir holds what this one needs
/// (a directory mid-move, a marked victim) while this one held a `Ref` or
/// marks of its own: the attempt undid everything, and waits a randomized
/// while before the next, so two renames that each hold what the other
/// needs back off instead of waiting for each other forever.
fn rename_checked(
    c: &Client,
    lane: &Lane,
    w1: &mut Walker,
    old: (InodeId, &[u8], bool),
    new: (InodeId, &[u8], bool),
    flags: u32,
) -> Result<Out> {
    let mut stale = 0;
    let mut backoff = Backoff::new();
    loop {
        match rename_attempt(c, lane, w1, old, new, flags) {
            Err(Error::Errno(e)) if e == crate::adapt::EMODE && stale < 64 => {
                crate::adapt::refresh(c, lane, old.0)?;
                crate::adapt::refresh(c, lane, new.0)?;
                stale += 1;
            }
            Err(Error::Errno(e)) if e == libc::ESTALE && stale < 64 => stale += 1,
            Err(Error::Errno(e)) if e == libc::ESTALE => return err(libc::ENOENT),
            Err(Error::Errno(e)) if e == libc::EAGAIN && backoff.wait() => {}
            r => return r,
        }
    }
}

/// Randomized exponential back-off for restarted namespace operations:
/// 20 µs doubling to 5 ms, each wait a random 50-100 % of that, for at
/// most 10 s in all (then the caller's `EAGAIN` stands).
struct Backoff {
    ceiling_ns: u64,
    total_ns: u64,
}

impl Backoff {
    fn new() -> Self {
        Backoff {
            ceiling_ns: 20_000,
            total_ns: 0,
        }
    }

    /// Sleep before the next attempt; false once the budget is spent.
    fn wait(&mut self) -> bool {
        if self.total_ns >= 10_000_000_000 {
            return false;
        }
        // The clock's low bits differ between contending processes.
        let mix = (sys::monotonic_ns() as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32;
        let half = self.ceiling_ns / 2;
        let ns = half + mix % (half + 1);
        sys::sleep_ns(ns);
        self.total_ns += ns;
        self.ceiling_ns = (self.ceiling_ns * 2).min(5_000_000);
        true
    }
}

fn rename_attempt(
    c: &Client,
    lane: &Lane,
    w1: &mut Walker,
    (dir1, n1, slash1): (InodeId, &[u8], bool),
    (dir2, n2, slash2): (InodeId, &[u8], bool),
    flags: u32,
) -> Result<Out> {
    let noreplace = flags & libc::RENAME_NOREPLACE != 0;
    let exchange = flags & libc::RENAME_EXCHANGE != 0;
    let (ino1, ft1) = w1.lookup(dir1, n1)?;
    if (slash1 || slash2) && ft1 != FileType::Directory {
        return err(libc::ENOTDIR);
    }
    let target = match w1.lookup(dir2, n2) {
        Ok(t) => Some(t),
        Err(Error::Errno(e)) if e == libc::ENOENT => None,
        Err(e) => return Err(e),
    };
    if let Some((ino2, _)) = target {
        if noreplace {
            return err(libc::EEXIST);
        }
        if ino2 == ino1 && !exchange {
            return Ok(Out::Done(0)); // two links of one inode: nothing to do
        }
    } else if exchange {
        return err(libc::ENOENT);
    }
    // Moves of directories between parents are serialized (as Linux's
    // `s_vfs_rename_mutex`), so the ancestry walk below stays true until
    // the move is done: two concurrent moves could otherwise each pass the
    // check and together detach a cycle from the tree.
    let moves_dir = ft1 == FileType::Directory
        || (exchange && target.is_some_and(|t| t.1 == FileType::Directory));
    let _lock = if moves_dir && dir1 != dir2 {
        Some(DirMoveLock::take(c, lane)?)
    } else {
        None
    };
    // Linux's order (`do_renameat2`): ancestry first, then types. A
    // directory may not move into its own subtree (EINVAL), and a target
    // that is an ancestor of the source is not empty (ENOTEMPTY; EINVAL
    // for an exchange). The client knows ancestry from `..` lookups
    // (servers do not talk to each other).
    if ft1 == FileType::Directory && dir1 != dir2 {
        check_not_ancestor(w1, ino1, dir2)?;
    }
    if let Some((ino2, FileType::Directory)) = target {
        if dir1 != dir2 {
            match check_not_ancestor(w1, ino2, dir1) {
                Err(Error::Errno(e)) if e == libc::EINVAL && !exchange => {
                    return err(libc::ENOTEMPTY)
                }
                r => r?,
            }
        }
    }
    if let (Some((ino2, ft2)), false) = (target, exchange) {
        let mismatch = match (ft1 == FileType::Directory, ft2 == FileType::Directory) {
            (true, false) => Some(libc::ENOTDIR),
            (false, true) => Some(libc::EISDIR),
            _ => None,
        };
        if let Some(e) = mismatch {
            // Linux asks whether both names may be removed (`may_delete`
            // of each, `EACCES`, `EPERM`) before it compares their types.
            crate::dirperm::check_removable(c, lane, dir1, ino1)?;
            crate::dirperm::check_removable(c, lane, dir2, ino2)?;
            return err(e);
        }
    }
    let srv1 = crate::adapt::entry_server(c, dir1, n1);
    let srv2 = crate::adapt::entry_server(c, dir2, n2);
    // A directory replaced by the move must be empty on every server that
    // may hold its entries; the new name's server can vouch only for its
    // own (Hare §3.4.1).
    let victim = match target {
        Some((ino2, FileType::Directory)) if !exchange && mark_servers(c, ino2) != [srv2] => {
            Some(ino2)
        }
        _ => None,
    };
    if srv1 == srv2 {
        let Some(v) = victim else {
            return same_server_rename(c, lane, srv1, (dir1, n1), (dir2, n2), flags);
        };
        let marked = mark_victim(c, lane, v)?;
        let r = same_server_rename_replacing(
            c,
            lane,
            srv1,
            (dir1, n1),
            (dir2, n2),
            flags | atoll_proto::RENAME_VICTIM_MARKED,
        );
        // Commit only if the marked directory is what the rename replaced:
        // it may have moved away meanwhile (marks do not pin a name).
        finish_marks(c, lane, v, &marked, matches!(r, Ok(Some(x)) if x == v));
        return r.map(|_| Out::Done(0));
    }
    if exchange {
        let (ino2, ft2) = target.ok_or(Error::Errno(libc::ENOENT))?;
        cross_server_exchange(
            c,
            lane,
            (dir1, n1, ino1, ft1, srv1),
            (dir2, n2, ino2, ft2, srv2),
        )?;
        return Ok(Out::Done(0));
    }
    cross_server_rename(c, lane, (dir1, n1, ino1, ft1), (dir2, n2), victim)?;
    Ok(Out::Done(0))
}

/// The instance's lock on moves of directories between parents, held
/// while this lives (`Request::RenameLock` on server 0).
struct DirMoveLock<'a> {
    c: &'a Client,
    lane: &'a Lane,
}

impl<'a> DirMoveLock<'a> {
    fn take(c: &'a Client, lane: &'a Lane) -> Result<Self> {
        crate::session::retry_marked(|| {
            lane.call_ok(c, ROOT.owner(), Request::RenameLock { acquire: true })
        })?;
        Ok(DirMoveLock { c, lane })
    }
}

impl Drop for DirMoveLock<'_> {
    fn drop(&mut self) {
        let _ = self
            .lane
            .call_ok(self.c, ROOT.owner(), Request::RenameLock { acquire: false });
    }
}

/// Mark a directory about to be replaced (as rmdir phase 1-2); `ENOENT`
/// (it went away meanwhile) becomes `ESTALE`, so the rename looks again.
/// Never waits: the caller may hold a `Ref` another rename waits for, so
/// `EAGAIN` goes back to [`rename_checked`], which backs off.
fn mark_victim(c: &Client, lane: &Lane, v: InodeId) -> Result<Vec<usize>> {
    match try_mark_dir(c, lane, v) {
        Err(Error::Errno(e)) if e == libc::ENOENT => err(libc::ESTALE),
        r => r,
    }
}

/// Rename when both entries live on one server: one `Rename` message, then
/// the follow-ups only a client can send (servers never talk to each other):
/// `Unref` of a replaced inode owned elsewhere, `SetParent` of moved
/// directories. A new directory being removed (`EAGAIN`) is waited for.
fn same_server_rename(
    c: &Client,
    lane: &Lane,
    srv: usize,
    old: (InodeId, &[u8]),
    new: (InodeId, &[u8]),
    flags: u32,
) -> Result<Out> {
    same_server_rename_replacing(c, lane, srv, old, new, flags).map(|_| Out::Done(0))
}

/// [`same_server_rename`], answering which inode the new name named
/// before (if any).
fn same_server_rename_replacing(
    c: &Client,
    lane: &Lane,
    srv: usize,
    (dir1, n1): (InodeId, &[u8]),
    (dir2, n2): (InodeId, &[u8]),
    flags: u32,
) -> Result<Option<InodeId>> {
    let exchange = flags & libc::RENAME_EXCHANGE != 0;
    let mut vouched = crate::dirperm::vouches_for(c, lane, dir1, srv)?;
    crate::dirperm::vouch_dir(c, lane, dir2, srv, &mut vouched)?;
    let victims = [(dir1, n1), (dir2, n2)];
    let (moved, mft, replaced) =
        crate::dirperm::sticky_retry(c, lane, &victims, &mut vouched, |v| {
            crate::session::retry_marked(|| {
                lane.call_vouched(
                    c,
                    srv,
                    v,
                    Request::Rename {
                        olddir: dir1,
                        oldname: n1,
                        newdir: dir2,
                        newname: n2,
                        flags,
                    },
                    |r| match r {
                        Reply::Renamed {
                            moved,
                            ftype,
                            replaced,
                        } => Ok((moved, ftype, replaced)),
                        _ => Err(Error::Protocol("Rename")),
                    },
                )
            })
        })?;
    if let Some((rino, _, freed_here)) = replaced {
        if !freed_here && !exchange {
            let _ = lane.call_ok(
                c,
                rino.owner(),
                Request::Unref {
                    ino: rino,
                    via: None,
                },
            );
        }
    }
    if mft == FileType::Directory && dir1 != dir2 {
        let _ = lane.call_ok(
            c,
            moved.home(),
            Request::SetParent {
                dir: moved,
                parent: dir2,
            },
        );
    }
    if exchange && dir1 != dir2 {
        if let Some((rino, FileType::Directory, _)) = replaced {
            let _ = lane.call_ok(
                c,
                rino.home(),
                Request::SetParent {
                    dir: rino,
                    parent: dir1,
                },
            );
        }
    }
    Ok(replaced.map(|r| r.0))
}

/// Walk `..` up from `from` to the root: `EINVAL` if `moved` is on the way.
fn check_not_ancestor(w: &Walker, moved: InodeId, from: InodeId) -> Result<()> {
    let mut cur = from;
    for _ in 0..4096 {
        if cur == moved {
            return err(libc::EINVAL);
        }
        if cur == ROOT {
            return Ok(());
        }
        cur = w.lookup(cur, b"..")?.0;
    }
    err(libc::ELOOP)
}

/// `RENAME_EXCHANGE` of two entries on different servers (Hare §6.2.3):
/// `Relink` the second name to the first inode, then the first name to the
/// second inode (each expecting the inode it named, `ESTALE` otherwise: a
/// concurrent rename won, undo and look again), then `MoveDone` to both
/// servers and `SetParent` of exchanged directories. No link count moves:
/// each inode trades one name for another, directories keep their entries.
/// Until `MoveDone` each new name is provisional: a process dying in
/// between leaves both names as they were.
fn cross_server_exchange(
    c: &Client,
    lane: &Lane,
    (dir1, n1, ino1, ft1, srv1): (InodeId, &[u8], InodeId, FileType, usize),
    (dir2, n2, ino2, ft2, srv2): (InodeId, &[u8], InodeId, FileType, usize),
) -> Result<()> {
    // `EAGAIN` (a name another move holds for the moment, Hare §6.2.3)
    // is not waited for here: the first half may already be done, so the
    // attempt is undone and restarted by `rename_checked`.
    let relink = |dir: InodeId,
                  name: &[u8],
                  (ino, ftype): (InodeId, FileType),
                  expect: InodeId,
                  server: usize| {
        let mut vouched = crate::dirperm::vouches_for(c, lane, dir, server)?;
        crate::dirperm::sticky_retry(c, lane, &[(dir, name)], &mut vouched, |v| {
            lane.call_vouched(
                c,
                server,
                v,
                Request::Relink {
                    dir,
                    name,
                    ino,
                    ftype,
                    expect,
                },
                |r| match r {
                    Reply::Ok => Ok(()),
                    _ => Err(Error::Protocol("Relink")),
                },
            )
        })
    };
    let done = |dir: InodeId, name: &[u8], server: usize| {
        let _ = lane.call_ok(c, server, Request::MoveDone { dir, name });
    };
    // Both names must be replaceable before either changes: an undo
    // refused by a sticky directory would leave one inode under two names.
    crate::dirperm::check_removable(c, lane, dir1, ino1)?;
    crate::dirperm::check_removable(c, lane, dir2, ino2)?;
    relink(dir2, n2, (ino1, ft1), ino2, srv2)?;
    if let Err(e) = relink(dir1, n1, (ino2, ft2), ino1, srv1) {
        let _ = relink(dir2, n2, (ino2, ft2), ino1, srv2);
        done(dir2, n2, srv2);
        return Err(e);
    }
    done(dir2, n2, srv2);
    done(dir1, n1, srv1);
    if dir1 != dir2 {
        for (ino, ft, parent) in [(ino1, ft1, dir2), (ino2, ft2, dir1)] {
            if ft == FileType::Directory {
                let _ = lane.call_ok(c, ino.home(), Request::SetParent { dir: ino, parent });
            }
        }
    }
    Ok(())
}

/// Rename whose two entries live on different servers, coordinated by the
/// client (Hare §6.2.3: servers never message each other):
///
/// 0. the old name must be removable (write permission, sticky bit), as
///    the undo of step 3 would need the same rights;
/// 1. `Ref` on the moved inode's owner (when the new name's server does not
///    own it); for a directory this waits while another move of it or an
///    rmdir of it is under way (holding nothing yet), so a directory never
///    has more than two names and a removed one never gains a new name;
/// 2. for a directory replacing one whose entries may live elsewhere, mark
///    that victim on its entry servers and owner (Hare §3.4.1);
/// 3. `Link{replace}` of the new name (readers see the old or the new
///    inode under it, never nothing);
///
/// From step 2 on this holds a `Ref` others may wait for, so it never
/// waits itself: `EAGAIN` undoes the attempt (see `rename_checked`).
/// 4. `Unlink{expect}` of the old name (`Move` for a directory: its
///    entries stay, even those on the old name's server);
/// 5. `MoveDone` to the new name's server for a directory (until then its
///    new name is provisional: removed if this process dies mid-way, as
///    the owner drops an unmatched `Ref`);
/// 6. `Unref`s, commit of the victim's marks, `SetParent` for `..`.
///
/// Moving a distributed directory is no different: its entries are placed
/// by its inode id, which a rename does not change (Hare §3.4).
fn cross_server_rename(
    c: &Client,
    lane: &Lane,
    old: (InodeId, &[u8], InodeId, FileType),
    new: (InodeId, &[u8]),
    victim: Option<InodeId>,
) -> Result<()> {
    let (dir1, n1, ino1, ft1) = old;
    let (dir2, n2) = new;
    let srv1 = crate::adapt::entry_server(c, dir1, n1);
    let srv2 = crate::adapt::entry_server(c, dir2, n2);
    let is_dir = |ft| ft == FileType::Directory;
    // Step 1: the extra reference the new name holds until the old goes.
    let take_ref = |ino: InodeId, ftype: FileType, server: usize| -> Result<()> {
        if ino.owner() == server {
            return Ok(()); // `Link` counts it there
        }
        crate::session::retry_marked(|| {
            lane.call(
                c,
                ino.owner(),
                Request::Ref { ino, link: false },
                |_| Ok(()),
            )
            .map_err(|e| match e {
                // An owner predating waits answered EPERM.
                Error::Errno(x) if x == libc::EPERM && is_dir(ftype) => Error::Errno(libc::EAGAIN),
                e => e,
            })
        })
    };
    let drop_ref = |ino: InodeId, server: usize| {
        if ino.owner() != server {
            let _ = lane.call_ok(c, ino.owner(), Request::Unref { ino, via: None });
        }
    };
    // Step 3: `Link{replace}`. `EAGAIN` (the new parent marked by an
    // rmdir, a victim mid-move) is not waited for here, holding the `Ref`:
    // the attempt is undone and restarted by `rename_checked`.
    let link = |dir: InodeId,
                name: &[u8],
                ino: InodeId,
                ftype: FileType,
                server: usize|
     -> Result<Option<(InodeId, FileType)>> {
        let mut vouched = crate::dirperm::vouches_for(c, lane, dir, server)?;
        crate::dirperm::sticky_retry(c, lane, &[(dir, name)], &mut vouched, |v| {
            lane.call_vouched(
                c,
                server,
                v,
                Request::Link {
                    dir,
                    name,
                    ino,
                    ftype,
                    replace: true,
                    moved_from: Some(atoll_proto::EntryName {
                        dir: dir1,
                        name: n1,
                    }),
                },
                |r| match r {
                    Reply::Linked { replaced } => Ok(replaced),
                    _ => Err(Error::Protocol("Link")),
                },
            )
        })
    };
    let move_done = |dir: InodeId, name: &[u8], ftype: FileType, server: usize| {
        if is_dir(ftype) {
            let _ = lane.call_ok(c, server, Request::MoveDone { dir, name });
        }
    };
    let unref_replaced = |rep: Option<(InodeId, FileType)>, server: usize| {
        if let Some((rino, _)) = rep {
            if rino.owner() != server {
                let _ = lane.call_ok(
                    c,
                    rino.owner(),
                    Request::Unref {
                        ino: rino,
                        via: None,
                    },
                );
            }
        }
    };
    let set_parent = |dir: InodeId, parent: InodeId| {
        let _ = lane.call_ok(c, dir.home(), Request::SetParent { dir, parent });
    };
    // Step 0: the old name must be removable before the new one exists
    // (see `dirperm::check_removable`).
    crate::dirperm::check_removable(c, lane, dir1, ino1)?;
    take_ref(ino1, ft1, srv2)?;
    // Step 2.
    let marked = match victim {
        Some(v) => match mark_victim(c, lane, v) {
            Ok(m) => m,
            Err(e) => {
                drop_ref(ino1, srv2);
                return Err(e);
            }
        },
        None => Vec::new(),
    };
    let finish = |commit: bool| {
        if let Some(v) = victim {
            finish_marks(c, lane, v, &marked, commit);
        }
    };
    let replaced = match link(dir2, n2, ino1, ft1, srv2) {
        Ok(r) => r,
        Err(e) => {
            finish(false);
            drop_ref(ino1, srv2);
            return Err(e);
        }
    };
    // Step 4. The old entry must still name the moved inode (ESTALE
    // otherwise: a concurrent rename won; undo our link and look again).
    let kind = if is_dir(ft1) {
        UnlinkKind::Move
    } else {
        UnlinkKind::NonDirectory
    };
    let removed = crate::dirperm::vouches_for(c, lane, dir1, srv1).and_then(|mut vouched| {
        crate::dirperm::sticky_retry(c, lane, &[(dir1, n1)], &mut vouched, |v| {
            lane.call_vouched(
                c,
                srv1,
                v,
                Request::Unlink {
                    dir: dir1,
                    name: n1,
                    kind,
                    expect: Some(ino1),
                },
                |r| match r {
                    Reply::Unlinked {
                        ino, freed_here, ..
                    } => Ok((ino, freed_here)),
                    _ => Err(Error::Protocol("Unlink")),
                },
            )
        })
    });
    let freed_here = match removed {
        Ok((_, f)) => f,
        Err(e) => {
            let undo = if is_dir(ft1) { UnlinkKind::Move } else { kind };
            let _ = unlink_entry(c, lane, dir2, n2, undo, Some(ino1));
            // The victim, if replaced already, is gone.
            finish(replaced.map(|r| r.0) == victim);
            unref_replaced(replaced, srv2);
            return Err(e);
        }
    };
    // Step 5 and 6.
    move_done(dir2, n2, ft1, srv2);
    if !freed_here {
        let _ = lane.call_ok(
            c,
            ino1.owner(),
            Request::Unref {
                ino: ino1,
                via: None,
            },
        );
    }
    unref_replaced(replaced, srv2);
    // Commit only if the marked directory is what `Link` replaced: it may
    // have moved away meanwhile (marks do not pin a name).
    finish(replaced.map(|r| r.0) == victim);
    if is_dir(ft1) && dir1 != dir2 {
        set_parent(ino1, dir2);
    }
    Ok(())
}

/// `linkat(d1, p1, d2, p2, flags)`.
#[inline(never)]
pub fn link(
    c: &Client,
    lane: &Lane,
    d1: i64,
    p1: u64,
    d2: i64,
    p2: u64,
    flags: i32,
) -> Result<Out> {
    if flags & !(libc::AT_SYMLINK_FOLLOW | libc::AT_EMPTY_PATH) != 0 {
        return err(libc::EINVAL);
    }
    let s2 = sys::user_path(p2)?;
    let follow = flags & libc::AT_SYMLINK_FOLLOW != 0;
    let src = crate::meta::resolve(c, lane, d1, p1, follow, flags & libc::AT_EMPTY_PATH != 0)?;
    let dst = if s2.is_empty() {
        Err(Out::Host)
    } else {
        parent(c, lane, d2, s2)?
    };
    let (ino, ftype) = match (src, dst) {
        (crate::meta::Target::Host, Err(Out::Host)) => return Ok(Out::Host),
        (crate::meta::Target::Node { ino, ftype, .. }, Ok(_)) => (ino, ftype),
        (crate::meta::Target::Rehost(a), Err(Out::Rehost(b))) => {
            return Ok(Out::Done(host_pair(
                libc::SYS_linkat,
                d1,
                p1,
                d2,
                p2,
                flags as u64,
                &Some(a),
                &Some(b),
            )))
        }
        _ => return err(libc::EXDEV),
    };
    let (w, last) = parent(c, lane, d2, s2)?.map_err(|_| Error::Errno(libc::EXDEV))?;
    if last.kind != LastKind::Name {
        return err(libc::EEXIST);
    }
    let name = last.name.as_bytes();
    if ftype == FileType::Directory || last.trailing_slash {
        // Linux looks the new name up first (`filename_create`): an
        // existing one is `EEXIST`, a missing one with a slash `ENOENT`;
        // only then is a directory refused (`EPERM`).
        match w.lookup(w.dir, name) {
            Ok(_) => return err(libc::EEXIST),
            Err(Error::Errno(e)) if e == libc::ENOENT && last.trailing_slash => {
                return Err(e.into())
            }
            Err(Error::Errno(e)) if e == libc::ENOENT => return err(libc::EPERM),
            Err(e) => return Err(e),
        }
    }
    for _ in 0..64 {
        match link_once(c, lane, &w, name, ino, ftype) {
            // The directory's mode changed under the link (`adapt`): its
            // `Ref` was undone; route again.
            Err(Error::Errno(e)) if e == crate::adapt::EMODE => {
                crate::adapt::refresh(c, lane, w.dir)?;
            }
            r => return r,
        }
    }
    err(libc::EAGAIN)
}

/// One attempt of a hard link: `Ref` at the owner unless the entry's
/// server owns the inode, then `Link` there.
fn link_once(
    c: &Client,
    lane: &Lane,
    w: &Walker,
    name: &[u8],
    ino: InodeId,
    ftype: FileType,
) -> Result<Out> {
    let server = crate::adapt::entry_server(c, w.dir, name);
    let vouched = crate::dirperm::vouches_for(c, lane, w.dir, server)?;
    if ino.owner() != server {
        if let Err(e) = crate::dirperm::check_creatable(c, lane, w.dir) {
            // Linux looks the new name up before it asks for write
            // permission (`filename_create`): an existing one is `EEXIST`.
            return match w.lookup(w.dir, name) {
                Ok(_) => err(libc::EEXIST),
                Err(_) => Err(e),
            };
        }
        lane.call(c, ino.owner(), Request::Ref { ino, link: true }, |_| Ok(()))?;
    }
    let r = crate::session::retry_marked(|| {
        lane.call_vouched(
            c,
            server,
            vouched.as_slice(),
            Request::Link {
                dir: w.dir,
                name,
                ino,
                ftype,
                replace: false,
                moved_from: None,
            },
            |r| match r {
                Reply::Linked { .. } => Ok(()),
                _ => Err(Error::Protocol("Link")),
            },
        )
    });
    if r.is_err() && ino.owner() != server {
        let _ = lane.call_ok(c, ino.owner(), Request::Unref { ino, via: None });
    }
    r?;
    Ok(Out::Done(0))
}

/// `readlinkat(dirfd, path, buf, size)`.
#[inline(never)]
pub fn readlink(
    c: &Client,
    lane: &Lane,
    dirfd: i64,
    path: u64,
    buf: u64,
    size: i64,
) -> Result<Out> {
    let t = crate::meta::resolve(c, lane, dirfd, path, false, true)?;
    let ino = match t {
        crate::meta::Target::Host => return Ok(Out::Host),
        crate::meta::Target::Rehost(p) => return Ok(Out::Rehost(p)),
        crate::meta::Target::Node { ino, ftype, .. } => {
            if ftype != FileType::Symlink {
                return err(libc::EINVAL);
            }
            ino
        }
    };
    if size <= 0 {
        return err(libc::EINVAL);
    }
    let n = lane.call(c, ino.owner(), Request::ReadLink { ino }, |r| match r {
        Reply::Target(t) => {
            let n = t.len().min(size as usize);
            sys::copy_to_user(buf, &t[..n])?;
            Ok(n)
        }
        _ => Err(Error::Protocol("ReadLink")),
    })?;
    Ok(Out::Done(n as i64))
}

// Cookie of a distributed directory: server index in the top byte, the
// server's own cookie below, so positions are stable for telldir/seekdir
// whether the servers are read one at a time or by broadcast (Hare §3.7.3).
use crate::bcast::{SRV_MASK, SRV_SHIFT};

/// `getdents64(fd, buf, count)` on an atoll directory.
#[inline(never)]
pub fn getdents64(c: &Client, lane: &Lane, d: &DescRef, buf: &mut [u8]) -> Result<i64> {
    if d.ftype() != FileType::Directory {
        return err(libc::ENOTDIR);
    }
    if d.flags() & libc::O_PATH as u32 != 0 {
        return err(libc::EBADF);
    }
    crate::inotify::dir_listed(c, lane, d, || list(c, lane, d, buf))
}

/// [`getdents64`] past its checks.
fn list(c: &Client, lane: &Lane, d: &DescRef, buf: &mut [u8]) -> Result<i64> {
    let dir = d.ino();
    let cookie = d.cookie().load(core::sync::atomic::Ordering::Relaxed);
    let max_bytes = buf.len().min(u32::MAX as usize) as u32;
    if !dir.is_distributed() || c.nservers < 2 {
        return getdents_adaptive(c, lane, d, cookie, buf);
    }
    if crate::bcast::enabled(c) {
        // Directory broadcast (Hare §3.7.3): all servers at once.
        let (n, next) = crate::bcast::getdents(c, lane, dir, cookie, buf, |i| order(c, dir, i))?;
        d.cookie()
            .store(next, core::sync::atomic::Ordering::Relaxed);
        return Ok(n as i64);
    }
    let mut si = (cookie >> SRV_SHIFT) as usize;
    let mut sc = cookie & SRV_MASK;
    while si < c.nservers {
        // Visit servers in a fixed order, the home server first so `.` and
        // `..` come first.
        let server = order(c, dir, si);
        let (n, next) = read_dir_chunk(c, lane, dir, server, sc, max_bytes, buf, Some(si))?;
        if n > 0 {
            let nx = next.unwrap_or(cookie);
            d.cookie().store(nx, core::sync::atomic::Ordering::Relaxed);
            return Ok(n as i64);
        }
        si += 1;
        sc = 0;
        d.cookie().store(
            (si as u64) << SRV_SHIFT,
            core::sync::atomic::Ordering::Relaxed,
        );
    }
    Ok(0)
}

/// `getdents64` of a directory made centralized, which a swap may have
/// distributed (`adapt`): its cookies are one sequence in either mode, so
/// a listing goes on where it was whatever the mode now.
fn getdents_adaptive(
    c: &Client,
    lane: &Lane,
    d: &DescRef,
    cookie: u64,
    buf: &mut [u8],
) -> Result<i64> {
    let dir = d.ino();
    let max_bytes = buf.len().min(u32::MAX as usize) as u32;
    for _ in 0..64 {
        let r = if crate::adapt::adapted_spread(dir) && c.nservers > 1 {
            crate::adapt::getdents(c, lane, dir, cookie, buf).map(|(n, nx)| (n, Some(nx)))
        } else {
            read_dir_chunk(c, lane, dir, dir.home(), cookie, max_bytes, buf, None)
        };
        match r {
            Err(Error::Errno(e)) if e == crate::adapt::EMODE => {
                crate::adapt::refresh(c, lane, dir)?;
            }
            r => {
                let (n, next) = r?;
                if let Some(nx) = next {
                    d.cookie().store(nx, core::sync::atomic::Ordering::Relaxed);
                }
                return Ok(n as i64);
            }
        }
    }
    err(libc::EAGAIN)
}

/// The `i`-th server visited when reading distributed directory `dir`.
fn order(c: &Client, dir: InodeId, i: usize) -> usize {
    (dir.home() + i) % c.nservers
}

/// One `ReadDir` into `buf`; with `tag = Some(i)` rewrite every `d_off`
/// to the merged cookie. Returns bytes copied and the cookie to resume at.
/// `EINVAL` when the buffer cannot hold even one record (as Linux).
#[allow(clippy::too_many_arguments)]
fn read_dir_chunk(
    c: &Client,
    lane: &Lane,
    dir: InodeId,
    server: usize,
    cookie: u64,
    max_bytes: u32,
    buf: &mut [u8],
    tag: Option<usize>,
) -> Result<(usize, Option<u64>)> {
    lane.call(
        c,
        server,
        Request::ReadDir {
            dir,
            cookie,
            max_bytes,
            epoch: crate::adapt::epoch(dir),
        },
        |r| match r {
            Reply::Dirents { data, end, watched } => {
                crate::inotify::saw_dir_watched(watched);
                if data.is_empty() {
                    if !end {
                        return err(libc::EINVAL);
                    }
                    return Ok((0, None));
                }
                if data.len() > buf.len() {
                    return Err(Error::Protocol("ReadDir overflow"));
                }
                buf[..data.len()].copy_from_slice(data);
                let mut pos = 0;
                let mut last = cookie;
                while pos + 19 <= data.len() {
                    let reclen = u16::from_ne_bytes([buf[pos + 16], buf[pos + 17]]) as usize;
                    if reclen < 19 || pos + reclen > data.len() {
                        return Err(Error::Protocol("bad dirent"));
                    }
                    let mut off =
                        u64::from_ne_bytes(buf[pos + 8..pos + 16].try_into().expect("8 bytes"));
                    last = off;
                    if let Some(i) = tag {
                        off = ((i as u64) << SRV_SHIFT) | (off & SRV_MASK);
                        buf[pos + 8..pos + 16].copy_from_slice(&off.to_ne_bytes());
                        last = off;
                    }
                    pos += reclen;
                }
                Ok((data.len(), Some(last)))
            }
            _ => Err(Error::Protocol("ReadDir")),
        },
    )
}

/// Old `getdents` (struct linux_dirent) by conversion from getdents64.
#[inline(never)]
pub fn getdents(c: &Client, lane: &Lane, d: &DescRef, out: &mut [u8]) -> Result<i64> {
    // Old records are at most 8 bytes longer: ask for less.
    let mut tmp = vec![0u8; out.len() * 3 / 4 + 32];
    let saved = d.cookie().load(core::sync::atomic::Ordering::Relaxed);
    let n = getdents64(c, lane, d, &mut tmp)? as usize;
    let (mut ip, mut op) = (0usize, 0usize);
    let mut resume = None;
    let mut prev_off = saved;
    while ip + 19 <= n {
        let ino = u64::from_ne_bytes(tmp[ip..ip + 8].try_into().expect("8"));
        let off = u64::from_ne_bytes(tmp[ip + 8..ip + 16].try_into().expect("8"));
        let reclen = u16::from_ne_bytes([tmp[ip + 16], tmp[ip + 17]]) as usize;
        let dtype = tmp[ip + 18];
        let nm = &tmp[ip + 19..ip + reclen];
        let nm = &nm[..nm.iter().position(|&b| b == 0).unwrap_or(nm.len())];
        let olen = (18 + nm.len() + 2).div_ceil(8) * 8;
        if op + olen > out.len() {
            resume = Some(prev_off);
            break;
        }
        let o = &mut out[op..op + olen];
        o.fill(0);
        o[0..8].copy_from_slice(&ino.to_ne_bytes());
        o[8..16].copy_from_slice(&off.to_ne_bytes());
        o[16..18].copy_from_slice(&(olen as u16).to_ne_bytes());
        o[18..18 + nm.len()].copy_from_slice(nm);
        o[olen - 1] = dtype;
        op += olen;
        prev_off = off;
        ip += reclen;
    }
    if let Some(r) = resume {
        d.cookie().store(r, core::sync::atomic::Ordering::Relaxed);
    }
    if op == 0 && n > 0 {
        return err(libc::EINVAL);
    }
    Ok(op as i64)
}

/// `chdir(path)`.
#[inline(never)]
pub fn chdir(c: &Client, lane: &Lane, path: &[u8]) -> Result<Out> {
    let Some(mut w) = Walker::start(c, lane, libc::AT_FDCWD as i64, path)? else {
        if c.cwd().is_none() {
            return Ok(Out::Host);
        }
        return host_chdir(c, path.as_ptr() as u64, false);
    };
    match w.node(true)? {
        NodeStep::Host(p) => host_chdir(c, p.as_ptr() as u64, true),
        NodeStep::Node { ino, ftype, .. } => {
            if ftype != FileType::Directory {
                return err(libc::ENOTDIR);
            }
            lane.call_ok(
                c,
                ino.owner(),
                Request::Access {
                    ino,
                    mask: libc::X_OK as u32,
                },
            )?;
            c.set_cwd(Some(Cwd {
                ino,
                path: w.canon.as_bytes().to_vec(),
            }));
            Ok(Out::Done(0))
        }
    }
}

/// Leave atoll for a host directory: the kernel's chdir decides.
fn host_chdir(c: &Client, ptr: u64, _rehosted: bool) -> Result<Out> {
    // `ptr` may point at the program's own string: it was validated as a
    // NUL-terminated path by the caller.
    // SAFETY: a NUL-terminated path (program's or ours).
    let r = unsafe { sys::sc(libc::SYS_chdir, ptr, 0, 0, 0) };
    if r == 0 {
        c.set_cwd(None);
    }
    Ok(Out::Done(r))
}

/// `fchdir(fd)`.
pub fn fchdir(c: &Client, fd: i64) -> Result<Out> {
    if let Some(d) = fdtable::get(fd) {
        if d.ftype() != FileType::Directory {
            return err(libc::ENOTDIR);
        }
        let path = d
            .path()
            .map(<[u8]>::to_vec)
            .unwrap_or_else(|| c.mount.clone());
        c.set_cwd(Some(Cwd { ino: d.ino(), path }));
        return Ok(Out::Done(0));
    }
    if c.cwd().is_none() {
        return Ok(Out::Host);
    }
    // SAFETY: integer argument.
    let r = unsafe { sys::sc(libc::SYS_fchdir, fd as u64, 0, 0, 0) };
    if r == 0 {
        c.set_cwd(None);
    }
    Ok(Out::Done(r))
}

/// `getcwd(buf, size)` while the cwd is atoll's (raw syscall convention:
/// returns the length including the NUL).
pub fn getcwd(c: &Client, buf: u64, size: u64) -> Result<Out> {
    let Some(cwd) = c.cwd() else {
        return Ok(Out::Host);
    };
    let n = cwd.path.len() + 1;
    if (size as usize) < n {
        return err(libc::ERANGE);
    }
    let out = sys::user_slice_mut(buf, n)?;
    out[..n - 1].copy_from_slice(&cwd.path);
    out[n - 1] = 0;
    Ok(Out::Done(n as i64))
}
