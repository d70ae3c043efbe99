//! The head proxy: runs on the first node, beside the file servers, and
//! acts *as a client* of its instance on behalf of the programs of every
//! other node (fos §3.2: the remote proxy delivers locally).
//!
//! One thread per peer link (the *pump*) and one per boot connection of
//! that peer (a *conn worker*):
//!
//! ```text
//!  link ──Boot{conn}──▶ pump ──▶ conn worker ──packet──▶ boot.sock
//!                                    │ ◀──reply + fds────┘
//!                                    │ maps each channel fd (ClientChannel),
//!  link ◀──BootReply{channels}───────┘ names it ChanId
//!  link ──Request{chan}──▶ pump ──frame──▶ real channel ──▶ server
//!  link ◀──Reply{chan}──────── pump polls the reply rings while replies
//!                              are owed (watcher too, for slow calls)
//!  link ◀──Inbox/ChanClosed──── watcher sleeps on every inbox at once
//! ```
//!
//! Waiting: a request costs the pump one wake-up, as a TCP echo costs its
//! server one: the pump sleeps in `ppoll` on the link, so an incoming
//! request wakes it at once. Having forwarded a request, it polls for the
//! reply, yielding between polls, for [`REPLY_SPIN`]: a server answers a
//! typical call well within that, and the reply leaves as soon as it is
//! in the ring, never after a sleep. A reply still owed after that (a slow
//! call) is polled for between sleeps on the link of 50 µs growing to
//! 1 ms (see `link_wait` for why not only slept on), and once the sleeps
//! grow (a call slower than about 3 ms) the watcher sleeps on its reply
//! ring too, so it leaves when written, not at the next poll. Once a
//! yield of the pump cost a time slice (other work on its core), the
//! watcher sleeps on every reply owed for a while instead, and the pump on
//! the link ([`REPLY_HANDOFF`]). What a server sends
//! unasked — lookup invalidations, an inbox overflow, a channel's end —
//! wakes the peer's *watcher*, which sleeps on every inbox's futex word at
//! once (`atoll_msg::watch`, `futex_waitv`), so it leaves at once, not at
//! a poll (fos §3.2: the proxy delivers as the local messaging does).
//!
//! Ownership: the pump alone sends on the real channels; pump and
//! watcher take their replies and inbox messages, under one lock
//! (`Peer::gather`), so each ring has one consumer and a pass's order
//! holds; a conn worker alone uses its boot connection and registers (and
//! at its end closes) the channels its replies brought. When a peer's
//! link ends, every conn worker of it ends and its boot connections
//! close, so the servers drop those sessions as they would for processes
//! that died.

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use atoll_msg::watch::{self, Bell};
use atoll_msg::{ClientChannel, Control};
use atoll_proto::boot::{BootReply, BootRequest, Island};
use atoll_transport::{Link, Listener, Message};

use super::calltime::CallTimes;
use super::members::Stubs;
use super::seqpacket;
use super::spawn::SpawnHost;
use super::wire::{self, ChanId, ConnId, NodeMsg, HEAD_CONN};

/// A real channel held for a remote lane.
struct RealChan {
    chan: ClientChannel,
    server: usize,
    /// Request id of the last `Request` forwarded on it (echoed in replies).
    last_id: AtomicU64,
    /// Replies owed: calls forwarded on it (posted requests get none) less
    /// replies taken. A program may have several calls in flight on one
    /// channel (reads ahead), so one reply does not settle the rest.
    owed: AtomicU32,
    /// A reply is owed past the pump's spin (a slow call): the watcher
    /// sleeps on the reply ring too, so the reply leaves as soon as it is
    /// written instead of at the pump's next poll (up to 1 ms later).
    slow: AtomicBool,
    /// Past what the watcher's one `futex_waitv` watches (set by the
    /// watcher): what a server sends unasked here waits for a timer.
    unwatched: AtomicBool,
    /// When the call being timed went into the server's ring
    /// ([`SERVER_LEG`]; 0: none).
    started: AtomicU64,
}

/// A boot packet for a conn worker, with its request id.
type BootPacket = (u64, Vec<u8>);

/// Everything the threads serving one peer share.
struct Peer {
    link: Arc<dyn Link>,
    boot_socket: PathBuf,
    /// Programs started here for other hosts (`spawn.rs`), if offered.
    spawner: Option<Arc<SpawnHost>>,
    /// The stand-ins of members other nodes serve (`members.rs`), if any.
    stubs: Option<Arc<Stubs>>,
    control: OnceLock<Control>,
    chans: Mutex<HashMap<ChanId, Arc<RealChan>>>,
    /// Bumped whenever `chans` changes, so the pump re-reads it only then.
    generation: AtomicU64,
    /// Held while taking frames from the real channels and sending them:
    /// pump and watcher both do, and a ring has one consumer. It keeps the
    /// replies taken but not sent yet (`Held`).
    gather: Mutex<Held>,
    /// Wakes the watcher: channels were added or ended, or the link ended.
    bell: Bell,
    conns: Mutex<HashMap<ConnId, Sender<BootPacket>>>,
    next_chan: AtomicU64,
    next_conn: AtomicU64,
}

impl Peer {
    /// A peer that has no channels or boot connections yet.
    fn new(link: Arc<dyn Link>, boot_socket: PathBuf, spawner: Option<Arc<SpawnHost>>) -> Peer {
        Peer {
            link,
            boot_socket,
            spawner,
            stubs: None,
            control: OnceLock::new(),
            chans: Mutex::new(HashMap::new()),
            generation: AtomicU64::new(0),
            gather: Mutex::new(Held::default()),
            bell: Bell::default(),
            conns: Mutex::new(HashMap::new()),
            next_chan: AtomicU64::new(1),
            next_conn: AtomicU64::new(1),
        }
    }
}

/// Accept peers until `stop`; each gets a pump thread.
pub fn serve(
    listener: Box<dyn Listener>,
    boot_socket: PathBuf,
    hello: NodeMsg,
    spawner: Option<Arc<SpawnHost>>,
    stubs: Option<Arc<Stubs>>,
    stop: Arc<AtomicBool>,
) {
    atoll_server::process_counters::publish("node.notices_relayed", &NOTICES_RELAYED);
    atoll_server::process_counters::publish("node.notices_after_timer", &NOTICES_AFTER_TIMER);
    atoll_server::process_counters::publish("node.replies_watched", &REPLIES_WATCHED);
    atoll_server::process_counters::publish("node.replies_handed_off", &REPLIES_HANDED_OFF);
    let (ns, calls) = SERVER_LEG.counters();
    atoll_server::process_counters::publish("node.server_leg_ns", ns);
    atoll_server::process_counters::publish("node.server_leg_calls", calls);
    let mut links: Vec<Arc<dyn Link>> = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let link = match listener.accept(Some(Duration::from_millis(200))) {
            Ok(Some(l)) => Arc::<dyn Link>::from(l),
            Ok(None) => continue,
            Err(e) => {
                tracing::warn!("node: accept: {e}");
                continue;
            }
        };
        tracing::info!("node: peer {} joined", link.peer());
        let mut peer = Peer::new(link, boot_socket.clone(), spawner.clone());
        peer.stubs = stubs.clone();
        let peer = Arc::new(peer);
        links.retain(|l| !l.is_closed());
        links.push(peer.link.clone());
        if wire::send(&*peer.link, 0, &hello).is_err() {
            continue;
        }
        let watched = peer.clone();
        let _ = std::thread::Builder::new()
            .name("node-pump".into())
            .spawn(move || pump(peer));
        let _ = std::thread::Builder::new()
            .name("node-watch".into())
            .spawn(move || watch_notices(watched));
    }
    // A deliberate stop: every edge ends as stopped, not as lost (a
    // launcher such as `mpirun` then sees every rank succeed).
    for link in links {
        let _ = wire::send(&*link, 0, &NodeMsg::Stopping);
    }
}

/// How long the pump polls (yielding) for the reply to a request it
/// forwarded before it sleeps between polls: about two sleep/wake
/// hand-offs on a slow virtual machine, as a client's adaptive wait
/// (`atoll_msg::wait::ADAPTIVE_SPIN_NS`).
pub const REPLY_SPIN: Duration = Duration::from_micros(100);

/// Polls of a slow call's reply between two steps of the pump's sleep
/// (50 µs, doubling to 1 ms). At the first step (a call slower than about
/// 3 ms), the watcher starts sleeping on the reply rings still owed
/// (`mark_slow`): the pump's polls would then leave a reply up to 100 µs
/// to 1 ms late, and a wake-up of the watcher costs less than that. Not at
/// once: under load many calls outlast the pump's spin, and two wake-ups
/// of the watcher per call (the bell, the reply) would take CPU from them.
const SLOW_POLL_STEP: u32 = 64;

/// How long the pump sleeps on the link at most while the watcher waits
/// for its replies ([`REPLY_HANDOFF`]); a message on the link ends the
/// sleep at once. A bound, not a poll: the watcher sends the replies.
const HANDOFF_WAIT: Duration = Duration::from_millis(1);

/// How long the watcher sleeps before it looks at every channel anyway:
/// the poll for channels past what one `futex_waitv` watches
/// ([`watch::MAX_WATCHED`] channels of one peer: over sixty remote lanes
/// with two servers), whose unasked messages alone still wait for a timer.
const OVERFLOW_POLL: Duration = Duration::from_millis(1);

/// How long a watcher that watches every channel sleeps at most (a bound,
/// not a poll: every message it relays wakes it).
const IDLE_WATCH: Duration = Duration::from_secs(1);

/// What the head proxies relayed that a server sent unasked, for `atoll
/// status --json` (`counters`).
pub static NOTICES_RELAYED: AtomicU64 = AtomicU64::new(0);
/// Of those, how many waited for a timer: found by a pass that a timer
/// started, on a channel past the watcher's watch ([`watch::MAX_WATCHED`]);
/// every other channel's notices wake the watcher when written.
pub static NOTICES_AFTER_TIMER: AtomicU64 = AtomicU64::new(0);
/// Replies the watcher relayed (woken by the reply of a slow call) before
/// the pump's next poll found them.
pub static REPLIES_WATCHED: AtomicU64 = AtomicU64::new(0);
/// Calls whose reply the pump left to the watcher because its yields had
/// turned costly (`node.replies_handed_off`; [`REPLY_HANDOFF`]).
pub static REPLIES_HANDED_OFF: AtomicU64 = AtomicU64::new(0);

/// Whether a pump whose yield cost a time slice hands its reply waits to
/// the watcher for a while (`--without reply-handoff` clears it): on a
/// core shared with other work a `sched_yield` puts the pump behind every
/// runnable task, so the reply it polls for waits in the ring for up to a
/// time slice, while the watcher, asleep on the reply ring, is woken by
/// the server's reply with the preemption a sleeper gets. Measured on the
/// shared 2-CPU guest (docs/BENCHMARKS.md, "Where a remote round trip's
/// time goes, leg by leg"): the server leg of a null call 27 → 13 and
/// 32 → 21 µs (medians of two alternated series at loads of 5–9), the
/// round trip's median within the machine's spread.
pub static REPLY_HANDOFF: AtomicBool = AtomicBool::new(true);
/// Calls from the request's entry into a server's ring to the reply's
/// taking by the pump or the watcher: the server leg of a remote call
/// (`node.server_leg_ns`, `node.server_leg_calls`; `calltime.rs`).
pub static SERVER_LEG: CallTimes = CallTimes::new();

/// The pump of one peer: incoming messages to conn workers and real
/// channels, replies and inbox messages of real channels to the link.
fn pump(peer: Arc<Peer>) {
    let mut snapshot: Vec<(ChanId, Arc<RealChan>)> = Vec::new();
    let mut seen_generation = u64::MAX;
    let mut last_forward = Instant::now();
    let mut reply_due = false;
    // Polls since the reply spin ended with a reply still due.
    let mut slow_polls: u32 = 0;
    let handoff = REPLY_HANDOFF.load(Ordering::Relaxed);
    let mut yielder = super::yielder::Yielder::default();
    'outer: loop {
        // Incoming: a sleep here ends as soon as a message arrives; only a
        // slow call's reply waits for the next poll (see `link_wait`);
        // what a server sends unasked wakes the watcher.
        let mut wait = link_wait(reply_due, last_forward.elapsed(), slow_polls);
        // The replies are the watcher's to wait for while yields are
        // costly (`REPLY_HANDOFF`).
        let handing_off = handoff && !yielder.may_poll();
        if reply_due && handing_off {
            // Yields are costly now: the watcher sleeps on the replies
            // owed and sends each when written; the pump sleeps on the
            // link, and polls again after `HANDOFF_WAIT` at the latest.
            if mark_slow(&peer, &snapshot) {
                REPLIES_HANDED_OFF.fetch_add(1, Ordering::Relaxed);
            }
            wait = Some(HANDOFF_WAIT);
        }
        let timed = wait.is_some_and(|w| !w.is_zero());
        let mut heard = false;
        loop {
            match peer.link.recv(wait) {
                Ok(Some(m)) => {
                    match wire::decode(&m) {
                        // Not an edge: the proxy of a program to start
                        // here (`spawn.rs`); the link is its alone.
                        Ok(NodeMsg::Spawn(req)) if snapshot.is_empty() => {
                            match &peer.spawner {
                                Some(host) if host.admits(&*peer.link) => {
                                    super::spawn::serve(peer.link.clone(), req, host)
                                }
                                _ => {}
                            }
                            peer.link.close();
                            return;
                        }
                        // Not an edge: the watcher of a proxy whose
                        // program runs here (`watch.rs`).
                        Ok(NodeMsg::Watch { token }) if snapshot.is_empty() => {
                            match &peer.spawner {
                                Some(host) if host.admits(&*peer.link) => {
                                    super::spawn::serve_watch(peer.link.clone(), token, host)
                                }
                                _ => {}
                            }
                            peer.link.close();
                            return;
                        }
                        // Not an edge either: the link of the members
                        // another node serves (`members.rs`).
                        Ok(NodeMsg::ServeMembers { rank }) if snapshot.is_empty() => {
                            if let Some(stubs) = &peer.stubs {
                                stubs.serve(rank as usize, peer.link.clone());
                            }
                            peer.link.close();
                            peer.bell.ring();
                            return;
                        }
                        Ok(msg) => {
                            if incoming(&peer, m.id, msg) {
                                last_forward = Instant::now();
                                slow_polls = 0;
                            }
                            heard = true;
                        }
                        Err(e) => {
                            tracing::warn!("node: {e}; dropping the peer");
                            break 'outer;
                        }
                    }
                    wait = Some(Duration::ZERO);
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::info!("node: peer {} left: {e}", peer.link.peer());
                    break 'outer;
                }
            }
        }
        let generation = peer.generation.load(Ordering::Acquire);
        if generation != seen_generation {
            let chans = peer.chans.lock().unwrap_or_else(|e| e.into_inner());
            snapshot = chans.iter().map(|(k, v)| (*k, v.clone())).collect();
            seen_generation = generation;
        }
        if !reply_due && !heard {
            continue;
        }
        // A pass that only a poll's timer started (nothing came on the
        // link): its inbox messages, if any, waited for that timer.
        // Replies may wait to leave together only while the pump spins
        // (it polls again at once): never across one of its sleeps.
        let may_hold = last_forward.elapsed() < REPLY_SPIN && !handing_off;
        reply_due = relay_pass(&peer, &snapshot, timed && !heard, false, may_hold);
        if reply_due && last_forward.elapsed() < REPLY_SPIN && !handing_off {
            // The server may need this core to answer.
            yielder.yield_now();
        } else if reply_due {
            if slow_polls == SLOW_POLL_STEP {
                mark_slow(&peer, &snapshot);
            }
            slow_polls = slow_polls.saturating_add(1);
        }
    }
    // The peer is gone: its boot connections close (their workers end when
    // their senders go), so the servers drop its sessions.
    peer.link.close();
    peer.bell.ring();
    peer.conns.lock().unwrap_or_else(|e| e.into_inner()).clear();
}

/// The pump stops spinning for the replies still owed: have the watcher
/// sleep on their rings as well (the pump still polls for them, less and
/// less often: whichever finds a reply first sends it).
fn mark_slow(peer: &Peer, snapshot: &[(ChanId, Arc<RealChan>)]) -> bool {
    let mut marked = false;
    for (_, rc) in snapshot {
        if rc.owed.load(Ordering::Acquire) > 0 && !rc.slow.swap(true, Ordering::AcqRel) {
            marked = true;
        }
    }
    if marked {
        peer.bell.ring();
    }
    marked
}

/// One pass over `snapshot` under the gather lock: everything found
/// leaves in one write (`Outgoing`). `after_timer`: no wake-up started
/// the pass (its notices waited for a timer); `watcher`: the watcher's
/// pass (not the pump's). True if a reply is still owed on some channel.
fn relay_pass(
    peer: &Peer,
    snapshot: &[(ChanId, Arc<RealChan>)],
    after_timer: bool,
    watcher: bool,
    may_hold: bool,
) -> bool {
    let mut held = peer.gather.lock().unwrap_or_else(|e| e.into_inner());
    let mut out = Outgoing::default();
    out.gather(peer, snapshot, &mut held, may_hold && !watcher);
    if watcher && out.reply_frames > 0 {
        REPLIES_WATCHED.fetch_add(out.reply_frames as u64, Ordering::Relaxed);
    }
    let notices = out.notices.len() as u64;
    if notices > 0 {
        NOTICES_RELAYED.fetch_add(notices, Ordering::Relaxed);
        // Only a channel the watcher does not watch has notices that
        // nothing woke for. One it watches woke the watcher when written:
        // a timed pass of the pump (polling for a slow call's reply) that
        // finds them first only beats that wake-up, and a watcher whose
        // sleep timed out found none there before its pass.
        if after_timer && out.unwatched_notices > 0 {
            NOTICES_AFTER_TIMER.fetch_add(out.unwatched_notices, Ordering::Relaxed);
        }
    }
    let batch = out.into_batch();
    if !batch.is_empty() {
        let _ = peer.link.send_all(&batch);
    }
    !held.chans.is_empty()
        || snapshot
            .iter()
            .any(|(_, rc)| rc.owed.load(Ordering::Acquire) > 0)
}

/// How long the pump waits for the link before it polls its channels
/// again: not at all while a reply is due and was asked for less than
/// [`REPLY_SPIN`] ago; then 50 µs, growing (every [`SLOW_POLL_STEP`]
/// polls) to 1 ms; with no reply due, until a message comes (`None`: the
/// link's silence bound still ends a dead peer's link), as the watcher
/// relays the rest.
///
/// Why a slow call's reply is still polled for, not only slept on by the
/// watcher (which does so from the first step on, `mark_slow`): on two
/// CPUs shared with the servers and other programs, a pump that hands a
/// reply over to another thread after its spin waits for that thread to
/// be scheduled, a time slice or more under load; measured, remote writes
/// of 8 KiB calls four in flight dropped from 32 to 2 MB/s when the
/// watcher alone took them. Whichever finds the reply first sends it.
fn link_wait(reply_due: bool, since_forward: Duration, slow_polls: u32) -> Option<Duration> {
    if !reply_due {
        return None;
    }
    if since_forward < REPLY_SPIN {
        return Some(Duration::ZERO);
    }
    let steps = (slow_polls / SLOW_POLL_STEP).min(5);
    Some(Duration::from_micros(50 << steps).min(Duration::from_millis(1)))
}

/// The watcher of one peer: sleeps until a server sends something unasked
/// on one of the peer's real channels (or the bell rings), then relays
/// everything there is. Ends with the link.
fn watch_notices(peer: Arc<Peer>) {
    let mut snapshot: Vec<(ChanId, Arc<RealChan>)> = Vec::new();
    let mut seen_generation = u64::MAX;
    let mut woken = true;
    while !peer.link.is_closed() {
        let rings = peer.bell.rings();
        let generation = peer.generation.load(Ordering::Acquire);
        if generation != seen_generation {
            let chans = peer.chans.lock().unwrap_or_else(|e| e.into_inner());
            snapshot = chans.iter().map(|(k, v)| (*k, v.clone())).collect();
            seen_generation = generation;
        }
        relay_pass(&peer, &snapshot, !woken, true, false);
        let watched: Vec<watch::Watched<'_>> = snapshot
            .iter()
            .map(|(_, rc)| (&rc.chan, rc.slow.load(Ordering::Acquire)))
            .collect();
        let prefix = watch::watched_prefix(&watched);
        for (i, (_, rc)) in snapshot.iter().enumerate() {
            rc.unwatched.store(i >= prefix, Ordering::Relaxed);
        }
        let limit = if watch::words(&watched) > watch::MAX_WATCHED {
            OVERFLOW_POLL
        } else {
            IDLE_WATCH
        };
        woken = watch::wait_for_notices(&watched, &peer.bell, rings, limit);
    }
}

/// Serve one message of the edge; true if it was a call now on its way to
/// a server (a reply is owed).
fn incoming(peer: &Arc<Peer>, id: u64, msg: NodeMsg) -> bool {
    match msg {
        NodeMsg::Boot { conn, packet } => {
            let mut conns = peer.conns.lock().unwrap_or_else(|e| e.into_inner());
            if let std::collections::hash_map::Entry::Vacant(slot) = conns.entry(conn) {
                let sock = match seqpacket::connect(&peer.boot_socket) {
                    Ok(s) => s,
                    Err(e) => {
                        let packet = error_packet(&format!("cannot reach the instance: {e}"));
                        reply(peer, id, conn, packet, vec![], None);
                        return false;
                    }
                };
                slot.insert(start_worker(peer.clone(), conn, sock, Vec::new()));
            }
            if let Some(tx) = conns.get(&conn) {
                let _ = tx.send((id, packet));
            }
            false
        }
        NodeMsg::ConnClosed { conn } => {
            peer.conns
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&conn);
            false
        }
        NodeMsg::Request { chan, frame } => forward_requests(peer, id, chan, [&frame[..]]),
        NodeMsg::Requests { chan, frames } => match wire::unpack_frames(&frames) {
            Ok(frames) => forward_requests(peer, id, chan, frames),
            Err(e) => {
                // Nothing of it reaches a server: the edge is broken.
                tracing::warn!("node: malformed requests from an edge: {e}; dropping the peer");
                peer.link.close();
                false
            }
        },
        other => {
            tracing::warn!("node: unexpected {other:?} from an edge");
            false
        }
    }
}

/// Put the request frames of real channel `chan` (one `Request`, or the
/// frames of a `Requests`, in ring order) on it; true if a call is now on
/// its way to a server (a reply is owed). A channel that is gone or takes
/// no more is reported closed once.
fn forward_requests<'a>(
    peer: &Arc<Peer>,
    id: u64,
    chan: ChanId,
    frames: impl IntoIterator<Item = &'a [u8]>,
) -> bool {
    let rc = peer
        .chans
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&chan)
        .cloned();
    let (Some(rc), Some(control)) = (rc, peer.control.get()) else {
        let _ = wire::send(&*peer.link, id, &NodeMsg::ChanClosed { chan });
        return false;
    };
    let mut any_call = false;
    for frame in frames {
        // A request's id leads its frame; a posted one is answered by
        // nobody (an unreadable id counts as a call: the pump then polls
        // for a reply that may not come, as for a slow call).
        let call = !matches!(
            postcard::take_from_bytes::<u64>(frame),
            Ok((rid, _)) if atoll_proto::is_posted(rid)
        );
        rc.last_id.store(id, Ordering::Relaxed);
        // Counted before the server can answer it.
        if call && rc.owed.fetch_add(1, Ordering::AcqRel) == 0 {
            CallTimes::start(&rc.started);
        }
        let sent = rc.chan.send(frame, control.doorbell(rc.server)).is_ok();
        if !sent {
            if call {
                settle_one(&rc);
            }
            let _ = wire::send(&*peer.link, id, &NodeMsg::ChanClosed { chan });
            return any_call;
        }
        any_call |= call;
    }
    any_call
}

/// What the real channels have for the edge, gathered in one pass and
/// sent as one batch, in this order: a server puts its invalidations in
/// the inboxes *before* it replies (the client drains its inbox before it
/// trusts its cache, Hare §3.6.2), so every inbox message written before a
/// reply seen in this pass is sent ahead of that reply; a channel's end
/// follows its last reply.
#[derive(Default)]
struct Outgoing {
    replies: Vec<Message>,
    notices: Vec<Message>,
    closed: Vec<Message>,
    /// Of `notices`, those of channels the watcher does not watch.
    unwatched_notices: u64,
    /// Reply frames in `replies` (a `Replies` carries several).
    reply_frames: usize,
}

impl Outgoing {
    /// Replies first (reading them makes the inbox messages written before
    /// them visible), then inboxes and ends.
    fn gather(
        &mut self,
        peer: &Peer,
        snapshot: &[(ChanId, Arc<RealChan>)],
        held: &mut Held,
        may_hold: bool,
    ) {
        for (id, rc) in snapshot {
            take_replies(*id, rc, held);
        }
        for (id, rc) in snapshot {
            let before = self.notices.len();
            take_notices(peer, *id, rc, &mut self.notices, &mut self.closed);
            if rc.unwatched.load(Ordering::Relaxed) {
                self.unwatched_notices += (self.notices.len() - before) as u64;
            }
        }
        // Taken after the inboxes, so an end seen there flushes its
        // channel's replies before the end leaves.
        let now = Instant::now();
        let limit = held.limit;
        held.chans.retain(|id, h| {
            let rc = snapshot.iter().find(|(i, _)| i == id).map(|(_, rc)| rc);
            let keep = may_hold
                && h.batch
                && h.bytes < HOLD_BYTES
                && now.duration_since(h.since) < limit
                && rc.is_some_and(|rc| rc.owed.load(Ordering::Acquire) > 0 && !rc.chan.is_closed());
            if !keep {
                self.reply_frames += h.frames.len();
                h.send(*id, &mut self.replies);
            }
            keep
        });
    }

    fn into_batch(mut self) -> Vec<Message> {
        self.notices.append(&mut self.replies);
        self.notices.append(&mut self.closed);
        self.notices
    }
}

/// One reply owed on `rc` came (or its call was never sent).
fn settle_one(rc: &RealChan) {
    let before = rc
        .owed
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            Some(n.saturating_sub(1))
        });
    if before == Ok(1) {
        SERVER_LEG.end(&rc.started);
    }
    if before.unwrap_or(0) <= 1 {
        // Nothing owed: the watcher need not wake for this ring's next
        // reply (it stops watching it when it next looks).
        rc.slow.store(false, Ordering::Release);
    }
}

/// Replies taken from the real channels and not sent yet, per channel
/// (guarded by the peer's gather lock). While a read-ahead batch's replies
/// are owed on a channel (at least [`HOLD_OWED`] more when the first was
/// taken) and the pump spins, its replies wait to leave together, up to
/// [`HOLD_BYTES`] or [`HOLD_LIMIT`]: they cross as one `Replies` of up
/// to 128 KiB instead of one message per 8 KiB (one encode, one write and
/// one wake-up at the edge for many). Everything else (a call alone, a
/// program's window of reads or write pieces) leaves as soon as the pass
/// found it, packed with whatever else of its channel the pass found.
struct Held {
    chans: HashMap<ChanId, HeldReplies>,
    /// [`HOLD_LIMIT`] (a test holds longer, to be free of timing).
    limit: Duration,
}

impl Default for Held {
    fn default() -> Self {
        Held {
            chans: HashMap::new(),
            limit: HOLD_LIMIT,
        }
    }
}

struct HeldReplies {
    frames: Vec<Vec<u8>>,
    bytes: usize,
    /// When the first of them was taken.
    since: Instant,
    /// Request id echoed in the message (`RealChan::last_id`).
    rid: u64,
    /// When the first of them was taken, at least [`HOLD_OWED`] more were
    /// owed: a read-ahead batch is being served, and its replies may wait
    /// for each other. Fewer are a program's own window (six write
    /// pieces or reads), whose next piece waits for each reply: held,
    /// its pipeline would go in steps (remote writes fell from 180–260 to
    /// 130–200 MiB/s in four alternated `--quick` pairs at a load of 8
    /// when every channel's replies waited).
    batch: bool,
}

/// Replies still owed past which the ones taken wait for each other.
const HOLD_OWED: u32 = 8;

/// Replies of a channel wait for more until they are this many bytes.
const HOLD_BYTES: usize = 128 * 1024;
/// ... or the first of them waited this long (the server writes an 8 KiB
/// reply in a few microseconds when it has the requests).
const HOLD_LIMIT: Duration = Duration::from_micros(40);

impl HeldReplies {
    /// As messages: one `Reply`, or `Replies` of at most `wire::MAX_BATCH`.
    fn send(&mut self, id: ChanId, replies: &mut Vec<Message>) {
        let mut frames = std::mem::take(&mut self.frames);
        if frames.len() == 1 {
            let frame = frames.pop().expect("one frame");
            replies.push(wire::message(self.rid, &NodeMsg::Reply { chan: id, frame }));
            return;
        }
        for packed in wire::pack_batches(&frames) {
            let msg = NodeMsg::Replies {
                chan: id,
                frames: packed,
            };
            replies.push(wire::message(self.rid, &msg));
        }
    }
}

/// Take the replies real channel `id` has for its client into `held`.
fn take_replies(id: ChanId, rc: &RealChan, held: &mut Held) {
    loop {
        match rc.chan.try_recv(|b| b.to_vec()) {
            Ok(Some(frame)) => {
                settle_one(rc);
                let h = held.chans.entry(id).or_insert_with(|| HeldReplies {
                    frames: Vec::new(),
                    bytes: 0,
                    since: Instant::now(),
                    rid: 0,
                    batch: rc.owed.load(Ordering::Acquire) >= HOLD_OWED,
                });
                h.rid = rc.last_id.load(Ordering::Relaxed);
                h.bytes += frame.len();
                h.frames.push(frame);
            }
            Ok(None) => break,
            Err(_) => {
                rc.chan.close();
                break;
            }
        }
    }
}

/// The inbox messages of real channel `id`, and its end if it ended.
fn take_notices(
    peer: &Peer,
    id: ChanId,
    rc: &RealChan,
    notices: &mut Vec<Message>,
    closed: &mut Vec<Message>,
) {
    let _ = rc.chan.drain_inbox(|b| {
        let msg = NodeMsg::Inbox {
            chan: id,
            frame: b.to_vec(),
        };
        notices.push(wire::message(0, &msg));
    });
    if rc.chan.take_inbox_overflow() {
        notices.push(wire::message(0, &NodeMsg::InboxOverflow { chan: id }));
    }
    if rc.chan.is_closed() {
        rc.owed.store(0, Ordering::Release);
        let removed = peer
            .chans
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
        if removed.is_some() {
            peer.generation.fetch_add(1, Ordering::AcqRel);
            closed.push(wire::message(0, &NodeMsg::ChanClosed { chan: id }));
        }
    }
}

fn start_worker(
    peer: Arc<Peer>,
    conn: ConnId,
    sock: OwnedFd,
    owned: Vec<ChanId>,
) -> Sender<BootPacket> {
    let (tx, rx) = mpsc::channel();
    let _ = std::thread::Builder::new()
        .name("node-conn".into())
        .spawn(move || conn_worker(peer, conn, sock, rx, owned));
    tx
}

/// Serves one boot connection: forwards packets, turns the descriptors of
/// replies into channel ids. Ends (closing the connection, so the session
/// ends at the servers) when the pump drops its sender.
fn conn_worker(
    peer: Arc<Peer>,
    conn: ConnId,
    sock: OwnedFd,
    rx: Receiver<BootPacket>,
    mut owned: Vec<ChanId>,
) {
    while let Ok((id, packet)) = rx.recv() {
        let request = postcard::from_bytes::<BootRequest>(&packet);
        let answered = request.as_ref().map_or(true, BootRequest::is_answered);
        if let Err(e) = seqpacket::send(sock.as_fd(), &packet, &[]) {
            if answered {
                reply(&peer, id, conn, error_packet(&e.to_string()), vec![], None);
            }
            continue;
        }
        if !answered {
            continue;
        }
        let (bytes, fds) = match seqpacket::recv(sock.as_fd()) {
            Ok((b, f)) if !b.is_empty() => (b, f),
            _ => {
                let packet = error_packet("the instance closed the session");
                reply(&peer, id, conn, packet, vec![], None);
                break;
            }
        };
        match adopt(&peer, &bytes, fds) {
            Ok((channels, child)) => {
                // A fork's channels are the child's lane 0: they live as
                // long as the child's connection, not this one.
                let child_conn = child.map(|sock| {
                    let child_conn = HEAD_CONN | peer.next_conn.fetch_add(1, Ordering::Relaxed);
                    let tx = start_worker(peer.clone(), child_conn, sock, channels.clone());
                    peer.conns
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(child_conn, tx);
                    child_conn
                });
                if child_conn.is_none() {
                    owned.extend(&channels);
                }
                reply(&peer, id, conn, bytes, channels, child_conn);
            }
            Err(why) => reply(&peer, id, conn, error_packet(&why), vec![], None),
        }
    }
    // The connection closes when `sock` drops; its channels end here.
    let chans = peer.chans.lock().unwrap_or_else(|e| e.into_inner());
    for c in owned {
        if let Some(rc) = chans.get(&c) {
            rc.chan.close();
        }
    }
    drop(chans);
    peer.generation.fetch_add(1, Ordering::AcqRel);
    peer.bell.ring();
}

/// Take the descriptors of a boot reply: map the channels (in server
/// order) and name them; the control block is kept for its doorbells; a
/// fork's child socket is handed back.
fn adopt(
    peer: &Peer,
    bytes: &[u8],
    fds: Vec<OwnedFd>,
) -> Result<(Vec<ChanId>, Option<OwnedFd>), String> {
    let reply: BootReply = postcard::from_bytes(bytes).map_err(|e| e.to_string())?;
    let mut fds = fds.into_iter();
    let mut child_sock = None;
    match &reply {
        BootReply::Attached { info, .. } => {
            // Only a copy island's clients work without the buffer cache's
            // memory, which cannot cross hosts (Cosh §3).
            if info.island != Island::Copy {
                return Err("a node proxies only a copy island (--island copy)".into());
            }
            let control = fds.next().ok_or("attach without a control block")?;
            if peer.control.get().is_none() {
                let c = Control::map(control.as_fd()).map_err(|e| e.to_string())?;
                let _ = peer.control.set(c);
            }
        }
        BootReply::Forked { .. } => child_sock = Some(fds.next().ok_or("fork without a socket")?),
        _ => {}
    }
    let mut channels = Vec::new();
    {
        let mut chans = peer.chans.lock().unwrap_or_else(|e| e.into_inner());
        for (server, fd) in fds.enumerate() {
            let chan = ClientChannel::map(fd.as_fd()).map_err(|e| e.to_string())?;
            let id = peer.next_chan.fetch_add(1, Ordering::Relaxed);
            chans.insert(
                id,
                Arc::new(RealChan {
                    chan,
                    server,
                    last_id: AtomicU64::new(0),
                    owed: AtomicU32::new(0),
                    slow: AtomicBool::new(false),
                    // Watched until the watcher, rung below, says not.
                    unwatched: AtomicBool::new(false),
                    started: AtomicU64::new(0),
                }),
            );
            channels.push(id);
        }
    }
    peer.generation.fetch_add(1, Ordering::AcqRel);
    peer.bell.ring();
    Ok((channels, child_sock))
}

fn reply(
    peer: &Peer,
    id: u64,
    conn: ConnId,
    packet: Vec<u8>,
    channels: Vec<ChanId>,
    child: Option<ConnId>,
) {
    let msg = NodeMsg::BootReply {
        conn,
        packet,
        channels,
        child,
    };
    let _ = wire::send(&*peer.link, id, &msg);
}

/// A `BootReply::Error` packet.
pub fn error_packet(why: &str) -> Vec<u8> {
    postcard::to_allocvec(&BootReply::Error(why.to_string())).unwrap_or_default()
}

#[cfg(test)]
#[path = "head_tests.rs"]
mod tests;
