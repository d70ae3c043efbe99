/* The size of a file seen by lseek(fd, 0, SEEK_END) in one process while
 * other processes change it.
 *
 * sizeboard race DIR: FILES files, each with a writer that appends (with
 * O_APPEND), writes past the end, truncates down and up, extends with
 * fallocate and reopens with O_TRUNC, and READERS readers that each hold
 * their own description and ask the size again and again. A reader notes
 * the steps the writer had finished before its call (k1) and after (k2):
 * the size it gets must be the one after some step m in k1..k2, or one
 * the writer made inside step m + 1.
 *
 * sizeboard lockstep FILE: a parent truncates FILE to a new size, then
 * tells its child, which must see exactly that size.
 *
 * Prints "<mode>: passed" or the first wrong answer. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define FILES 3
#define READERS 2
#define STEPS 1500

struct shared {
    long done[FILES];
    long sizes[FILES][STEPS + 1];
    char grows[FILES][STEPS + 1];
    int failed;
    char why[256];
};

static struct shared *sh;
static char buf[8192];

static void fail(const char *fmt, long a, long b, long c) {
    if (!__atomic_exchange_n(&sh->failed, 1, __ATOMIC_SEQ_CST))
        snprintf(sh->why, sizeof sh->why, fmt, a, b, c);
}

/* What the steps around `k` left. */
static void fail_at(int f, long s, long k1, long k2) {
    char what[256];
    snprintf(what, sizeof what,
             "file %d: SEEK_END said %ld between steps %ld and %ld (sizes %ld, then %ld%s)", f, s,
             k1, k2, sh->sizes[f][k1], k1 < STEPS ? sh->sizes[f][k1 + 1] : -1L,
             k1 < STEPS && sh->grows[f][k1 + 1] ? " by a write" : "");
    if (!__atomic_exchange_n(&sh->failed, 1, __ATOMIC_SEQ_CST))
        snprintf(sh->why, sizeof sh->why, "%s", what);
}

static unsigned long lcg(unsigned long *s) {
    *s = *s * 6364136223846793005UL + 1442695040888963407UL;
    return *s >> 33;
}

static void writer(const char *path, int f) {
    int fd = open(path, O_RDWR), app = open(path, O_WRONLY | O_APPEND);
    unsigned long seed = 17 + f;
    long size = 0;
    if (fd < 0 || app < 0) {
        fail("writer %ld: open: %ld%ld", f, errno, 0);
        return;
    }
    for (long j = 1; j <= STEPS && !sh->failed; j++) {
        long r = lcg(&seed), next, len = 1 + r % 6000, off;
        int op = (j % 97 == 0) ? 5 : (int)(r % 5);
        switch (op) {
        case 0: next = size + len; break;
        case 1: off = lcg(&seed) % (size + 5000); next = off + len > size ? off + len : size; break;
        case 2: next = lcg(&seed) % 60000; break;
        case 3: next = size + len; break;
        case 4: next = size; break; /* a write inside the file */
        default: next = 0; break;
        }
        if (op == 4 && size == 0)
            next = len, op = 0;
        sh->sizes[f][j] = next;
        sh->grows[f][j] = op <= 1;
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
        long got = 0;
        switch (op) {
        case 0: got = write(app, buf, len) == len; break;
        case 1: got = pwrite(fd, buf, len, off) == len; break;
        case 2: got = ftruncate(fd, next) == 0; break;
        case 3: got = fallocate(fd, 0, size, len) == 0; break;
        case 4: got = pwrite(fd, buf, 1 + lcg(&seed) % (size < 4096 ? size : 4096), 0) > 0; break;
        default: {
            int t = open(path, O_WRONLY | O_TRUNC);
            got = t >= 0 && close(t) == 0;
        }
        }
        if (!got) {
            fail("writer %ld: step %ld failed: errno %ld", f, j, errno);
            return;
        }
        size = next;
        __atomic_store_n(&sh->done[f], j, __ATOMIC_SEQ_CST);
    }
}

static long reader(const char *path, int f) {
    int fd = open(path, O_RDONLY);
    long checks = 0;
    if (fd < 0) {
        fail("reader %ld: open: errno %ld%ld", f, errno, 0);
        return 0;
    }
    for (;;) {
        long k1 = __atomic_load_n(&sh->done[f], __ATOMIC_SEQ_CST);
        long s = lseek(fd, 0, SEEK_END);
        long k2 = __atomic_load_n(&sh->done[f], __ATOMIC_SEQ_CST);
        int ok = 0;
        /* At the instant of the call the writer had finished some step m
         * in k1..k2 and may have been inside step m + 1; a write grows
         * the file page by page on Linux, so any size between. */
        for (long m = k1; m <= k2; m++) {
            ok |= sh->sizes[f][m] == s;
            if (m < STEPS) {
                long a = sh->sizes[f][m], b = sh->sizes[f][m + 1];
                ok |= sh->grows[f][m + 1] ? (s >= a && s <= b) : s == b;
            }
        }
        if (!ok) {
            fail_at(f, s, k1, k2);
            return checks;
        }
        checks++;
        if (k1 == STEPS || sh->failed)
            return checks;
    }
}

static int race(const char *dir) {
    char path[FILES][4096];
    for (int f = 0; f < FILES; f++) {
        snprintf(path[f], sizeof path[f], "%s/f%d", dir, f);
        int fd = open(path[f], O_RDWR | O_CREAT | O_TRUNC, 0644);
        if (fd < 0 || close(fd) < 0) {
            perror("create");
            return 1;
        }
    }
    memset(buf, 'x', sizeof buf);
    int n = 0;
    for (int f = 0; f < FILES; f++)
        for (int r = 0; r <= READERS; r++, n++)
            if (fork() == 0) {
                if (r == 0)
                    writer(path[f], f);
                else
                    reader(path[f], f);
                _exit(0);
            }
    while (n-- > 0)
        wait(NULL);
    if (sh->failed) {
        printf("race: %s\n", sh->why);
        return 1;
    }
    printf("race: passed\n");
    return 0;
}

static int lockstep(const char *path) {
    int go[2], ack[2];
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || pipe(go) < 0 || pipe(ack) < 0) {
        perror("setup");
        return 1;
    }
    pid_t child = fork();
    if (child == 0) {
        close(go[1]);
        close(ack[0]);
        int rd = open(path, O_RDONLY);
        long i;
        while (read(go[0], &i, sizeof i) == sizeof i) {
            long want = i * 1000 + i % 7, s = lseek(rd, 0, SEEK_END);
            if (s != want)
                fail("step %ld: SEEK_END said %ld, not %ld", i, s, want);
            if (write(ack[1], &i, sizeof i) != sizeof i)
                _exit(1);
        }
        _exit(0);
    }
    close(go[0]);
    close(ack[1]);
    for (long i = 1; i <= 200 && !sh->failed; i++) {
        if (ftruncate(fd, i * 1000 + i % 7) < 0) {
            fail("step %ld: ftruncate: errno %ld%ld", i, errno, 0);
            break;
        }
        long back;
        if (write(go[1], &i, sizeof i) != sizeof i || read(ack[0], &back, sizeof back) != sizeof back)
            break;
    }
    close(go[1]);
    waitpid(child, NULL, 0);
    if (sh->failed) {
        printf("lockstep: %s\n", sh->why);
        return 1;
    }
    printf("lockstep: passed\n");
    return 0;
}

int main(int argc, char **argv) {
    sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED || argc != 3)
        return 2;
    setvbuf(stdout, NULL, _IONBF, 0);
    if (!strcmp(argv[1], "race"))
        return race(argv[2]);
    if (!strcmp(argv[1], "lockstep"))
        return lockstep(argv[2]);
    return 2;
}
