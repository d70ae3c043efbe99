//! Opening FIFOs (Linux's `fifo_open` rules) and reopening pipe ends
//! through `/dev/fd/N` and its spellings. The ring and the end counts are
//! `crate::pipe`'s; the server counts a new end and reads the partner-open
//! count in one step (server `fs/pipe.rs` `pipe_opening`), and an opener
//! waits here until a partner opened since (Hare §3.6: a FIFO is an
//! ordinary inode whose ends are open descriptions).

use core::sync::atomic::Ordering;

use atoll_proto::pipe as hdr;
use atoll_proto::{DescId, FileType, Reply, Request};

use crate::error::{err, Error, Result};
use crate::fdtable::DescInfo;
use crate::file;
use crate::intr;
use crate::pipe::{active, cookie, pipe_fd, ACTIVE};
use crate::ring::Ring;
use crate::session::{Client, Lane};
use crate::Out;

/// After `Open`/`OpenInode` of a FIFO answered `Opened`: fetch its ring
/// and apply Linux's open rules. Returns the cookie for the descriptor.
/// * `O_RDONLY` waits until a writer has opened (not with `O_NONBLOCK`);
/// * `O_WRONLY` waits for a reader; with `O_NONBLOCK` and no reader, `ENXIO`;
/// * `O_RDWR` never waits.
///
/// An anonymous pipe reopened through `/dev/fd/N` (`named` false) never
/// waits (Linux's `fifo_open` checks `is_pipe`). On error the description
/// is closed here.
pub fn fifo_opened(c: &Client, lane: &Lane, desc: DescId, flags: u32, named: bool) -> Result<u64> {
    if flags & libc::O_PATH as u32 != 0 {
        return Ok(0);
    }
    let r = fifo_wait(
        c,
        lane,
        desc,
        if named { flags } else { libc::O_RDWR as u32 },
    );
    if r.is_err() {
        let _ = lane.call_ok(c, desc.server(), Request::Close { desc });
    }
    r
}

fn fifo_wait(c: &Client, lane: &Lane, desc: DescId, flags: u32) -> Result<u64> {
    let (header, seen_opens) =
        lane.call(
            c,
            desc.server(),
            Request::PipeHeader { desc },
            |r| match r {
                Reply::Pipe {
                    header,
                    partner_opens,
                    ..
                } => Ok((header, partner_opens)),
                _ => Err(Error::Protocol("PipeHeader")),
            },
        )?;
    ACTIVE.store(true, Ordering::Relaxed);
    let nb = flags & libc::O_NONBLOCK as u32 != 0;
    if crate::pipecopy::active(c) {
        let acc = flags & libc::O_ACCMODE as u32;
        if acc != libc::O_RDONLY as u32 && acc != libc::O_WRONLY as u32 {
            return Ok(cookie(header));
        }
        if let Some(seen) = seen_opens {
            let reader = acc == libc::O_RDONLY as u32;
            crate::pipecopy::wait_partner(c, desc, reader, seen, nb)?;
        }
        return Ok(cookie(header));
    }
    let ring = Ring::at(c.cache(), header).ok_or(Error::Errno(libc::EIO))?;
    let (count, opens, seq) = match flags & libc::O_ACCMODE as u32 {
        a if a == libc::O_RDONLY as u32 => (hdr::WRITERS, hdr::WOPENS, hdr::RSEQ),
        a if a == libc::O_WRONLY as u32 => (hdr::READERS, hdr::ROPENS, hdr::WSEQ),
        _ => return Ok(cookie(header)),
    };
    // The server decided as it counted this end: with a partner open then,
    // never wait; otherwise wait for a partner, or for the partner-open
    // count to move on from `seen` (one opened, and maybe closed, since).
    let Some(seen) = seen_opens else {
        return Ok(cookie(header));
    };
    loop {
        // The signal is looked at before the partner and acted on after
        // (Linux's `wait_event_interruptible`): the caller closes the new
        // description on this error, and closing the last end of a FIFO
        // whose writers came and went would drop what they wrote.
        let interrupted = intr::pending();
        let s = ring.word(seq).load(Ordering::Acquire);
        if ring.word(count).load(Ordering::Acquire) > 0
            || ring.word(opens).load(Ordering::Acquire) != seen
        {
            return Ok(cookie(header));
        }
        if nb {
            return if count == hdr::READERS {
                err(libc::ENXIO)
            } else {
                Ok(cookie(header))
            };
        }
        if interrupted {
            return err(intr::ERESTARTSYS);
        }
        let r = ring.futex_wait(seq, s, None);
        if r == -(libc::EIO as i64) {
            return err(libc::EIO);
        }
    }
}

/// The descriptor number a `/dev/fd/N`-style path names: `/dev/fd/N`,
/// `/proc/self/fd/N`, `/proc/<own pid>/fd/N`, `/dev/stdin|stdout|stderr`.
pub(crate) fn fd_path(path: &[u8]) -> Option<i64> {
    let num = |s: &[u8]| -> Option<i64> {
        if s.is_empty() || s.len() > 9 || !s.iter().all(u8::is_ascii_digit) {
            return None;
        }
        core::str::from_utf8(s).ok()?.parse().ok()
    };
    match path {
        b"/dev/stdin" => return Some(0),
        b"/dev/stdout" => return Some(1),
        b"/dev/stderr" => return Some(2),
        _ => {}
    }
    if let Some(n) = path.strip_prefix(b"/dev/fd/") {
        return num(n);
    }
    let rest = path.strip_prefix(b"/proc/")?;
    let slash = rest.iter().position(|&b| b == b'/')?;
    let (who, tail) = rest.split_at(slash);
    let me = who == b"self" || num(who) == Some(std::process::id() as i64);
    if !me {
        return None;
    }
    num(tail.strip_prefix(b"/fd/")?)
}

/// `open("/dev/fd/N")` (and the other spellings) of a pipe end: as Linux,
/// a new description of the same pipe with the requested access (what
/// bash's process substitution and `/dev/stdin` rely on). `None`: not a
/// pipe end, carry on.
pub fn reopen(c: &Client, path: &[u8], flags: u32) -> Result<Option<Out>> {
    if !active() {
        return Ok(None);
    }
    let Some(d) = fd_path(path).and_then(pipe_fd) else {
        return Ok(None);
    };
    let ino = d.ino();
    let lane = c.lane()?;
    let keep = flags & !((libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC | libc::O_CLOEXEC) as u32);
    let (desc, _) = file::open_inode(c, &lane, ino, keep)?;
    let cookie = fifo_opened(c, &lane, desc, keep, false)?;
    drop(lane);
    let info = DescInfo {
        desc,
        ino,
        flags: keep | libc::O_LARGEFILE as u32,
        ftype: FileType::Fifo,
        cookie,
        path: None,
    };
    let cloexec = flags & libc::O_CLOEXEC as u32 != 0;
    Ok(Some(Out::Done(file::new_fd(c, info, cloexec)?)))
}

#[cfg(test)]
mod tests {
    use super::fd_path;

    #[test]
    fn fd_paths_name_descriptors_of_this_process_only() {
        assert_eq!(fd_path(b"/dev/fd/63"), Some(63));
        assert_eq!(fd_path(b"/dev/stdin"), Some(0));
        assert_eq!(fd_path(b"/dev/stderr"), Some(2));
        assert_eq!(fd_path(b"/proc/self/fd/7"), Some(7));
        let me = format!("/proc/{}/fd/5", std::process::id());
        assert_eq!(fd_path(me.as_bytes()), Some(5));
        assert_eq!(fd_path(b"/proc/1/fd/5"), None);
        assert_eq!(fd_path(b"/dev/fd/"), None);
        assert_eq!(fd_path(b"/dev/fd/1x"), None);
        assert_eq!(fd_path(b"/proc/self/fdinfo/3"), None);
        assert_eq!(fd_path(b"/atoll/dev/fd/3"), None);
    }
}
