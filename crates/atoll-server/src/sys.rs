//! The few places this crate touches raw memory or raw system calls.
//! Every `unsafe` block of the crate is here.

use atoll_msg::SharedRegion;
use atoll_proto::BLOCK_SIZE;

use crate::fs::tape::{self, Tag};
use crate::store::BlockStore;

/// The instance's buffer cache as mapped by one server thread.
///
/// Clients map the same memfd and copy file bytes into and out of the
/// blocks they were granted; the server writes only blocks it owns and is
/// handing out or zeroing (Hare §3.3). Accesses go through raw pointers,
/// never references, because other processes may touch the same bytes:
/// A server being rebuilt from its journal (`crate::fs::tape`) changes
/// nothing here: the blocks already hold what the lost server and its
/// clients wrote since, and words clients move are played back from the
/// tape rather than read.
///
/// atoll's trust model (one user per instance, Hare's single fault domain)
/// accepts that a misbehaving client can garble file contents, but no
/// access here can leave the mapping.
pub struct SharedStore {
    region: SharedRegion,
}

impl SharedStore {
    pub fn new(region: SharedRegion) -> SharedStore {
        SharedStore { region }
    }

    /// Pointer to `[from, to)` of `block` if that range lies in the mapping.
    fn at(&self, block: u32, from: usize, to: usize) -> Option<*mut u8> {
        let base = (block as usize).checked_mul(BLOCK_SIZE)?;
        (from <= to && to <= BLOCK_SIZE && base + to <= self.region.len())
            // SAFETY: `base + from <= len`, so the offset stays inside the
            // mapping that `region` keeps alive.
            .then(|| unsafe { self.region.as_ptr().add(base + from) })
    }
}

impl BlockStore for SharedStore {
    fn zero(&mut self, block: u32, from: usize, to: usize) {
        if tape::replaying() {
            return;
        }
        if let Some(p) = self.at(block, from, to) {
            // SAFETY: `at` checked `[p, p + to - from)` is inside the mapping.
            unsafe { std::ptr::write_bytes(p, 0, to - from) }
        }
    }

    fn read(&self, block: u32, off: usize, buf: &mut [u8]) {
        if let Some(p) = self.at(block, off, off + buf.len()) {
            // SAFETY: source range checked by `at`; `buf` is a distinct
            // private buffer of exactly that length.
            unsafe { std::ptr::copy_nonoverlapping(p, buf.as_mut_ptr(), buf.len()) }
        }
    }

    fn write(&mut self, block: u32, off: usize, data: &[u8]) {
        if tape::replaying() {
            return;
        }
        if let Some(p) = self.at(block, off, off + data.len()) {
            // SAFETY: destination range checked by `at`; `data` is private
            // memory of exactly that length, so the ranges do not overlap.
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p, data.len()) }
        }
    }

    fn get_u32(&self, block: u32, off: usize) -> u32 {
        tape::value(Tag::StoreWord, || {
            u64::from(
                self.word(block, off)
                    .map_or(0, |w| w.load(std::sync::atomic::Ordering::Acquire)),
            )
        }) as u32
    }

    fn get_u64(&self, block: u32, off: usize) -> u64 {
        tape::value(Tag::StoreWord, || self.load_u64(block, off))
    }

    fn put_u32(&mut self, block: u32, off: usize, v: u32) {
        if tape::replaying() {
            return;
        }
        if let Some(w) = self.word(block, off) {
            w.store(v, std::sync::atomic::Ordering::Release);
        }
    }

    fn put_u64(&mut self, block: u32, off: usize, v: u64) {
        if tape::replaying() {
            return;
        }
        if let Some(p) = self.at(block, off, off + 8) {
            if off.is_multiple_of(8) {
                // SAFETY: in range (checked by `at`) and 8-aligned (see
                // `load_u64`); clients read it with atomics.
                unsafe {
                    (*(p as *const std::sync::atomic::AtomicU64))
                        .store(v, std::sync::atomic::Ordering::Release)
                }
            }
        }
    }

    fn cas_u32(&mut self, block: u32, off: usize, old: u32, new: u32) -> bool {
        let replaying = tape::replaying();
        tape::flag(Tag::StoreWord, || {
            !replaying
                && self.word(block, off).is_some_and(|w| {
                    w.compare_exchange(
                        old,
                        new,
                        std::sync::atomic::Ordering::Acquire,
                        std::sync::atomic::Ordering::Relaxed,
                    )
                    .is_ok()
                })
        })
    }

    fn swap_u32(&mut self, block: u32, off: usize, v: u32) -> u32 {
        let replaying = tape::replaying();
        tape::value(Tag::StoreWord, || match replaying {
            true => 0,
            false => u64::from(
                self.word(block, off)
                    .map_or(0, |w| w.swap(v, std::sync::atomic::Ordering::AcqRel)),
            ),
        }) as u32
    }

    fn wake(&mut self, block: u32, off: usize) {
        self.add_u32(block, off, 0, true);
    }

    fn add_u32(&mut self, block: u32, off: usize, delta: u32, wake: bool) {
        if tape::replaying() {
            return;
        }
        let Some(w) = self.word(block, off) else {
            return;
        };
        w.fetch_add(delta, std::sync::atomic::Ordering::AcqRel);
        if wake {
            // SAFETY: FUTEX_WAKE on a word inside our shared mapping; it
            // only reads the address. Not FUTEX_PRIVATE: the sleepers are
            // other processes mapping the same memfd.
            unsafe {
                libc::syscall(
                    libc::SYS_futex,
                    w.as_ptr(),
                    libc::FUTEX_WAKE,
                    i32::MAX,
                    0usize,
                    0usize,
                    0u32,
                )
            };
        }
    }
}

impl SharedStore {
    fn load_u64(&self, block: u32, off: usize) -> u64 {
        match self.at(block, off, off + 8) {
            // SAFETY: in range (checked by `at`), 8-aligned (blocks are
            // page-aligned in a page-aligned mapping and `off % 8 == 0`);
            // clients update it with atomics, so read it atomically too.
            Some(p) if off.is_multiple_of(8) => unsafe {
                (*(p as *const std::sync::atomic::AtomicU64))
                    .load(std::sync::atomic::Ordering::Acquire)
            },
            _ => 0,
        }
    }
}

impl SharedStore {
    /// The aligned `u32` at byte `off` of `block`, as an atomic.
    fn word(&self, block: u32, off: usize) -> Option<&std::sync::atomic::AtomicU32> {
        if !off.is_multiple_of(4) {
            return None;
        }
        let p = self.at(block, off, off + 4)?;
        // SAFETY: in range (checked by `at`) and 4-aligned (page-aligned
        // blocks, `off % 4 == 0`); the mapping lives as long as `self`.
        // Other processes access the word only atomically.
        Some(unsafe { &*(p as *const std::sync::atomic::AtomicU32) })
    }
}

/// A byte log in shared memory that outlives the thread (or process)
/// appending to it (`crate::journal`): bounds-checked copies in and out,
/// and a few header words read and written atomically.
pub struct LogRegion {
    region: SharedRegion,
}

/// Header words at the start of a [`LogRegion`].
pub const LOG_WORDS: usize = 32;

impl LogRegion {
    pub fn new(region: SharedRegion) -> LogRegion {
        LogRegion { region }
    }

    /// Bytes in the region (header included).
    pub fn len(&self) -> usize {
        self.region.len()
    }

    /// Header word `i`.
    pub fn word(&self, i: usize) -> &std::sync::atomic::AtomicU64 {
        assert!(
            i < LOG_WORDS && (i + 1) * 8 <= self.region.len(),
            "no log word {i}"
        );
        // SAFETY: in range (asserted), 8-aligned (the mapping is
        // page-aligned); the region lives as long as `self`, and the word
        // is only accessed atomically.
        unsafe { &*(self.region.as_ptr().add(i * 8) as *const std::sync::atomic::AtomicU64) }
    }

    /// Copy `data` to byte `off`; false if it does not fit.
    pub fn write_at(&self, off: usize, data: &[u8]) -> bool {
        let fits = off >= LOG_WORDS * 8
            && off
                .checked_add(data.len())
                .is_some_and(|end| end <= self.region.len());
        if fits {
            // SAFETY: `[off, off + len)` lies inside the mapping (checked)
            // and past the header words; only the log's one writer writes
            // there, and `data` is private memory.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    data.as_ptr(),
                    self.region.as_ptr().add(off),
                    data.len(),
                )
            }
        }
        fits
    }

    /// Copy bytes from `off` into `buf`; false if out of range.
    pub fn read_at(&self, off: usize, buf: &mut [u8]) -> bool {
        let fits = off
            .checked_add(buf.len())
            .is_some_and(|end| end <= self.region.len());
        if fits {
            // SAFETY: source inside the mapping (checked); `buf` is a
            // distinct private buffer of exactly that length.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    self.region.as_ptr().add(off),
                    buf.as_mut_ptr(),
                    buf.len(),
                )
            }
        }
        fits
    }
}

/// `n` random bytes from the kernel (`getrandom(2)`).
pub fn random_bytes(buf: &mut [u8]) -> std::io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        let rest = &mut buf[done..];
        // SAFETY: the kernel writes at most `rest.len()` bytes to `rest`.
        let n = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        done += n as usize;
    }
    Ok(())
}

/// Fork the calling thread into a child process that runs `work` and
/// ends with `_exit(work())`: a copy-on-write image of this process at
/// this instant (`crate::snapshot`: a server's state encoded off its
/// request path, fos §3.5). Returns the child's pid in the parent.
///
/// Only the calling thread exists in the child; locks other threads held
/// at the fork stay held there for good. glibc's `fork` re-initialises
/// malloc's locks in the child, so `work` may allocate; it must touch
/// nothing else another thread may hold (no `tracing`, no stdio, no
/// `OnceLock` not yet initialised), and a panic in it (whose hook writes
/// to stderr) may hang the child: the parent bounds how long it waits.
/// The child never returns into the caller's code, runs no destructors
/// and no `atexit` handlers (`_exit`), and is sent `SIGKILL` when the
/// forking thread ends (`PR_SET_PDEATHSIG`: the *thread*, which is what
/// a server moved off its host or killed with its host is).
pub fn fork_worker(name: &std::ffi::CStr, work: impl FnOnce() -> i32) -> std::io::Result<u32> {
    let parent = rustix::process::getpid();
    // The child is born with the thread's name (`comm`), so it bears
    // `name` from its first instruction: a successor that finds its pid
    // in the journal checks it is this child before it kills it
    // (`snapshot`), whatever the child managed to do.
    let own = rustix::thread::name().ok();
    let _ = rustix::thread::set_name(name);
    // SAFETY: `fork` in a multi-threaded process: the child runs only the
    // code below, which keeps to the rules of the doc comment above, and
    // leaves by `_exit` without returning into the caller.
    let pid = unsafe { libc::fork() };
    match pid {
        0 => {
            // Die with the forking thread, also if it died before this
            // line (then the parent pid changed: reparented).
            let orphan = rustix::process::set_parent_process_death_signal(Some(
                rustix::process::Signal::KILL,
            ))
            .is_err()
                || rustix::process::getppid() != Some(parent);
            let code = if orphan {
                3
            } else {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)).unwrap_or(101)
            };
            // SAFETY: ends this child process at once, running no
            // destructor or `atexit` handler (which could take locks of
            // threads that do not exist here).
            unsafe { libc::_exit(code) }
        }
        pid => {
            // errno before the name's `prctl` can change it.
            let forked = match pid {
                -1 => Err(std::io::Error::last_os_error()),
                pid => Ok(pid as u32),
            };
            if let Some(own) = own {
                let _ = rustix::thread::set_name(&own);
            }
            forked
        }
    }
}

/// A child [`fork_worker`] made, if it ended (reaped, without waiting):
/// `Some(status code)`, or `Some(-signal)` if a signal ended it.
pub fn reap_worker(pid: u32) -> std::io::Result<Option<i32>> {
    let mut status = 0i32;
    // SAFETY: `waitpid` of one child of this process, writing only
    // `status`.
    let r = unsafe { libc::waitpid(pid as i32, &mut status, libc::WNOHANG) };
    match r {
        0 => Ok(None),
        -1 => Err(std::io::Error::last_os_error()),
        _ if libc::WIFEXITED(status) => Ok(Some(libc::WEXITSTATUS(status))),
        _ if libc::WIFSIGNALED(status) => Ok(Some(-libc::WTERMSIG(status))),
        _ => Ok(Some(-1)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_store_reads_back_and_ignores_out_of_range_blocks() {
        let (_fd, region) = SharedRegion::create("atoll-test", 2 * BLOCK_SIZE).unwrap();
        let mut s = SharedStore::new(region);
        s.write(1, 10, b"abc");
        let mut buf = [0u8; 3];
        s.read(1, 10, &mut buf);
        assert_eq!(&buf, b"abc");
        s.zero(1, 11, 12);
        s.read(1, 10, &mut buf);
        assert_eq!(&buf, b"a\0c");
        s.write(2, 0, b"x"); // past the end: ignored
        s.zero(0, 5, BLOCK_SIZE + 1);
    }

    #[test]
    fn random_bytes_are_not_all_zero() {
        let mut b = [0u8; 16];
        random_bytes(&mut b).unwrap();
        assert!(b.iter().any(|x| *x != 0));
    }
}
