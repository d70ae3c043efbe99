//! The working directory: `chdir`, `fchdir`, `getcwd`.

use super::*;

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
            // The search check and the directory's reference are one
            // round trip; the old cwd's release is posted (`set_cwd`).
            let hold = hold_dir(c, lane, ino, atoll_proto::OPEN_SEARCH)?;
            c.set_cwd(Some(Cwd {
                ino,
                path: w.canon.as_bytes().to_vec(),
                hold,
            }));
            Ok(Out::Done(0))
        }
    }
}

/// The flags of the description a working directory holds.
pub const CWD_FLAGS: u32 = (libc::O_PATH | libc::O_DIRECTORY) as u32;

/// A reference to directory `ino` for a working directory: an `O_PATH`
/// description (`extra`: [`atoll_proto::OPEN_SEARCH`] for `chdir`'s
/// permission check), so that the directory outlives its `rmdir` while it
/// is the cwd, as on Linux: `stat .` shows it with no links, a listing is
/// empty, creating in it is `ENOENT`.
pub fn hold_dir(c: &Client, lane: &Lane, ino: InodeId, extra: u32) -> Result<fdtable::Held> {
    let (desc, _) = crate::file::open_inode(c, lane, ino, CWD_FLAGS | extra)?;
    Ok(held(c, desc, ino))
}

/// Description `desc` of directory `ino`, referenced by this session at
/// its server, as the cwd's. Without a free slot it is released again and
/// the cwd holds nothing (as before the cwd held references).
pub fn held(c: &Client, desc: atoll_proto::DescId, ino: InodeId) -> fdtable::Held {
    let r = fdtable::alloc(fdtable::DescInfo {
        desc,
        ino,
        flags: CWD_FLAGS,
        ftype: FileType::Directory,
        cookie: 0,
        path: None,
    });
    if r.is_none() {
        if let Ok(lane) = c.lane() {
            let _ = lane.post(c, desc.server(), Request::Close { desc });
        }
    }
    fdtable::Held::new(r)
}

/// Leave atoll for a host directory: the kernel's chdir decides.
pub(super) fn host_chdir(c: &Client, ptr: u64, _rehosted: bool) -> Result<Out> {
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
        // The cwd holds the descriptor's own description: no message.
        let ino = d.ino();
        let hold = fdtable::Held::new(Some(d));
        c.set_cwd(Some(Cwd { ino, path, hold }));
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
    if cwd_removed(c, cwd.ino)? {
        // Linux fails for a cwd that was removed (getcwd(2), `ENOENT`):
        // `readlink -e .`, `pwd -P` and glibc's `realpath` rely on it.
        return err(libc::ENOENT);
    }
    let n = cwd.path.len() + 1;
    if n > libc::PATH_MAX as usize {
        // Linux builds the path in one `PATH_MAX` page and fails when it
        // does not fit (fs/d_path.c); glibc's `getcwd` then walks `..`
        // itself, which finds the mount's entry in its parent's listing
        // (`mountentry.rs`). Answering the whole path instead would be
        // `ERANGE` for the `PATH_MAX` buffer glibc first offers.
        return err(libc::ENAMETOOLONG);
    }
    if (size as usize) < n {
        return err(libc::ERANGE);
    }
    let out = sys::user_slice_mut(buf, n)?;
    out[..n - 1].copy_from_slice(&cwd.path);
    out[n - 1] = 0;
    Ok(Out::Done(n as i64))
}

/// Is directory `ino` removed (no entry names it)? Its owner reports no
/// links, or no longer knows it once nothing holds it.
pub fn cwd_removed(c: &Client, ino: atoll_proto::InodeId) -> Result<bool> {
    let lane = c.lane()?;
    let nlink = lane.call(c, ino.owner(), Request::GetAttr { ino }, |r| match r {
        Reply::Attr(a) => Ok(a.nlink),
        _ => Err(Error::Protocol("GetAttr")),
    });
    removed_by(nlink)
}

/// Removed, by its owner's answer to `GetAttr`.
fn removed_by(nlink: Result<u32>) -> Result<bool> {
    match nlink {
        Ok(n) => Ok(n == 0),
        Err(Error::Errno(libc::ENOENT | libc::ESTALE)) => Ok(true),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::removed_by;
    use crate::error::Error;

    #[test]
    fn a_cwd_without_links_or_unknown_to_its_owner_is_removed() {
        assert!(!removed_by(Ok(2u32)).unwrap());
        assert!(removed_by(Ok(0u32)).unwrap());
        assert!(removed_by(Err(Error::Errno(libc::ENOENT))).unwrap());
        assert!(removed_by(Err(Error::Errno(libc::EIO))).is_err());
    }
}
