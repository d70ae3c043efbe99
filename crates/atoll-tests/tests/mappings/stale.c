/* A mapping outlives its file's blocks: map /atoll/victim, let the file go
 * (close + unlink, or ftruncate), fill every free block with other files,
 * store through the stale mapping, and check that no other file changed.
 *
 *   stale unlink|truncate|fork|partial|mremap|fixed  (see main)
 *   stale count        fill, print how many blocks other files got, clean up
 *   stale leave        map, close, unlink, exit without munmap
 *   stale leave-exec   the same, then create /atoll/ready and execve
 *                      `sleep 30` (the new image maps nothing)
 *   stale leave-wait   the same, but waits to be killed instead of exec
 *   stale threads N    threads (and with threads-signals, a signal handler
 *                      too) map and unmap the
 *                      victim at once; then, the file gone, other files
 *                      must get N blocks (what `count` said) again
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#define BLK 4096
#define LEN (4 * BLK)
#define MAXF 20000

static int nfill;
static int spacer_intact(void);

static void fill_name(char *b, int i) { sprintf(b, "/atoll/fill-%d", i); }
static void fill_data(char *d, int i) {
    memset(d, 'a' + i % 26, BLK);
    memcpy(d, &i, sizeof i);
}

/* Other files take every block left, one each, until every server has
 * answered ENOSPC 64 times in a row. Returns how many were written. */
static int fill(void) {
    char name[64], d[BLK];
    int made = 0, misses = 0;
    while (misses < 64 && nfill < MAXF) {
        int i = nfill++;
        fill_name(name, i);
        int fd = open(name, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0) { perror("open fill"); exit(2); }
        fill_data(d, i);
        ssize_t w = write(fd, d, sizeof d);
        close(fd);
        if (w == (ssize_t)sizeof d) { made++; misses = 0; continue; }
        if (w >= 0 || errno != ENOSPC) { perror("write fill"); exit(2); }
        unlink(name);
        misses++;
    }
    return made;
}

/* Every file fill() wrote still holds what it wrote. */
static int check(void) {
    char name[64], want[BLK], got[BLK];
    int bad = 0;
    for (int i = 0; i < nfill; i++) {
        fill_name(name, i);
        int fd = open(name, O_RDONLY);
        if (fd < 0) continue; /* refused with ENOSPC and removed */
        fill_data(want, i);
        if (read(fd, got, sizeof got) != (ssize_t)sizeof got || memcmp(got, want, sizeof got)) {
            printf("corrupt %s\n", name);
            bad++;
        }
        close(fd);
    }
    if (!spacer_intact()) {
        printf("corrupt /atoll/spacer\n");
        bad++;
    }
    return bad;
}

static void clean(void) {
    char name[64];
    for (int i = 0; i < nfill; i++) {
        fill_name(name, i);
        unlink(name);
    }
    nfill = 0;
}

/* Block i of the victim is all 'A' + i. */
static int is_block(const char *p, int i) {
    for (int k = 0; k < BLK; k++) if (p[k] != 'A' + i) return 0;
    return 1;
}

/* The victim's blocks alternate with a spacer file's in the cache, so a
 * mapping grown by the kernel alone would reach the spacer. */
static int victim(void) {
    char buf[BLK];
    int fd = open("/atoll/victim", O_RDWR | O_CREAT | O_TRUNC, 0644);
    int sp = open("/atoll/spacer", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    for (int i = 0; i < 4; i++) {
        memset(buf, 'A' + i, BLK);
        if (fd < 0 || write(fd, buf, BLK) != BLK) { perror("victim"); exit(2); }
        memset(buf, 'Z', BLK);
        if (sp < 0 || write(sp, buf, BLK) != BLK) { perror("spacer"); exit(2); }
    }
    close(sp);
    return fd;
}

static int spacer_intact(void) {
    char got[BLK];
    int sp = open("/atoll/spacer", O_RDONLY), ok = 1;
    for (int i = 0; i < 4; i++)
        ok &= read(sp, got, BLK) == BLK && got[0] == 'Z' && !memcmp(got, got + 1, BLK - 1);
    close(sp);
    return ok;
}

static char *map(int fd, int flags, size_t len) {
    char *m = mmap(0, len, PROT_READ | PROT_WRITE, flags, fd, 0);
    if (m == MAP_FAILED) { perror("mmap"); exit(2); }
    return m;
}

/* Fill, store through `s` (len bytes), check; report. */
static int attack(char *s, size_t len, int priv) {
    int made = fill();
    memset(s, 'X', len);
    int bad = check();
    printf("filled %d corrupt %d private %d\n", made > 0, bad, priv);
    return bad;
}

static int shared_fd;

static void on_alarm(int sig) {
    (void)sig;
    void *m = mmap(0, BLK, PROT_READ, MAP_SHARED, shared_fd, 0);
    if (m != MAP_FAILED) munmap(m, BLK);
}

static void *churn(void *arg) {
    (void)arg;
    for (int i = 0; i < 1000; i++) {
        char *m = map(shared_fd, MAP_SHARED, LEN);
        m[i % LEN] = 'A' + (i % LEN) / BLK;
        munmap(m + BLK, 2 * BLK);
        free(malloc(1 << 18)); /* malloc's own mmap and munmap */
        munmap(m, BLK);
        munmap(m + 3 * BLK, BLK);
    }
    return 0;
}

static int threads(int want, int with_signals) {
    shared_fd = victim();
    signal(SIGALRM, on_alarm);
    struct itimerval on = {{0, 500}, {0, 500}}, off = {{0, 0}, {0, 0}};
    if (with_signals) setitimer(ITIMER_REAL, &on, 0);
    pthread_t t[4];
    for (int i = 0; i < 4; i++) pthread_create(&t[i], 0, churn, 0);
    for (int i = 0; i < 4; i++) pthread_join(t[i], 0);
    setitimer(ITIMER_REAL, &off, 0);
    close(shared_fd);
    unlink("/atoll/victim");
    unlink("/atoll/spacer");
    int got = fill();
    clean();
    if (got == want)
        printf("threads ok\n");
    else
        printf("threads: %d blocks, not %d\n", got, want);
    return got != want;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    /* Made first: a pipe's ring takes blocks of its own (and only where
     * needed, so that counts of free blocks do not depend on when another
     * process's pipe went). */
    int go[2];
    if (!strcmp(mode, "fork") && pipe2(go, O_CLOEXEC)) return 2;
    if (!strcmp(mode, "count")) {
        printf("%d\n", fill());
        clean();
        return 0;
    }
    if (!strcmp(mode, "threads")) return threads(argc > 2 ? atoi(argv[2]) : -1, 0);
    if (!strcmp(mode, "threads-signals")) return threads(argc > 2 ? atoi(argv[2]) : -1, 1);
    int fd = victim();
    if (!strncmp(mode, "leave", 5)) {
        map(fd, MAP_SHARED, LEN);
        close(fd);
        unlink("/atoll/victim");
        unlink("/atoll/spacer");
        if (strcmp(mode, "leave")) {
            close(open("/atoll/ready", O_WRONLY | O_CREAT, 0644));
            if (!strcmp(mode, "leave-wait")) pause();
            execlp("sleep", "sleep", "30", (char *)0);
            return 2;
        }
        return 0;
    }
    char *s = map(fd, MAP_SHARED, LEN);
    char *p = map(fd, MAP_PRIVATE, LEN);
    /* Shared stores reach the file; private ones stay private. */
    s[1] = 'S';
    p[0] = 'P';
    char two[2];
    if (pread(fd, two, 2, 0) != 2 || two[0] != 'A' || two[1] != 'S') {
        printf("coherence: %c%c\n", two[0], two[1]);
        return 1;
    }
    s[1] = 'A';
    if (!strcmp(mode, "truncate")) {
        /* Another process cuts the file: this one's pages keep their blocks,
         * zeroed (its own truncate would make them fault, as on Linux). */
        pid_t t = fork();
        if (t == 0) {
            int f = open("/atoll/victim", O_WRONLY);
            _exit(f < 0 || ftruncate(f, 0) ? 2 : 0);
        }
        int st;
        if (waitpid(t, &st, 0) != t || !WIFEXITED(st) || WEXITSTATUS(st)) {
            printf("ftruncate failed\n");
            return 2;
        }
        close(fd);
    } else if (!strcmp(mode, "mremap")) {
        /* Grown, the mapping shows the file's next blocks, not the cache's. */
        munmap(s + 2 * BLK, 2 * BLK);
        char *g = mremap(s, 2 * BLK, LEN, MREMAP_MAYMOVE);
        if (g == MAP_FAILED) { perror("mremap"); return 2; }
        s = g;
        if (!is_block(s + 2 * BLK, 2) || !is_block(s + 3 * BLK, 3)) {
            printf("grown mapping shows other blocks\n");
            return 1;
        }
        /* So does a second mapping of the first page, made by mremap. */
        char *d = mremap(s, 0, LEN, MREMAP_MAYMOVE);
        if (d == MAP_FAILED) { perror("mremap dup"); return 2; }
        if (!is_block(d + BLK, 1) || !is_block(d + 3 * BLK, 3)) {
            printf("duplicate mapping shows other blocks\n");
            return 1;
        }
        munmap(d, LEN);
        /* Moved and shrunk: the rest of it still holds the blocks. */
        char *m = mremap(s, LEN, 3 * BLK, MREMAP_MAYMOVE | MREMAP_FIXED, map(-1, MAP_PRIVATE | MAP_ANONYMOUS, LEN));
        if (m == MAP_FAILED) { perror("mremap fixed"); return 2; }
        s = m;
        close(fd);
        unlink("/atoll/victim");
        int priv = p[0] == 'P' && is_block(p + BLK, 1);
        int bad = attack(s, 3 * BLK, priv);
        munmap(s, 3 * BLK);
        munmap(p, LEN);
        printf("released %d\n", fill() >= 4);
        return bad != 0;
    } else {
        close(fd);
        if (unlink("/atoll/victim")) { perror("unlink"); return 2; }
    }
    int priv = p[0] == 'P' && is_block(p + BLK, 1) && is_block(p + 3 * BLK, 3);
    if (!strcmp(mode, "truncate")) {
        /* Its own copy stays; pages it never stored to show the file's
         * zeros (their blocks zeroed in place and kept for the mapping). */
        static const char zero[BLK];
        priv = p[0] == 'P' && !memcmp(p + BLK, zero, BLK) && !memcmp(p + 3 * BLK, zero, BLK);
    }
    if (!strcmp(mode, "fork")) {
        pid_t pid = fork();
        if (pid == 0) {
            char x;
            close(go[1]);
            if (read(go[0], &x, 1) != 1) return 2;
            /* The parent has unmapped: the child's copy still holds. */
            priv = p[0] == 'P' && is_block(p + BLK, 1);
            return attack(s, LEN, priv) != 0;
        }
        close(go[0]);
        munmap(s, LEN);
        munmap(p, LEN);
        if (write(go[1], "g", 1) != 1) return 2;
        int st;
        waitpid(pid, &st, 0);
        return WIFEXITED(st) ? WEXITSTATUS(st) : 3;
    }
    if (!strcmp(mode, "partial")) {
        /* The middle goes: both ends still hold the file. */
        munmap(s + BLK, 2 * BLK);
        munmap(p + BLK, 2 * BLK);
        int made = fill();
        priv = p[0] == 'P' && is_block(p + 3 * BLK, 3);
        s[0] = 'X';
        s[3 * BLK] = 'X';
        int bad = check();
        printf("filled %d corrupt %d private %d\n", made > 0, bad, priv);
        munmap(s, BLK);
        munmap(p, BLK);
        printf("held %d\n", fill() == 0);
        munmap(s + 3 * BLK, BLK);
        munmap(p + 3 * BLK, BLK);
        printf("released %d\n", fill() >= 2);
        return bad != 0;
    }
    if (!strcmp(mode, "fixed")) {
        /* Anonymous memory placed over the mappings replaces them. */
        map(-1, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, LEN);
        mmap(s, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
        mmap(p, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
        printf("released %d\n", fill() >= 4);
        memset(s, 'X', LEN);
        int bad = check();
        printf("corrupt %d\n", bad);
        return bad != 0;
    }
    int bad = attack(s, LEN, priv);
    /* The last unmap gives the blocks back. */
    munmap(s, LEN);
    munmap(p, LEN);
    printf("released %d\n", fill() >= 4);
    return bad != 0;
}
