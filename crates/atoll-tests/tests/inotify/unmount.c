/* inotify probe of an unmount: watches a directory, a file and a
 * subdirectory, changes the file, says it is ready (creates READY), then
 * prints every event it reads until each watch got IN_IGNORED. The test
 * then unmounts the tmpfs (Linux) or kills the instance (atoll).
 * Usage: unmount DIR READY [exec]
 * With `exec`, the probe execs itself after making the watches, and the
 * new image (`unmount DIR READY read FD`) reads: the watches are the
 * process's, whichever image it runs. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

static int read_all(int q, const char *ready);

int main(int argc, char **argv) {
    if (argc == 5 && !strcmp(argv[3], "read"))
        return read_all(atoi(argv[4]), argv[2]);
    if (argc != 3 && !(argc == 4 && !strcmp(argv[3], "exec")))
        return 2;
    char dir[4096], file[4200], sub[4200];
    snprintf(dir, sizeof dir, "%s/w", argv[1]);
    snprintf(file, sizeof file, "%s/file", dir);
    snprintf(sub, sizeof sub, "%s/sub", dir);
    mkdir(dir, 0755);
    close(open(file, O_WRONLY | O_CREAT, 0644));
    mkdir(sub, 0755);
    int q = inotify_init1(0);
    int w1 = inotify_add_watch(q, dir, IN_ALL_EVENTS);
    int w2 = inotify_add_watch(q, file, IN_ATTRIB);
    int w3 = inotify_add_watch(q, sub, IN_CREATE);
    printf("wds %d %d %d\n", w1, w2, w3);
    chmod(file, 0600);
    fflush(stdout);
    if (argc == 4) {
        char fd[16];
        snprintf(fd, sizeof fd, "%d", q);
        execl("/proc/self/exe", argv[0], argv[1], argv[2], "read", fd, (char *)NULL);
        perror("exec");
        return 1;
    }
    return read_all(q, argv[2]);
}

/* Say READY, then print every event until each watch got IN_IGNORED. */
static int read_all(int q, const char *ready) {
    close(open(ready, O_WRONLY | O_CREAT, 0644));
    char buf[4096] __attribute__((aligned(8)));
    int ignored = 0;
    while (ignored < 3) {
        ssize_t n = read(q, buf, sizeof buf);
        if (n <= 0) {
            perror("read");
            return 1;
        }
        for (char *at = buf; at < buf + n;) {
            struct inotify_event *e = (struct inotify_event *)at;
            printf("wd %d mask %#x len %u\n", e->wd, e->mask, e->len);
            ignored += (e->mask & IN_IGNORED) != 0;
            at += sizeof *e + e->len;
        }
    }
    printf("done\n");
    return 0;
}
