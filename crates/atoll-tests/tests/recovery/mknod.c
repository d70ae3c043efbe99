/* mknod(2) of a regular file (recovery.rs): the client creates it with an
   `Open` (O_CREAT|O_EXCL) and closes the description with a `Close` it
   waits for, whose error mknod returns. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: mknod PATH\n");
        return 2;
    }
    if (mknod(argv[1], S_IFREG | 0640, 0) != 0) {
        fprintf(stderr, "mknod: %s\n", strerror(errno));
        return 1;
    }
    return 0;
}
