//! `/proc/<pid>/cwd` and `/proc/<pid>/fd/N` in the mount, compared with
//! a host directory: a process reads its own cwd and descriptors' paths,
//! walks through them (`/proc/self/cwd/f`), and reads the cwd of another
//! process of the instance and the paths of its descriptors (`pwdx`,
//! `readlink`, `realpath`, `ls`, `cat /proc/PID/fd/N`), without atoll's
//! own descriptors in the listing.

use atoll_tests::{assert_same, require};

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
