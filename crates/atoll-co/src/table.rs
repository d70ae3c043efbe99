//! The local translation tables: per slot, one entry per object index,
//! each a tagged pointer (K42 §5.2.1).
//!
//! An entry is one of
//!
//! * empty (null): the next call misses and asks the root (K42's default
//!   object);
//! * a [`RepBox`] (tag bit clear): the rep for this slot, with the
//!   generation of the object it belongs to;
//! * a [`MediatorRep`] (tag bit set): a hot-swap is in progress.
//!
//! Ownership: an entry owns what it points to (a rep box made by
//! `Box::into_raw`, or one strong count of a mediator made by
//! `Arc::into_raw`, the swap holding the others).
//! Writers: a miss fills an empty entry by compare-and-swap while holding
//! the object's global entry for reading; destroy, evict and the swap's
//! phases replace entries while holding it for writing, and receive the
//! previous contents as an [`Owned`] that they must keep until the
//! domain's quiescence has elapsed (readers may still be using it).
//! Readers: [`LocalTables::load`] takes the caller's [`CallGuard`], so the
//! reference it returns cannot outlive the call that protects it.

use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Arc;

use crossbeam_utils::CachePadded;

use crate::mediator::MediatorRep;
use crate::quiescence::CallGuard;

const MEDIATOR_TAG: usize = 1;

/// A rep as installed in a local table.
pub struct RepBox<I: ?Sized> {
    pub generation: u32,
    pub rep: Arc<I>,
}

/// What an entry held, given back to the writer that replaced it.
pub enum Owned<I: ?Sized> {
    Empty,
    Rep(Box<RepBox<I>>),
    Mediator(Arc<MediatorRep<I>>),
}

/// An entry as a reader sees it.
pub enum Entry<'g, I: ?Sized> {
    Empty,
    Rep(&'g RepBox<I>),
    Mediated(&'g MediatorRep<I>),
}

/// One slot's entries, on cache lines of their own.
type SlotTable = CachePadded<Box<[AtomicPtr<()>]>>;

pub struct LocalTables<I: ?Sized> {
    capacity: usize,
    tables: Box<[SlotTable]>,
    _owns: std::marker::PhantomData<Owned<I>>,
}

impl<I: ?Sized> LocalTables<I> {
    pub fn new(slots: usize, capacity: usize) -> LocalTables<I> {
        let table = || -> Box<[AtomicPtr<()>]> {
            (0..capacity)
                .map(|_| AtomicPtr::new(std::ptr::null_mut()))
                .collect()
        };
        LocalTables {
            capacity,
            tables: (0..slots).map(|_| CachePadded::new(table())).collect(),
            _owns: std::marker::PhantomData,
        }
    }

    pub fn slots(&self) -> usize {
        self.tables.len()
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The entry of object `index` on `slot`, valid while `guard` is held.
    ///
    /// Hot path: one load (the entry) after the table's address.
    #[inline]
    pub fn load<'g>(&self, _guard: &'g CallGuard<'_>, slot: usize, index: usize) -> Entry<'g, I> {
        let p = self.tables[slot][index].load(Ordering::SeqCst);
        // SAFETY: a non-null entry points to a live RepBox or MediatorRep
        // (by its tag): writers free what they replace only after the
        // quiescence that `_guard` holds up (module docs), so the pointee
        // lives at least as long as the guard.
        unsafe { decode(p) }
    }

    /// Fill an empty entry; gives the box back if the entry was not empty.
    /// Caller holds the object's global entry for reading or writing.
    pub fn install_if_empty(
        &self,
        slot: usize,
        index: usize,
        rep: Box<RepBox<I>>,
    ) -> Result<(), Box<RepBox<I>>> {
        let p = Box::into_raw(rep).cast::<()>();
        match self.tables[slot][index].compare_exchange(
            std::ptr::null_mut(),
            p,
            Ordering::SeqCst,
            Ordering::SeqCst,
        ) {
            Ok(_) => Ok(()),
            // SAFETY: `p` came from Box::into_raw above and was not published.
            Err(_) => Err(unsafe { Box::from_raw(p.cast::<RepBox<I>>()) }),
        }
    }

    /// Replace an entry, returning what it held. Caller holds the object's
    /// global entry for writing and keeps the result until quiescence.
    pub fn replace(&self, slot: usize, index: usize, new: Owned<I>) -> Owned<I> {
        let p = encode(new);
        let old = self.tables[slot][index].swap(p, Ordering::SeqCst);
        // SAFETY: the entry owned `old` (module docs); swapping it out
        // transfers that ownership to us.
        unsafe { reclaim(old) }
    }

    /// The rep currently installed for `slot`, if any. Caller holds the
    /// object's global entry for writing, so the entry cannot change or be
    /// freed while we read it.
    pub fn peek_rep(&self, slot: usize, index: usize) -> Option<Arc<I>> {
        let p = self.tables[slot][index].load(Ordering::SeqCst);
        // SAFETY: entries change only under the global entry's lock, which
        // the caller holds for writing; the pointee is alive.
        match unsafe { decode::<I>(p) } {
            Entry::Rep(b) => Some(b.rep.clone()),
            _ => None,
        }
    }
}

fn encode<I: ?Sized>(o: Owned<I>) -> *mut () {
    match o {
        Owned::Empty => std::ptr::null_mut(),
        Owned::Rep(b) => Box::into_raw(b).cast(),
        Owned::Mediator(m) => Arc::into_raw(m)
            .cast_mut()
            .cast::<()>()
            .map_addr(|a| a | MEDIATOR_TAG),
    }
}

/// SAFETY: `p` is null or a live pointer made by `encode`; the result
/// borrows it for a lifetime the caller guarantees.
unsafe fn decode<'g, I: ?Sized>(p: *mut ()) -> Entry<'g, I> {
    if p.is_null() {
        Entry::Empty
    } else if p.addr() & MEDIATOR_TAG != 0 {
        let m = p.map_addr(|a| a & !MEDIATOR_TAG).cast::<MediatorRep<I>>();
        Entry::Mediated(unsafe { &*m })
    } else {
        Entry::Rep(unsafe { &*p.cast::<RepBox<I>>() })
    }
}

/// SAFETY: `p` is null or made by `encode`, and nothing else owns it.
unsafe fn reclaim<I: ?Sized>(p: *mut ()) -> Owned<I> {
    if p.is_null() {
        Owned::Empty
    } else if p.addr() & MEDIATOR_TAG != 0 {
        let m = p.map_addr(|a| a & !MEDIATOR_TAG).cast::<MediatorRep<I>>();
        Owned::Mediator(unsafe { Arc::from_raw(m) })
    } else {
        Owned::Rep(unsafe { Box::from_raw(p.cast::<RepBox<I>>()) })
    }
}

impl<I: ?Sized> Drop for LocalTables<I> {
    fn drop(&mut self) {
        for table in self.tables.iter() {
            for e in table.iter() {
                // SAFETY: dropping the tables means no reader is left; each
                // entry owns its pointee.
                drop(unsafe { reclaim::<I>(e.swap(std::ptr::null_mut(), Ordering::SeqCst)) });
            }
        }
    }
}
