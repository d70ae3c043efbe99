//! Host symlinks that lead into the mount (`ln -s /atoll/proj ~/proj`).
//!
//! The kernel resolves host paths, and for it a host symlink whose target
//! is in the mount dangles (the mount exists only for atoll's clients): it
//! answers `ENOENT`. So a host-path call that failed with `ENOENT` is looked
//! at once more. One `openat2(O_PATH, RESOLVE_NO_SYMLINKS)` tells whether
//! the path crosses a symlink at all (`ELOOP`): the common `ENOENT` — a
//! compiler probing its include directories — costs that one call. Only
//! then is the path resolved here, link by link, as the kernel would; if
//! that enters the mount, the call is made again on the atoll path reached
//! (the rest of the walk, symlinks in the mount included, is atoll's).

use crate::path::{mount_rest, PathBuf};
use crate::session::Client;
use crate::sys;

/// Most symlinks one resolution follows (Linux's `MAXSYMLINKS`).
const MAX_LINKS: u32 = 40;

/// For system call `nr`: which argument is the directory descriptor (if
/// any), which the path, and whether a symlink in the last component is
/// followed.
#[allow(non_upper_case_globals)]
fn path_arg(nr: i64, a: &[u64; 6]) -> Option<(Option<usize>, usize, bool)> {
    use libc::*;
    let nofollow_at = |flags: u64| flags as i32 & AT_SYMLINK_NOFOLLOW == 0;
    Some(match nr {
        SYS_open => (None, 0, a[1] as i32 & O_NOFOLLOW == 0),
        SYS_openat => (Some(0), 1, a[2] as i32 & O_NOFOLLOW == 0),
        SYS_creat | SYS_stat | SYS_access | SYS_chmod | SYS_chown | SYS_truncate | SYS_utimes
        | SYS_utime | SYS_statfs | SYS_chdir | SYS_getxattr | SYS_setxattr | SYS_listxattr
        | SYS_removexattr | SYS_execve => (None, 0, true),
        SYS_lstat | SYS_mkdir | SYS_rmdir | SYS_unlink | SYS_lchown | SYS_mknod | SYS_readlink
        | SYS_lgetxattr | SYS_lsetxattr | SYS_llistxattr | SYS_lremovexattr => (None, 0, false),
        SYS_faccessat | SYS_faccessat2 | SYS_fchmodat => (Some(0), 1, true),
        SYS_newfstatat | SYS_utimensat => (Some(0), 1, nofollow_at(a[3])),
        SYS_statx => (Some(0), 1, nofollow_at(a[2])),
        SYS_fchownat => (Some(0), 1, nofollow_at(a[4])),
        SYS_mkdirat | SYS_unlinkat | SYS_mknodat | SYS_readlinkat => (Some(0), 1, false),
        _ => return None,
    })
}

/// Does the host path cross a symlink before it fails? One `openat2`.
fn crosses_a_symlink(dirfd: i64, path: &PathBuf) -> bool {
    #[repr(C)]
    struct OpenHow {
        flags: u64,
        mode: u64,
        resolve: u64,
    }
    let how = OpenHow {
        flags: (libc::O_PATH | libc::O_CLOEXEC) as u64,
        mode: 0,
        resolve: crate::walk::RESOLVE_NO_SYMLINKS,
    };
    // SAFETY: a NUL-terminated local path and a local `open_how`.
    let r = unsafe {
        sys::syscall6(
            libc::SYS_openat2,
            [
                dirfd as u64,
                path.as_ptr() as u64,
                &how as *const OpenHow as u64,
                core::mem::size_of::<OpenHow>() as u64,
                0,
                0,
            ],
        )
    };
    if r >= 0 {
        sys::close(r as i32);
    }
    r == -(libc::ELOOP as i64)
}

/// The host link `path` holds, if it is one.
fn read_link(path: &[u8]) -> Option<Vec<u8>> {
    crate::proclink::kernel_link(path).filter(|l| !l.is_empty())
}

/// Where a relative path starts: the host cwd or the directory `dirfd`.
fn base_of(dirfd: i64) -> Option<Vec<u8>> {
    let mut buf = [0u8; sys::PATH_MAX];
    let n = if dirfd == libc::AT_FDCWD as i64 {
        // SAFETY: the kernel writes at most `len` bytes into `buf`.
        unsafe {
            sys::sc(
                libc::SYS_getcwd,
                buf.as_mut_ptr() as u64,
                buf.len() as u64,
                0,
                0,
            )
        }
    } else {
        let link = PathBuf::from_bytes(format!("/proc/self/fd/{dirfd}").as_bytes()).ok()?;
        // SAFETY: as in `read_link`.
        unsafe {
            sys::sc(
                libc::SYS_readlinkat,
                libc::AT_FDCWD as u64,
                link.as_ptr() as u64,
                buf.as_mut_ptr() as u64,
                buf.len() as u64,
            )
        }
    };
    if n <= 0 {
        return None;
    }
    let mut v = buf[..n as usize].to_vec();
    if v.last() == Some(&0) {
        v.pop(); // getcwd counts its NUL
    }
    v.starts_with(b"/").then_some(v)
}

/// Resolve `path` (from `base`) on the host as the kernel would, and the
/// absolute atoll path it reaches if it enters the mount.
pub fn resolve_into_mount(
    mount: &[u8],
    base: &[u8],
    path: &[u8],
    follow_last: bool,
    read_link: impl Fn(&[u8]) -> Option<Vec<u8>>,
) -> Option<Vec<u8>> {
    let mut cur: Vec<u8> = if path.starts_with(b"/") {
        Vec::new()
    } else {
        base.to_vec()
    };
    let mut rest: std::collections::VecDeque<Vec<u8>> = path
        .split(|&b| b == b'/')
        .filter(|c| !c.is_empty())
        .map(<[u8]>::to_vec)
        .collect();
    let mut links = 0;
    while let Some(comp) = rest.pop_front() {
        match comp.as_slice() {
            b"." => continue,
            b".." => {
                let cut = cur.iter().rposition(|&b| b == b'/').unwrap_or(0);
                cur.truncate(cut);
                continue;
            }
            _ => {}
        }
        let mut cand = cur.clone();
        cand.push(b'/');
        cand.extend_from_slice(&comp);
        let last = rest.is_empty();
        match (last && !follow_last)
            .then_some(())
            .map_or_else(|| read_link(&cand), |_| None)
        {
            Some(target) => {
                links += 1;
                if links > MAX_LINKS {
                    return None;
                }
                if target.starts_with(b"/") {
                    cur.clear();
                }
                for c in target.split(|&b| b == b'/').filter(|c| !c.is_empty()).rev() {
                    rest.push_front(c.to_vec());
                }
            }
            None => cur = cand,
        }
        if mount_rest(&cur, mount).is_some() {
            for c in rest {
                cur.push(b'/');
                cur.extend_from_slice(&c);
            }
            return Some(cur);
        }
    }
    None
}

/// The atoll path a host path (from `dirfd`) that the kernel could not
/// find reaches through a symlink into the mount, if it does.
pub fn reach(c: &Client, dirfd: i64, path: &PathBuf, follow_last: bool) -> Option<Vec<u8>> {
    if path.is_empty() || !crosses_a_symlink(dirfd, path) {
        return None;
    }
    let base = if path.as_bytes().starts_with(b"/") {
        Vec::new()
    } else {
        base_of(dirfd)?
    };
    // `/proc/PID/cwd` and `/proc/PID/fd/N` lead where atoll says.
    let links = |p: &[u8]| crate::proclink::target(c, p).or_else(|| read_link(p));
    resolve_into_mount(&c.mount, &base, path.as_bytes(), follow_last, links)
}

/// A call that the kernel answered `ENOENT`, rewritten onto the atoll
/// path its host path reaches through a symlink into the mount: the new
/// arguments and the buffer their path points into (keep it alive while
/// they are used). `None`: the `ENOENT` stands.
pub fn rewrite(c: &Client, nr: i64, args: &[u64; 6]) -> Option<(Box<PathBuf>, [u64; 6])> {
    let (dirfd_arg, path_arg_idx, follow_last) = path_arg(nr, args)?;
    let path = PathBuf::from_bytes(sys::user_path(args[path_arg_idx]).ok()?).ok()?;
    let dirfd = dirfd_arg.map_or(libc::AT_FDCWD as i64, |i| args[i] as i32 as i64);
    let atoll = reach(c, dirfd, &path, follow_last)?;
    let buf = Box::new(PathBuf::from_bytes(&atoll).ok()?);
    let mut out = *args;
    out[path_arg_idx] = buf.as_ptr() as u64;
    if let Some(i) = dirfd_arg {
        out[i] = libc::AT_FDCWD as u64;
    }
    Some((buf, out))
}

/// A call whose absolute path goes through `/proc/PID/cwd` or
/// `/proc/PID/fd/N` into the mount (`proclink::through`), rewritten onto
/// the atoll path before it runs.
pub fn rewrite_proc(c: &Client, nr: i64, args: &[u64; 6]) -> Option<(Box<PathBuf>, [u64; 6])> {
    let (dirfd_arg, path_arg_idx, follow_last) = path_arg(nr, args)?;
    let path = sys::user_path(args[path_arg_idx]).ok()?;
    if !path.starts_with(b"/proc/") {
        return None;
    }
    let atoll = crate::proclink::through(c, path, follow_last)?;
    let buf = Box::new(PathBuf::from_bytes(&atoll).ok()?);
    let mut out = *args;
    out[path_arg_idx] = buf.as_ptr() as u64;
    if let Some(i) = dirfd_arg {
        out[i] = libc::AT_FDCWD as u64;
    }
    Some((buf, out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn links(l: &[u8]) -> Option<Vec<u8>> {
        match l {
            b"/home/u/proj" => Some(b"/atoll/proj".to_vec()),
            b"/home/u/rel" => Some(b"../u/proj/sub".to_vec()),
            b"/home/u/loop" => Some(b"/home/u/loop".to_vec()),
            b"/home/u/elsewhere" => Some(b"/tmp".to_vec()),
            _ => None,
        }
    }

    #[test]
    fn links_into_the_mount_are_followed_and_others_are_not() {
        let r = |base: &[u8], p: &[u8], follow| {
            resolve_into_mount(b"/atoll", base, p, follow, links)
                .map(|v| String::from_utf8(v).unwrap())
        };
        assert_eq!(
            r(b"", b"/home/u/proj/a/b", true).as_deref(),
            Some("/atoll/proj/a/b")
        );
        assert_eq!(r(b"/home/u", b"proj", true).as_deref(), Some("/atoll/proj"));
        assert_eq!(
            r(b"/home/u", b"./rel/f", true).as_deref(),
            Some("/atoll/proj/sub/f")
        );
        // The rest of the walk, `..` included, is atoll's.
        assert_eq!(
            r(b"/x/y", b"../../home/u/proj/..", true).as_deref(),
            Some("/atoll/proj/..")
        );
        // The last component's link is not followed by an lstat.
        assert_eq!(r(b"", b"/home/u/proj", false), None);
        assert_eq!(
            r(b"", b"/home/u/proj/x", false).as_deref(),
            Some("/atoll/proj/x")
        );
        assert_eq!(r(b"", b"/home/u/elsewhere/f", true), None);
        assert_eq!(r(b"", b"/home/u/missing/f", true), None);
        assert_eq!(r(b"", b"/home/u/loop/f", true), None, "a loop ends");
    }
}
