//! File servers as processes of their own, and the watchdog that restarts
//! them (fos §3.5: servers as fault domains).
//!
//! A server process is the instance's own binary started again with a
//! hidden subcommand (`atoll __fs-server`, [`child_main`]): a fresh
//! `execve`, never a bare `fork` of the multi-threaded instance. Its stdin
//! is one end of a `SOCK_SEQPACKET` pair; over it the instance sends, as
//! postcard messages ([`ToServer`]), the server's configuration with the
//! memfds it maps (buffer cache, control block, block pool, journal),
//! then every channel's memfd (`SCM_RIGHTS`) and the internal messages
//! the boot thread posts to a server thread (`server::Admin`). Requests
//! never pass through it: they travel in the same shared-memory rings as
//! for a server thread, so the data path is unchanged.
//!
//! The instance keeps, per server, the memfd of every live channel
//! ([`ServerProcess`]). The watchdog thread waits on every server's
//! pidfd; when one exits (crash, `SIGKILL`, `atoll chaos --kill`) it
//! starts a successor on the same core, which rebuilds the server from its
//! journal (`server::rebuild`), maps the same channels and settles the
//! request its predecessor was serving (`server::take_over`). Everything
//! that outlives the dead process lives in memfds the instance owns.
//!
//! A server process exits when its socket closes (the instance is gone)
//! and, in case the instance dies before, on `PR_SET_PDEATHSIG`.

use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;
use std::sync::mpsc::{Receiver, Sender, TryRecvError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use atoll_msg::{BlockPool, PollMode, ServerChannel};
use atoll_proto::{DirName, ServerStats, SessionId};
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use serde::{Deserialize, Serialize};

use crate::fs::FsConfig;
use crate::health::Health;
use crate::hosts::Host;
use crate::journal::Journal;
use crate::server::{Admin, Inbox, ServerParams};

/// The hidden subcommand that runs one file server process.
pub const SUBCOMMAND: &str = "__fs-server";

/// Largest message either way (statistics of many sessions).
const MAX_MESSAGE: usize = 1 << 20;

/// How long the instance waits for a server process to answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a successor may take to rebuild before it counts as failed.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// What the instance tells a server process.
#[derive(Serialize, Deserialize, Debug)]
enum ToServer {
    /// First message. Descriptors: cache, control block, block pool, and
    /// the journal when `journal`.
    Start {
        fs: FsConfig,
        poll: PollMode,
        pin: Option<usize>,
        adaptive: bool,
        journal: bool,
        resume: bool,
        instance_pid: u32,
    },
    /// A channel (its memfd attached); `closing`: its session ended, but
    /// the predecessor may not have finished it (`server::take_over`).
    Channel {
        session: u64,
        lane: u32,
        #[serde(default)]
        closing: bool,
    },
    /// A session with no channel here ended, unconfirmed (`Link::ended`);
    /// sent to a successor before `Begin`.
    Ended(u64),
    /// The channels to take over are all sent: serve.
    Begin,
    SessionClosed(u64),
    RetireLanes {
        session: u64,
        before: u32,
    },
    ClientCounters(u64, atoll_proto::ClientCounters),
    Stats {
        seq: u64,
    },
    DirNames {
        seq: u64,
        dirs: Vec<(u64, Option<u64>)>,
    },
    Stall(u64),
    CorruptRing,
    Shutdown,
}

/// What a server process answers.
#[derive(Serialize, Deserialize, Debug)]
enum FromServer {
    /// Serving: made afresh (`None`) or rebuilt in that many µs; or not.
    Started(Result<Option<u64>, String>),
    Stats {
        seq: u64,
        stats: ServerStats,
    },
    DirNames {
        seq: u64,
        names: Vec<DirName>,
    },
    /// Final statistics, after `Shutdown`.
    Stopped(ServerStats),
    /// The server is down for good (it could not be rebuilt).
    Down(String),
    /// The session ended here: what it sent before is served, what it
    /// held released (so the instance may forget its channels).
    Closed(u64),
}

pub(crate) fn send<T: Serialize>(
    sock: BorrowedFd<'_>,
    msg: &T,
    fds: &[BorrowedFd<'_>],
) -> std::io::Result<()> {
    let bytes = postcard::to_allocvec(msg).map_err(std::io::Error::other)?;
    let mut space =
        vec![MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(fds.len().max(1)))];
    let mut anc = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !anc.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(std::io::Error::other("too many descriptors"));
    }
    rustix::net::sendmsg(sock, &[IoSlice::new(&bytes)], &mut anc, SendFlags::NOSIGNAL)?;
    Ok(())
}

/// One message with its descriptors; `Ok(None)`: nothing there now
/// (`DONTWAIT`); `Err(BrokenPipe)` once the peer is gone.
pub(crate) fn recv<T: for<'de> Deserialize<'de>>(
    sock: BorrowedFd<'_>,
    buf: &mut [u8],
    flags: RecvFlags,
) -> std::io::Result<Option<(T, Vec<OwnedFd>)>> {
    let mut space = vec![MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(8))];
    let mut anc = RecvAncillaryBuffer::new(&mut space);
    let got = match rustix::net::recvmsg(
        sock,
        &mut [IoSliceMut::new(buf)],
        &mut anc,
        flags | RecvFlags::CMSG_CLOEXEC,
    ) {
        Ok(got) => got,
        Err(rustix::io::Errno::AGAIN) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let mut fds = Vec::new();
    for m in anc.drain() {
        if let RecvAncillaryMessage::ScmRights(it) = m {
            fds.extend(it);
        }
    }
    if got.bytes == 0 {
        return Err(std::io::ErrorKind::BrokenPipe.into());
    }
    let msg = postcard::from_bytes(&buf[..got.bytes.min(buf.len())])
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
    Ok(Some((msg, fds)))
}

// ---------------------------------------------------------------- server side

/// A server process's inbox: the instance's socket, read without waiting
/// (`server::Inbox::Process`).
pub struct Mailbox {
    sock: OwnedFd,
    buf: Vec<u8>,
    /// Answers the loop owes the instance, sent at the next look.
    stats: Option<(u64, Receiver<ServerStats>)>,
    names: Option<(u64, Receiver<Vec<DirName>>)>,
    /// A session whose end the loop was given; finished by the next look.
    closing: Option<u64>,
}

impl Mailbox {
    fn flush_answers(&mut self) {
        if let Some(s) = self.closing.take() {
            let _ = send(self.sock.as_fd(), &FromServer::Closed(s), &[]);
        }
        if let Some((seq, rx)) = self.stats.take() {
            match rx.try_recv() {
                Ok(stats) => {
                    let _ = send(self.sock.as_fd(), &FromServer::Stats { seq, stats }, &[]);
                }
                Err(_) => self.stats = Some((seq, rx)),
            }
        }
        if let Some((seq, rx)) = self.names.take() {
            match rx.try_recv() {
                Ok(names) => {
                    let _ = send(self.sock.as_fd(), &FromServer::DirNames { seq, names }, &[]);
                }
                Err(_) => self.names = Some((seq, rx)),
            }
        }
    }

    pub(crate) fn try_recv(&mut self) -> Result<Admin, TryRecvError> {
        self.flush_answers();
        loop {
            let got = recv::<ToServer>(self.sock.as_fd(), &mut self.buf, RecvFlags::DONTWAIT);
            let (msg, mut fds) = match got {
                Ok(Some(m)) => m,
                Ok(None) => return Err(TryRecvError::Empty),
                Err(_) => return Err(TryRecvError::Disconnected),
            };
            return Ok(match msg {
                ToServer::Channel { session, lane, .. } => {
                    let Some(fd) = fds.pop() else { continue };
                    let Ok(ch) = ServerChannel::map(fd.as_fd()) else {
                        continue;
                    };
                    Admin::NewChannel {
                        session: SessionId(session),
                        lane,
                        channel: Arc::new(ch),
                    }
                }
                ToServer::SessionClosed(s) => {
                    self.closing = Some(s);
                    Admin::SessionClosed(SessionId(s))
                }
                ToServer::RetireLanes { session, before } => Admin::RetireLanes {
                    session: SessionId(session),
                    before,
                },
                ToServer::ClientCounters(s, k) => Admin::ClientCounters(SessionId(s), k),
                ToServer::Stats { seq } => {
                    let (tx, rx) = std::sync::mpsc::channel();
                    self.stats = Some((seq, rx));
                    Admin::Stats(tx)
                }
                ToServer::DirNames { seq, dirs } => {
                    let (tx, rx) = std::sync::mpsc::channel();
                    self.names = Some((seq, rx));
                    Admin::DirNames(dirs, tx)
                }
                ToServer::Stall(ms) => Admin::Stall(ms),
                ToServer::CorruptRing => Admin::CorruptRing,
                ToServer::Shutdown => Admin::Shutdown,
                ToServer::Start { .. } | ToServer::Begin | ToServer::Ended(_) => continue,
            });
        }
    }

    pub(crate) fn started(&mut self, rebuilt: Result<Option<Duration>, String>) {
        let msg = FromServer::Started(rebuilt.map(|d| d.map(|d| d.as_micros() as u64)));
        let _ = send(self.sock.as_fd(), &msg, &[]);
    }
}

/// `atoll __fs-server`: run a host (`hosts`) whose socket is stdin.
/// Returns the process's exit status.
pub fn child_main() -> i32 {
    // SAFETY: stdin is this process's from its start, handed over by the
    // instance (`Host::start`); nothing else in the process owns it.
    let sock = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(0) };
    match crate::hosts::host_main(sock) {
        Ok(()) => 0,
        Err(e) => {
            tracing::error!("file server host: {e}");
            1
        }
    }
}

/// Run the file server whose socket is `sock`, in a thread of its host,
/// until it is told to stop (or moved away: the same thing here).
pub(crate) fn serve_server(sock: OwnedFd) -> std::io::Result<()> {
    let mut buf = vec![0u8; MAX_MESSAGE];
    let Some((
        ToServer::Start {
            fs,
            poll,
            pin,
            adaptive,
            journal,
            resume,
            instance_pid: _,
        },
        fds,
    )) = recv::<ToServer>(sock.as_fd(), &mut buf, RecvFlags::empty())?
    else {
        return Err(std::io::Error::other("no start message"));
    };
    let want = if journal { 4 } else { 3 };
    if fds.len() != want {
        return Err(std::io::Error::other("start without its descriptors"));
    }
    let mut fds = fds.into_iter();
    let (cache_fd, control_fd, pool_fd) = (
        fds.next().expect("cache"),
        fds.next().expect("control"),
        fds.next().expect("pool"),
    );
    let journal = match fds.next() {
        Some(fd) => Some(Arc::new(Journal::map(fd.as_fd())?)),
        None => None,
    };
    let mut adopted = Vec::new();
    let mut ended = Vec::new();
    loop {
        match recv::<ToServer>(sock.as_fd(), &mut buf, RecvFlags::empty())? {
            Some((ToServer::Begin, _)) => break,
            Some((ToServer::Ended(s), _)) => ended.push(SessionId(s)),
            Some((
                ToServer::Channel {
                    session,
                    lane,
                    closing,
                },
                mut fds,
            )) => {
                if let Some(fd) = fds.pop() {
                    let ch = ServerChannel::map(fd.as_fd())?;
                    adopted.push(crate::server::Adopted {
                        session: SessionId(session),
                        lane,
                        channel: Arc::new(ch),
                        closing,
                    });
                }
            }
            _ => {}
        }
    }
    let index = fs.index;
    // `top -H` shows which server this thread is.
    let _ = rustix::thread::set_name(
        &std::ffi::CString::new(format!("atoll-fs{index}")).unwrap_or_default(),
    );
    let cores: Vec<Option<usize>> = (0..fs.nservers.max(index + 1))
        .map(|i| if i == index { pin } else { None })
        .collect();
    let members = cores.len();
    let params = ServerParams {
        pool: Arc::new(BlockPool::map(pool_fd.as_fd())?),
        fs,
        poll,
        pin,
        cache_fd,
        control_fd,
        trace: None,
        adaptive,
        health: Arc::new(Health::new(&cores, members)),
        journal,
        process: true,
        resume,
        adopted,
        ended,
    };
    let answer = sock.try_clone()?;
    let mailbox = Mailbox {
        sock,
        buf,
        stats: None,
        names: None,
        closing: None,
    };
    match crate::server::run(params, Inbox::Process(mailbox)) {
        Ok(stats) => {
            let _ = send(answer.as_fd(), &FromServer::Stopped(stats), &[]);
            Ok(())
        }
        Err(e) => {
            let _ = send(answer.as_fd(), &FromServer::Down(e.to_string()), &[]);
            Err(e)
        }
    }
}

// -------------------------------------------------------------- instance side

/// What every start of one server is made from.
pub struct Recipe {
    pub exe: PathBuf,
    pub fs: FsConfig,
    pub poll: PollMode,
    pub adaptive: bool,
    pub cache_fd: OwnedFd,
    pub control_fd: OwnedFd,
    pub pool_fd: OwnedFd,
    pub journal_fd: Option<OwnedFd>,
}

/// One file server as the instance sees it: its socket, the host it runs
/// in (`hosts`), and the memfd of every channel it serves.
pub struct ServerProcess {
    recipe: Recipe,
    /// The control block, whose doorbell wakes the server to read its
    /// socket (a sleeping server waits on the doorbell, not the socket).
    control: atoll_msg::Control,
    link: Mutex<Link>,
}

/// A channel of the server, kept for a successor.
struct Kept {
    session: SessionId,
    lane: u32,
    memfd: OwnedFd,
    /// `SessionClosed` was sent, not yet confirmed (`FromServer::Closed`).
    closing: bool,
}

pub(crate) struct Link {
    sock: Option<OwnedFd>,
    pub(crate) host: Option<Arc<Host>>,
    channels: Vec<Kept>,
    /// Sessions with no channel here whose `SessionClosed` was sent, not
    /// yet confirmed: a successor finishes them (`server::take_over`),
    /// and only them — a session with no channel may be alive.
    ended: Vec<SessionId>,
    seq: u64,
    buf: Vec<u8>,
}

impl Link {
    /// The server finished session `s` (`FromServer::Closed`).
    fn confirmed(&mut self, s: SessionId) {
        self.channels.retain(|k| k.session != s);
        self.ended.retain(|e| *e != s);
    }
}

impl ServerProcess {
    pub fn new(recipe: Recipe) -> std::io::Result<ServerProcess> {
        Ok(ServerProcess {
            control: atoll_msg::Control::map(recipe.control_fd.as_fd())?,
            recipe,
            link: Mutex::new(Link {
                sock: None,
                host: None,
                channels: Vec::new(),
                ended: Vec::new(),
                seq: 0,
                buf: vec![0u8; MAX_MESSAGE],
            }),
        })
    }

    pub(crate) fn link(&self) -> std::sync::MutexGuard<'_, Link> {
        self.link.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn index(&self) -> usize {
        self.recipe.fs.index
    }

    /// The process id of the server's host (0: none running).
    pub fn pid(&self) -> u32 {
        self.link().host.as_ref().map_or(0, |h| h.pid())
    }

    /// The host the server runs in.
    pub fn host(&self) -> Option<Arc<Host>> {
        self.link().host.clone()
    }

    /// Start the server in `host` (a successor, or a server that moved
    /// there, when `resume`) and hand it every channel; returns how long
    /// it took to rebuild, if it did.
    pub(crate) fn spawn(
        &self,
        link: &mut Link,
        host: &Arc<Host>,
        resume: bool,
    ) -> Result<Option<u64>, String> {
        let (ours, theirs) = rustix::net::socketpair(
            rustix::net::AddressFamily::UNIX,
            rustix::net::SocketType::SEQPACKET,
            rustix::net::SocketFlags::CLOEXEC,
            None,
        )
        .map_err(|e| e.to_string())?;
        let _ = rustix::net::sockopt::set_socket_send_buffer_size(&ours, MAX_MESSAGE);
        let _ = rustix::net::sockopt::set_socket_send_buffer_size(&theirs, MAX_MESSAGE);
        host.serve(theirs)?;
        link.host = Some(host.clone());
        let r = &self.recipe;
        let mut fds = vec![r.cache_fd.as_fd(), r.control_fd.as_fd(), r.pool_fd.as_fd()];
        fds.extend(r.journal_fd.as_ref().map(|f| f.as_fd()));
        let mut fs = r.fs.clone();
        fs.core = host.core.map_or(-1, |c| c as i32);
        let start = ToServer::Start {
            fs,
            poll: r.poll,
            pin: host.core,
            adaptive: r.adaptive,
            journal: r.journal_fd.is_some(),
            resume,
            instance_pid: std::process::id(),
        };
        let sent = send(ours.as_fd(), &start, &fds).and_then(|()| {
            for k in &link.channels {
                let msg = ToServer::Channel {
                    session: k.session.0,
                    lane: k.lane,
                    closing: k.closing,
                };
                send(ours.as_fd(), &msg, &[k.memfd.as_fd()])?;
            }
            for s in &link.ended {
                send(ours.as_fd(), &ToServer::Ended(s.0), &[])?;
            }
            send(ours.as_fd(), &ToServer::Begin, &[])
        });
        sent.map_err(|e| e.to_string())?;
        // The successor finishes every session that was ending.
        link.channels.retain(|k| !k.closing);
        link.ended.clear();
        link.sock = Some(ours);
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            match Self::answer(link, deadline)? {
                FromServer::Started(r) => return r,
                FromServer::Down(why) => return Err(why),
                _ => continue,
            }
        }
    }

    /// The next message from the server, waiting until `deadline`.
    fn answer(link: &mut Link, deadline: Instant) -> Result<FromServer, String> {
        let Some(sock) = link.sock.as_ref() else {
            return Err("no process".into());
        };
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err("no answer".into());
            }
            let mut pfd = [rustix::event::PollFd::new(
                sock,
                rustix::event::PollFlags::IN,
            )];
            let ts = rustix::event::Timespec {
                tv_sec: left.as_secs() as i64,
                tv_nsec: left.subsec_nanos() as i64,
            };
            match rustix::event::poll(&mut pfd, Some(&ts)) {
                Ok(0) | Err(rustix::io::Errno::INTR) => continue,
                Ok(_) => {}
                Err(e) => return Err(e.to_string()),
            }
            match recv::<FromServer>(sock.as_fd(), &mut link.buf, RecvFlags::DONTWAIT) {
                Ok(Some((FromServer::Closed(s), _))) => {
                    link.confirmed(SessionId(s));
                    return Self::answer(link, deadline);
                }
                Ok(Some((msg, _))) => return Ok(msg),
                Ok(None) => continue,
                Err(e) => return Err(format!("the process is gone ({e})")),
            }
        }
    }

    /// Send `msg` and ring the server's doorbell so that it reads it.
    fn tell(&self, link: &Link, msg: &ToServer, fds: &[BorrowedFd<'_>]) -> bool {
        let sent = link
            .sock
            .as_ref()
            .is_some_and(|s| send(s.as_fd(), msg, fds).is_ok());
        self.control.doorbell(self.index()).ring();
        sent
    }

    /// Give the server a channel. `false`: nobody serves it (the server
    /// is down for good), so the caller closes it.
    pub fn add_channel(&self, session: SessionId, lane: u32, fd: BorrowedFd<'_>) -> bool {
        let mut link = self.link();
        let Ok(mine) = fd.try_clone_to_owned() else {
            return false;
        };
        let msg = ToServer::Channel {
            session: session.0,
            lane,
            closing: false,
        };
        // A server that just died, or is moving, gets it from the registry
        // when it starts again.
        let _ = self.tell(&link, &msg, &[fd]);
        link.channels.push(Kept {
            session,
            lane,
            memfd: mine,
            closing: false,
        });
        true
    }

    /// Forget the channels of sessions the server finished
    /// (`FromServer::Closed`); other messages here are stale answers.
    /// `Some(why)` when the server said it is down for good, or its
    /// socket closed (its thread ended while its host lives on).
    pub fn drain_confirmations(&self) -> Option<String> {
        let mut link = self.link();
        let link = &mut *link;
        let sock = link.sock.as_ref()?;
        loop {
            match recv::<FromServer>(sock.as_fd(), &mut link.buf, RecvFlags::DONTWAIT) {
                Ok(Some((FromServer::Closed(s), _))) => {
                    // As `Link::confirmed` (the socket borrows `link`).
                    link.channels.retain(|k| k.session != SessionId(s));
                    link.ended.retain(|e| *e != SessionId(s));
                }
                Ok(Some((FromServer::Down(why), _))) => return Some(why),
                Ok(Some(_)) => {}
                Ok(None) => return None,
                Err(e) => return Some(format!("its thread ended ({e})")),
            }
        }
    }

    /// Forward an internal message (the ones with an answer wait for it).
    pub fn post(&self, msg: Admin) {
        let mut link = self.link();
        let msg = match msg {
            Admin::SessionClosed(s) => {
                // Kept until the server confirms: what the session sent
                // before it ended must still be served, by a successor if
                // need be (`server::take_over`).
                let mut had_channels = false;
                for k in link.channels.iter_mut().filter(|k| k.session == s) {
                    k.closing = true;
                    had_channels = true;
                }
                if !had_channels {
                    link.ended.push(s);
                }
                ToServer::SessionClosed(s.0)
            }
            Admin::RetireLanes { session, before } => {
                link.channels
                    .retain(|k| k.session != session || k.lane >= before);
                ToServer::RetireLanes {
                    session: session.0,
                    before,
                }
            }
            Admin::ClientCounters(s, k) => ToServer::ClientCounters(s.0, k),
            Admin::Stats(tx) => return self.ask_stats(&mut link, tx),
            Admin::DirNames(dirs, tx) => return self.ask_names(&mut link, dirs, tx),
            Admin::Crash => {
                // SIGKILL at whatever instruction the server is: a real
                // death, with no cleanup of its own. Its host is its fault
                // domain, so the servers beside it die too (and are
                // rebuilt with it).
                if let Some(h) = &link.host {
                    h.kill("killed by atoll chaos".into());
                }
                return;
            }
            Admin::Stall(ms) => ToServer::Stall(ms),
            Admin::CorruptRing => ToServer::CorruptRing,
            Admin::Shutdown => ToServer::Shutdown,
            Admin::NewChannel { .. } => return, // `add_channel`
        };
        let _ = self.tell(&link, &msg, &[]);
    }

    fn ask_stats(&self, link: &mut Link, tx: Sender<ServerStats>) {
        link.seq += 1;
        let seq = link.seq;
        if !self.tell(link, &ToServer::Stats { seq }, &[]) {
            return;
        }
        let deadline = Instant::now() + ANSWER_TIMEOUT;
        while let Ok(msg) = Self::answer(link, deadline) {
            if let FromServer::Stats { seq: s, stats } = msg {
                if s == seq {
                    let _ = tx.send(stats);
                    return;
                }
            }
        }
    }

    fn ask_names(&self, link: &mut Link, dirs: Vec<(u64, Option<u64>)>, tx: Sender<Vec<DirName>>) {
        link.seq += 1;
        let seq = link.seq;
        if !self.tell(link, &ToServer::DirNames { seq, dirs }, &[]) {
            return;
        }
        let deadline = Instant::now() + ANSWER_TIMEOUT;
        while let Ok(msg) = Self::answer(link, deadline) {
            if let FromServer::DirNames { seq: s, names } = msg {
                if s == seq {
                    let _ = tx.send(names);
                    return;
                }
            }
        }
    }

    /// Ask the server to stop, between two requests, and wait for its
    /// final statistics (`None`: it did not answer in time). Its host
    /// goes on; the channels stay with the instance, for a server that
    /// takes over (a move, `watchdog`).
    pub(crate) fn stop_in(&self, link: &mut Link) -> Option<ServerStats> {
        let mut stats = None;
        if self.tell(link, &ToServer::Shutdown, &[]) {
            let deadline = Instant::now() + ANSWER_TIMEOUT;
            while let Ok(msg) = Self::answer(link, deadline) {
                if let FromServer::Stopped(s) = msg {
                    stats = Some(s);
                    break;
                }
            }
        }
        link.sock = None;
        link.host = None;
        stats
    }

    /// Forget the server's socket and host (they died); what it said last
    /// before dying, if it said it is down for good.
    pub(crate) fn forget_dead(&self, link: &mut Link) -> Option<String> {
        let mut said = None;
        if let Some(sock) = link.sock.take() {
            while let Ok(Some((msg, _))) =
                recv::<FromServer>(sock.as_fd(), &mut link.buf, RecvFlags::DONTWAIT)
            {
                match msg {
                    FromServer::Down(why) => said = Some(why),
                    FromServer::Closed(s) => link.confirmed(SessionId(s)),
                    _ => {}
                }
            }
        }
        link.host = None;
        said
    }

    /// Close every channel kept for the server: it is down for good, and
    /// its clients get `EIO`.
    pub(crate) fn close_channels(&self, link: &mut Link) {
        for k in link.channels.drain(..) {
            if let Ok(ch) = ServerChannel::map(k.memfd.as_fd()) {
                ch.close();
            }
        }
    }
}
