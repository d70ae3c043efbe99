//! Lookup trackers for the clients' directory-lookup caches (Hare §3.7.2).
//!
//! Every `Lookup` of an entry held here records which session asked. When
//! the entry is removed or made to name another inode (unlink, rmdir,
//! rename, link with replace) every recorded session gets a
//! [`Notice::Invalidate`](atoll_proto::Notice) in its inbox *before* the
//! reply to the operation that changed the entry is sent, and the record
//! is forgotten (the next lookup records again). Notices are queued here
//! (the file server is pure logic) and the server loop delivers them
//! without waiting (`ServerChannel::notify`); a full inbox raises the
//! channel's overflow flag, which makes that client flush its whole cache.
//!
//! Absent names too (unless `--without negative-lookups`): a `Lookup` (or
//! an `Open` without `O_CREAT`) answered `ENOENT` records its session for
//! `(dir, name)` the same way ([`Tracker::record_absent`]), and every
//! place that makes a name exist here (create, `mknod`/`mkdir`/`symlink`/
//! socket bind, link and `O_TMPFILE` linkat, rename onto it, an exchange,
//! entries moved in by a directory swap) calls [`Tracker::changed`] for it
//! before its reply, so the session forgets the absence first. One record
//! serves both: it says "this session cached what `(dir, name)` was",
//! whatever that was, and any change of it invalidates. A server rebuilt
//! from its journal forgets every record, as for positive entries: the
//! new incarnation raises every channel's overflow flag (`takeover`).
//!
//! Records of sessions that died are dropped lazily: delivery to a session
//! with no channel is skipped.
//!
//! Bounded (`limits`): at most `cap` records per server, present and
//! absent names together. A record past the cap evicts whole directories'
//! records, oldest directory first, until a quarter of the cap is free;
//! each evicted record becomes a notice, so its session forgets the entry
//! (or the absence) and looks it up again — a lookup never fails and no
//! cache is left unwatched. The records of sessions that died go the same
//! way. Pending notices are delivered after every request, so at most the
//! records of one change plus one per session wait at a time.

use std::collections::VecDeque;

use super::ordered::Map;

use atoll_proto::{InodeId, SessionId};

/// One notice waiting for delivery: `(session, dir, name)`.
pub type Pending = (SessionId, InodeId, Box<[u8]>);

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Tracker {
    enabled: bool,
    /// dir → name → sessions that cached it.
    names: Map<InodeId, Map<Box<[u8]>, Vec<SessionId>>>,
    /// Directories in `names`, in the order their first record came. A
    /// directory that left `names` and came back may appear twice: it is
    /// evicted at its first place (a little early), the second is skipped.
    order: VecDeque<InodeId>,
    /// Records (`(dir, name, session)` triples) in `names`.
    records: u64,
    /// Most records kept.
    cap: u64,
    pending: Vec<Pending>,
    /// Whether answers "no such entry" are recorded too.
    #[serde(default)]
    absent: bool,
    /// Absent names recorded (included in `recorded`).
    #[serde(default)]
    pub recorded_absent: u64,
    /// Lookups recorded (a session's first lookup of a name since its last
    /// invalidation).
    pub recorded: u64,
    /// Invalidations queued for delivery.
    pub invalidations: u64,
    /// Entry changes that invalidated at least one session.
    pub changes_invalidating: u64,
    /// Records dropped to stay within the cap (their sessions told).
    pub evicted: u64,
}

impl Tracker {
    /// A tracker (off: records nothing) keeping at most `cap` records.
    pub fn new(enabled: bool, cap: u64) -> Tracker {
        Tracker {
            enabled,
            cap: cap.max(1),
            ..Tracker::default()
        }
    }

    /// Record answers "no such entry" too (`record_absent`).
    pub fn with_absent(mut self, absent: bool) -> Tracker {
        self.absent = absent;
        self
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// `session` now caches that `(dir, name)` does not exist (the answer
    /// was `ENOENT`). From then on the name appearing here is a change
    /// ([`Tracker::changed`]) like its removal.
    pub fn record_absent(&mut self, session: SessionId, dir: InodeId, name: &[u8]) {
        if !self.absent {
            return;
        }
        let before = self.recorded;
        self.record(session, dir, name);
        self.recorded_absent += self.recorded - before;
    }

    /// `session` now caches `(dir, name)`. Allocation-free when already
    /// recorded.
    pub fn record(&mut self, session: SessionId, dir: InodeId, name: &[u8]) {
        if !self.enabled || name == b"." || name == b".." {
            return;
        }
        let by_name = self.names.entry(dir).or_insert_with(|| {
            self.order.push_back(dir);
            Map::default()
        });
        match by_name.get_mut(name) {
            Some(v) => {
                if v.contains(&session) {
                    return;
                }
                v.push(session);
            }
            None => {
                by_name.insert(name.into(), vec![session]);
            }
        }
        self.recorded += 1;
        self.records += 1;
        if self.records > self.cap {
            self.evict();
        }
    }

    /// Drop whole directories' records, oldest first, until a quarter of
    /// the cap is free; their sessions get notices (module docs).
    fn evict(&mut self) {
        let goal = self.cap - self.cap / 4;
        while self.records > goal {
            let Some(dir) = self.order.pop_front() else {
                break;
            };
            if let Some(by_name) = self.names.remove(&dir) {
                for (name, sessions) in by_name {
                    self.records -= sessions.len() as u64;
                    self.evicted += sessions.len() as u64;
                    for s in sessions {
                        self.pending.push((s, dir, name.clone()));
                    }
                }
            }
        }
        // Directories that left `names` by other ways leave stale ids.
        if self.order.len() > 2 * self.names.len() + 16 {
            let names = &self.names;
            self.order.retain(|d| names.contains_key(d));
        }
    }

    /// The entry `(dir, name)` changed — removed, replaced, or made to
    /// exist: queue a notice for every session that cached it (or its
    /// absence) and forget them.
    pub fn changed(&mut self, dir: InodeId, name: &[u8]) {
        if !self.enabled {
            return;
        }
        let Some(by_name) = self.names.get_mut(&dir) else {
            return;
        };
        let Some(sessions) = by_name.remove(name) else {
            return;
        };
        if by_name.is_empty() {
            self.names.remove(&dir);
        }
        self.changes_invalidating += 1;
        self.records -= sessions.len() as u64;
        for s in sessions {
            self.invalidations += 1;
            self.pending.push((s, dir, name.into()));
        }
    }

    /// A directory is gone for good: nothing cached in it can be valid
    /// (it was empty, so this only drops records).
    pub fn dir_gone(&mut self, dir: InodeId) {
        if let Some(by_name) = self.names.remove(&dir) {
            for (name, sessions) in by_name {
                self.records -= sessions.len() as u64;
                for s in sessions {
                    self.invalidations += 1;
                    self.pending.push((s, dir, name.clone()));
                }
            }
        }
    }

    /// The search permission of `dir` may have changed (chmod or chown of
    /// the directory, Hare §3.7.1): every session in `sessions` must forget
    /// all it cached in `dir`, wherever the entries live. The notice has an
    /// empty name, which no entry has.
    pub fn dir_access_changed(&mut self, dir: InodeId, sessions: impl Iterator<Item = SessionId>) {
        if !self.enabled {
            return;
        }
        for s in sessions {
            self.invalidations += 1;
            self.pending.push((s, dir, Box::default()));
        }
    }

    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Notices to deliver now, in order.
    pub fn take_pending(&mut self) -> Vec<Pending> {
        std::mem::take(&mut self.pending)
    }

    /// Names with at least one cacher (for statistics).
    pub fn tracked(&self) -> u64 {
        self.names.values().map(|m| m.len() as u64).sum()
    }

    /// Records held now (at most the cap).
    pub fn records(&self) -> u64 {
        self.records
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The notices a request left, all of entries of the root, as sorted
    /// `(session, name)` pairs.
    fn root_notices(fs: &mut crate::fs::FileServer<crate::store::MemStore>) -> Vec<(u64, Vec<u8>)> {
        let mut got: Vec<(u64, Vec<u8>)> = fs
            .take_notices()
            .into_iter()
            .map(|(s, d, n)| {
                assert_eq!(d, atoll_proto::ROOT);
                (s.0, n.to_vec())
            })
            .collect();
        got.sort();
        got
    }

    #[test]
    fn change_notifies_each_cacher_once_then_forgets() {
        let mut t = Tracker::new(true, 100);
        let d = InodeId(7);
        t.record(SessionId(1), d, b"a");
        t.record(SessionId(1), d, b"a");
        t.record(SessionId(2), d, b"a");
        t.record(SessionId(3), d, b"b");
        t.record(SessionId(3), d, b"..");
        assert_eq!(t.recorded, 3);
        t.changed(d, b"a");
        let p = t.take_pending();
        assert_eq!(p.len(), 2);
        assert!(p.iter().all(|(_, dir, n)| *dir == d && &n[..] == b"a"));
        t.changed(d, b"a");
        assert!(!t.has_pending(), "records are forgotten after a change");
        assert_eq!(t.tracked(), 1);
    }

    /// chmod/chown of a directory tells every session to drop what it
    /// cached in it (empty name); other attribute changes do not.
    #[test]
    fn directory_mode_or_owner_change_notifies_every_session() {
        use crate::fs::{FileServer, FsConfig};
        use crate::store::MemStore;
        use atoll_proto::{Cred, Reply, Request, SetAttr, TimeSet, ROOT};

        let cred = Cred::of(1000, 1000);
        let cfg = FsConfig {
            index: 0,
            nservers: 1,
            first_block: 0,
            nblocks: 16,
            root_owner: cred,
            core: -1,
            track_lookups: true,
            track_absent: true,
            limits: crate::fs::Limits::for_memory(1 << 30),
        };
        let mut fs = FileServer::new(cfg, MemStore::new(16));
        let mut out = Vec::new();
        for s in [SessionId(1), SessionId(2)] {
            fs.session_opened(s);
        }
        let mut set = |fs: &mut FileServer<MemStore>, set: SetAttr| {
            let r = fs.handle(
                SessionId(1),
                cred,
                Request::SetAttr {
                    ino: ROOT,
                    set,
                    via: None,
                },
                &mut out,
            );
            assert!(matches!(r, Reply::Attr(_)), "{r:?}");
        };
        set(
            &mut fs,
            SetAttr {
                atime: TimeSet::Now,
                ..SetAttr::NONE
            },
        );
        assert!(!fs.has_notices(), "a time change keeps the cache");
        set(
            &mut fs,
            SetAttr {
                perm: Some(0o700),
                ..SetAttr::NONE
            },
        );
        let mut p = fs.take_notices();
        p.sort();
        assert_eq!(
            p,
            [
                (SessionId(1), ROOT, Box::default()),
                (SessionId(2), ROOT, Box::default())
            ]
        );
        set(
            &mut fs,
            SetAttr {
                gid: Some(1000),
                ..SetAttr::NONE
            },
        );
        assert_eq!(fs.take_notices().len(), 2);
    }

    /// Through the file server: every way an entry can change notifies
    /// the sessions that looked it up, and only them.
    #[test]
    fn file_server_notifies_cachers_of_changed_entries() {
        use crate::fs::{FileServer, FsConfig};
        use crate::store::MemStore;
        use atoll_proto::{Cred, FileType, Reply, Request, UnlinkKind, ROOT};

        let cred = Cred::of(1000, 1000);
        let cfg = FsConfig {
            index: 0,
            nservers: 1,
            first_block: 0,
            nblocks: 16,
            root_owner: cred,
            core: -1,
            track_lookups: true,
            track_absent: true,
            limits: crate::fs::Limits::for_memory(1 << 30),
        };
        let mut fs = FileServer::new(cfg, MemStore::new(16));
        let mut out = Vec::new();
        let (a, b) = (SessionId(1), SessionId(2));
        let mut create = |fs: &mut FileServer<MemStore>, name: &[u8]| {
            let r = fs.handle(
                a,
                cred,
                Request::Open {
                    dir: ROOT,
                    name,
                    flags: (libc::O_CREAT | libc::O_RDWR) as u32,
                    perm: 0o644,
                    umask: 0,
                    inherit: atoll_proto::Inherit::Unread,
                },
                &mut out,
            );
            match r {
                Reply::Opened { attr, .. } => attr.ino,
                other => panic!("{other:?}"),
            }
        };
        create(&mut fs, b"x");
        let y = create(&mut fs, b"y");
        create(&mut fs, b"z");
        let mut out = Vec::new();
        let mut lookup = |fs: &mut FileServer<MemStore>, s: SessionId, name: &[u8]| {
            let r = fs.handle(s, cred, Request::Lookup { dir: ROOT, name }, &mut out);
            assert!(matches!(r, Reply::Entry { .. }), "{r:?}");
        };
        lookup(&mut fs, a, b"x");
        lookup(&mut fs, b, b"x");
        lookup(&mut fs, b, b"y");
        lookup(&mut fs, a, b"z");
        assert!(!fs.has_notices(), "lookups alone notify nobody");
        let mut out = Vec::new();
        // Rename y over x: both names changed.
        let r = fs.handle(
            a,
            cred,
            Request::Rename {
                olddir: ROOT,
                oldname: b"y",
                newdir: ROOT,
                newname: b"x",
                flags: 0,
            },
            &mut out,
        );
        assert!(matches!(r, Reply::Renamed { .. }), "{r:?}");
        assert_eq!(
            root_notices(&mut fs),
            vec![(1, b"x".to_vec()), (2, b"x".to_vec()), (2, b"y".to_vec())]
        );
        // Link over z with replace, then unlink it.
        let r = fs.handle(
            b,
            cred,
            Request::Link {
                dir: ROOT,
                name: b"z",
                ino: y,
                ftype: FileType::Regular,
                replace: true,
                moved_from: None,
            },
            &mut out,
        );
        assert!(matches!(r, Reply::Linked { .. }), "{r:?}");
        let got: Vec<u64> = fs.take_notices().iter().map(|p| p.0 .0).collect();
        assert_eq!(got, vec![1]);
        let r = fs.handle(
            b,
            cred,
            Request::Unlink {
                dir: ROOT,
                name: b"z",
                kind: UnlinkKind::NonDirectory,
                expect: None,
            },
            &mut out,
        );
        assert!(matches!(r, Reply::Unlinked { .. }), "{r:?}");
        assert!(!fs.has_notices(), "nobody looked z up since");
        let st = fs.stats();
        assert!(st
            .counters
            .iter()
            .any(|(n, v)| n == "dcache.invalidations_sent" && *v == 4));
    }

    /// Past its cap the tracker evicts the oldest directory's records
    /// and tells their sessions, so no lookup fails and no cache goes
    /// unwatched; it keeps working at the cap.
    #[test]
    fn records_past_the_cap_evict_the_oldest_directory_with_notices() {
        let mut t = Tracker::new(true, 8);
        let (old, new) = (InodeId(7), InodeId(8));
        for n in 0..4u8 {
            t.record(SessionId(1), old, &[b'a' + n]);
        }
        for n in 0..4u8 {
            t.record(SessionId(2), new, &[b'a' + n]);
        }
        assert!(!t.has_pending());
        t.record(SessionId(2), new, b"z");
        assert!(t.records() <= 8);
        let p = t.take_pending();
        assert_eq!(p.len(), 4, "the older directory's records");
        assert!(p.iter().all(|(s, d, _)| *s == SessionId(1) && *d == old));
        assert_eq!(t.evicted, 4);
        // Still tracking: a change in the kept directory notifies.
        t.changed(new, b"z");
        assert_eq!(t.take_pending(), vec![(SessionId(2), new, b"z"[..].into())]);
        for i in 0..1000u32 {
            t.record(SessionId(3), InodeId(100 + i as u64), b"x");
            assert!(t.records() <= 8);
        }
        assert!(t.order.len() <= 2 * t.names.len() + 16 + 1);
    }

    fn one_server(absent: bool) -> crate::fs::FileServer<crate::store::MemStore> {
        use crate::fs::{FileServer, FsConfig};
        let cfg = FsConfig {
            index: 0,
            nservers: 1,
            first_block: 0,
            nblocks: 16,
            root_owner: atoll_proto::Cred::of(1000, 1000),
            core: -1,
            track_lookups: true,
            track_absent: absent,
            limits: crate::fs::Limits::for_memory(1 << 30),
        };
        FileServer::new(cfg, crate::store::MemStore::new(16))
    }

    /// Through the file server: a lookup answered `ENOENT` records the
    /// session, and every way a name can appear (create, `mkdir`,
    /// `symlink`, socket, `mknod`, link, rename onto it) queues the notice
    /// while serving the request that makes it appear — so the server
    /// loop delivers it before that reply (`server::deliver_notices`).
    #[test]
    fn absent_names_are_invalidated_when_they_appear() {
        use atoll_proto::{Cred, FileType, Inherit, Reply, Request, ROOT};
        let cred = Cred::of(1000, 1000);
        let mut fs = one_server(true);
        let mut out = Vec::new();
        let (a, b) = (SessionId(1), SessionId(2));
        let mut miss = |fs: &mut crate::fs::FileServer<_>, s: SessionId, name: &[u8]| {
            let r = fs.handle(s, cred, Request::Lookup { dir: ROOT, name }, &mut out);
            assert!(matches!(r, Reply::Err(atoll_proto::Errno::ENOENT)), "{r:?}");
        };
        let names: [&[u8]; 7] = [b"f", b"d", b"l", b"s", b"n", b"h", b"r"];
        for n in names {
            miss(&mut fs, a, n);
            miss(&mut fs, b, n);
        }
        let mut out = Vec::new();
        let r = fs.handle(
            a,
            cred,
            Request::Lookup {
                dir: ROOT,
                name: b"..",
            },
            &mut out,
        );
        assert!(matches!(r, Reply::Entry { .. }), "{r:?}");
        let r = fs.handle(
            a,
            cred,
            Request::Lookup {
                dir: InodeId(1 << 40),
                name: b"..",
            },
            &mut out,
        );
        assert!(matches!(r, Reply::Err(_)), "{r:?}");
        miss(&mut fs, a, b"nothing-makes-me");
        assert!(!fs.has_notices(), "misses alone notify nobody");
        assert_eq!(fs.track.recorded_absent, 15, "`..` is never recorded");
        assert_eq!(fs.track.records(), 15);
        let expect = |fs: &mut crate::fs::FileServer<_>, r: Reply<'_>, name: &[u8]| {
            assert!(!matches!(r, Reply::Err(_)), "{r:?}");
            assert_eq!(
                root_notices(fs),
                vec![(1, name.to_vec()), (2, name.to_vec())],
                "{name:?}"
            );
        };
        let mut out = Vec::new();
        let r = fs.handle(
            a,
            cred,
            Request::Open {
                dir: ROOT,
                name: b"f",
                flags: (libc::O_CREAT | libc::O_RDWR) as u32,
                perm: 0o644,
                umask: 0,
                inherit: Inherit::Unread,
            },
            &mut out,
        );
        let f = match &r {
            Reply::Opened { attr, .. } => attr.ino,
            other => panic!("{other:?}"),
        };
        expect(&mut fs, r, b"f");
        for (name, ftype, target, rdev) in [
            (&b"d"[..], FileType::Directory, &b""[..], 0),
            (b"l", FileType::Symlink, b"f", 0),
            (b"s", FileType::Socket, b"", 0),
            (b"n", FileType::Fifo, b"", 0),
        ] {
            let mut out = Vec::new();
            let r = fs.handle(
                b,
                cred,
                Request::MakeNode {
                    dir: ROOT,
                    name,
                    ftype,
                    perm: 0o755,
                    rdev,
                    target,
                    home: 0,
                    spread: 0,
                    inherit: Inherit::Unread,
                    umask: 0,
                },
                &mut out,
            );
            expect(&mut fs, r, name);
        }
        let mut out = Vec::new();
        let r = fs.handle(
            a,
            cred,
            Request::Link {
                dir: ROOT,
                name: b"h",
                ino: f,
                ftype: FileType::Regular,
                replace: false,
                moved_from: None,
            },
            &mut out,
        );
        expect(&mut fs, r, b"h");
        // Rename onto the missing name: the old name goes too, but only
        // `a` and `b` cached `h`... they cached `r` absent, and `h` was
        // forgotten at the link above: one notice per session for `r`.
        let r = fs.handle(
            a,
            cred,
            Request::Rename {
                olddir: ROOT,
                oldname: b"h",
                newdir: ROOT,
                newname: b"r",
                flags: 0,
            },
            &mut out,
        );
        expect(&mut fs, r, b"r");
        // Records are forgotten once used; an `Open` without `O_CREAT`
        // answered `ENOENT` records too, one with it does not.
        let mut open = |fs: &mut crate::fs::FileServer<_>, name: &[u8], flags: i32| {
            let r = fs.handle(
                a,
                cred,
                Request::Open {
                    dir: ROOT,
                    name,
                    flags: flags as u32,
                    perm: 0o644,
                    umask: 0,
                    inherit: Inherit::Unread,
                },
                &mut out,
            );
            matches!(r, Reply::Err(atoll_proto::Errno::ENOENT))
        };
        assert!(open(&mut fs, b"g", libc::O_RDONLY));
        assert!(!open(&mut fs, b"g", libc::O_CREAT | libc::O_RDONLY));
        assert_eq!(
            fs.take_notices(),
            vec![(a, ROOT, b"g"[..].into())],
            "the create notifies the session the open told `ENOENT`"
        );
    }

    /// A directory removed or made unsearchable: its absent names are
    /// forgotten with its entries; and with `--without negative-lookups`
    /// nothing absent is recorded.
    #[test]
    fn absent_names_go_with_their_directory_and_their_switch() {
        use atoll_proto::{Cred, FileType, Inherit, Reply, Request, SetAttr, UnlinkKind, ROOT};
        let cred = Cred::of(1000, 1000);
        for absent in [true, false] {
            let mut fs = one_server(absent);
            let mut out = Vec::new();
            let r = fs.handle(
                SessionId(1),
                cred,
                Request::MakeNode {
                    dir: ROOT,
                    name: b"d",
                    ftype: FileType::Directory,
                    perm: 0o755,
                    rdev: 0,
                    target: b"",
                    home: 0,
                    spread: 0,
                    inherit: Inherit::Unread,
                    umask: 0,
                },
                &mut out,
            );
            let d = match r {
                Reply::Entry { ino, .. } => ino,
                other => panic!("{other:?}"),
            };
            let r = fs.handle(
                SessionId(2),
                cred,
                Request::Lookup { dir: d, name: b"x" },
                &mut out,
            );
            assert!(matches!(r, Reply::Err(atoll_proto::Errno::ENOENT)));
            fs.session_opened(SessionId(2));
            let r = fs.handle(
                SessionId(1),
                cred,
                Request::SetAttr {
                    ino: d,
                    set: SetAttr {
                        perm: Some(0o700),
                        ..SetAttr::NONE
                    },
                    via: None,
                },
                &mut out,
            );
            assert!(matches!(r, Reply::Attr(_)), "{r:?}");
            assert!(fs
                .take_notices()
                .contains(&(SessionId(2), d, Box::default())));
            let r = fs.handle(
                SessionId(2),
                cred,
                Request::Lookup { dir: d, name: b"x" },
                &mut out,
            );
            assert!(matches!(r, Reply::Err(atoll_proto::Errno::ENOENT)));
            let r = fs.handle(
                SessionId(1),
                cred,
                Request::Unlink {
                    dir: ROOT,
                    name: b"d",
                    kind: UnlinkKind::Directory,
                    expect: None,
                },
                &mut out,
            );
            assert!(matches!(r, Reply::Unlinked { .. }), "{r:?}");
            let got = fs.take_notices();
            assert_eq!(
                got.contains(&(SessionId(2), d, b"x"[..].into())),
                absent,
                "{got:?}"
            );
            assert_eq!(fs.track.recorded_absent, absent as u64);
        }
    }

    /// Absent names count against the same cap: a flood of misses evicts
    /// with notices (nothing cached goes unwatched), and the tracker stays
    /// within the cap.
    #[test]
    fn absent_records_share_the_cap_and_are_evicted_with_notices() {
        let mut t = Tracker::new(true, 8).with_absent(true);
        for i in 0..8u64 {
            t.record_absent(SessionId(1), InodeId(100 + i), b"missing");
        }
        assert!(!t.has_pending());
        t.record_absent(SessionId(1), InodeId(200), b"missing");
        assert!(t.records() <= 8);
        let p = t.take_pending();
        assert!(!p.is_empty());
        assert!(p
            .iter()
            .all(|(s, d, n)| *s == SessionId(1) && d.0 < 108 && &n[..] == b"missing"));
        assert_eq!(t.recorded_absent, 9);
        // Off: nothing absent is recorded (present names still are).
        let mut t = Tracker::new(true, 8);
        t.record_absent(SessionId(1), InodeId(7), b"a");
        t.changed(InodeId(7), b"a");
        assert!(!t.has_pending());
        assert_eq!(t.records(), 0);
    }

    #[test]
    fn disabled_tracker_records_nothing() {
        let mut t = Tracker::new(false, 100);
        t.record(SessionId(1), InodeId(7), b"a");
        t.changed(InodeId(7), b"a");
        assert!(!t.has_pending());
        assert_eq!(t.tracked(), 0);
    }
}
