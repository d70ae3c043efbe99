//! Joining the instance: the bootstrap exchanges on the session socket
//! (`atoll_proto::boot`), `attach` (a new connection, an inherited socket,
//! or a session an exec handed over whole), and the building of the
//! process's [`Client`] from what the instance sent.

use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU32};

use atoll_proto::boot::{BootReply, BootRequest, InstanceInfo, MAX_BOOT_PACKET};
use atoll_proto::SessionId;
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};

use super::{install, Client, Lane, Session, PRIVATE_FD_MIN};
use crate::error::{Error, Result};
use crate::sys::{self, SpinLock};

/// Move `fd` to a number ≥ max(min, PRIVATE_FD_MIN) with `FD_CLOEXEC`,
/// closing the original. When the limit on open files forbids such
/// numbers (lowered after the process started), to the highest free
/// number below it: the program's next `open`s get the low numbers Linux
/// would give them (the count the limit allows is one less all the same);
/// else it stays where it is.
pub fn to_high(fd: RawFd, min: i32) -> RawFd {
    let n = sys::fcntl_int(fd, libc::F_DUPFD_CLOEXEC, min.max(PRIVATE_FD_MIN) as i64);
    if n >= 0 {
        sys::close(fd);
        return n as RawFd;
    }
    match highest_free_below_limit(fd, min) {
        Some(n) => {
            sys::close(fd);
            n
        }
        None => fd,
    }
}

/// A copy of `fd` (`FD_CLOEXEC`) at a free number above both `fd` and
/// `min`, as close to the open-files limit as one is free: tried from
/// the limit down, halving the distance.
fn highest_free_below_limit(fd: RawFd, min: i32) -> Option<RawFd> {
    let limit = i64::try_from(sys::soft_limit(libc::RLIMIT_NOFILE)?).ok()?;
    let floor = i64::from(fd.max(min - 1));
    let mut distance = 1;
    while limit - distance > floor {
        let n = sys::fcntl_int(fd, libc::F_DUPFD_CLOEXEC, limit - distance);
        if n >= 0 {
            return Some(n as RawFd);
        }
        distance *= 2;
    }
    None
}

/// Move atoll's `fd` away from its number, which the program wants
/// (`dup2(x, fd)`): into atoll's range as [`to_high`] does, else, when
/// the open-files limit leaves nothing above it free (a shell moving a
/// script's descriptor to the limit's last number), to any other free
/// number. Where it stays only when no number is free at all.
pub fn away_from(fd: RawFd) -> RawFd {
    let n = to_high(fd, fd + 1);
    if n != fd {
        return n;
    }
    let n = sys::fcntl_int(fd, libc::F_DUPFD_CLOEXEC, 0);
    if n < 0 {
        return fd;
    }
    sys::close(fd);
    n as RawFd
}

/// Move `fd` into atoll's range with `FD_CLOEXEC` (as [`to_high`]), or
/// close it when the limit on open files forbids high numbers: for what
/// atoll can do without (the table other processes read, `fdpub`), one
/// of the program's few descriptor numbers (`ulimit -n 10`) is the
/// program's, as on Linux.
pub fn to_high_or_close(fd: RawFd) -> Option<RawFd> {
    let n = sys::fcntl_int(fd, libc::F_DUPFD_CLOEXEC, PRIVATE_FD_MIN as i64);
    sys::close(fd);
    (n >= 0).then_some(n as RawFd)
}

/// Keep `fd` as atoll's with `FD_CLOEXEC`: where it is when it already
/// lies in atoll's range (what an old image hands over, left open across
/// the exec, is there: one `fcntl` instead of a `dup` and a `close`),
/// else moved there ([`to_high`]).
fn keep_high(fd: RawFd) -> RawFd {
    if fd >= PRIVATE_FD_MIN && sys::fcntl_int(fd, libc::F_SETFD, libc::FD_CLOEXEC as i64) == 0 {
        return fd;
    }
    to_high(fd, 0)
}

/// One bootstrap exchange: send `req`, receive the reply and its fds.
/// Send a boot request that has no reply (e.g. `ChildPid`); best effort.
pub fn boot_post(sock: BorrowedFd<'_>, req: &BootRequest) {
    // Room for the largest, `Counters` (13 varints of up to 10 bytes).
    let mut buf = [0u8; 256];
    if let Ok(bytes) = postcard::to_slice(req, &mut buf) {
        let mut space: [MaybeUninit<u8>; 0] = [];
        let mut ctl = SendAncillaryBuffer::new(&mut space);
        let _ = rustix::net::sendmsg(sock, &[IoSlice::new(bytes)], &mut ctl, SendFlags::NOSIGNAL);
    }
}

/// [`boot_post`] of a request that carries descriptors (`SCM_RIGHTS`),
/// of any size up to a packet's.
pub fn boot_post_with(sock: BorrowedFd<'_>, req: &BootRequest, fds: &[BorrowedFd<'_>]) {
    let Ok(bytes) = postcard::to_allocvec(req) else {
        return;
    };
    if bytes.len() > MAX_BOOT_PACKET {
        return;
    }
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(3))];
    let mut ctl = SendAncillaryBuffer::new(&mut space);
    if fds.len() > 3 || !ctl.push(SendAncillaryMessage::ScmRights(fds)) {
        return;
    }
    let _ = rustix::net::sendmsg(sock, &[IoSlice::new(&bytes)], &mut ctl, SendFlags::NOSIGNAL);
}

/// The length of the reply waiting on the boot socket (waiting for it),
/// without taking it: a reply is tens of bytes, and a buffer of the
/// largest packet cost a 64 KiB clear per call (a `Fork` in the parent, a
/// `Reattach` in every new image). The peek takes no descriptors (no
/// control buffer: the kernel drops its copies and keeps them queued).
fn reply_len(sock: BorrowedFd<'_>) -> Result<usize> {
    let mut none = RecvAncillaryBuffer::default();
    loop {
        match rustix::net::recvmsg(sock, &mut [], &mut none, RecvFlags::PEEK | RecvFlags::TRUNC) {
            Err(rustix::io::Errno::INTR) => continue,
            other => return Ok(other?.bytes),
        }
    }
}

pub fn boot_call(sock: BorrowedFd<'_>, req: &BootRequest) -> Result<(BootReply, Vec<OwnedFd>)> {
    let bytes = postcard::to_allocvec(req).map_err(|e| Error::Boot(e.to_string()))?;
    let mut space: [MaybeUninit<u8>; 0] = [];
    let mut ctl = SendAncillaryBuffer::new(&mut space);
    rustix::net::sendmsg(sock, &[IoSlice::new(&bytes)], &mut ctl, SendFlags::empty())?;
    let mut buf = vec![0u8; reply_len(sock)?.clamp(1, MAX_BOOT_PACKET)];
    let mut space = vec![MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(80))];
    let mut rctl = RecvAncillaryBuffer::new(&mut space);
    let got = loop {
        match rustix::net::recvmsg(
            sock,
            &mut [IoSliceMut::new(&mut buf)],
            &mut rctl,
            RecvFlags::CMSG_CLOEXEC,
        ) {
            Err(rustix::io::Errno::INTR) => continue,
            other => break other?,
        }
    };
    if got.bytes == 0 {
        return Err(Error::Boot("instance closed the session socket".into()));
    }
    let mut fds = Vec::new();
    for msg in rctl.drain() {
        if let RecvAncillaryMessage::ScmRights(it) = msg {
            fds.extend(it);
        }
    }
    let reply: BootReply =
        postcard::from_bytes(&buf[..got.bytes]).map_err(|e| Error::Boot(e.to_string()))?;
    if let BootReply::Error(e) = reply {
        return Err(Error::Boot(e));
    }
    Ok((reply, fds))
}

/// Connect (or reattach) and build the process's [`Client`].
///
/// `inherited`: the session socket kept across `execve` (Reattach), else a
/// new connection to `socket_path` (AttachLazily). `carried`: what the old
/// image handed over with the socket (`state::Attached`), so the new image
/// joins at once and tells the boot thread without waiting
/// (`Reattached`); anything wrong with it, and the ordinary `Reattach`
/// round trip is made instead.
pub fn attach(
    socket_path: &str,
    inherited: Option<RawFd>,
    preload: Option<String>,
    carried: Option<crate::state::Attached>,
) -> Result<&'static Client> {
    // Read once at start (`sys::init_pid`).
    let pid = sys::self_pid() as u32;
    let (sock, req) = match inherited {
        Some(fd) => {
            // SAFETY: the environment told us this descriptor is our
            // session socket; we take ownership of it.
            let fd = unsafe { OwnedFd::from_raw_fd(fd) };
            if let Some(joined) = carried.and_then(Joined::take) {
                boot_post(fd.as_fd(), &BootRequest::Reattached { pid });
                let lane = Session::without_lanes(SessionId(joined.session));
                let umask = joined.umask;
                return build(
                    socket_path,
                    fd,
                    preload,
                    joined.info,
                    joined.fds,
                    lane,
                    umask,
                );
            }
            (fd, BootRequest::Reattach { pid })
        }
        None => {
            let s = rustix::net::socket_with(
                rustix::net::AddressFamily::UNIX,
                rustix::net::SocketType::SEQPACKET,
                rustix::net::SocketFlags::CLOEXEC,
                None,
            )?;
            let addr = rustix::net::SocketAddrUnix::new(socket_path)?;
            rustix::net::connect(&s, &addr)?;
            (s, BootRequest::AttachLazily { pid })
        }
    };
    let (reply, fds) = boot_call(sock.as_fd(), &req)?;
    let BootReply::Attached {
        session,
        lane,
        info,
    } = reply
    else {
        return Err(Error::Boot(format!("attach answered {reply:?}")));
    };
    // A copy island's process gets no buffer-cache descriptor and maps
    // nothing of it (Cosh §3): its data travels in messages. No lane comes
    // with the session: the first call asks `NewLane`.
    let maps_cache = info.island.maps_cache();
    // One channel per member at the attach (members may have joined
    // since boot: `info.servers` is the boot count).
    let fixed = usize::from(maps_cache) + 1;
    if fds.len() < fixed || (lane.is_none() && fds.len() != fixed) {
        return Err(Error::Boot(format!("attach sent {} fds", fds.len())));
    }
    let mut fds = fds.into_iter();
    let cache_fd = if maps_cache { fds.next() } else { None };
    let control_fd = fds.next().expect("checked length");
    let session = match lane {
        Some(lane) => Session::new(
            session,
            Lane::new(lane, fds.collect(), atoll_proto::MAX_SERVERS)?,
        ),
        None => Session::without_lanes(session),
    };
    let instance = InstanceFds {
        cache: cache_fd.map(|fd| (fd, None)),
        control: (control_fd, None),
    };
    build(socket_path, sock, preload, info, instance, session, None)
}

/// The instance's descriptors a process maps, each with its size when
/// it has just been read (`Joined::take`), so mapping it asks no `fstat`.
struct InstanceFds {
    /// `None` in a copy island.
    cache: Option<(OwnedFd, Option<i64>)>,
    control: (OwnedFd, Option<i64>),
}

/// A session handed over by the old image, checked.
struct Joined {
    session: u64,
    info: InstanceInfo,
    fds: InstanceFds,
    umask: Option<u32>,
}

impl Joined {
    /// Take the carried descriptors if they are what the old image said:
    /// each is open at its number, in atoll's range, on the file recorded
    /// (device and inode: the very memfd the old image had mapped, so its
    /// size needs no check of its own). Each one found is owned (closed if
    /// unused) from here on; one that is not what was recorded is left
    /// alone.
    fn take(a: crate::state::Attached) -> Option<Joined> {
        let own = |c: &crate::state::CarriedFd| {
            let st = sys::fstat(c.fd).ok()?;
            let same = (st.st_dev, st.st_ino) == (c.dev, c.ino);
            (c.fd >= PRIVATE_FD_MIN && same)
                // SAFETY: the old image made this descriptor for us, it
                // still refers to the file it recorded, and no one else in
                // this image knows of it.
                .then(|| (unsafe { OwnedFd::from_raw_fd(c.fd) }, Some(st.st_size)))
        };
        let control = own(&a.control);
        let cache = a.cache.as_ref().map(own);
        let control = control?;
        let info: InstanceInfo = postcard::from_bytes(&a.info).ok()?;
        let cache = match (cache, info.island.maps_cache()) {
            (Some(Some(fd)), true) => Some(fd),
            (None, false) => None,
            _ => return None,
        };
        Some(Joined {
            session: a.session,
            info,
            fds: InstanceFds { cache, control },
            umask: a.umask,
        })
    }
}

/// The process's [`Client`], from its session socket, the instance's
/// information and descriptors, and its session. Nothing is mapped here:
/// the buffer cache and the control block are mapped by the first call
/// that needs them (`ondemand`), so an image that never makes an atoll
/// call (most of those a shell or a build starts) maps neither.
/// `umask`: the old image's, handed over (`None`: read here).
fn build(
    socket_path: &str,
    sock: OwnedFd,
    preload: Option<String>,
    info: InstanceInfo,
    fds: InstanceFds,
    session: Session,
    umask: Option<u32>,
) -> Result<&'static Client> {
    let cache_size = fds.cache.as_ref().and_then(|(_, size)| *size);
    let control_size = fds.control.1;
    let cache_fd = fds.cache.map_or(-1, |(fd, _)| keep_high(fd.into_raw_fd()));
    // Kept (not closed once mapped) so that an exec can hand it over, and
    // so that the first call that needs it maps it.
    let control_fd = keep_high(fds.control.0.into_raw_fd());
    let sock_fd = keep_high(sock.into_raw_fd());

    let mount = info.mount.trim_end_matches('/').as_bytes().to_vec();
    let mount_parent = match mount.iter().rposition(|&c| c == b'/') {
        Some(0) | None => b"/".to_vec(),
        Some(i) => mount[..i].to_vec(),
    };
    // Read the umask without a window: this runs before the program's
    // own threads exist (constructor) or in a fresh image. An exec's new
    // image has it from the old one, which kept track of it.
    let um = umask.unwrap_or_else(|| {
        let um = rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o022));
        rustix::process::umask(um);
        um.as_raw_mode()
    });

    let c = Client {
        mount,
        mount_parent,
        poll: info.poll,
        cache_map: super::OnDemand::new(),
        cache_size,
        control_map: super::OnDemand::new(),
        control_size,
        socket_path: socket_path.to_string(),
        preload,
        socket_fd: AtomicI32::new(sock_fd),
        template_fd: AtomicI32::new(-1),
        cache_fd: AtomicI32::new(cache_fd),
        control_fd: AtomicI32::new(control_fd),
        pid_untold: AtomicBool::new(false),
        session: AtomicPtr::new(Box::into_raw(Box::new(session))),
        boot_lock: SpinLock::new(),
        umask: AtomicU32::new(um),
        cwd: AtomicPtr::new(core::ptr::null_mut()),
        posix_locks: AtomicBool::new(false),
        any_locks: AtomicBool::new(false),
        lock_marks: crate::lockmarks::LockMarks::new(),
        fs_names: super::OnDemand::new(),
        info,
    };
    // The credentials are not read here: each thread reads its own on its
    // first atoll call (`creds::current`), and a process that makes none
    // (most of those a build starts) saves the ten system calls.
    let c = install(c);
    Ok(c)
}
