//! Linux's `-ERESTARTSYS` model as a handler sees it (issue "POSIX as it
//! is", item 7): the signal frame of a handler whose signal arrived while
//! atoll code ran a trapped call holds the program's registers at the end
//! of that call, and calls that wait for other processes without bound
//! are interrupted, restarted or given up as on Linux. The C probes run
//! on the host (a tmpfs directory) and under `atoll run`, on one server
//! and on 3 in incoherent mode, and must print the same.

use atoll_tests::OutputBounded as _;
use std::process::Command;

use atoll_tests::{compile_probe, run_in_atoll};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).to_string()
}

/// Run `bin ARGS` on the host and under both instances; the outputs must
/// be equal. Returns the host's output.
fn same_on_host_and_atoll(bin: &std::path::Path, host_arg: &str, atoll_arg: &str) -> String {
    let host = Command::new(bin)
        .arg(host_arg)
        .output_bounded()
        .expect("probe");
    let host_out = text(&host.stdout);
    assert!(host.status.success(), "{host_out}{}", text(&host.stderr));
    let script = format!("timeout 120 {} {atoll_arg}", bin.display());
    for opts in [&[][..], &["--servers", "3", "--incoherent"][..]] {
        let o = run_in_atoll(opts, &script);
        assert_eq!(
            text(&o.stdout),
            host_out,
            "{opts:?} stderr: {}",
            text(&o.stderr)
        );
        assert!(o.status.success(), "{opts:?}");
    }
    host_out
}

/// A signal deferred while atoll served a trapped `read` of an atoll
/// pipe is delivered in the program's frame: RIP after the `syscall` (at
/// it, with RAX = the call's number, when the call restarts), the
/// program's RSP, RAX = `-EINTR`, callee-saved registers and mask, the
/// sender's siginfo, the alternate stack; a handler that sets RAX or RIP
/// changes what the program resumes with. Through libc's `read` (atoll's
/// wrapper) the handler finds the call's return point and the program's
/// callee-saved registers (Linux shows the frame inside libc's `read`,
/// atoll the one at its return), and a RAX it sets is what `read`
/// returns.
#[test]
fn a_trapped_call_interrupted_in_atoll_code_shows_its_handler_the_programs_frame() {
    let dir = tempfile::tempdir().unwrap();
    let bin = compile_probe(dir.path(), "frame", include_str!("signal_frames/frame.c"));
    let out = same_on_host_and_atoll(&bin, "", "");
    let program = "rsp the program's, rax -4, callee-saved the program's, mask the program's, \
                   siginfo code SI_QUEUE pid the sender's uid ours value 1234";
    assert!(out.contains(&format!(
        "read without SA_RESTART: returned -4; handler ran 1, saw rip after the syscall, {program}, on the alternate stack no"
    )), "{out}");
    assert!(out.contains("read with SA_RESTART: returned 2; handler ran 1, saw rip at the syscall (restart), rsp the program's, rax 0,"), "{out}");
    assert!(out.contains("handler sets RAX: returned 4242;"), "{out}");
    assert!(out.contains("handler sets RIP: returned 55;"), "{out}");
    assert!(out.contains("on the alternate stack yes\n"), "{out}");
    let libc_frame = "found the call's return point yes, callee-saved the program's, mask the \
                      program's, siginfo code SI_QUEUE pid the sender's value 1234";
    assert!(
        out.contains(&format!(
            "libc read without SA_RESTART: returned -1 EINTR; handler ran 1, {libc_frame}\n"
        )),
        "{out}"
    );
    assert!(
        out.contains("libc read with SA_RESTART: returned 2; handler ran 1\n"),
        "{out}"
    );
    assert!(
        out.contains("libc read, handler sets RAX: returned 4242;"),
        "{out}"
    );
}

/// Record locks (`F_SETLKW`, `F_OFD_SETLKW`), `flock` and a FIFO open,
/// each blocked behind another process and interrupted by a handler:
/// `EINTR` without `SA_RESTART`, restarted (and then granted) with it,
/// and a wait given up leaves no lock granted behind it.
#[test]
fn unbounded_waits_are_interrupted_and_restarted_as_on_the_host() {
    let dir = tempfile::tempdir().unwrap();
    let bin = compile_probe(dir.path(), "waits", include_str!("signal_frames/waits.c"));
    let work = tempfile::tempdir_in("/dev/shm").unwrap();
    let out = same_on_host_and_atoll(&bin, work.path().to_str().unwrap(), "\"$ROOT\"");
    for call in ["F_SETLKW", "F_OFD_SETLKW", "flock"] {
        assert!(
            out.contains(&format!(
                "{call} without SA_RESTART: -1 EINTR, handler ran 1\n"
            )),
            "{out}"
        );
        assert!(
            out.contains(&format!(
                "{call} with SA_RESTART: 0 (restarted, lock taken), handler ran 1\n"
            )),
            "{out}"
        );
    }
    assert!(!out.contains("held"), "{out}");
    assert!(
        out.contains("FIFO open with SA_RESTART: opened (restarted), read 2 'hi', handler ran 1\n"),
        "{out}"
    );
}

/// A system call costs the program no stack on Linux, so programs run
/// handlers on small alternate stacks (CPython's `faulthandler`: 16 KiB)
/// and threads on `PTHREAD_STACK_MIN`. atoll's work for their file calls
/// runs on a stack of its own: on the program's, it overflowed the
/// handler's 16 KiB into the memory below (CPython crashed at exit in
/// its garbage collector after a signal with a wakeup fd). And an
/// alternate stack a thread sets with a trapped `sigaltstack` stays set.
#[test]
fn file_calls_from_small_stacks_fit_as_on_the_host() {
    let dir = tempfile::tempdir().unwrap();
    let bin = compile_probe(
        dir.path(),
        "smallstack",
        include_str!("signal_frames/smallstack.c"),
    );
    let work = tempfile::tempdir_in("/dev/shm").unwrap();
    let out = same_on_host_and_atoll(&bin, work.path().to_str().unwrap(), "\"$ROOT\"");
    assert!(
        out.contains("handler on a 16 KiB alternate stack: 4 of 4 calls\n"),
        "{out}"
    );
    assert!(out.contains("-byte stack: 4 of 4 calls\n"), "{out}");
    // A thread's alternate stack set through a trapped call stays set
    // (the SIGSYS handler's sigreturn used to restore the old setting).
    assert!(
        out.contains("inline syscall in a thread: kept\nits handler ran on it: yes\n"),
        "{out}"
    );
}
