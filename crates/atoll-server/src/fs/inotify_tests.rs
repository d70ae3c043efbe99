//! Unit tests of `inotify`: watch registration, events, cleanup.

use super::*;
use crate::fs::FsConfig;
use crate::store::MemStore;
use atoll_proto::{Cred, Request, SetAttr, BLOCK_SIZE, ROOT};

const S1: SessionId = SessionId(1);
const S2: SessionId = SessionId(2);
const ME: Cred = Cred::of(1000, 1000);

fn server() -> FileServer<MemStore> {
    FileServer::new(
        FsConfig {
            index: 0,
            nservers: 1,
            first_block: 0,
            nblocks: 256,
            root_owner: ME,
            core: -1,
            track_lookups: false,
            track_absent: false,
            limits: crate::fs::Limits::for_memory(1 << 30),
        },
        MemStore::new(256),
    )
}

/// A queue: (its description, its header, its ref).
fn queue(fs: &mut FileServer<MemStore>, s: SessionId) -> (DescId, QueueRef) {
    queue_of(fs, s, DEFAULT_MAX_EVENTS)
}

/// A queue of at most `max_events` records.
fn queue_of(fs: &mut FileServer<MemStore>, s: SessionId, max_events: u32) -> (DescId, QueueRef) {
    let mut out = Vec::new();
    let req = Request::InotifyInit {
        flags: 0,
        max_events,
    };
    match fs.handle(s, ME, req, &mut out) {
        Reply::Pipe {
            read, header, ino, ..
        } => (read, QueueRef { header, id: ino.0 }),
        other => panic!("{other:?}"),
    }
}

fn watch(
    fs: &mut FileServer<MemStore>,
    s: SessionId,
    q: DescId,
    ino: InodeId,
    mask: u32,
) -> Result<(i32, u32), Errno> {
    let mut out = Vec::new();
    match fs.handle(
        s,
        ME,
        Request::InotifyAddWatch { desc: q, ino, mask },
        &mut out,
    ) {
        Reply::Watch {
            wd, mask, queue, ..
        } => {
            let mut out = Vec::new();
            let r = fs.handle(
                s,
                ME,
                Request::InotifyRegister {
                    queue,
                    ino,
                    wd,
                    mask,
                },
                &mut out,
            );
            assert!(matches!(r, Reply::Ok), "{r:?}");
            Ok((wd, mask))
        }
        Reply::Err(e) => Err(e),
        other => panic!("{other:?}"),
    }
}

/// Every record in the ring, consumed: (wd, mask, cookie, name).
fn drain(fs: &mut FileServer<MemStore>, h: u32) -> Vec<(i32, u32, u32, Vec<u8>)> {
    drain_some(fs, h, usize::MAX)
}

/// The first `n` records in the ring, consumed as a reader does.
fn drain_some(fs: &mut FileServer<MemStore>, h: u32, n: usize) -> Vec<(i32, u32, u32, Vec<u8>)> {
    let mut v = Vec::new();
    let head = fs.cache.store.get_u64(h, HEAD);
    let mut tail = fs.cache.store.get_u64(h, TAIL);
    while tail < head && v.len() < n {
        let mut hd = [0u8; EVENT_HEADER];
        fs.ring_read(h, tail, &mut hd);
        let (wd, mask, cookie, len) = decode_header(&hd);
        let mut name = vec![0u8; len as usize];
        fs.ring_read(h, tail + EVENT_HEADER as u64, &mut name);
        while name.last() == Some(&0) {
            name.pop();
        }
        v.push((wd, mask, cookie, name));
        tail += (EVENT_HEADER + len as usize) as u64;
    }
    fs.cache.store.put_u64(h, TAIL, tail);
    let count = fs.cache.store.get_u32(h, COUNT);
    fs.cache.store.put_u32(h, COUNT, count - v.len() as u32);
    v
}

fn create(fs: &mut FileServer<MemStore>, name: &[u8]) -> (InodeId, DescId) {
    let mut out = Vec::new();
    let flags = (libc::O_CREAT | libc::O_RDWR) as u32;
    let req = Request::Open {
        dir: ROOT,
        name,
        flags,
        perm: 0o644,
        umask: 0,
        inherit: atoll_proto::Inherit::Unread,
    };
    match fs.handle(S1, ME, req, &mut out) {
        Reply::Opened { desc, attr, .. } => (attr.ino, desc),
        other => panic!("{other:?}"),
    }
}

/// A client's write: `Write`, then (the bytes copied) `InotifyModified`
/// when the reply says the file is watched.
fn write(fs: &mut FileServer<MemStore>, desc: DescId, len: u64, offset: Option<u64>) -> bool {
    let mut out = Vec::new();
    let watched = match fs.handle(
        S1,
        ME,
        Request::Write {
            desc,
            len,
            offset,
            fsize: None,
        },
        &mut out,
    ) {
        Reply::Extents { watched, .. } => watched,
        other => panic!("{other:?}"),
    };
    if watched {
        ok(fs, S1, Request::InotifyModified { desc });
    }
    watched
}

fn ok(fs: &mut FileServer<MemStore>, s: SessionId, req: Request<'_>) {
    let mut out = Vec::new();
    let r = fs.handle(s, ME, req, &mut out);
    assert!(!matches!(r, Reply::Err(_)), "{r:?}");
}

#[test]
fn directory_watch_sees_create_modify_attrib_close_move_delete() {
    let mut fs = server();
    let (q, qr) = queue(&mut fs, S1);
    let (wd, _) = watch(&mut fs, S1, q, ROOT, IN_ALL_EVENTS).unwrap();
    let (f, d) = create(&mut fs, b"log");
    assert!(write(&mut fs, d, 5, None));
    assert!(write(&mut fs, d, 5, None));
    ok(&mut fs, S1, Request::Close { desc: d });
    let set = SetAttr {
        perm: Some(0o600),
        ..SetAttr::NONE
    };
    ok(
        &mut fs,
        S1,
        Request::SetAttr {
            ino: f,
            set,
            via: None,
        },
    );
    let req = Request::Rename {
        olddir: ROOT,
        oldname: b"log",
        newdir: ROOT,
        newname: b"old",
        flags: 0,
    };
    ok(&mut fs, S1, req);
    let req = Request::Unlink {
        dir: ROOT,
        name: b"old",
        kind: atoll_proto::UnlinkKind::NonDirectory,
        expect: None,
    };
    ok(&mut fs, S1, req);
    let ev = drain(&mut fs, qr.header);
    let masks: Vec<u32> = ev.iter().map(|e| e.1).collect();
    // Two identical consecutive writes are merged, as Linux merges them.
    assert_eq!(
        masks,
        [
            IN_CREATE,
            IN_OPEN,
            IN_MODIFY,
            IN_CLOSE_WRITE,
            IN_ATTRIB,
            IN_MOVED_FROM,
            IN_MOVED_TO,
            IN_DELETE
        ]
    );
    assert!(ev.iter().all(|e| e.0 == wd));
    assert_eq!(ev[0].3, b"log");
    assert_eq!(ev[6].3, b"old");
    assert_ne!(ev[5].2, 0);
    assert_eq!(ev[5].2, ev[6].2, "one cookie for both halves of a rename");
}

#[test]
fn a_link_is_attrib_to_the_inode_watch_then_create_to_the_directory() {
    let mut fs = server();
    let (q, qr) = queue(&mut fs, S1);
    let (f, d) = create(&mut fs, b"a");
    ok(&mut fs, S1, Request::Close { desc: d });
    let (dwd, _) = watch(&mut fs, S1, q, ROOT, IN_ALL_EVENTS).unwrap();
    let (fwd, _) = watch(&mut fs, S1, q, f, IN_ATTRIB).unwrap();
    let req = Request::Link {
        dir: ROOT,
        name: b"b",
        ino: f,
        ftype: FileType::Regular,
        replace: false,
        moved_from: None,
    };
    ok(&mut fs, S1, req);
    // Linux's `fsnotify_link`: the link count on the inode, then the
    // name; nothing about the count to the directory.
    let ev = drain(&mut fs, qr.header);
    assert_eq!(
        ev,
        [
            (fwd, IN_ATTRIB, 0, vec![]),
            (dwd, IN_CREATE, 0, b"b".to_vec())
        ]
    );
}

/// The first half of a rename across servers within the root (`Link`
/// with `moved_from`): regular file `ino` from `from` to `to`.
fn moved_link<'a>(from: &'a [u8], to: &'a [u8], ino: InodeId, replace: bool) -> Request<'a> {
    Request::Link {
        dir: ROOT,
        name: to,
        ino,
        ftype: FileType::Regular,
        replace,
        moved_from: Some(atoll_proto::EntryName {
            dir: ROOT,
            name: from,
        }),
    }
}

/// A rename across servers, both halves on one server here: the names
/// move with `Link`'s `moved_from`, the file's own `IN_MOVE_SELF` comes
/// with the second half's `Unlink`, once the old name is gone.
#[test]
fn a_rename_across_servers_reports_the_move_self_with_its_second_half() {
    let mut fs = server();
    let (q, qr) = queue(&mut fs, S1);
    let (f, d) = create(&mut fs, b"a");
    ok(&mut fs, S1, Request::Close { desc: d });
    let (dwd, _) = watch(&mut fs, S1, q, ROOT, IN_MOVED_FROM | IN_MOVED_TO).unwrap();
    let (fwd, _) = watch(&mut fs, S1, q, f, IN_MOVE_SELF).unwrap();
    ok(&mut fs, S1, moved_link(b"a", b"b", f, false));
    let ev = drain(&mut fs, qr.header);
    let masks: Vec<(i32, u32)> = ev.iter().map(|e| (e.0, e.1)).collect();
    assert_eq!(masks, [(dwd, IN_MOVED_FROM), (dwd, IN_MOVED_TO)]);
    let req = Request::Unlink {
        dir: ROOT,
        name: b"a",
        kind: atoll_proto::UnlinkKind::NonDirectory,
        expect: Some(f),
    };
    ok(&mut fs, S1, req);
    assert_eq!(drain(&mut fs, qr.header), [(fwd, IN_MOVE_SELF, 0, vec![])]);
}

/// Open `ino` by inode with `flags` (`OpenInode`).
fn open_ino(fs: &mut FileServer<MemStore>, ino: InodeId, flags: u32) -> DescId {
    let mut out = Vec::new();
    let req = Request::OpenInode {
        ino,
        flags,
        via: None,
    };
    match fs.handle(S1, ME, req, &mut out) {
        Reply::Opened { desc, .. } => desc,
        other => panic!("{other:?}"),
    }
}

/// A client's read: `Read`, then (the bytes copied) `InotifyAccessed`
/// when the reply says the file is watched.
fn read(fs: &mut FileServer<MemStore>, desc: DescId, len: u64) -> bool {
    let mut out = Vec::new();
    let req = Request::Read {
        desc,
        len,
        offset: Some(0),
    };
    let watched = match fs.handle(S1, ME, req, &mut out) {
        Reply::Extents { watched, .. } => watched,
        other => panic!("{other:?}"),
    };
    if watched {
        ok(fs, S1, Request::InotifyAccessed { desc });
    }
    watched
}

#[test]
fn opens_reads_and_closes_are_reported_but_not_o_path_or_a_fanotify_readers() {
    let mut fs = server();
    let (f, d) = create(&mut fs, b"f");
    let set = SetAttr {
        size: Some(5),
        ..SetAttr::NONE
    };
    let req = Request::SetAttr {
        ino: f,
        set,
        via: None,
    };
    ok(&mut fs, S1, req);
    ok(&mut fs, S1, Request::Close { desc: d });
    let (q, qr) = queue(&mut fs, S1);
    let (wd, _) = watch(&mut fs, S1, q, f, IN_ALL_EVENTS).unwrap();
    let r = open_ino(&mut fs, f, libc::O_RDONLY as u32);
    assert!(read(&mut fs, r, 5));
    assert!(read(&mut fs, r, 5));
    ok(&mut fs, S1, Request::Close { desc: r });
    for flags in [libc::O_PATH as u32, libc::O_RDONLY as u32 | OPEN_NONOTIFY] {
        let quiet = open_ino(&mut fs, f, flags);
        if flags & OPEN_NONOTIFY != 0 {
            assert!(!read(&mut fs, quiet, 5), "a fanotify reader's reads");
        }
        ok(&mut fs, S1, Request::Close { desc: quiet });
    }
    let ev = drain(&mut fs, qr.header);
    let masks: Vec<u32> = ev.iter().map(|e| e.1).collect();
    // The second read's event is merged with the first, as Linux merges.
    assert_eq!(masks, [IN_OPEN, IN_ACCESS, IN_CLOSE_NOWRITE]);
    assert!(ev.iter().all(|e| e.0 == wd));
}

#[test]
fn one_inode_one_wd_mask_add_mask_create_and_rm_watch_ignored() {
    let mut fs = server();
    let (q, qr) = queue(&mut fs, S1);
    let (f, _) = create(&mut fs, b"f");
    let (w1, m1) = watch(&mut fs, S1, q, f, IN_MODIFY).unwrap();
    let (w2, m2) = watch(&mut fs, S1, q, f, IN_ATTRIB | IN_MASK_ADD).unwrap();
    assert_eq!(w1, w2);
    assert_eq!((m1, m2), (IN_MODIFY, IN_MODIFY | IN_ATTRIB));
    assert_eq!(
        watch(&mut fs, S1, q, f, IN_ATTRIB | IN_MASK_CREATE),
        Err(Errno::EEXIST)
    );
    let (w3, _) = watch(&mut fs, S1, q, ROOT, IN_CREATE).unwrap();
    assert_ne!(w3, w1);
    let mut out = Vec::new();
    match fs.handle(
        S1,
        ME,
        Request::InotifyRmWatch { desc: q, wd: w1 },
        &mut out,
    ) {
        Reply::Watch { ino, .. } => assert_eq!(ino, f),
        other => panic!("{other:?}"),
    }
    let r = fs.handle(
        S1,
        ME,
        Request::InotifyRmWatch { desc: q, wd: w1 },
        &mut out,
    );
    assert!(matches!(r, Reply::Err(Errno::EINVAL)));
    assert_eq!(drain(&mut fs, qr.header), [(w1, IN_IGNORED, 0, vec![])]);
}

#[test]
fn oneshot_fires_once_then_ignored() {
    let mut fs = server();
    let (q, qr) = queue(&mut fs, S1);
    let (f, d) = create(&mut fs, b"f");
    let (wd, _) = watch(&mut fs, S1, q, f, IN_MODIFY | IN_ONESHOT).unwrap();
    assert!(write(&mut fs, d, 1, None));
    assert!(!write(&mut fs, d, 1, Some(9)), "the watch is gone");
    let ev = drain(&mut fs, qr.header);
    assert_eq!(
        ev,
        [(wd, IN_MODIFY, 0, vec![]), (wd, IN_IGNORED, 0, vec![])]
    );
}

#[test]
fn attrib_delete_self_then_ignored_when_the_inode_goes() {
    let mut fs = server();
    let (q, qr) = queue(&mut fs, S1);
    let (f, d) = create(&mut fs, b"f");
    ok(&mut fs, S1, Request::Close { desc: d });
    let (wd, _) = watch(&mut fs, S1, q, f, IN_ALL_EVENTS).unwrap();
    let req = Request::Unlink {
        dir: ROOT,
        name: b"f",
        kind: atoll_proto::UnlinkKind::NonDirectory,
        expect: None,
    };
    ok(&mut fs, S1, req);
    let ev = drain(&mut fs, qr.header);
    // The link count first, as Linux's `vfs_unlink`.
    let want = [IN_ATTRIB, IN_DELETE_SELF, IN_IGNORED].map(|m| (wd, m, 0, vec![]));
    assert_eq!(ev, want);
    assert!(fs.notify.watches.is_empty());
}

#[test]
fn a_full_queue_takes_one_overflow_record_until_it_is_read() {
    let mut fs = server();
    let (q, qr) = queue_of(&mut fs, S1, 100);
    watch(&mut fs, S1, q, ROOT, IN_CREATE).unwrap();
    for k in 0..150 {
        create(&mut fs, format!("file-{k}").as_bytes());
    }
    // As Linux's `fsnotify_add_event`: `max_events` records, then one
    // overflow (counted too).
    assert_eq!(fs.cache.store.get_u32(qr.header, COUNT), 101);
    let first = drain_some(&mut fs, qr.header, 2);
    assert_eq!(first[0].3, b"file-0");
    // Room for one: it goes in after the unread overflow, which is not
    // queued again while it waits.
    for k in 150..160 {
        create(&mut fs, format!("file-{k}").as_bytes());
    }
    let ev = drain(&mut fs, qr.header);
    assert_eq!(ev.len(), 98 + 1 + 1);
    assert_eq!(ev[97].3, b"file-99");
    assert_eq!(ev[98], (-1, IN_Q_OVERFLOW, 0, vec![]));
    assert_eq!(ev[99].3, b"file-150");
    assert_eq!(fs.cache.store.get_u32(qr.header, COUNT), 0);
    // Read: events flow again.
    create(&mut fs, b"after");
    assert_eq!(drain(&mut fs, qr.header)[0].3, b"after");
}

#[test]
fn a_ring_grows_to_hold_its_events_and_gives_the_blocks_back() {
    let mut fs = server();
    let free = fs.cache.statfs().1;
    let (q, qr) = queue(&mut fs, S2);
    watch(&mut fs, S2, q, ROOT, IN_CREATE).unwrap();
    let n = 3 * DATA_BLOCKS * BLOCK_SIZE / 32;
    for k in 0..n {
        create(&mut fs, format!("f{k}").as_bytes());
    }
    let h = qr.header;
    assert!(fs.cache.store.get_u32(h, NBLOCKS) as usize > 2 * DATA_BLOCKS);
    assert_ne!(fs.cache.store.get_u32(h, GEN), 0);
    assert_eq!(fs.cache.store.get_u64(h, LENDERS), 1);
    let ev = drain(&mut fs, h);
    assert_eq!(ev.len(), n);
    assert!(ev
        .iter()
        .enumerate()
        .all(|(k, e)| e.3 == format!("f{k}").as_bytes()));
    fs.session_closed(S2);
    create(&mut fs, b"x");
    assert!(fs.notify.lent.is_empty() && fs.notify.dying.is_empty());
    assert_eq!(fs.cache.statfs().1, free);
}

#[test]
fn lent_blocks_wait_until_no_server_writes_to_the_dead_queue() {
    let mut fs = server();
    let free = fs.cache.statfs().1;
    let (q, qr) = queue(&mut fs, S2);
    watch(&mut fs, S2, q, ROOT, IN_CREATE).unwrap();
    for k in 0..DATA_BLOCKS * BLOCK_SIZE / 32 + 1 {
        create(&mut fs, format!("f{k}").as_bytes());
    }
    assert!(!fs.notify.lent.is_empty());
    // Server 5 still writes into it.
    let holders = fs.cache.store.get_u32(qr.header, HOLDERS);
    fs.cache.store.put_u32(qr.header, HOLDERS, holders | 1 << 5);
    fs.session_closed(S2);
    create(&mut fs, b"x");
    assert!(!fs.notify.lent.is_empty());
    assert_eq!(fs.notify.dying.len(), 1);
    fs.cache.store.put_u32(qr.header, HOLDERS, 0); // server 5 let go
    create(&mut fs, b"y");
    assert!(fs.notify.lent.is_empty() && fs.notify.dying.is_empty());
    assert_eq!(fs.cache.statfs().1, free);
}

#[test]
fn a_locked_ring_gets_its_records_later_in_order() {
    let mut fs = server();
    let (q, qr) = queue(&mut fs, S1);
    watch(&mut fs, S1, q, ROOT, IN_CREATE).unwrap();
    fs.cache.store.put_u32(qr.header, LOCK, 1); // a reader copying out
    create(&mut fs, b"a");
    create(&mut fs, b"b");
    assert!(fs.has_pending_events());
    assert!(drain(&mut fs, qr.header).is_empty());
    fs.cache.store.put_u32(qr.header, LOCK, 0);
    fs.flush_events();
    assert!(!fs.has_pending_events());
    let names: Vec<Vec<u8>> = drain(&mut fs, qr.header).into_iter().map(|e| e.3).collect();
    assert_eq!(names, [b"a".to_vec(), b"b".to_vec()]);
}

#[test]
fn a_queue_dies_with_its_session_and_its_watches_and_blocks_go() {
    let mut fs = server();
    let free = fs.cache.statfs().1;
    let (q, qr) = queue(&mut fs, S2);
    watch(&mut fs, S2, q, ROOT, IN_CREATE).unwrap();
    assert_ne!(fs.cache.store.get_u64(qr.header, HOLDERS), 0);
    fs.session_closed(S2);
    // The next request here notices the dead queue.
    create(&mut fs, b"x");
    assert!(fs.notify.watches.is_empty());
    assert!(fs.notify.dying.is_empty());
    assert_eq!(fs.cache.store.get_u64(qr.header, QUEUE_ID), 0);
    assert_eq!(fs.cache.statfs().1, free);
    // A late registration for the dead queue is refused.
    let mut out = Vec::new();
    let r = fs.handle(
        S1,
        ME,
        Request::InotifyRegister {
            queue: qr,
            ino: ROOT,
            wd: 1,
            mask: IN_CREATE,
        },
        &mut out,
    );
    assert!(matches!(r, Reply::Err(Errno::EBADF)));
}

#[test]
fn a_dead_queue_keeps_its_blocks_while_another_server_holds_watches() {
    let mut fs = server();
    let free = fs.cache.statfs().1;
    let (q, qr) = queue(&mut fs, S2);
    // Server 5 holds a watch of this queue (its bit, as it would set it).
    fs.cache.store.put_u32(qr.header, HOLDERS, 1 << 5);
    fs.session_closed(S2);
    create(&mut fs, b"x");
    assert_eq!(fs.notify.dying.len(), 1);
    assert!(fs.cache.statfs().1 < free);
    let _ = q;
    fs.cache.store.put_u32(qr.header, HOLDERS, 0); // server 5 let go
    create(&mut fs, b"y");
    assert!(fs.notify.dying.is_empty());
    assert_eq!(fs.cache.statfs().1, free);
}

#[test]
fn writes_of_unwatched_files_ask_nothing_of_the_client() {
    let mut fs = server();
    let (_, d) = create(&mut fs, b"f");
    assert!(!write(&mut fs, d, 10, None));
    let (q, _) = queue(&mut fs, S1);
    let (g, gd) = create(&mut fs, b"g");
    watch(&mut fs, S1, q, g, IN_MODIFY).unwrap();
    assert!(!write(&mut fs, d, 10, None));
    assert!(write(&mut fs, gd, 10, None));
    // A watched directory: any file here may be in it.
    watch(&mut fs, S1, q, ROOT, IN_MODIFY).unwrap();
    assert!(write(&mut fs, d, 10, None));
}

#[test]
fn a_file_moved_out_of_a_watched_directory_no_longer_reports_to_it() {
    let mut fs = server();
    let (q, qr) = queue(&mut fs, S1);
    let (_, d) = create(&mut fs, b"f");
    let mk = Request::MakeNode {
        dir: ROOT,
        name: b"other",
        ftype: FileType::Directory,
        perm: 0o755,
        rdev: 0,
        target: b"",
        home: 0,
        spread: 0,
        inherit: atoll_proto::Inherit::Unread,
        umask: 0,
    };
    let mut out = Vec::new();
    let other = match fs.handle(S1, ME, mk, &mut out) {
        Reply::Entry { ino, .. } => ino,
        r => panic!("{r:?}"),
    };
    let (wd, _) = watch(&mut fs, S1, q, ROOT, IN_MODIFY | IN_MOVED_FROM).unwrap();
    assert!(write(&mut fs, d, 1, None));
    let req = Request::Rename {
        olddir: ROOT,
        oldname: b"f",
        newdir: other,
        newname: b"f",
        flags: 0,
    };
    ok(&mut fs, S1, req);
    write(&mut fs, d, 1, None);
    let ev: Vec<(i32, u32, Vec<u8>)> = drain(&mut fs, qr.header)
        .into_iter()
        .map(|e| (e.0, e.1, e.3))
        .collect();
    assert_eq!(
        ev,
        [
            (wd, IN_MODIFY, b"f".to_vec()),
            (wd, IN_MOVED_FROM, b"f".to_vec())
        ]
    );
}

#[test]
fn a_description_opened_by_a_name_held_elsewhere_reports_to_that_directory() {
    let mut fs = server();
    let (q, qr) = queue(&mut fs, S1);
    let (f, d) = create(&mut fs, b"here");
    ok(&mut fs, S1, Request::Close { desc: d });
    let (wd, _) = watch(&mut fs, S1, q, ROOT, IN_MODIFY | IN_CLOSE_WRITE).unwrap();
    // As if "there" were an entry of ROOT on another server naming `f`.
    let via = Some(atoll_proto::EntryName {
        dir: ROOT,
        name: b"there",
    });
    let mut out = Vec::new();
    let req = Request::OpenInode {
        ino: f,
        flags: libc::O_WRONLY as u32,
        via,
    };
    let d = match fs.handle(S1, ME, req, &mut out) {
        Reply::Opened { desc, watched, .. } => {
            assert!(watched);
            desc
        }
        r => panic!("{r:?}"),
    };
    assert!(write(&mut fs, d, 3, None));
    ok(&mut fs, S1, Request::Close { desc: d });
    let ev: Vec<(i32, u32, Vec<u8>)> = drain(&mut fs, qr.header)
        .into_iter()
        .map(|e| (e.0, e.1, e.3))
        .collect();
    let name = |n: &[u8]| n.to_vec();
    assert_eq!(
        ev,
        [
            (wd, IN_MODIFY, name(b"here")),
            (wd, IN_MODIFY, name(b"there")),
            (wd, IN_CLOSE_WRITE, name(b"here")),
            (wd, IN_CLOSE_WRITE, name(b"there")),
        ]
    );
}

#[test]
fn a_change_by_a_path_whose_entry_is_held_elsewhere_reports_to_that_directory() {
    let mut fs = server();
    let (q, qr) = queue(&mut fs, S1);
    let (f, d) = create(&mut fs, b"here");
    ok(&mut fs, S1, Request::Close { desc: d });
    // The file was renamed to "there" in ROOT, an entry another server
    // holds (a distributed directory): this server, its owner, still
    // indexes its old name "here" until the entry goes, so remove it.
    let mut out = Vec::new();
    let unlink = Request::Unlink {
        dir: ROOT,
        name: b"here",
        kind: atoll_proto::UnlinkKind::NonDirectory,
        expect: None,
    };
    // Keep the inode alive (as the new entry's `Ref` does) while its
    // entry here goes.
    ok(
        &mut fs,
        S1,
        Request::Ref {
            ino: f,
            link: false,
        },
    );
    assert!(matches!(
        fs.handle(S1, ME, unlink, &mut out),
        Reply::Unlinked { .. }
    ));
    let (wd, _) = watch(&mut fs, S1, q, ROOT, IN_ATTRIB).unwrap();
    let via = || {
        Some(atoll_proto::EntryName {
            dir: ROOT,
            name: b"there",
        })
    };
    let chmod = |via| Request::SetAttr {
        ino: f,
        set: SetAttr {
            perm: Some(0o600),
            ..SetAttr::NONE
        },
        via,
    };
    // Without the entry the owner cannot name the change to ROOT's watch.
    ok(&mut fs, S1, chmod(None));
    assert_eq!(drain(&mut fs, qr.header), []);
    let events = |fs: &mut FileServer<MemStore>| -> Vec<(i32, u32, Vec<u8>)> {
        drain(fs, qr.header)
            .into_iter()
            .map(|e| (e.0, e.1, e.3))
            .collect()
    };
    ok(&mut fs, S1, chmod(via()));
    assert_eq!(events(&mut fs), [(wd, IN_ATTRIB, b"there".to_vec())]);
    let xattr = Request::SetXattr {
        ino: f,
        name: b"user.k",
        value: b"v",
        flags: 0,
        via: via(),
    };
    ok(&mut fs, S1, xattr);
    assert_eq!(events(&mut fs), [(wd, IN_ATTRIB, b"there".to_vec())]);
}

/// A fanotify watch of the whole mount (`ALL_INODES`) beside one of the
/// root directory: the mount watch takes each event once (the creation on
/// the directory, the write on the file, never the write as the directory
/// sees it), and fanotify records name the object and the request's pid.
#[test]
fn mount_watch_takes_each_event_once_with_object_and_pid() {
    let mut fs = server();
    let (q, qref) = queue(&mut fs, S2);
    let events = IN_CREATE | IN_MODIFY | WATCH_FANOTIFY;
    let (all, _) = watch(&mut fs, S2, q, ALL_INODES, events).unwrap();
    let (dir, _) = watch(&mut fs, S2, q, ROOT, events).unwrap();
    fs.set_requester(77);
    let (ino, desc) = create(&mut fs, b"f");
    write(&mut fs, desc, 3, Some(0));
    fs.set_requester(0);
    // (wd, mask, object, pid, name) of every record.
    let mut got = Vec::new();
    let h = qref.header;
    let (head, mut tail) = (
        fs.cache.store.get_u64(h, HEAD),
        fs.cache.store.get_u64(h, TAIL),
    );
    while tail < head {
        let mut hd = [0u8; EVENT_HEADER];
        fs.ring_read(h, tail, &mut hd);
        let (wd, mask, _, len) = decode_header(&hd);
        let mut body = vec![0u8; len as usize];
        fs.ring_read(h, tail + EVENT_HEADER as u64, &mut body);
        let object = u64::from_le_bytes(body[..8].try_into().unwrap());
        let pid = u32::from_le_bytes(body[8..OBJECT_LEN].try_into().unwrap());
        let mut name = body[OBJECT_LEN..].to_vec();
        while name.last() == Some(&0) {
            name.pop();
        }
        got.push((wd, mask, object, pid, name));
        tail += (EVENT_HEADER + len as usize) as u64;
    }
    assert_eq!(
        got,
        vec![
            (dir, IN_CREATE, ROOT.0, 77, b"f".to_vec()),
            (all, IN_CREATE, ROOT.0, 77, b"f".to_vec()),
            (dir, IN_MODIFY, ino.0, 77, b"f".to_vec()),
            (all, IN_MODIFY, ino.0, 77, Vec::new()),
        ]
    );
}

/// `InotifyRmWatch`: was the watch gone already (the reply's `replaced`)?
fn rm_watch_gone(fs: &mut FileServer<MemStore>, q: DescId, wd: i32) -> bool {
    let mut out = Vec::new();
    match fs.handle(S1, ME, Request::InotifyRmWatch { desc: q, wd }, &mut out) {
        Reply::Watch { replaced, .. } => replaced != 0,
        other => panic!("{other:?}"),
    }
}

/// `mv x k` with `k` watched (coreutils' `tail -F` of a rotated file):
/// the directory's names first, then `k`'s link count, `x`'s own move,
/// and `k`'s end, as Linux's `fsnotify_move` and the replaced dentry's
/// last `dput`; removing `k`'s watch afterwards finds it gone (the client
/// says `EINVAL`) and queues no second `IN_IGNORED`.
#[test]
fn a_rename_over_a_watched_file_reports_its_end_after_the_move() {
    let mut fs = server();
    let (q, qr) = queue(&mut fs, S1);
    let (k, d) = create(&mut fs, b"k");
    ok(&mut fs, S1, Request::Close { desc: d });
    let (x, d) = create(&mut fs, b"x");
    ok(&mut fs, S1, Request::Close { desc: d });
    let (dwd, _) = watch(&mut fs, S1, q, ROOT, IN_MOVED_FROM | IN_MOVED_TO).unwrap();
    let (kwd, _) = watch(&mut fs, S1, q, k, IN_ALL_EVENTS).unwrap();
    let (xwd, _) = watch(&mut fs, S1, q, x, IN_MOVE_SELF).unwrap();
    let req = Request::Rename {
        olddir: ROOT,
        oldname: b"x",
        newdir: ROOT,
        newname: b"k",
        flags: 0,
    };
    ok(&mut fs, S1, req);
    let masks: Vec<(i32, u32)> = drain(&mut fs, qr.header)
        .iter()
        .map(|e| (e.0, e.1))
        .collect();
    let want = [
        (dwd, IN_MOVED_FROM),
        (dwd, IN_MOVED_TO),
        (kwd, IN_ATTRIB),
        (xwd, IN_MOVE_SELF),
        (kwd, IN_DELETE_SELF),
        (kwd, IN_IGNORED),
    ];
    assert_eq!(masks, want);
    assert!(rm_watch_gone(&mut fs, q, kwd), "k's watch went with k");
    assert_eq!(drain(&mut fs, qr.header), []);
    assert!(!rm_watch_gone(&mut fs, q, xwd));
    assert_eq!(drain(&mut fs, qr.header), [(xwd, IN_IGNORED, 0, vec![])]);
}

/// The first half of a rename across servers (`Link` with `moved_from`)
/// over a watched file owned here: its end follows the names too.
#[test]
fn a_cross_server_rename_over_a_watched_file_reports_its_end_after_the_names() {
    let mut fs = server();
    let (q, qr) = queue(&mut fs, S1);
    let (k, d) = create(&mut fs, b"k");
    ok(&mut fs, S1, Request::Close { desc: d });
    let (x, d) = create(&mut fs, b"x");
    ok(&mut fs, S1, Request::Close { desc: d });
    let (dwd, _) = watch(&mut fs, S1, q, ROOT, IN_MOVED_FROM | IN_MOVED_TO).unwrap();
    let (kwd, _) = watch(&mut fs, S1, q, k, IN_ALL_EVENTS).unwrap();
    ok(&mut fs, S1, moved_link(b"x", b"k", x, true));
    let masks: Vec<(i32, u32)> = drain(&mut fs, qr.header)
        .iter()
        .map(|e| (e.0, e.1))
        .collect();
    let want = [
        (dwd, IN_MOVED_FROM),
        (dwd, IN_MOVED_TO),
        (kwd, IN_ATTRIB),
        (kwd, IN_DELETE_SELF),
        (kwd, IN_IGNORED),
    ];
    assert_eq!(masks, want);
    assert!(rm_watch_gone(&mut fs, q, kwd));
}

/// A watch appearing anywhere on the server stops reads without a
/// message: each may owe an `IN_ACCESS` (`leases`).
#[test]
fn a_watch_stops_reads_without_a_message() {
    let mut fs = server();
    let (ino, d) = create(&mut fs, b"f");
    write(&mut fs, d, 100, Some(0));
    let done = Request::WriteDone {
        ino,
        offset: 0,
        len: 100,
    };
    ok(&mut fs, S1, done);
    assert!(!read(&mut fs, d, 100));
    let until = |fs: &FileServer<MemStore>| fs.published_lease(ino).expect("held").1;
    assert!(until(&fs) > 1, "read: the atime is fresh");
    let (q, _) = queue(&mut fs, S2);
    watch(&mut fs, S2, q, ino, atoll_proto::inotify::IN_ACCESS).unwrap();
    assert_eq!(until(&fs), 0, "watched: not even through O_NOATIME");
    assert!(read(&mut fs, d, 100), "the read by message reports it");
    assert_eq!(until(&fs), 0, "still watched");
}
