//! [`Transport`] over TCP, on a tokio runtime.
//!
//! One network thread per `TcpTransport` runs a current-thread tokio
//! runtime: it connects, accepts, and runs one writer task per link.
//!
//! ```text
//!  Link::send ──append──▶ outbox ──try_write now, from the caller──▶ socket
//!                            └─(socket full)──▶ writer task flushes it all
//!  socket ──read by the caller of Link::recv (ppoll to sleep)──▶ frames
//! ```
//!
//! Sending: a message is appended to the link's *outbox*; if the outbox
//! was empty the calling thread writes it at once (non-blocking), so a
//! lone message costs no hand-over to another thread. Whatever the socket
//! does not take stays in the outbox, the writer task is told, and every
//! message sent meanwhile is appended behind it: they leave together in the
//! task's next write (batching under load). [`Link::send_all`] appends a
//! whole batch before writing: one write for many small messages. With
//! nothing written for a quarter of `dead_after` the writer task sends a
//! heartbeat.
//!
//! Receiving: the thread in [`Link::recv`] reads the socket itself and
//! sleeps in `ppoll` (one wake-up per message, as a blocking `read`); the
//! network thread's reactor watches the socket only for room to write, so
//! it is not woken by what arrives. It
//! ends the link on end of stream, an error, a malformed header or
//! `dead_after` of silence; a failed write ends it too. Either way the
//! socket is shut down and the link's `closed` flag is set, which every
//! call checks first.

use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc as std_mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

use crate::frame::{self, Kind, HEADER};
use crate::{Link, LinkOptions, Listener, Message, Transport, TransportError};

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
                        let link = got.and_then(|(s, peer)| start_link(&handle, s, peer.to_string(), options));
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
        )?))
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
    /// The socket, registered with the network thread's reactor for
    /// *writability only*: a reactor that also watched for input would wake
    /// the network thread for every message received, a second wake-up
    /// beside the reader's and a CPU taken from it on a small machine.
    /// Writes work from any thread (the socket is non-blocking).
    wr: AsyncFd<std::net::TcpStream>,
    /// Encoded frames not written yet, in order. Whoever finds it empty
    /// writes; whoever leaves bytes in it tells the writer task (`flush`).
    outbox: Mutex<Vec<u8>>,
    flush: Notify,
    /// Write system calls so far (heartbeats are due only on idle links).
    writes: AtomicU64,
    /// The peer's silence is excused ([`Link::hold_silence`]).
    silence_held: AtomicBool,
    /// Bumped when the hold is released: the reader counts the silence
    /// bound from then.
    silence_released: AtomicU64,
}

impl Shared {
    fn end(&self, why: String) {
        let mut w = self.why.lock().unwrap_or_else(|e| e.into_inner());
        if w.is_none() {
            *w = Some(why);
        }
        drop(w);
        if !self.closed.swap(true, Ordering::AcqRel) {
            // The peer sees the end now, not when the last handle goes.
            let _ = socket2::SockRef::from(self.wr.get_ref()).shutdown(std::net::Shutdown::Both);
        }
        self.stop.notify_waiters();
        // A task not waiting yet still sees the stop (stored permit).
        self.stop.notify_one();
    }

    /// Write as much of `out` as the socket takes now, without waiting.
    /// Hot path (every message of a lone caller).
    fn write_now(&self, out: &mut Vec<u8>) -> Result<(), TransportError> {
        while !out.is_empty() {
            match (&mut self.wr.get_ref()).write(out) {
                Ok(0) => {
                    self.end(format!("write to {}: closed", self.peer));
                    return Err(TransportError::Closed(self.peer.clone()));
                }
                Ok(n) => {
                    self.writes.fetch_add(1, Ordering::Relaxed);
                    out.drain(..n);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.end(format!("write to {}: {e}", self.peer));
                    return Err(TransportError::Closed(self.peer.clone()));
                }
            }
        }
        Ok(())
    }

    /// Append `msgs` to the outbox and write at once if nothing was
    /// waiting; otherwise (or for what the socket did not take) the writer
    /// task flushes.
    fn enqueue<'a>(&self, msgs: impl Iterator<Item = &'a Message>) -> Result<(), TransportError> {
        let mut out = self.outbox.lock().unwrap_or_else(|e| e.into_inner());
        let was_empty = out.is_empty();
        for m in msgs {
            frame::encode(m, &mut out);
        }
        if was_empty {
            self.write_now(&mut out)?;
            if !out.is_empty() {
                self.flush.notify_one();
            }
        }
        Ok(())
    }
}

pub struct TcpLink {
    reader: Mutex<Reader>,
    shared: Arc<Shared>,
}

fn start_link(
    rt: &tokio::runtime::Handle,
    stream: TcpStream,
    peer: String,
    options: LinkOptions,
) -> std::io::Result<TcpLink> {
    let _ = stream.set_nodelay(true);
    // `Reader` reads the socket directly; the reactor only waits for room
    // to write (see `Shared::wr`).
    let _in_runtime = rt.enter();
    // SAFETY: the `TcpStream` owns its descriptor and is never replaced or
    // closed while the `AsyncFd` holds it (it closes when the `AsyncFd`
    // drops), so the registered descriptor stays this socket.
    let wr = unsafe { AsyncFd::register_with_interest(stream.into_std()?, Interest::WRITABLE) }
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    let shared = Arc::new(Shared {
        peer,
        closed: AtomicBool::new(false),
        why: Mutex::new(None),
        stop: Notify::new(),
        wr,
        outbox: Mutex::new(Vec::with_capacity(64 * 1024)),
        flush: Notify::new(),
        writes: AtomicU64::new(0),
        silence_held: AtomicBool::new(false),
        silence_released: AtomicU64::new(0),
    });
    rt.spawn(write_task(shared.clone(), options.dead_after / 4));
    Ok(TcpLink {
        reader: Mutex::new(Reader {
            buf: Vec::with_capacity(64 * 1024),
            start: 0,
            chunk: vec![0; 64 * 1024].into_boxed_slice(),
            last_heard: Instant::now(),
            dead_after: options.dead_after,
            releases_seen: 0,
        }),
        shared,
    })
}

/// The receiving side of a link, used by the thread in [`Link::recv`]
/// itself: it reads the socket and waits in `ppoll`, so a message reaches
/// its consumer with one wake-up, as in a plain blocking `read`. (The
/// reads bypass tokio: no task ever reads this socket.)
struct Reader {
    /// Bytes read and not yet handed out; a frame starts at `start`.
    buf: Vec<u8>,
    start: usize,
    /// What one `read` fills, kept between reads: zeroing 64 KiB for every
    /// read (most of which find nothing or a few dozen bytes) cost more
    /// than the read itself.
    chunk: Box<[u8]>,
    last_heard: Instant,
    dead_after: Duration,
    /// `Shared::silence_released` when last looked at.
    releases_seen: u64,
}

impl Reader {
    /// A whole frame at the front of `buf`, if there is one.
    fn take_frame(&mut self) -> Result<Option<(frame::Header, Vec<u8>)>, String> {
        let avail = &self.buf[self.start..];
        if avail.len() < HEADER {
            return Ok(None);
        }
        let header = frame::decode_header(avail[..HEADER].try_into().expect("16 bytes"))?;
        if avail.len() < HEADER + header.len {
            return Ok(None);
        }
        let body = avail[HEADER..HEADER + header.len].to_vec();
        self.start += HEADER + header.len;
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        }
        Ok(Some((header, body)))
    }

    /// Read what the socket has now; `Ok(false)` if nothing was there.
    fn fill(&mut self, shared: &Shared) -> Result<bool, TransportError> {
        if self.start > 0 && self.start * 2 > self.buf.len() {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        let sock = socket2::SockRef::from(shared.wr.get_ref());
        loop {
            match (&*sock).read(&mut self.chunk) {
                Ok(0) => return Err(TransportError::Closed(shared.peer.clone())),
                Ok(n) => {
                    self.buf.extend_from_slice(&self.chunk[..n]);
                    self.last_heard = Instant::now();
                    return Ok(true);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return Err(TransportError::Closed(shared.peer.clone())),
            }
        }
    }

    /// The next data message, reading and waiting as needed until
    /// `deadline` (`None`: no deadline; the silence bound still holds).
    fn next(
        &mut self,
        shared: &Shared,
        deadline: Option<Instant>,
    ) -> Result<Option<Message>, TransportError> {
        loop {
            if shared.closed.load(Ordering::Acquire) {
                return Err(TransportError::Closed(shared.peer.clone()));
            }
            match self.take_frame() {
                Ok(Some((h, _))) if h.kind == Kind::Heartbeat => continue,
                Ok(Some((h, body))) => return Ok(Some(Message { id: h.id, body })),
                Ok(None) => {}
                Err(why) => return Err(TransportError::Malformed(shared.peer.clone(), why)),
            }
            if self.fill(shared)? {
                continue;
            }
            let now = Instant::now();
            let released = shared.silence_released.load(Ordering::Acquire);
            if shared.silence_held.load(Ordering::Acquire) || released != self.releases_seen {
                // Excused, or excused until just now: silent from now on.
                self.last_heard = now;
                self.releases_seen = released;
            }
            let silent_at = self.last_heard + self.dead_after;
            if now >= silent_at {
                return Err(TransportError::Silent(shared.peer.clone(), self.dead_after));
            }
            let until = match deadline {
                Some(d) if d <= now => return Ok(None),
                Some(d) => d.min(silent_at),
                None => silent_at,
            };
            wait_readable(shared, until - now);
        }
    }
}

/// Sleep until the socket is readable (or hung up) or `limit` passed.
fn wait_readable(shared: &Shared, limit: Duration) {
    use std::os::fd::AsRawFd;
    let mut p = libc::pollfd {
        fd: shared.wr.get_ref().as_raw_fd(),
        events: libc::POLLIN | libc::POLLRDHUP,
        revents: 0,
    };
    let ts = libc::timespec {
        tv_sec: limit.as_secs() as libc::time_t,
        tv_nsec: limit.subsec_nanos() as libc::c_long,
    };
    // SAFETY: one pollfd and one timespec on this stack, valid for the
    // call; no signal mask is passed.
    unsafe { libc::ppoll(&mut p, 1, &ts, std::ptr::null()) };
}

/// Flushes what senders left in the outbox when the socket was full, and
/// sends heartbeats on an idle link.
async fn write_task(shared: Arc<Shared>, heartbeat: Duration) {
    let mut writes_seen = u64::MAX;
    while !shared.closed.load(Ordering::Acquire) {
        tokio::select! {
            _ = shared.flush.notified() => {}
            _ = tokio::time::sleep(heartbeat) => {
                let writes = shared.writes.load(Ordering::Relaxed);
                if writes == writes_seen {
                    let mut out = shared.outbox.lock().unwrap_or_else(|e| e.into_inner());
                    if out.is_empty() {
                        frame::encode_heartbeat(&mut out);
                    }
                }
                writes_seen = writes;
            }
            _ = shared.stop.notified() => break,
        }
        // Flush: write whatever is there; wait for room while the socket
        // is full (senders keep appending behind: one write takes them all).
        loop {
            {
                let mut out = shared.outbox.lock().unwrap_or_else(|e| e.into_inner());
                if out.is_empty() {
                    break;
                }
                if shared.write_now(&mut out).is_err() {
                    return;
                }
                if out.is_empty() {
                    break;
                }
            }
            tokio::select! {
                r = shared.wr.writable() => match r {
                    // Forget the readiness before the next try: a write that
                    // then finds the socket full waits for the next edge.
                    Ok(mut ready) => ready.clear_ready(),
                    Err(e) => {
                        shared.end(format!("write to {}: {e}", shared.peer));
                        return;
                    }
                },
                _ = shared.stop.notified() => return,
            }
        }
    }
    shared.end(format!("link to {} closed", shared.peer));
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
        self.shared.enqueue(std::iter::once(&msg))
    }

    fn send_all(&self, msgs: &[Message]) -> Result<(), TransportError> {
        if let Some(m) = msgs.iter().find(|m| m.body.len() > frame::MAX_BODY) {
            return Err(TransportError::TooLarge(m.body.len()));
        }
        if self.is_closed() {
            return Err(self.closed_error());
        }
        self.shared.enqueue(msgs.iter())
    }

    fn recv(&self, timeout: Option<Duration>) -> Result<Option<Message>, TransportError> {
        let mut reader = self.reader.lock().unwrap_or_else(|e| e.into_inner());
        let deadline = timeout.map(|t| Instant::now() + t);
        match reader.next(&self.shared, deadline) {
            Ok(m) => Ok(m),
            Err(TransportError::Closed(_)) => {
                self.shared
                    .end(format!("link to {} closed", self.shared.peer));
                Err(self.closed_error())
            }
            Err(e) => {
                self.shared.end(e.to_string());
                Err(e)
            }
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

    fn hold_silence(&self, hold: bool) {
        let was = self.shared.silence_held.swap(hold, Ordering::AcqRel);
        if was && !hold {
            self.shared.silence_released.fetch_add(1, Ordering::AcqRel);
        }
    }
}

impl Drop for TcpLink {
    fn drop(&mut self) {
        self.close();
    }
}

#[cfg(test)]
mod tests;
