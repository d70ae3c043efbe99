//! Interposition: system calls that bypass libc's exported wrappers (raw
//! `syscall()`, libc-internal calls made by stdio, `opendir`, `realpath`,
//! `nftw`, `posix_spawn`) still reach atoll through the safety net.

use atoll_tests::OutputBounded as _;
use atoll_tests::{atoll, compile_probe, MOUNT};

const RAW_SYSCALLS: &str = r#"
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

struct linux_dirent64 { unsigned long d_ino; long d_off; unsigned short d_reclen; unsigned char d_type; char d_name[]; };

int main(int argc, char **argv) {
    char path[4096], path2[4096];
    snprintf(path, sizeof path, "%s/raw.txt", argv[1]);
    long fd = syscall(SYS_openat, AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    if (fd < 0) { perror("openat"); return 1; }
    if (syscall(SYS_write, fd, "raw bytes\n", 10) != 10) { perror("write"); return 1; }
    syscall(SYS_close, fd);
    snprintf(path2, sizeof path2, "%s/renamed.txt", argv[1]);
    if (syscall(SYS_renameat2, AT_FDCWD, path, AT_FDCWD, path2, 0) != 0) { perror("renameat2"); return 1; }
    if (syscall(SYS_renameat2, AT_FDCWD, path2, AT_FDCWD, path2, 1 /* RENAME_NOREPLACE */) == 0) {
        fprintf(stderr, "NOREPLACE onto itself must fail\n"); return 1;
    }
    long dfd = syscall(SYS_openat, AT_FDCWD, argv[1], O_RDONLY | O_DIRECTORY);
    if (dfd < 0) { perror("openat dir"); return 1; }
    char buf[8192]; int names = 0;
    for (;;) {
        long n = syscall(SYS_getdents64, dfd, buf, sizeof buf);
        if (n < 0) { perror("getdents64"); return 1; }
        if (n == 0) break;
        for (long off = 0; off < n;) {
            struct linux_dirent64 *d = (void *)(buf + off);
            if (strcmp(d->d_name, "renamed.txt") == 0) names++;
            off += d->d_reclen;
        }
    }
    printf("renamed.txt seen %d time(s)\n", names);
    char data[64] = {0};
    long rfd = syscall(SYS_openat, dfd, "renamed.txt", O_RDONLY);
    long got = syscall(SYS_read, rfd, data, sizeof data - 1);
    printf("read %ld: %s", got, data);
    return 0;
}
"#;

const LIBC_INTERNALS: &str = r#"
#define _GNU_SOURCE
#include <dirent.h>
#include <ftw.h>
#include <limits.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;
static int files;
static int visit(const char *p, const struct stat *st, int type, struct FTW *f) {
    (void)p; (void)st; (void)f;
    if (type == FTW_F) files++;
    return 0;
}

int main(int argc, char **argv) {
    char p[4096];
    snprintf(p, sizeof p, "%s/a/b", argv[1]);
    snprintf(p, sizeof p, "%s/a", argv[1]); mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/a/b", argv[1]); mkdir(p, 0755);
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/a/b/f%d", argv[1], i);
        FILE *f = fopen(p, "w");
        if (!f) { perror("fopen"); return 1; }
        fprintf(f, "stdio line %d\n", i);
        fclose(f);
    }
    snprintf(p, sizeof p, "%s/a/b/f1", argv[1]);
    FILE *f = fopen(p, "r"); char line[64];
    if (!f || !fgets(line, sizeof line, f)) { perror("fopen r"); return 1; }
    printf("%s", line); fclose(f);
    snprintf(p, sizeof p, "%s/a/b", argv[1]);
    DIR *d = opendir(p); int n = 0; struct dirent *e;
    if (!d) { perror("opendir"); return 1; }
    while ((e = readdir(d))) n++;
    closedir(d);
    printf("opendir saw %d entries\n", n);
    snprintf(p, sizeof p, "%s/a/./b/../b/f2", argv[1]);
    char real[PATH_MAX];
    if (!realpath(p, real)) { perror("realpath"); return 1; }
    printf("realpath %s\n", real);
    snprintf(p, sizeof p, "%s/a", argv[1]);
    if (nftw(p, visit, 8, FTW_PHYS) != 0) { perror("nftw"); return 1; }
    printf("nftw files %d\n", files);
    snprintf(p, sizeof p, "%s/a/b/f0", argv[1]);
    char *args[] = {"cat", p, NULL};
    fflush(stdout);
    pid_t pid; int st;
    if (posix_spawnp(&pid, "cat", NULL, NULL, args, environ) != 0) { perror("posix_spawnp"); return 1; }
    waitpid(pid, &st, 0);
    printf("spawned cat exited %d\n", WEXITSTATUS(st));
    return 0;
}
"#;

const SPAWN_FILE_ACTIONS: &str = r#"
#define _GNU_SOURCE
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

int main(int argc, char **argv) {
    int p[2];
    if (pipe(p) != 0) { perror("pipe"); return 1; }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, p[1], 1);
    posix_spawn_file_actions_addclose(&fa, p[0]);
    char *echo[] = {"echo", "through a pipe", NULL};
    pid_t pid; int st;
    if (posix_spawnp(&pid, "echo", &fa, NULL, echo, environ) != 0) { perror("spawn"); return 1; }
    close(p[1]);
    char buf[64] = {0};
    ssize_t n = read(p[0], buf, sizeof buf - 1);
    waitpid(pid, &st, 0);
    printf("read %zd: %s", n, buf);
    char path[4096];
    snprintf(path, sizeof path, "%s/spawned.txt", argv[1]);
    posix_spawn_file_actions_t fb;
    posix_spawn_file_actions_init(&fb);
    posix_spawn_file_actions_addopen(&fb, 1, path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    char *echo2[] = {"echo", "into an atoll file", NULL};
    if (posix_spawnp(&pid, "echo", &fb, NULL, echo2, environ) != 0) { perror("spawn2"); return 1; }
    waitpid(pid, &st, 0);
    FILE *f = fopen(path, "r");
    if (!f || !fgets(buf, sizeof buf, f)) { perror("read back"); return 1; }
    printf("file: %s", buf);
    return 0;
}
"#;

fn run_probe(source: &str, name: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let bin = compile_probe(dir.path(), name, source);
    let out = atoll()
        .args(["run", "--memory", "64M", "--"])
        .arg(&bin)
        .arg(MOUNT)
        .output_bounded()
        .expect("spawn atoll");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "probe {name} failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn raw_syscalls_on_atoll_paths_go_through_the_safety_net() {
    let out = run_probe(RAW_SYSCALLS, "raw");
    assert_eq!(out, "renamed.txt seen 1 time(s)\nread 10: raw bytes\n");
}

#[test]
fn stdio_opendir_realpath_nftw_and_posix_spawn_work_on_atoll_paths() {
    let out = run_probe(LIBC_INTERNALS, "internals");
    assert_eq!(
        out,
        format!(
            "stdio line 1\nopendir saw 5 entries\nrealpath {MOUNT}/a/b/f2\nnftw files 3\nstdio line 0\nspawned cat exited 0\n"
        )
    );
}

#[test]
fn posix_spawn_file_actions_act_on_atoll_pipes_and_files() {
    let out = run_probe(SPAWN_FILE_ACTIONS, "spawn_actions");
    assert_eq!(out, "read 15: through a pipe\nfile: into an atoll file\n");
}

/// valgrind runs a program on its own CPU emulator: Syscall User Dispatch
/// would trap valgrind itself, so the library serves such a program through
/// its wrappers alone, and must not touch the vDSO that valgrind hides.
/// valgrind's tool is a static image: the program it runs attaches anew,
/// in the cwd it was started in, and behind a relay when it inherits an
/// atoll pipe.
#[test]
fn programs_run_under_valgrind_use_the_mount() {
    atoll_tests::require("valgrind");
    let o = atoll_tests::run_in_atoll(
        &[],
        r#"
        cd "$ROOT" && echo hi > f
        valgrind -q --error-exitcode=9 cat f
        valgrind -q --error-exitcode=9 cat f | cat
        valgrind -q --error-exitcode=9 sh -c 'echo sub > g; cat g'
        echo "status $? $(cat g)"
        "#,
    );
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(out, "hi\nhi\nsub\nstatus 0 sub\n", "{err}");
}

/// `statvfs`, `remove` and `kill` answer as glibc's do (the same numbers
/// for a host directory inside and outside atoll, Linux's errors), and
/// reach the kernel through the wrappers, not through a trap each: the
/// probe's own trap counts show none of `kill`, `statfs`, `unlink`, `rmdir`.
#[test]
fn statvfs_remove_and_kill_answer_as_glibc_without_traps() {
    let dir = tempfile::tempdir().unwrap();
    let bin = compile_probe(
        dir.path(),
        "composites",
        include_str!("interposition/composites.c"),
    );
    let host_dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let traps = dir.path().join("traps");
    let out = atoll()
        .args(["run", "--servers", "2", "--"])
        .arg(&bin)
        .arg(MOUNT)
        .arg(host_dir.path())
        .env("ATOLL_TRAP_STATS", &traps)
        .output_bounded()
        .expect("spawn atoll");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(
        stdout.contains("mount bsize 4096 frsize 4096 namemax 255 flag 0 "),
        "{stdout}"
    );
    assert!(stdout.contains("fstatvfs ok"), "{stdout}");
    assert!(
        stdout.contains("remove file 0\nremove dir 0\nremove missing -1 No such file or directory"),
        "{stdout}"
    );
    assert!(
        stdout.contains("parent alive 1000\nkill bad signal -1 Invalid argument"),
        "{stdout}"
    );
    // The host directory: the same answer as without atoll.
    let host_out = std::process::Command::new(&bin)
        .arg(host_dir.path())
        .arg(host_dir.path())
        .output_bounded()
        .expect("probe on the host");
    let host_line = |s: &str| {
        s.lines()
            .find(|l| l.starts_with("host "))
            .map(str::to_string)
    };
    assert_eq!(
        host_line(&stdout),
        host_line(&String::from_utf8_lossy(&host_out.stdout))
    );
    let pid = stderr
        .lines()
        .find_map(|l| l.strip_prefix("pid "))
        .expect("probe pid")
        .trim()
        .to_string();
    let counts = std::fs::read_to_string(&traps).expect("trap counts");
    let mine = counts
        .lines()
        .filter(|l| l.split_whitespace().next() == Some(pid.as_str()))
        .flat_map(|l| l.split_whitespace().skip(1).map(str::to_string))
        .collect::<Vec<_>>();
    for nr in [
        libc::SYS_kill,
        libc::SYS_statfs,
        libc::SYS_unlink,
        libc::SYS_rmdir,
    ] {
        assert!(
            !mine.iter().any(|c| c.starts_with(&format!("{nr}:"))),
            "system call {nr} trapped: {mine:?}"
        );
    }
}

/// Directory streams (`opendir`, `readdir`, `readdir_r`, `telldir`/
/// `seekdir`, `rewinddir`, `fdopendir`, `dirfd`, `closedir`) over a
/// directory of 3000 long names (several buffers' worth) behave in atoll
/// as glibc's on tmpfs, with 1 and 3 servers (a distributed directory),
/// and list without a trap per buffer: the probe traps no `getdents64`.
#[test]
fn directory_streams_behave_as_glibcs_without_traps() {
    let dir = tempfile::tempdir().unwrap();
    let bin = compile_probe(
        dir.path(),
        "dirstreams",
        include_str!("interposition/dirstreams.c"),
    );
    let on_tmpfs = tempfile::tempdir_in("/dev/shm").unwrap();
    let host = std::process::Command::new(&bin)
        .arg(on_tmpfs.path())
        .output_bounded()
        .expect("probe on tmpfs");
    let expected = String::from_utf8_lossy(&host.stdout).to_string();
    assert!(expected.contains("entries 3002"), "{expected}");
    for opts in [
        &["--servers", "1"][..],
        &["--servers", "3", "--distribute", "all"],
    ] {
        let traps = dir.path().join("traps");
        let out = atoll()
            .arg("run")
            .args(opts)
            .args(["--", "bash", "-c", "mkdir /atoll/d && exec \"$0\" /atoll/d"])
            .arg(&bin)
            .env("ATOLL_TRAP_STATS", &traps)
            .output_bounded()
            .expect("spawn atoll");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            expected,
            "{opts:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let counts = std::fs::read_to_string(&traps).unwrap_or_default();
        let getdents = format!(" {}:", libc::SYS_getdents64);
        assert!(
            !counts.contains(&getdents),
            "{opts:?}: getdents64 trapped: {counts}"
        );
        let _ = std::fs::remove_file(&traps);
    }
}
