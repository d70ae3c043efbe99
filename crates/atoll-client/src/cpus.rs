//! The CPUs a program sees: every core the instance may place it on.
//!
//! atoll pins each program to the one core its scheduling server placed it
//! on (Hare §3.6.1), so the kernel's `sched_getaffinity` says one CPU, and
//! `nproc`, `make -j$(nproc)`, ninja, cargo and `os.process_cpu_count()`
//! would all run one job at a time. The program's real question is "how
//! many CPUs can my work use", and the answer is the cores the instance's
//! scheduling servers serve (the load table, `atoll_sched::load`), where
//! the program's children are placed at `exec`. So `sched_getaffinity` of
//! this process answers that set, while the kernel's affinity, and hence
//! placement, stays atoll's. Another process's affinity is the kernel's.
//!
//! Once the program sets its own affinity (`sched_setaffinity`, `taskset`),
//! the affinity is the program's: `sched_getaffinity` answers the kernel's
//! mask, and placement leaves the process and its new images where the
//! program put them (`ATOLL_AFFINITY=own` carries this across `execve`, as
//! Linux keeps affinity across it).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use atoll_sched::LoadTable;

use crate::error::{err, Result};
use crate::session::Client;
use crate::sys;
use crate::Out;

/// Environment entry saying the affinity is the program's own.
pub const ENV_AFFINITY: &str = "ATOLL_AFFINITY";

/// The program set its own affinity (in this image or one before it).
static OWN: AtomicBool = AtomicBool::new(false);

/// At start: did an earlier image set its own affinity?
pub fn init_from_env() {
    if std::env::var_os(ENV_AFFINITY).is_some_and(|v| v == "own") {
        OWN.store(true, Ordering::Relaxed);
    }
}

/// Is the affinity the program's own (placement must leave it)?
pub fn own_affinity() -> bool {
    OWN.load(Ordering::Relaxed)
}

/// The entry a new image inherits, if any.
pub fn env_entry() -> Option<Vec<u8>> {
    own_affinity().then(|| format!("{ENV_AFFINITY}=own").into_bytes())
}

/// `sched_setaffinity(pid, len, mask)`: the kernel's; of this process, the
/// affinity becomes the program's own.
pub fn setaffinity(a: &[u64; 6]) -> Result<Out> {
    // SAFETY: the program's own arguments; the kernel checks them.
    let r = unsafe { sys::sc(libc::SYS_sched_setaffinity, a[0], a[1], a[2], 0) };
    if r < 0 {
        return err((-r) as i32);
    }
    if is_self(a[0]) {
        OWN.store(true, Ordering::Relaxed);
    }
    Ok(Out::Done(r))
}

/// The instance's load table, mapped once per process.
pub(crate) fn table(c: &Client) -> Option<&'static LoadTable> {
    static TABLE: OnceLock<Option<LoadTable>> = OnceLock::new();
    TABLE
        .get_or_init(|| {
            let dir = std::path::Path::new(&c.socket_path).parent()?;
            LoadTable::open(&dir.join(atoll_sched::LOAD_FILE))
        })
        .as_ref()
}

/// Does `pid` (0: the caller) name this process or one of its threads?
fn is_self(pid: u64) -> bool {
    let pid = pid as i32;
    if pid == 0 {
        return true;
    }
    // SAFETY: getpid and gettid take no arguments.
    let (me, tid) = unsafe {
        (
            sys::sc(libc::SYS_getpid, 0, 0, 0, 0) as i32,
            sys::sc(libc::SYS_gettid, 0, 0, 0, 0) as i32,
        )
    };
    if pid == me || pid == tid {
        return true;
    }
    // Another thread of this process: its /proc/self/task entry exists.
    let mut path = [0u8; 40];
    let n = format_task_path(&mut path, pid);
    // SAFETY: `path` is NUL-terminated by `format_task_path`.
    unsafe { sys::sc(libc::SYS_access, path[..n].as_ptr() as u64, 0, 0, 0) == 0 }
}

/// `/proc/self/task/<tid>` NUL-terminated into `buf` (no allocation);
/// returns its length with the NUL.
fn format_task_path(buf: &mut [u8; 40], tid: i32) -> usize {
    sys::proc_path(buf, b"/proc/self/task/", tid.unsigned_abs(), b"")
}

/// `sched_getaffinity(pid, len, mask)`. The kernel answers first (its
/// checks of `len` and `mask`, its return value: the bytes of mask it
/// wrote); for this process, the mask is then the instance's cores.
pub fn getaffinity(c: &Client, a: &[u64; 6]) -> Result<Out> {
    let (pid, len, mask) = (a[0], a[1], a[2]);
    // SAFETY: the program's own arguments; the kernel checks `mask`.
    let wrote = unsafe { sys::sc(libc::SYS_sched_getaffinity, pid, len, mask, 0) };
    if wrote < 0 {
        return err((-wrote) as i32);
    }
    let Some(table) = table(c).filter(|_| !own_affinity() && is_self(pid)) else {
        return Ok(Out::Done(wrote));
    };
    let mut bytes = [0u8; 128];
    let n = (wrote as usize).min(bytes.len());
    let mut any = false;
    for core in table.served().filter(|&k| k < n * 8) {
        bytes[core / 8] |= 1 << (core % 8);
        any = true;
    }
    if any {
        sys::copy_to_user(mask, &bytes[..n]).map_err(crate::error::Error::Errno)?;
    }
    Ok(Out::Done(wrote))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_paths_are_spelled_without_allocating() {
        let mut b = [0u8; 40];
        let n = format_task_path(&mut b, 12345);
        assert_eq!(&b[..n], b"/proc/self/task/12345\0");
        let n = format_task_path(&mut b, 7);
        assert_eq!(&b[..n], b"/proc/self/task/7\0");
    }
}
