//! The raw Linux system-call entry atoll's own text uses.
//!
//! Why raw: inside a process that carries the client library, every libc
//! file function resolves to atoll's wrappers, and Syscall User Dispatch
//! lets a system call through without a trap only when its `syscall`
//! instruction lies in the library's own executable segment. So the
//! client, its trap handler and the remote-exec proxy issue their own
//! `syscall` instructions (which also leave `errno` alone). The function
//! is `#[inline(always)]`: the instruction lands in the text of whichever
//! binary calls it, which for the preload library is the allowed region.
//!
//! This crate is the one place the instruction is written; each user keeps
//! its own safe helpers around it (`atoll_client::sys`, the preload
//! library's `raw`, `atoll_sched::raw`).

#![cfg_attr(not(test), no_std)]

/// Issue system call `nr` with six raw arguments; returns the raw result
/// (a value ≥ 0, or −errno), exactly as the kernel left it in RAX.
///
/// # Safety
/// A raw system call can do anything the process may do (unmap memory,
/// write through pointers, close descriptors). The caller guarantees the
/// arguments are what the program asked for, or name memory it owns and
/// that lives for the call.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub unsafe fn syscall6(nr: i64, a: [u64; 6]) -> i64 {
    let ret: i64;
    // SAFETY: x86-64 Linux system-call ABI: number in rax, arguments in
    // rdi/rsi/rdx/r10/r8/r9; the kernel clobbers rcx and r11 (declared) and
    // leaves the result in rax. What the call does to memory is the
    // caller's contract (above).
    unsafe {
        core::arch::asm!(
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
            options(nostack),
        );
    }
    ret
}

/// Elsewhere, libc's generic entry point, with the result folded back into
/// the raw convention (−errno on failure).
///
/// # Safety
/// As the x86-64 version.
#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
pub unsafe fn syscall6(nr: i64, a: [u64; 6]) -> i64 {
    // SAFETY: forwarded to libc's `syscall`; the caller's contract.
    let r = unsafe { libc::syscall(nr, a[0], a[1], a[2], a[3], a[4], a[5]) };
    if r < 0 {
        // SAFETY: `__errno_location` returns this thread's errno slot.
        -(unsafe { *libc::__errno_location() } as i64)
    } else {
        r
    }
}

/// Replace this thread's signal mask (`rt_sigprocmask(SIG_SETMASK)`, the
/// kernel's 8-byte set); returns the previous one.
#[inline]
pub fn set_sigmask(mask: u64) -> u64 {
    let mut old = 0u64;
    // SAFETY: the kernel reads 8 bytes from `mask` and writes 8 into
    // `old`, both ours for the call.
    unsafe {
        syscall6(
            libc::SYS_rt_sigprocmask,
            [
                libc::SIG_SETMASK as u64,
                &mask as *const u64 as u64,
                &mut old as *mut u64 as u64,
                8,
                0,
                0,
            ],
        )
    };
    old
}

#[cfg(test)]
mod tests {
    use super::syscall6;

    #[test]
    fn the_raw_entry_returns_the_kernel_s_value_and_minus_errno() {
        // SAFETY: getpid takes no arguments; close of an invalid descriptor
        // touches nothing.
        let pid = unsafe { syscall6(libc::SYS_getpid, [0; 6]) };
        assert_eq!(pid, i64::from(unsafe { libc::getpid() }));
        let bad = unsafe { syscall6(libc::SYS_close, [u64::MAX >> 33, 0, 0, 0, 0, 0]) };
        assert_eq!(bad, -i64::from(libc::EBADF));
    }

    #[test]
    fn the_signal_mask_is_set_and_the_old_one_returned() {
        let before = super::set_sigmask(1 << (libc::SIGUSR1 - 1));
        assert_eq!(super::set_sigmask(before), 1 << (libc::SIGUSR1 - 1));
    }
}
