//! Direct links between nodes that are not the first (fos §3.2: the local
//! proxy sends a message for another machine to that machine's proxy).
//!
//! With file servers on every node (`members.rs`), a program on node C
//! whose call is for member m of node B (a name hashed to m in a
//! distributed directory, a file B made) would go through the first
//! node: C's edge, the head, m's stub there, B's member host, and back
//! the same way — two network crossings each way. Instead every edge
//! links to every other node that serves members (`ReachMembers{rank}`,
//! the first message of a link to that node's peer address, taken by
//! its accept loop, `spawn.rs`), and its programs' channels to those
//! members go over it, one crossing each way:
//!
//! ```text
//!  node C                                         node B
//!  program ─ring─▶ edge forwarder of doorbell m ──Request──▶ member host
//!                  (drains m's stub here too)               (direct slot)
//!  program ◀─ring── stub of m here ◀──Reply/Inbox/ChanClosed── watcher
//! ```
//!
//! The stubs are the first node's (`members::MemberStub`, `NodeStub`):
//! each channel is told to B (`MemberChannel`) before its first request,
//! with the session and lane the first node gave the program, so B's
//! member serves it as any other channel of that session. A channel goes
//! direct only while its node's link is up when the lane is made;
//! otherwise it takes the first node's path as before (a node starting
//! later, one that restarts). A link that ends — B died, or 3 s of
//! silence (`atoll_transport`) — closes every channel on it, so the
//! program's call fails with `EIO` as through the first node, and the
//! link is made again once B answers.
//!
//! A session's end: the first node tells B (`SessionEnded`) once it
//! learns of it from C's edge, on another link than C's own requests.
//! So C first sends what the session's direct channels still hold and a
//! `Flush`, and tells the first node only after B's `Flushed` (the
//! requests are in the member's rings by then, and a server serves what a
//! dead session queued, Hare §3.7.5's posted `Adopt` among them).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use atoll_msg::ServerChannel;
use atoll_proto::SessionId;
use atoll_server::remote::RemoteMember;
use atoll_transport::{Link, TcpTransport, Transport};

use super::members::{members_of, MemberStub, NodeStub};
use super::wire::{self, NodeMsg};

/// Requests this node's programs sent over direct links (`atoll status
/// --json` at the node, `counters`).
pub static DIRECT_REQUESTS: AtomicU64 = AtomicU64::new(0);

/// How long a node waits before it tries a lost direct link again.
const RECONNECT: Duration = Duration::from_secs(1);

/// How long a session's end waits for a member node's `Flushed` at most:
/// a lost link answers sooner (its waiters are dropped), within the
/// transport's silence bound.
const FLUSH_LIMIT: Duration = Duration::from_secs(5);

/// Whether the node is ending (its edge is gone).
pub type Gone = Arc<dyn Fn() -> bool + Send + Sync>;

/// This node's direct links to the other nodes that serve members.
pub struct Peers {
    nodes: Vec<Arc<NodeStub>>,
    /// The stub of each member another node but the first serves, by
    /// member index.
    by_index: Vec<Option<Arc<MemberStub>>>,
}

impl Peers {
    /// Links from node `me` to every other node but the first of
    /// `peers`, in an instance of `members` members with `per_node` on
    /// each node but the first; each made, and made again when lost, by a
    /// thread of its own until `gone`.
    pub fn start(
        me: usize,
        peers: &[String],
        (members, per_node): (usize, usize),
        net: Arc<TcpTransport>,
        gone: Gone,
    ) -> std::io::Result<Arc<Peers>> {
        atoll_server::process_counters::publish("node.direct_requests", &DIRECT_REQUESTS);
        let mut nodes = Vec::new();
        let mut by_index = vec![None; members];
        for rank in (1..peers.len()).filter(|&r| r != me) {
            let node = NodeStub::new(rank);
            for index in members_of(rank, members, peers.len(), per_node) {
                if let Some(slot) = by_index.get_mut(index) {
                    *slot = Some(MemberStub::new(index, &node, &DIRECT_REQUESTS));
                }
            }
            nodes.push(node);
        }
        for node in &nodes {
            let (node, net, gone) = (node.clone(), net.clone(), gone.clone());
            let addr = peers[node.rank].clone();
            std::thread::Builder::new()
                .name(format!("node-peer-{}", node.rank))
                .spawn(move || link_to(me, &addr, &node, &net, &gone))?;
        }
        Ok(Arc::new(Peers { nodes, by_index }))
    }

    /// Give `chan`, of a program's lane `lane` of `session`, to member
    /// `index` over its direct link; handed back when that member is not
    /// another node's or its link is down (the caller sends it through
    /// the first node).
    pub fn take(
        &self,
        index: usize,
        session: SessionId,
        lane: u32,
        chan: ServerChannel,
    ) -> Option<ServerChannel> {
        match self.by_index.get(index).and_then(Option::as_ref) {
            Some(stub) if stub.reachable() => {
                stub.add_channel(session, lane, Arc::new(chan));
                None
            }
            _ => Some(chan),
        }
    }

    /// Send what member `index`'s direct channels hold (the edge's
    /// forwarder of that doorbell, or its dispatcher); true if any.
    pub fn forward_queued(&self, index: usize) -> bool {
        match self.by_index.get(index).and_then(Option::as_ref) {
            Some(stub) => stub.forward_queued(),
            None => false,
        }
    }

    /// Session `session` ended here: drop its direct channels, and wait
    /// until the member nodes have every request they held (`Flushed`),
    /// so that the first node's `SessionEnded`, sent after this returns,
    /// reaches them after those requests.
    pub fn end_session(&self, session: SessionId) {
        let waits: Vec<_> = self
            .by_index
            .iter()
            .flatten()
            .filter_map(|stub| stub.flush_session(session.0))
            .collect();
        for rx in waits {
            let _ = rx.recv_timeout(FLUSH_LIMIT);
        }
    }

    /// What `atoll status` at this node adds: direct links up now.
    pub fn counters(&self) -> Vec<(String, u64)> {
        let up = self.nodes.iter().filter(|n| n.is_up()).count() as u64;
        vec![
            ("node.direct_links".to_string(), up),
            (
                "node.direct_requests".to_string(),
                DIRECT_REQUESTS.load(Ordering::Relaxed),
            ),
        ]
    }
}

/// Keep a direct link from node `me` to `node` at `addr`: connect, say
/// who this is, carry it until it ends, and again after [`RECONNECT`].
fn link_to(me: usize, addr: &str, node: &NodeStub, net: &TcpTransport, gone: &Gone) {
    while !gone() {
        if let Ok(link) = net.connect(addr) {
            let link: Arc<dyn Link> = Arc::from(link);
            let hello = NodeMsg::ReachMembers { rank: me as u32 };
            if wire::send(&*link, 0, &hello).is_ok() {
                tracing::info!("node: direct link to node {} at {addr}", node.rank);
                node.carry(link);
            }
        }
        std::thread::sleep(RECONNECT);
    }
}
