//! Calls that used to trap by rule, at rewritten sites: clones and
//! `vfork` (made by atoll's clone handling from the registers the entry
//! saved), `sigaltstack` (the entry knows the program's stack pointer),
//! `exit_group` from glibc's `_exit` (its number in a register), and a
//! thread that switched Syscall User Dispatch off, whose rewritten sites
//! go straight to Linux as the unrewritten code would. Each case compares
//! the probe's output under atoll with the same probe on Linux, and the
//! trap counts (`ATOLL_TRAP_STATS`) with `--syscall-sites trap`.

use atoll_tests::OutputBounded as _;
use std::path::Path;
use std::process::Command;

use atoll_tests::{atoll, compile_probe, output_within, trap_count};

const LIMIT: std::time::Duration = std::time::Duration::from_secs(120);
const ROUNDS: u64 = 30;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).to_string()
}

/// The probe under `atoll run OPTS -- probe ARGS`, trap counts in `traps`.
fn in_atoll(bin: &Path, args: &[&str], opts: &[&str], traps: &Path) -> String {
    let _ = std::fs::remove_file(traps);
    let mut cmd = atoll();
    cmd.arg("run")
        .args(opts)
        .arg("--")
        .arg(bin)
        .args(args)
        .env("ATOLL_TRAP_STATS", traps);
    let out = output_within(cmd, LIMIT);
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout)
}

/// posix_spawn (and the failure it reports), `vfork` then `_exit` or
/// `execve`, `pthread_create`, a handler on the alternate stack asking
/// `sigaltstack` where it runs, glibc's `clone()` of a process on a stack
/// of its own, and a `clone3` site whose child starts on its new stack
/// after the site with the parent's registers, while SIGALRM arrives every
/// 200 µs: as on Linux, with each of these calls trapping only until its
/// site is rewritten (and remembered for the children). With every site
/// trapping, the same output costs a trap per call.
#[test]
fn clones_vfork_sigaltstack_and_exit_at_rewritten_sites_behave_as_on_linux() {
    let dir = tempfile::tempdir().unwrap();
    let bin = compile_probe(dir.path(), "clones", include_str!("clone_sites/probe.c"));
    let rounds = ROUNDS.to_string();
    let linux = Command::new(&bin).arg(&rounds).output_bounded().unwrap();
    let linux = text(&linux.stdout);
    let n = ROUNDS;
    assert_eq!(
        linux,
        format!(
            "spawned {n} missing {n} vforked {n} execd {n} threads {n} onstack {n} offstack {n} \
             cloned {n} cloned3 {n}\n"
        )
    );
    let nrs = [
        libc::SYS_vfork,
        libc::SYS_clone,
        libc::SYS_clone3,
        libc::SYS_sigaltstack,
        libc::SYS_exit_group,
    ]
    .map(|nr| nr.to_string());

    let traps = dir.path().join("rewritten");
    let out = in_atoll(&bin, &[&rounds], &["--servers", "2"], &traps);
    assert_eq!(out, linux);
    let all = std::fs::read_to_string(&traps).unwrap_or_default();
    for nr in &nrs {
        // A site's first trap in the instance, and a child that ran it
        // before its parent rewrote the remembered site.
        assert!(trap_count(&traps, nr) <= 3, "{nr}: {all}");
    }
    assert!(trap_count(&traps, "direct") >= 4 * n, "{all}");

    let trapping = dir.path().join("trapping");
    let opts = ["--servers", "2", "--syscall-sites", "trap"];
    let out = in_atoll(&bin, &[&rounds], &opts, &trapping);
    assert_eq!(out, linux);
    let all = std::fs::read_to_string(&trapping).unwrap_or_default();
    for (nr, least) in nrs.iter().zip([2 * n, n, n, 2 * n, 2 * n]) {
        assert!(trap_count(&trapping, nr) >= least, "{nr}: {all}");
    }
}

/// A probe's own `openat` site, rewritten at its first trap, then
/// Syscall User Dispatch switched off with `prctl`, then the same site.
const DISPATCH_OFF: &str = r#"
#include <stdio.h>
#include <sys/prctl.h>
static long openat_site(const char *p) {
    long r;
    register long r10 asm("r10") = 0;
    asm volatile("nop\n\tmov $257, %%eax\n\tsyscall"
                 : "=a"(r)
                 : "D"(-100L), "S"(p), "d"(0L), "r"(r10)
                 : "rcx", "r11", "memory");
    return r;
}
int main(int argc, char **argv) {
    long a = openat_site(argv[1]);
    long b = openat_site(argv[1]);
    long off = prctl(59, 0, 0, 0, 0);
    long c = openat_site(argv[1]);
    printf("before %s %s off %ld after %ld\n", a >= 0 ? "open" : "fail",
           b >= 0 ? "open" : "fail", off, c >= 0 ? 0 : c);
    fflush(stdout);
    return 0;
}
"#;

/// After a thread switches dispatch off (as atoll's relay for static
/// programs does before it execs one), its rewritten sites are plain
/// system calls: the same `openat` of `/atoll/f` that atoll answered
/// through the rewritten site now reaches Linux, which has no `/atoll`
/// (`-ENOENT`, what the probe gets on the host for that path), as the
/// unrewritten site would have.
#[test]
fn a_thread_that_switched_dispatch_off_runs_rewritten_sites_as_plain_calls() {
    let dir = tempfile::tempdir().unwrap();
    let bin = compile_probe(dir.path(), "dispatchoff", DISPATCH_OFF);
    let host = Command::new(&bin).arg("/atoll/f").output_bounded().unwrap();
    assert_eq!(text(&host.stdout), "before fail fail off 0 after -2\n");
    let file = dir.path().join("f");
    std::fs::write(&file, "x").unwrap();
    let host = Command::new(&bin).arg(&file).output_bounded().unwrap();
    assert_eq!(text(&host.stdout), "before open open off 0 after 0\n");

    let traps = dir.path().join("traps");
    let _ = std::fs::remove_file(&traps);
    let mut cmd = atoll();
    cmd.args(["run", "--servers", "2", "--", "sh", "-c"])
        .arg("printf x > /atoll/f && exec \"$0\" /atoll/f")
        .arg(&bin)
        .env("ATOLL_TRAP_STATS", &traps);
    let out = output_within(cmd, LIMIT);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "before open open off 0 after -2\n");
    // Its trap counts were written as it switched dispatch off (its exit
    // went straight to Linux): the `prctl` itself, the site's one trap and
    // the one call through it.
    let all = std::fs::read_to_string(&traps).unwrap_or_default();
    assert_eq!(trap_count(&traps, &libc::SYS_prctl.to_string()), 1, "{all}");
    assert!(trap_count(&traps, "direct") >= 1, "{all}");
}
