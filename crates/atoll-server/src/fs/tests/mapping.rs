//! Mappings hold their inode's blocks (`fs::mapping`).

use super::*;

const S3: SessionId = SessionId(3);

/// Reserve a write of `blocks` whole blocks at `off`: the cache blocks
/// granted.
fn write_blocks(
    t: &mut T,
    s: SessionId,
    d: DescId,
    off: u64,
    blocks: u64,
) -> Result<Vec<u32>, Errno> {
    match t.call(
        s,
        USER,
        Request::Write {
            desc: d,
            len: blocks * BS,
            offset: Some(off),
            fsize: None,
        },
    ) {
        Own::Extents(_, _, e) => Ok(block_list(&e)),
        Own::Err(e) => Err(e),
        other => panic!("{other:?}"),
    }
}

fn block_list(e: &[Extent]) -> Vec<u32> {
    e.iter()
        .filter(|e| e.block != u32::MAX)
        .flat_map(|e| e.block..e.block + e.len.div_ceil(BS) as u32)
        .collect()
}

/// Cache blocks `MapBlocks` hands to `s` for the whole file.
fn mapped_blocks(t: &mut T, s: SessionId, ino: InodeId) -> Vec<u32> {
    let Own::Extents(_, _, e) = t.ok(
        s,
        USER,
        Request::MapBlocks {
            ino,
            offset: 0,
            len: 1 << 20,
            allocate: false,
        },
    ) else {
        panic!()
    };
    block_list(&e)
}

/// A file of `blocks` blocks, open in S1 and mapped by S1.
fn mapped_file(t: &mut T, name: &str, blocks: u64) -> (DescId, InodeId, Vec<u32>) {
    let (d, ino) = t.create(ROOT, name);
    write_blocks(t, S1, d, 0, blocks).unwrap();
    t.ok(S1, USER, map_req(ino, S1, 1));
    let b = mapped_blocks(t, S1, ino);
    assert_eq!(b.len() as u64, blocks);
    (d, ino, b)
}

/// Other files take every block left (as a program filling the space
/// would); the blocks they got.
fn fill_cache(t: &mut T) -> Vec<u32> {
    let mut got = vec![];
    for n in 0.. {
        let (d, _) = t.create(ROOT, &format!("other{n}"));
        let w = write_blocks(t, S1, d, 0, 1);
        t.close(S1, d);
        match w {
            Ok(b) => got.extend(b),
            Err(e) => {
                assert_eq!(e, Errno::ENOSPC);
                return got;
            }
        }
    }
    unreachable!()
}

fn disjoint(a: &[u32], b: &[u32]) -> bool {
    a.iter().all(|x| !b.contains(x))
}

#[test]
fn blocks_of_a_mapped_file_are_not_reused_after_unlink_and_close() {
    let mut t = server(8);
    let (d, ino, held) = mapped_file(&mut t, "m", 2);
    t.close(S1, d);
    t.unlink(ROOT, "m", UnlinkKind::NonDirectory).unwrap();
    assert_eq!(t.stats().blocks_used, 2, "the mapping keeps the inode");
    let others = fill_cache(&mut t);
    assert_eq!(others.len(), 6);
    assert!(disjoint(&held, &others));
    t.ok(S1, USER, unmap_req(ino, 1));
    assert_eq!(t.stat(ino), Err(Errno::ENOENT));
    assert_eq!(t.stats().blocks_used, 6);
}

fn truncate(t: &mut T, ino: InodeId, size: u64) {
    let set = SetAttr {
        size: Some(size),
        ..SetAttr::NONE
    };
    t.setattr(USER, ino, set).unwrap();
}

fn punch(t: &mut T, ino: InodeId, offset: u64, len: u64) {
    let mode = (libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE) as u32;
    let req = Request::Fallocate {
        ino,
        mode,
        offset,
        len,
    };
    t.ok(S1, USER, req);
}

/// The `mappings.retained_blocks` gauge of `atoll status`.
fn retained(t: &T) -> u64 {
    let counters = t.stats().counters;
    counters
        .iter()
        .find(|(name, _)| name == "mappings.retained_blocks")
        .map_or(0, |c| c.1)
}

#[test]
fn blocks_cut_by_truncate_or_punch_while_mapped_stay_at_their_offsets_and_go_to_no_other_file() {
    let mut t = server(10);
    let (d, ino, held) = mapped_file(&mut t, "m", 4);
    truncate(&mut t, ino, BS);
    punch(&mut t, ino, 0, BS);
    assert_eq!(t.stat(ino).unwrap().blocks, 0, "holes and past the end");
    assert_eq!(retained(&t), 4);
    assert_eq!(t.stats().blocks_used, 4);
    let others = fill_cache(&mut t);
    assert_eq!(others.len(), 6);
    assert!(disjoint(&held, &others));
    // Regrown, the file writes into the very blocks the mapping shows
    // (Linux: one page per offset), even with the pool empty.
    let regrown = write_blocks(&mut t, S1, d, 0, 4).unwrap();
    assert_eq!(regrown, held);
    assert_eq!(retained(&t), 0);
    assert_eq!(t.stat(ino).unwrap().blocks, 4 * BS / 512);
    t.ok(S1, USER, unmap_req(ino, 1));
    assert_eq!(t.stats().blocks_used, 10, "data stays");
}

#[test]
fn retained_blocks_are_freed_after_the_last_unmap_of_any_session() {
    let mut t = server(8);
    let (d, ino, _) = mapped_file(&mut t, "m", 4);
    t.ok(S1, USER, map_req(ino, S2, 1)); // a forked child
    truncate(&mut t, ino, 0);
    assert_eq!(retained(&t), 4);
    t.ok(S1, USER, unmap_req(ino, 1));
    assert_eq!(t.stats().blocks_used, 4, "the child still maps them");
    t.fs.session_closed(S2);
    assert_eq!(retained(&t), 0);
    // Still open: parked for this inode's own use (Hare §3.3.1).
    assert_eq!(t.stats().blocks_used, 4);
    t.close(S1, d);
    assert_eq!(t.stats().blocks_used, 0);
}

#[test]
fn a_shared_mapping_of_holes_gets_retained_blocks_that_a_write_fills() {
    let mut t = server(8);
    let (d, ino) = t.create(ROOT, "m");
    truncate(&mut t, ino, 2 * BS);
    t.ok(S1, USER, map_req(ino, S1, 1));
    // Two holes and one page past the end, as `mmap` of 3 pages asks: the
    // page past the end is not the file's (the client makes it fault).
    let req = Request::MapBlocks {
        ino,
        offset: 0,
        len: 3 * BS,
        allocate: true,
    };
    let Own::Extents(_, len, e) = t.ok(S1, USER, req) else {
        panic!()
    };
    let shown = block_list(&e);
    assert_eq!((len, shown.len()), (2 * BS, 2));
    assert_eq!((retained(&t), t.stat(ino).unwrap().blocks), (2, 0));
    let written = write_blocks(&mut t, S1, d, BS, 1).unwrap();
    assert_eq!(written, [shown[1]], "the write lands in the mapped block");
    assert_eq!(retained(&t), 1);
    // More holes than free blocks: the mapping fails whole.
    truncate(&mut t, ino, 100 * BS);
    let huge = Request::MapBlocks {
        ino,
        offset: 0,
        len: 100 * BS,
        allocate: true,
    };
    assert_eq!(t.err(S1, USER, huge), Errno::ENOMEM);
    assert_eq!(t.stats().blocks_used, 2);
    t.ok(S1, USER, unmap_req(ino, 1));
    t.close(S1, d);
    assert_eq!(t.stats().blocks_used, 1, "only the written block stays");
    assert_eq!(t.stat(ino).unwrap().blocks, BS / 512);
}

#[test]
fn a_dead_session_releases_its_mappings() {
    let mut t = server(8);
    let (d, ino, _) = mapped_file(&mut t, "m", 3);
    t.close(S1, d);
    t.unlink(ROOT, "m", UnlinkKind::NonDirectory).unwrap();
    assert_eq!(t.stats().blocks_used, 3);
    t.fs.session_closed(S1);
    assert_eq!(t.stat(ino), Err(Errno::ENOENT));
    assert_eq!(t.stats().blocks_used, 0);
}

#[test]
fn a_forked_child_holds_the_mapping_after_its_parent_unmaps() {
    let mut t = server(8);
    let (d, ino, held) = mapped_file(&mut t, "m", 2);
    t.ok(S1, USER, map_req(ino, S2, 1));
    t.close(S1, d);
    t.unlink(ROOT, "m", UnlinkKind::NonDirectory).unwrap();
    t.ok(S1, USER, unmap_req(ino, 1));
    assert_eq!(t.stats().blocks_used, 2);
    assert!(disjoint(&held, &fill_cache(&mut t)));
    t.fs.session_closed(S2);
    assert_eq!(t.stat(ino), Err(Errno::ENOENT));
    assert_eq!(t.stats().blocks_used, 6);
}

#[test]
fn mapping_needs_an_open_description_or_a_mapping_to_pass_on() {
    let mut t = server(8);
    let (d, ino) = t.create(ROOT, "m");
    truncate(&mut t, ino, BS);
    // No reference, no blocks.
    let blocks = || Request::MapBlocks {
        ino,
        offset: 0,
        len: BS,
        allocate: true,
    };
    assert_eq!(t.err(S1, USER, blocks()), Errno::EBADF);
    // S2 has no descriptor of it, S1 maps nothing it could pass on.
    assert_eq!(t.err(S2, USER, map_req(ino, S2, 1)), Errno::EBADF);
    assert_eq!(t.err(S1, USER, map_req(ino, S3, 1)), Errno::EBADF);
    t.ok(S1, USER, map_req(ino, S1, 1));
    t.ok(S1, USER, blocks());
    // References count: two mappings, two unmaps.
    t.ok(S1, USER, map_req(ino, S1, 2));
    t.close(S1, d);
    t.unlink(ROOT, "m", UnlinkKind::NonDirectory).unwrap();
    t.ok(S1, USER, unmap_req(ino, 1));
    assert_eq!(t.stats().blocks_used, 1);
    t.ok(S1, USER, unmap_req(ino, 2));
    assert_eq!(t.stats().blocks_used, 0);
}

/// A `Map` or `Unmap` sent again (its server died after applying it, and
/// the client got `EIO`; fos §3.5) changes nothing: a mapping counts once
/// however often it is named, and an unmap drops only its own mapping.
#[test]
fn a_mapping_named_twice_counts_once_and_unmaps_once() {
    let mut t = server(8);
    let (d, ino, held) = mapped_file(&mut t, "m", 2);
    t.ok(S1, USER, map_req(ino, S1, 1)); // mapping 1 again
    t.ok(S1, USER, map_req(ino, S1, 2));
    t.ok(S1, USER, map_req(ino, S2, 1)); // a forked child's, twice
    t.ok(S1, USER, map_req(ino, S2, 1));
    t.close(S1, d);
    t.unlink(ROOT, "m", UnlinkKind::NonDirectory).unwrap();
    // Unmapping one mapping twice keeps the other; one never made (or
    // already gone) changes nothing.
    t.ok(S1, USER, unmap_req(ino, 1));
    t.ok(S1, USER, unmap_req(ino, 1));
    t.ok(S1, USER, unmap_req(ino, 7));
    assert_eq!(
        t.stats().blocks_used,
        2,
        "mapping 2 and the child's hold it"
    );
    assert!(disjoint(&held, &fill_cache(&mut t)));
    t.ok(S1, USER, unmap_req(ino, 2));
    t.ok(S1, USER, unmap_req(ino, 2));
    assert!(t.stat(ino).is_ok(), "the child's mapping keeps the inode");
    t.fs.session_closed(S2);
    assert_eq!(t.stat(ino), Err(Errno::ENOENT));
}
