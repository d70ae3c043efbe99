//! Pipes and FIFOs as atoll objects (`atoll run --pipes atoll`): shell
//! pipelines, POSIX semantics through a C probe, FIFOs in the mount,
//! readiness (poll, select, epoll), make's jobserver, large writes to
//! waiting readers (both ends copying at once), and a throughput and
//! latency measurement against Linux pipes (`--ignored`).

use atoll_tests::OutputBounded as _;
use std::process::Output;

use atoll_tests::{assert_same, atoll, compile_probe, require, run_in_atoll, MOUNT};

const PIPES: &[&str] = &["--pipes", "atoll"];

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).to_string()
}

fn run_probe_in_atoll(opts: &[&str], source: &str, name: &str, args: &[&str]) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let bin = compile_probe(dir.path(), name, source);
    atoll()
        .arg("run")
        .args(["--memory", "64M"])
        .args(opts)
        .arg("--")
        .arg(&bin)
        .args(args)
        .output_bounded()
        .expect("spawn atoll")
}

#[test]
fn pipelines_of_several_stages_match_the_host() {
    let out = assert_same(
        PIPES,
        r#"
        set -e
        cd "$ROOT"
        seq 1 20000 | sort -rn | awk '{ s += $1 } END { print s }' | tr 0-9 a-j | cat
        seq 1 5000 > nums
        cat nums | grep 7 | sed 's/7/seven/' | sort | uniq -c | sort -k2 | tail -3
        n=$(seq 1 300 | wc -l); echo "subst $n"
        seq 1 3 | while read x; do echo "line $x"; done
        head -c 300000 /dev/zero | tr '\0' x | wc -c
        yes | head -n 100000 | wc -l
        cat <(echo procsub) ; diff <(seq 10) <(seq 10) && echo same
        echo stdin | cat /dev/stdin
        echo | { [ -p /dev/stdin ] && echo "stdin is a fifo"; }
        set +e; seq 1 100000 | head -1; echo "status ${PIPESTATUS[*]}"
        "#,
        true,
    );
    assert!(out.contains("subst 300"), "{out}");
    assert!(out.contains("status 141 0"), "SIGPIPE for seq: {out}");
}

/// gzip's test suite idiom (tests/zgrep-signal): dash forks with every
/// signal blocked, unblocks them in the child, and perl execs a writer
/// into a pipe whose read end is gone: the writer must die of SIGPIPE
/// (status 141), on atoll pipes and host pipes, exec'd locally or remotely.
#[test]
fn a_writer_execd_by_dash_into_a_dangling_pipe_dies_of_sigpipe() {
    require("perl");
    let script = r#"
        cd "$ROOT" && echo a > f
        cat > dangling.sh <<'END'
perl -e 'use POSIX qw(dup2); $SIG{PIPE} = "DEFAULT";
         pipe my ($r, $w) or die; dup2 fileno $w, 1 or die; close $r;
         exec "cat", "f", "f";'
echo "status $?"
END
        sh dangling.sh
        "#;
    for opts in [
        &["--placement", "local"][..],
        &["--placement", "round-robin"][..],
        &["--pipes", "host"][..],
    ] {
        let o = run_in_atoll(opts, script);
        let out = text(&o.stdout);
        assert!(
            out.contains("status 141"),
            "{opts:?}: {out}{}",
            text(&o.stderr)
        );
    }
}

/// POSIX semantics of one pipe, checked by a C program.
const PROBE: &str = r#"
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHECK(c) do { if (!(c)) { printf("FAIL line %d: %s (errno %d)\n", __LINE__, #c, errno); exit(1); } } while (0)

static volatile sig_atomic_t got_pipe, got_alarm;
static void on_pipe(int s) { (void)s; got_pipe = 1; }
static void on_alarm(int s) { (void)s; got_alarm = 1; }

int main(void) {
    int p[2];
    char buf[70000];
    struct stat st;

    CHECK(pipe2(p, O_CLOEXEC) == 0);
    CHECK(fstat(p[0], &st) == 0 && S_ISFIFO(st.st_mode));
    CHECK((fcntl(p[0], F_GETFD) & FD_CLOEXEC) != 0);
    CHECK(lseek(p[0], 0, SEEK_SET) == -1 && errno == ESPIPE);
    CHECK(write(p[1], "hello", 5) == 5);
    int n = -1;
    CHECK(ioctl(p[0], FIONREAD, &n) == 0 && n == 5);
    CHECK(read(p[0], buf, sizeof buf) == 5 && memcmp(buf, "hello", 5) == 0);
    printf("basic ok\n");

    /* Non-blocking: EAGAIN when empty and when full. */
    CHECK(fcntl(p[0], F_SETFL, O_NONBLOCK) == 0);
    CHECK(read(p[0], buf, 10) == -1 && errno == EAGAIN);
    CHECK(fcntl(p[1], F_SETFL, O_NONBLOCK) == 0);
    int cap = fcntl(p[1], F_GETPIPE_SZ);
    CHECK(cap >= 4096);
    memset(buf, 'a', sizeof buf);
    long total = 0;
    for (;;) {
        ssize_t w = write(p[1], buf, 1000);
        if (w < 0) { CHECK(errno == EAGAIN); break; }
        total += w;
    }
    CHECK(total <= cap && total >= cap / 2);
    CHECK(ioctl(p[0], FIONREAD, &n) == 0 && n == total);
    while (read(p[0], buf, sizeof buf) > 0) {}
    CHECK(fcntl(p[0], F_SETFL, 0) == 0 && fcntl(p[1], F_SETFL, 0) == 0);
    printf("nonblock ok cap=%d\n", cap);

    /* F_SETPIPE_SZ: rounded up to pages, honoured by writers, EBUSY below
     * what the pipe holds (as Linux's pipe_set_size). */
    CHECK(fcntl(p[1], F_SETPIPE_SZ, 100) == 4096);
    CHECK(fcntl(p[0], F_GETPIPE_SZ) == 4096);
    CHECK(fcntl(p[1], F_SETFL, O_NONBLOCK) == 0);
    CHECK(write(p[1], buf, 10000) == 4096);
    CHECK(write(p[1], buf, 1) == -1 && errno == EAGAIN);
    struct pollfd wp = { .fd = p[1], .events = POLLOUT };
    CHECK(poll(&wp, 1, 0) == 0);
    CHECK(fcntl(p[1], F_SETPIPE_SZ, 5000) == 8192);
    CHECK(poll(&wp, 1, 0) == 1 && (wp.revents & POLLOUT));
    CHECK(write(p[1], buf, 10000) == 4096);
    CHECK(fcntl(p[1], F_SETPIPE_SZ, 4096) == -1 && errno == EBUSY);
    CHECK(fcntl(p[1], F_GETPIPE_SZ) == 8192);
    CHECK(read(p[0], buf, sizeof buf) == 8192);
    CHECK(fcntl(p[1], F_SETPIPE_SZ, cap) == cap);
    CHECK(fcntl(p[1], F_SETFL, 0) == 0);
    printf("pipe size ok\n");

    /* poll, select and epoll see readiness. */
    struct pollfd pf = { .fd = p[0], .events = POLLIN };
    CHECK(poll(&pf, 1, 0) == 0);
    CHECK(write(p[1], "x", 1) == 1);
    CHECK(poll(&pf, 1, 1000) == 1 && (pf.revents & POLLIN));
    fd_set rs; FD_ZERO(&rs); FD_SET(p[0], &rs);
    struct timeval tv = { 1, 0 };
    CHECK(select(p[0] + 1, &rs, NULL, NULL, &tv) == 1 && FD_ISSET(p[0], &rs));
    int ep = epoll_create1(0);
    struct epoll_event ev = { .events = EPOLLIN, .data.u64 = 42 }, out[4];
    CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, p[0], &ev) == 0);
    CHECK(epoll_wait(ep, out, 4, 1000) == 1 && out[0].data.u64 == 42);
    CHECK(read(p[0], buf, 1) == 1);
    CHECK(epoll_wait(ep, out, 4, 10) == 0);
    /* a mixed set: an atoll pipe and host descriptors */
    int dn = open("/dev/null", O_RDONLY), efd = eventfd(0, 0);
    struct pollfd two[2] = { { .fd = p[0], .events = POLLIN }, { .fd = dn, .events = POLLIN } };
    CHECK(poll(two, 2, 1000) == 1 && two[0].revents == 0 && (two[1].revents & POLLIN));
    /* a writer in another process wakes a poller, alone or in a mixed set */
    pid_t k = fork();
    if (k == 0) { usleep(50000); write(p[1], "w", 1); _exit(0); }
    pf.revents = 0;
    CHECK(poll(&pf, 1, 5000) == 1 && (pf.revents & POLLIN));
    CHECK(read(p[0], buf, 1) == 1 && buf[0] == 'w');
    waitpid(k, NULL, 0);
    k = fork();
    if (k == 0) { usleep(50000); write(p[1], "y", 1); _exit(0); }
    struct pollfd mixed[2] = { { .fd = efd, .events = POLLIN }, { .fd = p[0], .events = POLLIN } };
    CHECK(poll(mixed, 2, 5000) == 1 && (mixed[1].revents & POLLIN) && mixed[0].revents == 0);
    pf.revents = 0;
    CHECK(poll(&pf, 1, 5000) == 1 && (pf.revents & POLLIN));
    CHECK(epoll_wait(ep, out, 4, 1000) == 1);
    CHECK(epoll_ctl(ep, EPOLL_CTL_DEL, p[0], NULL) == 0);
    CHECK(read(p[0], buf, 1) == 1 && buf[0] == 'y');
    waitpid(k, NULL, 0);
    printf("readiness ok\n");

    /* Atomic writes of PIPE_BUF bytes from several writers. */
    int q[2];
    CHECK(pipe(q) == 0);
    for (int w = 0; w < 4; w++) {
        if (fork() == 0) {
            close(q[0]);
            char rec[4096];
            memset(rec, 'A' + w, sizeof rec);
            for (int i = 0; i < 50; i++) CHECK(write(q[1], rec, sizeof rec) == sizeof rec);
            _exit(0);
        }
    }
    close(q[1]);
    long got = 0;
    char rec[4096];
    for (;;) {
        size_t have = 0;
        ssize_t r = 0;
        while (have < sizeof rec && (r = read(q[0], rec + have, sizeof rec - have)) > 0) have += r;
        if (have == 0) break;
        CHECK(have == sizeof rec);
        for (size_t i = 1; i < sizeof rec; i++) CHECK(rec[i] == rec[0]);
        got++;
    }
    while (wait(NULL) > 0) {}
    CHECK(got == 200);
    printf("atomic ok\n");

    /* EOF when the last writer closes, also when it dies. */
    CHECK(pipe(q) == 0);
    k = fork();
    if (k == 0) { close(q[0]); write(q[1], "z", 1); pause(); _exit(0); }
    close(q[1]);
    CHECK(read(q[0], buf, 10) == 1);
    kill(k, SIGKILL);
    waitpid(k, NULL, 0);
    CHECK(read(q[0], buf, 10) == 0);
    close(q[0]);
    printf("eof ok\n");

    /* EPIPE and SIGPIPE when the last reader is gone. */
    signal(SIGPIPE, on_pipe);
    CHECK(pipe(q) == 0);
    close(q[0]);
    CHECK(write(q[1], "x", 1) == -1 && errno == EPIPE && got_pipe);
    close(q[1]);
    signal(SIGPIPE, SIG_DFL);
    CHECK(pipe(q) == 0);
    close(q[0]);
    k = fork();
    if (k == 0) { write(q[1], "x", 1); _exit(0); }
    close(q[1]);
    int status;
    waitpid(k, &status, 0);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGPIPE);
    printf("epipe ok\n");

    /* A blocked read is interrupted by a signal handler. */
    CHECK(pipe(q) == 0);
    struct sigaction sa = { .sa_handler = on_alarm };
    sigaction(SIGALRM, &sa, NULL);
    alarm(1);
    CHECK(read(q[0], buf, 1) == -1 && errno == EINTR && got_alarm);
    /* ... and restarted for an SA_RESTART handler (glibc's signal()). */
    signal(SIGALRM, on_alarm);
    got_alarm = 0;
    k = fork();
    if (k == 0) { sleep(2); write(q[1], "r", 1); _exit(0); }
    alarm(1);
    CHECK(read(q[0], buf, 1) == 1 && buf[0] == 'r' && got_alarm);
    waitpid(k, NULL, 0);
    printf("eintr ok\n");

    /* Ends survive exec with their counts: a child execs cat. */
    CHECK(pipe(q) == 0);
    int r2[2];
    CHECK(pipe(r2) == 0);
    k = fork();
    if (k == 0) {
        dup2(q[0], 0); dup2(r2[1], 1);
        close(q[0]); close(q[1]); close(r2[0]); close(r2[1]);
        execlp("cat", "cat", (char *)NULL);
        _exit(127);
    }
    close(q[0]); close(r2[1]);
    CHECK(write(q[1], "through exec\n", 13) == 13);
    close(q[1]);
    ssize_t m = 0, r;
    while ((r = read(r2[0], buf + m, sizeof buf - m)) > 0) m += r;
    CHECK(m == 13 && memcmp(buf, "through exec\n", 13) == 0);
    waitpid(k, NULL, 0);
    printf("exec ok\n");
    return 0;
}
"#;

#[test]
fn posix_semantics_of_atoll_pipes() {
    require("cc");
    let out = run_probe_in_atoll(PIPES, PROBE, "pipeprobe", &[]);
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "probe failed:\n{stdout}\n{}",
        text(&out.stderr)
    );
    for step in [
        "basic",
        "nonblock",
        "pipe size",
        "readiness",
        "atomic",
        "eof",
        "epipe",
        "eintr",
        "exec",
    ] {
        assert!(stdout.contains(&format!("{step} ok")), "{stdout}");
    }
}

#[test]
fn the_probe_also_passes_on_host_pipes() {
    // The same expectations hold for Linux's own pipes: the probe tests
    // POSIX, not atoll's reading of it.
    require("cc");
    let dir = tempfile::tempdir().unwrap();
    let bin = compile_probe(dir.path(), "pipeprobe", PROBE);
    let out = std::process::Command::new(&bin).output_bounded().unwrap();
    assert!(out.status.success(), "{}", text(&out.stdout));
}

#[test]
fn fifos_in_the_mount_connect_writer_and_reader_processes() {
    let out = atoll()
        .args(["run", "--memory", "64M", "--", "bash", "-c"])
        .arg(format!(
            r#"
            set -e
            cd {MOUNT}
            mkfifo f
            test -p f && echo "is fifo"
            ( seq 1 1000 > f ) &
            sum=$(awk '{{ s += $1 }} END {{ print s }}' < f)
            wait
            echo "sum $sum"
            # open for writing with O_NONBLOCK and no reader: ENXIO
            python3 -c 'import os,errno
try:
    os.open("f", os.O_WRONLY | os.O_NONBLOCK); print("opened?!")
except OSError as e:
    print("enxio" if e.errno == errno.ENXIO else e)
# O_RDONLY|O_NONBLOCK opens at once and reads EOF without writers
fd = os.open("f", os.O_RDONLY | os.O_NONBLOCK); print("eof", os.read(fd, 10) == b""); os.close(fd)
# O_RDWR never blocks and loops back
fd = os.open("f", os.O_RDWR); os.write(fd, b"loop"); print(os.read(fd, 10).decode()); os.close(fd)'
            # several writers, one reader
            ( for i in 1 2 3; do echo "w$i" > f & done; wait ) &
            exec 3< f
            sort <&3 | tr '\n' ' '; echo
            wait
            "#
        ))
        .output_bounded()
        .unwrap();
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(stdout.contains("is fifo"), "{stdout}");
    assert!(stdout.contains("sum 500500"), "{stdout}");
    assert!(stdout.contains("enxio"), "{stdout}");
    assert!(stdout.contains("eof True"), "{stdout}");
    assert!(stdout.contains("loop"), "{stdout}");
    assert!(stdout.contains("w1 w2 w3"), "{stdout}");
}

/// A reader waiting in a FIFO's open whose writer opens, writes, closes
/// and exits (its `SIGCHLD` reaching the reader's shell) still opens and
/// reads what was written: as Linux, the partner is looked for before the
/// signal, so the open never gives up the last end and drops the data.
#[test]
fn a_fifo_reader_whose_writer_came_and_went_before_a_signal_reads_its_data() {
    let out = assert_same(
        PIPES,
        r#"
        cd "$ROOT"
        mkfifo f
        for k in $(seq 1 40); do
            ( echo "w$k" > f ) &
            exec 3< f
            cat <&3
            exec 3<&-
            wait
        done | tail -n 3
        "#,
        true,
    );
    assert!(out.contains("w40"), "{out}");
}

#[test]
fn make_j4_with_an_atoll_jobserver_matches_a_host_build() {
    require("make");
    require("cc");
    let out = assert_same(
        PIPES,
        &format!(
            r#"
        set -e
        cd "$ROOT"
{}        make -j4 2>&1 | sort
        ./prog
        "#,
            atoll_tests::c_project_script(12)
        ),
        true,
    );
    assert!(out.contains("sum 78"), "{out}");
}

#[test]
fn pipe_counters_reach_the_statistics() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("stats.json");
    let out = atoll()
        .args(["run", "--memory", "64M", "--pipes", "atoll", "--stats-json"])
        .arg(&json)
        .args([
            "--",
            "bash",
            "-c",
            "head -c 100000 /dev/zero | cat > /dev/null",
        ])
        .output_bounded()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let sum = |k: &str| -> u64 {
        v["servers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s[k].as_u64().unwrap_or(0))
            .sum()
    };
    assert!(sum("pipes") >= 1, "{v}");
    assert!(sum("pipe_bytes") >= 100_000, "{v}");
    assert!(sum("pipe_ops") >= 2, "{v}");
}

/// Throughput and round-trip latency of atoll pipes vs Linux pipes.
const BENCH: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
int main(int argc, char **argv) {
    long mb = atol(argv[1]), rounds = atol(argv[2]);
    static char buf[65536];
    int p[2], q[2];
    pipe(p);
    double t0 = now();
    if (fork() == 0) { close(p[0]); for (long i = 0; i < mb * 16; i++) write(p[1], buf, sizeof buf); _exit(0); }
    close(p[1]);
    long got = 0; ssize_t r;
    while ((r = read(p[0], buf, sizeof buf)) > 0) got += r;
    double t1 = now();
    wait(NULL);
    printf("throughput %.0f MB/s (%ld bytes)\n", got / (t1 - t0) / 1e6, got);
    pipe(p); pipe(q);
    if (fork() == 0) {
        close(p[1]); close(q[0]);
        char c;
        while (read(p[0], &c, 1) == 1) write(q[1], &c, 1);
        _exit(0);
    }
    close(p[0]); close(q[1]);
    char c = 'x';
    t0 = now();
    for (long i = 0; i < rounds; i++) { write(p[1], &c, 1); read(q[0], &c, 1); }
    t1 = now();
    close(p[1]);
    wait(NULL);
    printf("round trip %.1f us\n", (t1 - t0) / rounds * 1e6);
    return 0;
}
"#;

#[test]
#[ignore = "measurement: cargo test --release -p atoll-tests --test pipes -- --ignored --nocapture"]
fn measure_pipe_throughput_and_latency() {
    let dir = tempfile::tempdir().unwrap();
    let bin = compile_probe(dir.path(), "pipebench", BENCH);
    let host = std::process::Command::new(&bin)
        .args(["256", "20000"])
        .output_bounded()
        .unwrap();
    println!("linux pipes:\n{}", text(&host.stdout));
    for mode in ["atoll", "host"] {
        let out = run_probe_in_atoll(&["--pipes", mode], BENCH, "pipebench", &["256", "20000"]);
        println!("under atoll, --pipes {mode}:\n{}", text(&out.stdout));
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
}

#[test]
fn pipes_are_atoll_by_default_and_host_on_request() {
    let stage_stdout = |opts: &[&str]| -> String {
        let out = atoll()
            .arg("run")
            .args(opts)
            .args([
                "--",
                "bash",
                "-c",
                "m=$(stat -c %d /atoll); stat -L -c %d /proc/self/fd/1 | \
                 { read d; [ \"$d\" = \"$m\" ] && echo atoll || echo host; }",
            ])
            .env_remove("ATOLL_PIPES")
            .output_bounded()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout)
    };
    // An atoll pipe is a file of the instance (its device is the
    // mount's), a host one the kernel's pipe file system's.
    assert_eq!(stage_stdout(&[]), "atoll\n");
    assert_eq!(stage_stdout(&["--pipes", "atoll"]), "atoll\n");
    assert_eq!(stage_stdout(&["--pipes", "host"]), "host\n");
}

/// Signals that `pthread_sigmask` unblocks are delivered as it returns,
/// and a signal a process raises at itself as `raise` returns; their
/// handlers must run as program code, whose writes reach atoll pipes (CPython's test_signal: the C handler writes the signal number
/// to the wakeup fd, an atoll pipe here, and the test reads it back).
#[test]
fn handlers_of_signals_unblocked_by_sigmask_write_to_atoll_pipes() {
    require("python3");
    let o = run_in_atoll(
        PIPES,
        r#"python3 - <<'END'
import os, signal, struct
def handler(signum, frame): pass
read, write = os.pipe()
os.set_blocking(write, False)
signal.set_wakeup_fd(write)
for s in (signal.SIGUSR1, signal.SIGUSR2):
    signal.signal(s, handler)
signal.pthread_sigmask(signal.SIG_BLOCK, (signal.SIGUSR1, signal.SIGUSR2))
signal.raise_signal(signal.SIGUSR1)
signal.raise_signal(signal.SIGUSR2)
signal.pthread_sigmask(signal.SIG_UNBLOCK, (signal.SIGUSR1, signal.SIGUSR2))
os.set_blocking(read, False)
data = os.read(read, 3)
print("raised", sorted(struct.unpack('%uB' % len(data), data)))
signal.signal(signal.SIGALRM, handler)
signal.raise_signal(signal.SIGUSR1)
signal.raise_signal(signal.SIGALRM)
data = os.read(read, 3)
print("raised", struct.unpack('%uB' % len(data), data))
END"#,
    );
    assert_eq!(
        text(&o.stdout),
        "raised [10, 12]\nraised (10, 14)\n",
        "{}",
        text(&o.stderr)
    );
}

/// Large writes while readers wait (`pipes/split.c`): one reader with odd
/// sizes and unaligned buffers, two readers, a reader killed while the
/// writer may be copying into its buffer, a writer killed mid-write. The
/// probe checks every byte itself; the checksums of what a lone reader got
/// must equal those of the same program on a Linux pipe.
const SPLIT: &str = include_str!("pipes/split.c");
/// Splits are on by default (`atoll_client::pipesplit::ENV_SPLIT`).
const SPLIT_SWITCH: &str = "ATOLL_PIPE_SPLIT";
/// Another thread's `execve` while the main thread reads 1 MiB blocks
/// from a large writer (`pipes/exec_split.c`).
const EXEC_SPLIT: &str = include_str!("pipes/exec_split.c");

#[test]
fn large_writes_to_waiting_readers_deliver_linux_s_bytes() {
    require("cc");
    let dir = tempfile::tempdir().unwrap();
    let bin = compile_probe(dir.path(), "split", SPLIT);
    let host = std::process::Command::new(&bin).output_bounded().unwrap();
    assert!(host.status.success(), "host: {}", text(&host.stdout));
    let mut cmd = atoll();
    cmd.args(["run", "--memory", "256M", "--servers", "2"])
        .args(PIPES)
        .arg("--")
        .arg(&bin);
    let out = atoll_tests::output_within(cmd, atoll_tests::RUN_LIMIT);
    assert_eq!(
        text(&out.stdout),
        text(&host.stdout),
        "{}",
        text(&out.stderr)
    );
    assert!(out.status.success());
}

/// A writer that finds the reader waiting copies part of its bytes
/// straight into the reader's buffer while the reader copies the rest
/// (both ends at once); the bytes it copied are counted.
#[test]
fn a_writer_copies_into_a_waiting_reader_s_buffer() {
    require("cc");
    let dir = tempfile::tempdir().unwrap();
    let bin = compile_probe(dir.path(), "split", SPLIT);
    let json = dir.path().join("stats.json");
    let mut cmd = atoll();
    cmd.args(["run", "--memory", "256M", "--servers", "2"])
        .args(["--island", "coherent"])
        .args(PIPES)
        .arg("--stats-json")
        .arg(&json)
        .arg("--")
        .arg(&bin);
    let out = atoll_tests::output_within(cmd, atoll_tests::RUN_LIMIT);
    assert!(out.status.success(), "{}", text(&out.stdout));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let split = v["counters"]["pipe.split_bytes"].as_u64().unwrap_or(0);
    assert!(split > 0, "{}", v["counters"]);
}

/// A process whose main thread reads large blocks (a split or a ticket in
/// flight) while another of its threads calls `execve`: the new program
/// reads the rest of the writer's stream as a suffix checked byte for
/// byte, and the writer finishes, as on Linux. The main thread's id passes
/// to the new program, so a ring lock or split it held must not seem
/// held by the new program (before: every round could hang for good),
/// and no writer may copy into the new program's memory. With splits on
/// (the default) and off.
#[test]
fn an_execve_while_the_main_thread_reads_a_large_write_leaves_the_pipe_to_the_new_program() {
    require("cc");
    let dir = tempfile::tempdir().unwrap();
    let bin = compile_probe(dir.path(), "exec_split", EXEC_SPLIT);
    let host = std::process::Command::new(&bin).output_bounded().unwrap();
    assert!(host.status.success(), "host: {}", text(&host.stderr));
    for splits in ["on", "off"] {
        let mut cmd = atoll();
        if std::env::var(atoll_tests::ENV_TEST_ISLAND).is_ok_and(|i| i == "copy") {
            // No splits or tickets there, and every byte is a message:
            // a shorter stream keeps the island pass quick.
            cmd.env("EXEC_SPLIT_MIB", "24");
        }
        cmd.env(SPLIT_SWITCH, splits)
            .args(["run", "--servers", "2"])
            .args(PIPES)
            .arg("--")
            .arg(&bin);
        let out = atoll_tests::output_within(cmd, std::time::Duration::from_secs(150));
        assert_eq!(
            text(&out.stdout),
            text(&host.stdout),
            "splits {splits}: {}",
            text(&out.stderr)
        );
        assert!(out.status.success(), "splits {splits}");
    }
}

/// Once `wait` (`waitpid`, `waitid`) has returned for a reader that
/// exited or that a signal killed, its pipe end no longer counts, as Linux
/// closes a process's files before its parent can reap it: the next write
/// is `EPIPE` (Python's `multiprocessing` tells that its resource tracker
/// died this way). More processes than cores, two servers.
#[test]
fn a_write_after_the_reaped_reader_exited_is_epipe() {
    let script = format!(
        "cd \"$ROOT\"\ncat > epipe.py <<'PY'\n{}PY\n\
         for k in 1 2 3; do python3 epipe.py > out$k & done; wait\n\
         cat out1 out2 out3\n",
        include_str!("pipes/epipe.py")
    );
    let out = assert_same(&["--servers", "2"], &script, true);
    assert_eq!(out.matches("without EPIPE: 0").count(), 12, "{out}");
    assert_eq!(out.matches("found a killed reader: 0").count(), 3, "{out}");
}
