/* Signals whose handlers open and close files, landing while two threads
 * open, duplicate and close files themselves (atoll takes its descriptor
 * table's lock at each install and removal of a descriptor, without a
 * signal mask inside a call: a handler that ran while the lock is held
 * would spin on it for ever). An interval timer and a thread that
 * signals the main thread after each of its own calls; half of the calls
 * go through libc, half as raw system calls from a site that is never
 * rewritten (the SIGSYS net). On Linux every call and every handler's
 * call succeeds; the probe prints only that. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <unistd.h>

#define ROUNDS 20000

static volatile long nr_openat = SYS_openat;
static volatile long nr_close = SYS_close;
static volatile int stop;
static volatile int failed, handler_failed;
static volatile long handled;
static pthread_t main_thread;

static long raw4(long nr, long a, long b, long c, long d) {
    long r;
    register long r10 __asm__("r10") = d;
    __asm__ volatile("syscall"
                     : "=a"(r)
                     : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10)
                     : "rcx", "r11", "memory");
    return r;
}

static void on_signal(int sig) {
    (void)sig;
    int saved = errno;
    int fd = open("h", O_RDONLY);
    if (fd < 0 || close(fd) != 0)
        handler_failed = 1;
    long r = raw4(nr_openat, AT_FDCWD, (long)"h", O_RDONLY, 0);
    if (r < 0 || raw4(nr_close, r, 0, 0, 0) != 0)
        handler_failed = 1;
    handled++;
    errno = saved;
}

static void calls(const char *name, int i) {
    if (i % 2) {
        int fd = open(name, O_RDONLY);
        int d = fd < 0 ? -1 : dup(fd);
        if (fd < 0 || d < 0 || close(d) != 0 || close(fd) != 0)
            failed = 1;
    } else {
        long fd = raw4(nr_openat, AT_FDCWD, (long)name, O_RDONLY, 0);
        if (fd < 0 || raw4(nr_close, fd, 0, 0, 0) != 0)
            failed = 1;
    }
}

static void *other(void *arg) {
    (void)arg;
    for (int i = 0; !stop; i++) {
        calls("b", i);
        pthread_kill(main_thread, SIGUSR1);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 2 || chdir(argv[1]) != 0)
        return 2;
    for (const char *n = "abh"; *n; n++) {
        char p[2] = {*n, 0};
        int fd = open(p, O_CREAT | O_WRONLY, 0644);
        if (fd < 0)
            return 3;
        close(fd);
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGALRM, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    main_thread = pthread_self();
    struct itimerval t = {{0, 200}, {0, 200}};
    setitimer(ITIMER_REAL, &t, NULL);
    pthread_t th;
    pthread_create(&th, NULL, other, NULL);
    for (int i = 0; i < ROUNDS; i++)
        calls("a", i);
    stop = 1;
    pthread_join(th, NULL);
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    printf("calls %s\n", failed ? "FAILED" : "ok");
    printf("handlers' calls %s\n", handler_failed ? "FAILED" : "ok");
    printf("handlers ran: %s\n", handled > 0 ? "yes" : "no");
    return 0;
}
