//! The load table: per-core figures the scheduling servers publish in
//! shared memory (`<runtime dir>/sched.load`, mapped by every client that
//! places an exec). fos §4.2 spawns on the least-loaded core; Hare's
//! policies (random, round-robin) need only the number of cores.
//!
//! Layout (native-endian `u64` words): `[MAGIC, ncores, cores[0..ncores]]`
//! where `cores[k] = [running, execs, served, crash, restarts, pid,
//! started, generation]`: programs
//! the server of core `k` runs now, execs placed on core `k` so far (local
//! ones are counted by the client that ran them), 1 when a scheduling
//! server places programs on core `k` (the CPUs a program of the instance
//! may run on, which `sched_getaffinity` reports to it), 1 while `atoll
//! chaos --kill sched:k` asks the server to die, and how often it was
//! restarted (`server`, `process`), and — for a server that is a process
//! of its own — its pid and when it started (Unix time in ms; both 0
//! while it is being restarted), and which incarnation serves the name
//! `/sched/core/k` (one more at every start or restart). Plain atomics: a reader may see a figure
//! a little stale, which only makes a placement less than perfect.

use std::os::fd::AsFd;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::fs::{Mode, OFlags};
use rustix::mm::{MapFlags, ProtFlags};

const MAGIC: u64 = 0x6174_6f6c_6c73_6364; // "atollscd"
/// Most cores one table describes.
pub const MAX_CORES: usize = 1024;
const HEADER_WORDS: usize = 2;
const WORDS_PER_CORE: usize = 8;

fn bytes_for(ncores: usize) -> usize {
    (HEADER_WORDS + WORDS_PER_CORE * ncores) * 8
}

/// A mapping of the load table.
pub struct LoadTable {
    base: *mut AtomicU64,
    len: usize,
    ncores: usize,
}

// SAFETY: the mapping is only accessed through atomics and lives until
// drop; sharing it between threads is what it is for.
unsafe impl Send for LoadTable {}
// SAFETY: as above.
unsafe impl Sync for LoadTable {}

impl LoadTable {
    /// Create the table for `ncores` cores at `path` (servers).
    pub fn create(path: &Path, ncores: usize) -> std::io::Result<LoadTable> {
        let ncores = ncores.clamp(1, MAX_CORES);
        let fd = rustix::fs::open(
            path,
            OFlags::RDWR | OFlags::CREATE | OFlags::TRUNC | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )?;
        let len = bytes_for(ncores);
        rustix::fs::ftruncate(&fd, len as u64)?;
        let mut t = Self::map(fd.as_fd(), len)?;
        t.ncores = ncores;
        t.word(1).store(ncores as u64, Ordering::Relaxed);
        t.word(0).store(MAGIC, Ordering::Release);
        Ok(t)
    }

    /// Map an existing table (clients). `None` when there is none or it
    /// is not a table.
    pub fn open(path: &Path) -> Option<LoadTable> {
        let fd = rustix::fs::open(path, OFlags::RDWR | OFlags::CLOEXEC, Mode::empty()).ok()?;
        let size = rustix::fs::fstat(&fd).ok()?.st_size as usize;
        if size < bytes_for(1) {
            return None;
        }
        let mut t = Self::map(fd.as_fd(), size).ok()?;
        if t.word(0).load(Ordering::Acquire) != MAGIC {
            return None;
        }
        let n = t.word(1).load(Ordering::Relaxed) as usize;
        if n == 0 || n > MAX_CORES || bytes_for(n) > size {
            return None;
        }
        t.ncores = n;
        Some(t)
    }

    fn map(fd: rustix::fd::BorrowedFd<'_>, len: usize) -> std::io::Result<LoadTable> {
        // SAFETY: a fresh shared mapping of `len` bytes of our file; it is
        // only touched through `AtomicU64`s inside `len`, 8-byte aligned
        // (page-aligned base).
        let p = unsafe {
            rustix::mm::mmap(
                core::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
                fd,
                0,
            )?
        };
        Ok(LoadTable {
            base: p.cast(),
            len,
            ncores: 0,
        })
    }

    fn word(&self, i: usize) -> &AtomicU64 {
        assert!((i + 1) * 8 <= self.len, "load table word out of range");
        // SAFETY: in bounds (checked), aligned, mapped while `self` lives.
        unsafe { &*self.base.add(i) }
    }

    pub fn ncores(&self) -> usize {
        self.ncores
    }

    fn core_word(&self, core: usize, w: usize) -> Option<&AtomicU64> {
        (core < self.ncores).then(|| self.word(HEADER_WORDS + core * WORDS_PER_CORE + w))
    }

    /// Programs the server of `core` runs now.
    pub fn running(&self, core: usize) -> u64 {
        self.core_word(core, 0)
            .map_or(0, |w| w.load(Ordering::Relaxed))
    }

    pub fn execs(&self, core: usize) -> u64 {
        self.core_word(core, 1)
            .map_or(0, |w| w.load(Ordering::Relaxed))
    }

    pub fn add_running(&self, core: usize, delta: i64) {
        if let Some(w) = self.core_word(core, 0) {
            if delta >= 0 {
                w.fetch_add(delta as u64, Ordering::Relaxed);
            } else {
                let _ = w.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                    Some(v.saturating_sub(delta.unsigned_abs()))
                });
            }
        }
    }

    pub fn count_exec(&self, core: usize) {
        if let Some(w) = self.core_word(core, 1) {
            w.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A scheduling server places programs on `core`.
    pub fn mark_served(&self, core: usize) {
        if let Some(w) = self.core_word(core, 2) {
            w.store(1, Ordering::Relaxed);
        }
    }

    /// The cores programs of the instance may be placed on.
    pub fn served(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.ncores).filter(|&k| {
            self.core_word(k, 2)
                .is_some_and(|w| w.load(Ordering::Relaxed) == 1)
        })
    }

    /// Ask the server of `core` to die as a crash would (`atoll chaos`);
    /// false if no server places programs there.
    pub fn request_crash(&self, core: usize) -> bool {
        if !self.served().any(|c| c == core) {
            return false;
        }
        self.core_word(core, 3)
            .inspect(|w| w.store(1, Ordering::Release))
            .is_some()
    }

    /// Was the server of `core` asked to die? (Clears the request.)
    pub fn take_crash(&self, core: usize) -> bool {
        self.core_word(core, 3)
            .is_some_and(|w| w.swap(0, Ordering::AcqRel) == 1)
    }

    /// The server of `core` was restarted once more.
    pub fn count_restart(&self, core: usize) {
        if let Some(w) = self.core_word(core, 4) {
            w.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// How often the server of `core` was restarted.
    pub fn restarts(&self, core: usize) -> u64 {
        self.core_word(core, 4)
            .map_or(0, |w| w.load(Ordering::Relaxed))
    }

    /// The server of `core` now runs as process `pid`, started at
    /// `started_ms` (Unix time); `(0, 0)` while it is being restarted.
    pub fn set_process(&self, core: usize, pid: u32, started_ms: u64) {
        if let (Some(p), Some(t)) = (self.core_word(core, 5), self.core_word(core, 6)) {
            t.store(started_ms, Ordering::Relaxed);
            p.store(u64::from(pid), Ordering::Release);
        }
    }

    /// A new incarnation of the server of `core` serves from now on (its
    /// name, `/sched/core/<core>`, resolves to it: fos §3.3).
    pub fn advance_generation(&self, core: usize) {
        if let Some(w) = self.core_word(core, 7) {
            w.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Which incarnation serves `core` (0: none started).
    pub fn generation(&self, core: usize) -> u64 {
        self.core_word(core, 7)
            .map_or(0, |w| w.load(Ordering::Acquire))
    }

    /// The process of the server of `core` (0: a thread, or restarting).
    pub fn pid(&self, core: usize) -> u32 {
        self.core_word(core, 5)
            .map_or(0, |w| w.load(Ordering::Acquire) as u32)
    }

    /// When the process of the server of `core` started (Unix time, ms).
    pub fn started_ms(&self, core: usize) -> u64 {
        self.core_word(core, 6)
            .map_or(0, |w| w.load(Ordering::Relaxed))
    }

    /// The server of `core` died with the programs it counted (its
    /// successor counts afresh).
    pub fn reset_running(&self, core: usize) {
        if let Some(w) = self.core_word(core, 0) {
            w.store(0, Ordering::Relaxed);
        }
    }

    /// No server places programs on `core` any more (it could not be
    /// restarted).
    pub fn unserve(&self, core: usize) {
        if let Some(w) = self.core_word(core, 2) {
            w.store(0, Ordering::Relaxed);
        }
    }

    /// `execs` of every core.
    pub fn exec_counts(&self) -> Vec<u64> {
        (0..self.ncores).map(|k| self.execs(k)).collect()
    }
}

impl Drop for LoadTable {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly our mapping; no reference outlives self.
        unsafe {
            let _ = rustix::mm::munmap(self.base.cast(), self.len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn servers_publish_and_clients_read() {
        let dir = tempfile_dir();
        let p = dir.join("sched.load");
        let s = LoadTable::create(&p, 3).unwrap();
        let c = LoadTable::open(&p).unwrap();
        assert_eq!(c.ncores(), 3);
        assert_eq!(c.served().count(), 0);
        s.mark_served(0);
        s.mark_served(2);
        s.mark_served(7); // beyond the table: ignored
        assert_eq!(c.served().collect::<Vec<_>>(), [0, 2]);
        s.add_running(2, 1);
        s.add_running(2, 1);
        s.add_running(2, -1);
        c.count_exec(1);
        assert_eq!(c.running(2), 1);
        assert_eq!(s.exec_counts(), vec![0, 1, 0]);
        assert!(!s.request_crash(1), "no server on core 1");
        assert!(c.request_crash(2));
        assert!(s.take_crash(2) && !s.take_crash(2), "taken once");
        s.count_restart(2);
        assert_eq!(c.restarts(2), 1);
        s.advance_generation(2);
        s.advance_generation(2);
        assert_eq!((c.generation(2), c.generation(0)), (2, 0));
        s.set_process(2, 4242, 17);
        assert_eq!((c.pid(2), c.started_ms(2)), (4242, 17));
        s.reset_running(2);
        assert_eq!(c.running(2), 0);
        s.unserve(2);
        assert_eq!(c.served().collect::<Vec<_>>(), [0]);
        s.add_running(0, -5);
        assert_eq!(s.running(0), 0, "never below zero");
        assert_eq!(c.running(99), 0, "out of range reads as idle");
        std::fs::write(dir.join("junk"), [0u8; 64]).unwrap();
        assert!(LoadTable::open(&dir.join("junk")).is_none());
        assert!(LoadTable::open(&dir.join("missing")).is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn tempfile_dir() -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("atoll-sched-load-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }
}
