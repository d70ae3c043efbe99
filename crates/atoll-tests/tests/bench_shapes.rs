//! `atoll bench --systems atoll+KEY=VALUE+…`: any `atoll run` shape as a
//! system of its own, beside the default `atoll`, named as given; an
//! option `atoll run` does not take skips that system with the reason, and
//! a name that is neither is refused before anything runs.

use atoll_tests::{atoll, output_within, RUN_LIMIT};

fn tiny_bench(systems: &str, json: &std::path::Path) -> std::process::Output {
    let mut cmd = atoll();
    cmd.args([
        "bench",
        "--tiny",
        "--workloads",
        "creates",
        "--systems",
        systems,
        "--procs",
        "1",
        "--no-rpc",
        "--startup-spawns",
        "0",
        "--json",
    ])
    .arg(json);
    output_within(cmd, RUN_LIMIT)
}

#[test]
fn atoll_plus_systems_run_the_shape_they_name() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let out = tiny_bench(
        "atoll,atoll+servers=3+poll=block,atoll+servers=2+no-such-option=1",
        &json,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let results = v["results"].as_array().unwrap();
    let servers_of = |system: &str| -> usize {
        let r = results
            .iter()
            .find(|r| r["system"] == system)
            .unwrap_or_else(|| panic!("no result for {system}: {v}"));
        assert!(r["error"].is_null(), "{system}: {r}");
        r["counters"]["servers"].as_array().expect("servers").len()
    };
    // Three servers, whatever this machine's default is.
    assert_eq!(servers_of("atoll+servers=3+poll=block"), 3);
    // The default: half the usable cores, at least one.
    let usable = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert_eq!(servers_of("atoll"), (usable / 2).clamp(1, 64));
    assert!(
        err.contains("atoll+servers=3+poll=block: 3 server(s) (--servers), poll block (--poll)"),
        "{err}"
    );
    let skipped = v["skipped"].as_array().unwrap();
    assert!(
        skipped
            .iter()
            .any(|s| s["what"] == "atoll+servers=2+no-such-option=1"
                && s["reason"].as_str().unwrap().contains("no-such-option")),
        "{skipped:?}"
    );
}

#[test]
fn a_system_name_that_is_no_shape_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = tiny_bench("atoll+", &dir.path().join("r.json"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("unknown system \"atoll+\""), "{err}");
}
