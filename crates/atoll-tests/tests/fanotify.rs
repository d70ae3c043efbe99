//! fanotify on atoll paths: a C probe marks a directory (and, in one
//! mode, the whole mount) while a child process creates, writes, chmods,
//! renames and deletes in it; the events the parent then reads, their
//! descriptors and their file-handle and name records match what Linux
//! gives on a tmpfs directory.

use atoll_tests::OutputBounded as _;
use std::path::Path;
use std::process::Command;

use atoll_tests::{compile_probe, run_in_atoll, MOUNT};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).to_string()
}

/// Run probe `bin` on a tmpfs directory with `args` (`{dir}` in one names
/// that directory), check it succeeds and prints `marker`, then run it in
/// atoll in each of `shapes` (`{dir}` naming the mount) and compare.
fn assert_probe_as_on_tmpfs(bin: &Path, args: &[&str], marker: &str, shapes: &[&[&str]]) {
    let shm = tempfile::tempdir_in("/dev/shm").expect("tmpfs directory");
    let on = |dir: &str| -> Vec<String> { args.iter().map(|a| a.replace("{dir}", dir)).collect() };
    let host = Command::new(bin)
        .args(on(&shm.path().display().to_string()))
        .output_bounded()
        .expect("probe");
    let want = text(&host.stdout);
    assert!(
        host.status.success() && want.contains(marker),
        "{want}{}",
        text(&host.stderr)
    );
    let line = std::iter::once(bin.display().to_string())
        .chain(on(MOUNT))
        .collect::<Vec<_>>()
        .join(" ");
    for shape in shapes {
        let out = run_in_atoll(shape, &line);
        assert_eq!(text(&out.stdout), want, "{shape:?}: {}", text(&out.stderr));
    }
}

/// Descriptor mode, `FAN_REPORT_FID`, `FAN_REPORT_DFID_NAME` (alone and
/// with `FAN_REPORT_FID`) on a directory mark, and a filesystem mark: the
/// same events (merged as Linux merges them), descriptors and records as
/// on tmpfs, with entries and inodes spread over two servers.
#[test]
fn probe_matches_tmpfs() {
    let dir = tempfile::tempdir().unwrap();
    let bin = compile_probe(dir.path(), "probe", include_str!("fanotify/probe.c"));
    for mode in ["fd", "fid", "dfid_name", "fid_dfid_name", "mount"] {
        let shm = tempfile::tempdir_in("/dev/shm").expect("tmpfs directory");
        let host = Command::new(&bin)
            .args([mode, &format!("{}/w", shm.path().display())])
            .output_bounded()
            .expect("probe");
        let want = text(&host.stdout);
        assert!(
            host.status.success(),
            "{mode}: {want}{}",
            text(&host.stderr)
        );
        assert!(want.contains("CLOSE_WRITE"), "{mode}: {want}");
        let out = run_in_atoll(
            &["--servers", "2"],
            &format!("{} {mode} {MOUNT}/w", bin.display()),
        );
        assert_eq!(text(&out.stdout), want, "{mode}: {}", text(&out.stderr));
    }
}

/// `FAN_OPEN`, `FAN_ACCESS`, `FAN_CLOSE_NOWRITE` and `FAN_OPEN_EXEC` of a
/// directory mark while another process reads a file, lists the directory
/// and runs a program in it: the same merged events and descriptors as on
/// tmpfs, and the reader's reads through those descriptors make none.
#[test]
fn opens_reads_closes_and_execs_match_tmpfs() {
    let dir = tempfile::tempdir().unwrap();
    let bin = compile_probe(dir.path(), "access", include_str!("fanotify/access.c"));
    assert_probe_as_on_tmpfs(
        &bin,
        &["{dir}/w", "/bin/true"],
        "OPEN_EXEC /prog",
        &[
            &["--servers", "2"],
            &["--servers", "3", "--distribute", "all"],
        ],
    );
}

/// A group and its marks belong to the process, so they outlive
/// `execve` when the group's descriptor does: the new image reads the
/// changes it makes as events of the marks the old one made, in
/// descriptor mode and with names (`FAN_REPORT_DFID_NAME`), as on tmpfs.
#[test]
fn groups_and_marks_outlive_exec_as_on_tmpfs() {
    let dir = tempfile::tempdir().unwrap();
    let bin = compile_probe(dir.path(), "exec", include_str!("fanotify/exec.c"));
    assert_probe_as_on_tmpfs(
        &bin,
        &["{dir}/w"],
        "CREATE|DELETE|ONDIR d",
        &[
            &["--servers", "2"],
            &["--servers", "3", "--distribute", "all"],
        ],
    );
}

/// A group's queue holds `max_queued_events` events, then one
/// `FAN_Q_OVERFLOW`; a `FAN_UNLIMITED_QUEUE` group's holds them all: the
/// counts tmpfs gives, with entries spread over three servers (each
/// writes into the rings, which grow).
#[test]
fn queue_sizes_match_tmpfs() {
    let dir = tempfile::tempdir().unwrap();
    let bin = compile_probe(dir.path(), "overflow", include_str!("fanotify/overflow.c"));
    assert_probe_as_on_tmpfs(
        &bin,
        &["{dir}"],
        "overflows 1",
        &[&["--servers", "3", "--distribute", "all"]],
    );
}

/// A child killed with a file open for writing: the `FAN_CLOSE_WRITE`
/// its death makes carries its pid, as on tmpfs (the servers close what a
/// dead session held in its process's name).
#[test]
fn a_close_at_death_names_the_process() {
    let dir = tempfile::tempdir().unwrap();
    let bin = compile_probe(dir.path(), "death", include_str!("fanotify/death.c"));
    assert_probe_as_on_tmpfs(
        &bin,
        &["{dir}"],
        "pid is the child's: 1",
        &[&["--servers", "2"], &[]],
    );
}
