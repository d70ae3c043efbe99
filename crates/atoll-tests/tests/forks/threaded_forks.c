/* forkpty(3) and daemon(3) in a program that has a second thread: glibc
 * forks there with its internal __fork, holding malloc's locks while the
 * clone runs. Each child writes what it sees into a file of the cwd. */
#include <fcntl.h>
#include <pthread.h>
#include <pty.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void *idle(void *arg) {
    (void)arg;
    sleep(30);
    return NULL;
}

static void note(const char *line) {
    int fd = open("notes", O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
        if (write(fd, line, strlen(line)) < 0) _exit(3);
        close(fd);
    }
}

int main(void) {
    pthread_t t;
    pthread_create(&t, NULL, idle, NULL);
    for (int i = 0; i < 3; i++) {
        int master;
        pid_t pid = forkpty(&master, NULL, NULL, NULL);
        if (pid < 0) { perror("forkpty"); return 1; }
        if (pid == 0) {
            char *p = malloc(64); /* the heap works in the child */
            snprintf(p, 64, "forkpty child %d: stdin tty %d\n", i, isatty(0));
            note(p);
            _exit(0);
        }
        int st;
        waitpid(pid, &st, 0);
        close(master);
        printf("forkpty %d: exit %d\n", i, WEXITSTATUS(st));
    }
    pid_t pid = fork();
    if (pid == 0) {
        if (daemon(1, 1) != 0) { perror("daemon"); _exit(1); }
        char line[64];
        snprintf(line, sizeof line, "daemon: session leader %d\n", getsid(0) == getpid());
        note(line);
        note("done\n");
        _exit(0);
    }
    int st;
    waitpid(pid, &st, 0);
    printf("daemon parent: exit %d\n", WEXITSTATUS(st));
    for (int i = 0; i < 500; i++) { /* the daemon outlives its parent */
        char buf[512] = {0};
        int fd = open("notes", O_RDONLY);
        if (fd >= 0) {
            ssize_t n = read(fd, buf, sizeof buf - 1);
            close(fd);
            if (n > 0 && strstr(buf, "done\n")) { fputs(buf, stdout); return 0; }
        }
        usleep(10000);
    }
    puts("the daemon never wrote");
    return 1;
}
