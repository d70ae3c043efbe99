//! The per-instance control block: one [`Doorbell`] and one published load
//! word per server, and the instance's resource [`Gauge`]s, in one memfd
//! every process of the instance maps.
//!
//! A server serves many channels; polling all of them while idle would burn
//! its core, and sleeping on one futex per channel is impossible. So clients
//! *ring* the server's doorbell after enqueuing a request, and an idle server
//! waits on that one word (fos §3.2: one wait point per server).
//!
//! Layout (every part on its own cache lines):
//!
//! ```text
//!  header { magic, servers, members } 128 bytes
//!  doorbell[servers]                  256 bytes each
//!  load[servers]                      128 bytes each (load; published space; watches; served;
//!                                     posted attribute changes counted; their tickets)
//!  state[servers]                     128 bytes each (down; core + 1)
//!  heartbeat[servers]                 128 bytes each
//!  generation[servers]                128 bytes each
//!  charged[servers]                   GAUGES words each
//!  gauge[GAUGES]                      128 bytes each
//!  sizes[servers][SIZE_SLOTS]         32 bytes each (the size board)
//!  leases[servers][LEASE_SLOTS]       64 bytes each (the lease board)
//! ```
//!
//! `servers` is the room: the block is made for every server the instance
//! may ever have (`atoll_proto::MAX_SERVERS` unless told fewer), about
//! 900 bytes each, and 16 KiB of size board each (`sizes`: pages a
//! server never writes are never allocated). `members` is how many of them serve now (servers
//! `0..members`): it only grows, published with a release store as a
//! server joins and read with acquire, so a client that sees a member
//! also sees everything the instance made for it before publishing
//! (Hare §6.1.1; "Elastic server count" in ARCHITECTURE).
//!
//! Gauges are the instance-wide counts of metadata that every server may
//! create (inodes, names, …): servers never message each other (Hare
//! §6.2.3), so a limit that holds across servers is one shared word each
//! server reserves from before it creates, as tmpfs reserves an inode from
//! one per-superblock count (`shmem_reserve_inode`). Clients map the block
//! too and are trusted not to write it (Hare's single fault domain); a
//! server treats a gauge as advisory and keeps its own hard cap as well.

#[cfg(not(loom))]
use std::io;
#[cfg(not(loom))]
use std::os::fd::{BorrowedFd, OwnedFd};

#[cfg(not(loom))]
use crate::lease::{LeaseSlot, LeaseTicket, LEASE_SLOTS};
#[cfg(not(loom))]
use crate::region::SharedRegion;
use crate::ring::Padded;
#[cfg(not(loom))]
use crate::sizes::{slot_of, SizeSlot, SIZE_SLOTS};
#[cfg(not(loom))]
use crate::sync::AtomicU64;
use crate::sync::{AtomicU32, Ordering};
use crate::wait::{self, Event};
use atoll_proto::boot::PollMode;

/// A server's doorbell: clients ring it after enqueuing a request; the
/// server waits on it when it has nothing to do.
///
/// Protocol: `ring` bumps the event's notification count (and wakes the
/// server only if it announced sleep); `wait` returns as soon as the count
/// differs from the one it returned with last time. Because a client rings
/// *after* its request is in the ring, a server that polls all its channels
/// after every `wait` misses no request:
///
/// ```text
///  server loop:  poll every channel; if nothing was there: doorbell.wait(mode)
/// ```
///
/// A ring that lands while the server polls makes the next `wait` return at
/// once. One server thread waits on a doorbell; `seen`, which only it
/// writes, is in the shared block so that the instance's watchdog can
/// tell a server asleep or stopped with rings it never looked at
/// ([`Doorbell::unseen`]).
#[repr(C)]
pub struct Doorbell {
    /// Rung by clients, slept on by the server.
    event: Padded<Event>,
    /// Written by the waiting server only: the count it last looked at (at
    /// a turn's start, or returning from a wait). Read by the watchdog.
    seen: Padded<AtomicU32>,
}

impl Doorbell {
    #[cfg(loom)]
    pub(crate) fn new() -> Self {
        Doorbell {
            event: Padded(Event::new()),
            seen: Padded(AtomicU32::new(0)),
        }
    }

    /// Client side: wake the server if (and only if) it announced sleep.
    /// Hot path (every request): one locked instruction, no system call
    /// unless the server sleeps.
    #[inline]
    pub fn ring(&self) {
        self.event.notify();
    }

    /// Server side: wait until rung, honouring `mode`; returns after a
    /// spurious wake-up too (callers re-poll).
    pub fn wait(&self, mode: PollMode) {
        let seen = self.seen.load(Ordering::Relaxed);
        wait::wait(mode, &self.event, || self.event.ticks() != seen);
        // Acquire (in `ticks`): every request whose ring is counted here is
        // visible to the poll the caller does next.
        self.seen.store(self.event.ticks(), Ordering::Relaxed);
    }

    /// How many times the doorbell was rung (24 bits, wrapping).
    pub fn rings(&self) -> u32 {
        self.event.ticks()
    }

    /// Server side, at the start of each turn of its loop: it has read
    /// `rings` (with [`rings`](Self::rings), before polling its channels),
    /// so every request rung up to there is in this turn's poll. The next
    /// [`wait`](Self::wait) then returns only for rings after it, and a
    /// watchdog can tell rings the server never looked at ([`unseen`]).
    ///
    /// [`unseen`]: Self::unseen
    #[inline]
    pub fn mark_seen(&self, rings: u32) {
        self.seen.store(rings, Ordering::Relaxed);
    }

    /// Rung since the server last looked (at a turn's start or when its
    /// wait returned): requests may be waiting that it has not polled for.
    /// A server that is merely busy looks again at its next turn, so only
    /// this together with no heartbeat for a long time means it is stuck
    /// (`atoll-server`'s `wedge`).
    pub fn unseen(&self) -> bool {
        self.rings() != self.seen.load(Ordering::Relaxed)
    }
}

/// Number of gauges in a control block (users name them by index).
#[cfg(not(loom))]
pub const GAUGES: usize = 8;

/// The gauge of inodes (the file server's `limits::INODES`).
#[cfg(not(loom))]
pub const GAUGE_INODES: usize = 0;

/// The gauge of names (the file server's `limits::NAMES`).
#[cfg(not(loom))]
pub const GAUGE_NAMES: usize = 1;

/// An instance-wide count with a limit: `used` only moves through
/// [`Gauge::try_take`] (refused past `limit`) and [`Gauge::give`].
#[cfg(not(loom))]
#[repr(C)]
#[derive(Default)]
pub struct Gauge {
    limit: AtomicU64,
    used: AtomicU64,
}

#[cfg(not(loom))]
impl Gauge {
    pub fn new(limit: u64) -> Gauge {
        Gauge {
            limit: AtomicU64::new(limit),
            used: AtomicU64::new(0),
        }
    }

    pub fn limit(&self) -> u64 {
        self.limit.load(Ordering::Relaxed)
    }

    pub fn set_limit(&self, limit: u64) {
        self.limit.store(limit, Ordering::Relaxed);
    }

    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// Take `n` units if that keeps `used` within `limit`. One atomic
    /// read-modify-write (a compare-exchange loop); counting needs no
    /// ordering with other memory.
    pub fn try_take(&self, n: u64) -> bool {
        let limit = self.limit();
        self.used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| {
                u.checked_add(n).filter(|t| *t <= limit)
            })
            .is_ok()
    }

    /// Take `n` units whatever the limit (for a transient overdraw that
    /// must not fail, such as the second name of a rename in flight).
    pub fn force_take(&self, n: u64) {
        let _ = self
            .used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| {
                Some(u.saturating_add(n))
            });
    }

    /// Give `n` units back (never below zero).
    pub fn give(&self, n: u64) {
        let _ = self
            .used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| {
                Some(u.saturating_sub(n))
            });
    }
}

#[cfg(not(loom))]
const CONTROL_MAGIC: u64 = u64::from_le_bytes(*b"ATOLLCT9");

#[cfg(not(loom))]
#[repr(C)]
struct ControlHeader {
    magic: u64,
    servers: u64,
    /// Written as a plain word at creation; afterwards only through
    /// [`Control::publish_members`] (an atomic, see `members_word`).
    members: u64,
}

#[cfg(not(loom))]
const HEADER_BYTES: usize = std::mem::size_of::<Padded<ControlHeader>>();
#[cfg(not(loom))]
const DOORBELL_BYTES: usize = std::mem::size_of::<Doorbell>();
#[cfg(not(loom))]
const LOAD_BYTES: usize = std::mem::size_of::<Padded<AtomicU64>>();
#[cfg(not(loom))]
const GAUGE_BYTES: usize = std::mem::size_of::<Padded<Gauge>>();
#[cfg(not(loom))]
const SLOT_BYTES: usize = std::mem::size_of::<SizeSlot>();
#[cfg(not(loom))]
const LEASE_BYTES: usize = std::mem::size_of::<LeaseSlot>();
#[cfg(not(loom))]
const CHARGED_BYTES: usize = std::mem::size_of::<Padded<[AtomicU64; GAUGES]>>();

/// Per-instance control block: one doorbell per server, published load,
/// each server's state (down or not) and the instance-wide gauges.
#[cfg(not(loom))]
pub struct Control {
    region: SharedRegion,
    servers: usize,
}

#[cfg(not(loom))]
impl Control {
    /// Bytes of a control block for `servers` servers.
    pub const fn size(servers: usize) -> usize {
        Self::leases_at(servers) + servers * LEASE_SLOTS * LEASE_BYTES
    }

    /// Where the lease board starts: after the size board.
    const fn leases_at(servers: usize) -> usize {
        Self::board_at(servers) + servers * SIZE_SLOTS * SLOT_BYTES
    }

    /// Where the size board starts: after the gauges.
    const fn board_at(servers: usize) -> usize {
        Self::gauges_at(servers) + GAUGES * GAUGE_BYTES
    }

    /// Where the gauges start: after each server's doorbell, load, state,
    /// heartbeat and generation words and its charges.
    const fn gauges_at(servers: usize) -> usize {
        HEADER_BYTES + servers * (DOORBELL_BYTES + 4 * LOAD_BYTES + CHARGED_BYTES)
    }

    pub fn create(servers: usize) -> io::Result<(OwnedFd, Control)> {
        Self::create_with_room(servers, servers)
    }

    /// A control block for `members` servers now and room for `servers`
    /// (the module docs).
    pub fn create_with_room(members: usize, servers: usize) -> io::Result<(OwnedFd, Control)> {
        if servers == 0 || servers > atoll_proto::MAX_SERVERS || !(1..=servers).contains(&members) {
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        }
        let (fd, region) = SharedRegion::create("atoll-control", Self::size(servers))?;
        let hdr = region.as_ptr() as *mut ControlHeader;
        // SAFETY: the fresh region is larger than the header and page
        // aligned; nobody else has it yet.
        unsafe {
            std::ptr::write_volatile(
                hdr,
                ControlHeader {
                    magic: CONTROL_MAGIC,
                    servers: servers as u64,
                    members: members as u64,
                },
            );
        }
        Ok((fd, Control { region, servers }))
    }

    pub fn map(fd: BorrowedFd<'_>) -> io::Result<Control> {
        Self::check(SharedRegion::map(fd)?)
    }

    /// [`map`](Self::map) for a caller that has just read the file's size
    /// with its own `fstat` of `fd` ([`SharedRegion::map_sized`]).
    pub fn map_sized(fd: BorrowedFd<'_>, size: i64) -> io::Result<Control> {
        Self::check(SharedRegion::map_sized(fd, size)?)
    }

    /// The mapped `region`, if it is a control block.
    fn check(region: SharedRegion) -> io::Result<Control> {
        let bad = || io::Error::new(io::ErrorKind::InvalidData, "not an atoll control block");
        if region.len() < HEADER_BYTES {
            return Err(bad());
        }
        // SAFETY: the region holds at least a header (checked above).
        let hdr = unsafe { std::ptr::read_volatile(region.as_ptr() as *const ControlHeader) };
        let servers = usize::try_from(hdr.servers).unwrap_or(usize::MAX);
        if hdr.magic != CONTROL_MAGIC
            || servers == 0
            || servers > atoll_proto::MAX_SERVERS
            || region.len() != Self::size(servers)
        {
            return Err(bad());
        }
        Ok(Control { region, servers })
    }

    /// Servers the block has room for (see [`Control::members`]).
    pub fn servers(&self) -> usize {
        self.servers
    }

    fn members_word(&self) -> &AtomicU64 {
        // SAFETY: the header's third word, inside the block (its size was
        // checked at create/map), 8-aligned; only used as an atomic after
        // creation.
        unsafe { &*(self.region.as_ptr() as *const AtomicU64).add(2) }
    }

    /// Servers `0..members` are the instance's members now (at least 1,
    /// at most [`Control::servers`]). Acquire: whatever the instance made
    /// for a member before publishing it is visible.
    pub fn members(&self) -> usize {
        (self.members_word().load(Ordering::Acquire) as usize).clamp(1, self.servers)
    }

    /// Instance side: servers `0..n` are members from now on. The count
    /// only grows (a member whose inodes live on cannot go; leaving is a
    /// host's matter). Release: pairs with [`Control::members`].
    pub fn publish_members(&self, n: usize) {
        self.members_word()
            .fetch_max(n.min(self.servers) as u64, Ordering::AcqRel);
    }

    /// # Panics
    /// If `server >= self.servers()` (a caller bug, never peer input).
    pub fn doorbell(&self, server: usize) -> &Doorbell {
        assert!(server < self.servers, "no server {server}");
        let off = HEADER_BYTES + server * DOORBELL_BYTES;
        // SAFETY: `off + DOORBELL_BYTES <= len` (size checked at create/map),
        // 128-aligned (page-aligned base, 128-multiple sizes); a Doorbell is
        // atomics only, valid for any bytes; it lives as long as `self`.
        unsafe { &*(self.region.as_ptr().add(off) as *const Doorbell) }
    }

    fn load_word(&self, server: usize) -> &AtomicU64 {
        assert!(server < self.servers, "no server {server}");
        let off = HEADER_BYTES + self.servers * DOORBELL_BYTES + server * LOAD_BYTES;
        // SAFETY: as in `doorbell`.
        unsafe { &(*(self.region.as_ptr().add(off) as *const Padded<AtomicU64>)).0 }
    }

    /// The load `server` last published (e.g. requests served), for
    /// placement decisions such as least-loaded exec.
    pub fn load(&self, server: usize) -> u64 {
        self.load_word(server).load(Ordering::Relaxed)
    }

    /// Server side: publish a new load value.
    pub fn publish_load(&self, server: usize, value: u64) {
        self.load_word(server).store(value, Ordering::Relaxed);
    }

    /// Words `1 + k` of server `server`'s load line (k < 2): the space it
    /// publishes ([`Control::publish_space`]). The line is written only by
    /// that server, and rarely read (placement, `statfs`), so the words
    /// share it as the core word shares the state line.
    fn space_words(&self, server: usize) -> [&AtomicU64; 2] {
        let load: *const AtomicU64 = self.load_word(server);
        // SAFETY: the load word starts a `Padded` line of LOAD_BYTES (128)
        // bytes inside the block, so the next two 8-byte-aligned words are
        // in bounds and no other field's; they are only used as atomics.
        unsafe { [&*load.add(1), &*load.add(2)] }
    }

    /// Server side, after each request: the block pool holds `blocks`
    /// blocks, and this server's share of the free ones is `free_delta`
    /// (its free list, less what it has taken from the pool's root and
    /// not given back). The root starts with every block, so the pool's
    /// free blocks are `blocks + Σ free_delta` over the members — what
    /// `statfs` reports — and a client sums them without a message.
    pub fn publish_space(&self, server: usize, blocks: u64, free_delta: i64) {
        let [b, d] = self.space_words(server);
        if d.load(Ordering::Relaxed) != free_delta as u64 {
            d.store(free_delta as u64, Ordering::Relaxed);
        }
        if b.load(Ordering::Relaxed) != blocks {
            b.store(blocks, Ordering::Relaxed);
        }
    }

    /// What `server` last published with [`Control::publish_space`]:
    /// `None` before it published (out of range too).
    pub fn space(&self, server: usize) -> Option<(u64, i64)> {
        if server >= self.servers {
            return None;
        }
        let [b, d] = self.space_words(server);
        match b.load(Ordering::Relaxed) {
            0 => None,
            blocks => Some((blocks, d.load(Ordering::Relaxed) as i64)),
        }
    }

    /// Word 3 of server `server`'s load line: the watches it holds
    /// ([`Control::publish_watches`]), beside the space words.
    fn watch_word(&self, server: usize) -> &AtomicU64 {
        let load: *const AtomicU64 = self.load_word(server);
        // SAFETY: as in `space_words`: word 3 of the 128-byte line the load
        // word starts, in bounds, 8-aligned, no other field's.
        unsafe { &*load.add(3) }
    }

    /// Server side, after each request and before its reply: it holds
    /// `watches` inotify or fanotify watches (every server holds those of
    /// every directory). A client that finds none at a directory's home
    /// server knows no listing of it is watched now, so a `getdents` it
    /// answers itself misses no `IN_ACCESS` (`Control::watches`).
    pub fn publish_watches(&self, server: usize, watches: u64) {
        let w = self.watch_word(server);
        let v = watches.saturating_add(1);
        if w.load(Ordering::Relaxed) != v {
            w.store(v, Ordering::Release);
        }
    }

    /// What `server` last published with [`Control::publish_watches`]:
    /// `None` before it published (out of range too).
    pub fn watches(&self, server: usize) -> Option<u64> {
        if server >= self.servers {
            return None;
        }
        self.watch_word(server)
            .load(Ordering::Acquire)
            .checked_sub(1)
    }

    /// Word 4 of server `server`'s load line: the requests it served
    /// ([`Control::count_served`]).
    fn served_word(&self, server: usize) -> &AtomicU64 {
        let load: *const AtomicU64 = self.load_word(server);
        // SAFETY: as in `space_words`: word 4 of the 128-byte line the load
        // word starts, in bounds, 8-aligned, no other field's.
        unsafe { &*load.add(4) }
    }

    /// Server side, after each request (and each session's end), before
    /// its reply: one more served. The count lives in the block, so a
    /// server's successor goes on from it rather than from zero. A client
    /// that saw the count move by exactly one across its own request, and
    /// finds it unchanged later, knows nothing changed at that server in
    /// between (`client/src/openattr.rs`).
    ///
    /// Returns the count with this request in it: only this server moves
    /// its word, so that is what a client reading the same value later
    /// knows nothing was served after (the `Open` reply carries it).
    pub fn count_served(&self, server: usize) -> u64 {
        self.served_word(server)
            .fetch_add(1, Ordering::Release)
            .wrapping_add(1)
    }

    /// How many requests `server` served ([`Control::count_served`]);
    /// `None` out of range.
    pub fn served(&self, server: usize) -> Option<u64> {
        (server < self.servers).then(|| self.served_word(server).load(Ordering::Acquire))
    }

    /// Words 5 and 6 of server `server`'s load line: the posted attribute
    /// changes clients counted ([`Control::count_posted_attrs`]) and the
    /// tickets they took ([`Control::take_attr_ticket`]).
    fn posted_attr_words(&self, server: usize) -> [&AtomicU64; 2] {
        let load: *const AtomicU64 = self.load_word(server);
        // SAFETY: as in `space_words`: words 5 and 6 of the 128-byte line
        // the load word starts, in bounds, 8-aligned, no other field's.
        unsafe { [&*load.add(5), &*load.add(6)] }
    }

    /// Client side, before a posted `SetAttrPosted` to `server` is
    /// enqueued: its ticket. A change made after another returned took
    /// its ticket after that one's, so the server, serving posted heads
    /// in ticket order, applies it last (server `posted.rs`).
    pub fn take_attr_ticket(&self, server: usize) -> u64 {
        self.posted_attr_words(server)[1].fetch_add(1, Ordering::AcqRel)
    }

    /// Client side: a posted `SetAttrPosted` to `server` is in its ring,
    /// and the call has not returned yet. Release: a server that reads the
    /// new count (acquire) sees the frame.
    pub fn count_posted_attrs(&self, server: usize) {
        self.posted_attr_words(server)[0].fetch_add(1, Ordering::Release);
    }

    /// How many posted attribute changes clients counted at `server`
    /// (0 out of range). The server drains posted frames before a request
    /// that waits once this moved; a client keeps attributes an `Open`
    /// answered only while it stands still (`client/src/openattr.rs`).
    pub fn posted_attrs(&self, server: usize) -> u64 {
        if server >= self.servers {
            return 0;
        }
        self.posted_attr_words(server)[0].load(Ordering::Acquire)
    }

    /// `(files, free files)` as the gauges count them now: the inode
    /// limit, less the inodes or names in use, whichever is more (each
    /// name needs an inode's worth on tmpfs too). What the file server's
    /// `StatFs` answers (its `limits::Accounts::files`).
    pub fn files(&self) -> (u64, u64) {
        let used = self
            .gauge(GAUGE_INODES)
            .used()
            .max(self.gauge(GAUGE_NAMES).used());
        let total = self.gauge(GAUGE_INODES).limit();
        (total, total.saturating_sub(used))
    }

    /// Gauge number `i` (see [`GAUGES`]); zero limit and use until set.
    ///
    /// # Panics
    /// If `i >= GAUGES` (a caller bug, never peer input).
    pub fn gauge(&self, i: usize) -> &Gauge {
        assert!(i < GAUGES, "no gauge {i}");
        let off = Self::gauges_at(self.servers) + i * GAUGE_BYTES;
        // SAFETY: as in `doorbell` (the gauges end the block, whose size
        // was checked); a Gauge is atomics only.
        unsafe { &(*(self.region.as_ptr().add(off) as *const Padded<Gauge>)).0 }
    }

    fn state_word(&self, server: usize) -> &AtomicU64 {
        assert!(server < self.servers, "no server {server}");
        let off = HEADER_BYTES + self.servers * (DOORBELL_BYTES + LOAD_BYTES) + server * LOAD_BYTES;
        // SAFETY: as in `doorbell` (the state words follow the loads).
        unsafe { &(*(self.region.as_ptr().add(off) as *const Padded<AtomicU64>)).0 }
    }

    /// Server `server` died: clients place nothing new on it (pipes, new
    /// files) and fail what needs it with `EIO` (fault containment).
    pub fn set_down(&self, server: usize) {
        self.state_word(server).store(1, Ordering::Release);
    }

    /// Is server `server` known dead? (One relaxed load.)
    pub fn is_down(&self, server: usize) -> bool {
        server < self.servers && self.state_word(server).load(Ordering::Relaxed) != 0
    }

    /// The word beside server `server`'s state word, on the same line
    /// (written once per incarnation, so sharing the line costs nothing):
    /// the core the server runs on, plus one; 0 when unknown.
    fn core_word(&self, server: usize) -> &AtomicU64 {
        let state: *const AtomicU64 = self.state_word(server);
        // SAFETY: the state word starts a `Padded` line of LOAD_BYTES
        // (128) bytes inside the block, so the next 8-byte-aligned word is
        // in bounds and no other field's; it is only used as an atomic.
        unsafe { &*state.add(1) }
    }

    /// Server side: this incarnation of `server` runs on `core` (`None`:
    /// not pinned to one), so that a client can keep off that core
    /// (`atoll_client::msgbound`).
    pub fn set_core(&self, server: usize, core: Option<usize>) {
        let v = core.map_or(0, |k| k as u64 + 1);
        self.core_word(server).store(v, Ordering::Relaxed);
    }

    /// The core server `server` runs on, if it is pinned to one and
    /// published it (out of range reads as unknown). One relaxed load.
    pub fn core(&self, server: usize) -> Option<usize> {
        if server >= self.servers {
            return None;
        }
        match self.core_word(server).load(Ordering::Relaxed) {
            0 => None,
            v => Some((v - 1) as usize),
        }
    }

    fn beat_word(&self, server: usize) -> &AtomicU64 {
        assert!(server < self.servers, "no server {server}");
        let off =
            HEADER_BYTES + self.servers * (DOORBELL_BYTES + 2 * LOAD_BYTES) + server * LOAD_BYTES;
        // SAFETY: as in `doorbell` (the heartbeats follow the state words).
        unsafe { &(*(self.region.as_ptr().add(off) as *const Padded<AtomicU64>)).0 }
    }

    /// Server side: one more turn of the server's loop (its heartbeat,
    /// which a watchdog compares with the doorbell: rung but no turn
    /// since means requests wait that nobody serves). One relaxed store
    /// to a line only this server writes.
    pub fn beat(&self, server: usize) {
        let w = self.beat_word(server);
        w.store(w.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
    }

    /// How much of gauge `i` server `server` has taken and not given
    /// back: written by that server alone at each move of the gauge, so
    /// that a successor of a server killed half way through a request
    /// gives back what the lost request had reserved (`fs::limits`).
    ///
    /// # Panics
    /// If `server` or `i` is out of range (a caller bug).
    pub fn charged(&self, server: usize, i: usize) -> &AtomicU64 {
        assert!(
            server < self.servers && i < GAUGES,
            "no charge {server}/{i}"
        );
        let off = HEADER_BYTES
            + self.servers * (DOORBELL_BYTES + 4 * LOAD_BYTES)
            + server * CHARGED_BYTES;
        // SAFETY: as in `doorbell` (each server's charges follow the
        // generations, before the gauges); atomics only.
        unsafe { &(*(self.region.as_ptr().add(off) as *const Padded<[AtomicU64; GAUGES]>)).0[i] }
    }

    fn generation_word(&self, server: usize) -> &AtomicU64 {
        assert!(server < self.servers, "no server {server}");
        let off =
            HEADER_BYTES + self.servers * (DOORBELL_BYTES + 3 * LOAD_BYTES) + server * LOAD_BYTES;
        // SAFETY: as in `doorbell` (the generations follow the heartbeats).
        unsafe { &(*(self.region.as_ptr().add(off) as *const Padded<AtomicU64>)).0 }
    }

    /// Server side: a new incarnation of server `server` serves from now
    /// on (a fresh start, a rebuild in place, a successor process, a move
    /// to another host). The name `/fs/server/<server>` resolves to it
    /// with this generation (fos §3.3); clients that bound the name at an
    /// older one re-bind (`atoll_names::Bindings`). Returns the new one.
    pub fn advance_generation(&self, server: usize) -> u64 {
        self.generation_word(server).fetch_add(1, Ordering::AcqRel) + 1
    }

    /// The generation of server `server`'s incarnation (0: never started;
    /// out of range reads as 0). One relaxed load of a line written only
    /// when an incarnation starts: the client's per-call check.
    pub fn generation(&self, server: usize) -> u64 {
        if server >= self.servers {
            return 0;
        }
        self.generation_word(server).load(Ordering::Acquire)
    }

    /// Slot `k` of server `server`'s size board (`sizes`): written by
    /// that server alone.
    ///
    /// # Panics
    /// If `server` or `k` is out of range (a caller bug).
    pub fn size_slot(&self, server: usize, k: usize) -> &SizeSlot {
        assert!(
            server < self.servers && k < SIZE_SLOTS,
            "no slot {server}/{k}"
        );
        let off = Self::board_at(self.servers) + (server * SIZE_SLOTS + k) * SLOT_BYTES;
        // SAFETY: inside the block (its size, checked at create/map,
        // counts every server's slots), 32-aligned (page-aligned base,
        // 128-multiple sections before it); a slot is atomics only.
        unsafe { &*(self.region.as_ptr().add(off) as *const SizeSlot) }
    }

    /// Client side: the size of inode `ino` (its raw id) owned by
    /// `server`, as the server's current incarnation published it, if it
    /// did; `None` if the slot holds another inode or an older
    /// incarnation's word, or the server is down (then ask it).
    pub fn published_size(&self, server: usize, ino: u64) -> Option<u64> {
        if server >= self.servers || self.is_down(server) {
            return None;
        }
        let generation = self.generation(server);
        let size = self.size_slot(server, slot_of(ino)).read(ino, generation)?;
        // The incarnation that wrote it may have ended while we read.
        (self.generation(server) == generation && !self.is_down(server)).then_some(size)
    }

    /// Slot `k` of server `server`'s lease board (`lease`): written by
    /// that server alone.
    ///
    /// # Panics
    /// If `server` or `k` is out of range (a caller bug).
    pub fn lease_slot(&self, server: usize, k: usize) -> &LeaseSlot {
        assert!(
            server < self.servers && k < LEASE_SLOTS,
            "no lease slot {server}/{k}"
        );
        let off = Self::leases_at(self.servers) + (server * LEASE_SLOTS + k) * LEASE_BYTES;
        // SAFETY: inside the block (its size, checked at create/map,
        // counts every server's slots), 64-aligned (page-aligned base,
        // 128-multiple sections and 32-byte slots in even numbers before
        // it); a slot is atomics only.
        unsafe { &*(self.region.as_ptr().add(off) as *const LeaseSlot) }
    }

    /// Client side, before a copy without a message: inode `ino` (its raw
    /// id) of `server` as the server's current incarnation published it
    /// in the lease board; `None` if the slot holds another inode or an
    /// older incarnation's word, or the server is down (then ask it).
    pub fn lease_begin(&self, server: usize, ino: u64) -> Option<LeaseTicket> {
        if server >= self.servers || self.is_down(server) {
            return None;
        }
        let generation = self.generation(server);
        let t = self
            .lease_slot(server, slot_of(ino))
            .begin(ino, generation)?;
        (self.generation(server) == generation).then_some(t)
    }

    /// Client side, after the copy: nothing was published in the slot
    /// since [`lease_begin`](Self::lease_begin), and the incarnation that
    /// published it still serves.
    pub fn lease_still(&self, server: usize, ino: u64, t: &LeaseTicket) -> bool {
        self.lease_slot(server, slot_of(ino)).still(t)
            && self.generation(server) == LeaseSlot::generation(t)
            && !self.is_down(server)
    }

    /// How many turns server `server`'s loop has made (wrapping).
    pub fn beats(&self, server: usize) -> u64 {
        self.beat_word(server).load(Ordering::Relaxed)
    }

    /// Server side: add to the published load counter.
    pub fn add_load(&self, server: usize, delta: u64) {
        self.load_word(server).fetch_add(delta, Ordering::Relaxed);
    }
}

#[cfg(not(loom))]
impl std::fmt::Debug for Control {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Control")
            .field("servers", &self.servers)
            .finish()
    }
}

#[cfg(all(test, not(loom)))]
#[path = "control_tests.rs"]
mod tests;

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::atomic::AtomicBool;
    use loom::sync::Arc;

    /// A request enqueued before `ring` is seen by a server that notes the
    /// ring count, polls, then waits in Block mode (sleeping at once): the
    /// doorbell protocol loses no request even when the ring lands between
    /// the note and the poll, or between poll and wait.
    #[test]
    fn loom_doorbell_loses_no_request() {
        loom::model(|| {
            let s = Arc::new((Doorbell::new(), AtomicBool::new(false)));
            let c = s.clone();
            let t = loom::thread::spawn(move || {
                c.1.store(true, Ordering::Relaxed); // the "request"
                c.0.ring();
            });
            // Server loop: note the rings, poll, then wait.
            loop {
                s.0.mark_seen(s.0.rings());
                if s.1.load(Ordering::Relaxed) {
                    break;
                }
                s.0.wait(PollMode::Block);
            }
            t.join().unwrap();
        });
    }
}
