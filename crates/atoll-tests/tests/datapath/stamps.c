/* What reads and writes do to a file's timestamps (relatime, as the
 * mount's default): printed as yes/no, so that runs compare equal. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
    printf("%-36s atime %s mtime %s ctime %s\n", what,
           moved(a.st_atim, b.st_atim) ? "moved" : "kept",
           moved(a.st_mtim, b.st_mtim) ? "moved" : "kept",
           moved(a.st_ctim, b.st_ctim) ? "moved" : "kept");
}

int main(int argc, char **argv) {
    char buf[8192];
    memset(buf, 'x', sizeof buf);
    fd = open(argv[1], O_CREAT | O_TRUNC | O_RDWR, 0644);
    if (fd < 0) { perror("open"); return 2; }
    if (pwrite(fd, buf, 8192, 0) != 8192) return 2;
    struct stat a, b;
#define STEP(what, call) do { tick(); a = now(); call; b = now(); show(what, a, b); } while (0)
    STEP("pread after a write", (void)pread(fd, buf, 4096, 0));
    STEP("pread after a pread", (void)pread(fd, buf, 4096, 4096));
    STEP("pwrite inside the file", (void)pwrite(fd, buf, 4096, 100));
    STEP("pwrite extending the file", (void)pwrite(fd, buf, 4096, 8192));
    STEP("pread after writes", (void)pread(fd, buf, 100, 50));
    STEP("pwrite of nothing", (void)pwrite(fd, buf, 0, 0));
    STEP("pread of nothing after a write", { (void)pwrite(fd, buf, 10, 0); tick(); a = now(); (void)pread(fd, buf, 0, 0); });
    STEP("pread past the end after a write", { (void)pwrite(fd, buf, 10, 0); tick(); a = now(); (void)pread(fd, buf, 10, 1 << 20); });
    STEP("pread at the end after a truncate", { (void)ftruncate(fd, 4096); tick(); a = now(); (void)pread(fd, buf, 100, 4096); });
    STEP("read after a read", { (void)lseek(fd, 0, SEEK_SET); (void)read(fd, buf, 10); });
    STEP("write at the offset", (void)write(fd, buf, 10));
    STEP("read at the offset", (void)read(fd, buf, 10));
    return 0;
}
