/* A writer makes files as tar does (create, write, then futimens, fchown,
 * fchmod on the descriptor, close) while an observer process checks,
 * after each call returned and before the next, that it sees the change:
 * stat by path (mode, owner, mtime) and, with "inotify", one event
 * queued for the file (IN_MODIFY for the times: Linux reports a change of
 * mtime alone so; IN_ATTRIB for owner and mode). The two talk over pipes, so every check
 * comes after the call it checks returned. Prints one line per file and
 * the number of checks that failed. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

struct step {
    int file, call;
    long mode, uid, gid, mtime;
};

static void must(int ok, const char *what) {
    if (!ok) {
        perror(what);
        exit(2);
    }
}

static int observe(const char *dir, int to_writer, int from_writer, int watch) {
    int bad = 0, ino = -1;
    if (watch) {
        ino = inotify_init1(IN_NONBLOCK);
        must(ino >= 0, "inotify_init1");
        must(inotify_add_watch(ino, dir, IN_ATTRIB | IN_MODIFY) >= 0, "inotify_add_watch");
    }
    /* Ready: the watch (if any) is in place before the first file. */
    must(write(to_writer, "r", 1) == 1, "ready");
    struct step s;
    while (read(from_writer, &s, sizeof s) == (ssize_t)sizeof s) {
        /* The queue first: reading it asks no server, so a stat before it
         * could not tell whether the event was queued in time. */
        if (watch) {
            char buf[4096] __attribute__((aligned(8)));
            ssize_t n = read(ino, buf, sizeof buf);
            int want = s.call == 1 ? IN_MODIFY : IN_ATTRIB, got = 0, other = 0;
            for (ssize_t off = 0; n > 0 && off < n;) {
                struct inotify_event *e = (struct inotify_event *)(buf + off);
                if (e->mask & want)
                    got++;
                else
                    other++;
                off += sizeof *e + e->len;
            }
            /* Call 0 (after the write) only empties the queue. */
            if (s.call > 0 && (got != 1 || other != 0)) {
                printf("file %d call %d: %d events %x and %d others queued, want 1\n",
                       s.file, s.call, got, want, other);
                bad++;
            }
        }
        char path[4096];
        struct stat st;
        snprintf(path, sizeof path, "%s/f%d", dir, s.file);
        must(stat(path, &st) == 0, "stat");
        if ((long)(st.st_mode & 07777) != s.mode || (long)st.st_uid != s.uid ||
            (long)st.st_gid != s.gid || (s.call > 0 && (long)st.st_mtime != s.mtime)) {
            printf("file %d call %d: saw mode %o uid %ld gid %ld mtime %ld, "
                   "want %lo %ld %ld %ld\n",
                   s.file, s.call, st.st_mode & 07777, (long)st.st_uid, (long)st.st_gid,
                   (long)st.st_mtime, s.mode, s.uid, s.gid, s.mtime);
            bad++;
        }
        must(write(to_writer, "k", 1) == 1, "ack");
    }
    return bad;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s DIR FILES [inotify]\n", argv[0]);
        return 2;
    }
    const char *dir = argv[1];
    int files = atoi(argv[2]);
    int watch = argc > 3 && strcmp(argv[3], "inotify") == 0;
    int to_obs[2], to_wr[2];
    must(pipe(to_obs) == 0 && pipe(to_wr) == 0, "pipe");
    pid_t pid = fork();
    must(pid >= 0, "fork");
    if (pid == 0) {
        close(to_obs[1]);
        close(to_wr[0]);
        int bad = observe(dir, to_wr[1], to_obs[0], watch);
        printf("observer: %d checks failed\n", bad);
        fflush(stdout);
        _exit(bad ? 1 : 0);
    }
    close(to_obs[0]);
    close(to_wr[1]);
    char c;
    must(read(to_wr[0], &c, 1) == 1, "wait for observer");
    /* Root may give files away; others can only name their own ids. */
    int root = geteuid() == 0;
    char data[6000];
    memset(data, 'x', sizeof data);
    for (int i = 0; i < files; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/f%d", dir, i);
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        must(fd >= 0, "open");
        must(write(fd, data, 1 + (i * 997) % sizeof data) > 0, "write");
        struct step s = {i, 0, 0600, geteuid(), getegid(), 0};
        /* Call 0: the file as created and written. */
        must(write(to_obs[1], &s, sizeof s) == (ssize_t)sizeof s, "tell observer");
        must(read(to_wr[0], &c, 1) == 1, "wait for observer");
        struct timespec ts[2] = {{0, UTIME_OMIT}, {1000000 + i, 0}};
        for (int call = 1; call <= 3; call++) {
            int r;
            s.call = call;
            if (call == 1) {
                r = futimens(fd, ts);
                s.mtime = 1000000 + i;
            } else if (call == 2) {
                s.uid = root ? 1000 + i % 3 : (long)geteuid();
                s.gid = root ? 2000 + i % 5 : (long)getegid();
                r = fchown(fd, s.uid, s.gid);
            } else {
                s.mode = 0644 ^ (i % 8);
                r = fchmod(fd, s.mode);
            }
            must(r == 0, "attribute call");
            must(write(to_obs[1], &s, sizeof s) == (ssize_t)sizeof s, "tell observer");
            must(read(to_wr[0], &c, 1) == 1, "wait for observer");
        }
        must(close(fd) == 0, "close");
        if (i % 50 == 0)
            printf("f%d mode %lo\n", i, s.mode);
    }
    close(to_obs[1]);
    int status;
    must(waitpid(pid, &status, 0) == pid, "waitpid");
    return WIFEXITED(status) ? WEXITSTATUS(status) : 3;
}
