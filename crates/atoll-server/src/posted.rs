//! Posted attribute changes (`Request::SetAttrPosted`): a `fchmod`,
//! `fchown` or `futimens` a client sends without waiting for its answer
//! (client `postattr.rs`), and the two rules that keep it invisible that
//! it did.
//!
//! **Seen by whoever learns of it.** A program that calls `fchmod` and
//! gets 0 may tell another process so (a pipe, a signal, a shared word),
//! and that process's `stat` must then see the new mode, as on Linux. The
//! frame is in its client's ring before the call returns, but the server
//! serves its channels in turn, so the other process's `GetAttr`, in
//! another ring, could be served first. So before serving a request that
//! waits for its answer, the server serves the posted frames at the head
//! of every channel, whenever clients counted a posted change since it
//! last did (`Control::count_posted_attrs`). A client counts after the
//! frame is in the ring and before the call returns (release); if the
//! other request was sent after that return, then once this server has
//! seen that request's frame, a load of the count (acquire) sees the
//! count, and a look at the rings then sees the posted frame. A posted
//! frame is never behind a request that waits in the same ring (a lane
//! sends nothing while it waits), so draining the heads serves it.
//!
//! **Applied in the order made.** Two changes of one inode from two rings
//! (two threads, a parent and a forked child sharing a description, two
//! root processes), the second made after the first returned, must leave
//! the second's result. Each carries a ticket taken before its enqueue
//! (`Control::take_attr_ticket`), so the later one's is higher, and its
//! frame was in its ring before the later one's ticket was taken. Posted
//! changes are served only here, lowest ticket first among the heads, and
//! a ticket only once a look at every head that began after it was first
//! seen found none lower: the earlier change, in its ring before the later
//! was made, was then in view. Tickets of changes made at the same time
//! may be served in either order, as Linux may take their inode locks in
//! either. The round serves a channel only by what its head was when it
//! looked (`round.rs`), so a change that arrives after the look waits for
//! its turn here.
//!
//! The frames go through the loop's own path (`serve_chan`), so the
//! journal and a successor treat them as any other request (a frame leaves
//! its ring only once journaled); their times are the client's (`at`), so
//! a late drain or a replay stamps what the call would have.
//!
//! What the rules do not cover, the client does not post: changes whose
//! effects reach others without a request here (an inotify or fanotify
//! queue, read from shared memory: not while this server publishes a
//! watch held), and changes that could fail (only what the caller's
//! capabilities make certain).

use atoll_proto::{decode, is_posted, Request, RequestFrame};

use super::round::{serve_chan, Serving};
use super::*;

/// Most frames one drain serves: a client posting without end must not
/// keep the server from the request that waits. A drain cut short is
/// taken up again by the next one (nothing is served out of turn).
const MAX_DRAINED: usize = 4096;

/// What a channel's next frame is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Head {
    Empty,
    /// A request its client waits for.
    Waits,
    /// A posted request other than an attribute change.
    Posted,
    /// A posted attribute change and its ticket.
    Ticket(u64),
}

/// What the head of `c`'s request ring is (an error: the ring is closed
/// or corrupt; serving it finds out which). Hot path: one varint for a
/// request that waits; a posted frame is decoded (borrowed) for its kind.
pub(super) fn head(c: &Chan) -> Result<Head, MsgError> {
    let h = c.ch.peek_request(|b| {
        let posted = postcard::take_from_bytes::<u64>(b).is_ok_and(|(id, _)| is_posted(id));
        if !posted {
            return Head::Waits;
        }
        match decode::<RequestFrame<'_>>(b) {
            Ok(RequestFrame {
                req: Request::SetAttrPosted { ticket, .. },
                ..
            }) => Head::Ticket(ticket),
            _ => Head::Posted,
        }
    })?;
    Ok(h.unwrap_or(Head::Empty))
}

/// Before a request that waits is served: if clients counted posted
/// attribute changes since the last complete drain, drain (module docs).
/// `seen`: the count the last complete drain was for. Called once the
/// request's frame was seen at its head: the frame first, then the count.
pub(super) fn drain_before_call<S: BlockStore>(
    at: &mut Serving<'_>,
    fs: &mut FileServer<S>,
    seen: &mut u64,
    chans: &mut [Chan],
) {
    let counted = at.control.posted_attrs(at.index);
    if counted != *seen && drain(at, fs, chans) {
        *seen = counted;
    }
}

/// Serve the posted frames at the heads of every channel, attribute
/// changes by ticket (module docs). Whether it got to the end (no posted
/// head left when it last looked) within [`MAX_DRAINED`] frames.
pub(super) fn drain<S: BlockStore>(
    at: &mut Serving<'_>,
    fs: &mut FileServer<S>,
    chans: &mut [Chan],
) -> bool {
    drain_with(chans, |chans, j| {
        serve_chan(at, fs, chans, j);
        !fs.is_poisoned()
    })
}

/// [`drain`], serving channel `j`'s head by `serve(chans, j)`, which says
/// whether to go on (not after a request that poisoned the server). Also
/// used when a session ended: its rings' last posted changes may have
/// been made after another ring's returned (`on_admin`).
pub(super) fn drain_with(
    chans: &mut [Chan],
    mut serve: impl FnMut(&mut [Chan], usize) -> bool,
) -> bool {
    let mut budget = MAX_DRAINED;
    // The tickets at the heads when last looked.
    let mut before: Vec<u64> = Vec::new();
    let mut now: Vec<u64> = Vec::new();
    // Looks that served nothing are bounded too (tickets that keep
    // arriving lower than the last look's).
    let mut looks = 0;
    let mut go_on = true;
    while go_on && budget > 0 && looks < MAX_DRAINED {
        looks += 1;
        now.clear();
        let mut lowest: Option<(u64, usize)> = None;
        for j in 0..chans.len() {
            if chans[j].pending.is_some() {
                continue; // its lane waits for a reply: it sent nothing
            }
            while go_on && budget > 0 {
                match head(&chans[j]) {
                    Ok(Head::Posted) => {
                        go_on = serve(chans, j);
                        budget -= 1;
                    }
                    Ok(Head::Ticket(t)) => {
                        now.push(t);
                        if lowest.is_none_or(|(l, _)| t < l) {
                            lowest = Some((t, j));
                        }
                        break;
                    }
                    _ => break,
                }
            }
        }
        let Some((t, j)) = lowest else {
            return true;
        };
        // Served only if seen in a look before this whole one.
        if go_on && before.contains(&t) && budget > 0 {
            go_on = serve(chans, j);
            budget -= 1;
        }
        std::mem::swap(&mut before, &mut now);
    }
    false
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd;

    use atoll_proto::{encode, Cred, SetAttr, Timespec, MAX_FRAME, POSTED, ROOT};

    use super::*;

    /// A channel of session 1 and its client end.
    fn channel(lane: u32) -> (Chan, atoll_msg::ClientChannel) {
        let (fd, server) = ServerChannel::create(atoll_msg::RingSize::Small).unwrap();
        let client = atoll_msg::ClientChannel::map(fd.as_fd()).unwrap();
        let chan = Chan {
            session: SessionId(1),
            lane,
            ch: Arc::new(server),
            pending: None,
            requests: 0,
        };
        (chan, client)
    }

    /// Send `req` on `client`, posted or waiting.
    fn send(client: &atoll_msg::ClientChannel, posted: bool, req: Request<'_>) {
        let mut buf = [0u8; MAX_FRAME];
        let frame = RequestFrame {
            id: if posted { 7 | POSTED } else { 7 },
            cred: Cred::default(),
            pid: 0,
            req,
            vouched: Default::default(),
        };
        client
            .send_unrung(encode(&frame, &mut buf).unwrap())
            .unwrap();
    }

    fn ticketed(ticket: u64) -> Request<'static> {
        Request::SetAttrPosted {
            ino: ROOT,
            set: SetAttr::NONE,
            ticket,
            at: Timespec { sec: 0, nsec: 0 },
        }
    }

    fn lookup() -> Request<'static> {
        Request::Lookup {
            dir: ROOT,
            name: b".",
        }
    }

    /// Heads of four rings, each ring's tickets rising (as one lane's
    /// are), the rings' interleaved: the drain serves every posted frame,
    /// the attribute changes lowest ticket first, and leaves the request
    /// that waits.
    #[test]
    fn a_drain_serves_posted_changes_by_ticket_across_rings_and_leaves_calls() {
        let (mut chans, mut clients) = (Vec::new(), Vec::new());
        for lane in 0..4 {
            let (c, cl) = channel(lane);
            chans.push(c);
            clients.push(cl);
        }
        send(&clients[0], true, lookup());
        send(&clients[0], true, ticketed(4));
        send(&clients[0], true, ticketed(6));
        send(&clients[1], true, ticketed(1));
        send(&clients[1], true, ticketed(5));
        send(&clients[2], false, lookup());
        send(&clients[3], true, ticketed(3));
        let mut served = Vec::new();
        let done = drain_with(&mut chans, |chans, j| {
            let got = chans[j]
                .ch
                .try_recv(|b| match decode::<RequestFrame<'_>>(b).unwrap().req {
                    Request::SetAttrPosted { ticket, .. } => ticket,
                    _ => 0,
                });
            served.push(got.unwrap().unwrap());
            true
        });
        assert!(done);
        assert_eq!(served, [0, 1, 3, 4, 5, 6]);
        assert_eq!(head(&chans[2]).unwrap(), Head::Waits);
        for j in [0, 1, 3] {
            assert_eq!(head(&chans[j]).unwrap(), Head::Empty);
        }
    }
}
