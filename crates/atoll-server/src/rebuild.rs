//! Rebuilding a server that died from its journal (fos §3.5), and the
//! answer its replay recomputes for the request it died serving.
//!
//! Replay is deterministic: every answer from outside is on a record's
//! tape, and a replay that asks otherwise is refused. So replaying the
//! record of the request a server process was serving when it died
//! (`Journal::owe`) computes the reply the dead server would have sent:
//! the same state, the same branches, the same descriptions, inode and
//! block numbers and timestamps. The successor sends that reply instead
//! of `EIO` (`take_over`). What a replay does not reproduce is what it
//! skips, effects outside the server, and no reply depends on those: a
//! reply carries server state, taped answers, and at most bytes the
//! request read from the buffer cache (`ReadData`). The cache survives
//! the server and already holds whatever the dead one wrote into it (a
//! record is appended only after its handler returned), so the bytes read
//! again are the file's bytes, unless a client wrote them meanwhile
//! through a mapping or extents it already held: a write concurrent with
//! a read that had not returned yet, which that read may see on Linux
//! too. Every request is one record and one reply: servers never message
//! each other, so a rename across servers or an `rmdir`'s three phases
//! (Hare §3.7.5) are several requests from the client, each answered
//! from its own server's journal.

use super::*;

/// A new server in the place of one that died: every record of its
/// journal replayed, in order, with its tape (fos §3.5). The result is the
/// lost server's state as of its last acknowledged operation, block for
/// block; an `Err` says why it cannot be trusted.
pub fn rebuild(
    params: &ServerParams,
    control: &std::rc::Rc<Control>,
    journal: &Journal,
) -> Result<FileServer<SharedStore>, String> {
    rebuild_answering(params, control, journal, None).map(|(fs, _)| fs)
}

/// [`rebuild`], and the reply (an encoded `ReplyFrame`) its replay
/// computed for the request `owed` (read from the journal's header at the
/// death), if that request reached the journal and waits for a reply.
pub fn rebuild_answering(
    params: &ServerParams,
    control: &std::rc::Rc<Control>,
    journal: &Journal,
    owed: Option<Owed>,
) -> Result<(FileServer<SharedStore>, Option<Vec<u8>>), String> {
    rebuild_showing(params, control, journal, owed, None)
}

/// [`rebuild_answering`], handing `replies` the reply (an encoded
/// `ReplyFrame`) its replay computed for every request record after the
/// snapshot it started from: tests compare them with the live server's.
pub(crate) fn rebuild_showing(
    params: &ServerParams,
    control: &std::rc::Rc<Control>,
    journal: &Journal,
    owed: Option<Owed>,
    mut replies: Option<&mut dyn FnMut(u64, Vec<u8>)>,
) -> Result<(FileServer<SharedStore>, Option<Vec<u8>>), String> {
    if journal.full() {
        return Err("its journal filled up".into());
    }
    let (image, records) = journal
        .read()
        .ok_or_else(|| "its journal does not parse".to_string())?;
    let mut records = records.into_iter();
    let mut fs = match image {
        Some(image) => from_snapshot(params, control, &image)?,
        None => {
            let genesis = records
                .next()
                .filter(|r| r.kind == Kind::Genesis)
                .ok_or_else(|| "its journal has no beginning".to_string())?;
            tape::replay(genesis.tape);
            let fs = fresh_server(params, control);
            if !tape::replayed_exactly() {
                return Err("its creation replayed differently".into());
            }
            fs.map_err(|e| e.to_string())?
        }
    };
    // What the owed request claimed from the pool before its process
    // died, if it never reached the journal: the replay never hears of it.
    let claimed = owed.map_or_else(Vec::new, |o| journal.claimed_unjournaled(&o));
    let owed = owed.filter(|o| o.journaled && !is_posted(o.id));
    let mut answer: Option<Vec<u8>> = None;
    let mut scratch = Vec::with_capacity(MAX_FRAME);
    for (n, r) in records.enumerate() {
        tape::replay(r.tape);
        let replayed = catch_unwind(AssertUnwindSafe(|| match r.kind {
            Kind::Opened => fs.session_opened(r.session),
            Kind::Closed => fs.session_closed(r.session),
            Kind::Flush => fs.flush_events(),
            Kind::Reconcile => fs.reconcile_blocks(),
            Kind::CutChains => fs.cut_chains(r.session),
            Kind::Request => {
                if let Ok(frame) = decode::<RequestFrame<'_>>(&r.frame) {
                    let id = frame.id;
                    fs.set_requester(frame.pid);
                    let reply = fs.handle_vouched(
                        r.session,
                        frame.cred,
                        &frame.vouched,
                        frame.req,
                        &mut scratch,
                    );
                    fs.set_requester(0);
                    // The first record at or after the owed request's
                    // start is its own (nothing else is appended before
                    // it is settled: `serve_round`); session and id make
                    // sure.
                    let owed_here = owed
                        .is_some_and(|o| r.at >= o.began && r.session == o.session && id == o.id);
                    let owed_here = owed_here && answer.is_none();
                    if owed_here || replies.is_some() {
                        let bytes = encoded_reply(id, reply);
                        if let (Some(show), Some(b)) = (replies.as_mut(), &bytes) {
                            show(id, b.clone());
                        }
                        if owed_here {
                            answer = bytes;
                        }
                    }
                }
                // Its invalidations were delivered by the lost server
                // (the owed request's were not: its successor raises
                // every channel's overflow flag instead, `take_over`).
                fs.take_notices();
                fs.take_adapt_notices();
            }
            Kind::Genesis => panic!("a second beginning"),
        }));
        if replayed.is_err() || !tape::replayed_exactly() {
            tape::off();
            return Err(format!(
                "record {} of its journal replayed differently",
                n + 1
            ));
        }
    }
    // What a request the lost server died in before its record had
    // claimed from the pool goes back to it (the replay never claimed it).
    if !claimed.is_empty() {
        fs.give_back_blocks(&claimed);
        journal.clear_claim_note();
        tracing::info!(
            "file server {} rebuilt: {} blocks a request it died in had claimed given back",
            params.fs.index,
            claimed.len()
        );
    }
    // What the lost server had reserved in a request it died in goes back
    // to the instance's gauges (`fs::limits::Accounts`).
    let given_back = fs.recharge();
    if given_back.iter().any(|&n| n != 0) {
        tracing::info!(
            "file server {} rebuilt: gauges corrected by {given_back:?} (reservations of a request it died in)",
            params.fs.index
        );
    }
    Ok((fs, answer))
}

/// `reply` to request `id` as the live server encodes it
/// (`serve_frame_kept`: one that does not encode is answered `EIO`).
fn encoded_reply(id: u64, reply: Reply<'_>) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; MAX_FRAME];
    let n = match encode(&ReplyFrame { id, reply }, &mut buf) {
        Ok(b) => b.len(),
        Err(_) => error_reply(id, Errno::EIO, &mut buf)?,
    };
    buf.truncate(n);
    Some(buf)
}

/// A server holding the state of the snapshot `image` (`snapshot`).
fn from_snapshot(
    params: &ServerParams,
    control: &std::rc::Rc<Control>,
    image: &[u8],
) -> Result<FileServer<SharedStore>, String> {
    // The shell is made as a replay makes a server: it takes nothing from
    // the pool and moves no gauge (what it would make is replaced, and
    // what the snapshot holds is counted there already). Its tape is
    // empty, so it asks the clock live, for a root it drops.
    tape::replay(Vec::new());
    let shell = fresh_server(params, control);
    tape::off();
    let mut fs = shell.map_err(|e| e.to_string())?;
    fs.load_state(image)
        .map_err(|e| format!("its snapshot does not decode: {e}"))?;
    // The lost server delivered these (or their sessions are gone).
    fs.take_notices();
    fs.take_adapt_notices();
    Ok(fs)
}
