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
//! Everything that dereferences a pointer handed in by the program lives here.

use core::arch::asm;

/// Issue system call `nr` with six raw arguments; returns the raw result
/// (≥ 0 or −errno).
///
/// # Safety
/// A raw system call can do anything the process may do (unmap memory,
/// write through pointers, close descriptors). The caller guarantees the
/// arguments are what the program asked for, or point to memory we own.
#[inline]
pub unsafe fn syscall6(nr: i64, a: [u64; 6]) -> i64 {
    let ret: i64;
    // SAFETY: x86-64 Linux system-call ABI: number in rax, arguments in
    // rdi/rsi/rdx/r10/r8/r9, the kernel clobbers rcx and r11. The call's
    // effects are the caller's responsibility (see the function contract).
    unsafe {
        asm!(
            "syscall",
            inlateout("rax") nr => ret,
            in("rdi") a[0],
            in("rsi") a[1],
            in("rdx") a[2],
            in("r10") a[3],
            in("r8") a[4],
            in("r9") a[5],
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack)
        );
    }
    ret
}

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
    let mut st = core::mem::MaybeUninit::<libc::stat>::zeroed();
    // SAFETY: `st` is a properly sized local buffer the kernel fills.
    let r = unsafe { sc(libc::SYS_fstat, fd as u64, st.as_mut_ptr() as u64, 0, 0) };
    if r < 0 {
        return Err((-r) as i32);
    }
    // SAFETY: the kernel wrote the whole struct (and it was zeroed before).
    let st = unsafe { st.assume_init() };
    Ok((st.st_dev, st.st_ino, st.st_mode))
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

/// `CLOCK_MONOTONIC` in nanoseconds.
pub fn monotonic_ns() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes the local timespec.
    unsafe {
        sc(
            libc::SYS_clock_gettime,
            libc::CLOCK_MONOTONIC as u64,
            &mut ts as *mut _ as u64,
            0,
            0,
        )
    };
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
        let all: u64 = !0;
        let mut old: u64 = 0;
        // SAFETY: both pointers are to local 8-byte sigsets (kernel sigset
        // size on x86-64 is 8 bytes).
        unsafe {
            sc(
                libc::SYS_rt_sigprocmask,
                libc::SIG_SETMASK as u64,
                &all as *const u64 as u64,
                &mut old as *mut u64 as u64,
                8,
            )
        };
        SigBlock { old }
    }
}

impl Default for SigBlock {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for SigBlock {
    fn drop(&mut self) {
        // SAFETY: restores the mask saved in `new`, local pointer.
        unsafe {
            sc(
                libc::SYS_rt_sigprocmask,
                libc::SIG_SETMASK as u64,
                &self.old as *const u64 as u64,
                0,
                8,
            )
        };
    }
}

/// A spin lock for rare, short critical sections (boot-socket exchanges,
/// chdir). Always taken with signals blocked ([`SigBlock`]) so a handler on
/// the same thread can never spin on it forever.
pub struct SpinLock {
    held: core::sync::atomic::AtomicBool,
}

pub struct SpinGuard<'a> {
    lock: &'a SpinLock,
    _sig: SigBlock,
}

impl SpinLock {
    pub const fn new() -> SpinLock {
        SpinLock {
            held: core::sync::atomic::AtomicBool::new(false),
        }
    }
    pub fn lock(&self) -> SpinGuard<'_> {
        use core::sync::atomic::Ordering;
        let sig = SigBlock::new();
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
        SpinGuard {
            lock: self,
            _sig: sig,
        }
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

// ---------------------------------------------------------------------------
// The program's memory. Every pointer below comes from a system call's raw
// arguments; like the kernel we trust the program to pass valid memory
// (a bad pointer faults in the program, as a libc wrapper would have).

/// Longest path the kernel accepts, including the NUL (`PATH_MAX`).
pub const PATH_MAX: usize = 4096;

/// The NUL-terminated string at `ptr`, without the NUL. `EFAULT` for a null
/// pointer, `ENAMETOOLONG` when no NUL appears within `PATH_MAX` bytes.
pub fn user_path<'a>(ptr: u64) -> Result<&'a [u8], i32> {
    if ptr == 0 {
        return Err(libc::EFAULT);
    }
    let p = ptr as *const u8;
    let mut n = 0usize;
    // SAFETY: the program passed `ptr` as a C string argument; we read byte
    // by byte up to its NUL or PATH_MAX, like the kernel's strncpy_from_user
    // (minus the fault handling: a bad pointer faults as in a libc wrapper).
    unsafe {
        while n < PATH_MAX {
            if *p.add(n) == 0 {
                return Ok(core::slice::from_raw_parts(p, n));
            }
            n += 1;
        }
    }
    Err(libc::ENAMETOOLONG)
}

/// Read-only view of a program buffer.
pub fn user_slice<'a>(ptr: u64, len: usize) -> &'a [u8] {
    if len == 0 || ptr == 0 {
        return &[];
    }
    // SAFETY: the program passed (ptr, len) as a buffer argument of a
    // system call that reads it.
    unsafe { core::slice::from_raw_parts(ptr as *const u8, len) }
}

/// Writable view of a program buffer.
pub fn user_slice_mut<'a>(ptr: u64, len: usize) -> &'a mut [u8] {
    if len == 0 || ptr == 0 {
        return &mut [];
    }
    // SAFETY: the program passed (ptr, len) as a buffer argument of a
    // system call that writes it; nothing else in atoll aliases it.
    unsafe { core::slice::from_raw_parts_mut(ptr as *mut u8, len) }
}

/// Store a plain-old-data value at a program address.
pub fn put_user<T: Copy>(ptr: u64, v: T) -> Result<(), i32> {
    if ptr == 0 {
        return Err(libc::EFAULT);
    }
    // SAFETY: the program passed `ptr` as an out-parameter of type T;
    // unaligned write because C callers only guarantee C alignment.
    unsafe { core::ptr::write_unaligned(ptr as *mut T, v) };
    Ok(())
}

/// Load a plain-old-data value from a program address.
pub fn get_user<T: Copy>(ptr: u64) -> Result<T, i32> {
    if ptr == 0 {
        return Err(libc::EFAULT);
    }
    // SAFETY: the program passed `ptr` as an in-parameter of type T (a
    // C struct made of integers: every bit pattern is valid).
    Ok(unsafe { core::ptr::read_unaligned(ptr as *const T) })
}

/// A zeroed C struct (all the libc structs we fill are integers only).
pub fn zeroed<T: Copy>() -> T {
    // SAFETY: only used for libc's plain integer structs (stat, statx,
    // statfs, flock), for which all-zero is a valid value.
    unsafe { core::mem::zeroed() }
}

/// Iterate a NUL-terminated array of C strings (argv/envp).
pub fn user_str_array<'a>(ptr: *const *const libc::c_char) -> Vec<&'a [u8]> {
    let mut out = Vec::new();
    if ptr.is_null() {
        return out;
    }
    let mut i = 0;
    loop {
        // SAFETY: `ptr` is a NULL-terminated argv/envp array from the
        // program; each element is a C string.
        let s = unsafe { *ptr.add(i) };
        if s.is_null() {
            break;
        }
        // SAFETY: as above: `s` is NUL-terminated.
        out.push(unsafe { core::ffi::CStr::from_ptr(s) }.to_bytes());
        i += 1;
    }
    out
}
