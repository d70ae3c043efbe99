//! Loopback tests of the TCP transport: order and ids, batching, peers
//! that vanish or go silent, malformed frames.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use super::*;

const WAIT: Option<Duration> = Some(Duration::from_secs(10));

fn pair(net: &TcpTransport) -> (Box<dyn Link>, Box<dyn Link>, Box<dyn Listener>) {
    let l = net.listen("127.0.0.1:0").unwrap();
    let a = net.connect(&l.local_addr()).unwrap();
    let b = l.accept(WAIT).unwrap().unwrap();
    (a, b, l)
}

fn quick() -> TcpTransport {
    TcpTransport::with_options(LinkOptions {
        dead_after: Duration::from_millis(400),
        connect_timeout: Duration::from_secs(2),
    })
    .unwrap()
}

#[test]
fn messages_arrive_in_order_with_their_ids_both_ways() {
    let net = TcpTransport::new().unwrap();
    let (a, b, _l) = pair(&net);
    for i in 0..1000u64 {
        a.send(Message {
            id: i * 3,
            body: i.to_le_bytes().repeat((i % 7) as usize),
        })
        .unwrap();
    }
    for i in 0..1000u64 {
        let m = b.recv(WAIT).unwrap().unwrap();
        assert_eq!(m.id, i * 3);
        assert_eq!(m.body, i.to_le_bytes().repeat((i % 7) as usize));
        b.send(Message {
            id: m.id,
            body: vec![],
        })
        .unwrap();
    }
    for i in 0..1000u64 {
        assert_eq!(a.recv(WAIT).unwrap().unwrap().id, i * 3);
    }
    assert_eq!(a.recv(Some(Duration::from_millis(10))).unwrap(), None);
}

/// Times the network thread went to sleep and was woken so far.
fn wake_ups(tid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap()
}

/// The reader of a link reads the socket itself, so a message received
/// must not wake the network thread as well (a second wake-up per message,
/// and a CPU taken from the reader on a small machine): it watches the
/// socket only for room to write.
#[test]
fn receiving_messages_does_not_wake_the_network_thread() {
    let net = TcpTransport::new().unwrap();
    // SAFETY: gettid has no preconditions.
    let tid = net.run(async { unsafe { libc::gettid() } }).unwrap();
    let (a, b, _l) = pair(&net);
    // Each message arrives on its own: the receiver has taken the one
    // before it and answered before the next is sent.
    let round = |i: u64| {
        a.send(Message {
            id: i,
            body: vec![1; 64],
        })
        .unwrap();
        assert_eq!(b.recv(WAIT).unwrap().unwrap().id, i);
        b.send(Message {
            id: i,
            body: vec![2; 64],
        })
        .unwrap();
        assert_eq!(a.recv(WAIT).unwrap().unwrap().id, i);
    };
    round(0);
    let before = wake_ups(tid);
    for i in 1..=200 {
        round(i);
    }
    let woken = wake_ups(tid) - before;
    // Heartbeats and timers may wake it a few times; 400 messages were
    // received.
    assert!(
        woken < 40,
        "network thread woken {woken} times for 400 messages"
    );
}

/// A link to a plain socket the test reads, with the link's write count.
fn raw_pair(net: &TcpTransport) -> (TcpLink, std::net::TcpStream) {
    let raw = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = raw.local_addr().unwrap().to_string();
    let stream = net
        .run(async move { TcpStream::connect(addr).await })
        .unwrap()
        .unwrap();
    let link = start_link(&net.runtime, stream, "test".into(), LinkOptions::default()).unwrap();
    let (s, _) = raw.accept().unwrap();
    (link, s)
}

fn read_frames(s: &mut std::net::TcpStream, n: usize, body: usize) {
    let want = n * (frame::HEADER + body);
    let mut got = Vec::new();
    let mut buf = vec![0u8; 1 << 20];
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    while got.len() < want {
        let k = s.read(&mut buf).unwrap();
        assert!(k > 0);
        got.extend_from_slice(&buf[..k]);
    }
    for i in 0..n {
        let at = i * (frame::HEADER + body);
        let h = frame::decode_header(got[at..at + frame::HEADER].try_into().unwrap()).unwrap();
        assert_eq!((h.id, h.len), (i as u64, body));
    }
}

#[test]
fn a_batch_of_small_messages_goes_out_in_a_few_writes() {
    let net = TcpTransport::new().unwrap();
    let (link, mut s) = raw_pair(&net);
    let msgs: Vec<Message> = (0..2000u64)
        .map(|id| Message {
            id,
            body: vec![1; 8],
        })
        .collect();
    link.send_all(&msgs).unwrap();
    read_frames(&mut s, 2000, 8);
    let writes = link.shared.writes.load(Ordering::Relaxed);
    assert!(
        (1..=4).contains(&writes),
        "{writes} writes for 2000 messages"
    );
}

#[test]
fn messages_sent_while_the_peer_does_not_read_leave_together_later() {
    // The peer reads nothing until the socket is full; everything sent
    // meanwhile waits in the outbox and leaves in far fewer writes.
    let net = TcpTransport::new().unwrap();
    let (link, mut s) = raw_pair(&net);
    let size = 1024;
    let mut n = 0u64;
    while link.shared.outbox.lock().unwrap().is_empty() {
        link.send(Message {
            id: n,
            body: vec![2; size],
        })
        .unwrap();
        n += 1;
        assert!(n < 100_000, "the socket never filled");
    }
    let before = link.shared.writes.load(Ordering::Relaxed);
    for _ in 0..5000 {
        link.send(Message {
            id: n,
            body: vec![2; size],
        })
        .unwrap();
        n += 1;
    }
    read_frames(&mut s, n as usize, size);
    let during = link.shared.writes.load(Ordering::Relaxed) - before;
    assert!(during < 500, "{during} writes for 5000 backed-up messages");
}

#[test]
fn a_burst_of_messages_arrives_as_exact_frames_on_the_stream() {
    let net = TcpTransport::new().unwrap();
    let raw = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let a = net.connect(&raw.local_addr().unwrap().to_string()).unwrap();
    let (mut s, _) = raw.accept().unwrap();
    for i in 0..2000u64 {
        a.send(Message {
            id: i,
            body: vec![1; 8],
        })
        .unwrap();
    }
    let want = 2000 * (frame::HEADER + 8);
    let mut got = Vec::new();
    let mut buf = vec![0u8; 1 << 20];
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    while got.len() < want {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0);
        got.extend_from_slice(&buf[..n]);
    }
    for i in 0..2000usize {
        let at = i * (frame::HEADER + 8);
        let h = frame::decode_header(got[at..at + frame::HEADER].try_into().unwrap()).unwrap();
        assert_eq!((h.id, h.len), (i as u64, 8));
    }
}

#[test]
fn a_peer_that_disappears_fails_calls_instead_of_hanging() {
    let net = quick();
    let (a, b, _l) = pair(&net);
    drop(b);
    let t = Instant::now();
    assert!(a.recv(None).is_err());
    assert!(t.elapsed() < Duration::from_secs(5));
    assert!(a.is_closed());
    assert!(a
        .send(Message {
            id: 1,
            body: vec![]
        })
        .is_err());
}

#[test]
fn a_silent_peer_is_declared_dead_after_the_bound() {
    // A raw socket that accepts and then says nothing, not even heartbeats.
    let net = quick();
    let raw = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let a = net.connect(&raw.local_addr().unwrap().to_string()).unwrap();
    let (_s, _) = raw.accept().unwrap();
    let t = Instant::now();
    match a.recv(None) {
        Err(TransportError::Silent(..)) => {}
        other => panic!("expected a silent peer, got {other:?}"),
    }
    assert!(t.elapsed() >= Duration::from_millis(400));
    assert!(t.elapsed() < Duration::from_secs(5));
}

/// A stopped peer sends no heartbeat: while its silence is held, the link
/// stays up however long it lasts; released, the bound applies again.
#[test]
fn a_peer_whose_silence_is_held_is_not_declared_dead_until_released() {
    let net = quick();
    let raw = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let a = net.connect(&raw.local_addr().unwrap().to_string()).unwrap();
    let (mut s, _) = raw.accept().unwrap();
    a.hold_silence(true);
    // Three times the bound (400 ms) without a byte.
    assert_eq!(a.recv(Some(Duration::from_millis(1200))).unwrap(), None);
    assert!(!a.is_closed());
    // The peer speaks again: a message arrives as ever.
    let mut out = Vec::new();
    frame::encode(
        &Message {
            id: 3,
            body: b"back".to_vec(),
        },
        &mut out,
    );
    s.write_all(&out).unwrap();
    assert_eq!(a.recv(WAIT).unwrap().unwrap().body, b"back");
    a.hold_silence(false);
    match a.recv(None) {
        Err(TransportError::Silent(..)) => {}
        other => panic!("expected a silent peer once released, got {other:?}"),
    }
}

#[test]
fn an_idle_link_stays_up_on_heartbeats() {
    let net = quick();
    let (a, b, _l) = pair(&net);
    // Four times the silence bound with nothing to say.
    assert_eq!(b.recv(Some(Duration::from_millis(1600))).unwrap(), None);
    assert!(!a.is_closed() && !b.is_closed());
    a.send(Message {
        id: 5,
        body: b"still here".to_vec(),
    })
    .unwrap();
    assert_eq!(b.recv(WAIT).unwrap().unwrap().body, b"still here");
}

#[test]
fn a_connection_nobody_answers_fails_within_the_connect_bound() {
    let net = quick();
    // A port nobody listens on: refused at once.
    let raw = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = raw.local_addr().unwrap().to_string();
    drop(raw);
    assert!(matches!(
        net.connect(&addr),
        Err(TransportError::Connect(..))
    ));
}

#[test]
fn a_malformed_frame_drops_only_its_own_connection() {
    let net = TcpTransport::new().unwrap();
    let l = net.listen("127.0.0.1:0").unwrap();
    let good = net.connect(&l.local_addr()).unwrap();
    let good_end = l.accept(WAIT).unwrap().unwrap();
    let mut bad = std::net::TcpStream::connect(l.local_addr()).unwrap();
    let bad_end = l.accept(WAIT).unwrap().unwrap();
    bad.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    match bad_end.recv(WAIT) {
        Err(TransportError::Malformed(..)) => {}
        other => panic!("expected a malformed frame, got {other:?}"),
    }
    assert!(bad_end.is_closed());
    // The server end closed the connection: the raw peer reads its end.
    bad.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut buf = [0u8; 64];
    let mut n = bad.read(&mut buf).unwrap_or(0);
    while n > 0 && n == frame::HEADER {
        n = bad.read(&mut buf).unwrap_or(0); // heartbeats before the close
    }
    assert_eq!(n, 0);
    // The other link is untouched.
    good.send(Message {
        id: 9,
        body: b"fine".to_vec(),
    })
    .unwrap();
    assert_eq!(good_end.recv(WAIT).unwrap().unwrap().body, b"fine");
    // And the listener still accepts.
    let again = net.connect(&l.local_addr()).unwrap();
    let again_end = l.accept(WAIT).unwrap().unwrap();
    again
        .send(Message {
            id: 1,
            body: vec![],
        })
        .unwrap();
    assert_eq!(again_end.recv(WAIT).unwrap().unwrap().id, 1);
}

#[test]
fn an_oversized_header_is_malformed_and_too_large_sends_are_refused() {
    let net = TcpTransport::new().unwrap();
    let l = net.listen("127.0.0.1:0").unwrap();
    let mut raw = std::net::TcpStream::connect(l.local_addr()).unwrap();
    let end = l.accept(WAIT).unwrap().unwrap();
    let mut h = Vec::new();
    frame::encode_heartbeat(&mut h);
    h[2] = 0;
    h[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
    raw.write_all(&h).unwrap();
    assert!(matches!(end.recv(WAIT), Err(TransportError::Malformed(..))));
    let (a, _b, _l2) = pair(&net);
    assert!(matches!(
        a.send(Message {
            id: 0,
            body: vec![0; frame::MAX_BODY + 1]
        }),
        Err(TransportError::TooLarge(_))
    ));
}
