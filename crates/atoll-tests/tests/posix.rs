//! POSIX behaviours real programs rely on, each compared with Linux on a
//! host directory: Unix-domain sockets named in the mount, credentials that
//! change inside a running process, FIFO opens racing writers, and programs
//! that outlive their instance.

use atoll_tests::{assert_same, assert_same_on_tmpfs, atoll, output_within, require, RUN_LIMIT};
use std::process::{Command, Stdio};

/// A listener and a client in two processes meet at a socket path of the
/// mount; the node looks like tmpfs's (type, mode from the umask, links),
/// renames and unlinks like a file, and a node made by `mknod` or a missing
/// name refuses as Linux does.
#[test]
fn unix_sockets_bound_in_the_mount_reach_their_listener() {
    require("python3");
    for opts in [
        &["--servers", "1"][..],
        &["--servers", "3", "--distribute", "all"],
    ] {
        assert_same(
            opts,
            r#"
            set -e
            cd "$ROOT" && mkdir d && cd d
            python3 - <<'PY'
import os, socket, stat, sys
os.umask(0o027)
for kind in (socket.SOCK_STREAM, socket.SOCK_SEQPACKET):
    s = socket.socket(socket.AF_UNIX, kind)
    s.bind("s1")
    s.listen(1)
    st = os.lstat("s1")
    print(oct(st.st_mode), stat.S_ISSOCK(st.st_mode), st.st_nlink, st.st_size, s.getsockname())
    sys.stdout.flush()
    if os.fork() == 0:
        c = socket.socket(socket.AF_UNIX, kind)
        c.connect(os.path.abspath("s1"))
        # The child reports through the socket: one writer of stdout.
        c.sendall(b"hello from the child, peer " + repr(c.getpeername()).encode())
        os._exit(0)
    conn, addr = s.accept()
    print(conn.recv(200), repr(addr), repr(conn.getsockname()))
    os.wait()
    try:
        socket.socket(socket.AF_UNIX, kind).bind("s1")
    except OSError as e:
        print("rebind", e.errno)
    os.rename("s1", "s2")
    print(sorted(os.listdir(".")))
    os.unlink("s2")
    s.close()
# datagrams to a path name
r = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
r.bind("dg")
w = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
w.bind("dg-sender")
w.sendto(b"datagram", os.path.abspath("dg"))
data, frm = r.recvfrom(100)
print(data, frm)
os.mknod("made", 0o644 | stat.S_IFSOCK)
for name in ("made", "missing", "dg-missing/x"):
    try:
        socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).connect(name)
    except OSError as e:
        print(name, e.errno)
os.symlink("dg", "link")
w.sendto(b"via link", "link")
print(r.recv(100))
print(sorted(os.listdir(".")))
PY
            "#,
            true,
        );
    }
}

/// `bind("s")` with the cwd in the mount names an atoll node: nothing
/// appears in the host directory `atoll run` was started from.
#[test]
fn relative_socket_bind_never_creates_a_host_file() {
    require("python3");
    let start = tempfile::tempdir().expect("tempdir");
    let mut cmd = atoll();
    cmd.current_dir(start.path())
        .args(["run", "--memory", "64M", "--servers", "2", "--"])
        .args(["bash", "-c", "cd /atoll && python3 -c 'import socket; s=socket.socket(socket.AF_UNIX); s.bind(\"s\"); print(s.getsockname())' && ls -l /atoll | cut -c1"])
        .stdin(Stdio::null());
    let out = output_within(cmd, RUN_LIMIT);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "s\nt\ns\n");
    let left: Vec<_> = std::fs::read_dir(start.path()).unwrap().collect();
    assert!(left.is_empty(), "host files created: {left:?}");
}

/// Credential changes inside a running process take effect at once, as
/// in Linux: through libc (`os.setgroups`/`setegid`/`seteuid`, broadcast to
/// every thread), through raw `syscall(SYS_setresuid, …)`, with `setfsuid`,
/// and back to root through the saved set-user-id.
#[test]
fn credential_changes_inside_a_process_are_checked_with() {
    require("python3");
    for opts in [
        &["--servers", "1"][..],
        &["--servers", "3", "--distribute", "all"],
    ] {
        assert_same(
            opts,
            r#"
            set -e
            cd "$ROOT" && chmod 755 . && mkdir -m 755 rootonly && mkdir -m 777 open
            python3 - <<'PY'
import ctypes, os, threading
libc = ctypes.CDLL(None, use_errno=True)
SYS_setresuid, SYS_setresgid, SYS_setfsuid = 117, 119, 122

def attempt(what, f):
    try:
        f()
        print(what, "ok")
    except OSError as e:
        print(what, e.strerror)

def create(path):
    os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o644))
    st = os.stat(path)
    print(" ", path, "owner", st.st_uid, st.st_gid)

# libc wrappers, issued from a second thread: glibc applies them to all.
def drop():
    os.setgroups([])
    os.setegid(65534)
    os.seteuid(65534)
t = threading.Thread(target=drop)
t.start(); t.join()
# join() returns before the thread's exit is over. glibc sends later set-id
# calls to every thread it still lists and aborts when they disagree, which
# they will after the raw setresuid below: wait until the thread is gone.
while len(os.listdir("/proc/self/task")) > 1:
    pass
print("ids", os.geteuid(), os.getegid(), os.getgroups())
attempt("create in rootonly", lambda: create("rootonly/a"))
attempt("create in open", lambda: create("open/a"))
attempt("mkdir in rootonly", lambda: os.mkdir("rootonly/d"))
attempt("chmod root's dir", lambda: os.chmod("rootonly", 0o777))
attempt("chown to root", lambda: os.chown("open/a", 0, 0))
attempt("access W real", lambda: print(" ", os.access("rootonly", os.W_OK)))
attempt("access W effective", lambda: print(" ", os.access("rootonly", os.W_OK, effective_ids=True)))
# back to root through the saved set-user-id
os.seteuid(0); os.setegid(0)
attempt("create in rootonly as root", lambda: create("rootonly/b"))
# raw system calls: real, effective and saved ids all become 1234
if libc.syscall(SYS_setresgid, 4321, 4321, 4321) != 0 or libc.syscall(SYS_setresuid, 1234, 1234, 1234) != 0:
    print("setresuid failed", ctypes.get_errno())
print("ids", os.getresuid(), os.getresgid())
attempt("create in open as 1234", lambda: create("open/c"))
attempt("unlink root's file", lambda: os.unlink("rootonly/b"))
attempt("seteuid(0) after setresuid", lambda: os.seteuid(0))
attempt("mkdir in rootonly", lambda: os.mkdir("rootonly/e"))
PY
            python3 - <<'PY'
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
# Only the fs id changes: files are created with it, the euid stays root.
libc.setfsuid(2222); libc.setfsgid(3333)
os.close(os.open("open/fs", os.O_CREAT | os.O_WRONLY, 0o600))
st = os.stat("open/fs")
print("fs ids", st.st_uid, st.st_gid, os.geteuid())
try:
    os.mkdir("rootonly/f")
except OSError as e:
    print("mkdir as fsuid 2222", e.strerror)
PY
            ls -ln open rootonly | awk '{print $1, $3, $4, $NF}'
            "#,
            true,
        );
    }
}

/// Credentials belong to a thread, as in Linux: a raw `setresuid` or
/// `setgroups` system call (no glibc broadcast) changes only the thread
/// that makes it; the others keep checking as root. A thread created
/// afterwards starts with its creator's credentials, a forked child with
/// its forking thread's, and a thread's supplementary groups grant it what
/// they grant (each thread's group list reaches every server it asks).
#[test]
fn a_raw_credential_change_is_the_calling_threads_alone() {
    require("python3");
    for opts in [
        &["--servers", "2"][..],
        &["--servers", "3", "--distribute", "all"],
    ] {
        assert_same(
            opts,
            r#"
            set -e
            cd "$ROOT" && chmod 755 . && mkdir -m 755 rootonly && mkdir -m 770 club && chgrp 4242 club
            python3 - <<'PY'
import ctypes, os, threading
libc = ctypes.CDLL(None, use_errno=True)
SYS_setresuid, SYS_setgroups = 117, 116

def attempt(what, f):
    try:
        f()
        print(what, "ok")
    except OSError as e:
        print(what, e.strerror)

def create(path):
    os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o644))
    st = os.stat(path)
    print(" ", path, "owner", st.st_uid, st.st_gid)

def in_thread(f):
    t = threading.Thread(target=f)
    t.start(); t.join()

def member_then_nobody():
    groups = (ctypes.c_uint * 1)(4242)
    assert libc.syscall(SYS_setgroups, 1, groups) == 0
    assert libc.syscall(SYS_setresuid, -1, 65534, -1) == 0
    attempt("thread: create in rootonly", lambda: create("rootonly/t"))
    attempt("thread: create in club (group 4242)", lambda: create("club/t"))
    # A thread it creates starts with its credentials.
    in_thread(lambda: attempt("grandchild thread: create in club", lambda: create("club/g")))
    in_thread(lambda: attempt("grandchild thread: create in rootonly", lambda: create("rootonly/g")))
    pid = os.fork()
    if pid == 0:
        attempt("forked child: create in rootonly", lambda: create("rootonly/f"))
        attempt("forked child: create in club", lambda: create("club/f"))
        os._exit(0)
    os.waitpid(pid, 0)

def nobody_without_groups():
    assert libc.syscall(SYS_setgroups, 0, None) == 0
    assert libc.syscall(SYS_setresuid, -1, 65534, -1) == 0
    attempt("other thread: create in club (no groups)", lambda: create("club/o"))

in_thread(member_then_nobody)
in_thread(nobody_without_groups)
print("main euid", os.geteuid())
attempt("main: create in rootonly", lambda: create("rootonly/m"))
attempt("main: create in club", lambda: create("club/m"))
PY
            ls -ln rootonly club | awk '{print $1, $3, $4, $NF}'
            "#,
            true,
        );
    }
}

/// A writer that opens a FIFO, writes and closes while the reader's open is
/// still on its way is never missed: the reader gets the data and EOF
/// (200 rounds, 2 servers, as often as Linux manages it).
#[test]
fn fifo_reader_never_misses_a_writer_that_came_and_went() {
    let script = r#"
        cd "$ROOT"
        got=0
        for i in $(seq 200); do
            rm -f f && mkfifo f
            (echo via-fifo > f &)
            [ "$(timeout 20 cat f)" = via-fifo ] && got=$((got + 1))
        done
        echo "$got of 200"
    "#;
    for opts in [&["--servers", "2"][..], &["--servers", "3", "--incoherent"]] {
        assert_eq!(assert_same(opts, script, true), "200 of 200\n");
    }
}

/// A process that outlives its instance (its `atoll run` was killed) gets
/// `EIO` from atoll at once — also in a read it was blocked in on an atoll
/// pipe — and its exit never waits for the servers that are gone; its
/// `close` of an atoll descriptor frees the number and succeeds.
#[test]
fn a_process_whose_instance_was_killed_fails_with_eio_and_exits() {
    require("python3");
    let dir = tempfile::tempdir().expect("tempdir");
    let ready = dir.path().join("ready");
    let report = dir.path().join("report");
    let daemon = format!(
        r#"
import os, sys, time
r, w = os.pipe()
f = open("/atoll/keep", "w")
f.write("x"); f.flush()
if os.fork() == 0:
    # A child forked before the end closes its ends after it: Linux's
    # close frees the number and never fails for a pipe.
    while not os.path.exists("{report}"):
        time.sleep(0.05)
    res = []
    for what, fd in [("close of a pipe end", w), ("close of a file", f.fileno())]:
        try:
            os.close(fd)
            res.append(what + " ok")
        except OSError as e:
            res.append(what + " " + os.strerror(e.errno))
    with open("{report}.child", "w") as m:
        m.write("\n".join(res) + "\n")
    os._exit(0)
with open("{ready}.tmp", "w") as m:
    m.write(str(os.getpid()))
os.rename("{ready}.tmp", "{ready}")
got = []
try:
    os.read(r, 1)
    got.append("read returned")
except OSError as e:
    got.append("blocked read " + os.strerror(e.errno))
for what, op in [("write", lambda: os.write(f.fileno(), b"y")),
                 ("open", lambda: open("/atoll/keep")),
                 ("stat", lambda: os.stat("/atoll/keep"))]:
    try:
        op()
        got.append(what + " ok")
    except OSError as e:
        got.append(what + " " + os.strerror(e.errno))
with open("{report}", "w") as m:
    m.write("\n".join(got) + "\n")
"#,
        ready = ready.display(),
        report = report.display()
    );
    let script = dir.path().join("daemon.py");
    std::fs::write(&script, daemon).unwrap();
    let mut cmd = atoll();
    cmd.args(["run", "--memory", "64M", "--servers", "2", "--"])
        .args(["bash", "-c"])
        .arg(format!(
            "python3 {} </dev/null >/dev/null 2>&1 & wait",
            script.display()
        ))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut run = cmd.spawn().expect("spawn atoll");
    let waited = |path: &std::path::Path, secs: u64| {
        for _ in 0..secs * 20 {
            if path.exists() {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        false
    };
    assert!(waited(&ready, 60), "the daemon never started");
    let pid = std::fs::read_to_string(&ready).unwrap();
    run.kill().expect("kill atoll run"); // SIGKILL: nothing is cleaned up
    run.wait().unwrap();
    let found = waited(&report, 20);
    let proc_dir = std::path::PathBuf::from(format!("/proc/{}", pid.trim()));
    let mut gone = false;
    for _ in 0..200 {
        // A zombie has exited; it waits only for a parent to reap it.
        let state = std::fs::read_to_string(proc_dir.join("stat")).unwrap_or_default();
        if state.is_empty() || state.contains(") Z ") {
            gone = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    if !gone {
        let _ = Command::new("kill").args(["-9", pid.trim()]).status();
    }
    assert!(
        found,
        "the daemon never reported: it hangs in an atoll call"
    );
    assert_eq!(
        std::fs::read_to_string(&report).unwrap(),
        "blocked read Input/output error\nwrite Input/output error\nopen Input/output error\nstat Input/output error\n"
    );
    assert!(gone, "the daemon did not exit: its exit path waits");
    let child = report.with_extension("child");
    assert!(waited(&child, 20), "the child never reported");
    assert_eq!(
        std::fs::read_to_string(&child).unwrap(),
        "close of a pipe end ok\nclose of a file ok\n"
    );
}

/// Walks that enter the mount from a host directory land in atoll, as
/// they would if the mount were a Linux mount: from a host cwd (`cd /`,
/// `../atoll`), from a host directory fd, through `..` in an absolute path,
/// and back in after leaving it (`/atoll/../atoll/x`).
#[test]
fn paths_that_enter_the_mount_from_host_directories_land_in_atoll() {
    require("python3");
    let out = atoll_tests::run_in_atoll(
        &["--servers", "2"],
        r#"
        set -e
        mkdir -p /atoll/rs/inc && echo hi > /atoll/rs/inc/f
        cd / && ls atoll && cat atoll/rs/inc/f
        cd /tmp && cat ../atoll/rs/inc/f && cat /tmp/../atoll/rs/inc/f
        python3 -c '
import os
d = os.open("/", os.O_RDONLY)
fd = os.open("atoll/rs/inc/f", os.O_RDONLY, dir_fd=d)
print(os.read(fd, 10))
os.mkdir("atoll/made", dir_fd=d)
print(sorted(os.listdir("/atoll")))
'
        cd / && cd atoll/rs && pwd && ls
        [ ! -e /tmp/atoll ] && echo "nothing on the host"
        cat /atoll/../atoll/rs/inc/f && cd inc && cat ../../../atoll/rs/inc/f
        stat -c %F /atoll/rs/../../atoll/made && touch /atoll/../atoll/made/g && ls /atoll/made
        "#,
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "rs\nhi\nhi\nhi\nb'hi\\n'\n['made', 'rs']\n/atoll/rs\ninc\nnothing on the host\nhi\nhi\ndirectory\ng\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// rsync (which changes into directories relative to where it is) copies
/// a real tree into the mount and back unchanged, and a second run finds
/// nothing to do.
#[test]
fn rsync_of_usr_include_into_the_mount_and_back_is_identical() {
    require("rsync");
    let back = tempfile::tempdir().expect("tempdir");
    let out = atoll_tests::run_in_atoll(
        &["--servers", "3", "--distribute", "all"],
        &format!(
            r#"
            set -e
            mkdir -p /atoll/rs
            rsync -a /usr/include/ /atoll/rs/inc/
            rsync -a /atoll/rs/inc/ {back}/
            diff -r /usr/include {back} && echo identical
            rsync -ai /usr/include/ /atoll/rs/inc/ | wc -l
            "#,
            back = back.path().display()
        ),
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "identical\n0\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A statically linked program (which atoll cannot interpose) started
/// with its cwd in the mount cannot create files in the host directory
/// `atoll run` was started from: its relative calls are the relay's
/// supervisor's, which makes them in the mount.
#[test]
fn a_static_program_with_its_cwd_in_the_mount_cannot_touch_host_files() {
    require("busybox");
    let start = tempfile::tempdir().expect("tempdir");
    let mut cmd = atoll();
    cmd.current_dir(start.path())
        .args(["run", "--memory", "64M", "--servers", "2", "--"])
        .args([
            "bash",
            "-c",
            "cd /atoll && mkdir d && cd d && busybox touch x; echo rc=$?; busybox mkdir y; echo rc=$?; busybox sh -c 'echo z > z'; echo rc=$?; ls -A",
        ])
        .stdin(Stdio::null());
    let out = output_within(cmd, RUN_LIMIT);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "rc=0\nrc=0\nrc=0\nx\ny\nz\n"
    );
    let left: Vec<_> = std::fs::read_dir(start.path()).unwrap().collect();
    assert!(left.is_empty(), "host files created: {left:?}");
}

/// `io_uring_setup` answers `ENOSYS` inside atoll, so programs fall back
/// to ordinary calls (which atoll serves) instead of having the kernel run
/// file operations atoll never sees.
#[test]
fn io_uring_is_answered_so_that_programs_fall_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let probe = atoll_tests::compile_probe(
        dir.path(),
        "uring",
        r#"
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
int main(void) {
    char params[120] = {0};
    long r = syscall(SYS_io_uring_setup, 4, params);
    printf("%s\n", r < 0 ? strerror(errno) : "set up");
    return 0;
}
"#,
    );
    let out = atoll_tests::run_in_atoll(&[], &probe.display().to_string());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "Function not implemented\n"
    );
}

/// `execv("/proc/self/exe")` runs the program again (not the scheduling
/// server's image), and `readlink` of it names the program, for programs
/// stored in the mount (run by absolute and relative path) and on the host.
#[test]
fn reexec_through_proc_self_exe_runs_the_same_program() {
    let dir = tempfile::tempdir().expect("tempdir");
    let probe = atoll_tests::compile_probe(
        dir.path(),
        "selfexe",
        r#"
#include <stdio.h>
#include <unistd.h>
int main(int argc, char **argv) {
    char buf[4096];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    buf[n > 0 ? n : 0] = 0;
    printf("run %d exe %s\n", argc, buf);
    fflush(stdout);
    if (argc == 1) {
        execl("/proc/self/exe", argv[0], "again", (char *)0);
        perror("execl");
        return 1;
    }
    return 0;
}
"#,
    );
    let p = probe.display();
    for placement in ["local", "round-robin"] {
        let out = atoll_tests::run_in_atoll(
            &["--servers", "2", "--placement", placement],
            &format!("set -e; cp {p} /atoll/prog; /atoll/prog; cd /atoll && ./prog; {p}"),
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!(
                "run 1 exe /atoll/prog\nrun 2 exe /atoll/prog\nrun 1 exe /atoll/prog\nrun 2 exe /atoll/prog\nrun 1 exe {p}\nrun 2 exe {p}\n"
            ),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Trees deeper than `PATH_MAX` work as on Linux: made one level at a time
/// relative to a directory descriptor, removed with `rm -rf`, and entered
/// with `chdir` 3000 levels deep (glibc's `getcwd` gives the whole path,
/// walking `..` after the system call's `ENAMETOOLONG`: `long_cwd.rs`).
#[test]
fn trees_deeper_than_path_max_are_made_entered_and_removed() {
    require("python3");
    let script = r#"
        set -e
        cd "$ROOT"
        python3 - <<'PY'
import os
d = os.open(".", os.O_RDONLY)
for i in range(3000):
    os.mkdir("level", dir_fd=d)
    n = os.open("level", os.O_RDONLY, dir_fd=d)
    os.close(d); d = n
os.close(os.open("leaf", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=d))
print("made")
PY
        rm -rf level && echo removed && ls -A
        python3 - <<'PY'
import os
top = os.getcwd()
for i in range(3000):
    os.mkdir("e"); os.chdir("e")
print(len(os.getcwd()) - len(top), os.path.exists("../../e"))
os.chdir(top)
PY
        rm -rf e && ls -A && echo done
    "#;
    for opts in [
        &["--servers", "1"][..],
        &["--servers", "3", "--distribute", "all"],
    ] {
        atoll_tests::assert_same(opts, script, true);
    }
}

/// `O_TMPFILE` makes an unnamed file that `linkat` names, through
/// `/proc/self/fd/N` or `AT_EMPTY_PATH`, unless it was made with `O_EXCL`;
/// the errors for read-only access, a file and a missing directory are
/// Linux's.
#[test]
fn o_tmpfile_files_are_unnamed_until_linkat_names_them() {
    require("python3");
    for opts in [
        &["--servers", "1"][..],
        &["--servers", "3", "--distribute", "all"],
    ] {
        assert_same(
            opts,
            r#"
            python3 - <<'PY'
import os, sys, ctypes
libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD, AT_SYMLINK_FOLLOW, AT_EMPTY_PATH = -100, 0x400, 0x1000
def linkat(fd, src, dst, flags):
    r = libc.linkat(fd, src.encode(), AT_FDCWD, dst.encode(), flags)
    return "ok" if r == 0 else os.strerror(ctypes.get_errno())
os.chdir(os.environ["ROOT"])
os.mkdir("t")
fd = os.open("t", os.O_TMPFILE | os.O_RDWR, 0o640)
os.write(fd, b"hello tmp")
st = os.fstat(fd)
print("nlink", st.st_nlink, oct(st.st_mode), sorted(os.listdir("t")))
print("link via /proc", linkat(AT_FDCWD, f"/proc/self/fd/{fd}", "t/named", AT_SYMLINK_FOLLOW))
print(sorted(os.listdir("t")), os.fstat(fd).st_nlink, open("t/named").read())
fd2 = os.open("t", os.O_TMPFILE | os.O_WRONLY | os.O_EXCL, 0o600)
print("excl", linkat(fd2, "", "t/excl", AT_EMPTY_PATH))
fd3 = os.open(".", os.O_TMPFILE | os.O_WRONLY, 0o600)
print("empty path", linkat(fd3, "", "t/empty", AT_EMPTY_PATH), os.fstat(fd3).st_nlink)
try: os.open("t", os.O_TMPFILE | os.O_RDONLY)
except OSError as e: print("rdonly", e.strerror)
try: os.open("t/named", os.O_TMPFILE | os.O_RDWR)
except OSError as e: print("on a file", e.strerror)
try: os.open("missing", os.O_TMPFILE | os.O_RDWR)
except OSError as e: print("missing", e.strerror)
os.close(fd2)
print(sorted(os.listdir("t")))
PY
            "#,
            true,
        );
    }
}

/// `openat2`'s `RESOLVE_*` flags confine a walk as Linux does: `BENEATH`
/// refuses absolute paths, absolute symlinks and `..` above the start,
/// `IN_ROOT` treats the start as `/`, `NO_SYMLINKS` refuses symlinks, and
/// malformed requests are `EINVAL`.
#[test]
fn openat2_resolve_flags_confine_the_walk() {
    let dir = tempfile::tempdir().expect("tempdir");
    let probe = atoll_tests::compile_probe(
        dir.path(),
        "openat2",
        r#"
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
static int d;
static void try(const char *path, unsigned long long flags, unsigned long long mode,
                unsigned long long resolve) {
    struct open_how how = { .flags = flags, .mode = mode, .resolve = resolve };
    long fd = syscall(SYS_openat2, d, path, &how, sizeof how);
    struct stat st;
    if (fd >= 0 && fstat(fd, &st) == 0)
        printf("%-14s %2llx -> %s\n", path, resolve, S_ISDIR(st.st_mode) ? "dir" : "file");
    else
        printf("%-14s %2llx -> %s\n", path, resolve, strerror(errno));
    if (fd >= 0) close(fd);
}
int main(void) {
    mkdir("d", 0755); mkdir("d/sub", 0755);
    close(open("d/sub/f", O_CREAT | O_WRONLY, 0644));
    symlink("sub", "d/rel"); symlink("/etc", "d/abs"); symlink("/sub", "d/rootsub");
    d = open("d", O_RDONLY | O_DIRECTORY);
    try("sub/f", O_RDONLY, 0, RESOLVE_BENEATH);
    try("../d/sub/f", O_RDONLY, 0, RESOLVE_BENEATH);
    try("/etc/passwd", O_RDONLY, 0, RESOLVE_BENEATH);
    try("rel/f", O_RDONLY, 0, RESOLVE_BENEATH);
    try("rel/f", O_RDONLY, 0, RESOLVE_NO_SYMLINKS);
    try("rel", O_RDONLY | O_NOFOLLOW | O_PATH, 0, RESOLVE_NO_SYMLINKS);
    try("abs/passwd", O_RDONLY, 0, RESOLVE_BENEATH);
    try("rootsub/f", O_RDONLY, 0, RESOLVE_IN_ROOT);
    try("../../sub/f", O_RDONLY, 0, RESOLVE_IN_ROOT);
    try("/sub/f", O_RDONLY, 0, RESOLVE_IN_ROOT);
    try("..", O_RDONLY, 0, RESOLVE_IN_ROOT);
    try("..", O_RDONLY, 0, RESOLVE_BENEATH);
    try("sub/new", O_CREAT | O_WRONLY, 0644, RESOLVE_BENEATH);
    try("sub/f", O_RDONLY, 0644, 0);
    try("sub/f", O_RDONLY, 0, 0x40);
    try("sub/f", O_RDONLY, 0, RESOLVE_BENEATH | RESOLVE_IN_ROOT);
    return 0;
}
"#,
    );
    for opts in [
        &["--servers", "1"][..],
        &["--servers", "3", "--distribute", "all"],
    ] {
        assert_same(opts, &format!("cd \"$ROOT\" && {}", probe.display()), true);
    }
}

/// POSIX record locks belong to the process and survive `execve`, until
/// the process closes a descriptor of the file, as on Linux.
#[test]
fn record_locks_are_kept_across_execve() {
    require("python3");
    let script = r#"
        set -e
        cd "$ROOT" && echo data > f
        cat > step2.py <<'PY'
import fcntl, os, sys
fd = int(sys.argv[1])
def probe(what):
    if os.fork() == 0:
        other = os.open("f", os.O_RDWR)
        try:
            fcntl.lockf(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
            print(what, "another process gets the lock")
        except OSError as e:
            print(what, "another process is refused:", e.strerror)
        os._exit(0)
    os.wait()
probe("after exec:")
again = os.open("f", os.O_RDONLY)
os.close(again)  # closing any descriptor of the file releases the locks
probe("after close:")
PY
        python3 -c '
import fcntl, os, sys
fd = os.open("f", os.O_RDWR)
fcntl.lockf(fd, fcntl.LOCK_EX)
os.set_inheritable(fd, True)
os.execv(sys.executable, [sys.executable, "step2.py", str(fd)])
'
    "#;
    for opts in [
        &["--servers", "1"][..],
        &["--servers", "3", "--placement", "round-robin"],
    ] {
        assert_same(opts, script, true);
    }
}

/// A program that runs cannot be opened for writing or truncated, and a
/// program open for writing cannot run (`ETXTBSY`), locally and through a
/// remote exec; both end with the process.
#[test]
fn running_programs_are_text_busy() {
    require("python3");
    for opts in [
        &["--servers", "1", "--placement", "local"][..],
        &["--servers", "3"],
    ] {
        assert_same(
            opts,
            r#"
cd "$ROOT"
cp /bin/sleep ./prog
./prog 2 &
# Until the child has become the program (its exec is done), and a
# little longer: once, in a copy island on a loaded machine, the program
# was still writable right after its exec (not explained yet).
until tr '\0' ' ' < /proc/$!/cmdline | grep -q '^\./prog 2'; do sleep 0.02; done
sleep 0.5
echo x >> prog 2>&1 && echo "append ok" || echo "append refused"
python3 -c '
import os
for fl in (os.O_WRONLY, os.O_RDWR, os.O_RDONLY | os.O_TRUNC):
    try: os.close(os.open("prog", fl)); print("open ok")
    except OSError as e: print("open", e.strerror)
try: os.truncate("prog", 10); print("truncate ok")
except OSError as e: print("truncate", e.strerror)
'
wait
echo "after exit:"; python3 -c '
import os
os.close(os.open("prog", os.O_WRONLY)); print("open ok")'
cp /bin/true t2; exec 3>>t2; ./t2; echo "exec while open for writing: $?"; exec 3>&-
./t2 && echo "exec after close ok"
            "#,
            true,
        );
    }
}

/// `F_GETLK` names the process holding a conflicting record lock
/// (`l_pid`), and -1 for an open-file-description lock.
#[test]
fn f_getlk_reports_the_holders_pid() {
    require("python3");
    let script = r#"
        cd "$ROOT" && echo data > f
        python3 - <<'PY'
import fcntl, os, struct
fmt = "hhqqi"
fd = os.open("f", os.O_RDWR)
fcntl.lockf(fd, fcntl.LOCK_EX, 2, 0)
holder = os.getpid()
if os.fork() == 0:
    other = os.open("f", os.O_RDWR)
    got = struct.unpack(fmt, fcntl.fcntl(other, fcntl.F_GETLK, struct.pack(fmt, fcntl.F_WRLCK, 0, 0, 0, 0)))
    print("type", got[0] == fcntl.F_WRLCK, "range", got[2], got[3], "pid is the holder", got[4] == holder)
    free = struct.unpack(fmt, fcntl.fcntl(other, fcntl.F_GETLK, struct.pack(fmt, fcntl.F_WRLCK, 0, 10, 5, 0)))
    print("beyond the lock", free[0] == fcntl.F_UNLCK)
    os._exit(0)
os.wait()
PY
    "#;
    for opts in [&["--servers", "1"][..], &["--servers", "3"]] {
        assert_same(opts, script, true);
    }
}

/// atoll's own descriptors are invisible to the program: a child started
/// with `close_fds` finds exactly the descriptors it was given, whether it
/// probes every number with `fstat` (as CPython's `fd_status` does) or
/// lists `/proc/self/fd`.
#[test]
fn atolls_own_descriptors_are_invisible_to_programs() {
    require("python3");
    let out = atoll_tests::run_in_atoll(
        &["--servers", "2"],
        r#"
        cd /atoll && python3 - <<'PY'
import os, subprocess, sys
probe = r'''
import os
by_fstat = []
for fd in range(0, 1100):
    try:
        os.fstat(fd)
        by_fstat.append(fd)
    except OSError:
        pass
listed = set(int(n) for n in os.listdir("/proc/self/fd"))
# The listing shows one more: the descriptor it reads the directory with.
extra = listed - set(by_fstat)
print(set(by_fstat) <= listed and len(extra) == 1, by_fstat)
'''
r, w = os.pipe()
out = subprocess.run([sys.executable, "-c", probe], close_fds=True, pass_fds=[r],
                     stdin=subprocess.DEVNULL, capture_output=True, text=True)
print(out.stdout.strip().replace(str(r), "R"), out.stderr)
PY
        "#,
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "True [0, 1, 2, R] \n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A small file-size limit (`ulimit -f`) does not kill programs at start:
/// the table a process publishes its descriptors in is a memfd, which the
/// limit applies to, so atoll keeps it within the limit (a smaller table)
/// instead of raising `SIGXFSZ` in a program that wrote nothing.
#[test]
fn programs_start_under_a_small_file_size_limit() {
    let out = atoll_tests::run_in_atoll(
        &["--servers", "2"],
        r#"ulimit -f 64
           cd /atoll && echo hi > small && cat small
           bash -c 'exec 5</atoll/small; cat <&5; ls -l /proc/$$/fd/5 >/dev/null && echo listed'
           /bin/true && echo "true rc=$?""#,
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "hi\nhi\nlisted\ntrue rc=0\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success());
}

/// What a process looked up or was allowed to search as one user says
/// nothing for another: after `seteuid` away from root, names in a 0700
/// root directory it searched before are refused (`EACCES`), and back as
/// root they are found again. Also `unlink` of a name that is not there
/// is `ENOENT` even where the caller may not write (Linux looks the name
/// up before it asks for write permission). One server, and three with
/// the directory's names on servers that do not own it.
#[test]
fn cached_lookups_follow_credential_changes_and_unlink_looks_up_first() {
    require("python3");
    let script = r#"
        cd "$ROOT"
        python3 - <<'P'
import os
os.makedirs("p/q"); open("p/f", "w").close(); os.mkdir("ro"); os.chmod("p", 0o700)
os.chmod("ro", 0o555)
for n in ("p/f", "p/q"): os.stat(n)
def probe(tag):
    out = []
    for n in ("p/f", "p/q", "p/q/.."):
        try: os.stat(n); out.append(n + ":ok")
        except OSError as e: out.append(n + ":" + str(e.errno))
    for n in ("ro/none", "p/none"):
        try: os.unlink(n); out.append(n + ":removed")
        except OSError as e: out.append(n + ":" + str(e.errno))
    print(tag, " ".join(out))
probe("root")
os.setegid(65534); os.seteuid(65534)
probe("nobody")
os.seteuid(0); os.setegid(0)
probe("root-again")
P
    "#;
    for opts in [
        &["--servers", "1"][..],
        &["--servers", "3", "--distribute", "all"][..],
    ] {
        let out = assert_same(opts, script, true);
        assert!(
            out.contains("nobody p/f:13 p/q:13 p/q/..:13 ro/none:2 p/none:13"),
            "{out}"
        );
    }
}

/// The order of Linux's checks in calls that change names, run by a user
/// who may not write some directories: the names are looked up before
/// write permission is asked for (a missing source is `ENOENT`, an
/// existing name to create is `EEXIST`), a missing or non-directory
/// component comes first (`ENOENT`, `ENOTDIR`), then another file system
/// (`EXDEV`), and the type of what is replaced (`EISDIR`, `ENOTDIR`,
/// `ENOTEMPTY`) only after permission. `rename`, `link`, `rmdir`,
/// `mkdir`, `symlink`, `mkfifo`, `unlink` and `open(O_CREAT)`, on one
/// server and on three with every directory spread over them.
#[test]
fn name_changes_check_in_linux_order_for_an_unprivileged_user() {
    require("python3");
    let script = r#"
        cd "$ROOT"
        python3 - <<'P'
import os
os.chmod(".", 0o755)
os.makedirs("ro/dir"); os.makedirs("ro/full/x"); open("ro/file", "w").close()
os.symlink("file", "ro/link"); os.makedirs("rw/dir"); os.makedirs("rw/full/x")
open("rw/file", "w").close(); open("rw/notdir", "w").close(); os.mkdir("nx")
open("nx/file", "w").close()
for p in ("rw/file", "ro/file", "rw/notdir"): os.chown(p, 65534, 65534)
os.chmod("rw", 0o777); os.chmod("ro", 0o555); os.chmod("nx", 0o666)
os.setegid(65534); os.seteuid(65534)
def t(name, f, *a):
    try: f(*a); r = "ok"
    except OSError as e: r = str(e.errno)
    print(name, *a, r)
for a, b in [("ro/missing", "ro/x"), ("ro/missing", "rw/x"), ("rw/missing", "ro/x"),
             ("ro/file", "ro/x"), ("rw/file", "ro/x"), ("ro/file", "rw/x"),
             ("rw/file", "nodir/x"), ("ro/file", "nodir/x"), ("rw/file", "rw/notdir/x"),
             ("ro/file", "rw/notdir/x"), ("ro/missing", "rw/notdir/x"),
             ("ro/missing", "nodir/x"), ("nodir/x", "ro/x"), ("rw/notdir/x", "ro/x"),
             ("ro/dir", "ro/file"), ("ro/file", "ro/dir"), ("ro/dir", "ro/full"),
             ("rw/dir", "rw/file"), ("rw/file", "rw/dir"), ("rw/dir", "rw/full"),
             ("rw/dir", "ro/file"), ("rw/file", "ro/dir"), ("ro/dir", "rw/file"),
             ("ro/missing", "/proc/x"), ("ro/file", "/proc/x"), ("nx/missing", "rw/x"),
             ("nx/file", "rw/x"), ("rw/file", "nx/x"), ("rw/dir", "rw/dir/sub"),
             ("ro/dir", "ro/dir/sub"), ("ro/file", "ro/file"), ("ro/missing/", "rw/x"),
             ("ro/file/", "rw/x"), ("rw/file", "ro/new/"), ("ro/file", "ro/link")]:
    t("rename", os.rename, a, b)
for a, b in [("ro/missing", "rw/x"), ("rw/missing", "ro/x"), ("rw/file", "ro/x"),
             ("rw/file", "ro/file"), ("rw/file", "ro/dir"), ("rw/file", "nodir/x"),
             ("rw/file", "rw/notdir/x"), ("rw/dir", "rw/x"), ("rw/dir", "ro/x"),
             ("rw/dir", "ro/file"), ("ro/missing", "ro/file"), ("rw/dir", "ro/new/"),
             ("nx/file", "rw/x"), ("nx/missing", "ro/x"), ("rw/file", "nx/x")]:
    t("link", os.link, a, b)
for a in ("ro/missing", "ro/dir", "ro/file", "ro/full", "rw/file", "nodir/x",
          "rw/notdir/x", "nx/missing", "ro/link", "ro/dir/.", "ro/dir/..", "rw/missing"):
    t("rmdir", os.rmdir, a)
for a in ("ro/file", "ro/dir", "ro/new", "nodir/x", "ro/link", "rw/notdir/x", "nx/file",
          "nx/new", "ro/dir/", "ro/file/", "ro/new/", "ro/dir/.."):
    t("mkdir", os.mkdir, a)
for a in ("ro/file", "ro/dir", "ro/new", "nodir/x", "ro/link", "rw/notdir/x", "nx/file",
          "ro/new/", "ro/file/"):
    t("symlink", os.symlink, "target", a)
    t("mkfifo", os.mkfifo, a)
for a in ("ro/dir", "ro/file", "ro/missing", "rw/dir", "ro/file/", "ro/link/", "nx/missing",
          "ro/dir/", "rw/notdir/x"):
    t("unlink", os.unlink, a)
for a in ("ro/file", "ro/new", "ro/dir", "ro/new/"):
    t("open-excl", os.open, a, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    t("open-creat", os.open, a, os.O_CREAT | os.O_WRONLY)
P
    "#;
    for opts in [
        &["--servers", "1"][..],
        &["--servers", "3", "--distribute", "all"][..],
    ] {
        let out = assert_same_on_tmpfs(opts, script, true);
        // Both outcomes occur (not a vacuous comparison).
        for line in [
            "rename ro/missing ro/x 2\n",
            "rename ro/file ro/x 13\n",
            "mkdir ro/file 17\n",
            "rename ro/missing /proc/x 18\n",
        ] {
            assert!(out.contains(line), "{line:?} missing in:\n{out}");
        }
    }
}
