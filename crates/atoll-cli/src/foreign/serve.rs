//! The supervisor: answers the filtered calls of a program that cannot
//! load the client (a table of handlers, one per call, as the client's
//! own `syscalls/table.rs`). A path outside the mount goes back to the
//! kernel unchanged (`SECCOMP_USER_NOTIF_FLAG_CONTINUE`); one in the mount
//! (or relative to a cwd or directory descriptor in it) the relay
//! performs through its own client library, with its own credentials,
//! which are the program's (same process, `no_new_privs`).
//!
//! Bad input never wins: a path or buffer the relay cannot read or write
//! in the program is `EFAULT`; a notification whose thread died (or whose
//! id went stale) is checked with `NOTIF_ID_VALID` after the program's
//! memory was read and before anything is done; the relay never runs a
//! relative path in the kernel on the program's behalf while the program's
//! cwd is one it tracks.

use std::os::fd::{AsRawFd, OwnedFd};

mod times;
mod xattr;

use super::exec;
use super::files::{self, Files};
use super::paths::{self, Cwd, Paths, Place};
use super::redirect;
use super::seccomp::{self, Notif};

/// The calls the filter sends to the supervisor.
pub const FILTERED: &[i64] = &[
    libc::SYS_open,
    libc::SYS_openat,
    libc::SYS_openat2,
    libc::SYS_creat,
    libc::SYS_stat,
    libc::SYS_lstat,
    libc::SYS_fstat,
    libc::SYS_newfstatat,
    libc::SYS_statx,
    libc::SYS_access,
    libc::SYS_faccessat,
    libc::SYS_faccessat2,
    libc::SYS_readlink,
    libc::SYS_readlinkat,
    libc::SYS_mkdir,
    libc::SYS_mkdirat,
    libc::SYS_unlink,
    libc::SYS_unlinkat,
    libc::SYS_rmdir,
    libc::SYS_rename,
    libc::SYS_renameat,
    libc::SYS_renameat2,
    libc::SYS_link,
    libc::SYS_linkat,
    libc::SYS_symlink,
    libc::SYS_symlinkat,
    libc::SYS_chmod,
    libc::SYS_fchmodat,
    libc::SYS_chown,
    libc::SYS_lchown,
    libc::SYS_fchownat,
    libc::SYS_truncate,
    libc::SYS_utimensat,
    libc::SYS_statfs,
    libc::SYS_chdir,
    libc::SYS_fchdir,
    libc::SYS_getcwd,
    libc::SYS_getdents64,
    libc::SYS_close,
    libc::SYS_dup2,
    libc::SYS_dup3,
    libc::SYS_execve,
    libc::SYS_execveat,
    libc::SYS_mknod,
    libc::SYS_mknodat,
    libc::SYS_utime,
    libc::SYS_utimes,
    libc::SYS_futimesat,
    libc::SYS_setxattr,
    libc::SYS_lsetxattr,
    libc::SYS_getxattr,
    libc::SYS_lgetxattr,
    libc::SYS_listxattr,
    libc::SYS_llistxattr,
    libc::SYS_removexattr,
    libc::SYS_lremovexattr,
    // Path calls not served: refused in the mount, run by the kernel
    // elsewhere (see `UNSERVED`).
    libc::SYS_inotify_add_watch,
    libc::SYS_chroot,
    libc::SYS_fchmodat2,
    libc::SYS_bind,
];

/// Calls on the cwd or on descriptors, not paths
/// (`Supervisor::cwd_or_descriptor`).
const CWD_AND_DESCRIPTORS: &[i64] = &[
    libc::SYS_fstat,
    libc::SYS_chdir,
    libc::SYS_fchdir,
    libc::SYS_getcwd,
    libc::SYS_getdents64,
    libc::SYS_close,
    libc::SYS_dup2,
    libc::SYS_dup3,
];

/// Path calls the relay does not perform: `(call, dirfd argument or
/// none, path argument)`. In the mount they fail with `EOPNOTSUPP`.
const UNSERVED: &[(i64, Option<usize>, usize)] = &[
    (libc::SYS_inotify_add_watch, None, 1),
    (libc::SYS_chroot, None, 0),
    (libc::SYS_fchmodat2, Some(0), 1),
];

const CWD: u64 = libc::AT_FDCWD as u64;

/// What a handler answers.
enum Answer {
    /// The kernel runs the call as made.
    Kernel,
    /// A result or an errno.
    Done(Result<i64, i32>),
    /// A new descriptor in the program (close-on-exec or not).
    Fd(OwnedFd, bool),
    /// Another thread answers (`fifo`).
    Later,
}

use Answer::{Done, Kernel};

/// Everything the supervisor keeps.
pub struct Supervisor {
    pub listener: OwnedFd,
    pub paths: Paths,
    pub files: Files,
    /// `ENV_FOREIGN_CWD`'s directory, if it could be made.
    pub cwd_handoff: Option<std::path::PathBuf>,
    /// Threads whose exec of a program of the mount was redirected to its
    /// copy (`exec.rs`), by thread id: the path in the mount, for the
    /// restarted call, and where its new name was written.
    pub exec_pending: std::collections::HashMap<i32, (Vec<u8>, u64)>,
}

/// May call `n` create a file or directory (so the program's umask
/// applies)?
fn creates(n: &Notif) -> bool {
    let flags = |k: usize| {
        let f = n.args[k] as i32;
        f & libc::O_CREAT != 0 || f & libc::O_TMPFILE == libc::O_TMPFILE
    };
    match n.nr {
        libc::SYS_open => flags(1),
        libc::SYS_openat => flags(2),
        libc::SYS_creat
        | libc::SYS_openat2
        | libc::SYS_mkdir
        | libc::SYS_mkdirat
        | libc::SYS_mknod
        | libc::SYS_mknodat => true,
        _ => false,
    }
}

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// `0` or the errno of a libc call's `-1`.
fn rc(r: libc::c_int) -> Result<i64, i32> {
    if r < 0 {
        Err(errno())
    } else {
        Ok(r as i64)
    }
}

impl Supervisor {
    /// Serve notifications until the program and everything it started
    /// are gone (the listener hangs up) or `stop` becomes readable.
    pub fn serve(&mut self, stop: &OwnedFd) {
        loop {
            let mut p = [self.listener.as_raw_fd(), stop.as_raw_fd()].map(|fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            });
            // SAFETY: two local pollfds.
            if unsafe { libc::poll(p.as_mut_ptr(), 2, -1) } < 0 {
                continue;
            }
            if p[1].revents != 0 {
                return;
            }
            if p[0].revents & libc::POLLIN != 0 {
                if let Some(n) = seccomp::recv(&self.listener) {
                    self.handle(n);
                }
            } else if p[0].revents & (libc::POLLHUP | libc::POLLERR) != 0 {
                return;
            }
        }
    }

    /// A program about to be exec'd: a dynamic one attaches anew, and
    /// its client library starts in the cwd left here for its pid (the
    /// one this supervisor tracks, or none: the kernel's), not the one the
    /// program's environment named when it started; `exe`, for a program
    /// of the mount, is what its `/proc/self/exe` names (the kernel only
    /// knows the memfd).
    fn hand_off_exec(&mut self, n: &Notif, exe: Option<&[u8]>) {
        if let Some(dir) = &self.cwd_handoff {
            let pid = self.paths.group(n.pid);
            let cwd = match self.paths.cwd(n.pid) {
                Cwd::Tracked(c) => c,
                Cwd::Host => Vec::new(),
            };
            let exe_file = dir.join(format!("{pid}{}", atoll_proto::boot::FOREIGN_EXE_SUFFIX));
            let _ = match exe {
                Some(e) => std::fs::write(exe_file, e),
                None => std::fs::remove_file(exe_file),
            };
            let _ = std::fs::write(dir.join(pid.to_string()), cwd);
        }
    }

    /// `execve`/`execveat` whose path (at `ptr`) leads to `place`: the
    /// kernel's as made, or a program of the mount run from a copy.
    fn exec(&mut self, n: &Notif, ptr: u64, place: Place, nofollow: bool) -> Result<Answer, i32> {
        let path = match place {
            Place::Kernel => {
                // The restarted call of a redirected exec names the copy
                // where the relay wrote it (a thread id reused since is
                // not taken for it).
                let exe = match self.exec_pending.remove(&n.pid) {
                    Some((exe, at)) if at == ptr => Some(exe),
                    _ => None,
                };
                self.hand_off_exec(n, exe.as_deref());
                return Ok(Kernel);
            }
            Place::Here(p) => p,
            // `fexecve` of a file the program opened in the mount: the
            // kernel runs the copy it holds (taken at its open, as Linux
            // runs the file the descriptor names), once the atoll file's
            // attributes allow it.
            Place::Desc(k) => {
                if self.files.is_dir(k) {
                    return Err(libc::EACCES);
                }
                let p = self.files.path_of(&self.paths, k).ok_or(libc::EBADF)?;
                exec::may_run(n.pid, &files::stat_path(&p, false)?)?;
                self.alive(n)?;
                self.hand_off_exec(n, Some(&paths::normalize(&p)));
                return Ok(Kernel);
            }
        };
        // What a filtered process wrote there and still holds open goes
        // back first, as before a `stat` of the path.
        self.files.sync(&paths::normalize(&path));
        let image = exec::prepare(n.pid, &self.paths.mount, &path, nofollow)?;
        self.alive(n)?;
        let fd = seccomp::install_fd(&self.listener, n.id, image.memfd.as_raw_fd(), !image.script)?;
        let direct = exec::parent_of(self.paths.group(n.pid)) == Some(self.paths.me());
        match redirect::redirect(n.pid, n.nr, &exec::fd_name(fd), direct) {
            // The call restarts on the copy and comes back: the kernel's.
            Ok(at) => {
                self.exec_pending
                    .insert(n.pid, (paths::normalize(&path), at));
                Ok(Answer::Later)
            }
            // Not ours to trace (a debugger holds it), or it died: an
            // answer to a call no longer held is dropped by the kernel.
            Err(_) => Err(libc::EACCES),
        }
    }

    /// Serving is over for good: the cwd hand-offs go.
    pub fn finish(&self) {
        if let Some(dir) = &self.cwd_handoff {
            let _ = std::fs::remove_dir_all(dir);
        }
    }

    /// Does any process still run under the filter?
    pub fn in_use(&self) -> bool {
        let mut p = libc::pollfd {
            fd: self.listener.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one local pollfd, no wait.
        unsafe { libc::poll(&mut p, 1, 0) };
        p.revents & libc::POLLHUP == 0
    }

    fn handle(&mut self, n: Notif) {
        let answer = self.answer(&n);
        match answer {
            Kernel => seccomp::continue_call(&self.listener, n.id),
            Done(r) => seccomp::respond(&self.listener, n.id, r),
            Answer::Fd(fd, cloexec) => {
                let r = seccomp::add_fd(&self.listener, n.id, fd.as_raw_fd(), cloexec);
                if r.is_err() {
                    seccomp::respond(&self.listener, n.id, r);
                }
            }
            Answer::Later => {}
        }
    }

    /// Errors of the program's own making (`EFAULT`, …) are answers too.
    /// What the relay creates for the program takes the program's umask,
    /// not the relay's (the supervisor is the only thread of the relay
    /// that makes files, so the process-wide umask may change around it).
    fn answer(&mut self, n: &Notif) -> Answer {
        let restore = creates(n)
            .then(|| paths::umask_of(n.pid))
            .flatten()
            // SAFETY: umask only sets the process's creation mask.
            .map(|m| unsafe { libc::umask(m as libc::mode_t) });
        let a = match self.dispatch(n) {
            Ok(a) => a,
            Err(e) => Done(Err(e)),
        };
        if let Some(prev) = restore {
            // SAFETY: as above, putting the relay's own mask back.
            unsafe { libc::umask(prev) };
        }
        a
    }

    /// The thread still waits for this answer (checked after reading its
    /// memory, before acting on it).
    fn alive(&self, n: &Notif) -> Result<(), i32> {
        if seccomp::id_valid(&self.listener, n.id) {
            Ok(())
        } else {
            Err(libc::ESRCH)
        }
    }

    /// Where the path argument leads, checked alive if the relay acts.
    fn place(&mut self, n: &Notif, dirfd: u64, ptr: u64, empty_ok: bool) -> Result<Place, i32> {
        let p = self.paths.resolve(n, dirfd, ptr, empty_ok)?;
        if p != Place::Kernel {
            self.alive(n)?;
        }
        Ok(p)
    }

    #[allow(non_upper_case_globals)] // libc spells call numbers in lower case
    fn dispatch(&mut self, n: &Notif) -> Result<Answer, i32> {
        let a = n.args;
        let i = |k: usize| a[k] as i32;
        use libc::*;
        Ok(match n.nr {
            SYS_open => self.open(n, CWD, a[0], i(1), a[2] as u32)?,
            SYS_openat => self.open(n, a[0], a[1], i(2), a[3] as u32)?,
            SYS_creat => self.open(n, CWD, a[0], O_CREAT | O_WRONLY | O_TRUNC, a[1] as u32)?,
            SYS_openat2 => {
                let mut how = [0u8; 24];
                if (a[3] as usize) < how.len() {
                    return Err(EINVAL);
                }
                seccomp::read_mem(n.pid, a[2], &mut how)?;
                let word = |k: usize| u64::from_ne_bytes(how[k * 8..k * 8 + 8].try_into().unwrap());
                match self.paths.resolve(n, a[0], a[1], false)? {
                    Place::Kernel => Kernel,
                    // RESOLVE_* restrictions are not modelled in the mount.
                    _ if word(2) != 0 => Done(Err(EOPNOTSUPP)),
                    _ => self.open(n, a[0], a[1], word(0) as i32, word(1) as u32)?,
                }
            }
            SYS_stat => self.stat(n, CWD, a[0], a[1], 0)?,
            SYS_lstat => self.stat(n, CWD, a[0], a[1], AT_SYMLINK_NOFOLLOW)?,
            SYS_newfstatat => self.stat(n, a[0], a[1], a[2], i(3))?,
            SYS_statx => self.statx(n)?,
            SYS_access => self.path_op(n, CWD, a[0], 0, |p| calls::access(p, i(1), 0))?,
            SYS_faccessat => self.path_op(n, a[0], a[1], 0, |p| calls::access(p, i(2), 0))?,
            SYS_faccessat2 => {
                self.path_op(n, a[0], a[1], i(3), |p| calls::access(p, i(2), i(3)))?
            }
            SYS_readlink => self.readlink(n, CWD, a[0], a[1], a[2])?,
            SYS_readlinkat => self.readlink(n, a[0], a[1], a[2], a[3])?,
            SYS_mkdir => self.path_op(n, CWD, a[0], 0, |p| calls::mkdir(p, a[1]))?,
            SYS_mkdirat => self.path_op(n, a[0], a[1], 0, |p| calls::mkdir(p, a[2]))?,
            // A FIFO (or a regular file, or what else the client makes) in
            // the mount, as a dynamic program's `mknod` makes it.
            SYS_mknod => self.path_op(n, CWD, a[0], 0, |p| calls::mknod(p, a[1], a[2]))?,
            SYS_mknodat => self.path_op(n, a[0], a[1], 0, |p| calls::mknod(p, a[2], a[3]))?,
            SYS_setxattr => self.xattr(n, xattr::Op::Set, false)?,
            SYS_lsetxattr => self.xattr(n, xattr::Op::Set, true)?,
            SYS_getxattr => self.xattr(n, xattr::Op::Get, false)?,
            SYS_lgetxattr => self.xattr(n, xattr::Op::Get, true)?,
            SYS_listxattr => self.xattr(n, xattr::Op::List, false)?,
            SYS_llistxattr => self.xattr(n, xattr::Op::List, true)?,
            SYS_removexattr => self.xattr(n, xattr::Op::Remove, false)?,
            SYS_lremovexattr => self.xattr(n, xattr::Op::Remove, true)?,
            SYS_unlink => self.path_op(n, CWD, a[0], 0, |p| calls::unlink(p, 0))?,
            SYS_rmdir => self.path_op(n, CWD, a[0], 0, |p| calls::unlink(p, AT_REMOVEDIR))?,
            SYS_unlinkat => self.path_op(n, a[0], a[1], 0, |p| calls::unlink(p, i(2)))?,
            SYS_rename => {
                self.two_paths(n, [CWD, a[0], CWD, a[1]], |x, y| calls::rename(x, y, 0))?
            }
            SYS_renameat => {
                self.two_paths(n, [a[0], a[1], a[2], a[3]], |x, y| calls::rename(x, y, 0))?
            }
            SYS_renameat2 => self.two_paths(n, [a[0], a[1], a[2], a[3]], |x, y| {
                calls::rename(x, y, i(4) as u32)
            })?,
            SYS_link => self.two_paths(n, [CWD, a[0], CWD, a[1]], |x, y| calls::link(x, y, 0))?,
            SYS_linkat => {
                self.two_paths(n, [a[0], a[1], a[2], a[3]], |x, y| calls::link(x, y, i(4)))?
            }
            SYS_symlink => self.symlink(n, a[0], CWD, a[1])?,
            SYS_symlinkat => self.symlink(n, a[0], a[1], a[2])?,
            SYS_chmod => self.path_op(n, CWD, a[0], 0, |p| calls::chmod(p, a[1]))?,
            SYS_fchmodat => self.path_op(n, a[0], a[1], 0, |p| calls::chmod(p, a[2]))?,
            SYS_chown => self.path_op(n, CWD, a[0], 0, |p| calls::chown(p, a[1], a[2], 0))?,
            SYS_lchown => self.path_op(n, CWD, a[0], 0, |p| {
                calls::chown(p, a[1], a[2], AT_SYMLINK_NOFOLLOW)
            })?,
            SYS_fchownat => {
                self.path_op(n, a[0], a[1], i(4), |p| calls::chown(p, a[2], a[3], i(4)))?
            }
            SYS_truncate => self.path_op(n, CWD, a[0], 0, |p| calls::truncate(p, a[1]))?,
            SYS_utimensat => self.utimensat(n)?,
            SYS_utime => {
                let p = self.place(n, CWD, a[0], false)?;
                self.old_times(n, p, a[1], times::OldTimes::Utimbuf)?
            }
            SYS_utimes => {
                let p = self.place(n, CWD, a[0], false)?;
                self.old_times(n, p, a[1], times::OldTimes::Timeval)?
            }
            // A NULL path names the descriptor itself, as in the kernel.
            SYS_futimesat => {
                let p = self.place(n, a[0], a[1], a[1] == 0)?;
                self.old_times(n, p, a[2], times::OldTimes::Timeval)?
            }
            SYS_statfs => match self.place(n, CWD, a[0], false)? {
                Place::Here(p) => {
                    let st = calls::statfs(&p)?;
                    self.put(n, a[1], seccomp::bytes_of(&st))?
                }
                _ => Kernel,
            },
            // A program stored in the mount runs from a copy the kernel
            // can read (`exec.rs`); a relative name from a tracked cwd
            // never runs a host file of the same name.
            SYS_execve => {
                let p = self.place(n, CWD, a[0], false)?;
                self.exec(n, a[0], p, false)?
            }
            SYS_execveat => {
                let p = self.place(n, a[0], a[1], i(4) & AT_EMPTY_PATH != 0)?;
                self.exec(n, a[1], p, i(4) & AT_SYMLINK_NOFOLLOW != 0)?
            }
            // A socket name made by a relative path from a tracked cwd
            // would be a host file in the kernel's cwd.
            SYS_bind => self.bind(n)?,
            nr if CWD_AND_DESCRIPTORS.contains(&nr) => self.cwd_or_descriptor(n)?,
            nr => match UNSERVED.iter().find(|u| u.0 == nr) {
                Some(&(_, dirfd, path)) => {
                    let d = dirfd.map_or(CWD, |k| a[k]);
                    match self.place(n, d, a[path], false)? {
                        Place::Kernel => Kernel,
                        _ => Done(Err(EOPNOTSUPP)),
                    }
                }
                None => Kernel,
            },
        })
    }

    /// The calls on the cwd and on descriptors (the relay's memfds).
    #[allow(non_upper_case_globals)] // libc spells call numbers in lower case
    fn cwd_or_descriptor(&mut self, n: &Notif) -> Result<Answer, i32> {
        let a = n.args;
        let i = |k: usize| a[k] as i32;
        use libc::*;
        Ok(match n.nr {
            SYS_fstat => match self.paths.desc_key(n.pid, a[0]) {
                Some(k) => {
                    let st = self.files.fstat(k, n.pid, i(0))?;
                    self.put(n, a[1], seccomp::bytes_of(&st))?
                }
                None => Kernel,
            },
            SYS_chdir => self.chdir(n)?,
            SYS_fchdir => match self.paths.desc_key(n.pid, a[0]) {
                Some(k) if self.files.is_dir(k) => {
                    let p = self.paths.dir(k).map(<[u8]>::to_vec).ok_or(EBADF)?;
                    self.paths.set_cwd(n.pid, Cwd::Tracked(p));
                    Done(Ok(0))
                }
                Some(_) => Done(Err(ENOTDIR)),
                None => {
                    self.paths.set_cwd(n.pid, Cwd::Host);
                    Kernel
                }
            },
            SYS_getcwd => match self.paths.cwd(n.pid) {
                Cwd::Tracked(p) => {
                    let mut out = p;
                    out.push(0);
                    if out.len() > a[1] as usize {
                        return Err(ERANGE);
                    }
                    self.put_n(n, a[0], &out, out.len() as i64)?
                }
                Cwd::Host => Kernel,
            },
            SYS_getdents64 => match self.paths.desc_key(n.pid, a[0]) {
                Some(k) if self.files.is_dir(k) => {
                    let count = (a[2] as usize).min(1 << 20);
                    let out = self.files.getdents(k, n.pid, i(0), count)?;
                    self.put_n(n, a[1], &out, out.len() as i64)?
                }
                _ => Kernel,
            },
            // `dup2`/`dup3` close their target silently: the same
            // write-back as `close`.
            SYS_close | SYS_dup2 | SYS_dup3 => {
                let fd = if n.nr == SYS_close { a[0] } else { a[1] };
                if let Some(k) = self.paths.desc_key(n.pid, fd) {
                    self.files.write_back(k);
                }
                Kernel
            }
            _ => Kernel,
        })
    }

    /// Write `data` at `addr` in the program and answer 0.
    fn put(&self, n: &Notif, addr: u64, data: &[u8]) -> Result<Answer, i32> {
        self.put_n(n, addr, data, 0)
    }

    /// Write `data` at `addr` in the program and answer `v`.
    fn put_n(&self, n: &Notif, addr: u64, data: &[u8], v: i64) -> Result<Answer, i32> {
        self.alive(n)?;
        seccomp::write_mem(n.pid, addr, data)?;
        Ok(Done(Ok(v)))
    }

    /// A call on one path: the kernel's, or `op` on the absolute path
    /// (a descriptor's own path for `AT_EMPTY_PATH` in `flags`).
    fn path_op(
        &mut self,
        n: &Notif,
        dirfd: u64,
        ptr: u64,
        flags: i32,
        op: impl FnOnce(&[u8]) -> Result<i64, i32>,
    ) -> Result<Answer, i32> {
        Ok(
            match self.place(n, dirfd, ptr, flags & libc::AT_EMPTY_PATH != 0)? {
                Place::Kernel => Kernel,
                Place::Here(p) => Done(op(&p)),
                Place::Desc(k) => {
                    let p = self.files.path_of(&self.paths, k).ok_or(libc::EBADF)?;
                    Done(op(&p))
                }
            },
        )
    }

    fn two_paths(
        &mut self,
        n: &Notif,
        a: [u64; 4],
        op: impl FnOnce(&[u8], &[u8]) -> Result<i64, i32>,
    ) -> Result<Answer, i32> {
        let from = self.place(n, a[0], a[1], false)?;
        let to = self.place(n, a[2], a[3], false)?;
        Ok(match (from, to) {
            (Place::Kernel, Place::Kernel) => Kernel,
            (Place::Here(x), Place::Here(y)) => Done(op(&x, &y)),
            // One name in the mount, one the kernel's: different file
            // systems.
            _ => Done(Err(libc::EXDEV)),
        })
    }

    fn open(
        &mut self,
        n: &Notif,
        dirfd: u64,
        ptr: u64,
        flags: i32,
        mode: u32,
    ) -> Result<Answer, i32> {
        Ok(match self.place(n, dirfd, ptr, false)? {
            Place::Here(p) if files::is_fifo(&p, flags & libc::O_NOFOLLOW != 0) => {
                super::fifo::open(&self.listener, n.id, &p, flags)?;
                Answer::Later
            }
            Place::Here(p) => {
                let fd = self.files.open(&mut self.paths, &p, flags, mode)?;
                Answer::Fd(fd, flags & libc::O_CLOEXEC != 0)
            }
            _ => Kernel,
        })
    }

    fn stat(
        &mut self,
        n: &Notif,
        dirfd: u64,
        ptr: u64,
        buf: u64,
        flags: i32,
    ) -> Result<Answer, i32> {
        let st = match self.place(n, dirfd, ptr, flags & libc::AT_EMPTY_PATH != 0)? {
            Place::Kernel => return Ok(Kernel),
            Place::Here(p) => {
                self.files.sync(&paths::normalize(&p));
                files::stat_path(&p, flags & libc::AT_SYMLINK_NOFOLLOW != 0)?
            }
            Place::Desc(k) => self.files.fstat(k, n.pid, dirfd as i32)?,
        };
        self.put(n, buf, seccomp::bytes_of(&st))
    }

    fn statx(&mut self, n: &Notif) -> Result<Answer, i32> {
        let a = n.args;
        let flags = a[2] as i32;
        let (path, desc) = match self.place(n, a[0], a[1], flags & libc::AT_EMPTY_PATH != 0)? {
            Place::Kernel => return Ok(Kernel),
            Place::Here(p) => {
                self.files.sync(&paths::normalize(&p));
                (p, None)
            }
            Place::Desc(k) => (
                self.files.path_of(&self.paths, k).ok_or(libc::EBADF)?,
                Some(k),
            ),
        };
        let keep = flags & (libc::AT_SYMLINK_NOFOLLOW | libc::AT_STATX_SYNC_TYPE);
        let mut stx = calls::statx(&path, keep, a[3] as u32)?;
        if let Some(k) = desc.filter(|&k| !self.files.is_dir(k)) {
            let size = self.files.copy_size(n.pid, a[0] as i32)?;
            stx.stx_size = size as u64;
            stx.stx_blocks = (size as u64).div_ceil(512);
            let _ = k;
        }
        self.put(n, a[4], seccomp::bytes_of(&stx))
    }

    fn readlink(
        &mut self,
        n: &Notif,
        dirfd: u64,
        ptr: u64,
        buf: u64,
        size: u64,
    ) -> Result<Answer, i32> {
        if (size as i64) <= 0 {
            return Ok(Done(Err(libc::EINVAL)));
        }
        match self.place(n, dirfd, ptr, false)? {
            Place::Here(p) => {
                let mut target = calls::readlink(&p)?;
                target.truncate(size as usize);
                let len = target.len() as i64;
                self.put_n(n, buf, &target, len)
            }
            _ => Ok(Kernel),
        }
    }

    fn symlink(&mut self, n: &Notif, target: u64, dirfd: u64, ptr: u64) -> Result<Answer, i32> {
        match self.place(n, dirfd, ptr, false)? {
            Place::Here(p) => {
                let t = paths::read_path(n.pid, target)?;
                Ok(Done(calls::symlink(&t, &p)))
            }
            _ => Ok(Kernel),
        }
    }

    fn bind(&mut self, n: &Notif) -> Result<Answer, i32> {
        let (addr, len) = (n.args[1], n.args[2] as usize);
        let family_len = std::mem::size_of::<libc::sa_family_t>();
        let max = std::mem::size_of::<libc::sockaddr_un>();
        if addr == 0 || len <= family_len || len > max {
            return Ok(Kernel);
        }
        let mut sa = vec![0u8; len];
        seccomp::read_mem(n.pid, addr, &mut sa)?;
        let family = u16::from_ne_bytes([sa[0], sa[1]]);
        let name = &sa[family_len..];
        // Abstract names (a leading NUL) are no file.
        if family != libc::AF_UNIX as u16 || name[0] == 0 {
            return Ok(Kernel);
        }
        let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
        match self.paths.place(n.pid, CWD, &name[..end], false)? {
            Place::Kernel => Ok(Kernel),
            _ => Ok(Done(Err(libc::EOPNOTSUPP))),
        }
    }

    fn chdir(&mut self, n: &Notif) -> Result<Answer, i32> {
        let path = paths::read_path(n.pid, n.args[0])?;
        let place = self.paths.place(n.pid, CWD, &path, false)?;
        let was_tracked = matches!(self.paths.cwd(n.pid), Cwd::Tracked(_));
        self.alive(n)?;
        Ok(match place {
            Place::Here(p) => {
                let st = files::stat_path(&p, false)?;
                if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
                    return Err(libc::ENOTDIR);
                }
                calls::access(&p, libc::X_OK, 0)?;
                let norm = if p.first() == Some(&b'/') {
                    paths::normalize(&p)
                } else {
                    p
                };
                self.paths.set_cwd(n.pid, Cwd::Tracked(norm));
                Done(Ok(0))
            }
            _ => {
                // Back to a host directory: the kernel moves. From a tracked
                // cwd only an absolute path gets here; a failing one must
                // leave the tracked cwd as it was.
                if was_tracked {
                    let st = files::stat_path(&path, false)?;
                    if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
                        return Err(libc::ENOTDIR);
                    }
                }
                self.paths.set_cwd(n.pid, Cwd::Host);
                Kernel
            }
        })
    }
}

/// The relay's own calls on absolute paths (through its client library),
/// errno on failure.
mod calls {
    use super::files::cstr;
    use super::rc;

    pub fn access(p: &[u8], mode: i32, flags: i32) -> Result<i64, i32> {
        let c = cstr(p)?;
        let fl = flags & (libc::AT_EACCESS | libc::AT_SYMLINK_NOFOLLOW);
        // SAFETY: NUL-terminated path.
        rc(unsafe { libc::faccessat(libc::AT_FDCWD, c.as_ptr(), mode, fl) })
    }

    pub fn mkdir(p: &[u8], mode: u64) -> Result<i64, i32> {
        let c = cstr(p)?;
        // SAFETY: NUL-terminated path.
        rc(unsafe { libc::mkdir(c.as_ptr(), mode as libc::mode_t) })
    }

    pub fn mknod(p: &[u8], mode: u64, dev: u64) -> Result<i64, i32> {
        let c = cstr(p)?;
        // SAFETY: NUL-terminated path.
        rc(unsafe { libc::mknod(c.as_ptr(), mode as libc::mode_t, dev as libc::dev_t) })
    }

    pub fn unlink(p: &[u8], flags: i32) -> Result<i64, i32> {
        let c = cstr(p)?;
        // SAFETY: NUL-terminated path.
        rc(unsafe {
            if flags & libc::AT_REMOVEDIR != 0 {
                libc::rmdir(c.as_ptr())
            } else {
                libc::unlink(c.as_ptr())
            }
        })
    }

    pub fn rename(a: &[u8], b: &[u8], flags: u32) -> Result<i64, i32> {
        let (x, y) = (cstr(a)?, cstr(b)?);
        // SAFETY: NUL-terminated paths.
        rc(unsafe {
            if flags == 0 {
                libc::rename(x.as_ptr(), y.as_ptr())
            } else {
                libc::renameat2(
                    libc::AT_FDCWD,
                    x.as_ptr(),
                    libc::AT_FDCWD,
                    y.as_ptr(),
                    flags,
                )
            }
        })
    }

    pub fn link(a: &[u8], b: &[u8], flags: i32) -> Result<i64, i32> {
        let (x, y) = (cstr(a)?, cstr(b)?);
        let fl = flags & libc::AT_SYMLINK_FOLLOW;
        // SAFETY: NUL-terminated paths.
        rc(unsafe { libc::linkat(libc::AT_FDCWD, x.as_ptr(), libc::AT_FDCWD, y.as_ptr(), fl) })
    }

    pub fn symlink(target: &[u8], p: &[u8]) -> Result<i64, i32> {
        let (t, c) = (cstr(target)?, cstr(p)?);
        // SAFETY: NUL-terminated paths.
        rc(unsafe { libc::symlink(t.as_ptr(), c.as_ptr()) })
    }

    pub fn chmod(p: &[u8], mode: u64) -> Result<i64, i32> {
        let c = cstr(p)?;
        // SAFETY: NUL-terminated path.
        rc(unsafe { libc::chmod(c.as_ptr(), mode as libc::mode_t) })
    }

    pub fn chown(p: &[u8], uid: u64, gid: u64, flags: i32) -> Result<i64, i32> {
        let c = cstr(p)?;
        let fl = flags & libc::AT_SYMLINK_NOFOLLOW;
        // SAFETY: NUL-terminated path.
        rc(unsafe { libc::fchownat(libc::AT_FDCWD, c.as_ptr(), uid as u32, gid as u32, fl) })
    }

    pub fn truncate(p: &[u8], len: u64) -> Result<i64, i32> {
        let c = cstr(p)?;
        // SAFETY: NUL-terminated path.
        rc(unsafe { libc::truncate(c.as_ptr(), len as i64) })
    }

    pub fn readlink(p: &[u8]) -> Result<Vec<u8>, i32> {
        let c = cstr(p)?;
        let mut buf = vec![0u8; 4096];
        // SAFETY: NUL-terminated path, local buffer of its length.
        let n = unsafe { libc::readlink(c.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            return Err(super::errno());
        }
        buf.truncate(n as usize);
        Ok(buf)
    }

    pub fn statx(p: &[u8], flags: i32, mask: u32) -> Result<libc::statx, i32> {
        let c = cstr(p)?;
        // SAFETY: the kernel or client fills a local struct.
        let mut stx: libc::statx = unsafe { std::mem::zeroed() };
        // SAFETY: as above, NUL-terminated path.
        rc(unsafe { libc::statx(libc::AT_FDCWD, c.as_ptr(), flags, mask, &mut stx) })?;
        Ok(stx)
    }

    pub fn statfs(p: &[u8]) -> Result<libc::statfs, i32> {
        let c = cstr(p)?;
        // SAFETY: fills a local struct.
        let mut st: libc::statfs = unsafe { std::mem::zeroed() };
        // SAFETY: as above, NUL-terminated path.
        rc(unsafe { libc::statfs(c.as_ptr(), &mut st) })?;
        Ok(st)
    }

    pub fn utimens(p: &[u8], times: Option<[(i64, i64); 2]>, flags: i32) -> Result<i64, i32> {
        let c = cstr(p)?;
        let ts = times.map(|t| {
            t.map(|(s, ns)| libc::timespec {
                tv_sec: s,
                tv_nsec: ns,
            })
        });
        let ptr = ts.as_ref().map_or(std::ptr::null(), |t| t.as_ptr());
        // SAFETY: NUL-terminated path; `ptr` is null or two local timespecs.
        rc(unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), ptr, flags) })
    }
}
