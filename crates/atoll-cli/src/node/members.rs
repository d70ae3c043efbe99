//! File servers on every node (`atoll node --servers-here N`; fos §3.2,
//! §4.2: a message to a server on another machine goes to the local
//! proxy, over the network, to the remote proxy, behind the same API).
//!
//! ```text
//!  first node                                  node k
//!  client ─ring─▶ stub of member m ──Request──▶ host of k's members
//!   (or the head    (waits on doorbell m, as     (a client of member m:
//!    for an edge's   server m would; drains       delivers into the real
//!    program)        m's channels)                server's rings)
//!  client ◀─ring── stub ◀──Reply/Inbox/ChanClosed── watcher of the host
//! ```
//!
//! The first node boots the instance with every member: its own servers
//! `0..local`, and `per_node` members for each other node, served there
//! by a [`LoneMember`] (a server thread with that host's memory). To the
//! boot thread a remote member is a [`RemoteMember`] (`ServerLink::Remote`),
//! so sessions, lanes and channels are made as for any member; its stub
//! here forwards its channels over a link of their own (`ServeMembers`,
//! the first message of a second link from node k), and node k's host
//! (`memberhost.rs`) makes a channel of its memory for each, given to its
//! member with the first node's session id and lane. The first node's
//! programs, and the head on behalf of an edge's lanes made while that
//! edge had no direct link to node k, reach member m through its stub; an
//! edge's other lanes reach it through the edge's own stub of m over its
//! direct link (`peers.rs`), and node k's own programs through their
//! channels to it: nothing in a client or a server changes, and a server
//! never learns where a request came from. What stays on the first node: the root directory (server
//! 0), the boot thread (sessions, lanes), the name service and the
//! watchdog of its own servers.
//!
//! Failure (issue 16 item 6): when node k's link ends (end of stream, a
//! reset, or 3 s of silence: `atoll_transport`), every channel of its
//! members is closed here, so a call on a name they own fails with `EIO`
//! (a call waiting for its reply too), and a channel made later is closed
//! at once; the other members go on. Node k's members keep no journal:
//! what they held is gone with the node.

use atoll_msg::{Control, ServerChannel};
use atoll_proto::boot::PollMode;
use atoll_proto::{ServerStats, SessionId};
use atoll_server::remote::RemoteMember;
use atoll_server::server::Admin;
use atoll_transport::{Link, Message};
use std::collections::HashMap;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};

use super::wire::{self, ChanId, NodeMsg};

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Which members node `rank` serves, in an instance of `members` members
/// over `nodes` nodes with `per_node` members on each node but the first.
pub fn members_of(rank: usize, members: usize, nodes: usize, per_node: usize) -> Vec<usize> {
    let local = members.saturating_sub(nodes.saturating_sub(1) * per_node);
    match rank {
        0 => (0..local).collect(),
        k => (local + (k - 1) * per_node..local + k * per_node).collect(),
    }
}

/// Requests the first node's stubs forwarded to the nodes that serve
/// their members (`atoll status --json` at the first node, `counters`):
/// a program's calls to its own node's members are not among them.
pub static MEMBER_REQUESTS: AtomicU64 = AtomicU64::new(0);

/// The first node's stand-ins for every member served elsewhere.
pub struct Stubs {
    nodes: Vec<Arc<NodeStub>>,
    members: Vec<Arc<MemberStub>>,
}

/// One other node, as the stubs of its members reach it (at the first
/// node, and at every other node for its direct links: `peers.rs`).
pub(super) struct NodeStub {
    pub(super) rank: usize,
    /// The node's member link, while it is up.
    link: Mutex<Option<Arc<dyn Link>>>,
    /// Every channel of its members, by the id the node knows it by.
    chans: Mutex<HashMap<ChanId, Arc<ServerChannel>>>,
    next_id: AtomicU64,
    /// `atoll status` questions waiting for the node's answer.
    waiters: Mutex<HashMap<u64, Sender<ServerStats>>>,
    /// `Flush`es waiting for their `Flushed` (direct links).
    flushes: Mutex<HashMap<u64, Sender<()>>>,
}

/// Member `index`, served by `node`.
pub struct MemberStub {
    pub(super) index: usize,
    node: Arc<NodeStub>,
    /// Its channels, drained by its forwarder.
    chans: Mutex<Vec<StubChan>>,
    /// Where the requests it forwards are counted.
    counter: &'static AtomicU64,
}

/// A channel of a remote member, told to its node at its first request
/// (`announce`): a program of that node reaches its member through a
/// channel its edge gives the member directly (`edge.rs`), and the
/// channel the instance made for the same lane, never used, costs the
/// node nothing.
struct StubChan {
    id: ChanId,
    session: u64,
    lane: u32,
    chan: Arc<ServerChannel>,
    /// `MemberChannel` to send before its first request; `None` once sent.
    announce: Option<NodeMsg>,
}

impl Stubs {
    /// Stubs for the members of nodes `1..nodes` in an instance whose
    /// first node serves `local` members.
    pub fn new(local: usize, nodes: usize, per_node: usize) -> Arc<Stubs> {
        atoll_server::process_counters::publish("node.member_requests", &MEMBER_REQUESTS);
        let members = local + nodes.saturating_sub(1) * per_node;
        let mut all = Vec::new();
        let mut by_node = Vec::new();
        for rank in 1..nodes {
            let node = NodeStub::new(rank);
            for index in members_of(rank, members, nodes, per_node) {
                all.push(MemberStub::new(index, &node, &MEMBER_REQUESTS));
            }
            by_node.push(node);
        }
        Arc::new(Stubs {
            nodes: by_node,
            members: all,
        })
    }

    /// What the instance boots with for its remote members, in order.
    pub fn remote_members(&self) -> Vec<Arc<dyn RemoteMember>> {
        self.members
            .iter()
            .map(|m| m.clone() as Arc<dyn RemoteMember>)
            .collect()
    }

    /// Start each member's forwarder, waiting on its doorbell in the
    /// instance's control block as its server would.
    pub fn start(&self, control: Control) -> std::io::Result<()> {
        let control = Arc::new(control);
        for m in &self.members {
            let (m, control) = (m.clone(), control.clone());
            std::thread::Builder::new()
                .name(format!("node-stub-{}", m.index))
                .spawn(move || m.forward(&control))?;
        }
        Ok(())
    }

    /// Carry node `rank`'s member link until it ends (the head's pump of
    /// a link whose first message was `ServeMembers`).
    pub fn serve(&self, rank: usize, link: Arc<dyn Link>) {
        let Some(node) = self.nodes.iter().find(|n| n.rank == rank) else {
            tracing::warn!("node: members offered by rank {rank}, which serves none");
            link.close();
            return;
        };
        tracing::info!("node: the members of node {rank} are served");
        node.carry(link);
    }
}

impl NodeStub {
    pub(super) fn new(rank: usize) -> Arc<NodeStub> {
        Arc::new(NodeStub {
            rank,
            link: Mutex::new(None),
            chans: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            waiters: Mutex::new(HashMap::new()),
            flushes: Mutex::new(HashMap::new()),
        })
    }

    /// Whether the node's link is up now.
    pub(super) fn is_up(&self) -> bool {
        lock(&self.link).as_ref().is_some_and(|l| !l.is_closed())
    }

    /// Carry `link` to the node until it ends: the stubs send on it, and
    /// what the node answers reaches their clients; then every channel of
    /// its members closes (`lost`).
    pub(super) fn carry(&self, link: Arc<dyn Link>) {
        let rank = self.rank;
        if let Some(old) = lock(&self.link).replace(link.clone()) {
            old.close();
        }
        loop {
            match link.recv(None) {
                Ok(Some(m)) => match wire::decode(&m) {
                    Ok(msg) => self.incoming(m.id, msg),
                    Err(e) => {
                        tracing::warn!("node: {e}; dropping node {rank}'s members");
                        break;
                    }
                },
                Ok(None) => continue,
                Err(e) => {
                    tracing::warn!("node: lost the members of node {rank}: {e}");
                    break;
                }
            }
        }
        link.close();
        self.lost(&link);
    }

    fn send(&self, id: u64, msg: &NodeMsg) -> bool {
        let link = lock(&self.link).clone();
        link.is_some_and(|l| wire::send(&*l, id, msg).is_ok())
    }

    fn chan(&self, chan: ChanId) -> Option<Arc<ServerChannel>> {
        lock(&self.chans).get(&chan).cloned()
    }

    /// A message of the node, for the clients of its members.
    fn incoming(&self, id: u64, msg: NodeMsg) {
        match msg {
            NodeMsg::Reply { chan, frame } => {
                if let Some(ch) = self.chan(chan) {
                    // Waits for room (a client takes its replies); fails
                    // only once the channel closed.
                    let _ = ch.reply(&frame);
                }
            }
            NodeMsg::Inbox { chan, frame } => {
                if let Some(ch) = self.chan(chan) {
                    let _ = ch.notify(&frame);
                }
            }
            NodeMsg::InboxOverflow { chan } => {
                if let Some(ch) = self.chan(chan) {
                    ch.raise_inbox_overflow();
                }
            }
            NodeMsg::ChanClosed { chan } => {
                if let Some(ch) = lock(&self.chans).remove(&chan) {
                    ch.close();
                }
            }
            NodeMsg::StatsReply { stats } => {
                let waiter = lock(&self.waiters).remove(&id);
                if let (Some(tx), Some(s)) = (waiter, stats) {
                    let _ = tx.send(s);
                }
            }
            NodeMsg::Flushed => {
                if let Some(tx) = lock(&self.flushes).remove(&id) {
                    let _ = tx.send(());
                }
            }
            other => tracing::warn!("node: unexpected {other:?} from a member node"),
        }
    }

    /// The link ended: every channel of the node's members closes, so
    /// their clients' calls fail with `EIO` instead of waiting.
    fn lost(&self, link: &Arc<dyn Link>) {
        {
            let mut current = lock(&self.link);
            if current.as_ref().is_some_and(|l| Arc::ptr_eq(l, link)) {
                *current = None;
            }
        }
        for (_, ch) in lock(&self.chans).drain() {
            ch.close();
        }
        lock(&self.waiters).clear();
        // Their waiters see the senders go: nothing more reaches the node.
        lock(&self.flushes).clear();
    }
}

impl MemberStub {
    pub(super) fn new(
        index: usize,
        node: &Arc<NodeStub>,
        counter: &'static AtomicU64,
    ) -> Arc<MemberStub> {
        Arc::new(MemberStub {
            index,
            node: node.clone(),
            chans: Mutex::new(Vec::new()),
            counter,
        })
    }

    /// Forward the requests of this member's channels to its node: wait
    /// on its doorbell as its server would (spinning briefly, then
    /// sleeping), and send what each pass finds as one batch.
    fn forward(&self, control: &Control) {
        let doorbell = control.doorbell(self.index);
        loop {
            doorbell.wait(PollMode::Adaptive);
            self.forward_queued();
        }
    }

    /// Send what this member's channels hold to its node, as one batch;
    /// true if there was any. Whoever calls it (its forwarder, or an
    /// edge's forwarder of that doorbell: `peers.rs`) sends under the
    /// channel list's lock, so a channel's frames leave in ring order.
    pub(super) fn forward_queued(&self) -> bool {
        let mut batch: Vec<Message> = Vec::new();
        let mut frames = 0u64;
        let mut chans = lock(&self.chans);
        chans.retain(|sc| !sc.chan.is_closed());
        for sc in chans.iter_mut() {
            frames += sc.drain(&mut batch);
        }
        if batch.is_empty() {
            return false;
        }
        self.counter.fetch_add(frames, Ordering::Relaxed);
        let link = lock(&self.node.link).clone();
        let sent = link.is_some_and(|l| l.send_all(&batch).is_ok());
        if !sent {
            // No node to serve them: fail the calls now rather than
            // leave them waiting (the node's loss closes the rest).
            for sc in chans.iter() {
                sc.chan.close();
            }
        }
        true
    }

    /// Session `session` ended at this node (a direct link's sender,
    /// `peers.rs`): drop its channels, sending what they still hold,
    /// then `Flush`, whose `Flushed` says those requests are in the
    /// member's rings. `None` when nothing of the session ever reached
    /// the node (no channel announced) or the link is down.
    pub(super) fn flush_session(&self, session: u64) -> Option<Receiver<()>> {
        let mut batch = Vec::new();
        let mut frames = 0;
        let mut used = false;
        let mut chans = lock(&self.chans);
        chans.retain_mut(|sc| {
            if sc.session != session {
                return true;
            }
            frames += sc.drain(&mut batch);
            used |= sc.announce.is_none();
            lock(&self.node.chans).remove(&sc.id);
            false
        });
        self.counter.fetch_add(frames, Ordering::Relaxed);
        if !used {
            return None;
        }
        let id = self.node.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel();
        lock(&self.node.flushes).insert(id, tx);
        let member = self.index as u32;
        batch.push(wire::message(id, &NodeMsg::Flush { member, session }));
        let link = lock(&self.node.link).clone();
        if link.is_none_or(|l| l.send_all(&batch).is_err()) {
            lock(&self.node.flushes).remove(&id);
            return None;
        }
        Some(rx)
    }
}

impl StubChan {
    /// Move the requests waiting in this channel into `batch`, told to
    /// the node first if they are its first; how many.
    fn drain(&mut self, batch: &mut Vec<Message>) -> u64 {
        let mut frames = 0;
        loop {
            match self.chan.try_recv(|b| b.to_vec()) {
                Ok(Some(frame)) => {
                    if let Some(made) = self.announce.take() {
                        batch.push(wire::message(0, &made));
                    }
                    frames += 1;
                    let chan = self.id;
                    batch.push(wire::message(0, &NodeMsg::Request { chan, frame }));
                }
                Ok(None) => return frames,
                Err(_) => {
                    self.chan.close();
                    return frames;
                }
            }
        }
    }
}

impl MemberStub {
    /// Forget the channels `gone` picks (a session's end, retired lanes):
    /// neither the instance nor the server closes them, they are dropped.
    /// With `serve`, what they still hold leaves first (a server serves
    /// what a dead session queued); then `then`, on the same link, so the
    /// node's member sees it after those requests.
    fn drop_chans(&self, gone: impl Fn(&StubChan) -> bool, serve: bool, then: NodeMsg) {
        let mut batch = Vec::new();
        let mut frames = 0;
        let mut chans = lock(&self.chans);
        chans.retain_mut(|sc| {
            if !gone(sc) {
                return true;
            }
            if serve {
                frames += sc.drain(&mut batch);
            }
            lock(&self.node.chans).remove(&sc.id);
            false
        });
        self.counter.fetch_add(frames, Ordering::Relaxed);
        batch.push(wire::message(0, &then));
        let link = lock(&self.node.link).clone();
        if let Some(l) = link {
            let _ = l.send_all(&batch);
        }
    }
}

impl RemoteMember for MemberStub {
    fn reachable(&self) -> bool {
        self.node.is_up()
    }

    fn add_channel(&self, session: SessionId, lane: u32, channel: Arc<ServerChannel>) {
        if lock(&self.node.link).is_none() {
            // The node is not (or no longer) there: `EIO` at once.
            channel.close();
            return;
        }
        let id = self.node.next_id.fetch_add(1, Ordering::Relaxed);
        lock(&self.node.chans).insert(id, channel.clone());
        let announce = Some(NodeMsg::MemberChannel {
            chan: id,
            member: self.index as u32,
            session: session.0,
            lane,
        });
        lock(&self.chans).push(StubChan {
            id,
            session: session.0,
            lane,
            chan: channel,
            announce,
        });
    }

    fn post(&self, msg: Admin) {
        let member = self.index as u32;
        match msg {
            Admin::SessionClosed(s) => {
                let session = s.0;
                let end = NodeMsg::SessionEnded { member, session };
                self.drop_chans(|c| c.session == session, true, end);
            }
            Admin::RetireLanes { session, before } => {
                // A server drops retired lanes' channels unserved.
                let session = session.0;
                let end = NodeMsg::RetireLanes {
                    member,
                    session,
                    before,
                };
                self.drop_chans(|c| c.session == session && c.lane < before, false, end);
            }
            Admin::Stats(tx) => {
                let id = self.node.next_id.fetch_add(1, Ordering::Relaxed);
                lock(&self.node.waiters).insert(id, tx);
                if !self.node.send(id, &NodeMsg::MemberStats { member }) {
                    lock(&self.node.waiters).remove(&id);
                }
            }
            // Directory names are asked of the first node's servers only
            // (a remote member's hot directories are reported unnamed).
            Admin::DirNames(_, tx) => {
                let _ = tx.send(Vec::new());
            }
            Admin::NewChannel {
                session,
                lane,
                channel,
            } => self.add_channel(session, lane, channel),
            _ => {}
        }
    }
}

/// The instance's control block, for the stubs' doorbells.
pub fn control_of(instance: &atoll_server::Instance) -> std::io::Result<Control> {
    let fd = instance.control_fd()?;
    Control::map(fd.as_fd())
}

#[cfg(test)]
mod tests {
    use super::members_of;

    #[test]
    fn each_node_serves_its_own_group_after_the_first_nodes() {
        // Two servers on the first node, one on each of two others.
        assert_eq!(members_of(0, 4, 3, 1), vec![0, 1]);
        assert_eq!(members_of(1, 4, 3, 1), vec![2]);
        assert_eq!(members_of(2, 4, 3, 1), vec![3]);
        // Two each.
        assert_eq!(members_of(2, 6, 3, 2), vec![4, 5]);
        assert_eq!(members_of(1, 6, 3, 2), vec![2, 3]);
    }
}
