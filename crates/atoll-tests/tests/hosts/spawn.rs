//! Remote spawn across hosts (fos §4.2 spawning): an `execve` placed on
//! another node runs there, behind a proxy on the caller's host.

use std::time::{Duration, Instant};

use atoll_tests::OutputBounded as _;
use atoll_tests::{atoll_bin, normalized, run_on_host};

use atoll_bench::hosts::Cluster;

use super::{cluster, on, text, HANG, LIMIT};

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

/// Job control across hosts: a stop sent to the proxy (^Z is SIGTSTP to
/// the foreground job) stops the program on its host, and the proxy stops
/// with it (the same signal: bash's `jobs` says "Stopped", not "Stopped
/// (signal)"); a SIGCONT to the proxy (`fg`, `bg`) continues both. States
/// are read from `/proc` (the hosts share one pid namespace).
#[test]
fn a_stop_and_continue_of_a_remote_program_s_proxy_reach_the_program() {
    let Some(c) = cluster() else { return };
    let got = on(
        &c,
        0,
        r#"
        set -m
        state() { read -r _ _ s _ < /proc/$1/stat; echo $s; }
        # Until process $1's state is (=) or is not (!=) $3, for 30 s
        # (a time bound, not a count of polls: a loaded machine polls
        # slowly).
        settle() {
            local end=$((SECONDS + 30))
            until [ "$(state $1)" $2 "$3" ]; do
                [ $SECONDS -gt $end ] && { echo "never $2 $3: $1"; return 1; }
                sleep 0.01
            done
        }
        # The job's line once bash saw it stop: the proxy's state is T
        # an instant before its parent is told, so `jobs` is polled too.
        stopped_job() {
            local end=$((SECONDS + 30))
            until jobs -l | grep -q Stopped; do
                [ $SECONDS -gt $end ] && break
                sleep 0.01
            done
            jobs -l | grep -o 'Stopped.*env' | sed 's/ *env//'
        }
        env ATOLL_NODE_PLACEMENT=rank:2 sh -c 'echo $$ > $ROOT/pid; exec sleep 30' & p=$!
        until [ -s $ROOT/pid ]; do :; done; read q < $ROOT/pid
        kill -TSTP $p
        settle $p = T; settle $q = T
        echo "stopped: proxy $(state $p) program $(state $q)"
        stopped_job
        kill -CONT $p
        # Continued, the program goes back to its sleep (S); the state
        # read the instant it left T may still be R.
        settle $q != T; settle $p != T
        settle $q = S && echo "continued: program S"
        # The program stopped on its host (not through the proxy): the
        # proxy stops alike, by SIGSTOP.
        kill -STOP $q
        settle $p = T
        echo "stopped there: proxy $(state $p)"
        stopped_job
        kill -CONT $p
        settle $q != T
        settle $q = S && echo "continued: program S"
        kill -TERM $p; wait $p; echo "status $?"
        "#,
    );
    assert_eq!(
        text(&got),
        "stopped: proxy T program T\nStopped\ncontinued: program S\n\
         stopped there: proxy T\nStopped (signal)\ncontinued: program S\nstatus 143\n"
    );
}

/// A SIGSTOP sent to the proxy itself, which it cannot catch, stops the
/// remote program too (the proxy's watcher process sees it stop and tells
/// the node, `node/watch.rs`), for longer than the link's 3 s silence
/// bound: the program makes no progress meanwhile (a counter it writes
/// does not move), and the SIGCONT continues both. Before, the program ran
/// on, and the silent proxy's link ended after 3 s, killing it.
#[test]
fn a_sigstop_to_a_remote_program_s_proxy_stops_the_program_until_continued() {
    let Some(c) = cluster() else { return };
    let got = on(
        &c,
        0,
        r#"
        state() { read -r _ _ s _ < /proc/$1/stat; echo $s; }
        # Until process $1's state is (=) or is not (!=) $3, for 30 s
        # (a time bound, not a count of polls: a loaded machine polls
        # slowly).
        settle() {
            local end=$((SECONDS + 30))
            until [ "$(state $1)" $2 "$3" ]; do
                [ $SECONDS -gt $end ] && { echo "never $2 $3: $1"; return 1; }
                sleep 0.01
            done
        }
        count() { cat $ROOT/count 2>/dev/null; }
        # Until the counter moves past $1, for 30 s.
        moves() {
            local end=$((SECONDS + 30))
            until [ "$(count)" != "$1" ]; do
                [ $SECONDS -gt $end ] && { echo "the counter stays at $1"; return; }
                sleep 0.05
            done
            echo "counting"
        }
        env ATOLL_NODE_PLACEMENT=rank:2 sh -c 'echo $$ > $ROOT/pid; i=0; while :; do i=$((i+1)); echo $i > $ROOT/count; sleep 0.05; done' & p=$!
        until [ -s $ROOT/pid ]; do :; done; read q < $ROOT/pid
        moves "$(count)"
        kill -STOP $p
        settle $q = T
        echo "stopped: proxy $(state $p) program $(state $q)"
        a=$(count); sleep 5; b=$(count)
        [ "$a" = "$b" ] && echo "no progress while stopped" || echo "progress while stopped: $a -> $b"
        kill -CONT $p
        # Continued, the program is back in its loop: asleep (S) most of
        # the time, running (R) in between, which a loaded machine makes
        # long; it must reach S, the counter must move.
        settle $q != T; settle $p != T
        settle $q = S && echo "continued: program S"
        moves "$(count)"
        kill -TERM $p; wait $p; echo "status $?"
        "#,
    );
    assert_eq!(
        text(&got),
        "counting\nstopped: proxy T program T\nno progress while stopped\n\
         continued: program S\ncounting\nstatus 143\n"
    );
}

/// An atoll pipe's write end a remote program inherited (not its stdout)
/// and closes: its reader sees end of file then, while the program still
/// runs, as after a local exec (the proxy lets its own ends go once the
/// program holds them).
#[test]
fn a_pipe_end_a_remote_program_closes_is_closed() {
    let Some(c) = cluster() else { return };
    let got = on(
        &c,
        0,
        r#"
        { env ATOLL_NODE_PLACEMENT=rank:2 sh -c 'echo $$ > $ROOT/pid; echo hi >&7; exec 7>&-; exec sleep 30' 7>&1 >/dev/null 2>&1 & } | cat
        read q < $ROOT/pid
        if [ -e /proc/$q ]; then echo "end of file while it runs"; else echo "end of file after it ended"; fi
        kill $q
        "#,
    );
    assert_eq!(text(&got), "hi\nend of file while it runs\n");
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
/// and one line on stderr, after the link's silence bound (3 s), never
/// hangs ([`HANG`]: a bound for a loaded machine).
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
            killed.elapsed() < HANG,
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

/// What a shell on host A does with descriptors it opened on the mount
/// while a program runs on host C (`$1`: where that program runs; empty:
/// here). fd 3 reads a file through one shared offset, fd 4 appends to a
/// log, fd 5 is a pipe's write end and fd 6 another's read end, fd 7 a
/// FIFO's write end (stdio stays the relay's: `/dev/null` here).
const INHERITED: &str = r#"
printf 'one\ntwo\nthree\nfour\n' > $ROOT/f
printf 'log\n' > $ROOT/log
run() { env ${1:+ATOLL_NODE_PLACEMENT=$1} "${@:2}"; }
exec 3<$ROOT/f 4>>$ROOT/log
read -r a <&3; echo "A read $a"
echo "A before" >&4
run "$1" sh -c 'readlink /proc/self/ns/net > $ROOT/where
  read -r b <&3; echo "C read $b" >&4; echo "C wrote" >&4' </dev/null >/dev/null
read -r a <&3; echo "A read $a"
echo "A after" >&4
exec 3<&- 4>&-
cat $ROOT/log
{ run "$1" sh -c 'echo "through fd 5" >&5; echo "not through stdout"' 5>&1 >/dev/null; } | cat
echo from-a | { run "$1" sh -c 'read -r x <&6; echo "C got $x"' 6<&0 </dev/null; }
run "$1" sh -c 'echo 3 >&3' 2>/dev/null; echo "closed 3: $?"
rm -f $ROOT/fifo; mkfifo $ROOT/fifo
cat $ROOT/fifo > $ROOT/from-fifo & r=$!
exec 7>$ROOT/fifo
run "$1" sh -c 'echo "through the fifo" >&7' </dev/null
exec 7>&-
wait $r; cat $ROOT/from-fifo
printf '1\n2\n3\n4\n5\n6\n' > $ROOT/lines
while read -r l; do echo "A $l"; run "$1" sh -c 'read -r x; echo "C $x"'; done < $ROOT/lines
run "$1" sh -c 'echo out; echo err >&2; echo "C wrote" >> $ROOT/o' > $ROOT/o 2>&1; cat $ROOT/o
printf 'x\ny\n' | run "$1" sh -c 'read -r x; echo "C $x"; echo "C to a pipe"' | { cat; echo end; }
run "$1" sh -c 'for i in 1 2 3 4 5 6; do echo o$i; echo e$i >&2; done' 2>&1
"#;

/// fos §4.2 spawning: a program placed on another host inherits the
/// caller's atoll descriptors as a local exec does: the same open
/// descriptions (shared offset, `O_APPEND`), pipes and FIFOs included; the
/// transcript is a local exec's on tmpfs.
#[test]
fn a_remote_program_inherits_the_callers_atoll_descriptors_as_on_tmpfs() {
    let Some(c) = cluster() else { return };
    let (dir, host) = run_on_host(&format!("set -- ''\n{INHERITED}"));
    assert!(host.status.success(), "{host:?}");
    let (_, want, _) = normalized(&host, dir.path());
    assert!(want.contains("C read two"), "{want}");
    let (a, cc) = (text(&on(&c, 0, NET_MARKER)), text(&on(&c, 2, NET_MARKER)));
    // From the servers' host to an edge, from an edge to an edge (B's
    // program on C), and from an edge to the servers' host.
    for (host, rank, there) in [(0, 2, &cc), (1, 2, &cc), (1, 0, &a)] {
        let got = on(&c, host, &format!("set -- rank:{rank}\n{INHERITED}"));
        let err = String::from_utf8_lossy(&got.stderr);
        assert_eq!(text(&got), want, "host {host} to {rank}: {err}");
        let ran = text(&on(&c, host, "cat $ROOT/where"));
        assert_eq!(&ran, there, "host {host}: ran on node {rank}");
    }
    // A host descriptor other than stdio cannot cross: the program finds
    // its number closed, as after `FD_CLOEXEC`.
    let host_fd = on(
        &c,
        0,
        "exec 7</etc/hostname; env ATOLL_NODE_PLACEMENT=rank:2 sh -c 'cat <&7' 2>/dev/null; echo $?",
    );
    assert_eq!(text(&host_fd), "2\n");
}

/// Open descriptions on the first node's file servers (`atoll status`).
fn open_descriptions(c: &Cluster) -> u64 {
    let out = std::process::Command::new(atoll_bin())
        .args(["status", "--json", "--runtime-dir"])
        .arg(&c.dirs[0])
        .env_remove("ATOLL_SOCKET")
        .env_remove("LD_PRELOAD")
        .output_bounded()
        .unwrap();
    assert!(out.status.success(), "status: {out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let servers = v["servers"].as_array().expect("servers");
    servers
        .iter()
        .map(|s| s["open_descriptions"].as_u64().expect("open_descriptions"))
        .sum()
}

/// Wait (bounded) until the first node's servers hold `want` open
/// descriptions; the count last seen.
fn settles_at(c: &Cluster, want: u64) -> u64 {
    let t = Instant::now();
    loop {
        let n = open_descriptions(c);
        if n == want || t.elapsed() > LIMIT {
            return n;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A program on C holding descriptions opened for it alone (`6<` …,
/// files on either server), which asks no server anything of its own
/// (a host cwd, stdio relayed): the servers know its session only by the
/// references. Returns the shell on A running it, the shell's stdout from
/// the program's `up` on, the pid of its proxy and its own (on C).
fn holder(c: &Cluster) -> (std::process::Child, impl std::io::BufRead, i32, i32) {
    use std::io::BufRead;
    let script = "cd /; env ATOLL_NODE_PLACEMENT=rank:2 sh -c 'echo up $$; exec sleep 1000' \\
        6<$ROOT/g 7<$ROOT/g1 8<$ROOT/g2 9<$ROOT/g3 10<$ROOT/g4 11<$ROOT/g5 &
        echo $!; wait $!; echo \"status $?\"";
    let mut shell = c
        .exec(&atoll_bin(), 0, script)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(shell.stdout.take().unwrap());
    let (mut proxy, mut program) = (None, None);
    while proxy.is_none() || program.is_none() {
        let mut line = String::new();
        assert!(out.read_line(&mut line).unwrap() > 0, "the holder ended");
        match line.trim().strip_prefix("up ") {
            Some(p) => program = p.parse::<i32>().ok(),
            None => proxy = line.trim().parse::<i32>().ok(),
        }
    }
    (shell, out, proxy.unwrap(), program.unwrap())
}

/// The rest of a holder's output once its shell ended.
fn rest(mut shell: std::process::Child, mut out: impl std::io::BufRead) -> String {
    let mut s = String::new();
    out.read_to_string(&mut s).unwrap();
    let _ = shell.wait();
    s
}

/// `kill -SIG pid`.
fn signal(pid: i32, sig: &str) {
    let st = std::process::Command::new("kill")
        .args([format!("-{sig}"), pid.to_string()])
        .status()
        .unwrap();
    assert!(st.success(), "kill -{sig} {pid}");
}

/// The description a remote program inherited goes when nothing holds it
/// any more, however the program ends: it exits (having never used it,
/// so its session made no call of its own), it is killed through its
/// proxy, its proxy is killed, its host dies.
#[test]
fn an_inherited_description_is_released_however_the_remote_program_ends() {
    let Some(mut c) = cluster() else { return };
    // Files on either server (names are spread over them).
    on(
        &c,
        0,
        "for f in g g1 g2 g3 g4 g5; do echo $f > $ROOT/$f; done",
    );
    let base = open_descriptions(&c);
    // Exits at once (from a host cwd, so that its client asks no server
    // anything: the servers know its session only by the reference), and
    // after reading it.
    on(
        &c,
        0,
        "cd /; env ATOLL_NODE_PLACEMENT=rank:2 sh -c 'exit 0' 6<$ROOT/g 7<$ROOT/g1 8<$ROOT/g2 9<$ROOT/g3 10<$ROOT/g4 11<$ROOT/g5
        env ATOLL_NODE_PLACEMENT=rank:2 sh -c 'cat <&6' 6<$ROOT/g",
    );
    assert_eq!(settles_at(&c, base), base, "after exits");
    // Killed by a signal the proxy relays.
    let (shell, out, proxy, _) = holder(&c);
    assert!(open_descriptions(&c) > base, "held while it runs");
    signal(proxy, "TERM");
    assert_eq!(rest(shell, out), "status 143\n");
    assert_eq!(settles_at(&c, base), base, "after a relayed kill");
    // Its proxy is killed: the node kills the program.
    let (shell, out, proxy, _) = holder(&c);
    signal(proxy, "KILL");
    assert_eq!(rest(shell, out), "status 137\n");
    assert_eq!(settles_at(&c, base), base, "after the proxy was killed");
    // Its host dies: the first node ends that host's sessions.
    let (shell, out, _, program) = holder(&c);
    c.kill(2);
    assert_eq!(rest(shell, out), "status 127\n");
    // A killed node leaves its programs behind (their calls fail): this
    // one ends here.
    signal(program, "KILL");
    assert_eq!(settles_at(&c, base), base, "after the node died");
}
