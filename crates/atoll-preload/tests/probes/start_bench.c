/* Start-up cost of a process with libatoll preloaded. Spawns PROGRAM
 * (default /bin/true) N times in each of three modes, interleaved so that
 * machine noise hits all modes alike, and prints the median and minimum
 * wall time per start in microseconds. When ATOLL_SOCKET is set, a fourth
 * mode runs the program as a client of that instance.
 * Usage: start_bench LIB [N] [PROGRAM] */
#define _GNU_SOURCE
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    int n = argc > 2 ? atoi(argv[2]) : 200;
    char *prog = argc > 3 ? argv[3] : "/bin/true";
    char pre[4200];
    snprintf(pre, sizeof pre, "LD_PRELOAD=%s", argv[1]);
    char sock[4200], lib[4200];
    const char *s = getenv("ATOLL_SOCKET");
    snprintf(sock, sizeof sock, "ATOLL_SOCKET=%s", s ? s : "");
    snprintf(lib, sizeof lib, "ATOLL_PRELOAD=%s", argv[1]);
    char *envs[4][5] = {
        {"PATH=/usr/bin:/bin", NULL},
        {"PATH=/usr/bin:/bin", pre, NULL},
        {"PATH=/usr/bin:/bin", pre, "ATOLL_SUD_SELFTEST=1", NULL},
        {"PATH=/usr/bin:/bin", pre, sock, lib, NULL},
    };
    const char *names[4] = {"native", "preload-off", "preload-selftest", "preload-client"};
    int modes = s ? 4 : 3;
    double *t[4];
    for (int m = 0; m < modes; m++) t[m] = calloc(n, sizeof(double));
    char *av[] = {prog, NULL};
    for (int i = 0; i < n; i++) {
        for (int m = 0; m < modes; m++) {
            double s = now_us();
            pid_t pid;
            if (posix_spawn(&pid, prog, NULL, NULL, av, envs[m]) != 0) return 1;
            int st;
            waitpid(pid, &st, 0);
            t[m][i] = now_us() - s;
        }
    }
    for (int m = 0; m < modes; m++) {
        qsort(t[m], n, sizeof(double), cmp);
        printf("%-17s median %7.0f us  min %7.0f us\n", names[m], t[m][n / 2], t[m][0]);
    }
    return 0;
}
