//! The message-passing variant with server threads, client threads and a
//! root exchanging messages over channels.

use super::*;

/// Counter operations as they travel in messages.
#[derive(Serialize, Deserialize)]
enum Op {
    Add(u64),
    Value,
}

fn op(o: &Op) -> Vec<u8> {
    postcard::to_allocvec(o).unwrap()
}

fn value(reply: &[u8]) -> u64 {
    postcard::from_bytes(reply).unwrap()
}

/// `plain`: one number. `log`: every add kept. `opaque`: exports nothing
/// the others import.
struct Counters;

struct Plain(u64);
struct Log(Vec<u64>);
struct Opaque(u64);

impl RemoteRep for Plain {
    fn call(&mut self, o: &[u8]) -> Vec<u8> {
        match postcard::from_bytes(o).unwrap() {
            Op::Add(n) => self.0 += n,
            Op::Value => {}
        }
        postcard::to_allocvec(&self.0).unwrap()
    }
    fn export_formats(&self) -> Vec<String> {
        vec!["total".into()]
    }
    fn export(&self, f: &str) -> Option<Vec<u8>> {
        (f == "total").then(|| postcard::to_allocvec(&self.0).unwrap())
    }
}

impl RemoteRep for Log {
    fn call(&mut self, o: &[u8]) -> Vec<u8> {
        if let Op::Add(n) = postcard::from_bytes(o).unwrap() {
            self.0.push(n);
        }
        postcard::to_allocvec(&self.0.iter().sum::<u64>()).unwrap()
    }
    fn export_formats(&self) -> Vec<String> {
        vec!["log".into(), "total".into()]
    }
    fn export(&self, f: &str) -> Option<Vec<u8>> {
        match f {
            "log" => Some(postcard::to_allocvec(&self.0).unwrap()),
            "total" => Some(postcard::to_allocvec(&self.0.iter().sum::<u64>()).unwrap()),
            _ => None,
        }
    }
}

impl RemoteRep for Opaque {
    fn call(&mut self, o: &[u8]) -> Vec<u8> {
        if let Op::Add(n) = postcard::from_bytes(o).unwrap() {
            self.0 += n;
        }
        postcard::to_allocvec(&self.0).unwrap()
    }
    fn export_formats(&self) -> Vec<String> {
        vec!["opaque".into()]
    }
    fn export(&self, _: &str) -> Option<Vec<u8>> {
        None
    }
}

impl RepFactory for Counters {
    fn import_formats(&self, implementation: &str) -> Vec<String> {
        match implementation {
            "log" => vec!["log".into(), "total".into()],
            "plain" => vec!["total".into()],
            _ => vec![],
        }
    }
    fn make(
        &self,
        implementation: &str,
        _server: ServerId,
        state: Option<(&str, &[u8])>,
    ) -> Option<Box<dyn RemoteRep>> {
        match (implementation, state) {
            ("plain", None) => Some(Box::new(Plain(0))),
            ("log", None) => Some(Box::new(Log(Vec::new()))),
            ("opaque", None) => Some(Box::new(Opaque(0))),
            ("plain", Some(("total", b))) => Some(Box::new(Plain(postcard::from_bytes(b).ok()?))),
            ("log", Some(("total", b))) => Some(Box::new(Log(vec![postcard::from_bytes(b).ok()?]))),
            ("log", Some(("log", b))) => Some(Box::new(Log(postcard::from_bytes(b).ok()?))),
            _ => None,
        }
    }
}

struct World {
    transport: Arc<ChannelTransport>,
    servers: Vec<std::thread::JoinHandle<()>>,
}

fn world(n: usize, implementation: &'static str) -> World {
    let (transport, inboxes) = ChannelTransport::new(n);
    let servers = inboxes
        .into_iter()
        .enumerate()
        .map(|(id, inbox)| {
            let t: Arc<dyn RepTransport> = transport.clone();
            std::thread::spawn(move || serve(id, inbox, t, Arc::new(Counters), implementation))
        })
        .collect();
    World { transport, servers }
}

impl World {
    fn root(&self) -> RemoteRoot {
        let n = self.servers.len();
        RemoteRoot::new(
            self.transport.clone(),
            self.transport.endpoint(),
            (0..n).collect(),
            Arc::new(Counters),
        )
    }

    fn stop(self) {
        for s in 0..self.servers.len() {
            self.transport.to_server(s, ToServer::Stop).unwrap();
        }
        for s in self.servers {
            s.join().unwrap();
        }
    }
}

fn total(root: &mut RemoteRoot) -> u64 {
    root.broadcast(&op(&Op::Value))
        .unwrap()
        .iter()
        .map(|r| value(r))
        .sum()
}

#[test]
fn reps_live_in_their_servers_and_the_root_sums_them_by_message() {
    let w = world(3, "plain");
    for s in 0..3 {
        let mut c = RemoteClient::new(w.transport.clone(), w.transport.endpoint(), s);
        for _ in 0..=s {
            c.call(&op(&Op::Add(10))).unwrap();
        }
    }
    let mut root = w.root();
    let parts: Vec<u64> = root
        .broadcast(&op(&Op::Value))
        .unwrap()
        .iter()
        .map(|r| value(r))
        .collect();
    assert_eq!(parts, vec![10, 20, 30]);
    w.stop();
}

#[test]
fn swaps_under_concurrent_calls_lose_and_repeat_nothing() {
    let w = world(3, "plain");
    let adds_per_client = 300u64;
    let clients: Vec<_> = (0..3)
        .map(|s| {
            let mut c = RemoteClient::new(w.transport.clone(), w.transport.endpoint(), s);
            std::thread::spawn(move || {
                for i in 0..adds_per_client {
                    c.call(&op(&Op::Add(i % 7 + 1))).unwrap();
                }
            })
        })
        .collect();
    let mut root = w.root();
    let mut moved = 0;
    for i in 0..20 {
        let to = if i % 2 == 0 { "log" } else { "plain" };
        let r = root.swap(to).unwrap();
        moved += r.forwarded + r.held;
        // plain exports only `total`; log → plain: plain imports only it.
        assert!(r.formats.iter().all(|f| f.as_deref() == Some("total")));
    }
    for c in clients {
        c.join().unwrap();
    }
    let expected: u64 = 3 * (0..adds_per_client).map(|i| i % 7 + 1).sum::<u64>();
    assert_eq!(total(&mut root), expected);
    assert!(moved <= 3 * adds_per_client);
    // log → log negotiates the richer format.
    root.swap("log").unwrap();
    assert_eq!(
        root.swap("log").unwrap().formats,
        vec![Some("log".to_string()); 3]
    );
    assert_eq!(total(&mut root), expected);
    w.stop();
}

#[test]
fn a_swap_without_a_common_format_is_abandoned_and_calls_resume() {
    let w = world(2, "opaque");
    let mut c = RemoteClient::new(w.transport.clone(), w.transport.endpoint(), 1);
    c.call(&op(&Op::Add(5))).unwrap();
    let mut root = w.root();
    assert_eq!(root.swap("plain"), Err(RemoteError::NoCommonFormat(0)));
    c.call(&op(&Op::Add(1))).unwrap();
    assert_eq!(total(&mut root), 6);
    w.stop();
}

#[test]
fn every_message_is_plain_data_for_a_ring_transport() {
    let msgs = vec![
        ToServer::Call {
            reply_to: 3,
            tag: 9,
            op: vec![1, 2],
        },
        ToServer::Transfer {
            reply_to: 1,
            swap: 2,
            implementation: "log".into(),
            format: Some("total".into()),
        },
        ToServer::Stop,
    ];
    for m in msgs {
        let bytes = postcard::to_allocvec(&m).unwrap();
        assert_eq!(postcard::from_bytes::<ToServer>(&bytes).unwrap(), m);
    }
    let m = ToEndpoint::Formats {
        server: 1,
        swap: 4,
        export: vec!["log".into()],
    };
    let bytes = postcard::to_allocvec(&m).unwrap();
    assert_eq!(postcard::from_bytes::<ToEndpoint>(&bytes).unwrap(), m);
}
