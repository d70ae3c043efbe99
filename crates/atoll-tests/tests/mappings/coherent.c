/* A mapping follows its file while another process changes the file:
 * truncate down and up, hole punch, writes into holes and past the end,
 * as Linux's page cache shows one page per offset to every mapping.
 *
 *   coherent DIR SCENARIO   run one scenario on DIR/f, print what the
 *                           mapping and the file show (compared between
 *                           a tmpfs directory and atoll)
 *   coherent act FILE OP …  the other process (exec'd, so it maps nothing):
 *       trunc SIZE | punch OFF LEN | write OFF LEN CHAR | read OFF | stat
 *       (size, st_blocks, first hole and data) | size
 *
 * Scenarios: truncate, punch, hole, past-eof, past-eof-access, private,
 * mremap, fork; `hold` maps a file cut to nothing and waits for DIR/go;
 * `leak [SCENARIO]` (atoll only) runs them all (or one) and checks that
 * every
 * block comes back, and that a shared mapping of a huge sparse range is
 * refused whole.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#define PG 4096

static const char *self;
static char file[4096];

static void die(const char *what) {
    printf("%s: %s\n", what, strerror(errno));
    exit(2);
}

/* Run `coherent act FILE op a b c` as another process and wait for it. */
static void act(const char *op, long a, long b, int c) {
    char as[32], bs[32], cs[8];
    snprintf(as, sizeof as, "%ld", a);
    snprintf(bs, sizeof bs, "%ld", b);
    snprintf(cs, sizeof cs, "%c", c ? c : '-');
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) die("fork");
    if (pid == 0) {
        execl(self, self, "act", file, op, as, bs, cs, (char *)0);
        _exit(127);
    }
    int st;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st)) {
        printf("act %s failed\n", op);
        exit(2);
    }
}

static int other(char **argv) {
    int fd = open(argv[2], O_RDWR);
    if (fd < 0) die("act open");
    const char *op = argv[3];
    long a = atol(argv[4]), b = atol(argv[5]);
    if (!strcmp(op, "trunc")) {
        if (ftruncate(fd, a)) die("ftruncate");
    } else if (!strcmp(op, "punch")) {
        if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, a, b)) die("punch");
    } else if (!strcmp(op, "write")) {
        char *d = malloc(b);
        memset(d, argv[6][0], b);
        if (pwrite(fd, d, b, a) != b) die("pwrite");
        free(d);
    } else if (!strcmp(op, "read")) {
        unsigned char x = 0;
        ssize_t n = pread(fd, &x, 1, a);
        printf("  file[%ld] %s%02x\n", a, n == 1 ? "" : "eof ", x);
    } else if (!strcmp(op, "size")) {
        printf("  size %ld\n", (long)lseek(fd, 0, SEEK_END));
    } else if (!strcmp(op, "stat")) {
        struct stat s;
        if (fstat(fd, &s)) die("fstat");
        off_t hole = lseek(fd, 0, SEEK_HOLE);
        off_t data = lseek(fd, 0, SEEK_DATA);
        printf("  size %ld blocks %ld first hole %ld first data %ld\n", (long)s.st_size,
               (long)s.st_blocks, (long)hole, data < 0 ? -1L : (long)data);
    }
    return 0;
}

/* A fresh DIR/f of `size` bytes of `fill` (0: a hole of that size). */
static int make(long size, int fill) {
    int fd = open(file, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) die("open");
    if (fill) {
        char *d = malloc(size);
        memset(d, fill, size);
        if (write(fd, d, size) != size) die("write");
        free(d);
    } else if (ftruncate(fd, size)) {
        die("ftruncate");
    }
    return fd;
}

static char *map(int fd, long len, int prot, int flags) {
    char *p = mmap(0, len, prot, flags, fd, 0);
    if (p == MAP_FAILED) die("mmap");
    return p;
}

static void show(const char *what, const char *p, long off) {
    printf("  %s[%ld] %02x\n", what, off, (unsigned char)p[off]);
}

static volatile unsigned char sink;

/* Touch every page (faults them in, as a program reading would). */
static void touch(const char *p, long len) {
    for (long o = 0; o < len; o += PG) sink = p[o];
}

static sigjmp_buf jump;
static void on_sigbus(int sig) {
    (void)sig;
    siglongjmp(jump, 1);
}

/* What a load at p[off] gives: "sigbus", "zero" or "old" (not zero). */
static const char *guarded_load(const char *p, long off) {
    signal(SIGBUS, on_sigbus);
    if (sigsetjmp(jump, 1)) return "sigbus";
    unsigned char x = p[off];
    return x ? "old" : "zero";
}

static const char *guarded_store(char *p, long off, char v) {
    signal(SIGBUS, on_sigbus);
    if (sigsetjmp(jump, 1)) return "sigbus";
    p[off] = v;
    return "done";
}

static void scenario(const char *s) {
    printf("%s\n", s);
    int rw = PROT_READ | PROT_WRITE;
    if (!strcmp(s, "truncate")) {
        /* Cut down and regrown by another process: the mapping shows the
         * file's new (zero) page, and a store through it is file data. */
        int fd = make(2 * PG, 'A');
        char *m = map(fd, 2 * PG, rw, MAP_SHARED);
        touch(m, 2 * PG);
        act("trunc", PG, 0, 0);
        act("trunc", 2 * PG, 0, 0);
        show("map", m, PG - 1);
        show("map", m, PG);
        m[PG] = 'Z';
        act("read", PG, 0, 0);
        act("write", PG + 1, 1, 'Y');
        show("map", m, PG + 1);
        munmap(m, 2 * PG);
        act("stat", 0, 0, 0);
        close(fd);
    } else if (!strcmp(s, "punch")) {
        int fd = make(3 * PG, 'B');
        char *m = map(fd, 3 * PG, rw, MAP_SHARED);
        touch(m, 3 * PG);
        act("punch", PG, PG, 0);
        act("stat", 0, 0, 0);
        show("map", m, PG);
        show("map", m, 2 * PG);
        act("write", PG, 100, 'C');
        show("map", m, PG);
        show("map", m, PG + 100);
        act("stat", 0, 0, 0);
        munmap(m, 3 * PG);
        act("stat", 0, 0, 0);
        close(fd);
    } else if (!strcmp(s, "hole")) {
        /* A read-only mapping of a hole shows what a write puts there. */
        int fd = make(2 * PG, 0);
        char *m = map(fd, 2 * PG, PROT_READ, MAP_SHARED);
        act("write", PG, PG, 'C');
        show("map", m, 0);
        show("map", m, PG);
        show("map", m, 2 * PG - 1);
        munmap(m, 2 * PG);
        /* Not st_blocks: Linux counts the page the load above faulted in
         * (docs/COMPATIBILITY.md). */
        act("size", 0, 0, 0);
        act("read", 0, 0, 0);
        close(fd);
    } else if (!strcmp(s, "past-eof")) {
        /* Pages past the end at mmap time show the file once it grows. */
        int fd = make(PG, 'D');
        char *m = map(fd, 3 * PG, rw, MAP_SHARED);
        touch(m, PG);
        act("write", PG, PG + 10, 'E');
        show("map", m, PG);
        show("map", m, 2 * PG + 9);
        show("map", m, 2 * PG + 10);
        m[PG + 4] = 'F';
        act("read", PG + 4, 0, 0);
        munmap(m, 3 * PG);
        act("stat", 0, 0, 0);
        close(fd);
    } else if (!strcmp(s, "past-eof-access")) {
        /* After a shrinking truncate: Linux raises SIGBUS past the end;
         * atoll shows zeros. Either way the old bytes are gone and a
         * store there never becomes file data. */
        int fd = make(2 * PG, 'A');
        char *m = map(fd, 2 * PG, rw, MAP_SHARED);
        touch(m, 2 * PG);
        act("trunc", PG, 0, 0);
        printf("  load past end: %s\n", guarded_load(m, PG + 5));
        printf("  store past end: %s\n", guarded_store(m, PG + 6, 'X'));
        act("trunc", 2 * PG, 0, 0);
        act("read", PG + 6, 0, 0);
        show("map", m, PG + 6);
        munmap(m, 2 * PG);
        act("size", 0, 0, 0);
        close(fd);
    } else if (!strcmp(s, "private")) {
        /* Copy-on-write: a private mapping sees the file's later writes
         * in a page until its own store to that page. */
        int fd = make(2 * PG, 'P');
        char *m = map(fd, 2 * PG, rw, MAP_PRIVATE);
        touch(m, 2 * PG);
        act("write", 0, 1, 'Q');
        show("map", m, 0);
        m[1] = 'S';
        act("write", 0, 1, 'R');
        show("map", m, 0);
        act("read", 1, 0, 0);
        /* Cut and regrown: the page it never stored to shows zeros. (Linux
         * also drops the private copy; atoll keeps it, see
         * docs/COMPATIBILITY.md.) */
        act("trunc", 0, 0, 0);
        act("trunc", 2 * PG, 0, 0);
        show("map", m, PG);
        munmap(m, 2 * PG);
        close(fd);
    } else if (!strcmp(s, "mremap")) {
        /* Grown by mremap over a hole: the growth shows later writes. */
        int fd = make(2 * PG, 0);
        char *m = map(fd, PG, rw, MAP_SHARED);
        m[0] = 'M';
        char *g = mremap(m, PG, 2 * PG, MREMAP_MAYMOVE);
        if (g == MAP_FAILED) die("mremap");
        act("write", PG, 10, 'N');
        show("map", g, 0);
        show("map", g, PG);
        show("map", g, PG + 10);
        munmap(g, 2 * PG);
        act("stat", 0, 0, 0);
        close(fd);
    } else if (!strcmp(s, "fork")) {
        /* A forked child keeps the mapping its parent dropped and still
         * follows the file. */
        int fd = make(2 * PG, 'A');
        char *m = map(fd, 2 * PG, rw, MAP_SHARED);
        touch(m, 2 * PG);
        int go[2];
        if (pipe(go)) die("pipe");
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            char c;
            close(go[1]);
            if (read(go[0], &c, 1) != 1) _exit(2);
            show("child map", m, 0);
            show("child map", m, PG);
            fflush(stdout);
            _exit(0);
        }
        close(go[0]);
        munmap(m, 2 * PG);
        act("trunc", 0, 0, 0);
        act("trunc", 2 * PG, 0, 0);
        act("write", PG, 1, 'G');
        if (write(go[1], "x", 1) != 1) die("write pipe");
        close(go[1]);
        int st;
        waitpid(pid, &st, 0);
        act("size", 0, 0, 0);
        close(fd);
    } else {
        printf("unknown scenario\n");
        exit(2);
    }
    unlink(file);
}

static const char *all[] = {"truncate", "punch",  "hole",   "past-eof", "past-eof-access",
                            "private",  "mremap", "fork"};

static unsigned long free_blocks(const char *dir) {
    struct statvfs v;
    if (statvfs(dir, &v)) die("statvfs");
    return v.f_bfree;
}

/* atoll only: every scenario gives back every block (the servers learn
 * of exited processes a moment later, hence the bounded wait), and a
 * shared mapping of a sparse range larger than the cache is refused. */
static int leak(const char *dir, const char *only) {
    unsigned long before = free_blocks(dir);
    int out = dup(1);
    int null = open("/dev/null", O_WRONLY);
    fflush(stdout);
    dup2(null, 1);
    for (unsigned i = 0; i < sizeof all / sizeof *all; i++)
        if (!only || !strcmp(only, all[i])) scenario(all[i]);
    fflush(stdout);
    dup2(out, 1);
    int fd = make(1L << 40, 0);
    void *p = mmap(0, 1L << 40, PROT_READ, MAP_SHARED, fd, 0);
    printf("huge sparse shared mapping: %s\n", p == MAP_FAILED ? strerror(errno) : "mapped");
    if (p != MAP_FAILED) munmap(p, 1L << 40);
    close(fd);
    unlink(file);
    unsigned long after = free_blocks(dir);
    for (int i = 0; i < 100 && after != before; i++) {
        usleep(50000);
        after = free_blocks(dir);
    }
    printf("blocks back: %s\n", after == before ? "all" : "no");
    if (after != before) printf("  before %lu after %lu\n", before, after);
    return 0;
}

/* Map 4 pages of DIR/f, cut the file to nothing (the blocks are retained
 * for the mapping), create DIR/ready, and exit once DIR/go appears (or the
 * mount is gone). */
static int hold(const char *dir) {
    char ready[4200], go[4200];
    snprintf(ready, sizeof ready, "%s/ready", dir);
    snprintf(go, sizeof go, "%s/go", dir);
    int fd = make(4 * PG, 'H');
    char *m = map(fd, 4 * PG, PROT_READ, MAP_SHARED);
    touch(m, 4 * PG);
    if (ftruncate(fd, 0)) die("ftruncate");
    close(open(ready, O_WRONLY | O_CREAT, 0644));
    /* Bounded (a minute), so that a failed test leaves nothing behind. */
    for (int i = 0; i < 6000 && access(go, F_OK) && errno == ENOENT; i++) usleep(10000);
    unlink(file);
    return 0;
}

int main(int argc, char **argv) {
    self = argv[0];
    if (argc >= 7 && !strcmp(argv[1], "act")) return other(argv);
    if (argc == 3 && !strcmp(argv[2], "hold")) {
        snprintf(file, sizeof file, "%s/f", argv[1]);
        return hold(argv[1]);
    }
    if (argc != 3 && !(argc == 4 && !strcmp(argv[2], "leak"))) {
        fprintf(stderr, "usage: coherent DIR SCENARIO|all|leak [SCENARIO]\n");
        return 2;
    }
    snprintf(file, sizeof file, "%s/f", argv[1]);
    setvbuf(stdout, 0, _IOLBF, 0);
    if (!strcmp(argv[2], "leak")) return leak(argv[1], argc == 4 ? argv[3] : 0);
    if (!strcmp(argv[2], "all")) {
        for (unsigned i = 0; i < sizeof all / sizeof *all; i++) scenario(all[i]);
        return 0;
    }
    scenario(argv[2]);
    return 0;
}
