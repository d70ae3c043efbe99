/* A program's own alternate signal stack, and system calls issued with
 * the `syscall` instruction on a stack far smaller than a signal frame
 * (a Go goroutine's is a few KiB, and Go's runtime calls sigaltstack for
 * each thread and checks the answer). On Linux a system call costs the
 * program no stack, and sigaltstack reports what the thread set. Every
 * raw call here traps into atoll; the numbers are loaded from memory, so
 * the sites are never rewritten and each call traps. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <ucontext.h>
#include <unistd.h>

#define ALT_SIZE 65536
#define TINY_SIZE 1536

static volatile long nr_getppid = SYS_getppid;
static volatile long nr_sigaltstack = SYS_sigaltstack;
static volatile long nr_tgkill = SYS_tgkill;

static long raw2(long nr, long a, long b) {
    long r;
    __asm__ volatile("syscall" : "=a"(r) : "a"(nr), "D"(a), "S"(b) : "rcx", "r11", "memory");
    return r;
}

static long raw3(long nr, long a, long b, long c) {
    long r;
    __asm__ volatile("syscall"
                     : "=a"(r)
                     : "a"(nr), "D"(a), "S"(b), "d"(c)
                     : "rcx", "r11", "memory");
    return r;
}

/* Memory of `size` usable bytes above an inaccessible page. */
static char *guarded(size_t size) {
    char *m = mmap(NULL, size + 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED || mprotect(m, 4096, PROT_NONE) != 0) {
        perror("mmap");
        exit(2);
    }
    return m + 4096;
}

static const char *state(const stack_t *s, const char *own) {
    if (s->ss_flags & SS_DISABLE)
        return "disabled";
    if (s->ss_sp != own || s->ss_size != ALT_SIZE)
        return "another";
    return s->ss_flags == SS_ONSTACK ? "ours, on it" : s->ss_flags == 0 ? "ours" : "ours, odd flags";
}

/* --- system calls on a tiny stack (makecontext) --- */

static __thread ucontext_t tiny_back;
static __thread int tiny_ok;
static __thread long tiny_ppid;

static void tiny_main(void) {
    for (int i = 0; i < 3; i++)
        if (raw2(nr_getppid, 0, 0) == tiny_ppid)
            tiny_ok++;
}

/* Run tiny_main with TINY_SIZE bytes of stack right above an
 * inaccessible page: a signal frame written there faults. */
static int calls_on_a_tiny_stack(void) {
    static __thread char *tiny;
    if (!tiny)
        tiny = guarded(4096);
    tiny_ppid = getppid();
    ucontext_t ctx;
    getcontext(&ctx);
    ctx.uc_stack.ss_sp = tiny;
    ctx.uc_stack.ss_size = TINY_SIZE;
    ctx.uc_link = &tiny_back;
    makecontext(&ctx, tiny_main, 0);
    tiny_ok = 0;
    swapcontext(&tiny_back, &ctx);
    return tiny_ok;
}

/* libc functions whose `syscall` sites atoll rewrites (after their first
 * trap) into calls of its entry, which saves the extended state, on a
 * stack as small as a goroutine may have left. */
#define LIBC_TINY_SIZE 640

static void libc_tiny_main(void) {
    for (int i = 0; i < 50; i++) {
        if (getppid() == tiny_ppid)
            tiny_ok++;
        sched_yield();
    }
}

static int libc_calls_on_a_tiny_stack(void) {
    static char *tiny;
    if (!tiny)
        tiny = guarded(4096);
    tiny_ppid = getppid();
    sched_yield();
    ucontext_t ctx;
    getcontext(&ctx);
    ctx.uc_stack.ss_sp = tiny;
    ctx.uc_stack.ss_size = LIBC_TINY_SIZE;
    ctx.uc_link = &tiny_back;
    makecontext(&ctx, libc_tiny_main, 0);
    tiny_ok = 0;
    swapcontext(&tiny_back, &ctx);
    return tiny_ok;
}

/* --- a handler on the program's alternate stack --- */

static char *alt;
static volatile int h_ran, h_on_alt, h_uc_stack, h_calls, h_libc;
static volatile long h_flags, h_eperm;

static void on_usr1(int sig, siginfo_t *info, void *ucv) {
    char here;
    ucontext_t *uc = ucv;
    (void)sig;
    (void)info;
    h_ran++;
    h_on_alt = &here >= alt && &here < alt + ALT_SIZE;
    h_uc_stack = uc->uc_stack.ss_sp == alt && uc->uc_stack.ss_size == ALT_SIZE;
    stack_t now;
    memset(&now, 0, sizeof now);
    raw2(nr_sigaltstack, 0, (long)&now);
    h_flags = now.ss_sp == alt ? now.ss_flags : -1;
    stack_t off = {.ss_flags = SS_DISABLE};
    h_eperm = raw2(nr_sigaltstack, (long)&off, 0);
    h_calls = raw2(nr_getppid, 0, 0) == getppid();
    /* A libc call (atoll's wrapper, whose work runs on atoll's stack),
     * then the signal's own frame must still be intact for its return. */
    struct stat st;
    h_libc = stat("/", &st) == 0 && S_ISDIR(st.st_mode);
}

static void *thread_main(void *arg) {
    (void)arg;
    stack_t s;
    sigaltstack(NULL, &s);
    printf("thread: alternate stack %s; raw calls on a %d-byte stack: %d of 3\n",
           state(&s, alt), TINY_SIZE, calls_on_a_tiny_stack());
    return NULL;
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    stack_t s;
    sigaltstack(NULL, &s);
    printf("at start: %s\n", state(&s, NULL));
    printf("raw calls on a %d-byte stack: %d of 3\n", TINY_SIZE, calls_on_a_tiny_stack());
    printf("libc calls on a %d-byte stack: %d of 50\n", LIBC_TINY_SIZE,
           libc_calls_on_a_tiny_stack());

    alt = guarded(ALT_SIZE);
    stack_t ss = {.ss_sp = alt, .ss_size = ALT_SIZE};
    long r = raw2(nr_sigaltstack, (long)&ss, 0);
    memset(&s, 0, sizeof s);
    sigaltstack(NULL, &s);
    printf("set by a raw call (%ld), libc reports: %s\n", r, state(&s, alt));
    memset(&s, 0, sizeof s);
    raw2(nr_sigaltstack, 0, (long)&s);
    printf("a raw call reports: %s\n", state(&s, alt));
    stack_t bad = {.ss_sp = alt, .ss_size = 100};
    long small = raw2(nr_sigaltstack, (long)&bad, 0);
    bad.ss_size = ALT_SIZE;
    bad.ss_flags = 7;
    printf("too small: %ld; unknown flags: %ld\n", small, raw2(nr_sigaltstack, (long)&bad, 0));

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_usr1;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigaction(SIGUSR1, &sa, NULL);
    raw3(nr_tgkill, getpid(), gettid(), SIGUSR1);
    printf("SA_ONSTACK handler ran %d: on the program's stack %s, its ucontext shows it %s, "
           "sigaltstack inside says %s, a change inside %ld, raw call inside %s, libc call "
           "inside %s\n",
           h_ran, h_on_alt ? "yes" : "no", h_uc_stack ? "yes" : "no",
           h_flags == SS_ONSTACK ? "SS_ONSTACK" : "something else", h_eperm,
           h_calls ? "ok" : "failed", h_libc ? "ok" : "failed");
    memset(&s, 0, sizeof s);
    sigaltstack(NULL, &s);
    printf("after the handler: %s\n", state(&s, alt));
    printf("raw calls on a %d-byte stack with the program's stack set: %d of 3\n", TINY_SIZE,
           calls_on_a_tiny_stack());

    pthread_t t;
    if (pthread_create(&t, NULL, thread_main, NULL) != 0 || pthread_join(t, NULL) != 0)
        return 2;

    pid_t child = fork();
    if (child == 0) {
        memset(&s, 0, sizeof s);
        sigaltstack(NULL, &s);
        int ok = calls_on_a_tiny_stack();
        _exit(strcmp(state(&s, alt), "ours") == 0 ? 10 + ok : 1);
    }
    int status = 0;
    waitpid(child, &status, 0);
    printf("fork child: %s\n",
           WIFEXITED(status) ? (WEXITSTATUS(status) == 13 ? "inherited it, 3 of 3 raw calls"
                                                           : "wrong")
                             : "killed");
    return 0;
}
