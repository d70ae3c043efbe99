//! What the proxy of a program started on another node asks of its own
//! client library (`atoll_client::remotefds`; the proxy is `atoll
//! __remote-spawn`, an ordinary atoll client that finds these with
//! `dlsym`): the atoll descriptors the program inherits, and a reference
//! to each of their descriptions for the program's session.
//!
//! Entered from program code like a wrapper: the selector lets the
//! client's own system calls through, and a panic in the client is an
//! answer of "nothing", never an unwind across the C boundary.

use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::client::{self, Mode};
use crate::selector::AtollGuard;

/// Write the inheritable atoll descriptors (`ATOLL_STATE` text of `f:`
/// entries) into `out[..cap]`. Returns the text's length (nothing is
/// written when it exceeds `cap`: ask again with room for it), or -1 when
/// this process is no atoll client.
///
/// # Safety
/// `out` must point to `cap` writable bytes (or be null with `cap == 0`).
#[no_mangle]
pub unsafe extern "C" fn atoll_inheritable_fds(out: *mut u8, cap: usize) -> isize {
    if client::mode() != Mode::Client {
        return -1;
    }
    let _guard = AtollGuard::enter();
    let Ok(Some(text)) = catch_unwind(atoll_client::remotefds::inheritable) else {
        return -1;
    };
    if text.len() <= cap && !out.is_null() {
        // SAFETY: the caller gives `cap` writable bytes at `out`, and the
        // text fits.
        unsafe { core::ptr::copy_nonoverlapping(text.as_ptr(), out, text.len()) };
    }
    text.len() as isize
}

/// Give session `to` a reference to the description of each of
/// `fds[..n]`; the descriptors it now holds are moved to the front of
/// `fds`, and their number returned (-1: no client).
///
/// # Safety
/// `fds` must point to `n` writable `i32`s (or be null with `n == 0`).
#[no_mangle]
pub unsafe extern "C" fn atoll_share_fds(to: u64, fds: *mut i32, n: usize) -> isize {
    if client::mode() != Mode::Client {
        return -1;
    }
    if n == 0 || fds.is_null() {
        return 0;
    }
    // SAFETY: the caller gives `n` writable descriptors at `fds`.
    let fds = unsafe { core::slice::from_raw_parts_mut(fds, n) };
    let _guard = AtollGuard::enter();
    let asked = fds.to_vec();
    let Ok(done) = catch_unwind(AssertUnwindSafe(|| {
        atoll_client::remotefds::share_with(to, &asked)
    })) else {
        return -1;
    };
    fds[..done.len()].copy_from_slice(&done);
    done.len() as isize
}
