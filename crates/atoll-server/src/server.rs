//! The server loop: one per file server, in a thread of the instance or
//! in a process of its own (`process`).
//!
//! The thread owns a [`FileServer`] and the server ends of its channels
//! (one per session lane). Each round it first drains internal messages
//! from the boot thread ([`Admin`], a std mpsc channel: new channel,
//! session closed, lanes retired, stats, shutdown), then takes at most one
//! request from each channel in round-robin order, so one busy client
//! cannot starve the others. Internal messages come before new requests as
//! in fos §3.4.1 (replies, the highest class there, are never waited for by
//! a server: servers do not message each other). With nothing to do it
//! waits on its doorbell, which clients ring after each request and the
//! boot thread rings after posting an internal message; a server in
//! `PollMode::Spin` (dedicated core) never sleeps and simply polls again,
//! and its clients skip the doorbell. In `PollMode::Adaptive` it spins
//! before sleeping only after serving a request (the next one of that
//! client may follow); after internal messages alone it sleeps at once.
//! Posted requests
//! ([`atoll_proto::POSTED`]) are served without a reply.
//!
//! Defence: a frame that does not decode is answered `EPROTO` if its id can
//! be read (else dropped); a corrupt ring drops that channel; a panic in
//! the request handler is caught (last line of defence) and answered `EIO`.
//! All three are counted in `bad_requests`. A panic may have left the
//! state half changed, so with a journal the server is then rebuilt from
//! it (`rebuild`, fos §3.5), as it is when anything else in the loop dies. A reply that does not fit in
//! the reply ring (client not reading) is kept and retried before that
//! channel is read again, so the server never blocks on a client.

use std::os::fd::OwnedFd;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{Receiver, Sender, TryRecvError};
use std::sync::Arc;

use atoll_msg::{Control, MsgError, PollMode, ServerChannel, SharedRegion};
use atoll_proto::{
    decode, encode, is_posted, Errno, Notice, Reply, ReplyFrame, Request, RequestFrame,
    ServerStats, SessionId, SessionLoad, MAX_FRAME,
};

use crate::fs::{tape, FileServer, FsConfig};
use crate::health::Health;
use crate::journal::{Journal, Kind, Owed};
use crate::store::BlockStore;
use crate::sys::SharedStore;
use crate::trace::{Recorder, Sink, TraceEvent};

/// Internal messages from the boot thread to a server thread.
pub enum Admin {
    /// A session got a lane; this is its channel to this server.
    NewChannel {
        session: SessionId,
        lane: u32,
        channel: Arc<ServerChannel>,
    },
    /// The session's process is gone: release everything it held.
    SessionClosed(SessionId),
    /// After `execve` the session's lanes below `before` are retired.
    RetireLanes {
        session: SessionId,
        before: u32,
    },
    Stats(Sender<ServerStats>),
    /// Client counters a process without a lane reported as it exited
    /// (`BootRequest::Counters`); server 0 only.
    ClientCounters(SessionId, atoll_proto::ClientCounters),
    /// Names of directories (`FileServer::dir_names`), for `atoll status`.
    DirNames(Vec<(u64, Option<u64>)>, Sender<Vec<atoll_proto::DirName>>),
    /// Die at once, as a crash would (`atoll chaos --kill`; `health`).
    Crash,
    /// Scribble on the newest channel's request ring (`atoll chaos
    /// --corrupt-ring`): the defence against hostile clients, on purpose.
    CorruptRing,
    /// Serve nothing for this many milliseconds (`atoll chaos --stall`,
    /// told to a server process; a thread reads the shared `Health`).
    Stall(u64),
    Shutdown,
}

/// Where a server's internal messages come from: the boot thread's
/// channel (a server thread) or the instance's socket (a server process,
/// `process`).
pub enum Inbox {
    Thread(Receiver<Admin>),
    Process(crate::process::Mailbox),
}

impl Inbox {
    fn try_recv(&mut self) -> Result<Admin, TryRecvError> {
        match self {
            Inbox::Thread(rx) => rx.try_recv(),
            Inbox::Process(m) => m.try_recv(),
        }
    }

    /// The server is serving: made afresh, or rebuilt in `Ok(time)`;
    /// `Err`: it could not be rebuilt.
    fn started(&mut self, rebuilt: Result<Option<std::time::Duration>, String>) {
        if let Inbox::Process(m) = self {
            m.started(rebuilt);
        }
    }
}

/// What a server thread needs to start.
pub struct ServerParams {
    pub fs: FsConfig,
    pub poll: PollMode,
    /// Core to pin the thread to.
    pub pin: Option<usize>,
    pub cache_fd: OwnedFd,
    pub control_fd: OwnedFd,
    /// The root of the buffer cache's block pool, shared by all servers
    /// (`fs::blocks`).
    pub pool: std::sync::Arc<atoll_msg::BlockPool>,
    /// Record every request for a message trace (`--trace`).
    pub trace: Option<Arc<Sink>>,
    /// Adaptive directories' policy on (`--adaptive-dirs on`).
    pub adaptive: bool,
    /// Up, stalled or down, shared with the boot thread (`health`).
    pub health: Arc<Health>,
    /// Where the server keeps what it served, to be rebuilt from it
    /// (`journal`); `None`: `--without recovery`.
    pub journal: Option<Arc<Journal>>,
    /// The server is a process of its own (`process`): it says in its
    /// journal which request it is serving, so that a successor can
    /// settle it.
    pub process: bool,
    /// Take over from a server process that died: rebuild from the
    /// journal instead of starting afresh, and serve `adopted`.
    pub resume: bool,
    /// Channels the server starts with (a successor's: the instance
    /// keeps every channel's memfd).
    pub adopted: Vec<Adopted>,
    /// Sessions with no channel here that ended while no server process
    /// heard of it (a successor's: the instance keeps them until the
    /// server confirms, as channels' `closing`).
    pub ended: Vec<SessionId>,
}

/// A channel a successor takes over (`take_over`).
pub struct Adopted {
    pub session: SessionId,
    pub lane: u32,
    pub channel: Arc<ServerChannel>,
    /// Its session ended, and the predecessor may have died before it
    /// served what the session sent last and released what it held.
    pub closing: bool,
}

/// Decode one request frame, serve it, and encode the reply into
/// `reply_buf`. Returns the reply's length, or `None` when no reply goes
/// out: a posted request ([`atoll_proto::POSTED`]), or garbage without a
/// readable id. Hot path.
pub fn serve_frame<S: BlockStore>(
    fs: &mut FileServer<S>,
    session: SessionId,
    bytes: &[u8],
    scratch: &mut Vec<u8>,
    reply_buf: &mut [u8],
) -> Option<usize> {
    serve_frame_kept(fs, None, session, bytes, scratch, reply_buf)
}

/// [`serve_frame`], keeping the request in `journal` (with its tape)
/// before its reply is encoded, unless it changes nothing. A handler that
/// panics leaves the server marked poisoned, to be rebuilt.
pub fn serve_frame_kept<S: BlockStore>(
    fs: &mut FileServer<S>,
    journal: Option<&Journal>,
    session: SessionId,
    bytes: &[u8],
    scratch: &mut Vec<u8>,
    reply_buf: &mut [u8],
) -> Option<usize> {
    let (id, reply) = match decode::<RequestFrame<'_>>(bytes) {
        Ok(frame) if asks_more_than_fits(&frame.req, reply_buf.len()) => {
            // Refused before anything moves (an offset, a pipe's bytes) and
            // never journaled, so a replay cannot serve it either: a client
            // that follows the protocol never asks this (bad input never
            // wins).
            fs.count_bad_request();
            (frame.id, Errno::EINVAL)
        }
        Ok(frame) => {
            let id = frame.id;
            let keep = journal.filter(|_| !crate::fs::changes_nothing(&frame.req));
            if journal.is_some() {
                tape::clear();
            }
            let served = catch_unwind(AssertUnwindSafe(|| {
                use crate::fs::faults::{self, Fault};
                // Calls only: a posted request is never counted (`faults`).
                let fault = if is_posted(id) { None } else { fs.fault_due() };
                match fault {
                    Some(Fault::Panic) => panic!("fault injected by {}", faults::ENV_FAULT_PANIC),
                    Some(Fault::Hang) => faults::hang(),
                    None => {}
                }
                let kill = if is_posted(id) {
                    None
                } else {
                    fs.kill_due(&frame.req)
                };
                fs.set_requester(frame.pid);
                let reply =
                    fs.handle_vouched(session, frame.cred, &frame.vouched, frame.req, scratch);
                fs.set_requester(0);
                if kill == Some(faults::KillPhase::Handled) {
                    faults::kill_self(); // done, not journaled, still in its ring
                }
                if let Some(j) = keep {
                    tape::with_recorded(|t| j.append(Kind::Request, session, t, bytes));
                }
                if kill == Some(faults::KillPhase::Journaled) {
                    faults::kill_self(); // done and journaled, not answered
                }
                if is_posted(id) {
                    return Ok(None); // nobody waits for this reply
                }
                encode(&ReplyFrame { id, reply }, reply_buf).map(|b| Some(b.len()))
            }));
            match served {
                Ok(Ok(n)) => return n,
                Ok(Err(e)) => {
                    tracing::error!("reply to request {id} does not encode: {e}");
                    (id, Errno::EIO)
                }
                Err(_) => {
                    tracing::error!("request {id} panicked the handler");
                    fs.count_bad_request();
                    if journal.is_some() {
                        fs.set_poisoned(tape::with_recorded(|t| t.to_vec()));
                    }
                    (id, Errno::EIO)
                }
            }
        }
        Err(_) => {
            fs.count_bad_request();
            // The id is the frame's first field: answer if it is readable.
            let (id, _) = postcard::take_from_bytes::<u64>(bytes).ok()?;
            (id, Errno::EPROTO)
        }
    };
    if is_posted(id) {
        return None;
    }
    error_reply(id, reply, reply_buf)
}

/// Whether `req` asks for more bytes in its reply than a frame of
/// `frame` bytes carries: a `ReadData` or `PipeRead` over its channel's
/// data call (8 KiB on a small channel, 32 KiB on a large one,
/// [`atoll_msg::RingSize::data_call`]). Served, such a read would move the
/// offset or take the pipe's bytes and then fail to encode its reply.
fn asks_more_than_fits(req: &Request<'_>, frame: usize) -> bool {
    let asked = match *req {
        Request::ReadData { len, .. } | Request::PipeRead { len, .. } => len as usize,
        _ => return false,
    };
    asked > atoll_msg::RingSize::for_frame(frame).data_call()
}

/// Encode the answer `errno` to request `id` into `buf`; its length.
fn error_reply(id: u64, errno: Errno, buf: &mut [u8]) -> Option<usize> {
    let frame = ReplyFrame {
        id,
        reply: Reply::Err(errno),
    };
    encode(&frame, buf).ok().map(|b| b.len())
}

/// Put the directory-cache invalidations the last request caused into the
/// inboxes of the sessions that cached the changed entries (Hare §3.7.2),
/// before that request's reply goes out. Never waits: a full inbox drops
/// the notice and raises the channel's overflow flag, and the client then
/// flushes its whole cache. A session without a channel here (it exited,
/// or its lanes were retired by `execve`) has nothing cached any more.
fn deliver_notices<S: BlockStore>(fs: &mut FileServer<S>, chans: &[Chan], buf: &mut [u8]) -> usize {
    let notices = fs.take_notices();
    let count = notices.len();
    for (session, dir, distributed) in fs.take_adapt_notices() {
        let Ok(bytes) = encode(&Notice::Adapt { dir, distributed }, buf) else {
            continue;
        };
        if let Some(c) = chans.iter().find(|c| c.session == session) {
            let _ = c.ch.notify(bytes);
        }
    }
    for (session, dir, name) in notices {
        let notice = Notice::Invalidate { dir, name: &name };
        let Ok(bytes) = encode(&notice, buf) else {
            continue;
        };
        for c in chans.iter().filter(|c| c.session == session) {
            match c.ch.notify(bytes) {
                Ok(()) | Err(MsgError::Full) => break,
                Err(_) => continue, // closed channel: try another lane
            }
        }
    }
    count
}

/// Put the change notifications the last request caused into their
/// rings, after its invalidations (`deliver_notices`) and before its
/// reply: a watcher reading an event and then looking the name up must
/// not find the old entry in its lookup cache (`tail -F` after `mv x k`
/// would watch the replaced file again). Journaled as the idle loop's
/// retries are. One branch when nothing is pending.
fn deliver_events<S: BlockStore>(fs: &mut FileServer<S>, journal: Option<&Journal>) {
    if fs.has_pending_events() {
        kept(journal, Kind::Flush, SessionId(0), || fs.flush_events());
    }
}

/// Record the request just served (`--trace`).
fn record<S: BlockStore>(
    rec: &mut Recorder,
    fs: &FileServer<S>,
    c: &Chan,
    server: usize,
    request_bytes: usize,
    reply_bytes: usize,
    invalidations: usize,
) {
    let op = fs.last_op();
    rec.push(TraceEvent {
        start_ns: op.start.saturating_duration_since(rec.epoch).as_nanos() as u64,
        dur_ns: op.ns.min(u64::from(u32::MAX)) as u32,
        session: c.session.0,
        lane: c.lane,
        server: server as u16,
        op: op.op,
        request_bytes: request_bytes as u32,
        reply_bytes: reply_bytes as u32,
        ok: op.ok,
        coalesced: op.coalesced,
        invalidations: invalidations.min(u16::MAX as usize) as u16,
    });
}

/// Empty polling rounds of a spinning server between two `sched_yield`s.
const SPIN_ROUNDS_BEFORE_YIELD: u32 = 1 << 12;

struct Chan {
    session: SessionId,
    lane: u32,
    ch: Arc<ServerChannel>,
    /// A reply that did not fit in the reply ring yet; parked in the
    /// channel's memory too (`Chan::park`).
    pending: Option<Vec<u8>>,
    /// Requests served from this channel (for `atoll top`).
    requests: u64,
}

/// The server's statistics plus what only the loop knows: how full its
/// request rings are and how much each session asked of it.
fn stats_with_load<S: BlockStore>(fs: &FileServer<S>, chans: &[Chan]) -> ServerStats {
    let mut st = fs.stats();
    st.channels = chans.len() as u64;
    st.ring_bytes = chans
        .iter()
        .map(|c| u64::from(c.ch.queued_request_bytes()))
        .sum();
    let mut load: std::collections::BTreeMap<u64, SessionLoad> = Default::default();
    for c in chans {
        let e = load.entry(c.session.0).or_default();
        e.requests += c.requests;
    }
    for s in fs.reporting_sessions() {
        load.entry(s.0).or_default();
    }
    for (session, e) in load.iter_mut() {
        e.session = *session;
        (e.dcache_hits, e.dcache_misses, e.traps) = fs.session_reports(SessionId(*session));
        (e.copy_bytes, e.share_bytes) = fs.session_transfers(SessionId(*session));
    }
    st.sessions_load = load.into_values().collect();
    st.hot_dirs = fs.hot_dirs();
    st
}

/// Why the server loop returned.
enum Exit {
    /// `Admin::Shutdown`, or the boot side is gone.
    Shutdown,
    /// A request panicked half way (`FileServer::is_poisoned`).
    Poisoned,
}

/// A server with an empty tree (or the root, on its owner), its share of
/// the block pool and the instance's gauges.
pub(crate) fn fresh_server(
    params: &ServerParams,
    control: &std::rc::Rc<Control>,
) -> std::io::Result<FileServer<SharedStore>> {
    let index = params.fs.index;
    let cache = SharedRegion::map(std::os::fd::AsFd::as_fd(&params.cache_fd))?;
    let rep = atoll_msg::BlockPool::rep(&params.pool, index)
        .ok_or_else(|| std::io::Error::other("server without a share of the block pool"))?;
    let mut cache = crate::fs::Cache::new(rep, SharedStore::new(cache));
    if let Some(j) = params.journal.as_ref().filter(|_| params.process) {
        cache.note_claims_in(j.clone());
    }
    // The instance-wide metadata counts live in the control block
    // (`fs::limits`), shared with the other servers.
    let mut fs = FileServer::with_gauges(params.fs.clone(), cache, control.clone());
    fs.set_adaptive(params.adaptive);
    Ok(fs)
}

/// Do `change` to the server's state and keep it in `journal` as a record
/// of `kind`, with the answers it took from outside (`tape`).
fn kept(journal: Option<&Journal>, kind: Kind, session: SessionId, change: impl FnOnce()) {
    if journal.is_some() {
        tape::clear();
    }
    change();
    if let Some(j) = journal {
        tape::with_recorded(|t| j.append(kind, session, t, b""));
    }
}

/// Run a file server until `Admin::Shutdown` (or the boot side is gone).
/// Returns its final statistics.
pub fn run(mut params: ServerParams, mut admin: Inbox) -> std::io::Result<ServerStats> {
    if let Some(core) = params.pin {
        let mut set = rustix::thread::CpuSet::new();
        set.set(core);
        if let Err(e) = rustix::thread::sched_setaffinity(None, &set) {
            tracing::warn!("server {} not pinned to core {core}: {e}", params.fs.index);
        }
    }
    let index = params.fs.index;
    let control = std::rc::Rc::new(Control::map(std::os::fd::AsFd::as_fd(&params.control_fd))?);
    let adopted = std::mem::take(&mut params.adopted);
    let ended = std::mem::take(&mut params.ended);
    let journal = params.journal.as_deref();
    // What the predecessor owed, read before this server appends
    // anything: whether that request reached the journal is told by the
    // journal's length at its death, not now.
    let owed_at_death = journal.filter(|_| params.resume).and_then(|j| j.owed());
    // A predecessor process killed while a forked child encoded its
    // snapshot: that child must be gone before this server writes the
    // half it writes (`snapshot`).
    if let (true, Some(j)) = (params.process, journal) {
        crate::snapshot::end_stray(j);
    }
    // The reply its replay computes for that request (`rebuilding`).
    let mut owed_answer = None;
    let mut fs = match (journal, params.resume) {
        (Some(j), true) => {
            let t0 = std::time::Instant::now();
            match rebuild_answering(&params, &control, j, owed_at_death) {
                Ok((mut fs, answer)) => {
                    owed_answer = answer;
                    tape::record();
                    // Its predecessor met the injected fault already.
                    fs.forget_planned_fault();
                    admin.started(Ok(Some(t0.elapsed())));
                    Some(fs)
                }
                Err(why) => {
                    admin.started(Err(format!("not rebuilt: {why}")));
                    return Err(std::io::Error::other(why));
                }
            }
        }
        _ => {
            if let Some(j) = journal {
                j.clear();
                tape::record();
            }
            let fs = fresh_server(&params, &control)?;
            if let Some(j) = journal {
                tape::with_recorded(|t| j.append(Kind::Genesis, SessionId(0), t, b""));
            }
            admin.started(Ok(None));
            Some(fs)
        }
    };
    if let Some(j) = &params.journal {
        params.health.set_journal(index, j.clone());
    }
    params.health.started(index);
    // Where this incarnation runs, for clients keeping off its core
    // (client `msgbound`); published before the name moves on.
    control.set_core(index, pinned_core());
    // `/fs/server/<index>` now names this incarnation (fresh, successor
    // process or moved); clients re-bind to it (fos §3.3).
    let generation = control.advance_generation(index);
    let mut chans: Vec<Chan> = Vec::new();
    if let Some(server) = fs.as_mut() {
        // Sizes are published from here on, as this incarnation (none
        // while the journal was replayed: `fs::sizes`).
        server.attach_size_board(control.clone(), generation);
        if params.resume {
            kept(journal, Kind::Reconcile, SessionId(0), || {
                server.reconcile_blocks()
            });
        }
        let owed = (owed_at_death, owed_answer);
        take_over(server, journal, owed, &mut chans, adopted, ended);
    }
    let mut recorder = params.trace.as_ref().map(|s| Recorder::new(s.epoch));
    let mut owed: Option<(usize, u64)> = None;
    let ended = loop {
        let Some(server) = fs.as_mut() else {
            break Err("no server".to_string());
        };
        // Last line of defence, around the whole loop (each request has
        // its own): a server that dies anyway is rebuilt from its journal,
        // or takes only its own clients' calls with it (`health`).
        let served = catch_unwind(AssertUnwindSafe(|| {
            serve(
                &params,
                server,
                &control,
                &mut admin,
                &mut chans,
                &mut recorder,
                &mut owed,
            )
        }));
        let reason = match served {
            Ok(Exit::Shutdown) => break Ok(()),
            Ok(Exit::Poisoned) => "a request panicked half way".to_string(),
            Err(cause) => panic_text(&cause),
        };
        tracing::error!("file server {index} died: {reason}");
        let partial = server
            .take_poisoned()
            .unwrap_or_else(|| tape::with_recorded(|t| t.to_vec()));
        let calls_seen = server.calls_seen();
        // The lost state goes first: it holds this server's share of the
        // block pool, which the rebuilt one takes over.
        fs = None;
        let Some(j) = journal else {
            break Err(reason);
        };
        let t0 = std::time::Instant::now();
        match rebuild(&params, &control, j) {
            Ok(mut rebuilt) => {
                tape::record();
                rebuilt.give_back_taken(&partial);
                rebuilt.set_calls_seen(calls_seen);
                for c in &chans {
                    // It no longer knows who cached what (`track`).
                    c.ch.raise_inbox_overflow();
                }
                if let Some((idx, id)) = owed.take() {
                    // Pieces of a write after one the client counts as
                    // failed must not be written (`fs::chain`).
                    if let Some(s) = chans.get(idx).map(|c| c.session) {
                        kept(journal, Kind::CutChains, s, || rebuilt.cut_chains(s));
                    }
                    answer_eio(&mut chans, idx, id);
                }
                params.health.restarted(index, &reason, t0.elapsed());
                let generation = control.advance_generation(index);
                rebuilt.attach_size_board(control.clone(), generation);
                if let (true, Some(j)) = (params.process, journal) {
                    j.note_rebuild(t0.elapsed().as_micros() as u64);
                }
                tracing::warn!(
                    "file server {index} rebuilt from its journal in {:?}",
                    t0.elapsed()
                );
                fs = Some(rebuilt);
            }
            Err(why) => break Err(format!("{reason}; not rebuilt: {why}")),
        }
    };
    if let (Some(sink), Some(r)) = (&params.trace, recorder) {
        sink.collect(r);
    }
    match ended {
        Ok(()) => {
            // Stopped between requests (a shutdown, a move to another
            // host): the slots it holds must not outlive it, wherever
            // its successor publishes (`fs::sizes`).
            if let Some(f) = fs.as_mut() {
                f.retire_size_board();
            }
            Ok(fs.map(|f| f.stats()).unwrap_or_default())
        }
        Err(reason) => {
            tracing::error!("file server {index} is down: {reason}");
            params.health.mark_down(index, &reason);
            control.set_down(index);
            for c in &chans {
                c.ch.close();
            }
            // Channels posted before the boot thread could see the mark.
            while let Ok(msg) = admin.try_recv() {
                if let Admin::NewChannel { channel, .. } = msg {
                    channel.close();
                }
            }
            Err(std::io::Error::other(format!(
                "file server {index} died: {reason}"
            )))
        }
    }
}

/// What a panic said.
/// The one CPU this thread may run on, if its affinity is one CPU.
fn pinned_core() -> Option<usize> {
    let set = rustix::thread::sched_getaffinity(None).ok()?;
    let mut cpus = (0..rustix::thread::CpuSet::MAX_CPU).filter(|&k| set.is_set(k));
    let first = cpus.next()?;
    cpus.next().is_none().then_some(first)
}

fn panic_text(cause: &Box<dyn std::any::Any + Send>) -> String {
    cause
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| cause.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panic".into())
}

/// The server loop, until `Admin::Shutdown` (or the boot side is gone).
/// Buffers the loop reuses for every request.
struct Bufs {
    scratch: Vec<u8>,
    reply: Vec<u8>,
    notice: Vec<u8>,
}

/// Serve the request at the head of `c` outside a round (a session that
/// ended, a posted frame): its reply, if any, goes nowhere. Whether there
/// was one.
fn serve_left<S: BlockStore>(
    fs: &mut FileServer<S>,
    journal: Option<&Journal>,
    c: &Chan,
    bufs: &mut Bufs,
) -> bool {
    let got = c.ch.try_recv(|bytes| {
        if let Some(j) = journal {
            // Not served twice by a successor (`take_over`).
            let id = postcard::take_from_bytes::<u64>(bytes).map_or(0, |(id, _)| id);
            j.owe(c.session, c.lane, id);
        }
        serve_frame_kept(
            fs,
            journal,
            c.session,
            bytes,
            &mut bufs.scratch,
            &mut bufs.reply[..c.ch.max_frame()],
        )
    });
    if let Some(j) = journal {
        j.settle();
    }
    matches!(got, Ok(Some(_)))
}

/// One internal message from the boot thread (fos §3.4.1: served before
/// any request). `Some(exit)` when the loop must end.
fn on_admin<S: BlockStore>(
    msg: Admin,
    fs: &mut FileServer<S>,
    journal: Option<&Journal>,
    chans: &mut Vec<Chan>,
    bufs: &mut Bufs,
) -> Option<Exit> {
    match msg {
        Admin::NewChannel {
            session,
            lane,
            channel,
        } => {
            kept(journal, Kind::Opened, session, || {
                fs.session_opened(session)
            });
            chans.push(Chan {
                session,
                lane,
                ch: channel,
                pending: None,
                requests: 0,
            });
        }
        Admin::SessionClosed(s) => {
            // Posted attribute changes in ticket order first, of every
            // ring (`posted`): the session's last may have been made after
            // another ring's returned. Posted frames only: no reply.
            posted::drain_with(chans, |chans, j| {
                serve_left(fs, journal, &chans[j], bufs);
                !fs.is_poisoned()
            });
            // What the session sent before it died still happens
            // (e.g. the posted `Adopt` that completes a creation,
            // Hare §3.7.5); replies go nowhere. Bounded: nobody
            // can add to a dead session's rings for long.
            for c in chans.iter().filter(|c| c.session == s) {
                for _ in 0..1024 {
                    if !serve_left(fs, journal, c, bufs) {
                        break;
                    }
                }
            }
            if fs.has_notices() {
                deliver_notices(fs, chans, &mut bufs.notice);
            }
            deliver_events(fs, journal);
            chans.retain(|c| c.session != s);
            kept(journal, Kind::Closed, s, || fs.session_closed(s));
            // Its closes' events (`IN_CLOSE_WRITE`, an inode's end).
            deliver_events(fs, journal);
            if fs.is_poisoned() {
                return Some(Exit::Poisoned);
            }
        }
        Admin::RetireLanes { session, before } => {
            chans.retain(|c| c.session != session || c.lane >= before);
        }
        Admin::Stats(tx) => {
            let _ = tx.send(stats_with_load(fs, chans));
        }
        Admin::ClientCounters(s, k) => fs.client_reported(s, &k),
        Admin::DirNames(dirs, tx) => {
            let _ = tx.send(fs.dir_names(&dirs));
        }
        Admin::Crash => panic!("killed by atoll chaos"),
        Admin::Stall(_) => {} // taken by the loop (`serve`)
        Admin::CorruptRing => {
            if let Some(c) = chans.last() {
                c.ch.corrupt_request_ring();
            }
        }
        Admin::Shutdown => return Some(Exit::Shutdown),
    }
    None
}

/// What one round over the channels did.
#[derive(Default)]
struct Round {
    /// A request was served.
    busy: bool,
    /// Channels that had a request (the load the fleet compares).
    served: u64,
    /// A reply waits for room in its client's ring.
    waiting_on_clients: bool,
}

fn serve<S: BlockStore>(
    params: &ServerParams,
    fs: &mut FileServer<S>,
    control: &Control,
    admin: &mut Inbox,
    chans: &mut Vec<Chan>,
    recorder: &mut Option<Recorder>,
    owed: &mut Option<(usize, u64)>,
) -> Exit {
    let index = params.fs.index;
    let journal = params.journal.as_deref();
    let doorbell = control.doorbell(index);
    let mut bufs = Bufs {
        scratch: Vec::with_capacity(MAX_FRAME),
        // Replies are cut to each channel's own frame when served; notices
        // go to inboxes, whose frames are small on every channel.
        reply: vec![0u8; MAX_FRAME],
        notice: vec![0u8; atoll_msg::Channel::INBOX_MAX_FRAME],
    };
    // A server process forks to encode its snapshots; a server thread
    // (of the multi-threaded instance) encodes them itself (`snapshot`).
    let mut snapshots = crate::snapshot::Schedule::from_env(params.process);
    let mut start = 0usize;
    let mut idle_rounds = 0u32;
    let mut served_last = 0u64;
    // Whether a client request was served since the last wait. A wake for
    // internal messages only (a process attaching, a session ending: every
    // process start brings a few) announces no request, so the server
    // sleeps again at once instead of spinning out the adaptive budget on
    // a core the starting program needs.
    let mut served_since_wait = false;
    // Change notifications after the invalidations (`deliver_events`).
    fs.events_after_notices();
    // Posted attribute changes drained for (`posted`): one less than
    // counted, so that the first request that waits drains what a
    // predecessor left in the rings.
    let mut posted_seen = control.posted_attrs(index).wrapping_sub(1);
    // Ring count at the last look at `admin` (off by one: look at once).
    let mut admin_rings = doorbell.rings().wrapping_sub(1);
    loop {
        // The watchdog's sign of life (`wedge`): a turn of the loop.
        control.beat(index);
        // Servers that joined since (Hare §6.1.1): new directories may be
        // homed on them. One acquire load on a line written only as
        // members join.
        fs.set_members(control.members());
        let stall_ms = params.health.stall_left_ms(index);
        if stall_ms > 0 {
            // Wedged on purpose (`atoll chaos --stall`): serve nothing.
            std::thread::sleep(std::time::Duration::from_millis(stall_ms.min(20)));
            continue;
        }
        // Internal messages first (fos §3.4.1). The boot thread rings the
        // doorbell after posting one, so an unchanged ring count means there
        // is none: a spinning server (whose clients do not ring) then skips
        // the channel's lock-free but not free `try_recv`. It still looks
        // now and then, to notice a boot side that is gone.
        let rings = doorbell.rings();
        // Everything rung up to here is in this turn's polls: say so, for
        // the watchdog (`wedge`: rings never looked at, and no beat).
        doorbell.mark_seen(rings);
        let mut admin_due =
            rings != admin_rings || idle_rounds.is_multiple_of(SPIN_ROUNDS_BEFORE_YIELD);
        admin_rings = rings;
        while admin_due {
            match admin.try_recv() {
                Ok(Admin::Stall(millis)) => params.health.stall(index, millis),
                Ok(msg) => {
                    if let Some(exit) = on_admin(msg, fs, journal, chans, &mut bufs) {
                        return exit;
                    }
                }
                Err(TryRecvError::Disconnected) => return Exit::Shutdown,
                Err(TryRecvError::Empty) => admin_due = false,
            }
        }
        let owing = journal.filter(|_| params.process);
        let round = match serve_round(
            index,
            fs,
            (journal, owing),
            chans,
            start,
            &mut bufs,
            recorder,
            owed,
            (control, &mut posted_seen),
        ) {
            Ok(r) => r,
            Err(exit) => return exit,
        };
        let (busy, served_now, waiting_on_clients) =
            (round.busy, round.served, round.waiting_on_clients);
        if let Some(j) = journal {
            // Between requests: none is half done; a snapshot starts only
            // when every invalidation is delivered too (`snapshot`).
            let quiet = !fs.has_notices();
            snapshots.between_requests(fs, j, index, quiet, &|| doorbell.ring());
        }
        start = start.wrapping_add(1);
        // How many channels had a request this round: the queue the
        // fleet's `shortest-queue` policy compares (`atoll_names`). One
        // relaxed store, only when it changes.
        if served_now != served_last {
            control.publish_load(index, served_now);
            served_last = served_now;
        }
        if busy {
            idle_rounds = 0;
            served_since_wait = true;
        } else if !waiting_on_clients && !fs.has_pending_events() && fs.prezero_one() {
            // Nothing to serve: zero a free block now rather than in the
            // `Write` that will need it, then look at the rings again.
        } else if waiting_on_clients {
            std::thread::yield_now();
        } else if fs.has_pending_events() {
            // A notification ring was locked by its reader for a moment:
            // try again soon rather than sleep (`fs::inotify`).
            kept(journal, Kind::Flush, SessionId(0), || fs.flush_events());
            std::thread::yield_now();
        } else if params.poll == PollMode::Spin {
            // A spinning server never sleeps, so its clients do not ring
            // the doorbell (it would cost them a contended read-modify-write
            // of a line this thread watches): poll the channels again, and
            // give the core away now and then in case it is oversubscribed.
            idle_rounds = idle_rounds.wrapping_add(1);
            if idle_rounds.is_multiple_of(SPIN_ROUNDS_BEFORE_YIELD) {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        } else {
            let mode = match params.poll {
                PollMode::Adaptive if !served_since_wait => PollMode::Block,
                mode => mode,
            };
            doorbell.wait(mode);
            served_since_wait = false;
        }
    }
}

#[path = "rebuild.rs"]
mod rebuilding;
#[cfg(test)]
pub(crate) use rebuilding::rebuild_showing;
pub use rebuilding::{rebuild, rebuild_answering};

#[path = "takeover.rs"]
mod takeover;

#[path = "round.rs"]
mod round;
use round::serve_round;

#[path = "posted.rs"]
mod posted;
#[cfg(test)]
use takeover::settle_owed;
use takeover::{answer_eio, deliver_parked, take_over};

#[cfg(test)]
#[path = "server_tests.rs"]
mod tests;
