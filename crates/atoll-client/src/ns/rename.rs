//! `rename`: one message when both entries live on one server, otherwise
//! coordinated by the client across servers (Hare §6.2.3), with the
//! extra reference the new name holds until the old one goes.

use super::*;

/// Both paths of a two-path call, resolved to their parents.
pub(super) enum Pair<'a> {
    /// Neither is atoll's.
    Host,
    /// Both leave atoll: run on the host with these paths.
    Rehost(Option<HostPath>, Option<HostPath>),
    Atoll(Box<(Box<Walker<'a>>, Last)>, Box<(Box<Walker<'a>>, Last)>),
}

pub(super) fn pair<'a>(
    c: &'a Client,
    lane: &'a Lane,
    d1: i64,
    p1: &[u8],
    d2: i64,
    p2: &[u8],
) -> Result<Pair<'a>> {
    let a = parent(c, lane, d1, p1)?;
    let b = match parent(c, lane, d2, p2) {
        // Linux resolves the first path's parent first.
        Err(e) if matches!(a, Err(Out::Host)) => {
            host_parent_ok(d1, p1)?;
            return Err(e);
        }
        r => r?,
    };
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
        (Err(Out::Host), Ok(_)) => host_parent_ok(d1, p1).and(err(libc::EXDEV)),
        (Ok(_), Err(Out::Host)) => host_parent_ok(d2, p2).and(err(libc::EXDEV)),
        _ => err(libc::EXDEV),
    }
}

/// Linux looks up both parents before it compares their mounts
/// (`EXDEV`): a relative host path whose directory descriptor is not open
/// is `EBADF`, one whose descriptor is no directory `ENOTDIR`, whatever
/// the other path names (stress-ng's rename stressor probes both).
fn host_parent_ok(dirfd: i64, path: &[u8]) -> Result<()> {
    if path.first() == Some(&b'/') || dirfd == libc::AT_FDCWD as i64 {
        return Ok(());
    }
    let Ok(fd) = i32::try_from(dirfd) else {
        return err(libc::EBADF);
    };
    match sys::fstat(fd) {
        Err(e) => err(e),
        Ok(st) if st.st_mode & libc::S_IFMT != libc::S_IFDIR => err(libc::ENOTDIR),
        Ok(_) => Ok(()),
    }
}

/// Issue a two-path `*at` call on the host with rewritten paths.
#[allow(clippy::too_many_arguments)]
pub(super) fn host_pair(
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
    // Flags no file system takes are refused before any lookup, as Linux
    // does (`do_renameat2`), whichever paths are atoll's.
    let known = libc::RENAME_NOREPLACE | libc::RENAME_EXCHANGE | libc::RENAME_WHITEOUT;
    if flags & !known != 0
        || (flags & libc::RENAME_EXCHANGE != 0
            && flags & (libc::RENAME_NOREPLACE | libc::RENAME_WHITEOUT) != 0)
    {
        return err(libc::EINVAL);
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
pub(super) fn rename_checked(
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
pub(super) struct Backoff {
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

pub(super) fn rename_attempt(
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
pub(super) struct DirMoveLock<'a> {
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
pub(super) fn mark_victim(c: &Client, lane: &Lane, v: InodeId) -> Result<Vec<usize>> {
    match try_mark_dir(c, lane, v) {
        Err(Error::Errno(e)) if e == libc::ENOENT => err(libc::ESTALE),
        r => r,
    }
}

/// Rename when both entries live on one server: one `Rename` message, then
/// the follow-ups only a client can send (servers never talk to each other):
/// `Unref` of a replaced inode owned elsewhere, `SetParent` of moved
/// directories. A new directory being removed (`EAGAIN`) is waited for.
pub(super) fn same_server_rename(
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
pub(super) fn same_server_rename_replacing(
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
                    replaced: true,
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
pub(super) fn check_not_ancestor(w: &Walker, moved: InodeId, from: InodeId) -> Result<()> {
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
pub(super) fn cross_server_exchange(
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
pub(super) fn cross_server_rename(
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
            let _ = lane.call_ok(
                c,
                ino.owner(),
                Request::Unref {
                    ino,
                    via: None,
                    replaced: false,
                },
            );
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
                        replaced: true,
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
                replaced: false,
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
