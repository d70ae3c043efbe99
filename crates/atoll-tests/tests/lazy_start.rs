//! A start that maps nothing until its first atoll call
//! (`client/src/session/ondemand.rs`): an image joins its session with
//! the descriptors it inherited or was sent, and the buffer cache and the
//! control block are mapped by the first call that needs them. These
//! tests check that a process that never touches atoll maps neither, and
//! that the first call works wherever it comes from: a signal handler, two
//! threads at once, a grandchild whose parent never made one.

use atoll_tests::{compile_probe, run_in_atoll};

/// How many mappings of the buffer cache and of the control block
/// `/proc/self/maps` lists, as `cache N control M`.
const COUNT_MAPS: &str = r#"
static void count_maps(const char *when) {
    char buf[65536];
    int fd = open("/proc/self/maps", O_RDONLY), n = 0, got;
    while (fd >= 0 && (got = read(fd, buf + n, sizeof buf - 1 - n)) > 0) n += got;
    if (fd >= 0) close(fd);
    buf[n] = 0;
    int cache = 0, control = 0;
    for (char *p = buf; (p = strstr(p, "memfd:atoll-")); p++) {
        if (!strncmp(p, "memfd:atoll-cache", 17)) cache++;
        if (!strncmp(p, "memfd:atoll-control", 19)) control++;
    }
    printf("%s: cache %d control %d\n", when, cache, control);
    fflush(stdout);
}
"#;

fn probe(name: &str, body: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = format!(
        "#include <fcntl.h>\n#include <pthread.h>\n#include <signal.h>\n#include <stdio.h>\n\
         #include <stdlib.h>\n#include <string.h>\n#include <sys/time.h>\n#include <sys/wait.h>\n\
         #include <unistd.h>\n{COUNT_MAPS}\n{body}"
    );
    let bin = compile_probe(dir.path(), name, &src);
    (dir, bin)
}

fn run(script: &str) -> String {
    let out = run_in_atoll(&["--island", "coherent"], script);
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A program that only reads host files maps neither the buffer cache
/// nor the control block; one that reads a file in the mount maps both.
/// (Before, every image mapped both as it started.)
#[test]
fn a_process_that_never_touches_atoll_maps_no_buffer_cache() {
    let (_dir, bin) = probe(
        "maps",
        r#"
        int main(int argc, char **argv) {
            count_maps("host only");
            if (argc > 1) {
                char b[16];
                int fd = open(argv[1], O_RDONLY);
                if (fd < 0 || read(fd, b, sizeof b) != 4) { perror("read"); return 1; }
                close(fd);
                count_maps("after an atoll read");
            }
            return 0;
        }"#,
    );
    let text = run(&format!(
        "{b} && echo abc > $ROOT/f && {b} $ROOT/f",
        b = bin.display()
    ));
    assert_eq!(
        text,
        "host only: cache 0 control 0\n\
         host only: cache 0 control 0\n\
         after an atoll read: cache 1 control 1\n",
    );
}

/// The first atoll call of a process comes from a signal handler that
/// interrupted program code (a timer's `SIGALRM` while `main` spins): the
/// handler creates, writes and reads back a file in the mount.
#[test]
fn the_first_atoll_call_may_come_from_a_signal_handler() {
    let (_dir, bin) = probe(
        "handler",
        r#"
        static volatile sig_atomic_t done;
        static char got[64];
        static void on_alarm(int s) {
            (void)s;
            int fd = open("/atoll/h", O_CREAT | O_WRONLY | O_TRUNC, 0644);
            if (fd >= 0) { write(fd, "from the handler", 16); close(fd); }
            fd = open("/atoll/h", O_RDONLY);
            if (fd >= 0) { read(fd, got, sizeof got - 1); close(fd); }
            done = 1;
        }
        int main(void) {
            count_maps("before");
            struct sigaction sa;
            memset(&sa, 0, sizeof sa);
            sa.sa_handler = on_alarm;
            sigaction(SIGALRM, &sa, 0);
            struct itimerval t = {{0, 0}, {0, 20000}};
            setitimer(ITIMER_REAL, &t, 0);
            while (!done) { }
            printf("handler read: %s\n", got);
            count_maps("after");
            return 0;
        }"#,
    );
    let text = run(&format!("{} && cat $ROOT/h", bin.display()));
    assert_eq!(
        text,
        "before: cache 0 control 0\n\
         handler read: from the handler\n\
         after: cache 1 control 1\n\
         from the handler",
    );
}

/// Eight threads make their process's first atoll calls at once (a
/// barrier, then each creates, writes and reads back its own file): every
/// one of them sees one mapping of each, and every file holds its bytes.
#[test]
fn threads_racing_to_the_first_atoll_call_share_one_mapping() {
    let (_dir, bin) = probe(
        "race",
        r#"
        #define N 8
        static pthread_barrier_t go;
        static int ok[N];
        static void *one(void *arg) {
            long i = (long)arg;
            char path[32], want[32], back[32] = {0};
            snprintf(path, sizeof path, "/atoll/t%ld", i);
            int len = snprintf(want, sizeof want, "thread %ld", i);
            pthread_barrier_wait(&go);
            int fd = open(path, O_CREAT | O_RDWR | O_TRUNC, 0644);
            if (fd < 0) return 0;
            ok[i] = write(fd, want, len) == len && pread(fd, back, sizeof back, 0) == len
                && !memcmp(back, want, len);
            close(fd);
            return 0;
        }
        int main(void) {
            pthread_t t[N];
            pthread_barrier_init(&go, 0, N);
            for (long i = 0; i < N; i++) pthread_create(&t[i], 0, one, (void *)i);
            for (int i = 0; i < N; i++) pthread_join(t[i], 0);
            int good = 0;
            for (int i = 0; i < N; i++) good += ok[i];
            printf("%d of %d\n", good, N);
            count_maps("after");
            return 0;
        }"#,
    );
    // Several rounds: the race is a different one each time.
    let text = run(&format!(
        "for i in 1 2 3 4 5; do {} || exit 1; done; cat $ROOT/t0 $ROOT/t7; echo",
        bin.display()
    ));
    assert_eq!(
        text,
        "8 of 8\nafter: cache 1 control 1\n".repeat(5) + "thread 0thread 7\n",
    );
}

/// The shell makes an atoll pipe and starts the program with the pipe as
/// its output; the program forks before making any atoll call, and both
/// the grandchild (whose parent never mapped anything) and then the
/// program write into the pipe.
#[test]
fn a_grandchild_of_a_process_that_never_touched_atoll_writes_to_an_inherited_pipe() {
    let (_dir, bin) = probe(
        "forker",
        r#"
        int main(void) {
            pid_t p = fork();
            if (p == 0) {
                const char m[] = "from the grandchild\n";
                _exit(write(1, m, sizeof m - 1) == sizeof m - 1 ? 0 : 1);
            }
            int st;
            if (waitpid(p, &st, 0) != p || !WIFEXITED(st) || WEXITSTATUS(st)) return 1;
            const char m[] = "from its parent\n";
            return write(1, m, sizeof m - 1) == sizeof m - 1 ? 0 : 1;
        }"#,
    );
    let text = run(&format!("{} | cat", bin.display()));
    assert_eq!(text, "from the grandchild\nfrom its parent\n");
}

/// `vfork` before any atoll call: the child (which shares the parent's
/// memory until it execs) starts a shell that writes a file in the mount,
/// and the parent's own first atoll call, after the child's exec, reads
/// it back.
#[test]
fn the_first_atoll_call_after_a_vfork_in_child_and_parent() {
    let (_dir, bin) = probe(
        "vforker",
        r#"
        int main(void) {
            pid_t p = vfork();
            if (p == 0) {
                execl("/bin/sh", "sh", "-c", "echo from the child > /atoll/v", (char *)0);
                _exit(127);
            }
            int st;
            if (waitpid(p, &st, 0) != p || !WIFEXITED(st) || WEXITSTATUS(st)) return 1;
            char b[64] = {0};
            int fd = open("/atoll/v", O_RDONLY);
            if (fd < 0 || read(fd, b, sizeof b - 1) <= 0) { perror("read"); return 1; }
            close(fd);
            printf("parent read: %s", b);
            count_maps("parent");
            return 0;
        }"#,
    );
    let text = run(&bin.display().to_string());
    assert_eq!(
        text,
        "parent read: from the child\nparent: cache 1 control 1\n"
    );
}
