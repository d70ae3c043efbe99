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

/// Concurrent rmdirs of one directory: exactly one wins; rmdir racing
/// creations inside the directory never leaves a file in a removed
/// directory (three-phase rmdir, Hare §3.4.1).
#[test]
fn rmdir_races() {
    let script = r#"
cd "$ROOT"
mkdir d
for round in $(seq 1 15); do
  mkdir d/x
  for p in 1 2 3 4 5 6; do (rmdir d/x 2>/dev/null && echo won > d/won$round.$p) & done
  wait
  ls d | grep -c "^won$round\." 
  [ -e d/x ] && echo "x survived"
done
for round in $(seq 1 15); do
  mkdir d/y
  (touch d/y/f 2>/dev/null) &
  rmdir d/y 2>/dev/null
  wait
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

/// `--stats-json` reports the techniques' counters.
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
for i in $(seq 1 40); do echo $i >&6; done
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
