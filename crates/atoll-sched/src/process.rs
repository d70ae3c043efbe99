//! Scheduling servers as processes of their own (fos §3.5, "servers as
//! fault domains"): each core's server runs in `atoll __sched-server`,
//! pinned to its core, so a crash of one (a wild write, an abort, a
//! `SIGKILL` from `atoll chaos --kill sched:N`) takes no other server and
//! not the instance with it.
//!
//! What lives where. The instance owns each core's listening socket and
//! hands the server process a copy as its stdin: a proxy's connection
//! still waiting in the backlog when the server dies is accepted and
//! served by the successor. What the server process holds dies with it:
//! accepted connections (their proxies see the connection close: one
//! still waiting for `Started` fails its `execve` with `EIO`, one whose
//! program ran ends as killed by `SIGKILL`), and the programs it started,
//! which are its children and get `SIGKILL` when it dies
//! (`PR_SET_PDEATHSIG`, `spawn`), so none runs on unwatched. Its count of
//! running programs in the load table is reset; the successor counts
//! afresh (programs placed in place before the death are no longer
//! counted).
//!
//! The [`Watchdog`] thread starts the processes (from a thread that lives
//! as long as the servers: `PR_SET_PDEATHSIG` of a server follows the
//! thread that forked it), waits on their pidfds, reaps one that exits and
//! starts a successor on the same core, publishing pid, start time and
//! restarts in the load table (`atoll status`). A server that dies again
//! and again right after starting is given up after [`QUICK_DEATHS`]: its
//! socket is closed and removed, so waiting proxies get an error and new
//! execs stay local — nothing waits for a server that will not come.

use std::cell::Cell;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rustix::event::{PollFd, PollFlags};

use crate::load::LoadTable;
use crate::proxy::socket_path;

/// The hidden subcommand that runs one scheduling server process.
pub const SUBCOMMAND: &str = "__sched-server";

/// Deaths in a row, each within [`QUICK`] of its start, after which a
/// server is not started again.
pub const QUICK_DEATHS: u32 = 5;
const QUICK: Duration = Duration::from_secs(1);
/// How long a stopping server may take to kill and reap its programs.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// One core's server process.
struct Member {
    core: usize,
    /// `None` once the server was given up.
    listener: Option<OwnedFd>,
    running: Option<Running>,
    quick_deaths: u32,
}

struct Running {
    child: Child,
    pidfd: OwnedFd,
    started: Instant,
}

/// The thread that starts, watches and restarts the server processes.
pub struct Watchdog {
    stop_w: OwnedFd,
    thread: Option<JoinHandle<()>>,
}

impl Watchdog {
    /// Start a server process for each `(core, listener)` and the thread
    /// that keeps them running.
    pub fn start(
        runtime_dir: &Path,
        exe: &Path,
        listeners: Vec<(usize, OwnedFd)>,
        table: Arc<LoadTable>,
    ) -> std::io::Result<Watchdog> {
        let (stop_r, stop_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
        let ctx = Ctx {
            dir: runtime_dir.to_path_buf(),
            exe: exe.to_path_buf(),
            table,
        };
        let members: Vec<Member> = listeners
            .into_iter()
            .map(|(core, l)| Member {
                core,
                listener: Some(l),
                running: None,
                quick_deaths: 0,
            })
            .collect();
        // The first start happens in the thread too: a server's parent-death
        // signal follows the thread that forked it.
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("atoll-sched-watchdog".into())
            .spawn(move || watch(ctx, members, stop_r, ready_tx))?;
        let watchdog = Watchdog {
            stop_w,
            thread: Some(thread),
        };
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(watchdog),
            Ok(Err(e)) => {
                watchdog.stop();
                Err(e)
            }
            Err(_) => Err(std::io::Error::other("scheduling watchdog ended")),
        }
    }

    /// Stop every server (each kills and reaps its programs) and the
    /// watchdog.
    pub fn stop(mut self) {
        let _ = rustix::io::write(&self.stop_w, b"x");
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

struct Ctx {
    dir: PathBuf,
    exe: PathBuf,
    table: Arc<LoadTable>,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Ctx {
    /// Start the server process of `m` on its core.
    fn launch(&self, m: &mut Member) -> std::io::Result<()> {
        let Some(listener) = &m.listener else {
            return Ok(());
        };
        let child = Command::new(&self.exe)
            .arg(SUBCOMMAND)
            .arg(m.core.to_string())
            .arg(&self.dir)
            .arg(std::process::id().to_string())
            .stdin(Stdio::from(listener.try_clone()?))
            // Holding the instance's stdout (a pipe a reader waits on to
            // end) is not a server's business; stderr carries its reports.
            .stdout(Stdio::null())
            // A group of its own: `kill -TERM -PGID`, GNU `timeout` or a
            // terminal's ^C aimed at the job must not stop the servers
            // under it (the instance stops them, and they die with it).
            .process_group(0)
            .spawn()?;
        let pid = rustix::process::Pid::from_raw(child.id() as i32)
            .ok_or_else(|| std::io::Error::other("no pid"))?;
        let pidfd = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty())?;
        self.table.set_process(m.core, child.id(), now_ms());
        self.table.advance_generation(m.core);
        m.running = Some(Running {
            child,
            pidfd,
            started: Instant::now(),
        });
        Ok(())
    }

    /// The server of `m` ended: reap it, then start a successor or give
    /// the core up.
    fn on_death(&self, m: &mut Member) {
        let Some(mut r) = m.running.take() else {
            return;
        };
        let why = match r.child.wait() {
            Ok(st) => describe(st),
            Err(e) => format!("could not be reaped: {e}"),
        };
        self.table.set_process(m.core, 0, 0);
        self.table.reset_running(m.core);
        m.quick_deaths = if r.started.elapsed() < QUICK {
            m.quick_deaths + 1
        } else {
            1
        };
        if m.quick_deaths >= QUICK_DEATHS {
            self.give_up(m, &format!("{why}, {QUICK_DEATHS} times in a row"));
            return;
        }
        self.table.count_restart(m.core);
        match self.launch(m) {
            Ok(()) => eprintln!(
                "atoll: scheduling server of core {} {why}; restarted",
                m.core
            ),
            Err(e) => self.give_up(m, &format!("{why}; cannot restart it: {e}")),
        }
    }

    /// No more server on `m`'s core: close its socket (proxies waiting in
    /// the backlog get an error, new connections are refused and execs
    /// stay local) and take the core out of placement.
    fn give_up(&self, m: &mut Member, why: &str) {
        self.table.unserve(m.core);
        let _ = std::fs::remove_file(socket_path(&self.dir, m.core));
        let _ = std::fs::remove_file(crate::proxy::place_path(&self.dir, m.core));
        m.listener = None;
        eprintln!(
            "atoll: scheduling server of core {} {why}; given up",
            m.core
        );
    }
}

/// How a server process ended, for humans.
fn describe(st: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (st.signal(), st.code()) {
        (Some(libc::SIGKILL), _) => "was killed (SIGKILL)".into(),
        (Some(sig), _) => format!("died of signal {sig}"),
        (None, Some(code)) => format!("exited with status {code}"),
        (None, None) => "ended".into(),
    }
}

type Ready = std::sync::mpsc::Sender<std::io::Result<()>>;

fn watch(ctx: Ctx, mut members: Vec<Member>, stop_r: OwnedFd, ready: Ready) {
    for m in members.iter_mut() {
        if let Err(e) = ctx.launch(m) {
            let _ = ready.send(Err(e));
            stop_all(&ctx, &mut members);
            return;
        }
    }
    let _ = ready.send(Ok(()));
    loop {
        let watched: Vec<usize> = (0..members.len())
            .filter(|&i| members[i].running.is_some())
            .collect();
        let mut pfds = vec![PollFd::new(&stop_r, PollFlags::IN)];
        for &i in &watched {
            if let Some(r) = &members[i].running {
                pfds.push(PollFd::new(&r.pidfd, PollFlags::IN));
            }
        }
        match rustix::event::poll(&mut pfds, None) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(_) => break,
        }
        let ready: Vec<bool> = pfds.iter().map(|p| !p.revents().is_empty()).collect();
        drop(pfds);
        if ready[0] {
            break;
        }
        for (k, &i) in watched.iter().enumerate() {
            if ready[k + 1] {
                ctx.on_death(&mut members[i]);
            }
        }
    }
    stop_all(&ctx, &mut members);
}

/// Ask every server to stop (`SIGTERM`: it kills and reaps its programs,
/// tells their proxies, and exits), killing one that does not within
/// [`STOP_TIMEOUT`].
fn stop_all(ctx: &Ctx, members: &mut [Member]) {
    for m in members.iter() {
        if let Some(r) = &m.running {
            let _ = rustix::process::pidfd_send_signal(&r.pidfd, rustix::process::Signal::TERM);
        }
    }
    let deadline = Instant::now() + STOP_TIMEOUT;
    for m in members.iter_mut() {
        let Some(mut r) = m.running.take() else {
            continue;
        };
        let left = deadline.saturating_duration_since(Instant::now());
        let mut pfd = [PollFd::new(&r.pidfd, PollFlags::IN)];
        let ts = rustix::time::Timespec {
            tv_sec: left.as_secs() as i64,
            tv_nsec: left.subsec_nanos() as _,
        };
        if !matches!(rustix::event::poll(&mut pfd, Some(&ts)), Ok(n) if n > 0) {
            let _ = r.child.kill();
        }
        let _ = r.child.wait();
        ctx.table.set_process(m.core, 0, 0);
    }
}

/// `atoll __sched-server CORE RUNTIME_DIR INSTANCE_PID`, stdin the core's
/// listening socket: serve until `SIGTERM` (the watchdog stopping it, or
/// the instance's death: `PR_SET_PDEATHSIG`).
pub fn child_main() -> i32 {
    let args: Vec<String> = std::env::args().skip(2).collect();
    let (Some(core), Some(dir), Some(parent)) = (
        args.first().and_then(|a| a.parse::<usize>().ok()),
        args.get(1).map(PathBuf::from),
        args.get(2).and_then(|a| a.parse::<i32>().ok()),
    ) else {
        eprintln!("atoll: {SUBCOMMAND} CORE RUNTIME_DIR INSTANCE_PID (started by atoll only)");
        return 2;
    };
    let Some(term) = sigterm_fd() else {
        eprintln!("atoll: scheduling server of core {core}: no signalfd");
        return 1;
    };
    // The instance's end stops us as `atoll stop` would; checked after
    // setting it, for an instance that ended before.
    let _ = rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::TERM));
    if rustix::process::getppid().map(|p| p.as_raw_nonzero().get()) != Some(parent) {
        return 1;
    }
    // `ps` and `top` show which core's server this is.
    let _ = rustix::thread::set_name(
        &std::ffi::CString::new(format!("atoll-sched-{core}")).unwrap_or_default(),
    );
    let Some(table) = LoadTable::open(&dir.join(crate::server::LOAD_FILE)) else {
        eprintln!("atoll: scheduling server of core {core}: no load table");
        return 1;
    };
    // SAFETY: the watchdog made our stdin the core's listening socket and
    // nothing else in this process owns descriptor 0.
    let listener = unsafe { OwnedFd::from_raw_fd(0) };
    // Ours, not the instance's: bound anew by each server process.
    let place = crate::server::bind_place(&dir, core).ok();
    let stopping = Cell::new(false);
    let stop = || {
        let mut info = [0u8; 128];
        while let Ok(128) = rustix::io::read(&term, &mut info) {
            stopping.set(true);
        }
        stopping.get()
    };
    crate::server::serve(core, listener, place, &table, &stop, &term);
    0
}

/// Block `SIGTERM` and read it from a descriptor the server's loop polls.
fn sigterm_fd() -> Option<OwnedFd> {
    // SAFETY: sigset operations on a local set; sigprocmask and signalfd
    // take it by pointer; the new descriptor is ours alone.
    unsafe {
        let mut set: libc::sigset_t = core::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        if libc::pthread_sigmask(libc::SIG_BLOCK, &set, core::ptr::null_mut()) != 0 {
            return None;
        }
        let fd = libc::signalfd(-1, &set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK);
        (fd >= 0).then(|| OwnedFd::from_raw_fd(fd))
    }
}

/// Kill the scheduling server process of `core` with `SIGKILL` (`atoll
/// chaos --kill sched:N`). `Ok(false)`: its servers are threads.
pub fn kill(runtime_dir: &Path, table: &LoadTable, core: usize) -> std::io::Result<bool> {
    let pid = table.pid(core);
    let Some(raw) = rustix::process::Pid::from_raw(pid as i32) else {
        return Ok(false);
    };
    // Hold it first, then check it is that server: a pid recycled since
    // it was published is never signalled.
    let pidfd = rustix::process::pidfd_open(raw, rustix::process::PidfdFlags::empty())?;
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))?;
    let words: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
    let dir = runtime_dir.as_os_str().as_encoded_bytes();
    let ours = words.get(1) == Some(&SUBCOMMAND.as_bytes())
        && words.get(2) == Some(&core.to_string().as_bytes())
        && words.get(3) == Some(&dir);
    if !ours || table.pid(core) != pid {
        return Err(std::io::Error::other(format!(
            "pid {pid} is not the scheduling server of core {core}"
        )));
    }
    rustix::process::pidfd_send_signal(&pidfd, rustix::process::Signal::KILL)?;
    Ok(true)
}
