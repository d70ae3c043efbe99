//! The edge's relay: programs' requests out to the head (forwarders,
//! and the dispatcher right after a reply), the head's replies and
//! notices back into the programs' rings (`Edge::dispatch`).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use atoll_msg::watch;
use atoll_proto::boot::PollMode;
use atoll_transport::Message;

use super::super::calltime::CallTimes;
use super::super::copies::{Relayed, Verdict};
use super::super::wire::{self, ChanId, NodeMsg};
use super::{Edge, LocalChan};

/// How long the dispatcher polls for the request that follows a reply
/// (`Edge::dispatch`): a program's next call after the one just
/// answered, when it makes calls back to back, comes within a few
/// microseconds; the bound keeps a program that computes between calls
/// from holding a core.
const NEXT_REQUEST_SPIN: Duration = Duration::from_micros(50);

/// How long the dispatcher polls the link for a reply owed after the last
/// call it saw leave: a round trip through both proxies and a server
/// (25–60 µs on a quiet 2-CPU guest, docs/BENCHMARKS.md) with room for a
/// loaded machine; a slower call's reply wakes it from `ppoll`.
const REPLY_WAIT: Duration = Duration::from_micros(200);

/// How long a parked forwarder sleeps at most before it looks at its
/// doorbell again (a bound, not a poll: the dispatcher rings `park` when
/// it stops polling).
const PARK_LIMIT: Duration = Duration::from_millis(100);

/// A request frame that expects a reply (its id, which leads the frame,
/// is not a posted one; an unreadable id counts as a call).
fn is_call(frame: &[u8]) -> bool {
    !matches!(
        postcard::take_from_bytes::<u64>(frame),
        Ok((rid, _)) if atoll_proto::is_posted(rid)
    )
}

/// What the dispatcher did with a message of the head.
enum Handled {
    /// Put a reply in its ring: the program's next call may follow at once.
    Reply,
    Other,
    /// The edge ends (a malformed message, `Stopping`).
    End,
}

impl Edge {
    /// Send every request queued on server `i`'s channels, in one write;
    /// true if there was any. Whoever calls it (forwarder `i`, or the
    /// dispatcher after a reply) sends under the list's lock, so that the
    /// frames of a channel leave in ring order.
    /// Hot path (every remote system call).
    fn forward_queued(&self, i: usize) -> bool {
        let direct = self.peers.get().is_some_and(|p| p.forward_queued(i));
        let mut batch = Vec::new();
        let mut calls = 0;
        let mut list = self.per_server[i].lock().unwrap_or_else(|e| e.into_inner());
        let copies = self.copies.on();
        let mut ahead = Vec::new();
        for lc in list.iter() {
            // This channel's frames, in ring order, leave in as few
            // messages as the batch limit allows (`wire::MAX_BATCH`).
            let mut frames = Vec::new();
            loop {
                match lc.sc.try_recv(|b| b.to_vec()) {
                    Ok(Some(frame)) => {
                        let here = copies && self.answered_here(lc, &frame, &mut ahead);
                        if !here {
                            let call = is_call(&frame);
                            calls += u32::from(call);
                            if lc.owed.fetch_add(u32::from(call), Ordering::AcqRel) == 0 && call {
                                CallTimes::start(&lc.started);
                            }
                            frames.push(frame);
                        }
                        // The node's read-ahead on the reader's channel,
                        // after its read: replies the program is not owed
                        // (`lc.owed` does not count them).
                        for frame in ahead.drain(..) {
                            calls += 1;
                            self.copies.ahead.fetch_add(1, Ordering::Relaxed);
                            frames.push(frame);
                        }
                    }
                    Ok(None) => break,
                    Err(_) => {
                        // A scribbled ring: drop the channel, as a server
                        // would.
                        lc.sc.close();
                        break;
                    }
                }
            }
            self.requests_out(lc.id, frames, &mut batch);
        }
        list.retain(|lc| !lc.sc.is_closed());
        if batch.is_empty() {
            return direct;
        }
        // Counted before the head can answer.
        self.owed.fetch_add(calls, Ordering::AcqRel);
        let _ = self.link.send_all(&batch);
        true
    }

    /// `frames` of channel `chan` as messages for the head: a lone one as
    /// a `Request`, more packed into `Requests` of at most
    /// `wire::MAX_BATCH` bytes each (a read-ahead batch, a window of write
    /// pieces: one message, one decode and one lookup of the channel at
    /// the head instead of one per 8 KiB).
    fn requests_out(&self, chan: ChanId, mut frames: Vec<Vec<u8>>, batch: &mut Vec<Message>) {
        let before = batch.len();
        self.wire
            .request_frames
            .fetch_add(frames.len() as u64, Ordering::Relaxed);
        match frames.len() {
            0 => {}
            1 => {
                let frame = frames.pop().expect("one frame");
                batch.push(wire::message(
                    self.next_id(),
                    &NodeMsg::Request { chan, frame },
                ));
            }
            _ => {
                for packed in wire::pack_batches(&frames) {
                    let msg = NodeMsg::Requests {
                        chan,
                        frames: packed,
                    };
                    batch.push(wire::message(self.next_id(), &msg));
                }
            }
        }
        self.wire
            .request_messages
            .fetch_add((batch.len() - before) as u64, Ordering::Relaxed);
    }

    /// A request about to leave: the node's copies see it (a change drops
    /// chunks, a read may be answered). True if it was answered here: its
    /// reply put in the ring, or held until the replies owed before it
    /// are (`Held`), or waiting for a read-ahead reply. Read-ahead to send
    /// after it is added to `ahead`. Called under the channel's server
    /// list lock.
    fn answered_here(&self, lc: &LocalChan, frame: &[u8], ahead: &mut Vec<Vec<u8>>) -> bool {
        let mut fetched = false;
        let verdict = self
            .copies
            .with(|m| m.request(lc.conn, lc.id, frame, true, &mut fetched, ahead));
        if fetched {
            self.copies.fetches.fetch_add(1, Ordering::Relaxed);
        }
        let reply = match verdict {
            Verdict::Answer(reply) => reply,
            Verdict::Wait(rid) => {
                let mut held = lc.replying.lock().unwrap_or_else(|e| e.into_inner());
                let owed = u64::from(lc.owed.load(Ordering::Acquire));
                held.wait(owed, rid);
                // Its answer may have come already, with nothing owed.
                for answer in held.due() {
                    let _ = lc.sc.reply(&answer);
                }
                self.copies.ahead_waits.fetch_add(1, Ordering::Relaxed);
                return true;
            }
            Verdict::Forward => return false,
        };
        let mut held = lc.replying.lock().unwrap_or_else(|e| e.into_inner());
        // Exact here: the dispatcher lowers `owed` under this lock, and
        // only the list lock's holder (the caller) raises it.
        let owed = u64::from(lc.owed.load(Ordering::Acquire));
        if held.must_wait(owed) {
            held.hold(owed, reply);
            self.copies.hits.fetch_add(1, Ordering::Relaxed);
            return true;
        }
        // A full ring with nothing owed (the program has not taken
        // earlier answers yet): the read crosses instead of waiting here,
        // as nothing would come to put a held answer in the ring.
        if lc.sc.try_reply(&reply).is_err() {
            self.copies.fetches.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        self.copies.hits.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Forwarder of server `i`: wait on doorbell `i` as server `i` would,
    /// then send every queued request over the link. While the dispatcher
    /// polls the request rings itself (`hot`), sleep on `park` instead, so
    /// that the program's ring finds no sleeper on the doorbell (no
    /// `futex_wake` for it, no wake-up here for a request already gone).
    pub(super) fn forward(self: Arc<Edge>, i: usize) {
        let doorbell = self.control.doorbell(i);
        while !self.gone.load(Ordering::Relaxed) {
            if self.forward_queued(i) {
                continue;
            }
            let rings = self.park.rings();
            if self.hot.load(Ordering::Acquire) {
                // Bounded: a lost ring would only delay a request to the
                // next doorbell poll.
                watch::wait_for_notices(&[], &self.park, rings, PARK_LIMIT);
            } else {
                doorbell.wait(PollMode::Adaptive);
            }
        }
    }

    /// The head's messages to the programs of this node, and while a call
    /// is in flight or was just answered, the programs' requests too.
    ///
    /// A lane has one call outstanding, so after a reply its program's
    /// next request typically follows at once, and after a request its
    /// reply comes within a round trip. In those two windows
    /// ([`NEXT_REQUEST_SPIN`] after a reply, [`REPLY_WAIT`] after a call
    /// while a reply is owed) the dispatcher polls both the request rings
    /// and the link, yielding between polls: the request leaves without a
    /// forwarder's wake-up and the reply is taken without the dispatcher's
    /// own (a TCP echo's client pays that one; fos §3.2's proxies have
    /// cores of their own and never sleep). Outside them it sleeps in
    /// `ppoll` on the link, so an idle node stays idle.
    pub(super) fn dispatch(self: Arc<Edge>) {
        // When the dispatcher last sent or delivered something; `None`
        // while it sleeps on the link.
        let mut active: Option<Instant> = None;
        let mut yielder = super::super::yielder::Yielder::default();
        loop {
            let hot = yielder.may_poll()
                && active.is_some_and(|t| {
                    let idle = t.elapsed();
                    idle < NEXT_REQUEST_SPIN
                        || (idle < REPLY_WAIT && self.owed.load(Ordering::Acquire) > 0)
                });
            if !hot {
                if active.take().is_some() {
                    self.cool();
                }
                let m = match self.link.recv(None) {
                    Ok(Some(m)) => m,
                    Ok(None) => continue,
                    Err(e) => {
                        self.end(Some(e.to_string()));
                        return;
                    }
                };
                match self.handle(m) {
                    Handled::Reply => {
                        active = Some(Instant::now());
                        self.hot.store(true, Ordering::Release);
                    }
                    Handled::Other => {}
                    Handled::End => return,
                }
                continue;
            }
            let mut did = false;
            for i in 0..self.per_server.len() {
                did |= self.forward_queued(i);
            }
            match self.link.recv(Some(Duration::ZERO)) {
                Ok(Some(m)) => match self.handle(m) {
                    Handled::End => return,
                    Handled::Reply => did = true,
                    Handled::Other => {}
                },
                Ok(None) => {}
                Err(e) => {
                    self.end(Some(e.to_string()));
                    return;
                }
            }
            if self.gone.load(Ordering::Relaxed) {
                return;
            }
            if did {
                active = Some(Instant::now());
            } else {
                // The server, the head or the program may need this core.
                yielder.yield_now();
            }
        }
    }

    /// The dispatcher stops polling the request rings: the forwarders
    /// take them again. A request put in a ring meanwhile is not lost: a
    /// forwarder polls once it is back, and its doorbell's count moved.
    pub(super) fn cool(&self) {
        self.hot.store(false, Ordering::Release);
        self.park.ring();
    }

    /// One message of the head.
    fn handle(&self, m: Message) -> Handled {
        let msg = match wire::decode(&m) {
            Ok(msg) => msg,
            Err(e) => {
                self.end(Some(e.to_string()));
                return Handled::End;
            }
        };
        let chan_of = |chan: ChanId| {
            self.chans
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&chan)
                .cloned()
        };
        match msg {
            NodeMsg::BootReply { .. } => {
                let tx = self
                    .waiters
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&m.id);
                if let Some(tx) = tx {
                    let _ = tx.send(msg);
                }
            }
            NodeMsg::Reply { chan, frame } => {
                self.wire.reply_frames.fetch_add(1, Ordering::Relaxed);
                self.wire.reply_messages.fetch_add(1, Ordering::Relaxed);
                if let Some(lc) = chan_of(chan) {
                    self.deliver_reply(&lc, &frame);
                } else {
                    self.settle_owed(1);
                }
                return Handled::Reply;
            }
            NodeMsg::Replies { chan, frames } => {
                let frames = match wire::unpack_frames(&frames) {
                    Ok(f) => f,
                    Err(e) => {
                        self.end(Some(format!("malformed replies from the head: {e}")));
                        return Handled::End;
                    }
                };
                let n = frames.len() as u64;
                self.wire.reply_frames.fetch_add(n, Ordering::Relaxed);
                self.wire.reply_messages.fetch_add(1, Ordering::Relaxed);
                if let Some(lc) = chan_of(chan) {
                    for frame in frames {
                        self.deliver_reply(&lc, frame);
                    }
                } else {
                    self.settle_owed(frames.len() as u32);
                }
                return Handled::Reply;
            }
            NodeMsg::Inbox { chan, frame } => {
                if let Some(lc) = chan_of(chan) {
                    let _ = lc.sc.notify(&frame);
                }
            }
            NodeMsg::InboxOverflow { chan } => {
                if let Some(lc) = chan_of(chan) {
                    lc.sc.raise_inbox_overflow();
                }
            }
            NodeMsg::ChanClosed { chan } => {
                if let Some(lc) = chan_of(chan) {
                    lc.sc.close();
                    self.copies.with(|m| m.chan_closed(chan));
                }
            }
            NodeMsg::Stopping => {
                self.end(None);
                return Handled::End;
            }
            other => tracing::warn!("node: unexpected {other:?} from the head"),
        }
        Handled::Other
    }

    /// `n` replies came: the node owes that many fewer.
    fn settle_owed(&self, n: u32) {
        let _ = self
            .owed
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |o| {
                Some(o.saturating_sub(n))
            });
    }

    /// One reply of the head for channel `lc`: to the program's ring, or
    /// (the node's own read-ahead) to the reads that waited for it.
    fn deliver_reply(&self, lc: &LocalChan, frame: &[u8]) {
        self.settle_owed(1);
        let relayed = match self.copies.on() {
            true => self.copies.with(|m| m.reply(lc.conn, lc.id, frame)),
            false => Relayed::Deliver,
        };
        let mut held = lc.replying.lock().unwrap_or_else(|e| e.into_inner());
        if let Relayed::Ahead(answers) = relayed {
            // The node's own read-ahead: only the reads that waited for it
            // are answered, in their places.
            for (rid, answer) in answers {
                held.fill(rid, answer);
            }
            for answer in held.due() {
                let _ = lc.sc.reply(&answer);
            }
            return;
        }
        let _ = lc.sc.reply(frame);
        let before = lc
            .owed
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                Some(n.saturating_sub(1))
            });
        if before == Ok(1) {
            self.wire.leg.end(&lc.started);
        }
        // Answers held for this reply follow it at once.
        for answer in held.replied() {
            let _ = lc.sc.reply(&answer);
        }
    }
}
