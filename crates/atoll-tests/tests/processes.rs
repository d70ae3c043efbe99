//! Processes across cores (Hare §3.6): `execve` placed on other cores'
//! scheduling servers, the caller staying behind as a proxy that reports
//! the program's exit status or death by signal and relays signals.
//!
//! The programs' own view is used to see where they ran: a remote program
//! is pinned to its core (`Cpus_allowed_list` in `/proc/self/status`), and
//! `--stats-json` counts execs per core.

use atoll_tests::OutputBounded as _;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Stdio;
use std::thread::sleep;
use std::time::{Duration, Instant};

use atoll_tests::{assert_same, atoll, compile_probe, require, run_in_atoll, MOUNT};

#[path = "processes/signals.rs"]
mod remote_signals;

/// Remote exec through the scheduling servers, the caller staying behind
/// as a proxy (`--exec-via spawn`): what the proxy tests below exercise.
const SPAWN: &[&str] = &["--placement", "round-robin", "--exec-via", "spawn"];

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Run `script` with `--placement round-robin`; its output and the execs
/// counted per core (`exec.per_core` of `--stats-json`).
fn run_round_robin(script: &str) -> (std::process::Output, Vec<(String, u64)>) {
    let dir = tempfile::tempdir().unwrap();
    let stats = dir.path().join("s.json");
    let opts = [
        "--placement",
        "round-robin",
        "--stats-json",
        stats.to_str().unwrap(),
    ];
    let out = run_in_atoll(&opts, script);
    (out, per_core(&stats))
}

/// `exec.per_core` of a `--stats-json` file.
fn per_core(stats: &Path) -> Vec<(String, u64)> {
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(stats).expect("stats file")).expect("stats JSON");
    let m = v["exec"]["per_core"]
        .as_object()
        .expect("exec.per_core in the statistics");
    m.iter()
        .map(|(k, n)| (k.clone(), n.as_u64().expect("count")))
        .collect()
}

/// Is a process with exactly this command line alive (ours)?
fn running(cmdline: &str) -> bool {
    let want: Vec<u8> = cmdline
        .split(' ')
        .flat_map(|w| w.bytes().chain(std::iter::once(0)))
        .collect();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
        .any(|e| std::fs::read(e.path().join("cmdline")).is_ok_and(|c| c == want))
}

#[test]
fn exit_codes_and_deaths_by_signal_are_reported_through_proxies() {
    assert_same(
        SPAWN,
        r#"
        /bin/true; echo "true $?"
        /bin/false; echo "false $?"
        bash -c 'exit 42'; echo "exit $?"
        sh -c 'kill -TERM $$'; echo "term $?"
        sh -c 'kill -KILL $$'; echo "kill $?"
        sh -c 'kill -SEGV $$'; echo "segv $?"
        /nonexistent/program 2>/dev/null; echo "missing $?"
        out=$(sh -c 'echo captured; exit 3'); echo "$out $?"
        "#,
        false,
    );
}

#[test]
fn remote_programs_run_pinned_on_the_chosen_cores() {
    let (out, counts) = run_round_robin(
        r#"
        for i in 1 2 3 4; do grep Cpus_allowed_list /proc/self/status; done
        "#,
    );
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    for l in &lines {
        let list = l.split_whitespace().nth(1).unwrap();
        assert!(
            list.parse::<usize>().is_ok(),
            "a remote program is pinned to one core: {l}"
        );
    }
    let total: u64 = counts.iter().map(|(_, n)| n).sum();
    assert!(total >= 4, "execs counted: {counts:?}");
}

/// A program pinned to one core still learns how many CPUs its work can
/// use: `sched_getaffinity` (`nproc`, Python's `os.sched_getaffinity`)
/// answers the cores the instance places programs on — all usable cores
/// when servers timeshare, the program cores with `--split` — so
/// `make -j$(nproc)` is not `-j1`. The kernel's affinity stays one core.
#[test]
fn programs_see_the_cpus_the_instance_places_them_on() {
    require("python3");
    let script = r#"
        nproc
        python3 -c 'import os; print(len(os.sched_getaffinity(0)))'
        grep Cpus_allowed_list /proc/self/status | awk '{print $2}'
    "#;
    let mut shapes = vec![(vec![], cores())];
    if cores() >= 2 {
        shapes.push((vec!["--split", "--servers", "1"], cores() - 1));
    }
    for (opts, want) in shapes {
        let out = run_in_atoll(&opts, script);
        let text = String::from_utf8_lossy(&out.stdout);
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            out.status.success() && lines.len() == 3,
            "{opts:?}: {out:?}"
        );
        assert_eq!(lines[0], want.to_string(), "nproc with {opts:?}");
        assert_eq!(lines[1], want.to_string(), "python with {opts:?}");
        assert!(
            lines[2].parse::<usize>().is_ok(),
            "still pinned to one core with {opts:?}: {}",
            lines[2]
        );
    }
}

/// By default a placed exec happens in place (`--exec-via place`): through
/// a chain of five execs the program keeps the caller's pid and parent, as
/// on the host, leaves no process behind, and runs pinned on the core
/// placement chose. (`--exec-via spawn` gives each exec a new pid.)
#[test]
fn an_exec_in_place_keeps_pid_and_parent_and_leaves_no_process() {
    let script = r#"
        cd "$ROOT"
        for i in 1 2 3 4; do
            printf 'echo "$$ $PPID"\nexec sh ./step%d.sh\n' $((i + 1)) > step$i.sh
        done
        printf 'echo "$$ $PPID"\ngrep Cpus_allowed_list /proc/self/status | wc -w\n' > step5.sh
        sh ./step1.sh
        # Nothing of the chain is left behind.
        pgrep -c -P $$ || true
    "#;
    for (opts, same_pid) in [(&[][..], true), (SPAWN, false)] {
        let out = run_in_atoll(opts, script);
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(out.status.success(), "{opts:?}: {out:?}");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 7, "{opts:?}: {text}");
        let pids: std::collections::BTreeSet<&str> = lines[..5].iter().copied().collect();
        assert_eq!(
            pids.len() == 1,
            same_pid,
            "{opts:?}: pid and parent per exec: {text}"
        );
        assert_eq!(lines[5], "2", "{opts:?}: pinned to one core: {text}");
        if same_pid {
            // (With proxies, `pgrep`'s own proxy is a child of the shell.)
            assert_eq!(lines[6], "0", "{opts:?}: no process left behind: {text}");
        }
    }
}

/// Lanes the instance made (`atoll status --json`) while its shell ran
/// `n` fork+exec+wait of `/bin/true` with its cwd in the mount.
fn lanes_made_by(inst: &Booted, n: u32) -> u64 {
    let before = inst.lanes_made();
    let out = inst.exec(&format!(
        "cd {MOUNT}; for i in $(seq {n}); do /bin/true; done; echo done"
    ));
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "done\n");
    inst.lanes_made() - before
}

/// A forked child that only execs a host program, and that program, ask
/// no server anything: the new image's `Reattach` comes without a lane and
/// none is made for the start (the new image's lane made it one; before
/// that, a lane for the hand-over, `NewLane`, made it two). The program's
/// client counters still reach server 0 as it exits, through the boot
/// thread (`BootRequest::Counters`): `traps` grows by at least one per
/// start (its `exit_group`, the child's `execve` carried over).
#[test]
fn a_fork_that_only_execs_a_host_program_makes_no_lane() {
    let inst = Booted::new();
    let traps_before = inst.client_traps();
    let few = lanes_made_by(&inst, 2);
    let many = lanes_made_by(&inst, 12);
    assert_eq!(
        many - few,
        0,
        "lanes per fork+exec ({few} for 2, {many} for 12)"
    );
    // The shell's own report comes with its exit; the 14 programs' with
    // theirs (the boot thread may still be passing the last ones on).
    let mut traps = inst.client_traps() - traps_before;
    for _ in 0..100 {
        if traps >= 14 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        traps = inst.client_traps() - traps_before;
    }
    assert!(traps >= 14, "traps reported: {traps}");
}

/// A program that traps 50 times (`--syscall-sites trap`, `syscall()`
/// from libc's text), then spawns `spawns` children of `/bin/true` with
/// `posix_spawn`: the traps the instance's clients reported in all.
fn traps_with_spawns(spawns: u32) -> u64 {
    require("cc");
    let dir = tempfile::tempdir().unwrap();
    let probe = compile_probe(
        dir.path(),
        "trapspawn",
        r#"
        #include <spawn.h>
        #include <stdlib.h>
        #include <sys/syscall.h>
        #include <sys/wait.h>
        #include <unistd.h>
        extern char **environ;
        int main(int argc, char **argv) {
            for (int i = 0; i < 50; i++) syscall(SYS_getppid);
            char *args[] = {"/bin/true", 0};
            for (int i = 0; i < atoi(argv[1]); i++) {
                pid_t p;
                int st;
                if (posix_spawn(&p, "/bin/true", 0, 0, args, environ) || waitpid(p, &st, 0) != p)
                    return 1;
            }
            return 0;
        }
        "#,
    );
    let json = dir.path().join("stats.json");
    let mut cmd = atoll();
    cmd.args([
        "run",
        "--memory",
        "64M",
        "--syscall-sites",
        "trap",
        "--stats-json",
    ])
    .arg(&json)
    .arg("--")
    .arg(&probe)
    .arg(spawns.to_string())
    .stdin(Stdio::null());
    let out = atoll_tests::output_within(cmd, atoll_tests::RUN_LIMIT);
    assert!(out.status.success(), "{out:?}");
    let stats: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    stats["counters"]["client.traps"].as_u64().unwrap_or(0)
}

/// What a process counted (its traps) it reports itself as it exits when
/// it spawns children: a `posix_spawn`ed child does not report the
/// spawner's counts again (it did, once per child: four spawns after 50
/// traps reported about 200 more than no spawn). The children's own and
/// the `waitpid`s add a few.
#[test]
fn a_spawned_child_does_not_report_its_spawner_s_counters() {
    let alone = traps_with_spawns(0);
    let spawning = traps_with_spawns(4);
    assert!(alone >= 50, "the 50 traps reported: {alone}");
    assert!(
        spawning < alone + 50,
        "traps reported: {alone} without spawns, {spawning} with 4"
    );
}

/// An exec hands the new image its session whole (the socket, the buffer
/// cache's and control block's descriptors, the instance information), so
/// the image joins without a round trip to the boot thread
/// (`BootRequest::Reattached`): both when a forked child that holds
/// nothing execs in its own session and when one holding an atoll
/// descriptor (`cat < f`: its stdin is an atoll file) execs in a child
/// session. The programs run as usual meanwhile.
#[test]
fn an_exec_hands_the_new_image_its_session_without_a_round_trip() {
    let inst = Booted::new();
    let handed = |st: &serde_json::Value| st["images_handed_over"].as_u64().expect("counter");
    let before = handed(&inst.status());
    let out = inst.exec(&format!(
        "cd {MOUNT}; for i in $(seq 6); do /bin/true; done; \
         for i in $(seq 6); do echo $i > f$i; cat < f$i > /dev/null; done; cat f1 f6"
    ));
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "1\n6\n");
    // 6 `true` and 7 `cat`.
    let joined = handed(&inst.status()) - before;
    assert!(joined >= 12, "images handed over: {joined}");
}

/// A forked child that execs in its own session (nothing in it to leave
/// behind) or, holding something, in a child session (an inherited atoll
/// fd, a lock, a failed exec first, an atoll program) runs as on Linux.
#[test]
fn programs_forked_from_a_shell_in_the_mount_see_the_same_files() {
    assert_same(
        &[],
        r#"
        cd "$ROOT"
        echo one > f; printf '#!/bin/sh\necho script "$@"; cat f\n' > s.sh; chmod +x s.sh
        for i in 1 2 3; do cat f; done
        ( exec cat f )
        /nonexistent/prog 2>/dev/null; echo "status $?"
        (cat f; echo two >> f) ; cat f
        exec 3< f; cat <&3; sh -c 'cat <&3' ; exec 3<&-
        flock f -c 'cat f'
        ./s.sh a b
        cat f | wc -l
        ls
        "#,
        true,
    );
}

/// An `execve` that cannot start its program fails with Linux's error,
/// whether the path is in the mount or on the host, however it fails: a
/// missing file or directory, a file where a directory should be, a loop
/// of symbolic links, a name too long, a file that is not executable, a
/// directory, a PATH search that finds nothing (host paths that do not
/// resolve are answered before the exec is prepared).
#[test]
fn execs_that_cannot_start_fail_as_on_linux() {
    require("python3");
    assert_same(
        &["--servers", "2"],
        r#"
        cd "$ROOT"
        mkdir d; echo x > d/f; ln -s loop1 loop2; ln -s loop2 loop1
        H=$(mktemp -d); touch "$H/f"; ln -s "$H/a" "$H/b"; ln -s "$H/b" "$H/a"
        H="$H" python3 - <<'EOF'
import os
h = os.environ["H"]
cases = [
    "/nonexistent/x", "/etc/passwd/x", "/etc/passwd", "/etc", "nosuch",
    h + "/f", h + "/f/x", h + "/a", h + "/nonexistent",
    "/" + "n" * 5000, "/usr/bin/" + "n" * 300, "/tmp/" + "x/" * 2100 + "y",
    "d/f", "d", "loop1", "d/f/x", "d/nonexistent", "",
]
for i, p in enumerate(cases):
    try:
        os.execv(p, [p or "x"])
    except OSError as e:
        print(i, e.strerror)
try:
    os.execvp("no-such-command-anywhere", ["no-such-command-anywhere"])
except OSError as e:
    print("path search", e.strerror)
EOF
        rm -r "$H"
        "#,
        true,
    );
}

/// An affinity the program sets itself (`taskset`, `sched_setaffinity`) is
/// the program's: reported as set, kept across `execve`, and placement
/// leaves the process where the program put it.
#[test]
fn an_affinity_the_program_sets_is_its_own() {
    require("taskset");
    let script = r#"
        taskset -c 0 bash -c 'nproc; exec bash -c "nproc; grep Cpus_allowed_list /proc/self/status"'
        python3 -c 'import os; os.sched_setaffinity(0, {0}); print(sorted(os.sched_getaffinity(0)))'
    "#;
    let out = run_in_atoll(SPAWN, script);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{out:?}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert_eq!(lines[0], "1", "{text}");
    assert_eq!(lines[1], "1", "kept across execve: {text}");
    assert!(
        lines[2].ends_with("\t0"),
        "left where the program put it: {text}"
    );
    assert_eq!(lines[3], "[0]", "{text}");
}

#[test]
fn placement_local_keeps_todays_behaviour() {
    let dir = tempfile::tempdir().unwrap();
    let stats = dir.path().join("s.json");
    let out = run_in_atoll(
        &[
            "--placement",
            "local",
            "--stats-json",
            stats.to_str().unwrap(),
        ],
        "grep Cpus_allowed_list /proc/self/status; sh -c 'kill -TERM $$'; echo $?",
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let mine = std::fs::read_to_string("/proc/self/status").unwrap();
    let host_list = mine
        .lines()
        .find(|l| l.starts_with("Cpus_allowed_list"))
        .unwrap();
    assert!(text.starts_with(host_list), "{text} vs {host_list}");
    assert!(text.ends_with("143\n"), "{text}");
    assert!(per_core(&stats).iter().all(|(_, n)| *n == 0));
}

/// A detached instance, stopped on drop.
struct Booted {
    id: String,
}

impl Booted {
    fn new() -> Booted {
        let out = atoll()
            .args(["boot", "--memory", "64M"])
            .output_bounded()
            .expect("atoll boot");
        assert!(out.status.success(), "{out:?}");
        Booted {
            id: String::from_utf8_lossy(&out.stdout).trim().to_string(),
        }
    }

    fn exec(&self, script: &str) -> std::process::Output {
        atoll()
            .args(["exec", "--id", &self.id, "--placement", "round-robin", "--"])
            .args(["bash", "-c", script])
            .stdin(Stdio::null())
            .output_bounded()
            .expect("atoll exec")
    }

    fn status(&self) -> serde_json::Value {
        let out = atoll()
            .args(["status", "--id", &self.id, "--json"])
            .output_bounded()
            .expect("status");
        serde_json::from_slice(&out.stdout).expect("status JSON")
    }

    /// Lanes made since the instance started.
    /// Traps the instance's clients reported (`counters."client.traps"`
    /// in `atoll status --json`).
    fn client_traps(&self) -> u64 {
        let st = self.status();
        st["counters"]["client.traps"].as_u64().unwrap_or(0)
    }

    fn lanes_made(&self) -> u64 {
        self.status()["lanes_made"].as_u64().expect("lanes_made")
    }

    /// `(daemon pid, sessions, open descriptions)`.
    fn usage(&self) -> (u32, u64, u64) {
        let v = self.status();
        let servers = v["servers"].as_array().expect("servers");
        let sum = |k: &str| servers.iter().map(|s| s[k].as_u64().unwrap_or(0)).sum();
        (
            v["pid"].as_u64().expect("pid") as u32,
            sum("sessions"),
            sum("open_descriptions"),
        )
    }
}

impl Drop for Booted {
    fn drop(&mut self) {
        let _ = atoll().args(["stop", "--id", &self.id]).status();
    }
}

fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// Programs started for the instance and not reaped: children of the
/// instance process other than its own file-server hosts (named
/// `atoll-fs-hostH`) and scheduling servers (`atoll-sched-N`), and the
/// children of those scheduling servers (the programs they spawned).
fn child_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|t| t.ok())
        .map(|t| {
            std::fs::read_to_string(t.path().join("children"))
                .unwrap_or_default()
                .split_whitespace()
                .map(|child| {
                    let comm =
                        std::fs::read_to_string(format!("/proc/{child}/comm")).unwrap_or_default();
                    if comm.starts_with("atoll-fs") {
                        0
                    } else if comm.starts_with("atoll-sched") {
                        child.parse().map_or(0, child_count)
                    } else {
                        1
                    }
                })
                .sum::<usize>()
        })
        .sum()
}

#[test]
fn many_sequential_remote_execs_leak_nothing() {
    let b = Booted::new();
    let warm = b.exec("/bin/true");
    assert!(warm.status.success(), "{warm:?}");
    let (pid, sessions, descs) = b.usage();
    let fds = fd_count(pid);
    let out = b.exec(
        r#"n=0; for i in $(seq 1 1000); do /bin/true && n=$((n+1)); done; echo $n
        for i in 1 2 3 4 5 6; do sh -c 'exit 5'; done; echo $?"#,
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "1000\n5\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Everything the proxies and programs held is released (a server
    // closes a job when its proxy, which has the status, hangs up).
    let mut now = b.usage();
    for _ in 0..500 {
        if (now.1, now.2) == (sessions, descs) && fd_count(pid) <= fds {
            break;
        }
        sleep(Duration::from_millis(10));
        now = b.usage();
    }
    assert_eq!((now.1, now.2), (sessions, descs), "sessions/descriptions");
    assert!(fd_count(pid) <= fds, "descriptors of the instance");
    assert_eq!(child_count(pid), 0, "unreaped programs");
}

#[test]
fn make_j4_output_matches_a_host_build() {
    require("make");
    require("cc");
    let out = assert_same(
        SPAWN,
        &format!(
            r#"
        set -e
        cd "$ROOT"
{}        make -j4 2>&1 | sort
        ./prog
        make -j4
        "#,
            atoll_tests::c_project_script(8)
        ),
        true,
    );
    assert!(out.contains("sum 36"), "{out}");
}

#[test]
fn a_remote_program_keeps_the_callers_state() {
    // cwd (host and atoll), umask, ignored signals, limits, atoll and host
    // descriptors, environment: as after a local execve. (glibc's internal
    // signals 32/33 are left out: the client library resets them anyway.)
    let out = assert_same(
        SPAWN,
        r#"
        cd "$ROOT"; mkdir -p w && cd w
        echo data > f
        umask 027
        ulimit -n 512
        exec 5<f 6>"$ROOT/out"
        trap '' USR1
        X=exported nice -n 7 bash -c 'pwd; umask; ulimit -n; cat <&5; echo via6 >&6; echo "$X";
            echo "nice $(nice)";
            v=$(grep SigIgn /proc/self/status | cut -f2); echo "usr1 ignored $(( 0x$v & 0x200 ))"'
        cat "$ROOT/out"
        "#,
        true,
    );
    assert!(out.contains("via6"), "{out}");
}

#[test]
fn every_policy_runs_programs_and_reports_their_end() {
    for policy in ["random", "least-loaded", "round-robin", "local"] {
        let dir = tempfile::tempdir().unwrap();
        let stats = dir.path().join("s.json");
        let out = run_in_atoll(
            &[
                "--placement",
                policy,
                "--stats-json",
                stats.to_str().unwrap(),
            ],
            r#"for i in 1 2 3 4 5 6; do bash -c 'exit 3'; done; echo "exit $?"
            sh -c 'kill -TERM $$'; echo "term $?"
            echo piped | tr a-z A-Z | cat"#,
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "exit 3\nterm 143\nPIPED\n",
            "{policy}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let total: u64 = per_core(&stats).iter().map(|(_, n)| n).sum();
        if policy == "local" {
            assert_eq!(total, 0, "local never asks a server");
        } else {
            assert!(total >= 9, "{policy}: {:?}", per_core(&stats));
        }
    }
}

/// A setuid-root copy of `id` outside the mount, runnable by anyone.
fn setuid_id(dir: &Path) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let id = dir.join("id");
    std::fs::copy("/usr/bin/id", &id).expect("copy /usr/bin/id");
    std::fs::set_permissions(&id, std::fs::Permissions::from_mode(0o4755)).unwrap();
    id
}

#[test]
fn a_remote_program_starts_with_the_callers_credentials() {
    // Hare §3.6: a remote exec must be indistinguishable from a local one,
    // identity included. Real/effective/saved ids, groups, capability sets
    // and no_new_privs as the host shows them, under every placement; a
    // set-user-ID image gets its owner as euid (unless no_new_privs).
    require("setpriv");
    require("setarch");
    let dir = tempfile::tempdir().unwrap();
    let id = setuid_id(dir.path());
    let id = id.display();
    let script = format!(
        r#"
        U="setpriv --reuid=65534 --regid=65534 --clear-groups"
        st() {{ grep -E '^(Uid|Gid|Groups|Cap|NoNewPrivs)' /proc/self/status; }}
        $U id
        $U {id}
        $U setpriv --no-new-privs {id}
        setpriv --reuid=65534 --regid=65534 --groups 5,6 id
        setpriv --reuid=65534 --regid=65534 --groups 5,6 grep -E '^(Uid|Gid|Groups|Cap)' /proc/self/status
        $U grep -E '^(Uid|Gid|Groups|Cap|NoNewPrivs)' /proc/self/status
        $U --bounding-set -net_raw grep -E '^Cap' /proc/self/status
        setpriv --bounding-set -net_raw grep -E '^Cap' /proc/self/status
        setpriv --no-new-privs grep NoNewPrivs /proc/self/status
        setpriv --no-new-privs $U grep NoNewPrivs /proc/self/status
        setarch -R cat /proc/self/personality
        (echo 700 > /proc/self/oom_score_adj; cat /proc/self/oom_score_adj)
        "#
    );
    for policy in ["round-robin", "random", "least-loaded", "local"] {
        let stats = dir.path().join(format!("{policy}.json"));
        let out = assert_same(
            &[
                "--placement",
                policy,
                "--stats-json",
                stats.to_str().unwrap(),
            ],
            &script,
            false,
        );
        assert!(out.contains("uid=65534(nobody) gid=65534(nogroup) euid=0(root)"));
        assert!(
            out.contains("groups=65534(nogroup),5(tty),6(disk)"),
            "{out}"
        );
        let total: u64 = per_core(&stats).iter().map(|(_, n)| n).sum();
        if policy != "local" {
            assert!(total >= 8, "{policy}: {:?}", per_core(&stats));
        }
    }
}

#[test]
fn a_remote_program_run_as_nobody_cannot_write_a_root_file() {
    require("setpriv");
    let dir = tempfile::tempdir().unwrap();
    let stats = dir.path().join("s.json");
    let out = run_in_atoll(
        &[
            "--placement",
            "round-robin",
            "--stats-json",
            stats.to_str().unwrap(),
        ],
        r#"
        echo orig > "$ROOT/f"; chmod 0644 "$ROOT/f"
        for i in 1 2 3 4; do
            setpriv --reuid=65534 --regid=65534 --clear-groups sh -c 'echo bad > "$ROOT/f"'
            echo "rc $?"
        done
        cat "$ROOT/f"; stat -c '%U %a' "$ROOT/f"
        "#,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "rc 2\nrc 2\nrc 2\nrc 2\norig\nroot 644\n",
        "{stderr}"
    );
    assert_eq!(stderr.matches("Permission denied").count(), 4, "{stderr}");
    let total: u64 = per_core(&stats).iter().map(|(_, n)| n).sum();
    assert!(total >= 4, "{:?}", per_core(&stats));
}

#[test]
fn a_remote_exec_never_leaves_the_callers_namespaces() {
    // A server in the instance's namespaces must not start the program of
    // a caller that left them (`unshare -n`): such execs stay local.
    require("unshare");
    assert_same(
        SPAWN,
        r#"
        unshare -n sh -c 'me=$(readlink /proc/$$/ns/net)
            for i in 1 2 3 4; do
                [ "$(readlink /proc/self/ns/net)" = "$me" ] && echo same || echo escaped
            done'
        "#,
        true,
    );
}

/// An exec's arguments and environment cross to the scheduling server as
/// a Cosh move (`atoll_sched::args`): 800 kB of environment and a
/// long argument list, past any socket packet, still run remotely, and
/// the program sees them whole.
#[test]
fn remote_execs_carry_megabytes_of_environment_as_a_transfer() {
    let dir = tempfile::tempdir().unwrap();
    let stats = dir.path().join("s.json");
    let mut opts = SPAWN.to_vec();
    opts.extend(["--stats-json", stats.to_str().unwrap()]);
    let script = r#"
        # Each string stays under Linux's 128 KiB (MAX_ARG_STRLEN).
        v=$(head -c 100000 /dev/zero | tr '\0' x)
        for k in 1 2 3 4 5 6 7 8; do export BIG$k=$v; done
        for i in 1 2 3 4; do
          /bin/sh -c 'echo "$(( ${#BIG1} + ${#BIG8} )) $# $1 ${1000}"; grep Cpus_allowed_list /proc/self/status' sh $(seq 1 2000)
        done
        "#;
    let out = run_in_atoll(&opts, script);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 8, "{text}");
    for pair in lines.chunks(2) {
        assert_eq!(pair[0], "200000 2000 1 1000", "{text}");
        // Started by a scheduling server, so pinned to its one core (a
        // local exec would keep the whole set).
        let cpus = pair[1].rsplit('\t').next().unwrap();
        if cores() > 1 {
            assert!(cpus.parse::<usize>().is_ok(), "not placed: {text}");
        }
    }
    let placed: u64 = per_core(&stats).iter().map(|(_, n)| n).sum();
    assert!(placed >= 4, "the execs were placed: {:?}", per_core(&stats));
}
