//! Directory-lookup cache with server invalidations (Hare §3.7.1-3.7.2).
//!
//! The cache maps `(directory, name)` to the `(inode, type)` a `Lookup`
//! answered. The server holding the entry remembers that this session
//! cached it and, when the entry is removed or replaced, puts a
//! [`Notice::Invalidate`] into one of the session's inboxes *before* it
//! replies to the operation that changed the entry. Delivery is atomic, so
//! a lookup that drains every inbox of the session before it trusts the
//! cache can never use an entry removed before the lookup started: the
//! notice is already in an inbox.
//!
//! Rules that keep every use correct:
//! * [`DirCache::get`] drains all inboxes of the session (every lane, every
//!   server) and consults the map under one lock hold;
//! * a lookup reads [`DirCache::generation`] before it sends `Lookup`, and
//!   [`DirCache::insert`] stores the answer only if no notice was processed
//!   since (a notice for this very entry may have been drained by another
//!   thread between the reply and the insertion);
//! * a full inbox (the server raised the channel's overflow flag) or an
//!   undecodable notice flushes the whole cache;
//! * the lock is only ever *tried*: a thread (or a signal handler that
//!   interrupted the holder) that finds it busy treats the lookup as a miss,
//!   so nothing ever waits for it;
//! * `.` and `..` are never cached;
//! * a forked child starts empty (the server tracks sessions, and the child
//!   is a new session), as does a new image after `execve`.
//!
//! Absent names (unless `--without negative-lookups`): a `Lookup`, or an
//! `Open` without `O_CREAT`, answered `ENOENT` is kept as an absent entry
//! ([`DirCache::insert_absent`]), under the same rules, and answered
//! `ENOENT` by the caller without a message ([`Hit::Absent`]). The server
//! that answered recorded the session for `(dir, name)` and, before its
//! reply to anything that makes the name exist (create, `mknod`, `mkdir`,
//! `symlink`, socket bind, link, rename onto it, entries moved by a
//! directory swap), sends the same [`Notice::Invalidate`] it sends when an
//! entry goes (server `track.rs`). Only lookups trust an absent entry:
//! creating calls (`O_CREAT`, `mkdir`, `link`, …) still go to the server,
//! which decides; `EEXIST` comes only from an entry that exists.
//!
//! Search permission (Hare §3.7.1): a hit skips the server's check that
//! the caller may search the directory, which the server made when the
//! entry was looked up. When a directory's mode or owner changes, its
//! owner server sends every session an [`Notice::Invalidate`] with an
//! empty name, which drops every cached entry of that directory before the
//! `chmod`/`chown` returns; the next lookup asks the server again. The same
//! notice drops the directory's attributes kept for requests to servers
//! that do not own it (write permission, sticky bit, set-group-id;
//! `dirperm.rs`).

use crate::fixedhash::Map;
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use atoll_msg::ClientChannel;
use atoll_proto::{name_hash, FileType, InodeId, Notice, Vouched};

use crate::counters;

/// Entries kept before the cache starts over (bounds memory; a flush is
/// always correct).
const MAX_ENTRIES: usize = 64 * 1024;

struct Ent {
    name: Box<[u8]>,
    /// What the name is bound to; `None`: no such entry.
    found: Option<(InodeId, FileType)>,
}

/// A cached answer to a lookup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hit {
    /// The name is bound to this inode of this type.
    Entry(InodeId, FileType),
    /// No such entry (`ENOENT`).
    Absent,
}

impl Hit {
    /// The entry, or `ENOENT` for an absent name.
    pub fn entry(self) -> Result<(InodeId, FileType), i32> {
        match self {
            Hit::Entry(ino, ftype) => Ok((ino, ftype)),
            Hit::Absent => Err(libc::ENOENT),
        }
    }
}

/// Counters of one cache (tests; `counters` reports process totals).
#[cfg(test)]
#[derive(Default, Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheCounters {
    pub hits: u64,
    pub absent_hits: u64,
    pub misses: u64,
    pub invalidations: u64,
    pub flushes: u64,
}

pub struct DirCache {
    held: AtomicBool,
    gen: AtomicU64,
    /// Keyed by `(dir, name_hash)`; the name is compared on a hit.
    map: UnsafeCell<Map<(u64, u64), Ent>>,
    /// Mode, owner and group of directories, as their owners reported
    /// them; dropped with the directory's entries.
    attrs: UnsafeCell<Map<u64, Vouched>>,
    /// The credentials everything here was asked with: a lookup or a
    /// search grant made for one thread's credentials says nothing about
    /// other ones (a process that searched a 0700 directory as root, then
    /// `seteuid`s away, must be refused as Linux refuses it).
    cred: UnsafeCell<Option<CredKey>>,
    hits: AtomicU64,
    absent_hits: AtomicU64,
    misses: AtomicU64,
    invalidations: AtomicU64,
    flushes: AtomicU64,
}

/// What decides a permission check: the file-system ids, capabilities
/// and group list, and the real ids and permitted capabilities `access`
/// checks with.
type CredKey = (atoll_proto::Cred, u32, u32, u32);

fn cred_key() -> CredKey {
    let t = crate::creds::current();
    (t.fs, t.ruid, t.rgid, t.permitted)
}

// SAFETY: `map`, `attrs` and `cred` are only touched by the holder of
// `held` (see `Guard`).
unsafe impl Sync for DirCache {}

struct Guard<'a>(&'a DirCache);

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        self.0.held.store(false, Ordering::Release);
    }
}

impl Guard<'_> {
    fn map(&mut self) -> &mut Map<(u64, u64), Ent> {
        // SAFETY: the guard proves this thread holds `held`, so no other
        // thread (nor a signal handler, which only ever *tries* the lock)
        // touches the map now.
        unsafe { &mut *self.0.map.get() }
    }

    fn attrs(&mut self) -> &mut Map<u64, Vouched> {
        // SAFETY: as for `map`: the guard proves this thread holds `held`.
        unsafe { &mut *self.0.attrs.get() }
    }

    /// Keep what is cached only for the credentials it was asked with:
    /// a caller with others (after `set*id`, `setgroups`, `capset`, or a
    /// thread whose credentials differ) starts from an empty cache. The
    /// flush moves the generation, so an answer asked for under the old
    /// credentials and still on its way is not kept either.
    fn follow_cred(&mut self) {
        let key = cred_key();
        // SAFETY: as for `map`: the guard proves this thread holds `held`.
        let cred = unsafe { &mut *self.0.cred.get() };
        if *cred != Some(key) {
            if cred.is_some() {
                self.flush();
            }
            *cred = Some(key);
        }
    }

    fn invalidate(&mut self, dir: InodeId, name: &[u8]) {
        self.0.gen.fetch_add(1, Ordering::AcqRel);
        self.0.invalidations.fetch_add(1, Ordering::Relaxed);
        counters::bump(&counters::DCACHE_INVALIDATIONS);
        if name.is_empty() {
            // The whole directory: its mode, owner or group changed.
            self.map().retain(|k, _| k.0 != dir.0);
            self.attrs().remove(&dir.0);
            return;
        }
        let key = (dir.0, name_hash(dir, name));
        if self.map().get(&key).is_some_and(|e| &*e.name == name) {
            self.map().remove(&key);
        }
    }

    fn flush(&mut self) {
        self.0.gen.fetch_add(1, Ordering::AcqRel);
        self.0.flushes.fetch_add(1, Ordering::Relaxed);
        counters::bump(&counters::DCACHE_FLUSHES);
        self.map().clear();
        self.attrs().clear();
    }

    /// Apply every notice waiting in `chans` (and their overflow flags).
    fn drain<'c>(&mut self, chans: impl Iterator<Item = &'c ClientChannel>) {
        for ch in chans {
            if ch.take_inbox_overflow() {
                self.flush();
            }
            let mut bad = false;
            let _ = ch.drain_inbox(|bytes| match atoll_proto::decode::<Notice<'_>>(bytes) {
                Ok(Notice::Invalidate { dir, name }) => self.invalidate(dir, name),
                Ok(Notice::Adapt { dir, distributed }) => crate::adapt::on_notice(dir, distributed),
                Ok(Notice::InvalidateAll) | Err(_) => bad = true,
            });
            if bad {
                self.flush();
            }
        }
    }
}

impl DirCache {
    pub fn new() -> DirCache {
        DirCache {
            held: AtomicBool::new(false),
            gen: AtomicU64::new(0),
            map: UnsafeCell::new(Map::default()),
            attrs: UnsafeCell::new(Map::default()),
            cred: UnsafeCell::new(None),
            hits: AtomicU64::new(0),
            absent_hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            invalidations: AtomicU64::new(0),
            flushes: AtomicU64::new(0),
        }
    }

    fn try_lock(&self) -> Option<Guard<'_>> {
        let mut g = self
            .held
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| Guard(self))?;
        g.follow_cred();
        Some(g)
    }

    /// The lock, for storing an answer asked for at generation `gen`:
    /// `None` if it is busy or a notice was processed since (the answer
    /// may be stale), and the answer is then simply not kept.
    fn lock_at(&self, gen: u64) -> Option<Guard<'_>> {
        let g = self.try_lock()?;
        (self.gen.load(Ordering::Acquire) == gen).then_some(g)
    }

    /// Drop every cached answer unless another thread holds the cache now
    /// (then the inbox-overflow flag a new server incarnation raises
    /// flushes it at the next drain). A name re-bound to a new member
    /// incarnation (`names`).
    pub fn flush_if_free(&self) {
        if let Some(mut g) = self.try_lock() {
            g.flush();
        }
    }

    /// Apply waiting notices from `chans` if nobody else is at it (a lane
    /// being taken). Notices are never dropped: if the lock is busy they
    /// stay in their inbox for the next drain.
    pub fn drain<'c>(&self, chans: impl Iterator<Item = &'c ClientChannel>) {
        if let Some(mut g) = self.try_lock() {
            g.drain(chans);
        }
    }

    /// Drain every inbox in `chans` (all of the session's), then look
    /// `(dir, name)` up. `None` is a miss (also when the lock is busy).
    pub fn get<'c>(
        &self,
        chans: impl Iterator<Item = &'c ClientChannel>,
        dir: InodeId,
        name: &[u8],
    ) -> Option<Hit> {
        let hit = self.try_lock().and_then(|mut g| {
            g.drain(chans);
            let e = g.map().get(&(dir.0, name_hash(dir, name)))?;
            (&*e.name == name).then_some(match e.found {
                Some((ino, ftype)) => Hit::Entry(ino, ftype),
                None => Hit::Absent,
            })
        });
        let (c, g) = match hit {
            Some(Hit::Entry(..)) => (&self.hits, &counters::DCACHE_HITS),
            Some(Hit::Absent) => {
                self.absent_hits.fetch_add(1, Ordering::Relaxed);
                (&self.hits, &counters::DCACHE_HITS)
            }
            None => (&self.misses, &counters::DCACHE_MISSES),
        };
        c.fetch_add(1, Ordering::Relaxed);
        counters::bump(g);
        hit
    }

    /// Drain every inbox, then say whether `(dir, name)` is known to be
    /// absent. Counted as a hit when it is, not counted otherwise (the
    /// caller asks the server, whose answer is not kept here then).
    pub fn absent<'c>(
        &self,
        chans: impl Iterator<Item = &'c ClientChannel>,
        dir: InodeId,
        name: &[u8],
    ) -> bool {
        let absent = self.try_lock().is_some_and(|mut g| {
            g.drain(chans);
            g.map()
                .get(&(dir.0, name_hash(dir, name)))
                .is_some_and(|e| &*e.name == name && e.found.is_none())
        });
        if absent {
            self.hits.fetch_add(1, Ordering::Relaxed);
            self.absent_hits.fetch_add(1, Ordering::Relaxed);
            counters::bump(&counters::DCACHE_HITS);
        }
        absent
    }

    /// As [`DirCache::get`], for a caller that only wants an entry that
    /// exists (an absent one, or none, is `None`).
    pub fn get_entry<'c>(
        &self,
        chans: impl Iterator<Item = &'c ClientChannel>,
        dir: InodeId,
        name: &[u8],
    ) -> Option<(InodeId, FileType)> {
        self.get(chans, dir, name)?.entry().ok()
    }

    /// Drain every inbox, then follow `path` (components separated by
    /// `/`, relative to directory `from`) through cached entries only,
    /// under one lock hold: the inode it names now, or `None` if any
    /// component is not cached (or the lock is busy). A hit means each
    /// entry still exists — its removal or replacement would have put a
    /// notice in an inbox before it returned (module docs) — so the
    /// directory named is not removed. Not counted as hits or misses.
    pub fn resolve_cached<'c>(
        &self,
        chans: impl Iterator<Item = &'c ClientChannel>,
        from: InodeId,
        path: &[u8],
    ) -> Option<InodeId> {
        let mut g = self.try_lock()?;
        g.drain(chans);
        let mut at = from;
        for name in path.split(|&b| b == b'/').filter(|n| !n.is_empty()) {
            if name == b"." || name == b".." {
                return None; // never cached
            }
            let e = g.map().get(&(at.0, name_hash(at, name)))?;
            if &*e.name != name {
                return None;
            }
            at = e.found?.0;
        }
        Some(at)
    }

    /// Drain every inbox, then say whether `dir` is known to be searchable
    /// by this process (see [`DirCache::set_searchable`]). Not counted as a
    /// hit or miss.
    pub fn searchable<'c>(
        &self,
        chans: impl Iterator<Item = &'c ClientChannel>,
        dir: InodeId,
    ) -> bool {
        self.try_lock().is_some_and(|mut g| {
            g.drain(chans);
            g.map()
                .get(&(dir.0, name_hash(dir, b"")))
                .is_some_and(|e| e.name.is_empty())
        })
    }

    /// Remember that the directory's owner granted this process search
    /// permission on `dir` (asked after `generation()` returned `gen`). Kept
    /// as the entry with the empty name, which no real entry has, so the
    /// notice that drops a directory's entries (its mode or owner changed)
    /// drops this too.
    pub fn set_searchable(&self, gen: u64, dir: InodeId) {
        self.insert(gen, dir, b"", dir, FileType::Directory);
    }

    /// Drain every inbox, then give the attributes kept for directory
    /// `dir` (see [`DirCache::set_dir_attrs`]). Not counted as a hit or miss.
    pub fn dir_attrs<'c>(
        &self,
        chans: impl Iterator<Item = &'c ClientChannel>,
        dir: InodeId,
    ) -> Option<Vouched> {
        self.try_lock().and_then(|mut g| {
            g.drain(chans);
            g.attrs().get(&dir.0).copied()
        })
    }

    /// Remember a directory's attributes as its owner reported them (asked
    /// after `generation()` returned `gen`), unless a notice was processed
    /// since. The owner's notice on `chmod`/`chown` drops them.
    pub fn set_dir_attrs(&self, gen: u64, attrs: Vouched) {
        let Some(mut g) = self.lock_at(gen) else {
            return;
        };
        if g.attrs().len() >= MAX_ENTRIES {
            g.attrs().clear();
        }
        g.attrs().insert(attrs.ino.0, attrs);
    }

    /// Read before sending the `Lookup` whose answer may be inserted.
    pub fn generation(&self) -> u64 {
        self.gen.load(Ordering::Acquire)
    }

    /// Remember a `Lookup` answer obtained after `generation()` returned
    /// `gen`, unless a notice was processed since (it may have been about
    /// this entry).
    pub fn insert(&self, gen: u64, dir: InodeId, name: &[u8], ino: InodeId, ftype: FileType) {
        self.put(gen, dir, name, Some((ino, ftype)));
    }

    /// Remember that a `Lookup` (or an `Open` without `O_CREAT`) of
    /// `(dir, name)` obtained after `generation()` returned `gen` answered
    /// `ENOENT`, unless a notice was processed since (the name may have
    /// appeared). The answering server recorded this session and tells it
    /// before the name appears (module docs).
    pub fn insert_absent(&self, gen: u64, dir: InodeId, name: &[u8]) {
        if name.is_empty() || name == b"." || name == b".." {
            return; // the empty name is the search grant (`set_searchable`)
        }
        self.put(gen, dir, name, None);
    }

    fn put(&self, gen: u64, dir: InodeId, name: &[u8], found: Option<(InodeId, FileType)>) {
        let Some(mut g) = self.lock_at(gen) else {
            return;
        };
        if g.map().len() >= MAX_ENTRIES {
            g.map().clear();
        }
        g.map().insert(
            (dir.0, name_hash(dir, name)),
            Ent {
                name: name.into(),
                found,
            },
        );
    }

    #[cfg(test)]
    pub fn counters(&self) -> CacheCounters {
        CacheCounters {
            hits: self.hits.load(Ordering::Relaxed),
            absent_hits: self.absent_hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            invalidations: self.invalidations.load(Ordering::Relaxed),
            flushes: self.flushes.load(Ordering::Relaxed),
        }
    }
}

impl Default for DirCache {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use atoll_msg::ServerChannel;
    use std::os::fd::AsFd;

    fn chan() -> (ClientChannel, ServerChannel) {
        let (fd, s) = ServerChannel::create(atoll_msg::RingSize::Small).unwrap();
        (ClientChannel::map(fd.as_fd()).unwrap(), s)
    }

    fn notify(s: &ServerChannel, n: &Notice<'_>) {
        let mut buf = [0u8; 512];
        s.notify(atoll_proto::encode(n, &mut buf).unwrap()).unwrap();
    }

    const D: InodeId = InodeId(77);
    const F: InodeId = InodeId(78);

    #[test]
    fn hit_after_insert_and_gone_after_notice() {
        let (c, s) = chan();
        let dc = DirCache::new();
        assert_eq!(dc.get_entry([&c].into_iter(), D, b"a"), None);
        let g = dc.generation();
        dc.insert(g, D, b"a", F, FileType::Regular);
        assert_eq!(
            dc.get_entry([&c].into_iter(), D, b"a"),
            Some((F, FileType::Regular))
        );
        assert_eq!(dc.get_entry([&c].into_iter(), D, b"b"), None);
        notify(&s, &Notice::Invalidate { dir: D, name: b"a" });
        assert_eq!(dc.get_entry([&c].into_iter(), D, b"a"), None);
        let k = dc.counters();
        assert_eq!((k.hits, k.misses, k.invalidations), (1, 3, 1));
    }

    #[test]
    fn a_cached_path_resolves_until_an_entry_on_it_goes() {
        let (c, s) = chan();
        let dc = DirCache::new();
        let (sub, leaf) = (InodeId(80), InodeId(81));
        let g = dc.generation();
        dc.insert(g, D, b"sub", sub, FileType::Directory);
        dc.insert(g, sub, b"leaf", leaf, FileType::Directory);
        let at = |p: &[u8]| dc.resolve_cached([&c].into_iter(), D, p);
        assert_eq!(at(b""), Some(D), "no component: the start");
        assert_eq!(at(b"/sub//leaf/"), Some(leaf));
        assert_eq!(at(b"/sub"), Some(sub));
        assert_eq!(at(b"/sub/other"), None, "not cached");
        assert_eq!(at(b"/sub/../sub"), None, "`..` is never cached");
        assert_eq!(at(b"/su"), None);
        // rmdir of sub/leaf at its server: the notice goes first.
        notify(
            &s,
            &Notice::Invalidate {
                dir: sub,
                name: b"leaf",
            },
        );
        assert_eq!(at(b"/sub/leaf"), None);
        assert_eq!(at(b"/sub"), Some(sub));
        let k = dc.counters();
        assert_eq!((k.hits, k.misses), (0, 0), "not counted");
    }

    #[test]
    fn an_empty_name_drops_the_whole_directory_only() {
        let (c, s) = chan();
        let dc = DirCache::new();
        let other = InodeId(99);
        let g = dc.generation();
        dc.insert(g, D, b"a", F, FileType::Regular);
        dc.insert(g, D, b"b", F, FileType::Regular);
        dc.insert(g, other, b"a", F, FileType::Regular);
        // chmod of D at its owner server (search permission changed).
        notify(&s, &Notice::Invalidate { dir: D, name: b"" });
        assert_eq!(dc.get_entry([&c].into_iter(), D, b"a"), None);
        assert_eq!(dc.get_entry([&c].into_iter(), D, b"b"), None);
        assert_eq!(
            dc.get_entry([&c].into_iter(), other, b"a"),
            Some((F, FileType::Regular))
        );
    }

    #[test]
    fn directory_attributes_are_forgotten_with_their_entries() {
        let (c, s) = chan();
        let dc = DirCache::new();
        let a = Vouched {
            ino: D,
            perm: 0o1777,
            uid: 1,
            gid: 2,
            epoch: 0,
            default_acl: false,
            access_acl: false,
            verdict: None,
        };
        dc.set_dir_attrs(dc.generation(), a);
        assert_eq!(dc.dir_attrs([&c].into_iter(), D), Some(a));
        assert_eq!(dc.dir_attrs([&c].into_iter(), F), None);
        notify(&s, &Notice::Invalidate { dir: D, name: b"" });
        assert_eq!(dc.dir_attrs([&c].into_iter(), D), None);
        // An answer older than a notice is not kept.
        let gen = dc.generation();
        notify(&s, &Notice::Invalidate { dir: F, name: b"x" });
        dc.drain([&c].into_iter());
        dc.set_dir_attrs(gen, a);
        assert_eq!(dc.dir_attrs([&c].into_iter(), D), None);
    }

    #[test]
    fn searchable_directories_are_forgotten_with_their_entries() {
        let (c, s) = chan();
        let dc = DirCache::new();
        assert!(!dc.searchable([&c].into_iter(), D));
        dc.set_searchable(dc.generation(), D);
        assert!(dc.searchable([&c].into_iter(), D));
        assert!(!dc.searchable([&c].into_iter(), F));
        notify(&s, &Notice::Invalidate { dir: D, name: b"" });
        assert!(!dc.searchable([&c].into_iter(), D));
        // A name invalidation in the directory keeps it.
        dc.set_searchable(dc.generation(), D);
        notify(&s, &Notice::Invalidate { dir: D, name: b"a" });
        assert!(dc.searchable([&c].into_iter(), D));
        assert_eq!(dc.counters().hits, 0);
    }

    #[test]
    fn insertion_racing_a_drained_notice_is_refused() {
        let (c, s) = chan();
        let dc = DirCache::new();
        let g = dc.generation();
        // The server invalidated the entry after answering the lookup, and
        // another thread drained that notice before this one inserts.
        notify(&s, &Notice::Invalidate { dir: D, name: b"a" });
        dc.drain([&c].into_iter());
        dc.insert(g, D, b"a", F, FileType::Regular);
        assert_eq!(dc.get_entry([&c].into_iter(), D, b"a"), None);
    }

    #[test]
    fn overflow_and_garbage_flush_everything() {
        let (c, s) = chan();
        let dc = DirCache::new();
        let g = dc.generation();
        dc.insert(g, D, b"a", F, FileType::Regular);
        dc.insert(g, D, b"b", F, FileType::Regular);
        while s.notify(&[0xff; 1000]).is_ok() {}
        assert_eq!(dc.get_entry([&c].into_iter(), D, b"a"), None);
        assert_eq!(dc.get_entry([&c].into_iter(), D, b"b"), None);
        assert!(dc.counters().flushes >= 1);
    }

    /// Concurrency: a "server" thread keeps replacing the entry and
    /// notifying (as the file server does before it replies); two client
    /// threads look it up through the cache. A hit must never be older
    /// than a change that completed before the lookup started.
    #[test]
    fn hits_are_never_older_than_completed_changes() {
        use std::sync::atomic::AtomicU64;
        let (c, s) = chan();
        let dc = DirCache::new();
        let current = AtomicU64::new(1); // the entry's inode, authoritative
        let completed = AtomicU64::new(1); // changes whose "reply" was sent
        let stop = AtomicBool::new(false);
        let lookups = || {
            while !stop.load(Ordering::Acquire) {
                let floor = completed.load(Ordering::Acquire);
                match dc.get_entry([&c].into_iter(), D, b"a") {
                    Some((ino, _)) => {
                        assert!(ino.0 >= floor, "stale hit {} < {floor}", ino.0);
                    }
                    None => {
                        let g = dc.generation();
                        // The server's answer to `Lookup`.
                        let ino = current.load(Ordering::Acquire);
                        // The reply travels back: let the others run.
                        std::thread::yield_now();
                        dc.insert(g, D, b"a", InodeId(ino), FileType::Regular);
                    }
                }
            }
        };
        std::thread::scope(|sc| {
            let a = sc.spawn(lookups);
            let b = sc.spawn(lookups);
            for v in 2..20_000u64 {
                current.store(v, Ordering::Release);
                // A full inbox raises the overflow flag instead.
                let mut buf = [0u8; 64];
                let n = atoll_proto::encode(&Notice::Invalidate { dir: D, name: b"a" }, &mut buf)
                    .unwrap();
                let _ = s.notify(n);
                completed.store(v, Ordering::Release);
                if v % 64 == 0 {
                    std::thread::yield_now();
                }
            }
            stop.store(true, Ordering::Release);
            a.join().unwrap();
            b.join().unwrap();
        });
        // Quiet again (a first lookup drains what is left): the latest
        // answer is cached and served.
        let _ = dc.get_entry([&c].into_iter(), D, b"a");
        let g = dc.generation();
        dc.insert(g, D, b"a", InodeId(19_999), FileType::Regular);
        assert_eq!(
            dc.get_entry([&c].into_iter(), D, b"a"),
            Some((InodeId(19_999), FileType::Regular))
        );
    }

    #[test]
    fn absent_names_hit_until_a_notice_says_they_appeared() {
        let (c, s) = chan();
        let dc = DirCache::new();
        let get = |n: &[u8]| dc.get([&c].into_iter(), D, n);
        assert_eq!(get(b"a"), None);
        dc.insert_absent(dc.generation(), D, b"a");
        assert_eq!(get(b"a"), Some(Hit::Absent));
        assert_eq!(get(b"a").map(Hit::entry), Some(Err(libc::ENOENT)));
        assert!(dc.absent([&c].into_iter(), D, b"a"));
        assert!(!dc.absent([&c].into_iter(), D, b"b"));
        assert_eq!(
            dc.get_entry([&c].into_iter(), D, b"a"),
            None,
            "not an entry"
        );
        // `.`, `..` and the empty name (the search grant) are never absent.
        for n in [&b"."[..], b"..", b""] {
            dc.insert_absent(dc.generation(), D, n);
            assert_eq!(get(n), None);
        }
        assert!(!dc.searchable([&c].into_iter(), D));
        // A create of `a` at its server: the notice goes first.
        notify(&s, &Notice::Invalidate { dir: D, name: b"a" });
        assert!(!dc.absent([&c].into_iter(), D, b"a"));
        assert_eq!(get(b"a"), None);
        // The lookup after it finds the entry, which replaces the absence.
        dc.insert_absent(dc.generation(), D, b"a");
        dc.insert(dc.generation(), D, b"a", F, FileType::Regular);
        assert_eq!(get(b"a"), Some(Hit::Entry(F, FileType::Regular)));
        let k = dc.counters();
        assert_eq!((k.absent_hits, k.invalidations), (4, 1));
    }

    #[test]
    fn an_absent_answer_racing_a_drained_notice_is_refused() {
        let (c, s) = chan();
        let dc = DirCache::new();
        let g = dc.generation();
        // `ENOENT` answered, then the name was created and another thread
        // drained that notice before this one inserts.
        notify(&s, &Notice::Invalidate { dir: D, name: b"a" });
        dc.drain([&c].into_iter());
        dc.insert_absent(g, D, b"a");
        assert_eq!(dc.get([&c].into_iter(), D, b"a"), None);
    }

    #[test]
    fn absent_names_go_with_their_directory_credentials_and_flushes() {
        let (c, s) = chan();
        let dc = DirCache::new();
        let (sub, other) = (InodeId(80), InodeId(99));
        let g = dc.generation();
        dc.insert(g, D, b"sub", sub, FileType::Directory);
        dc.insert_absent(g, D, b"x");
        dc.insert_absent(g, other, b"x");
        // A path through an absent name resolves to nothing.
        assert_eq!(dc.resolve_cached([&c].into_iter(), D, b"/x"), None);
        assert_eq!(dc.resolve_cached([&c].into_iter(), D, b"/sub"), Some(sub));
        // chmod/chown/rmdir of D at its owner server.
        notify(&s, &Notice::Invalidate { dir: D, name: b"" });
        assert!(!dc.absent([&c].into_iter(), D, b"x"));
        assert!(dc.absent([&c].into_iter(), other, b"x"));
        // Other credentials start from an empty cache (a directory this
        // thread may search may refuse another: `EACCES`, not `ENOENT`).
        let key = cred_key();
        {
            let g = dc.try_lock().unwrap();
            // SAFETY: the guard holds the lock.
            let cred = unsafe { &mut *g.0.cred.get() };
            *cred = Some((atoll_proto::Cred::of(key.0.uid + 1, key.0.gid), 0, 0, 0));
        }
        assert!(!dc.absent([&c].into_iter(), other, b"x"));
        dc.insert_absent(dc.generation(), other, b"x");
        while s.notify(&[0xff; 1000]).is_ok() {}
        assert!(
            !dc.absent([&c].into_iter(), other, b"x"),
            "overflow flushes"
        );
    }

    #[test]
    fn busy_lock_means_miss_not_wait() {
        let (c, _s) = chan();
        let dc = DirCache::new();
        let g = dc.generation();
        dc.insert(g, D, b"a", F, FileType::Regular);
        let held = dc.try_lock().unwrap();
        assert_eq!(dc.get_entry([&c].into_iter(), D, b"a"), None);
        drop(held);
        assert!(dc.get_entry([&c].into_iter(), D, b"a").is_some());
    }
}
