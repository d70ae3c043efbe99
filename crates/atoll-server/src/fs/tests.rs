//! Behaviour of one file server, driven directly (no rings).

use super::space::{FALLOC_KEEP_SIZE, FALLOC_PUNCH_HOLE, FALLOC_ZERO_RANGE};
use super::xattr::{XATTR_CREATE, XATTR_REPLACE};
use super::*;
use crate::store::MemStore;
use atoll_proto::{entry_server, LockSpec, ModeInfo, StatFsInfo};
use proptest::prelude::*;

mod mapping;
mod perm;
mod swap;

use perm::{attrs_of, rename_req};

const S1: SessionId = SessionId(1);
const S2: SessionId = SessionId(2);
const USER: Cred = Cred::of(1000, 1000);
const OTHER: Cred = Cred::of(2000, 2000);
const ROOTC: Cred = Cred::of(0, 0);

/// A reply with owned bytes, for assertions.
#[derive(Debug, PartialEq)]
enum Own {
    Ok,
    Err(Errno),
    Entry(InodeId, FileType),
    Opened(DescId, Attr, bool),
    Symlink(InodeId, Vec<u8>),
    Linked(Option<(InodeId, FileType)>),
    Unlinked(InodeId, FileType, bool),
    Renamed(InodeId, FileType, Option<(InodeId, FileType, bool)>),
    Dirents(Vec<u8>, bool),
    Attr(Attr),
    Bytes(Vec<u8>),
    Extents(u64, u64, Vec<Extent>),
    Written(u64),
    Offset(u64),
    Lock(Option<LockSpec>),
    StatFs(StatFsInfo),
    Stats(ServerStats),
    Pipe(InodeId, DescId, DescId, u32),
    Watch(i32, InodeId, u32),
    Mode(ModeInfo),
    Exported(Vec<u8>, Option<u64>),
    PipeState(atoll_proto::PipeStateInfo),
}

fn own(r: Reply<'_>) -> Own {
    match r {
        Reply::Ok => Own::Ok,
        Reply::Err(e) => Own::Err(e),
        Reply::Entry { ino, ftype } => Own::Entry(ino, ftype),
        Reply::Opened {
            desc,
            attr,
            created,
            ..
        } => Own::Opened(desc, attr, created),
        Reply::Symlink { ino, target } => Own::Symlink(ino, target.to_vec()),
        Reply::Linked { replaced } => Own::Linked(replaced),
        Reply::Unlinked {
            ino,
            ftype,
            freed_here,
        } => Own::Unlinked(ino, ftype, freed_here),
        Reply::Renamed {
            moved,
            ftype,
            replaced,
        } => Own::Renamed(moved, ftype, replaced),
        Reply::Dirents { data, end } => Own::Dirents(data.to_vec(), end),
        Reply::Attr(a) => Own::Attr(a),
        Reply::Target(b) | Reply::Data(b) | Reply::Xattr(b) | Reply::XattrNames(b) => {
            Own::Bytes(b.to_vec())
        }
        Reply::Extents {
            offset,
            len,
            extents,
            ..
        } => Own::Extents(offset, len, extents),
        Reply::Written(n) => Own::Written(n),
        Reply::Offset(n) => Own::Offset(n),
        Reply::Lock(l) => Own::Lock(l),
        Reply::StatFs(s) => Own::StatFs(s),
        Reply::Stats(s) => Own::Stats(s),
        Reply::Watch { wd, ino, mask, .. } => Own::Watch(wd, ino, mask),
        Reply::Pipe {
            ino,
            read,
            write,
            header,
            ..
        } => Own::Pipe(ino, read, write, header),
        Reply::DirMode(m) => Own::Mode(m),
        Reply::Exported { data, next } => Own::Exported(data.to_vec(), next),
        Reply::PipeState(p) => Own::PipeState(p),
    }
}

struct T {
    fs: FileServer<MemStore>,
    out: Vec<u8>,
}

fn server(blocks: u32) -> T {
    server_n(0, 1, blocks)
}

fn server_n(index: usize, nservers: usize, blocks: u32) -> T {
    let cfg = FsConfig {
        index,
        nservers,
        first_block: 0,
        nblocks: blocks,
        root_owner: USER,
        core: -1,
        track_lookups: true,
        limits: crate::fs::Limits::for_memory(1 << 30),
    };
    T {
        fs: FileServer::new(cfg, MemStore::new(blocks as usize)),
        out: Vec::new(),
    }
}

const RW: u32 = libc::O_RDWR as u32;
const CREAT: u32 = libc::O_CREAT as u32;

impl T {
    fn call(&mut self, s: SessionId, c: Cred, req: Request<'_>) -> Own {
        own(self.fs.handle(s, c, req, &mut self.out))
    }
    /// A request carrying attributes of inodes owned elsewhere.
    fn callv(&mut self, s: SessionId, c: Cred, v: &[Vouched], req: Request<'_>) -> Own {
        own(self.fs.handle_vouched(s, c, v, req, &mut self.out))
    }
    fn ok(&mut self, s: SessionId, c: Cred, req: Request<'_>) -> Own {
        let r = self.call(s, c, req);
        assert!(!matches!(r, Own::Err(_)), "unexpected {r:?}");
        r
    }
    fn err(&mut self, s: SessionId, c: Cred, req: Request<'_>) -> Errno {
        match self.call(s, c, req) {
            Own::Err(e) => e,
            other => panic!("expected an error, got {other:?}"),
        }
    }
    fn open_as(
        &mut self,
        s: SessionId,
        c: Cred,
        dir: InodeId,
        name: &str,
        flags: u32,
        perm: u32,
    ) -> Result<(DescId, Attr), Errno> {
        match self.call(
            s,
            c,
            Request::Open {
                dir,
                name: name.as_bytes(),
                flags,
                perm,
                umask: 0o022,
            },
        ) {
            Own::Opened(d, a, _) => Ok((d, a)),
            Own::Err(e) => Err(e),
            other => panic!("unexpected {other:?}"),
        }
    }
    fn create(&mut self, dir: InodeId, name: &str) -> (DescId, InodeId) {
        let (d, a) = self
            .open_as(S1, USER, dir, name, RW | CREAT, 0o644)
            .unwrap();
        (d, a.ino)
    }
    fn mkdir_as(&mut self, c: Cred, dir: InodeId, name: &str, perm: u32) -> Result<InodeId, Errno> {
        match self.call(
            S1,
            c,
            Request::MakeNode {
                dir,
                name: name.as_bytes(),
                ftype: FileType::Directory,
                perm,
                rdev: 0,
                target: b"",
                home: self.fs.index() as u8,
                distributed: false,
            },
        ) {
            Own::Entry(ino, _) => Ok(ino),
            Own::Err(e) => Err(e),
            other => panic!("unexpected {other:?}"),
        }
    }
    fn mkdir(&mut self, dir: InodeId, name: &str) -> InodeId {
        self.mkdir_as(USER, dir, name, 0o755).unwrap()
    }
    fn symlink(&mut self, dir: InodeId, name: &str, target: &str) -> InodeId {
        match self.ok(
            S1,
            USER,
            Request::MakeNode {
                dir,
                name: name.as_bytes(),
                ftype: FileType::Symlink,
                perm: 0,
                rdev: 0,
                target: target.as_bytes(),
                home: 0,
                distributed: false,
            },
        ) {
            Own::Entry(ino, _) => ino,
            other => panic!("{other:?}"),
        }
    }
    fn write(
        &mut self,
        s: SessionId,
        d: DescId,
        data: &[u8],
        off: Option<u64>,
    ) -> Result<u64, Errno> {
        match self.call(
            s,
            USER,
            Request::WriteData {
                desc: d,
                data,
                offset: off,
            },
        ) {
            Own::Written(n) => Ok(n),
            Own::Err(e) => Err(e),
            other => panic!("{other:?}"),
        }
    }
    fn read(
        &mut self,
        s: SessionId,
        d: DescId,
        len: u32,
        off: Option<u64>,
    ) -> Result<Vec<u8>, Errno> {
        match self.call(
            s,
            USER,
            Request::ReadData {
                desc: d,
                len,
                offset: off,
            },
        ) {
            Own::Bytes(b) => Ok(b),
            Own::Err(e) => Err(e),
            other => panic!("{other:?}"),
        }
    }
    fn stat(&mut self, ino: InodeId) -> Result<Attr, Errno> {
        match self.call(S1, USER, Request::GetAttr { ino }) {
            Own::Attr(a) => Ok(a),
            Own::Err(e) => Err(e),
            other => panic!("{other:?}"),
        }
    }
    fn lookup(&mut self, dir: InodeId, name: &str) -> Result<InodeId, Errno> {
        match self.call(
            S1,
            USER,
            Request::Lookup {
                dir,
                name: name.as_bytes(),
            },
        ) {
            Own::Entry(ino, _) => Ok(ino),
            Own::Err(e) => Err(e),
            other => panic!("{other:?}"),
        }
    }
    fn unlink(&mut self, dir: InodeId, name: &str, kind: UnlinkKind) -> Result<Own, Errno> {
        match self.call(
            S1,
            USER,
            Request::Unlink {
                dir,
                name: name.as_bytes(),
                kind,
                expect: None,
            },
        ) {
            Own::Err(e) => Err(e),
            r => Ok(r),
        }
    }
    fn rename(
        &mut self,
        od: InodeId,
        on: &str,
        nd: InodeId,
        nn: &str,
        flags: u32,
    ) -> Result<Own, Errno> {
        match self.call(
            S1,
            USER,
            Request::Rename {
                olddir: od,
                oldname: on.as_bytes(),
                newdir: nd,
                newname: nn.as_bytes(),
                flags,
            },
        ) {
            Own::Err(e) => Err(e),
            r => Ok(r),
        }
    }
    fn close(&mut self, s: SessionId, d: DescId) {
        self.ok(s, USER, Request::Close { desc: d });
    }
    fn setattr(&mut self, c: Cred, ino: InodeId, set: SetAttr) -> Result<Attr, Errno> {
        match self.call(
            S1,
            c,
            Request::SetAttr {
                ino,
                set,
                via: None,
            },
        ) {
            Own::Attr(a) => Ok(a),
            Own::Err(e) => Err(e),
            other => panic!("{other:?}"),
        }
    }
    /// All names of `dir` through ReadDir with `max` bytes per call.
    fn list(&mut self, dir: InodeId, max: u32) -> Vec<String> {
        let mut names = vec![];
        let mut cookie = 0;
        loop {
            let (data, end) = match self.ok(
                S1,
                USER,
                Request::ReadDir {
                    dir,
                    cookie,
                    max_bytes: max,
                    epoch: 0,
                },
            ) {
                Own::Dirents(d, e) => (d, e),
                other => panic!("{other:?}"),
            };
            for (_, off, _, name) in parse_dirents(&data) {
                names.push(String::from_utf8(name).unwrap());
                cookie = off;
            }
            if end {
                return names;
            }
        }
    }
    fn stats(&self) -> ServerStats {
        self.fs.stats()
    }
}

fn perm_only(p: u32) -> SetAttr {
    SetAttr {
        perm: Some(p),
        ..SetAttr::NONE
    }
}

// ---------------------------------------------------------------- files

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
        },
    );
    let Own::Extents(off, len, ext) = r else {
        panic!()
    };
    assert_eq!((off, len), (100, 5000));
    assert_eq!(ext.len(), 1, "two fresh contiguous blocks merge: {ext:?}");
    // Another process (sharing the description) reads meanwhile: until the
    // writer says its bytes are in, the new end is not readable.
    t.ok(S1, USER, Request::Share { desc: d, to: S2 });
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
        },
    );
    assert_eq!(r, Own::Symlink(l, b"target/path".to_vec()));
    let nofollow = libc::O_NOFOLLOW as u32;
    assert_eq!(
        t.open_as(S1, USER, ROOT, "l", nofollow, 0).unwrap_err(),
        Errno::ELOOP
    );
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
    t.ok(S1, USER, Request::Map { ino, to: S1 });
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

#[test]
fn requests_for_entries_of_another_server_get_exdev() {
    let mut t = server_n(0, 4, 8);
    let dist = t.call(
        S1,
        USER,
        Request::MakeNode {
            dir: ROOT,
            name: b"d",
            ftype: FileType::Directory,
            perm: 0o755,
            rdev: 0,
            target: b"",
            home: 0,
            distributed: true,
        },
    );
    let Own::Entry(dist, _) = dist else {
        panic!("{dist:?}")
    };
    assert!(dist.is_distributed());
    let elsewhere = (0..100)
        .map(|i| format!("f{i}"))
        .find(|n| entry_server(dist, n.as_bytes(), 4) != 0)
        .unwrap();
    assert_eq!(
        t.open_as(S1, USER, dist, &elsewhere, RW | CREAT, 0o644)
            .unwrap_err(),
        Errno::EXDEV
    );
}

#[test]
fn distributed_directory_counts_subdirectories_reported_from_other_servers() {
    let mut t = server_n(0, 4, 8);
    let dist = t.call(
        S1,
        USER,
        Request::MakeNode {
            dir: ROOT,
            name: b"d",
            ftype: FileType::Directory,
            perm: 0o755,
            rdev: 0,
            target: b"",
            home: 0,
            distributed: true,
        },
    );
    let Own::Entry(dist, _) = dist else {
        panic!("{dist:?}")
    };
    assert_eq!(t.stat(dist).unwrap().nlink, 2);
    // One subdirectory whose entry lives here, two reported from elsewhere.
    let here = (0..100)
        .map(|i| format!("s{i}"))
        .find(|n| entry_server(dist, n.as_bytes(), 4) == 0)
        .unwrap();
    t.mkdir(dist, &here);
    t.ok(
        S1,
        USER,
        Request::Subdirs {
            dir: dist,
            delta: 2,
            epoch: 0,
        },
    );
    assert_eq!(t.stat(dist).unwrap().nlink, 5);
    t.ok(
        S1,
        USER,
        Request::Subdirs {
            dir: dist,
            delta: -1,
            epoch: 0,
        },
    );
    assert_eq!(t.stat(dist).unwrap().nlink, 4);
    // A count never goes below zero.
    t.ok(
        S1,
        USER,
        Request::Subdirs {
            dir: dist,
            delta: -9,
            epoch: 0,
        },
    );
    assert_eq!(t.stat(dist).unwrap().nlink, 2);
    // A directory that is not distributed ignores reports.
    let plain = t.mkdir(ROOT, "p");
    t.ok(
        S1,
        USER,
        Request::Subdirs {
            dir: plain,
            delta: 3,
            epoch: 0,
        },
    );
    assert_eq!(t.stat(plain).unwrap().nlink, 2);
}

#[test]
fn rename_replaces_target_atomically() {
    let mut t = server(8);
    let (da, a) = t.create(ROOT, "a");
    t.write(S1, da, b"new", None).unwrap();
    let (db, b) = t.create(ROOT, "b");
    t.close(S1, db);
    let r = t.rename(ROOT, "a", ROOT, "b", 0).unwrap();
    assert_eq!(
        r,
        Own::Renamed(a, FileType::Regular, Some((b, FileType::Regular, true)))
    );
    assert_eq!(t.lookup(ROOT, "b"), Ok(a));
    assert_eq!(t.lookup(ROOT, "a"), Err(Errno::ENOENT));
    assert_eq!(t.stat(b), Err(Errno::ENOENT), "replaced inode freed");
    assert_eq!(t.list(ROOT, 4096), vec![".", "..", "b"]);
}

#[test]
fn rename_noreplace_and_exchange() {
    let mut t = server(8);
    let (_, a) = t.create(ROOT, "a");
    let (_, b) = t.create(ROOT, "b");
    assert_eq!(
        t.rename(ROOT, "a", ROOT, "b", RENAME_NOREPLACE),
        Err(Errno::EEXIST)
    );
    t.rename(ROOT, "a", ROOT, "b", RENAME_EXCHANGE).unwrap();
    assert_eq!((t.lookup(ROOT, "a"), t.lookup(ROOT, "b")), (Ok(b), Ok(a)));
    assert_eq!(
        t.rename(ROOT, "a", ROOT, "c", RENAME_EXCHANGE),
        Err(Errno::ENOENT)
    );
    assert_eq!(
        t.rename(ROOT, "a", ROOT, "b", RENAME_EXCHANGE | RENAME_NOREPLACE),
        Err(Errno::EINVAL)
    );
    t.rename(ROOT, "a", ROOT, "c", RENAME_NOREPLACE).unwrap();
    assert_eq!(t.lookup(ROOT, "c"), Ok(b));
}

#[test]
fn rename_follows_linux_type_rules_for_directories() {
    let mut t = server(8);
    let d1 = t.mkdir(ROOT, "d1");
    let d2 = t.mkdir(ROOT, "d2");
    t.create(ROOT, "f");
    t.create(d2, "inside");
    assert_eq!(t.rename(ROOT, "d1", ROOT, "f", 0), Err(Errno::ENOTDIR));
    assert_eq!(t.rename(ROOT, "f", ROOT, "d1", 0), Err(Errno::EISDIR));
    assert_eq!(t.rename(ROOT, "d1", ROOT, "d2", 0), Err(Errno::ENOTEMPTY));
    t.unlink(d2, "inside", UnlinkKind::NonDirectory).unwrap();
    t.rename(ROOT, "d1", ROOT, "d2", 0).unwrap();
    assert_eq!(t.lookup(ROOT, "d2"), Ok(d1));
    // A directory moved into another records its new parent for `..`.
    let d3 = t.mkdir(ROOT, "d3");
    t.rename(ROOT, "d2", d3, "moved", 0).unwrap();
    assert_eq!(t.lookup(d1, ".."), Ok(d3));
    assert_eq!(t.stat(d3).unwrap().nlink, 3);
    assert_eq!(t.stat(ROOT).unwrap().nlink, 3, "root holds d3 only, plus f");
}

#[test]
fn hard_links_count_and_survive_unlink_of_one_name() {
    let mut t = server(8);
    let (d, f) = t.create(ROOT, "f");
    t.write(S1, d, b"shared", None).unwrap();
    t.close(S1, d);
    let r = t.ok(
        S1,
        USER,
        Request::Link {
            dir: ROOT,
            name: b"g",
            ino: f,
            ftype: FileType::Regular,
            replace: false,
            moved_from: None,
        },
    );
    assert_eq!(r, Own::Linked(None));
    assert_eq!(t.stat(f).unwrap().nlink, 2);
    t.unlink(ROOT, "f", UnlinkKind::NonDirectory).unwrap();
    assert_eq!(t.stat(f).unwrap().nlink, 1);
    let (d, _) = t.open_as(S1, USER, ROOT, "g", 0, 0).unwrap();
    assert_eq!(t.read(S1, d, 10, None).unwrap(), b"shared");
    // Cross-server style reference counting through Ref/Unref.
    t.ok(S1, USER, Request::Ref { ino: f });
    assert_eq!(t.stat(f).unwrap().nlink, 2);
    t.ok(S1, USER, Request::Unref { ino: f, via: None });
    let dir = t.mkdir(ROOT, "dir");
    // A directory being moved across servers has two names for a moment,
    // never three: a second move waits (EAGAIN) for the first.
    t.ok(S1, USER, Request::Ref { ino: dir });
    assert_eq!(t.err(S2, USER, Request::Ref { ino: dir }), RETRY);
    t.ok(
        S1,
        USER,
        Request::Unref {
            ino: dir,
            via: None,
        },
    );
    assert!(t.stat(dir).is_ok(), "the directory keeps its one name");
    t.ok(S2, USER, Request::Ref { ino: dir });
    t.ok(
        S2,
        USER,
        Request::Unref {
            ino: dir,
            via: None,
        },
    );
}

#[test]
fn directory_moved_by_link_then_unlink_keeps_its_entries() {
    // The client's cross-server rename: Link the new name, then Unlink
    // the old one with kind Move (an rmdir's kind Directory would refuse:
    // the directory is not empty).
    let mut t = server(8);
    let a = t.mkdir(ROOT, "a");
    let b = t.mkdir(ROOT, "b");
    let d = t.mkdir(a, "d");
    let (_, f) = t.create(d, "f");
    let link = Request::Link {
        dir: b,
        name: b"d",
        ino: d,
        ftype: FileType::Directory,
        replace: true,
        moved_from: None,
    };
    assert_eq!(t.ok(S1, USER, link), Own::Linked(None));
    assert_eq!(
        t.unlink(a, "d", UnlinkKind::Directory),
        Err(Errno::ENOTEMPTY),
        "an rmdir never removes a non-empty directory, moving or not"
    );
    let unlink = Request::Unlink {
        dir: a,
        name: b"d",
        kind: UnlinkKind::Move,
        expect: None,
    };
    assert_eq!(t.err(S1, USER, unlink), Errno::EINVAL, "Move needs expect");
    let unlink = Request::Unlink {
        dir: a,
        name: b"d",
        kind: UnlinkKind::Move,
        expect: Some(d),
    };
    assert_eq!(
        t.call(S1, USER, unlink),
        Own::Unlinked(d, FileType::Directory, true)
    );
    t.ok(S1, USER, Request::SetParent { dir: d, parent: b });
    assert_eq!(t.lookup(d, "f"), Ok(f));
    assert_eq!(t.lookup(d, ".."), Ok(b));
    assert_eq!(t.stat(d).unwrap().nlink, 2);
    t.create(d, "g");
}

#[test]
fn unlinked_open_file_lives_until_last_close() {
    let mut t = server(8);
    let (d, f) = t.create(ROOT, "tmp");
    t.write(S1, d, b"still here", None).unwrap();
    t.ok(S1, USER, Request::Share { desc: d, to: S2 });
    let r = t.unlink(ROOT, "tmp", UnlinkKind::NonDirectory).unwrap();
    assert_eq!(r, Own::Unlinked(f, FileType::Regular, true));
    assert_eq!(t.lookup(ROOT, "tmp"), Err(Errno::ENOENT));
    assert_eq!(t.stat(f).unwrap().nlink, 0);
    t.close(S1, d);
    assert_eq!(t.read(S2, d, 100, Some(0)).unwrap(), b"still here");
    assert_eq!(t.stats().blocks_used, 1);
    t.close(S2, d);
    assert_eq!(t.stat(f), Err(Errno::ENOENT));
    assert_eq!(t.stats().blocks_used, 0);
    assert_eq!(t.stats().open_descriptions, 0);
}

#[test]
fn unlink_and_rmdir_check_types_and_emptiness() {
    let mut t = server(8);
    let d = t.mkdir(ROOT, "d");
    t.create(d, "f");
    assert_eq!(
        t.unlink(ROOT, "d", UnlinkKind::NonDirectory),
        Err(Errno::EISDIR)
    );
    assert_eq!(t.unlink(d, "f", UnlinkKind::Directory), Err(Errno::ENOTDIR));
    assert_eq!(
        t.unlink(ROOT, "d", UnlinkKind::Directory),
        Err(Errno::ENOTEMPTY)
    );
    assert_eq!(
        t.unlink(ROOT, ".", UnlinkKind::Directory),
        Err(Errno::EINVAL)
    );
    t.unlink(d, "f", UnlinkKind::NonDirectory).unwrap();
    let e = t.call(
        S1,
        USER,
        Request::Unlink {
            dir: ROOT,
            name: b"d",
            kind: UnlinkKind::Directory,
            expect: Some(ROOT),
        },
    );
    assert_eq!(e, Own::Err(Errno::ESTALE));
    t.unlink(ROOT, "d", UnlinkKind::Directory).unwrap();
    assert_eq!(t.stat(d), Err(Errno::ENOENT));
    // Creating in a removed directory fails.
    assert_eq!(
        t.open_as(S1, USER, d, "x", RW | CREAT, 0o644).unwrap_err(),
        Errno::ENOENT
    );
}

#[test]
fn three_phase_rmdir_holds_creations_until_commit_or_abort() {
    let mut t = server(8);
    let d = t.mkdir(ROOT, "d");
    t.create(d, "f");
    assert_eq!(
        t.err(S1, USER, Request::MarkRmdir { dir: d, epoch: 0 }),
        Errno::ENOTEMPTY
    );
    t.unlink(d, "f", UnlinkKind::NonDirectory).unwrap();
    t.ok(S1, USER, Request::MarkRmdir { dir: d, epoch: 0 });
    // A concurrent rmdir waits for the outcome (never EBUSY), and only the
    // marking session decides it.
    assert_eq!(
        t.err(S2, USER, Request::MarkRmdir { dir: d, epoch: 0 }),
        RETRY
    );
    assert_eq!(
        t.err(
            S2,
            USER,
            Request::FinishRmdir {
                dir: d,
                commit: true
            }
        ),
        Errno::EINVAL
    );
    assert_eq!(
        t.open_as(S1, USER, d, "g", RW | CREAT, 0o644).unwrap_err(),
        RETRY
    );
    assert_eq!(t.lookup(d, "g"), Err(Errno::ENOENT), "lookups proceed");
    t.ok(
        S1,
        USER,
        Request::FinishRmdir {
            dir: d,
            commit: false,
        },
    );
    t.create(d, "g");
    t.unlink(d, "g", UnlinkKind::NonDirectory).unwrap();
    t.ok(S1, USER, Request::MarkRmdir { dir: d, epoch: 0 });
    t.unlink(ROOT, "d", UnlinkKind::Directory).unwrap();
    t.ok(
        S1,
        USER,
        Request::FinishRmdir {
            dir: d,
            commit: true,
        },
    );
    assert_eq!(
        t.open_as(S1, USER, d, "h", RW | CREAT, 0o644).unwrap_err(),
        Errno::ENOENT
    );
}

#[test]
fn rmdir_losers_wait_then_see_enoent_and_dead_markers_release() {
    let mut t = server(8);
    let d = t.mkdir(ROOT, "d");
    t.ok(S1, USER, Request::MarkRmdir { dir: d, epoch: 0 });
    assert_eq!(
        t.err(S2, USER, Request::MarkRmdir { dir: d, epoch: 0 }),
        RETRY
    );
    // The marking process dies mid-rmdir: its mark is aborted, so the
    // waiter goes on and creations are possible again.
    t.fs.session_closed(S1);
    t.create(d, "f");
    assert_eq!(
        t.err(S2, USER, Request::MarkRmdir { dir: d, epoch: 0 }),
        Errno::ENOTEMPTY
    );
    t.unlink(d, "f", UnlinkKind::NonDirectory).unwrap();
    t.ok(S2, USER, Request::MarkRmdir { dir: d, epoch: 0 });
    t.call(
        S2,
        USER,
        Request::Unlink {
            dir: ROOT,
            name: b"d",
            kind: UnlinkKind::Directory,
            expect: Some(d),
        },
    );
    t.ok(
        S2,
        USER,
        Request::FinishRmdir {
            dir: d,
            commit: true,
        },
    );
    // The loser of the race, after waiting: ENOENT as on Linux.
    assert_eq!(
        t.err(SessionId(3), USER, Request::MarkRmdir { dir: d, epoch: 0 }),
        Errno::ENOENT
    );
}

/// A cross-server move (`Ref`, `Link` new name, `Unlink` old name) and an
/// rmdir of the moved directory exclude each other at the directory's
/// owner: an rmdir waits while a move holds its second name, and a move
/// cannot start on a directory an rmdir has marked or removed. Otherwise
/// the move's new name could outlive the directory (Hare §3.4.1).
#[test]
fn moves_and_rmdirs_of_one_directory_exclude_each_other() {
    let mut t = server(8);
    let a = t.mkdir(ROOT, "a");
    let b = t.mkdir(ROOT, "b");
    let d = t.mkdir(a, "d");
    let link = Request::Link {
        dir: b,
        name: b"d",
        ino: d,
        ftype: FileType::Directory,
        replace: false,
        moved_from: None,
    };
    // A move whose new name lives on another server holds a `Ref` here:
    // an rmdir waits, whether it marks or is one Unlink.
    t.ok(S1, USER, Request::Ref { ino: d });
    assert_eq!(
        t.err(S2, USER, Request::MarkRmdir { dir: d, epoch: 0 }),
        RETRY
    );
    assert_eq!(t.unlink(a, "d", UnlinkKind::Directory).unwrap_err(), RETRY);
    t.ok(S1, USER, Request::Unref { ino: d, via: None });
    // One whose new name lives here: its `Link` counts the second name.
    t.ok(S1, USER, link);
    assert_eq!(
        t.err(S2, USER, Request::MarkRmdir { dir: d, epoch: 0 }),
        RETRY
    );
    assert_eq!(t.unlink(a, "d", UnlinkKind::Directory).unwrap_err(), RETRY);
    // No third name, and the provisional name stays put for the undo.
    let third = Request::Link {
        dir: ROOT,
        name: b"third",
        ino: d,
        ftype: FileType::Directory,
        replace: false,
        moved_from: None,
    };
    assert_eq!(t.err(S2, USER, third), RETRY);
    assert_eq!(t.err(S2, USER, rename_req(b, "d", "elsewhere")), RETRY);
    t.call(
        S1,
        USER,
        Request::Unlink {
            dir: a,
            name: b"d",
            kind: UnlinkKind::Move,
            expect: Some(d),
        },
    );
    // The move is done: the rmdir goes ahead under the new name.
    t.ok(S2, USER, Request::MarkRmdir { dir: d, epoch: 0 });
    // A marked directory cannot start a move; the mover waits.
    assert_eq!(t.err(S1, USER, Request::Ref { ino: d }), RETRY);
    let link_back = || Request::Link {
        dir: a,
        name: b"d",
        ino: d,
        ftype: FileType::Directory,
        replace: false,
        moved_from: None,
    };
    assert_eq!(t.err(S1, USER, link_back()), RETRY);
    t.unlink(b, "d", UnlinkKind::Directory).unwrap();
    t.ok(
        S2,
        USER,
        Request::FinishRmdir {
            dir: d,
            commit: true,
        },
    );
    // ... and after the commit learns it is gone.
    assert_eq!(t.err(S1, USER, Request::Ref { ino: d }), Errno::ENOENT);
    assert_eq!(t.err(S1, USER, link_back()), Errno::ENOENT);
}

#[test]
fn unfinished_directory_moves_are_undone_when_the_session_dies() {
    let mut t = server(8);
    let a = t.mkdir(ROOT, "a");
    let b = t.mkdir(ROOT, "b");
    let d = t.mkdir(a, "d");
    let (_, f) = t.create(d, "f");
    let link = |name: &'static [u8]| Request::Link {
        dir: b,
        name,
        ino: d,
        ftype: FileType::Directory,
        replace: true,
        moved_from: None,
    };
    // Died after `Link`, before `Unlink` of the old name: the provisional
    // new name goes, the directory keeps its one name and its link count.
    t.ok(S2, USER, link(b"d"));
    t.fs.session_closed(S2);
    assert_eq!(t.lookup(b, "d"), Err(Errno::ENOENT));
    assert_eq!(t.lookup(a, "d"), Ok(d));
    assert_eq!(t.lookup(d, "f"), Ok(f));
    t.ok(S1, USER, Request::Ref { ino: d }); // one name again: not RETRY
    t.ok(S1, USER, Request::Unref { ino: d, via: None });
    // Died after `Ref` only: the owner drops the extra link.
    t.ok(S2, USER, Request::Ref { ino: d });
    assert_eq!(t.err(S1, USER, Request::Ref { ino: d }), RETRY);
    t.fs.session_closed(S2);
    t.ok(S1, USER, Request::Ref { ino: d });
    t.ok(S1, USER, Request::Unref { ino: d, via: None });
    // A finished move (`MoveDone`) survives its session.
    t.ok(S2, USER, link(b"e"));
    t.ok(
        S2,
        USER,
        Request::Unlink {
            dir: a,
            name: b"d",
            kind: UnlinkKind::Move,
            expect: Some(d),
        },
    );
    t.ok(S2, USER, Request::MoveDone { dir: b, name: b"e" });
    t.fs.session_closed(S2);
    assert_eq!(t.lookup(b, "e"), Ok(d));
    assert_eq!(t.lookup(d, "f"), Ok(f));
    assert_eq!(t.stat(b).unwrap().nlink, 3);
    assert_eq!(t.stat(a).unwrap().nlink, 2);
}

#[test]
fn a_directory_replaced_by_rename_must_be_marked_when_its_entries_live_elsewhere() {
    let mut t = server_n(0, 2, 8);
    let mk = |t: &mut T, name: &'static str, home: u8, distributed: bool| match t.ok(
        S1,
        USER,
        Request::MakeNode {
            dir: ROOT,
            name: name.as_bytes(),
            ftype: FileType::Directory,
            perm: 0o755,
            rdev: 0,
            target: b"",
            home,
            distributed,
        },
    ) {
        Own::Entry(ino, _) => ino,
        other => panic!("{other:?}"),
    };
    mk(&mut t, "s", 0, false);
    let dist = mk(&mut t, "dist", 0, true);
    let remote = mk(&mut t, "remote", 1, false);
    let local = mk(&mut t, "local", 0, false);
    // Entries of `dist` may be on server 1, of `remote` are: not here.
    assert_eq!(t.rename(ROOT, "s", ROOT, "dist", 0), Err(Errno::ESTALE));
    assert_eq!(t.rename(ROOT, "s", ROOT, "remote", 0), Err(Errno::ESTALE));
    // Another process's mark (its rmdir under way) vouches nothing for us.
    t.ok(
        S2,
        USER,
        Request::MarkRmdir {
            dir: dist,
            epoch: 0,
        },
    );
    assert_eq!(t.rename(ROOT, "s", ROOT, "dist", 0), Err(Errno::ESTALE));
    t.ok(
        S2,
        USER,
        Request::FinishRmdir {
            dir: dist,
            commit: false,
        },
    );
    t.ok(
        S1,
        USER,
        Request::MarkRmdir {
            dir: dist,
            epoch: 0,
        },
    );
    assert!(t.rename(ROOT, "s", ROOT, "dist", 0).is_ok());
    assert_ne!(t.lookup(ROOT, "dist"), Ok(dist));
    let here = (0..)
        .map(|i| format!("x{i}"))
        .find(|n| entry_server(dist, n.as_bytes(), 2) == 0)
        .unwrap();
    assert_eq!(
        t.err(
            S1,
            USER,
            Request::MakeNode {
                dir: dist,
                name: here.as_bytes(),
                ftype: FileType::Regular,
                perm: 0o644,
                rdev: 0,
                target: b"",
                home: 0,
                distributed: false,
            }
        ),
        Errno::ENOENT,
        "the replaced directory is gone here"
    );
    let flag = atoll_proto::RENAME_VICTIM_MARKED;
    assert!(t.rename(ROOT, "dist", ROOT, "remote", flag).is_ok());
    // A victim whose entries are all here needs no mark.
    assert!(t.rename(ROOT, "remote", ROOT, "local", 0).is_ok());
    assert_eq!(t.stat(local), Err(Errno::ENOENT));
    assert_eq!(t.stat(remote), Err(Errno::ENOENT));
}

#[test]
fn relink_exchanges_names_and_is_undone_if_the_session_dies() {
    let mut t = server(8);
    let a = t.mkdir(ROOT, "a");
    let b = t.mkdir(ROOT, "b");
    t.create(a, "f");
    let (_, g) = t.create(ROOT, "g");
    let relink = |name: &'static [u8], ino, ftype, expect| Request::Relink {
        dir: ROOT,
        name,
        ino,
        ftype,
        expect,
    };
    assert_eq!(
        t.err(S1, USER, relink(b"a", b, FileType::Directory, g)),
        Errno::ESTALE,
        "the entry must still name the expected inode"
    );
    // A finished exchange of a directory and a file: entries and link
    // counts stay, each inode under the other's name.
    t.ok(S1, USER, relink(b"a", g, FileType::Regular, a));
    t.ok(S1, USER, relink(b"g", a, FileType::Directory, g));
    t.ok(
        S1,
        USER,
        Request::MoveDone {
            dir: ROOT,
            name: b"a",
        },
    );
    t.ok(
        S1,
        USER,
        Request::MoveDone {
            dir: ROOT,
            name: b"g",
        },
    );
    t.fs.session_closed(S1);
    assert_eq!(t.lookup(ROOT, "a"), Ok(g));
    assert_eq!(t.lookup(ROOT, "g"), Ok(a));
    assert!(t.lookup(a, "f").is_ok());
    assert_eq!(t.stat(g).unwrap().nlink, 1);
    assert_eq!(t.stat(ROOT).unwrap().nlink, 4);
    // An unfinished one (the process died between the two halves): the
    // provisional name names its inode again.
    t.ok(S2, USER, relink(b"b", a, FileType::Directory, b));
    assert_eq!(t.lookup(ROOT, "b"), Ok(a));
    t.fs.session_closed(S2);
    assert_eq!(t.lookup(ROOT, "b"), Ok(b));
    assert_eq!(t.lookup(ROOT, "g"), Ok(a));
    assert_eq!(t.stat(ROOT).unwrap().nlink, 4);
}

#[test]
fn the_directory_move_lock_excludes_other_sessions_until_released_or_dead() {
    let mut t = server(8);
    let lock = |acquire| Request::RenameLock { acquire };
    t.ok(S1, USER, lock(true));
    // Threads of one process share a session: they wait for each other.
    assert_eq!(t.err(S1, USER, lock(true)), RETRY);
    assert_eq!(t.err(S2, USER, lock(true)), RETRY);
    assert_eq!(t.err(S2, USER, lock(false)), Errno::EINVAL);
    t.ok(S1, USER, lock(false));
    t.ok(S2, USER, lock(true));
    t.fs.session_closed(S2);
    t.ok(S1, USER, lock(true));
}

#[test]
fn readdir_lists_dot_entries_first_and_resumes_by_cookie() {
    let mut t = server(8);
    let d = t.mkdir(ROOT, "d");
    for i in 0..50 {
        t.create(d, &format!("file-{i:02}"));
    }
    let all = t.list(d, 200);
    assert_eq!(&all[..2], &[".", ".."]);
    assert_eq!(all.len(), 52);
    let e = t.err(
        S1,
        USER,
        Request::ReadDir {
            dir: d,
            cookie: 0,
            max_bytes: 10,
            epoch: 0,
        },
    );
    assert_eq!(e, Errno::EINVAL);
}

#[test]
fn readdir_cookies_neither_lose_nor_duplicate_entries_across_changes() {
    let mut t = server(8);
    for i in 0..40 {
        t.create(ROOT, &format!("keep-{i:02}"));
    }
    let mut seen = vec![];
    let mut cookie = 0;
    let mut round = 0;
    loop {
        let Own::Dirents(data, end) = t.ok(
            S1,
            USER,
            Request::ReadDir {
                dir: ROOT,
                cookie,
                max_bytes: 128,
                epoch: 0,
            },
        ) else {
            panic!()
        };
        for (_, off, _, name) in parse_dirents(&data) {
            seen.push(String::from_utf8(name).unwrap());
            cookie = off;
        }
        if end {
            break;
        }
        // Churn between calls: add, remove and rename other entries.
        round += 1;
        t.create(ROOT, &format!("new-{round}"));
        t.unlink(ROOT, &format!("new-{round}"), UnlinkKind::NonDirectory)
            .unwrap();
        t.create(ROOT, &format!("tmp-{round}"));
        t.rename(
            ROOT,
            &format!("tmp-{round}"),
            ROOT,
            &format!("moved-{round}"),
            0,
        )
        .unwrap();
    }
    let keep: Vec<_> = seen.iter().filter(|n| n.starts_with("keep-")).collect();
    assert_eq!(keep.len(), 40, "every stable entry exactly once");
    let mut dedup = seen.clone();
    dedup.sort();
    dedup.dedup();
    assert_eq!(dedup.len(), seen.len(), "no duplicates: {seen:?}");
}

// ---------------------------------------------------------------- sessions

#[test]
fn session_death_releases_descriptions_and_locks() {
    let mut t = server(8);
    let base = t.stats();
    let (d, _) = t.create(ROOT, "f");
    let (d2, _) = t.open_as(S2, USER, ROOT, "f", RW, 0).unwrap();
    let lock = LockSpec {
        kind: locks::WR,
        start: 0,
        len: 0,
        owner: LockOwner::Process(S1.0),
        pid: 0,
    };
    t.ok(S1, USER, Request::SetLock { desc: d, lock });
    let theirs = LockSpec {
        owner: LockOwner::Process(S2.0),
        ..lock
    };
    assert_eq!(
        t.err(
            S2,
            USER,
            Request::SetLock {
                desc: d2,
                lock: theirs
            }
        ),
        Errno::EAGAIN
    );
    t.fs.session_closed(S1);
    assert_eq!(t.stats().open_descriptions, 1);
    t.ok(
        S2,
        USER,
        Request::SetLock {
            desc: d2,
            lock: theirs,
        },
    );
    t.fs.session_closed(S2);
    let after = t.stats();
    assert_eq!(after.open_descriptions, base.open_descriptions);
    assert_eq!(after.sessions, 0);
    // The description is gone for everyone.
    assert_eq!(t.read(S1, d, 1, Some(0)), Err(Errno::EBADF));
}

#[test]
fn share_gives_another_session_a_counted_reference() {
    let mut t = server(8);
    let (d, _) = t.create(ROOT, "f");
    assert_eq!(
        t.read(S2, d, 1, None),
        Err(Errno::EBADF),
        "not S2's description"
    );
    t.ok(S1, USER, Request::Share { desc: d, to: S2 });
    t.ok(S1, USER, Request::Share { desc: d, to: S2 });
    t.write(S1, d, b"abc", None).unwrap();
    // The offset is shared: S2 continues where S1 stopped.
    t.write(S2, d, b"def", None).unwrap();
    assert_eq!(t.read(S1, d, 10, Some(0)).unwrap(), b"abcdef");
    t.close(S1, d);
    t.close(S2, d);
    assert_eq!(t.stats().open_descriptions, 1);
    t.close(S2, d);
    assert_eq!(t.stats().open_descriptions, 0);
    assert_eq!(t.err(S2, USER, Request::Close { desc: d }), Errno::EBADF);
}

// ---------------------------------------------------------------- locks

#[test]
fn getlk_reports_the_conflicting_lock_and_close_releases_posix_locks() {
    let mut t = server(8);
    let (d1, _) = t.create(ROOT, "f");
    let (d2, _) = t.open_as(S2, USER, ROOT, "f", RW, 0).unwrap();
    let mine = LockSpec {
        kind: locks::RD,
        start: 10,
        len: 20,
        owner: LockOwner::Process(S1.0),
        pid: 0,
    };
    t.ok(
        S1,
        USER,
        Request::SetLock {
            desc: d1,
            lock: mine,
        },
    );
    let probe = LockSpec {
        kind: locks::WR,
        start: 0,
        len: 15,
        owner: LockOwner::Process(S2.0),
        pid: 0,
    };
    assert_eq!(
        t.ok(
            S2,
            USER,
            Request::GetLock {
                desc: d2,
                lock: probe
            }
        ),
        Own::Lock(Some(mine))
    );
    let read_probe = LockSpec {
        kind: locks::RD,
        ..probe
    };
    assert_eq!(
        t.ok(
            S2,
            USER,
            Request::GetLock {
                desc: d2,
                lock: read_probe
            }
        ),
        Own::Lock(None)
    );
    // Closing any descriptor of the file drops the process's locks.
    let (extra, _) = t.open_as(S1, USER, ROOT, "f", 0, 0).unwrap();
    t.close(S1, extra);
    assert_eq!(
        t.ok(
            S2,
            USER,
            Request::GetLock {
                desc: d2,
                lock: probe
            }
        ),
        Own::Lock(None)
    );
}

#[test]
fn ofd_and_flock_locks_belong_to_the_description() {
    let mut t = server(8);
    let (d1, _) = t.create(ROOT, "f");
    let (d2, _) = t.open_as(S1, USER, ROOT, "f", RW, 0).unwrap();
    let ofd = |d| LockSpec {
        kind: locks::WR,
        start: 0,
        len: 0,
        owner: LockOwner::Description(d),
        pid: 0,
    };
    t.ok(
        S1,
        USER,
        Request::SetLock {
            desc: d1,
            lock: ofd(d1),
        },
    );
    // Same process, other description: OFD locks conflict.
    assert_eq!(
        t.err(
            S1,
            USER,
            Request::SetLock {
                desc: d2,
                lock: ofd(d2)
            }
        ),
        Errno::EAGAIN
    );
    // flock is a separate namespace.
    let fl = |d| LockSpec {
        kind: locks::WR,
        start: 0,
        len: 0,
        owner: LockOwner::Flock(d),
        pid: 0,
    };
    t.ok(
        S1,
        USER,
        Request::SetLock {
            desc: d2,
            lock: fl(d2),
        },
    );
    assert_eq!(
        t.err(
            S1,
            USER,
            Request::SetLock {
                desc: d1,
                lock: fl(d1)
            }
        ),
        Errno::EAGAIN
    );
    assert_eq!(
        t.err(
            S1,
            USER,
            Request::SetLock {
                desc: d1,
                lock: fl(d2)
            }
        ),
        Errno::EINVAL
    );
    t.close(S1, d1);
    t.ok(
        S1,
        USER,
        Request::SetLock {
            desc: d2,
            lock: ofd(d2),
        },
    );
    // A read lock needs a readable description.
    let (wo, _) = t
        .open_as(S1, USER, ROOT, "f", libc::O_WRONLY as u32, 0)
        .unwrap();
    let rd = LockSpec {
        kind: locks::RD,
        start: 0,
        len: 1,
        owner: LockOwner::Process(S1.0),
        pid: 0,
    };
    assert_eq!(
        t.err(S1, USER, Request::SetLock { desc: wo, lock: rd }),
        Errno::EBADF
    );
}

// ---------------------------------------------------------------- permissions

#[test]
fn xattrs_honour_create_replace_and_namespaces() {
    let mut t = server(8);
    let (_, f) = t.create(ROOT, "f");
    let set = |t: &mut T, c, name: &str, value: &[u8], flags| {
        t.call(
            S1,
            c,
            Request::SetXattr {
                ino: f,
                name: name.as_bytes(),
                value,
                flags,
                via: None,
            },
        )
    };
    assert_eq!(
        set(&mut t, USER, "user.a", b"1", XATTR_REPLACE),
        Own::Err(Errno::ENODATA)
    );
    assert_eq!(set(&mut t, USER, "user.a", b"1", XATTR_CREATE), Own::Ok);
    assert_eq!(
        set(&mut t, USER, "user.a", b"2", XATTR_CREATE),
        Own::Err(Errno::EEXIST)
    );
    assert_eq!(set(&mut t, USER, "user.a", b"22", XATTR_REPLACE), Own::Ok);
    assert_eq!(
        set(&mut t, USER, "security.x", b"", 0),
        Own::Err(Errno::ENOTSUP)
    );
    assert_eq!(
        set(&mut t, USER, "trusted.t", b"v", 0),
        Own::Err(Errno::EPERM)
    );
    assert_eq!(set(&mut t, ROOTC, "trusted.t", b"v", 0), Own::Ok);
    // Past XATTR_SIZE_MAX Linux says E2BIG; below it, a value that does
    // not fit the inode's xattr space is ENOSPC (ext4 without ea_inode).
    let big = vec![0u8; atoll_proto::MAX_XATTR_VALUE + 1];
    assert_eq!(
        set(&mut t, USER, "user.big", &big, 0),
        Own::Err(Errno::ENOSPC)
    );
    let huge = vec![0u8; 64 * 1024 + 1];
    assert_eq!(
        set(&mut t, USER, "user.big", &huge, 0),
        Own::Err(Errno::E2BIG)
    );
    let get = |t: &mut T, name: &str| {
        t.call(
            S1,
            USER,
            Request::GetXattr {
                ino: f,
                name: name.as_bytes(),
            },
        )
    };
    assert_eq!(get(&mut t, "user.a"), Own::Bytes(b"22".to_vec()));
    assert_eq!(get(&mut t, "user.none"), Own::Err(Errno::ENODATA));
    assert_eq!(
        t.ok(S1, USER, Request::ListXattr { ino: f }),
        Own::Bytes(b"user.a\0".to_vec())
    );
    assert_eq!(
        t.ok(S1, ROOTC, Request::ListXattr { ino: f }),
        Own::Bytes(b"trusted.t\0user.a\0".to_vec())
    );
    let rm = |t: &mut T| {
        t.call(
            S1,
            USER,
            Request::RemoveXattr {
                ino: f,
                name: b"user.a",
                via: None,
            },
        )
    };
    assert_eq!(rm(&mut t), Own::Ok);
    assert_eq!(rm(&mut t), Own::Err(Errno::ENODATA));
    // user.* on a symlink is refused.
    let l = t.symlink(ROOT, "l", "f");
    let r = t.call(
        S1,
        USER,
        Request::SetXattr {
            ino: l,
            name: b"user.a",
            value: b"",
            flags: 0,
            via: None,
        },
    );
    assert_eq!(r, Own::Err(Errno::EPERM));
}

// ---------------------------------------------------------------- nodes

#[test]
fn make_node_creates_fifos_and_refuses_devices_for_users() {
    let mut t = server(8);
    let mk = |t: &mut T, c, name: &str, ftype| {
        t.call(
            S1,
            c,
            Request::MakeNode {
                dir: ROOT,
                name: name.as_bytes(),
                ftype,
                perm: 0o644,
                rdev: 0x0103,
                target: b"",
                home: 0,
                distributed: false,
            },
        )
    };
    let Own::Entry(fifo, FileType::Fifo) = mk(&mut t, USER, "p", FileType::Fifo) else {
        panic!()
    };
    assert_eq!(t.stat(fifo).unwrap().ftype, FileType::Fifo);
    assert_eq!(
        mk(&mut t, USER, "p", FileType::Fifo),
        Own::Err(Errno::EEXIST)
    );
    assert_eq!(
        mk(&mut t, USER, "null", FileType::CharDevice),
        Own::Err(Errno::EPERM)
    );
    let Own::Entry(dev, _) = mk(&mut t, ROOTC, "null", FileType::CharDevice) else {
        panic!()
    };
    assert_eq!(t.stat(dev).unwrap().rdev, 0x0103);
    let Own::Entry(sock, _) = mk(&mut t, USER, "s", FileType::Socket) else {
        panic!()
    };
    assert_eq!(
        t.err(
            S1,
            USER,
            Request::OpenInode {
                ino: sock,
                flags: 0,
                via: None
            }
        ),
        Errno::ENXIO
    );
    assert_eq!(t.list(ROOT, 4096).len(), 5);
}

#[test]
fn statfs_and_stats_report_this_servers_share() {
    let mut t = server(10);
    let (d, _) = t.create(ROOT, "f");
    t.write(S1, d, &[1; 5000], None).unwrap();
    let Own::StatFs(s) = t.ok(S1, USER, Request::StatFs) else {
        panic!()
    };
    assert_eq!((s.blocks, s.blocks_free), (10, 8));
    let st = t.stats();
    assert_eq!((st.inodes, st.open_descriptions, st.blocks_used), (2, 1, 2));
    assert!(st.ops.iter().any(|(n, c, _)| n == "WriteData" && *c == 1));
}

// ---------------------------------------------------------------- model

#[derive(Debug, Clone)]
enum Op {
    Create(u8),
    Write(u8, u16, u16),
    Truncate(u8, u16),
    Unlink(u8),
    Rename(u8, u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u8..6).prop_map(Op::Create),
        (0u8..6, 0u16..9000, 1u16..3000).prop_map(|(f, o, l)| Op::Write(f, o, l)),
        (0u8..6, 0u16..9000).prop_map(|(f, s)| Op::Truncate(f, s)),
        (0u8..6).prop_map(Op::Unlink),
        (0u8..6, 0u8..6).prop_map(|(a, b)| Op::Rename(a, b)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// Random create/write/truncate/unlink/rename sequences agree with a
    /// map of byte vectors, and every block comes back once files are gone.
    #[test]
    fn random_ops_match_a_simple_model(ops in proptest::collection::vec(op(), 1..60)) {
        let mut t = server(64);
        let mut model: std::collections::BTreeMap<String, Vec<u8>> = Default::default();
        let name = |i: u8| format!("f{i}");
        for (step, op) in ops.iter().enumerate() {
            match op {
                Op::Create(f) => {
                    let r = t.open_as(S1, USER, ROOT, &name(*f), RW | CREAT, 0o644);
                    let (d, _) = r.unwrap();
                    t.close(S1, d);
                    model.entry(name(*f)).or_default();
                }
                Op::Write(f, off, len) => {
                    let Ok((d, _)) = t.open_as(S1, USER, ROOT, &name(*f), RW, 0) else {
                        prop_assert!(!model.contains_key(&name(*f)));
                        continue;
                    };
                    let data: Vec<u8> = (0..*len).map(|i| (i as usize + step) as u8 | 1).collect();
                    let n = t.write(S1, d, &data, Some(*off as u64)).unwrap();
                    prop_assert_eq!(n, *len as u64);
                    let m = model.get_mut(&name(*f)).unwrap();
                    let end = *off as usize + *len as usize;
                    if m.len() < end { m.resize(end, 0); }
                    m[*off as usize..end].copy_from_slice(&data);
                    t.close(S1, d);
                }
                Op::Truncate(f, size) => {
                    let Ok(ino) = t.lookup(ROOT, &name(*f)) else { continue };
                    t.setattr(USER, ino, SetAttr { size: Some(*size as u64), ..SetAttr::NONE }).unwrap();
                    model.get_mut(&name(*f)).unwrap().resize(*size as usize, 0);
                }
                Op::Unlink(f) => {
                    let r = t.unlink(ROOT, &name(*f), UnlinkKind::NonDirectory);
                    prop_assert_eq!(r.is_ok(), model.remove(&name(*f)).is_some());
                }
                Op::Rename(a, b) => {
                    let r = t.rename(ROOT, &name(*a), ROOT, &name(*b), 0);
                    prop_assert_eq!(r.is_ok(), model.contains_key(&name(*a)));
                    if let Some(v) = model.remove(&name(*a)) {
                        model.insert(name(*b), v);
                    }
                }
            }
        }
        let mut listed = t.list(ROOT, 256);
        listed.drain(..2);
        listed.sort();
        prop_assert_eq!(listed, model.keys().cloned().collect::<Vec<_>>());
        for (n, want) in &model {
            let (d, a) = t.open_as(S1, USER, ROOT, n, 0, 0).unwrap();
            prop_assert_eq!(a.size, want.len() as u64);
            let got = t.read(S1, d, 12_100, Some(0)).unwrap();
            prop_assert_eq!(&got, want);
            t.close(S1, d);
            t.unlink(ROOT, n, UnlinkKind::NonDirectory).unwrap();
        }
        prop_assert_eq!(t.stats().blocks_used, 0);
        prop_assert_eq!(t.stats().inodes, 1);
    }
}

// ---------------------------------------------------------------- coalescing

#[test]
fn coalesced_requests_are_counted_with_the_messages_they_saved() {
    fn counter(t: &T, name: &str) -> u64 {
        let s = t.stats();
        s.counters
            .iter()
            .find(|(n, _)| n == name)
            .map_or(0, |(_, v)| *v)
    }
    let mut t = server(64);
    let (d, _) = t.create(ROOT, "f"); // CREATE + ADD_MAP + OPEN
    t.close(S1, d);
    let (d, _) = t.open_as(S1, USER, ROOT, "f", RW, 0).unwrap(); // LOOKUP + OPEN
    t.close(S1, d);
    t.mkdir(ROOT, "d"); // CREATE + ADD_MAP
                        // Failures did no combined work and save nothing.
    assert_eq!(
        t.open_as(S1, USER, ROOT, "missing", RW, 0),
        Err(Errno::ENOENT)
    );
    assert_eq!(t.mkdir_as(USER, ROOT, "d", 0o755), Err(Errno::EEXIST));
    assert_eq!(counter(&t, "coalescing.combined_creates"), 1);
    assert_eq!(counter(&t, "coalescing.combined_opens"), 1);
    assert_eq!(counter(&t, "coalescing.combined_nodes"), 1);
    assert_eq!(counter(&t, "coalescing.messages_saved"), 2 + 1 + 1);
}

#[test]
fn hot_directories_are_counted_and_named_from_their_parent() {
    let mut t = server(64);
    let d = t.mkdir(ROOT, "hot");
    let sub = t.mkdir(d, "sub");
    for i in 0..20 {
        t.create(sub, &format!("f{i}"));
    }
    let hot = t.fs.hot_dirs();
    assert_eq!(hot[0].ino, sub.0, "{hot:?}");
    assert!(hot[0].ops >= 20, "{hot:?}");
    let names = t.fs.dir_names(&[(sub.0, None), (d.0, None)]);
    let name_of = |ino: InodeId| names.iter().find(|n| n.ino == ino.0).cloned();
    let n = name_of(sub).expect("sub named");
    assert_eq!((n.parent, n.name.as_str()), (d.0, "sub"));
    let n = name_of(d).expect("hot named");
    assert_eq!((n.parent, n.name.as_str()), (ROOT.0, "hot"));
}

#[test]
fn directory_names_are_found_across_servers_in_rounds() {
    // `a` lives on server 0 (entries and `..`); `b`, named in `a`, is
    // homed on server 1, which knows only its parent (as after `mkdir`,
    // whose client sends `SetParent` to the new home); `c` is in `b` on
    // server 1.
    let mut s0 = server_n(0, 2, 64);
    let mut s1 = server_n(1, 2, 64);
    let a = s0.mkdir(ROOT, "a");
    let b = match s0.ok(
        S1,
        USER,
        Request::MakeNode {
            dir: a,
            name: b"b",
            ftype: FileType::Directory,
            perm: 0o755,
            rdev: 0,
            target: b"",
            home: 1,
            distributed: false,
        },
    ) {
        Own::Entry(ino, _) => ino,
        other => panic!("{other:?}"),
    };
    assert_eq!(b.home(), 1);
    s1.ok(S1, USER, Request::SetParent { dir: b, parent: a });
    // The client vouches for `b`'s attributes, which server 0 holds.
    let c = match s1.callv(
        S1,
        USER,
        &[attrs_of(b, 0o755, USER.uid, USER.gid)],
        Request::MakeNode {
            dir: b,
            name: b"c",
            ftype: FileType::Directory,
            perm: 0o755,
            rdev: 0,
            target: b"",
            home: 1,
            distributed: false,
        },
    ) {
        Own::Entry(ino, _) => ino,
        other => panic!("{other:?}"),
    };
    let mut rounds = 0;
    let names = crate::fs::name_dirs([c.0, b.0, ROOT.0], |ask| {
        rounds += 1;
        let mut v = s0.fs.dir_names(ask);
        v.extend(s1.fs.dir_names(ask));
        Some(v)
    });
    let of = |d: InodeId| {
        names
            .iter()
            .find(|n| n.ino == d.0)
            .map(|n| (n.parent, n.name.clone()))
    };
    assert_eq!(of(c), Some((b.0, "c".into())));
    assert_eq!(of(b), Some((a.0, "b".into())), "{names:?}");
    assert_eq!(of(a), Some((ROOT.0, "a".into())), "{names:?}");
    assert_eq!(of(ROOT), None);
    // b's parent, then b's name from server 0, then a.
    assert_eq!(rounds, 3);
    // A directory nobody knows is given up at once.
    let mut asked = 0;
    assert!(
        crate::fs::name_dirs([InodeId::new(1, 1, false, 999).0], |_| {
            asked += 1;
            Some(Vec::new())
        })
        .is_empty()
    );
    assert_eq!(asked, 1);
    // A round a server did not answer ends the search with what is known.
    let mut asked = 0;
    let names = crate::fs::name_dirs([c.0], |ask| {
        asked += 1;
        (asked == 1).then(|| s1.fs.dir_names(ask))
    });
    assert_eq!(asked, 2);
    assert_eq!(names.len(), 1);
    assert_eq!(names[0].parent, b.0);
}
