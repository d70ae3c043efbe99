//! Pipes whose size changes (`F_SETPIPE_SZ`/`F_GETPIPE_SZ`) and large
//! writes (which atoll posts as tickets its readers copy from, Cosh §5):
//! two C probes check Linux's answers on the host and the same answers
//! from atoll pipes in every island (Cosh §3: the islands are
//! indistinguishable). `pipesize/probe.c`: sizes, `EBUSY`, `EPERM`, and a
//! ring that grows and shrinks while a writer and a reader stream bytes
//! through it. `pipesize/large.c`: order, `PIPE_BUF` atomicity beside a
//! large write, readiness and `FIONREAD` while a writer is blocked, a
//! write cut by a signal, a bad buffer, and a writer killed mid-transfer.

use atoll_tests::OutputBounded as _;
use atoll_tests::{atoll, compile_probe, require};

const PROBE: &str = include_str!("pipesize/probe.c");
const STEPS: [&str; 3] = ["size ok", "eperm ok", "stream ok"];
const LARGE: &str = include_str!("pipesize/large.c");
const LARGE_STEPS: [&str; 6] = [
    "order ok",
    "atomic ok",
    "readiness ok",
    "signal ok",
    "efault ok",
    "killed ok",
];

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).to_string()
}

fn check(out: &std::process::Output, where_: &str) {
    check_steps(out, where_, &STEPS);
}

fn check_steps(out: &std::process::Output, where_: &str, steps: &[&str]) {
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "{where_}: probe failed:\n{stdout}\n{}",
        text(&out.stderr)
    );
    for step in steps {
        assert!(stdout.contains(step), "{where_}: {stdout}");
    }
}

#[test]
fn pipe_sizes_are_linux_s_on_the_host() {
    require("cc");
    let dir = tempfile::tempdir().unwrap();
    let bin = compile_probe(dir.path(), "pipesize", PROBE);
    check(
        &std::process::Command::new(&bin).output_bounded().unwrap(),
        "host",
    );
}

#[test]
fn atoll_pipes_grow_and_shrink_as_linux_s_in_every_island() {
    require("cc");
    let dir = tempfile::tempdir().unwrap();
    let bin = compile_probe(dir.path(), "pipesize", PROBE);
    for island in ["coherent", "incoherent", "copy"] {
        // The copy island moves every byte in 8 KiB messages: a shorter
        // stream keeps its run short.
        let total = if island == "copy" {
            "8388608"
        } else {
            "67108864"
        };
        let out = atoll()
            .arg("run")
            .args(["--memory", "128M", "--servers", "2", "--island", island])
            .args(["--pipes", "atoll", "--"])
            .arg(&bin)
            .arg(total)
            .output_bounded()
            .expect("spawn atoll");
        check(&out, island);
    }
}

#[test]
fn large_writes_behave_as_linux_s_on_the_host() {
    require("cc");
    let dir = tempfile::tempdir().unwrap();
    let bin = compile_probe(dir.path(), "large", LARGE);
    let out = std::process::Command::new(&bin).output_bounded().unwrap();
    check_steps(&out, "host", &LARGE_STEPS);
}

#[test]
fn large_writes_to_atoll_pipes_behave_as_linux_s_in_every_island() {
    require("cc");
    let dir = tempfile::tempdir().unwrap();
    let bin = compile_probe(dir.path(), "large", LARGE);
    for island in ["coherent", "incoherent", "copy"] {
        let out = atoll()
            .arg("run")
            .args(["--memory", "256M", "--servers", "2", "--island", island])
            .args(["--pipes", "atoll", "--"])
            .arg(&bin)
            .output_bounded()
            .expect("spawn atoll");
        check_steps(&out, island, &LARGE_STEPS);
    }
}

/// A large write that a signal cuts has put what fits in the pipe, as
/// Linux: a reader thread took one byte, the handler raised, and the next
/// byte is still there to read (CPython's `test_io`
/// `test_interrupted_write_buffered`, which hung when a large write went
/// straight to a ticket).
#[test]
fn a_cut_large_write_leaves_what_fits_in_the_pipe() {
    let script = r#"
import os, threading, signal
def alarm(sig, frame): 1/0
signal.signal(signal.SIGALRM, alarm)
r, w = os.pipe()
got = []
t = threading.Thread(target=lambda: got.append(os.read(r, 1)), daemon=True)
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM])
t.start()
signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGALRM])
wio = open(w, "wb", closefd=False)
signal.alarm(1)
try:
    wio.write(b"xy" * (4 * 1024 * 1024 // 2 + 1))
except ZeroDivisionError:
    print("cut")
signal.alarm(0)
t.join(10)
print(got, os.read(r, 1))
"#;
    let host = std::process::Command::new("python3")
        .args(["-c", script])
        .output_bounded()
        .unwrap();
    assert_eq!(text(&host.stdout), "cut\n[b'x'] b'y'\n");
    let mut cmd = atoll();
    cmd.args(["run", "--servers", "2", "--", "python3", "-c", script]);
    let out = atoll_tests::output_within(cmd, atoll_tests::RUN_LIMIT);
    assert_eq!(
        text(&out.stdout),
        text(&host.stdout),
        "{}",
        text(&out.stderr)
    );
}
