//! Pages kept writable across the rewrites of one batch (the remembered
//! sites of a file, `eager`): a page of text or of stubs is made
//! read-write-execute once, at its first store (or all the text pages of
//! the batch's sites at once, `open_range`), and read-execute again at the
//! batch's end, not around every store (two `mprotect`s per site and two
//! per stub, ~30 sites in a `cc1`). Outside a batch nothing is kept.
//!
//! Used only under the rewrite lock (`Lock`): the atomics are for the
//! type system, not for concurrency.

use core::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};

use crate::raw;

const PAGE: usize = 4096;
const MAX_OPEN: usize = 32;

static ACTIVE: AtomicBool = AtomicBool::new(false);
static OPEN: [AtomicUsize; MAX_OPEN] = [const { AtomicUsize::new(0) }; MAX_OPEN];
static COUNT: AtomicUsize = AtomicUsize::new(0);
/// A range of text pages made writable at once, `[LO, HI)` (empty: none).
static LO: AtomicUsize = AtomicUsize::new(0);
static HI: AtomicUsize = AtomicUsize::new(0);
/// Whether the process has one thread, asked once a batch: 0 not yet,
/// 1 yes, 2 no.
static ALONE: AtomicU8 = AtomicU8::new(0);

/// Start a batch (caller holds the rewrite lock).
pub fn begin() {
    ACTIVE.store(true, Ordering::Relaxed);
    ALONE.store(0, Ordering::Relaxed);
}

/// Is a batch running?
pub fn active() -> bool {
    ACTIVE.load(Ordering::Relaxed)
}

/// Make the pages `[lo, hi)` read-write-execute for the rest of the batch
/// with one `mprotect` (the pages of a file's remembered sites: one call
/// for the lot instead of two per page); false if it refused (then
/// [`open`] tries page by page). A range opened before (another file's)
/// is made read-execute again first.
pub fn open_range(lo: usize, hi: usize) -> bool {
    close_range();
    let rwx = (libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC) as u64;
    if lo >= hi || raw::syscall(libc::SYS_mprotect, &[lo as u64, (hi - lo) as u64, rwx]) != 0 {
        return false;
    }
    LO.store(lo, Ordering::Relaxed);
    HI.store(hi, Ordering::Relaxed);
    true
}

/// Make `page` read-write-execute for the rest of the batch, unless it
/// already is; false if `mprotect` refused.
pub fn open(page: usize) -> bool {
    if LO.load(Ordering::Relaxed) <= page && page < HI.load(Ordering::Relaxed) {
        return true;
    }
    let n = COUNT.load(Ordering::Relaxed);
    if OPEN[..n].iter().any(|p| p.load(Ordering::Relaxed) == page) {
        return true;
    }
    if n == MAX_OPEN {
        close_all();
    }
    let rwx = (libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC) as u64;
    if raw::syscall(libc::SYS_mprotect, &[page as u64, PAGE as u64, rwx]) != 0 {
        return false;
    }
    let n = COUNT.load(Ordering::Relaxed);
    OPEN[n].store(page, Ordering::Relaxed);
    COUNT.store(n + 1, Ordering::Relaxed);
    true
}

/// One thread in the process? Asked once per batch (`single_threaded`).
pub fn alone(ask: impl FnOnce() -> bool) -> bool {
    match ALONE.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => {
            let yes = ask();
            ALONE.store(if yes { 1 } else { 2 }, Ordering::Relaxed);
            yes
        }
    }
}

/// Every page opened back to read-execute.
fn close_all() {
    let rx = (libc::PROT_READ | libc::PROT_EXEC) as u64;
    let n = COUNT.swap(0, Ordering::Relaxed);
    for p in &OPEN[..n] {
        raw::syscall(
            libc::SYS_mprotect,
            &[p.load(Ordering::Relaxed) as u64, PAGE as u64, rx],
        );
    }
    close_range();
}

/// The range of [`open_range`] back to read-execute.
fn close_range() {
    let rx = (libc::PROT_READ | libc::PROT_EXEC) as u64;
    let (lo, hi) = (LO.swap(0, Ordering::Relaxed), HI.swap(0, Ordering::Relaxed));
    if lo < hi {
        raw::syscall(libc::SYS_mprotect, &[lo as u64, (hi - lo) as u64, rx]);
    }
}

/// End the batch: its pages read-execute again.
pub fn end() {
    close_all();
    ACTIVE.store(false, Ordering::Relaxed);
}
