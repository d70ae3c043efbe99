/* Clones, vfork, sigaltstack and _exit through glibc's own sites, which
 * atoll rewrites after their first trap (the child of a clone on a new
 * stack starts at the site's continuation; a vfork child returns through
 * the entry in its own copy of memory; _exit's exit_group number is in a
 * register). A SIGALRM every 200 us arrives during all of it.
 *
 *   probe N   - N rounds of: posix_spawn of /bin/true and of a missing
 *               program, vfork + _exit(i % 8), vfork + execve of /bin/true,
 *               pthread_create + join, and a handler on the alternate
 *               stack asking sigaltstack whether it runs there; glibc's
 *               clone() of a process on a stack of its own, and the
 *               probe's own clone3 site, whose child starts on its new
 *               stack after the site with the parent's registers (R12)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/sched.h>
#include <sched.h>
#include <stdint.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static volatile sig_atomic_t alarms;
static volatile sig_atomic_t onstack_in;

static void on_alarm(int sig) {
    (void)sig;
    alarms++;
}

static void on_usr1(int sig) {
    (void)sig;
    stack_t now;
    if (sigaltstack(NULL, &now) == 0 && (now.ss_flags & SS_ONSTACK))
        onstack_in++;
}

static void *thread_main(void *arg) {
    /* Some stack of its own, and a value back. */
    volatile long v[64];
    long n = (long)arg;
    for (int i = 0; i < 64; i++)
        v[i] = n + i;
    long sum = 0;
    for (int i = 0; i < 64; i++)
        sum += v[i];
    return (void *)sum;
}

static int clone_child(void *arg) {
    return (int)(long)arg;
}

/* clone3 of a process with a new stack; the child exits with the value
 * R12 held in the parent at the call. */
static long clone3_site(struct clone_args *ca, long marker) {
    long r;
    register long r12 asm("r12") = marker;
    asm volatile("nop\n\t"
                 "mov $435, %%eax\n\t"
                 "syscall\n\t"
                 "test %%rax, %%rax\n\t"
                 "jnz 1f\n\t"
                 "mov %%r12, %%rdi\n\t"
                 "mov $231, %%eax\n\t"
                 "syscall\n\t"
                 "hlt\n"
                 "1:"
                 : "=a"(r)
                 : "D"(ca), "S"(sizeof *ca), "r"(r12)
                 : "rcx", "r11", "memory");
    return r;
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 20;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGALRM, &sa, NULL);
    static char alt[64 * 1024];
    stack_t ss = {.ss_sp = alt, .ss_size = sizeof alt, .ss_flags = 0};
    if (sigaltstack(&ss, NULL) != 0)
        return 2;
    sa.sa_handler = on_usr1;
    sa.sa_flags = SA_ONSTACK | SA_RESTART;
    sigaction(SIGUSR1, &sa, NULL);
    struct itimerval it = {{0, 200}, {0, 200}};
    setitimer(ITIMER_REAL, &it, NULL);

    int spawned = 0, missing = 0, vforked = 0, execd = 0, threads = 0, offstack = 0;
    int cloned = 0, cloned3 = 0;
    static char child_stack[64 * 1024] __attribute__((aligned(16)));
    for (int i = 0; i < rounds; i++) {
        pid_t p;
        char *t[] = {"true", NULL};
        int st = 0;
        if (posix_spawn(&p, "/bin/true", NULL, NULL, t, environ) == 0 &&
            waitpid(p, &st, 0) == p && WIFEXITED(st) && WEXITSTATUS(st) == 0)
            spawned++;
        if (posix_spawn(&p, "/nonexistent/program", NULL, NULL, t, environ) == ENOENT)
            missing++;

        p = vfork();
        if (p == 0)
            _exit(i % 8);
        if (p > 0 && waitpid(p, &st, 0) == p && WIFEXITED(st) && WEXITSTATUS(st) == i % 8)
            vforked++;

        p = vfork();
        if (p == 0) {
            execve("/bin/true", t, environ);
            _exit(127);
        }
        if (p > 0 && waitpid(p, &st, 0) == p && WIFEXITED(st) && WEXITSTATUS(st) == 0)
            execd++;

        pthread_t th;
        void *ret = NULL;
        if (pthread_create(&th, NULL, thread_main, (void *)(long)i) == 0 &&
            pthread_join(th, &ret) == 0 && (long)ret == 64L * i + 2016)
            threads++;

        p = clone(clone_child, child_stack + sizeof child_stack, SIGCHLD, (void *)(long)(i % 8));
        if (p > 0 && waitpid(p, &st, 0) == p && WIFEXITED(st) && WEXITSTATUS(st) == i % 8)
            cloned++;

        struct clone_args ca;
        memset(&ca, 0, sizeof ca);
        ca.exit_signal = SIGCHLD;
        ca.stack = (uint64_t)(uintptr_t)child_stack;
        ca.stack_size = sizeof child_stack;
        long c = clone3_site(&ca, 40 + i % 8);
        if (c > 0 && waitpid(c, &st, 0) == c && WIFEXITED(st) && WEXITSTATUS(st) == 40 + i % 8)
            cloned3++;

        raise(SIGUSR1);
        stack_t now;
        if (sigaltstack(NULL, &now) == 0 && !(now.ss_flags & SS_ONSTACK))
            offstack++;
    }
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    printf("spawned %d missing %d vforked %d execd %d threads %d onstack %d offstack %d "
           "cloned %d cloned3 %d\n",
           spawned, missing, vforked, execd, threads, (int)onstack_in, offstack, cloned, cloned3);
    fflush(stdout);
    _exit(0);
}
