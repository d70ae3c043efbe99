//! The instance's load table (`atoll_sched::LoadTable`, `sched.load` in
//! the runtime directory), mapped once per process and inherited by
//! `fork`.
//!
//! Placement reads the table at every `execve` that may move (Hare
//! §3.6.1). Opening and mapping it there cost a path lookup, an `fstat`
//! and an `mmap` per exec, and the usual caller of `execve` is a child
//! fresh from `fork` whose parent never execs (a shell, `make`): so the
//! parent maps it before its first fork ([`map_for_children`]) and every
//! child finds it already there. An image that execs without having
//! forked maps it at that exec. `execve` drops the mapping like the rest
//! of the old image; the new image maps it again when it needs it.
//!
//! The mapping is published with a compare-and-swap, never waited for:
//! a `fork` while another thread is mapping it leaves the child without
//! it (it maps its own), never blocked on a lock held by a thread that
//! did not come along.

use core::sync::atomic::{AtomicPtr, Ordering};
use std::path::Path;

use atoll_sched::placement::{self, Policy};
use atoll_sched::LoadTable;

/// The mapped table, or null; never unmapped once published.
static TABLE: AtomicPtr<LoadTable> = AtomicPtr::new(core::ptr::null_mut());

/// The load table of the instance whose runtime directory is `dir`.
/// `None` when the instance has none (no scheduling servers).
pub fn get(dir: &Path) -> Option<&'static LoadTable> {
    let p = TABLE.load(Ordering::Acquire);
    if !p.is_null() {
        // SAFETY: a published table is leaked, never freed or replaced.
        return Some(unsafe { &*p });
    }
    let fresh = Box::into_raw(Box::new(LoadTable::open(
        &dir.join(atoll_sched::LOAD_FILE),
    )?));
    match TABLE.compare_exchange(
        core::ptr::null_mut(),
        fresh,
        Ordering::AcqRel,
        Ordering::Acquire,
    ) {
        // SAFETY: just published; leaked from now on.
        Ok(_) => Some(unsafe { &*fresh }),
        Err(theirs) => {
            // Another thread was first: keep theirs, unmap ours.
            // SAFETY: `fresh` came from `Box::into_raw` above and was
            // never published.
            drop(unsafe { Box::from_raw(fresh) });
            // SAFETY: as for a table found published at the start.
            Some(unsafe { &*theirs })
        }
    }
}

/// Before a `fork` of a session in the runtime directory `dir`: map the
/// table now, when this process's children may place their execs, so
/// that they inherit it.
pub fn map_for_children(dir: &Path) {
    if placement::policy() != Policy::Local {
        let _ = get(dir);
    }
}
