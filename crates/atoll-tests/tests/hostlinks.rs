//! Host symlinks that lead into the mount (`ln -s /atoll/proj ~/proj`):
//! for the kernel they dangle (the mount exists only for atoll's
//! programs), so atoll follows them itself when the kernel says `ENOENT`
//! (`atoll_client::hostlink`). Reading, writing, listing, `cd`, `mkdir`,
//! relative links and links to links all land in atoll; nothing is made
//! on the host; a host path that is simply missing stays missing.

use atoll_tests::{run_in_atoll, MOUNT};

#[test]
fn host_symlinks_into_the_mount_lead_into_atoll() {
    let host = tempfile::tempdir().unwrap();
    let d = host.path().display().to_string();
    let script = format!(
        r#"
        mkdir -p "$ROOT/proj/sub" && echo hi > "$ROOT/proj/sub/f"
        ln -s "$ROOT/proj" "{d}/l"
        ln -s l/sub "{d}/rel"
        ln -s "{d}/l" "{d}/l2"
        cat "{d}/l/sub/f"
        cat "{d}/rel/f"
        cat "{d}/l2/sub/f"
        stat -c %F "{d}/l/sub"
        ls "{d}/l"
        echo new > "{d}/l/new" && cat "$ROOT/proj/new"
        mkdir "{d}/l/nd" && test -d "$ROOT/proj/nd" && echo mkdir-ok
        python3 -c "print(open('{d}/l/sub/f').read().strip(), 'python')"
        cd "{d}/l/sub" && pwd -P && cat f
        cd /
        cat "{d}/missing/f" 2>/dev/null || echo "missing $?"
        cat "{d}/l/missing" 2>&1 | sed 's/.*: //'
        "#
    );
    let out = run_in_atoll(&["--servers", "2"], &script);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    let want = format!(
        "hi\nhi\nhi\ndirectory\nsub\nnew\nmkdir-ok\nhi python\n{MOUNT}/proj/sub\nhi\nmissing 1\nNo such file or directory\n"
    );
    assert_eq!(text, want);
    // Nothing was made on the host through the links.
    let mut names: Vec<String> = std::fs::read_dir(host.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["l", "l2", "rel"]);
    assert!(!std::path::Path::new(MOUNT).exists());
}
