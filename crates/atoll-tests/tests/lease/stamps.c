/* Reads in a row, which atoll may serve without a message (client
 * `lease.rs`), against what relatime makes of the atime on tmpfs: each
 * step printed as moved/kept, so that runs compare equal. Then an
 * inotify watch added to a file whose blocks a description already
 * knows: every read after it is reported, as on tmpfs. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int fd;

/* Timestamps come from the kernel's coarse clock: step past a tick so
 * that a change shows. */
static void tick(void) {
    struct timespec t = {0, 20 * 1000 * 1000};
    nanosleep(&t, NULL);
}

static struct stat now(void) {
    struct stat s;
    if (fstat(fd, &s) != 0) { perror("fstat"); exit(2); }
    return s;
}

static int moved(struct timespec a, struct timespec b) {
    return a.tv_sec != b.tv_sec || a.tv_nsec != b.tv_nsec;
}

static void show(const char *what, struct stat a, struct stat b) {
    printf("%-40s atime %s\n", what, moved(a.st_atim, b.st_atim) ? "moved" : "kept");
}

static int accesses(int in) {
    char buf[4096] __attribute__((aligned(8)));
    int k = 0;
    ssize_t n;
    while ((n = read(in, buf, sizeof buf)) > 0)
        for (char *p = buf; p < buf + n;) {
            struct inotify_event *e = (struct inotify_event *)p;
            k += (e->mask & IN_ACCESS) != 0;
            p += sizeof *e + e->len;
        }
    return k;
}

int main(int argc, char **argv) {
    char buf[16384];
    memset(buf, 'x', sizeof buf);
    fd = open(argv[1], O_CREAT | O_TRUNC | O_RDWR, 0644);
    if (fd < 0) { perror("open"); return 2; }
    if (pwrite(fd, buf, sizeof buf, 0) != sizeof buf) return 2;
    struct stat a, b;
#define STEP(what, call) do { tick(); a = now(); call; b = now(); show(what, a, b); } while (0)
    STEP("pread after a write", (void)pread(fd, buf, 10, 0));
    for (int i = 0; i < 4; i++)
        STEP("pread after a pread", (void)pread(fd, buf, 10, 100 * i));
    STEP("pwrite inside", (void)pwrite(fd, buf, 10, 0));
    STEP("pread after the pwrite", (void)pread(fd, buf, 10, 4096));
    STEP("pread again", (void)pread(fd, buf, 10, 4096));
    STEP("chmod", (void)fchmod(fd, 0600));
    STEP("pread after chmod", (void)pread(fd, buf, 10, 0));
    STEP("pread again", (void)pread(fd, buf, 10, 0));
    /* An atime set back two days: relatime moves it at the next read. */
    struct timespec old[2] = {{time(NULL) - 2 * 86400, 0}, {0, UTIME_OMIT}};
    STEP("atime set back two days", (void)futimens(fd, old));
    STEP("pread of a day-old atime", (void)pread(fd, buf, 10, 0));
    STEP("pread again", (void)pread(fd, buf, 10, 0));
    /* A second name moves the ctime. */
    char other[4096];
    snprintf(other, sizeof other, "%s.link", argv[1]);
    STEP("link", (void)link(argv[1], other));
    STEP("pread after link", (void)pread(fd, buf, 10, 0));
    STEP("unlink", (void)unlink(other));
    STEP("pread after unlink", (void)pread(fd, buf, 10, 0));
    STEP("pread again", (void)pread(fd, buf, 10, 0));
    /* A watch added while this description knows the blocks. */
    int na = open(argv[1], O_RDONLY | O_NOATIME);
    if (na < 0) { perror("open O_NOATIME"); return 2; }
    for (int i = 0; i < 3; i++)
        (void)pread(na, buf, 10, 0);
    int in = inotify_init1(IN_NONBLOCK);
    if (in < 0 || inotify_add_watch(in, argv[1], IN_ACCESS) < 0) { perror("inotify"); return 2; }
    /* Also through a description that never moves the atime and knows
     * the blocks too. */
    int seen = 0;
    for (int i = 0; i < 3; i++) {
        (void)pread(fd, buf, 10, 0);
        seen += accesses(in);
        (void)pread(na, buf, 10, 0);
        seen += accesses(in);
    }
    printf("watched: %d reads reported\n", seen);
    return 0;
}
