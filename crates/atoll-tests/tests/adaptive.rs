//! Adaptive directories (Hare §6.1.2; `fs/adapt.rs`): a directory swapped
//! between centralized and distributed while programs create, rename,
//! unlink and list in it loses, repeats and miscounts nothing.

use std::collections::BTreeSet;
use std::os::unix::process::CommandExt;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use atoll_tests::{require, Booted};

const WORKERS: usize = 8;
const SWAPS: usize = 20;

/// A process in a group of its own, killed with its whole group when the
/// test ends however it ends (unless it was seen to exit: its group id
/// may be reused).
struct Group(Child, bool);

impl Group {
    fn wait_ok(&mut self, what: &str, limit: Duration) {
        let start = Instant::now();
        loop {
            if let Some(status) = self.0.try_wait().expect("wait") {
                self.1 = true;
                assert!(status.success(), "{what} failed: {status}");
                return;
            }
            assert!(
                start.elapsed() < limit,
                "{what} did not finish in {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if !self.1 {
            // SAFETY: kill(2) with a negative pid signals the process
            // group this test made for the child; no memory is touched.
            unsafe { libc::kill(-(self.0.id() as i32), libc::SIGKILL) };
            let _ = self.0.wait();
        }
    }
}

fn spawn(inst: &Booted, script: &str) -> Group {
    let mut cmd = inst.command(script);
    cmd.process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    Group(cmd.spawn().expect("spawn atoll exec"), false)
}

/// One worker: until `$STOP` exists (at least 40 rounds, at most 600), create
/// `wW-I`, rename every third to `wW-I-r`, unlink every fifth, and make and
/// remove a subdirectory every seventh; its own subdirectory `wW-dir`
/// stays. Each step that succeeded goes to the log, each failure too.
const WORKER: &str = r#"
use strict;
my ($w, $dir, $log, $stop) = @ARGV;
open(my $L, '>', $log) or die "log: $!";
$L->autoflush(1);
sub step { my ($ok, $line) = @_; print $L ($ok ? "" : "FAIL "), $line, ($ok ? "" : " $!"), "\n"; $ok }
step(mkdir("$dir/w$w-dir"), "C w$w-dir");
for (my $i = 0; $i < 40 || (! -e $stop && $i < 600); $i++) {
    my $name = "w$w-$i";
    step(open(my $f, '>', "$dir/$name"), "C $name") or next;
    close $f;
    if ($i % 3 == 0) {
        step(rename("$dir/$name", "$dir/$name-r"), "R $name $name-r") or next;
        $name = "$name-r";
    }
    if ($i % 5 == 0) {
        step(unlink("$dir/$name"), "U $name");
    }
    if ($i % 7 == 0) {
        step(mkdir("$dir/w$w-$i-d"), "C w$w-$i-d") and step(rmdir("$dir/w$w-$i-d"), "U w$w-$i-d");
    }
}
print $L "END\n";
"#;

/// The lister: full listings (`readdir`) until `$STOP` exists; a name seen
/// twice in one listing is logged.
const LISTER: &str = r#"
use strict;
my ($dir, $log, $stop) = @ARGV;
open(my $L, '>', $log) or die "log: $!";
$L->autoflush(1);
my $n = 0;
until (-e $stop) {
    opendir(my $d, $dir) or do { print $L "FAIL opendir $!\n"; next };
    my %seen;
    my $prev = telldir($d);
    while (defined(my $e = readdir($d))) {
        my $at = telldir($d);
        print $L "DUP $e $seen{$e} $prev\n" if $seen{$e};
        $seen{$e} = $prev;
        $prev = $at;
    }
    closedir($d);
    $n++;
}
print $L "LISTINGS $n\n";
"#;

/// Names the worker's log says survive, checking it ran cleanly.
fn survivors(log: &str) -> BTreeSet<String> {
    let mut live = BTreeSet::new();
    assert!(log.ends_with("END\n"), "worker did not finish:\n{log}");
    for line in log.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        match f[0] {
            "C" => assert!(live.insert(f[1].to_string()), "{line}"),
            "R" => {
                assert!(live.remove(f[1]), "{line}");
                live.insert(f[2].to_string());
            }
            "U" => assert!(live.remove(f[1]), "{line}"),
            "END" => {}
            _ => panic!("a worker's step failed: {line}"),
        }
    }
    live
}

fn run(inst: &Booted, script: &str) -> String {
    let out = inst.command(script).output().expect("atoll exec");
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn directory_swapped_forty_times_under_load_keeps_every_name_once() {
    require("setfattr");
    require("getfattr");
    require("perl");
    let inst = Booted::new(&["--servers", "3", "--memory", "128M"]);
    let tmp = tempfile::tempdir().expect("tempdir");
    let host = |name: &str| tmp.path().join(name).to_string_lossy().into_owned();
    std::fs::write(host("worker.pl"), WORKER).unwrap();
    std::fs::write(host("lister.pl"), LISTER).unwrap();
    let stop = host("stop");
    run(&inst, "mkdir $ROOT/d");

    let mut workers: Vec<Group> = (0..WORKERS)
        .map(|w| {
            let log = host(&format!("w{w}.log"));
            let script = format!("exec perl {} {w} $ROOT/d {log} {stop}", host("worker.pl"));
            spawn(&inst, &script)
        })
        .collect();
    let mut lister = spawn(
        &inst,
        &format!(
            "exec perl {} $ROOT/d {} {stop}",
            host("lister.pl"),
            host("lister.log")
        ),
    );
    // The swapper: 20 times distributed and back, each checked with getfattr.
    let swapper = format!(
        r#"set -e
        for i in $(seq {SWAPS}); do
            for m in 1 0; do
                setfattr -n user.atoll.distributed -v $m $ROOT/d
                got=$(getfattr --only-values -n user.atoll.distributed $ROOT/d)
                [ "$got" = "$m" ] || {{ echo "mode $got after setting $m" >&2; exit 1; }}
                sleep 0.02
            done
        done"#
    );
    let mut swaps = spawn(&inst, &swapper);
    swaps.wait_ok("the swapper", Duration::from_secs(240));
    std::fs::write(&stop, b"").unwrap();
    for (w, g) in workers.iter_mut().enumerate() {
        g.wait_ok(&format!("worker {w}"), Duration::from_secs(120));
    }
    lister.wait_ok("the lister", Duration::from_secs(60));

    let mut expected = BTreeSet::new();
    for w in 0..WORKERS {
        let log = std::fs::read_to_string(host(&format!("w{w}.log"))).unwrap();
        expected.extend(survivors(&log));
    }
    let listed = std::fs::read_to_string(host("lister.log")).unwrap();
    assert!(
        !listed.contains("DUP") && !listed.contains("FAIL"),
        "a listing during the swaps saw a name twice:\n{listed}"
    );
    assert!(listed.contains("LISTINGS"), "{listed}");

    // Every survivor listed once, nothing else; link counts right.
    let ls = run(&inst, "ls -A $ROOT/d");
    let names: Vec<&str> = ls.lines().collect();
    let unique: BTreeSet<String> = names.iter().map(|s| s.to_string()).collect();
    assert_eq!(names.len(), unique.len(), "ls repeats a name:\n{ls}");
    assert_eq!(
        unique, expected,
        "ls (left) against the workers' logs (right)"
    );
    let stat = run(
        &inst,
        "cd $ROOT/d && stat -c '%h %F %n' * && stat -c '%h' .",
    );
    let mut lines: Vec<&str> = stat.lines().collect();
    let dir_links: u32 = lines.pop().unwrap().trim().parse().unwrap();
    for l in &lines {
        let want = if l.contains("directory") { "2 " } else { "1 " };
        assert!(l.starts_with(want), "link count: {l}");
    }
    let subdirs = expected.iter().filter(|n| n.ends_with("-dir")).count() as u32;
    assert_eq!(dir_links, 2 + subdirs, "the directory's link count");
    assert_eq!(
        run(
            &inst,
            "getfattr --only-values -n user.atoll.distributed $ROOT/d"
        ),
        "0"
    );

    // Status: the home server counts the swaps; nothing is left distributed.
    let st = inst.status();
    let servers = st["servers"].as_array().expect("servers");
    let swapped: u64 = servers
        .iter()
        .map(|s| s["mode_swaps"].as_u64().unwrap())
        .sum();
    assert_eq!(swapped, 2 * SWAPS as u64, "{st}");
    assert!(servers
        .iter()
        .all(|s| s["adapted_dirs"].as_array().unwrap().is_empty()));
    run(&inst, "setfattr -n user.atoll.distributed -v 1 $ROOT/d");
    let st = inst.status();
    let adapted: Vec<u64> = st["servers"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["adapted_dirs"].as_array().unwrap().clone())
        .map(|v| v.as_u64().unwrap())
        .collect();
    let ino: u64 = run(&inst, "stat -c %i $ROOT/d").trim().parse().unwrap();
    assert_eq!(adapted, vec![ino]);
    let text = atoll_tests::atoll()
        .args(["status", "--id", &inst.id])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains(&format!("distributed now: {ino}")), "{text}");
    // Everything goes: the three-phase rmdir finds all shards.
    run(&inst, "rm -r $ROOT/d && test ! -e $ROOT/d");
}

/// A directory swapped to distributed on one server (where all its entries
/// stay on that server) is removed as any: `rm -r` of a tree, `rmdir` of a
/// non-empty one (`ENOTEMPTY`), then of the emptied one, as on tmpfs.
#[test]
fn a_swapped_directory_on_one_server_is_removed_as_any() {
    atoll_tests::require("setfattr");
    let script = r#"
        cd "$ROOT"
        mkdir d e
        setfattr -n user.atoll.distributed -v 1 d e 2>/dev/null || true
        touch d/a e/x && mkdir d/s
        rm -r d; echo "rm -r: $?"
        rmdir e 2>/dev/null; echo "rmdir non-empty: $?"
        rm e/x && rmdir e; echo "rmdir: $?"
        ls
    "#;
    for opts in [&["--servers", "1"][..], &["--split", "--servers", "1"]] {
        let out = atoll_tests::run_in_atoll(opts, script);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "rm -r: 0\nrmdir non-empty: 1\nrmdir: 0\n",
            "{opts:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
