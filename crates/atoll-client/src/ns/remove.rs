//! Removing names: `unlink`, and `rmdir`'s three-phase protocol for
//! distributed directories (Hare §3.4.1: mark every shard, check them
//! empty, then commit or abort the marks).

use super::*;

/// Remove entry `(dir, name)` and finish the owner's link count.
pub(super) fn unlink_entry(
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
        let _ = lane.call_ok(
            c,
            ino.owner(),
            Request::Unref {
                ino,
                via,
                replaced: false,
            },
        );
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
pub(super) fn mark_servers(c: &Client, ino: InodeId) -> Vec<usize> {
    let mut v = vec![ino.home()];
    let width = crate::adapt::width(c, ino);
    if width > 1 {
        // Servers of its width (members that joined since hold none).
        v.extend((0..width).filter(|&s| s != ino.home()));
    }
    if !v.contains(&ino.owner()) {
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
pub(super) fn rmdir_at(c: &Client, lane: &Lane, w: &Walker, last: &Last) -> Result<Out> {
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
pub(super) fn mark_dir(c: &Client, lane: &Lane, ino: InodeId) -> Result<Vec<usize>> {
    crate::session::retry_marked(|| try_mark_dir(c, lane, ino))
}

/// One attempt of [`mark_dir`]: `EAGAIN` (another rmdir or a move of the
/// directory under way) leaves no mark behind.
pub(super) fn try_mark_dir(c: &Client, lane: &Lane, ino: InodeId) -> Result<Vec<usize>> {
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
pub(super) fn finish_marks(c: &Client, lane: &Lane, ino: InodeId, marked: &[usize], commit: bool) {
    for &s in marked {
        let _ = lane.call_ok(c, s, Request::FinishRmdir { dir: ino, commit });
    }
}
