/* Large pipe writes while readers wait: the bytes every reader gets,
 * checked byte for byte, whatever path the pipe takes (atoll splits the
 * copy of a large write between writer and reader, pipesplit.rs).
 *
 *   waiting        one reader, odd sizes and unaligned buffers on both
 *                  ends, sometimes the reader first, sometimes the writer;
 *                  every byte checked, checksum printed (compared with a
 *                  Linux pipe by the test)
 *   two readers    two reader processes share a pipe: every read holds
 *                  consecutive words, and together they got each once
 *   killed reader  a reader killed while large writes stream into it: the
 *                  next reader gets the rest, in order, nothing twice
 *   killed writer  a writer killed in a 64 MiB write: the reader gets a
 *                  prefix of its bytes, then end of file
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define MIB (1L << 20)

static void fail(const char *what) {
    printf("FAIL %s\n", what);
    fflush(stdout);
    exit(1);
}

/* Byte at stream position p: changes with every position bit that a
 * misplaced chunk (a multiple of 4 KiB away) would keep. */
static unsigned char pattern(uint64_t p) {
    return (unsigned char)(p * 7 + (p >> 12) * 13 + (p >> 17) * 31 + (p >> 22));
}

static void write_all(int fd, const unsigned char *b, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, b, n);
        if (w <= 0) fail("write");
        b += w;
        n -= (size_t)w;
    }
}

static void waiting(long pipe_size) {
    static const size_t writes[] = {1048576, 1048575, 3 * 1048576 + 1, 262144, 262145,
                                    65539, 777777, 5000000, 131071, 2097152 + 12345,
                                    300000, 1048576, 4194304, 1, 999999};
    static const size_t reads[] = {1048576, 999999, 4194309, 262144, 300001, 65536,
                                   8388608, 131072, 524288 + 17};
    size_t nw = sizeof writes / sizeof writes[0], nr = sizeof reads / sizeof reads[0];
    int p[2];
    if (pipe(p)) fail("pipe");
    if (pipe_size && fcntl(p[1], F_SETPIPE_SZ, pipe_size) < 0) fail("F_SETPIPE_SZ");
    uint64_t total = 0;
    for (int round = 0; round < 3; round++)
        for (size_t i = 0; i < nw; i++) total += writes[i];
    pid_t w = fork();
    if (w == 0) {
        close(p[0]);
        unsigned char *buf = malloc(8 * MIB + 64);
        uint64_t pos = 0;
        for (int round = 0; round < 3; round++)
            for (size_t i = 0; i < nw; i++) {
                unsigned char *src = buf + (i % 7);
                for (size_t k = 0; k < writes[i]; k++) src[k] = pattern(pos + k);
                if ((i + round) % 3 == 0) usleep(2000); /* the reader waits first */
                write_all(p[1], src, writes[i]);
                pos += writes[i];
            }
        _exit(0); /* atoll reports the client's counters at _exit too */
    }
    close(p[1]);
    unsigned char *buf = malloc(8 * MIB + 64);
    uint64_t pos = 0, sum = 1469598103934665603ULL;
    for (size_t i = 0;; i++) {
        unsigned char *dst = buf + 1 + (i % 5);
        size_t want = reads[i % nr];
        if (i % 4 == 1) usleep(2000); /* the writer posts first */
        ssize_t r = read(p[0], dst, want);
        if (r < 0) fail("waiting read");
        if (r == 0) break;
        for (ssize_t k = 0; k < r; k++) {
            if (dst[k] != pattern(pos + k)) {
                printf("FAIL waiting: byte %llu is %u, not %u\n",
                       (unsigned long long)(pos + k), dst[k], pattern(pos + k));
                exit(1);
            }
            sum = (sum ^ dst[k]) * 1099511628211ULL;
        }
        pos += r;
    }
    int st;
    waitpid(w, &st, 0);
    if (pos != total || !WIFEXITED(st) || WEXITSTATUS(st)) fail("waiting total");
    printf("waiting (pipe size %ld): %llu bytes, checksum %016llx\n", pipe_size,
           (unsigned long long)pos, (unsigned long long)sum);
    close(p[0]);
    free(buf);
}

/* Words: the stream is 64-bit word k at position 8k. */
static void fill_words(uint64_t *w, uint64_t first, size_t n) {
    for (size_t k = 0; k < n; k++) w[k] = first + k;
}

/* Check a read of r bytes holds consecutive words; returns its first. */
static uint64_t check_words(const uint64_t *w, ssize_t r, const char *who) {
    if (r % 8) {
        printf("FAIL %s: a read of %zd bytes\n", who, r);
        exit(1);
    }
    for (ssize_t k = 1; k < r / 8; k++)
        if (w[k] != w[0] + k) {
            printf("FAIL %s: word %llu after %llu\n", who, (unsigned long long)w[k],
                   (unsigned long long)w[k - 1]);
            exit(1);
        }
    return w[0];
}

struct tally {
    volatile uint64_t words[2], sum[2], progress;
};

static void two_readers(void) {
    const uint64_t n = 96 * MIB / 8;
    struct tally *t = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    int p[2];
    if (t == MAP_FAILED || pipe(p)) fail("setup");
    fcntl(p[1], F_SETPIPE_SZ, MIB);
    pid_t r[2];
    for (int j = 0; j < 2; j++) {
        r[j] = fork();
        if (r[j] == 0) {
            close(p[1]);
            size_t size = j ? 512 * 1024 + 8 : MIB;
            uint64_t *buf = malloc(size);
            ssize_t got;
            while ((got = read(p[0], buf, size)) > 0) {
                check_words(buf, got, "two readers");
                for (ssize_t k = 0; k < got / 8; k++) t->sum[j] += buf[k];
                t->words[j] += got / 8;
            }
            _exit(got < 0);
        }
    }
    close(p[0]);
    uint64_t *buf = malloc(4 * MIB);
    static const size_t sizes[] = {MIB, 4 * MIB, 3 * MIB + 8, 512 * 1024, 2 * MIB - 8};
    uint64_t k = 0;
    for (int i = 0; k < n; i++) {
        size_t words = sizes[i % 5] / 8;
        if (words > n - k) words = n - k;
        fill_words(buf, k, words);
        write_all(p[1], (unsigned char *)buf, words * 8);
        k += words;
    }
    close(p[1]);
    for (int j = 0; j < 2; j++) {
        int st;
        waitpid(r[j], &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st)) fail("two readers exit");
    }
    if (t->words[0] + t->words[1] != n || t->sum[0] + t->sum[1] != n * (n - 1) / 2)
        fail("two readers: words lost or doubled");
    printf("two readers ok\n");
}

static void killed_reader(int round) {
    const uint64_t n = 64 * MIB / 8;
    struct tally *t = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    int p[2];
    if (t == MAP_FAILED || pipe(p)) fail("setup");
    fcntl(p[1], F_SETPIPE_SZ, MIB);
    pid_t w = fork();
    if (w == 0) {
        close(p[0]);
        uint64_t *buf = malloc(4 * MIB);
        for (uint64_t k = 0; k < n; k += 4 * MIB / 8) {
            fill_words(buf, k, 4 * MIB / 8);
            write_all(p[1], (unsigned char *)buf, 4 * MIB);
        }
        _exit(0);
    }
    close(p[1]);
    pid_t r = fork();
    if (r == 0) {
        uint64_t *buf = malloc(4 * MIB);
        ssize_t got;
        uint64_t next = 0;
        while ((got = read(p[0], buf, 4 * MIB)) > 0) {
            if (check_words(buf, got, "killed reader (first)") != next)
                fail("killed reader: first reader out of order");
            next += got / 8;
            t->progress = next;
        }
        _exit(0);
    }
    uint64_t at = (uint64_t)(round + 1) * 5 * MIB / 8 + round * 12345;
    while (t->progress < at) usleep(200);
    kill(r, SIGKILL);
    waitpid(r, 0, 0);
    uint64_t seen = t->progress, next = 0, first = 0;
    uint64_t *buf = malloc(3 * MIB);
    ssize_t got;
    while ((got = read(p[0], buf, 3 * MIB)) > 0) {
        uint64_t w0 = check_words(buf, got, "killed reader (second)");
        if (next == 0) first = next = w0;
        if (w0 != next) fail("killed reader: second reader out of order");
        next += got / 8;
    }
    int st;
    waitpid(w, &st, 0);
    if (first < seen || next != n || !WIFEXITED(st) || WEXITSTATUS(st))
        fail("killed reader: the rest did not follow");
    close(p[0]);
    printf("killed reader ok (round %d)\n", round);
}

static void killed_writer(int round) {
    const uint64_t n = 64 * MIB / 8;
    struct tally *t = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    int p[2];
    if (t == MAP_FAILED || pipe(p)) fail("setup");
    if (round) fcntl(p[1], F_SETPIPE_SZ, MIB);
    uint64_t *buf = malloc(n * 8);
    pid_t w = fork();
    if (w == 0) {
        close(p[0]);
        fill_words(buf, 0, n);
        write_all(p[1], (unsigned char *)buf, n * 8);
        _exit(0);
    }
    close(p[1]);
    pid_t killer = fork();
    if (killer == 0) {
        while (t->progress < (uint64_t)(round + 1) * 3 * MIB / 8) usleep(200);
        kill(w, SIGKILL);
        _exit(0);
    }
    ssize_t got;
    uint64_t next = 0;
    while ((got = read(p[0], buf, MIB + 8 * round)) > 0) {
        if (check_words(buf, got, "killed writer") != next) fail("killed writer: gap");
        next += got / 8;
        t->progress = next;
    }
    if (got < 0) fail("killed writer: read");
    waitpid(killer, 0, 0);
    waitpid(w, 0, 0);
    if (next > n) fail("killed writer: too much");
    close(p[0]);
    free(buf);
    printf("killed writer ok (round %d)\n", round);
}

int main(void) {
    setvbuf(stdout, 0, _IONBF, 0);
    waiting(0);
    waiting(MIB);
    two_readers();
    for (int round = 0; round < 3; round++) killed_reader(round);
    for (int round = 0; round < 2; round++) killed_writer(round);
    return 0;
}
