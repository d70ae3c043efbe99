//! Packets with descriptors on the `SOCK_SEQPACKET` boot sockets, as the
//! proxies send and receive them (the protocol is `atoll_proto::boot`).

use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{BorrowedFd, OwnedFd};

use atoll_proto::boot::MAX_BOOT_PACKET;
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};

/// Most descriptors one boot reply carries (cache, control, a lane of
/// channels for many servers).
const MAX_FDS: usize = 80;

/// Send one packet with `fds` attached.
pub fn send(sock: BorrowedFd<'_>, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> std::io::Result<()> {
    let mut space =
        vec![MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(fds.len().max(1)))];
    let mut anc = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !anc.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(std::io::Error::other("too many descriptors for one packet"));
    }
    rustix::net::sendmsg(sock, &[IoSlice::new(bytes)], &mut anc, SendFlags::NOSIGNAL)?;
    Ok(())
}

/// Receive one packet and its descriptors; an empty packet means the peer
/// closed the connection.
pub fn recv(sock: BorrowedFd<'_>) -> std::io::Result<(Vec<u8>, Vec<OwnedFd>)> {
    let mut buf = vec![0u8; MAX_BOOT_PACKET];
    let mut space = vec![MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut anc = RecvAncillaryBuffer::new(&mut space);
    let got = loop {
        match rustix::net::recvmsg(
            sock,
            &mut [IoSliceMut::new(&mut buf)],
            &mut anc,
            RecvFlags::CMSG_CLOEXEC,
        ) {
            Err(rustix::io::Errno::INTR) => continue,
            other => break other?,
        }
    };
    let mut fds = Vec::new();
    for msg in anc.drain() {
        if let RecvAncillaryMessage::ScmRights(it) = msg {
            fds.extend(it);
        }
    }
    buf.truncate(got.bytes);
    Ok((buf, fds))
}

/// A connected `SOCK_SEQPACKET` socket to the boot socket at `path`.
pub fn connect(path: &std::path::Path) -> std::io::Result<OwnedFd> {
    let s = rustix::net::socket_with(
        rustix::net::AddressFamily::UNIX,
        rustix::net::SocketType::SEQPACKET,
        rustix::net::SocketFlags::CLOEXEC,
        None,
    )?;
    rustix::net::connect(&s, &rustix::net::SocketAddrUnix::new(path)?)?;
    Ok(s)
}

/// A pair of connected `SOCK_SEQPACKET` sockets (a forked child's session).
pub fn pair() -> std::io::Result<(OwnedFd, OwnedFd)> {
    Ok(rustix::net::socketpair(
        rustix::net::AddressFamily::UNIX,
        rustix::net::SocketType::SEQPACKET,
        rustix::net::SocketFlags::CLOEXEC,
        None,
    )?)
}
