//! Runs one job as separate processes and times it.
//!
//! Timing (Hare ch. 5 measures whole-benchmark throughput): all run-phase
//! processes are started, each reports "ready", then the harness takes the
//! start time and closes the last write end of the pipe that is every
//! worker's stdin, releasing them together; the run ends when the last
//! worker's report line arrives. Process start-up and exit are outside the
//! measured span (start-up cost is measured separately, see
//! [`startup_cost`]).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};

use crate::systems::Target;
use crate::worker::{Phase, WorkerArgs};
use crate::workloads::{Job, WorkerReport};

/// How to start a worker: `exe prefix… <worker args>`.
#[derive(Clone, Debug)]
pub struct WorkerCmd {
    pub exe: PathBuf,
    pub prefix: Vec<OsString>,
    /// Upper bound for one phase, so a hung file system fails one run
    /// instead of the whole benchmark.
    pub timeout: Duration,
}

impl WorkerCmd {
    /// `current_exe() bench-worker …`: the `atoll` binary itself.
    pub fn current(timeout: Duration) -> anyhow::Result<WorkerCmd> {
        Ok(WorkerCmd {
            exe: std::env::current_exe().context("locating the current executable")?,
            prefix: vec!["bench-worker".into()],
            timeout,
        })
    }

    fn command(&self, target: &Target, args: &WorkerArgs) -> Command {
        let mut args = args.clone();
        args.cpus = target.cpus.clone();
        let mut c = Command::new(&self.exe);
        c.args(&self.prefix).args(args.to_args());
        c.envs(target.env.iter().map(|(k, v)| (k, v)));
        c
    }
}

/// Result of one measured run.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub ops: u64,
    pub elapsed: Duration,
    pub reports: Vec<WorkerReport>,
    /// SIGSYS traps counted by the preload library, if it wrote any:
    /// system call number → count, summed over all processes.
    pub traps: Option<BTreeMap<u64, u64>>,
    /// Sites rewritten (`sites:N`), summed over all processes: each one
    /// trapped exactly once, its warm-up, before it called atoll directly.
    pub trap_sites: Option<u64>,
}

impl Outcome {
    pub fn ops_per_sec(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// A peer benchmark's own metric summed over the workers, if they
    /// reported one.
    pub fn native(&self) -> Option<f64> {
        let v: Vec<f64> = self.reports.iter().filter_map(|r| r.native).collect();
        (!v.is_empty()).then(|| v.iter().sum())
    }

    /// Per-workload detail counts summed over the workers.
    pub fn detail(&self) -> BTreeMap<String, u64> {
        let mut d = BTreeMap::new();
        for r in &self.reports {
            for (k, v) in &r.detail {
                *d.entry(k.clone()).or_insert(0) += v;
            }
        }
        d
    }
}

/// setup → measured run → checks → clean. The run directory is removed
/// even when the run or the check fails.
pub fn run_job(
    job: &Job,
    target: &Target,
    cmd: &WorkerCmd,
    trap_file: Option<&Path>,
) -> anyhow::Result<Outcome> {
    run_single(job, target, cmd, Phase::Clean)?;
    let result = (|| -> anyhow::Result<Outcome> {
        run_single(job, target, cmd, Phase::Setup)?;
        let out = run_measured(job, target, cmd, trap_file)?;
        job.check_reports(&out.reports)?;
        run_single(job, target, cmd, Phase::Check)?;
        Ok(out)
    })();
    let cleaned = run_single(job, target, cmd, Phase::Clean);
    let out = result?;
    cleaned?;
    Ok(out)
}

/// One untimed phase in one process.
fn run_single(job: &Job, target: &Target, cmd: &WorkerCmd, phase: Phase) -> anyhow::Result<()> {
    let args = WorkerArgs::for_job(job, phase, Default::default(), 0);
    let mut child = cmd
        .command(target, &args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {}", cmd.exe.display()))?;
    let stderr = collect(child.stderr.take());
    let status = wait_deadline(&mut child, Instant::now() + cmd.timeout)?;
    let err = stderr.join().unwrap_or_default();
    if !status.success() {
        bail!(
            "{:?} phase failed ({status}): {}",
            phase,
            without_backtrace(&err)
        );
    }
    Ok(())
}

fn collect(r: Option<impl Read + Send + 'static>) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(mut r) = r {
            let _ = r.read_to_string(&mut s);
        }
        s
    })
}

fn wait_deadline(child: &mut Child, deadline: Instant) -> anyhow::Result<std::process::ExitStatus> {
    loop {
        if let Some(s) = child.try_wait()? {
            return Ok(s);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("timed out");
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

enum Event {
    Ready,
    Report(usize, Box<WorkerReport>, Instant),
    Garbage(usize, String),
    Eof(usize),
}

struct Workers {
    children: Vec<Child>,
    stderr: Vec<Option<std::thread::JoinHandle<String>>>,
}

impl Workers {
    fn kill_all(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
        }
        for c in &mut self.children {
            let _ = c.wait();
        }
    }

    fn stderr_of(&mut self, i: usize) -> String {
        let s = self.stderr[i]
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default();
        without_backtrace(&s)
    }

    fn fail(&mut self, i: usize, what: &str) -> anyhow::Error {
        self.kill_all();
        anyhow!("worker {i} {what}: {}", self.stderr_of(i))
    }
}

fn run_measured(
    job: &Job,
    target: &Target,
    cmd: &WorkerCmd,
    trap_file: Option<&Path>,
) -> anyhow::Result<Outcome> {
    let roles = job.roles();
    let n = roles.len();
    let (start_rd, start_wr) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    let (tx, rx) = mpsc::channel::<Event>();
    let mut w = Workers {
        children: Vec::new(),
        stderr: Vec::new(),
    };
    if let Some(f) = trap_file {
        let _ = std::fs::remove_file(f);
    }
    for (i, (role, index)) in roles.iter().enumerate() {
        let args = WorkerArgs::for_job(job, Phase::Run, *role, *index);
        let mut c = cmd.command(target, &args);
        if let Some(f) = trap_file {
            c.env("ATOLL_TRAP_STATS", f);
        }
        // The client library reads the placement policy once, at start-up
        // (Hare §3.6.1), so it must be in the worker's initial environment.
        if let Some(p) = job.workload.placement() {
            c.env(crate::workloads::ENV_PLACEMENT, p);
        }
        let spawned = c
            .stdin(Stdio::from(start_rd.try_clone()?))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn();
        let mut child = match spawned {
            Ok(c) => c,
            Err(e) => {
                w.kill_all();
                return Err(e).context("starting a worker");
            }
        };
        w.stderr.push(Some(collect(child.stderr.take())));
        let stdout = child.stdout.take().expect("piped stdout");
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let ev = if line == "ready" {
                    Event::Ready
                } else {
                    match serde_json::from_str::<WorkerReport>(&line) {
                        Ok(r) => Event::Report(i, Box::new(r), Instant::now()),
                        Err(_) => Event::Garbage(i, line),
                    }
                };
                if tx.send(ev).is_err() {
                    return;
                }
            }
            let _ = tx.send(Event::Eof(i));
        });
        w.children.push(child);
    }
    drop(start_rd);
    drop(tx);
    let deadline = Instant::now() + cmd.timeout;
    let next = |rx: &mpsc::Receiver<Event>| {
        rx.recv_timeout(deadline.saturating_duration_since(Instant::now()))
    };

    let mut ready = 0;
    while ready < n {
        match next(&rx) {
            Ok(Event::Ready) => ready += 1,
            Ok(Event::Eof(i)) => return Err(w.fail(i, "exited before the start barrier")),
            Ok(Event::Garbage(i, l)) => return Err(w.fail(i, &format!("printed {l:?}"))),
            Ok(Event::Report(i, ..)) => return Err(w.fail(i, "reported before the start")),
            Err(_) => {
                w.kill_all();
                bail!("workers did not become ready in {:?}", cmd.timeout);
            }
        }
    }
    let t0 = Instant::now();
    drop(start_wr);

    let mut reports: Vec<Option<WorkerReport>> = vec![None; n];
    let mut last = t0;
    let mut got = 0;
    while got < n {
        match next(&rx) {
            Ok(Event::Report(i, r, t)) => {
                reports[i] = Some(*r);
                last = last.max(t);
                got += 1;
            }
            Ok(Event::Eof(i)) if reports[i].is_none() => {
                return Err(w.fail(i, "failed"));
            }
            Ok(Event::Garbage(i, l)) => return Err(w.fail(i, &format!("printed {l:?}"))),
            Ok(_) => {}
            Err(_) => {
                w.kill_all();
                bail!("run did not finish in {:?}", cmd.timeout);
            }
        }
    }
    let elapsed = last - t0;
    for i in 0..n {
        let st = wait_deadline(&mut w.children[i], deadline)?;
        if !st.success() {
            return Err(w.fail(i, &format!("exited with {st} after reporting")));
        }
    }
    let reports: Vec<WorkerReport> = reports.into_iter().flatten().collect();
    let ops = reports.iter().map(|r| r.ops).sum();
    let trap_text = trap_file.and_then(|f| std::fs::read_to_string(f).ok());
    let traps = trap_text.as_deref().map(parse_traps);
    let trap_sites = trap_text.as_deref().map(parse_trap_sites);
    Ok(Outcome {
        ops,
        elapsed,
        reports,
        traps,
        trap_sites,
    })
}

/// A worker's error message without the backtrace anyhow appends when
/// `RUST_BACKTRACE` is set.
fn without_backtrace(s: &str) -> String {
    s.split("\nStack backtrace:")
        .next()
        .unwrap_or("")
        .trim()
        .to_string()
}

/// A trap-statistics file (one line per process, `pid nr:count …`, written
/// by the preload library) summed per system call number.
pub fn parse_traps(s: &str) -> BTreeMap<u64, u64> {
    let mut m = BTreeMap::new();
    for f in s.lines().flat_map(|l| l.split_whitespace().skip(1)) {
        let Some((nr, n)) = f.split_once(':') else {
            continue;
        };
        if let (Ok(nr), Ok(n)) = (nr.parse::<u64>(), n.parse::<u64>()) {
            *m.entry(nr).or_insert(0) += n;
        }
    }
    m
}

/// Sites rewritten (`sites:N` of each line of a trap-statistics file),
/// summed: the traps that were a site's first run, before its rewrite.
pub fn parse_trap_sites(s: &str) -> u64 {
    s.lines()
        .flat_map(|l| l.split_whitespace().skip(1))
        .filter_map(|f| f.strip_prefix("sites:"))
        .filter_map(|n| n.parse::<u64>().ok())
        .sum()
}

/// Per-process start-up cost: `spawns` runs of `/bin/true` without and
/// with `env`; returns mean microseconds (without, with).
pub fn startup_cost(env: &[(String, String)], spawns: usize) -> anyhow::Result<(f64, f64)> {
    let time = |with: bool| -> anyhow::Result<f64> {
        let t = Instant::now();
        for _ in 0..spawns {
            let mut c = Command::new("/bin/true");
            if with {
                c.envs(env.iter().map(|(k, v)| (k, v)));
            }
            let st = c.status().context("spawning /bin/true")?;
            if !st.success() {
                bail!("/bin/true failed ({st}) with the system's environment");
            }
        }
        Ok(t.elapsed().as_secs_f64() * 1e6 / spawns.max(1) as f64)
    };
    // Interleave to spread out noise from other load.
    let a = time(false)?;
    let b = time(true)?;
    let c = time(false)?;
    Ok(((a + c) / 2.0, b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trap_stats_are_summed_over_processes_and_syscalls() {
        let s = "123 39:4 257:10\n124 0:1 257:2\nbogus\n";
        let m = parse_traps(s);
        assert_eq!(m.values().sum::<u64>(), 17);
        assert_eq!(m[&257], 12);
        let with_sites = "123 0:3 257:2 direct:50 sites:4\n124 39:1 sites:1\n";
        assert_eq!(parse_traps(with_sites).values().sum::<u64>(), 6);
        assert_eq!(parse_trap_sites(with_sites), 5);
        assert_eq!(parse_trap_sites(s), 0);
    }

    #[test]
    fn startup_cost_runs_true() {
        let (a, b) = startup_cost(&[], 3).unwrap();
        assert!(a > 0.0 && b > 0.0);
    }
}
