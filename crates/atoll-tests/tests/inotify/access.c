/* inotify probe of the events of opens, reads and closes: prints a
 * transcript that must be the same on a tmpfs directory and in the atoll
 * mount. Usage: access DIR
 * Covers IN_OPEN, IN_ACCESS (read, pread, readv, sendfile, getdents; not
 * at end of file; identical events merged), IN_CLOSE_NOWRITE, the order
 * of IN_OPEN and the IN_MODIFY of O_TRUNC, O_PATH (no events), a watch
 * added after the open, a read by another process, and fstat, lseek,
 * write and F_GETPIPE_SZ of the inotify descriptor. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

static int wds[8];
static int nwds;

static int wname(int wd) {
    for (int i = 0; i < nwds; i++)
        if (wds[i] == wd)
            return i;
    wds[nwds] = wd;
    return nwds++;
}

static void drain(int fd, const char *what) {
    static const struct { unsigned bit; const char *name; } names[] = {
        {IN_ACCESS, "ACCESS"}, {IN_MODIFY, "MODIFY"}, {IN_ATTRIB, "ATTRIB"},
        {IN_CLOSE_WRITE, "CLOSE_WRITE"}, {IN_CLOSE_NOWRITE, "CLOSE_NOWRITE"},
        {IN_OPEN, "OPEN"}, {IN_CREATE, "CREATE"}, {IN_DELETE, "DELETE"},
        {IN_IGNORED, "IGNORED"}, {IN_ISDIR, "ISDIR"},
    };
    char buf[8192] __attribute__((aligned(8)));
    printf("%s:\n", what);
    for (;;) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 0) != 1)
            break;
        ssize_t got = read(fd, buf, sizeof buf);
        if (got <= 0)
            break;
        for (char *at = buf; at < buf + got;) {
            struct inotify_event *e = (struct inotify_event *)at;
            printf("  W%d ", wname(e->wd));
            const char *sep = "";
            for (unsigned i = 0; i < sizeof names / sizeof names[0]; i++)
                if (e->mask & names[i].bit) {
                    printf("%s%s", sep, names[i].name);
                    sep = "|";
                }
            printf(" %s\n", e->len ? e->name : "");
            at += sizeof *e + e->len;
        }
    }
}

int main(int argc, char **argv) {
    if (argc != 2)
        return 2;
    char dir[4096], file[4200], sub[4200];
    snprintf(dir, sizeof dir, "%s/accessed", argv[1]);
    snprintf(file, sizeof file, "%s/f", dir);
    snprintf(sub, sizeof sub, "%s/sub", dir);
    mkdir(dir, 0755);
    mkdir(sub, 0755);
    setvbuf(stdout, NULL, _IOLBF, 0);
    char b[64];

    int fd = inotify_init1(IN_CLOEXEC);
    int x = open(file, O_CREAT | O_WRONLY, 0644);
    if (write(x, "hello world", 11) != 11)
        perror("write");
    close(x);

    /* A watch of the file alone: identical consecutive events merge. */
    wname(inotify_add_watch(fd, file, IN_ALL_EVENTS));
    x = open(file, O_RDONLY);
    read(x, b, 2);
    read(x, b, 2);
    pread(x, b, 2, 0);
    read(x, b, sizeof b);
    read(x, b, sizeof b); /* at the end: no event */
    close(x);
    drain(fd, "file watch: open, reads, read at the end, close");

    /* The directory too: its events and the file's alternate. */
    wname(inotify_add_watch(fd, dir, IN_ALL_EVENTS));
    x = open(file, O_RDONLY);
    read(x, b, 2);
    pread(x, b, 2, 4);
    struct iovec iv[2] = {{b, 2}, {b + 2, 2}};
    readv(x, iv, 2);
    int null = open("/dev/null", O_WRONLY);
    off_t from = 0;
    sendfile(null, x, &from, 4);
    close(null);
    close(x);
    drain(fd, "directory and file: read, pread, readv, sendfile, close");

    x = open(file, O_WRONLY | O_TRUNC);
    close(x);
    drain(fd, "O_TRUNC of a non-empty file");
    x = open(file, O_RDWR);
    if (write(x, "abc", 3) != 3)
        perror("write");
    lseek(x, 0, SEEK_SET);
    read(x, b, 3);
    close(x);
    drain(fd, "O_RDWR: write, read, close");

    x = open(file, O_PATH);
    close(x);
    drain(fd, "O_PATH");

    DIR *d = opendir(dir);
    while (readdir(d))
        ;
    closedir(d);
    d = opendir(sub);
    while (readdir(d))
        ;
    closedir(d);
    drain(fd, "opendir, readdir, closedir; of a subdirectory");

    /* Opened before the watch: its reads and close are reported. */
    int late = inotify_init1(0);
    x = open(file, O_RDONLY);
    wname(inotify_add_watch(late, file, IN_ACCESS | IN_CLOSE_NOWRITE));
    read(x, b, 1);
    close(x);
    drain(late, "watch added after the open");
    close(late);

    /* Another process reads. */
    pid_t child = fork();
    if (child == 0) {
        int y = open(file, O_RDONLY);
        read(y, b, 1);
        close(y);
        _exit(0);
    }
    waitpid(child, NULL, 0);
    drain(fd, "a child's open, read, close");

    struct stat st;
    fstat(fd, &st);
    printf("fstat: mode %o size %ld nlink %ld\n", st.st_mode, (long)st.st_size,
           (long)st.st_nlink);
    /* Every inotify descriptor shows the one anonymous inode. */
    int fresh = inotify_init1(IN_CLOEXEC);
    struct stat fs;
    fstat(fresh, &fs);
    printf("fstat as a new descriptor's: dev %d ino %d owner %d times %d blksize %d\n",
           st.st_dev == fs.st_dev, st.st_ino == fs.st_ino,
           st.st_uid == fs.st_uid && st.st_gid == fs.st_gid,
           st.st_mtim.tv_sec == fs.st_mtim.tv_sec && st.st_ctim.tv_sec == fs.st_ctim.tv_sec,
           st.st_blksize == fs.st_blksize);
    struct statx sx, fx;
    statx(fd, "", AT_EMPTY_PATH, STATX_BASIC_STATS, &sx);
    statx(fresh, "", AT_EMPTY_PATH, STATX_BASIC_STATS, &fx);
    printf("statx as a new descriptor's: dev %d ino %d mode %o nlink %u\n",
           sx.stx_dev_major == fx.stx_dev_major && sx.stx_dev_minor == fx.stx_dev_minor,
           sx.stx_ino == fx.stx_ino, sx.stx_mode, sx.stx_nlink);
    close(fresh);
    errno = 0;
    ssize_t w = write(fd, "x", 1);
    printf("write: %zd %s\n", w, strerror(errno));
    errno = 0;
    off_t at = lseek(fd, 5, SEEK_SET);
    printf("lseek: %ld %s\n", (long)at, strerror(errno));
    errno = 0;
    int psz = fcntl(fd, F_GETPIPE_SZ);
    printf("F_GETPIPE_SZ: %d %s\n", psz, strerror(errno));
    close(fd);
    return 0;
}
