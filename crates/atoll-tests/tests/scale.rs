//! The elastic server count (Hare §6.1.1): `atoll scale` starts and stops
//! the host processes that run the file servers, and moves servers between
//! them, while programs run. Real work during 1 → 4 → 2 → 3 hosts ends as
//! it does on the host's file system, no call fails, every acknowledged
//! change is there, and `atoll status` shows where each server runs now.

use atoll_tests::OutputBounded as _;
use std::collections::BTreeSet;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use atoll_tests::{atoll, output_within, run_on_host, Booted, RUN_LIMIT};

/// `atoll scale --id ID --servers N`.
fn scale(inst: &Booted, servers: &str) -> Output {
    atoll()
        .args(["scale", "--id", &inst.id, "--servers", servers])
        .output_bounded()
        .expect("atoll scale")
}

/// Scale to `n` hosts, which must take, and check that the servers now
/// run in exactly `n` distinct host processes.
fn scale_to(inst: &Booted, n: usize) {
    let out = scale(inst, &n.to_string());
    assert!(
        out.status.success(),
        "scale to {n}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let st = inst.status();
    assert_eq!(st["scaling"]["hosts"], n as u64, "{}", st["scaling"]);
    let health = st["health"].as_array().expect("health");
    let pids: BTreeSet<u64> = health.iter().map(|h| h["pid"].as_u64().unwrap()).collect();
    let hosts: BTreeSet<u64> = health.iter().map(|h| h["host"].as_u64().unwrap()).collect();
    assert_eq!(pids.len(), n, "one process per host: {health:?}");
    assert_eq!(hosts, (0..n as u64).collect(), "{health:?}");
    for h in health {
        assert_eq!(h["state"], "up", "{h}");
        assert_eq!(h["restarts"], 0, "a move is no restart: {h}");
    }
}

/// Wait until `script` succeeds in the instance.
fn wait_for(inst: &Booted, script: &str) {
    let started = Instant::now();
    while !inst.command(script).status().is_ok_and(|s| s.success()) {
        assert!(started.elapsed() < RUN_LIMIT, "never true: {script}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Eight processes create, write, rename and unlink in one distributed
/// directory and in directories of their own, then list it all.
const CHURN: &str = r#"
    cd "$ROOT"
    mkdir -p shared && setfattr -n user.atoll.distributed -v 1 shared 2>/dev/null
    for w in 1 2 3 4 5 6 7 8; do
      (
        mkdir own$w
        for i in $(seq 120); do
          echo "$w.$i" > shared/n$w-$i || echo "failed create $w $i"
          mv shared/n$w-$i shared/m$w-$i || echo "failed rename $w $i"
          echo "$i" >> own$w/log || echo "failed append $w $i"
          if [ $((i % 3)) = 0 ]; then rm shared/m$w-$i || echo "failed unlink $w $i"; fi
          if [ $((i % 40)) = 0 ]; then mkdir own$w/d$i && touch own$w/d$i/f; fi
        done
      ) &
    done
    wait
    touch churn-done
    cd "$ROOT"; find . -path ./churn-done -prune -o -print | LC_ALL=C sort
    for w in 1 2 3 4 5 6 7 8; do md5sum own$w/log; done
    cat shared/m1-1 shared/m8-119
    ls shared | wc -l
    stat -c '%h %n' own1 own1/d40
"#;

/// 1 → 4 → 2 → 3 hosts during the churn: identical to the host's run,
/// nothing failed, every server moved at least once and was never
/// restarted.
#[test]
fn scaling_one_four_two_three_during_churn_matches_the_host() {
    let (dir, host) = run_on_host(CHURN);
    let want =
        String::from_utf8_lossy(&host.stdout).replace(&*dir.path().to_string_lossy(), "$ROOT");
    assert!(host.status.success());

    let inst = Booted::new(&["--servers", "1", "--max-servers", "4"]);
    let mut cmd = inst.command(CHURN);
    cmd.stdin(Stdio::null());
    let started = Instant::now();
    let runner = std::thread::spawn(move || output_within(cmd, RUN_LIMIT));
    wait_for(&inst, r#"test -e "$ROOT/shared/m1-10""#);
    for n in [4, 2, 3] {
        scale_to(&inst, n);
        std::thread::sleep(Duration::from_millis(150));
    }
    let out = runner.join().expect("churn thread");
    let got = String::from_utf8_lossy(&out.stdout).replace("/atoll", "$ROOT");
    assert!(started.elapsed() < RUN_LIMIT, "hung");
    assert!(
        !got.contains("failed"),
        "{got}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(got, want, "{}", String::from_utf8_lossy(&out.stderr));
    let st = inst.status();
    assert_eq!(st["scaling"]["changes"], 3, "{}", st["scaling"]);
    let moves: u64 = st["health"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["moves"].as_u64().unwrap())
        .sum();
    // 1→4 moves 3, 4→2 moves 2, 2→3 moves 1.
    assert_eq!(moves, 6, "{}", st["health"]);
}

/// `make -j4` of a C project while the servers go 1 → 4 → 2 → 3 hosts:
/// the program and the tree are those of the same build on the host.
#[test]
fn a_parallel_build_while_scaling_builds_as_on_the_host() {
    let project = atoll_tests::c_project_script(32);
    let build = format!(
        r#"cd "$BASE" && {project}
        cd "$BASE/proj"
        make -j4 >/dev/null && ./prog && ls"#
    );
    let host = tempfile::tempdir().unwrap();
    let mut cmd = std::process::Command::new("bash");
    cmd.args(["-c", &build]).env("BASE", host.path());
    let want = output_within(cmd, RUN_LIMIT);
    assert!(want.status.success());

    let inst = Booted::new(&["--servers", "1", "--max-servers", "4"]);
    let mut cmd = inst.command(&format!("BASE=$ROOT; {build}"));
    cmd.stdin(Stdio::null());
    let runner = std::thread::spawn(move || output_within(cmd, RUN_LIMIT));
    wait_for(&inst, r#"test -e "$ROOT/proj/Makefile""#);
    for n in [4, 2, 3] {
        scale_to(&inst, n);
    }
    let got = runner.join().expect("build thread");
    assert_eq!(
        String::from_utf8_lossy(&got.stdout),
        String::from_utf8_lossy(&want.stdout),
        "{}",
        String::from_utf8_lossy(&got.stderr)
    );
    assert!(got.status.success());
}

/// A server moved away and back holds what it held: files, their data,
/// open descriptions (a reader keeps reading through a move), and a
/// killed host after a move is rebuilt with the moved server.
#[test]
fn moves_keep_open_files_and_a_host_killed_after_a_move_recovers() {
    let inst = Booted::new(&["--servers", "2", "--max-servers", "2"]);
    let setup = inst
        .command(r#"seq 1 20000 > "$ROOT/numbers" && mkdir "$ROOT/d" && echo kept > "$ROOT/d/f""#)
        .status()
        .unwrap();
    assert!(setup.success());
    // A reader holds the file open across two moves.
    let mut cmd = inst.command(
        r#"exec 3<"$ROOT/numbers"; head -n 5 <&3 >/dev/null; touch "$ROOT/opened";
           while [ ! -e "$ROOT/go" ]; do sleep 0.05; done; cat <&3 | wc -l"#,
    );
    cmd.stdin(Stdio::null());
    let reader = std::thread::spawn(move || output_within(cmd, RUN_LIMIT));
    wait_for(&inst, r#"test -e "$ROOT/opened""#);
    scale_to(&inst, 1);
    scale_to(&inst, 2);
    assert!(inst
        .command(r#"touch "$ROOT/go""#)
        .status()
        .unwrap()
        .success());
    let out = reader.join().unwrap();
    let lines: u64 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(0);
    // `head` read a buffer's worth; the rest is read through the moves.
    assert!(lines > 10_000 && lines < 20_000, "{lines}");

    // Kill the host of server 1 (moved twice): it is rebuilt.
    let out = inst.chaos(&["--kill", "server:1"]);
    assert!(out.status.success());
    let started = Instant::now();
    loop {
        let h = inst.status()["health"][1].clone();
        if h["restarts"].as_u64().unwrap_or(0) >= 1 && h["state"] == "up" {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "{h}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let check = inst
        .command(
            r#"cat "$ROOT/d/f"; wc -l < "$ROOT/numbers"; echo new > "$ROOT/d/g"; cat "$ROOT/d/g""#,
        )
        .output_bounded()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&check.stdout), "kept\n20000\nnew\n");
}

/// Bad counts get one line each, and nothing changes.
#[test]
fn bad_counts_and_thread_servers_are_refused_in_one_line() {
    let inst = Booted::new(&["--servers", "1", "--max-servers", "2"]);
    for bad in ["3", "0", "x"] {
        let out = scale(&inst, bad);
        assert!(!out.status.success(), "{bad}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
    assert_eq!(inst.status()["scaling"]["hosts"], 1);
    let threads = Booted::new(&["--servers", "1", "--without", "processes"]);
    let out = scale(&threads, "1");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("threads"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = atoll()
        .args(["boot", "--servers", "3", "--max-servers", "2"])
        .output_bounded()
        .unwrap();
    assert!(!out.status.success());
}

/// `--servers auto`: busy hosts bring another; idle ones go away again.
#[test]
fn automatic_scaling_follows_the_load() {
    let inst = Booted::with_env(
        &["--servers", "auto", "--max-servers", "2"],
        &[("ATOLL_SCALE_POLICY", "up=0.1,down=0.03,every=200,calm=3")],
    );
    assert_eq!(inst.status()["scaling"]["hosts"], 1);
    assert_eq!(inst.status()["scaling"]["auto"], true);
    // Metadata calls from one process (no process starts between them)
    // keep the one host busy.
    let mut cmd = inst.command(
        r#"python3 -c '
import os
while not os.path.exists("/atoll/stop"):
    for i in range(200):
        p = "/atoll/f%d" % i
        os.close(os.open(p, os.O_CREAT | os.O_WRONLY)); os.stat(p); os.unlink(p)
'"#,
    );
    cmd.stdin(Stdio::null()).stdout(Stdio::null());
    let busy = std::thread::spawn(move || output_within(cmd, RUN_LIMIT));
    let until = |hosts: u64| {
        let started = Instant::now();
        loop {
            let st = inst.status();
            if st["scaling"]["hosts"] == hosts {
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "never {hosts} hosts: {}",
                st["scaling"]
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    until(2);
    assert!(inst
        .command(r#"touch "$ROOT/stop""#)
        .status()
        .unwrap()
        .success());
    let out = busy.join().unwrap();
    assert!(out.status.success());
    until(1);
    assert!(inst.status()["scaling"]["changes"].as_u64().unwrap() >= 2);
}
