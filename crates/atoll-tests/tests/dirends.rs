//! A directory listing at its end (`client/src/ns/dirs.rs`, `at_end`):
//! once a `ReadDir` reply says the listing reached the end, the next
//! `getdents64` at that position answers 0 without a message, as Linux
//! keeps a directory read to its end there until the program seeks. The
//! probe's transcript on a host tmpfs is the reference: entries made after
//! the end (by the program and by another process) do not show, a seek
//! back shows them, a removed directory answers `ENOENT`, and a watched
//! directory still reports `IN_ACCESS` for the call at its end.

use atoll_tests::{assert_same_on_tmpfs, compile_probe, require, run_in_atoll};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The probe's transcript on a host tmpfs, then in atoll with the default
/// servers, with three, and without the lookup cache (which the answer at
/// the end needs). Not with directories spread over servers: there the
/// end of a listing was never asked for (docs/COMPATIBILITY.md).
#[test]
fn listings_at_their_end_stay_there_as_on_tmpfs() {
    let dir = tempfile::tempdir().unwrap();
    let bin = compile_probe(dir.path(), "ends", include_str!("dirends/ends.c"));
    // The probe's own success is part of its transcript.
    let script = format!(
        "mkdir \"$ROOT/d\" && {} \"$ROOT/d\" && echo ok",
        bin.display()
    );
    let shapes: [&[&str]; 3] = [&[], &["--servers", "3"], &["--without", "dir-cache"]];
    for opts in shapes {
        let out = assert_same_on_tmpfs(opts, &script, false);
        assert!(out.contains("a after my create 0"), "{opts:?}: {out}");
        assert!(out.ends_with("ok\n"), "{opts:?}: {out}");
    }
}

/// 200 listings of a 20-entry directory through glibc (`opendir`,
/// `readdir` to the end, `closedir`: two `getdents64` each) send one
/// `ReadDir` each, where every second call used to be a message of its
/// own; the names are the same every time.
#[test]
fn a_listing_that_reached_its_end_sends_no_more_readdir() {
    require("python3");
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("s.json");
    let j = json.to_string_lossy().to_string();
    let script = r#"
        set -e
        mkdir "$ROOT/d" && cd "$ROOT/d"
        python3 - <<'PY'
import os
for i in range(20):
    os.close(os.open("f%d" % i, os.O_CREAT | os.O_WRONLY, 0o644))
want = sorted(os.listdir("."))
same = all(sorted(os.listdir(".")) == want for _ in range(200))
print("names", len(want), same)
PY
    "#;
    let out = run_in_atoll(&["--stats-json", &j], script);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert_eq!(stdout.trim(), "names 20 True", "{stdout}");
    let (ops, _) = atoll_tests::served_ops(&json);
    let readdirs = ops("ReadDir");
    // 201 listings, plus the shell's and python's own few.
    assert!(
        (201..=230).contains(&readdirs),
        "one ReadDir per listing, not two: {readdirs}"
    );
}
