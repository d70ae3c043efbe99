//! Namespace operations that span servers and so are protocols the client
//! drives: three-phase rmdir (Hare §3.4.1) and directory moves, and what a
//! dead session leaves half-done of either.

use super::*;

impl<S: BlockStore> FileServer<S> {
    pub(super) fn set_parent<'o>(&mut self, dir: InodeId, parent: InodeId) -> R<'o> {
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
    pub(super) fn mark_rmdir<'o>(&mut self, session: SessionId, dir: InodeId) -> R<'o> {
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
    pub(super) fn finish_rmdir<'o>(
        &mut self,
        session: SessionId,
        dir: InodeId,
        commit: bool,
    ) -> R<'o> {
        if self.marks.get(&dir) != Some(&session) {
            return Err(Errno::EINVAL);
        }
        self.marks.remove(&dir);
        if commit {
            let shard = self.shards.remove(&dir);
            self.shard_removed(dir, shard);
            self.track.dir_gone(dir);
            self.adapt_forget(dir);
        } else if let Some(s) = self.shards.get_mut(&dir) {
            s.marked = false;
        }
        Ok(Reply::Ok)
    }

    /// Is `(dir, name)` the provisional new name of a directory move by a
    /// session other than `session` (see `move_links`)?
    pub(super) fn is_provisional(&self, session: SessionId, dir: InodeId, name: &[u8]) -> bool {
        self.move_links
            .iter()
            .any(|m| m.session != session && m.dir == dir && m.name == name)
    }

    /// A `Unref` (or an `Unlink` that dropped the link here) by `session`
    /// ends the move its directory `Ref` began.
    pub(super) fn forget_move_ref(&mut self, session: SessionId, ino: InodeId) {
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
    pub(super) fn move_settled(
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
    pub(super) fn abandon_namespace_ops(&mut self, session: SessionId) {
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

    /// The lock a client holds across a move of a directory between servers.
    pub(super) fn rename_lock<'o>(&mut self, session: SessionId, acquire: bool) -> R<'o> {
        self.rename_lock = match (acquire, self.rename_lock) {
            (true, None) => Some(session),
            (true, Some(_)) => return Err(RETRY),
            (false, Some(h)) if h == session => None,
            (false, _) => return Err(Errno::EINVAL),
        };
        Ok(Reply::Ok)
    }

    /// The client finished the move that linked `name` here.
    pub(super) fn move_done<'o>(&mut self, session: SessionId, dir: InodeId, name: &[u8]) -> R<'o> {
        self.move_links
            .retain(|m| !(m.session == session && m.dir == dir && m.name == name));
        Ok(Reply::Ok)
    }

    /// One more name for an inode owned here, linked by another server.
    pub(super) fn add_ref<'o>(&mut self, session: SessionId, ino: InodeId) -> R<'o> {
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

    /// One name fewer for an inode owned here, unlinked by another server.
    /// `counted`: a name of it went (an `unlink`, a rename over it), which
    /// its watches hear of (`IN_ATTRIB`) before its end.
    pub(super) fn drop_ref<'o>(
        &mut self,
        session: SessionId,
        ino: InodeId,
        counted: bool,
    ) -> R<'o> {
        self.inode(ino)?;
        self.forget_move_ref(session, ino);
        if counted {
            self.notify_link_count(ino);
        }
        self.drop_link(ino);
        Ok(Reply::Ok)
    }

    /// `Link`, remembering a directory linked here until the client's move
    /// finishes (`MoveDone`), so a dead session's half-done move is undone.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn link_recorded<'o>(
        &mut self,
        session: SessionId,
        who: &Caller,
        dir: InodeId,
        name: &[u8],
        ino: InodeId,
        ftype: FileType,
        replace: bool,
    ) -> R<'o> {
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

    /// `Unlink`, settling the move of a directory whose old name it removes.
    pub(super) fn unlink_settled<'o>(
        &mut self,
        session: SessionId,
        who: &Caller,
        dir: InodeId,
        name: &[u8],
        kind: UnlinkKind,
        expect: Option<InodeId>,
    ) -> R<'o> {
        let r = self.unlink(who, dir, name, kind, expect);
        if let Ok(Reply::Unlinked {
            ino, freed_here, ..
        }) = &r
        {
            self.move_settled(session, dir, name, *ino, *freed_here);
        }
        r
    }
}
