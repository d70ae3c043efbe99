/* Readers of one file race a process that rewrites, truncates and
 * extends it, and a process that creates, fills and removes other files
 * (whose freed blocks the file system reuses). The file's bytes are
 * always lowercase letters or zeros (a hole after a truncate and an
 * extension); the other files hold 0xEE. A reader reports any other
 * byte it gets. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAXSZ (256 * 1024)
#define ROUNDS 400
#define READS 6000
#define READERS 3

static const char *dir;
/* Read end of a pipe whose only write end the writer holds: it hangs up
 * when the writer is done, and the others stop (after their minimum). */
static int done_fd = -1;

static int writer_done(void) {
    struct pollfd p = {.fd = done_fd, .events = POLLIN};
    return poll(&p, 1, 0) == 1;
}

static void fill(char *b, size_t n, off_t at, int gen) {
    for (size_t i = 0; i < n; i++)
        b[i] = 'a' + (((at + i) / 16 + gen) % 26);
}

static void die(const char *what) { perror(what); exit(2); }

static void writer(const char *path) {
    static char b[MAXSZ];
    int fd = open(path, O_RDWR);
    if (fd < 0) die("writer open");
    for (int g = 0; g < ROUNDS; g++) {
        size_t n = 4096 + (size_t)(g * 7919) % (MAXSZ - 4096);
        switch (g % 4) {
        case 0: /* rewrite in place */
            fill(b, n, 0, g);
            if (pwrite(fd, b, n, 0) != (ssize_t)n) die("pwrite");
            break;
        case 1: /* truncate shorter */
            if (ftruncate(fd, n / 3) != 0) die("ftruncate");
            break;
        case 2: /* extend with a hole, then write past it */
            if (ftruncate(fd, n) != 0) die("ftruncate");
            fill(b, 8192, n, g);
            if (pwrite(fd, b, 8192, n) != 8192) die("pwrite past");
            break;
        case 3: /* truncate to nothing and write again */
            if (ftruncate(fd, 0) != 0) die("ftruncate 0");
            fill(b, n, 0, g);
            if (pwrite(fd, b, n, 0) != (ssize_t)n) die("pwrite again");
            break;
        }
    }
    close(fd);
}

static void others(void) {
    static char b[65536];
    char p[4096];
    memset(b, 0xEE, sizeof b);
    for (int i = 0; i < ROUNDS || !writer_done(); i++) {
        snprintf(p, sizeof p, "%s/other%d", dir, i % 8);
        int fd = open(p, O_CREAT | O_TRUNC | O_WRONLY, 0644);
        if (fd < 0) die("other open");
        size_t n = 4096 + (size_t)(i * 104729) % (sizeof b - 4096);
        if (write(fd, b, n) != (ssize_t)n) die("other write");
        close(fd);
        if (i % 3 == 2 && unlink(p) != 0) die("unlink");
    }
}

static int reader(const char *path, int who) {
    static char b[MAXSZ + 8192];
    int fd = open(path, O_RDONLY);
    if (fd < 0) die("reader open");
    unsigned s = 12345 + who;
    for (int i = 0; i < READS || !writer_done(); i++) {
        s = s * 1103515245 + 12345;
        off_t at = (s >> 8) % MAXSZ;
        size_t n = 1 + (s >> 4) % 16384;
        ssize_t got = pread(fd, b, n, at);
        if (got < 0) die("pread");
        for (ssize_t k = 0; k < got; k++) {
            unsigned char c = b[k];
            if (c != 0 && (c < 'a' || c > 'z')) {
                printf("reader %d: byte 0x%02x at offset %lld\n", who, c,
                       (long long)(at + k));
                return 1;
            }
        }
    }
    close(fd);
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    dir = argv[1];
    char path[4096];
    snprintf(path, sizeof path, "%s/target", dir);
    int fd = open(path, O_CREAT | O_TRUNC | O_RDWR, 0644);
    if (fd < 0) die("create");
    close(fd);
    int pfd[2];
    if (pipe(pfd) != 0) die("pipe");
    done_fd = pfd[0];
    pid_t kids[READERS + 2];
    int nk = 0;
    if ((kids[nk++] = fork()) == 0) { writer(path); _exit(0); }
    close(pfd[1]);
    for (int r = 0; r < READERS; r++)
        if ((kids[nk++] = fork()) == 0) _exit(reader(path, r));
    if ((kids[nk++] = fork()) == 0) { others(); _exit(0); }
    int bad = 0;
    for (int k = 0; k < nk; k++) {
        int st;
        if (waitpid(kids[k], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
            bad = 1;
    }
    puts(bad ? "race: FAILED" : "race: passed");
    return bad;
}
