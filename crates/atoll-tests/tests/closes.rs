//! What `close` owes locks: Linux releases a process's POSIX record locks
//! on an inode at any close of a descriptor for that inode, and only
//! there. atoll pays for that release (and waits for `Close`) only on the
//! inodes the process locked (`atoll-client` `lockmarks`), not on every
//! close once it took one lock, as it did before (dbench's thousands of
//! closes a second each cost two round trips after its first `LockX`).

use atoll_tests::{assert_same, compile_probe, require, run_in_atoll};

/// The release happens where Linux does it and nowhere else: a lock on
/// `a` survives closes of other files (also files locked and unlocked
/// meanwhile, and a `flock` on a third), and goes at the close of any
/// descriptor of `a`; another process's view is the judge.
#[test]
fn closes_of_other_files_keep_a_record_lock() {
    require("python3");
    let script = r#"
        set -e
        cd "$ROOT" && echo a > a && echo b > b && echo c > c
        python3 - <<'PY'
import fcntl, os
def probe(what):
    if os.fork() == 0:
        other = os.open("a", os.O_RDWR)
        try:
            fcntl.lockf(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
            print(what, "another process gets the lock")
        except OSError as e:
            print(what, "another process is refused:", e.strerror)
        os._exit(0)
    os.wait()
fd = os.open("a", os.O_RDWR)
fcntl.lockf(fd, fcntl.LOCK_EX)
for i in range(50):
    os.close(os.open("b", os.O_RDONLY))
probe("after closes of b:")
fb = os.open("b", os.O_RDWR)
fcntl.lockf(fb, fcntl.LOCK_EX)
fcntl.lockf(fb, fcntl.LOCK_UN)
os.close(fb)
fc = os.open("c", os.O_RDWR)
fcntl.flock(fc, fcntl.LOCK_EX)
os.close(fc)
probe("after b locked, c flocked, both closed:")
os.close(os.open("a", os.O_RDONLY))
probe("after a close of a:")
PY
    "#;
    for opts in [
        &["--servers", "1"][..],
        &["--servers", "3", "--distribute", "all"],
    ] {
        assert_same(opts, script, true);
    }
}

/// Closes of files the process never locked send no unlock: one lock,
/// then 300 opens and closes of another file, make a handful of
/// `SetLock` requests (the lock and the release at the end), not 300.
#[test]
fn closes_of_unlocked_files_send_no_unlock() {
    require("python3");
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("s.json");
    let j = json.to_string_lossy().to_string();
    let script = r#"
        set -e
        cd "$ROOT" && echo a > a && echo b > b
        python3 - <<'PY'
import fcntl, os
fd = os.open("a", os.O_RDWR)
fcntl.lockf(fd, fcntl.LOCK_EX)
for i in range(300):
    os.close(os.open("b", os.O_RDONLY))
os.close(fd)
PY
    "#;
    let out = run_in_atoll(&["--servers", "1", "--stats-json", &j], script);
    assert!(out.status.success(), "{out:?}");
    let (count, v) = atoll_tests::served_ops(&json);
    let (set_locks, closes) = (count("SetLock"), count("Close"));
    // The counts are real: the closes were seen.
    assert!(closes >= 300, "{v}");
    assert!((1..10).contains(&set_locks), "{set_locks} SetLock: {v}");
}

/// `close_range` over atoll descriptors closes them on the lane it took,
/// not on a second one: a process that opens and closes files with it
/// has one lane (one `SetGroups`, which each lane's first request
/// carries), and every description is closed.
#[test]
fn close_range_closes_on_the_lane_it_holds() {
    let dir = tempfile::tempdir().unwrap();
    let probe = compile_probe(
        dir.path(),
        "closerange",
        r#"
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>
int main(int argc, char **argv) {
    char path[256];
    for (int round = 0; round < 50; round++) {
        for (int k = 0; k < 4; k++) {
            snprintf(path, sizeof path, "%s/f%d", argv[1], k);
            if (open(path, O_CREAT | O_RDWR, 0644) < 0) { perror("open"); return 1; }
        }
        if (syscall(SYS_close_range, 3, 100, 0) != 0) { perror("close_range"); return 1; }
        if (fcntl(3, F_GETFD) != -1) { fprintf(stderr, "fd 3 still open\n"); return 1; }
    }
    puts("closed");
    return 0;
}
"#,
    );
    let json = dir.path().join("s.json");
    let j = json.to_string_lossy().to_string();
    let script = format!("exec {} \"$ROOT\"", probe.display());
    let out = run_in_atoll(&["--servers", "2", "--stats-json", &j], &script);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "closed\n");
    let (count, v) = atoll_tests::served_ops(&json);
    assert_eq!(count("Close"), 200, "{v}");
    assert_eq!(count("SetGroups"), 1, "one lane: {v}");
}
