//! A working directory whose path is longer than `PATH_MAX`, as on Linux:
//! the `getcwd` system call fails with `ENAMETOOLONG` (the kernel builds
//! the path in one `PATH_MAX` page), and glibc's `getcwd` then walks `..`
//! up to `/` itself, matching each directory's inode number and device
//! against its parent's entries; at the mount's root that parent is the
//! host's `/`, whose listing has the mount's entry (client
//! `mountentry.rs`). What bash's `cd` and `pwd -P`, `/bin/pwd`, Python's
//! `os.getcwd()` and `getcwd(NULL, 0)` print is compared with the same
//! script on a tmpfs directory.

use atoll_tests::{assert_same_on_tmpfs, require};

/// 50 levels of 100-byte names (5,050 bytes below `$ROOT`), entered one
/// at a time by bash, then the path asked for in every way a program
/// asks.
const SCRIPT: &str = r#"
set -e
PY=$(python3 -c 'import sys; print(sys.executable)')
cd "$ROOT"
x=$(printf 'x%.0s' $(seq 98))
for i in $(seq -w 0 49); do mkdir "$i$x"; cd "$i$x"; done
want=$(printf "/%s$x" $(seq -w 0 49))
echo "pwd -P: $(pwd -P | sed "s|^$ROOT||" | cmp -s - <(echo "$want") && echo same)"
echo "/bin/pwd: $(/bin/pwd | sed "s|^$ROOT||" | cmp -s - <(echo "$want") && echo same)"
# Several at once, more of them than cores.
for i in 1 2 3 4 5 6; do /bin/pwd > "$ROOT/pwd$i" & done; wait
for i in 1 2 3 4 5 6; do cmp -s "$ROOT/pwd1" "$ROOT/pwd$i" || echo "pwd $i differs"; done
"$PY" - "$ROOT" <<'PY'
import ctypes, errno, os, sys
root = sys.argv[1]
want = root + "".join("/%02d%s" % (i, "x" * 98) for i in range(50))
libc = ctypes.CDLL(None, use_errno=True)
buf = ctypes.create_string_buffer(1 << 16)
r = libc.syscall(79, buf, len(buf))
print("getcwd(2):", r if r >= 0 else errno.errorcode[ctypes.get_errno()])
print("os.getcwd:", os.getcwd() == want)
libc.getcwd.restype = ctypes.c_char_p
print("getcwd(NULL, 0):", libc.getcwd(None, 0) == want.encode())
print("getcwd(buf, 64K):", libc.getcwd(buf, len(buf)) == want.encode())
small = ctypes.create_string_buffer(5000)
p = libc.getcwd(small, len(small))
print("getcwd(buf, 5000):", p, errno.errorcode.get(ctypes.get_errno()))
# glibc's walk by hand: each directory is the one entry of its parent
# with its device and inode number, and within one file system the
# listing's inode number is the one stat gives.
d = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
steps = bad = 0
while True:
    st = os.fstat(d)
    up = os.open("..", os.O_RDONLY | os.O_DIRECTORY, dir_fd=d)
    ust = os.fstat(up)
    if (ust.st_dev, ust.st_ino) == (st.st_dev, st.st_ino):
        break
    found = []
    for e in os.scandir(up):
        # Above the test's directory the walk lists shared directories
        # (/dev/shm, /dev) whose other entries may go meanwhile.
        try:
            s = os.stat(e.name, dir_fd=up, follow_symlinks=False)
        except FileNotFoundError:
            continue
        if (s.st_dev, s.st_ino) == (st.st_dev, st.st_ino):
            found.append(e.inode() == s.st_ino or ust.st_dev != st.st_dev)
    bad += found != [True]
    os.close(d)
    d = up
    steps += 1
print("walk:", steps - root.count("/"), "bad:", bad)
PY
cd "$ROOT" && rm -rf 00x* pwd? && ls -A && echo done
"#;

#[test]
fn a_cwd_longer_than_path_max_is_found_by_libcs_walk() {
    require("python3");
    for opts in [
        &["--servers", "2"][..],
        &["--servers", "3", "--distribute", "all"],
    ] {
        let out = assert_same_on_tmpfs(opts, SCRIPT, true);
        assert!(out.contains("getcwd(2): ENAMETOOLONG\n"), "{out}");
        assert!(out.contains("os.getcwd: True\n"), "{out}");
        assert!(out.contains("walk: 50 bad: 0\n"), "{out}");
    }
}
