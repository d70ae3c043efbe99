/* inotify semantics probe: prints a transcript that must be the same on
 * a tmpfs directory and in the atoll mount. Usage: probe DIR
 * Covers record layout and padding, rename cookies, IN_ONESHOT,
 * IN_MASK_ADD, IN_MASK_CREATE, inotify_rm_watch and IN_IGNORED,
 * IN_DELETE_SELF, EINVAL for a short buffer, FIONREAD, EAGAIN, poll,
 * epoll, a blocking read woken by another process and one interrupted by
 * a signal, IN_ONESHOT on a directory, and IN_Q_OVERFLOW. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[4096];
static int wds[8];
static int nwds;

static const char *path(const char *name) {
    static char p[2][4200];
    static int k;
    k ^= 1;
    snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
    return p[k];
}

/* Watch descriptors are printed as W0, W1, ... in order of first use, so
 * the transcript does not depend on their numbers. */
static int wname(int wd) {
    if (wd == -1)
        return -1;
    for (int i = 0; i < nwds; i++)
        if (wds[i] == wd)
            return i;
    wds[nwds] = wd;
    return nwds++;
}

static void masks(unsigned m) {
    static const struct { unsigned bit; const char *name; } names[] = {
        {IN_ACCESS, "ACCESS"}, {IN_MODIFY, "MODIFY"}, {IN_ATTRIB, "ATTRIB"},
        {IN_CLOSE_WRITE, "CLOSE_WRITE"}, {IN_CLOSE_NOWRITE, "CLOSE_NOWRITE"},
        {IN_OPEN, "OPEN"}, {IN_MOVED_FROM, "MOVED_FROM"}, {IN_MOVED_TO, "MOVED_TO"},
        {IN_CREATE, "CREATE"}, {IN_DELETE, "DELETE"}, {IN_DELETE_SELF, "DELETE_SELF"},
        {IN_MOVE_SELF, "MOVE_SELF"}, {IN_Q_OVERFLOW, "Q_OVERFLOW"},
        {IN_IGNORED, "IGNORED"}, {IN_ISDIR, "ISDIR"},
    };
    const char *sep = "";
    for (unsigned i = 0; i < sizeof names / sizeof names[0]; i++)
        if (m & names[i].bit) {
            printf("%s%s", sep, names[i].name);
            sep = "|";
        }
}

/* Read what is queued now (non-blocking poll first) and print it. Rename
 * cookies are printed as "c" (non-zero, same as the previous one: "=c"). */
static int drain(int fd, const char *what) {
    char buf[8192] __attribute__((aligned(8)));
    unsigned last_cookie = 0;
    int n = 0;
    printf("%s:\n", what);
    for (;;) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 0) != 1)
            break;
        ssize_t got = read(fd, buf, sizeof buf);
        if (got <= 0) {
            printf("  read: %zd %s\n", got, strerror(errno));
            break;
        }
        for (char *at = buf; at < buf + got;) {
            struct inotify_event *e = (struct inotify_event *)at;
            printf("  W%d ", wname(e->wd));
            masks(e->mask);
            if (e->cookie)
                printf(" %s", e->cookie == last_cookie ? "=c" : "c");
            if (e->cookie)
                last_cookie = e->cookie;
            printf(" len=%u", e->len);
            if (e->len)
                printf(" %s", e->name);
            printf("\n");
            at += sizeof *e + e->len;
            n++;
        }
    }
    return n;
}

static void touch_write(const char *name, const char *data) {
    int f = open(path(name), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (write(f, data, strlen(data)) < 0)
        perror("write");
    close(f);
}

static void on_alarm(int s) { (void)s; }

int main(int argc, char **argv) {
    if (argc != 2)
        return 2;
    snprintf(dir, sizeof dir, "%s/watched", argv[1]);
    mkdir(dir, 0755);
    setvbuf(stdout, NULL, _IOLBF, 0);

    int fd = inotify_init1(IN_CLOEXEC);
    int dw = inotify_add_watch(fd, dir, IN_CREATE | IN_DELETE | IN_MODIFY | IN_ATTRIB |
                                            IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO |
                                            IN_DELETE_SELF);
    printf("add dir watch: %s\n", dw > 0 ? "ok" : strerror(errno));
    wname(dw);
    printf("fd flags: cloexec=%d\n", (fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0);

    /* Record layout: names of 1, 15, 16 and 40 bytes pad to 16-byte units. */
    touch_write("a", "abc");
    touch_write("fifteen-chars-x", "");
    touch_write("sixteen-chars-xy", "");
    touch_write("a-name-that-is-forty-characters-long-xyz", "");
    int queued = 0;
    ioctl(fd, FIONREAD, &queued);
    printf("FIONREAD: %d\n", queued);
    /* A buffer too small for the next event. */
    char small[20];
    errno = 0;
    ssize_t sr = read(fd, small, sizeof small);
    printf("read 20 bytes: %zd %s\n", sr, strerror(errno));
    drain(fd, "create, write, close");

    /* Renames in one directory: one cookie for both halves. */
    rename(path("a"), path("b"));
    mkdir(path("sub"), 0755);
    rename(path("sub"), path("sub2"));
    drain(fd, "renames");

    /* Attributes. */
    chmod(path("b"), 0600);
    truncate(path("b"), 1);
    drain(fd, "chmod, truncate");

    /* IN_MASK_ADD, IN_MASK_CREATE, same inode same wd. */
    int fw = inotify_add_watch(fd, path("b"), IN_ATTRIB);
    int fw2 = inotify_add_watch(fd, path("b"), IN_MODIFY | IN_MASK_ADD);
    printf("same wd for same inode: %d\n", fw == fw2);
    errno = 0;
    int mc = inotify_add_watch(fd, path("b"), IN_MODIFY | IN_MASK_CREATE);
    printf("IN_MASK_CREATE on a watched inode: %d %s\n", mc, strerror(errno));
    errno = 0;
    int od = inotify_add_watch(fd, path("b"), IN_MODIFY | IN_ONLYDIR);
    printf("IN_ONLYDIR on a file: %d %s\n", od, strerror(errno));
    errno = 0;
    int bad = inotify_add_watch(fd, path("missing"), IN_MODIFY);
    printf("missing path: %d %s\n", bad, strerror(errno));
    wname(fw);
    chmod(path("b"), 0644);
    touch_write("b", "more");
    drain(fd, "mask add");
    printf("rm_watch: %d\n", inotify_rm_watch(fd, fw));
    errno = 0;
    int again = inotify_rm_watch(fd, fw);
    printf("rm_watch again: %d %s\n", again, strerror(errno));
    drain(fd, "after rm_watch");

    /* IN_ONESHOT. */
    int ow = inotify_add_watch(fd, path("b"), IN_MODIFY | IN_ONESHOT);
    wname(ow);
    touch_write("b", "1");
    touch_write("b", "2");
    drain(fd, "oneshot");

    /* IN_DELETE_SELF then IN_IGNORED. */
    int sw = inotify_add_watch(fd, path("b"), IN_DELETE_SELF);
    wname(sw);
    unlink(path("b"));
    drain(fd, "unlink a watched file");

    /* Non-blocking read of an empty queue; poll and epoll readiness. */
    int nb = inotify_init1(IN_NONBLOCK);
    int nw = inotify_add_watch(nb, dir, IN_CREATE);
    errno = 0;
    char buf[4096];
    ssize_t er = read(nb, buf, sizeof buf);
    printf("nonblocking empty read: %zd %s\n", er, strerror(errno));
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = 7};
    epoll_ctl(ep, EPOLL_CTL_ADD, nb, &ev);
    struct epoll_event got;
    struct pollfd p = {nb, POLLIN, 0};
    int p0 = poll(&p, 1, 0);
    int e0 = epoll_wait(ep, &got, 1, 0);
    printf("empty: poll %d epoll %d\n", p0, e0);
    touch_write("c", "");
    p.revents = 0;
    int pr = poll(&p, 1, -1);
    printf("after create: poll %d revents %s", pr, p.revents == POLLIN ? "POLLIN" : "other");
    int e1 = epoll_wait(ep, &got, 1, -1);
    printf(" epoll %d data %u\n", e1, got.data.u32);
    ioctl(nb, FIONREAD, &queued);
    printf("FIONREAD: %d\n", queued);
    close(ep);
    (void)nw;
    close(nb);

    /* A blocking read woken by another process's change. */
    drain(fd, "before blocking read");
    pid_t child = fork();
    if (child == 0) {
        touch_write("from-child", "x");
        _exit(0);
    }
    /* Room for exactly one event named "from-child": the rest stays. */
    ssize_t r = read(fd, buf, sizeof(struct inotify_event) + 16);
    struct inotify_event *e = (struct inotify_event *)buf;
    printf("blocking read: %s first ", r > 0 ? "events" : strerror(errno));
    masks(e->mask);
    printf(" %s\n", e->len ? e->name : "");
    waitpid(child, NULL, 0);
    drain(fd, "rest");

    /* A blocking read interrupted by a handler without SA_RESTART. */
    struct sigaction sa = {.sa_handler = on_alarm};
    sigaction(SIGALRM, &sa, NULL);
    alarm(1);
    errno = 0;
    ssize_t ir = read(fd, buf, sizeof buf);
    printf("interrupted read: %zd %s\n", ir, strerror(errno));

    /* IN_ONESHOT on a directory whose entries several servers hold:
     * one event, then IN_IGNORED. */
    char osdir[4200];
    snprintf(osdir, sizeof osdir, "%s/oneshot", argv[1]);
    mkdir(osdir, 0755);
    int osq = inotify_init1(0);
    inotify_add_watch(osq, osdir, IN_CREATE | IN_ONESHOT);
    for (int i = 0; i < 12; i++) {
        char name[4300];
        snprintf(name, sizeof name, "%s/f%d", osdir, i);
        close(open(name, O_WRONLY | O_CREAT, 0644));
        unlink(name);
    }
    int oneshots = drain(osq, "oneshot directory watch, 12 creations");
    printf("events: %d\n", oneshots);
    close(osq);
    rmdir(osdir);

    /* Overflow: a reader that does not read. */
    char other[4200];
    snprintf(other, sizeof other, "%s/unwatched", argv[1]);
    mkdir(other, 0755);
    strcat(other, "/x");
    int of = inotify_init1(0);
    char odir[4200];
    snprintf(odir, sizeof odir, "%s/unwatched", argv[1]);
    wname(inotify_add_watch(of, odir, IN_CREATE | IN_DELETE));
    /* As Linux: `max_queued_events` records, then one IN_Q_OVERFLOW;
     * after a short read, room for two more records: one event goes in
     * behind the unread overflow, which is not queued a second time. */
    int events = 0, overflows = 0, overflow_at = 0, overflow_wd = 0;
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < 20000; i++) {
            int f = open(other, O_WRONLY | O_CREAT, 0644);
            close(f);
            unlink(other);
        }
        for (;;) {
            struct pollfd q = {of, POLLIN, 0};
            if (poll(&q, 1, 0) != 1)
                break;
            ssize_t got = read(of, buf, round == 0 ? 64 : sizeof buf);
            if (got <= 0)
                break;
            for (char *at = buf; at < buf + got;) {
                struct inotify_event *x = (struct inotify_event *)at;
                events++;
                if (x->mask & IN_Q_OVERFLOW) {
                    overflows++;
                    overflow_at = events;
                    overflow_wd = x->wd;
                }
                at += sizeof *x + x->len;
            }
            if (round == 0)
                break;
        }
    }
    printf("overflow: events %d, overflows %d, at %d, its wd %d\n", events, overflows,
           overflow_at, overflow_wd);
    close(of);
    rmdir(odir);

    /* The watched directory itself goes. */
    unlink(path("c"));
    unlink(path("fifteen-chars-x"));
    unlink(path("sixteen-chars-xy"));
    unlink(path("a-name-that-is-forty-characters-long-xyz"));
    unlink(path("from-child"));
    rmdir(path("sub2"));
    drain(fd, "emptying");
    rmdir(dir);
    drain(fd, "rmdir of the watched directory");
    close(fd);
    return 0;
}
