/* Directory streams: make N long names in DIR (argv[1]), then list them
 * with readdir, readdir_r, telldir/seekdir, rewinddir, fdopendir and dirfd,
 * and print what a program would see (the same on any file system). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define N 3000

static int count(DIR *d) {
    int n = 0;
    while (readdir(d))
        n++;
    return n;
}

int main(int argc, char **argv) {
    char path[4096];
    for (int i = 0; i < N; i++) {
        snprintf(path, sizeof path, "%s/entry-with-a-rather-long-name-%05d", argv[1], i);
        close(open(path, O_CREAT | O_WRONLY, 0644));
    }
    DIR *d = opendir(argv[1]);
    if (!d) {
        perror("opendir");
        return 1;
    }
    struct stat st;
    printf("dirfd is a directory %d\n", fstat(dirfd(d), &st) == 0 && S_ISDIR(st.st_mode));
    int n = 0;
    long mark = -1;
    char after[256] = "";
    struct dirent *e;
    while ((e = readdir(d))) {
        if (++n == 1000)
            mark = telldir(d);
        else if (n == 1001)
            snprintf(after, sizeof after, "%s", e->d_name);
    }
    printf("entries %d\n", n);
    seekdir(d, mark);
    e = readdir(d);
    printf("seekdir returns to the same entry %d\n", e && strcmp(e->d_name, after) == 0);
    errno = 1234;
    while (readdir(d))
        ;
    printf("errno kept at the end %d\n", errno == 1234);
    rewinddir(d);
    printf("after rewinddir %d\n", count(d));
    rewinddir(d);
    struct dirent buf, *res;
    int m = 0;
    while (readdir_r(d, &buf, &res) == 0 && res)
        m++;
    printf("readdir_r %d\n", m);
    printf("closedir %d\n", closedir(d));

    int fd = open(argv[1], O_RDONLY | O_DIRECTORY);
    DIR *f = fdopendir(fd);
    printf("fdopendir %d same fd %d\n", f ? count(f) : -1, f && dirfd(f) == fd);
    closedir(f);
    snprintf(path, sizeof path, "%s/entry-with-a-rather-long-name-00000", argv[1]);
    int file = open(path, O_RDONLY);
    errno = 0;
    printf("fdopendir of a file %s %s\n", fdopendir(file) ? "ok" : "NULL", strerror(errno));
    close(file);
    snprintf(path, sizeof path, "%s/missing", argv[1]);
    errno = 0;
    printf("opendir of a missing name %s %s\n", opendir(path) ? "ok" : "NULL", strerror(errno));
    errno = 0;
    printf("opendir of a file %s %s\n",
           opendir(argv[1]) && opendir(strcat(strcpy(path, argv[1]), "/entry-with-a-rather-long-name-00001")) ? "ok" : "NULL",
           strerror(errno));
    return 0;
}
