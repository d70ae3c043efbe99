//! Property tests of hot-swapping: random calls from several threads,
//! some of them re-entrant, interleaved with random swaps between a
//! centralised and a sharded implementation of an append-only log.
//!
//! Checked after every run: each append was applied exactly once; the
//! position each append returned is where its item sits in the final log
//! (so the order is one the log's semantics allow, and no transfer lost or
//! reordered anything); each thread's items appear in its program order.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};

use atoll_co::{set_slot, CoRef, Domain, DomainConfig, Format, RepSet, Root, State, TransferError};
use proptest::prelude::*;

type Item = (u32, u32);

trait Log: Send + Sync {
    /// Append `item`; returns its position in the log.
    fn append(&self, item: Item) -> u64;
    fn snapshot(&self) -> Vec<Item>;
}

const ORDERED: Format = Format("log/ordered");

/// One vector behind one lock, shared by every slot.
#[derive(Default)]
struct CentralLog(Arc<CentralRep>);

#[derive(Default)]
struct CentralRep(Mutex<Vec<Item>>);

impl Log for CentralRep {
    fn append(&self, item: Item) -> u64 {
        let mut v = self.0.lock().unwrap();
        v.push(item);
        v.len() as u64 - 1
    }
    fn snapshot(&self) -> Vec<Item> {
        self.0.lock().unwrap().clone()
    }
}

impl Root<dyn Log> for CentralLog {
    fn rep(&self, _slot: usize) -> Arc<dyn Log> {
        self.0.clone()
    }
    fn export_formats(&self) -> Vec<Format> {
        vec![ORDERED]
    }
    fn import_formats(&self) -> Vec<Format> {
        vec![ORDERED]
    }
    fn export(&self, f: Format) -> Option<State> {
        (f == ORDERED).then(|| Box::new(self.0.snapshot()) as State)
    }
    fn import(&self, f: Format, s: State) -> Result<(), TransferError> {
        let items = s
            .downcast::<Vec<Item>>()
            .map_err(|_| TransferError::ImportRejected(f))?;
        *self.0 .0.lock().unwrap() = *items;
        Ok(())
    }
}

/// Each slot's appends with their positions.
type Shard = Mutex<Vec<(u64, Item)>>;
type Shards = RepSet<Shard>;

/// A shard per slot; a shared sequence number orders the appends.
struct ShardedLog {
    next: Arc<AtomicU64>,
    shards: Arc<Shards>,
}

struct ShardRep {
    next: Arc<AtomicU64>,
    local: Arc<Shard>,
    shards: Arc<Shards>,
}

impl ShardedLog {
    fn new(slots: usize) -> ShardedLog {
        ShardedLog {
            next: Arc::new(AtomicU64::new(0)),
            shards: Arc::new(RepSet::new(slots, 1)),
        }
    }
}

fn merged(shards: &Shards) -> Vec<Item> {
    let mut all: Vec<(u64, Item)> = shards
        .all()
        .iter()
        .flat_map(|(_, s)| s.lock().unwrap().clone())
        .collect();
    all.sort();
    all.into_iter().map(|(_, i)| i).collect()
}

impl Log for ShardRep {
    fn append(&self, item: Item) -> u64 {
        // The position is taken under the shard lock, so a snapshot (which
        // takes every shard lock in turn) never sees a gap it later fills.
        let mut local = self.local.lock().unwrap();
        let pos = self.next.fetch_add(1, Ordering::SeqCst);
        local.push((pos, item));
        pos
    }
    fn snapshot(&self) -> Vec<Item> {
        merged(&self.shards)
    }
}

impl Root<dyn Log> for ShardedLog {
    fn rep(&self, slot: usize) -> Arc<dyn Log> {
        Arc::new(ShardRep {
            next: self.next.clone(),
            local: self.shards.get_or_make(slot, Default::default),
            shards: self.shards.clone(),
        })
    }
    fn export_formats(&self) -> Vec<Format> {
        vec![ORDERED]
    }
    fn import_formats(&self) -> Vec<Format> {
        vec![ORDERED]
    }
    fn export(&self, f: Format) -> Option<State> {
        (f == ORDERED).then(|| Box::new(merged(&self.shards)) as State)
    }
    fn import(&self, f: Format, s: State) -> Result<(), TransferError> {
        let items = s
            .downcast::<Vec<Item>>()
            .map_err(|_| TransferError::ImportRejected(f))?;
        let shard = self.shards.get_or_make(0, Default::default);
        let mut shard = shard.lock().unwrap();
        for (pos, item) in items.iter().enumerate() {
            shard.push((pos as u64, *item));
        }
        self.next.store(items.len() as u64, Ordering::SeqCst);
        Ok(())
    }
}

const SLOTS: usize = 3;

#[derive(Clone, Copy, Debug)]
enum Op {
    Append,
    /// Append, and append again from inside that call (a tracked call:
    /// the swap's Block phase must let it through).
    Nested,
    /// Append after giving the CPU away a few times inside the call: a
    /// long call that a swap may overtake.
    Slow,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![4 => Just(Op::Append), 1 => Just(Op::Nested), 1 => Just(Op::Slow)]
}

/// Runs a thread's ops; returns (item, position) of each append.
fn caller(log: &CoRef<dyn Log>, thread: u32, ops: &[Op]) -> Vec<(Item, u64)> {
    set_slot(thread as usize);
    let mut seq = 0;
    let mut next = || {
        seq += 1;
        (thread, seq)
    };
    let mut done = Vec::new();
    for op in ops {
        let first = next();
        match op {
            Op::Append => {
                let p = log.call(|r| r.append(first)).unwrap();
                done.push((first, p));
            }
            Op::Slow => {
                let p = log
                    .call(|r| {
                        for _ in 0..20 {
                            std::thread::yield_now();
                        }
                        r.append(first)
                    })
                    .unwrap();
                done.push((first, p));
            }
            Op::Nested => {
                let second = next();
                let (p, q) = log
                    .call(|r| {
                        let p = r.append(first);
                        (p, log.call(|r| r.append(second)).unwrap())
                    })
                    .unwrap();
                done.push((first, p));
                done.push((second, q));
            }
        }
    }
    done
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn every_call_is_applied_once_in_order_across_random_swaps(
        threads in prop::collection::vec(prop::collection::vec(op(), 0..200), 1..4),
        swaps in prop::collection::vec(any::<bool>(), 0..12),
        start_sharded in any::<bool>(),
    ) {
        let domain: Domain<dyn Log> = Domain::new(DomainConfig { slots: SLOTS, capacity: 2 });
        let first: Arc<dyn Root<dyn Log>> = if start_sharded {
            Arc::new(ShardedLog::new(SLOTS))
        } else {
            Arc::new(CentralLog::default())
        };
        let log = domain.create(first).unwrap();
        let start = Barrier::new(threads.len() + 1);
        let running = AtomicUsize::new(threads.len());
        let results: Vec<Vec<(Item, u64)>> = std::thread::scope(|s| {
            let callers: Vec<_> = threads
                .iter()
                .enumerate()
                .map(|(t, ops)| {
                    let (log, start, running) = (&log, &start, &running);
                    s.spawn(move || {
                        start.wait();
                        let done = caller(log, t as u32, ops);
                        running.fetch_sub(1, Ordering::SeqCst);
                        done
                    })
                })
                .collect();
            start.wait();
            // The swap list, at least once, and again while calls run.
            let mut round = 0;
            for &sharded in swaps
                .iter()
                .cycle()
                .take_while(|_| {
                    round += 1;
                    round <= swaps.len() || running.load(Ordering::SeqCst) > 0
                })
            {
                let new: Arc<dyn Root<dyn Log>> = if sharded {
                    Arc::new(ShardedLog::new(SLOTS))
                } else {
                    Arc::new(CentralLog::default())
                };
                let report = domain.swap(&log, new).unwrap();
                prop_assert_eq!(report.format, Some(ORDERED));
                std::thread::yield_now();
            }
            Ok(callers.into_iter().map(|c| c.join().unwrap()).collect())
        })?;
        let final_log = log.call(|r| r.snapshot()).unwrap();
        let appended: usize = results.iter().map(Vec::len).sum();
        prop_assert_eq!(final_log.len(), appended, "an append was lost or repeated");
        let mut position: HashMap<Item, u64> = HashMap::new();
        for (item, p) in results.iter().flatten() {
            prop_assert!(position.insert(*item, *p).is_none());
            prop_assert_eq!(final_log.get(*p as usize), Some(item), "position {} moved", p);
        }
        for t in 0..threads.len() as u32 {
            let seqs: Vec<u32> = final_log.iter().filter(|i| i.0 == t).map(|i| i.1).collect();
            prop_assert!(seqs.windows(2).all(|w| w[0] < w[1]), "thread {} out of order: {:?}", t, seqs);
        }
        domain.destroy(&log).unwrap();
    }
}
