//! The process's file size limit (`RLIMIT_FSIZE`), which every write
//! passes to its server (`file/rw.rs`), kept here instead of asked of the
//! kernel on every write (a `prlimit64` per `write` was one of the two
//! system calls a 4 KiB `pwrite` made besides its message: docs/BENCHMARKS.md,
//! "The data path of small I/O").
//!
//! The limit changes only through `setrlimit`/`prlimit64`, and a process's
//! own calls of them reach atoll (the table's rows; glibc's `setrlimit` and
//! `ulimit -f` issue `prlimit64`): each one that may set `RLIMIT_FSIZE`
//! forgets the kept value, and the next write asks again. A fork child
//! inherits both the limit and this copy of it; `execve` loads a fresh
//! library, which asks at its first write.
//!
//! What is not seen: another process lowering this one's limit
//! (`prlimit --pid`), which Linux applies at this process's next write and
//! atoll at its next exec (docs/COMPATIBILITY.md).
//!
//! A `CLONE_VM` child (vfork, `posix_spawn`) shares these statics with
//! its parent but not its limits: once such a child changes its limit,
//! nothing is kept any more in that memory, and every write asks the
//! kernel, as before.

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::error::{Error, Result};
use crate::sys::{self, SpinLock};

/// Nothing kept: ask the kernel.
const UNKNOWN: u64 = 0;
/// No limit (`RLIM64_INFINITY`).
const UNLIMITED: u64 = u64::MAX;

/// The kept limit: [`UNKNOWN`], [`UNLIMITED`], or a limit `L` as `L + 1`.
static KEPT: AtomicU64 = AtomicU64::new(UNKNOWN);
/// Set for good once a `CLONE_VM` child changed its own limit.
static NEVER_KEEP: AtomicBool = AtomicBool::new(false);
/// Orders a change of the limit and its forgetting against a first ask
/// and its keeping, so that no ask made before a change is kept after it.
static LOCK: SpinLock = SpinLock::new();

/// The calling process's `RLIMIT_FSIZE`, `None` when unlimited. Hot path:
/// one atomic load once known.
pub fn limit() -> Option<u64> {
    match KEPT.load(Ordering::Acquire) {
        UNKNOWN => ask_and_keep(),
        UNLIMITED => None,
        v => Some(v - 1),
    }
}

#[cold]
fn ask_and_keep() -> Option<u64> {
    if NEVER_KEEP.load(Ordering::Acquire) || sys::in_parent_memory() {
        return ask();
    }
    let _g = LOCK.lock();
    let l = ask();
    KEPT.store(encode(l), Ordering::Release);
    l
}

fn encode(l: Option<u64>) -> u64 {
    // A finite limit of 2^64 - 2 bytes or more is past any file size.
    l.map_or(UNLIMITED, |l| l.min(u64::MAX - 2) + 1)
}

/// The kernel's answer (one system call, no round trip).
fn ask() -> Option<u64> {
    sys::soft_limit(libc::RLIMIT_FSIZE)
}

/// The check Linux makes (`inode_newsize_ok`) before a call that may grow
/// a file to `end` bytes without writing: `truncate`, `ftruncate`, and
/// `fallocate` without `FALLOC_FL_KEEP_SIZE`. Past the caller's limit, a
/// call that would grow the file fails with `EFBIG` and the caller gets
/// `SIGXFSZ`; one that does not grow it (the file is already that long)
/// goes on. `size` asks the file's current size, a round trip taken only
/// when `end` is past a finite limit.
///
/// The size is read before the call, not under its server's lock as Linux
/// reads it: a file another process shrinks in between can grow past the
/// limit (docs/COMPATIBILITY.md).
pub fn check_growth(end: u64, size: impl FnOnce() -> Result<u64>) -> Result<()> {
    match limit() {
        Some(lim) if end > lim && size()? < end => {
            crate::intr::raise_in_this_thread(libc::SIGXFSZ);
            Err(Error::Errno(libc::EFBIG))
        }
        _ => Ok(()),
    }
}

/// In a fork child (one thread): a thread that did not come along may
/// have held the lock at the fork, and its change of the limit may or may
/// not have reached the child's copy. Free the lock and ask again.
pub fn after_fork_child() {
    LOCK.release_raw();
    KEPT.store(UNKNOWN, Ordering::Release);
}

/// Does this `setrlimit` (`a[0]` the resource) or `prlimit64` (`a[1]`,
/// with a new limit in `a[2]`) possibly set `RLIMIT_FSIZE`? Any process id
/// counts: a thread id of this process names it too, and forgetting is
/// always safe.
fn may_set_fsize(nr: i64, a: &[u64; 6]) -> bool {
    let fsize = libc::RLIMIT_FSIZE as u64;
    match nr {
        libc::SYS_setrlimit => a[0] == fsize,
        libc::SYS_prlimit64 => a[1] == fsize && a[2] != 0,
        _ => false,
    }
}

/// Run the program's `setrlimit`/`prlimit64` (its own arguments) and
/// forget the kept limit if it may have changed.
pub fn set(nr: i64, a: &[u64; 6]) -> i64 {
    // SAFETY (both calls below): the program's own call with its own
    // arguments; the kernel validates its pointers.
    if !may_set_fsize(nr, a) {
        return unsafe { sys::syscall6(nr, *a) };
    }
    let _g = LOCK.lock();
    let r = unsafe { sys::syscall6(nr, *a) };
    if sys::in_parent_memory() {
        NEVER_KEEP.store(true, Ordering::Release);
    }
    // Forget even after a failure: the call may have been half done.
    KEPT.store(UNKNOWN, Ordering::Release);
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding_keeps_limits_apart_from_unknown_and_unlimited() {
        assert_eq!(encode(None), UNLIMITED);
        assert_eq!(encode(Some(0)), 1);
        assert_ne!(encode(Some(u64::MAX - 1)), UNLIMITED);
        assert_ne!(encode(Some(u64::MAX - 2)), UNKNOWN);
    }

    #[test]
    fn only_fsize_setters_forget() {
        let fsize = libc::RLIMIT_FSIZE as u64;
        let nofile = libc::RLIMIT_NOFILE as u64;
        assert!(may_set_fsize(libc::SYS_setrlimit, &[fsize, 1, 0, 0, 0, 0]));
        assert!(!may_set_fsize(
            libc::SYS_setrlimit,
            &[nofile, 1, 0, 0, 0, 0]
        ));
        assert!(may_set_fsize(libc::SYS_prlimit64, &[0, fsize, 8, 0, 0, 0]));
        assert!(may_set_fsize(libc::SYS_prlimit64, &[42, fsize, 8, 0, 0, 0]));
        // A read of the limit (no new one) changes nothing.
        assert!(!may_set_fsize(libc::SYS_prlimit64, &[0, fsize, 0, 8, 0, 0]));
        assert!(!may_set_fsize(
            libc::SYS_prlimit64,
            &[0, nofile, 8, 0, 0, 0]
        ));
    }

    #[test]
    fn a_lowered_limit_is_seen_by_the_next_write() {
        // This test process's own limit, changed through `set` as a
        // program's call would be, and put back.
        let before = ask();
        assert_eq!(limit(), before);
        let mut old = libc::rlimit64 {
            rlim_cur: 0,
            rlim_max: 0,
        };
        let fsize = libc::RLIMIT_FSIZE as u64;
        // SAFETY: reads this process's limit into `old`.
        let r = unsafe { sys::sc(libc::SYS_prlimit64, 0, fsize, 0, &mut old as *mut _ as u64) };
        assert_eq!(r, 0);
        // Below the hard limit, which an unprivileged process cannot raise.
        let low = libc::rlimit64 {
            rlim_cur: (1 << 30).min(old.rlim_max),
            rlim_max: old.rlim_max,
        };
        let args = |new: &libc::rlimit64, old: &mut libc::rlimit64| {
            [0, fsize, new as *const _ as u64, old as *mut _ as u64, 0, 0]
        };
        assert_eq!(set(libc::SYS_prlimit64, &args(&low, &mut old)), 0);
        assert_eq!(limit(), Some(low.rlim_cur));
        let back = old;
        assert_eq!(set(libc::SYS_prlimit64, &args(&back, &mut old)), 0);
        assert_eq!(limit(), before);
    }
}
