//! `atoll bench co --quick` (the CI smoke run of the clustered-object
//! measurements) runs and prints every row of its report.

use std::process::Command;

#[test]
fn bench_co_quick_prints_every_row() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("co.json");
    let out = Command::new(env!("CARGO_BIN_EXE_atoll"))
        .args(["bench", "co", "--quick", "--max-threads", "3", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for variant in [
        "lock",
        "atomic",
        "per-core unpadded",
        "per-core padded",
        "clustered",
    ] {
        for threads in 1..=3 {
            let row = stdout.lines().find(|l| {
                l.strip_prefix(variant).is_some_and(|rest| {
                    rest.split_whitespace().next() == Some(&threads.to_string())
                })
            });
            assert!(
                row.is_some(),
                "no ladder row {variant} {threads}:\n{stdout}"
            );
        }
    }
    for op in [
        "call, direct (no table)",
        "call through the translation table",
        "call through a miss",
        "mediator attach",
        "call through the mediator",
        "mediator detach",
        "mediator attach, under load",
        "mediator detach, under load",
        "null hot-swap, uncontended",
        "null hot-swap, under load",
    ] {
        assert!(
            stdout.lines().any(|l| l.starts_with(op) && l.contains('[')),
            "no row {op:?}:\n{stdout}"
        );
    }
    assert!(
        stdout.contains("17.84 µs") && stdout.contains("27.6 µs"),
        "{stdout}"
    );
    assert!(stdout.contains("none lost or repeated"), "{stdout}");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(v["co"]["ladder"].as_array().unwrap().len(), 15);
    assert!(v["co"]["null_swap_loaded_us"]["median"].as_f64().unwrap() > 0.0);
}
