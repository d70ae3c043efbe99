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
//!             └──── Reclaim: the other holders are gone ◀──────┘
//! ```
//! A shared description asks its server every [`RECLAIM_EVERY`] offset
//! operations whether this process is its only holder again (`Reclaim`,
//! answered with the server's offset), and then keeps the offset here.
//! Moving to the server pushes the offset with `Seek(SEEK_SET)` before the
//! `Share` (or the exec state) leaves this process, so every sharer sees
//! it. `O_APPEND` writes stay atomic at the server, which chooses where each
//! goes and says so in its grant: the offset here then moves to the end of
//! what was written (in islands whose data travels in messages, whose
//! replies do not say where, such descriptions stay at the server).
//! Threads of one process serialize offset updates with the
//! description's offset lock (Linux's `f_pos_lock`).
//!
//! `--without hybrid-fd`: every offset lives on the server (ablation).

use core::sync::atomic::Ordering;

use atoll_proto::{FileType, Reply, Request};

use crate::counters;
use crate::error::{err, Error, Result};
use crate::fdtable::{self, DescRef};
use crate::file;
use crate::session::{Client, Lane};

/// Offset operations on a shared description between two `Reclaim` asks.
pub const RECLAIM_EVERY: u64 = 16;

pub fn enabled(c: &Client) -> bool {
    !c.info.without.hybrid_fd
}

/// A description just opened by this process: its offset (0) may live
/// here.
pub fn adopt(c: &Client, d: &DescRef) {
    if eligible(c, d) {
        d.make_local(0);
    }
}

fn eligible(c: &Client, d: &DescRef) -> bool {
    let f = d.flags();
    enabled(c)
        && d.ftype() == FileType::Regular
        && f & libc::O_PATH as u32 == 0
        && (f & libc::O_APPEND as u32 == 0 || c.direct_data())
}

/// A shared description of this process, with its offset lock held:
/// every [`RECLAIM_EVERY`] offset operations, ask its server whether the
/// other holders are gone, and take the offset back if so. While shared,
/// `pos` counts those operations.
fn try_reclaim(c: &Client, lane: &Lane, d: &DescRef) -> bool {
    if !eligible(c, d) {
        return false;
    }
    let n = d.pos().fetch_add(1, Ordering::Relaxed) + 1;
    if !n.is_multiple_of(RECLAIM_EVERY) {
        return false;
    }
    let desc = d.desc();
    let r = lane.call(c, desc.server(), Request::Reclaim { desc }, |r| match r {
        Reply::Offset(o) => Ok(o),
        _ => Err(Error::Protocol("Reclaim")),
    });
    match r {
        Ok(o) => {
            d.make_local(o);
            counters::bump(&counters::OFFSETS_RECLAIMED);
            true
        }
        Err(_) => false,
    }
}

/// `read` at the description's offset (this call holds the offset lock
/// throughout, so a concurrent reclaim never overtakes a server-offset
/// read). `None` without hybrid descriptors.
pub fn read(c: &Client, lane: &Lane, d: &DescRef, buf: &mut [u8]) -> Option<Result<usize>> {
    if !enabled(c) {
        return None;
    }
    let _g = d.lock_pos();
    if !d.is_local() && !try_reclaim(c, lane, d) {
        return Some(file::read_id(c, lane, d.desc(), buf, None));
    }
    counters::bump(&counters::LOCAL_OFFSET_OPS);
    let at = d.pos().load(Ordering::Relaxed);
    let r = file::read_at(c, lane, d, buf, Some(at));
    if let Ok(n) = r {
        d.pos().store(at + n as u64, Ordering::Relaxed);
    }
    Some(r)
}

/// `f(offset)` at the description's own offset, advanced by what `f`
/// read: `None` (nothing done) when the offset lives at the server, so
/// the caller reads there. Holds the offset lock throughout.
pub fn read_at_local_offset(
    c: &Client,
    d: &DescRef,
    f: impl FnOnce(u64) -> Result<usize>,
) -> Option<Result<usize>> {
    if !enabled(c) {
        return None;
    }
    let _g = d.lock_pos();
    // A shared offset is left to the caller's `read`, which also counts
    // towards taking it back (`try_reclaim`): once per call.
    if !d.is_local() {
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

/// `write` at the description's offset through `f(offset)`, `None`
/// meaning the server's offset (shared). An `O_APPEND` write goes through
/// `append(offset)`, which returns where the server appended to: the
/// server chooses the place, atomically, and the offset here moves to
/// the end of it (where `f` cannot say, in islands whose data travels in
/// messages, the offset goes to the server first). Holds the offset lock
/// throughout.
pub fn write(
    c: &Client,
    lane: &Lane,
    d: &DescRef,
    f: impl FnOnce(Option<u64>) -> Result<usize>,
    append: impl FnOnce(u64) -> Result<(usize, u64)>,
) -> Result<usize> {
    let _g = d.lock_pos();
    if !d.is_local() && !try_reclaim(c, lane, d) {
        return f(None);
    }
    if d.flags() & libc::O_APPEND as u32 != 0 {
        if !c.direct_data() {
            push(c, lane, d)?;
            return f(None);
        }
        counters::bump(&counters::LOCAL_OFFSET_OPS);
        let (n, end) = append(d.pos().load(Ordering::Relaxed))?;
        d.pos().store(end, Ordering::Relaxed);
        return Ok(n);
    }
    counters::bump(&counters::LOCAL_OFFSET_OPS);
    let at = d.pos().load(Ordering::Relaxed);
    let r = f(Some(at));
    if let Ok(n) = r {
        d.pos().store(at + n as u64, Ordering::Relaxed);
    }
    r
}

/// `lseek`. A local offset moves without a message for `SEEK_SET`/
/// `SEEK_CUR`, and for `SEEK_END` when the size board holds the file's
/// size (`sizes`) or the file was opened just before and nothing changed
/// it since (`openattr`: the `Open` reply's size is what the server's
/// `SEEK_END` would add to; stdio's `fopen(…, "a")` seeks so right after
/// its `open`); otherwise `SEEK_END`/`SEEK_DATA`/`SEEK_HOLE` ask the
/// server (which knows the size and the holes) and keep the answer here.
/// `None` without hybrid descriptors.
pub fn seek(c: &Client, lane: &Lane, d: &DescRef, offset: i64, whence: u32) -> Option<Result<i64>> {
    if !enabled(c) {
        return None;
    }
    let server_seek = |offset: i64, whence: u32| file::server_seek(c, lane, d, offset, whence);
    let _g = d.lock_pos();
    if !d.is_local() && !try_reclaim(c, lane, d) {
        return Some(server_seek(offset, whence));
    }
    counters::bump(&counters::LOCAL_OFFSET_OPS);
    let cur = d.pos().load(Ordering::Relaxed) as i64;
    let new = match whence as i32 {
        libc::SEEK_SET => Ok(offset),
        libc::SEEK_CUR => cur.checked_add(offset).ok_or(Error::Errno(libc::EOVERFLOW)),
        // The size its server published, when the board has it (`sizes`).
        libc::SEEK_END => match crate::sizes::end_of(c, d).or_else(|| opened_size(c, lane, d)) {
            Some(size) => (size as i64)
                .checked_add(offset)
                .ok_or(Error::Errno(libc::EOVERFLOW)),
            None => server_seek(offset, whence),
        },
        _ => server_seek(offset, whence),
    };
    Some(new.and_then(|n| {
        if n < 0 {
            return err(libc::EINVAL);
        }
        d.pos().store(n as u64, Ordering::Relaxed);
        Ok(n)
    }))
}

/// The size of `d`'s regular file as its `Open` reply said, while nothing
/// can have changed it since (`openattr::fresh`).
fn opened_size(c: &Client, lane: &Lane, d: &DescRef) -> Option<u64> {
    if d.ftype() != FileType::Regular {
        return None;
    }
    crate::openattr::fresh(c, lane, d.ino()).map(|a| a.size)
}

/// Move one local offset to the server (caller holds the offset lock).
fn push(c: &Client, lane: &Lane, d: &DescRef) -> Result<()> {
    counters::bump(&counters::OFFSETS_SHARED);
    let desc = d.desc();
    let pos = d.pos().load(Ordering::Relaxed);
    // Absolute, so it may go again after a server died on it (`forkshare`).
    let r = crate::forkshare::again(|| {
        lane.call(
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
        )
    });
    // Even if the push failed (the description died meanwhile) the local
    // copy must not be trusted by a sharer: from now on the server rules.
    d.set_shared();
    r
}

/// Before one description leaves this process (passed over a Unix
/// socket, `fdpass`): move its offset to its server if it is here.
pub fn share_one(c: &Client, lane: &Lane, d: &DescRef) -> Result<()> {
    let _g = d.lock_pos();
    if d.is_local() {
        push(c, lane, d)?;
    }
    Ok(())
}

/// Before descriptions leave this process (`Share` at fork, the exec
/// hand-over): move every local offset to its server.
/// Takes a lane only when there is an offset to move.
pub fn share_all(c: &Client, lane: &crate::session::LazyLane) {
    for d in fdtable::local_descs() {
        let _g = d.lock_pos();
        if d.is_local() {
            if let Ok(lane) = lane.get() {
                let _ = push(c, lane, &d);
            }
        }
    }
}
