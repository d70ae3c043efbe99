/* Signals landing while libc functions that are built on other calls run:
 * statvfs and fstatvfs (on statfs), remove (unlink, then rmdir for a
 * directory), opendir/readdir/rewinddir/closedir (open, getdents64,
 * lseek, close). An interval timer and a thread that signals the main
 * thread after each of its own calls keep handlers running. On Linux
 * every call does all of its work whatever lands meanwhile: statvfs fills
 * the whole buffer (stress-ng derives its temporary names from
 * f_namemax), remove takes directories too, a stream lists every entry.
 * The probe prints only that. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/time.h>
#include <unistd.h>

#define ROUNDS 4000
#define ENTRIES 24

static volatile int stop;
static volatile long handled;
static pthread_t main_thread;

static void on_signal(int sig) {
    (void)sig;
    handled++;
}

static void *pester(void *arg) {
    (void)arg;
    while (!stop) {
        pthread_kill(main_thread, SIGUSR1);
        usleep(20);
    }
    return NULL;
}

/* Every field statvfs reports that is never 0 on a mounted file system. */
static int filled(const struct statvfs *b) {
    return b->f_bsize > 0 && b->f_frsize > 0 && b->f_blocks > 0 && b->f_files > 0 &&
           b->f_namemax >= 255;
}

int main(int argc, char **argv) {
    if (argc < 2 || chdir(argv[1]) != 0) {
        perror("chdir");
        return 1;
    }
    main_thread = pthread_self();
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGALRM, &sa, NULL);
    if (mkdir("listed", 0755) != 0) {
        perror("mkdir");
        return 1;
    }
    for (int i = 0; i < ENTRIES; i++) {
        char name[64];
        snprintf(name, sizeof name, "listed/entry-with-a-longer-name-%02d", i);
        int fd = open(name, O_CREAT | O_WRONLY, 0644);
        if (fd < 0 || close(fd) != 0) {
            perror("create");
            return 1;
        }
    }
    int dirfd_ = open("listed", O_RDONLY | O_DIRECTORY);
    if (dirfd_ < 0) {
        perror("open");
        return 1;
    }
    struct itimerval it = {{0, 50}, {0, 50}};
    setitimer(ITIMER_REAL, &it, NULL);
    pthread_t t;
    pthread_create(&t, NULL, pester, NULL);

    int statvfs_bad = 0, fstatvfs_bad = 0, remove_bad = 0, list_bad = 0;
    for (int r = 0; r < ROUNDS; r++) {
        struct statvfs b;
        memset(&b, 0, sizeof b);
        if (statvfs(".", &b) != 0 || !filled(&b))
            statvfs_bad++;
        memset(&b, 0, sizeof b);
        if (fstatvfs(dirfd_, &b) != 0 || !filled(&b))
            fstatvfs_bad++;
        if (r % 4 == 0) {
            /* remove: a file, then a directory (EISDIR from unlink). */
            int fd = open("gone", O_CREAT | O_WRONLY, 0644);
            if (fd < 0 || close(fd) != 0 || remove("gone") != 0 || access("gone", F_OK) == 0)
                remove_bad++;
            if (mkdir("gonedir", 0755) != 0 || remove("gonedir") != 0 ||
                access("gonedir", F_OK) == 0)
                remove_bad++;
        }
        if (r % 8 == 0) {
            DIR *d = opendir("listed");
            int n = 0;
            if (!d) {
                list_bad++;
                continue;
            }
            for (int pass = 0; pass < 2; pass++) {
                struct dirent *e;
                n = 0;
                while ((e = readdir(d)) != NULL)
                    if (strncmp(e->d_name, "entry-", 6) == 0)
                        n++;
                if (n != ENTRIES)
                    list_bad++;
                rewinddir(d);
            }
            if (closedir(d) != 0)
                list_bad++;
        }
    }
    stop = 1;
    pthread_join(t, NULL);
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    printf("statvfs filled every time: %s\n", statvfs_bad ? "no" : "yes");
    printf("fstatvfs filled every time: %s\n", fstatvfs_bad ? "no" : "yes");
    printf("remove took files and directories: %s\n", remove_bad ? "no" : "yes");
    printf("streams listed every entry: %s\n", list_bad ? "no" : "yes");
    printf("handlers ran: %s\n", handled > 0 ? "yes" : "no");
    if (statvfs_bad || fstatvfs_bad || remove_bad || list_bad)
        fprintf(stderr, "bad: statvfs %d fstatvfs %d remove %d list %d of %d rounds\n",
                statvfs_bad, fstatvfs_bad, remove_bad, list_bad, ROUNDS);
    return 0;
}
