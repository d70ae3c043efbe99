//! The memory system under Cosh's transfers, and the only `unsafe` of the
//! crate: memfd blocks, their seals, shared mappings of them, passing their
//! descriptors over a Unix socket, forking a receiver, the TSC.
//!
//! Everything Cosh §3.3 asks of a *strong* transfer is enforced here by
//! the kernel, not by the library's bookkeeping:
//!
//! * a block is a memfd sealed against shrinking and growing at creation,
//!   so no holder can truncate it under another holder's mapping (which
//!   would turn the other's reads into SIGBUS);
//! * sharing seals it with `F_SEAL_WRITE`: from then on no process can map
//!   it writable (`mmap` gives `EPERM`), turn a mapping writable
//!   (`mprotect` gives `EACCES`) or `write(2)` it (`EPERM`). The kernel
//!   refuses the seal (`EBUSY`) while any shared mapping that may become
//!   writable exists, read-only ones included, which is why a share first
//!   drops every mapping and maps the block afresh afterwards;
//! * a read-only [`Map`] of a sealed block faults (SIGSEGV) when written.
//!
//! Why `F_SEAL_WRITE` and not `F_SEAL_FUTURE_WRITE`: the future-write seal
//! is accepted while writable mappings exist and leaves them writable, so
//! it would only be as good as our unmapping of every one of them — in
//! every process. `F_SEAL_WRITE` is refused unless none exists anywhere,
//! so a receiver that reads it with `F_GET_SEALS` knows that no process
//! can write the block, whatever the sender did; when another process
//! still maps it, the share copies instead.

use std::ffi::c_void;
use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64};
use std::time::Duration;

use rustix::fs::{MemfdFlags, SealFlags};
use rustix::mm::{MapFlags, MprotectFlags, ProtFlags};
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};

/// The page size the blocks are aligned to.
pub fn page_size() -> usize {
    rustix::param::page_size()
}

/// A fresh zero-filled memfd of `len` bytes, sealed against resizing.
pub fn memfd(len: usize) -> std::io::Result<OwnedFd> {
    let fd = rustix::fs::memfd_create(
        "atoll-cosh",
        MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
    )?;
    rustix::fs::ftruncate(&fd, len as u64)?;
    rustix::fs::fcntl_add_seals(&fd, SealFlags::SHRINK | SealFlags::GROW)?;
    Ok(fd)
}

/// Seal `fd` read-only for every holder, for ever (Cosh §3.2 invariant 2:
/// once shared, read-only everywhere until freed). `EBUSY` while any
/// process still has a shared mapping of it.
pub fn seal_write(fd: BorrowedFd<'_>) -> std::io::Result<()> {
    Ok(rustix::fs::fcntl_add_seals(fd, SealFlags::WRITE)?)
}

/// The seals a received descriptor carries: `(write-sealed,
/// size-sealed)`.
pub fn seals(fd: BorrowedFd<'_>) -> std::io::Result<(bool, bool)> {
    let s = rustix::fs::fcntl_get_seals(fd)?;
    Ok((
        s.contains(SealFlags::WRITE),
        s.contains(SealFlags::SHRINK | SealFlags::GROW),
    ))
}

/// The size of the file behind `fd`.
pub fn file_len(fd: BorrowedFd<'_>) -> std::io::Result<u64> {
    Ok(rustix::fs::fstat(fd)?.st_size as u64)
}

/// Give the pages of a block back and make it read as zeros, before the
/// block manager hands it out again (Cosh §3.3: fresh buffers cannot be
/// observed by anyone).
pub fn punch(fd: BorrowedFd<'_>, len: usize) -> std::io::Result<()> {
    use rustix::fs::FallocateFlags;
    Ok(rustix::fs::fallocate(
        fd,
        FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE,
        0,
        len as u64,
    )?)
}

/// Give back the pages of `len` bytes at `off` of a memfd: they read as
/// zeros afterwards and cost no memory until written again.
pub fn punch_range(fd: BorrowedFd<'_>, off: u64, len: u64) -> std::io::Result<()> {
    use rustix::fs::FallocateFlags;
    Ok(rustix::fs::fallocate(
        fd,
        FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE,
        off,
        len,
    )?)
}

/// A shared mapping of a whole block into this process, read-only or
/// read/write; unmapped on drop.
#[derive(Debug)]
pub struct Map {
    ptr: NonNull<u8>,
    len: usize,
    writable: bool,
    /// `PROT_NONE`: kept for reuse, not accessible (see [`Map::hide`]).
    hidden: bool,
}

// SAFETY: a `Map` is a plain address range; which thread touches it does
// not matter to the kernel, and the block manager serialises its users.
unsafe impl Send for Map {}

impl Map {
    /// Map `len` bytes of `fd` from offset 0, shared.
    pub fn new(fd: BorrowedFd<'_>, len: usize, writable: bool) -> std::io::Result<Map> {
        Map::new_at(fd, 0, len, writable)
    }

    /// Map `len` bytes of `fd` from the page-aligned `off`, shared (a
    /// block of the shared pool, `crate::pool`).
    pub fn new_at(
        fd: BorrowedFd<'_>,
        off: u64,
        len: usize,
        writable: bool,
    ) -> std::io::Result<Map> {
        Map::new_with(fd, off, len, writable, MapFlags::SHARED)
    }

    /// [`Map::new_at`], read/write, with every page mapped at once
    /// (`MAP_POPULATE`): for a range about to be written whole, one batch
    /// of page-table work instead of a fault per page.
    pub fn new_populated(fd: BorrowedFd<'_>, off: u64, len: usize) -> std::io::Result<Map> {
        Map::new_with(fd, off, len, true, MapFlags::SHARED | MapFlags::POPULATE)
    }

    fn new_with(
        fd: BorrowedFd<'_>,
        off: u64,
        len: usize,
        writable: bool,
        flags: MapFlags,
    ) -> std::io::Result<Map> {
        let prot = if writable {
            ProtFlags::READ | ProtFlags::WRITE
        } else {
            ProtFlags::READ
        };
        // SAFETY: a new mapping at an address the kernel chooses overlaps
        // nothing of ours; `off + len` lies inside the file, whose size its
        // seals keep fixed (the block's length for a block of its own, the
        // pool's bounds checked by `pool` for a pool range), so no access
        // through the mapping can reach past the end of the file (no
        // SIGBUS).
        let p = unsafe { rustix::mm::mmap(std::ptr::null_mut(), len, prot, flags, fd, off)? };
        Ok(Map {
            ptr: NonNull::new(p.cast()).expect("mmap never returns null on success"),
            len,
            writable,
            hidden: false,
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn writable(&self) -> bool {
        self.writable
    }

    /// The bytes `off..off + len`.
    ///
    /// Panics when the range is outside the mapping (callers check chunk
    /// bounds against the block when the chunk is made).
    pub fn bytes(&self, off: usize, len: usize) -> &[u8] {
        assert!(!self.hidden, "read through a hidden mapping");
        assert!(off.checked_add(len).is_some_and(|e| e <= self.len));
        // SAFETY: in bounds (checked above) of a live mapping that lives as
        // long as `self`. Other domains may hold the same pages: a block is
        // either read-only everywhere (shared, sealed) or mapped writable
        // by its one owner, and the owner's writes go through
        // `write`, which needs `&mut self` — except after a *weak* share,
        // where Cosh §3.3 trusts the peer not to write; bytes that change
        // under a `&[u8]` are then the peer's broken promise, not memory
        // unsafety of plain `u8` data.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(off), len) }
    }

    /// Copy `data` to `off`. Panics if out of bounds or read-only.
    pub fn write(&mut self, off: usize, data: &[u8]) {
        assert!(self.writable, "write through a read-only mapping");
        assert!(off.checked_add(data.len()).is_some_and(|e| e <= self.len));
        // SAFETY: in bounds of a live writable mapping; `data` is ours and
        // cannot overlap a block mapping we hand out only through `bytes`
        // borrowed from `&self` (we hold `&mut self`).
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.as_ptr().add(off), data.len())
        }
    }
}

impl Map {
    /// Make the mapping writable or read-only in place (`mprotect`).
    /// Making a mapping of a write-sealed block writable fails (`EACCES`).
    pub fn set_writable(&mut self, writable: bool) -> std::io::Result<()> {
        if writable == self.writable && !self.hidden {
            return Ok(());
        }
        let flags = if writable {
            MprotectFlags::READ | MprotectFlags::WRITE
        } else {
            MprotectFlags::READ
        };
        // SAFETY: the range is exactly one mapping of ours; changing its
        // protection invalidates no reference: slices from `bytes` borrow
        // `self`, which we hold mutably.
        unsafe { rustix::mm::mprotect(self.ptr.as_ptr().cast(), self.len, flags)? };
        self.writable = writable;
        self.hidden = false;
        Ok(())
    }

    /// Take every access away (`PROT_NONE`) but keep the mapping, so the
    /// range can be given back with [`Map::set_writable`] — one `mprotect`
    /// instead of an `munmap` now and an `mmap` plus page faults later.
    /// A hidden mapping faults on any access, as an unmapped range would.
    pub fn hide(&mut self) -> std::io::Result<()> {
        if self.hidden {
            return Ok(());
        }
        // SAFETY: as in `set_writable`; no slice of the range outlives the
        // `&mut self` we hold.
        unsafe {
            rustix::mm::mprotect(self.ptr.as_ptr().cast(), self.len, MprotectFlags::empty())?
        };
        self.writable = false;
        self.hidden = true;
        Ok(())
    }

    pub fn hidden(&self) -> bool {
        self.hidden
    }

    /// `n` atomic words at byte `off` of a writable mapping (the pool's
    /// header, the channel's mailboxes), shared with every process that
    /// maps the same pages.
    pub fn atomics32(&self, off: usize, n: usize) -> &[AtomicU32] {
        self.atomics(off, n)
    }

    pub fn atomics64(&self, off: usize, n: usize) -> &[AtomicU64] {
        self.atomics(off, n)
    }

    fn atomics<T>(&self, off: usize, n: usize) -> &[T] {
        let size = std::mem::size_of::<T>();
        assert!(self.writable && !self.hidden);
        assert!(off.is_multiple_of(size));
        assert!(n
            .checked_mul(size)
            .and_then(|b| b.checked_add(off))
            .is_some_and(|e| e <= self.len));
        // SAFETY: only instantiated with `AtomicU32`/`AtomicU64`, which
        // have the size and alignment of the plain integers and may be
        // accessed from several threads (and processes) at once; the range
        // is in bounds and aligned (the mapping is page-aligned, `off` a
        // multiple of the size), and lives as long as `&self`; every
        // access to these words goes through atomics.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(off).cast::<T>(), n) }
    }

    /// A shared anonymous mapping of `len` bytes, read/write, zeroed,
    /// inherited by `fork` (the polled channel's memory).
    pub fn shared_anon(len: usize) -> std::io::Result<Map> {
        // SAFETY: a new mapping at an address the kernel chooses.
        let p = unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
            )?
        };
        Ok(Map {
            ptr: NonNull::new(p.cast()).expect("mmap never returns null on success"),
            len,
            writable: true,
            hidden: false,
        })
    }

    /// Copy `data` to `off` through a shared reference: for memory whose
    /// writers are ordered by a protocol of atomics (the channel's slots).
    /// Panics if out of bounds or read-only.
    pub fn write_shared(&self, off: usize, data: &[u8]) {
        assert!(self.writable && !self.hidden);
        assert!(off.checked_add(data.len()).is_some_and(|e| e <= self.len));
        // SAFETY: in bounds of a live writable mapping; the caller's
        // protocol gives this process the range alone until it publishes
        // it with a release store (a peer breaking it only garbles plain
        // bytes, which the reader decodes and checks).
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.as_ptr().add(off), data.len())
        }
    }

    /// Zero `off..off + len`. Panics if out of bounds or read-only.
    /// Append `len` bytes at `off` to `out` (a copy, as `bytes`, of
    /// memory another process may write).
    pub fn read_shared(&self, off: usize, len: usize, out: &mut Vec<u8>) {
        out.extend_from_slice(self.bytes(off, len));
    }

    pub fn zero(&mut self, off: usize, len: usize) {
        assert!(self.writable, "zeroing a read-only mapping");
        assert!(off.checked_add(len).is_some_and(|e| e <= self.len));
        // SAFETY: in bounds of a live writable mapping we hold `&mut` to.
        unsafe { std::ptr::write_bytes(self.ptr.as_ptr().add(off), 0, len) }
    }
}

/// A writable shared mapping reached only through atomic words (the
/// pool's header), so it can be shared between threads as well as
/// processes.
#[derive(Debug)]
pub struct Words(Map);

// SAFETY: the only access `&Words` gives is `atomics32`/`atomics64`, and
// atomics may be used from any number of threads at once; the mapping
// itself changes only on drop, which needs ownership.
unsafe impl Sync for Words {}

impl Words {
    /// Map `len` bytes of `fd` from offset 0, read/write.
    pub fn new(fd: BorrowedFd<'_>, len: usize) -> std::io::Result<Words> {
        Ok(Words(Map::new(fd, len, true)?))
    }

    pub fn atomics32(&self, off: usize, n: usize) -> &[AtomicU32] {
        self.0.atomics32(off, n)
    }

    pub fn atomics64(&self, off: usize, n: usize) -> &[AtomicU64] {
        self.0.atomics64(off, n)
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        // SAFETY: the range is exactly one mapping we made and no slice of
        // it outlives `self` (`bytes` borrows `self`).
        let _ = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast::<c_void>(), self.len) };
    }
}

/// Most descriptors one message carries (the kernel's `SCM_MAX_FD` is 253).
pub const MAX_FDS: usize = 250;

/// Send the slices of `data` one after the other with `fds` attached to
/// the first byte (`SCM_RIGHTS`): one `sendmsg` when the socket has room,
/// so the receiver wakes once.
pub fn send_with_fds(
    sock: &UnixStream,
    data: &[&[u8]],
    fds: &[BorrowedFd<'_>],
) -> std::io::Result<()> {
    assert!(fds.len() <= MAX_FDS);
    let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(std::io::Error::other("too many descriptors"));
    }
    let iov: Vec<IoSlice<'_>> = data.iter().map(|d| IoSlice::new(d)).collect();
    let mut n = loop {
        match rustix::net::sendmsg(sock, &iov, &mut control, SendFlags::NOSIGNAL) {
            Err(rustix::io::Errno::INTR) => continue,
            r => break r?,
        }
    };
    for d in data {
        let skip = n.min(d.len());
        n -= skip;
        write_all(sock, &d[skip..])?;
    }
    Ok(())
}

/// Receive exactly `buf.len()` bytes, and the descriptors attached to them.
pub fn recv_with_fds(sock: &UnixStream, buf: &mut [u8]) -> std::io::Result<Vec<OwnedFd>> {
    let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut fds = Vec::new();
    let mut got = 0;
    while got < buf.len() {
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let r = match rustix::net::recvmsg(
            sock,
            &mut [IoSliceMut::new(&mut buf[got..])],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        ) {
            Err(rustix::io::Errno::INTR) => continue,
            r => r?,
        };
        for m in control.drain() {
            if let RecvAncillaryMessage::ScmRights(it) = m {
                fds.extend(it);
            }
        }
        if r.bytes == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        got += r.bytes;
    }
    Ok(fds)
}

/// `write_all` on a shared reference to the socket.
pub fn write_all(sock: &UnixStream, data: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut s: &UnixStream = sock;
    s.write_all(data)
}

/// `read_exact` on a shared reference to the socket.
pub fn read_exact(sock: &UnixStream, buf: &mut [u8]) -> std::io::Result<()> {
    use std::io::Read;
    let mut s: &UnixStream = sock;
    s.read_exact(buf)
}

/// A forked process running one domain, connected by a socket.
#[derive(Debug)]
pub struct Child {
    pub pid: i32,
    pub sock: UnixStream,
}

/// How a forked domain ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    Code(i32),
    Signal(i32),
}

/// Fork a process that runs `body` with its end of a socket pair and
/// exits with the code it returns (or 101 if it panics).
///
/// Call it from a process with one thread, or where the other threads
/// hold no lock the child needs (the allocator's, above all): the child
/// is a copy of this thread alone.
pub fn fork_domain(body: impl FnOnce(UnixStream) -> i32) -> std::io::Result<Child> {
    let (ours, theirs) = UnixStream::pair()?;
    // Room for a parcel's copied bytes, so a copy is one message rather
    // than a ping-pong of partial writes (the kernel caps these at
    // net.core.wmem_max / rmem_max).
    for s in [&ours, &theirs] {
        let _ = rustix::net::sockopt::set_socket_send_buffer_size(s, 4 << 20);
        let _ = rustix::net::sockopt::set_socket_recv_buffer_size(s, 4 << 20);
    }
    // SAFETY: see the function's contract; the child never returns into
    // the caller's frames — it runs `body` and `_exit`s.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if pid == 0 {
        drop(ours);
        let code =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(theirs))).unwrap_or(101);
        // SAFETY: `_exit` ends the process without running the parent's
        // atexit handlers or flushing its copied stdio buffers twice.
        unsafe { libc::_exit(code) };
    }
    drop(theirs);
    Ok(Child { pid, sock: ours })
}

impl Child {
    /// Wait for the child to end.
    pub fn wait(self) -> std::io::Result<Exit> {
        drop(self.sock);
        let mut status = 0;
        loop {
            // SAFETY: `status` is a valid out pointer; `pid` is our child.
            let r = unsafe { libc::waitpid(self.pid, &mut status, 0) };
            if r == self.pid {
                break;
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
        Ok(if libc::WIFSIGNALED(status) {
            Exit::Signal(libc::WTERMSIG(status))
        } else {
            Exit::Code(libc::WEXITSTATUS(status))
        })
    }
}

/// Sleep while `*word == expected` (or until `timeout`, or a spurious
/// wake-up): `FUTEX_WAIT` on memory shared between processes.
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `word` is a live, aligned 32-bit word; the kernel only reads
    // it and `ts`. Not FUTEX_PRIVATE: the waker is another process.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
        )
    };
}

/// Wake every process sleeping in [`futex_wait`] on `word`.
pub fn futex_wake(word: &AtomicU32) {
    // SAFETY: as in `futex_wait`; FUTEX_WAKE reads nothing but the address.
    unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX) };
}

/// The CPUs this process may run on.
pub fn allowed_cpus() -> Vec<usize> {
    match rustix::thread::sched_getaffinity(None) {
        Ok(set) => (0..rustix::thread::CpuSet::MAX_CPU)
            .filter(|&c| set.is_set(c))
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// Run this thread on `cpus` only.
pub fn pin_to(cpus: &[usize]) -> std::io::Result<()> {
    let mut set = rustix::thread::CpuSet::new();
    for &c in cpus {
        set.set(c);
    }
    Ok(rustix::thread::sched_setaffinity(None, &set)?)
}

/// Whether process `pid`, a child of ours, has ended (without reaping it).
pub fn child_ended(pid: i32) -> bool {
    // SAFETY: `info` is a valid out pointer; WNOWAIT leaves the child to
    // `Child::wait`.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let r = libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        );
        r != 0 || info.si_pid() != 0
    }
}

/// Whether the process or thread `id` is gone: no such id, or a zombie
/// (which maps nothing and holds nothing any more). Used by waiters on
/// the pool's header, which another process may have left mid-way.
pub fn task_gone(id: u32) -> bool {
    // SAFETY: signal 0 only checks that the task exists; Linux takes a
    // thread id as well as a process id here.
    if unsafe { libc::kill(id as libc::pid_t, 0) } != 0
        && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
    {
        return true;
    }
    // "/proc/<id>/stat": the state is the field after the last ')'.
    let Ok(stat) = std::fs::read(format!("/proc/{id}/stat")) else {
        return false; // no /proc to look at: the signal said it exists
    };
    let state = stat
        .iter()
        .rposition(|&c| c == b')')
        .and_then(|i| stat.get(i + 2));
    matches!(state, Some(b'Z' | b'X'))
}

/// Milliseconds of the monotonic clock, which every process of the
/// machine reads alike (wraps after 49 days: compare with `wrapping_sub`).
pub fn now_ms() -> u32 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    (t.tv_sec as u64 * 1000 + t.tv_nsec as u64 / 1_000_000) as u32
}

/// Our process id. A transfer names its sender by it (`Pool::send`'s
/// viewer, `Pool::revoked`), so it is asked for on every hop: it is kept
/// in a page the kernel zeroes in a forked child (`MADV_WIPEONFORK`),
/// which then asks again — however it was forked, raw `clone` included,
/// where an atfork handler would not run.
pub fn pid() -> u32 {
    let Some(cell) = pid_cell() else {
        return getpid();
    };
    match cell.load(std::sync::atomic::Ordering::Relaxed) {
        0 => {
            let p = getpid();
            cell.store(p, std::sync::atomic::Ordering::Relaxed);
            p
        }
        p => p,
    }
}

fn getpid() -> u32 {
    rustix::process::getpid().as_raw_nonzero().get() as u32
}

/// The word of [`pid`]'s page, or `None` where the kernel cannot wipe a
/// page on fork (before Linux 4.14): then every call asks.
fn pid_cell() -> Option<&'static AtomicU32> {
    static CELL: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    let addr = (*CELL.get_or_init(|| {
        let len = page_size();
        // SAFETY: a fresh private anonymous mapping, never unmapped (it
        // lives as long as the process); `madvise` changes only what a
        // fork copies of it.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            if p == libc::MAP_FAILED {
                return None;
            }
            if libc::madvise(p, len, libc::MADV_WIPEONFORK) != 0 {
                libc::munmap(p, len);
                return None;
            }
            Some(p as usize)
        }
    }))?;
    // SAFETY: `addr` is the start of a live, page-aligned, zero-filled
    // mapping that is never unmapped; a `u32` there is aligned, and every
    // access to it is atomic.
    Some(unsafe { &*(addr as *const AtomicU32) })
}

/// The calling thread's id.
pub fn tid() -> u32 {
    rustix::thread::gettid().as_raw_nonzero().get() as u32
}

/// Our parent's process id.
pub fn parent_pid() -> i32 {
    rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get())
}

/// The time-stamp counter (cycles at the nominal frequency).
#[inline]
pub fn rdtsc() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `rdtsc` is available on every x86_64 CPU.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn write_seal_fails_while_a_read_only_shared_mapping_exists() {
        let fd = memfd(page_size()).unwrap();
        let m = Map::new(fd.as_fd(), page_size(), false).unwrap();
        assert_eq!(
            seal_write(fd.as_fd()).unwrap_err().raw_os_error(),
            Some(libc::EBUSY)
        );
        drop(m);
        // A child another test of this binary forks meanwhile (the
        // benchmark's receivers) holds a copy of the mapping until it
        // execs or exits: the seal waits for it, as it would for any
        // process that shares the memfd's pages.
        let mut sealed = seal_write(fd.as_fd());
        for _ in 0..500 {
            match &sealed {
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                    sealed = seal_write(fd.as_fd());
                }
                _ => break,
            }
        }
        sealed.unwrap();
        assert!(Map::new(fd.as_fd(), page_size(), true).is_err());
        assert_eq!(seals(fd.as_fd()).unwrap(), (true, true));
    }

    #[test]
    fn punched_block_reads_zero() {
        let fd = memfd(page_size()).unwrap();
        let mut m = Map::new(fd.as_fd(), page_size(), true).unwrap();
        m.write(10, b"abc");
        punch(fd.as_fd(), page_size()).unwrap();
        assert_eq!(m.bytes(10, 3), &[0, 0, 0]);
    }

    #[test]
    fn a_forked_child_does_not_answer_its_parents_cached_pid() {
        let parent = pid();
        assert_eq!(parent, getpid());
        assert_eq!(pid(), parent, "cached");
        for via_raw_syscall in [false, true] {
            let child = if via_raw_syscall {
                // SAFETY: a raw fork (no atfork handlers); the child only
                // compares two numbers and exits.
                unsafe { libc::syscall(libc::SYS_fork) as i32 }
            } else {
                // SAFETY: as above, through libc.
                unsafe { libc::fork() }
            };
            if child == 0 {
                let ok = pid() == getpid() && pid() != parent;
                // SAFETY: leave the child at once, running no destructor.
                unsafe { libc::_exit(if ok { 0 } else { 1 }) };
            }
            let mut status = 0;
            // SAFETY: reaping our own child.
            assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
            assert!(libc::WIFEXITED(status), "raw {via_raw_syscall}");
            assert_eq!(libc::WEXITSTATUS(status), 0, "raw {via_raw_syscall}");
        }
        assert_eq!(pid(), parent);
    }
}
