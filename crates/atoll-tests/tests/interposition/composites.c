/* statvfs, remove and kill, which glibc builds on internal names: print
 * what they give for ROOT (argv[1]) and for a host directory (argv[2]),
 * and this process's pid (to find its trap counts). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

static void show(const char *label, const char *path) {
    struct statvfs v;
    if (statvfs(path, &v) != 0) {
        printf("%s statvfs: %s\n", label, strerror(errno));
        return;
    }
    printf("%s bsize %lu frsize %lu namemax %lu flag %lu fsid %lu blocks>0 %d\n", label,
           v.f_bsize, v.f_frsize, v.f_namemax, v.f_flag, v.f_fsid, v.f_blocks > 0);
}

int main(int argc, char **argv) {
    char p[4096];
    show("mount", argv[1]);
    show("host", argv[2]);
    struct statvfs a, b;
    if (statvfs(argv[1], &a) == 0 && fstatvfs(0, &b) == 0)
        printf("fstatvfs ok\n");
    snprintf(p, sizeof p, "%s/file", argv[1]);
    fclose(fopen(p, "w"));
    printf("remove file %d\n", remove(p));
    snprintf(p, sizeof p, "%s/dir", argv[1]);
    mkdir(p, 0755);
    printf("remove dir %d\n", remove(p));
    int r = remove(p);
    int e = errno;
    printf("remove missing %d %s\n", r, strerror(e));
    int alive = 0;
    for (int i = 0; i < 1000; i++)
        alive += kill(getppid(), 0) == 0;
    printf("parent alive %d\n", alive);
    r = kill(getpid(), 12345);
    e = errno;
    printf("kill bad signal %d %s\n", r, strerror(e));
    fprintf(stderr, "pid %d\n", getpid());
    return 0;
}
