//! Descriptor paths and the cwd published for other processes of the
//! instance, so that `ls -l /proc/PID/fd`, `lsof -p PID`, `pwdx PID` and
//! `readlink /proc/PID/fd/N` run by one of them show the atoll path, not
//! the placeholder memfd or the removed directory the kernel holds.
//!
//! Each process keeps a table in a memfd of its own (`atoll-fds`, one of
//! atoll's private descriptors): one slot of [`SLOT`] bytes per
//! descriptor number below [`SLOTS`], `{seq: u32, len: u32, ino: u64,
//! path}` (the inode lets a reader find the file's current path,
//! `fdname`), written when `fdtable::install` gives the number an atoll description
//! and cleared when `fdtable::remove` takes it away. `seq` is odd while a
//! slot is written (a seqlock: the reader retries, then gives up). The
//! stores are plain memory writes through a shared mapping (a `chdir`
//! costs a copy of the path, no system call). The memfd is made as each
//! image starts (`publish_at_start`), holding only the list of atoll's own
//! descriptors, which a listing by another process leaves out, written
//! with `pwrite`; it is sized and mapped when the process first publishes
//! a descriptor or an atoll cwd. Most images never do (a shell's `true`,
//! a compiler reading host files), and a 2 MiB shared mapping, its page
//! fault and its unmapping at exit cost about as much as the memfd itself.
//!
//! A reader (`proclink`) opens the target's table through
//! `/proc/PID/fd/K` (Linux lets a process open another's descriptors when
//! it may read its `/proc` entries), and reads slot N only when the
//! kernel says fd N is a placeholder.
//!
//! `fork`: the child inherits the memfd (the same table, not a copy), and
//! right after the clone the table says exactly what the child holds. So
//! parent and child both keep it, marked *shared*, and whichever of them
//! changes a descriptor or its cwd first makes a table of its own, filled
//! with what it holds, and lets the shared one go (`own_table`): a child
//! that never changes anything keeps showing the parent's descriptors as
//! of the fork, as Linux shows them, and no fork pays for a copy (the
//! parent's first change after a fork does). The table lock (held across
//! the clone by `forkgate`) keeps the parent's other threads from writing
//! into the shared table after the clone, and from writing into a
//! mapping being let go. `execve` closes the table and the new image
//! makes one again as it restores its cwd and the descriptors it
//! inherited.

use core::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicUsize, Ordering};

use atoll_proto::InodeId;

use crate::sys::{self, SpinLock};

/// The memfd's name, as `/proc/PID/fd/K` shows it.
pub const NAME: &str = "atoll-fds";
/// `{seq: u32, count: u32, fds: [i32; PRIVATE_MAX]}`: atoll's own
/// descriptors, which a listing of `/proc/PID/fd` by another process of
/// the instance leaves out (`procfd`).
const PRIVATE_AT: usize = 0;
pub(crate) const PRIVATE_MAX: usize = 8;
/// Then the atoll cwd: `{seq: u32, len: u32, ino: u64, path}` (empty:
/// the cwd is on the host), for `/proc/PID/cwd` (`proclink`), whose reader
/// asks the directory's server by `ino` whether it was removed.
const CWD_AT: usize = 4096;
const CWD_MAX: usize = sys::PATH_MAX;
/// Then one slot of [`SLOT`] bytes per descriptor number, `{seq, len,
/// path}`, for as many numbers as the table has room for: it starts with
/// [`FIRST_SLOTS`] and doubles (the memfd grows, the mapping moves) when
/// a higher number is published, up to every number an atoll descriptor
/// can have (`fdtable::MAX_FDS`). A reader finds a number past the end
/// unpublished.
const SLOTS_AT: usize = (CWD_AT + HEADER + INO + CWD_MAX).next_multiple_of(4096);
pub const SLOT: usize = 512;
const FIRST_SLOTS: usize = 4096;
pub const SLOTS: usize = crate::fdtable::MAX_FDS;
const HEADER: usize = 8;
/// A slot's payload: the inode id, then the path.
const INO: usize = 8;
/// A slot's length when its path does not fit it (rare): the payload is
/// then in the descriptor's own long record of [`LONG_SLOT`] bytes, past
/// the room for every slot ([`long_at`]). The memfd is sparse, so only
/// the records written take memory; they are written with `pwrite`
/// rather than mapped, so the mapping stays the size of the slots.
const IN_LONG: u32 = u32::MAX;
const LONG_SLOT: usize = HEADER + INO + sys::PATH_MAX;

/// Where descriptor `n`'s long record lies.
const fn long_at(n: usize) -> usize {
    table_bytes(SLOTS) + n * LONG_SLOT
}

/// Bytes of a table with room for `slots` descriptor numbers.
const fn table_bytes(slots: usize) -> usize {
    SLOTS_AT + slots * SLOT
}

/// The table's descriptor (-1: none yet) and mapping.
static FD: AtomicI32 = AtomicI32::new(-1);
static MAP: AtomicPtr<u8> = AtomicPtr::new(core::ptr::null_mut());
/// [`NONE`], [`FILE_ONLY`] or [`MAPPED`].
static STATE: AtomicU32 = AtomicU32::new(NONE);
/// No table yet.
const NONE: u32 = 0;
/// The memfd holds the list of atoll's own descriptors only (written with
/// `pwrite`, `FD` set, `MAP` null, `CAPACITY` 0): a reader finds every
/// slot and the cwd past its end, unpublished.
const FILE_ONLY: u32 = 1;
/// Sized and mapped (or failed for good: `MAP` null).
const MAPPED: u32 = 2;
/// Descriptor numbers the table has room for (its size: `table_bytes`).
static CAPACITY: AtomicUsize = AtomicUsize::new(0);
/// The memfd's size: the slots' room, and past it any long records
/// written (touched only under the lock).
static FILE_BYTES: AtomicUsize = AtomicUsize::new(0);
/// The table is also another process's (a fork since our last change):
/// the next write makes our own first.
static SHARED: AtomicBool = AtomicBool::new(false);
/// The lock every writer of the table holds, and `forkgate` across the
/// clone (it lives with the gate's other locks: `forkgate::LOCKS`).
pub fn fork_lock() -> &'static SpinLock {
    &crate::forkgate::LOCKS.fdpub
}

/// The table's descriptor number, if there is one (a private descriptor).
pub fn fd() -> i32 {
    FD.load(Ordering::Relaxed)
}

/// The program wants the table's number: move the table away.
pub fn relocate(from: i32) {
    let _held = fork_lock().lock();
    if from >= 0 && FD.load(Ordering::Relaxed) == from {
        FD.store(crate::session::away_from(from), Ordering::Relaxed);
    }
    // An image whose list its environment gave (`publish_at_start`): the
    // list no longer matches it, so it is published from now on.
    make_file_only();
    let p = MAP.load(Ordering::Acquire);
    if !p.is_null() {
        publish_private(p);
    } else if STATE.load(Ordering::Acquire) == FILE_ONLY {
        pwrite_private(FD.load(Ordering::Relaxed), false);
    }
}

/// A new memfd holding a table with room for `slots` numbers, mapped;
/// `None` if Linux refuses.
fn make(slots: usize) -> Option<(i32, *mut u8)> {
    if !fits_file_limit(table_bytes(slots)) {
        return None;
    }
    let fd = rustix::fs::memfd_create(NAME, rustix::fs::MemfdFlags::CLOEXEC).ok()?;
    rustix::fs::ftruncate(&fd, table_bytes(slots) as u64).ok()?;
    let raw = crate::session::to_high_or_close(std::os::fd::IntoRawFd::into_raw_fd(fd))?;
    let Some(p) = map(raw, table_bytes(slots)) else {
        sys::close(raw);
        return None;
    };
    Some((raw, p))
}

/// A shared mapping of the first `bytes` of our table `fd`.
fn map(fd: i32, bytes: usize) -> Option<*mut u8> {
    // SAFETY: a fresh shared mapping of our own memfd, never unmapped
    // while `MAP` points at it (`own_table` swaps it first).
    let p = unsafe {
        sys::syscall6(
            libc::SYS_mmap,
            [
                0,
                bytes as u64,
                (libc::PROT_READ | libc::PROT_WRITE) as u64,
                libc::MAP_SHARED as u64,
                fd as u64,
                0,
            ],
        )
    };
    (p >= 0).then_some(p as *mut u8)
}

/// Size and map the table made by `publish_at_start` (the caller holds
/// the lock), with room for `want` numbers, and fill it; its list of
/// atoll's own descriptors, already in the file, stays.
fn map_file(want: usize) {
    let fd = FD.load(Ordering::Relaxed);
    let slots = within_file_limit(want);
    if extend_file(fd, table_bytes(slots)) {
        if let Some(p) = map(fd, table_bytes(slots)) {
            CAPACITY.store(slots, Ordering::Relaxed);
            MAP.store(p, Ordering::Release);
            fill(p);
        }
    }
    STATE.store(MAPPED, Ordering::Release);
}

/// Run `write` on the table (made on first use; made anew, our own,
/// when it is still shared with a forked process; grown to hold slot
/// `slot`), holding the table lock. Nothing runs when Linux refused us a
/// table, or room for `slot`.
fn with_table(slot: Option<usize>, write: impl FnOnce(*mut u8)) {
    // At every install and removal of a descriptor: without the signal
    // mask inside a call (`SpinLock::lock_in_call`), which saves four
    // system calls per `open` + `close`.
    let _held = fork_lock().lock_in_call();
    let need = slot.map_or(0, |n| n + 1);
    let want = slot.map_or(FIRST_SLOTS, |n| room_for(n + 1));
    let state = STATE.load(Ordering::Acquire);
    if state == NONE {
        let slots = within_file_limit(want.max(FIRST_SLOTS));
        if let Some((fd, p)) = (slots >= need).then(|| make(slots)).flatten() {
            FD.store(fd, Ordering::Relaxed);
            CAPACITY.store(slots, Ordering::Relaxed);
            FILE_BYTES.store(table_bytes(slots), Ordering::Relaxed);
            MAP.store(p, Ordering::Release);
            fill(p);
        }
        STATE.store(MAPPED, Ordering::Release);
    } else if SHARED.swap(false, Ordering::AcqRel) {
        own_table(want);
    } else if state == FILE_ONLY {
        map_file(want.max(FIRST_SLOTS));
    }
    if CAPACITY.load(Ordering::Relaxed) < need && !grow(want) {
        return;
    }
    let p = MAP.load(Ordering::Acquire);
    if !p.is_null() {
        write(p);
    }
}

/// Whether a table of `bytes` stays within the file-size limit
/// (`RLIMIT_FSIZE`), which Linux applies to a memfd too: growing one past
/// it raises `SIGXFSZ`, which would kill a program under `ulimit -f`
/// that never wrote a file.
fn fits_file_limit(bytes: usize) -> bool {
    crate::fsize::limit().is_none_or(|lim| bytes as u64 <= lim)
}

/// `slots`, halved until a table of that many fits the file-size limit
/// (a smaller table under a small `ulimit -f`: descriptors past it are
/// not published, and others see their placeholders).
fn within_file_limit(mut slots: usize) -> usize {
    while slots > 1 && !fits_file_limit(table_bytes(slots)) {
        slots /= 2;
    }
    slots
}

/// Slots for a table that must hold `n` numbers: a power of two.
fn room_for(n: usize) -> usize {
    n.next_power_of_two().clamp(FIRST_SLOTS, SLOTS)
}

/// Give the table room for `slots` numbers (the caller holds the lock):
/// the memfd grows and our mapping moves; readers of other processes read
/// through their own descriptors and see the new end at once.
fn grow(slots: usize) -> bool {
    let (p, fd) = (MAP.load(Ordering::Acquire), FD.load(Ordering::Relaxed));
    if p.is_null() || fd < 0 {
        return false;
    }
    let old = table_bytes(CAPACITY.load(Ordering::Relaxed));
    let new = table_bytes(slots);
    if !extend_file(fd, new) {
        return false;
    }
    // SAFETY: our own mapping of the table, `old` bytes long; every writer
    // holds the lock we hold, so nothing uses the old address meanwhile.
    let moved = unsafe {
        sys::syscall6(
            libc::SYS_mremap,
            [
                p as u64,
                old as u64,
                new as u64,
                libc::MREMAP_MAYMOVE as u64,
                0,
                0,
            ],
        )
    };
    if moved < 0 {
        return false;
    }
    MAP.store(moved as *mut u8, Ordering::Release);
    CAPACITY.store(slots, Ordering::Relaxed);
    true
}

/// Make the memfd `fd` at least `bytes` long (never shorter: long
/// records lie past the slots). The caller holds the lock.
fn extend_file(fd: i32, bytes: usize) -> bool {
    if FILE_BYTES.load(Ordering::Relaxed) >= bytes {
        return true;
    }
    if !fits_file_limit(bytes) {
        return false;
    }
    // SAFETY: ftruncate of our own memfd takes no pointer.
    if unsafe { sys::sc(libc::SYS_ftruncate, fd as u64, bytes as u64, 0, 0) } < 0 {
        return false;
    }
    FILE_BYTES.store(bytes, Ordering::Relaxed);
    true
}

/// Replace the table shared with a forked process by one of our own with
/// room for `want` numbers, filled with what we hold (the caller holds
/// the lock). If Linux refuses a new one, the shared one stays ours too:
/// the other process then sees our changes, never a fault.
fn own_table(want: usize) {
    let slots = want.max(CAPACITY.load(Ordering::Relaxed));
    let Some((fd, p)) = make(slots) else { return };
    let old_bytes = table_bytes(CAPACITY.load(Ordering::Relaxed));
    CAPACITY.store(slots, Ordering::Relaxed);
    FILE_BYTES.store(table_bytes(slots), Ordering::Relaxed);
    let old = MAP.swap(p, Ordering::AcqRel);
    let old_fd = FD.swap(fd, Ordering::Relaxed);
    STATE.store(MAPPED, Ordering::Release);
    fill(p);
    if !old.is_null() {
        // SAFETY: our mapping of the shared table, no longer reachable
        // through `MAP`; every writer holds the lock we hold, and readers
        // of other processes read through their own descriptors.
        unsafe { sys::sc(libc::SYS_munmap, old as u64, old_bytes as u64, 0, 0) };
    }
    if old_fd >= 0 {
        sys::close(old_fd);
    }
}

/// At the start of an image: make the table now, with the list of
/// atoll's own descriptors, so that another process listing
/// `/proc/PID/fd` leaves them out even if this one never holds an atoll
/// descriptor nor enters the mount. Only the memfd and the list, written
/// with `pwrite` (`FILE_ONLY`); a fork shares it. Already made (the image
/// restored descriptors or a cwd it inherited): the list is published
/// there.
///
/// `named_by_environ`: atoll's own descriptors are exactly those the
/// image's initial environment names (an exec's hand-over: the session
/// socket in `ATOLL_SESSION_FD`, the cache and the control block in
/// `ATOLL_STATE`, each kept at its number). Then no table is made: a
/// reader finds the list in `/proc/PID/environ` (`envfds`), and the image
/// saves the memfd (`prlimit64`, `memfd_create`, a move, `pwrite`, and
/// the inode's teardown at exit), most images never making a table
/// otherwise. The first change of that list ([`relocate`], the template)
/// makes the table.
pub fn publish_at_start(named_by_environ: bool) {
    if STATE.load(Ordering::Acquire) != NONE {
        with_table(None, publish_private);
        return;
    }
    if named_by_environ {
        return;
    }
    // Once per image, from the constructor (the lock still keeps a
    // table made meanwhile from being made twice). Taken without blocking
    // signals, as `fork_lock().lock()` would (two system calls per start): no
    // handler that could take it runs yet, the image's program having
    // installed none (`execve` reset them) and atoll's own SIGSYS
    // handler coming after the client's start.
    fork_lock().acquire_raw();
    make_file_only();
    fork_lock().release_raw();
}

/// Make the table holding only the list of atoll's own descriptors
/// (`FILE_ONLY`), unless there is one. Under `fork_lock()`.
fn make_file_only() {
    if STATE.load(Ordering::Acquire) != NONE {
        return;
    }
    let private = 8 + 4 * PRIVATE_MAX;
    let mut state = MAPPED; // refused: none, for good
    if fits_file_limit(private) {
        let made = rustix::fs::memfd_create(NAME, rustix::fs::MemfdFlags::CLOEXEC)
            .ok()
            .and_then(|fd| {
                crate::session::to_high_or_close(std::os::fd::IntoRawFd::into_raw_fd(fd))
            });
        if let Some(raw) = made {
            FD.store(raw, Ordering::Relaxed);
            FILE_BYTES.store(private, Ordering::Relaxed);
            state = FILE_ONLY;
            pwrite_private(raw, true);
        }
    }
    STATE.store(state, Ordering::Release);
}

/// Another process's own descriptors: from its table, or, when it has
/// none, from its initial environment (`publish_at_start`). `None`: not
/// a process of an instance that says which.
pub fn private_of(pid: u32) -> Option<Vec<i32>> {
    match open_table(pid) {
        Some(t) => {
            let list = read_private(t);
            sys::close(t);
            list
        }
        None => crate::envfds::private_of(pid),
    }
}

/// Publish the list of atoll's own descriptors again: one was made
/// after the image started (`Client::template`).
pub fn publish_private_fds() {
    {
        let _held = fork_lock().lock_in_call();
        let fd = FD.load(Ordering::Relaxed);
        if STATE.load(Ordering::Acquire) == FILE_ONLY && !SHARED.load(Ordering::Acquire) {
            pwrite_private(fd, false);
            return;
        }
    }
    with_table(None, publish_private);
}

/// After a `fork` (in the parent and in the child, with the fork gate
/// still held): the table is now both processes'.
fn mark_shared() {
    if FD.load(Ordering::Relaxed) >= 0 {
        SHARED.store(true, Ordering::Release);
    }
}

/// In the parent after a successful `fork`.
pub fn after_fork_parent() {
    mark_shared();
}

/// Write the list of atoll's own descriptors (`Client::private_fds`)
/// (its own record at the table's start). Done at every `publish` and relocation, so it is
/// fresh whenever a descriptor changes.
fn publish_private(base: *mut u8) {
    let Some(c) = crate::session::client() else {
        return;
    };
    let fds = c.private_fds();
    // SAFETY: the list lies inside the mapping (PRIVATE_AT + 8 + 4 *
    // PRIVATE_MAX < CWD_AT, inside every table), 4-aligned.
    unsafe {
        let at = base.add(PRIVATE_AT);
        let seq = &*(at as *const AtomicU32);
        let s = seq.load(Ordering::Relaxed);
        if fds.len() <= PRIVATE_MAX {
            let count = &*(at.add(4) as *const AtomicU32);
            // Unchanged (the common case): no store at all.
            let same = count.load(Ordering::Relaxed) as usize == fds.len()
                && fds.iter().enumerate().all(|(i, &f)| {
                    (*(at.add(8 + 4 * i) as *const AtomicU32)).load(Ordering::Relaxed) == f as u32
                });
            if same {
                return;
            }
            seq.store(s | 1, Ordering::Release);
            core::sync::atomic::fence(Ordering::Release);
            for (i, &f) in fds.iter().enumerate() {
                (*(at.add(8 + 4 * i) as *const AtomicU32)).store(f as u32, Ordering::Relaxed);
            }
            count.store(fds.len() as u32, Ordering::Relaxed);
            seq.store((s | 1).wrapping_add(1), Ordering::Release);
        }
    }
}

/// Write the list of atoll's own descriptors into a table not mapped
/// (`FILE_ONLY`; the caller holds the lock), under its sequence word as
/// `publish_private` does: odd, then the list, then even again, each its
/// own `pwrite`, so that a reader never takes a half-written list.
/// A new, empty file (`fresh`) takes the even word and the list in one
/// `pwrite`: a reader finds it empty until the whole record is there.
fn pwrite_private(fd: i32, fresh: bool) {
    let Some(c) = crate::session::client() else {
        return;
    };
    let fds = c.private_fds();
    if fd < 0 || fds.len() > PRIVATE_MAX {
        return;
    }
    let at = PRIVATE_AT as u64;
    let mut rec = [0u8; 8 + 4 * PRIVATE_MAX];
    rec[4..8].copy_from_slice(&(fds.len() as u32).to_le_bytes());
    for (i, &f) in fds.iter().enumerate() {
        rec[8 + 4 * i..12 + 4 * i].copy_from_slice(&f.to_le_bytes());
    }
    if fresh {
        // A fresh memfd is empty until one `pwrite` lands whole (its size
        // is set once the bytes are copied): a reader finds no list or all
        // of it, so the record goes at once with an even `seq`.
        rec[..4].copy_from_slice(&2u32.to_le_bytes());
        pwrite(fd, &rec, at);
        return;
    }
    let mut seq = [0u8; 4];
    if sys::pread(fd, &mut seq, at) != 4 {
        return;
    }
    let odd = u32::from_le_bytes(seq) | 1;
    rec[..4].copy_from_slice(&odd.to_le_bytes());
    if pwrite(fd, &rec[..4], at) && pwrite(fd, &rec[4..], at + 4) {
        pwrite(fd, &odd.wrapping_add(1).to_le_bytes(), at);
    }
}

/// Write `bytes` into the record at `at` (`{seq, len, bytes}`) under its
/// sequence word.
///
/// # Safety
/// `base + at` is a 4-aligned record inside the mapping with room for
/// `bytes`.
unsafe fn write_record(base: *mut u8, at: usize, bytes: &[u8]) {
    // SAFETY: per the contract.
    unsafe {
        let rec = base.add(at);
        let seq = &*(rec as *const AtomicU32);
        let len = &*(rec.add(4) as *const AtomicU32);
        let s = seq.load(Ordering::Relaxed);
        seq.store(s | 1, Ordering::Release);
        core::sync::atomic::fence(Ordering::Release);
        core::ptr::copy_nonoverlapping(bytes.as_ptr(), rec.add(HEADER), bytes.len());
        len.store(bytes.len() as u32, Ordering::Relaxed);
        seq.store((s | 1).wrapping_add(1), Ordering::Release);
    }
}

/// The process's atoll cwd is now directory `ino` at `path` (`None`: a
/// host directory).
pub fn publish_cwd(cwd: Option<(&[u8], InodeId)>) {
    let cwd = cwd.filter(|(p, _)| p.len() <= CWD_MAX);
    if cwd.is_none() && STATE.load(Ordering::Acquire) != MAPPED {
        return;
    }
    let payload = cwd.map(|(p, ino)| [&ino.0.to_le_bytes()[..], p].concat());
    // SAFETY: the cwd record is inside the mapping with INO + CWD_MAX
    // bytes of room, 4-aligned.
    with_table(None, |base| unsafe {
        write_record(base, CWD_AT, payload.as_deref().unwrap_or(&[]))
    });
}

/// Slot `fd` now names file `ino` by `path` (`None`: no atoll
/// description).
pub fn publish(fd: i32, file: Option<(&[u8], InodeId)>) {
    let Ok(n) = usize::try_from(fd) else { return };
    if n >= SLOTS {
        return;
    }
    let file = file.filter(|(p, _)| p.len() <= sys::PATH_MAX);
    if file.is_none()
        && (STATE.load(Ordering::Acquire) == NONE || n >= CAPACITY.load(Ordering::Relaxed))
    {
        return; // nothing published there yet: nothing to clear
    }
    let payload = file.map(|(p, ino)| [&ino.0.to_le_bytes()[..], p].concat());
    with_table(Some(n), |base| {
        // SAFETY: the table has room for slot `n` (`with_table`), and
        // lives while we hold the lock.
        unsafe { write_slot(base, n, payload.as_deref().unwrap_or(&[])) };
        publish_private(base);
    });
}

/// Write descriptor `n`'s payload (inode id and path): in its slot, or,
/// too long for it, in the descriptor's long record first and then the
/// slot saying so (when Linux refuses the memfd the room, the slot is
/// left empty).
///
/// # Safety
/// `base` is the table's mapping, with room for slot `n` (the caller
/// holds the lock); `payload` fits a long record.
unsafe fn write_slot(base: *mut u8, n: usize, payload: &[u8]) {
    let at = SLOTS_AT + n * SLOT;
    if payload.len() <= SLOT - HEADER {
        // SAFETY: slot `n` lies inside the mapping, 4-aligned (SLOTS_AT
        // and SLOT are multiples of 4), with room for the payload.
        unsafe { write_record(base, at, payload) };
        return;
    }
    let fd = FD.load(Ordering::Relaxed);
    let long = long_at(n);
    if fd < 0 || !extend_file(fd, long + LONG_SLOT) || !pwrite_record(fd, long, payload) {
        // SAFETY: as above; an empty payload.
        unsafe { write_record(base, at, &[]) };
        return;
    }
    // SAFETY: as above; the slot's header words, 4-aligned.
    unsafe {
        let rec = base.add(at);
        let seq = &*(rec as *const AtomicU32);
        let len = &*(rec.add(4) as *const AtomicU32);
        let s = seq.load(Ordering::Relaxed);
        seq.store(s | 1, Ordering::Release);
        core::sync::atomic::fence(Ordering::Release);
        len.store(IN_LONG, Ordering::Relaxed);
        seq.store((s | 1).wrapping_add(1), Ordering::Release);
    }
}

/// Write the record at `at` of the memfd `fd` (`{seq, len, payload}`)
/// under its sequence word, through `pwrite`: the same protocol as
/// `write_record`, for records past the mapping.
fn pwrite_record(fd: i32, at: usize, payload: &[u8]) -> bool {
    let mut seq = [0u8; 4];
    if sys::pread(fd, &mut seq, at as u64) != 4 {
        return false;
    }
    let odd = u32::from_le_bytes(seq) | 1;
    let mut body = (payload.len() as u32).to_le_bytes().to_vec();
    body.extend_from_slice(payload);
    pwrite(fd, &odd.to_le_bytes(), at as u64)
        && pwrite(fd, &body, at as u64 + 4)
        && pwrite(fd, &odd.wrapping_add(1).to_le_bytes(), at as u64)
}

/// `pwrite` of all of `buf`.
fn pwrite(fd: i32, buf: &[u8], off: u64) -> bool {
    // SAFETY: the kernel reads at most `buf.len()` bytes of `buf`.
    let n = unsafe {
        sys::syscall6(
            libc::SYS_pwrite64,
            [fd as u64, buf.as_ptr() as u64, buf.len() as u64, off, 0, 0],
        )
    };
    n == buf.len() as i64
}

/// In a forked child: the inherited mapping and descriptor are the
/// parent's table as of the fork, which is what the child holds. Keep
/// showing it until the child's first change (`own_table`); a fork that
/// execs at once (the common case) makes no table of its own.
pub fn after_fork_child() {
    mark_shared();
}

/// A new table's contents: the descriptors and the cwd the process has
/// now (a forked child's first table).
fn fill(base: *mut u8) {
    for fd in crate::fdtable::fds() {
        let Ok(n) = usize::try_from(fd) else { continue };
        if n >= SLOTS {
            continue;
        }
        if n >= CAPACITY.load(Ordering::Relaxed) {
            continue; // published when it next changes, after a grow
        }
        let Some(d) = crate::fdtable::get(fd as i64) else {
            continue;
        };
        if let Some(p) = d.link_name().filter(|p| p.len() <= sys::PATH_MAX) {
            let payload = [&d.ino().0.to_le_bytes()[..], &p].concat();
            // SAFETY: the table's mapping, with room for slot `n`; a
            // payload that fits a long record.
            unsafe { write_slot(base, n, &payload) };
        }
    }
    if let Some(w) = crate::session::client().and_then(|c| c.cwd()) {
        if w.path.len() <= CWD_MAX {
            let payload = [&w.ino.0.to_le_bytes()[..], &w.path].concat();
            // SAFETY: the cwd record inside the mapping, with room.
            unsafe { write_record(base, CWD_AT, &payload) };
        }
    }
    publish_private(base);
}

/// How far past `PRIVATE_FD_MIN` another process's table is looked for
/// (atoll's private descriptors sit just above it).
const PRIVATE_SPAN: i32 = 64;

/// Another process's table, opened through `/proc/PID/fd` (the caller
/// closes it); `None` when it has none.
pub fn open_table(pid: u32) -> Option<i32> {
    let name = format!("/memfd:{NAME}");
    let min = crate::session::PRIVATE_FD_MIN;
    let table = (min..min + PRIVATE_SPAN).find_map(|k| {
        let p = format!("/proc/{pid}/fd/{k}");
        crate::proclink::kernel_link(p.as_bytes())?
            .starts_with(name.as_bytes())
            .then_some(p)
    })?;
    let z = crate::path::PathBuf::from_bytes(table.as_bytes()).ok()?;
    let fd = sys::open_read(libc::AT_FDCWD as i64, z.as_bytes_with_nul());
    (fd >= 0).then_some(fd as i32)
}

/// Another process's own descriptors, from its table (-1: none).
pub fn read_private(table: i32) -> Option<Vec<i32>> {
    let mut buf = [0u8; 8 + 4 * PRIVATE_MAX];
    for _ in 0..3 {
        if sys::pread(table, &mut buf, PRIVATE_AT as u64) != buf.len() as i64 {
            return None;
        }
        let word = |i: usize| u32::from_le_bytes([buf[i], buf[i + 1], buf[i + 2], buf[i + 3]]);
        let (seq, count) = (word(0), word(4) as usize);
        if seq & 1 == 1 || count > PRIVATE_MAX {
            continue;
        }
        let mut again = [0u8; 4];
        if sys::pread(table, &mut again, PRIVATE_AT as u64) != 4 || again != buf[..4] {
            continue;
        }
        return Some((0..count).map(|i| word(8 + 4 * i) as i32).collect());
    }
    None
}

/// Another process's published file of descriptor `n`: its path and
/// inode, read from its table (a descriptor of `/proc/PID/fd` opened by
/// the caller).
pub fn read_slot(table: i32, n: usize) -> Option<(Vec<u8>, InodeId)> {
    if n >= SLOTS {
        return None;
    }
    let at = SLOTS_AT + n * SLOT;
    for _ in 0..3 {
        let mut head = [0u8; HEADER];
        if sys::pread(table, &mut head, at as u64) != head.len() as i64 {
            return None; // past the table's end: not published
        }
        let len = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
        if len != IN_LONG {
            return split_payload(read_record(table, at, SLOT)?);
        }
        if head[0] & 1 == 1 {
            continue;
        }
        let payload = read_record(table, long_at(n), LONG_SLOT);
        // Does the slot still say so?
        let mut again = [0u8; HEADER];
        if sys::pread(table, &mut again, at as u64) == again.len() as i64 && again == head {
            return split_payload(payload?);
        }
    }
    None
}

/// A slot's payload as `(path, inode)`.
fn split_payload(mut payload: Vec<u8>) -> Option<(Vec<u8>, InodeId)> {
    let ino = InodeId(u64::from_le_bytes(payload.get(..INO)?.try_into().ok()?));
    payload.drain(..INO);
    (!payload.is_empty()).then_some((payload, ino))
}

/// Another process's published atoll cwd: its path and directory.
pub fn read_cwd(table: i32) -> Option<(Vec<u8>, InodeId)> {
    split_payload(read_record(table, CWD_AT, HEADER + INO + CWD_MAX)?)
}

/// The bytes of the record of `room` bytes at `at`, read consistently
/// (the sequence word even and unchanged around the copy); `None` when
/// empty or always changing.
fn read_record(table: i32, at: usize, room: usize) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; room];
    for _ in 0..3 {
        if sys::pread(table, &mut buf, at as u64) != room as i64 {
            return None;
        }
        let seq = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]);
        let len = u32::from_le_bytes([buf[4], buf[5], buf[6], buf[7]]) as usize;
        if seq & 1 == 1 || len > room - HEADER {
            continue;
        }
        // The record may have changed while it was copied: read the
        // sequence again.
        let mut again = [0u8; 4];
        if sys::pread(table, &mut again, at as u64) != 4 || again != buf[..4] {
            continue;
        }
        return (len > 0).then(|| buf[HEADER..HEADER + len].to_vec());
    }
    None
}
