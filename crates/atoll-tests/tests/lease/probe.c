/* Reads without a message (client `lease.rs`) against every change of
 * the file under them.
 *
 * lease race DIR: files f0..f2, each block of which is written whole
 * with a tag byte that names the file (1 + 64 * file + generation % 63).
 * Two readers per file pread blocks, each several times in a row (so
 * that the later reads may be served from blocks learnt before), and
 * reopen the name now and then. Writers overwrite blocks, truncate,
 * extend, punch holes, rename a fresh copy over the name and unlink and
 * recreate it; a scratcher fills and removes other files (tag file 3),
 * whose blocks reuse the freed ones. Every byte a reader gets must be a
 * zero (a hole, an extension) or a tag of its own file.
 *
 * lease lockstep FILE: a parent rewrites FILE whole with the tag of
 * step i and truncates it to i blocks (1..8), then tells its child, which
 * has read the file in a loop the whole time (`O_NOATIME`, so that
 * relatime sends none of its reads to the server): it must see exactly
 * i blocks of tag i (a read past the end returns nothing).
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

#define BS 4096
#define FILES 3
#define BLOCKS 16
#define READERS 2
#define WRITERS 2
#define STEPS 1500
#define READS 6000

struct shared {
    int writers_done;
    int failed;
    char why[256];
};

static struct shared *sh;
static const char *dir;

static void fail(const char *fmt, long a, long b, long c) {
    if (!__atomic_exchange_n(&sh->failed, 1, __ATOMIC_SEQ_CST))
        snprintf(sh->why, sizeof sh->why, fmt, a, b, c);
}

static unsigned long lcg(unsigned long *s) {
    *s = *s * 6364136223846793005UL + 1442695040888963407UL;
    return *s >> 33;
}

static void name(char *p, size_t n, const char *what, int f, long k) {
    snprintf(p, n, "%s/%s%d.%ld", dir, what, f, k);
}

static void path_of(char *p, size_t n, int f) {
    snprintf(p, n, "%s/f%d", dir, f);
}

static void fill(char *b, int f, long gen) {
    memset(b, 1 + 64 * f + (int)(gen % 63), BS);
}

/* Write blocks [0, n) of a fresh file at `p` with file f's tag. */
static int make(const char *p, int f, long gen, int n, int flags) {
    char b[BS];
    int fd = open(p, O_RDWR | O_CREAT | flags, 0644);
    if (fd < 0)
        return -1;
    for (int k = 0; k < n; k++) {
        fill(b, f, gen + k);
        if (pwrite(fd, b, BS, (off_t)k * BS) != BS) {
            close(fd);
            return -1;
        }
    }
    return fd;
}

static void writer(int w) {
    unsigned long seed = 101 + w;
    char b[BS], p[512], t[512];
    for (long j = 1; j <= STEPS && !sh->failed; j++) {
        long r = lcg(&seed);
        int f = r % FILES, op = (r >> 8) % 8;
        long blk = (r >> 16) % BLOCKS;
        path_of(p, sizeof p, f);
        int fd = open(p, O_RDWR);
        if (fd < 0) {
            if (errno != ENOENT)
                fail("writer: open %ld: errno %ld%ld", f, errno, 0);
            continue; /* between an unlink and its recreation */
        }
        switch (op) {
        case 0: case 1: case 2: /* overwrite a block */
            fill(b, f, j);
            if (pwrite(fd, b, BS, blk * BS) != BS)
                fail("writer: pwrite %ld: errno %ld%ld", f, errno, 0);
            break;
        case 3: /* truncate down (to whole blocks) */
            if (ftruncate(fd, blk * BS) != 0)
                fail("writer: truncate %ld: errno %ld%ld", f, errno, 0);
            break;
        case 4: /* extend: a hole, then a block past it */
            fill(b, f, j);
            if (pwrite(fd, b, BS, (blk + 4) * BS) != BS)
                fail("writer: extend %ld: errno %ld%ld", f, errno, 0);
            break;
        case 5: /* punch a hole */
            if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, blk * BS, 2 * BS) != 0)
                fail("writer: punch %ld: errno %ld%ld", f, errno, 0);
            break;
        case 6: { /* a fresh copy renamed over the name */
            name(t, sizeof t, "new", f, w * 100000 + j);
            int n = make(t, f, j, 1 + blk % 8, O_EXCL);
            if (n < 0 || rename(t, p) != 0)
                fail("writer: rename over %ld: errno %ld%ld", f, errno, 0);
            if (n >= 0)
                close(n);
            break;
        }
        default: { /* unlink, recreate */
            unlink(p);
            int n = make(p, f, j, 1 + blk % 8, 0);
            if (n < 0)
                fail("writer: recreate %ld: errno %ld%ld", f, errno, 0);
            else
                close(n);
        }
        }
        close(fd);
    }
}

static void scratcher(void) {
    char p[512];
    for (long j = 0; !__atomic_load_n(&sh->writers_done, __ATOMIC_SEQ_CST) && !sh->failed; j++) {
        name(p, sizeof p, "z", 3, j % 4);
        int fd = make(p, 3, j, 8, O_TRUNC);
        if (fd >= 0)
            close(fd);
        unlink(p);
    }
}

static void reader(int f, int r) {
    unsigned long seed = 7 + 10 * f + r;
    char b[BS], p[512];
    path_of(p, sizeof p, f);
    int fd = -1;
    for (long j = 0; j < READS && !sh->failed; j++) {
        if (fd < 0 || j % 64 == 0) {
            if (fd >= 0)
                close(fd);
            /* One reader of each file leaves the atime alone: its reads
             * are not due to the server after each write (relatime). */
            fd = open(p, O_RDONLY | (r == 1 ? O_NOATIME : 0));
            if (fd < 0)
                continue;
        }
        long blk = lcg(&seed) % (BLOCKS + 6);
        for (int again = 0; again < 4; again++) {
            ssize_t n = pread(fd, b, BS, blk * BS);
            if (n < 0) {
                fail("reader %ld: pread: errno %ld%ld", f, errno, 0);
                return;
            }
            for (ssize_t i = 0; i < n; i++) {
                int v = (unsigned char)b[i];
                if (v != 0 && (v - 1) / 64 != f) {
                    fail("file %ld: byte %ld is %ld, another file's", f, blk * BS + i, v);
                    return;
                }
            }
        }
    }
    if (fd >= 0)
        close(fd);
}

static int race(void) {
    char p[512];
    for (int f = 0; f < FILES; f++) {
        path_of(p, sizeof p, f);
        int fd = make(p, f, 0, BLOCKS, O_TRUNC);
        if (fd < 0) {
            perror("setup");
            return 1;
        }
        close(fd);
    }
    pid_t kids[FILES * READERS + WRITERS + 1];
    int n = 0;
    for (int w = 0; w < WRITERS; w++)
        if ((kids[n++] = fork()) == 0) {
            writer(w);
            _exit(0);
        }
    if ((kids[n++] = fork()) == 0) {
        scratcher();
        _exit(0);
    }
    for (int f = 0; f < FILES; f++)
        for (int r = 0; r < READERS; r++)
            if ((kids[n++] = fork()) == 0) {
                reader(f, r);
                _exit(0);
            }
    for (int i = 0; i < n; i++) {
        if (i == WRITERS)
            __atomic_store_n(&sh->writers_done, 1, __ATOMIC_SEQ_CST);
        int st;
        waitpid(kids[i], &st, 0);
    }
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
        /* No atime: only the file's data version sends it to the server. */
        int rd = open(path, O_RDONLY | O_NOATIME);
        char b[BS];
        long i;
        while (read(go[0], &i, sizeof i) == sizeof i) {
            long want = 1 + i % 8;
            /* Each block twice (the second may need no message), from
             * the last: the blocks learnt at the previous step are
             * known when this one starts. */
            for (long k = 8; k >= 0; k--)
                for (int again = 0; again < 2; again++) {
                    ssize_t n = pread(rd, b, BS, k * BS);
                    if (n != (k < want ? BS : 0)) {
                        fail("step %ld: block %ld read %ld bytes", i, k, n);
                        break;
                    }
                    for (ssize_t x = 0; x < n; x++)
                        if ((unsigned char)b[x] != 1 + (i % 63)) {
                            fail("step %ld: block %ld byte %ld is stale", i, k, x);
                            break;
                        }
                }
            if (write(ack[1], &i, sizeof i) != sizeof i)
                break;
        }
        _exit(0);
    }
    close(go[0]);
    close(ack[1]);
    char b[BS];
    for (long i = 1; i <= 200 && !sh->failed; i++) {
        memset(b, 1 + (i % 63), BS);
        long want = 1 + i % 8;
        for (long k = 0; k < want; k++)
            if (pwrite(fd, b, BS, k * BS) != BS) {
                fail("step %ld: pwrite: errno %ld%ld", i, errno, 0);
                break;
            }
        if (ftruncate(fd, want * BS) != 0)
            fail("step %ld: truncate: errno %ld%ld", i, errno, 0);
        if (write(go[1], &i, sizeof i) != sizeof i || read(ack[0], &i, sizeof i) != sizeof i)
            fail("step %ld: the child is gone%ld%ld", i, 0, 0);
    }
    close(go[1]);
    waitpid(child, NULL, 0);
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 3)
        return 2;
    sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    dir = argv[2];
    int r = strcmp(argv[1], "race") == 0 ? race() : lockstep(argv[2]);
    if (r)
        return r;
    if (sh->failed) {
        printf("%s: %s\n", argv[1], sh->why);
        return 1;
    }
    printf("%s: passed\n", argv[1]);
    return 0;
}
