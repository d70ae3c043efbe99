/* Pages of a mapping past the end of its file: SIGBUS until the file
 * grows, then the file's data; a truncate by this process cuts them off
 * again; a private mapping faults the same way; with no handler the
 * program dies by SIGBUS, also when it ignores SIGBUS. Prints a
 * transcript that must equal tmpfs's. Usage: pastend DIR */
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define PG 4096
static sigjmp_buf env;
static volatile int faults;

static void on_bus(int s) {
    (void)s;
    faults++;
    siglongjmp(env, 1);
}

/* The byte at p, or -1 when touching it raised SIGBUS. */
static int touch(volatile char *p) {
    if (sigsetjmp(env, 1)) return -1;
    return *p;
}

/* Store c at p: 0, or -1 on SIGBUS. */
static int store(volatile char *p, char c) {
    if (sigsetjmp(env, 1)) return -1;
    *p = c;
    return 0;
}

/* A child touches p with SIGBUS at `disp`: how it ended. */
static void child_touch(volatile char *p, void (*disp)(int), const char *what) {
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGBUS, disp);
        (void)*p;
        _exit(0);
    }
    int st;
    waitpid(pid, &st, 0);
    printf("%s: %s %d\n", what, WIFSIGNALED(st) ? "killed by" : "exited",
           WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
}

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    char path[4096];
    snprintf(path, sizeof path, "%s/pastend", argv[1]);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_bus;
    sigaction(SIGBUS, &sa, 0);

    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    char buf[100];
    memset(buf, 'a', sizeof buf);
    if (fd < 0 || write(fd, buf, sizeof buf) != sizeof buf) return 3;
    char *m = mmap(0, 3 * PG, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) return 4;
    printf("in the file: %d, rest of its page: %d\n", touch(m + 99), touch(m + PG - 1));
    printf("next page: %d, store there: %d\n", touch(m + PG), store(m + PG + 1, 'x'));

    /* Another process grows the file. */
    pid_t pid = fork();
    if (pid == 0) {
        int f2 = open(path, O_WRONLY);
        _exit(pwrite(f2, "b", 1, PG + 10) == 1 ? 0 : 1);
    }
    int st;
    waitpid(pid, &st, 0);
    printf("after another process grew it: %d %d %d, page after: %d\n", touch(m + PG),
           touch(m + PG + 1), touch(m + PG + 10), touch(m + 2 * PG));
    printf("store into the new page: %d\n", store(m + PG + 5, 'c'));
    char got = 0;
    pread(fd, &got, 1, PG + 5);
    printf("read sees the store: %c\n", got);

    /* A system call reading from a page the file grew to cover since:
     * the kernel maps it on its copy, so the call succeeds. */
    pid = fork();
    if (pid == 0) {
        int f2 = open(path, O_WRONLY);
        _exit(pwrite(f2, "z", 1, 2 * PG + 100) == 1 ? 0 : 1);
    }
    waitpid(pid, &st, 0);
    char scratch[4096];
    snprintf(scratch, sizeof scratch, "%s/pastend-scratch", argv[1]);
    int sf = open(scratch, O_RDWR | O_CREAT | O_TRUNC, 0644);
    char back = 0;
    printf("write from a grown page: %zd", write(sf, m + 2 * PG + 100, 1));
    ssize_t got_back = pread(sf, &back, 1, 0);
    printf(", read back: %zd %c\n", got_back, back);
    close(sf);
    unlink(scratch);

    /* This process cuts the file: the cut pages fault again. */
    ftruncate(fd, 50);
    printf("after truncate to 50: %d %d, cut page: %d\n", touch(m + 10), touch(m + 60),
           touch(m + PG));
    ftruncate(fd, 9000);
    printf("after growth to 9000: %d %d %d\n", touch(m + PG), touch(m + 2 * PG + 100),
           touch(m + 2 * PG + 1000));

    int fd3 = open(path, O_RDWR | O_TRUNC);
    printf("after O_TRUNC: %d\n", touch(m + 10));
    close(fd3);

    /* A private mapping faults past the end the same way. */
    ftruncate(fd, 100);
    char *p = mmap(0, 2 * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) return 5;
    printf("private: %d, past the end: %d\n", touch(p + 5), touch(p + PG));

    child_touch(m + PG, SIG_DFL, "no handler");
    child_touch(m + PG, SIG_IGN, "ignored");
    printf("faults handled: %d\n", faults);
    munmap(m, 3 * PG);
    munmap(p, 2 * PG);
    close(fd);
    unlink(path);
    return 0;
}
