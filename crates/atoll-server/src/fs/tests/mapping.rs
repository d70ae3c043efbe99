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
    t.ok(S1, USER, Request::Map { ino, to: S1 });
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
    t.ok(S1, USER, Request::Unmap { ino });
    assert_eq!(t.stat(ino), Err(Errno::ENOENT));
    assert_eq!(t.stats().blocks_used, 6);
}

#[test]
fn blocks_cut_by_truncate_or_punch_while_mapped_go_to_no_file_until_unmap() {
    let mut t = server(10);
    let (d, ino, held) = mapped_file(&mut t, "m", 4);
    t.setattr(
        USER,
        ino,
        SetAttr {
            size: Some(BS),
            ..SetAttr::NONE
        },
    )
    .unwrap();
    t.ok(
        S1,
        USER,
        Request::Fallocate {
            ino,
            mode: (libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE) as u32,
            offset: 0,
            len: BS,
        },
    );
    // Not even the file itself reuses them: a stale page of offset 8192
    // must not become another offset of it.
    let regrown = write_blocks(&mut t, S1, d, 0, 4).unwrap();
    assert!(disjoint(&held, &regrown));
    let others = fill_cache(&mut t);
    assert!(disjoint(&held, &others));
    assert_eq!(t.stats().blocks_used, 10);
    t.ok(S1, USER, Request::Unmap { ino });
    // Still open: parked for this inode's own use (Hare §3.3.1).
    assert_eq!(t.stats().blocks_used, 10);
    t.close(S1, d);
    assert_eq!(t.stats().blocks_used, 10 - 4);
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
    t.ok(S1, USER, Request::Map { ino, to: S2 });
    t.close(S1, d);
    t.unlink(ROOT, "m", UnlinkKind::NonDirectory).unwrap();
    t.ok(S1, USER, Request::Unmap { ino });
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
    // No reference, no blocks.
    let blocks = || Request::MapBlocks {
        ino,
        offset: 0,
        len: BS,
        allocate: true,
    };
    assert_eq!(t.err(S1, USER, blocks()), Errno::EBADF);
    // S2 has no descriptor of it, S1 maps nothing it could pass on.
    assert_eq!(t.err(S2, USER, Request::Map { ino, to: S2 }), Errno::EBADF);
    assert_eq!(t.err(S1, USER, Request::Map { ino, to: S3 }), Errno::EBADF);
    assert_eq!(t.err(S1, USER, Request::Unmap { ino }), Errno::EINVAL);
    t.ok(S1, USER, Request::Map { ino, to: S1 });
    t.ok(S1, USER, blocks());
    // References count: two maps, two unmaps.
    t.ok(S1, USER, Request::Map { ino, to: S1 });
    t.close(S1, d);
    t.unlink(ROOT, "m", UnlinkKind::NonDirectory).unwrap();
    t.ok(S1, USER, Request::Unmap { ino });
    assert_eq!(t.stats().blocks_used, 1);
    t.ok(S1, USER, Request::Unmap { ino });
    assert_eq!(t.stats().blocks_used, 0);
}
