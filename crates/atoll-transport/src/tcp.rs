//! [`Transport`] over TCP, on a tokio runtime.
//!
//! One network thread per `TcpTransport` runs a current-thread tokio
//! runtime; every link is two tasks on it:
//!
//! ```text
//!  Link::send ──queue──▶ writer task ──one write per batch──▶ socket
//!  socket ──▶ reader task ──whole frames──▶ queue ──▶ Link::recv
//! ```
//!
//! The writer takes one queued message, then everything else already
//! queued (up to 256 KiB), and writes the lot with one system call, so a
//! burst of small messages costs one segment (`TCP_NODELAY` is set: a lone
//! message leaves at once). With nothing to send for a quarter of
//! `dead_after` it writes a heartbeat. The reader ends the link on end of
//! stream, an error, a malformed header or `dead_after` of silence; the
//! writer ends it when a write fails. Either way both tasks stop, the
//! socket closes, and the link's `closed` flag is set, which every call
//! checks first.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc as std_mpsc, Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Notify};

use crate::frame::{self, Kind, HEADER};
use crate::{Link, LinkOptions, Listener, Message, Transport, TransportError};

/// Most bytes the writer puts into one write.
const BATCH_BYTES: usize = 256 * 1024;

/// TCP links driven by one network thread.
pub struct TcpTransport {
    runtime: tokio::runtime::Handle,
    options: LinkOptions,
    /// Dropping it ends the network thread.
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl TcpTransport {
    pub fn new() -> Result<TcpTransport, TransportError> {
        Self::with_options(LinkOptions::default())
    }

    pub fn with_options(options: LinkOptions) -> Result<TcpTransport, TransportError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let runtime = rt.handle().clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("atoll-net".into())
            .spawn(move || {
                let _ = rt.block_on(stopped);
            })?;
        Ok(TcpTransport {
            runtime,
            options,
            _stop: stop,
        })
    }

    /// Run `fut` on the network thread and wait for its result.
    fn run<T: Send + 'static>(
        &self,
        fut: impl std::future::Future<Output = T> + Send + 'static,
    ) -> Result<T, TransportError> {
        let (tx, rx) = std_mpsc::channel();
        self.runtime.spawn(async move {
            let _ = tx.send(fut.await);
        });
        rx.recv()
            .map_err(|_| TransportError::Io(std::io::Error::other("network thread ended")))
    }
}

impl Transport for TcpTransport {
    fn listen(&self, addr: &str) -> Result<Box<dyn Listener>, TransportError> {
        let a = addr.to_string();
        let listener = self.run(async move { TcpListener::bind(a).await })??;
        let local = listener.local_addr()?.to_string();
        let (tx, rx) = std_mpsc::channel();
        let options = self.options;
        let handle = self.runtime.clone();
        let done = Arc::new(Notify::new());
        let done2 = done.clone();
        self.runtime.spawn(async move {
            loop {
                tokio::select! {
                    got = listener.accept() => {
                        let link = got.map(|(s, peer)| start_link(&handle, s, peer.to_string(), options));
                        if tx.send(link.map_err(TransportError::from)).is_err() {
                            return;
                        }
                    }
                    _ = done2.notified() => return,
                }
            }
        });
        Ok(Box::new(TcpListenerEnd {
            accepted: Mutex::new(rx),
            local,
            done,
        }))
    }

    fn connect(&self, addr: &str) -> Result<Box<dyn Link>, TransportError> {
        let a = addr.to_string();
        let limit = self.options.connect_timeout;
        let stream = self
            .run(async move { tokio::time::timeout(limit, TcpStream::connect(a)).await })?
            .map_err(|_| TransportError::Connect(addr.into(), format!("no answer in {limit:?}")))?
            .map_err(|e| TransportError::Connect(addr.into(), e.to_string()))?;
        Ok(Box::new(start_link(
            &self.runtime,
            stream,
            addr.to_string(),
            self.options,
        )))
    }
}

struct TcpListenerEnd {
    accepted: Mutex<std_mpsc::Receiver<Result<TcpLink, TransportError>>>,
    local: String,
    done: Arc<Notify>,
}

impl Listener for TcpListenerEnd {
    fn accept(&self, timeout: Option<Duration>) -> Result<Option<Box<dyn Link>>, TransportError> {
        let rx = self.accepted.lock().unwrap_or_else(|e| e.into_inner());
        let got = match timeout {
            None => rx.recv().map_err(|_| ()),
            Some(t) => match rx.recv_timeout(t) {
                Err(std_mpsc::RecvTimeoutError::Timeout) => return Ok(None),
                other => other.map_err(|_| ()),
            },
        };
        match got {
            Ok(link) => Ok(Some(Box::new(link?))),
            Err(()) => Err(TransportError::Closed(self.local.clone())),
        }
    }

    fn local_addr(&self) -> String {
        self.local.clone()
    }
}

impl Drop for TcpListenerEnd {
    fn drop(&mut self) {
        self.done.notify_one();
    }
}

/// What both tasks and the link share.
struct Shared {
    peer: String,
    closed: AtomicBool,
    /// Why the link ended, for the calls that find it closed.
    why: Mutex<Option<String>>,
    /// Tells both tasks to stop.
    stop: Notify,
}

impl Shared {
    fn end(&self, why: String) {
        let mut w = self.why.lock().unwrap_or_else(|e| e.into_inner());
        if w.is_none() {
            *w = Some(why);
        }
        self.closed.store(true, Ordering::Release);
        self.stop.notify_waiters();
        // A task not waiting yet still sees the stop (stored permit).
        self.stop.notify_one();
    }
}

pub struct TcpLink {
    out: mpsc::UnboundedSender<Message>,
    incoming: Mutex<std_mpsc::Receiver<Result<Message, TransportError>>>,
    shared: Arc<Shared>,
}

fn start_link(
    rt: &tokio::runtime::Handle,
    stream: TcpStream,
    peer: String,
    options: LinkOptions,
) -> TcpLink {
    let _ = stream.set_nodelay(true);
    let (rd, wr) = stream.into_split();
    let (out, out_rx) = mpsc::unbounded_channel();
    let (in_tx, incoming) = std_mpsc::channel();
    let shared = Arc::new(Shared {
        peer,
        closed: AtomicBool::new(false),
        why: Mutex::new(None),
        stop: Notify::new(),
    });
    rt.spawn(read_task(rd, in_tx, shared.clone(), options.dead_after));
    rt.spawn(write_task(
        wr,
        out_rx,
        shared.clone(),
        options.dead_after / 4,
    ));
    TcpLink {
        out,
        incoming: Mutex::new(incoming),
        shared,
    }
}

async fn read_task(
    mut rd: tokio::net::tcp::OwnedReadHalf,
    tx: std_mpsc::Sender<Result<Message, TransportError>>,
    shared: Arc<Shared>,
    dead_after: Duration,
) {
    let peer = shared.peer.clone();
    let err = loop {
        if shared.closed.load(Ordering::Acquire) {
            break TransportError::Closed(peer.clone());
        }
        let mut h = [0u8; HEADER];
        let got = tokio::select! {
            r = tokio::time::timeout(dead_after, rd.read_exact(&mut h)) => r,
            _ = shared.stop.notified() => break TransportError::Closed(peer.clone()),
        };
        match got {
            Err(_) => break TransportError::Silent(peer.clone(), dead_after),
            Ok(Err(_)) => break TransportError::Closed(peer.clone()),
            Ok(Ok(_)) => {}
        }
        let header = match frame::decode_header(&h) {
            Ok(h) => h,
            Err(why) => break TransportError::Malformed(peer.clone(), why),
        };
        let mut body = vec![0u8; header.len];
        match tokio::time::timeout(dead_after, rd.read_exact(&mut body)).await {
            Err(_) => break TransportError::Silent(peer.clone(), dead_after),
            Ok(Err(_)) => break TransportError::Closed(peer.clone()),
            Ok(Ok(_)) => {}
        }
        if header.kind == Kind::Data
            && tx
                .send(Ok(Message {
                    id: header.id,
                    body,
                }))
                .is_err()
        {
            break TransportError::Closed(peer.clone());
        }
    };
    shared.end(err.to_string());
    let _ = tx.send(Err(err));
}

async fn write_task(
    mut wr: tokio::net::tcp::OwnedWriteHalf,
    mut rx: mpsc::UnboundedReceiver<Message>,
    shared: Arc<Shared>,
    heartbeat: Duration,
) {
    let mut buf = Vec::with_capacity(64 * 1024);
    while !shared.closed.load(Ordering::Acquire) {
        buf.clear();
        tokio::select! {
            m = rx.recv() => match m {
                Some(m) => {
                    take_batch(m, &mut rx, &mut buf);
                }
                None => break,
            },
            _ = tokio::time::sleep(heartbeat) => frame::encode_heartbeat(&mut buf),
            _ = shared.stop.notified() => break,
        }
        if let Err(e) = wr.write_all(&buf).await {
            shared.end(format!("write to {}: {e}", shared.peer));
            break;
        }
    }
    let _ = wr.shutdown().await;
    shared.end(format!("link to {} closed", shared.peer));
}

/// Encode `first` and everything queued behind it (up to [`BATCH_BYTES`])
/// into `buf`: the batch one write sends. Returns how many messages.
fn take_batch(
    first: Message,
    rx: &mut mpsc::UnboundedReceiver<Message>,
    buf: &mut Vec<u8>,
) -> usize {
    frame::encode(&first, buf);
    let mut n = 1;
    while buf.len() < BATCH_BYTES {
        match rx.try_recv() {
            Ok(m) => frame::encode(&m, buf),
            Err(_) => break,
        }
        n += 1;
    }
    n
}

impl TcpLink {
    fn closed_error(&self) -> TransportError {
        let why = self.shared.why.lock().unwrap_or_else(|e| e.into_inner());
        match why.as_deref() {
            Some(w) if w.starts_with("malformed") => {
                TransportError::Malformed(self.shared.peer.clone(), w.to_string())
            }
            _ => TransportError::Closed(self.shared.peer.clone()),
        }
    }
}

impl Link for TcpLink {
    fn send(&self, msg: Message) -> Result<(), TransportError> {
        if msg.body.len() > frame::MAX_BODY {
            return Err(TransportError::TooLarge(msg.body.len()));
        }
        if self.is_closed() {
            return Err(self.closed_error());
        }
        self.out.send(msg).map_err(|_| self.closed_error())
    }

    fn recv(&self, timeout: Option<Duration>) -> Result<Option<Message>, TransportError> {
        let rx = self.incoming.lock().unwrap_or_else(|e| e.into_inner());
        let got = match timeout {
            None => rx.recv().map_err(|_| ()),
            Some(t) => match rx.recv_timeout(t) {
                Err(std_mpsc::RecvTimeoutError::Timeout) => return Ok(None),
                other => other.map_err(|_| ()),
            },
        };
        match got {
            Ok(Ok(m)) => Ok(Some(m)),
            Ok(Err(e)) => Err(e),
            Err(()) => Err(self.closed_error()),
        }
    }

    fn close(&self) {
        self.shared
            .end(format!("link to {} closed here", self.shared.peer));
    }

    fn peer(&self) -> String {
        self.shared.peer.clone()
    }

    fn is_closed(&self) -> bool {
        self.shared.closed.load(Ordering::Acquire)
    }
}

impl Drop for TcpLink {
    fn drop(&mut self) {
        self.close();
    }
}

#[cfg(test)]
mod tests;
