//! Debuggers started in the instance.
//!
//! atoll reaches the system calls glibc makes internally through Syscall
//! User Dispatch, whose traps are `SIGSYS` signals the program's client
//! handles (ARCHITECTURE, "Interposition"). A debugger stops its inferior
//! at every signal it gets unless told otherwise, so `gdb ./prog` under
//! atoll would stop at the program's first `fstat` with "Program received
//! signal SIGSYS, Bad system call" and at many calls after it, where on
//! Linux the program gets no signal at all.
//!
//! The exec of gdb therefore gets, first on its command line, the command
//! that lets `SIGSYS` pass to the program unannounced:
//!
//! ```text
//! gdb ./prog   →   gdb -iex 'handle SIGSYS nostop noprint pass' ./prog
//! ```
//!
//! `-iex` runs before gdb reads its init files and before it loads the
//! program, so a user's own `handle SIGSYS …` (in `~/.gdbinit`, or a later
//! `-iex`/`-ex`) still wins. The cost: a program that gets a real `SIGSYS`
//! (a seccomp filter's verdict) is not stopped there either; `handle SIGSYS
//! stop print` in the session brings the stop back.

/// The command gdb gets first.
pub const GDB_QUIET_SIGSYS: &[u8] = b"handle SIGSYS nostop noprint pass";

/// Names gdb is installed under.
const GDB_NAMES: [&[u8]; 2] = [b"gdb", b"gdb-multiarch"];

/// If `program` is gdb, put the command that lets `SIGSYS` pass right after
/// `argv[0]` (once: a gdb that execs itself again keeps one copy).
pub fn quiet_sigsys(program: &[u8], argv: &mut Vec<Vec<u8>>) {
    let name = program.rsplit(|&b| b == b'/').next().unwrap_or(program);
    if !GDB_NAMES.contains(&name) || argv.is_empty() {
        return;
    }
    if argv.get(2).is_some_and(|a| a == GDB_QUIET_SIGSYS) {
        return;
    }
    argv.splice(1..1, [b"-iex".to_vec(), GDB_QUIET_SIGSYS.to_vec()]);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<Vec<u8>> {
        list.iter().map(|a| a.as_bytes().to_vec()).collect()
    }

    #[test]
    fn gdb_gets_the_handle_command_first_and_once() {
        let mut argv = args(&["gdb", "-batch", "./prog"]);
        quiet_sigsys(b"/usr/bin/gdb", &mut argv);
        let want = [
            "gdb",
            "-iex",
            "handle SIGSYS nostop noprint pass",
            "-batch",
            "./prog",
        ];
        assert_eq!(argv, args(&want));
        quiet_sigsys(b"/usr/bin/gdb", &mut argv);
        assert_eq!(argv, args(&want));
    }

    #[test]
    fn other_programs_and_empty_command_lines_are_left_alone() {
        for (program, list) in [
            (&b"/usr/bin/gdbserver"[..], &["gdbserver", ":1", "p"][..]),
            (b"/bin/true", &["gdb"]),
            (b"/usr/bin/gdb", &[]),
        ] {
            let mut argv = args(list);
            quiet_sigsys(program, &mut argv);
            assert_eq!(argv, args(list));
        }
    }
}
