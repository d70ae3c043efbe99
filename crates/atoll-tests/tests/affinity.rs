//! Creation affinity (Hare §3.7.5) end to end, on a fake two-socket
//! machine: `ATOLL_SYSFS_ROOT` points the instance at a sysfs tree where
//! cpu0 is on socket 0 and cpu1 on socket 1; servers are pinned to cores
//! 0 and 1 (`atoll` pins server i to usable core i mod n). A creator pinned
//! with `taskset` must get every new inode on a server of its socket; the
//! owner server is the top byte of the inode number (`InodeId`).
//!
//! Programs run with `--placement local` so that `taskset`'s pinning is
//! not replaced by a remote exec's.

use atoll_tests::OutputBounded as _;
use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Output, Stdio};
use std::thread::sleep;
use std::time::Duration;

use atoll_tests::{atoll, normalized, output_within, run_on_host, MOUNT, RUN_LIMIT};

/// A sysfs tree describing two sockets: cpu0 on 0, cpu1 on 1.
fn two_sockets() -> tempfile::TempDir {
    let t = tempfile::tempdir().expect("tempdir");
    for (cpu, pkg) in [(0, 0), (1, 1)] {
        let d = t
            .path()
            .join(format!("devices/system/cpu/cpu{cpu}/topology"));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("physical_package_id"), format!("{pkg}\n")).unwrap();
    }
    t
}

fn run(sysfs: &Path, opts: &[&str], script: &str) -> Output {
    let mut cmd = atoll();
    cmd.args(["run", "--memory", "256M", "--placement", "local"])
        .args(opts)
        .arg("--")
        .args(["bash", "-c", script])
        .env("ROOT", MOUNT)
        .env("ATOLL_SYSFS_ROOT", sysfs)
        .stdin(Stdio::null());
    output_within(cmd, RUN_LIMIT)
}

fn stdout_ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "atoll run failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Creates regular files (bash redirections, `touch`), FIFOs and symlinks
/// in a distributed directory from a process pinned to `cpu`, then prints
/// the owner server of every new inode, one per line.
fn owners_script(cpu: u32) -> String {
    format!(
        r#"set -e
mkdir $ROOT/d
taskset -c {cpu} bash -c '
for i in $(seq 1 120); do : > $ROOT/d/f$i; done
for i in $(seq 1 20); do touch $ROOT/d/t$i; mkfifo $ROOT/d/p$i; ln -s target $ROOT/d/s$i; done
'
for f in $ROOT/d/*; do echo $(( $(stat -c %i "$f") >> 56 )); done"#
    )
}

/// Owner server → number of inodes.
fn owners(sysfs: &Path, opts: &[&str], cpu: u32) -> BTreeMap<u64, usize> {
    let out = stdout_ok(&run(sysfs, opts, &owners_script(cpu)));
    let mut m = BTreeMap::new();
    for l in out.lines() {
        *m.entry(l.trim().parse::<u64>().expect(l)).or_insert(0) += 1;
    }
    assert_eq!(m.values().sum::<usize>(), 180, "{out}");
    m
}

#[test]
fn new_inodes_go_to_the_servers_of_the_creators_socket() {
    let sysfs = two_sockets();
    let two = ["--servers", "2", "--distribute", "all"];
    let on1 = owners(sysfs.path(), &two, 1);
    assert_eq!(on1.keys().copied().collect::<Vec<_>>(), [1], "{on1:?}");
    let on0 = owners(sysfs.path(), &two, 0);
    assert_eq!(on0.keys().copied().collect::<Vec<_>>(), [0], "{on0:?}");
    // Four servers on cores 0,1,0,1: socket 1 has servers 1 and 3.
    let four = ["--servers", "4", "--distribute", "all"];
    let on1 = owners(sysfs.path(), &four, 1);
    assert_eq!(on1.keys().copied().collect::<Vec<_>>(), [1, 3], "{on1:?}");
}

#[test]
fn without_affinity_inodes_follow_their_entries() {
    let sysfs = two_sockets();
    let opts = [
        "--servers",
        "2",
        "--distribute",
        "all",
        "--without",
        "affinity",
    ];
    let m = owners(sysfs.path(), &opts, 1);
    assert_eq!(m.keys().copied().collect::<Vec<_>>(), [0, 1], "{m:?}");
}

#[test]
fn one_socket_without_topology_keeps_the_coalesced_path() {
    // An empty tree: nothing known, one socket.
    let empty = tempfile::tempdir().unwrap();
    let m = owners(empty.path(), &["--servers", "2", "--distribute", "all"], 1);
    assert_eq!(m.keys().copied().collect::<Vec<_>>(), [0, 1], "{m:?}");
}

/// Files placed away from their entries behave as any other file.
#[test]
fn placed_files_behave_as_on_a_host_directory() {
    let sysfs = two_sockets();
    let script = r#"
mkdir $ROOT/d && cd $ROOT/d || exit 9
taskset -c 1 bash -c '
for i in $(seq 1 30); do echo "line $i" > f$i; done
printf abc >> f1; cat f1 f2
mv f3 g3; mv f4 f5; ln f6 h6; ln -s f7 s7; mkfifo p8
rm f8; cat g3 f5 s7 h6
stat -c "%n %s %h %F %a" f1 g3 f5 h6 s7 p8 f9
: > f1; stat -c "%s" f1
(set -o noclobber; echo x > f2) 2>/dev/null || echo "noclobber refused"
echo new >> f2; tail -n1 f2
touch f10 f11; exec 3> f12; echo fd3 >&3; exec 3>&-; cat f12
ls | sort | tr "\n" " "; echo
rm -f f* g3 h6 s7 p8; ls | wc -l
'
cd / && rmdir $ROOT/d && echo removed
"#;
    let (dir, host) = run_on_host(script);
    let host = normalized(&host, dir.path());
    let got = run(
        sysfs.path(),
        &["--servers", "2", "--distribute", "all"],
        script,
    );
    let got = normalized(&got, Path::new(MOUNT));
    assert_eq!(host.1, got.1, "stdout differs; atoll stderr:\n{}", got.2);
    assert_eq!(host.0, got.0, "exit status differs: {}", got.2);
    assert!(got.1.ends_with("0\nremoved\n"), "{}", got.1);
}

/// `(sessions, open descriptions, blocks used, inodes)` and the
/// `affinity.placements` counter, summed over servers.
fn usage(id: &str) -> ((u64, u64, u64, u64), u64) {
    let out = atoll()
        .args(["status", "--id", id, "--json"])
        .output_bounded()
        .expect("status");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("status JSON");
    let servers = v["servers"].as_array().expect("servers");
    let sum = |k: &str| -> u64 { servers.iter().map(|s| s[k].as_u64().unwrap()).sum() };
    // The technique counters are in the text form (summed over servers).
    let text = atoll()
        .args(["status", "--id", id])
        .output_bounded()
        .expect("status");
    let placed = String::from_utf8_lossy(&text.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("affinity.placements"))
        .map_or(0, |n| n.trim().parse().expect("counter value"));
    (
        (
            sum("sessions"),
            sum("open_descriptions"),
            sum("blocks_used"),
            sum("inodes"),
        ),
        placed,
    )
}

#[test]
fn creator_killed_mid_storm_leaks_nothing() {
    let sysfs = two_sockets();
    let out = atoll()
        .args([
            "boot",
            "--servers",
            "2",
            "--memory",
            "64M",
            "--distribute",
            "all",
        ])
        .env("ATOLL_SYSFS_ROOT", sysfs.path())
        .output_bounded()
        .expect("atoll boot");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    struct Stop(String);
    impl Drop for Stop {
        fn drop(&mut self) {
            let _ = atoll().args(["stop", "--id", &self.0]).status();
        }
    }
    let _stop = Stop(id.clone());
    let exec = |script: &str| {
        let mut cmd: std::process::Command = atoll();
        cmd.args(["exec", "--id", &id, "--placement", "local", "--"])
            .args(["bash", "-c", script])
            .env("ROOT", MOUNT);
        cmd
    };
    let (baseline, _) = usage(&id);
    let mut child = exec(
        "mkdir -p $ROOT/k; exec taskset -c 1 bash -c 'while :; do echo x > $ROOT/k/f.$RANDOM$RANDOM; ln -s t $ROOT/k/s.$RANDOM$RANDOM; mkfifo $ROOT/k/p.$RANDOM$RANDOM; done'",
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .process_group(0)
    .spawn()
    .expect("spawn");
    // Until the storm is under way (bounded by the count, not by time).
    let mut placed = 0;
    for _ in 0..600 {
        placed = usage(&id).1;
        if placed >= 50 {
            break;
        }
        sleep(Duration::from_millis(20));
    }
    assert!(placed >= 50, "no affinity placements seen ({placed})");
    let pid = child.id() as i32;
    // SAFETY: plain kill(2) of our own child's process group and pid.
    unsafe {
        libc::kill(-pid, libc::SIGKILL);
        libc::kill(pid, libc::SIGKILL);
    }
    let _ = child.wait();
    let out = exec("rm -rf $ROOT/k").output_bounded().expect("cleanup");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut now = usage(&id).0;
    for _ in 0..100 {
        if now == baseline {
            break;
        }
        sleep(Duration::from_millis(50));
        now = usage(&id).0;
    }
    assert_eq!(now, baseline, "servers must return to baseline");
    let out = exec("echo alive > $ROOT/a && cat $ROOT/a && rm $ROOT/a")
        .output_bounded()
        .expect("exec");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "alive\n");
}

/// Directory search permission on lookup-cache hits (Hare §3.7.1): a
/// process caches `d/f`, then `d` loses its search bit; the cached name
/// must be refused exactly as Linux refuses it, and found again once the
/// bit is back. Runs the checks as `nobody` (root would bypass them).
fn revoked_search_script() -> &'static str {
    r#"
chmod 755 $ROOT
mkdir $ROOT/d && echo hi > $ROOT/d/f && chown -R 65534:65534 $ROOT/d || exit 9
setpriv --reuid=65534 --regid=65534 --clear-groups bash -c '
read x < $ROOT/d/f; echo "first $x"
[ -e $ROOT/d/f ] && echo seen
chmod 0600 $ROOT/d
read y < $ROOT/d/f 2>/dev/null && echo "read $y" || echo "read refused"
[ -e $ROOT/d/f ] && echo "still seen" || echo "not seen"
(echo z > $ROOT/d/g) 2>/dev/null && echo created || echo "create refused"
cd $ROOT/d 2>/dev/null && echo "cd ok" || echo "cd refused"
chmod 0700 $ROOT/d
read y < $ROOT/d/f && echo "again $y"
'
chmod 0600 $ROOT/d
setpriv --reuid=65534 --regid=65534 --clear-groups bash -c '
read y < $ROOT/d/f 2>/dev/null && echo "fresh read $y" || echo "fresh refused"
'
"#
}

#[test]
fn revoked_search_permission_is_seen_through_the_lookup_cache() {
    atoll_tests::require("setpriv");
    let script = revoked_search_script();
    let (dir, host) = run_on_host(script);
    let host = normalized(&host, dir.path());
    assert!(
        host.1.contains("read refused\nnot seen\ncreate refused"),
        "host: {host:?}"
    );
    let sysfs = two_sockets();
    for opts in [
        &["--servers", "2"][..],
        &["--servers", "1"][..],
        // Distributed: entries on servers that do not own the directory.
        &["--servers", "2", "--distribute", "all"][..],
        &["--servers", "3", "--distribute", "all"][..],
    ] {
        let got = run(sysfs.path(), opts, script);
        let got = normalized(&got, Path::new(MOUNT));
        assert_eq!(host.1, got.1, "{opts:?}: atoll stderr:\n{}", got.2);
        assert_eq!(host.0, got.0, "{opts:?}: {}", got.2);
    }
}

/// A sticky directory whose names were placed on other servers (creation
/// affinity): `nobody` removes and renames its own files there and may
/// not touch root's, exactly as Linux decides, whether the directory is
/// ordinary (its server owns it but not the inodes) or distributed.
#[test]
fn sticky_directory_with_placed_inodes_matches_the_host() {
    atoll_tests::require("setpriv");
    let sysfs = two_sockets();
    let script = r#"
chmod 755 $ROOT
mkdir $ROOT/tmp && chmod 1777 $ROOT/tmp || exit 9
taskset -c 1 bash -c 'for i in $(seq 1 16); do echo r > $ROOT/tmp/r$i; done'
taskset -c 1 setpriv --reuid=65534 --regid=65534 --clear-groups bash -c '
t() { if out=$("$@" 2>&1); then echo "ok $*"; else echo "fail $*: ${out##*: }"; fi; }
for i in $(seq 1 16); do
  t sh -c "echo o > $ROOT/tmp/o$i"
  t rm -f $ROOT/tmp/r$i
  t mv -f $ROOT/tmp/o$i $ROOT/tmp/r$i
  t mv $ROOT/tmp/o$i $ROOT/tmp/k$i
  t rm $ROOT/tmp/k$i
done
'
ls $ROOT/tmp | wc -l
"#;
    let (dir, host) = run_on_host(script);
    let host = normalized(&host, dir.path());
    assert!(host.1.contains("ok rm $ROOT/tmp/k1\n"), "{host:?}");
    for opts in [
        &["--servers", "2"][..],
        &["--servers", "2", "--distribute", "all"][..],
    ] {
        let got = run(sysfs.path(), opts, script);
        let got = normalized(&got, Path::new(MOUNT));
        assert_eq!(host.1, got.1, "{opts:?}: atoll stderr:\n{}", got.2);
        assert_eq!(host.0, got.0, "{opts:?}: {}", got.2);
    }
}
