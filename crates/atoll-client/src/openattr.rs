//! The attributes an `Open` reply carried, kept for the `fstat` that
//! usually follows (glibc's `opendir`, and programs that size a file they
//! just opened: dbench's every `NTCreateX`), so that call needs no
//! `GetAttr` round trip.
//!
//! Kept only when they are exactly what a `GetAttr` would answer now:
//! every request a server serves moves its count in the control block
//! before its reply (`Control::count_served`), and inode attributes change
//! only by requests their owner serves. So the reply's attributes are kept
//! when the owner served that `Open` and nothing else in between (the count
//! moved by exactly one across it), and used while the count has not moved
//! since and this lane's own posted requests (a `WriteDone`, a `Close`)
//! are all taken. One entry per thread: the last open. Pipes, sockets and
//! devices are left out (their servers move some of their state outside
//! requests).

use core::cell::Cell;

use atoll_proto::{Attr, FileType, InodeId};

use crate::session::{Client, Lane};

#[derive(Clone, Copy)]
struct Kept {
    attr: Attr,
    served: u64,
}

thread_local! {
    static LAST: Cell<Option<Kept>> = const { Cell::new(None) };
}

/// Before sending an `Open` to `server` on `lane`: its count now
/// (`None`: nothing will be kept). Not while a request this lane posted
/// (a `Close`, a `WriteDone`) may still be waiting: served between the
/// reading and the `Open`, it would move the count by more than the
/// `Open`. Nothing waits for them here (a program that opens without
/// calling `fstat` after, fs_mark's every file, would pay for it); the
/// `fstat` then simply asks.
pub fn before(c: &Client, lane: &Lane, server: usize) -> Option<u64> {
    if c.info.remote || !c.maps_cache() || !lane.requests_taken() {
        return None;
    }
    c.control().served(server)
}

/// After an `Open` to `server` that answered `attr`, `before` being what
/// [`before`] said just before it was sent.
pub fn opened(c: &Client, server: usize, before: Option<u64>, attr: &Attr) {
    let Some(b) = before else {
        return;
    };
    let keep = server == attr.ino.owner()
        && matches!(attr.ftype, FileType::Regular | FileType::Directory)
        && c.control().served(server) == Some(b.wrapping_add(1));
    LAST.with(|l| {
        l.set(keep.then_some(Kept {
            attr: *attr,
            served: b.wrapping_add(1),
        }))
    });
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
    if ctl.is_down(owner) || ctl.served(owner) != Some(k.served) {
        return None;
    }
    Some(k.attr)
}
