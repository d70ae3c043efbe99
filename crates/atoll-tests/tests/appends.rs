//! `O_APPEND` descriptions: the offset lives in the process that holds
//! the description (Hare §3.5.1, hybrid descriptors) and follows each
//! append to where the server put it. Compared with the same script on
//! tmpfs, with two servers, and more writers than cores.

use atoll_tests::assert_same_on_tmpfs;

fn script() -> String {
    format!(
        "cat > \"$ROOT/append.py\" <<'PY'\n{}PY\npython3 \"$ROOT/append.py\"\n",
        include_str!("appends/append.py")
    )
}

#[test]
fn appends_move_the_offset_as_on_linux() {
    atoll_tests::require("python3");
    let out = assert_same_on_tmpfs(&["--servers", "2"], &script(), true);
    assert!(out.contains("race records 1800"), "{out}");
    assert!(
        out.contains("each writer in order, none lost True"),
        "{out}"
    );
}

/// Where data travels in messages (`--island copy`) an appending
/// description keeps its offset at the server; incoherent memory keeps
/// it here, as coherent memory does.
#[test]
fn appends_in_the_other_islands() {
    atoll_tests::require("python3");
    for island in ["copy", "incoherent"] {
        let out = assert_same_on_tmpfs(&["--servers", "2", "--island", island], &script(), true);
        assert!(out.contains("all whole True"), "{island}: {out}");
    }
}
