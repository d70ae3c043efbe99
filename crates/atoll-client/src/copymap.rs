//! `mmap` of atoll files in a copy island: private memory filled by copy
//! and written back by copy (Cosh §5), since the process maps no buffer
//! cache (`file::mmap` maps the cache's pages everywhere else).
//!
//! * `mmap` reserves anonymous memory and fills it with the file's bytes
//!   through `ReadData` (bytes past the end of the file stay zero);
//! * a `MAP_SHARED` mapping of a description open for writing is
//!   *tracked*: it keeps a description of its own (opened at `mmap`, so
//!   the program may close its descriptor, as on Linux) and a snapshot of
//!   what it last exchanged with the file;
//! * at the sync points — `msync`, `munmap`, `close` of a descriptor of
//!   the file, `fsync`, `execve` and `exit` — the bytes that differ from
//!   the snapshot go back through `WriteData` (only those, so two
//!   processes storing to different bytes of one page do not undo each
//!   other; never past the file's end: a mapping does not grow its file).
//!
//! So a copy island's shared mapping behaves as the incoherent emulation's
//! private block copies do (`incoherent`): another process sees the stores
//! at the next sync point, and the mapping sees others' writes only as of
//! its `mmap`. Pages wholly past the end read zeros instead of raising
//! `SIGBUS`. `fork` gives the child its own copy of the memory and a
//! reference to the tracked description, so its stores go back too.
//!
//! Locking: one spin lock (signals blocked), never held across a message:
//! a write-back takes the snapshot out, sends, and puts it back.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicUsize, Ordering};

use atoll_proto::{DescId, InodeId, Reply, Request};

use crate::error::{err, Error, Result};
use crate::fdtable::DescRef;
use crate::session::{Client, Lane};
use crate::sys::{self, SpinLock};

const PAGE: u64 = 4096;

/// A tracked shared mapping (or what is left of one after `munmap`).
struct Tracked {
    start: u64,
    end: u64,
    ino: InodeId,
    /// File offset at `start`.
    off: u64,
    /// The description write-backs use (shared by the pieces of one map).
    desc: DescId,
    /// Bytes as last read from or written to the file; `None` while a
    /// write-back of this piece is under way.
    snapshot: Option<Vec<u8>>,
}

struct Table {
    all: UnsafeCell<Vec<Tracked>>,
}

// SAFETY: `all` is only touched under `fork_lock()`.
unsafe impl Sync for Table {}

static TABLE: Table = Table {
    all: UnsafeCell::new(Vec::new()),
};
/// Tracked pieces (a cheap gate for `munmap`, `close` and exit).
static COUNT: AtomicUsize = AtomicUsize::new(0);

/// Does this process track no copied mapping?
pub fn is_empty() -> bool {
    COUNT.load(Ordering::Acquire) == 0
}

/// The table's lock, for [`crate::forkgate`].
pub fn fork_lock() -> &'static SpinLock {
    &crate::forkgate::LOCKS.copymap
}

fn with<R>(f: impl FnOnce(&mut Vec<Tracked>) -> R) -> R {
    let _g = fork_lock().lock();
    // SAFETY: the lock is held for the whole use of the table.
    let t = unsafe { &mut *TABLE.all.get() };
    let r = f(t);
    COUNT.store(t.len(), Ordering::Release);
    r
}

/// Is anything tracked in `[addr, addr + len)`?
pub fn overlaps(addr: u64, len: u64) -> bool {
    if COUNT.load(Ordering::Acquire) == 0 {
        return false;
    }
    let end = addr.saturating_add(len.max(1));
    with(|t| t.iter().any(|m| m.start < end && addr < m.end))
}

/// `mmap` of an atoll regular file in a copy island (the caller checked
/// access and alignment as `file::mmap` does).
#[allow(clippy::too_many_arguments)]
pub fn mmap(
    c: &Client,
    lane: &Lane,
    d: &DescRef,
    addr: u64,
    map_len: u64,
    prot: i32,
    keep: i32,
    off: u64,
    shared: bool,
) -> Result<i64> {
    // SAFETY: reserving anonymous memory where the program asked, with its
    // own MAP_FIXED choice, readable and writable while it is filled.
    let base = unsafe {
        sys::syscall6(
            libc::SYS_mmap,
            [
                addr,
                map_len,
                (libc::PROT_READ | libc::PROT_WRITE) as u64,
                (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | keep) as u64,
                u64::MAX,
                0,
            ],
        )
    };
    if base < 0 {
        return err((-base) as i32);
    }
    let undo = |e: Error| {
        // SAFETY: unmapping only the range reserved above.
        unsafe { sys::sc(libc::SYS_munmap, base as u64, map_len, 0, 0) };
        Err(e)
    };
    // The file's bytes, copied into the fresh (still writable) memory
    // through the checked user-copy path; past the end, zeros.
    let mut data = vec![0u8; map_len as usize];
    if let Err(e) = crate::file::read_at(c, lane, d, &mut data, Some(off)) {
        return undo(e);
    }
    if let Err(e) = sys::copy_to_user(base as u64, &data) {
        return undo(Error::Errno(e));
    }
    let writes_back = shared && d.flags() & libc::O_ACCMODE as u32 == libc::O_RDWR as u32;
    if writes_back {
        let desc = match crate::file::open_inode(c, lane, d.ino(), libc::O_RDWR as u32) {
            Ok((desc, _)) => desc,
            Err(e) => return undo(e),
        };
        let snapshot = data;
        with(|t| {
            t.push(Tracked {
                start: base as u64,
                end: base as u64 + map_len,
                ino: d.ino(),
                off,
                desc,
                snapshot: Some(snapshot),
            })
        });
    }
    // SAFETY: our own reservation, to the protection the program asked.
    let r = unsafe { sys::sc(libc::SYS_mprotect, base as u64, map_len, prot as u64, 0) };
    if r < 0 {
        forget(c, base as u64, map_len);
        return undo(Error::Errno((-r) as i32));
    }
    Ok(base)
}

/// Maximal runs `[lo, hi)` where `now` differs from `then`.
fn changed_runs(now: &[u8], then: &[u8]) -> Vec<(usize, usize)> {
    let mut v = Vec::new();
    let mut i = 0;
    let n = now.len().min(then.len());
    while i < n {
        if now[i] == then[i] {
            i += 1;
            continue;
        }
        let lo = i;
        while i < n && now[i] != then[i] {
            i += 1;
        }
        v.push((lo, i));
    }
    v
}

/// Write back the changed bytes of one piece; returns its new snapshot.
fn write_back_piece(c: &Client, lane: &Lane, p: &Tracked, mut snap: Vec<u8>) -> Vec<u8> {
    let size = match crate::file::size_of(c, lane, p.ino) {
        Ok(s) => s,
        Err(_) => return snap,
    };
    let mut page = vec![0u8; PAGE as usize];
    let mut at = p.start;
    while at < p.end {
        let i = (at - p.start) as usize;
        let n = ((p.end - at) as usize).min(PAGE as usize);
        // A page the program unmapped or made unreadable is skipped.
        if sys::peek(&mut page[..n], at) {
            for (lo, hi) in changed_runs(&page[..n], &snap[i..i + n]) {
                let foff = p.off + (i + lo) as u64;
                if foff >= size {
                    continue;
                }
                let hi = hi.min(lo + (size - foff) as usize);
                let sent = lane.call(
                    c,
                    p.desc.server(),
                    Request::WriteData {
                        desc: p.desc,
                        data: &page[lo..hi],
                        offset: Some(foff),
                        fsize: None,
                        chain: None,
                    },
                    |r| match r {
                        Reply::Written(_) => Ok(()),
                        _ => Err(Error::Protocol("WriteData")),
                    },
                );
                if sent.is_ok() {
                    snap[i + lo..i + hi].copy_from_slice(&page[lo..hi]);
                }
            }
        }
        at += n as u64;
    }
    snap
}

/// Write back every tracked piece that `pick` selects.
fn write_back_where(c: &Client, pick: impl Fn(&Tracked) -> bool) {
    if COUNT.load(Ordering::Acquire) == 0 {
        return;
    }
    let Ok(lane) = c.lane() else { return };
    // Take the snapshots out, send without the lock, put them back.
    let mut work: Vec<(Tracked, Vec<u8>)> = with(|t| {
        t.iter_mut()
            .filter(|m| pick(m))
            .filter_map(|m| {
                let snap = m.snapshot.take()?;
                let copy = Tracked {
                    snapshot: None,
                    ..*m
                };
                Some((copy, snap))
            })
            .collect()
    });
    for (p, snap) in work.iter_mut() {
        *snap = write_back_piece(c, &lane, p, core::mem::take(snap));
    }
    with(|t| {
        for (p, snap) in work {
            if let Some(m) = t
                .iter_mut()
                .find(|m| m.start == p.start && m.desc == p.desc && m.snapshot.is_none())
            {
                m.snapshot = Some(snap);
            }
        }
    });
}

/// `msync` (and `munmap`, before the kernel unmaps): write back the
/// pieces that `[addr, addr + len)` touches.
pub fn sync_range(c: &Client, addr: u64, len: u64) {
    let end = addr.saturating_add(len.max(1));
    write_back_where(c, |m| m.start < end && addr < m.end);
}

/// `close` of a descriptor of `ino`, `fsync`: write back its mappings.
pub fn sync_inode(c: &Client, ino: InodeId) {
    write_back_where(c, |m| m.ino == ino);
}

/// `execve` and `exit`: write back everything.
pub fn sync_all(c: &Client) {
    write_back_where(c, |_| true);
}

/// Stop tracking `[addr, addr + len)` (the kernel no longer maps it, or
/// something else does): pieces are cut, and a description no piece
/// uses any more is closed.
pub fn forget(c: &Client, addr: u64, len: u64) {
    let lo = addr;
    let hi = addr.saturating_add(len.div_ceil(PAGE) * PAGE);
    let closed: Vec<DescId> = with(|t| {
        let mut kept = Vec::with_capacity(t.len());
        let mut touched = Vec::new();
        for m in t.drain(..) {
            if m.end <= lo || hi <= m.start {
                kept.push(m);
                continue;
            }
            touched.push(m.desc);
            let snap = m.snapshot.unwrap_or_default();
            let cut = |from: u64, to: u64| Tracked {
                start: from,
                end: to,
                ino: m.ino,
                off: m.off + (from - m.start),
                desc: m.desc,
                snapshot: snap
                    .get((from - m.start) as usize..(to - m.start) as usize)
                    .map(<[u8]>::to_vec),
            };
            if m.start < lo {
                kept.push(cut(m.start, lo));
            }
            if hi < m.end {
                kept.push(cut(hi, m.end));
            }
        }
        *t = kept;
        touched.retain(|d| !t.iter().any(|m| m.desc == *d));
        touched.dedup();
        touched
    });
    for desc in closed {
        crate::file::close_desc(c, desc, InodeId(0));
    }
}

/// `munmap` touching a tracked piece: write back, unmap, forget.
pub fn munmap(c: &Client, a: &[u64; 6]) -> i64 {
    sync_range(c, a[0], a[1]);
    // SAFETY: the program's own munmap, unchanged.
    let r = unsafe { sys::syscall6(libc::SYS_munmap, *a) };
    if r == 0 {
        forget(c, a[0], a[1]);
    }
    r
}

/// `mremap` of a tracked piece: its stores so far go back and it is no
/// longer tracked (later stores through the moved mapping stay private;
/// docs/COMPATIBILITY.md).
pub fn before_mremap(c: &Client, addr: u64, len: u64) {
    sync_range(c, addr, len);
    forget(c, addr, len);
}

/// Fork: the child's copy of the memory writes back through the same
/// descriptions, which it gets a reference to. Called before the fork.
pub fn share_with(c: &Client, lane: &Lane, given: &mut crate::forkshare::Ledger) {
    if COUNT.load(Ordering::Acquire) == 0 {
        return;
    }
    let mut descs: Vec<DescId> = with(|t| t.iter().map(|m| m.desc).collect());
    descs.sort_unstable_by_key(|d| d.0);
    descs.dedup();
    for desc in descs {
        let _ = given.share(c, lane, desc);
    }
}

#[cfg(test)]
mod tests {
    use super::changed_runs;

    #[test]
    fn only_changed_bytes_go_back() {
        let then = [0u8, 1, 2, 3, 4, 5, 6, 7];
        let now = [0u8, 9, 9, 3, 4, 5, 9, 7];
        assert_eq!(changed_runs(&now, &then), vec![(1, 3), (6, 7)]);
        assert!(changed_runs(&then, &then).is_empty());
    }
}
