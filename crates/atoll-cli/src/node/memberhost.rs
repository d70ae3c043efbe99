//! The serving side of file servers on every node (`members.rs`): node
//! k's members, and the links that carry other nodes' clients' traffic to
//! them — the first node's member link (its stubs, on behalf of its own
//! programs and every edge's that reach k through the head), and a
//! *direct link* from each other node (`peers.rs`), whose programs reach
//! k's members in one crossing. Each link names its channels with ids of
//! its own (`MemberChannel`, first request); a channel's replies, inbox
//! messages and end go back on the link that made it.

use std::collections::HashMap;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use atoll_msg::watch::{self, Bell};
use atoll_msg::{ClientChannel, RingSize, ServerChannel};
use atoll_proto::SessionId;
use atoll_server::remote::LoneMember;
use atoll_server::server::Admin;
use atoll_transport::{Link, Message};

use super::wire::{self, ChanId, NodeMsg};

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Which link a channel came on: [`HEAD`] for the first node's, a number
/// of its own for each direct link.
type Slot = u64;
/// The first node's member link.
const HEAD: Slot = 0;

/// Node k's members and the links that carry their traffic.
pub struct MemberHost {
    /// The first node's member link: its end is the node's.
    link: Arc<dyn Link>,
    members: Vec<LoneMember>,
    chans: Mutex<HashMap<(Slot, ChanId), Arc<HostChan>>>,
    next_slot: AtomicU64,
    /// Moves when a channel comes or goes (the watcher's snapshot).
    generation: AtomicU64,
    /// Wakes the watcher: a channel came, or the link ended.
    bell: Bell,
}

/// A channel of one of this node's members, on behalf of a client another
/// node knows.
struct HostChan {
    /// The link it came on, and its id there.
    slot: Slot,
    id: ChanId,
    link: Arc<dyn Link>,
    /// Position in `MemberHost::members`.
    member: usize,
    session: u64,
    lane: u32,
    chan: ClientChannel,
}

/// What one pass found for one link: notices, replies, ends.
type LinkBatch = (Slot, Arc<dyn Link>, [Vec<Message>; 3]);

/// How long the watcher sleeps at most while it watches every channel (a
/// bound, not a poll: every reply and notice wakes it).
const IDLE_WATCH: Duration = Duration::from_secs(1);
/// Its poll when a node has more channels than one `futex_waitv` watches.
const OVERFLOW_POLL: Duration = Duration::from_millis(1);

impl MemberHost {
    /// Serve `members` for the first node over `link` (whose
    /// `ServeMembers` was sent): a receiver and a watcher thread.
    pub fn start(link: Arc<dyn Link>, members: Vec<LoneMember>) -> std::io::Result<Arc<Self>> {
        let host = Arc::new(MemberHost {
            link,
            members,
            chans: Mutex::new(HashMap::new()),
            next_slot: AtomicU64::new(HEAD + 1),
            generation: AtomicU64::new(0),
            bell: Bell::default(),
        });
        let h = host.clone();
        std::thread::Builder::new()
            .name("node-members".into())
            .spawn(move || h.receive())?;
        let h = host.clone();
        std::thread::Builder::new()
            .name("node-members-watch".into())
            .spawn(move || h.watch())?;
        Ok(host)
    }

    /// What `atoll status` at this node adds (`edge.rs`): the channels
    /// its members hold for clients of other nodes now (a session's end
    /// drops them), and how many of those came on direct links.
    pub fn counters(&self) -> Vec<(String, u64)> {
        let chans = lock(&self.chans);
        let direct = chans.keys().filter(|(slot, _)| *slot != HEAD).count() as u64;
        vec![
            ("node.member_channels".to_string(), chans.len() as u64),
            ("node.direct_member_channels".to_string(), direct),
        ]
    }

    /// Give member `index` a channel of a program of this node (its
    /// edge made it): that lane reaches the member without a proxy.
    pub fn serve_direct(
        &self,
        index: usize,
        session: SessionId,
        lane: u32,
        chan: Arc<ServerChannel>,
    ) {
        match self.member(index as u32) {
            Some((_, lone)) => lone.add_channel(session, lane, chan),
            None => chan.close(),
        }
    }

    fn member(&self, index: u32) -> Option<(usize, &LoneMember)> {
        self.members
            .iter()
            .enumerate()
            .find(|(_, m)| m.index == index as usize)
    }

    fn receive(self: Arc<Self>) {
        loop {
            let m = match self.link.recv(None) {
                Ok(Some(m)) => m,
                Ok(None) => continue,
                Err(e) => {
                    tracing::warn!("node: the first node's member link ended: {e}");
                    break;
                }
            };
            match wire::decode(&m) {
                Ok(msg) => self.incoming(m.id, msg),
                Err(e) => {
                    tracing::warn!("node: {e}; ending the member link");
                    break;
                }
            }
        }
        self.link.close();
        self.bell.ring();
        for (_, hc) in lock(&self.chans).drain() {
            hc.chan.close();
        }
    }

    fn incoming(self: &Arc<Self>, id: u64, msg: NodeMsg) {
        match msg {
            NodeMsg::Hello { .. } => {}
            NodeMsg::MemberChannel {
                chan,
                member,
                session,
                lane,
            } => self.channel_made(HEAD, &self.link, chan, member, session, lane),
            NodeMsg::Request { chan, frame } => self.request(HEAD, &self.link, chan, &frame),
            NodeMsg::SessionEnded { member, session } => {
                if let Some((pos, lone)) = self.member(member) {
                    lone.post(Admin::SessionClosed(SessionId(session)));
                    // Its channels on every link: a direct link's too (its
                    // sender flushed them before the session's end reached
                    // the first node: `peers.rs`).
                    self.forget(|hc| hc.member == pos && hc.session == session);
                }
            }
            NodeMsg::RetireLanes {
                member,
                session,
                before,
            } => {
                if let Some((pos, lone)) = self.member(member) {
                    lone.post(Admin::RetireLanes {
                        session: SessionId(session),
                        before,
                    });
                    let retired = |hc: &HostChan| {
                        hc.member == pos && hc.session == session && hc.lane < before
                    };
                    self.forget(retired);
                }
            }
            NodeMsg::MemberStats { member } => {
                // The member answers between two requests: not on this
                // thread, which carries its requests.
                let host = self.clone();
                let _ = std::thread::Builder::new()
                    .name("node-member-stats".into())
                    .spawn(move || {
                        let stats = host.member(member).and_then(|(_, m)| m.stats());
                        let _ = wire::send(&*host.link, id, &NodeMsg::StatsReply { stats });
                    });
            }
            other => tracing::warn!("node: unexpected {other:?} on the member link"),
        }
    }

    /// Carry a direct link from node `rank` (its `ReachMembers` read)
    /// until it ends; then its channels close, so the server drops them.
    pub fn serve_peer(self: Arc<Self>, rank: u32, link: Arc<dyn Link>) {
        let slot = self.next_slot.fetch_add(1, Ordering::Relaxed);
        tracing::info!("node: node {rank} reaches this node's members directly");
        loop {
            let m = match link.recv(None) {
                Ok(Some(m)) => m,
                Ok(None) => continue,
                Err(e) => {
                    tracing::info!("node: the direct link of node {rank} ended: {e}");
                    break;
                }
            };
            match wire::decode(&m) {
                Ok(NodeMsg::MemberChannel {
                    chan,
                    member,
                    session,
                    lane,
                }) => self.channel_made(slot, &link, chan, member, session, lane),
                Ok(NodeMsg::Request { chan, frame }) => self.request(slot, &link, chan, &frame),
                Ok(NodeMsg::Flush { member, session }) => {
                    // Every request before it is in the member's rings
                    // (`request` delivers at once): the session's end may
                    // go to the first node, whose `SessionEnded` the
                    // member serves after them.
                    if let Some((pos, _)) = self.member(member) {
                        self.forget(|hc| {
                            hc.slot == slot && hc.member == pos && hc.session == session
                        });
                    }
                    if wire::send(&*link, m.id, &NodeMsg::Flushed).is_err() {
                        break;
                    }
                }
                Ok(other) => tracing::warn!("node: unexpected {other:?} on a direct link"),
                Err(e) => {
                    tracing::warn!("node: {e}; ending node {rank}'s direct link");
                    break;
                }
            }
        }
        link.close();
        let mut chans = lock(&self.chans);
        chans.retain(|_, hc| {
            if hc.slot != slot {
                return true;
            }
            hc.chan.close();
            false
        });
        drop(chans);
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.bell.ring();
    }

    /// A client of another node got channel `chan` of `link` to `member`.
    fn channel_made(
        &self,
        slot: Slot,
        link: &Arc<dyn Link>,
        chan: ChanId,
        member: u32,
        session: u64,
        lane: u32,
    ) {
        let made = self.member(member).and_then(|(pos, lone)| {
            // Its calls carry a copy island's data calls (large frames).
            let (fd, sc) = ServerChannel::create(RingSize::Large).ok()?;
            let cc = ClientChannel::map(fd.as_fd()).ok()?;
            lone.add_channel(SessionId(session), lane, Arc::new(sc));
            Some(HostChan {
                slot,
                id: chan,
                link: link.clone(),
                member: pos,
                session,
                lane,
                chan: cc,
            })
        });
        match made {
            Some(hc) => {
                lock(&self.chans).insert((slot, chan), Arc::new(hc));
                self.generation.fetch_add(1, Ordering::AcqRel);
                self.bell.ring();
            }
            None => {
                let _ = wire::send(&**link, 0, &NodeMsg::ChanClosed { chan });
            }
        }
    }

    /// A request for channel `chan` of `link`: into its member's ring.
    fn request(&self, slot: Slot, link: &Arc<dyn Link>, chan: ChanId, frame: &[u8]) {
        let hc = lock(&self.chans).get(&(slot, chan)).cloned();
        let sent = hc.is_some_and(|hc| {
            let lone = &self.members[hc.member];
            hc.chan
                .send(frame, lone.control.doorbell(lone.index))
                .is_ok()
        });
        if !sent {
            let _ = wire::send(&**link, 0, &NodeMsg::ChanClosed { chan });
        }
    }

    /// Drop the channels `gone` picks: their member dropped them (a
    /// server closes no channel of a session that ended; it serves what
    /// the session queued and forgets it), and so does the other node.
    fn forget(&self, gone: impl Fn(&HostChan) -> bool) {
        let mut chans = lock(&self.chans);
        let before = chans.len();
        chans.retain(|_, hc| !gone(hc));
        if chans.len() != before {
            self.generation.fetch_add(1, Ordering::AcqRel);
            self.bell.ring();
        }
    }

    /// Relay what the members write for their clients: replies, inbox
    /// messages, overflows and ends, each on the link its channel came
    /// on. Sleeps on every channel's reply ring and inbox at once
    /// (`atoll_msg::watch`), so each leaves when written.
    fn watch(self: Arc<Self>) {
        let mut snapshot: Vec<Arc<HostChan>> = Vec::new();
        let mut seen = u64::MAX;
        while !self.link.is_closed() {
            let rings = self.bell.rings();
            let generation = self.generation.load(Ordering::Acquire);
            if generation != seen {
                snapshot = lock(&self.chans).values().cloned().collect();
                seen = generation;
            }
            for (slot, link, batch) in self.gather(&snapshot) {
                // A direct link that fails ends at its receiver, which
                // closes its channels; the first node's ends the node.
                if link.send_all(&batch).is_err() && slot == HEAD {
                    return;
                }
            }
            let watched: Vec<watch::Watched<'_>> =
                snapshot.iter().map(|hc| (&hc.chan, true)).collect();
            let limit = match watch::words(&watched) > watch::MAX_WATCHED {
                true => OVERFLOW_POLL,
                false => IDLE_WATCH,
            };
            watch::wait_for_notices(&watched, &self.bell, rings, limit);
        }
    }

    /// One pass over the channels, a batch per link: replies first
    /// (reading them makes the inbox messages a server wrote before them
    /// visible), sent after the inbox messages, as a server writes its
    /// invalidations before it replies; ends last.
    fn gather(&self, snapshot: &[Arc<HostChan>]) -> Vec<(Slot, Arc<dyn Link>, Vec<Message>)> {
        let mut per_link: Vec<LinkBatch> = Vec::new();
        let mut of = |hc: &HostChan| -> usize {
            match per_link.iter().position(|(s, _, _)| *s == hc.slot) {
                Some(i) => i,
                None => {
                    per_link.push((hc.slot, hc.link.clone(), Default::default()));
                    per_link.len() - 1
                }
            }
        };
        let mut found: Vec<(usize, usize, Message)> = Vec::new();
        for hc in snapshot {
            while let Ok(Some(frame)) = hc.chan.try_recv(|b| b.to_vec()) {
                let msg = NodeMsg::Reply { chan: hc.id, frame };
                found.push((of(hc), 1, wire::message(0, &msg)));
            }
        }
        for hc in snapshot {
            let at = of(hc);
            let _ = hc.chan.drain_inbox(|b| {
                let msg = NodeMsg::Inbox {
                    chan: hc.id,
                    frame: b.to_vec(),
                };
                found.push((at, 0, wire::message(0, &msg)));
            });
            if hc.chan.take_inbox_overflow() {
                let msg = NodeMsg::InboxOverflow { chan: hc.id };
                found.push((at, 0, wire::message(0, &msg)));
            }
            if hc.chan.is_closed() && lock(&self.chans).remove(&(hc.slot, hc.id)).is_some() {
                self.generation.fetch_add(1, Ordering::AcqRel);
                let msg = NodeMsg::ChanClosed { chan: hc.id };
                found.push((at, 2, wire::message(0, &msg)));
            }
        }
        for (at, kind, msg) in found {
            per_link[at].2[kind].push(msg);
        }
        per_link
            .into_iter()
            .filter_map(|(slot, link, [mut notices, mut replies, mut ends])| {
                notices.append(&mut replies);
                notices.append(&mut ends);
                (!notices.is_empty()).then_some((slot, link, notices))
            })
            .collect()
    }
}
