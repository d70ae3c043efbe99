//! A working directory that was removed, as on Linux: the cwd holds its
//! directory (an `O_PATH` description at its server, `ns::cwd::hold_dir`),
//! so after its `rmdir` — by the process itself or another — `stat .`
//! shows a directory without links, a listing is empty, `open(".")` and
//! `fchdir` work, creating in it is `ENOENT`, `..` is the parent it had,
//! `getcwd` is `ENOENT` and `/proc/self/cwd` (and `/proc/PID/cwd`, read
//! by another process) names the path with ` (deleted)`; the reference goes
//! with `fork` and `execve`, and leaves with `chdir` away, exit and kill.
//! Compared with the same scripts on a tmpfs directory.

use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;
use std::time::{Duration, Instant};

use atoll_tests::{assert_same_on_tmpfs, Booted, OutputBounded};

/// The checks a process makes in its removed cwd, in Python: the calls
/// themselves, in a thread (one cwd per process), after a fork, and in
/// programs it starts (`execve`, through `subprocess`).
const CHECKS: &str = r#"
import errno, os, stat, subprocess, sys, threading

def tr(name, f):
    try:
        print(name, "ok", f())
    except OSError as e:
        print(name, "err", errno.errorcode[e.errno])

def checks(who):
    print("--", who)
    tr("stat", lambda: (os.stat(".").st_nlink, stat.S_ISDIR(os.stat(".").st_mode)))
    tr("listdir", lambda: os.listdir("."))
    tr("scandir", lambda: [e.name for e in os.scandir(".")])
    def fd_checks():
        fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
        st = os.fstat(fd)
        names = os.listdir(fd)
        os.fchdir(fd)
        os.close(fd)
        return (st.st_nlink, names, os.stat(".").st_nlink)
    tr("open.", fd_checks)
    tr("opath", lambda: os.fstat(os.open(".", os.O_PATH)).st_nlink)
    tr("creat", lambda: os.open("x", os.O_CREAT | os.O_WRONLY, 0o644))
    tr("mkdir", lambda: os.mkdir("x"))
    tr("mkfifo", lambda: os.mkfifo("x"))
    tr("symlink", lambda: os.symlink("t", "x"))
    tr("getcwd", os.getcwd)
    tr("dotdot", lambda: os.path.samestat(os.stat(".."), os.stat(parent)))
    tr("dotdot-list", lambda: sorted(os.listdir("..")))
    tr("proc", lambda: os.readlink("/proc/self/cwd").endswith("/e (deleted)"))

top = os.getcwd()
os.makedirs(sys.argv[1] + "/e")
parent = top + "/" + sys.argv[1]
r, w = os.pipe()
r2, w2 = os.pipe()
pid = os.fork()
if pid == 0:
    os.chdir(sys.argv[1] + "/e")
    os.write(w, b"x")
    os.read(r2, 1)  # removed by the parent meanwhile
    checks("removed by another process")
    t = threading.Thread(target=checks, args=("a thread",))
    t.start()
    t.join()
    sys.stdout.flush()
    p = os.fork()
    if p == 0:
        checks("a forked child")
        sys.stdout.flush()
        os._exit(0)
    os.waitpid(p, 0)
    sys.stdout.flush()
    subprocess.run(["stat", "-c", "exec: %h %F", "."])
    subprocess.run(["ls", "-a"])
    print("ls", subprocess.run(["ls"]).returncode, flush=True)
    subprocess.run([sys.executable, "-c", "import os; print(os.stat('.').st_nlink, os.listdir('.'))"])
    sys.stdout.flush()
    os._exit(0)
os.read(r, 1)
tr("other-proc", lambda: os.readlink("/proc/%d/cwd" % pid) == parent + "/e")
os.rmdir(sys.argv[1] + "/e")
tr("other-proc-removed", lambda: os.readlink("/proc/%d/cwd" % pid) == parent + "/e (deleted)")
os.write(w2, b"x")
os.waitpid(pid, 0)
os.makedirs(sys.argv[1] + "/s/e")
parent = top + "/" + sys.argv[1] + "/s"
os.chdir(sys.argv[1] + "/s/e")
os.rmdir(top + "/" + sys.argv[1] + "/s/e")
checks("removed by itself")
"#;

/// The shell's part: coreutils in a cwd it removed itself, and the
/// Python checks, in a directory on each server (`--distribute all`
/// places new directories on both of two servers).
fn script() -> String {
    format!(
        r#"cd "$ROOT" || exit 1
py=$(python3 -c 'import sys; print(sys.executable)')
cat > checks.py <<'PY'
{CHECKS}
PY
for d in d0 d1 d2 d3; do
  mkdir -p "a/$d" && (
    cd "a/$d" && rmdir "$ROOT/a/$d" || exit 1
    echo "== $d"
    stat -c '%h %F' .; echo "stat=$?"
    ls; echo "ls=$?"
    ls -a; echo "ls -a=$?"
    touch x; echo "touch=$?"
    mkdir x; echo "mkdir=$?"
    mkfifo x; echo "mkfifo=$?"
    ln -s t x; echo "ln=$?"
    readlink /proc/self/cwd
    stat -c '.. %F' ..; echo "stat ..=$?"
    (cd -P .. && pwd; echo "cd -P ..=$?")
    # coreutils' tests/ls/removed-directory.sh: ls prints nothing, into `..`
    ls > ../out 2> ../err; echo "ls > ../out=$?"; cat ../out ../err; rm ../out ../err
    env -i /bin/bash -c 'stat -c "bash: %h" .' 2>/dev/null
  )
  "$py" "$ROOT/checks.py" "a/p$d"
done
"#
    )
}

#[test]
fn a_removed_cwd_is_a_directory_without_links_or_entries_as_on_tmpfs() {
    atoll_tests::require("python3");
    let out = assert_same_on_tmpfs(&["--servers", "2", "--distribute", "all"], &script(), true);
    assert!(
        out.contains("-- removed by another process\nstat ok (0, True)\n"),
        "{out}"
    );
    assert!(out.contains("getcwd err ENOENT"), "{out}");
}

#[test]
fn a_removed_cwd_on_one_server_is_as_on_tmpfs() {
    atoll_tests::require("python3");
    assert_same_on_tmpfs(&["--servers", "1"], &script(), true);
}

/// The instance's counters: inodes and open descriptions in use.
fn in_use(inst: &Booted) -> (u64, u64) {
    let st = inst.status();
    let n = |k: &str| st["limits"][k]["used"].as_u64().expect("a count");
    (n("inodes"), n("open_descriptions"))
}

/// Wait (bounded) until the instance's counters are `want`: a session's
/// end reaches the servers after its process is gone.
fn settles_to(inst: &Booted, want: (u64, u64)) -> (u64, u64) {
    let start = Instant::now();
    loop {
        let now = in_use(inst);
        if now == want || start.elapsed() > Duration::from_secs(20) {
            return now;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// How a process in a removed cwd goes: by ending, killed, or leaving
/// the directory for another.
#[derive(Clone, Copy, Debug)]
enum Leaves {
    Exit,
    Kill,
    Chdir,
}

/// A process sits in a cwd it removed: the directory's inode lives while
/// it does (with `ls -a` empty), and is freed once it leaves.
fn holds_until_it_leaves(opts: &[&str], how: Leaves) {
    let inst = Booted::new(opts);
    let base = in_use(&inst);
    let away = match how {
        Leaves::Chdir => "cd / &&",
        _ => "",
    };
    let script = format!(
        r#"echo $$; mkdir "$ROOT/d" && cd "$ROOT/d" && rmdir "$ROOT/d" && stat -c %h . &&
        ls -a && {away} echo ready && read x && echo done"#
    );
    let mut child = inst
        .command(&script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("atoll exec");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut next = || lines.next().expect("a line").expect("text");
    let pid: i32 = next().parse().expect("the shell's pid");
    assert_eq!(next(), "0", "{how:?}: no links");
    assert_eq!(next(), "ready", "{how:?}: nothing listed");
    let held = (base.0 + 1, base.1 + 1);
    match how {
        Leaves::Chdir => assert_eq!(settles_to(&inst, base), base, "released by cd"),
        _ => assert_eq!(in_use(&inst), held, "{how:?}: the cwd holds its directory"),
    }
    match how {
        Leaves::Kill => {
            // SAFETY: a plain kill(2) of the shell this test started.
            assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
        }
        _ => {
            let mut stdin = child.stdin.take().expect("stdin");
            stdin.write_all(b"\n").expect("write");
            assert_eq!(next(), "done");
        }
    }
    let _ = child.wait();
    assert_eq!(
        settles_to(&inst, base),
        base,
        "{how:?}: freed after it left"
    );
}

#[test]
fn a_removed_cwd_is_freed_when_its_process_exits() {
    holds_until_it_leaves(&["--servers", "2"], Leaves::Exit);
}

#[test]
fn a_removed_cwd_is_freed_when_its_process_is_killed() {
    holds_until_it_leaves(&["--servers", "2"], Leaves::Kill);
}

#[test]
fn a_removed_cwd_is_freed_when_its_process_leaves_it() {
    holds_until_it_leaves(&["--servers", "1"], Leaves::Chdir);
}

/// Directories on both servers, each the cwd of a process while removed:
/// nothing stays behind once the processes left.
#[test]
fn removed_cwds_on_every_server_leave_nothing_behind() {
    atoll_tests::require("python3");
    let inst = Booted::new(&["--servers", "2", "--distribute", "all"]);
    let base = in_use(&inst);
    let script = r#"cd "$ROOT" && mkdir a && for d in d0 d1 d2 d3; do
        mkdir "a/$d" && python3 -c "import os; print(os.stat('a/$d').st_ino >> 56)"
        (cd "a/$d" && rmdir "$ROOT/a/$d" && stat -c %h . && ls -a) || echo failed
    done
    rmdir a"#;
    let out = inst.command(script).output_bounded().expect("atoll exec");
    let text = String::from_utf8_lossy(&out.stdout);
    let owners: Vec<&str> = text.lines().step_by(2).collect();
    assert!(owners.contains(&"0") && owners.contains(&"1"), "{text}");
    assert!(text.lines().skip(1).step_by(2).all(|l| l == "0"), "{text}");
    assert_eq!(settles_to(&inst, base), base, "{text}");
}

/// The server that owns a removed cwd dies and is rebuilt from its
/// journal while the process sits there: the directory is still held
/// (no links, `..` its parent, nothing listed), and freed once the
/// process leaves.
#[test]
fn a_removed_cwd_survives_its_servers_rebuild() {
    let inst = Booted::new(&["--servers", "2"]);
    let base = in_use(&inst);
    let script = r#"mkdir -p "$ROOT/p/d" && cd "$ROOT/p/d" && rmdir "$ROOT/p/d" && echo ready &&
        read x && stat -c %h . && stat -c %F .. && ls -a && echo done"#;
    let mut child = inst
        .command(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("atoll exec");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut next = || lines.next().expect("a line").expect("text");
    assert_eq!(next(), "ready");
    assert!(inst.chaos(&["--kill", "server:0"]).status.success());
    let start = Instant::now();
    while inst.status()["names"]["fleets"][0]["members"][0]["restarts"] != 1 {
        assert!(start.elapsed() < Duration::from_secs(20), "no restart");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(in_use(&inst), (base.0 + 2, base.1 + 1), "p and the held d");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(b"\n").expect("write");
    let got: Vec<String> = (0..3).map(|_| next()).collect();
    assert_eq!(got, ["0", "directory", "done"]);
    let _ = child.wait();
    assert_eq!(
        settles_to(&inst, (base.0 + 1, base.1)),
        (base.0 + 1, base.1)
    );
}

/// A program started in a directory of the mount (`atoll exec --cwd`)
/// holds it from its start, before any `chdir` of its own.
#[test]
fn a_program_started_in_the_mount_holds_its_cwd() {
    let inst = Booted::new(&["--servers", "1"]);
    let base = in_use(&inst);
    let made = inst
        .command(r#"mkdir "$ROOT/x""#)
        .output_bounded()
        .expect("mkdir");
    assert!(made.status.success(), "{made:?}");
    let out = atoll_tests::atoll()
        .args(["exec", "--id", &inst.id, "--cwd", "/atoll/x", "--"])
        .args([
            "bash",
            "-c",
            "rmdir /atoll/x && stat -c %h . && ls -a && echo ls=$?",
        ])
        .output_bounded()
        .expect("atoll exec --cwd");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "0\nls=0\n");
    assert_eq!(settles_to(&inst, base), base);
}
