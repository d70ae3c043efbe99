//! Absent names in the lookup cache (client `dcache.rs`, server
//! `track.rs`): a lookup or open answered `ENOENT` is kept, and the
//! name's server tells the session before the reply to whatever makes the
//! name exist. Over three servers with every directory spread, pairs of
//! processes (twelve, on fewer cores) race: one stats and opens a missing
//! name again and again, the other makes it exist by each way there is
//! (create, rename onto it, link, `mkdir`, `symlink`, `mkfifo`, socket
//! bind, `O_TMPFILE` + `linkat`), says so through a pipe, and every stat
//! after that must see it; then it goes and must be gone. The transcript
//! is tmpfs's, in every island. Message counts show repeated misses are
//! answered without a message, and with `--without negative-lookups` they
//! are not. A server killed in the request that makes a cached-absent
//! name exist, and rebuilt from its journal, leaves no absence believed;
//! nor does a directory's swap between modes, which moves its names.

use std::time::{Duration, Instant};

use atoll_tests::{
    assert_same_on_tmpfs, compile_probe, output_within, run_in_atoll, served_ops, Booted, RUN_LIMIT,
};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

const SPREAD: [&str; 4] = ["--servers", "3", "--distribute", "all"];

#[test]
fn every_stat_after_an_acknowledged_creation_sees_the_name() {
    let dir = tempfile::tempdir().unwrap();
    let bin = compile_probe(dir.path(), "negcache", include_str!("negcache/probe.c"));
    let script = format!("mkdir $ROOT/d && {} race $ROOT/d", bin.display());
    for extra in [
        &[][..],
        &["--island", "incoherent"],
        &["--island", "copy"],
        &["--without", "negative-lookups"],
    ] {
        let opts: Vec<&str> = SPREAD
            .iter()
            .copied()
            .chain(extra.iter().copied())
            .collect();
        let out = assert_same_on_tmpfs(&opts, &script, true);
        assert_eq!(out, "race: passed\n", "{opts:?}");
    }
}

/// `Lookup` and `Open` requests served in a run of `probe count DIR n`
/// (`n` stats and `n` opens of one missing name), with `extra` options.
fn lookups(bin: &std::path::Path, n: u32, extra: &[&str]) -> u64 {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("stats.json");
    let j = json.to_string_lossy().to_string();
    let mut opts: Vec<&str> = SPREAD.to_vec();
    opts.extend_from_slice(&["--stats-json", &j]);
    opts.extend_from_slice(extra);
    let script = format!("mkdir $ROOT/d && {} count $ROOT/d {n}", bin.display());
    let out = run_in_atoll(&opts, &script);
    assert_eq!(
        text(&out.stdout),
        format!("count: {n} misses\n"),
        "{}",
        text(&out.stderr)
    );
    let (ops, _) = served_ops(&json);
    ops("Lookup") + ops("Open")
}

#[test]
fn repeated_misses_are_answered_without_a_message() {
    let dir = tempfile::tempdir().unwrap();
    let bin = compile_probe(dir.path(), "negcache", include_str!("negcache/probe.c"));
    // The same run with 1,000 more stats and opens of the missing name:
    // the difference is what those cost.
    let on = lookups(&bin, 1010, &[]) as i64 - lookups(&bin, 10, &[]) as i64;
    assert!(on <= 4, "2,000 misses more sent {on} more messages");
    let off_opts = ["--without", "negative-lookups"];
    let off = lookups(&bin, 1010, &off_opts) - lookups(&bin, 10, &off_opts);
    assert!(off >= 2000, "switched off, every miss asks: {off}");
    let none = ["--without", "dir-cache"];
    let off = lookups(&bin, 1010, &none) - lookups(&bin, 10, &none);
    assert!(
        off >= 2000,
        "without the lookup cache, every miss asks: {off}"
    );
}

/// Server 0 (the root directory's) is killed in its first `MakeNode`,
/// after the `mkdir` reached its journal and before the reply; the
/// successor replays it and answers. The process that cached `x` absent
/// from the lost incarnation must see the directory: a new incarnation
/// raises every channel's overflow flag, and its clients flush.
#[test]
fn an_absence_cached_from_a_lost_server_is_not_believed() {
    let dir = tempfile::tempdir().unwrap();
    let bin = compile_probe(dir.path(), "negcache", include_str!("negcache/probe.c"));
    let inst = Booted::with_env(&["--servers", "2"], &[("ATOLL_FAULT_KILL", "0:MakeNode:1")]);
    let out = output_within(
        inst.command(&format!("{} rebuild $ROOT", bin.display())),
        RUN_LIMIT,
    );
    assert_eq!(
        text(&out.stdout),
        "rebuild: passed\n",
        "{}",
        text(&out.stderr)
    );
    let started = Instant::now();
    while inst.status()["health"][0]["restarts"].as_u64().unwrap_or(0) < 1 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "server 0 was not killed and rebuilt"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// An absence is an answer for the credentials it was asked with and the
/// directory's permissions then: after `seteuid` to a user that may not
/// search the directory, and after another process's `chmod` takes search
/// permission away, the answer is `EACCES`, not a cached `ENOENT` (as on
/// tmpfs). Run as root (as the suite runs); over spread directories, where
/// the name's server does not own the directory.
#[test]
fn an_absence_never_hides_a_permission_error() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root to change users");
        return;
    }
    let script = r#"
        mkdir "$ROOT/d" "$ROOT/e" && chmod 700 "$ROOT/d" && chown 65534 "$ROOT/e" && cd "$ROOT" &&
        python3 - <<'PY'
import os
def probe(what, path):
    try:
        os.stat(path)
        print(what, "exists")
    except OSError as e:
        print(what, os.strerror(e.errno))
for _ in range(3):
    probe("root in d", "d/missing")
os.seteuid(65534)
probe("nobody in d", "d/missing")
for _ in range(3):
    probe("nobody in e", "e/missing")
pid = os.fork()
if pid == 0:
    os.chmod("e", 0)
    os._exit(0)
os.waitpid(pid, 0)
probe("nobody in e after chmod 0", "e/missing")
PY
    "#;
    for without in [&[][..], &["--without", "negative-lookups"][..]] {
        let opts: Vec<&str> = SPREAD
            .iter()
            .copied()
            .chain(without.iter().copied())
            .collect();
        let out = assert_same_on_tmpfs(&opts, script, true);
        assert!(out.contains("nobody in d Permission denied"), "{out}");
        assert!(out.contains("after chmod 0 Permission denied"), "{out}");
    }
}

/// A directory swapped between centralized and distributed (Hare §6.1.2)
/// moves its names between servers: absences cached before the swap must
/// not hide names created after it at their new servers, either way.
#[test]
fn absences_do_not_outlive_a_directory_swap() {
    let script = r#"
        cd "$ROOT" && mkdir d && python3 - <<'PY'
import os, subprocess
names = ["d/x%d" % i for i in range(24)]
def seen():
    return sum(os.path.exists(n) for n in names)
def child(act):
    pid = os.fork()
    if pid == 0:
        for n in names:
            os.close(os.open(n, os.O_CREAT | os.O_WRONLY)) if act == "create" else os.unlink(n)
        os._exit(0)
    os.waitpid(pid, 0)
for mode in ["1", "0"]:
    print("before", seen(), seen())
    r = subprocess.run(["setfattr", "-n", "user.atoll.distributed", "-v", mode, "d"])
    print("swap", mode, r.returncode)
    child("create")
    print("after creation", seen())
    child("unlink")
    print("after removal", seen())
PY
    "#;
    let out = run_in_atoll(&["--servers", "3"], script);
    assert_eq!(
        text(&out.stdout),
        "before 0 0\nswap 1 0\nafter creation 24\nafter removal 0\n\
         before 0 0\nswap 0 0\nafter creation 24\nafter removal 0\n",
        "{}",
        text(&out.stderr)
    );
}
