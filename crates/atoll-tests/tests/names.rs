//! Names and fleets (fos §3.3): the file servers form the fleet
//! `/fs/server` and the scheduling servers `/sched/core`; `--fleet-policy`
//! decides which file server takes an object that may live anywhere (an
//! anonymous pipe); `atoll status --json` lists fleets, members, policies
//! and restarts.

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
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert_eq!(String::from_utf8_lossy(&bad.stderr).lines().count(), 1);
}
