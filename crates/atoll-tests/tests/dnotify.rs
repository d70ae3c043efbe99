//! dnotify (`fcntl(dirfd, F_NOTIFY, mask)`) on atoll directories: the
//! signals a process receives for changes it, its child and other
//! processes make are those it receives on a tmpfs directory (signal,
//! `si_fd`, `si_code`, `si_band`, how many, one-shot and multishot, the
//! registration's end at a mask of nothing and at the close of a
//! duplicate, a registration kept across `execve`), a process in
//! `pause()` wakes for another's change, and
//! stress-ng's dnotify stressor reports no failure.

use atoll_tests::{assert_same_on_tmpfs, compile_probe, require, run_in_atoll};

/// Instance shapes: a directory's entries spread over three servers; one
/// server's directories on two servers; shared memory without coherence;
/// no shared memory at all.
const SHAPES: [&[&str]; 4] = [
    &["--servers", "3", "--distribute", "all"],
    &["--servers", "2"],
    &["--incoherent"],
    &["--island", "copy"],
];

fn probe() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = compile_probe(dir.path(), "probe", include_str!("dnotify/probe.c"));
    let bin = bin.display().to_string();
    (dir, bin)
}

/// Every step of the probe (registrations with and without
/// `DN_MULTISHOT`, masks with and without the event, `F_SETSIG` to a
/// real-time signal before and after `F_NOTIFY`, plain `SIGIO`, changes
/// by the process and by a child, two registrations of two descriptors)
/// prints what tmpfs prints.
#[test]
fn signals_are_those_of_tmpfs() {
    let (_dir, bin) = probe();
    let script = format!(
        r#"
        mkdir "$ROOT/t" || exit 1
        {bin} steps "$ROOT/t"
        echo "exit $?"
        "#
    );
    for shape in SHAPES {
        let out = assert_same_on_tmpfs(shape, &script, true);
        assert!(
            out.contains("oneshot create a: RT1 fd=w code=3"),
            "{shape:?}: {out}"
        );
        assert!(out.contains("oneshot create b: none"), "{shape:?}: {out}");
        assert!(out.ends_with("exit 0\n"), "{shape:?}: {out}");
    }
}

/// A registration of a descriptor kept open across `execve` goes on
/// signalling the new image, and ends with its close there.
#[test]
fn a_registration_survives_execve() {
    let (_dir, bin) = probe();
    let script = format!(
        r#"
        mkdir "$ROOT/t" || exit 1
        {bin} exec "$ROOT/t"
        echo "exit $?"
        "#
    );
    for shape in [SHAPES[0], SHAPES[2]] {
        let out = assert_same_on_tmpfs(shape, &script, true);
        assert!(out.contains("after exec: RT1 fd=w"), "{shape:?}: {out}");
    }
}

/// A process waiting in `pause()` for `SIGIO` wakes when another process
/// creates an entry in the directory it registered.
#[test]
fn pause_wakes_for_another_process_create() {
    let (_dir, bin) = probe();
    let script = format!(
        r#"
        set -e
        mkdir "$ROOT/d"
        {bin} wait "$ROOT/d" > "$ROOT/log" &
        p=$!
        until [ -e "$ROOT/ready" ]; do sleep 0.02; done
        bash -c 'touch "$ROOT/d/x"'
        wait $p
        cat "$ROOT/log"
        "#
    );
    for shape in [SHAPES[0], SHAPES[3]] {
        let out = assert_same_on_tmpfs(shape, &script, true);
        assert_eq!(out, "waiting\nwoken\n", "{shape:?}");
    }
}

/// The host directories the signals come from go with the registrations:
/// none is left once the probe closed its descriptors.
#[test]
fn nothing_is_left_behind() {
    let (_dir, bin) = probe();
    let script = format!(
        r#"
        mkdir "$ROOT/t" || exit 1
        {bin} steps "$ROOT/t" > /dev/null
        cd "$(dirname "$ATOLL_SOCKET")" && ls -A dnotify/
        echo "exit $?"
        "#
    );
    let out = run_in_atoll(&["--servers", "3", "--distribute", "all"], &script);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        text,
        "exit 0\n",
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// stress-ng's dnotify stressor, more workers than cores, in a directory
/// spread over three servers: every change brings its signal.
#[test]
fn stress_ng_dnotify_reports_no_failure() {
    require("stress-ng");
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get()) + 1;
    let script = format!(
        r#"
        mkdir "$ROOT/t" || exit 1
        cd "$ROOT/t"
        stress-ng --temp-path "$ROOT/t" --dnotify {workers} -t 5 2>&1
        echo "exit $?"
        "#
    );
    let out = run_in_atoll(&["--servers", "3", "--distribute", "all"], &script);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("successful run completed"), "{text}");
    assert!(!text.contains("fail") && !text.contains("error"), "{text}");
    assert!(text.ends_with("exit 0\n"), "{text}");
}

/// What a registration costs, as stress-ng's dnotify stressor makes them
/// (open the directory, `F_SETSIG`, one-shot `F_NOTIFY`, create, close,
/// unlink), on tmpfs and in the mount (docs/BENCHMARKS.md, "dnotify").
/// `cargo test --release -p atoll-tests --test dnotify
/// measure_registration_cost -- --ignored --nocapture`
#[test]
#[ignore]
fn measure_registration_cost() {
    let (_dir, bin) = probe();
    let script = format!(
        r#"
        mkdir "$ROOT/t" || exit 1
        {bin} time1000 "$ROOT/t"
        "#
    );
    let shm = tempfile::tempdir_in("/dev/shm").expect("tmpfs directory");
    let host = std::process::Command::new("bash")
        .args(["-c", &script])
        .env("ROOT", shm.path())
        .output()
        .expect("bash");
    println!("tmpfs: {}", String::from_utf8_lossy(&host.stdout));
    for shape in [&["--servers", "1"][..], SHAPES[0]] {
        let out = run_in_atoll(shape, &script);
        println!("{shape:?}: {}", String::from_utf8_lossy(&out.stdout));
    }
}
