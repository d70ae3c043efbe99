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

use std::sync::OnceLock;

use atoll_sched::LoadTable;

use crate::error::{err, Result};
use crate::session::Client;
use crate::sys;
use crate::Out;

/// The instance's load table, mapped once per process.
fn table(c: &Client) -> Option<&'static LoadTable> {
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
    const PREFIX: &[u8] = b"/proc/self/task/";
    buf[..PREFIX.len()].copy_from_slice(PREFIX);
    let mut digits = [0u8; 11];
    let (mut v, mut k) = (tid.unsigned_abs(), 0);
    loop {
        digits[k] = b'0' + (v % 10) as u8;
        k += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    let mut n = PREFIX.len();
    for d in digits[..k].iter().rev() {
        buf[n] = *d;
        n += 1;
    }
    buf[n] = 0;
    n + 1
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
    let Some(table) = table(c).filter(|_| is_self(pid)) else {
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
