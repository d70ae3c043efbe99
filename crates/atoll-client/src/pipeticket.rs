//! Large pipe writes as *tickets* (Cosh §5: "the writer moves aggregates
//! to the reader; the ring carries tickets"): one copy instead of two.
//!
//! A blocking write of at least [`TICKET_MIN`] bytes fills the ring as
//! any write does, and once the ring is full, instead of sleeping until it
//! drains, under the ring lock the writer posts a ticket in the header
//! (`hdr::TICKET_*`: its process id, the address and length of its bytes)
//! and sleeps; a reader that finds the ring empty copies straight from the
//! writer's memory into its own buffer with `process_vm_readv` (the kernel
//! copies once, page by page, from the writer's pinned pages) and counts
//! what it took in `TICKET_DONE`. The writer wakes when all is taken and
//! retires the ticket. The ticket's bytes come after the ring's, and while
//! one is posted no other writer writes (the pipe is full to them), so
//! the byte order is a pipe's.
//!
//! Rights (Cosh's reader that "rejects weak transfers"): the reader reads
//! another process's memory only as the kernel permits it (same user, or
//! `CAP_SYS_PTRACE`; Yama may forbid it), and only in the writer's pid
//! namespace (`TICKET_PIDNS`: elsewhere its id would name another
//! process). A refused read marks the pipe
//! (`NO_TICKETS`) and the ticket `REFUSED`; the writer takes it back and
//! writes the rest through the ring, as every later writer of the pipe.
//!
//! Revocation: the writer takes its ticket back when a signal cuts its
//! sleep (the call returns the bytes taken, or restarts), when the last
//! reader goes (`EPIPE`) and when the reader could not read its bytes (a
//! bad address: `EFAULT`). A writer killed mid-transfer leaves a ticket
//! whose process is gone: the reader's `process_vm_readv` fails with
//! `ESRCH`, the reader retires the ticket and sees what the ring says
//! (end of file once no writer is left). So does a writer whose thread
//! another thread's `execve` ended: its process id names the new program,
//! whose image tag differs (`imagetag`), so no byte of the new program is
//! ever read as the pipe's. A reader never returns bytes it
//! did not copy, and the ticket changes only under the ring lock, so what
//! was delivered is exactly `TICKET_DONE`. (The process id could be
//! reused between the writer's death and the reader's look only after the
//! kernel's pid space wrapped around in between.)
//!
//! Not in a copy island (no shared header to post in): there the bytes
//! cross the server (`pipecopy`).

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use atoll_proto::pipe as hdr;

use crate::error::{err, Error, Result};
use crate::ring::Ring;
use crate::sys;

/// Writes from this size on go as tickets; smaller ones are cheaper to copy
/// into the ring than to wait for (one wake-up each way).
pub const TICKET_MIN: usize = 64 * 1024;

/// How a ticket ended, with the bytes a reader took from it.
pub enum Outcome {
    /// All taken.
    Taken(usize),
    /// A reader may not read this process's memory: write the rest through
    /// the ring.
    Refused(usize),
    /// A reader could not read the bytes (a bad address).
    Failed(usize),
    /// No reader left.
    NoReaders(usize),
    /// A signal (or the instance's end) cut the wait: the error to return
    /// if nothing was taken.
    Cut(usize, Error),
}

/// Should a write of `rest` bytes (caller holds the lock) be a ticket?
pub fn wanted(ring: &Ring, rest: usize, nonblocking: bool) -> bool {
    rest >= TICKET_MIN && !nonblocking && ring.word(hdr::NO_TICKETS).load(Ordering::Relaxed) == 0
}

/// Is a ticket posted (other writers wait; readers take from it)?
pub fn posted(ring: &Ring) -> bool {
    ring.word(hdr::TICKET_STATE).load(Ordering::Acquire) != hdr::TICKET_NONE
}

/// A posted ticket whose writer no longer exists (killed while its
/// ticket was refused or failed, so no reader retired it): retire it
/// (caller holds the lock). True if it was. Not while a split of it runs:
/// its reader ends that first (`pipesplit`).
pub fn retire_orphan(ring: &Ring) -> bool {
    if crate::pipesplit::busy(ring) {
        return false;
    }
    let pid = ring.word(hdr::TICKET_PID).load(Ordering::Relaxed);
    // The tag says whether the image that posted is gone (its process
    // may live on in a new program); where we may not read its memory,
    // whether the process exists at all.
    let gone = pid != 0
        && crate::imagetag::image_gone(pid, writer_tag(ring)).unwrap_or_else(|| {
            // SAFETY: signal 0 only checks that the process exists.
            let r = unsafe { sys::sc(libc::SYS_kill, pid as u64, 0, 0, 0) };
            r == -(libc::ESRCH as i64)
        });
    if gone {
        retire(ring);
    }
    gone
}

/// The image tag the ticket's writer posted with it (`imagetag`).
pub(crate) fn writer_tag(ring: &Ring) -> crate::imagetag::Tag {
    crate::imagetag::Tag {
        at: ring.word64(hdr::TICKET_TAG_AT).load(Ordering::Relaxed),
        value: ring.word64(hdr::TICKET_TAG).load(Ordering::Relaxed),
    }
}

/// Bytes an active ticket still offers (0 without one).
pub fn offered(ring: &Ring) -> u64 {
    if ring.word(hdr::TICKET_STATE).load(Ordering::Acquire) != hdr::TICKET_ACTIVE {
        return 0;
    }
    let len = ring.word64(hdr::TICKET_LEN).load(Ordering::Acquire);
    len.saturating_sub(ring.word64(hdr::TICKET_DONE).load(Ordering::Acquire))
}

/// Bump a wait word (caller holds the lock); true if someone sleeps on it.
fn bump(ring: &Ring, seq: usize, sleep: usize) -> bool {
    ring.word(seq).fetch_add(1, Ordering::SeqCst);
    ring.word(sleep).load(Ordering::SeqCst) > 0
}

/// Clear the ticket (caller holds the lock); true if writers sleep (they
/// may post or write now).
fn retire(ring: &Ring) -> bool {
    ring.word64(hdr::TICKET_LEN).store(0, Ordering::Relaxed);
    ring.word64(hdr::TICKET_DONE).store(0, Ordering::Relaxed);
    ring.word(hdr::TICKET_PID).store(0, Ordering::Relaxed);
    ring.word(hdr::TICKET_STATE)
        .store(hdr::TICKET_NONE, Ordering::Release);
    bump(ring, hdr::WSEQ, hdr::WSLEEP)
}

/// Post `buf` as a ticket (the caller holds the lock, with signals blocked
/// by `sig`, and checked [`wanted`] and that none is posted), then wait
/// until it is taken or revoked. `split`: the caller found the ring empty
/// and one reader waiting with its buffer posted
/// (`pipesplit::reader_waiting`): both ends copy at once. While a split
/// of the ticket runs, this writer copies its part and then waits for the
/// reader to end it (`pipesplit::writer_turn`) before anything else.
pub fn post_and_wait(ring: &Ring, sig: sys::SigBlock, buf: &[u8], split: bool) -> Outcome {
    // SAFETY: getpid takes no arguments.
    let pid = unsafe { sys::sc(libc::SYS_getpid, 0, 0, 0, 0) } as u32;
    ring.word(hdr::TICKET_PID).store(pid, Ordering::Relaxed);
    ring.word64(hdr::TICKET_PIDNS)
        .store(pid_namespace(pid), Ordering::Relaxed);
    let tag = crate::imagetag::this_image();
    ring.word64(hdr::TICKET_TAG_AT)
        .store(tag.at, Ordering::Relaxed);
    ring.word64(hdr::TICKET_TAG)
        .store(tag.value, Ordering::Relaxed);
    ring.word64(hdr::TICKET_ADDR)
        .store(buf.as_ptr() as u64, Ordering::Relaxed);
    ring.word64(hdr::TICKET_LEN)
        .store(buf.len() as u64, Ordering::Relaxed);
    ring.word64(hdr::TICKET_DONE).store(0, Ordering::Relaxed);
    ring.word(hdr::TICKET_STATE)
        .store(hdr::TICKET_ACTIVE, Ordering::Release);
    if split {
        crate::pipesplit::start_with_posted(ring);
    }
    let wake = bump(ring, hdr::RSEQ, hdr::RSLEEP);
    ring.unlock();
    drop(sig);
    if wake {
        ring.wake(hdr::RSEQ, i32::MAX as u32);
    }
    loop {
        let sig = sys::SigBlock::new();
        ring.lock();
        if crate::pipesplit::busy(ring) {
            crate::pipesplit::writer_turn(ring, sig, buf);
            continue;
        }
        let state = ring.word(hdr::TICKET_STATE).load(Ordering::Acquire);
        let taken = ring.word64(hdr::TICKET_DONE).load(Ordering::Acquire) as usize;
        let readers = ring.word(hdr::READERS).load(Ordering::Acquire);
        let outcome = match state {
            hdr::TICKET_ACTIVE if taken == buf.len() => Some(Outcome::Taken(taken)),
            hdr::TICKET_ACTIVE if readers == 0 => Some(Outcome::NoReaders(taken)),
            hdr::TICKET_ACTIVE => None,
            hdr::TICKET_REFUSED => Some(Outcome::Refused(taken)),
            _ => Some(Outcome::Failed(taken)),
        };
        if let Some(outcome) = outcome {
            let wake = retire(ring);
            ring.unlock();
            drop(sig);
            if wake {
                ring.wake(hdr::WSEQ, i32::MAX as u32);
            }
            return outcome;
        }
        let seen = ring.word(hdr::WSEQ).load(Ordering::Acquire);
        ring.word(hdr::WSLEEP).fetch_add(1, Ordering::AcqRel);
        ring.unlock();
        drop(sig);
        if let Err(e) = crate::pipe::sleep(ring, hdr::WSEQ, hdr::WSLEEP, seen) {
            // Take the ticket back: what a reader took until now is what
            // was written. Not while a reader copies from it: the loop
            // waits for that split to end (the signal stays pending).
            let sig = sys::SigBlock::new();
            ring.lock();
            if crate::pipesplit::busy(ring) {
                ring.unlock();
                continue;
            }
            let taken = ring.word64(hdr::TICKET_DONE).load(Ordering::Acquire) as usize;
            let wake = retire(ring);
            ring.unlock();
            drop(sig);
            if wake {
                ring.wake(hdr::WSEQ, i32::MAX as u32);
            }
            return Outcome::Cut(taken, e);
        }
    }
}

/// What a reader's look at the ticket gave.
pub enum Take {
    /// `n` bytes copied into the buffer.
    Copied(usize),
    /// The ticket was refused, failed or retired: look at the ring again
    /// (the writer, if alive, was woken).
    Again,
}

/// Copy from the active ticket into `buf` (caller holds the lock, the ring
/// is empty and `offered` > 0). The caller unlocks and wakes writers if
/// this returns `Copied` (the wait word was bumped).
pub fn take(ring: &Ring, buf: &mut [u8]) -> Result<Take> {
    let pid = ring.word(hdr::TICKET_PID).load(Ordering::Relaxed);
    let addr = ring.word64(hdr::TICKET_ADDR).load(Ordering::Relaxed);
    let done = ring.word64(hdr::TICKET_DONE).load(Ordering::Relaxed);
    let n = (offered(ring) as usize).min(buf.len());
    // SAFETY: getpid takes no arguments.
    let me = unsafe { sys::sc(libc::SYS_getpid, 0, 0, 0, 0) } as u32;
    let r = if ring.word64(hdr::TICKET_PIDNS).load(Ordering::Relaxed) == pid_namespace(me) {
        crate::imagetag::read_tagged(pid, writer_tag(ring), addr + done, &mut buf[..n])
    } else {
        -(libc::EPERM as i64)
    };
    if r > 0 {
        let r = r as u64;
        ring.word64(hdr::TICKET_DONE)
            .store(done + r, Ordering::Release);
        // The bytes count as written and read (statistics and `FIONREAD`
        // stay right; the ring is empty, so its positions may move).
        let head = ring.word64(hdr::HEAD).load(Ordering::Relaxed);
        ring.word64(hdr::HEAD).store(head + r, Ordering::Relaxed);
        ring.word64(hdr::TAIL).store(head + r, Ordering::Release);
        ring.word64(hdr::OPS).fetch_add(1, Ordering::Relaxed);
        return Ok(Take::Copied(r as usize));
    }
    let state = match -r as i32 {
        libc::EPERM | libc::EACCES | libc::ENOSYS => {
            ring.word(hdr::NO_TICKETS).store(1, Ordering::Relaxed);
            hdr::TICKET_REFUSED
        }
        // The writer died with its ticket posted (or its process runs
        // another program now): nobody will retire it.
        libc::ESRCH => {
            retire(ring);
            return Ok(Take::Again);
        }
        // Our buffer or theirs? Ours is Linux's EFAULT for this read.
        libc::EFAULT if !own_memory_ok(&mut buf[..n]) => return err(libc::EFAULT),
        _ => hdr::TICKET_FAILED,
    };
    ring.word(hdr::TICKET_STATE).store(state, Ordering::Release);
    bump(ring, hdr::WSEQ, hdr::WSLEEP);
    Ok(Take::Again)
}

/// The inode of this process's pid namespace (`/proc/self/ns/pid`; 0 if
/// it cannot be read), looked up once per process id: a process id names
/// a process only within its namespace. `pid` is this process's id.
pub(crate) fn pid_namespace(pid: u32) -> u64 {
    static FOR_PID: AtomicU32 = AtomicU32::new(0);
    static NS: AtomicU64 = AtomicU64::new(0);
    if FOR_PID.load(Ordering::Acquire) == pid {
        return NS.load(Ordering::Relaxed);
    }
    let mut st: libc::stat = sys::zeroed();
    let path = b"/proc/self/ns/pid\0";
    // SAFETY: a NUL-terminated path and our local stat buffer.
    let r = unsafe {
        sys::sc(
            libc::SYS_newfstatat,
            libc::AT_FDCWD as u64,
            path.as_ptr() as u64,
            &mut st as *mut libc::stat as u64,
            0,
        )
    };
    let ns = if r == 0 { st.st_ino } else { 0 };
    NS.store(ns, Ordering::Relaxed);
    FOR_PID.store(pid, Ordering::Release);
    ns
}

/// `process_vm_readv` of `dst.len()` bytes at `addr` in process `pid`:
/// bytes copied, or −errno.
pub(crate) fn read_memory(pid: u32, addr: u64, dst: &mut [u8]) -> i64 {
    // SAFETY: the kernel writes at most `dst.len()` bytes into `dst` (our
    // buffer) and only reads the other process's memory.
    unsafe {
        vm_copy(
            libc::SYS_process_vm_readv,
            pid,
            dst.as_mut_ptr(),
            dst.len(),
            addr,
        )
    }
}

/// One `process_vm_readv` or `process_vm_writev` (`nr`) between `len`
/// bytes of ours at `local` and `addr` in process `pid`: bytes copied, or
/// −errno. The kernel checks the caller's right to the other process.
///
/// # Safety
/// `local` is valid for `len` bytes in the direction `nr` uses it.
pub(crate) unsafe fn vm_copy(nr: i64, pid: u32, local: *mut u8, len: usize, addr: u64) -> i64 {
    let local = libc::iovec {
        iov_base: local.cast(),
        iov_len: len,
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: len,
    };
    // SAFETY: both iovecs are locals that outlive the call; the caller
    // vouches for `local`.
    unsafe {
        sys::syscall6(
            nr,
            [
                pid as u64,
                &local as *const libc::iovec as u64,
                1,
                &remote as *const libc::iovec as u64,
                1,
                0,
            ],
        )
    }
}

/// Can this process write `buf` (its read buffer)? The kernel reads the
/// bytes onto themselves, failing with `EFAULT` if it cannot.
pub(crate) fn own_memory_ok(buf: &mut [u8]) -> bool {
    // SAFETY: getpid takes no arguments.
    let me = unsafe { sys::sc(libc::SYS_getpid, 0, 0, 0, 0) } as u32;
    let at = buf.as_ptr() as u64;
    read_memory(me, at, buf) >= 0
}
