//! `atoll run --trace FILE`: a trace of a known workload holds its
//! messages as valid Chrome trace JSON (a track per server and per client
//! lane), and `atoll trace summarize` reads it back.

use atoll_tests::OutputBounded as _;
use atoll_tests::{atoll, output_within, RUN_LIMIT};

#[test]
fn a_known_workload_traces_its_messages() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.json");
    let mut cmd = atoll();
    cmd.args(["run", "--servers", "2", "--memory", "64M", "--distribute", "all", "--trace"])
        .arg(&file)
        .args([
            "--",
            "sh",
            "-c",
            "mkdir /atoll/d && for i in $(seq 20); do echo x > /atoll/d/f$i; done && rm /atoll/d/f1 && echo $$",
        ]);
    let out = output_within(cmd, RUN_LIMIT);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shell_pid: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&file).unwrap()).expect("valid JSON");
    let evs = v["traceEvents"].as_array().expect("traceEvents");
    let named = |n: &str| {
        evs.iter()
            .any(|e| e["ph"] == "M" && e["args"]["name"].as_str().is_some_and(|s| s.starts_with(n)))
    };
    for track in ["atoll servers", "server 0", "server 1", "lane 0"] {
        assert!(named(track), "no track {track}");
    }
    assert!(
        named(&format!("pid {shell_pid} ")),
        "no track for the shell {shell_pid}"
    );
    let server: Vec<&serde_json::Value> = evs
        .iter()
        .filter(|e| e["ph"] == "X" && e["cat"] == "server")
        .collect();
    let client = evs
        .iter()
        .filter(|e| e["ph"] == "X" && e["cat"] == "client")
        .count();
    assert_eq!(server.len(), client, "each message on both tracks");
    let count = |name: &str, f: &dyn Fn(&serde_json::Value) -> bool| {
        server.iter().filter(|e| e["name"] == name && f(e)).count()
    };
    // 20 creating opens, each one message doing several steps (Hare §3.7.4),
    // spread over both servers of a distributed directory.
    assert!(count("Open", &|e| e["args"]["coalesced"] == true) >= 20);
    for s in [0, 1] {
        assert!(
            count("Open", &|e| e["tid"] == s) > 0,
            "no Open on server {s}"
        );
    }
    assert!(count("MakeNode", &|_| true) >= 1);
    assert!(count("Unlink", &|_| true) >= 1);
    for e in &server {
        assert!(e["ts"].as_f64().unwrap() >= 0.0 && e["dur"].as_f64().unwrap() >= 0.0);
        assert!(e["args"]["request_bytes"].as_u64().unwrap() > 0);
    }

    let mut sum = atoll();
    sum.args(["trace", "summarize"]).arg(&file);
    let out = output_within(sum, RUN_LIMIT);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let open = text
        .lines()
        .find(|l| l.starts_with("Open "))
        .unwrap_or_else(|| panic!("no Open row:\n{text}"));
    let n: usize = open.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert_eq!(n, count("Open", &|_| true), "{text}");
    assert!(
        text.starts_with(&format!("{} messages", server.len())),
        "{text}"
    );
}

#[test]
fn an_unwritable_trace_path_is_a_usage_error_before_anything_runs() {
    let out = atoll()
        .args([
            "run",
            "--trace",
            "/nonexistent/dir/t.json",
            "--",
            "sh",
            "-c",
            "echo ran",
        ])
        .output_bounded()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty(), "the command ran");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("--trace /nonexistent/dir/t.json"), "{err}");
}

#[test]
fn summarize_rejects_what_is_not_a_trace() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("x.json");
    std::fs::write(&f, b"{\"not\": 1}").unwrap();
    let out = atoll()
        .args(["trace", "summarize"])
        .arg(&f)
        .output_bounded()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("atoll: error:") && err.contains("not a trace"),
        "{err}"
    );
}
