/* fstat right after open, with changes in between made by another process
 * and by this one, and of a directory (glibc's opendir). Prints what
 * fstat shows; compared with the same probe on a host tmpfs. Usage: fstat DIR */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char f[4096], g[4096], d[4096], e[4096];

static void show(const char *what, int fd) {
    struct stat st;
    if (fstat(fd, &st) != 0) { perror(what); exit(1); }
    printf("%s: size %lld mode %o nlink %lu\n", what, (long long)st.st_size,
           st.st_mode, (unsigned long)st.st_nlink);
}

static struct timespec mtime(int fd) {
    struct stat st;
    fstat(fd, &st);
    return st.st_mtim;
}

static int later(struct timespec a, struct timespec b) {
    return b.tv_sec > a.tv_sec || (b.tv_sec == a.tv_sec && b.tv_nsec > a.tv_nsec);
}

static void child(int what) {
    pid_t pid = fork();
    if (pid == 0) {
        int fd;
        switch (what) {
        case 0:
            fd = open(f, O_WRONLY | O_APPEND);
            if (write(fd, "0123456789012345678901234567890123456789012345678", 50) != 50) _exit(1);
            close(fd);
            chmod(f, 0600);
            link(f, g);
            break;
        case 1:
            truncate(f, 7);
            break;
        case 2:
            close(open(e, O_CREAT | O_WRONLY, 0644));
            mkdir(g, 0755);
            break;
        case 3:
            unlink(f);
            break;
        case 4:
            fd = open(f, O_WRONLY | O_APPEND);
            if (write(fd, "12345", 5) != 5) _exit(1);
            close(fd);
            break;
        }
        _exit(0);
    }
    int st;
    waitpid(pid, &st, 0);
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    snprintf(f, sizeof f, "%s/f", argv[1]);
    snprintf(g, sizeof g, "%s/g", argv[1]);
    snprintf(d, sizeof d, "%s/sub", argv[1]);
    int fd = open(f, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    show("created", fd);
    if (write(fd, "0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789", 100) != 100) return 1;
    close(fd);
    fd = open(f, O_RDWR);
    show("opened", fd);
    close(fd);
    fd = open(f, O_RDWR);
    child(0);
    show("after their append, chmod and link", fd);
    close(fd);
    int fd2 = open(f, O_RDWR);
    fd = open(f, O_RDONLY);
    struct timespec m0 = mtime(fd2);
    usleep(2000);
    fd = open(f, O_RDONLY);
    if (pwrite(fd2, "xyz", 3, 200) != 3) return 1;
    show("after my write through another descriptor", fd);
    printf("mtime moved %d\n", later(m0, mtime(fd)));
    close(fd2);
    fd = open(f, O_RDONLY);
    child(1);
    show("after their truncate", fd);
    fd = open(f, O_RDONLY);
    ftruncate(fd2 = open(f, O_WRONLY), 3);
    show("after my truncate", fd);
    close(fd2);
    /* Opened while my own posted requests (a write's end, a close) may
     * still wait in the ring: the open's answer must show them. */
    fd2 = open(f, O_WRONLY | O_APPEND);
    if (write(fd2, "abcdefghij", 10) != 10) return 1;
    fd = open(f, O_RDONLY);
    show("after my append, opened at once", fd);
    if (write(fd2, "klmnopqrstuvwxyz", 16) != 16) return 1;
    close(fd2);
    fd = open(f, O_RDONLY);
    show("after my append and close, opened at once", fd);
    /* lseek(SEEK_END) right after open (stdio's fopen "a"), and after
     * another process's and my own appends in between. */
    fd = open(f, O_RDONLY);
    printf("end at once %lld\n", (long long)lseek(fd, 0, SEEK_END));
    fd = open(f, O_RDONLY);
    child(4);
    printf("end after their append %lld\n", (long long)lseek(fd, 0, SEEK_END));
    fd2 = open(f, O_WRONLY | O_APPEND);
    fd = open(f, O_RDONLY);
    if (write(fd2, "1234567", 7) != 7) return 1;
    printf("end after my append %lld\n", (long long)lseek(fd, 0, SEEK_END));
    close(fd2);
    /* An O_APPEND descriptor's offset lives at the server: its lseek is a
     * message, after which fstat must still see what changed before. */
    fd2 = open(f, O_WRONLY | O_APPEND);
    child(4);
    printf("append end %lld\n", (long long)lseek(fd2, 0, SEEK_END));
    show("append descriptor after their append", fd2);
    printf("append end again %lld\n", (long long)lseek(fd2, 0, SEEK_END));
    show("append descriptor", fd2);
    close(fd2);
    fd = open(f, O_RDONLY);
    fchmod(fd, 0640);
    show("after my fchmod", fd);
    fd = open(f, O_RDONLY);
    child(3);
    show("after their unlink", fd);
    /* Directories: glibc's opendir opens and fstats. */
    mkdir(d, 0755);
    snprintf(e, sizeof e, "%s/e", d);
    snprintf(g, sizeof g, "%s/gsub", d);
    fd = open(d, O_RDONLY | O_DIRECTORY);
    show("dir opened", fd);
    struct timespec d0 = mtime(fd);
    usleep(2000);
    fd = open(d, O_RDONLY | O_DIRECTORY);
    child(2);
    show("dir after their create and mkdir", fd);
    printf("dir mtime moved %d\n", later(d0, mtime(fd)));
    DIR *dp = opendir(d);
    long k = 0;
    while (readdir(dp)) k++;
    printf("dir entries %ld\n", k);
    show("dir through opendir", dirfd(dp));
    closedir(dp);
    return 0;
}
