//! `execvp`'s and `execlp`'s search of `PATH` (preload `wrappers/search.rs`): directories
//! in the mount and on the host, one without the program, one whose copy
//! may not be run (`EACCES`, passed over), a script without `#!` (run by
//! `/bin/sh`), a name found nowhere. The probe's output under atoll is
//! Linux's over a tmpfs directory, and the attempts that failed before
//! the program was found trapped no `execve`.

use std::process::Command;

use atoll_tests::OutputBounded as _;
use atoll_tests::{atoll, compile_probe, output_within, trap_count};

const LIMIT: std::time::Duration = std::time::Duration::from_secs(120);

/// `$0` the probe, `$1` a host scratch directory, `$2` where the PATH
/// directories are made (the mount, or a tmpfs directory).
const SCRIPT: &str = r#"set -e
R=$2
mkdir -p "$R/p1" "$R/p2" "$R/p3" "$R/p4"
printf '#!/bin/sh\necho hi from p3 "$@"\n' > "$R/p3/hello"
chmod +x "$R/p3/hello"
printf 'echo not runnable\n' > "$R/p2/hello"
chmod -x "$R/p2/hello"
printf 'echo script without its interpreter line "$@"\n' > "$R/p4/plain"
chmod +x "$R/p4/plain"
P="$R/p1:/nonexistent/dir:$R/p2:$R/p3:$R/p4:$PATH"
PATH="$P" ATOLL_TRAP_STATS="$1/search" "$0" execvp hello a b
PATH="$P" "$0" execvp plain x
PATH="$P" "$0" execvp no-such-program-anywhere
PATH="$R/p1:$R/p2" "$0" execvp hello
PATH="$P" ATOLL_TRAP_STATS="$1/searchl" "$0" execlp hello a b c d e f g h i
PATH="$P" "$0" execlp plain x
PATH="$P" "$0" execlp no-such-program-anywhere
"#;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).to_string()
}

#[test]
fn execvp_searches_path_through_atoll_without_trapping_each_miss() {
    let dir = tempfile::tempdir().unwrap();
    let bin = compile_probe(dir.path(), "sites", include_str!("rewrite/sites.c"));

    let tmp = tempfile::tempdir_in("/dev/shm").unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let linux = Command::new("sh")
        .args(["-c", SCRIPT])
        .arg(&bin)
        .arg(scratch.path())
        .arg(tmp.path())
        .output_bounded()
        .unwrap();
    assert!(linux.status.success(), "{}", text(&linux.stderr));
    let linux = text(&linux.stdout);
    assert_eq!(
        linux,
        "hi from p3 a b\nscript without its interpreter line x\n\
         execvp no-such-program-anywhere: No such file or directory\n\
         execvp hello: Permission denied\n\
         hi from p3 a b c d e f g h i\nscript without its interpreter line x\n\
         execlp no-such-program-anywhere: No such file or directory\n"
    );

    // With the table of remembered sites glibc's own `execve` site would
    // be rewritten too; without it, each of glibc's attempts would trap.
    for opts in [&[][..], &["--without", "remembered-sites"][..]] {
        let scratch = tempfile::tempdir().unwrap();
        let mut cmd = atoll();
        cmd.args(["run", "--servers", "2"])
            .args(opts)
            .args(["--", "sh", "-c", SCRIPT])
            .arg(&bin)
            .arg(scratch.path())
            .arg("/atoll");
        let out = output_within(cmd, LIMIT);
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert_eq!(text(&out.stdout), linux);
        // Four directories missed before `hello` was found in the mount:
        // none of those attempts, nor the exec itself, trapped.
        for file in ["search", "searchl"] {
            let search = scratch.path().join(file);
            assert_eq!(
                trap_count(&search, &libc::SYS_execve.to_string()),
                0,
                "{opts:?} {file}: {:?}",
                std::fs::read_to_string(&search)
            );
        }
    }
}
