/* fanotify probe of the queue's size: two groups mark a directory for
 * creations (names reported), one with the default queue, one with
 * FAN_UNLIMITED_QUEUE; 16400 files are made, then each group's events
 * are counted. Usage: overflow DIR */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <sys/fanotify.h>
#include <sys/stat.h>
#include <unistd.h>

static void count(int g, const char *what) {
    static char buf[65536] __attribute__((aligned(8)));
    int events = 0, overflows = 0, overflow_at = 0;
    for (;;) {
        ssize_t n = read(g, buf, sizeof buf);
        if (n <= 0)
            break;
        for (struct fanotify_event_metadata *m = (void *)buf; FAN_EVENT_OK(m, n);
             m = FAN_EVENT_NEXT(m, n)) {
            events++;
            if (m->mask & FAN_Q_OVERFLOW) {
                overflows++;
                overflow_at = events;
            }
        }
    }
    printf("%s: events %d, overflows %d, at %d\n", what, events, overflows, overflow_at);
}

int main(int argc, char **argv) {
    if (argc != 2)
        return 2;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/w", argv[1]);
    mkdir(dir, 0755);
    unsigned flags = FAN_CLASS_NOTIF | FAN_REPORT_DFID_NAME | FAN_NONBLOCK;
    int bounded = fanotify_init(flags, O_RDONLY);
    int unlimited = fanotify_init(flags | FAN_UNLIMITED_QUEUE, O_RDONLY);
    if (bounded < 0 || unlimited < 0) {
        perror("fanotify_init");
        return 1;
    }
    if (fanotify_mark(bounded, FAN_MARK_ADD, FAN_CREATE, AT_FDCWD, dir) ||
        fanotify_mark(unlimited, FAN_MARK_ADD, FAN_CREATE, AT_FDCWD, dir)) {
        perror("fanotify_mark");
        return 1;
    }
    for (int i = 0; i < 16400; i++) {
        char name[4200];
        snprintf(name, sizeof name, "%s/f%d", dir, i);
        close(open(name, O_WRONLY | O_CREAT, 0644));
    }
    count(bounded, "default queue");
    count(unlimited, "unlimited queue");
    return 0;
}
