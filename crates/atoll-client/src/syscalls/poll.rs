//! Pipes and readiness: `pipe`, `pipe2`, `poll`, `ppoll`, `select`,
//! `pselect6`, the `epoll` calls.
//!
//! Anonymous pipes and notification queues are atoll's (`pipe`, served in
//! shared memory); the pipe layer answers these calls first (the rows'
//! `pipe` flag), and what it leaves is answered here or by Linux.

use libc::{timespec, SYS_poll, SYS_ppoll, ENOENT, EPERM, EPOLL_CTL_ADD};

use super::common::{done, fdarg};
use crate::error::{err, Result};
use crate::session::Client;
use crate::{fdtable, file, intr, pipe, Out};

/// What the pipe layer (answering first) left is Linux's.
pub(super) fn host(_: &'static Client, _: i64, _: &[u64; 6]) -> Result<Out> {
    Ok(Out::Host)
}

/// `pipe`, `pipe2` (when atoll serves pipes), `select`, `pselect6`,
/// `epoll_wait` and the like (while a pipe is atoll's).
pub(super) fn pipe_concerns(_: &Client, nr: i64, _: &[u64; 6]) -> bool {
    pipe::may_concern(nr)
}

/// `poll`, `ppoll` over atoll descriptors: atoll's are ready at once (a
/// regular file always is), the others are asked of Linux.
pub(super) fn poll(_: &'static Client, nr: i64, a: &[u64; 6]) -> Result<Out> {
    if !fdtable::any() {
        return Ok(Out::Host);
    }
    done(file::poll(a[0], a[1], |fds, n, ready| {
        let zero = timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `fds` is our own pollfd copy of length n; the
        // timeout/sigmask pointers are the program's (or our zero).
        unsafe {
            if nr == SYS_poll {
                let t = if ready { 0 } else { a[2] };
                intr::host_syscall6(SYS_poll, [fds, n, t, 0, 0, 0])
            } else {
                let ts = if ready {
                    &zero as *const _ as u64
                } else {
                    a[2]
                };
                intr::host_syscall6(SYS_ppoll, [fds, n, ts, a[3], a[4], 0])
            }
        }
    })?)
}

/// `poll`: while the process holds any atoll descriptor.
pub(super) fn poll_concerns(_: &Client, _: i64, _: &[u64; 6]) -> bool {
    fdtable::any()
}

/// `epoll_ctl` of an atoll descriptor that is no pipe.
pub(super) fn epoll_ctl(_: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    if !fdtable::is_atoll(fdarg(a[2])) {
        return Ok(Out::Host);
    }
    // Regular files cannot be watched (Linux answers EPERM).
    if a[1] as i32 == EPOLL_CTL_ADD {
        err(EPERM)
    } else {
        err(ENOENT)
    }
}
