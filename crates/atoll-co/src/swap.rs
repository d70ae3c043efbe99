//! Hot-swapping (K42 ch. 6): replace a live clustered object by another
//! implementation of the same interface, transparently to its callers.
//!
//! The four phases, as implemented here:
//!
//! 1. **Forward** ([`Domain::attach`]): under the global entry's write
//!    lock, the state becomes `Mediated` and every slot's local entry is
//!    replaced by a [`MediatorRep`] (K42 resets the entries to the default
//!    object from a worker thread per processor; the table is shared here,
//!    so the swapping thread writes them all). New calls are counted in the
//!    slot's gate and forwarded to the old rep. Then [`Mediation::swap_to`]
//!    waits for quiescence: calls that began before the attach, untracked
//!    by any gate, have all ended.
//! 2. **Block**: every gate turns new calls away; calls already inside a
//!    call (tracked) still pass. Wait until every gate has drained: no call
//!    runs on the old object.
//! 3. **Transfer**: [`negotiate`] the best format from the two roots'
//!    prioritized lists, export from the old root, import into the new.
//!    K42 moves state per rep in parallel worker threads; here the root
//!    exports the whole object (it can walk its reps), which keeps the
//!    interface to one pair of calls. If no format is common or a side
//!    fails, the swap is abandoned: the old object goes back in place as
//!    by [`Mediation::detach`].
//! 4. **Complete**: the global entry takes the new root and each slot
//!    that had an old rep gets the new root's rep for it (the others miss
//!    lazily); held calls are released and retry on the new object; after
//!    quiescence the mediators, the old reps and the old root are dropped.
//!
//! No phase takes a lock on the call path: the gates are per slot, and the
//! held calls wait on the mediator's condition variable, outside their call.

use std::sync::{Arc, MutexGuard};
use std::time::{Duration, Instant};

use crate::domain::{inside_call, lock, CoError, CoRef, Domain, GlobalState};
use crate::mediator::{MediatorRep, MediatorShared};
use crate::root::{negotiate, Format, Root, TransferError};
use crate::sync::backoff;
use crate::table::{Owned, RepBox};

/// Why a swap did not happen. In every case the old object is in place
/// and every call has been or will be applied to it.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SwapError {
    #[error(transparent)]
    Object(#[from] CoError),
    #[error(transparent)]
    Transfer(#[from] TransferError),
}

/// How long each phase took, and what was negotiated.
#[derive(Clone, Debug, Default)]
pub struct SwapReport {
    pub forward: Duration,
    pub block: Duration,
    pub transfer: Duration,
    pub complete: Duration,
    pub format: Option<Format>,
    /// Slots whose calls reached the old object (through its table entry
    /// or the mediator); they get the new root's rep at once, the others
    /// miss lazily.
    pub forwarded_slots: usize,
}

impl SwapReport {
    pub fn total(&self) -> Duration {
        self.forward + self.block + self.transfer + self.complete
    }
}

/// A mediator interposed in front of an object (Forward phase). Dropping
/// it without [`Mediation::swap_to`] detaches it.
pub struct Mediation<'d, I: ?Sized + Send + Sync + 'static> {
    domain: &'d Domain<I>,
    obj: CoRef<I>,
    old_root: Arc<dyn Root<I>>,
    shared: Arc<MediatorShared>,
    /// The mediator of each slot (the entries hold the other count).
    mediators: Vec<Arc<MediatorRep<I>>>,
    /// What the entries held before the mediators (freed after quiescence).
    replaced: Vec<Owned<I>>,
    done: bool,
    _one: MutexGuard<'d, ()>,
}

impl<I: ?Sized + Send + Sync + 'static> Domain<I> {
    /// Interpose a mediator in front of `obj`: from now on its calls go
    /// through per-slot gates to the old object. No call is blocked.
    ///
    /// The mediation holds the domain's management lock until it is
    /// detached, swapped or dropped: the same thread must not destroy,
    /// evict or attach in the meantime.
    pub fn attach(&self, obj: &CoRef<I>) -> Result<Mediation<'_, I>, CoError> {
        if inside_call() {
            return Err(CoError::InsideCall);
        }
        let one = lock(&self.inner.management);
        let inner = &self.inner;
        let mut g = inner.write(obj.index);
        let old_root = match &g.state {
            GlobalState::Root(r) if g.generation == obj.generation => r.clone(),
            _ => return Err(CoError::Destroyed),
        };
        let shared = Arc::new(MediatorShared::default());
        let index = obj.index as usize;
        let mut mediators = Vec::with_capacity(inner.locals.slots());
        let mut replaced = Vec::with_capacity(inner.locals.slots());
        for slot in 0..inner.locals.slots() {
            let m = Arc::new(MediatorRep::new(
                g.generation,
                slot,
                inner.locals.peek_rep(slot, index),
                old_root.clone(),
                shared.clone(),
            ));
            replaced.push(
                inner
                    .locals
                    .replace(slot, index, Owned::Mediator(m.clone())),
            );
            mediators.push(m);
        }
        g.state = GlobalState::Mediated;
        Ok(Mediation {
            domain: self,
            obj: obj.clone(),
            old_root,
            shared,
            mediators,
            replaced,
            done: false,
            _one: one,
        })
    }

    /// Replace `obj`'s implementation by `new_root`, all four phases.
    pub fn swap(
        &self,
        obj: &CoRef<I>,
        new_root: Arc<dyn Root<I>>,
    ) -> Result<SwapReport, SwapError> {
        let t = Instant::now();
        let m = self.attach(obj)?;
        let attach = t.elapsed();
        let mut report = m.swap_to(new_root)?;
        report.forward += attach;
        Ok(report)
    }
}

impl<I: ?Sized + Send + Sync + 'static> Mediation<'_, I> {
    /// Run the Forward wait, Block, Transfer and Complete phases.
    pub fn swap_to(mut self, new_root: Arc<dyn Root<I>>) -> Result<SwapReport, SwapError> {
        let mut report = SwapReport::default();

        let t = Instant::now();
        self.wait_for_earlier_calls();
        report.forward = t.elapsed();

        let t = Instant::now();
        self.block();
        self.wait_drained();
        report.forwarded_slots = self
            .mediators
            .iter()
            .filter(|m| m.old_rep_if_made().is_some())
            .count();
        report.block = t.elapsed();

        let t = Instant::now();
        let moved = transfer(&*self.old_root, &*new_root);
        report.transfer = t.elapsed();
        report.format = match moved {
            Ok(f) => f,
            Err(e) => {
                self.finish(self.old_root.clone());
                return Err(e.into());
            }
        };

        let t = Instant::now();
        self.finish(new_root);
        report.complete = t.elapsed();
        Ok(report)
    }

    /// Forward phase: wait until the calls that began before the attach
    /// (which no gate counted) have returned. Calls made since are counted
    /// and forwarded.
    pub fn wait_for_earlier_calls(&self) {
        self.domain.inner.quiescence.synchronize();
    }

    /// Block phase, first half: from now on new calls are held; calls made
    /// from inside a call are still forwarded.
    pub fn block(&self) {
        for m in &self.mediators {
            m.gate.block();
        }
    }

    /// Block phase, second half: wait until no forwarded call runs. Only
    /// meaningful after [`Mediation::wait_for_earlier_calls`] and
    /// [`Mediation::block`]; then no call runs on the old object.
    pub fn wait_drained(&self) {
        for m in &self.mediators {
            let mut round = 0;
            while !m.gate.drained() {
                backoff(&mut round);
            }
        }
    }

    /// Take the mediator out again, leaving the old object in place
    /// (K42's detach).
    pub fn detach(mut self) {
        self.finish(self.old_root.clone());
    }

    /// Calls forwarded through the mediators and still running.
    pub fn in_flight(&self) -> usize {
        self.mediators.iter().map(|m| m.gate.in_flight()).sum()
    }

    /// Install `root` (new or old), give each slot that had a rep under
    /// the mediator the root's rep for it, release held calls, and free
    /// the mediators after quiescence.
    fn finish(&mut self, root: Arc<dyn Root<I>>) {
        let inner = &self.domain.inner;
        let index = self.obj.index as usize;
        let used: Vec<bool> = self
            .mediators
            .iter()
            .map(|m| m.old_rep_if_made().is_some())
            .collect();
        let mut g = inner.write(self.obj.index);
        let generation = g.generation;
        let mut retired = Vec::with_capacity(used.len());
        for (slot, used) in used.into_iter().enumerate() {
            let new = if used {
                Owned::Rep(Box::new(RepBox {
                    generation,
                    rep: root.rep(slot),
                }))
            } else {
                Owned::Empty
            };
            retired.push(inner.locals.replace(slot, index, new));
        }
        let old = std::mem::replace(&mut g.state, GlobalState::Root(root));
        drop(g);
        self.shared.release();
        self.done = true;
        inner.quiescence.synchronize();
        drop(retired);
        drop(old);
        self.replaced.clear();
        self.mediators.clear();
    }
}

impl<I: ?Sized + Send + Sync + 'static> Drop for Mediation<'_, I> {
    fn drop(&mut self) {
        if !self.done {
            self.finish(self.old_root.clone());
        }
    }
}

/// Transfer phase: negotiate, export, import.
fn transfer<I: ?Sized>(
    old: &dyn Root<I>,
    new: &dyn Root<I>,
) -> Result<Option<Format>, TransferError> {
    let (exports, imports) = (old.export_formats(), new.import_formats());
    if exports.is_empty() && imports.is_empty() {
        // Stateless objects (all state outside): nothing to move.
        return Ok(None);
    }
    let format = negotiate(&exports, &imports).ok_or(TransferError::NoCommonFormat)?;
    let state = old
        .export(format)
        .ok_or(TransferError::ExportFailed(format))?;
    new.import(format, state)?;
    Ok(Some(format))
}
