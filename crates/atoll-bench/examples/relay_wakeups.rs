//! Sleeps per remote call, by thread: where a remote round trip
//! (`atoll bench --hosts 3`, `remote_rtt_ns`) waits.
//!
//! ```sh
//! sudo target/release/examples/relay_wakeups target/release/atoll 20000
//! sudo target/release/examples/relay_wakeups target/release/atoll idle
//! sudo target/release/examples/relay_wakeups target/release/atoll 20000 --without X
//! ```
//!
//! Starts three nodes in network namespaces (as the bench does), makes
//! null calls from the last host to a server on the first, and prints for
//! each kind of thread of every process involved (the nodes, the file
//! servers, this client) how often it went to sleep per call (voluntary
//! context switches: each is a wake-up someone paid for), how often it
//! was switched out while runnable (yields, preemption) and its CPU time
//! per call. Counts, not times: they move far less with the machine's
//! load than the round trip does.
//!
//! `idle`: instead, one remote program on each of the other hosts that
//! has made calls and then sleeps, and the CPU time every thread used
//! over 10 s (an idle image must stay idle: no polling while nothing is
//! owed).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use atoll_bench::hosts::{null_rtt_ns, Cluster};

#[derive(Default, Clone, Copy)]
struct Counts {
    sleeps: u64,
    switched: u64,
    /// Clock ticks of user and system time.
    ticks: u64,
}

/// The parent of process `pid`.
fn parent(pid: &str) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(1).map(str::to_string)
}

/// Is `pid` this process or one it started (at any depth)?
fn ours(pid: &str, me: &str) -> bool {
    let mut p = pid.to_string();
    for _ in 0..32 {
        if p == me {
            return true;
        }
        match parent(&p) {
            Some(q) if q != "0" => p = q,
            _ => return false,
        }
    }
    false
}

/// Every thread of every `atoll` process this one started and of this
/// one, by "process name/thread name", summed.
fn snapshot() -> BTreeMap<String, Counts> {
    let me = std::process::id().to_string();
    let mut out: BTreeMap<String, Counts> = BTreeMap::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return out;
    };
    for p in procs.flatten() {
        let pid = p.file_name().to_string_lossy().to_string();
        if !pid.chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).to_string())
            .collect();
        let is_atoll = args.first().is_some_and(|a| a.ends_with("/atoll"));
        if pid != me && !(is_atoll && ours(&pid, &me)) {
            continue;
        }
        let what = if pid == me {
            "client".to_string()
        } else if args.iter().any(|a| a == "node") {
            let run = args.iter().find(|a| a.contains("/run")).cloned();
            format!("node{}", run.and_then(|r| r.chars().last()).unwrap_or('?'))
        } else {
            args.get(1).cloned().unwrap_or_default()
        };
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for t in tasks.flatten() {
            let dir = t.path();
            let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
            let status = std::fs::read_to_string(dir.join("status")).unwrap_or_default();
            let field = |name: &str| -> u64 {
                status
                    .lines()
                    .find_map(|l| l.strip_prefix(name))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0)
            };
            let stat = std::fs::read_to_string(dir.join("stat")).unwrap_or_default();
            // Fields after the command's closing parenthesis: utime is the
            // 12th, stime the 13th.
            let rest: Vec<&str> = stat
                .rsplit_once(')')
                .map(|(_, r)| r.split_whitespace().collect())
                .unwrap_or_default();
            let tick = |i: usize| rest.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
            let c = out.entry(format!("{what}/{}", comm.trim())).or_default();
            c.sleeps += field("voluntary_ctxt_switches:");
            c.switched += field("nonvoluntary_ctxt_switches:");
            c.ticks += tick(11) + tick(12);
        }
    }
    out
}

/// The proxies' timing of the calls' legs (`calltime.rs`), from `atoll
/// status --json` at the last node (its own counters beside the first
/// node's): network leg ns and calls, server leg ns and calls, calls
/// whose reply the first node's pump left to its watcher.
fn legs(c: &Cluster, atoll: &std::path::Path) -> [u64; 5] {
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", c.namespace(2)])
        .arg(atoll)
        .args(["status", "--json", "--runtime-dir"])
        .arg(&c.dirs[2])
        .env_remove("ATOLL_SOCKET")
        .env_remove("LD_PRELOAD")
        .output();
    let v: serde_json::Value = out
        .ok()
        .and_then(|o| serde_json::from_slice(&o.stdout).ok())
        .unwrap_or_default();
    let get = |k: &str| {
        v.pointer(&format!("/counters/{k}"))
            .and_then(|x| x.as_u64())
            .unwrap_or(0)
    };
    [
        get("node_wire.network_leg_ns"),
        get("node_wire.network_leg_calls"),
        get("node.server_leg_ns"),
        get("node.server_leg_calls"),
        get("node.replies_handed_off"),
    ]
}

/// A remote call split into its legs: the program and its node's proxy
/// (the rest of the round trip), the network (both crossings and the first
/// node's proxy), the server (and the hand-offs to it).
fn print_legs(rtt_ns: f64, before: &[u64; 5], after: &[u64; 5]) {
    let per = |i: usize| {
        let calls = after[i + 1].saturating_sub(before[i + 1]);
        match calls {
            0 => f64::NAN,
            n => after[i].saturating_sub(before[i]) as f64 / n as f64,
        }
    };
    let (net, server) = (per(0), per(2));
    println!(
        "legs (µs): program and edge {:.1}, network and head {:.1}, server {:.1} \
         (calls timed: {}, {}; replies handed off: {})",
        (rtt_ns - net) / 1e3,
        (net - server) / 1e3,
        server / 1e3,
        after[1].saturating_sub(before[1]),
        after[3].saturating_sub(before[3]),
        after[4].saturating_sub(before[4]),
    );
}

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().collect();
    let atoll = PathBuf::from(
        args.get(1)
            .ok_or("usage: relay_wakeups ATOLL [CALLS|idle] [NODE OPTIONS...]")?,
    );
    let idle = args.get(2).is_some_and(|a| a == "idle");
    let calls: u32 = args.get(2).and_then(|n| n.parse().ok()).unwrap_or(20_000);
    let mut c = Cluster::new(3)?;
    // Options after the count go to every node (`--without ...`).
    let mut opts = vec!["--servers", "2", "--memory", "512M"];
    opts.extend(args.iter().skip(3).map(String::as_str));
    c.start_nodes(&atoll, &opts)?;
    if idle {
        return idle_cpu(&c, &atoll);
    }
    let socket = c.socket(2).ok_or("node 2 has no boot socket")?;
    null_rtt_ns(&socket, 2_000)?;
    let before = snapshot();
    let legs_before = legs(&c, &atoll);
    let t = Instant::now();
    let rtt = null_rtt_ns(&socket, calls)?;
    let wall = t.elapsed();
    let after = snapshot();
    let legs_after = legs(&c, &atoll);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "{} calls ({} with warm-up) in {wall:?}, {:.1} µs per call; load {}",
        calls,
        calls + calls / 10,
        rtt / 1e3,
        load.split_whitespace().next().unwrap_or("?")
    );
    print_legs(rtt, &legs_before, &legs_after);
    // The client's warm-up calls are counted too: divide by all of them.
    let n = f64::from(calls + calls / 10);
    let tick_us = 1e6 / 100.0;
    println!(
        "{:<28} {:>8} {:>9} {:>8}",
        "thread", "sleeps", "switched", "CPU µs"
    );
    for (name, a) in &after {
        let b = before.get(name).copied().unwrap_or_default();
        let (s, w, k) = (
            a.sleeps - b.sleeps,
            a.switched - b.switched,
            a.ticks - b.ticks,
        );
        if s + w + k == 0 {
            continue;
        }
        println!(
            "{name:<28} {:>8.2} {:>9.2} {:>8.1}",
            s as f64 / n,
            w as f64 / n,
            k as f64 * tick_us / n
        );
    }
    Ok(())
}

/// CPU time per thread over 10 s with an idle remote program on hosts 1
/// and 2 (each made calls, then sleeps).
fn idle_cpu(c: &Cluster, atoll: &std::path::Path) -> Result<(), String> {
    let mut sleepers = Vec::new();
    for k in [1, 2] {
        let child = c
            .exec(
                atoll,
                k,
                "ls $ROOT > /dev/null; echo x > $ROOT/idle$$; sleep 13",
            )
            .spawn()
            .map_err(|e| e.to_string())?;
        sleepers.push(child);
    }
    std::thread::sleep(std::time::Duration::from_secs(2));
    let before = snapshot();
    std::thread::sleep(std::time::Duration::from_secs(10));
    let after = snapshot();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "idle, 10 s; load {}",
        load.split_whitespace().next().unwrap_or("?")
    );
    let mut per_process: BTreeMap<String, u64> = BTreeMap::new();
    for (name, a) in &after {
        let b = before.get(name).copied().unwrap_or_default();
        let process = name.split('/').next().unwrap_or("?").to_string();
        let ticks = a.ticks.saturating_sub(b.ticks);
        *per_process.entry(process).or_default() += ticks;
        if a.sleeps > b.sleeps || ticks > 0 {
            println!(
                "{name:<28} sleeps {:>6} CPU {:.2} s",
                a.sleeps.saturating_sub(b.sleeps),
                ticks as f64 / 100.0
            );
        }
    }
    for (p, t) in per_process {
        println!("{p:<28} CPU {:.2} s", t as f64 / 100.0);
    }
    for mut s in sleepers {
        let _ = s.wait();
    }
    Ok(())
}
