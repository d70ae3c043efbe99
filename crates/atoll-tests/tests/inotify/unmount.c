/* inotify probe of an unmount: watches a directory, a file and a
 * subdirectory, changes the file, says it is ready (creates READY), then
 * prints every event it reads until each watch got IN_IGNORED. The test
 * then unmounts the tmpfs (Linux) or kills the instance (atoll).
 * Usage: unmount DIR READY */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc != 3)
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
    close(open(argv[2], O_WRONLY | O_CREAT, 0644));
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
