//! Names and fleets (fos §3.3): the file servers form the fleet
//! `/fs/server` and the scheduling servers `/sched/core`; `--fleet-policy`
//! decides which file server takes an object that may live anywhere (an
//! anonymous pipe); `atoll status --json` lists fleets, members, policies,
//! restarts and the generation each name resolves to; clients bind the
//! names once and re-bind a member that restarted or moved.

use atoll_tests::OutputBounded as _;
use std::process::Stdio;
use std::time::Duration;

use atoll_tests::{atoll, Booted};

/// Pipes per file server while one shell holds a pipeline of six pipes.
fn pipes_per_server(policy: &str) -> Vec<u64> {
    let inst = Booted::new(&["--servers", "3", "--fleet-policy", policy]);
    let mut cmd =
        inst.command("sleep 3 | sleep 3 | sleep 3 | sleep 3 | sleep 3 | sleep 3 | sleep 3");
    cmd.stdin(Stdio::null());
    let mut child = cmd.spawn().expect("pipeline");
    let started = std::time::Instant::now();
    let per = loop {
        let st = inst.status();
        let per: Vec<u64> = st["servers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["pipes"].as_u64().unwrap())
            .collect();
        if per.iter().sum::<u64>() >= 6 || started.elapsed() > Duration::from_secs(2) {
            break per;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let _ = child.wait();
    per
}

#[test]
fn the_fleet_policy_decides_where_pipes_live() {
    // One shell makes every pipe: `hashed` keeps them on its server,
    // `round-robin` deals them out.
    let hashed = pipes_per_server("hashed");
    assert_eq!(hashed.iter().sum::<u64>(), 6, "{hashed:?}");
    assert_eq!(hashed.iter().filter(|&&n| n > 0).count(), 1, "{hashed:?}");
    let dealt = pipes_per_server("round-robin");
    assert_eq!(dealt, vec![2, 2, 2], "{dealt:?}");
}

#[test]
fn status_lists_fleets_members_policies_and_restarts() {
    let inst = Booted::new(&["--servers", "2", "--fleet-policy", "shortest-queue"]);
    assert!(inst.chaos(&["--kill", "server:1"]).status.success());
    let started = std::time::Instant::now();
    let names = loop {
        let names = inst.status()["names"].clone();
        if names["fleets"][0]["members"][1]["restarts"] == 1
            || started.elapsed() > Duration::from_secs(10)
        {
            break names;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let fs = &names["fleets"][0];
    assert_eq!(fs["name"], "/fs/server", "{names}");
    assert_eq!(fs["policy"], "shortest-queue", "{names}");
    assert_eq!(fs["members"][1]["name"], "/fs/server/1", "{names}");
    assert_eq!(fs["members"][1]["state"], "up", "{names}");
    assert_eq!(fs["members"][1]["restarts"], 1, "{names}");
    assert_eq!(fs["members"][0]["restarts"], 0, "{names}");
    let sched = &names["fleets"][1];
    assert_eq!(sched["name"], "/sched/core", "{names}");
    assert!(!sched["members"].as_array().unwrap().is_empty(), "{names}");
    // A bad policy is one line, before anything boots.
    let bad = atoll()
        .args(["boot", "--fleet-policy", "fastest"])
        .output_bounded()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert_eq!(String::from_utf8_lossy(&bad.stderr).lines().count(), 1);
}

/// The generation each registered name resolves to, from `atoll status
/// --json`: `(name, generation)` of every member of every fleet.
fn generations(inst: &Booted) -> Vec<(String, u64)> {
    let names = inst.status()["names"].clone();
    names["fleets"]
        .as_array()
        .expect("fleets")
        .iter()
        .flat_map(|f| f["members"].as_array().cloned().unwrap_or_default())
        .map(|m| {
            (
                m["name"].as_str().unwrap_or("").to_string(),
                m["generation"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

/// The generation `name` resolves to once it reached `at_least`.
fn generation_reaches(inst: &Booted, name: &str, at_least: u64) -> Vec<(String, u64)> {
    let started = std::time::Instant::now();
    loop {
        let gens = generations(inst);
        if gens.iter().any(|(n, g)| n == name && *g >= at_least) {
            return gens;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{name} never reached generation {at_least}: {gens:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn generation_of(gens: &[(String, u64)], name: &str) -> u64 {
    gens.iter().find(|(n, _)| n == name).map_or(0, |(_, g)| *g)
}

/// Every server is registered under its name with the generation of the
/// incarnation that serves it: 1 at boot, one more when a file server is
/// rebuilt (`--kill server:1`), when a scheduling server process is
/// replaced (`--kill sched:N`), and when a file server moves to another
/// host (`atoll scale`); other names keep theirs. `atoll status` says so
/// in words too.
#[test]
fn names_resolve_to_generations_that_move_with_restarts_and_moves() {
    let inst = Booted::new(&["--servers", "2"]);
    let gens = generations(&inst);
    assert_eq!(generation_of(&gens, "/fs/server/0"), 1, "{gens:?}");
    assert_eq!(generation_of(&gens, "/fs/server/1"), 1, "{gens:?}");
    let sched: Vec<String> = gens
        .iter()
        .filter(|(n, _)| n.starts_with("/sched/core/"))
        .map(|(n, _)| n.clone())
        .collect();
    assert!(!sched.is_empty(), "{gens:?}");
    for n in &sched {
        assert_eq!(generation_of(&gens, n), 1, "{gens:?}");
    }

    assert!(inst.chaos(&["--kill", "server:1"]).status.success());
    let gens = generation_reaches(&inst, "/fs/server/1", 2);
    assert_eq!(generation_of(&gens, "/fs/server/1"), 2, "{gens:?}");
    assert_eq!(generation_of(&gens, "/fs/server/0"), 1, "{gens:?}");

    let core = sched[0].rsplit('/').next().unwrap().to_string();
    assert!(inst
        .chaos(&["--kill", &format!("sched:{core}")])
        .status
        .success());
    let gens = generation_reaches(&inst, &sched[0], 2);
    assert_eq!(generation_of(&gens, "/fs/server/1"), 2, "{gens:?}");

    // Two hosts down to one: server 1 moves into host 0.
    let scaled = atoll()
        .args(["scale", "--id", &inst.id, "--servers", "1"])
        .output_bounded()
        .expect("atoll scale");
    assert!(
        scaled.status.success(),
        "{}",
        String::from_utf8_lossy(&scaled.stderr)
    );
    let gens = generation_reaches(&inst, "/fs/server/1", 3);
    assert_eq!(generation_of(&gens, "/fs/server/0"), 1, "{gens:?}");
    let text = atoll()
        .args(["status", "--id", &inst.id])
        .output_bounded()
        .expect("status");
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("/fs/server/0 @1, /fs/server/1 @3"), "{text}");
}

/// A process binds `/fs/server/*` when it attaches and keeps its
/// bindings while it lives. Here one shell reads and writes files spread
/// over both servers, waits while server 1 is killed and rebuilt (a new
/// generation), then goes on: every call succeeds, every file reads as
/// written, and the shell re-bound the restarted name (`names.rebinds`,
/// which it reports when it exits).
#[test]
fn clients_rebind_to_a_restarted_member_without_error() {
    let inst = Booted::new(&["--servers", "2"]);
    inst.distributed_dir_with_files();
    let host = tempfile::tempdir().unwrap();
    let script = r#"
        cd "$ROOT/d" || exit 1
        check() {
          for i in $(seq 90); do
            read -r x < "f$i" || { echo "read f$i failed"; continue; }
            [ "$x" = "x$i" ] || echo "f$i holds $x"
          done
        }
        check
        : > "$HOST/ready"
        while [ ! -e "$HOST/go" ]; do sleep 0.05; done
        check
        for i in $(seq 90); do echo "y$i" > "g$i" || echo "write g$i failed"; done
        for i in $(seq 90); do read -r x < "g$i"; [ "$x" = "y$i" ] || echo "g$i holds $x"; done
        echo done"#;
    let mut cmd = inst.command(script);
    cmd.env("HOST", host.path()).stdin(Stdio::null());
    let runner =
        std::thread::spawn(move || atoll_tests::output_within(cmd, atoll_tests::RUN_LIMIT));
    let started = std::time::Instant::now();
    while !host.path().join("ready").exists() {
        assert!(started.elapsed() < atoll_tests::RUN_LIMIT, "never ready");
        std::thread::sleep(Duration::from_millis(20));
    }
    let before = inst.status()["counters"]["names.rebinds"]
        .as_u64()
        .unwrap_or(0);
    assert!(inst.chaos(&["--kill", "server:1"]).status.success());
    generation_reaches(&inst, "/fs/server/1", 2);
    std::fs::write(host.path().join("go"), b"").unwrap();
    let out = runner.join().expect("client thread");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        stdout.trim(),
        "done",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success());
    let after = inst.status()["counters"]["names.rebinds"]
        .as_u64()
        .unwrap_or(0);
    assert!(after > before, "the shell re-bound /fs/server/1: {after}");
}
