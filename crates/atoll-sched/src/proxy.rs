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
//! Signals, exactly once. The program joins the caller's process group (the
//! terminal's foreground group must contain it for terminal reads and
//! writes, and ^C/^Z reach it there), and the proxy then *leaves* that
//! group for one of its own: a signal to the group (terminal, `kill --
//! -PGID`, a shell's `kill %1`) reaches the program directly and only it;
//! a signal to the proxy's pid reaches only the proxy, which relays it.
//! A group leader cannot found another group, so a helper child founds
//! one the proxy moves into. The proxy returns to the caller's group just
//! before it ends, so its parent reaps it where it started. Left open: a
//! group signal sent during the exec hand-over (between the program
//! joining the group and the proxy leaving it) arrives twice.
//!
//! Job control (`mirror`): the server sees the program stop (`waitid`) and
//! asks the proxy to stop with the same signal, so the proxy's parent sees
//! the job stopped with the program's `WSTOPSIG`; it sees a SIGSTOP sent to
//! the proxy (which nothing can catch) in `/proc` and stops the program. A
//! continue of either side continues the other (SIGCONTs the server sends
//! the proxy are not relayed back).
//!
//! Limits (fall back to a local exec): a multithreaded caller (the other
//! threads would survive in the proxy), more than [`wire::MAX_FDS`]
//! descriptors, no scheduling server. The argument lists are not bounded by
//! a packet: they cross as a Cosh move (`crate::args`).

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

/// A connection to the scheduling server of `core`.
fn connect(runtime_dir: &Path, core: usize) -> Result<OwnedFd, RemoteError> {
    let conn = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )?;
    let addr = SocketAddrUnix::new(socket_path(runtime_dir, core))?;
    rustix::net::connect(&conn, &addr)?;
    Ok(conn)
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

/// The datagram socket of the scheduling server of `core`, where
/// processes placed there in place say so (`ToServer::Placed`).
pub fn place_path(runtime_dir: &Path, core: usize) -> std::path::PathBuf {
    runtime_dir.join(format!("sched-{core}.place"))
}

/// Move this thread (about to `execve`, which keeps only it) to `core`
/// after telling that core's scheduling server, which counts the process
/// as running there until it ends (`ToServer::Placed`; the kernel stamps
/// our pid on the message). The caller then execs in place: its pid,
/// parent, process group and tracer stay, as without atoll.
///
/// One datagram, not a connection: the message has no reply, and a
/// connection cost a `connect` here and an `accept`, a poll slot and a
/// `close` in the server for every exec. The move comes first: where a
/// program runs is the policy's choice, not its server's health, so a
/// server that is not there (restarting, or not yet up when the first
/// program starts) or whose queue stays full (`wire::PLACED_WAIT`) only
/// misses the count — an error, which the caller records in the load
/// table instead. An error before the move means it did not happen.
pub fn place_self(runtime_dir: &Path, core: usize) -> Result<(), PlaceError> {
    let mut set = rustix::thread::CpuSet::new();
    set.set(core);
    rustix::thread::sched_setaffinity(None, &set).map_err(|e| PlaceError::NotMoved(e.into()))?;
    let told = || -> Result<(), RemoteError> {
        let sock = rustix::net::socket_with(
            AddressFamily::UNIX,
            SocketType::DGRAM,
            SocketFlags::CLOEXEC,
            None,
        )?;
        let to = SocketAddrUnix::new(place_path(runtime_dir, core))?;
        wire::send_placed(&sock, &to)?;
        Ok(())
    };
    told().map_err(PlaceError::Uncounted)
}

/// Why [`place_self`] did not do all of its work.
#[derive(Debug)]
pub enum PlaceError {
    /// The thread stays where it was.
    NotMoved(RemoteError),
    /// The thread moved, but the core's scheduling server was not told.
    Uncounted(RemoteError),
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
    let conn = connect(runtime_dir, core)?;
    // The server's process: SIGCONTs from it mirror the program (`mirror`).
    let server = rustix::net::sockopt::socket_peercred(&conn)
        .map(|c| c.pid.as_raw_nonzero().get())
        .unwrap_or(0);
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
    // The lists cross as a strong move (`args`): the parcel's blocks go
    // with the packet, after the roles above.
    let mut cosh = crate::args::library();
    let parcel = match crate::args::pack(&mut cosh, &image.argv, &image.envp) {
        Ok(p) => p,
        Err(e) => return Err(RemoteError::Fallback(format!("argument transfer: {e}"))),
    };
    let args_fds = parcel.descriptors();
    if raws.len() + args_fds.len() > wire::MAX_FDS {
        return Err(RemoteError::Fallback("too many descriptors".into()));
    }
    roles.extend(args_fds.iter().map(|_| FdRole::Args));
    // SAFETY: every number is open in this process (listed or given by
    // the caller) for the duration of the send below.
    let fds: Vec<BorrowedFd<'_>> = raws
        .iter()
        .map(|&f| unsafe { BorrowedFd::borrow_raw(f) })
        .chain(args_fds)
        .collect();

    let umask = raw::sc(libc::SYS_umask, 0o022, 0, 0);
    raw::sc(libc::SYS_umask, umask as u64, 0, 0);
    let mask = raw::sigmask() & !bit(libc::SIGSYS);
    let spec = ExecSpec {
        path: image.path.to_vec(),
        argv: Vec::new(),
        envp: Vec::new(),
        flags: image.flags,
        fds: roles,
        umask: umask as u32,
        rlimits: raw::rlimits(),
        sigmask: mask,
        ignored: raw::ignored_signals(),
        pgid: raw::sc(libc::SYS_getpgid, 0, 0, 0) as i32,
        // The raw call answers 20 - nice (never negative).
        nice: 20 - raw::sc(libc::SYS_getpriority, libc::PRIO_PROCESS as u64, 0, 0) as i32,
        // 0xffffffff queries without changing it.
        personality: raw::sc(libc::SYS_personality, 0xffff_ffff, 0, 0) as u32,
        securebits: raw::sc(libc::SYS_prctl, libc::PR_GET_SECUREBITS as u64, 0, 0).max(0) as u32,
        args: Some(crate::args::ArgsTransfer {
            ticket: parcel.ticket.clone(),
            inline: parcel.inline.clone(),
        }),
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
    let pgid = raw::sc(libc::SYS_getpgid, 0, 0, 0) as i32;
    let same_group = match wire::recv::<ToProxy>(&conn) {
        Ok((ToProxy::Started { same_group, .. }, _)) => same_group,
        Ok((ToProxy::Failed { errno }, _)) => return restore(RemoteError::Exec(errno)),
        Ok((ToProxy::Refused, _)) => {
            return restore(RemoteError::Fallback("refused by the server".into()))
        }
        Ok((other, _)) => return restore(RemoteError::Fallback(format!("unexpected {other:?}"))),
        // The server took the exec and went away without an answer (its
        // process died, `process`): the program may have started and been
        // killed with it, so running it again here could do its work twice.
        Err(_) => return restore(RemoteError::Exec(libc::EIO)),
    };
    drop(cwd);
    // The program stands in the group for us now.
    let left = same_group && leave_group(pgid);
    become_proxy(
        conn,
        Proxy {
            relay,
            same_group,
            left,
            pgid,
            server,
        },
    )
}

/// Leave process group `pgid` for a group of our own (see the module
/// comment). False if we are still in `pgid`.
fn leave_group(pgid: i32) -> bool {
    let me = raw::sc(libc::SYS_getpid, 0, 0, 0) as i32;
    if me != pgid {
        return raw::sc(libc::SYS_setpgid, 0, 0, 0) == 0;
    }
    // A leader's `setpgid(0, 0)` names its current group: a helper founds
    // a new one (the parent may move a child that has not exec'd) and we
    // join it; the group outlives the helper while we are in it.
    let Some(h) = raw::fork_idle() else {
        return false;
    };
    let ok = raw::sc(libc::SYS_setpgid, h as u64, h as u64, 0) == 0
        && raw::sc(libc::SYS_setpgid, 0, h as u64, 0) == 0;
    raw::sc(libc::SYS_kill, h as u64, libc::SIGKILL as u64, 0);
    while raw::sc(libc::SYS_wait4, h as u64, 0, 0) == -(libc::EINTR as i64) {}
    ok
}

/// What the proxy loop needs to know.
struct Proxy {
    /// The signals it relays (blocked, read from a signalfd).
    relay: u64,
    /// The program joined our (original) process group.
    same_group: bool,
    /// We left that group: every signal we get was meant for us alone.
    left: bool,
    /// The original group, rejoined before we end.
    pgid: i32,
    /// The scheduling server's pid (0 if unknown).
    server: i32,
}

impl Proxy {
    /// Back to the group we started in (re-founding it if we led it and
    /// it emptied), so our parent reaps us where it put us.
    fn rejoin(&self) {
        if !self.left {
            return;
        }
        let me = raw::sc(libc::SYS_getpid, 0, 0, 0) as i32;
        let target = if me == self.pgid { 0 } else { self.pgid };
        raw::sc(libc::SYS_setpgid, 0, target as u64, 0);
    }

    /// Stop the way the program stopped, so our parent's `waitpid`
    /// reports the same `WSTOPSIG` (a shell prints "Stopped" for SIGTSTP,
    /// "Stopped (signal)" for SIGSTOP).
    fn stop_as(&self, sig: i32) {
        let me = raw::sc(libc::SYS_getpid, 0, 0, 0);
        let tty_stop = matches!(sig, libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU);
        // Linux discards SIGTSTP/TTIN/TTOU in an orphaned process group;
        // the stop must happen all the same (the program did stop).
        if !tty_stop || orphaned_group() {
            raw::sc(libc::SYS_kill, me as u64, libc::SIGSTOP as u64, 0);
            return;
        }
        // The old image's handler (if any) must not run: default action,
        // raised while blocked and delivered by the unblock below.
        raw::default_action(sig);
        raw::sc(libc::SYS_kill, me as u64, sig as u64, 0);
        raw::set_sigmask(self.relay & !bit(sig));
        raw::set_sigmask(self.relay);
    }
}

/// Is our process group orphaned (POSIX: no member has a parent in
/// another group of the same session)? We are alone in our group after
/// `leave_group`, so only our parent counts.
fn orphaned_group() -> bool {
    let ppid = raw::sc(libc::SYS_getppid, 0, 0, 0);
    let psid = raw::sc(libc::SYS_getsid, ppid as u64, 0, 0);
    let ppgid = raw::sc(libc::SYS_getpgid, ppid as u64, 0, 0);
    let sid = raw::sc(libc::SYS_getsid, 0, 0, 0);
    let pgid = raw::sc(libc::SYS_getpgid, 0, 0, 0);
    !(psid == sid && ppgid != pgid)
}

/// The rest of this process's life: what a local `execve` would have
/// closed is closed (which also ends the old atoll session, as exec
/// does), signals are relayed, and the program's end is ours.
fn become_proxy(conn: OwnedFd, p: Proxy) -> ! {
    let keep = conn.as_raw_fd() as u64;
    // close_range(first, last, 0)
    if keep > 0 {
        raw::sc(libc::SYS_close_range, 0, keep - 1, 0);
    }
    raw::sc(libc::SYS_close_range, keep + 1, u32::MAX as u64, 0);
    let sfd = raw::signalfd(p.relay);
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
                relay_pending(s.as_fd(), &conn, &p);
            }
        }
        if conn_ready {
            match wire::recv::<ToProxy>(&conn) {
                Ok((ToProxy::Exited { code }, _)) => {
                    p.rejoin();
                    raw::exit_group(code)
                }
                Ok((ToProxy::Killed { sig }, _)) => {
                    p.rejoin();
                    die_by(sig)
                }
                Ok((ToProxy::Stopped { sig }, _)) => on_stop_request(&conn, &p, sig),
                Ok(_) => {}
                // Signals we relayed after the program ended were unread
                // when the server closed: Linux reports that once, and the
                // status queued before it is still there to read.
                Err(WireError::Io(rustix::io::Errno::CONNRESET)) => {}
                // The server went away without a status: the instance is
                // shutting down, or the server process died and the
                // program with it (`process`).
                Err(_) => die_by(libc::SIGKILL),
            }
        }
    }
}

/// The program stopped: stop alike unless a `Continued` (or its end)
/// already follows in the queue — only the net state counts.
fn on_stop_request(conn: &OwnedFd, p: &Proxy, sig: i32) {
    let mut want = Some(sig);
    loop {
        let mut pfd = [PollFd::new(conn, PollFlags::IN)];
        if !matches!(rustix::event::poll(&mut pfd, Some(&rustix::time::Timespec::default())), Ok(n) if n > 0)
        {
            break;
        }
        match wire::recv::<ToProxy>(conn) {
            Ok((ToProxy::Stopped { sig }, _)) => want = Some(sig),
            Ok((ToProxy::Continued, _)) => want = None,
            Ok((ToProxy::Exited { code }, _)) => {
                p.rejoin();
                raw::exit_group(code)
            }
            Ok((ToProxy::Killed { sig }, _)) => {
                p.rejoin();
                die_by(sig)
            }
            // Errors are the main loop's business; it polls again.
            _ => break,
        }
    }
    if let Some(sig) = want {
        // Acknowledge first: our next stop is the requested one.
        if wire::send(conn, &ToServer::Stopping, &[]).is_ok() {
            p.stop_as(sig);
        }
    }
}

/// Read the signals queued on the signalfd and send them on.
fn relay_pending(sfd: BorrowedFd<'_>, conn: &OwnedFd, p: &Proxy) {
    let mut info = [0u8; 128];
    while let Ok(128) = rustix::io::read(sfd, &mut info) {
        let word = |at: usize| i32::from_ne_bytes(info[at..at + 4].try_into().unwrap_or_default());
        // struct signalfd_siginfo: ssi_signo, ssi_errno, ssi_code, ssi_pid.
        let (signo, code, pid) = (word(0), word(8), word(12));
        if signo == libc::SIGCHLD {
            // Our own children (started before the exec, the group
            // helper) are not the program's concern.
            continue;
        }
        if signo == libc::SIGCONT && p.server != 0 && pid == p.server {
            // The server continued us because the program was continued.
            continue;
        }
        // Still in the program's group: terminal-generated signals (^C,
        // ^Z, hangup, window size) already reached the program directly.
        if p.same_group && !p.left && code == libc::SI_KERNEL {
            continue;
        }
        // A stop signal is relayed only: if the program stops, the server
        // asks us to stop alike (`mirror`).
        let _ = wire::send(conn, &ToServer::Signal(signo), &[]);
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
