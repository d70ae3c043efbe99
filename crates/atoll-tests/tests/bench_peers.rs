//! `atoll bench` with the peers' own benchmarks (dbench, fs_mark, fio,
//! postmark, an extract of a Debian source tarball) at the smallest size on
//! tmpfs and on atoll: the JSON has, under each program's workload name, a
//! result per system with the program's own metric as the throughput and a
//! ratio to tmpfs, or, when the program is absent, the one-line reason it
//! was skipped.

use atoll_tests::{atoll, output_within, RUN_LIMIT};

/// Workload name, the program it runs, the unit of its own metric.
const PEERS: [(&str, &str, &str); 6] = [
    ("dbench", "dbench", "MB/s"),
    ("fs_mark", "fs_mark", "files/s"),
    ("fio-randrw", "fio", "IOPS"),
    ("fio-seq", "fio", "MiB/s"),
    ("postmark", "postmark", "transactions/s"),
    ("extract-debian", "tar", "entries/s"),
];

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
        .unwrap_or(false)
}

#[test]
fn bench_reports_each_peer_benchmark_with_its_own_metric_or_a_skip_reason() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("peers.json");
    let names: Vec<&str> = PEERS.iter().map(|p| p.0).collect();
    let mut cmd = atoll();
    cmd.args([
        "bench",
        "--tiny",
        "--workloads",
        &names.join(","),
        "--systems",
        "tmpfs,atoll",
        "--procs",
        "1",
        "--no-rpc",
        "--startup-spawns",
        "0",
        "--json",
    ])
    .arg(&json);
    let out = output_within(cmd, RUN_LIMIT);
    assert!(
        out.status.success(),
        "atoll bench failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let results = v["results"].as_array().unwrap();
    let skipped = v["skipped"].as_array().unwrap();
    for (name, program, unit) in PEERS {
        let skip = skipped.iter().find(|s| s["what"] == name);
        if let Some(s) = skip {
            let reason = s["reason"].as_str().unwrap();
            assert!(
                !reason.is_empty() && !reason.contains('\n'),
                "{name}: skip reason {reason:?}"
            );
            // An installed program is run; only extract-debian may also
            // be skipped for its tarball (no network to fetch it).
            if name != "extract-debian" {
                assert!(
                    !on_path(program),
                    "{name} skipped ({reason}) though {program} is installed"
                );
                assert!(reason.contains(program), "{name}: {reason}");
            }
            assert!(results.iter().all(|r| r["workload"] != name));
            continue;
        }
        for system in ["tmpfs", "atoll"] {
            let r = results
                .iter()
                .find(|r| r["workload"] == name && r["system"] == system)
                .unwrap_or_else(|| panic!("no {name} result on {system}"));
            assert!(r["error"].is_null(), "{name} on {system}: {}", r["error"]);
            assert_eq!(r["native_metric"], unit, "{name} on {system}");
            let native = r["native_value"].as_f64().unwrap();
            assert!(native > 0.0, "{name} on {system}: {native}");
            // The program's own metric is the throughput the ratios use.
            assert_eq!(r["ops_per_sec"].as_f64(), Some(native));
            assert!(r["ops"].as_u64().unwrap() > 0, "{name} on {system}");
        }
        let atoll_run = results
            .iter()
            .find(|r| r["workload"] == name && r["system"] == "atoll")
            .unwrap();
        assert!(
            atoll_run["ratio_vs_tmpfs"]
                .as_f64()
                .is_some_and(|x| x > 0.0),
            "{name}: no ratio to tmpfs"
        );
        // Each peer has its line among the targets.
        let goal = format!("atoll-{name}");
        assert!(
            v["targets"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t["name"] == goal.as_str() && t["value"].is_f64()),
            "no measured target {goal}"
        );
    }
}
