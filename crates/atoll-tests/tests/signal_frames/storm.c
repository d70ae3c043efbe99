/* Many signals delivered to a thread that runs its handlers on its own
 * alternate stack while it makes trapped system calls: a one-shot timer
 * of a few microseconds raced against a signal the thread sends itself
 * (CPython's test_signal test_stress_delivery_simultaneous does this), a
 * handler with SA_NODEFER that raises its own signal once more from
 * inside (nested on the alternate stack), a handler without SA_ONSTACK
 * (runs wherever the thread is), and another thread sending a signal
 * whenever the last one was handled. Before each round the alternate
 * stack's pages are given back (MADV_DONTNEED), so a handler's first push
 * there page-faults, and the kernel delivers whatever is pending on the
 * way back. On Linux every handler runs where it should and every call
 * succeeds; the probe prints only that. The raw calls load their numbers
 * from memory, so their sites are never rewritten: each traps. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <unistd.h>

#define ALT_SIZE 65536
#define ROUNDS 2000

static volatile long nr_getppid = SYS_getppid;
static volatile long nr_tgkill = SYS_tgkill;

static char *alt;
static long ppid;
static pid_t pid, main_tid;
static volatile int stop;
static volatile int wrong_stack, failed_calls, nested;
static volatile long handled[NSIG];

static long raw3(long nr, long a, long b, long c) {
    long r;
    __asm__ volatile("syscall"
                     : "=a"(r)
                     : "a"(nr), "D"(a), "S"(b), "d"(c)
                     : "rcx", "r11", "memory");
    return r;
}

static int on_alt(void) {
    char here;
    return &here >= alt && &here < alt + ALT_SIZE;
}

static void trapped_calls(int n) {
    for (int i = 0; i < n; i++)
        if (raw3(nr_getppid, 0, 0, 0) != ppid)
            failed_calls++;
}

/* SIGUSR1 (SA_ONSTACK | SA_NODEFER): raises itself once more inside. */
static void on_usr1(int sig) {
    static volatile int depth;
    if (!on_alt())
        wrong_stack++;
    trapped_calls(2);
    if (depth == 0) {
        depth = 1;
        raw3(nr_tgkill, pid, main_tid, SIGUSR1);
        depth = 0;
    } else {
        nested++;
    }
    handled[sig]++;
}

/* SIGALRM and SIGUSR2 (SA_ONSTACK). */
static void on_signal(int sig) {
    if (!on_alt())
        wrong_stack++;
    trapped_calls(1);
    handled[sig]++;
}

/* SIGURG (no SA_ONSTACK): runs on whatever stack the thread is on. */
static void on_urg(int sig) {
    trapped_calls(1);
    handled[sig]++;
}

static void handle(int sig, void (*h)(int), int flags) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = h;
    sa.sa_flags = flags;
    if (sigaction(sig, &sa, NULL) != 0) {
        perror("sigaction");
        exit(2);
    }
}

/* Sends SIGUSR2 or SIGURG to the main thread whenever the previous one
 * was handled, so handlers never pile up without bound. */
static void *sender(void *arg) {
    (void)arg;
    for (long n = 0; !stop; n++) {
        int sig = n % 4 == 3 ? SIGURG : SIGUSR2;
        long before = handled[sig];
        syscall(SYS_tgkill, pid, main_tid, sig);
        while (handled[sig] == before && !stop)
            sched_yield();
    }
    return NULL;
}

static void wait_for(int sig, long count) {
    while (handled[sig] < count)
        trapped_calls(1);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    pid = getpid();
    main_tid = gettid();
    ppid = getppid();
    alt = mmap(NULL, ALT_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (alt == MAP_FAILED)
        return 2;
    stack_t ss = {.ss_sp = alt, .ss_size = ALT_SIZE};
    if (sigaltstack(&ss, NULL) != 0)
        return 2;
    handle(SIGUSR1, on_usr1, SA_ONSTACK | SA_NODEFER);
    handle(SIGALRM, on_signal, SA_ONSTACK);
    handle(SIGUSR2, on_signal, SA_ONSTACK);
    handle(SIGURG, on_urg, 0);

    /* The sender starts with every signal blocked: the timer's SIGALRM
     * is for the process, and the main thread must take it. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    pthread_t t;
    if (pthread_create(&t, NULL, sender, NULL) != 0)
        return 2;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    srand(7);
    for (int round = 0; round < ROUNDS; round++) {
        madvise(alt, ALT_SIZE, MADV_DONTNEED);
        struct itimerval it = {.it_value = {.tv_usec = 1 + rand() % 10}};
        setitimer(ITIMER_REAL, &it, NULL);
        raw3(nr_tgkill, pid, main_tid, SIGUSR1);
        wait_for(SIGALRM, round + 1);
        trapped_calls(3);
    }
    stop = 1;
    pthread_join(t, NULL);
    printf("%d rounds: SIGUSR1 handled twice each %s, nested once each %s, SIGALRM once each "
           "%s, SIGUSR2 and SIGURG handled %s\n",
           ROUNDS, handled[SIGUSR1] == 2 * ROUNDS ? "yes" : "no",
           nested == ROUNDS ? "yes" : "no", handled[SIGALRM] == ROUNDS ? "yes" : "no",
           handled[SIGUSR2] > 0 && handled[SIGURG] > 0 ? "yes" : "no");
    printf("handlers with SA_ONSTACK off their alternate stack: %d; trapped calls failed: %d\n",
           wrong_stack, failed_calls);
    return 0;
}
