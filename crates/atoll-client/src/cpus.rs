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
//! Once the program sets a thread's affinity (`sched_setaffinity`,
//! `taskset`), that thread's affinity is the program's: its
//! `sched_getaffinity` answers the kernel's mask, and neither placement
//! nor `msgbound` moves it or the images it `execve`s
//! (`ATOLL_AFFINITY=own` carries this across `execve`, as Linux keeps
//! affinity across it). Affinity is per thread in Linux, and so is this:
//! a program that pins one helper thread (fio pins one per CPU to
//! calibrate its clock) leaves its other threads, and the processes they
//! fork, atoll's to place. A thread inherits its creator's mask, so a
//! thread whose mask is none that atoll gives (the image's first mask, one
//! core the instance serves, or all of them but one) is the program's too.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::OnceLock;

use rustix::thread::CpuSet;

use atoll_sched::LoadTable;

use crate::error::{err, Result};
use crate::session::Client;
use crate::sys;
use crate::Out;

/// Environment entry saying the affinity is the program's own.
pub const ENV_AFFINITY: &str = "ATOLL_AFFINITY";

/// The image started with an affinity the program chose (an earlier
/// image set it): every thread's mask is the program's.
static OWN_IMAGE: AtomicBool = AtomicBool::new(false);

/// Threads whose affinity another thread of the program set
/// (`sched_setaffinity(tid)`); each looks for its own id here. Full: every
/// thread counts as the program's ([`OWN_ALL`]), which only leaves more
/// alone.
static OWN_TIDS: [AtomicI32; 32] = [const { AtomicI32::new(0) }; 32];
static OWN_ALL: AtomicBool = AtomicBool::new(false);

/// The mask this image started with: where placement put it.
static FIRST_MASK: OnceLock<Option<CpuSet>> = OnceLock::new();

std::thread_local! {
    /// The program set this thread's affinity (or the thread it was
    /// forked from had it set: a fork copies this, as the kernel copies
    /// the mask).
    static OWN_THREAD: Cell<bool> = const { Cell::new(false) };
}

/// At start: did an earlier image set its own affinity? And where does
/// this one start?
pub fn init_from_env() {
    if std::env::var_os(ENV_AFFINITY).is_some_and(|v| v == "own") {
        OWN_IMAGE.store(true, Ordering::Relaxed);
    }
    FIRST_MASK.get_or_init(|| rustix::thread::sched_getaffinity(None).ok());
}

/// In a child after `fork`: the thread ids recorded name the parent's
/// threads, which a new thread here could one day reuse.
pub fn after_fork_child() {
    for slot in &OWN_TIDS {
        slot.store(0, Ordering::Relaxed);
    }
}

/// Is the calling thread's affinity the program's own (placement and
/// `msgbound` must leave it)?
pub fn own_affinity() -> bool {
    if OWN_IMAGE.load(Ordering::Relaxed) || OWN_ALL.load(Ordering::Relaxed) {
        return true;
    }
    if OWN_THREAD.try_with(Cell::get).unwrap_or(true) {
        return true;
    }
    let tid = raw_gettid();
    if OWN_TIDS.iter().any(|t| t.load(Ordering::Relaxed) == tid) {
        let _ = OWN_THREAD.try_with(|o| o.set(true));
        return true;
    }
    // Made by a thread whose affinity is the program's: the kernel gave it
    // that mask. A mask atoll set itself (placement, or a `msgbound`
    // move of this thread) is atoll's.
    if crate::msgbound::moved() {
        return false;
    }
    let Ok(mask) = rustix::thread::sched_getaffinity(None) else {
        return false;
    };
    !is_atolls_mask(&mask)
}

/// Could atoll have given a thread `mask`: the image's first mask, or one
/// that `msgbound` moves threads to (one served core, or all served cores
/// but one)? Without the instance's load table, only the first mask.
fn is_atolls_mask(mask: &CpuSet) -> bool {
    if FIRST_MASK.get().is_some_and(|m| m.as_ref() == Some(mask)) {
        return true;
    }
    let Some(table) = crate::session::client().and_then(table) else {
        return false;
    };
    let (mut served, mut in_mask) = (0, 0);
    for k in table.served().filter(|&k| k < CpuSet::MAX_CPU) {
        served += 1;
        in_mask += usize::from(mask.is_set(k));
    }
    // Nothing outside the served cores, and one of them or all but one.
    mask.count() as usize == in_mask && (in_mask == 1 || in_mask + 1 == served)
}

/// Record that the program set the affinity of thread `tid` of this
/// process (not the caller).
fn mark_thread(tid: i32) {
    if OWN_TIDS.iter().any(|t| t.load(Ordering::Relaxed) == tid) {
        return;
    }
    for slot in &OWN_TIDS {
        if slot
            .compare_exchange(0, tid, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            return;
        }
    }
    OWN_ALL.store(true, Ordering::Relaxed);
}

fn raw_gettid() -> i32 {
    // SAFETY: gettid takes no arguments.
    unsafe { sys::sc(libc::SYS_gettid, 0, 0, 0, 0) as i32 }
}

/// The entry a new image inherits, if any, given [`own_affinity`]'s
/// answer (asked once per exec by its caller).
pub fn env_entry(own: bool) -> Option<Vec<u8>> {
    own.then(|| format!("{ENV_AFFINITY}=own").into_bytes())
}

/// `sched_setaffinity(pid, len, mask)`: the kernel's; of this process, the
/// affinity becomes the program's own.
pub fn setaffinity(a: &[u64; 6]) -> Result<Out> {
    // SAFETY: the program's own arguments; the kernel checks them.
    let r = unsafe { sys::sc(libc::SYS_sched_setaffinity, a[0], a[1], a[2], 0) };
    if r < 0 {
        return err((-r) as i32);
    }
    match thread_of_self(a[0]) {
        Some(Target::Caller) => {
            let _ = OWN_THREAD.try_with(|o| o.set(true));
        }
        Some(Target::Other(tid)) => mark_thread(tid),
        None => {}
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

/// Which thread of this process an affinity call names.
#[derive(Debug, PartialEq, Eq)]
enum Target {
    /// The calling thread (pid 0, or its own id).
    Caller,
    /// Another thread of this process (the process id names the main
    /// thread, as in the kernel).
    Other(i32),
}

/// The thread of this process `pid` names, if it names one.
fn thread_of_self(pid: u64) -> Option<Target> {
    let pid = pid as i32;
    if pid == 0 {
        return Some(Target::Caller);
    }
    let tid = raw_gettid();
    if pid == tid {
        return Some(Target::Caller);
    }
    // SAFETY: getpid takes no arguments.
    let me = unsafe { sys::sc(libc::SYS_getpid, 0, 0, 0, 0) as i32 };
    if pid == me {
        return Some(Target::Other(pid));
    }
    // Another thread of this process: its /proc/self/task entry exists.
    let mut path = [0u8; 40];
    let n = format_task_path(&mut path, pid);
    // SAFETY: `path` is NUL-terminated by `format_task_path`.
    let ours = unsafe { sys::sc(libc::SYS_access, path[..n].as_ptr() as u64, 0, 0, 0) == 0 };
    ours.then_some(Target::Other(pid))
}

/// Is the affinity of the thread `pid` names atoll's (answered with the
/// instance's cores)? Another process's is the kernel's.
fn answers_instance_cores(pid: u64) -> bool {
    match thread_of_self(pid) {
        Some(Target::Caller) => !own_affinity(),
        Some(Target::Other(tid)) => {
            !(OWN_IMAGE.load(Ordering::Relaxed)
                || OWN_ALL.load(Ordering::Relaxed)
                || OWN_TIDS.iter().any(|t| t.load(Ordering::Relaxed) == tid))
        }
        None => false,
    }
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
    let Some(table) = table(c).filter(|_| answers_instance_cores(pid)) else {
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
    fn affinity_calls_name_the_caller_or_another_thread_of_the_process() {
        assert_eq!(thread_of_self(0), Some(Target::Caller));
        assert_eq!(thread_of_self(raw_gettid() as u64), Some(Target::Caller));
        let me = std::process::id() as i32;
        let main = raw_gettid();
        let (pid_seen, main_seen) =
            std::thread::spawn(move || (thread_of_self(me as u64), thread_of_self(main as u64)))
                .join()
                .unwrap();
        // From another thread, the process id names the main thread.
        assert_eq!(pid_seen, Some(Target::Other(me)));
        assert_eq!(main_seen, Some(Target::Other(main)));
        // Not a thread of this process (pid 1 is init's).
        assert_eq!(thread_of_self(1), None);
    }

    #[test]
    fn task_paths_are_spelled_without_allocating() {
        let mut b = [0u8; 40];
        let n = format_task_path(&mut b, 12345);
        assert_eq!(&b[..n], b"/proc/self/task/12345\0");
        let n = format_task_path(&mut b, 7);
        assert_eq!(&b[..n], b"/proc/self/task/7\0");
    }
}
