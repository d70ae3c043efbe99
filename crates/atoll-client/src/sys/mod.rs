//! Raw Linux system calls issued from atoll's own text, and access to the
//! calling program's memory.
//!
//! Why raw: inside a preloaded process every libc file function resolves to
//! atoll's own wrappers, and Syscall User Dispatch only lets system calls
//! issued from the preload library's text through. An inline `syscall`
//! instruction in this crate (linked into that library) is therefore the one
//! way to reach Linux without re-entering atoll.
//!
//! This is one of the two audited `unsafe` modules of the crate (the other is
//! `cache`, which copies between the shared buffer cache and user buffers).
//! Everything that dereferences a pointer handed in by the program lives in
//! its submodule [`user`].

mod user;
pub use user::*;

/// The one raw entry (`atoll-sys`); see its contract.
pub use atoll_sys::syscall6;

/// Shorthand for system calls whose arguments are plain integers or point
/// to memory owned by the caller of this function.
///
/// # Safety
/// As [`syscall6`].
#[inline]
pub unsafe fn sc(nr: i64, a0: u64, a1: u64, a2: u64, a3: u64) -> i64 {
    // SAFETY: forwarded contract.
    unsafe { syscall6(nr, [a0, a1, a2, a3, 0, 0]) }
}

/// This process's soft limit on `resource` (`RLIMIT_*`), as the kernel
/// holds it: `None` when unlimited or unreadable. One system call.
pub fn soft_limit(resource: u32) -> Option<u64> {
    let mut rl = libc::rlimit64 {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `rl` is ours and outlives the call; no new limit is set.
    let r = unsafe {
        sc(
            libc::SYS_prlimit64,
            0,
            u64::from(resource),
            0,
            &mut rl as *mut libc::rlimit64 as u64,
        )
    };
    (r == 0 && rl.rlim_cur != libc::RLIM64_INFINITY).then_some(rl.rlim_cur)
}

/// `openat(dirfd, path, O_RDONLY | O_CLOEXEC)` as a raw call, for atoll's
/// own reads of host files (`/proc`, images, tables): the descriptor, or
/// −errno (`EINVAL` when `path` does not end with its NUL).
pub fn open_read(dirfd: i64, path_with_nul: &[u8]) -> i64 {
    if path_with_nul.last() != Some(&0) {
        return -(libc::EINVAL as i64);
    }
    // SAFETY: openat reads the NUL-terminated path, which outlives the call.
    unsafe {
        sc(
            libc::SYS_openat,
            dirfd as u64,
            path_with_nul.as_ptr() as u64,
            (libc::O_RDONLY | libc::O_CLOEXEC) as u64,
            0,
        )
    }
}

/// `close(fd)`; the result is ignored by most callers.
pub fn close(fd: i32) -> i64 {
    // SAFETY: closing a descriptor touches no memory.
    unsafe { sc(libc::SYS_close, fd as u64, 0, 0, 0) }
}

/// `fcntl(fd, cmd, arg)` for integer-argument commands only.
pub fn fcntl_int(fd: i32, cmd: i32, arg: i64) -> i64 {
    debug_assert!(matches!(
        cmd,
        libc::F_GETFD
            | libc::F_SETFD
            | libc::F_DUPFD
            | libc::F_DUPFD_CLOEXEC
            | libc::F_GETFL
            | libc::F_SETFL
    ));
    // SAFETY: these commands take an integer argument, no pointer.
    unsafe { sc(libc::SYS_fcntl, fd as u64, cmd as u64, arg as u64, 0) }
}

/// `dup3(old, new, flags)`.
pub fn dup3(old: i32, new: i32, flags: i32) -> i64 {
    // SAFETY: integer arguments only.
    unsafe { sc(libc::SYS_dup3, old as u64, new as u64, flags as u64, 0) }
}

/// `fstat(fd)` into a local buffer: `(st_dev, st_ino, st_mode)`.
pub fn fstat_id(fd: i32) -> Result<(u64, u64, u32), i32> {
    fstat(fd).map(|st| (st.st_dev, st.st_ino, st.st_mode))
}

/// `pread` of a host descriptor into a local buffer: bytes read, or −errno.
pub fn pread(fd: i32, buf: &mut [u8], off: u64) -> i64 {
    // SAFETY: the kernel writes at most `buf.len()` bytes into `buf`.
    unsafe {
        sc(
            libc::SYS_pread64,
            fd as u64,
            buf.as_mut_ptr() as u64,
            buf.len() as u64,
            off,
        )
    }
}

/// `fstat` of a host descriptor.
pub fn fstat(fd: i32) -> Result<libc::stat, i32> {
    let mut st = core::mem::MaybeUninit::<libc::stat>::zeroed();
    // SAFETY: `st` is a properly sized local buffer the kernel fills.
    let r = unsafe { sc(libc::SYS_fstat, fd as u64, st.as_mut_ptr() as u64, 0, 0) };
    if r < 0 {
        return Err((-r) as i32);
    }
    // SAFETY: the kernel wrote the whole struct (and it was zeroed before).
    Ok(unsafe { st.assume_init() })
}

/// Write all of `data` to a host descriptor (used for memfd copies).
pub fn write_all(fd: i32, mut data: &[u8]) -> Result<(), i32> {
    while !data.is_empty() {
        // SAFETY: `data` is a live slice we own for the duration of the call.
        let r = unsafe {
            sc(
                libc::SYS_write,
                fd as u64,
                data.as_ptr() as u64,
                data.len() as u64,
                0,
            )
        };
        if r == -(libc::EINTR as i64) {
            continue;
        }
        if r <= 0 {
            return Err(if r == 0 { libc::EIO } else { (-r) as i32 });
        }
        data = &data[r as usize..];
    }
    Ok(())
}

/// `prefix`, `number` in decimal, `suffix` and a NUL into `buf`, without
/// allocating (callers run inside the trap, e.g. for `/proc/<pid>/stat`);
/// returns the length with the NUL. `buf` must have room for it.
pub fn proc_path(buf: &mut [u8], prefix: &[u8], number: u32, suffix: &[u8]) -> usize {
    let mut digits = [0u8; 10];
    let (mut v, mut k) = (number, 0);
    loop {
        digits[k] = b'0' + (v % 10) as u8;
        k += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    let mut n = 0;
    let reversed = digits[..k].iter().rev().copied();
    for b in prefix
        .iter()
        .copied()
        .chain(reversed)
        .chain(suffix.iter().copied())
    {
        buf[n] = b;
        n += 1;
    }
    buf[n] = 0;
    n + 1
}

/// `CLOCK_MONOTONIC` in nanoseconds, read through the vDSO by rustix (no
/// libc call, so safe here, as `atoll_msg`'s spin clock). Hot path: the
/// round-trip sampling (`msgbound`) reads it twice per request, and as a
/// system call that was ~1 µs of every message in this guest, where a
/// system call costs ~0.5 µs and the vDSO read ~35 ns.
#[inline]
pub fn monotonic_ns() -> i64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

/// Sleep for `ns` nanoseconds (lock retry back-off).
pub fn sleep_ns(ns: u64) {
    let ts = libc::timespec {
        tv_sec: (ns / 1_000_000_000) as i64,
        tv_nsec: (ns % 1_000_000_000) as i64,
    };
    // SAFETY: `ts` is a local timespec; no remainder pointer.
    unsafe { sc(libc::SYS_nanosleep, &ts as *const _ as u64, 0, 0, 0) };
}

/// Blocks every signal until dropped, so that a critical section holding a
/// lock cannot be re-entered by a signal handler on the same thread (which
/// would deadlock). Two raw `rt_sigprocmask` calls.
pub struct SigBlock {
    old: u64,
}

impl SigBlock {
    pub fn new() -> SigBlock {
        SigBlock {
            old: atoll_sys::set_sigmask(!0),
        }
    }
}

impl Default for SigBlock {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for SigBlock {
    fn drop(&mut self) {
        atoll_sys::set_sigmask(self.old);
    }
}

/// A spin lock for rare, short critical sections (boot-socket exchanges,
/// chdir). Always taken with signals blocked ([`SigBlock`]) so a handler on
/// the same thread can never spin on it forever. Every process-local one
/// must be listed in `forkgate::locks`, or a fork can leave it held in the
/// child.
pub struct SpinLock {
    held: core::sync::atomic::AtomicBool,
}

pub struct SpinGuard<'a> {
    lock: &'a SpinLock,
    _sig: Option<SigBlock>,
}

impl SpinLock {
    pub const fn new() -> SpinLock {
        SpinLock {
            held: core::sync::atomic::AtomicBool::new(false),
        }
    }
    pub fn lock(&self) -> SpinGuard<'_> {
        let sig = SigBlock::new();
        self.acquire_raw();
        SpinGuard {
            lock: self,
            _sig: Some(sig),
        }
    }

    /// [`SpinLock::lock`] for a lock only atoll code takes, without the
    /// two `rt_sigprocmask` calls when program signals are deferred on
    /// this thread (`intr::signals_deferred`): no program handler then
    /// runs before the call returns to the program, so none can spin on
    /// the lock while this thread holds it. atoll's own handlers (the
    /// `SIGSYS` net, the deferral entry) take no such lock, and a fork
    /// takes it with every signal blocked (`forkgate`). Elsewhere (no
    /// interposition layer, a host call) the mask is taken as by `lock`.
    pub fn lock_in_call(&self) -> SpinGuard<'_> {
        if !crate::intr::signals_deferred() {
            return self.lock();
        }
        self.acquire_raw();
        SpinGuard {
            lock: self,
            _sig: None,
        }
    }
}

impl SpinLock {
    /// Take the lock for [`crate::forkgate::ForkGate`], whose caller
    /// already blocked every signal: spin (then yield) until free.
    pub fn acquire_raw(&self) {
        use core::sync::atomic::Ordering;
        let mut spins = 0u32;
        while self
            .held
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            spins += 1;
            if spins > 100 {
                // SAFETY: sched_yield takes no arguments.
                unsafe { sc(libc::SYS_sched_yield, 0, 0, 0, 0) };
            } else {
                core::hint::spin_loop();
            }
        }
    }

    /// Undo [`SpinLock::acquire_raw`].
    pub fn release_raw(&self) {
        self.held
            .store(false, core::sync::atomic::Ordering::Release);
    }
}

impl Default for SpinLock {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for SpinGuard<'_> {
    fn drop(&mut self) {
        self.lock
            .held
            .store(false, core::sync::atomic::Ordering::Release);
    }
}
