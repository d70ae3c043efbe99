//! Calls whose server process is killed after it took them and before
//! they reached the journal (`ATOLL_FAULT_KILL=…:PHASE`; fos §3.5: a
//! server fault is invisible to programs wherever it can be). The
//! successor, rebuilt from the journal, holds nothing of such a call:
//! still in its ring (`handled`: killed after the handler ran, before its
//! record), it serves it again; out of its ring (`taken`: a call that
//! changes nothing, `Lookup` or `GetAttr`, is never journaled) it answers
//! "not applied" and the client sends the call again. Each program below
//! goes on as on the host — the `stat` whose `Lookup` was taken failed
//! with `Input/output error` when the successor answered `EIO`, and a
//! `write` served again left its first serving's blocks held — and leaves
//! nothing held.

use super::*;

/// A `stat` whose `Lookup` was taken and not answered: sent again, it
/// finds the file.
#[test]
fn a_lookup_whose_server_was_killed_after_taking_it_is_sent_again() {
    survives_a_kill_at(
        "Lookup",
        "taken",
        &[],
        r#"cd "$BASE" && echo hello > f && stat -c '%s %F' f && rm f"#,
    );
}

/// The first `GetAttr` the program causes, taken and not answered. (The
/// `EIO` a successor answered it before lands on a call whose failure the
/// client gets over, so this one passed then too: it shows only that the
/// resend changes nothing else.)
#[test]
fn a_getattr_whose_server_was_killed_after_taking_it_is_sent_again() {
    survives_a_kill_at(
        "GetAttr",
        "taken",
        &[],
        r#"cd "$BASE" && echo hello > f && cat f && cat < f && rm f"#,
    );
}

/// Calls that change something, killed after their handler ran and
/// before their record reached the journal (their frame is still in the
/// ring, so the successor serves them again), and killed after their
/// frame left the ring (journaled by then: answered from the record): an
/// `open(O_CREAT)`, an `unlink`, a `rename`, a `close` — each as on the
/// host, nothing leaked (what the first, half-done serving reserved from
/// the gauges included).
#[test]
fn calls_whose_server_was_killed_before_their_record_succeed_and_leak_nothing() {
    let probe = tempfile::tempdir().unwrap();
    let mknod = compile_probe(probe.path(), "mknod", include_str!("mknod.c"));
    let close = format!(
        r#"cd "$BASE" && {} f && stat -c '%a %s' f && rm f"#,
        mknod.display()
    );
    let calls: [(&str, &str); 4] = [
        (
            "Open",
            r#"cd "$BASE" && echo one > new && cat new && rm new"#,
        ),
        (
            "Unlink",
            r#"cd "$BASE" && echo x > f && rm f && { [ -e f ] || echo gone; }"#,
        ),
        (
            "Rename",
            r#"cd "$BASE" && echo moved > a && mv a b && { [ -e a ] || cat b; } && rm b"#,
        ),
        ("Close", &close),
    ];
    for phase in ["handled", "taken"] {
        for (op, script) in calls {
            eprintln!("{op} killed at {phase}");
            survives_a_kill_at(op, phase, &[], script);
        }
    }
}

/// A `write` (`Write`, and `WriteData` in a copy island) killed after
/// its handler ran and before its record (served again; the blocks the
/// first serving claimed from the pool are given back by the successor,
/// `Journal::note_claimed`: they stayed with it, unused), and after its
/// frame left the ring.
#[test]
fn a_write_whose_server_was_killed_before_its_record_succeeds_and_leaks_nothing() {
    let script = r#"cd "$BASE" && echo written > f && cat f && stat -c %s f && rm f"#;
    for phase in ["handled", "taken"] {
        eprintln!("Write killed at {phase}");
        survives_a_kill_at("Write", phase, &[], script);
        survives_a_kill_at("WriteData", phase, &["--island", "copy"], script);
    }
}
