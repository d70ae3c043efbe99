/* The times a change on a descriptor stamps are the call's: for each file,
 * fchmod (ctime) and futimens(fd, NULL) (UTIME_NOW: mtime, atime and
 * ctime), each between a coarse clock read before the call (never later
 * than the kernel's own stamp) and a fine one after it returned; checked
 * by path after a pause and, with "trigger PATH", after a chmod of PATH
 * by path (the test kills the server there, so the checks read what its
 * successor rebuilt from the journal). Prints the files and how many
 * checks failed.
 *
 * usage: stamps [trigger PATH] FILE... */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct win {
    struct timespec lo, hi;
};

static struct timespec clock_of(clockid_t id) {
    struct timespec t;
    clock_gettime(id, &t);
    return t;
}

static int before(struct timespec a, struct timespec b) {
    return a.tv_sec < b.tv_sec || (a.tv_sec == b.tv_sec && a.tv_nsec < b.tv_nsec);
}

static int within(struct timespec t, struct win w) {
    return !before(t, w.lo) && !before(w.hi, t);
}

static int bad;

static void expect(const char *file, const char *what, struct timespec t, struct win w) {
    if (!within(t, w)) {
        printf("%s: %s %ld.%09ld outside [%ld.%09ld, %ld.%09ld]\n", file, what, (long)t.tv_sec,
               t.tv_nsec, (long)w.lo.tv_sec, w.lo.tv_nsec, (long)w.hi.tv_sec, w.hi.tv_nsec);
        bad++;
    }
}

int main(int argc, char **argv) {
    const char *trigger = NULL;
    int first = 1;
    if (argc > 2 && strcmp(argv[1], "trigger") == 0) {
        trigger = argv[2];
        first = 3;
    }
    int n = argc - first;
    struct win *chmod_at = calloc(n, sizeof *chmod_at), *now_at = calloc(n, sizeof *now_at);
    for (int k = 0; k < n; k++) {
        int fd = open(argv[first + k], O_RDWR | O_CREAT, 0644);
        if (fd < 0) {
            perror("open");
            return 2;
        }
        now_at[k].lo = clock_of(CLOCK_REALTIME_COARSE);
        if (futimens(fd, NULL) != 0) {
            perror("futimens");
            return 2;
        }
        now_at[k].hi = clock_of(CLOCK_REALTIME);
        /* A later ctime than UTIME_NOW's, so both can be told apart. */
        usleep(2000);
        chmod_at[k].lo = clock_of(CLOCK_REALTIME_COARSE);
        if (fchmod(fd, 0600 | (k % 0100)) != 0) {
            perror("fchmod");
            return 2;
        }
        chmod_at[k].hi = clock_of(CLOCK_REALTIME);
        /* Served late, a change stamped when served would be after it. */
        usleep(5000);
        close(fd);
    }
    if (trigger && chmod(trigger, 0640) != 0) {
        perror("chmod trigger");
        return 2;
    }
    for (int k = 0; k < n; k++) {
        const char *f = argv[first + k];
        struct stat st;
        if (stat(f, &st) != 0) {
            perror("stat");
            return 2;
        }
        if ((st.st_mode & 07777) != (0600 | (mode_t)(k % 0100))) {
            printf("%s: mode %o\n", f, st.st_mode & 07777);
            bad++;
        }
        expect(f, "mtime", st.st_mtim, now_at[k]);
        expect(f, "atime", st.st_atim, now_at[k]);
        expect(f, "ctime", st.st_ctim, chmod_at[k]);
    }
    printf("stamps: %d files, %d checks failed\n", n, bad);
    return 0;
}
