/* A directory read to its end, then what the program does next: make and
 * remove entries (itself and in another process), ask the position, seek,
 * watch the directory, remove it. Every line printed is compared with the
 * same probe on a host tmpfs. Usage: ends DIR */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static char buf[32768];
static const char *root;

static long gd(int fd) { return syscall(SYS_getdents64, fd, buf, sizeof buf); }

/* Entries in one getdents64 answer, or -errno. */
static long entries(int fd) {
    long n = gd(fd);
    if (n < 0) return -errno;
    long k = 0;
    for (long p = 0; p < n; p += *(unsigned short *)(buf + p + 16)) k++;
    return k;
}

static void touch(const char *d, const char *name) {
    char p[4096];
    snprintf(p, sizeof p, "%s/%s/%s", root, d, name);
    int fd = open(p, O_CREAT | O_WRONLY, 0644);
    if (fd < 0) { perror(p); exit(1); }
    close(fd);
}

static int opendirfd(const char *d, int files) {
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", root, d);
    if (mkdir(p, 0755) != 0) { perror(p); exit(1); }
    for (int i = 0; i < files; i++) {
        char n[32];
        snprintf(n, sizeof n, "f%d", i);
        touch(d, n);
    }
    int fd = open(p, O_RDONLY | O_DIRECTORY);
    if (fd < 0) { perror(p); exit(1); }
    return fd;
}

/* Run `f(arg)` in a child process and wait for it. */
static void in_child(void (*f)(const char *), const char *arg) {
    pid_t pid = fork();
    if (pid == 0) { f(arg); _exit(0); }
    int st;
    waitpid(pid, &st, 0);
}

static void child_touch(const char *d) { touch(d, "theirs"); }
static void child_rmdir(const char *d) {
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", root, d);
    if (rmdir(p) != 0) perror("rmdir");
}

static void ends_stay_ends(void) {
    int fd = opendirfd("a", 20);
    printf("a first %ld\n", entries(fd));
    touch("a", "mine");
    printf("a after my create %ld\n", entries(fd));
    in_child(child_touch, "a");
    printf("a after their create %ld\n", entries(fd));
    printf("a tell moves %d\n", lseek(fd, 0, SEEK_CUR) < 0);
    printf("a after tell %ld\n", entries(fd));
    char p[4096];
    snprintf(p, sizeof p, "%s/a/f0", root);
    unlink(p);
    printf("a after unlink %ld\n", entries(fd));
    lseek(fd, 0, SEEK_SET);
    printf("a rewound %ld\n", entries(fd));
    printf("a rewound then %ld\n", entries(fd));
    touch("a", "later");
    printf("a after a create at the end %ld\n", entries(fd));
    lseek(fd, 0, SEEK_SET);
    printf("a rewound again %ld\n", entries(fd));
    close(fd);
    /* Through glibc: three listings of a large directory, 600 entries. */
    DIR *dp;
    snprintf(p, sizeof p, "%s/b", root);
    int b = opendirfd("b", 598);
    close(b);
    for (int round = 0; round < 3; round++) {
        dp = opendir(p);
        long k = 0;
        while (readdir(dp)) k++;
        printf("b listing %d: %ld\n", round, k);
        touch("b", round == 0 ? "x0" : round == 1 ? "x1" : "x2");
        printf("b at end after create %d\n", readdir(dp) != NULL);
        rewinddir(dp);
        k = 0;
        while (readdir(dp)) k++;
        printf("b rewound %ld\n", k);
        closedir(dp);
    }
}

static void removed_directories_say_enoent(void) {
    int fd = opendirfd("r1", 0);
    long first = entries(fd);
    printf("r1 first %ld then %ld\n", first, entries(fd));
    char p[4096];
    snprintf(p, sizeof p, "%s/r1", root);
    printf("r1 rmdir %d\n", rmdir(p));
    printf("r1 after my rmdir %ld\n", entries(fd));
    close(fd);
    fd = opendirfd("r2", 3);
    printf("r2 first %ld\n", entries(fd));
    snprintf(p, sizeof p, "%s/r2/f%d", root, 0);
    for (int i = 0; i < 3; i++) {
        p[strlen(p) - 1] = '0' + i;
        unlink(p);
    }
    printf("r2 emptied %ld\n", entries(fd));
    in_child(child_rmdir, "r2");
    printf("r2 after their rmdir %ld\n", entries(fd));
    close(fd);
    /* A directory moved away and another made in its place. */
    fd = opendirfd("r3", 2);
    printf("r3 first %ld\n", entries(fd));
    char q[4096];
    snprintf(p, sizeof p, "%s/r3", root);
    snprintf(q, sizeof q, "%s/r3moved", root);
    printf("r3 moved %d\n", rename(p, q));
    mkdir(p, 0755);
    printf("r3 after the move %ld\n", entries(fd));
    close(fd);
}

static void child_watch(const char *d) {
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", root, d);
    int q = inotify_init1(IN_NONBLOCK);
    if (inotify_add_watch(q, p, IN_ACCESS | IN_ONLYDIR) < 0) perror("watch");
    /* Tell the parent, wait for its listing, report what the queue got. */
    if (write(3, "w", 1) != 1) exit(1);
    char c;
    if (read(4, &c, 1) != 1) exit(1);
    char ev[4096];
    long n = read(q, ev, sizeof ev);
    long k = 0;
    for (long pos = 0; n > 0 && pos < n;) {
        struct inotify_event *e = (struct inotify_event *)(ev + pos);
        if (e->mask & IN_ACCESS) k++;
        pos += sizeof *e + e->len;
    }
    printf("w their queue saw %ld access events\n", k);
    fflush(stdout);
}

static void watched_ends_report_access(void) {
    int fd = opendirfd("w", 4);
    printf("w first %ld\n", entries(fd));
    int q = inotify_init1(IN_NONBLOCK);
    char p[4096];
    snprintf(p, sizeof p, "%s/w", root);
    printf("w watched %d\n", inotify_add_watch(q, p, IN_ACCESS | IN_ONLYDIR) > 0);
    printf("w at end %ld\n", entries(fd));
    char ev[4096];
    long n = read(q, ev, sizeof ev);
    printf("w my queue %s\n", n > 0 ? "has an event" : "is empty");
    close(q);
    close(fd);
    /* Another process watches between our listing and its end. */
    int fd2 = opendirfd("w2", 4);
    printf("w2 first %ld\n", entries(fd2));
    int up[2], down[2];
    if (pipe(up) || pipe(down)) exit(1);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(up[1], 3);
        dup2(down[0], 4);
        child_watch("w2");
        _exit(0);
    }
    char c;
    if (read(up[0], &c, 1) != 1) exit(1);
    printf("w2 at end %ld\n", entries(fd2));
    fflush(stdout);
    if (write(down[1], "g", 1) != 1) exit(1);
    int st;
    waitpid(pid, &st, 0);
    close(fd2);
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    root = argv[1];
    setvbuf(stdout, NULL, _IOLBF, 0);
    ends_stay_ends();
    removed_directories_say_enoent();
    watched_ends_report_access();
    return 0;
}
