/* inotify probe of a watched file losing a name: prints a transcript that
 * must be the same on a tmpfs directory and in the atoll mount.
 * Usage: replace DIR
 * Covers a rename over a watched file (the directory's IN_MOVED_FROM and
 * IN_MOVED_TO, then the file's IN_ATTRIB, IN_DELETE_SELF, IN_IGNORED),
 * inotify_rm_watch of a watch whose inode went (EINVAL, no second
 * IN_IGNORED) and of an IN_ONESHOT watch that fired, unlink of a file with
 * another link and of an open one, a rename over an open file, a rename
 * over a watched file of another directory, a directory renamed over a
 * watched empty one, and the link counts. The moved file's own watch
 * leaves out IN_MOVE_SELF: with the names on two servers it is not in
 * Linux's place among the replaced file's events (COMPATIBILITY.md). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#define ALL (IN_ALL_EVENTS & ~(IN_ACCESS | IN_OPEN | IN_CLOSE_NOWRITE))
#define MOVED (ALL & ~IN_MOVE_SELF)

static char root[4096];
static int fd;
static struct {
    int wd;
    const char *label;
} labels[64];
static int nlabels;

static const char *path(const char *name) {
    static char p[4][4200];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", root, name);
    return p[k];
}

static int watch(const char *name, unsigned mask, const char *label) {
    int wd = inotify_add_watch(fd, path(name), mask);
    if (wd < 0) {
        printf("add_watch %s: %s\n", name, strerror(errno));
        return wd;
    }
    labels[nlabels].wd = wd;
    labels[nlabels++].label = label;
    return wd;
}

static const char *label(int wd) {
    for (int i = nlabels - 1; i >= 0; i--)
        if (labels[i].wd == wd)
            return labels[i].label;
    return "?";
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

/* Print what is queued now; cookies as "c" (new) or "=c" (the last one). */
static void drain(const char *what) {
    char buf[8192] __attribute__((aligned(8)));
    unsigned last = 0;
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
            printf("  %s ", label(e->wd));
            masks(e->mask);
            if (e->cookie)
                printf(" %s", e->cookie == last ? "=c" : "c");
            if (e->cookie)
                last = e->cookie;
            if (e->len)
                printf(" %s", e->name);
            printf("\n");
            at += sizeof *e + e->len;
        }
    }
}

static void make(const char *name, const char *data) {
    int f = open(path(name), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (f < 0 || write(f, data, strlen(data)) < 0)
        printf("make %s: %s\n", name, strerror(errno));
    close(f);
}

static void rm_watch(int wd, const char *what) {
    errno = 0;
    int r = inotify_rm_watch(fd, wd);
    printf("rm_watch %s: %d %s\n", what, r, r ? strerror(errno) : "");
}

static void nlink(const char *name) {
    struct stat st;
    if (stat(path(name), &st))
        printf("nlink %s: %s\n", name, strerror(errno));
    else
        printf("nlink %s: %lu\n", name, (unsigned long)st.st_nlink);
}

static void fnlink(int f, const char *what) {
    struct stat st;
    if (fstat(f, &st))
        printf("fstat %s: %s\n", what, strerror(errno));
    else
        printf("fstat %s: nlink %lu size %lld\n", what, (unsigned long)st.st_nlink,
               (long long)st.st_size);
}

static void check(int r, const char *what) {
    if (r)
        printf("%s: %s\n", what, strerror(errno));
}

int main(int argc, char **argv) {
    if (argc != 2)
        return 2;
    setvbuf(stdout, NULL, _IOLBF, 0);
    snprintf(root, sizeof root, "%s/replace", argv[1]);
    mkdir(root, 0755);
    fd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);

    /* mv x k with k watched (coreutils' tail -F of a rotated log). */
    mkdir(path("d"), 0755);
    make("d/k", "old\n");
    make("d/x", "new\n");
    watch("d", ALL, "D");
    int k = watch("d/k", ALL, "K");
    int x = watch("d/x", MOVED, "X");
    check(rename(path("d/x"), path("d/k")), "rename x k");
    drain("mv x k");
    rm_watch(k, "of the replaced k");
    rm_watch(x, "of the moved x");
    drain("after rm_watch");
    nlink("d/k");

    /* A watch added again to the new k gets its own descriptor. */
    int k2 = watch("d/k", ALL, "K2");
    printf("new watch of k differs: %d\n", k2 != k && k2 > 0);
    make("d/y", "newer\n");
    check(rename(path("d/y"), path("d/k")), "rename y k");
    drain("mv y k");
    rm_watch(k2, "of the second k");

    /* Unlink of a file with another link: only its count changes. */
    make("d/a", "a\n");
    check(link(path("d/a"), path("d/b")), "link a b");
    int a = watch("d/a", ALL, "A");
    nlink("d/b");
    check(unlink(path("d/a")), "unlink a");
    drain("unlink a (b remains)");
    nlink("d/b");
    check(unlink(path("d/b")), "unlink b");
    drain("unlink b");
    rm_watch(a, "of the removed a");

    /* Unlink of an open file: IN_DELETE_SELF at its last close. */
    make("d/o", "o\n");
    int of = open(path("d/o"), O_RDONLY);
    int o = watch("d/o", ALL, "O");
    check(unlink(path("d/o")), "unlink o");
    drain("unlink open o");
    fnlink(of, "o");
    rm_watch(o, "of the open, removed o");
    drain("after rm_watch of o");
    close(of);
    drain("close o");

    /* A rename over an open file: its watch lives until the close. (In
     * a directory nobody watches: Linux reports a change through the
     * replaced name to its old directory, COMPATIBILITY.md.) */
    mkdir(path("g"), 0755);
    make("g/p", "p\n");
    make("g/q", "q\n");
    int pf = open(path("g/p"), O_RDWR);
    watch("g/p", ALL, "P");
    check(rename(path("g/q"), path("g/p")), "rename q p");
    drain("mv q p (p open)");
    fnlink(pf, "old p");
    if (write(pf, "more\n", 5) != 5)
        printf("write old p: %s\n", strerror(errno));
    drain("write to the old p");
    close(pf);
    drain("close old p");

    /* A rename over a file with another link: its count drops, no more. */
    make("d/m", "m\n");
    check(link(path("d/m"), path("d/m2")), "link m m2");
    make("d/n", "n\n");
    watch("d/m", ALL, "M");
    check(rename(path("d/n"), path("d/m")), "rename n m");
    drain("mv n m (m2 remains)");
    nlink("d/m2");
    nlink("d/m");

    /* Across directories: e/x over the watched f/k. */
    mkdir(path("e"), 0755);
    mkdir(path("f"), 0755);
    make("e/x", "x\n");
    make("f/k", "k\n");
    watch("e", ALL, "E");
    watch("f", ALL, "F");
    int fk = watch("f/k", ALL, "FK");
    watch("e/x", MOVED, "EX");
    check(rename(path("e/x"), path("f/k")), "rename e/x f/k");
    drain("mv e/x f/k");
    rm_watch(fk, "of the replaced f/k");
    drain("after rm_watch of f/k");

    /* A directory renamed over a watched empty one. */
    mkdir(path("e/s1"), 0755);
    mkdir(path("e/s2"), 0755);
    int s2 = watch("e/s2", ALL, "S2");
    check(rename(path("e/s1"), path("e/s2")), "rename s1 s2");
    drain("mv e/s1 e/s2");
    rm_watch(s2, "of the replaced s2");

    /* An IN_ONESHOT watch that fired is gone too. */
    int once = watch("f/k", IN_MODIFY | IN_ONESHOT, "ONCE");
    make("f/k", "again\n");
    drain("oneshot fired");
    rm_watch(once, "of the fired oneshot");
    drain("end");
    return 0;
}
