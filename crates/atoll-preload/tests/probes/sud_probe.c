/* Exercises what Syscall User Dispatch must survive: raw syscalls, fork,
 * clone with a new stack, threads created by glibc internally, posix_spawn,
 * system, popen, vfork, a program that installs its own SIGSYS handler,
 * blocks every signal, and runs signal handlers that make system calls.
 * Prints the same stdout with and without libatoll; trap counts go to
 * stderr when the library is present. Usage: sud_probe DIR */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;
static const char *dir;

#define CHECK(c) do { if (!(c)) { printf("FAIL %s:%d %s errno=%d\n", __FILE__, __LINE__, #c, errno); fflush(stdout); exit(1); } } while (0)

/* Count entries of DIR with raw getdents64 on a raw openat. */
static int raw_count(void) {
    int fd = syscall(SYS_openat, AT_FDCWD, dir, O_RDONLY | O_DIRECTORY);
    CHECK(fd >= 0);
    char buf[4096];
    int n = 0;
    for (;;) {
        long r = syscall(SYS_getdents64, fd, buf, sizeof buf);
        CHECK(r >= 0);
        if (r == 0) break;
        for (long off = 0; off < r;) {
            unsigned short reclen = *(unsigned short *)(buf + off + 16);
            n++;
            off += reclen;
        }
    }
    syscall(SYS_close, fd);
    return n;
}

/* Read DIR/a.txt through inline raw syscalls. */
static void raw_read_file(char *out, size_t cap) {
    char path[4096];
    snprintf(path, sizeof path, "%s/a.txt", dir);
    int fd = syscall(SYS_openat, AT_FDCWD, path, O_RDONLY);
    CHECK(fd >= 0);
    long n = syscall(SYS_read, fd, out, cap - 1);
    CHECK(n >= 0);
    out[n] = 0;
    syscall(SYS_close, fd);
}

static void *worker(void *arg) {
    long sum = 0;
    for (int i = 0; i < 50; i++) sum += raw_count();
    return (void *)sum;
}

static int clone_child_fn(void *arg) {
    int n = raw_count();
    return n == *(int *)arg ? 11 : 12;
}

static volatile sig_atomic_t got_usr1;
static void on_usr1(int sig) {
    char msg[] = "";
    syscall(SYS_write, 1, msg, 0); /* a trapped syscall inside a handler */
    got_usr1 = 1;
}
static volatile sig_atomic_t got_sys;
static void my_sigsys(int sig) { (void)sig; got_sys = 1; }

int main(int argc, char **argv) {
    CHECK(argc == 2);
    dir = argv[1];
    setvbuf(stdout, NULL, _IONBF, 0);
    int entries = raw_count();
    printf("entries %d\n", entries);
    char text[256];
    raw_read_file(text, sizeof text);
    printf("text %s", text);

    /* readdir (glibc internals: openat + getdents64 via internal aliases) */
    DIR *d = opendir(dir);
    CHECK(d);
    int n = 0;
    while (readdir(d)) n++;
    closedir(d);
    printf("readdir %d\n", n);

    /* fopen / fgets (internal open/read) */
    char path[4096];
    snprintf(path, sizeof path, "%s/a.txt", dir);
    FILE *f = fopen(path, "r");
    CHECK(f);
    CHECK(fgets(text, sizeof text, f));
    fclose(f);
    printf("fgets %s", text);

    /* fork: the child re-arms SUD and keeps working */
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) _exit(raw_count() == entries ? 3 : 4);
    int st;
    CHECK(waitpid(pid, &st, 0) == pid);
    printf("fork child exit %d\n", WEXITSTATUS(st));

    /* raw fork syscall (trapped, not through our fork wrapper) */
    pid = syscall(SYS_fork);
    CHECK(pid >= 0);
    if (pid == 0) syscall(SYS_exit_group, raw_count() == entries ? 5 : 6);
    CHECK(waitpid(pid, &st, 0) == pid);
    printf("raw fork child exit %d\n", WEXITSTATUS(st));

    /* vfork + exec */
    pid = vfork();
    if (pid == 0) {
        char *av[] = {"/bin/echo", "vfork-exec", NULL};
        execve(av[0], av, environ);
        _exit(127);
    }
    CHECK(waitpid(pid, &st, 0) == pid);
    printf("vfork status %d\n", WEXITSTATUS(st));

    /* clone with a new stack, fork-like (clone trampoline, process kind) */
    size_t stsz = 256 * 1024;
    char *stack = mmap(NULL, stsz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(stack != MAP_FAILED);
    pid = clone(clone_child_fn, stack + stsz, SIGCHLD, &entries);
    CHECK(pid > 0);
    CHECK(waitpid(pid, &st, 0) == pid);
    printf("clone child exit %d\n", WEXITSTATUS(st));

    /* threads through our pthread_create wrapper */
    pthread_t th[4];
    for (int i = 0; i < 4; i++) CHECK(pthread_create(&th[i], NULL, worker, NULL) == 0);
    long total = 0;
    for (int i = 0; i < 4; i++) { void *r; pthread_join(th[i], &r); total += (long)r; }
    printf("threads %ld\n", total / (4 * 50));

    /* threads created by libc's own pthread_create (trapped clone3) */
    void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    CHECK(libc);
    int (*real_create)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *) =
        dlsym(libc, "pthread_create");
    CHECK(real_create);
    for (int i = 0; i < 2; i++) CHECK(real_create(&th[i], NULL, worker, NULL) == 0);
    total = 0;
    for (int i = 0; i < 2; i++) { void *r; pthread_join(th[i], &r); total += (long)r; }
    printf("libc threads %ld\n", total / (2 * 50));

    /* posix_spawn, system, popen (vfork-style clones with a new stack) */
    char *av[] = {"/bin/echo", "spawned", NULL};
    CHECK(posix_spawn(&pid, "/bin/echo", NULL, NULL, av, environ) == 0);
    CHECK(waitpid(pid, &st, 0) == pid);
    printf("spawn status %d\n", WEXITSTATUS(st));
    printf("system %d\n", WEXITSTATUS(system("echo from-system")));
    FILE *p = popen("echo from-popen", "r");
    CHECK(p);
    CHECK(fgets(text, sizeof text, p));
    printf("popen %s", text);
    pclose(p);

    /* the program installs its own SIGSYS handler: it reads back as set */
    struct sigaction sa = {0}, old = {0};
    sa.sa_handler = my_sigsys;
    CHECK(sigaction(SIGSYS, &sa, NULL) == 0);
    CHECK(sigaction(SIGSYS, NULL, &old) == 0);
    printf("sigsys handler kept %d\n", old.sa_handler == my_sigsys);
    /* a SIGSYS that SUD did not raise reaches the program's handler */
    raise(SIGSYS);
    printf("sigsys raised handled %d\n", got_sys);

    /* a handler that makes system calls */
    sa.sa_handler = on_usr1;
    sigfillset(&sa.sa_mask);
    CHECK(sigaction(SIGUSR1, &sa, NULL) == 0);
    raise(SIGUSR1);
    printf("usr1 handled %d\n", got_usr1);

    /* block every signal, through libc and through a raw syscall */
    sigset_t all;
    sigfillset(&all);
    CHECK(sigprocmask(SIG_BLOCK, &all, NULL) == 0);
    CHECK(syscall(SYS_rt_sigprocmask, SIG_BLOCK, &all, NULL, 8) == 0);
    printf("blocked, entries %d\n", raw_count());
    sigemptyset(&all);
    CHECK(sigprocmask(SIG_SETMASK, &all, NULL) == 0);

    /* a raw rt_sigprocmask sets the mask the program keeps (a trapped call
       must not be undone when the trap returns), and a raw execve passes
       that mask on to the new image, as the kernel does */
    sigset_t one, cur;
    sigemptyset(&one);
    sigaddset(&one, SIGUSR2);
    CHECK(syscall(SYS_rt_sigprocmask, SIG_SETMASK, &one, NULL, 8) == 0);
    CHECK(sigprocmask(SIG_BLOCK, NULL, &cur) == 0);
    printf("raw mask usr2 %d usr1 %d\n", sigismember(&cur, SIGUSR2), sigismember(&cur, SIGUSR1));
    sigemptyset(&cur);
    CHECK(syscall(SYS_rt_sigprocmask, SIG_BLOCK, NULL, &cur, 8) == 0);
    printf("raw query usr2 %d\n", sigismember(&cur, SIGUSR2));
    errno = 0;
    printf("raw bad set efault %d\n",
           syscall(SYS_rt_sigprocmask, SIG_BLOCK, (void *)8, NULL, 8) == -1 && errno == EFAULT);
    fflush(stdout);
    pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        char *gv[] = {"/bin/grep", "SigBlk", "/proc/self/status", NULL};
        syscall(SYS_execve, gv[0], gv, environ);
        _exit(127);
    }
    CHECK(waitpid(pid, &st, 0) == pid);
    CHECK(sigprocmask(SIG_SETMASK, &all, NULL) == 0);

    /* a raw sigaltstack stays set after the trap returns */
    stack_t alt = {.ss_sp = malloc(1 << 16), .ss_size = 1 << 16, .ss_flags = 0}, got;
    CHECK(alt.ss_sp);
    CHECK(syscall(SYS_sigaltstack, &alt, NULL) == 0);
    CHECK(sigaltstack(NULL, &got) == 0);
    printf("altstack kept %d\n", got.ss_sp == alt.ss_sp && got.ss_size == alt.ss_size);

    /* trap counts, when the library is loaded */
    size_t (*counts)(uint64_t *, size_t) = dlsym(RTLD_DEFAULT, "atoll_trap_counts");
    if (counts) {
        uint64_t c[512] = {0};
        counts(c, 512);
        fprintf(stderr, "traps openat=%llu getdents64=%llu clone=%llu clone3=%llu\n",
                (unsigned long long)c[SYS_openat], (unsigned long long)c[SYS_getdents64],
                (unsigned long long)c[SYS_clone], (unsigned long long)c[SYS_clone3]);
    }
    printf("done\n");
    return 0;
}
