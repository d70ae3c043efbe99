/* The events a watched file reports for reads and writes of its data,
 * op by op (read without waiting: Linux queues them before the call
 * returns). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/inotify.h>
#include <unistd.h>

static int in;

static void events(const char *what) {
    char buf[4096] __attribute__((aligned(8)));
    printf("%-28s", what);
    ssize_t n;
    while ((n = read(in, buf, sizeof buf)) > 0) {
        for (char *p = buf; p < buf + n;) {
            struct inotify_event *e = (struct inotify_event *)p;
            printf(" %s%s%s", e->mask & IN_ACCESS ? "ACCESS" : "",
                   e->mask & IN_MODIFY ? "MODIFY" : "",
                   e->mask & ~(IN_ACCESS | IN_MODIFY) ? "OTHER" : "");
            p += sizeof *e + e->len;
        }
    }
    printf("\n");
}

int main(int argc, char **argv) {
    char b[8192];
    memset(b, 'y', sizeof b);
    int fd = open(argv[1], O_CREAT | O_TRUNC | O_RDWR, 0644);
    if (fd < 0) { perror("open"); return 2; }
    in = inotify_init1(IN_NONBLOCK);
    if (in < 0 || inotify_add_watch(in, argv[1], IN_ACCESS | IN_MODIFY) < 0) {
        perror("inotify");
        return 2;
    }
    (void)pwrite(fd, b, 4096, 0); events("pwrite extending");
    (void)pwrite(fd, b, 4096, 0); events("pwrite inside");
    (void)pread(fd, b, 4096, 0); events("pread");
    (void)pread(fd, b, 8192, 2048); events("pread across the end");
    (void)pread(fd, b, 0, 0); events("pread of nothing");
    (void)pread(fd, b, 100, 1 << 20); events("pread past the end");
    (void)pwrite(fd, b, 0, 0); events("pwrite of nothing");
    (void)write(fd, b, 100); events("write");
    (void)read(fd, b, 100); events("read");
    return 0;
}
