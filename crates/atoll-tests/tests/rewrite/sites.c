/* System-call sites of the shape atoll rewrites (`mov $nr,%eax; syscall`,
 * each preceded by a nop so that no REX byte stands before it), driven
 * through their first trap and then many times more:
 *   count PATH   - getpid and pread of PATH, 1000 times each, at two sites
 *   regs         - vector registers, flags' neighbours and the red zone
 *                  survive a rewritten site
 *   threads PATH - four threads race through one pread site
 *   fork PATH    - a fork child runs the parent's rewritten sites; then
 *                  vfork + exec
 *   alarm        - a SIGALRM storm (its handler makes system calls through
 *                  a rewritten site) during reads of a pipe through one
 *   shared       - two paths share one `syscall`: one sets EAX just before
 *                  it (rewritten), the other jumps to it with another
 *                  number (must keep its own number)
 *   forkrace     - threads rewrite 64 fresh sites while the main thread
 *                  forks; each child runs all of them (a fork that lands
 *                  while another thread holds the rewrite lock)
 *   jit          - a site in anonymous read-write-execute memory (as a JIT
 *                  makes) is never rewritten: changing its number there
 *                  takes effect at once
 *   short PATH   - a `xor %eax,%eax; syscall` read site (glibc's `read`
 *                  shape) read 1000 times; another path jumps straight to
 *                  its `syscall` with getppid's number (must keep it)
 *   stdio PATH   - unbuffered `fgetc` from four threads: glibc's own
 *                  `read` (no PLT entry), on its multi-threaded path
 *   cross        - a getpid site whose `syscall` crosses a page boundary,
 *                  run after a site on the first page was rewritten (whose
 *                  `mprotect` split that page off as a mapping of its own)
 *   children     - six children forked one after another each run a
 *                  getppid site that the parent never runs
 *   dl LIB       - dlopen LIB and call its functions `a` and `b` (each a
 *                  site of its own) three times each
 *   execvp NAME ARGS - execvp(NAME, [NAME, ARGS]); on failure prints
 *                  the error
 *   execlp NAME ARGS - the same with execlp (up to 9 ARGS: more than
 *                  the registers hold)
 *   patch FILE   - in FILE (a copy of this probe), turn every getpid site
 *                  `nop; mov $39,%eax; syscall` into getppid (110) in
 *                  place, keeping its size; prints how many */
#include <dlfcn.h>
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

static long sys_getpid(void) {
    long r;
    asm volatile("nop\n\tmov $39, %%eax\n\tsyscall" : "=a"(r)::"rcx", "r11", "memory");
    return r;
}

static long sys_pread(long fd, void *b, long n, long off) {
    long r;
    register long r10 asm("r10") = off;
    asm volatile("nop\n\tmov $17, %%eax\n\tsyscall"
                 : "=a"(r)
                 : "D"(fd), "S"(b), "d"(n), "r"(r10)
                 : "rcx", "r11", "memory");
    return r;
}

static long sys_read(long fd, void *b, long n) {
    long r;
    asm volatile("nop\n\tmov $0, %%eax\n\tsyscall"
                 : "=a"(r)
                 : "D"(fd), "S"(b), "d"(n)
                 : "rcx", "r11", "memory");
    return r;
}

static int count(const char *path) {
    long same = 0, bytes = 0;
    int fd = open(path, O_RDONLY);
    char b[8];
    for (int i = 0; i < 1000; i++) same += sys_getpid() == getpid();
    for (int i = 0; i < 1000; i++) bytes += sys_pread(fd, b, 4, 0);
    printf("count getpid %ld pread %ld %.4s\n", same, bytes, b);
    return 0;
}

/* Sixteen XMM registers and eight words of the red zone, set before the
 * site and read after it; the site runs three times (trap, then direct). */
static int regs(void) {
    int bad = 0;
    for (int round = 0; round < 3; round++) {
        unsigned char in[256], out[256];
        unsigned long zone_in = 0x1122334455667788UL + round, zone_out[4];
        for (int i = 0; i < 256; i++) in[i] = (unsigned char)(i * 7 + round);
        memset(out, 0, sizeof out);
        long r;
        asm volatile(
            "movdqu 0(%[in]), %%xmm0\n\tmovdqu 16(%[in]), %%xmm1\n\t"
            "movdqu 32(%[in]), %%xmm2\n\tmovdqu 48(%[in]), %%xmm3\n\t"
            "movdqu 64(%[in]), %%xmm4\n\tmovdqu 80(%[in]), %%xmm5\n\t"
            "movdqu 96(%[in]), %%xmm6\n\tmovdqu 112(%[in]), %%xmm7\n\t"
            "movdqu 128(%[in]), %%xmm8\n\tmovdqu 144(%[in]), %%xmm9\n\t"
            "movdqu 160(%[in]), %%xmm10\n\tmovdqu 176(%[in]), %%xmm11\n\t"
            "movdqu 192(%[in]), %%xmm12\n\tmovdqu 208(%[in]), %%xmm13\n\t"
            "movdqu 224(%[in]), %%xmm14\n\tmovdqu 240(%[in]), %%xmm15\n\t"
            "mov %[z], -8(%%rsp)\n\tmov %[z], -64(%%rsp)\n\t"
            "mov %[z], -120(%%rsp)\n\tmov %[z], -128(%%rsp)\n\t"
            "nop\n\tmov $39, %%eax\n\tsyscall\n\t"
            "mov -8(%%rsp), %%rcx\n\tmov %%rcx, 0(%[zo])\n\t"
            "mov -64(%%rsp), %%rcx\n\tmov %%rcx, 8(%[zo])\n\t"
            "mov -120(%%rsp), %%rcx\n\tmov %%rcx, 16(%[zo])\n\t"
            "mov -128(%%rsp), %%rcx\n\tmov %%rcx, 24(%[zo])\n\t"
            "movdqu %%xmm0, 0(%[out])\n\tmovdqu %%xmm1, 16(%[out])\n\t"
            "movdqu %%xmm2, 32(%[out])\n\tmovdqu %%xmm3, 48(%[out])\n\t"
            "movdqu %%xmm4, 64(%[out])\n\tmovdqu %%xmm5, 80(%[out])\n\t"
            "movdqu %%xmm6, 96(%[out])\n\tmovdqu %%xmm7, 112(%[out])\n\t"
            "movdqu %%xmm8, 128(%[out])\n\tmovdqu %%xmm9, 144(%[out])\n\t"
            "movdqu %%xmm10, 160(%[out])\n\tmovdqu %%xmm11, 176(%[out])\n\t"
            "movdqu %%xmm12, 192(%[out])\n\tmovdqu %%xmm13, 208(%[out])\n\t"
            "movdqu %%xmm14, 224(%[out])\n\tmovdqu %%xmm15, 240(%[out])\n\t"
            : "=a"(r)
            : [in] "D"(in), [out] "S"(out), [z] "d"(zone_in), [zo] "b"(zone_out)
            : "rcx", "r11", "memory", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5",
              "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13",
              "xmm14", "xmm15");
        if (r != getpid()) bad++;
        if (memcmp(in, out, sizeof in) != 0) bad++;
        for (int i = 0; i < 4; i++)
            if (zone_out[i] != zone_in) bad++;
    }
    printf("regs %s\n", bad ? "damaged" : "ok");
    return 0;
}

static const char *race_path;
static long race_bad;

static void *racer(void *arg) {
    (void)arg;
    int fd = open(race_path, O_RDONLY);
    long bad = 0;
    for (int i = 0; i < 5000; i++) {
        char b[8] = {0};
        if (sys_pread(fd, b, 4, 0) != 4 || memcmp(b, "abcd", 4) != 0) bad++;
        if (sys_getpid() != getpid()) bad++;
    }
    close(fd);
    __atomic_add_fetch(&race_bad, bad, __ATOMIC_RELAXED);
    return NULL;
}

static int threads(const char *path) {
    pthread_t t[4];
    race_path = path;
    for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, racer, NULL);
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    printf("threads bad %ld\n", race_bad);
    return 0;
}

static int forks(const char *path) {
    int fd = open(path, O_RDONLY);
    char b[8] = {0};
    for (int i = 0; i < 10; i++) sys_pread(fd, b, 4, 0);
    fflush(stdout);
    pid_t c = fork();
    if (c == 0) {
        long ok = 0;
        for (int i = 0; i < 100; i++) ok += sys_pread(fd, b, 4, 0) == 4 && sys_getpid() == getpid();
        _exit(ok == 100 ? 7 : 1);
    }
    int st;
    waitpid(c, &st, 0);
    printf("fork child %d\n", WEXITSTATUS(st));
    fflush(stdout);
    pid_t v = vfork();
    if (v == 0) {
        execl("/bin/echo", "echo", "vfork exec ok", (char *)NULL);
        _exit(127);
    }
    waitpid(v, &st, 0);
    printf("vfork status %d, parent still reads %ld\n", WEXITSTATUS(st), sys_pread(fd, b, 4, 0));
    return 0;
}

static volatile long handled;

static void on_alarm(int sig) {
    (void)sig;
    if (sys_getpid() > 0) handled++;
}

static int alarm_storm(void) {
    int p[2];
    if (pipe(p) != 0) return 1;
    pid_t w = fork();
    if (w == 0) {
        close(p[0]);
        char chunk[4096];
        memset(chunk, 'x', sizeof chunk);
        for (int i = 0; i < 256; i++) {
            if (write(p[1], chunk, sizeof chunk) != sizeof chunk) _exit(1);
            usleep(200);
        }
        _exit(0);
    }
    close(p[1]);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm; /* no SA_RESTART: reads fail with EINTR */
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = {{0, 300}, {0, 300}};
    setitimer(ITIMER_REAL, &it, NULL);
    long total = 0, intr = 0;
    char b[1000];
    for (;;) {
        long n = sys_read(p[0], b, sizeof b);
        if (n == -EINTR) {
            intr++;
            continue;
        }
        if (n <= 0) break;
        total += n;
    }
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    int st;
    waitpid(w, &st, 0);
    printf("alarm bytes %ld writer %d handled %s\n", total, WEXITSTATUS(st),
           handled > 0 ? "yes" : "no");
    return 0;
}

static long shared_site(int other) {
    long r;
    asm volatile("test %%edi, %%edi\n\t"
                 "jz 2f\n\t"
                 "mov $110, %%eax\n\t" /* getppid, straight to the syscall */
                 "jmp 1f\n\t"
                 "2: nop\n\t"
                 "mov $39, %%eax\n\t" /* getpid: the rewritten site */
                 "1: syscall"
                 : "=a"(r)
                 : "D"(other)
                 : "rcx", "r11", "memory");
    return r;
}

static int shared(void) {
    long pids = 0, ppids = 0;
    for (int i = 0; i < 100; i++) {
        pids += shared_site(0) == getpid();
        ppids += shared_site(1) == getppid();
    }
    printf("shared getpid %ld getppid %ld\n", pids, ppids);
    return 0;
}

#define SITE(n)                                                              \
    static __attribute__((noinline)) long site##n(void) {                    \
        long r;                                                               \
        asm volatile("nop\n\tmov $39, %%eax\n\tsyscall" : "=a"(r)::"rcx", "r11", \
                     "memory");                                               \
        return r;                                                             \
    }
#define SITES8(n) SITE(n##0) SITE(n##1) SITE(n##2) SITE(n##3) SITE(n##4) SITE(n##5) SITE(n##6) SITE(n##7)
SITES8(1) SITES8(2) SITES8(3) SITES8(4) SITES8(5) SITES8(6) SITES8(7) SITES8(8)
#define REF8(n) site##n##0, site##n##1, site##n##2, site##n##3, site##n##4, site##n##5, site##n##6, site##n##7
static long (*const many[64])(void) = {REF8(1), REF8(2), REF8(3), REF8(4),
                                       REF8(5), REF8(6), REF8(7), REF8(8)};

static long race_bad_sites;

static void *site_runner(void *arg) {
    long first = (long)arg, bad = 0;
    for (int round = 0; round < 50; round++)
        for (int i = 0; i < 64; i++)
            if (many[(i + first * 16) % 64]() != getpid()) bad++;
    __atomic_add_fetch(&race_bad_sites, bad, __ATOMIC_RELAXED);
    return NULL;
}

static int forkrace(void) {
    pthread_t t[3];
    for (long i = 0; i < 3; i++) pthread_create(&t[i], NULL, site_runner, (void *)i);
    int children_ok = 0;
    for (int k = 0; k < 20; k++) {
        pid_t c = fork();
        if (c == 0) {
            long bad = 0;
            for (int i = 0; i < 64; i++)
                if (many[i]() != getpid()) bad++;
            _exit(bad == 0 ? 0 : 1);
        }
        int st;
        waitpid(c, &st, 0);
        if (WIFEXITED(st) && WEXITSTATUS(st) == 0) children_ok++;
    }
    for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
    printf("forkrace bad %ld children ok %d\n", race_bad_sites, children_ok);
    return 0;
}

static int jit(void) {
    unsigned char *code = mmap(NULL, 4096, PROT_READ | PROT_WRITE | PROT_EXEC,
                               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (code == MAP_FAILED) return 1;
    /* nop; mov $39,%eax; syscall; ret */
    unsigned char body[] = {0x90, 0xb8, 39, 0, 0, 0, 0x0f, 0x05, 0xc3};
    memcpy(code, body, sizeof body);
    long (*f)(void) = (long (*)(void))code;
    long pids = 0, ppids = 0;
    for (int i = 0; i < 100; i++) pids += f() == getpid();
    code[2] = 110; /* getppid */
    for (int i = 0; i < 100; i++) ppids += f() == getppid();
    printf("jit getpid %ld getppid %ld\n", pids, ppids);
    return 0;
}

/* read(fd, buf, n) set by a two-byte xor, with compiler-style padding
 * after its ret; short_getppid jumps straight to its syscall. */
long short_read(long fd, void *buf, long n);
long short_getppid(void);
__asm__(".text\n"
        ".p2align 4\n"
        "short_read:\n"
        "  nop\n"
        "  xor %eax,%eax\n"
        "short_read_syscall:\n"
        "  syscall\n"
        "  ret\n"
        ".p2align 4\n"
        "short_getppid:\n"
        "  mov $110,%eax\n"
        "  jmp short_read_syscall\n");

static int short_site(const char *path) {
    int fd = open(path, O_RDONLY);
    long bytes = 0, ppids = 0;
    char b[8] = {0};
    for (int i = 0; i < 1000; i++) {
        lseek(fd, 0, SEEK_SET);
        bytes += short_read(fd, b, 4);
    }
    for (int i = 0; i < 100; i++) ppids += short_getppid() == getppid();
    printf("short read %ld %.4s getppid %ld\n", bytes, b, ppids);
    return 0;
}

/* Page A starts with a getppid site; the getpid site's `mov` ends page A
 * and its `syscall` runs from A's last byte into page B. */
long page_a_getppid(void);
long cross_getpid(void);
__asm__(".text\n"
        ".p2align 12\n"
        "page_a_getppid:\n"
        "  nop\n"
        "  mov $110,%eax\n"
        "  syscall\n"
        "  ret\n"
        "  .skip 4096 - 9 - 7, 0xcc\n"
        "cross_getpid:\n"
        "  nop\n"
        "  mov $39,%eax\n"
        "  syscall\n"
        "  ret\n");

static int cross(void) {
    long ppids = 0, pids = 0;
    /* volatile: the compiler may assume a function's address aligned */
    volatile unsigned long at = (unsigned long)cross_getpid;
    if ((at + 7) % 4096 != 0) return 3;
    for (int i = 0; i < 10; i++) ppids += page_a_getppid() == getppid();
    for (int i = 0; i < 1000; i++) pids += cross_getpid() == getpid();
    printf("cross getppid %ld getpid %ld\n", ppids, pids);
    return 0;
}

static const char *stdio_path;
static void *stdio_reader(void *arg) {
    long *got = arg;
    FILE *f = fopen(stdio_path, "r");
    if (!f) return NULL;
    setvbuf(f, NULL, _IONBF, 0);
    for (int i = 0; i < 250; i++) {
        rewind(f);
        for (int c; (c = fgetc(f)) != EOF;) *got += c == 'a' || c == 'd';
    }
    fclose(f);
    return NULL;
}

static int stdio_threads(const char *path) {
    stdio_path = path;
    pthread_t t[4];
    long got[4] = {0};
    for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, stdio_reader, &got[i]);
    long sum = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        sum += got[i];
    }
    printf("stdio ends %ld\n", sum);
    return 0;
}

static long sys_getppid_in_child(void) {
    long r;
    asm volatile("nop\n\tmov $110, %%eax\n\tsyscall" : "=a"(r)::"rcx", "r11", "memory");
    return r;
}

static int children(void) {
    int ok = 0;
    for (int i = 0; i < 6; i++) {
        pid_t parent = getpid();
        pid_t c = fork();
        if (c == 0) _exit(sys_getppid_in_child() == parent ? 0 : 1);
        int st;
        if (waitpid(c, &st, 0) == c && WIFEXITED(st) && WEXITSTATUS(st) == 0) ok++;
    }
    printf("children ok %d\n", ok);
    return 0;
}

static int dl(const char *lib) {
    void *h = dlopen(lib, RTLD_NOW);
    if (!h) return 1;
    long (*a)(void) = (long (*)(void))dlsym(h, "a");
    long (*b)(void) = (long (*)(void))dlsym(h, "b");
    if (!a || !b) return 1;
    int ok = 0;
    for (int i = 0; i < 3; i++) ok += a() == getppid() && b() == getpgrp();
    printf("dl ok %d\n", ok);
    return 0;
}

static int patch(const char *path) {
    static const unsigned char site[] = {0x90, 0xb8, 39, 0, 0, 0, 0x0f, 0x05};
    static unsigned char b[1 << 20];
    int fd = open(path, O_RDWR);
    if (fd < 0) return 1;
    ssize_t n = pread(fd, b, sizeof b, 0);
    int patched = 0;
    for (ssize_t i = 0; i + (ssize_t)sizeof site <= n; i++) {
        if (memcmp(b + i, site, sizeof site)) continue;
        unsigned char nr = 110;
        if (pwrite(fd, &nr, 1, i + 2) != 1) return 1;
        patched++;
    }
    close(fd);
    printf("patched %d\n", patched > 0);
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2) return 2;
    if (!strcmp(argv[1], "count")) return count(argv[2]);
    if (!strcmp(argv[1], "regs")) return regs();
    if (!strcmp(argv[1], "threads")) return threads(argv[2]);
    if (!strcmp(argv[1], "fork")) return forks(argv[2]);
    if (!strcmp(argv[1], "alarm")) return alarm_storm();
    if (!strcmp(argv[1], "jit")) return jit();
    if (!strcmp(argv[1], "shared")) return shared();
    if (!strcmp(argv[1], "forkrace")) return forkrace();
    if (!strcmp(argv[1], "short")) return short_site(argv[2]);
    if (!strcmp(argv[1], "stdio")) return stdio_threads(argv[2]);
    if (!strcmp(argv[1], "cross")) return cross();
    if (!strcmp(argv[1], "patch")) return patch(argv[2]);
    if (!strcmp(argv[1], "children")) return children();
    if (!strcmp(argv[1], "dl")) return dl(argv[2]);
    if (!strcmp(argv[1], "execvp")) {
        execvp(argv[2], argv + 2);
        printf("execvp %s: %s\n", argv[2], strerror(errno));
        return 0;
    }
    if (!strcmp(argv[1], "execlp")) {
#define A(i) (i < argc ? argv[i] : (char *)0)
        execlp(argv[2], argv[2], A(3), A(4), A(5), A(6), A(7), A(8), A(9), A(10), A(11),
               (char *)0);
#undef A
        printf("execlp %s: %s\n", argv[2], strerror(errno));
        return 0;
    }
    return 2;
}
