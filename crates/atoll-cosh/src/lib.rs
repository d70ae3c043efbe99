//! Cosh's coherence-oblivious sharing (Baumann et al., "Cosh: clear OS
//! data sharing in an incoherent world", §3–4) for Linux processes: bulk
//! data handed between protection domains by explicit **transfers** whose
//! meaning does not depend on whether the memory is shared.
//!
//! # How it works
//!
//! A domain holds **aggregates**: ordered byte ranges over page-aligned
//! **buffers** (here: memfd-backed blocks), with one **rights** value for
//! the whole — none, read-only or read/write. Aggregates are cut and
//! joined locally ([`Cosh::select`], [`Cosh::concat`]) without touching
//! the bytes, reference-counted ([`Cosh::incref`], [`Cosh::decref`]) and
//! read by iterating over their ranges ([`Cosh::iter`]).
//!
//! A **transfer** names an aggregate, a destination, a [`Mode`] and a
//! [`Strength`] (Cosh §3.2, Table 1): *move* needs read/write and leaves
//! the sender nothing; *share* needs read and leaves everyone read-only;
//! *copy* leaves the sender as it was and gives the receiver a read/write
//! copy. Rights only go down, and data once shared stays read-only in every
//! domain until freed. Because of that, **implementing any transfer as a
//! copy is always correct**, and sender and receiver cannot tell whether
//! the bytes were remapped or copied — which lets the implementation remap
//! long chunks (the memfd's descriptor travels, the receiver maps it) and
//! copy short ones (below [`Config::remap_threshold`]), and copy whatever
//! a related aggregate still holds with conflicting rights (Cosh §3.4).
//!
//! A **strong** transfer is enforced by the kernel (Cosh §3.3): a share
//! seals the memfd with `F_SEAL_WRITE` after dropping every mapping of it,
//! and everyone maps it afresh read-only, so a receiver that writes to
//! shared data takes a SIGSEGV and `write(2)` on the descriptor fails with
//! `EPERM`; a move unmaps the sender. A **weak** transfer is a hint
//! between trusting peers and may skip the downgrade: after a weak share
//! the sender keeps its writable mapping and the receiver's read-only
//! mapping can be made writable with `mprotect` — both can still write,
//! and are trusted not to.
//!
//! Between processes, a transfer becomes a [`Parcel`]: a small
//! serialisable [`Ticket`] that names the aggregate inside an ordinary
//! message, the blocks' descriptors (`SCM_RIGHTS`) and the copied bytes —
//! [`Cosh::attach_transfer`], [`send_parcel`], [`recv_parcel`],
//! [`Cosh::attach_recv`]. Within one process, several domains (each with
//! mappings of its own) use [`Cosh::transfer`] and [`Cosh::receive`].
//!
//! The [`BlockManager`] under it all owns the pool, hands out blocks,
//! maps them into domains and counts them ([`Stats`], for `atoll status`).
//!
//! Processes of one instance can instead share one block [`Pool`] (Cosh
//! §4's single physical pool): [`Cosh::with_pool`] allocates every block
//! there, and a transfer names blocks by pool offset ([`PoolTicket`],
//! [`Cosh::attach_transfer_pooled`], [`Cosh::send_pooled`],
//! [`Cosh::recv_pooled`]), carried by any channel — the benchmark's is a
//! polled shared-memory one ([`chan`]). No descriptor travels; the pool's
//! header decides what a ticket may claim.
//!
//! # Example
//!
//! ```
//! use atoll_cosh::{Config, Cosh, Mode, Rights, Strength};
//!
//! let mut cosh = Cosh::new(Config { remap_threshold: 0, ..Config::default() });
//! let (fs, app) = (cosh.domain(), cosh.domain());
//! let file = cosh.alloc(fs, 8192).unwrap();
//! cosh.write(file, 0, b"hello, world").unwrap();
//! // A read: the file system shares a range of the file (Cosh §5).
//! let range = cosh.select(file, 7, 5).unwrap();
//! cosh.transfer(range, app, Mode::Share, Strength::Strong).unwrap();
//! let got = cosh.receive(app, fs).unwrap().expect("a transfer waits");
//! assert_eq!(cosh.to_vec(got.agg).unwrap(), b"world");
//! assert_eq!(cosh.rights(got.agg).unwrap(), Rights::Ro);
//! // `file` still held the block read/write, so the range was copied
//! // rather than sealed (Cosh §3.4): the file system may still write.
//! cosh.write(file, 7, b"WORLD").unwrap();
//! assert_eq!(cosh.to_vec(got.agg).unwrap(), b"world");
//! // Without other writers the block itself is shared: sealed, read-only.
//! cosh.decref(range).unwrap();
//! cosh.transfer(file, app, Mode::Share, Strength::Strong).unwrap();
//! let whole = cosh.receive(app, fs).unwrap().unwrap();
//! assert_eq!(&cosh.to_vec(whole.agg).unwrap()[..12], b"hello, WORLD");
//! assert!(cosh.write(file, 0, b"x").is_err(), "the sender kept read-only");
//! assert_eq!(cosh.stats().shared_blocks, 1);
//! cosh.audit().unwrap();
//! ```
//!
//! # Layers
//!
//! * `domain` — [`Cosh`]: domains, aggregates, transfer and receive (Cosh's
//!   client library).
//! * `ticket` — [`Ticket`], [`Parcel`]: a transfer in flight, and its wire
//!   format between processes.
//! * `block` — [`BlockManager`]: blocks, mappings, seals, [`Stats`].
//! * `pool` — [`Pool`]: the block pool shared between processes, its
//!   allocator and who holds which block.
//! * `chan` — a polled shared-memory channel for tickets.
//! * `rights` — [`Rights`], [`Mode`], [`Strength`]: Table 1.
//! * `sys` — memfds, seals, mappings, descriptor passing, `fork`, the TSC:
//!   the crate's only `unsafe`.
//! * `bench` — the measurements of Cosh §6, run by `atoll bench transfer`.
//!
//! A [`Cosh`] is used by one thread at a time (`&mut self`). Between
//! processes, the socket path is ordered by the kernel (the socket, the
//! seals, the mappings); the pool's header and the polled channel are
//! protocols of atomics in shared memory (a spin lock around allocation,
//! compare-and-swap claims, a publication flag with a futex), tested
//! between forked processes (`tests/pool.rs`, the benchmark's checks) but
//! not yet under `loom`.
//!
//! Where this departs from Cosh: blocks are one memfd per allocation
//! rather than fixed 16 KiB blocks (see `block`); relatedness is by shared
//! blocks rather than by how aggregates were made; the block manager is a
//! library in each process, not a trusted service — so a strong move
//! protects the receiver's data only from processes that follow the
//! library (the sender still holds the descriptor until it drops it),
//! while a strong share is enforced against everyone, receiver included,
//! by the seal, which the receiver checks on every block it adopts.

// The benchmark times the real thing; the loom build models only the
// synchronisation (`atoll_co::bench` is left out of it too).
#[cfg(not(loom))]
pub mod bench;
pub mod block;
pub mod chan;
mod domain;
pub mod pool;
pub mod rights;
mod sync;
pub mod sys;
pub mod ticket;

pub use block::{BlockManager, Config, Stats, DEFAULT_REMAP_THRESHOLD};
pub use domain::{Agg, Cosh, DomainId, Received};
pub use pool::{Pool, PoolDomain, PoolRef};
pub use rights::{Mode, Rights, Strength};
pub use ticket::{recv_parcel, send_parcel, Parcel, PoolTicket, Ticket};

/// What can go wrong.
#[derive(Debug, thiserror::Error)]
pub enum CoshError {
    #[error("no such aggregate (freed, or never made)")]
    NoSuchAggregate,
    #[error("no such domain")]
    NoSuchDomain,
    #[error("aggregates of different domains")]
    OtherDomain,
    #[error("needs {needed:?} rights, holds {held:?}")]
    Rights { needed: Rights, held: Rights },
    #[error("range outside the aggregate")]
    OutOfRange,
    #[error("pool exhausted: {wanted} blocks wanted, {free} free")]
    OutOfMemory { wanted: usize, free: usize },
    #[error("protocol error from the peer: {0}")]
    Protocol(&'static str),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

#[cfg(all(test, loom))]
mod loom_models;
#[cfg(test)]
mod pool_tests;
#[cfg(test)]
mod tests;
