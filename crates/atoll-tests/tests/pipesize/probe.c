/* F_SETPIPE_SZ and F_GETPIPE_SZ as Linux answers them: the default size,
 * rounding to a power-of-two number of pages, a grown pipe holding what
 * it says, EBUSY below what is buffered, EPERM past pipe-max-size for an
 * unprivileged caller, and sizes changed while a writer and a reader
 * stream bytes (none lost, none repeated). Prints one "... ok" line per
 * step; the same program runs on the host and under atoll. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHECK(c) do { if (!(c)) { printf("FAIL line %d: %s (errno %d)\n", __LINE__, #c, errno); exit(1); } } while (0)

/* The byte at stream offset i: changes every byte, repeats only after a
 * long stretch, so a lost or repeated piece shows. */
static unsigned char at(unsigned long i) { return (unsigned char)(i * 7 + i / 4099 + i / 65537); }

static void fill(unsigned char *b, unsigned long from, size_t n) {
    for (size_t k = 0; k < n; k++) b[k] = at(from + k);
}

static long max_size(void) {
    FILE *f = fopen("/proc/sys/fs/pipe-max-size", "r");
    long m = 1 << 20;
    if (f) { if (fscanf(f, "%ld", &m) != 1) m = 1 << 20; fclose(f); }
    return m;
}

/* Read exactly n bytes and check them against the stream from `from`. */
static void drain(int fd, unsigned long from, size_t n) {
    static unsigned char b[1 << 16];
    while (n > 0) {
        ssize_t r = read(fd, b, n < sizeof b ? n : sizeof b);
        CHECK(r > 0);
        for (ssize_t k = 0; k < r; k++) CHECK(b[k] == at(from + k));
        from += r;
        n -= r;
    }
}

static void sizes(void) {
    int p[2];
    static unsigned char big[1 << 20];
    CHECK(pipe(p) == 0);
    CHECK(fcntl(p[0], F_GETPIPE_SZ) == 65536);
    CHECK(fcntl(p[1], F_SETPIPE_SZ, 65537) == 131072);
    CHECK(fcntl(p[1], F_SETPIPE_SZ, 200000) == 262144);
    CHECK(fcntl(p[0], F_GETPIPE_SZ) == 262144);
    CHECK(fcntl(p[1], F_SETPIPE_SZ, 0) == 4096);
    CHECK(fcntl(p[1], F_SETPIPE_SZ, -1) == -1 && errno == EINVAL);
    CHECK(fcntl(p[1], F_SETPIPE_SZ, 262144) == 262144);
    /* A grown pipe holds what it says: a non-blocking write fills it. */
    CHECK(fcntl(p[1], F_SETFL, O_NONBLOCK) == 0);
    fill(big, 0, 300000);
    CHECK(write(p[1], big, 300000) == 262144);
    CHECK(write(p[1], big, 1) == -1 && errno == EAGAIN);
    drain(p[0], 0, 262144);
    /* Below what is buffered: EBUSY; the bytes stay, in order. */
    unsigned long off = 0;
    for (int i = 0; i < 100; i++) {
        fill(big, off, 1000);
        CHECK(write(p[1], big, 1000) == 1000);
        off += 1000;
    }
    CHECK(fcntl(p[1], F_SETPIPE_SZ, 65536) == -1 && errno == EBUSY);
    CHECK(fcntl(p[1], F_GETPIPE_SZ) == 262144);
    CHECK(fcntl(p[1], F_SETPIPE_SZ, 131072) == 131072);
    drain(p[0], 0, 50000);
    /* Grow with bytes buffered across the ring's wrap point. */
    fill(big, off, 60000);
    CHECK(write(p[1], big, 60000) == 60000);
    off += 60000;
    CHECK(fcntl(p[1], F_SETPIPE_SZ, 1 << 20) == 1 << 20);
    fill(big, off, 900000);
    CHECK(write(p[1], big, 900000) == 900000);
    off += 900000;
    drain(p[0], 50000, off - 50000);
    CHECK(fcntl(p[0], F_SETPIPE_SZ, 4096) == 4096);
    CHECK(fcntl(p[1], F_GETPIPE_SZ) == 4096);
    close(p[0]);
    close(p[1]);
    printf("size ok\n");
}

/* Does this process hold CAP_SYS_RESOURCE (bit 24 of CapEff)? */
static int may_exceed(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    unsigned long long caps = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "CapEff: %llx", &caps) == 1) break;
    if (f) fclose(f);
    return (caps >> 24) & 1;
}

static void privilege(void) {
    int p[2];
    long m = max_size();
    CHECK(pipe(p) == 0);
    CHECK(fcntl(p[1], F_SETPIPE_SZ, m) == m);
    pid_t k = fork();
    if (k == 0) {
        if (getuid() == 0) CHECK(setgid(65534) == 0 && setuid(65534) == 0);
        /* Growing past pipe-max-size needs CAP_SYS_RESOURCE; keeping or
         * shrinking never does. */
        CHECK(fcntl(p[1], F_SETPIPE_SZ, m * 2) == -1 && errno == EPERM);
        CHECK(fcntl(p[1], F_GETPIPE_SZ) == m);
        CHECK(fcntl(p[1], F_SETPIPE_SZ, m) == m);
        CHECK(fcntl(p[1], F_SETPIPE_SZ, 8192) == 8192);
        _exit(0);
    }
    int st;
    CHECK(waitpid(k, &st, 0) == k && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK(fcntl(p[0], F_GETPIPE_SZ) == 8192);
    if (may_exceed() && m * 2 <= (2 << 20)) CHECK(fcntl(p[1], F_SETPIPE_SZ, m * 2) == m * 2);
    close(p[0]);
    close(p[1]);
    printf("eperm ok\n");
}

/* A writer streams `total` bytes in writes of varied sizes while the
 * reader, reading varied sizes, and a third process change the size. */
static void stream(unsigned long total) {
    int p[2];
    CHECK(pipe(p) == 0);
    pid_t w = fork();
    if (w == 0) {
        static unsigned char b[1 << 21];
        unsigned long off = 0, seed = 1;
        close(p[0]);
        while (off < total) {
            seed = seed * 6364136223846793005UL + 1442695040888963407UL;
            size_t n = (seed >> 33) % 3 == 0 ? (seed >> 20) % (1 << 21) + 1 : (seed >> 20) % 9000 + 1;
            if (n > total - off) n = total - off;
            fill(b, off, n);
            size_t done = 0;
            while (done < n) {
                ssize_t r = write(p[1], b + done, n - done);
                if (r < 0 && errno == EINTR) continue;
                if (r <= 0) _exit(2);
                done += r;
            }
            off += n;
        }
        _exit(0);
    }
    pid_t z = fork();
    if (z == 0) {
        static const int cycle[] = { 4096, 1 << 20, 16384, 262144, 65536, 524288, 8192 };
        close(p[0]);
        for (unsigned i = 0;; i++) {
            fcntl(p[1], F_SETPIPE_SZ, cycle[i % 7]);
            usleep(200);
        }
    }
    close(p[1]);
    static unsigned char b[1 << 21];
    unsigned long off = 0, seed = 7;
    long grown = 0;
    while (off < total) {
        seed = seed * 6364136223846793005UL + 1442695040888963407UL;
        size_t n = (seed >> 33) % 2 ? (seed >> 20) % (1 << 21) + 1 : (seed >> 20) % 5000 + 1;
        ssize_t r = read(p[0], b, n);
        if (r < 0 && errno == EINTR) continue;
        CHECK(r > 0);
        for (ssize_t k = 0; k < r; k++)
            if (b[k] != at(off + k)) {
                printf("FAIL stream byte %lu: %d, not %d\n", off + k, b[k], at(off + k));
                exit(1);
            }
        off += r;
        if ((seed >> 40) % 16 == 0) {
            int s = (seed >> 44) % 2 ? 1 << 20 : 16384;
            int got = fcntl(p[0], F_SETPIPE_SZ, s);
            CHECK(got == s || (got == -1 && errno == EBUSY));
            grown += got == (1 << 20);
        }
    }
    int st;
    CHECK(waitpid(w, &st, 0) == w && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    kill(z, SIGKILL);
    waitpid(z, NULL, 0);
    /* Nothing more than the stream: end of file once both are gone. */
    CHECK(read(p[0], b, 1) == 0);
    CHECK(grown > 0);
    close(p[0]);
    printf("stream ok\n");
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    unsigned long total = argc > 1 ? strtoul(argv[1], NULL, 0) : 64UL << 20;
    sizes();
    privilege();
    stream(total);
    return 0;
}
