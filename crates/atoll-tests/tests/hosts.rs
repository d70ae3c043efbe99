//! One image across hosts (`atoll node`, fos §3.2, §4.2): three network
//! namespaces on a bridge stand for three hosts (`atoll_bench::hosts`),
//! one `atoll node` in each; the first runs the instance and two file
//! servers, each other node one more member of the fleet (the default,
//! `--servers-here 1`), and the other two reach the first's through their
//! proxies over TCP. Tests of the proxies' path to the first node's
//! servers use [`first_node_servers`] (`--servers-here 0`). Skipped, with
//! a message, only where network namespaces cannot be made (not root).

use atoll_tests::OutputBounded as _;
use std::process::Output;
use std::time::{Duration, Instant};

use atoll_bench::hosts::Cluster;
use atoll_tests::{atoll_bin, normalized, output_within, run_on_host};

const LIMIT: Duration = Duration::from_secs(120);

#[path = "hosts/ahead.rs"]
mod ahead;
#[path = "hosts/cache.rs"]
mod cache;
#[path = "hosts/datacalls.rs"]
mod datacalls;
#[path = "hosts/direct.rs"]
mod direct;
#[path = "hosts/members.rs"]
mod members;
#[path = "hosts/spawn.rs"]
mod spawn;

/// Three hosts with their nodes up, or `None` (skip) without namespaces.
fn cluster() -> Option<Cluster> {
    cluster_with(&[])
}

/// Three hosts whose file servers are all on the first
/// (`--servers-here 0`): every file a program of another host makes or
/// reads goes through the proxies.
fn first_node_servers() -> Option<Cluster> {
    cluster_with(&["--servers-here", "0"])
}

/// [`cluster`], the first node also given `opts`.
fn cluster_with(opts: &[&str]) -> Option<Cluster> {
    let mut c = match Cluster::new(3) {
        Ok(c) => c,
        Err(why) => {
            eprintln!("skipped: cannot make network namespaces ({why})");
            return None;
        }
    };
    let mut all = vec!["--servers", "2", "--memory", "128M"];
    all.extend_from_slice(opts);
    c.start_nodes(&atoll_bin(), &all).expect("nodes start");
    Some(c)
}

fn on(c: &Cluster, host: usize, script: &str) -> Output {
    let out = output_within(c.exec(&atoll_bin(), host, script), LIMIT);
    assert!(
        out.status.success(),
        "host {host}: {script}\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_file_written_on_one_host_is_read_on_another() {
    let Some(c) = cluster() else { return };
    // A (the servers' host) writes, C reads; C writes, B reads.
    on(
        &c,
        0,
        "seq 1 20000 > $ROOT/from-a && echo tail > $ROOT/small",
    );
    let got = on(
        &c,
        2,
        "md5sum < $ROOT/from-a; wc -c < $ROOT/from-a; cat $ROOT/small",
    );
    let want = std::process::Command::new("bash")
        .args(["-c", "seq 1 20000 | md5sum; seq 1 20000 | wc -c; echo tail"])
        .output_bounded()
        .unwrap();
    assert_eq!(text(&got), text(&want));
    on(
        &c,
        2,
        "head -c 300000 /dev/urandom > $ROOT/from-c && md5sum < $ROOT/from-c > $ROOT/sum-c",
    );
    let b = on(&c, 1, "md5sum < $ROOT/from-c; cat $ROOT/sum-c");
    let lines: Vec<&str> = std::str::from_utf8(&b.stdout).unwrap().lines().collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0], lines[1], "C's bytes read on B differ");
}

/// Builds a tree under `$ROOT/w` with `mkdir -p`, `cp -r` and `mv`
/// (forks, execs and pipes on the way).
const TREE: &str = r#"
set -e
mkdir -p $ROOT/w/src/a/b/c $ROOT/w/src/d
for i in 1 2 3 4 5; do seq 1 $((i * 700)) > $ROOT/w/src/a/f$i; done
printf 'x%.0s' $(seq 1 9000) > $ROOT/w/src/a/b/c/long
ln -s ../a/f1 $ROOT/w/src/d/link
cp -r $ROOT/w/src $ROOT/w/copy
mv $ROOT/w/copy/a $ROOT/w/copy/moved
mv $ROOT/w/src/d $ROOT/w/d2
mkdir -p $ROOT/w/copy/moved/b/new/deeper
"#;

/// Lists the tree under `$ROOT/w`: names, types, sizes, link targets and
/// contents' sums, in a stable order.
const LIST: &str = r#"
cd $ROOT/w && find . | sort | while read -r p; do
  if [ -L "$p" ]; then echo "$p -> $(readlink "$p")";
  elif [ -d "$p" ]; then echo "$p/";
  else echo "$p $(stat -c %s "$p") $(md5sum < "$p")"; fi
done
"#;

#[test]
fn a_tree_made_on_one_host_is_seen_identically_from_another_and_as_on_tmpfs() {
    let Some(c) = cluster() else { return };
    on(&c, 1, TREE);
    let seen_from_a = on(&c, 0, LIST);
    let seen_from_c = on(&c, 2, LIST);
    let (dir, host) = run_on_host(&format!("{TREE}\n{LIST}"));
    assert!(
        host.status.success(),
        "{}",
        String::from_utf8_lossy(&host.stderr)
    );
    let (_, want, _) = normalized(&host, dir.path());
    assert!(want.lines().count() > 15, "{want}");
    assert_eq!(text(&seen_from_a), want, "host A");
    assert_eq!(text(&seen_from_c), want, "host C");
}

/// With every file server on the first node, nothing of the image dies
/// with another node (with members there, its files do:
/// `members::a_killed_host_fails_calls_on_its_members_names_with_eio_and_the_rest_goes_on`).
#[test]
fn a_killed_node_fails_its_calls_with_eio_quickly_the_others_go_on_and_it_rejoins() {
    let Some(mut c) = first_node_servers() else {
        return;
    };
    on(&c, 2, "echo before > $ROOT/c-was-here");
    // A program on C that keeps making calls until one fails (builtins
    // only: a program started after the node died would find no instance
    // to attach to and see the host's file system instead).
    let busy = busy_on(&c, 2, "echo x > $ROOT/c-busy && read -r l < $ROOT/c-busy");
    c.kill(2);
    fails_with_eio(busy, Instant::now(), "a call through the killed node hangs");
    // A and B keep working and still see what C wrote before it died.
    on(&c, 1, "echo after > $ROOT/b-after");
    let a = on(&c, 0, "cat $ROOT/c-was-here $ROOT/b-after");
    assert_eq!(text(&a), "before\nafter\n");
    let b = on(&c, 1, "ls $ROOT | sort");
    assert!(text(&b).contains("c-was-here\n"), "{}", text(&b));
    // C's host comes back: its node rejoins the image (a new link to the
    // first node) and its programs see everything, old and new.
    c.restart_node(&atoll_bin(), 2).expect("node C rejoins");
    let back = on(
        &c,
        2,
        "cat $ROOT/c-was-here $ROOT/b-after && echo again > $ROOT/c-again",
    );
    assert_eq!(text(&back), "before\nafter\n");
    assert_eq!(text(&on(&c, 0, "cat $ROOT/c-again")), "again\n");
}

#[test]
fn when_the_first_node_dies_the_other_hosts_fail_with_eio_and_their_nodes_exit() {
    let Some(mut c) = cluster() else { return };
    let busy = reader_until_failure(&c, 1);
    c.kill(0);
    fails_with_eio(
        busy,
        Instant::now(),
        "a call hangs after the servers' host died",
    );
    // Both other nodes notice and exit with an error, within the bound.
    for k in [1, 2] {
        let status = c.wait_node(k, HANG);
        assert!(status.is_some_and(|s| !s.success()), "node {k}: {status:?}");
    }
}

#[test]
fn a_program_built_with_make_on_one_host_runs_on_another() {
    let Some(c) = cluster() else { return };
    let build = format!(
        "cd $ROOT && {} make -j2 -s && ./prog",
        atoll_tests::c_project_script(8)
    );
    let b = on(&c, 1, &build);
    assert_eq!(text(&b), "sum 36\n");
    let a = on(&c, 0, "$ROOT/proj/prog && ls $ROOT/proj | grep -c '\\.o$'");
    assert_eq!(text(&a), "sum 36\n9\n");
}

/// fos §4.2 spawning for a real build: `make -j4` of a C project in the
/// mount with every exec placed round robin over the three nodes
/// (`ATOLL_NODE_PLACEMENT`). Its processes run on every host (each compile
/// logs its network namespace), and its objects, program and output are
/// the bytes of the same build in a host directory.
#[test]
fn make_j4_with_its_compiles_placed_on_every_host_matches_a_host_build() {
    let Some(c) = cluster() else { return };
    let tools = tempfile::tempdir().expect("tempdir");
    let cc = tools.path().join("cc-logged");
    std::fs::write(
        &cc,
        "#!/bin/sh\nreadlink /proc/self/ns/net >> hosts.log\nexec cc \"$@\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&cc, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let build = format!(
        "{} make -j4 -s CC={} && ./prog && md5sum *.o prog",
        atoll_tests::c_project_script(12),
        cc.display()
    );
    let (_dir, host) = run_on_host(&format!("cd $ROOT && {build}"));
    assert!(host.status.success(), "host build: {}", text(&host));
    let placed = on(
        &c,
        0,
        &format!("export ATOLL_NODE_PLACEMENT=round-robin; cd $ROOT && {build} && sort -u hosts.log | wc -l >&2"),
    );
    assert_eq!(text(&placed), text(&host));
    assert_eq!(
        String::from_utf8_lossy(&placed.stderr).trim(),
        "3",
        "compiles ran on every host"
    );
}

/// Hare's rename and rmdir races (`hare.rs`) with the racing processes on
/// different hosts: the racing `rmdir`s and `rename`s are placed round
/// robin over the nodes, so each runs on whichever host its turn gives.
/// Each race has exactly one winner, losers get Linux's errors, nothing is
/// lost or left behind, and the tree ends as the same script leaves it in a
/// host directory.
#[test]
fn rename_and_rmdir_races_across_hosts_keep_hare_s_invariants() {
    let Some(c) = cluster() else { return };
    let script = r#"
cd "$ROOT"
R() { ATOLL_NODE_PLACEMENT=round-robin "$@"; }
mkdir -p d/src/sub e x y
for i in 1 2 3 4 5 6; do echo $i > d/src/f$i; echo $i > d/src/sub/g$i; done
for round in $(seq 1 8); do
  mkdir d/gone
  for p in 1 2 3 4 5 6; do (R rmdir d/gone 2>e/$p && echo won > d/won$round.$p) & done
  wait
  ls d | grep -c "^won$round\."
  [ -e d/gone ] && echo "gone survived"
  cat e/* | grep -v 'No such file or directory' | sed 's/^/BAD /'
done
rm d/won*
ren() { R python3 -I -S -c 'import os, sys
try:
    os.rename(sys.argv[1], sys.argv[2]); print("won")
except OSError as e:
    print(e.strerror)' "$1" "$2"; }
for round in $(seq 1 8); do
  ren d/src x/a$round > r1 & ren d/src y/b$round > r2 & wait
  cat r1 r2 | sort | uniq -c | sed 's/^ *//'
  ls -d x/a$round y/b$round 2>/dev/null | wc -l
  mv x/a$round d/src 2>/dev/null || mv y/b$round d/src
  [ -d d/src ] || echo "LOST round $round"
done
rm -r e r1 r2
find . | sort
cat d/src/f* d/src/sub/g* | md5sum
"#;
    let (dir, host) = run_on_host(script);
    let want = normalized(&host, dir.path()).1;
    let spread =
        "for i in 1 2 3 4 5 6 7 8 9; do readlink /proc/self/ns/net; done | sort -u | wc -l";
    let placed = on(
        &c,
        0,
        &format!("export ATOLL_NODE_PLACEMENT=round-robin; {spread} >&2; {script}"),
    );
    assert_eq!(
        String::from_utf8_lossy(&placed.stderr).trim(),
        "3",
        "execs on every host"
    );
    assert_eq!(text(&placed), want);
    let rmdir_rounds = "1\n".repeat(8);
    let renames = "1 No such file or directory\n1 won\n1\n".repeat(8);
    assert!(want.starts_with(&(rmdir_rounds + &renames)), "{want}");
}

/// `mpirun` launches the nodes (fos §4.2: launching hosts is the cluster
/// tools' job): all three on this machine, told apart only by the rank
/// Open MPI gives each (`OMPI_COMM_WORLD_RANK`) — every peer address is
/// this host's, so guessing from addresses would make all three the first.
/// A file written through one node is read through another, and a
/// `SIGTERM` to `mpirun` ends every node and leaves no runtime directory.
#[test]
fn nodes_launched_by_mpirun_are_one_image() {
    use std::io::BufRead;
    atoll_tests::require("mpirun");
    let dir = tempfile::tempdir().expect("tempdir");
    let ports: Vec<u16> = (0..3)
        .map(|_| {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
            l.local_addr().unwrap().port()
        })
        .collect();
    let peers = ports
        .iter()
        .map(|p| format!("127.0.0.1:{p}"))
        .collect::<Vec<_>>()
        .join(",");
    let node = format!(
        "exec {} node --peers {peers} --runtime-dir {}/r$OMPI_COMM_WORLD_RANK --servers 2 --memory 64M",
        atoll_bin().display(),
        dir.path().display()
    );
    let mut mpirun = std::process::Command::new("mpirun")
        .args([
            "--allow-run-as-root",
            "--oversubscribe",
            "-np",
            "3",
            "sh",
            "-c",
        ])
        .arg(&node)
        .env_remove("ATOLL_SOCKET")
        .env_remove("LD_PRELOAD")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start mpirun");
    let mut ids = Vec::new();
    let mut lines = std::io::BufReader::new(mpirun.stdout.take().unwrap()).lines();
    while ids.len() < 3 {
        match lines.next() {
            Some(Ok(l)) => ids.push(l),
            _ => {
                let _ = mpirun.kill();
                let out = mpirun.wait_with_output().unwrap();
                panic!(
                    "nodes did not start: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
    }
    ids.sort();
    let head = ids[0].clone();
    assert_eq!(
        ids,
        [head.clone(), format!("{head}-n1"), format!("{head}-n2")]
    );
    let through = |rank: usize, script: &str| {
        let mut cmd = std::process::Command::new(atoll_bin());
        cmd.arg("exec")
            .arg("--runtime-dir")
            .arg(dir.path().join(format!("r{rank}")))
            .args(["--", "bash", "-c", script])
            .env_remove("ATOLL_SOCKET")
            .env_remove("LD_PRELOAD");
        let out = output_within(cmd, LIMIT);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        text(&out)
    };
    through(2, "seq 1 5000 > /atoll/from-rank-2");
    let seen = through(1, "md5sum < /atoll/from-rank-2; wc -l < /atoll/from-rank-2");
    let want = std::process::Command::new("bash")
        .args(["-c", "seq 1 5000 | md5sum; echo 5000"])
        .output_bounded()
        .unwrap();
    assert_eq!(seen, text(&want));
    // `atoll stop` at the first node stops the image: every node ends as
    // stopped, so `mpirun` sees all three ranks succeed. (A SIGTERM to
    // `mpirun` is no graceful stop: Open MPI follows it with SIGKILL.)
    let stop = std::process::Command::new(atoll_bin())
        .arg("stop")
        .arg("--runtime-dir")
        .arg(dir.path().join("r0"))
        .env_remove("ATOLL_SOCKET")
        .env_remove("LD_PRELOAD")
        .output_bounded()
        .unwrap();
    assert!(
        stop.status.success(),
        "{}",
        String::from_utf8_lossy(&stop.stderr)
    );
    let t = Instant::now();
    let status = loop {
        if let Some(s) = mpirun.try_wait().unwrap() {
            break s;
        }
        assert!(t.elapsed() < LIMIT, "mpirun did not end after atoll stop");
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    let _ = std::io::Read::read_to_string(mpirun.stderr.as_mut().unwrap(), &mut err);
    assert!(status.success(), "mpirun: {status:?}\n{err}");
    // Each node removes its runtime directory on its way out.
    for rank in 0..3 {
        let t = Instant::now();
        loop {
            let left: Vec<_> = std::fs::read_dir(dir.path().join(format!("r{rank}")))
                .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name()).collect())
                .unwrap_or_default();
            if left.is_empty() {
                break;
            }
            assert!(t.elapsed() < HANG, "rank {rank} left {left:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Every node runs its own scheduling servers: an `exec` on any host is
/// placed over that host's cores round robin (Hare §3.6.1), as on the
/// first node.
#[test]
fn execs_on_every_host_are_placed_over_its_cores() {
    let Some(c) = cluster() else { return };
    let cores = "for i in 1 2 3 4 5 6; do grep Cpus_allowed_list /proc/self/status; done | sort -u";
    let first = text(&on(&c, 0, cores));
    let last = text(&on(&c, 2, cores));
    let usable = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert_eq!(first.lines().count(), usable.min(6), "{first}");
    assert_eq!(last, first);
    // Each node's scheduling servers are processes of their own (fos
    // §3.5), not threads of the node: `atoll __sched-server CORE DIR PID`
    // with DIR that node's instance directory.
    for host in [0, 2] {
        let dir = c
            .socket(host)
            .and_then(|s| s.parent().map(|d| d.to_path_buf()));
        let dir = dir.expect("the node's instance directory");
        let servers = std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
            .filter(|cmd| {
                let words: Vec<&[u8]> = cmd.split(|&b| b == 0).collect();
                words.get(1) == Some(&&b"__sched-server"[..])
                    && words.get(3) == Some(&dir.as_os_str().as_encoded_bytes())
            })
            .count();
        assert_eq!(servers, usable, "host {host}: scheduling server processes");
    }
}

/// Stall every file server of the first node for `secs` seconds
/// (`atoll chaos --stall`): a call of a remote program then waits at the
/// first node's proxy with its reply due, past the proxy's reply spin.
fn stall_servers(c: &Cluster, secs: u32) {
    for server in 0..2 {
        let out = std::process::Command::new("ip")
            .args(["netns", "exec", c.namespace(0)])
            .arg(atoll_bin())
            .args(["chaos", "--runtime-dir"])
            .arg(&c.dirs[0])
            .args(["--stall", &format!("server:{server}")])
            .args(["--for", &format!("{secs}s")])
            .env_remove("ATOLL_SOCKET")
            .env_remove("LD_PRELOAD")
            .output()
            .unwrap();
        assert!(out.status.success(), "chaos: {out:?}");
    }
}

/// A program on host `host` that reads a file until a call fails, then
/// says so on stderr and exits with 3.
fn reader_until_failure(c: &Cluster, host: usize) -> std::process::Child {
    on(c, host, "echo hi > $ROOT/r");
    busy_on(c, host, "read -r l < $ROOT/r")
}

const WAITING_HANGS: &str = "a call waiting for a stalled server hangs after a node died";

/// A program on `host` making `call` (builtins only) until it fails, then
/// saying so on stderr and exiting with 3; returned once its first call
/// succeeded (it says "up" on stdout), so that it is attached and busy
/// before a node is killed, however slowly a loaded machine starts it.
fn busy_on(c: &Cluster, host: usize, call: &str) -> std::process::Child {
    let script =
        format!("{call} || exit 2; echo up; while {call}; do :; done; echo stopped >&2; exit 3");
    let mut busy = c
        .exec(&atoll_bin(), host, &script)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let up = first_line(&mut busy);
    assert_eq!(up, "up\n", "the program on host {host} failed early");
    busy
}

/// The first line `child` writes on its piped stdout, read a byte at a
/// time so that nothing after it is taken from the pipe ("" if it ended
/// first).
fn first_line(child: &mut std::process::Child) -> String {
    use std::io::Read;
    let out = child.stdout.as_mut().expect("piped stdout");
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    while out.read(&mut b).unwrap_or(0) == 1 {
        line.push(b[0]);
        if b[0] == b'\n' {
            break;
        }
    }
    String::from_utf8_lossy(&line).into_owned()
}

/// How long a busy program may take to fail once a node died. The calls
/// fail within the link's silence bound (3 s); the bound here tells a
/// hang from the delays of a loaded machine (a CI runner with other test
/// binaries beside this one), and is no timing.
const HANG: Duration = Duration::from_secs(30);

/// A busy program's end within [`HANG`] of `since` (`hang`: what it means
/// if it does not end): it failed with `EIO`, said so and exited with 3.
fn fails_with_eio(mut busy: std::process::Child, since: Instant, hang: &str) {
    let status = loop {
        if let Some(s) = busy.try_wait().unwrap() {
            break s;
        }
        assert!(since.elapsed() < HANG, "{hang}");
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(busy.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(3), "{err}");
    assert!(err.contains("Input/output error"), "{err}");
}

/// The first node's proxy waits for a reply it forwarded (spinning, then
/// polling between sleeps on the link); the first node dying then must
/// still fail the remote program's call with `EIO`, not leave it waiting.
#[test]
fn a_call_waiting_at_the_first_node_fails_with_eio_when_that_node_dies() {
    let Some(mut c) = first_node_servers() else {
        return;
    };
    let busy = reader_until_failure(&c, 2);
    stall_servers(&c, 30);
    // Past the proxy's reply spin: the call waits in its slow polls.
    std::thread::sleep(Duration::from_millis(300));
    c.kill(0);
    fails_with_eio(busy, Instant::now(), WAITING_HANGS);
}

/// The same wait, with the program's own node dying: its call fails with
/// `EIO`, and the first node's proxy, still owed the reply, drops that
/// peer and serves the other hosts once the servers answer again.
#[test]
fn a_call_waiting_at_the_first_node_fails_with_eio_when_its_own_node_dies() {
    let Some(mut c) = first_node_servers() else {
        return;
    };
    let busy = reader_until_failure(&c, 2);
    stall_servers(&c, 2);
    std::thread::sleep(Duration::from_millis(300));
    c.kill(2);
    fails_with_eio(busy, Instant::now(), WAITING_HANGS);
    // After the stall, B's calls go through as before, and the first
    // node still takes C back.
    assert_eq!(text(&on(&c, 1, "cat $ROOT/r")), "hi\n");
    c.restart_node(&atoll_bin(), 2).expect("node C rejoins");
    assert_eq!(text(&on(&c, 2, "cat $ROOT/r")), "hi\n");
}

/// Named counters of node `k`'s instance (`atoll status --json`).
fn node_counters(c: &Cluster, k: usize) -> serde_json::Value {
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", c.namespace(k)])
        .arg(atoll_bin())
        .args(["status", "--json", "--runtime-dir"])
        .arg(&c.dirs[k])
        .env_remove("ATOLL_SOCKET")
        .env_remove("LD_PRELOAD")
        .output()
        .unwrap();
    assert!(out.status.success(), "status: {out:?}");
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    status["counters"].clone()
}

/// Invalidations a server sends to a program on another host while that
/// program owes no call (it sleeps in a host pipe) wake the first node's
/// proxy and leave at once: none is found by a pass a timer started (the
/// proxy used to look at the inboxes only every millisecond when no reply
/// was due). The program then sees the removal as on tmpfs.
#[test]
fn invalidations_for_an_idle_remote_program_leave_without_waiting_for_a_timer() {
    use std::io::{BufRead, Write};
    let Some(c) = cluster() else { return };
    on(
        &c,
        0,
        "mkdir -p $ROOT/d && for i in $(seq 1 20); do echo $i > $ROOT/d/f$i; done",
    );
    let fifo = tempfile::tempdir().unwrap();
    let go = fifo.path().join("go");
    assert!(std::process::Command::new("mkfifo")
        .arg(&go)
        .status()
        .unwrap()
        .success());
    // Host B caches the 20 names, says so, then waits in a host fifo.
    let script = format!(
        "for i in $(seq 1 20); do [ -e $ROOT/d/f$i ] || echo missing $i; done; echo cached; \
         read -r x < {go}; n=0; for i in $(seq 1 20); do [ -e $ROOT/d/f$i ] && n=$((n+1)); done; \
         echo left $n",
        go = go.display()
    );
    let mut b = c
        .exec(&atoll_bin(), 1, &script)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(b.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "cached");
    let before = node_counters(&c, 0);
    // Host C removes them: each removal invalidates B's cached name.
    on(&c, 2, "rm $ROOT/d/f*");
    std::fs::OpenOptions::new()
        .write(true)
        .open(&go)
        .unwrap()
        .write_all(b"go\n")
        .unwrap();
    assert_eq!(lines.next().unwrap().unwrap(), "left 0");
    assert!(b.wait().unwrap().success());
    let after = node_counters(&c, 0);
    let count = |v: &serde_json::Value, name: &str| v[name].as_u64().unwrap_or(0);
    let relayed = count(&after, "node.notices_relayed") - count(&before, "node.notices_relayed");
    assert!(relayed > 0, "notices relayed: {after}");
    assert_eq!(
        count(&after, "node.notices_after_timer"),
        0,
        "notices that waited for a timer: {after}"
    );
}

/// CPU time (user and system, every thread) node `k`'s process used so
/// far, in clock ticks.
fn node_cpu_ticks(c: &Cluster, k: usize) -> u64 {
    let pid = c.node_pid(k).expect("node runs");
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command's closing parenthesis: utime is the 12th,
    // stime the 13th.
    let rest: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    rest[11].parse::<u64>().unwrap() + rest[12].parse::<u64>().unwrap()
}

/// An image whose remote programs made calls and now sleep stays idle:
/// the proxies poll only within a round trip of a call (the head's pump
/// for the next request and for a reply, the edge's dispatcher), never
/// while nothing is owed. A CPU-time bound with a wide margin, not a
/// timing: an idle node uses about 0.01 s in 10 s (docs/BENCHMARKS.md),
/// while a thread that kept polling would take its share of a core over
/// the 5 s (about 0.8 s even beside a dozen runnable tasks on two CPUs).
#[test]
fn nodes_whose_remote_programs_sleep_stay_idle() {
    use std::io::BufRead;
    let Some(c) = cluster() else { return };
    on(&c, 0, "echo x > $ROOT/idle");
    let fifos = tempfile::tempdir().unwrap();
    let mut sleepers = Vec::new();
    for host in [1, 2] {
        let go = fifos.path().join(format!("go{host}"));
        assert!(std::process::Command::new("mkfifo")
            .arg(&go)
            .status()
            .unwrap()
            .success());
        // Calls back to back, then a wait in a host fifo (no call owed).
        let script = format!(
            "for i in $(seq 1 200); do read -r l < $ROOT/idle; done; ls $ROOT > /dev/null; \
             echo ready; read -r x < {go}",
            go = go.display()
        );
        let mut child = c
            .exec(&atoll_bin(), host, &script)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        assert_eq!(lines.next().unwrap().unwrap(), "ready");
        sleepers.push((go, child));
    }
    let before: Vec<u64> = (0..3).map(|k| node_cpu_ticks(&c, k)).collect();
    std::thread::sleep(Duration::from_secs(5));
    let after: Vec<u64> = (0..3).map(|k| node_cpu_ticks(&c, k)).collect();
    for (go, mut child) in sleepers {
        std::fs::write(&go, b"go\n").unwrap();
        assert!(child.wait().unwrap().success());
    }
    for k in 0..3 {
        // `/proc` counts CPU time in USER_HZ ticks, 100 a second.
        let used = (after[k] - before[k]) as f64 / 100.0;
        assert!(used <= 0.25, "node {k} used {used:.2} s of CPU in 5 s idle");
    }
}

/// On one host, a program renames names that a reader has cached (the
/// inodes live on, so a stale lookup still finds one) and, once each `mv`
/// returned, tells the reader through a host fifo; a third
/// program makes calls back to back all the while, so the far host's proxy
/// polls rather than sleeps. The server writes each invalidation before
/// the reply of the `mv` that caused it, and both cross the same link, so
/// the reader must find every name gone (a reply relayed ahead of an
/// invalidation written before it, or one lost, leaves a stale name,
/// checked to show when the edge drops invalidations); a lost reply
/// would hang a program (the transcript's time limit). Run as
/// on a host tmpfs: the transcripts must be equal.
const ORDER: &str = r#"
n=60
mkdir -p $ROOT/ord && : > $ROOT/ord/busy
for i in $(seq 1 $n); do echo $i > $ROOT/ord/f$i; done
t=$(mktemp -d /tmp/atoll-order.XXXXXX); mkfifo $t/a $t/b
( while [ ! -e $t/stop ]; do : < $ROOT/ord/busy; done ) &
busy=$!
(
  exec 3<$t/a 4>$t/b
  for i in $(seq 1 $n); do
    [ -e $ROOT/ord/f$i ] || echo "missing before mv: $i"
    echo cached >&4
    read -r x <&3
    [ -e $ROOT/ord/f$i ] && echo "stale after mv: $i"
  done
  exit 0
) &
reader=$!
exec 3>$t/a 4<$t/b
for i in $(seq 1 $n); do read -r x <&4; mv $ROOT/ord/f$i $ROOT/ord/g$i; echo moved >&3; done
wait $reader; touch $t/stop; wait $busy; rm -rf $t
ls $ROOT/ord | wc -l; echo done
"#;

#[test]
fn an_invalidation_reaches_a_remote_program_before_the_reply_written_after_it() {
    let Some(c) = cluster() else { return };
    for host in [1, 2] {
        let got = on(&c, host, ORDER);
        let (dir, want) = run_on_host(ORDER);
        assert_eq!(text(&got), normalized(&want, dir.path()).1, "host {host}");
        on(&c, 0, "rm -rf $ROOT/ord");
    }
}

/// A call the first node's proxy stops spinning for (its server stalled)
/// has its reply relayed by the proxy's watcher, woken by the reply itself,
/// rather than left to the pump's next poll, up to 1 ms later: the count
/// of replies the watcher relayed moves. (The pump still polls too and
/// may find one first, hence three stalls, each ending with a call owed.)
#[test]
fn the_reply_of_a_call_past_the_proxy_s_spin_is_relayed_when_it_is_written() {
    let Some(c) = first_node_servers() else {
        return;
    };
    on(&c, 2, "echo hi > $ROOT/r");
    let flags = tempfile::tempdir().unwrap();
    let before = node_counters(&c, 0);
    for round in 0..3 {
        // Reads back to back until told to stop: one is owed when the
        // servers stall, and is answered when they go on.
        let stop = flags.path().join(format!("stop{round}"));
        let script = format!(
            "read -r l < $ROOT/r && echo up; while [ ! -e {stop} ]; do read -r l < $ROOT/r; done; echo $l",
            stop = stop.display()
        );
        let mut reader = c
            .exec(&atoll_bin(), 2, &script)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Its reads go on (not a fixed wait: a loaded machine may take
        // longer to start it than the stall lasts).
        assert_eq!(first_line(&mut reader), "up\n", "the reader failed early");
        stall_servers(&c, 1);
        std::thread::sleep(Duration::from_millis(1500));
        std::fs::write(&stop, b"").unwrap();
        let out = reader.wait_with_output().unwrap();
        assert!(out.status.success(), "{out:?}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "hi\n");
    }
    let after = node_counters(&c, 0);
    let count = |v: &serde_json::Value| v["node.replies_watched"].as_u64().unwrap_or(0);
    assert!(count(&after) > count(&before), "replies watched: {after}");
}
