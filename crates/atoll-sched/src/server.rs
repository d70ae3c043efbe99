//! Scheduling servers: one per core, pinned there — a process of its own
//! (`Scheds::start_processes`, the default; see `process`) or a thread
//! of the instance (`Scheds::start`) — each serving
//! `<runtime dir>/sched-<core>.sock` and the `Placed` datagrams of
//! `<runtime dir>/sched-<core>.place` (Hare §3.6.1). A server starts the
//! programs proxies send it (`spawn`), waits for them through pidfds,
//! relays the proxies' signals, returns exit statuses, and publishes its
//! load in the [`LoadTable`].
//!
//! One event loop per server (`poll` over the listening socket, a wake
//! pipe, every connection and every running program's pidfd): a core's
//! server never blocks on one program except for the fork+exec itself.
//! A server never panics on what a proxy sends: a malformed request gets
//! `Refused`, a vanished proxy gets its program killed (the process it
//! stood for is gone).
//!
//! Job control: while programs run, the loop also wakes every
//! [`SAMPLE`] to collect the programs' stops and continues (`waitid`) and
//! the proxies' states (`/proc/<pid>/stat`), and [`crate::mirror`] keeps
//! each pair stopped or running together.

use std::os::fd::{AsRawFd, OwnedFd};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use rustix::event::{PollFd, PollFlags};
use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};

use crate::creds;
use crate::load::LoadTable;
use crate::mirror::{Action, Mirror, ProgEvent};
use crate::proxy::{place_path, socket_path};
use crate::spawn;
use crate::wire::{self, ToProxy, ToServer, WireError};

/// Name of the load table in the runtime directory.
pub const LOAD_FILE: &str = "sched.load";

/// The scheduling servers of an instance.
pub struct Scheds {
    cores: Vec<usize>,
    table: Arc<LoadTable>,
    stop: Arc<AtomicBool>,
    wake_w: OwnedFd,
    threads: Vec<JoinHandle<()>>,
    /// Server processes (`start_processes`) and their watchdog.
    watchdog: Option<crate::process::Watchdog>,
    dir: PathBuf,
}

/// How often stops are sampled while programs run.
pub const SAMPLE: std::time::Duration = std::time::Duration::from_millis(25);

/// One running program and the proxy standing for it.
struct Job {
    conn: OwnedFd,
    /// `None` until the program runs.
    prog: Option<(i32, OwnedFd)>,
    /// The proxy, watched for stops; `None` if it could not be opened.
    proxy: Option<Watched>,
    mirror: Mirror,
    /// The program ended and the proxy has its status; the job lasts until
    /// the proxy hangs up, so that a proxy stopped meanwhile is continued
    /// to receive it.
    finished: bool,
}

impl Job {
    fn new(conn: OwnedFd) -> Job {
        Job {
            conn,
            prog: None,
            proxy: None,
            mirror: Mirror::new(),
            finished: false,
        }
    }
}

/// A proxy process: a pidfd (signals never hit a recycled pid) and its
/// `/proc/<pid>/stat`, opened while it waits for our answer (alive).
struct Watched {
    pidfd: OwnedFd,
    stat: OwnedFd,
}

impl Watched {
    /// The peer of `conn` (`SO_PEERCRED`: the process that connected).
    fn open(conn: &OwnedFd) -> Option<Watched> {
        let cred = rustix::net::sockopt::socket_peercred(conn).ok()?;
        let pidfd =
            rustix::process::pidfd_open(cred.pid, rustix::process::PidfdFlags::empty()).ok()?;
        let stat = rustix::fs::open(
            format!("/proc/{}/stat", cred.pid.as_raw_nonzero()),
            rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .ok()?;
        Some(Watched { pidfd, stat })
    }

    /// Is the proxy in a job-control stop (state `T`)?
    fn stopped(&self) -> bool {
        let mut buf = [0u8; 512];
        let Ok(n) = rustix::io::pread(&self.stat, &mut buf, 0) else {
            return false;
        };
        stat_state(&buf[..n]) == Some(b'T')
    }
}

/// The state letter of a `/proc/<pid>/stat` line (after the command name,
/// which may itself contain `)`).
fn stat_state(line: &[u8]) -> Option<u8> {
    let close = line.iter().rposition(|&b| b == b')')?;
    line.get(close + 2).copied()
}

/// The program's stops and continues since the last call (each is
/// reported once by the kernel).
fn prog_events(pidfd: &OwnedFd) -> Vec<ProgEvent> {
    let mut out = Vec::new();
    while out.len() < 16 {
        // SAFETY: siginfo_t is plain data; all-zero is a valid value.
        let mut info: libc::siginfo_t = unsafe { core::mem::zeroed() };
        // SAFETY: waitid writes one siginfo_t into `info`; no WEXITED, so
        // the program is never reaped here (`reap` does that).
        let r = unsafe {
            libc::waitid(
                libc::P_PIDFD,
                pidfd.as_raw_fd() as libc::id_t,
                &mut info,
                libc::WSTOPPED | libc::WCONTINUED | libc::WNOHANG,
            )
        };
        // SAFETY: filled by waitid for a SIGCHLD-style report.
        let (pid, status) = unsafe { (info.si_pid(), info.si_status()) };
        if r != 0 || pid == 0 {
            break;
        }
        match info.si_code {
            libc::CLD_STOPPED => out.push(ProgEvent::Stopped(status)),
            libc::CLD_CONTINUED => out.push(ProgEvent::Continued),
            _ => break,
        }
    }
    out
}

/// Sample one job's stops and keep program and proxy together.
fn mirror(j: &mut Job) {
    let Some((_, pidfd)) = &j.prog else {
        // The program is gone: a stopped proxy could never read how it
        // ended (nor could a continue of the program wake it any more).
        if let Some(w) = j.proxy.as_ref().filter(|w| j.finished && w.stopped()) {
            send_signal(&w.pidfd, libc::SIGCONT);
        }
        return;
    };
    let events = prog_events(pidfd);
    let proxy_stopped = j.proxy.as_ref().is_some_and(Watched::stopped);
    for a in j.mirror.step(&events, proxy_stopped) {
        match a {
            Action::AskProxyStop(sig) => {
                let _ = wire::send(&j.conn, &ToProxy::Stopped { sig }, &[]);
            }
            Action::CancelProxyStop => {
                let _ = wire::send(&j.conn, &ToProxy::Continued, &[]);
            }
            Action::ContinueProxy => {
                if let Some(w) = &j.proxy {
                    send_signal(&w.pidfd, libc::SIGCONT);
                }
            }
            Action::StopProgram => send_signal(pidfd, libc::SIGSTOP),
        }
    }
}

impl Scheds {
    /// Start one server thread per entry of `cores` (server `k` of the
    /// load table runs on `cores[k]`... the table is indexed by core
    /// number, so it spans `0..=max(cores)`).
    pub fn start(runtime_dir: &Path, cores: &[usize]) -> std::io::Result<Scheds> {
        let table = Arc::new(create_table(runtime_dir, cores)?);
        let stop = Arc::new(AtomicBool::new(false));
        let (wake_r, wake_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
        let wake_r = Arc::new(wake_r);
        let mut threads = Vec::new();
        for &core in cores {
            let listener = listen(runtime_dir, core)?;
            let place = bind_place(runtime_dir, core)?;
            table.advance_generation(core);
            let (table, stop, wake) = (table.clone(), stop.clone(), wake_r.clone());
            threads.push(
                std::thread::Builder::new()
                    .name(format!("atoll-sched-{core}"))
                    .spawn(move || {
                        serve(
                            core,
                            listener,
                            Some(place),
                            &table,
                            &|| stop.load(Ordering::SeqCst),
                            &wake,
                        )
                    })?,
            );
        }
        Ok(Scheds {
            cores: cores.to_vec(),
            table,
            stop,
            wake_w,
            threads,
            watchdog: None,
            dir: runtime_dir.to_path_buf(),
        })
    }

    /// Start one server *process* per entry of `cores` (`exe
    /// __sched-server`, fos §3.5: servers as fault domains), each
    /// restarted on its core by a watchdog when it dies (`process`).
    pub fn start_processes(
        runtime_dir: &Path,
        cores: &[usize],
        exe: &Path,
    ) -> std::io::Result<Scheds> {
        let table = Arc::new(create_table(runtime_dir, cores)?);
        let mut listeners = Vec::new();
        for &core in cores {
            listeners.push((core, listen(runtime_dir, core)?));
        }
        let watchdog = crate::process::Watchdog::start(runtime_dir, exe, listeners, table.clone())?;
        let (_, wake_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
        Ok(Scheds {
            cores: cores.to_vec(),
            table,
            stop: Arc::new(AtomicBool::new(false)),
            wake_w,
            threads: Vec::new(),
            watchdog: Some(watchdog),
            dir: runtime_dir.to_path_buf(),
        })
    }

    pub fn cores(&self) -> &[usize] {
        &self.cores
    }

    /// `(core, execs placed there)` for every core with a server.
    pub fn exec_counts(&self) -> Vec<(usize, u64)> {
        self.cores
            .iter()
            .map(|&c| (c, self.table.execs(c)))
            .collect()
    }

    /// Stop the servers; programs still running are killed (their
    /// instance is going away) and reaped.
    pub fn shutdown(mut self) -> Vec<(usize, u64)> {
        self.stop_threads();
        self.exec_counts()
    }

    fn stop_threads(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = rustix::io::write(&self.wake_w, b"x");
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        if let Some(w) = self.watchdog.take() {
            w.stop();
        }
        for &c in &self.cores {
            let _ = std::fs::remove_file(socket_path(&self.dir, c));
            let _ = std::fs::remove_file(place_path(&self.dir, c));
        }
    }
}

impl Drop for Scheds {
    fn drop(&mut self) {
        self.stop_threads();
    }
}

/// The load table for servers on `cores`, each marked as served.
fn create_table(runtime_dir: &Path, cores: &[usize]) -> std::io::Result<LoadTable> {
    let n = cores.iter().copied().max().map_or(1, |m| m + 1);
    let table = LoadTable::create(&runtime_dir.join(LOAD_FILE), n)?;
    for &core in cores {
        table.mark_served(core);
    }
    Ok(table)
}

/// The listening socket of the server of `core`. It belongs to the
/// instance, not to the server: connections waiting in its backlog
/// outlive a server process and are served by its successor.
fn listen(runtime_dir: &Path, core: usize) -> std::io::Result<OwnedFd> {
    let path = socket_path(runtime_dir, core);
    let _ = std::fs::remove_file(&path);
    let listener = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
        None,
    )?;
    // Every packet then carries its sender's pid, stamped by the
    // kernel (accepted connections inherit the option): whose
    // program an `Exec` starts is never taken from the request.
    rustix::net::sockopt::set_socket_passcred(&listener, true)?;
    rustix::net::bind(&listener, &SocketAddrUnix::new(&path)?)?;
    rustix::net::listen(&listener, 128)?;
    Ok(listener)
}

/// The datagram socket of the server of `core` for `Placed` messages
/// (`proxy::place_self`), the sender's pid stamped on each by the kernel.
/// Bound by the server's own process (`process::child_main`) or, for
/// server threads, by the instance: a datagram sent while no server holds
/// it is refused at once, and that exec stays where it is.
pub(crate) fn bind_place(runtime_dir: &Path, core: usize) -> std::io::Result<OwnedFd> {
    let path = place_path(runtime_dir, core);
    let _ = std::fs::remove_file(&path);
    let sock = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::DGRAM,
        SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
        None,
    )?;
    rustix::net::sockopt::set_socket_passcred(&sock, true)?;
    rustix::net::bind(&sock, &SocketAddrUnix::new(&path)?)?;
    Ok(sock)
}

fn pin(core: usize) {
    let mut set = rustix::thread::CpuSet::new();
    if core < rustix::thread::CpuSet::MAX_CPU {
        set.set(core);
        let _ = rustix::thread::sched_setaffinity(None, &set);
    }
}

/// Serve core `core` until `stop()` says so (checked whenever `wake` or
/// anything else wakes the loop).
pub(crate) fn serve(
    core: usize,
    listener: OwnedFd,
    place: Option<OwnedFd>,
    table: &LoadTable,
    stop: &dyn Fn() -> bool,
    wake: &OwnedFd,
) {
    pin(core);
    // Without our own identity no caller can be compared with it: every
    // exec is refused and runs locally.
    let me = creds::Server::current().ok();
    let mut jobs: Vec<Job> = Vec::new();
    // Programs placed here in place (`ToServer::Placed`): counted as
    // running on this core until their pidfd says they ended.
    let mut placed: Vec<OwnedFd> = Vec::new();
    // Out of descriptors: new proxies wait in the backlog until a job ends
    // (polling the listener meanwhile would spin).
    let mut accept_paused = false;
    while !stop() {
        // A loop that dies (a bug, or `atoll chaos --kill sched:N` of a
        // server thread) is restarted on the spot (fos §3.5): its state is
        // its jobs' and placed programs' descriptors, which live outside
        // the loop, so the new loop takes them over and every proxy and
        // program goes on. (A server process killed from outside is
        // restarted by its watchdog instead, `process`.)
        let round = catch_unwind(AssertUnwindSafe(|| {
            if table.take_crash(core) {
                panic!("killed by atoll chaos");
            }
            serve_round(
                core,
                &listener,
                place.as_ref(),
                table,
                wake,
                me.as_ref(),
                &mut jobs,
                &mut placed,
                &mut accept_paused,
            )
        }));
        match round {
            Ok(true) => {}
            Ok(false) => break,
            Err(_) => {
                table.count_restart(core);
                table.advance_generation(core);
                eprintln!("atoll: scheduling server of core {core} died and was restarted");
            }
        }
    }
    // Shutdown: the programs' instance is going away.
    for j in &mut jobs {
        if let Some((pid, pidfd)) = &j.prog {
            send_signal(pidfd, libc::SIGKILL);
            let mut st = 0;
            // SAFETY: reaping our own child.
            unsafe { libc::waitpid(*pid, &mut st, 0) };
            table.add_running(core, -1);
            let _ = wire::send(&j.conn, &status_msg(st), &[]);
        }
        // A stopped proxy must run to read the status and end.
        if let Some(w) = &j.proxy {
            send_signal(&w.pidfd, libc::SIGCONT);
        }
    }
}

/// One round of a scheduling server: wait for a proxy, a program or a
/// stop, and handle what is ready. False when the server cannot go on.
#[allow(clippy::too_many_arguments)]
fn serve_round(
    core: usize,
    listener: &OwnedFd,
    place: Option<&OwnedFd>,
    table: &LoadTable,
    wake: &OwnedFd,
    me: Option<&creds::Server>,
    jobs: &mut Vec<Job>,
    placed: &mut Vec<OwnedFd>,
    accept_paused: &mut bool,
) -> bool {
    let mut pfds = Vec::with_capacity(3 + 2 * jobs.len() + placed.len());
    let listen_flags = if *accept_paused {
        PollFlags::empty()
    } else {
        PollFlags::IN
    };
    pfds.push(PollFd::new(listener, listen_flags));
    pfds.push(PollFd::new(wake, PollFlags::IN));
    // The place socket, or the wake pipe again asking for nothing: the
    // jobs start at the same index either way.
    match place {
        Some(sock) => pfds.push(PollFd::new(sock, PollFlags::IN)),
        None => pfds.push(PollFd::new(wake, PollFlags::empty())),
    }
    for j in jobs.iter() {
        pfds.push(PollFd::new(&j.conn, PollFlags::IN));
        if let Some((_, pidfd)) = &j.prog {
            pfds.push(PollFd::new(pidfd, PollFlags::IN));
        }
    }
    for pidfd in placed.iter() {
        pfds.push(PollFd::new(pidfd, PollFlags::IN));
    }
    let sample = rustix::time::Timespec {
        tv_sec: 0,
        tv_nsec: SAMPLE.as_nanos() as _,
    };
    let running = jobs.iter().any(|j| j.prog.is_some() || j.finished);
    match rustix::event::poll(&mut pfds, running.then_some(&sample)) {
        Ok(_) | Err(rustix::io::Errno::INTR) => {}
        Err(_) => return false,
    }
    let ready: Vec<bool> = pfds.iter().map(|p| !p.revents().is_empty()).collect();
    drop(pfds);
    // Walk the jobs in poll order; collect finished ones. (A job may
    // add a placed program: only those polled are looked at below.)
    let polled_placed = placed.len();
    let mut i = 3;
    let mut done = Vec::new();
    for (idx, j) in jobs.iter_mut().enumerate() {
        let conn_ready = ready[i];
        i += 1;
        let prog_ready = if j.prog.is_some() {
            i += 1;
            ready[i - 1]
        } else {
            false
        };
        if prog_ready {
            reap(core, j, table);
        }
        if conn_ready && !on_message(core, j, table, me, placed) {
            done.push(idx);
        }
    }
    // A placed program's pidfd is readable once it has ended.
    let ended: Vec<usize> = (0..polled_placed).filter(|&k| ready[i + k]).collect();
    for k in ended.into_iter().rev() {
        placed.swap_remove(k);
        table.add_running(core, -1);
    }
    if ready[2] {
        if let Some(sock) = place {
            drain_placements(core, sock, table, placed);
        }
    }
    if !done.is_empty() {
        *accept_paused = false;
    }
    for idx in done.into_iter().rev() {
        jobs.swap_remove(idx);
    }
    for j in jobs.iter_mut() {
        mirror(j);
    }
    if ready[0] && !*accept_paused {
        loop {
            match rustix::net::accept_with(listener, SocketFlags::CLOEXEC) {
                Ok(conn) => jobs.push(Job::new(conn)),
                Err(rustix::io::Errno::MFILE | rustix::io::Errno::NFILE) => {
                    *accept_paused = true;
                    break;
                }
                Err(_) => break,
            }
        }
    }
    true
}

fn send_signal(pidfd: &OwnedFd, sig: i32) {
    // SAFETY: pidfd_send_signal with a null siginfo only reads integers.
    unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            sig,
            core::ptr::null::<libc::siginfo_t>(),
            0u32,
        )
    };
}

fn status_msg(st: i32) -> ToProxy {
    if libc::WIFSIGNALED(st) {
        ToProxy::Killed {
            sig: libc::WTERMSIG(st),
        }
    } else {
        ToProxy::Exited {
            code: libc::WEXITSTATUS(st),
        }
    }
}

/// The program may have ended: reap it and tell the proxy, which hangs
/// up when it has the status (signals it relays meanwhile are read and
/// dropped).
fn reap(core: usize, j: &mut Job, table: &LoadTable) {
    let Some((pid, _)) = &j.prog else {
        return;
    };
    let mut st = 0;
    // SAFETY: non-blocking wait for our own child.
    let r = unsafe { libc::waitpid(*pid, &mut st, libc::WNOHANG) };
    if r != *pid {
        return;
    }
    table.add_running(core, -1);
    let _ = wire::send(&j.conn, &status_msg(st), &[]);
    j.prog = None;
    j.finished = true;
}

/// Most `Placed` datagrams taken in one round, so that a flood of them
/// cannot keep the server from its proxies and programs.
const PLACED_PER_ROUND: usize = 256;

/// Take the `Placed` datagrams queued on `sock`.
fn drain_placements(core: usize, sock: &OwnedFd, table: &LoadTable, placed: &mut Vec<OwnedFd>) {
    for _ in 0..PLACED_PER_ROUND {
        match wire::recv_placed(sock) {
            Ok(Some(sender)) => on_placed(core, table, sender, placed),
            Ok(None) => {}
            Err(_) => return,
        }
    }
}

/// Process `sender` moved itself to this core and execs here in place.
/// Only the process itself can say so (its pid is the kernel's stamp); it
/// needs nothing more from us. Counted whether or not it still runs: a
/// short program may have ended before this message is read (then it runs
/// here no more, and there is nothing to watch).
fn on_placed(core: usize, table: &LoadTable, sender: i32, placed: &mut Vec<OwnedFd>) {
    table.count_exec(core);
    let pidfd = rustix::process::Pid::from_raw(sender).and_then(|pid| {
        rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
    });
    if let Some(pidfd) = pidfd {
        table.add_running(core, 1);
        placed.push(pidfd);
    }
}

/// Handle one message from the proxy. False when the job is over.
fn on_message(
    core: usize,
    j: &mut Job,
    table: &LoadTable,
    me: Option<&creds::Server>,
    placed: &mut Vec<OwnedFd>,
) -> bool {
    match wire::recv_from::<ToServer>(&j.conn) {
        Ok((ToServer::Placed, _, Some(sender))) if j.prog.is_none() && !j.finished => {
            on_placed(core, table, sender, placed);
            false
        }
        Ok((ToServer::Exec(mut spec), fds, sender)) if j.prog.is_none() && !j.finished => {
            // The program starts as the sender would after a local execve,
            // or not here at all (`creds`).
            let target = me
                .ok_or(creds::CredError::Unverified("server identity"))
                .and_then(|me| {
                    let caller = creds::verify_caller(&j.conn, sender, me)?;
                    let target = creds::plan(&caller, me, spec.securebits)?;
                    // What the kernel says, not what the request claims.
                    spec.pgid = caller.pgid;
                    spec.nice = caller.nice;
                    spec.rlimits = caller.rlimits;
                    Ok(target)
                });
            let Ok(target) = target else {
                let _ = wire::send(&j.conn, &ToProxy::Refused, &[]);
                return false;
            };
            // The arguments came as a transfer (`args`).
            let Ok(fds) = crate::args::unpack(&mut spec, fds) else {
                let _ = wire::send(&j.conn, &ToProxy::Refused, &[]);
                return false;
            };
            match spawn::spawn(&spec, &target, fds, core) {
                Ok(s) => {
                    let Some(pid) = rustix::process::Pid::from_raw(s.pid) else {
                        return false;
                    };
                    let pidfd = match rustix::process::pidfd_open(
                        pid,
                        rustix::process::PidfdFlags::empty(),
                    ) {
                        Ok(p) => p,
                        Err(_) => {
                            // Cannot watch it: do not leave it unreaped.
                            let mut st = 0;
                            // SAFETY: our own child.
                            unsafe {
                                libc::kill(s.pid, libc::SIGKILL);
                                libc::waitpid(s.pid, &mut st, 0);
                            }
                            let _ = wire::send(&j.conn, &ToProxy::Refused, &[]);
                            return false;
                        }
                    };
                    table.add_running(core, 1);
                    table.count_exec(core);
                    let _ = wire::send(
                        &j.conn,
                        &ToProxy::Started {
                            pid: s.pid,
                            same_group: s.same_group,
                        },
                        &[],
                    );
                    j.prog = Some((s.pid, pidfd));
                    j.proxy = Watched::open(&j.conn);
                    true
                }
                Err(spawn::SpawnError::Exec(errno)) => {
                    let _ = wire::send(&j.conn, &ToProxy::Failed { errno }, &[]);
                    false
                }
                Err(spawn::SpawnError::Refused) => {
                    let _ = wire::send(&j.conn, &ToProxy::Refused, &[]);
                    false
                }
            }
        }
        Ok((ToServer::Signal(sig), _, _)) => {
            if let Some((_, pidfd)) = &j.prog {
                if (1..=64).contains(&sig) {
                    send_signal(pidfd, sig);
                }
            }
            if sig == libc::SIGCONT {
                j.mirror.on_relayed_continue();
            }
            true
        }
        Ok((ToServer::Stopping, _, _)) => {
            j.mirror.on_stopping();
            true
        }
        Ok((ToServer::Exec(_), _, _)) => true, // one program per connection
        Ok((ToServer::Placed, _, _)) => false,
        Err(WireError::Closed | WireError::Io(_)) => {
            // The proxy is gone (killed): so is the process it stood for.
            if let Some((pid, pidfd)) = &j.prog {
                send_signal(pidfd, libc::SIGKILL);
                let mut st = 0;
                // SAFETY: reaping our own child, just killed.
                unsafe { libc::waitpid(*pid, &mut st, 0) };
                table.add_running(core, -1);
            }
            false
        }
        Err(_) => {
            if j.prog.is_none() && !j.finished {
                let _ = wire::send(&j.conn, &ToProxy::Refused, &[]);
                return false;
            }
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{ExecSpec, FdRole};
    use rustix::fs::{Mode, OFlags};
    use std::os::fd::AsFd;

    struct Fixture {
        dir: PathBuf,
        scheds: Option<Scheds>,
    }

    impl Fixture {
        fn new(tag: &str) -> Fixture {
            let dir =
                std::env::temp_dir().join(format!("atoll-sched-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            let scheds = Scheds::start(&dir, &[0]).unwrap();
            Fixture {
                dir,
                scheds: Some(scheds),
            }
        }

        fn connect(&self) -> OwnedFd {
            let c = rustix::net::socket_with(
                AddressFamily::UNIX,
                SocketType::SEQPACKET,
                SocketFlags::CLOEXEC,
                None,
            )
            .unwrap();
            let addr = SocketAddrUnix::new(socket_path(&self.dir, 0)).unwrap();
            rustix::net::connect(&c, &addr).unwrap();
            c
        }
    }

    impl Drop for Fixture {
        fn drop(&mut self) {
            drop(self.scheds.take());
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    #[test]
    fn claimed_limits_and_priority_are_replaced_by_the_kernels() {
        let f = Fixture::new("claims");
        let c = f.connect();
        let (r, w) = rustix::pipe::pipe().unwrap();
        let mut spec = sh("ulimit -Hn; nice");
        spec.fds = vec![FdRole::Keep(1), FdRole::Cwd];
        // A caller claiming a higher hard limit and a better priority.
        spec.rlimits = vec![(libc::RLIMIT_NOFILE, 4242, 4242)];
        spec.nice = -20;
        assert!(matches!(
            exec(&c, spec, &[w.as_fd()]),
            ToProxy::Started { .. }
        ));
        drop(w);
        assert_eq!(
            wire::recv::<ToProxy>(&c).unwrap().0,
            ToProxy::Exited { code: 0 }
        );
        let mut buf = [0u8; 64];
        let n = rustix::io::read(&r, &mut buf).unwrap();
        let mut lim = libc::rlimit64 {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: writes one rlimit64 into `lim`.
        unsafe { libc::prlimit64(0, libc::RLIMIT_NOFILE, core::ptr::null(), &mut lim) };
        // SAFETY: getpriority only reads our own nice value.
        let nice = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
        assert_eq!(
            String::from_utf8_lossy(&buf[..n]),
            format!("{}\n{nice}\n", lim.rlim_max)
        );
    }

    fn sh(script: &str) -> ExecSpec {
        ExecSpec {
            path: b"/bin/sh".to_vec(),
            argv: vec![b"sh".to_vec(), b"-c".to_vec(), script.as_bytes().to_vec()],
            envp: vec![b"PATH=/usr/bin:/bin".to_vec()],
            fds: vec![FdRole::Cwd],
            pgid: 0,
            ..Default::default()
        }
    }

    fn cwd() -> OwnedFd {
        rustix::fs::open(
            ".",
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .unwrap()
    }

    fn exec(c: &OwnedFd, spec: ExecSpec, extra: &[std::os::fd::BorrowedFd<'_>]) -> ToProxy {
        let cwd = cwd();
        let mut fds = extra.to_vec();
        fds.push(cwd.as_fd());
        wire::send(c, &ToServer::Exec(spec), &fds).unwrap();
        wire::recv::<ToProxy>(c).unwrap().0
    }

    #[test]
    fn exit_status_and_inherited_descriptors() {
        let f = Fixture::new("status");
        let c = f.connect();
        let (r, w) = rustix::pipe::pipe().unwrap();
        let mut spec = sh("echo remote; exit 3");
        spec.fds = vec![FdRole::Keep(1), FdRole::Cwd];
        assert!(matches!(
            exec(&c, spec, &[w.as_fd()]),
            ToProxy::Started { .. }
        ));
        drop(w);
        assert_eq!(
            wire::recv::<ToProxy>(&c).unwrap().0,
            ToProxy::Exited { code: 3 }
        );
        let mut buf = [0u8; 64];
        let n = rustix::io::read(&r, &mut buf).unwrap();
        assert_eq!(&buf[..n], b"remote\n");
        let counts = f.scheds.as_ref().unwrap().exec_counts();
        assert_eq!(counts, vec![(0, 1)]);
    }

    #[test]
    fn signals_are_relayed_and_deaths_reported() {
        let f = Fixture::new("signal");
        let c = f.connect();
        assert!(matches!(
            exec(&c, sh("exec sleep 30"), &[]),
            ToProxy::Started { .. }
        ));
        wire::send(&c, &ToServer::Signal(libc::SIGTERM), &[]).unwrap();
        assert_eq!(
            wire::recv::<ToProxy>(&c).unwrap().0,
            ToProxy::Killed { sig: libc::SIGTERM }
        );
    }

    #[test]
    fn a_program_stop_asks_the_proxy_to_stop_alike() {
        let f = Fixture::new("stop");
        let c = f.connect();
        // SIGSTOP, not SIGTSTP: the kernel discards terminal stop signals
        // in an orphaned process group, which this test's group may be
        // (e.g. under a detached CI job); SIGSTOP stops it regardless.
        assert!(matches!(
            exec(&c, sh("kill -STOP $$; exit 7"), &[]),
            ToProxy::Started { .. }
        ));
        assert_eq!(
            wire::recv::<ToProxy>(&c).unwrap().0,
            ToProxy::Stopped { sig: libc::SIGSTOP }
        );
        // As a proxy would: acknowledge, then (here) continue the program.
        wire::send(&c, &ToServer::Stopping, &[]).unwrap();
        wire::send(&c, &ToServer::Signal(libc::SIGCONT), &[]).unwrap();
        assert_eq!(
            wire::recv::<ToProxy>(&c).unwrap().0,
            ToProxy::Exited { code: 7 }
        );
    }

    #[test]
    fn stat_state_skips_odd_command_names() {
        assert_eq!(stat_state(b"12 (sleep) T 1 12"), Some(b'T'));
        assert_eq!(stat_state(b"12 (a) b) S 1 12"), Some(b'S'));
        assert_eq!(stat_state(b"12 (x"), None);
    }

    #[test]
    fn exec_failure_is_the_callers_errno() {
        let f = Fixture::new("enoent");
        let c = f.connect();
        let mut spec = sh("");
        spec.path = b"/nonexistent/program".to_vec();
        assert_eq!(
            exec(&c, spec, &[]),
            ToProxy::Failed {
                errno: libc::ENOENT
            }
        );
        // Garbage gets an answer, not a crash; the server keeps serving.
        let c2 = f.connect();
        rustix::io::write(&c2, &[0xff; 9]).unwrap();
        assert_eq!(wire::recv::<ToProxy>(&c2).unwrap().0, ToProxy::Refused);
        // Roles without their descriptors: refused, the caller execs locally.
        let c4 = f.connect();
        wire::send(&c4, &ToServer::Exec(sh("exit 0")), &[]).unwrap();
        assert_eq!(wire::recv::<ToProxy>(&c4).unwrap().0, ToProxy::Refused);
        let c3 = f.connect();
        assert!(matches!(
            exec(&c3, sh("exit 0"), &[]),
            ToProxy::Started { .. }
        ));
        assert_eq!(
            wire::recv::<ToProxy>(&c3).unwrap().0,
            ToProxy::Exited { code: 0 }
        );
    }

    #[test]
    fn a_vanished_proxy_takes_its_program_along() {
        let f = Fixture::new("hangup");
        let c = f.connect();
        let ToProxy::Started { pid, .. } = exec(&c, sh("exec sleep 30"), &[]) else {
            panic!("not started");
        };
        let table = f.scheds.as_ref().unwrap().table.clone();
        assert_eq!(table.running(0), 1);
        drop(c);
        // The server kills and reaps it: the pid disappears.
        for _ in 0..2000 {
            // SAFETY: signal 0 only checks existence.
            if unsafe { libc::kill(pid, 0) } != 0 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        // SAFETY: as above.
        assert_ne!(unsafe { libc::kill(pid, 0) }, 0, "program still alive");
        for _ in 0..2000 {
            if table.running(0) == 0 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(table.running(0), 0);
    }
}
