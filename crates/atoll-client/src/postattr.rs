//! `fchmod`, `fchown` and `futimens` of a regular file without a round
//! trip: `tar x` sets times, owner and mode of every file it makes this
//! way, three calls in a row, each of which waited for the owner.
//!
//! A change is *posted* (`Request::SetAttrPosted`: one enqueue, the reply
//! unread) only when nobody can tell it was:
//! * **It cannot fail.** The owner refuses a `SetAttr` only for permission
//!   (`EPERM`, `EACCES`) or a size change (server `fs/attrs.rs`); with
//!   `CAP_FOWNER` (mode, times) and `CAP_CHOWN` (owner), and no size, it
//!   succeeds, as Linux's `notify_change` does. The inode lives while the
//!   descriptor does.
//! * **Nobody learns of it out of order.** Its facts live at the owner and
//!   are read only by requests there: the owner serves the posted frames
//!   at the head of every ring before a request that waits once the count
//!   this call raises moved, and posted changes in the order of their
//!   tickets, taken before the enqueue (server `posted.rs` has the
//!   argument). Not while the owner holds an inotify or fanotify watch
//!   (their queues are read without a request), not for a directory (its
//!   change drops other clients' cached lookups before the reply, Hare
//!   §3.7.1), nor by path (watchers of the directory), nor where the
//!   control block is not the owner's (a node's proxy, another host) or
//!   the process's writes may not be at the server (incoherent and copy
//!   islands).
//! * **Its times are the call's.** `ctime`, and times set to `UTIME_NOW`,
//!   are the client's clock at the call (`at`), which the owner and its
//!   journal's replay use instead of the time it serves the frame.

use atoll_proto::boot::Island;
use atoll_proto::{Cred, FileType, Request, SetAttr, Timespec};

use crate::error::Result;
use crate::fdtable::DescRef;
use crate::session::{Client, Lane};

/// `SetAttr` of the file `d` names: posted when [`may_post`], else sent
/// and waited for as any other (`meta::setattr`). Hot path (`tar xf`:
/// three per file): two loads of the control block and two atomic adds
/// on the owner's line.
pub fn setattr_fd(c: &Client, lane: &Lane, d: &DescRef, set: SetAttr) -> Result<()> {
    let ino = d.ino();
    let server = ino.owner();
    if may_post(c, d, set, server) {
        let ctl = c.control();
        let at = now();
        // Before the enqueue: a change made after this one returned takes
        // a later ticket (`Control::take_attr_ticket`).
        let ticket = ctl.take_attr_ticket(server);
        let req = Request::SetAttrPosted {
            ino,
            set,
            ticket,
            at,
        };
        if lane.post_quietly(c, server, req).is_ok() {
            // After the frame is in the ring, before the call returns.
            ctl.count_posted_attrs(server);
            return Ok(());
        }
    }
    crate::meta::setattr(c, lane, ino, None, set).map(|_| ())
}

/// Would the owner certainly accept `set` on `d`'s file, and may it be
/// posted to `server` (module docs)?
fn may_post(c: &Client, d: &DescRef, set: SetAttr, server: usize) -> bool {
    let caps = c.cred().caps;
    let owner_change = set.uid.is_some() || set.gid.is_some();
    let needs = Cred::CAP_FOWNER | if owner_change { Cred::CAP_CHOWN } else { 0 };
    let info = &c.info;
    let ctl = c.control();
    !info.without.posted_attrs
        && info.island == Island::Coherent
        && !info.remote
        && (info.node_members.is_empty() || info.node_members.contains(&(server as u32)))
        && d.ftype() == FileType::Regular
        && d.flags() & libc::O_PATH as u32 == 0
        && set.size.is_none()
        && caps & needs == needs
        && !ctl.is_down(server)
        && ctl.watches(server) == Some(0)
}

/// The wall clock now, as the owner would stamp it.
fn now() -> Timespec {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Realtime);
    Timespec {
        sec: t.tv_sec,
        nsec: t.tv_nsec as u32,
    }
}
