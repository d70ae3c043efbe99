//! Opening and data: reads, writes, `O_APPEND`, sparse files, truncate,
//! `fallocate`, `ENOSPC`, block maps.

use super::*;

#[test]
fn created_file_reads_back_what_was_written() {
    let mut t = server(64);
    let (d, ino) = t.create(ROOT, "f");
    assert_eq!(t.write(S1, d, b"hello world", None), Ok(11));
    assert_eq!(t.read(S1, d, 100, Some(0)).unwrap(), b"hello world");
    // Shared offset advanced by the write; a read at it is at EOF.
    assert_eq!(t.read(S1, d, 100, None).unwrap(), b"");
    let a = t.stat(ino).unwrap();
    assert_eq!((a.size, a.blocks, a.perm, a.uid), (11, 8, 0o644, 1000));
    assert_eq!(t.lookup(ROOT, "f"), Ok(ino));
}

#[test]
fn write_reserves_zeroed_blocks_the_client_fills() {
    let mut t = server(8);
    for b in 0..8 {
        t.fs.cache.store.fill(b, 0xee); // stale bytes from an earlier life
    }
    let (d, _) = t.create(ROOT, "f");
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
    let Own::Extents(off, len, ext) = r else {
        panic!()
    };
    assert_eq!((off, len), (100, 5000));
    assert_eq!(ext.len(), 1, "two fresh contiguous blocks merge: {ext:?}");
    // Another process (sharing the description) reads meanwhile: until the
    // writer says its bytes are in, the new end is not readable.
    t.ok(S1, USER, share_req(d, S2, 0));
    assert_eq!(t.read(S2, d, 200, Some(0)).unwrap_err(), RETRY);
    let ino = t.fs.descs[&d].ino;
    let done = || Request::WriteDone {
        ino,
        offset: 100,
        len: 5000,
    };
    // Only the writer can say so.
    t.ok(S2, USER, done());
    assert_eq!(t.read(S2, d, 200, Some(0)).unwrap_err(), RETRY);
    // Bytes below the old end (here a hole) never wait.
    assert_eq!(t.read(S2, d, 100, Some(0)).unwrap(), vec![0; 100]);
    t.ok(S1, USER, done());
    // Bytes the client did not write read as zeros.
    assert_eq!(t.read(S1, d, 200, Some(0)).unwrap(), vec![0; 200]);
}

#[test]
fn open_excl_on_existing_file_or_dangling_symlink_is_eexist() {
    let mut t = server(8);
    t.create(ROOT, "f");
    t.symlink(ROOT, "dangling", "nowhere");
    let excl = RW | CREAT | libc::O_EXCL as u32;
    assert_eq!(
        t.open_as(S1, USER, ROOT, "f", excl, 0o644).unwrap_err(),
        Errno::EEXIST
    );
    assert_eq!(
        t.open_as(S1, USER, ROOT, "dangling", excl, 0o644)
            .unwrap_err(),
        Errno::EEXIST
    );
}

#[test]
fn symlinks_are_followed_by_the_client_and_refused_with_nofollow() {
    let mut t = server(8);
    let l = t.symlink(ROOT, "l", "target/path");
    let r = t.call(
        S1,
        USER,
        Request::Open {
            dir: ROOT,
            name: b"l",
            flags: 0,
            perm: 0,
            umask: 0,
            inherit: atoll_proto::Inherit::Unread,
        },
    );
    assert_eq!(r, Own::Symlink(l, b"target/path".to_vec()));
    let nofollow = libc::O_NOFOLLOW as u32;
    assert_eq!(
        t.open_as(S1, USER, ROOT, "l", nofollow, 0).unwrap_err(),
        Errno::ELOOP
    );
    // A directory is asked for before the link is refused, as Linux.
    let dir = libc::O_DIRECTORY as u32;
    for extra in [0, libc::O_PATH as u32] {
        assert_eq!(
            t.open_as(S1, USER, ROOT, "l", nofollow | dir | extra, 0)
                .unwrap_err(),
            Errno::ENOTDIR
        );
    }
    // O_PATH|O_NOFOLLOW opens the link itself.
    let (_, a) = t
        .open_as(S1, USER, ROOT, "l", nofollow | libc::O_PATH as u32, 0)
        .unwrap();
    assert_eq!(a.ftype, FileType::Symlink);
    assert_eq!(
        t.ok(S1, USER, Request::ReadLink { ino: l }),
        Own::Bytes(b"target/path".to_vec())
    );
    let e = t.err(
        S1,
        USER,
        Request::OpenInode {
            ino: l,
            flags: 0,
            via: None,
        },
    );
    assert_eq!(e, Errno::ELOOP);
}

#[test]
fn o_directory_o_trunc_and_access_modes_follow_linux() {
    let mut t = server(8);
    let (d, f) = t.create(ROOT, "f");
    t.write(S1, d, b"data", None).unwrap();
    let dir = t.mkdir(ROOT, "d");
    let odir = libc::O_DIRECTORY as u32;
    assert_eq!(
        t.open_as(S1, USER, ROOT, "f", odir, 0).unwrap_err(),
        Errno::ENOTDIR
    );
    assert_eq!(
        t.open_as(S1, USER, ROOT, "d", RW, 0).unwrap_err(),
        Errno::EISDIR
    );
    assert!(t.open_as(S1, USER, ROOT, "d", odir, 0).is_ok());
    // O_TRUNC asks for write access even with O_RDONLY.
    assert_eq!(
        t.open_as(S1, USER, ROOT, "d", libc::O_TRUNC as u32, 0)
            .unwrap_err(),
        Errno::EISDIR
    );
    assert_eq!(
        t.open_as(S1, USER, ROOT, "new", CREAT | odir, 0o644)
            .unwrap_err(),
        Errno::EINVAL
    );
    let _ = dir;
    // O_TRUNC needs write permission, then empties the file.
    t.setattr(USER, f, perm_only(0o444)).unwrap();
    let trunc = libc::O_TRUNC as u32;
    assert_eq!(
        t.open_as(S1, USER, ROOT, "f", trunc, 0).unwrap_err(),
        Errno::EACCES
    );
    t.setattr(USER, f, perm_only(0o644)).unwrap();
    t.open_as(S1, USER, ROOT, "f", trunc, 0).unwrap();
    assert_eq!(t.stat(f).unwrap().size, 0);
    // A read-only description refuses writes; write-only refuses reads.
    let (ro, _) = t.open_as(S1, USER, ROOT, "f", 0, 0).unwrap();
    assert_eq!(t.write(S1, ro, b"x", None), Err(Errno::EBADF));
    let (wo, _) = t
        .open_as(S1, USER, ROOT, "f", libc::O_WRONLY as u32, 0)
        .unwrap();
    assert_eq!(t.read(S1, wo, 1, None), Err(Errno::EBADF));
}

#[test]
fn new_file_opens_with_requested_access_whatever_its_mode() {
    let mut t = server(8);
    let (d, a) = t.open_as(S1, USER, ROOT, "ro", RW | CREAT, 0o444).unwrap();
    assert_eq!(a.perm, 0o444);
    assert_eq!(t.write(S1, d, b"ok", None), Ok(2));
    // ftruncate through that descriptor works too.
    t.setattr(
        USER,
        a.ino,
        SetAttr {
            size: Some(1),
            ..SetAttr::NONE
        },
    )
    .unwrap();
}

#[test]
fn o_append_writes_land_at_end_of_file_atomically() {
    let mut t = server(16);
    let (d1, ino) = t.create(ROOT, "log");
    let app = libc::O_WRONLY as u32 | libc::O_APPEND as u32;
    let (a1, _) = t.open_as(S1, USER, ROOT, "log", app, 0).unwrap();
    let (a2, _) = t.open_as(S2, USER, ROOT, "log", app, 0).unwrap();
    t.write(S1, a1, b"one\n", None).unwrap();
    t.write(S2, a2, b"two\n", Some(0)).unwrap(); // pwrite still appends
    t.write(S1, a1, b"three\n", None).unwrap();
    assert_eq!(t.read(S1, d1, 100, Some(0)).unwrap(), b"one\ntwo\nthree\n");
    assert_eq!(t.stat(ino).unwrap().size, 14);
}

#[test]
fn sparse_files_read_zeros_and_count_only_allocated_blocks() {
    let mut t = server(16);
    let (d, ino) = t.create(ROOT, "sparse");
    t.write(S1, d, b"end", Some(10 * 4096)).unwrap();
    let a = t.stat(ino).unwrap();
    assert_eq!((a.size, a.blocks), (10 * 4096 + 3, 8));
    assert_eq!(t.read(S1, d, 8, Some(4096)).unwrap(), vec![0; 8]);
    let r = t.ok(
        S1,
        USER,
        Request::Read {
            desc: d,
            len: 11 * 4096,
            offset: Some(0),
        },
    );
    let Own::Extents(_, len, ext) = r else {
        panic!()
    };
    assert_eq!(len, 10 * 4096 + 3);
    assert_eq!(ext[0].block, u32::MAX);
    assert_eq!(ext[0].len, 10 * 4096);
    let seek = |t: &mut T, off, whence: i32| {
        t.call(
            S1,
            USER,
            Request::Seek {
                desc: d,
                offset: off,
                whence: whence as u32,
            },
        )
    };
    assert_eq!(seek(&mut t, 0, libc::SEEK_DATA), Own::Offset(10 * 4096));
    assert_eq!(seek(&mut t, 0, libc::SEEK_HOLE), Own::Offset(0));
    assert_eq!(
        seek(&mut t, 10 * 4096, libc::SEEK_HOLE),
        Own::Offset(10 * 4096 + 3)
    );
    assert_eq!(
        seek(&mut t, 50 * 4096, libc::SEEK_DATA),
        Own::Err(Errno::ENXIO)
    );
    assert_eq!(seek(&mut t, -1, libc::SEEK_SET), Own::Err(Errno::EINVAL));
    assert_eq!(seek(&mut t, -3, libc::SEEK_END), Own::Offset(10 * 4096));
}

#[test]
fn truncate_down_then_up_reads_zeros_not_old_bytes() {
    let mut t = server(8);
    let (d, ino) = t.create(ROOT, "f");
    t.write(S1, d, &[7u8; 3000], Some(0)).unwrap();
    let size = |n| SetAttr {
        size: Some(n),
        ..SetAttr::NONE
    };
    t.setattr(USER, ino, size(10)).unwrap();
    t.setattr(USER, ino, size(3000)).unwrap();
    let data = t.read(S1, d, 3000, Some(0)).unwrap();
    assert_eq!(&data[..10], &[7; 10]);
    assert!(data[10..].iter().all(|b| *b == 0));
    // Writing past EOF leaves zeros in between too.
    t.setattr(USER, ino, size(5)).unwrap();
    t.write(S1, d, b"x", Some(100)).unwrap();
    let data = t.read(S1, d, 101, Some(0)).unwrap();
    assert_eq!(&data[..5], &[7; 5]);
    assert!(data[5..100].iter().all(|b| *b == 0));
}

#[test]
fn fallocate_modes_allocate_punch_and_zero() {
    let mut t = server(16);
    let (d, ino) = t.create(ROOT, "f");
    let fa = |t: &mut T, mode, offset, len| {
        t.call(
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
    let Own::Attr(a) = fa(&mut t, 0, 0, 3 * 4096) else {
        panic!()
    };
    assert_eq!((a.size, a.blocks), (3 * 4096, 24));
    let Own::Attr(a) = fa(&mut t, FALLOC_KEEP_SIZE, 3 * 4096, 4096) else {
        panic!()
    };
    assert_eq!((a.size, a.blocks), (3 * 4096, 32));
    t.write(S1, d, &[9u8; 3 * 4096], Some(0)).unwrap();
    let Own::Attr(a) = fa(
        &mut t,
        FALLOC_PUNCH_HOLE | FALLOC_KEEP_SIZE,
        100,
        4096 + 4000,
    ) else {
        panic!()
    };
    assert_eq!(a.blocks, 24, "the one whole block in the range is freed");
    let data = t.read(S1, d, 3 * 4096, Some(0)).unwrap();
    assert_eq!(&data[..100], &[9; 100]);
    assert!(data[100..4096 + 4100].iter().all(|b| *b == 0));
    assert_eq!(data[4096 + 4100], 9);
    fa(&mut t, FALLOC_ZERO_RANGE, 0, 50);
    assert!(t.read(S1, d, 50, Some(0)).unwrap().iter().all(|b| *b == 0));
    assert_eq!(
        fa(&mut t, FALLOC_PUNCH_HOLE, 0, 1),
        Own::Err(Errno::EOPNOTSUPP)
    );
    assert_eq!(fa(&mut t, 0, 0, 0), Own::Err(Errno::EINVAL));
    assert_eq!(fa(&mut t, 0, 0, 100 * 4096), Own::Err(Errno::ENOSPC));
}

#[test]
fn enospc_when_cache_full_and_fs_stays_usable() {
    let mut t = server(4);
    let (d, _) = t.create(ROOT, "big");
    // Four blocks fit, a fifth does not: a short reservation.
    let r = t.ok(
        S1,
        USER,
        Request::Write {
            desc: d,
            len: 5 * 4096,
            offset: None,
            fsize: None,
        },
    );
    assert!(matches!(r, Own::Extents(0, 16384, _)), "{r:?}");
    assert_eq!(t.write(S1, d, b"more", None), Err(Errno::ENOSPC));
    let (d2, _) = t.create(ROOT, "small");
    assert_eq!(t.write(S1, d2, b"x", None), Err(Errno::ENOSPC));
    // Removing the big file (after close) frees its blocks.
    t.close(S1, d);
    t.unlink(ROOT, "big", UnlinkKind::NonDirectory).unwrap();
    assert_eq!(t.write(S1, d2, b"x", None), Ok(1));
    assert_eq!(t.read(S1, d2, 1, Some(0)).unwrap(), b"x");
    assert_eq!(t.stats().blocks_used, 1);
}

#[test]
fn map_blocks_fills_holes_when_asked() {
    let mut t = server(8);
    let (_, ino) = t.create(ROOT, "m");
    t.setattr(
        USER,
        ino,
        SetAttr {
            size: Some(8192),
            ..SetAttr::NONE
        },
    )
    .unwrap();
    t.ok(S1, USER, map_req(ino, S1, 1));
    let map = |t: &mut T, allocate| {
        t.ok(
            S1,
            USER,
            Request::MapBlocks {
                ino,
                offset: 0,
                len: 8192,
                allocate,
            },
        )
    };
    let Own::Extents(_, _, e) = map(&mut t, false) else {
        panic!()
    };
    assert_eq!(e[0].block, u32::MAX);
    let Own::Extents(_, len, e) = map(&mut t, true) else {
        panic!()
    };
    assert_eq!((len, e.len()), (8192, 1));
    assert_ne!(e[0].block, u32::MAX);
}

// ---------------------------------------------------------------- names

#[test]
fn names_longer_than_255_bytes_are_enametoolong() {
    let mut t = server(8);
    let long = "x".repeat(256);
    assert_eq!(
        t.open_as(S1, USER, ROOT, &long, RW | CREAT, 0o644)
            .unwrap_err(),
        Errno::ENAMETOOLONG
    );
    assert_eq!(t.lookup(ROOT, &long), Err(Errno::ENAMETOOLONG));
    t.create(ROOT, &"y".repeat(255));
}

/// One piece of a chained write (`fs::chain`).
fn piece(
    t: &mut T,
    d: DescId,
    c: (u64, u32, bool),
    data: &[u8],
    off: Option<u64>,
    fsize: Option<u64>,
) -> Own {
    t.call(
        S1,
        USER,
        Request::WriteData {
            desc: d,
            data,
            offset: off,
            fsize,
            chain: Some(atoll_proto::Chain {
                id: c.0,
                seq: c.1,
                last: c.2,
            }),
        },
    )
}

#[test]
fn a_chained_write_stops_at_enospc_and_later_pieces_are_skipped() {
    // Four blocks: the first two pieces fit, the third finds no room.
    let mut t = server(4);
    let (d, ino) = t.create(ROOT, "big");
    let data = vec![7u8; 4 * 8192];
    let mut got = vec![];
    for k in 0..4u32 {
        let at = k as usize * 8192;
        let off = Some(at as u64);
        got.push(piece(
            &mut t,
            d,
            (9, k, k == 3),
            &data[at..at + 8192],
            off,
            None,
        ));
    }
    assert_eq!(
        got,
        [
            Own::Written(8192),
            Own::Written(8192),
            Own::Err(Errno::ENOSPC),
            Own::Skipped
        ]
    );
    assert_eq!(t.stat(ino).unwrap().size, 16384);
}

#[test]
fn a_chained_write_is_short_at_the_file_size_limit_and_goes_no_further() {
    let mut t = server(64);
    let (d, ino) = t.create(ROOT, "f");
    let data = vec![1u8; 8192];
    // At the shared offset: each piece lands where the last one ended.
    let lim = Some(10_001);
    assert_eq!(
        piece(&mut t, d, (1, 0, false), &data, None, lim),
        Own::Written(8192)
    );
    assert_eq!(
        piece(&mut t, d, (1, 1, false), &data, None, lim),
        Own::Written(1809)
    );
    assert_eq!(
        piece(&mut t, d, (1, 2, true), &data, None, lim),
        Own::Skipped
    );
    assert_eq!(t.stat(ino).unwrap().size, 10_001);
    // At or past the limit: EFBIG (the client raises SIGXFSZ).
    assert_eq!(
        piece(&mut t, d, (2, 0, true), &data, None, lim),
        Own::Err(Errno::EFBIG)
    );
    // A new chain without the limit goes on from the shared offset.
    assert_eq!(
        piece(&mut t, d, (3, 0, false), &data, None, None),
        Own::Written(8192)
    );
    assert_eq!(
        piece(&mut t, d, (3, 1, true), &data[..5], None, None),
        Own::Written(5)
    );
    assert_eq!(t.stat(ino).unwrap().size, 10_001 + 8192 + 5);
}

#[test]
fn chained_appends_land_one_after_another_at_the_end() {
    let mut t = server(64);
    let (d1, _) = t.create(ROOT, "log");
    t.write(S1, d1, b"head", None).unwrap();
    let app = libc::O_WRONLY as u32 | libc::O_APPEND as u32;
    let (a, _) = t.open_as(S1, USER, ROOT, "log", app, 0).unwrap();
    let data: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
    for (k, part) in data.chunks(8192).enumerate() {
        let last = k == 2;
        let r = piece(&mut t, a, (5, k as u32, last), part, Some(0), None);
        assert_eq!(r, Own::Written(part.len() as u64));
    }
    let mut back = vec![];
    while let Ok(b) = t.read(S1, d1, 8192, Some(back.len() as u64)) {
        if b.is_empty() {
            break;
        }
        back.extend_from_slice(&b);
    }
    assert_eq!(&back[..4], b"head");
    assert_eq!(&back[4..], &data[..]);
}

#[test]
fn pieces_after_the_session_s_chains_were_cut_are_skipped() {
    // A successor answered a request EIO: its outcome is unknown to the
    // client, so no later piece of the write may land.
    let mut t = server(16);
    let (d, ino) = t.create(ROOT, "f");
    let data = vec![3u8; 8192];
    assert_eq!(
        piece(&mut t, d, (4, 0, false), &data, None, None),
        Own::Written(8192)
    );
    t.fs.cut_chains(S1);
    assert_eq!(
        piece(&mut t, d, (4, 1, true), &data, None, None),
        Own::Skipped
    );
    assert_eq!(t.stat(ino).unwrap().size, 8192);
}
