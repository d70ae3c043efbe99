//! stress-ng's file-system stressors that work on names (directories,
//! links, renames, lookups, creation, attributes), each with more workers
//! than the machine has cores, in the mount on three servers and in a
//! tmpfs directory: the runs must end alike (exit status, every `fail`
//! and `error` line, nothing left in the temporary directory).
//!
//! stress-ng derives its temporary names from `statvfs`'s `f_namemax`
//! at every name it builds and checks its own cleanup (`rmdir` of each
//! worker's directory): a `statvfs` that came back without its buffer
//! filled made it hash a name (a file created or removed under the wrong
//! directory) and report `rmdir ... Directory not empty`.

use atoll_tests::OutputBounded as _;
use std::process::Command;

use atoll_tests::{compile_probe, require, run_in_atoll};

/// The stressors (stress-ng 0.15) that create, rename, link, list and
/// remove names, or change what a name's inode holds (`dnotify` waits
/// for the signal each of its changes must bring).
const STRESSORS: &[&str] = &[
    "dir", "dirdeep", "dirmany", "link", "symlink", "dentry", "rename", "chdir", "getdent", "open",
    "mknod", "utime", "xattr", "fstat", "filename", "dnotify",
];

/// Seconds each run lasts (stress-ng's `--timeout`).
const SECONDS: u32 = 4;

/// The script: every stressor at once with `workers` workers each in
/// `$ROOT/t`, then its exit status and what it left there.
fn script(workers: usize) -> String {
    let each: String = STRESSORS
        .iter()
        .map(|s| format!(" --{s} {workers}"))
        .collect();
    format!(
        r#"
        mkdir "$ROOT/t" || exit 1
        stress-ng --temp-path "$ROOT/t" --fstat-dir "$ROOT/t" --timeout {SECONDS} {each} 2>&1
        echo "exit status $?"
        echo "left: $(ls -A "$ROOT/t")"
        "#
    )
}

/// What a run must agree on: its `fail`/`error` lines (process ids and
/// the root masked), its exit status and what it left.
fn verdict(out: &[u8], root: &str) -> Vec<String> {
    let text = String::from_utf8_lossy(out).replace(root, "$ROOT");
    let mask_numbers = |l: &str| -> String {
        let mut o = String::new();
        let mut in_num = false;
        for ch in l.chars() {
            if ch.is_ascii_digit() {
                if !in_num {
                    o.push('N');
                }
                in_num = true;
            } else {
                in_num = false;
                o.push(ch);
            }
        }
        o
    };
    text.lines()
        .filter(|l| {
            l.contains("fail:")
                || l.contains("error:")
                || l.starts_with("exit status")
                || l.starts_with("left:")
        })
        .map(|l| {
            if l.starts_with("exit status") || l.starts_with("left:") {
                l.to_string()
            } else {
                mask_numbers(l)
            }
        })
        .collect()
}

/// More workers per stressor than the machine has cores.
fn workers() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get()) + 1
}

fn on_tmpfs(script: &str) -> Vec<String> {
    let shm = tempfile::tempdir_in("/dev/shm").expect("tmpfs directory");
    let out = Command::new("bash")
        .args(["-c", script])
        .env("ROOT", shm.path())
        .env("LC_ALL", "C")
        .output_bounded()
        .expect("bash");
    verdict(&out.stdout, &shm.path().to_string_lossy())
}

fn same_as_tmpfs(opts: &[&str]) {
    require("stress-ng");
    let script = script(workers());
    let want = on_tmpfs(&script);
    assert!(
        want.iter().any(|l| l == "exit status 0"),
        "the tmpfs run: {want:?}"
    );
    let out = run_in_atoll(opts, &script);
    let got = verdict(&out.stdout, atoll_tests::MOUNT);
    assert_eq!(
        got,
        want,
        "{opts:?}: atoll stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Three servers, every directory under the mount distributed over them
/// (each worker's names spread, its `rmdir` the three-phase protocol).
#[test]
fn name_stressors_on_three_distributed_servers_end_as_on_tmpfs() {
    same_as_tmpfs(&["--servers", "3", "--distribute", "all", "--memory", "1G"]);
}

/// Three servers, directories centralized (each one's names on one
/// server, renames between two directories of one server).
#[test]
fn name_stressors_on_three_servers_end_as_on_tmpfs() {
    same_as_tmpfs(&["--servers", "3", "--memory", "1G"]);
}

/// The renames stress-ng's rename stressor makes to probe error answers
/// (flags Linux refuses before any lookup, a descriptor that is not open
/// or not a directory on either side, an exchange of a name with itself
/// or with a missing one) and renames and exchanges between two
/// directories: every answer as on tmpfs, on one server and with the
/// directories' names on different servers. A directory descriptor that
/// was not open answered `EXDEV` (the other path was atoll's) instead
/// of Linux's `EBADF`.
#[test]
fn rename_error_probes_answer_as_on_tmpfs() {
    let dir = tempfile::tempdir().unwrap();
    let bin = compile_probe(dir.path(), "renames", include_str!("stress/renames.c"));
    let shm = tempfile::tempdir_in("/dev/shm").expect("tmpfs directory");
    let host = Command::new(&bin)
        .arg(shm.path())
        .output_bounded()
        .expect("probe");
    let want = String::from_utf8_lossy(&host.stdout).to_string();
    assert!(
        host.status.success() && want.contains("rmdir(\"d1\") = 0"),
        "{want}"
    );
    let script = format!("mkdir \"$ROOT/w\" && {} \"$ROOT/w\"", bin.display());
    for opts in [
        &["--servers", "3"][..],
        &["--servers", "3", "--distribute", "all"][..],
    ] {
        let out = run_in_atoll(opts, &script);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            want,
            "{opts:?} stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
