//! Channels: one memfd joining one client (a thread's lane) to one server.
//!
//! Layout of the memfd ([`RingSize::file_bytes`] bytes), in one of two
//! sizes chosen when the channel is made ([`RingSize`]):
//!
//! ```text
//!                                                        Small     Large
//!  0      header { magic, closed, inbox_overflow, parked }  128 B
//!  128    request ring header  (client → server)            384 B
//!  512    reply ring header    (server → client)            384 B
//!  896    inbox ring header    (server → client, unasked)   384 B
//!  4096   parked reply (one frame, in whole pages)        12 KiB    36 KiB
//!         request data                                    64 KiB   256 KiB
//!         reply data                                      64 KiB   256 KiB
//!         inbox data                                      64 KiB    64 KiB
//!  total                                                 208 KiB   616 KiB
//! ```
//!
//! A mapping learns the layout from the file's size, never from a field
//! the peer writes: a file of any other size is not a channel, and the
//! rings' bounds are then the mapping's own constants.
//!
//! Life cycle: the boot thread `create`s a channel and keeps the server end
//! for the server, sends the fd to the client (`BootReply` fds), which
//! `map`s its end. A request travels: client `send` (frame into the request
//! ring, then the server's [`Doorbell`] is rung) → server `try_recv` (frame
//! lent in place) → server `reply` (frame into the reply ring, client woken
//! if it sleeps) → client `recv`. Server-initiated messages (directory-cache
//! invalidations, Hare §3.6.2) go into the inbox with `notify`, which never
//! waits; the client drains the inbox before trusting its cache. The channel
//! A reply that finds the reply ring full waits in the *parked* slot
//! ([`ServerChannel::park_reply`]) until there is room: it is in the
//! channel's memory, not the server's, so a successor of a server process
//! killed meanwhile still delivers it (fos §3.4: what a restarted server
//! needs lives outside it). The channel
//! ends when either side calls `close` (or the memfd's last mapping goes):
//! waits then fail with `BrokenPipe` instead of hanging on a gone peer.

use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};

use atoll_proto::boot::PollMode;
use atoll_proto::MAX_FRAME;

use crate::control::Doorbell;
use crate::region::SharedRegion;
use crate::ring::{broken_pipe, Consumer, Padded, Producer, RingShared};
use crate::sync::{AtomicU32, Ordering};
use crate::MsgError;

const CHANNEL_MAGIC: u64 = u64::from_le_bytes(*b"ATOLLCH1");

#[repr(C)]
struct ChannelHeader {
    /// Written once by `create`.
    magic: u64,
    /// Set (never cleared) by either side's `close`.
    closed: AtomicU32,
    /// Set by the server when a `notify` found the inbox full; cleared by
    /// the client that then drops everything it cached.
    inbox_overflow: AtomicU32,
    /// Written by the server only: 0 when no reply is parked, else 1 + the
    /// parked reply's length (its bytes are in the parked slot).
    parked: AtomicU32,
}

/// The two layouts of a channel (issue 16 follow-up). File data travels
/// in messages only where the buffer cache is not shared: a copy island,
/// and programs on another host (`atoll node`), whose `ReadData` and
/// `WriteData` carry up to 32 KiB ([`atoll_proto::MAX_DATA_CALL`]) and
/// need [`Large`](RingSize::Large) rings. A coherent or incoherent
/// island's messages are small (the data is in the shared cache, Hare
/// §3.3): its channels stay [`Small`](RingSize::Small), so each process
/// and server touches a quarter of the ring memory and small messages walk
/// a quarter of the cache and TLB footprint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RingSize {
    /// 64 KiB request and reply rings, frames of up to 12 KiB.
    Small,
    /// 256 KiB request and reply rings, frames of up to
    /// [`atoll_proto::MAX_FRAME`] (33 KiB).
    Large,
}

impl RingSize {
    /// The size for channels of an island that does (`true`) or does not
    /// map the buffer cache.
    pub const fn for_island(maps_cache: bool) -> RingSize {
        if maps_cache {
            RingSize::Small
        } else {
            RingSize::Large
        }
    }

    /// Bytes of the request and the reply ring's data areas. Large: six
    /// `ReadData`/`WriteData` of 32 KiB (a window of one read or write,
    /// `msgdata.rs`) fit either with room for small calls beside them.
    pub const fn ring_bytes(self) -> usize {
        match self {
            RingSize::Small => 64 * 1024,
            RingSize::Large => 256 * 1024,
        }
    }

    /// Largest frame the request and reply rings carry.
    pub const fn max_frame(self) -> usize {
        match self {
            RingSize::Small => atoll_proto::SMALL_FRAME,
            RingSize::Large => MAX_FRAME,
        }
    }

    /// The size whose frames are `frame` bytes: large only from
    /// [`MAX_FRAME`] up (a server's reply buffer is cut to its channel's
    /// frame).
    pub const fn for_frame(frame: usize) -> RingSize {
        if frame >= MAX_FRAME {
            RingSize::Large
        } else {
            RingSize::Small
        }
    }

    /// Largest payload of one `ReadData`/`WriteData` on such a channel:
    /// 8 KiB on small ones (what every data call was before issue 16),
    /// 32 KiB on large ones.
    pub const fn data_call(self) -> usize {
        match self {
            RingSize::Small => 8 * 1024,
            RingSize::Large => atoll_proto::MAX_DATA_CALL,
        }
    }

    /// Bytes of the parked slot: the largest frame, in whole pages.
    const fn parked_bytes(self) -> usize {
        self.max_frame().div_ceil(4096) * 4096
    }

    /// Offset of the first data area (page aligned).
    const fn data(self) -> usize {
        Channel::PARKED + self.parked_bytes()
    }

    /// Total size of the memfd.
    pub const fn file_bytes(self) -> usize {
        self.data() + 2 * self.ring_bytes() + Channel::INBOX_BYTES
    }

    /// The layout of a file of `len` bytes, if it is one of the two.
    pub fn of_file(len: usize) -> Option<RingSize> {
        [RingSize::Small, RingSize::Large]
            .into_iter()
            .find(|s| s.file_bytes() == len)
    }
}

/// Sizes shared by both layouts.
pub struct Channel;

impl Channel {
    /// Bytes of the inbox's data area (unasked messages, all small).
    pub const INBOX_BYTES: usize = 64 * 1024;
    /// Largest inbox frame: what every frame was before issue 16 (a ring
    /// takes frames of at most half its size; notices are far smaller).
    pub const INBOX_MAX_FRAME: usize = atoll_proto::SMALL_FRAME;
    /// Offset of the parked reply (page aligned).
    const PARKED: usize = 4096;
    /// Largest frame any channel carries.
    pub const MAX_FRAME: usize = MAX_FRAME;
}

// The two layouts must stay tellable apart by size alone.
const _: () = assert!(RingSize::Small.file_bytes() != RingSize::Large.file_bytes());
const _: () = assert!(RingSize::Large.max_frame() == MAX_FRAME);
const _: () = assert!(RingSize::Small.max_frame() * 2 <= RingSize::Small.ring_bytes());

const HDR: usize = std::mem::size_of::<Padded<ChannelHeader>>();
const RING_HDR: usize = std::mem::size_of::<RingShared>();
const _: () = assert!(HDR + 3 * RING_HDR <= Channel::PARKED);

/// The three rings of a mapped channel, as raw parts.
struct Parts {
    region: SharedRegion,
    size: RingSize,
}

impl Parts {
    fn create(size: RingSize) -> io::Result<(OwnedFd, Parts)> {
        let (fd, region) = SharedRegion::create("atoll-channel", size.file_bytes())?;
        // SAFETY: fresh zeroed mapping of SIZE bytes, not shared yet; the
        // magic is the header's first field.
        unsafe { std::ptr::write_volatile(region.as_ptr() as *mut u64, CHANNEL_MAGIC) };
        Ok((fd, Parts { region, size }))
    }

    fn map(fd: BorrowedFd<'_>) -> io::Result<Parts> {
        let region = SharedRegion::map(fd)?;
        let size = RingSize::of_file(region.len());
        // SAFETY: read only if the region has one of the two sizes, both
        // larger than the header.
        if size.is_none()
            || unsafe { std::ptr::read_volatile(region.as_ptr() as *const u64) } != CHANNEL_MAGIC
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "not an atoll channel",
            ));
        }
        Ok(Parts {
            region,
            size: size.unwrap_or(RingSize::Small),
        })
    }

    fn header(&self) -> &ChannelHeader {
        // SAFETY: the header is at offset 0 of a mapping of `file_bytes` that
        // lives as long as `self`; its shared fields are atomics.
        unsafe { &*(self.region.as_ptr() as *const ChannelHeader) }
    }

    /// (ring header, data area) of ring `i` (0 request, 1 reply, 2 inbox).
    fn ring(&self, i: usize) -> (*const RingShared, *mut u8) {
        let base = self.region.as_ptr();
        // SAFETY: offsets stay inside the mapping of `self.size`'s
        // `file_bytes` (see layout).
        unsafe {
            (
                base.add(HDR + i * RING_HDR) as *const RingShared,
                base.add(self.size.data() + i * self.size.ring_bytes()),
            )
        }
    }

    /// Bytes of ring `i`'s data area and its largest frame.
    const fn ring_bytes(&self, i: usize) -> (usize, usize) {
        if i == 2 {
            (Channel::INBOX_BYTES, Channel::INBOX_MAX_FRAME)
        } else {
            (self.size.ring_bytes(), self.size.max_frame())
        }
    }

    fn producer(&self, i: usize) -> Producer {
        let (s, d) = self.ring(i);
        let (cap, max) = self.ring_bytes(i);
        // SAFETY: the ring lives in `self.region`, which the channel owns
        // alongside the end; one end of each role per mapping.
        unsafe { Producer::new(s, d, cap, max) }
    }

    fn consumer(&self, i: usize) -> Consumer {
        let (s, d) = self.ring(i);
        let (cap, max) = self.ring_bytes(i);
        // SAFETY: as in `producer`.
        unsafe { Consumer::new(s, d, cap, max) }
    }

    /// The parked slot (`parked_bytes` of the layout).
    fn parked_slot(&self) -> *mut u8 {
        // SAFETY: the slot lies inside the mapping (see layout).
        unsafe { self.region.as_ptr().add(Channel::PARKED) }
    }

    fn closed(&self) -> bool {
        self.header().closed.load(Ordering::Acquire) != 0
    }

    fn close(&self) {
        self.header().closed.store(1, Ordering::Release);
        // Wake a client asleep on its reply ring (the event protocol orders
        // the store above before the wake-up's check). A server sleeps on
        // its doorbell: whoever closes from the server side rings it.
        let (reply, _) = self.ring(1);
        // SAFETY: valid ring header inside the mapping.
        unsafe { (*reply).event.notify() };
        // A proxy relaying the channel to another host sleeps on the inbox
        // (`watch`), not on the reply ring: the end must wake it too.
        self.wake_inbox_watcher();
    }

    /// Wake whoever sleeps on the inbox's event (a proxy's watcher, see
    /// [`crate::watch`]; a program never does). One locked instruction
    /// unless someone sleeps.
    fn wake_inbox_watcher(&self) {
        let (inbox, _) = self.ring(2);
        // SAFETY: valid ring header inside the mapping.
        unsafe { (*inbox).event.notify() };
    }

    /// The inbox's futex word, for [`crate::watch`].
    #[cfg(not(loom))]
    pub(crate) fn inbox_event(&self) -> &crate::wait::Event {
        let (inbox, _) = self.ring(2);
        // SAFETY: valid ring header inside the mapping, which lives as
        // long as `self`.
        unsafe { &(*inbox).event }
    }
}

/// Client end of one channel (client × server): request ring out, reply
/// ring and inbox in.
///
/// Each end is `Send + Sync`, but a ring has one producer and one consumer:
/// use one channel from one thread at a time (atoll gives every thread its
/// own lane of channels).
pub struct ClientChannel {
    req: Producer,
    rep: Consumer,
    inbox: Consumer,
    parts: Parts,
}

impl ClientChannel {
    /// Make a new channel (the boot thread does this for a client) and
    /// return its memfd, to be mapped by the server end and the client.
    pub fn create(size: RingSize) -> io::Result<(OwnedFd, ClientChannel)> {
        let (fd, parts) = Parts::create(size)?;
        Ok((fd, Self::from_parts(parts)))
    }

    /// Map a channel's memfd; its size says its layout.
    pub fn map(fd: BorrowedFd<'_>) -> io::Result<ClientChannel> {
        Ok(Self::from_parts(Parts::map(fd)?))
    }

    /// The channel's layout.
    pub fn ring_size(&self) -> RingSize {
        self.parts.size
    }

    /// Largest frame `send` accepts.
    pub fn max_frame(&self) -> usize {
        self.req.max_frame()
    }

    fn from_parts(parts: Parts) -> Self {
        ClientChannel {
            req: parts.producer(0),
            rep: parts.consumer(1),
            inbox: parts.consumer(2),
            parts,
        }
    }

    /// Atomic delivery: returns only when `frame` is in the request ring
    /// (waiting for room if needed), then rings the server's `doorbell`.
    /// Hot path (every remote system call).
    pub fn send(&self, frame: &[u8], doorbell: &Doorbell) -> Result<(), MsgError> {
        if self.ended() {
            return Err(broken_pipe());
        }
        self.req.send(frame, || self.ended())?;
        doorbell.ring();
        Ok(())
    }

    /// Like [`send`](Self::send) but without ringing a doorbell: for a
    /// server that never sleeps ([`PollMode::Spin`]) and finds requests by
    /// polling its channels. Saves the read-modify-write of a cache line
    /// the spinning server is watching (a cross-core transfer each way).
    /// Hot path (every remote system call on dedicated server cores).
    pub fn send_unrung(&self, frame: &[u8]) -> Result<(), MsgError> {
        if self.ended() {
            return Err(broken_pipe());
        }
        self.req.send(frame, || self.ended())
    }

    /// [`send_unrung`](Self::send_unrung) unless the ring is full: then
    /// [`send`](Self::send), ringing `doorbell`, since a server asleep
    /// would otherwise never make the room a quiet post waits for (one
    /// program posting `fchmod`s, nothing else, fills its ring).
    pub fn send_quietly(&self, frame: &[u8], doorbell: &Doorbell) -> Result<(), MsgError> {
        if self.ended() {
            return Err(broken_pipe());
        }
        match self.req.try_send(frame) {
            Err(MsgError::Full) => self.send(frame, doorbell),
            other => other,
        }
    }

    /// Has the server taken every request sent on this channel? It
    /// releases a request only once it has served it (or put it aside),
    /// so whatever serving it published is visible after a `true`.
    pub fn requests_taken(&self) -> bool {
        self.req.all_taken()
    }

    /// Wait for the next reply and hand its bytes to `f` in place.
    /// Hot path (every remote system call).
    pub fn recv<R>(&self, mode: PollMode, f: impl FnOnce(&[u8]) -> R) -> Result<R, MsgError> {
        self.rep.recv(mode, || self.ended(), f)
    }

    /// Non-blocking: the next reply if one is there.
    pub fn try_recv<R>(&self, f: impl FnOnce(&[u8]) -> R) -> Result<Option<R>, MsgError> {
        self.rep.try_recv(f)
    }

    /// Drain server-initiated messages; returns how many were handled.
    pub fn drain_inbox(&self, mut f: impl FnMut(&[u8])) -> Result<usize, MsgError> {
        let mut n = 0;
        while self.inbox.try_recv(&mut f)?.is_some() {
            n += 1;
        }
        Ok(n)
    }

    /// True once if the server had to drop an inbox message because the
    /// inbox was full: the client must then distrust everything the inbox
    /// would have invalidated (e.g. flush its whole directory cache).
    pub fn take_inbox_overflow(&self) -> bool {
        self.parts.header().inbox_overflow.swap(0, Ordering::AcqRel) != 0
    }

    /// Has the server left anything for this end that no reply carries:
    /// an inbox message, an overflow, or the channel's end? Does not
    /// consume anything (for [`crate::watch`]).
    pub fn has_notices(&self) -> bool {
        self.inbox.has_frame()
            || self.parts.header().inbox_overflow.load(Ordering::Acquire) != 0
            || self.ended()
    }

    /// Is a reply waiting? Consumes nothing (for [`crate::watch`]).
    pub fn has_reply(&self) -> bool {
        self.rep.has_frame()
    }

    #[cfg(not(loom))]
    pub(crate) fn inbox_event(&self) -> &crate::wait::Event {
        self.parts.inbox_event()
    }

    #[cfg(not(loom))]
    pub(crate) fn reply_event(&self) -> &crate::wait::Event {
        let (reply, _) = self.parts.ring(1);
        // SAFETY: valid ring header inside the mapping, which lives as
        // long as `self`.
        unsafe { &(*reply).event }
    }

    /// End the channel: every wait on it, on either side, fails with
    /// `BrokenPipe` from now on.
    pub fn close(&self) {
        self.parts.close();
    }

    pub fn is_closed(&self) -> bool {
        self.ended()
    }

    /// Closed, or the instance behind it is gone (`liveness`): either way
    /// no answer will come.
    #[inline]
    fn ended(&self) -> bool {
        self.parts.closed() || crate::liveness::peers_gone()
    }
}

/// Server end of one channel.
pub struct ServerChannel {
    req: Consumer,
    rep: Producer,
    inbox: Producer,
    parts: Parts,
}

impl ServerChannel {
    /// Make a new channel and return its memfd with the server end.
    pub fn create(size: RingSize) -> io::Result<(OwnedFd, ServerChannel)> {
        let (fd, parts) = Parts::create(size)?;
        Ok((fd, Self::from_parts(parts)))
    }

    /// Map a channel's memfd; its size says its layout.
    pub fn map(fd: BorrowedFd<'_>) -> io::Result<ServerChannel> {
        Ok(Self::from_parts(Parts::map(fd)?))
    }

    /// The channel's layout.
    pub fn ring_size(&self) -> RingSize {
        self.parts.size
    }

    fn from_parts(parts: Parts) -> Self {
        ServerChannel {
            req: parts.consumer(0),
            rep: parts.producer(1),
            inbox: parts.producer(2),
            parts,
        }
    }

    /// The next request, handed to `f` in place, if one is there.
    /// A `Corrupt` error means the client scribbled on the channel: the
    /// server should drop the channel (and the session), never trust it.
    pub fn try_recv<R>(&self, f: impl FnOnce(&[u8]) -> R) -> Result<Option<R>, MsgError> {
        self.req.try_recv(f)
    }

    /// The next request, if one is there, lent to `f` but left in the
    /// ring (a server taking over from one that died looks whether the
    /// request it owed is still there).
    pub fn peek_request<R>(&self, f: impl FnOnce(&[u8]) -> R) -> Result<Option<R>, MsgError> {
        self.req.peek(f)
    }

    /// Fault injection (`atoll chaos --corrupt-ring`): a frame header no
    /// client may write appears where the next request is due, so the
    /// server's next look finds the ring corrupt and drops the channel.
    pub fn corrupt_request_ring(&self) {
        self.req.scribble_next_frame();
    }

    /// Request bytes waiting in this channel's request ring (monitoring:
    /// `atoll top` shows how full each server's rings are).
    pub fn queued_request_bytes(&self) -> u32 {
        self.req.queued_bytes()
    }

    /// Enqueue a reply and wake the client if it sleeps. Waits for room if
    /// the reply ring is full (atomic delivery); fails with `BrokenPipe` if
    /// the channel is closed meanwhile (e.g. the client died).
    pub fn reply(&self, frame: &[u8]) -> Result<(), MsgError> {
        self.rep.send(frame, || self.parts.closed())?;
        self.rep.wake_consumer();
        Ok(())
    }

    /// Like `reply`, but `Err(Full)` instead of waiting for room.
    pub fn try_reply(&self, frame: &[u8]) -> Result<(), MsgError> {
        self.rep.try_send(frame)?;
        self.rep.wake_consumer();
        Ok(())
    }

    /// Keep `frame`, a reply that found the reply ring full (`try_reply`
    /// said `Full`), in the channel's parked slot until it is delivered
    /// ([`unpark_reply`](Self::unpark_reply)). One reply at a time: a
    /// server serves nothing more from a channel whose reply waits.
    pub fn park_reply(&self, frame: &[u8]) {
        assert!(
            frame.len() <= self.parts.size.parked_bytes(),
            "reply larger than a frame"
        );
        // SAFETY: the slot holds `parked_bytes` inside the mapping;
        // only the server writes it, and `frame` is private memory.
        unsafe {
            std::ptr::copy_nonoverlapping(frame.as_ptr(), self.parts.parked_slot(), frame.len());
        }
        // Release: the bytes are in the slot before the mark says so.
        self.parts
            .header()
            .parked
            .store(frame.len() as u32 + 1, Ordering::Release);
    }

    /// The parked reply went out.
    pub fn unpark_reply(&self) {
        self.parts.header().parked.store(0, Ordering::Release);
    }

    /// The reply parked in this channel, if any: a server that takes over
    /// the channel from a process that died delivers it. A reply killed
    /// between going out and being unparked is delivered twice; its client
    /// drops the second copy as a stale reply. A mark no reply can have
    /// (the client may scribble on the header) reads as none.
    pub fn parked_reply(&self) -> Option<Vec<u8>> {
        let mark = self.parts.header().parked.load(Ordering::Acquire) as usize;
        let len = mark.checked_sub(1)?;
        if len > self.parts.size.parked_bytes() {
            return None;
        }
        let mut out = vec![0u8; len];
        // SAFETY: `len <= parked_bytes`, the slot's size, inside the
        // mapping; a client scribbling on it only garbles its own reply.
        unsafe { std::ptr::copy_nonoverlapping(self.parts.parked_slot(), out.as_mut_ptr(), len) };
        Some(out)
    }

    /// Enqueue a server-initiated message without waiting for the client.
    ///
    /// If the inbox is full the message is dropped, the channel's overflow
    /// flag is raised (see [`ClientChannel::take_inbox_overflow`]) and
    /// `Err(Full)` is returned: a server never blocks on a client that is
    /// not draining (it may itself be waiting for this server's reply).
    ///
    /// A program reads its inbox before its next call and never sleeps on
    /// it, but a proxy relaying the channel to another host does
    /// ([`crate::watch`]): the message wakes it, so it leaves at once, not
    /// at the proxy's next poll (fos §3.2). Costs one locked instruction
    /// when nobody sleeps.
    pub fn notify(&self, frame: &[u8]) -> Result<(), MsgError> {
        let sent = match self.inbox.try_send(frame) {
            Err(MsgError::Full) => {
                self.parts
                    .header()
                    .inbox_overflow
                    .store(1, Ordering::Release);
                Err(MsgError::Full)
            }
            other => other,
        };
        if !matches!(sent, Err(MsgError::TooLarge(_))) {
            self.parts.wake_inbox_watcher();
        }
        sent
    }

    /// Tell the client it missed messages: it drops everything it
    /// learned from this server's notices (its cached lookups). A server
    /// rebuilt from its journal does this, since it no longer knows what
    /// each client cached; so does a proxy relaying a channel whose real
    /// inbox overflowed on another host (`atoll node`).
    pub fn raise_inbox_overflow(&self) {
        self.parts
            .header()
            .inbox_overflow
            .store(1, Ordering::Release);
        self.parts.wake_inbox_watcher();
    }

    /// End the channel (see [`ClientChannel::close`]).
    pub fn close(&self) {
        self.parts.close();
    }

    pub fn is_closed(&self) -> bool {
        self.parts.closed()
    }

    /// Largest frame `reply` and `notify` accept.
    pub fn max_frame(&self) -> usize {
        self.rep.max_frame()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Control;
    use std::os::fd::AsFd;

    fn pair() -> (ClientChannel, ServerChannel, Control) {
        pair_of(RingSize::Large)
    }

    fn pair_of(size: RingSize) -> (ClientChannel, ServerChannel, Control) {
        let (fd, server) = ServerChannel::create(size).unwrap();
        let client = ClientChannel::map(fd.as_fd()).unwrap();
        let (_cfd, control) = Control::create(1).unwrap();
        (client, server, control)
    }

    #[test]
    fn request_reply_and_inbox_travel_between_two_mappings() {
        let (c, s, ctl) = pair();
        c.send(b"hello", ctl.doorbell(0)).unwrap();
        assert_eq!(ctl.doorbell(0).rings(), 1);
        assert_eq!(s.try_recv(|b| b.to_vec()).unwrap().unwrap(), b"hello");
        assert_eq!(s.try_recv(|_| ()).unwrap(), None);
        s.notify(b"inval 1").unwrap();
        s.notify(b"inval 2").unwrap();
        s.reply(b"world").unwrap();
        assert_eq!(c.recv(PollMode::Block, |b| b.to_vec()).unwrap(), b"world");
        let mut seen = Vec::new();
        assert_eq!(c.drain_inbox(|b| seen.push(b.to_vec())).unwrap(), 2);
        assert_eq!(seen, vec![b"inval 1".to_vec(), b"inval 2".to_vec()]);
        assert_eq!(c.drain_inbox(|_| ()).unwrap(), 0);
    }

    #[test]
    fn full_inbox_drops_and_raises_the_overflow_flag() {
        let (c, s, _ctl) = pair();
        let mut sent = 0;
        while s.notify(&[0; 1000]).is_ok() {
            sent += 1;
        }
        assert!(sent > 10);
        assert!(c.take_inbox_overflow());
        assert!(!c.take_inbox_overflow());
        assert_eq!(c.drain_inbox(|_| ()).unwrap(), sent);
        s.raise_inbox_overflow();
        assert!(c.take_inbox_overflow());
    }

    #[test]
    fn close_wakes_a_sleeping_client_with_broken_pipe() {
        let (c, s, _ctl) = pair();
        std::thread::scope(|sc| {
            sc.spawn(|| {
                std::thread::sleep(std::time::Duration::from_millis(20));
                s.close();
            });
            match c.recv(PollMode::Block, |_| ()) {
                Err(MsgError::Io(e)) => assert_eq!(e.kind(), io::ErrorKind::BrokenPipe),
                other => panic!("expected BrokenPipe, got {other:?}"),
            }
        });
        assert!(c.is_closed());
        let (_f, ctl) = Control::create(1).unwrap();
        assert!(c.send(b"x", ctl.doorbell(0)).is_err());
    }

    #[test]
    fn server_blocked_on_full_reply_ring_gives_up_when_closed() {
        let (c, s, _ctl) = pair();
        while s.try_reply(&[1; 4000]).is_ok() {}
        std::thread::scope(|sc| {
            sc.spawn(|| c.close());
            assert!(s.reply(&[1; 4000]).is_err());
        });
    }

    #[test]
    fn a_parked_reply_is_seen_by_another_mapping_until_unparked() {
        let (fd, server) = ServerChannel::create(RingSize::Large).unwrap();
        let client = ClientChannel::map(fd.as_fd()).unwrap();
        assert_eq!(server.parked_reply(), None);
        let big = vec![7u8; MAX_FRAME];
        server.park_reply(&big);
        // A successor process maps the same memfd.
        let successor = ServerChannel::map(fd.as_fd()).unwrap();
        assert_eq!(successor.parked_reply().as_deref(), Some(&big[..]));
        successor
            .try_reply(&successor.parked_reply().unwrap())
            .unwrap();
        successor.unpark_reply();
        assert_eq!(server.parked_reply(), None);
        assert_eq!(client.try_recv(|b| b.to_vec()).unwrap(), Some(big));
        // Scribbled by the client: read as nothing parked.
        server
            .parts
            .header()
            .parked
            .store(u32::MAX, Ordering::Relaxed);
        assert_eq!(successor.parked_reply(), None);
    }

    #[test]
    fn foreign_or_wrong_sized_files_are_not_channels() {
        for size in [RingSize::Small, RingSize::Large] {
            let (fd, _r) = SharedRegion::create("x", size.file_bytes()).unwrap();
            assert!(ClientChannel::map(fd.as_fd()).is_err()); // no magic
        }
        let (fd, _r) = SharedRegion::create("x", 4096).unwrap();
        assert!(ServerChannel::map(fd.as_fd()).is_err());
    }

    /// A channel's file with its magic but a size between, or around, the
    /// two layouts': refused, not mapped with a guessed layout.
    #[test]
    fn a_channel_file_of_another_size_is_rejected() {
        let small = RingSize::Small.file_bytes();
        let large = RingSize::Large.file_bytes();
        for len in [
            small - 4096,
            small + 4096,
            large - 4096,
            large + 4096,
            2 * large,
        ] {
            let (fd, r) = SharedRegion::create("x", len).unwrap();
            // SAFETY: test-only write of the magic into a fresh mapping.
            unsafe { std::ptr::write_volatile(r.as_ptr() as *mut u64, CHANNEL_MAGIC) };
            let err = ClientChannel::map(fd.as_fd()).err().expect("mapped");
            assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{len}");
            assert!(ServerChannel::map(fd.as_fd()).is_err(), "{len}");
        }
    }

    #[test]
    fn each_end_learns_the_layout_from_the_file() {
        for size in [RingSize::Small, RingSize::Large] {
            let (fd, server) = ServerChannel::create(size).unwrap();
            assert_eq!(server.ring_size(), size);
            let client = ClientChannel::map(fd.as_fd()).unwrap();
            assert_eq!(client.ring_size(), size);
            assert_eq!(client.max_frame(), size.max_frame());
            assert_eq!(server.max_frame(), size.max_frame());
            assert_eq!(ServerChannel::map(fd.as_fd()).unwrap().ring_size(), size);
        }
        assert_eq!(RingSize::Small.file_bytes(), 208 * 1024);
        assert_eq!(RingSize::Large.file_bytes(), 616 * 1024);
        assert_eq!(RingSize::for_island(true), RingSize::Small);
        assert_eq!(RingSize::for_island(false), RingSize::Large);
    }

    /// Small channels refuse what only large ones carry: a 32 KiB data
    /// call's frame is `TooLarge` on a small channel, in both directions,
    /// and travels on a large one; a frame of the small limit travels on
    /// both.
    #[test]
    fn a_frame_too_big_for_a_small_channel_is_refused_and_passes_on_a_large_one() {
        let big = vec![5u8; MAX_FRAME];
        let (c, s, ctl) = pair_of(RingSize::Small);
        let over = RingSize::Small.max_frame() + 1;
        assert!(matches!(
            c.send(&big[..over], ctl.doorbell(0)),
            Err(MsgError::TooLarge(n)) if n == over
        ));
        assert!(matches!(
            c.send(&big, ctl.doorbell(0)),
            Err(MsgError::TooLarge(_))
        ));
        assert!(matches!(s.try_reply(&big), Err(MsgError::TooLarge(_))));
        assert!(matches!(s.reply(&big), Err(MsgError::TooLarge(_))));
        assert_eq!(s.try_recv(|_| ()).unwrap(), None);
        let edge = &big[..RingSize::Small.max_frame()];
        c.send(edge, ctl.doorbell(0)).unwrap();
        assert_eq!(s.try_recv(|b| b.len()).unwrap(), Some(edge.len()));
        s.reply(edge).unwrap();
        assert_eq!(c.try_recv(|b| b.len()).unwrap(), Some(edge.len()));

        let (c, s, ctl) = pair_of(RingSize::Large);
        c.send(&big, ctl.doorbell(0)).unwrap();
        assert_eq!(
            s.try_recv(|b| b.to_vec()).unwrap().as_deref(),
            Some(&big[..])
        );
        s.reply(&big).unwrap();
        assert_eq!(
            c.try_recv(|b| b.to_vec()).unwrap().as_deref(),
            Some(&big[..])
        );
        assert!(matches!(
            c.send(&vec![0u8; MAX_FRAME + 1], ctl.doorbell(0)),
            Err(MsgError::TooLarge(_))
        ));
    }

    /// A small channel's reply ring holds a quarter of a large one's: the
    /// replies that fit before `Full` are counted on both.
    #[test]
    fn rings_hold_what_their_layout_says() {
        for size in [RingSize::Small, RingSize::Large] {
            let (_c, s, _ctl) = pair_of(size);
            let mut n = 0;
            while s.try_reply(&[1; 4000]).is_ok() {
                n += 1;
            }
            // Each frame takes a 4,032-byte slot (8-byte header, 64-byte
            // rounding): 16 of them in 64 KiB, 65 in 256 KiB.
            assert_eq!(n, size.ring_bytes() / 4032, "{size:?}");
        }
    }

    #[test]
    fn a_parked_reply_on_a_small_channel_is_bounded_by_its_frame() {
        let (fd, server) = ServerChannel::create(RingSize::Small).unwrap();
        let edge = vec![3u8; RingSize::Small.max_frame()];
        server.park_reply(&edge);
        let successor = ServerChannel::map(fd.as_fd()).unwrap();
        assert_eq!(successor.parked_reply().as_deref(), Some(&edge[..]));
        // A mark past the small slot (a client scribbling) reads as none.
        server
            .parts
            .header()
            .parked
            .store(RingSize::Large.max_frame() as u32 + 1, Ordering::Relaxed);
        assert_eq!(successor.parked_reply(), None);
    }

    #[test]
    fn scribbled_request_ring_is_reported_not_trusted() {
        let (c, s, ctl) = pair();
        c.send(&[3; 100], ctl.doorbell(0)).unwrap();
        let (_, data) = s.parts.ring(0);
        // SAFETY: test-only scribble on the request's frame header.
        unsafe { std::ptr::write_volatile(data as *mut u32, 60_000) };
        assert!(matches!(s.try_recv(|_| ()), Err(MsgError::Corrupt(_))));
    }
}
