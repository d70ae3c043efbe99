//! Tools new users bring, run in the mount and compared with the same
//! commands on a host directory (`assert_same`): copies that keep
//! ownership, modes, hard links, extended attributes and POSIX ACLs
//! (`rsync -aHAX`, `cp -a`, `tar --acls --xattrs`), the ACLs themselves
//! (`setfacl`, `getfacl`, their effect on the mode and on access), and
//! sqlite3 databases written by two processes at once.

use atoll_tests::OutputBounded as _;
use atoll_tests::{assert_same, require};

/// Shell function `show DIR`: every name under DIR in sorted order with
/// its type, mode (with `ls`'s `+` for an ACL), link count and size (not
/// for directories, whose sizes are the file system's own), then its
/// ACL and its extended attributes, then which names are hard links of
/// one another.
const SHOW: &str = r#"
show() (
    cd "$1"
    find . | sort | while read -r f; do
        t=$(stat -c %F "$f")
        case $t in directory) s=-;; *) s=$(stat -c %s "$f");; esac
        echo "$(ls -ld "$f" | cut -c1-11) $(stat -c %h "$f") $s $f"
        [ -L "$f" ] || getfacl -cp "$f" | grep -v '^$' | sed 's/^/    /'
        getfattr -h -d -m '^user\.' "$f" 2>/dev/null | grep -v -e '^#' -e '^$' | sed 's/^/    xattr /'
    done
    find . -type f -links +1 -printf '%i %p\n' | sort -k2 |
        awk '{g[$1] = g[$1] " " $2} END {for (i in g) print "linked:" g[i]}' | sort
)
"#;

/// A tree with hard links, a FIFO, a symlink, user xattrs, access ACLs
/// with named users and groups, and a default ACL.
const TREE: &str = r#"
mkdir -p src/d/e
echo a > src/a; ln src/a src/a2; echo b > src/d/b; mkfifo src/p; ln -s ../a src/d/l
chmod 640 src/d/b; chmod 1777 src/d/e
setfattr -n user.k -v v1 src/a
setfacl -m u:nobody:rwx,g:nogroup:r src/d/b
setfacl -m u:nobody:r-x src/d
setfacl -m g:nogroup:rw src/p
setfacl -d -m g:nogroup:rx src/d/e
"#;

fn tools() {
    for p in ["setfacl", "getfacl", "setfattr", "getfattr", "rsync", "tar"] {
        require(p);
    }
}

#[test]
fn acls_set_read_and_follow_chmod_as_on_linux() {
    tools();
    let script = format!(
        r#"
        set -e
        cd "$ROOT"
        {SHOW}
        {TREE}
        show src
        echo '-- chmod rewrites the ACL (mask, owner, other)'
        chmod 604 src/d/b && getfacl -cp src/d/b
        echo '-- an ACL that says no more than the mode is not kept'
        setfacl -m u::rwx,g::r,o::- src/a && ls -l src/a | cut -c1-11 && getfattr -m - src/a | grep -c posix_acl || true
        echo '-- a default ACL only on directories'
        setfacl -d -m u:nobody:r src/a 2>&1 | sed 's/:.*:/:/' || true
        echo '-- removal'
        setfacl -b src/d/b && ls -l src/d/b | cut -c1-11
        setfacl -k src/d/e && getfacl -cp src/d/e
        echo '-- no ACL on a symlink; security attributes'
        getfattr -h -n system.posix_acl_access src/d/l 2>&1 | sed 's/^[^:]*: //'
        getfattr -h -n security.x src/a 2>&1 | sed 's/^[^:]*: //'
        setfattr -n security.x -v sec src/a && getfattr -n security.x src/a | grep =
        "#
    );
    let out = assert_same(&[], &script, true);
    eprintln!("{out}");
    assert!(out.contains("user:nobody:rwx") && out.contains("default:group:nogroup:r-x"));
}

#[test]
fn acls_decide_access_for_named_users_and_groups() {
    tools();
    require("setpriv");
    // As `nobody` (uid and group 65534): its named entry grants read, the
    // mask takes away write, a named entry of no permission denies what
    // "other" would allow. Only root can switch users; elsewhere the
    // script prints the same skip on both sides.
    let script = r#"
        cd "$ROOT"
        [ "$(id -u)" = 0 ] || { echo not root; exit 0; }
        chmod 755 .
        as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
        echo secret > f; chmod 600 f
        setfacl -m u:nobody:rw,m::r f
        as_nobody cat f && echo read-ok
        as_nobody sh -c 'echo x >> f' 2>/dev/null || echo write-denied
        mkdir d && touch d/inside && chmod 755 d && setfacl -m u:nobody:- d
        as_nobody ls d 2>/dev/null || echo list-denied
        ls d
        echo open > g; chmod 604 g; setfacl -m g:nogroup:-,m::rwx g
        as_nobody cat g 2>/dev/null || echo group-entry-denies
        as_nobody setfacl -m u:nobody:rwx f 2>/dev/null || echo not-owner
        as_nobody getfacl -cp f
        chmod 660 f; as_nobody sh -c 'echo x >> f' && echo mask-widened
    "#;
    let out = assert_same(&[], script, true);
    eprintln!("{out}");
    assert!(
        out.contains("not root") || out.contains("mask-widened"),
        "{out}"
    );
}

#[test]
fn rsync_cp_and_tar_keep_links_xattrs_and_acls_into_and_out_of_the_mount() {
    tools();
    // `$H` is a host directory in both runs: copies leave the mount and
    // come back.
    let script = format!(
        r#"
        set -e
        cd "$ROOT"
        {SHOW}
        {TREE}
        H=$(mktemp -d); trap 'rm -rf "$H"' EXIT
        rsync -aHAX src/ r1/ && show r1
        echo '-- out of the mount and back'
        rsync -aHAX r1/ "$H/out/" && show "$H/out"
        rm src/a2; ln src/d/b src/b3; echo more >> src/d/b; setfacl -m u:daemon:r src/a
        rsync -aHAX --inplace --delete src/ "$H/out/" && show "$H/out"
        rsync -aHAX --delete "$H/out/" r1/ && show r1
        echo '-- cp -a'
        cp -a src c1 && show c1
        cp -a src "$H/c2" && show "$H/c2"
        echo '-- tar'
        tar --acls --xattrs --xattrs-include='user.*' -cf "$H/t.tar" -C src .
        mkdir t && tar --acls --xattrs --xattrs-include='user.*' -xf "$H/t.tar" -C t && show t
        "#
    );
    let out = assert_same(&[], &script, true);
    eprintln!("{out}");
    assert_eq!(out.matches("user:daemon:r--").count(), 5, "{out}");
}

/// `script` in a tmpfs directory (`/dev/shm`) and in the mount print the
/// same (for what tmpfs does its own way, unlike the host's disk).
fn assert_same_as_tmpfs(script: &str) -> String {
    let shm = tempfile::tempdir_in("/dev/shm").expect("tmpfs directory");
    let host = std::process::Command::new("bash")
        .args(["-c", script])
        .env("ROOT", shm.path())
        .env("LC_ALL", "C")
        .output_bounded()
        .expect("bash");
    let want =
        String::from_utf8_lossy(&host.stdout).replace(&*shm.path().to_string_lossy(), "$ROOT");
    let out = atoll_tests::run_in_atoll(&[], script);
    let got = String::from_utf8_lossy(&out.stdout).replace(atoll_tests::MOUNT, "$ROOT");
    assert_eq!(
        got,
        want,
        "atoll stderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    got
}

#[test]
fn directory_sizes_are_tmpfs_sizes() {
    // `du -b`, `ls -l` and `find -printf %s` count 40 bytes per directory
    // and 20 per entry on tmpfs; they printed 4096 for every directory.
    let out = assert_same_as_tmpfs(
        r#"
        cd "$ROOT"
        mkdir -p a/b/c e; seq 1 2000 > a/n; touch a/x a/y e/1 e/2 e/3; ln -s n a/l
        find . -printf '%s %y %p\n' | sort -k3
        rm a/x; mv e/1 a/; rmdir a/b/c
        find . -type d -printf '%s %p\n' | sort -k2
        du -sb a e | sort -k2
        "#,
    );
    assert!(out.contains("140 ./a\n"), "{out}");
}

/// Two processes insert into one sqlite database at once while a third
/// keeps a connection open and reads, in rollback-journal (`delete`,
/// `truncate`) and WAL mode (the `-shm` index is a shared mapping, its
/// locks `fcntl` locks); then the sqlite3 shell checks the database.
const SQLITE_TWO_WRITERS: &str = r#"
cd "$ROOT"
python3 - <<'P'
import os, sqlite3
for mode in ("delete", "truncate", "wal"):
    db = f"{mode}.db"
    c = sqlite3.connect(db, timeout=60)
    c.execute(f"PRAGMA journal_mode={mode}")
    c.execute("create table t(a, b)")
    c.commit()
    kids = []
    for w in range(2):
        pid = os.fork()
        if pid == 0:
            k = sqlite3.connect(db, timeout=60)
            for i in range(200):
                k.execute("insert into t values(?, ?)", (i, w))
                if i % 10 == 9:
                    k.commit()
            k.commit()
            k.close()
            os._exit(0)
        kids.append(pid)
    seen = 0
    for _ in range(50):
        n = c.execute("select count(*) from t").fetchone()[0]
        assert n >= seen, (n, seen)
        seen = n
    for p in kids:
        assert os.waitpid(p, 0)[1] == 0
    print(mode, c.execute("select count(*), sum(a), sum(b) from t").fetchone())
    c.close()
P
for db in delete truncate wal; do sqlite3 $db.db 'PRAGMA integrity_check; select count(*) from t;'; done
ls
"#;

#[test]
fn sqlite_with_two_writers_and_a_reader_as_on_linux() {
    require("sqlite3");
    // Coherent: a copy island cannot share WAL's index (COMPATIBILITY.md).
    let out = assert_same(&["--island", "coherent"], SQLITE_TWO_WRITERS, true);
    assert!(out.contains("wal (400, 39800, 200)"), "{out}");
}

#[test]
fn sqlite_rollback_journal_is_coherent_in_an_incoherent_island() {
    // A reader that keeps the database open sees the writers' commits:
    // locks write back and drop private copies (client `file::set_lock`).
    // Before, the reader's connection read its stale copies: no rows.
    require("sqlite3");
    let out = assert_same(&["--island", "incoherent"], SQLITE_TWO_WRITERS, true);
    assert!(out.contains("delete (400, 39800, 200)"), "{out}");
}

#[test]
fn git_gc_clone_worktree_and_stash_in_the_mount() {
    require("git");
    let out = assert_same(
        &[],
        r#"
        set -e
        export GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@b GIT_COMMITTER_NAME=a GIT_COMMITTER_EMAIL=a@b
        export GIT_AUTHOR_DATE='2020-01-01T00:00:00Z' GIT_COMMITTER_DATE='2020-01-01T00:00:00Z'
        export HOME="$ROOT" GIT_CONFIG_NOSYSTEM=1
        cd "$ROOT" && git init -q -b main repo && cd repo
        for d in $(seq 1 10); do mkdir d$d; for f in $(seq 1 20); do echo "$d $f" > d$d/f$f; done; done
        git add -A && git commit -qm one
        for d in $(seq 1 10); do echo more >> d$d/f1; done; git mv d1 e1; git rm -q d2/f2
        git commit -qam two
        git gc -q && git gc --aggressive --prune=now -q
        git count-objects -v | grep -v size
        git status --short; git log --oneline; git fsck --full 2>&1
        cd "$ROOT" && git clone -q repo clone && git -C clone log --oneline && ls clone | wc -l
        git clone -q --no-local repo clone2 && git -C clone2 fsck 2>&1
        cd repo && git worktree add -q ../wt -b side && cd ../wt && echo x > newf
        git add newf && git commit -qm side && git -C "$ROOT/repo" log --oneline side
        git -C "$ROOT/repo" worktree list | awk '{print $1, $3}' | sed "s|$ROOT|R|"
        git -C "$ROOT/repo" worktree remove ../wt
        cd "$ROOT/repo" && git repack -adq && git prune && echo y >> e1/f1
        git stash -q && git stash pop -q && git diff --stat
        "#,
        true,
    );
    assert!(out.contains("in-pack: 234"), "{out}");
}

#[test]
fn cmake_configures_builds_and_installs_a_c_project_in_the_mount() {
    require("cmake");
    // cmake's checks (try-compile) make and rename many temporary
    // directories and files.
    assert_same(
        &[],
        r#"
        set -e
        cd "$ROOT" && mkdir -p proj/src && cd proj
        cat > CMakeLists.txt <<'X'
cmake_minimum_required(VERSION 3.10)
project(demo C)
include(CheckIncludeFile)
include(CheckFunctionExists)
check_include_file(unistd.h HAVE_UNISTD_H)
check_function_exists(mmap HAVE_MMAP)
configure_file(config.h.in config.h)
add_library(shapes STATIC src/shapes.c)
add_executable(demo src/main.c)
target_include_directories(demo PRIVATE ${CMAKE_BINARY_DIR})
target_link_libraries(demo shapes)
install(TARGETS demo DESTINATION bin)
X
        printf '#cmakedefine HAVE_UNISTD_H 1\n#cmakedefine HAVE_MMAP 1\n' > config.h.in
        echo 'int square(int x) { return x * x; }' > src/shapes.c
        printf '#include <stdio.h>\n#include "config.h"\nint square(int);\nint main(void) { printf("%%d %%d\\n", square(7), HAVE_MMAP); return 0; }\n' > src/main.c
        mkdir build && cd build
        cmake -DCMAKE_INSTALL_PREFIX="$ROOT/inst" .. > cmake.log 2>&1 || { cat cmake.log; exit 1; }
        make -j2 > make.log 2>&1 || { cat make.log; exit 1; }
        ./demo && make install > /dev/null && "$ROOT/inst/bin/demo"
        cat config.h
        touch ../src/shapes.c && make 2>&1 | grep -c Building
        cmake --build . --target clean && ls
        "#,
        true,
    );
}

/// gdb on a program built in the mount: breakpoints, a backtrace and the
/// program's output as on the host. Under atoll the program's trapped
/// calls are `SIGSYS` signals, which gdb would stop at (the exec of gdb
/// lets them pass, `exec/debuggers.rs`).
#[test]
fn gdb_breaks_steps_and_runs_a_program_of_the_mount_as_on_the_host() {
    require("gdb");
    assert_same(
        &["--servers", "2"],
        r#"
        cd "$ROOT"
        printf '#include <stdio.h>\n#include <sys/stat.h>\nint twice(int x) {\n  return 2 * x;\n}\nint main(void) {\n  struct stat st;\n  stat(".", &st);\n  printf("twice %%d\\n", twice(21));\n  return 0;\n}\n' > prog.c
        gcc -g -O0 -o prog prog.c
        gdb -batch -ex 'break twice' -ex run -ex bt -ex finish -ex continue ./prog 2>&1 \
            | grep -v -e libthread_db -e '^$' | sed -e 's/process [0-9]*/process N/' -e 's/0x[0-9a-f]*/ADDR/g'
        "#,
        true,
    );
}
