//! Keeping SIGSYS usable by atoll while the program manages its signals.
//!
//! With Syscall User Dispatch every trapped system call is delivered as a
//! SIGSYS; if SIGSYS were blocked at that moment the kernel would kill the
//! process, and if the program replaced our handler atoll would lose its
//! net. So, on the way from the program to the kernel:
//!
//! * `rt_sigaction(SIGSYS, …)` is answered from a *virtual* disposition kept
//!   here; the real one stays ours;
//! * every other `rt_sigaction` loses SIGSYS from its `sa_mask`, and gets our
//!   own `rt_sigreturn` stub as restorer: glibc's `__restore_rt` lives outside
//!   the allowed region, so its `rt_sigreturn` would itself trap;
//! * every mask handed to `rt_sigprocmask`, `rt_sigsuspend`, `ppoll`,
//!   `pselect6`, `epoll_pwait(2)` loses SIGSYS.
//!
//! Pure functions over the kernel's (not glibc's) structures, unit-tested.

use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// The kernel's `struct sigaction` on x86-64 (`sigsetsize` = 8).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KSigaction {
    pub handler: usize,
    pub flags: u64,
    pub restorer: usize,
    pub mask: u64,
}

/// Size of the kernel's sigset on x86-64.
pub const KSIGSET_SIZE: u64 = 8;

/// Run the program's handler of `action` (neither `SIG_IGN` nor
/// `SIG_DFL`) the way it was installed: with `info` and the context for
/// `SA_SIGINFO`, with the signal number alone otherwise.
///
/// # Safety
/// `action` is one the program installed; `info` and `uc` are what the
/// kernel gave the signal's entry.
pub unsafe fn call_handler(
    action: &KSigaction,
    sig: i32,
    info: *mut libc::siginfo_t,
    uc: *mut core::ffi::c_void,
) {
    if action.flags & libc::SA_SIGINFO as u64 != 0 {
        // SAFETY: the program installed it as an SA_SIGINFO handler.
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut core::ffi::c_void) =
            unsafe { core::mem::transmute(action.handler) };
        f(sig, info, uc);
    } else {
        // SAFETY: the program installed it as a plain handler.
        let f: extern "C" fn(libc::c_int) = unsafe { core::mem::transmute(action.handler) };
        f(sig);
    }
}

/// Send `sig` to this very thread: with its action reset to the default
/// beforehand, the kernel takes the default action for real once the
/// current handler returns.
pub fn raise_here(sig: i32) {
    let pid = crate::raw::syscall(libc::SYS_getpid, &[]);
    let tid = crate::raw::syscall(libc::SYS_gettid, &[]);
    crate::raw::syscall(libc::SYS_tgkill, &[pid as u64, tid as u64, sig as u64]);
}

pub const SA_RESTORER: u64 = 0x0400_0000;

/// Bit of `sig` in a kernel sigset.
#[inline]
pub const fn bit(sig: i32) -> u64 {
    1u64 << (sig - 1)
}

/// `mask` without SIGSYS.
#[inline]
pub const fn strip_sigsys(mask: u64) -> u64 {
    mask & !bit(libc::SIGSYS)
}

/// glibc's two internal signals (SIGCANCEL = 32, SIGSETXID = 33), which
/// glibc itself never lets a program block.
const GLIBC_INTERNAL: u64 = bit(32) | bit(33);

/// A mask a program asks to install, as atoll installs it: without
/// SIGSYS (blocked during a trap, it would kill the process) and without
/// glibc's internal signals, as glibc's own `sigprocmask` leaves them.
/// Bits, not `sigdelset`: glibc's `sigdelset` answers `EINVAL` for the
/// internal signals and sets errno, which the program's successful call
/// must leave alone (PostgreSQL reads `select`'s errno after it).
#[inline]
pub const fn program_mask(mask: u64) -> u64 {
    strip_sigsys(mask) & !GLIBC_INTERNAL
}

/// The action actually installed for a program's `act` on a signal other
/// than SIGSYS: SIGSYS never blocked while the handler runs, and our
/// restorer when there is a handler to return from.
pub fn fix_action(act: KSigaction, restorer: usize) -> KSigaction {
    let mut out = act;
    out.mask = strip_sigsys(act.mask);
    let is_function = act.handler != libc::SIG_DFL && act.handler != libc::SIG_IGN;
    if is_function {
        out.flags |= SA_RESTORER;
        out.restorer = restorer;
    }
    out
}

/// The program's idea of its SIGSYS disposition, which the kernel never
/// sees. Word-wise atomics: a torn read between two racing `sigaction`
/// calls on SIGSYS is as acceptable as the race itself.
pub struct VirtualAction {
    handler: AtomicUsize,
    flags: AtomicU64,
    restorer: AtomicUsize,
    mask: AtomicU64,
}

impl VirtualAction {
    pub const fn new() -> Self {
        VirtualAction {
            handler: AtomicUsize::new(libc::SIG_DFL),
            flags: AtomicU64::new(0),
            restorer: AtomicUsize::new(0),
            mask: AtomicU64::new(0),
        }
    }

    pub fn get(&self) -> KSigaction {
        KSigaction {
            handler: self.handler.load(Ordering::Relaxed),
            flags: self.flags.load(Ordering::Relaxed),
            restorer: self.restorer.load(Ordering::Relaxed),
            mask: self.mask.load(Ordering::Relaxed),
        }
    }

    pub fn set(&self, a: KSigaction) {
        self.flags.store(a.flags, Ordering::Relaxed);
        self.restorer.store(a.restorer, Ordering::Relaxed);
        self.mask.store(a.mask, Ordering::Relaxed);
        self.handler.store(a.handler, Ordering::Relaxed);
    }
}

impl Default for VirtualAction {
    fn default() -> Self {
        Self::new()
    }
}

/// Where the signal mask argument of a mask-taking system call is: index of
/// the argument holding the sigset pointer and of the one holding its size.
/// `pselect6` is special (its 6th argument points to `{sigset*, size}`) and
/// is not listed.
pub fn mask_arg(nr: i64) -> Option<(usize, usize)> {
    match nr {
        libc::SYS_rt_sigprocmask => Some((1, 3)),
        libc::SYS_rt_sigsuspend => Some((0, 1)),
        libc::SYS_ppoll => Some((3, 4)),
        libc::SYS_epoll_pwait | libc::SYS_epoll_pwait2 => Some((4, 5)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handlers_get_our_restorer_and_lose_sigsys_from_their_mask() {
        let act = KSigaction {
            handler: 0x1234,
            flags: libc::SA_SIGINFO as u64,
            restorer: 0x9999,
            mask: u64::MAX,
        };
        let out = fix_action(act, 0x5555);
        assert_eq!(out.restorer, 0x5555);
        assert_ne!(out.flags & SA_RESTORER, 0);
        assert_ne!(out.flags & libc::SA_SIGINFO as u64, 0);
        assert_eq!(out.mask & bit(libc::SIGSYS), 0);
        assert_eq!(out.mask | bit(libc::SIGSYS), u64::MAX);
    }

    #[test]
    fn a_program_mask_loses_sigsys_and_glibc_internal_signals_only() {
        let all = program_mask(u64::MAX);
        // glibc's own numbering: SIGCANCEL and SIGSETXID sit just below
        // the SIGRTMIN it hands to programs.
        let rtmin = libc::SIGRTMIN();
        for sig in [libc::SIGSYS, rtmin - 2, rtmin - 1] {
            assert_eq!(all & bit(sig), 0, "signal {sig}");
        }
        assert_eq!(
            all | bit(libc::SIGSYS) | bit(rtmin - 2) | bit(rtmin - 1),
            u64::MAX
        );
        assert_eq!(program_mask(bit(libc::SIGCHLD)), bit(libc::SIGCHLD));
    }

    #[test]
    fn default_and_ignore_keep_their_restorer() {
        for h in [libc::SIG_DFL, libc::SIG_IGN] {
            let act = KSigaction {
                handler: h,
                flags: 0,
                restorer: 0,
                mask: bit(libc::SIGSYS) | bit(libc::SIGINT),
            };
            let out = fix_action(act, 0x5555);
            assert_eq!(out.restorer, 0);
            assert_eq!(out.flags, 0);
            assert_eq!(out.mask, bit(libc::SIGINT));
        }
    }

    #[test]
    fn virtual_sigsys_action_round_trips() {
        let v = VirtualAction::new();
        assert_eq!(v.get().handler, libc::SIG_DFL);
        let a = KSigaction {
            handler: 42,
            flags: 7,
            restorer: 9,
            mask: 3,
        };
        v.set(a);
        assert_eq!(v.get(), a);
    }

    #[test]
    fn kernel_sigaction_layout_matches_the_abi() {
        assert_eq!(core::mem::size_of::<KSigaction>(), 32);
        assert_eq!(core::mem::offset_of!(KSigaction, restorer), 16);
    }

    #[test]
    fn mask_positions_follow_the_syscall_abi() {
        assert_eq!(mask_arg(libc::SYS_rt_sigprocmask), Some((1, 3)));
        assert_eq!(mask_arg(libc::SYS_ppoll), Some((3, 4)));
        assert_eq!(mask_arg(libc::SYS_read), None);
    }
}
