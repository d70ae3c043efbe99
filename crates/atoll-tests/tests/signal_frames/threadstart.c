/* Signals landing on threads as they start. A creator thread makes and
 * joins short-lived threads in a loop while an interval timer fires every
 * 200 µs; the main thread blocks the timer's signal, so the kernel hands it
 * to the creator or to a thread just made (the new thread gets its
 * creator's mask). The handler checks a file of the working directory
 * with a raw system call from a site that is never rewritten: a handler
 * that runs before the new thread's system calls are its program's (a
 * window in the thread's start) sees the host's working directory
 * instead. On Linux every check succeeds; the probe prints only that. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <unistd.h>

#define ROUNDS 1000
#define CHECKS 8

static volatile long nr_faccessat = SYS_faccessat;
static volatile int failed, handler_failed;
static volatile long handled;

static long raw_access(const char *name) {
    long r;
    register long r10 __asm__("r10") = 0;
    __asm__ volatile("syscall"
                     : "=a"(r)
                     : "a"(nr_faccessat), "D"((long)AT_FDCWD), "S"(name), "d"((long)F_OK),
                       "r"(r10)
                     : "rcx", "r11", "memory");
    return r;
}

static void on_alarm(int sig) {
    (void)sig;
    if (raw_access("h") != 0)
        handler_failed = 1;
    __atomic_add_fetch(&handled, 1, __ATOMIC_RELAXED);
}

static void *short_lived(void *arg) {
    (void)arg;
    for (int i = 0; i < CHECKS; i++)
        if (raw_access("t") != 0)
            failed = 1;
    return NULL;
}

static void *creator(void *arg) {
    (void)arg;
    for (int i = 0; i < ROUNDS; i++) {
        pthread_t t;
        if (pthread_create(&t, NULL, short_lived, NULL) != 0) {
            failed = 1;
            break;
        }
        pthread_join(t, NULL);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 2 || chdir(argv[1]) != 0)
        return 2;
    for (const char *n = "ht"; *n; n++) {
        char p[2] = {*n, 0};
        int fd = open(p, O_CREAT | O_WRONLY, 0644);
        if (fd < 0)
            return 3;
        close(fd);
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGALRM, &sa, NULL);
    pthread_t c;
    if (pthread_create(&c, NULL, creator, NULL) != 0)
        return 4;
    sigset_t alarm;
    sigemptyset(&alarm);
    sigaddset(&alarm, SIGALRM);
    pthread_sigmask(SIG_BLOCK, &alarm, NULL);
    struct itimerval t = {{0, 200}, {0, 200}};
    setitimer(ITIMER_REAL, &t, NULL);
    pthread_join(c, NULL);
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    printf("threads' calls %s\n", failed ? "FAILED" : "ok");
    printf("handlers' calls %s\n", handler_failed ? "FAILED" : "ok");
    printf("handlers ran: %s\n", handled > 0 ? "yes" : "no");
    return 0;
}
