//! Concurrency: many processes (more than cores) hammer one directory and
//! shared descriptors; invariants are checked afterwards.

use atoll_tests::{compile_probe, run_in_atoll};

fn stdout_of(opts: &[&str], script: &str) -> String {
    let out = run_in_atoll(opts, script);
    assert!(
        out.status.success(),
        "script failed ({:?}):\n{script}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Six workers create, rename and unlink in one shared directory; every
/// surviving name must appear exactly once in `readdir`, and be the right set.
#[test]
fn create_rename_unlink_storm_in_one_directory() {
    for servers in ["1", "4"] {
        let listing = stdout_of(
            &["--servers", servers],
            r#"
            set -e
            mkdir "$ROOT/shared"
            for w in 1 2 3 4 5 6; do
              (
                cd "$ROOT/shared"
                for i in $(seq 1 60); do
                  echo "$w.$i" > "c.$w.$i"
                  if [ $((i % 2)) = 0 ]; then mv "c.$w.$i" "r.$w.$i"; fi
                  if [ $((i % 3)) = 0 ]; then rm -f "c.$w.$i" "r.$w.$i"; fi
                done
              ) &
            done
            wait
            ls -f "$ROOT/shared" | grep -v '^\.\.\?$'
            "#,
        );
        let mut names: Vec<&str> = listing.lines().collect();
        let total = names.len();
        names.sort();
        names.dedup();
        assert_eq!(
            names.len(),
            total,
            "a name appeared twice in readdir ({servers} servers)"
        );
        let mut expected = Vec::new();
        for w in 1..=6 {
            for i in 1..=60 {
                if i % 3 == 0 {
                    continue;
                }
                expected.push(if i % 2 == 0 {
                    format!("r.{w}.{i}")
                } else {
                    format!("c.{w}.{i}")
                });
            }
        }
        expected.sort();
        assert_eq!(names, expected, "surviving names ({servers} servers)");
    }
}

/// O_APPEND writers sharing one open file description lose nothing.
#[test]
fn append_writers_sharing_one_description_lose_nothing() {
    let out = stdout_of(
        &["--servers", "2"],
        r#"
        exec 3>>"$ROOT/log"
        for w in 1 2 3 4 5; do
          ( for i in $(seq 1 100); do echo "w$w line $i" >&3; done ) &
        done
        wait
        exec 3>&-
        wc -l < "$ROOT/log"
        sort "$ROOT/log" | uniq -d | wc -l
        "#,
    );
    assert_eq!(out, "500\n0\n");
}

/// Hare Fig. 3-1: an exec'ed child writes through an inherited descriptor
/// and the parent continues at the shared offset.
#[test]
fn fd_sharing_idiom_of_hare_figure_3_1() {
    let out = stdout_of(
        &[],
        r#"
        ( exec > "$ROOT/file"; /bin/echo hello; echo world. )
        cat "$ROOT/file"
        "#,
    );
    assert_eq!(out, "hello\nworld.\n");
}

/// Hare Fig. 3-3: a file stays readable through an open descriptor after
/// another process appended to it and removed its directory.
#[test]
fn orphan_idiom_of_hare_figure_3_3() {
    let out = stdout_of(
        &[],
        r#"
        mkdir "$ROOT/d" && : > "$ROOT/d/file"
        exec 4< "$ROOT/d/file"
        sh -c 'echo "hello world" >> "$ROOT/d/file"; rm -r "$ROOT/d"'
        [ -e "$ROOT/d" ] || echo gone
        cat <&4
        "#,
    );
    assert_eq!(out, "gone\nhello world\n");
}

/// Readers of a name that is repeatedly replaced by rename never find it
/// missing (rename is atomic to every observer).
#[test]
fn rename_over_never_hides_the_target() {
    let out = stdout_of(
        &["--servers", "2"],
        r#"
        echo v0 > "$ROOT/target"
        ( for i in $(seq 1 300); do echo "v$i" > "$ROOT/tmp.$i"; mv "$ROOT/tmp.$i" "$ROOT/target"; done ) &
        misses=0
        for i in $(seq 1 600); do [ -e "$ROOT/target" ] || misses=$((misses+1)); done
        wait
        echo "misses $misses"
        cat "$ROOT/target"
        "#,
    );
    assert_eq!(out, "misses 0\nv300\n");
}

/// Threads of one process fork at the same time, and every child execs
/// (which asks the instance for a session) or writes a file of the mount.
/// A fork copies only its own thread: a client lock another thread held
/// at that instant would stay held in the child forever, and the child
/// would spin on it (a multithreaded `cargo` spawning `rustc` hung so).
/// Every child must finish, with 2 servers and more threads than cores.
#[test]
fn threads_that_fork_at_once_leave_no_child_stuck_on_a_lock() {
    let dir = tempfile::tempdir().expect("probe directory");
    let probe = compile_probe(dir.path(), "forkers", include_str!("concurrency/forkers.c"));
    let out = stdout_of(
        &["--servers", "2"],
        &format!("set -e; cd \"$ROOT\"; {} 16 40", probe.display()),
    );
    assert!(out.contains("children ok 640 of 640"), "{out}");
    assert!(out.contains("files 320"), "{out}");
}
