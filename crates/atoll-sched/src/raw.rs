//! Raw Linux system calls for the proxy side, which runs inside programs
//! that carry the client library: libc entry points such as `sigprocmask`
//! or `sigaction` are wrapped there, and the proxy must talk to the kernel
//! itself. The only `unsafe` of the client side besides `load`.

/// The one raw entry (`atoll-sys`); see its contract.
pub use atoll_sys::syscall6;

/// A system call that only passes integers (no memory).
pub fn sc(nr: i64, a0: u64, a1: u64, a2: u64) -> i64 {
    // SAFETY: callers in this crate use this only for calls whose
    // arguments are plain integers (close, kill, getpgid, umask, ...).
    unsafe { syscall6(nr, [a0, a1, a2, 0, 0, 0]) }
}

/// Kernel `struct sigaction` for x86-64 `rt_sigaction`.
#[repr(C)]
#[derive(Default)]
struct KSigaction {
    handler: u64,
    flags: u64,
    restorer: u64,
    mask: u64,
}

/// The current signal mask of the calling thread.
pub fn sigmask() -> u64 {
    let mut old = 0u64;
    // SAFETY: rt_sigprocmask writes 8 bytes into `old`; no new set.
    unsafe {
        syscall6(
            libc::SYS_rt_sigprocmask,
            [0, 0, &mut old as *mut u64 as u64, 8, 0, 0],
        )
    };
    old
}

/// Replace the signal mask; returns the previous one (`atoll-sys`).
pub use atoll_sys::set_sigmask;

/// Signals whose disposition is `SIG_IGN` (bit `sig - 1`); the only
/// dispositions that survive `execve`.
pub fn ignored_signals() -> u64 {
    let mut bits = 0u64;
    for sig in 1..=64u64 {
        let mut old = KSigaction::default();
        // SAFETY: rt_sigaction with a null new action only writes `old`.
        let r = unsafe {
            syscall6(
                libc::SYS_rt_sigaction,
                [sig, 0, &mut old as *mut KSigaction as u64, 8, 0, 0],
            )
        };
        if r == 0 && old.handler == libc::SIG_IGN as u64 {
            bits |= 1 << (sig - 1);
        }
    }
    bits
}

/// Reset `sig` to its default action.
pub fn default_action(sig: i32) {
    let act = KSigaction::default();
    // SAFETY: reads our `act`; SIG_DFL needs no restorer.
    unsafe {
        syscall6(
            libc::SYS_rt_sigaction,
            [sig as u64, &act as *const KSigaction as u64, 0, 8, 0, 0],
        )
    };
}

/// `signalfd4` over `mask` (close-on-exec, non-blocking).
pub fn signalfd(mask: u64) -> i64 {
    // SAFETY: reads 8 bytes from `mask`.
    unsafe {
        syscall6(
            libc::SYS_signalfd4,
            [
                u64::MAX, // -1: a new descriptor
                &mask as *const u64 as u64,
                8,
                (libc::SFD_CLOEXEC | libc::SFD_NONBLOCK) as u64,
                0,
                0,
            ],
        )
    }
}

/// `(soft, hard)` of every resource limit Linux knows.
pub fn rlimits() -> Vec<(u32, u64, u64)> {
    let mut out = Vec::with_capacity(16);
    for r in 0..16u32 {
        let mut lim = [0u64; 2];
        // SAFETY: prlimit64 on ourselves with no new limit writes 16 bytes.
        let rc = unsafe {
            syscall6(
                libc::SYS_prlimit64,
                [0, r as u64, 0, lim.as_mut_ptr() as u64, 0, 0],
            )
        };
        if rc == 0 {
            out.push((r, lim[0], lim[1]));
        }
    }
    out
}

/// Set a resource limit of the calling process (errors ignored by callers).
pub fn set_rlimit(res: u32, soft: u64, hard: u64) -> i64 {
    let lim = [soft, hard];
    // SAFETY: reads 16 bytes from `lim`.
    unsafe {
        syscall6(
            libc::SYS_prlimit64,
            [0, res as u64, lim.as_ptr() as u64, 0, 0, 0],
        )
    }
}

/// Number of threads of the calling process (field 20 of
/// `/proc/self/stat`), `None` if it cannot be read.
pub fn thread_count() -> Option<u64> {
    let s = std::fs::read("/proc/self/stat").ok()?;
    // The command name may contain spaces: fields start after ')'.
    let close = s.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(&s[close + 1..]).ok()?;
    rest.split_ascii_whitespace().nth(17)?.parse().ok()
}

/// Fork a child that only waits to be killed (blocked signals are
/// inherited; `pause` returns only for a caught signal). Returns its pid.
pub fn fork_idle() -> Option<i32> {
    // SAFETY: a raw fork; the child runs nothing but `pause` system calls
    // on its copy of this stack (no allocation, no locks, no libc), so the
    // state of other threads or of libc in the copy never matters.
    let pid = unsafe { syscall6(libc::SYS_fork, [0; 6]) };
    if pid == 0 {
        loop {
            sc(libc::SYS_pause, 0, 0, 0);
        }
    }
    (pid > 0).then_some(pid as i32)
}

/// Leave now with `code` (no atexit handlers: the program image is gone).
pub fn exit_group(code: i32) -> ! {
    loop {
        sc(libc::SYS_exit_group, code as u64, 0, 0);
    }
}
