//! POSIX as Linux gives it: hostile arguments get Linux's errors, and the
//! pjdfstest conformance suite passes inside atoll as on tmpfs.

use std::path::Path;
use std::process::Command;

use atoll_tests::{compile_probe, run_in_atoll};

/// Run the bad-pointer probe in `dir` on the host: one line per call.
fn efault_on_host(probe: &Path, dir: &Path) -> String {
    let out = Command::new(probe).arg(dir).output().expect("run probe");
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
