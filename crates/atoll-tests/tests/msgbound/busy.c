/* A program bound by its requests to one server: it opens and closes one
 * atoll file (in the root, whose server is server 0) many times, then
 * prints the CPUs the kernel lets this thread run on and how many CPUs
 * sched_getaffinity reports to the program.
 * usage: busy FILE [own]   ("own": first pin itself to CPU 0, as taskset
 * would, which makes the affinity the program's own) */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc > 2 && strcmp(argv[2], "own") == 0) {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(0, &one);
        if (sched_setaffinity(0, sizeof one, &one) != 0) {
            perror("sched_setaffinity");
            return 1;
        }
    }
    int fd = open(argv[1], O_CREAT | O_WRONLY, 0644);
    if (fd < 0) {
        perror("create");
        return 1;
    }
    close(fd);
    for (int i = 0; i < 4000; i++) {
        fd = open(argv[1], O_RDONLY);
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
    return 0;
}
