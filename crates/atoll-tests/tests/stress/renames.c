/* The renames stress-ng's rename stressor makes besides its plain ones,
 * each answer printed: flag combinations Linux refuses (EINVAL before any
 * lookup), RENAME_EXCHANGE with a missing target and of a name with
 * itself, RENAME_NOREPLACE onto itself, a directory descriptor that is not
 * open (EBADF) or names a file (ENOTDIR) on either side, and a rename and
 * an exchange between two directories. Then both directories must list
 * what is expected and go with rmdir. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static int r2(int a, const char *o, int b, const char *n, unsigned f) {
    return syscall(SYS_renameat2, a, o, b, n, f);
}

#define P(x)                                                                  \
    do {                                                                      \
        int r_ = (x);                                                         \
        printf("%s = %d %s\n", #x, r_, r_ < 0 ? strerror(errno) : "");        \
    } while (0)

static void list(const char *d) {
    DIR *s = opendir(d);
    struct dirent *e;
    char names[8][64];
    int n = 0;
    while (s && (e = readdir(s)) != NULL)
        if (e->d_name[0] != '.' && n < 8)
            snprintf(names[n++], 64, "%.63s", e->d_name);
    if (s)
        closedir(s);
    /* Sorted: listing order is the file system's own. */
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (strcmp(names[i], names[j]) > 0) {
                char t[64];
                memcpy(t, names[i], 64);
                memcpy(names[i], names[j], 64);
                memcpy(names[j], t, 64);
            }
    printf("%s:", d);
    for (int i = 0; i < n; i++)
        printf(" %s", names[i]);
    printf("\n");
}

int main(int argc, char **argv) {
    if (argc < 2 || chdir(argv[1]) != 0) {
        perror("chdir");
        return 1;
    }
    P(mkdir("d0", 0700));
    P(mkdir("d1", 0700));
    int d0 = open("d0", O_RDONLY | O_DIRECTORY);
    int d1 = open("d1", O_RDONLY | O_DIRECTORY);
    close(openat(d0, "a", O_CREAT | O_WRONLY, 0600));
    close(openat(d1, "x", O_CREAT | O_WRONLY, 0600));
    int file = openat(d0, "a", O_RDONLY);
    P(r2(d0, "a", d0, "b", RENAME_NOREPLACE | RENAME_EXCHANGE | RENAME_WHITEOUT | 0xfffffff8));
    P(r2(d0, "a", d0, "b", RENAME_NOREPLACE | RENAME_EXCHANGE));
    P(r2(d0, "a", d0, "b", RENAME_EXCHANGE | RENAME_WHITEOUT));
    P(r2(20001, "a", 20002, "b", RENAME_EXCHANGE | RENAME_NOREPLACE));
    P(r2(d0, "a", d0, "b", RENAME_EXCHANGE));
    P(r2(d0, "a", d0, "a", RENAME_EXCHANGE));
    P(r2(d0, "a", d0, "a", RENAME_NOREPLACE));
    P(r2(20001, "a", d0, "b", RENAME_NOREPLACE));
    P(r2(20001, "a", d0, "b", 0));
    P(r2(d0, "a", 20001, "b", 0));
    P(r2(d0, "missing", 20001, "b", 0));
    P(renameat(file, "a", d0, "b"));
    P(r2(d0, "a", file, "b", 0));
    P(renameat(d0, "a", d1, "b"));
    P(r2(d1, "b", d1, "x", RENAME_EXCHANGE));
    P(r2(d1, "x", d0, "a", RENAME_NOREPLACE));
    close(file);
    list("d0");
    list("d1");
    P(unlinkat(d0, "a", 0));
    P(unlinkat(d1, "b", 0));
    close(d0);
    close(d1);
    P(rmdir("d0"));
    P(rmdir("d1"));
    return 0;
}
