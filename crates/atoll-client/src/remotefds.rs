//! Atoll descriptors a program started on another node inherits (fos
//! §4.2 spawning), the proxy's side (`atoll_cli` `node/remote.rs`).
//!
//! An atoll descriptor is no host object: it names an open description a
//! file server holds, which every node reaches. So a remote program gets
//! the *same* description, as a new image does after a local `execve`
//! (`exec/handover.rs`): the proxy, which inherited the caller's table by
//! that very hand-over, describes its inheritable descriptors
//! ([`inheritable`], carried in the spawn request), and once the node has
//! made the program's session it gives that session a reference to each
//! description ([`share_with`], `Request::Share`). The server counts it
//! like any other: the description lives while the proxy or the program
//! holds it, and the program's reference goes when its session ends (its
//! exit, a kill, its node's death: the head closes the sessions of a lost
//! peer).
//!
//! Stdio is carried too when it is an atoll file or pipe (the program
//! then reads and writes it as the caller would, sharing its offset; a
//! host stdin or stdout is relayed as bytes by the proxy). Not carried:
//! `FD_CLOEXEC` descriptors (a local exec closes them too), the client's
//! own private descriptors, and notification queues (`inotify`,
//! `fanotify`: their watches live in the process, not on the servers).

use atoll_proto::SessionId;

use crate::fdtable;
use crate::forkshare::Ledger;
use crate::session::{self, LazyLane};
use crate::state::{FdState, State};
use crate::sys;

/// The descriptors a remote program would inherit from this process, as
/// `ATOLL_STATE` text holding only `f:` entries (placeholders left 0: the
/// node makes its own). `None` when this process is no client.
pub fn inheritable() -> Option<String> {
    let c = session::client()?;
    let lane = LazyLane::new(c);
    // Offsets kept here go to the servers first (Hare §3.5.1), as before
    // a local exec: the program reads them there.
    crate::hybrid::share_all(c, &lane);
    let mut st = State::default();
    for fd in fdtable::fds() {
        if c.is_private_fd(fd) {
            continue;
        }
        let fdflags = sys::fcntl_int(fd, libc::F_GETFD, 0);
        if fdflags < 0 || fdflags & libc::FD_CLOEXEC as i64 != 0 {
            continue;
        }
        let Some(d) = fdtable::get(fd as i64) else {
            continue;
        };
        if crate::inotify::is_queue(&d) {
            continue;
        }
        st.fds.push(FdState {
            fd,
            desc: d.desc().0,
            ino: d.ino().0,
            flags: d.flags(),
            ftype: fdtable::ftype_code(d.ftype()),
            cookie: d.cookie().load(core::sync::atomic::Ordering::Relaxed),
            placeholder: (0, 0),
            path: d.path().map(<[u8]>::to_vec),
        });
    }
    Some(st.encode())
}

/// Give session `to` (the remote program's, made by its node) one
/// reference to the description of each of `fds` (one per description,
/// however many of `fds` name it, as the exec hand-over does). Returns
/// the descriptors whose description `to` now holds.
pub fn share_with(to: u64, fds: &[i32]) -> Vec<i32> {
    let Some(c) = session::client() else {
        return Vec::new();
    };
    let lane = LazyLane::new(c);
    let mut given = Ledger::new(SessionId(to));
    let mut shared = Vec::new();
    let mut done = Vec::new();
    for &fd in fds {
        let Some(d) = fdtable::get(fd as i64) else {
            continue;
        };
        let desc = d.desc();
        if !shared.contains(&desc) {
            let Ok(l) = lane.get() else { break };
            if given.share(c, l, desc).is_err() {
                continue;
            }
            shared.push(desc);
        }
        done.push(fd);
    }
    done
}

/// Highest descriptor number (+1) a remote program can inherit: the
/// numbers above are the client's own (session socket, placeholder
/// template, instance memfds).
pub const FD_LIMIT: i32 = session::PRIVATE_FD_MIN;

/// Is a carried type code ([`inheritable`]'s `ftype`) a pipe's or FIFO's?
pub fn is_pipe_code(code: u32) -> bool {
    fdtable::ftype_from_code(code) == atoll_proto::FileType::Fifo
}

/// The node's side: a session for a program it is about to start, made
/// on the boot socket at `socket_path`. Made as a forked child's is
/// (`Fork` on a connection attached for the purpose, which then ends
/// unknown to any server): a session the servers learn of only by the
/// references given to it must still be closed at them when its socket
/// closes, which the boot thread does for a `Fork`'s child, not for a
/// lazily attached session that never took a lane. Returns the session's
/// socket (`FD_CLOEXEC`, at a number ≥ [`FD_LIMIT`], to be inherited as
/// `ATOLL_SESSION_FD`) and its id.
pub fn new_program_session(
    socket_path: &str,
) -> core::result::Result<(std::os::fd::OwnedFd, u64), String> {
    use atoll_proto::boot::{BootReply, BootRequest};
    use std::os::fd::{AsFd, FromRawFd, IntoRawFd};

    let e = |x: &dyn core::fmt::Display| x.to_string();
    let s = rustix::net::socket_with(
        rustix::net::AddressFamily::UNIX,
        rustix::net::SocketType::SEQPACKET,
        rustix::net::SocketFlags::CLOEXEC,
        None,
    )
    .map_err(|x| e(&x))?;
    let addr = rustix::net::SocketAddrUnix::new(socket_path).map_err(|x| e(&x))?;
    rustix::net::connect(&s, &addr).map_err(|x| e(&x))?;
    let pid = std::process::id();
    match session::boot_call(s.as_fd(), &BootRequest::AttachLazily { pid }) {
        Ok((BootReply::Attached { .. }, _instance)) => {}
        Ok((other, _)) => return Err(format!("attach answered {other:?}")),
        Err(x) => return Err(e(&x)),
    }
    let (child, mut fds) = match session::boot_call(s.as_fd(), &BootRequest::Fork) {
        Ok((BootReply::Forked { child }, fds)) => (child, fds),
        Ok((other, _)) => return Err(format!("fork answered {other:?}")),
        Err(x) => return Err(e(&x)),
    };
    if fds.len() != 1 {
        return Err(format!("fork sent {} descriptors", fds.len()));
    }
    let sock = fds.remove(0).into_raw_fd();
    let high = session::to_high(sock, FD_LIMIT);
    // SAFETY: `high` is the socket just received (or its duplicate, the
    // original closed), owned by no one else.
    let sock = unsafe { std::os::fd::OwnedFd::from_raw_fd(high) };
    Ok((sock, child.0))
}
