//! The instance's shared memory, mapped at a process's first use rather
//! than as it starts.
//!
//! Most images an instance starts never make an atoll call (a shell's
//! `/bin/true`, a compiler reading host files), yet each used to map the
//! 1 GiB buffer cache and the control block in its constructor, resolve
//! the file servers' names against the control block, and unmap it all
//! again at exit. Now a start keeps only the descriptors (inherited, or
//! sent at attach) and the sizes it read while checking them; the first
//! call that needs a mapping makes it.
//!
//! The first use may come from any thread, from a signal handler that
//! interrupted another first use on the same thread, or from the trap
//! path. So no one waits for anyone: each caller that finds nothing maps
//! its own copy and offers it with one compare-and-swap; a loser drops
//! its copy (unmapping it) and uses the winner's. The mapping is made by
//! raw system calls from atoll's text (rustix), which Syscall User
//! Dispatch lets through, so making it never traps into atoll again.
//! A value once published is never freed (the client lives as long as
//! the process), and a forked child inherits it with the mapping.

use core::sync::atomic::{AtomicPtr, Ordering};

/// A value made at its first use, at most once as seen by its users.
pub struct OnDemand<T> {
    made: AtomicPtr<T>,
}

impl<T> OnDemand<T> {
    pub const fn new() -> Self {
        OnDemand {
            made: AtomicPtr::new(core::ptr::null_mut()),
        }
    }

    /// A value already made (tests, and callers that only report).
    pub fn get(&self) -> Option<&T> {
        let p = self.made.load(Ordering::Acquire);
        // SAFETY: only `get_or_make` stores here, a leaked box never freed.
        (!p.is_null()).then(|| unsafe { &*p })
    }

    /// The value, made by `make` if no one has made it yet. Concurrent
    /// (or nested) first uses may each call `make`; one value wins and
    /// the others are dropped.
    pub fn get_or_make<E>(&self, make: impl FnOnce() -> Result<T, E>) -> Result<&T, E> {
        if let Some(v) = self.get() {
            return Ok(v);
        }
        let mine = Box::into_raw(Box::new(make()?));
        match self.made.compare_exchange(
            core::ptr::null_mut(),
            mine,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            // SAFETY: published just now, never freed.
            Ok(_) => Ok(unsafe { &*mine }),
            Err(theirs) => {
                // SAFETY: `mine` was never published: ours alone.
                drop(unsafe { Box::from_raw(mine) });
                // SAFETY: as in `get`.
                Ok(unsafe { &*theirs })
            }
        }
    }
}

impl<T> Default for OnDemand<T> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::sync::atomic::AtomicUsize;

    #[test]
    fn made_once_and_kept() {
        let d: OnDemand<u32> = OnDemand::new();
        assert!(d.get().is_none());
        let v = d.get_or_make(|| Ok::<_, ()>(7)).unwrap();
        assert_eq!(*v, 7);
        // A later use does not make it again.
        let again = d.get_or_make(|| Ok::<_, ()>(9)).unwrap();
        assert_eq!(*again, 7);
        assert_eq!(d.get().copied(), Some(7));
    }

    #[test]
    fn a_failed_make_leaves_nothing() {
        let d: OnDemand<u32> = OnDemand::new();
        assert_eq!(d.get_or_make(|| Err::<u32, _>("no")), Err("no"));
        assert!(d.get().is_none());
        assert_eq!(d.get_or_make(|| Ok::<_, ()>(3)).copied(), Ok(3));
    }

    /// A first use nested inside another (a signal handler's, on the same
    /// thread) does not wait for the outer one: it makes its own, wins,
    /// and the outer one's copy is dropped.
    #[test]
    fn a_nested_first_use_wins_and_the_outer_copy_is_dropped() {
        static DROPS: AtomicUsize = AtomicUsize::new(0);
        struct Counted(u32);
        impl Drop for Counted {
            fn drop(&mut self) {
                DROPS.fetch_add(1, Ordering::Relaxed);
            }
        }
        let d: OnDemand<Counted> = OnDemand::new();
        let outer = d
            .get_or_make(|| {
                let inner = d.get_or_make(|| Ok::<_, ()>(Counted(2))).unwrap();
                assert_eq!(inner.0, 2);
                Ok::<_, ()>(Counted(1))
            })
            .unwrap();
        assert_eq!(outer.0, 2);
        assert_eq!(DROPS.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn racing_threads_all_see_one_value() {
        let d: &'static OnDemand<usize> = Box::leak(Box::new(OnDemand::new()));
        let seen: Vec<usize> = (0..8)
            .map(|i| std::thread::spawn(move || *d.get_or_make(|| Ok::<_, ()>(i)).unwrap()))
            .collect::<Vec<_>>()
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect();
        assert!(seen.iter().all(|&v| v == seen[0]), "{seen:?}");
    }
}
