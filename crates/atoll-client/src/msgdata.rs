//! File data in messages: `ReadData`/`WriteData`, where the bytes travel
//! inside the requests and replies and the server copies (Cosh §5 *copy*):
//! a copy island, which maps no buffer cache, a program whose servers are
//! on another host (its channels are proxied, fos §3.2), and the
//! `--without direct-cache` ablation. `file.rs` decides which path a read
//! or write takes and calls in here.
//!
//! One message carries at most what its channel's frames allow
//! ([`Lane::data_call`]): 32 KiB on the large channels of a copy island and
//! of a program on another host (issue 16: frames of up to
//! `atoll_proto::MAX_FRAME` on 256 KiB rings), 8 KiB on the small channels
//! of a coherent or incoherent island, which send data in messages only
//! under `--without direct-cache`. A round trip is
//! long (tens of microseconds across hosts), so a large read or write keeps
//! several messages in flight on its lane: requests on one channel are
//! served in order and their replies come back in order.
//!
//! * Reads ([`read_data_window`]): a short reply is the end of the file;
//!   the replies still coming are skipped by the lane's next call.
//! * Writes ([`write_data_window`]): a write that stops part way (`ENOSPC`,
//!   `EFBIG`, `EIO`) must have written exactly the prefix it reports, yet
//!   the pieces after the failing one are already sent. So the pieces form
//!   a chain (`atoll_proto::Chain`) and the server writes a piece only if
//!   every earlier piece of its chain was written in full, answering the
//!   others `Skipped` (server `fs/chain.rs`): what the client counts is
//!   exactly what the file holds.
//!
//! Hot path: `read`/`write` of a copy island; nothing here allocates.

use core::sync::atomic::{AtomicU64, Ordering};

use atoll_proto::{Chain, DescId, Reply, Request};

use crate::error::{Error, Result};
use crate::file::await_writers;
use crate::session::{Client, Lane};

/// `ReadData` requests a read at a known offset keeps in flight at once.
/// Their replies (32 KiB each on a large channel, 8 KiB on a small one)
/// fit the reply ring (256 KiB, 64 KiB) together; a
/// server that finds the ring full parks the next until the client takes
/// one.
const READ_WINDOW: usize = 4;

/// The same for a program on a host without the file servers: its node
/// answers most reads (its copies and read-ahead, `node/copies.rs`), each
/// a round trip to the proxy; six 32 KiB answers (about 193 KiB) still
/// fit the 256 KiB reply ring, so the node finds room for every one.
const REMOTE_READ_WINDOW: usize = 6;

/// `WriteData` pieces of one write in flight at once. Four 32 KiB requests
/// fit the 256 KiB request ring with room to spare; more would only wait
/// for ring space (the reads' window, measured, is 4 too).
const WRITE_WINDOW: usize = 4;

/// The same for a program on a host without the file servers
/// (`InstanceInfo::remote`), whose pieces each wait a network round trip:
/// six 32 KiB pieces (about 193 KiB) still fit the 256 KiB request ring,
/// with room for the node's read-ahead requests on the same channel (32 of
/// about 40 bytes, `node/copies.rs`), so the head's pump never waits for
/// ring space (it would wait with the replies that free it untaken).
const REMOTE_WRITE_WINDOW: usize = 6;

/// Chain ids: unique within this process, hence within its session.
static NEXT_CHAIN: AtomicU64 = AtomicU64::new(1);

/// A `ReadData` reply's bytes into `dst` (at most its length; a reply
/// shorter than `dst` is the end of the file).
fn copy_data(r: Reply<'_>, dst: &mut [u8]) -> Result<usize> {
    match r {
        Reply::Data(data) => {
            let n = data.len().min(dst.len());
            dst[..n].copy_from_slice(&data[..n]);
            Ok(n)
        }
        _ => Err(Error::Protocol("ReadData")),
    }
}

/// Read into `buf` from a server description with `ReadData`.
pub(crate) fn read(
    c: &Client,
    lane: &Lane,
    desc: DescId,
    buf: &mut [u8],
    off: Option<u64>,
) -> Result<usize> {
    // One `IN_ACCESS` per call of the program (`inotify::reports_read`).
    let report = crate::inotify::reports_read();
    match off {
        Some(at) if buf.len() > lane.data_call(c, desc.server()) => {
            read_data_window(c, lane, desc, buf, at, report)
        }
        _ => read_id_serial(c, lane, desc, buf, off, report),
    }
}

/// A read of more than one `ReadData` at a known offset: up to
/// [`READ_WINDOW`] requests are sent before the first reply is awaited, so
/// the read waits for one round trip per window instead of one per 8 KiB.
/// Replies come in order on the lane; a short one (the end of the file)
/// ends the read, and the replies still on their way are skipped by the
/// lane's next call. Only at a known offset: a read at the server's offset
/// must not move it past what it returns.
fn read_data_window(
    c: &Client,
    lane: &Lane,
    desc: DescId,
    buf: &mut [u8],
    off: u64,
    report: bool,
) -> Result<usize> {
    let server = desc.server();
    let chunk = lane.data_call(c, server);
    let chunks = buf.len().div_ceil(chunk);
    let window = if c.info.remote {
        REMOTE_READ_WINDOW
    } else {
        READ_WINDOW
    };
    let mut ids = [0u64; REMOTE_READ_WINDOW];
    let (mut sent, mut next, mut sending) = (0usize, 0usize, true);
    let mut failed = None;
    while next < chunks {
        while sending && sent < chunks && sent - next < window {
            let at = sent * chunk;
            let req = Request::ReadData {
                desc,
                len: (buf.len() - at).min(chunk) as u32,
                offset: Some(off + at as u64),
                report: report && sent == 0,
            };
            match lane.send(c, c.cred(), server, req) {
                Ok(id) => {
                    ids[sent % window] = id;
                    sent += 1;
                }
                Err(e) => {
                    sending = false;
                    failed = Some(e);
                }
            }
        }
        if next == sent {
            break; // nothing in flight: the send failed
        }
        let at = next * chunk;
        let want = (buf.len() - at).min(chunk);
        let dst = &mut buf[at..at + want];
        let got = lane.recv(c, server, ids[next % window], |r| copy_data(r, dst));
        match got {
            Ok(n) if n == want => next += 1,
            Ok(n) => return Ok(at + n),
            // Bytes a writer is still copying in: the rest one request
            // at a time, as any read waits for them (`await_writers`).
            Err(Error::Errno(libc::EAGAIN)) => {
                let report = report && at == 0;
                let rest = &mut buf[at..];
                return match read_id_serial(c, lane, desc, rest, Some(off + at as u64), report) {
                    Ok(n) => Ok(at + n),
                    Err(_) if at > 0 => Ok(at),
                    Err(e) => Err(e),
                };
            }
            Err(_) if at > 0 => return Ok(at),
            Err(e) => return Err(e),
        }
    }
    let done = (next * chunk).min(buf.len());
    match failed {
        Some(e) if done == 0 => Err(e),
        _ => Ok(done),
    }
}

/// `ReadData` one request at a time (at the server's offset, a single
/// chunk, and the window's fallback).
fn read_id_serial(
    c: &Client,
    lane: &Lane,
    desc: DescId,
    buf: &mut [u8],
    off: Option<u64>,
    report: bool,
) -> Result<usize> {
    let mut done = 0usize;
    let chunk = lane.data_call(c, desc.server());
    // At least one `ReadData`, also of no bytes: it moves the atime.
    loop {
        let want = (buf.len() - done).min(chunk);
        let dst = &mut buf[done..done + want];
        let req = || Request::ReadData {
            desc,
            len: want as u32,
            offset: off.map(|o| o + done as u64),
            report: report && done == 0,
        };
        let got =
            await_writers(|| lane.call(c, desc.server(), req(), |r| copy_data(r, &mut *dst)))?;
        done += got;
        if got < want || done == buf.len() {
            break;
        }
    }
    Ok(done)
}

/// Write `src` to a server description with `WriteData`, at `off` or at
/// the description's offset (also `O_APPEND`: the server chooses), under
/// the file size limit `fsize`. A partial write reports what was written.
pub(crate) fn write(
    c: &Client,
    lane: &Lane,
    desc: DescId,
    src: &[u8],
    off: Option<u64>,
    fsize: Option<u64>,
) -> Result<usize> {
    if src.len() <= lane.data_call(c, desc.server()) {
        return write_serial(c, lane, desc, src, off, fsize);
    }
    write_data_window(c, lane, desc, src, off, fsize)
}

/// How one piece of a write came back.
enum Piece {
    /// Written in full: the next one may follow.
    Full,
    /// Written up to here (short, or failed with bytes before it).
    Short(usize),
    /// Failed before any byte of it.
    Failed(Error),
}

fn piece_reply(r: Result<u64>, want: usize) -> Piece {
    match r {
        Ok(n) if n as usize >= want => Piece::Full,
        Ok(n) => Piece::Short(n as usize),
        Err(e) => Piece::Failed(e),
    }
}

/// A write of more than one `WriteData`: up to [`WRITE_WINDOW`] pieces of
/// one chain in flight, their replies taken in order. The first piece
/// that is short or fails ends the write; the server skipped every later
/// one (`Skipped`), and their replies still on the way are dropped by the
/// lane's next call as stale (`Lane::recv`). Pieces at the description's
/// offset are chained as well: the server moves the offset piece by piece
/// and, after the first short one, no further.
fn write_data_window(
    c: &Client,
    lane: &Lane,
    desc: DescId,
    src: &[u8],
    off: Option<u64>,
    fsize: Option<u64>,
) -> Result<usize> {
    let server = desc.server();
    let chunk = lane.data_call(c, server);
    let pieces = src.len().div_ceil(chunk);
    let id = NEXT_CHAIN.fetch_add(1, Ordering::Relaxed);
    let window = if c.info.remote {
        REMOTE_WRITE_WINDOW
    } else {
        WRITE_WINDOW
    };
    let mut ids = [0u64; REMOTE_WRITE_WINDOW];
    let (mut sent, mut next) = (0usize, 0usize);
    let mut unsent = false;
    while next < pieces {
        while !unsent && sent < pieces && sent - next < window {
            let at = sent * chunk;
            let req = Request::WriteData {
                desc,
                data: &src[at..(at + chunk).min(src.len())],
                offset: off.map(|o| o + at as u64),
                fsize,
                chain: Some(Chain {
                    id,
                    seq: sent as u32,
                    last: sent + 1 == pieces,
                }),
            };
            match lane.send(c, c.cred(), server, req) {
                Ok(rid) => {
                    ids[sent % window] = rid;
                    sent += 1;
                }
                // Take the replies of what went; the rest goes one at a
                // time below.
                Err(_) => unsent = true,
            }
        }
        if next == sent {
            break;
        }
        let at = next * chunk;
        let want = (src.len() - at).min(chunk);
        let r = lane.recv(c, server, ids[next % window], |r| match r {
            Reply::Written(n) => Ok(n),
            // Only after an earlier piece ended the write, which was seen
            // first; or the chain was cut (its server died): nothing more.
            Reply::Skipped => Ok(0),
            _ => Err(Error::Protocol("WriteData")),
        });
        match piece_reply(r, want) {
            Piece::Full => next += 1,
            Piece::Short(n) => return Ok(at + n),
            Piece::Failed(_) if at > 0 => return Ok(at),
            Piece::Failed(e) => return Err(e),
        }
    }
    let done = next * chunk;
    if done >= src.len() {
        return Ok(src.len());
    }
    // Every piece sent was written in full but the rest could not be sent
    // (the chain's last piece never went: the server forgets the chain
    // with the session, or past its bound).
    match write_serial(
        c,
        lane,
        desc,
        &src[done..],
        off.map(|o| o + done as u64),
        fsize,
    ) {
        Ok(n) => Ok(done + n),
        Err(_) if done > 0 => Ok(done),
        Err(e) => Err(e),
    }
}

/// `WriteData` one piece at a time: a write of one piece, and the
/// window's fallback.
fn write_serial(
    c: &Client,
    lane: &Lane,
    desc: DescId,
    src: &[u8],
    off: Option<u64>,
    fsize: Option<u64>,
) -> Result<usize> {
    let mut done = 0usize;
    let chunk = lane.data_call(c, desc.server());
    while done < src.len() {
        let want = (src.len() - done).min(chunk);
        let req = Request::WriteData {
            desc,
            data: &src[done..done + want],
            offset: off.map(|o| o + done as u64),
            fsize,
            chain: None,
        };
        let r = lane.call(c, desc.server(), req, |r| match r {
            Reply::Written(n) => Ok(n),
            _ => Err(Error::Protocol("WriteData")),
        });
        match piece_reply(r, want) {
            Piece::Full => done += want,
            Piece::Short(n) => return Ok(done + n),
            // A partial write reports what was written (POSIX).
            Piece::Failed(_) if done > 0 => return Ok(done),
            Piece::Failed(e) => return Err(e),
        }
    }
    Ok(done)
}
