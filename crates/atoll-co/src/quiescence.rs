//! Destruction by quiescence: knowing when no call that might hold a
//! temporary reference to an object is still running.
//!
//! K42 (§5.4.3) counts, per processor, the threads started in each of two
//! generations, and passes a token round the processors: when the
//! generation that was current at destroy time has no live threads on any
//! processor, nothing can still hold a reference taken before. atoll counts
//! calls rather than threads, per slot, in two generations — the scheme of
//! sleepable RCU:
//!
//! * a call reads the current generation's parity, increments that
//!   counter of its slot ([`Quiescence::enter`]) and decrements it when it
//!   returns (dropping the [`CallGuard`]);
//! * [`Quiescence::synchronize`] advances the generation and waits for the
//!   previous parity's counters to drain on every slot — twice, because a
//!   call that read the parity just before the advance may increment the
//!   old counter after the first wait saw it empty; the second advance and
//!   wait catches it.
//!
//! Why it is safe: the caller loads a translation entry *after* its
//! increment, and the destroyer unpublishes the entry *before* it
//! advances and reads the counters; all four are sequentially consistent,
//! so a call the waiter does not see started after the unpublish and
//! cannot find the old pointer. The `loom` model below checks exactly that.
//!
//! Per-slot counters live on their own cache lines, so calls on different
//! slots share nothing; `synchronize` is the management path (destroy,
//! hot-swap) and is serialised by a mutex.

use crossbeam_utils::CachePadded;

use crate::sync::{backoff, store_load_order, AtomicUsize, Ordering};

#[cfg(loom)]
use loom::sync::Mutex;
#[cfg(not(loom))]
use std::sync::Mutex;

/// Per-slot call counters in two generations.
pub struct Quiescence {
    generation: CachePadded<AtomicUsize>,
    counts: Box<[CachePadded<[AtomicUsize; 2]>]>,
    /// Serialises [`Quiescence::synchronize`]; never taken by calls.
    waiter: Mutex<()>,
}

/// A call in progress on one slot; dropping it ends the call.
#[must_use = "the call ends when the guard is dropped"]
pub struct CallGuard<'a> {
    counter: &'a AtomicUsize,
}

impl Quiescence {
    pub fn new(slots: usize) -> Quiescence {
        Quiescence {
            generation: CachePadded::new(AtomicUsize::new(0)),
            counts: (0..slots.max(1))
                .map(|_| CachePadded::new([AtomicUsize::new(0), AtomicUsize::new(0)]))
                .collect(),
            waiter: Mutex::new(()),
        }
    }

    /// Begin a call on `slot` (taken modulo the slot count).
    ///
    /// Hot path: one load and one atomic increment on the slot's own line.
    #[inline]
    pub fn enter(&self, slot: usize) -> CallGuard<'_> {
        let parity = self.generation.load(Ordering::SeqCst) & 1;
        let counter = &self.counts[slot % self.counts.len()][parity];
        counter.fetch_add(1, Ordering::SeqCst);
        // The caller's load of the translation entry comes after this.
        store_load_order();
        CallGuard { counter }
    }

    /// Wait until every call that began before this was called has ended.
    /// Must not be called from inside a call (it would wait for itself).
    pub fn synchronize(&self) {
        let _one_waiter = self.waiter.lock().unwrap_or_else(|p| p.into_inner());
        for _ in 0..2 {
            let old = self.generation.fetch_add(1, Ordering::SeqCst) & 1;
            // The caller's unpublish came before; the counters come after.
            store_load_order();
            for slot in self.counts.iter() {
                let mut round = 0;
                while slot[old].load(Ordering::SeqCst) != 0 {
                    backoff(&mut round);
                }
            }
        }
    }
}

impl Drop for CallGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        self.counter.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    #[test]
    fn synchronize_returns_at_once_when_no_call_runs() {
        let q = Quiescence::new(4);
        q.synchronize();
        q.synchronize();
    }

    #[test]
    fn synchronize_waits_for_a_call_that_began_before_it() {
        let q = Arc::new(Quiescence::new(2));
        let guard_taken = Arc::new(AtomicBool::new(false));
        let call_ended = Arc::new(AtomicBool::new(false));
        let caller = {
            let (q, taken, ended) = (q.clone(), guard_taken.clone(), call_ended.clone());
            std::thread::spawn(move || {
                let g = q.enter(1);
                taken.store(true, Ordering::SeqCst);
                std::thread::sleep(std::time::Duration::from_millis(50));
                ended.store(true, Ordering::SeqCst);
                drop(g);
            })
        };
        while !guard_taken.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        q.synchronize();
        assert!(call_ended.load(Ordering::SeqCst));
        caller.join().unwrap();
    }

    #[test]
    fn a_call_that_begins_after_synchronize_does_not_hold_it_up() {
        let q = Quiescence::new(1);
        q.synchronize();
        let _later = q.enter(0);
        // Only calls begun before are waited for; this one is in the new
        // generation, but a second synchronize would wait for it, so we
        // only check the counters moved to the current parity.
        let parity = q.generation.load(Ordering::SeqCst) & 1;
        assert_eq!(q.counts[0][parity].load(Ordering::SeqCst), 1);
        assert_eq!(q.counts[0][parity ^ 1].load(Ordering::SeqCst), 0);
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::atomic::AtomicUsize as Cell;
    use loom::sync::Arc;

    /// A reader enters, loads the published "pointer" and reads the object;
    /// the destroyer unpublishes, synchronizes and frees (marks dead). The
    /// reader must never see a freed object it found through the table.
    #[test]
    fn loom_no_call_sees_an_object_freed_after_synchronize() {
        loom::model(|| {
            let q = Arc::new(Quiescence::new(2));
            // 1 = the object is published in the table, 0 = unpublished.
            let published = Arc::new(Cell::new(1));
            // 1 = alive, 0 = freed.
            let alive = Arc::new(Cell::new(1));
            let reader = {
                let (q, published, alive) = (q.clone(), published.clone(), alive.clone());
                loom::thread::spawn(move || {
                    let _call = q.enter(1);
                    if published.load(Ordering::SeqCst) == 1 {
                        assert_eq!(alive.load(Ordering::SeqCst), 1, "use after free");
                    }
                })
            };
            published.store(0, Ordering::SeqCst);
            q.synchronize();
            alive.store(0, Ordering::SeqCst);
            reader.join().unwrap();
        });
    }

    /// Two grace periods in a row (A replaced by B, then B by C): a
    /// reader that read the generation's parity before the first advance
    /// but incremented late must still hold up the second one. This is
    /// why `synchronize` advances twice.
    #[test]
    fn loom_a_late_reader_holds_up_the_next_grace_period() {
        loom::model(|| {
            let q = Arc::new(Quiescence::new(1));
            let table = Arc::new(Cell::new(0));
            let alive = Arc::new([Cell::new(1), Cell::new(1), Cell::new(1)]);
            let reader = {
                let (q, table, alive) = (q.clone(), table.clone(), alive.clone());
                loom::thread::spawn(move || {
                    let _call = q.enter(0);
                    let obj = table.load(Ordering::SeqCst);
                    assert_eq!(alive[obj].load(Ordering::SeqCst), 1, "use after free");
                })
            };
            for next in 1..3 {
                table.store(next, Ordering::SeqCst);
                q.synchronize();
                alive[next - 1].store(0, Ordering::SeqCst);
            }
            reader.join().unwrap();
        });
    }
}
