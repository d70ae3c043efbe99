/* posix_spawn and posix_spawnp with file actions (the spawns atoll makes
 * a fork): a program that cannot run must make the call fail with the
 * exec's error, as on Linux, not give a child that exits with 127. */
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static void try(const char *what, int search, const char *prog, int bad_action)
{
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    /* The child's stdout becomes a file of the directory. */
    posix_spawn_file_actions_addopen(&fa, 1, "spawn.out", O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (bad_action)
        posix_spawn_file_actions_addopen(&fa, 5, "no/such/dir/f", O_RDONLY, 0);
    char *argv[] = {(char *)prog, NULL};
    pid_t pid = 0;
    int r = search ? posix_spawnp(&pid, prog, &fa, NULL, argv, environ)
                   : posix_spawn(&pid, prog, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (r != 0) {
        /* No child is left to reap. */
        int w = waitpid(-1, NULL, WNOHANG);
        printf("%s: %s, children left %s\n", what, strerror(r),
               w == -1 && errno == ECHILD ? "none" : "some");
        return;
    }
    int st = 0;
    waitpid(pid, &st, 0);
    printf("%s: started, exit %d\n", what, WIFEXITED(st) ? WEXITSTATUS(st) : -1);
}

int main(void)
{
    FILE *f = fopen("noshebang", "w");
    fputs("\necho from-script\n", f);
    fclose(f);
    chmod("noshebang", 0755);
    f = fopen("notexec", "w");
    fputs("#!/bin/sh\necho never\n", f);
    fclose(f);
    chmod("notexec", 0644);
    mkdir("bin", 0755);
    f = fopen("bin/tool", "w");
    fputs("#!/bin/sh\necho tool-ran\n", f);
    fclose(f);
    chmod("bin/tool", 0755);

    try("script without #!", 0, "./noshebang", 0);
    try("missing program", 0, "./missing", 0);
    try("not executable", 0, "./notexec", 0);
    try("a directory", 0, "bin", 0);
    try("a failing file action", 0, "bin/tool", 1);
    try("a program that runs", 0, "bin/tool", 0);
    setenv("PATH", "./nodir:.:./bin", 1);
    try("PATH search, not executable first", 1, "notexec", 0);
    try("PATH search, missing everywhere", 1, "nothing-here", 0);
    try("PATH search, found", 1, "tool", 0);
    fflush(stdout);
    system("cat spawn.out");
    return 0;
}
