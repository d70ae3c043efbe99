//! Boot a real instance and talk to it over boot.sock and the rings with a
//! minimal hand-written client.

use std::io::IoSliceMut;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use atoll_msg::{ClientChannel, Control, PollMode, SharedRegion};
use atoll_proto::boot::{BootReply, BootRequest, InstanceStatus, MAX_BOOT_PACKET};
use atoll_proto::{
    decode, encode, Cred, DescId, Errno, Reply, ReplyFrame, Request, RequestFrame, SessionId,
    MAX_FRAME, ROOT,
};
use atoll_server::{Instance, InstanceConfig};
use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SocketAddrUnix,
    SocketFlags, SocketType,
};

fn config(root: &Path, servers: usize) -> InstanceConfig {
    InstanceConfig {
        servers,
        hosts: 0,
        auto_scale: false,
        room: 0,
        memory: 64 * 4096,
        mount: "/atoll-test".into(),
        poll: PollMode::Block,
        split: false,
        server_cores: vec![],
        island: atoll_proto::boot::Island::Coherent,
        without: Default::default(),
        distribute: vec![],
        adaptive_dirs: false,
        fs_policy: Default::default(),
        syscall_sites: Default::default(),
        inodes: None,
        runtime_root: root.to_path_buf(),
        server_exe: None,
    }
}

fn connect(path: &Path) -> OwnedFd {
    let s = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )
    .unwrap();
    rustix::net::connect(&s, &SocketAddrUnix::new(path).unwrap()).unwrap();
    s
}

fn ask(sock: &OwnedFd, req: &BootRequest) -> (BootReply, Vec<OwnedFd>) {
    let bytes = postcard::to_allocvec(req).unwrap();
    rustix::net::send(sock, &bytes, rustix::net::SendFlags::NOSIGNAL).unwrap();
    let mut buf = vec![0u8; MAX_BOOT_PACKET];
    let mut space = vec![MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(70))];
    let mut anc = RecvAncillaryBuffer::new(&mut space);
    let got = rustix::net::recvmsg(
        sock,
        &mut [IoSliceMut::new(&mut buf)],
        &mut anc,
        RecvFlags::CMSG_CLOEXEC,
    )
    .unwrap();
    let mut fds = vec![];
    for msg in anc.drain() {
        if let RecvAncillaryMessage::ScmRights(it) = msg {
            fds.extend(it);
        }
    }
    (postcard::from_bytes(&buf[..got.bytes]).unwrap(), fds)
}

/// One lane of a tiny client.
struct Lane {
    chans: Vec<ClientChannel>,
    control: Control,
    next_id: u64,
}

impl Lane {
    fn new(control_fd: &OwnedFd, chan_fds: &[OwnedFd]) -> Lane {
        Lane {
            chans: chan_fds
                .iter()
                .map(|f| ClientChannel::map(f.as_fd()).unwrap())
                .collect(),
            control: Control::map(control_fd.as_fd()).unwrap(),
            next_id: 1,
        }
    }
    /// Send `req` to `server`; `f` gets the decoded reply.
    fn call<R>(&mut self, server: usize, req: Request<'_>, f: impl FnOnce(Reply<'_>) -> R) -> R {
        let id = self.next_id;
        self.next_id += 1;
        let mut buf = vec![0u8; MAX_FRAME];
        let frame = RequestFrame {
            id,
            cred: Cred::of(
                rustix::process::geteuid().as_raw(),
                rustix::process::getegid().as_raw(),
            ),
            pid: 0,
            req,
            vouched: Default::default(),
        };
        let bytes = encode(&frame, &mut buf).unwrap();
        self.chans[server]
            .send(bytes, self.control.doorbell(server))
            .unwrap();
        self.chans[server]
            .recv(PollMode::Block, |b| {
                let r: ReplyFrame = decode(b).unwrap();
                assert_eq!(r.id, id);
                f(r.reply)
            })
            .unwrap()
    }
    fn raw(&mut self, server: usize, bytes: &[u8]) -> Option<Errno> {
        self.chans[server]
            .send(bytes, self.control.doorbell(server))
            .unwrap();
        self.chans[server]
            .recv(PollMode::Block, |b| {
                match decode::<ReplyFrame>(b).unwrap().reply {
                    Reply::Err(e) => Some(e),
                    _ => None,
                }
            })
            .unwrap()
    }
}

fn attach(path: &Path) -> (OwnedFd, SessionId, Vec<OwnedFd>, Lane) {
    let sock = connect(path);
    let (reply, fds) = ask(
        &sock,
        &BootRequest::Attach {
            pid: std::process::id(),
        },
    );
    let BootReply::Attached {
        session,
        lane,
        info,
    } = reply
    else {
        panic!("{reply:?}")
    };
    assert_eq!(lane, Some(0));
    assert_eq!(fds.len(), 2 + info.servers as usize);
    let lane = Lane::new(&fds[1], &fds[2..]);
    (sock, session, fds, lane)
}

fn status(path: &Path) -> InstanceStatus {
    let sock = connect(path);
    match ask(&sock, &BootRequest::Status).0 {
        BootReply::Status(s) => *s,
        other => panic!("{other:?}"),
    }
}

/// Wait (bounded) until `cond` holds for the instance's status: the boot
/// thread handles a closed connection asynchronously.
fn eventually(path: &Path, cond: impl Fn(&InstanceStatus) -> bool) -> InstanceStatus {
    for _ in 0..1000 {
        let s = status(path);
        if cond(&s) {
            return s;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("condition never held: {:?}", status(path));
}

fn descs(s: &InstanceStatus) -> u64 {
    s.servers.iter().map(|x| x.open_descriptions).sum()
}

fn create(lane: &mut Lane, name: &[u8]) -> DescId {
    lane.call(
        0,
        Request::Open {
            dir: ROOT,
            name,
            flags: (libc::O_CREAT | libc::O_RDWR) as u32,
            perm: 0o644,
            umask: 0o022,
            inherit: atoll_proto::Inherit::Unread,
        },
        |r| match r {
            Reply::Opened {
                desc,
                created: true,
                ..
            } => desc,
            other => panic!("{other:?}"),
        },
    )
}

#[test]
fn client_attaches_does_io_and_its_death_releases_everything() {
    let tmp = tempfile::tempdir().unwrap();
    let inst = Instance::boot(config(tmp.path(), 2)).unwrap();
    let dir = inst.runtime_dir().to_path_buf();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
        0o700
    );
    let json = std::fs::read_to_string(dir.join("instance.json")).unwrap();
    assert!(json.contains(inst.id()) && json.contains("boot.sock"));
    let path = inst.socket_path().to_path_buf();
    let base = status(&path);
    assert_eq!((base.clients, descs(&base)), (0, 0));

    let (sock, _session, fds, mut lane) = attach(&path);
    let desc = create(&mut lane, b"hello");
    let n = lane.call(
        0,
        Request::WriteData {
            desc,
            data: b"shared bytes",
            offset: Some(0),
            fsize: None,
            chain: None,
        },
        |r| match r {
            Reply::Written(n) => n,
            other => panic!("{other:?}"),
        },
    );
    assert_eq!(n, 12);
    // The block the server wrote is visible through the client's own
    // mapping of the buffer cache.
    let (off, ext) = lane.call(
        0,
        Request::Read {
            desc,
            len: 100,
            offset: Some(0),
        },
        |r| match r {
            Reply::Extents {
                offset, extents, ..
            } => (offset, extents),
            other => panic!("{other:?}"),
        },
    );
    assert_eq!(off, 0);
    let cache = SharedRegion::map(fds[0].as_fd()).unwrap();
    let mut got = vec![0u8; 12];
    // SAFETY (test): the extent's block lies inside the mapped cache.
    unsafe {
        std::ptr::copy_nonoverlapping(
            cache.as_ptr().add(ext[0].block as usize * 4096),
            got.as_mut_ptr(),
            12,
        )
    };
    assert_eq!(got, b"shared bytes");
    // Server 1 holds nothing yet but answers.
    lane.call(1, Request::StatFs, |r| {
        assert!(matches!(r, Reply::StatFs(_)))
    });
    // Garbage on a ring is answered EPROTO and counted.
    assert_eq!(
        lane.raw(0, &[9, 0xff, 0xff, 0xff, 0xff]),
        Some(Errno::EPROTO)
    );

    let during = status(&path);
    assert_eq!((during.clients, during.lanes, descs(&during)), (1, 1, 1));
    assert_eq!(during.servers[0].bad_requests, 1);

    drop(lane);
    drop(sock);
    let after = eventually(&path, |s| s.clients == 0 && descs(s) == 0);
    assert!(after.servers.iter().all(|s| s.sessions == 0));
    assert_eq!(after.servers[0].inodes, 2, "the file itself stays");

    let stats = inst.shutdown();
    assert_eq!(stats.len(), 2);
    assert!(!dir.exists(), "runtime directory removed");
}

#[test]
fn forked_child_keeps_shared_descriptions_until_it_exits() {
    let tmp = tempfile::tempdir().unwrap();
    let inst = Instance::boot(config(tmp.path(), 1)).unwrap();
    let path = inst.socket_path().to_path_buf();
    let (sock, _s, _fds, mut lane) = attach(&path);
    let desc = create(&mut lane, b"f");
    let (reply, mut fds) = ask(&sock, &BootRequest::Fork);
    let BootReply::Forked { child } = reply else {
        panic!("{reply:?}")
    };
    assert_eq!(fds.len(), 1, "the child's socket, and no lane yet");
    let child_sock = fds.remove(0);
    lane.call(
        0,
        Request::Share {
            desc,
            to: child,
            held: 0,
        },
        |r| assert!(matches!(r, Reply::Ok)),
    );
    // The parent exits; the child still holds the description.
    drop(lane);
    drop(sock);
    let s = eventually(&path, |s| s.clients == 1);
    assert_eq!(descs(&s), 1);
    // The child reattaches after exec: same session, no lane yet (the
    // cache and control memfds only); its first lane comes with `NewLane`.
    let (reply, cfds) = ask(&child_sock, &BootRequest::Reattach { pid: 1 });
    let BootReply::Attached {
        session, lane: l, ..
    } = reply
    else {
        panic!("{reply:?}")
    };
    assert_eq!((session, l), (child, None));
    assert_eq!(cfds.len(), 2, "cache and control, no channel");
    let (reply, lane0) = ask(&child_sock, &BootRequest::NewLane);
    assert!(matches!(reply, BootReply::Lane { lane: 0 }), "{reply:?}");
    let mut clane = Lane::new(&cfds[1], &lane0);
    let n = clane.call(
        0,
        Request::WriteData {
            desc,
            data: b"x",
            offset: None,
            fsize: None,
            chain: None,
        },
        |r| match r {
            Reply::Written(n) => n,
            other => panic!("{other:?}"),
        },
    );
    assert_eq!(n, 1);
    let (reply, lfds) = ask(&child_sock, &BootRequest::NewLane);
    assert!(matches!(reply, BootReply::Lane { lane: 1 }));
    assert_eq!(lfds.len(), 1);
    assert_eq!(status(&path).lanes, 2);
    drop(clane);
    drop(child_sock);
    eventually(&path, |s| s.clients == 0 && descs(s) == 0);
    inst.shutdown();
}

#[test]
fn stop_request_wakes_the_owner() {
    let tmp = tempfile::tempdir().unwrap();
    let inst = Instance::boot(config(tmp.path(), 1)).unwrap();
    let sock = connect(inst.socket_path());
    assert!(matches!(
        ask(&sock, &BootRequest::Stop).0,
        BootReply::Stopping
    ));
    inst.wait_for_stop_request();
    // Requests that need a session are refused on a bare connection.
    assert!(matches!(
        ask(&sock, &BootRequest::NewLane).0,
        BootReply::Error(_)
    ));
    inst.shutdown();
}

/// Server 0's count of traps that processes reported.
fn reported_traps(s: &InstanceStatus) -> u64 {
    s.servers
        .iter()
        .flat_map(|x| x.counters.iter())
        .filter(|(name, _)| name == "client.traps")
        .map(|(_, n)| n)
        .sum()
}

/// A program's client attaches lazily: no lane, so no channel is made or
/// mapped by any server for a process that never asks one anything, and
/// the counters it reports as it exits still reach server 0 when its
/// connection closes (with the session's end, in one post).
#[test]
fn a_lazy_attach_takes_no_lane_and_its_exit_counters_reach_server_0() {
    let tmp = tempfile::tempdir().unwrap();
    let inst = Instance::boot(config(tmp.path(), 3)).unwrap();
    let path = inst.socket_path().to_path_buf();
    let before = status(&path);
    let sock = connect(&path);
    let (reply, fds) = ask(
        &sock,
        &BootRequest::AttachLazily {
            pid: std::process::id(),
        },
    );
    let BootReply::Attached { lane, .. } = reply else {
        panic!("{reply:?}")
    };
    assert_eq!(lane, None);
    assert_eq!(fds.len(), 2, "the buffer cache and the control block only");
    let counters = atoll_proto::ClientCounters {
        traps: 7,
        ..Default::default()
    };
    let bytes = postcard::to_allocvec(&BootRequest::Counters(counters)).unwrap();
    rustix::net::send(&sock, &bytes, rustix::net::SendFlags::NOSIGNAL).unwrap();
    assert_eq!(status(&path).lanes_made, before.lanes_made);
    drop(sock);
    let after = eventually(&path, |s| reported_traps(s) == reported_traps(&before) + 7);
    assert_eq!(after.lanes_made, before.lanes_made);
    // A second attach on the same connection is refused, lazily or not.
    let sock = connect(&path);
    ask(&sock, &BootRequest::AttachLazily { pid: 1 });
    assert!(matches!(
        ask(&sock, &BootRequest::Attach { pid: 1 }).0,
        BootReply::Error(_)
    ));
    inst.shutdown();
}
