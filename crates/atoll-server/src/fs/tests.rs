//! Behaviour of one file server, driven directly (no rings).

use super::space::{FALLOC_KEEP_SIZE, FALLOC_PUNCH_HOLE, FALLOC_ZERO_RANGE};
use super::xattr::{XATTR_CREATE, XATTR_REPLACE};
use super::*;
use crate::store::MemStore;
use atoll_proto::{entry_server, LockSpec, ModeInfo, StatFsInfo};
use proptest::prelude::*;

mod acl;
mod data;
mod descs;
mod hostile;
mod leases;
mod mapping;
mod names;
mod perm;
mod sizes;
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
    Skipped,
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
        Reply::Dirents { data, end, .. } => Own::Dirents(data.to_vec(), end),
        Reply::Attr(a) => Own::Attr(a),
        Reply::Target(b)
        | Reply::Data(b)
        | Reply::Xattr(b)
        | Reply::XattrNames(b)
        | Reply::Names(b) => Own::Bytes(b.to_vec()),
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
        Reply::Skipped => Own::Skipped,
    }
}

struct T {
    fs: FileServer<MemStore>,
    out: Vec<u8>,
}

/// `Request::Map` of `ino` into session `to` as the client's mapping
/// `mapping` (a process's own `mmap`, or one a forked child inherits).
fn map_req(ino: InodeId, to: SessionId, mapping: u64) -> Request<'static> {
    Request::Map { ino, to, mapping }
}

/// `Request::Unmap` of the caller's mapping `mapping` of `ino`.
fn unmap_req(ino: InodeId, mapping: u64) -> Request<'static> {
    Request::Unmap { ino, mapping }
}

/// `Request::Share` of `desc` with session `to`, which held `held`
/// references to it before (a fork's share).
fn share_req(desc: DescId, to: SessionId, held: u32) -> Request<'static> {
    Request::Share { desc, to, held }
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
        track_absent: true,
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
                inherit: atoll_proto::Inherit::Unread,
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
                spread: 0,
                inherit: atoll_proto::Inherit::Unread,
                umask: 0,
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
                spread: 0,
                inherit: atoll_proto::Inherit::Unread,
                umask: 0,
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
                fsize: None,
                chain: None,
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
                report: true,
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
            spread: 4,
            inherit: atoll_proto::Inherit::Unread,
            umask: 0,
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
            spread: 4,
            inherit: atoll_proto::Inherit::Unread,
            umask: 0,
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
        set(&mut t, USER, "system.x", b"", 0),
        Own::Err(Errno::ENOTSUP)
    );
    // security.* as tmpfs keeps them: CAP_SYS_ADMIN writes.
    assert_eq!(
        set(&mut t, USER, "security.x", b"", 0),
        Own::Err(Errno::EPERM)
    );
    assert_eq!(set(&mut t, ROOTC, "security.x", b"v", 0), Own::Ok);
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
    // security.* are listed to everyone, trusted.* only with CAP_SYS_ADMIN.
    assert_eq!(
        t.ok(S1, USER, Request::ListXattr { ino: f }),
        Own::Bytes(b"security.x\0user.a\0".to_vec())
    );
    assert_eq!(
        t.ok(S1, ROOTC, Request::ListXattr { ino: f }),
        Own::Bytes(b"security.x\0trusted.t\0user.a\0".to_vec())
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
                spread: 0,
                inherit: atoll_proto::Inherit::Unread,
                umask: 0,
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
            spread: 0,
            inherit: atoll_proto::Inherit::Unread,
            umask: 0,
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
            spread: 0,
            inherit: atoll_proto::Inherit::Unread,
            umask: 0,
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
