//! `/proc/<pid>/cwd` and `/proc/<pid>/fd/N` in the mount, compared with
//! a host directory: a process reads its own cwd and descriptors' paths,
//! walks through them (`/proc/self/cwd/f`), and reads the cwd of another
//! process of the instance and the paths of its descriptors (`pwdx`,
//! `readlink`, `realpath`, `ls`, `cat /proc/PID/fd/N`), without atoll's
//! own descriptors in the listing.

use atoll_tests::{assert_same, assert_same_on_tmpfs, require};

#[test]
fn a_process_reads_its_own_cwd_and_descriptor_links() {
    require("python3");
    let script = r#"
        cd "$ROOT"; mkdir -p d/e; echo x > f
        python3 - <<'P' 2>&1 | sed "s|$ROOT|R|g"
import os
fd = os.open("f", os.O_RDONLY); dfd = os.open("d", os.O_RDONLY)
print(os.readlink(f"/proc/self/fd/{fd}"), os.readlink(f"/proc/self/fd/{dfd}"))
print(os.readlink("/proc/self/cwd"), os.readlink(f"/proc/{os.getpid()}/cwd"))
print(sorted(os.listdir(f"/proc/self/fd/{dfd}")), sorted(os.listdir("/proc/self/cwd")))
print(open("/proc/self/cwd/f").read().strip(), os.stat("/proc/self/cwd/d/e").st_nlink)
os.chdir("d/e"); print(os.readlink("/proc/self/cwd"), os.path.realpath("/proc/self/cwd"))
os.chdir(dfd); print(os.readlink("/proc/self/cwd"), os.getcwd())
P
        readlink /proc/self/cwd | sed "s|$ROOT|R|"
        exec 7<f; readlink /proc/self/fd/7 | sed "s|$ROOT|R|"
    "#;
    let out = assert_same(&[], script, true);
    assert!(out.contains("R/f R/d\n"), "{out}");
}

#[test]
fn another_process_of_the_instance_sees_a_cwd_in_the_mount() {
    require("pwdx");
    // The background process enters the directory and execs; its cwd is
    // read by other processes (readlink, pwdx, realpath) and listed
    // through /proc. Names with a `%` and a `-` check the encoding.
    let script = r#"
        cd "$ROOT"; mkdir -p 'sub/dir 100%-x'; echo hi > 'sub/dir 100%-x/file'
        (cd 'sub/dir 100%-x' && exec 7<file 8>"$ROOT/sub/out" && exec sleep 30) &
        pid=$!
        until [ "$(cat /proc/$pid/comm)" = sleep ]; do sleep 0.05; done
        readlink /proc/$pid/cwd | sed "s|$ROOT|R|"
        pwdx $pid | sed "s|$ROOT|R|;s|^$pid|PID|"
        realpath /proc/$pid/cwd | sed "s|$ROOT|R|"
        ls /proc/$pid/cwd/
        cat /proc/$pid/cwd/file
        (cd /proc/$pid/cwd && pwd -P | sed "s|$ROOT|R|")
        readlink /proc/$pid/fd/7 /proc/$pid/fd/8 | sed "s|$ROOT|R|"
        ls -l /proc/$pid/fd/ | awk '$9 == 7 || $9 == 8 {print $9, $10, $11, $12}' | sed "s|$ROOT|R|"
        cat /proc/$pid/fd/7; stat -L -c '%s %F' /proc/$pid/fd/7
        echo "high descriptors: $(ls /proc/$pid/fd | awk '$1 >= 512' | wc -l)"
        kill $pid
        # The shell's own cwd, read by its children; one that moved on,
        # and one that left the mount.
        cd sub; readlink /proc/$$/cwd | sed "s|$ROOT|R|"
        (cd 'dir 100%-x'; cd ..; cd 'dir 100%-x'; exec sleep 30) & a=$!
        (cd /; exec sleep 30) & b=$!
        until [ "$(cat /proc/$a/comm)$(cat /proc/$b/comm)" = sleepsleep ]; do sleep 0.05; done
        readlink /proc/$a/cwd /proc/$b/cwd | sed "s|$ROOT|R|"
        kill $a $b; cd ..

        # A process that closed every descriptor above 2 (close_range)
        # still shows the file it opened afterwards.
        python3 -c 'import os, time; os.open("sub/out", os.O_RDONLY); os.closerange(3, 1 << 20); os.open("sub/out", os.O_RDONLY); os.mkdir("ready"); time.sleep(30)' &
        pid=$!
        until [ -d ready ]; do sleep 0.05; done
        readlink /proc/$pid/fd/3 | sed "s|$ROOT|R|"
        kill $pid
    "#;
    let out = assert_same(&[], script, true);
    assert!(out.contains("PID: R/sub/dir 100%-x\n"), "{out}");
    assert!(out.ends_with("R/sub/out\n"), "{out}");
    assert!(out.contains("7 -> R/sub/dir 100%-x/file"), "{out}");
}

/// A forked child that has changed nothing since the fork shows the
/// descriptors and cwd it inherited (the parent's as of the fork), even
/// after the parent changes its own; the child's first change shows its
/// own, and the parent's view never shows the child's.
#[test]
fn a_forked_child_shows_what_it_inherited_until_it_changes_something() {
    let script = r#"
        cd "$ROOT"; mkdir -p a/b; echo x > a/one; echo y > a/two
        cd a/b
        python3 - <<'PY' | sed "s|$ROOT|R|g"
import os, sys, time
one = os.open("../one", os.O_RDONLY)
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.read(r, 1)                      # no change until told
    two = os.open("../two", os.O_RDONLY)
    os.chdir("..")
    os.write(w, bytes([two]))
    time.sleep(30)
    os._exit(0)
def link(p):
    try:
        return os.readlink(p)
    except OSError as e:
        return "error " + str(e.errno)
# The parent changes its own descriptors and cwd first.
os.close(one)
three = os.open("../two", os.O_RDONLY)
os.chdir("/")
print("child fd", one, link("/proc/%d/fd/%d" % (pid, one)))
print("child cwd", link("/proc/%d/cwd" % pid))
print("parent fd", one, link("/proc/self/fd/%d" % one))
print("parent fd", three, link("/proc/%d/fd/%d" % (os.getpid(), three)))
os.write(w, b"g")
time.sleep(0.2)
got = b""
while not got:
    got = os.read(r, 1)
print("child fd", one, link("/proc/%d/fd/%d" % (pid, one)))
print("child fd", got[0], link("/proc/%d/fd/%d" % (pid, got[0])))
print("child cwd", link("/proc/%d/cwd" % pid))
os.kill(pid, 9)
os.waitpid(pid, 0)
PY
    "#;
    let out = assert_same(&[], script, true);
    assert!(out.contains("child fd 3 R/a/one\n"), "{out}");
    assert!(out.contains("child cwd R/a/b\n"), "{out}");
    assert!(out.contains("child fd 6 R/a/two\n"), "{out}");
    assert!(out.ends_with("child cwd R/a\n"), "{out}");
}

/// Descriptors of files renamed or removed since they were opened, read
/// by the process itself (`readlink`, `os.path.realpath`) and by another
/// process of the instance: the file's current path, also after a
/// directory above it moved, and `… (deleted)` once it has no name (an
/// `O_TMPFILE` file is `<dir>/#<inode> (deleted)`), as Linux shows them.
/// One server, and three with every directory spread over them, where a
/// file's names live on servers that do not own it.
#[test]
fn descriptor_links_follow_renames_and_removals() {
    require("python3");
    let script = r#"
        cd "$ROOT"
        python3 - <<'P' 2>&1 | sed "s|$ROOT|R|g"
import os, subprocess, sys
os.makedirs("a/b"); os.mkdir("t")
def make(p): return os.open(p, os.O_CREAT | os.O_RDWR, 0o644)
fds = {"kept": make("t/k")}
fds["renamed"] = make("a/f"); os.rename("a/f", "a/g")
fds["moved"] = make("a/b/m"); os.rename("a/b/m", "t/m2")
fds["under-moved-dir"] = make("a/b/x"); os.rename("a", "A")
fds["dir"] = os.open("A/b", os.O_RDONLY); os.rename("A/b", "A/c")
fds["removed"] = make("t/r"); os.unlink("t/r")
os.mkdir("gone"); fds["dir-removed"] = make("gone/y"); os.unlink("gone/y"); os.rmdir("gone")
fds["replaced"] = make("t/o"); os.close(make("t/p")); os.rename("t/p", "t/o")
fds["tmpfile"] = os.open("t", os.O_TMPFILE | os.O_RDWR, 0o600)
ino = str(os.fstat(fds["tmpfile"]).st_ino)
links = [f"/proc/{os.getpid()}/fd/{fd}" for fd in fds.values()]
other = subprocess.run([sys.executable, "-c", "import os, sys\nfor a in sys.argv[1:]: print(os.readlink(a))", *links],
                       capture_output=True, text=True).stdout.split("\n")
def norm(p): return p.replace("/#" + ino + " ", "/#INO ")
for (k, fd), o in zip(fds.items(), other):
    l = norm(os.readlink(f"/proc/self/fd/{fd}"))
    r = norm(os.path.realpath(f"/proc/self/fd/{fd}"))
    print(k, "|", l, "|", r, "|", norm(o) == l)
P
    "#;
    for opts in [
        &["--servers", "1"][..],
        &["--servers", "3", "--distribute", "all"],
    ] {
        let out = assert_same_on_tmpfs(opts, script, true);
        assert!(out.contains("renamed | R/A/g | R/A/g | True\n"), "{out}");
        assert!(
            out.contains("under-moved-dir | R/A/c/x | R/A/c/x | True\n"),
            "{out}"
        );
        assert!(out.contains("removed | R/t/r (deleted) |"), "{out}");
    }
}

/// Another process reads the links of high descriptors (above 4096) and
/// of files whose paths are long (over 1,000 bytes), a hundred of them at
/// once, as Linux shows them.
#[test]
fn high_descriptors_and_long_paths_are_seen_by_other_processes() {
    let script = r#"
        ulimit -n 10000 || exit 1
        cd "$ROOT"
        long=$(printf 'd%.0s' $(seq 200)); mkdir -p "$long/$long/$long/$long/$long/$long"
        echo deep > "$long/$long/$long/$long/$long/$long/f"; echo short > s
        python3 - "$long/$long/$long/$long/$long/$long/f" <<'PY' &
import os, sys, time
a = os.open("s", os.O_RDONLY); os.dup2(a, 5000); os.dup2(a, 9999)
b = os.open(sys.argv[1], os.O_RDONLY); os.dup2(b, 4500)
# Long paths come and go, more of them at once than the 64 records the
# table once had room for.
for _ in range(3):
    many = [os.open(sys.argv[1], os.O_RDONLY) for _ in range(100)]
    for f in many:
        os.close(f)
many = [os.open(sys.argv[1], os.O_RDONLY) for _ in range(100)]
os.mkdir("ready"); time.sleep(30)
PY
        pid=$!
        until [ -d ready ]; do sleep 0.05; done
        for n in 3 4 4500 5000 9999; do
            l=$(readlink /proc/$pid/fd/$n); r=${l#"$ROOT"}; echo "$n ${#r} $(basename "$l") $(cat /proc/$pid/fd/$n)"
        done
        echo "long paths: $(for n in $(ls /proc/$pid/fd); do readlink /proc/$pid/fd/$n; done | grep -c '/f$')"
        kill $pid
    "#;
    let out = assert_same(&[], script, true);
    assert!(out.contains("4500 "), "{out}");
    assert!(out.contains(" f deep\n"), "{out}");
    assert!(out.contains("9999 2 s short\n"), "{out}");
    assert!(out.contains("4500 1208 f deep\n"), "{out}");
    assert!(out.ends_with("long paths: 102\n"), "{out}");
}

/// A process of the instance that never held an atoll descriptor nor
/// entered the mount: another process lists its descriptors as Linux
/// does, without atoll's own.
#[test]
fn descriptors_of_a_process_that_never_touched_the_mount_are_listed_as_on_linux() {
    let script = r#"
        cd /; exec 3</dev/null
        sleep 30 &
        pid=$!
        until [ "$(cat /proc/$pid/comm)" = sleep ]; do sleep 0.05; done
        ls /proc/$pid/fd | sort -n | tr '\n' ' '; echo
        kill $pid
    "#;
    let out = assert_same(&[], script, true);
    assert!(out.starts_with("0 1 2 3 "), "{out}");
    assert!(
        out.split_whitespace()
            .all(|n| n.parse::<u32>().is_ok_and(|n| n < 512)),
        "{out}"
    );
}

/// A program started with its cwd in the mount keeps, as its kernel cwd,
/// the removed directory its parent entered the mount with (fork and exec
/// keep it) instead of making one of its own: the static `busybox`, which
/// atoll does not interpose, shows the kernel's cwd, the same below a
/// dynamic `bash` as beside it. Re-entering from a host directory makes
/// the kernel's cwd a removed directory again, where nothing can be
/// created (the static program's relative names are its relay's to serve,
/// in the mount).
#[test]
fn a_program_started_in_the_mount_keeps_its_parents_kernel_cwd() {
    require("busybox");
    let out = atoll_tests::run_in_atoll(
        &["--servers", "2"],
        r#"cd /atoll && mkdir d && cd d
           busybox readlink /proc/self/cwd
           bash -c 'busybox readlink /proc/self/cwd'
           cd /tmp && cd /atoll/d && busybox readlink /proc/self/cwd
           busybox touch x 2>/dev/null; echo "touch rc=$?"; ls x"#,
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 5, "{text}");
    assert_eq!(lines[4], "x", "the file is in the mount");
    assert!(
        lines[0].contains("/.void-") && lines[0].ends_with(" (deleted)"),
        "{text}"
    );
    assert_eq!(lines[1], lines[0], "a child made a directory of its own");
    // Back from a host directory, the kernel's cwd is a removed one again.
    assert!(
        lines[2].contains("/.void-") && lines[2].ends_with(" (deleted)"),
        "{text}"
    );
    assert_eq!(lines[3], "touch rc=0");
}

/// The table a process publishes its descriptors and cwd in is mapped
/// only once there is something to publish: a process that never held an
/// atoll descriptor nor entered the mount has the memfd (with the list of
/// atoll's own descriptors, which the listing above relies on) but no
/// mapping of it; one that entered the mount has both.
#[test]
fn the_descriptor_table_is_mapped_only_by_a_process_that_publishes() {
    let out = atoll_tests::run_in_atoll(
        &[],
        r#"(cd /; exec sleep 30) & host=$!
           (cd /atoll; exec sleep 30) & mount=$!
           until [ "$(cat /proc/$host/comm)$(cat /proc/$mount/comm)" = sleepsleep ]; do sleep 0.05; done
           for p in $host $mount; do
               echo "maps $(grep -c 'memfd:atoll-fds' /proc/$p/maps)"
           done
           kill $host $mount"#,
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text, "maps 0\nmaps 1\n", "{text}");
}

/// A descriptor of a file without a name links to what Linux names it: an
/// anonymous pipe's `pipe:[INO]` with the `st_ino` its `fstat` gives, for
/// the process itself and for another process reading `/proc/PID/fd`, and
/// an inotify queue's `anon_inode:inotify` — not atoll's placeholder.
#[test]
fn pipes_and_notification_queues_link_to_their_anonymous_names() {
    require("python3");
    let script = r#"
        cd "$ROOT"; echo x > watched
        python3 - <<'P' | cat
import os, subprocess
r, w = os.pipe()
own = os.readlink(f"/proc/self/fd/{r}")
print(own == f"pipe:[{os.fstat(r).st_ino}]", own.startswith("pipe:["))
other = subprocess.run(["readlink", f"/proc/{os.getpid()}/fd/{w}"], capture_output=True, text=True).stdout.strip()
print(other == own)
print(os.readlink("/proc/self/fd/1").startswith("pipe:["))
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
q = libc.inotify_init1(0)
print(libc.inotify_add_watch(q, b"watched", 2) > 0, os.readlink(f"/proc/self/fd/{q}"))
P
        sleep 5 | { p=$(pgrep -n -x sleep); readlink /proc/$p/fd/1 | sed 's/[0-9][0-9]*/N/'; cat; }
    "#;
    let out = assert_same(&[], script, true);
    assert!(
        out.contains("True True\nTrue\nTrue\nTrue anon_inode:inotify\npipe:[N]\n"),
        "{out}"
    );
}
