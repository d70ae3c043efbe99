//! `atoll bench recovery`: what making a file server survivable costs, and
//! how long rebuilding one takes (fos §3.5; `atoll_server::journal`).
//!
//! Two instances with one file server each, one with its journal (the
//! default) and one `--without recovery`, run the same creation of `N`
//! files (100 directories of `N / 100`), timed inside the instance by
//! this binary itself (`--create-probe`). Then the journaled server is
//! killed (`atoll chaos --kill`: `SIGKILL` to its process, or a panic of
//! its thread with `--without processes`), and the bench reads from
//! `atoll status` how long its rebuild took (for a process: from the
//! death until the successor serves), and checks that every file is
//! still there. The journal held at the kill is the newest snapshot of
//! the server's state and the records after it (`ATOLL_SNAPSHOT_BYTES`
//! in the environment sets how many record bytes come between two).

use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

/// Arguments of `atoll bench recovery`.
#[derive(clap::Args, Clone, Debug)]
pub struct RecoveryArgs {
    /// CI smoke size (10,000 files).
    #[arg(long)]
    pub quick: bool,
    /// Files to create before the kill (default: 100,000; 10,000 with
    /// `--quick`).
    #[arg(long)]
    pub inodes: Option<u64>,
    /// Internal: create N files under the mount and print the seconds it
    /// took.
    #[arg(long, hide = true, value_name = "N")]
    pub create_probe: Option<u64>,
    /// Internal: count the files `--create-probe N` made and print it.
    #[arg(long, hide = true, value_name = "N")]
    pub count_probe: Option<u64>,
}

/// What one run measured.
#[derive(serde::Serialize, Debug)]
pub struct RecoveryResults {
    pub inodes: u64,
    /// Creations per second with the journal, and without it.
    pub creates_per_s: f64,
    pub creates_per_s_without: f64,
    /// `creates_per_s / creates_per_s_without`.
    pub journal_cost_ratio: f64,
    /// Records and bytes the server's journal held at the kill.
    pub journal_records: u64,
    pub journal_bytes: u64,
    /// Snapshots of the server's state taken before the kill
    /// (`atoll_server::snapshot`), the newest one's bytes, and how long it
    /// took (encoding and committing it: the pause of its server, which
    /// goes on from its own state).
    pub snapshots: u64,
    pub snapshot_bytes: u64,
    pub snapshot_ms: f64,
    /// How it was taken ("forked": `snapshot_ms` is the server's pause,
    /// the fork and the copy of the records appended meanwhile; "inline":
    /// the whole encoding), and how long its encoding took.
    pub snapshot_mode: String,
    pub snapshot_encode_ms: f64,
    /// How long the rebuild took (replaying the journal), and how long
    /// from the kill until `atoll status` showed the server up again.
    pub recovery_ms: f64,
    pub kill_to_up_ms: f64,
    /// Files found after the rebuild (must equal `inodes`).
    pub files_after: u64,
    /// The server was a process of its own (killed by `SIGKILL`, its
    /// successor a new process), not a thread.
    pub process: bool,
}

const DIRS: u64 = 100;
const MOUNT: &str = "/atoll";

fn atoll() -> anyhow::Result<Command> {
    Ok(Command::new(
        std::env::current_exe().context("no atoll binary")?,
    ))
}

fn ok_stdout(cmd: &mut Command, what: &str) -> anyhow::Result<String> {
    let out = cmd.output().with_context(|| format!("cannot run {what}"))?;
    if !out.status.success() {
        bail!(
            "{what} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// A detached instance, stopped when dropped.
struct Instance {
    id: String,
}

impl Instance {
    fn boot(inodes: u64, without: bool) -> anyhow::Result<Instance> {
        let mut cmd = atoll()?;
        cmd.args(["boot", "--servers", "1", "--memory", "1G", "--inodes"])
            .arg((inodes * 2 + 1000).to_string());
        if without {
            cmd.args(["--without", "recovery"]);
        }
        let id = ok_stdout(&mut cmd, "atoll boot")?;
        Ok(Instance { id })
    }

    fn probe(&self, flag: &str, n: u64) -> anyhow::Result<String> {
        let exe = std::env::current_exe()?;
        let mut cmd = atoll()?;
        cmd.args(["exec", "--id", &self.id, "--"]).arg(exe).args([
            "bench",
            "recovery",
            flag,
            &n.to_string(),
        ]);
        ok_stdout(&mut cmd, "the probe")
    }

    fn health(&self) -> anyhow::Result<serde_json::Value> {
        let mut cmd = atoll()?;
        cmd.args(["status", "--id", &self.id, "--json"]);
        let text = ok_stdout(&mut cmd, "atoll status")?;
        let v: serde_json::Value = serde_json::from_str(&text)?;
        Ok(v["health"][0].clone())
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        if let Ok(mut cmd) = atoll() {
            let _ = cmd.args(["stop", "--id", &self.id]).output();
        }
    }
}

/// `--create-probe N`: make the files, print seconds.
fn create_probe(n: u64) -> anyhow::Result<()> {
    let t0 = Instant::now();
    let per = n.div_ceil(DIRS);
    for d in 0..DIRS {
        let dir = format!("{MOUNT}/r{d}");
        std::fs::create_dir(&dir).with_context(|| format!("mkdir {dir}"))?;
        for f in 0..per.min(n.saturating_sub(d * per)) {
            std::fs::File::create(format!("{dir}/f{f}"))
                .with_context(|| format!("create in {dir}"))?;
        }
    }
    println!("{}", t0.elapsed().as_secs_f64());
    Ok(())
}

/// `--count-probe N`: count what `--create-probe N` made.
fn count_probe() -> anyhow::Result<()> {
    let mut n = 0u64;
    for d in 0..DIRS {
        if let Ok(rd) = std::fs::read_dir(format!("{MOUNT}/r{d}")) {
            n += rd.count() as u64;
        }
    }
    println!("{n}");
    Ok(())
}

/// Measure (module docs).
pub fn run(inodes: u64) -> anyhow::Result<RecoveryResults> {
    let bare = Instance::boot(inodes, true)?;
    let secs_without: f64 = bare.probe("--create-probe", inodes)?.parse()?;
    drop(bare);
    let inst = Instance::boot(inodes, false)?;
    let secs: f64 = inst.probe("--create-probe", inodes)?.parse()?;
    let before = inst.health()?;
    let pid_before = before["pid"].as_u64().unwrap_or(0);
    let t0 = Instant::now();
    let mut cmd = atoll()?;
    cmd.args(["chaos", "--id", &inst.id, "--kill", "server:0"]);
    ok_stdout(&mut cmd, "atoll chaos")?;
    let h = loop {
        let h = inst.health()?;
        if h["restarts"].as_u64().unwrap_or(0) >= 1 || h["state"] == "down" {
            break h;
        }
        if t0.elapsed() > Duration::from_secs(300) {
            bail!("the server was not rebuilt within 300 s");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let kill_to_up = t0.elapsed();
    if h["state"] != "up" {
        bail!("the server was not rebuilt: {}", h["reason"]);
    }
    let files_after: u64 = inst.probe("--count-probe", inodes)?.parse()?;
    Ok(RecoveryResults {
        inodes,
        creates_per_s: inodes as f64 / secs,
        creates_per_s_without: inodes as f64 / secs_without,
        journal_cost_ratio: secs_without / secs,
        journal_records: before["journal_records"].as_u64().unwrap_or(0),
        journal_bytes: before["journal_bytes"].as_u64().unwrap_or(0),
        snapshots: before["snapshots"].as_u64().unwrap_or(0),
        snapshot_bytes: before["snapshot_bytes"].as_u64().unwrap_or(0),
        snapshot_ms: before["snapshot_us"].as_u64().unwrap_or(0) as f64 / 1000.0,
        snapshot_mode: before["snapshot_mode"].as_str().unwrap_or("").to_string(),
        snapshot_encode_ms: before["snapshot_encode_us"].as_u64().unwrap_or(0) as f64 / 1000.0,
        recovery_ms: h["recovery_us"].as_u64().unwrap_or(0) as f64 / 1000.0,
        kill_to_up_ms: kill_to_up.as_secs_f64() * 1000.0,
        files_after,
        process: pid_before != 0 && h["pid"].as_u64().unwrap_or(0) != pid_before,
    })
}

/// The results as a table.
pub fn table(r: &RecoveryResults) -> String {
    format!(
        "recovery of a file server holding {} files (one server, {})\n\
         {:<34}{:>14.0}\n{:<34}{:>14.0}\n{:<34}{:>14.2}\n\
         {:<34}{:>14}\n{:<34}{:>14}\n{:<34}{:>14}\n{:<34}{:>14}\n{:<34}{:>14.1}\n\
         {:<34}{:>14.1}\n{:<34}{:>14.1}\n{:<34}{:>14.1}\n{:<34}{:>14}\n",
        r.inodes,
        if r.process {
            "a process killed by SIGKILL"
        } else {
            "a thread"
        },
        "creates/s with journal",
        r.creates_per_s,
        "creates/s --without recovery",
        r.creates_per_s_without,
        "ratio (journal cost)",
        r.journal_cost_ratio,
        "journal records",
        r.journal_records,
        "journal bytes",
        r.journal_bytes,
        "snapshots taken",
        r.snapshots,
        "newest snapshot bytes",
        r.snapshot_bytes,
        format!("newest snapshot pause ms ({})", r.snapshot_mode),
        r.snapshot_ms,
        "newest snapshot encoding ms",
        r.snapshot_encode_ms,
        "rebuild (snapshot + replay) ms",
        r.recovery_ms,
        "kill to up again ms",
        r.kill_to_up_ms,
        "files after rebuild",
        r.files_after,
    )
}

/// `atoll bench recovery`.
pub fn main(
    args: &RecoveryArgs,
    quick: bool,
    json: Option<&std::path::Path>,
) -> anyhow::Result<()> {
    if let Some(n) = args.create_probe {
        return create_probe(n);
    }
    if args.count_probe.is_some() {
        return count_probe();
    }
    let inodes = args
        .inodes
        .unwrap_or(if quick || args.quick { 10_000 } else { 100_000 })
        .max(DIRS);
    let r = run(inodes)?;
    print!("{}", table(&r));
    if r.files_after != inodes {
        bail!(
            "{} files after the rebuild, {} were created",
            r.files_after,
            inodes
        );
    }
    if let Some(p) = json {
        crate::write_results_json(p, "recovery", &r)?;
    }
    Ok(())
}
