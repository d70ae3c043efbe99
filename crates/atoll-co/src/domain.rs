//! A domain: the translation tables of one family of clustered objects
//! sharing an interface `I`, and the management calls
//! (create, destroy, evict). Calls go through [`CoRef::call`].
//!
//! Life cycle of an object index (the global entry's `state`):
//!
//! ```text
//! Free ──create──▶ Root(r) ──attach──▶ Mediated ──complete──▶ Root(new)
//!   ▲                 │                      └──────detach/abort──▶ Root(old)
//!   └──quiescence──destroy (generation += 1)
//! ```
//!
//! Locking, listed once: each global entry's `RwLock` is held for reading
//! by misses and for writing by whoever replaces local entries (destroy,
//! evict, the swap's phases), so local entries of one object change only
//! under it. `management` serialises destroy and swaps of the whole domain
//! (swaps wait for quiescence, and one swap at a time keeps a held call of
//! one swap from holding up another's wait). Calls take neither lock on
//! the fast path.
//!
//! Quiescence is process-wide, as K42's and RCU's: destroy, evict and swap
//! wait for every clustered-object call in flight in the process. Calls
//! that may block for long (waiting for I/O or another server) hold up
//! every destroyer and swapper meanwhile; make such waits outside calls.

use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::gate::Admission;
use crate::quiescence::{global, Quiescence, Record};
use crate::root::Root;
use crate::slot::current_slot;
use crate::table::{Entry, LocalTables, Owned, RepBox};

/// Errors of calls and management.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CoError {
    #[error("the clustered object was destroyed")]
    Destroyed,
    #[error("the domain's table is full ({0} objects)")]
    TableFull(usize),
    #[error("management calls cannot be made from inside a call (they wait for it to end)")]
    InsideCall,
}

/// Sizes of a domain's tables.
#[derive(Clone, Copy, Debug)]
pub struct DomainConfig {
    /// Local tables (cores, clusters or servers); calling threads' slots
    /// are taken modulo this.
    pub slots: usize,
    /// Most live objects at once.
    pub capacity: usize,
}

impl Default for DomainConfig {
    fn default() -> Self {
        DomainConfig {
            slots: std::thread::available_parallelism().map_or(1, |n| n.get()),
            capacity: 1024,
        }
    }
}

pub(crate) enum GlobalState<I: ?Sized> {
    Free,
    Root(Arc<dyn Root<I>>),
    /// A swap is in progress; the mediation holds the old root.
    Mediated,
}

pub(crate) struct Global<I: ?Sized> {
    pub generation: u32,
    pub state: GlobalState<I>,
}

pub(crate) struct Inner<I: ?Sized> {
    /// The process-wide quiescence (see `quiescence`).
    pub quiescence: &'static Quiescence,
    pub locals: LocalTables<I>,
    pub globals: Box<[RwLock<Global<I>>]>,
    free: Mutex<Vec<u32>>,
    pub management: Mutex<()>,
}

/// The translation tables of a family of clustered objects.
pub struct Domain<I: ?Sized + 'static> {
    pub(crate) inner: Arc<Inner<I>>,
}

/// A reference to a clustered object (K42's `CORef`): an index into the
/// translation tables and the generation it was created in. Clone it
/// freely; after destruction its calls fail with [`CoError::Destroyed`],
/// even if the index has been recycled.
pub struct CoRef<I: ?Sized + 'static> {
    pub(crate) inner: Arc<Inner<I>>,
    pub(crate) index: u32,
    pub(crate) generation: u32,
}

impl<I: ?Sized> Clone for CoRef<I> {
    fn clone(&self) -> Self {
        CoRef {
            inner: self.inner.clone(),
            index: self.index,
            generation: self.generation,
        }
    }
}

/// The thread is inside a clustered-object call (its calls in progress
/// are counted in its quiescence record): a call made now is *tracked*,
/// and management calls, which wait for calls to end, are refused.
pub(crate) fn inside_call() -> bool {
    global::inside_call()
}

/// Leaves a mediator's gate when a forwarded call returns (or panics).
struct Forwarded<'a>(&'a crate::gate::Gate);

impl Drop for Forwarded<'_> {
    fn drop(&mut self) {
        self.0.leave();
    }
}

impl<I: ?Sized + Send + Sync + 'static> Domain<I> {
    pub fn new(config: DomainConfig) -> Domain<I> {
        let slots = config.slots.max(1);
        let capacity = config.capacity.clamp(1, u32::MAX as usize);
        let globals = (0..capacity)
            .map(|_| {
                RwLock::new(Global {
                    generation: 0,
                    state: GlobalState::Free,
                })
            })
            .collect();
        Domain {
            inner: Arc::new(Inner {
                quiescence: global::quiescence(),
                locals: LocalTables::new(slots, capacity),
                globals,
                free: Mutex::new((0..capacity as u32).rev().collect()),
                management: Mutex::new(()),
            }),
        }
    }

    pub fn slots(&self) -> usize {
        self.inner.locals.slots()
    }

    /// Install `root` under a fresh identifier. No rep exists yet: each
    /// slot's first call misses and asks the root.
    pub fn create(&self, root: Arc<dyn Root<I>>) -> Result<CoRef<I>, CoError> {
        let index = lock(&self.inner.free)
            .pop()
            .ok_or(CoError::TableFull(self.inner.locals.capacity()))?;
        let mut g = self.inner.write(index);
        g.state = GlobalState::Root(root);
        Ok(CoRef {
            inner: self.inner.clone(),
            index,
            generation: g.generation,
        })
    }

    /// Destroy the object: unpublish it from every table, wait for the
    /// calls that may still use it (quiescence, K42 §5.4), drop the root
    /// and reps, and only then recycle the identifier.
    pub fn destroy(&self, obj: &CoRef<I>) -> Result<(), CoError> {
        if inside_call() {
            return Err(CoError::InsideCall);
        }
        let _one = lock(&self.inner.management);
        let mut retired = Vec::new();
        {
            let mut g = self.inner.write(obj.index);
            if g.generation != obj.generation || matches!(g.state, GlobalState::Free) {
                return Err(CoError::Destroyed);
            }
            retired.push(std::mem::replace(&mut g.state, GlobalState::Free));
            g.generation = g.generation.wrapping_add(1);
            let owned = self.inner.clear_local_entries(obj.index as usize);
            drop(g);
            self.inner.quiescence.synchronize();
            drop(owned);
        }
        drop(retired);
        lock(&self.inner.free).push(obj.index);
        Ok(())
    }
}

impl<I: ?Sized> Inner<I> {
    pub(crate) fn write(&self, index: u32) -> RwLockWriteGuard<'_, Global<I>> {
        self.globals[index as usize]
            .write()
            .unwrap_or_else(|p| p.into_inner())
    }

    fn read(&self, index: u32) -> RwLockReadGuard<'_, Global<I>> {
        self.globals[index as usize]
            .read()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Empty every slot's entry of `index`; caller holds its global entry
    /// for writing and frees the result after quiescence.
    pub(crate) fn clear_local_entries(&self, index: usize) -> Vec<Owned<I>> {
        (0..self.locals.slots())
            .map(|s| self.locals.replace(s, index, Owned::Empty))
            .collect()
    }
}

impl<I: ?Sized + 'static> CoRef<I> {
    /// Call `f` on the calling slot's rep.
    ///
    /// Hot path: the thread's slot and quiescence record (thread-local),
    /// an unlocked increment of the record's counter, one load of the
    /// local entry, the generation check, then `f`. A miss (no rep yet
    /// on this slot) asks the root and retries; a mediator forwards or
    /// holds the call (K42 ch. 6).
    #[inline]
    pub fn call<R>(&self, f: impl FnOnce(&I) -> R) -> Result<R, CoError> {
        global::with_record(|record| self.call_counted(record, f))
    }

    #[inline]
    fn call_counted<R>(&self, record: &Record, f: impl FnOnce(&I) -> R) -> Result<R, CoError> {
        let inner = &*self.inner;
        let slots = inner.locals.slots();
        let mut slot = current_slot();
        if slot >= slots {
            slot %= slots;
        }
        let index = self.index as usize;
        let mut f = Some(f);
        loop {
            let nested = record.depth() > 0;
            let guard = inner.quiescence.enter(record);
            match inner.locals.load(&guard, slot, index) {
                Entry::Rep(b) if b.generation == self.generation => {
                    return Ok((f.take().expect("called once"))(&b.rep));
                }
                Entry::Mediated(m) if m.generation == self.generation => {
                    match m.gate.admit(nested) {
                        Admission::Forwarded => {
                            let _leave = Forwarded(&m.gate);
                            return Ok((f.take().expect("called once"))(m.old_rep()));
                        }
                        Admission::Held => {
                            // Wait outside the call, so no quiescence
                            // waits for us, then start over.
                            let shared = m.shared.clone();
                            drop(guard);
                            shared.wait_released();
                        }
                    }
                }
                _ => {
                    drop(guard);
                    self.miss(slot)?;
                }
            }
        }
    }

    /// The miss handler (K42 §5.2.1): ask the root for this slot's rep and
    /// install it; the caller retries the call.
    #[cold]
    fn miss(&self, slot: usize) -> Result<(), CoError> {
        let g = self.inner.read(self.index);
        if g.generation != self.generation {
            return Err(CoError::Destroyed);
        }
        match &g.state {
            GlobalState::Free => Err(CoError::Destroyed),
            GlobalState::Root(root) => {
                let rep = Box::new(RepBox {
                    generation: self.generation,
                    rep: root.rep(slot),
                });
                // Another thread of the same slot may have won; its rep is
                // the root's same rep for this slot, so ours is dropped.
                let _ = self
                    .inner
                    .locals
                    .install_if_empty(slot, self.index as usize, rep);
                Ok(())
            }
            // Every entry holds the mediator while the state says so (the
            // swap installs them under the write lock); retrying finds it.
            GlobalState::Mediated => Ok(()),
        }
    }

    /// Forget `slot`'s cached rep (the next call there misses). The rep
    /// itself stays with the root.
    pub fn evict(&self, slot: usize) -> Result<(), CoError> {
        if inside_call() {
            return Err(CoError::InsideCall);
        }
        let slot = slot % self.inner.locals.slots();
        let _one = lock(&self.inner.management);
        let g = self.inner.write(self.index);
        if g.generation != self.generation || !matches!(g.state, GlobalState::Root(_)) {
            return Err(CoError::Destroyed);
        }
        let old = self
            .inner
            .locals
            .replace(slot, self.index as usize, Owned::Empty);
        drop(g);
        self.inner.quiescence.synchronize();
        drop(old);
        Ok(())
    }

    /// The identifier's index (for diagnostics).
    pub fn index(&self) -> u32 {
        self.index
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
