//! Descriptors of atoll's that an `execve` leaves open for the new image
//! (the session socket, the control block, the buffer cache), and how a
//! failed exec takes them back.
//!
//! Normally each is a duplicate without `FD_CLOEXEC` at a number of
//! atoll's own range (≥ [`session::PRIVATE_FD_MIN`]), where the program's
//! descriptors never are, and a failed exec closes the duplicate. When the
//! open-files limit is below that range (`ulimit -n 10` before an exec:
//! `F_DUPFD` there is `EINVAL`), a duplicate could only take one of the
//! few numbers the program has, and an exec must neither fail for it nor
//! leave the new program fewer descriptors than Linux would. The original
//! then goes across itself: it already lies in atoll's range (made before
//! the limit was lowered, and Linux keeps descriptors above a lowered
//! limit open), so its `FD_CLOEXEC` is cleared for the exec and set again
//! if the exec fails.

use std::os::fd::{AsRawFd, IntoRawFd, OwnedFd, RawFd};

use crate::session;
use crate::sys;

/// One descriptor the new image inherits; dropping it (a failed exec)
/// undoes what was done for the exec.
pub(crate) struct Inherited {
    fd: RawFd,
    /// A copy made for the exec (closed on drop), or atoll's own
    /// descriptor with `FD_CLOEXEC` cleared (set again on drop).
    copy: bool,
}

impl Inherited {
    /// Leave atoll's descriptor `fd` open across the exec; `None` when it
    /// is not open.
    pub(crate) fn of(fd: RawFd) -> Option<Inherited> {
        let n = sys::fcntl_int(fd, libc::F_DUPFD, session::PRIVATE_FD_MIN as i64);
        if n >= 0 {
            return Some(Inherited {
                fd: n as RawFd,
                copy: true,
            });
        }
        if sys::fcntl_int(fd, libc::F_SETFD, 0) < 0 {
            return None;
        }
        Some(Inherited { fd, copy: false })
    }

    /// A descriptor made for this exec (without `FD_CLOEXEC`): closed if
    /// the exec fails.
    pub(crate) fn made(fd: OwnedFd) -> Inherited {
        Inherited {
            fd: fd.into_raw_fd(),
            copy: true,
        }
    }
}

impl AsRawFd for Inherited {
    fn as_raw_fd(&self) -> RawFd {
        self.fd
    }
}

impl Drop for Inherited {
    fn drop(&mut self) {
        if self.copy {
            sys::close(self.fd);
        } else {
            sys::fcntl_int(self.fd, libc::F_SETFD, libc::FD_CLOEXEC as i64);
        }
    }
}
