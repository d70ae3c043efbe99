/* Bad pointers given to file system calls: every call below must fail
 * with the errno Linux gives (EFAULT, or the error Linux checks first),
 * never kill the program. Prints one line per call: "name: ERRNO" (or
 * "name: ok"), so a run on a host directory and a run inside atoll can be
 * compared line by line.
 *
 * Usage: efault DIR   (DIR: an empty directory; the probe works inside it)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <poll.h>
#include <spawn.h>
#include <sys/ioctl.h>
#include <sys/sendfile.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

static const char *ename(int e)
{
    switch (e) {
    case EFAULT: return "EFAULT";
    case ENOENT: return "ENOENT";
    case EEXIST: return "EEXIST";
    case EINVAL: return "EINVAL";
    case ENOTDIR: return "ENOTDIR";
    case EISDIR: return "EISDIR";
    case EBADF: return "EBADF";
    case ENODATA: return "ENODATA";
    case ERANGE: return "ERANGE";
    case EOPNOTSUPP: return "EOPNOTSUPP";
    case ENAMETOOLONG: return "ENAMETOOLONG";
    case EPERM: return "EPERM";
    case EACCES: return "EACCES";
    default: return "other";
    }
}

static void report(const char *name, long r)
{
    if (r < 0)
        printf("%s: %s\n", name, ename(errno));
    else
        printf("%s: ok\n", name);
    fflush(stdout);
}

/* Calls whose count matters too: the value, or the errno. */
#define V(name, expr)                                                          \
    do {                                                                       \
        errno = 0;                                                             \
        long r_ = (long)(expr);                                                \
        if (r_ < 0)                                                            \
            printf("%s: %s\n", name, ename(errno));                            \
        else                                                                   \
            printf("%s: %ld\n", name, r_);                                     \
        fflush(stdout);                                                        \
    } while (0)

#define T(name, expr)                                                          \
    do {                                                                       \
        errno = 0;                                                             \
        report(name, (long)(expr));                                            \
    } while (0)

int main(int argc, char **argv)
{
    if (argc != 2 || chdir(argv[1]) != 0) {
        perror("efault DIR");
        return 2;
    }
    long page = sysconf(_SC_PAGESIZE);
    /* Bad memory of three kinds: never mapped, mapped without access, and
     * read-only (bad for calls that write to the program). */
    char *volatile bad = (char *)0xdeadc0deUL;
    char *none = mmap(NULL, page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    char *ro = mmap(NULL, page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    /* A string that runs into an unmapped page without its NUL. */
    char *two = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    munmap(two + page, page);
    char *edge = two + page - 4;
    memcpy(edge, "dddd", 4);

    /* Fixtures: a file with data, a directory, a symlink. */
    int fd = open("f", O_CREAT | O_RDWR, 0644);
    if (fd < 0 || write(fd, "hello world\n", 12) != 12 || mkdir("d", 0755) != 0 ||
        symlink("f", "l") != 0 || setxattr("f", "user.a", "v", 1, 0) != 0) {
        perror("fixtures");
        return 2;
    }
    int dfd = open("d", O_RDONLY | O_DIRECTORY);
    struct stat st;
    struct statx stx;
    struct statfs sfs;
    char buf[256];

    T("open", open(bad, O_RDONLY));
    T("open-none", open(none, O_RDONLY));
    T("open-edge", open(edge, O_RDONLY));
    T("open-creat", open(bad, O_CREAT | O_WRONLY, 0644));
    T("sys-open", syscall(SYS_open, bad, O_RDONLY));
    T("openat", openat(AT_FDCWD, bad, O_RDONLY));
    T("openat-dirfd", openat(dfd, bad, O_RDONLY));
    struct open_how how = {.flags = O_RDONLY};
    T("openat2-path", syscall(SYS_openat2, AT_FDCWD, bad, &how, sizeof how));
    T("openat2-how", syscall(SYS_openat2, AT_FDCWD, "f", bad, sizeof how));
    T("creat", creat(bad, 0644));
    T("mkdir", mkdir(bad, 0755));
    T("mkdir-none", mkdir(none, 0755));
    T("sys-mkdir", syscall(SYS_mkdir, bad, 0755));
    T("mkdirat", mkdirat(dfd, bad, 0755));
    T("mknod", mknod(bad, S_IFREG | 0644, 0));
    T("mknodat", mknodat(AT_FDCWD, bad, S_IFREG | 0644, 0));
    T("mkfifo", mkfifo(bad, 0644));
    T("unlink", unlink(bad));
    T("unlinkat", unlinkat(AT_FDCWD, bad, 0));
    T("unlinkat-dir", unlinkat(dfd, bad, AT_REMOVEDIR));
    T("rmdir", rmdir(bad));
    T("rename-old", rename(bad, "g"));
    T("rename-new", rename("f", bad));
    T("renameat", renameat(AT_FDCWD, "f", dfd, bad));
    T("renameat2", syscall(SYS_renameat2, AT_FDCWD, bad, AT_FDCWD, "g", 0));
    T("link-old", link(bad, "g"));
    T("link-new", link("f", bad));
    T("linkat", linkat(AT_FDCWD, "f", dfd, bad, 0));
    T("symlink-target", symlink(bad, "g"));
    T("symlink-path", symlink("f", bad));
    T("symlinkat", symlinkat("f", dfd, bad));
    T("readlink-path", readlink(bad, buf, sizeof buf));
    T("readlink-buf", readlink("l", bad, sizeof buf));
    T("readlink-ro", readlink("l", ro, sizeof buf));
    T("readlinkat", readlinkat(AT_FDCWD, "l", bad, sizeof buf));
    T("stat-path", stat(bad, &st));
    T("stat-buf", stat("f", (struct stat *)bad));
    T("stat-ro", stat("f", (struct stat *)ro));
    T("sys-stat", syscall(SYS_stat, "f", bad));
    T("lstat-path", lstat(bad, &st));
    T("lstat-buf", lstat("l", (struct stat *)bad));
    T("fstatat", fstatat(AT_FDCWD, bad, &st, 0));
    T("fstatat-buf", fstatat(dfd, "..", (struct stat *)bad, 0));
    T("statx-path", statx(AT_FDCWD, bad, 0, STATX_BASIC_STATS, &stx));
    T("statx-buf", statx(AT_FDCWD, "f", 0, STATX_BASIC_STATS, (struct statx *)bad));
    T("access", access(bad, F_OK));
    T("faccessat", faccessat(AT_FDCWD, bad, R_OK, 0));
    T("faccessat2", syscall(SYS_faccessat2, AT_FDCWD, bad, R_OK, AT_EACCESS));
    T("chmod", chmod(bad, 0644));
    T("fchmodat", fchmodat(AT_FDCWD, bad, 0644, 0));
    T("chown", chown(bad, 0, 0));
    T("lchown", lchown(bad, 0, 0));
    T("fchownat", fchownat(AT_FDCWD, bad, 0, 0, 0));
    T("truncate", truncate(bad, 0));
    T("utimensat-path", utimensat(AT_FDCWD, bad, NULL, 0));
    T("utimensat-times", utimensat(AT_FDCWD, "f", (struct timespec *)bad, 0));
    T("sys-utimes-times", syscall(SYS_utimes, "f", bad));
    T("chdir", chdir(bad));
    T("statfs-path", statfs(bad, &sfs));
    T("statfs-buf", statfs("f", (struct statfs *)bad));
    T("fstatfs-buf", fstatfs(fd, (struct statfs *)bad));
    T("getxattr-path", getxattr(bad, "user.a", buf, sizeof buf));
    T("getxattr-name", getxattr("f", bad, buf, sizeof buf));
    T("getxattr-value", getxattr("f", "user.a", bad, sizeof buf));
    T("lgetxattr-name", lgetxattr("f", bad, buf, sizeof buf));
    T("fgetxattr-value", fgetxattr(fd, "user.a", bad, sizeof buf));
    T("setxattr-path", setxattr(bad, "user.b", "v", 1, 0));
    T("setxattr-name", setxattr("f", bad, "v", 1, 0));
    T("setxattr-value", setxattr("f", "user.b", bad, 10, 0));
    T("lsetxattr-name", lsetxattr("f", bad, "v", 1, 0));
    T("fsetxattr-value", fsetxattr(fd, "user.b", bad, 10, 0));
    T("listxattr-path", listxattr(bad, buf, sizeof buf));
    T("listxattr-buf", listxattr("f", bad, sizeof buf));
    T("llistxattr-buf", llistxattr("f", bad, sizeof buf));
    T("flistxattr-buf", flistxattr(fd, bad, sizeof buf));
    T("removexattr-path", removexattr(bad, "user.a"));
    T("removexattr-name", removexattr("f", bad));
    T("lremovexattr-name", lremovexattr("f", bad));
    T("fremovexattr-name", fremovexattr(fd, bad));

    /* Buffers of calls on a descriptor. */
    T("read", (lseek(fd, 0, SEEK_SET), read(fd, bad, 12)));
    T("read-ro", pread(fd, ro, 12, 0));
    T("read-none", pread(fd, none, 12, 0));
    T("sys-read", (lseek(fd, 0, SEEK_SET), syscall(SYS_read, fd, bad, 12)));
    T("write", write(fd, bad, 12));
    T("write-none", pwrite(fd, none, 12, 0));
    T("pread", pread(fd, bad, 12, 0));
    T("pwrite", pwrite(fd, bad, 12, 0));
    struct iovec iov = {.iov_base = bad, .iov_len = 12};
    T("readv-iov", preadv(fd, (struct iovec *)bad, 1, 0));
    T("readv-base", preadv(fd, &iov, 1, 0));
    T("writev-iov", writev(fd, (struct iovec *)bad, 1));
    T("writev-base", writev(fd, &iov, 1));
    T("fstat", fstat(fd, (struct stat *)bad));
    T("sys-fstat", syscall(SYS_fstat, fd, bad));
    T("getdents64", syscall(SYS_getdents64, dfd, bad, 4096));
    T("getcwd", syscall(SYS_getcwd, bad, 4096));
    T("getcwd-ro", syscall(SYS_getcwd, ro, 4096));
    /* A buffer whose first 4 bytes are accessible: Linux moves those (a
     * short count), and never touches a buffer at end of file. */
    V("pread-partial", pread(fd, edge, 12, 0));
    V("read-partial", (lseek(fd, 0, SEEK_SET), read(fd, edge, 12)));
    V("read-partial-pos", lseek(fd, 0, SEEK_CUR));
    V("pread-eof", pread(fd, bad, 12, 100));
    V("read-eof", (lseek(fd, 0, SEEK_END), read(fd, bad, 12)));
    V("pwrite-partial", pwrite(fd, edge, 12, 20));
    V("size-after", lseek(fd, 0, SEEK_END));
    /* A large buffer whose tail is unmapped or read-only but lies beyond
     * the end of the file: Linux copies only the file's 24 bytes, so the
     * read is whole (no EFAULT); with the bad part within those bytes it
     * is short. */
    char *rwro = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    mprotect(rwro + page, page, PROT_READ);
    V("pread-tail-unmapped", pread(fd, two + page - 64, 65536, 0));
    V("read-tail-unmapped", (lseek(fd, 0, SEEK_SET), read(fd, two + page - 64, 65536)));
    V("read-tail-unmapped-pos", lseek(fd, 0, SEEK_CUR));
    V("pread-tail-ro", pread(fd, rwro + page - 32, 4096, 0));
    V("pread-tail-ro-short", pread(fd, rwro + page - 8, 4096, 0));
    V("read-tail-ro-short", (lseek(fd, 4, SEEK_SET), read(fd, rwro + page - 8, 65536)));
    V("read-tail-ro-short-pos", lseek(fd, 0, SEEK_CUR));
    V("pread-tail-ro-none", pread(fd, rwro + page, 65536, 0));
    V("pread-tail-ro-eof", pread(fd, rwro + page, 65536, 24));
    V("read-dir", read(dfd, bad, 12));
    /* getdents64 into a large buffer: EFAULT when no record can be
     * written, the records that fit when only its tail is unmapped (the
     * directory holds "." and ".."), and the listing goes on from there. */
    T("getdents64-big", syscall(SYS_getdents64, dfd, bad, 65536));
    int lfd = open("d", O_RDONLY | O_DIRECTORY);
    V("getdents64-tail", syscall(SYS_getdents64, lfd, two + page - 1024, 65536) > 0 ? 1 : -1);
    V("getdents64-tail-end", syscall(SYS_getdents64, lfd, two + page - 1024, 65536));
    close(lfd);
    lfd = open("d", O_RDONLY | O_DIRECTORY);
    V("getdents64-first-only", syscall(SYS_getdents64, lfd, two + page - 30, 65536) > 0 ? 1 : -1);
    V("getdents64-second", syscall(SYS_getdents64, lfd, two + page - 1024, 65536) > 0 ? 1 : -1);
    V("getdents64-then-end", syscall(SYS_getdents64, lfd, two + page - 1024, 65536));
    close(lfd);
    T("fcntl-getlk", fcntl(fd, F_GETLK, bad));
    T("fcntl-setlk", fcntl(fd, F_SETLK, bad));
    T("ioctl-fionread", ioctl(fd, FIONREAD, bad));
    int g = open("g2", O_CREAT | O_RDWR, 0644);
    T("copy_file_range-off", copy_file_range(fd, (loff_t *)bad, g, NULL, 4, 0));
    T("sendfile-off", sendfile(g, fd, (off_t *)bad, 4));
    T("poll-fds", poll((struct pollfd *)bad, 1, 0));
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    T("poll-ro", (memcpy(buf, &pfd, sizeof pfd), poll((struct pollfd *)ro, 1, 0)));
    close(g);
    unlink("g2");
    char *const args[] = {"true", NULL};
    T("execve-path", execve(bad, args, NULL));
    T("execve-argv", execve("/bin/true", (char *const *)bad, NULL));
    T("execve-envp", execve("/bin/true", args, (char *const *)bad));

    /* Calls the preload library emulates itself. */
    T("rt_sigaction-act", syscall(SYS_rt_sigaction, SIGINT, bad, NULL, 8));
    T("rt_sigaction-oact", syscall(SYS_rt_sigaction, SIGINT, NULL, bad, 8));
    T("rt_sigaction-sigsys", syscall(SYS_rt_sigaction, SIGSYS, bad, NULL, 8));
    pid_t pid;
    int e = posix_spawn(&pid, bad, NULL, NULL, args, NULL);
    printf("posix_spawn: %s\n", e ? ename(e) : "ok");

    /* Nothing may have been created or changed by the calls above. */
    T("f-still-there", stat("f", &st) == 0 && st.st_size == 24 ? 0 : -1);
    T("no-g", access("g", F_OK) == 0 ? 0 : -1);
    return 0;
}
