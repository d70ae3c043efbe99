//! What real programs' own test suites found differing from tmpfs, each
//! cut down to the calls that differed and compared with the same script
//! on a host tmpfs (`assert_same_on_tmpfs`): GNU coreutils' `du`,
//! `readlink` and `pwd` tests (docs/COMPATIBILITY.md, "Real programs'
//! test suites").

use atoll_tests::{assert_same_on_tmpfs, require};

/// One server, and three with every directory spread over them.
const SHAPES: [&[&str]; 2] = [&[], &["--servers", "3", "--distribute", "all"]];

/// A trailing slash follows a final symlink even under `O_NOFOLLOW`
/// (coreutils' tests/du/trailing-slash.sh: fts opens `slink/` with
/// `O_NOFOLLOW | O_DIRECTORY`), for a directory, a file and a dangling
/// link, by `open`, `O_PATH` and `lstat`; without the slash, a link asked
/// for as a directory under `O_NOFOLLOW` is `ENOTDIR`, not `ELOOP`.
#[test]
fn a_trailing_slash_follows_a_final_symlink_as_on_tmpfs() {
    require("python3");
    require("du");
    let script = r#"
        cd "$ROOT" && mkdir -p d/sub/deeper && ln -s d sl && touch f && ln -s f fl && ln -s nowhere dl
        python3 - <<'PY'
import os
def t(label, fn):
    try:
        r = fn()
    except OSError as e:
        r = "error " + os.strerror(e.errno)
    print(label, r)
same = lambda fd: os.path.samestat(os.fstat(fd), os.stat("d"))
for name in ("sl/", "sl", "fl/", "dl/", "sl/sub/../"):
    for flags, what in ((os.O_NOFOLLOW, "nofollow"),
                        (os.O_NOFOLLOW | os.O_DIRECTORY, "nofollow|directory"),
                        (os.O_PATH | os.O_NOFOLLOW, "path|nofollow"),
                        (os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY, "path|nofollow|directory")):
        t("open %s %s" % (name, what), lambda: same(os.open(name, os.O_RDONLY | flags)))
    t("lstat %s" % name, lambda: oct(os.lstat(name).st_mode))
PY
        ln -s . slink && du slink/ | cut -f2 | sort
        ls -d sl/ fl/ 2>&1
    "#;
    for opts in SHAPES {
        let out = assert_same_on_tmpfs(opts, script, false);
        assert!(out.contains("open sl/ nofollow True"), "{opts:?}: {out}");
        assert!(out.contains("slink/d/sub/deeper"), "{opts:?}: {out}");
    }
}

/// `getcwd` of a removed working directory fails with `ENOENT` (coreutils'
/// tests/readlink/can-e.sh, can-f.sh, can-m.sh: `readlink -e .` there
/// prints nothing), whether the process itself or another one removed it,
/// and succeeds again once it moves to a live directory; a buffer of size
/// 0 is `EINVAL` (gnulib's test-getcwd-lgpl, in findutils' suite).
#[test]
fn getcwd_of_a_removed_directory_fails_as_on_tmpfs() {
    require("python3");
    require("readlink");
    let script = r#"
        cd "$ROOT" && mkdir -p live gone other/inner
        cd gone && rmdir ../gone
        readlink -e .; echo "readlink -e: $?"
        readlink -f . >/dev/null; echo "readlink -f: $?"
        python3 -c 'import os; os.getcwd()' 2>/dev/null; echo "getcwd: $?"
        cd "$ROOT/other/inner"
        (rm -r "$ROOT/other") & wait
        python3 -c 'import os; os.getcwd()' 2>/dev/null; echo "removed by another: $?"
        cd "$ROOT/live" && python3 -c 'import os; print(os.getcwd())'
        python3 - <<'PY'
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
buf = ctypes.create_string_buffer(4096)
for size in (0, 1, 4096):
    ctypes.set_errno(0)
    ok = libc.getcwd(buf, size) != 0
    print("getcwd size", size, ok, os.strerror(ctypes.get_errno()) if not ok else "")
PY
    "#;
    for opts in SHAPES {
        let out = assert_same_on_tmpfs(opts, script, false);
        assert!(out.contains("readlink -e: 1"), "{opts:?}: {out}");
        assert!(out.contains("removed by another: 1"), "{opts:?}: {out}");
        assert!(
            out.contains("getcwd size 0 False Invalid argument"),
            "{opts:?}: {out}"
        );
    }
}

/// A watch of a file hears it renamed by another process (`IN_MOVE_SELF`)
/// once the old name is gone, whichever servers hold the two entries and
/// the file (coreutils' tests/tail-2/F-vs-rename.sh, inotify-rotate.sh,
/// inotify-hash-abuse.sh: `tail -F` looks the old name up on that event
/// and reports it inaccessible).
#[test]
fn a_watched_file_renamed_by_another_process_hears_it_as_on_tmpfs() {
    require("python3");
    require("mv");
    let script = r#"
        cd "$ROOT" && python3 - <<'PY'
import ctypes, os, select, struct, subprocess
libc = ctypes.CDLL(None, use_errno=True)
IN_MOVE_SELF = 0x800
fd = libc.inotify_init1(0)
seen = []
for i in range(40):
    old = "f%d" % i
    open(old, "w").close()
    wd = libc.inotify_add_watch(fd, old.encode(), IN_MOVE_SELF)
    subprocess.run(["mv", old, "g%d" % i], check=True)
    # A missing event must fail the test, not hang it.
    if not select.select([fd], [], [], 30)[0]:
        seen.append("no event")
        continue
    w, mask, _, _ = struct.unpack_from("iIII", os.read(fd, 4096))
    seen.append((w == wd, mask, os.path.exists(old), os.path.exists("g%d" % i)))
print(len(seen), sorted(set(seen), key=str))
PY
    "#;
    for opts in SHAPES {
        let out = assert_same_on_tmpfs(opts, script, false);
        assert!(
            out.contains("40 [(True, 2048, False, True)]"),
            "{opts:?}: {out}"
        );
    }
}
