//! Tests of the control block: members, load, space, sizes, watches,
//! doorbells.

use super::*;
use std::os::fd::AsFd;

/// The member count is one word every mapping sees: it only grows,
/// stays within the room, and a member's words past the boot count
/// are there from the start (a joining server needs no new block).
/// A reader that sees the count also sees what was written for the
/// member before it was published (release/acquire).
#[test]
fn members_are_published_to_every_mapping_and_only_grow() {
    let (fd, a) = Control::create_with_room(1, 8).unwrap();
    let b = Control::map(fd.as_fd()).unwrap();
    assert_eq!((b.members(), b.servers()), (1, 8));
    assert!(Control::create_with_room(9, 8).is_err());
    assert!(Control::create_with_room(0, 8).is_err());
    b.publish_load(5, 7);
    a.publish_members(6);
    a.publish_members(2);
    assert_eq!(b.members(), 6, "a smaller count is ignored");
    a.publish_members(100);
    assert_eq!(b.members(), 8, "never past the room");
    assert_eq!(a.load(5), 7);
    let (fd, c) = Control::create_with_room(1, 4).unwrap();
    let c = std::sync::Arc::new(c);
    let reader = {
        let d = Control::map(fd.as_fd()).unwrap();
        std::thread::spawn(move || {
            while d.members() < 3 {
                std::hint::spin_loop();
            }
            d.generation(2)
        })
    };
    c.advance_generation(2);
    c.publish_members(3);
    assert_eq!(reader.join().unwrap(), 1, "made before it was published");
}

#[test]
fn control_maps_with_the_same_servers_and_load_words() {
    let (fd, a) = Control::create(3).unwrap();
    let b = Control::map(fd.as_fd()).unwrap();
    assert_eq!(b.servers(), 3);
    a.publish_load(2, 40);
    a.add_load(2, 2);
    assert_eq!(b.load(2), 42);
    assert_eq!(b.load(0), 0);
    a.gauge(1).set_limit(2);
    assert!(b.gauge(1).try_take(2));
    assert!(!a.gauge(1).try_take(1), "past the limit");
    assert_eq!(a.gauge(1).used(), 2);
    b.gauge(1).give(5);
    assert_eq!(a.gauge(1).used(), 0, "never below zero");
    assert_eq!(a.gauge(0).limit(), 0);
    b.doorbell(1).ring();
    assert_eq!(a.doorbell(1).rings(), 1);
    assert_eq!(a.doorbell(0).rings(), 0);
    // Generations sit between heartbeats and charges, apart from both.
    a.beat(1);
    a.charged(1, 0).store(7, Ordering::Relaxed);
    assert_eq!(b.generation(1), 0, "never started");
    assert_eq!(a.advance_generation(1), 1);
    assert_eq!(a.advance_generation(1), 2);
    assert_eq!(
        (b.generation(1), b.generation(0), b.generation(9)),
        (2, 0, 0)
    );
    assert_eq!(
        (b.beats(1), b.charged(1, 0).load(Ordering::Relaxed)),
        (1, 7)
    );
}

#[test]
fn a_server_core_sits_beside_its_state_without_disturbing_it() {
    let (fd, a) = Control::create(3).unwrap();
    let b = Control::map(fd.as_fd()).unwrap();
    assert_eq!(b.core(1), None, "not published yet");
    a.set_core(1, Some(0));
    a.set_core(2, Some(5));
    assert_eq!(
        (b.core(0), b.core(1), b.core(2), b.core(3)),
        (None, Some(0), Some(5), None)
    );
    assert!(!b.is_down(1) && !b.is_down(2));
    a.set_down(1);
    assert!(b.is_down(1) && !b.is_down(2));
    assert_eq!(b.core(1), Some(0), "down leaves the core as it was");
    a.set_core(2, None);
    assert_eq!(b.core(2), None);
    assert_eq!(b.load(1), 0);
}

#[test]
fn published_space_sits_beside_the_load_without_disturbing_it() {
    let (fd, a) = Control::create(3).unwrap();
    let b = Control::map(fd.as_fd()).unwrap();
    assert_eq!(b.space(1), None, "not published yet");
    a.publish_load(1, 7);
    a.publish_space(1, 4096, -12);
    a.publish_space(2, 4096, 30);
    assert_eq!(
        (b.space(0), b.space(1), b.space(2), b.space(3)),
        (None, Some((4096, -12)), Some((4096, 30)), None)
    );
    assert_eq!((b.load(1), b.load(2)), (7, 0));
    a.publish_load(1, 8);
    assert_eq!(b.space(1), Some((4096, -12)));
    a.gauge(GAUGE_INODES).set_limit(100);
    a.gauge(GAUGE_NAMES).set_limit(100);
    assert!(a.gauge(GAUGE_INODES).try_take(3));
    assert!(a.gauge(GAUGE_NAMES).try_take(5));
    assert_eq!(b.files(), (100, 95), "the more of inodes and names");
}

/// A published size is read through every mapping, only for its
/// inode, only while the incarnation that wrote it serves.
#[test]
fn published_sizes_hold_for_their_inode_and_incarnation_only() {
    let (fd, a) = Control::create(3).unwrap();
    let b = Control::map(fd.as_fd()).unwrap();
    let g = a.advance_generation(2);
    let ino = (2u64 << 58) | 77;
    assert_eq!(b.published_size(2, ino), None, "nothing published");
    a.size_slot(2, slot_of(ino)).publish(ino, 8192, g);
    assert_eq!(b.published_size(2, ino), Some(8192));
    assert_eq!(b.published_size(1, ino), None, "another server's board");
    assert_eq!(b.published_size(2, ino + 1), None, "another inode");
    assert_eq!(b.published_size(9, ino), None, "out of range");
    a.advance_generation(2);
    assert_eq!(b.published_size(2, ino), None, "a rebuilt server's");
    let g = b.generation(2);
    a.size_slot(2, slot_of(ino)).publish(ino, 100, g);
    assert_eq!(b.published_size(2, ino), Some(100));
    a.set_down(2);
    assert_eq!(b.published_size(2, ino), None, "a dead server's");
    // The board is past everything else: the gauges are untouched.
    assert_eq!(
        (a.gauge(GAUGES - 1).used(), a.load(2), a.beats(2)),
        (0, 0, 0)
    );
    a.size_slot(0, SIZE_SLOTS - 1).publish(1, 2, 3);
    a.size_slot(2, SIZE_SLOTS - 1).publish(1, 2, 3);
}

#[test]
fn published_watches_sit_beside_load_and_space() {
    let (fd, a) = Control::create(2).unwrap();
    let b = Control::map(fd.as_fd()).unwrap();
    assert_eq!(
        (b.watches(0), b.watches(1), b.watches(2)),
        (None, None, None)
    );
    a.publish_load(1, 9);
    a.publish_space(1, 4096, -3);
    a.publish_watches(1, 0);
    assert_eq!((b.watches(0), b.watches(1)), (None, Some(0)));
    a.publish_watches(0, 5);
    a.publish_watches(1, 2);
    assert_eq!((b.watches(0), b.watches(1)), (Some(5), Some(2)));
    assert_eq!((b.load(1), b.space(1)), (9, Some((4096, -3))));
    a.publish_space(1, 4096, 7);
    a.publish_load(1, 10);
    assert_eq!(b.watches(1), Some(2), "the other words leave it alone");
    assert_eq!(
        (b.served(0), b.served(1), b.served(2)),
        (Some(0), Some(0), None)
    );
    a.count_served(1);
    a.count_served(1);
    a.publish_watches(1, 3);
    assert_eq!((b.served(0), b.served(1)), (Some(0), Some(2)));
    assert_eq!((b.watches(1), b.space(1)), (Some(3), Some((4096, 7))));
}

#[test]
fn control_refuses_bad_server_counts_and_foreign_files() {
    assert!(Control::create(0).is_err());
    assert!(Control::create(atoll_proto::MAX_SERVERS + 1).is_err());
    let (fd, _r) = SharedRegion::create("not-control", 4096).unwrap();
    assert!(Control::map(fd.as_fd()).is_err());
}

#[test]
fn doorbell_wait_returns_for_rings_before_and_during_the_wait() {
    let (_fd, c) = Control::create(1).unwrap();
    let d = c.doorbell(0);
    d.ring(); // before any wait: the first wait returns at once
    d.wait(PollMode::Block);
    for mode in [PollMode::Block, PollMode::Adaptive, PollMode::Spin] {
        let before = d.rings();
        std::thread::scope(|s| {
            s.spawn(|| d.ring());
            while d.rings() == before {
                d.wait(mode);
            }
        });
    }
}

#[test]
fn rings_the_server_has_not_looked_at_are_unseen() {
    let (_fd, c) = Control::create(1).unwrap();
    let d = c.doorbell(0);
    assert!(!d.unseen(), "a fresh doorbell owes nothing");
    d.ring();
    assert!(d.unseen());
    d.mark_seen(d.rings()); // a turn starts: this turn polls for it
    assert!(!d.unseen());
    d.ring();
    d.wait(PollMode::Block); // returns at once, and has seen it
    assert!(!d.unseen());
}
