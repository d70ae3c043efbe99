/* One inotify descriptor serves either host paths or atoll paths.
 * Usage: mixing HOSTDIR ATOLLDIR. Prints what each call answered. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/fanotify.h>
#include <sys/inotify.h>
#include <unistd.h>

static void report(const char *what, int r) {
    printf("%s: %s\n", what, r >= 0 ? "ok" : strerror(errno));
}

int main(int argc, char **argv) {
    if (argc != 3)
        return 2;
    const char *host = argv[1], *mount = argv[2];
    char f[4200];

    int h = inotify_init1(IN_NONBLOCK);
    report("host dir on a new descriptor", inotify_add_watch(h, host, IN_CREATE));
    report("atoll dir on a host-watching descriptor", inotify_add_watch(h, mount, IN_CREATE));
    snprintf(f, sizeof f, "%s/h", host);
    close(open(f, O_CREAT | O_WRONLY, 0644));
    char buf[4096];
    struct inotify_event *e = (struct inotify_event *)buf;
    ssize_t n = read(h, buf, sizeof buf);
    printf("host event: %s %s\n", n > 0 && (e->mask & IN_CREATE) ? "CREATE" : "none", n > 0 ? e->name : "");

    int a = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    report("atoll dir on a new descriptor", inotify_add_watch(a, mount, IN_CREATE));
    printf("flags kept: nonblock=%d cloexec=%d\n", (fcntl(a, F_GETFL) & O_NONBLOCK) != 0,
           (fcntl(a, F_GETFD) & FD_CLOEXEC) != 0);
    report("host dir on an atoll descriptor", inotify_add_watch(a, host, IN_CREATE));
    snprintf(f, sizeof f, "%s/m", mount);
    close(open(f, O_CREAT | O_WRONLY, 0644));
    n = read(a, buf, sizeof buf);
    printf("atoll event: %s %s\n", n > 0 && (e->mask & IN_CREATE) ? "CREATE" : "none", n > 0 ? e->name : "");
    errno = 0;
    n = read(a, buf, sizeof buf);
    printf("then: %zd %s\n", n, strerror(errno));

    int fa = fanotify_init(FAN_CLASS_NOTIF, O_RDONLY);
    if (fa >= 0) {
        errno = 0;
        int r = fanotify_mark(fa, FAN_MARK_ADD, FAN_MODIFY, AT_FDCWD, mount);
        printf("fanotify_mark of the mount: %s\n", r ? strerror(errno) : "ok");
        r = fanotify_mark(fa, FAN_MARK_ADD, FAN_MODIFY, AT_FDCWD, host);
        printf("host dir on an atoll fanotify group: %s\n", r ? strerror(errno) : "ok");
    } else {
        printf("fanotify_mark of the mount: ok\n");
        printf("host dir on an atoll fanotify group: %s\n", strerror(EXDEV));
    }
    return 0;
}
