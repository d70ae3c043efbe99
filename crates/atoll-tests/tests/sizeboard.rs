//! A file's size without a message (`atoll_msg::sizes`, client
//! `sizes.rs`): `lseek(fd, 0, SEEK_END)` of one process while other
//! processes append, write past the end, truncate, `fallocate` and
//! `O_TRUNC` the file sees every size change acknowledged before its
//! call, as on the host's tmpfs; and after the file's server is killed
//! and rebuilt, nothing its lost incarnation published is believed.

use std::path::Path;
use std::time::{Duration, Instant};

use atoll_tests::OutputBounded as _;
use atoll_tests::{compile_probe, output_within, run_in_atoll, Booted, RUN_LIMIT};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The probe on a host tmpfs directory.
fn on_tmpfs(bin: &Path, mode: &str) -> String {
    let shm = tempfile::tempdir_in("/dev/shm").expect("tmpfs directory");
    let arg = match mode {
        "race" => shm.path().to_path_buf(),
        _ => shm.path().join("f"),
    };
    let out = std::process::Command::new(bin)
        .arg(mode)
        .arg(arg)
        .output_bounded()
        .expect("run probe");
    text(&out.stdout)
}

/// Three files, each changed by a writer and asked its size by two
/// readers (nine processes on fewer cores), over three servers with the
/// files spread; then a parent truncating and its child asking in
/// lockstep. The readers' answers must be what tmpfs allows, and (but for
/// the first ask of each description) come from the board: the counts
/// `--stats` shows prove it was used. With `--without size-board` every
/// ask is a message and the answers are the same.
#[test]
fn seek_end_sees_every_size_change_acknowledged_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let bin = compile_probe(dir.path(), "sizeboard", include_str!("sizeboard/probe.c"));
    for mode in ["race", "lockstep"] {
        assert_eq!(
            on_tmpfs(&bin, mode),
            format!("{mode}: passed\n"),
            "control on tmpfs"
        );
    }
    let script = format!(
        "mkdir $ROOT/d && {b} race $ROOT/d && {b} lockstep $ROOT/d/l",
        b = bin.display()
    );
    let board: &[&str] = &["--stats", "--servers", "3", "--distribute", "all"];
    let without: &[&str] = &["--stats", "--servers", "3", "--without", "size-board"];
    for (opts, on) in [(board, true), (board, true), (without, false)] {
        let out = run_in_atoll(opts, &script);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(
            out.status.success() && stdout == "race: passed\nlockstep: passed\n",
            "in atoll {opts:?}:\n{stdout}\n{stderr}"
        );
        let all = format!("{stdout}{stderr}");
        let (hits, misses) = (
            atoll_tests::stats_counter(&all, "size_board.hits"),
            atoll_tests::stats_counter(&all, "size_board.misses"),
        );
        if on {
            assert!(
                hits > 1000 && misses < hits,
                "{opts:?}: {hits} hits, {misses} misses"
            );
        } else {
            assert_eq!((hits, misses), (0, 0), "{opts:?}");
        }
    }
}

/// The lockstep probe on a file whose server (1 of 2) is killed in the
/// 50th of its 200 truncates, after the truncate reached the journal and
/// before its reply (`ATOLL_FAULT_KILL`): the successor answers it, and
/// the child, whose description's slot the lost incarnation had written,
/// must see each size from then on (the old slot, refused for its
/// generation, would say the 49th).
#[test]
fn seek_end_answers_the_size_after_the_files_server_is_killed_and_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let bin = compile_probe(dir.path(), "sizeboard", include_str!("sizeboard/probe.c"));
    let inst = Booted::with_env(&["--servers", "2"], &[("ATOLL_FAULT_KILL", "1:SetAttr:50")]);
    // A name whose inode server 1 owns (its top byte), in a directory
    // spread over both servers.
    let setup = r#"
        mkdir "$ROOT/d" && setfattr -n user.atoll.distributed -v 1 "$ROOT/d" && cd "$ROOT/d" &&
        for i in $(seq 0 15); do : > "f$i"; done &&
        for i in $(seq 0 15); do [ $(( $(stat -c %i "f$i") >> 56 )) = 1 ] && echo "f$i"; done
    "#;
    let names = text(&output_within(inst.command(setup), RUN_LIMIT).stdout);
    let name = names.lines().next().expect("a name on server 1");
    let run = format!(r#"{} lockstep "$ROOT/d/{name}""#, bin.display());
    let out = output_within(inst.command(&run), RUN_LIMIT);
    assert_eq!(
        text(&out.stdout),
        "lockstep: passed\n",
        "{}",
        text(&out.stderr)
    );
    let started = Instant::now();
    while inst.status()["health"][1]["restarts"].as_u64().unwrap_or(0) < 1 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "server 1 was not killed and rebuilt"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
