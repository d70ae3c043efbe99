//! Making names: `mkdir`, `mknod` (sockets too), `symlink` (Hare §3.4:
//! the new entry lives on `entry_server(dir, name)`).

use super::*;

/// `MakeNode` in the final component's entry server; `perm` is the mode
/// asked for (the server applies the umask or the default ACL).
#[allow(clippy::too_many_arguments)]
pub(super) fn make_node(
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
                // Spread over every member there is now (`InodeId::spread`).
                spread: if distributed { c.members() as u8 } else { 0 },
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
    // A name this session's lookup cache holds exists now (a removal's
    // invalidation reaches the cache before the removal's reply, `dcache`):
    // `EEXIST` without a message, as Linux answers it before it checks
    // write permission on the directory. fs_mark's `mkdir` of its existing
    // directory before every file was one message in six.
    if let Some(dc) = c.dcache() {
        if dc.get_entry(c.session().channels(), w.dir, name).is_some() {
            return err(libc::EEXIST);
        }
    }
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
