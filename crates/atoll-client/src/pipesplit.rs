//! Both ends of a pipe copy a large write at once (Cosh §5 *move*, the
//! one copy of a ticket split between the writer's CPU and the reader's).
//!
//! A ticket (`pipeticket`) is one copy, made by the reader with
//! `process_vm_readv` while the writer sleeps. A *split* lets the writer
//! do part of it: the reader's buffer is known (`hdr::RBUF_*`), so the
//! writer copies the back of the bytes into it with `process_vm_writev`
//! while the reader pulls the front; the two claim `SPLIT_CHUNK`-byte
//! chunks from a shared cursor (`SPLIT_CURSOR`: the reader from the front,
//! the writer from the back), so whoever runs faster takes more, and a
//! writer that is slow to wake leaves everything to the reader.
//!
//! Life cycle of the reader's buffer (state `RBUF_STATE`, changed only
//! under the ring lock):
//!
//! * `NONE → POSTED`: a blocking reader about to sleep on an empty pipe,
//!   the only reader waiting, posts its buffer ([`post`]).
//! * `POSTED → NONE`: it wakes and takes it back ([`claimed_after_sleep`]).
//! * `POSTED → SPLIT`: a writer of a large write finds the ring empty and
//!   the reader alone and posted: it posts its ticket and starts a split
//!   ([`start_with_posted`]), wakes the reader, and both copy.
//! * `NONE → SPLIT`: a reader finds a ticket on an empty ring and starts a
//!   split with its own buffer ([`start_with_ticket`]), waking the writer.
//! * `SPLIT → NONE`: the reader, once its chunks and the writer's are done,
//!   counts what it has as taken from the ticket ([`copy_as_reader`]); or
//!   the writer, when the reader no longer exists ([`writer_turn`]).
//!
//! While a split runs only its reader takes from the ticket (other readers
//! find the pipe empty and wait), no writer retires the ticket, and its
//! writer neither returns nor gives the ticket back (not even for a signal:
//! the reader is copying from its memory, so it waits until the reader
//! ends the split). The reader returns only bytes it knows are in its
//! buffer: all of them when both ends finished their chunks, else the
//! chunks it copied itself from the front. A writer killed mid-split makes
//! the reader's copies fail (`ESRCH`): it keeps its front chunks and the
//! ticket path retires the ticket. A reader killed mid-split makes the
//! writer's copies fail; the writer, finding its process gone, ends the
//! split with nothing taken, so the other readers get every byte.
//!
//! Rights: as a ticket's, both ways: each side checks the other's pid
//! namespace before it starts or joins, and a copy the kernel refuses is
//! left to the other side (writer) or to the ticket path (reader).
//!
//! Identity: each end is named by an id *and* its image tag
//! (`imagetag`). The reader's copies read the writer's tag in the same
//! call as the bytes, and "is the other end gone" asks the tag, so a
//! process that another thread's `execve` turned into a new program counts
//! as gone. The writer's copies into the reader cannot be checked that
//! way, so a process about to `execve` withdraws every buffer its threads
//! posted and waits for the writer's chunks in flight
//! ([`quiesce_for_exec`]): no byte of a pipe is ever written into the new
//! program.

use core::sync::atomic::{AtomicBool, Ordering};

use atoll_proto::pipe as hdr;

mod execguard;
use crate::ring::exec_pending;
pub use execguard::{forget_after_fork, quiesce_for_exec, Reading};

use crate::imagetag::{self, Tag};
use crate::pipeticket::{offered, pid_namespace, writer_tag};
use crate::ring::Ring;
use crate::sys;

/// Environment variable that switches splits off (`off`) in a process.
/// On by default: on two free CPUs a split moves 1 MiB writes at about
/// 1.8× the speed of tickets alone (docs/BENCHMARKS.md, "Pipes with 1 MiB
/// writes"); where the CPUs are busy it costs 6–12 %.
pub const ENV_SPLIT: &str = "ATOLL_PIPE_SPLIT";

static ENABLED: AtomicBool = AtomicBool::new(true);

/// Read [`ENV_SPLIT`]. Called by `pipe::init`. A process with splits off
/// never posts its buffer nor starts a split, and joins none (a split
/// needs the reader to start it), so ends with either setting mix.
pub fn init() {
    let off = matches!(std::env::var(ENV_SPLIT).as_deref(), Ok("off"));
    ENABLED.store(!off, Ordering::Relaxed);
}

fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

const CHUNK: usize = hdr::SPLIT_CHUNK;
/// Smallest split: below two chunks the other end has nothing to share.
pub const SPLIT_MIN: usize = 2 * CHUNK;
/// Largest split (`RBUF_LEN` is a `u32`); a reader with a larger buffer
/// gets this much, as any pipe read may return less.
const SPLIT_MAX: usize = 1 << 30;
/// `SPLIT_WDONE` bits: the writer's finished chunks, it gave up, the
/// reader sleeps on the word.
const COUNT: u32 = (1 << 30) - 1;
const GAVE_UP: u32 = 1 << 30;
const SLEEPING: u32 = 1 << 31;
/// Looks at the other end's progress before a futex sleep. Only spent
/// when the other end is known to be copying its last chunk (128 KiB, some
/// microseconds): a sleep would cost it a wake-up call and this end the
/// scheduler's delay. (Spinning for a writer that may not come lost:
/// docs/BENCHMARKS.md.)
const SPINS: u32 = 500;
/// How long an end waits for the other before it looks whether that
/// end's process still exists.
const PATIENCE_NS: i64 = 10_000_000;

fn my_pid() -> u32 {
    // SAFETY: getpid takes no arguments.
    unsafe { sys::sc(libc::SYS_getpid, 0, 0, 0, 0) as u32 }
}

/// Is the tagged image of process or thread `pid` gone (the process
/// exited or was killed, a zombie included, the thread ended, or the
/// process runs another program)? A read of its tag answers that;
/// `kill(pid, 0)` would still find a zombie that its parent has not
/// reaped, and a process that changed programs.
fn gone(pid: u32, tag: Tag) -> bool {
    imagetag::image_gone(pid, tag) == Some(true)
}

/// The image tag the posted reader published with its buffer.
fn reader_tag(ring: &Ring) -> Tag {
    Tag {
        at: ring.word64(hdr::RBUF_TAG_AT).load(Ordering::Relaxed),
        value: ring.word64(hdr::RBUF_TAG).load(Ordering::Relaxed),
    }
}

fn patience() -> libc::timespec {
    crate::pipepoll::ts(PATIENCE_NS)
}

/// Is a split running (only its reader takes from the ticket)?
pub fn busy(ring: &Ring) -> bool {
    ring.word(hdr::RBUF_STATE).load(Ordering::Acquire) == hdr::RBUF_SPLIT
}

/// A blocking reader (caller holds the lock) is about to sleep on an empty
/// pipe whose ticket, if any, offers nothing more: post `buf` if it is large and this reader would be
/// the only one waiting. True if posted; after its sleep the reader must
/// call [`claimed_after_sleep`] under the lock.
pub fn post(ring: &Ring, buf: &mut [u8]) -> bool {
    if !enabled()
        || buf.len() < SPLIT_MIN
        || exec_pending()
        || ring.word(hdr::RBUF_STATE).load(Ordering::Relaxed) != hdr::RBUF_NONE
        || ring.word(hdr::RSLEEP).load(Ordering::SeqCst) != 0
        || ring.word(hdr::NO_TICKETS).load(Ordering::Relaxed) != 0
    {
        return false;
    }
    publish_buffer(ring, buf);
    ring.word(hdr::RBUF_STATE)
        .store(hdr::RBUF_POSTED, Ordering::Release);
    true
}

/// Publish the reader's buffer. The thread id, not the process id, names
/// the reader: `process_vm_writev` takes either, and a thread that is gone
/// (killed, or ended by another thread's `execve`) fails the writer's
/// copies with `ESRCH`. (The leader's id passes to the thread that calls
/// `execve`; [`quiesce_for_exec`] keeps the writer out of that one.)
fn publish_buffer(ring: &Ring, buf: &mut [u8]) {
    // SAFETY: gettid takes no arguments.
    let tid = unsafe { sys::sc(libc::SYS_gettid, 0, 0, 0, 0) } as u32;
    let tag = imagetag::this_image();
    ring.word(hdr::RBUF_PID).store(tid, Ordering::Relaxed);
    ring.word64(hdr::RBUF_TAG_AT)
        .store(tag.at, Ordering::Relaxed);
    ring.word64(hdr::RBUF_TAG)
        .store(tag.value, Ordering::Relaxed);
    ring.word64(hdr::RBUF_PIDNS)
        .store(pid_namespace(my_pid()), Ordering::Relaxed);
    ring.word64(hdr::RBUF_ADDR)
        .store(buf.as_mut_ptr() as u64, Ordering::Relaxed);
    ring.word(hdr::RBUF_LEN)
        .store(buf.len().min(SPLIT_MAX) as u32, Ordering::Relaxed);
}

/// The reader that posted its buffer woke (caller holds the lock): true if
/// a writer started a split with it (the reader must now run
/// [`copy_as_reader`]); otherwise the buffer is taken back.
pub fn claimed_after_sleep(ring: &Ring) -> bool {
    let state = ring.word(hdr::RBUF_STATE);
    match state.load(Ordering::Acquire) {
        hdr::RBUF_SPLIT => true,
        hdr::RBUF_POSTED => {
            state.store(hdr::RBUF_NONE, Ordering::Release);
            false
        }
        _ => false,
    }
}

/// A writer about to post a ticket on an empty ring (caller holds the
/// lock): is one reader waiting, alone, with a buffer this process may
/// write (same pid namespace)?
pub fn reader_waiting(ring: &Ring) -> bool {
    ring.word(hdr::RBUF_STATE).load(Ordering::Acquire) == hdr::RBUF_POSTED
        && ring.word(hdr::RSLEEP).load(Ordering::SeqCst) == 1
        && ring.word64(hdr::RBUF_PIDNS).load(Ordering::Relaxed) == pid_namespace(my_pid())
}

/// `SPLIT_CURSOR` fields: generation, next chunk from the front, one past
/// the last unclaimed chunk.
const FIELD: u64 = (1 << 24) - 1;

fn pack(gen: u64, lo: u64, hi: u64) -> u64 {
    (gen & 0xffff) << 48 | (hi & FIELD) << 24 | (lo & FIELD)
}

fn unpack(cursor: u64) -> (u64, u64, u64) {
    (cursor >> 48, cursor & FIELD, (cursor >> 24) & FIELD)
}

/// Open a split of the active ticket's next `n` bytes into the published
/// buffer (caller holds the lock), with a new generation.
fn start(ring: &Ring, n: usize) {
    let chunks = n.div_ceil(CHUNK) as u64;
    let cursor = ring.word64(hdr::SPLIT_CURSOR);
    let gen = unpack(cursor.load(Ordering::Acquire)).0 + 1;
    ring.word(hdr::RBUF_LEN).store(n as u32, Ordering::Relaxed);
    ring.word(hdr::SPLIT_WDONE).store(0, Ordering::Relaxed);
    cursor.store(pack(gen, 0, chunks), Ordering::Release);
    ring.word(hdr::RBUF_STATE)
        .store(hdr::RBUF_SPLIT, Ordering::Release);
}

/// The writer just posted its ticket after [`reader_waiting`] (caller
/// holds the lock): split it with the posted buffer. The caller wakes the
/// reader (`RSEQ`).
pub fn start_with_posted(ring: &Ring) {
    let room = ring.word(hdr::RBUF_LEN).load(Ordering::Relaxed) as usize;
    start(ring, room.min(offered(ring) as usize));
}

/// A reader found a ticket on an empty ring, with no split running
/// (caller holds the lock): split it with `buf` if that is worth it. True
/// if started: the caller wakes the writer (`WSEQ`), unlocks and runs
/// [`copy_as_reader`].
pub fn start_with_ticket(ring: &Ring, buf: &mut [u8]) -> bool {
    let n = (offered(ring) as usize).min(buf.len()).min(SPLIT_MAX);
    if !enabled()
        || n < SPLIT_MIN
        || exec_pending()
        || ring.word(hdr::RBUF_STATE).load(Ordering::Acquire) != hdr::RBUF_NONE
        || ring.word64(hdr::TICKET_PIDNS).load(Ordering::Relaxed) != pid_namespace(my_pid())
    {
        return false;
    }
    publish_buffer(ring, buf);
    start(ring, n);
    true
}

/// Claim the next chunk of split `gen`: from the front (the reader) or
/// the back (the writer). `None` once the two meet or that split ended.
fn claim(ring: &Ring, gen: u64, front: bool) -> Option<u32> {
    let cursor = ring.word64(hdr::SPLIT_CURSOR);
    let mut cur = cursor.load(Ordering::Acquire);
    loop {
        let (g, lo, hi) = unpack(cur);
        if g != gen & 0xffff || lo >= hi {
            return None;
        }
        let (next, k) = if front {
            (pack(g, lo + 1, hi), lo)
        } else {
            (pack(g, lo, hi - 1), hi - 1)
        };
        match cursor.compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return Some(k as u32),
            Err(now) => cur = now,
        }
    }
}

/// Let nobody claim more of the running split (its reader, after a failed
/// copy).
fn close_cursor(ring: &Ring) {
    let cursor = ring.word64(hdr::SPLIT_CURSOR);
    let mut cur = cursor.load(Ordering::Acquire);
    loop {
        let (g, _, hi) = unpack(cur);
        match cursor.compare_exchange_weak(
            cur,
            pack(g, hi, hi),
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => return,
            Err(now) => cur = now,
        }
    }
}

/// The running split's generation and meeting point (the first of the
/// writer's chunks, once the ends met).
fn cursor_now(ring: &Ring) -> (u64, u32) {
    let (gen, _, hi) = unpack(ring.word64(hdr::SPLIT_CURSOR).load(Ordering::Acquire));
    (gen, hi as u32)
}

/// Byte range of chunk `k` in a split of `n` bytes.
fn chunk(k: u32, n: usize) -> (usize, usize) {
    let at = k as usize * CHUNK;
    (at.min(n), (at + CHUNK).min(n))
}

/// How the writer's part of a split ended, as the reader sees it.
enum WriterEnd {
    /// All chunks it claimed are in the reader's buffer.
    Done,
    /// Its copy of its last claimed chunk (the one at the meeting point)
    /// failed; the chunks after it are done.
    GaveUp,
    /// Its process is gone.
    Gone,
}

/// The reader waits until the writer finished the `claimed` chunks it
/// took (at most one is still being copied), gave up, or is gone.
fn wait_for_writer(ring: &Ring, writer: u32, tag: Tag, claimed: u32) -> WriterEnd {
    let word = ring.word(hdr::SPLIT_WDONE);
    let mut spins = 0;
    loop {
        let v = word.load(Ordering::Acquire);
        if v & COUNT >= claimed {
            return WriterEnd::Done;
        }
        if v & GAVE_UP != 0 {
            return WriterEnd::GaveUp;
        }
        if spins < SPINS {
            spins += 1;
            core::hint::spin_loop();
            continue;
        }
        let seen = word.fetch_or(SLEEPING, Ordering::AcqRel) | SLEEPING;
        if seen & COUNT >= claimed || seen & GAVE_UP != 0 {
            continue;
        }
        let r = ring.futex_wait_raw(hdr::SPLIT_WDONE, seen, Some(&patience()));
        if r == -(libc::ETIMEDOUT as i64) && gone(writer, tag) {
            return WriterEnd::Gone;
        }
    }
}

/// The reader's part of a split (no lock held; `buf` is the buffer it
/// published): copy chunks from the front until the two ends meet, wait
/// for the writer's, then end the split under the lock, counting what is
/// in `buf` as taken from the ticket. Returns those bytes (a prefix of
/// `buf`; 0 if none) and the −errno of the reader's own failed copy (0 if
/// none), for the caller to sort out through the ticket path.
pub fn copy_as_reader(ring: &Ring, buf: &mut [u8]) -> (usize, i64) {
    // Stable while the split runs: only its reader ends it.
    let n = (ring.word(hdr::RBUF_LEN).load(Ordering::Acquire) as usize).min(buf.len());
    let writer = ring.word(hdr::TICKET_PID).load(Ordering::Relaxed);
    let tag = writer_tag(ring);
    let src = ring.word64(hdr::TICKET_ADDR).load(Ordering::Relaxed)
        + ring.word64(hdr::TICKET_DONE).load(Ordering::Acquire);
    let pull = |k: u32, buf: &mut [u8]| -> i64 {
        let (a, b) = chunk(k, n);
        match imagetag::read_tagged(writer, tag, src + a as u64, &mut buf[a..b]) {
            r if r == (b - a) as i64 => 0,
            r if r < 0 => r,
            _ => -(libc::EFAULT as i64),
        }
    };
    let gen = cursor_now(ring).0;
    let mut front = 0u32;
    let mut failure = 0i64;
    while let Some(k) = claim(ring, gen, true) {
        failure = pull(k, buf);
        if failure != 0 {
            close_cursor(ring);
            break;
        }
        front = k + 1;
    }
    let chunks = n.div_ceil(CHUNK) as u32;
    let meet = cursor_now(ring).1;
    // Even after a failed copy the writer may still be writing into `buf`:
    // wait for it before returning.
    let writer_end = wait_for_writer(ring, writer, tag, chunks - meet.min(chunks));
    let mut bytes = chunk(front, n).0;
    if failure == 0 {
        match writer_end {
            WriterEnd::Done => bytes = n,
            WriterEnd::GaveUp => {
                failure = pull(meet, buf);
                if failure == 0 {
                    bytes = n;
                }
            }
            WriterEnd::Gone => {}
        }
    }
    end_split(ring, bytes);
    (bytes, failure)
}

/// End the split (lock not held), `bytes` of the ticket taken, and wake
/// the writer and, if the ticket has more, the other readers.
fn end_split(ring: &Ring, bytes: usize) {
    let sig = sys::SigBlock::new();
    ring.lock();
    if bytes > 0 {
        let b = bytes as u64;
        let done = ring.word64(hdr::TICKET_DONE).load(Ordering::Relaxed);
        ring.word64(hdr::TICKET_DONE)
            .store(done + b, Ordering::Release);
        // As a ticket take: the bytes count as written and read.
        let head = ring.word64(hdr::HEAD).load(Ordering::Relaxed);
        ring.word64(hdr::HEAD).store(head + b, Ordering::Relaxed);
        ring.word64(hdr::TAIL).store(head + b, Ordering::Release);
        ring.word64(hdr::OPS).fetch_add(1, Ordering::Relaxed);
    }
    ring.word(hdr::RBUF_STATE)
        .store(hdr::RBUF_NONE, Ordering::Release);
    let wake_writer = bump(ring, hdr::WSEQ, hdr::WSLEEP);
    let wake_readers = offered(ring) > 0 && bump(ring, hdr::RSEQ, hdr::RSLEEP);
    ring.unlock();
    drop(sig);
    if wake_writer {
        ring.wake(hdr::WSEQ, i32::MAX as u32);
    }
    if wake_readers {
        ring.wake(hdr::RSEQ, i32::MAX as u32);
    }
}

fn bump(ring: &Ring, seq: usize, sleep: usize) -> bool {
    ring.word(seq).fetch_add(1, Ordering::SeqCst);
    ring.word(sleep).load(Ordering::SeqCst) > 0
}

/// The writer's chunks of a split: the ticket bytes `src` go to the
/// reader's buffer at `dst` in process `reader`.
struct WriterJob<'a> {
    gen: u64,
    src: &'a [u8],
    reader: u32,
    dst: u64,
}

/// The writer whose ticket is `ticket` (the bytes it posted) may join the
/// running split (caller holds the lock): chunks left to claim, it has not
/// given up, and it may write the reader's memory (same pid namespace).
fn join<'a>(ring: &Ring, ticket: &'a [u8]) -> Option<WriterJob<'a>> {
    let (gen, lo, hi) = unpack(ring.word64(hdr::SPLIT_CURSOR).load(Ordering::Acquire));
    if lo >= hi
        || ring.word(hdr::SPLIT_WDONE).load(Ordering::Acquire) & GAVE_UP != 0
        || ring.word64(hdr::RBUF_PIDNS).load(Ordering::Relaxed) != pid_namespace(my_pid())
    {
        return None;
    }
    let from = ring.word64(hdr::TICKET_DONE).load(Ordering::Acquire) as usize;
    let n = ring.word(hdr::RBUF_LEN).load(Ordering::Relaxed) as usize;
    let src = ticket.get(from..from.checked_add(n)?)?;
    Some(WriterJob {
        gen,
        src,
        reader: ring.word(hdr::RBUF_PID).load(Ordering::Relaxed),
        dst: ring.word64(hdr::RBUF_ADDR).load(Ordering::Relaxed),
    })
}

/// The writer's part (no lock held): copy chunks from the back until the
/// two ends meet; on a failed copy give up (the reader copies that chunk).
fn copy_as_writer(ring: &Ring, job: WriterJob<'_>) {
    let word = ring.word(hdr::SPLIT_WDONE);
    let n = job.src.len();
    while let Some(k) = claim(ring, job.gen, false) {
        let (a, b) = chunk(k, n);
        let ok = write_memory(job.reader, job.dst + a as u64, &job.src[a..b]) == (b - a) as i64;
        let before = if ok {
            crate::counters::PIPE_SPLIT_BYTES.fetch_add((b - a) as u64, Ordering::Relaxed);
            word.fetch_add(1, Ordering::AcqRel)
        } else {
            word.fetch_or(GAVE_UP, Ordering::AcqRel)
        };
        if before & SLEEPING != 0 {
            ring.wake(hdr::SPLIT_WDONE, 1);
        }
        if !ok {
            return;
        }
    }
}

/// The writer of the active ticket `ticket`, while a split of it runs
/// (caller holds the lock, with signals blocked by `sig`): copy its part,
/// or wait for the reader to end the split, or end it for a reader that
/// no longer exists. Returns with the lock released. The wait is not cut
/// by signals: the reader may be copying from `ticket`.
pub fn writer_turn(ring: &Ring, sig: sys::SigBlock, ticket: &[u8]) {
    if let Some(job) = join(ring, ticket) {
        ring.unlock();
        drop(sig);
        return copy_as_writer(ring, job);
    }
    let reader = ring.word(hdr::RBUF_PID).load(Ordering::Relaxed);
    let tag = reader_tag(ring);
    let seen = ring.word(hdr::WSEQ).load(Ordering::Acquire);
    ring.unlock();
    drop(sig);
    // The reader ends the split right after its last chunk.
    for _ in 0..SPINS {
        if ring.word(hdr::WSEQ).load(Ordering::Acquire) != seen {
            return;
        }
        core::hint::spin_loop();
    }
    // SeqCst pairs with the reader's bump of `WSEQ` and look at `WSLEEP`
    // (`end_split`): either it sees this sleeper or the futex sees the bump.
    ring.word(hdr::WSLEEP).fetch_add(1, Ordering::SeqCst);
    let r = ring.futex_wait_raw(hdr::WSEQ, seen, Some(&patience()));
    ring.word(hdr::WSLEEP).fetch_sub(1, Ordering::AcqRel);
    if r == -(libc::ETIMEDOUT as i64) && gone(reader, tag) {
        abandon(ring, reader);
    }
}

/// End a split whose reader's process is gone, nothing taken: its bytes
/// stay in the ticket for the other readers.
fn abandon(ring: &Ring, reader: u32) {
    let sig = sys::SigBlock::new();
    ring.lock();
    let same = busy(ring) && ring.word(hdr::RBUF_PID).load(Ordering::Relaxed) == reader;
    let wake = same && {
        ring.word(hdr::RBUF_STATE)
            .store(hdr::RBUF_NONE, Ordering::Release);
        bump(ring, hdr::RSEQ, hdr::RSLEEP)
    };
    ring.unlock();
    drop(sig);
    if wake {
        ring.wake(hdr::RSEQ, i32::MAX as u32);
    }
}

/// `process_vm_writev` of `src` to `addr` in process `pid`: bytes copied,
/// or −errno.
fn write_memory(pid: u32, addr: u64, src: &[u8]) -> i64 {
    // SAFETY: the kernel only reads `src` (our bytes) and writes the other
    // process's memory.
    unsafe {
        crate::pipeticket::vm_copy(
            libc::SYS_process_vm_writev,
            pid,
            src.as_ptr() as *mut u8,
            src.len(),
            addr,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use atoll_msg::SharedRegion;
    use atoll_proto::BLOCK_SIZE;

    /// A cache of 4 blocks with a ring whose header is block 0.
    fn ring() -> (std::os::fd::OwnedFd, SharedRegion, Ring) {
        let (fd, cache) = SharedRegion::create("atoll-split-test", 4 * BLOCK_SIZE).unwrap();
        // SAFETY: test-only setup of the header's geometry words in our
        // own fresh mapping, before any Ring looks at them.
        unsafe {
            let h = cache.as_ptr();
            *(h.add(hdr::NBLOCKS) as *mut u32) = 1;
            *(h.add(hdr::BLOCKS) as *mut u32) = 1;
        }
        let r = Ring::at(&cache, 0).unwrap();
        (fd, cache, r)
    }

    #[test]
    fn the_two_ends_claim_each_chunk_once_and_meet() {
        let (_fd, _cache, r) = ring();
        start(&r, 4 * CHUNK + 1);
        let gen = cursor_now(&r).0;
        assert_eq!(claim(&r, gen, true), Some(0));
        assert_eq!(claim(&r, gen, false), Some(4));
        assert_eq!(claim(&r, gen, false), Some(3));
        assert_eq!(claim(&r, gen, true), Some(1));
        assert_eq!(claim(&r, gen, true), Some(2));
        assert_eq!(claim(&r, gen, false), None);
        assert_eq!(claim(&r, gen, true), None);
        assert_eq!(cursor_now(&r).1, 3, "the writer's chunks begin at 3");
        assert_eq!(chunk(4, 4 * CHUNK + 1), (4 * CHUNK, 4 * CHUNK + 1));
    }

    #[test]
    fn a_claim_for_an_ended_split_fails() {
        let (_fd, _cache, r) = ring();
        start(&r, 3 * CHUNK);
        let old = cursor_now(&r).0;
        start(&r, 3 * CHUNK);
        assert_eq!(claim(&r, old, false), None);
        assert_eq!(claim(&r, old + 1, false), Some(2));
    }

    #[test]
    fn a_closed_cursor_gives_nothing_more() {
        let (_fd, _cache, r) = ring();
        start(&r, 8 * CHUNK);
        let gen = cursor_now(&r).0;
        assert_eq!(claim(&r, gen, false), Some(7));
        assert_eq!(claim(&r, gen, true), Some(0));
        close_cursor(&r);
        assert_eq!(claim(&r, gen, true), None);
        assert_eq!(claim(&r, gen, false), None);
        assert_eq!(cursor_now(&r).1, 7);
    }
}
