//! The caller's side of a remote exec (Hare §3.6.1): hand the new image to
//! another core's scheduling server, then stay behind as a *proxy* that
//! relays signals to the program and exits exactly as it did, so that the
//! proxy's parent (`wait`, `$?`, `timeout`, make) sees the real outcome.
//!
//! Runs inside the program's `execve`, in the client library (possibly
//! within its SIGSYS handler): only raw system calls (`raw`), no libc
//! signal functions (the client library wraps them).
//!
//! Host descriptors (terminal, host pipes and sockets, atoll placeholders,
//! the child session's socket, the program's memfd, the cwd) travel with
//! `SCM_RIGHTS` over the server's Unix socket, so the new image holds the
//! very same open files at the same numbers as after a local `execve`.
//!
//! Job control: a proxy stops itself after a SIGTSTP/SIGTTIN/SIGTTOU (the
//! program stops on the same signal), so a shell sees the job stopped.
//!
//! Limits (fall back to a local exec): a multithreaded caller (the other
//! threads would survive in the proxy), more than [`wire::MAX_FDS`]
//! descriptors, an argument list larger than [`wire::MAX_PACKET`], no
//! scheduling server.

use std::convert::Infallible;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::Path;

use rustix::event::{PollFd, PollFlags};
use rustix::fs::{Mode, OFlags};
use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};

use crate::raw;
use crate::wire::{self, ExecSpec, FdRole, ToProxy, ToServer, WireError};

/// Why a remote exec did not happen.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    /// Nothing was started and nothing changed: run the exec locally.
    #[error("remote exec not possible: {0}")]
    Fallback(String),
    /// The new image could not be executed (execve's errno).
    #[error("exec failed: errno {0}")]
    Exec(i32),
}

impl From<WireError> for RemoteError {
    fn from(e: WireError) -> Self {
        RemoteError::Fallback(e.to_string())
    }
}

impl From<rustix::io::Errno> for RemoteError {
    fn from(e: rustix::io::Errno) -> Self {
        RemoteError::Fallback(e.to_string())
    }
}

/// The new image, as the client library prepared it for `execve`.
pub struct Image<'a> {
    pub path: &'a [u8],
    pub argv: Vec<Vec<u8>>,
    pub envp: Vec<Vec<u8>>,
    pub flags: i32,
    /// memfd holding an atoll program (run with `AT_EMPTY_PATH`).
    pub program_fd: Option<i32>,
    /// `execveat` directory for a relative `path` (not `AT_FDCWD`).
    pub dirfd: Option<i32>,
}

const fn bit(sig: i32) -> u64 {
    1 << (sig - 1)
}

/// The socket of the scheduling server of `core` in `runtime_dir`.
pub fn socket_path(runtime_dir: &Path, core: usize) -> std::path::PathBuf {
    runtime_dir.join(format!("sched-{core}.sock"))
}

/// Our open, inheritable descriptors (those a local `execve` would keep).
fn inheritable_fds(skip: i32) -> Result<Vec<i32>, RemoteError> {
    let dir = rustix::fs::open(
        "/proc/self/fd",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let dirfd = dir.as_raw_fd();
    let mut out = Vec::new();
    for e in rustix::fs::Dir::read_from(&dir)? {
        let e = e?;
        let Ok(fd) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if fd == dirfd || fd == skip {
            continue;
        }
        // SAFETY: `fd` is open in this process (listed just now); the
        // borrow does not outlive this statement.
        let b = unsafe { BorrowedFd::borrow_raw(fd) };
        match rustix::io::fcntl_getfd(b) {
            Ok(fl) if !fl.contains(rustix::io::FdFlags::CLOEXEC) => out.push(fd),
            _ => {}
        }
    }
    Ok(out)
}

/// Run `image` on `core` through its scheduling server and become its
/// proxy. Returns only if nothing was started.
pub fn remote_exec(
    runtime_dir: &Path,
    core: usize,
    image: Image<'_>,
) -> Result<Infallible, RemoteError> {
    if raw::thread_count() != Some(1) {
        return Err(RemoteError::Fallback("multithreaded caller".into()));
    }
    let conn = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )?;
    let addr = SocketAddrUnix::new(socket_path(runtime_dir, core))?;
    rustix::net::connect(&conn, &addr)?;
    let cwd = rustix::fs::open(
        ".",
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;

    let mut roles = Vec::new();
    let mut raws = Vec::new();
    for fd in inheritable_fds(conn.as_raw_fd())? {
        roles.push(FdRole::Keep(fd));
        raws.push(fd);
    }
    if let Some(fd) = image.program_fd {
        roles.push(FdRole::Program);
        raws.push(fd);
    }
    if let Some(fd) = image.dirfd {
        roles.push(FdRole::Dir);
        raws.push(fd);
    }
    roles.push(FdRole::Cwd);
    raws.push(cwd.as_raw_fd());
    if raws.len() > wire::MAX_FDS {
        return Err(RemoteError::Fallback("too many descriptors".into()));
    }
    // SAFETY: every number is open in this process (listed or given by
    // the caller) for the duration of the send below.
    let fds: Vec<BorrowedFd<'_>> = raws
        .iter()
        .map(|&f| unsafe { BorrowedFd::borrow_raw(f) })
        .collect();

    let umask = raw::sc(libc::SYS_umask, 0o022, 0, 0);
    raw::sc(libc::SYS_umask, umask as u64, 0, 0);
    let mask = raw::sigmask() & !bit(libc::SIGSYS);
    let spec = ExecSpec {
        path: image.path.to_vec(),
        argv: image.argv,
        envp: image.envp,
        flags: image.flags,
        fds: roles,
        umask: umask as u32,
        rlimits: raw::rlimits(),
        sigmask: mask,
        ignored: raw::ignored_signals(),
        pgid: raw::sc(libc::SYS_getpgid, 0, 0, 0) as i32,
        // The raw call answers 20 - nice (never negative).
        nice: 20 - raw::sc(libc::SYS_getpriority, libc::PRIO_PROCESS as u64, 0, 0) as i32,
    };
    // From here on signals wait for the proxy loop: one that arrives
    // during the hand-over is relayed as soon as the program runs.
    let relay = !(bit(libc::SIGSYS) | bit(libc::SIGKILL) | bit(libc::SIGSTOP));
    let old = raw::set_sigmask(relay);
    let restore = |e: RemoteError| {
        raw::set_sigmask(old);
        Err(e)
    };
    if let Err(e) = wire::send(&conn, &ToServer::Exec(spec), &fds) {
        return restore(e.into());
    }
    drop(fds);
    let same_group = match wire::recv::<ToProxy>(&conn) {
        Ok((ToProxy::Started { same_group, .. }, _)) => same_group,
        Ok((ToProxy::Failed { errno }, _)) => return restore(RemoteError::Exec(errno)),
        Ok((ToProxy::Refused, _)) => {
            return restore(RemoteError::Fallback("refused by the server".into()))
        }
        Ok((other, _)) => return restore(RemoteError::Fallback(format!("unexpected {other:?}"))),
        Err(e) => return restore(e.into()),
    };
    drop(cwd);
    become_proxy(conn, relay, same_group)
}

/// The rest of this process's life: what a local `execve` would have
/// closed is closed (which also ends the old atoll session, as exec
/// does), signals are relayed, and the program's end is ours.
fn become_proxy(conn: OwnedFd, relay: u64, same_group: bool) -> ! {
    let keep = conn.as_raw_fd() as u64;
    // close_range(first, last, 0)
    if keep > 0 {
        raw::sc(libc::SYS_close_range, 0, keep - 1, 0);
    }
    raw::sc(libc::SYS_close_range, keep + 1, u32::MAX as u64, 0);
    let sfd = raw::signalfd(relay);
    let sfd = (sfd >= 0).then(|| {
        // SAFETY: a descriptor the kernel just created for us.
        unsafe { OwnedFd::from_raw_fd(sfd as i32) }
    });
    loop {
        let mut pfds = vec![PollFd::new(&conn, PollFlags::IN)];
        if let Some(s) = &sfd {
            pfds.push(PollFd::new(s, PollFlags::IN));
        }
        match rustix::event::poll(&mut pfds, None) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => die_by(libc::SIGKILL),
        }
        let conn_ready = !pfds[0].revents().is_empty();
        let sig_ready = pfds.get(1).is_some_and(|p| !p.revents().is_empty());
        drop(pfds);
        if sig_ready {
            if let Some(s) = &sfd {
                relay_pending(s.as_fd(), &conn, same_group);
            }
        }
        if conn_ready {
            match wire::recv::<ToProxy>(&conn) {
                Ok((ToProxy::Exited { code }, _)) => raw::exit_group(code),
                Ok((ToProxy::Killed { sig }, _)) => die_by(sig),
                Ok(_) => {}
                // Signals we relayed after the program ended were unread
                // when the server closed: Linux reports that once, and the
                // status queued before it is still there to read.
                Err(WireError::Io(rustix::io::Errno::CONNRESET)) => {}
                // The server went away without a status: the instance is
                // shutting down and killed the program.
                Err(_) => die_by(libc::SIGKILL),
            }
        }
    }
}

/// Read the signals queued on the signalfd and send them on.
fn relay_pending(sfd: BorrowedFd<'_>, conn: &OwnedFd, same_group: bool) {
    let mut info = [0u8; 128];
    while let Ok(128) = rustix::io::read(sfd, &mut info) {
        let signo = u32::from_ne_bytes(info[0..4].try_into().unwrap_or_default()) as i32;
        let code = i32::from_ne_bytes(info[8..12].try_into().unwrap_or_default());
        if signo == libc::SIGCHLD {
            // Our own children (started before the exec) are not the
            // program's concern.
            continue;
        }
        // Terminal-generated (^C, ^Z, hangup, window size): the kernel
        // already sent it to the whole foreground group, program included.
        if !(same_group && code == libc::SI_KERNEL) {
            let _ = wire::send(conn, &ToServer::Signal(signo), &[]);
        }
        if matches!(signo, libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU) {
            // Job control: the program stops on these (or, like an editor,
            // cleans up and stops itself), so its stand-in stops too and the
            // shell sees the job stopped; its SIGCONT resumes both. The
            // server cannot see stops (a pidfd reports only the exit), hence
            // this guess; a SIGSTOP sent to the proxy alone stops only it.
            let pid = raw::sc(libc::SYS_getpid, 0, 0, 0);
            raw::sc(libc::SYS_kill, pid as u64, libc::SIGSTOP as u64, 0);
        }
    }
}

/// Terminate with `sig` as the program did, so `wait` reports the same.
fn die_by(sig: i32) -> ! {
    // No core file from the proxy: the program already dumped its own.
    raw::set_rlimit(libc::RLIMIT_CORE, 0, 0);
    raw::default_action(sig);
    raw::set_sigmask(!bit(sig) & !(bit(libc::SIGKILL) | bit(libc::SIGSTOP)));
    let pid = raw::sc(libc::SYS_getpid, 0, 0, 0);
    raw::sc(libc::SYS_kill, pid as u64, sig as u64, 0);
    raw::exit_group(128 + sig)
}
