//! The few system calls the driver needs that have no safe wrapper in
//! rustix: signal masks and `sigwaitinfo`, `fork`, `_exit`, pointing
//! stdio at another file, setting up a program started for another host
//! (`node::spawn`), and the preload library's two exports a remote
//! spawn's proxy calls (`node::remote`). Every `unsafe` block of the
//! crate lives here.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// The signals atoll turns into an orderly shutdown.
pub const TERMINATING: [i32; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// `si_code` of signals the kernel generates itself, notably the terminal
/// driver's SIGINT on ^C and SIGHUP on hangup, which already reach the
/// whole foreground process group.
pub const SI_KERNEL: i32 = 0x80;

fn terminating_set() -> libc::sigset_t {
    signal_set(&TERMINATING)
}

/// A signal set holding `sigs`.
pub fn signal_set(sigs: &[i32]) -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; sigemptyset initialises it fully
    // before sigaddset reads it, and both only write into our local.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for &s in sigs {
            libc::sigaddset(&mut set, s);
        }
        set
    }
}

/// Block `sigs` in the calling thread (and the threads it starts later),
/// so that only [`wait_signal`] consumes them.
pub fn block_signals(sigs: &[i32]) -> io::Result<()> {
    let set = signal_set(sigs);
    // SAFETY: an initialised set; the old mask is not requested.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

/// Signals a stand-in for a program (a remote spawn's proxy, the relay of
/// a program that cannot load the client) passes on to it; terminal and
/// job-control stops are not (COMPATIBILITY.md).
pub const RELAYED_SIGNALS: [i32; 8] = [
    libc::SIGHUP,
    libc::SIGINT,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGALRM,
    libc::SIGTERM,
    libc::SIGWINCH,
];

/// Wait for one of `sigs` (blocked in every thread).
pub fn wait_signal(sigs: &[i32]) -> io::Result<i32> {
    let set = signal_set(sigs);
    loop {
        // SAFETY: siginfo_t is plain data that sigwaitinfo fills in.
        let rc = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            libc::sigwaitinfo(&set, &mut info)
        };
        if rc >= 0 {
            return Ok(rc);
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// End the process killed by `sig`, as a program it stands for was, so
/// that `wait` reports the same (no core file: the program dumped its own).
pub fn die_by(sig: i32) -> ! {
    let set = signal_set(&[sig]);
    // SAFETY: plain system calls on local, initialised data; `exit` is the
    // fallback for a signal whose default action does not terminate.
    unsafe {
        let none = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        libc::setrlimit(libc::RLIMIT_CORE, &none);
        libc::signal(sig, libc::SIG_DFL);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::kill(libc::getpid(), sig);
        libc::_exit(128 + sig)
    }
}

/// A change of a child's state, as `waitid` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChildChange {
    Exited(i32),
    Killed(i32),
    Stopped(i32),
    Continued,
}

/// Wait for the next change of child `pid`: its end (which reaps it), a
/// stop or a continue (job control).
pub fn wait_change(pid: i32) -> io::Result<ChildChange> {
    loop {
        // SAFETY: siginfo_t is plain data that waitid fills in; the
        // accessors read the fields of the SIGCHLD layout it wrote.
        let (rc, code, status) = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            let rc = libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WSTOPPED | libc::WCONTINUED,
            );
            (rc, info.si_code, info.si_status())
        };
        if rc != 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        return Ok(match code {
            libc::CLD_EXITED => ChildChange::Exited(status),
            libc::CLD_KILLED | libc::CLD_DUMPED => ChildChange::Killed(status),
            libc::CLD_STOPPED | libc::CLD_TRAPPED => ChildChange::Stopped(status),
            libc::CLD_CONTINUED => ChildChange::Continued,
            _ => continue,
        });
    }
}

/// `kill(2)`; errors (the process already gone) are the caller's to ignore.
pub fn kill(pid: i32, sig: i32) -> io::Result<()> {
    // SAFETY: kill only reads its two integer arguments.
    if unsafe { libc::kill(pid, sig) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Who a program started for another host's process runs as, and with
/// which umask and limits (what its `execve` would have kept).
pub struct ChildSetup {
    /// `(uid, gid, supplementary groups)`, when it differs from ours.
    pub user: Option<(u32, u32, Vec<u32>)>,
    pub umask: u32,
    pub rlimits: Vec<(u32, u64, u64)>,
}

/// Apply `setup` in the child of `cmd` between fork and exec.
pub fn setup_child(cmd: &mut std::process::Command, setup: ChildSetup) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs between fork and exec and makes only
    // system calls (setrlimit, umask, setgroups, setgid, setuid) on data
    // prepared before the fork; it allocates nothing and takes no lock.
    unsafe {
        cmd.pre_exec(move || {
            for &(res, soft, hard) in &setup.rlimits {
                let lim = libc::rlimit {
                    rlim_cur: soft,
                    rlim_max: hard,
                };
                // A limit we may not raise stays ours (lower is allowed).
                libc::setrlimit(res as _, &lim);
            }
            libc::umask(setup.umask as libc::mode_t);
            if let Some((uid, gid, groups)) = &setup.user {
                if libc::setgroups(groups.len(), groups.as_ptr()) != 0
                    || libc::setgid(*gid) != 0
                    || libc::setuid(*uid) != 0
                {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}

/// Block [`TERMINATING`] in the calling thread. Threads created afterwards
/// (server threads, the signal thread) inherit the mask, so these signals
/// are only ever consumed by [`wait_terminating`]. Children inherit the
/// mask too (std does not reset it): see [`unblock_terminating_in_child`].
pub fn block_terminating() -> io::Result<()> {
    let set = terminating_set();
    // SAFETY: `set` is a valid, initialised sigset; the old mask is not
    // requested (null).
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

/// Give a child started with `cmd` the terminating signals back: a
/// program must die of SIGTERM/SIGINT as it would without atoll.
pub fn unblock_terminating_in_child(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    let set = terminating_set();
    // SAFETY: the closure runs between fork and exec and only calls
    // pthread_sigmask (async-signal-safe) on a set prepared beforehand; it
    // allocates nothing and takes no lock.
    unsafe {
        cmd.pre_exec(move || {
            let rc = libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            if rc != 0 {
                return Err(io::Error::from_raw_os_error(rc));
            }
            Ok(())
        });
    }
}

/// Wait for one of [`TERMINATING`] (which must be blocked). Returns the
/// signal number and its `si_code`.
pub fn wait_terminating() -> io::Result<(i32, i32)> {
    let set = terminating_set();
    loop {
        // SAFETY: siginfo_t is plain data that sigwaitinfo fills in; `set`
        // is initialised.
        let (rc, code) = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            let rc = libc::sigwaitinfo(&set, &mut info);
            (rc, info.si_code)
        };
        if rc >= 0 {
            return Ok((rc, code));
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// Result of [`fork`].
pub enum Forked {
    Parent { child: i32 },
    Child,
}

/// `fork(2)`. Must be called while the process has a single thread, so the
/// child can keep using the allocator and std freely.
pub fn fork() -> io::Result<Forked> {
    debug_assert_eq!(thread_count(), Some(1), "fork with several threads");
    // SAFETY: the process is single-threaded (checked in debug builds), so
    // no lock can be held by a thread that does not exist in the child.
    match unsafe { libc::fork() } {
        -1 => Err(io::Error::last_os_error()),
        0 => Ok(Forked::Child),
        child => Ok(Forked::Parent { child }),
    }
}

/// Leave at once without running atexit handlers or flushing std buffers
/// that belong to the parent (for the intermediate process of a double fork).
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit never returns and touches no process state we rely on.
    unsafe { libc::_exit(code) }
}

/// Make `fd` the process's descriptor `target` (0, 1 or 2).
pub fn redirect(fd: BorrowedFd<'_>, target: i32) -> io::Result<()> {
    // SAFETY: dup2 on a descriptor we borrow (valid for the call) onto a
    // standard descriptor; it closes the old target atomically.
    if unsafe { libc::dup2(fd.as_raw_fd(), target) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Number of threads of this process (from /proc), if known.
pub fn thread_count() -> Option<usize> {
    std::fs::read_dir("/proc/self/task").ok().map(|d| d.count())
}

/// In the child `cmd` starts: each number of `targets` a duplicate of
/// `placeholder`, and `keep` (the session socket) left open across exec,
/// at the numbers they have here (`node::inherit`). `placeholder` and
/// `keep` are above every target, so no duplicate lands on either.
pub fn inherit_in_child(
    cmd: &mut std::process::Command,
    placeholder: i32,
    targets: Vec<i32>,
    keep: i32,
) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs between fork and exec (after std has put
    // stdio in place) and makes only dup2 and fcntl calls on numbers
    // prepared before the fork; it allocates nothing and takes no lock.
    // A target may be where std keeps its exec-error pipe in the child:
    // an exec failure then reads as an exit with status 1.
    unsafe {
        cmd.pre_exec(move || {
            for &t in &targets {
                if libc::dup2(placeholder, t) < 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            if libc::fcntl(keep, libc::F_SETFD, 0) < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// In `cmd`'s child, make stderr a duplicate of stdout (after std has put
/// stdio in place).
pub fn stderr_to_stdout_in_child(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs between fork and exec and makes one dup2
    // call; it allocates nothing and takes no lock.
    unsafe {
        cmd.pre_exec(|| {
            if libc::dup2(1, 2) < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// The address of `name` in the process (the preload library's exports:
/// `atoll_preload` `remote.rs`), if it is loaded.
fn preload_symbol(name: &std::ffi::CStr) -> Option<*mut libc::c_void> {
    // SAFETY: dlsym with a NUL-terminated name; a null result is checked.
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    (!p.is_null()).then_some(p)
}

/// The atoll descriptors a program exec'd from this process would
/// inherit, as the preload library describes them (`ATOLL_STATE` text);
/// `None` when this process runs without it.
pub fn preload_inheritable_fds() -> Option<String> {
    type F = unsafe extern "C" fn(*mut u8, usize) -> isize;
    let p = preload_symbol(c"atoll_inheritable_fds")?;
    // SAFETY: the preload library exports this symbol with exactly this
    // prototype.
    let f: F = unsafe { std::mem::transmute::<*mut libc::c_void, F>(p) };
    let mut buf = vec![0u8; 4096];
    loop {
        // SAFETY: `buf` has `buf.len()` writable bytes.
        let n = unsafe { f(buf.as_mut_ptr(), buf.len()) };
        if n < 0 {
            return None;
        }
        if n as usize <= buf.len() {
            buf.truncate(n as usize);
            return String::from_utf8(buf).ok();
        }
        buf.resize(n as usize, 0);
    }
}

/// Have the preload library give session `to` a reference to the
/// description of each of `fds`; the ones it gave.
pub fn preload_share_fds(to: u64, fds: &[i32]) -> Vec<i32> {
    type F = unsafe extern "C" fn(u64, *mut i32, usize) -> isize;
    let Some(p) = preload_symbol(c"atoll_share_fds") else {
        return Vec::new();
    };
    // SAFETY: the preload library exports this symbol with exactly this
    // prototype.
    let f: F = unsafe { std::mem::transmute::<*mut libc::c_void, F>(p) };
    let mut v = fds.to_vec();
    // SAFETY: `v` has `v.len()` writable descriptors.
    let n = unsafe { f(to, v.as_mut_ptr(), v.len()) };
    v.truncate(n.max(0) as usize);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocked_signal_is_returned_by_wait_terminating() {
        // Run in a dedicated thread so the test harness's other threads
        // keep their masks; a thread-directed signal must hit this thread.
        std::thread::spawn(|| {
            block_terminating().unwrap();
            // SAFETY: sending SIGHUP to this very thread, where it is blocked.
            unsafe { libc::pthread_kill(libc::pthread_self(), libc::SIGHUP) };
            let (sig, _code) = wait_terminating().unwrap();
            assert_eq!(sig, libc::SIGHUP);
        })
        .join()
        .unwrap();
    }

    /// `SigBlk` of a child spawned from a thread that blocks TERMINATING.
    fn child_blocked_mask(unblock: bool) -> u64 {
        std::thread::spawn(move || {
            block_terminating().unwrap();
            let mut cmd = std::process::Command::new("grep");
            cmd.args(["^SigBlk", "/proc/self/status"]);
            if unblock {
                unblock_terminating_in_child(&mut cmd);
            }
            let out = cmd.output().unwrap();
            let line = String::from_utf8(out.stdout).unwrap();
            u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap()
        })
        .join()
        .unwrap()
    }

    #[test]
    fn children_get_the_terminating_signals_unblocked() {
        let bits: u64 = TERMINATING.iter().map(|s| 1u64 << (s - 1)).sum();
        // std keeps the parent's mask: without the fix-up the child would
        // ignore ^C and SIGTERM.
        assert_eq!(child_blocked_mask(false) & bits, bits);
        assert_eq!(child_blocked_mask(true) & bits, 0);
    }
}
