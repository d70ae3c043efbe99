//! The data path of small reads and writes (`client/src/file/rw.rs`,
//! server `fs/data.rs`): what any faster path must keep exactly right.
//! Readers racing truncates, extensions and rewrites of their file while
//! other files reuse its freed blocks; the timestamps reads and writes
//! move (relatime, as the host's tmpfs); the events a watched file
//! reports; the file size limit a process sets itself. Each probe's
//! transcript on a host tmpfs is the reference, under several servers and
//! entries spread over three.

use atoll_tests::OutputBounded as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use atoll_tests::{compile_probe, require, run_in_atoll};

/// Instance shapes: two servers (the file on its directory's server),
/// three with every directory's entries spread (files anywhere).
const SHAPES: [&[&str]; 2] = [
    &["--servers", "2"],
    &["--servers", "3", "--distribute", "all"],
];

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn probe(dir: &Path, name: &str, src: &str) -> PathBuf {
    compile_probe(dir, name, src)
}

/// The probe on a host tmpfs directory: `bin DIR` (`file`: `bin DIR/f`).
fn on_tmpfs(bin: &Path, file: bool) -> Output {
    let shm = tempfile::tempdir_in("/dev/shm").expect("tmpfs directory");
    let arg = if file {
        shm.path().join("f")
    } else {
        shm.path().to_path_buf()
    };
    Command::new(bin)
        .arg(arg)
        .output_bounded()
        .expect("run probe")
}

/// The probe inside atoll, in a fresh directory (spread with
/// `--distribute all`).
fn in_atoll(opts: &[&str], bin: &Path, file: bool) -> Output {
    let arg = if file { "$ROOT/d/f" } else { "$ROOT/d" };
    run_in_atoll(opts, &format!("mkdir $ROOT/d && {} {arg}", bin.display()))
}

/// The transcript on tmpfs, and the same in every shape (plus `extra`).
fn matches_tmpfs(name: &str, src: &str, extra: &[&[&str]]) {
    let dir = tempfile::tempdir().unwrap();
    let bin = probe(dir.path(), name, src);
    let host = on_tmpfs(&bin, true);
    let want = text(&host.stdout);
    assert!(host.status.success(), "{name} on tmpfs: {want}");
    for opts in SHAPES.iter().chain(extra) {
        let out = in_atoll(opts, &bin, true);
        assert_eq!(
            text(&out.stdout),
            want,
            "{name} in atoll {opts:?} (stderr: {})",
            text(&out.stderr)
        );
        assert!(out.status.success(), "{name} in atoll {opts:?}");
    }
}

/// Three readers `pread` random ranges of a file while a writer rewrites
/// it, truncates it, extends it with a hole and truncates it to nothing,
/// and another process creates, fills and removes other files (their
/// blocks freed and reused): five processes on fewer cores. Every byte a
/// reader gets must be the file's (a letter, or a zero of a hole), never
/// another file's.
#[test]
fn readers_racing_truncates_and_reused_blocks_get_only_the_files_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let bin = probe(dir.path(), "race", include_str!("datapath/race.c"));
    let host = on_tmpfs(&bin, false);
    assert!(
        host.status.success() && text(&host.stdout).contains("race: passed"),
        "control on tmpfs: {}",
        text(&host.stdout)
    );
    for opts in SHAPES {
        for _ in 0..3 {
            let out = in_atoll(opts, &bin, false);
            assert!(
                out.status.success() && text(&out.stdout).contains("race: passed"),
                "in atoll {opts:?}:\n{}\n{}",
                text(&out.stdout),
                text(&out.stderr)
            );
        }
    }
}

/// atime, mtime and ctime after each kind of read and write, relatime as
/// on the host's tmpfs: a read moves atime when it is not newer than
/// mtime, also a read that returns nothing (of no bytes, at or past the
/// end), which atoll's reads did not (they sent no request, or the server
/// moved atime only for bytes read). Also in a copy island, whose bytes
/// travel in messages.
#[test]
fn reads_and_writes_move_timestamps_as_on_tmpfs() {
    matches_tmpfs(
        "stamps",
        include_str!("datapath/stamps.c"),
        &[&["--island", "copy"]],
    );
}

/// A watched file reports `IN_MODIFY` for each write and `IN_ACCESS` for
/// each read that moved bytes, none for calls that moved none.
#[test]
fn watched_file_reports_each_read_and_write() {
    matches_tmpfs("watch", include_str!("datapath/watch.c"), &[]);
}

/// A limit the process lowers (`setrlimit`), raises (`prlimit`), a fork
/// child's own and a vfork child's (which must not leak into its
/// parent's) apply to the next write exactly as on tmpfs.
#[test]
fn own_file_size_limit_changes_apply_to_the_next_write() {
    matches_tmpfs("fsize", include_str!("datapath/fsize.c"), &[&[]]);
}

/// The client keeps the process's `RLIMIT_FSIZE` instead of asking the
/// kernel at every write: 200 writes make a handful of `prlimit64` calls
/// (the loader's and the client's start ask for other limits), where
/// there was one more per write.
#[test]
fn file_size_limit_is_not_asked_at_every_write() {
    require("strace");
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace");
    let out = run_in_atoll(
        &[],
        &format!(
            "strace -f -qq -e trace=prlimit64 -o {} \
             dd if=/dev/zero of=$ROOT/f bs=512 count=200 status=none && stat -c %s $ROOT/f",
            trace.display()
        ),
    );
    assert_eq!(text(&out.stdout).trim(), "102400", "{}", text(&out.stderr));
    let calls = std::fs::read_to_string(&trace)
        .expect("strace output")
        .lines()
        .filter(|l| l.contains("prlimit64("))
        .count();
    assert!(calls < 20, "{calls} prlimit64 calls for 200 writes");
}

/// `truncate`, `ftruncate` and `fallocate` (also with
/// `FALLOC_FL_KEEP_SIZE`) that would grow a file past the process's file
/// size limit fail with `EFBIG` and raise `SIGXFSZ`, as on tmpfs; inside
/// the file's size, or punching a hole, they do not.
#[test]
fn growing_a_file_past_its_size_limit_fails_as_on_tmpfs() {
    matches_tmpfs("growth", include_str!("datapath/growth.c"), &[]);
}
