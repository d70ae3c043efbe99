//! Taking over from a server process that died (`server::run`): the
//! channels the instance kept, the request the predecessor owed
//! (`Journal::owe`) and the replies it parked in its channels
//! (`ServerChannel::park_reply`; fos §3.4: what a restarted server needs
//! lives outside it).

use super::*;

impl Chan {
    /// Keep `reply` until the reply ring has room: here, and in the
    /// channel's parked slot, where a successor finds it if this process
    /// dies first (`take_over`; fos §3.4, state a restart needs lives
    /// outside the server).
    pub(super) fn park(&mut self, reply: &[u8]) {
        self.ch.park_reply(reply);
        self.pending = Some(reply.to_vec());
    }

    /// The parked reply went out.
    pub(super) fn unpark(&mut self) {
        self.pending = None;
        self.ch.unpark_reply();
    }
}

/// A server that takes over from a process that died: serve the channels
/// the instance kept (`adopted`), finish sessions that ended meanwhile
/// (`adopted` ones marked closing, and `ended`: those with no channel
/// here), and settle the request the dead one was serving
/// (`Journal::owe`), with the reply the replay of its record computed, if
/// any (`rebuild_answering`): see [`settle_owed`]. Every reply the dead
/// one parked is delivered before the channel is served again
/// (`deliver_parked`).
pub(super) fn take_over<S: BlockStore>(
    fs: &mut FileServer<S>,
    journal: Option<&Journal>,
    (owed, answer): (Option<Owed>, Option<Vec<u8>>),
    chans: &mut Vec<Chan>,
    adopted: Vec<Adopted>,
    ended: Vec<SessionId>,
) {
    if adopted.is_empty() && owed.is_none() && ended.is_empty() {
        return;
    }
    let mut closing: Vec<SessionId> = Vec::new();
    for Adopted {
        session,
        lane,
        channel: ch,
        closing: ended,
    } in adopted
    {
        if ended && !closing.contains(&session) {
            closing.push(session);
        }
        // Idempotent: the session may have opened only just before.
        kept(journal, Kind::Opened, session, || {
            fs.session_opened(session)
        });
        // It no longer knows who cached what (`track`).
        ch.raise_inbox_overflow();
        // A reply the predecessor parked goes out first (`Chan::park`).
        let pending = ch.parked_reply();
        chans.push(Chan {
            session,
            lane,
            ch,
            pending,
            requests: 0,
        });
    }
    if let Some(s) = settle_owed(journal, owed, answer.as_deref(), chans) {
        // Pieces of a write after one the client counts as failed must
        // not be written (`fs::chain`).
        kept(journal, Kind::CutChains, s, || fs.cut_chains(s));
    }
    // Finished as the predecessor would have (a second finish of one it
    // did finish serves nothing: its rings were drained).
    let mut bufs = Bufs {
        scratch: Vec::with_capacity(MAX_FRAME),
        reply: vec![0u8; MAX_FRAME],
        notice: vec![0u8; atoll_msg::Channel::INBOX_MAX_FRAME],
    };
    for s in closing {
        on_admin(Admin::SessionClosed(s), fs, journal, chans, &mut bufs);
    }
    // Only sessions the instance says ended: one with no channel here may
    // live on — a forked child before its first call holds what its
    // parent's `Share` and `Map` gave it, and nothing else (closing it
    // freed a pipe its parent then closed: `sort: fstat ENOENT`).
    let open = fs.open_sessions();
    for s in ended {
        if open.contains(&s) && !chans.iter().any(|c| c.session == s) {
            kept(journal, Kind::Closed, s, || fs.session_closed(s));
        }
    }
}

/// Settle the request a dead predecessor was serving (`take_over`):
/// done and journaled, it gets `answer`, the reply the replay of its
/// record computed (the one the dead server would have sent: module docs
/// of `rebuilding`), or `EIO` without one; not journaled and still in its
/// ring, it is served again (nothing of it survived); taken but not
/// journaled, "not applied" ([`answer_not_applied`]), and its client
/// sends it again. A reply that did go out before the death makes this
/// one stale, and clients drop stale replies (an older id than the call
/// they wait for); one parked in the channel goes out instead. The
/// session it answered `EIO`, if any.
///
/// Settled in the journal only once answered (or parked): a successor
/// killed before that leaves the request owed to the next one, which
/// answers it again (a second answer is stale) rather than not at all.
/// By then this one's own records (`Reconcile`, `Opened`) make the
/// request look journaled; the next one then finds no record of it
/// unless it was, and answers `EIO`, as it should for one taken and not
/// journaled. One to serve again is settled at once: the loop owes it
/// anew when it takes it.
pub(super) fn settle_owed(
    journal: Option<&Journal>,
    owed: Option<Owed>,
    answer: Option<&[u8]>,
    chans: &mut [Chan],
) -> Option<SessionId> {
    let (Some(j), Some(o)) = (journal, owed) else {
        return None;
    };
    // A request served while the journal was full is in no record though
    // it took effect: only a journal that took every record can say
    // "not applied" (a full one refuses the rebuild anyway).
    let failed = answer_owed(o, answer, !j.full(), chans);
    j.settle();
    failed
}

/// [`settle_owed`] but for the journal's mark; `complete`: every request
/// served went into the journal.
fn answer_owed(
    o: Owed,
    answer: Option<&[u8]>,
    complete: bool,
    chans: &mut [Chan],
) -> Option<SessionId> {
    let idx = chans
        .iter()
        .position(|c| c.session == o.session && c.lane == o.lane)?;
    let head = chans[idx]
        .ch
        .peek_request(|b| postcard::take_from_bytes::<u64>(b).ok().map(|(id, _)| id))
        .ok()
        .flatten()
        .flatten();
    if head == Some(o.id) {
        if !o.journaled {
            return None; // served by the loop as if for the first time
        }
        let _ = chans[idx].ch.try_recv(|_| ());
    }
    if is_posted(o.id) {
        return None;
    }
    if let Some(reply) = answer.filter(|_| o.journaled) {
        answer_with(chans, idx, reply);
        return None; // answered as the dead server would have: chains go on
    }
    if !o.journaled && complete {
        // Taken from the ring (the frame is gone: `head` is another) and
        // in no record: the rebuilt server holds nothing of it.
        answer_not_applied(chans, idx, o.id);
        return None; // sent again, not failed: chains go on
    }
    answer_eio(chans, idx, o.id);
    Some(o.session)
}

/// Answer request `id` of channel `idx` "not applied"
/// (`Errno::NOT_APPLIED`): its server took it and died before it reached
/// the journal, so the successor, rebuilt from that journal, holds
/// nothing of it — none of its changes to the server's state; what it
/// took from the block pool and the gauges goes back (`recharge`), and
/// what it wrote to the buffer cache, a second send writes again. In
/// practice such a request changes nothing (`fs::changes_nothing`: never
/// journaled): one that changes something reaches the journal before its
/// frame leaves the ring (`serve_round`), and is served again or answered
/// from its record. The client sends it again (fos §3.5: a fault is
/// invisible wherever it can be).
pub(super) fn answer_not_applied(chans: &mut [Chan], idx: usize, id: u64) {
    let mut buf = [0u8; 64];
    if let Some(n) = error_reply(id, Errno::NOT_APPLIED, &mut buf) {
        answer_with(chans, idx, &buf[..n]);
    }
}

/// Send `reply` on channel `idx`, parked if the ring is full, unless a
/// reply is parked there already (then it is this request's own, which
/// the dead server parked before it died: `deliver_parked` sends it).
fn answer_with(chans: &mut [Chan], idx: usize, reply: &[u8]) {
    let Some(c) = chans.get_mut(idx) else {
        return;
    };
    if c.pending.is_none() && c.ch.try_reply(reply).is_err() {
        c.park(reply);
    }
}

/// Answer request `id` of channel `idx` with `EIO`: it was served, but the
/// server died before its answer went out, so whether it took effect
/// cannot be told from here (it did, if journaled; the client cannot
/// know which).
pub(super) fn answer_eio(chans: &mut [Chan], idx: usize, id: u64) {
    let mut buf = [0u8; 64];
    if let Some(n) = error_reply(id, Errno::EIO, &mut buf) {
        answer_with(chans, idx, &buf[..n]);
    }
}

/// Send the reply `c` parked, if any. `Ok(false)` while the reply ring
/// is still full: nothing more is served from `c` until it went out.
pub(super) fn deliver_parked(c: &mut Chan) -> Result<bool, MsgError> {
    let Some(p) = &c.pending else {
        return Ok(true);
    };
    match c.ch.try_reply(p) {
        Ok(()) => {
            c.unpark();
            Ok(true)
        }
        Err(MsgError::Full) => Ok(false),
        Err(e) => Err(e),
    }
}
