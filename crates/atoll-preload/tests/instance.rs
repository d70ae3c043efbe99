//! Real programs on real atoll paths: an instance is booted in-process
//! (`atoll_server::Instance`), and programs run with libatoll preloaded and
//! `ATOLL_SOCKET` pointing at it, so every call goes through the wrappers
//! or the SUD net into `atoll-client`.

mod common;

use std::process::Output;

use atoll_proto::boot::{PollMode, Without};
use atoll_server::{Instance, InstanceConfig};
use common::{command, lib_path, run, stderr, stdout, Preload};

struct Booted {
    instance: Option<Instance>,
    _root: tempfile::TempDir,
    mount: String,
}

impl Drop for Booted {
    fn drop(&mut self) {
        if let Some(i) = self.instance.take() {
            i.shutdown();
        }
    }
}

fn boot() -> Booted {
    let root = tempfile::tempdir().unwrap();
    // A mount path that certainly does not exist on the host.
    let mount = format!("/atoll-preload-test-{}", std::process::id());
    let config = InstanceConfig {
        servers: 2,
        hosts: 0,
        auto_scale: false,
        room: 0,
        memory: 64 << 20,
        mount: mount.clone(),
        poll: PollMode::Block,
        split: false,
        server_cores: vec![],
        island: atoll_proto::boot::Island::Coherent,
        without: Without::default(),
        distribute: vec![],
        adaptive_dirs: false,
        fs_policy: Default::default(),
        syscall_sites: Default::default(),
        inodes: None,
        runtime_root: root.path().to_path_buf(),
        server_exe: None,
    };
    let instance = Instance::boot(config).expect("boot instance");
    Booted {
        instance: Some(instance),
        _root: root,
        mount,
    }
}

/// Run `bash -c script` as a client of `b` (the mount is `$M`).
fn client_bash(b: &Booted, script: &str, extra: &[(&str, &str)]) -> Output {
    let mut c = command("bash", Preload::None);
    let inst = b.instance.as_ref().unwrap();
    c.env("LD_PRELOAD", lib_path())
        .env("ATOLL_PRELOAD", lib_path())
        .env("ATOLL_SOCKET", inst.socket_path())
        .env("M", &b.mount)
        .arg("-c")
        .arg(script);
    for (k, v) in extra {
        c.env(k, v);
    }
    run(c)
}

#[test]
fn shell_creates_reads_and_lists_files_under_the_mount() {
    let b = boot();
    let o = client_bash(
        &b,
        r#"set -e
mkdir $M/d
echo hello > $M/d/f
printf 'b\na\n' > $M/d/g
cat $M/d/f
sort $M/d/g
ls $M/d
stat -c '%s %F' $M/d/f
test ! -e /$M/d/nope && echo absent
"#,
        &[],
    );
    assert_eq!(
        stdout(&o),
        "hello\na\nb\nf\ng\n6 regular file\nabsent\n",
        "stderr: {}",
        stderr(&o)
    );
    assert!(o.status.success());
}

#[test]
fn files_are_invisible_to_the_host_and_shared_between_processes() {
    let b = boot();
    let o = client_bash(&b, "echo shared > $M/x", &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!std::path::Path::new(&b.mount).exists());
    let o = client_bash(&b, "cat $M/x; (cd $M && pwd && cat x)", &[]);
    assert_eq!(
        stdout(&o),
        format!("shared\n{}\nshared\n", b.mount),
        "{}",
        stderr(&o)
    );
}

#[test]
fn raw_syscalls_reach_atoll_through_the_sud_net() {
    let b = boot();
    let tmp = tempfile::tempdir().unwrap();
    let exe = common::compile_probe("sud_probe", tmp.path());
    let o = client_bash(
        &b,
        &format!(
            "mkdir $M/data && echo hello > $M/data/a.txt && : > $M/data/b && {} $M/data",
            exe.display()
        ),
        &[],
    );
    let out = stdout(&o);
    assert!(o.status.success(), "{out}\n{}", stderr(&o));
    for expect in [
        "entries 4",
        "text hello",
        "readdir 4",
        "fgets hello",
        "fork child exit 3",
        "raw fork child exit 5",
        "clone child exit 11",
        "threads 4",
        "libc threads 4",
        "spawn status 0",
        "popen from-popen",
        "blocked, entries 4",
        "done",
    ] {
        assert!(
            out.contains(expect),
            "lacks {expect:?}:\n{out}\n{}",
            stderr(&o)
        );
    }
}

/// Benchmark, not a check: `cargo test -p atoll-preload --release --test
/// instance -- --ignored --nocapture` prints start-up cost per mode and the
/// per-call cost of the trap path and of the wrappers in each mode.
#[test]
#[ignore]
fn bench_start_up_and_call_costs() {
    let b = boot();
    let tmp = tempfile::tempdir().unwrap();
    let start = common::compile_probe("start_bench", tmp.path());
    let calls = common::compile_probe("trap_bench", tmp.path());
    let socket = b.instance.as_ref().unwrap().socket_path().to_path_buf();
    // The harness itself runs natively; its fourth mode starts clients.
    let mut c = command(start.to_str().unwrap(), Preload::None);
    c.arg(lib_path()).arg("200").env("ATOLL_SOCKET", &socket);
    let o = run(c);
    print!("{}{}", stdout(&o), stderr(&o));
    for how in [Preload::None, Preload::Off, Preload::SelfTest] {
        let mut c = command(calls.to_str().unwrap(), how);
        c.arg("100000");
        println!("{how:?}: {}", stdout(&run(c)).trim());
    }
    let mut c = command(calls.to_str().unwrap(), Preload::None);
    c.arg("100000")
        .env("LD_PRELOAD", lib_path())
        .env("ATOLL_PRELOAD", lib_path())
        .env("ATOLL_SOCKET", &socket);
    println!("Client: {}", stdout(&run(c)).trim());
}

/// A panic inside the client becomes `EIO` for that one call, and the
/// program goes on: the unwinder linked into libatoll (`build.rs`) must
/// carry the panic back to the `catch_unwind` around the dispatch.
#[test]
fn a_panic_inside_the_client_fails_that_call_with_eio_and_the_program_goes_on() {
    let b = boot();
    let o = client_bash(
        &b,
        r#"mkdir $M/d 2>/dev/null; echo "mkdir $?"
python3 -c 'import os, sys
try:
    os.mkdir(sys.argv[1])
except OSError as e:
    print("errno", e.errno)' $M/d
echo kept > $M/f && cat $M/f"#,
        // mkdir(2) on x86-64.
        &[("ATOLL_CLIENT_PANIC_ON", "83")],
    );
    let out = stdout(&o);
    assert_eq!(out, "mkdir 1\nerrno 5\nkept\n", "stderr: {}", stderr(&o));
    assert!(
        stderr(&o).contains("injected panic in system call 83"),
        "{}",
        stderr(&o)
    );
}

/// A program that ends with `exit` holding nothing of atoll lets its last
/// system calls through to Linux (`leave_quietly`): its `exit_group` does
/// not trap, while one holding an atoll descriptor keeps trapping, so the
/// flush of its stdio buffer into the mount is still atoll's.
#[test]
fn a_program_that_holds_nothing_of_atoll_exits_without_a_trap() {
    let b = boot();
    let dir = tempfile::tempdir().unwrap();
    let stats = dir.path().join("traps");
    let traps_of = |script: &str| -> (String, String) {
        let _ = std::fs::remove_file(&stats);
        let o = client_bash(&b, script, &[("ATOLL_TRAP_STATS", stats.to_str().unwrap())]);
        assert!(o.status.success(), "{}", stderr(&o));
        (
            stdout(&o),
            std::fs::read_to_string(&stats).unwrap_or_default(),
        )
    };
    let exit_group = format!(" {}:", libc::SYS_exit_group);
    // bash's line goes out at its exec; `true`'s would come at its exit.
    let (_, lines) = traps_of("cd $M && exec /bin/true");
    assert!(!lines.contains(&exit_group), "{lines}");
    // Unflushed stdio bytes for an atoll file, written at exit.
    let (out, lines) = traps_of(
        r#"cd $M && python3 -c 'import sys; sys.stdout.write("kept")' > out && exec cat out"#,
    );
    assert_eq!(out, "kept");
    assert!(
        lines.contains(&exit_group),
        "exits holding atoll descriptors: {lines}"
    );
}
