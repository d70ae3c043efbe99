/* Calls that wait for other processes for as long as they take (record
   locks with F_SETLKW and F_OFD_SETLKW, flock without LOCK_NB, a FIFO
   open without a partner), interrupted by a handler with and without
   SA_RESTART: EINTR or restarted as on Linux, and a wait given up leaves
   no lock behind. Argument: the directory to work in. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

/* The handler writes a byte to the notes pipe; a helper that waits for
   it then ends the wait (releases the lock, opens the FIFO's other end). */
static int note_fd = -1;
static volatile sig_atomic_t hits;
static void note(int sig) {
    int saved = errno;
    char c = 'n';
    (void)sig;
    if (write(note_fd, &c, 1) != 1) _exit(90);
    hits++;
    errno = saved;
}

static void install(int restart) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = note;
    sa.sa_flags = restart ? SA_RESTART : 0;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGALRM, &sa, NULL) != 0) { perror("sigaction"); exit(2); }
}

static void arm(void) {
    struct itimerval it = { { 0, 0 }, { 0, 100000 } };
    setitimer(ITIMER_REAL, &it, NULL);
}

enum kind { POSIX, OFD, FLOCK };
static const char *names[] = { "F_SETLKW", "F_OFD_SETLKW", "flock" };

static int lock(int fd, enum kind k, int wait, int type) {
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    fl.l_type = type;
    fl.l_whence = SEEK_SET;
    switch (k) {
    case POSIX: return fcntl(fd, wait ? F_SETLKW : F_SETLK, &fl);
    case OFD: return fcntl(fd, wait ? F_OFD_SETLKW : F_OFD_SETLK, &fl);
    default:
        return flock(fd, (type == F_UNLCK ? LOCK_UN : LOCK_EX) | (wait ? 0 : LOCK_NB));
    }
}

/* Does anyone hold a lock on `path` that a new process cannot get past? */
static int free_for_others(const char *path, enum kind k) {
    pid_t p = fork();
    if (p == 0) {
        int fd = open(path, O_RDWR);
        _exit(fd >= 0 && lock(fd, k, 0, F_WRLCK) == 0 ? 0 : 1);
    }
    int st;
    waitpid(p, &st, 0);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

/* A holder takes the lock, says so on `ready`, waits for the handler's
   byte, then (SA_RESTART) lets go or (no SA_RESTART) keeps it until told
   by `done`. */
static void lock_case(const char *dir, enum kind k, int restart, int notes_r) {
    char path[4096];
    int ready[2], done[2];
    snprintf(path, sizeof path, "%s/lock-%d-%d", dir, k, restart);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || pipe(ready) || pipe(done)) { perror("setup"); exit(2); }
    if (write(fd, "0123456789", 10) != 10) exit(2);
    pid_t holder = fork();
    if (holder == 0) {
        int hfd = open(path, O_RDWR);
        char c;
        signal(SIGALRM, SIG_DFL);
        alarm(20);
        if (hfd < 0 || lock(hfd, k, 0, F_WRLCK) != 0) _exit(3);
        if (write(ready[1], "r", 1) != 1) _exit(4);
        if (read(notes_r, &c, 1) != 1) _exit(5);
        if (!restart && read(done[0], &c, 1) != 1) _exit(6);
        _exit(0);
    }
    char c;
    if (read(ready[0], &c, 1) != 1) { printf("%s: holder failed\n", names[k]); return; }
    install(restart);
    hits = 0;
    arm();
    int r = lock(fd, k, 1, F_WRLCK);
    int e = errno;
    if (r == 0) {
        printf("%s %s: 0 (%s), handler ran %d\n", names[k],
               restart ? "with SA_RESTART" : "without SA_RESTART",
               "restarted, lock taken", (int)hits);
        lock(fd, k, 0, F_UNLCK);
    } else {
        printf("%s %s: %d %s, handler ran %d\n", names[k],
               restart ? "with SA_RESTART" : "without SA_RESTART", r,
               e == EINTR ? "EINTR" : strerror(e), (int)hits);
    }
    if (write(done[1], "d", 1) != 1) exit(2);
    int st;
    waitpid(holder, &st, 0);
    printf("  holder exit %d; after it, the lock is %s\n", WEXITSTATUS(st),
           free_for_others(path, k) ? "free (nothing granted late)" : "held");
    close(fd);
    close(ready[0]); close(ready[1]); close(done[0]); close(done[1]);
}

static void fifo_case(const char *dir, int restart, int notes_r) {
    char path[4096];
    snprintf(path, sizeof path, "%s/fifo-%d", dir, restart);
    unlink(path);
    if (mkfifo(path, 0600) != 0) { perror("mkfifo"); exit(2); }
    pid_t opener = fork();
    if (opener == 0) {
        char c;
        signal(SIGALRM, SIG_DFL);
        alarm(20);
        if (read(notes_r, &c, 1) != 1) _exit(5);
        if (!restart) _exit(0);
        int w = open(path, O_WRONLY);
        if (w < 0) _exit(6);
        if (write(w, "hi", 2) != 2) _exit(7);
        _exit(0);
    }
    install(restart);
    hits = 0;
    arm();
    int r = open(path, O_RDONLY);
    int e = errno;
    char buf[8] = { 0 };
    if (r >= 0) {
        ssize_t n = read(r, buf, sizeof buf - 1);
        printf("FIFO open %s: opened (restarted), read %zd '%s', handler ran %d\n",
               restart ? "with SA_RESTART" : "without SA_RESTART", n, n > 0 ? buf : "",
               (int)hits);
        close(r);
    } else {
        printf("FIFO open %s: -1 %s, handler ran %d\n",
               restart ? "with SA_RESTART" : "without SA_RESTART",
               e == EINTR ? "EINTR" : strerror(e), (int)hits);
    }
    int st;
    waitpid(opener, &st, 0);
    printf("  opener exit %d\n", WEXITSTATUS(st));
}

int main(int argc, char **argv) {
    int np[2];
    if (argc < 2 || pipe(np) != 0) return 2;
    note_fd = np[1];
    setvbuf(stdout, NULL, _IONBF, 0);
    for (int k = POSIX; k <= FLOCK; k++)
        for (int restart = 0; restart <= 1; restart++)
            lock_case(argv[1], k, restart, np[0]);
    for (int restart = 0; restart <= 1; restart++)
        fifo_case(argv[1], restart, np[0]);
    return 0;
}
