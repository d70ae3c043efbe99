//! Messages between a proxy (the process that called `execve`) and a
//! scheduling server (Hare §3.6.1, remote execution protocol).
//!
//! Transport: one `SOCK_SEQPACKET` connection per remote program to
//! `<runtime dir>/sched-<core>.sock`. Each packet is one postcard-encoded
//! message. The host descriptors the new image inherits (terminal, host
//! pipes, sockets, atoll placeholders, the child session's socket) ride
//! with the `Exec` packet as `SCM_RIGHTS`, in the order of
//! [`ExecSpec::fds`].
//!
//! ```text
//! proxy ──Exec(spec) + fds──▶ server      forks, configures, execs on its core
//!       ◀─Started{pid}──────              (or Failed{errno}: execve fails;
//!                                           Refused: nothing ran, exec locally)
//!       ──Signal(sig)──────▶              relayed with pidfd_send_signal
//!       ◀─Stopped{sig}──────              the program stopped: stop alike
//!       ──Stopping─────────▶              (acknowledged just before)
//!       ◀─Continued─────────              it ran on before we acted: don't
//!       ◀─Exited{code} | Killed{sig}      then both sides close
//! proxy hangs up early ──▶ server SIGKILLs the program (the proxy was killed)
//! ```
//!
//! A process that moves itself to a core and execs in place (`--exec-via
//! place`) sends one `Placed` datagram to `<runtime dir>/sched-<core>.place`
//! instead ([`send_placed`], [`recv_placed`]): no connection to make and
//! accept for a message that has no reply.

use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use serde::{Deserialize, Serialize};

/// Most descriptors one `Exec` may carry (Linux `SCM_MAX_FD` is 253).
pub const MAX_FDS: usize = 250;
/// Largest packet (the argument lists are not in it: `crate::args`).
pub const MAX_PACKET: usize = 192 * 1024;

/// What one passed descriptor is for.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum FdRole {
    /// Inherited by the new image at this number.
    Keep(i32),
    /// The program image (a memfd): run with `execveat(fd, "", AT_EMPTY_PATH)`.
    Program,
    /// The directory a relative `path` is resolved from (`execveat` dirfd).
    Dir,
    /// The caller's host working directory (an `O_PATH` descriptor).
    Cwd,
    /// A block of the argument transfer (`args`, Cosh §5).
    Args,
}

/// Everything `execve` carries over to the new image, besides memory.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
pub struct ExecSpec {
    pub path: Vec<u8>,
    pub argv: Vec<Vec<u8>>,
    pub envp: Vec<Vec<u8>>,
    /// `execveat` flags (`AT_SYMLINK_NOFOLLOW`, `AT_EMPTY_PATH`).
    pub flags: i32,
    /// One entry per descriptor sent with the packet, same order.
    pub fds: Vec<FdRole>,
    pub umask: u32,
    /// `(resource, soft, hard)`.
    pub rlimits: Vec<(u32, u64, u64)>,
    /// Blocked signals (bit `sig - 1`).
    pub sigmask: u64,
    /// Signals set to `SIG_IGN` (bit `sig - 1`).
    pub ignored: u64,
    /// The proxy's process group, joined when it is in the server's session.
    pub pgid: i32,
    /// Nice value (`nice -n 10 make` must stay nice on any core).
    pub nice: i32,
    /// `personality(2)` flags, kept across `execve` (`setarch -R`).
    pub personality: u32,
    /// The proxy's securebits (not in `/proc`; see `creds` for why a
    /// report is enough). Identity itself is never sent: the server reads
    /// it from the kernel.
    pub securebits: u32,
    /// `argv` and `envp` as a Cosh transfer (`crate::args`); the two
    /// lists above are then empty until the server receives it.
    pub args: Option<crate::args::ArgsTransfer>,
}

// One message per exec, decoded once: the size of the biggest variant
// costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub enum ToServer {
    Exec(ExecSpec),
    /// The sender moved itself to this server's core and execs there in
    /// place (`--exec-via place`): count it as running here until it ends.
    /// Its pid is the one the kernel stamps on the message.
    Placed,
    /// Send this signal to the program.
    Signal(i32),
    /// The proxy stops itself now, on a `Stopped` request (`mirror`).
    Stopping,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub enum ToProxy {
    /// The program runs. `same_group`: it joined the proxy's process group
    /// (terminal-generated signals then reach it directly).
    Started {
        pid: i32,
        same_group: bool,
    },
    /// `execve` failed with this errno in the new process.
    Failed {
        errno: i32,
    },
    /// The server could not take the program (malformed request, out of
    /// descriptors or processes); nothing ran: exec locally instead.
    Refused,
    Exited {
        code: i32,
    },
    Killed {
        sig: i32,
    },
    /// The program stopped with this signal: stop alike, so the proxy's
    /// parent sees the job stopped (`mirror`).
    Stopped {
        sig: i32,
    },
    /// The program was continued before the proxy acted on `Stopped`.
    Continued,
}

/// Wire errors.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("system call failed: {0}")]
    Io(#[from] rustix::io::Errno),
    #[error("malformed message: {0}")]
    Decode(#[from] postcard::Error),
    #[error("message or descriptor list too large")]
    TooLarge,
    #[error("peer closed the connection")]
    Closed,
}

/// Send one message with `fds` attached.
pub fn send<T: Serialize>(
    sock: impl AsFd,
    msg: &T,
    fds: &[BorrowedFd<'_>],
) -> Result<(), WireError> {
    let bytes = postcard::to_allocvec(msg)?;
    if bytes.len() > MAX_PACKET || fds.len() > MAX_FDS {
        return Err(WireError::TooLarge);
    }
    let mut space =
        vec![MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(fds.len().max(1)))];
    let mut anc = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !anc.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(WireError::TooLarge);
    }
    loop {
        match rustix::net::sendmsg(
            sock.as_fd(),
            &[IoSlice::new(&bytes)],
            &mut anc,
            SendFlags::NOSIGNAL,
        ) {
            Err(rustix::io::Errno::INTR) => continue,
            Err(rustix::io::Errno::MSGSIZE) => return Err(WireError::TooLarge),
            r => {
                r?;
                return Ok(());
            }
        }
    }
}

/// Longest a `Placed` waits for room in a server's queue, which holds
/// only `net.unix.max_dgram_qlen` (10 by default) datagrams: a burst of
/// execs (`make -j`) waits for the server to take them, a server that
/// takes nothing (stopped, stuck) costs each exec this much, once.
pub const PLACED_WAIT: std::time::Duration = std::time::Duration::from_millis(100);

/// Send `Placed` to the datagram socket at `to` from `sock`, an unbound
/// `SOCK_DGRAM` Unix socket. A server that is not there is an error at
/// once, one whose queue stays full for [`PLACED_WAIT`] an error then;
/// either way the caller execs where it is.
pub fn send_placed(sock: impl AsFd, to: &rustix::net::SocketAddrUnix) -> Result<(), WireError> {
    let bytes = postcard::to_allocvec(&ToServer::Placed)?;
    let mut flags = SendFlags::NOSIGNAL | SendFlags::DONTWAIT;
    loop {
        match rustix::net::sendto(sock.as_fd(), &bytes, flags, to) {
            Err(rustix::io::Errno::INTR) => continue,
            // The queue is full: wait for room, bounded.
            Err(rustix::io::Errno::AGAIN) if flags.contains(SendFlags::DONTWAIT) => {
                rustix::net::sockopt::set_socket_timeout(
                    sock.as_fd(),
                    rustix::net::sockopt::Timeout::Send,
                    Some(PLACED_WAIT),
                )?;
                flags = SendFlags::NOSIGNAL;
            }
            r => {
                r?;
                return Ok(());
            }
        }
    }
}

/// One datagram from a server's `Placed` socket, without waiting:
/// `Ok(Some(pid))` for a `Placed` with the sender's pid as the kernel
/// stamped it, `Ok(None)` for anything else (dropped, descriptors that
/// came with it closed), `Err` when none is queued.
pub fn recv_placed(sock: impl AsFd) -> Result<Option<i32>, rustix::io::Errno> {
    let mut buf = [0u8; 16];
    // Nothing is passed this way: descriptors are closed on drop.
    let got = receive(sock, &mut buf, RecvFlags::DONTWAIT)?;
    let placed = !got.truncated
        && postcard::from_bytes::<ToServer>(&buf[..got.bytes]).ok() == Some(ToServer::Placed);
    Ok(got.sender.filter(|_| placed))
}

/// What one `recvmsg` brought: its length, whether it was cut, the
/// descriptors (close-on-exec) and the sender's pid, if the kernel
/// stamped one (`SCM_CREDENTIALS`, on a socket with `SO_PASSCRED`).
struct Received {
    bytes: usize,
    truncated: bool,
    fds: Vec<OwnedFd>,
    sender: Option<i32>,
}

/// One `recvmsg` into `buf` with its ancillary data, retried on `EINTR`.
fn receive(sock: impl AsFd, buf: &mut [u8], flags: RecvFlags) -> rustix::io::Result<Received> {
    let mut space =
        [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS), ScmCredentials(1))];
    let mut anc = RecvAncillaryBuffer::new(&mut space);
    let got = loop {
        match rustix::net::recvmsg(
            sock.as_fd(),
            &mut [IoSliceMut::new(buf)],
            &mut anc,
            flags | RecvFlags::CMSG_CLOEXEC,
        ) {
            Err(rustix::io::Errno::INTR) => continue,
            r => break r?,
        }
    };
    let mut fds = Vec::new();
    let mut sender = None;
    for m in anc.drain() {
        match m {
            RecvAncillaryMessage::ScmRights(it) => fds.extend(it),
            RecvAncillaryMessage::ScmCredentials(c) => {
                sender = Some(c.pid.as_raw_nonzero().get()).filter(|&p| p > 0)
            }
            _ => {}
        }
    }
    Ok(Received {
        bytes: got.bytes,
        truncated: got.flags.contains(rustix::net::ReturnFlags::TRUNC),
        fds,
        sender,
    })
}

/// Receive one message and the descriptors that came with it (close-on-exec).
pub fn recv<T: for<'de> Deserialize<'de>>(sock: impl AsFd) -> Result<(T, Vec<OwnedFd>), WireError> {
    recv_from(sock).map(|(m, fds, _)| (m, fds))
}

/// [`recv`], plus the sender's pid as the kernel attached it
/// (`SCM_CREDENTIALS`, on a socket with `SO_PASSCRED`).
pub fn recv_from<T: for<'de> Deserialize<'de>>(
    sock: impl AsFd,
) -> Result<(T, Vec<OwnedFd>, Option<i32>), WireError> {
    let mut buf = vec![0u8; MAX_PACKET];
    let got = receive(sock, &mut buf, RecvFlags::empty())?;
    if got.bytes == 0 {
        return Err(WireError::Closed);
    }
    if got.truncated {
        return Err(WireError::TooLarge);
    }
    Ok((
        postcard::from_bytes(&buf[..got.bytes])?,
        got.fds,
        got.sender,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::net::{socketpair, AddressFamily, SocketFlags, SocketType};
    use std::os::fd::AsRawFd;

    #[test]
    fn exec_spec_and_descriptors_cross_a_socket() {
        let (a, b) = socketpair(
            AddressFamily::UNIX,
            SocketType::SEQPACKET,
            SocketFlags::CLOEXEC,
            None,
        )
        .unwrap();
        let (r, w) = rustix::pipe::pipe().unwrap();
        let spec = ExecSpec {
            path: b"/bin/true".to_vec(),
            argv: vec![b"true".to_vec()],
            fds: vec![FdRole::Keep(0), FdRole::Keep(7)],
            pgid: 42,
            ..Default::default()
        };
        send(&a, &ToServer::Exec(spec.clone()), &[r.as_fd(), w.as_fd()]).unwrap();
        let (msg, fds): (ToServer, _) = recv(&b).unwrap();
        assert_eq!(msg, ToServer::Exec(spec));
        assert_eq!(fds.len(), 2);
        // The received write end feeds the original read end.
        rustix::io::write(&fds[1], b"x").unwrap();
        let mut c = [0u8; 1];
        assert_eq!(rustix::io::read(&r, &mut c).unwrap(), 1);
        assert_ne!(fds[0].as_raw_fd(), r.as_raw_fd());
        drop(a);
        assert!(matches!(recv::<ToProxy>(&b), Err(WireError::Closed)));
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let (a, b) = socketpair(
            AddressFamily::UNIX,
            SocketType::SEQPACKET,
            SocketFlags::CLOEXEC,
            None,
        )
        .unwrap();
        rustix::io::write(&a, &[0xff, 0xff, 0xff, 0xff, 0xff]).unwrap();
        assert!(matches!(recv::<ToServer>(&b), Err(WireError::Decode(_))));
    }

    /// `Placed` goes as one datagram to a bound socket, no connection:
    /// the receiver gets our pid as the kernel stamps it; anything else
    /// that arrives there is dropped (with any descriptor it carried),
    /// and an empty queue or a missing server is an error, not a wait.
    #[test]
    fn placed_datagrams_carry_the_senders_pid() {
        let path = std::env::temp_dir().join(format!("atoll-wire-place-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let addr = rustix::net::SocketAddrUnix::new(&path).unwrap();
        // The server's end never blocks; the sender's does, as in
        // `place_self`.
        let dgram = |flags| {
            rustix::net::socket_with(AddressFamily::UNIX, SocketType::DGRAM, flags, None).unwrap()
        };
        let sender = dgram(SocketFlags::CLOEXEC);
        assert!(send_placed(&sender, &addr).is_err(), "no server yet");
        let server = dgram(SocketFlags::CLOEXEC | SocketFlags::NONBLOCK);
        rustix::net::sockopt::set_socket_passcred(&server, true).unwrap();
        rustix::net::bind(&server, &addr).unwrap();
        assert_eq!(recv_placed(&server), Err(rustix::io::Errno::AGAIN));

        send_placed(&sender, &addr).unwrap();
        assert_eq!(recv_placed(&server), Ok(Some(std::process::id() as i32)));

        let (r, _w) = rustix::pipe::pipe().unwrap();
        let mut space = vec![MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut anc = SendAncillaryBuffer::new(&mut space);
        let fds = [r.as_fd()];
        assert!(anc.push(SendAncillaryMessage::ScmRights(&fds)));
        let signal = postcard::to_allocvec(&ToServer::Signal(9)).unwrap();
        rustix::net::sendmsg_addr(
            &sender,
            &addr,
            &[IoSlice::new(&signal)],
            &mut anc,
            SendFlags::empty(),
        )
        .unwrap();
        rustix::net::sendto(&sender, &[0xff; 40], SendFlags::empty(), &addr).unwrap();
        assert_eq!(recv_placed(&server), Ok(None), "another message");
        assert_eq!(recv_placed(&server), Ok(None), "garbage, truncated");
        assert_eq!(recv_placed(&server), Err(rustix::io::Errno::AGAIN));

        // A queue that stays full: each further `Placed` waits, bounded,
        // then fails; one taken makes room for the next.
        let mut queued = 0;
        while send_placed(&sender, &addr).is_ok() {
            queued += 1;
            assert!(queued < 10_000, "the queue never filled");
        }
        assert!(queued > 0);
        assert_eq!(recv_placed(&server), Ok(Some(std::process::id() as i32)));
        send_placed(&sender, &addr).unwrap();
        let _ = std::fs::remove_file(&path);
    }
}
