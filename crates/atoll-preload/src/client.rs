//! The one door from the interposition machinery to `atoll-client`.
//!
//! libatoll runs in one of three modes, fixed by the constructor:
//!
//! * [`Mode::Off`] — not an atoll client (no `ATOLL_SOCKET`): no SUD, every
//!   wrapper calls the real libc function at once. A program must behave
//!   exactly as without the library.
//! * [`Mode::SelfTest`] — `ATOLL_SUD_SELFTEST=1` without an instance: SUD and
//!   every wrapper are live, but every call is answered `Host`. Exercises
//!   the trap machinery (signals, clone, fork, threads) on real programs.
//! * [`Mode::Client`] — attached to an instance: calls go to
//!   `atoll_client::dispatch`.
//!
//! A panic inside the client must not cross an `extern "C"` boundary (that
//! aborts the program), so every call is wrapped in `catch_unwind` and a
//! panic becomes `EIO` for that one system call.

use core::sync::atomic::{AtomicI64, AtomicU8, Ordering};
use std::panic::{catch_unwind, AssertUnwindSafe};

pub use atoll_client::Dispatch;
// Program memory read and written with the kernel's fault handling
// (`EFAULT`, never a fault); usable in every mode.
#[cfg_attr(test, allow(unused_imports))]
pub use atoll_client::{read_user, user_path, write_user};

use crate::sigdefer;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Mode {
    Off = 0,
    SelfTest = 1,
    Client = 2,
}

static MODE: AtomicU8 = AtomicU8::new(Mode::Off as u8);

/// Fault injection for tests (`ENV_PANIC_ON`): the client panics while
/// dispatching this system call number, so a test can check that the
/// panic unwinds to `catch_unwind` and becomes `EIO`. -1: never.
static PANIC_ON: AtomicI64 = AtomicI64::new(-1);

/// Set `PANIC_ON` from the environment's `ENV_PANIC_ON` value.
pub fn set_panic_on(value: &[u8]) {
    let nr = core::str::from_utf8(value)
        .ok()
        .and_then(|s| s.parse::<i64>().ok());
    PANIC_ON.store(nr.unwrap_or(-1), Ordering::Relaxed);
}

#[inline]
pub fn mode() -> Mode {
    match MODE.load(Ordering::Relaxed) {
        1 => Mode::SelfTest,
        2 => Mode::Client,
        _ => Mode::Off,
    }
}

pub fn set_mode(m: Mode) {
    MODE.store(m as u8, Ordering::Relaxed);
}

/// Join the instance if this process belongs to one. Called once by the
/// constructor, under an `AtollGuard`.
pub fn init() -> bool {
    report_panics_in_one_line();
    atoll_client::intr::set_pending_hook(crate::sigdefer::client_pending_hook);
    atoll_client::intr::set_deferring_hook(crate::sigdefer::client_defers_hook);
    catch_unwind(atoll_client::init).unwrap_or(false)
}

/// A panic inside the client is told in one line on stderr, written by a
/// raw system call; the call then fails with `EIO` (`dispatch`). The
/// standard hook would take stderr's lock, which the interrupted program
/// may hold, and with `RUST_BACKTRACE` set it walks the stack through
/// frames with no unwind tables (a trapped or rewritten site, the switch
/// to atoll's stack), where the walk can fault. The hook is this library's
/// own: a Rust program's panics go through its own standard library.
fn report_panics_in_one_line() {
    std::panic::set_hook(Box::new(|info| {
        use core::fmt::Write;
        let mut line = crate::raw::StackBuf::<512>::default();
        let _ = write!(
            line,
            "atoll: internal error, the call fails with EIO: {info}"
        );
        line.push(b"\n");
        crate::raw::write_all(2, line.as_bytes());
    }));
}

/// Is nothing of atoll left in this process as it exits (see
/// `atoll_client::nothing_left_at_exit`)? A panic says no.
pub fn nothing_left_at_exit() -> bool {
    catch_unwind(atoll_client::nothing_left_at_exit).unwrap_or(false)
}

/// Does the instance want trapped sites rewritten (`--syscall-sites`)?
#[cfg_attr(test, allow(dead_code))]
pub fn rewrites_syscall_sites() -> bool {
    mode() == Mode::Client && catch_unwind(atoll_client::rewrites_syscall_sites).unwrap_or(false)
}

/// Does the instance share rewritten sites (not `--without
/// remembered-sites`)?
#[cfg_attr(test, allow(dead_code))]
pub fn remembers_syscall_sites() -> bool {
    mode() == Mode::Client && catch_unwind(atoll_client::remembers_syscall_sites).unwrap_or(false)
}

/// Cheap pre-filter for the trap path (see `atoll_client::may_concern`).
/// Hot path.
#[inline]
pub fn may_concern(nr: i64, args: &[u64; 6]) -> bool {
    match mode() {
        Mode::Client => catch_unwind(|| atoll_client::may_concern(nr, args)).unwrap_or(false),
        _ => false,
    }
}

/// Emulate or pass on system call `nr`. Hot path.
///
/// The end of a dispatch is a boundary back to program code: the client
/// holds nothing any more, so program signals deferred meanwhile are
/// delivered here (before a host call that could block, too), and a call
/// that a signal cut short with `ERESTARTSYS` is issued again or fails
/// with `EINTR`, by the handlers' `SA_RESTART` (see `sigdefer`); one cut
/// short with `ERESTARTNOINTR` (an exec) is always issued again.
#[inline]
pub fn dispatch(nr: i64, args: &[u64; 6]) -> Dispatch {
    if mode() != Mode::Client {
        return Dispatch::Host;
    }
    let restart_code = Dispatch::Done(-(atoll_client::intr::ERESTARTSYS as i64));
    let always_restart = Dispatch::Done(-(atoll_client::intr::ERESTARTNOINTR as i64));
    loop {
        // On atoll's own stack: the program's may be a small alternate
        // signal stack or a goroutine's (see `stack`).
        let r = crate::stack::run(|| {
            catch_unwind(|| {
                if nr == PANIC_ON.load(Ordering::Relaxed) {
                    panic!("atoll: injected panic in system call {nr}");
                }
                atoll_client::dispatch(nr, args)
            })
            .unwrap_or(Dispatch::Done(-(libc::EIO as i64)))
        });
        let interrupted = r == restart_code;
        let again = r == always_restart;
        if !interrupted && !again && !sigdefer::any_pending() {
            return r;
        }
        match sigdefer::frame_mode() {
            // The SIGSYS handler delivers them in the program's frame and
            // restarts the call there, by its `syscall` instruction.
            sigdefer::FrameMode::Trap => return r,
            // The wrapper delivers them in the program's frame as it
            // returns: a call that ended, or one that will not restart.
            sigdefer::FrameMode::Return if !interrupted && !again => return r,
            sigdefer::FrameMode::Return if interrupted && !sigdefer::pending_would_restart() => {
                return Dispatch::Done(-(libc::EINTR as i64))
            }
            _ => {}
        }
        let restart = sigdefer::deliver_pending(sigdefer::temporary_mask(nr, args));
        match (interrupted || again, restart || again) {
            (true, true) => continue,
            (true, false) => return Dispatch::Done(-(libc::EINTR as i64)),
            (false, _) => return r,
        }
    }
}

/// A host-path call the kernel answered `ENOENT`: made again in atoll if a
/// host symlink leads its path into the mount (`atoll_client::hostlink`);
/// `None` when the `ENOENT` stands. Only on that error path.
pub fn through_host_link(nr: i64, args: &[u64; 6]) -> Option<i64> {
    if mode() != Mode::Client {
        return None;
    }
    let (_buf, again) = catch_unwind(|| atoll_client::through_host_link(nr, args)).ok()??;
    match dispatch(nr, &again) {
        Dispatch::Done(v) => Some(v),
        Dispatch::Host => None,
    }
}

/// Does `[addr, addr + len)` hold pages of an atoll file's mapping (see
/// `atoll_client::maps_atoll_pages`)?
#[cfg_attr(test, allow(dead_code))] // used by the wrappers only
#[inline]
pub fn maps_atoll_pages(addr: u64, len: u64) -> bool {
    match mode() {
        Mode::Client => catch_unwind(|| atoll_client::maps_atoll_pages(addr, len)).unwrap_or(true),
        _ => false,
    }
}

/// A `SIGBUS` at `addr` in program code: a page of an atoll mapping that
/// its file now covers is mapped, and true returned (see
/// `atoll_client::resolve_fault`).
#[cfg_attr(test, allow(dead_code))]
pub fn resolve_fault(addr: u64) -> bool {
    match mode() {
        Mode::Client => catch_unwind(|| atoll_client::resolve_fault(addr)).unwrap_or(false),
        _ => false,
    }
}

/// Client state carried across a fork (nothing in self-test mode).
pub struct ForkPrep(Option<atoll_client::ForkPrep>);

/// Before a fork-like clone: let the client create the child's session.
/// `Err(errno)` aborts the fork.
pub fn fork_prepare() -> Result<ForkPrep, i32> {
    if mode() != Mode::Client {
        return Ok(ForkPrep(None));
    }
    match catch_unwind(atoll_client::fork_prepare) {
        Ok(Ok(p)) => Ok(ForkPrep(p)),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(libc::EIO),
    }
}

/// In the parent after a fork-like clone, also when it failed
/// (`child < 0`: the client then ends the child session).
pub fn fork_parent(prep: ForkPrep, child: i64) {
    if let ForkPrep(Some(p)) = prep {
        let _ = catch_unwind(AssertUnwindSafe(|| atoll_client::fork_parent(p, child)));
    }
}

pub fn fork_child(prep: ForkPrep) {
    crate::rewrite::after_fork_in_child();
    if let ForkPrep(Some(p)) = prep {
        let _ = catch_unwind(AssertUnwindSafe(|| atoll_client::fork_child(p)));
    }
}

/// What `posix_spawn` should run instead of what the program asked for
/// (an atoll program, the environment that keeps the child a client, the
/// child session's socket). Only meaningful in [`Mode::Client`].
#[cfg_attr(test, allow(unused_imports))]
pub use atoll_client::ExecPlan;

/// Prepare a spawn of `path` (see `atoll_client::prepare_exec`). Errors are
/// errno values.
#[cfg_attr(test, allow(dead_code))]
pub fn prepare_exec(
    path: &core::ffi::CStr,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
) -> Result<ExecPlan, i32> {
    catch_unwind(|| atoll_client::prepare_exec(path, argv, envp)).unwrap_or(Err(libc::EIO))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_an_instance_everything_goes_to_the_host() {
        // Mode is Off in the test binary (no constructor ran).
        assert_eq!(mode(), Mode::Off);
        assert_eq!(dispatch(libc::SYS_openat, &[0; 6]), Dispatch::Host);
        assert!(!may_concern(libc::SYS_read, &[0; 6]));
        assert!(fork_prepare().is_ok());
    }
}
