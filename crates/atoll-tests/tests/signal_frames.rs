//! Linux's `-ERESTARTSYS` model as a handler sees it (issue "POSIX as it
//! is", item 7): the signal frame of a handler whose signal arrived while
//! atoll code ran a trapped call holds the program's registers at the end
//! of that call, and calls that wait for other processes without bound
//! are interrupted, restarted or given up as on Linux; a libc function
//! atoll builds on other calls does all of its work whatever signal lands
//! meanwhile. The C probes run on the host (a tmpfs directory) and under
//! `atoll run`, on one server and on 3 in incoherent mode, and must print
//! the same.

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
/// pipe, or one at a rewritten site, is delivered in the program's frame: RIP after the `syscall` (at
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
    // Under atoll the probe also checks that its `mov $0,%eax; syscall`
    // site was rewritten (its cases would otherwise trap like the first).
    let out = same_on_host_and_atoll(&bin, "", "expect-rewrite");
    let program = "rsp the program's, rax -4, callee-saved the program's, mask the program's, \
                   siginfo code SI_QUEUE pid the sender's uid ours value 1234";
    // The same at a rewritten site, where atoll serves the call without a
    // trap: the way back to the program ends in the site's own `syscall`.
    assert!(out.contains(&format!(
        "site read without SA_RESTART: returned -4; handler ran 1, saw rip after the syscall, {program}, on the alternate stack no"
    )), "{out}");
    assert!(out.contains("site read with SA_RESTART: returned 2; handler ran 1, saw rip at the syscall (restart), rsp the program's, rax 0,"), "{out}");
    assert!(
        out.contains("site read, handler sets RAX: returned 4242;"),
        "{out}"
    );
    assert!(
        out.contains("site read, handler sets RIP: returned 55;"),
        "{out}"
    );
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

/// A program's own alternate signal stack under atoll (Go's runtime sets
/// one per thread with a raw `sigaltstack` and checks what it reads back):
/// reported back unchanged through libc and through raw calls, with the
/// kernel's errors; disabled in a new thread, inherited by a fork child;
/// an `SA_ONSTACK` handler runs on it, sees it in its `ucontext` and as
/// `SS_ONSTACK`, cannot change it there, and makes a trapped raw call and
/// a libc call (whose work runs on atoll's stack, below the signal's
/// frame there).
/// And raw calls on a 1536-byte stack over an inaccessible page, as on
/// Linux: each traps, and its SIGSYS frame (larger than that stack) must
/// not land there; nor the extended state that a rewritten site's entry
/// saves (libc calls on a 640-byte stack).
#[test]
fn a_programs_alternate_stack_is_its_own_and_traps_cost_its_stack_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let bin = compile_probe(
        dir.path(),
        "altstack",
        include_str!("signal_frames/altstack.c"),
    );
    let out = same_on_host_and_atoll(&bin, "", "");
    let expected = "at start: disabled\n\
        raw calls on a 1536-byte stack: 3 of 3\n\
        libc calls on a 640-byte stack: 50 of 50\n\
        set by a raw call (0), libc reports: ours\n\
        a raw call reports: ours\n\
        too small: -12; unknown flags: -22\n\
        SA_ONSTACK handler ran 1: on the program's stack yes, its ucontext shows it yes, \
        sigaltstack inside says SS_ONSTACK, a change inside -1, raw call inside ok, \
        libc call inside ok\n\
        after the handler: ours\n\
        raw calls on a 1536-byte stack with the program's stack set: 3 of 3\n\
        thread: alternate stack disabled; raw calls on a 1536-byte stack: 3 of 3\n\
        fork child: inherited it, 3 of 3 raw calls\n";
    assert_eq!(out, expected);
}

/// Signals raced against each other while a thread runs its handlers on
/// its own alternate stack and makes trapped calls (CPython's
/// `test_stress_delivery_simultaneous` crashed with SIGSEGV so): a timer
/// of a few microseconds against a signal the thread sends itself, a
/// handler with `SA_NODEFER` that raises its signal again inside (nested
/// on the alternate stack), a handler without `SA_ONSTACK`, and another
/// thread signalling whenever the last one was handled; the alternate
/// stack's pages are given back before each round, so a handler's first
/// push faults and the kernel delivers what is pending right there. Each
/// handler must run where Linux runs it and each trapped call succeed;
/// a signal frame written over a live one crashed the probe.
#[test]
fn signals_raced_against_handlers_on_the_programs_alternate_stack_run_as_on_the_host() {
    let dir = tempfile::tempdir().unwrap();
    let bin = compile_probe(dir.path(), "storm", include_str!("signal_frames/storm.c"));
    let out = same_on_host_and_atoll(&bin, "", "");
    assert_eq!(
        out,
        "2000 rounds: SIGUSR1 handled twice each yes, nested once each yes, SIGALRM once each \
         yes, SIGUSR2 and SIGURG handled yes\n\
         handlers with SA_ONSTACK off their alternate stack: 0; trapped calls failed: 0\n"
    );
}

/// The `go` command: on PATH (Debian's golang-go, which CI installs), or
/// the upstream tarball's place.
fn go_command() -> std::path::PathBuf {
    let on_path = std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join("go"))
            .find(|g| g.is_file())
    });
    let upstream = std::path::PathBuf::from("/usr/local/go/bin/go");
    match on_path {
        Some(go) => go,
        None if upstream.is_file() => upstream,
        None => {
            atoll_tests::require("go");
            unreachable!()
        }
    }
}

/// A dynamically linked Go program (issue 11): its goroutines make their
/// system calls with their own `syscall` instructions on stacks of a few
/// KiB, each trapping into atoll; the SIGSYS frames used to overrun those
/// stacks (`unexpected return pc`, `signal arrived on non-Go stack`).
/// Eight goroutines write and read 200 files each in the mount on two
/// servers while the runtime preempts a busy goroutine with SIGURG and
/// the program signals itself; the output must be the host's.
#[test]
fn a_dynamically_linked_go_program_runs_as_on_the_host() {
    let go = go_command();
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(
        src.join("main.go"),
        include_str!("signal_frames/gofiles/main.go"),
    )
    .unwrap();
    std::fs::write(src.join("go.mod"), "module gofiles\n\ngo 1.18\n").unwrap();
    let bin = dir.path().join("gofiles");
    let mut build = Command::new(&go);
    build
        .arg("build")
        .arg("-o")
        .arg(&bin)
        .arg(".")
        .current_dir(&src)
        .env("CGO_ENABLED", "1");
    if std::env::var_os("HOME").is_none() {
        // Go's build cache lives under $HOME unless told otherwise.
        build.env("GOCACHE", dir.path().join("cache"));
    }
    let built = build.output_bounded().expect("run go build");
    assert!(built.status.success(), "{}", text(&built.stderr));
    let elf = std::fs::read(&bin).unwrap();
    assert!(
        elf.windows(10).any(|w| w == b"ld-linux-x".as_slice()),
        "the Go program must be dynamically linked (it imports net)"
    );

    let host_dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let host = Command::new(&bin)
        .arg(host_dir.path())
        .output_bounded()
        .unwrap();
    let host_out = text(&host.stdout);
    assert!(host.status.success(), "{host_out}{}", text(&host.stderr));
    assert!(host_out.contains("\n1600 <nil> "), "{host_out}");
    let script = format!(
        "mkdir \"$ROOT/go\" && timeout 120 {} \"$ROOT/go\"",
        bin.display()
    );
    let o = run_in_atoll(&["--servers", "2"], &script);
    assert_eq!(text(&o.stdout), host_out, "stderr: {}", text(&o.stderr));
    assert!(o.status.success());
}

/// Handlers that open and close files, run by signals landing while two
/// threads open, duplicate and close files (libc calls and trapped raw
/// ones): atoll takes its descriptor table's lock there without a signal
/// mask, relying on the deferral of program signals inside its calls; a
/// handler run while the lock was held would spin for ever (the probe
/// then times out). Every call succeeds, as on the host.
#[test]
fn handlers_that_open_files_interrupting_opens_and_closes_run_as_on_the_host() {
    let dir = tempfile::tempdir().unwrap();
    let bin = compile_probe(
        dir.path(),
        "openstorm",
        include_str!("signal_frames/openstorm.c"),
    );
    let host_dir = dir.path().join("host");
    std::fs::create_dir(&host_dir).unwrap();
    let out = same_on_host_and_atoll(&bin, &host_dir.to_string_lossy(), "\"$ROOT\"");
    assert_eq!(
        out, "calls ok\nhandlers' calls ok\nhandlers ran: yes\n",
        "the host"
    );
}

/// Signals landing on threads as they start: a creator thread makes and
/// joins 1,000 short-lived threads under a 200 µs interval timer, and the
/// handler checks a file of the working directory (in the mount) with a
/// raw system call. glibc's thread start unblocks signals before the
/// routine runs; a handler run there, before atoll had switched Syscall
/// User Dispatch on for the thread, ran as program code whose trapped
/// calls went straight to Linux, whose working directory is not the
/// program's: `ENOENT`. Every check succeeds, as on the host.
#[test]
fn handlers_on_threads_as_they_start_reach_atoll() {
    let dir = tempfile::tempdir().unwrap();
    let bin = compile_probe(
        dir.path(),
        "threadstart",
        include_str!("signal_frames/threadstart.c"),
    );
    let host_dir = dir.path().join("host");
    std::fs::create_dir(&host_dir).unwrap();
    let out = same_on_host_and_atoll(&bin, &host_dir.to_string_lossy(), "\"$ROOT\"");
    assert_eq!(
        out, "threads' calls ok\nhandlers' calls ok\nhandlers ran: yes\n",
        "the host"
    );
}

/// libc functions that atoll builds on its other wrappers (`statvfs` and
/// `fstatvfs` on `statfs`, `remove` on `unlink` and `rmdir`, directory
/// streams on `open`, `getdents64`, `lseek` and `close`), with signals
/// landing all the while: a signal deferred in the inner call was
/// delivered at the *program's* return point, so `statvfs` returned 0
/// with its buffer never filled (stress-ng then hashed its temporary
/// names and failed `rmdir` with `ENOTEMPTY`), `remove` of a directory
/// failed with `EISDIR`, and `opendir` handed out a descriptor as a
/// stream. Every call does all of its work, as on the host.
#[test]
fn signals_during_functions_built_on_other_calls_let_them_finish_as_on_the_host() {
    let dir = tempfile::tempdir().unwrap();
    let bin = compile_probe(dir.path(), "nested", include_str!("signal_frames/nested.c"));
    let host_dir = dir.path().join("host");
    std::fs::create_dir(&host_dir).unwrap();
    let out = same_on_host_and_atoll(&bin, &host_dir.to_string_lossy(), "\"$ROOT\"");
    assert_eq!(
        out,
        "statvfs filled every time: yes\nfstatvfs filled every time: yes\n\
         remove took files and directories: yes\nstreams listed every entry: yes\n\
         handlers ran: yes\n",
        "the host"
    );
}
