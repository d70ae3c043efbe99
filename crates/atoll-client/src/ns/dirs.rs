//! Listing directories: `getdents`/`getdents64`, one server at a time or
//! by broadcast for distributed directories (Hare §3.7.3).

use super::*;

// Cookie of a distributed directory: server index in the top byte, the
// server's own cookie below, so positions are stable for telldir/seekdir
// whether the servers are read one at a time or by broadcast (Hare §3.7.3).
use crate::bcast::{SRV_MASK, SRV_SHIFT};

/// `getdents64(fd, buf, count)` on an atoll directory.
#[inline(never)]
pub fn getdents64(c: &Client, lane: &Lane, d: &DescRef, buf: &mut [u8]) -> Result<i64> {
    if d.ftype() != FileType::Directory {
        return err(libc::ENOTDIR);
    }
    if d.flags() & libc::O_PATH as u32 != 0 {
        return err(libc::EBADF);
    }
    crate::inotify::dir_listed(c, lane, d, || list(c, lane, d, buf))
}

/// [`getdents64`] past its checks.
pub(super) fn list(c: &Client, lane: &Lane, d: &DescRef, buf: &mut [u8]) -> Result<i64> {
    let dir = d.ino();
    let cookie = d.cookie().load(core::sync::atomic::Ordering::Relaxed);
    let max_bytes = buf.len().min(u32::MAX as usize) as u32;
    let width = crate::adapt::width(c, dir);
    if !dir.is_distributed() || width < 2 {
        return getdents_adaptive(c, lane, d, cookie, buf);
    }
    if crate::bcast::enabled(c) {
        // Directory broadcast (Hare §3.7.3): all servers at once.
        let (n, next) = crate::bcast::getdents(c, lane, dir, cookie, buf, |i| order(c, dir, i))?;
        d.cookie()
            .store(next, core::sync::atomic::Ordering::Relaxed);
        return Ok(n as i64);
    }
    let mut si = (cookie >> SRV_SHIFT) as usize;
    let mut sc = cookie & SRV_MASK;
    while si < width {
        // Visit servers in a fixed order, the home server first so `.` and
        // `..` come first.
        let server = order(c, dir, si);
        let (n, next, _) = read_dir_chunk(c, lane, dir, server, sc, max_bytes, buf, Some(si))?;
        if n > 0 {
            let nx = next.unwrap_or(cookie);
            d.cookie().store(nx, core::sync::atomic::Ordering::Relaxed);
            return Ok(n as i64);
        }
        si += 1;
        sc = 0;
        d.cookie().store(
            (si as u64) << SRV_SHIFT,
            core::sync::atomic::Ordering::Relaxed,
        );
    }
    Ok(0)
}

/// `getdents64` of a directory made centralized, which a swap may have
/// distributed (`adapt`): its cookies are one sequence in either mode, so
/// a listing goes on where it was whatever the mode now.
pub(super) fn getdents_adaptive(
    c: &Client,
    lane: &Lane,
    d: &DescRef,
    cookie: u64,
    buf: &mut [u8],
) -> Result<i64> {
    let dir = d.ino();
    let ended = listed_to_end(d, cookie);
    if ended && quiet_end(c, d) {
        return Ok(0);
    }
    let max_bytes = buf.len().min(u32::MAX as usize) as u32;
    for _ in 0..64 {
        let r = if crate::adapt::adapted_spread(dir) && crate::adapt::width(c, dir) > 1 {
            crate::adapt::getdents(c, lane, dir, cookie, buf).map(|(n, nx)| (n, Some(nx), false))
        } else {
            // At the end, ask past every entry: the server still answers
            // `ENOENT` for a removed directory and reports the access to
            // watches, but shows no entry made since (as Linux, `listed_to_end`).
            let from = if ended { PAST_EVERY_ENTRY } else { cookie };
            read_dir_chunk(c, lane, dir, dir.home(), from, max_bytes, buf, None)
        };
        match r {
            Err(Error::Errno(e)) if e == crate::adapt::EMODE => {
                crate::adapt::refresh(c, lane, dir)?;
            }
            r => {
                let (n, next, end) = r?;
                let at = next.unwrap_or(cookie);
                if let Some(nx) = next {
                    d.cookie().store(nx, core::sync::atomic::Ordering::Relaxed);
                }
                // The reply reached the end: the next call at `at` may
                // answer itself (`quiet_end`). Cookie 0 is where a rewind
                // goes, never an end (the home server lists `.` first).
                if end && at != 0 {
                    d.listed_to()
                        .store(at + 1, core::sync::atomic::Ordering::Relaxed);
                }
                return Ok(n as i64);
            }
        }
    }
    err(libc::EAGAIN)
}

/// A server cookie past every entry a directory can hold (entries count
/// up from 3; the top byte is a distributed listing's server index).
const PAST_EVERY_ENTRY: u64 = SRV_MASK;

/// Did a listing of `d` reach the directory's end at `cookie` (its last
/// `ReadDir` said `end`, and the program has not seeked since)? Linux
/// keeps a directory read to its end there until the program seeks:
/// entries made since do not show (tmpfs and the other `simple_offset`
/// file systems mark the end, `DIR_OFFSET_EOD`, Linux 6.13+; earlier
/// tmpfs put new entries behind the cursor). `lseek` with `SEEK_SET`
/// forgets the end.
fn listed_to_end(d: &DescRef, cookie: u64) -> bool {
    let at = d.listed_to().load(core::sync::atomic::Ordering::Relaxed);
    at != 0 && at == cookie.wrapping_add(1)
}

/// May `getdents64` of `d`, at its end ([`listed_to_end`]), answer 0
/// without a `ReadDir`? The server's answer could only say the same,
/// except in what else the call does on Linux:
/// * `IN_ACCESS` (and fanotify's access events) for a watched
///   directory: the home server publishes how many watches it holds
///   before each reply (`Control::publish_watches`), every server holds
///   every directory's, and none there means none to report;
/// * `ENOENT` once the directory is removed: the description's canonical
///   path must still lead to the directory through cached entries only,
///   whose removal would have reached this session's inboxes first
///   (`DirCache::resolve_cached`).
///
/// Anything unknown (a member down or unpublished, no cache — so
/// `--without dir-cache` turns this off too —, no path, a remote node)
/// asks the server, past every entry.
fn quiet_end(c: &Client, d: &DescRef) -> bool {
    let dir = d.ino();
    let ctl = c.control();
    if c.info.remote || ctl.is_down(dir.home()) || ctl.watches(dir.home()) != Some(0) {
        return false;
    }
    let (Some(dc), Some(path)) = (c.dcache(), d.path()) else {
        return false;
    };
    let Some(rest) = path.strip_prefix(&c.mount[..]) else {
        return false;
    };
    if !rest.is_empty() && rest[0] != b'/' {
        return false;
    }
    dc.resolve_cached(c.session().channels(), atoll_proto::ROOT, rest) == Some(dir)
}

/// The `i`-th server visited when reading distributed directory `dir`
/// (of its width's servers).
pub(super) fn order(c: &Client, dir: InodeId, i: usize) -> usize {
    (dir.home() + i) % crate::adapt::width(c, dir).max(1)
}

/// One `ReadDir` into `buf`; with `tag = Some(i)` rewrite every `d_off`
/// to the merged cookie. Returns bytes copied, the cookie to resume at,
/// and whether the reply reached the end of what `server` holds.
/// `EINVAL` when the buffer cannot hold even one record (as Linux).
#[allow(clippy::too_many_arguments)]
pub(super) fn read_dir_chunk(
    c: &Client,
    lane: &Lane,
    dir: InodeId,
    server: usize,
    cookie: u64,
    max_bytes: u32,
    buf: &mut [u8],
    tag: Option<usize>,
) -> Result<(usize, Option<u64>, bool)> {
    lane.call(
        c,
        server,
        Request::ReadDir {
            dir,
            cookie,
            max_bytes,
            epoch: crate::adapt::epoch(dir),
        },
        |r| match r {
            Reply::Dirents { data, end, watched } => {
                crate::inotify::saw_dir_watched(watched);
                if data.is_empty() {
                    if !end {
                        return err(libc::EINVAL);
                    }
                    return Ok((0, None, true));
                }
                if data.len() > buf.len() {
                    return Err(Error::Protocol("ReadDir overflow"));
                }
                buf[..data.len()].copy_from_slice(data);
                let mut pos = 0;
                let mut last = cookie;
                while pos + 19 <= data.len() {
                    let reclen = u16::from_ne_bytes([buf[pos + 16], buf[pos + 17]]) as usize;
                    if reclen < 19 || pos + reclen > data.len() {
                        return Err(Error::Protocol("bad dirent"));
                    }
                    let mut off =
                        u64::from_ne_bytes(buf[pos + 8..pos + 16].try_into().expect("8 bytes"));
                    last = off;
                    if let Some(i) = tag {
                        off = ((i as u64) << SRV_SHIFT) | (off & SRV_MASK);
                        buf[pos + 8..pos + 16].copy_from_slice(&off.to_ne_bytes());
                        last = off;
                    }
                    pos += reclen;
                }
                Ok((data.len(), Some(last), end))
            }
            _ => Err(Error::Protocol("ReadDir")),
        },
    )
}

/// Old `getdents` (struct linux_dirent) by conversion from getdents64.
#[inline(never)]
pub fn getdents(c: &Client, lane: &Lane, d: &DescRef, out: &mut [u8]) -> Result<i64> {
    // Old records are at most 8 bytes longer: ask for less.
    let mut tmp = vec![0u8; out.len() * 3 / 4 + 32];
    let saved = d.cookie().load(core::sync::atomic::Ordering::Relaxed);
    let n = getdents64(c, lane, d, &mut tmp)? as usize;
    let (mut ip, mut op) = (0usize, 0usize);
    let mut resume = None;
    let mut prev_off = saved;
    while ip + 19 <= n {
        let ino = u64::from_ne_bytes(tmp[ip..ip + 8].try_into().expect("8"));
        let off = u64::from_ne_bytes(tmp[ip + 8..ip + 16].try_into().expect("8"));
        let reclen = u16::from_ne_bytes([tmp[ip + 16], tmp[ip + 17]]) as usize;
        let dtype = tmp[ip + 18];
        let nm = &tmp[ip + 19..ip + reclen];
        let nm = &nm[..nm.iter().position(|&b| b == 0).unwrap_or(nm.len())];
        let olen = (18 + nm.len() + 2).div_ceil(8) * 8;
        if op + olen > out.len() {
            resume = Some(prev_off);
            break;
        }
        let o = &mut out[op..op + olen];
        o.fill(0);
        o[0..8].copy_from_slice(&ino.to_ne_bytes());
        o[8..16].copy_from_slice(&off.to_ne_bytes());
        o[16..18].copy_from_slice(&(olen as u16).to_ne_bytes());
        o[18..18 + nm.len()].copy_from_slice(nm);
        o[olen - 1] = dtype;
        op += olen;
        prev_off = off;
        ip += reclen;
    }
    if let Some(r) = resume {
        d.cookie().store(r, core::sync::atomic::Ordering::Relaxed);
    }
    if op == 0 && n > 0 {
        return err(libc::EINVAL);
    }
    Ok(op as i64)
}
