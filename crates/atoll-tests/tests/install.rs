//! The installed layout (`make install PREFIX=…`): `atoll` in `bin/`, the
//! preload library in `lib/atoll/`, found with nothing set, and working
//! after the build tree is out of reach.

use atoll_tests::{artifact_dir, output_within, RUN_LIMIT};
use std::process::{Command, Stdio};

#[test]
fn an_installed_atoll_finds_its_library_and_runs_programs() {
    let prefix = tempfile::tempdir().expect("tempdir");
    let bin = prefix.path().join("bin");
    let lib = prefix.path().join("lib/atoll");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(&lib).unwrap();
    let built = artifact_dir();
    std::fs::copy(built.join("atoll"), bin.join("atoll")).unwrap();
    std::fs::copy(
        built.join("libatoll_preload.so"),
        lib.join("libatoll_preload.so"),
    )
    .unwrap();
    let mut cmd = Command::new(bin.join("atoll"));
    cmd.env_remove("ATOLL_PRELOAD")
        .env_remove("ATOLL_ARTIFACTS")
        .env_remove("LD_PRELOAD")
        .args(["run", "--memory", "64M", "--"])
        .args(["sh", "-c", "echo installed > /atoll/x && cat /atoll/x"])
        .stdin(Stdio::null());
    let out = output_within(cmd, RUN_LIMIT);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "installed\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
