//! The process's session with the instance: bootstrap exchanges on the
//! session socket, the mapped buffer cache and control block, and the pool
//! of *lanes* through which requests travel.
//!
//! Life cycle (see `atoll_proto::boot`): neither `AttachLazily` nor
//! `Reattach` (after `execve`) gives a lane, so a process's first call
//! asks `NewLane`, as does a thread that finds every lane taken; `Fork`
//! creates a child session before `fork`, whose first call asks `NewLane`
//! (or whose new image asks `Reattach`). The session
//! socket *is* the session: closing its last copy releases everything.
//!
//! Lanes. A lane is one channel per server. A thread takes a free lane for
//! the duration of one emulated system call by flipping its `busy` flag
//! (lock-free), so neither other threads nor a signal handler that
//! re-enters `dispatch` on the same thread can ever wait for it: the
//! handler simply takes another lane. Lanes are never freed while the
//! session lives (a new image after `execve`, or a forked child, builds a
//! new [`Session`]).
//!
//! Ownership: only the holder of a lane's `busy` flag touches its encode
//! buffer and channels; the boot socket is used under `boot_lock` with
//! signals blocked.

use std::borrow::Cow;
use std::cell::UnsafeCell;
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicU64, Ordering};

use atoll_msg::{ClientChannel, Control, PollMode, SharedRegion};
use atoll_proto::boot::{BootReply, BootRequest, InstanceInfo};
use atoll_proto::{
    Cred, Extent, InodeId, Reply, ReplyFrame, Request, RequestFrame, SessionId, Vouched, MAX_FRAME,
};

use crate::dcache::DirCache;
use crate::error::{Error, Result};
use crate::sys::{self, SpinLock};

/// Most lanes one process may hold (threads calling concurrently, plus
/// nested signal-handler calls).
mod bootstrap;
pub use bootstrap::{attach, boot_call, boot_post, to_high};

pub const MAX_LANES: usize = 128;

/// Private descriptors are moved at or above this number, out of the way
/// of programs that expect low numbers to be free.
pub const PRIVATE_FD_MIN: i32 = 900;

/// One channel per server, taken by one thread for one call.
pub struct Lane {
    busy: AtomicBool,
    /// The lane's number in its session (what the boot thread knows it by).
    index: u32,
    /// One channel per server slot (the control block's room): those of
    /// the members when the lane was made, and one to each member that
    /// joined since, made at the lane's first request to it
    /// ([`Lane::chan`]). Set once each; read by other threads too
    /// (`Session::channels`).
    chans: Box<[std::sync::OnceLock<ClientChannel>]>,
    buf: UnsafeCell<Vec<u8>>,
    next_id: AtomicU64,
    /// Group lists already registered through this lane (`creds`).
    sent_groups: crate::creds::SentSets,
}

// SAFETY: `buf` (the only non-Sync field) is touched only by the thread
// that owns the lane's `busy` flag (see `Client::lane`), so it is never
// accessed concurrently.
unsafe impl Sync for Lane {}

/// What a `Read`/`Write` reply granted ([`Lane::call_extents`]).
#[derive(Clone, Copy, Debug)]
pub struct Granted {
    pub offset: u64,
    pub len: u64,
    /// `Reply::Extents::watched`: post `InotifyModified` after the copy.
    pub watched: bool,
    /// `Reply::Extents::pending`: post `WriteDone` after the copy.
    pub pending: bool,
}

impl Lane {
    fn new(index: u32, fds: Vec<OwnedFd>, room: usize) -> Result<Lane> {
        let chans: Box<[std::sync::OnceLock<ClientChannel>]> = (0..room.max(fds.len()))
            .map(|_| std::sync::OnceLock::new())
            .collect();
        for (slot, fd) in fds.into_iter().enumerate() {
            let _ = chans[slot].set(ClientChannel::map(fd.as_fd())?);
            // The mapping keeps the channel alive; the fd is closed here.
        }
        Ok(Lane {
            busy: AtomicBool::new(false),
            index,
            chans,
            buf: UnsafeCell::new(vec![0u8; MAX_FRAME]),
            next_id: AtomicU64::new(1),
            sent_groups: crate::creds::SentSets::new(),
        })
    }

    /// The channel of this lane that reaches `/fs/server/<server>`, through
    /// the process's name bindings (re-bound if the member restarted or
    /// moved: `names`). For sending a request.
    #[inline]
    fn chan(&self, c: &Client, server: usize) -> Result<&ClientChannel> {
        let slot = c.bind_server(server).ok_or(Error::Errno(libc::EINVAL))?;
        let cell = self.chans.get(slot).ok_or(Error::Errno(libc::EINVAL))?;
        match cell.get() {
            Some(ch) => Ok(ch),
            None => self.join_chan(c, slot, cell),
        }
    }

    /// A channel to member `slot`, which joined after this lane was made
    /// (Hare §6.1.1): asked of the boot thread at the lane's first request
    /// to it, and only once the control block counts it a member, so the
    /// lane never sends to a server that is not ready. Only the lane's
    /// holder sets it (a lane serves one thread at a time).
    #[cold]
    fn join_chan<'l>(
        &'l self,
        c: &Client,
        slot: usize,
        cell: &'l std::sync::OnceLock<ClientChannel>,
    ) -> Result<&'l ClientChannel> {
        if slot >= c.members() {
            return Err(Error::Errno(libc::EINVAL));
        }
        let ch = c.channel_to(self.index, slot)?;
        Ok(cell.get_or_init(|| ch))
    }

    /// The channel a request to `server` went out on, for its reply: the
    /// same binding, not checked again (a re-bind between send and reply
    /// is the next request's).
    #[inline]
    fn bound_chan(&self, c: &Client, server: usize) -> Result<&ClientChannel> {
        let slot = c.bound_slot(server).ok_or(Error::Errno(libc::EINVAL))?;
        self.chans
            .get(slot)
            .and_then(|ch| ch.get())
            .ok_or(Error::Errno(libc::EINVAL))
    }

    /// Register group list `set` with `server` through this lane's channel
    /// unless it went already: posted just before the request that names
    /// it, which the server then serves after it (a channel is served in
    /// order), so no round trip is paid. Called before `buf` is used.
    fn send_groups(&self, server: usize, chan: &ClientChannel, set: u32) -> Result<()> {
        if self.sent_groups.check_and_mark(server, set) {
            return Ok(());
        }
        let groups = crate::creds::groups_of(set);
        let frame = RequestFrame {
            id: self.next_id.fetch_add(1, Ordering::Relaxed) | atoll_proto::POSTED,
            cred: Cred::default(),
            pid: 0,
            req: Request::SetGroups { set, groups },
            vouched: Cow::Borrowed(&[]),
        };
        // SAFETY: the caller holds this lane (LaneGuard) and has not
        // started to use `buf`.
        let buf = unsafe { &mut *self.buf.get() };
        let sent = atoll_proto::encode(&frame, buf)
            .map_err(Error::from)
            .and_then(|bytes| Ok(chan.send_unrung(bytes)?));
        if sent.is_err() {
            self.sent_groups.unmark(server, set);
        }
        sent
    }

    /// Send one request without waiting (directory broadcast, Hare
    /// §3.7.3). Returns the request id for [`Lane::recv`].
    pub fn send(&self, c: &Client, cred: Cred, server: usize, req: Request<'_>) -> Result<u64> {
        self.send_vouched(c, cred, &[], server, req)
    }

    /// [`Lane::send`] with attributes of inodes owned by other servers that
    /// the request's checks need (`atoll_proto::Vouched`, `dirperm.rs`).
    pub fn send_vouched(
        &self,
        c: &Client,
        cred: Cred,
        vouched: &[Vouched],
        server: usize,
        req: Request<'_>,
    ) -> Result<u64> {
        let chan = self.chan(c, server)?;
        if matches!(req, Request::SetLock { .. }) && !c.any_locks.load(Ordering::Relaxed) {
            c.any_locks.store(true, Ordering::Relaxed);
        }
        self.send_groups(server, chan, cred.groups)?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let frame = RequestFrame {
            id,
            cred,
            pid: crate::sys::self_pid() as u32,
            req,
            vouched: Cow::Borrowed(vouched),
        };
        // SAFETY: the caller holds this lane (LaneGuard), so no other
        // thread or handler uses `buf` now.
        let buf = unsafe { &mut *self.buf.get() };
        let bytes = atoll_proto::encode(&frame, buf)?;
        self.send_frame(c, chan, server, bytes)?;
        Ok(id)
    }

    /// Send one request whose reply nobody reads ([`atoll_proto::POSTED`]):
    /// the server serves it and stays silent, so the caller pays one
    /// enqueue instead of a round trip. Requests on one channel are served
    /// in order, but a posted request may be served after a later request
    /// sent on another lane: post only what no later call depends on.
    pub fn post(&self, c: &Client, server: usize, req: Request<'_>) -> Result<()> {
        self.post_frame(c, server, req, true)
    }

    /// [`Lane::post`] without ringing the server's doorbell: for news that
    /// only matters to a request that will ring it anyway (`WriteDone`,
    /// which only readers that wait for it, by asking again, need), so a
    /// sleeping server is not woken for it.
    pub fn post_quietly(&self, c: &Client, server: usize, req: Request<'_>) -> Result<()> {
        self.post_frame(c, server, req, false)
    }

    fn post_frame(&self, c: &Client, server: usize, req: Request<'_>, ring: bool) -> Result<()> {
        let chan = self.chan(c, server)?;
        let cred = c.cred();
        self.send_groups(server, chan, cred.groups)?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) | atoll_proto::POSTED;
        let frame = RequestFrame {
            id,
            cred,
            pid: crate::sys::self_pid() as u32,
            req,
            vouched: Cow::Borrowed(&[]),
        };
        // SAFETY: the caller holds this lane (LaneGuard), so no other
        // thread or handler uses `buf` now.
        let buf = unsafe { &mut *self.buf.get() };
        let bytes = atoll_proto::encode(&frame, buf)?;
        match ring {
            true => self.send_frame(c, chan, server, bytes),
            false => Ok(chan.send_unrung(bytes)?),
        }
    }

    /// Enqueue an encoded frame. A server that polls its channels without
    /// ever sleeping ([`PollMode::Spin`], dedicated cores) needs no
    /// doorbell: skipping it saves a contended read-modify-write of a cache
    /// line the server is watching, on every request.
    #[inline]
    fn send_frame(
        &self,
        c: &Client,
        chan: &ClientChannel,
        server: usize,
        bytes: &[u8],
    ) -> Result<()> {
        crate::msgbound::sending(c, server);
        if c.poll == PollMode::Spin {
            chan.send_unrung(bytes)?;
        } else {
            chan.send(bytes, c.control.doorbell(server))?;
        }
        Ok(())
    }

    /// Wait for the reply to request `id` from `server` and hand it to `f`
    /// in place (borrowed names and data stay in the ring). Replies of
    /// older, abandoned requests are skipped. A request its server's
    /// successor did not apply fails with `EIO` here: only the call paths
    /// below send one again (`resend`).
    pub fn recv<R>(
        &self,
        c: &Client,
        server: usize,
        id: u64,
        f: impl FnOnce(Reply<'_>) -> Result<R>,
    ) -> Result<R> {
        crate::resend::to_eio(self.answer(c, server, id, f))
    }

    /// [`Lane::recv`], but "not applied" is left as it is.
    fn answer<R>(
        &self,
        c: &Client,
        server: usize,
        id: u64,
        f: impl FnOnce(Reply<'_>) -> Result<R>,
    ) -> Result<R> {
        let chan = self.bound_chan(c, server)?;
        let mut f = Some(f);
        let since = crate::msgbound::waiting();
        loop {
            let out = chan.recv(c.poll, |bytes| -> Option<Result<R>> {
                let frame: ReplyFrame<'_> = match atoll_proto::decode(bytes) {
                    Ok(fr) => fr,
                    Err(e) => return Some(Err(e.into())),
                };
                if frame.id < id {
                    return None; // stale reply of an abandoned call
                }
                if frame.id != id {
                    return Some(Err(Error::Protocol("reply id")));
                }
                Some(match frame.reply {
                    Reply::Err(e) => Err(e.into()),
                    r => (f.take().expect("reply handled once"))(r),
                })
            })?;
            if let Some(r) = out {
                crate::msgbound::replied(since);
                return r;
            }
        }
    }

    /// A `Read`/`Write` exchange decoded without allocating (hot path):
    /// `on(offset, len, extent)` sees each extent of the reply in order.
    pub fn call_extents(
        &self,
        c: &Client,
        server: usize,
        req: Request<'_>,
        mut on: impl FnMut(u64, u64, Extent) -> bool,
    ) -> Result<Granted> {
        crate::resend::resending(&req, || self.extents_once(c, server, req.clone(), &mut on))
    }

    /// One send of [`Lane::call_extents`].
    fn extents_once(
        &self,
        c: &Client,
        server: usize,
        req: Request<'_>,
        on: &mut impl FnMut(u64, u64, Extent) -> bool,
    ) -> Result<Granted> {
        use crate::fast::{decode_extents, Decoded};
        let id = self.send(c, c.cred(), server, req)?;
        let chan = self.bound_chan(c, server)?;
        let since = crate::msgbound::waiting();
        loop {
            let out = chan.recv(c.poll, |bytes| -> Option<Result<Granted>> {
                match decode_extents(bytes, &mut *on) {
                    Decoded::Extents {
                        id: got,
                        offset,
                        len,
                        watched,
                        pending,
                    } if got == id => Some(Ok(Granted {
                        offset,
                        len,
                        watched,
                        pending,
                    })),
                    Decoded::Refused { id: got } if got == id => Some(Err(Error::Errno(libc::EIO))),
                    Decoded::Extents { id: got, .. }
                    | Decoded::Refused { id: got }
                    | Decoded::Other { id: got }
                        if got < id =>
                    {
                        None // stale reply of an abandoned call
                    }
                    Decoded::Other { id: got } if got == id => {
                        Some(match atoll_proto::decode::<ReplyFrame<'_>>(bytes) {
                            Ok(ReplyFrame {
                                reply: Reply::Err(e),
                                ..
                            }) => Err(e.into()),
                            Ok(_) => Err(Error::Protocol("expected Extents")),
                            Err(e) => Err(e.into()),
                        })
                    }
                    Decoded::Malformed => Some(Err(Error::Protocol("malformed Extents"))),
                    _ => Some(Err(Error::Protocol("reply id"))),
                }
            })?;
            if let Some(r) = out {
                crate::msgbound::replied(since);
                return r;
            }
        }
    }

    /// One request/reply exchange with the caller's credentials.
    pub fn call<R>(
        &self,
        c: &Client,
        server: usize,
        req: Request<'_>,
        f: impl FnOnce(Reply<'_>) -> Result<R>,
    ) -> Result<R> {
        self.call_cred(c, c.cred(), server, req, f)
    }

    pub fn call_cred<R>(
        &self,
        c: &Client,
        cred: Cred,
        server: usize,
        req: Request<'_>,
        f: impl FnOnce(Reply<'_>) -> Result<R>,
    ) -> Result<R> {
        let mut f = Some(f);
        let Some(route) = crate::adapt::route(&req) else {
            return crate::resend::resending(&req, || {
                let id = self.send(c, cred, server, req.clone())?;
                self.answer(c, server, id, |r| (f.take().expect("called once"))(r))
            });
        };
        // A request about one name goes again, to the name's server under
        // the mode its home server reports, if the first answered `EMODE`
        // (adaptive directories, `adapt`).
        let (mut server, mut req) = (server, req);
        for _ in 0..64 {
            let r = crate::resend::resending(&req, || {
                let id = self.send(c, cred, server, req.clone())?;
                self.answer(c, server, id, |r| (f.take().expect("called once"))(r))
            });
            match r {
                Err(Error::Errno(e)) if e == crate::adapt::EMODE => {
                    // Nothing new about the mode and the same server: the
                    // `EMODE` is about something else (an rmdir's child).
                    let moved = crate::adapt::refresh(c, self, route.0)?;
                    let to = crate::adapt::entry_server(c, route.0, route.1);
                    if !moved && to == server {
                        return r;
                    }
                    let Some(again) = crate::adapt::rerouted(req.clone(), server, to) else {
                        return r;
                    };
                    (server, req) = (to, again);
                }
                r => return r,
            }
        }
        Err(Error::Errno(libc::EAGAIN))
    }

    /// [`Lane::call`] carrying attributes of inodes owned elsewhere.
    pub fn call_vouched<R>(
        &self,
        c: &Client,
        server: usize,
        vouched: &[Vouched],
        req: Request<'_>,
        f: impl FnOnce(Reply<'_>) -> Result<R>,
    ) -> Result<R> {
        // A name change in a directory owned elsewhere: its owner learns of
        // it (times, subdirectories; `dirperm::after_change`).
        let route = crate::adapt::route(&req);
        let mut change = crate::dirperm::NameChange::of(&req, server);
        let mut outcome = (false, [0, 0]);
        let mut f = Some(f);
        // The directory's default ACL, read once if a creation needs it.
        let inherited = std::cell::OnceCell::<Vec<u8>>::new();
        let (mut server, mut vouches, mut req) = (server, None, req);
        for _ in 0..64 {
            let v = vouches
                .as_ref()
                .map_or(vouched, |v: &crate::dirperm::Vouches| v.as_slice());
            if let Some(dir) = crate::dirperm::inherits_from(&req, v) {
                if inherited.get().is_none() {
                    let _ = inherited.set(crate::dirperm::default_acl(c, self, dir)?);
                }
                if let Some(acl) = inherited.get() {
                    crate::dirperm::set_inherit(&mut req, acl);
                }
            }
            let r = crate::resend::resending(&req, || {
                let id = self.send_vouched(c, c.cred(), v, server, req.clone())?;
                self.answer(c, server, id, |r| {
                    outcome = change.outcome(&r);
                    (f.take().expect("called once"))(r)
                })
            });
            match (r, route) {
                // Sent by a stale idea of the directory's mode: again, to
                // the name's server now, with what that server needs.
                (Err(Error::Errno(e)), Some((dir, name))) if e == crate::adapt::EMODE => {
                    let moved = crate::adapt::refresh(c, self, dir)?;
                    let to = crate::adapt::entry_server(c, dir, name);
                    if !moved && to == server {
                        return Err(Error::Errno(e));
                    }
                    let Some(again) = crate::adapt::rerouted(req.clone(), server, to) else {
                        return Err(Error::Errno(e));
                    };
                    (server, req) = (to, again);
                    change = crate::dirperm::NameChange::of(&req, server);
                    vouches = Some(crate::dirperm::vouches_for(c, self, dir, server)?);
                }
                (r, _) => {
                    let r = r?;
                    if outcome.0 {
                        crate::dirperm::after_change(c, self, &change, outcome.1);
                    }
                    return Ok(r);
                }
            }
        }
        Err(Error::Errno(libc::EAGAIN))
    }

    /// A request whose only good answer is `Ok`.
    pub fn call_ok(&self, c: &Client, server: usize, req: Request<'_>) -> Result<()> {
        self.call(c, server, req, |r| match r {
            Reply::Ok => Ok(()),
            _ => Err(Error::Protocol("expected Ok")),
        })
    }

    /// Server-initiated messages of this lane: directory-cache
    /// invalidations go to the session's cache (never dropped while it is
    /// on); without a cache they are dropped to keep the inbox from filling.
    fn drain(&self, c: &Client) {
        match c.dcache() {
            Some(dc) => dc.drain(self.chans.iter().filter_map(|ch| ch.get())),
            None => {
                for ch in self.chans.iter().filter_map(|ch| ch.get()) {
                    let _ = ch.drain_inbox(|bytes| {
                        if let Ok(atoll_proto::Notice::Adapt { dir, distributed }) =
                            atoll_proto::decode(bytes)
                        {
                            crate::adapt::on_notice(dir, distributed);
                        }
                    });
                }
            }
        }
    }
}

/// Run a creation (`Open` with `O_CREAT`, `MakeNode`, `Link`) again while
/// it answers `EAGAIN`: a directory marked by a concurrent three-phase
/// rmdir refuses creations until the rmdir commits or aborts (Hare
/// §3.4.1). Gives up after about ten seconds.
pub fn retry_marked<R>(mut f: impl FnMut() -> Result<R>) -> Result<R> {
    let mut wait = 50_000u64;
    let mut total = 0u64;
    loop {
        match f() {
            Err(Error::Errno(e)) if e == libc::EAGAIN && total < 10_000_000_000 => {
                sys::sleep_ns(wait);
                total += wait;
                wait = (wait * 2).min(10_000_000);
            }
            r => return r,
        }
    }
}

/// A lane held by the current thread; released on drop.
pub struct LaneGuard {
    lane: &'static Lane,
}

impl core::ops::Deref for LaneGuard {
    type Target = Lane;
    fn deref(&self) -> &Lane {
        self.lane
    }
}

impl Drop for LaneGuard {
    fn drop(&mut self) {
        self.lane.busy.store(false, Ordering::Release);
    }
}

/// A lane taken at its first use, for a call that may need no server at
/// all: a forked child's session has no lane yet (`Client::lane` would
/// ask `NewLane`), and the `execve` of a host program with no atoll
/// descriptor to hand over needs none.
pub struct LazyLane<'c> {
    c: &'c Client,
    lane: std::cell::OnceCell<LaneGuard>,
}

impl<'c> LazyLane<'c> {
    pub fn new(c: &'c Client) -> LazyLane<'c> {
        LazyLane {
            c,
            lane: std::cell::OnceCell::new(),
        }
    }

    /// One holding `lane` already.
    pub fn holding(c: &'c Client, lane: LaneGuard) -> LazyLane<'c> {
        LazyLane {
            c,
            lane: std::cell::OnceCell::from(lane),
        }
    }

    /// The lane, taken now if it was not yet.
    pub fn get(&self) -> Result<&Lane> {
        if let Some(g) = self.lane.get() {
            return Ok(g);
        }
        let g = self.c.lane()?;
        Ok(self.lane.get_or_init(|| g))
    }

    /// The lane if one was taken already.
    pub fn taken(&self) -> Option<&Lane> {
        self.lane.get().map(|g| &**g)
    }
}

/// One session: its id and its lanes. Replaced wholesale in a forked child.
pub struct Session {
    pub id: SessionId,
    lanes: Vec<AtomicPtr<Lane>>,
    /// Directory-lookup cache (Hare §3.7.2); per session, so a forked
    /// child starts empty.
    pub dcache: DirCache,
}

impl Session {
    /// Every channel of every lane of this session (where invalidations
    /// for it may arrive).
    pub fn channels(&self) -> impl Iterator<Item = &ClientChannel> {
        self.lanes
            .iter()
            .map(|l| l.load(Ordering::Acquire))
            .take_while(|p| !p.is_null())
            // SAFETY: lanes are leaked boxes, never freed.
            .flat_map(|p| unsafe { &*p }.chans.iter().filter_map(|ch| ch.get()))
    }
}

impl Session {
    fn new(id: SessionId, lane0: Lane) -> Session {
        let s = Session::without_lanes(id);
        s.lanes[0].store(Box::into_raw(Box::new(lane0)), Ordering::Release);
        s
    }

    /// A forked child's session: its first call asks for a lane
    /// ([`Client::lane`]).
    fn without_lanes(id: SessionId) -> Session {
        Session {
            id,
            lanes: (0..MAX_LANES)
                .map(|_| AtomicPtr::new(core::ptr::null_mut()))
                .collect(),
            dcache: DirCache::new(),
        }
    }
}

/// The current working directory when it is inside atoll.
pub struct Cwd {
    pub ino: InodeId,
    /// Canonical absolute path (what `getcwd` answers).
    pub path: Vec<u8>,
}

/// Everything a process knows about its instance. One per process, leaked
/// (`&'static`), created by `init`.
pub struct Client {
    pub info: InstanceInfo,
    pub mount: Vec<u8>,
    /// The mount's parent directory (`..` from the mount root leads there).
    pub mount_parent: Vec<u8>,
    pub poll: PollMode,
    pub cache: SharedRegion,
    pub control: Control,
    pub socket_path: String,
    /// Absolute path of the preload library (`ATOLL_PRELOAD`).
    pub preload: Option<String>,
    /// Private descriptors (relocatable when a program `dup2`s onto them).
    pub socket_fd: AtomicI32,
    /// The placeholder template, -1 until the first atoll descriptor
    /// ([`Client::template`]).
    pub template_fd: AtomicI32,
    pub cache_fd: AtomicI32,
    /// The control block's memfd, kept for an exec to hand over.
    pub control_fd: AtomicI32,
    /// A forked child that has not yet named its process to the boot
    /// thread (`BootRequest::ChildPid`, sent with its first `NewLane`).
    pid_untold: AtomicBool,
    session: AtomicPtr<Session>,
    pub boot_lock: SpinLock,
    pub umask: AtomicU32,
    cwd: AtomicPtr<Cwd>,
    /// Set once the process takes a POSIX record lock, so that `close`
    /// only sends the release-all unlock when it may matter.
    pub posix_locks: AtomicBool,
    /// Set once any lock request (`SetLock`: record, OFD or `flock`) went
    /// out: from then on `Close` waits for its reply, because releasing a
    /// lock must be ordered before whatever the program does next.
    pub any_locks: AtomicBool,
    /// This process's bindings of the file servers' names (`names`).
    pub(crate) fs_names: crate::names::FsNames,
}

impl Client {
    pub fn session(&self) -> &Session {
        // SAFETY: the pointer is set at construction and only ever replaced
        // by another leaked Box (fork child); sessions are never freed.
        unsafe { &*self.session.load(Ordering::Acquire) }
    }

    /// Does file data take the direct path (Hare §3.3: the client copies
    /// between the program and the buffer-cache blocks a server names)?
    /// Not in a copy island, whose processes do not map the cache: there
    /// the bytes travel in `ReadData`/`WriteData` and the server copies
    /// (Cosh §5 *copy*); nor under `--without direct-cache`. Hot path.
    pub fn direct_data(&self) -> bool {
        !self.info.without.direct_cache && self.info.island.maps_cache()
    }

    /// Does this process map the buffer cache (every island but `copy`)?
    pub fn maps_cache(&self) -> bool {
        self.info.island.maps_cache()
    }

    /// The directory-lookup cache, unless `--without dir-cache`.
    pub fn dcache(&self) -> Option<&DirCache> {
        (!self.info.without.dir_cache).then(|| &self.session().dcache)
    }

    pub fn session_id(&self) -> SessionId {
        self.session().id
    }

    /// The credentials requests carry: the calling thread's (`creds`).
    pub fn cred(&self) -> Cred {
        crate::creds::current().fs
    }

    /// The atoll cwd, if the cwd is inside atoll.
    pub fn cwd(&self) -> Option<&Cwd> {
        let p = self.cwd.load(Ordering::Acquire);
        // SAFETY: cwd boxes are leaked, never freed (see `set_cwd`), so a
        // reference stays valid even after a concurrent chdir.
        (!p.is_null()).then(|| unsafe { &*p })
    }

    /// Replace the atoll cwd (`None`: the cwd is on the host). Old values
    /// are leaked on purpose: a concurrent walk may still read them, and a
    /// few hundred bytes per `chdir` is cheaper than reclamation here.
    // TODO(atoll): recycle cwd boxes with an epoch once chdir-heavy
    // workloads show up.
    ///
    /// The path is published for other processes of the instance, which
    /// read it for `/proc/PID/cwd` (`fdpub`, `proclink`).
    pub fn set_cwd(&self, cwd: Option<Cwd>) {
        let entering = cwd.is_some() && self.cwd().is_none();
        crate::fdpub::publish_cwd(cwd.as_ref().map(|w| w.path.as_slice()));
        let p = cwd.map_or(core::ptr::null_mut(), |c| Box::into_raw(Box::new(c)));
        self.cwd.store(p, Ordering::Release);
        if entering {
            self.void_kernel_cwd();
        }
    }

    /// The instance's runtime directory (where its boot socket is).
    pub fn runtime_dir(&self) -> &str {
        self.socket_path
            .rsplit_once('/')
            .map_or("/tmp", |(dir, _)| dir)
    }

    /// While the cwd is atoll's, the kernel's cwd is never used by atoll —
    /// but a program atoll cannot see (statically linked, or a raw call
    /// before the library started) would resolve relative paths there. So
    /// the kernel's cwd moves to an empty directory that is then removed:
    /// Linux refuses to create anything in a removed directory (`ENOENT`),
    /// even for root, so such a program fails instead of writing host files
    /// in the program's name. Raw calls only (this runs inside `chdir`).
    /// Its name (`proclink::VOID_PREFIX`) tells other processes of the
    /// instance that the cwd is atoll's.
    fn void_kernel_cwd(&self) {
        // A program started with its cwd in the mount has its parent's
        // removed directory as its kernel cwd already (fork and exec keep
        // it): nothing can be created there either, and it names this
        // instance for `/proc/PID/cwd` readers (`proclink`). Keeping it
        // saves a process start the `mkdir`, the dearest of these calls
        // on the host file system.
        if crate::proclink::kernel_link(b"/proc/self/cwd")
            .is_some_and(|k| crate::proclink::is_instance_void(self, &k))
        {
            return;
        }
        // SAFETY: no arguments.
        let tid = unsafe { sys::sc(libc::SYS_gettid, 0, 0, 0, 0) };
        let stamp = sys::monotonic_ns();
        for base in [self.runtime_dir(), "/tmp"] {
            let mut path =
                format!("{base}/{}{tid}-{stamp}", crate::proclink::VOID_PREFIX).into_bytes();
            path.push(0);
            let at = path.as_ptr() as u64;
            // SAFETY: NUL-terminated local path.
            if unsafe { sys::sc(libc::SYS_mkdir, at, 0o500, 0, 0) } != 0 {
                continue;
            }
            // SAFETY: as above.
            unsafe {
                sys::sc(libc::SYS_chdir, at, 0, 0, 0);
                sys::sc(libc::SYS_rmdir, at, 0, 0, 0);
            }
            return;
        }
    }

    /// The placeholder template: every atoll fd is a dup of it. Made at
    /// the first atoll descriptor, not as the image starts: most images
    /// (a shell's `/bin/true`, `cat` of a host file) never hold one, and a
    /// memfd per image was a `memfd_create`, a move to a high number and
    /// the memfd's teardown at exit. Made under the descriptor table's
    /// lock, which a `fork` holds across the clone (`forkgate`), so a child
    /// never inherits a template it does not know of; then published with
    /// atoll's other own descriptors (`fdpub`).
    pub fn template(&self) -> Result<i32> {
        let fd = self.template_fd.load(Ordering::Acquire);
        if fd >= 0 {
            return Ok(fd);
        }
        {
            let _held = crate::fdpub::fork_lock().lock();
            if self.template_fd.load(Ordering::Acquire) < 0 {
                let made =
                    rustix::fs::memfd_create("atoll-placeholder", rustix::fs::MemfdFlags::CLOEXEC)?;
                self.template_fd
                    .store(to_high(made.into_raw_fd(), 0), Ordering::Release);
            }
        }
        crate::fdpub::publish_private_fds();
        Ok(self.template_fd.load(Ordering::Acquire))
    }

    /// Is `fd` one of atoll's private descriptors?
    pub fn is_private_fd(&self, fd: i32) -> bool {
        fd >= 0
            && (fd == self.socket_fd.load(Ordering::Relaxed)
                || fd == self.template_fd.load(Ordering::Relaxed)
                || fd == self.cache_fd.load(Ordering::Relaxed)
                || fd == self.control_fd.load(Ordering::Relaxed)
                || fd == crate::fdpub::fd())
    }

    /// atoll's own descriptors now (the session socket, the placeholder
    /// template, the buffer cache, the control block, the published
    /// descriptor table). -1 for one that is not open.
    pub fn private_fds(&self) -> [i32; 5] {
        [
            self.socket_fd.load(Ordering::Relaxed),
            self.template_fd.load(Ordering::Relaxed),
            self.cache_fd.load(Ordering::Relaxed),
            self.control_fd.load(Ordering::Relaxed),
            crate::fdpub::fd(),
        ]
    }

    /// Move a private descriptor away from `fd` (the program wants that
    /// number, e.g. `dup2(x, fd)`).
    pub fn relocate_private(&self, fd: i32) {
        for slot in [
            &self.socket_fd,
            &self.template_fd,
            &self.cache_fd,
            &self.control_fd,
        ] {
            if slot.load(Ordering::Relaxed) == fd {
                let n = to_high(fd, fd + 1);
                slot.store(n, Ordering::Relaxed);
            }
        }
        crate::fdpub::relocate(fd);
    }

    /// Take a free lane for one call (lock-free), creating one with
    /// `NewLane` when all are busy.
    pub fn lane(&self) -> Result<LaneGuard> {
        let s = self.session();
        loop {
            for slot in &s.lanes {
                let p = slot.load(Ordering::Acquire);
                if p.is_null() {
                    break;
                }
                // SAFETY: lanes are leaked boxes, never freed.
                let lane: &'static Lane = unsafe { &*p };
                if lane
                    .busy
                    .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    lane.drain(self);
                    // A swap a home server's policy asked for (`adapt`).
                    crate::adapt::run_pending(self, lane);
                    return Ok(LaneGuard { lane });
                }
            }
            if let Some(g) = self.new_lane(s)? {
                return Ok(g);
            }
            // Every lane slot is taken: wait for one to come back.
            // SAFETY: sched_yield takes no arguments.
            unsafe { sys::sc(libc::SYS_sched_yield, 0, 0, 0, 0) };
        }
    }

    fn new_lane(&self, s: &Session) -> Result<Option<LaneGuard>> {
        let _g = self.boot_lock.lock();
        let Some(slot) = s.lanes.iter().find(|l| l.load(Ordering::Acquire).is_null()) else {
            return Ok(None);
        };
        let sock = self.socket_fd.load(Ordering::Relaxed);
        // SAFETY: the session socket stays open while the client lives.
        let sock = unsafe { BorrowedFd::borrow_raw(sock) };
        if self.pid_untold.swap(false, Ordering::Relaxed) {
            let pid = std::process::id();
            boot_post(sock, &BootRequest::ChildPid { pid });
        }
        let (reply, fds) = boot_call(sock, &BootRequest::NewLane)?;
        let BootReply::Lane { lane } = reply else {
            return Err(Error::Boot(format!("NewLane answered {reply:?}")));
        };
        let l = Lane::new(lane, fds, self.control.servers())?;
        l.busy.store(true, Ordering::Relaxed);
        let p = Box::into_raw(Box::new(l));
        slot.store(p, Ordering::Release);
        // SAFETY: just leaked, never freed.
        Ok(Some(LaneGuard {
            lane: unsafe { &*p },
        }))
    }

    /// The file servers that are members now: servers `0..members` (the
    /// boot count, and more as servers join the running instance, Hare
    /// §6.1.1). One acquire load of a word written only as members join.
    /// New inodes and directories may go to any of them; a distributed
    /// directory's names go by the width it records (`adapt::width`).
    #[inline]
    pub fn members(&self) -> usize {
        self.control.members()
    }

    /// A channel of lane `lane` to member `server` (`BootRequest::Channel`).
    fn channel_to(&self, lane: u32, server: usize) -> Result<ClientChannel> {
        let _g = self.boot_lock.lock();
        let sock = self.socket_fd.load(Ordering::Relaxed);
        // SAFETY: the session socket stays open while the client lives.
        let sock = unsafe { BorrowedFd::borrow_raw(sock) };
        let req = BootRequest::Channel {
            lane,
            server: server as u32,
        };
        let (reply, fds) = boot_call(sock, &req)?;
        match (reply, fds.as_slice()) {
            (BootReply::Lane { lane: l }, [fd]) if l == lane => Ok(ClientChannel::map(fd.as_fd())?),
            (r, _) => Err(Error::Boot(format!("Channel answered {r:?}"))),
        }
    }

    /// Does this process hold a lane (is its first lane made)? A new image
    /// or a forked child holds none until its first call.
    pub fn holds_lane(&self) -> bool {
        !self.session().lanes[0].load(Ordering::Acquire).is_null()
    }

    /// Report client counters on the session socket, for server 0 through
    /// the boot thread (`BootRequest::Counters`): at exit, by a process
    /// that holds no lane, instead of asking one for them.
    pub fn post_counters(&self, k: atoll_proto::ClientCounters) {
        let _g = self.boot_lock.lock();
        let sock = self.socket_fd.load(Ordering::Relaxed);
        // SAFETY: the session socket stays open while the client lives.
        let sock = unsafe { BorrowedFd::borrow_raw(sock) };
        boot_post(sock, &BootRequest::Counters(k));
    }

    /// Create a child session for `fork` (the caller then shares every
    /// description with it). Returns `(child id, child socket)`; the
    /// child has no lane until it needs one.
    pub fn fork_session(&self) -> Result<(SessionId, OwnedFd)> {
        let _g = self.boot_lock.lock();
        let sock = self.socket_fd.load(Ordering::Relaxed);
        // SAFETY: the session socket stays open while the client lives.
        let sock = unsafe { BorrowedFd::borrow_raw(sock) };
        let (reply, fds) = boot_call(sock, &BootRequest::Fork)?;
        let BootReply::Forked { child } = reply else {
            return Err(Error::Boot(format!("Fork answered {reply:?}")));
        };
        let socket = fds
            .into_iter()
            .next()
            .ok_or_else(|| Error::Boot("Fork without socket".into()))?;
        Ok((child, socket))
    }

    /// Has this image's session no lane (a forked child that has not
    /// asked a server anything yet)?
    pub fn has_no_lane(&self) -> bool {
        self.session().lanes[0].load(Ordering::Acquire).is_null()
    }

    /// A copy of the session socket that survives `execve` (no
    /// `FD_CLOEXEC`, at a high number), for a new image to `Reattach` on.
    pub fn inheritable_socket(&self) -> Result<OwnedFd> {
        let sock = self.socket_fd.load(Ordering::Relaxed);
        let n = sys::fcntl_int(sock, libc::F_DUPFD, PRIVATE_FD_MIN as i64);
        if n < 0 {
            return Err(Error::Errno(-n as i32));
        }
        // SAFETY: `n` was just made by F_DUPFD and is owned by no one else.
        Ok(unsafe { OwnedFd::from_raw_fd(n as i32) })
    }

    /// In a forked child: switch to the child session, which has no lane
    /// until the child's first call asks for one. The parent's lanes are
    /// dropped from this process (their memory stays mapped in the
    /// parent).
    pub fn adopt_child_session(&self, id: SessionId, socket: RawFd) -> Result<()> {
        let old_sock = self.socket_fd.swap(socket, Ordering::Relaxed);
        sys::close(old_sock);
        let s = Box::into_raw(Box::new(Session::without_lanes(id)));
        // The parent's Session (and its lanes) is leaked in the child: it is
        // small, and another thread's stale reference could not exist after
        // fork anyway.
        self.session.store(s, Ordering::Release);
        // The child names its process when it first asks for a lane
        // (`new_lane`); a child that only execs names it in its new image's
        // `Reattached`, and one that asks nothing needs no name: a post
        // less per fork, and a wake-up less of the boot thread.
        self.pid_untold.store(true, Ordering::Relaxed);
        Ok(())
    }
}

/// Global client, set once by `init`.
static CLIENT: AtomicPtr<Client> = AtomicPtr::new(core::ptr::null_mut());

pub fn client() -> Option<&'static Client> {
    let p = CLIENT.load(Ordering::Acquire);
    // SAFETY: set once to a leaked Box by `install`, never freed.
    (!p.is_null()).then(|| unsafe { &*p })
}

fn install(c: Client) -> &'static Client {
    let p = Box::into_raw(Box::new(c));
    CLIENT.store(p, Ordering::Release);
    atoll_msg::liveness::set_peer_check(instance_gone);
    // SAFETY: just leaked.
    unsafe { &*p }
}

/// Is the instance gone? The boot connection is this session (see the
/// module docs): the kernel hangs it up when the instance process dies, so
/// a process that outlived its instance fails its atoll calls with `EIO`
/// instead of waiting for servers that no longer exist. Never blocks.
fn instance_gone() -> bool {
    let Some(c) = client() else {
        return false;
    };
    let mut p = libc::pollfd {
        fd: c.socket_fd.load(Ordering::Relaxed),
        events: libc::POLLRDHUP,
        revents: 0,
    };
    // SAFETY: one pollfd on our stack, timeout 0.
    let r = unsafe { sys::sc(libc::SYS_poll, &mut p as *mut libc::pollfd as u64, 1, 0, 0) };
    r == 1 && p.revents & (libc::POLLHUP | libc::POLLRDHUP | libc::POLLERR) != 0
}
