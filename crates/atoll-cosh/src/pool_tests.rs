//! Transfers between two `Cosh`es that share a block pool (as two
//! processes of one instance would), within one process: the round trips
//! of every mode, and tickets that name memory they were not sent.

use std::sync::Arc;

use crate::ticket::Part;
use crate::*;

const PAGE: u64 = 4096;

/// Two "processes" on one pool of `pages` pages: each a `Cosh`, one
/// domain, its pool number.
fn pair(threshold: usize, pages: usize) -> (Arc<Pool>, [(Cosh, DomainId, PoolDomain); 2]) {
    let pool = Arc::new(Pool::create(pages * sys::page_size()).unwrap());
    let side = |pool: &Arc<Pool>| {
        let me = pool.join();
        let mut c = Cosh::with_pool(
            Config {
                remap_threshold: threshold,
                ..Config::default()
            },
            pool.clone(),
            me,
        );
        let d = c.domain();
        (c, d, me)
    };
    let (a, b) = (side(&pool), side(&pool));
    (pool, [a, b])
}

fn hand(
    from: &mut (Cosh, DomainId, PoolDomain),
    to: &mut (Cosh, DomainId, PoolDomain),
    x: Agg,
    mode: Mode,
) -> Result<Received, CoshError> {
    let p = from.0.attach_transfer_pooled(x, mode, Strength::Strong)?;
    let t = from.0.send_pooled(p, to.2)?;
    // Through the wire format, as between processes.
    let t = PoolTicket::decode(&t.encode())?;
    to.0.recv_pooled(to.1, t)
}

#[test]
fn every_mode_round_trips_through_the_pool_and_frees_it() {
    for threshold in [0, usize::MAX] {
        for mode in Mode::ALL {
            let (pool, [mut a, mut b]) = pair(threshold, 64);
            let free = pool.free_units();
            let x = a.0.alloc(a.1, 3 * PAGE as usize).unwrap();
            let bytes: Vec<u8> = (0..3 * PAGE as usize).map(|i| (i % 253) as u8).collect();
            a.0.write(x, 0, &bytes).unwrap();
            let got = hand(&mut a, &mut b, x, mode).unwrap();
            assert_eq!(b.0.to_vec(got.agg).unwrap(), bytes, "{mode:?}");
            assert_eq!(b.0.rights(got.agg).unwrap(), mode.gains());
            assert_eq!(
                b.0.write(got.agg, 0, b"z").is_ok(),
                mode.gains() == Rights::Rw
            );
            assert_eq!(a.0.rights(x).unwrap(), mode.retains(Rights::Rw));
            if mode == Mode::Share {
                assert!(a.0.write(x, 0, b"z").is_err(), "the sender kept read-only");
            }
            if mode == Mode::Copy {
                a.0.write(x, 0, b"q").unwrap();
                assert_eq!(b.0.to_vec(got.agg).unwrap()[0], b'z', "copies are apart");
            }
            a.0.audit().unwrap();
            b.0.audit().unwrap();
            a.0.decref(x).unwrap();
            b.0.decref(got.agg).unwrap();
            a.0.give_back_kept();
            b.0.give_back_kept();
            assert_eq!(pool.free_units(), free, "{mode:?}: every block freed");
        }
    }
}

#[test]
fn a_moved_block_comes_back_to_the_same_range_without_a_new_mapping() {
    let (_pool, [mut a, mut b]) = pair(0, 16);
    let x = a.0.alloc(a.1, PAGE as usize).unwrap();
    a.0.write(x, 0, b"ping").unwrap();
    let got = hand(&mut a, &mut b, x, Mode::Move).unwrap();
    a.0.decref(x).unwrap();
    assert!(a.0.stats().mappings == 0, "the sender's view is gone");
    let back = hand(&mut b, &mut a, got.agg, Mode::Move).unwrap();
    b.0.decref(got.agg).unwrap();
    assert_eq!(&a.0.to_vec(back.agg).unwrap()[..4], b"ping");
    assert_eq!(a.0.stats().mappings, 1);
}

/// A ticket as a hostile peer would write it: a move of one block `r`.
fn forged(r: PoolRef, len: u64) -> PoolTicket {
    PoolTicket {
        ticket: Ticket {
            mode: Mode::Move,
            strength: Strength::Strong,
            len,
            parts: vec![Part::Remap {
                block: 0,
                block_len: r.len,
                sealed: false,
                off: 0,
                len,
            }],
            inline_len: 0,
        },
        blocks: vec![r],
        inline_block: None,
        inline: Vec::new(),
    }
}

#[test]
fn a_ticket_naming_memory_it_was_not_sent_is_refused_and_maps_nothing() {
    let (pool, [mut a, mut b]) = pair(0, 16);
    let secret = a.0.alloc(a.1, PAGE as usize).unwrap();
    a.0.write(secret, 0, b"secret").unwrap();
    let r = a.0.manager().blocks().next().unwrap().pool_range().unwrap();
    let free = pool.free_units();
    let end = r.off + 16 * PAGE;
    let hostile = [
        // A block of the pool that was never sent.
        r,
        // The pool's header, before the data.
        PoolRef { off: 0, len: PAGE },
        // Past the end, straddling the end, misaligned, empty, wrapping.
        PoolRef {
            off: end,
            len: PAGE,
        },
        PoolRef {
            off: end - PAGE,
            len: 2 * PAGE,
        },
        PoolRef {
            off: r.off + 1,
            len: PAGE,
        },
        PoolRef { off: r.off, len: 0 },
        PoolRef {
            off: !(PAGE - 1),
            len: PAGE,
        },
        // A free range.
        PoolRef {
            off: r.off + PAGE,
            len: PAGE,
        },
    ];
    for h in hostile {
        let e = b.0.recv_pooled(b.1, forged(h, 6));
        assert!(matches!(e, Err(CoshError::Protocol(_))), "{h:?}: {e:?}");
        assert_eq!(b.0.stats().mappings, 0, "{h:?}: nothing mapped");
    }
    // Sent to someone else: not ours to take.
    let p =
        a.0.attach_transfer_pooled(secret, Mode::Share, Strength::Strong)
            .unwrap();
    let t = a.0.send_pooled(p, a.2).unwrap();
    assert!(b.0.recv_pooled(b.1, t.clone()).is_err());
    assert_eq!(b.0.stats().mappings, 0);
    // Sent to us, but the ticket's part reaches past the block: the
    // block is claimed, then given back.
    let mut long = t.clone();
    long.ticket.len = 2 * PAGE;
    if let Part::Remap { len, .. } = &mut long.ticket.parts[0] {
        *len = 2 * PAGE;
    }
    a.0.recv_pooled(a.1, long).unwrap_err();
    assert_eq!(a.0.stats().received, 0);
    // And the same block twice in one ticket.
    let mut twice = t;
    twice.blocks.push(twice.blocks[0]);
    assert!(a.0.recv_pooled(a.1, twice).is_err());
    a.0.decref(secret).unwrap();
    a.0.give_back_kept();
    b.0.give_back_kept();
    assert_eq!(pool.free_units(), free + 1, "nothing leaked");
    a.0.audit().unwrap();
    b.0.audit().unwrap();
}

#[test]
fn a_pool_block_cannot_leave_by_descriptor() {
    let (_pool, [mut a, _]) = pair(0, 4);
    let x = a.0.alloc(a.1, PAGE as usize).unwrap();
    let p =
        a.0.attach_transfer(x, Mode::Move, Strength::Strong)
            .unwrap();
    let (s, _r) = std::os::unix::net::UnixStream::pair().unwrap();
    assert!(matches!(send_parcel(&s, &p), Err(CoshError::Protocol(_))));
    a.0.discard(p);
}

#[test]
fn a_small_copy_travels_in_its_ticket_and_a_large_one_in_a_pool_block() {
    let inline_max = Config::default().pool_inline_max;
    for (len, in_ticket) in [(PAGE as usize, true), (4 * inline_max, false)] {
        let (pool, [mut a, mut b]) = pair(0, 1024);
        let free = pool.free_units();
        let x = a.0.alloc(a.1, len).unwrap();
        let bytes: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        a.0.write(x, 0, &bytes).unwrap();
        let p =
            a.0.attach_transfer_pooled(x, Mode::Copy, Strength::Strong)
                .unwrap();
        let t = a.0.send_pooled(p, b.2).unwrap();
        assert_eq!(t.inline_block.is_none(), in_ticket, "{len} bytes");
        assert_eq!(t.inline.len(), if in_ticket { len } else { 0 });
        let t = PoolTicket::decode(&t.encode()).unwrap();
        let got = b.0.recv_pooled(b.1, t).unwrap();
        // The sender's later stores never reach the receiver's copy.
        a.0.write(x, 0, b"later").unwrap();
        assert_eq!(b.0.to_vec(got.agg).unwrap(), bytes, "{len} bytes");
        assert_eq!(b.0.rights(got.agg).unwrap(), Rights::Rw);
        a.0.decref(x).unwrap();
        b.0.decref(got.agg).unwrap();
        a.0.audit().unwrap();
        b.0.audit().unwrap();
        drop((a, b));
        assert_eq!(pool.free_units(), free, "dropped managers give back");
    }
}

#[test]
fn a_block_freed_by_its_only_holder_is_kept_mapped_and_handed_out_zeroed() {
    let (pool, [mut a, _b]) = pair(0, 1024);
    let free = pool.free_units();
    let x = a.0.alloc(a.1, 2 * PAGE as usize).unwrap();
    a.0.write(x, 0, &[0xee; 2 * PAGE as usize]).unwrap();
    a.0.decref(x).unwrap();
    let s = a.0.stats();
    assert_eq!(s.kept_bytes, 2 * PAGE as usize);
    assert_eq!(s.mappings, 0, "no aggregate's mapping");
    assert_eq!(pool.free_units(), free - 2, "still ours in the pool");
    let recycled = s.recycled;
    let y = a.0.alloc(a.1, PAGE as usize + 1).unwrap();
    assert_eq!(a.0.stats().recycled, recycled + 1, "the kept block");
    assert_eq!(a.0.stats().kept_bytes, 0);
    assert_eq!(a.0.to_vec(y).unwrap(), vec![0; PAGE as usize + 1]);
    // The whole block is zeroed, not just the aggregate's bytes: whoever
    // it goes to next (a move remaps all of it) sees nothing of ours.
    let m = a.0.manager();
    let block = m.blocks().next().unwrap();
    assert_eq!(block.len(), 2 * PAGE as usize);
    let view = m.mapping(a.1, block.id()).unwrap();
    assert!(view.bytes(0, 2 * PAGE as usize).iter().all(|&b| b == 0));
    a.0.decref(y).unwrap();
    a.0.give_back_kept();
    assert_eq!(pool.free_units(), free);
    a.0.audit().unwrap();
}

#[test]
fn shared_and_moved_away_blocks_are_not_kept_and_a_full_pool_takes_the_keep_back() {
    let (pool, [mut a, mut b]) = pair(0, 1024);
    let x = a.0.alloc(a.1, PAGE as usize).unwrap();
    let got = hand(&mut a, &mut b, x, Mode::Share).unwrap();
    a.0.decref(x).unwrap();
    b.0.decref(got.agg).unwrap();
    assert_eq!((a.0.stats().kept_bytes, b.0.stats().kept_bytes), (0, 0));
    let x = a.0.alloc(a.1, PAGE as usize).unwrap();
    let got = hand(&mut a, &mut b, x, Mode::Move).unwrap();
    a.0.decref(x).unwrap();
    assert_eq!(a.0.stats().kept_bytes, 0, "moved away: not ours");
    b.0.decref(got.agg).unwrap();
    assert_eq!(b.0.stats().kept_bytes, PAGE as usize, "now b's alone");
    // Everything else allocated: b's next allocation of another size
    // takes its keep back instead of failing.
    let rest = pool.free_units();
    let hog = a.0.alloc(a.1, rest * PAGE as usize).unwrap();
    let y = b.0.alloc(b.1, 16 * PAGE as usize);
    assert!(y.is_err(), "the pool is full");
    assert_eq!(b.0.stats().kept_bytes, 0, "given back on the way");
    a.0.decref(hog).unwrap();
    a.0.give_back_kept();
    let y = b.0.alloc(b.1, 16 * PAGE as usize).unwrap();
    b.0.decref(y).unwrap();
}
