//! Hare's scalability protocols under concurrency (Hare §3.3-3.7, §5.4):
//! distributed directories with many servers, the directory-lookup cache
//! and its invalidations, three-phase rmdir, directory broadcast, hybrid
//! file descriptors and message coalescing — each also switched off with
//! `--without`, and every result compared with the same script on a host
//! directory where the outcome is deterministic.

use atoll_tests::{assert_same, run_in_atoll};

/// Instance configurations every test runs in: ordinary (one server),
/// distributed directories over 2, 4 and 8 servers, and the ablations.
const MODES: &[&[&str]] = &[
    &["--servers", "1"],
    &["--servers", "2", "--distribute", "all"],
    &["--servers", "4", "--distribute", "all"],
    &["--servers", "8", "--distribute", "all"],
    &["--servers", "3"],
    &[
        "--servers",
        "4",
        "--distribute",
        "all",
        "--without",
        "dir-cache",
        "--without",
        "broadcast",
    ],
    &[
        "--servers",
        "4",
        "--distribute",
        "all",
        "--without",
        "hybrid-fd",
        "--without",
        "coalescing",
    ],
    &["--servers", "1", "--incoherent"],
    &["--servers", "3", "--distribute", "all", "--incoherent"],
];

fn in_atoll(opts: &[&str], script: &str) -> String {
    let out = run_in_atoll(opts, script);
    assert!(
        out.status.success(),
        "{opts:?}: status {:?}\n--- stdout:\n{}\n--- stderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Many processes create, rename and unlink in one directory at once; every
/// surviving name appears exactly once in readdir.
#[test]
fn concurrent_create_rename_unlink_in_one_directory() {
    let script = r#"
set -e
mkdir "$ROOT/d"
for p in 0 1 2 3 4 5; do
  (
    for j in $(seq 0 39); do
      echo "$p.$j" > "$ROOT/d/f$p-$j"
      if [ $((j % 2)) = 0 ]; then mv "$ROOT/d/f$p-$j" "$ROOT/d/g$p-$j"; fi
      if [ $((j % 3)) = 0 ]; then rm -f "$ROOT/d/f$p-$j" "$ROOT/d/g$p-$j"; fi
    done
  ) &
done
wait
ls "$ROOT/d" | sort | uniq -d | sed 's/^/DUPLICATE /'
ls "$ROOT/d" | wc -l
ls "$ROOT/d" | sort | md5sum
cat "$ROOT"/d/g1-* | sort | md5sum
"#;
    for opts in MODES {
        assert_same(opts, script, true);
    }
}

/// A long-lived process (the shell itself) caches lookups; other processes
/// remove, replace and move the names; the shell never acts on a stale
/// entry (Hare §3.7.2: invalidations are in its inbox before the other
/// process's call returns).
#[test]
fn lookup_cache_is_never_stale() {
    let script = r#"
cd "$ROOT"
mkdir -p a/b d
for i in $(seq 1 60); do
  echo $i > d/f
  [ -e d/f ] || echo "MISSING $i"
  /bin/rm d/f
  [ -e d/f ] && echo "STALE $i"
  echo new$i > d/g
  [ -f d/g ] || echo "MISSING g $i"
  /bin/mv d/g d/h
  [ -e d/g ] && echo "STALE g $i"
  read v < d/h; [ "$v" = "new$i" ] || echo "WRONG $v"
  /bin/rm d/h
done
echo 1 > a/b/f
[ -e a/b/f ] && echo cached
/bin/mv a c
[ -e a/b/f ] && echo "STALE dir"
[ -e c/b/f ] && echo moved
/bin/mkdir a
[ -e a/b ] && echo "STALE subdir"
/bin/rmdir a
/bin/mkdir -p a/b
[ -e a/b/f ] && echo "STALE file in new dir"
touch a/b/f
/bin/rm -r c
[ -e c/b/f ] && echo "STALE removed tree"
[ -e a/b/f ] && echo "new tree"
echo done
"#;
    for opts in MODES {
        assert_same(opts, script, true);
    }
}

/// `mkdir` of a name the process's lookup cache holds answers `EEXIST`
/// without asking a server, and never from a stale entry: a long-lived
/// process makes an existing directory again (`EEXIST`, cached), other
/// processes remove it, move it away or put a file there, and its next
/// `mkdir` sees each change at once.
#[test]
fn mkdir_of_a_cached_name_is_never_stale() {
    atoll_tests::require("python3");
    let script = r#"
cd "$ROOT"
mkdir d
python3 - <<'PY'
import os, subprocess
def mk(p):
    try:
        os.mkdir(p)
        return "made"
    except OSError as e:
        return os.strerror(e.errno)
for i in range(20):
    os.stat("d")
    a = mk("d")
    subprocess.run(["rmdir", "d"], check=True)
    b = mk("d")
    c = mk("d/")
    subprocess.run(["mv", "d", "e"], check=True)
    d = mk("d")
    subprocess.run(["rmdir", "d"], check=True)
    subprocess.run(["touch", "d"], check=True)
    f = mk("d")
    os.unlink("d"); os.rmdir("e")
    g = mk("d")
    print(i, a, b, c, d, f, g)
PY
"#;
    for opts in MODES {
        assert_same(opts, script, true);
    }
}

/// Readers of a name that is replaced by rename over and over never find
/// it missing, cross-server renames included.
#[test]
fn rename_over_readers_never_see_the_target_missing() {
    let script = r#"
cd "$ROOT"
mkdir d
echo 0 > d/target
(
  for i in $(seq 1 150); do
    echo $i > d/tmp$i
    mv d/tmp$i d/target
  done
) &
for r in 1 2 3; do
  (
    for k in $(seq 1 150); do
      [ -e d/target ] || echo MISSING
      read v < d/target || echo UNREADABLE
    done
  ) &
done
wait
cat d/target
ls d
"#;
    for opts in MODES {
        let out = in_atoll(opts, script);
        assert_eq!(out, "150\ntarget\n", "{opts:?}");
    }
}

/// Concurrent rmdirs of one directory: exactly one wins, the others fail
/// with ENOENT as on Linux (they wait for the winner's outcome); rmdir racing
/// creations inside the directory never leaves a file in a removed
/// directory (three-phase rmdir, Hare §3.4.1).
#[test]
fn rmdir_races() {
    let script = r#"
cd "$ROOT"
mkdir d e
for round in $(seq 1 15); do
  mkdir d/x
  for p in 1 2 3 4 5 6; do (rmdir d/x 2>e/$p && echo won > d/won$round.$p) & done
  wait
  ls d | grep -c "^won$round\." 
  [ -e d/x ] && echo "x survived"
  # Losers see what Linux says to them: ENOENT (never EBUSY or EAGAIN).
  cat e/* | grep -v 'No such file or directory' | sed 's/^/BAD /'
done
for round in $(seq 1 15); do
  mkdir d/y
  (touch d/y/f 2>e/t) &
  rmdir d/y 2>e/r
  wait
  cat e/t e/r | grep -v 'No such file or directory\|Directory not empty' | sed 's/^/BAD /'
  if [ -e d/y/f ]; then [ -d d/y ] || echo "ORPHAN"; rm d/y/f; fi
  rmdir d/y 2>/dev/null
  [ -e d/y ] && echo "y survived"
done
echo done
"#;
    let expected: String = "1\n".repeat(15) + "done\n";
    for opts in MODES {
        let out = in_atoll(opts, script);
        assert_eq!(out, expected, "{opts:?}");
    }
}

/// Several `rm -rf` of one populated tree at once (Hare §3.4.1 under
/// contention): every process succeeds or fails only with ENOENT (never
/// EBUSY or EAGAIN), nothing hangs, and the tree is gone.
#[test]
fn parallel_rm_rf_of_one_distributed_tree() {
    let script = r#"
cd "$ROOT"
mkdir errs
for round in 1 2 3 4; do
  for a in a b c d; do
    for b in 1 2 3; do
      mkdir -p t/$a/$b/deep/er
      for f in x y z; do echo $f > t/$a/$b/$f; echo $f > t/$a/$b/deep/er/$f; done
    done
    touch t/$a/file
  done
  for p in 1 2 3 4; do (rm -rf t 2> errs/$p; echo $? > errs/st$p) & done
  wait
  [ -e t ] && echo "round $round: tree survived"
  for p in 1 2 3 4; do
    grep -v 'No such file or directory' errs/$p | sed "s/^/round $round: bad error: /"
  done
done
echo done
"#;
    for opts in MODES {
        let out = assert_same(opts, script, false);
        assert_eq!(out, "done\n", "{opts:?}");
    }
}

/// Checks one directory from python3: `..` as resolved by
/// `openat(fd, "..")` against its parent, each entry (subdirectories with
/// their own `..` and listing, files with their content), and `nlink` of
/// the directory and its parent.
const CHECK_DIR_PY: &str = r#"
import os, sys
d, parent = sys.argv[1], sys.argv[2]
def up_of(p):
    fd = os.open(p, os.O_RDONLY | os.O_DIRECTORY)
    st = os.stat("..", dir_fd=fd)
    os.close(fd)
    return (st.st_dev, st.st_ino)
def ident(p):
    st = os.stat(p)
    return (st.st_dev, st.st_ino)
print(d, "dotdot", "ok" if up_of(d) == ident(parent) else "WRONG")
for name in sorted(os.listdir(d)):
    p = os.path.join(d, name)
    if os.path.isdir(p):
        ok = "up-ok" if up_of(p) == ident(d) else "up-WRONG"
        print(" ", name, "dir", ok, sorted(os.listdir(p)))
    else:
        print(" ", name, open(p).read().strip())
for p in (d, parent):
    print("nlink", p, os.stat(p).st_nlink)
"#;

/// `mv` of directories with contents between directories and across
/// servers, into other (distributed) directories: contents, `..`, the
/// moved directory's subdirectories and the parents' link counts match the
/// host, distributed directories included.
#[test]
fn moving_directories_with_contents_matches_the_host() {
    atoll_tests::require("python3");
    let script = format!(
        r#"
cd "$ROOT"
cat > /tmp/atoll-check-dir-$$.py <<'PYEOF'
{CHECK_DIR_PY}
PYEOF
check() {{ python3 /tmp/atoll-check-dir-$$.py "$1" "$2"; }}
mkdir -p src/tree/sub1/sub2 dst/inner other
for i in 1 2 3 4 5 6 7 8 9; do
  echo "f$i" > src/tree/f$i; mkdir src/tree/d$i; echo "g$i" > src/tree/d$i/g
done
echo deep > src/tree/sub1/sub2/leaf
for n in 1 2 3 4 5 6 7 8 9 10 11 12; do
  i0=$(stat -c %i src/tree)
  mv src/tree dst/m$n || echo "mv $n failed"
  [ "$(stat -c %i dst/m$n)" = "$i0" ] || echo "mv $n copied instead of renaming"
  check dst/m$n dst
  mv dst/m$n dst/inner/i$n || echo "mv inner $n failed"
  check dst/inner/i$n dst/inner
  mv dst/inner/i$n src/tree || echo "mv back $n failed"
done
check src/tree src
mv src/tree/sub1 other/moved
check other/moved other
mkdir -p empty/e1 full/f1
touch full/f1/x
ren() {{ python3 -c 'import os, sys
try:
    os.rename(sys.argv[1], sys.argv[2]); print("renamed")
except OSError as e:
    print(e.strerror)' "$1" "$2"; }}
ren other/moved empty/e1
check empty/e1 empty
ren empty/e1 full/f1
ren src/tree src/tree/d1/inside
ren src/tree/d1 src/tree/d1
ren src/tree/f1 src/tree/d2
ren src/tree/d2 src/tree/f2
ls -R src empty full other | md5sum
find . | sort | md5sum
rm /tmp/atoll-check-dir-$$.py
"#
    );
    let (dir, host) = atoll_tests::run_on_host(&script);
    let (hs, hout, herr) = atoll_tests::normalized(&host, dir.path());
    assert_eq!(hs, 0, "host: {herr}");
    assert!(
        !hout.contains("WRONG") && !hout.contains("failed"),
        "{hout}"
    );
    for opts in MODES {
        let out = in_atoll(opts, &script);
        assert_eq!(hout.lines().count(), out.lines().count(), "{opts:?}\n{out}");
        for (h, a) in hout.lines().zip(out.lines()) {
            assert_eq!(h, a, "{opts:?}\n--- host:\n{hout}\n--- atoll:\n{out}");
        }
    }
}

/// Two processes rename one populated directory to different names (in
/// different distributed directories) at once: exactly one wins, the
/// other gets ENOENT, the directory exists once with all its contents.
#[test]
fn concurrent_renames_of_one_directory_have_one_winner() {
    atoll_tests::require("python3");
    let script = r#"
cd "$ROOT"
mkdir -p d/src/sub x y
for i in 1 2 3 4 5 6; do echo $i > d/src/f$i; echo $i > d/src/sub/g$i; done
ren() { python3 -c 'import os, sys
try:
    os.rename(sys.argv[1], sys.argv[2]); print("won")
except OSError as e:
    print(e.strerror)' "$1" "$2"; }
for round in 1 2 3 4 5 6 7 8; do
  ren d/src x/a$round > r1 & ren d/src y/b$round > r2 & wait
  cat r1 r2 | sort | uniq -c | sed 's/^ *//'
  ls -d x/a$round y/b$round 2>/dev/null | wc -l
  mv x/a$round d/src 2>/dev/null || mv y/b$round d/src
  [ -d d/src ] || echo "LOST round $round"
done
find . -path ./r1 -prune -o -path ./r2 -prune -o -print | sort
cat d/src/f* d/src/sub/g* | md5sum
"#;
    for opts in MODES {
        let out = in_atoll(opts, script);
        assert_eq!(
            out.matches("1 No such file or directory\n1 won\n1\n")
                .count(),
            8,
            "{opts:?}\n{out}"
        );
        assert!(!out.contains("LOST"), "{opts:?}\n{out}");
        let (dir, host) = atoll_tests::run_on_host(script);
        let host = atoll_tests::normalized(&host, dir.path()).1;
        let tail = |s: &str| s.lines().skip(8 * 3).collect::<Vec<_>>().join("\n");
        assert_eq!(tail(&host), tail(&out), "{opts:?}");
    }
}

/// `renameat2(RENAME_EXCHANGE)` of directories with contents (and of a
/// directory with a file) between distributed directories, across servers:
/// contents, `..` and errors match the host.
#[test]
fn exchanging_directories_matches_the_host() {
    atoll_tests::require("python3");
    let script = r#"
cd "$ROOT"
python3 - <<'PYEOF'
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD, RENAME_EXCHANGE = -100, 2
def xchg(a, b):
    r = libc.renameat2(AT_FDCWD, a.encode(), AT_FDCWD, b.encode(), RENAME_EXCHANGE)
    print("xchg", a, b, "ok" if r == 0 else os.strerror(ctypes.get_errno()))
def up_ok(d):
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    up = os.stat("..", dir_fd=fd).st_ino
    os.close(fd)
    return up == os.stat(os.path.dirname(d) or ".").st_ino
for d in ("p", "q"):
    for i in range(6):
        os.makedirs("%s/d%d/sub" % (d, i))
        open("%s/d%d/f" % (d, i), "w").write("%s%d" % (d, i))
    open(d + "/file", "w").write(d)
for i in range(6):
    xchg("p/d%d" % i, "q/d%d" % ((i + 1) % 6))
xchg("p/d0", "p/file")
xchg("p/d1", "p/d1/sub")
xchg("p/nope", "q/d1")
for root, ds, fs in sorted(os.walk(".")):
    for n in sorted(ds):
        p = os.path.join(root, n)
        print(p, "up-ok" if up_ok(p) else "up-WRONG", sorted(os.listdir(p)))
    for n in sorted(fs):
        print(os.path.join(root, n), open(os.path.join(root, n)).read())
PYEOF
"#;
    for opts in MODES {
        let out = assert_same(opts, script, true);
        assert!(!out.contains("up-WRONG"), "{opts:?}\n{out}");
    }
}

/// Concurrent directory moves, rmdirs, mkdirs and creations in a
/// distributed tree (four processes, each a python3 loop with its own
/// seed): every call fails only with errors Linux gives such races, and
/// afterwards the tree is consistent — every directory reached once, its
/// `..` its parent, and `rm -rf` removes it all.
#[test]
fn concurrent_moves_rmdirs_and_creations_keep_the_tree_consistent() {
    atoll_tests::require("python3");
    let script = r#"
cd "$ROOT"
mkdir -p t/a/x/w t/b/y t/c/z t/d
cat > /tmp/atoll-stress-$$.py <<'PYEOF'
import errno, os, random, sys
r = random.Random(int(sys.argv[1]))
ok_errors = {errno.ENOENT, errno.ENOTEMPTY, errno.EEXIST, errno.EINVAL,
             errno.ENOTDIR, errno.EISDIR}
dirs = ["t/a", "t/b", "t/c", "t/d", "t/a/x", "t/b/y", "t/c/z", "t/a/x/w"]
names = ["n%d" % i for i in range(4)]
bad = 0
for step in range(300):
    d1, d2 = r.choice(dirs), r.choice(dirs)
    a, b = os.path.join(d1, r.choice(names)), os.path.join(d2, r.choice(names))
    op = r.choice([0, 0, 1, 2, 2, 2, 3, 4])
    try:
        if op == 0:
            os.mkdir(a)
        elif op == 1:
            os.rmdir(a)
        elif op == 2:
            os.rename(a, b)
        elif op == 3:
            open(os.path.join(a, "f"), "w").write("x")
        else:
            os.unlink(os.path.join(a, "f"))
    except OSError as e:
        if e.errno not in ok_errors:
            print("BAD", op, a, b, errno.errorcode.get(e.errno, e.errno))
            bad += 1
PYEOF
for p in 1 2 3 4; do python3 /tmp/atoll-stress-$$.py $p & done
wait
rm /tmp/atoll-stress-$$.py
python3 - <<'PYEOF'
import os
seen = {}
for root, ds, fs in os.walk("t"):
    for n in ds:
        p = os.path.join(root, n)
        st = os.stat(p)
        if st.st_ino in seen:
            print("TWICE", p, seen[st.st_ino])
        seen[st.st_ino] = p
        fd = os.open(p, os.O_RDONLY | os.O_DIRECTORY)
        if os.stat("..", dir_fd=fd).st_ino != os.stat(root).st_ino:
            print("WRONG-UP", p)
        os.close(fd)
print("walked")
PYEOF
rm -rf t && echo removed
ls -A
"#;
    for opts in MODES {
        let out = run_in_atoll(opts, script);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "walked\nremoved\n",
            "{opts:?}: status {:?}\n--- stderr:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Moves of directories racing rmdirs and mkdirs of the same few names
/// (six processes, two parents, three names): a directory caught between
/// a cross-server move and an rmdir is removed or moved, never both — no
/// name is left naming a removed directory and no directory keeps two
/// names (Hare §3.4.1 against the client-coordinated move of §6.2.3).
/// Every directory left must take a new entry and then be removable.
#[test]
fn directory_moves_racing_rmdirs_leave_no_stale_name() {
    atoll_tests::require("python3");
    let script = r#"
cd "$ROOT"
mkdir -p t/a t/b
cat > /tmp/atoll-race-$$.py <<'PYEOF'
import os, random, sys
r = random.Random(int(sys.argv[1]))
dirs, names = ["t/a", "t/b"], ["n0", "n1", "n2"]
for step in range(1500):
    a = os.path.join(r.choice(dirs), r.choice(names))
    b = os.path.join(r.choice(dirs), r.choice(names))
    op = r.choice([0, 1, 2, 2])
    try:
        if op == 0:
            os.mkdir(a)
        elif op == 1:
            os.rmdir(a)
        else:
            os.rename(a, b)
    except OSError:
        pass
PYEOF
for p in 1 2 3 4 5 6; do python3 /tmp/atoll-race-$$.py $RANDOM$p & done
wait
rm /tmp/atoll-race-$$.py
python3 - <<'PYEOF'
import os
seen = {}
for root, ds, fs in os.walk("t"):
    for n in ds:
        p = os.path.join(root, n)
        ino = os.stat(p).st_ino
        if ino in seen:
            print("TWO NAMES", p, seen[ino])
        seen[ino] = p
        os.mkdir(os.path.join(p, "probe"))
        os.rmdir(os.path.join(p, "probe"))
print("checked")
PYEOF
rm -rf t && echo removed
ls -A
"#;
    for opts in MODES {
        let out = run_in_atoll(opts, script);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "checked\nremoved\n",
            "{opts:?}: status {:?}\n--- stderr:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Two processes move two directories into each other at once, over and
/// over: the moves are serialized (the loser sees EINVAL or ENOENT, as on
/// Linux), so no cycle is ever cut off from the tree: both directories
/// stay reachable.
#[test]
fn crossed_directory_moves_never_detach_a_cycle() {
    atoll_tests::require("python3");
    let script = r#"
cd "$ROOT"
mkdir -p r/a r/b
python3 - <<'PYEOF'
import errno, os
def mover(src, dst):
    won = 0
    for i in range(300):
        try:
            os.rename(src, dst)
        except OSError as e:
            if e.errno not in (errno.ENOENT, errno.EINVAL):
                print("BAD", src, dst, errno.errorcode[e.errno], flush=True)
            continue
        won += 1
        try:
            os.rename(dst, src)
        except OSError:
            pass  # the other process moved a parent meanwhile
    os._exit(0)
kids = []
for src, dst in (("r/a", "r/b/x"), ("r/b", "r/a/y")):
    pid = os.fork()
    if pid == 0:
        mover(src, dst)
    kids.append(pid)
for k in kids:
    os.waitpid(k, 0)
print(sorted(n for _, ds, _ in os.walk("r") for n in ds))
PYEOF
"#;
    for opts in MODES {
        let out = in_atoll(opts, script);
        assert_eq!(out, "['a', 'b']\n", "{opts:?}");
    }
}

/// Property: random directory renames (into subtrees, over empty and
/// non-empty directories, over files, onto themselves) by a python3
/// program give the same results (every errno) and the same tree, `..`
/// included, as on a host directory.
#[test]
fn random_directory_renames_match_the_host() {
    atoll_tests::require("python3");
    for seed in 1..=4u64 {
        let script = format!(
            r#"
cd "$ROOT"
python3 - <<'PYEOF'
import errno, os, random
r = random.Random({seed})
dirs = ["a", "b", "c", "a/x", "b/y", "c/z", "a/x/q"]
for d in dirs:
    os.makedirs(d, exist_ok=True)
for i, d in enumerate(dirs):
    if i % 2 == 0:
        open(os.path.join(d, "file%d" % i), "w").write(str(i))
def names():
    out = []
    for root, ds, fs in os.walk("."):
        for n in ds + fs:
            out.append(os.path.relpath(os.path.join(root, n)))
    return sorted(out)
for step in range(150):
    existing = names()
    src = r.choice(existing + ["nope"])
    base = r.choice([d for d in existing if os.path.isdir(d)] + ["."])
    dst = os.path.join(base, r.choice(["n1", "n2", "a", "x", "y", "file0", "z"]))
    if r.random() < 0.2:
        dst = r.choice(existing)
    try:
        os.rename(src, dst)
        res = "ok"
    except OSError as e:
        res = errno.errorcode[e.errno]
    print(step, src, dst, res)
    if r.random() < 0.25:
        os.mkdir(os.path.join(base, "e%d" % step))
for n in names():
    if os.path.isdir(n):
        fd = os.open(n, os.O_RDONLY | os.O_DIRECTORY)
        up = os.stat("..", dir_fd=fd).st_ino
        os.close(fd)
        want = os.stat(os.path.dirname(n) or ".").st_ino
        print(n, "dir", "up-ok" if up == want else "up-WRONG", len(os.listdir(n)))
    else:
        print(n, open(n).read())
PYEOF
"#
        );
        let opts: &[&str] = match seed % 4 {
            0 => &["--servers", "2", "--distribute", "all"],
            1 => &["--servers", "4", "--distribute", "all"],
            2 => &["--servers", "3"],
            _ => &[
                "--servers",
                "8",
                "--distribute",
                "all",
                "--without",
                "dir-cache",
            ],
        };
        let out = assert_same(opts, &script, true);
        assert!(!out.contains("up-WRONG"), "{opts:?}\n{out}");
    }
}

/// Descriptions shared by fork: O_APPEND writers lose nothing, and a
/// shared plain offset (moved to the server at fork, Hare §3.5.1) keeps
/// every write, including the parent's before and after.
#[test]
fn shared_descriptions_lose_nothing() {
    let script = r#"
cd "$ROOT"
exec 3>>log
for p in 1 2 3 4; do (for i in $(seq 1 50); do echo "$p-$i" >&3; done) & done
for p in 5 6; do (for i in $(seq 1 50); do echo "$p-$i" >> log; done) & done
wait
exec 3>&-
wc -l < log
sort log | md5sum
exec 4>plain
echo head >&4
for p in 1 2 3; do (for i in $(seq 1 30); do echo "$p-$i" >&4; done) & done
wait
echo tail >&4
exec 4>&-
wc -l < plain
head -1 plain
tail -1 plain
sort plain | md5sum
exec 5<plain
read first <&5
(read second <&5; echo "$second" > second.txt)
read third <&5
[ "$first" = head ] && echo first-ok
[ "$(sed -n 2p plain)" = "$(cat second.txt)" ] && echo child-ok
[ "$(sed -n 3p plain)" = "$third" ] && echo parent-ok
"#;
    for opts in MODES {
        let out = assert_same(opts, script, true);
        assert!(out.starts_with("300\n"), "{opts:?}: {out}");
    }
}

/// Offsets held by the client: seeks and reads/writes at the local offset,
/// then an exec'd program continues at the same offset.
#[test]
fn local_offsets_and_exec_hand_over() {
    let script = r#"
cd "$ROOT"
printf 'abcdefghij' > f
exec 3<>f
read -n 3 x <&3; echo "$x"
printf XY >&3
read -n 2 y <&3; echo "$y"
cat <&3; echo
exec 3<f
read -n 4 z <&3
head -c 3 <&3; echo
read -n 2 w <&3; echo "$z $w"
cat f; echo
exec 6<>g
(true <&6)
for i in $(seq 1 40); do printf "$i," >&6; done
(printf 'child,' >&6)
for i in $(seq 41 60); do printf "$i," >&6; done
read -n 5 -u 6 x; echo "at end: '$x'"
exec 6>&-
cat g; echo
"#;
    for opts in MODES {
        assert_same(opts, script, true);
    }
}

/// A tiny deterministic generator (xorshift) for the random-program test.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn pick<'a>(&mut self, v: &[&'a str]) -> &'a str {
        v[(self.next() % v.len() as u64) as usize]
    }
}

/// Property: a random sequence of namespace and data operations has the
/// same visible outcome (every exit status, listings, contents) on atoll,
/// for random server counts and modes, as on a host directory.
#[test]
fn random_programs_match_the_host() {
    let names = [
        "a", "b", "c", "d1", "d1/e", "d1/f", "d2", "d2/g", "d1/d3", "d1/d3/h",
    ];
    for seed in 1..=6u64 {
        let mut r = Rng(0x9e37_79b9_7f4a_7c15 ^ (seed * 0x1234_5678_9abc));
        let mut s = String::from("cd \"$ROOT\"\n");
        for step in 0..70 {
            let a = r.pick(&names);
            let b = r.pick(&names);
            let line = match r.next() % 11 {
                0 | 1 => format!("echo {step} > {a}"),
                2 => format!("echo {step} >> {a}"),
                3 | 4 => format!("mkdir {a}"),
                5 => format!("mv -T {a} {b}"),
                6 => format!("rm {a}"),
                7 => format!("rmdir {a}"),
                8 => format!("ln {a} {b}"),
                9 => format!("cat {a}"),
                _ => format!("ls -a {a}"),
            };
            s.push_str(&format!("{{ {line}; }} 2>/dev/null; echo \"{step}:$?\"\n"));
        }
        s.push_str("find . | sort\nfind . -type f | sort | xargs -r cat\n");
        let servers = ["1", "2", "3", "5", "8"][(r.next() % 5) as usize];
        let mut opts = vec!["--servers", servers];
        match r.next() % 4 {
            0 => opts.extend(["--distribute", "all"]),
            1 => opts.extend(["--distribute", "all", "--without", "dir-cache"]),
            2 => opts.extend(["--without", "hybrid-fd", "--without", "coalescing"]),
            _ => {}
        }
        assert_same(&opts, &s, true);
    }
}

/// `--stats-json` reports the techniques' counters. The offset shared
/// with `(true)` is taken back once its server has seen that child's
/// session end, which it learns asynchronously: 400 writes give the
/// client 25 chances to ask (one every `RECLAIM_EVERY`), not 2, so a
/// loaded machine does not make it miss them all.
#[test]
fn counters_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("s.json");
    let script = r#"
cd "$ROOT"
mkdir -p d/e
for i in $(seq 1 20); do [ -e d/e ] && touch d/e/f$i; done
ls d/e > /dev/null
exec 6>g
(true)
for i in $(seq 1 400); do echo $i >&6; done
exec 6>&-
rm d/e/f1
[ -e d/e/f1 ] || true
rm -r d
"#;
    let j = json.to_string_lossy().to_string();
    in_atoll(
        &["--servers", "4", "--distribute", "all", "--stats-json", &j],
        script,
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let k = &v["counters"];
    assert!(k["dcache.hits"].as_u64().unwrap_or(0) > 0, "{k}");
    assert!(
        k["dcache.invalidations_sent"].as_u64().unwrap_or(0) > 0,
        "{k}"
    );
    assert!(k["broadcasts"].as_u64().unwrap_or(0) > 0, "{k}");
    assert!(k["rmdir.three_phase"].as_u64().unwrap_or(0) > 0, "{k}");
    assert!(
        k["hybrid_fd.offsets_shared"].as_u64().unwrap_or(0) > 0,
        "{k}"
    );
    assert!(
        k["hybrid_fd.offsets_reclaimed"].as_u64().unwrap_or(0) > 0,
        "{k}"
    );
    // 21 files created, each with one message (Hare §3.7.4).
    let creates = k["coalescing.combined_creates"].as_u64().unwrap_or(0);
    assert!(creates >= 21, "{k}");
    assert!(
        k["coalescing.messages_saved"].as_u64().unwrap_or(0) >= 2 * creates,
        "{k}"
    );
}

/// Incoherent emulation (Hare §3.3.1): close-to-open holds, and a reader
/// that keeps its file open may see old data (its private copy), while on
/// coherent memory it sees the new bytes at once.
#[test]
fn close_to_open_on_incoherent_memory() {
    atoll_tests::require("python3");
    let script = r#"
cd "$ROOT"
python3 - <<'EOF'
import os
p = os.path.join(os.environ["ROOT"], "f")
with open(p, "w") as f:
    f.write("old\n")
fd = os.open(p, os.O_RDONLY)
print("first", os.pread(fd, 100, 0).decode().strip(), flush=True)
os.system("printf NEW | dd of=f conv=notrunc status=none")
print("kept open", os.pread(fd, 100, 0).decode().strip(), flush=True)
fd2 = os.open(p, os.O_RDONLY)
print("reopened", os.pread(fd2, 100, 0).decode().strip(), flush=True)
EOF
cat f
"#;
    let coherent = in_atoll(&["--servers", "2"], script);
    assert_eq!(coherent, "first old\nkept open NEW\nreopened NEW\nNEW\n");
    for opts in [
        &["--servers", "2", "--incoherent"][..],
        &["--servers", "1", "--incoherent", "--without", "hybrid-fd"][..],
    ] {
        let out = in_atoll(opts, script);
        assert_eq!(
            out, "first old\nkept open old\nreopened NEW\nNEW\n",
            "{opts:?}"
        );
    }
}

/// Instance configurations of the permission tests: one server, entries on
/// servers that do not own their directory (distributed over 2 and 4, with
/// and without the lookup cache), and plain directories over 3 servers.
const PERMISSION_MODES: &[&[&str]] = &[
    &["--servers", "1"],
    &["--servers", "2", "--distribute", "all"],
    &["--servers", "4", "--distribute", "all"],
    &[
        "--servers",
        "4",
        "--distribute",
        "all",
        "--without",
        "dir-cache",
    ],
    &["--servers", "3"],
];

/// Write permission and the sticky bit (Hare §3.4, §3.7.1) for every kind
/// of name change, as `nobody`, with enough names that every server holds
/// some: nothing may be created in, removed from or renamed within a
/// root-owned 0755 directory, and in a sticky 1777 directory only one's
/// own names (or every name, for the directory's owner) may go.
#[test]
fn write_permission_and_sticky_bit_hold_on_every_shard() {
    atoll_tests::require("setpriv");
    let script = r#"
chmod 755 "$ROOT"
mkdir "$ROOT/pub" "$ROOT/tmp" "$ROOT/own"
chmod 1777 "$ROOT/tmp" "$ROOT/own"
chown 65534:65534 "$ROOT/own"
for i in $(seq 0 23); do
  echo r > "$ROOT/pub/r$i"; mkdir "$ROOT/pub/e$i"
  echo r > "$ROOT/tmp/r$i"; echo r > "$ROOT/own/r$i"
done
setpriv --reuid=65534 --regid=65534 --clear-groups bash -c '
t() { if out=$("$@" 2>&1); then echo "ok $*"; else echo "fail $*: ${out##*: }"; fi; }
for i in $(seq 0 23); do
  t sh -c "echo o > $ROOT/tmp/o$i"
  t sh -c "echo x > $ROOT/pub/n$i"
  t mkdir "$ROOT/pub/d$i"
  t ln -s x "$ROOT/pub/s$i"
  t mkfifo "$ROOT/pub/p$i"
  t ln "$ROOT/tmp/o$i" "$ROOT/pub/h$i"
  t rm -f "$ROOT/pub/r$i"
  t rmdir "$ROOT/pub/e$i"
  t mv "$ROOT/pub/r$i" "$ROOT/pub/m$i"
  t mv "$ROOT/tmp/o$i" "$ROOT/pub/o$i"
  t rm -f "$ROOT/tmp/r$i"
  t mv "$ROOT/tmp/r$i" "$ROOT/tmp/q$i"
  t mv -f "$ROOT/tmp/o$i" "$ROOT/tmp/r$i"
  t mv "$ROOT/tmp/o$i" "$ROOT/tmp/k$i"
  t ln "$ROOT/tmp/k$i" "$ROOT/tmp/l$i"
  t rm "$ROOT/tmp/l$i"
  t mv "$ROOT/own/r$i" "$ROOT/own/q$i"
  t rm "$ROOT/own/q$i"
done
'
ls "$ROOT/pub" | sort | md5sum
ls "$ROOT/tmp" | sort | md5sum
ls "$ROOT/own" | wc -l
"#;
    let (dir, host) = atoll_tests::run_on_host(script);
    let host = atoll_tests::normalized(&host, dir.path());
    assert!(
        host.1
            .contains("fail rm -f $ROOT/tmp/r0: Operation not permitted")
            && host
                .1
                .contains("fail mkdir $ROOT/pub/d0: Permission denied"),
        "host: {host:?}"
    );
    for opts in PERMISSION_MODES {
        assert_same(opts, script, true);
    }
}

/// A directory with the set-group-id bit gives its group to every new
/// name, and the bit to new subdirectories (Linux `inode_init_owner`),
/// whichever server holds the entry and the new inode; a caller outside
/// that group loses the set-group-id bit of a new file.
#[test]
fn set_group_id_directories_pass_their_group_on_every_shard() {
    atoll_tests::require("setpriv");
    // Run by `nobody`: a python3 outside root's home.
    assert!(
        std::path::Path::new("/usr/bin/python3").exists(),
        "/usr/bin/python3 is not installed"
    );
    let script = r#"
umask 022
chmod 755 "$ROOT"
mkdir "$ROOT/sg" "$ROOT/sgw"
chgrp 4242 "$ROOT/sg" "$ROOT/sgw"
chmod 2775 "$ROOT/sg"
chmod 2777 "$ROOT/sgw"
for i in $(seq 0 15); do
  echo f > "$ROOT/sg/f$i"; mkdir "$ROOT/sg/d$i"; mkfifo "$ROOT/sg/p$i"
  ln -s x "$ROOT/sg/s$i"; mkdir "$ROOT/sg/d$i/sub"; echo g > "$ROOT/sg/d$i/sub/g"
done
setpriv --reuid=65534 --regid=65534 --clear-groups /usr/bin/python3 -c '
import os
for i in range(16):
    os.close(os.open(os.environ["ROOT"] + "/sgw/n%d" % i, os.O_CREAT | os.O_WRONLY, 0o2775))
    os.mkdir(os.environ["ROOT"] + "/sgw/m%d" % i, 0o775)
'
cd "$ROOT"
find sg sgw | sort | while read -r p; do stat -c '%n %u %g %a %F' "$p"; done
"#;
    for opts in PERMISSION_MODES {
        assert_same(opts, script, true);
    }
}
