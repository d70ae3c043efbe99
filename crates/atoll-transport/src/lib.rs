//! Messages between hosts (fos §3.2, §4.2: a *proxy server* on each
//! machine carries messages whose destination is on another machine).
//!
//! Layers, bottom up:
//!
//! * [`frame`] — the bytes on the wire: a 16-byte header (magic, kind,
//!   length, request id) and the body. Anything else is a malformed frame.
//! * [`tcp`] — [`TcpTransport`], the first implementation: one TCP
//!   connection per peer, driven by a tokio runtime on one network thread.
//!   A sender writes at once from its own thread when nothing is waiting;
//!   messages sent while the socket is full, and every batch given to
//!   [`Link::send_all`], leave in one write; a reader task hands whole
//!   frames to whoever waits in [`Link::recv`].
//! * this file — the [`Transport`] trait the proxies (`atoll node`) are
//!   written against, so that another fabric (RDMA, say) can be added
//!   without touching them or any server.
//!
//! The API is synchronous on purpose: its callers are threads that also
//! wait on shared-memory rings, which an async runtime cannot watch. A
//! [`Link`] is safe to use from many threads at once.
//!
//! Failure: a link never hangs. A peer that closes or resets the
//! connection, or stays silent for longer than [`LinkOptions::dead_after`]
//! (each side sends a heartbeat when it has had nothing to say for a
//! quarter of that), ends the link: every later `send` and `recv` fails
//! with a [`TransportError`]. A malformed frame ends its own link and no
//! other.
//!
//! ```
//! use atoll_transport::{Message, TcpTransport, Transport};
//! use std::time::Duration;
//!
//! let net = TcpTransport::new().unwrap();
//! let listener = net.listen("127.0.0.1:0").unwrap();
//! let client = net.connect(&listener.local_addr()).unwrap();
//! let server = listener.accept(Some(Duration::from_secs(5))).unwrap().unwrap();
//! client.send(Message { id: 7, body: b"ping".to_vec() }).unwrap();
//! let m = server.recv(Some(Duration::from_secs(5))).unwrap().unwrap();
//! assert_eq!((m.id, &m.body[..]), (7, &b"ping"[..]));
//! ```

pub mod frame;
pub mod tcp;

use std::time::Duration;

pub use tcp::TcpTransport;

/// One message between two hosts. `id` is the sender's request id, kept
/// unchanged end to end so that a reply can name the request it answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    pub id: u64,
    pub body: Vec<u8>,
}

#[derive(thiserror::Error, Debug)]
pub enum TransportError {
    #[error("peer {0} closed the connection")]
    Closed(String),
    #[error("peer {0} said nothing for {1:?}")]
    Silent(String, Duration),
    #[error("malformed frame from {0}: {1}")]
    Malformed(String, String),
    #[error("cannot reach {0}: {1}")]
    Connect(String, String),
    #[error("network: {0}")]
    Io(#[from] std::io::Error),
    #[error("message of {0} bytes is larger than {max}", max = frame::MAX_BODY)]
    TooLarge(usize),
}

/// Timing of a link.
#[derive(Clone, Copy, Debug)]
pub struct LinkOptions {
    /// A peer that sends nothing (not even a heartbeat) for this long is
    /// taken for dead.
    pub dead_after: Duration,
    /// How long `connect` tries before it gives up.
    pub connect_timeout: Duration,
}

impl Default for LinkOptions {
    fn default() -> Self {
        LinkOptions {
            dead_after: Duration::from_secs(3),
            connect_timeout: Duration::from_secs(3),
        }
    }
}

/// A fabric that joins hosts: the extension point for other transports.
pub trait Transport: Send + Sync {
    /// Accept links from peers at `addr` (`host:port`; port 0 picks one).
    fn listen(&self, addr: &str) -> Result<Box<dyn Listener>, TransportError>;
    /// Open a link to the peer listening at `addr`.
    fn connect(&self, addr: &str) -> Result<Box<dyn Link>, TransportError>;
}

/// The accepting end of a transport.
pub trait Listener: Send + Sync {
    /// The next link a peer opened; `None` when `timeout` passed first.
    fn accept(&self, timeout: Option<Duration>) -> Result<Option<Box<dyn Link>>, TransportError>;
    /// The address peers connect to.
    fn local_addr(&self) -> String;
}

/// One connection to one peer, carrying [`Message`]s both ways, in order.
pub trait Link: Send + Sync {
    /// Queue `msg` for the peer; never waits for the network. Messages
    /// queued while the connection is backed up go out together.
    fn send(&self, msg: Message) -> Result<(), TransportError>;
    /// Queue `msgs` in order as one batch: an implementation writes them
    /// together (one write for many small messages).
    fn send_all(&self, msgs: &[Message]) -> Result<(), TransportError> {
        for m in msgs {
            self.send(m.clone())?;
        }
        Ok(())
    }
    /// The next message; `Ok(None)` when `timeout` passed first.
    fn recv(&self, timeout: Option<Duration>) -> Result<Option<Message>, TransportError>;
    /// End the link; the peer sees it closed.
    fn close(&self);
    /// The peer's address, for messages.
    fn peer(&self) -> String;
    /// Has the link ended (closed by either side, or the peer is dead)?
    fn is_closed(&self) -> bool;
    /// While `hold` is true, the peer's silence does not end the link: its
    /// process is known to be stopped (job control, reported by another
    /// link), so it sends no heartbeat, yet it is not dead. Releasing the
    /// hold gives the peer a whole silence bound again from then. An end
    /// of stream or a reset still ends the link.
    fn hold_silence(&self, hold: bool) {
        let _ = hold;
    }
}
