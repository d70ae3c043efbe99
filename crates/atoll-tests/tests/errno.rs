//! errno after calls that succeed. glibc's functions leave errno alone
//! when they succeed, and programs rely on it: PostgreSQL's postmaster
//! reads `select`'s errno only after `sigprocmask` restored its mask, and
//! took atoll's stray `EINVAL` there for a failed `select` and shut down.

use atoll_tests::OutputBounded as _;
use atoll_tests::{compile_probe, run_in_atoll};
use std::process::Command;

/// Each successful call is made with errno set to a marker; a call that
/// changes it prints a line. Then the postmaster's pattern: signals
/// blocked but around `select`, a SIGCHLD handler that forks and writes a
/// file, and errno read after the mask is back.
const PROBE: &str = r#"
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define MARK 12345
static int kept;
#define CHECK(name, call) do { errno = MARK; long r_ = (long)(call); \
    if (errno != MARK) printf("%s: errno %s after %ld\n", name, strerror(errno), r_); \
    else kept++; } while (0)

static const char *dir;
static int forks;
static sigset_t blocked, unblocked;

static void reaper(int sig) {
    int saved = errno;
    (void)sig;
    sigprocmask(SIG_SETMASK, &blocked, 0);
    while (waitpid(-1, 0, WNOHANG) > 0)
        ;
    if (forks < 3) {
        forks++;
        pid_t p = fork();
        if (p == 0) _exit(0);
        char path[4096];
        snprintf(path, sizeof path, "%s/pid", dir);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dprintf(fd, "%d\n", p);
        close(fd);
        usleep(20000);
    }
    sigprocmask(SIG_SETMASK, &unblocked, 0);
    errno = saved;
}

static void postmaster(void) {
    sigfillset(&blocked);
    sigemptyset(&unblocked);
    sigprocmask(SIG_SETMASK, &blocked, 0);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = reaper;
    sa.sa_mask = blocked;
    sa.sa_flags = SA_NOCLDSTOP;
    sigaction(SIGCHLD, &sa, 0);
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s/sock", dir);
    if (bind(s, (void *)&a, sizeof a) || listen(s, 5)) { perror("bind"); exit(1); }
    if (fork() == 0) { usleep(20000); _exit(0); }
    fd_set r;
    FD_ZERO(&r);
    FD_SET(s, &r);
    struct timeval tv = {60, 0};
    sigprocmask(SIG_SETMASK, &unblocked, 0);
    errno = EINVAL;
    int n = select(s + 1, &r, 0, 0, &tv);
    sigprocmask(SIG_SETMASK, &blocked, 0);
    printf("postmaster select: %d %s\n", n, n < 0 ? strerror(errno) : "");
}

int main(int argc, char **argv) {
    char buf[256];
    dir = argv[1];
    if (chdir(dir)) return 1;
    CHECK("mkdir", mkdir("d", 0755));
    CHECK("chdir", chdir("d"));
    CHECK("getcwd", getcwd(buf, sizeof buf) ? 0 : -1);
    CHECK("open", open("f", O_RDWR | O_CREAT, 0644));
    int fd = open("f", O_RDWR);
    CHECK("write", write(fd, "hello", 5));
    CHECK("pwrite", pwrite(fd, "x", 1, 10));
    CHECK("lseek", lseek(fd, 0, SEEK_SET));
    CHECK("read", read(fd, buf, sizeof buf));
    struct iovec iv = {buf, 3};
    CHECK("preadv", preadv(fd, &iv, 1, 0));
    struct stat st;
    CHECK("fstat", fstat(fd, &st));
    CHECK("stat", stat("f", &st));
    CHECK("access", access("f", R_OK));
    CHECK("fcntl", fcntl(fd, F_GETFL));
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    CHECK("fcntl F_SETLK", fcntl(fd, F_SETLK, &fl));
    CHECK("ftruncate", ftruncate(fd, 3));
    CHECK("fsync", fsync(fd));
    void *m = mmap(0, 4096, PROT_READ, MAP_SHARED, fd, 0);
    CHECK("munmap", munmap(m, 4096));
    CHECK("dup2", dup2(fd, 50));
    CHECK("close", close(50));
    CHECK("rename", rename("f", "g"));
    CHECK("link", link("g", "h"));
    CHECK("symlink", symlink("g", "s"));
    CHECK("readlink", readlink("s", buf, sizeof buf));
    CHECK("chmod", chmod("g", 0600));
    CHECK("utimensat", utimensat(AT_FDCWD, "g", 0, 0));
    CHECK("unlink", unlink("h"));
    DIR *d = opendir(".");
    errno = MARK;
    while (readdir(d))
        ;
    if (errno != MARK) printf("readdir: errno %s\n", strerror(errno)); else kept++;
    CHECK("closedir", closedir(d));
    FILE *f = fopen("g", "r");
    CHECK("fgets", fgets(buf, sizeof buf, f) ? 0 : -1);
    CHECK("fclose", fclose(f));
    int p[2];
    CHECK("pipe", pipe(p));
    CHECK("write to pipe", write(p[1], "a", 1));
    struct pollfd pf = {p[0], POLLIN, 0};
    CHECK("poll", poll(&pf, 1, 1000));
    fd_set r;
    FD_ZERO(&r);
    FD_SET(p[0], &r);
    struct timeval tv = {1, 0};
    CHECK("select", select(p[0] + 1, &r, 0, 0, &tv));
    CHECK("read from pipe", read(p[0], buf, 1));
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    CHECK("sigprocmask", sigprocmask(SIG_BLOCK, &set, &old));
    sigfillset(&set);
    CHECK("sigprocmask of every signal", sigprocmask(SIG_SETMASK, &set, 0));
    CHECK("pthread_sigmask", pthread_sigmask(SIG_SETMASK, &old, 0));
    struct sigaction sa = {0};
    sa.sa_handler = SIG_IGN;
    CHECK("sigaction", sigaction(SIGUSR2, &sa, 0));
    pid_t c = fork();
    if (c == 0) _exit(0);
    CHECK("waitpid", waitpid(c, 0, 0));
    CHECK("umask", umask(022));
    printf("%d calls kept errno\n", kept);
    if (chdir(dir)) return 1;
    postmaster();
    return 0;
}
"#;

#[test]
fn successful_calls_leave_errno_as_on_the_host() {
    let dir = tempfile::tempdir().unwrap();
    let bin = compile_probe(dir.path(), "errnokeep", PROBE);
    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let host = Command::new(&bin)
        .arg(&work)
        .output_bounded()
        .expect("probe");
    let host_out = String::from_utf8_lossy(&host.stdout).to_string();
    assert!(host.status.success(), "{host_out}");
    assert!(
        host_out.contains("postmaster select: -1 Interrupted system call"),
        "{host_out}"
    );
    let script = format!("{} \"$ROOT\"", bin.display());
    for opts in [
        &["--servers", "2"][..],
        &["--servers", "3", "--incoherent"][..],
    ] {
        let o = run_in_atoll(opts, &script);
        assert_eq!(
            String::from_utf8_lossy(&o.stdout),
            host_out,
            "{opts:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}
