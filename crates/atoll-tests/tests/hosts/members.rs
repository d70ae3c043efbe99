//! File servers on every node (the default, `atoll node --servers-here
//! 1`, not given here): the first node serves members 0 and 1, the second
//! host member 2, the third member 3, all of one fleet and one tree
//! (`cli/src/node/members.rs`).

use std::time::{Duration, Instant};

use atoll_bench::hosts::Cluster;
use atoll_tests::{atoll_bin, normalized, run_on_host};

use super::{busy_on, cluster, fails_with_eio, on, text, HANG};

/// The default shape: no `--servers-here`.
fn spread() -> Option<Cluster> {
    cluster()
}

/// `atoll status --json` of node `k`'s instance.
pub(super) fn status(c: &Cluster, k: usize) -> serde_json::Value {
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
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The member that owns each path's inode (the owner byte of `st_ino`,
/// `atoll_proto::InodeId`).
fn owners(paths: &str) -> String {
    format!("for p in {paths}; do echo $(( $(stat -c %i $p) >> 56 )); done")
}

#[test]
fn files_made_on_a_host_live_on_its_member_and_read_the_same_everywhere() {
    let Some(c) = spread() else { return };
    let make = |host: usize, tag: &str| {
        let script = format!(
            "mkdir $ROOT/{tag} && seq 1 30000 > $ROOT/{tag}/f && echo {tag} > $ROOT/top-{tag} \
             && {}",
            owners(&format!("$ROOT/{tag} $ROOT/{tag}/f $ROOT/top-{tag}"))
        );
        text(&on(&c, host, &script))
    };
    // Creation affinity: a program's new directory and files go to its
    // own node's member, wherever their names live.
    assert_eq!(make(1, "b"), "2\n2\n2\n");
    assert_eq!(make(2, "c"), "3\n3\n3\n");
    let a = make(0, "a");
    assert!(
        a.lines().all(|o| o == "0" || o == "1"),
        "the first node's files went elsewhere: {a}"
    );
    let want = std::process::Command::new("bash")
        .args(["-c", "seq 1 30000 | md5sum"])
        .output()
        .unwrap();
    let read = "for t in a b c; do md5sum < $ROOT/$t/f; cat $ROOT/top-$t; done; ls $ROOT | sort";
    let mut expect = String::new();
    for t in ["a", "b", "c"] {
        expect += &text(&want);
        expect += &format!("{t}\n");
    }
    expect += "a\nb\nc\ntop-a\ntop-b\ntop-c\n";
    for host in 0..3 {
        assert_eq!(text(&on(&c, host, read)), expect, "read on host {host}");
    }
    // The first node's status counts the remote members' inodes: each
    // answered for itself through its node.
    let v = status(&c, 0);
    let servers = v["servers"].as_array().expect("servers in status");
    assert_eq!(servers.len(), 4, "{v}");
    for m in [2, 3] {
        assert!(
            servers[m]["inodes"].as_u64().unwrap_or(0) >= 2,
            "member {m}: {}",
            servers[m]
        );
    }
}

/// Renames and removals whose names and inodes are on members of
/// different hosts keep the Hare invariants: every name once, link counts
/// right, a non-empty directory never removed — the transcript of the same
/// steps on tmpfs.
#[test]
fn rename_and_rmdir_across_members_on_different_hosts_match_tmpfs() {
    let Some(c) = spread() else { return };
    let steps = [
        // On B (member 2): a tree.
        (1, "mkdir -p $ROOT/x/sub && echo one > $ROOT/x/f && ln $ROOT/x/f $ROOT/x/hard"),
        // On C (member 3): another.
        (2, "mkdir $ROOT/y && echo two > $ROOT/y/g"),
        // On C: move B's file and directory under C's directory.
        (
            2,
            "mv $ROOT/x/f $ROOT/y/f-moved && mv $ROOT/x/sub $ROOT/y/sub-moved \
             && mv $ROOT/y/g $ROOT/x/g-moved",
        ),
        // On A: a directory that is not empty stays; an empty one goes.
        (
            0,
            "rmdir $ROOT/y 2>/dev/null; echo rmdir-y $?; rmdir $ROOT/y/sub-moved; echo rmdir-sub $?",
        ),
        // On B: rename over an existing name across members.
        (1, "echo three > $ROOT/x/h && mv $ROOT/x/h $ROOT/y/f-moved"),
    ];
    let listing = "cd $ROOT && find x y | sort | while read -r p; do \
                   if [ -d $p ]; then echo \"$p/ $(stat -c %h $p)\"; \
                   else echo \"$p $(stat -c %h $p) $(cat $p)\"; fi; done";
    let mut got = String::new();
    for (host, step) in steps {
        got += &text(&on(&c, host, step));
    }
    let mut seen = Vec::new();
    for host in 0..3 {
        seen.push(text(&on(&c, host, listing)));
    }
    let script: Vec<&str> = steps.iter().map(|(_, s)| *s).collect();
    let (dir, host) = run_on_host(&format!("{}\necho ==\n{listing}", script.join("\n")));
    let (code, want, err) = normalized(&host, dir.path());
    assert_eq!(code, 0, "{err}");
    let (want_steps, want_list) = want.split_once("==\n").expect("the separator");
    assert_eq!(got, want_steps, "steps");
    for (k, s) in seen.iter().enumerate() {
        assert_eq!(s, want_list, "listing on host {k}");
    }
}

#[test]
fn a_killed_host_fails_calls_on_its_members_names_with_eio_and_the_rest_goes_on() {
    let Some(mut c) = spread() else { return };
    let state = |c: &Cluster, m: usize| status(c, 0)["health"][m]["state"].clone();
    on(&c, 1, "echo on-b > $ROOT/b-file");
    on(&c, 2, "echo on-c > $ROOT/c-file");
    on(&c, 0, "echo on-a > $ROOT/a-file");
    // A program on the first host that reads B's file until a read fails.
    let busy = busy_on(&c, 0, "read -r l < $ROOT/b-file");
    c.kill(1);
    fails_with_eio(
        busy,
        Instant::now(),
        "a call on the dead host's member hangs",
    );
    // What the other members own still works from both other hosts.
    for host in [0, 2] {
        let out = on(&c, host, "cat $ROOT/a-file $ROOT/c-file");
        assert_eq!(text(&out), "on-a\non-c\n", "host {host}");
    }
    let out = on(&c, 0, "echo more >> $ROOT/c-file && cat $ROOT/c-file");
    assert_eq!(text(&out), "on-c\nmore\n");
    // The first node reports B's member down, C's up.
    assert_eq!(state(&c, 2), "down");
    assert_eq!(state(&c, 3), "up");
    let gone = on(&c, 2, "cat $ROOT/b-file 2>&1; echo $?");
    assert!(
        text(&gone).contains("Input/output error"),
        "{}",
        text(&gone)
    );
}

/// A program working in a directory of its own node's member reaches it
/// without the first node: the stubs there forward none of its calls,
/// while a program of another host reading the same files goes through
/// them.
#[test]
fn a_program_working_on_its_own_nodes_member_sends_nothing_through_the_first_node() {
    let Some(c) = spread() else { return };
    on(&c, 1, "mkdir $ROOT/work");
    let forwarded = || status(&c, 0)["counters"]["node.member_requests"].as_u64();
    let before = forwarded().unwrap_or(0);
    let work = "cd $ROOT/work && head -c 1000000 /dev/zero | tr '\\0' x > big && \
                for i in $(seq 1 50); do echo $i > f$i; done && cat f* big | wc -c && \
                mv f1 g1 && rm f2 && ls | wc -l";
    assert_eq!(text(&on(&c, 1, work)), "1000141\n50\n");
    assert_eq!(forwarded().unwrap_or(0), before, "B's own calls crossed");
    // Its pipes too are its node's member's: eight shells, whose pids
    // would spread them over all four members by the fleet's hash.
    let pipes = |s: &serde_json::Value| -> Vec<u64> {
        let all = s["servers"].as_array().expect("servers");
        all.iter()
            .map(|m| m["pipes"].as_u64().unwrap_or(0))
            .collect()
    };
    let before_pipes = pipes(&status(&c, 0));
    let piped = "for i in $(seq 1 8); do bash -c 'seq 1 1000 | wc -l'; done | sort -u";
    assert_eq!(text(&on(&c, 1, piped)), "1000\n");
    let after_pipes = pipes(&status(&c, 0));
    for (m, (a, b)) in after_pipes.iter().zip(&before_pipes).enumerate() {
        match m {
            2 => assert!(a >= &(b + 8), "member 2 made {} pipes", a - b),
            _ => assert_eq!(a, b, "member {m} made pipes for host B"),
        }
    }
    // C reaches member 2 too: over its direct link once it is up
    // (`direct.rs`), through the first node's stub before.
    let crossed = || {
        let direct = status(&c, 2)["counters"]["node.direct_requests"].as_u64();
        forwarded().unwrap_or(0) + direct.unwrap_or(0)
    };
    let crossed_before = crossed();
    assert_eq!(text(&on(&c, 2, "wc -c < $ROOT/work/big")), "1000000\n");
    assert!(
        crossed() > crossed_before,
        "C's reads reached member 2 unseen"
    );
}

/// Lookup-cache invalidations of a remote member reach every client that
/// cached its names: a program on the first host (through the member's
/// stub) and one on the member's own host (its channel is the member's
/// own) each walk twenty paths through directories of host B's member,
/// host C renames those directories, and both then find the old paths
/// gone and the new ones there, as on tmpfs (a walk through a stale
/// cached name would still find the old path, whose directory lives on).
#[test]
fn a_remote_members_invalidations_reach_programs_on_every_host() {
    use std::io::{BufRead, Write};
    let Some(c) = spread() else { return };
    let made = on(
        &c,
        1,
        "mkdir $ROOT/d && for i in $(seq 1 20); do mkdir $ROOT/d/s$i && echo $i > $ROOT/d/s$i/x; \
         done && echo $(( $(stat -c %i $ROOT/d) >> 56 ))",
    );
    assert_eq!(text(&made), "2\n");
    let fifos = tempfile::tempdir().unwrap();
    let mut cachers = Vec::new();
    for host in [0, 1] {
        let go = fifos.path().join(format!("go{host}"));
        assert!(std::process::Command::new("mkfifo")
            .arg(&go)
            .status()
            .unwrap()
            .success());
        let script = format!(
            "for i in $(seq 1 20); do [ -e $ROOT/d/s$i/x ] || echo missing $i; done; echo cached; \
             read -r x < {go}; old=0; new=0; for i in $(seq 1 20); do \
             [ -e $ROOT/d/s$i/x ] && old=$((old+1)); [ -e $ROOT/d/m$i/x ] && new=$((new+1)); \
             done; echo old $old new $new",
            go = go.display()
        );
        let mut p = c
            .exec(&atoll_bin(), host, &script)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = std::io::BufReader::new(p.stdout.take().unwrap()).lines();
        assert_eq!(lines.next().unwrap().unwrap(), "cached", "host {host}");
        cachers.push((host, go, p, lines));
    }
    on(
        &c,
        2,
        "for i in $(seq 1 20); do mv $ROOT/d/s$i $ROOT/d/m$i; done",
    );
    for (host, go, mut p, mut lines) in cachers {
        std::fs::OpenOptions::new()
            .write(true)
            .open(&go)
            .unwrap()
            .write_all(b"go\n")
            .unwrap();
        assert_eq!(
            lines.next().unwrap().unwrap(),
            "old 0 new 20",
            "host {host}"
        );
        assert!(p.wait().unwrap().success());
    }
}

/// A remote member's channels for programs of other hosts go when those
/// programs end: neither the instance nor a server closes a dead
/// session's channels, so the member's node drops them at the session's
/// end (each is a shared-memory ring pair), and the first node's stub too.
#[test]
fn a_members_channels_for_other_hosts_programs_go_when_those_programs_end() {
    let Some(c) = spread() else { return };
    on(&c, 1, "mkdir $ROOT/b && echo hi > $ROOT/b/f");
    let channels = || {
        status(&c, 1)["counters"]["node.member_channels"]
            .as_u64()
            .expect("node.member_channels at B")
    };
    let before = channels();
    // Twenty programs on the first host and twenty on C, each a session
    // with a lane whose channel to member 2 crosses to B.
    for host in [0, 2] {
        let out = on(
            &c,
            host,
            "for i in $(seq 1 20); do cat $ROOT/b/f; done | sort | uniq -c",
        );
        assert_eq!(text(&out).trim(), "20 hi");
    }
    // Sessions end as their connections close, a moment after each exit.
    let t = Instant::now();
    let mut now = channels();
    while now > before && t.elapsed() < HANG {
        std::thread::sleep(Duration::from_millis(50));
        now = channels();
    }
    assert_eq!(now, before, "channels of programs that ended are kept at B");
}
