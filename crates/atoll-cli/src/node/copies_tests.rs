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
            served: 0,
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
        &mut Vec::new(),
    );
    assert!(matches!(v, Verdict::Forward));
    m.reply(conn, CH, &rep(id, Reply::Data(&[b; CHUNK])));
    fetched
}

/// A read answered here: its bytes. Asked on another channel than the
/// fetches, so it never waits for their read-ahead (which nothing answers
/// here; `read_ahead_*` below do).
fn answered(m: &mut Copies, conn: ConnId, desc: DescId, at: u64, len: u32) -> Option<Vec<u8>> {
    let mut fetched = false;
    match m.request(
        conn,
        CH + 1,
        &read(77, desc, at, len),
        true,
        &mut fetched,
        &mut Vec::new(),
    ) {
        Verdict::Answer(frame) => {
            let f: ReplyFrame<'_> = atoll_proto::decode(&frame).unwrap();
            assert_eq!(f.id, 77);
            match f.reply {
                Reply::Data(d) => Some(d.to_vec()),
                other => panic!("{other:?}"),
            }
        }
        Verdict::Forward => None,
        Verdict::Wait(_) => panic!("waits for a read-ahead"),
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
        &mut Vec::new(),
    );
    m.reply(P1, CH, &rep(2, Reply::Data(&[1; 10])));
    m.request(
        P1,
        CH,
        &read(3, D, 10, CHUNK as u32),
        false,
        &mut fetched,
        &mut Vec::new(),
    );
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
    m.request(
        P1,
        CH,
        &read(4, D, 0, CHUNK as u32),
        false,
        &mut fetched,
        &mut Vec::new(),
    );
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
    m.request(P1, CH, &write, true, &mut fetched, &mut Vec::new());
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
        &mut Vec::new(),
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
        m.request(P1, CH, change, true, &mut fetched, &mut Vec::new());
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
    m.request(P1, CH, &attrs_only, true, &mut fetched, &mut Vec::new());
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
        &mut Vec::new(),
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

/// The read-ahead frames a request produced: (id, offset, len) each.
fn ahead_of(frames: &[Vec<u8>]) -> Vec<(u64, u64, u32)> {
    frames
        .iter()
        .map(|f| {
            let f: RequestFrame<'_> = atoll_proto::decode(f).unwrap();
            match f.req {
                Request::ReadData {
                    len,
                    offset: Some(at),
                    report: false,
                    ..
                } => (f.id, at, len),
                other => panic!("{other:?}"),
            }
        })
        .collect()
}

/// A program's read on `chan`: its verdict and the read-ahead it started.
fn ask(m: &mut Copies, chan: ChanId, id: u64, at: u64, len: u32) -> (Verdict, Vec<Vec<u8>>) {
    let (mut fetched, mut ahead) = (false, Vec::new());
    let v = m.request(
        P1,
        chan,
        &read(id, D, at, len),
        true,
        &mut fetched,
        &mut ahead,
    );
    (v, ahead)
}

/// The answers a read-ahead reply gives, by request id, as data.
fn answers(r: Relayed) -> Vec<(u64, Vec<u8>)> {
    let Relayed::Ahead(a) = r else {
        panic!("a read-ahead reply is relayed to the program")
    };
    a.into_iter()
        .map(|(rid, frame)| {
            let f: ReplyFrame<'_> = atoll_proto::decode(&frame).unwrap();
            assert_eq!(f.id, rid);
            match f.reply {
                Reply::Data(d) => (rid, d.to_vec()),
                Reply::Err(e) => (rid, format!("{e:?}").into_bytes()),
                other => panic!("{other:?}"),
            }
        })
        .collect()
}

/// A sequential reader has the node fetch whole chunks ahead, half a
/// window per batch, never past the size it opened with nor its last
/// partial chunk; its reads of those chunks wait for the fetches and are
/// answered from them (what it asked for, under its own id); a fetch's
/// chunk is then held.
#[test]
fn read_ahead_runs_ahead_of_a_sequential_reader_within_the_file() {
    let mut m = Copies::new(LIMIT_BYTES);
    let chunk = CHUNK as u64;
    // 40 whole chunks and a partial one.
    opened(&mut m, P1, D, attr(F, 40 * chunk + 100, 1));
    let (v, ahead) = ask(&mut m, CH, 1, 0, CHUNK as u32);
    assert!(matches!(v, Verdict::Forward), "nothing held or fetched yet");
    let first = ahead_of(&ahead);
    let window = (AHEAD_BYTES / chunk) as usize;
    assert_eq!(first.len(), window, "chunks 1..=32");
    assert_eq!(first[0].1, chunk);
    assert!(first
        .iter()
        .all(|&(id, at, len)| id & AHEAD != 0 && at % chunk == 0 && len == CHUNK as u32));
    // The next read waits for chunk 1's fetch; no new batch yet.
    let (v, ahead) = ask(&mut m, CH, 2, chunk, CHUNK as u32);
    assert!(matches!(v, Verdict::Wait(2)));
    assert!(ahead.is_empty(), "the window is still more than half ahead");
    // The program's own read's reply is relayed; the fetch's answers it.
    assert!(matches!(
        m.reply(P1, CH, &rep(1, Reply::Data(&[1; CHUNK]))),
        Relayed::Deliver
    ));
    let got = answers(m.reply(P1, CH, &rep(first[0].0, Reply::Data(&[2; CHUNK]))));
    assert_eq!(got, vec![(2, vec![2; CHUNK])]);
    assert_eq!(m.bytes(), 2 * CHUNK, "chunks 0 and 1 held");
    // Reads on through chunk 16: the reader is half a window behind the
    // end of the first batch, so the next batch leaves: chunks 33..=39,
    // the last whole ones (the partial 41st is never read ahead).
    let mut more = Vec::new();
    for i in 2..=17u64 {
        if i >= 3 {
            // The fetch before comes back (it answers the read waiting).
            let fetch = first[i as usize - 2].0;
            m.reply(P1, CH, &rep(fetch, Reply::Data(&[3; CHUNK])));
        }
        let (v, ahead) = ask(&mut m, CH, 10 + i, i * chunk, CHUNK as u32);
        assert!(matches!(v, Verdict::Wait(_)), "chunk {i}");
        more.extend(ahead_of(&ahead));
    }
    let at: Vec<u64> = more.iter().map(|a| a.1 / chunk).collect();
    assert_eq!(at, (33..40).collect::<Vec<u64>>());
}

/// A short or failed fetch answers the reads waiting for it the same way
/// (the end of the file; the error), and keeps nothing.
#[test]
fn a_read_waiting_for_a_short_or_failed_fetch_gets_what_the_server_said() {
    let mut m = Copies::new(LIMIT_BYTES);
    let chunk = CHUNK as u64;
    opened(&mut m, P1, D, attr(F, 4 * chunk, 1));
    let (_, ahead) = ask(&mut m, CH, 1, 0, CHUNK as u32);
    let ids = ahead_of(&ahead);
    assert_eq!(ids.len(), 3);
    // Two reads of parts of chunk 1, one of chunk 2.
    assert!(matches!(ask(&mut m, CH, 2, chunk, 100).0, Verdict::Wait(2)));
    assert!(matches!(
        ask(&mut m, CH, 3, chunk + 100, 200).0,
        Verdict::Wait(3)
    ));
    assert!(matches!(
        ask(&mut m, CH, 4, 2 * chunk, CHUNK as u32).0,
        Verdict::Wait(4)
    ));
    // The file was cut meanwhile by another host: chunk 1 ends at 150.
    let got = answers(m.reply(P1, CH, &rep(ids[0].0, Reply::Data(&[5; 150]))));
    assert_eq!(got, vec![(2, vec![5; 100]), (3, vec![5; 50])]);
    let got = answers(m.reply(P1, CH, &rep(ids[1].0, Reply::Err(atoll_proto::Errno::EIO))));
    let eio = format!("{:?}", atoll_proto::Errno::EIO).into_bytes();
    assert_eq!(got, vec![(4, eio)]);
    assert_eq!(m.bytes(), 0, "neither a short chunk nor an error is kept");
}

/// A change made through the node after a fetch left: a read no longer
/// waits for it (it crosses) and its chunk is not kept; nor does a read
/// on another channel wait (its answer could pass replies owed there).
#[test]
fn a_change_or_another_channel_does_not_wait_for_read_ahead() {
    let mut m = Copies::new(LIMIT_BYTES);
    let chunk = CHUNK as u64;
    opened(&mut m, P1, D, attr(F, 8 * chunk, 1));
    let (_, ahead) = ask(&mut m, CH, 1, 0, CHUNK as u32);
    let ids = ahead_of(&ahead);
    let (v, _) = ask(&mut m, CH + 1, 2, chunk, CHUNK as u32);
    assert!(matches!(v, Verdict::Forward), "another channel's fetch");
    let write = req(
        3,
        Request::WriteData {
            desc: D,
            data: b"x",
            offset: Some(3 * chunk),
            fsize: None,
            chain: None,
        },
    );
    let (mut fetched, mut more) = (false, Vec::new());
    m.request(P1, CH, &write, true, &mut fetched, &mut more);
    let (v, _) = ask(&mut m, CH, 4, 2 * chunk, CHUNK as u32);
    assert!(matches!(v, Verdict::Forward), "a change overtook the fetch");
    assert!(answers(m.reply(P1, CH, &rep(ids[1].0, Reply::Data(&[1; CHUNK])))).is_empty());
    assert_eq!(m.bytes(), 0, "fetched before the change: not kept");
    // A closed channel forgets its fetches.
    m.chan_closed(CH);
    assert!(m.ahead.is_empty());
}

/// However many descriptions a lane reads sequentially, at most
/// `AHEAD_PER_CHAN` fetches are in flight on its channel (their requests
/// must fit its ring at the head beside a write's pieces); a reply makes
/// room for the next.
#[test]
fn read_ahead_on_one_channel_is_bounded() {
    const H: InodeId = InodeId(0x0100_0000_0000_000b);
    const DH: DescId = DescId(0x0100_0000_0000_0004);
    let mut m = Copies::new(LIMIT_BYTES);
    let chunk = CHUNK as u64;
    opened(&mut m, P1, D, attr(F, 100 * chunk, 1));
    opened(&mut m, P1, DG, attr(G, 100 * chunk, 1));
    opened(&mut m, P1, DH, attr(H, 100 * chunk, 1));
    let mut fetched = false;
    let mut on = |m: &mut Copies, chan: ChanId, id: u64, desc: DescId, at: u64| {
        let mut out = Vec::new();
        m.request(
            P1,
            chan,
            &read(id, desc, at, CHUNK as u32),
            true,
            &mut fetched,
            &mut out,
        );
        out
    };
    let first = on(&mut m, CH, 1, D, 0);
    assert_eq!(first.len(), AHEAD_PER_CHAN);
    assert!(
        on(&mut m, CH, 2, DG, 0).is_empty(),
        "the channel's fetches are all in flight"
    );
    // Another channel has room of its own.
    assert_eq!(on(&mut m, CH + 1, 3, DH, 0).len(), AHEAD_PER_CHAN);
    // One of the first channel's replies: one more may leave, for G.
    let id = ahead_of(&first)[0].0;
    m.reply(P1, CH, &rep(id, Reply::Data(&[1; CHUNK])));
    let more = ahead_of(&on(&mut m, CH, 4, DG, chunk));
    assert_eq!(more.len(), 1);
    assert_eq!(more[0].1, 2 * chunk);
}

/// A reader whose reads are 32 KiB (four chunks, a program's largest
/// `ReadData`) has the node fetch 32 KiB at a time at its own steps: each
/// of its reads waits for one fetch and is answered with all of it; a
/// read across two fetches does not wait (it crosses); every whole chunk
/// of a fetch, and of a program's own multi-chunk read, is kept.
#[test]
fn read_ahead_fetches_in_the_reader_s_steps_of_up_to_four_chunks() {
    let mut m = Copies::new(LIMIT_BYTES);
    let chunk = CHUNK as u64;
    let step = 4 * CHUNK as u32;
    opened(&mut m, P1, D, attr(F, 64 * chunk + 100, 1));
    let (v, ahead) = ask(&mut m, CH, 1, 0, step);
    assert!(matches!(v, Verdict::Forward));
    let first = ahead_of(&ahead);
    assert_eq!(first.len(), (AHEAD_BYTES / (4 * chunk)) as usize);
    assert!(first
        .iter()
        .enumerate()
        .all(|(i, &(_, at, len))| at == (i as u64 + 1) * 4 * chunk && len == step));
    // The program's own 32 KiB read comes back: its four chunks are kept.
    let own: Vec<u8> = (0..4 * CHUNK).map(|i| (i / CHUNK) as u8).collect();
    assert!(matches!(
        m.reply(P1, CH, &rep(1, Reply::Data(&own))),
        Relayed::Deliver
    ));
    assert_eq!(m.bytes(), 4 * CHUNK);
    // The next read is the first fetch exactly: it waits, and is answered
    // with the whole fetch.
    assert!(matches!(
        ask(&mut m, CH, 2, 4 * chunk, step).0,
        Verdict::Wait(2)
    ));
    // A read across the second and third fetches does not wait.
    assert!(matches!(
        ask(&mut m, CH, 3, 10 * chunk, step).0,
        Verdict::Forward
    ));
    let bytes: Vec<u8> = (0..4 * CHUNK).map(|i| (i % 251) as u8).collect();
    let got = answers(m.reply(P1, CH, &rep(first[0].0, Reply::Data(&bytes))));
    assert_eq!(got, vec![(2, bytes.clone())]);
    assert_eq!(m.bytes(), 8 * CHUNK, "chunks 0..8 held");
    // Held now: a read of 32 KiB across two kept fetches' chunks is
    // answered here in one reply.
    let (v, _) = ask(&mut m, CH, 4, 2 * chunk, step);
    let Verdict::Answer(frame) = v else {
        panic!("chunks 2..6 are held")
    };
    let f: ReplyFrame<'_> = atoll_proto::decode(&frame).unwrap();
    let Reply::Data(d) = f.reply else {
        panic!("{:?}", f.reply)
    };
    assert_eq!(d.len(), 4 * CHUNK);
    assert_eq!(&d[..2 * CHUNK], &own[2 * CHUNK..]);
    assert_eq!(&d[2 * CHUNK..], &bytes[..2 * CHUNK]);
}
