//! Host programs that lead into the mount: Linux runs them, but for the
//! kernel the mount does not exist, so two kinds would fail with `ENOENT`
//! where Linux (with `/atoll` a real file system) runs them:
//!
//! * a host symlink to a program in the mount (`ln -s /atoll/bin/tool
//!   ~/bin/tool`), which `hostlink` follows as for any other call;
//! * a host script whose `#!` interpreter is in the mount (a script in
//!   `/tmp` run by a shell built in the mount: bash's own test suite).
//!
//! Either continues the exec loop of `prepare_inner` on the atoll side.

use std::os::fd::AsRawFd;

use super::Shebang;
use crate::error::{err, Result};
use crate::path::{parse_shebang, PathBuf};
use crate::session::Client;
use crate::sys;

/// What a host program path that the exec loop reached turns into.
pub(super) enum HostStep {
    /// Linux runs it as it is.
    Kernel,
    /// It is a symlink into the mount: this atoll path is the program.
    IntoMount(Vec<u8>),
    /// A script whose interpreter is in the mount.
    Interpreter(Shebang),
}

/// Look at host program `path` (from `dirfd`) before the kernel runs it.
/// Errors are the kernel's for a path that does not resolve.
pub(super) fn step(c: &Client, dirfd: i64, path: &[u8]) -> Result<HostStep> {
    match host_path_resolves(dirfd, path) {
        Ok(()) => {}
        Err(e) if e.errno() == libc::ENOENT => {
            let reached = PathBuf::from_bytes(path)
                .ok()
                .and_then(|p| crate::hostlink::reach(c, dirfd, &p, true));
            return match reached {
                Some(atoll) => Ok(HostStep::IntoMount(atoll)),
                None => Err(e),
            };
        }
        Err(e) => return Err(e),
    }
    // The interpreter receives the script's path: only a path that means
    // the same in the new image (absolute, or from the cwd) is passed on.
    if path.first() != Some(&b'/') && dirfd != libc::AT_FDCWD as i64 {
        return Ok(HostStep::Kernel);
    }
    Ok(match atoll_interpreter(c, dirfd, path) {
        Some(shebang) => HostStep::Interpreter(shebang),
        None => HostStep::Kernel,
    })
}

/// The `#!` line of a host file, when its interpreter is in the mount.
/// One `open`, `read` and `close` of the host file: a sliver of an exec.
fn atoll_interpreter(c: &Client, dirfd: i64, path: &[u8]) -> Option<Shebang> {
    let fd = super::libs::open_host(dirfd, path)?;
    let mut head = [0u8; 256];
    let n = usize::try_from(sys::pread(fd.as_raw_fd(), &mut head, 0)).ok()?;
    let (interp, arg) = parse_shebang(&head[..n])?;
    if n == head.len() && !head.contains(&b'\n') {
        return None; // the kernel's ENOEXEC
    }
    crate::walk::concerns(c, libc::AT_FDCWD as i64, interp)
        .then(|| (interp.to_vec(), arg.map(<[u8]>::to_vec)))
}

/// A host program path that does not resolve fails as the kernel's
/// `execve` would fail it, before the session hand-over an exec costs: a
/// PATH search (`execvp`, `env`, shells) tries many such paths, each a
/// sub-microsecond failure on Linux. Only errors of the walk itself, which
/// do not depend on whose credentials check it, are answered here; the
/// kernel decides everything else.
pub(super) fn host_path_resolves(dirfd: i64, path: &[u8]) -> Result<()> {
    let Ok(cpath) = std::ffi::CString::new(path) else {
        return Ok(());
    };
    // SAFETY: faccessat reads the NUL-terminated local path only.
    let r = unsafe {
        sys::sc(
            libc::SYS_faccessat,
            dirfd as u64,
            cpath.as_ptr() as u64,
            libc::F_OK as u64,
            0,
        )
    };
    match -r as i32 {
        e @ (libc::ENOENT | libc::ENOTDIR | libc::ENAMETOOLONG | libc::ELOOP) => err(e),
        _ => Ok(()),
    }
}
