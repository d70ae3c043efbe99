/* A program bound by its requests to one server: it opens and closes one
 * atoll file (in the root, whose server is server 0) many times, then
 * prints the CPUs the kernel lets this thread run on and how many CPUs
 * sched_getaffinity reports to the program.
 * usage: busy FILE [own|helper]
 *   own:    first pin itself to CPU 0, as taskset would, which makes the
 *           affinity the program's own;
 *   helper: first let a helper thread pin itself to CPU 0 (as fio does to
 *           calibrate its clock), print what that thread sees, and do the
 *           work in a forked child: the main thread's affinity, and the
 *           child's, stay atoll's. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int pin_to_cpu0(void) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(0, &one);
    if (sched_setaffinity(0, sizeof one, &one) != 0) {
        perror("sched_setaffinity");
        return 1;
    }
    return 0;
}

static void *helper(void *arg) {
    (void)arg;
    if (pin_to_cpu0() != 0)
        return (void *)1;
    cpu_set_t seen;
    sched_getaffinity(0, sizeof seen, &seen);
    printf("helper seen %d\n", CPU_COUNT(&seen));
    fflush(stdout);
    return NULL;
}

static int work(const char *file);

int main(int argc, char **argv) {
    if (argc > 2 && strcmp(argv[2], "own") == 0 && pin_to_cpu0() != 0)
        return 1;
    if (argc > 2 && strcmp(argv[2], "helper") == 0) {
        pthread_t t;
        void *failed;
        if (pthread_create(&t, NULL, helper, NULL) != 0 || pthread_join(t, &failed) != 0 || failed)
            return 1;
        pid_t child = fork();
        if (child == 0)
            _exit(work(argv[1]));
        int status;
        if (child < 0 || waitpid(child, &status, 0) != child)
            return 1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
    }
    return work(argv[1]);
}

static int work(const char *file) {
    int fd = open(file, O_CREAT | O_WRONLY, 0644);
    if (fd < 0) {
        perror("create");
        return 1;
    }
    close(fd);
    for (int i = 0; i < 4000; i++) {
        fd = open(file, O_RDONLY);
        if (fd < 0) {
            perror("open");
            return 1;
        }
        close(fd);
    }
    FILE *status = fopen("/proc/thread-self/status", "r");
    char line[512];
    while (status && fgets(line, sizeof line, status)) {
        if (strncmp(line, "Cpus_allowed_list:", 18) == 0) {
            char *v = line + 18;
            v += strspn(v, " \t");
            printf("kernel %s", v);
        }
    }
    cpu_set_t seen;
    if (sched_getaffinity(0, sizeof seen, &seen) != 0) {
        perror("sched_getaffinity");
        return 1;
    }
    printf("seen %d\n", CPU_COUNT(&seen));
    fflush(stdout); /* a forked child leaves by _exit */
    return 0;
}
