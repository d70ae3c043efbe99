/* Large pipe writes as Linux does them, whatever carries them (atoll posts
 * writes of 64 KiB and more as tickets the reader copies from): bytes in
 * order, small writes atomic beside a large one, readiness and FIONREAD
 * while a writer is blocked, a partial write cut by a signal, EFAULT part
 * way through the writer's buffer, and a writer killed mid-transfer (the
 * reader gets a prefix of the stream, then end of file, never a hang).
 * Prints one "... ok" line per step. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHECK(c) do { if (!(c)) { printf("FAIL line %d: %s (errno %d)\n", __LINE__, #c, errno); exit(1); } } while (0)

static unsigned char at(unsigned long i) { return (unsigned char)(i * 7 + i / 4099 + i / 65537); }

static unsigned char *stream_buf(size_t n) {
    unsigned char *b = malloc(n);
    for (size_t k = 0; k < n; k++) b[k] = at(k);
    return b;
}

/* Read until end of file, checking the stream; the byte count. */
static unsigned long read_stream(int fd, size_t chunk) {
    static unsigned char b[1 << 21];
    unsigned long off = 0;
    for (;;) {
        ssize_t r = read(fd, b, chunk);
        if (r < 0 && errno == EINTR) continue;
        CHECK(r >= 0);
        if (r == 0) return off;
        for (ssize_t k = 0; k < r; k++)
            if (b[k] != at(off + k)) {
                printf("FAIL byte %lu: %d, not %d\n", off + k, b[k], at(off + k));
                exit(1);
            }
        off += r;
    }
}

static void in_order(void) {
    size_t n = 6 << 20;
    unsigned char *b = stream_buf(n);
    int p[2];
    CHECK(pipe(p) == 0);
    pid_t k = fork();
    if (k == 0) {
        close(p[0]);
        /* One huge write, then pieces of varied sizes. */
        CHECK(write(p[1], b, 4 << 20) == 4 << 20);
        size_t off = 4 << 20, step = 70000;
        while (off < n) {
            size_t m = n - off < step ? n - off : step;
            CHECK(write(p[1], b + off, m) == (ssize_t)m);
            off += m;
            step = step * 3 % 300007 + 1;
        }
        _exit(0);
    }
    close(p[1]);
    CHECK(read_stream(p[0], 3000) == n);
    close(p[0]);
    waitpid(k, NULL, 0);
    printf("order ok\n");
}

/* Four writers of 4096-byte records and two of 8 MiB in one write each:
 * each record arrives whole (PIPE_BUF atomicity), every byte arrives. */
static void atomic_beside_large(void) {
    int p[2];
    CHECK(pipe(p) == 0);
    pid_t kids[6];
    for (int w = 0; w < 6; w++) {
        if ((kids[w] = fork()) == 0) {
            close(p[0]);
            if (w >= 4) {
                size_t n = 8 << 20;
                unsigned char *z = malloc(n);
                memset(z, w == 4 ? 'Y' : 'Z', n);
                CHECK(write(p[1], z, n) == (ssize_t)n);
            } else {
                unsigned char rec[4096];
                memset(rec, 'a' + w, sizeof rec);
                for (int i = 0; i < 200; i++) CHECK(write(p[1], rec, sizeof rec) == 4096);
            }
            _exit(0);
        }
    }
    close(p[1]);
    static unsigned char b[1 << 16];
    unsigned long count[256] = { 0 }, run = 0;
    int last = -1;
    for (;;) {
        ssize_t r = read(p[0], b, sizeof b);
        CHECK(r >= 0);
        if (r == 0) break;
        for (ssize_t k = 0; k < r; k++) {
            count[b[k]]++;
            if (b[k] != last) {
                if (last >= 'a' && last <= 'd') CHECK(run % 4096 == 0);
                last = b[k];
                run = 0;
            }
            run++;
        }
    }
    if (last >= 'a' && last <= 'd') CHECK(run % 4096 == 0);
    for (int w = 0; w < 4; w++) CHECK(count['a' + w] == 200 * 4096);
    CHECK(count['Y'] == 8 << 20 && count['Z'] == 8 << 20);
    for (int w = 0; w < 6; w++) waitpid(kids[w], NULL, 0);
    close(p[0]);
    printf("atomic ok\n");
}

/* A writer blocked in a 1 MiB write: the read end is readable with the
 * pipe's size waiting (FIONREAD), the write end not writable. */
static void readiness(void) {
    int p[2];
    unsigned char *b = stream_buf(1 << 20);
    CHECK(pipe(p) == 0);
    pid_t k = fork();
    if (k == 0) {
        CHECK(write(p[1], b, 1 << 20) == 1 << 20);
        _exit(0);
    }
    /* Wait until the writer is in its write, however loaded the machine. */
    int n = -1;
    for (;;) {
        CHECK(ioctl(p[0], FIONREAD, &n) == 0);
        if (n == 65536) break;
        CHECK(n < 65536);
        usleep(1000);
    }
    struct pollfd pf[2] = { { .fd = p[0], .events = POLLIN }, { .fd = p[1], .events = POLLOUT } };
    CHECK(poll(pf, 2, 0) == 1);
    CHECK((pf[0].revents & POLLIN) && !(pf[1].revents & POLLOUT));
    close(p[1]);
    CHECK(read_stream(p[0], 1 << 16) == 1 << 20);
    waitpid(k, NULL, 0);
    close(p[0]);
    printf("readiness ok\n");
}

static void on_usr1(int s) { (void)s; }

/* A signal whose handler does not restart cuts a blocked large write: it
 * returns the bytes written, and the reader gets exactly those. */
static void cut_by_signal(void) {
    int p[2], q[2];
    size_t n = 8 << 20;
    unsigned char *b = stream_buf(n);
    CHECK(pipe(p) == 0 && pipe(q) == 0);
    pid_t k = fork();
    if (k == 0) {
        struct sigaction sa = { .sa_handler = on_usr1 };
        sigaction(SIGUSR1, &sa, NULL);
        close(p[0]);
        close(q[0]);
        ssize_t w = write(p[1], b, n);
        CHECK(write(q[1], &w, sizeof w) == sizeof w);
        _exit(0);
    }
    close(p[1]);
    close(q[1]);
    static unsigned char r[100000];
    size_t got = 0;
    while (got < sizeof r) {
        ssize_t m = read(p[0], r + got, sizeof r - got);
        CHECK(m > 0);
        got += m;
    }
    CHECK(memcmp(r, b, sizeof r) == 0);
    usleep(100000);
    kill(k, SIGUSR1);
    ssize_t w;
    CHECK(read(q[0], &w, sizeof w) == sizeof w);
    CHECK(w >= (ssize_t)sizeof r && w < (ssize_t)n);
    /* The rest of what the write returned, then end of file. */
    static unsigned char rest[1 << 20];
    size_t more = 0;
    for (;;) {
        ssize_t m = read(p[0], rest, sizeof rest);
        CHECK(m >= 0);
        if (m == 0) break;
        CHECK(memcmp(rest, b + got + more, m) == 0);
        more += m;
    }
    CHECK(got + more == (size_t)w);
    waitpid(k, NULL, 0);
    close(p[0]);
    close(q[0]);
    printf("signal ok\n");
}

/* A write whose buffer turns unreadable after 128 KiB: Linux writes those
 * bytes and returns their count; so does atoll when the write goes by
 * ticket, and a copy island checks a pipe write's buffer whole and fails
 * with EFAULT having written nothing (docs/COMPATIBILITY.md). Either way
 * the reader gets exactly what the write reported. */
static void efault(void) {
    int p[2];
    long pg = sysconf(_SC_PAGESIZE);
    unsigned char *m = mmap(NULL, 256 << 10, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(m != MAP_FAILED);
    for (size_t k = 0; k < (128 << 10); k++) m[k] = at(k);
    CHECK(mprotect(m + (128 << 10), 128 << 10, PROT_NONE) == 0);
    (void)pg;
    CHECK(pipe(p) == 0);
    pid_t k = fork();
    if (k == 0) {
        close(p[0]);
        ssize_t w = write(p[1], m, 256 << 10);
        _exit(w == (128 << 10) ? 0 : w == -1 && errno == EFAULT ? 2 : 1);
    }
    close(p[1]);
    unsigned long got = read_stream(p[0], 1 << 16);
    int st;
    CHECK(waitpid(k, &st, 0) == k && WIFEXITED(st));
    CHECK((WEXITSTATUS(st) == 0 && got == 128 << 10) || (WEXITSTATUS(st) == 2 && got == 0));
    close(p[0]);
    printf("efault ok\n");
}

/* A writer killed in the middle of a 64 MiB write: the reader gets a
 * prefix of the stream, then end of file. */
static void killed_writer(void) {
    size_t n = 64 << 20;
    unsigned char *b = stream_buf(n);
    int p[2];
    CHECK(pipe(p) == 0);
    pid_t k = fork();
    if (k == 0) {
        close(p[0]);
        write(p[1], b, n);
        _exit(0);
    }
    close(p[1]);
    static unsigned char r[4096];
    size_t got = 0;
    while (got < (1 << 20)) {
        ssize_t m = read(p[0], r, sizeof r);
        CHECK(m > 0);
        CHECK(memcmp(r, b + got, m) == 0);
        got += m;
    }
    kill(k, SIGKILL);
    waitpid(k, NULL, 0);
    for (;;) {
        ssize_t m = read(p[0], r, sizeof r);
        CHECK(m >= 0);
        if (m == 0) break;
        CHECK(memcmp(r, b + got, m) == 0);
        got += m;
    }
    CHECK(got < n);
    close(p[0]);
    printf("killed ok\n");
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    signal(SIGPIPE, SIG_IGN);
    alarm(120);
    in_order();
    atomic_beside_large();
    readiness();
    cut_by_signal();
    efault();
    killed_writer();
    return 0;
}
