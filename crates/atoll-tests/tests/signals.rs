//! Program signals that arrive while a thread runs atoll code (asleep on
//! an atoll pipe, in a readiness call over pipes, in a host call made for
//! the program): their handlers run as program code, so what they write
//! reaches atoll pipes and files; the interrupted call restarts or fails
//! with `EINTR` as on Linux, by the handler's `SA_RESTART`; a handler that
//! leaves with `longjmp` leaks nothing. Programs run under `atoll run` with
//! atoll pipes (the default); the C probes also run on the host and must
//! print the same. Loops run 50 times with 3 servers in incoherent mode,
//! each run under `timeout`, so a hang fails fast.

use atoll_tests::OutputBounded as _;
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
#include <sys/un.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/select.h>
#include <sys/wait.h>
#include <setjmp.h>
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
    info_ok = si->si_signo == sig && si->si_code == SI_KERNEL && uc != NULL;
    note(sig);
}

static void on_child(int sig) { child_done = 1; note(sig); }

static sigjmp_buf jump;
static volatile sig_atomic_t usr1_runs;
static void leave(int sig) { note(sig); siglongjmp(jump, 1); }
static void on_usr1(int sig) { usr1_runs++; note(sig); }

static volatile sig_atomic_t depth, max_depth, raised;
static void nested(int sig) {
    depth++;
    if (depth > max_depth) max_depth = depth;
    if (!raised) { raised = 1; raise(sig); }
    depth--;
}

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

    /* 2b. The same through the SIGSYS net: syscall(SYS_read), without
       and with SA_RESTART. */
    install(SIGALRM, note, 0);
    if (pipe(rd) != 0) return 2;
    n = blocked_read(rd[0], buf, 1);
    printf("pipe syscall(read) without SA_RESTART: %zd %s, handler byte %s\n", n,
           n < 0 && errno == EINTR ? "EINTR" : "?", noted(np[0]) ? "arrived" : "lost");
    install(SIGALRM, note, SA_RESTART);
    h = helper(np[0], rd[1]);
    close(rd[1]);
    n = blocked_read(rd[0], buf, 1);
    printf("pipe syscall(read) with SA_RESTART: %zd%s\n", n, n == 2 ? " (restarted)" : " FAIL");
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

    /* 7. pselect with a temporary mask over an atoll pipe: SIGCHLD blocked
       except while waiting; the handler runs before pselect returns. */
    child_done = 0;
    if (pipe(rd) != 0) return 2;
    sigprocmask(SIG_BLOCK, &block, NULL);
    if (fork() == 0) { usleep(50000); _exit(0); }
    fd_set rs;
    FD_ZERO(&rs);
    FD_SET(rd[0], &rs);
    struct timespec ten = { 10, 0 };
    int pr = pselect(rd[0] + 1, &rs, NULL, NULL, &ten, &none);
    e = errno;
    printf("pselect: %d %s, handler ran %d\n", pr, pr < 0 && e == EINTR ? "EINTR" : "?",
           (int)child_done);
    sigprocmask(SIG_UNBLOCK, &block, NULL);
    wait(NULL);

    /* 8. A handler that leaves a blocked pipe read with siglongjmp leaves
       nothing of the read behind: the pipe still works, and once the
       write end is closed a reader in another process sees end of file. */
    install(SIGALRM, leave, 0);
    if (sigsetjmp(jump, 1) == 0) {
        arm();
        n = read(rd[0], buf, 8);
        printf("longjmp: read returned %zd\n", n);
    } else {
        printf("longjmp: left the read\n");
    }
    pid_t reader = fork();
    if (reader == 0) {
        close(rd[1]);
        alarm(10);
        char got[16];
        ssize_t a = read(rd[0], got, sizeof got), b = read(rd[0], got, sizeof got);
        _exit(a == 3 && b == 0 ? 0 : 1);
    }
    close(rd[0]);
    if (write(rd[1], "abc", 3) != 3) return 2;
    close(rd[1]);
    int st;
    waitpid(reader, &st, 0);
    printf("longjmp: other reader got the data and EOF %d\n", WIFEXITED(st) && WEXITSTATUS(st) == 0);

    /* 9. A blocked signal stays blocked while a pipe read waits: the read
       gets its data, and the handler runs only at the unblock. */
    struct sigaction u;
    memset(&u, 0, sizeof u);
    u.sa_handler = on_usr1;
    sigaction(SIGUSR1, &u, NULL);
    sigset_t usr1;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    sigprocmask(SIG_BLOCK, &usr1, NULL);
    if (pipe(rd) != 0) return 2;
    pid_t parent = getpid();
    pid_t w = fork();
    if (w == 0) {
        usleep(50000);
        kill(parent, SIGUSR1);
        usleep(50000);
        _exit(write(rd[1], "xy", 2) == 2 ? 0 : 1);
    }
    n = read(rd[0], buf, 8);
    int before = usr1_runs;
    sigprocmask(SIG_UNBLOCK, &usr1, NULL);
    printf("blocked signal: read %zd, handler before unblock %d, after %d\n", n, before,
           (int)usr1_runs);
    waitpid(w, NULL, 0);
    close(rd[0]);
    close(rd[1]);

    /* 10. accept on a Unix socket bound in the directory (atoll's under
       atoll): EINTR without SA_RESTART, restarted with it (a helper
       connects once it has seen the handler's byte). */
    struct sockaddr_un sun;
    memset(&sun, 0, sizeof sun);
    sun.sun_family = AF_UNIX;
    snprintf(sun.sun_path, sizeof sun.sun_path, "%s/sig-sock", argv[1]);
    int ls = socket(AF_UNIX, SOCK_STREAM, 0);
    if (ls < 0 || bind(ls, (struct sockaddr *)&sun, sizeof sun) != 0 || listen(ls, 4) != 0) {
        perror("socket setup");
        return 2;
    }
    struct sockaddr_un peer;
    socklen_t pl = sizeof peer;
    install(SIGALRM, note, 0);
    arm();
    int cs = accept(ls, (struct sockaddr *)&peer, &pl);
    e = errno;
    printf("accept without SA_RESTART: %d %s, byte %d\n", cs, cs < 0 && e == EINTR ? "EINTR" : "?",
           noted(np[0]));
    install(SIGALRM, note, SA_RESTART);
    pid_t con = fork();
    if (con == 0) {
        char c;
        alarm(20);
        if (read(np[0], &c, 1) != 1) _exit(1);
        int s2 = socket(AF_UNIX, SOCK_STREAM, 0);
        _exit(connect(s2, (struct sockaddr *)&sun, sizeof sun) == 0 ? 0 : 1);
    }
    arm();
    pl = sizeof peer;
    cs = accept(ls, (struct sockaddr *)&peer, &pl);
    printf("accept with SA_RESTART: %s\n", cs >= 0 ? "restarted" : "FAIL");
    waitpid(con, NULL, 0);
    if (cs >= 0) close(cs);
    close(ls);
    unlink(sun.sun_path);

    /* 11. SA_NODEFER: a handler that raises its own signal runs nested in
       itself with it, after itself without it (first run deferred from a
       blocked pipe read). */
    for (int nodefer = 0; nodefer < 2; nodefer++) {
        depth = max_depth = raised = 0;
        install(SIGALRM, nested, nodefer ? SA_NODEFER : 0);
        if (pipe(rd) != 0) return 2;
        n = blocked_read(rd[0], buf, 0);
        printf("SA_NODEFER %d: read %zd, deepest nesting %d\n", nodefer, n, (int)max_depth);
        close(rd[0]);
        close(rd[1]);
    }

    /* Every handler's byte reached the atoll file. */
    lseek(file_fd, 0, SEEK_SET);
    n = read(file_fd, buf, sizeof buf);
    printf("handler runs %d, bytes in the file %zd\n", (int)hits, n);
    return 0;
}
"#;

/// The self-pipe trick (CMake's process code, libuv, shells): a SIGCHLD
/// handler writes a byte into an atoll pipe while `main` waits for it in
/// `select`, then in `poll`; 50 rounds each.
const SELF_PIPE: &str = r#"#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <sys/wait.h>
#include <unistd.h>

static int selfpipe[2];

static void on_chld(int sig) {
    int saved = errno;
    char c = 'c';
    (void)sig;
    if (write(selfpipe[1], &c, 1) != 1) _exit(90);
    errno = saved;
}

/* One round: a child exits; main waits in select (how 0) or poll (how 1)
   on the read end until the handler's byte is there. */
static int round_trip(int how) {
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) { usleep(2000); _exit(7); }
    int woken = 0, eintr = 0;
    for (int tries = 0; tries < 100 && !woken; tries++) {
        int r;
        if (how == 0) {
            fd_set rs;
            FD_ZERO(&rs);
            FD_SET(selfpipe[0], &rs);
            struct timeval tv = { 5, 0 };
            r = select(selfpipe[0] + 1, &rs, NULL, NULL, &tv);
        } else {
            struct pollfd p = { selfpipe[0], POLLIN, 0 };
            r = poll(&p, 1, 5000);
        }
        if (r < 0 && errno == EINTR) { eintr++; continue; }
        if (r == 0) return -2; /* the byte never came */
        if (r < 0) return -3;
        char c;
        if (read(selfpipe[0], &c, 1) == 1 && c == 'c') woken = 1;
    }
    int st;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 7) return -4;
    return woken ? 1 : -5;
}

int main(int argc, char **argv) {
    int runs = argc > 1 ? atoi(argv[1]) : 50;
    if (pipe2(selfpipe, O_NONBLOCK) != 0) { perror("pipe"); return 2; }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_chld;
    sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGCHLD, &sa, NULL);
    int ok[2] = { 0, 0 };
    for (int how = 0; how < 2; how++)
        for (int i = 0; i < runs; i++) {
            int r = round_trip(how);
            if (r == 1) ok[how]++;
            else { printf("%s run %d failed: %d\n", how ? "poll" : "select", i, r); break; }
        }
    printf("select woken %d/%d, poll woken %d/%d\n", ok[0], runs, ok[1], runs);
    return 0;
}
"#;

/// The C probe prints the same under atoll (atoll pipes, an atoll file)
/// as on the host: SA_RESTART vs not on a blocking pipe read (through the
/// wrapper and through the SIGSYS net), host calls restarted through both,
/// oldact, SA_SIGINFO (with a ucontext) and SA_RESETHAND, SA_NODEFER,
/// sigsuspend and pselect temporary masks, siglongjmp out of a pipe read, a
/// blocked signal staying blocked, accept on a socket bound in the mount
/// with and without SA_RESTART.
#[test]
fn handlers_interrupting_atoll_code_run_as_program_code_as_on_the_host() {
    let dir = tempfile::tempdir().unwrap();
    let bin = compile_probe(dir.path(), "sigprobe", PROBE);
    let host = Command::new(&bin)
        .arg(dir.path())
        .output_bounded()
        .expect("probe");
    let host_out = text(&host.stdout);
    assert!(host_out.contains("pipe read without SA_RESTART: -1 EINTR, handler byte arrived"));
    assert!(host_out.contains("pipe read with SA_RESTART: 2 (restarted)"));
    assert!(host_out.contains("pipe syscall(read) with SA_RESTART: 2 (restarted)"));
    assert!(host.status.success(), "{host_out}");
    let script = format!("{} \"$ROOT\"", bin.display());
    for opts in [&[][..], &["--servers", "3", "--incoherent"][..]] {
        let o = run_in_atoll(opts, &script);
        assert_eq!(text(&o.stdout), host_out, "stderr: {}", text(&o.stderr));
        assert!(o.status.success());
    }
}

/// The self-pipe trick wakes `select` and `poll` on an atoll pipe: 50 runs
/// of 10 rounds each and one of 50, on one server and on 3 servers in
/// incoherent mode.
#[test]
fn self_pipe_written_by_a_sigchld_handler_wakes_select_and_poll() {
    let dir = tempfile::tempdir().unwrap();
    let bin = compile_probe(dir.path(), "selfpipe", SELF_PIPE);
    let host = Command::new(&bin)
        .arg("50")
        .output_bounded()
        .expect("probe");
    assert_eq!(text(&host.stdout), "select woken 50/50, poll woken 50/50\n");
    // 50 runs of 10 rounds each, then one run of 50 rounds.
    let script = format!(
        "for i in $(seq 1 50); do timeout 20 {0} 10; done | sort | uniq -c; timeout 60 {0} 50",
        bin.display()
    );
    let want =
        "     50 select woken 10/10, poll woken 10/10\nselect woken 50/50, poll woken 50/50\n";
    for opts in [&[][..], &["--servers", "3", "--incoherent"][..]] {
        let o = run_in_atoll(opts, &script);
        assert_eq!(text(&o.stdout), want, "stderr: {}", text(&o.stderr));
    }
}

/// bash: a trap interrupts `wait`, and a second `wait` still finds the
/// job's end; 50 runs with 3 servers, incoherent.
#[test]
fn bash_trap_interrupting_wait_50_runs() {
    let o = run_in_atoll(
        &["--servers", "3", "--incoherent"],
        r#"
        ok=0
        for i in $(seq 1 50); do
          out=$(timeout 10 bash -c 'trap "echo got" USR1; (sleep 0.2; kill -USR1 $$) & wait; echo "after $?"; wait; echo done')
          if [ "$out" = "$(printf 'got\nafter 138\ndone')" ]; then ok=$((ok+1)); else echo "run $i: [$out]"; fi
        done
        echo "ok $ok"
        "#,
    );
    assert_eq!(text(&o.stdout), "ok 50\n", "stderr: {}", text(&o.stderr));
}

/// Nested command substitutions under pipes (pyenv's shims do this): every
/// reader sees end of file; 50 runs with 3 servers, incoherent.
#[test]
fn nested_command_substitutions_under_a_pipe_50_runs() {
    let o = run_in_atoll(
        &["--servers", "3", "--incoherent"],
        r#"
        ok=0
        for i in $(seq 1 50); do
          out=$(timeout 10 bash -c 'f() { echo "$(echo "$(printf inner) $(echo mid | cat)") outer"; }; x=$(f | cat | tr a-z A-Z); y=$( (echo "$(f)" ; echo "$(f | cat)") | sort | uniq -c | tr -s " "); echo "$x|$y"')
          if [ "$out" = "INNER MID OUTER| 2 inner mid outer" ]; then ok=$((ok+1)); else echo "run $i: [$out]"; fi
        done
        echo "ok $ok"
        "#,
    );
    assert_eq!(text(&o.stdout), "ok 50\n", "stderr: {}", text(&o.stderr));
}

/// A storm of trapped signals (one every 5 ms) while bash runs nested
/// command substitutions through pipes: reads cut short by the trap
/// restart or fail with EINTR (bash retries), and no pipe end leaks, so
/// every substitution sees end of file; 20 runs with 3 servers, incoherent.
/// A run takes about 3 s on a loaded 2-CPU machine; one that has not ended
/// in 60 s hangs (its `rc 124` tells a hang from wrong output).
#[test]
fn trap_storm_during_nested_command_substitutions_20_runs() {
    let o = run_in_atoll(
        &["--servers", "3", "--incoherent"],
        r#"
        ok=0
        for i in $(seq 1 20); do
          out=$(timeout 60 bash -c '
            n=0; trap "n=\$((n+1))" USR1
            me=$$
            ( for k in $(seq 1 200); do kill -USR1 $me 2>/dev/null || exit 0; sleep 0.005; done ) &
            killer=$!
            r=""
            for j in $(seq 1 20); do
              x=$(echo "$(echo "$(printf a | cat) $(echo b | cat | cat)") c" | tr a-c A-C)
              r="$r$x;"
            done
            kill $killer 2>/dev/null; wait $killer 2>/dev/null
            echo "$r" | tr ";" "\n" | grep -c "^A B C$"
          '; echo "rc $?")
          if [ "$out" = "20
rc 0" ]; then ok=$((ok+1)); else echo "run $i: [$out]"; fi
        done
        echo "ok $ok"
        "#,
    );
    assert_eq!(text(&o.stdout), "ok 20\n", "stderr: {}", text(&o.stderr));
}

/// bash's SIGCHLD handler and traps, with a background job and `wait`.
#[test]
fn bash_background_jobs_and_traps_during_wait_match_the_host() {
    assert_same(
        &[],
        r#"
        (sleep 0.2; echo child) &
        wait $!; echo "waited $?"
        trap 'echo trapped' USR1
        (sleep 0.2; kill -USR1 $$) &
        wait $!; echo "interrupted $?"
        wait; echo "all $?"
        "#,
        true,
    );
}

/// CPython's self-pipe: `signal.set_wakeup_fd` on an atoll pipe, and an
/// interval timer fires while the program sleeps in `select` on that very
/// pipe: the C handler's byte must reach the pipe and wake the select.
#[test]
fn python_wakeup_fd_on_an_atoll_pipe_wakes_select() {
    require("python3");
    let o = run_in_atoll(
        &[],
        r#"timeout 60 python3 - <<'END'
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

/// CMake configures and builds a C project in the mount with atoll pipes
/// (its process code waits for children with the self-pipe trick).
#[test]
fn cmake_configures_and_builds_a_c_project_with_atoll_pipes() {
    require("cmake");
    let o = run_in_atoll(
        &[],
        r#"
        set -e
        mkdir -p "$ROOT/proj" && cd "$ROOT/proj"
        printf 'cmake_minimum_required(VERSION 3.10)\nproject(hello C)\nadd_executable(hello main.c)\n' > CMakeLists.txt
        printf '#include <stdio.h>\nint main(void){puts("hello from cmake");return 0;}\n' > main.c
        timeout 120 cmake -S . -B build > cfg.log 2>&1 || { tail -20 cfg.log; exit 1; }
        grep -q "Build files have been written" cfg.log
        timeout 120 cmake --build build > build.log 2>&1 || { tail -20 build.log; exit 1; }
        ./build/hello
        "#,
    );
    assert_eq!(
        text(&o.stdout),
        "hello from cmake\n",
        "stderr: {}",
        text(&o.stderr)
    );
    assert!(o.status.success());
}

/// A one-shot timer (`SIGALRM`, caught) fires at a different moment of
/// each of many `execve`s: before the call (the handler runs in the old
/// image, then the new one runs), or once the call is under way (the new
/// image dies of `SIGALRM`, whose action `execve` reset to the default).
/// Never neither: a signal that arrives while atoll prepares an exec must
/// not be lost with the old image.
const EXEC_SIGNAL: &str = r#"
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_alarm(int s) { (void)s; write(1, "h", 1); }

int main(int argc, char **argv) {
    if (argc > 2) { /* the new image */
        usleep(20000);
        write(1, "r", 1);
        return 0;
    }
    int trials = atoi(argv[1]), lost = 0, handled = 0, killed = 0, other = 0;
    for (int i = 0; i < trials; i++) {
        int p[2];
        if (pipe(p)) return 2;
        pid_t pid = fork();
        if (pid == 0) {
            dup2(p[1], 1);
            close(p[0]);
            struct sigaction sa;
            memset(&sa, 0, sizeof sa);
            sa.sa_handler = on_alarm;
            sigaction(SIGALRM, &sa, 0);
            struct itimerval it = {{0, 0}, {0, 1 + (i * 37) % 4000}};
            setitimer(ITIMER_REAL, &it, 0);
            execl(argv[0], argv[0], "x", "again", (char *)0);
            _exit(127);
        }
        close(p[1]);
        char buf[16] = {0};
        int n = 0, r;
        while ((r = read(p[0], buf + n, sizeof buf - 1 - n)) > 0) n += r;
        close(p[0]);
        int st;
        waitpid(pid, &st, 0);
        if (WIFEXITED(st) && WEXITSTATUS(st) == 0 && !strcmp(buf, "hr")) handled++;
        else if (WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM && !strchr(buf, 'r')) killed++;
        else if (WIFEXITED(st) && WEXITSTATUS(st) == 0 && !strcmp(buf, "r")) lost++;
        else { other++; fprintf(stderr, "trial %d: '%s' status %#x\n", i, buf, st); }
    }
    printf("lost %d other %d\n", lost, other);
    fprintf(stderr, "handled %d killed %d\n", handled, killed);
    return 0;
}
"#;

#[test]
fn a_signal_arriving_while_atoll_prepares_an_exec_is_not_lost() {
    let dir = tempfile::tempdir().unwrap();
    let bin = compile_probe(dir.path(), "execsignal", EXEC_SIGNAL);
    let host = Command::new(&bin)
        .arg("120")
        .output_bounded()
        .expect("probe");
    assert_eq!(
        text(&host.stdout),
        "lost 0 other 0\n",
        "{}",
        text(&host.stderr)
    );
    // The program in the mount (its exec copies it out of the buffer
    // cache: a long window), and on the host.
    let script = format!(
        "cp {0} \"$ROOT/execsignal\" && \"$ROOT/execsignal\" 120 && {0} 120",
        bin.display()
    );
    for opts in [&[][..], &["--servers", "3", "--incoherent"][..]] {
        let o = run_in_atoll(opts, &script);
        assert_eq!(
            text(&o.stdout),
            "lost 0 other 0\nlost 0 other 0\n",
            "stderr: {}",
            text(&o.stderr)
        );
        assert!(o.status.success());
    }
}

/// Real-time signals queued faster than the receiver's calls in the mount
/// return: more arrive during one call than atoll's per-thread deferred
/// set holds, and the rest must wait in the kernel's queue, not be lost.
/// Three servers; compared with the same program on the host.
#[test]
fn a_flood_of_queued_real_time_signals_loses_none() {
    let dir = tempfile::tempdir().unwrap();
    let bin = compile_probe(dir.path(), "rt_flood", include_str!("signals/rt_flood.c"));
    let script = format!("cd \"$ROOT\" && {}", bin.display());
    let out = assert_same(&["--servers", "3"], &script, true);
    assert_eq!(out, "sender 0, got all, values each once\n");
}
