//! Which slot (core, cluster of cores, or server) the calling thread
//! belongs to: the index of its local translation table.
//!
//! K42 indexes the local table by the processor a call runs on (K42
//! §5.2). A user-space thread may migrate, so atoll gives each thread a
//! slot once and keeps it: the core the thread first ran on, or the slot a
//! pinned thread (a file server) declares with [`set_slot`]. A thread that
//! later migrates keeps using its old slot's reps; that costs locality,
//! never correctness, because reps are `Sync` and the slot is only a cache
//! index.

use std::cell::Cell;

thread_local! {
    static SLOT: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// Declare the calling thread's slot (a pinned server thread calls this
/// once with its core). Domains reduce it modulo their slot count.
pub fn set_slot(slot: usize) {
    SLOT.with(|s| s.set(slot));
}

/// The calling thread's slot, chosen on first use from the core it runs on.
///
/// Hot path: one thread-local read after the first call.
#[inline]
pub fn current_slot() -> usize {
    SLOT.with(|s| {
        let v = s.get();
        if v != usize::MAX {
            return v;
        }
        let v = first_cpu();
        s.set(v);
        v
    })
}

fn first_cpu() -> usize {
    rustix::thread::sched_getcpu()
}

/// Confine the calling thread to `cpu` (benchmarks; servers are pinned
/// by their own start-up code). Errors leave the thread unpinned.
pub fn pin_to_cpu(cpu: usize) -> std::io::Result<()> {
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    rustix::thread::sched_setaffinity(None, &set)?;
    Ok(())
}

/// The CPUs this process may run on.
pub fn allowed_cpus() -> Vec<usize> {
    match rustix::thread::sched_getaffinity(None) {
        Ok(set) => (0..rustix::thread::CpuSet::MAX_CPU)
            .filter(|&c| set.is_set(c))
            .collect(),
        Err(_) => vec![0],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_declared_slot_sticks_to_the_thread_only() {
        std::thread::spawn(|| {
            set_slot(7);
            assert_eq!(current_slot(), 7);
        })
        .join()
        .unwrap();
        std::thread::spawn(|| {
            set_slot(3);
            assert_eq!(current_slot(), 3);
        })
        .join()
        .unwrap();
    }
}
