//! The file server's state machine: pure logic, no I/O.
//!
//! Layers inside a file server (bottom to top):
//! * [`crate::store`]: byte access to buffer-cache blocks;
//! * [`blocks`]: this server's free list, a representative of the block
//!   pool whose root every server claims from (K42 §4.1.2);
//! * [`inode`]: inodes, block maps, truncate/punch/seek over the block pool;
//! * [`dir`]: directory shards (entries of a directory held here), cookies;
//! * [`locks`], [`perm`], `xattr`: advisory locks, Linux permission
//!   rules, extended attributes;
//! * [`limits`]: the bounds on everything a program can make a server
//!   hold, reserved from instance-wide gauges and settled after every
//!   request;
//! * [`track`]: which sessions cached which entry held here, and the
//!   invalidations owed to them when it changes (Hare §3.7.2);
//! * `adapt`: directories whose mode changes online (Hare §6.1.2), the
//!   check that a request reached the right server, and the swap steps;
//! * `sessions`: the processes known here, and what a session's end
//!   releases;
//! * this module: [`FileServer::handle`] turns one decoded request into one
//!   reply, applying POSIX/Linux semantics. `crate::server` feeds it frames
//!   from channels.
//!
//! Ownership (atoll-proto's rules, applied by one server): this server owns
//! the inodes whose id names it as owner (attributes, blocks, open file
//! descriptions, locks), the entries of directories homed here or hashed
//! here, and the buffer-cache blocks it claimed from the pool. It never messages another
//! server; whatever spans servers the client coordinates (Hare §6.2.3).
//! Hence some checks need state another server holds and are the client's:
//! * permission checks on a directory use its inode when this server owns
//!   it; otherwise the attributes the client read from the owner and sent
//!   with the request (`atoll_proto::Vouched`: write permission, the
//!   sticky bit and set-group-id inheritance, required for every name
//!   change; Hare §3.4, §3.7.1), or, for search alone, the client's own
//!   `Access` to the owner. The sticky bit also needs the owner of the
//!   inode a name names, vouched for when another server owns it;
//! * moving a directory into its own subtree (`EINVAL`) needs ancestry, so
//!   the client checks it;
//! * emptiness of a directory whose entries live elsewhere is established by
//!   three-phase rmdir (`MarkRmdir`/`FinishRmdir`, Hare §3.4.1).
//!
//! Link counts: `Link`, `Unlink` and `Rename` adjust the link count of an
//! inode when this server owns it (replies say so); otherwise the client
//! sends `Ref`/`Unref` to the owner.
//!
//! Open file descriptions (Hare §3.5): a description is referenced by one or
//! more sessions, with a count per session (`Share` adds one for another
//! session at fork or descriptor passing, `Close` drops one). The
//! description dies when no session references it; when a session dies
//! ([`FileServer::session_closed`]) all its references and its POSIX locks
//! go. Mappings are counted the same way (`mapping`): a mapped inode keeps
//! its blocks from every other file until its last unmap.
//!
//! Timestamps: mtime/ctime as Linux. atime follows `relatime` (updated by a
//! read when older than mtime or ctime, or than a day).

mod acl;
mod adapt;
mod affinity;
mod attrs;
mod blocks;
mod chain;
mod coalesced;
use coalesced::Coalesced;
mod data;
mod descs;
mod dir;
mod dispatch;
pub mod faults;
mod hotdirs;
mod image;
mod inflight;
mod inode;
mod inotify;
pub mod limits;
mod locks;
mod mapping;
mod namespace;
mod ops;
pub use ops::changes_nothing;
mod leases;
pub(crate) mod ordered;
mod perm;
mod pipe;
mod pipecopy;
mod protocols;
mod reports;
mod retain;
mod sessions;
mod sizes;
mod space;
mod stats;
pub mod tape;
pub use hotdirs::name_dirs;
pub use reports::{op_name, LastOp};
mod text;
mod tmpfile;
pub mod track;
mod xattr;

#[cfg(test)]
mod digest;
#[cfg(test)]
mod limits_tests;
#[cfg(test)]
mod tests;

use ordered::Map;
use std::rc::Rc;
use std::time::Instant;

use atoll_proto::{
    Attr, Cred, DescId, Errno, Extent, FileType, InodeId, LockOwner, Reply, Request, ServerStats,
    SessionId, SetAttr, StatFsInfo, TimeSet, Timespec, UnlinkKind, Vouched, BLOCK_SIZE, MAX_FRAME,
    MAX_SERVERS, RENAME_VICTIM_MARKED, ROOT,
};

pub use blocks::Cache;
pub use dir::parse_dirents;
use dir::{check_name, is_dot, push_dirent, Shard};
use inode::{Inode, MAX_EXTENTS, MAX_FILE_SIZE};
pub use limits::Limits;
use locks::Lock;
use namespace::NewNode;
use ops::{op_index, OP_NAMES};
use perm::{acl_verdict, check, kill_priv, may, Caller, MAY_EXEC, MAY_READ, MAY_WRITE};

use crate::store::BlockStore;

const BS: u64 = BLOCK_SIZE as u64;
/// Largest payload of a `ReadData`/`WriteData` message: a large channel's
/// (a client asks at most what its channel's frames allow; a reply too big
/// for a small channel is answered `EIO` when it is encoded, `round.rs`;
/// a read asking more than its channel's data call is refused before it is
/// served, `server::asks_more_than_fits`).
pub const MAX_DATA: usize = MAX_FRAME - 256;
/// Largest `Dirents` payload: what a small channel's frame holds, so a
/// listing's chunk travels on every channel (`atoll_proto::SMALL_FRAME`).
const MAX_DIRENTS: usize = atoll_proto::SMALL_FRAME - 256;
/// Creations in a directory being removed answer this; the client retries
/// (Hare §3.4.1 "creations wait").
pub const RETRY: Errno = Errno::EAGAIN;
/// `renameat2` flags (not in every libc crate version under these names).
const RENAME_NOREPLACE: u32 = 1;
const RENAME_EXCHANGE: u32 = 2;
/// Status flags `F_SETFL` may change.
const SETFL_MASK: u32 =
    (libc::O_APPEND | libc::O_NONBLOCK | libc::O_ASYNC | libc::O_DIRECT | libc::O_NOATIME) as u32;

/// Static parameters of one file server.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct FsConfig {
    /// This server's index (owner id in inode and description ids).
    pub index: usize,
    /// Members of the instance: at boot, then as the server loop sees
    /// servers join (`FileServer::set_members`).
    pub nservers: usize,
    /// Blocks `[first_block, first_block + nblocks)` of a pool of its own
    /// (`FileServer::new`); an instance's servers share one pool instead.
    pub first_block: u32,
    pub nblocks: u32,
    /// Owner of the root directory (the user who booted the instance).
    pub root_owner: Cred,
    /// Core the server runs on (-1: not pinned), for statistics.
    pub core: i32,
    /// Track lookups for the clients' directory caches (Hare §3.7.2);
    /// off with `--without dir-cache`.
    pub track_lookups: bool,
    /// Also track lookups that found no entry (with `track_lookups`; off
    /// with `--without negative-lookups`).
    #[serde(default)]
    pub track_absent: bool,
    /// The instance's bounds on metadata (`limits`).
    pub limits: Limits,
}

/// An open file description (Hare §3.5). Life cycle: created by `Open`/
/// `OpenInode` with one reference from the opening session; `Share` adds
/// references for other sessions; the last `Close` (or death of the last
/// referencing session) destroys it, dropping its OFD/`flock` locks and
/// possibly the unlinked inode.
#[derive(serde::Serialize, serde::Deserialize)]
struct Desc {
    ino: InodeId,
    flags: u32,
    /// Shared offset (used when the client sends `offset: None`).
    offset: u64,
    refs: Map<SessionId, u32>,
    /// A FIFO end's partner-open count when it was opened (`Reply::Pipe`).
    partner_opens: Option<u32>,
    /// The entry it was opened through when that lives on another server
    /// (`Request::OpenInode::via`), for its directory's watchers.
    via: Option<(InodeId, Box<[u8]>)>,
}

impl Desc {
    fn readable(&self) -> bool {
        self.flags & libc::O_PATH as u32 == 0
            && self.flags & libc::O_ACCMODE as u32 != libc::O_WRONLY as u32
    }
    fn writable(&self) -> bool {
        self.flags & libc::O_PATH as u32 == 0
            && self.flags & libc::O_ACCMODE as u32 != libc::O_RDONLY as u32
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Session {
    /// Supplementary group lists by number (`Cred::groups`): credentials
    /// are per thread, so threads of one session may differ.
    groups: Vec<Rc<[u32]>>,
    /// Its write chains in flight (`chain`).
    chains: chain::Chains,
    /// The process whose requests come on it (`RequestFrame::pid`): what
    /// it leaves open is closed in its name when it dies (fanotify
    /// records the closer's pid, as Linux the exiting task's).
    #[serde(default)]
    pid: u32,
}

/// The time now (taped: a replay sees the time the request first saw).
fn now() -> Timespec {
    let (sec, nsec) = tape::wall();
    Timespec { sec, nsec }
}

fn older(a: Timespec, b: Timespec) -> bool {
    (a.sec, a.nsec) < (b.sec, b.nsec)
}

type R<'o> = Result<Reply<'o>, Errno>;

/// One file server's whole state. See the module docs for ownership.
pub struct FileServer<S> {
    cfg: FsConfig,
    inodes: Map<InodeId, Inode>,
    next_serial: u64,
    shards: Map<InodeId, Shard>,
    /// Directories removed here: creations in them answer `ENOENT`.
    removed: limits::RemovedDirs,
    descs: Map<DescId, Desc>,
    next_desc: u64,
    sessions: Map<SessionId, Session>,
    cache: Cache<S>,
    pipes: pipe::Pipes,
    /// Data transferred, by Cosh mode (`ServerStats::transfers`), and
    /// `(copied, shared)` bytes per live session (`SessionLoad`).
    transfers: atoll_proto::Transfers,
    session_transfers: Map<SessionId, (u64, u64)>,
    /// Notification queues owned here and watches held here (`inotify`).
    notify: inotify::Notify,
    /// Extending writes whose bytes are not in yet (`inflight`).
    writes: inflight::Writes,
    /// Inodes placed here by creation affinity, not yet named (Hare §3.7.5).
    creating: affinity::Creating,
    requests: u64,
    bad_requests: u64,
    /// Panic on this request, on purpose (`faults`).
    fault_at: Option<(u64, faults::Fault)>,
    /// Calls counted for `fault_at`.
    calls_seen: u64,
    /// Kill this process in a call of this operation
    /// (`faults::ENV_FAULT_KILL`); armed once its calls to go are 0 and
    /// it waits for its phase (`kill_due`, `kill_due_taken`).
    kill_after: Option<faults::KillPlan>,
    /// A request panicked half way: the state may be half changed, and
    /// what it had taken from shared pools (its tape so far) is here
    /// until the server is rebuilt (`crate::server`).
    poisoned: Option<Vec<u64>>,
    ops: [(u64, u64); OP_NAMES.len()],
    /// Who cached which entry held here (Hare §3.7.2).
    track: track::Tracker,
    /// Sums of what clients reported (`Request::ClientCounters`).
    client_counters: reports::ClientReports,
    /// The request served last (for message traces).
    last_op: reports::LastOp,
    /// Work done in one message that Hare's protocol splits (§3.7.4).
    coalesced: Coalesced,
    /// Which session marked each directory marked here (three-phase rmdir,
    /// Hare §3.4.1): its marks are aborted if it dies, so waiters go on.
    marks: Map<InodeId, SessionId>,
    /// `Ref`s of directories owned here, per session, not yet matched by
    /// the session's `Unref` (a cross-server move under way; see `moves`).
    move_refs: Vec<(SessionId, InodeId)>,
    /// Provisional second names of directories (`Link` of a cross-server
    /// move) until the session's `MoveDone` or `Unlink`.
    move_links: Vec<MoveLink>,
    /// Holder of the instance's lock on moves of directories between
    /// parents (`Request::RenameLock`; used on server 0). Not re-entrant:
    /// threads of one process (one session) wait for each other too.
    rename_lock: Option<SessionId>,
    /// This server's share of the instance's metadata counts (`limits`).
    acct: limits::Accounts,
    /// Which session maps which inode owned here (`mapping`).
    maps: mapping::Mappings,
    /// Which session runs which inode owned here as its program (`text`).
    texts: text::Texts,
    /// Directories with the most name operations here (`atoll top`).
    hot: hotdirs::HotDirs,
    /// Modes of directories swapped online, swaps under way (`adapt`).
    adapt: adapt::Adapt,
    /// Where sizes are published for clients (`sizes`); none while a
    /// journal is replayed.
    sizes: Option<sizes::SizeBoard>,
    /// Where data versions are published for reads without a message
    /// (`leases`); attached with the size board.
    leases: Option<leases::LeaseBoard>,
}

/// A provisional name `(dir, name)` → `ino` added by `session`'s `Link`
/// (`previous: None`) or `Relink` (the inode it named before).
#[derive(serde::Serialize, serde::Deserialize)]
struct MoveLink {
    session: SessionId,
    dir: InodeId,
    name: Vec<u8>,
    ino: InodeId,
    previous: Option<(InodeId, FileType)>,
}

impl<S: BlockStore> FileServer<S> {
    /// A server with gauges of its own (alone, or in tests).
    /// Servers `0..n` are the instance's members now (they only grow:
    /// `atoll_msg::Control::members`). What this server checks a new
    /// directory's home against; a distributed directory routes by the
    /// width it records, never by this.
    #[inline]
    pub fn set_members(&mut self, n: usize) {
        if n > self.cfg.nservers {
            self.cfg.nservers = n;
        }
    }

    pub fn new(cfg: FsConfig, store: S) -> FileServer<S> {
        let gauges = Rc::new(limits::LocalGauges::new(&cfg.limits));
        let cache = Cache::private(cfg.first_block, cfg.nblocks, store);
        FileServer::with_gauges(cfg, cache, gauges)
    }

    /// A server that counts against the instance-wide `gauges` (the
    /// control block's, `limits` module docs) and takes blocks through
    /// `cache`, its representative of the block pool (`blocks`).
    pub fn with_gauges(
        cfg: FsConfig,
        cache: Cache<S>,
        gauges: Rc<dyn limits::Gauges>,
    ) -> FileServer<S> {
        let acct = limits::Accounts::new(&cfg.limits, gauges, cfg.index);
        let mut fs = FileServer {
            inodes: Map::default(),
            next_serial: 1,
            shards: Map::default(),
            removed: limits::RemovedDirs::new(cfg.limits.inodes),
            descs: Map::default(),
            next_desc: 1,
            sessions: Map::default(),
            cache,
            pipes: pipe::Pipes::default(),
            transfers: atoll_proto::Transfers::default(),
            session_transfers: Map::default(),
            notify: inotify::Notify::default(),
            writes: inflight::Writes::default(),
            creating: affinity::Creating::default(),
            requests: 0,
            bad_requests: 0,
            fault_at: faults::planned(cfg.index),
            calls_seen: 0,
            kill_after: faults::planned_kill(cfg.index),
            poisoned: None,
            ops: [(0, 0); OP_NAMES.len()],
            track: track::Tracker::new(cfg.track_lookups, cfg.limits.tracked)
                .with_absent(cfg.track_absent),
            adapt: adapt::Adapt::default(),
            client_counters: Default::default(),
            last_op: reports::LastOp::default(),
            coalesced: Coalesced::default(),
            marks: Map::default(),
            move_refs: Vec::new(),
            move_links: Vec::new(),
            rename_lock: None,
            acct,
            maps: mapping::Mappings::default(),
            texts: text::Texts::default(),
            hot: hotdirs::HotDirs::default(),
            sizes: None,
            leases: None,
            cfg,
        };
        #[cfg(test)]
        fs.attach_private_size_board();
        if fs.cfg.index == ROOT.owner() {
            let o = fs.cfg.root_owner;
            fs.inodes.insert(
                ROOT,
                Inode::new(FileType::Directory, 0o755, o.uid, o.gid, now()),
            );
            fs.shards
                .insert(ROOT, Shard::new(Some(ROOT), &fs.acct.names));
            fs.next_serial = ROOT.serial() + 1;
        }
        fs.settle();
        fs
    }

    pub fn index(&self) -> usize {
        self.cfg.index
    }

    /// A frame that could not be decoded (counted for `atoll status`).
    pub fn count_bad_request(&mut self) {
        self.bad_requests += 1;
    }

    /// Directory-cache invalidations to deliver before the reply to the
    /// request just served (Hare §3.7.2: the unlinker's reply must not
    /// overtake them). `(session, dir, name)` in order.
    pub fn take_notices(&mut self) -> Vec<track::Pending> {
        self.track.take_pending()
    }

    /// Are invalidations waiting for delivery?
    pub fn has_notices(&self) -> bool {
        self.track.has_pending() || !self.adapt.notices.is_empty()
    }

    /// Serve one request. Hot path: one hash lookup per object touched;
    /// replies that carry bytes borrow them from `out` (reused by the
    /// caller), so the common requests do not allocate.
    pub fn handle<'o>(
        &mut self,
        session: SessionId,
        cred: Cred,
        req: Request<'_>,
        out: &'o mut Vec<u8>,
    ) -> Reply<'o> {
        self.handle_vouched(session, cred, &[], req, out)
    }

    /// [`FileServer::handle`] for a request that carries attributes of
    /// inodes owned elsewhere (see `atoll_proto::Vouched`). Hot path.
    /// A request panicked half way through (see `poisoned`).
    pub fn set_poisoned(&mut self, partial_tape: Vec<u64>) {
        self.poisoned = Some(partial_tape);
    }

    pub fn is_poisoned(&self) -> bool {
        self.poisoned.is_some()
    }

    pub fn take_poisoned(&mut self) -> Option<Vec<u64>> {
        self.poisoned.take()
    }

    /// Calls counted towards `ATOLL_FAULT_PANIC`; a rebuilt server goes
    /// on counting where the lost one stopped.
    pub fn calls_seen(&self) -> u64 {
        self.calls_seen
    }

    pub fn set_calls_seen(&mut self, n: u64) {
        self.calls_seen = n;
    }

    /// Forget listed blocks the pool says are not this server's any more
    /// (`Cache::reconcile`; a successor of a killed server process).
    pub fn reconcile_blocks(&mut self) {
        self.cache.reconcile();
    }

    /// Give back what a request that died half way had taken from the
    /// block pool and the gauges (`tape::taken` of its partial tape).
    pub fn give_back_taken(&mut self, partial_tape: &[u64]) {
        let (blocks, reserved) = tape::taken(partial_tape);
        self.cache.give_back(&blocks);
        self.acct.refund(&reserved);
    }

    /// Give back to the pool `blocks` a request that died before its
    /// record had claimed (`Journal::claimed_unjournaled`), unless they are
    /// no longer this server's or are listed free here.
    pub fn give_back_blocks(&mut self, blocks: &[u32]) {
        self.cache.give_back(blocks);
    }

    /// A successor of a server process that died: the fault planned for
    /// the lost one happened (its call count is not kept across processes).
    pub fn forget_planned_fault(&mut self) {
        self.fault_at = None;
        self.kill_after = None;
    }

    /// Is `req` the call in which this process kills itself
    /// (`faults::ENV_FAULT_KILL`), and where? Counts the operation's
    /// calls. A kill at `KillPhase::Taken` stays armed until the loop
    /// asks [`FileServer::kill_due_taken`].
    pub fn kill_due(&mut self, req: &Request<'_>) -> Option<faults::KillPhase> {
        let plan = self.kill_after.as_mut()?;
        if plan.left == 0 || plan.op != op_index(req) {
            return None;
        }
        plan.left -= 1;
        if plan.left > 0 {
            return None;
        }
        let phase = plan.phase;
        if phase != faults::KillPhase::Taken {
            self.kill_after = None; // once
        }
        Some(phase)
    }

    /// Is a kill armed for the call just served, now that its frame left
    /// its ring (`faults::KillPhase::Taken`)?
    pub fn kill_due_taken(&mut self) -> bool {
        let armed = self
            .kill_after
            .is_some_and(|p| p.left == 0 && p.phase == faults::KillPhase::Taken);
        if armed {
            self.kill_after = None; // once
        }
        armed
    }

    /// Is this call the one `ATOLL_FAULT_PANIC` (or `_HANG`) names? Counts
    /// calls, i.e. requests somebody waits for (`faults`); the caller
    /// panics (or wedges).
    pub fn fault_due(&mut self) -> Option<faults::Fault> {
        let (k, fault) = self.fault_at?;
        self.calls_seen += 1;
        (self.calls_seen == k).then_some(fault)
    }

    pub fn handle_vouched<'o>(
        &mut self,
        session: SessionId,
        cred: Cred,
        vouched: &[Vouched],
        req: Request<'_>,
        out: &'o mut Vec<u8>,
    ) -> Reply<'o> {
        let t0 = Instant::now();
        let op = op_index(&req);
        let coalesced_before = self.coalesced.total();
        let who = self.caller(session, cred, vouched);
        self.note_requester(session);
        self.hot.record(&req);
        let watched = self
            .adapt
            .policy
            .on
            .then(|| adapt::namespace_dir(&req))
            .flatten();
        let plan = match self.notify.busy() {
            true => inotify::Plan::of(&req, |d| self.descs.get(&d).map(|d| d.ino))
                .map(|p| self.plan_details(p, session)),
            false => None,
        };
        self.hold_freed(plan.as_ref());
        let subject = self.lease_subject(&req);
        let moved = (self.transfers.copy_bytes, self.transfers.share_bytes);
        let mut r = self.dispatch(session, &who, req, out);
        if moved != (self.transfers.copy_bytes, self.transfers.share_bytes) {
            // Data moved for this session (two loads on every request).
            let e = self.session_transfers.entry(session).or_default();
            e.0 += self.transfers.copy_bytes - moved.0;
            e.1 += self.transfers.share_bytes - moved.1;
        }
        if self.notify.busy() {
            if let (Some(plan), Ok(reply)) = (plan, &r) {
                self.notify_after(plan, reply);
            }
            self.release_freed();
            // Left by an open no plan covered (reported nowhere).
            self.notify.truncated = false;
            self.notify_tick();
        }
        if let Some(dir) = watched {
            // Taped: the policy's answer shapes the state (`tape`).
            self.adapt_observe(session, dir, tape::instant());
        }
        self.lease_after(subject);
        let count = self.settle();
        if let Ok(Reply::Opened { served, .. }) = &mut r {
            // The count with this `Open` in it: nothing else is served
            // between here and the reply (`Control::count_served`).
            *served = count;
        }
        #[cfg(test)]
        self.check_size_board();
        #[cfg(test)]
        self.check_lease_board();
        let ns = t0.elapsed().as_nanos() as u64;
        self.requests += 1;
        self.ops[op].0 += 1;
        self.ops[op].1 += ns;
        self.last_op = reports::LastOp {
            op: op as u16,
            start: t0,
            ns,
            ok: r.is_ok(),
            coalesced: self.coalesced.total() != coalesced_before,
        };
        r.unwrap_or_else(Reply::Err)
    }

    fn caller<'v>(&mut self, session: SessionId, cred: Cred, vouched: &'v [Vouched]) -> Caller<'v> {
        let groups = match self.sessions.get(&session) {
            Some(s) => s.groups.get(cred.groups as usize).cloned(),
            None => {
                self.session_opened(session);
                None
            }
        };
        // A list never registered means no supplementary groups: the
        // checks can only be stricter than the kernel's, never looser.
        let groups = groups.unwrap_or_else(|| Rc::from(Vec::new()));
        Caller {
            uid: cred.uid,
            gid: cred.gid,
            caps: cred.caps,
            groups,
            group_list: cred.groups,
            vouched,
        }
    }

    // ---------------------------------------------------------------
    // helpers

    fn inode(&self, ino: InodeId) -> Result<&Inode, Errno> {
        self.inodes.get(&ino).ok_or(Errno::ENOENT)
    }

    fn inode_mut(&mut self, ino: InodeId) -> Result<&mut Inode, Errno> {
        self.inodes.get_mut(&ino).ok_or(Errno::ENOENT)
    }

    fn owns(&self, ino: InodeId) -> bool {
        ino.owner() == self.cfg.index
    }

    /// A directory's `st_size` as tmpfs gives it: 40 bytes, and 20 more
    /// per entry (`BOGO_DIRENT_SIZE`), when all its entries are here;
    /// otherwise (spread over servers, or its entries on another server)
    /// the block size, as most disk file systems report.
    fn dir_size(&self, ino: InodeId) -> u64 {
        const BOGO_DIRENT_SIZE: u64 = 20;
        match self.shards.get(&ino) {
            Some(s) if ino.home() == self.cfg.index && !self.adapt.distributed(ino) => {
                BOGO_DIRENT_SIZE * (2 + s.len() as u64)
            }
            _ => BS,
        }
    }

    /// The attributes `stat` reports.
    fn attr(&self, ino: InodeId) -> Result<Attr, Errno> {
        let i = self.inode(ino)?;
        let nlink = if i.ftype != FileType::Directory || i.links == 0 {
            i.links
        } else {
            // `2 + subdirectories`: all entries are here, or (a distributed
            // directory) the owner's shard also counts those the clients
            // reported from other servers (`Subdirs`). Otherwise unknown,
            // and 1 is the convention for "do not count" (btrfs).
            let spread = self.adapt.distributed(ino);
            let dist = spread && self.owns(ino);
            match self.shards.get(&ino) {
                Some(s) if dist || (ino.home() == self.cfg.index && !spread) => 2 + s.subdirs,
                None if dist => 2,
                _ => 1,
            }
        };
        let size = match i.ftype {
            FileType::Directory => self.dir_size(ino),
            FileType::Symlink => i.target_len as u64,
            _ => i.size,
        };
        Ok(Attr {
            ino,
            ftype: i.ftype,
            perm: i.perm,
            nlink,
            uid: i.uid,
            gid: i.gid,
            rdev: i.rdev,
            size,
            blocks: (i.blocks.len() - i.retained.len()) as u64 * (BS / 512),
            atime: i.atime,
            mtime: i.mtime,
            ctime: i.ctime,
            btime: i.btime,
            default_acl: !i.xattrs.is_empty() && i.xattrs.contains_key(acl::ACL_DEFAULT),
            // Kept only when it says more than the mode (`acl::set_acl`).
            access_acl: !i.xattrs.is_empty() && i.xattrs.contains_key(acl::ACL_ACCESS),
        })
    }

    /// Mode, owner and group of directory `dir`: from its inode when this
    /// server owns it, otherwise as the request vouches for them (module
    /// docs); `None` when neither.
    fn dir_attrs(&self, dir: InodeId, who: &Caller) -> Option<(u32, u32, u32)> {
        if self.owns(dir) {
            return self.inodes.get(&dir).map(|d| (d.perm, d.uid, d.gid));
        }
        who.vouched_for(dir).map(|v| (v.perm, v.uid, v.gid))
    }

    /// Check `mask` on directory `dir`. Owned here: its inode decides.
    /// Owned elsewhere: the attributes the request vouches for decide; a
    /// name change (`MAY_WRITE`) without them is a client error (`EPROTO`),
    /// while search permission alone the client may have asked the owner
    /// for already (`Access`, Hare §3.7.1).
    fn dir_check(&self, dir: InodeId, who: &Caller, mask: u32) -> Result<(), Errno> {
        if self.removed.contains(&dir) {
            return Err(Errno::ENOENT);
        }
        if !self.owns(dir) {
            return match who.vouched_for(dir) {
                // Routed by another mode epoch than this server's (`adapt`).
                Some(v) if v.epoch != self.adapt.mode(dir).1 => Err(Errno::EMODE),
                Some(v) if v.access_acl => acl_verdict(v, who, mask),
                Some(v) => check(FileType::Directory, v.perm, v.uid, v.gid, who, mask),
                None if mask & MAY_WRITE != 0 => Err(Errno::EPROTO),
                None => Ok(()),
            };
        }
        let d = self.inode(dir)?;
        if d.ftype != FileType::Directory {
            return Err(Errno::ENOTDIR);
        }
        may(d, who, mask)
    }

    /// The shard of `dir` for adding an entry: not removed, not marked.
    fn creatable(&mut self, dir: InodeId) -> Result<&mut Shard, Errno> {
        if self.removed.contains(&dir) {
            return Err(Errno::ENOENT);
        }
        let s = self
            .shards
            .entry(dir)
            .or_insert_with(|| Shard::new(None, &self.acct.names));
        if s.marked {
            return Err(RETRY);
        }
        Ok(s)
    }

    /// `mtime`/`ctime` of a directory whose entries changed, if owned here.
    fn touch_dir(&mut self, dir: InodeId) {
        if let Some(d) = self.inodes.get_mut(&dir) {
            d.modified(now());
        }
    }

    /// Sticky directories (Linux `check_sticky`): only the owner of the
    /// entry's inode, of the directory, or root may remove or replace it.
    /// The directory's mode and owner come from `dir_attrs`; the victim's
    /// owner from its inode when owned here, otherwise from the request's
    /// vouched attributes. Without them the answer is `EPERM`, and a client
    /// that can vouch for the victim asks again with them.
    fn sticky_ok(&self, dir: InodeId, victim: InodeId, who: &Caller) -> Result<(), Errno> {
        let Some((perm, dir_uid, _)) = self.dir_attrs(dir, who) else {
            // Owned elsewhere and nothing vouched: `dir_check` refused the
            // name change already.
            return Ok(());
        };
        if perm & libc::S_ISVTX == 0 || who.has(Cred::CAP_FOWNER) || who.uid == dir_uid {
            return Ok(());
        }
        let victim_uid = match self.inodes.get(&victim) {
            Some(v) => Some(v.uid),
            None => who.vouched_for(victim).map(|v| v.uid),
        };
        if victim_uid == Some(who.uid) {
            Ok(())
        } else {
            Err(Errno::EPERM)
        }
    }

    /// Create an inode on this server (owner, and group by the
    /// set-group-id directory rule, `inode_init_owner`).
    fn new_inode(
        &mut self,
        who: &Caller,
        dir: InodeId,
        ftype: FileType,
        mut perm: u32,
        home: usize,
        spread: usize,
    ) -> InodeId {
        let mut gid = who.gid;
        if let Some((dir_perm, _, dir_gid)) = self.dir_attrs(dir, who) {
            if dir_perm & libc::S_ISGID != 0 {
                gid = dir_gid;
                if ftype == FileType::Directory {
                    perm |= libc::S_ISGID;
                } else if perm & (libc::S_ISGID | libc::S_IXGRP) == (libc::S_ISGID | libc::S_IXGRP)
                    && !who.has(Cred::CAP_FSETID)
                    && !who.in_group(gid)
                {
                    perm &= !libc::S_ISGID; // mode_strip_sgid
                }
            }
        }
        let serial = self.next_serial;
        self.next_serial += 1;
        let dist = ftype == FileType::Directory && spread > 0;
        let home = if ftype == FileType::Directory {
            home
        } else {
            self.cfg.index
        };
        // A distributed directory records its width (the member count the
        // client saw): members that join later take none of its names, so
        // no route to them changes (Hare §6.1.1; `InodeId::width`).
        let ino = match dist {
            true => InodeId::spread(self.cfg.index, home, spread, serial),
            false => InodeId::new(self.cfg.index, home, false, serial),
        };
        self.inodes
            .insert(ino, Inode::new(ftype, perm, who.uid, gid, now()));
        ino
    }

    /// Drop one link of an inode owned here; free it when unreferenced.
    fn drop_link(&mut self, ino: InodeId) {
        if self.unref_pending(ino) {
            return; // the pending name of a creation (Hare §3.7.5)
        }
        if let Some(i) = self.inodes.get_mut(&ino) {
            i.links = i.links.saturating_sub(1);
            i.ctime = now();
            // The atime is now stale (relatime): reads go by message.
            self.lease_sync(ino);
            let Some(i) = self.inodes.get_mut(&ino) else {
                return;
            };
            if i.ftype == FileType::Directory && i.links == 0 {
                let shard = self.shards.remove(&ino);
                self.removed.insert(ino, true);
                // `..` of it while a process holds it (`RemovedDirs`).
                if let Some(p) = shard.and_then(|s| s.parent) {
                    self.removed.set_parent(ino, p);
                }
                // Only absent names can be recorded in an empty directory:
                // no name appears in a removed one (ids are never reused),
                // but the records and the cached absences go with it.
                self.track.dir_gone(ino);
            }
        }
        self.maybe_free(ino);
    }

    /// Destroy the inode if neither names, descriptions nor mappings
    /// reference it (Hare Fig. 3-3: unlinked-but-open files live until the
    /// last close; mapped ones until the last unmap, `mapping`).
    fn maybe_free(&mut self, ino: InodeId) {
        let dead = self
            .inodes
            .get(&ino)
            .is_some_and(|i| i.links == 0 && i.opens == 0 && i.maps == 0)
            && !self.creating.is_pending(ino);
        if dead {
            if let Some(t) = self.inodes.get(&ino).map(|i| i.ftype) {
                self.notify_freed(ino, t);
            }
            self.size_slot_freed(ino);
            if let Some(mut i) = self.inodes.remove(&ino) {
                self.pipes.anonymous.remove(&ino);
                self.writes.forget_inode(ino);
                self.acct.xattr_bytes -= limits::xattr_size(&i);
                self.acct.lock_records -= i.locks.len() as u64;
                i.release_all(&mut self.cache);
                if i.ftype == FileType::Directory {
                    // Ids are never reused: a missing inode says removed.
                    self.shards.remove(&ino);
                    self.removed.freed(ino);
                }
            }
        }
    }

    fn desc(&self, session: SessionId, desc: DescId) -> Result<&Desc, Errno> {
        match self.descs.get(&desc) {
            Some(d) if d.refs.contains_key(&session) => Ok(d),
            _ => Err(Errno::EBADF),
        }
    }

    fn desc_mut(&mut self, session: SessionId, desc: DescId) -> Result<&mut Desc, Errno> {
        match self.descs.get_mut(&desc) {
            Some(d) if d.refs.contains_key(&session) => Ok(d),
            _ => Err(Errno::EBADF),
        }
    }

    /// Whether `session` holds a description of `ino` open for writing
    /// (`ftruncate`/`fallocate` through such a descriptor need no write
    /// permission, as in Linux).
    fn has_writable_desc(&self, session: SessionId, ino: InodeId) -> bool {
        self.descs
            .values()
            .any(|d| d.ino == ino && d.writable() && d.refs.contains_key(&session))
    }

    fn release_desc(&mut self, id: DescId) {
        let Some(d) = self.descs.remove(&id) else {
            return;
        };
        if let Some(i) = self.inodes.get_mut(&d.ino) {
            let before = i.locks.len();
            locks::release(&mut i.locks, LockOwner::Description(id));
            locks::release(&mut i.locks, LockOwner::Flock(id));
            self.acct.lock_records -= (before - i.locks.len()) as u64;
            i.opens = i.opens.saturating_sub(1);
            if i.opens == 0 {
                i.release_deferred(&mut self.cache);
            }
        }
        self.notify_closed(d.ino, (d.flags, d.writable()), d.via.clone());
        self.queue_closed(d.ino);
        self.pipe_released(d.ino, d.flags);
        self.maybe_free(d.ino);
    }

    /// Supplementary groups of a session, sent when they change.
    pub(super) fn set_groups<'o>(
        &mut self,
        session: SessionId,
        set: u32,
        groups: Vec<u32>,
    ) -> R<'o> {
        if set >= atoll_proto::MAX_GROUP_SETS {
            return Err(Errno::EINVAL);
        }
        self.session_opened(session);
        if let Some(s) = self.sessions.get_mut(&session) {
            let set = set as usize;
            if s.groups.len() <= set {
                s.groups.resize_with(set + 1, || Rc::from(Vec::new()));
            }
            s.groups[set] = Rc::from(groups);
        }
        Ok(Reply::Ok)
    }
}
