/* Threads that fork at the same time; every child either execs /bin/true
 * or writes a file in the current directory and exits. Prints how many
 * children succeeded and how many files exist. Usage: forkers THREADS ROUNDS */
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static int rounds;
static int ok[64];

static void *lister(void *arg) {
    struct stat st;
    (void)arg;
    stat(".", &st);
    return NULL;
}

static void *worker(void *arg) {
    long t = (long)arg;
    for (int i = 0; i < rounds; i++) {
        pid_t pid = fork();
        if (pid == 0) {
            if (i % 2) {
                execl("/bin/true", "true", (char *)NULL);
                _exit(127);
            }
            char name[64];
            snprintf(name, sizeof name, "f%ld-%d", t, i);
            int fd = open(name, O_CREAT | O_WRONLY | O_TRUNC, 0644);
            if (fd < 0 || write(fd, "x", 1) != 1 || close(fd) != 0)
                _exit(1);
            _exit(0);
        }
        if (pid < 0) {
            perror("fork");
            continue;
        }
        int status;
        if (waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0)
            ok[t]++;
        /* A short-lived thread: lanes come and go, more boot-socket traffic. */
        pthread_t th;
        if (pthread_create(&th, NULL, lister, NULL) == 0)
            pthread_join(th, NULL);
    }
    return NULL;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 4;
    rounds = argc > 2 ? atoi(argv[2]) : 40;
    if (threads > 64)
        threads = 64;
    pthread_t th[64];
    for (long t = 0; t < threads; t++)
        pthread_create(&th[t], NULL, worker, (void *)t);
    int total = 0;
    for (int t = 0; t < threads; t++) {
        pthread_join(th[t], NULL);
        total += ok[t];
    }
    int files = 0;
    DIR *d = opendir(".");
    struct dirent *e;
    while (d && (e = readdir(d)))
        files += e->d_name[0] == 'f';
    if (d)
        closedir(d);
    printf("children ok %d of %d\nfiles %d\n", total, threads * rounds, files);
    return 0;
}
