//! Change notification on atoll paths: `tail -f` and `inotifywait` see
//! what other processes of the instance do, with the same events as on a
//! tmpfs directory; a C probe compares the details of `inotify(7)` with
//! tmpfs; one descriptor serves host or atoll paths, never both; a
//! watched file replaced by a rename reports as on tmpfs, and `tail -F`
//! follows a rotated file.

use atoll_tests::OutputBounded as _;
use std::process::{Command, Output, Stdio};

use atoll_tests::{compile_probe, output_within, require, run_in_atoll, MOUNT, RUN_LIMIT};

/// Instance shapes: several servers (a directory's entries on its home
/// server, files anywhere), entries spread over three servers, defaults.
const SHAPES: [&[&str]; 3] = [
    &["--servers", "2"],
    &["--servers", "3", "--distribute", "all"],
    &[],
];

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).to_string()
}

/// Run `bash -c script` with `$ROOT` a fresh directory on tmpfs.
fn run_on_tmpfs(script: &str) -> Output {
    let dir = tempfile::tempdir_in("/dev/shm").expect("tmpfs directory");
    Command::new("bash")
        .args(["-c", script])
        .env("ROOT", dir.path())
        .env("LC_ALL", "C")
        .stdin(Stdio::null())
        .output_bounded()
        .expect("spawn bash")
}

/// `tail -f` of a file in the mount while another process appends: the
/// lines appear. `-s 1000` makes a polling `tail` wait 1000 s between
/// looks, so the lines can only come this soon through inotify.
#[test]
fn tail_follows_a_file_another_process_appends_to() {
    require("tail");
    let script = r#"
        set -e
        cd "$ROOT"
        echo first > log
        tail -s 1000 -f log > seen &
        t=$!
        until grep -q first seen; do sleep 0.02; done
        # Appends in a tight loop: tail reads while the next write is
        # under way, and must never see bytes not yet copied in.
        bash -c 'for i in $(seq 1 200); do echo "line $i" >> log; done'
        for i in $(seq 1 1000); do grep -q 'line 200' seen && break; sleep 0.02; done
        kill $t
        cat seen
    "#;
    let want: String = std::iter::once("first\n".to_string())
        .chain((1..=200).map(|i| format!("line {i}\n")))
        .collect();
    for shape in SHAPES {
        let out = run_in_atoll(shape, script);
        assert_eq!(text(&out.stdout), want, "{shape:?}: {}", text(&out.stderr));
    }
}

/// `inotifywait -m` on a directory while another process creates, writes,
/// chmods, renames and deletes in it: the same events, in the same order,
/// as on tmpfs. In a distributed directory the renamed file's new entry is
/// mostly on another server than its inode, whose owner reports the
/// changes made by path (`chmod`, `touch -m`, `truncate`) to the directory.
#[test]
fn inotifywait_sees_the_events_tmpfs_gives() {
    require("inotifywait");
    let script = r#"
        set -e
        d="$ROOT/watched"
        mkdir "$d"
        inotifywait -m -e create,modify,attrib,close_write,moved_from,moved_to,delete \
            --format '%e %f' "$d" > "$ROOT/events" 2> "$ROOT/setup" &
        w=$!
        until grep -q 'Watches established' "$ROOT/setup"; do sleep 0.02; done
        bash -c '
            cd "$1"
            echo a > f
            echo b >> f
            chmod 600 f
            mv f g
            chmod 640 g
            touch -m g
            truncate -s 1 g
            mkdir sub
            mv sub sub2
            : > empty
            rm g empty
            rmdir sub2
            echo end > zz-end
        ' - "$d"
        for i in $(seq 1 1000); do grep -q 'CLOSE_WRITE,CLOSE zz-end' "$ROOT/events" && break; sleep 0.02; done
        kill $w
        cat "$ROOT/events"
    "#;
    let host = run_on_tmpfs(script);
    let want = text(&host.stdout);
    assert!(
        want.contains("MOVED_TO g"),
        "tmpfs run: {want}{}",
        text(&host.stderr)
    );
    for shape in SHAPES {
        let out = run_in_atoll(shape, script);
        assert_eq!(text(&out.stdout), want, "{shape:?}: {}", text(&out.stderr));
    }
}

/// `inotifywait -m` with every event while a program in the directory
/// runs, `cat` and `head` read it and `ls` lists the directory: the opens,
/// reads and closes tmpfs reports.
#[test]
fn inotifywait_sees_exec_cat_ls_as_tmpfs() {
    require("inotifywait");
    let script = r#"
        set -e
        d="$ROOT/x"
        mkdir "$d"
        cp /bin/true "$d/prog"
        inotifywait -m --format '%e %f' "$d" > "$ROOT/ev" 2> "$ROOT/setup" &
        w=$!
        until grep -q 'Watches established' "$ROOT/setup"; do sleep 0.02; done
        "$d/prog"
        cat "$d/prog" > /dev/null
        ls "$d" > /dev/null
        head -c 1 "$d/prog" > /dev/null
        touch "$d/zz-end"
        for i in $(seq 1 1000); do grep -q 'CLOSE_WRITE,CLOSE zz-end' "$ROOT/ev" && break; sleep 0.02; done
        kill $w
        # Identical events merge only while unread: whether two reads make
        # one line or two depends on when inotifywait read (on Linux too).
        uniq "$ROOT/ev"
    "#;
    let host = run_on_tmpfs(script);
    let want = text(&host.stdout);
    assert!(
        want.starts_with("OPEN prog\nACCESS prog\n"),
        "tmpfs run: {want}{}",
        text(&host.stderr)
    );
    for shape in SHAPES {
        let out = run_in_atoll(shape, script);
        assert_eq!(text(&out.stdout), want, "{shape:?}: {}", text(&out.stderr));
    }
}

/// Record layout and padding, rename cookies, `IN_ONESHOT`, `IN_MASK_ADD`,
/// `IN_MASK_CREATE`, `inotify_rm_watch`, `IN_DELETE_SELF` then
/// `IN_IGNORED`, `EINVAL` for a short buffer, `FIONREAD`, `EAGAIN`,
/// `poll`/`epoll`, blocking reads woken by another process and cut by a
/// signal, `IN_Q_OVERFLOW` after `max_queued_events` records (not a
/// ring's bytes: the ring grows), once while unread, with an event after
/// it once a read made room: the probe's transcript equals tmpfs's, also
/// in distributed directories, where a `chmod` or `truncate` by path of a
/// file renamed to a name another server holds is reported by the file's
/// owner to the directory's watchers through the entry the client named.
#[test]
fn probe_matches_tmpfs() {
    transcript_matches_tmpfs(
        "probe",
        include_str!("inotify/probe.c"),
        "overflows 1, at 16385, its wd -1",
        &["--memory", "256M"],
    );
}

/// Compile probe `name` from `src`, run it on a tmpfs directory (its
/// transcript must say `marker`, proof that it got through) and in the
/// mount in every one of [`SHAPES`] with `extra` options: the same
/// transcript each time.
fn transcript_matches_tmpfs(name: &str, src: &str, marker: &str, extra: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let bin = compile_probe(dir.path(), name, src);
    let shm = tempfile::tempdir_in("/dev/shm").expect("tmpfs directory");
    let host = Command::new(&bin)
        .arg(shm.path())
        .output_bounded()
        .expect("probe");
    let want = text(&host.stdout);
    assert!(host.status.success() && want.contains(marker), "{want}");
    for shape in SHAPES {
        let mut opts = shape.to_vec();
        opts.extend(extra);
        let out = run_in_atoll(&opts, &format!("{} {MOUNT}", bin.display()));
        assert_eq!(text(&out.stdout), want, "{shape:?}: {}", text(&out.stderr));
    }
}

/// A watched file losing a name: a rename over it (the directory's
/// `IN_MOVED_FROM`/`IN_MOVED_TO`, then its `IN_ATTRIB`, `IN_DELETE_SELF`,
/// `IN_IGNORED`), in one directory and across two, over an open file
/// (its end at the close) and over a watched directory; an unlink of a
/// file with another link and of an open one (`IN_ATTRIB` for the link
/// count); `inotify_rm_watch` of watches whose inode went or whose
/// `IN_ONESHOT` fired (`EINVAL`, no second `IN_IGNORED`); link counts:
/// the probe's transcript equals tmpfs's, with names spread over servers.
#[test]
fn a_watched_file_losing_a_name_reports_as_tmpfs() {
    transcript_matches_tmpfs(
        "replace",
        include_str!("inotify/replace.c"),
        "rm_watch of the fired oneshot: -1 Invalid argument",
        &[],
    );
}

/// coreutils' tests/tail-2/inotify-rotate.sh: `tail -F k` follows `k`
/// through `mv x k` and prints what is appended to the new file. Four
/// rotators at once (more processes than cores), eight rotations each;
/// `-s 1000` makes a polling `tail` wait 1000 s between looks, so the
/// lines come this soon only through inotify. A wait that gives up says
/// so, and the transcript then differs from tmpfs's.
#[test]
fn tail_follows_a_rotated_file_as_on_tmpfs() {
    require("tail");
    let script = r#"
        until_in() {
            for n in $(seq 1 1500); do grep -q "$1" out && return 0; sleep 0.02; done
            echo "gave up waiting for $1"
        }
        rotate() {
            mkdir "$ROOT/r$1"
            cd "$ROOT/r$1"
            for i in $(seq 1 8); do
                rm -f k x out
                : > k
                : > x
                tail -s 1000 -F k > out 2>&1 &
                t=$!
                echo tailed > k
                until_in tailed
                mv x k
                until_in 'tail:'
                echo ok >> k
                until_in '^ok'
                kill $t
                wait $t 2> /dev/null
                echo "== $1 $i"
                cat out
            done > "$ROOT/log$1"
        }
        for j in 1 2 3 4; do rotate $j & done
        wait
        cat "$ROOT"/log1 "$ROOT"/log2 "$ROOT"/log3 "$ROOT"/log4
    "#;
    let host = run_on_tmpfs(script);
    let want = text(&host.stdout);
    let round = "tailed\ntail: 'k' has been replaced;  following new file\nok\n";
    assert_eq!(want.matches(round).count(), 32, "tmpfs run: {want}");
    for shape in SHAPES {
        let out = run_in_atoll(shape, script);
        assert_eq!(text(&out.stdout), want, "{shape:?}: {}", text(&out.stderr));
    }
}

/// Opens, reads and closes: `IN_OPEN`, `IN_ACCESS` (`read`, `pread`,
/// `readv` once, `sendfile`, `getdents`; none at end of file; identical
/// events merged), `IN_CLOSE_NOWRITE`, `IN_OPEN` before the `IN_MODIFY` of
/// `O_TRUNC`, nothing for `O_PATH`, a watch added after the open, another
/// process's reads, and `fstat`, `write` and `lseek` of the descriptor:
/// the probe's transcript equals tmpfs's.
#[test]
fn open_read_close_events_match_tmpfs() {
    transcript_matches_tmpfs(
        "access",
        include_str!("inotify/access.c"),
        "W1 ACCESS|ISDIR sub",
        &[],
    );
}

/// A host inotify descriptor becomes an atoll queue at its first atoll
/// watch; one that watches host paths refuses atoll paths and the other
/// way round (`EXDEV`); so does a fanotify group (`fanotify.rs`).
#[test]
fn one_descriptor_serves_host_or_atoll_paths() {
    let dir = tempfile::tempdir().unwrap();
    let bin = compile_probe(dir.path(), "mixing", include_str!("inotify/mixing.c"));
    let host_dir = tempfile::tempdir().unwrap();
    let out = run_in_atoll(
        &["--servers", "2"],
        &format!(
            "mkdir $ROOT/w && {} {} $ROOT/w",
            bin.display(),
            host_dir.path().display()
        ),
    );
    assert_eq!(
        text(&out.stdout),
        "host dir on a new descriptor: ok\n\
         atoll dir on a host-watching descriptor: Invalid cross-device link\n\
         host event: CREATE h\n\
         atoll dir on a new descriptor: ok\n\
         flags kept: nonblock=1 cloexec=1\n\
         host dir on an atoll descriptor: Invalid cross-device link\n\
         atoll event: CREATE m\n\
         then: -1 Resource temporarily unavailable\n\
         fanotify_mark of the mount: ok\n\
         host dir on an atoll fanotify group: Invalid cross-device link\n",
        "{}",
        text(&out.stderr)
    );
}

/// A watcher killed while it watches leaves nothing behind: a later
/// watcher of the same directory sees exactly its own events, and the
/// servers answer as before (the dead queue's watches were dropped and
/// its blocks freed at the next request).
#[test]
fn a_killed_watcher_leaves_the_directory_watchable() {
    require("inotifywait");
    let script = r#"
        set -e
        d="$ROOT/w"
        mkdir "$d"
        for k in 1 2 3; do
            inotifywait -m -e create "$d" > /dev/null 2> "$ROOT/s$k" &
            p=$!
            until grep -q 'Watches established' "$ROOT/s$k"; do sleep 0.02; done
            touch "$d/f$k"
            kill -9 $p
            wait $p || true
        done
        inotifywait -e create --format '%e %f' "$d" > "$ROOT/last" 2> "$ROOT/s4" &
        p=$!
        until grep -q 'Watches established' "$ROOT/s4"; do sleep 0.02; done
        touch "$d/final"
        wait $p
        cat "$ROOT/last"
        ls "$d"
    "#;
    for shape in SHAPES {
        let out = run_in_atoll(shape, script);
        assert_eq!(
            text(&out.stdout),
            "CREATE final\nf1\nf2\nf3\nfinal\n",
            "{shape:?}: {}",
            text(&out.stderr)
        );
    }
}

/// What a watcher costs writers: best-of-five mean of 20 000 appends of 64
/// bytes from Python, with no watcher, while `inotifywait -m` watches the
/// directory, and after it left (its watches are gone again).
#[test]
#[ignore = "measurement: cargo test --release -p atoll-tests --test inotify -- --ignored --nocapture"]
fn measure_write_cost_of_a_watcher() {
    require("inotifywait");
    let script = r#"
        cd "$ROOT"; mkdir d
        W='import os,time
fd=os.open("d/f",os.O_WRONLY|os.O_CREAT|os.O_APPEND)
best=1e9
for r in range(5):
    t=time.perf_counter()
    for _ in range(20000): os.write(fd,b"x"*64)
    best=min(best,(time.perf_counter()-t)/20000*1e6)
print("%.2f us/write" % best)'
        echo -n "no watcher: "; python3 -c "$W"
        inotifywait -m -e modify d > /dev/null 2> setup & P=$!
        until grep -q established setup; do sleep 0.02; done
        echo -n "inotifywait -m on the directory: "; python3 -c "$W"
        kill $P; wait $P 2>/dev/null
        echo -n "after the watcher left: "; python3 -c "$W"
    "#;
    for shape in [
        &["--servers", "2"][..],
        &["--servers", "3", "--distribute", "all"],
    ] {
        let out = run_in_atoll(shape, script);
        println!("{shape:?}:\n{}", text(&out.stdout));
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    let host = run_on_tmpfs(script);
    println!("tmpfs:\n{}", text(&host.stdout));
}

/// What a watcher costs readers: best-of-five mean of 20 000 `pread`s of
/// 64 bytes and of 2 000 opens and closes from Python, with no watcher,
/// while `inotifywait -m` watches the directory for every event (each
/// read then posts `InotifyAccessed`), and after it left.
#[test]
#[ignore = "measurement: cargo test --release -p atoll-tests --test inotify -- --ignored --nocapture"]
fn measure_read_cost_of_a_watcher() {
    require("inotifywait");
    let script = r#"
        cd "$ROOT"; mkdir d; head -c 4096 /dev/zero > d/f
        R='import os,time
fd=os.open("d/f",os.O_RDONLY)
best=1e9
for r in range(5):
    t=time.perf_counter()
    for _ in range(20000): os.pread(fd,64,0)
    best=min(best,(time.perf_counter()-t)/20000*1e6)
bo=1e9
for r in range(5):
    t=time.perf_counter()
    for _ in range(2000): os.close(os.open("d/f",os.O_RDONLY))
    bo=min(bo,(time.perf_counter()-t)/2000*1e6)
print("%.2f us/pread, %.2f us/open+close" % (best,bo))'
        echo -n "no watcher: "; python3 -c "$R"
        inotifywait -m d > /dev/null 2> setup & P=$!
        until grep -q established setup; do sleep 0.02; done
        echo -n "inotifywait -m on the directory: "; python3 -c "$R"
        kill $P; wait $P 2>/dev/null
        echo -n "after the watcher left: "; python3 -c "$R"
    "#;
    for shape in [&["--servers", "2"][..], &[]] {
        let out = run_in_atoll(shape, script);
        println!("{shape:?}:\n{}", text(&out.stdout));
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    let host = run_on_tmpfs(script);
    println!("tmpfs:\n{}", text(&host.stdout));
}

/// What Linux gives the `unmount` probe when its tmpfs is unmounted: the
/// change made before, then `IN_UNMOUNT` and `IN_IGNORED` for each watch,
/// the newest first, `IN_ISDIR` on directories'.
const UNMOUNT_TRANSCRIPT: &str = "wds 1 2 3\n\
    wd 1 mask 0x4 len 16\n\
    wd 2 mask 0x4 len 0\n\
    wd 3 mask 0x40002000 len 0\n\
    wd 3 mask 0x8000 len 0\n\
    wd 2 mask 0x2000 len 0\n\
    wd 2 mask 0x8000 len 0\n\
    wd 1 mask 0x40002000 len 0\n\
    wd 1 mask 0x8000 len 0\n\
    done\n";

/// Wait up to `secs` for `path` to exist.
fn appeared(path: &std::path::Path, secs: u64) -> bool {
    for _ in 0..secs * 20 {
        if path.exists() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    false
}

/// A watcher that outlives its instance (its `atoll run` killed) reads
/// what a watcher of an unmounted tmpfs reads: the events queued before,
/// then `IN_UNMOUNT` and `IN_IGNORED` for each watch. Where the test may
/// mount, the transcript is checked against Linux's too.
#[test]
fn a_watcher_outliving_its_instance_reads_in_unmount() {
    watcher_outliving_its_instance(&[]);
}

/// The same when the watches were made by the image before an `execve`
/// (the queue's descriptor survives it): they are the process's.
#[test]
fn watches_made_before_an_exec_read_in_unmount() {
    watcher_outliving_its_instance(&["exec"]);
}

fn watcher_outliving_its_instance(mode: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let bin = compile_probe(dir.path(), "unmount", include_str!("inotify/unmount.c"));
    let mnt = tempfile::tempdir().unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "none"])
        .arg(mnt.path())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if mounted {
        let ready = dir.path().join("host-ready");
        let probe = Command::new(&bin)
            .arg(mnt.path())
            .arg(&ready)
            .args(mode)
            .stdout(Stdio::piped())
            .spawn()
            .expect("probe");
        assert!(appeared(&ready, 20), "the probe never got ready");
        let umount = Command::new("umount").arg("-l").arg(mnt.path()).status();
        assert!(umount.is_ok_and(|s| s.success()));
        let out = probe.wait_with_output().unwrap();
        assert_eq!(text(&out.stdout), UNMOUNT_TRANSCRIPT, "Linux");
    }
    let ready = dir.path().join("ready");
    let report = dir.path().join("report");
    let mut run = atoll_tests::atoll()
        .args([
            "run",
            "--memory",
            "64M",
            "--servers",
            "2",
            "--",
            "bash",
            "-c",
        ])
        .arg(format!(
            "({} {MOUNT} {} {} > {}.tmp; mv {}.tmp {}) & wait",
            bin.display(),
            ready.display(),
            mode.join(" "),
            report.display(),
            report.display(),
            report.display()
        ))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn atoll");
    assert!(appeared(&ready, 60), "the probe never got ready");
    run.kill().expect("kill atoll run"); // SIGKILL: nothing is cleaned up
    run.wait().unwrap();
    assert!(appeared(&report, 20), "the probe never finished reading");
    assert_eq!(
        std::fs::read_to_string(&report).unwrap(),
        UNMOUNT_TRANSCRIPT
    );
}

/// With `--without direct-cache` a read's bytes come in many messages; a
/// read of 16 MiB is still one `IN_ACCESS`, as on tmpfs, even for a
/// watcher that reads its queue while the messages are served (each
/// message used to report, merged only while unread).
#[test]
fn one_read_in_many_messages_is_one_access() {
    require("inotifywait");
    let script = r#"
        set -e
        d="$ROOT/x"
        mkdir "$d"
        head -c 16M /dev/zero > "$d/f"
        inotifywait -m -e access,create --format '%e %f' "$d" > "$ROOT/ev" 2> "$ROOT/setup" &
        w=$!
        until grep -q 'Watches established' "$ROOT/setup"; do sleep 0.02; done
        for k in 1 2 3; do
            dd if="$d/f" of=/dev/null bs=16M count=1 status=none
            touch "$d/end$k"
        done
        for i in $(seq 1 1000); do grep -q 'CREATE end3' "$ROOT/ev" && break; sleep 0.02; done
        kill $w
        cat "$ROOT/ev"
    "#;
    let host = run_on_tmpfs(script);
    let want = text(&host.stdout);
    assert_eq!(
        want,
        "ACCESS f\nCREATE end1\nACCESS f\nCREATE end2\nACCESS f\nCREATE end3\n",
        "tmpfs run: {}",
        text(&host.stderr)
    );
    for shape in [
        &["--servers", "2", "--without", "direct-cache"][..],
        &["--without", "direct-cache"],
    ] {
        let out = run_in_atoll(shape, script);
        assert_eq!(text(&out.stdout), want, "{shape:?}: {}", text(&out.stderr));
    }
}

/// A sysfs tree describing two sockets, cpu0 on 0 and cpu1 on 1 (as in
/// `affinity.rs`): a process pinned to the socket a directory's entries
/// are not on makes its files by creation affinity (Hare §3.7.5).
fn two_sockets() -> tempfile::TempDir {
    let t = tempfile::tempdir().expect("tempdir");
    for cpu in 0..2 {
        let d = t
            .path()
            .join(format!("devices/system/cpu/cpu{cpu}/topology"));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("physical_package_id"), format!("{cpu}\n")).unwrap();
    }
    t
}

/// Files made from each socket of a fake two-socket machine, so that one
/// of them is placed by creation affinity (its inode on the creator's
/// server, its entry on the other), and a hard link: the events tmpfs
/// gives — `IN_OPEN` after `IN_CREATE` and the `IN_MODIFY` and
/// `IN_CLOSE_WRITE` of the affinity file's first descriptor, and no
/// `IN_ATTRIB` to the directory for a link (Linux reports a link count
/// to watches of the inode only).
#[test]
fn creation_affinity_and_links_report_as_tmpfs() {
    require("inotifywait");
    require("taskset");
    let script = r#"
        set -e
        d="$ROOT/x"
        mkdir "$d"
        watch --format '%e %f' "$d"
        taskset -c 0 bash -c "echo a > $d/f0"
        taskset -c 1 bash -c "echo a > $d/f1"
        ln "$d/f0" "$d/l0"
        ln "$d/f1" "$d/l1"
        mkdir "$d/zz-end"
        until_seen 'zz-end'
        cat "$EV/ev"
    "#;
    let (want, out) = on_tmpfs_and_with_creation_affinity(script);
    assert!(
        want.contains("OPEN f1\nMODIFY f1\nCLOSE_WRITE,CLOSE f1\nCREATE l0\nCREATE l1\n"),
        "tmpfs run: {want}"
    );
    assert_eq!(text(&out.stdout), want, "{}", text(&out.stderr));
}

/// A hard link made where the file's owner is another server (`f1`,
/// placed on server 1 by creation affinity, linked in a directory whose
/// entries server 0 holds) reports `IN_ATTRIB` to watches of the file
/// itself, as one on the same server (`f0`) and as Linux (the link
/// count, `fsnotify_link_count`).
#[test]
fn a_hard_link_across_servers_reports_attrib_to_the_file() {
    require("inotifywait");
    require("taskset");
    let script = r#"
        set -e
        d="$ROOT/x"
        mkdir "$d"
        taskset -c 0 bash -c "echo a > $d/f0"
        taskset -c 1 bash -c "echo a > $d/f1"
        touch "$d/end"
        watch -e attrib,create,delete_self --format '%w %e' "$d/f0" "$d/f1" "$d/end"
        ln "$d/f0" "$d/l0"
        ln "$d/f1" "$d/l1"
        chmod 600 "$d/end"
        until_seen 'end ATTRIB'
        sed 's|.*/||' "$EV/ev"
    "#;
    let (want, out) = on_tmpfs_and_with_creation_affinity(script);
    assert_eq!(want, "f0 ATTRIB\nf1 ATTRIB\nend ATTRIB\n", "tmpfs run");
    assert_eq!(text(&out.stdout), want, "{}", text(&out.stderr));
}

/// A file placed by creation affinity (its inode on server 1, its entry
/// on server 0) while its directory was not watched: a watch of the
/// directory added later hears of that first descriptor's write and
/// close, as on tmpfs (a description opened by name reports through its
/// entry whoever watches when). The transcript ends at the close: Linux
/// itself may report the writer's close at its exit after a later change
/// by its parent.
#[test]
fn a_watch_added_after_an_affinity_create_hears_that_descriptor() {
    require("inotifywait");
    require("taskset");
    let script = r#"
        set -e
        d="$ROOT/x"
        mkdir "$d"
        taskset -c 1 bash -c "exec 3> $d/f1; until [ -e $EV/go ]; do sleep 0.02; done; echo a >&3" &
        p=$!
        until [ -e "$d/f1" ]; do sleep 0.02; done
        watch --format '%e %f' "$d"
        touch "$EV/go"
        wait $p
        until_seen 'CLOSE_WRITE'
        cat "$EV/ev"
    "#;
    let (want, out) = on_tmpfs_and_with_creation_affinity(script);
    assert_eq!(want, "MODIFY f1\nCLOSE_WRITE,CLOSE f1\n", "tmpfs run");
    assert_eq!(text(&out.stdout), want, "{}", text(&out.stderr));
}

/// Shell functions for the scripts of [`on_tmpfs_and_with_creation_affinity`].
const WATCH_FUNCTIONS: &str = r#"
watch() {
    inotifywait -m "$@" > "$EV/ev" 2> "$EV/setup" &
    w=$!
    until grep -q 'Watches established' "$EV/setup"; do sleep 0.02; done
}
until_seen() {
    for i in $(seq 1 1000); do grep -q "$1" "$EV/ev" && break; sleep 0.02; done
    kill $w
}
"#;

/// Runs `script` on a tmpfs, then in atoll with two servers and
/// creation affinity on a machine of two sockets (`taskset -c 1` places a
/// new file's inode on server 1); `$ROOT` is the directory to work in and
/// `$EV` a host directory for the watcher's files; the script may call
/// `watch ARGS…` (an `inotifywait -m` into `$EV/ev`, returning once its
/// watches are established) and `until_seen TEXT` (wait for an event
/// line with TEXT, then stop the watcher). Returns tmpfs's stdout and
/// atoll's whole output.
fn on_tmpfs_and_with_creation_affinity(script: &str) -> (String, Output) {
    let script = &format!("{WATCH_FUNCTIONS}{script}");
    let ev = tempfile::tempdir().unwrap();
    let host = run_on_tmpfs(&script.replace("$EV", &ev.path().display().to_string()));
    let want = text(&host.stdout);
    assert!(
        host.status.success(),
        "tmpfs run: {want}{}",
        text(&host.stderr)
    );
    let sysfs = two_sockets();
    let ev = tempfile::tempdir().unwrap();
    let mut cmd = atoll_tests::atoll();
    cmd.args([
        "run",
        "--memory",
        "256M",
        "--placement",
        "local",
        "--servers",
        "2",
    ])
    .args(["--", "bash", "-c", script])
    .env("ROOT", MOUNT)
    .env("EV", ev.path())
    .env("ATOLL_SYSFS_ROOT", sysfs.path())
    .stdin(Stdio::null());
    (want, output_within(cmd, RUN_LIMIT))
}
