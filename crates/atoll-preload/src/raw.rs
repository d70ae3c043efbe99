//! Raw system calls issued from libatoll's own text.
//!
//! Why raw: Syscall User Dispatch lets a system call through without a trap
//! when it is issued from inside the allowed region, i.e. from this
//! library's executable segment, whatever the selector says. Code on the
//! trap path (the SIGSYS handler before and after it has flipped the
//! selector, the clone trampoline, trap statistics written at `exit_group`)
//! therefore issues its own `syscall` instructions instead of calling libc,
//! which would also touch `errno` and may re-enter our wrappers.
//!
//! Everything here is allocation-free and async-signal-safe.

/// Issue system call `nr` with six raw arguments; returns the raw result
/// (`-errno` on failure), exactly as the kernel left it in RAX.
///
/// Hot path: every trapped system call that atoll does not handle ends here.
#[inline(always)]
pub fn syscall6(nr: i64, a: [u64; 6]) -> i64 {
    // SAFETY: `atoll_sys::syscall6` is the bare instruction. Whether the
    // system call itself is memory-safe is the caller's concern: all
    // callers pass either arguments the program gave to its own (trapped)
    // system call, or pointers to live buffers of the right size.
    unsafe { atoll_sys::syscall6(nr, a) }
}

/// Convenience for calls with fewer arguments.
#[inline(always)]
pub fn syscall(nr: i64, args: &[u64]) -> i64 {
    let mut a = [0u64; 6];
    a[..args.len()].copy_from_slice(args);
    syscall6(nr, a)
}

/// Copy 8 bytes between this process's memory and a pointer the program
/// passed to a system call, as the kernel would: a bad pointer gives
/// `false` (the caller answers EFAULT) instead of a fault inside the
/// SIGSYS handler. `process_vm_readv`/`writev` on our own pid does the
/// checked copy.
fn user_copy_u64(nr: i64, local: *mut u64, user: u64) -> bool {
    let pid = syscall(libc::SYS_getpid, &[]);
    let local_iov = libc::iovec {
        iov_base: local.cast(),
        iov_len: 8,
    };
    let user_iov = libc::iovec {
        iov_base: user as *mut libc::c_void,
        iov_len: 8,
    };
    let n = syscall(
        nr,
        &[
            pid as u64,
            &local_iov as *const libc::iovec as u64,
            1,
            &user_iov as *const libc::iovec as u64,
            1,
            0,
        ],
    );
    n == 8
}

/// Read a `u64` from a program-supplied pointer (see [`user_copy_u64`]).
pub fn read_user_u64(user: u64) -> Option<u64> {
    let mut v = 0u64;
    user_copy_u64(libc::SYS_process_vm_readv, &mut v, user).then_some(v)
}

/// Write a `u64` to a program-supplied pointer (see [`user_copy_u64`]).
pub fn write_user_u64(user: u64, value: u64) -> bool {
    let mut v = value;
    user_copy_u64(libc::SYS_process_vm_writev, &mut v, user)
}

/// Write all of `buf` to `fd` with raw `write`, retrying on short writes and
/// EINTR. Errors are ignored: this is only used for diagnostics and stats.
pub fn write_all(fd: i32, mut buf: &[u8]) {
    while !buf.is_empty() {
        let n = syscall(
            libc::SYS_write,
            &[fd as u64, buf.as_ptr() as u64, buf.len() as u64],
        );
        if n == -(libc::EINTR as i64) {
            continue;
        }
        if n <= 0 {
            return;
        }
        buf = &buf[n as usize..];
    }
}

/// Read the calling thread's `errno`.
#[inline]
pub fn errno() -> i32 {
    // SAFETY: `__errno_location` returns a valid pointer to this thread's
    // errno for the whole life of the thread.
    unsafe { *libc::__errno_location() }
}

/// Set the calling thread's `errno`.
#[inline]
pub fn set_errno(e: i32) {
    // SAFETY: as in `errno`.
    unsafe { *libc::__errno_location() = e }
}

/// A fixed-capacity, allocation-free text buffer for messages built inside
/// the SIGSYS handler (where malloc may be locked by the interrupted code).
pub struct StackBuf<const N: usize> {
    buf: [u8; N],
    len: usize,
}

impl<const N: usize> Default for StackBuf<N> {
    fn default() -> Self {
        StackBuf {
            buf: [0; N],
            len: 0,
        }
    }
}

/// Formatting into the buffer (truncating, never failing), for messages
/// written where nothing may allocate or take a lock.
impl<const N: usize> core::fmt::Write for StackBuf<N> {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        self.push(s.as_bytes());
        Ok(())
    }
}

impl<const N: usize> StackBuf<N> {
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    /// Append bytes; silently truncates when full.
    pub fn push(&mut self, s: &[u8]) {
        let n = s.len().min(N - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&s[..n]);
        self.len += n;
    }

    /// Drop the last byte, if any.
    pub fn pop(&mut self) {
        self.len = self.len.saturating_sub(1);
    }

    /// Append an unsigned number in decimal.
    pub fn push_u64(&mut self, mut v: u64) {
        let mut digits = [0u8; 20];
        let mut i = digits.len();
        loop {
            i -= 1;
            digits[i] = b'0' + (v % 10) as u8;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        self.push(&digits[i..]);
    }

    /// Append a signed number in decimal.
    pub fn push_i64(&mut self, v: i64) {
        if v < 0 {
            self.push(b"-");
        }
        self.push_u64(v.unsigned_abs());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_getpid_matches_libc() {
        // SAFETY: getpid has no preconditions.
        let pid = unsafe { libc::getpid() } as i64;
        assert_eq!(syscall(libc::SYS_getpid, &[]), pid);
    }

    #[test]
    fn raw_errors_come_back_negative() {
        assert_eq!(
            syscall(libc::SYS_close, &[u32::MAX as u64 >> 1]),
            -(libc::EBADF as i64)
        );
    }

    #[test]
    fn stackbuf_formats_numbers_and_truncates() {
        let mut b = StackBuf::<32>::default();
        b.push_u64(0);
        b.push(b" ");
        b.push_i64(-42);
        assert_eq!(b.as_bytes(), b"0 -42");
        let mut small = StackBuf::<4>::default();
        small.push_u64(123456);
        assert_eq!(small.as_bytes(), b"1234");
    }
}
