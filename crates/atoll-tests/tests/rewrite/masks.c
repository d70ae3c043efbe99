/* Signal masks changed through a rewritable `rt_sigprocmask` site of the
 * probe's own (`nop; mov $14,%eax; syscall`, no libc wrapper), and
 * signals that arrive while the mask blocks them, or while the call runs.
 *
 *   blocked  - SIGUSR1 sent to itself while blocked is not delivered,
 *              is pending, and is delivered exactly once by the unblock
 *              (ROUNDS rounds); prints the deliveries seen at each step
 *   threads  - THREADS threads block and unblock SIGRTMIN through the
 *              site in a loop while a sender queues PER_THREAD signals to
 *              each, one at a time per thread (the next once the last was
 *              handled); then each unblocks once more: every signal is
 *              delivered exactly once, whenever it came */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define ROUNDS 50
#define THREADS 4
#define PER_THREAD 300

static long mask_call(long how, const unsigned long *set, unsigned long *old) {
    long r;
    register long r10 asm("r10") = 8;
    asm volatile(".p2align 4\n\tnop\n\tmov $14, %%eax\n\tsyscall"
                 : "=a"(r)
                 : "D"(how), "S"(set), "d"(old), "r"(r10)
                 : "rcx", "r11", "memory");
    return r;
}

static unsigned long bit(int sig) { return 1UL << (sig - 1); }

static volatile sig_atomic_t usr1;
static void on_usr1(int sig) { (void)sig; usr1++; }

static int blocked(void) {
    signal(SIGUSR1, on_usr1);
    unsigned long b = bit(SIGUSR1), old = 0;
    int bad = 0;
    for (int i = 0; i < ROUNDS; i++) {
        int before = usr1;
        if (mask_call(SIG_BLOCK, &b, &old) != 0 || (old & b))
            bad++;
        kill(getpid(), SIGUSR1);
        sigset_t p;
        sigpending(&p);
        if (usr1 != before || !sigismember(&p, SIGUSR1))
            bad++;
        if (mask_call(SIG_UNBLOCK, &b, &old) != 0 || !(old & b))
            bad++;
        if (usr1 != before + 1)
            bad++;
    }
    unsigned long now = 0;
    mask_call(SIG_BLOCK, 0, &now);
    printf("blocked rounds %d delivered %d bad %d usr1-blocked-now %d\n", ROUNDS, (int)usr1, bad,
           (now & b) != 0);
    return 0;
}

static __thread volatile int got;
static volatile int total[THREADS];
static void on_rt(int sig, siginfo_t *si, void *uc) {
    (void)sig; (void)uc;
    got++;
    total[si->si_value.sival_int]++;
}

static pthread_barrier_t start;
static volatile int stop;

static void *worker(void *arg) {
    (void)arg;
    unsigned long b = bit(SIGRTMIN);
    pthread_barrier_wait(&start);
    while (!stop) {
        mask_call(SIG_BLOCK, &b, 0);
        mask_call(SIG_UNBLOCK, &b, 0);
    }
    /* Anything still queued comes now, and nothing twice. */
    mask_call(SIG_BLOCK, &b, 0);
    mask_call(SIG_UNBLOCK, &b, 0);
    return (void *)(long)got;
}

static int threads(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_rt;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigaction(SIGRTMIN, &sa, 0);
    pthread_t t[THREADS];
    pthread_barrier_init(&start, 0, THREADS + 1);
    for (int i = 0; i < THREADS; i++)
        pthread_create(&t[i], 0, worker, 0);
    pthread_barrier_wait(&start);
    int sent = 0;
    for (int n = 0; n < PER_THREAD; n++)
        for (int i = 0; i < THREADS; i++) {
            union sigval v = {.sival_int = i};
            int before = total[i];
            if (pthread_sigqueue(t[i], SIGRTMIN, v) != 0)
                continue;
            sent++;
            /* One signal in flight per thread: a lost one hangs here. */
            while (total[i] == before)
                sched_yield();
        }
    stop = 1;
    int got_sum = 0, wrong = 0;
    for (int i = 0; i < THREADS; i++) {
        void *r;
        pthread_join(t[i], &r);
        got_sum += (int)(long)r;
        if (total[i] != PER_THREAD)
            wrong++;
    }
    printf("threads sent %d delivered %d threads-off %d\n", sent, got_sum, wrong);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "blocked"))
        return blocked();
    if (argc > 1 && !strcmp(argv[1], "threads"))
        return threads();
    return 2;
}
