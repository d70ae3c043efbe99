//! A thread bound by its round trips tries the other side of its server
//! (client `msgbound`): off the server's core when it runs beside it,
//! onto it when it runs elsewhere, and keeps whichever is faster. The
//! rule's timing (is the thread bound by its round trips, did the move
//! pay) is unit-tested in the client; here `ATOLL_MOVES=always` takes
//! timing out of it, so what is checked is the mechanism: the kernel's
//! affinity of the thread changes, the program still sees every core of
//! the instance, and an affinity the program set itself is left alone.
//!
//! The program is placed by round robin (the default): the shell's first
//! exec goes to core 0, and each fork before it moves the shell's cursor
//! on by one core (`/bin/true; exec` lands on core 1). Server 0, which holds
//! the root, runs on core 0 (server i is pinned to core i).

use atoll_tests::{atoll, compile_probe, output_within, MOUNT, RUN_LIMIT};

const BUSY: &str = include_str!("msgbound/busy.c");

/// The CPUs this process may run on, which the instance places programs
/// on (not `available_parallelism`, which also counts cgroup quotas).
fn cpus() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let list = line(&status, "Cpus_allowed_list:");
    cpu_list(list).len()
}

/// Run the probe as the first exec of a 2-server instance, placed on
/// `core`, with the probe's option `how` ("", "own" or "helper"); its
/// output and the instance's counters.
fn busy(mode: &str, core: usize, how: &str) -> (String, serde_json::Value) {
    let dir = tempfile::tempdir().unwrap();
    let bin = compile_probe(dir.path(), "busy", BUSY);
    let json = dir.path().join("stats.json");
    let mut cmd = atoll();
    cmd.args(["run", "--memory", "64M", "--servers", "2", "--stats-json"])
        .arg(&json)
        .arg("--")
        .args([
            "sh",
            "-c",
            &format!(
                "{}exec {} $ROOT/f {how}",
                "/bin/true; ".repeat(core),
                bin.display()
            ),
        ])
        .env("ROOT", MOUNT)
        .env("ATOLL_MOVES", mode);
    let out = output_within(cmd, RUN_LIMIT);
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stats = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    (stdout, stats)
}

fn line<'a>(out: &'a str, key: &str) -> &'a str {
    out.lines()
        .find_map(|l| l.strip_prefix(key))
        .unwrap_or_else(|| panic!("no {key} in {out}"))
        .trim()
}

/// The CPUs of a `Cpus_allowed_list` ("0-1,3").
fn cpu_list(s: &str) -> Vec<usize> {
    let mut v = vec![];
    for part in s.split(',') {
        match part.split_once('-') {
            Some((a, b)) => v.extend(a.parse::<usize>().unwrap()..=b.parse().unwrap()),
            None => v.push(part.parse().unwrap()),
        }
    }
    v
}

#[test]
fn a_thread_busy_with_the_server_on_its_core_moves_off_that_core() {
    if cpus() < 2 {
        eprintln!("one CPU: nowhere to move to");
        return;
    }
    let (out, stats) = busy("always", 0, "");
    let allowed = cpu_list(line(&out, "kernel "));
    assert!(!allowed.is_empty() && !allowed.contains(&0), "{out}");
    // The program still sees every core of the instance.
    assert_eq!(line(&out, "seen "), cpus().to_string(), "{out}");
    let moves = stats["counters"]["msgbound.moves"].as_u64().unwrap_or(0);
    assert!(moves >= 1, "{}", stats["counters"]);
}

#[test]
fn a_thread_busy_with_a_server_on_another_core_moves_onto_that_core() {
    if cpus() < 2 {
        return;
    }
    let (out, stats) = busy("always", 1, "");
    assert_eq!(cpu_list(line(&out, "kernel ")), [0], "{out}");
    assert_eq!(line(&out, "seen "), cpus().to_string(), "{out}");
    let moves = stats["counters"]["msgbound.moves"].as_u64().unwrap_or(0);
    assert!(moves >= 1, "{}", stats["counters"]);
}

#[test]
fn with_moves_off_the_thread_stays_where_it_was_placed() {
    if cpus() < 2 {
        return;
    }
    for core in [0, 1] {
        let (out, stats) = busy("off", core, "");
        assert_eq!(cpu_list(line(&out, "kernel ")), [core], "{out}");
        assert_eq!(line(&out, "seen "), cpus().to_string(), "{out}");
        assert_eq!(stats["counters"]["msgbound.moves"].as_u64(), None);
    }
}

#[test]
fn an_affinity_the_program_chose_is_left_alone() {
    if cpus() < 2 {
        return;
    }
    let (out, stats) = busy("always", 0, "own");
    assert_eq!(cpu_list(line(&out, "kernel ")), [0], "{out}");
    // Its own affinity is what it sees.
    assert_eq!(line(&out, "seen "), "1", "{out}");
    assert_eq!(stats["counters"]["msgbound.moves"].as_u64(), None);
}

#[test]
fn a_helper_thread_pinned_by_the_program_leaves_the_other_threads_to_atoll() {
    if cpus() < 2 {
        return;
    }
    // Affinity is per thread: the helper's pin is the program's (it sees
    // its one CPU), while the main thread, and the child it forks, stay
    // atoll's to move off server 0's core and see every core.
    let (out, stats) = busy("always", 0, "helper");
    assert_eq!(line(&out, "helper seen "), "1", "{out}");
    let allowed = cpu_list(line(&out, "kernel "));
    assert!(!allowed.is_empty() && !allowed.contains(&0), "{out}");
    assert_eq!(line(&out, "seen "), cpus().to_string(), "{out}");
    let moves = stats["counters"]["msgbound.moves"].as_u64().unwrap_or(0);
    assert!(moves >= 1, "{}", stats["counters"]);
}
