//! Recovery (fos §3.5): a file server that dies is rebuilt from its
//! journal and goes on serving the same clients. `atoll chaos --kill`
//! kills a server — one holding a shard of a distributed directory, or the
//! root's — while real work runs: the work completes with the results it
//! has on tmpfs, at most the calls in flight at the kill fail (with `EIO`,
//! nothing else), nothing hangs, every acknowledged change is there
//! afterwards, and `atoll status` shows the restart.

use atoll_tests::OutputBounded as _;
use std::process::Stdio;
use std::time::{Duration, Instant};

use atoll_tests::{atoll, compile_probe, output_within, Booted, RUN_LIMIT};

#[path = "recovery/answers.rs"]
mod answers;
#[path = "recovery/resent.rs"]
mod resent;

fn kill(inst: &Booted, server: usize) {
    kill_target(inst, &format!("server:{server}"));
}

/// `atoll chaos --kill TARGET`, which must take.
fn kill_target(inst: &Booted, target: &str) {
    let out = inst.chaos(&["--kill", target]);
    assert!(
        out.status.success(),
        "chaos: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Server `server`'s health once it has been rebuilt `restarts` times.
fn rebuilt(inst: &Booted, server: usize, restarts: u64) -> serde_json::Value {
    let started = Instant::now();
    loop {
        let h = inst.status()["health"][server].clone();
        if h["restarts"].as_u64().unwrap_or(0) >= restarts {
            return h;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "server {server} not rebuilt: {h}"
        );
        std::thread::sleep(Duration::from_millis(50));
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

/// What `script` prints on the host, run by bash with `$BASE` a fresh
/// temporary directory; it must succeed.
fn on_the_host(script: &str) -> std::process::Output {
    let host = tempfile::tempdir().unwrap();
    let mut cmd = std::process::Command::new("bash");
    cmd.args(["-c", script]).env("BASE", host.path());
    let want = output_within(cmd, RUN_LIMIT);
    assert!(want.status.success());
    want
}

/// Four processes create and rename in one distributed directory on three
/// servers while a server is killed twice: once one that holds only
/// shards of it, once the root's. Every step is reported, at most the
/// steps in flight at a kill fail and only with `EIO`, and afterwards
/// every acknowledged file holds what was written.
#[test]
fn creates_and_renames_survive_kills_of_a_shard_server_and_the_root_server() {
    let inst = Booted::new(&["--servers", "3"]);
    let ino = inst.distributed_dir_with_files();
    // An inode number names its owner in its top byte.
    let shard_only = if ino >> 56 == 2 { 1 } else { 2 };

    let work = four_workers(
        r#"cd "$ROOT/d""#,
        300,
        r#"echo "$w.$i" > "n$w-$i" && mv "n$w-$i" "m$w-$i""#,
    );
    let mut cmd = inst.command(&work);
    cmd.stdin(Stdio::null());
    let started = Instant::now();
    let runner = std::thread::spawn(move || output_within(cmd, RUN_LIMIT));
    wait_for(&inst, r#"test -e "$ROOT/d/m1-30""#);
    kill(&inst, shard_only);
    let h = rebuilt(&inst, shard_only, 1);
    assert_eq!(h["state"], "up", "{h}");
    assert!(h["reason"].as_str().unwrap().contains("chaos"), "{h}");
    wait_for(&inst, r#"test -e "$ROOT/d/m1-150""#);
    kill(&inst, 0);
    rebuilt(&inst, 0, 1);
    let ok = acknowledged(runner, started, 1200);

    // Every acknowledged step is in the tree, and the first files too.
    let check = inst
        .command(
            r#"cd "$ROOT/d"; for f in m*; do printf '%s %s\n' "$f" "$(cat "$f")"; done;
               n=0; for i in $(seq 90); do [ "$(cat "f$i")" = "x$i" ] && n=$((n+1)); done; echo "intact $n""#,
        )
        .output_bounded()
        .expect("check");
    let text = String::from_utf8_lossy(&check.stdout);
    assert!(text.contains("intact 90"), "{text}");
    for (w, i) in ok {
        let line = format!("m{w}-{i} {w}.{i}");
        assert!(text.lines().any(|l| l == line), "lost {line}");
    }
    let h0 = rebuilt(&inst, 0, 1);
    assert_eq!(h0["state"], "up", "{h0}");
    assert!(h0["journal_records"].as_u64().unwrap() > 0, "{h0}");
}

/// `make -j4` of a C project in the mount while the root's server and
/// then the other are killed: make either finishes or fails on `EIO`
/// alone; run again it finishes, and the tree and the program's output
/// are those of the same build on the host.
#[test]
fn a_parallel_build_survives_server_kills() {
    let project = atoll_tests::c_project_script(24);
    let build = format!(
        r#"cd "$BASE" && {project}
        cd "$BASE/proj"
        make -j4 >/dev/null 2>make.err || {{ grep -q 'Input/output error' make.err || cat make.err; make -j4 >/dev/null; }}
        ./prog; ls"#
    );
    let want = on_the_host(&build);

    let inst = Booted::new(&["--servers", "2"]);
    let mut cmd = inst.command(&format!("BASE=$ROOT; {build}"));
    cmd.stdin(Stdio::null());
    let runner = std::thread::spawn(move || output_within(cmd, RUN_LIMIT));
    wait_for(&inst, r#"ls "$ROOT/proj"/*.o >/dev/null 2>&1"#);
    kill(&inst, 0);
    rebuilt(&inst, 0, 1);
    kill(&inst, 1);
    rebuilt(&inst, 1, 1);
    let got = runner.join().expect("build thread");
    assert_eq!(
        String::from_utf8_lossy(&got.stdout),
        String::from_utf8_lossy(&want.stdout),
        "{}",
        String::from_utf8_lossy(&got.stderr)
    );
    assert!(got.status.success());
}

/// A pipeline through atoll pipes, with both servers killed while it
/// streams: its output is the host's.
#[test]
fn a_pipeline_survives_server_kills() {
    let script = r#"seq 1 300000 | sed 's/$/ line/' | sort -k1,1n | md5sum"#;
    let want = std::process::Command::new("bash")
        .args(["-c", script])
        .output_bounded()
        .unwrap();
    let inst = Booted::new(&["--servers", "2"]);
    let mut cmd = inst.command(&format!(
        r#"touch "$ROOT/started"; {script}; rm "$ROOT/started""#
    ));
    cmd.stdin(Stdio::null());
    let runner = std::thread::spawn(move || output_within(cmd, RUN_LIMIT));
    wait_for(&inst, r#"test -e "$ROOT/started""#);
    kill(&inst, 0);
    kill(&inst, 1);
    rebuilt(&inst, 0, 1);
    rebuilt(&inst, 1, 1);
    let got = runner.join().expect("pipeline thread");
    assert_eq!(
        got.stdout,
        want.stdout,
        "{}",
        String::from_utf8_lossy(&got.stderr)
    );
}

/// `make -j4` whose compiles are placed round robin on every core while
/// the scheduling server of each core is killed: the servers restart
/// (placed programs are no server's children and run on), the build's
/// output is the host's, and `atoll status` shows the restarts.
#[test]
fn a_placed_build_survives_scheduling_server_kills() {
    let project = atoll_tests::c_project_script(24);
    let build = format!(
        r#"cd "$BASE" && {project}
        cd "$BASE/proj" && make -j4 >/dev/null && ./prog && ls"#
    );
    let want = on_the_host(&build);

    let inst = Booted::new(&["--servers", "2"]);
    let cores: Vec<u64> = inst.status()["sched"]
        .as_array()
        .expect("scheduling servers in status")
        .iter()
        .map(|s| s["core"].as_u64().unwrap())
        .collect();
    assert!(!cores.is_empty());
    // Compiles go round robin (the default) over every core's server.
    let mut cmd = inst.command(&format!("BASE=$ROOT; {build}"));
    cmd.stdin(Stdio::null());
    let runner = std::thread::spawn(move || output_within(cmd, RUN_LIMIT));
    wait_for(&inst, r#"ls "$ROOT/proj"/*.o >/dev/null 2>&1"#);
    for &core in &cores {
        kill_target(&inst, &format!("sched:{core}"));
    }
    let got = runner.join().expect("build thread");
    assert_eq!(
        String::from_utf8_lossy(&got.stdout),
        String::from_utf8_lossy(&want.stdout),
        "{}",
        String::from_utf8_lossy(&got.stderr)
    );
    let st = inst.status();
    for s in st["sched"].as_array().unwrap() {
        assert!(s["restarts"].as_u64().unwrap() >= 1, "{s}");
    }
    let placed: u64 = st["sched"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["execs"].as_u64().unwrap())
        .sum();
    assert!(placed > 0, "the build's programs were placed: {st}");
    let bad = inst.chaos(&["--kill", "sched:999"]);
    assert_eq!(bad.status.code(), Some(1));
    assert_eq!(String::from_utf8_lossy(&bad.stderr).lines().count(), 1);
}

/// The scheduling servers in `atoll status --json`: `(core, pid)`.
fn sched_pids(inst: &Booted) -> Vec<(u64, i32)> {
    inst.status()["sched"]
        .as_array()
        .expect("scheduling servers in status")
        .iter()
        .map(|s| {
            (
                s["core"].as_u64().unwrap(),
                s["pid"].as_i64().unwrap_or(0) as i32,
            )
        })
        .collect()
}

/// The scheduling server of `core` once it was restarted `restarts`
/// times and its successor is up.
fn sched_restarted(inst: &Booted, core: u64, restarts: u64) -> serde_json::Value {
    let started = Instant::now();
    loop {
        let st = inst.status();
        let s = st["sched"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["core"] == core)
            .cloned()
            .expect("the core's server");
        if s["restarts"].as_u64().unwrap_or(0) >= restarts && s["pid"].as_i64().unwrap_or(0) > 0 {
            return s;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "scheduling server of core {core} not restarted: {s}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Each core's scheduling server is a process of its own (`atoll
/// status` names it, as a file server process): `SIGKILL` to each, by
/// pid, from outside, while `make -j4` places its compiles round robin.
/// The watchdog starts a successor on the same core (a new pid, a
/// restart each, the old one reaped); placed programs are not the
/// server's and run on, so the build's output is the host's; and `atoll
/// stop` leaves no scheduling server behind.
#[test]
fn scheduling_server_processes_killed_by_pid_are_restarted_on_their_cores() {
    let project = atoll_tests::c_project_script(24);
    let build = format!(
        r#"cd "$BASE" && {project}
        cd "$BASE/proj" && make -j4 >/dev/null && ./prog && ls"#
    );
    let want = on_the_host(&build);

    let inst = Booted::new(&["--servers", "2"]);
    let instance_pid = inst.status()["pid"].as_i64().unwrap() as i32;
    let before = sched_pids(&inst);
    assert!(!before.is_empty());
    for &(_, pid) in &before {
        assert!(
            pid > 0 && pid != instance_pid,
            "a process of its own: {before:?}"
        );
    }
    let mut cmd = inst.command(&format!("BASE=$ROOT; {build}"));
    cmd.stdin(Stdio::null());
    let runner = std::thread::spawn(move || output_within(cmd, RUN_LIMIT));
    wait_for(&inst, r#"ls "$ROOT/proj"/*.o >/dev/null 2>&1"#);
    for &(core, pid) in &before {
        let killed = std::process::Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .expect("kill");
        assert!(killed.success());
        let s = sched_restarted(&inst, core, 1);
        assert_ne!(s["pid"].as_i64().unwrap() as i32, pid, "a new process: {s}");
        assert!(!alive(pid), "the killed server is reaped");
    }
    let got = runner.join().expect("build thread");
    assert_eq!(
        String::from_utf8_lossy(&got.stdout),
        String::from_utf8_lossy(&want.stdout),
        "{}",
        String::from_utf8_lossy(&got.stderr)
    );
    assert!(got.status.success());
    let text = atoll_tests::atoll()
        .args(["status", "--id", &inst.id])
        .output_bounded()
        .expect("status");
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("scheduling server of core") && text.contains("restarted 1×"),
        "{text}"
    );
    let now: Vec<i32> = sched_pids(&inst).into_iter().map(|(_, p)| p).collect();
    drop(inst);
    for pid in now {
        assert!(!alive(pid), "scheduling server {pid} outlived its instance");
    }
}

/// `atoll exec --exec-via spawn` of `bash -c SCRIPT` in `inst`: every
/// program the script starts is spawned by a scheduling server, the
/// script's shell staying behind as its proxy.
fn spawned(inst: &Booted, script: &str) -> std::process::Command {
    let mut cmd = atoll();
    cmd.args(["exec", "--id", &inst.id, "--placement", "round-robin"])
        .args(["--exec-via", "spawn", "--", "bash", "-c", script])
        .env("ROOT", atoll_tests::MOUNT)
        .stdin(Stdio::null());
    cmd
}

/// Kill the scheduling server of every core with `atoll chaos`, each
/// once its successor is up: a new process each time.
fn kill_every_sched(inst: &Booted) {
    for (core, pid) in sched_pids(inst) {
        let restarts = inst.status()["sched"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["core"] == core)
            .map_or(0, |s| s["restarts"].as_u64().unwrap());
        kill_target(inst, &format!("sched:{core}"));
        let s = sched_restarted(inst, core, restarts + 1);
        assert_ne!(s["pid"].as_i64().unwrap() as i32, pid, "a new process: {s}");
    }
}

/// `make -j4` whose every program is spawned by a scheduling server
/// (`--exec-via spawn`) while each core's server process is killed: the
/// programs a server ran die with it and their proxies end as killed
/// (make reports it), an exec it took unanswered fails with `EIO`;
/// nothing hangs, and run again (from clean) the build is the host's.
#[test]
fn a_spawned_build_survives_scheduling_server_process_kills() {
    let project = atoll_tests::c_project_script(24);
    let build = |base: &str| {
        format!(
            r#"cd "{base}" && {project}
            cd "{base}/proj"
            for try in 1 2 3 4 5 6; do
              if make -j4 >/dev/null 2>make.err; then break; fi
              grep -Eq 'Killed|Error 137|Input/output error' make.err || cat make.err
              echo "build $try failed" >&2
              rm -f ./*.o prog
            done
            ./prog; ls"#
        )
    };
    let want = on_the_host(&build("$BASE"));

    let inst = Booted::new(&["--servers", "2"]);
    let runner = std::thread::spawn({
        let cmd = spawned(&inst, &build("$ROOT"));
        move || output_within(cmd, RUN_LIMIT)
    });
    wait_for(&inst, r#"ls "$ROOT/proj"/*.o >/dev/null 2>&1"#);
    kill_every_sched(&inst);
    let got = runner.join().expect("build thread");
    assert_eq!(
        String::from_utf8_lossy(&got.stdout),
        String::from_utf8_lossy(&want.stdout),
        "{}",
        String::from_utf8_lossy(&got.stderr)
    );
    let text = String::from_utf8_lossy(&got.stdout);
    assert!(text.contains("make.err"), "{text}");
}

/// A pipeline whose every stage is spawned by a scheduling server while
/// each core's server process is killed: a run that lost a stage fails
/// and says so (`pipefail`), never hangs, and a run that completes
/// prints the host's digest.
#[test]
fn a_spawned_pipeline_survives_scheduling_server_process_kills() {
    let pipeline = "seq 1 300000 | sed 's/$/ line/' | sort -k1,1n | md5sum";
    let want = std::process::Command::new("bash")
        .args(["-c", pipeline])
        .output_bounded()
        .unwrap();
    let inst = Booted::new(&["--servers", "2"]);
    let script = format!(
        r#"set -o pipefail; touch "$ROOT/started"
        for try in 1 2 3 4 5 6; do
          if {pipeline} > "$ROOT/out"; then cat "$ROOT/out"; break; fi
          echo "pipeline $try failed: $?" >&2
        done"#
    );
    let runner = std::thread::spawn({
        let cmd = spawned(&inst, &script);
        move || output_within(cmd, RUN_LIMIT)
    });
    wait_for(&inst, r#"test -e "$ROOT/started""#);
    kill_every_sched(&inst);
    let got = runner.join().expect("pipeline thread");
    assert_eq!(
        got.stdout,
        want.stdout,
        "{}",
        String::from_utf8_lossy(&got.stderr)
    );
}

/// A journal many times smaller than what its server served stays whole:
/// snapshots replace the records before them, so `atoll status` says the
/// server can be rebuilt, and after a kill it is, with the last contents
/// of every file. (Without snapshots this journal filled after about fifty
/// of the writes, and the kill left the server down.)
#[test]
fn a_tiny_journal_keeps_its_server_rebuildable_through_snapshots() {
    let inst = Booted::with_env(&["--servers", "1"], &[("ATOLL_JOURNAL_BYTES", "16384")]);
    let fill = inst
        .command(
            r#"for i in $(seq 300); do echo "x$i" > "$ROOT/f$((i % 5))"; done; cat "$ROOT/f0""#,
        )
        .output_bounded()
        .expect("fill");
    assert_eq!(String::from_utf8_lossy(&fill.stdout).trim(), "x300");
    let h = inst.status()["health"][0].clone();
    assert_eq!(h["state"], "up", "{h}");
    assert_eq!(h["recoverable"], true, "{h}");
    assert!(h["snapshots"].as_u64().unwrap() >= 5, "{h}");
    assert!(h["journal_bytes"].as_u64().unwrap() < 16384, "{h}");
    kill(&inst, 0);
    let h = rebuilt(&inst, 0, 1);
    assert_eq!(h["state"], "up", "{h}");
    let after = inst
        .command(r#"for i in 0 1 2 3 4; do cat "$ROOT/f$i"; done"#)
        .output_bounded()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&after.stdout),
        "x300\nx296\nx297\nx298\nx299\n"
    );
}

/// Snapshots every few kilobytes of records while four processes
/// create, write and rename, and both servers are killed: every
/// acknowledged step is in the tree afterwards, from the newest snapshot
/// and the records after it.
#[test]
fn kills_between_snapshots_lose_nothing_acknowledged() {
    let inst = Booted::with_env(&["--servers", "2"], &[("ATOLL_SNAPSHOT_BYTES", "4096")]);
    let work = four_workers(
        r#"mkdir -p "$ROOT/s"; cd "$ROOT/s""#,
        250,
        r#"echo "$w.$i" > "n$w-$i" && echo "more $i" >> "n$w-$i" && mv "n$w-$i" "m$w-$i""#,
    );
    let mut cmd = inst.command(&work);
    cmd.stdin(Stdio::null());
    let started = Instant::now();
    let runner = std::thread::spawn(move || output_within(cmd, RUN_LIMIT));
    wait_for(&inst, r#"test -e "$ROOT/s/m1-80""#);
    kill(&inst, 1);
    rebuilt(&inst, 1, 1);
    wait_for(&inst, r#"test -e "$ROOT/s/m1-170""#);
    kill(&inst, 0);
    rebuilt(&inst, 0, 1);
    let ok = acknowledged(runner, started, 1000);
    let check = inst
        .command(r#"cd "$ROOT/s"; for f in m*; do printf '%s %s\n' "$f" "$(cat "$f" | tr '\n' ' ')"; done"#)
        .output_bounded()
        .expect("check");
    let text = String::from_utf8_lossy(&check.stdout);
    for (w, i) in ok {
        let line = format!("m{w}-{i} {w}.{i} more {i} ");
        assert!(text.lines().any(|l| l == line), "lost {line}");
    }
    let health = inst.status()["health"].clone();
    for h in health.as_array().unwrap() {
        assert_eq!(h["state"], "up", "{h}");
        assert!(h["snapshots"].as_u64().unwrap() >= 3, "{h}");
    }
}

/// A journal too small for its server's *state* (a snapshot must fit in a
/// quarter of it) fills up and stops: the server goes on serving, `atoll
/// status` says it can no longer be rebuilt, and a kill then leaves it
/// down with the reason, its calls failing with `EIO`, never hanging.
#[test]
fn a_journal_too_small_for_its_state_leaves_its_server_working_but_not_rebuildable() {
    let inst = Booted::with_env(&["--servers", "1"], &[("ATOLL_JOURNAL_BYTES", "16384")]);
    let fill = inst
        .command(r#"for i in $(seq 200); do echo "x$i" > "$ROOT/f$i"; done; cat "$ROOT/f200""#)
        .output_bounded()
        .expect("fill");
    assert_eq!(String::from_utf8_lossy(&fill.stdout).trim(), "x200");
    let h = inst.status()["health"][0].clone();
    assert_eq!(h["state"], "up", "{h}");
    assert_eq!(h["recoverable"], false, "{h}");
    let text = atoll()
        .args(["status", "--id", &inst.id])
        .output_bounded()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&text.stdout).contains("not rebuilt if they die"),
        "{}",
        String::from_utf8_lossy(&text.stdout)
    );
    kill(&inst, 0);
    let started = Instant::now();
    let h = loop {
        let h = inst.status()["health"][0].clone();
        if h["state"] == "down" || started.elapsed() > Duration::from_secs(10) {
            break h;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(h["state"], "down", "{h}");
    assert!(
        h["reason"].as_str().unwrap().contains("journal filled up"),
        "{h}"
    );
    let after = inst
        .command(r#"cat "$ROOT/f1" 2>&1; echo "status $?""#)
        .output_bounded()
        .unwrap();
    let out = String::from_utf8_lossy(&after.stdout);
    assert!(
        out.contains("Input/output error") && out.contains("status 1"),
        "{out}"
    );
}

/// Server `server`'s process id in `atoll status --json`.
fn server_pid(inst: &Booted, server: usize) -> i32 {
    let pid = inst.status()["health"][server]["pid"].as_i64().unwrap_or(0);
    assert!(pid > 0, "server {server} is not a process of its own");
    pid as i32
}

fn alive(pid: i32) -> bool {
    // A reaped process has no /proc entry; a zombie's state is Z.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit(')')
            .next()
            .is_some_and(|r| !r.trim_start().starts_with('Z'))
    })
}

/// Each file server is a process of its own (`atoll status` names it):
/// `SIGKILL` to two of three, by pid, while four writers create, append
/// and rename — a crash from outside, not `atoll chaos`. The watchdog
/// starts successors on the same cores (new pids, a restart each, the
/// signal as the reason); every step the writers saw succeed is in the
/// tree afterwards, at most the calls in flight fail, only with `EIO`;
/// and `atoll stop` leaves no server process behind.
#[test]
fn server_processes_killed_by_pid_lose_nothing_acknowledged() {
    let inst = Booted::new(&["--servers", "3"]);
    let ino = inst.distributed_dir_with_files();
    let shard_only = if ino >> 56 == 2 { 1 } else { 2 };
    let instance_pid = inst.status()["pid"].as_i64().unwrap() as i32;
    let before: Vec<i32> = (0..3).map(|i| server_pid(&inst, i)).collect();
    assert!(!before.contains(&instance_pid), "{before:?}");

    let work = four_workers(
        r#"cd "$ROOT/d""#,
        300,
        r#"echo "$w.$i" > "p$w-$i" && echo "$w.$i" >> "log$w" && mv "p$w-$i" "q$w-$i""#,
    );
    let mut cmd = inst.command(&work);
    cmd.stdin(Stdio::null());
    let started = Instant::now();
    let runner = std::thread::spawn(move || output_within(cmd, RUN_LIMIT));
    for (server, after) in [(shard_only, "q1-40"), (0, "q1-160")] {
        wait_for(&inst, &format!(r#"test -e "$ROOT/d/{after}""#));
        // A crash from outside: kill(1), not the instance's own chaos.
        let killed = std::process::Command::new("kill")
            .args(["-KILL", &before[server].to_string()])
            .status()
            .expect("kill");
        assert!(killed.success());
        let h = rebuilt(&inst, server, 1);
        assert_eq!(h["state"], "up", "{h}");
        assert!(h["reason"].as_str().unwrap().contains("signal 9"), "{h}");
        let pid = h["pid"].as_i64().unwrap() as i32;
        assert!(pid > 0 && pid != before[server], "a new process: {h}");
        assert_eq!(h["core"], inst.status()["health"][server]["core"]);
        assert!(!alive(before[server]), "the killed process is reaped");
    }
    let ok = acknowledged(runner, started, 1200);

    let check = inst
        .command(
            r#"cd "$ROOT/d"; for f in q*; do printf '%s %s\n' "$f" "$(cat "$f")"; done;
               for w in 1 2 3 4; do sed "s/^/log$w /" "log$w"; done;
               n=0; for i in $(seq 90); do [ "$(cat "f$i")" = "x$i" ] && n=$((n+1)); done; echo "intact $n""#,
        )
        .output_bounded()
        .expect("check");
    let text = String::from_utf8_lossy(&check.stdout);
    assert!(text.contains("intact 90"), "{text}");
    for (w, i) in ok {
        let renamed = format!("q{w}-{i} {w}.{i}");
        assert!(text.lines().any(|l| l == renamed), "lost {renamed}");
        let logged = format!("log{w} {w}.{i}");
        assert!(text.lines().any(|l| l == logged), "lost {logged}");
    }
    let now: Vec<i32> = (0..3).map(|i| server_pid(&inst, i)).collect();
    drop(inst);
    for pid in now {
        assert!(!alive(pid), "server process {pid} outlived its instance");
    }
}

/// A server process that stops answering without dying (here: its 40th
/// call never returns, `ATOLL_FAULT_HANG`) is found by the watchdog — one
/// request owed beyond `ATOLL_WEDGE_MS` — killed and replaced. The wedge
/// came before the call changed anything, so the successor serves that
/// call again: the program sees no error at all, only a pause.
#[test]
fn a_wedged_server_process_is_replaced_and_its_clients_go_on() {
    let inst = Booted::with_env(
        &["--servers", "2", "--distribute", "all"],
        &[("ATOLL_FAULT_HANG", "1:40"), ("ATOLL_WEDGE_MS", "1000")],
    );
    let before = server_pid(&inst, 1);
    let script = r#"
        cd "$ROOT" && mkdir d
        for i in $(seq 150); do echo "x$i" > "d/f$i"; done
        n=0; for i in $(seq 150); do [ "$(cat "d/f$i")" = "x$i" ] && n=$((n+1)); done
        echo "intact $n"
    "#;
    let out = output_within(inst.command(script), RUN_LIMIT);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "intact 150\n");
    let h = rebuilt(&inst, 1, 1);
    assert_eq!(h["state"], "up", "{h}");
    assert!(
        h["reason"].as_str().unwrap().contains("wedged"),
        "the watchdog found it wedged: {h}"
    );
    assert_ne!(h["pid"].as_i64().unwrap() as i32, before, "{h}");
    assert!(!alive(before), "the wedged process is reaped");
}

/// A server process stopped between requests (`SIGSTOP`: it owes nothing,
/// yet requests wait in its rings) is found by the watchdog — rung, and
/// no turn of its loop beyond `ATOLL_WEDGE_MS` — killed and replaced; the
/// requests that waited are served by the successor, so the program sees
/// no error, only a pause. An idle server is never suspected.
#[test]
fn a_server_stopped_between_requests_is_replaced_and_its_clients_go_on() {
    let inst = Booted::with_env(
        &["--servers", "2", "--distribute", "all"],
        &[("ATOLL_WEDGE_MS", "1000")],
    );
    let setup = inst
        .command(r#"mkdir "$ROOT/d" && for i in $(seq 40); do echo "x$i" > "$ROOT/d/f$i"; done"#)
        .status()
        .unwrap();
    assert!(setup.success());
    // Idle well beyond the bound: nobody is replaced.
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(inst.status()["health"][1]["restarts"], 0);
    let before = server_pid(&inst, 1);
    let stopped = std::process::Command::new("kill")
        .args(["-STOP", &before.to_string()])
        .status()
        .unwrap();
    assert!(stopped.success());
    let script = r#"
        cd "$ROOT/d"
        n=0; for i in $(seq 40); do [ "$(cat "f$i")" = "x$i" ] && n=$((n+1)); done
        echo "intact $n"; ls | wc -l
    "#;
    let out = output_within(inst.command(script), RUN_LIMIT);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "intact 40\n40\n");
    let h = rebuilt(&inst, 1, 1);
    assert_eq!(h["state"], "up", "{h}");
    assert!(
        h["reason"].as_str().unwrap().contains("no progress"),
        "the watchdog found it wedged between requests: {h}"
    );
    assert_ne!(h["pid"].as_i64().unwrap() as i32, before, "{h}");
    assert!(!alive(before), "the stopped process is reaped");
}

/// A server process killed after a fork's `Share` took effect and
/// before its answer went out (`ATOLL_FAULT_KILL`: the window a `kill`
/// from outside hit about one run in six of the pipeline above): the
/// successor answers `EIO`, the client sends the `Share` again, and the
/// server, told how many references the child held before it, counts it
/// once. The child reads through the description it inherited, as on
/// Linux (it had none: `cat: -: Bad file descriptor`).
#[test]
fn a_fork_whose_share_outlived_its_killed_server_keeps_its_descriptions() {
    let inst = Booted::with_env(&["--servers", "1"], &[("ATOLL_FAULT_KILL", "0:Share")]);
    let script = r#"
        cd "$BASE" && echo hello > f && exec 3< f
        ( cat <&3 )
        exec 3<&-
        printf 'b\na\n' | sort
    "#;
    runs_as_on_the_host_across_a_kill_of_server_0(&inst, script);
}

/// A server process killed between a fork's `Share`s and the child's
/// first call (here: after the second of two `Share`s reached the
/// journal): the child has no channel to the server yet, and its
/// successor must not take it for a session that ended — the child still
/// reads through both descriptions it inherited. (It closed the child's
/// session: the first description was gone, `Bad file descriptor`.)
#[test]
fn a_child_without_channels_keeps_its_descriptions_across_a_server_kill() {
    let inst = Booted::with_env(&["--servers", "1"], &[("ATOLL_FAULT_KILL", "0:Share:2")]);
    let script = r#"
        cd "$BASE" && echo one > a && echo two > b && exec 3< a 4< b
        ( cat <&3; cat <&4 )
        exec 3<&- 4<&-
    "#;
    runs_as_on_the_host_across_a_kill_of_server_0(&inst, script);
}

/// A program's own `mmap` of an atoll file whose owner is killed after
/// the `Map` took effect and before its answer went out: the client sends
/// the `Map` again, naming its mapping, and the successor (which replayed
/// it) counts it once. The program prints the file's bytes through the
/// mapping, as on Linux (it failed: `mmap: Input/output error`), and once
/// it unmapped, closed and removed the file nothing is left held (counted
/// twice, the mapping would keep the unlinked file's inode and block).
/// The same for a kill in the `MapBlocks` that follows.
#[test]
fn an_mmap_whose_server_was_killed_mid_map_reads_the_file_and_leaks_nothing() {
    let probe = tempfile::tempdir().unwrap();
    let mapcat = compile_probe(probe.path(), "mapcat", include_str!("recovery/mapcat.c"));
    for op in ["Map", "MapBlocks"] {
        let inst = Booted::with_env(
            &["--servers", "2"],
            &[("ATOLL_FAULT_KILL", &format!("1:{op}"))],
        );
        let name = a_name_on_server_1(&inst);
        let script = format!(
            r#"cd "$BASE" && echo "mapped through {name}" > {name} && {} {name} && rm {name}"#,
            mapcat.display()
        );
        runs_as_on_the_host_across_a_kill(&inst, 1, "$ROOT/d", &script);
        nothing_held_once_all_is_removed(&inst);
    }
}

/// An `execve` of a program stored in the mount whose owner is killed
/// after the hand-over's `Exec` (the text mark: `ETXTBSY`) took effect and
/// before its answer went out: the client sends it again and the
/// successor, which holds the mark already, changes nothing. The program
/// runs and prints, as on Linux (it failed: `Input/output error`), and no
/// mark or block is left once it ended and its file is removed. The same
/// for a kill in the first `Read` of the program (at offset 0).
#[test]
fn an_exec_whose_server_was_killed_mid_exec_runs_the_program_and_leaks_nothing() {
    for op in ["Exec", "Read"] {
        let inst = Booted::with_env(
            &["--servers", "2"],
            &[("ATOLL_FAULT_KILL", &format!("1:{op}"))],
        );
        let name = a_name_on_server_1(&inst);
        let script = format!(
            r#"cd "$BASE" && cp /bin/echo {name} && chmod 755 {name} && ./{name} run from the mount && rm {name}"#
        );
        runs_as_on_the_host_across_a_kill(&inst, 1, "$ROOT/d", &script);
        nothing_held_once_all_is_removed(&inst);
    }
}

/// Make `$ROOT/d`, distributed over both servers of `inst`, holding empty
/// files `f0`…`f15`; the name of one whose inode server 1 owns (the top
/// byte of its inode number), so that a request about it goes there.
fn a_name_on_server_1(inst: &Booted) -> String {
    let setup = r#"
        mkdir "$ROOT/d" && setfattr -n user.atoll.distributed -v 1 "$ROOT/d" && cd "$ROOT/d" &&
        for i in $(seq 0 15); do : > "f$i"; done &&
        for i in $(seq 0 15); do [ $(( $(stat -c %i "f$i") >> 56 )) = 1 ] && echo "f$i"; done
    "#;
    let out = output_within(inst.command(setup), RUN_LIMIT);
    let names = String::from_utf8_lossy(&out.stdout).to_string();
    let name = names
        .lines()
        .next()
        .expect("a name on server 1")
        .to_string();
    let rest = format!(r#"cd "$ROOT/d" && ls | grep -vx {name} | xargs rm"#);
    assert!(inst.command(&rest).status().unwrap().success());
    name
}

/// Once `$ROOT/d` is removed, `inst` holds no block, no description and
/// no inode but the root, as the soak test checks after its kills (ended
/// sessions are released in the background: ask until it settles).
fn nothing_held_once_all_is_removed(inst: &Booted) {
    let rm = inst.command(r#"rm -rf "$ROOT/d""#).status().unwrap();
    assert!(rm.success());
    nothing_held(inst);
}

/// `inst` holds no block, no description and no inode but the root
/// (asked until it settles, as above).
fn nothing_held(inst: &Booted) {
    let started = Instant::now();
    loop {
        let st = inst.status();
        let held = (
            st["pool"]["used"].as_u64().unwrap(),
            st["limits"]["inodes"]["used"].as_u64().unwrap(),
            st["limits"]["open_descriptions"]["used"].as_u64().unwrap(),
        );
        if held == (0, 1, 0) {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "held (blocks, inodes, descriptions): {held:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `script` (with `$BASE` its directory) prints in `inst` what it prints
/// on the host, though server 0 is killed on the way (`ATOLL_FAULT_KILL`),
/// and server 0 was rebuilt once and is up.
fn runs_as_on_the_host_across_a_kill_of_server_0(inst: &Booted, script: &str) {
    runs_as_on_the_host_across_a_kill(inst, 0, "$ROOT", script);
}

/// `script` prints in an instance of two servers (with `opts` besides)
/// what it prints on the host, in `$ROOT` (on server 0), though server 0
/// is killed at `phase` (`ATOLL_FAULT_KILL`'s `handled`, `journaled` or
/// `taken`) of its first call named `op`; server 0 was rebuilt, and
/// nothing is held once the script is done.
fn survives_a_kill_at(op: &str, phase: &str, opts: &[&str], script: &str) {
    let mut args = vec!["--servers", "2"];
    args.extend_from_slice(opts);
    let kill = format!("0:{op}:1:{phase}");
    let inst = Booted::with_env(&args, &[("ATOLL_FAULT_KILL", &kill)]);
    runs_as_on_the_host_across_a_kill_of_server_0(&inst, script);
    nothing_held(&inst);
}

/// `script` prints in `inst`, with `$BASE` set to `base` there, what it
/// prints on the host, though server `server` is killed on the way
/// (`ATOLL_FAULT_KILL`), and that server was rebuilt once and is up.
fn runs_as_on_the_host_across_a_kill(inst: &Booted, server: usize, base: &str, script: &str) {
    let want = on_the_host(script);
    let out = output_within(
        inst.command(&format!(r#"BASE="{base}"; {script}"#)),
        RUN_LIMIT,
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&want.stdout),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success());
    let h = rebuilt(inst, server, 1);
    assert_eq!(h["state"], "up", "{h}");
}

/// Four processes each doing `steps` steps of `step` (a shell command
/// using `$w` and `$i`) after `prelude`, reporting `ok w i` or
/// `failed w i` per step; errors other than `EIO` are reported as
/// `other error: …`. Each process's errors go to its own file, named
/// after the shell, so concurrent tests do not mix them.
fn four_workers(prelude: &str, steps: u32, step: &str) -> String {
    format!(
        r#"
        {prelude}
        for w in 1 2 3 4; do
          (
            for i in $(seq {steps}); do
              if {step}; then
                echo "ok $w $i"
              else
                echo "failed $w $i"
              fi
            done
          ) 2>"/tmp/workers-$$-$w.err" &
        done
        wait
        cat /tmp/workers-$$-*.err | grep -v 'Input/output error$' | sed 's/^/other error: /'
        rm -f /tmp/workers-$$-*.err
    "#
    )
}

/// The steps a [`four_workers`] run reported done, once it ended: it did
/// not hang, failed only with `EIO`, reported each of its `total` steps,
/// and a kill failed at most what was in flight (a call per process, per
/// kill).
fn acknowledged(
    runner: std::thread::JoinHandle<std::process::Output>,
    started: Instant,
    total: usize,
) -> Vec<(u32, u32)> {
    let out = runner.join().expect("workload thread");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(started.elapsed() < RUN_LIMIT, "hung: {stdout}");
    assert!(!stdout.contains("other error"), "only EIO: {stdout}");
    let ok: Vec<(u32, u32)> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("ok "))
        .map(|l| {
            let (w, i) = l.split_once(' ').unwrap();
            (w.parse().unwrap(), i.parse().unwrap())
        })
        .collect();
    let failed = stdout.lines().filter(|l| l.starts_with("failed ")).count();
    assert_eq!(ok.len() + failed, total, "every step reported: {stdout}");
    assert!(failed <= 8, "{failed} steps failed: {stdout}");
    ok
}

/// A server process takes its snapshots by forking a child that encodes
/// them while it serves; a server thread (`--without processes`) encodes
/// them itself. `atoll status` says which, and the files written across
/// many snapshots of either kind are all there after a kill.
#[test]
fn server_processes_fork_their_snapshots_and_server_threads_encode_them_inline() {
    for (args, mode) in [
        (&["--servers", "1"][..], "forked"),
        (&["--servers", "1", "--without", "processes"][..], "inline"),
    ] {
        let inst = Booted::with_env(args, &[("ATOLL_SNAPSHOT_BYTES", "4096")]);
        let fill = inst
            .command(r#"for i in $(seq 300); do echo "x$i" > "$ROOT/f$i"; done; cat "$ROOT/f300""#)
            .output_bounded()
            .expect("fill");
        assert_eq!(String::from_utf8_lossy(&fill.stdout).trim(), "x300");
        let h = inst.status()["health"][0].clone();
        assert!(h["snapshots"].as_u64().unwrap() >= 3, "{h}");
        assert_eq!(h["snapshot_mode"], mode, "{h}");
        let text = atoll()
            .args(["status", "--id", &inst.id])
            .output_bounded()
            .unwrap();
        let text = String::from_utf8_lossy(&text.stdout);
        assert!(text.contains(&format!(" {mode}, newest ")), "{text}");
        kill(&inst, 0);
        let h = rebuilt(&inst, 0, 1);
        assert_eq!(h["state"], "up", "{h}");
        let after = inst
            .command(r#"n=0; for i in $(seq 300); do [ "$(cat "$ROOT/f$i")" = "x$i" ] && n=$((n+1)); done; echo $n"#)
            .output_bounded()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&after.stdout).trim(), "300");
    }
}
