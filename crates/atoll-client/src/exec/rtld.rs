//! The dynamic loader run as a program: `ldd PROG` (which runs
//! `ld-linux-x86-64.so.2 --verify PROG`, then the loader with
//! `LD_TRACE_LOADED_OBJECTS=1`), `ld.so PROG ARGS…`, `ld.so --list PROG`.
//!
//! The loader is an image with no `PT_INTERP` of its own, like a static
//! program, but it loads `LD_PRELOAD`, so it runs as any dynamic program
//! does (never behind the relay of `foreign`, whose own loader would
//! answer `LD_TRACE_LOADED_OBJECTS` for itself). It opens the program it
//! is given before the client starts, so a program stored in the mount
//! is handed to it as a copy (`/proc/self/fd/N`, with `--argv0` keeping
//! the name the program sees), and the libraries that program looks for
//! in the mount as for any exec (`libs`).

/// Options of the loader that take a value (glibc 2.36 `rtld.c`).
const WITH_VALUE: &[&[u8]] = &[
    b"--library-path",
    b"--inhibit-rpath",
    b"--audit",
    b"--preload",
    b"--argv0",
    b"--glibc-hwcaps-prefer",
    b"--glibc-hwcaps-mask",
];

/// Does `path` name a dynamic loader (`ld-linux-x86-64.so.2`,
/// `ld-linux.so.2`, `ld.so`, `ld64.so.1`)? Only such images are looked
/// at further (`is_loader_image`), so other execs cost nothing here.
pub fn named_like_loader(path: &[u8]) -> bool {
    let base = path.rsplit(|&b| b == b'/').next().unwrap_or(path);
    base.starts_with(b"ld-") && base.windows(3).any(|w| w == b".so")
        || base.starts_with(b"ld.so")
        || base.starts_with(b"ld64.so")
}

/// What the loader does with its program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Runs,
    /// `--list`: prints the libraries it would load, as `ldd` does.
    Lists,
    /// `--verify`: only says whether it could.
    Verifies,
}

/// Where the program the loader is to run stands in its `argv`, and
/// what the loader does with it.
pub fn program_arg(argv: &[Vec<u8>]) -> Option<(usize, Mode)> {
    let mut mode = Mode::Runs;
    let mut i = 1;
    while i < argv.len() {
        let a = &argv[i][..];
        if a == b"--" {
            i += 1;
            break;
        }
        if !a.starts_with(b"--") {
            break;
        }
        if WITH_VALUE.contains(&a) {
            i += 2;
            continue;
        }
        if a == b"--verify" {
            mode = Mode::Verifies;
        } else if a == b"--list" && mode == Mode::Runs {
            mode = Mode::Lists;
        }
        i += 1;
    }
    (i < argv.len()).then_some((i, mode))
}

/// `argv` with the program at `at` replaced by `copy`, and (when the
/// loader runs it and no `--argv0` was given) the program's own name kept
/// as its `argv[0]`.
pub fn substitute(argv: &[Vec<u8>], at: usize, runs: bool, copy: &[u8]) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = argv[..at].to_vec();
    let named = argv[..at].iter().any(|a| a == b"--argv0");
    if runs && !named {
        out.push(b"--argv0".to_vec());
        out.push(argv[at].clone());
    }
    out.push(copy.to_vec());
    out.extend_from_slice(&argv[at + 1..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &[&str]) -> Vec<Vec<u8>> {
        s.iter().map(|a| a.as_bytes().to_vec()).collect()
    }

    #[test]
    fn loaders_are_known_by_name() {
        for p in [
            "/lib64/ld-linux-x86-64.so.2",
            "ld-linux.so.2",
            "/usr/lib/ld.so",
            "ld64.so.1",
        ] {
            assert!(named_like_loader(p.as_bytes()), "{p}");
        }
        for p in [
            "/usr/bin/ld",
            "/usr/bin/ld.gold",
            "/bin/ldd",
            "ld-script",
            "/a/b.so",
        ] {
            assert!(!named_like_loader(p.as_bytes()), "{p}");
        }
    }

    #[test]
    fn the_program_follows_the_loader_s_options() {
        assert_eq!(
            program_arg(&args(&["ld.so", "./p", "x"])),
            Some((1, Mode::Runs))
        );
        assert_eq!(
            program_arg(&args(&["ld.so", "--verify", "./p"])),
            Some((2, Mode::Verifies))
        );
        assert_eq!(
            program_arg(&args(&[
                "ld.so",
                "--library-path",
                "/l",
                "--inhibit-cache",
                "p"
            ])),
            Some((4, Mode::Runs))
        );
        assert_eq!(
            program_arg(&args(&["ld.so", "--", "--odd"])),
            Some((2, Mode::Runs))
        );
        assert_eq!(program_arg(&args(&["ld.so", "--help"])), None);
    }

    #[test]
    fn a_listing_is_told_from_a_verification_and_a_run() {
        assert_eq!(
            program_arg(&args(&["ld.so", "--list", "./p"])),
            Some((2, Mode::Lists))
        );
        assert_eq!(
            program_arg(&args(&["ld.so", "--list", "--verify", "./p"])),
            Some((3, Mode::Verifies))
        );
    }

    #[test]
    fn a_copy_takes_the_program_s_place_and_keeps_its_name() {
        let a = args(&["ld.so", "./p", "x"]);
        assert_eq!(
            substitute(&a, 1, true, b"/proc/self/fd/7"),
            args(&["ld.so", "--argv0", "./p", "/proc/self/fd/7", "x"])
        );
        let a = args(&["ld.so", "--verify", "./p"]);
        assert_eq!(
            substitute(&a, 2, false, b"/proc/self/fd/7"),
            args(&["ld.so", "--verify", "/proc/self/fd/7"])
        );
        let a = args(&["ld.so", "--argv0", "n", "./p"]);
        assert_eq!(
            substitute(&a, 3, true, b"/proc/self/fd/7"),
            args(&["ld.so", "--argv0", "n", "/proc/self/fd/7"])
        );
    }
}
