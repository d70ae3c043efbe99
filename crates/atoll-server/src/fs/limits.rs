//! Bounded metadata: what a program can make a file server hold, and the
//! limits that keep it from exhausting the host.
//!
//! Everything a sequence of system calls can grow is counted here, with
//! the errno Linux gives at its own limit:
//!
//! | resource | limit | past it |
//! |---|---|---|
//! | inodes (files, directories, symlinks, FIFOs, sockets, devices) | `--inodes`, per instance | `ENOSPC` (tmpfs `nr_inodes`) |
//! | names (directory entries) | as many as inodes, per instance | `ENOSPC` (tmpfs charges a hard link as an inode, `shmem_link`) |
//! | open file descriptions | per instance | `ENFILE` (Linux `fs.file-max`) |
//! | lock records | per instance | `ENOLCK` |
//! | extended attributes | 64 KiB per inode, a share of `--memory` per instance | `E2BIG` past 64 KiB (`XATTR_SIZE_MAX`), else `ENOSPC` |
//! | symlink and socket targets | 128 bytes or more take a buffer-cache block | `ENOSPC` (tmpfs keeps such targets in a page) |
//! | lookup-tracking records | per server | never fails: the oldest directory's records are evicted, its cachers told to forget |
//! | pending invalidations | delivered after every request | bounded by the tracking records plus one per session |
//! | removed-directory ids | owned: while the inode lives; others: the last `inodes` | never fails ([`RemovedDirs`]) |
//!
//! **Where the counts live.** Servers never message each other (Hare
//! §6.2.3), and a per-server share of the limit would make one server
//! refuse files while `df -i` shows room (all files of one plain directory
//! live on one server, Hare §3.4), the fault the block partition already
//! has. So each instance-wide count is one [`Gauge`] word in the control
//! memfd every server maps, and a server *reserves* from it before it
//! creates, as tmpfs reserves from one per-superblock count
//! (`shmem_reserve_inode`). One compare-exchange per creation, on a line
//! servers share; creations already cost a message.
//!
//! **Reserve, then settle.** A request that creates calls [`Accounts::admit`]
//! (reserve or refuse) before it changes anything. After every request the
//! server calls `settle` with what it holds now (inodes in its table, names
//! in its shards, descriptions, lock records, xattr bytes), which returns
//! unused reservations and charges or refunds whatever changed without one
//! (frees of every kind, the transient second name of a cross-server
//! rename). Anonymous pipes are not inodes of the file system (Linux keeps
//! them in pipefs, not in tmpfs's count); open descriptions and the
//! buffer-cache blocks of their rings bound them. So no free path needs to know about gauges,
//! and the gauges equal the sum of what servers hold after every reply.
//!
//! **Trust.** Clients map the control block too (doorbells) and are
//! trusted not to write it (Hare's single fault domain). A server does not
//! rely on it for its own safety: it also refuses to hold more than the
//! instance limit of any resource by itself, so a scribbled gauge can
//! cost at most one limit per server.

use std::cell::Cell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};

use super::ordered::{Map, Set};
use std::rc::Rc;

use atoll_msg::{Control, Gauge, GAUGES};
use atoll_proto::{Errno, InodeId, BLOCK_SIZE, MAX_TARGET};

use super::inode::Inode;
use super::FileServer;
use crate::store::BlockStore;

/// Gauge indices (in the control block) of the instance-wide counts.
pub const INODES: usize = atoll_msg::GAUGE_INODES;
pub const NAMES: usize = atoll_msg::GAUGE_NAMES;
pub const DESCRIPTIONS: usize = 2;
pub const LOCKS: usize = 3;
pub const XATTR_BYTES: usize = 4;
/// Counted resources, named as `atoll status` shows them.
pub const RESOURCES: [&str; 5] = [
    "inodes",
    "names",
    "open_descriptions",
    "locks",
    "xattr_bytes",
];
const _: () = assert!(RESOURCES.len() <= GAUGES);

pub use atoll_proto::XATTR_SIZE_MAX;
/// Targets shorter than this stay with the inode; longer ones take a
/// buffer-cache block (tmpfs's `SHORT_SYMLINK_LEN`).
pub const SHORT_TARGET: usize = 128;

/// The limits of one instance. Defaults follow `--memory` so that the
/// servers' metadata stays within a fixed share of it (see
/// [`Limits::for_memory`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Limits {
    /// Inodes, and also names (`--inodes`).
    pub inodes: u64,
    /// Open file descriptions.
    pub descriptions: u64,
    /// Lock records (POSIX, OFD and `flock`).
    pub locks: u64,
    /// Bytes of extended-attribute names and values.
    pub xattr_bytes: u64,
    /// Lookup-tracking records per server (Hare §3.7.2).
    pub tracked: u64,
}

/// Bytes of buffer cache per default inode: tmpfs's default `nr_inodes` is
/// half the number of 4 KiB pages.
pub const BYTES_PER_INODE: u64 = 8 * 1024;
/// Bytes of buffer cache per default open description: Linux's default
/// `fs.file-max` is one per 10 KiB of memory (`files_maxfiles_init`).
pub const BYTES_PER_DESCRIPTION: u64 = 10 * 1024;
/// Linux never sets `fs.file-max` below this (`NR_FILE`).
const MIN_DESCRIPTIONS: u64 = 8192;
/// Smallest default inode limit (a tiny instance still holds a tree).
const MIN_INODES: u64 = 1024;

impl Limits {
    /// Defaults for a buffer cache of `memory` bytes: one inode per 8 KiB
    /// (as tmpfs), one description and one lock record per 10 KiB (as
    /// Linux's `fs.file-max`, at least 8192), xattrs up to 1/16 of it, and
    /// as many tracking records as inodes (see `for_servers`).
    pub fn for_memory(memory: u64) -> Limits {
        let inodes = (memory / BYTES_PER_INODE).max(MIN_INODES);
        Limits::with_inodes(memory, inodes)
    }

    /// Defaults for `memory` with the inode limit set to `inodes`.
    pub fn with_inodes(memory: u64, inodes: u64) -> Limits {
        let descriptions = (memory / BYTES_PER_DESCRIPTION).max(MIN_DESCRIPTIONS);
        Limits {
            inodes,
            descriptions,
            locks: descriptions,
            xattr_bytes: (memory / 16).max(XATTR_SIZE_MAX as u64),
            tracked: inodes.max(MIN_INODES),
        }
    }

    /// The same limits for an instance of `servers` servers: tracking
    /// records are per server, so each keeps its share of the inode limit
    /// (names, which records track, are bounded instance-wide).
    pub fn for_servers(mut self, servers: usize) -> Limits {
        self.tracked = (self.tracked / servers.max(1) as u64).max(MIN_INODES);
        self
    }

    /// The limit of each gauge, by index.
    pub fn gauge_limits(&self) -> [u64; RESOURCES.len()] {
        [
            self.inodes,
            self.inodes,
            self.descriptions,
            self.locks,
            self.xattr_bytes,
        ]
    }

    /// Set the instance-wide limits in a fresh control block.
    pub fn install(&self, control: &Control) {
        for (i, l) in self.gauge_limits().into_iter().enumerate() {
            control.gauge(i).set_limit(l);
        }
    }
}

/// Where a server finds the instance-wide gauges.
pub trait Gauges {
    fn gauge(&self, i: usize) -> &Gauge;
    /// How much of gauge `i` server `server` has charged, kept where the
    /// server's death does not reach (`Control::charged`); `None` where
    /// the gauges die with the server anyway.
    fn charged(&self, _server: usize, _i: usize) -> Option<&AtomicU64> {
        None
    }
    /// Publish server `server`'s share of the free blocks where clients
    /// read it (`Control::publish_space`); nowhere for private gauges.
    fn publish_space(&self, _server: usize, _blocks: u64, _free_delta: i64) {}
    /// Publish how many watches server `server` holds
    /// (`Control::publish_watches`); nowhere for private gauges.
    fn publish_watches(&self, _server: usize, _watches: u64) {}
    /// Count one request served by `server` (`Control::count_served`);
    /// nowhere for private gauges.
    /// Returns the count after it (0: no count is kept for clients).
    fn count_served(&self, _server: usize) -> u64 {
        0
    }
}

impl Gauges for Control {
    fn gauge(&self, i: usize) -> &Gauge {
        Control::gauge(self, i)
    }
    fn charged(&self, server: usize, i: usize) -> Option<&AtomicU64> {
        (server < self.servers()).then(|| Control::charged(self, server, i))
    }
    fn publish_space(&self, server: usize, blocks: u64, free_delta: i64) {
        if server < self.servers() {
            Control::publish_space(self, server, blocks, free_delta);
        }
    }
    fn publish_watches(&self, server: usize, watches: u64) {
        if server < self.servers() {
            Control::publish_watches(self, server, watches);
        }
    }
    fn count_served(&self, server: usize) -> u64 {
        if server < self.servers() {
            Control::count_served(self, server)
        } else {
            0
        }
    }
}

/// Gauges in private memory: one server alone, or servers of a test that
/// share them through an `Rc`.
pub struct LocalGauges(Vec<Gauge>);

impl LocalGauges {
    pub fn new(limits: &Limits) -> LocalGauges {
        LocalGauges(limits.gauge_limits().into_iter().map(Gauge::new).collect())
    }
}

impl Gauges for LocalGauges {
    fn gauge(&self, i: usize) -> &Gauge {
        &self.0[i]
    }
}

/// One server's side of the counts (module docs: reserve, then settle).
///
/// **Charges survive the server.** Every move this server makes on a
/// gauge is mirrored in its own charge word of the control block
/// (`Gauges::charged`), which only it writes. A server process killed
/// half way through a request leaves the request's reservations in the
/// gauges, and its successor never makes them (the request is not in the
/// journal, or is replayed without taking anything); after the replay the
/// successor compares its charges with what it holds and gives back or
/// takes the difference ([`Accounts::recharge`]), so the gauges again
/// equal the sum of what servers hold. (A thread that panics gives back
/// its request's reservations from the request's partial tape instead,
/// [`Accounts::refund`]; both keep the charge words in step.)
pub struct Accounts {
    gauges: Rc<dyn Gauges>,
    /// This server's index (its charge words).
    server: usize,
    limits: [u64; RESOURCES.len()],
    /// What this server held at the last settle (charged to the gauges).
    accounted: [u64; RESOURCES.len()],
    /// Reserved by `admit` since the last settle.
    reserved: [u64; RESOURCES.len()],
    /// Directory entries in this server's shards, kept by the shards.
    pub names: Rc<Cell<u64>>,
    /// Lock records on inodes held here.
    pub lock_records: u64,
    /// Bytes of xattr names and values on inodes held here.
    pub xattr_bytes: u64,
}

/// What of [`Accounts`] is the server's state, for its snapshots
/// (`fs::image`); the rest is the instance's gauges and this server's
/// place in them, made again by whoever loads one.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct AccountsImage {
    accounted: [u64; RESOURCES.len()],
    reserved: [u64; RESOURCES.len()],
    names: u64,
    lock_records: u64,
    xattr_bytes: u64,
}

impl Accounts {
    pub fn image(&self) -> AccountsImage {
        AccountsImage {
            accounted: self.accounted,
            reserved: self.reserved,
            names: self.names.get(),
            lock_records: self.lock_records,
            xattr_bytes: self.xattr_bytes,
        }
    }

    /// Take the counts of `image`; the shards of the state it came with
    /// must count in [`Accounts::names`].
    pub fn restore(&mut self, image: AccountsImage) {
        self.accounted = image.accounted;
        self.reserved = image.reserved;
        self.names.set(image.names);
        self.lock_records = image.lock_records;
        self.xattr_bytes = image.xattr_bytes;
    }
    pub fn new(limits: &Limits, gauges: Rc<dyn Gauges>, server: usize) -> Accounts {
        Accounts {
            gauges,
            server,
            limits: limits.gauge_limits(),
            accounted: [0; RESOURCES.len()],
            reserved: [0; RESOURCES.len()],
            names: Rc::new(Cell::new(0)),
            lock_records: 0,
            xattr_bytes: 0,
        }
    }

    /// Reserve `n` units of resource `r`, of which this server holds
    /// `held` now; the errno Linux gives at that limit if there is no room.
    /// Taped (`tape`): a replay gets the live answer and takes nothing.
    pub fn admit(&mut self, r: usize, n: u64, held: u64) -> Result<(), Errno> {
        let mine = held + self.reserved[r] + n;
        let gauges = &self.gauges;
        let replaying = super::tape::replaying();
        let granted = mine <= self.limits[r]
            && super::tape::value(super::tape::Tag::GaugeTake, || {
                let ok = !replaying && gauges.gauge(r).try_take(n);
                u64::from(ok) | (r as u64) << 1 | n << 8
            }) & 1
                == 1;
        if !granted {
            return Err(match r {
                DESCRIPTIONS => Errno::ENFILE,
                LOCKS => Errno::ENOLCK,
                _ => Errno::ENOSPC,
            });
        }
        self.reserved[r] += n;
        if !replaying {
            self.charge(r, self.accounted[r] + self.reserved[r]);
        }
        Ok(())
    }

    /// This server's charge word of gauge `r` now says `total`.
    fn charge(&self, r: usize, total: u64) {
        if let Some(w) = self.gauges.charged(self.server, r) {
            w.store(total, Ordering::Relaxed);
        }
    }

    /// After a rebuild from the journal (nothing reserved): bring each
    /// gauge back to what this server holds, giving back what the lost
    /// server had charged beyond it (reservations of a request it died in)
    /// or taking what it holds beyond its charges; then charge exactly
    /// that. Returns the units given back (minus those taken), per gauge.
    pub fn recharge(&mut self, held: [u64; RESOURCES.len()]) -> [i64; RESOURCES.len()] {
        let mut moved = [0i64; RESOURCES.len()];
        for (r, now) in held.into_iter().enumerate() {
            let Some(w) = self.gauges.charged(self.server, r) else {
                continue;
            };
            let charged = w.load(Ordering::Relaxed);
            let g = self.gauges.gauge(r);
            if charged > now {
                g.give(charged - now);
            } else if charged < now {
                g.force_take(now - charged);
            }
            moved[r] = charged as i64 - now as i64;
            w.store(now, Ordering::Relaxed);
            self.accounted[r] = now;
            self.reserved[r] = 0;
        }
        moved
    }

    /// Whether `n` units of `r` would fit now (nothing reserved).
    pub fn room(&self, r: usize, n: u64) -> bool {
        let g = self.gauges.gauge(r);
        super::tape::flag(super::tape::Tag::GaugeRoom, || {
            g.used().saturating_add(n) <= g.limit()
        })
    }

    /// After a request: bring the gauges to what this server holds now.
    /// Hot path (every request): five comparisons, and an atomic only for
    /// a count that changed.
    pub fn settle(&mut self, held: [u64; RESOURCES.len()]) {
        // A replay rebuilds what the lost server held, which the gauges
        // still count: it moves no gauge.
        let replaying = super::tape::replaying();
        for (r, now) in held.into_iter().enumerate() {
            let charged = self.accounted[r] + self.reserved[r];
            let g = self.gauges.gauge(r);
            if !replaying && now > charged {
                g.force_take(now - charged);
                self.charge(r, now);
            } else if !replaying && now < charged {
                g.give(charged - now);
                self.charge(r, now);
            }
            self.accounted[r] = now;
            self.reserved[r] = 0;
        }
    }

    /// `statfs` file counts `(files, files_free)`: inodes, with names
    /// beyond one per inode (hard links) counted as tmpfs does.
    /// Give back reservations a request that died half way had made
    /// (`tape::taken`): the rebuilt server never made them.
    pub fn refund(&mut self, reserved: &[(usize, u64)]) {
        for &(r, n) in reserved {
            if r < RESOURCES.len() {
                self.gauges.gauge(r).give(n);
                if let Some(w) = self.gauges.charged(self.server, r) {
                    w.store(
                        w.load(Ordering::Relaxed).saturating_sub(n),
                        Ordering::Relaxed,
                    );
                }
            }
        }
    }

    /// Publish this server's share of the free blocks
    /// (`Gauges::publish_space`), so that `statfs` needs no message.
    pub fn publish_space(&self, blocks: u64, free_delta: i64) {
        self.gauges.publish_space(self.server, blocks, free_delta);
    }

    /// Publish how many watches this server holds
    /// (`Gauges::publish_watches`), so that a client may answer a listing
    /// at its end without a message when there are none.
    pub fn publish_watches(&self, watches: u64) {
        self.gauges.publish_watches(self.server, watches);
    }

    /// One more request served (`Gauges::count_served`); the count after.
    pub fn count_served(&self) -> u64 {
        self.gauges.count_served(self.server)
    }

    pub fn files(&self) -> (u64, u64) {
        let used = self
            .gauges
            .gauge(INODES)
            .used()
            .max(self.gauges.gauge(NAMES).used());
        let total = self.gauges.gauge(INODES).limit();
        (total, total.saturating_sub(used))
    }
}

/// Directories removed while this server held something of theirs: a
/// creation, link, `SetParent` or readdir in one answers `ENOENT` (a stale
/// handle must not bring a shard back, Hare §3.4.1).
///
/// Bounded: a directory owned here is remembered only while its inode
/// lives (open, or committed but not yet unlinked); once freed, its absence
/// from the inode table says the same, since ids are never reused. Others
/// (shards of distributed directories, homes of directories owned
/// elsewhere) are kept for the last `cap` removals; a creation through a
/// handle to a directory removed longer ago than that is not refused and
/// leaves an entry no path reaches (counted, so still bounded).
#[derive(serde::Serialize, serde::Deserialize)]
pub struct RemovedDirs {
    owned: Set<InodeId>,
    others: Set<InodeId>,
    order: VecDeque<InodeId>,
    cap: usize,
    /// The parent a removed directory had, kept by its home server while
    /// the directory is remembered: `..` of a removed directory that a
    /// process still holds (its cwd, an open descriptor) leads there, as
    /// Linux's `d_parent` of an unhashed dentry does.
    #[serde(default)]
    parents: Map<InodeId, InodeId>,
}

impl RemovedDirs {
    pub fn new(cap: u64) -> RemovedDirs {
        RemovedDirs {
            owned: Set::default(),
            others: Set::default(),
            order: VecDeque::new(),
            cap: usize::try_from(cap).unwrap_or(usize::MAX).max(1),
            parents: Map::default(),
        }
    }

    /// `dir`, remembered as removed, had `parent`.
    pub fn set_parent(&mut self, dir: InodeId, parent: InodeId) {
        if self.contains(&dir) {
            self.parents.insert(dir, parent);
        }
    }

    /// The parent removed directory `dir` had, if known here.
    pub fn parent(&self, dir: &InodeId) -> Option<InodeId> {
        self.parents.get(dir).copied()
    }

    pub fn contains(&self, dir: &InodeId) -> bool {
        self.owned.contains(dir) || self.others.contains(dir)
    }

    /// `dir` was removed; `owned` when this server owns its inode.
    pub fn insert(&mut self, dir: InodeId, owned: bool) {
        if owned {
            self.owned.insert(dir);
            return;
        }
        if self.others.insert(dir) {
            self.order.push_back(dir);
        }
        while self.others.len() > self.cap {
            match self.order.pop_front() {
                Some(old) => {
                    self.others.remove(&old);
                    self.parents.remove(&old);
                }
                None => break,
            }
        }
    }

    /// The inode of `dir`, owned here, is freed: its absence says it all.
    pub fn freed(&mut self, dir: InodeId) {
        self.owned.remove(&dir);
        if !self.others.contains(&dir) {
            self.parents.remove(&dir);
        }
    }

    /// Ids remembered now.
    pub fn len(&self) -> usize {
        self.owned.len() + self.others.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// `(resource, used, limit)` of every gauge, instance-wide (`atoll status`).
pub fn usage(gauges: &dyn Gauges) -> Vec<(String, u64, u64)> {
    RESOURCES
        .iter()
        .enumerate()
        .map(|(r, name)| {
            let g = gauges.gauge(r);
            (name.to_string(), g.used(), g.limit())
        })
        .collect()
}

/// Bytes an inode's extended attributes count for (name, NUL, value).
pub fn xattr_size(i: &Inode) -> u64 {
    i.xattrs
        .iter()
        .map(|(k, v)| (k.len() + 1 + v.len()) as u64)
        .sum()
}

impl<S: BlockStore> FileServer<S> {
    /// What this server holds now, by gauge index.
    pub(super) fn held(&self) -> [u64; RESOURCES.len()] {
        [
            (self.inodes.len().saturating_sub(self.pipes.anonymous.len())) as u64,
            self.acct.names.get(),
            self.descs.len() as u64,
            self.acct.lock_records,
            self.acct.xattr_bytes,
        ]
    }

    /// Reserve `n` units of resource `r` (module docs).
    pub(super) fn admit(&mut self, r: usize, n: u64) -> Result<(), Errno> {
        let held = self.held()[r];
        self.acct.admit(r, n, held)
    }

    /// After a rebuild from the journal: the gauges and this server's
    /// charges back to what it holds (`Accounts::recharge`). Returns the
    /// units given back per gauge (taken, if negative).
    pub fn recharge(&mut self) -> [i64; RESOURCES.len()] {
        let held = self.held();
        self.acct.recharge(held)
    }

    /// After every request and every session's end (module docs). Returns
    /// the server's count of served requests with this one in it (0 where
    /// none is kept: `Gauges::count_served`).
    pub(super) fn settle(&mut self) -> u64 {
        let held = self.held();
        self.acct.settle(held);
        // The buffer cache settles the same way (`blocks`).
        self.cache.settle();
        // Before the reply: a client's `statfs` after this request reads
        // what it did (`Control::publish_space`). A replay publishes
        // nothing until it is done, as `settle` above.
        if !super::tape::replaying() {
            let (blocks, free_delta) = self.cache.space();
            self.acct.publish_space(blocks, free_delta);
            // Before the reply too: once `inotify_add_watch` returned,
            // no client answers a listing's end without asking.
            self.acct.publish_watches(self.notify.watch_count());
        }
        // Every request moves it, a replayed one too: a client that kept
        // attributes across it asks again (`Control::count_served`).
        self.acct.count_served()
    }

    /// Remember that directory `dir` was removed (`RemovedDirs`): an
    /// owned one only while its inode lives.
    pub(super) fn mark_removed(&mut self, dir: InodeId) {
        if !self.owns(dir) {
            self.removed.insert(dir, false);
        } else if self.inodes.contains_key(&dir) {
            self.removed.insert(dir, true);
        }
    }

    /// [`Self::mark_removed`] for a directory whose shard here went,
    /// keeping the parent that shard recorded (the home's) for `..`.
    pub(super) fn shard_removed(&mut self, dir: InodeId, shard: Option<super::Shard>) {
        self.mark_removed(dir);
        if let Some(p) = shard.and_then(|s| s.parent) {
            self.removed.set_parent(dir, p);
        }
    }

    /// Store the target of a new symlink or socket: short ones with the
    /// inode, others in a buffer-cache block of their own (tmpfs keeps
    /// targets of `SHORT_SYMLINK_LEN` bytes or more in a page), so that
    /// long targets are paid for from `--memory` and refused with
    /// `ENOSPC` when it is full.
    pub(super) fn set_target(&mut self, ino: InodeId, target: &[u8]) -> Result<(), Errno> {
        if target.len() > MAX_TARGET {
            return Err(Errno::ENAMETOOLONG);
        }
        let block = if target.len() >= SHORT_TARGET {
            let b = self.cache.take().ok_or(Errno::ENOSPC)?;
            self.cache.store.write(b, 0, target);
            Some(b)
        } else {
            None
        };
        let Some(i) = self.inodes.get_mut(&ino) else {
            if let Some(b) = block {
                self.cache.release(b);
            }
            return Err(Errno::ENOENT);
        };
        match block {
            Some(b) => {
                // Block 0 of the map: freed with the inode, counted in
                // `st_blocks` as tmpfs counts the page.
                i.blocks.insert(0, b);
                i.target_len = target.len() as u32;
            }
            None => {
                i.target = target.to_vec();
                i.target_len = target.len() as u32;
            }
        }
        Ok(())
    }

    /// The target of a symlink or socket into `out`.
    pub(super) fn read_target(&self, i: &Inode, out: &mut Vec<u8>) {
        out.clear();
        let len = i.target_len as usize;
        match i.blocks.get(&0) {
            Some(&b) if len >= SHORT_TARGET => {
                out.resize(len.min(BLOCK_SIZE), 0);
                self.cache.store.read(b, 0, out);
            }
            _ => out.extend_from_slice(&i.target),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_follow_memory_like_tmpfs_and_file_max() {
        let l = Limits::for_memory(256 << 20);
        assert_eq!(l.inodes, 32768, "half the 4 KiB pages, as tmpfs");
        assert_eq!(l.descriptions, 26214, "one per 10 KiB, as fs.file-max");
        assert_eq!(Limits::for_memory(1 << 20).inodes, MIN_INODES);
        assert_eq!(Limits::for_memory(1 << 20).descriptions, MIN_DESCRIPTIONS);
        assert_eq!(Limits::with_inodes(256 << 20, 7).inodes, 7);
    }

    #[test]
    fn reservations_settle_to_what_is_held() {
        let limits = Limits::with_inodes(1 << 20, 3);
        let g = Rc::new(LocalGauges::new(&limits));
        let mut a = Accounts::new(&limits, g.clone(), 0);
        let mut b = Accounts::new(&limits, g.clone(), 1);
        a.admit(INODES, 1, 0).unwrap();
        a.admit(INODES, 1, 0).unwrap();
        b.admit(INODES, 1, 0).unwrap();
        assert_eq!(b.admit(INODES, 1, 1), Err(Errno::ENOSPC), "shared limit");
        // `a` made only one of its two: the other goes back.
        a.settle([1, 0, 0, 0, 0]);
        b.settle([1, 0, 0, 0, 0]);
        assert_eq!(g.gauge(INODES).used(), 2);
        // A free without a reservation is refunded at the next settle.
        a.settle([0, 0, 0, 0, 0]);
        assert_eq!(g.gauge(INODES).used(), 1);
        assert_eq!(
            a.admit(DESCRIPTIONS, 1, limits.descriptions),
            Err(Errno::ENFILE)
        );
        assert_eq!(a.admit(LOCKS, 1, limits.locks), Err(Errno::ENOLCK));
    }

    /// Gauges with charge words, as the control block keeps them.
    struct ChargedGauges(LocalGauges, [[AtomicU64; RESOURCES.len()]; 2]);

    impl Gauges for ChargedGauges {
        fn gauge(&self, i: usize) -> &Gauge {
            self.0.gauge(i)
        }
        fn charged(&self, server: usize, i: usize) -> Option<&AtomicU64> {
            Some(&self.1[server][i])
        }
    }

    #[test]
    fn a_successor_gives_back_what_a_server_killed_mid_request_had_reserved() {
        let limits = Limits::for_memory(1 << 20);
        let g = Rc::new(ChargedGauges(LocalGauges::new(&limits), Default::default()));
        let mut a = Accounts::new(&limits, g.clone(), 0);
        let mut b = Accounts::new(&limits, g.clone(), 1);
        a.admit(DESCRIPTIONS, 2, 0).unwrap();
        a.settle([0, 0, 2, 0, 0]);
        b.admit(DESCRIPTIONS, 1, 0).unwrap();
        b.settle([0, 0, 1, 0, 0]);
        // Server 0 reserves two more and dies before it settles (a kill
        // in the middle of an `Open`): the gauge still counts them.
        a.admit(DESCRIPTIONS, 1, 2).unwrap();
        a.admit(INODES, 1, 0).unwrap();
        drop(a);
        assert_eq!(g.gauge(DESCRIPTIONS).used(), 4);
        assert_eq!(g.gauge(INODES).used(), 1);
        // Its successor rebuilt the two it held, nothing else.
        let mut successor = Accounts::new(&limits, g.clone(), 0);
        let moved = successor.recharge([0, 0, 2, 0, 0]);
        assert_eq!(moved, [1, 0, 1, 0, 0]);
        assert_eq!(
            g.gauge(DESCRIPTIONS).used(),
            3,
            "2 of server 0, 1 of server 1"
        );
        assert_eq!(g.gauge(INODES).used(), 0);
        // Server 1 is untouched, and the successor goes on from there.
        successor.admit(DESCRIPTIONS, 1, 2).unwrap();
        successor.settle([0, 0, 3, 0, 0]);
        assert_eq!(g.gauge(DESCRIPTIONS).used(), 4);
        assert_eq!(g.1[0][DESCRIPTIONS].load(Ordering::Relaxed), 3);
        assert_eq!(g.1[1][DESCRIPTIONS].load(Ordering::Relaxed), 1);
        // A thread's refund keeps its charges in step: nothing to recharge.
        successor.admit(DESCRIPTIONS, 1, 3).unwrap();
        successor.refund(&[(DESCRIPTIONS, 1)]);
        assert_eq!(successor.recharge([0, 0, 3, 0, 0]), [0; RESOURCES.len()]);
        assert_eq!(g.gauge(DESCRIPTIONS).used(), 4);
    }

    #[test]
    fn removed_directories_are_remembered_within_bounds() {
        let mut r = RemovedDirs::new(3);
        let owned = InodeId(1);
        r.insert(owned, true);
        for i in 10..20 {
            r.insert(InodeId(i), false);
        }
        assert!(r.contains(&owned), "owned ids stay while their inode lives");
        assert!(r.contains(&InodeId(19)) && !r.contains(&InodeId(10)));
        assert_eq!(r.len(), 4);
        r.freed(owned);
        assert!(!r.contains(&owned));
    }

    #[test]
    fn a_server_never_holds_more_than_the_limit_whatever_the_gauge_says() {
        let limits = Limits::with_inodes(1 << 20, 3);
        let g = Rc::new(LocalGauges::new(&limits));
        let mut a = Accounts::new(&limits, g.clone(), 0);
        a.settle([3, 0, 0, 0, 0]);
        g.gauge(INODES).give(3); // scribbled to zero
        assert_eq!(a.admit(INODES, 1, 3), Err(Errno::ENOSPC));
    }
}
