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
//! long mixed wait makes ~125 host polls per second. epoll watches of pipe
//! ends are kept in `pipeepoll`.
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
use crate::session::{Client, Lane};
use crate::sys;
use crate::Out;

/// Environment variable choosing what `pipe(2)` makes: `atoll` or `host`.
pub const ENV_PIPES: &str = "ATOLL_PIPES";

static ATOLL_PIPES: AtomicBool = AtomicBool::new(false);
/// Set once this process holds (or held) a pipe end: only then do reads,
/// writes and readiness calls look for pipes.
static ACTIVE: AtomicBool = AtomicBool::new(false);

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

fn cookie(header: u32) -> u64 {
    header as u64 + 1
}

/// The ring of a FIFO description (its header block is in the cookie).
pub(crate) fn ring(c: &Client, d: &DescRef) -> Result<Ring> {
    let h = d.cookie().load(Ordering::Relaxed)
        & !(crate::inotify::QUEUE_COOKIE | crate::fanotify::FAN_COOKIE);
    if h == 0 || h > u32::MAX as u64 {
        return err(libc::EIO);
    }
    Ring::at(&c.cache, (h - 1) as u32).ok_or(Error::Errno(libc::EIO))
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
    let ring = Ring::at(&c.cache, header).ok_or(Error::Errno(libc::EIO))?;
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
        // The partner is looked for before the signal (Linux's
        // `wait_event_interruptible`): the caller closes the new
        // description on this error, and closing the last end of a FIFO
        // whose writers came and went would drop what they wrote.
        if intr::pending() {
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
    // (see `poll_loop`): either it sees the bump or this sees the sleeper.
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
    // SAFETY: integer arguments; signals this very thread.
    unsafe {
        let pid = sys::sc(libc::SYS_getpid, 0, 0, 0, 0);
        let tid = sys::sc(libc::SYS_gettid, 0, 0, 0, 0);
        sys::sc(
            libc::SYS_tgkill,
            pid as u64,
            tid as u64,
            libc::SIGPIPE as u64,
            0,
        );
    }
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
// Readiness

/// `poll` events of a pipe end now (level-triggered, as Linux's
/// `pipe_poll`): readable with data or without writers (`POLLHUP`),
/// writable with `PIPE_BUF` bytes of room, `POLLERR` without readers.
pub(crate) fn pipe_events(c: &Client, d: &DescRef) -> i16 {
    if crate::pipecopy::active(c) {
        return crate::pipecopy::events(c, d);
    }
    let Ok(r) = ring(c, d) else {
        return libc::POLLERR;
    };
    let f = d.flags() & libc::O_ACCMODE as u32;
    let head = r.word64(hdr::HEAD).load(Ordering::Acquire);
    let tail = r.word64(hdr::TAIL).load(Ordering::Acquire);
    let used = head.wrapping_sub(tail).min(r.capacity());
    let mut ev = 0i16;
    if f != libc::O_WRONLY as u32 {
        if used > 0 || ticket::offered(&r) > 0 {
            ev |= libc::POLLIN | libc::POLLRDNORM;
        }
        if r.word(hdr::WRITERS).load(Ordering::Acquire) == 0 {
            ev |= libc::POLLHUP;
        }
    }
    if f != libc::O_RDONLY as u32 {
        if !ticket::posted(&r) && r.limit().saturating_sub(used) >= hdr::PIPE_BUF as u64 {
            ev |= libc::POLLOUT | libc::POLLWRNORM;
        }
        if r.word(hdr::READERS).load(Ordering::Acquire) == 0 {
            ev |= libc::POLLERR;
        }
    }
    ev
}

/// Events of any atoll descriptor: regular files and directories are
/// always ready (Linux); pipes as [`pipe_events`]. `None` for host fds.
fn atoll_events(c: &Client, fd: i32) -> Option<i16> {
    let d = fdtable::get(fd as i64)?;
    Some(if d.ftype() == FileType::Fifo {
        pipe_events(c, &d)
    } else {
        libc::POLLIN | libc::POLLOUT | libc::POLLRDNORM | libc::POLLWRNORM
    })
}

/// Wait word that moves when a pipe end's readiness may change.
fn wait_word(c: &Client, fd: i32, events: i16) -> Option<(Ring, usize)> {
    let d = pipe_fd(fd as i64)?;
    let r = ring(c, &d).ok()?;
    let f = d.flags() & libc::O_ACCMODE as u32;
    let word = if events & (libc::POLLOUT | libc::POLLWRNORM) != 0 && f != libc::O_RDONLY as u32 {
        hdr::WSEQ
    } else {
        hdr::RSEQ
    };
    Some((r, word))
}

pub(crate) const NS: i64 = 1_000_000_000;

pub(crate) fn ts(ns: i64) -> libc::timespec {
    libc::timespec {
        tv_sec: ns / NS,
        tv_nsec: ns % NS,
    }
}

/// The core of every readiness call: `fds` is our own pollfd array.
/// Atoll entries are evaluated here, host entries by `ppoll` with `mask`
/// (the program's, or none). `timeout_ns` < 0 waits forever.
fn poll_loop(
    c: &Client,
    fds: &mut [libc::pollfd],
    timeout_ns: i64,
    mask: Option<u64>,
) -> Result<i64> {
    let deadline = (timeout_ns >= 0).then(|| sys::monotonic_ns().saturating_add(timeout_ns));
    let mut host: Vec<libc::pollfd> = fds.to_vec();
    let mut atoll_rev: Vec<Option<i16>> = vec![None; fds.len()];
    let mut slice: i64 = 1_000_000;
    loop {
        // A deferred program signal ends the wait (readiness calls never
        // restart); its handler runs at the boundary.
        if intr::pending() {
            return err(libc::EINTR);
        }
        let mut ready = 0i64;
        let mut pipes = 0usize;
        let mut hosts = 0usize;
        for (i, p) in fds.iter().enumerate() {
            host[i] = *p;
            atoll_rev[i] = None;
            if p.fd < 0 {
                continue;
            }
            if let Some(ev) = atoll_events(c, p.fd) {
                if pipe_fd(p.fd as i64).is_some() {
                    pipes += 1;
                }
                let want = p.events | libc::POLLHUP | libc::POLLERR;
                let rev = ev & want;
                atoll_rev[i] = Some(rev);
                if rev != 0 {
                    ready += 1;
                }
                host[i].fd = -1;
            } else {
                hosts += 1;
            }
        }
        let left = deadline.map(|d| (d - sys::monotonic_ns()).max(0));
        let expired = left == Some(0);
        // One pipe and nothing else to wait for: sleep on its futex.
        if ready == 0 && !expired && pipes == 1 && hosts == 0 && mask.is_none() {
            let i = (0..fds.len())
                .find(|&i| atoll_rev[i].is_some())
                .unwrap_or(0);
            if let Some((r, word)) = wait_word(c, fds[i].fd, fds[i].events) {
                // Count as a sleeper first (so the other side wakes us),
                // then read the word, then re-check: a change after the
                // check moves the word and the futex does not sleep.
                let sleeper = if word == hdr::RSEQ {
                    hdr::RSLEEP
                } else {
                    hdr::WSLEEP
                };
                r.word(sleeper).fetch_add(1, Ordering::SeqCst);
                let seen = r.word(word).load(Ordering::SeqCst);
                let mut w = 0;
                if atoll_events(c, fds[i].fd).unwrap_or(0)
                    & (fds[i].events | libc::POLLHUP | libc::POLLERR)
                    == 0
                {
                    let t = left.map(ts);
                    w = r.futex_wait(word, seen, t.as_ref());
                }
                r.word(sleeper).fetch_sub(1, Ordering::AcqRel);
                if w == -(libc::EIO as i64) {
                    return err(libc::EIO);
                }
                // EINTR: the loop's first check unwinds for a deferred
                // program signal; atoll's own handlers do not end the wait.
                continue;
            }
        }
        let wait = if ready > 0 || expired {
            0
        } else if pipes == 0 {
            left.unwrap_or(-1)
        } else {
            left.map_or(slice, |l| l.min(slice))
        };
        let t = ts(wait.max(0));
        let tp = if wait < 0 { 0 } else { &t as *const _ as u64 };
        // SAFETY: `host` is our own pollfd array; `tp` is null or our
        // local timespec; `mask` is the program's sigset pointer/size
        // pair as it passed them.
        let r = unsafe {
            let (m, msz) = match mask {
                Some(p) => (p, 8),
                None => (0, 0),
            };
            intr::host_syscall6(
                libc::SYS_ppoll,
                [host.as_mut_ptr() as u64, host.len() as u64, tp, m, msz, 0],
            )
        };
        if r == -(libc::EINTR as i64) {
            continue; // see the futex case above
        }
        if r < 0 {
            return err((-r) as i32);
        }
        let total = r + ready;
        if total > 0 || expired || (wait >= 0 && pipes == 0) {
            for (i, p) in fds.iter_mut().enumerate() {
                p.revents = match atoll_rev[i] {
                    Some(rev) => rev,
                    None => host[i].revents,
                };
            }
            return Ok(total);
        }
        slice = (slice * 2).min(8_000_000);
    }
}

/// `poll`/`ppoll` when the process may hold pipe ends.
fn poll(c: &Client, nr: i64, a: &[u64; 6]) -> Result<Out> {
    let (fds, nfds) = (a[0], a[1]);
    if nfds > 1 << 20 {
        return err(libc::EINVAL);
    }
    let mut v: Vec<libc::pollfd> = sys::get_user_vec(fds, nfds as usize)?;
    if !v.iter().any(|p| pipe_fd(p.fd as i64).is_some()) {
        return Ok(Out::Host); // file::poll handles regular atoll files
    }
    let (timeout, mask) = if nr == libc::SYS_poll {
        let t = a[2] as i32;
        (if t < 0 { -1 } else { t as i64 * 1_000_000 }, None)
    } else {
        let t = if a[2] == 0 {
            -1
        } else {
            let t: libc::timespec = sys::get_user(a[2])?;
            t.tv_sec * NS + t.tv_nsec
        };
        (t, (a[3] != 0).then_some(a[3]))
    };
    let n = poll_loop(c, &mut v, timeout, mask)?;
    sys::put_user_slice(fds, &v)?;
    Ok(Out::Done(n))
}

/// `select`/`pselect6` when a set names a pipe end: translated to poll.
fn select(c: &Client, nr: i64, a: &[u64; 6]) -> Result<Out> {
    let n = a[0] as i32;
    if !(0..=1024).contains(&n) {
        return if n < 0 {
            err(libc::EINVAL)
        } else {
            Ok(Out::Host)
        };
    }
    let words = (n as usize).div_ceil(64);
    let load = |p: u64| -> Result<[u64; 16]> {
        let mut s = [0u64; 16];
        if p != 0 {
            for (k, w) in s.iter_mut().enumerate().take(words) {
                *w = sys::get_user(p + 8 * k as u64)?;
            }
        }
        Ok(s)
    };
    let (rs, ws, es) = (load(a[1])?, load(a[2])?, load(a[3])?);
    let has = |s: &[u64; 16], fd: usize| s[fd / 64] >> (fd % 64) & 1 != 0;
    let mut v: Vec<libc::pollfd> = Vec::new();
    let mut any_pipe = false;
    for fd in 0..n as usize {
        let mut ev = 0i16;
        if has(&rs, fd) {
            ev |= libc::POLLIN;
        }
        if has(&ws, fd) {
            ev |= libc::POLLOUT;
        }
        if has(&es, fd) {
            ev |= libc::POLLPRI;
        }
        if ev != 0 {
            any_pipe |= pipe_fd(fd as i64).is_some();
            v.push(libc::pollfd {
                fd: fd as i32,
                events: ev,
                revents: 0,
            });
        }
    }
    if !any_pipe {
        return Ok(Out::Host);
    }
    let (timeout, mask) = if nr == libc::SYS_select {
        let t = if a[4] == 0 {
            -1
        } else {
            let t: libc::timeval = sys::get_user(a[4])?;
            if t.tv_sec < 0 || t.tv_usec < 0 {
                return err(libc::EINVAL);
            }
            t.tv_sec * NS + t.tv_usec * 1000
        };
        (t, None)
    } else {
        let t = if a[4] == 0 {
            -1
        } else {
            let t: libc::timespec = sys::get_user(a[4])?;
            t.tv_sec * NS + t.tv_nsec
        };
        // pselect6's sixth argument: { const sigset_t *ss; size_t len; }.
        let mask = if a[5] != 0 {
            let m: [u64; 2] = sys::get_user(a[5])?;
            (m[0] != 0).then_some(m[0])
        } else {
            None
        };
        (t, mask)
    };
    poll_loop(c, &mut v, timeout, mask)?;
    let (mut ro, mut wo, mut eo) = ([0u64; 16], [0u64; 16], [0u64; 16]);
    let mut count = 0i64;
    for p in &v {
        if p.revents & libc::POLLNVAL != 0 {
            return err(libc::EBADF);
        }
        let fd = p.fd as usize;
        let set = |s: &mut [u64; 16]| s[fd / 64] |= 1 << (fd % 64);
        if p.events & libc::POLLIN != 0
            && p.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0
        {
            set(&mut ro);
            count += 1;
        }
        if p.events & libc::POLLOUT != 0 && p.revents & (libc::POLLOUT | libc::POLLERR) != 0 {
            set(&mut wo);
            count += 1;
        }
        if p.events & libc::POLLPRI != 0 && p.revents & libc::POLLPRI != 0 {
            set(&mut eo);
            count += 1;
        }
    }
    for (p, s) in [(a[1], &ro), (a[2], &wo), (a[3], &eo)] {
        if p != 0 {
            for (k, w) in s.iter().enumerate().take(words) {
                sys::put_user(p + 8 * k as u64, *w)?;
            }
        }
    }
    Ok(Out::Done(count))
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
                .and_then(fd_path)
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
        libc::SYS_poll | libc::SYS_ppoll => match poll(c, nr, a)? {
            Out::Host => Ok(None),
            o => Ok(Some(o)),
        },
        libc::SYS_select | libc::SYS_pselect6 => match select(c, nr, a)? {
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
