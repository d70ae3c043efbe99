//! Pipes and FIFOs in a copy island (Cosh §5 *copy*): the process maps no
//! buffer cache, so it cannot reach a pipe's ring; every byte goes to the
//! pipe's server in a message and the server copies it in or out of the
//! ring (server `fs/pipecopy.rs`). `crate::pipe` calls these in place of
//! its ring code when [`active`].
//!
//! Semantics are the ring's (Linux's): a read returns what is there, or
//! waits for bytes or for the last writer to go (end of file); a write of
//! at most `PIPE_BUF` bytes goes in whole, larger ones in pieces; no reader
//! is `EPIPE` with `SIGPIPE`; `O_NONBLOCK` answers `EAGAIN` instead of
//! waiting. Waiting is the one difference in cost: a server never blocks,
//! so an empty (full) pipe answers `EAGAIN` and the client asks again,
//! yielding first and then sleeping from 20 µs up to 1 ms between
//! attempts — a pipe wake-up is seen up to 1 ms late, where a mapped ring
//! wakes the sleeper at once with a futex. A deferred program signal ends
//! the wait as it ends a futex sleep (`intr`).

use atoll_proto::pipe as hdr;
use atoll_proto::{PipeStateInfo, Reply, Request};

use crate::error::{err, Error, Result};
use crate::fdtable::DescRef;
use crate::intr;
use crate::session::Client;
use crate::sys;

/// Largest payload of one `PipeRead`/`PipeWrite` (fits a 12 KiB frame).
const CHUNK: usize = 8192;

/// Does this process reach pipes through messages (a copy island)?
pub fn active(c: &Client) -> bool {
    !c.maps_cache()
}

/// Backoff between attempts of a wait: `attempt` counts from 0.
/// `Err(ERESTARTSYS)` when a deferred program signal waits (the caller
/// unwinds, as from a futex sleep).
pub(crate) fn pause(attempt: u32) -> Result<()> {
    backoff(attempt);
    if intr::pending() {
        return err(intr::ERESTARTSYS);
    }
    Ok(())
}

/// The sleep of [`pause`], without looking for a signal.
fn backoff(attempt: u32) {
    if attempt < 16 {
        // SAFETY: sched_yield takes no arguments.
        unsafe { sys::sc(libc::SYS_sched_yield, 0, 0, 0, 0) };
    } else {
        let shift = (attempt - 16).min(6);
        sys::sleep_ns((20_000u64 << shift).min(1_000_000));
    }
}

/// The state of the pipe behind `d`, from its server.
pub fn state(c: &Client, d: &DescRef) -> Result<PipeStateInfo> {
    state_of(c, d.desc())
}

/// The state of the pipe behind description `desc`.
pub fn state_of(c: &Client, desc: atoll_proto::DescId) -> Result<PipeStateInfo> {
    let lane = c.lane()?;
    lane.call(c, desc.server(), Request::PipeState { desc }, |r| match r {
        Reply::PipeState(s) => Ok(s),
        _ => Err(Error::Protocol("PipeState")),
    })
}

/// `read(2)` of a pipe end (access already checked).
pub fn read(c: &Client, d: &DescRef, buf: &mut [u8]) -> Result<usize> {
    if buf.is_empty() {
        return Ok(0);
    }
    let desc = d.desc();
    let want = buf.len().min(CHUNK);
    let mut attempt = 0u32;
    loop {
        let got = {
            let lane = c.lane()?;
            lane.call(
                c,
                desc.server(),
                Request::PipeRead {
                    desc,
                    len: want as u32,
                },
                |r| match r {
                    Reply::Data(data) => {
                        let n = data.len().min(want);
                        buf[..n].copy_from_slice(&data[..n]);
                        Ok(n)
                    }
                    _ => Err(Error::Protocol("PipeRead")),
                },
            )
        };
        match got {
            Err(Error::Errno(libc::EAGAIN)) => {
                if d.flags() & libc::O_NONBLOCK as u32 != 0 {
                    return err(libc::EAGAIN);
                }
                pause(attempt)?;
                attempt = attempt.saturating_add(1);
            }
            r => return r,
        }
    }
}

/// `write(2)` of a pipe end (access already checked). `SIGPIPE` and
/// `EPIPE` come from `broken` (the caller's, shared with the ring path).
pub fn write(c: &Client, d: &DescRef, buf: &[u8], broken: impl Fn() -> Error) -> Result<usize> {
    let desc = d.desc();
    let mut done = 0usize;
    let mut attempt = 0u32;
    loop {
        // A write of at most PIPE_BUF bytes is one message (atomic); a
        // larger one goes in chunks, each taking what room there is.
        let rest = buf.len() - done;
        let piece = if buf.len() <= hdr::PIPE_BUF {
            rest
        } else {
            rest.min(CHUNK)
        };
        let r = {
            let lane = c.lane()?;
            lane.call(
                c,
                desc.server(),
                Request::PipeWrite {
                    desc,
                    data: &buf[done..done + piece],
                },
                |r| match r {
                    Reply::Written(n) => Ok((n as usize).min(piece)),
                    _ => Err(Error::Protocol("PipeWrite")),
                },
            )
        };
        match r {
            Ok(n) => {
                done += n;
                attempt = 0;
                if done == buf.len() {
                    return Ok(done);
                }
            }
            Err(Error::Errno(libc::EPIPE)) => {
                if done > 0 {
                    return Ok(done);
                }
                return Err(broken());
            }
            Err(Error::Errno(libc::EAGAIN)) => {
                if d.flags() & libc::O_NONBLOCK as u32 != 0 {
                    return if done > 0 {
                        Ok(done)
                    } else {
                        err(libc::EAGAIN)
                    };
                }
                match pause(attempt) {
                    Err(_) if done > 0 => return Ok(done),
                    Err(e) => return Err(e),
                    Ok(()) => {}
                }
                attempt = attempt.saturating_add(1);
            }
            Err(_) if done > 0 => return Ok(done),
            Err(e) => return Err(e),
        }
    }
}

/// `poll` events of a pipe end, as `pipepoll::pipe_events` reads them from a
/// mapped ring.
pub fn events(c: &Client, d: &DescRef) -> i16 {
    let Ok(s) = state(c, d) else {
        return libc::POLLERR;
    };
    let f = d.flags() & libc::O_ACCMODE as u32;
    let mut ev = 0i16;
    if f != libc::O_WRONLY as u32 {
        if s.used > 0 {
            ev |= libc::POLLIN | libc::POLLRDNORM;
        }
        if s.writers == 0 {
            ev |= libc::POLLHUP;
        }
    }
    if f != libc::O_RDONLY as u32 {
        if s.limit.saturating_sub(s.used) >= hdr::PIPE_BUF as u64 {
            ev |= libc::POLLOUT | libc::POLLWRNORM;
        }
        if s.readers == 0 {
            ev |= libc::POLLERR;
        }
    }
    ev
}

/// `F_SETPIPE_SZ`, in every island: the server resizes (Linux's rounding
/// and errors, `pipe.rs` of the server). `EAGAIN` means a client held the
/// ring's lock (the server only tries it): ask again.
pub fn set_size(c: &Client, d: &DescRef, want: u64) -> Result<u64> {
    let desc = d.desc();
    let mut attempt = 0u32;
    loop {
        let lane = c.lane()?;
        let r = lane.call(
            c,
            desc.server(),
            Request::PipeSetSize { desc, size: want },
            |r| match r {
                Reply::Offset(n) => Ok(n),
                _ => Err(Error::Protocol("PipeSetSize")),
            },
        );
        drop(lane);
        match r {
            Err(Error::Errno(libc::EAGAIN)) => pause(attempt)?,
            r => return r,
        }
        attempt = attempt.saturating_add(1);
    }
}

/// A FIFO opened for reading (`reader`) or writing waits for a partner:
/// until the other side's count is above 0 or its open count moved on
/// from `seen` (as `pipefifo::fifo_wait` does on the mapped header).
pub fn wait_partner(
    c: &Client,
    desc: atoll_proto::DescId,
    reader: bool,
    seen: u32,
    nb: bool,
) -> Result<()> {
    let mut attempt = 0u32;
    loop {
        // The signal is looked at before the partner, and acted on after:
        // as Linux's `wait_event_interruptible`, a partner that opened
        // before the signal came is always seen (a state read before a
        // writer came, went and its end raised `SIGCHLD` would otherwise
        // give up the open, close the last end and drop what it wrote).
        let interrupted = intr::pending();
        let s = state_of(c, desc)?;
        let (count, opens) = if reader {
            (s.writers, s.wopens)
        } else {
            (s.readers, s.ropens)
        };
        if count > 0 || opens != seen {
            return Ok(());
        }
        if nb {
            return if reader { Ok(()) } else { err(libc::ENXIO) };
        }
        if interrupted {
            return err(intr::ERESTARTSYS);
        }
        backoff(attempt);
        attempt = attempt.saturating_add(1);
    }
}
