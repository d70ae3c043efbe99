/* fanotify probe of a descriptor closed by a process's death: a child
 * opens a file of a marked directory for writing, writes and kills itself
 * with the file open; the FAN_CLOSE_WRITE its death makes names it.
 * Usage: death DIR */
#define _GNU_SOURCE
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <sys/fanotify.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc != 2)
        return 2;
    char dir[4096], file[4200];
    snprintf(dir, sizeof dir, "%s/w", argv[1]);
    snprintf(file, sizeof file, "%s/f", dir);
    mkdir(dir, 0755);
    int g = fanotify_init(FAN_CLASS_NOTIF | FAN_REPORT_FID, O_RDONLY);
    if (g < 0 || fanotify_mark(g, FAN_MARK_ADD, FAN_CLOSE_WRITE | FAN_EVENT_ON_CHILD,
                               AT_FDCWD, dir)) {
        perror("fanotify");
        return 1;
    }
    pid_t child = fork();
    if (child == 0) {
        int f = open(file, O_WRONLY | O_CREAT, 0644);
        write(f, "x", 1);
        kill(getpid(), SIGKILL);
        _exit(1);
    }
    int status;
    waitpid(child, &status, 0);
    printf("child killed: %d\n", WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    /* The close happens as the child's files are released. */
    struct pollfd p = {g, POLLIN, 0};
    if (poll(&p, 1, 20000) != 1) {
        printf("no event\n");
        return 1;
    }
    char buf[4096] __attribute__((aligned(8)));
    ssize_t n = read(g, buf, sizeof buf);
    for (struct fanotify_event_metadata *m = (void *)buf; FAN_EVENT_OK(m, n);
         m = FAN_EVENT_NEXT(m, n))
        printf("mask %#llx, pid is the child's: %d\n", (unsigned long long)m->mask,
               m->pid == child);
    return 0;
}
