//! The buffer cache's block pool (docs/ARCHITECTURE.md, "Buffer cache"):
//! servers borrow blocks from one root and give them back, so a write gets
//! `ENOSPC` only when the instance's whole `--memory` is in use, `df`
//! tells the truth before and after, and blocks freed on one server are
//! reused by another.

use atoll_tests::OutputBounded as _;
use atoll_tests::{run_in_atoll, Booted};

const MIB: u64 = 1 << 20;
/// `--memory` of these tests, in bytes and in 4 KiB blocks.
const MEMORY: u64 = 64 * MIB;
const BLOCKS: u64 = MEMORY / 4096;

/// What these tests ask of an instance.
trait Instance {
    fn exec(&self, script: &str) -> String;
    fn df(&self) -> (u64, u64, u64);
    fn per_server(&self, field: &str) -> Vec<u64>;
}

impl Instance for Booted {
    /// Run `bash -c script` in the instance; its stdout, after checking it
    /// succeeded.
    fn exec(&self, script: &str) -> String {
        let out = self.command(script).output_bounded().expect("atoll exec");
        assert!(
            out.status.success(),
            "script failed: {script}\nstdout: {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `(size, used, avail)` of `df -B4096` on the mount, in blocks.
    fn df(&self) -> (u64, u64, u64) {
        // No pipeline: an anonymous pipe's ring takes buffer-cache blocks
        // while it lives, and `df` would count its own.
        let out = self.exec("df -B4096 --output=size,used,avail $ROOT");
        let v = numbers(&out);
        assert_eq!(v.len(), 3, "df printed {out:?}");
        (v[0], v[1], v[2])
    }

    /// A per-server counter of `atoll status --json`.
    fn per_server(&self, field: &str) -> Vec<u64> {
        self.status()["servers"]
            .as_array()
            .expect("servers")
            .iter()
            .map(|s| s[field].as_u64().unwrap_or_else(|| panic!("{field}")))
            .collect()
    }
}

fn numbers(s: &str) -> Vec<u64> {
    s.split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect()
}

/// Write `path` until the file system is full (`dd` stops at `ENOSPC`);
/// prints the bytes stored, then `ENOSPC` if that is why it stopped.
fn fill(path: &str) -> String {
    format!(
        "err=$(dd if=/dev/zero of={path} bs=256k count=100000 2>&1 >/dev/null); \
         stat -c %s {path}; case $err in *'No space left'*) echo ENOSPC;; esac"
    )
}

/// Bytes stored and whether `ENOSPC` stopped the writer, from `fill`.
fn filled(out: &str) -> (u64, bool) {
    let size = numbers(out).first().copied().expect("a size");
    (size, out.contains("ENOSPC"))
}

/// `df` is exact: used = the files' blocks, size = `--memory`, used +
/// avail = size.
fn assert_df_consistent(inst: &Booted, files_blocks: u64) {
    let (size, used, avail) = inst.df();
    assert_eq!(size, BLOCKS, "df shows the whole --memory");
    assert_eq!(used, files_blocks, "df used = the files' blocks");
    assert_eq!(used + avail, size);
}

/// The files' blocks (4 KiB) under `$ROOT`, as `du` counts them.
fn du_blocks(inst: &Booted) -> u64 {
    let out = inst.exec("du -s -B4096 $ROOT");
    numbers(&out)[0]
}

#[test]
fn one_writer_fills_all_of_memory_with_four_servers() {
    let inst = Booted::new(&["--servers", "4", "--memory", "64M"]);
    assert_df_consistent(&inst, 0);
    let (size, enospc) = filled(&inst.exec(&fill("$ROOT/big")));
    assert!(enospc, "the writer stopped for another reason");
    assert!(
        size >= 63 * MIB,
        "only {} KiB stored of 64 MiB before ENOSPC",
        size / 1024
    );
    assert_df_consistent(&inst, du_blocks(&inst));
    let (_, _, avail) = inst.df();
    assert!(avail * 100 <= BLOCKS, "{avail} blocks free at ENOSPC");
    // Deleting makes all of it free again, and writing works again.
    inst.exec("rm $ROOT/big");
    assert_df_consistent(&inst, 0);
    inst.exec("dd if=/dev/zero of=$ROOT/again bs=1M count=48 2>/dev/null");
    assert_df_consistent(&inst, 48 * 256);
}

#[test]
fn four_writers_in_four_directories_fill_all_of_memory() {
    let inst = Booted::new(&["--servers", "4", "--memory", "64M"]);
    let script = format!(
        "for i in 0 1 2 3; do mkdir -p $ROOT/d$i; done
         t=$(mktemp -d); for i in 0 1 2 3; do ( {} ) > $t/$i & done; wait
         cat $t/*; rm -r $t",
        fill("$ROOT/d$i/f")
    );
    let out = inst.exec(&script);
    let total: u64 = numbers(&out).iter().sum();
    assert_eq!(out.matches("ENOSPC").count(), 4, "{out}");
    assert!(
        total >= 63 * MIB,
        "only {} KiB stored of 64 MiB before ENOSPC: {out}",
        total / 1024
    );
    assert_df_consistent(&inst, du_blocks(&inst));
    inst.exec("rm -r $ROOT/d0 $ROOT/d1 $ROOT/d2 $ROOT/d3");
    assert_df_consistent(&inst, 0);
    inst.exec("mkdir $ROOT/e && dd if=/dev/zero of=$ROOT/e/f bs=1M count=60 2>/dev/null");
    assert_df_consistent(&inst, 60 * 256);
}

#[test]
fn blocks_freed_on_one_server_are_reused_by_another() {
    // Every directory distributed: names of one directory spread over the
    // servers, so two files on two servers are easy to find.
    let inst = Booted::new(&["--servers", "2", "--memory", "64M", "--distribute", "all"]);
    let owners = inst.exec(
        "mkdir $ROOT/d; for n in 0 1 2 3 4 5 6 7 8 9; do touch $ROOT/d/f$n; \
         echo $n $(( $(stat -c %i $ROOT/d/f$n) >> 56 )); done",
    );
    let pairs: Vec<(u64, u64)> = owners
        .lines()
        .map(|l| {
            let v = numbers(l);
            (v[0], v[1])
        })
        .collect();
    let on = |server| pairs.iter().find(|p| p.1 == server).map(|p| p.0);
    let (Some(a), Some(b)) = (on(0), on(1)) else {
        panic!("ten names all on one server: {owners}");
    };
    let (first, _) = filled(&inst.exec(&fill(&format!("$ROOT/d/f{a}"))));
    assert!(first >= 63 * MIB, "server 0 stored only {first} bytes");
    let owned = inst.per_server("blocks_total");
    assert!(owned[0] * 100 >= BLOCKS * 99, "server 0 owns {owned:?}");
    inst.exec(&format!("rm $ROOT/d/f{a}"));
    let (second, enospc) = filled(&inst.exec(&fill(&format!("$ROOT/d/f{b}"))));
    assert!(enospc);
    assert!(second >= 63 * MIB, "server 1 stored only {second} bytes");
    let returned = inst.per_server("blocks_returned");
    let borrowed = inst.per_server("blocks_borrowed");
    assert!(
        returned[0] * 100 >= BLOCKS * 98,
        "server 0 gave back only {returned:?}"
    );
    assert!(
        borrowed[1] * 100 >= BLOCKS * 98,
        "server 1 borrowed only {borrowed:?}"
    );
    assert_df_consistent(&inst, du_blocks(&inst));
}

#[test]
fn five_servers_and_memory_that_does_not_divide_evenly() {
    // 64 MiB + 12 KiB: 16387 blocks over 5 servers.
    let inst = Booted::new(&["--servers", "5", "--memory", "67121152"]);
    let (size, used, avail) = inst.df();
    assert_eq!((size, used, avail), (16387, 0, 16387));
    let (stored, enospc) = filled(&inst.exec(&fill("$ROOT/big")));
    assert!(enospc);
    assert!(stored * 100 >= 16387 * 4096 * 99, "stored {stored}");
    inst.exec("rm $ROOT/big");
    assert_eq!(inst.df(), (16387, 0, 16387));
}

/// Owner server of each of sixteen new directories in the root, and of a
/// file made in each, as `"dir_owner file_owner"` lines.
const OWNERS: &str = r#"
cd "$ROOT"
for n in $(seq 0 15); do
  mkdir d$n && echo x > d$n/f
  echo $(( $(stat -c %i d$n) >> 56 )) $(( $(stat -c %i d$n/f) >> 56 ))
done
[ "$(ls -d d* | wc -l)" = 16 ] && echo listed
for n in $(seq 0 15); do rm d$n/f; rmdir d$n; done
ls
"#;

fn owners(opts: &[&str]) -> (Vec<(u64, u64)>, String) {
    let out = run_in_atoll(opts, OWNERS);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pairs = text
        .lines()
        .map(numbers)
        .filter(|v| v.len() == 2)
        .map(|v| (v[0], v[1]))
        .collect();
    (pairs, text)
}

#[test]
fn new_directories_spread_over_servers_with_their_own_cores_unless_affinity_is_off() {
    let (spread, text) = owners(&["--servers", "4", "--poll", "spin"]);
    assert_eq!(spread.len(), 16, "{text}");
    assert!(text.contains("listed"), "{text}");
    assert!(text.trim_end().ends_with("listed"), "all removed: {text}");
    let servers: std::collections::BTreeSet<u64> = spread.iter().map(|p| p.0).collect();
    assert!(servers.len() >= 3, "directories on {servers:?} only");
    assert!(
        spread.iter().all(|(d, f)| d == f),
        "a file lives where its directory's entries are: {spread:?}"
    );
    for opts in [
        &["--servers", "4", "--poll", "spin", "--without", "affinity"][..],
        // Servers timesharing cores with programs keep a tree together.
        &["--servers", "4"][..],
    ] {
        let (kept, text) = owners(opts);
        assert_eq!(kept.len(), 16, "{opts:?}: {text}");
        assert!(kept.iter().all(|&p| p == (0, 0)), "{opts:?}: {kept:?}");
    }
}

/// `statvfs` reads what the servers publish in the control block (no
/// `StatFs` message wakes them) and still counts exactly: in one process
/// with three servers and every directory distributed, each create, write
/// and unlink shows at once in the free inodes and blocks, `df` in
/// another process agrees, and the servers received no `StatFs`.
#[test]
fn statvfs_counts_creates_writes_and_unlinks_without_a_message() {
    atoll_tests::require("python3");
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("s.json");
    let j = json.to_string_lossy().to_string();
    let script = r#"
        set -e
        mkdir "$ROOT/d" && cd "$ROOT/d"
        python3 - <<'PY'
import os
def counts():
    s = os.statvfs(".")
    return (s.f_blocks, s.f_bfree, s.f_bavail, s.f_files, s.f_ffree)
b0, free0, avail0, files0, ffree0 = counts()
print("start", b0, free0, avail0, files0, ffree0)
for i in range(60):
    os.close(os.open("f%d" % i, os.O_CREAT | os.O_WRONLY, 0o644))
b, free, avail, files, ffree = counts()
print("created", free0 - free, ffree0 - ffree)
for i in range(60):
    fd = os.open("f%d" % i, os.O_WRONLY)
    os.write(fd, b"x" * (3 * 4096))
    os.close(fd)
b, free, avail, files, ffree = counts()
print("written", free0 - free, ffree0 - ffree, free == avail, b == b0, files == files0)
for i in range(20):
    os.unlink("f%d" % i)
b, free, avail, files, ffree = counts()
print("unlinked", free0 - free, ffree0 - ffree)
PY
        df -B4096 --output=used,iused "$ROOT"
    "#;
    let out = run_in_atoll(
        &[
            "--servers",
            "3",
            "--distribute",
            "all",
            "--memory",
            "64M",
            "--stats-json",
            &j,
        ],
        script,
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = |tag: &str| -> Vec<u64> {
        let l = text
            .lines()
            .find(|l| l.starts_with(tag))
            .unwrap_or_else(|| panic!("no {tag} in {text}"));
        numbers(l)
    };
    let start = line("start");
    assert_eq!(start[0], BLOCKS, "the whole --memory: {text}");
    assert_eq!(start[1], start[2], "{text}");
    assert_eq!(line("created"), [0, 60], "60 inodes, no blocks: {text}");
    assert_eq!(
        text.lines()
            .find(|l| l.starts_with("written"))
            .map(|l| l.split_whitespace().skip(3).collect::<Vec<_>>()),
        Some(vec!["True", "True", "True"]),
        "{text}"
    );
    assert_eq!(line("written"), [180, 60], "three blocks each: {text}");
    assert_eq!(line("unlinked"), [120, 40], "{text}");
    // `df` (another process; no pipeline, whose ring would take blocks):
    // the same blocks, and the inodes in use are the 40 files, the
    // directory and the root.
    let df = numbers(text.lines().last().unwrap_or_default());
    assert_eq!(df, [120, 42], "{text}");
    let (ops, v) = atoll_tests::served_ops(&json);
    assert!(ops("Unlink") >= 20, "the servers' counts are real: {v}");
    assert_eq!(ops("StatFs"), 0, "{v}");
}
