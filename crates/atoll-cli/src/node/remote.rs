//! Remote spawn, the caller's side: `atoll __remote-spawn ADDR PATH ARGV…`
//! (fos §4.2 spawning; Hare §3.6.1's proxy, across hosts).
//!
//! A client whose `execve` is placed on another node execs this in its
//! place (`atoll_client` `nodeplace`), so the proxy *is* the process that
//! called `execve`: same pid, parent, process group and descriptor table
//! (handed over by the client library as for any exec, atoll pipes
//! included). It runs as an ordinary atoll client: it asks the node at
//! ADDR to start the program (`spawn.rs`), then relays until it ends:
//!
//! * stdin, stdout and stderr that are atoll files or pipes are no host
//!   objects: the program inherits them as descriptors (`inherit.rs`), as
//!   it would after a local exec, so it reads only what it needs and its
//!   writes keep their order with every other writer of the file (a relay
//!   would read ahead, and land its writes late, measured 2–4× faster on
//!   21 MB but wrong). The proxy relays host stdio:
//! * a host stdin to the program's, read as soon as it can be read and at
//!   most a window (`window.rs`) ahead of what the program's pipe took (a
//!   program that reads only part of its input leaves less unread than on
//!   Linux: COMPATIBILITY.md, "Across hosts");
//! * the program's stdout and stderr to its own 1 and 2 (a terminal, a
//!   host file or pipe; one pipe for both when they are one description,
//!   as `2>&1` makes them, so their order holds);
//! * the signals sent to it (`sys::RELAYED_SIGNALS`) to the program, and
//!   job control both ways: SIGTSTP, SIGTTIN, SIGTTOU and SIGCONT sent to
//!   it go to the program, and when the program stops (by those or
//!   anything else on its host) the node says so and the proxy stops with
//!   the same signal, so its parent's `waitpid(WUNTRACED)` sees the job
//!   stop and `fg`/`bg` (a SIGCONT to the proxy) go on to the program;
//!   a stop of the proxy itself (a SIGSTOP, which it cannot catch) is
//!   seen by its watcher process (`watch.rs`), and the node stops the
//!   program;
//! * the program's end as its own: exit status, or death by the same
//!   signal.
//!
//! Its other atoll descriptors (not `FD_CLOEXEC`) the program inherits as
//! they are, same descriptions (`inherit.rs`). Once it runs, the proxy
//! closes its own pipe and FIFO ends (the program's close is then the
//! last, as after a local exec) and keeps its files' references until it
//! ends, as the caller's process would hold its record locks across a
//! local exec.
//!
//! The link ending first (the node or its host died) ends the proxy with
//! status 127 and one line on stderr, within the link's silence bound
//! (3 s, `atoll_transport::LinkOptions`).

use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::sync::Arc;

use atoll_transport::{Link, TcpTransport, Transport};

use super::inherit;
use super::window::{Window, WINDOW};
use super::wire::{self, NodeMsg, SpawnRequest};
use crate::sys;

/// Job-control signals the proxy passes on besides `sys::RELAYED_SIGNALS`.
const JOB_SIGNALS: [i32; 4] = [libc::SIGTSTP, libc::SIGTTIN, libc::SIGTTOU, libc::SIGCONT];

/// Every signal the proxy passes on to its program.
fn relayed() -> Vec<i32> {
    let mut v = sys::RELAYED_SIGNALS.to_vec();
    v.extend(JOB_SIGNALS);
    v
}

/// Largest piece of stdin per message.
const CHUNK: usize = 64 * 1024;
/// Status of a proxy whose program could not be run or was lost, as a
/// shell reports a command it cannot run.
const LOST: i32 = 127;

/// Entry point; `args` follow the subcommand: ADDR PATH ARGV….
pub fn main(args: Vec<OsString>) -> i32 {
    let mut it = args.into_iter();
    let (Some(addr), Some(path)) = (it.next(), it.next()) else {
        eprintln!("atoll: usage: atoll __remote-spawn ADDR PATH ARGV...");
        return 2;
    };
    let argv: Vec<Vec<u8>> = it.map(OsStringExt::into_vec).collect();
    let name = String::from_utf8_lossy(argv.first().map_or(path.as_bytes(), |a| a)).into_owned();
    // Blocked before any thread starts, so only the relay thread sees them.
    if let Err(e) = sys::block_signals(&relayed()) {
        eprintln!("atoll: {name}: cannot relay signals: {e}");
        return LOST;
    }
    let addr = addr.to_string_lossy().into_owned();
    match run(&addr, path.into_vec(), argv) {
        Ok(never) => match never {},
        Err(why) => {
            eprintln!("atoll: {name}: {why}");
            LOST
        }
    }
}

/// What the program inherits besides its stdio: environment, cwd,
/// identity, limits, atoll descriptors.
fn request(path: Vec<u8>, argv: Vec<Vec<u8>>) -> SpawnRequest {
    let cwd = std::env::current_dir()
        .map(|d| d.into_os_string().into_vec())
        .unwrap_or_else(|_| b"/".to_vec());
    let envp = std::env::vars_os()
        .map(|(k, v)| {
            let mut e = k.into_vec();
            e.push(b'=');
            e.extend(v.into_vec());
            e
        })
        .collect();
    let umask = rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o022));
    rustix::process::umask(umask);
    let fds: Vec<wire::InheritedFd> = sys::preload_inheritable_fds()
        .map(|t| inherit::from_state_text(&t))
        .unwrap_or_default();
    let stderr_is_stdout = one_description(&fds, 1, 2);
    SpawnRequest {
        stderr_is_stdout,
        path,
        argv,
        envp,
        cwd,
        uid: rustix::process::getuid().as_raw(),
        gid: rustix::process::getgid().as_raw(),
        groups: rustix::process::getgroups()
            .map(|g| g.iter().map(|g| g.as_raw()).collect())
            .unwrap_or_default(),
        umask: umask.bits(),
        rlimits: atoll_sched::nodes::own_rlimits(),
        fds,
    }
}

/// Are host descriptors `a` and `b` of this process, both relayed, one
/// open description (as the kernel says: `kcmp`)? Atoll ones are passed
/// as their descriptions, which keeps that by itself.
fn one_description(atoll: &[wire::InheritedFd], a: i32, b: i32) -> bool {
    let passed = |fd: i32| atoll.iter().any(|f| f.fd == fd);
    match (passed(a), passed(b)) {
        (false, false) => {
            let pid = std::process::id();
            // SAFETY: kcmp only compares two descriptors of our own process.
            let same = unsafe {
                libc::syscall(libc::SYS_kcmp, pid, pid, 0 /* KCMP_FILE */, a, b)
            };
            same == 0
        }
        _ => false,
    }
}

fn run(addr: &str, path: Vec<u8>, argv: Vec<Vec<u8>>) -> Result<std::convert::Infallible, String> {
    let req = request(path, argv);
    let asked: Vec<i32> = req.fds.iter().map(|f| f.fd).collect();
    let pipe_ends: Vec<i32> = req
        .fds
        .iter()
        .filter(|f| atoll_client::remotefds::is_pipe_code(f.ftype))
        .map(|f| f.fd)
        .collect();
    let mut shared = Vec::new();
    let net = TcpTransport::new().map_err(|e| format!("no network: {e}"))?;
    let link: Arc<dyn Link> = Arc::from(
        net.connect(addr)
            .map_err(|e| format!("cannot reach node {addr}: {e}"))?,
    );
    let lost = |e: atoll_transport::TransportError| format!("lost node {addr}: {e}");
    wire::send(&*link, 0, &NodeMsg::Spawn(req)).map_err(lost)?;
    let mut watch_token = None;
    loop {
        let m = link.recv(None).map_err(lost)?;
        match m.map(|m| wire::decode(&m)) {
            // The first node greets every link as a peer first.
            Some(Ok(NodeMsg::Hello { .. })) | None => continue,
            // The program's session is made: it gets our descriptions.
            Some(Ok(NodeMsg::Session { id })) => {
                let fds = sys::preload_share_fds(id, &asked);
                shared.clone_from(&fds);
                wire::send(&*link, 0, &NodeMsg::Shared { fds }).map_err(lost)?;
            }
            Some(Ok(NodeMsg::Watchable { token })) => watch_token = Some(token),
            Some(Ok(NodeMsg::Started { .. })) => break,
            Some(Ok(NodeMsg::SpawnFailed { errno })) => {
                return Err(std::io::Error::from_raw_os_error(errno).to_string())
            }
            other => return Err(format!("node {addr} answered {other:?}")),
        }
    }
    // Something must see this process stop: a SIGSTOP stops every thread
    // here (`watch.rs`).
    if let Some(token) = watch_token {
        if !super::watch::start(addr, token) {
            tracing::warn!("atoll: no watcher: a SIGSTOP of this proxy will not reach the program");
        }
    }
    // The program holds its own reference to each shared description now.
    // Pipe and FIFO ends are let go here, so that the program's close of
    // one is the last, as after a local exec: its reader sees end of file
    // then, not when the program ends. Files stay open here: a close
    // would release the record locks this process holds, which survive
    // an exec on Linux.
    let null = std::fs::File::open("/dev/null").ok();
    for &fd in pipe_ends.iter().filter(|fd| shared.contains(fd)) {
        // SAFETY: a descriptor of ours that nothing here uses again (the
        // client library sends the description's release); stdio numbers
        // get /dev/null instead of a hole later opens would fill.
        unsafe {
            match &null {
                Some(n) if fd < 3 => libc::dup2(n.as_raw_fd(), fd),
                _ => libc::close(fd),
            };
        }
    }
    drop(null);
    let stdin_window = Arc::new(Window::new(WINDOW));
    if shared.contains(&0) {
        // The program reads the caller's atoll stdin itself.
        let _ = wire::send(&*link, 0, &NodeMsg::Stdin { bytes: Vec::new() });
    } else {
        let (l, w) = (link.clone(), stdin_window.clone());
        std::thread::spawn(move || relay_stdin(&*l, &w));
    }
    let l = link.clone();
    std::thread::spawn(move || relay_signals(&*l));
    let mut stdout = std::io::stdout().lock();
    let mut stderr = std::io::stderr().lock();
    // Messages read ahead while deciding whether to stop.
    let mut ahead = std::collections::VecDeque::new();
    loop {
        let m = match ahead.pop_front() {
            Some(m) => m,
            None => match link.recv(None) {
                Ok(Some(m)) => m,
                Ok(None) => continue,
                Err(e) => {
                    stdin_window.close();
                    return Err(lost(e));
                }
            },
        };
        match wire::decode(&m) {
            Ok(NodeMsg::Stopped { sig }) => {
                // Only the net state counts: a `Continued` already behind
                // it (a stop and a continue in quick succession) cancels it.
                while let Ok(Some(next)) = link.recv(Some(std::time::Duration::ZERO)) {
                    ahead.push_back(next);
                }
                let continued = ahead
                    .iter()
                    .any(|m| matches!(wire::decode(m), Ok(NodeMsg::Continued)));
                if !continued {
                    stop_as(sig);
                }
            }
            Ok(NodeMsg::StdinTaken { bytes }) => stdin_window.release(bytes),
            Ok(NodeMsg::Output { fd, bytes }) => {
                let wrote = if fd == 2 {
                    stderr.write_all(&bytes)
                } else {
                    stdout.write_all(&bytes).and_then(|()| stdout.flush())
                };
                if let Err(e) = wrote {
                    if e.raw_os_error() == Some(libc::EPIPE) {
                        // No reader: the program would have died of it.
                        link.close();
                        sys::die_by(libc::SIGPIPE);
                    }
                }
                // Written out (or lost to an error the program would
                // not see either): the node may send that much more.
                let taken = NodeMsg::OutputTaken {
                    bytes: bytes.len() as u64,
                };
                wire::send(&*link, 0, &taken).map_err(lost)?;
            }
            Ok(NodeMsg::Exited { code }) => {
                link.close();
                std::process::exit(code)
            }
            Ok(NodeMsg::Killed { sig }) => {
                link.close();
                sys::die_by(sig)
            }
            Ok(_) => {}
            Err(e) => return Err(lost(e)),
        }
    }
}

/// Our stdin to the program's, until end of input (then an empty
/// `Stdin`), at most a window ahead of what the node wrote to the
/// program. A closed or unreadable stdin is an empty one.
fn relay_stdin(link: &dyn Link, window: &Window) {
    let mut buf = vec![0u8; CHUNK];
    let mut stdin = std::io::stdin();
    loop {
        // Room first: what is read is gone from our stdin.
        if !window.acquire(CHUNK as u64) {
            return;
        }
        let bytes = match stdin.read(&mut buf) {
            Ok(n) => buf[..n].to_vec(),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {
                window.release(CHUNK as u64);
                continue;
            }
            Err(_) => Vec::new(),
        };
        // Count what was read, not what room was asked for.
        window.release(CHUNK as u64 - bytes.len() as u64);
        let end = bytes.is_empty();
        if wire::send(link, 0, &NodeMsg::Stdin { bytes }).is_err() || end {
            return;
        }
    }
}

/// Stop the way the program stopped, so our parent's `waitpid` reports
/// the same `WSTOPSIG` (bash prints "Stopped" for SIGTSTP, "Stopped
/// (signal)" for SIGSTOP). Linux discards SIGTSTP, SIGTTIN and SIGTTOU in
/// an orphaned process group, but the program did stop: then SIGSTOP.
fn stop_as(sig: i32) {
    let tty_stop = matches!(sig, libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU);
    if !tty_stop || orphaned_group() {
        let _ = sys::kill(std::process::id() as i32, libc::SIGSTOP);
        return;
    }
    // Raised at this thread while blocked (so the relay thread, which
    // waits for process-wide ones, does not take it), with its default
    // action, and delivered by the unblock: the whole process stops here
    // until a SIGCONT, which the relay thread then passes on.
    let one = sys::signal_set(&[sig]);
    // SAFETY: plain system calls on an initialised signal set.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        libc::syscall(
            libc::SYS_tgkill,
            libc::getpid(),
            libc::syscall(libc::SYS_gettid),
            sig,
        );
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &one, std::ptr::null_mut());
        libc::pthread_sigmask(libc::SIG_BLOCK, &one, std::ptr::null_mut());
    }
}

/// Is our process group orphaned (POSIX: no member has a parent in
/// another group of the same session)? Only our parent is looked at: a
/// remote program's proxy is a job's process, as the caller was.
fn orphaned_group() -> bool {
    // SAFETY: plain system calls on integers.
    unsafe {
        let ppid = libc::getppid();
        !(libc::getsid(ppid) == libc::getsid(0) && libc::getpgid(ppid) != libc::getpgrp())
    }
}

/// Every relayed signal sent to us, to the program.
fn relay_signals(link: &dyn Link) {
    let relayed = relayed();
    while let Ok(sig) = sys::wait_signal(&relayed) {
        if wire::send(link, 0, &NodeMsg::Signal { sig }).is_err() {
            return;
        }
    }
}
