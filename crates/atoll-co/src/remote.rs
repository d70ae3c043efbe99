//! Reps in different address spaces: the message-passing variant.
//!
//! atoll's file servers share no mutable memory (the multikernel rule):
//! a rep that lives in a server is that server's private state, and the
//! root cannot read it, install it or swap it by writing shared tables.
//! Everything the shared-memory domain does with loads and stores becomes
//! a message here:
//!
//! * **Calls**: a client sends [`ToServer::Call`] to the server that holds
//!   its rep (its local server) and waits for the [`ToEndpoint::Reply`].
//!   The server makes its rep on the first call (the miss, handled where
//!   the rep lives) from its [`RepFactory`] — code every server has, as
//!   every process runs the same binary.
//! * **Root↔rep traffic**: the root ([`RemoteRoot`]) reaches the reps by
//!   sending them calls ([`RemoteRoot::broadcast`]), e.g. to sum a
//!   distributed counter.
//! * **Hot-swap** (K42 ch. 6), one round of messages per phase:
//!   *Forward* — each server starts counting the calls it applies to the
//!   old rep; a server runs one message at a time, so a call that began
//!   before has ended by the time the server answers. *Block* — each server
//!   holds calls that arrive from now on, in order, and answers at once
//!   (nothing runs between messages: no tracked calls to wait for).
//!   *Transfer* — each server lists its rep's export formats; the root
//!   [`negotiate_by`]s against the new implementation's import list; each
//!   server exports its own rep's state and builds the new rep from it, in
//!   parallel, as K42's per-processor worker threads do. *Complete* — each
//!   server switches to the new rep, drops the old one (nothing shared, so
//!   no quiescence is needed) and applies the held calls. If any server
//!   fails to export or import, the root sends *Abort* instead and every
//!   server keeps its old rep.
//!
//! [`RepTransport`] is the extension point: [`ChannelTransport`] moves the
//! messages over `std::sync::mpsc` channels between threads; every message
//! is plain data (`serde`), so a transport over atoll's shared-memory
//! rings only has to encode them (`postcard`).

use std::collections::VecDeque;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use crate::root::negotiate_by;

pub type ServerId = usize;
pub type EndpointId = usize;

/// Messages to a rep server.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ToServer {
    /// Apply `op` (encoded by the interface) to the rep; reply to
    /// `reply_to` with `tag`.
    Call {
        reply_to: EndpointId,
        tag: u64,
        op: Vec<u8>,
    },
    /// Swap phases, each answered to `reply_to`.
    Forward {
        reply_to: EndpointId,
        swap: u64,
    },
    Block {
        reply_to: EndpointId,
        swap: u64,
    },
    Formats {
        reply_to: EndpointId,
        swap: u64,
    },
    /// Export the rep's state in `format` and build a rep of
    /// `implementation` from it (kept aside until `Complete`).
    Transfer {
        reply_to: EndpointId,
        swap: u64,
        implementation: String,
        format: Option<String>,
    },
    Complete {
        reply_to: EndpointId,
        swap: u64,
    },
    Abort {
        reply_to: EndpointId,
        swap: u64,
    },
    Stop,
}

/// Messages to a client or to the root.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ToEndpoint {
    Reply {
        tag: u64,
        reply: Vec<u8>,
    },
    /// A phase is done on `server`: `count` is the calls it forwarded to
    /// the old rep (Forward/Block answers) or replayed (Complete).
    Phase {
        server: ServerId,
        swap: u64,
        count: u64,
    },
    Formats {
        server: ServerId,
        swap: u64,
        export: Vec<String>,
    },
    Transferred {
        server: ServerId,
        swap: u64,
        ok: bool,
    },
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RemoteError {
    #[error("server or endpoint {0} is gone")]
    Disconnected(usize),
    #[error("no state format in common on server {0}")]
    NoCommonFormat(ServerId),
    #[error("server {0} could not move the state")]
    TransferFailed(ServerId),
    #[error("unexpected message {0}")]
    Protocol(String),
}

/// How messages reach servers and endpoints.
pub trait RepTransport: Send + Sync {
    fn to_server(&self, server: ServerId, msg: ToServer) -> Result<(), RemoteError>;
    fn to_endpoint(&self, endpoint: EndpointId, msg: ToEndpoint) -> Result<(), RemoteError>;
}

/// A rep living in one server: private, mutable, never shared.
pub trait RemoteRep: Send {
    fn call(&mut self, op: &[u8]) -> Vec<u8>;
    /// Formats [`RemoteRep::export`] can produce, best first.
    fn export_formats(&self) -> Vec<String>;
    fn export(&self, format: &str) -> Option<Vec<u8>>;
}

/// The implementations a server can make reps of.
pub trait RepFactory: Send + Sync {
    /// Formats reps of `implementation` can be built from, best first.
    fn import_formats(&self, implementation: &str) -> Vec<String>;
    /// A rep of `implementation` for `server`: empty without `state` (a
    /// miss), else built from it (`None` if the state is rejected).
    fn make(
        &self,
        implementation: &str,
        server: ServerId,
        state: Option<(&str, &[u8])>,
    ) -> Option<Box<dyn RemoteRep>>;
}

/// `std::sync::mpsc` channels between threads.
pub struct ChannelTransport {
    servers: Vec<Sender<ToServer>>,
    endpoints: Mutex<Vec<Sender<ToEndpoint>>>,
}

impl ChannelTransport {
    /// A transport to `servers` servers, and each server's inbox.
    pub fn new(servers: usize) -> (Arc<ChannelTransport>, Vec<Receiver<ToServer>>) {
        let (txs, rxs) = (0..servers).map(|_| mpsc::channel()).unzip();
        let t = ChannelTransport {
            servers: txs,
            endpoints: Mutex::new(Vec::new()),
        };
        (Arc::new(t), rxs)
    }

    /// A new endpoint (a client or a root) and its inbox.
    pub fn endpoint(&self) -> (EndpointId, Receiver<ToEndpoint>) {
        let (tx, rx) = mpsc::channel();
        let mut e = self.endpoints.lock().unwrap_or_else(|p| p.into_inner());
        e.push(tx);
        (e.len() - 1, rx)
    }
}

impl RepTransport for ChannelTransport {
    fn to_server(&self, server: ServerId, msg: ToServer) -> Result<(), RemoteError> {
        let tx = self
            .servers
            .get(server)
            .ok_or(RemoteError::Disconnected(server))?;
        tx.send(msg).map_err(|_| RemoteError::Disconnected(server))
    }
    fn to_endpoint(&self, endpoint: EndpointId, msg: ToEndpoint) -> Result<(), RemoteError> {
        let e = self.endpoints.lock().unwrap_or_else(|p| p.into_inner());
        let tx = e.get(endpoint).ok_or(RemoteError::Disconnected(endpoint))?;
        tx.send(msg)
            .map_err(|_| RemoteError::Disconnected(endpoint))
    }
}

/// One server's state for one object: its rep and where a swap stands.
struct ServerRep {
    id: ServerId,
    implementation: String,
    rep: Option<Box<dyn RemoteRep>>,
    forwarded: u64,
    blocked: bool,
    held: VecDeque<(EndpointId, u64, Vec<u8>)>,
    next: Option<(String, Box<dyn RemoteRep>)>,
}

/// Run a rep server until [`ToServer::Stop`] or until its inbox closes.
/// The rep is made on the first call with `implementation`.
pub fn serve(
    id: ServerId,
    inbox: Receiver<ToServer>,
    transport: Arc<dyn RepTransport>,
    factory: Arc<dyn RepFactory>,
    implementation: &str,
) {
    let mut s = ServerRep {
        id,
        implementation: implementation.to_string(),
        rep: None,
        forwarded: 0,
        blocked: false,
        held: VecDeque::new(),
        next: None,
    };
    while let Ok(msg) = inbox.recv() {
        if msg == ToServer::Stop {
            return;
        }
        // A reply to an endpoint that has gone away is dropped: the
        // server must outlive its clients, never fail because of them.
        let _ = s.handle(msg, &*transport, &*factory);
    }
}

impl ServerRep {
    fn handle(
        &mut self,
        msg: ToServer,
        t: &dyn RepTransport,
        factory: &dyn RepFactory,
    ) -> Result<(), RemoteError> {
        let server = self.id;
        let phase = move |swap, count| ToEndpoint::Phase {
            server,
            swap,
            count,
        };
        match msg {
            ToServer::Call { reply_to, tag, op } if self.blocked => {
                self.held.push_back((reply_to, tag, op));
                Ok(())
            }
            ToServer::Call { reply_to, tag, op } => self.apply(reply_to, tag, &op, t, factory),
            ToServer::Forward { reply_to, swap } => {
                self.forwarded = 0;
                t.to_endpoint(reply_to, phase(swap, 0))
            }
            ToServer::Block { reply_to, swap } => {
                self.blocked = true;
                t.to_endpoint(reply_to, phase(swap, self.forwarded))
            }
            ToServer::Formats { reply_to, swap } => {
                let export = self.rep_or_make(factory).export_formats();
                t.to_endpoint(
                    reply_to,
                    ToEndpoint::Formats {
                        server: self.id,
                        swap,
                        export,
                    },
                )
            }
            ToServer::Transfer {
                reply_to,
                swap,
                implementation,
                format,
            } => {
                let rep = self.rep_or_make(factory);
                let next = match format {
                    None => factory.make(&implementation, self.id, None),
                    Some(f) => rep
                        .export(&f)
                        .and_then(|st| factory.make(&implementation, self.id, Some((&f, &st)))),
                };
                let ok = next.is_some();
                self.next = next.map(|r| (implementation, r));
                let server = self.id;
                t.to_endpoint(reply_to, ToEndpoint::Transferred { server, swap, ok })
            }
            ToServer::Complete { reply_to, swap } => {
                if let Some((implementation, rep)) = self.next.take() {
                    self.implementation = implementation;
                    self.rep = Some(rep);
                }
                self.resume(reply_to, swap, t, factory)
            }
            ToServer::Abort { reply_to, swap } => {
                self.next = None;
                self.resume(reply_to, swap, t, factory)
            }
            ToServer::Stop => Ok(()),
        }
    }

    /// The server-side miss: make the rep on first use.
    fn rep_or_make(&mut self, factory: &dyn RepFactory) -> &mut Box<dyn RemoteRep> {
        let (implementation, id) = (&self.implementation, self.id);
        self.rep.get_or_insert_with(|| {
            factory
                .make(implementation, id, None)
                .unwrap_or_else(|| panic!("no implementation {implementation:?}"))
        })
    }

    fn apply(
        &mut self,
        reply_to: EndpointId,
        tag: u64,
        op: &[u8],
        t: &dyn RepTransport,
        factory: &dyn RepFactory,
    ) -> Result<(), RemoteError> {
        let reply = self.rep_or_make(factory).call(op);
        self.forwarded += 1;
        t.to_endpoint(reply_to, ToEndpoint::Reply { tag, reply })
    }

    /// Leave the Block phase: replay the held calls in arrival order.
    fn resume(
        &mut self,
        reply_to: EndpointId,
        swap: u64,
        t: &dyn RepTransport,
        factory: &dyn RepFactory,
    ) -> Result<(), RemoteError> {
        self.blocked = false;
        let replayed = self.held.len() as u64;
        while let Some((to, tag, op)) = self.held.pop_front() {
            let _ = self.apply(to, tag, &op, t, factory);
        }
        let server = self.id;
        t.to_endpoint(
            reply_to,
            ToEndpoint::Phase {
                server,
                swap,
                count: replayed,
            },
        )
    }
}

/// A client of one server (the one holding its rep).
pub struct RemoteClient {
    transport: Arc<dyn RepTransport>,
    endpoint: EndpointId,
    inbox: Receiver<ToEndpoint>,
    server: ServerId,
    next_tag: u64,
}

impl RemoteClient {
    pub fn new(
        transport: Arc<dyn RepTransport>,
        (endpoint, inbox): (EndpointId, Receiver<ToEndpoint>),
        server: ServerId,
    ) -> RemoteClient {
        RemoteClient {
            transport,
            endpoint,
            inbox,
            server,
            next_tag: 0,
        }
    }

    /// Apply `op` on the local server's rep and return its reply.
    pub fn call(&mut self, op: &[u8]) -> Result<Vec<u8>, RemoteError> {
        self.next_tag += 1;
        let tag = self.next_tag;
        let msg = ToServer::Call {
            reply_to: self.endpoint,
            tag,
            op: op.to_vec(),
        };
        self.transport.to_server(self.server, msg)?;
        match self.inbox.recv() {
            Ok(ToEndpoint::Reply { tag: t, reply }) if t == tag => Ok(reply),
            Ok(other) => Err(RemoteError::Protocol(format!("{other:?}"))),
            Err(_) => Err(RemoteError::Disconnected(self.server)),
        }
    }
}

/// What a remote swap did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RemoteSwapReport {
    /// Calls applied to the old reps during the Forward phase.
    pub forwarded: u64,
    /// Calls held during Block and applied to the new reps.
    pub held: u64,
    /// The format each server's state moved in.
    pub formats: Vec<Option<String>>,
}

/// The root of an object whose reps live in `servers`: the management
/// side, which only sends and receives messages.
pub struct RemoteRoot {
    client: RemoteClient,
    servers: Vec<ServerId>,
    factory: Arc<dyn RepFactory>,
    swaps: u64,
}

impl RemoteRoot {
    pub fn new(
        transport: Arc<dyn RepTransport>,
        endpoint: (EndpointId, Receiver<ToEndpoint>),
        servers: Vec<ServerId>,
        factory: Arc<dyn RepFactory>,
    ) -> RemoteRoot {
        RemoteRoot {
            client: RemoteClient::new(transport, endpoint, 0),
            servers,
            factory,
            swaps: 0,
        }
    }

    /// Apply `op` on every rep (e.g. read a distributed counter's parts).
    pub fn broadcast(&mut self, op: &[u8]) -> Result<Vec<Vec<u8>>, RemoteError> {
        let servers = self.servers.clone();
        servers
            .into_iter()
            .map(|s| {
                self.client.server = s;
                self.client.call(op)
            })
            .collect()
    }

    /// Send `msg(swap)` to every server and collect one answer from each.
    fn round(
        &mut self,
        swap: u64,
        msg: impl Fn(EndpointId, u64) -> ToServer,
    ) -> Result<Vec<ToEndpoint>, RemoteError> {
        for &s in &self.servers {
            self.client
                .transport
                .to_server(s, msg(self.client.endpoint, swap))?;
        }
        let mut answers: Vec<Option<ToEndpoint>> = vec![None; self.servers.len()];
        for _ in 0..self.servers.len() {
            let m = self
                .client
                .inbox
                .recv()
                .map_err(|_| RemoteError::Disconnected(self.client.endpoint))?;
            let server = match &m {
                ToEndpoint::Phase {
                    server, swap: w, ..
                }
                | ToEndpoint::Formats {
                    server, swap: w, ..
                }
                | ToEndpoint::Transferred {
                    server, swap: w, ..
                } if *w == swap => *server,
                other => return Err(RemoteError::Protocol(format!("{other:?}"))),
            };
            let i = self
                .servers
                .iter()
                .position(|&s| s == server)
                .ok_or_else(|| RemoteError::Protocol(format!("{m:?}")))?;
            answers[i] = Some(m);
        }
        Ok(answers.into_iter().flatten().collect())
    }

    /// Swap every server's rep to `implementation` (K42 ch. 6 phases as
    /// message rounds; module docs).
    pub fn swap(&mut self, implementation: &str) -> Result<RemoteSwapReport, RemoteError> {
        self.swaps += 1;
        let swap = self.swaps;
        let mut report = RemoteSwapReport::default();
        self.round(swap, |reply_to, swap| ToServer::Forward { reply_to, swap })?;
        for a in self.round(swap, |reply_to, swap| ToServer::Block { reply_to, swap })? {
            if let ToEndpoint::Phase { count, .. } = a {
                report.forwarded += count;
            }
        }
        let import = self.factory.import_formats(implementation);
        let mut formats = Vec::new();
        for a in self.round(swap, |reply_to, swap| ToServer::Formats { reply_to, swap })? {
            if let ToEndpoint::Formats { server, export, .. } = a {
                let f = negotiate_by(&export, &import);
                if f.is_none() && !(export.is_empty() && import.is_empty()) {
                    self.round(swap, |reply_to, swap| ToServer::Abort { reply_to, swap })?;
                    return Err(RemoteError::NoCommonFormat(server));
                }
                formats.push((server, f));
            }
        }
        for (server, format) in &formats {
            let msg = ToServer::Transfer {
                reply_to: self.client.endpoint,
                swap,
                implementation: implementation.to_string(),
                format: format.clone(),
            };
            self.client.transport.to_server(*server, msg)?;
        }
        let mut failed = None;
        for _ in 0..formats.len() {
            match self.client.inbox.recv() {
                Ok(ToEndpoint::Transferred { server, ok, .. }) if !ok => failed = Some(server),
                Ok(ToEndpoint::Transferred { .. }) => {}
                other => return Err(RemoteError::Protocol(format!("{other:?}"))),
            }
        }
        if let Some(server) = failed {
            self.round(swap, |reply_to, swap| ToServer::Abort { reply_to, swap })?;
            return Err(RemoteError::TransferFailed(server));
        }
        for a in self.round(swap, |reply_to, swap| ToServer::Complete { reply_to, swap })? {
            if let ToEndpoint::Phase { count, .. } = a {
                report.held += count;
            }
        }
        report.formats = formats.into_iter().map(|(_, f)| f).collect();
        Ok(report)
    }
}

#[cfg(test)]
#[path = "remote_tests.rs"]
mod tests;
