//! libatoll: the `LD_PRELOAD` library that routes programs' system calls
//! to atoll.
//!
//! Layers, top to bottom:
//! * `wrappers` — exported libc entry points (`open`, `read`, `stat`, …):
//!   the fast path. Each turns its call into `(nr, args)`, asks the client
//!   and either returns the client's answer or calls the real libc function.
//! * `sigsys` — the exhaustive net: Syscall User Dispatch turns every other
//!   system call issued outside this library (glibc internals, `syscall()`,
//!   inline `syscall` instructions) into a SIGSYS, handled here; also the
//!   clone trampoline and the signal plumbing (`sigfix`) that keeps SIGSYS
//!   deliverable, and `sigdefer`, which runs program handlers as program
//!   code: at once, or deferred to the boundary when atoll code holds
//!   something (the kernel's `-ERESTARTSYS` model), delivered there in the
//!   program's own frame (`retframe` for a wrapper's return).
//! * `selector` — the per-thread SUD selector byte, which doubles as the
//!   "atoll code is running on this thread" flag; `region` finds our own
//!   text (always allowed by SUD).
//! * `rewrite` — sites whose `syscall` trapped are rewritten, the first
//!   time, into calls of atoll's entry (no signal afterwards), and
//!   remembered by the instance, so that later program images rewrite them
//!   at start, before they trap.
//! * `client` — the single door to `atoll-client` (mode, dispatch, fork
//!   hooks); `stack` runs the client's work on atoll's own stack; `stats`
//!   counts traps; `raw` issues system calls from our text; `altstack`
//!   makes atoll's stack the kernel's alternate signal stack (SIGSYS
//!   frames land there) and keeps the program's `sigaltstack` virtual.
//!
//! Relies on: `atoll-client` (what a system call means for atoll), glibc's
//! dynamic loader (`dlsym(RTLD_NEXT)`, `dl_iterate_phdr`), Linux ≥ 5.11 SUD.
//! Called by: every process started by `atoll run`, through `LD_PRELOAD`;
//! the constructor below runs before `main`.

mod altstack;
mod client;
mod raw;
mod region;
mod remote;
// Its entry, `finish`, is the wrappers' (not built for unit tests).
#[cfg_attr(test, allow(dead_code))]
mod retframe;
mod rewrite;
mod selector;
mod sigdefer;
mod sigfix;
mod sigsys;
mod stack;
mod stats;
#[cfg(not(test))]
mod wrappers;

use client::Mode;
use selector::AtollGuard;

/// `ATOLL_SUD_SELFTEST=1`: switch SUD and the wrappers on without an
/// instance, answering every call `Host` (tests of the trap machinery).
pub const ENV_SELFTEST: &str = "ATOLL_SUD_SELFTEST";
/// `ATOLL_TRAP_STATS=FILE`: append per-process trap counts to FILE.
pub const ENV_TRAP_STATS: &str = "ATOLL_TRAP_STATS";
/// `ATOLL_DEBUG=1`: log traps and set-up to stderr.
pub const ENV_DEBUG: &str = "ATOLL_DEBUG";
/// Fault injection for tests: a system call number whose dispatch panics
/// inside the client (it must become `EIO`, the program going on).
pub const ENV_PANIC_ON: &str = "ATOLL_CLIENT_PANIC_ON";

/// Read an environment variable without allocating.
#[cfg_attr(test, allow(dead_code))]
fn env(name: &str) -> Option<&'static [u8]> {
    let mut buf = [0u8; 64];
    buf[..name.len()].copy_from_slice(name.as_bytes());
    // SAFETY: `buf` is NUL-terminated; getenv's result points into the
    // environment, which this library never modifies.
    let p = unsafe { libc::getenv(buf.as_ptr().cast()) };
    if p.is_null() {
        None
    } else {
        // SAFETY: getenv returns a NUL-terminated string.
        Some(unsafe { core::ffi::CStr::from_ptr(p) }.to_bytes())
    }
}

/// Decide the mode, join the instance, and arm SUD for the main thread.
#[cfg_attr(test, allow(dead_code))]
fn start() {
    // Everything below is atoll code: our own libc calls must not be
    // dispatched (the wrappers see ALLOW and go straight to libc).
    let _guard = AtollGuard::enter();
    if env(ENV_DEBUG) == Some(b"1") {
        sigsys::DEBUG.store(true, core::sync::atomic::Ordering::Relaxed);
    }
    let mode = if env(atoll_proto::boot::ENV_SOCKET).is_some() {
        // Before the client's own exit report is registered, so that it
        // runs after it (`atexit` handlers run last first).
        // SAFETY: registering a plain `extern "C" fn()` with no state.
        unsafe { libc::atexit(leave_quietly) };
        if client::init() {
            Mode::Client
        } else {
            Mode::Off
        }
    } else if env(ENV_SELFTEST) == Some(b"1") {
        Mode::SelfTest
    } else {
        Mode::Off
    };
    if mode == Mode::Off {
        return;
    }
    if let Some(path) = env(ENV_TRAP_STATS) {
        stats::set_path(path);
    }
    if let Some(nr) = env(ENV_PANIC_ON) {
        client::set_panic_on(nr);
    }
    client::set_mode(mode);
    if under_valgrind() {
        // valgrind runs the program on its own CPU emulator, whose system
        // calls come from valgrind's text: SUD would trap valgrind itself.
        // The wrappers still serve the program.
        sigsys::debug(&[b"running under valgrind; SUD off"], &[]);
        return;
    }
    let Some((start, end)) = region::exec_segment_containing(start as *const () as usize) else {
        sigsys::debug(&[b"own text segment not found; SUD off"], &[]);
        return;
    };
    selector::set_region(start, end - start);
    let r = sigsys::install();
    if r != 0 {
        sigsys::debug(&[b"installing the SIGSYS handler failed; SUD off"], &[r]);
        return;
    }
    // SIGSYS frames go to atoll's stack, not the program's (`altstack`).
    let r = altstack::arm();
    if r != 0 {
        sigsys::debug(&[b"arming atoll's alternate signal stack failed"], &[r]);
    }
    let r = selector::enable_sud();
    sigsys::debug(&[b"SUD enabled (0 = ok)"], &[r, mode as i64]);
    if r == 0 && mode == Mode::Client {
        sigdefer::claim_faults();
    }
    if r == 0 {
        let on = rewrite::configure(wants_rewriting(mode, env(rewrite::ENV_REWRITE)));
        sigsys::debug(&[b"rewriting trapped sites (1 = on)"], &[on as i64]);
        // The sites earlier images rewrote, rewritten now, before they
        // trap (`rewrite::eager`).
        if on && client::remembers_syscall_sites() {
            let socket = env(atoll_proto::boot::ENV_SOCKET).unwrap_or_default();
            if rewrite::remember_beside(socket) {
                rewrite::at_start();
            }
        }
    }
}

/// The last `atexit` handler of an atoll program (registered first): when
/// the process holds nothing of atoll any more (no atoll descriptor,
/// mapping or copy to write back; the client's own exit report has just
/// gone out), this thread's remaining system calls are let through to
/// Linux: only stdio's flush of host descriptors and `exit_group` are left,
/// and the trap `exit_group` would cost, in every process that ends with
/// `exit`, is saved. The trap counts go out now, as the trap would have
/// sent them. `_exit` (no handlers) still traps and reports there.
extern "C" fn leave_quietly() {
    if client::mode() != client::Mode::Client || !client::nothing_left_at_exit() {
        return;
    }
    stats::flush();
    selector::set(selector::ALLOW);
}

/// Rewrite trapped sites in this process? `ATOLL_SYSCALL_REWRITE=off`
/// says no for this program; otherwise a client follows its instance
/// (`--syscall-sites`), and the self-test only when asked with `auto`.
#[cfg_attr(test, allow(dead_code))]
fn wants_rewriting(mode: Mode, setting: Option<&[u8]>) -> bool {
    match (setting, mode) {
        (Some(b"off"), _) => false,
        (_, Mode::Client) => client::rewrites_syscall_sites(),
        (Some(b"auto"), Mode::SelfTest) => true,
        _ => false,
    }
}

/// Is this process a program run by valgrind? Its core preload is then in
/// `LD_PRELOAD` (valgrind removes it again for children it does not trace).
fn under_valgrind() -> bool {
    env("LD_PRELOAD").is_some_and(|v| v.windows(14).any(|w| w == b"vgpreload_core"))
}

#[cfg_attr(test, allow(dead_code))]
extern "C" fn atoll_preload_init() {
    start();
}

// Run `start` from `.init_array`, i.e. before the program's `main` (and
// not in this crate's own unit-test binary).
#[cfg(not(test))]
#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = atoll_preload_init;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_wins_and_the_self_test_rewrites_only_when_asked() {
        assert!(!wants_rewriting(Mode::Client, Some(b"off")));
        assert!(!wants_rewriting(Mode::SelfTest, Some(b"off")));
        assert!(wants_rewriting(Mode::SelfTest, Some(b"auto")));
        assert!(!wants_rewriting(Mode::SelfTest, None));
        // No instance in this test binary: a client would ask it.
        assert!(!wants_rewriting(Mode::Client, Some(b"auto")));
    }
}
