//! Direct links between nodes that are not the first (`cli/src/node/
//! peers.rs`), in the default shape (members 0 and 1 on the first host,
//! 2 on B, 3 on C): a program on C reaches B's member over C's own link
//! to B, not through the first node's head and B's stub there.

use std::time::{Duration, Instant};

use atoll_bench::hosts::Cluster;
use atoll_tests::{normalized, run_on_host};

use super::members::status;
use super::{busy_on, cluster, fails_with_eio, on, text};

/// A counter of node `k`'s `atoll status --json`.
fn counter(c: &Cluster, k: usize, name: &str) -> u64 {
    status(c, k)["counters"][name].as_u64().unwrap_or(0)
}

/// Wait until node `k` has its direct links up (a node's links to the
/// others are made once both are up; a program's lane made before takes
/// the first node's path).
fn links_up(c: &Cluster, k: usize, want: u64) {
    let t = Instant::now();
    while counter(c, k, "node.direct_links") < want {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "node {k}'s direct links never came up: {}",
            status(c, k)["counters"]
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// 300 creates in a directory distributed over all four members, made by
/// the first host, from a shell on C (builtins only: one session, whose
/// lanes were made with the links up): the quarter of names whose entries
/// hash to B's member go straight to B, so the first node's stubs forward
/// none of them, while C's direct requests count them; every host then
/// lists and reads the directory as tmpfs does.
#[test]
fn creates_on_one_host_in_another_hosts_member_cross_once() {
    let Some(c) = cluster() else { return };
    links_up(&c, 1, 1);
    links_up(&c, 2, 1);
    on(
        &c,
        0,
        "mkdir $ROOT/spread && setfattr -n user.atoll.distributed -v 1 $ROOT/spread",
    );
    let forwarded = counter(&c, 0, "node.member_requests");
    let direct = counter(&c, 2, "node.direct_requests");
    let make = "cd $ROOT/spread && for ((i = 1; i <= 300; i++)); do echo $i > f$i; done; \
                for ((i = 1; i <= 300; i += 7)); do read -r l < f$i; [ \"$l\" = $i ] || echo bad $i; \
                done; echo made";
    assert_eq!(text(&on(&c, 2, make)), "made\n");
    assert_eq!(
        counter(&c, 0, "node.member_requests"),
        forwarded,
        "C's calls to B's member went through the first node"
    );
    let sent = counter(&c, 2, "node.direct_requests") - direct;
    assert!(sent >= 300 / 8, "C sent {sent} requests straight to B");
    // The same as on tmpfs, from every host.
    let list = "cd $ROOT/spread && ls | sort -V | md5sum && cat $(ls | sort -V) | md5sum && \
                ls | wc -l";
    let (dir, want) = run_on_host(&format!(
        "mkdir $ROOT/spread && {make} >/dev/null && {list}"
    ));
    let (code, want, err) = normalized(&want, dir.path());
    assert_eq!(code, 0, "{err}");
    for host in 0..3 {
        assert_eq!(text(&on(&c, host, list)), want, "host {host}");
    }
}

/// A program on C that keeps reading a file of B's member over the direct
/// link fails with `EIO` once B is killed (the link's end, or its
/// silence: within 3 s, checked against `HANG`), while C's and the first host's own files still work from
/// C; and a file C makes after that is read from the first host.
#[test]
fn a_call_over_a_direct_link_fails_with_eio_when_that_host_dies() {
    let Some(mut c) = cluster() else { return };
    links_up(&c, 2, 1);
    on(&c, 1, "echo on-b > $ROOT/b-file");
    on(&c, 0, "echo on-a > $ROOT/a-file");
    on(&c, 2, "echo on-c > $ROOT/c-file");
    let direct = counter(&c, 2, "node.direct_requests");
    let busy = busy_on(&c, 2, "read -r l < $ROOT/b-file");
    assert!(
        counter(&c, 2, "node.direct_requests") > direct,
        "C's reads of B's file did not go over the direct link"
    );
    c.kill(1);
    fails_with_eio(busy, Instant::now(), "a call over a dead direct link hangs");
    let out = on(
        &c,
        2,
        "cat $ROOT/a-file $ROOT/c-file && echo after > $ROOT/c-after",
    );
    assert_eq!(text(&out), "on-a\non-c\n");
    assert_eq!(text(&on(&c, 0, "cat $ROOT/c-after")), "after\n");
    assert_eq!(counter(&c, 2, "node.direct_links"), 0);
}

/// Without direct links (`--without direct-links`, the instance's
/// switch), the same creates from C reach B's member through the first
/// node's stub, and C sends nothing over its link to B: what the first
/// test counts tells the two paths apart.
#[test]
fn without_direct_links_creates_on_another_hosts_member_go_through_the_first_node() {
    let Some(c) = super::cluster_with(&["--without", "direct-links"]) else {
        return;
    };
    links_up(&c, 2, 1);
    on(
        &c,
        0,
        "mkdir $ROOT/spread && setfattr -n user.atoll.distributed -v 1 $ROOT/spread",
    );
    let forwarded = counter(&c, 0, "node.member_requests");
    let make = "cd $ROOT/spread && for ((i = 1; i <= 100; i++)); do echo $i > f$i; done";
    on(&c, 2, make);
    assert!(counter(&c, 0, "node.member_requests") > forwarded);
    assert_eq!(counter(&c, 2, "node.direct_requests"), 0);
    let list = "ls $ROOT/spread | wc -l";
    assert_eq!(text(&on(&c, 1, list)), "100\n");
}
