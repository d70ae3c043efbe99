//! What a fork's session (`Fork`, `client/src/fork.rs`) must guarantee,
//! whatever the fork path is made to do faster: descriptions stay shared
//! with every child while another thread of the parent opens files and a
//! new thread makes its first call (a fork racing a thread's open);
//! children killed between the fork and their first call, and a process
//! that exits or execs after many forks, leave nothing at the servers or
//! the instance; an image that execs after forking joins its session and
//! reads the mount.

use std::thread::sleep;
use std::time::Duration;

use atoll_tests::{compile_probe, Booted, OutputBounded as _};

/// Forks 60 children that each append one byte through a description
/// opened before the forks (shared offset, Hare §3.5.1), while a second
/// thread opens, writes and closes files of the mount, and every tenth
/// fork a new thread makes its first call; then forks 30 children that it
/// kills before they call anything; then appends its own byte and either
/// execs `cat` of the file (`exec`) or prints it itself.
const FORKER: &str = r#"
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *base;

static void *opener(void *arg) {
    (void)arg;
    char p[256];
    for (int i = 0; i < 200; i++) {
        snprintf(p, sizeof p, "%s.t%d", base, i % 8);
        int f = open(p, O_CREAT | O_WRONLY | O_TRUNC, 0644);
        if (f < 0 || write(f, "x", 1) != 1) { perror("opener"); _exit(3); }
        close(f);
    }
    return 0;
}

static void *first_call(void *arg) {
    (void)arg;
    char p[256];
    snprintf(p, sizeof p, "%s.n", base);
    int f = open(p, O_CREAT | O_WRONLY | O_APPEND, 0644);
    if (f < 0 || write(f, "n", 1) != 1) { perror("first call"); _exit(4); }
    close(f);
    return 0;
}

static int reap(pid_t p) {
    int st;
    return waitpid(p, &st, 0) == p ? st : -1;
}

int main(int argc, char **argv) {
    base = argv[1];
    int fd = open(base, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    if (fd < 0) { perror("open"); return 1; }
    pthread_t t;
    pthread_create(&t, 0, opener, 0);
    for (int i = 0; i < 60; i++) {
        pid_t p = fork();
        if (p < 0) { perror("fork"); return 1; }
        if (p == 0) _exit(write(fd, "c", 1) == 1 ? 0 : 5);
        int st = reap(p);
        if (!WIFEXITED(st) || WEXITSTATUS(st)) { fprintf(stderr, "child %d: %d\n", i, st); return 1; }
        if (i % 10 == 5) {
            pthread_t n;
            pthread_create(&n, 0, first_call, 0);
            pthread_join(n, 0);
        }
    }
    pthread_join(t, 0);
    for (int i = 0; i < 30; i++) {
        pid_t p = fork();
        if (p < 0) { perror("fork"); return 1; }
        if (p == 0) { for (;;) pause(); }
        kill(p, SIGKILL);
        int st = reap(p);
        if (!WIFSIGNALED(st)) { fprintf(stderr, "killed child: %d\n", st); return 1; }
    }
    if (write(fd, "p", 1) != 1) { perror("write"); return 1; }
    close(fd);
    if (argc > 2 && !strcmp(argv[2], "exec")) {
        execl("/bin/cat", "cat", base, (char *)0);
        perror("exec");
        return 1;
    }
    char buf[128];
    fd = open(base, O_RDONLY);
    int n = fd < 0 ? -1 : read(fd, buf, sizeof buf);
    if (n < 0) { perror("read"); return 1; }
    fwrite(buf, 1, n, stdout);
    return 0;
}
"#;

/// `(sessions, open descriptions)` summed over the servers, and the
/// instance process's open descriptors.
fn usage(inst: &Booted) -> (u64, u64, usize) {
    let v = inst.status();
    let servers = v["servers"].as_array().expect("servers");
    let sum = |k: &str| servers.iter().map(|s| s[k].as_u64().unwrap_or(0)).sum();
    let pid = v["pid"].as_u64().expect("pid");
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("instance fds")
        .count();
    (sum("sessions"), sum("open_descriptions"), fds)
}

/// Wait (bounded) until the usage is back at `base`; the last reading.
fn settles_at(inst: &Booted, base: (u64, u64, usize)) -> (u64, u64, usize) {
    let mut now = usage(inst);
    for _ in 0..300 {
        if (now.0, now.1) == (base.0, base.1) && now.2 <= base.2 {
            break;
        }
        sleep(Duration::from_millis(20));
        now = usage(inst);
    }
    now
}

fn forks_share_and_leave_nothing(how: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = compile_probe(dir.path(), "forker", FORKER);
    let inst = Booted::new(&["--memory", "64M"]);
    let warm = inst
        .command("echo > $ROOT/warm")
        .output_bounded()
        .expect("warm");
    assert!(warm.status.success(), "{warm:?}");
    let base = settles_at(&inst, usage(&inst));
    let out = inst
        .command(&format!("{} $ROOT/f {how} && cat $ROOT/f.n", bin.display()))
        .output_bounded()
        .expect("atoll exec");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Every child's byte and the parent's, in one shared offset; every
    // new thread's first call.
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("{}p{}", "c".repeat(60), "n".repeat(6))
    );
    let now = settles_at(&inst, base);
    assert_eq!(
        (now.0, now.1),
        (base.0, base.1),
        "sessions/descriptions at the servers"
    );
    assert!(
        now.2 <= base.2,
        "descriptors of the instance: {now:?} {base:?}"
    );
}

#[test]
fn forks_share_descriptions_and_a_process_exiting_after_them_leaves_nothing() {
    forks_share_and_leave_nothing("print");
}

#[test]
fn forks_share_descriptions_and_an_exec_after_them_joins_and_leaves_nothing() {
    forks_share_and_leave_nothing("exec");
}

/// `forkpty` and `daemon` in a program with a second thread, as on a
/// host directory: glibc forks there with its internal `__fork`, which
/// holds malloc's locks across the `clone` (the child's session is made
/// by atoll's own `forkpty`/`daemon` before that; Python's `pty.fork()`
/// beside a watchdog thread used to hang forever).
#[test]
fn forkpty_and_daemon_of_a_threaded_program_fork_as_on_linux() {
    let dir = tempfile::tempdir().unwrap();
    let probe = compile_probe(
        dir.path(),
        "threaded_forks",
        include_str!("forks/threaded_forks.c"),
    );
    let script = format!("cd \"$ROOT\" && {}", probe.display());
    let out = atoll_tests::assert_same(&["--servers", "2"], &script, true);
    assert!(out.contains("forkpty child 2: stdin tty 1\n"), "{out}");
    assert!(out.contains("daemon: session leader 1\ndone\n"), "{out}");
}

/// `posix_spawn(p)` with file actions, whose clone atoll makes a fork:
/// a program that cannot be run fails the call with its exec's error and
/// leaves no child, as on Linux (GNU make runs a script without `#!`
/// through the shell only on `ENOEXEC`; before, the spawn "succeeded" and
/// its child exited with 127). Three servers, and make itself when there.
#[test]
fn spawn_errors_are_the_calls_as_on_linux() {
    let dir = tempfile::tempdir().unwrap();
    let probe = compile_probe(
        dir.path(),
        "spawn_errors",
        include_str!("forks/spawn_errors.c"),
    );
    let script = format!("cd \"$ROOT\" && {}", probe.display());
    let out = atoll_tests::assert_same(&["--servers", "3"], &script, true);
    assert!(
        out.contains("script without #!: Exec format error, children left none\n"),
        "{out}"
    );
    assert!(
        out.contains("PATH search, not executable first: Permission denied"),
        "{out}"
    );
    assert!(
        out.contains("a program that runs: started, exit 0\n"),
        "{out}"
    );
    atoll_tests::require("make");
    {
        let script = r#"cd "$ROOT" && printf '\necho from-script\n' > s.cmd && chmod 755 s.cmd &&
            printf 'all:; @$(CMD)\n' > e.mk && make -s -f e.mk CMD=./s.cmd &&
            { make -s -f e.mk CMD=./missing; echo "status $?"; }"#;
        let out = atoll_tests::assert_same(&["--servers", "3"], script, true);
        assert!(out.starts_with("from-script\n"), "{out}");
    }
}

/// A fork and an exec hand over their descriptions with several `Share`s
/// in flight at once (`forkshare::Ledger::share_many`): with more of them
/// than one window holds, duplicates among them, and three servers, the
/// child and the program it execs write through every one, as on tmpfs.
#[test]
fn a_fork_and_an_exec_hand_over_many_descriptions() {
    atoll_tests::require("python3");
    let script = format!(
        "cd \"$ROOT\"\ncat > many.py <<'PY'\n{}PY\npython3 many.py\n",
        include_str!("forks/many_descs.py")
    );
    let out = atoll_tests::assert_same_on_tmpfs(
        &["--servers", "3", "--distribute", "all"],
        &script,
        true,
    );
    assert!(out.contains("39 child39 "), "{out}");
    assert!(out.contains("0 child0 dup exec3 "), "{out}");
}
