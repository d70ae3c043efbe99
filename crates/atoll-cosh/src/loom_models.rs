//! Loom models of the pool's header and of the polled channel: the code
//! of `pool.rs` and `chan.rs` itself, over model memory (`sync::model`),
//! with every interleaving of two or three threads standing for the
//! processes of a pool. Run with `make loom` (`RUSTFLAGS="--cfg loom"`).
//!
//! What they check: a block sent once is claimed once, whoever races for
//! it; a share's two references free the block exactly once, whatever
//! the order of send, claim and the two releases; allocations under the
//! spin lock never hand out one unit twice; a receiver that waited for a
//! sender's view to go sees everything the sender did before it let go
//! (`Pool::wait_revoked`); the channel delivers every message once, in
//! order, and never lets a read of a message race with its write.

use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::thread;

use crate::chan::Channel;
use crate::pool::{Pool, PoolRef};
use crate::sys;

/// Every interleaving with up to `preemptions` preemptions (loom's
/// bound: the spin lock's waits and the bitmap's word-by-word scan would
/// make the full space too large to search).
fn model(preemptions: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(preemptions);
    b.max_branches = 100_000;
    b.check(f);
}

fn pool(pages: usize) -> Arc<Pool> {
    Arc::new(Pool::create(pages * sys::page_size()).unwrap())
}

/// Claim `r` for domain `me`, waiting (yielding) until it is sent.
fn claim_when_sent(p: &Pool, r: PoolRef, me: u32) {
    while p.claim(r, me).is_err() {
        thread::yield_now();
    }
}

#[test]
fn loom_a_block_in_flight_is_claimed_once() {
    model(3, || {
        let p = pool(2);
        let r = p.alloc(1).unwrap();
        let racers: Vec<_> = (0..2)
            .map(|_| {
                let p = p.clone();
                thread::spawn(move || p.claim(r, 2).is_ok())
            })
            .collect();
        p.send(r, 2, false, 0).unwrap();
        let won = racers
            .into_iter()
            .map(|t| t.join().unwrap())
            .filter(|&w| w)
            .count();
        // Both may have looked before the send; never both after it.
        assert!(won <= 1, "claimed twice");
        if won == 0 {
            p.claim(r, 2).unwrap();
        }
        assert!(p.claim(r, 2).is_err());
    });
}

#[test]
fn loom_a_shared_block_is_freed_once_by_its_last_reference() {
    model(3, || {
        let p = pool(2);
        let r = p.alloc(1).unwrap();
        let receiver = {
            let p = p.clone();
            thread::spawn(move || {
                claim_when_sent(&p, r, 2);
                p.release(r);
            })
        };
        p.send(r, 2, true, 0).unwrap();
        p.release(r);
        receiver.join().unwrap();
        assert_eq!(p.free_units(), 2, "freed, and only once");
        assert_eq!(p.alloc(1).unwrap(), r, "the range is free again");
    });
}

#[test]
fn loom_allocations_under_the_lock_never_overlap() {
    model(3, || {
        let p = pool(2);
        let held = p.alloc(1).unwrap();
        let allocator = {
            let p = p.clone();
            thread::spawn(move || p.alloc(1).unwrap())
        };
        // A free and an allocation racing another allocation: whichever
        // order, every unit is handed out at most once.
        p.release(held);
        let mine = p.alloc(1).unwrap();
        let theirs = allocator.join().unwrap();
        assert_ne!(mine, theirs, "one unit handed out twice");
        assert_eq!(p.free_units(), 0);
        assert!(p.alloc(1).is_err(), "a unit counted free twice");
    });
}

#[test]
fn loom_a_receiver_that_waited_sees_the_senders_view_gone() {
    model(3, || {
        let p = pool(2);
        let r = p.alloc(1).unwrap();
        let me = sys::pid();
        // The sender's view of the block: true while it maps it.
        let view = Arc::new(UnsafeCell::new(true));
        let receiver = {
            let (p, view) = (p.clone(), view.clone());
            thread::spawn(move || {
                claim_when_sent(&p, r, 2);
                p.wait_revoked(r);
                // SAFETY: loom reports this read if it races with the
                // sender's write (the point of the model).
                assert!(!view.with(|v| unsafe { *v }), "the sender still maps it");
            })
        };
        p.send(r, 2, false, me).unwrap();
        // SAFETY: as above.
        view.with_mut(|v| unsafe { *v = false });
        p.revoked(r, me);
        receiver.join().unwrap();
    });
}

#[test]
fn loom_the_channel_delivers_each_message_once_in_order() {
    model(3, || {
        let ch = Arc::new(Channel::new().unwrap());
        let sender = {
            let ch = ch.clone();
            thread::spawn(move || {
                let end = ch.end(true, || true);
                for msg in [&[1u8][..], &[2, 2], &[3, 3, 3]] {
                    end.send(msg).unwrap();
                }
            })
        };
        let end = ch.end(false, || true);
        let mut buf = Vec::new();
        for want in [&[1u8][..], &[2, 2], &[3, 3, 3]] {
            end.recv(&mut buf).unwrap();
            assert_eq!(buf, want);
        }
        sender.join().unwrap();
    });
}
