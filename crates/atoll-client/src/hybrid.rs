//! Hybrid file descriptors (Hare §3.5.1).
//!
//! A file offset needs to live on the server only when several processes
//! share one open file description (after `fork`, or an fd handed to a new
//! image). While a single process uses a description, its offset lives in
//! the client (`fdtable`'s `pos`), and `read`/`write`/`lseek` send explicit
//! offsets (or nothing at all for `SEEK_SET`/`SEEK_CUR`), so the server
//! keeps no offset state for them and a `lseek` costs no message.
//!
//! Life cycle of a regular file's description:
//! ```text
//!  open ──▶ LOCAL(pos here) ──fork / exec hand-over──▶ SHARED(pos on server)
//!             │  write with O_APPEND (also after F_SETFL) ──▶ SHARED
//! ```
//! Moving to the server pushes the offset with `Seek(SEEK_SET)` before the
//! `Share` (or the exec state) leaves this process, so every sharer sees
//! it. `O_APPEND` writes stay atomic at the server: such descriptions are
//! never local. Threads of one process serialize offset updates with the
//! description's offset lock (Linux's `f_pos_lock`).
//!
//! `--without hybrid-fd`: every offset lives on the server (ablation).
// TODO(atoll): move the offset back into the client when sharing ends
// (the server would have to say that the other sessions dropped their
// references, e.g. in the `Offset` reply).

use core::sync::atomic::Ordering;

use atoll_proto::{FileType, Reply, Request};

use crate::counters;
use crate::error::{err, Error, Result};
use crate::fdtable::{self, DescRef};
use crate::file;
use crate::session::{Client, Lane};

pub fn enabled(c: &Client) -> bool {
    !c.info.without.hybrid_fd
}

/// A description just opened by this process: its offset (0) may live
/// here.
pub fn adopt(c: &Client, d: &DescRef) {
    let f = d.flags();
    if enabled(c)
        && d.ftype() == FileType::Regular
        && f & libc::O_PATH as u32 == 0
        && f & libc::O_APPEND as u32 == 0
    {
        d.make_local();
    }
}

/// `read` at the local offset. `None`: the offset is on the server.
pub fn read(c: &Client, lane: &Lane, d: &DescRef, buf: &mut [u8]) -> Option<Result<usize>> {
    if !d.is_local() {
        return None;
    }
    let _g = d.lock_pos();
    if !d.is_local() {
        return None;
    }
    counters::bump(&counters::LOCAL_OFFSET_OPS);
    let at = d.pos().load(Ordering::Relaxed);
    let r = file::read_id(c, lane, d.desc(), buf, Some(at));
    if let Ok(n) = r {
        d.pos().store(at + n as u64, Ordering::Relaxed);
    }
    Some(r)
}

/// `write` at the local offset through `f(offset)`. `None`: the offset is
/// on the server (or just moved there: `O_APPEND` must be atomic there).
pub fn write(
    c: &Client,
    lane: &Lane,
    d: &DescRef,
    f: impl FnOnce(u64) -> Result<usize>,
) -> Option<Result<usize>> {
    if !d.is_local() {
        return None;
    }
    let _g = d.lock_pos();
    if !d.is_local() {
        return None;
    }
    if d.flags() & libc::O_APPEND as u32 != 0 {
        if let Err(e) = push(c, lane, d) {
            return Some(Err(e));
        }
        return None;
    }
    counters::bump(&counters::LOCAL_OFFSET_OPS);
    let at = d.pos().load(Ordering::Relaxed);
    let r = f(at);
    if let Ok(n) = r {
        d.pos().store(at + n as u64, Ordering::Relaxed);
    }
    Some(r)
}

/// `lseek` of a local offset: `SEEK_SET`/`SEEK_CUR` without a message;
/// `SEEK_END`/`SEEK_DATA`/`SEEK_HOLE` ask the server (which knows the
/// size and the holes) and keep the answer here.
pub fn seek(c: &Client, lane: &Lane, d: &DescRef, offset: i64, whence: u32) -> Option<Result<i64>> {
    if !d.is_local() {
        return None;
    }
    let _g = d.lock_pos();
    if !d.is_local() {
        return None;
    }
    counters::bump(&counters::LOCAL_OFFSET_OPS);
    let cur = d.pos().load(Ordering::Relaxed) as i64;
    let new = match whence as i32 {
        libc::SEEK_SET => Ok(offset),
        libc::SEEK_CUR => cur.checked_add(offset).ok_or(Error::Errno(libc::EOVERFLOW)),
        _ => {
            let desc = d.desc();
            lane.call(
                c,
                desc.server(),
                Request::Seek {
                    desc,
                    offset,
                    whence,
                },
                |r| match r {
                    Reply::Offset(o) => Ok(o as i64),
                    _ => Err(Error::Protocol("Seek")),
                },
            )
        }
    };
    Some(new.and_then(|n| {
        if n < 0 {
            return err(libc::EINVAL);
        }
        d.pos().store(n as u64, Ordering::Relaxed);
        Ok(n)
    }))
}

/// Move one local offset to the server (caller holds the offset lock).
fn push(c: &Client, lane: &Lane, d: &DescRef) -> Result<()> {
    counters::bump(&counters::OFFSETS_SHARED);
    let desc = d.desc();
    let pos = d.pos().load(Ordering::Relaxed);
    let r = lane.call(
        c,
        desc.server(),
        Request::Seek {
            desc,
            offset: pos as i64,
            whence: libc::SEEK_SET as u32,
        },
        |r| match r {
            Reply::Offset(_) => Ok(()),
            _ => Err(Error::Protocol("Seek")),
        },
    );
    // Even if the push failed (the description died meanwhile) the local
    // copy must not be trusted by a sharer: from now on the server rules.
    d.set_shared();
    r
}

/// Before descriptions leave this process (`Share` at fork, the exec
/// hand-over): move every local offset to its server.
pub fn share_all(c: &Client, lane: &Lane) {
    for d in fdtable::local_descs() {
        let _g = d.lock_pos();
        if d.is_local() {
            let _ = push(c, lane, &d);
        }
    }
}
