//! Each bounded resource of `limits` hits its limit with the errno Linux
//! gives there, and the server works again once something is deleted.

use std::rc::Rc;

use atoll_proto::{
    entry_server, Cred, DescId, Errno, FileType, InodeId, LockOwner, LockSpec, Reply, Request,
    SessionId, UnlinkKind, Vouched, BLOCK_SIZE, ROOT,
};

use super::limits::{Limits, LocalGauges};
use super::Cache;
use super::{FileServer, FsConfig};
use crate::store::MemStore;

const USER: Cred = Cred::of(1000, 1000);
const S: SessionId = SessionId(1);
const RW: u32 = libc::O_RDWR as u32;
const CREAT: u32 = libc::O_CREAT as u32;

/// What a reply says, without its borrow of the output buffer.
#[derive(Debug, PartialEq)]
enum Got {
    Ok,
    Ino(InodeId),
    Desc(DescId),
    Bytes(Vec<u8>),
    Files(u64, u64),
    Err(Errno),
}

fn got(r: Reply<'_>) -> Got {
    match r {
        Reply::Entry { ino, .. } => Got::Ino(ino),
        Reply::Opened { desc, .. } => Got::Desc(desc),
        Reply::Pipe { read, .. } => Got::Desc(read),
        Reply::Target(b) | Reply::Xattr(b) => Got::Bytes(b.to_vec()),
        Reply::StatFs(i) => Got::Files(i.files, i.files_free),
        Reply::Err(e) => Got::Err(e),
        _ => Got::Ok,
    }
}

struct Srv {
    fs: FileServer<MemStore>,
    out: Vec<u8>,
    /// Attributes of directories owned elsewhere that requests carry.
    vouched: Vec<Vouched>,
}

fn servers(n: usize, blocks: u32, limits: Limits) -> Vec<Srv> {
    let gauges = Rc::new(LocalGauges::new(&limits));
    // One block pool for all, as in an instance (each store is private,
    // but the pool keeps their block numbers apart all the same).
    let pool = std::sync::Arc::new(atoll_msg::BlockPool::new(0, blocks, n));
    (0..n)
        .map(|index| {
            let cfg = FsConfig {
                index,
                nservers: n,
                first_block: 0,
                nblocks: blocks,
                root_owner: USER,
                core: -1,
                track_lookups: true,
                track_absent: true,
                limits,
            };
            Srv {
                fs: FileServer::with_gauges(
                    cfg,
                    Cache::new(
                        atoll_msg::BlockPool::rep(&pool, index).unwrap(),
                        MemStore::new(blocks as usize),
                    ),
                    gauges.clone(),
                ),
                out: Vec::new(),
                vouched: vec![vouch(ROOT)],
            }
        })
        .collect()
}

fn one(limits: Limits) -> Srv {
    servers(1, 64, limits).pop().expect("a server")
}

/// A directory's attributes, for name changes at servers that do not own
/// it.
fn vouch(ino: InodeId) -> Vouched {
    Vouched {
        ino,
        perm: 0o755,
        uid: USER.uid,
        gid: USER.gid,
        epoch: 0,
        default_acl: false,
        access_acl: false,
        verdict: None,
    }
}

impl Srv {
    fn call(&mut self, req: Request<'_>) -> Got {
        got(self
            .fs
            .handle_vouched(S, USER, &self.vouched, req, &mut self.out))
    }
}

fn create(name: &[u8]) -> Request<'_> {
    create_in(ROOT, name)
}

fn create_in(dir: InodeId, name: &[u8]) -> Request<'_> {
    Request::Open {
        dir,
        name,
        flags: CREAT | RW,
        perm: 0o644,
        umask: 0,
        inherit: atoll_proto::Inherit::Unread,
    }
}

fn node<'a>(name: &'a [u8], ftype: FileType, target: &'a [u8]) -> Request<'a> {
    Request::MakeNode {
        dir: ROOT,
        name,
        ftype,
        perm: 0o755,
        rdev: 0,
        target,
        home: 0,
        spread: 0,
        inherit: atoll_proto::Inherit::Unread,
        umask: 0,
    }
}

fn unlink(name: &[u8]) -> Request<'_> {
    Request::Unlink {
        dir: ROOT,
        name,
        kind: UnlinkKind::NonDirectory,
        expect: None,
    }
}

fn limits(inodes: u64) -> Limits {
    Limits::with_inodes(1 << 20, inodes)
}

/// Two servers share one inode limit: whichever holds the entries (a
/// distributed directory spreads them, Hare §3.4), the instance stops at
/// the limit, `statfs` agrees, and a deletion on either server makes room
/// on both.
#[test]
fn inode_limit_holds_across_servers_and_recovers_after_unlink() {
    let mut s = servers(2, 64, limits(8));
    let mut dist = node(b"d", FileType::Directory, b"");
    if let Request::MakeNode { spread, .. } = &mut dist {
        *spread = 2;
    }
    let Got::Ino(d) = s[0].call(dist) else {
        panic!("mkdir")
    };
    for srv in &mut s {
        srv.vouched.push(vouch(d));
    }
    let mut made = Vec::new();
    for i in 0..100u32 {
        let name = format!("f{i}").into_bytes();
        let at = entry_server(d, &name, 2);
        match s[at].call(create_in(d, &name)) {
            Got::Desc(desc) => {
                s[at].call(Request::Close { desc });
                made.push((at, name));
            }
            Got::Err(e) => {
                assert_eq!(e, Errno::ENOSPC);
                break;
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(made.len(), 6, "the root and d are inodes too");
    assert!(made.iter().any(|(at, _)| *at == 0) && made.iter().any(|(at, _)| *at == 1));
    assert_eq!(s[0].call(Request::StatFs), Got::Files(8, 0));
    assert_eq!(s[1].call(Request::StatFs), Got::Files(0, 0));
    // Every kind of inode is refused.
    for (ftype, target) in [
        (FileType::Directory, &b""[..]),
        (FileType::Symlink, b"t"),
        (FileType::Fifo, b""),
        (FileType::Socket, b"\0abstract"),
    ] {
        assert_eq!(
            s[0].call(node(b"zz", ftype, target)),
            Got::Err(Errno::ENOSPC),
            "{ftype:?}"
        );
    }
    // Delete one file on server 1: server 0 may create again.
    let (at, name) = made.iter().find(|(at, _)| *at == 1).expect("one on 1");
    let gone = Request::Unlink {
        dir: d,
        name,
        kind: UnlinkKind::NonDirectory,
        expect: None,
    };
    assert_eq!(s[*at].call(gone), Got::Ok);
    assert_eq!(s[0].call(Request::StatFs), Got::Files(8, 1));
    assert!(matches!(
        s[0].call(node(b"zz", FileType::Fifo, b"")),
        Got::Ino(_)
    ));
    assert_eq!(s[0].call(Request::StatFs), Got::Files(8, 0));
}

/// Hard links take names, which are bounded like inodes (tmpfs charges a
/// link as an inode): `ENOSPC` at the limit, room again after an unlink.
#[test]
fn hard_links_are_refused_past_the_name_limit_and_allowed_after_unlink() {
    let mut s = one(limits(4));
    let Got::Desc(d) = s.call(create(b"f")) else {
        panic!("create")
    };
    s.call(Request::Close { desc: d });
    let Got::Ino(ino) = s.call(Request::Lookup {
        dir: ROOT,
        name: b"f",
    }) else {
        panic!("lookup")
    };
    let link = |name: &'static [u8]| Request::Link {
        dir: ROOT,
        name,
        ino,
        ftype: FileType::Regular,
        replace: false,
        moved_from: None,
    };
    assert_eq!(s.call(link(b"l1")), Got::Ok);
    assert_eq!(s.call(link(b"l2")), Got::Ok);
    assert_eq!(s.call(link(b"l3")), Got::Ok);
    assert_eq!(s.call(link(b"l4")), Got::Err(Errno::ENOSPC));
    // df -i counts the links as tmpfs does: 2 inodes, 4 names.
    assert_eq!(s.call(Request::StatFs), Got::Files(4, 0));
    assert_eq!(s.call(unlink(b"l1")), Got::Ok);
    assert_eq!(s.call(link(b"l4")), Got::Ok);
    // A rename never needs room: it moves a name.
    let rename = Request::Rename {
        olddir: ROOT,
        oldname: b"l4",
        newdir: ROOT,
        newname: b"l5",
        flags: 0,
    };
    assert_eq!(s.call(rename), Got::Ok);
}

/// Open descriptions stop at the instance's limit with `ENFILE` (pipes
/// too), and closing one makes room.
#[test]
fn open_descriptions_stop_at_enfile_and_recover_after_close() {
    let mut l = limits(100);
    l.descriptions = 3;
    let mut s = one(l);
    let Got::Desc(a) = s.call(create(b"a")) else {
        panic!("create")
    };
    let open = || Request::Open {
        dir: ROOT,
        name: b"a",
        flags: RW,
        perm: 0,
        umask: 0,
        inherit: atoll_proto::Inherit::Unread,
    };
    assert!(matches!(s.call(open()), Got::Desc(_)));
    assert!(matches!(s.call(open()), Got::Desc(_)));
    assert_eq!(s.call(open()), Got::Err(Errno::ENFILE));
    // Linux finds a file table slot before it creates: nothing is made.
    assert_eq!(s.call(create(b"b")), Got::Err(Errno::ENFILE));
    assert_eq!(
        s.call(Request::Lookup {
            dir: ROOT,
            name: b"b"
        }),
        Got::Err(Errno::ENOENT)
    );
    assert_eq!(s.call(Request::Pipe { flags: 0 }), Got::Err(Errno::ENFILE));
    assert_eq!(s.call(Request::Close { desc: a }), Got::Ok);
    assert!(matches!(s.call(open()), Got::Desc(_)));
}

/// Lock records stop at the limit with `ENOLCK`; unlocking (or closing)
/// makes room.
#[test]
fn locks_stop_at_enolck_and_recover_after_unlock() {
    let mut l = limits(100);
    l.locks = 6;
    let mut s = one(l);
    let Got::Desc(d) = s.call(create(b"f")) else {
        panic!("create")
    };
    let lock = |kind: i16, start: u64| Request::SetLock {
        desc: d,
        lock: LockSpec {
            kind,
            start,
            len: 1,
            owner: LockOwner::Process(S.0),
            pid: 0,
        },
    };
    let wr = libc::F_WRLCK as i16;
    // Separate byte ranges: one record each.
    for i in 0..6 {
        assert_eq!(s.call(lock(wr, 2 * i)), Got::Ok, "lock {i}");
    }
    assert_eq!(s.call(lock(wr, 100)), Got::Err(Errno::ENOLCK));
    // Converting or unlocking whole locks needs no room.
    assert_eq!(s.call(lock(wr, 0)), Got::Ok, "a conversion in place");
    let unlock_all = Request::SetLock {
        desc: d,
        lock: LockSpec {
            kind: libc::F_UNLCK as i16,
            start: 2,
            len: 2,
            owner: LockOwner::Process(S.0),
            pid: 0,
        },
    };
    assert_eq!(s.call(unlock_all), Got::Ok);
    assert_eq!(s.call(lock(wr, 100)), Got::Ok);
    // Closing drops the process's locks: all room back.
    assert_eq!(s.call(Request::Close { desc: d }), Got::Ok);
    let Got::Desc(d2) = s.call(create(b"g")) else {
        panic!("create")
    };
    for i in 0..6 {
        let r = s.call(Request::SetLock {
            desc: d2,
            lock: LockSpec {
                kind: wr,
                start: 2 * i,
                len: 1,
                owner: LockOwner::Process(S.0),
                pid: 0,
            },
        });
        assert_eq!(r, Got::Ok);
    }
}

/// Extended attributes: `E2BIG` past 64 KiB, `ENOSPC` past the inode's
/// space and past the instance's share of memory; removing makes room,
/// and so does deleting the inode.
#[test]
fn xattrs_stop_at_e2big_and_enospc_and_recover_after_removal() {
    let mut l = limits(100);
    l.xattr_bytes = 10_000;
    let mut s = one(l);
    let mut files = Vec::new();
    for name in [&b"a"[..], b"b", b"c"] {
        let Got::Desc(d) = s.call(create(name)) else {
            panic!("create")
        };
        s.call(Request::Close { desc: d });
        let Got::Ino(ino) = s.call(Request::Lookup { dir: ROOT, name }) else {
            panic!("lookup")
        };
        files.push(ino);
    }
    let set = |ino, name: &'static [u8], value: &'static [u8]| Request::SetXattr {
        ino,
        name,
        value,
        flags: 0,
        via: None,
    };
    static HUGE: [u8; 64 * 1024 + 1] = [0; 64 * 1024 + 1];
    static BIG: [u8; 4000] = [7; 4000];
    assert_eq!(
        s.call(set(files[0], b"user.x", &HUGE)),
        Got::Err(Errno::E2BIG)
    );
    assert_eq!(
        s.call(set(files[0], b"user.x", &HUGE[..5000])),
        Got::Err(Errno::ENOSPC)
    );
    assert_eq!(s.call(set(files[0], b"user.a", &BIG)), Got::Ok);
    assert_eq!(s.call(set(files[1], b"user.a", &BIG)), Got::Ok);
    // 8014 bytes used of 10 000: the third does not fit.
    assert_eq!(
        s.call(set(files[2], b"user.a", &BIG)),
        Got::Err(Errno::ENOSPC)
    );
    // Replacing a value with a shorter one needs no room.
    assert_eq!(s.call(set(files[1], b"user.a", &BIG[..10])), Got::Ok);
    assert_eq!(s.call(set(files[2], b"user.a", &BIG)), Got::Ok);
    assert_eq!(
        s.call(set(files[2], b"user.b", &BIG)),
        Got::Err(Errno::ENOSPC)
    );
    assert_eq!(
        s.call(Request::RemoveXattr {
            ino: files[2],
            name: b"user.a",
            via: None,
        }),
        Got::Ok
    );
    assert_eq!(s.call(set(files[2], b"user.b", &BIG)), Got::Ok);
    // Deleting a file gives its xattrs' bytes back.
    assert_eq!(s.call(unlink(b"a")), Got::Ok);
    assert_eq!(s.call(set(files[1], b"user.c", &BIG)), Got::Ok);
}

/// A long symlink target takes a buffer-cache block (as tmpfs takes a
/// page), so targets cannot outgrow `--memory`: `ENOSPC` with no block
/// left, the target reads back, and unlinking frees the block.
#[test]
fn long_symlink_targets_take_a_block_and_give_it_back() {
    let mut s = servers(1, 2, limits(100)).pop().expect("server");
    let long: Vec<u8> = (0..3000u32).map(|i| b'a' + (i % 26) as u8).collect();
    assert!(matches!(
        s.call(node(b"l1", FileType::Symlink, &long)),
        Got::Ino(_)
    ));
    let Got::Ino(l2) = s.call(node(b"l2", FileType::Symlink, &long[..200])) else {
        panic!("second long symlink")
    };
    assert_eq!(
        s.call(node(b"l3", FileType::Symlink, &long)),
        Got::Err(Errno::ENOSPC)
    );
    // Short targets stay with the inode.
    assert!(matches!(
        s.call(node(b"s", FileType::Symlink, b"short")),
        Got::Ino(_)
    ));
    assert_eq!(
        s.call(Request::ReadLink { ino: l2 }),
        Got::Bytes(long[..200].to_vec())
    );
    match s
        .fs
        .handle(S, USER, Request::GetAttr { ino: l2 }, &mut s.out)
    {
        Reply::Attr(a) => {
            assert_eq!(a.size, 200);
            assert_eq!(a.blocks, BLOCK_SIZE as u64 / 512, "as tmpfs");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(s.call(unlink(b"l1")), Got::Ok);
    assert!(matches!(
        s.call(node(b"l3", FileType::Symlink, &long)),
        Got::Ino(_)
    ));
    let Got::Ino(l3) = s.call(Request::Lookup {
        dir: ROOT,
        name: b"l3",
    }) else {
        panic!("lookup")
    };
    assert_eq!(s.call(Request::ReadLink { ino: l3 }), Got::Bytes(long));
}

/// Lookup tracking past its cap never fails a lookup: the oldest records
/// go, their sessions are told to forget, and the server keeps at most the
/// cap.
#[test]
fn lookup_tracking_is_bounded_and_never_fails_a_lookup() {
    let mut l = limits(1000);
    l.tracked = 16;
    let mut s = one(l);
    for i in 0..40u32 {
        let name = format!("f{i}").into_bytes();
        let Got::Desc(d) = s.call(create(&name)) else {
            panic!("create")
        };
        s.call(Request::Close { desc: d });
    }
    let mut told = 0;
    for round in 0..3 {
        for i in 0..40u32 {
            let name = format!("f{i}").into_bytes();
            for session in 1..4u64 {
                let r = s.fs.handle(
                    SessionId(session),
                    USER,
                    Request::Lookup {
                        dir: ROOT,
                        name: &name,
                    },
                    &mut s.out,
                );
                assert!(matches!(r, Reply::Entry { .. }), "round {round}: {r:?}");
                told += s.fs.take_notices().len();
                assert!(s.fs.track.records() <= 16);
            }
        }
    }
    assert!(told > 0, "evicted records are notified");
}

/// A `mkdir`/`rmdir` loop leaves nothing behind: an owned directory is
/// forgotten with its inode, and a creation in it still answers `ENOENT`.
#[test]
fn removed_directories_do_not_accumulate() {
    let mut s = one(limits(100));
    let mut last = ROOT;
    for _ in 0..1000 {
        let Got::Ino(d) = s.call(node(b"d", FileType::Directory, b"")) else {
            panic!("mkdir")
        };
        let rmdir = Request::Unlink {
            dir: ROOT,
            name: b"d",
            kind: UnlinkKind::Directory,
            expect: None,
        };
        assert_eq!(s.call(rmdir), Got::Ok);
        last = d;
    }
    assert_eq!(s.fs.removed.len(), 0);
    assert_eq!(s.fs.shards.len(), 1, "the root's only");
    assert_eq!(s.call(create_in(last, b"f")), Got::Err(Errno::ENOENT));
    let set_parent = Request::SetParent {
        dir: last,
        parent: ROOT,
    };
    assert_eq!(s.call(set_parent), Got::Err(Errno::ENOENT));
}

/// The description and inode of the file `req` creates and opens on `s`.
fn open_new(s: &mut Srv, req: Request<'_>) -> (DescId, InodeId) {
    match s.fs.handle_vouched(S, USER, &s.vouched, req, &mut s.out) {
        Reply::Opened { desc, attr, .. } => (desc, attr.ino),
        r => panic!("{r:?}"),
    }
}

/// Blocks one at a time at the end of `ino` until `ENOSPC`; how many.
fn fill_blocks(s: &mut Srv, ino: InodeId, from: u64) -> u64 {
    let mut n = 0;
    loop {
        let req = Request::Fallocate {
            ino,
            mode: 0,
            offset: (from + n) * BLOCK_SIZE as u64,
            len: BLOCK_SIZE as u64,
        };
        match s.call(req) {
            Got::Err(e) => {
                assert_eq!(e, Errno::ENOSPC);
                return n;
            }
            _ => n += 1,
        }
    }
}

/// Buffer-cache blocks flow between servers through the pool (`blocks`),
/// but blocks parked for an open file that was cut down stay their
/// server's until the last close; then they flow to the other server.
#[test]
fn blocks_of_an_open_truncated_file_flow_to_another_server_only_after_close() {
    let mut s = servers(2, 64, limits(100));
    let (desc, a) = open_new(&mut s[0], create(b"a"));
    let whole = 32 * BLOCK_SIZE as u64;
    let falloc = |ino, mode, len| Request::Fallocate {
        ino,
        mode,
        offset: 0,
        len,
    };
    assert_eq!(s[0].call(falloc(a, 0, whole)), Got::Ok);
    // Punch it all out while open: the blocks are parked, not free.
    assert_eq!(s[0].call(falloc(a, 3, whole)), Got::Ok);
    let placed = Request::CreateInode {
        dir: ROOT,
        name: b"placed",
        ftype: FileType::Regular,
        perm: 0o644,
        rdev: 0,
        target: b"",
        open: Some(RW),
        inherit: atoll_proto::Inherit::Unread,
        umask: 0,
    };
    let (_, b) = open_new(&mut s[1], placed);
    assert_eq!(fill_blocks(&mut s[1], b, 0), 32, "the parked 32 stay a's");
    assert_eq!(s[0].fs.cache.used(), 32);
    // The last close frees them; a keeps at most its high watermark and
    // the rest flows back to the root, where b finds it.
    assert_eq!(s[0].call(Request::Close { desc }), Got::Ok);
    let kept = s[0].fs.cache.listed() as u64;
    assert!(kept < 32);
    assert_eq!(fill_blocks(&mut s[1], b, 32), 32 - kept);
    assert_eq!(s[0].fs.cache.statfs(), (64, kept), "df: a's list is all");
}

/// A working directory's description (`OPEN_SEARCH`, which needs search
/// permission) keeps a removed directory: its attributes show no links,
/// `..` is the parent it had, creating in it is `ENOENT`; the last close
/// frees the inode and forgets the directory and its parent.
#[test]
fn a_held_removed_directory_keeps_its_parent_until_its_last_close() {
    let mut s = one(limits(100));
    let Got::Ino(p) = s.call(node(b"p", FileType::Directory, b"")) else {
        panic!("mkdir p")
    };
    let mut in_p = node(b"d", FileType::Directory, b"");
    if let Request::MakeNode { dir, .. } = &mut in_p {
        *dir = p;
    }
    let Got::Ino(d) = s.call(in_p) else {
        panic!("mkdir p/d")
    };
    let flags = (libc::O_PATH | libc::O_DIRECTORY) as u32 | atoll_proto::OPEN_SEARCH;
    let Got::Desc(desc) = s.call(Request::OpenInode {
        ino: d,
        flags,
        via: None,
    }) else {
        panic!("the cwd's description")
    };
    let rmdir = Request::Unlink {
        dir: p,
        name: b"d",
        kind: UnlinkKind::Directory,
        expect: None,
    };
    assert_eq!(s.call(rmdir), Got::Ok);
    let dotdot = || Request::Lookup {
        dir: d,
        name: b"..",
    };
    assert_eq!(s.call(dotdot()), Got::Ino(p));
    assert_eq!(s.call(create_in(d, b"f")), Got::Err(Errno::ENOENT));
    assert!(s.fs.inodes.get(&d).is_some_and(|i| i.links == 0));
    assert_eq!(s.call(Request::Close { desc }), Got::Ok);
    assert!(!s.fs.inodes.contains_key(&d), "freed at the last close");
    assert_eq!(s.fs.removed.parent(&d), None);
    assert_eq!(s.call(dotdot()), Got::Err(Errno::ENOENT));
}
