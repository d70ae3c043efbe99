//! Fault containment (fos §3.5): `atoll chaos` kills or stalls a file
//! server of a running instance. Without a journal to rebuild it from
//! (`--without recovery`), a killed server takes only the calls that
//! need it: they fail with `EIO`, nothing hangs, every other call goes on,
//! and `atoll status` shows the server down (`recovery.rs` has the
//! default, where it is rebuilt). A stalled server delays its
//! clients and then serves them as if nothing happened.

use atoll_tests::OutputBounded as _;
use std::process::Stdio;
use std::time::{Duration, Instant};

use atoll_tests::{atoll, output_within, Booted, RUN_LIMIT};

fn chaos(inst: &Booted, args: &[&str]) {
    let out = inst.chaos(args);
    assert!(
        out.status.success(),
        "chaos {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn health(inst: &Booted, server: usize) -> serde_json::Value {
    inst.status()["health"][server].clone()
}

/// Without recovery, four processes create, rename and read in one
/// distributed directory (its entries on all three servers) while a
/// server that holds neither
/// the root nor the directory's inode is killed: every call either works
/// or fails with `EIO` ("Input/output error", no other error), the work
/// ends, files away from the dead server stay readable, new programs still
/// start, and the instance stops cleanly.
#[test]
fn a_killed_file_server_fails_only_the_calls_that_need_it() {
    let inst = Booted::new(&["--servers", "3", "--without", "recovery"]);
    // An inode number names its owner in its top byte.
    let ino = inst.distributed_dir_with_files();
    let victim = if ino >> 56 == 2 { "1" } else { "2" };

    let work = r#"
        cd "$ROOT/d"
        for w in 1 2 3 4; do
          (
            for i in $(seq 400); do
              echo "$w.$i" > "n$w-$i" && mv "n$w-$i" "m$w-$i" && cat "m$w-$i" >/dev/null
              echo "status $?"
            done
          ) 2>"/tmp/faults-$$-$w.err" &
        done
        wait
        # One file per worker: their messages must not interleave.
        cat /tmp/faults-$$-*.err | grep -v 'Input/output error$' | sed 's/^/other error: /'
        rm -f /tmp/faults-$$-*.err
    "#;
    let mut cmd = inst.command(work);
    cmd.stdin(Stdio::null());
    let started = Instant::now();
    let runner = std::thread::spawn(move || output_within(cmd, RUN_LIMIT));
    // Kill once the work is under way.
    let progress = || {
        inst.command(r#"test -e "$ROOT/d/m1-20""#)
            .status()
            .is_ok_and(|s| s.success())
    };
    while !progress() {
        assert!(started.elapsed() < RUN_LIMIT, "the workload never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    chaos(&inst, &["--kill", &format!("server:{victim}")]);
    let out = runner.join().expect("workload thread");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        started.elapsed() < RUN_LIMIT,
        "the workload hung after the kill: {stdout}"
    );
    let ok = stdout.lines().filter(|l| *l == "status 0").count();
    let failed = stdout.lines().filter(|l| *l == "status 1").count();
    assert_eq!(ok + failed, 1600, "every step reported: {stdout}");
    assert!(ok > 0 && failed > 0, "{ok} ok, {failed} failed: {stdout}");
    assert!(!stdout.contains("other error"), "only EIO: {stdout}");

    let h = health(&inst, victim.parse().unwrap());
    assert_eq!(h["state"], "down", "{h}");
    assert!(h["reason"].as_str().unwrap().contains("chaos"), "{h}");
    assert_eq!(health(&inst, 0)["state"], "up");

    // The files whose entries and inodes live elsewhere are intact.
    let check = inst
        .command(
            r#"n=0; for i in $(seq 90); do [ "$(cat "$ROOT/d/f$i" 2>/dev/null)" = "x$i" ] && n=$((n+1)); done; echo "intact $n"; echo alive"#,
        )
        .output_bounded()
        .expect("check");
    let text = String::from_utf8_lossy(&check.stdout);
    let intact: usize = text
        .lines()
        .find_map(|l| l.strip_prefix("intact "))
        .and_then(|n| n.parse().ok())
        .expect("a count");
    assert!(intact > 0 && intact < 90, "{text}");
    assert!(text.contains("alive"), "{text}");

    // A second kill of the same server is refused with one line.
    let again = atoll()
        .args([
            "chaos",
            "--id",
            &inst.id,
            "--kill",
            &format!("server:{victim}"),
        ])
        .output_bounded()
        .expect("chaos");
    assert_eq!(again.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&again.stderr).contains("already down"));
}

/// A stalled server serves nothing for a while, shows as stalled, and then
/// answers every call that waited for it, correctly.
#[test]
fn a_stalled_file_server_delays_its_clients_and_then_serves_them() {
    let inst = Booted::new(&["--servers", "2"]);
    let setup = inst
        .command(r#"echo before > "$ROOT/f""#)
        .output_bounded()
        .expect("setup");
    assert!(setup.status.success());
    chaos(&inst, &["--stall", "server:0", "--for", "1500ms"]);
    assert_eq!(health(&inst, 0)["state"], "stalled");
    let t = Instant::now();
    let out = inst
        .command(r#"cat "$ROOT/f" && echo after >> "$ROOT/f" && cat "$ROOT/f""#)
        .output_bounded()
        .expect("during the stall");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "before\nbefore\nafter\n"
    );
    assert!(
        t.elapsed() >= Duration::from_millis(500),
        "the call did not wait for the stalled server"
    );
    assert_eq!(health(&inst, 0)["state"], "up");
}

/// Bad targets are one-line errors, before anything happens.
#[test]
fn chaos_rejects_bad_targets_with_one_line() {
    let inst = Booted::new(&["--servers", "2"]);
    for (args, says) in [
        (&["--kill", "server:9"][..], "no file server 9"),
        (&["--kill", "srv:1"], "is not server:N"),
        (&["--stall", "server:0"], "--for"),
        (&["--stall", "server:0", "--for", "soon"], "invalid time"),
    ] {
        let out = atoll()
            .args(["chaos", "--id", &inst.id])
            .args(args)
            .output_bounded()
            .expect("chaos");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} accepted");
        assert!(err.contains(says), "{args:?}: {err}");
    }
    assert_eq!(health(&inst, 0)["state"], "up");
    assert_eq!(health(&inst, 1)["state"], "up");
}

/// A ring scribbled on (`--corrupt-ring`, what a hostile or broken client
/// could do) is dropped by its server, which counts it and goes on: the
/// client of that channel gets `EIO` there at once (no wait for a reply
/// that cannot come), its calls to the other server still work, and new
/// programs are served as before.
#[test]
fn a_corrupt_ring_costs_only_its_own_client() {
    let inst = Booted::new(&["--servers", "2"]);
    let setup = inst
        .command(r#"echo data > "$ROOT/f" && stat -c %i "$ROOT/f""#)
        .output_bounded()
        .expect("setup");
    assert!(setup.status.success());
    let ino: u64 = String::from_utf8_lossy(&setup.stdout)
        .trim()
        .parse()
        .unwrap();
    let owner = ino >> 56;
    let other = 1 - owner;
    // A program that holds the file open, waits for a line, then reads.
    let script = r#"
import os, sys
fd = os.open("/atoll/f", os.O_RDONLY)
print("ready", flush=True)
sys.stdin.readline()
try:
    # A new open needs a message to the file's owner.
    print("open", os.read(os.open("/atoll/f", os.O_RDONLY), 4))
except OSError as e:
    print("open failed:", e.strerror)
try:
    print("home", len(os.listdir("/atoll")) > 0)
except OSError as e:
    print("home failed:", e.strerror)
"#;
    let mut child = atoll()
        .args(["exec", "--id", &inst.id, "--", "python3", "-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python");
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    assert_eq!(line, "ready\n");
    chaos(&inst, &["--corrupt-ring", &format!("server:{owner}")]);
    std::thread::sleep(Duration::from_millis(300));
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), b"go\n").unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    assert!(child.wait().unwrap().success());
    assert!(rest.contains("open failed: Input/output error"), "{rest}");
    // The root's entries live on server 0: listing it still works for
    // this client unless server 0 dropped its channel.
    let home = if other == 0 {
        "home True"
    } else {
        "home failed: Input/output error"
    };
    assert!(rest.contains(home), "{rest}");
    let st = inst.status();
    assert_eq!(st["health"][owner as usize]["state"], "up");
    let after = inst
        .command(r#"cat "$ROOT/f""#)
        .output_bounded()
        .expect("a new program");
    assert_eq!(String::from_utf8_lossy(&after.stdout), "data\n");
}
