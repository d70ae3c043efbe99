/* dnotify (fcntl F_NOTIFY) on the directory argv[2]: what a process
 * receives for changes it and its children make, printed as text that
 * must read the same on tmpfs and in the mount.
 *
 *   probe steps DIR   registrations, masks, one-shot, multishot, signals
 *   probe exec DIR    a registration kept across execve
 *   probe wait DIR    DN_CREATE on DIR, then pause() until SIGIO
 *   probe timeN DIR   N registrations as stress-ng makes them, timed
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char base[4096];
static int w = -1, fence = -1, fences;

static const char *path(const char *name)
{
    static char p[2][4200];
    static int k;
    k ^= 1;
    snprintf(p[k], sizeof p[k], "%s/%s", base, name);
    return p[k];
}

static void make(const char *name)
{
    int fd = open(path(name), O_CREAT | O_EXCL | O_WRONLY, 0644);
    if (fd < 0) {
        printf("create %s: %s\n", name, strerror(errno));
        return;
    }
    close(fd);
}

static const char *fdname(int fd)
{
    static char b[32];
    if (fd == w)
        return "w";
    snprintf(b, sizeof b, "%d", fd);
    return b;
}

/* Make an entry in the fence directory, whose multishot registration
 * signals too, then print every signal queued before the fence's. */
static void drain(const char *label)
{
    char name[32];
    int seen = 0;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGRTMIN + 1);
    sigaddset(&set, SIGIO);
    snprintf(name, sizeof name, "fence/%d", ++fences);
    make(name);
    for (;;) {
        siginfo_t si;
        int s = sigwaitinfo(&set, &si);
        if (s < 0) {
            printf("%s: sigwaitinfo: %s\n", label, strerror(errno));
            exit(1);
        }
        if (s == SIGRTMIN + 1 && si.si_fd == fence)
            break;
        printf("%s: %s fd=%s code=%d band=%#lx\n", label,
               s == SIGIO ? "SIGIO" : s == SIGRTMIN + 1 ? "RT1" : "other",
               s == SIGIO && si.si_code == SI_KERNEL ? "-" : fdname(si.si_fd),
               si.si_code, s == SIGIO && si.si_code == SI_KERNEL ? 0 : (long)si.si_band);
        seen++;
    }
    if (!seen)
        printf("%s: none\n", label);
}

static int notify(int fd, unsigned long mask)
{
    int r = fcntl(fd, F_NOTIFY, mask);
    if (r < 0)
        printf("F_NOTIFY %#lx: %s\n", mask, strerror(errno));
    return r;
}

static void steps(void)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGRTMIN + 1);
    sigaddset(&set, SIGIO);
    sigprocmask(SIG_BLOCK, &set, NULL);
    mkdir(path("w"), 0755);
    mkdir(path("fence"), 0755);
    mkdir(path("out"), 0755);
    make("w/old");

    /* Not a directory; a mask of nothing on one; an O_PATH descriptor. */
    int f = open(path("w/old"), O_RDONLY);
    int r = fcntl(f, F_NOTIFY, DN_CREATE);
    printf("file: %d %s\n", r, strerror(errno));
    printf("file, no events: %d\n", fcntl(f, F_NOTIFY, 0));
    close(f);
    int p = open(path("w"), O_PATH | O_DIRECTORY);
    r = fcntl(p, F_NOTIFY, DN_CREATE);
    printf("O_PATH: %d %s\n", r, strerror(errno));
    close(p);

    fence = open(path("fence"), O_RDONLY | O_DIRECTORY);
    fcntl(fence, F_SETSIG, SIGRTMIN + 1);
    notify(fence, DN_CREATE | DN_MULTISHOT);

    /* One-shot, F_SETSIG before F_NOTIFY: the first create only. */
    w = open(path("w"), O_RDONLY | O_DIRECTORY);
    fcntl(w, F_SETSIG, SIGRTMIN + 1);
    notify(w, DN_CREATE);
    printf("owner is self: %d, sig %s\n", fcntl(w, F_GETOWN) == getpid(),
           fcntl(w, F_GETSIG) == SIGRTMIN + 1 ? "RT1" : "other");
    make("w/a");
    drain("oneshot create a");
    make("w/b");
    drain("oneshot create b");

    /* A mask without the event: nothing; then with it. */
    notify(w, DN_DELETE | DN_MULTISHOT);
    make("w/c");
    drain("delete-only create c");
    unlink(path("w/c"));
    drain("delete-only unlink c");

    /* Every event, multishot. */
    notify(w, DN_ACCESS | DN_MODIFY | DN_CREATE | DN_DELETE | DN_RENAME | DN_ATTRIB
                  | DN_MULTISHOT);
    int a = open(path("w/a"), O_RDWR);
    drain("open a");
    write(a, "hello", 5);
    drain("write a");
    char buf[8];
    pread(a, buf, sizeof buf, 0);
    drain("read a");
    pread(a, buf, sizeof buf, 100);
    drain("read a at its end");
    close(a);
    drain("close a");
    chmod(path("w/a"), 0600);
    drain("chmod a");
    rename(path("w/a"), path("w/a2"));
    drain("rename a a2");
    rename(path("w/a2"), path("out/a2"));
    drain("move a2 out");
    rename(path("out/a2"), path("w/a3"));
    drain("move a2 in as a3");
    unlink(path("w/b"));
    drain("unlink b");
    mkdir(path("w/sub"), 0755);
    drain("mkdir sub");
    make("w/sub/deep");
    drain("create sub/deep");
    chmod(path("w"), 0700);
    drain("chmod the directory");

    /* A rename over an existing name; a name moved between two
     * registered directories (the first's events come first). */
    make("w/over");
    drain("create over");
    rename(path("w/a3"), path("w/over"));
    drain("rename a3 over over");
    mkdir(path("w2"), 0755);
    int o = open(path("w2"), O_RDONLY | O_DIRECTORY);
    fcntl(o, F_SETSIG, SIGRTMIN + 1);
    notify(o, DN_CREATE | DN_DELETE | DN_RENAME | DN_MULTISHOT);
    rename(path("w/over"), path("w2/moved"));
    drain("move over to w2");
    rename(path("w2/moved"), path("w/back"));
    drain("move it back");
    close(o);

    /* A child's changes signal the owner, the parent. */
    pid_t kid = fork();
    if (kid == 0) {
        make("w/kid");
        unlink(path("w/kid"));
        _exit(0);
    }
    waitpid(kid, NULL, 0);
    drain("child create and unlink");

    /* F_SETSIG 0 after F_NOTIFY: plain SIGIO. */
    fcntl(w, F_SETSIG, 0);
    make("w/d");
    drain("sigio create d");
    fcntl(w, F_SETSIG, SIGRTMIN + 1);

    /* A mask of nothing removes. */
    notify(w, 0);
    make("w/e");
    drain("removed create e");

    /* Closing a duplicate ends the registration of the description. */
    notify(w, DN_CREATE | DN_MULTISHOT);
    int d2 = dup(w);
    make("w/f");
    drain("dup create f");
    close(d2);
    make("w/g");
    drain("dup closed create g");

    /* A second descriptor of its own: its own registration and si_fd. */
    notify(w, DN_CREATE | DN_MULTISHOT);
    int w2 = open(path("w"), O_RDONLY | O_DIRECTORY);
    fcntl(w2, F_SETSIG, SIGRTMIN + 1);
    notify(w2, DN_DELETE);
    make("w/h");
    drain("two create h");
    unlink(path("w/h"));
    drain("two unlink h");
    unlink(path("w/g"));
    drain("two unlink g");
    close(w2);
    close(w);
    w = -1;
    make("w/i");
    drain("closed create i");
    close(fence);
}

/* Register, then run this program again: the registration of a
 * descriptor kept open across execve goes on signalling. */
static void exec_kept(const char *self)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGRTMIN + 1);
    sigaddset(&set, SIGIO);
    sigprocmask(SIG_BLOCK, &set, NULL);
    mkdir(path("w"), 0755);
    mkdir(path("fence"), 0755);
    fence = open(path("fence"), O_RDONLY | O_DIRECTORY);
    fcntl(fence, F_SETSIG, SIGRTMIN + 1);
    notify(fence, DN_CREATE | DN_MULTISHOT);
    w = open(path("w"), O_RDONLY | O_DIRECTORY);
    fcntl(w, F_SETSIG, SIGRTMIN + 1);
    notify(w, DN_CREATE | DN_MULTISHOT);
    make("w/before");
    drain("before exec");
    char a[16], b[16];
    snprintf(a, sizeof a, "%d", w);
    snprintf(b, sizeof b, "%d", fence);
    execl(self, self, "execd", base, a, b, (char *)NULL);
    printf("execl: %s\n", strerror(errno));
}

static void after_exec(int wfd, int ffd)
{
    w = wfd;
    fence = ffd;
    fences = 100;
    make("w/after");
    drain("after exec");
    close(w);
    make("w/closed");
    drain("after exec, closed");
    close(fence);
}

static volatile int got_fd;
static void on_rt(int s, siginfo_t *si, void *u)
{
    (void)s;
    (void)u;
    got_fd = si->si_fd;
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

/* stress-ng's pattern, timed: open the directory, F_SETSIG, F_NOTIFY
 * (one-shot DN_CREATE), create a file (the signal is there when creat
 * returns), close the directory, remove the file. Microseconds each. */
static void timed(int n)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_rt;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGRTMIN + 1, &sa, NULL);
    double reg = 0, creat_ = 0, close_ = 0, rm = 0;
    int missed = 0;
    for (int i = 0; i < n; i++) {
        double t0 = now();
        int d = open(base, O_RDONLY | O_DIRECTORY);
        fcntl(d, F_SETSIG, SIGRTMIN + 1);
        got_fd = -1;
        notify(d, DN_CREATE);
        double t1 = now();
        close(open(path("x"), O_CREAT | O_WRONLY, 0600));
        double t2 = now();
        missed += got_fd != d;
        close(d);
        double t3 = now();
        unlink(path("x"));
        double t4 = now();
        reg += t1 - t0, creat_ += t2 - t1, close_ += t3 - t2, rm += t4 - t3;
    }
    printf("%d loops, us each: open+F_SETSIG+F_NOTIFY %.1f, create %.1f, close %.1f, "
           "unlink %.1f; missed %d\n",
           n, reg / n * 1e6, creat_ / n * 1e6, close_ / n * 1e6, rm / n * 1e6, missed);
}

static volatile sig_atomic_t got;
static void on_sigio(int s)
{
    (void)s;
    got = 1;
}

static void wait_for_create(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigio;
    sigaction(SIGIO, &sa, NULL);
    int d = open(base, O_RDONLY | O_DIRECTORY);
    notify(d, DN_CREATE);
    printf("waiting\n");
    fflush(stdout);
    close(open(path("../ready"), O_CREAT | O_WRONLY, 0644));
    while (!got)
        pause();
    printf("woken\n");
}

int main(int argc, char **argv)
{
    if (argc == 5 && !strcmp(argv[1], "execd")) {
        snprintf(base, sizeof base, "%s", argv[2]);
        setvbuf(stdout, NULL, _IONBF, 0);
        after_exec(atoi(argv[3]), atoi(argv[4]));
        return 0;
    }
    if (argc != 3)
        return 2;
    snprintf(base, sizeof base, "%s", argv[2]);
    setvbuf(stdout, NULL, _IONBF, 0);
    if (!strcmp(argv[1], "steps"))
        steps();
    else if (!strncmp(argv[1], "time", 4))
        timed(atoi(argv[1] + 4));
    else if (!strcmp(argv[1], "exec"))
        exec_kept(argv[0]);
    else if (!strcmp(argv[1], "wait"))
        wait_for_create();
    else
        return 2;
    return 0;
}
