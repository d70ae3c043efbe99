//! One round of a server's loop: at most one request from each channel,
//! each through [`serve_chan`], with posted attribute changes taken in
//! their order first where they are due (`posted`).

use super::posted::{self, Head};
use super::*;

/// What serving one request needs besides the file server and the
/// channels (one round's state: [`serve_round`]).
pub(super) struct Serving<'a> {
    pub(super) index: usize,
    pub(super) control: &'a Control,
    journal: Option<&'a Journal>,
    owing: Option<&'a Journal>,
    bufs: &'a mut Bufs,
    recorder: &'a mut Option<Recorder>,
    owed: &'a mut Option<(usize, u64)>,
    round: &'a mut Round,
    dead: &'a mut Vec<usize>,
}

/// One round: at most one request from each channel, starting at
/// `start` (round robin, so one busy client cannot starve the others);
/// channels found dead or corrupt are closed and dropped. `Err` when the
/// loop must end (a request panicked half way). `posted_seen`: the count
/// of posted attribute changes the last drain was for (`posted`).
#[allow(clippy::too_many_arguments)]
pub(super) fn serve_round<S: BlockStore>(
    index: usize,
    fs: &mut FileServer<S>,
    (journal, owing): (Option<&Journal>, Option<&Journal>),
    chans: &mut Vec<Chan>,
    start: usize,
    bufs: &mut Bufs,
    recorder: &mut Option<Recorder>,
    owed: &mut Option<(usize, u64)>,
    (control, posted_seen): (&Control, &mut u64),
) -> Result<Round, Exit> {
    let mut round = Round::default();
    let n = chans.len();
    let mut dead = Vec::new();
    for k in 0..n {
        if fs.is_poisoned() {
            // Answered `EIO` (unless posted); the state it left is not
            // to be trusted (module docs).
            return Err(Exit::Poisoned);
        }
        let idx = (start + k) % n;
        match deliver_parked(&mut chans[idx]) {
            Ok(true) => {}
            Ok(false) => {
                round.waiting_on_clients = true;
                continue;
            }
            Err(_) => {
                dead.push(idx);
                continue;
            }
        }
        let mut at = Serving {
            index,
            control,
            journal,
            owing,
            bufs: &mut *bufs,
            recorder: &mut *recorder,
            owed: &mut *owed,
            round: &mut round,
            dead: &mut dead,
        };
        // The head decides: a frame that arrives after this look waits
        // for the next round, so a posted change is never served but in
        // its ticket's turn (`posted`).
        match posted::head(&chans[idx]) {
            Ok(Head::Empty) => {}
            Ok(Head::Ticket(_)) => {
                posted::drain(&mut at, fs, chans);
            }
            Ok(Head::Waits) => {
                posted::drain_before_call(&mut at, fs, posted_seen, chans);
                serve_chan(&mut at, fs, chans, idx);
            }
            Ok(Head::Posted) | Err(_) => serve_chan(&mut at, fs, chans, idx),
        }
    }
    if fs.is_poisoned() {
        return Err(Exit::Poisoned);
    }
    if !dead.is_empty() {
        dead.sort_unstable();
        dead.dedup();
        for idx in dead.into_iter().rev() {
            // Closed, not just forgotten: a client waiting on it gets
            // `EIO` instead of waiting for a reply that never comes.
            chans.swap_remove(idx).ch.close();
        }
    }
    Ok(round)
}

/// Serve the request at the head of channel `idx`, if there is one, and
/// send its reply (parked if the ring is full).
pub(super) fn serve_chan<S: BlockStore>(
    at: &mut Serving<'_>,
    fs: &mut FileServer<S>,
    chans: &mut [Chan],
    idx: usize,
) {
    let c = &mut chans[idx];
    let (session, lane) = (c.session, c.lane);
    let mut request_bytes = 0;
    // A reply larger than the channel's frames (a small channel's 12 KiB)
    // does not encode and is answered `EIO` instead of breaking the ring.
    let frame = c.ch.max_frame();
    let got = c.ch.try_recv(|bytes| {
        request_bytes = bytes.len();
        if let Some(j) = at.owing {
            // A successor settles it if this process dies now
            // (`take_over`).
            let id = postcard::take_from_bytes::<u64>(bytes).map_or(0, |(id, _)| id);
            j.owe(session, lane, id);
        }
        serve_frame_kept(
            fs,
            at.journal,
            session,
            bytes,
            &mut at.bufs.scratch,
            &mut at.bufs.reply[..frame],
        )
    });
    if matches!(got, Ok(Some(None))) {
        if let Some(j) = at.owing {
            j.settle(); // posted: nobody waits
        }
    }
    if matches!(got, Ok(Some(_))) {
        c.requests += 1;
        at.round.served += 1;
        if fs.kill_due_taken() {
            // Out of its ring, not answered (`faults::KillPhase`).
            crate::fs::faults::kill_self();
        }
    }
    match got {
        Ok(None) => {}
        Ok(Some(reply)) => served(at, fs, chans, idx, (request_bytes, reply)),
        Err(e) => {
            tracing::warn!(
                "server {}: dropping a channel of {session:?}: {e}",
                at.index
            );
            if matches!(e, MsgError::Corrupt(_)) {
                fs.count_bad_request();
            }
            at.dead.push(idx);
        }
    }
}

/// After channel `idx`'s request was served: notices, events, the trace,
/// and its reply (`None`: posted).
fn served<S: BlockStore>(
    at: &mut Serving<'_>,
    fs: &mut FileServer<S>,
    chans: &mut [Chan],
    idx: usize,
    (request_bytes, reply): (usize, Option<usize>),
) {
    at.round.busy = true;
    // Served (and journaled) but not yet answered: if the loop dies
    // before the answer goes out, the rebuilt server answers `EIO` for it
    // (`run`).
    *at.owed = reply.and_then(|len| {
        postcard::take_from_bytes::<u64>(&at.bufs.reply[..len])
            .ok()
            .map(|(id, _)| (idx, id))
    });
    // Even a posted request can invalidate cached lookups.
    let invalidations = if fs.has_notices() {
        deliver_notices(fs, chans, &mut at.bufs.notice)
    } else {
        0
    };
    deliver_events(fs, at.journal);
    if let Some(rec) = at.recorder.as_mut() {
        let reply_bytes = reply.unwrap_or(0);
        record(
            rec,
            fs,
            &chans[idx],
            at.index,
            request_bytes,
            reply_bytes,
            invalidations,
        );
    }
    let Some(len) = reply else {
        return;
    };
    let c = &mut chans[idx];
    match c.ch.try_reply(&at.bufs.reply[..len]) {
        Ok(()) => {}
        Err(MsgError::Full) => c.park(&at.bufs.reply[..len]),
        Err(_) => at.dead.push(idx),
    }
    if let Some(j) = at.owing {
        // Settled only now: a reply that waits for room is parked in the
        // channel first, so from here on a successor delivers it
        // (`take_over`), and before here it answers `EIO`.
        j.settle();
    }
    *at.owed = None;
}
