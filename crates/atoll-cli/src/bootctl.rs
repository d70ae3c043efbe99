//! Client side of the two administrative boot requests, `Status` and
//! `Stop` (`atoll_proto::boot`): one `SOCK_SEQPACKET` connection, one
//! postcard packet each way, no descriptors. A connection that only asks
//! for status never attaches, so it creates no session.

use std::io;
use std::path::Path;
use std::time::Duration;

use atoll_proto::boot::{BootReply, BootRequest, InstanceStatus, MAX_BOOT_PACKET};
use rustix::net::{AddressFamily, RecvFlags, SendFlags, SocketAddrUnix, SocketFlags, SocketType};

/// How long to wait for an instance to answer before calling it hung.
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// Send one request and read one reply.
pub fn request(socket: &Path, req: &BootRequest) -> io::Result<BootReply> {
    let fd = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )?;
    let addr = SocketAddrUnix::new(socket)?;
    rustix::net::connect(&fd, &addr)?;
    rustix::net::sockopt::set_socket_timeout(
        &fd,
        rustix::net::sockopt::Timeout::Recv,
        Some(REPLY_TIMEOUT),
    )?;
    let bytes = postcard::to_allocvec(req).map_err(io::Error::other)?;
    rustix::net::send(&fd, &bytes, SendFlags::NOSIGNAL)?;
    let mut buf = vec![0u8; MAX_BOOT_PACKET];
    let n = loop {
        match rustix::net::recv(&fd, &mut buf[..], RecvFlags::empty()) {
            Ok((n, _)) => break n,
            Err(rustix::io::Errno::INTR) => continue,
            Err(rustix::io::Errno::AGAIN) => {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the instance did not answer",
                ))
            }
            Err(e) => return Err(e.into()),
        }
    };
    if n == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the instance closed the connection without answering",
        ));
    }
    postcard::from_bytes(&buf[..n])
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("bad reply: {e}")))
}

pub fn status(socket: &Path) -> io::Result<InstanceStatus> {
    match request(socket, &BootRequest::Status)? {
        BootReply::Status(s) => Ok(*s),
        other => Err(unexpected(other)),
    }
}

pub fn stop(socket: &Path) -> io::Result<()> {
    match request(socket, &BootRequest::Stop)? {
        BootReply::Stopping => Ok(()),
        other => Err(unexpected(other)),
    }
}

pub fn chaos(socket: &Path, action: atoll_proto::boot::ChaosAction) -> io::Result<()> {
    match request(socket, &BootRequest::Chaos(action))? {
        BootReply::Done => Ok(()),
        other => Err(unexpected(other)),
    }
}

/// `atoll scale`: the hosts running afterwards, and servers moved.
pub fn scale(socket: &Path, hosts: Option<u32>) -> io::Result<(u32, u32)> {
    match request(socket, &BootRequest::Scale { hosts })? {
        BootReply::Scaled { hosts, moved } => Ok((hosts, moved)),
        other => Err(unexpected(other)),
    }
}

fn unexpected(reply: BootReply) -> io::Error {
    match reply {
        BootReply::Error(msg) => io::Error::other(format!("the instance refused: {msg}")),
        other => io::Error::new(
            io::ErrorKind::InvalidData,
            format!("unexpected reply {other:?}"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    /// A one-shot fake instance: answers the first packet with `reply`.
    fn fake_instance(
        dir: &Path,
        reply: BootReply,
    ) -> (std::path::PathBuf, std::thread::JoinHandle<BootRequest>) {
        let path = dir.join(atoll_server::BOOT_SOCKET);
        let fd = rustix::net::socket(AddressFamily::UNIX, SocketType::SEQPACKET, None).unwrap();
        rustix::net::bind(&fd, &SocketAddrUnix::new(&path).unwrap()).unwrap();
        rustix::net::listen(&fd, 4).unwrap();
        let listener = UnixListener::from(fd);
        let h = std::thread::spawn(move || {
            let (conn, _) = listener.accept().unwrap();
            let mut buf = vec![0u8; MAX_BOOT_PACKET];
            let (n, _) = rustix::net::recv(&conn, &mut buf[..], RecvFlags::empty()).unwrap();
            let req: BootRequest = postcard::from_bytes(&buf[..n]).unwrap();
            let out = postcard::to_allocvec(&reply).unwrap();
            rustix::net::send(&conn, &out, SendFlags::empty()).unwrap();
            req
        });
        (path, h)
    }

    #[test]
    fn status_round_trips_over_seqpacket() {
        let t = tempfile::tempdir().unwrap();
        let st = InstanceStatus {
            id: "abc".into(),
            mount: "/atoll".into(),
            pid: 42,
            clients: 3,
            lanes: 4,
            servers: vec![],
            limits: vec![("inodes".into(), 1, 2)],
            poll: "spin".into(),
            sessions: vec![(1, 42)],
            dir_names: vec![],
            health: vec![],
            island: "copy".into(),
            fs_policy: Default::default(),
            ..Default::default()
        };
        let (path, h) = fake_instance(t.path(), BootReply::Status(Box::new(st)));
        let got = status(&path).unwrap();
        assert_eq!((got.id.as_str(), got.pid, got.clients), ("abc", 42, 3));
        assert_eq!(got.limits, vec![("inodes".to_string(), 1, 2)]);
        assert_eq!((got.poll.as_str(), got.sessions), ("spin", vec![(1, 42)]));
        assert_eq!(got.island, "copy");
        assert!(matches!(h.join().unwrap(), BootRequest::Status));
    }

    #[test]
    fn stop_reports_a_refusal() {
        let t = tempfile::tempdir().unwrap();
        let (path, h) = fake_instance(t.path(), BootReply::Error("busy".into()));
        let e = stop(&path).unwrap_err();
        assert!(e.to_string().contains("busy"), "{e}");
        assert!(matches!(h.join().unwrap(), BootRequest::Stop));
    }

    #[test]
    fn missing_socket_is_an_error() {
        let t = tempfile::tempdir().unwrap();
        assert!(status(&t.path().join("nope.sock")).is_err());
    }
}
