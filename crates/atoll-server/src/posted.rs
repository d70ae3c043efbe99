//! Posted attribute changes: a `SetAttr` a client sends without waiting
//! for its answer, and the one rule that keeps it invisible that it did.
//!
//! A program that calls `fchmod` and gets 0 may tell another process so
//! (a pipe, a signal, a shared counter), and that process's `stat` must
//! then see the new mode, as on Linux. A posted `SetAttr` is in its
//! client's ring before the call returns, but the server serves its
//! channels in turn (`serve_round`), so the other process's `GetAttr`, in
//! another ring, could be served first. The rule: **before serving a
//! request that waits for its answer, the server serves every posted
//! frame at the head of every channel**, whenever clients counted a posted
//! `SetAttr` since it last did (`Control::count_posted_attrs`, one word
//! per server in the control block).
//!
//! Why that is enough. A client counts its posted `SetAttr` after the
//! frame is in the ring and before the call returns (release). If the
//! other process's request was sent after that return (anything that
//! let it know of the call's effect came after it), then once this server
//! has seen that request's frame, a load of the count (acquire) sees the
//! count, and a look at the ring then sees the posted frame. A posted
//! frame is never behind a request waiting for its answer in the same
//! ring: a lane sends nothing while it waits. So draining the heads of all
//! rings after seeing the request, before serving it, serves every posted
//! change that returned before the request was sent. Posted frames of a
//! lane stay in order with its own requests (one ring). The drain serves
//! frames through the same path as the loop (`serve_chan`), so the
//! journal and a successor treat them as any other request (`takeover`:
//! a frame leaves its ring only once journaled).
//!
//! What the rule does not cover, the client does not post: changes whose
//! effects reach others without a request to this server (inotify queues,
//! read straight from shared memory: a server that ever held a watch
//! forbids posting, `Control::forbid_posted_attrs`; a node's edge forbids
//! it for all), and changes that could fail (the client posts only what
//! its credentials make certain to succeed: `atoll_client::meta`).

use atoll_proto::is_posted;

use super::*;

/// Most posted frames taken from one channel in one drain: a client
/// posting without end must not keep the server from the request.
const MAX_PER_CHANNEL: usize = 1024;

/// Before channel `idx`'s head is served: if it waits for its answer and
/// clients counted posted attribute changes since the last drain, serve
/// the posted frames at the head of every other channel first (module
/// docs). `seen`: the count at the last drain. Hot path: one ring peek,
/// one load of the count.
pub(super) fn drain_before<S: BlockStore>(
    at: &mut Serving<'_>,
    fs: &mut FileServer<S>,
    seen: &mut u64,
    chans: &mut [Chan],
    idx: usize,
) {
    // The frame first, then the count: the order the proof needs.
    if head(&chans[idx]) != Some(false) {
        return;
    }
    let counted = at.control.posted_attrs(at.index);
    if counted == *seen {
        return;
    }
    for j in 0..chans.len() {
        if j == idx || chans[j].pending.is_some() {
            // A lane whose reply is parked sends nothing until it has it.
            continue;
        }
        for _ in 0..MAX_PER_CHANNEL {
            if head(&chans[j]) != Some(true) {
                break;
            }
            serve_chan(at, fs, chans, j);
        }
    }
    *seen = counted;
}

/// Whether the request at the head of `c`'s ring is posted (`None`:
/// there is none, or it cannot be read; the loop finds out which).
fn head(c: &Chan) -> Option<bool> {
    c.ch.peek_request(|b| {
        postcard::take_from_bytes::<u64>(b)
            .ok()
            .map(|(id, _)| is_posted(id))
    })
    .ok()
    .flatten()
    .flatten()
}

/// After a request, before its reply: a server that holds an inotify
/// watch forbids posted attribute changes from then on (their events
/// would reach the watch's reader only once drained). Hot path: one
/// branch while no watch was ever held here.
pub(super) fn forbid_if_watched<S: BlockStore>(at: &Serving<'_>, fs: &FileServer<S>) {
    if fs.holds_watches() && at.control.posted_attrs_allowed(at.index) {
        at.control.forbid_posted_attrs(at.index);
    }
}
