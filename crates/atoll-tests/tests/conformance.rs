//! POSIX as Linux gives it: hostile arguments get Linux's errors, and the
//! pjdfstest conformance suite passes inside atoll as on tmpfs.

use atoll_tests::OutputBounded as _;
use std::path::Path;
use std::process::Command;

use atoll_tests::{compile_probe, run_in_atoll};

/// Run the bad-pointer probe in `dir` on the host: one line per call.
fn efault_on_host(probe: &Path, dir: &Path) -> String {
    let out = Command::new(probe)
        .arg(dir)
        .output_bounded()
        .expect("run probe");
    assert!(
        out.status.success(),
        "probe failed on the host: {:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

#[test]
fn bad_pointers_give_efault_in_the_mount_and_outside_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let probe = compile_probe(tmp.path(), "efault", include_str!("conformance/efault.c"));
    let host_dir = tmp.path().join("host");
    std::fs::create_dir(&host_dir).unwrap();
    let want = efault_on_host(&probe, &host_dir);
    assert!(
        want.lines().count() > 90,
        "probe printed too little:\n{want}"
    );
    for opts in [
        &["--servers", "1"][..],
        &["--servers", "3", "--distribute", "all"],
    ] {
        // In the mount (the cwd is there too: getcwd is atoll's), then in a
        // host directory from inside atoll (the paths are Linux's).
        let outside = tmp.path().join(format!("outside-{}", opts[1]));
        let script = format!(
            "mkdir $ROOT/t && {p} $ROOT/t && echo --- && mkdir {o} && {p} {o}",
            p = probe.display(),
            o = outside.display()
        );
        let out = run_in_atoll(opts, &script);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{opts:?}: probe died ({:?}) after:\n{stdout}\nstderr:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let (inside, outside) = stdout.split_once("---\n").expect("two runs");
        assert_eq!(inside, want, "{opts:?}: in the mount");
        assert_eq!(outside, want, "{opts:?}: outside the mount");
    }
}

// ---------------------------------------------------------------------------
// pjdfstest (the Rust edition, pinned in the Makefile and installed by
// `make pjdfstest` under target/): every test that passes on tmpfs must pass
// inside atoll, and the same tests must be skipped.

/// Tests that pass on tmpfs but not yet in atoll, with the reason; each is a
/// known gap. `distributed_only` entries fail only with distributed
/// directories. An entry that passes is reported, so the list shrinks.
struct Known {
    pattern: &'static str,
    distributed_only: bool,
    why: &'static str,
}

const MOUNTS: &str = "the mount is not a kernel file system: nothing can be \
     mounted on one of its directories";
const KNOWN: &[Known] = &[Known {
    pattern: "rmdir::ebusy",
    distributed_only: false,
    why: MOUNTS,
}];

/// The known gap `name` falls under: a pattern names a test or a group by
/// its start (`chmod::x::` covers `chmod::x::dir`), or by a part shared
/// across groups when it starts with `::`.
fn known(name: &str, distributed: bool) -> Option<&'static Known> {
    KNOWN.iter().find(|k| {
        let hit = if k.pattern.starts_with("::") {
            name.contains(k.pattern)
        } else {
            name.starts_with(k.pattern)
        };
        hit && (distributed || !k.distributed_only)
    })
}

/// The installed runner: `$ATOLL_PJDFSTEST`, else `make pjdfstest`'s copy.
fn pjdfstest_bin() -> std::path::PathBuf {
    if let Some(p) = std::env::var_os("ATOLL_PJDFSTEST") {
        return p.into();
    }
    let target = atoll_tests::artifact_dir()
        .parent()
        .expect("target dir")
        .to_path_buf();
    let bin = target.join("pjdfstest/bin/pjdfstest");
    assert!(
        bin.exists(),
        "{} missing: run `make pjdfstest` (.ci/run does)",
        bin.display()
    );
    bin
}

/// The runner's configuration: the features Linux file systems have, and
/// the dummy users the permission tests switch to.
const PJDFSTEST_CONF: &str = r#"
[features]
posix_fallocate = {}
utime_now = {}
utimensat = {}

[settings]
naptime = 0.01

[dummy_auth]
entries = [
  ["nobody", "nogroup"],
  ["daemon", "daemon"],
  ["bin", "bin"],
]
"#;

/// Outcome per test name (`ok`, `skipped`, `FAILED`, …) from the runner's
/// output, and whether its closing summary was printed.
fn outcomes(stdout: &str) -> (std::collections::BTreeMap<String, String>, bool) {
    let mut map = std::collections::BTreeMap::new();
    let mut summary = false;
    for line in stdout.lines() {
        if line.starts_with("Summary:") {
            summary = true;
        }
        if line.starts_with(char::is_whitespace) {
            continue;
        }
        let mut words = line.split_whitespace();
        let (Some(name), Some(outcome)) = (words.next(), words.next()) else {
            continue;
        };
        if name.contains("::") {
            map.insert(name.to_string(), outcome.to_string());
        }
    }
    (map, summary)
}

fn counts(m: &std::collections::BTreeMap<String, String>) -> String {
    let n = |o: &str| m.values().filter(|v| *v == o).count();
    format!(
        "{} passed, {} failed, {} skipped",
        n("ok"),
        m.len() - n("ok") - n("skipped"),
        n("skipped")
    )
}

/// A tmpfs mounted on a fresh directory (root only), unmounted on drop.
struct Tmpfs {
    dir: tempfile::TempDir,
    mounted: bool,
}

impl Tmpfs {
    fn new() -> Tmpfs {
        let dir = tempfile::tempdir().expect("tempdir");
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=256m", "tmpfs"])
            .arg(dir.path())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        Tmpfs { dir, mounted }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        if self.mounted {
            let _ = Command::new("umount").arg(self.dir.path()).status();
        }
    }
}

#[test]
fn pjdfstest_passes_in_atoll_as_on_tmpfs() {
    let bin = pjdfstest_bin();
    let tmp = tempfile::tempdir().expect("tempdir");
    let conf = tmp.path().join("pjdfstest.toml");
    std::fs::write(&conf, PJDFSTEST_CONF).unwrap();

    let fs = Tmpfs::new();
    if !fs.mounted {
        eprintln!("note: no tmpfs could be mounted (not root?): reference run on the host fs");
    }
    let out = Command::new(&bin)
        .arg("-c")
        .arg(&conf)
        .arg("-p")
        .arg(fs.dir.path())
        .env("NO_COLOR", "1")
        .output_bounded()
        .expect("run pjdfstest");
    let (want, done) = outcomes(&String::from_utf8_lossy(&out.stdout));
    assert!(done && want.len() > 300, "reference run incomplete");
    eprintln!("tmpfs: {}", counts(&want));

    let mut problems = Vec::new();
    for opts in [
        &["--servers", "1"][..],
        &["--servers", "3", "--distribute", "all"],
        &["--incoherent"],
    ] {
        let distributed = opts.contains(&"--distribute");
        let run = |names: &[&String]| {
            let script = format!(
                "mkdir $ROOT/x && NO_COLOR=1 {} -c {} -p $ROOT/x {} {}",
                bin.display(),
                conf.display(),
                if names.is_empty() { "" } else { "-e" },
                // Exact names carry the runner's module path.
                names
                    .iter()
                    .map(|n| format!("pjdfstest::tests::{n}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            );
            let out = run_in_atoll(opts, &script);
            let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
            let (got, done) = outcomes(&stdout);
            let unfinished = (!done).then(|| {
                format!(
                    "{opts:?}: the run did not finish ({:?}); last lines:\n{}\n{}",
                    out.status,
                    stdout.lines().rev().take(5).collect::<Vec<_>>().join("\n"),
                    String::from_utf8_lossy(&out.stderr)
                )
            });
            (got, unfinished)
        };
        let (got, unfinished) = run(&[]);
        if let Some(u) = unfinished {
            problems.push(u);
            continue;
        }
        eprintln!("atoll {}: {}", opts.join(" "), counts(&got));
        // Skips follow from the configuration and the caller: exactly as on
        // tmpfs. A test that passed on tmpfs must pass here (the known gaps
        // aside); what failed on tmpfs is not judged.
        let mut suspects = Vec::new();
        for (name, outcome) in &want {
            let theirs = got.get(name).map_or("missing", String::as_str);
            let gap = known(name, distributed);
            match (outcome.as_str(), theirs) {
                ("ok", "ok") => {
                    if let Some(k) = gap {
                        eprintln!("note: {name} passes now ({opts:?}); known as: {}", k.why);
                    }
                }
                ("ok", "FAILED") if gap.is_some() => {}
                ("ok", _) => suspects.push(name),
                ("skipped", "skipped") => {}
                ("skipped", _) | (_, "skipped") => {
                    problems.push(format!("{opts:?}: {name}: tmpfs {outcome}, atoll {theirs}"))
                }
                _ => {}
            }
        }
        // A timing test may lose to a loaded machine: what failed is run
        // once more on its own before it counts.
        if !suspects.is_empty() {
            let (again, unfinished) = run(&suspects);
            problems.extend(unfinished);
            for name in suspects {
                let theirs = again.get(name).map_or("missing", String::as_str);
                if theirs != "ok" {
                    problems.push(format!("{opts:?}: {name}: tmpfs ok, atoll {theirs}"));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// CPython's own tests of the file system, processes and signals.
const CPYTHON_TESTS: &str = "test_os test_shutil test_tempfile test_glob test_pathlib \
     test_fileio test_posix test_io test_zipfile test_tarfile test_mmap test_fcntl test_stat \
     test_signal test_subprocess test_fileinput test_zipimport test_py_compile test_importlib \
     test_filecmp test_pty test_select test_mailbox test_eintr test_file_eintr test_threadsignals \
     test_shelve test_dbm_dumb test_popen test_wait4 test_largefile test_logging \
     test_multiprocessing_fork test_compileall test_gzip test_genericpath test_posixpath \
     test_zipapp test_unicode_file_functions test_file test_tabnanny test_pkgutil test_venv \
     test_builtin test_bz2 test_lzma test_zlib test_csv test_dbm test_dbm_ndbm test_mimetypes \
     test_linecache test_runpy test_selectors test_poll test_epoll test_resource test_gettext \
     test_bufio test_univnewlines test_openpty test_plistlib test_configparser test_import \
     test_pkg test_cmd_line_script test_httpservers";

/// The tests `python3 -m test` reports failed (from its summary).
fn cpython_failures(out: &str) -> std::collections::BTreeSet<String> {
    let mut failed = std::collections::BTreeSet::new();
    let mut in_list = false;
    for line in out.lines() {
        if line.contains("failed:")
            && line
                .trim_start()
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_digit())
        {
            in_list = true;
            continue;
        }
        if in_list {
            let names: Vec<&str> = line.split_whitespace().collect();
            if names.is_empty() || !names.iter().all(|n| n.starts_with("test_")) {
                in_list = false;
                continue;
            }
            failed.extend(names.iter().map(|n| n.to_string()));
        }
    }
    failed
}

/// CPython's test suite for the file system, with its cwd and `TMPDIR` in
/// the mount, fails exactly the tests it fails in a tmpfs directory (a
/// test that fails on one side only is run once more, alone, on both).
#[test]
fn cpython_file_system_tests_pass_as_on_tmpfs() {
    let python = Path::new("/usr/bin/python3");
    let has_suite = Command::new(python)
        .args(["-c", "import test.test_os"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        has_suite,
        "CPython's test suite is missing: install libpython3.X-testsuite (.ci/run does)"
    );
    let script = |tests: &str| {
        format!(
            "mkdir -p \"$ROOT/py\" && cd \"$ROOT/py\" && TMPDIR=\"$ROOT/py\" \
             {} -m test -j2 {tests} 2>&1; echo \"exit $?\"",
            python.display()
        )
    };
    let on_tmpfs = |tests: &str| {
        let shm = tempfile::tempdir_in("/dev/shm").expect("tmpfs directory");
        let host = Command::new("bash")
            .args(["-c", &script(tests)])
            .env("ROOT", shm.path())
            .output_bounded()
            .expect("bash");
        let out = String::from_utf8_lossy(&host.stdout).to_string();
        assert!(out.contains("Tests result:"), "tmpfs run: {out}");
        cpython_failures(&out)
    };
    let in_atoll = |tests: &str| {
        let out = run_in_atoll(&["--memory", "1G"], &script(tests));
        let out = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(out.contains("Tests result:"), "atoll run: {out}");
        (cpython_failures(&out), out)
    };
    let want = on_tmpfs(CPYTHON_TESTS);
    let (got, got_out) = in_atoll(CPYTHON_TESTS);
    let differing: Vec<String> = want.symmetric_difference(&got).cloned().collect();
    if differing.is_empty() {
        return;
    }
    // A test that failed on one side only runs once more, alone, on both:
    // some (test_eintr, test_threadsignals) time signals against sleeps
    // and can fail on a loaded machine wherever they run.
    let again = differing.join(" ");
    let (got_again, again_out) = in_atoll(&again);
    assert_eq!(
        got_again,
        on_tmpfs(&again),
        "tests that failed in atoll but not on tmpfs (or the reverse), twice:\n\
         {again_out}\n--- the first run:\n{got_out}"
    );
}

#[test]
fn cpython_failures_are_read_from_the_summary() {
    let out = "== Tests result: FAILURE ==\n\n11 tests OK.\n\n2 tests failed:\n    test_mmap test_posix\n\nTotal duration: 2 min\n";
    let got: Vec<String> = cpython_failures(out).into_iter().collect();
    assert_eq!(got, ["test_mmap", "test_posix"]);
    assert!(cpython_failures("All 13 tests OK.\n").is_empty());
}
