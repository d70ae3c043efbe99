//! Lanes: one channel per member server, taken by one thread for one
//! call (the module docs of `session`), and the calls that go through
//! them. A lane's channel to a member that joined after it was made is
//! made at its first request there (`Lane::chan`).

use super::*;
/// One channel per server, taken by one thread for one call.
pub struct Lane {
    pub(super) busy: AtomicBool,
    /// The lane's number in its session (what the boot thread knows it by).
    index: u32,
    /// One channel per server slot (the control block's room): those of
    /// the members when the lane was made, and one to each member that
    /// joined since, made at the lane's first request to it
    /// ([`Lane::chan`]). Set once each; read by other threads too
    /// (`Session::channels`).
    pub(super) chans: Box<[std::sync::OnceLock<ClientChannel>]>,
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
    pub(super) fn new(index: u32, fds: Vec<OwnedFd>, room: usize) -> Result<Lane> {
        let chans: Box<[std::sync::OnceLock<ClientChannel>]> = (0..room.max(fds.len()))
            .map(|_| std::sync::OnceLock::new())
            .collect();
        // The request buffer holds the largest frame the lane's channels
        // take: a small channel's 12 KiB in a coherent island, whose data
        // is not in messages (`atoll_msg::RingSize`).
        let mut frame = if fds.is_empty() { MAX_FRAME } else { 0 };
        for (slot, fd) in fds.into_iter().enumerate() {
            let ch = ClientChannel::map(fd.as_fd())?;
            frame = frame.max(ch.max_frame());
            let _ = chans[slot].set(ch);
            // The mapping keeps the channel alive; the fd is closed here.
        }
        Ok(Lane {
            busy: AtomicBool::new(false),
            index,
            chans,
            buf: UnsafeCell::new(vec![0u8; frame]),
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

    /// Largest payload of one `ReadData`/`WriteData` to `server` on this
    /// lane: what its channel's frames allow (8 KiB on a small channel,
    /// 32 KiB on a large one; `atoll_msg::RingSize::data_call`). A channel
    /// that cannot be had says the small size; the call then fails as
    /// any other would.
    pub fn data_call(&self, c: &Client, server: usize) -> usize {
        self.chan(c, server)
            .map_or(atoll_msg::RingSize::Small, |ch| ch.ring_size())
            .data_call()
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

    /// Has every server taken every request this lane sent it (posted
    /// ones too)? A lane's requests are served in order, so state the
    /// servers publish after each request then reflects all of them.
    pub fn requests_taken(&self) -> bool {
        self.chans
            .iter()
            .filter_map(|ch| ch.get())
            .all(|ch| ch.requests_taken())
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
        crate::rcache::sending(c, &req);
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
        crate::rcache::sending(c, &req);
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
            false => Ok(chan.send_quietly(bytes, c.control().doorbell(server))?),
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
            chan.send(bytes, c.control().doorbell(server))?;
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
                    r => {
                        crate::rcache::replied(c, &r);
                        (f.take().expect("reply handled once"))(r)
                    }
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
    pub(super) fn drain(&self, c: &Client) {
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
    pub(super) lane: &'static Lane,
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
