//! The edge proxy: runs on every node but the first and offers its
//! programs what an instance offers — a boot socket, a control block and
//! channels — as a copy island (fos §3.2: the local proxy takes the
//! messages whose destination is remote).
//!
//! ```text
//!  program ──boot.sock──▶ conn thread ──Boot──▶ link ──▶ head proxy
//!          ◀─reply + fds── (control block and channels made here)
//!  program ──request ring──▶ forwarder i (waits on doorbell i, as server i
//!                            would) ──Request{chan}──▶ link
//!  program ◀──reply ring / inbox── dispatcher ◀──Reply/Inbox{chan}── link
//!  program ──next request──▶ dispatcher, polling for it right after a
//!                            reply ──Request{chan}──▶ link, then polling
//!                            the link for the reply while one is owed
//! ```
//!
//! A program's calls are synchronous (one outstanding per lane), so the
//! request after a reply usually comes at once, and its reply one round
//! trip later: the dispatcher, awake anyway, takes the request and then
//! polls the link for the reply (`dispatch`), and the forwarders carry
//! the rest (a first call, calls of other lanes). On the path of a
//! program calling back to back that is no wake-up on this side, where a
//! TCP echo's client pays one (docs/BENCHMARKS.md, "One wake-up per remote
//! call"). A forwarder waits as a server does, spinning briefly before it
//! sleeps (measured against sleeping at once: 58.7 against 64.8 µs per
//! remote call); while the dispatcher polls, the forwarders sleep on a
//! bell of their own instead of the doorbells (a futex doorbell and a
//! socket cannot be slept on together), so a program's ring then wakes
//! nobody.
//!
//! Ownership: the request rings of server `i`'s channels are consumed
//! under the lock of its channel list (`per_server[i]`), by forwarder `i`
//! or the dispatcher, which send what they took before letting go of it
//! (a channel's frames leave in ring order); the dispatcher alone produces
//! into inboxes, and into a reply ring it and the holder of that list's
//! lock answering a read from the node's copies (`copies.rs`) produce
//! under the channel's `replying` lock, the latter only while no reply is
//! owed on the channel; a conn thread alone uses its boot connection and
//! closes its session's channels when the program side closes it. When the link to
//! the head ends, every channel is closed and every boot connection shut
//! down, so the programs' calls fail with `EIO` instead of waiting.

use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use atoll_msg::watch::Bell;
use atoll_msg::{Control, RingSize, ServerChannel};
use atoll_proto::boot::{BootReply, BootRequest};
use atoll_proto::SessionId;
use atoll_transport::Link;

use super::calltime::CallTimes;
use super::copies::NodeCopies;
use super::head::error_packet;
use super::memberhost::MemberHost;
use super::peers::Peers;
use super::seqpacket;
use super::wire::{self, ChanId, ConnId, NodeMsg};

/// How long a program's boot call waits for the head before it fails.
const BOOT_CALL_LIMIT: Duration = Duration::from_secs(30);

/// A local channel: the real one it stands for, and the process (boot
/// connection) it belongs to.
struct LocalChan {
    id: ChanId,
    conn: ConnId,
    sc: ServerChannel,
    /// Replies owed on this channel (calls sent less replies relayed): a
    /// read answered by the node's copies must not pass one.
    owed: AtomicU32,
    /// Held while a reply is put in the ring: the dispatcher and a thread
    /// answering from the node's copies both produce into it. It guards
    /// the answers waiting for owed replies too.
    replying: Mutex<Held>,
    /// When the call being timed left for the head (`WireCounts::leg`;
    /// 0: none).
    started: AtomicU64,
}

#[path = "edge_held.rs"]
mod held;
#[path = "edge_relay.rs"]
mod relay;

use held::Held;

pub struct Edge {
    link: Arc<dyn Link>,
    /// The members this node serves (`members.rs`), for its programs'
    /// creation affinity.
    node_members: Vec<u32>,
    /// Those members, once started: a program's channels to them are
    /// given to them directly.
    pub locals: OnceLock<Arc<MemberHost>>,
    /// Direct links to the other nodes' members (`peers.rs`), once made:
    /// a program's channels to those members go over them.
    pub peers: OnceLock<Arc<Peers>>,
    /// The instance's switch for them (`--without direct-links` at the
    /// first node), learnt from its programs' `Attached` as the others.
    direct_links: AtomicBool,
    /// The session of each boot connection, as its replies named it.
    sessions: Mutex<HashMap<ConnId, SessionId>>,
    control_fd: OwnedFd,
    control: Control,
    chans: Mutex<HashMap<ChanId, Arc<LocalChan>>>,
    /// Per server: the local channels forwarder `i` polls.
    per_server: Vec<Mutex<Vec<Arc<LocalChan>>>>,
    /// Boot calls waiting for the head's answer, by request id.
    waiters: Mutex<HashMap<u64, Sender<NodeMsg>>>,
    /// Program-side boot connections, shut down when the head is lost.
    conns: Mutex<HashMap<ConnId, Arc<OwnedFd>>>,
    next_id: AtomicU64,
    next_conn: AtomicU64,
    /// Replies owed: calls sent to the head (posted requests get none)
    /// less replies received. Only a hint for the dispatcher's waiting (a
    /// call whose channel closed is never answered; the wait is bounded).
    owed: AtomicU32,
    /// The dispatcher polls the request rings itself (`dispatch`): the
    /// forwarders then sleep on `park`, not on the doorbells, so that a
    /// program's ring costs it no wake-up system call.
    hot: AtomicBool,
    /// Rung when the dispatcher stops polling (or the edge ends).
    park: Bell,
    /// The link is gone or the node was asked to stop.
    pub gone: AtomicBool,
    /// Why it ended: `None` when asked to (`atoll stop`, a signal).
    pub lost: Mutex<Option<String>>,
    /// Copies of remote data shared by this node's programs.
    copies: NodeCopies,
    /// Request frames sent to the head, and the messages (`Request`,
    /// `Requests`) that carried them; likewise reply frames received and
    /// their messages (`Reply`, `Replies`): `node_wire.*` in `atoll
    /// status` at this node.
    wire: WireCounts,
}

/// How many ring frames crossed in how many messages, each way.
#[derive(Default)]
struct WireCounts {
    request_frames: AtomicU64,
    request_messages: AtomicU64,
    reply_frames: AtomicU64,
    reply_messages: AtomicU64,
    /// Calls from leaving for the head to their reply's coming back: the
    /// network leg of a remote call (`calltime.rs`).
    leg: CallTimes,
}

impl WireCounts {
    fn counters(&self) -> Vec<(String, u64)> {
        let (leg_ns, leg_calls) = self.leg.counters();
        [
            ("node_wire.request_frames", &self.request_frames),
            ("node_wire.request_messages", &self.request_messages),
            ("node_wire.reply_frames", &self.reply_frames),
            ("node_wire.reply_messages", &self.reply_messages),
            ("node_wire.network_leg_ns", leg_ns),
            ("node_wire.network_leg_calls", leg_calls),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.load(Ordering::Relaxed)))
        .collect()
    }
}

impl Edge {
    /// Set up the local face of an instance of `servers` servers behind
    /// `link`, and start the forwarders and the dispatcher.
    pub fn start(
        link: Arc<dyn Link>,
        servers: usize,
        node_members: Vec<u32>,
    ) -> std::io::Result<Arc<Edge>> {
        let (control_fd, control) = Control::create(servers)?;
        // This node's own members wait on their doorbells themselves.
        let forwarded: Vec<usize> = (0..servers)
            .filter(|&i| !node_members.contains(&(i as u32)))
            .collect();
        let edge = Arc::new(Edge {
            node_members,
            locals: OnceLock::new(),
            peers: OnceLock::new(),
            direct_links: AtomicBool::new(true),
            sessions: Mutex::new(HashMap::new()),
            link,
            control_fd,
            control,
            chans: Mutex::new(HashMap::new()),
            per_server: (0..servers).map(|_| Mutex::new(Vec::new())).collect(),
            waiters: Mutex::new(HashMap::new()),
            conns: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            next_conn: AtomicU64::new(1),
            owed: AtomicU32::new(0),
            hot: AtomicBool::new(false),
            park: Bell::default(),
            gone: AtomicBool::new(false),
            lost: Mutex::new(None),
            copies: NodeCopies::default(),
            wire: WireCounts::default(),
        });
        for i in forwarded {
            let e = edge.clone();
            std::thread::Builder::new()
                .name(format!("node-fwd-{i}"))
                .spawn(move || e.forward(i))?;
        }
        let e = edge.clone();
        std::thread::Builder::new()
            .name("node-dispatch".into())
            .spawn(move || e.dispatch())?;
        Ok(edge)
    }

    /// Accept programs' boot connections on `listener` until gone.
    pub fn accept(self: &Arc<Edge>, listener: OwnedFd) {
        while !self.gone.load(Ordering::Relaxed) {
            let sock = match rustix::net::accept_with(&listener, rustix::net::SocketFlags::CLOEXEC)
            {
                Ok(s) => s,
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => {
                    tracing::warn!("node: accept: {e}");
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                }
            };
            let conn = self.next_conn.fetch_add(1, Ordering::Relaxed);
            self.spawn_conn(conn, sock, Vec::new());
        }
    }

    fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    fn spawn_conn(self: &Arc<Edge>, conn: ConnId, sock: OwnedFd, owned: Vec<ChanId>) {
        let sock = Arc::new(sock);
        self.conns
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(conn, sock.clone());
        let e = self.clone();
        let _ = std::thread::Builder::new()
            .name("node-conn".into())
            .spawn(move || e.serve_conn(conn, sock, owned));
    }

    /// One program-side boot connection: each packet goes to the head;
    /// each answer comes back with local descriptors in place of the
    /// instance's.
    fn serve_conn(self: Arc<Edge>, conn: ConnId, sock: Arc<OwnedFd>, mut owned: Vec<ChanId>) {
        while let Ok((packet, _)) = seqpacket::recv(sock.as_fd()) {
            if packet.is_empty() || self.gone.load(Ordering::Relaxed) {
                break;
            }
            let request = postcard::from_bytes::<BootRequest>(&packet);
            match request {
                // Posts (`ChildPid`, `Counters`, `Reattached`): no answer to
                // wait for.
                Ok(ref r) if !r.is_answered() => {
                    let _ =
                        wire::send(&*self.link, self.next_id(), &NodeMsg::Boot { conn, packet });
                    continue;
                }
                Ok(BootRequest::Stop) => {
                    // `atoll stop` at a node stops that node, not the image.
                    let bytes = postcard::to_allocvec(&BootReply::Stopping).unwrap_or_default();
                    let _ = seqpacket::send(sock.as_fd(), &bytes, &[]);
                    self.end(None);
                    break;
                }
                _ => {}
            }
            let answer = self.boot_call(conn, packet);
            if let Err(e) = self.answer(conn, sock.as_fd(), answer, &mut owned) {
                tracing::info!("node: boot connection {conn}: {e}");
                break;
            }
        }
        // The session's requests on direct links reach their nodes before
        // the first node can tell those nodes that it ended (`peers.rs`).
        let session = self
            .sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&conn)
            .copied();
        if let (Some(peers), Some(s)) = (self.peers.get(), session) {
            peers.end_session(s);
        }
        let _ = wire::send(&*self.link, 0, &NodeMsg::ConnClosed { conn });
        self.sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&conn);
        self.conns
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&conn);
        let mut chans = self.chans.lock().unwrap_or_else(|e| e.into_inner());
        for c in owned {
            if let Some(lc) = chans.remove(&c) {
                lc.sc.close();
                self.copies.with(|m| m.chan_closed(c));
            }
        }
        drop(chans);
        self.copies.with(|m| m.conn_closed(conn));
    }

    /// Send a boot packet to the head and wait for its answer.
    fn boot_call(&self, conn: ConnId, packet: Vec<u8>) -> Option<NodeMsg> {
        let id = self.next_id();
        let (tx, rx) = mpsc::channel();
        self.waiters
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, tx);
        if wire::send(&*self.link, id, &NodeMsg::Boot { conn, packet }).is_err() {
            return None;
        }
        let got = rx.recv_timeout(BOOT_CALL_LIMIT).ok();
        self.waiters
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
        got
    }

    /// Hand the head's answer to the program, with the descriptors it
    /// names made here: the control block, one local channel per channel
    /// id, and for a fork the child's end of a fresh connection.
    fn answer(
        self: &Arc<Edge>,
        conn: ConnId,
        sock: BorrowedFd<'_>,
        answer: Option<NodeMsg>,
        owned: &mut Vec<ChanId>,
    ) -> std::io::Result<()> {
        let Some(NodeMsg::BootReply {
            packet,
            channels,
            child,
            ..
        }) = answer
        else {
            return seqpacket::send(sock, &error_packet("lost the first node"), &[]);
        };
        let mut reply = postcard::from_bytes::<BootReply>(&packet).ok();
        // The program is on another host than the servers: it keeps
        // copies of what it reads (client `rcache.rs`).
        if let Some(BootReply::Attached { info, .. }) = &mut reply {
            info.remote = true;
            // New files and directories stay on this node's members.
            info.node_members = self.node_members.clone();
            // The instance's switches, as every program learns them.
            self.copies.set_on(!info.without.node_copies);
            self.direct_links
                .store(!info.without.direct_links, Ordering::Relaxed);
        }
        // `atoll status` at this node: its own counters beside the
        // instance's.
        if let Some(BootReply::Status(st)) = &mut reply {
            st.process_counters.extend(self.copies.counters());
            st.process_counters.extend(self.wire.counters());
            if let Some(host) = self.locals.get() {
                st.process_counters.extend(host.counters());
            }
            if let Some(peers) = self.peers.get() {
                st.process_counters.extend(peers.counters());
            }
        }
        let packet = match &reply {
            Some(r @ (BootReply::Attached { .. } | BootReply::Status(_))) => {
                postcard::to_allocvec(r).unwrap_or(packet)
            }
            _ => packet,
        };
        // A whole lane's channels to this node's own members go to them
        // directly (`members.rs`): such calls never leave the host; those
        // to other nodes' members go over the direct links (`peers.rs`).
        let direct = self
            .learn_session(conn, child, &reply)
            .filter(|_| channels.len() == self.per_server.len());
        let mut fds: Vec<OwnedFd> = Vec::new();
        if let Some(BootReply::Attached { .. }) = reply {
            fds.push(rustix::io::fcntl_dupfd_cloexec(&self.control_fd, 0)?);
        }
        let mut child_end = None;
        let mut owner = conn;
        if let (Some(BootReply::Forked { .. }), Some(child)) = (&reply, child) {
            owner = child;
            let (ours, theirs) = seqpacket::pair()?;
            fds.push(theirs);
            child_end = Some((child, ours));
        }
        // The node proxies only a copy island, whose file data travels in
        // messages of up to 32 KiB: its programs' channels are large.
        for (server, &chan) in channels.iter().enumerate() {
            let (fd, mut sc) = ServerChannel::create(RingSize::Large)?;
            if let Some((session, lane)) = direct {
                if let Some(host) = self.locals.get() {
                    if self.node_members.contains(&(server as u32)) {
                        host.serve_direct(server, session, lane, Arc::new(sc));
                        fds.push(fd);
                        continue;
                    }
                }
                let peers = self
                    .peers
                    .get()
                    .filter(|_| self.direct_links.load(Ordering::Relaxed));
                if let Some(peers) = peers {
                    match peers.take(server, session, lane, sc) {
                        None => {
                            fds.push(fd);
                            continue;
                        }
                        Some(back) => sc = back,
                    }
                }
            }
            let lc = Arc::new(LocalChan {
                id: chan,
                conn: owner,
                sc,
                owed: AtomicU32::new(0),
                replying: Mutex::new(Held::default()),
                started: AtomicU64::new(0),
            });
            self.chans
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(chan, lc.clone());
            if let Some(list) = self.per_server.get(server) {
                list.lock().unwrap_or_else(|e| e.into_inner()).push(lc);
            }
            fds.push(fd);
        }
        // The channels exist before the program hears of them, so its
        // first request always finds them (as the boot thread does).
        match child_end {
            Some((child, ours)) => self.spawn_conn(child, ours, channels),
            None => owned.extend(channels),
        }
        let borrowed: Vec<BorrowedFd<'_>> = fds.iter().map(|f| f.as_fd()).collect();
        seqpacket::send(sock, &packet, &borrowed)
    }

    /// The control block this node's programs map: its own members wait
    /// on their doorbells in it (`members.rs`).
    pub fn control_fd(&self) -> BorrowedFd<'_> {
        self.control_fd.as_fd()
    }

    /// The session and lane a boot reply's channels belong to, learning
    /// each connection's session as the replies name it (`Attached`, and
    /// `Forked` for the child's connection).
    fn learn_session(
        &self,
        conn: ConnId,
        child: Option<ConnId>,
        reply: &Option<BootReply>,
    ) -> Option<(SessionId, u32)> {
        let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        match reply {
            Some(BootReply::Attached { session, lane, .. }) => {
                sessions.insert(conn, *session);
                lane.map(|l| (*session, l))
            }
            Some(BootReply::Forked { child: s }) => {
                if let Some(c) = child {
                    sessions.insert(c, *s);
                }
                None
            }
            Some(BootReply::Lane { lane }) => sessions.get(&conn).map(|s| (*s, *lane)),
            _ => None,
        }
    }

    /// The head is unreachable (`lost` says why) or this node stops
    /// (`None`): fail everything now.
    pub fn end(&self, lost: Option<String>) {
        if self.gone.swap(true, Ordering::AcqRel) {
            return;
        }
        tracing::info!("node: ending: {lost:?}");
        *self.lost.lock().unwrap_or_else(|e| e.into_inner()) = lost;
        self.link.close();
        for lc in self
            .chans
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
        {
            lc.sc.close();
        }
        self.waiters
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        for sock in self
            .conns
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
        {
            let _ = rustix::net::shutdown(&**sock, rustix::net::Shutdown::Both);
        }
        for i in 0..self.per_server.len() {
            self.control.doorbell(i).ring();
        }
        self.cool();
    }
}

#[cfg(test)]
#[path = "edge_tests.rs"]
mod tests;
