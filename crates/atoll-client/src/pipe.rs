//! Pipes and FIFOs as atoll objects (Hare §3.6, fos §4.2): `pipe`/`pipe2`,
//! FIFOs in the mount, and readiness (`poll`, `ppoll`, `select`,
//! `pselect6`, `epoll`) over sets that mix them with host descriptors.
//!
//! Objects: a pipe is a FIFO inode on a file server with a *ring* of
//! buffer-cache blocks that the server allocated (layout:
//! `atoll_proto::pipe`; server side: `atoll-server` `fs/pipe.rs`). Each end
//! is an ordinary open file description, so `dup`, `fork`, `exec` and the
//! death of a process need nothing special: the server counts readers and
//! writers per description and wakes sleepers when the counts move.
//!
//! Data path (Cosh §4-5 *share*): no message per read or write. Under the
//! ring lock (with signals blocked, so a handler of this thread cannot
//! deadlock on it) the writer copies into the ring and advances `HEAD`; the
//! reader copies out and advances `TAIL`. Each side then bumps the other
//! side's wait word and wakes it with `FUTEX_WAKE` only if someone sleeps.
//! Writes of at most `PIPE_BUF` bytes wait for room for all of them, so
//! they are atomic with any number of writers. Blocking writes of 64 KiB
//! or more are tickets the reader copies from instead (`pipeticket`,
//! Cosh §5); the ring's geometry may change under `F_SETPIPE_SZ`, which
//! the server serves (`Ring::lock` reads the new one).
//!
//! Blocking: a reader with nothing to read sleeps on `RSEQ` (a writer wrote
//! or the writer count changed), a writer with no room on `WSEQ`. A program
//! signal that arrives meanwhile is deferred by the interposition layer and
//! cuts the sleep short: the call unwinds with the bytes already moved, or
//! with `ERESTARTSYS` (see `intr`), releasing everything it held, and the
//! handler runs at the boundary; the call is then issued again for an
//! `SA_RESTART` handler, as Linux restarts a pipe read or write.
//!
//! Readiness with host descriptors in the same set: Linux cannot wait on a
//! futex and descriptors at once, so the wait is a loop: the atoll part is
//! checked, then the host part is polled with a short timeout (1 ms,
//! doubling up to 8 ms) carrying the program's signal mask; a set whose only
//! waitable member is one pipe sleeps on that pipe's futex instead. Cost: a
//! wake-up on the pipe is noticed up to 8 ms late in a mixed set, and a
//! long mixed wait makes ~125 host polls per second (`pipepoll`). epoll
//! watches of pipe ends are kept in `pipeepoll`; FIFO opens and `/dev/fd/N`
//! reopens are `pipefifo`'s.
//!
//! Mode: `pipe` and `pipe2` create atoll pipes unless `ATOLL_PIPES=host`
//! (from `atoll run --pipes host`), which keeps them host pipes. FIFOs in
//! the mount are always atoll's.

use core::sync::atomic::{AtomicBool, Ordering};

use atoll_proto::pipe as hdr;
use atoll_proto::{DescId, FileType, Reply, Request};

use crate::error::{err, Error, Result};
use crate::fdtable::{self, DescInfo, DescRef};
use crate::file;
use crate::intr;
use crate::pipesplit as split;
use crate::pipeticket as ticket;
use crate::ring::Ring;
use crate::session::Client;
use crate::sys;
use crate::Out;

/// Environment variable choosing what `pipe(2)` makes: `atoll` or `host`.
pub const ENV_PIPES: &str = "ATOLL_PIPES";

static ATOLL_PIPES: AtomicBool = AtomicBool::new(false);
/// Set once this process holds (or held) a pipe end: only then do reads,
/// writes and readiness calls look for pipes.
pub(crate) static ACTIVE: AtomicBool = AtomicBool::new(false);

/// Read the mode from the environment and notice pipe ends inherited
/// across `exec`. Called by `init`.
pub fn init() {
    let on = !matches!(std::env::var(ENV_PIPES).as_deref(), Ok("host"));
    ATOLL_PIPES.store(on, Ordering::Relaxed);
    crate::pipesplit::init();
    for fd in fdtable::fds() {
        if fdtable::get(fd as i64).is_some_and(|d| d.ftype() == FileType::Fifo) {
            ACTIVE.store(true, Ordering::Relaxed);
        }
    }
}

/// Does `pipe(2)` make atoll pipes in this process?
pub fn enabled() -> bool {
    ATOLL_PIPES.load(Ordering::Relaxed)
}

/// This process now holds a pipe end or a notification queue (which the
/// pipe layer serves too, `inotify`).
pub fn mark_active() {
    ACTIVE.store(true, Ordering::Relaxed);
}

/// May this process hold a pipe end? (Cheap gate for the hot paths.)
pub fn active() -> bool {
    ACTIVE.load(Ordering::Relaxed)
}

pub(crate) fn cookie(header: u32) -> u64 {
    header as u64 + 1
}

/// The ring of a FIFO description (its header block is in the cookie).
pub(crate) fn ring(c: &Client, d: &DescRef) -> Result<Ring> {
    let h = d.cookie().load(Ordering::Relaxed)
        & !(crate::inotify::QUEUE_COOKIE | crate::fanotify::FAN_COOKIE);
    if h == 0 || h > u32::MAX as u64 {
        return err(libc::EIO);
    }
    Ring::at(c.cache(), (h - 1) as u32).ok_or(Error::Errno(libc::EIO))
}

/// The pipe end behind `fd`, if `fd` is one.
pub(crate) fn pipe_fd(fd: i64) -> Option<DescRef> {
    fdtable::get(fd).filter(|d| d.ftype() == FileType::Fifo)
}

// ---------------------------------------------------------------------------
// Creating ends

/// `pipe2(fds, flags)` (and `pipe`: flags 0).
pub fn pipe2(c: &Client, fds: u64, flags: u32) -> Result<Out> {
    if !enabled() {
        return Ok(Out::Host);
    }
    if flags & !(libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_DIRECT) as u32 != 0 {
        return err(libc::EINVAL);
    }
    let lane = c.lane()?;
    // Spread pipes over servers by process, keeping one process's pipes
    // (a shell's pipeline) together.
    let server = c.live_server(std::process::id() as usize % c.members().max(1));
    let made = lane.call(
        c,
        server,
        Request::Pipe {
            flags: flags & !(libc::O_CLOEXEC as u32),
        },
        |r| match r {
            Reply::Pipe {
                ino,
                read,
                write,
                header,
                ..
            } => Ok((ino, read, write, header)),
            _ => Err(Error::Protocol("Pipe")),
        },
    );
    drop(lane);
    let (ino, read, write, header) = match made {
        Ok(x) => x,
        // The server's share of the buffer cache is exhausted: a host pipe
        // connects the processes of this machine.
        Err(Error::Errno(libc::ENFILE | libc::ENOSPC)) => return Ok(Out::Host),
        Err(e) => return Err(e),
    };
    ACTIVE.store(true, Ordering::Relaxed);
    let nb = flags & libc::O_NONBLOCK as u32;
    let cloexec = flags & libc::O_CLOEXEC as u32 != 0;
    let end = |desc: DescId, acc: i32| DescInfo {
        desc,
        ino,
        flags: acc as u32 | nb,
        ftype: FileType::Fifo,
        cookie: cookie(header),
        path: None,
    };
    let rfd = match file::new_fd(c, end(read, libc::O_RDONLY), cloexec) {
        Ok(fd) => fd,
        Err(e) => {
            file::close_desc(c, write, ino);
            return Err(e);
        }
    };
    let wfd = match file::new_fd(c, end(write, libc::O_WRONLY), cloexec) {
        Ok(fd) => fd,
        Err(e) => {
            let lane = c.lane()?;
            let _ = file::close(c, &lane, rfd);
            return Err(e);
        }
    };
    if let Err(e) = sys::put_user(fds, [rfd as i32, wfd as i32]) {
        let lane = c.lane()?;
        let _ = file::close(c, &lane, rfd);
        let _ = file::close(c, &lane, wfd);
        return err(e);
    }
    Ok(Out::Done(0))
}

// ---------------------------------------------------------------------------
// Data

/// Sleep on wait word `seq` (sleeper count `sleep`) unless it moved from
/// `seen`. `Err(ERESTARTSYS)` when a deferred program signal waits: the
/// caller unwinds (see `intr`).
pub(crate) fn sleep(ring: &Ring, seq: usize, sleep: usize, seen: u32) -> Result<()> {
    let r = ring.futex_wait(seq, seen, None);
    ring.word(sleep).fetch_sub(1, Ordering::AcqRel);
    if r == -(libc::EIO as i64) {
        return err(libc::EIO);
    }
    if intr::pending() {
        return err(intr::ERESTARTSYS);
    }
    Ok(())
}

/// Bump the other side's wait word (caller holds the lock) and report
/// whether anyone sleeps on it.
fn bump(ring: &Ring, seq: usize, sleep: usize) -> bool {
    // SeqCst pairs with a poller, which announces itself without the lock
    // (see `pipepoll::poll_loop`): either it sees the bump or this sees the sleeper.
    ring.word(seq).fetch_add(1, Ordering::SeqCst);
    ring.word(sleep).load(Ordering::SeqCst) > 0
}

/// Whether a program buffer was checked whole (`sys::user_slice*`), or is
/// checked only where this process copies it itself, the ring path: a
/// ticket or split hands it to the kernel, which checks it in the copy
/// (`sys::user_slice_mut_unchecked`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Checked {
    Whole,
    WhereCopied,
}

/// `read(2)` on a pipe end.
pub fn read(c: &Client, d: &DescRef, buf: &mut [u8], checked: Checked) -> Result<usize> {
    let f = d.flags();
    if f & libc::O_PATH as u32 != 0 || f & libc::O_ACCMODE as u32 == libc::O_WRONLY as u32 {
        return err(libc::EBADF);
    }
    if crate::pipecopy::active(c) {
        return crate::pipecopy::read(c, d, buf);
    }
    let ring = ring(c, d)?;
    if crate::fanotify::is_group(d) {
        return crate::fanotify::read(c, d, &ring, buf);
    }
    if crate::inotify::is_queue(d) {
        return crate::inotify::read(c, d, &ring, buf);
    }
    if buf.is_empty() {
        return Ok(0);
    }
    // This call's buffer is posted for a writer to split into
    // (`pipesplit`); a split that failed is not tried again in this call
    // (the ticket path sorts out why).
    let mut posted = false;
    let reading = split::Reading::new(&ring, buf.len());
    let mut may_split = reading.may_split();
    loop {
        let sig = sys::SigBlock::new();
        ring.lock();
        if core::mem::take(&mut posted) && split::claimed_after_sleep(&ring) {
            ring.unlock();
            drop(sig);
            match read_split(&ring, buf) {
                Some(r) => return r,
                None => {
                    may_split = false;
                    continue;
                }
            }
        }
        let head = ring.word64(hdr::HEAD).load(Ordering::Acquire);
        let tail = ring.word64(hdr::TAIL).load(Ordering::Acquire);
        let avail = head.wrapping_sub(tail).min(ring.capacity());
        if avail > 0 {
            let n = (avail as usize).min(buf.len());
            if checked == Checked::WhereCopied && sys::check_writable(&mut buf[..n]).is_err() {
                ring.unlock();
                return err(libc::EFAULT);
            }
            if !ring.copy_out(tail, &mut buf[..n]) {
                ring.unlock();
                return err(libc::EIO);
            }
            ring.word64(hdr::TAIL)
                .store(tail + n as u64, Ordering::Release);
            ring.word64(hdr::OPS).fetch_add(1, Ordering::Relaxed);
            let wake = bump(&ring, hdr::WSEQ, hdr::WSLEEP);
            ring.unlock();
            drop(sig);
            if wake {
                ring.wake(hdr::WSEQ, i32::MAX as u32);
            }
            return Ok(n);
        }
        if ticket::offered(&ring) > 0 && split::busy(&ring) {
            // Another reader's split: its bytes are not ours to take.
        } else if ticket::offered(&ring) > 0 {
            if may_split && split::start_with_ticket(&ring, buf) {
                let wake = bump(&ring, hdr::WSEQ, hdr::WSLEEP);
                ring.unlock();
                drop(sig);
                if wake {
                    ring.wake(hdr::WSEQ, i32::MAX as u32);
                }
                match read_split(&ring, buf) {
                    Some(r) => return r,
                    None => {
                        may_split = false;
                        continue;
                    }
                }
            }
            match ticket::take(&ring, buf) {
                Ok(ticket::Take::Copied(n)) => {
                    let wake = bump(&ring, hdr::WSEQ, hdr::WSLEEP);
                    ring.unlock();
                    drop(sig);
                    if wake {
                        ring.wake(hdr::WSEQ, i32::MAX as u32);
                    }
                    return Ok(n);
                }
                Ok(ticket::Take::Again) => {
                    ring.unlock();
                    drop(sig);
                    ring.wake(hdr::WSEQ, i32::MAX as u32);
                    continue;
                }
                Err(e) => {
                    ring.unlock();
                    return Err(e);
                }
            }
        }
        if ring.word(hdr::WRITERS).load(Ordering::Acquire) == 0 {
            ring.unlock();
            return Ok(0);
        }
        if d.flags() & libc::O_NONBLOCK as u32 != 0 {
            ring.unlock();
            return err(libc::EAGAIN);
        }
        // A ticket taken whole but not yet retired does not stop the post:
        // its writer's next write then finds this reader waiting.
        posted = may_split && ticket::offered(&ring) == 0 && split::post(&ring, buf);
        let seen = ring.word(hdr::RSEQ).load(Ordering::Acquire);
        ring.word(hdr::RSLEEP).fetch_add(1, Ordering::AcqRel);
        ring.unlock();
        drop(sig);
        if let Err(e) = sleep(&ring, hdr::RSEQ, hdr::RSLEEP, seen) {
            if !posted {
                return Err(e);
            }
            // Take the buffer back, unless a writer is copying into it:
            // then the bytes are ours (the signal stays pending).
            let sig = sys::SigBlock::new();
            ring.lock();
            let claimed = split::claimed_after_sleep(&ring);
            ring.unlock();
            drop(sig);
            return match claimed.then(|| read_split(&ring, buf)).flatten() {
                Some(Ok(n)) => Ok(n),
                _ => Err(e),
            };
        }
    }
}

/// Run this reader's part of a split (`pipesplit`) into `buf`: the bytes
/// read, or `EFAULT` for a bad buffer, or `None` to look at the pipe again
/// without splitting (the ticket path then finds why the copy failed).
fn read_split(ring: &Ring, buf: &mut [u8]) -> Option<Result<usize>> {
    match split::copy_as_reader(ring, buf) {
        (0, r) if r == -(libc::EFAULT as i64) && !ticket::own_memory_ok(buf) => {
            Some(err(libc::EFAULT))
        }
        (0, _) => None,
        (n, _) => Some(Ok(n)),
    }
}

/// Is a `len`-byte buffer for this pipe end checked only where it is
/// copied ([`Checked::WhereCopied`])? Large buffers of ring pipes: their
/// bytes mostly go by tickets and splits. Not in a copy island nor for a
/// notification queue, whose paths copy the whole buffer themselves.
fn check_where_copied(c: &Client, d: &DescRef, len: usize) -> bool {
    len >= ticket::TICKET_MIN && !crate::pipecopy::active(c) && !crate::inotify::is_queue(d)
}

/// `EPIPE` with `SIGPIPE` when nothing was written (`raise`), else the
/// plain error (the call returns what it wrote, as Linux).
fn broken_pipe_if(raise: bool) -> Error {
    if raise {
        broken_pipe()
    } else {
        Error::Errno(libc::EPIPE)
    }
}

/// `EPIPE`, and `SIGPIPE` to the writing thread (raised here, in the
/// writer, as Linux does: raw `tgkill` of ourselves).
fn broken_pipe() -> Error {
    crate::intr::raise_in_this_thread(libc::SIGPIPE);
    Error::Errno(libc::EPIPE)
}

/// `write(2)` on a pipe end.
pub fn write(c: &Client, d: &DescRef, buf: &[u8], checked: Checked) -> Result<usize> {
    let f = d.flags();
    if f & libc::O_PATH as u32 != 0 || f & libc::O_ACCMODE as u32 == libc::O_RDONLY as u32 {
        return err(libc::EBADF);
    }
    if crate::pipecopy::active(c) {
        return crate::pipecopy::write(c, d, buf, broken_pipe);
    }
    let ring = ring(c, d)?;
    let mut done = 0usize;
    loop {
        let sig = sys::SigBlock::new();
        ring.lock();
        if ring.word(hdr::READERS).load(Ordering::Acquire) == 0 {
            ring.unlock();
            drop(sig);
            if done > 0 {
                return Ok(done);
            }
            return Err(broken_pipe());
        }
        if buf.is_empty() {
            ring.unlock();
            return Ok(0);
        }
        let head = ring.word64(hdr::HEAD).load(Ordering::Acquire);
        let tail = ring.word64(hdr::TAIL).load(Ordering::Acquire);
        let rest = buf.len() - done;
        let nonblocking = d.flags() & libc::O_NONBLOCK as u32 != 0;
        // While a ticket is posted the pipe is full to every other writer:
        // its bytes come first.
        let posted = ticket::posted(&ring) && !ticket::retire_orphan(&ring);
        let room = if posted {
            0
        } else {
            ring.limit().saturating_sub(head.wrapping_sub(tail)) as usize
        };
        // A ticket once the ring is full, as Linux blocks a writer only
        // once the pipe's buffer is, or on an empty ring, where a reader
        // waiting with its buffer posted splits the copy with this writer
        // (`pipesplit`) and a ring copy would only be a second copy. What
        // fits is in the pipe even if a signal then cuts the write
        // (CPython's `test_io` counts on the reader finding those bytes):
        // a cut ticket puts what fits into the ring before returning.
        let empty = head == tail;
        if !posted && (room == 0 || empty) && ticket::wanted(&ring, rest, nonblocking) {
            let with_reader = empty && split::reader_waiting(&ring);
            let (taken, end) = match ticket::post_and_wait(&ring, sig, &buf[done..], with_reader) {
                ticket::Outcome::Taken(n) => (n, None),
                ticket::Outcome::Refused(n) => {
                    done += n;
                    continue;
                }
                ticket::Outcome::Failed(n) => (n, Some(Error::Errno(libc::EFAULT))),
                ticket::Outcome::NoReaders(n) => (n, Some(broken_pipe_if(n + done == 0))),
                ticket::Outcome::Cut(n, e) => {
                    (n + fill(&ring, &buf[done + n..], &e, checked), Some(e))
                }
            };
            done += taken;
            return match end {
                Some(e) if done == 0 => Err(e),
                _ => Ok(done),
            };
        }
        // Up to PIPE_BUF: all or nothing (atomic); beyond: any progress.
        let need = if rest <= hdr::PIPE_BUF { rest } else { 1 };
        if room >= need {
            let n = room.min(rest);
            if checked == Checked::WhereCopied && sys::check_readable(&buf[done..done + n]).is_err()
            {
                ring.unlock();
                return if done > 0 {
                    Ok(done)
                } else {
                    err(libc::EFAULT)
                };
            }
            if !ring.copy_in(head, &buf[done..done + n]) {
                ring.unlock();
                return err(libc::EIO);
            }
            ring.word64(hdr::HEAD)
                .store(head + n as u64, Ordering::Release);
            ring.word64(hdr::OPS).fetch_add(1, Ordering::Relaxed);
            let wake = bump(&ring, hdr::RSEQ, hdr::RSLEEP);
            ring.unlock();
            drop(sig);
            if wake {
                ring.wake(hdr::RSEQ, i32::MAX as u32);
            }
            done += n;
            if done == buf.len() {
                return Ok(done);
            }
            continue;
        }
        if d.flags() & libc::O_NONBLOCK as u32 != 0 {
            ring.unlock();
            return if done > 0 {
                Ok(done)
            } else {
                err(libc::EAGAIN)
            };
        }
        let seen = ring.word(hdr::WSEQ).load(Ordering::Acquire);
        ring.word(hdr::WSLEEP).fetch_add(1, Ordering::AcqRel);
        ring.unlock();
        drop(sig);
        match sleep(&ring, hdr::WSEQ, hdr::WSLEEP, seen) {
            Err(_) if done > 0 => return Ok(done),
            Err(e) => return Err(e),
            Ok(()) => {}
        }
    }
}

/// After a signal cut a ticket: put what fits of `rest` into the ring
/// without waiting, as a Linux writer would have before it slept (only
/// for a program signal, not when the instance is gone). Bytes put.
fn fill(ring: &Ring, rest: &[u8], cut: &Error, checked: Checked) -> usize {
    if !matches!(cut, Error::Errno(e) if *e == intr::ERESTARTSYS || *e == libc::EINTR) {
        return 0;
    }
    let cap = (ring.limit() as usize).min(rest.len());
    if checked == Checked::WhereCopied && sys::check_readable(&rest[..cap]).is_err() {
        return 0;
    }
    let sig = sys::SigBlock::new();
    ring.lock();
    let head = ring.word64(hdr::HEAD).load(Ordering::Acquire);
    let tail = ring.word64(hdr::TAIL).load(Ordering::Acquire);
    let room = ring.limit().saturating_sub(head.wrapping_sub(tail)) as usize;
    let n = room.min(rest.len());
    let readers = ring.word(hdr::READERS).load(Ordering::Acquire);
    if n == 0 || readers == 0 || ticket::posted(ring) || !ring.copy_in(head, &rest[..n]) {
        ring.unlock();
        return 0;
    }
    ring.word64(hdr::HEAD)
        .store(head + n as u64, Ordering::Release);
    ring.word64(hdr::OPS).fetch_add(1, Ordering::Relaxed);
    let wake = bump(ring, hdr::RSEQ, hdr::RSLEEP);
    ring.unlock();
    drop(sig);
    if wake {
        ring.wake(hdr::RSEQ, i32::MAX as u32);
    }
    n
}

/// `readv(2)`: fill the buffers in order; only the first read may block.
fn readv(c: &Client, d: &DescRef, iov: u64, cnt: u64) -> Result<i64> {
    if cnt > 1024 {
        return err(libc::EINVAL);
    }
    let mut total = 0usize;
    for v in sys::get_user_vec::<libc::iovec>(iov, cnt as usize)? {
        if v.iov_len == 0 {
            continue;
        }
        let buf = sys::user_slice_mut(v.iov_base as u64, v.iov_len)?;
        let n = if total == 0 {
            read(c, d, buf, Checked::Whole)?
        } else {
            match avail(c, d) {
                0 => break,
                _ => read(c, d, buf, Checked::Whole)?,
            }
        };
        total += n;
        if n < v.iov_len {
            break;
        }
    }
    Ok(total as i64)
}

/// `writev(2)`: up to `PIPE_BUF` bytes in total are gathered and written
/// at once (atomic, as Linux); larger vectors are written in order.
fn writev(c: &Client, d: &DescRef, iov: u64, cnt: u64) -> Result<i64> {
    if cnt > 1024 {
        return err(libc::EINVAL);
    }
    // One copy of the vector: its lengths cannot change between the sum
    // and the use.
    let vecs: Vec<libc::iovec> = sys::get_user_vec(iov, cnt as usize)?;
    let sum = vecs.iter().fold(0usize, |s, v| s.saturating_add(v.iov_len));
    if sum <= hdr::PIPE_BUF {
        let mut small = [0u8; hdr::PIPE_BUF];
        let mut at = 0;
        for v in &vecs {
            small[at..at + v.iov_len]
                .copy_from_slice(sys::user_slice(v.iov_base as u64, v.iov_len)?);
            at += v.iov_len;
        }
        return Ok(write(c, d, &small[..at], Checked::Whole)? as i64);
    }
    let mut total = 0usize;
    for v in &vecs {
        let n = match write(
            c,
            d,
            sys::user_slice(v.iov_base as u64, v.iov_len)?,
            Checked::Whole,
        ) {
            Ok(n) => n,
            Err(_) if total > 0 => break,
            Err(e) => return Err(e),
        };
        total += n;
        if n < v.iov_len {
            break;
        }
    }
    Ok(total as i64)
}

/// Bytes waiting in the pipe (`FIONREAD`).
fn avail(c: &Client, d: &DescRef) -> usize {
    if crate::pipecopy::active(c) {
        return crate::pipecopy::state(c, d).map_or(0, |s| s.used as usize);
    }
    match ring(c, d) {
        Ok(r) => {
            let head = r.word64(hdr::HEAD).load(Ordering::Acquire);
            let tail = r.word64(hdr::TAIL).load(Ordering::Acquire);
            // A ticket's bytes are readable too; a Linux pipe holds at
            // most its size of a blocked writer's.
            let used = head.wrapping_sub(tail).min(r.capacity());
            (used + ticket::offered(&r)).min(used.max(r.limit())) as usize
        }
        Err(_) => 0,
    }
}

// ---------------------------------------------------------------------------
// Routing

/// Calls that need the pipe layer, before the generic atoll handling.
/// `Ok(None)`: not a pipe matter, carry on.
#[allow(non_upper_case_globals)]
pub fn route(c: &Client, nr: i64, a: &[u64; 6]) -> Result<Option<Out>> {
    let fd0 = a[0] as i32 as i64;
    let on_pipe = |f: &dyn Fn(&DescRef) -> Result<Out>| -> Result<Option<Out>> {
        match pipe_fd(fd0) {
            Some(d) => f(&d).map(Some),
            None => Ok(None),
        }
    };
    match nr {
        libc::SYS_pipe | libc::SYS_pipe2 => {
            let flags = if nr == libc::SYS_pipe { 0 } else { a[1] as u32 };
            match pipe2(c, a[0], flags)? {
                Out::Host => Ok(None),
                o => Ok(Some(o)),
            }
        }
        _ if !active() => Ok(None),
        // `[ -p /dev/stdin ]`: stat through a `/dev/fd/N` path of a pipe end.
        libc::SYS_stat | libc::SYS_newfstatat | libc::SYS_statx => {
            let (ptr, buf, nofollow) = match nr {
                libc::SYS_stat => (a[0], a[1], false),
                libc::SYS_newfstatat => (a[1], a[2], a[3] as i32 & libc::AT_SYMLINK_NOFOLLOW != 0),
                _ => (a[1], a[4], a[2] as i32 & libc::AT_SYMLINK_NOFOLLOW != 0),
            };
            let Some(d) = sys::user_path(ptr)
                .ok()
                .filter(|_| !nofollow)
                .and_then(crate::pipefifo::fd_path)
                .and_then(pipe_fd)
            else {
                return Ok(None);
            };
            let lane = c.lane()?;
            if nr == libc::SYS_statx {
                crate::statx_out(c, &lane, d.ino(), buf).map(Some)
            } else {
                crate::stat_out(c, &lane, d.ino(), buf).map(Some)
            }
        }
        libc::SYS_read => on_pipe(&|d| {
            let len = a[2] as usize;
            if check_where_copied(c, d, len) {
                let buf = sys::user_slice_mut_unchecked(a[1], len)?;
                return Ok(Out::Done(read(c, d, buf, Checked::WhereCopied)? as i64));
            }
            let buf = sys::user_slice_mut(a[1], len)?;
            Ok(Out::Done(read(c, d, buf, Checked::Whole)? as i64))
        }),
        libc::SYS_write => on_pipe(&|d| {
            let len = a[2] as usize;
            if check_where_copied(c, d, len) {
                let buf = sys::user_slice_unchecked(a[1], len)?;
                return Ok(Out::Done(write(c, d, buf, Checked::WhereCopied)? as i64));
            }
            let buf = sys::user_slice(a[1], len)?;
            Ok(Out::Done(write(c, d, buf, Checked::Whole)? as i64))
        }),
        libc::SYS_readv => on_pipe(&|d| Ok(Out::Done(readv(c, d, a[1], a[2])?))),
        libc::SYS_writev => on_pipe(&|d| Ok(Out::Done(writev(c, d, a[1], a[2])?))),
        libc::SYS_preadv2 | libc::SYS_pwritev2 if a[3] as i64 == -1 => on_pipe(&|d| {
            Ok(Out::Done(if nr == libc::SYS_preadv2 {
                readv(c, d, a[1], a[2])?
            } else {
                writev(c, d, a[1], a[2])?
            }))
        }),
        libc::SYS_pread64
        | libc::SYS_pwrite64
        | libc::SYS_preadv
        | libc::SYS_pwritev
        | libc::SYS_preadv2
        | libc::SYS_pwritev2 => on_pipe(&|_| err(libc::ESPIPE)),
        // A notification queue seeks nowhere, as Linux's `noop_llseek`.
        libc::SYS_lseek => on_pipe(&|d| match crate::inotify::is_queue(d) {
            true => Ok(Out::Done(0)),
            false => err(libc::ESPIPE),
        }),
        libc::SYS_ioctl if a[1] == libc::FIONREAD => on_pipe(&|d| {
            sys::put_user(a[2], avail(c, d) as i32)?;
            Ok(Out::Done(0))
        }),
        libc::SYS_fcntl if matches!(a[1] as i32, libc::F_GETPIPE_SZ | libc::F_SETPIPE_SZ) => {
            on_pipe(&|d| {
                if crate::inotify::is_queue(d) {
                    return err(libc::EBADF); // not a pipe (its ring never grows)
                }
                if a[1] as i32 == libc::F_GETPIPE_SZ {
                    let size = if crate::pipecopy::active(c) {
                        crate::pipecopy::state(c, d)?.limit
                    } else {
                        ring(c, d)?.limit()
                    };
                    return Ok(Out::Done(size as i64));
                }
                // The server resizes in every island: it owns the blocks.
                let n = crate::pipecopy::set_size(c, d, a[2] as u32 as u64)?;
                Ok(Out::Done(n as i64))
            })
        }
        libc::SYS_poll | libc::SYS_ppoll => match crate::pipepoll::poll(c, nr, a)? {
            Out::Host => Ok(None),
            o => Ok(Some(o)),
        },
        libc::SYS_select | libc::SYS_pselect6 => match crate::pipepoll::select(c, nr, a)? {
            Out::Host => Ok(None),
            o => Ok(Some(o)),
        },
        libc::SYS_epoll_ctl => match crate::pipeepoll::epoll_ctl(c, a)? {
            Out::Host => Ok(None),
            o => Ok(Some(o)),
        },
        libc::SYS_epoll_wait | libc::SYS_epoll_pwait | libc::SYS_epoll_pwait2 => {
            match crate::pipeepoll::epoll_wait(c, nr, a)? {
                Out::Host => Ok(None),
                o => Ok(Some(o)),
            }
        }
        _ => Ok(None),
    }
}

/// Does system call `nr` need the pipe layer's look (for `may_concern`)?
#[allow(non_upper_case_globals)]
pub fn may_concern(nr: i64) -> bool {
    use libc::*;
    match nr {
        SYS_pipe | SYS_pipe2 => enabled(),
        SYS_select | SYS_pselect6 | SYS_epoll_wait | SYS_epoll_pwait | SYS_epoll_pwait2 => active(),
        _ => false,
    }
}
