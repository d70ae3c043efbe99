//! `fstat` right after `open` answered from the `Open` reply's attributes
//! (`client/src/openattr.rs`) when the inode's server served nothing in
//! between. The probe's transcript on a host tmpfs is the reference:
//! another process appends, truncates, changes the mode, links, unlinks
//! and makes entries between the open and the `fstat`, and so does the
//! program itself through other descriptors; then the message counts.

use atoll_tests::{assert_same_on_tmpfs, compile_probe, run_in_atoll};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The transcript on tmpfs, and in atoll with two servers and three
/// (files then land on the directory's server or, for the other
/// process's, by creation affinity, on its core's).
#[test]
fn fstat_after_open_sees_every_change_in_between_as_on_tmpfs() {
    let dir = tempfile::tempdir().unwrap();
    let bin = compile_probe(dir.path(), "fstat", include_str!("openattr/fstat.c"));
    // The probe's own success is part of its transcript.
    let script = format!(
        "mkdir \"$ROOT/d\" && {} \"$ROOT/d\" && echo ok",
        bin.display()
    );
    for opts in [&["--servers", "2"][..], &["--servers", "3"]] {
        let out = assert_same_on_tmpfs(opts, &script, false);
        assert!(out.ends_with("ok\n"), "{opts:?}: {out}");
    }
}

/// 1 000 `stat`+`open`+`fstat`+`close` of a file (dbench's
/// `NTCreateX`), and of a directory (glibc's `opendir` opens and fstats),
/// send one `GetAttr` each, for the `stat`, where each `fstat` was one
/// more; and 1 000 `open`+`fstat`+`close` with no `stat` (`o`), where each
/// `open` follows the last posted `Close` at once (stdio's `fopen`,
/// `fread`, `fclose`), send none: the `Open` reply says the server's count
/// with the `Close` served ahead of it; nor with an `lseek(SEEK_END)`
/// between the `open` and the `fstat` (`e`), which sends no `Seek`
/// either, or, on an `O_APPEND` descriptor (`a`, stdio's `fopen(…, "a")`),
/// one `Seek` (its offset lives at the server) but no `GetAttr`.
#[test]
fn fstat_after_open_sends_no_getattr() {
    let dir = tempfile::tempdir().unwrap();
    let bin = compile_probe(dir.path(), "loop", include_str!("openattr/loop.c"));
    for kind in ["f", "d", "o", "e", "a"] {
        let json = dir.path().join(format!("{kind}.json"));
        let j = json.to_string_lossy().to_string();
        let out = run_in_atoll(
            &["--stats-json", &j],
            &format!("mkdir $ROOT/d && {} $ROOT/d {kind}", bin.display()),
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
        let (ops, _) = atoll_tests::served_ops(&json);
        let (opens, getattrs) = (ops("Open") + ops("OpenInode"), ops("GetAttr"));
        assert!(
            opens >= 1000,
            "{kind}: the servers' counts are real: {opens}"
        );
        // At most 1 000 for the stats (one finds the count unmoved too
        // at times: a posted `Close` changes no attribute) and the
        // shell's few; one per fstat would be 2 000 or more.
        let most = if ["o", "e", "a"].contains(&kind) {
            100
        } else {
            1100
        };
        assert!(
            getattrs < most,
            "{kind}: one GetAttr per stat, none per fstat: {getattrs}"
        );
        if kind != "a" {
            assert!(
                ops("Seek") < 100,
                "{kind}: no Seek per lseek: {}",
                ops("Seek")
            );
        }
    }
}
