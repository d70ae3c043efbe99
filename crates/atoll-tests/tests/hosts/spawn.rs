//! Remote spawn across hosts (fos §4.2 spawning): an `execve` placed on
//! another node runs there, behind a proxy on the caller's host.

use std::time::{Duration, Instant};

use atoll_tests::OutputBounded as _;
use atoll_tests::{atoll_bin, normalized, run_on_host};

use super::{cluster, on, text, LIMIT};

/// The network namespace a program on host `k` runs in, as it reports it
/// (what tells hosts apart: they share the machine's file system).
const NET_MARKER: &str = "readlink /proc/self/ns/net";

/// fos §4.2 spawning: an `execve` placed on another node
/// (`ATOLL_NODE_PLACEMENT`) runs there; its output comes back through the
/// proxy that stays with the caller, and its status is the caller's.
#[test]
fn a_program_execd_on_one_host_runs_on_another_and_its_status_is_the_callers() {
    let Some(c) = cluster() else { return };
    let a = text(&on(&c, 0, NET_MARKER));
    let cc = text(&on(&c, 2, NET_MARKER));
    assert_ne!(a, cc, "hosts A and C must differ");
    let got = on(
        &c,
        0,
        r#"
        export ATOLL_NODE_PLACEMENT=rank:2
        readlink /proc/self/ns/net
        (cd /usr/bin && ./readlink /proc/self/ns/net)
        ATOLL_NODE_PLACEMENT=rank:0 /usr/bin/python3 -I -S -c 'import os; pid = os.posix_spawn("/usr/bin/readlink", ["readlink", "/proc/self/ns/net"], dict(os.environ, ATOLL_NODE_PLACEMENT="rank:2")); print("spawned", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))'
        sh -c 'echo out; echo err >&2; exit 7'; echo "status $?"
        seq 1 3000 | md5sum
        cd $ROOT && mkdir -p there && cd there && /bin/sh -c 'pwd; echo made-on-c > f'
        cat f
        "#,
    );
    let want_sum = std::process::Command::new("bash")
        .args(["-c", "seq 1 3000 | md5sum"])
        .output_bounded()
        .unwrap();
    assert_eq!(
        text(&got),
        format!(
            "{cc}{cc}{cc}spawned 0\nout\nstatus 7\n{}/atoll/there\nmade-on-c\n",
            text(&want_sum)
        )
    );
    assert_eq!(String::from_utf8_lossy(&got.stderr), "err\n");
    // Placed on the caller's own node, or left local: it stays on A.
    let here = on(
        &c,
        0,
        "ATOLL_NODE_PLACEMENT=rank:0 readlink /proc/self/ns/net",
    );
    assert_eq!(text(&here), a);
    // From an edge to the first node (the servers' host) as well.
    let b_to_a = on(
        &c,
        1,
        "ATOLL_NODE_PLACEMENT=rank:0 readlink /proc/self/ns/net",
    );
    assert_eq!(text(&b_to_a), a);
}

/// Pipelines through atoll pipes (on the first host's servers) whose
/// stages run on other hosts give the bytes and statuses of tmpfs.
#[test]
fn a_pipeline_with_stages_on_other_hosts_is_as_on_tmpfs() {
    let Some(c) = cluster() else { return };
    let script = r#"
        R=ATOLL_NODE_PLACEMENT
        env $R=rank:2 seq 1 200000 | md5sum
        seq 1 50000 | env $R=rank:2 tr 1 x | env $R=rank:0 md5sum
        head -c 300000 /dev/zero | env $R=rank:2 wc -c
        env $R=rank:0 seq 1 100000 | head -3; echo "${PIPESTATUS[@]}"
        env $R=rank:2 sh -c 'exit 3' | env $R=rank:0 cat; echo "${PIPESTATUS[@]}"
        "#;
    let (dir, host) = run_on_host(script);
    assert!(host.status.success());
    let (_, want, _) = normalized(&host, dir.path());
    // From host B: stages on C and on the first host.
    assert_eq!(text(&on(&c, 1, script)), want);
    // The stages did run there.
    let cc = text(&on(&c, 2, NET_MARKER));
    let placed = on(
        &c,
        1,
        "env ATOLL_NODE_PLACEMENT=rank:2 readlink /proc/self/ns/net | tr a-z A-Z",
    );
    assert_eq!(text(&placed), cc.to_uppercase());
}

/// A remote program killed by a signal (its own, or one relayed by the
/// proxy) makes the proxy die of the same signal.
#[test]
fn a_remote_program_killed_by_a_signal_reports_it() {
    let Some(c) = cluster() else { return };
    let cc = text(&on(&c, 2, NET_MARKER));
    let got = on(
        &c,
        0,
        r#"
        export ATOLL_NODE_PLACEMENT=rank:2
        sh -c 'readlink /proc/self/ns/net; kill -TERM $$'; echo "status $?"
        sh -c 'readlink /proc/self/ns/net > $ROOT/m; exec sleep 30' & p=$!
        until [ -s $ROOT/m ]; do :; done
        kill -USR1 $p; wait $p; echo "status $?"
        cat $ROOT/m
        "#,
    );
    assert_eq!(text(&got), format!("{cc}status 143\nstatus 138\n{cc}"));
}

/// A remote program's stdio is flow-controlled as a pipe is: a writer
/// faster than its reader is held back instead of queued without bound in
/// another host's memory, both ways.
#[test]
fn a_fast_writer_to_or_from_a_remote_program_is_held_back() {
    let Some(c) = cluster() else { return };
    // Python counts what it managed to write in about two seconds, with
    // its reader asleep for four; the count goes to stderr.
    let writer = r#"/usr/bin/python3 -I -S -c 'import os, sys, time
t, n, b = time.time(), 0, b"x" * 65536
while time.time() - t < 2: n += os.write(1, b)
sys.stderr.write("%d\n" % n)'"#;
    let got = on(
        &c,
        0,
        &format!(
            r#"
            R=ATOLL_NODE_PLACEMENT
            # Into a remote program that does not read yet.
            {writer} 2>$ROOT/n1 | env $R=rank:2 sh -c 'sleep 4; cat > /dev/null'
            # Out of a remote program whose reader does not read yet.
            env $R=rank:2 {writer} 2>$ROOT/n2 | (sleep 4; cat > /dev/null)
            cat $ROOT/n1 $ROOT/n2
            "#
        ),
    );
    let counts: Vec<u64> = text(&got)
        .lines()
        .map(|l| {
            l.trim()
                .parse()
                .unwrap_or_else(|_| panic!("not a count: {}", text(&got)))
        })
        .collect();
    assert_eq!(counts.len(), 2, "{}", text(&got));
    eprintln!("written ahead of the reader: {counts:?} bytes");
    // Linux holds such a writer at a pipe's 64 KiB; the relay adds its
    // window (256 KiB) and the socket buffers between the hosts.
    for n in counts {
        assert!(n < 32 << 20, "{n} bytes written ahead of the reader");
    }
}

/// The host running a remote program dies: its proxy ends with status 127
/// and one line on stderr within the link's silence bound, never hangs.
#[test]
fn the_proxy_of_a_program_on_a_host_that_dies_fails_quickly() {
    let Some(mut c) = cluster() else { return };
    let mut busy = c
        .exec(
            &atoll_bin(),
            0,
            "ATOLL_NODE_PLACEMENT=rank:2 sh -c 'echo up > $ROOT/up; exec sleep 20'; echo \"status $?\"",
        )
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while text(&on(&c, 1, "cat $ROOT/up 2>/dev/null || true")) != "up\n" {
        assert!(t.elapsed() < LIMIT, "the remote program never ran");
        std::thread::sleep(Duration::from_millis(50));
    }
    c.kill(2);
    let killed = Instant::now();
    let status = loop {
        if let Some(s) = busy.try_wait().unwrap() {
            break s;
        }
        assert!(
            killed.elapsed() < Duration::from_secs(5),
            "the proxy hangs after its program's host died"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    let out = busy.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(status.success(), "{err}");
    assert_eq!(text(&out), "status 127\n", "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("lost node"), "{err}");
}
