//! The SUD net under stress: a C probe that issues raw system calls, forks
//! (libc and raw), clones with a new stack, creates threads through our
//! wrapper and through libc's own `pthread_create` (trapped clone3),
//! posix_spawns, runs system/popen/vfork, installs its own SIGSYS handler,
//! raises SIGSYS, runs a signal handler that traps, and blocks every signal.
//! Its stdout must be identical with and without the library.

mod common;

use std::collections::BTreeMap;

use common::{command, compile_probe, run, stderr, stdout, Preload};

struct Probe {
    _tmp: tempfile::TempDir,
    exe: std::path::PathBuf,
    data: std::path::PathBuf,
}

fn probe() -> Probe {
    let tmp = tempfile::tempdir().unwrap();
    let exe = compile_probe("sud_probe", tmp.path());
    let data = tmp.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("a.txt"), "hello\n").unwrap();
    std::fs::write(data.join("b"), "").unwrap();
    Probe {
        _tmp: tmp,
        exe,
        data,
    }
}

fn run_probe(p: &Probe, how: Preload, extra: &[(&str, &str)]) -> std::process::Output {
    let mut c = command(p.exe.to_str().unwrap(), how);
    c.arg(&p.data);
    for (k, v) in extra {
        c.env(k, v);
    }
    run(c)
}

/// Parse `traps openat=N getdents64=N ...` from the probe's stderr.
fn trap_line(err: &str) -> BTreeMap<String, u64> {
    let line = err
        .lines()
        .find(|l| l.starts_with("traps "))
        .unwrap_or_else(|| panic!("no trap line in {err:?}"));
    line[6..]
        .split_whitespace()
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap();
            (k.to_string(), v.parse().unwrap())
        })
        .collect()
}

#[test]
fn probe_output_is_identical_with_sud_armed() {
    let p = probe();
    let native = run_probe(&p, Preload::None, &[]);
    assert!(native.status.success(), "{}", stdout(&native));
    let out = stdout(&native);
    for expect in [
        "entries 4",
        "fork child exit 3",
        "raw fork child exit 5",
        "clone child exit 11",
        "threads 4",
        "libc threads 4",
        "spawned",
        "popen from-popen",
        "sigsys handler kept 1",
        "sigsys raised handled 1",
        "usr1 handled 1",
        "blocked, entries 4",
        "raw mask usr2 1 usr1 0",
        "raw query usr2 1",
        "raw bad set efault 1",
        "SigBlk:\t0000000000000800",
        "altstack kept 1",
        "done",
    ] {
        assert!(
            out.contains(expect),
            "native output lacks {expect:?}: {out}"
        );
    }
    let sud = run_probe(&p, Preload::SelfTest, &[]);
    assert!(sud.status.success(), "{}\n{}", stdout(&sud), stderr(&sud));
    assert_eq!(stdout(&sud), out);
}

#[test]
fn raw_system_calls_are_counted_as_traps() {
    let p = probe();
    let o = run_probe(&p, Preload::SelfTest, &[]);
    assert!(o.status.success());
    let t = trap_line(&stderr(&o));
    // 4 wrapper threads + 2 libc threads, 50 raw directory scans each,
    // plus the main thread's own: every one is an openat and ≥ 2
    // getdents64 through syscall(), which no wrapper can see.
    assert!(t["openat"] >= 300, "{t:?}");
    assert!(t["getdents64"] >= 600, "{t:?}");
    // libc's pthread_create ×2, posix_spawn, system, popen.
    assert!(t["clone3"] >= 5, "{t:?}");
    // glibc's clone() with a new stack.
    assert!(t["clone"] >= 1, "{t:?}");
}

#[test]
fn without_the_library_no_trap_line_is_printed() {
    let p = probe();
    let o = run_probe(&p, Preload::None, &[]);
    assert!(!stderr(&o).contains("traps "));
}

#[test]
fn trap_stats_file_gets_a_line_per_process() {
    let p = probe();
    let stats = p.data.parent().unwrap().join("stats.txt");
    let o = run_probe(
        &p,
        Preload::SelfTest,
        &[("ATOLL_TRAP_STATS", stats.to_str().unwrap())],
    );
    assert!(o.status.success());
    let text = std::fs::read_to_string(&stats).unwrap();
    let mut pids = std::collections::BTreeSet::new();
    let mut exit_groups = 0;
    for line in text.lines() {
        let mut parts = line.split_whitespace();
        let pid: u32 = parts.next().unwrap().parse().unwrap();
        pids.insert(pid);
        for kv in parts {
            let (nr, n) = kv.split_once(':').unwrap();
            let (nr, n): (u32, u64) = (nr.parse().unwrap(), n.parse().unwrap());
            assert!(n > 0);
            if nr == libc::SYS_exit_group as u32 {
                exit_groups += n;
            }
        }
    }
    // The probe and its children (fork, raw fork, clone, system's shell…)
    // each report under their own pid.
    assert!(pids.len() >= 5, "{text}");
    assert!(exit_groups >= 4, "{text}");
}
