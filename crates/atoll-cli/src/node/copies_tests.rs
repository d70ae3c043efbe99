//! The node's copies without an edge: frames in, verdicts out.

use super::*;
use atoll_proto::Cred;

const F: InodeId = InodeId(0x0100_0000_0000_0009);
const G: InodeId = InodeId(0x0100_0000_0000_000a);
const D: DescId = DescId(0x0100_0000_0000_0001);
const D2: DescId = DescId(0x0100_0000_0000_0002);
const DG: DescId = DescId(0x0100_0000_0000_0003);
const P1: ConnId = 1;
const P2: ConnId = 2;
const CH: ChanId = 10;

fn attr(ino: InodeId, size: u64, sec: i64) -> Attr {
    let t = Timespec { sec, nsec: 0 };
    Attr {
        ino,
        ftype: FileType::Regular,
        perm: 0o644,
        nlink: 1,
        uid: 0,
        gid: 0,
        rdev: 0,
        size,
        blocks: 0,
        atime: t,
        mtime: t,
        ctime: t,
        btime: t,
        default_acl: false,
        access_acl: false,
    }
}

fn req(id: u64, req: Request<'_>) -> Vec<u8> {
    postcard::to_allocvec(&RequestFrame {
        id,
        cred: Cred::default(),
        pid: 0,
        req,
        vouched: std::borrow::Cow::Borrowed(&[]),
    })
    .unwrap()
}

fn rep(id: u64, reply: Reply<'_>) -> Vec<u8> {
    postcard::to_allocvec(&ReplyFrame { id, reply }).unwrap()
}

fn read(id: u64, desc: DescId, at: u64, len: u32) -> Vec<u8> {
    req(
        id,
        Request::ReadData {
            desc,
            len,
            offset: Some(at),
            report: false,
        },
    )
}

fn opened(m: &mut Copies, conn: ConnId, desc: DescId, a: Attr) {
    let r = rep(
        1,
        Reply::Opened {
            desc,
            attr: a,
            created: false,
            watched: false,
        },
    );
    m.reply(conn, CH, &r);
}

/// Relay a read of chunk `index` through `desc` and its reply of `b`s.
fn fetch(m: &mut Copies, conn: ConnId, desc: DescId, id: u64, index: u64, b: u8) -> bool {
    let mut fetched = false;
    let v = m.request(
        conn,
        CH,
        &read(id, desc, index * CHUNK as u64, CHUNK as u32),
        false,
        &mut fetched,
    );
    assert!(matches!(v, Verdict::Forward));
    m.reply(conn, CH, &rep(id, Reply::Data(&[b; CHUNK])));
    fetched
}

/// A read answered here: its bytes.
fn answered(m: &mut Copies, conn: ConnId, desc: DescId, at: u64, len: u32) -> Option<Vec<u8>> {
    let mut fetched = false;
    match m.request(conn, CH, &read(77, desc, at, len), true, &mut fetched) {
        Verdict::Answer(frame) => {
            let f: ReplyFrame<'_> = atoll_proto::decode(&frame).unwrap();
            assert_eq!(f.id, 77);
            match f.reply {
                Reply::Data(d) => Some(d.to_vec()),
                other => panic!("{other:?}"),
            }
        }
        Verdict::Forward => None,
    }
}

#[test]
fn a_second_program_is_answered_only_while_its_open_stamp_is_the_files() {
    let mut m = Copies::new(LIMIT_BYTES);
    opened(&mut m, P1, D, attr(F, 3 * CHUNK as u64, 1));
    assert!(fetch(&mut m, P1, D, 2, 0, 7));
    assert!(fetch(&mut m, P1, D, 3, 1, 8));
    opened(&mut m, P2, D2, attr(F, 3 * CHUNK as u64, 1));
    let got = answered(&mut m, P2, D2, 100, CHUNK as u32).expect("held");
    assert_eq!((got[0], got[CHUNK - 101], got[CHUNK - 100]), (7, 7, 8));
    assert_eq!(
        answered(&mut m, P2, D2, CHUNK as u64, 2 * CHUNK as u32),
        None,
        "chunk 2 is not held"
    );
    assert_eq!(answered(&mut m, P2, D2, 0, 0), None, "nothing to answer");
    // Another host rewrote and closed the file: a new open shows it.
    opened(&mut m, P2, DG, attr(F, 3 * CHUNK as u64, 2));
    assert_eq!(answered(&mut m, P2, DG, 0, 4), None, "a new stamp drops");
    assert_eq!(m.bytes(), 0);
    // The old description, opened at the old stamp, crosses too, and
    // what it fetches is not kept (it is not valid for the new stamp).
    assert!(!fetch(&mut m, P2, D2, 4, 0, 9));
    assert_eq!(m.bytes(), 0);
    assert!(fetch(&mut m, P2, DG, 5, 0, 9));
    assert_eq!(answered(&mut m, P2, DG, 0, 4), Some(vec![9; 4]));
    // A `stat` that shows yet another stamp drops as well.
    m.reply(P2, CH, &rep(6, Reply::Attr(attr(F, 1, 3))));
    assert_eq!(answered(&mut m, P2, DG, 0, 4), None);
}

#[test]
fn only_the_process_that_opened_a_description_is_answered_through_it() {
    let mut m = Copies::new(LIMIT_BYTES);
    opened(&mut m, P1, D, attr(F, 2 * CHUNK as u64, 1));
    fetch(&mut m, P1, D, 2, 0, 1);
    assert_eq!(
        answered(&mut m, P2, D, 0, 4),
        None,
        "a forged or inherited id"
    );
    assert_eq!(answered(&mut m, P1, D, 0, 4), Some(vec![1; 4]));
    m.conn_closed(P1);
    assert_eq!(answered(&mut m, P1, D, 0, 4), None);
}

#[test]
fn only_regular_files_are_known() {
    let mut m = Copies::new(LIMIT_BYTES);
    let mut dir = attr(F, 4096, 1);
    dir.ftype = FileType::Directory;
    opened(&mut m, P1, D, dir);
    assert!(m.descs.is_empty() && m.files.is_empty());
}

#[test]
fn partial_and_unaligned_replies_are_never_kept() {
    let mut m = Copies::new(LIMIT_BYTES);
    opened(&mut m, P1, D, attr(F, CHUNK as u64 + 10, 1));
    let mut fetched = false;
    m.request(
        P1,
        CH,
        &read(2, D, CHUNK as u64, CHUNK as u32),
        false,
        &mut fetched,
    );
    m.reply(P1, CH, &rep(2, Reply::Data(&[1; 10])));
    m.request(P1, CH, &read(3, D, 10, CHUNK as u32), false, &mut fetched);
    m.reply(P1, CH, &rep(3, Reply::Data(&[1; CHUNK])));
    assert!(fetched);
    assert_eq!(m.bytes(), 0);
}

#[test]
fn a_change_drops_when_it_leaves_and_again_when_it_is_answered() {
    let mut m = Copies::new(LIMIT_BYTES);
    opened(&mut m, P1, D, attr(F, 4 * CHUNK as u64, 1));
    opened(&mut m, P1, DG, attr(G, 4 * CHUNK as u64, 1));
    fetch(&mut m, P1, D, 2, 0, 1);
    fetch(&mut m, P1, DG, 3, 0, 1);
    // A read leaves before the write, another between the write and its
    // reply; both are answered after the write left.
    let mut fetched = false;
    m.request(P1, CH, &read(4, D, 0, CHUNK as u32), false, &mut fetched);
    let write = req(
        5,
        Request::WriteData {
            desc: D,
            offset: Some(0),
            data: b"new",
            fsize: None,
            chain: None,
        },
    );
    m.request(P1, CH, &write, true, &mut fetched);
    assert_eq!(answered(&mut m, P1, D, 0, 4), None, "dropped when it left");
    assert!(
        answered(&mut m, P1, DG, 0, 4).is_some(),
        "another file keeps"
    );
    m.request(
        P1,
        CH,
        &read(6, D, CHUNK as u64, CHUNK as u32),
        false,
        &mut fetched,
    );
    m.reply(P1, CH, &rep(4, Reply::Data(&[1; CHUNK])));
    m.reply(P1, CH, &rep(5, Reply::Written(3)));
    // Served before the write, relayed after its reply: old bytes.
    m.reply(P1, CH, &rep(6, Reply::Data(&[1; CHUNK])));
    assert_eq!(m.bytes(), CHUNK, "only the other file's chunk");
    // After the reply a read sees the write: kept.
    assert!(fetch(&mut m, P1, D, 7, 0, 2));
    assert_eq!(answered(&mut m, P1, D, 0, 1), Some(vec![2]));
}

#[test]
fn locks_truncation_fallocate_and_unknown_descriptions_drop() {
    let mut m = Copies::new(LIMIT_BYTES);
    opened(&mut m, P1, D, attr(F, 4 * CHUNK as u64, 1));
    let held = |m: &mut Copies| answered(m, P1, D, 0, 1).is_some();
    let mut fetched = false;
    let changes = [
        req(
            2,
            Request::SetLock {
                desc: D,
                lock: atoll_proto::LockSpec {
                    kind: libc::F_RDLCK as i16,
                    start: 0,
                    len: 0,
                    owner: atoll_proto::LockOwner::Process(1),
                    pid: 1,
                },
            },
        ),
        req(
            3,
            Request::SetAttr {
                ino: F,
                set: atoll_proto::SetAttr {
                    size: Some(0),
                    ..atoll_proto::SetAttr::NONE
                },
                via: None,
            },
        ),
        req(
            4,
            Request::Fallocate {
                ino: F,
                mode: 0,
                offset: 0,
                len: 1,
            },
        ),
        req(
            5,
            Request::Write {
                desc: DescId(99),
                len: 1,
                offset: None,
                fsize: None,
            },
        ),
    ];
    for (i, change) in changes.iter().enumerate() {
        fetch(&mut m, P1, D, 100 + i as u64, 0, 1);
        assert!(held(&mut m));
        m.request(P1, CH, change, true, &mut fetched);
        assert!(!held(&mut m), "change {i}");
    }
    fetch(&mut m, P1, D, 200, 0, 1);
    let attrs_only = req(
        6,
        Request::SetAttr {
            ino: F,
            set: atoll_proto::SetAttr::NONE,
            via: None,
        },
    );
    m.request(P1, CH, &attrs_only, true, &mut fetched);
    assert!(held(&mut m), "a chmod changes no data");
}

#[test]
fn a_closed_channel_still_drops_for_the_change_it_waited_for() {
    let mut m = Copies::new(LIMIT_BYTES);
    opened(&mut m, P1, D, attr(F, 4 * CHUNK as u64, 1));
    let mut fetched = false;
    m.request(
        P1,
        CH,
        &req(
            2,
            Request::Fallocate {
                ino: F,
                mode: 0,
                offset: 0,
                len: 1,
            },
        ),
        true,
        &mut fetched,
    );
    fetch(&mut m, P1, D, 3, 0, 1);
    assert_eq!(m.bytes(), CHUNK);
    m.chan_closed(CH);
    assert_eq!(m.bytes(), 0);
    assert!(m.pending.is_empty());
}

#[test]
fn the_bound_evicts_by_clock_and_spares_what_was_read() {
    let mut m = Copies::new(4 * CHUNK);
    opened(&mut m, P1, D, attr(F, 100 * CHUNK as u64, 1));
    for i in 0..4 {
        fetch(&mut m, P1, D, 10 + i, i, i as u8);
    }
    assert_eq!(m.bytes(), 4 * CHUNK);
    // Chunk 0 is read again: the hand spares it once.
    assert!(answered(&mut m, P1, D, 0, 1).is_some());
    fetch(&mut m, P1, D, 20, 4, 4);
    assert_eq!(m.bytes(), 4 * CHUNK, "never past the bound");
    assert!(answered(&mut m, P1, D, 0, 1).is_some(), "used: spared");
    assert!(
        answered(&mut m, P1, D, CHUNK as u64, 1).is_none(),
        "oldest unused: gone"
    );
    for i in 5..200 {
        fetch(&mut m, P1, D, 100 + i, i % 100, 1);
        assert!(m.bytes() <= 4 * CHUNK);
    }
    assert!(m.clock.len() <= 2 * 4 + 64);
    // A file's own list of chunks follows evictions: dropping it empties.
    opened(&mut m, P1, D2, attr(F, 1, 9));
    assert_eq!(m.bytes(), 0);
    assert!(m.files[&F].held.is_empty());
}
