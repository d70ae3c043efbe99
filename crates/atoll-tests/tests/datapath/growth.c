/* Calls that grow a file without writing (truncate, ftruncate, fallocate
 * with and without FALLOC_FL_KEEP_SIZE) under a file size limit: past it,
 * a call that would grow the file is EFBIG with SIGXFSZ; one inside the
 * file's size is not; a punched hole never is. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
static volatile int xfsz;
static void h(int s) { (void)s; xfsz++; }
#define T(name, call) do { xfsz = 0; errno = 0; long r = (call); struct stat st; fstat(fd, &st); \
  printf("%-28s r=%ld %-6s sig=%d size=%ld\n", name, r, r < 0 ? strerrorname_np(errno) : "", xfsz, (long)st.st_size); } while (0)
int main(int argc, char **argv) {
    const char *p = argv[1];
    int fd = open(p, O_RDWR | O_CREAT | O_TRUNC, 0644);
    ftruncate(fd, 200000);
    signal(SIGXFSZ, h);
    struct rlimit rl = {65536, RLIM_INFINITY}; setrlimit(RLIMIT_FSIZE, &rl);
    T("ftruncate shrink past limit", ftruncate(fd, 100000));
    T("ftruncate grow past limit", ftruncate(fd, 150000));
    T("ftruncate to 32K", ftruncate(fd, 32768));
    T("ftruncate to limit", ftruncate(fd, 65536));
    T("ftruncate limit+1", ftruncate(fd, 65537));
    T("truncate 1M", truncate(p, 1 << 20));
    T("fallocate 1M", fallocate(fd, 0, 0, 1 << 20));
    T("fallocate keep 1M", fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, 1 << 20));
    T("fallocate within", fallocate(fd, 0, 0, 4096));
    T("fallocate bad len", fallocate(fd, 0, 0, 0));
    T("punch hole past limit", fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 1 << 20));
    T("pwrite at limit", pwrite(fd, "x", 1, 65536));
    T("pwrite crossing", pwrite(fd, "xyz", 3, 65535));
    rl.rlim_cur = RLIM_INFINITY; setrlimit(RLIMIT_FSIZE, &rl);
    ftruncate(fd, 200000);
    rl.rlim_cur = 65536; setrlimit(RLIMIT_FSIZE, &rl);
    T("big: fallocate inside size", fallocate(fd, 0, 0, 100000));
    T("big: fallocate keep inside", fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, 100000));
    T("big: fallocate at limit", fallocate(fd, 0, 65536, 10));
    T("big: truncate same", ftruncate(fd, 200000));
    /* copy_file_range into the file under the limit: cut short at it,
     * EFBIG at or past it (no SIGXFSZ), the input's offset moved only by
     * what was copied. */
    char q[4096];
    snprintf(q, sizeof q, "%s.src", p);
    rl.rlim_cur = RLIM_INFINITY; setrlimit(RLIMIT_FSIZE, &rl);
    int src = open(q, O_RDWR | O_CREAT | O_TRUNC, 0644);
    static char block[100000];
    memset(block, 'c', sizeof block);
    if (write(src, block, sizeof block) != sizeof block) return 1;
    ftruncate(fd, 0);
    rl.rlim_cur = 65536; setrlimit(RLIMIT_FSIZE, &rl);
    off64_t in = 0, out = 65000;
    T("copy crossing the limit", copy_file_range(src, &in, fd, &out, 100000, 0));
    T("copy at the limit", copy_file_range(src, &in, fd, &out, 100, 0));
    lseek(src, 0, SEEK_SET);
    lseek(fd, 0, SEEK_SET);
    T("copy with own offsets", copy_file_range(src, 0, fd, 0, 100000, 0));
    printf("input offset %ld, output offset %ld\n", (long)lseek(src, 0, SEEK_CUR), (long)lseek(fd, 0, SEEK_CUR));
    T("copy at the limit, own offsets", copy_file_range(src, 0, fd, 0, 100, 0));
    printf("input offset %ld\n", (long)lseek(src, 0, SEEK_CUR));
    return 0;
}
