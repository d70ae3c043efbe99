//! Programs that cannot load the client library (statically linked, here
//! busybox) in pipelines and redirections of the mount: they run behind
//! relays of the atoll descriptors they inherit (the CLI's `foreign.rs`,
//! client `exec/foreign.rs`), so their input, output, exit status and
//! signals are what they are on a host directory. They also name paths in
//! the mount themselves: the relay's seccomp supervisor serves them (CLI
//! `foreign/`), so `busybox cat`, `ls`, `mkdir`, `rm -r`, `cp`, `stat`
//! and a static shell's `cd` there behave as on a tmpfs directory.

use atoll_tests::{assert_same, require};

/// Instances with more servers than this machine has cores.
const OPTS: &[&str] = &["--servers", "3"];

#[test]
fn a_static_program_reads_and_writes_atoll_pipes_and_files_as_on_the_host() {
    require("busybox");
    let out = assert_same(
        OPTS,
        r#"
        set -e
        cd "$ROOT"
        seq 1 2000 > nums
        busybox sort -rn < nums | head -3
        busybox cat < nums | busybox wc -l
        seq 1 5 | busybox tac | tr '\n' ' '; echo
        busybox cat < nums > copy; cmp nums copy && echo same
        busybox echo appended >> copy; tail -1 copy; wc -l < copy
        head -c 3000000 /dev/zero | busybox wc -c
        echo rw > rw; busybox cat <> rw
        cat nums nums | busybox head -2
        "#,
        true,
    );
    assert!(out.contains("2000\n1999\n1998\n"), "{out}");
    assert!(
        out.contains("same\nappended\n2001\n3000000\nrw\n1\n2\n"),
        "{out}"
    );
}

#[test]
fn a_static_program_s_exit_status_and_signals_are_its_own() {
    require("busybox");
    let out = assert_same(
        OPTS,
        r#"
        cd "$ROOT"
        busybox sh -c 'echo out; exit 3' | cat; echo "status ${PIPESTATUS[0]}"
        busybox sh -c 'kill -TERM $$' | cat; echo "status ${PIPESTATUS[0]}"
        yes | busybox head -c 5 | wc -c
        busybox sleep 10 > slept & p=$!
        sleep 0.5
        kill -TERM $p; wait $p; echo "killed $?"
        busybox sh -c 'echo first; echo second >&2' > both 2>&1; sort both
        # what it leaves running writes on after its parent went on
        busybox sh -c '(sleep 1; echo late) &' > later; cat later; echo went-on
        sleep 2; cat later
        "#,
        true,
    );
    assert!(
        out.contains("out\nstatus 3\nstatus 143\n5\nkilled 143\n"),
        "{out}"
    );
    assert!(out.contains("first\nsecond\nwent-on\nlate\n"), "{out}");
}

/// `kill -KILL` of a static program's pid reaches its relay (the caller's
/// process), which cannot pass it on: the program dies with it, as on
/// the host.
#[test]
fn a_static_program_killed_with_sigkill_is_gone() {
    require("busybox");
    let out = assert_same(
        OPTS,
        r#"
        cd "$ROOT"
        busybox sh -c 'echo $$ > pid; exec busybox sleep 30' & p=$!
        until [ -s pid ]; do :; done; read q < pid
        { kill -KILL $p; wait $p; s=$?; } 2>/dev/null; echo "status $s"
        running() { [ -e /proc/$1 ] && ! grep -q '^State:.*Z' /proc/$1/status 2>/dev/null; }
        i=0; while running $q && [ $i -lt 250 ]; do sleep 0.02; i=$((i+1)); done
        if running $q; then echo "program runs on"; kill -KILL $q; else echo "program gone"; fi
        "#,
        true,
    );
    assert_eq!(out, "status 137\nprogram gone\n");
}

/// A static program killed in the middle of its path calls in the mount
/// (the relay's supervisor may be serving one: it checks the call is
/// still valid and drops an answer to a dead thread): the relay ends with
/// its status at once, ten times over, and nothing is left waiting.
#[test]
fn a_static_program_killed_during_its_calls_in_the_mount_ends_at_once() {
    require("busybox");
    let out = assert_same(
        OPTS,
        r#"
        cd "$ROOT"
        mkdir -p d; echo x > d/f
        for round in 1 2 3 4 5 6 7 8 9 10; do
            rm -f pid
            busybox sh -c 'echo $$ > pid; while :; do busybox stat d/f > /dev/null; cat d/f > /dev/null; done' & p=$!
            until [ -s pid ]; do :; done; read q < pid
            sleep 0.0$round
            { kill -KILL $q; wait $p; s=$?; } 2>/dev/null
            echo "round $round: $s"
        done
        cat d/f
        "#,
        true,
    );
    assert!(out.ends_with("round 10: 137\nx\n"), "{out}");
}

/// A dynamic program a static shell starts after `cd` (into the mount,
/// and back out to the host) starts in that directory, as on the host:
/// the relay leaves the cwd it tracks for the exec'ing process, and the
/// new image's client starts there.
#[test]
fn a_dynamic_program_started_by_a_static_shell_after_cd_starts_there() {
    require("busybox");
    let out = assert_same(
        OPTS,
        r#"
        cd "$ROOT"
        mkdir -p d/e; echo in-e > d/e/f
        busybox sh -c 'cd d/e && /bin/pwd && /bin/ls && /bin/cat f && cd .. && /bin/ls && cd /usr && /bin/pwd'
        "#,
        true,
    );
    assert!(out.ends_with("/d/e\nf\nin-e\ne\n/usr\n"), "{out}");
}

/// Files and directories a static program makes in the mount take its own
/// umask, as on the host (the relay that makes them has the caller's).
#[test]
fn a_static_program_s_creations_take_its_umask() {
    require("busybox");
    let out = assert_same(
        OPTS,
        r#"
        cd "$ROOT"
        busybox sh -c 'umask 077; echo x > f1; mkdir d1; umask 027; echo y > f2; mkdir d2'
        stat -c '%a %n' f1 d1 f2 d2
        "#,
        true,
    );
    assert_eq!(out, "600 f1\n700 d1\n640 f2\n750 d2\n");
}

/// A set-user-ID program (run by another user than its owner, so the
/// loader ignores `LD_PRELOAD` paths) reads and writes the atoll pipes it
/// inherits, behind the same relay.
#[test]
fn a_set_user_id_program_keeps_its_atoll_pipes() {
    // SAFETY: geteuid has no arguments and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root to make a set-user-ID copy owned by nobody");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let cat = dir.path().join("suidcat");
    std::fs::copy("/bin/cat", &cat).expect("copy cat");
    let nobody = std::process::Command::new("chown")
        .arg("nobody")
        .arg(&cat)
        .status()
        .expect("chown");
    assert!(nobody.success());
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&cat, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let out = assert_same(
        OPTS,
        &format!(
            r#"
            cd "$ROOT"
            seq 1 300 | {cat} | tail -2
            seq 1 5 > five; {cat} < five > copy; cat copy | wc -l
            "#,
            cat = cat.display()
        ),
        true,
    );
    assert_eq!(out, "299\n300\n5\n");
}

/// A program that cannot load the client gets none of atoll's own
/// descriptors (session socket, control block, buffer cache), with or
/// without a relay, and a dynamic program it starts is an atoll client
/// again.
#[test]
fn a_static_program_gets_no_atoll_internals_and_its_dynamic_children_see_the_mount() {
    require("busybox");
    let out = atoll_tests::run_in_atoll(
        OPTS,
        r#"
        echo hi > /atoll/f
        busybox ls -l /proc/self/fd | grep -c -e memfd:atoll -e socket:
        busybox ls -l /proc/self/fd | cat | grep -c -e memfd:atoll -e socket:
        busybox sh -c '/bin/cat /atoll/f; /bin/cat /atoll/f | /bin/cat'
        "#,
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "0\n0\nhi\nhi\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Two servers: a static program's paths reach both through the relay.
const TWO: &[&str] = &["--servers", "2"];

#[test]
fn a_static_program_reads_and_lists_files_in_the_mount() {
    require("busybox");
    let out = atoll_tests::assert_same_on_tmpfs(
        TWO,
        r#"
        cd "$ROOT"
        mkdir d d/sub; printf abc > d/a; seq 1 100 > d/b; ln -s a d/link
        busybox cat "$ROOT/d/b" | tail -1
        busybox cat "$ROOT/d/a" "$ROOT/d/link"; echo
        busybox ls -a "$ROOT/d" | tr '\n' ' '; echo
        busybox ls -la "$ROOT/d" | awk '$1 ~ /^[-l]/ {print $1, $5, $9, $10, $11}'
        busybox readlink "$ROOT/d/link"
        busybox wc -c "$ROOT/d/b"
        cd d && busybox cat b | busybox head -2 && busybox ls
        busybox find "$ROOT/d" | sort
        busybox ls -a "$ROOT" | head -2; busybox stat -c '%F' "$ROOT/.." "$ROOT/../$(basename "$ROOT")/d"
        "#,
        true,
    );
    assert!(
        out.starts_with("100\nabcabc\n. .. a b link sub \n"),
        "{out}"
    );
}

#[test]
fn a_static_program_makes_and_removes_directories_and_files_in_the_mount() {
    require("busybox");
    let out = atoll_tests::assert_same_on_tmpfs(
        TWO,
        r#"
        cd "$ROOT"
        busybox mkdir -p "$ROOT/x/y/z" && ls -R x
        busybox touch "$ROOT/x/y/f"; echo data > x/y/g
        busybox mv "$ROOT/x/y/g" "$ROOT/x/h"; ls x x/y
        busybox rmdir "$ROOT/x/y/z"; busybox rmdir "$ROOT/x"; echo "rmdir $?"
        busybox rm -r "$ROOT/x"; ls; echo "left: $(ls | wc -l)"
        busybox mkdir "$ROOT/e"; busybox mkdir "$ROOT/e"; echo "again $?"
        "#,
        true,
    );
    assert!(out.contains("rmdir 1\n"), "{out}");
    assert!(out.contains("left: 0\nagain 1\n"), "{out}");
}

#[test]
fn a_file_a_static_program_copies_into_the_mount_reads_back_in_a_normal_program() {
    require("busybox");
    let out = atoll_tests::assert_same_on_tmpfs(
        TWO,
        r#"
        s=$(mktemp); seq 1 5000 > "$s"
        busybox cp "$s" "$ROOT/c"; rm -f "$s"
        wc -l < "$ROOT/c"; md5sum < "$ROOT/c"
        busybox cp "$ROOT/c" "$ROOT/c2"; cmp "$ROOT/c" "$ROOT/c2" && echo same
        echo more >> "$ROOT/c2"; busybox tail -1 "$ROOT/c2"
        busybox sh -c "echo appended >> $ROOT/c2"; tail -2 "$ROOT/c2"
        "#,
        true,
    );
    assert!(out.starts_with("5000\n"), "{out}");
    assert!(out.ends_with("same\nmore\nmore\nappended\n"), "{out}");
}

/// A static shell's `cd` into the mount is the relay's to track: a file it
/// then creates by a relative name is in the mount (a dynamic program sees
/// it) and nothing appears in the host directory it started from.
#[test]
fn a_static_shell_cds_into_the_mount_and_creates_nothing_on_the_host() {
    require("busybox");
    let out = atoll_tests::assert_same_on_tmpfs(
        TWO,
        r#"
        h=$(mktemp -d); cd "$h"
        mkdir "$ROOT/d"
        busybox sh -c "cd $ROOT/d && echo x > f && pwd && busybox cat f && busybox ls"
        cat "$ROOT/d/f"
        echo "host: $(ls -A "$h" | wc -l)"; rm -rf "$h"
        "#,
        true,
    );
    assert_eq!(out, "$ROOT/d\nx\nf\nx\nhost: 0\n");
}

#[test]
fn stat_by_a_static_program_reports_as_on_tmpfs() {
    require("busybox");
    let out = atoll_tests::assert_same_on_tmpfs(
        TWO,
        r#"
        cd "$ROOT"
        printf 12345 > f; mkdir d
        busybox stat -c '%s %F %a' "$ROOT/f" "$ROOT/d"
        busybox stat "$ROOT/missing"; echo "status $?"
        busybox test -e "$ROOT/f" && echo exists
        busybox test -e "$ROOT/missing" || echo missing
        "#,
        true,
    );
    assert!(out.starts_with("5 regular file 644\n"), "{out}");
}

/// Bad pointers in a static program's path calls get `EFAULT` from the
/// relay as from Linux, whether the path or the result buffer is bad, and
/// a relative name from its cwd in the mount is the mount's.
#[test]
fn a_static_program_s_bad_pointers_are_efault_as_on_the_host() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = atoll_tests::compile_static_probe(
        dir.path(),
        "bad",
        r#"
        #include <errno.h>
        #include <fcntl.h>
        #include <stdio.h>
        #include <string.h>
        #include <unistd.h>
        #include <sys/stat.h>
        static void show(const char *what, long r) {
            printf("%s %ld %s\n", what, r, r < 0 ? strerror(errno) : "");
        }
        int main(int argc, char **argv) {
            struct stat st;
            char buf[64];
            show("stat-bad-path", stat((const char *)8, &st));
            show("stat-bad-buf", stat(argv[1], (struct stat *)8));
            show("open-bad-path", open((const char *)8, O_RDONLY));
            show("mkdir-bad-path", mkdir((const char *)8, 0755));
            show("chdir", chdir(argv[1]));
            show("getcwd-bad-buf", (long)syscall(79, (char *)8, 4096));
            show("getcwd-short", (long)syscall(79, buf, 2));
            int fd = open("made", O_CREAT | O_WRONLY, 0644);
            show("write", write(fd, "hi\n", 3));
            show("close", close(fd));
            show("stat-rel", stat("made", &st));
            printf("size %ld\n", (long)st.st_size);
            return 0;
        }
        "#,
    );
    let out = atoll_tests::assert_same_on_tmpfs(
        TWO,
        &format!(
            r#"
            mkdir "$ROOT/d"
            {bin} "$ROOT/d"
            cat "$ROOT/d/made"
            "#,
            bin = bin.display()
        ),
        true,
    );
    assert!(out.starts_with("stat-bad-path -1 Bad address\n"), "{out}");
    assert!(out.ends_with("size 3\nhi\n"), "{out}");
}

#[test]
fn a_static_program_reads_and_writes_fifos_in_the_mount() {
    require("busybox");
    // Each open waits for the other end, as on Linux (no sleeps needed):
    // a static reader, a static writer, both static, a write larger than
    // a pipe, a writer whose children write through the same open, and a
    // read-write open that reads back what it wrote.
    let out = atoll_tests::assert_same_on_tmpfs(
        TWO,
        r#"
        cd "$ROOT"
        mkfifo f
        busybox cat f > got & seq 1 3 > f; wait; cat got
        cat f > got & busybox sh -c '{ echo from-static; echo second; } > f'; wait; cat got
        busybox cat f | busybox wc -c & busybox sh -c 'busybox head -c 300000 /dev/zero > f'; wait
        busybox sh -c 'cat f' > got & busybox sh -c 'exec > f; echo parent; busybox sh -c "echo child"; echo after'; wait; cat got
        busybox sh -c 'exec 3<>f; echo both >&3; read x <&3; echo "read back $x"'
        busybox stat -c '%F %s' f
        "#,
        false,
    );
    assert!(
        out.starts_with(
            "1\n2\n3\nfrom-static\nsecond\n300000\nparent\nchild\nafter\nread back both\n"
        ),
        "{out}"
    );
}

#[test]
fn a_static_program_s_threads_list_directories_and_open_files_in_the_mount() {
    require("cc");
    // Go programs (the `go` command itself) make their calls from any
    // thread: a thread that is not the process's first one lists a
    // directory of the mount and reads a file opened by another thread.
    let out = atoll_tests::assert_same_on_tmpfs(
        TWO,
        r#"
        set -e
        cd "$ROOT"
        mkdir d; echo one > d/a; echo two > d/b
        cat > t.c <<'X'
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>
static int fd;
static void *list(void *dir) {
    DIR *d = opendir(dir);
    if (!d) { perror("opendir"); return 0; }
    struct dirent *e; int n = 0;
    while ((e = readdir(d))) if (e->d_name[0] != '.') n++;
    printf("entries %d\n", n);
    closedir(d);
    char b[16] = {0};
    if (pread(fd, b, sizeof b - 1, 0) < 0) perror("pread");
    printf("read %s", b);
    return 0;
}
int main(int c, char **v) {
    fd = open(v[2], O_RDONLY);
    pthread_t t;
    pthread_create(&t, 0, list, v[1]);
    pthread_join(t, 0);
    return 0;
}
X
        cc -static -pthread -o t t.c
        ./t d d/b
        "#,
        false,
    );
    assert_eq!(out, "entries 2\nread two\n");
}

/// A C probe, built both dynamic and static into `dir`: prints its
/// arguments, `FOO`, its cwd and, when `EXE` is set, what
/// `/proc/self/exe` names and its `comm`; exits with its argument count.
fn exec_probes(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let src = dir.join("probe.c");
    std::fs::write(
        &src,
        r#"
        #include <stdio.h>
        #include <stdlib.h>
        #include <unistd.h>
        int main(int argc, char **argv) {
            char cwd[4096], exe[4096];
            printf("argv0=%s", argv[0]);
            for (int i = 1; i < argc; i++) printf(" [%s]", argv[i]);
            printf(" FOO=%s cwd=%s\n", getenv("FOO") ? getenv("FOO") : "-",
                   getcwd(cwd, sizeof cwd) ? cwd : "?");
            if (getenv("EXE")) {
                ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
                exe[n > 0 ? n : 0] = 0;
                printf("exe=%s\n", exe);
                FILE *f = fopen("/proc/self/comm", "r");
                if (f && fgets(exe, sizeof exe, f)) printf("comm=%s", exe);
            }
            return argc;
        }
        "#,
    )
    .expect("write probe");
    let build = |name: &str, extra: &[&str]| {
        let bin = dir.join(name);
        let ok = std::process::Command::new("cc")
            .args(["-O1", "-Wall"])
            .args(extra)
            .arg("-o")
            .arg(&bin)
            .arg(&src)
            .status()
            .expect("run cc");
        assert!(ok.success(), "probe {name} failed to compile");
        bin
    };
    (build("pdyn", &[]), build("pstat", &["-static"]))
}

/// A static shell runs programs stored in the mount as on the host: a
/// dynamic one (which becomes a full client: its cwd in the mount, its
/// `/proc/self/exe`, `FOO` given on the command line) and a static one,
/// by relative and absolute names, with their arguments, `argv[0]` and
/// exit status as given; `exec` of one keeps the pid's status.
#[test]
fn a_static_shell_runs_dynamic_and_static_programs_stored_in_the_mount() {
    require("busybox");
    let dir = tempfile::tempdir().expect("tempdir");
    let (pdyn, pstat) = exec_probes(dir.path());
    let copy = format!(
        "cd \"$ROOT\"; mkdir -p bin sub; cp {} bin/pdyn; cp {} bin/pstat\n",
        pdyn.display(),
        pstat.display()
    );
    let run = r#"
        busybox sh -c 'FOO=bar EXE=1 ./bin/pdyn a "b c"; echo "st=$?"'
        busybox sh -c './bin/pstat x; echo "st=$?"; "$ROOT/bin/pstat"; echo "st=$?"'
        busybox sh -c 'cd sub && EXE=1 ../bin/pdyn up; echo "st=$?"'
        busybox sh -c 'PATH=$ROOT/bin:$PATH; cd sub && pdyn by-path; exec pstat last'; echo "exec st=$?"
        "#;
    let out = atoll_tests::assert_same_on_tmpfs(TWO, &(copy + run), true);
    assert!(
        out.starts_with(
            "argv0=./bin/pdyn [a] [b c] FOO=bar cwd=$ROOT\nexe=$ROOT/bin/pdyn\ncomm=pdyn\nst=3\n\
             argv0=./bin/pstat [x] FOO=- cwd=$ROOT\nst=2\n"
        ),
        "{out}"
    );
    assert!(
        out.ends_with("[last] FOO=- cwd=$ROOT/sub\nexec st=2\n"),
        "{out}"
    );
}

/// busybox itself copied into the mount runs there, stays under the
/// relay (its own calls in the mount are served) and runs programs of
/// the mount in turn; what it prints and its status come back.
#[test]
fn a_static_program_copied_into_the_mount_runs_and_names_the_mount() {
    require("busybox");
    let out = atoll_tests::assert_same_on_tmpfs(
        TWO,
        r#"
        cd "$ROOT"
        mkdir d; echo one > d/f; echo two > d/g
        cp "$(command -v busybox)" ./busybox
        busybox sh -c './busybox sh -c "./busybox ls d; ./busybox cat d/f; cd d && ../busybox wc -l g; exit 4"; echo "st=$?"'
        ./busybox sh -c './busybox echo from-the-mount | ./busybox tr a-z A-Z'; echo "st=$?"
        "#,
        true,
    );
    assert_eq!(out, "f\ng\none\n1 g\nst=4\nFROM-THE-MOUNT\nst=0\n");
}

/// Scripts stored in the mount run under a static shell as on the host: a
/// `#!/bin/sh` one (the kernel runs the interpreter on the host, which
/// reads the script and the mount), and one without `#!`, which the
/// shell runs itself after `ENOEXEC`; arguments and status pass through.
#[test]
fn a_script_in_the_mount_runs_under_a_static_shell() {
    require("busybox");
    let out = atoll_tests::assert_same_on_tmpfs(
        TWO,
        r#"
        cd "$ROOT"
        echo data > in
        printf '#!/bin/sh\necho "args: $*"; cat in; exit 7\n' > s.sh
        printf 'echo "plain: $1"; exit 9\n' > plain
        chmod +x s.sh plain
        busybox sh -c './s.sh x "y z"; echo "st=$?"; ./plain p; echo "st=$?"'
        busybox sh -c 'mkdir -p sub; cd sub; ../s.sh up; echo "st=$?"'
        "#,
        true,
    );
    // From `sub`, the script's `cat in` looks there (an error on stderr,
    // compared with the host's too).
    assert_eq!(
        out,
        "args: x y z\ndata\nst=7\nplain: p\nst=9\nargs: up\nst=7\n"
    );
}

/// What cannot run in the mount fails as on the host, with the shell's
/// own words for it: a file without an execute bit (`Permission
/// denied`, until `chmod +x`), a missing one, a directory; and the
/// status is the shell's.
#[test]
fn programs_in_the_mount_that_cannot_run_fail_as_on_the_host() {
    require("busybox");
    let out = atoll_tests::assert_same_on_tmpfs(
        TWO,
        r#"
        cd "$ROOT"
        mkdir dir
        printf '#!/bin/sh\necho ran "$@"\n' > f
        busybox sh -c './f a; echo "st=$?"; ./missing; echo "st=$?"; ./dir; echo "st=$?"' 2>&1
        chmod +x f
        busybox sh -c './f a; echo "st=$?"' 2>&1
        chmod 600 f
        busybox sh -c 'exec ./f'; echo "exec st=$?"
        "#,
        true,
    );
    assert!(out.contains("./f: Permission denied\nst=126\n"), "{out}");
    assert!(out.contains("ran a\nst=0\n"), "{out}");
}

/// Bad pointers in a static program's exec of a program stored in the
/// mount are `EFAULT`, as on the host, whether the path, `argv` or the
/// environment is bad (the last two the kernel finds, after the relay
/// pointed the call at its copy); the exec then still works.
#[test]
fn a_static_program_s_bad_exec_pointers_are_efault_as_on_the_host() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_, pstat) = exec_probes(dir.path());
    let bin = atoll_tests::compile_static_probe(
        dir.path(),
        "badexec",
        r#"
        #include <errno.h>
        #include <stdio.h>
        #include <string.h>
        #include <unistd.h>
        extern char **environ;
        int main(int argc, char **argv) {
            char *args[] = {"again", "x", 0};
            execve((const char *)8, args, environ);
            printf("bad-path %s\n", strerror(errno));
            execve(argv[1], (char **)8, environ);
            printf("bad-argv %s\n", strerror(errno));
            execve(argv[1], args, (char **)8);
            printf("bad-envp %s\n", strerror(errno));
            fflush(stdout);
            execve(argv[1], args, environ);
            printf("exec %s\n", strerror(errno));
            return 1;
        }
        "#,
    );
    let out = atoll_tests::assert_same_on_tmpfs(
        TWO,
        &format!(
            "cd \"$ROOT\"; cp {} pstat; {} \"$ROOT/pstat\"; echo \"st=$?\"\n",
            pstat.display(),
            bin.display()
        ),
        true,
    );
    assert_eq!(
        out,
        "bad-path Bad address\nbad-argv Bad address\nbad-envp Bad address\n\
         argv0=again [x] FOO=- cwd=$ROOT\nst=2\n"
    );
}

/// A static shell killed while it runs programs stored in the mount over
/// and over (the relay may be copying one, or have the calling thread
/// stopped to point its exec at the copy): the relay ends with its status
/// at once, ten times over, and the mount is as it was.
#[test]
fn a_static_shell_killed_while_it_runs_mount_programs_ends_at_once() {
    require("busybox");
    let dir = tempfile::tempdir().expect("tempdir");
    let (pdyn, pstat) = exec_probes(dir.path());
    let out = atoll_tests::assert_same(
        OPTS,
        &format!(
            r#"
            cd "$ROOT"
            cp {} pdyn; cp {} pstat
            for round in 1 2 3 4 5 6 7 8 9 10; do
                rm -f pid
                busybox sh -c 'echo $$ > pid; while :; do ./pstat > /dev/null; ./pdyn > /dev/null; exec ./pstat > /dev/null & wait; done' & p=$!
                until [ -s pid ]; do :; done; read q < pid
                sleep 0.0$round
                {{ kill -KILL $q; wait $p; s=$?; }} 2>/dev/null
                echo "round $round: $s"
            done
            ./pstat done
            "#,
            pdyn.display(),
            pstat.display()
        ),
        true,
    );
    assert!(
        out.ends_with("round 10: 137\nargv0=./pstat [done] FOO=- cwd=$ROOT\n"),
        "{out}"
    );
}

/// A static program sets file times in the mount as on the host: `utime`,
/// `utimes` and `futimesat` (by path, by descriptor with a NULL path, and
/// NULL times for "now"), bad times refused (`EINVAL`), and `busybox
/// touch -d`/`-r` on new files, whose times set through the descriptor
/// must survive the file's write-back at `close`.
#[test]
fn a_static_program_sets_file_times_in_the_mount_as_on_the_host() {
    require("busybox");
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = atoll_tests::compile_static_probe(
        dir.path(),
        "times",
        r#"
        #include <errno.h>
        #include <fcntl.h>
        #include <stdio.h>
        #include <string.h>
        #include <time.h>
        #include <unistd.h>
        #include <utime.h>
        #include <sys/stat.h>
        #include <sys/syscall.h>
        #include <sys/time.h>
        /* A time within the last 1000 s is "now" (the host and atoll
           runs happen at different seconds). */
        static long t(time_t v) { return time(0) - v < 1000 ? 0 : (long)v; }
        static void show(const char *what, long r, const char *path) {
            struct stat st;
            stat(path, &st);
            printf("%s %ld %s atime=%ld mtime=%ld\n", what, r,
                   r < 0 ? strerror(errno) : "", t(st.st_atime), t(st.st_mtime));
        }
        int main(void) {
            struct utimbuf ub = {1000000000, 1100000000};
            struct timeval tv[2] = {{1200000000, 5}, {1300000000, 999999}};
            struct timeval bad[2] = {{1, 1000000}, {2, 0}};
            /* Raw calls: glibc's wrappers use utimensat. */
            show("utime", syscall(SYS_utime, "f", &ub), "f");
            show("utime-now", syscall(SYS_utime, "f", 0), "f");
            show("utimes", syscall(SYS_utimes, "f", tv), "f");
            show("utimes-bad", syscall(SYS_utimes, "f", bad), "f");
            show("utimes-missing", syscall(SYS_utimes, "missing", tv), "f");
            show("utimes-bad-path", syscall(SYS_utimes, (char *)8, tv), "f");
            show("utimes-bad-times", syscall(SYS_utimes, "f", (char *)8), "f");
            tv[1].tv_sec = 1400000000;
            show("futimesat", syscall(SYS_futimesat, AT_FDCWD, "f", tv), "f");
            int d = open("d", O_RDONLY | O_DIRECTORY);
            tv[1].tv_sec = 1500000000;
            show("futimesat-dir", syscall(SYS_futimesat, d, "g", tv), "d/g");
            int fd = open("d/g", O_WRONLY);
            write(fd, "written\n", 8);
            tv[1].tv_sec = 1600000000;
            show("futimesat-fd", syscall(SYS_futimesat, fd, 0, tv), "d/g");
            close(fd);
            show("after-close", 0, "d/g");
            return 0;
        }
        "#,
    );
    let out = atoll_tests::assert_same_on_tmpfs(
        TWO,
        &format!(
            r#"
            cd "$ROOT"
            echo f > f; mkdir d; echo g > d/g
            {}
            cat d/g
            busybox touch -d '2020-01-02 03:04:05' new; stat -c '%Y %s' new
            busybox touch -r new other; stat -c '%Y %s' other
            echo x > old; busybox touch -d '2019-01-02 03:04:05' old; stat -c '%Y %s' old
            "#,
            bin.display()
        ),
        true,
    );
    assert!(
        out.contains("after-close 0  atime=1200000000 mtime=1600000000\nwritten\n"),
        "{out}"
    );
    assert!(
        out.ends_with("1577934245 0\n1577934245 0\n1546398245 2\n"),
        "{out}"
    );
}

/// A static program makes FIFOs in the mount (`mknod`/`mknodat`, with its
/// own umask) that static and dynamic programs then meet through, as on
/// the host; making one over an existing name fails as there.
#[test]
fn a_static_program_makes_fifos_in_the_mount() {
    require("busybox");
    let out = atoll_tests::assert_same_on_tmpfs(
        TWO,
        r#"
        cd "$ROOT"
        umask 027
        busybox mkfifo p; echo "st=$?"
        busybox mknod q p; echo "st=$?"
        stat -c '%F %a' p q
        busybox sh -c 'busybox cat p > out & echo through-p > p; wait'; cat out
        cat q > out2 & busybox sh -c 'echo through-q > q'; wait; cat out2
        busybox mkfifo p; echo "st=$?"
        busybox sh -c 'mkdir d && cd d && busybox mkfifo here && busybox ls -l here | busybox cut -c1'
        "#,
        true,
    );
    assert_eq!(
        out,
        "st=0\nst=0\nfifo 640\nfifo 640\nthrough-p\nthrough-q\nst=1\np\n"
    );
}

/// A static program's extended attributes of files in the mount behave
/// as on a tmpfs: set, get (with the size query and a buffer too small),
/// list, remove, the `l` forms on a symbolic link, and the errors
/// (missing attribute, `XATTR_CREATE` over one, a bad name pointer).
#[test]
fn a_static_program_s_xattrs_in_the_mount_are_as_on_tmpfs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = atoll_tests::compile_static_probe(
        dir.path(),
        "xattr",
        r#"
        #include <errno.h>
        #include <stdio.h>
        #include <string.h>
        #include <sys/xattr.h>
        static void show(const char *what, long r, const char *buf) {
            printf("%s %ld %s", what, r, r < 0 ? strerror(errno) : "");
            if (buf && r > 0) { fwrite(buf, 1, r, stdout); }
            printf("\n");
        }
        int main(void) {
            char buf[64];
            show("set", setxattr("f", "user.colour", "blue", 4, 0), 0);
            show("set-create", setxattr("f", "user.colour", "red", 3, XATTR_CREATE), 0);
            show("set-replace-missing", setxattr("f", "user.none", "x", 1, XATTR_REPLACE), 0);
            show("get-size", getxattr("f", "user.colour", 0, 0), 0);
            show("get", getxattr("f", "user.colour", buf, sizeof buf), buf);
            show("get-small", getxattr("f", "user.colour", buf, 2), 0);
            show("get-missing", getxattr("f", "user.none", buf, sizeof buf), 0);
            show("get-bad-name", getxattr("f", (char *)8, buf, sizeof buf), 0);
            long n = listxattr("f", buf, sizeof buf);
            for (long i = 0; i < n; i++) if (!buf[i]) buf[i] = ',';
            show("list", n, buf);
            show("list-size", listxattr("f", 0, 0), 0);
            /* The order of a list of several is the file system's own
               (tmpfs: newest first): only its size is compared. */
            show("set2", setxattr("f", "user.size", "xl", 2, 0), 0);
            show("list2-size", listxattr("f", buf, sizeof buf), 0);
            show("lget-link", lgetxattr("l", "user.colour", buf, sizeof buf), 0);
            show("get-through-link", getxattr("l", "user.colour", buf, sizeof buf), buf);
            show("lset-link", lsetxattr("l", "user.colour", "x", 1, 0), 0);
            show("remove", removexattr("f", "user.colour"), 0);
            show("remove-again", removexattr("f", "user.colour"), 0);
            show("get-after", getxattr("f", "user.colour", buf, sizeof buf), 0);
            show("missing-file", getxattr("nofile", "user.colour", buf, sizeof buf), 0);
            return 0;
        }
        "#,
    );
    let out = atoll_tests::assert_same_on_tmpfs(
        TWO,
        &format!("cd \"$ROOT\"; echo x > f; ln -s f l; {}\n", bin.display()),
        true,
    );
    assert!(
        out.starts_with("set 0 \nset-create -1 File exists\n"),
        "{out}"
    );
    assert!(out.contains("get 4 blue\n"), "{out}");
}

/// `execveat` by a static program of programs in the mount behaves as on
/// the host: relative to a directory descriptor of the mount, through a
/// symbolic link (refused with `AT_SYMLINK_NOFOLLOW`), `fexecve` of a
/// program and of a script opened there (a close-on-exec script
/// descriptor refused, as Linux refuses it), and a file without an
/// execute bit refused either way.
#[test]
fn a_static_program_execveats_programs_in_the_mount_as_on_the_host() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_, pstat) = exec_probes(dir.path());
    let bin = atoll_tests::compile_static_probe(
        dir.path(),
        "execat",
        r#"
        #define _GNU_SOURCE
        #include <errno.h>
        #include <fcntl.h>
        #include <stdio.h>
        #include <string.h>
        #include <unistd.h>
        #include <sys/syscall.h>
        #include <sys/wait.h>
        extern char **environ;
        static void run(const char *what, int dirfd, const char *path, int flags) {
            fflush(stdout);
            pid_t p = fork();
            if (p == 0) {
                char *args[] = {(char *)what, "arg", 0};
                syscall(SYS_execveat, dirfd, path, args, environ, flags);
                dprintf(1, "%s failed: %s\n", what, strerror(errno));
                _exit(100);
            }
            int st;
            waitpid(p, &st, 0);
            printf("%s status %d\n", what, WEXITSTATUS(st));
        }
        int main(void) {
            int d = open("bin", O_RDONLY | O_DIRECTORY);
            run("at-dir", d, "pstat", 0);
            run("follow-link", d, "link", 0);
            run("nofollow-link", d, "link", AT_SYMLINK_NOFOLLOW);
            run("noexec", d, "plain", 0);
            run("fexecve", open("bin/pstat", O_RDONLY), "", AT_EMPTY_PATH);
            run("fexecve-script", open("bin/s.sh", O_RDONLY), "", AT_EMPTY_PATH);
            run("fexecve-script-cloexec", open("bin/s.sh", O_RDONLY | O_CLOEXEC), "",
                AT_EMPTY_PATH);
            run("fexecve-noexec", open("bin/plain", O_RDONLY), "", AT_EMPTY_PATH);
            return 0;
        }
        "#,
    );
    let out = atoll_tests::assert_same_on_tmpfs(
        TWO,
        &format!(
            r#"
            cd "$ROOT"; mkdir bin; cp {} bin/pstat; ln -s pstat bin/link
            printf '#!/bin/sh\necho script "$@"\n' > bin/s.sh; chmod +x bin/s.sh
            echo plain > bin/plain
            {}
            "#,
            pstat.display(),
            bin.display()
        ),
        true,
    );
    assert!(
        out.starts_with("argv0=at-dir [arg] FOO=- cwd=$ROOT\nat-dir status 2\n"),
        "{out}"
    );
    assert!(
        out.contains("nofollow-link failed: Too many levels of symbolic links\n"),
        "{out}"
    );
    assert!(
        out.contains("script arg\nfexecve-script status 0\n"),
        "{out}"
    );
}
