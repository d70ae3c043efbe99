//! Clustered counters: the thesis's running example (K42 §3.2, §7.1) and
//! atoll's per-core statistics.
//!
//! * [`DistributedCounter`]: one padded cell per cluster of slots; `inc`
//!   touches only the local cell, `value` sums the reps.
//! * [`CentralCounter`]: one cell that every slot's rep shares — what a
//!   counter is before it gets hot; a swap to the distributed one is
//!   the adaptation K42 ch. 6 makes possible.
//!
//! Both export and import `counter/total` (a `u64`); the distributed one
//! prefers `counter/per-cluster` (a `Vec<u64>`) when both sides know it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crossbeam_utils::CachePadded;

use crate::root::{Format, RepSet, Root, State, TransferError};

/// The counter interface: what callers see through a `CoRef<dyn Counter>`.
pub trait Counter: Send + Sync {
    fn add(&self, n: u64);
    fn inc(&self) {
        self.add(1);
    }
    /// The whole counter's value.
    fn value(&self) -> u64;
}

pub const TOTAL: Format = Format("counter/total");
pub const PER_CLUSTER: Format = Format("counter/per-cluster");

type Cell = CachePadded<AtomicU64>;

/// One padded cell per cluster of slots.
pub struct DistributedCounter {
    cells: Arc<RepSet<Cell>>,
}

/// A rep of [`DistributedCounter`]: its own cell, and all of them for
/// `value`.
pub struct DistributedRep {
    local: Arc<Cell>,
    all: Arc<RepSet<Cell>>,
}

impl DistributedCounter {
    pub fn new(slots: usize, cluster: usize) -> DistributedCounter {
        DistributedCounter {
            cells: Arc::new(RepSet::new(slots, cluster)),
        }
    }

    fn total(&self) -> u64 {
        sum(&self.cells)
    }

    /// A rep to call directly, without the translation table (the
    /// benchmark's floor).
    pub fn rep_for_bench(&self, slot: usize) -> Arc<dyn Counter> {
        self.rep(slot)
    }
}

fn sum(cells: &RepSet<Cell>) -> u64 {
    cells
        .all()
        .iter()
        .map(|(_, c)| c.load(Ordering::Relaxed))
        .sum()
}

impl Counter for DistributedRep {
    #[inline]
    fn add(&self, n: u64) {
        self.local.fetch_add(n, Ordering::Relaxed);
    }
    fn value(&self) -> u64 {
        sum(&self.all)
    }
}

impl Root<dyn Counter> for DistributedCounter {
    fn rep(&self, slot: usize) -> Arc<dyn Counter> {
        Arc::new(DistributedRep {
            local: self
                .cells
                .get_or_make(slot, || CachePadded::new(AtomicU64::new(0))),
            all: self.cells.clone(),
        })
    }
    fn export_formats(&self) -> Vec<Format> {
        vec![PER_CLUSTER, TOTAL]
    }
    fn import_formats(&self) -> Vec<Format> {
        vec![PER_CLUSTER, TOTAL]
    }
    fn export(&self, format: Format) -> Option<State> {
        if format == TOTAL {
            return Some(Box::new(self.total()));
        }
        if format == PER_CLUSTER {
            let mut v = vec![0u64; self.cells.clusters()];
            for (i, c) in self.cells.all() {
                v[i] = c.load(Ordering::Relaxed);
            }
            return Some(Box::new(v));
        }
        None
    }
    fn import(&self, format: Format, state: State) -> Result<(), TransferError> {
        let bad = || TransferError::ImportRejected(format);
        if format == TOTAL {
            let total = *state.downcast::<u64>().map_err(|_| bad())?;
            self.cells
                .get_or_make(0, || CachePadded::new(AtomicU64::new(0)))
                .fetch_add(total, Ordering::Relaxed);
            return Ok(());
        }
        if format == PER_CLUSTER {
            let v = *state.downcast::<Vec<u64>>().map_err(|_| bad())?;
            for (i, n) in v.into_iter().enumerate().filter(|(_, n)| *n != 0) {
                // Cluster sizes may differ: fold extra clusters modulo ours.
                let slot = (i % self.cells.clusters()) * self.cells.cluster_size();
                self.cells
                    .get_or_make(slot, || CachePadded::new(AtomicU64::new(0)))
                    .fetch_add(n, Ordering::Relaxed);
            }
            return Ok(());
        }
        Err(bad())
    }
}

/// One shared cell: every slot gets the same rep.
pub struct CentralCounter {
    cell: Arc<CentralRep>,
}

pub struct CentralRep(AtomicU64);

impl Default for CentralCounter {
    fn default() -> Self {
        CentralCounter {
            cell: Arc::new(CentralRep(AtomicU64::new(0))),
        }
    }
}

impl Counter for CentralRep {
    fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
    fn value(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

impl Root<dyn Counter> for CentralCounter {
    fn rep(&self, _slot: usize) -> Arc<dyn Counter> {
        self.cell.clone()
    }
    fn export_formats(&self) -> Vec<Format> {
        vec![TOTAL]
    }
    fn import_formats(&self) -> Vec<Format> {
        vec![TOTAL]
    }
    fn export(&self, format: Format) -> Option<State> {
        (format == TOTAL).then(|| Box::new(self.cell.value()) as State)
    }
    fn import(&self, format: Format, state: State) -> Result<(), TransferError> {
        let total = state
            .downcast::<u64>()
            .map_err(|_| TransferError::ImportRejected(format))?;
        self.cell.add(*total);
        Ok(())
    }
}
