//! Directory broadcast (Hare §3.7.3): operations that need every server
//! holding entries of a distributed directory send their request to all of
//! them first and only then collect the replies, so the servers work in
//! parallel and the call costs about one round trip instead of N.
//!
//! Used by `getdents` (this module) and by the marking phase of the
//! three-phase rmdir (`ns::rmdir_at`). `--without broadcast` makes both
//! ask the servers one after the other, for ablation (Hare §5.4).

use atoll_proto::{InodeId, Reply, Request};

use crate::error::{err, Error, Result};
use crate::session::{Client, Lane};

/// Bits of a merged directory cookie naming the server index (the rest is
/// that server's own cookie). Must match `ns`.
pub const SRV_SHIFT: u32 = 56;
pub const SRV_MASK: u64 = (1 << SRV_SHIFT) - 1;

/// Is broadcast on for this instance?
pub fn enabled(c: &Client) -> bool {
    !c.info.without.broadcast
}

/// One `getdents64` of distributed directory `dir` from merged `cookie`:
/// `ReadDir` goes to every server from the cookie's on at once; records are
/// copied in server order while they fit, each `d_off` rewritten to the
/// merged cookie. Returns `(bytes, cookie to resume at)`; `(0, _)` at the
/// end. `order(i)` is the i-th server visited.
pub fn getdents(
    c: &Client,
    lane: &Lane,
    dir: InodeId,
    cookie: u64,
    buf: &mut [u8],
    order: impl Fn(usize) -> usize,
) -> Result<(usize, u64)> {
    // The servers of the directory's width (`adapt::width`).
    let n = crate::adapt::width(c, dir).max(1);
    let first = (cookie >> SRV_SHIFT) as usize;
    if first >= n {
        return Ok((0, cookie));
    }
    let max_bytes = buf.len().min(u32::MAX as usize) as u32;
    crate::counters::bump(&crate::counters::BROADCASTS);
    let mut sent = Vec::with_capacity(n - first);
    for si in first..n {
        let server = order(si);
        let ck = if si == first { cookie & SRV_MASK } else { 0 };
        let req = Request::ReadDir {
            dir,
            cookie: ck,
            max_bytes,
            epoch: crate::adapt::epoch(dir),
        };
        sent.push((si, server, lane.send(c, c.cred(), server, req)?));
    }
    let mut used = 0usize;
    let mut next = cookie;
    let mut stop = false;
    let mut failure: Option<Error> = None;
    let mut too_small = false;
    for (si, server, id) in sent {
        // Every reply is collected, even after the buffer is full, so none
        // is left behind in a ring.
        let r = lane.recv(c, server, id, |r| match r {
            Reply::Dirents { data, end, watched } => {
                crate::inotify::saw_dir_watched(watched);
                if stop {
                    return Ok(());
                }
                if data.is_empty() && !end {
                    too_small = used == 0;
                    stop = true;
                    return Ok(());
                }
                let mut pos = 0;
                while pos + 19 <= data.len() {
                    let reclen = u16::from_ne_bytes([data[pos + 16], data[pos + 17]]) as usize;
                    if reclen < 19 || pos + reclen > data.len() {
                        return Err(Error::Protocol("bad dirent"));
                    }
                    if used + reclen > buf.len() {
                        too_small = used == 0;
                        stop = true;
                        return Ok(());
                    }
                    let rec = &mut buf[used..used + reclen];
                    rec.copy_from_slice(&data[pos..pos + reclen]);
                    let off = u64::from_ne_bytes(rec[8..16].try_into().expect("8 bytes"));
                    let merged = ((si as u64) << SRV_SHIFT) | (off & SRV_MASK);
                    rec[8..16].copy_from_slice(&merged.to_ne_bytes());
                    next = merged;
                    used += reclen;
                    pos += reclen;
                }
                if end {
                    // This server is done: resume at the next one.
                    next = ((si + 1) as u64) << SRV_SHIFT;
                } else {
                    // More entries here than one reply: later servers'
                    // records must wait (cookie order).
                    stop = true;
                }
                Ok(())
            }
            _ => Err(Error::Protocol("ReadDir")),
        });
        if let Err(e) = r {
            failure.get_or_insert(e);
        }
    }
    if let Some(e) = failure {
        return Err(e);
    }
    if too_small {
        return err(libc::EINVAL);
    }
    Ok((used, next))
}

/// Send `req(server)` to every server in `servers` and collect each
/// `Ok`/error, in parallel (broadcast) or one by one (`--without
/// broadcast`). Returns one result per server, in order.
pub fn all_ok<'a>(
    c: &Client,
    lane: &Lane,
    servers: &[usize],
    req: impl Fn() -> Request<'a>,
) -> Vec<Result<()>> {
    let ok = |r: Reply<'_>| match r {
        Reply::Ok => Ok(()),
        _ => Err(Error::Protocol("expected Ok")),
    };
    if !enabled(c) {
        return servers
            .iter()
            .map(|&s| lane.call(c, s, req(), ok))
            .collect();
    }
    crate::counters::bump(&crate::counters::BROADCASTS);
    let sent: Vec<(usize, Result<u64>)> = servers
        .iter()
        .map(|&s| (s, lane.send(c, c.cred(), s, req())))
        .collect();
    sent.into_iter()
        .map(|(s, id)| lane.recv(c, s, id?, ok))
        .collect()
}
