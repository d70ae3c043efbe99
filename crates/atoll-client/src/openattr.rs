//! The attributes an `Open` reply carried, kept for the `fstat` that
//! usually follows (glibc's `opendir`, and programs that size a file they
//! just opened: dbench's every `NTCreateX`), so that call needs no
//! `GetAttr` round trip.
//!
//! Kept only when they are exactly what a `GetAttr` would answer now:
//! every request a server serves moves its count in the control block
//! before its reply (`Control::count_served`), and inode attributes change
//! only by requests their owner serves. The owner puts the count, as it
//! stands with the `Open` served, in the reply (`Reply::Opened::served`);
//! the reply's attributes are kept when the owner served that `Open`, and
//! used while the count still reads so (nothing served since) and this
//! lane's own posted requests (a `WriteDone`, a `Close`) are all taken.
//! One entry per thread: the last open. Pipes, sockets and devices are
//! left out (their servers move some of their state outside requests).

use core::cell::Cell;

use atoll_proto::{Attr, FileType, InodeId};

use crate::session::{Client, Lane};

#[derive(Clone, Copy)]
struct Kept {
    attr: Attr,
    served: u64,
    /// The owner's count of posted attribute changes before the `Open`
    /// was sent ([`posted_mark`]).
    posted: u64,
}

thread_local! {
    static LAST: Cell<Option<Kept>> = const { Cell::new(None) };
}

/// After an `Open` to `server` that answered `attr`, the server's count
/// of served requests once it had served it being `served` (0: not
/// said). Replaces the thread's kept entry.
///
/// The count comes with the reply rather than from reading the count
/// before the `Open` and after its reply: that way also told the `Open`
/// apart, but only when no request this lane posted (the `Close` of the
/// file before, a `WriteDone`) was still waiting in the ring, since the
/// server serves those first and each moves the count too. Opening the
/// next file right after closing the last is what stdio programs do
/// (PostMark: a `GetAttr` for four of every five opens); the reply's
/// count covers the posted requests served ahead of the `Open` as well,
/// whose effects the reply's attributes then already show.
///
/// `posted`: [`posted_mark`] read before the `Open` was sent. A posted
/// `fchmod` (client `postattr.rs`) is counted before its call returns but
/// may wait in its ring, unserved, past the `Open` and the served count
/// it reports; one counted before the `Open` was sent was served first
/// (server `posted.rs`), so the kept attributes hold only while the
/// count still reads as it did then.
pub fn opened(c: &Client, server: usize, served: u64, posted: u64, attr: &Attr) {
    let keep = served != 0
        && !c.info.remote
        && c.maps_cache()
        && server == attr.ino.owner()
        && matches!(attr.ftype, FileType::Regular | FileType::Directory);
    LAST.with(|l| {
        l.set(keep.then_some(Kept {
            attr: *attr,
            served,
            posted,
        }))
    });
}

/// Before an `Open` sent to `server`: its count of posted attribute
/// changes, for [`opened`].
pub fn posted_mark(c: &Client, server: usize) -> u64 {
    c.control().posted_attrs(server)
}

/// The attributes of `ino` a `GetAttr` would answer now, if the last open
/// on this thread kept them and nothing can have changed them since.
pub fn fresh(c: &Client, lane: &Lane, ino: InodeId) -> Option<Attr> {
    let k = LAST.with(|l| l.get())?;
    if k.attr.ino != ino {
        return None;
    }
    // This lane's posted requests first: once they are taken, what they
    // did shows in the count read after.
    if !lane.requests_taken() {
        return None;
    }
    let ctl = c.control();
    let owner = ino.owner();
    if ctl.is_down(owner)
        || ctl.served(owner) != Some(k.served)
        || ctl.posted_attrs(owner) != k.posted
    {
        return None;
    }
    Some(k.attr)
}

/// Before a request to `ino`'s owner that changes no attribute (a `Seek`:
/// stdio's `fopen(…, "a")` seeks to the end of an `O_APPEND` description,
/// whose offset lives at the server, between its `open` and its `fstat`):
/// the kept count, if the kept attributes are `ino`'s and fresh now.
pub fn before_neutral(c: &Client, lane: &Lane, ino: InodeId) -> Option<u64> {
    fresh(c, lane, ino)?;
    LAST.with(|l| l.get()).map(|k| k.served)
}

/// After that request's reply: if the owner's count moved by exactly one,
/// the request was all it served since, so the attributes are still
/// fresh at the new count.
pub fn after_neutral(c: &Client, ino: InodeId, before: Option<u64>) {
    let Some(b) = before else {
        return;
    };
    if c.control().served(ino.owner()) != Some(b.wrapping_add(1)) {
        return;
    }
    LAST.with(|l| {
        if let Some(mut k) = l.get() {
            if k.attr.ino == ino && k.served == b {
                k.served = b.wrapping_add(1);
                l.set(Some(k));
            }
        }
    });
}
