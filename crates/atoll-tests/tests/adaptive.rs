//! Adaptive directories (Hare §6.1.2; `fs/adapt.rs`): a directory swapped
//! between centralized and distributed while programs create, rename,
//! unlink and list in it loses, repeats and miscounts nothing, and no
//! process acts on a stale lookup-cache entry.

use atoll_tests::OutputBounded as _;
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
/// `wW-I`, rename every third to `wW-I-r`, unlink every fifth, make and
/// remove a subdirectory every seventh, and every eleventh make `sI` in its
/// own subdirectory `wW-dir` (which stays). Each step that succeeded goes
/// to the log, each failure too. After each round it checks that no lookup
/// it makes acts on a stale cache entry while the directory swaps: one of
/// its own names it knows exists is found and opens, one it removed is
/// `ENOENT`; and it reads another worker's new log lines, looking up the
/// names that worker made (so they sit in this process's lookup cache) and
/// checking that each it removed is `ENOENT` here too (names are never
/// reused, so "gone" stays true). A violation is a `STALE` line.
const WORKER: &str = r#"
use strict;
my ($w, $dir, $log, $stop, $workers, $logs) = @ARGV;
open(my $L, '>', $log) or die "log: $!";
$L->autoflush(1);
sub step { my ($ok, $line) = @_; print $L ($ok ? "" : "FAIL "), $line, ($ok ? "" : " $!"), "\n"; $ok }
# What this process knows: its own names alive and gone, and the names the
# other workers' logs say they removed (names are never reused).
my (@live, %live, @gone, %tail);
sub born { push @live, $_[0]; $live{$_[0]} = 1 }
sub died { delete $live{$_[0]}; push @gone, $_[0] }
sub stale { print $L "STALE @_\n" }
# Its own names: one it knows exists must be found (and open), one it
# removed must not.
sub check_own {
    @live = grep { $live{$_} } @live if @live > 2 * keys %live;
    if (@live) {
        my $n = $live[int(rand(@live))];
        if ($live{$n}) {
            if ($n =~ /-dir$/) { -d "$dir/$n" or stale("missing $n $!") }
            else { open(my $f, '<', "$dir/$n") or stale("missing $n $!") }
        }
    }
    if (@gone) {
        my $n = $gone[int(rand(@gone))];
        stale("present $n") if -e "$dir/$n" || $! != 2;
    }
}
# Another worker's new log lines: look its new names up (so this process
# caches them), and check that each it removed is gone here too.
sub check_other {
    my $o = shift;
    unless ($tail{$o}) {
        open(my $f, '<', "$logs/w$o.log") or return;
        $tail{$o} = $f;
    }
    my $fh = $tail{$o};
    while (1) {
        my $at = tell($fh);
        my $line = <$fh>;
        last unless defined $line;
        if ($line !~ /\n$/) { seek($fh, $at, 0); last }
        my @f = split ' ', $line;
        if ($f[0] eq 'C') { my @st = stat("$dir/$f[1]") }
        elsif ($f[0] eq 'U' || $f[0] eq 'R') {
            stale("present w$o:$f[1]") if -e "$dir/$f[1]" || $! != 2;
        }
    }
    seek($fh, tell($fh), 0); # clear EOF for the next read
}
step(mkdir("$dir/w$w-dir"), "C w$w-dir") and born("w$w-dir");
for (my $i = 0; $i < 40 || (! -e $stop && $i < 600); $i++) {
    my $name = "w$w-$i";
    step(open(my $f, '>', "$dir/$name"), "C $name") or next;
    close $f;
    born($name);
    if ($i % 3 == 0) {
        step(rename("$dir/$name", "$dir/$name-r"), "R $name $name-r") or next;
        died($name);
        $name = "$name-r";
        born($name);
    }
    if ($i % 5 == 0) {
        step(unlink("$dir/$name"), "U $name") and died($name);
    }
    if ($i % 7 == 0) {
        step(mkdir("$dir/w$w-$i-d"), "C w$w-$i-d") and step(rmdir("$dir/w$w-$i-d"), "U w$w-$i-d")
            and died("w$w-$i-d");
    }
    if ($i % 11 == 0) {
        step(mkdir("$dir/w$w-dir/s$i"), "N w$w-dir/s$i");
    }
    check_own();
    check_other(($w + 1 + $i % ($workers - 1)) % $workers);
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

/// Names the worker's log says survive in the directory, and those made in
/// its own subdirectory, checking it ran cleanly.
fn survivors(log: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let (mut live, mut nested) = (BTreeSet::new(), BTreeSet::new());
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
            "N" => assert!(nested.insert(f[1].to_string()), "{line}"),
            "END" => {}
            "STALE" => panic!("a lookup acted on a stale entry: {line}"),
            _ => panic!("a worker's step failed: {line}"),
        }
    }
    (live, nested)
}

fn run(inst: &Booted, script: &str) -> String {
    let out = inst.command(script).output_bounded().expect("atoll exec");
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
            let script = format!(
                "exec perl {} {w} $ROOT/d {log} {stop} {WORKERS} {}",
                host("worker.pl"),
                tmp.path().display()
            );
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
                got=$(getfattr --absolute-names --only-values -n user.atoll.distributed $ROOT/d)
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

    let (mut expected, mut nested) = (BTreeSet::new(), BTreeSet::new());
    for w in 0..WORKERS {
        let log = std::fs::read_to_string(host(&format!("w{w}.log"))).unwrap();
        let (live, inner) = survivors(&log);
        expected.extend(live);
        nested.extend(inner);
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
        let name = l.rsplit(' ').next().unwrap();
        let inner = nested
            .iter()
            .filter(|n| n.starts_with(&format!("{name}/")))
            .count();
        let want = match l.contains("directory") {
            true => format!("{} ", 2 + inner),
            false => "1 ".to_string(),
        };
        assert!(l.starts_with(&want), "link count: {l}, want {want}");
    }
    // What each worker made in its own subdirectory, listed once.
    let inner = run(
        &inst,
        "cd $ROOT/d && for d in *-dir; do ls -A $d | sed \"s|^|$d/|\"; done",
    );
    let inner_names: Vec<String> = inner.lines().map(str::to_string).collect();
    let inner_set: BTreeSet<String> = inner_names.iter().cloned().collect();
    assert_eq!(inner_names.len(), inner_set.len(), "{inner}");
    assert_eq!(inner_set, nested, "subdirectories' contents");
    let subdirs = expected.iter().filter(|n| n.ends_with("-dir")).count() as u32;
    assert_eq!(dir_links, 2 + subdirs, "the directory's link count");
    assert_eq!(
        run(
            &inst,
            "getfattr --absolute-names --only-values -n user.atoll.distributed $ROOT/d"
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
        .output_bounded()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains(&format!("distributed now: {ino}")), "{text}");
    // Per directory: its path, inode, mode now and mode changes.
    let line = format!("/atoll/d (inode {ino}, home s");
    let line = text.lines().find(|l| l.contains(&line));
    let line = line.unwrap_or_else(|| panic!("no line for the directory:\n{text}"));
    let changes = 2 * SWAPS + 1;
    assert!(
        line.ends_with(&format!("): distributed, {changes} mode changes")),
        "{line}"
    );
    assert_eq!(
        swapped_dirs(&inst),
        vec![(
            "/atoll/d".to_string(),
            ino,
            "distributed".to_string(),
            changes as u64
        )]
    );
    // Everything goes: the three-phase rmdir finds all shards.
    run(&inst, "rm -r $ROOT/d && test ! -e $ROOT/d");
}

/// `atoll status --json`'s `swapped_dirs`: `(path, ino, mode, swaps)`.
fn swapped_dirs(inst: &Booted) -> Vec<(String, u64, String, u64)> {
    let st = inst.status();
    let dirs = st["swapped_dirs"].as_array().expect("swapped_dirs");
    dirs.iter()
        .map(|d| {
            (
                d["path"].as_str().unwrap().to_string(),
                d["ino"].as_u64().unwrap(),
                d["mode"].as_str().unwrap().to_string(),
                d["swaps"].as_u64().unwrap(),
            )
        })
        .collect()
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

/// A hot worker: until `$STOP` exists (at least 200 rounds, at most
/// 20000), create `hW-I` and unlink every tenth, logged as the workers
/// above log.
const HOT: &str = r#"
use strict;
my ($w, $dir, $log, $stop) = @ARGV;
open(my $L, '>', $log) or die "log: $!";
$L->autoflush(1);
sub step { my ($ok, $line) = @_; print $L ($ok ? "" : "FAIL "), $line, ($ok ? "" : " $!"), "\n"; $ok }
for (my $i = 0; $i < 200 || (! -e $stop && $i < 20000); $i++) {
    step(open(my $f, '>', "$dir/h$w-$i"), "C h$w-$i") or next;
    close $f;
    step(unlink("$dir/h$w-$i"), "U h$w-$i") if $i % 10 == 0;
}
print $L "END\n";
"#;

/// The trickle: one create and unlink every 50 ms until `$STOP` exists, so
/// that requests keep reaching the directory's home server.
const TRICKLE: &str = r#"
use strict;
my ($dir, $log, $stop) = @ARGV;
open(my $L, '>', $log) or die "log: $!";
$L->autoflush(1);
sub step { my ($ok, $line) = @_; print $L ($ok ? "" : "FAIL "), $line, ($ok ? "" : " $!"), "\n"; $ok }
for (my $i = 0; ! -e $stop; $i++) {
    if (step(open(my $f, '>', "$dir/t$i"), "C t$i")) {
        close $f;
        step(unlink("$dir/t$i"), "U t$i");
    }
    select(undef, undef, undef, 0.05);
}
print $L "END\n";
"#;

fn mode_of(inst: &Booted, dir: &str) -> String {
    run(
        inst,
        &format!("getfattr --absolute-names --only-values -n user.atoll.distributed {dir}"),
    )
}

/// Poll `dir`'s mode until it is `want`; `give_up` says whether waiting
/// any longer is pointless (the load it needs has ended).
fn await_mode(inst: &Booted, dir: &str, want: &str, mut give_up: impl FnMut() -> bool) {
    loop {
        if mode_of(inst, dir) == want {
            return;
        }
        assert!(!give_up(), "{dir} never became {want}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The policy end to end (`--adaptive-dirs on`, `fs/adapt/policy.rs`):
/// four processes creating in one directory make it hot — contended and
/// large — and one of them is asked to swap it to distributed; once the
/// load stops and only a trickle of requests reaches it, its windows count
/// as cool and the trickle's process is asked to swap it back. The
/// thresholds are lowered through `ATOLL_ADAPT_POLICY` (a window of 200
/// requests from 2 processes on 64 entries, and no need of a spare CPU,
/// which the test machine's two busy CPUs would not have), so a small
/// machine gets there; the cool side keeps the defaults (20 quiet windows of 100 ms, 2 s
/// in a mode). The policy looks at a directory only when a request about
/// it arrives: without the trickle it would stay distributed.
#[test]
fn policy_spreads_a_hot_directory_and_gathers_it_again_once_cool() {
    require("getfattr");
    require("perl");
    let inst = Booted::with_env(
        &[
            "--servers",
            "3",
            "--memory",
            "128M",
            "--adaptive-dirs",
            "on",
        ],
        &[(
            "ATOLL_ADAPT_POLICY",
            "hot_ops=200,hot_sessions=2,min_entries=64,spare_cpu=0",
        )],
    );
    let tmp = tempfile::tempdir().expect("tempdir");
    let host = |name: &str| tmp.path().join(name).to_string_lossy().into_owned();
    std::fs::write(host("hot.pl"), HOT).unwrap();
    std::fs::write(host("trickle.pl"), TRICKLE).unwrap();
    run(&inst, "mkdir $ROOT/d");
    let dir = format!("{}/d", atoll_tests::MOUNT);
    assert_eq!(mode_of(&inst, &dir), "0", "made centralized");

    // Hot: four creating processes until the policy has spread it.
    let stop = host("stop");
    let mut hot: Vec<Group> = (0..4)
        .map(|w| {
            let log = host(&format!("h{w}.log"));
            spawn(
                &inst,
                &format!("exec perl {} {w} $ROOT/d {log} {stop}", host("hot.pl")),
            )
        })
        .collect();
    await_mode(&inst, &dir, "1", || {
        hot.iter_mut()
            .all(|g| g.0.try_wait().expect("wait").is_some())
    });
    std::fs::write(&stop, b"").unwrap();
    for (w, g) in hot.iter_mut().enumerate() {
        g.wait_ok(&format!("hot worker {w}"), Duration::from_secs(120));
    }
    let mut expected = BTreeSet::new();
    for w in 0..4 {
        let log = std::fs::read_to_string(host(&format!("h{w}.log"))).unwrap();
        expected.extend(survivors(&log).0);
    }
    let listed = |inst: &Booted| -> Vec<String> {
        let ls = run(inst, "ls -A $ROOT/d");
        ls.lines().map(str::to_string).collect()
    };
    let names = listed(&inst);
    assert_eq!(names.len(), expected.len(), "a name listed twice");
    assert_eq!(names.into_iter().collect::<BTreeSet<_>>(), expected);
    let home_swaps = |inst: &Booted| -> u64 {
        let st = inst.status();
        let servers = st["servers"].as_array().expect("servers").clone();
        servers
            .iter()
            .map(|s| s["mode_swaps"].as_u64().unwrap())
            .sum()
    };
    assert_eq!(home_swaps(&inst), 1, "spread once");

    // Cool: a trickle of requests, until the policy has gathered it.
    let stop2 = host("stop2");
    let mut trickle = spawn(
        &inst,
        &format!(
            "exec perl {} $ROOT/d {} {stop2}",
            host("trickle.pl"),
            host("trickle.log")
        ),
    );
    let started = Instant::now();
    await_mode(&inst, &dir, "0", || {
        trickle.0.try_wait().expect("wait").is_some()
            || started.elapsed() > Duration::from_secs(120)
    });
    std::fs::write(&stop2, b"").unwrap();
    trickle.wait_ok("the trickle", Duration::from_secs(60));
    let log = std::fs::read_to_string(host("trickle.log")).unwrap();
    assert!(survivors(&log).0.is_empty(), "the trickle leaves nothing");
    let names = listed(&inst);
    assert_eq!(names.len(), expected.len(), "a name listed twice");
    assert_eq!(names.into_iter().collect::<BTreeSet<_>>(), expected);
    assert_eq!(home_swaps(&inst), 2, "spread once and gathered once");
    let ino: u64 = run(&inst, "stat -c %i $ROOT/d").trim().parse().unwrap();
    assert_eq!(
        swapped_dirs(&inst),
        vec![("/atoll/d".to_string(), ino, "centralized".to_string(), 2)]
    );
    let links = run(&inst, "stat -c %h $ROOT/d");
    assert_eq!(links.trim(), "2");
}
