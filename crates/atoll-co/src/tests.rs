//! Unit tests of the domain (create, call, miss, evict, destroy) and of
//! hot-swapping, with small test objects.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};

use crate::counter::{CentralCounter, Counter, DistributedCounter, PER_CLUSTER, TOTAL};
use crate::root::{Format, Root, State, TransferError};
use crate::{set_slot, CoError, Domain, DomainConfig, SwapError};

fn domain(slots: usize) -> Domain<dyn Counter> {
    Domain::new(DomainConfig { slots, capacity: 8 })
}

/// A counter root that counts its misses and notices being dropped.
struct Probe {
    misses: Arc<AtomicUsize>,
    dropped: Arc<AtomicBool>,
    inner: DistributedCounter,
}

impl Probe {
    fn new(slots: usize) -> (Probe, Arc<AtomicUsize>, Arc<AtomicBool>) {
        let misses = Arc::new(AtomicUsize::new(0));
        let dropped = Arc::new(AtomicBool::new(false));
        let p = Probe {
            misses: misses.clone(),
            dropped: dropped.clone(),
            inner: DistributedCounter::new(slots, 1),
        };
        (p, misses, dropped)
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        self.dropped.store(true, Ordering::SeqCst);
    }
}

impl Root<dyn Counter> for Probe {
    fn rep(&self, slot: usize) -> Arc<dyn Counter> {
        self.misses.fetch_add(1, Ordering::SeqCst);
        self.inner.rep(slot)
    }
    fn export_formats(&self) -> Vec<Format> {
        self.inner.export_formats()
    }
    fn import_formats(&self) -> Vec<Format> {
        self.inner.import_formats()
    }
    fn export(&self, format: Format) -> Option<State> {
        self.inner.export(format)
    }
    fn import(&self, format: Format, state: State) -> Result<(), TransferError> {
        self.inner.import(format, state)
    }
}

/// Runs `f` on a thread whose slot is `slot`.
fn on_slot<R: Send + 'static>(slot: usize, f: impl FnOnce() -> R + Send + 'static) -> R {
    std::thread::spawn(move || {
        set_slot(slot);
        f()
    })
    .join()
    .unwrap()
}

#[test]
fn first_call_on_each_slot_misses_once_then_stays_in_the_table() {
    let d = domain(3);
    let (probe, misses, _) = Probe::new(3);
    let c = d.create(Arc::new(probe)).unwrap();
    for slot in [0, 1, 1, 2, 0, 2, 1] {
        let c = c.clone();
        on_slot(slot, move || c.call(|c| c.inc()).unwrap());
    }
    assert_eq!(misses.load(Ordering::SeqCst), 3);
    assert_eq!(c.call(|c| c.value()).unwrap(), 7);
}

#[test]
fn slots_beyond_the_table_wrap_around() {
    let d = domain(2);
    let (probe, misses, _) = Probe::new(2);
    let c = d.create(Arc::new(probe)).unwrap();
    let c2 = c.clone();
    on_slot(5, move || c2.call(|c| c.inc()).unwrap());
    let c2 = c.clone();
    on_slot(1, move || c2.call(|c| c.inc()).unwrap());
    assert_eq!(misses.load(Ordering::SeqCst), 1, "slot 5 is slot 1");
}

#[test]
fn evicting_a_slot_makes_its_next_call_miss_and_keeps_the_state() {
    let d = domain(2);
    let (probe, misses, _) = Probe::new(2);
    let c = d.create(Arc::new(probe)).unwrap();
    let c2 = c.clone();
    on_slot(1, move || c2.call(|c| c.add(5)).unwrap());
    c.evict(1).unwrap();
    let c2 = c.clone();
    on_slot(1, move || c2.call(|c| c.add(5)).unwrap());
    assert_eq!(misses.load(Ordering::SeqCst), 2);
    assert_eq!(c.call(|c| c.value()).unwrap(), 10);
}

#[test]
fn destroy_drops_the_root_and_stale_references_fail_even_after_reuse() {
    let d = domain(1);
    let (probe, _, dropped) = Probe::new(1);
    let old = d.create(Arc::new(probe)).unwrap();
    old.call(|c| c.inc()).unwrap();
    d.destroy(&old).unwrap();
    assert!(dropped.load(Ordering::SeqCst));
    assert_eq!(old.call(|c| c.value()), Err(CoError::Destroyed));
    assert_eq!(d.destroy(&old), Err(CoError::Destroyed));
    // The identifier is recycled with a new generation.
    let new = d.create(Arc::new(CentralCounter::default())).unwrap();
    assert_eq!(new.index(), old.index());
    new.call(|c| c.add(3)).unwrap();
    assert_eq!(old.call(|c| c.value()), Err(CoError::Destroyed));
    assert_eq!(new.call(|c| c.value()).unwrap(), 3);
}

#[test]
fn a_full_table_refuses_new_objects_until_one_is_destroyed() {
    let d: Domain<dyn Counter> = Domain::new(DomainConfig {
        slots: 1,
        capacity: 2,
    });
    let a = d.create(Arc::new(CentralCounter::default())).unwrap();
    let _b = d.create(Arc::new(CentralCounter::default())).unwrap();
    assert!(matches!(
        d.create(Arc::new(CentralCounter::default())),
        Err(CoError::TableFull(2))
    ));
    d.destroy(&a).unwrap();
    assert!(d.create(Arc::new(CentralCounter::default())).is_ok());
}

#[test]
fn destroy_waits_for_a_call_in_progress() {
    let d = Arc::new(domain(2));
    let (probe, _, dropped) = Probe::new(2);
    let c = d.create(Arc::new(probe)).unwrap();
    let (inside_tx, inside_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let saw_dropped = Arc::new(AtomicBool::new(true));
    let caller = {
        let (c, dropped, saw) = (c.clone(), dropped.clone(), saw_dropped.clone());
        std::thread::spawn(move || {
            set_slot(1);
            c.call(|rep| {
                inside_tx.send(()).unwrap();
                go_rx.recv().unwrap();
                rep.inc();
                saw.store(dropped.load(Ordering::SeqCst), Ordering::SeqCst);
            })
            .unwrap();
        })
    };
    inside_rx.recv().unwrap();
    let destroyer = {
        let (d, c) = (d.clone(), c.clone());
        std::thread::spawn(move || d.destroy(&c).unwrap())
    };
    go_tx.send(()).unwrap();
    caller.join().unwrap();
    destroyer.join().unwrap();
    assert!(
        !saw_dropped.load(Ordering::SeqCst),
        "the root was dropped while a call used its rep"
    );
    assert!(dropped.load(Ordering::SeqCst));
}

#[test]
fn management_from_inside_a_call_is_refused() {
    let d = Arc::new(domain(1));
    let c = d.create(Arc::new(CentralCounter::default())).unwrap();
    let r = c.call(|_| d.destroy(&c)).unwrap();
    assert_eq!(r, Err(CoError::InsideCall));
    let r = c.call(|_| d.attach(&c).map(|_| ())).unwrap();
    assert_eq!(r, Err(CoError::InsideCall));
}

#[test]
fn swap_moves_the_state_in_the_best_common_format() {
    let d = domain(2);
    let c = d.create(Arc::new(DistributedCounter::new(2, 1))).unwrap();
    let c2 = c.clone();
    on_slot(1, move || c2.call(|c| c.add(7)).unwrap());
    c.call(|c| c.add(1)).unwrap();
    let r = d.swap(&c, Arc::new(DistributedCounter::new(2, 1))).unwrap();
    assert_eq!(r.format, Some(PER_CLUSTER));
    assert_eq!(c.call(|c| c.value()).unwrap(), 8);
    let r = d.swap(&c, Arc::new(CentralCounter::default())).unwrap();
    assert_eq!(r.format, Some(TOTAL));
    assert_eq!(c.call(|c| c.value()).unwrap(), 8);
}

/// A counter that exports nothing anyone imports.
struct Opaque(CentralCounter);

impl Root<dyn Counter> for Opaque {
    fn rep(&self, slot: usize) -> Arc<dyn Counter> {
        self.0.rep(slot)
    }
    fn export_formats(&self) -> Vec<Format> {
        vec![Format("opaque")]
    }
}

#[test]
fn a_swap_without_a_common_format_leaves_the_old_object_in_place() {
    let d = domain(2);
    let c = d
        .create(Arc::new(Opaque(CentralCounter::default())))
        .unwrap();
    c.call(|c| c.add(4)).unwrap();
    let e = d.swap(&c, Arc::new(CentralCounter::default())).unwrap_err();
    assert_eq!(e, SwapError::Transfer(TransferError::NoCommonFormat));
    c.call(|c| c.add(1)).unwrap();
    assert_eq!(c.call(|c| c.value()).unwrap(), 5);
}

#[test]
fn calls_through_an_attached_mediator_are_forwarded_and_counted() {
    let d = Arc::new(domain(2));
    let c = d.create(Arc::new(CentralCounter::default())).unwrap();
    let m = d.attach(&c).unwrap();
    let (inside_tx, inside_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let caller = {
        let c = c.clone();
        std::thread::spawn(move || {
            c.call(|rep| {
                inside_tx.send(()).unwrap();
                go_rx.recv().unwrap();
                rep.inc();
            })
            .unwrap()
        })
    };
    inside_rx.recv().unwrap();
    assert_eq!(m.in_flight(), 1);
    go_tx.send(()).unwrap();
    caller.join().unwrap();
    assert_eq!(m.in_flight(), 0);
    m.detach();
    assert_eq!(c.call(|c| c.value()).unwrap(), 1);
}

/// A counter root whose export waits for the test's signal, so the test
/// can make calls while the swap is in its Transfer phase.
struct SlowExport {
    inner: CentralCounter,
    in_export: Mutex<Option<mpsc::Sender<()>>>,
    proceed: Mutex<Option<mpsc::Receiver<()>>>,
}

impl Root<dyn Counter> for SlowExport {
    fn rep(&self, slot: usize) -> Arc<dyn Counter> {
        self.inner.rep(slot)
    }
    fn export_formats(&self) -> Vec<Format> {
        vec![TOTAL]
    }
    fn export(&self, format: Format) -> Option<State> {
        if let Some(tx) = self.in_export.lock().unwrap().take() {
            tx.send(()).unwrap();
        }
        if let Some(rx) = self.proceed.lock().unwrap().take() {
            rx.recv().unwrap();
        }
        self.inner.export(format)
    }
}

#[test]
fn calls_made_while_the_state_moves_are_held_and_land_on_the_new_object() {
    let d = Arc::new(domain(2));
    let (in_export_tx, in_export_rx) = mpsc::channel();
    let (proceed_tx, proceed_rx) = mpsc::channel();
    let c = d
        .create(Arc::new(SlowExport {
            inner: CentralCounter::default(),
            in_export: Mutex::new(Some(in_export_tx)),
            proceed: Mutex::new(Some(proceed_rx)),
        }))
        .unwrap();
    c.call(|c| c.add(10)).unwrap();
    let new_value = Arc::new(AtomicU64::new(0));
    let swapper = {
        let (d, c) = (d.clone(), c.clone());
        std::thread::spawn(move || d.swap(&c, Arc::new(CentralCounter::default())).unwrap())
    };
    in_export_rx.recv().unwrap();
    let callers: Vec<_> = (0..2)
        .map(|slot| {
            let (c, v) = (c.clone(), new_value.clone());
            std::thread::spawn(move || {
                set_slot(slot);
                c.call(|c| c.add(1)).unwrap();
                v.fetch_add(1, Ordering::SeqCst);
            })
        })
        .collect();
    // Give the callers time to reach the mediator (if they are late they
    // simply find the new object: the checks below hold either way).
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(
        new_value.load(Ordering::SeqCst),
        0,
        "a call ran during Transfer"
    );
    proceed_tx.send(()).unwrap();
    swapper.join().unwrap();
    for t in callers {
        t.join().unwrap();
    }
    assert_eq!(c.call(|c| c.value()).unwrap(), 12);
}

#[test]
fn a_dropped_mediation_detaches() {
    let d = domain(1);
    let c = d.create(Arc::new(CentralCounter::default())).unwrap();
    drop(d.attach(&c).unwrap());
    c.call(|c| c.inc()).unwrap();
    // Attaching again works: the first one let go of the entries and lock.
    d.attach(&c).unwrap().detach();
    assert_eq!(c.call(|c| c.value()).unwrap(), 1);
}

#[test]
fn slots_of_one_cluster_share_a_cell() {
    let d = domain(4);
    let root = Arc::new(DistributedCounter::new(4, 2));
    let c = d.create(root.clone()).unwrap();
    for slot in 0..4 {
        let c = c.clone();
        on_slot(slot, move || c.call(|c| c.add(1 << slot)).unwrap());
    }
    let per_cluster = root.export(PER_CLUSTER).unwrap();
    assert_eq!(
        *per_cluster.downcast::<Vec<u64>>().unwrap(),
        vec![0b11, 0b1100]
    );
    assert_eq!(c.call(|c| c.value()).unwrap(), 0b1111);
}

#[test]
fn a_reentrant_call_during_the_block_phase_is_forwarded_not_held() {
    let d = domain(2);
    let c = d.create(Arc::new(CentralCounter::default())).unwrap();
    let m = d.attach(&c).unwrap();
    m.wait_for_earlier_calls();
    let (inside_tx, inside_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (done_tx, done_rx) = mpsc::channel();
    std::thread::scope(|s| {
        let c2 = c.clone();
        s.spawn(move || {
            // Begun in the Forward phase: a tracked call.
            c2.call(|rep| {
                rep.inc();
                inside_tx.send(()).unwrap();
                go_rx.recv().unwrap();
                // Re-enters the object while the gates block.
                c2.call(|rep| rep.inc()).unwrap();
                done_tx.send(()).unwrap();
            })
            .unwrap();
        });
        inside_rx.recv().unwrap();
        m.block();
        go_tx.send(()).unwrap();
        // A held re-entrant call would never return (its caller holds up
        // the drain the swap waits for): a deadlock, reported as such.
        let reentered = done_rx.recv_timeout(std::time::Duration::from_secs(60));
        assert!(reentered.is_ok(), "the re-entrant call was held: deadlock");
        m.wait_drained();
        m.detach();
    });
    assert_eq!(c.call(|c| c.value()).unwrap(), 2);
}
