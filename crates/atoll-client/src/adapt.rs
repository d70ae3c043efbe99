//! Adaptive directories, the client's side (Hare §6.1.2; the servers'
//! side and the design are in `atoll-server`'s `fs/adapt.rs`).
//!
//! * **What the client believes.** A directory's mode is its id's flag
//!   and width (epoch 0) until the client learns otherwise: [`MODES`]
//!   caches `(width, epoch)` of directories whose home server said so
//!   (width 0: centralized; a distributed directory's names are spread over
//!   servers `0..width`, the member count when it became distributed).
//!   It is only a cache: every server checks each request against the
//!   mode it knows and answers a stale one `EMODE`, so a lost or torn
//!   slot costs one more round trip, never a wrong answer. With no
//!   adapted directory seen, routing costs one relaxed load (hot path).
//! * **Stale answers.** [`Lane`](crate::session::Lane) calls about one
//!   name (`Lookup`, `Open`, `MakeNode`, `Unlink`, …) that answer `EMODE`
//!   ask the home server for the mode ([`refresh`], which waits while a
//!   swap is under way, and resumes one whose coordinator died) and go to
//!   the name's server under it, with the attributes and epoch that server
//!   needs ([`rerouted`]; a `Link` whose link count another server would
//!   keep goes back to its caller instead). Whole-directory calls
//!   (`getdents`, the marks of an rmdir, a rename's one message) refresh
//!   and start again. `EMODE` never reaches a program (`EAGAIN` if it
//!   would).
//! * **Coordinating a swap** ([`swap`]; K42 ch. 6 phases): `Begin` at
//!   home, `Block` at the others, `Export`→`Import` of every shard's
//!   misplaced entries, `Complete` at the others and home last. A failure
//!   before `Complete` sends `Cancel` everywhere.
//! * **Listing** ([`getdents`]): an entry keeps its cookie across swaps,
//!   and cookies are unique in the directory, so a directory distributed
//!   by a swap is read by merging all servers' entries in cookie order;
//!   one cookie is valid in either mode, and a listing that spans swaps
//!   returns each entry that stayed exactly once.

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use atoll_proto::{
    entry_server_in, moved_len, parse_moved, AdaptStep, Errno, InodeId, ModeInfo, Reply, Request,
};

use crate::error::{err, Error, Result};
use crate::session::{Client, Lane};
use crate::sys;

/// Errno value of a stale route (`Errno::EMODE`), never shown to programs.
pub const EMODE: i32 = Errno::EMODE.0;

struct Slot {
    key: AtomicU64,
    val: AtomicU64,
}

const SLOTS: usize = 256;
#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Slot = Slot {
    key: AtomicU64::new(0),
    val: AtomicU64::new(0),
};
/// Modes learnt from home servers, by hash of the directory id.
// With the other big zero tables after `.bss` (`fdtable::DESCS` says why).
#[cfg_attr(target_os = "linux", link_section = ".bss.atoll_tables")]
static MODES: [Slot; SLOTS] = [EMPTY; SLOTS];
/// Set once any directory's mode was learnt (routing's fast path).
static ANY: AtomicBool = AtomicBool::new(false);
/// A swap the home server's policy asked for (`Notice::Adapt`): the
/// directory id and the wanted mode in bit 0 of `PENDING_MODE`.
static PENDING: AtomicU64 = AtomicU64::new(0);
static PENDING_MODE: AtomicBool = AtomicBool::new(false);
/// A swap is being coordinated by this process (no nested ones).
static SWAPPING: AtomicBool = AtomicBool::new(false);

fn slot(dir: InodeId) -> &'static Slot {
    &MODES[(atoll_proto::name_hash(dir, b"") % SLOTS as u64) as usize]
}

/// The mode learnt for `dir`, if any: `(width, epoch)` (width 0:
/// centralized).
pub fn known(dir: InodeId) -> Option<(usize, u32)> {
    if !ANY.load(Ordering::Relaxed) {
        return None;
    }
    let s = slot(dir);
    let k1 = s.key.load(Ordering::Acquire);
    let v = s.val.load(Ordering::Acquire);
    let k2 = s.key.load(Ordering::Acquire);
    (k1 == dir.0 && k2 == dir.0).then_some(((v & 0xff) as usize, (v >> 8) as u32))
}

/// Remember `dir`'s mode, `width` servers (0: centralized; an older epoch
/// never replaces a newer one).
pub fn learn(dir: InodeId, width: usize, epoch: u32) {
    if epoch == 0 && known(dir).is_none() {
        return; // the id says it already
    }
    if known(dir).is_some_and(|(_, e)| e > epoch) {
        return;
    }
    ANY.store(true, Ordering::Relaxed);
    let s = slot(dir);
    s.key.store(0, Ordering::Release);
    s.val.store(
        ((epoch as u64) << 8) | width.min(0xff) as u64,
        Ordering::Release,
    );
    s.key.store(dir.0, Ordering::Release);
}

/// Is `dir` distributed, as far as this process knows?
pub fn distributed(dir: InodeId) -> bool {
    known(dir).map_or(dir.is_distributed(), |m| m.0 > 0)
}

/// How many servers `dir`'s names are spread over, as far as this process
/// knows (0: centralized): the width the id or the last swap recorded,
/// never today's member count, so members that joined since change no
/// route (Hare §6.1.1). An id without one (made by hand) counts `members`.
pub fn width(c: &Client, dir: InodeId) -> usize {
    match known(dir) {
        Some((w, _)) => w,
        None if dir.is_distributed() => match dir.width() {
            0 => c.members(),
            w => w,
        },
        None => 0,
    }
}

/// The mode epoch this process routes `dir` by.
pub fn epoch(dir: InodeId) -> u32 {
    known(dir).map_or(0, |m| m.1)
}

/// Distributed by a swap (not by its id): listed by merging ([`getdents`]).
pub fn adapted_spread(dir: InodeId) -> bool {
    !dir.is_distributed() && distributed(dir)
}

/// Server holding entry `name` of `dir` (Hare §3.4, under the mode known).
pub fn entry_server(c: &Client, dir: InodeId, name: &[u8]) -> usize {
    entry_server_in(dir, width(c, dir), name)
}

/// `req`, sent to `from`, made fit to go to `to` instead: a new
/// directory's entries start where its inode is made (`MakeNode::home`).
/// `None` when the move would change what the request means: a `Link`
/// raises the link count only where the inode is owned, and the client
/// sent `Ref` (or not) for the first server (the caller starts again).
pub fn rerouted<'a>(mut req: Request<'a>, from: usize, to: usize) -> Option<Request<'a>> {
    match &mut req {
        Request::MakeNode { home, .. } => *home = to as u8,
        Request::Link { ino, .. } if (ino.owner() == from) != (ino.owner() == to) => return None,
        _ => {}
    }
    Some(req)
}

/// The one name a request is about, for re-routing it after `EMODE`.
pub fn route<'a>(req: &Request<'a>) -> Option<(InodeId, &'a [u8])> {
    use Request as Q;
    match *req {
        Q::Lookup { dir, name }
        | Q::Open { dir, name, .. }
        | Q::MakeNode { dir, name, .. }
        | Q::Link { dir, name, .. }
        | Q::Unlink { dir, name, .. }
        | Q::Relink { dir, name, .. } => Some((dir, name)),
        _ => None,
    }
}

/// Ask `dir`'s home server for its mode, waiting while a swap is under way
/// (and resuming one whose coordinator died). Returns whether the epoch
/// moved or a swap was waited for, i.e. whether sending again may help.
pub fn refresh(c: &Client, lane: &Lane, dir: InodeId) -> Result<bool> {
    let before = epoch(dir);
    let mut waited = false;
    let mut wait = 20_000u64;
    let mut total = 0u64;
    loop {
        let info = mode_of(c, lane, dir)?;
        if !info.swapping {
            learn(dir, info.route_width(), info.epoch);
            return Ok(waited || info.epoch != before);
        }
        waited = true;
        if info.orphaned && !SWAPPING.swap(true, Ordering::Acquire) {
            let r = run_swap(c, lane, dir, info.distributed, true);
            SWAPPING.store(false, Ordering::Release);
            r?;
            continue;
        }
        if total > 30_000_000_000 {
            return err(libc::EAGAIN);
        }
        sys::sleep_ns(wait);
        total += wait;
        wait = (wait * 2).min(2_000_000);
    }
}

fn mode_of(c: &Client, lane: &Lane, dir: InodeId) -> Result<ModeInfo> {
    lane.call(c, dir.home(), Request::DirMode { dir }, |r| match r {
        Reply::DirMode(m) => Ok(m),
        _ => Err(Error::Protocol("DirMode")),
    })
}

/// `getxattr(dir, "user.atoll.distributed")`: the current mode, `1` or `0`.
pub fn mode_value(c: &Client, lane: &Lane, dir: InodeId) -> Result<bool> {
    refresh(c, lane, dir)?;
    Ok(distributed(dir))
}

/// `getxattr(dir, "user.atoll.width")`: servers its names spread over now.
pub fn mode_width(c: &Client, lane: &Lane, dir: InodeId) -> Result<usize> {
    refresh(c, lane, dir)?;
    Ok(width(c, dir))
}

/// Swap `dir` to `target` (`setxattr(dir, "user.atoll.distributed", "1"|"0")`,
/// or a policy's `Notice::Adapt`). A swap another process coordinates, or
/// that something under way refuses (`EBUSY`), is tried again a few times.
pub fn swap(c: &Client, lane: &Lane, dir: InodeId, target: bool) -> Result<()> {
    if SWAPPING.swap(true, Ordering::Acquire) {
        return err(libc::EBUSY);
    }
    let mut r = Ok(());
    for attempt in 0..200u64 {
        r = run_swap(c, lane, dir, target, false);
        match r {
            Err(Error::Errno(e)) if e == libc::EBUSY || e == EMODE => {
                let _ = refresh(c, lane, dir);
                sys::sleep_ns(50_000 * (attempt % 20 + 1));
            }
            _ => break,
        }
    }
    SWAPPING.store(false, Ordering::Release);
    r
}

/// One swap of `dir` to `target`, as coordinator (K42 ch. 6 phases).
fn run_swap(c: &Client, lane: &Lane, dir: InodeId, target: bool, resume: bool) -> Result<()> {
    let home = dir.home();
    // One count for the whole swap: a member that joins meanwhile is not
    // blocked, so it must not be asked to export either (it holds none of
    // the directory's names, and the swap routes none to it).
    let members = c.members();
    let begin = AdaptStep::Begin {
        distributed: target,
        resume,
        width: members as u32,
    };
    let info = lane.call(c, home, Request::Adapt { dir, step: begin }, |r| match r {
        Reply::DirMode(m) => Ok(m),
        _ => Err(Error::Protocol("Adapt::Begin")),
    })?;
    if !info.swapping {
        learn(dir, info.route_width(), info.epoch);
        return Ok(()); // already in that mode
    }
    let (epoch, target, width) = (info.epoch, info.distributed, info.route_width());
    // Every member blocks and completes, so each knows the epoch; entries
    // move only between servers of the old and the new width.
    let others: Vec<usize> = (0..members).filter(|&s| s != home).collect();
    let step = |step| Request::Adapt { dir, step };
    let moved = (|| {
        for &s in &others {
            let b = AdaptStep::Block {
                epoch,
                distributed: target,
                base_seq: info.base_seq,
                width: width as u32,
            };
            lane.call_ok(c, s, step(b))?;
        }
        for s in 0..members {
            transfer_from(c, lane, dir, s, epoch, width)?;
        }
        Ok(())
    })();
    if let Err(e) = moved {
        if !resume {
            for s in others.iter().copied().chain([home]) {
                let _ = lane.call_ok(c, s, step(AdaptStep::Cancel { epoch }));
            }
        }
        return Err(e);
    }
    // Complete: home last, so the authority publishes the new mode only
    // once every other server serves it.
    for s in others.iter().copied().chain([home]) {
        lane.call_ok(c, s, step(AdaptStep::Complete { epoch }))?;
    }
    learn(dir, width, epoch);
    Ok(())
}

/// Transfer: copy server `from`'s misplaced entries to their servers.
fn transfer_from(
    c: &Client,
    lane: &Lane,
    dir: InodeId,
    from: usize,
    epoch: u32,
    width: usize,
) -> Result<()> {
    let n = c.members().max(width);
    let mut after = 0u64;
    loop {
        let export = AdaptStep::Export { epoch, after };
        let mut per: Vec<Vec<u8>> = vec![Vec::new(); n];
        let next = lane.call(c, from, Request::Adapt { dir, step: export }, |r| match r {
            Reply::Exported { data, next } => {
                for (seq, ino, ftype, name) in parse_moved(data) {
                    let to = entry_server_in(dir, width, name);
                    let buf = &mut per[to];
                    buf.reserve(moved_len(name));
                    atoll_proto::pack_moved(buf, seq, ino, ftype, name);
                }
                Ok(next)
            }
            _ => Err(Error::Protocol("Adapt::Export")),
        })?;
        for (to, data) in per.iter().enumerate() {
            if !data.is_empty() {
                let import = AdaptStep::Import { epoch, data };
                lane.call_ok(c, to, Request::Adapt { dir, step: import })?;
            }
        }
        match next {
            Some(n) => after = n,
            None => return Ok(()),
        }
    }
}

/// The home server's policy asked for a swap (`Notice::Adapt`): remember
/// it; [`run_pending`] coordinates it at the end of a system call.
pub fn on_notice(dir: InodeId, distributed: bool) {
    PENDING_MODE.store(distributed, Ordering::Relaxed);
    PENDING.store(dir.0, Ordering::Release);
}

/// Coordinate the swap a policy asked for, if any (best effort: a swap
/// that cannot run now is dropped; the policy asks again).
pub fn run_pending(c: &Client, lane: &Lane) {
    if PENDING.load(Ordering::Relaxed) == 0 {
        return;
    }
    let dir = InodeId(PENDING.swap(0, Ordering::Acquire));
    if dir.0 == 0 || SWAPPING.swap(true, Ordering::Acquire) {
        return;
    }
    let target = PENDING_MODE.load(Ordering::Relaxed);
    let _ = run_swap(c, lane, dir, target, false);
    SWAPPING.store(false, Ordering::Release);
}

/// One `getdents64` of a directory distributed by a swap, from `cookie`:
/// every server's entries after the cookie, merged in cookie order, as far
/// as every server that had more than one reply's worth sent. Returns
/// `(bytes, cookie to resume at)`; `EMODE` when the mode moved on. The
/// servers are asked at once (directory broadcast, Hare §3.7.3), or one
/// after the other with `--without broadcast`.
pub fn getdents(
    c: &Client,
    lane: &Lane,
    dir: InodeId,
    cookie: u64,
    buf: &mut [u8],
) -> Result<(usize, u64)> {
    let max_bytes = buf.len().min(u32::MAX as usize) as u32;
    let epoch = epoch(dir);
    let at_once = crate::bcast::enabled(c);
    if at_once {
        crate::counters::bump(&crate::counters::BROADCASTS);
    }
    let mut m = Merge {
        recs: Vec::new(),
        limit: u64::MAX,
        failure: None,
        cookie,
    };
    // Only the servers of its width hold entries (a member that joined
    // after the swap knows nothing of the directory).
    let n = width(c, dir).max(1);
    let mut sent = Vec::with_capacity(n);
    for s in 0..n {
        let req = Request::ReadDir {
            dir,
            cookie,
            max_bytes,
            epoch,
        };
        let id = lane.send(c, c.cred(), s, req);
        match at_once {
            true => sent.push((s, id)),
            false => m.take(c, lane, s, id),
        }
    }
    for (s, id) in sent {
        m.take(c, lane, s, id);
    }
    if let Some(e) = m.failure {
        return Err(e);
    }
    m.recs.sort_by_key(|r| r.0);
    let mut used = 0;
    let mut next = cookie;
    for (seq, rec) in m.recs.iter().filter(|r| r.0 <= m.limit) {
        if used + rec.len() > buf.len() {
            break;
        }
        buf[used..used + rec.len()].copy_from_slice(rec);
        used += rec.len();
        next = *seq;
    }
    if used == 0 && (m.limit != u64::MAX || !m.recs.is_empty()) {
        return err(libc::EINVAL); // not even one record fits
    }
    Ok((used, next))
}

/// The replies of one merged listing: `(cookie, record)`s, the last cookie
/// every server covered, the first failure.
struct Merge {
    recs: Vec<(u64, Vec<u8>)>,
    limit: u64,
    failure: Option<Error>,
    cookie: u64,
}

impl Merge {
    /// Collect server `s`'s reply to request `id` (every reply is read,
    /// even after a failure, so none is left in a ring).
    fn take(&mut self, c: &Client, lane: &Lane, s: usize, id: Result<u64>) {
        let (recs, limit, cookie) = (&mut self.recs, &mut self.limit, self.cookie);
        let r = id.and_then(|id| {
            lane.recv(c, s, id, |r| match r {
                Reply::Dirents { data, end, watched } => {
                    crate::inotify::saw_dir_watched(watched);
                    let mut pos = 0;
                    let mut last = None;
                    while pos + 19 <= data.len() {
                        let reclen = u16::from_ne_bytes([data[pos + 16], data[pos + 17]]) as usize;
                        if reclen < 19 || pos + reclen > data.len() {
                            return Err(Error::Protocol("bad dirent"));
                        }
                        let rec = &data[pos..pos + reclen];
                        let off = u64::from_ne_bytes(rec[8..16].try_into().expect("8 bytes"));
                        recs.push((off, rec.to_vec()));
                        last = Some(off);
                        pos += reclen;
                    }
                    if !end {
                        *limit = (*limit).min(last.unwrap_or(cookie));
                    }
                    Ok(())
                }
                _ => Err(Error::Protocol("ReadDir")),
            })
        });
        if let Err(e) = r {
            self.failure.get_or_insert(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn learnt_modes_route_and_older_epochs_never_win() {
        let dir = InodeId::new(1, 1, false, 4242);
        assert!(!distributed(dir));
        assert_eq!(epoch(dir), 0);
        learn(dir, 3, 3);
        assert_eq!(known(dir), Some((3, 3)));
        assert!(adapted_spread(dir));
        learn(dir, 0, 2);
        assert_eq!(known(dir), Some((3, 3)), "a stale answer is ignored");
        learn(dir, 0, 4);
        assert!(!distributed(dir));
        learn(dir, 64, 5);
        assert_eq!(known(dir), Some((64, 5)), "the width survives the cache");
        let other = InodeId::new(1, 1, false, 4243);
        assert_eq!(known(other), None);
    }
}
