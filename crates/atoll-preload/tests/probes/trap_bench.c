/* Micro-benchmark of libatoll's two paths. Prints ns per call for:
 *   raw   - syscall(SYS_getppid): trapped by SUD (the net)
 *   stat  - stat("/"): through the exported wrapper (the fast path)
 *   read0 - read(fd, buf, 0) on /dev/null: wrapper, cheapest syscall
 * Usage: trap_bench [N] */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 200000;
    struct stat st;
    char buf[1];
    int fd = open("/dev/null", O_RDONLY);
    double t0 = now();
    for (long i = 0; i < n; i++) syscall(SYS_getppid);
    double t1 = now();
    for (long i = 0; i < n; i++) stat("/", &st);
    double t2 = now();
    for (long i = 0; i < n; i++) if (read(fd, buf, 0) < 0) return 1;
    double t3 = now();
    printf("raw %.0f stat %.0f read0 %.0f\n", (t1 - t0) / n, (t2 - t1) / n, (t3 - t2) / n);
    return 0;
}
