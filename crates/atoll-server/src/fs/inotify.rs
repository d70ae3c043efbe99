//! Change notification (`inotify`) produced where changes happen.
//!
//! A *queue* is an anonymous inode owned by the server that made it, with
//! one read-only description (the program's inotify descriptor, shared by
//! `dup`/`fork`/`exec` like any other) and a ring of buffer-cache blocks
//! laid out as a pipe's (`atoll_proto::inotify`; Hare §3.6, fos §4.2). The
//! client reads whole `struct inotify_event` records out of the ring under
//! its lock and sleeps on its wait word, exactly as a pipe reader.
//!
//! A *watch* is `(queue, wd, mask)` on an inode, held by every server that
//! can see the inode change: its owner (attributes, data, close, removal)
//! and, for a directory, every server (entries live on the home server or
//! on all of them, and the inodes entries name may be owned anywhere).
//! The queue's owner hands out watch descriptors (one per inode per
//! queue); the client registers the watch with the other servers, since
//! servers never message each other (Hare §6.2.3).
//!
//! Producing an event: after a request changed something, the server
//! looks for watches of what changed and appends records to their queues
//! itself, in the shared buffer cache. It never waits for a client: it
//! only *tries* the ring lock; when a client holds it, the record waits
//! in this server's `pending` list and goes in after the next request or
//! loop turn (`flush`). A full ring gets one `IN_Q_OVERFLOW` record (room
//! for it is always kept), as Linux's queue limit does.
//!
//! Child events (a file in a watched directory was modified, changed
//! attributes, closed after writing) need the file's name: the server
//! that owns the file finds it among the entries of the watched
//! directories it holds itself (`index_names`), or in the entry a
//! description was opened through when that lives on another server
//! (`Request::OpenInode::via`). A change by path of a file whose entry
//! lives elsewhere (a rename across servers, creation affinity) reaches
//! watches of the file itself but not its directory's.
//!
//! Life cycle of a queue:
//! ```text
//!  InotifyInit ─▶ LIVE ──last description closes (or its session dies)──▶
//!  DEAD (header word; servers drop their watches at their next request)
//!  ──HOLDERS == 0──▶ blocks freed by the owner
//! ```
//! `HOLDERS` (one bit per server holding watches of the queue) is what
//! lets the owner free the blocks without asking anyone: no server writes
//! into a queue whose bit it has cleared.

use std::collections::VecDeque;

use super::ordered::Map;

use atoll_proto::inotify::{self as ino_hdr, *};
use atoll_proto::{
    DescId, Errno, FileType, InodeId, QueueRef, Reply, Request, SessionId, BLOCK_SIZE,
};

use super::perm::Caller;
use super::{FileServer, R};
use crate::store::BlockStore;

mod access;
mod dnotify;
mod gone;
mod life;
mod ring;

/// See `Notify::stalls`.
const STALL_LIMIT: u32 = 200_000;

/// One queue owned here.
#[derive(serde::Serialize, serde::Deserialize)]
struct Queue {
    header: u32,
    data: Vec<u32>,
    id: u64,
    /// Watch descriptors handed out: inode → (wd, mask).
    wds: Map<InodeId, (i32, u32)>,
    next_wd: i32,
}

/// One watch held here.
#[derive(Clone, Copy, Debug, serde::Serialize, serde::Deserialize)]
struct Watch {
    queue: QueueRef,
    wd: i32,
    mask: u32,
}

/// Notification state of one server.
#[derive(Default, serde::Serialize, serde::Deserialize)]
pub(super) struct Notify {
    /// Queues owned here, by their inode.
    queues: Map<InodeId, Queue>,
    /// Queues whose last description closed, until no server holds
    /// watches of them.
    dying: Vec<Queue>,
    /// Watches held here, by watched inode.
    watches: Map<InodeId, Vec<Watch>>,
    /// How many of `watches` belong to each queue (this server's bit in
    /// the queue's `HOLDERS` is set while the count is not zero).
    held: Map<QueueRef, u32>,
    /// Names of inodes in the watched directories' entries held here,
    /// for child events, with the state of those entries it was built
    /// from (`names_key`); rebuilt when that moved.
    names: Map<InodeId, Vec<(InodeId, Vec<u8>)>>,
    names_key: Option<(u64, u64, usize)>,
    /// Blocks of this server's lent to rings it grew (`ring::grow`), by
    /// queue: given back once the queue is dead and nobody writes to it.
    #[serde(default)]
    lent: Map<QueueRef, Vec<u32>>,
    /// Host directories of dnotify registrations, by their queue
    /// (`inotify/dnotify.rs`).
    #[serde(default)]
    shadows: Map<QueueRef, dnotify::Shadow>,
    /// Records not yet in their ring (its lock was held), in order.
    pending: VecDeque<(QueueRef, Vec<u8>)>,
    /// The pid the request being served came from (`RequestFrame::pid`;
    /// 0 outside requests): fanotify records carry it.
    #[serde(skip)]
    requester: u32,
    /// The session and pid [`FileServer::note_requester`] saw last.
    #[serde(skip)]
    last_requester: Option<(SessionId, u32)>,
    /// Rename cookies handed out here.
    cookies: u32,
    /// A rename is being served: inodes it frees report their end after
    /// its own events, from `freed_later` (`inotify/gone.rs`).
    #[serde(skip)]
    hold_freed: bool,
    #[serde(skip)]
    freed_later: Vec<(InodeId, FileType)>,
    /// Records go into their rings only once the request's lookup-cache
    /// invalidations are in the sessions' inboxes (the server loop calls
    /// `flush_events` then): a watcher that looks a name up on reading an
    /// event (`tail -F` on `IN_MOVED_TO`) must not find the old entry in
    /// its cache. Set by the server loop (`events_after_notices`).
    #[serde(skip)]
    after_notices: bool,
    /// The open being served truncated a non-empty file: its `IN_MODIFY`
    /// follows the `IN_OPEN` (`notify_after`), as Linux truncates after
    /// `do_dentry_open` reported the open.
    #[serde(skip)]
    pub(super) truncated: bool,
    /// Passes of `flush` that found a ring locked since records last went
    /// in: past [`STALL_LIMIT`] the lock's holder is taken to be dead (a
    /// reader killed inside its copy) and the records are dropped as an
    /// overflow, so a server never spins for ever.
    stalls: u32,
    /// Records appended, merged with the last one, and lost to overflow.
    appended: u64,
    merged: u64,
    overflowed: u64,
}

impl Notify {
    /// Does anything here need looking at after a request? Hot path: one
    /// branch when nobody uses inotify.
    pub(super) fn busy(&self) -> bool {
        !(self.watches.is_empty()
            && self.pending.is_empty()
            && self.dying.is_empty()
            && self.lent.is_empty())
    }

    /// Inodes with a watch held here: zero when nothing here is watched
    /// (`Control::publish_watches`).
    pub(super) fn watch_count(&self) -> u64 {
        self.watches.len() as u64
    }

    /// Record watch `w` of `ino`, replacing one with its queue and `wd`.
    fn add(&mut self, ino: InodeId, w: Watch) {
        self.remove(ino, w.queue, w.wd);
        self.watches.entry(ino).or_default().push(w);
        *self.held.entry(w.queue).or_default() += 1;
        self.names_key = None;
    }

    /// Forget watch `wd` of `queue` on `ino`, if held here.
    fn remove(&mut self, ino: InodeId, queue: QueueRef, wd: i32) {
        let Some(list) = self.watches.get_mut(&ino) else {
            return;
        };
        let before = list.len();
        list.retain(|w| !(w.queue == queue && w.wd == wd));
        let gone = (before - list.len()) as u32;
        if list.is_empty() {
            self.watches.remove(&ino);
        }
        self.unheld(queue, gone);
    }

    /// Forget every watch of `ino`; the watches that were.
    fn remove_inode(&mut self, ino: InodeId) -> Vec<Watch> {
        let list = self.watches.remove(&ino).unwrap_or_default();
        for w in &list {
            self.unheld(w.queue, 1);
        }
        list
    }

    fn unheld(&mut self, queue: QueueRef, n: u32) {
        if n == 0 {
            return;
        }
        self.names_key = None;
        if let Some(c) = self.held.get_mut(&queue) {
            *c = c.saturating_sub(n);
            if *c == 0 {
                self.held.remove(&queue);
            }
        }
    }

    pub(super) fn counters(&self) -> [(&'static str, u64); 4] {
        [
            (
                "inotify.watches",
                self.watches.values().map(|w| w.len() as u64).sum(),
            ),
            ("inotify.appended", self.appended),
            ("inotify.merged", self.merged),
            ("inotify.overflowed", self.overflowed),
        ]
    }
}

/// What a request may change, noted before it runs (only while watches
/// exist here), turned into events once its reply says it did.
pub(super) enum Plan {
    Create {
        dir: InodeId,
        name: Vec<u8>,
    },
    /// `Open` with `O_CREAT`: a creation only if the reply says so.
    OpenCreate {
        dir: InodeId,
        name: Vec<u8>,
    },
    /// An open of an existing inode (or an unnamed new one): `IN_OPEN`.
    Opened,
    Link {
        dir: InodeId,
        name: Vec<u8>,
        ino: InodeId,
        /// The old entry, for the first half of a rename across servers.
        from: Option<(InodeId, Vec<u8>)>,
    },
    Unlink {
        dir: InodeId,
        name: Vec<u8>,
        /// The second half of a rename across servers: the moved inode.
        moved: Option<InodeId>,
    },
    Rename {
        olddir: InodeId,
        oldname: Vec<u8>,
        newdir: InodeId,
        newname: Vec<u8>,
    },
    Changed {
        ino: InodeId,
        mask: u32,
        /// The entry the change was made through, when the client named
        /// one (by path) or a description of the caller was opened by name.
        via: Option<(InodeId, Box<[u8]>)>,
    },
    Wrote {
        ino: InodeId,
    },
    /// The owner's half of a hard link whose entry another server holds:
    /// the link count changed (`Ref { link: true }`).
    LinkCounted {
        ino: InodeId,
    },
    /// The owner's half of an unlink whose entry another server removed.
    Unreffed {
        ino: InodeId,
        dir: InodeId,
        name: Vec<u8>,
        /// Filled in before the request runs ([`FileServer::plan_details`]).
        ftype: FileType,
    },
}

impl Plan {
    /// The plan for `req`, if it may produce events.
    pub(super) fn of(
        req: &Request<'_>,
        desc_ino: impl Fn(DescId) -> Option<InodeId>,
    ) -> Option<Plan> {
        use Request as Q;
        Some(match req {
            Q::Open {
                dir, name, flags, ..
            } if flags & libc::O_CREAT as u32 != 0 => Plan::OpenCreate {
                dir: *dir,
                name: name.to_vec(),
            },
            Q::Open { .. } | Q::OpenInode { .. } | Q::CreateTmpfile { .. } => Plan::Opened,
            Q::MakeNode { dir, name, .. } => Plan::Create {
                dir: *dir,
                name: name.to_vec(),
            },
            // A `Link` that replaces is the first half of a rename across
            // servers; an `Unlink` that expects an inode, its second half
            // (`rmdir` also expects the directory it marked: a removal).
            Q::Link {
                dir,
                name,
                ino,
                moved_from,
                ..
            } => Plan::Link {
                dir: *dir,
                name: name.to_vec(),
                ino: *ino,
                from: moved_from.map(|m| (m.dir, m.name.to_vec())),
            },
            Q::Ref { ino, link: true } => Plan::LinkCounted { ino: *ino },
            Q::Unlink {
                dir,
                name,
                expect,
                kind,
            } => Plan::Unlink {
                dir: *dir,
                name: name.to_vec(),
                moved: expect.filter(|_| *kind != atoll_proto::UnlinkKind::Directory),
            },
            Q::Rename {
                olddir,
                oldname,
                newdir,
                newname,
                ..
            } => Plan::Rename {
                olddir: *olddir,
                oldname: oldname.to_vec(),
                newdir: *newdir,
                newname: newname.to_vec(),
            },
            Q::SetAttr { ino, set, via } => Plan::set_attr_plan(*ino, set, via.as_ref()),
            // Posted only while no watch is held here (client
            // `postattr.rs`); one added since reports it all the same.
            Q::SetAttrPosted { ino, set, .. } => Plan::set_attr_plan(*ino, set, None),
            Q::SetXattr { ino, via, .. } | Q::RemoveXattr { ino, via, .. } => Plan::Changed {
                ino: *ino,
                mask: IN_ATTRIB,
                via: via.map(|v| (v.dir, v.name.into())),
            },
            Q::Fallocate { ino, .. } => Plan::Changed {
                ino: *ino,
                mask: IN_MODIFY,
                via: None,
            },
            Q::Unref {
                ino, via: Some(v), ..
            } => Plan::Unreffed {
                ino: *ino,
                dir: v.dir,
                name: v.name.to_vec(),
                ftype: FileType::Regular,
            },
            // A `Write` reports after the client copied (`watched`).
            Q::WriteData { desc, .. } => Plan::Wrote {
                ino: desc_ino(*desc)?,
            },
            _ => return None,
        })
    }

    /// The events of a `SetAttr` (or a posted one, `via` then `None`).
    fn set_attr_plan(
        ino: InodeId,
        set: &atoll_proto::SetAttr,
        via: Option<&atoll_proto::EntryName<'_>>,
    ) -> Plan {
        let mut mask = 0;
        if set.size.is_some() {
            mask |= IN_MODIFY;
        }
        if set.perm.is_some() || set.uid.is_some() || set.gid.is_some() {
            mask |= IN_ATTRIB;
        }
        let (a, m) = (
            set.atime != atoll_proto::TimeSet::Omit,
            set.mtime != atoll_proto::TimeSet::Omit,
        );
        // As Linux's `fsnotify_change`. (The mtime a client posts after a
        // name change elsewhere is `Touched`: no event.)
        if a && m {
            mask |= IN_ATTRIB;
        } else if a {
            mask |= IN_ACCESS;
        } else if m {
            mask |= IN_MODIFY;
        }
        Plan::Changed {
            ino,
            mask,
            via: via.map(|v| (v.dir, v.name.into())),
        }
    }
}

fn isdir(ftype: FileType) -> u32 {
    if ftype == FileType::Directory {
        IN_ISDIR
    } else {
        0
    }
}

impl<S: BlockStore> FileServer<S> {
    // ---------------------------------------------------------------
    // queues and watches

    /// `Request::InotifyInit`.
    pub(super) fn inotify_init<'o>(
        &mut self,
        session: SessionId,
        who: &Caller,
        flags: u32,
        max_events: u32,
    ) -> R<'o> {
        if flags & !(libc::O_NONBLOCK | libc::O_CLOEXEC) as u32 != 0 {
            return Err(Errno::EINVAL);
        }
        // Claimed from the shared pool now, so the ring below is whole.
        if !self.cache.reserve(1 + ino_hdr::DATA_BLOCKS) {
            return Err(Errno::ENOMEM);
        }
        let ino = self.new_inode(who, InodeId(0), FileType::Regular, 0o600, 0, 0);
        if let Some(i) = self.inodes.get_mut(&ino) {
            i.links = 0; // anonymous: lives while its description does
        }
        self.pipes.anonymous.insert(ino);
        let nb = flags & libc::O_NONBLOCK as u32;
        let desc = match self.open_inode(session, who, ino, libc::O_RDONLY as u32 | nb, false) {
            Ok((d, _)) => d,
            Err(e) => {
                self.maybe_free(ino);
                return Err(e);
            }
        };
        let mut take = || self.cache.alloc(&mut Vec::new()).unwrap_or(0);
        let header = take();
        let data: Vec<u32> = (0..ino_hdr::DATA_BLOCKS).map(|_| take()).collect();
        let st = &mut self.cache.store;
        st.put_u32(header, NBLOCKS, data.len() as u32);
        for (k, b) in data.iter().enumerate() {
            st.put_u32(header, BLOCKS + 4 * k, *b);
        }
        // One reader; "one writer" forever, so a reader never sees end of
        // file and readiness never reports a hang-up.
        st.put_u32(header, READERS, 1);
        st.put_u32(header, WRITERS, 1);
        st.put_u64(header, QUEUE_ID, ino.0);
        for k in (FIRED..BLOCK_SIZE).step_by(4) {
            st.put_u32(header, k, 0);
        }
        st.put_u32(header, MAX_EVENTS, max_events);
        self.notify.queues.insert(
            ino,
            Queue {
                header,
                data,
                id: ino.0,
                wds: Map::default(),
                next_wd: 1,
            },
        );
        Ok(Reply::Pipe {
            ino,
            read: desc,
            write: desc,
            header,
            partner_opens: None,
        })
    }

    fn queue_of(&self, session: SessionId, desc: DescId) -> Result<InodeId, Errno> {
        let d = self.desc(session, desc)?;
        if !self.notify.queues.contains_key(&d.ino) {
            return Err(Errno::EINVAL); // not an inotify descriptor
        }
        Ok(d.ino)
    }

    /// `Request::InotifyAddWatch`.
    pub(super) fn inotify_add_watch<'o>(
        &mut self,
        session: SessionId,
        desc: DescId,
        ino: InodeId,
        mask: u32,
    ) -> R<'o> {
        let qino = self.queue_of(session, desc)?;
        let q = self.notify.queues.get_mut(&qino).ok_or(Errno::EINVAL)?;
        if mask & WATCH_EVENTS == 0 || mask & IN_MASK_ADD != 0 && mask & IN_MASK_CREATE != 0 {
            return Err(Errno::EINVAL);
        }
        let mut keep = mask & (IN_ALL_EVENTS | IN_ONESHOT | IN_EXCL_UNLINK | WATCH_FANOTIFY);
        if mask & WATCH_FANOTIFY != 0 {
            keep |= mask & FS_OPEN_EXEC; // inotify has no such event
        }
        let mut replaced = 0;
        let (wd, mask) = match q.wds.get(&ino) {
            Some(&(wd, old)) if old & IN_ONESHOT != 0 => {
                // It may have fired and gone where the change happened.
                replaced = wd;
                let wd = q.next_wd;
                q.next_wd = q.next_wd.checked_add(1).ok_or(Errno::ENOSPC)?;
                (wd, keep)
            }
            Some(_) if mask & IN_MASK_CREATE != 0 => return Err(Errno::EEXIST),
            Some(&(wd, old)) if mask & IN_MASK_ADD != 0 => (wd, old | keep),
            Some(&(wd, _)) => (wd, keep),
            None => {
                let wd = q.next_wd;
                q.next_wd = q.next_wd.checked_add(1).ok_or(Errno::ENOSPC)?;
                (wd, keep)
            }
        };
        q.wds.insert(ino, (wd, mask));
        Ok(Reply::Watch {
            wd,
            ino,
            mask,
            queue: QueueRef {
                header: q.header,
                id: q.id,
            },
            replaced,
        })
    }

    /// `Request::InotifyRmWatch`.
    pub(super) fn inotify_rm_watch<'o>(
        &mut self,
        session: SessionId,
        desc: DescId,
        wd: i32,
    ) -> R<'o> {
        let qino = self.queue_of(session, desc)?;
        let q = self.notify.queues.get_mut(&qino).ok_or(Errno::EINVAL)?;
        let (&ino, &(_, mask)) = q
            .wds
            .iter()
            .find(|(_, (w, _))| *w == wd)
            .ok_or(Errno::EINVAL)?;
        q.wds.remove(&ino);
        let queue = QueueRef {
            header: q.header,
            id: q.id,
        };
        // Its inode freed, or its `IN_ONESHOT` fired, where that happened:
        // its `IN_IGNORED` is queued already (`gone.rs`).
        let gone = self.watch_gone(queue, wd);
        // fanotify has no event for a mark removed.
        if mask & WATCH_FANOTIFY == 0 && !gone {
            let mut rec = Vec::new();
            encode(&mut rec, wd, IN_IGNORED, 0, b"");
            self.append(queue, rec);
        }
        Ok(Reply::Watch {
            wd,
            ino,
            mask,
            queue,
            replaced: if gone { wd } else { 0 },
        })
    }

    /// `Request::InotifyRegister`.
    pub(super) fn inotify_register<'o>(
        &mut self,
        queue: QueueRef,
        ino: InodeId,
        wd: i32,
        mask: u32,
    ) -> R<'o> {
        if mask == 0 {
            self.notify.remove(ino, queue, wd);
        } else if self.queue_alive(queue) {
            self.notify.add(ino, Watch { queue, wd, mask });
        } else {
            return Err(Errno::EBADF);
        }
        self.hold(queue);
        Ok(Reply::Ok)
    }

    // ---------------------------------------------------------------
    // events

    /// Before a request runs: what its plan needs of the state it changes.
    /// A change of an inode through a descriptor (`fchmod`, `ftruncate`,
    /// `fsetxattr`, `fallocate`) names no entry: use the entry a
    /// description of the caller on that inode was opened through, as
    /// Linux reports such changes to the parent of the name opened. An
    /// `Unref` that may free the inode: its type, while it is there.
    pub(super) fn plan_details(&self, plan: Plan, session: SessionId) -> Plan {
        match plan {
            Plan::Unreffed { ino, dir, name, .. } => {
                let ftype = self.inodes.get(&ino).map_or(FileType::Regular, |i| i.ftype);
                Plan::Unreffed {
                    ino,
                    dir,
                    name,
                    ftype,
                }
            }
            Plan::Changed {
                ino,
                mask,
                via: None,
            } => {
                let via = self
                    .descs
                    .values()
                    .find(|d| d.ino == ino && d.refs.contains_key(&session) && d.via.is_some())
                    .and_then(|d| d.via.clone());
                Plan::Changed { ino, mask, via }
            }
            other => other,
        }
    }

    /// After a request: produce the events its plan and reply call for.
    pub(super) fn notify_after(&mut self, plan: Plan, reply: &Reply<'_>) {
        match (plan, reply) {
            (
                Plan::OpenCreate { dir, name },
                Reply::Opened {
                    created,
                    attr,
                    desc,
                    ..
                },
            ) => {
                if *created {
                    self.emit(dir, IN_CREATE | isdir(attr.ftype), 0, &name);
                }
                self.notify_opened(*desc);
            }
            (Plan::Opened, Reply::Opened { desc, .. }) => self.notify_opened(*desc),
            (Plan::Create { dir, name }, Reply::Entry { ftype, .. }) => {
                self.emit(dir, IN_CREATE | isdir(*ftype), 0, &name);
            }
            (
                Plan::Link {
                    dir,
                    name,
                    ino,
                    from,
                },
                Reply::Linked { replaced },
            ) => {
                let ftype = self
                    .shards
                    .get(&dir)
                    .and_then(|s| s.get(&name))
                    .map_or(FileType::Regular, |d| d.ftype);
                match from {
                    Some((olddir, oldname)) => {
                        let moved = (olddir, oldname.as_slice());
                        // `IN_MOVE_SELF` waits for the old entry to go
                        // (the second half's `Unlink`, below): a watcher
                        // that looks the old name up on it must not find
                        // it (`tail -F`).
                        let victim = replaced.filter(|v| self.owns(v.0));
                        self.emit_move(moved, (dir, &name), ino, ftype, false, victim)
                    }
                    None => {
                        // A hard link changes the file's link count:
                        // `IN_ATTRIB` to watches of the inode itself, not
                        // to its directories', before the `IN_CREATE`
                        // (Linux's `fsnotify_link`). Reported where the inode
                        // lives: a `Link` of an inode owned elsewhere is a
                        // new file placed there by creation affinity (or
                        // a directory), which Linux reports as a creation
                        // only, or a hard link whose count its owner
                        // changed (`Ref`).
                        if ftype != FileType::Directory && ino.owner() == self.cfg.index {
                            self.emit(ino, IN_ATTRIB, 0, b"");
                        }
                        self.emit(dir, IN_CREATE | isdir(ftype), 0, &name);
                    }
                }
            }
            // A hard link whose entry another server holds: its owner
            // reports the count to the inode's watches and the mount's
            // marks (Linux's `fsnotify_link_count`), before the entry's
            // server reports `IN_CREATE`, since the client sends `Ref` first.
            (Plan::LinkCounted { ino }, Reply::Attr(attr)) if attr.ftype != FileType::Directory => {
                self.emit(ino, IN_ATTRIB, 0, b"");
            }
            // The second half of a rename across servers: its names were
            // reported with its first (`Link` with `moved_from`), the
            // file's own move now that the old name is gone.
            (
                Plan::Unlink {
                    moved: Some(ino), ..
                },
                Reply::Unlinked { ftype, .. },
            ) => {
                self.emit(ino, IN_MOVE_SELF | isdir(*ftype), 0, b"");
            }
            (Plan::Unlink { moved: Some(_), .. }, _) => {}
            // The owner reports it after the inode's own events (`Unreffed`).
            (
                Plan::Unlink { .. },
                Reply::Unlinked {
                    freed_here: false, ..
                },
            ) => {}
            (Plan::Unlink { dir, name, .. }, Reply::Unlinked { ftype, .. }) => {
                self.emit(dir, IN_DELETE | isdir(*ftype), 0, &name);
            }
            (
                Plan::Unreffed {
                    dir, name, ftype, ..
                },
                Reply::Ok,
            ) => {
                self.emit(dir, IN_DELETE | isdir(ftype), 0, &name);
            }
            (
                Plan::Rename {
                    olddir,
                    oldname,
                    newdir,
                    newname,
                },
                Reply::Renamed {
                    moved,
                    ftype,
                    replaced,
                },
            ) => {
                // The replaced inode's count, where it lives (its owner
                // reports it otherwise, at the client's `Unref`).
                let victim = replaced.filter(|v| v.2).map(|v| (v.0, v.1));
                let (from, to) = ((olddir, &oldname[..]), (newdir, &newname[..]));
                self.emit_move(from, to, *moved, *ftype, true, victim)
            }
            (Plan::Changed { ino, mask, via }, Reply::Attr(_) | Reply::Ok) if mask != 0 => {
                self.emit_changed_via(ino, mask, via);
            }
            (Plan::Wrote { ino }, Reply::Written(n)) if *n > 0 => self.emit_changed(ino, IN_MODIFY),
            _ => {}
        }
    }

    /// A name moved: `IN_MOVED_FROM` and `IN_MOVED_TO` with one cookie
    /// (unique to this server: its index in the top byte), then the link
    /// count of the `victim` it replaced, owned here (`IN_ATTRIB`), then,
    /// with `self_too`, `IN_MOVE_SELF` for watches of the moved inode, as
    /// Linux's `fsnotify_move`. The victim's end, if it was freed, follows
    /// (`release_freed`).
    fn emit_move(
        &mut self,
        from: (InodeId, &[u8]),
        to: (InodeId, &[u8]),
        ino: InodeId,
        ftype: FileType,
        self_too: bool,
        victim: Option<(InodeId, FileType)>,
    ) {
        self.notify.cookies = (self.notify.cookies + 1) & 0x00ff_ffff;
        let cookie = (self.cfg.index as u32) << 24 | self.notify.cookies;
        self.emit(from.0, IN_MOVED_FROM | isdir(ftype), cookie, from.1);
        self.emit(to.0, IN_MOVED_TO | isdir(ftype), cookie, to.1);
        if let Some((v, vtype)) = victim {
            self.emit(v, IN_ATTRIB | isdir(vtype), 0, b"");
        }
        if self_too {
            self.emit(ino, IN_MOVE_SELF | isdir(ftype), 0, b"");
        }
        self.dnotify_settle();
    }

    /// `ino` (owned here) changed: tell watches of it and of the watched
    /// directories whose entries held here name it.
    pub(super) fn emit_changed(&mut self, ino: InodeId, mask: u32) {
        self.emit_changed_via(ino, mask, None);
    }

    /// [`Self::emit_changed`] for a change made through a description
    /// opened through entry `via` held on another server: that
    /// directory's watchers hear of it too.
    pub(super) fn emit_changed_via(
        &mut self,
        ino: InodeId,
        mask: u32,
        via: Option<(InodeId, Box<[u8]>)>,
    ) {
        if self.notify.watches.is_empty() {
            return;
        }
        let ftype = self.inodes.get(&ino).map_or(FileType::Regular, |i| i.ftype);
        self.index_names();
        let mut names = self.notify.names.get(&ino).cloned().unwrap_or_default();
        if let Some((dir, name)) = via {
            if !names.iter().any(|(d, n)| *d == dir && **n == *name) {
                names.push((dir, name.into_vec()));
            }
        }
        // The parent's watch first, then the inode's, as Linux queues them.
        for (dir, name) in names {
            self.emit_about(dir, ino, mask | isdir(ftype), 0, &name);
        }
        self.emit(ino, mask | isdir(ftype), 0, b"");
    }

    /// Make `names` describe the entries of the watched directories held
    /// here. Rebuilt only when they changed since (a write-heavy watcher,
    /// `tail -f`, then costs one lookup per change): the key is the sum
    /// of the watched shards' next cookies (every insertion moves one),
    /// of their sizes (every removal moves one) and how many there are.
    fn index_names(&mut self) {
        let (mut seq, mut len, mut shards) = (0u64, 0u64, 0usize);
        for dir in self.notify.watches.keys() {
            if let Some(s) = self.shards.get(dir) {
                seq = seq.wrapping_add(s.next_cookie());
                len += s.len() as u64;
                shards += 1;
            }
        }
        let key = Some((seq, len, shards));
        if self.notify.names_key == key {
            return;
        }
        let mut names: Map<InodeId, Vec<(InodeId, Vec<u8>)>> = Map::default();
        for dir in self.notify.watches.keys() {
            if let Some(s) = self.shards.get(dir) {
                for (_, name, d) in s.after(0) {
                    names.entry(d.ino).or_default().push((*dir, name.to_vec()));
                }
            }
        }
        self.notify.names = names;
        self.notify.names_key = key;
    }

    /// [`Self::watched`] for the inode of a description, or its directory
    /// when it was opened through an entry held elsewhere.
    pub(super) fn desc_watched(&self, desc: DescId) -> bool {
        self.descs.get(&desc).is_some_and(|d| {
            d.flags & (OPEN_NONOTIFY | libc::O_PATH as u32) == 0 && self.watched(d.ino)
                || d.via
                    .as_ref()
                    .is_some_and(|(dir, _)| self.notify.watches.contains_key(dir))
        })
    }

    /// Is directory `dir` watched (every server holds its watches)?
    pub(super) fn dir_watched(&self, dir: InodeId) -> bool {
        self.notify.watches.contains_key(&dir)
    }

    /// Would a change of `ino` (owned here) reach a watch held here? Over
    /// all watched directories held here, not only those naming it: cheap
    /// and never stale, and a false yes costs the client one round trip
    /// per write (`InotifyModified`) and waiting closes.
    pub(super) fn watched(&self, ino: InodeId) -> bool {
        self.notify.watches.contains_key(&ino)
            || self.notify.watches.contains_key(&ALL_INODES)
            || self
                .notify
                .watches
                .keys()
                .any(|d| self.shards.contains_key(d))
    }

    /// `ino` is being freed: `IN_DELETE_SELF`, then `IN_IGNORED` for each
    /// of its watches, which go.
    pub(super) fn notify_freed(&mut self, ino: InodeId, ftype: FileType) {
        if !self.notify.watches.contains_key(&ino) && !self.notify.watches.contains_key(&ALL_INODES)
        {
            return;
        }
        if self.freed_held(ino, ftype) {
            return;
        }
        // Linux sets no `IN_ISDIR` on `IN_DELETE_SELF`.
        self.emit(ino, IN_DELETE_SELF, 0, b"");
        // Before the parent's `IN_DELETE`, as Linux orders them.
        for w in self.notify.remove_inode(ino) {
            if w.mask & WATCH_FANOTIFY != 0 {
                continue; // fanotify has no event for a mark gone
            }
            // Tell the queue's owner the watch is gone (`gone.rs`).
            self.mark_gone(w);
            let mut rec = Vec::new();
            encode(&mut rec, w.wd, IN_IGNORED, 0, b"");
            self.append(w.queue, rec);
            self.hold(w.queue);
        }
    }

    /// Append an event to every watch of `watched` that asked for it: an
    /// event on `watched` itself, or (with a name) on an entry of it.
    fn emit(&mut self, watched: InodeId, mask: u32, cookie: u32, name: &[u8]) {
        self.emit_about(watched, watched, mask, cookie, name);
    }

    /// [`Self::emit`] of an event about inode `object`: `watched` itself,
    /// or a child of directory `watched` that changed (named `name`).
    /// fanotify marks' records carry `object`; watches of the whole mount
    /// ([`ALL_INODES`]) take the event once: the one on the object itself,
    /// or, for an entry made, removed or moved, the one on its directory.
    fn emit_about(
        &mut self,
        watched: InodeId,
        object: InodeId,
        mask: u32,
        cookie: u32,
        name: &[u8],
    ) {
        let dirent = IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO;
        let on_object = name.is_empty() || mask & dirent != 0;
        let mut hits: Vec<Watch> = Vec::new();
        for (key, asked) in [(watched, true), (ALL_INODES, on_object)] {
            if let Some(list) = self.notify.watches.get(&key).filter(|_| asked) {
                hits.extend(list.iter().filter(|w| w.mask & mask & WATCH_EVENTS != 0));
            }
        }
        for w in hits {
            if w.mask & WATCH_DNOTIFY != 0 {
                self.dnotify_play(w, mask, cookie, name);
                continue;
            }
            let mut rec = Vec::with_capacity(record_len(name) + OBJECT_LEN);
            if w.mask & WATCH_FANOTIFY != 0 {
                let pid = self.notify.requester;
                encode_object(&mut rec, (w.wd, mask, cookie), object.0, pid, name);
            } else {
                encode(&mut rec, w.wd, mask & !FS_OPEN_EXEC, cookie, name);
            }
            if w.mask & IN_ONESHOT != 0 && !self.oneshot_fires(w) {
                // Another server reported it: this copy goes unheard.
                self.notify.remove(watched, w.queue, w.wd);
                self.hold(w.queue);
                continue;
            }
            self.append(w.queue, rec);
            if w.mask & IN_ONESHOT != 0 {
                let mut rec = Vec::new();
                encode(&mut rec, w.wd, IN_IGNORED, 0, b"");
                self.append(w.queue, rec);
                self.notify.remove(watched, w.queue, w.wd);
                self.hold(w.queue);
            }
        }
    }

    /// The process the next request comes from (`RequestFrame::pid`).
    pub fn set_requester(&mut self, pid: u32) {
        self.notify.requester = pid;
    }

    /// Remember the process of `session` (`Session::pid`), for what is
    /// done in its name when it dies. Hot path: one comparison per request
    /// unless the session or its pid changed.
    pub(super) fn note_requester(&mut self, session: SessionId) {
        let pid = self.notify.requester;
        if pid == 0 || self.notify.last_requester == Some((session, pid)) {
            return;
        }
        self.notify.last_requester = Some((session, pid));
        self.note_session_pid(session, pid);
    }
}

#[cfg(test)]
#[path = "inotify_tests.rs"]
mod tests;
