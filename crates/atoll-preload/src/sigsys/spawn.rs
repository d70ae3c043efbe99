//! `posix_spawn`'s errors through a clone that became a fork.
//!
//! glibc's spawn child (`__spawni_child`) reports a failed file action or
//! `execve` by storing the error in the parent's memory, which it shares
//! under `CLONE_VM|CLONE_VFORK`, and exiting with status 127; the parent's
//! `posix_spawn` then returns that error and reaps the child. atoll makes
//! such a clone a fork (`clone::classify`), so the store lands in the
//! child's own copy: the program saw a successful spawn and a child that
//! exited with 127. GNU make, for one, runs a script without `#!` through
//! the shell only when `posix_spawn` answers `ENOEXEC`.
//!
//! So the child tells the parent over the pipe the vfork wait already
//! holds (`clone::VforkWait`): at its `_exit(127)` before any successful
//! exec, it writes the error of its last failed call (`execvp`'s rule:
//! `EACCES` if a candidate of the `PATH` search was not executable and the
//! others were missing). The parent, which reads that pipe until the
//! child's exec or exit anyway, reaps the child and makes its clone fail
//! with the error, which glibc's `posix_spawn` returns as its own (a clone
//! that failed). A clone made this way by anything but glibc's spawn code
//! and exiting with 127 after a failed call gets the same answer.

use core::sync::atomic::{AtomicBool, AtomicI32, Ordering};

use crate::raw;

/// The status glibc's spawn child exits with when it failed.
const SPAWN_ERROR: u64 = 127;

/// In a spawn child: the pipe's write end. -1 everywhere else.
static REPORT_FD: AtomicI32 = AtomicI32::new(-1);
/// The error of the child's last failed call.
static LAST_ERROR: AtomicI32 = AtomicI32::new(0);
/// Did an `execve` of the child fail with `EACCES`?
static EXEC_EACCES: AtomicBool = AtomicBool::new(false);

/// In the child of a spawn-style clone, before it runs program code.
pub(super) fn arm_in_child(write_fd: i32) {
    LAST_ERROR.store(0, Ordering::Relaxed);
    EXEC_EACCES.store(false, Ordering::Relaxed);
    REPORT_FD.store(write_fd, Ordering::Relaxed);
}

/// After a trapped call `nr` returned `r`. Hot path: one comparison when
/// the call succeeded.
#[inline]
pub(super) fn note(nr: i64, r: i64) {
    if r >= 0 || REPORT_FD.load(Ordering::Relaxed) < 0 {
        return;
    }
    let e = (-r) as i32;
    LAST_ERROR.store(e, Ordering::Relaxed);
    if e == libc::EACCES && matches!(nr, libc::SYS_execve | libc::SYS_execveat) {
        EXEC_EACCES.store(true, Ordering::Relaxed);
    }
}

/// At the child's `exit_group(status)`.
pub(super) fn at_exit(status: u64) {
    let fd = REPORT_FD.load(Ordering::Relaxed);
    if fd < 0 || status & 0xff != SPAWN_ERROR {
        return;
    }
    let e = reported_error(
        LAST_ERROR.load(Ordering::Relaxed),
        EXEC_EACCES.load(Ordering::Relaxed),
    );
    if e != 0 {
        let bytes = e.to_ne_bytes();
        raw::syscall6(
            libc::SYS_write,
            [fd as u64, bytes.as_ptr() as u64, 4, 0, 0, 0],
        );
    }
}

/// The error `execvp` would leave after its search: the last one, except
/// that a candidate that was there but not executable wins over the ones
/// that were missing (glibc `posix/execvpe.c`).
fn reported_error(last: i32, exec_eacces: bool) -> i32 {
    let missing = matches!(
        last,
        libc::ENOENT | libc::ESTALE | libc::ENOTDIR | libc::ENODEV | libc::ETIMEDOUT
    );
    if exec_eacces && missing {
        libc::EACCES
    } else {
        last
    }
}

/// In the parent: read the pipe until the child's exec or exit closes it.
/// `Some(errno)` when a spawn child reported a failure; the child is then
/// reaped here, as glibc's `posix_spawn` would have.
pub(super) fn wait_for_report(read_fd: i32, child: i64) -> Option<i32> {
    let mut buf = [0u8; 4];
    let mut got = 0;
    while got < buf.len() {
        let n = raw::syscall6(
            libc::SYS_read,
            [
                read_fd as u64,
                buf[got..].as_mut_ptr() as u64,
                (buf.len() - got) as u64,
                0,
                0,
                0,
            ],
        );
        match n {
            n if n == -(libc::EINTR as i64) => continue,
            n if n <= 0 => break, // end of file: exec'd or exited
            n => got += n as usize,
        }
    }
    if got < buf.len() {
        return None;
    }
    let e = i32::from_ne_bytes(buf);
    loop {
        let r = raw::syscall6(
            libc::SYS_wait4,
            [child as u64, 0, libc::__WALL as u64, 0, 0, 0],
        );
        if r != -(libc::EINTR as i64) {
            break;
        }
    }
    (e > 0).then_some(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_error_is_reported_unless_a_candidate_was_not_executable() {
        assert_eq!(reported_error(libc::ENOEXEC, false), libc::ENOEXEC);
        assert_eq!(reported_error(libc::ENOENT, false), libc::ENOENT);
        assert_eq!(reported_error(libc::ENOENT, true), libc::EACCES);
        assert_eq!(reported_error(libc::ENOTDIR, true), libc::EACCES);
        // A hard error ends the search with its own code.
        assert_eq!(reported_error(libc::ENOEXEC, true), libc::ENOEXEC);
        assert_eq!(reported_error(0, false), 0);
    }
}
