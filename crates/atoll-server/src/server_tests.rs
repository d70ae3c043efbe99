//! Tests of the server loop's pieces (`server`).

use super::*;
use crate::store::MemStore;
use atoll_proto::{Cred, Request, ROOT};

fn fs() -> FileServer<MemStore> {
    FileServer::new(
        FsConfig {
            index: 0,
            nservers: 1,
            first_block: 0,
            nblocks: 4,
            root_owner: Cred::default(),
            core: -1,
            track_lookups: true,
            track_absent: true,
            limits: crate::fs::Limits::for_memory(1 << 30),
        },
        MemStore::new(4),
    )
}

#[test]
fn a_reply_owed_at_a_death_is_answered_eio() {
    use std::os::fd::AsFd;
    let (fd, server) = ServerChannel::create(atoll_msg::RingSize::Small).unwrap();
    let client = atoll_msg::ClientChannel::map(fd.as_fd()).unwrap();
    let mut chans = vec![Chan {
        session: SessionId(1),
        lane: 0,
        ch: Arc::new(server),
        pending: None,
        requests: 0,
    }];
    answer_eio(&mut chans, 0, 41);
    answer_eio(&mut chans, 5, 42); // no such channel: nothing
    let got = client
        .recv(PollMode::Spin, |b| {
            let r: ReplyFrame<'_> = decode(b).unwrap();
            (r.id, matches!(r.reply, Reply::Err(Errno::EIO)))
        })
        .unwrap();
    assert_eq!(got, (41, true));
}

#[test]
fn garbage_frames_get_eproto() {
    let mut fs = fs();
    let mut scratch = vec![];
    let mut out = vec![0u8; MAX_FRAME];
    // A readable id (varint 7) followed by nonsense.
    let garbage = [7u8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff];
    let n = serve_frame(&mut fs, SessionId(1), &garbage, &mut scratch, &mut out).unwrap();
    let reply: ReplyFrame = decode(&out[..n]).unwrap();
    assert_eq!(reply.id, 7);
    assert!(matches!(reply.reply, Reply::Err(Errno::EPROTO)));
    // Not even an id: dropped, but counted.
    assert!(serve_frame(&mut fs, SessionId(1), &[0xff; 12], &mut scratch, &mut out).is_none());
    assert!(serve_frame(&mut fs, SessionId(1), &[], &mut scratch, &mut out).is_none());
    assert_eq!(fs.stats().bad_requests, 3);
}

#[test]
fn well_formed_frames_are_served_and_echo_their_id() {
    let mut fs = fs();
    let mut scratch = vec![];
    let mut out = vec![0u8; MAX_FRAME];
    let mut inb = [0u8; MAX_FRAME];
    let frame = RequestFrame {
        id: 99,
        cred: Cred::default(),
        pid: 0,
        req: Request::Lookup {
            dir: ROOT,
            name: b".",
        },
        vouched: Default::default(),
    };
    let bytes = encode(&frame, &mut inb).unwrap().to_vec();
    let n = serve_frame(&mut fs, SessionId(1), &bytes, &mut scratch, &mut out).unwrap();
    let reply: ReplyFrame = decode(&out[..n]).unwrap();
    assert_eq!(reply.id, 99);
    assert!(matches!(reply.reply, Reply::Entry { ino: ROOT, .. }));
}

#[test]
fn posted_requests_are_served_without_a_reply() {
    let mut fs = fs();
    let mut scratch = vec![];
    let mut out = vec![0u8; MAX_FRAME];
    let mut inb = [0u8; MAX_FRAME];
    let mk = |id| RequestFrame {
        id,
        cred: Cred::default(),
        pid: 0,
        req: Request::MakeNode {
            dir: ROOT,
            name: b"d",
            ftype: atoll_proto::FileType::Directory,
            perm: 0o755,
            rdev: 0,
            target: b"",
            home: 0,
            spread: 0,
            inherit: atoll_proto::Inherit::Unread,
            umask: 0,
        },
        vouched: Default::default(),
    };
    let bytes = encode(&mk(atoll_proto::POSTED | 4), &mut inb)
        .unwrap()
        .to_vec();
    assert!(serve_frame(&mut fs, SessionId(1), &bytes, &mut scratch, &mut out).is_none());
    // It was served: the same creation, now answered, finds the entry.
    let bytes = encode(&mk(5), &mut inb).unwrap().to_vec();
    let n = serve_frame(&mut fs, SessionId(1), &bytes, &mut scratch, &mut out).unwrap();
    let reply: ReplyFrame = decode(&out[..n]).unwrap();
    assert!(
        matches!(reply.reply, Reply::Err(Errno::EEXIST)),
        "{reply:?}"
    );
    // Even a posted request that fails or does not decode stays silent.
    let mut bad = encode(&mk(atoll_proto::POSTED | 6), &mut inb)
        .unwrap()
        .to_vec();
    bad.truncate(bad.len() - 3);
    assert!(serve_frame(&mut fs, SessionId(1), &bad, &mut scratch, &mut out).is_none());
}

#[test]
fn truncated_frames_of_every_length_never_panic() {
    let mut fs = fs();
    let mut scratch = vec![];
    let mut out = vec![0u8; MAX_FRAME];
    let mut inb = [0u8; MAX_FRAME];
    let frame = RequestFrame {
        id: 5,
        cred: Cred::default(),
        pid: 0,
        req: Request::Rename {
            olddir: ROOT,
            oldname: b"a",
            newdir: ROOT,
            newname: b"b",
            flags: 0,
        },
        vouched: Default::default(),
    };
    let bytes = encode(&frame, &mut inb).unwrap().to_vec();
    for cut in 0..bytes.len() {
        let _ = serve_frame(&mut fs, SessionId(1), &bytes[..cut], &mut scratch, &mut out);
    }
    let mut flipped = bytes.clone();
    for i in 0..flipped.len() {
        flipped[i] ^= 0x5a;
        let _ = serve_frame(&mut fs, SessionId(1), &flipped, &mut scratch, &mut out);
    }
}

/// A channel with a client end, served as `Chan` of session 1, lane 0.
fn served_channel() -> (Vec<Chan>, atoll_msg::ClientChannel) {
    use std::os::fd::AsFd;
    let (fd, server) = ServerChannel::create(atoll_msg::RingSize::Small).unwrap();
    let client = atoll_msg::ClientChannel::map(fd.as_fd()).unwrap();
    let chans = vec![Chan {
        session: SessionId(1),
        lane: 0,
        ch: Arc::new(server),
        pending: None,
        requests: 0,
    }];
    (chans, client)
}

fn lookup_frame(id: u64) -> Vec<u8> {
    let mut buf = [0u8; MAX_FRAME];
    let frame = RequestFrame {
        id,
        cred: Cred::default(),
        pid: 0,
        req: Request::Lookup {
            dir: ROOT,
            name: b".",
        },
        vouched: Default::default(),
    };
    encode(&frame, &mut buf).unwrap().to_vec()
}

/// The id and whether it is `EIO`, of the next reply, if any.
fn next_reply(client: &atoll_msg::ClientChannel) -> Option<(u64, bool)> {
    client
        .try_recv(|b| {
            let r: ReplyFrame<'_> = decode(b).unwrap();
            (r.id, matches!(r.reply, Reply::Err(Errno::EIO)))
        })
        .unwrap()
}

#[test]
fn a_successor_skips_and_fails_a_journaled_request_left_in_its_ring() {
    let (_fd, journal) = Journal::create(1 << 16).unwrap();
    let (mut chans, client) = served_channel();
    client.send_unrung(&lookup_frame(7)).unwrap();
    client.send_unrung(&lookup_frame(8)).unwrap();
    // Killed after journaling request 7, before taking it from the ring.
    journal.owe(SessionId(1), 0, 7);
    journal.append(Kind::Request, SessionId(1), &[], b"7");
    settle_owed(Some(&journal), journal.owed(), None, &mut chans);
    assert_eq!(next_reply(&client), Some((7, true)), "answered EIO");
    assert_eq!(next_reply(&client), None);
    let next = chans[0]
        .ch
        .try_recv(|b| postcard::take_from_bytes::<u64>(b).unwrap().0)
        .unwrap();
    assert_eq!(next, Some(8), "7 left the ring, 8 waits to be served");
    assert_eq!(journal.owed(), None, "settled");
}

#[test]
fn a_successor_serves_again_a_request_that_never_reached_the_journal() {
    let (_fd, journal) = Journal::create(1 << 16).unwrap();
    let (mut chans, client) = served_channel();
    client.send_unrung(&lookup_frame(7)).unwrap();
    journal.owe(SessionId(1), 0, 7);
    let failed = settle_owed(Some(&journal), journal.owed(), None, &mut chans);
    assert_eq!(failed, None, "nothing failed: chains go on");
    assert_eq!(
        next_reply(&client),
        None,
        "no answer yet: it is served anew"
    );
    let next = chans[0]
        .ch
        .try_recv(|b| postcard::take_from_bytes::<u64>(b).unwrap().0)
        .unwrap();
    assert_eq!(next, Some(7));
}

/// The id and the errno, if it is an error, of the next reply, if any.
fn next_answer(client: &atoll_msg::ClientChannel) -> Option<(u64, Option<Errno>)> {
    client
        .try_recv(|b| {
            let r: ReplyFrame<'_> = decode(b).unwrap();
            let errno = match r.reply {
                Reply::Err(e) => Some(e),
                _ => None,
            };
            (r.id, errno)
        })
        .unwrap()
}

#[test]
fn a_successor_answers_not_applied_to_a_request_taken_but_never_journaled() {
    let (_fd, journal) = Journal::create(1 << 16).unwrap();
    let (mut chans, client) = served_channel();
    // Taken from the ring (nothing left there), in no record, never
    // answered: a `Lookup` killed between its frame's release and its reply.
    journal.owe(SessionId(1), 0, 9);
    let failed = settle_owed(Some(&journal), journal.owed(), None, &mut chans);
    assert_eq!(failed, None, "nothing failed: chains go on");
    assert_eq!(
        next_answer(&client),
        Some((9, Some(Errno::NOT_APPLIED))),
        "the client is told to send it again"
    );
    assert_eq!(next_answer(&client), None);
    assert_eq!(journal.owed(), None, "settled");
    // A posted one owes nobody an answer.
    journal.owe(SessionId(1), 0, atoll_proto::POSTED | 10);
    let failed = settle_owed(Some(&journal), journal.owed(), None, &mut chans);
    assert_eq!(failed, None);
    assert_eq!(next_answer(&client), None);
}

#[test]
fn a_successor_fails_a_request_taken_when_it_cannot_tell_whether_it_was_applied() {
    let (_fd, journal) = Journal::create(1 << 16).unwrap();
    let (mut chans, client) = served_channel();
    // Journaled (as far as the header says) with no reply from its
    // replay: a record counted but not readable, or a successor's own
    // records after a successor died settling it. Its chains are cut.
    journal.owe(SessionId(1), 0, 9);
    journal.append(Kind::Opened, SessionId(1), &[], b"");
    let failed = settle_owed(Some(&journal), journal.owed(), None, &mut chans);
    assert_eq!(failed, Some(SessionId(1)));
    assert_eq!(next_answer(&client), Some((9, Some(Errno::EIO))));
    // Not journaled, but the journal was full: a request served then is
    // in no record though it took effect.
    let (_fd, small) = Journal::create(1).unwrap();
    while small.append(Kind::Opened, SessionId(1), &[], &[0u8; 512]) {}
    assert!(small.full());
    small.owe(SessionId(1), 0, 11);
    let failed = settle_owed(Some(&small), small.owed(), None, &mut chans);
    assert_eq!(failed, Some(SessionId(1)));
    assert_eq!(next_answer(&client), Some((11, Some(Errno::EIO))));
}

#[test]
fn what_a_successor_appends_before_settling_does_not_make_the_owed_request_journaled() {
    let (_fd, journal) = Journal::create(1 << 16).unwrap();
    let (mut chans, client) = served_channel();
    client.send_unrung(&lookup_frame(7)).unwrap();
    journal.owe(SessionId(1), 0, 7);
    // Read at the death; then the successor keeps its own records.
    let owed = journal.owed();
    journal.append(Kind::Reconcile, SessionId(0), &[], b"");
    journal.append(Kind::Opened, SessionId(1), &[], b"");
    settle_owed(Some(&journal), owed, None, &mut chans);
    assert_eq!(next_reply(&client), None, "served anew, not failed");
}

/// A reply encoded for request `id` (a successful lookup of `/`).
fn lookup_reply(id: u64) -> Vec<u8> {
    let mut fs = fs();
    let (mut scratch, mut out) = (Vec::new(), vec![0u8; MAX_FRAME]);
    let len = serve_frame(
        &mut fs,
        SessionId(1),
        &lookup_frame(id),
        &mut scratch,
        &mut out,
    )
    .expect("a lookup is answered");
    out[..len].to_vec()
}

#[test]
fn a_reply_parked_for_room_is_delivered_by_a_successor() {
    use std::os::fd::AsFd;
    let (_jfd, journal) = Journal::create(1 << 16).unwrap();
    let (fd, server) = ServerChannel::create(atoll_msg::RingSize::Small).unwrap();
    let client = atoll_msg::ClientChannel::map(fd.as_fd()).unwrap();
    let mut dying = Chan {
        session: SessionId(1),
        lane: 0,
        ch: Arc::new(server),
        pending: None,
        requests: 0,
    };
    // The client sleeps on other work: its reply ring fills up.
    let mut filler = 0u64;
    while dying.ch.try_reply(&lookup_reply(filler)).is_ok() {
        filler += 1;
    }
    // Request 500 served and journaled; its reply finds no room, is
    // parked, and the process is killed before the client makes room.
    journal.owe(SessionId(1), 0, 500);
    journal.append(Kind::Request, SessionId(1), &[], b"500");
    let parked = lookup_reply(500);
    dying.park(&parked);
    assert!(
        matches!(deliver_parked(&mut dying), Ok(false)),
        "still full"
    );
    drop(dying);

    // The successor maps the same channel.
    let mut fs = fs();
    let mut chans = Vec::new();
    let adopted = vec![Adopted {
        session: SessionId(1),
        lane: 0,
        channel: Arc::new(ServerChannel::map(fd.as_fd()).unwrap()),
        closing: false,
    }];
    // Its replay computed the same reply again (`rebuild_answering`).
    take_over(
        &mut fs,
        Some(&journal),
        (journal.owed(), Some(parked.clone())),
        &mut chans,
        adopted,
        Vec::new(),
    );
    assert_eq!(chans[0].pending.as_deref(), Some(&parked[..]));
    // The client drains what filled its ring; then the parked reply, the
    // real answer and not `EIO`, reaches it, once.
    for id in 0..filler {
        assert_eq!(next_reply(&client), Some((id, false)));
    }
    assert!(matches!(deliver_parked(&mut chans[0]), Ok(true)));
    assert_eq!(next_reply(&client), Some((500, false)));
    assert_eq!(next_reply(&client), None, "no EIO after it");
    assert_eq!(chans[0].ch.parked_reply(), None, "unparked");
}

/// A journaled request its server died serving gets the reply the replay
/// of its record computed instead of `EIO`, whether it was taken from the
/// ring or not, and its session's write chains go on; one that never
/// reached the journal is still failed (taken) or served anew (not
/// taken), with or without a reply at hand.
#[test]
fn a_successor_answers_a_journaled_request_with_the_reply_its_replay_computed() {
    let (_fd, journal) = Journal::create(1 << 16).unwrap();
    let (mut chans, client) = served_channel();
    // Taken from the ring, journaled, never answered.
    journal.owe(SessionId(1), 0, 9);
    journal.append(Kind::Request, SessionId(1), &[], b"9");
    let reply = lookup_reply(9);
    let failed = settle_owed(Some(&journal), journal.owed(), Some(&reply), &mut chans);
    assert_eq!(failed, None, "nothing failed: chains go on");
    assert_eq!(next_reply(&client), Some((9, false)));
    assert_eq!(next_reply(&client), None, "once");
    assert_eq!(journal.owed(), None, "settled once answered");
    // Killed after journaling and before taking it from the ring.
    client.send_unrung(&lookup_frame(10)).unwrap();
    client.send_unrung(&lookup_frame(11)).unwrap();
    journal.owe(SessionId(1), 0, 10);
    journal.append(Kind::Request, SessionId(1), &[], b"10");
    let reply = lookup_reply(10);
    settle_owed(Some(&journal), journal.owed(), Some(&reply), &mut chans);
    assert_eq!(next_reply(&client), Some((10, false)));
    let next = chans[0]
        .ch
        .try_recv(|b| postcard::take_from_bytes::<u64>(b).unwrap().0)
        .unwrap();
    assert_eq!(next, Some(11), "10 left the ring, 11 waits to be served");
    // Not journaled: a reply at hand is not this request's; the request
    // was not applied.
    journal.owe(SessionId(1), 0, 12);
    let stray = lookup_reply(12);
    let failed = settle_owed(Some(&journal), journal.owed(), Some(&stray), &mut chans);
    assert_eq!(failed, None);
    assert_eq!(next_answer(&client), Some((12, Some(Errno::NOT_APPLIED))));
}

#[test]
fn an_eio_answer_that_finds_the_ring_full_is_parked_too() {
    let (mut chans, _client) = served_channel();
    while chans[0].ch.try_reply(&lookup_reply(1)).is_ok() {}
    answer_eio(&mut chans, 0, 77);
    let parked = chans[0].ch.parked_reply().expect("parked in the channel");
    let r: ReplyFrame<'_> = decode(&parked).unwrap();
    assert_eq!(r.id, 77);
    assert!(matches!(r.reply, Reply::Err(Errno::EIO)));
}

/// A successor finishes only the sessions the instance says ended
/// (`take_over`'s `ended`): a session with no channel here — a forked
/// child before its first call — keeps what its parent shared with it.
/// (Every channel-less session was closed before: a pipe the parent then
/// closed was freed under the child, `sort: fstat ENOENT`.)
#[test]
fn a_successor_keeps_a_session_without_channels_unless_it_ended() {
    use std::os::fd::AsFd;
    let (s1, s2, s3) = (SessionId(1), SessionId(2), SessionId(3));
    let mut fs = fs();
    let mut out = Vec::new();
    let open = Request::Open {
        dir: ROOT,
        name: b"f",
        flags: (libc::O_CREAT | libc::O_RDWR) as u32,
        perm: 0o644,
        umask: 0,
        inherit: atoll_proto::Inherit::Unread,
    };
    let Reply::Opened { desc, .. } = fs.handle(s1, Cred::default(), open, &mut out) else {
        panic!("open");
    };
    for to in [s2, s3] {
        let share = Request::Share { desc, to, held: 0 };
        assert!(matches!(
            fs.handle(s1, Cred::default(), share, &mut out),
            Reply::Ok
        ));
    }
    // Only the parent has a channel here; the instance says s3 ended.
    let (fd, _) = ServerChannel::create(atoll_msg::RingSize::Small).unwrap();
    let adopted = vec![Adopted {
        session: s1,
        lane: 0,
        channel: Arc::new(ServerChannel::map(fd.as_fd()).unwrap()),
        closing: false,
    }];
    let mut chans = Vec::new();
    take_over(&mut fs, None, (None, None), &mut chans, adopted, vec![s3]);
    let mut closed = |s| {
        let close = Request::Close { desc };
        matches!(fs.handle(s, Cred::default(), close, &mut out), Reply::Ok)
    };
    assert!(closed(s1));
    assert!(closed(s2), "the child still holds its reference");
    assert!(!closed(s3), "the ended session's went with it");
}

/// The errno `fs` answers `req` with when its reply buffer (its
/// channel's frame) is `frame` bytes.
fn errno_of(fs: &mut FileServer<MemStore>, req: Request<'_>, frame: usize) -> Errno {
    let mut inb = [0u8; MAX_FRAME];
    let mut out = vec![0u8; frame];
    let f = RequestFrame {
        id: 3,
        cred: Cred::default(),
        pid: 0,
        req,
        vouched: Default::default(),
    };
    let bytes = encode(&f, &mut inb).unwrap().to_vec();
    let n = serve_frame(fs, SessionId(1), &bytes, &mut vec![], &mut out).unwrap();
    match decode::<ReplyFrame>(&out[..n]).unwrap().reply {
        Reply::Err(e) => e,
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_read_larger_than_its_channel_carries_is_refused_before_it_is_served() {
    let mut fs = fs();
    let desc = atoll_proto::DescId(77); // no such description
    let small = atoll_proto::SMALL_FRAME;
    let read = |len| Request::ReadData {
        desc,
        len,
        offset: None,
        report: true,
    };
    let pipe = |len| Request::PipeRead { desc, len };
    // What a small channel's client may ask reaches the handler (which
    // finds no such description) ...
    assert_eq!(errno_of(&mut fs, read(8192), small), Errno::EBADF);
    assert_eq!(errno_of(&mut fs, pipe(8192), small), Errno::EBADF);
    // ... more is refused first, and only on a small channel.
    assert_eq!(errno_of(&mut fs, read(8193), small), Errno::EINVAL);
    assert_eq!(errno_of(&mut fs, pipe(32768), small), Errno::EINVAL);
    assert_eq!(errno_of(&mut fs, read(32768), MAX_FRAME), Errno::EBADF);
    assert_eq!(errno_of(&mut fs, read(32769), MAX_FRAME), Errno::EINVAL);
}
