//! What a process start asks of the instance when its `execve` is placed
//! on a core (Hare §3.6.1, `--exec-via place`): the load table is mapped
//! once by the forking parent and inherited (`client/src/loadmap.rs`),
//! and the chosen core's scheduling server hears of the exec by one
//! datagram (`sched/src/proxy.rs`, `place_self`). And what an image
//! holds: the placeholder template is made at the first atoll descriptor
//! (`client/src/session.rs`, `Client::template`), not at every start.

use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;
use std::sync::mpsc;
use std::time::Duration;

use atoll_tests::{assert_same, atoll, run_in_atoll, MOUNT};

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// In a forked subshell (builtins only, so nothing execs): how many
/// mappings of the load table it holds, as `/proc/self/maps` lists them.
const COUNT_TABLE_MAPPINGS: &str = r#"
    ( n=0
      while read -r l; do case $l in *sched.load*) n=$((n+1));; esac; done < /proc/self/maps
      echo "mapped $n" )
"#;

fn run_ok(opts: &[&str], script: &str) -> String {
    let out = run_in_atoll(opts, script);
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A shell that forks maps the load table once, before the fork: its
/// children find it mapped when they exec instead of opening and mapping
/// it each. Nothing maps it when no exec is placed.
#[test]
fn a_forking_shell_maps_the_load_table_for_its_children() {
    let placed = run_ok(&["--placement", "round-robin"], COUNT_TABLE_MAPPINGS);
    assert_eq!(placed.trim(), "mapped 1");
    let local = run_ok(&["--placement", "local"], COUNT_TABLE_MAPPINGS);
    assert_eq!(local.trim(), "mapped 0");
}

/// Children forked after the table was mapped still place their execs
/// (round-robin spreads them over the cores: the move to a core happens
/// only once its server took the `Placed` datagram) and run as on Linux,
/// and so do their own children, which inherit the mapping again.
#[test]
fn forked_children_place_their_execs_through_the_inherited_table() {
    let text = run_ok(
        &["--placement", "round-robin"],
        r#"
        for i in 1 2 3 4; do grep Cpus_allowed_list /proc/self/status; done | sort -u | wc -l
        bash -c 'for i in 1 2 3 4; do /bin/echo "inner $i"; done' | sort | uniq | wc -l
        ( /bin/true ) && echo "subshell exec ok"
        "#,
    );
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    let spread: usize = lines[0].trim().parse().expect("a count");
    if cores() >= 2 {
        assert!(spread >= 2, "every exec on one core: {text}");
    }
    assert_eq!(lines[1].trim(), "4", "{text}");
    assert_eq!(lines[2], "subshell exec ok", "{text}");
}

/// How many of `pid`'s descriptors are atoll placeholders (the template
/// and its dups), as the host sees them.
/// A placed exec moves to its core even when that core's scheduling
/// server does not hear of it (restarting, or not yet up when the first
/// program starts): where a program runs is the policy's choice. The
/// shell's first exec is placed on core 0 and `rm` (one fork) moves the
/// cursor on, so the last exec goes to core 1, whose server's datagram
/// socket the script removed.
#[test]
fn a_placed_exec_moves_even_when_its_core_s_server_does_not_hear_of_it() {
    if cores() < 2 {
        return;
    }
    let text = run_ok(
        &["--placement", "round-robin", "--servers", "2"],
        r#"rm "${ATOLL_SOCKET%/*}/sched-1.place"
        exec grep Cpus_allowed_list: /proc/self/status"#,
    );
    assert_eq!(
        text.split_whitespace().nth(1),
        Some("1"),
        "the exec stayed where the shell was: {text}"
    );
}

fn placeholders(pid: &str) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("the shell's descriptors")
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|l| l.to_string_lossy().starts_with("/memfd:atoll-placeholder"))
        .count()
}

/// A shell that has opened nothing in the mount holds no placeholder
/// template; its first atoll descriptor makes it (then the template and
/// the descriptor, a dup of it). Seen from the host, while the shell waits.
/// (Its cwd in the mount is no descriptor of its own.)
#[test]
fn the_placeholder_template_is_made_at_the_first_atoll_descriptor() {
    let mut cmd = atoll();
    cmd.args(["run", "--memory", "256M", "--"])
        .args([
            "bash",
            "-c",
            r#"cd "$ROOT"; echo "$$"; read -r _; exec 3> f; echo opened; read -r _"#,
        ])
        .env("ROOT", MOUNT)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    let mut child = cmd.spawn().expect("atoll run");
    let mut stdin = child.stdin.take().unwrap();
    let (tx, rx) = mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if tx.send(line.unwrap_or_default()).is_err() {
                break;
            }
        }
    });
    // Bounded: a hang fails the test instead of stalling the run.
    let next = || rx.recv_timeout(Duration::from_secs(120)).ok();
    let pid = next().expect("the shell's pid");
    let before = placeholders(&pid);
    writeln!(stdin).unwrap();
    assert_eq!(next().as_deref(), Some("opened"));
    let after = placeholders(&pid);
    writeln!(stdin).unwrap();
    let st = child.wait().unwrap();
    assert!(st.success(), "{st}");
    assert_eq!(
        (before, after),
        (0, 2),
        "placeholders before and after `exec 3> f`"
    );
}

/// A template made late is one of atoll's own descriptors like the
/// others: another process's listing of the shell's descriptors leaves it
/// out, after an open, in a forked subshell and in an exec'd shell.
#[test]
fn a_late_template_is_left_out_of_descriptor_listings() {
    assert_same(
        &[],
        r#"
        cd "$ROOT"; echo x > f
        # Into a file, not a pipe: the shell would hold the pipe's ends.
        list() { ls "/proc/$1/fd" > list.txt; echo $(sort -n list.txt); }
        list $$
        exec 3< f
        list $$; cat <&3
        ( exec 4< f; list $BASHPID )
        bash -c 'exec 5< f; ls /proc/$$/fd > list.txt; echo $(sort -n list.txt); cat <&5'
        "#,
        false,
    );
}

/// atoll's own descriptors of `pid` as the host sees them (numbers from
/// atoll's range on, 900: the session socket and the instance's memfds),
/// each with its link and whether it is close-on-exec.
fn instance_fds(pid: &str) -> Vec<(String, bool)> {
    let mut fds = Vec::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/fd")).expect("the shell's descriptors") {
        let e = e.unwrap();
        let n: i32 = e.file_name().to_string_lossy().parse().unwrap();
        let Ok(link) = std::fs::read_link(e.path()) else {
            continue;
        };
        let link = link.to_string_lossy().into_owned();
        if n < 900 || !(link.starts_with("socket:") || link.starts_with("/memfd:atoll-")) {
            continue;
        }
        let info = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{n}")).unwrap();
        let flags = info
            .lines()
            .find_map(|l| l.strip_prefix("flags:"))
            .map(|f| u32::from_str_radix(f.trim(), 8).unwrap())
            .expect("fdinfo has flags");
        fds.push((link, flags & libc::O_CLOEXEC as u32 != 0));
    }
    fds
}

/// The session socket and the instance's descriptors that an old image
/// hands over, open across its `execve`, the new image keeps where they
/// are and makes close-on-exec again: a program that later runs without
/// libatoll inherits none of them. Seen from the host, in a shell started
/// by `atoll run` and in the shell it becomes by `exec` (same process).
#[test]
fn an_exec_s_new_image_keeps_the_instance_descriptors_close_on_exec() {
    let mut cmd = atoll();
    cmd.args(["run", "--memory", "64M", "--"])
        .args([
            "bash",
            "-c",
            r#"echo "$$"; read -r _; exec bash -c 'echo again; read -r _'"#,
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    let mut child = cmd.spawn().expect("atoll run");
    let mut stdin = child.stdin.take().unwrap();
    let (tx, rx) = mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if tx.send(line.unwrap_or_default()).is_err() {
                break;
            }
        }
    });
    // Bounded: a hang fails the test instead of stalling the run.
    let next = || rx.recv_timeout(Duration::from_secs(120)).ok();
    let pid = next().expect("the shell's pid");
    let first = instance_fds(&pid);
    writeln!(stdin).unwrap();
    assert_eq!(next().as_deref(), Some("again"));
    let exec_d = instance_fds(&pid);
    writeln!(stdin).unwrap();
    let st = child.wait().unwrap();
    assert!(st.success(), "{st}");
    for (image, fds) in [("started", &first), ("exec'd", &exec_d)] {
        let has = |p: &str| fds.iter().any(|(l, _)| l.starts_with(p));
        assert!(
            has("socket:") && has("/memfd:atoll-control"),
            "{image}: {fds:?}"
        );
        assert!(fds.iter().all(|&(_, cloexec)| cloexec), "{image}: {fds:?}");
    }
}
