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

/// `make install` (with the build already done) puts the binary, the
/// library, a manual page per command and completion scripts under
/// PREFIX; `man` renders the pages and bash completes options from them.
#[test]
fn make_install_adds_manual_pages_and_completions() {
    let prefix = tempfile::tempdir().expect("tempdir");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let bin = artifact_dir().join("atoll");
    let mut make = Command::new("make");
    // `-o build`: the binaries exist already; do not run cargo from a test.
    make.current_dir(&root)
        .args(["-s", "-o", "build", "install"])
        .arg(format!("PREFIX={}", prefix.path().display()))
        .arg(format!("BIN={}", bin.display()))
        .arg(format!(
            "PRELOAD_LIB={}",
            artifact_dir().join("libatoll_preload.so").display()
        ))
        .stdin(Stdio::null());
    let out = output_within(make, RUN_LIMIT);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let share = prefix.path().join("share");
    for page in [
        "atoll",
        "atoll-run",
        "atoll-boot",
        "atoll-exec",
        "atoll-status",
        "atoll-bench",
    ] {
        let path = share.join(format!("man/man1/{page}.1"));
        let mut man = Command::new("man");
        man.arg("-l")
            .arg(&path)
            .env("MANWIDTH", "100")
            .env("MANPAGER", "cat");
        let out = output_within(man, RUN_LIMIT);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains("SYNOPSIS"),
            "{page}: {text:.300}"
        );
    }
    let mut run_page = Command::new("man");
    run_page
        .arg("-l")
        .arg(share.join("man/man1/atoll-run.1"))
        .env("MANPAGER", "cat");
    let text = String::from_utf8_lossy(&output_within(run_page, RUN_LIMIT).stdout).to_string();
    for opt in ["--servers", "--memory", "--placement", "--distribute"] {
        assert!(text.contains(opt), "atoll-run(1) lacks {opt}");
    }
    assert!(share.join("zsh/site-functions/_atoll").is_file());
    assert!(share.join("fish/vendor_completions.d/atoll.fish").is_file());
    // Ask the installed bash completion what follows `atoll run --ser`.
    let script = format!(
        "source {}; COMP_WORDS=(atoll run --ser); COMP_CWORD=2; _atoll atoll --ser run; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        share.join("bash-completion/completions/atoll").display()
    );
    let mut bash = Command::new("bash");
    bash.args(["-c", &script]);
    let out = output_within(bash, RUN_LIMIT);
    let words = String::from_utf8_lossy(&out.stdout);
    assert!(
        words.lines().any(|w| w == "--servers"),
        "bash completion of `atoll run --ser`: {words:?} {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
