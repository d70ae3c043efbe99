//! Hard links (`Ref` to an owner on another server) and `readlink`.

use super::*;

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
pub(super) fn link_once(
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
