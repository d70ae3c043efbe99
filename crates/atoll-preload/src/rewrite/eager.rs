//! Remembered sites rewritten before they trap: at the constructor, for
//! every file mapped then (the program, libc, ld.so, the libraries it
//! links), and for a file mapped later (`dlopen`) at its first trap that
//! leads to a rewrite. Each file's sites come from the instance's table
//! (`remember`) and are rewritten in one batch (`batch`: a page made
//! writable once, however many sites it holds).
//!
//! An entry only says where to look: the bytes there must hash to what
//! the table remembers and then pass every rule the lazy path checks
//! (`candidate` or `short_candidate` finds the same `mov` or `xor`, the
//! mapping is private file-backed read-execute text, a `mov` across cache
//! lines only while the process has one thread), or the site is left
//! alone, to trap and be rewritten lazily if the rules allow.
//!
//! What still traps: the dynamic loader's own calls before the constructor
//! run before SUD is armed, so they never trap at all; a site seen by no
//! earlier image of the instance traps once (and is remembered); calls
//! that keep trapping by rule (`keeps_trapping`), and
//! sites whose number is not a constant next to them.

use core::cell::UnsafeCell;

use super::remember::{self, Kind, Site, Table};
use super::{
    batch, candidate, entry, is_text, keeps_trapping, maps, reg_candidate, short_candidate, Lock,
    ShortKind,
};
use crate::sigsys;

/// Most text mappings rewritten at start (a `cc1` maps five).
const MAX_FILES: usize = 48;
/// Most remembered sites of one file rewritten.
const MAX_SITES: usize = 256;
const PAGE: usize = 4096;

/// A text mapping and its file's key in the table.
#[derive(Clone, Copy)]
pub struct File {
    pub map: maps::Mapping,
    pub key: u64,
}

/// Text mappings whose remembered sites were rewritten: not looked at
/// again at a trap in this process (nor in its fork children), but again
/// before a fork when the table changed (`before_fork`).
struct Done {
    files: [Option<File>; 64],
    count: usize,
    /// The table's generation when it was last read.
    seen: Option<u64>,
}

struct DoneCell(UnsafeCell<Done>);
// SAFETY: every access goes through `done_files`, whose callers hold the
// process-wide rewrite lock (`Lock`).
unsafe impl Sync for DoneCell {}

static DONE: DoneCell = DoneCell(UnsafeCell::new(Done {
    files: [None; 64],
    count: 0,
    seen: None,
}));

/// The done list; the caller holds the rewrite lock.
#[allow(clippy::mut_from_ref)]
fn done_files(_lock: &Lock) -> &mut Done {
    // SAFETY: the lock is held (the argument says so) for as long as the
    // reference lives, and it is the list's only guard.
    unsafe { &mut *DONE.0.get() }
}

fn done(d: &Done, at: usize) -> bool {
    d.files[..d.count]
        .iter()
        .flatten()
        .any(|f| f.map.start <= at && at < f.map.end)
}

fn mark_done(d: &mut Done, f: &File) {
    if d.count < d.files.len() {
        d.files[d.count] = Some(*f);
        d.count += 1;
    }
}

/// The table's key for the file of text mapping `m`, whose path in
/// `/proc/self/maps` is `path`: `stat` of the path, which must be the
/// mapped inode (not a file renamed over it since, nor a deleted one).
pub fn key_of(m: &maps::Mapping, path: &[u8]) -> Option<u64> {
    if !is_text(m) || path.first() != Some(&b'/') || path.len() >= 512 {
        return None;
    }
    let mut p = [0u8; 512];
    p[..path.len()].copy_from_slice(path);
    // SAFETY: `stat` is plain data; the kernel fills it in.
    let mut st: libc::stat = unsafe { core::mem::zeroed() };
    let r = crate::raw::syscall(
        libc::SYS_newfstatat,
        &[
            libc::AT_FDCWD as u64,
            p.as_ptr() as u64,
            &mut st as *mut libc::stat as u64,
            0,
        ],
    );
    (r == 0 && st.st_ino == m.inode && st.st_dev == m.dev).then(|| {
        remember::file_key(
            st.st_dev,
            st.st_ino,
            st.st_size,
            st.st_mtime,
            st.st_mtime_nsec,
        )
    })
}

/// The text mapping holding `at`, with its file's key.
pub fn file_of(at: usize) -> Option<File> {
    let mut found = None;
    maps::each_line(|m, path| {
        if m.start <= at && at < m.end {
            found = key_of(m, path).map(|key| File { map: *m, key });
        }
        m.end <= at
    });
    found
}

/// At the constructor: rewrite the remembered sites of every file mapped
/// now. The process may already have threads (a library's constructor
/// may have started one), so the rules are the lazy path's.
pub fn at_start() {
    if !remember::enabled() {
        return;
    }
    let Some(table) = Table::for_reading() else {
        return;
    };
    let seen = table.generation();
    let mut files = [None::<File>; MAX_FILES];
    let mut n = 0;
    maps::each_line(|m, path| {
        if let Some(key) = key_of(m, path) {
            files[n] = Some(File { map: *m, key });
            n += 1;
        }
        n < MAX_FILES
    });
    let lock = Lock::take();
    let d = done_files(&lock);
    d.seen = seen;
    batch::begin();
    for f in files[..n].iter().flatten() {
        mark_done(d, f);
        rewrite_file(&table, f);
    }
    batch::end();
}

/// Before a fork (the parent, any thread): if the table changed since this
/// process read it, rewrite the sites remembered since in its files, so
/// that the children find them rewritten. A site that only children run
/// (between `fork` and `execve`: `posix_spawn`'s child resetting its ids,
/// `make`'s children) is rewritten by the first child, which dies with it,
/// and remembered; without this every later child of the same parent would
/// trap there again. An `open`, a `pread` and a `close` when nothing
/// changed.
pub fn before_fork() {
    if !super::enabled() || !remember::enabled() {
        return;
    }
    let Some(now) = remember::generation() else {
        return;
    };
    let lock = Lock::take();
    let d = done_files(&lock);
    if d.seen == Some(now) || d.count == 0 {
        return;
    }
    d.seen = Some(now);
    let Some(table) = Table::for_reading() else {
        return;
    };
    // Where those files are mapped now: a library may have been unloaded
    // since (its range unmapped, or another file's), and rewrites split
    // mappings into pieces. Each text mapping of the same device and
    // inode at the same placement is one.
    let mut now = [None::<File>; MAX_FILES];
    let mut n = 0;
    maps::each_line(|m, _| {
        let same = |f: &&File| {
            f.map.inode == m.inode
                && f.map.dev == m.dev
                && m.start.wrapping_sub(f.map.start) as u64 == m.offset.wrapping_sub(f.map.offset)
        };
        if is_text(m) {
            if let Some(f) = d.files[..d.count].iter().flatten().find(same) {
                now[n] = Some(File {
                    map: *m,
                    key: f.key,
                });
                n += 1;
            }
        }
        n < MAX_FILES
    });
    batch::begin();
    for f in now[..n].iter().flatten() {
        rewrite_file(&table, f);
    }
    batch::end();
}

/// At a trap about to be rewritten lazily (rewrite lock held): if its
/// file's mapping was not looked at yet (mapped after the constructor),
/// rewrite that file's remembered sites first.
pub fn at_trap(file: &File, lock: &Lock) {
    let d = done_files(lock);
    if done(d, file.map.start) {
        return;
    }
    mark_done(d, file);
    let Some(table) = Table::for_reading() else {
        return;
    };
    batch::begin();
    rewrite_file(&table, file);
    batch::end();
}

/// Remember a site just rewritten lazily: its `mov` or `xor` at `start`,
/// its `syscall` ending at `resume`, `code` the hash of those bytes before.
pub fn record(file: &File, start: usize, resume: usize, nr: u32, kind: Kind, code: u64) {
    let m = &file.map;
    if start < m.start || resume > m.end || resume - start >= 64 {
        return;
    }
    remember::record(&Site {
        file: file.key,
        end: m.offset + (resume - m.start) as u64,
        nr,
        len: (resume - start) as u8,
        kind,
        code,
    });
}

/// Hash of the bytes `[start, resume)` of mapped text.
pub fn code_at(start: usize, resume: usize) -> u64 {
    // SAFETY: callers pass a site inside a mapped, readable text mapping
    // (checked against its bounds), at most 63 bytes long.
    let bytes = unsafe { core::slice::from_raw_parts(start as *const u8, resume - start) };
    remember::code_hash(bytes)
}

/// Rewrite the remembered sites of `file` whose bytes still match (caller
/// holds the rewrite lock, in a batch).
fn rewrite_file(table: &Table, file: &File) {
    let mut sites = [Site::EMPTY; MAX_SITES];
    let n = table.sites_of(file.key, &mut sites);
    if n == 0 || !entry::ready() {
        return;
    }
    let m = &file.map;
    // The sites whose bytes match, with their ends, and the pages they
    // span, made writable at once.
    let mut ends = [0usize; MAX_SITES];
    let (mut lo, mut hi) = (usize::MAX, 0);
    for (s, end) in sites[..n].iter().zip(ends.iter_mut()) {
        if let Some(resume) = matching(s, m) {
            *end = resume;
            lo = lo.min((resume - s.len as usize) & !(PAGE - 1));
            hi = hi.max((resume - 1) | (PAGE - 1));
        }
    }
    if hi == 0 {
        return;
    }
    batch::open_range(lo, hi + 1);
    for (s, &resume) in sites[..n].iter().zip(&ends).filter(|(_, &e)| e != 0) {
        let start = resume - s.len as usize;
        let done = match s.kind {
            Kind::Mov => candidate(resume, s.nr)
                .filter(|c| c.mov == start)
                .map(|c| super::rewrite_in(&c, resume, s.nr, m)),
            Kind::Xor => short_candidate(resume, s.nr)
                .filter(|_| start + 4 == resume)
                .map(|pad| super::rewrite_short_in(resume, pad, s.nr, ShortKind::Xor, m)),
            // The register's value was checked at the trap that found it;
            // the bytes, by their hash, are the same.
            Kind::Reg => reg_candidate(resume, |_| true)
                .filter(|_| start + 4 == resume)
                .map(|pad| super::rewrite_short_in(resume, pad, s.nr, ShortKind::Reg, m)),
        };
        if let Some(Ok(())) = done {
            crate::stats::count_remembered();
            sigsys::debug(
                &[b"rewrote remembered site of"],
                &[s.nr as i64, resume as i64],
            );
        }
    }
}

/// Where the `syscall` of remembered site `s` ends in mapping `m`, if the
/// site lies in it, its number may be rewritten, and its bytes hash to
/// what the table remembers.
fn matching(s: &Site, m: &maps::Mapping) -> Option<usize> {
    if keeps_trapping(s.nr as i64) || s.len < 4 {
        return None;
    }
    let rel = s.end.checked_sub(m.offset)?;
    if rel > (m.end - m.start) as u64 {
        return None;
    }
    let resume = m.start + rel as usize;
    let start = resume.checked_sub(s.len as usize)?;
    (start >= m.start && code_at(start, resume) == s.code).then_some(resume)
}
