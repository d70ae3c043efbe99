//! Lazy rewriting of trapped system-call sites (`--syscall-sites`): a
//! probe whose own inline `mov $nr,%eax; syscall` sites would trap on
//! every run (they have no libc wrapper) runs through its first trap, after
//! which the site calls atoll directly. Each case compares the probe's
//! output under atoll with the same probe on Linux, and the trap counts
//! (`ATOLL_TRAP_STATS`) with `--syscall-sites trap`.

use atoll_tests::OutputBounded as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use atoll_tests::{atoll, compile_probe, output_within, trap_count, Booted};

const LIMIT: std::time::Duration = std::time::Duration::from_secs(120);

fn probe(dir: &Path) -> PathBuf {
    compile_probe(dir, "sites", include_str!("rewrite/sites.c"))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).to_string()
}

/// The probe's output on Linux, `mode` over a tmpfs file holding `abcd`.
fn on_linux(bin: &Path, mode: &str) -> String {
    let tmp = tempfile::tempdir_in("/dev/shm").unwrap();
    let f = tmp.path().join("f");
    std::fs::write(&f, "abcd").unwrap();
    let out = Command::new(bin)
        .arg(mode)
        .arg(&f)
        .output_bounded()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout)
}

/// The probe under `atoll run OPTS`, over `/atoll/f` holding `abcd`, with
/// trap counts appended to `traps`.
fn in_atoll(bin: &Path, mode: &str, opts: &[&str], env: &[(&str, &str)], traps: &Path) -> Output {
    let _ = std::fs::remove_file(traps);
    let mut cmd = atoll();
    cmd.arg("run")
        .args(opts)
        .args([
            "--",
            "sh",
            "-c",
            "printf abcd > /atoll/f && exec \"$0\" \"$1\" /atoll/f",
        ])
        .arg(bin)
        .arg(mode)
        .env("ATOLL_TRAP_STATS", traps)
        .envs(env.iter().copied());
    let out = output_within(cmd, LIMIT);
    assert!(out.status.success(), "{mode}: {}", text(&out.stderr));
    out
}

#[test]
fn a_trapping_site_traps_once_then_calls_atoll_directly() {
    let dir = tempfile::tempdir().unwrap();
    let bin = probe(dir.path());
    let traps = dir.path().join("traps");
    let linux = on_linux(&bin, "count");
    assert_eq!(linux, "count getpid 1000 pread 4000 abcd\n");
    let pread = libc::SYS_pread64.to_string();
    let getpid = libc::SYS_getpid.to_string();

    let out = in_atoll(&bin, "count", &[], &[], &traps);
    assert_eq!(text(&out.stdout), linux);
    // One trap per site (the probe's and glibc's getpid; the shell before
    // its exec has sites of its own), against a thousand when trapping.
    assert!(
        trap_count(&traps, &pread) <= 1,
        "{:?}",
        std::fs::read_to_string(&traps)
    );
    assert!(
        trap_count(&traps, &getpid) <= 5,
        "{:?}",
        std::fs::read_to_string(&traps)
    );
    assert!(trap_count(&traps, "direct") >= 1998);

    for (opts, env) in [
        (&["--syscall-sites", "trap"][..], &[][..]),
        (&[][..], &[("ATOLL_SYSCALL_REWRITE", "off")][..]),
    ] {
        let out = in_atoll(&bin, "count", opts, env, &traps);
        assert_eq!(text(&out.stdout), linux, "{opts:?} {env:?}");
        assert!(trap_count(&traps, &pread) >= 1000, "{opts:?} {env:?}");
        assert!(trap_count(&traps, &getpid) >= 1000, "{opts:?} {env:?}");
        assert_eq!(trap_count(&traps, "direct"), 0, "{opts:?} {env:?}");
    }
}

#[test]
fn rewritten_sites_keep_vector_registers_and_the_red_zone() {
    let dir = tempfile::tempdir().unwrap();
    let bin = probe(dir.path());
    assert_eq!(on_linux(&bin, "regs"), "regs ok\n");
    let out = in_atoll(&bin, "regs", &[], &[], &dir.path().join("traps"));
    assert_eq!(text(&out.stdout), "regs ok\n");
    assert!(trap_count(&dir.path().join("traps"), "direct") >= 2);
}

#[test]
fn threads_racing_through_the_same_sites_read_what_linux_reads() {
    let dir = tempfile::tempdir().unwrap();
    let bin = probe(dir.path());
    let linux = on_linux(&bin, "threads");
    assert_eq!(linux, "threads bad 0\n");
    for _ in 0..5 {
        let out = in_atoll(
            &bin,
            "threads",
            &["--servers", "2"],
            &[],
            &dir.path().join("t"),
        );
        assert_eq!(text(&out.stdout), linux);
    }
}

#[test]
fn fork_children_and_vfork_exec_run_rewritten_code_as_on_linux() {
    let dir = tempfile::tempdir().unwrap();
    let bin = probe(dir.path());
    let linux = on_linux(&bin, "fork");
    assert!(linux.contains("fork child 7\nvfork exec ok\n"), "{linux}");
    let traps = dir.path().join("traps");
    let out = in_atoll(&bin, "fork", &[], &[], &traps);
    assert_eq!(text(&out.stdout), linux);
    assert!(trap_count(&traps, "direct") > 100);
}

/// SIGALRM every 300 µs while the probe reads an atoll pipe through a
/// rewritten `read` site; the handler's own `getpid` goes through another.
/// Every byte arrives, the handler runs, reads cut short fail with `EINTR`
/// (no `SA_RESTART`) and are issued again by the probe.
#[test]
fn a_signal_storm_during_rewritten_pipe_reads_loses_no_byte() {
    let dir = tempfile::tempdir().unwrap();
    let bin = probe(dir.path());
    let linux = on_linux(&bin, "alarm");
    assert_eq!(linux, "alarm bytes 1048576 writer 0 handled yes\n");
    let traps = dir.path().join("traps");
    for _ in 0..3 {
        let out = in_atoll(&bin, "alarm", &[], &[], &traps);
        assert_eq!(text(&out.stdout), linux);
        assert!(trap_count(&traps, "direct") > 0);
    }
}

/// Threads rewrite fresh sites while the main thread forks: a child born
/// while another thread held the rewrite lock starts with it free, and
/// every child runs every site right (rewritten or not at its fork).
#[test]
fn forks_while_other_threads_rewrite_sites_leave_children_working() {
    let dir = tempfile::tempdir().unwrap();
    let bin = probe(dir.path());
    let linux = on_linux(&bin, "forkrace");
    assert_eq!(linux, "forkrace bad 0 children ok 20\n");
    for _ in 0..5 {
        let out = in_atoll(&bin, "forkrace", &[], &[], &dir.path().join("t"));
        assert_eq!(text(&out.stdout), linux);
    }
}

/// Two paths share one `syscall` instruction: the one whose `mov $39,%eax`
/// stands just before it is rewritten; the other jumps straight to the
/// `syscall` with 110 in EAX and must still get `getppid`, every time
/// (the `syscall` bytes are never changed, so it traps as before).
#[test]
fn a_path_that_jumps_straight_to_a_rewritten_syscall_keeps_its_number() {
    let dir = tempfile::tempdir().unwrap();
    let bin = probe(dir.path());
    let linux = on_linux(&bin, "shared");
    assert_eq!(linux, "shared getpid 100 getppid 100\n");
    let traps = dir.path().join("traps");
    let out = in_atoll(&bin, "shared", &[], &[], &traps);
    assert_eq!(text(&out.stdout), linux);
    assert!(trap_count(&traps, &libc::SYS_getppid.to_string()) >= 100);
    assert!(trap_count(&traps, &libc::SYS_getpid.to_string()) <= 5);
}

/// Code in anonymous writable memory (a JIT's) keeps trapping: the JIT may
/// rewrite it, as the probe does, changing the number of its site.
#[test]
fn a_jits_code_is_never_rewritten() {
    let dir = tempfile::tempdir().unwrap();
    let bin = probe(dir.path());
    let linux = on_linux(&bin, "jit");
    assert_eq!(linux, "jit getpid 100 getppid 100\n");
    let traps = dir.path().join("traps");
    let out = in_atoll(&bin, "jit", &[], &[], &traps);
    assert_eq!(text(&out.stdout), linux);
    assert!(trap_count(&traps, &libc::SYS_getpid.to_string()) >= 100);
    assert!(trap_count(&traps, &libc::SYS_getppid.to_string()) >= 100);
}

#[test]
fn status_says_which_mode_the_instance_runs_and_why() {
    let rewrite = Booted::new(&["--servers", "1"]);
    let st = rewrite.status();
    assert_eq!(st["syscall_sites"], "rewrite", "{st}");
    assert!(st["syscall_sites_why"].as_str().unwrap().contains("stubs"));
    drop(rewrite);
    let trap = Booted::new(&["--servers", "1", "--syscall-sites", "trap"]);
    let st = trap.status();
    assert_eq!(st["syscall_sites"], "trap", "{st}");
    assert!(st["syscall_sites_why"]
        .as_str()
        .unwrap()
        .contains("--syscall-sites trap"));
    let text_status = atoll()
        .args(["status", "--id", &trap.id])
        .output_bounded()
        .unwrap();
    assert!(text(&text_status.stdout).contains("syscalls     trap: "));
}

/// Forked children that exec at once, as a shell's do.
const FORK_EXEC: &str = r#"
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>
int main(void) {
    int ok = 0;
    for (int i = 0; i < 5; i++) {
        pid_t p = fork();
        if (p == 0) {
            execl("/bin/true", "true", (char *)0);
            _exit(127);
        }
        int st = 0;
        if (p > 0 && waitpid(p, &st, 0) == p && WIFEXITED(st) && WEXITSTATUS(st) == 0)
            ok++;
    }
    printf("forkexec ok %d\n", ok);
    return 0;
}
"#;

/// `execve` ends the image when it succeeds, so without a table of
/// remembered sites its site is left trapping (`rewrite::ends_the_image`):
/// a forked child whose only trap is its `execve` rewrites no site (before,
/// each child read `/proc/self/maps` and rewrote its fresh copy of the
/// site), and the children still run as on Linux.
#[test]
fn a_forked_child_that_only_execs_rewrites_no_site() {
    let dir = tempfile::tempdir().unwrap();
    let bin = compile_probe(dir.path(), "forkexec", FORK_EXEC);
    let linux = Command::new(&bin).output_bounded().unwrap();
    assert_eq!(text(&linux.stdout), "forkexec ok 5\n");
    let traps = dir.path().join("traps");
    let mut cmd = atoll();
    cmd.args(["run", "--without", "remembered-sites", "--"])
        .arg(&bin)
        .env("ATOLL_TRAP_STATS", &traps);
    let out = output_within(cmd, LIMIT);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), text(&linux.stdout));
    // Each child's image writes its line as it execs: `execve` counted
    // once, and no `sites:N` (written only when N > 0).
    let stats = std::fs::read_to_string(&traps).unwrap();
    let execve = format!("{}:", libc::SYS_execve);
    let children: Vec<&str> = stats
        .lines()
        .filter(|l| l.split_whitespace().any(|f| f.starts_with(&execve)))
        .collect();
    assert_eq!(children.len(), 5, "{stats}");
    for line in children {
        let sites = line
            .split_whitespace()
            .filter_map(|f| f.strip_prefix("sites:"))
            .map(|n| n.parse::<u64>().unwrap())
            .sum::<u64>();
        assert_eq!(sites, 0, "{stats}");
    }
}

/// A site whose number is set by `xor %eax,%eax` (glibc's `read`): two
/// bytes hold no `jmp rel32`, so the `xor` jumps to the padding after the
/// function's `ret`, which jumps to the stub. It traps once; a path that
/// jumps straight to its `syscall` with another number keeps trapping and
/// keeps its number.
#[test]
fn a_read_site_set_by_a_two_byte_xor_traps_once() {
    let dir = tempfile::tempdir().unwrap();
    let bin = probe(dir.path());
    let linux = on_linux(&bin, "short");
    assert_eq!(linux, "short read 4000 abcd getppid 100\n");
    let traps = dir.path().join("traps");
    let out = in_atoll(&bin, "short", &["--servers", "2"], &[], &traps);
    assert_eq!(text(&out.stdout), linux);
    let all = std::fs::read_to_string(&traps).unwrap_or_default();
    assert!(
        trap_count(&traps, &libc::SYS_read.to_string()) <= 3,
        "{all}"
    );
    assert!(
        trap_count(&traps, &libc::SYS_getppid.to_string()) >= 100,
        "{all}"
    );
    assert!(trap_count(&traps, "direct") >= 999, "{all}");

    let out = in_atoll(&bin, "short", &["--syscall-sites", "trap"], &[], &traps);
    assert_eq!(text(&out.stdout), linux);
    assert!(trap_count(&traps, &libc::SYS_read.to_string()) >= 1000);
}

/// stdio reads through glibc's own `read`, which has no PLT entry, on its
/// multi-threaded (cancellable) path: four threads, 4000 unbuffered
/// `fgetc` each, trap at most once per site instead of once per byte.
#[test]
fn stdio_reads_from_threads_go_through_rewritten_read_sites() {
    let dir = tempfile::tempdir().unwrap();
    let bin = probe(dir.path());
    let linux = on_linux(&bin, "stdio");
    assert_eq!(linux, "stdio ends 2000\n");
    let traps = dir.path().join("traps");
    for _ in 0..3 {
        let out = in_atoll(&bin, "stdio", &["--servers", "2"], &[], &traps);
        assert_eq!(text(&out.stdout), linux);
        let all = std::fs::read_to_string(&traps).unwrap_or_default();
        // Each of the four threads may meet the site before the first
        // rewrite is in; the shell before the exec has sites of its own.
        assert!(
            trap_count(&traps, &libc::SYS_read.to_string()) <= 8,
            "{all}"
        );
        assert!(trap_count(&traps, "direct") >= 4000, "{all}");
    }
}

/// A site whose `syscall` runs from one page into the next, after a site
/// on the first page was rewritten: that rewrite's `mprotect` split the
/// page off as a mapping of its own, so the `syscall` lies in the next
/// mapping (of the same file). It is still rewritten: one trap, not 1000.
#[test]
fn a_site_whose_syscall_crosses_into_a_split_off_page_traps_once() {
    let dir = tempfile::tempdir().unwrap();
    let bin = probe(dir.path());
    let linux = on_linux(&bin, "cross");
    assert_eq!(linux, "cross getppid 10 getpid 1000\n");
    let traps = dir.path().join("traps");
    let out = in_atoll(&bin, "cross", &[], &[], &traps);
    assert_eq!(text(&out.stdout), linux);
    let all = std::fs::read_to_string(&traps).unwrap_or_default();
    // The probe's site and glibc's `getpid` (the shell's own before its
    // exec may add a few).
    assert!(
        trap_count(&traps, &libc::SYS_getpid.to_string()) <= 5,
        "{all}"
    );
    assert!(trap_count(&traps, "direct") >= 1000, "{all}");
}

/// With the table of remembered sites, the first child's `execve` traps,
/// is rewritten and remembered; the parent rewrites the remembered site in
/// its own text before its next fork (`eager::before_fork`), so the other
/// four children exec through the entry, without a trap, as on Linux.
/// Without the table, each child traps at its `execve`. (A thread that
/// switched dispatch off, as atoll's relay for static programs does
/// before its exec, runs the rewritten site as a plain call:
/// `clone_sites.rs`, `foreign.rs`.)
#[test]
fn children_exec_through_a_remembered_execve_site_without_a_trap() {
    let dir = tempfile::tempdir().unwrap();
    let bin = compile_probe(dir.path(), "forkexec", FORK_EXEC);
    let linux = Command::new(&bin).output_bounded().unwrap();
    assert_eq!(text(&linux.stdout), "forkexec ok 5\n");
    let execve = libc::SYS_execve.to_string();
    let run = |opts: &[&str], traps: &Path| {
        let mut cmd = atoll();
        cmd.arg("run")
            .args(opts)
            .arg("--")
            .arg(&bin)
            .env("ATOLL_TRAP_STATS", traps);
        let out = output_within(cmd, LIMIT);
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert_eq!(text(&out.stdout), text(&linux.stdout));
    };
    let traps = dir.path().join("traps");
    run(&["--servers", "2"], &traps);
    let stats = std::fs::read_to_string(&traps).unwrap();
    assert!(trap_count(&traps, &execve) <= 1, "{stats}");
    let without = dir.path().join("without");
    run(
        &["--servers", "2", "--without", "remembered-sites"],
        &without,
    );
    assert_eq!(trap_count(&without, &execve), 5);
}

fn masks_probe(dir: &Path) -> PathBuf {
    compile_probe(dir, "masks", include_str!("rewrite/masks.c"))
}

/// `rt_sigprocmask` through a rewritten site changes the thread's own mask
/// (the entry has no signal frame): a signal sent while it is blocked stays
/// pending and is delivered exactly once by the unblock; with threads, a
/// sender's queued real-time signals arrive while the mask blocks them,
/// while atoll code runs in the entry, or in program code, and each is
/// delivered once. The same probe with every site trapping shows the calls
/// that the rewritten sites saved.
#[test]
fn masks_changed_through_a_rewritten_site_deliver_each_signal_once() {
    let dir = tempfile::tempdir().unwrap();
    let bin = masks_probe(dir.path());
    let nr = libc::SYS_rt_sigprocmask.to_string();

    let linux = on_linux(&bin, "blocked");
    assert_eq!(
        linux,
        "blocked rounds 50 delivered 50 bad 0 usr1-blocked-now 0\n"
    );
    let traps = dir.path().join("blocked");
    let out = in_atoll(&bin, "blocked", &["--servers", "2"], &[], &traps);
    assert_eq!(text(&out.stdout), linux);
    // The probe's two sites trap once each (and glibc's few, once).
    assert!(
        trap_count(&traps, &nr) <= 6,
        "{:?}",
        std::fs::read_to_string(&traps)
    );
    assert!(trap_count(&traps, "direct") >= 98);
    let trapping = dir.path().join("blocked-trapping");
    let opts = ["--servers", "2", "--syscall-sites", "trap"];
    let out = in_atoll(&bin, "blocked", &opts, &[], &trapping);
    assert_eq!(text(&out.stdout), linux);
    assert!(trap_count(&trapping, &nr) >= 101);

    let linux = on_linux(&bin, "threads");
    assert_eq!(linux, "threads sent 1200 delivered 1200 threads-off 0\n");
    let traps = dir.path().join("threads");
    let out = in_atoll(&bin, "threads", &["--servers", "2"], &[], &traps);
    assert_eq!(text(&out.stdout), linux);
    // Each site traps at most once per thread that reaches it before it
    // is rewritten: the worker's four, glibc's thread start and creation.
    let trapped = trap_count(&traps, &nr);
    assert!(trapped <= 40, "{:?}", std::fs::read_to_string(&traps));
}
