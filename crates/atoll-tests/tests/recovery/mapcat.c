/* mapcat FILE: print FILE through a shared mmap of it (the client's own
 * `Request::Map`), then unmap and close it. */
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc != 2)
        return 2;
    int fd = open(argv[1], O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || st.st_size == 0) {
        perror("open");
        return 1;
    }
    char *p = mmap(NULL, st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    if (write(1, p, st.st_size) != st.st_size) {
        perror("write");
        return 1;
    }
    if (munmap(p, st.st_size) != 0 || close(fd) != 0) {
        perror("munmap");
        return 1;
    }
    return 0;
}
