//! Unit tests of `head.rs`.

use super::*;
use atoll_msg::ServerChannel;
use atoll_transport::{TcpTransport, Transport};

/// The peer's channels as a pump's pass takes them.
fn channels_of(peer: &Peer) -> Vec<(ChanId, Arc<RealChan>)> {
    peer.chans
        .lock()
        .unwrap()
        .iter()
        .map(|(k, v)| (*k, v.clone()))
        .collect()
}

/// A peer whose link goes nowhere useful, and one real channel in it
/// with the server's end.
fn peer_with_channel(net: &TcpTransport) -> (Arc<Peer>, ChanId, ServerChannel) {
    let listener = net.listen("127.0.0.1:0").unwrap();
    let link = Arc::<dyn Link>::from(net.connect(&listener.local_addr()).unwrap());
    let peer = Arc::new(Peer::new(link, PathBuf::new(), None));
    let (fd, server_end) = ServerChannel::create(atoll_msg::RingSize::Large).unwrap();
    let chan = ClientChannel::map(fd.as_fd()).unwrap();
    let rc = Arc::new(RealChan {
        chan,
        server: 0,
        last_id: AtomicU64::new(7),
        owed: AtomicU32::new(1),
        slow: AtomicBool::new(false),
        unwatched: AtomicBool::new(false),
        started: AtomicU64::new(0),
    });
    peer.chans.lock().unwrap().insert(5, rc);
    (peer, 5, server_end)
}

fn kinds(batch: &[Message]) -> Vec<&'static str> {
    batch
        .iter()
        .map(|m| match wire::decode(m).unwrap() {
            NodeMsg::Reply { .. } => "reply",
            NodeMsg::Replies { .. } => "replies",
            NodeMsg::Inbox { .. } => "inbox",
            NodeMsg::ChanClosed { .. } => "closed",
            _ => "other",
        })
        .collect()
}

/// A notice on a channel the watcher watches woke the watcher when it
/// was written: a pump's pass that a timer started (polling for a slow
/// call's reply, as under load) and finds it first does not count it
/// as waiting for a timer. One on a channel past the watch does. (The
/// counter used to count both, and `hosts.rs`
/// `invalidations_for_an_idle_remote_program_leave_without_waiting_for_a_timer`
/// failed on a loaded machine, where calls outlast the pump's spin.)
/// The only test that moves these counters.
#[test]
fn only_notices_nothing_woke_for_count_as_waiting_for_a_timer() {
    let net = TcpTransport::new().unwrap();
    let (peer, id, server) = peer_with_channel(&net);
    let snapshot = channels_of(&peer);
    let after_timer = || NOTICES_AFTER_TIMER.load(Ordering::Relaxed);
    let relayed = || NOTICES_RELAYED.load(Ordering::Relaxed);
    let (timer0, relayed0) = (after_timer(), relayed());
    server.notify(b"invalidate").unwrap();
    server.reply(b"answer").unwrap();
    assert!(!relay_pass(&peer, &snapshot, true, false, false));
    assert_eq!(relayed() - relayed0, 1);
    assert_eq!(after_timer(), timer0, "a watched channel's notice");
    peer.chans.lock().unwrap()[&id]
        .unwatched
        .store(true, Ordering::Relaxed);
    server.notify(b"invalidate").unwrap();
    relay_pass(&peer, &snapshot, false, false, false);
    assert_eq!(after_timer(), timer0, "found by a pass a wake-up started");
    server.notify(b"invalidate").unwrap();
    relay_pass(&peer, &snapshot, true, false, false);
    assert_eq!(after_timer() - timer0, 1, "an unwatched channel's notice");
}

/// A server writes an invalidation, then its reply, then the channel
/// ends: the edge must get them in that order (its program drains the
/// inbox before trusting its cache once the reply is there, and a
/// channel closed first would lose the reply).
#[test]
fn inbox_messages_leave_before_the_reply_after_them_and_the_end_last() {
    let net = TcpTransport::new().unwrap();
    let (peer, id, server) = peer_with_channel(&net);
    server.notify(b"invalidate").unwrap();
    server.reply(b"answer").unwrap();
    server.close();
    let snapshot = channels_of(&peer);
    let mut out = Outgoing::default();
    out.gather(&peer, &snapshot, &mut Held::default(), false);
    let batch = out.into_batch();
    assert_eq!(kinds(&batch), ["inbox", "reply", "closed"]);
    assert_eq!(batch[1].id, 7, "a reply carries its request's id");
    assert_eq!(snapshot[0].1.owed.load(Ordering::Relaxed), 0);
    assert!(peer.chans.lock().unwrap().get(&id).is_none());
}

/// Replies of a channel that owes more wait while the pump spins and
/// leave together, in order, once none is owed; a pass that may not
/// hold (the pump about to sleep, the watcher) sends what is held.
#[test]
fn replies_of_a_channel_owing_more_leave_together_in_order() {
    let net = TcpTransport::new().unwrap();
    let (peer, _id, server) = peer_with_channel(&net);
    let snapshot = channels_of(&peer);
    let rc = snapshot[0].1.clone();
    let mut held = Held {
        limit: Duration::from_secs(3600),
        ..Held::default()
    };
    let pass = |held: &mut Held, may_hold: bool| {
        let mut out = Outgoing::default();
        out.gather(&peer, &snapshot, held, may_hold);
        out.into_batch()
    };
    let frames_of = |batch: &[Message]| -> Vec<Vec<u8>> {
        batch
            .iter()
            .flat_map(|m| match wire::decode(m).unwrap() {
                NodeMsg::Replies { frames, .. } => wire::unpack_frames(&frames)
                    .unwrap()
                    .into_iter()
                    .map(<[u8]>::to_vec)
                    .collect(),
                NodeMsg::Reply { frame, .. } => vec![frame],
                _ => vec![],
            })
            .collect()
    };
    rc.owed.store(10, Ordering::Relaxed);
    server.reply(&[1; 8192]).unwrap();
    server.reply(&[2; 8192]).unwrap();
    assert!(pass(&mut held, true).is_empty(), "more replies owed");
    server.reply(&[3; 100]).unwrap();
    rc.owed.store(1, Ordering::Relaxed); // the batch's last reply
    let batch = pass(&mut held, true);
    assert_eq!(kinds(&batch), ["replies"]);
    assert_eq!(
        frames_of(&batch),
        [vec![1; 8192], vec![2; 8192], vec![3; 100]]
    );
    // Owing more, but the pass may not hold.
    rc.owed.store(10, Ordering::Relaxed);
    server.reply(&[4; 10]).unwrap();
    server.reply(&[5; 10]).unwrap();
    assert!(pass(&mut held, true).is_empty());
    let batch = pass(&mut held, false);
    assert_eq!(frames_of(&batch), [vec![4; 10], vec![5; 10]]);
    // A program's own window (fewer than `HOLD_OWED` owed): at once.
    rc.owed.store(6, Ordering::Relaxed);
    server.reply(&[6; 10]).unwrap();
    assert_eq!(frames_of(&pass(&mut held, true)), [vec![6; 10]]);
    // Past the byte bound, they leave though more are owed.
    rc.owed.store(40, Ordering::Relaxed);
    let mut got = Vec::new();
    for i in 0..20u8 {
        // The reply ring holds seven of them: a pass after each.
        server.reply(&[i; 8192]).unwrap();
        got.extend(frames_of(&pass(&mut held, true)));
    }
    let first: Vec<Vec<u8>> = (0..16u8).map(|i| vec![i; 8192]).collect();
    assert_eq!(got, first, "128 KiB leave together");
    assert_eq!(held.chans.values().next().map(|h| h.frames.len()), Some(4));
    assert_eq!(
        rc.owed.load(Ordering::Relaxed),
        20,
        "every reply taken is settled"
    );
}
