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

mod affinity;
mod blocks;
mod dir;
mod hotdirs;
mod inode;
mod inotify;
pub mod limits;
mod locks;
mod mapping;
mod perm;
mod pipe;
mod reports;
mod retain;
mod space;
pub use hotdirs::name_dirs;
pub use reports::{op_name, LastOp};
mod text;
mod tmpfile;
pub mod track;
mod xattr;

#[cfg(test)]
mod limits_tests;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::rc::Rc;
use std::time::Instant;

use atoll_proto::{
    entry_server, Attr, Cred, DescId, Errno, Extent, FileType, InodeId, LockOwner, Reply, Request,
    ServerStats, SessionId, SetAttr, StatFsInfo, TimeSet, Timespec, UnlinkKind, Vouched,
    BLOCK_SIZE, MAX_FRAME, MAX_SERVERS, RENAME_VICTIM_MARKED, ROOT,
};

pub use blocks::Cache;
pub use dir::parse_dirents;
use dir::{check_name, is_dot, push_dirent, Shard};
use inode::{Inode, MAX_EXTENTS, MAX_FILE_SIZE};
pub use limits::Limits;
use locks::Lock;
use perm::{check, kill_priv, Caller, MAY_EXEC, MAY_READ, MAY_WRITE};

use crate::store::BlockStore;

const BS: u64 = BLOCK_SIZE as u64;
/// Largest payload of a `ReadData`/`WriteData` message.
pub const MAX_DATA: usize = MAX_FRAME - 256;
/// Largest `Dirents` payload.
const MAX_DIRENTS: usize = MAX_FRAME - 256;
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
#[derive(Clone, Debug)]
pub struct FsConfig {
    /// This server's index (owner id in inode and description ids).
    pub index: usize,
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
    /// The instance's bounds on metadata (`limits`).
    pub limits: Limits,
}

/// An open file description (Hare §3.5). Life cycle: created by `Open`/
/// `OpenInode` with one reference from the opening session; `Share` adds
/// references for other sessions; the last `Close` (or death of the last
/// referencing session) destroys it, dropping its OFD/`flock` locks and
/// possibly the unlinked inode.
struct Desc {
    ino: InodeId,
    flags: u32,
    /// Shared offset (used when the client sends `offset: None`).
    offset: u64,
    refs: HashMap<SessionId, u32>,
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

struct Session {
    groups: Rc<[u32]>,
}

const OP_NAMES: [&str; 56] = [
    "SetGroups",
    "Lookup",
    "Open",
    "MakeNode",
    "Link",
    "Unlink",
    "Rename",
    "ReadDir",
    "SetParent",
    "MarkRmdir",
    "FinishRmdir",
    "GetAttr",
    "SetAttr",
    "Access",
    "ReadLink",
    "Ref",
    "Unref",
    "OpenInode",
    "GetXattr",
    "SetXattr",
    "ListXattr",
    "RemoveXattr",
    "Fallocate",
    "MapBlocks",
    "Read",
    "Write",
    "ReadData",
    "WriteData",
    "Seek",
    "SetFlags",
    "Share",
    "Close",
    "SetLock",
    "GetLock",
    "StatFs",
    "Stats",
    "ClientCounters",
    "Reclaim",
    "MoveDone",
    "Relink",
    "Pipe",
    "PipeHeader",
    "CreateInode",
    "Adopt",
    "RenameLock",
    "CreateTmpfile",
    "PassLocks",
    "Map",
    "Unmap",
    "Exec",
    "Subdirs",
    "InotifyInit",
    "InotifyAddWatch",
    "InotifyRmWatch",
    "InotifyRegister",
    "InotifyModified",
];

fn op_index(req: &Request<'_>) -> usize {
    use Request::*;
    match req {
        SetGroups { .. } => 0,
        Lookup { .. } => 1,
        Open { .. } => 2,
        MakeNode { .. } => 3,
        Link { .. } => 4,
        Unlink { .. } => 5,
        Rename { .. } => 6,
        ReadDir { .. } => 7,
        SetParent { .. } => 8,
        MarkRmdir { .. } => 9,
        FinishRmdir { .. } => 10,
        GetAttr { .. } => 11,
        SetAttr { .. } => 12,
        Access { .. } => 13,
        ReadLink { .. } => 14,
        Ref { .. } => 15,
        Unref { .. } => 16,
        OpenInode { .. } => 17,
        GetXattr { .. } => 18,
        SetXattr { .. } => 19,
        ListXattr { .. } => 20,
        RemoveXattr { .. } => 21,
        Fallocate { .. } => 22,
        MapBlocks { .. } => 23,
        Read { .. } => 24,
        Write { .. } => 25,
        ReadData { .. } => 26,
        WriteData { .. } => 27,
        Seek { .. } => 28,
        SetFlags { .. } => 29,
        Share { .. } => 30,
        Close { .. } => 31,
        SetLock { .. } => 32,
        GetLock { .. } => 33,
        StatFs => 34,
        Stats => 35,
        ClientCounters(_) => 36,
        Reclaim { .. } => 37,
        MoveDone { .. } => 38,
        Relink { .. } => 39,
        Pipe { .. } => 40,
        PipeHeader { .. } => 41,
        CreateInode { .. } => 42,
        Adopt { .. } => 43,
        RenameLock { .. } => 44,
        CreateTmpfile { .. } => 45,
        PassLocks { .. } => 46,
        Map { .. } => 47,
        Unmap { .. } => 48,
        Exec { .. } => 49,
        Subdirs { .. } => 50,
        InotifyInit { .. } => 51,
        InotifyAddWatch { .. } => 52,
        InotifyRmWatch { .. } => 53,
        InotifyRegister { .. } => 54,
        InotifyModified { .. } => 55,
    }
}

fn now() -> Timespec {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    Timespec {
        sec: d.as_secs() as i64,
        nsec: d.subsec_nanos(),
    }
}

fn older(a: Timespec, b: Timespec) -> bool {
    (a.sec, a.nsec) < (b.sec, b.nsec)
}

type R<'o> = Result<Reply<'o>, Errno>;

/// One file server's whole state. See the module docs for ownership.
pub struct FileServer<S> {
    cfg: FsConfig,
    inodes: HashMap<InodeId, Inode>,
    next_serial: u64,
    shards: HashMap<InodeId, Shard>,
    /// Directories removed here: creations in them answer `ENOENT`.
    removed: limits::RemovedDirs,
    descs: HashMap<DescId, Desc>,
    next_desc: u64,
    sessions: HashMap<SessionId, Session>,
    cache: Cache<S>,
    pipes: pipe::Pipes,
    /// Notification queues owned here and watches held here (`inotify`).
    notify: inotify::Notify,
    /// Inodes placed here by creation affinity, not yet named (Hare §3.7.5).
    creating: affinity::Creating,
    requests: u64,
    bad_requests: u64,
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
    marks: HashMap<InodeId, SessionId>,
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
}

/// Requests that did in one message what Hare's protocol does in several
/// (§3.7.4), and the messages that saved: an `Open` that found the name
/// and opened its inode (LOOKUP + OPEN), an `Open` that created the file
/// (CREATE inode + ADD_MAP + OPEN), a `MakeNode` (CREATE inode + ADD_MAP).
#[derive(Default, Debug, Clone, Copy, PartialEq, Eq)]
struct Coalesced {
    opens: u64,
    creates: u64,
    nodes: u64,
}

impl Coalesced {
    fn total(&self) -> u64 {
        self.opens + self.creates + self.nodes
    }
    fn opened(&mut self, created: bool) {
        if created {
            self.creates += 1;
        } else {
            self.opens += 1;
        }
    }

    fn made_node(&mut self) {
        self.nodes += 1;
    }

    /// Messages a client would have sent without coalescing, minus the
    /// ones it sent.
    fn messages_saved(&self) -> u64 {
        self.opens + 2 * self.creates + self.nodes
    }

    fn counters(&self) -> [(&'static str, u64); 4] {
        [
            ("coalescing.combined_opens", self.opens),
            ("coalescing.combined_creates", self.creates),
            ("coalescing.combined_nodes", self.nodes),
            ("coalescing.messages_saved", self.messages_saved()),
        ]
    }
}

/// A provisional name `(dir, name)` → `ino` added by `session`'s `Link`
/// (`previous: None`) or `Relink` (the inode it named before).
struct MoveLink {
    session: SessionId,
    dir: InodeId,
    name: Vec<u8>,
    ino: InodeId,
    previous: Option<(InodeId, FileType)>,
}

impl<S: BlockStore> FileServer<S> {
    /// A server with gauges of its own (alone, or in tests).
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
        let acct = limits::Accounts::new(&cfg.limits, gauges);
        let mut fs = FileServer {
            inodes: HashMap::new(),
            next_serial: 1,
            shards: HashMap::new(),
            removed: limits::RemovedDirs::new(cfg.limits.inodes),
            descs: HashMap::new(),
            next_desc: 1,
            sessions: HashMap::new(),
            cache,
            pipes: pipe::Pipes::default(),
            notify: inotify::Notify::default(),
            creating: affinity::Creating::default(),
            requests: 0,
            bad_requests: 0,
            ops: [(0, 0); OP_NAMES.len()],
            track: track::Tracker::new(cfg.track_lookups, cfg.limits.tracked),
            client_counters: Default::default(),
            last_op: reports::LastOp::default(),
            coalesced: Coalesced::default(),
            marks: HashMap::new(),
            move_refs: Vec::new(),
            move_links: Vec::new(),
            rename_lock: None,
            acct,
            maps: mapping::Mappings::default(),
            texts: text::Texts::default(),
            hot: hotdirs::HotDirs::default(),
            cfg,
        };
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

    /// A session got a channel to this server.
    pub fn session_opened(&mut self, session: SessionId) {
        self.sessions.entry(session).or_insert_with(|| Session {
            groups: Rc::from(Vec::new()),
        });
    }

    /// The session is gone (process exited or was killed): drop every
    /// reference it held and its POSIX locks, so nothing leaks.
    pub fn session_closed(&mut self, session: SessionId) {
        self.sessions.remove(&session);
        self.client_counters.forget(session);
        self.abandon_creations(session);
        let held: Vec<DescId> = self
            .descs
            .iter()
            .filter(|(_, d)| d.refs.contains_key(&session))
            .map(|(id, _)| *id)
            .collect();
        for id in held {
            if let Some(d) = self.descs.get_mut(&id) {
                d.refs.remove(&session);
                if d.refs.is_empty() {
                    self.release_desc(id);
                }
            }
        }
        let owner = LockOwner::Process(session.0);
        for inode in self.inodes.values_mut() {
            if !inode.locks.is_empty() {
                let before = inode.locks.len();
                locks::release(&mut inode.locks, owner);
                self.acct.lock_records -= (before - inode.locks.len()) as u64;
            }
        }
        self.abandon_namespace_ops(session);
        self.drop_mappings(session);
        self.drop_texts(session);
        if self.notify.busy() {
            self.notify_tick();
        }
        self.settle();
    }

    /// A frame that could not be decoded (counted for `atoll status`).
    pub fn count_bad_request(&mut self) {
        self.bad_requests += 1;
    }

    pub fn stats(&self) -> ServerStats {
        ServerStats {
            server: self.cfg.index as u32,
            core: self.cfg.core,
            sessions: self.sessions.len() as u64,
            inodes: self.inodes.len() as u64,
            open_descriptions: self.descs.len() as u64,
            requests: self.requests,
            bad_requests: self.bad_requests,
            ops: OP_NAMES
                .iter()
                .zip(self.ops.iter())
                .filter(|(_, (n, _))| *n > 0)
                .map(|(name, (n, ns))| (name.to_string(), *n, *ns))
                .collect(),
            counters: self.counters(),
            pipes: self.pipe_stats().0,
            pipe_bytes: self.pipe_stats().1,
            pipe_ops: self.pipe_stats().2,
            // The server loop adds what only it knows (rings, sessions).
            ..self.cache.stats()
        }
    }

    /// Named counters of the Hare techniques (see `ServerStats::counters`).
    fn counters(&self) -> Vec<(String, u64)> {
        let t = &self.track;
        let k = &self.client_counters.totals;
        let mut v: Vec<(String, u64)> = Vec::new();
        if t.enabled() {
            v.push(("dcache.lookups_tracked".into(), t.recorded));
            v.push(("dcache.invalidations_sent".into(), t.invalidations));
            v.push(("dcache.changes_invalidating".into(), t.changes_invalidating));
            v.push(("dcache.names_tracked".into(), t.tracked()));
            v.push(("dcache.records_evicted".into(), t.evicted));
        }
        for (name, n) in [
            ("dcache.hits", k.dcache_hits),
            ("dcache.misses", k.dcache_misses),
            ("dcache.invalidations_applied", k.dcache_invalidations),
            ("dcache.flushes", k.dcache_flushes),
            ("broadcasts", k.broadcasts),
            ("rmdir.three_phase", k.three_phase_rmdirs),
            ("hybrid_fd.local_ops", k.local_offset_ops),
            ("hybrid_fd.offsets_shared", k.offsets_shared),
            ("hybrid_fd.offsets_reclaimed", k.offsets_reclaimed),
            ("coalescing.uncoalesced_opens", k.uncoalesced_opens),
            ("client.traps", k.traps),
        ] {
            if n > 0 {
                v.push((name.into(), n));
            }
        }
        for (name, n) in self.coalesced.counters() {
            if n > 0 {
                v.push((name.into(), n));
            }
        }
        for (name, n) in self.creating.counters() {
            if n > 0 {
                v.push((name.into(), n));
            }
        }
        for (name, n) in self.notify.counters() {
            if n > 0 {
                v.push((name.into(), n));
            }
        }
        // Namespace operations in flight right now (gauges, not counts):
        // a value that stays up on an idle instance is a stuck operation.
        let moving = self
            .inodes
            .values()
            .filter(|i| i.ftype == FileType::Directory && i.links > 1)
            .count() as u64;
        // Blocks kept only for mappings (`retain`): back to zero once the
        // last mapping of every file is gone.
        let retained = self.inodes.values().map(|i| i.retained.len() as u64).sum();
        for (name, n) in [
            ("mappings.retained_blocks", retained),
            ("in_flight.rmdir_marks", self.marks.len() as u64),
            ("in_flight.move_refs", self.move_refs.len() as u64),
            ("in_flight.move_links", self.move_links.len() as u64),
            ("in_flight.directories_moving", moving),
            ("in_flight.rename_lock", self.rename_lock.is_some() as u64),
        ] {
            if n > 0 {
                v.push((name.into(), n));
            }
        }
        v
    }

    /// Directory-cache invalidations to deliver before the reply to the
    /// request just served (Hare §3.7.2: the unlinker's reply must not
    /// overtake them). `(session, dir, name)` in order.
    pub fn take_notices(&mut self) -> Vec<track::Pending> {
        self.track.take_pending()
    }

    /// Are invalidations waiting for delivery?
    pub fn has_notices(&self) -> bool {
        self.track.has_pending()
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
        self.hot.record(&req);
        let plan = match self.notify.busy() {
            true => inotify::Plan::of(&req, |d| self.descs.get(&d).map(|d| d.ino)),
            false => None,
        };
        let r = self.dispatch(session, &who, req, out);
        if self.notify.busy() {
            if let (Some(plan), Ok(reply)) = (plan, &r) {
                self.notify_after(plan, reply);
            }
            self.notify_tick();
        }
        self.settle();
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
            Some(s) => s.groups.clone(),
            None => {
                self.session_opened(session);
                Rc::from(Vec::new())
            }
        };
        Caller {
            uid: cred.uid,
            gid: cred.gid,
            caps: cred.caps,
            groups,
            vouched,
        }
    }

    fn dispatch<'o>(
        &mut self,
        session: SessionId,
        who: &Caller,
        req: Request<'_>,
        out: &'o mut Vec<u8>,
    ) -> R<'o> {
        use Request as Q;
        match req {
            Q::SetGroups { groups } => {
                self.session_opened(session);
                if let Some(s) = self.sessions.get_mut(&session) {
                    s.groups = Rc::from(groups);
                }
                Ok(Reply::Ok)
            }
            Q::Lookup { dir, name } => {
                let r = self.lookup(who, dir, name);
                if r.is_ok() {
                    self.track.record(session, dir, name);
                }
                r
            }
            Q::Open {
                dir,
                name,
                flags,
                perm,
                umask,
            } => {
                let r = self.open(session, who, dir, name, flags, perm & !umask, out);
                if let Ok(Reply::Opened { created, .. }) = &r {
                    self.coalesced.opened(*created);
                }
                r
            }
            Q::MakeNode {
                dir,
                name,
                ftype,
                perm,
                rdev,
                target,
                home,
                distributed,
            } => {
                let r =
                    self.make_node(who, dir, name, ftype, perm, rdev, target, home, distributed);
                if r.is_ok() {
                    self.coalesced.made_node();
                }
                r
            }
            Q::Link {
                dir,
                name,
                ino,
                ftype,
                replace,
                ..
            } => {
                let r = self.link(session, who, dir, name, ino, ftype, replace);
                if r.is_ok() && ftype == FileType::Directory {
                    self.move_links.push(MoveLink {
                        session,
                        dir,
                        name: name.to_vec(),
                        ino,
                        previous: None,
                    });
                }
                r
            }
            Q::Unlink {
                dir,
                name,
                kind,
                expect,
            } => {
                let r = self.unlink(who, dir, name, kind, expect);
                if let Ok(Reply::Unlinked {
                    ino, freed_here, ..
                }) = &r
                {
                    self.move_settled(session, dir, name, *ino, *freed_here);
                }
                r
            }
            Q::Rename {
                olddir,
                oldname,
                newdir,
                newname,
                flags,
            } => self.rename(session, who, olddir, oldname, newdir, newname, flags),
            Q::ReadDir {
                dir,
                cookie,
                max_bytes,
            } => self.readdir(dir, cookie, max_bytes, out),
            Q::SetParent { dir, parent } => self.set_parent(dir, parent),
            Q::MarkRmdir { dir } => self.mark_rmdir(session, dir),
            Q::FinishRmdir { dir, commit } => self.finish_rmdir(session, dir, commit),
            Q::Relink {
                dir,
                name,
                ino,
                ftype,
                expect,
            } => self.relink(session, who, dir, name, (ino, ftype), expect),
            Q::RenameLock { acquire } => {
                self.rename_lock = match (acquire, self.rename_lock) {
                    (true, None) => Some(session),
                    (true, Some(_)) => return Err(RETRY),
                    (false, Some(h)) if h == session => None,
                    (false, _) => return Err(Errno::EINVAL),
                };
                Ok(Reply::Ok)
            }
            Q::MoveDone { dir, name } => {
                self.move_links
                    .retain(|m| !(m.session == session && m.dir == dir && m.name == name));
                Ok(Reply::Ok)
            }
            Q::GetAttr { ino } => Ok(Reply::Attr(self.attr(ino)?)),
            Q::SetAttr { ino, set } => self.set_attr(session, who, ino, set),
            Q::Access { ino, mask } => self.access(who, ino, mask),
            Q::ReadLink { ino } => {
                let i = self.inode(ino)?;
                if !matches!(i.ftype, FileType::Symlink | FileType::Socket) {
                    return Err(Errno::EINVAL);
                }
                self.read_target(i, out);
                Ok(Reply::Target(out))
            }
            Q::Ref { ino } => {
                // A directory an rmdir has marked here may be about to go
                // (wait for the outcome); one it removed must not gain a
                // name through a move that started before (Hare §3.4.1).
                if self.removed.contains(&ino) {
                    return Err(Errno::ENOENT);
                }
                if self.shards.get(&ino).is_some_and(|s| s.marked) {
                    return Err(RETRY);
                }
                let i = self.inode_mut(ino)?;
                if i.links == 0 && !i.linkable {
                    return Err(Errno::ENOENT);
                }
                i.linkable = false;
                // A directory gets a second name only for the moment of a
                // client-coordinated cross-server move (`Link` new name,
                // `Unlink` old name, Hare §6.2.3); never a third, so no
                // directory hard links: a second move waits for the first.
                let is_dir = i.ftype == FileType::Directory;
                if is_dir && i.links != 1 {
                    return Err(RETRY);
                }
                i.links += 1;
                i.ctime = now();
                if is_dir {
                    self.move_refs.push((session, ino));
                }
                Ok(Reply::Attr(self.attr(ino)?))
            }
            Q::Unref { ino } => {
                self.inode(ino)?;
                self.forget_move_ref(session, ino);
                self.drop_link(ino);
                Ok(Reply::Ok)
            }
            Q::OpenInode { ino, flags, via } => {
                let (desc, attr) = self.open_inode(session, who, ino, flags, true)?;
                if let (Some(v), Some(d)) = (via, self.descs.get_mut(&desc)) {
                    d.via = Some((v.dir, v.name.into()));
                }
                Ok(Reply::Opened {
                    desc,
                    attr,
                    created: false,
                    watched: self.desc_watched(desc),
                })
            }
            Q::GetXattr { ino, name } => self.get_xattr(who, ino, name, out),
            Q::SetXattr {
                ino,
                name,
                value,
                flags,
            } => self.set_xattr(who, ino, name, Some(value), flags),
            Q::ListXattr { ino } => self.list_xattr(who, ino, out),
            Q::RemoveXattr { ino, name } => self.set_xattr(who, ino, name, None, 0),
            Q::Fallocate {
                ino,
                mode,
                offset,
                len,
            } => self.fallocate(session, who, ino, mode, offset, len),
            Q::MapBlocks {
                ino,
                offset,
                len,
                allocate,
            } => {
                // Blocks reach a mapping only while it is counted (`mapping`).
                if !self.maps.holds(session, ino) {
                    return Err(Errno::EBADF);
                }
                self.map_blocks(ino, offset, len, allocate)
            }
            Q::Read { desc, len, offset } => {
                let (off, got, extents) = self.read(session, desc, len, offset)?;
                Ok(Reply::Extents {
                    offset: off,
                    len: got,
                    extents,
                    watched: false,
                })
            }
            Q::Write { desc, len, offset } => {
                let (off, got, extents) = self.write(session, who, desc, len, offset)?;
                let watched = got > 0 && self.desc_watched(desc);
                Ok(Reply::Extents {
                    offset: off,
                    len: got,
                    extents,
                    watched,
                })
            }
            Q::ReadData { desc, len, offset } => {
                let len = (len as usize).min(MAX_DATA) as u64;
                let (_, got, extents) = self.read(session, desc, len, offset)?;
                out.clear();
                out.resize(got as usize, 0);
                self.copy_out(&extents, out);
                Ok(Reply::Data(out))
            }
            Q::WriteData { desc, data, offset } => {
                let data = &data[..data.len().min(MAX_DATA)];
                let (_, got, extents) =
                    self.write(session, who, desc, data.len() as u64, offset)?;
                self.copy_in(&extents, &data[..got as usize]);
                Ok(Reply::Written(got))
            }
            Q::Seek {
                desc,
                offset,
                whence,
            } => self.seek(session, desc, offset, whence),
            Q::SetFlags { desc, flags } => {
                let d = self.desc_mut(session, desc)?;
                d.flags = (d.flags & !SETFL_MASK) | (flags & SETFL_MASK);
                Ok(Reply::Ok)
            }
            Q::Share { desc, to } => {
                let d = self.desc_mut(session, desc)?;
                *d.refs.entry(to).or_insert(0) += 1;
                self.session_opened(to);
                Ok(Reply::Ok)
            }
            Q::Close { desc } => self.close(session, desc),
            Q::SetLock { desc, lock } => self.set_lock(session, desc, &lock),
            Q::GetLock { desc, lock } => {
                let d = self.desc(session, desc)?;
                let req = Lock::from_spec(&lock)?;
                if req.kind == locks::UN {
                    return Err(Errno::EINVAL);
                }
                let i = self.inode(d.ino)?;
                Ok(Reply::Lock(
                    locks::conflict(&i.locks, &req).map(|l| l.to_spec()),
                ))
            }
            Q::StatFs => {
                // Block and file counts are instance-wide (`blocks`,
                // `limits`), so only server 0 reports them and the
                // client's sum over servers is right.
                let ((files, files_free), (blocks, blocks_free)) = if self.cfg.index == 0 {
                    (self.acct.files(), self.cache.statfs())
                } else {
                    ((0, 0), (0, 0))
                };
                Ok(Reply::StatFs(StatFsInfo {
                    blocks,
                    blocks_free,
                    files,
                    files_free,
                }))
            }
            Q::Stats => Ok(Reply::Stats(self.stats())),
            Q::Pipe { flags } => self.pipe_create(session, who, flags),
            Q::PipeHeader { desc } => self.pipe_header(session, desc),
            Q::InotifyInit { flags } => self.inotify_init(session, who, flags),
            Q::InotifyAddWatch { desc, ino, mask } => {
                self.inotify_add_watch(session, desc, ino, mask)
            }
            Q::InotifyRmWatch { desc, wd } => self.inotify_rm_watch(session, desc, wd),
            Q::InotifyModified { desc } => {
                let d = self.desc(session, desc)?;
                let (ino, via) = (d.ino, d.via.clone());
                self.emit_changed_via(ino, atoll_proto::inotify::IN_MODIFY, via);
                Ok(Reply::Ok)
            }
            Q::InotifyRegister {
                queue,
                ino,
                wd,
                mask,
            } => self.inotify_register(queue, ino, wd, mask),
            Q::Reclaim { desc } => {
                let d = self.desc(session, desc)?;
                if d.refs.len() != 1 {
                    return Err(Errno::EBUSY);
                }
                Ok(Reply::Offset(d.offset))
            }
            Q::ClientCounters(k) => {
                self.client_counters.add(session, &k);
                Ok(Reply::Ok)
            }
            Q::CreateInode {
                dir,
                ftype,
                perm,
                rdev,
                target,
                open,
            } => self.create_inode(session, who, dir, ftype, perm, rdev, target, open),
            Q::Adopt { ino } => self.adopt(session, ino),
            Q::CreateTmpfile { dir, perm, flags } => {
                self.create_tmpfile(session, who, dir, perm, flags)
            }
            Q::PassLocks { to } => {
                let (from, owner) = (LockOwner::Process(session.0), LockOwner::Process(to.0));
                for inode in self.inodes.values_mut() {
                    locks::pass(&mut inode.locks, from, owner);
                }
                self.session_opened(to);
                Ok(Reply::Ok)
            }
            Q::Map { ino, to } => self.map_inode(session, ino, to),
            Q::Unmap { ino } => self.unmap_inode(session, ino),
            Q::Exec { ino, to } => self.exec_inode(ino, to),
            Q::Subdirs { dir, delta } => {
                // Counted in the owner's own shard of the directory, which
                // then holds all its subdirectories (for `nlink` only).
                let live = self.inodes.contains_key(&dir) && !self.removed.contains(&dir);
                if self.owns(dir) && dir.is_distributed() && live {
                    let names = &self.acct.names;
                    let s = self
                        .shards
                        .entry(dir)
                        .or_insert_with(|| Shard::new(None, names));
                    s.subdirs = (s.subdirs as i64 + delta as i64).clamp(0, u32::MAX as i64) as u32;
                }
                Ok(Reply::Ok)
            }
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
            let dist = ino.is_distributed() && self.owns(ino);
            match self.shards.get(&ino) {
                Some(s) if dist || (ino.home() == self.cfg.index && !ino.is_distributed()) => {
                    2 + s.subdirs
                }
                None if dist => 2,
                _ => 1,
            }
        };
        let size = match i.ftype {
            FileType::Directory => BS,
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
                Some(v) => check(FileType::Directory, v.perm, v.uid, v.gid, who, mask),
                None if mask & MAY_WRITE != 0 => Err(Errno::EPROTO),
                None => Ok(()),
            };
        }
        let d = self.inode(dir)?;
        if d.ftype != FileType::Directory {
            return Err(Errno::ENOTDIR);
        }
        check(d.ftype, d.perm, d.uid, d.gid, who, mask)
    }

    /// Entries of `dir` named `name` live here, or the client erred.
    fn entry_here(&self, dir: InodeId, name: &[u8]) -> Result<(), Errno> {
        if entry_server(dir, name, self.cfg.nservers) == self.cfg.index {
            Ok(())
        } else {
            Err(Errno::EXDEV)
        }
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
            let t = now();
            d.mtime = t;
            d.ctime = t;
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
        distributed: bool,
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
        let dist = ftype == FileType::Directory && distributed;
        let home = if ftype == FileType::Directory {
            home
        } else {
            self.cfg.index
        };
        let ino = InodeId::new(self.cfg.index, home, dist, serial);
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
            if i.ftype == FileType::Directory && i.links == 0 {
                self.shards.remove(&ino);
                self.removed.insert(ino, true);
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
            if let Some(mut i) = self.inodes.remove(&ino) {
                self.pipes.anonymous.remove(&ino);
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
        self.notify_closed(d.ino, d.writable(), d.via.clone());
        self.queue_closed(d.ino);
        self.pipe_released(d.ino, d.flags);
        self.maybe_free(d.ino);
    }

    // ---------------------------------------------------------------
    // names

    fn lookup<'o>(&self, who: &Caller, dir: InodeId, name: &[u8]) -> R<'o> {
        check_name(name)?;
        self.dir_check(dir, who, MAY_EXEC)?;
        if name == b"." {
            return Ok(Reply::Entry {
                ino: dir,
                ftype: FileType::Directory,
            });
        }
        if name == b".." {
            let parent = if dir == ROOT {
                ROOT
            } else {
                self.shards
                    .get(&dir)
                    .and_then(|s| s.parent)
                    .ok_or(Errno::ENOENT)?
            };
            return Ok(Reply::Entry {
                ino: parent,
                ftype: FileType::Directory,
            });
        }
        self.entry_here(dir, name)?;
        let d = self
            .shards
            .get(&dir)
            .and_then(|s| s.get(name))
            .ok_or(Errno::ENOENT)?;
        Ok(Reply::Entry {
            ino: d.ino,
            ftype: d.ftype,
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn open<'o>(
        &mut self,
        session: SessionId,
        who: &Caller,
        dir: InodeId,
        name: &[u8],
        flags: u32,
        perm: u32,
        out: &'o mut Vec<u8>,
    ) -> R<'o> {
        let creat = flags & libc::O_CREAT as u32 != 0;
        let excl = flags & libc::O_EXCL as u32 != 0;
        check_name(name)?;
        if is_dot(name) {
            if creat && excl {
                return Err(Errno::EEXIST);
            }
            // The client opens the directory itself with `OpenInode`.
            return self.lookup(who, dir, name);
        }
        self.entry_here(dir, name)?;
        self.dir_check(dir, who, MAY_EXEC)?;
        let existing = self.shards.get(&dir).and_then(|s| s.get(name));
        if let Some(d) = existing {
            if creat && excl {
                // Also for a dangling symlink, as Linux.
                return Err(Errno::EEXIST);
            }
            if d.ftype == FileType::Symlink {
                let path = flags & libc::O_PATH as u32 != 0;
                if flags & libc::O_NOFOLLOW as u32 != 0 && !path {
                    return Err(Errno::ELOOP);
                }
                if flags & libc::O_NOFOLLOW as u32 == 0 {
                    return match self.inodes.get(&d.ino) {
                        Some(i) => {
                            self.read_target(i, out);
                            Ok(Reply::Symlink {
                                ino: d.ino,
                                target: out,
                            })
                        }
                        None => Ok(Reply::Entry {
                            ino: d.ino,
                            ftype: d.ftype,
                        }),
                    };
                }
            }
            if !self.owns(d.ino) {
                return Ok(Reply::Entry {
                    ino: d.ino,
                    ftype: d.ftype,
                });
            }
            let (desc, attr) = self.open_inode(session, who, d.ino, flags, true)?;
            return Ok(Reply::Opened {
                desc,
                attr,
                created: false,
                watched: self.watched(attr.ino),
            });
        }
        if !creat {
            return Err(Errno::ENOENT);
        }
        if flags & libc::O_DIRECTORY as u32 != 0 {
            return Err(Errno::EINVAL); // Linux ≥ 6.4
        }
        self.dir_check(dir, who, MAY_WRITE | MAY_EXEC)?;
        self.creatable(dir)?;
        // Linux finds a file table slot before it creates (`ENFILE`).
        if !self.acct.room(limits::DESCRIPTIONS, 1) {
            return Err(Errno::ENFILE);
        }
        self.admit(limits::INODES, 1)?;
        self.admit(limits::NAMES, 1)?;
        let ino = self.new_inode(who, dir, FileType::Regular, perm & 0o7777, 0, false);
        if let Some(s) = self.shards.get_mut(&dir) {
            s.insert(name, ino, FileType::Regular);
        }
        self.touch_dir(dir);
        // POSIX: a new file is opened with the requested access whatever
        // its mode (`open("f", O_CREAT|O_RDWR, 0444)` succeeds).
        let (desc, attr) = self.open_inode(session, who, ino, flags, false)?;
        Ok(Reply::Opened {
            desc,
            attr,
            created: true,
            watched: self.watched(attr.ino),
        })
    }

    /// Open a description of an inode owned here.
    fn open_inode(
        &mut self,
        session: SessionId,
        who: &Caller,
        ino: InodeId,
        flags: u32,
        check_perm: bool,
    ) -> Result<(DescId, Attr), Errno> {
        let i = self.inode(ino)?;
        let path = flags & libc::O_PATH as u32 != 0;
        let is_dir = i.ftype == FileType::Directory;
        if flags & libc::O_DIRECTORY as u32 != 0 && !is_dir {
            return Err(Errno::ENOTDIR);
        }
        let mut keep =
            flags & !((libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC | libc::O_NOCTTY) as u32);
        if path {
            keep &= (libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC) as u32;
        } else {
            if i.ftype == FileType::Symlink {
                return Err(Errno::ELOOP);
            }
            let acc = flags & libc::O_ACCMODE as u32;
            let wants_write = acc != libc::O_RDONLY as u32;
            let wants_read = acc != libc::O_WRONLY as u32;
            let trunc = flags & libc::O_TRUNC as u32 != 0;
            // O_TRUNC asks for write access, which a directory never grants.
            if is_dir && (wants_write || trunc || flags & libc::O_CREAT as u32 != 0) {
                return Err(Errno::EISDIR);
            }
            if i.ftype == FileType::Socket {
                return Err(Errno::ENXIO);
            }
            let mut mask = 0;
            if wants_read {
                mask |= MAY_READ;
            }
            if wants_write || trunc {
                mask |= MAY_WRITE; // O_TRUNC needs write permission (Linux)
            }
            if check_perm {
                check(i.ftype, i.perm, i.uid, i.gid, who, mask)?;
            }
            if (wants_write || trunc) && i.runs > 0 {
                return Err(Errno::ETXTBSY);
            }
            if trunc && i.ftype == FileType::Regular {
                if i.size > 0 {
                    self.emit_changed(ino, atoll_proto::inotify::IN_MODIFY);
                }
                let i = self.inodes.get_mut(&ino).ok_or(Errno::ENOENT)?;
                i.truncate(&mut self.cache, 0);
                let t = now();
                i.mtime = t;
                i.ctime = t;
                if !who.has(Cred::CAP_FSETID) {
                    i.perm = kill_priv(i.perm);
                }
            }
        }
        self.admit(limits::DESCRIPTIONS, 1)?;
        let partner_opens = self.pipe_opening(ino, keep)?;
        let id = DescId::new(self.cfg.index, self.next_desc);
        self.next_desc += 1;
        self.descs.insert(
            id,
            Desc {
                ino,
                flags: keep,
                offset: 0,
                refs: HashMap::from([(session, 1)]),
                partner_opens,
                via: None,
            },
        );
        if let Some(i) = self.inodes.get_mut(&ino) {
            i.opens += 1;
        }
        Ok((id, self.attr(ino)?))
    }

    #[allow(clippy::too_many_arguments)]
    fn make_node<'o>(
        &mut self,
        who: &Caller,
        dir: InodeId,
        name: &[u8],
        ftype: FileType,
        perm: u32,
        rdev: u64,
        target: &[u8],
        home: u8,
        distributed: bool,
    ) -> R<'o> {
        check_name(name)?;
        if is_dot(name) {
            return Err(Errno::EEXIST);
        }
        self.entry_here(dir, name)?;
        self.dir_check(dir, who, MAY_WRITE | MAY_EXEC)?;
        if self.shards.get(&dir).is_some_and(|s| s.get(name).is_some()) {
            return Err(Errno::EEXIST);
        }
        let home = home as usize;
        let perm = match ftype {
            FileType::Directory => {
                if home >= self.cfg.nservers.min(MAX_SERVERS) {
                    return Err(Errno::EINVAL);
                }
                perm & 0o1777
            }
            FileType::Symlink => {
                if target.is_empty() {
                    return Err(Errno::ENOENT);
                }
                if target.len() > atoll_proto::MAX_TARGET {
                    return Err(Errno::ENAMETOOLONG);
                }
                0o777
            }
            FileType::CharDevice | FileType::BlockDevice if !who.has(Cred::CAP_MKNOD) => {
                return Err(Errno::EPERM); // CAP_MKNOD
            }
            FileType::Socket if target.len() > atoll_proto::MAX_TARGET => {
                return Err(Errno::ENAMETOOLONG)
            }
            _ => perm & 0o7777,
        };
        self.creatable(dir)?;
        self.admit(limits::INODES, 1)?;
        self.admit(limits::NAMES, 1)?;
        let ino = self.new_inode(who, dir, ftype, perm, home, distributed);
        match ftype {
            FileType::Symlink | FileType::Socket => {
                if let Err(e) = self.set_target(ino, target) {
                    self.inodes.remove(&ino);
                    return Err(e);
                }
            }
            FileType::CharDevice | FileType::BlockDevice => {
                if let Some(i) = self.inodes.get_mut(&ino) {
                    i.rdev = rdev;
                }
            }
            _ => {}
        }
        if ftype == FileType::Directory && home == self.cfg.index {
            self.shards
                .insert(ino, Shard::new(Some(dir), &self.acct.names));
        }
        if let Some(s) = self.shards.get_mut(&dir) {
            s.insert(name, ino, ftype);
        }
        self.touch_dir(dir);
        Ok(Reply::Entry { ino, ftype })
    }

    /// Whether a directory known here has entries here (directories whose
    /// entries live elsewhere are vouched for by `MarkRmdir`).
    fn nonempty_here(&self, dir: InodeId) -> bool {
        self.shards.get(&dir).is_some_and(|s| !s.is_empty())
    }

    /// The entry for `name` is being replaced by an inode of type `new`:
    /// Linux's type rules for the victim.
    fn replace_ok(&self, victim: &dir::Dent, new: FileType) -> Result<(), Errno> {
        match (
            new == FileType::Directory,
            victim.ftype == FileType::Directory,
        ) {
            (true, false) => Err(Errno::ENOTDIR),
            (false, true) => Err(Errno::EISDIR),
            (true, true) if self.nonempty_here(victim.ino) => Err(Errno::ENOTEMPTY),
            _ => Ok(()),
        }
    }

    /// A directory about to be replaced must be empty everywhere, not only
    /// here. A distributed victim is vouched for by this session's mark here
    /// (the client marked it on every server, Hare §3.4.1); one whose entries
    /// live on another server, or whose inode does, by the client's
    /// `RENAME_VICTIM_MARKED` (it marked the victim's home and owner; the
    /// owner's mark stops moves of it). Otherwise `ESTALE`: the client looks
    /// again, marks, and retries. A `Link` replacing a non-distributed
    /// directory homed elsewhere is the client's to have validated.
    fn victim_validated(
        &self,
        session: SessionId,
        victim: &dir::Dent,
        marked_flag: bool,
    ) -> Result<(), Errno> {
        if victim.ftype != FileType::Directory || self.cfg.nservers < 2 {
            return Ok(());
        }
        // Mid-way through a cross-server move: wait for it (see `mark_rmdir`).
        if self.owns(victim.ino) && self.inode(victim.ino)?.links > 1 {
            return Err(RETRY);
        }
        if victim.ino.is_distributed() {
            let marked_here = self.shards.get(&victim.ino).is_some_and(|s| s.marked)
                && self.marks.get(&victim.ino) == Some(&session);
            return if marked_here {
                Ok(())
            } else {
                Err(Errno::ESTALE)
            };
        }
        let here = self.cfg.index;
        if (victim.ino.home() != here || victim.ino.owner() != here) && !marked_flag {
            return Err(Errno::ESTALE);
        }
        Ok(())
    }

    /// Forget a removed directory's entries held here.
    fn drop_dir_shard(&mut self, dir: InodeId) {
        self.track.dir_gone(dir);
        self.marks.remove(&dir);
        if self.shards.remove(&dir).is_some() || dir.home() == self.cfg.index {
            self.mark_removed(dir);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn link<'o>(
        &mut self,
        session: SessionId,
        who: &Caller,
        dir: InodeId,
        name: &[u8],
        ino: InodeId,
        ftype: FileType,
        replace: bool,
    ) -> R<'o> {
        check_name(name)?;
        if is_dot(name) {
            return Err(Errno::EEXIST);
        }
        self.entry_here(dir, name)?;
        self.dir_check(dir, who, MAY_WRITE | MAY_EXEC)?;
        if ftype == FileType::Directory {
            // As `Ref` (a move whose new name lives on the owner takes no
            // `Ref`): a directory an rmdir marked or removed does not move.
            if self.removed.contains(&ino) {
                return Err(Errno::ENOENT);
            }
            if self.shards.get(&ino).is_some_and(|s| s.marked) {
                return Err(RETRY);
            }
        }
        if self.owns(ino) {
            let i = self.inode(ino)?;
            if i.ftype != ftype {
                return Err(Errno::EINVAL);
            }
            if i.links == 0 && !i.linkable {
                return Err(Errno::ENOENT);
            }
            // As `Ref`: never a third name (another move is under way).
            if ftype == FileType::Directory && i.links != 1 {
                return Err(RETRY);
            }
        }
        let victim = self.creatable(dir)?.get(name);
        if let Some(v) = victim {
            if !replace {
                return Err(Errno::EEXIST);
            }
            self.replace_ok(&v, ftype)?;
            // Link has no flag: a victim homed elsewhere is the client's.
            self.victim_validated(session, &v, true)?;
            self.sticky_ok(dir, v.ino, who)?;
        } else if !replace {
            // A new name: a hard link, or the first name of an inode placed
            // by creation affinity. `replace` is the new name of a rename
            // across servers, whose old name goes next: never refused.
            self.admit(limits::NAMES, 1)?;
        }
        if let Some(s) = self.shards.get_mut(&dir) {
            s.insert(name, ino, ftype);
        }
        if victim.is_some() {
            self.track.changed(dir, name);
        }
        if let Some(i) = self.inodes.get_mut(&ino) {
            i.links += 1;
            i.linkable = false;
            i.ctime = now();
        }
        if let Some(v) = victim {
            if v.ftype == FileType::Directory {
                self.drop_dir_shard(v.ino);
            }
            if self.owns(v.ino) {
                self.drop_link(v.ino);
            }
        }
        self.touch_dir(dir);
        Ok(Reply::Linked {
            replaced: victim.map(|v| (v.ino, v.ftype)),
        })
    }

    fn unlink<'o>(
        &mut self,
        who: &Caller,
        dir: InodeId,
        name: &[u8],
        kind: UnlinkKind,
        expect: Option<InodeId>,
    ) -> R<'o> {
        check_name(name)?;
        if name == b"." {
            return Err(Errno::EINVAL);
        }
        if name == b".." {
            return Err(Errno::ENOTEMPTY);
        }
        self.entry_here(dir, name)?;
        self.dir_check(dir, who, MAY_WRITE | MAY_EXEC)?;
        let d = self
            .shards
            .get(&dir)
            .and_then(|s| s.get(name))
            .ok_or(Errno::ENOENT)?;
        if expect.is_some_and(|e| e != d.ino) {
            return Err(Errno::ESTALE);
        }
        let is_dir = d.ftype == FileType::Directory;
        match kind {
            UnlinkKind::NonDirectory if is_dir => return Err(Errno::EISDIR),
            UnlinkKind::Directory if !is_dir => return Err(Errno::ENOTDIR),
            UnlinkKind::Directory if self.nonempty_here(d.ino) => return Err(Errno::ENOTEMPTY),
            // A directory in the middle of a cross-server move (see
            // `mark_rmdir`): the rmdir waits for the move.
            UnlinkKind::Directory if self.owns(d.ino) && self.inode(d.ino)?.links > 1 => {
                return Err(RETRY)
            }
            // The second half of a cross-server move: the directory keeps
            // its entries under the name `Link` gave it.
            UnlinkKind::Move if expect.is_none() => return Err(Errno::EINVAL),
            _ => {}
        }
        self.sticky_ok(dir, d.ino, who)?;
        if let Some(s) = self.shards.get_mut(&dir) {
            s.remove(name);
        }
        self.track.changed(dir, name);
        // A removed directory's entries here go when its owner frees it
        // (`drop_link` below when owned here) or at `FinishRmdir(commit)`.
        // TODO(atoll): a directory removed by a single `Unlink` whose inode
        // lives on another server keeps an empty shard here, so creations
        // through a stale handle are not refused with ENOENT.
        let here = self.owns(d.ino);
        if here {
            self.drop_link(d.ino);
        }
        self.touch_dir(dir);
        Ok(Reply::Unlinked {
            ino: d.ino,
            ftype: d.ftype,
            freed_here: here,
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn rename<'o>(
        &mut self,
        session: SessionId,
        who: &Caller,
        olddir: InodeId,
        oldname: &[u8],
        newdir: InodeId,
        newname: &[u8],
        flags: u32,
    ) -> R<'o> {
        let victim_marked = flags & RENAME_VICTIM_MARKED != 0;
        let flags = flags & !RENAME_VICTIM_MARKED;
        if flags & !(RENAME_NOREPLACE | RENAME_EXCHANGE) != 0
            || flags == RENAME_NOREPLACE | RENAME_EXCHANGE
        {
            return Err(Errno::EINVAL);
        }
        check_name(oldname)?;
        check_name(newname)?;
        if is_dot(oldname) || is_dot(newname) {
            return Err(Errno::EINVAL);
        }
        self.entry_here(olddir, oldname)?;
        self.entry_here(newdir, newname)?;
        self.dir_check(olddir, who, MAY_WRITE | MAY_EXEC)?;
        self.dir_check(newdir, who, MAY_WRITE | MAY_EXEC)?;
        let old = self
            .shards
            .get(&olddir)
            .and_then(|s| s.get(oldname))
            .ok_or(Errno::ENOENT)?;
        let target = self.shards.get(&newdir).and_then(|s| s.get(newname));
        // The new name of another session's cross-server move stays put
        // until that move settles: its undo must find it (otherwise a
        // directory would keep two names).
        let exchange = flags & RENAME_EXCHANGE != 0;
        if self.is_provisional(session, olddir, oldname)
            || (exchange && self.is_provisional(session, newdir, newname))
        {
            return Err(RETRY);
        }
        if olddir == newdir && oldname == newname {
            // Linux checks RENAME_NOREPLACE before noticing the names are one.
            if flags & RENAME_NOREPLACE != 0 {
                return Err(Errno::EEXIST);
            }
            return Ok(Reply::Renamed {
                moved: old.ino,
                ftype: old.ftype,
                replaced: None,
            });
        }
        self.creatable(newdir)?;
        self.sticky_ok(olddir, old.ino, who)?;
        let cross = olddir != newdir;
        if flags & RENAME_EXCHANGE != 0 {
            let t = target.ok_or(Errno::ENOENT)?;
            self.sticky_ok(newdir, t.ino, who)?;
            for (d, moved) in [(old, cross), (t, cross)] {
                if moved
                    && d.ftype == FileType::Directory
                    && self.owns(d.ino)
                    && !who.has(Cred::CAP_DAC_OVERRIDE)
                {
                    let i = self.inode(d.ino)?;
                    check(i.ftype, i.perm, i.uid, i.gid, who, MAY_WRITE)?;
                }
            }
            if let Some(s) = self.shards.get_mut(&olddir) {
                s.insert(oldname, t.ino, t.ftype);
            }
            if let Some(s) = self.shards.get_mut(&newdir) {
                s.insert(newname, old.ino, old.ftype);
            }
            self.track.changed(olddir, oldname);
            self.track.changed(newdir, newname);
            if cross {
                self.reparent(old, newdir);
                self.reparent(t, olddir);
            }
            self.touch_moved(old.ino);
            self.touch_moved(t.ino);
            self.touch_dir(olddir);
            self.touch_dir(newdir);
            return Ok(Reply::Renamed {
                moved: old.ino,
                ftype: old.ftype,
                replaced: Some((t.ino, t.ftype, false)),
            });
        }
        if let Some(t) = target {
            if flags & RENAME_NOREPLACE != 0 {
                return Err(Errno::EEXIST);
            }
            if t.ino == old.ino {
                // Two links to one inode: POSIX says do nothing.
                return Ok(Reply::Renamed {
                    moved: old.ino,
                    ftype: old.ftype,
                    replaced: None,
                });
            }
            self.replace_ok(&t, old.ftype)?;
            self.victim_validated(session, &t, victim_marked)?;
            self.sticky_ok(newdir, t.ino, who)?;
        }
        if cross && old.ftype == FileType::Directory && self.owns(old.ino) {
            // Its `..` changes: Linux wants write permission on it.
            let i = self.inode(old.ino)?;
            check(i.ftype, i.perm, i.uid, i.gid, who, MAY_WRITE)?;
        }
        if let Some(s) = self.shards.get_mut(&olddir) {
            s.remove(oldname);
        }
        if let Some(s) = self.shards.get_mut(&newdir) {
            s.insert(newname, old.ino, old.ftype);
        }
        self.track.changed(olddir, oldname);
        if target.is_some() {
            self.track.changed(newdir, newname);
        }
        let mut replaced = None;
        if let Some(t) = target {
            if t.ftype == FileType::Directory {
                self.drop_dir_shard(t.ino);
            }
            let here = self.owns(t.ino);
            if here {
                self.drop_link(t.ino);
            }
            replaced = Some((t.ino, t.ftype, here));
        }
        if cross {
            self.reparent(old, newdir);
        }
        self.touch_moved(old.ino);
        self.touch_dir(olddir);
        self.touch_dir(newdir);
        Ok(Reply::Renamed {
            moved: old.ino,
            ftype: old.ftype,
            replaced,
        })
    }

    /// One half of a cross-server `RENAME_EXCHANGE` (see
    /// `Request::Relink`): `(dir, name)` names `new.0` instead of `expect`.
    fn relink<'o>(
        &mut self,
        session: SessionId,
        who: &Caller,
        dir: InodeId,
        name: &[u8],
        new: (InodeId, FileType),
        expect: InodeId,
    ) -> R<'o> {
        check_name(name)?;
        if is_dot(name) {
            return Err(Errno::EINVAL);
        }
        self.entry_here(dir, name)?;
        self.dir_check(dir, who, MAY_WRITE | MAY_EXEC)?;
        let cur = self
            .shards
            .get(&dir)
            .and_then(|s| s.get(name))
            .ok_or(Errno::ENOENT)?;
        if cur.ino != expect {
            return Err(Errno::ESTALE);
        }
        if self.is_provisional(session, dir, name) {
            return Err(RETRY); // as in `rename`
        }
        if self.owns(new.0) && self.inode(new.0)?.ftype != new.1 {
            return Err(Errno::EINVAL);
        }
        self.sticky_ok(dir, cur.ino, who)?;
        if let Some(s) = self.shards.get_mut(&dir) {
            s.insert(name, new.0, new.1);
        }
        self.track.changed(dir, name);
        self.move_links.push(MoveLink {
            session,
            dir,
            name: name.to_vec(),
            ino: new.0,
            previous: Some((cur.ino, cur.ftype)),
        });
        self.touch_moved(new.0);
        self.touch_dir(dir);
        Ok(Reply::Ok)
    }

    /// A directory moved to `parent`: update its `..` if recorded here
    /// (otherwise the client sends `SetParent` to its home).
    fn reparent(&mut self, d: dir::Dent, parent: InodeId) {
        if d.ftype == FileType::Directory {
            if let Some(s) = self.shards.get_mut(&d.ino) {
                if d.ino.home() == self.cfg.index {
                    s.parent = Some(parent);
                }
            }
        }
    }

    fn touch_moved(&mut self, ino: InodeId) {
        if let Some(i) = self.inodes.get_mut(&ino) {
            i.ctime = now();
        }
    }

    fn readdir<'o>(
        &self,
        dir: InodeId,
        cookie: u64,
        max_bytes: u32,
        out: &'o mut Vec<u8>,
    ) -> R<'o> {
        if self.removed.contains(&dir) {
            return Err(Errno::ENOENT);
        }
        if self.owns(dir) && self.inode(dir)?.ftype != FileType::Directory {
            return Err(Errno::ENOTDIR);
        }
        let max = (max_bytes as usize).min(MAX_DIRENTS);
        out.clear();
        let shard = self.shards.get(&dir);
        let home = dir.home() == self.cfg.index;
        let mut full = false;
        if home && cookie < 1 {
            full = !push_dirent(out, dir.0, 1, libc::DT_DIR, b".", max);
        }
        if home && cookie < 2 && !full {
            let parent = if dir == ROOT {
                ROOT
            } else {
                shard.and_then(|s| s.parent).unwrap_or(dir)
            };
            full = !push_dirent(out, parent.0, 2, libc::DT_DIR, b"..", max);
        }
        if !full {
            if let Some(s) = shard {
                for (seq, name, d) in s.after(cookie) {
                    if !push_dirent(out, d.ino.0, seq, d.ftype.dirent_type(), name, max) {
                        full = true;
                        break;
                    }
                }
            }
        }
        if full && out.is_empty() {
            return Err(Errno::EINVAL); // buffer too small for one record
        }
        Ok(Reply::Dirents {
            data: out,
            end: !full,
        })
    }

    fn set_parent<'o>(&mut self, dir: InodeId, parent: InodeId) -> R<'o> {
        if dir.home() != self.cfg.index {
            return Err(Errno::EXDEV);
        }
        // An owned directory whose inode is gone is removed (`RemovedDirs`).
        if self.removed.contains(&dir) || (self.owns(dir) && !self.inodes.contains_key(&dir)) {
            return Err(Errno::ENOENT);
        }
        self.shards
            .entry(dir)
            .or_insert_with(|| Shard::new(None, &self.acct.names))
            .parent = Some(parent);
        Ok(Reply::Ok)
    }

    /// Three-phase rmdir, phase 1/2 (Hare §3.4.1). A directory already
    /// marked answers `RETRY`: the caller waits for the outcome of the rmdir
    /// under way (Hare: "operations are delayed until COMMIT or ABORT"),
    /// then sees `ENOENT` or tries itself. Never `EBUSY`: Linux has no such
    /// answer for the loser of an rmdir race.
    fn mark_rmdir<'o>(&mut self, session: SessionId, dir: InodeId) -> R<'o> {
        if self.removed.contains(&dir) {
            return Err(Errno::ENOENT);
        }
        if self.owns(dir) {
            match self.inode(dir)?.links {
                0 => return Err(Errno::ENOENT),
                1 => {}
                // A cross-server move holds a second name for the moment:
                // removing it now would let the move's new name outlive the
                // directory. Wait for the move (as Linux's rename and rmdir
                // exclude each other on the parent's lock).
                _ => return Err(RETRY),
            }
        }
        let s = self
            .shards
            .entry(dir)
            .or_insert_with(|| Shard::new(None, &self.acct.names));
        if s.marked {
            return Err(RETRY);
        }
        if !s.is_empty() {
            return Err(Errno::ENOTEMPTY);
        }
        s.marked = true;
        self.marks.insert(dir, session);
        Ok(Reply::Ok)
    }

    /// Three-phase rmdir, phase 3: commit drops the shard for good. Only
    /// the session holding the mark decides (`EINVAL` otherwise).
    fn finish_rmdir<'o>(&mut self, session: SessionId, dir: InodeId, commit: bool) -> R<'o> {
        if self.marks.get(&dir) != Some(&session) {
            return Err(Errno::EINVAL);
        }
        self.marks.remove(&dir);
        if commit {
            self.shards.remove(&dir);
            self.mark_removed(dir);
            self.track.dir_gone(dir);
        } else if let Some(s) = self.shards.get_mut(&dir) {
            s.marked = false;
        }
        Ok(Reply::Ok)
    }

    /// Is `(dir, name)` the provisional new name of a directory move by a
    /// session other than `session` (see `move_links`)?
    fn is_provisional(&self, session: SessionId, dir: InodeId, name: &[u8]) -> bool {
        self.move_links
            .iter()
            .any(|m| m.session != session && m.dir == dir && m.name == name)
    }

    /// A `Unref` (or an `Unlink` that dropped the link here) by `session`
    /// ends the move its directory `Ref` began.
    fn forget_move_ref(&mut self, session: SessionId, ino: InodeId) {
        if let Some(i) = self
            .move_refs
            .iter()
            .position(|&(s, x)| s == session && x == ino)
        {
            self.move_refs.swap_remove(i);
        }
    }

    /// An `Unlink` by `session` removed `(dir, name)` naming `ino`: if that
    /// was its own provisional name (an undone move) it is no longer
    /// pending; if it dropped a link here it ends a move's `Ref`.
    fn move_settled(
        &mut self,
        session: SessionId,
        dir: InodeId,
        name: &[u8],
        ino: InodeId,
        freed_here: bool,
    ) {
        self.move_links
            .retain(|m| !(m.session == session && m.dir == dir && m.name == name));
        if freed_here {
            self.forget_move_ref(session, ino);
        }
    }

    /// `session` died in the middle of namespace operations: release its
    /// rename lock, abort its rmdir marks (Hare §3.4.1 ABORT), remove the provisional new names of
    /// its unfinished directory moves and drop the extra links their `Ref`s
    /// took, so a dead client leaves the tree as before its move.
    fn abandon_namespace_ops(&mut self, session: SessionId) {
        if self.rename_lock == Some(session) {
            self.rename_lock = None;
        }
        let marked: Vec<InodeId> = self
            .marks
            .iter()
            .filter(|(_, s)| **s == session)
            .map(|(d, _)| *d)
            .collect();
        for dir in marked {
            self.marks.remove(&dir);
            if let Some(s) = self.shards.get_mut(&dir) {
                s.marked = false;
            }
        }
        let links: Vec<MoveLink> = {
            let (mine, rest) = std::mem::take(&mut self.move_links)
                .into_iter()
                .partition(|m| m.session == session);
            self.move_links = rest;
            mine
        };
        for m in links {
            let still = self
                .shards
                .get(&m.dir)
                .and_then(|s| s.get(&m.name))
                .is_some_and(|d| d.ino == m.ino);
            if !still {
                continue;
            }
            self.track.changed(m.dir, &m.name);
            match m.previous {
                // An unfinished exchange: the entry names its inode again.
                Some((prev, ftype)) => {
                    if let Some(s) = self.shards.get_mut(&m.dir) {
                        s.insert(&m.name, prev, ftype);
                    }
                }
                None => {
                    if let Some(s) = self.shards.get_mut(&m.dir) {
                        s.remove(&m.name);
                    }
                    if self.owns(m.ino) {
                        self.drop_link(m.ino);
                    }
                }
            }
        }
        let refs: Vec<InodeId> = self
            .move_refs
            .iter()
            .filter(|(s, _)| *s == session)
            .map(|(_, i)| *i)
            .collect();
        self.move_refs.retain(|(s, _)| *s != session);
        for ino in refs {
            self.drop_link(ino);
        }
    }

    // ---------------------------------------------------------------
    // inodes

    fn set_attr<'o>(
        &mut self,
        session: SessionId,
        who: &Caller,
        ino: InodeId,
        set: SetAttr,
    ) -> R<'o> {
        let has_w = self.has_writable_desc(session, ino);
        let i = self.inode(ino)?;
        // Validate everything first: a refused request changes nothing.
        if set.perm.is_some() && !who.owns(i.uid) {
            return Err(Errno::EPERM);
        }
        if let Some(u) = set.uid {
            if !who.has(Cred::CAP_CHOWN) && (u != i.uid || who.uid != i.uid) {
                return Err(Errno::EPERM);
            }
        }
        if let Some(g) = set.gid {
            if !who.has(Cred::CAP_CHOWN) && (who.uid != i.uid || (g != i.gid && !who.in_group(g))) {
                return Err(Errno::EPERM);
            }
        }
        if let Some(size) = set.size {
            match i.ftype {
                FileType::Regular => {}
                FileType::Directory => return Err(Errno::EISDIR),
                _ => return Err(Errno::EINVAL),
            }
            if size > MAX_FILE_SIZE {
                return Err(Errno::EFBIG);
            }
            if i.runs > 0 {
                return Err(Errno::ETXTBSY);
            }
            if !has_w {
                check(i.ftype, i.perm, i.uid, i.gid, who, MAY_WRITE)?;
            }
        }
        let explicit = matches!(set.atime, TimeSet::Set(_)) || matches!(set.mtime, TimeSet::Set(_));
        let any_time = set.atime != TimeSet::Omit || set.mtime != TimeSet::Omit;
        if explicit && !who.owns(i.uid) {
            return Err(Errno::EPERM);
        }
        if any_time
            && !explicit
            && !who.owns(i.uid)
            && check(i.ftype, i.perm, i.uid, i.gid, who, MAY_WRITE).is_err()
        {
            return Err(Errno::EACCES);
        }
        let t = now();
        let i = self.inodes.get_mut(&ino).ok_or(Errno::ENOENT)?;
        let mut changed = false;
        if set.uid.is_some() || set.gid.is_some() {
            i.uid = set.uid.unwrap_or(i.uid);
            i.gid = set.gid.unwrap_or(i.gid);
            if i.ftype != FileType::Directory {
                // chown clears set-id bits, even when done by root.
                i.perm = kill_priv(i.perm);
            }
            changed = true;
        }
        if let Some(p) = set.perm {
            let mut p = p & 0o7777;
            if !who.has(Cred::CAP_FSETID) && !who.in_group(i.gid) {
                p &= !libc::S_ISGID;
            }
            i.perm = p;
            changed = true;
        }
        if let Some(size) = set.size {
            i.truncate(&mut self.cache, size);
            i.mtime = t;
            if !who.has(Cred::CAP_FSETID) {
                i.perm = kill_priv(i.perm);
            }
            changed = true;
        }
        for (which, slot) in [(set.atime, &mut i.atime), (set.mtime, &mut i.mtime)] {
            match which {
                TimeSet::Omit => {}
                TimeSet::Now => *slot = t,
                TimeSet::Set(ts) => *slot = ts,
            }
        }
        if changed || any_time {
            i.ctime = t;
        }
        let access_changed = i.ftype == FileType::Directory
            && (set.perm.is_some() || set.uid.is_some() || set.gid.is_some());
        if access_changed {
            // Cached lookups in this directory skipped its search check:
            // every session drops them before this reply (Hare §3.7.1).
            let sessions = self.sessions.keys().copied();
            self.track.dir_access_changed(ino, sessions);
        }
        Ok(Reply::Attr(self.attr(ino)?))
    }

    fn access<'o>(&self, who: &Caller, ino: InodeId, mask: u32) -> R<'o> {
        if mask & !7 != 0 {
            return Err(Errno::EINVAL);
        }
        let i = self.inode(ino)?;
        if mask != 0 {
            check(i.ftype, i.perm, i.uid, i.gid, who, mask)?;
        }
        Ok(Reply::Ok)
    }

    // ---- data ----

    /// Reserve a read: extents of `[off, off + len)` clipped at EOF.
    fn read(
        &mut self,
        session: SessionId,
        desc: DescId,
        len: u64,
        offset: Option<u64>,
    ) -> Result<(u64, u64, Vec<Extent>), Errno> {
        let d = self.desc(session, desc)?;
        if !d.readable() {
            return Err(Errno::EBADF);
        }
        let (ino, noatime) = (d.ino, d.flags & libc::O_NOATIME as u32 != 0);
        let off = offset.unwrap_or(d.offset);
        if off > i64::MAX as u64 {
            return Err(Errno::EINVAL);
        }
        let i = self.inodes.get_mut(&ino).ok_or(Errno::EBADF)?;
        match i.ftype {
            FileType::Regular => {}
            FileType::Directory => return Err(Errno::EISDIR),
            _ => return Err(Errno::EINVAL),
        }
        let want = len.min(i.size.saturating_sub(off));
        let (extents, got) = i.extents(off, want);
        if got > 0 && !noatime {
            // relatime
            let t = now();
            if !older(i.mtime, i.atime) || !older(i.ctime, i.atime) || t.sec - i.atime.sec > 86_400
            {
                i.atime = t;
            }
        }
        if offset.is_none() {
            if let Some(d) = self.descs.get_mut(&desc) {
                d.offset = off + got;
            }
        }
        Ok((off, got, extents))
    }

    /// Reserve a write: allocate blocks, extend the size, honour
    /// `O_APPEND` atomically (the offset is chosen here, under the
    /// server's serial order). Short if the pool runs dry part-way.
    fn write(
        &mut self,
        session: SessionId,
        who: &Caller,
        desc: DescId,
        len: u64,
        offset: Option<u64>,
    ) -> Result<(u64, u64, Vec<Extent>), Errno> {
        let d = self.desc(session, desc)?;
        if !d.writable() {
            return Err(Errno::EBADF);
        }
        let ino = d.ino;
        let append = d.flags & libc::O_APPEND as u32 != 0;
        let shared_off = d.offset;
        let i = self.inodes.get_mut(&ino).ok_or(Errno::EBADF)?;
        if i.ftype != FileType::Regular {
            return Err(Errno::EINVAL);
        }
        let off = if append {
            i.size
        } else {
            offset.unwrap_or(shared_off)
        };
        if off > i64::MAX as u64 {
            return Err(Errno::EINVAL);
        }
        if len == 0 {
            return Ok((off, 0, vec![]));
        }
        if off >= MAX_FILE_SIZE {
            return Err(Errno::EFBIG);
        }
        // One reply covers at most MAX_EXTENTS blocks; the client loops.
        let len = len
            .min(MAX_FILE_SIZE - off)
            .min((MAX_EXTENTS as u64) * BS - off % BS);
        i.zero_past_eof(&mut self.cache, off);
        let first = off / BS;
        let backed = i.ensure(&mut self.cache, first, (off + len - 1) / BS);
        if backed == 0 {
            return Err(Errno::ENOSPC);
        }
        let avail = (off + len).min((first + backed) * BS) - off;
        let (extents, got) = i.extents(off, avail);
        if off + got > i.size {
            i.size = off + got;
        }
        let t = now();
        i.mtime = t;
        i.ctime = t;
        if !who.has(Cred::CAP_FSETID) && i.perm & (libc::S_ISUID | libc::S_ISGID) != 0 {
            i.perm = kill_priv(i.perm);
        }
        if offset.is_none() {
            if let Some(d) = self.descs.get_mut(&desc) {
                d.offset = off + got;
            }
        }
        Ok((off, got, extents))
    }

    /// Direct-cache ablation: copy granted extents out into `buf`.
    fn copy_out(&self, extents: &[Extent], buf: &mut [u8]) {
        let base = extents.first().map_or(0, |e| e.file_offset);
        for e in extents.iter().filter(|e| e.block != inode::HOLE) {
            self.walk(e, |block, in_block, at, n| {
                let dst = (at - base) as usize;
                if let Some(slice) = buf.get_mut(dst..dst + n) {
                    self.cache.store.read(block, in_block, slice);
                }
            });
        }
    }

    fn copy_in(&mut self, extents: &[Extent], data: &[u8]) {
        let base = extents.first().map_or(0, |e| e.file_offset);
        let mut writes = vec![];
        for e in extents.iter().filter(|e| e.block != inode::HOLE) {
            self.walk(e, |block, in_block, at, n| {
                writes.push((block, in_block, (at - base) as usize, n));
            });
        }
        for (block, in_block, src, n) in writes {
            if let Some(slice) = data.get(src..src + n) {
                self.cache.store.write(block, in_block, slice);
            }
        }
    }

    /// Visit the per-block pieces of an extent: `(block, offset in block,
    /// file offset, bytes)`.
    fn walk(&self, e: &Extent, mut f: impl FnMut(u32, usize, u64, usize)) {
        let mut pos = e.file_offset;
        let end = e.file_offset + e.len;
        let first_fb = e.file_offset / BS;
        while pos < end {
            let fb = pos / BS;
            let n = end.min((fb + 1) * BS) - pos;
            f(
                e.block + (fb - first_fb) as u32,
                (pos % BS) as usize,
                pos,
                n as usize,
            );
            pos += n;
        }
    }

    fn seek<'o>(&mut self, session: SessionId, desc: DescId, offset: i64, whence: u32) -> R<'o> {
        let d = self.desc(session, desc)?;
        if d.flags & libc::O_PATH as u32 != 0 {
            return Err(Errno::EBADF);
        }
        let i = self.inode(d.ino)?;
        let cur = d.offset as i64;
        let new = match whence as i32 {
            libc::SEEK_SET => Some(offset),
            libc::SEEK_CUR => cur.checked_add(offset),
            libc::SEEK_END => (i.size as i64).checked_add(offset),
            libc::SEEK_DATA | libc::SEEK_HOLE => {
                if offset < 0 {
                    return Err(Errno::ENXIO);
                }
                if i.ftype != FileType::Regular {
                    return Err(Errno::EINVAL);
                }
                Some(if whence as i32 == libc::SEEK_DATA {
                    i.seek_data(&self.cache, offset as u64)?
                } else {
                    i.seek_hole(&self.cache, offset as u64)?
                } as i64)
            }
            _ => return Err(Errno::EINVAL),
        };
        let new = match new {
            Some(n) if n >= 0 => n as u64,
            Some(_) => return Err(Errno::EINVAL),
            None => return Err(Errno::EOVERFLOW),
        };
        if let Some(d) = self.descs.get_mut(&desc) {
            d.offset = new;
        }
        Ok(Reply::Offset(new))
    }

    /// Drop one reference of `session`. Closing any descriptor of an inode
    /// releases the process's POSIX locks on it (Linux close semantics).
    /// If the client closes one of several fds of a description it keeps
    /// (no `Close` sent), it must send `SetLock` `F_UNLCK` for the whole
    /// file with owner `Process(session)` itself.
    fn close<'o>(&mut self, session: SessionId, desc: DescId) -> R<'o> {
        let d = self.desc_mut(session, desc)?;
        let ino = d.ino;
        if let Some(n) = d.refs.get_mut(&session) {
            *n -= 1;
            if *n == 0 {
                d.refs.remove(&session);
            }
        }
        let dead = d.refs.is_empty();
        if let Some(i) = self.inodes.get_mut(&ino) {
            let before = i.locks.len();
            locks::release(&mut i.locks, LockOwner::Process(session.0));
            self.acct.lock_records -= (before - i.locks.len()) as u64;
        }
        if dead {
            self.release_desc(desc);
        }
        Ok(Reply::Ok)
    }

    fn set_lock<'o>(
        &mut self,
        session: SessionId,
        desc: DescId,
        spec: &atoll_proto::LockSpec,
    ) -> R<'o> {
        let d = self.desc(session, desc)?;
        if d.flags & libc::O_PATH as u32 != 0 {
            return Err(Errno::EBADF);
        }
        let req = Lock::from_spec(spec)?;
        match req.owner {
            LockOwner::Description(x) | LockOwner::Flock(x) if x != desc => {
                return Err(Errno::EINVAL)
            }
            LockOwner::Process(_) | LockOwner::Description(_) => {
                if (req.kind == locks::RD && !d.readable())
                    || (req.kind == locks::WR && !d.writable())
                {
                    return Err(Errno::EBADF);
                }
            }
            LockOwner::Flock(_) => {}
        }
        let ino = d.ino;
        let i = self.inode(ino).map_err(|_| Errno::EBADF)?;
        if locks::conflict(&i.locks, &req).is_some() {
            return Err(Errno::EAGAIN);
        }
        // Past the limit of lock records a request that would add some
        // (a new range, or the far end of a lock it splits) is refused
        // with `ENOLCK` and changes nothing; one that does not (an unlock
        // of whole locks, a conversion) always succeeds.
        let i = self.inodes.get_mut(&ino).ok_or(Errno::EBADF)?;
        let before = i.locks.clone();
        locks::apply(&mut i.locks, req);
        let grown = i.locks.len().saturating_sub(before.len()) as u64;
        if grown > 0 && self.admit(limits::LOCKS, grown).is_err() {
            if let Some(i) = self.inodes.get_mut(&ino) {
                i.locks = before;
            }
            return Err(Errno::ENOLCK);
        }
        let after = self.inode(ino).map_or(0, |i| i.locks.len());
        self.acct.lock_records = self.acct.lock_records + after as u64 - before.len() as u64;
        Ok(Reply::Ok)
    }
}
