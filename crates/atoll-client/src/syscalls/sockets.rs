//! Unix-domain socket names in the mount: `bind`, `connect`, `sendto`,
//! `sendmsg` of a path under `/atoll`, and the addresses the kernel
//! reports back (`getsockname`, `getpeername`, `accept`, `accept4`,
//! `recvfrom`, `recvmsg`). The sockets stay the kernel's (`unixsock`).

use crate::error::Result;
use crate::session::Client;
use crate::{unixsock, Out};

pub(super) fn socket(c: &'static Client, nr: i64, a: &[u64; 6]) -> Result<Out> {
    Ok(unixsock::route(c, nr, a)?.unwrap_or(Out::Host))
}

pub(super) fn socket_concerns(c: &Client, nr: i64, a: &[u64; 6]) -> bool {
    unixsock::may_concern(c, nr, a)
}
