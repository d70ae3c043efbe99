//! The mediator's per-slot reps and the state they share (K42 ch. 6,
//! Fig. 6.2).
//!
//! While a swap is in progress every local entry of the object points to
//! a [`MediatorRep`] instead of a rep. A call that reaches one passes its
//! slot's [`Gate`]: in the Forward phase it is counted and forwarded to the
//! old rep; in the Block phase a new call is held — it waits outside the
//! call (its quiescence guard dropped) on [`MediatorShared`] until the swap
//! completes or is abandoned, then starts over and finds whatever the
//! table holds by then. Calls made from inside a call are always forwarded
//! (the gate's *tracked* calls), so re-entrant calls cannot deadlock.

use std::sync::{Arc, Condvar, Mutex, OnceLock};

use crate::gate::Gate;
use crate::root::Root;

/// One slot's mediator.
pub struct MediatorRep<I: ?Sized> {
    pub generation: u32,
    pub slot: usize,
    pub gate: Gate,
    /// The old object's rep for this slot: the one cached in the table
    /// when the mediator was attached, or fetched from the old root on the
    /// first forwarded call.
    old_rep: OnceLock<Arc<I>>,
    old_root: Arc<dyn Root<I>>,
    pub shared: Arc<MediatorShared>,
}

impl<I: ?Sized> MediatorRep<I> {
    pub fn new(
        generation: u32,
        slot: usize,
        old_rep: Option<Arc<I>>,
        old_root: Arc<dyn Root<I>>,
        shared: Arc<MediatorShared>,
    ) -> MediatorRep<I> {
        let cell = OnceLock::new();
        if let Some(r) = old_rep {
            let _ = cell.set(r);
        }
        MediatorRep {
            generation,
            slot,
            gate: Gate::default(),
            old_rep: cell,
            old_root,
            shared,
        }
    }

    /// The old rep calls are forwarded to.
    #[inline]
    pub fn old_rep(&self) -> &Arc<I> {
        self.old_rep.get_or_init(|| self.old_root.rep(self.slot))
    }

    /// The old rep if any call used one on this slot.
    pub fn old_rep_if_made(&self) -> Option<Arc<I>> {
        self.old_rep.get().cloned()
    }
}

/// Where held calls wait for the end of the swap.
#[derive(Default)]
pub struct MediatorShared {
    released: Mutex<bool>,
    wake: Condvar,
}

impl MediatorShared {
    /// Block a held call until [`MediatorShared::release`].
    pub fn wait_released(&self) {
        let mut released = self.released.lock().unwrap_or_else(|p| p.into_inner());
        while !*released {
            released = self.wake.wait(released).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// The table no longer points to the mediator: let held calls retry.
    pub fn release(&self) {
        *self.released.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.wake.notify_all();
    }
}
