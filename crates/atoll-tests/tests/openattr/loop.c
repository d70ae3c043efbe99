/* 1 000 times: stat a path, open it, fstat the descriptor, close it
 * (dbench's NTCreateX; with `d`, the directory: glibc's opendir opens and
 * fstats; with `o`, the file without the stat: each open follows the
 * last close at once, as stdio's fopen, fread, fclose in a loop do;
 * with `e`, that and an lseek to the end before the fstat; with `a`, the
 * same on an O_APPEND descriptor, as fopen "a" does).
 * Usage: loop DIR f|d|o|e|a */
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>
#include <dirent.h>
int main(int argc, char **argv) {
    struct stat st;
    char p[4096];
    snprintf(p, sizeof p, "%s/f", argv[1]);
    close(open(p, O_CREAT | O_WRONLY, 0644));
    for (int i = 0; i < 1000; i++) {
        char k = argv[2][0];
        if (k == 'f' || k == 'd')
            stat(p, &st);
        int fd = k == 'a' ? open(p, O_WRONLY | O_APPEND)
                          : open(k == 'd' ? argv[1] : p, O_RDONLY);
        if ((k == 'e' || k == 'a') && lseek(fd, 0, SEEK_END) < 0)
            return 1;
        fstat(fd, &st);
        close(fd);
    }
    return 0;
}
