//! Clustered objects (K42, Appavoo's thesis ch. 3.2, 5 and 6): one object
//! behind one identifier, made of a **root** (global state, management)
//! and **representatives** ("reps") per slot — a core, a cluster of cores,
//! or a file server — so that the common operations touch only the caller's
//! own rep and share nothing.
//!
//! # How it works
//!
//! A [`Domain`] holds the translation tables of a family of objects with
//! the same interface `I` (a trait object type such as `dyn Counter`): a
//! global table of roots and, per slot, a local table of reps at the same
//! index. A call through a [`CoRef`] loads the calling slot's entry (one
//! load beyond the table's address) and calls the rep. An empty entry is a
//! *miss*: the root is asked for this slot's rep ([`Root::rep`]), which it
//! makes on first use, and the call is re-issued; the local tables are only
//! a cache of what the root returned.
//!
//! Objects are destroyed by *quiescence*: the entries are emptied, then
//! the domain waits until every call that could still hold a reference has
//! returned (per-thread call counts in two generations, K42 §5.4's
//! generation scheme, made barrier-free for callers with `membarrier`)
//! before the root and reps are dropped and the identifier is reused. References carry a generation, so a stale one
//! fails with [`CoError::Destroyed`] instead of reaching a new object.
//!
//! Objects can be **hot-swapped** for another implementation of the same
//! interface while calls run ([`Domain::swap`], K42 ch. 6): a mediator
//! takes over the entries and forwards counted calls (*Forward*), then
//! holds new calls while the tracked ones finish (*Block*), the two roots
//! agree on a state format and move the state (*Transfer*), and the new
//! object is installed and the held calls released (*Complete*).
//!
//! Where reps must not share memory — in different file servers, as
//! atoll's multikernel design requires — the root↔rep traffic and the swap
//! phases are messages: see [`remote`].
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//! use atoll_co::counter::{CentralCounter, Counter, DistributedCounter};
//! use atoll_co::{Domain, DomainConfig};
//!
//! let domain: Domain<dyn Counter> = Domain::new(DomainConfig { slots: 4, capacity: 16 });
//! // Start centralised: every slot shares one cell.
//! let hits = domain.create(Arc::new(CentralCounter::default())).unwrap();
//! let workers: Vec<_> = (0..4)
//!     .map(|slot| {
//!         let hits = hits.clone();
//!         std::thread::spawn(move || {
//!             atoll_co::set_slot(slot);
//!             for _ in 0..1000 {
//!                 hits.call(|c| c.inc()).unwrap();
//!             }
//!         })
//!     })
//!     .collect();
//! // It got hot: swap to one padded cell per slot, while the calls run.
//! let report = domain.swap(&hits, Arc::new(DistributedCounter::new(4, 1))).unwrap();
//! for w in workers {
//!     w.join().unwrap();
//! }
//! assert_eq!(hits.call(|c| c.value()).unwrap(), 4000);
//! assert_eq!(report.format, Some(atoll_co::counter::TOTAL));
//! domain.destroy(&hits).unwrap();
//! assert!(hits.call(|c| c.value()).is_err());
//! ```
//!
//! # Uses in atoll (planned)
//!
//! * **Adaptive directories** (Hare's open problem 6.1.2): a directory
//!   object whose root lives with its home server starts centralised (one
//!   rep for every slot) and is swapped to a distributed implementation
//!   (a rep per server, entries partitioned by name) when it gets hot; the
//!   transfer format is its entry list.
//! * **Buffer-cache block manager**: K42's Global Page Manager — per-server
//!   reps with free lists of their own and an overflow pool in the root,
//!   so allocation stays local and lending between servers is the root's
//!   job. The reps' state never leaves their server: the [`remote`]
//!   variant.
//! * **Elastic server counts** (Hare 6.1.1): the placement policy as a
//!   clustered object, swapped for one with a different server count; the
//!   swap's Block phase holds the placement calls made while it moves.
//! * **Per-core statistics**: [`counter::DistributedCounter`].
//!
//! # Layers
//!
//! * `domain` — [`Domain`], [`CoRef`]: create, call (fast path and miss),
//!   evict, destroy.
//! * `swap` — [`Mediation`], [`Domain::swap`]: the four phases.
//! * `root` — [`Root`], [`RepSet`], [`negotiate`]: what implementations
//!   provide.
//! * `table` — the local translation tables (tagged entries; the only
//!   `unsafe`).
//! * `mediator`, `gate` — the mediator's per-slot reps and their lock-free
//!   admission gate (loom-checked).
//! * `quiescence` — per-thread two-generation call counts (loom-checked).
//! * `slot` — which slot the calling thread uses.
//! * `counter` — clustered counters (the thesis's example; per-core
//!   statistics).
//! * `remote` — the message-passing variant for reps in separate servers.
//! * `bench` — the thesis's measurements, run by `atoll bench co`.
//!
//! Model-check the lock-free parts with
//! `RUSTFLAGS="--cfg loom" cargo test -p atoll-co --release --lib loom`.

mod gate;
mod quiescence;
mod sync;

#[cfg(not(loom))]
pub mod bench;
#[cfg(not(loom))]
pub mod counter;
#[cfg(not(loom))]
mod domain;
#[cfg(not(loom))]
mod mediator;
#[cfg(not(loom))]
pub mod remote;
#[cfg(not(loom))]
mod root;
#[cfg(not(loom))]
mod slot;
#[cfg(not(loom))]
mod swap;
#[cfg(not(loom))]
mod table;

#[cfg(not(loom))]
pub use domain::{CoError, CoRef, Domain, DomainConfig};
#[cfg(not(loom))]
pub use root::{negotiate, negotiate_by, Format, RepSet, Root, State, TransferError};
#[cfg(not(loom))]
pub use slot::{allowed_cpus, current_slot, pin_to_cpu, set_slot};
#[cfg(not(loom))]
pub use swap::{Mediation, SwapError, SwapReport};

/// Calls pay no barrier instruction for quiescence: the kernel accepted
/// `membarrier` (otherwise each call executes a full fence).
#[cfg(not(loom))]
pub fn calls_are_barrier_free() -> bool {
    quiescence::global::quiescence().asymmetric()
}
#[cfg(all(test, not(loom)))]
mod tests;
