//! The harness end to end with real worker processes (the stand-alone
//! `atoll-bench` binary plays the `atoll` binary): start barrier, timing,
//! checks and JSON, on the host file system.

use std::path::PathBuf;
use std::time::Duration;

use atoll_bench::harness::{run_job, WorkerCmd};
use atoll_bench::workloads::{prepare_inputs, Job, Size, Workload};
use atoll_bench::Target;

fn worker_cmd() -> WorkerCmd {
    WorkerCmd {
        exe: PathBuf::from(env!("CARGO_BIN_EXE_atoll-bench")),
        prefix: vec!["bench-worker".into()],
        timeout: Duration::from_secs(300),
    }
}

#[test]
fn every_workload_runs_in_separate_processes_and_passes_its_checks() {
    let t = tempfile::tempdir().unwrap();
    let runnable: Vec<Workload> = Workload::ALL
        .into_iter()
        .filter(|w| w.tools().iter().all(|t| atoll_bench::util::have_tool(t)))
        .collect();
    let inputs = prepare_inputs(&t.path().join("inputs"), Size::Tiny, None, &runnable).unwrap();
    let target = Target {
        dir: t.path().join("fs"),
        env: vec![("ATOLL_BENCH_TEST".into(), "1".into())],
        cpus: atoll_bench::rpc::allowed_cpus()
            .into_iter()
            .take(1)
            .collect(),
    };
    std::fs::create_dir(&target.dir).unwrap();
    for w in runnable {
        let job = Job {
            workload: w,
            size: Size::Tiny,
            dir: target.dir.join(w.name()),
            nworkers: 2,
            distribute: true,
            inputs: inputs.clone(),
        };
        let out = run_job(&job, &target, &worker_cmd(), None)
            .unwrap_or_else(|e| panic!("{}: {e:#}", w.name()));
        assert_eq!(out.reports.len(), job.roles().len(), "{}", w.name());
        assert!(out.ops > 0, "{}", w.name());
        // clean phase ran
        assert!(!job.dir.exists(), "{} left its run dir", w.name());
    }
}

#[test]
fn a_failing_worker_fails_the_run_with_its_message() {
    let t = tempfile::tempdir().unwrap();
    let target = Target {
        dir: t.path().join("fs"),
        ..Target::default()
    };
    std::fs::create_dir(&target.dir).unwrap();
    // A run directory below a regular file: no phase can work there.
    let file = target.dir.join("not-a-dir");
    std::fs::write(&file, b"x").unwrap();
    let job = Job {
        workload: Workload::Creates,
        size: Size::Tiny,
        dir: file.join("sub"),
        nworkers: 1,
        distribute: true,
        inputs: Default::default(),
    };
    let err = run_job(&job, &target, &worker_cmd(), None).unwrap_err();
    let msg = format!("{err:#}");
    assert!(
        msg.contains("phase failed") && msg.contains("not-a-dir/sub"),
        "{msg}"
    );
    assert!(!msg.contains("Stack backtrace"), "{msg}");
}

#[test]
fn bench_command_writes_json_in_the_documented_shape() {
    let t = tempfile::tempdir().unwrap();
    let json = t.path().join("out.json");
    let plots = t.path().join("plots");
    let st = std::process::Command::new(env!("CARGO_BIN_EXE_atoll-bench"))
        .args(["bench", "--tiny", "--systems", "tmpfs", "--procs", "1,2"])
        .args(["--workloads", "creates,renames,pfind-sparse"])
        .args(["--rpc-iters", "300", "--json"])
        .arg(&json)
        .arg("--plot")
        .arg(&plots)
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert!(v["machine"]["cpus"].as_u64().unwrap() >= 1);
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), 6);
    for r in results {
        assert!(r["error"].is_null(), "{r}");
        assert_eq!(r["system"], "tmpfs");
        assert!(r["ops_per_sec"].as_f64().unwrap() > 0.0);
        assert_eq!(r["ratio_vs_tmpfs"].as_f64(), Some(1.0));
        assert!(r["procs"].as_u64().is_some() && r["workload"].is_string());
    }
    for k in [
        "atoll_spin_ns",
        "atoll_block_ns",
        "raw_pingpong_ns",
        "null_syscall_ns",
        "pipe_ns",
    ] {
        assert!(v["rpc"].get(k).is_some(), "rpc.{k}");
    }
    assert!(v["targets"].as_array().unwrap().len() >= 5);
    assert!(plots.join("ratio-p1.svg").exists());
    assert!(plots.join("scaling-tmpfs.svg").exists());
}

#[test]
fn raw_argument_entry_points_parse_and_reject() {
    let e = atoll_bench::main_from_args(
        vec![
            "--systems".into(),
            "tmpfs".into(),
            "--procs".into(),
            "x".into(),
        ],
        &mut atoll_bench::NoAtoll,
    )
    .unwrap_err();
    assert!(e.to_string().contains("--procs"), "{e}");
    assert!(atoll_bench::worker_main_from_args(vec!["--phase".into(), "bogus".into()]).is_err());
}
