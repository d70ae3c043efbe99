//! Programs that cannot load the client library (statically linked, here
//! busybox) in pipelines and redirections of the mount: they run behind
//! relays of the atoll descriptors they inherit (the CLI's `foreign.rs`,
//! client `exec/foreign.rs`), so their input, output, exit status and
//! signals are what they are on a host directory. (They still cannot
//! open paths in the mount themselves: COMPATIBILITY.md.)

use atoll_tests::{assert_same, require};

/// Instances with more servers than this machine has cores.
const OPTS: &[&str] = &["--servers", "3"];

#[test]
fn a_static_program_reads_and_writes_atoll_pipes_and_files_as_on_the_host() {
    require("busybox");
    let out = assert_same(
        OPTS,
        r#"
        set -e
        cd "$ROOT"
        seq 1 2000 > nums
        busybox sort -rn < nums | head -3
        busybox cat < nums | busybox wc -l
        seq 1 5 | busybox tac | tr '\n' ' '; echo
        busybox cat < nums > copy; cmp nums copy && echo same
        busybox echo appended >> copy; tail -1 copy; wc -l < copy
        head -c 3000000 /dev/zero | busybox wc -c
        echo rw > rw; busybox cat <> rw
        cat nums nums | busybox head -2
        "#,
        true,
    );
    assert!(out.contains("2000\n1999\n1998\n"), "{out}");
    assert!(
        out.contains("same\nappended\n2001\n3000000\nrw\n1\n2\n"),
        "{out}"
    );
}

#[test]
fn a_static_program_s_exit_status_and_signals_are_its_own() {
    require("busybox");
    let out = assert_same(
        OPTS,
        r#"
        cd "$ROOT"
        busybox sh -c 'echo out; exit 3' | cat; echo "status ${PIPESTATUS[0]}"
        busybox sh -c 'kill -TERM $$' | cat; echo "status ${PIPESTATUS[0]}"
        yes | busybox head -c 5 | wc -c
        busybox sleep 10 > slept & p=$!
        sleep 0.5
        kill -TERM $p; wait $p; echo "killed $?"
        busybox sh -c 'echo first; echo second >&2' > both 2>&1; sort both
        # what it leaves running writes on after its parent went on
        busybox sh -c '(sleep 1; echo late) &' > later; cat later; echo went-on
        sleep 2; cat later
        "#,
        true,
    );
    assert!(
        out.contains("out\nstatus 3\nstatus 143\n5\nkilled 143\n"),
        "{out}"
    );
    assert!(out.contains("first\nsecond\nwent-on\nlate\n"), "{out}");
}

/// A set-user-ID program (run by another user than its owner, so the
/// loader ignores `LD_PRELOAD` paths) reads and writes the atoll pipes it
/// inherits, behind the same relay.
#[test]
fn a_set_user_id_program_keeps_its_atoll_pipes() {
    // SAFETY: geteuid has no arguments and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root to make a set-user-ID copy owned by nobody");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let cat = dir.path().join("suidcat");
    std::fs::copy("/bin/cat", &cat).expect("copy cat");
    let nobody = std::process::Command::new("chown")
        .arg("nobody")
        .arg(&cat)
        .status()
        .expect("chown");
    assert!(nobody.success());
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&cat, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let out = assert_same(
        OPTS,
        &format!(
            r#"
            cd "$ROOT"
            seq 1 300 | {cat} | tail -2
            seq 1 5 > five; {cat} < five > copy; cat copy | wc -l
            "#,
            cat = cat.display()
        ),
        true,
    );
    assert_eq!(out, "299\n300\n5\n");
}

/// A program that cannot load the client gets none of atoll's own
/// descriptors (session socket, control block, buffer cache), with or
/// without a relay, and a dynamic program it starts is an atoll client
/// again.
#[test]
fn a_static_program_gets_no_atoll_internals_and_its_dynamic_children_see_the_mount() {
    require("busybox");
    let out = atoll_tests::run_in_atoll(
        OPTS,
        r#"
        echo hi > /atoll/f
        busybox ls -l /proc/self/fd | grep -c -e memfd:atoll -e socket:
        busybox ls -l /proc/self/fd | cat | grep -c -e memfd:atoll -e socket:
        busybox sh -c '/bin/cat /atoll/f; /bin/cat /atoll/f | /bin/cat'
        "#,
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "0\n0\nhi\nhi\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
