//! Detached instances: `atoll boot`, `status`, `stop`, `list`.
//!
//! `boot` daemonizes the classic way so that the instance survives the
//! shell that started it and never owns a terminal:
//!
//! ```text
//! atoll boot ──fork──▶ intermediate ──setsid, fork──▶ daemon
//!    │  (reaps the intermediate,        exits at once    │ boots the instance,
//!    │   reads the pipe)                                 │ writes instance.json,
//!    ◀───────────── "ok <id>" / "err <msg>" ─────────────┘ stdio → atoll.log,
//!  prints <id>, exits 0                                     waits for Stop
//! ```
//!
//! The daemon stops on `BootRequest::Stop` (from `atoll stop`) or on
//! SIGTERM/SIGINT/SIGHUP, which it turns into a Stop to itself.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use atoll_server::Instance;

use crate::args::{BootArgs, ListArgs, SelectArgs, StatusArgs};
use crate::config::{self, Plan};
use crate::registry::{self, InstanceRecord};
use crate::report;
use crate::signals::Terminator;
use crate::sys::{self, Forked};

/// Name of the daemon's log file inside its runtime directory.
pub const LOG_FILE: &str = "atoll.log";

/// How long `atoll stop` waits for the instance's process to end.
const STOP_TIMEOUT: Duration = Duration::from_secs(60);

pub fn boot(args: BootArgs) -> Result<i32> {
    let plan = config::plan(&args.instance)?;
    let root = &plan.config.runtime_root;
    config::ensure_runtime_root(root)
        .with_context(|| format!("runtime root {}", root.display()))?;
    let (rd, wr) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    match sys::fork().context("fork")? {
        Forked::Parent { child } => {
            drop(wr);
            if let Some(pid) = rustix::process::Pid::from_raw(child) {
                let _ = rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::empty());
            }
            let mut msg = String::new();
            File::from(rd).read_to_string(&mut msg)?;
            if let Some(id) = msg.strip_prefix("ok ") {
                println!("{}", id.trim());
                Ok(0)
            } else if let Some(err) = msg.strip_prefix("err ") {
                Err(anyhow!("{}", err.trim()))
            } else {
                bail!("the instance exited while booting (run with ATOLL_LOG=debug for details)")
            }
        }
        Forked::Child => {
            drop(rd);
            let _ = rustix::process::setsid();
            match sys::fork() {
                Ok(Forked::Parent { .. }) => sys::exit_now(0),
                Ok(Forked::Child) => {}
                Err(_) => sys::exit_now(1),
            }
            let code = daemon(plan, wr);
            std::process::exit(code)
        }
    }
}

/// Body of the detached instance process. Reports the outcome of booting
/// on `ready` ("ok ID" or "err MESSAGE"), then serves until stopped.
fn daemon(plan: Plan, ready: OwnedFd) -> i32 {
    let mut ready = File::from(ready);
    let mut fail = |msg: String| {
        let _ = write!(ready, "err {msg}");
        1
    };
    if let Err(e) = detach_stdio() {
        return fail(format!("cannot detach: {e}"));
    }
    let term = match Terminator::install() {
        Ok(t) => t,
        Err(e) => return fail(format!("cannot set up signal handling: {e}")),
    };
    let shape = plan.clone();
    let config = plan.config;
    let sched_exe = config.server_exe.clone();
    let instance = match std::panic::catch_unwind(move || Instance::boot(config)) {
        Ok(Ok(i)) => i,
        Ok(Err(e)) => return fail(format!("cannot boot the instance: {e}")),
        Err(_) => return fail("the instance failed while booting (internal error)".into()),
    };
    let record = InstanceRecord::for_self(&instance, "boot", &[]).with_shape(&shape);
    if let Err(e) = record.write() {
        let _ = fail(format!("cannot write {}: {e}", registry::RECORD));
        instance.shutdown();
        return 1;
    }
    log_to(&instance.runtime_dir().join(LOG_FILE));
    // Programs it starts run in the daemon's session, not their proxies':
    // they get a session of their own (see `atoll_sched::server`).
    let scheds =
        crate::run::start_scheds(&instance, plan.app_cores.as_deref(), sched_exe.as_deref());
    let signalled = term.stop_instance_on_signal(instance.socket_path().to_path_buf());
    let _ = write!(ready, "ok {}", instance.id());
    drop(ready);
    if !signalled {
        instance.wait_for_stop_request();
    }
    tracing::info!(id = instance.id(), "stopping");
    drop(scheds);
    instance.shutdown();
    0
}

/// stdin, stdout and stderr to /dev/null; cwd to `/` so the daemon keeps
/// no directory busy.
fn detach_stdio() -> std::io::Result<()> {
    let null = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")?;
    for fd in 0..3 {
        sys::redirect(null.as_fd(), fd)?;
    }
    std::env::set_current_dir("/")
}

/// Send the daemon's stdout/stderr (and so its log) to `path`.
fn log_to(path: &std::path::Path) {
    if let Ok(f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = sys::redirect(f.as_fd(), 1);
        let _ = sys::redirect(f.as_fd(), 2);
    }
}

pub fn select(sel: &SelectArgs) -> Result<InstanceRecord> {
    let root = config::runtime_root(&sel.runtime_dir);
    Ok(registry::select(
        registry::scan(&root),
        sel.id.as_deref(),
        &root,
    )?)
}

pub fn status(args: StatusArgs) -> Result<i32> {
    let rec = select(&args.select)?;
    let st = crate::bootctl::status(&rec.socket)
        .with_context(|| format!("instance {} does not answer", rec.id))?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report::status_json(&st, &rec))?
        );
    } else {
        print!("{}", report::status_text(&st, &rec));
    }
    Ok(0)
}

pub fn chaos(args: crate::args::ChaosArgs) -> Result<i32> {
    use atoll_proto::boot::ChaosAction;
    let rec = select(&args.select)?;
    if let Some(crate::args::KillTarget::Sched(core)) = args.kill {
        return kill_sched(&rec, core as usize);
    }
    let action = match (args.kill, args.stall, args.stall_for, args.corrupt_ring) {
        (Some(crate::args::KillTarget::Server(server)), _, _, _) => ChaosAction::Kill { server },
        (None, Some(server), Some(millis), _) => ChaosAction::Stall { server, millis },
        (None, None, _, Some(server)) => ChaosAction::CorruptRing { server },
        _ => bail!(
            "say --kill server:N|sched:N, --stall server:N --for TIME, or --corrupt-ring server:N"
        ),
    };
    crate::bootctl::chaos(&rec.socket, action).with_context(|| format!("instance {}", rec.id))?;
    Ok(0)
}

/// `atoll scale`: run the file servers in N host processes, or let the
/// instance choose.
pub fn scale(args: crate::args::ScaleArgs) -> Result<i32> {
    let rec = select(&args.select)?;
    let hosts = match args.servers {
        crate::args::ServerCount::Fixed(n) => Some(n as u32),
        crate::args::ServerCount::Auto => None,
    };
    let (running, moved) = crate::bootctl::scale(&rec.socket, hosts)
        .with_context(|| format!("instance {}", rec.id))?;
    match hosts {
        Some(_) => println!("{running} server process(es); {moved} file server(s) moved"),
        None => println!("{running} server process(es) now; the count follows the load"),
    }
    Ok(0)
}

/// `atoll chaos --kill sched:N`: kill the scheduling server process of
/// core N with `SIGKILL` (servers that are threads are asked to die
/// through a word of the load table they watch, and woken with a
/// connection), and wait until the watchdog restarted it.
fn kill_sched(rec: &InstanceRecord, core: usize) -> Result<i32> {
    let dir = rec
        .socket
        .parent()
        .ok_or_else(|| anyhow!("instance {} has no runtime directory", rec.id))?;
    let table = atoll_sched::LoadTable::open(&dir.join(atoll_sched::LOAD_FILE))
        .ok_or_else(|| anyhow!("instance {} runs no scheduling servers", rec.id))?;
    if !table.served().any(|c| c == core) {
        bail!(
            "instance {} has no scheduling server on core {core}",
            rec.id
        );
    }
    let before = table.restarts(core);
    let process = atoll_sched::process::kill(dir, &table, core)
        .with_context(|| format!("cannot kill the scheduling server of core {core}"))?;
    if !process && !table.request_crash(core) {
        bail!(
            "instance {} has no scheduling server on core {core}",
            rec.id
        );
    }
    let started = std::time::Instant::now();
    while table.restarts(core) == before {
        if !table.served().any(|c| c == core) {
            bail!("the scheduling server of core {core} could not be restarted");
        }
        // Any connection wakes a server thread's poll; it hangs up at once.
        if !process {
            if let (Ok(sock), Ok(addr)) = (
                rustix::net::socket_with(
                    rustix::net::AddressFamily::UNIX,
                    rustix::net::SocketType::SEQPACKET,
                    rustix::net::SocketFlags::CLOEXEC,
                    None,
                ),
                rustix::net::SocketAddrUnix::new(atoll_sched::proxy::socket_path(dir, core)),
            ) {
                let _ = rustix::net::connect(&sock, &addr);
            }
        }
        if started.elapsed() > Duration::from_secs(10) {
            bail!("the scheduling server of core {core} did not die within 10 s");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(0)
}

pub fn stop(args: SelectArgs) -> Result<i32> {
    let rec = select(&args)?;
    let pid = rustix::process::Pid::from_raw(rec.pid as i32)
        .ok_or_else(|| anyhow!("bad pid in the record of {}", rec.id))?;
    // Hold the process by pidfd first, then make sure it is still the one
    // recorded: waiting on it can then never confuse it with a newcomer.
    let pidfd = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok();
    if !rec.is_live() {
        return Ok(0);
    }
    if rec.kind == "run" {
        // An `atoll run` instance lives as long as its command: end the
        // command the way ^C would, and let that atoll clean up.
        rustix::process::kill_process(pid, rustix::process::Signal::TERM)
            .with_context(|| format!("cannot signal atoll run (pid {})", rec.pid))?;
    } else {
        crate::bootctl::stop(&rec.socket)
            .with_context(|| format!("cannot stop instance {}", rec.id))?;
    }
    if !wait_gone(&rec, pidfd.as_ref(), STOP_TIMEOUT) {
        bail!(
            "instance {} (pid {}) did not stop within {}s",
            rec.id,
            rec.pid,
            STOP_TIMEOUT.as_secs()
        );
    }
    Ok(0)
}

/// Wait until the process of `rec` has ended.
fn wait_gone(rec: &InstanceRecord, pidfd: Option<&OwnedFd>, timeout: Duration) -> bool {
    if let Some(fd) = pidfd {
        // A pidfd becomes readable when its process ends.
        let mut fds = [rustix::event::PollFd::new(fd, rustix::event::PollFlags::IN)];
        let ts = rustix::event::Timespec {
            tv_sec: timeout.as_secs() as i64,
            tv_nsec: 0,
        };
        loop {
            match rustix::event::poll(&mut fds, Some(&ts)) {
                Ok(n) => return n > 0,
                Err(rustix::io::Errno::INTR) => continue,
                Err(_) => break,
            }
        }
    }
    let deadline = std::time::Instant::now() + timeout;
    while rec.is_live() {
        if std::time::Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

pub fn list(args: ListArgs) -> Result<i32> {
    let root = config::runtime_root(&args.runtime_dir);
    let records = registry::scan(&root);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&records)?);
    } else if !records.is_empty() {
        print!("{}", report::list_text(&records));
    }
    Ok(0)
}
