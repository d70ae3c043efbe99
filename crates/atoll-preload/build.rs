//! How libatoll is linked: what its loading costs each process.
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
//!
//! Two more link settings cut the pages each start touches:
//! * `-z pack-relative-relocs` (`DT_RELR`, glibc 2.36 and later): the
//!   loader reads the 2,000-odd relative relocations as a bitmap of about
//!   a kilobyte rather than 48 KiB of `Elf64_Rela` records. Only when the
//!   build machine's glibc has it: a library with `DT_RELR` needs
//!   `GLIBC_ABI_DT_RELR` and an older loader refuses it.
//! * a linker script that only adds `.bss.atoll_tables` after `.bss`
//!   (`INSERT`, the default layout stays): the client's big zero tables
//!   (`fdtable::DESCS`, `mapping::TABLE`) are put there, so that the small
//!   statics a start touches lie together on a few pages.
//! * a linker script that puts the functions a start, a forked child's
//!   exec and an exit run (`start-path.txt`) together before the rest of
//!   `.text` (`.text.atoll_start`, right after `.init`, whose `_init`
//!   runs first, and with the C runtime's `frame_dummy`): the kernel maps
//!   a library's code 64 KiB around each fault, and these paths then
//!   fault on three such windows of the 1.5 MiB of code (and the PLT's)
//!   rather than fifteen.

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
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let tables = out.join("tables.ld");
    std::fs::write(
        &tables,
        "SECTIONS { .bss.atoll_tables (NOLOAD) : { *(.bss.atoll_tables) } } INSERT AFTER .bss;\n",
    )
    .expect("write the tables' linker script");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-T,{}", tables.display());
    println!("cargo:rerun-if-changed=start-path.txt");
    let list = std::fs::read_to_string("start-path.txt").expect("read start-path.txt");
    let start = out.join("start.ld");
    std::fs::write(&start, start_path_script(&list)).expect("write the start path's linker script");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-T,{}", start.display());
    if glibc_has_relr() {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-z,pack-relative-relocs");
    }
    let Some(unwinder) = static_unwinder() else {
        println!("cargo:warning=no libgcc_eh.a: libatoll loads libgcc_s at run time");
        return;
    };
    let dir = out.join("static-unwinder");
    std::fs::create_dir_all(&dir).expect("create the unwinder's search directory");
    let script = format!("INPUT({})\n", unwinder.display());
    std::fs::write(dir.join("libgcc_s.so"), script).expect("write the linker script");
    println!("cargo:rustc-link-search=native={}", dir.display());
}

/// The linker script placing the functions of `list` (one pattern a line,
/// `#` comments: the start of a symbol, `*` matching anything) in order
/// before the rest of `.text`. Each is one input description of its own,
/// so that the order of the list is the order in the library.
fn start_path_script(list: &str) -> String {
    let mut script = String::from("SECTIONS {\n  .text.atoll_start : {\n");
    // The C runtime's `frame_dummy`, run from `.init_array` at load.
    script.push_str("    *crtbeginS.o(.text)\n");
    for pattern in list.lines().map(str::trim) {
        if pattern.is_empty() || pattern.starts_with('#') {
            continue;
        }
        let pattern = pattern.trim_end_matches('*');
        // `#[cold]` functions (`OnceLock::initialize`, a vector's growth)
        // come in `.text.unlikely.<symbol>`.
        script.push_str(&format!(
            "    *(.text.{pattern}* .text.unlikely.{pattern}*)\n"
        ));
    }
    script.push_str("  }\n} INSERT BEFORE .text;\n");
    script
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

/// Does this machine's glibc read `DT_RELR` (2.36 and later)?
fn glibc_has_relr() -> bool {
    let Ok(out) = Command::new("getconf").arg("GNU_LIBC_VERSION").output() else {
        return false;
    };
    // "glibc 2.36"
    let text = String::from_utf8_lossy(&out.stdout);
    let mut v = text
        .split_whitespace()
        .nth(1)
        .unwrap_or("")
        .split('.')
        .map(|n| n.parse::<u32>().unwrap_or(0));
    let (major, minor) = (v.next().unwrap_or(0), v.next().unwrap_or(0));
    (major, minor) >= (2, 36)
}
