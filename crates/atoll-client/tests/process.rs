//! The working directory, fork and exec through the client. These tests
//! change process-wide state (cwd, children), so they run one at a time.

mod common;
use common::*;

use std::ffi::{CStr, CString};
use std::sync::Mutex;

static SERIAL: Mutex<()> = Mutex::new(());

fn getcwd() -> atoll_client::Dispatch {
    let mut buf = [0u8; 4096];
    let d = host(
        libc::SYS_getcwd,
        &[buf.as_mut_ptr() as u64, buf.len() as u64],
    );
    match d {
        atoll_client::Dispatch::Done(n) => {
            assert!(n > 0, "getcwd: {n}");
            let s = CStr::from_bytes_until_nul(&buf).unwrap();
            assert_eq!(s.to_bytes().len() + 1, n as usize);
            CWD.with(|c| *c.borrow_mut() = s.to_string_lossy().into_owned());
            d
        }
        other => other,
    }
}

thread_local! {
    static CWD: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

fn last_cwd() -> String {
    CWD.with(|c| c.borrow().clone())
}

#[test]
fn chdir_getcwd_relative_paths_and_leaving_through_dotdot() {
    let _g = SERIAL.lock().unwrap();
    let e = env();
    let host_cwd = std::env::current_dir().unwrap();
    assert_eq!(mkdir(&p("cw"), 0o755), 0);
    assert_eq!(mkdir(&p("cw/a"), 0o755), 0);
    assert_eq!(sc(libc::SYS_chdir, &[ptr(&p("cw/a"))]), 0);
    assert!(matches!(getcwd(), atoll_client::Dispatch::Done(_)));
    assert_eq!(last_cwd(), format!("{}/cw/a", e.mount));
    // Relative paths now resolve inside atoll.
    let rel = CString::new("f").unwrap();
    put(&rel, b"relative");
    assert_eq!(get(&p("cw/a/f")), b"relative");
    assert_eq!(get(&CString::new("../a/./f").unwrap()), b"relative");
    // chdir("..") and an *at call with an atoll directory fd.
    assert_eq!(sc(libc::SYS_chdir, &[ptr(&CString::new("..").unwrap())]), 0);
    getcwd();
    assert_eq!(last_cwd(), format!("{}/cw", e.mount));
    let dfd = open(
        &CString::new("a").unwrap(),
        libc::O_RDONLY | libc::O_DIRECTORY,
        0,
    );
    assert!(dfd >= 0);
    let g = sc(
        libc::SYS_openat,
        &[
            dfd as u64,
            ptr(&CString::new("g").unwrap()),
            (libc::O_CREAT | libc::O_WRONLY) as u64,
            0o600,
        ],
    );
    assert!(g >= 0);
    close(g);
    assert!(stat(&p("cw/a/g")).is_ok());
    // fchdir to the directory fd.
    assert_eq!(sc(libc::SYS_fchdir, &[dfd as u64]), 0);
    getcwd();
    assert_eq!(last_cwd(), format!("{}/cw/a", e.mount));
    close(dfd);
    // chdir to a file: ENOTDIR.
    assert_eq!(sc(libc::SYS_chdir, &[ptr(&rel)]), ENOTDIR);
    // `..` past the mount root leaves atoll: the kernel's cwd takes over.
    let up = CString::new("../../..").unwrap();
    assert_eq!(sc(libc::SYS_chdir, &[ptr(&up)]), 0);
    assert_eq!(getcwd(), atoll_client::Dispatch::Host);
    // Back where the test harness was.
    let back = CString::new(host_cwd.to_str().unwrap()).unwrap();
    assert_eq!(
        host(libc::SYS_chdir, &[ptr(&back)]),
        atoll_client::Dispatch::Host
    );
    // SAFETY: chdir to the harness's original directory.
    assert_eq!(unsafe { libc::chdir(back.as_ptr()) }, 0);
}

#[test]
fn forked_child_shares_descriptions_and_has_its_own_session() {
    let _g = SERIAL.lock().unwrap();
    let _ = env();
    assert_eq!(mkdir(&p("fork"), 0o755), 0);
    let f = p("fork/shared");
    let fd = open(&f, libc::O_CREAT | libc::O_RDWR | libc::O_TRUNC, 0o644);
    assert_eq!(write(fd, b"parent;"), 7);
    let parent_session = atoll_client::session_id().unwrap();
    let prep = atoll_client::fork_prepare()
        .expect("fork_prepare")
        .expect("active");
    // SAFETY: the child only uses the client (raw syscalls) and _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        atoll_client::fork_child(prep);
        let ok =
            atoll_client::session_id() != Some(parent_session) && write(fd, b"child;") == 6 && {
                put(&p("fork/child-made"), b"hello");
                true
            };
        // SAFETY: leave the child without running the harness's exit code.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    atoll_client::fork_parent(prep, pid as i64);
    let mut status = 0;
    // SAFETY: waiting for our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "child status {status:#x}"
    );
    // The offset is shared through the description (server-side offset).
    assert_eq!(write(fd, b"again"), 5);
    close(fd);
    assert_eq!(get(&f), b"parent;child;again");
    assert_eq!(get(&p("fork/child-made")), b"hello");
}

fn argv(v: &[&str]) -> (Vec<CString>, Vec<*const libc::c_char>) {
    let s: Vec<CString> = v.iter().map(|a| CString::new(*a).unwrap()).collect();
    let mut ptrs: Vec<*const libc::c_char> = s.iter().map(|a| a.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    (s, ptrs)
}

fn plan_strings(mut p: *const *const libc::c_char) -> Vec<String> {
    let mut out = Vec::new();
    // SAFETY: the plan's NULL-terminated array of C strings.
    unsafe {
        while !(*p).is_null() {
            out.push(CStr::from_ptr(*p).to_string_lossy().into_owned());
            p = p.add(1);
        }
    }
    out
}

#[test]
fn exec_of_an_atoll_elf_runs_from_a_memfd() {
    let _g = SERIAL.lock().unwrap();
    let _ = env();
    // Another test of this instance may have made `bin` first.
    let made = mkdir(&p("bin"), 0o755);
    assert!(
        made == 0 || made == -(libc::EEXIST as i64),
        "mkdir bin: {made}"
    );
    let image = std::fs::read("/bin/true").expect("host /bin/true");
    let t = p("bin/true");
    put(&t, &image);
    assert_eq!(sc(libc::SYS_chmod, &[ptr(&t), 0o755]), 0);
    let (_a, av) = argv(&["true"]);
    let (_e, ev) = argv(&["PATH=/bin", "ATOLL_STATE=stale"]);
    let plan = atoll_client::prepare_exec(&t, av.as_ptr(), ev.as_ptr()).expect("plan");
    assert!(plan.exec_fd().is_some(), "ELF copied to a memfd");
    assert!(plan.path().to_str().unwrap().starts_with("/proc/self/fd/"));
    let env = plan_strings(plan.envp());
    assert!(env.iter().any(|e| e.starts_with("ATOLL_SOCKET=")));
    assert!(env.iter().any(|e| e.starts_with("ATOLL_SESSION_FD=")));
    assert!(env.iter().any(|e| e.starts_with("ATOLL_STATE=v1")));
    assert!(!env.iter().any(|e| e == "ATOLL_STATE=stale"));
    assert_eq!(plan_strings(plan.argv()), vec!["true"]);
    // SAFETY: the child only execs (raw syscall) or _exits.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let r = plan.exec();
        // SAFETY: exec failed: leave at once.
        unsafe { libc::_exit(100 + (-r) as i32 % 100) };
    }
    drop(plan);
    let mut status = 0;
    // SAFETY: waiting for our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(libc::WIFEXITED(status), "status {status:#x}");
    assert_eq!(
        libc::WEXITSTATUS(status),
        0,
        "the atoll copy of /bin/true ran"
    );
    // Not executable: EACCES.
    let nx = p("bin/noexec");
    put(&nx, &image);
    assert_eq!(sc(libc::SYS_chmod, &[ptr(&nx), 0o644]), 0);
    assert_eq!(
        atoll_client::prepare_exec(&nx, av.as_ptr(), ev.as_ptr()).err(),
        Some(libc::EACCES)
    );
}

#[test]
fn exec_of_an_atoll_script_runs_its_interpreter() {
    let _g = SERIAL.lock().unwrap();
    let _ = env();
    let _ = mkdir(&p("bin"), 0o755);
    let s = p("bin/script.sh");
    put(&s, b"#!/bin/sh -e\nexit 7\n");
    assert_eq!(sc(libc::SYS_chmod, &[ptr(&s), 0o755]), 0);
    let (_a, av) = argv(&["script.sh", "arg1"]);
    let (_e, ev) = argv(&["PATH=/bin"]);
    let plan = atoll_client::prepare_exec(&s, av.as_ptr(), ev.as_ptr()).expect("plan");
    assert_eq!(plan.path().to_bytes(), b"/bin/sh");
    assert!(plan.exec_fd().is_none(), "host interpreter");
    assert_eq!(
        plan_strings(plan.argv()),
        vec![
            "/bin/sh".to_string(),
            "-e".into(),
            s.to_str().unwrap().into(),
            "arg1".into()
        ]
    );
    // A missing interpreter fails like Linux, with ENOENT: a host path
    // that does not resolve is answered before the exec is prepared.
    let bad = p("bin/bad.sh");
    put(&bad, b"#!/nonexistent/interp\n");
    assert_eq!(sc(libc::SYS_chmod, &[ptr(&bad), 0o755]), 0);
    let r = atoll_client::prepare_exec(&bad, av.as_ptr(), ev.as_ptr()).map(|_| ());
    assert_eq!(r, Err(libc::ENOENT));
}
