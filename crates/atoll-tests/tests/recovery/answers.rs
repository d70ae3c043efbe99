//! Calls whose server process is killed after the call reached the
//! journal and before its answer went out (`ATOLL_FAULT_KILL`): the
//! successor replays the call's record and sends the reply that replay
//! computes, the one the dead server would have sent (fos §3.5; server
//! `rebuilding`). Each program below goes on as on the host — it failed
//! with `Input/output error` when the successor answered `EIO` — and once
//! it removed what it made nothing is left held.

use super::*;

/// Server 0 is killed after its first call named `op` reached the
/// journal and before the answer went out.
fn answered_across_a_kill(op: &str, opts: &[&str], script: &str) {
    survives_a_kill_at(op, "journaled", opts, script);
}

/// An `open(O_CREAT)` of a new file: the description it made and the
/// file's attributes come back, and the program writes through it.
#[test]
fn an_open_creating_a_file_whose_server_was_killed_before_answering_succeeds() {
    answered_across_a_kill(
        "Open",
        &[],
        r#"cd "$BASE" && echo one > new && cat new && rm new"#,
    );
}

/// A `write`: the blocks its `Write` granted come back, and the program
/// copies into them; the same with the bytes in the message (`WriteData`,
/// an island without shared memory).
#[test]
fn a_write_whose_server_was_killed_before_answering_succeeds() {
    let script = r#"cd "$BASE" && echo written > f && cat f && stat -c %s f && rm f"#;
    answered_across_a_kill("Write", &[], script);
    answered_across_a_kill("WriteData", &["--island", "copy"], script);
}

/// An `unlink`: the name is gone, and the program is told so.
#[test]
fn an_unlink_whose_server_was_killed_before_answering_succeeds() {
    answered_across_a_kill(
        "Unlink",
        &[],
        r#"cd "$BASE" && echo x > f && rm f && { [ -e f ] || echo gone; }"#,
    );
}

/// A `rename` within one directory.
#[test]
fn a_rename_whose_server_was_killed_before_answering_succeeds() {
    answered_across_a_kill(
        "Rename",
        &[],
        r#"cd "$BASE" && echo moved > a && mv a b && { [ -e a ] || cat b; } && rm b"#,
    );
}

/// A `Close` a program waits for: `mknod` of a regular file opens it with
/// `O_CREAT|O_EXCL` and closes the description it made, and says what
/// the close said (closes of regular files are posted otherwise).
#[test]
fn a_close_whose_server_was_killed_before_answering_succeeds() {
    let probe = tempfile::tempdir().unwrap();
    let mknod = compile_probe(probe.path(), "mknod", include_str!("mknod.c"));
    let script = format!(
        r#"cd "$BASE" && {} f && stat -c '%a %s' f && rm f"#,
        mknod.display()
    );
    answered_across_a_kill("Close", &[], &script);
}

/// A `chmod`.
#[test]
fn a_chmod_whose_server_was_killed_before_answering_succeeds() {
    answered_across_a_kill(
        "SetAttr",
        &[],
        r#"cd "$BASE" && echo x > f && chmod 600 f && stat -c %a f && rm f"#,
    );
}
