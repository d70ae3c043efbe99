//! Randomized file data: the `fsx` program of this crate (random writes,
//! holes, reads, truncates, fallocate, shared mappings, appends, reopens,
//! syncs, checked against a model after every step) runs 100,000
//! operations per configuration, on a host tmpfs directory as the control
//! and inside atoll with one server, three servers with distributed
//! directories, incoherent memory, four processes at once, and a shared
//! mapping kept across steps on two servers.
//!
//! Seeds are fixed so that CI is reproducible; `FSX_SEED=N` runs every
//! configuration with seed `N` instead (to explore). A failure prints the
//! seed, the first differing offset and the last operations; rerun with
//! `target/release/fsx --seed S --trace …` to see every step.

use atoll_tests::OutputBounded as _;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use atoll_tests::{output_within, run_in_atoll, RUN_LIMIT};

const FSX: &str = env!("CARGO_BIN_EXE_fsx");
/// Operations per configuration (split among the processes when there are
/// several, so each configuration costs about the same).
const OPS: u32 = 100_000;

fn seed(default: u64) -> u64 {
    std::env::var("FSX_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// One `fsx` command line (shell syntax) on `file`.
fn fsx(seed: u64, procs: u32, extra: &str, file: &str) -> String {
    format!(
        "{FSX} --seed {seed} --ops {} --procs {procs} {extra} {file}",
        OPS / procs
    )
}

fn assert_passed(what: &str, out: &Output, runs: usize) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.matches("fsx: passed").count() == runs,
        "fsx failed {what} ({:?}):\n--- stdout:\n{stdout}\n--- stderr:\n{stderr}",
        out.status
    );
    eprintln!("{what}:\n{stdout}");
}

/// Run fsx command lines, one after the other, under `atoll run opts`.
fn in_atoll(opts: &[&str], lines: &[String]) {
    let script = format!("set -e\n{}", lines.join("\n"));
    let out = run_in_atoll(opts, &script);
    assert_passed(&format!("in atoll {opts:?}"), &out, lines.len());
}

/// The control: the same runs on a host tmpfs directory (`/dev/shm`), where
/// Linux's own file system must pass them too.
#[test]
fn fsx_passes_on_host_tmpfs() {
    let base = Path::new("/dev/shm");
    let dir = if base.is_dir() {
        tempfile::tempdir_in(base)
    } else {
        tempfile::tempdir()
    }
    .expect("tempdir");
    let root = dir.path().display();
    let lines = [
        fsx(seed(1), 1, "", &format!("{root}/one")),
        fsx(seed(4), 4, "", &format!("{root}/own")),
        fsx(seed(5), 4, "--mode append", &format!("{root}/shared")),
        fsx(
            seed(7),
            4,
            "--mode append --shared-fd",
            &format!("{root}/shared-fd"),
        ),
        fsx(seed(9), 1, "--keep-map", &format!("{root}/kept")),
    ];
    let mut cmd = Command::new("bash");
    cmd.args(["-c", &format!("set -e\n{}", lines.join("\n"))])
        .stdin(Stdio::null());
    let out = output_within(cmd, RUN_LIMIT);
    assert_passed("on host tmpfs", &out, lines.len());
}

#[test]
fn fsx_passes_with_one_server() {
    in_atoll(&["--servers", "1"], &[fsx(seed(1), 1, "", "$ROOT/one")]);
}

#[test]
fn fsx_passes_with_three_servers_and_distributed_directories() {
    in_atoll(
        &["--servers", "3", "--distribute", "all"],
        &[format!(
            "mkdir $ROOT/d && {}",
            fsx(seed(2), 1, "", "$ROOT/d/one")
        )],
    );
}

/// Incoherent memory promises close-to-open consistency and does not
/// emulate shared mappings, so mappings are left out; each process reads
/// only what it wrote itself, which it must always see. Seed 1 found
/// private block copies surviving a truncate (stale bytes after extending
/// the file again, and in a freed block the inode reused).
#[test]
fn fsx_passes_on_incoherent_memory() {
    in_atoll(
        &["--servers", "2", "--incoherent"],
        &[
            fsx(seed(1), 1, "--no-mmap", "$ROOT/one"),
            fsx(seed(6), 4, "--mode append", "$ROOT/shared"),
            fsx(seed(8), 4, "--mode append --shared-fd", "$ROOT/shared-fd"),
        ],
    );
}

/// Four processes at once on three servers: each on a file of its own,
/// then all appending records to one `O_APPEND` file, through
/// descriptions of their own and through one they share.
#[test]
fn fsx_passes_with_four_processes_on_three_servers() {
    in_atoll(
        &["--servers", "3"],
        &[
            fsx(seed(4), 4, "", "$ROOT/own"),
            fsx(seed(5), 4, "--mode append", "$ROOT/shared"),
            fsx(seed(7), 4, "--mode append --shared-fd", "$ROOT/shared-fd"),
        ],
    );
}

/// A shared mapping kept while the file changes underneath must show what
/// `read` shows, as Linux's page cache does: after a truncate or hole punch
/// (the blocks stay at their offsets, zeroed, for the mapping's sake), and
/// where a page was a hole or past the end when mapped and the file later
/// wrote there (the mapping got the file's own blocks for it); see server
/// `fs/retain.rs`. With two servers, in a directory of its own.
#[test]
fn fsx_kept_mappings_follow_the_file() {
    let out = run_in_atoll(
        &["--servers", "2"],
        &format!(
            "mkdir $ROOT/d && {}",
            fsx(seed(9), 1, "--keep-map", "$ROOT/d/kept")
        ),
    );
    assert_passed("in atoll with a shared mapping kept across steps", &out, 1);
}

/// A process appends records while another reads the whole file again and
/// again: every byte a read returns was written (Linux raises the size
/// only after the bytes are in). atoll hands out blocks before the writer
/// copies into them, so reads of the new end wait for the writer's
/// `WriteDone` (server `fs/inflight.rs`); without that, about one read in
/// four saw zeros here.
const APPEND_RACE: &str = r#"
python3 - "$1" <<'PY'
import os, sys
p = sys.argv[1]
fd = os.open(p, os.O_CREAT | os.O_TRUNC | os.O_WRONLY, 0o644)
os.close(fd)
pid = os.fork()
if pid == 0:
    fd = os.open(p, os.O_WRONLY | os.O_APPEND)
    for _ in range(3000):
        os.write(fd, b"r" * 1500)  # records straddle block boundaries
    os._exit(0)
fd = os.open(p, os.O_RDONLY)
reads = zeros = 0
while True:
    finished = os.waitpid(pid, os.WNOHANG)[0] == pid
    data = os.pread(fd, 1 << 24, 0)
    reads += 1
    zeros += b"\0" in data
    if finished:
        break
print(f"append race: {reads} reads, {zeros} with zeros, {len(data)} bytes")
sys.exit(1 if zeros or len(data) != 4500000 else 0)
PY
"#;

#[test]
fn reads_beside_an_extending_writer_never_see_unwritten_bytes() {
    atoll_tests::require("python3");
    let host = Command::new("bash")
        .args(["-c", APPEND_RACE, "race", "/dev/shm/atoll-append-race"])
        .output_bounded()
        .expect("bash");
    let _ = std::fs::remove_file("/dev/shm/atoll-append-race");
    assert!(host.status.success(), "control on the host: {host:?}");
    for opts in [&["--servers", "2"][..], &["--servers", "3"]] {
        let script = format!("set -- $ROOT/race\n{APPEND_RACE}");
        let out = run_in_atoll(opts, &script);
        assert!(
            out.status.success(),
            "{opts:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
