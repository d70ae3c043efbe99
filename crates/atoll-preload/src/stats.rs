//! Trap statistics: how many times each system call number reached the
//! SIGSYS handler, i.e. escaped the libc wrappers (the fast path).
//!
//! `atoll run --stats` and `atoll bench` read them to tell which entry
//! points still trap. When `ATOLL_TRAP_STATS=FILE` is set, each process
//! appends one line `"<pid> <nr>:<count> <nr>:<count> ...\n"` to FILE when it
//! exits or execs (counters are then reset, so lines of one pid add up).
//! A fork child starts from zero.
//!
//! Counting is a relaxed atomic add: it is on the trap path and must be
//! lock-free and allocation-free.

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::raw::{self, StackBuf};

/// System call numbers below this are counted individually; others land in
/// the last slot.
pub const SLOTS: usize = 512;

// With the other big zero tables after `.bss` (`fdtable::DESCS` says why).
#[cfg_attr(target_os = "linux", link_section = ".bss.atoll_tables")]
static COUNTS: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];
/// Calls that went through rewritten sites (`rewrite`), and sites this
/// process rewrote after their first trap: written as `direct:N` and
/// `sites:N` after the counts (a reader subtracts `sites` from the traps
/// to get those that recur); sites rewritten before any trap, because
/// the instance remembered them (`rewrite::remember`): `remembered:N`.
static DIRECT: AtomicU64 = AtomicU64::new(0);
static SITES: AtomicU64 = AtomicU64::new(0);
static REMEMBERED: AtomicU64 = AtomicU64::new(0);

/// NUL-terminated path from `ATOLL_TRAP_STATS`, copied at start-up so the
/// exit path needs neither getenv nor malloc.
static mut PATH: [u8; 512] = [0; 512];
static PATH_SET: AtomicBool = AtomicBool::new(false);

/// Count one trap of system call `nr`. Hot path.
#[inline]
pub fn count(nr: i64) {
    let slot = if (0..SLOTS as i64 - 1).contains(&nr) {
        nr as usize
    } else {
        SLOTS - 1
    };
    COUNTS[slot].fetch_add(1, Ordering::Relaxed);
}

/// Count one call through a rewritten site. Hot path.
#[inline]
pub fn count_direct() {
    DIRECT.fetch_add(1, Ordering::Relaxed);
}

/// Count one site rewritten.
pub fn count_site() {
    SITES.fetch_add(1, Ordering::Relaxed);
}

/// Count one site rewritten from the table of remembered sites (no trap).
pub fn count_remembered() {
    REMEMBERED.fetch_add(1, Ordering::Relaxed);
}

/// Copy the counters into `out` (up to its length); returns how many slots
/// were written.
pub fn snapshot(out: &mut [u64]) -> usize {
    let n = out.len().min(SLOTS);
    for (o, c) in out.iter_mut().zip(COUNTS.iter()).take(n) {
        *o = c.load(Ordering::Relaxed);
    }
    n
}

/// Zero all counters (fork child; after a flush).
pub fn reset() {
    // Only the counters that are not zero already: in a forked child each
    // store to a page of the table, zero or not, copies that page (a
    // write fault), and most rows are zero.
    for c in COUNTS.iter().chain([&DIRECT, &SITES, &REMEMBERED]) {
        if c.load(Ordering::Relaxed) != 0 {
            c.store(0, Ordering::Relaxed);
        }
    }
}

/// Remember where to append stats. Called once from the constructor.
pub fn set_path(path: &[u8]) {
    if path.is_empty() || path.len() >= 511 {
        return;
    }
    // SAFETY: written once by the constructor before any other thread
    // exists and before `PATH_SET` publishes it; read-only afterwards.
    unsafe {
        let p = &mut *core::ptr::addr_of_mut!(PATH);
        p[..path.len()].copy_from_slice(path);
        p[path.len()] = 0;
    }
    PATH_SET.store(true, Ordering::Release);
}

/// Render the stats line for `pid` from `counts` (slot index = syscall nr).
/// Returns false when there is nothing to report.
pub fn format_line<const N: usize>(pid: i64, counts: &[u64], out: &mut StackBuf<N>) -> bool {
    out.push_i64(pid);
    let mut any = false;
    for (nr, &c) in counts.iter().enumerate() {
        if c == 0 {
            continue;
        }
        any = true;
        out.push(b" ");
        out.push_u64(nr as u64);
        out.push(b":");
        out.push_u64(c);
    }
    out.push(b"\n");
    any
}

/// Append this process's line to the stats file (if configured) and reset
/// the counters. Uses raw system calls only: it runs inside the SIGSYS
/// handler at `exit_group`/`execve`.
pub fn flush() {
    if PATH_SET.load(Ordering::Acquire) {
        write_line();
    }
}

/// [`flush`] when a stats file is configured. A function of its own: its
/// 8 KiB line buffer makes the compiler probe three stack pages on entry,
/// and in the `execve` of every forked child and at the `exit_group` of
/// every image (on a signal stack fresh from `mmap`) those were three page
/// faults before the check that nearly always returns at once.
#[inline(never)]
#[cold]
fn write_line() {
    let mut counts = [0u64; SLOTS];
    // Swap to zero slot by slot so concurrent traps are not lost twice.
    for (o, c) in counts.iter_mut().zip(COUNTS.iter()) {
        *o = c.swap(0, Ordering::Relaxed);
    }
    let mut line = StackBuf::<8192>::default();
    let pid = raw::syscall(libc::SYS_getpid, &[]);
    let direct = DIRECT.swap(0, Ordering::Relaxed);
    let sites = SITES.swap(0, Ordering::Relaxed);
    let remembered = REMEMBERED.swap(0, Ordering::Relaxed);
    let mut any = format_line(pid, &counts, &mut line);
    if direct + sites + remembered > 0 {
        // Before the newline; readers skip tokens whose key is no number.
        line.pop();
        line.push(b" direct:");
        line.push_u64(direct);
        line.push(b" sites:");
        line.push_u64(sites);
        if remembered > 0 {
            line.push(b" remembered:");
            line.push_u64(remembered);
        }
        line.push(b"\n");
        any = true;
    }
    if !any {
        return;
    }
    let path = core::ptr::addr_of!(PATH) as u64;
    let fd = raw::syscall(
        libc::SYS_open,
        &[
            path,
            (libc::O_WRONLY | libc::O_APPEND | libc::O_CREAT | libc::O_CLOEXEC) as u64,
            0o644,
        ],
    );
    if fd < 0 {
        return;
    }
    // One write with O_APPEND keeps lines of concurrent processes whole.
    raw::write_all(fd as i32, line.as_bytes());
    raw::syscall(libc::SYS_close, &[fd as u64]);
}

/// Copy the trap counters of this process into `out[0..len]` (index =
/// system call number, the last slot collects numbers ≥ 511). Returns the
/// number of slots written. For in-process benchmarks and tests.
///
/// # Safety
/// `out` must point to `len` writable `u64`s (or be null with `len == 0`).
#[no_mangle]
pub unsafe extern "C" fn atoll_trap_counts(out: *mut u64, len: usize) -> usize {
    if out.is_null() || len == 0 {
        return 0;
    }
    // SAFETY: the caller guarantees `out[0..len]` is writable.
    let out = unsafe { core::slice::from_raw_parts_mut(out, len) };
    snapshot(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_lists_only_nonzero_counts_in_number_order() {
        let mut counts = [0u64; 300];
        counts[0] = 3;
        counts[257] = 12;
        let mut b = StackBuf::<128>::default();
        assert!(format_line(77, &counts, &mut b));
        assert_eq!(b.as_bytes(), b"77 0:3 257:12\n");
    }

    #[test]
    fn reset_zeroes_every_counter() {
        // Numbers no other test of this process traps.
        COUNTS[SLOTS - 2].fetch_add(3, Ordering::Relaxed);
        COUNTS[SLOTS - 3].fetch_add(1, Ordering::Relaxed);
        SITES.fetch_add(2, Ordering::Relaxed);
        reset();
        assert_eq!(COUNTS[SLOTS - 2].load(Ordering::Relaxed), 0);
        assert_eq!(COUNTS[SLOTS - 3].load(Ordering::Relaxed), 0);
        assert_eq!(SITES.load(Ordering::Relaxed), 0);
        assert_eq!(DIRECT.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn empty_counts_report_nothing() {
        let mut b = StackBuf::<128>::default();
        assert!(!format_line(5, &[0; 10], &mut b));
    }

    #[test]
    fn out_of_range_numbers_share_the_last_slot() {
        let before = COUNTS[SLOTS - 1].load(Ordering::Relaxed);
        count(100_000);
        count(-1);
        assert_eq!(COUNTS[SLOTS - 1].load(Ordering::Relaxed), before + 2);
    }
}
