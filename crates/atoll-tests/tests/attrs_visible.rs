//! Attribute changes on a descriptor (`futimens`, `fchown`, `fchmod`, as
//! `tar` makes every file): another process must see each one as soon as
//! the call returned, as on Linux, by `stat` and in its inotify queue.
//! These calls are posted (`Request::SetAttrPosted`, docs/ARCHITECTURE.md
//! "Attribute calls that tar makes"): without the server's drain rule the
//! first test failed, posting under a watch the second; serving posted
//! heads in turn instead of by ticket fails the order tests, stamping
//! when served instead of at the call the stamp tests. Each runs with two
//! servers and more processes than cores, against the host, and also
//! under `--without posted-attrs`.

use std::time::{Duration, Instant};

use atoll_tests::{
    assert_same, compile_probe, output_within, require, run_in_atoll, Booted, RUN_LIMIT,
};

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

/// Two threads, and a parent and its forked child, sharing one
/// description, change its file's mode by turns (each after the other's
/// call returned, told through shared memory): the mode is always the
/// last call's, checked by path by the other side every few turns and
/// once both are done. Four pairs at once on two servers, so that the
/// callers' rings are served in every order; the same on the host.
#[test]
fn alternating_mode_changes_from_two_rings_end_with_the_last_calls() {
    let dir = tempfile::tempdir().unwrap();
    let probe = compile_probe(dir.path(), "order", include_str!("attrs_visible/order.c"));
    let p = probe.display();
    let script = format!(
        "mkdir \"$ROOT/o\" && cd \"$ROOT/o\" && \
         for k in 1 2; do {p} t$k threads 600 > t$k.out & {p} f$k fork 600 > f$k.out & done; \
         wait; cat t1.out t2.out f1.out f2.out"
    );
    for opts in [
        &["--servers", "2"][..],
        &["--servers", "2", "--without", "posted-attrs"],
    ] {
        let out = assert_same(opts, &script, true);
        assert_eq!(out.matches("0 checks failed").count(), 4, "{out}");
    }
}

/// `ctime` after `fchmod`, and the times `futimens(fd, NULL)` sets, are
/// within the call (between a clock read before it and one after it
/// returned), also when the change is served later: three processes on
/// two servers, each making ten files, checking each by path after a
/// pause.
#[test]
fn times_a_change_on_a_descriptor_stamps_are_the_calls() {
    let dir = tempfile::tempdir().unwrap();
    let probe = compile_probe(dir.path(), "stamps", include_str!("attrs_visible/stamps.c"));
    let p = probe.display();
    let script = format!(
        "mkdir \"$ROOT/s\" && cd \"$ROOT/s\" && \
         for k in 1 2 3; do {p} $(seq -f \"$k-%g\" 1 10) > $k.out & done; \
         wait; cat 1.out 2.out 3.out"
    );
    let out = assert_same(&["--servers", "2"], &script, true);
    assert_eq!(out.matches("10 files, 0 checks failed").count(), 3, "{out}");
}

/// The posted changes, and their stamps, survive their server's death:
/// server 1 of 2 is killed in the first `chmod` by path it serves, after
/// it reached the journal (`ATOLL_FAULT_KILL`), which comes after the
/// files' posted `futimens` and `fchmod` were drained before it; what
/// its successor rebuilt from the journal answers the checks.
#[test]
fn posted_changes_and_their_stamps_survive_a_server_killed_and_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let probe = compile_probe(dir.path(), "stamps", include_str!("attrs_visible/stamps.c"));
    let inst = Booted::with_env(&["--servers", "2"], &[("ATOLL_FAULT_KILL", "1:SetAttr:1")]);
    // Names whose inodes server 1 owns (the top byte), in a directory
    // spread over both servers.
    let setup = r#"
        mkdir "$ROOT/d" && setfattr -n user.atoll.distributed -v 1 "$ROOT/d" && cd "$ROOT/d" &&
        for i in $(seq 0 23); do : > "f$i"; done &&
        for i in $(seq 0 23); do [ $(( $(stat -c %i "f$i") >> 56 )) = 1 ] && echo "f$i"; done
    "#;
    let names = text(&output_within(inst.command(setup), RUN_LIMIT).stdout);
    let names: Vec<&str> = names.lines().collect();
    assert!(names.len() >= 3, "too few files on server 1: {names:?}");
    let restarts = |inst: &Booted| inst.status()["health"][1]["restarts"].as_u64().unwrap_or(0);
    assert_eq!(restarts(&inst), 0, "killed before the probe");
    let (trigger, files) = names.split_first().unwrap();
    let run = format!(
        r#"cd "$ROOT/d" && {} trigger {trigger} {}"#,
        probe.display(),
        files.join(" ")
    );
    let out = output_within(inst.command(&run), RUN_LIMIT);
    let want = format!("stamps: {} files, 0 checks failed\n", files.len());
    assert_eq!(text(&out.stdout), want, "{}", text(&out.stderr));
    let started = Instant::now();
    while restarts(&inst) < 1 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "server 1 was not killed and rebuilt"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The changes are posted (the counters show `SetAttrPosted`), and under
/// `--without posted-attrs` each is waited for (none is).
#[test]
fn changes_on_a_descriptor_are_posted_unless_switched_off() {
    let dir = tempfile::tempdir().unwrap();
    let probe = compile_probe(dir.path(), "stamps", include_str!("attrs_visible/stamps.c"));
    let script = format!(r#"cd "$ROOT" && {} a b"#, probe.display());
    for (opts, posted) in [
        (&["--servers", "2", "--stats"][..], true),
        (
            &["--servers", "2", "--stats", "--without", "posted-attrs"],
            false,
        ),
    ] {
        let out = run_in_atoll(opts, &script);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert_eq!(stdout, "stamps: 2 files, 0 checks failed\n", "{stderr}");
        let counted = format!("{stdout}{stderr}").contains("SetAttrPosted");
        assert_eq!(counted, posted, "{opts:?}: {stdout}{stderr}");
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}
