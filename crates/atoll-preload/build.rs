//! Link the unwinder into libatoll instead of loading `libgcc_s`.
//!
//! The preload library is mapped into every process an instance starts, so
//! what its loading costs is paid on every `exec`. Rust's standard library
//! asks for `-lgcc_s` (the unwinder behind `catch_unwind`, which turns a
//! panic inside the client into `EIO`); loading that library and running
//! its constructor (`__cpu_indicator_init`, a series of `cpuid`s, each a
//! trap to the hypervisor in a virtual machine) cost about 100 µs of CPU
//! per process start here. GCC's static unwinder, `libgcc_eh.a`, is the
//! same code: a linker script named `libgcc_s.so` in a search directory of
//! this crate's own link points `-lgcc_s` at it. Its symbols stay local to
//! libatoll (rustc's version script exports only the C entry points), and
//! it finds every module's unwind tables through `dl_iterate_phdr`, as the
//! shared one does. Without a `libgcc_eh.a` (another C toolchain) the link
//! is left as it is.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=CC");
    let gnu = std::env::var("CARGO_CFG_TARGET_ENV").is_ok_and(|e| e == "gnu");
    let linux = std::env::var("CARGO_CFG_TARGET_OS").is_ok_and(|o| o == "linux");
    if !(gnu && linux) {
        return;
    }
    let Some(unwinder) = static_unwinder() else {
        println!("cargo:warning=no libgcc_eh.a: libatoll loads libgcc_s at run time");
        return;
    };
    let dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"))
        .join("static-unwinder");
    std::fs::create_dir_all(&dir).expect("create the unwinder's search directory");
    let script = format!("INPUT({})\n", unwinder.display());
    std::fs::write(dir.join("libgcc_s.so"), script).expect("write the linker script");
    println!("cargo:rustc-link-search=native={}", dir.display());
}

/// Where the C compiler keeps `libgcc_eh.a`, if it has one.
fn static_unwinder() -> Option<PathBuf> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let out = Command::new(cc)
        .arg("-print-file-name=libgcc_eh.a")
        .output()
        .ok()?;
    let path = PathBuf::from(String::from_utf8(out.stdout).ok()?.trim());
    // An unknown file's name comes back bare: only an absolute path is found.
    (path.is_absolute() && Path::new(&path).is_file()).then_some(path)
}
