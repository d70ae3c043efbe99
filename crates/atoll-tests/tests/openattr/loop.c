/* 1 000 times: stat a path, open it, fstat the descriptor, close it
 * (dbench's NTCreateX; with `d`, the directory: glibc's opendir opens and
 * fstats; with `o`, the file without the stat: each open follows the
 * last close at once, as stdio's fopen, fread, fclose in a loop do).
 * Usage: loop DIR f|d|o */
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
        if (argv[2][0] != 'o')
            stat(p, &st);
        int fd = open(argv[2][0] == 'd' ? argv[1] : p, O_RDONLY);
        fstat(fd, &st);
        close(fd);
    }
    return 0;
}
