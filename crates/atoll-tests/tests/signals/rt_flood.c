/* A flood of queued real-time signals while the receiver makes calls in
 * the mount: every one is delivered, each once (Linux queues them up to
 * RLIMIT_SIGPENDING; the sender retries on EAGAIN). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define SENT 3000
static volatile sig_atomic_t got;
static volatile sig_atomic_t sum;

static void on_rt(int sig, siginfo_t *info, void *uc)
{
    (void)sig;
    (void)uc;
    got++;
    sum += info->si_value.sival_int;
}

int main(void)
{
    struct sigaction sa = {0};
    sa.sa_sigaction = on_rt;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGRTMIN, &sa, NULL);
    FILE *f = fopen("flood.file", "w");
    fputs("x\n", f);
    fclose(f);
    pid_t parent = getpid();
    pid_t child = fork();
    if (child == 0) {
        for (int i = 1; i <= SENT; i++) {
            union sigval v = {.sival_int = i};
            while (sigqueue(parent, SIGRTMIN, v) != 0) {
                if (errno != EAGAIN)
                    _exit(1);
                usleep(100);
            }
        }
        _exit(0);
    }
    /* Calls in the mount while the flood comes in. */
    struct stat st;
    int status = 0;
    while (waitpid(child, &status, WNOHANG) == 0)
        stat("flood.file", &st);
    for (int i = 0; i < 5000 && got < SENT; i++)
        usleep(1000);
    long want = (long)SENT * (SENT + 1) / 2;
    printf("sender %d, got %s, values %s\n", WEXITSTATUS(status),
           got == SENT ? "all" : "not all", sum == want ? "each once" : "wrong");
    if (got != SENT)
        fprintf(stderr, "got %d of %d\n", (int)got, SENT);
    return 0;
}
