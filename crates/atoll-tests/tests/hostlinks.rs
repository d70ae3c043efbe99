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

/// Host programs that lead into the mount run as they would if the mount
/// were a kernel file system: a host symlink to a program in the mount,
/// and a host script whose `#!` interpreter is in the mount (bash's own
/// test suite runs scripts in `/tmp` with the bash it built). A missing
/// interpreter in the mount still fails as Linux fails it.
#[test]
fn host_links_and_scripts_into_the_mount_exec_as_on_linux() {
    let script = r#"
        H=$(mktemp -d /tmp/atoll-hostexec.XXXXXX)
        mkdir -p "$ROOT/bin" && cp /bin/sh "$ROOT/bin/mysh" && cp /bin/echo "$ROOT/bin/myecho"
        printf '#! %s/bin/mysh\necho "script ran with $1"\n' "$ROOT" > "$H/s" && chmod 755 "$H/s"
        "$H/s" one; echo "status $?"
        printf '#!%s/bin/mysh -e\necho "with an argument: $1"\n' "$ROOT" > "$H/s2" && chmod 755 "$H/s2"
        "$H/s2" two; echo "status $?"
        ln -s "$ROOT/bin/myecho" "$H/e"
        "$H/e" through a link; echo "status $?"
        ln -s "$H/s" "$H/sl"
        "$H/sl" three; echo "status $?"
        printf '#!%s/bin/missing\necho never\n' "$ROOT" > "$H/bad" && chmod 755 "$H/bad"
        "$H/bad" 2>/dev/null; echo "status $?"
        python3 -c "import subprocess,sys; print(subprocess.run([sys.argv[1], 'py']).returncode)" "$H/s"
        rm -rf "$H"
    "#;
    let out = atoll_tests::assert_same_on_tmpfs(&["--servers", "3"], script, true);
    assert!(out.contains("script ran with one\nstatus 0\n"), "{out}");
    assert!(out.contains("through a link\nstatus 0\n"), "{out}");
    assert!(out.contains("status 127\n"), "{out}");
}
