/* fanotify probe of the events of opens, reads, closes and execs:
 * prints a transcript that must be the same on a tmpfs directory and in
 * the atoll mount. Usage: access DIR PROGRAM
 * A directory mark asks for FAN_OPEN, FAN_ACCESS, FAN_CLOSE_NOWRITE and
 * FAN_OPEN_EXEC of the directory and its children; a child process
 * reads a file, lists the directory and runs a copy of PROGRAM there.
 * The descriptors of the events name their objects, and the reader's own
 * use of them makes no events. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fanotify.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static void copy(const char *from, const char *to) {
    int in = open(from, O_RDONLY), out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0755);
    char buf[65536];
    ssize_t n;
    while ((n = read(in, buf, sizeof buf)) > 0)
        if (write(out, buf, n) != n)
            perror("write");
    close(in);
    close(out);
}

static void drain(int fan, const char *dir, const char *what) {
    static const struct { unsigned long long bit; const char *name; } names[] = {
        {FAN_ACCESS, "ACCESS"}, {FAN_CLOSE_NOWRITE, "CLOSE_NOWRITE"}, {FAN_OPEN, "OPEN"},
        {FAN_OPEN_EXEC, "OPEN_EXEC"}, {FAN_ONDIR, "ONDIR"},
    };
    char buf[8192] __attribute__((aligned(8)));
    printf("%s:\n", what);
    for (;;) {
        struct pollfd p = {fan, POLLIN, 0};
        if (poll(&p, 1, 0) != 1)
            break;
        ssize_t n = read(fan, buf, sizeof buf);
        if (n <= 0)
            break;
        struct fanotify_event_metadata *e = (void *)buf;
        for (; FAN_EVENT_OK(e, n); e = FAN_EVENT_NEXT(e, n)) {
            printf("  ");
            const char *sep = "";
            for (unsigned i = 0; i < sizeof names / sizeof names[0]; i++)
                if (e->mask & names[i].bit) {
                    printf("%s%s", sep, names[i].name);
                    sep = "|";
                }
            char link[64], target[4200];
            snprintf(link, sizeof link, "/proc/self/fd/%d", e->fd);
            ssize_t t = readlink(link, target, sizeof target - 1);
            target[t > 0 ? t : 0] = 0;
            size_t dl = strlen(dir);
            const char *rel = strncmp(target, dir, dl) ? target : target + dl;
            printf(" %s\n", *rel ? rel : ".");
            /* The reader reads through the descriptor: no event. */
            char b[4];
            if (read(e->fd, b, sizeof b) < 0 && errno != EISDIR)
                perror("read");
            close(e->fd);
        }
    }
}

int main(int argc, char **argv) {
    if (argc != 3)
        return 2;
    const char *dir = argv[1];
    char file[4200], prog[4200];
    snprintf(file, sizeof file, "%s/f", dir);
    snprintf(prog, sizeof prog, "%s/prog", dir);
    mkdir(dir, 0755);
    setvbuf(stdout, NULL, _IOLBF, 0);
    int x = open(file, O_CREAT | O_WRONLY, 0644);
    if (write(x, "hello", 5) != 5)
        perror("write");
    close(x);
    copy(argv[2], prog);

    int fan = fanotify_init(FAN_CLASS_NOTIF | FAN_CLOEXEC, O_RDONLY);
    unsigned long long mask = FAN_OPEN | FAN_ACCESS | FAN_CLOSE_NOWRITE | FAN_OPEN_EXEC |
                              FAN_EVENT_ON_CHILD | FAN_ONDIR;
    int r = fanotify_mark(fan, FAN_MARK_ADD, mask, AT_FDCWD, dir);
    printf("mark: %s\n", r ? strerror(errno) : "ok");

    pid_t child = fork();
    if (child == 0) {
        char b[16];
        int y = open(file, O_RDONLY);
        read(y, b, 2);
        read(y, b, 2);
        close(y);
        _exit(0);
    }
    waitpid(child, NULL, 0);
    drain(fan, dir, "open, two reads, close");

    child = fork();
    if (child == 0) {
        DIR *d = opendir(dir);
        while (readdir(d))
            ;
        closedir(d);
        _exit(0);
    }
    waitpid(child, NULL, 0);
    drain(fan, dir, "opendir, readdir, closedir");

    r = fanotify_mark(fan, FAN_MARK_REMOVE, FAN_ACCESS, AT_FDCWD, dir);
    child = fork();
    if (child == 0) {
        execl(prog, "prog", (char *)NULL);
        _exit(127);
    }
    int status;
    waitpid(child, &status, 0);
    printf("exec: status %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    drain(fan, dir, "exec of a program in the directory (without ACCESS)");
    close(fan);
    return 0;
}
