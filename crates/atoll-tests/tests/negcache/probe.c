/* Lookups of missing names (client dcache.rs, absent names).
 *
 *   probe race DIR   pairs of processes per name: a prober stats (and
 *                    opens) the missing name again and again, then its
 *                    changer makes the name exist by one of many ways and
 *                    says so through a pipe; every stat after that must see
 *                    the name; the changer removes it and the prober must
 *                    see it gone. Prints "race: passed".
 *   probe count DIR N  stats and opens one missing name N times each;
 *                    prints "count: N misses".
 *   probe rebuild DIR  stats the missing name "x" until its absence is
 *                    cached, then a child makes it a directory (the
 *                    request a test kills the name's server in, to be
 *                    answered by its successor); after the child's
 *                    mkdir returned, "x" must be seen. Prints
 *                    "rebuild: passed".
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define PAIRS 6
#define ROUNDS 28
#define MISSES 40
#define WAYS 8

static void fail(const char *what, const char *name, int round) {
    printf("FAIL %s %s round %d: %s\n", what, name, round, strerror(errno));
    fflush(stdout);
    _exit(1);
}

static void put(int fd) {
    char b = 'x';
    if (write(fd, &b, 1) != 1)
        _exit(2);
}

static void get(int fd) {
    char b;
    if (read(fd, &b, 1) != 1)
        _exit(3);
}

/* The name is missing: every stat and open says ENOENT. */
static void must_miss(const char *name, int round, int times) {
    struct stat st;
    for (int i = 0; i < times; i++) {
        errno = 0;
        if (stat(name, &st) == 0 || errno != ENOENT)
            fail("stat of a missing name", name, round);
        errno = 0;
        if (open(name, O_RDONLY | O_NONBLOCK) >= 0 || errno != ENOENT)
            fail("open of a missing name", name, round);
    }
}

/* The name exists (made by way `way`). */
static void must_see(const char *name, int way, int round) {
    struct stat st;
    if (lstat(name, &st) != 0)
        fail("lstat after an acknowledged creation", name, round);
    if (way == 3 ? !S_ISDIR(st.st_mode) : way == 4 ? !S_ISLNK(st.st_mode)
        : way == 5 ? !S_ISFIFO(st.st_mode) : way == 6 ? !S_ISSOCK(st.st_mode)
        : !S_ISREG(st.st_mode))
        fail("type after an acknowledged creation", name, round);
    if (stat(name, &st) != 0)
        fail("stat after an acknowledged creation", name, round);
    if (way != 5 && way != 6) {
        int fd = open(name, O_RDONLY);
        if (fd < 0)
            fail("open after an acknowledged creation", name, round);
        close(fd);
    }
}

/* Make `name` exist by way `way`; `k` keeps helper names apart. */
static void make(const char *name, int way, int k, int round) {
    char tmp[64], src[64];
    snprintf(tmp, sizeof tmp, "tmp%d", k);
    snprintf(src, sizeof src, "src%d", k);
    int fd;
    switch (way) {
    case 0: /* create */
        fd = open(name, O_CREAT | O_EXCL | O_WRONLY, 0644);
        if (fd < 0)
            fail("create", name, round);
        close(fd);
        break;
    case 1: /* rename onto it */
        fd = open(tmp, O_CREAT | O_WRONLY, 0644);
        if (fd < 0 || close(fd) != 0 || rename(tmp, name) != 0)
            fail("rename", name, round);
        break;
    case 2: /* hard link */
        if (link(src, name) != 0)
            fail("link", name, round);
        break;
    case 3:
        if (mkdir(name, 0755) != 0)
            fail("mkdir", name, round);
        break;
    case 4:
        if (symlink(src, name) != 0)
            fail("symlink", name, round);
        break;
    case 5:
        if (mkfifo(name, 0644) != 0)
            fail("mkfifo", name, round);
        break;
    case 6: { /* socket bind */
        struct sockaddr_un a = {.sun_family = AF_UNIX};
        snprintf(a.sun_path, sizeof a.sun_path, "%s", name);
        int s = socket(AF_UNIX, SOCK_STREAM, 0);
        if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof a) != 0)
            fail("bind", name, round);
        close(s);
        break;
    }
    case 7: { /* O_TMPFILE, then linkat */
        char proc[64];
        fd = open(".", O_TMPFILE | O_WRONLY, 0644);
        if (fd < 0)
            fail("O_TMPFILE", name, round);
        snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
        if (linkat(AT_FDCWD, proc, AT_FDCWD, name, AT_SYMLINK_FOLLOW) != 0)
            fail("linkat", name, round);
        close(fd);
        break;
    }
    }
}

static void pair(int k) {
    char name[64], src[64];
    snprintf(name, sizeof name, "n%d", k);
    snprintf(src, sizeof src, "src%d", k);
    int fd = open(src, O_CREAT | O_WRONLY, 0644);
    if (fd < 0)
        fail("source", src, -1);
    close(fd);
    int go[2], made[2], seen[2], gone[2];
    if (pipe(go) || pipe(made) || pipe(seen) || pipe(gone))
        _exit(4);
    pid_t changer = fork();
    if (changer == 0) {
        /* Only the ends it uses: a peer that failed is an end of file. */
        close(go[1]), close(made[0]), close(seen[1]), close(gone[0]);
        for (int r = 0; r < ROUNDS; r++) {
            int way = (r + k) % WAYS;
            get(go[0]);
            must_miss(name, r, 2); /* this session caches the absence */
            make(name, way, k, r);
            must_see(name, way, r);
            put(made[1]);
            get(seen[0]);
            if ((way == 3 ? rmdir(name) : unlink(name)) != 0)
                fail("remove", name, r);
            put(gone[1]);
        }
        _exit(0);
    }
    close(go[0]), close(made[1]), close(seen[0]), close(gone[1]);
    for (int r = 0; r < ROUNDS; r++) {
        int way = (r + k) % WAYS;
        must_miss(name, r, MISSES);
        put(go[1]);
        get(made[0]);
        must_see(name, way, r);
        put(seen[1]);
        get(gone[0]);
        must_miss(name, r, 1);
    }
    int st;
    if (waitpid(changer, &st, 0) != changer || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        _exit(5);
    _exit(0);
}

int main(int argc, char **argv) {
    if (argc < 3 || chdir(argv[2]) != 0)
        return 2;
    if (strcmp(argv[1], "count") == 0 && argc == 4) {
        int n = atoi(argv[3]);
        must_miss("missing", 0, n);
        printf("count: %d misses\n", n);
        return 0;
    }
    if (strcmp(argv[1], "rebuild") == 0) {
        int go[2];
        if (pipe(go))
            return 2;
        pid_t child = fork();
        if (child == 0) {
            close(go[1]);
            get(go[0]);
            if (mkdir("x", 0755) != 0)
                fail("mkdir", "x", 0);
            _exit(0);
        }
        close(go[0]);
        must_miss("x", 0, 10);
        put(go[1]);
        int st;
        if (waitpid(child, &st, 0) != child || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
            return 1;
        must_see("x", 3, 1);
        printf("rebuild: passed\n");
        return 0;
    }
    if (strcmp(argv[1], "race") != 0)
        return 2;
    pid_t pids[PAIRS];
    for (int k = 0; k < PAIRS; k++) {
        pids[k] = fork();
        if (pids[k] == 0)
            pair(k);
    }
    int bad = 0;
    for (int k = 0; k < PAIRS; k++) {
        int st;
        if (waitpid(pids[k], &st, 0) != pids[k] || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
            bad++;
    }
    printf(bad ? "race: %d pairs failed\n" : "race: passed\n", bad);
    return bad != 0;
}
