//! Creation affinity, server side (Hare §3.7.5).
//!
//! When a client creates a file whose entry lives on a server of another
//! socket, it places the inode on its own designated local server instead,
//! in two steps coordinated by the client (servers never message each
//! other, Hare §6.2.3):
//!
//! 1. `CreateInode` here: a new inode no entry names yet (link count 0),
//!    *pending* for the creating session, and with `open` a description;
//! 2. `Adopt` here (posted): the pending inode takes its first link;
//! 3. `Link` at the entry's server. On failure the client sends `Unref`
//!    (and closes the description), which frees it.
//!
//! Crash safety: the link is counted before the name can exist. A server
//! serves the requests a dead session queued before dropping it, and the
//! client enqueues `Adopt` here before it sends `Link`, so a creator
//! killed at any instant leaves either no name and a freed inode (killed
//! before `Adopt` was enqueued: the session's death frees the pending
//! inode) or an inode holding one link — never a name whose inode is gone.
//! A creator killed between enqueuing `Adopt` and sending `Link` (a few
//! instructions), or after a failed `Link` before its `Unref`, leaves an
//! inode no name reaches (a leak, never corruption): without messages
//! between servers, no order of the steps avoids both.
//!
//! While pending, `Unref` (another client removed the new name before an
//! `Adopt` posted on another lane arrived) consumes the pending name, and
//! the `Adopt` that follows is a no-op.

use super::ordered::Map;

use atoll_proto::{Cred, Errno, FileType, InodeId, Reply, SessionId, MAX_TARGET};

use super::perm::{Caller, MAY_EXEC, MAY_WRITE};
use super::{FileServer, NewNode, R};
use crate::store::BlockStore;

/// Pending creations and their counters.
#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Creating {
    /// Inodes created by `CreateInode` and not yet adopted, with their
    /// creating session.
    pending: Map<InodeId, SessionId>,
    /// Inodes placed here for a client of this socket (`CreateInode`).
    placements: u64,
    /// Pending inodes whose name was confirmed (`Adopt`).
    adopted: u64,
    /// Pending inodes dropped: link failed, name removed before `Adopt`,
    /// or the creator died.
    abandoned: u64,
}

impl Creating {
    pub fn is_pending(&self, ino: InodeId) -> bool {
        self.pending.contains_key(&ino)
    }

    pub fn counters(&self) -> [(&'static str, u64); 3] {
        [
            ("affinity.placements", self.placements),
            ("affinity.adopted", self.adopted),
            ("affinity.abandoned", self.abandoned),
        ]
    }
}

impl<S: BlockStore> FileServer<S> {
    /// `Request::CreateInode`.
    pub(super) fn create_inode<'o>(
        &mut self,
        session: SessionId,
        who: &Caller,
        (dir, name): (InodeId, &[u8]),
        node: NewNode,
        open: Option<u32>,
    ) -> R<'o> {
        let NewNode {
            ftype,
            perm,
            rdev,
            target,
            ..
        } = node;
        let perm = match ftype {
            // A directory placed here (the client's spreading of new
            // directories) keeps its entries here too: owner and home.
            FileType::Directory if open.is_none() => perm & 0o1777,
            FileType::Directory => return Err(Errno::EINVAL),
            FileType::Symlink => {
                if target.is_empty() {
                    return Err(Errno::ENOENT);
                }
                if target.len() > MAX_TARGET {
                    return Err(Errno::ENAMETOOLONG);
                }
                0o777
            }
            FileType::CharDevice | FileType::BlockDevice if !who.has(Cred::CAP_MKNOD) => {
                return Err(Errno::EPERM); // CAP_MKNOD
            }
            FileType::Socket if target.len() > MAX_TARGET => return Err(Errno::ENAMETOOLONG),
            _ => perm & 0o7777,
        };
        if open.is_some() && ftype != FileType::Regular {
            return Err(Errno::EINVAL);
        }
        // Checked here only when this server owns the directory; the
        // entry's server checks again at `Link`.
        self.dir_check(dir, who, MAY_WRITE | MAY_EXEC)?;
        let from = self.inheritance(dir, who, ftype, node.inherit)?;
        // The name is admitted by the entry's server at `Link`.
        self.admit(super::limits::INODES, 1)?;
        let perm = from.perm(ftype, perm, node.umask);
        let ino = self.new_inode(who, dir, ftype, perm, self.cfg.index, 0);
        self.inherit(ino, from)?;
        if ftype == FileType::Directory {
            // Its `..` is `dir`; freed with the inode if never adopted.
            let shard = super::dir::Shard::new(Some(dir), &self.acct.names);
            self.shards.insert(ino, shard);
        }
        if matches!(ftype, FileType::Symlink | FileType::Socket) {
            if let Err(e) = self.set_target(ino, target) {
                self.inodes.remove(&ino);
                return Err(e);
            }
        }
        if let Some(i) = self.inodes.get_mut(&ino) {
            i.links = 0;
            if matches!(ftype, FileType::CharDevice | FileType::BlockDevice) {
                i.rdev = rdev;
            }
        }
        self.creating.pending.insert(ino, session);
        let Some(flags) = open else {
            self.creating.placements += 1;
            return Ok(Reply::Entry { ino, ftype });
        };
        // POSIX: a new file is opened with the requested access whatever
        // its mode.
        match self.open_inode(session, who, ino, flags, false) {
            Ok((desc, attr)) => {
                self.creating.placements += 1;
                // Opened through the entry the client links next, as a
                // description opened by name (Linux's file keeps its dentry).
                if let Some(d) = self.descs.get_mut(&desc) {
                    d.via = Some((dir, name.into()));
                }
                Ok(Reply::Opened {
                    desc,
                    attr,
                    created: true,
                    // Every server holds a directory's watches: its
                    // watchers hear of this open once the name exists
                    // (`InotifyNamed`).
                    watched: self.watched(attr.ino) || self.dir_watched(dir),
                    served: 0,
                })
            }
            Err(e) => {
                self.creating.pending.remove(&ino);
                self.maybe_free(ino);
                Err(e)
            }
        }
    }

    /// `Request::Adopt`: the pending name now exists.
    pub(super) fn adopt<'o>(&mut self, session: SessionId, ino: InodeId) -> R<'o> {
        match self.creating.pending.get(&ino) {
            Some(s) if *s == session => {}
            Some(_) => return Err(Errno::EPERM),
            // Removed meanwhile (`Unref` consumed the name): nothing to do.
            None => return Ok(Reply::Ok),
        }
        self.creating.pending.remove(&ino);
        self.creating.adopted += 1;
        if let Some(i) = self.inodes.get_mut(&ino) {
            i.links += 1;
        }
        Ok(Reply::Ok)
    }

    /// `Unref` of a pending inode with no confirmed link: the pending name
    /// is the one removed (or the creator gave up). True if handled.
    pub(super) fn unref_pending(&mut self, ino: InodeId) -> bool {
        let unconfirmed = self.inodes.get(&ino).is_some_and(|i| i.links == 0);
        if unconfirmed && self.creating.pending.remove(&ino).is_some() {
            self.creating.abandoned += 1;
            self.maybe_free(ino);
            return true;
        }
        false
    }

    /// The session died: its pending inodes go (their `Adopt` was never
    /// enqueued, so neither was their `Link`).
    pub(super) fn abandon_creations(&mut self, session: SessionId) {
        let gone: Vec<InodeId> = self
            .creating
            .pending
            .iter()
            .filter(|(_, s)| **s == session)
            .map(|(i, _)| *i)
            .collect();
        for ino in gone {
            self.creating.pending.remove(&ino);
            self.creating.abandoned += 1;
            self.maybe_free(ino);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::FsConfig;
    use super::*;
    use crate::store::MemStore;
    use atoll_proto::{Cred, Request, UnlinkKind, Vouched, ROOT};

    const S1: SessionId = SessionId(1);
    const S2: SessionId = SessionId(2);
    const USER: Cred = Cred::of(1000, 1000);

    fn fs(index: usize) -> FileServer<MemStore> {
        FileServer::new(
            FsConfig {
                index,
                nservers: 2,
                first_block: 0,
                nblocks: 64,
                root_owner: USER,
                core: -1,
                track_lookups: true,
                track_absent: true,
                limits: crate::fs::Limits::for_memory(1 << 30),
            },
            MemStore::new(64),
        )
    }

    fn inodes(f: &FileServer<MemStore>) -> u64 {
        f.stats().inodes
    }

    /// ROOT's attributes as a client reads them from server 0 and vouches
    /// for them to a server that does not own ROOT.
    const ROOT_ATTRS: Vouched = Vouched {
        ino: ROOT,
        perm: 0o755,
        uid: USER.uid,
        gid: USER.gid,
        epoch: 0,
        default_acl: false,
        access_acl: false,
        verdict: None,
    };

    fn create(f: &mut FileServer<MemStore>, s: SessionId, open: Option<u32>) -> (InodeId, u64) {
        let mut out = Vec::new();
        let r = f.handle_vouched(
            s,
            USER,
            &[ROOT_ATTRS],
            Request::CreateInode {
                dir: ROOT,
                name: b"placed",
                ftype: FileType::Regular,
                perm: 0o644,
                rdev: 0,
                target: b"",
                open,
                inherit: atoll_proto::Inherit::Unread,
                umask: 0,
            },
            &mut out,
        );
        match r {
            Reply::Opened { desc, attr, .. } => (attr.ino, desc.0),
            Reply::Entry { ino, .. } => (ino, 0),
            other => panic!("CreateInode: {other:?}"),
        }
    }

    fn ok(f: &mut FileServer<MemStore>, s: SessionId, req: Request<'_>) {
        let mut out = Vec::new();
        let r = f.handle(s, USER, req, &mut out);
        assert!(matches!(r, Reply::Ok | Reply::Attr(_)), "{r:?}");
    }

    /// `Link` of regular file `ino` as `name` in ROOT on `s0`, by S1: the
    /// reply's `replaced`.
    fn link_in_root(
        s0: &mut FileServer<MemStore>,
        name: &[u8],
        ino: InodeId,
    ) -> Option<(InodeId, FileType)> {
        let mut out = Vec::new();
        let r = s0.handle(
            S1,
            USER,
            Request::Link {
                dir: ROOT,
                name,
                ino,
                ftype: FileType::Regular,
                replace: false,
                moved_from: None,
            },
            &mut out,
        );
        match r {
            Reply::Linked { replaced } => replaced,
            other => panic!("Link: {other:?}"),
        }
    }

    #[test]
    fn pending_inode_lives_on_this_server_and_is_adopted() {
        let mut f = fs(1);
        let (ino, _) = create(&mut f, S1, Some(libc::O_RDWR as u32));
        assert_eq!(ino.owner(), 1);
        assert_eq!(f.attr(ino).unwrap().nlink, 0);
        ok(&mut f, S1, Request::Adopt { ino });
        assert_eq!(f.attr(ino).unwrap().nlink, 1);
        // The creator exiting no longer frees it: it has a name.
        f.session_closed(S1);
        assert_eq!(f.attr(ino).unwrap().nlink, 1);
        let c: Map<_, _> = f.stats().counters.into_iter().collect();
        assert_eq!(c.get("affinity.placements"), Some(&1));
        assert_eq!(c.get("affinity.adopted"), Some(&1));
    }

    #[test]
    fn creator_death_before_adopt_frees_the_inode() {
        let mut f = fs(1);
        let base = inodes(&f);
        create(&mut f, S1, Some(libc::O_WRONLY as u32));
        create(&mut f, S1, None);
        let (other, _) = create(&mut f, S2, None);
        assert_eq!(inodes(&f), base + 3);
        f.session_closed(S1);
        assert_eq!(inodes(&f), base + 1, "only the other session's remains");
        assert!(f.attr(other).is_ok());
    }

    #[test]
    fn failed_link_unref_and_close_free_it() {
        let mut f = fs(1);
        let base = inodes(&f);
        let (ino, desc) = create(&mut f, S1, Some(libc::O_RDWR as u32));
        ok(
            &mut f,
            S1,
            Request::Unref {
                ino,
                via: None,
                replaced: false,
            },
        );
        assert_eq!(inodes(&f), base + 1, "still open");
        ok(
            &mut f,
            S1,
            Request::Close {
                desc: atoll_proto::DescId(desc),
            },
        );
        assert_eq!(inodes(&f), base);
    }

    #[test]
    fn name_removed_before_adopt_makes_adopt_a_no_op() {
        let mut f = fs(1);
        let base = inodes(&f);
        let (ino, _) = create(&mut f, S1, None);
        // Another client unlinked the new entry (at its server) and sends
        // `Unref` to the owner before the creator's `Adopt` arrived.
        ok(
            &mut f,
            S2,
            Request::Unref {
                ino,
                via: None,
                replaced: false,
            },
        );
        assert_eq!(inodes(&f), base);
        ok(&mut f, S1, Request::Adopt { ino });
        assert_eq!(inodes(&f), base);
    }

    #[test]
    fn adopt_by_another_session_is_refused_and_directories_keep_their_entries_here() {
        let mut f = fs(1);
        let (ino, _) = create(&mut f, S1, None);
        let mut out = Vec::new();
        let r = f.handle(S2, USER, Request::Adopt { ino }, &mut out);
        assert!(matches!(r, Reply::Err(Errno::EPERM)), "{r:?}");
        let r = f.handle_vouched(
            S1,
            USER,
            &[ROOT_ATTRS],
            Request::CreateInode {
                dir: ROOT,
                name: b"placed",
                ftype: FileType::Directory,
                perm: 0o755,
                rdev: 0,
                target: b"",
                open: Some(libc::O_RDONLY as u32),
                inherit: atoll_proto::Inherit::Unread,
                umask: 0,
            },
            &mut out,
        );
        assert!(matches!(r, Reply::Err(Errno::EINVAL)), "not opened: {r:?}");
        let r = f.handle_vouched(
            S1,
            USER,
            &[ROOT_ATTRS],
            Request::CreateInode {
                dir: ROOT,
                name: b"placed",
                ftype: FileType::Directory,
                perm: 0o755,
                rdev: 0,
                target: b"",
                open: None,
                inherit: atoll_proto::Inherit::Unread,
                umask: 0,
            },
            &mut out,
        );
        let Reply::Entry { ino: d, .. } = r else {
            panic!("{r:?}");
        };
        assert_eq!((d.owner(), d.home()), (1, 1), "owner and home here");
        let r = f.handle(
            S1,
            USER,
            Request::Lookup {
                dir: d,
                name: b"..",
            },
            &mut out,
        );
        assert!(
            matches!(r, Reply::Entry { ino, .. } if ino == ROOT),
            "{r:?}"
        );
        // Never adopted: the creator's death frees it and its shard.
        f.session_closed(S1);
        let r = f.handle(S2, USER, Request::GetAttr { ino: d }, &mut out);
        assert!(matches!(r, Reply::Err(Errno::ENOENT)), "{r:?}");
        let r = f.handle(S2, USER, Request::Lookup { dir: d, name: b"x" }, &mut out);
        assert!(matches!(r, Reply::Err(_)), "{r:?}");
    }

    /// Lookup of `name` in ROOT at `s0`: the inode it names, if any.
    fn named(s0: &mut FileServer<MemStore>, name: &[u8]) -> Option<InodeId> {
        let mut out = Vec::new();
        match s0.handle(S2, USER, Request::Lookup { dir: ROOT, name }, &mut out) {
            Reply::Entry { ino, .. } => Some(ino),
            _ => None,
        }
    }

    /// The client's steps (Hare §3.7.5) with the creator's session dying
    /// after each one on both servers: whatever name exists afterwards
    /// names a live inode with one link.
    #[test]
    fn a_creator_dying_between_any_two_steps_leaves_no_dangling_name() {
        for steps_done in 0..=3 {
            // Server 0 holds ROOT's entries; the inode goes to server 1.
            let mut s0 = fs(0);
            let mut s1 = fs(1);
            let base = inodes(&s1);
            let name = b"f";
            let mut made = None;
            for step in 0..steps_done {
                match step {
                    0 => made = Some(create(&mut s1, S1, Some(libc::O_RDWR as u32))),
                    1 => ok(
                        &mut s1,
                        S1,
                        Request::Adopt {
                            ino: made.unwrap().0,
                        },
                    ),
                    _ => {
                        link_in_root(&mut s0, name, made.unwrap().0);
                    }
                }
            }
            s0.session_closed(S1);
            s1.session_closed(S1);
            match named(&mut s0, name) {
                Some(ino) => {
                    let a = s1.attr(ino);
                    assert!(a.is_ok(), "after {steps_done} steps: dangling name");
                    assert_eq!(a.unwrap().nlink, 1, "after {steps_done} steps");
                }
                None if steps_done <= 1 => {
                    assert_eq!(inodes(&s1), base, "after {steps_done} steps: not freed");
                }
                // Adopted, `Link` never sent: the inode no name reaches
                // that the module docs admit.
                None => assert_eq!(inodes(&s1), base + 1),
            }
        }
    }

    /// The former order (`Link`, then `Adopt`) is what dangled: the same
    /// death after `Link` frees the inode the new name names.
    #[test]
    fn a_link_before_adopt_would_dangle() {
        let mut s0 = fs(0);
        let mut s1 = fs(1);
        let (ino, _) = create(&mut s1, S1, None);
        link_in_root(&mut s0, b"f", ino);
        s1.session_closed(S1);
        assert_eq!(named(&mut s0, b"f"), Some(ino));
        assert!(s1.attr(ino).is_err());
    }

    #[test]
    fn a_foreign_inode_linked_elsewhere_unlinks_with_unref() {
        // Server 0 holds ROOT's entries; the inode lives on server 1.
        let mut s0 = fs(0);
        let mut s1 = fs(1);
        let (ino, _) = create(&mut s1, S1, None);
        ok(&mut s1, S1, Request::Adopt { ino });
        assert_eq!(link_in_root(&mut s0, b"f", ino), None);
        let mut out = Vec::new();
        let r = s0.handle(
            S1,
            USER,
            Request::Unlink {
                dir: ROOT,
                name: b"f",
                kind: UnlinkKind::NonDirectory,
                expect: None,
            },
            &mut out,
        );
        assert!(
            matches!(
                r,
                Reply::Unlinked {
                    freed_here: false,
                    ..
                }
            ),
            "{r:?}"
        );
        let base = inodes(&s1);
        ok(
            &mut s1,
            S1,
            Request::Unref {
                ino,
                via: None,
                replaced: false,
            },
        );
        assert_eq!(inodes(&s1), base - 1);
    }
}
