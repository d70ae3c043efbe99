//! Attribute changes on a descriptor (`futimens`, `fchown`, `fchmod`, as
//! `tar` makes every file): another process must see each one as soon as
//! the call returned, as on Linux, by `stat` and in its inotify queue.
//! Guards any attempt to make these calls cheaper (docs/ARCHITECTURE.md,
//! "Attribute calls that tar makes"): posting them without the server's
//! drain rule failed the first test, without the watch flag the second.

use atoll_tests::{assert_same, compile_probe, require};

/// The writer tells the observer over a pipe after each call; the
/// observer `stat`s the file by path and must see the call's change. Two
/// servers, so that the writer's and observer's requests are not simply
/// served in the order one server's ring holds them, and the same run on
/// a host directory prints the same.
#[test]
fn every_attribute_change_on_a_descriptor_is_seen_by_another_process_once_returned() {
    for servers in ["1", "2"] {
        let out = observe(servers, "400");
        assert!(out.contains("status 0"), "{out}");
    }
}

/// Run the observer probe (`observer.c ROOT/d ARGS`) with `servers` file
/// servers and on a host directory, which must print the same; what it
/// printed, with no failed check in it.
fn observe(servers: &str, args: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let probe = compile_probe(
        dir.path(),
        "observer",
        include_str!("attrs_visible/observer.c"),
    );
    let script = format!(
        "mkdir \"$ROOT/d\" && {} \"$ROOT/d\" {args}; echo status $?",
        probe.display()
    );
    let out = assert_same(&["--servers", servers], &script, true);
    assert!(out.contains("observer: 0 checks failed"), "{out}");
    out
}

/// With an inotify watch on the directory, each call's `IN_ATTRIB` is in
/// the watcher's queue when the call returned (the queue is read from
/// shared memory, without asking the server, so such changes wait).
#[test]
fn every_attribute_change_is_queued_for_a_watcher_once_returned() {
    observe("2", "150 inotify");
}

/// `tar x` of a tree with varied modes, owners and times leaves exactly
/// what it leaves on the host, checked by another process after tar
/// exited and while a second tar runs beside it.
#[test]
fn tar_extraction_sets_every_mode_owner_and_time_as_on_the_host() {
    require("tar");
    let script = r#"
        set -e
        cd "$ROOT"
        mkdir src
        for i in $(seq 1 120); do
          printf '%*s' $((i * 131 % 9000)) '' > src/f$i
          chmod $(printf '%o' $((0400 + i % 0400))) src/f$i
          touch -m -d "@$((1500000000 + i * 977))" src/f$i
        done
        if [ "$(id -u)" = 0 ]; then
          for i in $(seq 1 120); do chown $((i % 4 + 1000)):$((i % 3 + 2000)) src/f$i; done
        fi
        tar cf t.tar src
        mkdir a b
        (cd a && tar xpf ../t.tar) &
        (cd b && tar xpf ../t.tar)
        wait
        for d in a b; do
          (cd $d && find src -type f | sort | while read f; do
            stat -c '%n %a %u %g %s %Y' "$f"
          done)
        done
    "#;
    assert_same(&["--servers", "2"], script, true);
}
