//! Helpers shared by the integration tests: where the built library is,
//! compiling C probes, running programs with and without it.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// `libatoll_preload.so`, (re)built on first use: `cargo test` builds no
/// cdylib for integration tests, so each test binary runs `cargo build` for
/// this crate once, into the target directory it itself lives in.
pub fn lib_path() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let exe = std::env::current_exe().expect("test binary path");
            // <target>/<profile>/deps/<test binary>
            let profile_dir = exe.parent().and_then(Path::parent).expect("profile dir");
            let target_dir = profile_dir.parent().expect("target dir");
            let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
            let mut build = Command::new(env!("CARGO"));
            build
                .args(["build", "--quiet", "-p", "atoll-preload", "--manifest-path"])
                .arg(&manifest)
                .arg("--target-dir")
                .arg(target_dir);
            if profile_dir.file_name() == Some("release".as_ref()) {
                build.arg("--release");
            }
            let status = build.status().expect("run cargo build");
            assert!(status.success(), "building libatoll_preload.so failed");
            let lib = profile_dir.join("libatoll_preload.so");
            assert!(lib.exists(), "{} not built", lib.display());
            lib
        })
        .clone()
}

/// Compile `tests/probes/<name>.c` into `out_dir`, fortified like Debian's
/// programs (so `__read_chk` & co. are exercised).
pub fn compile_probe(name: &str, out_dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/probes")
        .join(format!("{name}.c"));
    let out = out_dir.join(name);
    let status = Command::new("cc")
        .args(["-O2", "-D_FORTIFY_SOURCE=2", "-pthread", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .expect("run cc");
    assert!(status.success(), "cc failed for {name}");
    out
}

/// How to run a program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Preload {
    /// Without libatoll.
    None,
    /// With libatoll and no instance (mode Off).
    Off,
    /// With libatoll in SUD self-test mode.
    SelfTest,
}

/// A command with atoll's variables cleared and `how` applied.
pub fn command(program: &str, how: Preload) -> Command {
    let mut c = Command::new(program);
    for v in [
        "LD_PRELOAD",
        "ATOLL_SOCKET",
        "ATOLL_SESSION_FD",
        "ATOLL_STATE",
        "ATOLL_SUD_SELFTEST",
        "ATOLL_TRAP_STATS",
        "ATOLL_DEBUG",
    ] {
        c.env_remove(v);
    }
    match how {
        Preload::None => {}
        Preload::Off => {
            c.env("LD_PRELOAD", lib_path());
        }
        Preload::SelfTest => {
            c.env("LD_PRELOAD", lib_path())
                .env("ATOLL_SUD_SELFTEST", "1");
        }
    }
    c
}

pub fn run(mut c: Command) -> Output {
    c.output().expect("spawn")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}
