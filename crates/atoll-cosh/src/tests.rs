//! Unit tests of the rights rules and aggregate operations, one behaviour
//! each, within one process (domains with mappings of their own).

use crate::ticket::Part;
use crate::*;

fn cosh(threshold: usize) -> (Cosh, DomainId, DomainId) {
    let mut c = Cosh::new(Config {
        block_size: 4096,
        capacity_blocks: 1024,
        remap_threshold: threshold,
        recycle: 4,
        ..Config::default()
    });
    let (a, b) = (c.domain(), c.domain());
    (c, a, b)
}

fn filled(c: &mut Cosh, d: DomainId, len: usize, byte: u8) -> Agg {
    let x = c.alloc(d, len).unwrap();
    c.write(x, 0, &vec![byte; len]).unwrap();
    x
}

#[test]
fn strong_move_unmaps_the_sender_and_leaves_it_no_rights() {
    let (mut c, a, b) = cosh(0);
    let x = filled(&mut c, a, 8192, 7);
    c.transfer(x, b, Mode::Move, Strength::Strong).unwrap();
    assert_eq!(c.rights(x).unwrap(), Rights::None);
    assert_eq!(c.len(x).unwrap(), 8192, "the length survives the move");
    assert!(c.iter(x, 0).is_err());
    let got = c.receive(b, a).unwrap().unwrap();
    assert_eq!(c.rights(got.agg).unwrap(), Rights::Rw);
    assert!(!c.writable_mapping(a, got.agg).unwrap());
    assert!(c.writable_mapping(b, got.agg).unwrap());
    assert_eq!(c.stats().moved_blocks, 2);
    assert_eq!(c.stats().copied_bytes, 0);
    c.audit().unwrap();
}

#[test]
fn weak_move_may_leave_the_sender_its_mapping() {
    let (mut c, a, b) = cosh(0);
    let x = filled(&mut c, a, 4096, 1);
    c.transfer(x, b, Mode::Move, Strength::Weak).unwrap();
    let got = c.receive(b, a).unwrap().unwrap();
    assert_eq!(got.strength, Strength::Weak);
    assert_eq!(c.rights(x).unwrap(), Rights::None);
    assert!(c.writable_mapping(a, got.agg).unwrap(), "weak: not revoked");
    // A later strong transfer revokes what the weak one left.
    c.transfer(got.agg, a, Mode::Move, Strength::Strong)
        .unwrap();
    let back = c.receive(a, b).unwrap().unwrap();
    assert!(!c.writable_mapping(b, back.agg).unwrap());
}

#[test]
fn strong_share_seals_the_block_and_remaps_the_sender_read_only() {
    let (mut c, a, b) = cosh(0);
    let x = filled(&mut c, a, 4096, 3);
    c.transfer(x, b, Mode::Share, Strength::Strong).unwrap();
    let got = c.receive(b, a).unwrap().unwrap();
    assert_eq!(c.rights(x).unwrap(), Rights::Ro);
    assert_eq!(c.rights(got.agg).unwrap(), Rights::Ro);
    assert_eq!(c.to_vec(x).unwrap(), vec![3; 4096]);
    assert!(!c.writable_mapping(a, x).unwrap());
    assert!(c.manager().blocks().all(|b| b.sealed()));
    assert!(matches!(c.write(x, 0, b"x"), Err(CoshError::Rights { .. })));
    assert_eq!(c.stats().shared_blocks, 1);
    c.audit().unwrap();
}

#[test]
fn shared_data_stays_read_only_until_freed() {
    let (mut c, a, b) = cosh(0);
    let x = filled(&mut c, a, 4096, 3);
    c.transfer(x, b, Mode::Share, Strength::Strong).unwrap();
    let got = c.receive(b, a).unwrap().unwrap();
    // Neither a move (needs read/write) nor a downgrade-then-upgrade can
    // get write access back.
    assert!(c
        .transfer(got.agg, a, Mode::Move, Strength::Strong)
        .is_err());
    c.downgrade(got.agg, Rights::Rw, Strength::Strong).unwrap();
    assert_eq!(c.rights(got.agg).unwrap(), Rights::Ro);
    // A copy is the way to write again.
    c.transfer(got.agg, a, Mode::Copy, Strength::Strong)
        .unwrap();
    let copy = c.receive(a, b).unwrap().unwrap();
    c.write(copy.agg, 0, b"new").unwrap();
    assert_eq!(&c.to_vec(got.agg).unwrap()[..3], &[3, 3, 3]);
}

#[test]
fn share_copies_what_a_related_aggregate_can_still_write() {
    let (mut c, a, b) = cosh(0);
    let x = filled(&mut c, a, 4096, 5);
    let part = c.select(x, 100, 200).unwrap();
    assert_eq!(c.find_related(part, Rights::Rw).unwrap(), vec![x]);
    c.transfer(part, b, Mode::Share, Strength::Strong).unwrap();
    let got = c.receive(b, a).unwrap().unwrap();
    assert_eq!(c.stats().conflict_copies, 1);
    assert!(c.manager().blocks().all(|b| !b.sealed()));
    c.write(x, 100, b"changed").unwrap();
    assert_eq!(c.to_vec(got.agg).unwrap(), vec![5; 200]);
    c.audit().unwrap();
}

#[test]
fn short_chunks_are_copied_long_ones_remapped() {
    let (mut c, a, b) = cosh(8192);
    let small = filled(&mut c, a, 4096, 1);
    let large = filled(&mut c, a, 16384, 2);
    let both = c.concat(small, large).unwrap();
    c.decref(small).unwrap();
    c.decref(large).unwrap();
    let p = c
        .attach_transfer(both, Mode::Move, Strength::Strong)
        .unwrap();
    assert_eq!(p.ticket.parts.len(), 2);
    assert_eq!(p.ticket.parts[0], Part::Inline { len: 4096 });
    assert!(matches!(p.ticket.parts[1], Part::Remap { len: 16384, .. }));
    let got = c.attach_recv(b, p).unwrap();
    let bytes = c.to_vec(got.agg).unwrap();
    assert_eq!(&bytes[..4096], &[1; 4096][..]);
    assert_eq!(&bytes[4096..], &[2; 16384][..]);
}

#[test]
fn iteration_joins_contiguous_chunks_and_starts_at_an_offset() {
    let (mut c, a, _) = cosh(0);
    let x = filled(&mut c, a, 4096, 9);
    let (l, r) = (c.select(x, 0, 10).unwrap(), c.select(x, 10, 20).unwrap());
    let lr = c.concat(l, r).unwrap();
    assert_eq!(c.iter(lr, 0).unwrap().len(), 1, "adjacent chunks joined");
    let rl = c.concat(r, l).unwrap();
    assert_eq!(c.iter(rl, 0).unwrap().len(), 2);
    assert_eq!(c.iter(rl, 25).unwrap().concat(), vec![9; 5]);
    assert!(c.iter(rl, 31).is_err());
}

#[test]
fn concat_takes_the_lesser_rights_and_refuses_other_domains() {
    let (mut c, a, b) = cosh(0);
    let x = filled(&mut c, a, 100, 1);
    let y = filled(&mut c, a, 100, 2);
    let z = filled(&mut c, b, 100, 3);
    c.downgrade(y, Rights::Ro, Strength::Strong).unwrap();
    let xy = c.concat(x, y).unwrap();
    assert_eq!(c.rights(xy).unwrap(), Rights::Ro);
    assert!(matches!(c.concat(x, z), Err(CoshError::OtherDomain)));
}

#[test]
fn freed_blocks_go_back_to_the_pool_and_stale_handles_are_refused() {
    let (mut c, a, b) = cosh(0);
    let before = c.stats();
    let x = filled(&mut c, a, 10_000, 1);
    assert_eq!(c.stats().private_blocks, 3);
    assert_eq!(c.stats().mapped_blocks, 3);
    c.incref(x).unwrap();
    c.decref(x).unwrap();
    assert_eq!(c.stats().private_blocks, 3, "one reference left");
    c.transfer(x, b, Mode::Move, Strength::Strong).unwrap();
    let got = c.receive(b, a).unwrap().unwrap();
    c.decref(x).unwrap();
    c.decref(got.agg).unwrap();
    let after = c.stats();
    assert_eq!(after.free_blocks, before.free_blocks);
    assert_eq!(after.mappings, 0);
    assert!(matches!(c.len(x), Err(CoshError::NoSuchAggregate)));
    // The recycled block reads as zeros (Cosh §3.3: fresh buffers cannot
    // be observed).
    let y = c.alloc(a, 10_000).unwrap();
    assert_eq!(c.stats().recycled, 1);
    assert!(c.to_vec(y).unwrap().iter().all(|&b| b == 0));
}

#[test]
fn the_pool_refuses_what_it_does_not_have() {
    let (mut c, a, _) = cosh(0);
    assert!(matches!(
        c.alloc(a, 4096 * 1025),
        Err(CoshError::OutOfMemory {
            wanted: 1025,
            free: 1024
        })
    ));
}

#[test]
fn transfers_are_counted_by_mode_and_strength() {
    let (mut c, a, b) = cosh(0);
    let x = filled(&mut c, a, 4096, 1);
    c.transfer(x, b, Mode::Copy, Strength::Strong).unwrap();
    c.transfer(x, b, Mode::Share, Strength::Weak).unwrap();
    c.transfer(x, b, Mode::Share, Strength::Strong).unwrap();
    let s = c.stats();
    assert_eq!(s.transfers_strong, [0, 1, 1]);
    assert_eq!(s.transfers_weak, [0, 1, 0]);
    for _ in 0..3 {
        c.receive(b, a).unwrap().unwrap();
    }
    assert_eq!(c.stats().received, 3);
    assert!(c.receive(b, a).unwrap().is_none());
}

#[test]
fn a_ticket_whose_parts_do_not_add_up_is_refused() {
    let (mut c, a, b) = cosh(0);
    let x = filled(&mut c, a, 4096, 1);
    let mut p = c.attach_transfer(x, Mode::Move, Strength::Strong).unwrap();
    p.ticket.len += 1;
    assert!(matches!(c.attach_recv(b, p), Err(CoshError::Protocol(_))));
    c.decref(x).unwrap();
    assert_eq!(
        c.stats().private_blocks,
        0,
        "the refused parcel's block was freed"
    );
    let t = Ticket {
        mode: Mode::Share,
        strength: Strength::Strong,
        len: 10,
        parts: vec![Part::Remap {
            block: 0,
            block_len: 4096,
            sealed: true,
            off: 4090,
            len: 10,
        }],
        inline_len: 0,
    };
    assert!(t.check(1, 0).is_err(), "part past the block's end");
    assert_eq!(Ticket::decode(&t.encode()).unwrap(), t);
}

#[test]
fn a_strong_downgrade_lowers_the_mapping_and_a_weak_one_may_not() {
    let (mut c, a, _) = cosh(0);
    let x = filled(&mut c, a, 4096, 1);
    let y = filled(&mut c, a, 4096, 1);
    c.downgrade(x, Rights::Ro, Strength::Strong).unwrap();
    assert!(!c.writable_mapping(a, x).unwrap());
    c.downgrade(y, Rights::Ro, Strength::Weak).unwrap();
    assert!(c.writable_mapping(a, y).unwrap());
    assert_eq!(c.to_vec(x).unwrap(), vec![1; 4096]);
    // Freed and reused: writable again, and zero.
    c.decref(x).unwrap();
    let z = c.alloc(a, 4096).unwrap();
    c.write(z, 0, b"ok").unwrap();
    assert_eq!(&c.to_vec(z).unwrap()[..3], b"ok\0");
}
