//! Reads without a message (client `lease.rs`, server `fs/leases.rs`,
//! `atoll_msg::lease`): a read of blocks a description learnt from an
//! earlier `Read` reply is copied from the buffer cache while the file's
//! server still publishes the same data version. These tests race such
//! reads against every change of the file, compare the atime and
//! `inotify` events with tmpfs's, and kill the file's server under them.

use std::path::Path;
use std::time::{Duration, Instant};

use atoll_tests::OutputBounded as _;
use atoll_tests::{compile_probe, output_within, run_in_atoll, Booted, RUN_LIMIT};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `bin ARGS… PATH` on a host tmpfs directory (`file`: `PATH` is a file
/// in it): its standard output.
fn on_tmpfs(bin: &Path, args: &[&str], file: bool) -> String {
    let shm = tempfile::tempdir_in("/dev/shm").expect("tmpfs directory");
    let at = match file {
        true => shm.path().join("f"),
        false => shm.path().to_path_buf(),
    };
    let out = std::process::Command::new(bin)
        .args(args)
        .arg(at)
        .output_bounded()
        .expect("run probe");
    text(&out.stdout)
}

/// Readers `pread` blocks of three files, each several times in a row,
/// while two writers overwrite, truncate, extend, punch, rename over and
/// unlink and recreate them and a fourth process reuses freed blocks for
/// other files (twelve processes on fewer cores): no reader gets a byte
/// of another file. Then a parent rewrites and truncates a file step by
/// step while its child, whose reads leave the atime alone (`O_NOATIME`,
/// so only the data version can send them to the server), must see each
/// step exactly. Over two servers and over three with the files spread;
/// the counters prove the reads were served without a message, and with
/// `--without read-lease` none is and the answers are the same.
#[test]
fn reads_without_a_message_see_every_change_of_their_file() {
    let dir = tempfile::tempdir().unwrap();
    let bin = compile_probe(dir.path(), "lease", include_str!("lease/probe.c"));
    assert_eq!(on_tmpfs(&bin, &["race"], false), "race: passed\n");
    assert_eq!(on_tmpfs(&bin, &["lockstep"], true), "lockstep: passed\n");
    let script = format!(
        "mkdir $ROOT/d && {b} race $ROOT/d && {b} lockstep $ROOT/l",
        b = bin.display()
    );
    let two: &[&str] = &["--stats", "--servers", "2"];
    let spread: &[&str] = &["--stats", "--servers", "3", "--distribute", "all"];
    let without: &[&str] = &["--stats", "--servers", "2", "--without", "read-lease"];
    for (opts, on) in [(two, true), (spread, true), (without, false)] {
        let out = run_in_atoll(opts, &script);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(
            out.status.success() && stdout == "race: passed\nlockstep: passed\n",
            "in atoll {opts:?}:\n{stdout}\n{stderr}"
        );
        let all = format!("{stdout}{stderr}");
        let hits = atoll_tests::stats_counter(&all, "read_lease.hits");
        match on {
            true => assert!(hits > 1000, "{opts:?}: {hits} reads without a message"),
            false => assert_eq!(hits, 0, "{opts:?}"),
        }
    }
}

/// Reads in a row after a write, a chmod, an atime set back two days, a
/// link and an unlink move the atime exactly where relatime moves it on
/// tmpfs (a read served without a message must not lose one), and a
/// watch added while two descriptions know the file's blocks (one of
/// them `O_NOATIME`) reports every read after it. In the incoherent island, whose private copies
/// the slots know nothing of, no read goes without a message, with the
/// same result.
#[test]
fn reads_in_a_row_move_the_atime_and_report_access_as_on_tmpfs() {
    let dir = tempfile::tempdir().unwrap();
    let bin = compile_probe(dir.path(), "stamps", include_str!("lease/stamps.c"));
    let want = on_tmpfs(&bin, &[], true);
    assert!(want.ends_with("watched: 6 reads reported\n"), "{want}");
    let script = format!("{} $ROOT/f", bin.display());
    for (opts, leased) in [
        (&["--stats", "--servers", "2"][..], true),
        (&["--stats", "--servers", "3", "--distribute", "all"], true),
        (
            &["--stats", "--servers", "2", "--island", "incoherent"],
            false,
        ),
    ] {
        let out = run_in_atoll(opts, &script);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert_eq!(stdout, want, "in atoll {opts:?}: {stderr}");
        let hits = atoll_tests::stats_counter(&stderr, "read_lease.hits");
        match leased {
            true => assert!(hits > 0, "{opts:?}: no read was served without a message"),
            false => assert_eq!(hits, 0, "{opts:?}"),
        }
    }
}

/// The lockstep probe on a file whose server (1 of 2) is killed in the
/// 50th of its truncates, after it reached the journal and before its
/// reply (`ATOLL_FAULT_KILL`): the child, whose description knew the
/// file's blocks under the lost incarnation's version, must see every
/// step from then on (the old slot is refused for its generation).
#[test]
fn reads_see_each_step_after_the_files_server_is_killed_and_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let bin = compile_probe(dir.path(), "lease", include_str!("lease/probe.c"));
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
