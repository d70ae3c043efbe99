/* Counts deliveries of SIGUSR1, SIGTERM and SIGINT (each prints "got").
 * SIGRTMIN+6 prints the totals; SIGQUIT prints them and exits. Only
 * async-signal-safe calls in the handlers. */
#include <signal.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t n[65];

static void count(int s) {
    n[s]++;
    write(1, "got\n", 4);
}

static char *num(char *p, int v) {
    char t[12];
    int k = 0;
    do {
        t[k++] = '0' + v % 10;
        v /= 10;
    } while (v);
    while (k)
        *p++ = t[--k];
    return p;
}

static void report(int s) {
    char b[96], *p = b;
    memcpy(p, "usr1=", 5);
    p = num(p + 5, n[SIGUSR1]);
    memcpy(p, " term=", 6);
    p = num(p + 6, n[SIGTERM]);
    memcpy(p, " int=", 5);
    p = num(p + 5, n[SIGINT]);
    *p++ = '\n';
    write(1, b, p - b);
    if (s == SIGQUIT)
        _exit(0);
}

int main(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = count;
    sigaction(SIGUSR1, &sa, 0);
    sigaction(SIGTERM, &sa, 0);
    sigaction(SIGINT, &sa, 0);
    sa.sa_handler = report;
    sigaction(SIGRTMIN + 6, &sa, 0);
    sigaction(SIGQUIT, &sa, 0);
    write(1, "ready\n", 6);
    for (;;)
        pause();
}
