//! Destruction by quiescence: knowing when no call that might hold a
//! temporary reference to an object is still running.
//!
//! K42 (§5.4.3) counts, per processor, the threads started in each of two
//! generations; when the generation current at destroy time has no live
//! threads left anywhere, nothing can still hold a reference taken before.
//! atoll counts *calls*, per thread, in two generations — the scheme of
//! userspace RCU's "memb" flavour:
//!
//! * each thread has a [`Record`]: two counters on a cache line of their
//!   own, written only by that thread (a plain load and store, no locked
//!   instruction). A call reads the generation's parity, increments that
//!   counter ([`Quiescence::enter`]), and decrements it when it returns
//!   (dropping the [`CallGuard`]);
//! * [`Quiescence::synchronize`] advances the generation and waits until
//!   every registered thread's counter of the previous parity is zero —
//!   twice, because a call that read the parity just before the advance
//!   may increment the old counter after the first wait saw it empty (the
//!   second `loom` model below fails with one round).
//!
//! Why it is safe: a caller loads a translation entry *after* its
//! increment; the destroyer unpublishes the entry *before* it advances and
//! reads the counters. That is the store-buffering pattern, which needs a
//! full barrier on both sides. The reader's side is only a compiler
//! barrier: the writer issues `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`,
//! which makes every CPU running a thread of this process execute a full
//! barrier, so each reader behaves as if it had one at that point. Calls
//! pay nothing; `synchronize` pays two system calls. Where the kernel
//! refuses membarrier, both sides use `fence(SeqCst)` instead. The `loom`
//! models use the symmetric form (loom knows no membarrier).
//!
//! Not async-signal-safe: a call from a signal handler that interrupts
//! another call's increment of the same thread's counter would lose one
//! of the two updates. Nor may a thread-local destructor make calls after
//! the thread's record is gone (the call panics).
//!
//! The instance the domains use is process-wide ([`global`]), as K42's and
//! RCU's are: one generation for every object, so no object's busy callers
//! can starve another's destroyer by sharing its counters.

use std::sync::Arc;

use crossbeam_utils::CachePadded;

use crate::sync::{backoff, AtomicUsize, Ordering};

#[cfg(loom)]
use loom::sync::Mutex;
#[cfg(not(loom))]
use std::sync::Mutex;

/// One thread's call counters, in the two generations.
#[derive(Default)]
pub struct Record {
    counts: CachePadded<[AtomicUsize; 2]>,
}

impl Record {
    /// Calls of this thread in progress (it is inside a call if > 0).
    /// Only meaningful on the owning thread.
    #[inline]
    #[cfg_attr(loom, allow(dead_code))]
    pub fn depth(&self) -> usize {
        self.counts[0].load(Ordering::Relaxed) + self.counts[1].load(Ordering::Relaxed)
    }
}

pub struct Quiescence {
    generation: CachePadded<AtomicUsize>,
    readers: Mutex<Vec<Arc<Record>>>,
    /// Serialises [`Quiescence::synchronize`]; never taken by calls.
    waiter: Mutex<()>,
    /// membarrier is available: readers need only a compiler barrier.
    asymmetric: bool,
}

/// A call in progress; dropping it ends the call.
#[must_use = "the call ends when the guard is dropped"]
pub struct CallGuard<'a> {
    counter: &'a AtomicUsize,
}

impl Quiescence {
    pub fn new() -> Quiescence {
        Quiescence {
            generation: CachePadded::new(AtomicUsize::new(0)),
            readers: Mutex::new(Vec::new()),
            waiter: Mutex::new(()),
            asymmetric: barrier::register(),
        }
    }

    /// Readers use only a compiler barrier (the kernel has membarrier).
    #[cfg_attr(loom, allow(dead_code))]
    pub fn asymmetric(&self) -> bool {
        self.asymmetric
    }

    /// A record for the calling thread; calls pass it to `enter`.
    pub fn register(&self) -> Arc<Record> {
        let r = Arc::new(Record::default());
        self.lock_readers().push(r.clone());
        r
    }

    /// The thread of `record` is gone (it has no call in progress).
    #[cfg_attr(loom, allow(dead_code))]
    pub fn unregister(&self, record: &Arc<Record>) {
        self.lock_readers().retain(|r| !Arc::ptr_eq(r, record));
    }

    /// Begin a call of `record`'s thread (which must be the caller).
    ///
    /// Hot path: a load of the generation, a load and a store of the
    /// thread's own counter, and (with membarrier) no barrier instruction.
    #[inline]
    pub fn enter<'a>(&self, record: &'a Record) -> CallGuard<'a> {
        let parity = self.generation.load(Ordering::Relaxed) & 1;
        let counter = &record.counts[parity];
        // Only this thread writes its counters: no locked instruction.
        counter.store(counter.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        // The caller's load of the translation entry comes after this.
        barrier::reader(self.asymmetric);
        CallGuard { counter }
    }

    /// Wait until every call that began before this was called has ended.
    /// Must not be called from inside a call (it would wait for itself).
    pub fn synchronize(&self) {
        let _one_waiter = self.waiter.lock().unwrap_or_else(|p| p.into_inner());
        for _ in 0..2 {
            let old = self.generation.fetch_add(1, Ordering::SeqCst) & 1;
            // The caller's unpublish came before; the counters come after.
            barrier::writer(self.asymmetric);
            // A thread registering after this snapshot took the lock after
            // us, so it reads the new generation and the unpublished entry.
            let readers = self.lock_readers().clone();
            for r in &readers {
                let mut round = 0;
                while r.counts[old].load(Ordering::Acquire) != 0 {
                    backoff(&mut round);
                }
            }
        }
    }

    fn lock_readers(&self) -> impl std::ops::DerefMut<Target = Vec<Arc<Record>>> + '_ {
        self.readers.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Default for Quiescence {
    fn default() -> Self {
        Quiescence::new()
    }
}

impl Drop for CallGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        // Release: the call's reads of the object happen before a waiter
        // that sees the count drop frees it.
        let c = self.counter;
        c.store(c.load(Ordering::Relaxed) - 1, Ordering::Release);
    }
}

/// The asymmetric barrier pair (module docs) and its fallbacks.
mod barrier {
    #[cfg(not(loom))]
    use std::sync::atomic::{compiler_fence, fence, Ordering};

    /// Register for expedited membarrier; false if the kernel refuses.
    pub fn register() -> bool {
        #[cfg(loom)]
        {
            false
        }
        #[cfg(not(loom))]
        {
            use rustix::thread::{membarrier, MembarrierCommand};
            membarrier(MembarrierCommand::RegisterPrivateExpedited).is_ok()
        }
    }

    #[inline(always)]
    pub fn reader(asymmetric: bool) {
        #[cfg(loom)]
        {
            let _ = asymmetric;
            loom::sync::atomic::fence(loom::sync::atomic::Ordering::SeqCst);
        }
        #[cfg(not(loom))]
        if asymmetric {
            compiler_fence(Ordering::SeqCst);
        } else {
            fence(Ordering::SeqCst);
        }
    }

    pub fn writer(asymmetric: bool) {
        #[cfg(loom)]
        {
            let _ = asymmetric;
            loom::sync::atomic::fence(loom::sync::atomic::Ordering::SeqCst);
        }
        #[cfg(not(loom))]
        {
            use rustix::thread::{membarrier, MembarrierCommand};
            // After a successful registration this cannot fail; if it
            // did, the global command is slower but just as strong.
            let strong = asymmetric
                && (membarrier(MembarrierCommand::PrivateExpedited).is_ok()
                    || membarrier(MembarrierCommand::Global).is_ok());
            assert!(
                strong || !asymmetric,
                "membarrier failed after registration: readers are unprotected"
            );
            fence(Ordering::SeqCst);
        }
    }
}

/// The process-wide instance the domains use, and the calling thread's
/// record in it (registered on first use, unregistered when the thread
/// exits).
#[cfg(not(loom))]
pub mod global {
    use super::*;
    use std::sync::OnceLock;

    static GLOBAL: OnceLock<Quiescence> = OnceLock::new();

    pub fn quiescence() -> &'static Quiescence {
        GLOBAL.get_or_init(Quiescence::new)
    }

    struct ThreadRecord(Arc<Record>);

    impl Drop for ThreadRecord {
        fn drop(&mut self) {
            quiescence().unregister(&self.0);
        }
    }

    thread_local! {
        static RECORD: ThreadRecord = ThreadRecord(quiescence().register());
    }

    /// Run `f` with the calling thread's record.
    #[inline]
    pub fn with_record<R>(f: impl FnOnce(&Record) -> R) -> R {
        RECORD.with(|r| f(&r.0))
    }

    /// The calling thread is inside a call.
    pub fn inside_call() -> bool {
        RECORD.try_with(|r| r.0.depth() > 0).unwrap_or(false)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    #[test]
    fn synchronize_returns_at_once_when_no_call_runs() {
        let q = Quiescence::new();
        let _idle = q.register();
        q.synchronize();
        q.synchronize();
    }

    #[test]
    fn synchronize_waits_for_a_call_that_began_before_it() {
        let q = Arc::new(Quiescence::new());
        let guard_taken = Arc::new(AtomicBool::new(false));
        let call_ended = Arc::new(AtomicBool::new(false));
        let caller = {
            let (q, taken, ended) = (q.clone(), guard_taken.clone(), call_ended.clone());
            std::thread::spawn(move || {
                let record = q.register();
                let g = q.enter(&record);
                taken.store(true, Ordering::SeqCst);
                std::thread::sleep(std::time::Duration::from_millis(50));
                ended.store(true, Ordering::SeqCst);
                drop(g);
                q.unregister(&record);
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
    fn nested_calls_count_as_depth_and_unwind_to_zero() {
        let q = Quiescence::new();
        let r = q.register();
        let outer = q.enter(&r);
        q.advance_generation_only();
        let inner = q.enter(&r);
        assert_eq!(r.depth(), 2);
        drop(inner);
        drop(outer);
        assert_eq!(r.depth(), 0);
        q.synchronize();
    }

    impl Quiescence {
        /// Advance the generation without waiting (test helper: a nested
        /// call may land in the other generation's counter).
        fn advance_generation_only(&self) {
            self.generation.fetch_add(1, Ordering::SeqCst);
        }
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
            let q = Arc::new(Quiescence::new());
            let record = q.register();
            let published = Arc::new(Cell::new(1));
            let alive = Arc::new(Cell::new(1));
            let reader = {
                let (q, published, alive) = (q.clone(), published.clone(), alive.clone());
                loom::thread::spawn(move || {
                    let _call = q.enter(&record);
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
            let q = Arc::new(Quiescence::new());
            let record = q.register();
            let table = Arc::new(Cell::new(0));
            let alive = Arc::new([Cell::new(1), Cell::new(1), Cell::new(1)]);
            let reader = {
                let (q, table, alive) = (q.clone(), table.clone(), alive.clone());
                loom::thread::spawn(move || {
                    let _call = q.enter(&record);
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
