//! The CPU sets a thread moves between, and the raw calls that move it.

use rustix::thread::CpuSet;

use crate::session::Client;
use crate::sys;

/// The instance's cores without `core`, if that leaves any.
pub fn all_but(c: &Client, core: usize) -> Option<CpuSet> {
    let table = crate::cpus::table(c)?;
    let mut off = CpuSet::new();
    let mut any = false;
    for k in table.served().filter(|&k| k != core && k < CpuSet::MAX_CPU) {
        off.set(k);
        any = true;
    }
    any.then_some(off)
}

/// Just `core`, if the instance places programs there.
pub fn only(c: &Client, core: usize) -> Option<CpuSet> {
    let table = crate::cpus::table(c)?;
    if core >= CpuSet::MAX_CPU || !table.served().any(|k| k == core) {
        return None;
    }
    let mut on = CpuSet::new();
    on.set(core);
    Some(on)
}

/// Is the calling thread pinned to one CPU?
pub fn pinned() -> bool {
    current().is_some_and(|set| set.count() == 1)
}

/// The calling thread's affinity as the kernel has it.
pub fn current() -> Option<CpuSet> {
    rustix::thread::sched_getaffinity(None).ok()
}

/// Set the calling thread's affinity by the raw call: through libc it
/// would come back to atoll's wrapper, which takes it as the program's
/// own choice.
pub fn set(set: &CpuSet) -> bool {
    // SAFETY: `set` is a live CpuSet of `size_of::<CpuSet>()` bytes, the
    // mask the kernel reads; pid 0 is the calling thread.
    let r = unsafe {
        sys::sc(
            libc::SYS_sched_setaffinity,
            0,
            std::mem::size_of::<CpuSet>() as u64,
            set as *const CpuSet as u64,
            0,
        )
    };
    r == 0
}
