/* Handlers on a small alternate signal stack (CPython's faulthandler
 * gives every handler 16 KiB) and a thread on a PTHREAD_STACK_MIN stack
 * make file calls, in the directory given and through a host socket, as
 * Linux lets them: a system call costs the program no stack. Each stack
 * has an inaccessible page below it, so a call that needs more than the
 * program gave faults instead of corrupting memory next to it. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static const char *dir;
static int wake_fd;
static volatile int calls_ok;

/* Memory of `size` usable bytes above an inaccessible page. */
static char *guarded(size_t size) {
    char *m = mmap(NULL, size + 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED || mprotect(m, 4096, PROT_NONE) != 0) {
        perror("mmap");
        exit(2);
    }
    return m + 4096;
}

/* Create, write, read back, stat and remove a file; a byte into a host
 * socket (as CPython's wakeup fd); a raw system call (trapped, not
 * wrapped). Counts what worked. */
static void file_calls(const char *name) {
    char path[256], buf[16] = {0};
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0 && write(fd, "small", 5) == 5 && pread(fd, buf, sizeof buf, 0) == 5 &&
        strcmp(buf, "small") == 0)
        calls_ok++;
    if (fd >= 0)
        close(fd);
    struct stat st;
    if (stat(path, &st) == 0 && st.st_size == 5)
        calls_ok++;
    if (syscall(SYS_unlink, path) == 0)
        calls_ok++;
    char c = 1;
    if (send(wake_fd, &c, 1, MSG_DONTWAIT) == 1)
        calls_ok++;
}

static void on_signal(int sig) {
    (void)sig;
    file_calls("from-handler");
}

/* The handler of SIGUSR2 notes whether it runs on the alternate stack
 * the thread set with an inline `syscall` (as Go's runtime does for each
 * of its threads); such a call traps into atoll. */
static char *own_alt;
static volatile int on_own_alt = -1;

static void on_usr2(int sig) {
    char here;
    (void)sig;
    on_own_alt = &here >= own_alt && &here < own_alt + 65536;
}

static long inline_syscall2(long nr, long a, long b) {
    long r;
    __asm__ volatile("syscall" : "=a"(r) : "a"(nr), "D"(a), "S"(b) : "rcx", "r11", "memory");
    return r;
}

static void *alt_thread_main(void *arg) {
    (void)arg;
    own_alt = guarded(65536);
    stack_t ss = {.ss_sp = own_alt, .ss_size = 65536};
    if (inline_syscall2(SYS_sigaltstack, (long)&ss, 0) != 0)
        return NULL;
    stack_t now;
    inline_syscall2(SYS_sigaltstack, 0, (long)&now);
    printf("alternate stack set by an inline syscall in a thread: %s\n",
           (now.ss_flags & SS_DISABLE) == 0 && now.ss_sp == own_alt ? "kept" : "lost");
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr2;
    sa.sa_flags = SA_ONSTACK;
    sigaction(SIGUSR2, &sa, NULL);
    raise(SIGUSR2);
    printf("its handler ran on it: %s\n", on_own_alt == 1 ? "yes" : "no");
    return NULL;
}

static void *thread_main(void *arg) {
    (void)arg;
    file_calls("from-thread");
    return NULL;
}

int main(int argc, char **argv) {
    dir = argc > 1 ? argv[1] : ".";
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
        return 2;
    wake_fd = sv[1];

    stack_t ss = {.ss_sp = guarded(16384), .ss_size = 16384};
    sigaltstack(&ss, NULL);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_ONSTACK;
    sigaction(SIGUSR1, &sa, NULL);
    calls_ok = 0;
    raise(SIGUSR1);
    printf("handler on a 16 KiB alternate stack: %d of 4 calls\n", calls_ok);

    size_t size = PTHREAD_STACK_MIN < 16384 ? 16384 : PTHREAD_STACK_MIN;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstack(&attr, guarded(size), size);
    pthread_t t;
    calls_ok = 0;
    if (pthread_create(&t, &attr, thread_main, NULL) != 0 || pthread_join(t, NULL) != 0)
        return 2;
    printf("thread on a %zu-byte stack: %d of 4 calls\n", size, calls_ok);

    if (pthread_create(&t, NULL, alt_thread_main, NULL) != 0 || pthread_join(t, NULL) != 0)
        return 2;
    return 0;
}
