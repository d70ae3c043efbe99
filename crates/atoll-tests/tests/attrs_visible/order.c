/* Two callers change the mode of one file by turns, through one shared
 * description: two threads ("threads") or a parent and its forked child
 * ("fork"). Each call is made after the other's returned (a turn word in
 * shared memory, which asks no server), so the file's mode must always be
 * the last call's: the partner checks it by path every few turns, by a
 * descriptor it opened before the other's call (fstat) every few others,
 * and the parent once both are done. Prints the number of checks that
 * failed.
 *
 * usage: order FILE threads|fork TURNS */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

struct shared {
    atomic_int turn;
    atomic_int bad;
};

static const char *path;
static int fd, turns;
static struct shared *sh;

/* The mode of turn i: never the same twice in a row. */
static mode_t mode_of(int i) {
    return 0400 | (mode_t)((i * 37 + 1) % 0400);
}

static void check(int i, const char *when) {
    struct stat st;
    if (stat(path, &st) != 0) {
        perror("stat");
        exit(2);
    }
    if ((st.st_mode & 07777) != mode_of(i)) {
        printf("%s turn %d: mode %o, want %o\n", when, i, st.st_mode & 07777, mode_of(i));
        atomic_fetch_add(&sh->bad, 1);
    }
}

/* fstat of a descriptor opened before turn i - 1 was made. */
static void check_opened(int kept, int i) {
    struct stat st;
    if (fstat(kept, &st) != 0) {
        perror("fstat");
        exit(2);
    }
    if ((st.st_mode & 07777) != mode_of(i)) {
        printf("opened turn %d: mode %o, want %o\n", i, st.st_mode & 07777, mode_of(i));
        atomic_fetch_add(&sh->bad, 1);
    }
    close(kept);
}

static void *side(void *arg) {
    int me = (int)(long)arg, kept = -1;
    for (int i = me; i < turns; i += 2) {
        while (atomic_load(&sh->turn) != i)
            sched_yield();
        /* The partner's call returned: every few turns, see it first. */
        if (i > 0 && i % 5 == 0)
            check(i - 1, "before");
        if (kept >= 0) {
            check_opened(kept, i - 1);
            kept = -1;
        }
        if (fchmod(fd, mode_of(i)) != 0) {
            perror("fchmod");
            exit(2);
        }
        /* Opened now, looked at after the partner's next call. */
        if (i % 3 == 0 && i + 2 < turns) {
            kept = open(path, O_RDONLY);
            if (kept < 0) {
                perror("open");
                exit(2);
            }
        }
        atomic_store(&sh->turn, i + 1);
    }
    if (kept >= 0)
        close(kept);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: order FILE threads|fork TURNS\n");
        return 2;
    }
    path = argv[1];
    turns = atoi(argv[3]);
    fd = open(path, O_RDWR | O_CREAT, 0644);
    if (fd < 0) {
        perror("open");
        return 2;
    }
    sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) {
        perror("mmap");
        return 2;
    }
    if (strcmp(argv[2], "threads") == 0) {
        pthread_t t;
        pthread_create(&t, NULL, side, (void *)1L);
        side((void *)0L);
        pthread_join(t, NULL);
    } else {
        pid_t child = fork();
        if (child == 0) {
            side((void *)1L);
            fflush(stdout);
            _exit(0);
        }
        side((void *)0L);
        int status;
        waitpid(child, &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            return 2;
    }
    check(turns - 1, "after");
    printf("order %s: %d checks failed\n", argv[2], atomic_load(&sh->bad));
    return 0;
}
