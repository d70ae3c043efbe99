//! The size board (`fs::sizes`): a file takes its slot when its size is
//! asked by message, and every request that changes the size publishes
//! it before its reply. (Every request of every test also ends with
//! `check_size_board`, which fails on a change left unpublished.)

use super::*;

fn seek_end(t: &mut T, d: DescId) -> Own {
    t.call(
        S1,
        USER,
        Request::Seek {
            desc: d,
            offset: 0,
            whence: libc::SEEK_END as u32,
        },
    )
}

#[test]
fn a_size_asked_by_message_takes_its_slot_and_follows_every_change() {
    let mut t = server(64);
    let (d, ino) = t.create(ROOT, "f");
    assert_eq!(t.fs.published_size(ino), None, "nobody asked yet");
    t.write(S1, d, b"hello", Some(0)).unwrap();
    assert_eq!(t.fs.published_size(ino), None, "a write claims nothing");
    assert_eq!(seek_end(&mut t, d), Own::Offset(5));
    assert_eq!(t.fs.published_size(ino), Some(5));
    // A write's grant (extents the client fills) publishes the new end.
    let r = t.ok(
        S1,
        USER,
        Request::Write {
            desc: d,
            len: 5000,
            offset: Some(100),
            fsize: None,
        },
    );
    assert!(matches!(r, Own::Extents(100, 5000, _)), "{r:?}");
    assert_eq!(t.fs.published_size(ino), Some(5100));
    // A write inside the file moves nothing.
    t.write(S1, d, b"x", Some(0)).unwrap();
    assert_eq!(t.fs.published_size(ino), Some(5100));
    // Truncate down and up.
    let size = |n| SetAttr {
        size: Some(n),
        ..SetAttr::NONE
    };
    t.setattr(USER, ino, size(10)).unwrap();
    assert_eq!(t.fs.published_size(ino), Some(10));
    t.setattr(USER, ino, size(70_000)).unwrap();
    assert_eq!(t.fs.published_size(ino), Some(70_000));
    // fallocate: past the end grows it, KEEP_SIZE does not.
    let fa = |t: &mut T, mode, offset, len| {
        t.ok(
            S1,
            USER,
            Request::Fallocate {
                ino,
                mode,
                offset,
                len,
            },
        )
    };
    fa(&mut t, 0, 0, 20 * 4096);
    assert_eq!(t.fs.published_size(ino), Some(20 * 4096));
    fa(&mut t, FALLOC_KEEP_SIZE, 20 * 4096, 4096);
    assert_eq!(t.fs.published_size(ino), Some(20 * 4096));
    // An append's offset is chosen by the server; its end is published.
    let (a, _) = t
        .open_as(S1, USER, ROOT, "f", RW | libc::O_APPEND as u32, 0)
        .unwrap();
    t.write(S1, a, b"tail", None).unwrap();
    assert_eq!(t.fs.published_size(ino), Some(20 * 4096 + 4));
    // O_TRUNC.
    let (z, attr) = t
        .open_as(S1, USER, ROOT, "f", RW | libc::O_TRUNC as u32, 0)
        .unwrap();
    assert_eq!(attr.size, 0);
    assert_eq!(t.fs.published_size(ino), Some(0));
    // The server's answer and the board's agree at every step.
    assert_eq!(seek_end(&mut t, z), Own::Offset(0));
    assert_eq!(t.stat(ino).unwrap().size, 0);
}

#[test]
fn getattr_claims_regular_files_only_and_a_freed_inode_leaves_its_slot() {
    let mut t = server(64);
    let dir = t.mkdir(ROOT, "d");
    t.stat(dir).unwrap();
    assert_eq!(t.fs.published_size(dir), None, "a directory has no end");
    let (d, ino) = t.create(ROOT, "f");
    t.write(S1, d, &[1; 3000], Some(0)).unwrap();
    assert_eq!(t.stat(ino).unwrap().size, 3000);
    assert_eq!(t.fs.published_size(ino), Some(3000));
    // Unlinked but open: still the file's.
    t.unlink(ROOT, "f", UnlinkKind::NonDirectory).unwrap();
    assert_eq!(t.fs.published_size(ino), Some(3000));
    t.close(S1, d);
    assert_eq!(t.fs.published_size(ino), None, "freed");
}

#[test]
fn a_file_taking_a_slot_evicts_the_one_there() {
    let mut t = server(64);
    let mut files = Vec::new();
    // Enough files that two share a slot.
    for n in 0..(atoll_msg::SIZE_SLOTS + 1) {
        let (d, ino) = t.create(ROOT, &format!("f{n}"));
        files.push((d, ino));
        if let Some(&(pd, pino)) = files[..n]
            .iter()
            .find(|(_, i)| atoll_msg::slot_of(i.0) == atoll_msg::slot_of(ino.0))
        {
            t.write(S1, pd, &[1; 10], Some(0)).unwrap();
            assert_eq!(seek_end(&mut t, pd), Own::Offset(10));
            assert_eq!(t.fs.published_size(pino), Some(10));
            assert_eq!(seek_end(&mut t, d), Own::Offset(0));
            assert_eq!(t.fs.published_size(ino), Some(0));
            assert_eq!(t.fs.published_size(pino), None, "evicted");
            // The evicted file's changes go unpublished, and harm nobody.
            t.write(S1, pd, &[1; 10], Some(10)).unwrap();
            assert_eq!(t.fs.published_size(pino), None);
            return;
        }
    }
    panic!("no two files shared a slot");
}

#[test]
fn a_new_incarnation_trusts_nothing_the_old_one_published() {
    let mut t = server(64);
    let (d, ino) = t.create(ROOT, "f");
    t.write(S1, d, b"12345", Some(0)).unwrap();
    let (_fd, control) = atoll_msg::Control::create(1).unwrap();
    let control = std::rc::Rc::new(control);
    let g = control.advance_generation(0);
    t.fs.attach_size_board(control.clone(), g);
    assert_eq!(seek_end(&mut t, d), Own::Offset(5));
    assert_eq!(control.published_size(0, ino.0), Some(5));
    // The server is rebuilt: a new incarnation, a new generation.
    control.advance_generation(0);
    assert_eq!(control.published_size(0, ino.0), None);
    let g = control.generation(0);
    t.fs.attach_size_board(control.clone(), g);
    assert_eq!(control.published_size(0, ino.0), None, "until asked again");
    assert_eq!(seek_end(&mut t, d), Own::Offset(5));
    assert_eq!(control.published_size(0, ino.0), Some(5));
}
