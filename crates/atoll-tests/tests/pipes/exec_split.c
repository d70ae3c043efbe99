/* A process whose main thread reads large blocks from a pipe while a
 * large writer fills it, and whose other thread calls execve meanwhile:
 * the main thread ends, the new program (this file, "cont") inherits the
 * pipe and reads what is left. On Linux what it reads is a suffix of the
 * writer's stream, up to its end (the bytes the ended read took are
 * gone), and nothing is written into the new program. Each byte of the
 * stream tells its own offset, so the suffix is checked byte for byte.
 * Prints one line per round. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BLOCK (1 << 20)
/* The stream's length: 192 MiB, or EXEC_SPLIT_MIB (a copy island moves
 * every byte in a message, so its run uses less). */
static uint64_t TOTAL = (uint64_t)192 << 20;
#define ROUNDS 6

static unsigned char pattern(uint64_t at) {
    uint64_t word = at / 8;
    return (unsigned char)(word >> (8 * (at % 8)));
}

static void fill(unsigned char *b, uint64_t at, size_t n) {
    for (size_t i = 0; i < n; i++)
        b[i] = pattern(at + i);
}

/* The new program: read the rest, find where it starts, check it all. */
static int cont(int fd) {
    unsigned char *buf = malloc(BLOCK);
    uint64_t start = UINT64_MAX, got = 0;
    for (;;) {
        ssize_t n = read(fd, buf, BLOCK);
        if (n < 0) {
            perror("cont read");
            return 2;
        }
        if (n == 0)
            break;
        size_t i = 0;
        if (start == UINT64_MAX) {
            if (n < 16) {
                fprintf(stderr, "short first read %zd\n", n);
                return 2;
            }
            /* The first whole word tells the offset: try each phase. */
            for (unsigned j = 0; j < 8 && start == UINT64_MAX; j++) {
                uint64_t w = 0;
                for (int k = 0; k < 8; k++)
                    w |= (uint64_t)buf[j + k] << (8 * k);
                uint64_t guess = w * 8 - j;
                int same = w * 8 >= j;
                for (int k = 0; k < 16 && same; k++)
                    same = pattern(guess + k) == buf[k];
                if (same)
                    start = guess;
            }
            if (start == UINT64_MAX) {
                fprintf(stderr, "no offset found\n");
                return 2;
            }
        }
        for (; i < (size_t)n; i++)
            if (buf[i] != pattern(start + got + i)) {
                fprintf(stderr, "byte %llu is %u, not %u\n",
                        (unsigned long long)(start + got + i), buf[i],
                        pattern(start + got + i));
                return 1;
            }
        got += n;
    }
    if (start == UINT64_MAX)
        start = TOTAL; /* the ended read took everything */
    if (start + got != TOTAL) {
        fprintf(stderr, "suffix from %llu of %llu bytes ends short of %llu\n",
                (unsigned long long)start, (unsigned long long)got,
                (unsigned long long)TOTAL);
        return 1;
    }
    return 0;
}

static const char *self;
static int read_end;
static long delay_us;

static void *execer(void *arg) {
    (void)arg;
    usleep(delay_us);
    char fd[16];
    snprintf(fd, sizeof fd, "%d", read_end);
    execl(self, self, "cont", fd, (char *)0);
    perror("execl");
    _exit(4);
}

static int reader(void) {
    pthread_t t;
    pthread_create(&t, 0, execer, 0);
    unsigned char *buf = malloc(BLOCK);
    uint64_t at = 0;
    for (;;) {
        ssize_t n = read(read_end, buf, BLOCK);
        if (n <= 0)
            break;
        for (ssize_t i = 0; i < n; i++)
            if (buf[i] != pattern(at + i)) {
                fprintf(stderr, "reader: byte %llu wrong\n", (unsigned long long)(at + i));
                _exit(1);
            }
        at += n;
    }
    /* The stream ended before the exec: wait for it (it reads nothing). */
    pthread_join(t, 0);
    return 5;
}

static int writer(int fd) {
    unsigned char *buf = malloc(BLOCK);
    for (uint64_t at = 0; at < TOTAL; at += BLOCK) {
        fill(buf, at, BLOCK);
        size_t off = 0;
        while (off < BLOCK) {
            ssize_t n = write(fd, buf + off, BLOCK - off);
            if (n <= 0) {
                perror("write");
                return 1;
            }
            off += n;
        }
    }
    return 0;
}

int main(int argc, char **argv) {
    self = argv[0];
    const char *mib = getenv("EXEC_SPLIT_MIB");
    if (mib && atoi(mib) > 0)
        TOTAL = (uint64_t)atoi(mib) << 20;
    if (argc == 3 && strcmp(argv[1], "cont") == 0)
        return cont(atoi(argv[2]));
    for (int round = 0; round < ROUNDS; round++) {
        int p[2];
        if (pipe(p) != 0) {
            perror("pipe");
            return 1;
        }
        pid_t w = fork();
        if (w == 0) {
            close(p[0]);
            _exit(writer(p[1]));
        }
        read_end = p[0];
        delay_us = 5000 + 4000 * round;
        pid_t r = fork();
        if (r == 0) {
            close(p[1]);
            _exit(reader());
        }
        close(p[0]);
        close(p[1]);
        int ws, rs;
        waitpid(r, &rs, 0);
        waitpid(w, &ws, 0);
        printf("round %d: writer %d, new program %d\n", round,
               WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws),
               WIFEXITED(rs) ? WEXITSTATUS(rs) : 128 + WTERMSIG(rs));
        fflush(stdout);
    }
    return 0;
}
