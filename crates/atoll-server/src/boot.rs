//! The boot thread: serves `<runtime>/boot.sock` with the bootstrap
//! protocol of `atoll_proto::boot` (Hare Table 4.2 CONNECT/DISCONNECT).
//!
//! One epoll set holds the listening socket, an eventfd used to stop the
//! thread, and every connection. A connection becomes a session with
//! `Attach` (or at birth, for the child end made by `Fork`); the session
//! lives exactly as long as the connection: when the peer's last copy of
//! the socket closes (exit, kill, crash at any instant) the thread tells
//! every server `SessionClosed`, so the servers drop the session's
//! descriptions, locks and channels.
//!
//! Lanes: a lane is one channel to each server, for one thread of a
//! process. The boot thread creates the channel memfds, hands the server
//! ends to the server threads (`Admin::NewChannel`, followed by a doorbell
//! ring) *before* replying, so a client's first request always finds its
//! channel registered.
//!
//! A program's client attaches without a lane (`AttachLazily`; `Attach`,
//! which gives lane 0, is for tools that speak to servers at once); a new
//! image after `execve` (`Reattach`) and a forked child get none either
//! until their first call asks `NewLane`, so a start that asks no server
//! anything costs no channels. A session no server can have heard of (an
//! attached process that never took a lane) ends without waking the
//! servers: only server 0, if the process reported counters, is told,
//! with the counters (`Conn::servers_know`). Channels are made ahead of need: the boot thread keeps
//! [`SPARE_LANES`] lanes' worth of fresh channels and makes the next ones after it has replied,
//! while the client goes on (`memfd_create`, `ftruncate` and `mmap` per
//! channel leave the reply's path). A channel is never reused: one that
//! served an ended session may still be mapped by a process that closed
//! its session socket but lives on.

use std::collections::HashMap;
use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use atoll_msg::{Control, RingSize, ServerChannel};
use atoll_proto::boot::{BootReply, BootRequest, InstanceInfo, InstanceStatus, MAX_BOOT_PACKET};
use atoll_proto::{ServerStats, SessionId};
use rustix::event::epoll;
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, SocketFlags,
};

use crate::server::Admin;

#[path = "caught.rs"]
mod caught;

/// How the instance reaches one file server.
pub enum ServerLink {
    /// A thread of the instance, through a channel.
    Thread(Sender<Admin>),
    /// A process of its own (`process`), through a socket.
    Process(Arc<crate::process::ServerProcess>),
    /// A member served on another node, through the proxy that stands
    /// for it here (`remote`, `atoll node --servers-here`).
    Remote(Arc<dyn crate::remote::RemoteMember>),
}

/// The file servers as the boot thread and the instance see them.
///
/// `links` has a slot for every server the instance may ever have (the
/// control block's room); servers `0..control.members()` have theirs set.
/// A server that joins while the instance runs (`watchdog`, Hare §6.1.1)
/// gets its link set once, before the member count that includes it is
/// published, so whoever reads the count finds the link.
pub struct Servers {
    pub links: Vec<std::sync::OnceLock<ServerLink>>,
    pub control: Control,
    pub health: Arc<crate::health::Health>,
    /// Where `atoll scale` goes: the watchdog (`None`: server threads,
    /// which do not move).
    pub scaler: std::sync::Mutex<Option<std::sync::mpsc::Sender<crate::watchdog::ScaleRequest>>>,
}

impl Servers {
    /// Each server's health, with the generation of the incarnation its
    /// name resolves to (published in the control block by the server).
    pub fn health_with_generations(&self) -> Vec<atoll_proto::boot::ServerHealth> {
        let mut health = self.health.report();
        for h in &mut health {
            h.generation = self.control.generation(h.server as usize);
            // A member served on another node is down while its node is
            // unreachable (its calls fail with `EIO`).
            if let Some(ServerLink::Remote(r)) = self.link(h.server as usize) {
                if !r.reachable() {
                    h.state = "down".into();
                }
            }
        }
        health
    }

    /// Server `i`'s link, if it is a member.
    pub fn link(&self, i: usize) -> Option<&ServerLink> {
        self.links.get(i).and_then(|l| l.get())
    }

    /// Server `i`'s process, if servers are processes.
    pub fn process(&self, i: usize) -> Option<&Arc<crate::process::ServerProcess>> {
        match self.link(i) {
            Some(ServerLink::Process(p)) => Some(p),
            _ => None,
        }
    }

    /// Post an internal message to server `i` and ring its doorbell so a
    /// sleeping server wakes up to read it.
    pub fn post(&self, i: usize, msg: Admin) {
        match self.link(i) {
            Some(ServerLink::Thread(tx)) => {
                if let Err(std::sync::mpsc::SendError(Admin::NewChannel { channel, .. })) =
                    tx.send(msg)
                {
                    // Server `i` is gone: nobody will ever serve this channel.
                    channel.close();
                }
            }
            Some(ServerLink::Process(p)) => p.post(msg),
            // Its proxy rings no local doorbell but its own.
            Some(ServerLink::Remote(r)) => return r.post(msg),
            None => return,
        }
        self.control.doorbell(i).ring();
    }

    /// Give server `i` a new channel; closed at once if the server is
    /// down, so its client gets `EIO` rather than waiting (`health`).
    pub fn add_channel(
        &self,
        i: usize,
        session: SessionId,
        lane: u32,
        channel: Arc<ServerChannel>,
        memfd: BorrowedFd<'_>,
    ) {
        if let Some(ServerLink::Remote(r)) = self.link(i) {
            return r.add_channel(session, lane, channel);
        }
        if let Some(p) = self.process(i) {
            if self.health.is_down(i) || !p.add_channel(session, lane, memfd) {
                channel.close();
            }
            self.control.doorbell(i).ring();
            return;
        }
        self.post(
            i,
            Admin::NewChannel {
                session,
                lane,
                channel: channel.clone(),
            },
        );
        // After the post: either the dying server drained it, or we see
        // its mark here (`health` module docs).
        if self.health.is_down(i) {
            channel.close();
        }
    }

    /// Inject a fault (`atoll chaos`).
    pub fn chaos(&self, action: atoll_proto::boot::ChaosAction) -> Result<(), String> {
        use atoll_proto::boot::ChaosAction;
        let (ChaosAction::Kill { server }
        | ChaosAction::Stall { server, .. }
        | ChaosAction::CorruptRing { server }) = action;
        let i = server as usize;
        if i >= self.len() {
            return Err(format!(
                "no file server {server} (the instance has {})",
                self.len()
            ));
        }
        if self.health.is_down(i) {
            return Err(format!("file server {server} is already down"));
        }
        match action {
            ChaosAction::Kill { .. } => self.post(i, Admin::Crash),
            ChaosAction::CorruptRing { .. } => self.post(i, Admin::CorruptRing),
            ChaosAction::Stall { millis, .. } => {
                self.health.stall(i, millis);
                if self.process(i).is_some() {
                    self.post(i, Admin::Stall(millis));
                }
                self.control.doorbell(i).ring();
            }
        }
        Ok(())
    }

    /// Run the servers in `hosts` host processes (`None`: automatically)
    /// and wait until they do (`atoll scale`; `watchdog`). Returns the
    /// hosts running and how many servers moved.
    pub fn scale(&self, hosts: Option<usize>) -> Result<(usize, usize), String> {
        let (tx, rx) = std::sync::mpsc::channel();
        let sent = self
            .scaler
            .lock()
            .map_err(|_| "the watchdog is gone".to_string())?
            .as_ref()
            .ok_or_else(|| {
                "its file servers are threads of the instance (--without processes, or \
                 --trace), which do not move between processes"
                    .to_string()
            })?
            .send(crate::watchdog::ScaleRequest { hosts, reply: tx });
        sent.map_err(|_| "the watchdog is gone".to_string())?;
        // A move replays a journal, which takes about 2 s per million
        // records; a generous bound, never a hang.
        rx.recv_timeout(std::time::Duration::from_secs(600))
            .map_err(|_| "the watchdog did not answer".to_string())?
    }

    /// The members: servers `0..len` (the published count, which only
    /// grows as servers join).
    pub fn len(&self) -> usize {
        self.control.members()
    }

    pub fn is_empty(&self) -> bool {
        false
    }

    /// The most servers the instance may have (its room).
    pub fn room(&self) -> usize {
        self.links.len()
    }

    /// Statistics of every server (a server that does not answer within
    /// the timeout is reported with its index only).
    pub fn stats(&self) -> Vec<ServerStats> {
        // A stalled server would hold the answer back until it goes on:
        // it is reported by its index only (`health`).
        let rxs: Vec<_> = (0..self.len())
            .map(|i| {
                let (tx, rx) = mpsc::channel();
                if self.health.stall_left_ms(i) == 0 {
                    self.post(i, Admin::Stats(tx));
                }
                rx
            })
            .collect();
        rxs.into_iter()
            .enumerate()
            .map(|(i, rx)| {
                rx.recv_timeout(Duration::from_secs(5))
                    .unwrap_or_else(|_| ServerStats {
                        server: i as u32,
                        ..ServerStats::default()
                    })
            })
            .collect()
    }

    /// Names of the hot and the swapped directories in `stats` and of
    /// their ancestors, as far as the servers know them
    /// (`fs::hotdirs::name_dirs` asks in rounds; each round is one
    /// `Admin::DirNames` to every server).
    pub fn dir_names(&self, stats: &[ServerStats]) -> Vec<atoll_proto::DirName> {
        let hot = stats.iter().flat_map(|s| {
            let swapped = s.swapped_dirs.iter().map(|d| d.ino);
            s.hot_dirs.iter().map(|d| d.ino).chain(swapped)
        });
        crate::fs::name_dirs(hot, |ask| {
            let rxs: Vec<_> = (0..self.len())
                .filter(|&i| !self.health.is_down(i) && self.health.stall_left_ms(i) == 0)
                .map(|i| {
                    let (tx, rx) = mpsc::channel();
                    self.post(i, Admin::DirNames(ask.to_vec(), tx));
                    rx
                })
                .collect();
            // A server that does not answer would make every further
            // round wait as long again: stop at the first one.
            let mut all = Vec::new();
            for rx in rxs {
                all.extend(rx.recv_timeout(Duration::from_secs(5)).ok()?);
            }
            Some(all)
        })
    }

    pub fn session_closed(&self, s: SessionId) {
        for i in 0..self.len() {
            self.post(i, Admin::SessionClosed(s));
        }
    }
}

/// Set when a client asked the instance to stop.
#[derive(Default)]
pub struct StopFlag {
    stopped: Mutex<bool>,
    cv: Condvar,
}

impl StopFlag {
    pub fn raise(&self) {
        if let Ok(mut s) = self.stopped.lock() {
            *s = true;
        }
        self.cv.notify_all();
    }
    pub fn wait(&self) {
        let Ok(mut s) = self.stopped.lock() else {
            return;
        };
        while !*s {
            match self.cv.wait(s) {
                Ok(g) => s = g,
                Err(_) => return,
            }
        }
    }
}

pub struct BootParams {
    pub listener: OwnedFd,
    pub wake: OwnedFd,
    pub servers: Arc<Servers>,
    pub cache_fd: OwnedFd,
    pub control_fd: OwnedFd,
    pub info: InstanceInfo,
    pub stop: Arc<StopFlag>,
    pub quit: Arc<AtomicBool>,
    /// With `--trace`: learns which process each session belongs to.
    pub trace: Option<Arc<crate::trace::Sink>>,
    /// The instance's `atoll` executable, for what a dead image's loader
    /// wrote (`caught`).
    pub helper: std::path::PathBuf,
}

const LISTENER: u64 = 0;
const WAKE: u64 = 1;

/// Lanes' worth of channels kept made ahead of need (module docs): one
/// for the next process start and one for a `NewLane` beside it.
const SPARE_LANES: usize = 2;

struct Conn {
    fd: OwnedFd,
    session: Option<SessionId>,
    next_lane: u32,
    lanes: u32,
    /// The process the session belongs to, as it said (monitoring only).
    pid: u32,
    /// May servers hold state of the session, so must hear that it
    /// ended? A lane (requests) or a birth by `Fork` (the parent shares
    /// its descriptions with the child through its own lanes) says yes.
    servers_know: bool,
    /// Counters the process reported as it exited (`BootRequest::Counters`),
    /// held until the connection closes and then posted to server 0 just
    /// ahead of `SessionClosed`: one wake-up of server 0 for both.
    counters: Option<atoll_proto::ClientCounters>,
    /// What the new image's loader writes before its client starts,
    /// until the client says it started (`caught`).
    caught: Option<caught::Caught>,
    /// A `Caught` sent just ahead of a `Fork`, for the child it makes,
    /// with the pid of the image about to exec.
    next_caught: Option<(u32, caught::Caught)>,
}

struct Boot {
    p: BootParams,
    epoll: OwnedFd,
    conns: HashMap<u64, Conn>,
    next_token: u64,
    next_session: u64,
    /// Fresh channels, not yet given to any session (module docs).
    spare: Vec<(OwnedFd, ServerChannel)>,
    /// Lanes made since the instance started (`atoll status`).
    lanes_made: u64,
    /// `Reattached` images since the instance started (`atoll status`).
    images_handed_over: u64,
    /// The latest sessions the servers were told ended, with their pids:
    /// what a `Reaped` that comes just after the close was read names.
    ended: std::collections::VecDeque<(u32, SessionId)>,
}

/// Sessions kept in `Boot::ended`: a parent asks right after its `wait`
/// returned, so only the latest ends matter.
const ENDED_KEPT: usize = 256;

/// Run the boot thread until `quit` is set and the wake eventfd written.
pub fn run(p: BootParams) -> std::io::Result<()> {
    let ep = epoll::create(epoll::CreateFlags::CLOEXEC)?;
    epoll::add(
        &ep,
        &p.listener,
        epoll::EventData::new_u64(LISTENER),
        epoll::EventFlags::IN,
    )?;
    epoll::add(
        &ep,
        &p.wake,
        epoll::EventData::new_u64(WAKE),
        epoll::EventFlags::IN,
    )?;
    let mut b = Boot {
        p,
        epoll: ep,
        conns: HashMap::new(),
        next_token: 2,
        next_session: 1,
        spare: Vec::new(),
        lanes_made: 0,
        images_handed_over: 0,
        ended: std::collections::VecDeque::new(),
    };
    b.make_spare_channels();
    let mut events: Vec<epoll::Event> = Vec::with_capacity(64);
    let mut buf = vec![0u8; MAX_BOOT_PACKET];
    loop {
        events.clear();
        match epoll::wait(&b.epoll, rustix::buffer::spare_capacity(&mut events), None) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
        for ev in events.iter() {
            let (token, flags) = (ev.data.u64(), ev.flags);
            match token {
                LISTENER => b.accept(),
                WAKE => {
                    if b.p.quit.load(Ordering::Acquire) {
                        b.close_all();
                        return Ok(());
                    }
                }
                t => b.readable(t, flags, &mut buf),
            }
        }
        // After the replies: the clients go on meanwhile.
        b.make_spare_channels();
    }
}

impl Boot {
    fn accept(&mut self) {
        match rustix::net::accept_with(&self.p.listener, SocketFlags::CLOEXEC) {
            Ok(fd) => {
                self.register(fd, None);
            }
            Err(e) => tracing::warn!("boot socket accept: {e}"),
        }
    }

    fn register(&mut self, fd: OwnedFd, session: Option<SessionId>) -> Option<u64> {
        let token = self.next_token;
        self.next_token += 1;
        let flags = epoll::EventFlags::IN | epoll::EventFlags::RDHUP;
        if let Err(e) = epoll::add(&self.epoll, &fd, epoll::EventData::new_u64(token), flags) {
            tracing::warn!("boot: cannot watch a connection: {e}");
            if let Some(s) = session {
                self.p.servers.session_closed(s);
            }
            return None;
        }
        self.conns.insert(
            token,
            Conn {
                fd,
                session,
                next_lane: 0,
                lanes: 0,
                pid: 0,
                // A child made by `Fork` is known to every server the
                // parent shares its descriptions with.
                servers_know: session.is_some(),
                counters: None,
                caught: None,
                next_caught: None,
            },
        );
        Some(token)
    }

    fn close(&mut self, token: u64) {
        if let Some(mut c) = self.conns.remove(&token) {
            let _ = epoll::delete(&self.epoll, &c.fd);
            let Some(s) = c.session else {
                return;
            };
            if let Some(caught) = c.caught.take().filter(|k| k.written()) {
                if self.drain(s, c.pid, caught) {
                    return;
                }
            }
            // Server 0's internal messages keep their order: the counters
            // arrive before the session's end, which forgets them.
            if let Some(k) = c.counters {
                self.p.servers.post(0, Admin::ClientCounters(s, k));
            }
            if c.servers_know {
                self.p.servers.session_closed(s);
                if self.ended.len() == ENDED_KEPT {
                    self.ended.pop_front();
                }
                self.ended.push_back((c.pid, s));
            } else if c.counters.is_some() {
                self.p.servers.post(0, Admin::SessionClosed(s));
            }
        }
    }

    fn close_all(&mut self) {
        let tokens: Vec<u64> = self.conns.keys().copied().collect();
        for t in tokens {
            self.close(t);
        }
    }

    fn readable(&mut self, token: u64, flags: epoll::EventFlags, buf: &mut [u8]) {
        let Some(conn) = self.conns.get(&token) else {
            return;
        };
        // Only `Caught` comes with descriptors (at most one per standard
        // descriptor); any other packet's are closed as they are dropped.
        let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(3))];
        let mut anc = RecvAncillaryBuffer::new(&mut space);
        let got = rustix::net::recvmsg(
            &conn.fd,
            &mut [IoSliceMut::new(&mut *buf)],
            &mut anc,
            RecvFlags::DONTWAIT | RecvFlags::CMSG_CLOEXEC,
        );
        let mut fds = Vec::new();
        for msg in anc.drain() {
            if let RecvAncillaryMessage::ScmRights(it) = msg {
                fds.extend(it);
            }
        }
        match got.map(|r| r.bytes) {
            Ok(0) => self.close(token),
            Ok(n) => {
                let n = n.min(buf.len());
                match postcard::from_bytes::<BootRequest>(&buf[..n]) {
                    Ok(BootRequest::Caught { pid, fds: at, env }) => {
                        if let Some(c) = self.conns.get_mut(&token) {
                            c.next_caught = caught::Caught::new(at, fds, env).map(|k| (pid, k));
                        }
                    }
                    Ok(req) => self.serve(token, req),
                    Err(e) => self.reply(token, &BootReply::Error(format!("bad packet: {e}")), &[]),
                }
            }
            Err(rustix::io::Errno::AGAIN) => {
                if flags.intersects(epoll::EventFlags::HUP | epoll::EventFlags::ERR) {
                    self.close(token);
                }
            }
            Err(_) => self.close(token),
        }
    }

    fn new_session(&mut self) -> SessionId {
        let s = SessionId(self.next_session);
        self.next_session += 1;
        s
    }

    /// The size of this instance's channels: large where file data travels
    /// in messages (a copy island, whose sessions are also those a node's
    /// head proxies for programs on other hosts), small where it is shared
    /// through the buffer cache (issue 16 follow-up, `atoll_msg::RingSize`).
    fn ring_size(&self) -> RingSize {
        RingSize::for_island(self.p.info.island.maps_cache())
    }

    /// Top the spare channels up to [`SPARE_LANES`] lanes' worth. A
    /// failure (out of memory) is left for `make_lane` to report to the
    /// client that needs the channel.
    fn make_spare_channels(&mut self) {
        let want = SPARE_LANES * self.p.servers.len();
        while self.spare.len() < want {
            match ServerChannel::create(self.ring_size()) {
                Ok(ch) => self.spare.push(ch),
                Err(e) => {
                    tracing::debug!("boot: no spare channel: {e}");
                    return;
                }
            }
        }
    }

    /// Channels of a new lane: server ends to the server threads, client
    /// ends (memfds) returned for the reply. Spare channels first, fresh
    /// ones when they ran out.
    fn make_lane(&mut self, session: SessionId, lane: u32) -> std::io::Result<Vec<OwnedFd>> {
        let mut fds = Vec::with_capacity(self.p.servers.len());
        let mut chans = Vec::with_capacity(self.p.servers.len());
        for _ in 0..self.p.servers.len() {
            let (fd, ch) = match self.spare.pop() {
                Some(ch) => ch,
                None => ServerChannel::create(self.ring_size())?,
            };
            fds.push(fd);
            chans.push(ch);
        }
        self.lanes_made += 1;
        for (i, ch) in chans.into_iter().enumerate() {
            self.p
                .servers
                .add_channel(i, session, lane, Arc::new(ch), fds[i].as_fd());
        }
        Ok(fds)
    }

    /// A channel of this session's lane `lane` to member `server`, which
    /// joined after the lane was made (`BootRequest::Channel`). Registered
    /// with the server before the reply, as a lane's channels are.
    fn join_channel(
        &mut self,
        token: u64,
        s: SessionId,
        lane: u32,
        server: u32,
    ) -> Result<(), String> {
        let i = server as usize;
        let given = self.conns.get(&token).map_or(0, |c| c.next_lane);
        if lane >= given {
            return Err(format!("lane {lane} is not this session's"));
        }
        if i >= self.p.servers.len() {
            return Err(format!("file server {server} is not a member"));
        }
        let (fd, ch) = ServerChannel::create(self.ring_size()).map_err(|e| e.to_string())?;
        self.p
            .servers
            .add_channel(i, s, lane, Arc::new(ch), fd.as_fd());
        self.reply(token, &BootReply::Lane { lane }, &[fd]);
        Ok(())
    }

    fn serve(&mut self, token: u64, req: BootRequest) {
        let session = self.conns.get(&token).and_then(|c| c.session);
        match req {
            BootRequest::Attach { pid }
            | BootRequest::AttachLazily { pid }
            | BootRequest::Reattach { pid }
            | BootRequest::Reattached { pid } => self.learn_pid(token, pid),
            BootRequest::ChildPid { pid } => {
                self.learn_pid(token, pid);
                return;
            }
            _ => {}
        }
        let result = match (req, session) {
            (BootRequest::Attach { .. } | BootRequest::AttachLazily { .. }, Some(_)) => {
                Err("this connection already has a session".to_string())
            }
            (BootRequest::Attach { .. }, None) => {
                let s = self.new_session();
                if let Some(c) = self.conns.get_mut(&token) {
                    c.session = Some(s);
                }
                self.attach(token, s, true)
            }
            (BootRequest::AttachLazily { .. }, None) => {
                let s = self.new_session();
                if let Some(c) = self.conns.get_mut(&token) {
                    c.session = Some(s);
                }
                self.attach(token, s, false)
            }
            (BootRequest::Reattach { .. }, None) => {
                let s = self.new_session();
                if let Some(c) = self.conns.get_mut(&token) {
                    c.session = Some(s);
                }
                self.attach(token, s, false)
            }
            (BootRequest::Reattach { .. }, Some(s)) => {
                self.image_started(token);
                self.retire_image_lanes(token, s);
                self.attach(token, s, false)
            }
            (BootRequest::Reattached { .. }, Some(s)) => {
                self.image_started(token);
                self.retire_image_lanes(token, s);
                self.images_handed_over += 1;
                return;
            }
            // A new image that thinks it has a session on a connection
            // that has none: nothing to answer; its first `NewLane` is
            // refused.
            (BootRequest::Reattached { .. }, None) => return,
            (BootRequest::Counters(k), Some(_)) => {
                // Posted with the `SessionClosed` the process's exit causes.
                if let Some(c) = self.conns.get_mut(&token) {
                    c.counters = Some(k);
                }
                return;
            }
            (BootRequest::Counters(_), None) => return,
            (BootRequest::NewLane, Some(s)) => {
                let lane = self.take_lane(token);
                match self.make_lane(s, lane) {
                    Ok(fds) => {
                        self.reply(token, &BootReply::Lane { lane }, &fds);
                        Ok(())
                    }
                    Err(e) => Err(e.to_string()),
                }
            }
            (BootRequest::Channel { lane, server }, Some(s)) => {
                self.join_channel(token, s, lane, server)
            }
            (BootRequest::Channel { .. }, None) => Err("attach first".to_string()),
            (BootRequest::Fork, Some(_)) => self.fork(token),
            (BootRequest::NewLane | BootRequest::Fork, None) => Err("attach first".to_string()),
            (BootRequest::Status, _) => {
                let st = self.status();
                self.reply(token, &BootReply::Status(Box::new(st)), &[]);
                Ok(())
            }
            (BootRequest::ChildPid { .. }, _) => return, // answered above
            (BootRequest::Caught { .. }, _) => return,   // taken in `readable`
            (BootRequest::Stop, _) => {
                self.reply(token, &BootReply::Stopping, &[]);
                self.p.stop.raise();
                Ok(())
            }
            (BootRequest::Chaos(action), _) => self.p.servers.chaos(action).map(|()| {
                self.reply(token, &BootReply::Done, &[]);
            }),
            (BootRequest::Reaped { pid, session }, _) => {
                let sessions = self.reaped(pid, session);
                self.reply(token, &BootReply::Sessions(sessions), &[]);
                Ok(())
            }
            (BootRequest::Scale { hosts }, _) => self
                .p
                .servers
                .scale(hosts.map(|h| h as usize))
                .map(|(hosts, moved)| {
                    let reply = BootReply::Scaled {
                        hosts: hosts as u32,
                        moved: moved as u32,
                    };
                    self.reply(token, &reply, &[]);
                }),
        };
        if let Err(msg) = result {
            self.reply(token, &BootReply::Error(msg), &[]);
        }
    }

    /// The new image's client started: it copies what its loader wrote
    /// itself (`caught`).
    fn image_started(&mut self, token: u64) {
        if let Some(c) = self.conns.get_mut(&token) {
            c.caught = None;
        }
    }

    /// A new program image took over `s` (`Reattach`, `Reattached`): the
    /// old image's lanes retire (a forked child that only execs had none:
    /// nothing to tell the servers).
    fn retire_image_lanes(&mut self, token: u64, s: SessionId) {
        let before = self.conns.get(&token).map_or(0, |c| c.next_lane);
        for i in (0..self.p.servers.len()).filter(|_| before > 0) {
            self.p
                .servers
                .post(i, Admin::RetireLanes { session: s, before });
        }
        if let Some(c) = self.conns.get_mut(&token) {
            c.lanes = 0;
        }
    }

    /// `Reaped`: end now the sessions of a dead process whose close this
    /// thread has not read yet (its socket reads end of file: no copy of
    /// it is left), serving first whatever it sent before it died; then
    /// name every ended session of the process.
    fn reaped(&mut self, pid: u32, session: Option<SessionId>) -> Vec<SessionId> {
        let of_process =
            |c: &Conn| (pid != 0 && c.pid == pid) || (session.is_some() && c.session == session);
        let tokens: Vec<u64> = self
            .conns
            .iter()
            .filter(|(_, c)| of_process(c))
            .map(|(t, _)| *t)
            .collect();
        let mut buf = vec![0u8; MAX_BOOT_PACKET];
        for token in tokens {
            // A bounded number of packets: a live process could keep sending.
            for _ in 0..64 {
                let Some(c) = self.conns.get(&token) else {
                    break;
                };
                let peek =
                    rustix::net::recv(&c.fd, &mut buf[..1], RecvFlags::DONTWAIT | RecvFlags::PEEK);
                match peek {
                    Ok((_, 0)) => self.close(token),
                    Ok(_) => {
                        self.readable(token, epoll::EventFlags::IN, &mut buf);
                        continue;
                    }
                    Err(rustix::io::Errno::AGAIN) => {}
                    Err(_) => self.close(token),
                }
                break;
            }
        }
        self.ended
            .iter()
            .filter(|&&(p, s)| (pid != 0 && p == pid) || Some(s) == session)
            .map(|&(_, s)| s)
            .collect()
    }

    fn learn_pid(&mut self, token: u64, pid: u32) {
        if let Some(c) = self.conns.get_mut(&token) {
            c.pid = pid;
            if let (Some(sink), Some(s)) = (&self.p.trace, c.session) {
                sink.session_pid(s.0, pid);
            }
        }
    }

    fn take_lane(&mut self, token: u64) -> u32 {
        match self.conns.get_mut(&token) {
            Some(c) => {
                c.servers_know = true;
                let lane = c.next_lane;
                c.next_lane += 1;
                c.lanes += 1;
                lane
            }
            None => 0,
        }
    }

    /// Answer `Attach` (`with_lane`: lane 0 comes with it) or `Reattach`
    /// (no lane: a new image asks `NewLane` when it first needs one, and
    /// most images a shell starts never do).
    fn attach(&mut self, token: u64, s: SessionId, with_lane: bool) -> Result<(), String> {
        if let (Some(sink), Some(c)) = (&self.p.trace, self.conns.get(&token)) {
            sink.session_pid(s.0, c.pid);
        }
        let (lane, chans) = if with_lane {
            let lane = self.take_lane(token);
            let chans = self.make_lane(s, lane).map_err(|e| e.to_string())?;
            (Some(lane), chans)
        } else {
            (None, Vec::new())
        };
        // A copy island never sees the buffer cache (Cosh §3): its clients
        // get no descriptor of it to map.
        let mut fds: Vec<BorrowedFd<'_>> = Vec::with_capacity(2 + chans.len());
        if self.p.info.island.maps_cache() {
            fds.push(self.p.cache_fd.as_fd());
        }
        fds.push(self.p.control_fd.as_fd());
        fds.extend(chans.iter().map(|f| f.as_fd()));
        let reply = BootReply::Attached {
            session: s,
            lane,
            info: self.p.info.clone(),
        };
        send_packet(self.conn_fd(token)?, &reply, &fds).map_err(|e| e.to_string())
    }

    fn fork(&mut self, token: u64) -> Result<(), String> {
        let (ours, theirs) = rustix::net::socketpair(
            rustix::net::AddressFamily::UNIX,
            rustix::net::SocketType::SEQPACKET,
            SocketFlags::CLOEXEC,
            None,
        )
        .map_err(|e| e.to_string())?;
        let child = self.new_session();
        // No lane yet: the child asks for one at its first call, and most
        // children exec first (`BootRequest::Fork`). The child's
        // connection exists from now on; if the fork never happens the
        // parent closes its copy and the session ends.
        let born = self
            .register(ours, Some(child))
            .ok_or("cannot watch the child's connection")?;
        // The session is an exec's new image's: what its loader writes.
        let next = self
            .conns
            .get_mut(&token)
            .and_then(|c| c.next_caught.take());
        if let (Some((pid, k)), Some(c)) = (next, self.conns.get_mut(&born)) {
            c.pid = pid;
            c.caught = Some(k);
        }
        send_packet(
            self.conn_fd(token)?,
            &BootReply::Forked { child },
            &[theirs.as_fd()],
        )
        .map_err(|e| e.to_string())
    }

    fn conn_fd(&self, token: u64) -> Result<BorrowedFd<'_>, String> {
        self.conns
            .get(&token)
            .map(|c| c.fd.as_fd())
            .ok_or_else(|| "connection gone".to_string())
    }

    fn reply(&mut self, token: u64, reply: &BootReply, fds: &[OwnedFd]) {
        let fds: Vec<BorrowedFd<'_>> = fds.iter().map(|f| f.as_fd()).collect();
        let sent = match self.conns.get(&token) {
            Some(c) => send_packet(c.fd.as_fd(), reply, &fds),
            None => return,
        };
        if let Err(e) = sent {
            tracing::debug!("boot reply not delivered: {e}");
            self.close(token);
        }
    }

    fn status(&self) -> InstanceStatus {
        let servers = self.p.servers.stats();
        InstanceStatus {
            id: self.p.info.id.clone(),
            mount: self.p.info.mount.clone(),
            pid: std::process::id(),
            clients: self.conns.values().filter(|c| c.session.is_some()).count() as u64,
            lanes: self.conns.values().map(|c| c.lanes as u64).sum(),
            lanes_made: self.lanes_made,
            images_handed_over: self.images_handed_over,
            dir_names: self.p.servers.dir_names(&servers),
            servers,
            limits: crate::fs::limits::usage(&self.p.servers.control),
            poll: format!("{:?}", self.p.info.poll).to_lowercase(),
            island: self.p.info.island.name().to_string(),
            fs_policy: self.p.info.fs_policy,
            syscall_sites: self.p.info.syscall_sites.name().to_string(),
            syscall_sites_why: self.p.info.syscall_sites.why().to_string(),
            sessions: self
                .conns
                .values()
                .filter_map(|c| c.session.map(|s| (s.0, c.pid)))
                .collect(),
            health: self.p.servers.health_with_generations(),
            process_counters: crate::process_counters::snapshot(),
            scaling: {
                let (hosts, auto, changes) = self.p.servers.health.scaling();
                let servers = &self.p.servers;
                atoll_proto::boot::Scaling {
                    hosts,
                    max_hosts: servers.room() as u32,
                    auto,
                    changes,
                    members: servers.len() as u32,
                    joined: servers.health.joined(),
                    room: servers.room() as u32,
                }
            },
        }
    }
}

/// Send one packet with `fds` attached (`SCM_RIGHTS`).
pub fn send_packet(
    sock: BorrowedFd<'_>,
    msg: &BootReply,
    fds: &[BorrowedFd<'_>],
) -> std::io::Result<()> {
    // Encoded to its own size: a buffer of the largest packet was zeroed
    // for every reply (two per process start: `Fork` and `Reattach`).
    let bytes = postcard::to_allocvec(msg)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
    if bytes.len() > MAX_BOOT_PACKET {
        return Err(std::io::Error::other("boot reply larger than a packet"));
    }
    let bytes = bytes.as_slice();
    let mut space =
        vec![MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(fds.len().max(1)))];
    let mut anc = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !anc.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(std::io::Error::other("too many descriptors for one packet"));
    }
    rustix::net::sendmsg(sock, &[IoSlice::new(bytes)], &mut anc, SendFlags::NOSIGNAL)?;
    Ok(())
}
