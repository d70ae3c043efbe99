//! The client's typed error, mapped to an errno exactly once, at the
//! `dispatch` boundary.

use atoll_msg::MsgError;
use atoll_proto::WireError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A POSIX error decided by a server or by a local check.
    #[error("errno {0}")]
    Errno(i32),
    /// The messaging layer failed (peer gone, corrupt ring).
    #[error("messaging: {0}")]
    Msg(#[from] MsgError),
    /// A frame did not encode or decode.
    #[error("wire: {0}")]
    Wire(#[from] WireError),
    /// A server answered with a reply that does not fit the request.
    #[error("unexpected reply to {0}")]
    Protocol(&'static str),
    /// The bootstrap exchange failed.
    #[error("bootstrap: {0}")]
    Boot(String),
}

impl Error {
    /// The errno a program sees for this error.
    pub fn errno(&self) -> i32 {
        match self {
            // A stale route nothing could re-route (`adapt`): try again.
            Error::Errno(e) if *e == atoll_proto::Errno::EMODE.0 => libc::EAGAIN,
            Error::Errno(e) => *e,
            Error::Msg(_) => libc::EIO,
            Error::Wire(WireError::TooLarge) => libc::E2BIG,
            Error::Wire(_) | Error::Protocol(_) => libc::EPROTO,
            Error::Boot(_) => libc::EIO,
        }
    }
}

impl From<atoll_proto::Errno> for Error {
    fn from(e: atoll_proto::Errno) -> Self {
        Error::Errno(e.0)
    }
}

impl From<i32> for Error {
    fn from(e: i32) -> Self {
        Error::Errno(e)
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Errno(e.raw_os_error().unwrap_or(libc::EIO))
    }
}

impl From<rustix::io::Errno> for Error {
    fn from(e: rustix::io::Errno) -> Self {
        Error::Errno(e.raw_os_error())
    }
}

pub type Result<T> = core::result::Result<T, Error>;

/// Shorthand: fail with `errno`.
pub fn err<T>(errno: i32) -> Result<T> {
    Err(Error::Errno(errno))
}
