//! Adaptive directories: a directory's mode (centralized on its home
//! server, or distributed over `hash(dir, name) % N`) changes while it is
//! in use (Hare §6.1.2, "Dynamic Directory Distribution"), by a hot-swap
//! after K42's (Appavoo ch. 6: forward, block, transfer, complete).
//!
//! **Where the mode lives.** Ids never change (`atoll_proto::InodeId`), so
//! the flag bit in a directory's id is only the mode it was made with
//! (epoch 0). Every completed swap adds one to the directory's *epoch*;
//! the home server is the authority on mode and epoch (`Request::DirMode`),
//! and every server the swap visited keeps the record too ([`DirState`]),
//! so each can tell whether a request reached the right server:
//! * a request about one name (`Lookup`, `Open`, `Link`, `Unlink`,
//!   `Rename`, …) is checked by `entry_here`: not this name's server under
//!   the current mode, or the directory is blocked → `Errno::EMODE`;
//! * a request about the whole directory whose set of servers depends on
//!   the mode (`ReadDir`, `MarkRmdir`) carries the epoch the client routed
//!   by; another epoch, or a block → `EMODE`;
//! * a name change at a server that does not own the directory carries
//!   its attributes (`Vouched`) and in them the epoch routed by; another
//!   → `EMODE` (`dir_check`). So the `Subdirs` the client then posts names
//!   the epoch the change was served in, and one of an older epoch is
//!   dropped: the swap since has recounted it.
//!
//! The client then asks the home server for the mode and sends again
//! (waiting while a swap is under way), so no request ever waits inside a
//! server and no swap waits for a client: nothing can deadlock.
//!
//! **Who drives the swap, and why a client.** Servers never message each
//! other (Hare §6.2.3: the client coordinates whatever spans servers), and
//! a server thread that waited for another server's reply could deadlock
//! with a server waiting for it. So a client coordinates every swap with
//! the steps of `AdaptStep`: an administrator's `setfattr -n
//! user.atoll.distributed`, or — with `--adaptive-dirs on` — a client the
//! home server's policy (`policy`) sent a `Notice::Adapt`.
//!
//! Life cycle of one swap (K42's phases; the home server `H` is the
//! directory's root object, each server's shard a representative):
//!
//! ```text
//!  H: Begin ─▶ others: Block ─▶ all: Export→Import ─▶ others: Complete ─▶ H: Complete
//!  (forward+block at H)  (block)    (transfer, copy)     (drop moved, publish, unblock)
//! ```
//!
//! *Forward* needs no wait here: a server applies one message at a time, so
//! the requests it served before `Begin`/`Block` are finished (K42's
//! quiescence is free). *Block* answers `EMODE` instead of queueing, and
//! drops every cached lookup of the directory's entries (the entries move;
//! Hare: "the client caches need to be cleared"). *Transfer* copies; the
//! source drops its copies only at *Complete*, so a coordinator that dies
//! part-way loses nothing: its swap is marked orphaned, and the next client
//! that asks the home server for the mode resumes it (`Begin{resume}`;
//! every step is idempotent). *Cancel* gives up before `Complete`.
//!
//! Readdir cookies: an entry keeps its cookie when it moves, and while a
//! directory is distributed by a swap each shard hands out cookies of its
//! own residue (`Shard::stride`) above the swap's `base_seq`, so cookies are
//! unique in the whole directory in both modes. The client reads such a
//! directory by merging all shards in cookie order, so a listing resumed
//! across any number of swaps returns every entry that stayed exactly once.
//!
//! Limits: a directory made distributed (its id's flag) keeps its mode;
//! one whose inode and entries live on different servers is not swapped
//! (`ENOTSUP`); a swap waits (`EBUSY`) while an rmdir marked the directory
//! or a cross-server move holds a provisional name in it.

use super::*;
use atoll_proto::{entry_server_in, pack_moved, parse_moved, AdaptStep, ModeInfo, SwappedDir};

pub mod policy;
pub mod spare;

/// A directory's mode as this server knows it, kept once a swap touched it.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct DirState {
    pub distributed: bool,
    pub epoch: u32,
    pub swap: Option<Swap>,
    /// Servers its names spread over while `distributed` (the member
    /// count at the swap that spread it; `ModeInfo::width`).
    #[serde(default)]
    pub width: u32,
}

/// A swap under way (the directory is blocked here).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Swap {
    pub target: bool,
    /// Width of the target mode when `target` is distributed: the member
    /// count when the swap began, so a swap reaches members that joined
    /// since the directory was last spread.
    #[serde(default)]
    pub width: u32,
    pub epoch: u32,
    pub coordinator: SessionId,
    pub base_seq: u64,
    pub orphaned: bool,
    /// Names imported here by this swap (dropped again by `Cancel`).
    pub imported: Vec<Vec<u8>>,
}

/// This server's records of adapted directories and its counters.
#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Adapt {
    pub dirs: Map<InodeId, DirState>,
    /// Swaps completed here as home server.
    pub swaps: u64,
    /// Swaps begun here as home server, and ones cancelled.
    pub begun: u64,
    pub cancelled: u64,
    /// Requests answered `EMODE` (stale route or blocked).
    pub stale: u64,
    pub policy: policy::Policy,
    /// Swaps the policy asked clients for: `(session, dir, distributed)`.
    pub notices: Vec<(SessionId, InodeId, bool)>,
}

impl Adapt {
    /// Mode, epoch and whether a swap blocks `dir` here.
    pub fn mode(&self, dir: InodeId) -> (bool, u32, bool) {
        match self.dirs.get(&dir) {
            Some(d) => (d.distributed, d.epoch, d.swap.is_some()),
            None => (dir.is_distributed(), 0, false),
        }
    }

    /// Is `dir` distributed now (for `nlink` and `Subdirs`)?
    pub fn distributed(&self, dir: InodeId) -> bool {
        self.mode(dir).0
    }

    /// The width `dir`'s names are routed by now (0: centralized);
    /// `members` for a distributed id that records none (tests' ids).
    pub fn width(&self, dir: InodeId, members: usize) -> usize {
        let recorded = |w: usize| if w == 0 { members } else { w };
        match self.dirs.get(&dir) {
            Some(d) if d.distributed => recorded(d.width as usize),
            Some(_) => 0,
            None if dir.is_distributed() => recorded(dir.width()),
            None => 0,
        }
    }

    /// A request about the whole of `dir` routed by `epoch`: `EMODE` if
    /// that is not the current epoch or a swap blocks the directory.
    pub fn check_epoch(&mut self, dir: InodeId, epoch: u32) -> Result<(), Errno> {
        let (_, now, blocked) = self.mode(dir);
        if blocked || now != epoch {
            self.stale += 1;
            return Err(Errno::EMODE);
        }
        Ok(())
    }

    /// Names distributed by adaptation among directories homed on `here`.
    pub fn adapted(&self, here: usize) -> Vec<InodeId> {
        let mut v: Vec<InodeId> = self
            .dirs
            .iter()
            .filter(|(d, s)| d.home() == here && s.distributed && !d.is_distributed())
            .map(|(d, _)| *d)
            .collect();
        v.sort();
        v
    }

    /// Directories homed on `here` that swapped at least once or are
    /// swapping, those swapped most first, at most `MAX_SWAPPED_DIRS`.
    pub fn swapped_dirs(&self, here: usize) -> Vec<SwappedDir> {
        let mut v: Vec<SwappedDir> = self
            .dirs
            .iter()
            .filter(|(d, s)| d.home() == here && (s.epoch > 0 || s.swap.is_some()))
            .map(|(d, s)| SwappedDir {
                ino: d.0,
                distributed: s.distributed,
                swaps: s.epoch,
                swapping: s.swap.is_some(),
            })
            .collect();
        v.sort_by(|a, b| b.swaps.cmp(&a.swaps).then(a.ino.cmp(&b.ino)));
        v.truncate(atoll_proto::MAX_SWAPPED_DIRS);
        v
    }

    /// The coordinator of swaps under way died: mark them for resumption.
    pub fn session_closed(&mut self, session: SessionId) {
        for d in self.dirs.values_mut() {
            if let Some(s) = d.swap.as_mut().filter(|s| s.coordinator == session) {
                s.orphaned = true;
            }
        }
    }

    pub fn counters(&self) -> [(&'static str, u64); 4] {
        [
            ("adapt.swaps", self.swaps),
            ("adapt.begun", self.begun),
            ("adapt.cancelled", self.cancelled),
            ("adapt.stale_routes", self.stale),
        ]
    }
}

/// The directory a namespace request works in, for the policy.
pub fn namespace_dir(req: &Request<'_>) -> Option<InodeId> {
    use Request as Q;
    match req {
        Q::Lookup { dir, .. }
        | Q::Open { dir, .. }
        | Q::MakeNode { dir, .. }
        | Q::Link { dir, .. }
        | Q::Unlink { dir, .. }
        | Q::Rename { olddir: dir, .. } => Some(*dir),
        _ => None,
    }
}

impl<S: BlockStore> FileServer<S> {
    /// Let the policy move directories homed here between modes
    /// (`--adaptive-dirs on`, Hare §6.1.2).
    /// Its thresholds are the defaults or `ATOLL_ADAPT_POLICY`'s.
    pub fn set_adaptive(&mut self, on: bool) {
        self.adapt.policy.on = on;
        if on {
            self.adapt.policy.limits = policy::Thresholds::from_env();
        }
    }

    /// Swaps the policy asks sessions to coordinate (`Notice::Adapt`, sent
    /// by the server loop with the invalidations): `(session, dir, mode)`.
    pub fn take_adapt_notices(&mut self) -> Vec<(SessionId, InodeId, bool)> {
        std::mem::take(&mut self.adapt.notices)
    }

    /// The policy's view of one namespace request on `dir` (home server).
    pub(super) fn adapt_observe(&mut self, session: SessionId, dir: InodeId, now: Instant) {
        if dir.home() != self.cfg.index || dir.is_distributed() || dir.owner() != dir.home() {
            return;
        }
        let (distributed, _, blocked) = self.adapt.mode(dir);
        if blocked {
            return;
        }
        // Distributed, the home shard holds about 1/N of the entries.
        let here = self.shards.get(&dir).map_or(0, |s| s.len());
        let entries = if distributed {
            here * self.adapt.width(dir, self.cfg.nservers).max(1)
        } else {
            here
        };
        // Only directories big enough to swap are watched, so the policy
        // keeps no state for the many small ones.
        if !distributed && entries < self.adapt.policy.limits.min_entries {
            return;
        }
        if let Some(want) = self
            .adapt
            .policy
            .observe(dir, distributed, entries, session, now)
        {
            self.adapt.notices.push((session, dir, want));
        }
    }

    /// Entries of `dir` named `name` live here under the directory's
    /// current mode, and no swap blocks it. `EMODE` for an adapted
    /// directory (the client refreshes its idea of the mode), `EXDEV` for
    /// a plain routing error.
    pub(super) fn entry_here(&self, dir: InodeId, name: &[u8]) -> Result<(), Errno> {
        let (_, _, blocked) = self.adapt.mode(dir);
        let adapted = self.adapt.dirs.contains_key(&dir);
        if blocked {
            return Err(Errno::EMODE);
        }
        let width = self.adapt.width(dir, self.cfg.nservers);
        if entry_server_in(dir, width, name) == self.cfg.index {
            Ok(())
        } else if adapted {
            Err(Errno::EMODE)
        } else {
            Err(Errno::EXDEV)
        }
    }

    /// A removed directory's record goes with it.
    pub(super) fn adapt_forget(&mut self, dir: InodeId) {
        self.adapt.dirs.remove(&dir);
        self.adapt.policy.forget(dir);
    }

    /// An rmdir by one `Unlink` of directory `child` (its entries all on
    /// its home, this server) is wrong once a swap spread it or while one
    /// moves it: `EMODE`, and the client looks at the child's mode again.
    /// A child the client marked everywhere (Hare §3.4.1) is fine.
    pub(super) fn child_spread(&self, child: InodeId) -> Result<(), Errno> {
        let Some(st) = self.adapt.dirs.get(&child) else {
            return Ok(());
        };
        let marked = self.shards.get(&child).is_some_and(|s| s.marked);
        // With one server every entry of a spread directory is here too:
        // this server's emptiness check is the whole answer.
        let spread = st.distributed && st.width != 1 && self.cfg.nservers > 1;
        if st.swap.is_some() || (spread && !marked) {
            return Err(Errno::EMODE);
        }
        Ok(())
    }

    /// `Request::DirMode` at the home server.
    pub(super) fn dir_mode<'o>(&self, dir: InodeId) -> R<'o> {
        if dir.home() != self.cfg.index {
            return Err(Errno::EINVAL);
        }
        if self.removed.contains(&dir) {
            return Err(Errno::ENOENT);
        }
        if self
            .inodes
            .get(&dir)
            .is_some_and(|i| i.ftype != FileType::Directory)
        {
            return Err(Errno::ENODATA); // `getxattr` falls back to the stored one
        }
        Ok(Reply::DirMode(self.mode_info(dir)))
    }

    fn mode_info(&self, dir: InodeId) -> ModeInfo {
        match self.adapt.dirs.get(&dir) {
            Some(DirState {
                swap: Some(s),
                epoch,
                distributed,
                width,
            }) => ModeInfo {
                distributed: *distributed,
                epoch: *epoch,
                swapping: true,
                orphaned: s.orphaned,
                base_seq: s.base_seq,
                width: *width,
            },
            Some(d) => ModeInfo {
                distributed: d.distributed,
                epoch: d.epoch,
                width: d.width,
                ..ModeInfo::default()
            },
            None => ModeInfo {
                distributed: dir.is_distributed(),
                width: self.adapt.width(dir, self.cfg.nservers) as u32,
                ..ModeInfo::default()
            },
        }
    }

    /// One step of a swap of `dir` (`AdaptStep`), from `session`.
    pub(super) fn adapt_step<'o>(
        &mut self,
        session: SessionId,
        who: &Caller,
        dir: InodeId,
        step: AdaptStep<'_>,
        out: &'o mut Vec<u8>,
    ) -> R<'o> {
        if self.removed.contains(&dir) {
            return Err(Errno::ENOENT);
        }
        match step {
            AdaptStep::Begin {
                distributed,
                resume,
                width,
            } => self.adapt_begin(session, who, dir, (distributed, width), resume),
            AdaptStep::Block {
                epoch,
                distributed,
                base_seq,
                width,
            } => self.adapt_block(session, dir, epoch, (distributed, width), base_seq),
            AdaptStep::Export { epoch, after } => self.adapt_export(dir, epoch, after, out),
            AdaptStep::Import { epoch, data } => self.adapt_import(dir, epoch, data),
            AdaptStep::Complete { epoch } => self.adapt_complete(dir, epoch),
            AdaptStep::Cancel { epoch } => self.adapt_cancel(dir, epoch),
        }
    }

    /// Begin (home server): check the directory may swap, block it here,
    /// drop cached lookups of its entries.
    fn adapt_begin<'o>(
        &mut self,
        session: SessionId,
        who: &Caller,
        dir: InodeId,
        (target, width): (bool, u32),
        resume: bool,
    ) -> R<'o> {
        if dir.home() != self.cfg.index {
            return Err(Errno::EINVAL);
        }
        if !self.owns(dir) {
            return Err(Errno::ENOTSUP); // inode and entries apart
        }
        let i = self.inode(dir)?;
        if i.ftype != FileType::Directory {
            return Err(Errno::ENOTDIR);
        }
        // As any other extended attribute of the directory: its owner
        // (or a capable caller) decides.
        if who.uid != i.uid && who.caps & Cred::CAP_FOWNER == 0 {
            return Err(Errno::EPERM);
        }
        if let Some(st) = self.adapt.dirs.get_mut(&dir) {
            if let Some(s) = st.swap.as_mut() {
                if !(resume && s.orphaned) && s.coordinator != session {
                    return Err(Errno::EBUSY);
                }
                s.coordinator = session;
                s.orphaned = false;
                let info = ModeInfo {
                    distributed: s.target,
                    epoch: s.epoch,
                    swapping: true,
                    orphaned: false,
                    base_seq: s.base_seq,
                    width: s.width,
                };
                return Ok(Reply::DirMode(info));
            }
        }
        let (now, epoch, _) = self.adapt.mode(dir);
        if now == target || resume {
            return Ok(Reply::DirMode(self.mode_info(dir)));
        }
        if dir.is_distributed() {
            return Err(Errno::ENOTSUP); // made distributed: stays so
        }
        self.swap_refused(dir)?;
        let base_seq = self
            .shards
            .get(&dir)
            .map_or(dir::FIRST_SEQ, |s| s.next_cookie());
        // Spread over every member the coordinator saw (Hare §6.1.1): this
        // is how a directory made before members joined reaches them. At
        // least the home server; never past the ids' room.
        let width = match target {
            true => width.clamp(dir.home() as u32 + 1, InodeId::MAX_WIDTH as u32),
            false => 0,
        };
        self.block_here(session, dir, epoch + 1, (target, width), base_seq);
        self.adapt.begun += 1;
        Ok(Reply::DirMode(ModeInfo {
            distributed: target,
            epoch: epoch + 1,
            swapping: true,
            orphaned: false,
            base_seq,
            width,
        }))
    }

    /// `EBUSY` while something the swap cannot move is under way here:
    /// an rmdir's mark, or a cross-server move's provisional name.
    fn swap_refused(&self, dir: InodeId) -> Result<(), Errno> {
        let marked = self.shards.get(&dir).is_some_and(|s| s.marked);
        let provisional = self.move_links.iter().any(|m| m.dir == dir);
        if marked || provisional {
            return Err(Errno::EBUSY);
        }
        Ok(())
    }

    fn block_here(
        &mut self,
        session: SessionId,
        dir: InodeId,
        epoch: u32,
        (target, width): (bool, u32),
        base: u64,
    ) {
        let (distributed, old, _) = self.adapt.mode(dir);
        let now = self.adapt.width(dir, self.cfg.nservers) as u32;
        let st = self.adapt.dirs.entry(dir).or_insert(DirState {
            distributed,
            epoch: old,
            swap: None,
            width: now,
        });
        st.swap = Some(Swap {
            target,
            width,
            epoch,
            coordinator: session,
            base_seq: base,
            orphaned: false,
            imported: vec![],
        });
        // The entries will move: no cached lookup of them may outlive the
        // swap (Hare §6.1.2). Nothing new is cached while blocked.
        self.track.dir_gone(dir);
    }

    /// Block (every other server).
    fn adapt_block<'o>(
        &mut self,
        session: SessionId,
        dir: InodeId,
        epoch: u32,
        target: (bool, u32),
        base: u64,
    ) -> R<'o> {
        if let Some(s) = self.adapt.dirs.get_mut(&dir).and_then(|d| d.swap.as_mut()) {
            if s.epoch != epoch {
                return Err(Errno::EBUSY);
            }
            s.coordinator = session; // a resumed swap blocks again
            return Ok(Reply::Ok);
        }
        let (_, now, _) = self.adapt.mode(dir);
        if now >= epoch {
            return Ok(Reply::Ok); // completed here already (resumed swap)
        }
        self.swap_refused(dir)?;
        self.block_here(session, dir, epoch, target, base);
        Ok(Reply::Ok)
    }

    /// The swap of `dir` under way here, if its epoch is `epoch`.
    fn swap_of(&self, dir: InodeId, epoch: u32) -> Option<&Swap> {
        self.adapt
            .dirs
            .get(&dir)
            .and_then(|d| d.swap.as_ref())
            .filter(|s| s.epoch == epoch)
    }

    /// Transfer, source side: entries here that belong on another server
    /// under the new mode, after cookie `after`, as many as fit.
    fn adapt_export<'o>(
        &self,
        dir: InodeId,
        epoch: u32,
        after: u64,
        out: &'o mut Vec<u8>,
    ) -> R<'o> {
        out.clear();
        let Some(swap) = self.swap_of(dir, epoch) else {
            // Completed here already: nothing is left to move.
            return match self.adapt.mode(dir).1 >= epoch {
                true => Ok(Reply::Exported {
                    data: out,
                    next: None,
                }),
                false => Err(Errno::EINVAL),
            };
        };
        let (width, here) = (swap.route_width(), self.cfg.index);
        let mut next = None;
        if let Some(s) = self.shards.get(&dir) {
            for (seq, name, d) in s.after(after) {
                if entry_server_in(dir, width, name) == here {
                    continue;
                }
                if out.len() + atoll_proto::moved_len(name) > MAX_DIRENTS {
                    next = Some(seq - 1);
                    break;
                }
                pack_moved(out, seq, d.ino, d.ftype, name);
            }
        }
        Ok(Reply::Exported { data: out, next })
    }

    /// Transfer, destination side: insert moved entries with their cookies.
    fn adapt_import<'o>(&mut self, dir: InodeId, epoch: u32, data: &[u8]) -> R<'o> {
        if self.swap_of(dir, epoch).is_none() {
            return Err(Errno::EINVAL);
        }
        let names = &self.acct.names;
        let shard = self
            .shards
            .entry(dir)
            .or_insert_with(|| Shard::new(None, names));
        let mut added = vec![];
        for (seq, ino, ftype, name) in parse_moved(data) {
            if shard.insert_moved(name, ino, ftype, seq) {
                added.push(name.to_vec());
            }
        }
        // Records were dropped at Block and nothing is recorded while
        // blocked; the names appearing here invalidate all the same, so
        // no cached absence can outlive them whatever the order.
        for name in &added {
            self.track.changed(dir, name);
        }
        if let Some(s) = self.adapt.dirs.get_mut(&dir).and_then(|d| d.swap.as_mut()) {
            s.imported.extend(added);
        }
        Ok(Reply::Ok)
    }

    /// Complete: drop the entries that moved away, publish the new mode,
    /// unblock. On the home server (the owner) the directory's subdirectory
    /// count, its `nlink`, stays whole.
    fn adapt_complete<'o>(&mut self, dir: InodeId, epoch: u32) -> R<'o> {
        let Some(swap) = self.swap_of(dir, epoch).cloned() else {
            return match self.adapt.mode(dir).1 >= epoch {
                true => Ok(Reply::Ok),
                false => Err(Errno::EINVAL),
            };
        };
        let (width, here) = (swap.route_width(), self.cfg.index);
        let owner = self.owns(dir);
        let names = &self.acct.names;
        let s = self
            .shards
            .entry(dir)
            .or_insert_with(|| Shard::new(None, names));
        let total = s.subdirs;
        let gone: Vec<Vec<u8>> = s
            .after(0)
            .filter(|(_, name, _)| entry_server_in(dir, width, name) != here)
            .map(|(_, name, _)| name.to_vec())
            .collect();
        for name in &gone {
            s.remove(name);
        }
        if swap.target {
            // Cookies stride by the width; a member past it holds none.
            s.stride = (here < width).then_some((width as u64, here as u64));
            s.raise_cookies(swap.base_seq);
            if owner {
                s.subdirs = total;
            }
        } else {
            s.stride = None;
            s.subdirs = s.count_subdirs();
        }
        let st = self.adapt.dirs.get_mut(&dir).expect("swap_of found it");
        st.distributed = swap.target;
        st.width = swap.width;
        st.epoch = epoch;
        st.swap = None;
        if dir.home() == here {
            self.adapt.swaps += 1;
            self.adapt.policy.swapped(dir, swap.target);
        }
        Ok(Reply::Ok)
    }

    /// Cancel: the old mode stays; entries imported here go again.
    fn adapt_cancel<'o>(&mut self, dir: InodeId, epoch: u32) -> R<'o> {
        let Some(swap) = self.swap_of(dir, epoch).cloned() else {
            return Ok(Reply::Ok);
        };
        if let Some(s) = self.shards.get_mut(&dir) {
            for name in &swap.imported {
                s.remove(name);
            }
        }
        let st = self.adapt.dirs.get_mut(&dir).expect("swap_of found it");
        st.swap = None;
        if dir.home() == self.cfg.index {
            self.adapt.cancelled += 1;
        }
        Ok(Reply::Ok)
    }
}

impl Swap {
    /// The width the swap routes names by (0: to centralized).
    pub fn route_width(&self) -> usize {
        match self.target {
            true => self.width.max(1) as usize,
            false => 0,
        }
    }
}
