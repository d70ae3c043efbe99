//! A pipe's ring in the shared buffer cache, as one client sees it
//! (layout: `atoll_proto::pipe`; protocol: `crate::pipe`).
//!
//! Audited `unsafe` module, like `cache`: the header and data blocks are in
//! the `MAP_SHARED` cache mapping, every block index read from a header is
//! bounds-checked against the mapping before use, and shared words are
//! only touched through atomics. Futex calls are *not* `FUTEX_PRIVATE`: the
//! waiters and wakers are different processes mapping the same memfd, and
//! the server wakes them too.

use core::cell::Cell;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use atoll_msg::SharedRegion;
use atoll_proto::pipe as hdr;
use atoll_proto::BLOCK_SIZE;

use crate::intr;
use crate::sys;

mod execfence;
pub use execfence::{exec_pending, forget_after_fork, ExecFence};

/// One pipe's ring (header + data blocks), validated. The block list is
/// read from the header each time it is used; `nblocks` and `gen` are the
/// geometry as last read, checked again under the lock (`lock`), since the
/// server may grow or shrink the ring between calls (`hdr::GEN`).
pub struct Ring {
    base: *mut u8,
    /// Blocks in the cache mapping (every block index is checked against it).
    cache_blocks: usize,
    header: usize,
    nblocks: Cell<usize>,
    gen: Cell<u32>,
}

impl Ring {
    /// The ring whose header is block `header`, or `None` if the header or
    /// any of its data blocks lies outside the cache.
    pub fn at(cache: &SharedRegion, header: u32) -> Option<Ring> {
        let nb = cache.len() / BLOCK_SIZE;
        if header as usize >= nb {
            return None;
        }
        let r = Ring {
            base: cache.as_ptr(),
            cache_blocks: nb,
            header: header as usize * BLOCK_SIZE,
            nblocks: Cell::new(0),
            gen: Cell::new(0),
        };
        r.read_geometry().then_some(r)
    }

    /// Read `NBLOCKS` and check every block index; false if any is out of
    /// range (the ring is then unusable: `nblocks` stays as it was).
    fn read_geometry(&self) -> bool {
        let gen = self.word(hdr::GEN).load(Ordering::Acquire);
        let n = self.word(hdr::NBLOCKS).load(Ordering::Acquire) as usize;
        if n == 0 || n > hdr::MAX_DATA_BLOCKS {
            return false;
        }
        let inside = (0..n).all(|k| {
            (self.word(hdr::BLOCKS + 4 * k).load(Ordering::Relaxed) as usize) < self.cache_blocks
        });
        if inside {
            self.nblocks.set(n);
            self.gen.set(gen);
        }
        inside
    }

    pub fn word(&self, off: usize) -> &AtomicU32 {
        debug_assert!(off.is_multiple_of(4) && off + 4 <= BLOCK_SIZE);
        // SAFETY: the header block is inside the mapping (checked in `at`),
        // `off` is a fixed, 4-aligned header offset below BLOCK_SIZE, and
        // blocks are page-aligned. Every process uses these words only
        // through atomics. The mapping lives for the life of the process.
        unsafe { &*(self.base.add(self.header + off) as *const AtomicU32) }
    }

    pub fn word64(&self, off: usize) -> &AtomicU64 {
        debug_assert!(off.is_multiple_of(8) && off + 8 <= BLOCK_SIZE);
        // SAFETY: as `word`, 8-aligned.
        unsafe { &*(self.base.add(self.header + off) as *const AtomicU64) }
    }

    /// Bytes the ring holds at most.
    pub fn capacity(&self) -> u64 {
        (self.nblocks.get() * BLOCK_SIZE) as u64
    }

    /// Bytes writers may fill: the `F_SETPIPE_SZ` size, or the capacity.
    pub fn limit(&self) -> u64 {
        match self.word(hdr::LIMIT).load(Ordering::Acquire) as u64 {
            0 => self.capacity(),
            l => l.min(self.capacity()),
        }
    }

    /// Take the ring lock: a futex mutex whose word holds the holder's
    /// thread id (and [`hdr::LOCK_WAITERS`] while others sleep), as
    /// Linux's PI futexes keep it. The caller blocks signals first, so a
    /// handler on this thread can never wait for a lock its own thread
    /// holds. A waiter that sleeps long looks whether the holder still
    /// exists and takes the lock back from one killed in its critical
    /// section (the ring stays consistent: `HEAD`/`TAIL` move only after
    /// the copy).
    pub fn lock(&self) {
        let w = self.word(hdr::LOCK);
        // SAFETY: gettid takes no arguments.
        let me = unsafe { sys::sc(libc::SYS_gettid, 0, 0, 0, 0) } as u32;
        // Not while another thread of ours is about to `execve`.
        execfence::enter(me);
        let acquired = || {
            // The server changes the geometry only under the lock: what
            // is read now holds until `unlock`.
            if self.word(hdr::GEN).load(Ordering::Acquire) != self.gen.get() {
                self.read_geometry();
            }
        };
        for _ in 0..100 {
            if w.compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return acquired();
            }
            core::hint::spin_loop();
        }
        let patience = libc::timespec {
            tv_sec: 0,
            tv_nsec: 50_000_000,
        };
        loop {
            let held = w.load(Ordering::Relaxed);
            if held == 0 {
                // Others may sleep too: the unlock that follows ours must
                // wake them.
                if w.compare_exchange(
                    0,
                    me | hdr::LOCK_WAITERS,
                    Ordering::Acquire,
                    Ordering::Relaxed,
                )
                .is_ok()
                {
                    return acquired();
                }
                continue;
            }
            let asleep = held | hdr::LOCK_WAITERS;
            if held != asleep
                && w.compare_exchange(held, asleep, Ordering::Relaxed, Ordering::Relaxed)
                    .is_err()
            {
                continue;
            }
            if self.futex_wait_raw(hdr::LOCK, asleep, Some(&patience)) == -(libc::ETIMEDOUT as i64)
            {
                self.recover(asleep);
            }
        }
    }

    /// The lock word has read `held` for long: if its holder no longer
    /// exists, free the lock and wake every sleeper to contend again.
    fn recover(&self, held: u32) {
        let holder = held & !hdr::LOCK_WAITERS;
        // A lock that seems held by this very thread was held by the
        // thread whose id it took over at an `execve` (the fence keeps
        // atoll's own `execve` from leaving one; a raw one may).
        // SAFETY: gettid takes no arguments.
        let me = unsafe { sys::sc(libc::SYS_gettid, 0, 0, 0, 0) } as u32;
        if holder == 0 || (holder != me && holder_lives(holder)) {
            return;
        }
        if self
            .word(hdr::LOCK)
            .compare_exchange(held, 0, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            self.wake(hdr::LOCK, u32::MAX);
        }
    }

    pub fn unlock(&self) {
        let waiters = self.word(hdr::LOCK).swap(0, Ordering::Release) & hdr::LOCK_WAITERS != 0;
        execfence::leave();
        if waiters {
            self.wake(hdr::LOCK, 1);
        }
    }

    /// Sleep while the word at `off` equals `seen` (or until `timeout`,
    /// relative). Returns 0, or −errno (`EINTR` when a signal handler ran
    /// or a deferred program signal waits, see `intr`; `ETIMEDOUT`;
    /// `EAGAIN` when the word had already moved; `EIO` when the instance
    /// is gone). Without a timeout the sleep still ends after
    /// `PEER_CHECK_NS` to look whether the instance died (`liveness`):
    /// then 0 (a spurious wake-up) or `EIO`.
    pub fn futex_wait(&self, off: usize, seen: u32, timeout: Option<&libc::timespec>) -> i64 {
        use atoll_msg::liveness;
        if liveness::peers_gone() {
            return -(libc::EIO as i64);
        }
        let bound = libc::timespec {
            tv_sec: 0,
            tv_nsec: liveness::PEER_CHECK_NS as _,
        };
        // A deferred program signal ends the sleep, also one that comes
        // after this look and before the futex call (see `intr`).
        let _waiting = intr::Waiting::on(self.word(off));
        if intr::pending() {
            return -(libc::EINTR as i64);
        }
        let r = self.futex_wait_raw(off, seen, Some(timeout.unwrap_or(&bound)));
        if timeout.is_none() && r == -(libc::ETIMEDOUT as i64) {
            return if liveness::check_peers_now() {
                -(libc::EIO as i64)
            } else {
                0
            };
        }
        r
    }

    /// Sleep while the word at `off` equals `seen`, at most `timeout`,
    /// without looking at deferred program signals: for waits that must
    /// not be cut, such as a split whose other end still copies
    /// (`pipesplit`). Returns 0 or −errno.
    pub(crate) fn futex_wait_raw(
        &self,
        off: usize,
        seen: u32,
        timeout: Option<&libc::timespec>,
    ) -> i64 {
        let w = self.word(off);
        let ts = timeout.map_or(0, |t| t as *const libc::timespec as u64);
        // SAFETY: FUTEX_WAIT reads the aligned shared word `w` and the
        // optional local timespec; nothing is written.
        unsafe {
            sys::sc(
                libc::SYS_futex,
                w.as_ptr() as u64,
                libc::FUTEX_WAIT as u64,
                seen as u64,
                ts,
            )
        }
    }

    /// Wake up to `n` sleepers on the word at `off`.
    pub fn wake(&self, off: usize, n: u32) {
        let w = self.word(off);
        // SAFETY: FUTEX_WAKE only uses the address of the shared word.
        unsafe {
            sys::sc(
                libc::SYS_futex,
                w.as_ptr() as u64,
                libc::FUTEX_WAKE as u64,
                n as u64,
                0,
            )
        };
    }

    /// Where ring position `pos` lives: (cache byte offset, bytes left in
    /// that block), or `None` for a block index outside the cache.
    fn locate(&self, pos: u64) -> Option<(usize, usize)> {
        let p = (pos % self.capacity()) as usize;
        let (k, within) = (p / BLOCK_SIZE, p % BLOCK_SIZE);
        let b = self.word(hdr::BLOCKS + 4 * k).load(Ordering::Relaxed) as usize;
        (b < self.cache_blocks).then_some((b * BLOCK_SIZE + within, BLOCK_SIZE - within))
    }

    /// Copy ring bytes `[pos, pos + dst.len())` out (caller holds the lock
    /// and checked that they were written). False if the header names a
    /// block outside the cache (nothing past it is copied).
    #[must_use]
    pub fn copy_out(&self, mut pos: u64, dst: &mut [u8]) -> bool {
        let mut done = 0;
        while done < dst.len() {
            let Some((at, room)) = self.locate(pos) else {
                return false;
            };
            let n = room.min(dst.len() - done);
            // SAFETY: `at..at+n` stays inside one data block, which `at`
            // checked lies in the mapping; `dst` is the program's buffer
            // (trusted like the kernel trusts a read buffer), distinct
            // from the cache.
            unsafe {
                core::ptr::copy_nonoverlapping(self.base.add(at), dst.as_mut_ptr().add(done), n)
            };
            done += n;
            pos += n as u64;
        }
        true
    }

    /// Copy `src` into ring bytes `[pos, pos + src.len())` (caller holds
    /// the lock and checked that there is room). False as `copy_out`.
    #[must_use]
    pub fn copy_in(&self, mut pos: u64, src: &[u8]) -> bool {
        let mut done = 0;
        while done < src.len() {
            let Some((at, room)) = self.locate(pos) else {
                return false;
            };
            let n = room.min(src.len() - done);
            // SAFETY: as `copy_out`, in the other direction.
            unsafe { core::ptr::copy_nonoverlapping(src.as_ptr().add(done), self.base.add(at), n) };
            done += n;
            pos += n as u64;
        }
        true
    }
}

/// Does the thread (or server process) `id` that holds a ring lock still
/// run? Gone, or a zombie (a process killed but not yet reaped holds
/// nothing any more), means no.
fn holder_lives(id: u32) -> bool {
    // SAFETY: signal 0 only checks that the thread exists; Linux takes a
    // thread id as well as a process id here.
    if unsafe { sys::sc(libc::SYS_kill, id as u64, 0, 0, 0) } == -(libc::ESRCH as i64) {
        return false;
    }
    // "/proc/<id>/stat": the state is the field after the last ')'.
    let mut path = [0u8; 32];
    sys::proc_path(&mut path, b"/proc/", id, b"/stat");
    let mut stat = [0u8; 512];
    // SAFETY: raw openat/read/close of a NUL-terminated local path into a
    // local buffer; the descriptor is closed before returning.
    let got = unsafe {
        let fd = sys::sc(
            libc::SYS_openat,
            libc::AT_FDCWD as u64,
            path.as_ptr() as u64,
            (libc::O_RDONLY | libc::O_CLOEXEC) as u64,
            0,
        );
        if fd < 0 {
            // Unreadable (another pid namespace's view, no /proc): the
            // signal said it exists.
            return true;
        }
        let got = sys::sc(
            libc::SYS_read,
            fd as u64,
            stat.as_mut_ptr() as u64,
            stat.len() as u64,
            0,
        );
        sys::sc(libc::SYS_close, fd as u64, 0, 0, 0);
        got
    };
    let text = &stat[..got.max(0) as usize];
    match text.iter().rposition(|&b| b == b')') {
        Some(p) => !matches!(text.get(p + 2), Some(b'Z' | b'X')),
        None => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cache of 8 blocks with a ring whose header is block 5 and whose
    /// data blocks are 3 and 1 (out of order, as a server may hand out).
    fn setup() -> (std::os::fd::OwnedFd, SharedRegion) {
        let (fd, cache) = SharedRegion::create("atoll-ring-test", 8 * BLOCK_SIZE).unwrap();
        let r = Ring {
            base: cache.as_ptr(),
            cache_blocks: 8,
            header: 5 * BLOCK_SIZE,
            nblocks: Cell::new(0),
            gen: Cell::new(0),
        };
        r.word(hdr::NBLOCKS).store(2, Ordering::Relaxed);
        r.word(hdr::BLOCKS).store(3, Ordering::Relaxed);
        r.word(hdr::BLOCKS + 4).store(1, Ordering::Relaxed);
        (fd, cache)
    }

    #[test]
    fn headers_outside_the_cache_are_refused() {
        let (_fd, cache) = setup();
        assert!(Ring::at(&cache, 8).is_none());
        assert!(Ring::at(&cache, 0).is_none(), "no data blocks");
        let r = Ring::at(&cache, 5).unwrap();
        r.word(hdr::BLOCKS + 4).store(99, Ordering::Relaxed);
        assert!(Ring::at(&cache, 5).is_none(), "data block out of range");
    }

    #[test]
    fn copies_wrap_around_the_ring_across_blocks() {
        let (_fd, cache) = setup();
        let r = Ring::at(&cache, 5).unwrap();
        assert_eq!(r.capacity(), 2 * BLOCK_SIZE as u64);
        let data: Vec<u8> = (0..6000u32).map(|i| (i % 251) as u8).collect();
        // Start near the end so the copy wraps to the first block.
        let start = 2 * BLOCK_SIZE as u64 - 100 + 10 * r.capacity();
        assert!(r.copy_in(start, &data));
        let mut back = vec![0u8; data.len()];
        assert!(r.copy_out(start, &mut back));
        assert_eq!(back, data);
        // The first 100 bytes landed at the end of block 1 (second data block).
        let mut tail = [0u8; 100];
        // SAFETY: test-only read of block 1's last 100 bytes in our mapping.
        unsafe {
            core::ptr::copy_nonoverlapping(
                cache.as_ptr().add(2 * BLOCK_SIZE - 100),
                tail.as_mut_ptr(),
                100,
            )
        };
        assert_eq!(&tail[..], &data[..100]);
    }

    /// A ring whose geometry changed after it was read (the server grew
    /// it) reads the new block list when it takes the lock, and only then.
    #[test]
    fn a_new_generation_is_read_under_the_lock() {
        let (_fd, cache) = setup();
        let r = Ring::at(&cache, 5).unwrap();
        assert_eq!(r.capacity(), 2 * BLOCK_SIZE as u64);
        r.word(hdr::BLOCKS + 8).store(6, Ordering::Relaxed);
        r.word(hdr::NBLOCKS).store(3, Ordering::Relaxed);
        assert_eq!(r.capacity(), 2 * BLOCK_SIZE as u64, "same generation");
        r.word(hdr::GEN).fetch_add(1, Ordering::Release);
        r.lock();
        assert_eq!(r.capacity(), 3 * BLOCK_SIZE as u64);
        // Position 2 * BLOCK_SIZE is now in block 6, no longer wrapped.
        assert!(r.copy_in(2 * BLOCK_SIZE as u64, b"grown"));
        r.unlock();
        let mut got = [0u8; 5];
        // SAFETY: test-only read of block 6's first bytes in our mapping.
        unsafe {
            core::ptr::copy_nonoverlapping(cache.as_ptr().add(6 * BLOCK_SIZE), got.as_mut_ptr(), 5)
        };
        assert_eq!(&got, b"grown");
        // A block outside the cache is refused, not copied to.
        r.word(hdr::BLOCKS + 8).store(99, Ordering::Relaxed);
        assert!(!r.copy_in(2 * BLOCK_SIZE as u64, b"x"));
    }

    #[test]
    fn a_lock_held_by_a_dead_thread_is_taken_back() {
        let (_fd, cache) = setup();
        let r = Ring::at(&cache, 5).unwrap();
        r.lock();
        // SAFETY: gettid takes no arguments.
        let me = unsafe { libc::gettid() } as u32;
        assert_eq!(
            r.word(hdr::LOCK).load(Ordering::Relaxed),
            me,
            "the holder's id"
        );
        r.unlock();
        assert_eq!(r.word(hdr::LOCK).load(Ordering::Relaxed), 0);
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        r.word(hdr::LOCK).store(dead, Ordering::Relaxed);
        r.lock(); // returns only because the dead holder's lock is freed
        assert_eq!(
            r.word(hdr::LOCK).load(Ordering::Relaxed) & !hdr::LOCK_WAITERS,
            me
        );
        r.unlock();
    }

    #[test]
    fn a_zombie_holds_no_lock_but_a_live_process_does() {
        let mut zombie = std::process::Command::new("true").spawn().unwrap();
        let id = zombie.id();
        // Not reaped yet: wait until it has exited.
        while std::fs::read_to_string(format!("/proc/{id}/stat"))
            .map(|s| !s.contains(") Z"))
            .unwrap_or(false)
        {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(!holder_lives(id), "a zombie");
        zombie.wait().unwrap();
        assert!(!holder_lives(id), "reaped");
        assert!(holder_lives(std::process::id()), "this process");
    }
}
