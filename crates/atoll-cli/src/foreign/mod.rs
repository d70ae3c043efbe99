//! Programs that cannot load the client library: `atoll __foreign FDS
//! MOUNT PATH ARGV…`.
//!
//! atoll enters a program through `LD_PRELOAD`; a statically linked image
//! has no dynamic loader, so it never runs the client and sees atoll
//! descriptors as what the kernel holds for them: placeholders. Its
//! output into an atoll pipe or file would vanish and its input would be
//! empty, and it could not name paths in the mount. So a client whose
//! `execve` names a static image, or a secure-execution one while it
//! holds atoll descriptors the image would inherit (client
//! `exec/foreign.rs`), execs this in its place instead. Like a remote spawn's proxy
//! (`node/remote.rs`), the relay *is* the process that called `execve`:
//! same pid, parent, process group and descriptor table (handed over as
//! for any exec). It runs as an ordinary atoll client and:
//!
//! * gives the program a host pipe (a socket pair for a descriptor open
//!   for reading and writing) at each number in FDS, and copies between
//!   it and its own atoll descriptor: what the program writes goes to the
//!   atoll pipe or file (at its shared offset), what the atoll side holds
//!   is the program's to read; a descriptor that is neither (a directory)
//!   is closed in the program;
//! * passes the signals sent to it (`sys::RELAYED_SIGNALS`) to the program,
//!   and takes it along when killed by one it cannot pass on (SIGKILL:
//!   the program's parent-death signal);
//! * ends as the program ended, once everything the program wrote has
//!   reached its atoll descriptor (so a parent that `wait`s and then reads
//!   the file or pipe finds all of it, as on Linux); what a process the
//!   program left running still writes there, a child of the relay copies
//!   on.
//!
//! With MOUNT (a static image; `-` for a secure-execution one, which a
//! filter would strip of its privileges) the program also runs under a
//! seccomp user-notification filter, and a supervisor thread serves the
//! paths it and its descendants name in the mount:
//!
//! * `seccomp.rs`: the raw calls (filter, notifications, memory);
//! * `paths.rs`: where a path leads, and the tracked cwds;
//! * `files.rs`: the memfds given out for files and directories;
//! * `fifo.rs`: FIFOs, opened from a thread of their own;
//! * `exec.rs`, `redirect.rs`: programs stored in the mount, run from a
//!   copy;
//! * `serve.rs`: the handler of each filtered call (file times and
//!   extended attributes in `serve/times.rs`, `serve/xattr.rs`).

mod exec;
mod fifo;
mod files;
mod paths;
mod redirect;
mod seccomp;
mod serve;

use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::sync::Arc;

use crate::sys;

/// Status when the program cannot be started, as a shell reports a
/// command it cannot run.
const CANNOT_RUN: i32 = 127;
/// Largest piece copied at once.
const CHUNK: usize = 64 * 1024;

/// How one inherited descriptor reaches the program.
enum Relay {
    /// The program reads: atoll descriptor → host pipe.
    In { atoll: i32, host: OwnedFd },
    /// The program writes: host pipe → atoll descriptor.
    Out { atoll: i32, host: OwnedFd },
    /// Both (a socket pair): two copies, one each way.
    Both { atoll: i32, host: OwnedFd },
}

/// Entry point; `args` follow the subcommand: FDS MOUNT PATH ARGV….
pub fn main(args: Vec<OsString>) -> i32 {
    let mut args = args.into_iter();
    let (Some(fds), Some(mount), Some(path)) = (args.next(), args.next(), args.next()) else {
        eprintln!("atoll: usage: atoll __foreign FDS MOUNT PATH ARGV…");
        return 2;
    };
    let mount = (mount != "-").then(|| mount.into_encoded_bytes());
    let argv: Vec<OsString> = args.collect();
    let Some(fds) = parse_fds(&fds.to_string_lossy()) else {
        eprintln!("atoll: __foreign: bad descriptor list {fds:?}");
        return 2;
    };
    match run(&fds, mount, path, argv) {
        Ok(never) => match never {},
        Err(e) => {
            eprintln!("atoll: {e}");
            CANNOT_RUN
        }
    }
}

/// `"0,1,5"` → `[0, 1, 5]`; `"-"` → none.
fn parse_fds(s: &str) -> Option<Vec<i32>> {
    if s == "-" {
        return Some(Vec::new());
    }
    s.split(',')
        .map(|f| f.parse::<i32>().ok().filter(|&n| n >= 0))
        .collect()
}

fn run(
    fds: &[i32],
    mount: Option<Vec<u8>>,
    path: OsString,
    argv: Vec<OsString>,
) -> Result<std::convert::Infallible, String> {
    // A write into a pipe whose reader left must come back as EPIPE here,
    // to be passed on by closing the program's end.
    // SAFETY: setting a disposition to SIG_IGN.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
    let mut relays = Vec::new();
    let mut program_ends: Vec<(i32, Option<OwnedFd>)> = Vec::new();
    for &fd in fds {
        // SAFETY: F_GETFL takes no argument; an atoll descriptor answers
        // with its description's flags (the client library).
        let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        let dir = is_directory(fd);
        if fl < 0 || dir {
            program_ends.push((fd, None));
            continue;
        }
        match fl & libc::O_ACCMODE {
            libc::O_RDONLY => {
                let (r, w) = host_pipe()?;
                relays.push(Relay::In { atoll: fd, host: w });
                program_ends.push((fd, Some(r)));
            }
            libc::O_WRONLY => {
                let (r, w) = host_pipe()?;
                relays.push(Relay::Out { atoll: fd, host: r });
                program_ends.push((fd, Some(w)));
            }
            _ => {
                let (mine, theirs) = std::os::unix::net::UnixStream::pair()
                    .map_err(|e| format!("cannot relay descriptor {fd}: {e}"))?;
                relays.push(Relay::Both {
                    atoll: fd,
                    host: mine.into(),
                });
                program_ends.push((fd, Some(theirs.into())));
            }
        }
    }
    // Blocked before the program exists, so none is lost or kills the
    // relay in between; the program starts with none blocked.
    sys::block_signals(&sys::RELAYED_SIGNALS).map_err(|e| e.to_string())?;
    // Closed when the program has ended: every copy out sees it at once.
    let (ended, program_ended) = host_pipe()?;
    let ended = Arc::new(ended);
    fifo::set_ended(ended.clone());
    let (mut child, supervisor) = spawn(&path, argv, program_ends, mount)?;
    let pid = child.id() as i32;
    std::thread::spawn(move || {
        while let Ok(sig) = sys::wait_signal(&sys::RELAYED_SIGNALS) {
            // SAFETY: a signal to our own child, which we have not reaped
            // while this thread runs (the process ends at its reaping).
            unsafe { libc::kill(pid, sig) };
        }
    });
    let mut outputs = Vec::new();
    for r in relays {
        let out = |host: OwnedFd, atoll: i32| {
            let ended = ended.clone();
            std::thread::spawn(move || (copy_out(host, atoll, Some(&ended)), atoll))
        };
        match r {
            Relay::In { atoll, host } => {
                std::thread::spawn(move || copy_in(atoll, host));
            }
            Relay::Out { atoll, host } => outputs.push(out(host, atoll)),
            Relay::Both { atoll, host } => {
                let reader = host.try_clone().map_err(|e| e.to_string())?;
                std::thread::spawn(move || copy_in(atoll, host));
                outputs.push(out(reader, atoll));
            }
        }
    }
    // The supervisor may trace a thread of the program for a moment
    // (`redirect.rs`): a `waitpid` here would take that stop for the
    // program's end, so the end is awaited through a pidfd first.
    wait_end(pid);
    let status = child.wait().map_err(|e| e.to_string())?;
    // Copies of libraries named for the program's loader are gone with it.
    let libs = format!(
        "{}{}",
        atoll_client::LOADER_ENV_PREFIX,
        atoll_client::ENV_LIBS
    );
    if let Some(v) = std::env::var_os(libs) {
        atoll_client::exec_libs_remove(v.as_encoded_bytes());
    }
    // Everything the program wrote reaches the atoll side before its
    // parent learns of the end.
    drop(program_ended);
    let rest: Vec<(OwnedFd, i32)> = outputs
        .into_iter()
        .chain(fifo::take_writers())
        .filter_map(|t| t.join().ok())
        .filter_map(|(host, atoll)| host.map(|h| (h, atoll)))
        .collect();
    // The files it wrote reach the mount too; what it left running still
    // needs a supervisor.
    let supervisor = supervisor.and_then(Running::stop);
    if !rest.is_empty() || supervisor.is_some() {
        hand_off(rest, supervisor);
    }
    match (status.code(), status.signal()) {
        (Some(code), _) => std::process::exit(code),
        (None, Some(sig)) => sys::die_by(sig),
        _ => std::process::exit(CANNOT_RUN),
    }
}

/// Until process `pid` (the relay's child) has ended, without reaping it.
fn wait_end(pid: i32) {
    // SAFETY: pidfd_open of our own unreaped child, no pointers.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return;
    }
    // SAFETY: a new descriptor this function owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one local pollfd; a pidfd is readable once the process ended.
    while unsafe { libc::poll(&mut p, 1, -1) } < 0
        && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
    {}
}

/// Is `fd` a directory (nothing to copy: the program gets it closed)?
fn is_directory(fd: i32) -> bool {
    // SAFETY: fstat fills a local struct; an atoll descriptor answers
    // through the client library.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    (unsafe { libc::fstat(fd, &mut st) }) == 0 && st.st_mode & libc::S_IFMT == libc::S_IFDIR
}

/// A host pipe `(read end, write end)`, both close-on-exec (the program's
/// end is moved to its number in the child). The relay runs with
/// `ATOLL_PIPES=host`, so `pipe2` makes a kernel pipe, as the program
/// needs.
fn host_pipe() -> Result<(OwnedFd, OwnedFd), String> {
    let mut p = [0i32; 2];
    // SAFETY: pipe2 fills the two-element array.
    if unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(format!(
            "cannot make a pipe: {}",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: two new descriptors this process owns alone.
    Ok(unsafe { (OwnedFd::from_raw_fd(p[0]), OwnedFd::from_raw_fd(p[1])) })
}

/// The supervisor thread, and how to stop it.
struct Running {
    thread: std::thread::JoinHandle<Option<serve::Supervisor>>,
    stop: OwnedFd,
}

impl Running {
    /// Stop serving (between two notifications) and write back what the
    /// program wrote; the supervisor comes back if processes still run
    /// under the filter.
    fn stop(self) -> Option<serve::Supervisor> {
        drop(self.stop);
        let s = self.thread.join().ok()??;
        s.files.write_back_all();
        if s.in_use() {
            return Some(s);
        }
        s.finish();
        None
    }
}

/// Start the program with its ends at their numbers (and the directories
/// among the inherited descriptors closed); with `mount`, under the
/// filter, with a supervisor thread serving it.
fn spawn(
    path: &OsString,
    argv: Vec<OsString>,
    ends: Vec<(i32, Option<OwnedFd>)>,
    mount: Option<Vec<u8>>,
) -> Result<(std::process::Child, Option<Running>), String> {
    let mut cmd = std::process::Command::new(path);
    // Where the program starts, as the relay's client knows it: a cwd in
    // the mount is the supervisor's to track, and a dynamic program it
    // starts attaches anew there (`ATOLL_STATE`).
    let start = std::env::current_dir()
        .map(|d| d.into_os_string().into_encoded_bytes())
        .unwrap_or_default();
    // Where the supervisor leaves the cwd it tracks for a process that
    // execs a host program (a dynamic one starts there: `ENV_FOREIGN_CWD`).
    let cwd_handoff = mount.as_ref().and_then(|_| {
        let sock = std::env::var_os(atoll_proto::boot::ENV_SOCKET)?;
        let dir = std::path::Path::new(&sock)
            .parent()?
            .join(format!("foreign-{}", std::process::id()));
        std::fs::create_dir(&dir).ok()?;
        Some(dir)
    });
    if let Some(dir) = &cwd_handoff {
        cmd.env(atoll_proto::boot::ENV_FOREIGN_CWD, dir);
    }
    let filter = match &mount {
        Some(m) => {
            if paths::under(m, &start) {
                let (k, v) = atoll_client::initial_state_env(&String::from_utf8_lossy(&start));
                cmd.env(k, v);
            }
            let (mine, theirs) = std::os::unix::net::UnixStream::pair()
                .map_err(|e| format!("cannot pass the filter: {e}"))?;
            Some((seccomp::program(serve::FILTERED), mine, theirs))
        }
        None => None,
    };
    // The loader's variables the exec hid from the relay's own loader
    // (`ldd`'s `LD_TRACE_LOADED_OBJECTS`) are the program's again.
    for (k, v) in std::env::vars_os() {
        let k = k.into_vec();
        if let Some(name) = k.strip_prefix(atoll_client::LOADER_ENV_PREFIX.as_bytes()) {
            cmd.env(OsString::from_vec(name.to_vec()), v);
            cmd.env_remove(OsString::from_vec(k));
        }
    }
    let mut args = argv.into_iter();
    if let Some(arg0) = args.next() {
        cmd.arg0(arg0);
    }
    cmd.args(args);
    let moves: Vec<(i32, i32)> = ends
        .iter()
        .map(|(fd, end)| (*fd, end.as_ref().map_or(-1, AsRawFd::as_raw_fd)))
        .collect();
    let prog = filter
        .as_ref()
        .map(|(p, _, theirs)| (p.clone(), theirs.as_raw_fd()));
    // The supervisor starts before the child: its exec is the first call
    // the filter holds, and `spawn` returns only once that is done.
    let running = match (&filter, mount) {
        (Some((_, mine, _)), Some(mount)) => {
            let mine = mine.try_clone().map_err(|e| e.to_string())?;
            let (stop_r, stop_w) = host_pipe()?;
            let start = start.clone();
            let thread = std::thread::spawn(move || {
                let listener = seccomp::receive_listener(mine.as_raw_fd()).ok()?;
                let mut sup = serve::Supervisor {
                    listener,
                    paths: paths::Paths::new(mount, &start),
                    files: files::Files::default(),
                    cwd_handoff,
                    exec_pending: Default::default(),
                };
                sup.serve(&stop_r);
                Some(sup)
            });
            Some(Running {
                thread,
                stop: stop_w,
            })
        }
        _ => None,
    };
    let relay = std::process::id() as libc::pid_t;
    // SAFETY: only dup2/close/signal/sigmask/prctl/seccomp/sendmsg calls
    // between fork and exec, on memory prepared before the fork.
    unsafe {
        cmd.pre_exec(move || {
            // The relay stands for the program: a SIGKILL meant for the
            // program reaches the relay (the caller's pid), which cannot
            // pass it on, so the program dies with it.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
            if libc::getppid() != relay {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            for &(fd, from) in &moves {
                if from < 0 {
                    libc::close(fd);
                } else if libc::dup2(from, fd) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
            let mut none: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut none);
            libc::pthread_sigmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
            // Last: from here on the program's path calls wait for the
            // supervisor (exec itself is not filtered).
            if let Some((p, to)) = &prog {
                seccomp::install_and_send(p, *to)?;
            }
            Ok(())
        });
    }
    let child = cmd
        .spawn()
        .map_err(|e| format!("{}: {e}", path.to_string_lossy()))?;
    // Our copies of the program's ends go, so its end of file is its own.
    drop(ends);
    drop(filter);
    Ok((child, running))
}

/// Atoll descriptor `atoll` → the program's end, until end of file there
/// or the program's end is closed.
fn copy_in(atoll: i32, host: OwnedFd) {
    // SAFETY: the descriptor is the relay's for its whole life; the File
    // is forgotten, never closed here.
    let mut src = std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(atoll) });
    let mut dst = std::fs::File::from(host);
    let mut buf = vec![0u8; CHUNK];
    loop {
        match src.read(&mut buf) {
            Ok(n) if n > 0 && dst.write_all(&buf[..n]).is_ok() => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            _ => break,
        }
    }
    // A socket pair's end stays open for the other direction: the program
    // sees end of file only once this direction is shut down. (A pipe
    // answers ENOTSOCK and closes as `dst` drops.)
    // SAFETY: shutdown of a descriptor this function owns.
    unsafe { libc::shutdown(dst.as_raw_fd(), libc::SHUT_WR) };
}

/// The program's end → atoll descriptor `atoll`, until every writer of
/// the host end is gone. A failed write (the atoll pipe's reader left)
/// closes the host end, so the program's next write fails as it would.
///
/// Once the program has ended (`ended`, the read end of a pipe whose
/// writer the relay closes then, or `None` for no such end), everything it
/// wrote is in the pipe: that is copied, and if another process still
/// holds the program's end (something it started in the background) the
/// end comes back, for [`hand_off`], instead of keeping the parent
/// waiting.
fn copy_out(host: OwnedFd, atoll: i32, ended: Option<&OwnedFd>) -> Option<OwnedFd> {
    // SAFETY: as in `copy_in`.
    let mut dst = std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(atoll) });
    let mut buf = vec![0u8; CHUNK];
    let mut draining = false;
    loop {
        if !draining && !wait_readable(&host, ended) {
            draining = true;
            set_nonblocking(&host, true);
            continue;
        }
        // SAFETY: reading into a local buffer of its length.
        let n = unsafe { libc::read(host.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        match n {
            0 => return None,
            n if n > 0 => {
                if dst.write_all(&buf[..n as usize]).is_err() {
                    return None;
                }
            }
            _ => match std::io::Error::last_os_error().raw_os_error() {
                Some(libc::EINTR) => {}
                Some(libc::EAGAIN) if draining => {
                    set_nonblocking(&host, false);
                    return Some(host);
                }
                _ => return None,
            },
        }
    }
}

/// Sleep until `fd` can be read (true) or `ended` says the program ended
/// (false).
fn wait_readable(fd: &OwnedFd, ended: Option<&OwnedFd>) -> bool {
    let mut p = [fd, ended.unwrap_or(fd)].map(|f| libc::pollfd {
        fd: f.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    });
    loop {
        // SAFETY: two local pollfds.
        if unsafe { libc::poll(p.as_mut_ptr(), 2, -1) } > 0 {
            return p[0].revents != 0 || ended.is_none();
        }
    }
}

fn set_nonblocking(fd: &OwnedFd, on: bool) {
    // SAFETY: flag changes of a host pipe this relay owns.
    unsafe {
        let fl = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
        let fl = if on {
            fl | libc::O_NONBLOCK
        } else {
            fl & !libc::O_NONBLOCK
        };
        libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, fl);
    }
}

/// The program ended, but something it started still holds its ends or
/// runs under its filter: a child of the relay copies the rest (as Linux
/// would deliver it) and serves the filter until no process is left under
/// it, while the relay ends now, as the program did.
fn hand_off(rest: Vec<(OwnedFd, i32)>, supervisor: Option<serve::Supervisor>) {
    // SAFETY: fork of this process (the client library gives the child a
    // session of its own); the child only copies, serves and exits. The
    // supervisor thread was joined first, so only the child serves.
    match unsafe { libc::fork() } {
        0 => {
            std::thread::scope(|s| {
                for (host, atoll) in rest {
                    s.spawn(move || copy_out(host, atoll, None));
                }
                if let Some(mut sup) = supervisor {
                    s.spawn(move || {
                        // Never readable: served until the listener hangs up.
                        let Ok((stop, _keep)) = host_pipe() else {
                            return;
                        };
                        sup.serve(&stop);
                        sup.files.write_back_all();
                        sup.finish();
                    });
                }
            });
            std::process::exit(0);
        }
        _ => drop((rest, supervisor)),
    }
}

#[cfg(test)]
mod tests {
    use super::parse_fds;

    #[test]
    fn descriptor_lists_parse_or_are_refused() {
        assert_eq!(parse_fds("0,1,2"), Some(vec![0, 1, 2]));
        assert_eq!(parse_fds("7"), Some(vec![7]));
        assert_eq!(parse_fds("-"), Some(vec![]));
        assert_eq!(parse_fds("1,x"), None);
        assert_eq!(parse_fds("-3"), None);
        assert_eq!(parse_fds(""), None);
    }
}
