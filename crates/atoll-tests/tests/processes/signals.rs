//! Signals, job control and process groups of programs placed on other
//! cores: relayed through their proxies (`--exec-via spawn`) or sent to
//! them in place, exactly once, with stops mirrored and a ^C reaching
//! the whole tree, never atoll's servers.

use super::*;

#[test]
fn timeout_and_kill_reach_remote_programs() {
    require("timeout");
    let out = run_in_atoll(
        SPAWN,
        r#"
        timeout 1 sleep 71; echo "timeout $?"
        sleep 72 & pid=$!
        kill $pid; wait $pid; echo "kill $?"
        sleep 73 & pid=$!
        kill -KILL $pid; wait $pid; echo "kill -9 $?"
        ps_self() { for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline 2>/dev/null; echo; done; }
        ps_self | grep -c '^sleep 7[0123] $'
        "#,
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        text,
        "timeout 124\nkill 143\nkill -9 137\n0\n",
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(1), "grep -c found nothing");
}

/// Job control through a proxy, in a job-control shell (`set -m`: the job
/// has a process group of its own, as at a terminal): a SIGSTOP sent to the
/// proxy stops the program too (the server sees the proxy stop), a SIGTSTP
/// sent to the proxy is relayed and, once the program stops, the proxy
/// stops with the same signal (so the shell's `waitpid(WUNTRACED)` and
/// `jobs` see it stopped), and a SIGCONT sent to the job's group (as `fg`
/// and `bg` do) reaches the program, whose continue resumes the proxy.
/// Every wait is bounded; none is a timing threshold.
#[test]
fn stop_and_continue_reach_remote_programs() {
    // A command line no other test runs (`prog` finds it in /proc).
    let sleep = format!("sleep 79.{}", std::process::id());
    let script = r#"
        set -m
        st() { tr ' ' '\n' < /proc/$1/stat 2>/dev/null | sed -n 3p; }
        prog() { for p in /proc/[0-9]*; do
            [ "$(tr '\0' ' ' < $p/cmdline 2>/dev/null)" = "SLEEP " ] && echo ${p#/proc/}
        done; }
        until_() { for i in $(seq 1 1200); do eval "$1" && return; sleep 0.05; done; echo "never: $1"; }
        SLEEP & pid=$!
        until_ '[ -n "$(prog)" ]'; P=$(prog)
        kill -STOP $pid
        until_ '[ "$(st $P)" = T ]'
        echo "stop: $(st $pid) $(st $P)"
        kill -CONT $pid
        until_ '[ "$(st $P)" = S ]'
        echo "cont: $(st $pid) $(st $P)"
        kill -TSTP $pid
        # In a subshell: bash leaves a running loop when a job stops by
        # SIGTSTP (as on ^Z), and here the stop follows the kill.
        (until_ '[ "$(st $pid)" = T ]')
        echo "tstp: $(st $pid) $(st $P)"
        jobs
        kill -CONT -- -$pid
        until_ '[ "$(st $pid)" = S ] && [ "$(st $P)" = S ]'
        echo "group cont: $(st $pid) $(st $P)"
        jobs
        kill $pid; wait $pid; echo "then $?"
    "#
    .replace("SLEEP", &sleep);
    let out = assert_same(SPAWN, &script, false);
    assert_eq!(
        out,
        format!(
            "stop: T T\ncont: S S\ntstp: T T\n[1]+  Stopped                 {sleep}\n\
             group cont: S S\n[1]+  Running                 {sleep} &\nthen 143\n"
        )
    );
}

/// Every signal reaches a remote program exactly once, however it is sent:
/// to the proxy's pid (relayed), to the job's process group (the program
/// is in it, the proxy no longer is), by the terminal (the pty session
/// test). The probe counts deliveries; its report is requested through
/// the proxy *after* the signal, twice, so a copy relayed by the proxy
/// would be counted before the last report.
#[test]
fn signals_reach_a_remote_program_exactly_once() {
    require("cc");
    let dir = tempfile::tempdir().unwrap();
    let probe = compile_probe(dir.path(), "sigcount", include_str!("sigcount.c"));
    let log = dir.path().join("log");
    let script = format!(
        r#"
        P={probe}; L={log}
        ready() {{ for i in $(seq 1 1200); do grep -q ready $L && return; sleep 0.05; done; }}
        start() {{ : > $L; $P > $L & pid=$!; ready; }}
        # Totals once the signal arrived and two more reports went through
        # the proxy's relay behind it.
        settle() {{
          for i in $(seq 1 1200); do kill -40 $relay; sleep 0.05; tail -1 $L | grep -q "$1=1" && break; done
          n=$(grep -c = $L); kill -40 $relay; kill -40 $relay
          for i in $(seq 1 1200); do [ $(grep -c = $L) -ge $((n+2)) ] && break; sleep 0.05; done
          echo "$2: $(tail -1 $L)"; kill -KILL $relay; wait $pid 2>/dev/null; }}
        # Without job control (the program's caller is not a group leader).
        start; relay=$pid; kill -USR1 $pid; settle usr1 pid-usr1
        start; relay=$pid; kill -TERM $pid; settle term pid-term
        set -m
        # A job: the caller leads the job's process group.
        start; relay=$pid; kill -USR1 $pid; settle usr1 job-pid-usr1
        start; relay=$pid; kill -USR1 -- -$pid; settle usr1 job-group-usr1
        start; relay=$pid; kill -TERM -- -$pid; settle term job-group-term
        start; relay=$pid; kill -INT -- -$pid; settle int job-group-int
        # A job whose leader is a subshell: the caller is a member only.
        : > $L; (trap : USR1; $P > $L; :) & pid=$!; ready
        relay=$(cat /proc/$pid/task/*/children)
        kill -USR1 -- -$pid; settle usr1 member-group-usr1
        "#,
        probe = probe.display(),
        log = log.display(),
    );
    let out = run_in_atoll(SPAWN, &script);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "pid-usr1: usr1=1 term=0 int=0\n\
         pid-term: usr1=0 term=1 int=0\n\
         job-pid-usr1: usr1=1 term=0 int=0\n\
         job-group-usr1: usr1=1 term=0 int=0\n\
         job-group-term: usr1=0 term=1 int=0\n\
         job-group-int: usr1=0 term=0 int=1\n\
         member-group-usr1: usr1=1 term=0 int=0\n",
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// An interactive shell on a pseudo-terminal, driven as a user would (the
/// script in `processes/pty_session.py`): ^C ends a remote `sleep` and the
/// shell goes on; ^C reaches a program that catches it exactly once; ^Z
/// stops a remote job, `jobs` lists it Stopped, `fg` resumes it and ^C ends
/// it; a remote program reads a line typed at the terminal. The same
/// session runs without atoll first, so a failure there is the script's.
#[test]
fn an_interactive_shell_on_a_terminal_controls_remote_jobs() {
    require("python3");
    require("cc");
    let dir = tempfile::tempdir().unwrap();
    let probe = compile_probe(dir.path(), "sigcount", include_str!("sigcount.c"));
    let session = dir.path().join("pty_session.py");
    std::fs::write(&session, include_str!("pty_session.py")).unwrap();
    let shell = ["bash", "--norc", "--noprofile", "-i"];
    let run = |prefix: &[&str]| {
        let mut cmd = std::process::Command::new("python3");
        atoll_tests::with_default_interrupts(&mut cmd);
        cmd.arg(&session)
            .arg(&probe)
            .args(prefix)
            .args(shell)
            .env("LC_ALL", "C")
            .env_remove("ATOLL_SOCKET")
            .env_remove("LD_PRELOAD");
        atoll_tests::output_within(cmd, atoll_tests::RUN_LIMIT)
    };
    let host = run(&[]);
    assert!(
        host.status.success(),
        "without atoll: {}",
        String::from_utf8_lossy(&host.stderr)
    );
    let bin = atoll_tests::atoll_bin();
    let bin = bin.to_str().unwrap();
    let out = run(&[
        bin,
        "run",
        "--memory",
        "64M",
        "--placement",
        "round-robin",
        "--",
    ]);
    assert!(
        out.status.success() && out.stdout == b"ok\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `getppid()` of a remote program is the pid its parent knows as its
/// child's parent: the caller of `execve` stayed behind as a proxy, and the
/// program answers with the proxy's parent, on whatever core it runs; a
/// signal sent to that pid reaches the parent.
#[test]
fn getppid_of_a_remote_program_is_its_callers_parent() {
    let (out, counts) = run_round_robin(
        r#"
        echo $$
        for i in 1 2 3 4; do
            bash -c 'echo $PPID; grep Cpus_allowed_list /proc/self/status'
        done
        bash -c 'bash -c "echo \$PPID"; echo $$'
        trap 'echo got-usr1' USR1
        bash -c 'kill -USR1 $PPID'
        echo after
        "#,
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 13, "{text}");
    let outer = lines[0];
    for i in 0..4 {
        assert_eq!(lines[1 + 2 * i], outer, "$PPID of a remote bash: {text}");
        let list = lines[2 + 2 * i].split_whitespace().nth(1).unwrap();
        assert!(list.parse::<usize>().is_ok(), "not remote: {text}");
    }
    // One level down: the inner bash's parent is the middle bash.
    assert_eq!(lines[9], lines[10], "{text}");
    // A signal a remote program sends its parent reaches that parent.
    assert_eq!(&lines[11..], ["got-usr1", "after"], "{text}");
    let cores: Vec<String> = lines[2..9]
        .iter()
        .step_by(2)
        .map(|l| l.to_string())
        .collect();
    if std::thread::available_parallelism().map_or(1, |n| n.get()) >= 2 {
        assert!(
            cores.iter().any(|c| c != &cores[0]),
            "all on one core: {cores:?}"
        );
        assert!(
            counts.iter().filter(|(_, n)| *n > 0).count() >= 2,
            "{counts:?}"
        );
    }
}

#[test]
fn pipeline_stages_run_on_different_cores() {
    if cores() < 2 {
        eprintln!("one core: nothing to spread");
        return;
    }
    let (out, counts) = run_round_robin(
        r#"
        grep Cpus_allowed_list /proc/self/status | (grep Cpus_allowed_list /proc/self/status; cat)
        seq 1 20000 | sort -rn | head -2
        "#,
    );
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert_ne!(lines[0], lines[1], "both stages on one core: {text}");
    assert_eq!(&lines[2..], ["20000", "19999"]);
    assert!(
        counts.iter().filter(|(_, n)| *n > 0).count() >= 2,
        "execs on one core only: {counts:?}"
    );
}

/// Wait (bounded) for a child; kill it and fail if it hangs.
fn wait_bounded(child: &mut std::process::Child, what: &str) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st;
        }
        if start.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            panic!("{what} did not end");
        }
        sleep(Duration::from_millis(20));
    }
}

#[test]
fn interrupt_of_the_process_group_stops_the_whole_tree() {
    // A foreground pipeline of remote programs, as at a terminal: ^C sends
    // SIGINT to the whole group (atoll, bash, the proxies, the programs,
    // which joined their proxies' group).
    // Durations no other run on the machine uses: `running` looks at
    // every process, and another run's sleeps must not count as ours.
    let (first, second) = (
        format!("sleep 74.{}", std::process::id()),
        format!("sleep 76.{}", std::process::id()),
    );
    let mut child = atoll();
    let mut child = atoll_tests::with_default_interrupts(&mut child)
        .args(["run", "--memory", "64M", "--placement", "round-robin", "--"])
        .args([
            "bash",
            "-c",
            &format!("{first} | {second}; echo not-interrupted"),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("spawn atoll");
    while !(running(&first) && running(&second)) {
        assert!(child.try_wait().unwrap().is_none(), "atoll ended early");
        sleep(Duration::from_millis(20));
    }
    let pgid = child.id() as i32;
    // SAFETY: signalling the process group we created for this test.
    assert_eq!(unsafe { libc::kill(-pgid, libc::SIGINT) }, 0);
    let st = wait_bounded(&mut child, "atoll run after ^C");
    assert_eq!(st.code(), Some(128 + libc::SIGINT), "{st:?}");
    let mut out = String::new();
    use std::io::Read;
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    assert!(!out.contains("not-interrupted"), "{out}");
    assert!(
        !running(&first) && !running(&second),
        "programs left behind"
    );
}

#[test]
fn a_signal_to_the_job_s_process_group_does_not_reach_atoll_s_servers() {
    // GNU `timeout` (like a shell's `kill -TERM -PGID`) signals the whole
    // process group it leads. atoll's file and scheduling servers are not
    // part of the job: a program that ignores the signal goes on with the
    // same servers, none stopped, found dead and restarted.
    let script = r#"
        trap "" TERM
        servers() { pgrep -P $PPID -f '__(fs|sched)-server' | sort | tr '\n' ' '; }
        before=$(servers)
        sleep 3
        echo data > "$ROOT/f" && cat "$ROOT/f"
        [ -n "$before" ] && [ "$before" = "$(servers)" ] && echo same servers
    "#;
    let out = std::process::Command::new("timeout")
        .args(["-s", "TERM", "1"])
        .arg(atoll_tests::atoll_bin())
        .args(["run", "--memory", "64M", "--servers", "2", "--"])
        .args(["bash", "-c", script])
        .env("ROOT", MOUNT)
        .env_remove("LD_PRELOAD")
        .env_remove("ATOLL_SOCKET")
        .output_bounded()
        .expect("timeout atoll run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(124), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "data\nsame servers\n",
        "{stderr}"
    );
    assert!(!stderr.contains("restarted"), "{stderr}");
}
