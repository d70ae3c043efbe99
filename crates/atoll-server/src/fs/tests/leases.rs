//! The lease board (`fs::leases`): a file takes its slot when it is read
//! by message; its version moves at every write grant, size change and
//! change of its block map, and reads are allowed without a message only
//! while a read would leave the atime alone. (Every request of every test
//! also ends with `check_lease_board`, which fails on a map change that
//! no new version followed, or on reads allowed that the inode forbids.)

use super::*;
use crate::fs::leases::NOATIME_ONLY;

fn read_at(t: &mut T, d: DescId, len: u64, off: u64) -> Own {
    t.ok(
        S1,
        USER,
        Request::Read {
            desc: d,
            len,
            offset: Some(off),
        },
    )
}

fn lease(t: &T, ino: InodeId) -> (u64, u64) {
    t.fs.published_lease(ino).expect("a held slot")
}

#[test]
fn a_read_takes_the_slot_and_every_change_moves_the_version() {
    let mut t = server(64);
    let (d, ino) = t.create(ROOT, "f");
    t.write(S1, d, &[7; 10_000], Some(0)).unwrap();
    assert_eq!(t.fs.published_lease(ino), None, "nobody read it yet");
    read_at(&mut t, d, 100, 0);
    let (v1, until1) = lease(&t, ino);
    assert!(
        until1 > NOATIME_ONLY,
        "the read moved the atime past mtime and ctime"
    );
    // Reads change nothing a block list depends on.
    read_at(&mut t, d, 100, 50);
    assert_eq!(lease(&t, ino), (v1, until1));
    // An overwrite in place: a grant, a new version, and the atime is
    // stale now (relatime), so reads must go by message.
    let r = t.ok(
        S1,
        USER,
        Request::Write {
            desc: d,
            len: 10,
            offset: Some(0),
            fsize: None,
        },
    );
    assert!(matches!(r, Own::Extents(0, 10, _)), "{r:?}");
    let (v2, until2) = lease(&t, ino);
    assert!(v2 > v1);
    assert_eq!(until2, NOATIME_ONLY, "a read now moves the atime");
    // The read by message moves it, and allows reads again.
    read_at(&mut t, d, 1, 0);
    let (v3, until3) = lease(&t, ino);
    assert_eq!(v3, v2, "an atime is no block list");
    assert!(until3 > NOATIME_ONLY);
    // Truncation down, up, fallocate, a punched hole: new versions each.
    let mut last = v3;
    let size = |n| SetAttr {
        size: Some(n),
        ..SetAttr::NONE
    };
    let mut moved = |t: &mut T, what: &str| {
        let (v, _) = lease(t, ino);
        assert!(v > last, "{what} left version {v}");
        last = v;
    };
    t.setattr(USER, ino, size(5000)).unwrap();
    moved(&mut t, "a truncation");
    t.setattr(USER, ino, size(3 * 4096)).unwrap();
    moved(&mut t, "an extension");
    t.ok(
        S1,
        USER,
        Request::Fallocate {
            ino,
            mode: 0,
            offset: 0,
            len: 8 * 4096,
        },
    );
    moved(&mut t, "fallocate");
    t.ok(
        S1,
        USER,
        Request::Fallocate {
            ino,
            mode: FALLOC_KEEP_SIZE | 0x02, // FALLOC_FL_PUNCH_HOLE
            offset: 4096,
            len: 4096,
        },
    );
    moved(&mut t, "a punched hole");
}

#[test]
fn a_status_change_stops_reads_without_a_message_and_a_freed_file_leaves() {
    let mut t = server(64);
    let (d, ino) = t.create(ROOT, "f");
    t.write(S1, d, &[1; 3000], Some(0)).unwrap();
    read_at(&mut t, d, 10, 0);
    assert!(lease(&t, ino).1 > NOATIME_ONLY);
    // chmod moves the ctime: the next read moves the atime.
    t.setattr(
        USER,
        ino,
        SetAttr {
            perm: Some(0o600),
            ..SetAttr::NONE
        },
    )
    .unwrap();
    assert_eq!(lease(&t, ino).1, NOATIME_ONLY);
    read_at(&mut t, d, 10, 0);
    assert!(lease(&t, ino).1 > NOATIME_ONLY);
    // An unlink moves the ctime too (the link count).
    t.unlink(ROOT, "f", UnlinkKind::NonDirectory).unwrap();
    assert_eq!(lease(&t, ino).1, NOATIME_ONLY, "unlinked: a stale atime");
    read_at(&mut t, d, 10, 0);
    assert!(lease(&t, ino).1 > NOATIME_ONLY, "still the open file's");
    t.close(S1, d);
    assert_eq!(t.fs.published_lease(ino), None, "freed");
}

#[test]
fn an_o_trunc_open_revokes_the_blocks_a_reader_knows() {
    let mut t = server(64);
    let (d, ino) = t.create(ROOT, "f");
    t.write(S1, d, &[1; 9000], Some(0)).unwrap();
    read_at(&mut t, d, 9000, 0);
    let (v, _) = lease(&t, ino);
    let (_z, attr) = t
        .open_as(S1, USER, ROOT, "f", RW | libc::O_TRUNC as u32, 0)
        .unwrap();
    assert_eq!(attr.size, 0);
    assert!(lease(&t, ino).0 > v);
}

#[test]
fn a_new_incarnation_trusts_no_lease_the_old_one_published() {
    let mut t = server(64);
    let (d, ino) = t.create(ROOT, "f");
    t.write(S1, d, b"12345", Some(0)).unwrap();
    let (_fd, control) = atoll_msg::Control::create(1).unwrap();
    let control = std::rc::Rc::new(control);
    let g = control.advance_generation(0);
    t.fs.attach_size_board(control.clone(), g);
    read_at(&mut t, d, 5, 0);
    assert!(control.lease_begin(0, ino.0).is_some());
    control.advance_generation(0);
    assert!(
        control.lease_begin(0, ino.0).is_none(),
        "an old incarnation's"
    );
    t.fs.attach_size_board(control.clone(), control.generation(0));
    assert!(control.lease_begin(0, ino.0).is_none(), "until read again");
    read_at(&mut t, d, 5, 0);
    assert!(control.lease_begin(0, ino.0).is_some());
}
