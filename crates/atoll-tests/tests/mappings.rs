//! Mappings of atoll files hold their blocks: after `close` + `unlink`, or
//! a truncate, a store through a stale `mmap` never reaches another file,
//! also across `fork`, partial `munmap`, `mremap` and `MAP_FIXED`; the
//! blocks come back at the last unmap, exit or exec. Run with a cache small
//! enough (`--memory 1M`) that other files take every free block.

use atoll_tests::OutputBounded as _;
use std::path::{Path, PathBuf};

use atoll_tests::{atoll, compile_probe, run_in_atoll, MOUNT};

const SERVERS: [&str; 2] = ["1", "3"];

fn probe(dir: &Path) -> PathBuf {
    compile_probe(dir, "stale", include_str!("mappings/stale.c"))
}

/// `stale MODE` under `--servers N --memory 1M`: its output.
fn stale(bin: &Path, servers: &str, mode: &str) -> String {
    let out = run_in_atoll(
        &["--servers", servers, "--memory", "1M"],
        &format!("{} {mode}", bin.display()),
    );
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{mode} with {servers} servers: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

const INTACT: &str = "filled 1 corrupt 0 private 1\n";

#[test]
fn a_store_through_a_mapping_of_an_unlinked_file_reaches_no_other_file() {
    let dir = tempfile::tempdir().unwrap();
    let bin = probe(dir.path());
    for n in SERVERS {
        assert_eq!(stale(&bin, n, "unlink"), format!("{INTACT}released 1\n"));
    }
}

#[test]
fn a_store_through_a_mapping_of_a_truncated_file_reaches_no_other_file() {
    let dir = tempfile::tempdir().unwrap();
    let bin = probe(dir.path());
    for n in SERVERS {
        assert_eq!(stale(&bin, n, "truncate"), format!("{INTACT}released 1\n"));
    }
}

#[test]
fn a_forked_child_holds_the_blocks_its_parent_unmapped() {
    let dir = tempfile::tempdir().unwrap();
    let bin = probe(dir.path());
    for n in SERVERS {
        assert_eq!(stale(&bin, n, "fork"), INTACT);
    }
}

#[test]
fn partial_munmap_mremap_and_map_fixed_keep_exactly_what_stays_mapped() {
    let dir = tempfile::tempdir().unwrap();
    let bin = probe(dir.path());
    for n in SERVERS {
        assert_eq!(
            stale(&bin, n, "partial"),
            format!("{INTACT}held 1\nreleased 1\n")
        );
        assert_eq!(stale(&bin, n, "mremap"), format!("{INTACT}released 1\n"));
        assert_eq!(stale(&bin, n, "fixed"), "released 1\ncorrupt 0\n");
    }
}

/// A process that exits, execs and lives on, or is killed with a mapping
/// still in place gives the blocks back (its old session ends; the
/// servers learn it a moment later); while it lives they stay held.
#[test]
fn mapped_blocks_return_when_the_process_exits_execs_or_is_killed() {
    let dir = tempfile::tempdir().unwrap();
    let bin = probe(dir.path());
    for n in SERVERS {
        let out = run_in_atoll(
            &["--servers", n, "--memory", "1M"],
            &format!(
                r#"P={}; a=$($P count)
                back() {{
                    for i in $(seq 50); do b=$($P count); [ $b -ge $a ] && break; sleep 0.1; done
                    [ $b -eq $a ] && echo "$1 back" || echo "$1 lost $a $b"
                }}
                $P leave; back exit
                $P leave-exec & pid=$!
                until [ -e /atoll/ready ]; do sleep 0.01; done
                back exec; kill $pid; rm /atoll/ready
                $P leave-wait & pid=$!
                until [ -e /atoll/ready ]; do sleep 0.01; done
                [ $($P count) -eq $((a - 4)) ] && echo "mapped held"
                kill -9 $pid; back kill"#,
                bin.display()
            ),
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "exit back\nexec back\nmapped held\nkill back\n",
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Threads mapping and unmapping one file at once (with malloc's own
/// mmaps and munmaps in between) neither deadlock nor leave a mapping
/// counted: once the file is gone, every block is free.
#[test]
fn concurrent_maps_and_unmaps_leave_nothing_held() {
    concurrent_maps("threads");
}

/// The same with a signal handler mapping and unmapping the file 2,000
/// times a second. (This once kept one file's blocks in about one run in
/// three: a `munmap` could drop the piece another thread had just mapped
/// at the freed address, before the kernel call and the table change
/// became one step.)
#[test]
fn concurrent_maps_and_unmaps_with_a_mapping_signal_handler_leave_nothing_held() {
    concurrent_maps("threads-signals");
}

fn concurrent_maps(mode: &str) {
    let dir = tempfile::tempdir().unwrap();
    let bin = probe(dir.path());
    for n in SERVERS {
        let out = run_in_atoll(
            &["--servers", n, "--memory", "1M"],
            // Counted into a host file: a command substitution's pipe
            // would take blocks of the cache while the count runs.
            &format!(
                "P={}; f=$(mktemp); $P count > $f; $P {mode} $(cat $f); rm $f",
                bin.display()
            ),
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "threads ok\n",
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

// ---- coherence: a mapping follows its file (`mappings/coherent.c`) ----

/// The configurations the coherence probe runs in: two servers, and three
/// with distributed directories.
const COHERENT_CONFIGS: [&[&str]; 2] = [
    &["--servers", "2"],
    &["--servers", "3", "--distribute", "all"],
];

fn coherent_probe(dir: &Path) -> PathBuf {
    compile_probe(dir, "coherent", include_str!("mappings/coherent.c"))
}

/// `coherent DIR scenario` on a host tmpfs directory (`/dev/shm`), where
/// Linux's page cache answers.
fn coherent_on_tmpfs(bin: &Path, scenario: &str) -> String {
    let base = Path::new("/dev/shm");
    let dir = if base.is_dir() {
        tempfile::tempdir_in(base)
    } else {
        tempfile::tempdir()
    }
    .expect("tempdir");
    let out = std::process::Command::new(bin)
        .arg(dir.path())
        .arg(scenario)
        .stdin(std::process::Stdio::null())
        .output_bounded()
        .expect("run probe");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{scenario} on tmpfs: {stdout}");
    stdout
}

fn coherent_in_atoll(bin: &Path, opts: &[&str], args: &str) -> String {
    let out = run_in_atoll(opts, &format!("{} $ROOT {args}", bin.display()));
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{args} in atoll {opts:?}: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Each scenario prints the same in atoll as on tmpfs.
fn same_as_tmpfs(scenarios: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let bin = coherent_probe(dir.path());
    for scenario in scenarios {
        let host = coherent_on_tmpfs(&bin, scenario);
        for opts in COHERENT_CONFIGS {
            assert_eq!(
                coherent_in_atoll(&bin, opts, scenario),
                host,
                "{scenario} in atoll {opts:?} differs from tmpfs"
            );
        }
    }
}

/// Another process truncates the file down and up, or punches a hole in
/// it: the mapping shows the file's new zeros, a store through it is file
/// data again, and `st_blocks` and `SEEK_HOLE` see the hole. Also for a
/// forked child that keeps the mapping its parent dropped, and for a
/// private mapping's pages it never stored to.
#[test]
fn a_mapping_kept_across_truncate_and_punch_shows_the_files_new_pages() {
    same_as_tmpfs(&["truncate", "punch", "fork", "private"]);
}

/// A shared mapping of a hole, of pages past the end (also grown there by
/// `mremap`) shows what another process's `write` puts there later.
#[test]
fn a_mapping_of_a_hole_or_past_the_end_shows_later_writes() {
    same_as_tmpfs(&["hole", "past-eof", "mremap"]);
}

/// Past the end after a shrinking truncate Linux raises `SIGBUS`; atoll
/// reads zeros and lets a store land in a block that never becomes file
/// data (docs/COMPATIBILITY.md). Everything else is the same: the old
/// bytes are gone, and the regrown file reads zeros there.
#[test]
fn past_the_end_after_a_truncate_the_old_bytes_are_gone() {
    let dir = tempfile::tempdir().unwrap();
    let bin = coherent_probe(dir.path());
    let host = coherent_on_tmpfs(&bin, "past-eof-access");
    let linux = "  load past end: sigbus\n  store past end: sigbus\n";
    assert!(host.contains(linux), "{host}");
    let ours = "  load past end: zero\n  store past end: done\n";
    for opts in COHERENT_CONFIGS {
        let out = coherent_in_atoll(&bin, opts, "past-eof-access");
        assert_eq!(out, host.replace(linux, ours), "in atoll {opts:?}");
    }
}

/// Every block the scenarios used (retained for mappings, past the end,
/// in holes) is free again once the files and the processes are gone,
/// and a shared mapping of a sparse range larger than the cache is
/// refused whole (`ENOMEM`) instead of taking every block.
#[test]
fn blocks_retained_for_mappings_all_come_back() {
    let dir = tempfile::tempdir().unwrap();
    let bin = coherent_probe(dir.path());
    let mut configs: Vec<&[&str]> = COHERENT_CONFIGS.to_vec();
    configs.push(&["--servers", "2", "--memory", "1M"]);
    for opts in configs {
        assert_eq!(
            coherent_in_atoll(&bin, opts, "leak"),
            "huge sparse shared mapping: Cannot allocate memory\nblocks back: all\n",
            "in atoll {opts:?}"
        );
    }
}

/// The `mappings.retained_blocks` gauge of `atoll status` (summed over
/// servers).
fn retained_gauge(id: &str) -> u64 {
    let out = atoll()
        .args(["status", "--id", id])
        .output_bounded()
        .expect("status");
    assert!(out.status.success(), "status failed");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("mappings.retained_blocks"))
        .map_or(0, |n| n.trim().parse().expect("gauge value"))
}

/// `atoll status` shows the blocks a mapping keeps after its file was cut
/// to nothing, and none once the process is gone.
#[test]
fn status_shows_blocks_retained_for_a_mapping_until_it_goes() {
    use std::process::Stdio;
    let dir = tempfile::tempdir().unwrap();
    let bin = coherent_probe(dir.path());
    let out = atoll()
        .args(["boot", "--servers", "2", "--memory", "64M"])
        .output_bounded()
        .expect("atoll boot");
    assert!(out.status.success(), "boot failed");
    let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    struct Stop(String);
    impl Drop for Stop {
        fn drop(&mut self) {
            let _ = atoll().args(["stop", "--id", &self.0]).status();
        }
    }
    let _stop = Stop(id.clone());
    let exec = |script: &str| {
        atoll()
            .args(["exec", "--id", &id, "--", "bash", "-c", script])
            .env("ROOT", MOUNT)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("atoll exec")
            .success()
    };
    assert_eq!(retained_gauge(&id), 0);
    /// The holder, killed if the test fails before it exits.
    struct Holder(std::process::Child);
    impl Drop for Holder {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut holder = Holder(
        atoll()
            .args(["exec", "--id", &id, "--"])
            .arg(&bin)
            .args([MOUNT, "hold"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn holder"),
    );
    // Until the holder has cut its file (bounded by tries, not by time).
    let ready = (0..500).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(20));
        exec("test -e $ROOT/ready")
    });
    assert!(ready, "the holder never got ready");
    assert_eq!(retained_gauge(&id), 4);
    assert!(exec("touch $ROOT/go"));
    assert!(holder.0.wait().expect("wait holder").success());
    // The servers learn of the holder's end a moment later.
    let gone = (0..100).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(50));
        retained_gauge(&id) == 0
    });
    assert!(gone, "{} blocks still retained", retained_gauge(&id));
}

/// Pages of a mapping past the end of its file raise `SIGBUS`, show the
/// file's data once another process grew it, fault again after this
/// process truncates, also in a private mapping; with no handler (or
/// `SIG_IGN`) the process dies by `SIGBUS`: the transcript equals tmpfs's.
#[test]
fn pages_past_the_end_fault_until_the_file_grows_as_on_tmpfs() {
    let dir = tempfile::tempdir().unwrap();
    let bin = compile_probe(dir.path(), "pastend", include_str!("mappings/pastend.c"));
    let shm = tempfile::tempdir_in("/dev/shm").expect("tmpfs directory");
    let host = std::process::Command::new(&bin)
        .arg(shm.path())
        .output_bounded()
        .expect("probe");
    let want = String::from_utf8_lossy(&host.stdout).to_string();
    assert!(
        host.status.success() && want.contains("next page: -1"),
        "tmpfs: {want}"
    );
    for shape in [
        &["--servers", "2"][..],
        &["--servers", "3", "--distribute", "all"],
        &[],
    ] {
        let out = run_in_atoll(shape, &format!("{} {MOUNT}", bin.display()));
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            want,
            "{shape:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
