/* The file size limit a process sets itself applies to its next write,
 * through setrlimit, prlimit64, in a fork child only to the child, and a
 * vfork child's change not to its parent. Prints what each write got. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

static int fd;
static char b[4096];

static void put(const char *what, off_t at) {
    ssize_t r = pwrite(fd, b, sizeof b, at);
    printf("%-30s %zd %s\n", what, r, r < 0 ? strerror(errno) : "");
    fflush(stdout);
}

static void limit(rlim_t l) {
    struct rlimit r;
    getrlimit(RLIMIT_FSIZE, &r);
    r.rlim_cur = l;
    if (setrlimit(RLIMIT_FSIZE, &r) != 0) perror("setrlimit");
}

int main(int argc, char **argv) {
    signal(SIGXFSZ, SIG_IGN);
    memset(b, 'z', sizeof b);
    fd = open(argv[1], O_CREAT | O_TRUNC | O_RDWR, 0644);
    if (fd < 0) { perror("open"); return 2; }
    put("no limit", 0);
    put("no limit", 4096);
    limit(10000);
    put("setrlimit 10000, at 8192", 8192);
    put("setrlimit 10000, at 10000", 10000);
    struct rlimit r;
    getrlimit(RLIMIT_FSIZE, &r);
    r.rlim_cur = 20000;
    if (prlimit(0, RLIMIT_FSIZE, &r, NULL) != 0) perror("prlimit");
    put("prlimit 20000, at 10000", 10000);
    pid_t p = fork();
    if (p == 0) {
        limit(12000);
        put("child's 12000, at 14000", 14000);
        _exit(0);
    }
    waitpid(p, NULL, 0);
    put("parent after the child", 14000);
    p = vfork();
    if (p == 0) {
        limit(1000);
        _exit(0);
    }
    waitpid(p, NULL, 0);
    put("parent after a vfork child", 15000);
    limit(RLIM_INFINITY);
    put("unlimited again", 30000);
    return 0;
}
