//! Asynchronous signals that arrive while a thread runs atoll code (asleep
//! on an atoll pipe, in a readiness call, in a host call made through the
//! wrappers or the SIGSYS net): their handlers run as program code, so
//! what they write reaches atoll pipes and files, and the interrupted call
//! returns EINTR or restarts as on Linux, for the signal's own
//! `SA_RESTART`. Programs run under `atoll run` with atoll pipes (the
//! default); the C probe also runs on the host and must print the same.

use std::process::Command;

use atoll_tests::{assert_same, compile_probe, require, run_in_atoll};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).to_string()
}

/// Each case prints one line; a handler that ran as atoll code (its
/// writes bypassing atoll) makes a reader wait for bytes that never come:
/// a helper process gives up after an alarm and the case prints FAIL.
const PROBE: &str = r#"
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

static int note_fd = -1, file_fd = -1;
static volatile sig_atomic_t hits, info_ok, child_done;

/* The handler's own system calls: a byte to an atoll pipe, one to an
   atoll file. */
static void note(int sig) {
    int saved = errno;
    char c = 'a' + sig % 26;
    if (write(note_fd, &c, 1) != 1) _exit(90);
    if (write(file_fd, &c, 1) != 1) _exit(91);
    hits++;
    errno = saved;
}

static void on_info(int sig, siginfo_t *si, void *uc) {
    (void)uc;
    info_ok = si->si_signo == sig && si->si_code == SI_KERNEL;
    note(sig);
}

static void on_child(int sig) { child_done = 1; note(sig); }

static void install(int sig, void (*h)(int), int flags) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = h;
    sa.sa_flags = flags;
    sigemptyset(&sa.sa_mask);
    if (sigaction(sig, &sa, NULL) != 0) { perror("sigaction"); exit(2); }
}

/* A helper that waits for the handler's byte on `note_r`, then writes
   "go" to `go_w`: the blocked reader gets data only if the handler ran
   (and wrote through atoll) while it was blocked. */
static pid_t helper(int note_r, int go_w) {
    pid_t pid = fork();
    if (pid == 0) {
        char c;
        signal(SIGALRM, SIG_DFL);
        alarm(20); /* give up: the reader then sees end of file */
        if (read(note_r, &c, 1) == 1 && write(go_w, "go", 2) == 2) _exit(0);
        _exit(1);
    }
    return pid;
}

/* Is the handler's byte waiting in the notes pipe? (Taken if so.) */
static int noted(int note_r) {
    struct pollfd p = { note_r, POLLIN, 0 };
    char c;
    return poll(&p, 1, 0) == 1 && read(note_r, &c, 1) == 1;
}

static void arm(void) {
    struct itimerval it = { { 0, 0 }, { 0, 100000 } };
    setitimer(ITIMER_REAL, &it, NULL);
}

/* Blocking read of `fd` interrupted by SIGALRM; `how`: 0 read(),
   1 syscall(SYS_read) (through the SIGSYS net). */
static ssize_t blocked_read(int fd, char *buf, int how) {
    arm();
    return how ? syscall(SYS_read, fd, buf, 8) : read(fd, buf, 8);
}

int main(int argc, char **argv) {
    char path[4096], buf[64];
    int np[2], rd[2];
    ssize_t n;
    if (argc < 2) return 2;
    snprintf(path, sizeof path, "%s/signal-notes", argv[1]);
    file_fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (file_fd < 0 || pipe(np) != 0) { perror("setup"); return 2; }
    note_fd = np[1];

    /* 1. No SA_RESTART: the pipe read ends with EINTR after the handler
       wrote its byte to the other pipe. */
    install(SIGALRM, note, 0);
    if (pipe(rd) != 0) return 2;
    n = blocked_read(rd[0], buf, 0);
    printf("pipe read without SA_RESTART: %zd %s, handler byte %s\n", n,
           n < 0 && errno == EINTR ? "EINTR" : "?",
           noted(np[0]) ? "arrived" : "lost");

    /* 2. SA_RESTART: the read goes on and gets what the helper writes
       once it has seen the handler's byte. */
    install(SIGALRM, note, SA_RESTART);
    pid_t h = helper(np[0], rd[1]);
    close(rd[1]);
    n = blocked_read(rd[0], buf, 0);
    printf("pipe read with SA_RESTART: %zd%s\n", n, n == 2 ? " (restarted)" : " FAIL");
    waitpid(h, NULL, 0);
    close(rd[0]);

    /* 3. The same on a host socket, through the read wrapper and through
       the SIGSYS net. */
    for (int how = 0; how < 2; how++) {
        int sp[2];
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, sp) != 0) return 2;
        h = helper(np[0], sp[1]);
        close(sp[1]);
        n = blocked_read(sp[0], buf, how);
        printf("socket %s with SA_RESTART: %zd%s\n", how ? "syscall(read)" : "read()", n,
               n == 2 ? " (restarted)" : " FAIL");
        waitpid(h, NULL, 0);
        close(sp[0]);
    }

    /* 4. sigaction's old action is the program's handler. */
    struct sigaction old;
    sigaction(SIGALRM, NULL, &old);
    printf("oldact is the handler: %d, SA_RESTART kept: %d\n", old.sa_handler == note,
           (old.sa_flags & SA_RESTART) != 0);

    /* 5. SA_SIGINFO + SA_RESETHAND on a deferred signal: siginfo kept,
       handler reset after one run. */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_info;
    sa.sa_flags = SA_SIGINFO | SA_RESETHAND;
    sigaction(SIGALRM, &sa, NULL);
    if (pipe(rd) != 0) return 2;
    n = blocked_read(rd[0], buf, 0);
    int e = errno, arrived = noted(np[0]);
    sigaction(SIGALRM, NULL, &old);
    printf("SA_RESETHAND: %zd %s, byte %d, siginfo kept %d, reset to SIG_DFL %d\n", n,
           n < 0 && e == EINTR ? "EINTR" : "?", arrived, (int)info_ok,
           old.sa_handler == SIG_DFL);
    close(rd[0]);
    close(rd[1]);

    /* 6. The sigsuspend idiom: SIGCHLD blocked except while suspended;
       the handler must run although the mask blocks it again afterwards. */
    install(SIGCHLD, on_child, SA_RESTART);
    sigset_t block, none;
    sigemptyset(&block);
    sigaddset(&block, SIGCHLD);
    sigemptyset(&none);
    sigprocmask(SIG_BLOCK, &block, NULL);
    if (fork() == 0) _exit(0);
    int rounds = 0;
    while (!child_done && rounds < 1000) {
        sigsuspend(&none);
        rounds++;
    }
    sigprocmask(SIG_UNBLOCK, &block, NULL);
    wait(NULL);
    printf("sigsuspend: child seen %d, in one round %d\n", (int)child_done, rounds == 1);

    /* Every handler's byte reached the atoll file. */
    lseek(file_fd, 0, SEEK_SET);
    n = read(file_fd, buf, sizeof buf);
    printf("handler runs %d, bytes in the file %zd\n", (int)hits, n);
    return 0;
}
"#;

/// The C probe prints the same under atoll (atoll pipes, an atoll file)
/// as on the host.
#[test]
fn handlers_interrupting_atoll_code_run_as_program_code_as_on_the_host() {
    let dir = tempfile::tempdir().unwrap();
    let bin = compile_probe(dir.path(), "sigprobe", PROBE);
    let host = Command::new(&bin).arg(dir.path()).output().expect("probe");
    let host_out = text(&host.stdout);
    assert!(host_out.contains("pipe read without SA_RESTART: -1 EINTR, handler byte arrived"));
    assert!(host.status.success(), "{host_out}");
    let script = format!("{} \"$ROOT\"", bin.display());
    let o = run_in_atoll(&[], &script);
    assert_eq!(text(&o.stdout), host_out, "stderr: {}", text(&o.stderr));
    assert!(o.status.success());
}

/// CPython's self-pipe: `signal.set_wakeup_fd` on an atoll pipe, and an
/// interval timer fires while the program sleeps in `select` on that very
/// pipe: the C handler's byte must reach the pipe and wake the select.
#[test]
fn python_wakeup_fd_on_an_atoll_pipe_wakes_select() {
    require("python3");
    let o = run_in_atoll(
        &[],
        r#"python3 - <<'END'
import os, select, signal
r, w = os.pipe()
os.set_blocking(w, False)
signal.set_wakeup_fd(w)
fired = []
signal.signal(signal.SIGALRM, lambda s, f: fired.append(s))
signal.setitimer(signal.ITIMER_REAL, 0.1)
ready, _, _ = select.select([r], [], [], 60)
print("woken", ready == [r], "byte", list(os.read(r, 8)), "handler", fired)
END"#,
    );
    assert_eq!(
        text(&o.stdout),
        format!(
            "woken True byte [{}] handler [{}]\n",
            libc::SIGALRM,
            libc::SIGALRM
        ),
        "{}",
        text(&o.stderr)
    );
}

/// bash's SIGCHLD handler with background jobs and `wait`.
#[test]
fn bash_background_jobs_and_wait_match_the_host() {
    assert_same(
        &[],
        r#"
        (sleep 0.2; echo child) &
        wait $!; echo "waited $?"
        (sleep 0.1; exit 3) &
        sleep 0.3; wait; echo "all $?"
        "#,
        true,
    );
}

/// bash's `wait` under `trap`: the handler leaves `wait` with `longjmp`.
/// The child signals and exits at once, so its exit and the signal race;
/// a deferred handler must never make bash lose the reaped child (it then
/// waits forever for a job it already reaped). Each round is bounded.
#[test]
fn bash_trap_interrupting_wait_never_loses_the_child() {
    assert_same(
        &[],
        r#"
        for i in 1 2 3 4 5 6 7 8; do
          timeout 20 bash -c 'trap "echo trapped" USR1
            (sleep 0.05; kill -USR1 $$) & wait $!; echo "interrupted $?"
            wait; echo "all $?"'
          echo "round $?"
        done
        "#,
        true,
    );
}
