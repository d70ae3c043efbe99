//! Pipes whose size changes (`F_SETPIPE_SZ`/`F_GETPIPE_SZ`): a C probe
//! (`pipesize/probe.c`) checks Linux's answers on the host and the same
//! answers from atoll pipes in every island (Cosh §3: the islands are
//! indistinguishable), among them a ring that grows and shrinks while a
//! writer and a reader stream bytes through it.

use atoll_tests::{atoll, compile_probe, require};

const PROBE: &str = include_str!("pipesize/probe.c");
const STEPS: [&str; 3] = ["size ok", "eperm ok", "stream ok"];

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).to_string()
}

fn check(out: &std::process::Output, where_: &str) {
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "{where_}: probe failed:\n{stdout}\n{}",
        text(&out.stderr)
    );
    for step in STEPS {
        assert!(stdout.contains(step), "{where_}: {stdout}");
    }
}

#[test]
fn pipe_sizes_are_linux_s_on_the_host() {
    require("cc");
    let dir = tempfile::tempdir().unwrap();
    let bin = compile_probe(dir.path(), "pipesize", PROBE);
    check(&std::process::Command::new(&bin).output().unwrap(), "host");
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
            .output()
            .expect("spawn atoll");
        check(&out, island);
    }
}
