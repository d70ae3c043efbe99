//! Remembered sites (preload `rewrite/remember.rs`, `rewrite/eager.rs`): a
//! site one program image rewrote is rewritten by the next image of the
//! same file at start, without a trap; an entry whose bytes no longer
//! match the file, or a table full of garbage, costs at most a trap, never
//! a wrong answer. Each case compares the probe's output under atoll with
//! the same script on Linux, and counts traps with `ATOLL_TRAP_STATS`.

use std::path::{Path, PathBuf};
use std::process::Command;

use atoll_tests::OutputBounded as _;
use atoll_tests::{atoll, compile_probe, output_within, trap_count};

const LIMIT: std::time::Duration = std::time::Duration::from_secs(180);

fn probe(dir: &Path) -> PathBuf {
    compile_probe(dir, "sites", include_str!("rewrite/sites.c"))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).to_string()
}

/// `script` run by `sh` with `$0` the probe, `$1` a scratch host
/// directory for trap files, `$2` the data file (`abcd`), `$3` the
/// instance's runtime root (empty on Linux).
fn on_linux(bin: &Path, script: &str) -> String {
    let tmp = tempfile::tempdir_in("/dev/shm").unwrap();
    let f = tmp.path().join("f");
    let out = Command::new("sh")
        .args(["-c", &format!("printf abcd > \"$2\"\n{script}")])
        .arg(bin)
        .arg(tmp.path())
        .arg(&f)
        .arg("")
        .output_bounded()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout)
}

/// The same under `atoll run OPTS` with the data file `/atoll/f`; trap
/// files land in `scratch`.
fn in_atoll(bin: &Path, script: &str, opts: &[&str], scratch: &Path) -> String {
    let runtime = scratch.join("rt");
    std::fs::create_dir_all(&runtime).unwrap();
    let mut cmd = atoll();
    cmd.arg("run")
        .arg("--runtime-dir")
        .arg(&runtime)
        .args(opts)
        .args(["--", "sh", "-c", &format!("printf abcd > \"$2\"\n{script}")])
        .arg(bin)
        .arg(scratch)
        .arg("/atoll/f")
        .arg(&runtime);
    let out = output_within(cmd, LIMIT);
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout)
}

/// The probe twice; then a third image (`grep`), whose remembered libc
/// sites were rewritten at start, shows no page left writable.
const TWICE: &str = r#"set -e
ATOLL_TRAP_STATS="$1/first" "$0" count "$2"
ATOLL_TRAP_STATS="$1/second" "$0" count "$2"
grep -c ' rwx' /proc/self/maps || true
"#;

#[test]
fn a_site_one_image_rewrote_is_rewritten_in_the_next_without_a_trap() {
    let dir = tempfile::tempdir().unwrap();
    let bin = probe(dir.path());
    let linux = on_linux(&bin, TWICE);
    assert_eq!(
        linux,
        format!("{}0\n", "count getpid 1000 pread 4000 abcd\n".repeat(2))
    );
    let pread = libc::SYS_pread64.to_string();
    let getpid = libc::SYS_getpid.to_string();

    let scratch = tempfile::tempdir().unwrap();
    let (first, second) = (scratch.path().join("first"), scratch.path().join("second"));
    let show = || {
        format!(
            "{:?} {:?}",
            std::fs::read_to_string(&first),
            std::fs::read_to_string(&second)
        )
    };
    assert_eq!(
        in_atoll(&bin, TWICE, &["--servers", "2"], scratch.path()),
        linux
    );
    // The first image traps once at the probe's pread site, the second
    // never: the site was rewritten before `main`.
    assert_eq!(trap_count(&first, &pread), 1, "{}", show());
    assert_eq!(trap_count(&second, &pread), 0, "{}", show());
    assert_eq!(trap_count(&second, &getpid), 0, "{}", show());
    assert!(trap_count(&second, "remembered") >= 2, "{}", show());
    assert!(trap_count(&second, "direct") >= 1998, "{}", show());

    // Without the technique, each image traps once at each site; with
    // rewriting off for the program, at every call.
    let scratch = tempfile::tempdir().unwrap();
    let (first, second) = (scratch.path().join("first"), scratch.path().join("second"));
    let opts = ["--servers", "2", "--without", "remembered-sites"];
    assert_eq!(in_atoll(&bin, TWICE, &opts, scratch.path()), linux);
    assert_eq!(trap_count(&first, &pread), 1);
    assert_eq!(trap_count(&second, &pread), 1);
    assert_eq!(trap_count(&second, "remembered"), 0);

    let off = format!("ATOLL_SYSCALL_REWRITE=off; export ATOLL_SYSCALL_REWRITE\n{TWICE}");
    let scratch = tempfile::tempdir().unwrap();
    let second = scratch.path().join("second");
    assert_eq!(
        in_atoll(&bin, &off, &["--servers", "2"], scratch.path()),
        linux
    );
    assert_eq!(trap_count(&second, &pread), 1000);
    assert_eq!(trap_count(&second, "remembered"), 0);
    assert_eq!(trap_count(&second, "direct"), 0);
}

/// A copy of the probe runs (its sites are remembered), then its getpid
/// sites are changed in place into getppid, and its size and times put
/// back: the table's key for the file is the same, but the bytes of those
/// sites no longer match what it remembers. They must not be rewritten as
/// getpid: the changed program gets getppid's answer, as on Linux.
#[test]
fn a_remembered_site_whose_bytes_changed_in_place_is_left_to_trap() {
    let dir = tempfile::tempdir().unwrap();
    let bin = probe(dir.path());
    let script = r#"set -e
cp "$0" "$1/p2"
ATOLL_TRAP_STATS="$1/first" "$1/p2" count "$2"
touch -r "$1/p2" "$1/times"
"$0" patch "$1/p2"
touch -r "$1/times" "$1/p2"
ATOLL_TRAP_STATS="$1/second" "$1/p2" count "$2"
"#;
    let linux = on_linux(&bin, script);
    assert_eq!(
        linux,
        "count getpid 1000 pread 4000 abcd\npatched 1\ncount getpid 0 pread 4000 abcd\n"
    );
    let scratch = tempfile::tempdir().unwrap();
    assert_eq!(in_atoll(&bin, script, &[], scratch.path()), linux);
    let second = scratch.path().join("second");
    let getppid = libc::SYS_getppid.to_string();
    let pread = libc::SYS_pread64.to_string();
    let show = std::fs::read_to_string(&second).unwrap_or_default();
    // The same file to the table: its unchanged pread site was rewritten
    // at start; the changed site trapped once, then was rewritten anew.
    assert_eq!(trap_count(&second, &pread), 0, "{show}");
    assert_eq!(trap_count(&second, &getppid), 1, "{show}");
    assert!(trap_count(&second, "remembered") >= 1, "{show}");
}

/// The table overwritten with random bytes between two runs: every slot
/// fails its check, nothing is rewritten from it, and the program is
/// right (its sites trap once again).
#[test]
fn a_table_of_garbage_costs_traps_not_answers() {
    let dir = tempfile::tempdir().unwrap();
    let bin = probe(dir.path());
    let script = r#"set -e
"$0" count "$2"
if [ -n "$3" ]; then
  for t in "$3"/*/sites; do
    dd if=/dev/urandom of="$t" bs=32 seek=2 count=4096 conv=notrunc 2>/dev/null
  done
fi
ATOLL_TRAP_STATS="$1/second" "$0" count "$2"
"#;
    let linux = on_linux(&bin, script);
    let scratch = tempfile::tempdir().unwrap();
    assert_eq!(in_atoll(&bin, script, &[], scratch.path()), linux);
    let second = scratch.path().join("second");
    let pread = libc::SYS_pread64.to_string();
    assert_eq!(trap_count(&second, &pread), 1);
    assert_eq!(trap_count(&second, "remembered"), 0);
}

/// Threads racing through sites, fork children, vfork and exec, threads
/// that rewrite sites while the main thread forks, glibc's `read` from
/// four threads: each run a second time in the same instance, its sites
/// rewritten at start, as on Linux.
#[test]
fn threads_forks_and_execs_run_remembered_sites_as_on_linux() {
    let dir = tempfile::tempdir().unwrap();
    let bin = probe(dir.path());
    for mode in ["threads", "fork", "forkrace", "short", "stdio"] {
        let script = format!(
            "set -e\n\"$0\" {mode} \"$2\"\nATOLL_TRAP_STATS=\"$1/second\" \"$0\" {mode} \"$2\"\n"
        );
        let linux = on_linux(&bin, &script);
        let scratch = tempfile::tempdir().unwrap();
        let got = in_atoll(&bin, &script, &["--servers", "2"], scratch.path());
        assert_eq!(got, linux, "{mode}");
        let second = scratch.path().join("second");
        assert!(
            trap_count(&second, "remembered") >= 1,
            "{mode}: {:?}",
            std::fs::read_to_string(&second)
        );
    }
}

/// A site only children run (between `fork` and their end): the first
/// child traps there and remembers it; the parent, before its next fork,
/// rewrites it in its own text, so the later children inherit it rewritten.
#[test]
fn a_site_only_children_run_traps_in_the_first_child_alone() {
    let dir = tempfile::tempdir().unwrap();
    let bin = probe(dir.path());
    let script = "set -e\nATOLL_TRAP_STATS=\"$1/kids\" \"$0\" children\n";
    let linux = on_linux(&bin, script);
    assert_eq!(linux, "children ok 6\n");
    let getppid = libc::SYS_getppid.to_string();
    for (opts, traps) in [
        (&["--servers", "2"][..], 1),
        (&["--servers", "2", "--without", "remembered-sites"][..], 6),
    ] {
        let scratch = tempfile::tempdir().unwrap();
        assert_eq!(in_atoll(&bin, script, opts, scratch.path()), linux);
        let kids = scratch.path().join("kids");
        assert_eq!(
            trap_count(&kids, &getppid),
            traps,
            "{opts:?}: {:?}",
            std::fs::read_to_string(&kids)
        );
    }
}

/// A library loaded with `dlopen`, after the constructor: its remembered
/// sites are rewritten at the first trap in it, so in a second process the
/// site of `a` traps once (the first trap in the library) and the site of
/// `b` never; nor the loader's `read` of the library.
#[test]
fn a_library_loaded_later_gets_its_remembered_sites_at_its_first_trap() {
    let dir = tempfile::tempdir().unwrap();
    let bin = probe(dir.path());
    let src = dir.path().join("lib.c");
    std::fs::write(
        &src,
        "long a(void) { long r; asm volatile(\"nop\\n\\tmov $110, %%eax\\n\\tsyscall\" \
         : \"=a\"(r)::\"rcx\", \"r11\", \"memory\"); return r; }\n\
         long b(void) { long r; asm volatile(\"nop\\n\\tmov $111, %%eax\\n\\tsyscall\" \
         : \"=a\"(r)::\"rcx\", \"r11\", \"memory\"); return r; }\n",
    )
    .unwrap();
    let lib = dir.path().join("lib.so");
    let status = Command::new("cc")
        .args(["-O1", "-shared", "-fPIC", "-o"])
        .arg(&lib)
        .arg(&src)
        .status()
        .unwrap();
    assert!(status.success());
    let script = format!(
        "set -e\nATOLL_TRAP_STATS=\"$1/first\" \"$0\" dl {l}\nATOLL_TRAP_STATS=\"$1/second\" \"$0\" dl {l}\n",
        l = lib.display()
    );
    let linux = on_linux(&bin, &script);
    assert_eq!(linux, "dl ok 3\n".repeat(2));
    let scratch = tempfile::tempdir().unwrap();
    assert_eq!(in_atoll(&bin, &script, &[], scratch.path()), linux);
    let (first, second) = (scratch.path().join("first"), scratch.path().join("second"));
    let show = format!(
        "{:?} {:?}",
        std::fs::read_to_string(&first),
        std::fs::read_to_string(&second)
    );
    assert_eq!(trap_count(&first, "110"), 1, "{show}");
    // `b`'s site, and glibc's `getpgrp` the probe compares it with.
    assert!(trap_count(&first, "111") >= 1, "{show}");
    assert_eq!(trap_count(&second, "110"), 1, "{show}");
    assert_eq!(trap_count(&second, "111"), 0, "{show}");
    // ld.so reads the library's ELF header through its `__read_nocancel`,
    // a short site whose padding ends at a label on an 8-byte boundary:
    // rewritten in the first process, remembered for the second.
    assert_eq!(trap_count(&second, "0"), 0, "{show}");
}
