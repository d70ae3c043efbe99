//! The peers' own benchmarks, run unmodified in the run directory: the
//! worker process starts the program with its own environment (an atoll
//! instance's, so the program runs under atoll, as `tar` does for
//! `extract`), reads the program's own output and reports the program's
//! metric as the run's throughput ([`WorkerReport::native`]).
//!
//! | workload | program | one process starts | metric |
//! |---|---|---|---|
//! | `dbench` | dbench (NetBench load `client.txt`) | `dbench -t SECS P` | MB/s |
//! | `fs_mark` | fs_mark | one fs_mark, P directories | files/s |
//! | `fio-randrw` | fio, psync, 4 KiB, randrw 50/50 | one fio, `--numjobs P` | IOPS |
//! | `fio-seq` | fio, psync, 1 MiB, write then read | one fio, `--numjobs P` | MiB/s |
//! | `postmark` | PostMark | one PostMark per process | transactions/s |
//! | `extract-debian` | tar of glibc-source's tarball | one tar per process | entries/s |
//!
//! fio runs without `--direct` (atoll, like tmpfs, has no O_DIRECT path:
//! every read and write goes through the shared buffer cache) and with
//! processes, not threads (`--thread` off), so each job is a client of its
//! own.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use super::{debian, peer_output, sub, Job, Role, Size, WorkerReport, Workload};
use crate::util::{count_entries, list_names, At, BenchError, Result};

/// Where Debian's dbench package puts its NetBench load file (and where
/// a build from source does).
pub const DBENCH_LOADFILES: [&str; 2] = [
    "/usr/share/dbench/client.txt",
    "/usr/local/share/client.txt",
];

pub fn dbench_loadfile() -> Option<&'static str> {
    DBENCH_LOADFILES
        .into_iter()
        .find(|p| Path::new(p).is_file())
}

/// dbench's run time in seconds (it is time-bound, not work-bound). Two
/// at least: dbench samples its throughput once a second and reports 0 MB/s
/// for a one-second run.
fn dbench_seconds(size: Size) -> u64 {
    [2, 2, 10, 60][size as usize]
}

/// fs_mark: files per directory per loop, and loops. 4 KiB files, no
/// sync (both file systems are memory file systems).
fn fs_mark_shape(size: Size) -> (u64, u64) {
    [(20, 1), (500, 1), (10_000, 4), (10_000, 5)][size as usize]
}

const FS_MARK_FILE_BYTES: u64 = 4096;

/// fio file size per job, MiB: (randrw, seq). Within the bench's 1 GiB
/// buffer cache at P = 2 for every size.
fn fio_mib(size: Size) -> (u64, u64) {
    [(1, 2), (4, 8), (64, 128), (128, 256)][size as usize]
}

/// PostMark per process: (files, transactions).
fn postmark_shape(size: Size) -> (u64, u64) {
    [(20, 50), (200, 2_000), (5_000, 100_000), (20_000, 400_000)][size as usize]
}

fn fs_mark_dir(job: &Job, i: usize) -> PathBuf {
    sub(&job.dir, &format!("fs{i}"))
}

pub fn setup(job: &Job) -> Result<()> {
    let mk = |p: PathBuf| std::fs::create_dir(&p).at("mkdir", &p);
    match job.workload {
        // fs_mark makes its directories itself; fio its files.
        Workload::Dbench | Workload::FsMark | Workload::FioRandrw | Workload::FioSeq => Ok(()),
        Workload::Postmark => {
            (0..job.nworkers).try_for_each(|i| mk(sub(&job.dir, &format!("pm{i}"))))
        }
        Workload::ExtractDebian => {
            (0..job.nworkers).try_for_each(|i| mk(sub(&job.dir, &format!("x{i}"))))
        }
        _ => unreachable!("peers::setup called for another workload"),
    }
}

/// A program's output as it arrived: the text, and when each chunk of it
/// came (end offset, time), to time phases the program announces.
struct Captured {
    stdout: String,
    arrivals: Vec<(usize, Instant)>,
}

impl Captured {
    /// When the byte at `offset` arrived.
    fn time_of(&self, offset: usize) -> Option<Instant> {
        self.arrivals
            .iter()
            .find(|(end, _)| *end > offset)
            .map(|(_, t)| *t)
    }
}

/// A failed program's stderr (else stdout) on one line: its first lines
/// (where programs say what is wrong before printing their usage) and its
/// last ones.
fn tail(stderr: &str, stdout: &str) -> String {
    let text = if stderr.trim().is_empty() {
        stdout
    } else {
        stderr
    };
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    if lines.len() <= 10 {
        return lines.join(" / ");
    }
    format!(
        "{} / … / {}",
        lines[..2].join(" / "),
        lines[lines.len() - 6..].join(" / ")
    )
}

/// Run `cmd` (the program `program`, maybe through a shell) with `stdin`
/// as its input; its stdout as it arrives. A non-zero exit is an error
/// carrying the ends of its output.
fn run_program(program: &str, mut cmd: Command, stdin: &str) -> Result<Captured> {
    let program = program.to_string();
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            if crate::util::is_not_found(&e) {
                BenchError::MissingTool(program.clone())
            } else {
                BenchError::Tool(format!("{program}: {e}"))
            }
        })?;
    let mut input = child.stdin.take().expect("piped stdin");
    let stdin = stdin.to_string();
    // A separate thread: a program may print before it reads everything.
    let feeder = std::thread::spawn(move || {
        let _ = input.write_all(stdin.as_bytes());
    });
    let mut err = child.stderr.take().expect("piped stderr");
    let errs = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err.read_to_end(&mut s);
        String::from_utf8_lossy(&s).into_owned()
    });
    let mut out = child.stdout.take().expect("piped stdout");
    let mut bytes = Vec::new();
    let mut arrivals = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match out.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                bytes.extend_from_slice(&buf[..n]);
                arrivals.push((bytes.len(), Instant::now()));
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(BenchError::Tool(format!("reading {program}'s output: {e}"))),
        }
    }
    let status = child
        .wait()
        .map_err(|e| BenchError::Tool(format!("{program}: {e}")))?;
    let _ = feeder.join();
    let stderr = errs.join().unwrap_or_default();
    let stdout = String::from_utf8_lossy(&bytes).into_owned();
    if !status.success() {
        return Err(BenchError::Tool(format!(
            "{program} failed ({status}): {}",
            tail(&stderr, &stdout)
        )));
    }
    Ok(Captured { stdout, arrivals })
}

fn fio(job: &Job, bs: &str, mib: u64, jobs: &[&str]) -> Command {
    let mut c = Command::new("fio");
    c.arg("--output-format=json")
        .arg("--group_reporting")
        .arg(format!("--directory={}", job.dir.display()))
        .arg("--ioengine=psync")
        .arg(format!("--bs={bs}"))
        .arg(format!("--size={mib}m"))
        .arg(format!("--numjobs={}", job.nworkers.max(1)))
        // Both phases of fio-seq use the same files (fio would otherwise
        // name them after each job).
        .arg(format!("--filename_format={}.$jobnum", job.workload.name()))
        .args(jobs);
    c
}

pub fn run(job: &Job, idx: usize) -> Result<WorkerReport> {
    let p = job.nworkers.max(1);
    let mut r = WorkerReport::new(Role::Worker, idx);
    let figures = match job.workload {
        Workload::Dbench => {
            let load = dbench_loadfile()
                .ok_or_else(|| BenchError::MissingTool("dbench's client.txt".into()))?;
            let mut c = Command::new("dbench");
            c.arg("-D")
                .arg(&job.dir)
                .arg("-t")
                .arg(dbench_seconds(job.size).to_string())
                .arg("-c")
                .arg(load)
                .arg(p.to_string());
            peer_output::dbench(&run_program("dbench", c, "")?.stdout)?
        }
        Workload::FsMark => {
            let (files, loops) = fs_mark_shape(job.size);
            // fs_mark refuses directory names of 40 bytes or more, so it
            // runs in the run directory with relative ones (a shell
            // changes directory: a program started inside the file system
            // under test, as every step here is).
            let mut c = Command::new("sh");
            c.arg("-c")
                .arg("cd \"$0\" && exec fs_mark \"$@\"")
                .arg(&job.dir);
            for i in 0..p {
                c.arg("-d").arg(format!("fs{i}"));
            }
            c.args(["-n", &files.to_string()])
                .args(["-s", &FS_MARK_FILE_BYTES.to_string()])
                .args(["-S", "0"])
                .args(["-L", &loops.to_string()])
                .args(["-l", "fs_mark.log"]);
            peer_output::fs_mark(&run_program("fs_mark", c, "")?.stdout)?
        }
        Workload::FioRandrw => {
            let c = fio(
                job,
                "4k",
                fio_mib(job.size).0,
                &["--name=randrw", "--rw=randrw", "--rwmixread=50"],
            );
            peer_output::fio_iops(&run_program("fio", c, "")?.stdout)?
        }
        Workload::FioSeq => {
            let c = fio(
                job,
                "1m",
                fio_mib(job.size).1,
                &[
                    "--name=seq-write",
                    "--rw=write",
                    "--name=seq-read",
                    "--stonewall",
                    "--rw=read",
                ],
            );
            peer_output::fio_bandwidth(&run_program("fio", c, "")?.stdout)?
        }
        Workload::Postmark => {
            let (figures, printed) = postmark(job, idx)?;
            r.bump("postmark_printed_tps", printed.round() as u64);
            figures
        }
        Workload::ExtractDebian => {
            let tar = job
                .inputs
                .debian_tar
                .as_ref()
                .ok_or_else(|| BenchError::Invalid("no Debian tarball prepared".into()))?;
            let mut c = Command::new("tar");
            c.arg("-xf")
                .arg(tar)
                .arg("-C")
                .arg(sub(&job.dir, &format!("x{idx}")))
                .args(&job.inputs.debian_members);
            run_program("tar", c, "")?;
            // tar has no metric of its own: entries per second of the
            // run, as `extract` (the harness divides by the run's time).
            r.ops = job.inputs.debian_entries;
            return Ok(r);
        }
        _ => unreachable!("peers::run called for another workload"),
    };
    r.ops = figures.ops;
    r.native = Some(figures.native);
    Ok(r)
}

/// One PostMark run in `pm<idx>`. PostMark's own clock counts whole
/// seconds, so its transaction phase is timed here, from its announcement
/// (`Performing transactions`) to its `Done`, which PostMark flushes as
/// they happen. Returns the figures and PostMark's own printed rate (kept
/// in the detail as `postmark_printed_tps` for reference).
fn postmark(job: &Job, idx: usize) -> Result<(peer_output::PeerFigures, f64)> {
    let (files, transactions) = postmark_shape(job.size);
    let location = sub(&job.dir, &format!("pm{idx}"));
    let config = format!(
        "set location {}\nset number {files}\nset transactions {transactions}\n\
         set size 512 10000\nset subdirectories 10\nrun\nquit\n",
        location.display()
    );
    let out = run_program("postmark", Command::new("postmark"), &config)?;
    let phase = peer_output::postmark_phase(&out.stdout)
        .and_then(|(a, b)| Some((out.time_of(a.saturating_sub(1))?, out.time_of(b)?)));
    let printed = peer_output::postmark_printed_rate(&out.stdout)?;
    let native = match phase {
        Some((start, end)) if end > start => {
            transactions as f64 / (end - start).as_secs_f64().max(1e-9)
        }
        _ => printed,
    };
    Ok((
        peer_output::PeerFigures {
            native,
            ops: transactions,
        },
        printed,
    ))
}

/// Files of `len` bytes named `prefix.0` … `prefix.<n-1>` in `dir`.
fn check_files(dir: &Path, prefix: &str, n: usize, len: u64) -> Result<()> {
    for j in 0..n {
        let f = dir.join(format!("{prefix}.{j}"));
        let got = std::fs::metadata(&f).at("stat", &f)?.len();
        if got != len {
            return Err(BenchError::Check(format!(
                "{} is {got} bytes, fio was asked for {len}",
                f.display()
            )));
        }
    }
    Ok(())
}

/// What each program must have left in the run directory.
pub fn check(job: &Job) -> Result<()> {
    let p = job.nworkers.max(1);
    let mib = 1024 * 1024;
    match job.workload {
        // dbench removes its files at the end and leaves one directory
        // tree per client.
        Workload::Dbench => {
            let clients = sub(&job.dir, "clients");
            let want: Vec<String> = (0..p).map(|i| format!("client{i}")).collect();
            let mut got = list_names(&clients)?;
            got.sort_by_key(|n| n.trim_start_matches("client").parse::<usize>().ok());
            if got != want {
                return Err(BenchError::Check(format!(
                    "dbench left clients {got:?}, expected {want:?}"
                )));
            }
            Ok(())
        }
        // fs_mark keeps every file it wrote: files × loops per directory.
        Workload::FsMark => {
            let (files, loops) = fs_mark_shape(job.size);
            for i in 0..p {
                let d = fs_mark_dir(job, i);
                let n = count_entries(&d)?;
                if n != files * loops {
                    return Err(BenchError::Check(format!(
                        "{} holds {n} files, fs_mark wrote {}",
                        d.display(),
                        files * loops
                    )));
                }
            }
            Ok(())
        }
        Workload::FioRandrw => check_files(&job.dir, "fio-randrw", p, fio_mib(job.size).0 * mib),
        Workload::FioSeq => check_files(&job.dir, "fio-seq", p, fio_mib(job.size).1 * mib),
        // PostMark deletes everything it made.
        Workload::Postmark => {
            for i in 0..p {
                let d = sub(&job.dir, &format!("pm{i}"));
                let left = list_names(&d)?;
                if !left.is_empty() {
                    return Err(BenchError::Check(format!(
                        "postmark left {} entries in {} (first {:?})",
                        left.len(),
                        d.display(),
                        left[0]
                    )));
                }
            }
            Ok(())
        }
        Workload::ExtractDebian => {
            for i in 0..p {
                let d = sub(&job.dir, &format!("x{i}"));
                let n = count_entries(&d)?;
                if n != job.inputs.debian_entries {
                    return Err(BenchError::Check(format!(
                        "{} holds {n} entries, the archive has {}",
                        d.display(),
                        job.inputs.debian_entries
                    )));
                }
            }
            Ok(())
        }
        _ => unreachable!("peers::check called for another workload"),
    }
}

/// Fetch (or find cached) the Debian tarball and fill the
/// `extract-debian` fields of `inputs` for `size`. Returns what will be
/// extracted, for the log; an error is the reason to skip the workload.
pub fn prepare_debian(inputs: &mut super::Inputs, size: Size) -> Result<String> {
    let d = debian::fetch_debian_tarball(&debian::cache_dir())?;
    let members = debian::members(&d.top, size);
    inputs.debian_entries = debian::entries(&d.tar, &members)?;
    let what = format!(
        "{} {} ({}{}), {} entries",
        d.package,
        d.version,
        d.top,
        if members.is_empty() {
            String::new()
        } else {
            format!(": {}", members.join(" "))
        },
        inputs.debian_entries
    );
    inputs.debian_members = members;
    inputs.debian_tar = Some(d.tar);
    Ok(what)
}

#[cfg(test)]
mod tests {
    use super::super::testutil::run_tiny;
    use super::*;
    use crate::util::have_tool;

    /// Each program, run at the tiny size on the host's file system,
    /// passes its check and reports its own metric.
    fn runs(w: Workload, p: usize) -> Vec<WorkerReport> {
        if let Some(why) = w.unavailable() {
            eprintln!("skipped {}: {why}", w.name());
            return vec![];
        }
        let (_t, _job, reports) = run_tiny(w, p);
        let native: f64 = reports.iter().filter_map(|r| r.native).sum();
        assert!(native > 0.0, "{}: no metric in {reports:?}", w.name());
        assert!(reports.iter().all(|r| r.ops > 0));
        reports
    }

    #[test]
    fn dbench_runs_and_reports_mb_per_s() {
        runs(Workload::Dbench, 2);
    }

    #[test]
    fn fs_mark_runs_and_reports_files_per_s() {
        runs(Workload::FsMark, 2);
    }

    #[test]
    fn fio_randrw_runs_and_reports_iops() {
        runs(Workload::FioRandrw, 2);
    }

    #[test]
    fn fio_seq_runs_and_reports_bandwidth() {
        runs(Workload::FioSeq, 2);
    }

    #[test]
    fn postmark_runs_and_reports_transactions_per_s() {
        for r in runs(Workload::Postmark, 2) {
            // PostMark's own whole-second figure, kept for reference.
            assert!(r.get("postmark_printed_tps") > 0, "{r:?}");
        }
    }

    #[test]
    fn an_error_keeps_the_first_and_the_last_lines_of_the_output() {
        let long: Vec<String> = (0..20).map(|i| format!("line {i}")).collect();
        let t = tail(&long.join("\n"), "ignored");
        assert!(t.starts_with("line 0 / line 1 / … / line 14"), "{t}");
        assert!(t.ends_with("line 19"), "{t}");
        assert_eq!(tail("  \n", "only stdout\n\n"), "only stdout");
    }

    #[test]
    fn failing_program_is_an_error_with_its_stderr_tail() {
        if !have_tool("fio") {
            eprintln!("skipped: fio not installed");
            return;
        }
        let mut c = Command::new("fio");
        c.arg("--no-such-option");
        let e = run_program("fio", c, "")
            .err()
            .expect("fio fails")
            .to_string();
        assert!(e.starts_with("fio failed"), "{e}");
        assert!(e.contains("no-such-option"), "{e}");
    }
}
