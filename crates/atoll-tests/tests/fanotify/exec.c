/* A fanotify group and its marks outlive execve: the process is the same.
 * Usage: exec DIR            (first image: make the group, mark, exec)
 *        exec DIR FD MODE    (second image: change files, read events)
 * Two groups are made without FAN_CLOEXEC, each with a mark of DIR: one
 * in descriptor mode (FAN_EVENT_ON_CHILD: a child's write and close), one
 * reporting FAN_REPORT_DFID_NAME (entries made and removed). The second
 * image writes, creates and removes in DIR and prints what each group
 * reads: masks, and the object's name (descriptor mode: its path below
 * DIR; name mode: the name in the record). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fanotify.h>
#include <sys/stat.h>
#include <unistd.h>

static void mask_names(unsigned long long m) {
    static const struct { unsigned long long bit; const char *name; } names[] = {
        {FAN_MODIFY, "MODIFY"}, {FAN_CLOSE_WRITE, "CLOSE_WRITE"}, {FAN_CREATE, "CREATE"},
        {FAN_DELETE, "DELETE"}, {FAN_ONDIR, "ONDIR"},
    };
    const char *sep = "";
    for (unsigned i = 0; i < sizeof names / sizeof names[0]; i++)
        if (m & names[i].bit) {
            printf("%s%s", sep, names[i].name);
            sep = "|";
        }
}

static void drain(int fan, const char *dir, int by_name, const char *what) {
    char buf[8192] __attribute__((aligned(8)));
    printf("%s:\n", what);
    for (;;) {
        struct pollfd p = {fan, POLLIN, 0};
        if (poll(&p, 1, 0) != 1)
            break;
        ssize_t n = read(fan, buf, sizeof buf);
        if (n <= 0) {
            printf("  read: %s\n", n < 0 ? strerror(errno) : "end");
            break;
        }
        struct fanotify_event_metadata *e = (void *)buf;
        for (; FAN_EVENT_OK(e, n); e = FAN_EVENT_NEXT(e, n)) {
            printf("  ");
            mask_names(e->mask);
            if (by_name) {
                struct fanotify_event_info_fid *fid = (void *)(e + 1);
                if ((char *)fid < (char *)e + e->event_len &&
                    fid->hdr.info_type == FAN_EVENT_INFO_TYPE_DFID_NAME) {
                    struct file_handle *h = (void *)fid->handle;
                    printf(" %s\n", (char *)(h->f_handle + h->handle_bytes));
                } else {
                    printf(" (no name)\n");
                }
                continue;
            }
            char link[64], target[4200];
            snprintf(link, sizeof link, "/proc/self/fd/%d", e->fd);
            ssize_t t = readlink(link, target, sizeof target - 1);
            target[t > 0 ? t : 0] = 0;
            size_t dl = strlen(dir);
            const char *rel = strncmp(target, dir, dl) ? target : target + dl;
            printf(" %s\n", *rel ? rel : ".");
            close(e->fd);
        }
    }
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 2) {
        const char *dir = argv[1];
        mkdir(dir, 0755);
        int byfd = fanotify_init(FAN_CLASS_NOTIF, O_RDONLY);
        int byname = fanotify_init(FAN_CLASS_NOTIF | FAN_REPORT_DFID_NAME, O_RDONLY);
        if (byfd < 0 || byname < 0) {
            perror("fanotify_init");
            return 1;
        }
        if (fanotify_mark(byfd, FAN_MARK_ADD, FAN_MODIFY | FAN_CLOSE_WRITE | FAN_EVENT_ON_CHILD,
                          AT_FDCWD, dir) ||
            fanotify_mark(byname, FAN_MARK_ADD, FAN_CREATE | FAN_DELETE | FAN_ONDIR, AT_FDCWD, dir)) {
            perror("fanotify_mark");
            return 1;
        }
        char a[16], b[16];
        snprintf(a, sizeof a, "%d", byfd);
        snprintf(b, sizeof b, "%d", byname);
        execl("/proc/self/exe", argv[0], dir, a, b, (char *)NULL);
        perror("exec");
        return 1;
    }
    if (argc != 4)
        return 2;
    const char *dir = argv[1];
    int byfd = atoi(argv[2]), byname = atoi(argv[3]);
    char path[4200];
    snprintf(path, sizeof path, "%s/f", dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (write(fd, "x", 1) != 1)
        perror("write");
    close(fd);
    snprintf(path, sizeof path, "%s/d", dir);
    mkdir(path, 0755);
    rmdir(path);
    drain(byfd, dir, 0, "by descriptor");
    drain(byname, dir, 1, "by name");
    printf("done\n");
    return 0;
}
