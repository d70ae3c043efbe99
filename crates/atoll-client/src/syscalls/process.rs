//! Processes and credentials: `execve`, `execveat`, `umask`, the
//! credential setters, `getppid`, CPU affinity, and calls atoll refuses.
//!
//! Most of these run on Linux; atoll looks so that its own copy of what
//! they change (the umask its creates apply, the credentials its requests
//! carry) stays right.

use std::sync::atomic::Ordering;

use libc::{c_char, SYS_execve, SYS_umask, AT_FDCWD, ENOSYS};

use super::common::{done, fdarg};
use crate::error::{err, Result};
use crate::session::Client;
use crate::{cpus, creds, exec, intr, reaped, sys, Out};

/// `execve`, `execveat`: atoll prepares the image (it may live in the
/// mount, and the session goes across, see `exec`).
pub(super) fn execve(_: &'static Client, nr: i64, a: &[u64; 6]) -> Result<Out> {
    let (d, p, argv, envp, fl) = if nr == SYS_execve {
        (AT_FDCWD as i64, a[0], a[1], a[2], 0)
    } else {
        (fdarg(a[0]), a[1], a[2], a[3], a[4] as i32)
    };
    let path = sys::user_path(p)?;
    let plan = exec::prepare_execat(
        d,
        path,
        argv as *const *const c_char,
        envp as *const *const c_char,
        fl,
    )?;
    done(exec::execute(&plan))
}

pub(super) fn umask(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    // SAFETY: integer argument.
    let old = unsafe { sys::sc(SYS_umask, a[0], 0, 0, 0) };
    c.umask.store(a[0] as u32 & 0o777, Ordering::Relaxed);
    done(old)
}

/// `setrlimit`, `prlimit64`: Linux changes the limit; atoll forgets the
/// file size limit it keeps for writes (`fsize`).
pub(super) fn rlimit(_: &'static Client, nr: i64, a: &[u64; 6]) -> Result<Out> {
    done(crate::fsize::set(nr, a))
}

/// `setuid` and the other setters: Linux changes them, atoll reads them.
pub(super) fn credentials(c: &'static Client, nr: i64, a: &[u64; 6]) -> Result<Out> {
    done(creds::change(c, nr, a))
}

pub(super) fn getppid(_: &'static Client, _: i64, _: &[u64; 6]) -> Result<Out> {
    done(exec::proxy_getppid())
}

/// `getppid`: in a proxied image (`--exec-via spawn`).
pub(super) fn getppid_concerns(_: &Client, _: i64, _: &[u64; 6]) -> bool {
    exec::proxy_of_self().is_some()
}

pub(super) fn sched_getaffinity(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    cpus::getaffinity(c, a)
}

pub(super) fn sched_setaffinity(_: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    cpus::setaffinity(a)
}

/// io_uring submits file operations the kernel runs without a system call
/// atoll could see (on placeholder descriptors, or on host paths in the
/// program's name). Answer as a kernel built without it, so programs fall
/// back to ordinary calls (liburing, Python, Rust runtimes all do on
/// ENOSYS).
pub(super) fn refuse_enosys(_: &'static Client, _: i64, _: &[u64; 6]) -> Result<Out> {
    err(ENOSYS)
}

/// `wait4`: Linux waits; a child it reaps that a signal killed has its
/// pipe ends released at the servers before the call returns
/// (`reaped`), as Linux released its files before it could be reaped;
/// one whose loader failed (127), also what the loader wrote delivered.
pub(super) fn wait4(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    let mut own_status = 0i32;
    let status = if a[1] == 0 {
        &mut own_status as *mut i32 as u64
    } else {
        a[1]
    };
    // SAFETY: the program's pointers, or our own status word; the kernel
    // checks them. A deferred signal ends the wait as Linux's would.
    let r = unsafe {
        intr::restartable_host_syscall6(libc::SYS_wait4, [a[0], status, a[2], a[3], 0, 0])
    };
    if r > 0 {
        // SAFETY: the kernel just wrote the status word (the call failed
        // with `EFAULT` otherwise).
        let st = unsafe { core::ptr::read_volatile(status as *const i32) };
        if reaped::awaits_end(st) {
            reaped::after_killed_child(c, r, reaped::loader_failed(st));
        }
    }
    done(r)
}

/// `waitid`: as [`wait4`], for a child reaped (no `WNOWAIT`) with
/// `CLD_KILLED` or `CLD_DUMPED`, or `CLD_EXITED` with the loader's 127.
pub(super) fn waitid(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    let mut own: libc::siginfo_t = sys::zeroed();
    let info = if a[2] == 0 {
        &mut own as *mut libc::siginfo_t as u64
    } else {
        a[2]
    };
    // SAFETY: as in `wait4`.
    let r = unsafe {
        intr::restartable_host_syscall6(libc::SYS_waitid, [a[0], a[1], info, a[3], a[4], 0])
    };
    if r == 0 && a[3] & libc::WNOWAIT as u64 == 0 {
        // SAFETY: the kernel just filled the record.
        let si = unsafe { core::ptr::read_volatile(info as *const libc::siginfo_t) };
        // SAFETY: a `SIGCHLD` record (waitid fills no other kind).
        let pid = unsafe { si.si_pid() };
        // SAFETY: as `si_pid`.
        let code = unsafe { si.si_status() };
        if pid > 0 && reaped::awaits_end_of(si.si_code, code) {
            reaped::after_killed_child(c, pid as i64, si.si_code == libc::CLD_EXITED);
        }
    }
    done(r)
}
