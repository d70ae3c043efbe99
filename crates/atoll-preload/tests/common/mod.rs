//! Helpers shared by the integration tests: where the built library is,
//! compiling C probes, running programs with and without it.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// `libatoll_preload.so` next to the test binary's `deps/` directory.
pub fn lib_path() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let dir = exe.parent().and_then(Path::parent).expect("target dir");
    let lib = dir.join("libatoll_preload.so");
    assert!(lib.exists(), "{} not built", lib.display());
    lib
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
