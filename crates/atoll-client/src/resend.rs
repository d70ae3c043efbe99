//! Requests sent again when their server's successor answers "not
//! applied" (`Errno::NOT_APPLIED`; fos §3.5: a server fault is invisible
//! to programs wherever it can be).
//!
//! A file server process that dies after taking a request from its ring
//! and before the request reached its journal left nothing of it in the
//! state its successor rebuilds from that journal; the successor says so
//! instead of `EIO` (server `takeover.rs`), and the call path sends the
//! same request again, under a new id, so a second answer to the old one
//! (a successor that died while answering, answered again by the next)
//! is stale and dropped. Bounded: after [`ATTEMPTS`] sends the call fails
//! with `EIO`, as it did before, and so does a request whose second send
//! would not be the first one's twin ([`resendable`]). The code never
//! reaches a program.

use atoll_proto::{Errno, Request};

use crate::error::{Error, Result};

/// Sends of one request at most (as `forkshare::again`).
pub const ATTEMPTS: usize = 4;

/// Is `r` the "not applied" answer?
fn not_applied<R>(r: &Result<R>) -> bool {
    matches!(r, Err(Error::Errno(e)) if *e == Errno::NOT_APPLIED.0)
}

/// `r`, with "not applied" as `EIO`: for replies read where the request
/// cannot be sent again (pipelined windows, broadcasts).
pub fn to_eio<R>(r: Result<R>) -> Result<R> {
    if not_applied(&r) {
        return Err(Error::Errno(libc::EIO));
    }
    r
}

/// May `req` be sent again after "not applied"? Its server's state holds
/// nothing of it, but some requests also move what lives outside that
/// state and survives the server: a pipe's header words and bytes in
/// shared memory (taken or given once), inotify events handed to their
/// queue. Those keep `EIO`.
pub fn resendable(req: &Request<'_>) -> bool {
    use Request::*;
    !matches!(
        req,
        Pipe { .. }
            | PipeHeader { .. }
            | PipeRead { .. }
            | PipeWrite { .. }
            | PipeState { .. }
            | PipeSetSize { .. }
            | InotifyInit { .. }
            | InotifyAddWatch { .. }
            | InotifyRmWatch { .. }
            | InotifyRegister { .. }
            | DnotifyRegister { .. }
            | InotifyModified { .. }
            | InotifyAccessed { .. }
            | InotifyNamed { .. }
    )
}

/// Run `exchange` (one send of `req` and the wait for its answer) again
/// while the answer is "not applied" and `req` is [`resendable`], at most
/// [`ATTEMPTS`] times; "not applied" left over is `EIO`.
pub fn resending<R>(req: &Request<'_>, mut exchange: impl FnMut() -> Result<R>) -> Result<R> {
    let again = resendable(req);
    let mut sends = 1;
    loop {
        let r = exchange();
        if !(again && not_applied(&r) && sends < ATTEMPTS) {
            return to_eio(r);
        }
        sends += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use atoll_proto::{DescId, InodeId};

    fn not_applied_answer<R>() -> Result<R> {
        Err(Error::Errno(Errno::NOT_APPLIED.0))
    }

    #[test]
    fn a_request_not_applied_is_sent_again_until_answered() {
        let lookup = Request::Lookup {
            dir: InodeId(1),
            name: b"f",
        };
        let mut sends = 0;
        let r = resending(&lookup, || {
            sends += 1;
            if sends < 3 {
                not_applied_answer()
            } else {
                Ok(sends)
            }
        });
        assert_eq!(r.unwrap(), 3);
    }

    #[test]
    fn not_applied_is_sent_only_so_often_then_eio() {
        let lookup = Request::GetAttr { ino: InodeId(1) };
        let mut sends = 0;
        let r = resending(&lookup, || {
            sends += 1;
            not_applied_answer::<()>()
        });
        assert!(matches!(r, Err(Error::Errno(libc::EIO))));
        assert_eq!(sends, ATTEMPTS);
    }

    #[test]
    fn other_answers_and_pipe_requests_are_not_sent_again() {
        let lookup = Request::GetAttr { ino: InodeId(1) };
        let mut sends = 0;
        let r: Result<()> = resending(&lookup, || {
            sends += 1;
            Err(Error::Errno(libc::EIO))
        });
        assert!(matches!(r, Err(Error::Errno(libc::EIO))));
        assert_eq!(sends, 1, "EIO is the server's word: not sent again here");
        let read = Request::PipeRead {
            desc: DescId(1),
            len: 1,
        };
        let mut sends = 0;
        let r = resending(&read, || {
            sends += 1;
            not_applied_answer::<()>()
        });
        assert!(matches!(r, Err(Error::Errno(libc::EIO))));
        assert_eq!(sends, 1, "what a pipe request moved is not the server's");
    }
}
