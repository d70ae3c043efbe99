//! Names: lookup, open and create, link, unlink, rename and readdir of the
//! entries held here (Hare §3.4, §3.7).

use super::*;
use atoll_proto::Inherit;

/// What a creation request asks a new inode to be (`MakeNode`,
/// `CreateInode`): its type, the mode asked for with the caller's umask
/// (which the parent's default ACL may replace, `acl`), and a device
/// number or symlink target where the type has one.
#[derive(Clone, Copy)]
pub(super) struct NewNode<'r> {
    pub ftype: FileType,
    pub perm: u32,
    pub umask: u32,
    pub inherit: Inherit<'r>,
    pub rdev: u64,
    pub target: &'r [u8],
}

impl<S: BlockStore> FileServer<S> {
    pub(super) fn lookup<'o>(&self, who: &Caller, dir: InodeId, name: &[u8]) -> R<'o> {
        check_name(name)?;
        if name == b".." {
            if let Some(parent) = self.removed.parent(&dir) {
                // A removed directory a process still holds (its cwd):
                // `..` is the parent it had, as on Linux.
                if let Ok(i) = self.inode(dir) {
                    may(i, who, MAY_EXEC)?;
                }
                return Ok(Reply::Entry {
                    ino: parent,
                    ftype: FileType::Directory,
                });
            }
        }
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
    pub(super) fn open<'o>(
        &mut self,
        session: SessionId,
        who: &Caller,
        dir: InodeId,
        name: &[u8],
        flags: u32,
        (perm, umask, inherit): (u32, u32, Inherit),
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
                let nofollow = flags & libc::O_NOFOLLOW as u32 != 0;
                if nofollow && flags & libc::O_DIRECTORY as u32 != 0 {
                    // Linux checks for a directory before it refuses the
                    // link (`do_open`), with `O_PATH` too.
                    return Err(Errno::ENOTDIR);
                }
                if nofollow && !path {
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
                served: 0,
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
        let from = self.inheritance(dir, who, FileType::Regular, inherit)?;
        self.admit(limits::INODES, 1)?;
        self.admit(limits::NAMES, 1)?;
        let perm = from.perm(FileType::Regular, perm & 0o7777, umask);
        let ino = self.new_inode(who, dir, FileType::Regular, perm, 0, 0);
        self.inherit(ino, from)?;
        if let Some(s) = self.shards.get_mut(&dir) {
            s.insert(name, ino, FileType::Regular);
        }
        // The name appears: sessions that cached its absence forget it.
        self.track.changed(dir, name);
        self.touch_dir(dir);
        // POSIX: a new file is opened with the requested access whatever
        // its mode (`open("f", O_CREAT|O_RDWR, 0444)` succeeds).
        let (desc, attr) = self.open_inode(session, who, ino, flags, false)?;
        Ok(Reply::Opened {
            desc,
            attr,
            created: true,
            watched: self.watched(attr.ino),
            served: 0,
        })
    }

    /// Open a description of an inode owned here.
    pub(super) fn open_inode(
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
            if flags & atoll_proto::OPEN_SEARCH != 0 && check_perm {
                // A working directory (`chdir`): search permission.
                may(i, who, MAY_EXEC)?;
            }
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
                may(i, who, mask)?;
            }
            if (wants_write || trunc) && i.runs > 0 {
                return Err(Errno::ETXTBSY);
            }
            if trunc && i.ftype == FileType::Regular {
                if i.size > 0 && self.notify.busy() {
                    self.notify.truncated = true; // reported after `IN_OPEN`
                }
                // Before the tail is zeroed: a copy under way fails (`leases`).
                self.lease_revoke(ino);
                let i = self.inodes.get_mut(&ino).ok_or(Errno::ENOENT)?;
                i.truncate(&mut self.cache, 0);
                i.modified(now());
                if !who.has(Cred::CAP_FSETID) {
                    i.perm = kill_priv(i.perm);
                }
                // Now: a refusal below leaves the file truncated (`sizes`).
                self.size_changed(ino);
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
                refs: Map::from_iter([(session, 1)]),
                partner_opens,
                via: None,
            },
        );
        if let Some(i) = self.inodes.get_mut(&ino) {
            i.opens += 1;
        }
        Ok((id, self.attr(ino)?))
    }

    pub(super) fn make_node<'o>(
        &mut self,
        who: &Caller,
        dir: InodeId,
        name: &[u8],
        node: NewNode,
        home: u8,
        spread: u8,
    ) -> R<'o> {
        let NewNode {
            ftype,
            perm,
            rdev,
            target,
            ..
        } = node;
        check_name(name)?;
        if is_dot(name) {
            return Err(Errno::EEXIST);
        }
        self.entry_here(dir, name)?;
        // Linux looks the name up (search permission) before it asks for
        // write permission to create it: an existing name is `EEXIST`
        // even where the caller may not write (`filename_create`).
        self.dir_check(dir, who, MAY_EXEC)?;
        if self.shards.get(&dir).is_some_and(|s| s.get(name).is_some()) {
            return Err(Errno::EEXIST);
        }
        self.dir_check(dir, who, MAY_WRITE | MAY_EXEC)?;
        let home = home as usize;
        let perm = match ftype {
            FileType::Directory => {
                // A home among the members, and a width that holds it.
                let spread = spread as usize;
                if home >= self.cfg.nservers.min(MAX_SERVERS)
                    || spread > MAX_SERVERS
                    || (spread != 0 && home >= spread)
                {
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
        let from = self.inheritance(dir, who, ftype, node.inherit)?;
        self.admit(limits::INODES, 1)?;
        self.admit(limits::NAMES, 1)?;
        let perm = from.perm(ftype, perm, node.umask);
        let ino = self.new_inode(who, dir, ftype, perm, home, spread as usize);
        self.inherit(ino, from)?;
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
        // The name appears: sessions that cached its absence forget it.
        self.track.changed(dir, name);
        self.touch_dir(dir);
        Ok(Reply::Entry { ino, ftype })
    }

    /// Whether a directory known here has entries here (directories whose
    /// entries live elsewhere are vouched for by `MarkRmdir`).
    pub(super) fn nonempty_here(&self, dir: InodeId) -> bool {
        self.shards.get(&dir).is_some_and(|s| !s.is_empty())
    }

    /// The entry for `name` is being replaced by an inode of type `new`:
    /// Linux's type rules for the victim.
    pub(super) fn replace_ok(&self, victim: &dir::Dent, new: FileType) -> Result<(), Errno> {
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
    pub(super) fn victim_validated(
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
        if self.adapt.mode(victim.ino).2 {
            return Err(RETRY); // a swap moves its entries: wait
        }
        if self.adapt.distributed(victim.ino) {
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
    pub(super) fn drop_dir_shard(&mut self, dir: InodeId) {
        self.track.dir_gone(dir);
        self.adapt_forget(dir);
        self.marks.remove(&dir);
        let shard = self.shards.remove(&dir);
        if shard.is_some() || dir.home() == self.cfg.index {
            self.shard_removed(dir, shard);
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn link<'o>(
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
        // An existing new name is `EEXIST` before write permission is
        // asked for, as for `MakeNode`.
        self.dir_check(dir, who, MAY_EXEC)?;
        if !replace && self.shards.get(&dir).is_some_and(|s| s.get(name).is_some()) {
            return Err(Errno::EEXIST);
        }
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
        // Replaced, or appearing (a hard link, `O_TMPFILE` linkat, a new
        // name placed by creation affinity, a cross-server rename's new
        // name): either way what sessions cached of it is stale.
        self.track.changed(dir, name);
        if let Some(i) = self.inodes.get_mut(&ino) {
            i.links += 1;
            i.linkable = false;
            i.ctime = now();
        }
        self.lease_sync(ino); // a stale atime now (`leases`)
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

    pub(super) fn unlink<'o>(
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
        if self.shards.get(&dir).and_then(|s| s.get(name)).is_none() {
            // Linux looks the name up (search permission) before it asks
            // for write permission to remove it (`may_delete`): a name
            // that is not there is `ENOENT`, even where the caller may not
            // write (`rm -f` in a read-only directory says nothing).
            self.dir_check(dir, who, MAY_EXEC)?;
            return Err(Errno::ENOENT);
        }
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
            UnlinkKind::Directory if self.child_spread(d.ino).is_err() => return Err(Errno::EMODE),
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
            // The link count, before its end (Linux's `vfs_unlink`); not
            // for `rmdir`, nor for a move's old name (`expect`).
            if kind == UnlinkKind::NonDirectory && expect.is_none() {
                self.notify_link_count(d.ino);
            }
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
    pub(super) fn rename<'o>(
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
        // Linux looks both names up (search permission) before it asks
        // for write permission (`may_delete`, `may_create` in
        // `vfs_rename`): a missing source is `ENOENT`, renaming a file
        // onto itself succeeds, and `RENAME_NOREPLACE` onto an existing
        // name is `EEXIST`, even where the caller may not write.
        self.dir_check(olddir, who, MAY_EXEC)?;
        self.dir_check(newdir, who, MAY_EXEC)?;
        let old = self
            .shards
            .get(&olddir)
            .and_then(|s| s.get(oldname))
            .ok_or(Errno::ENOENT)?;
        let target = self.shards.get(&newdir).and_then(|s| s.get(newname));
        if target.is_some() && flags & RENAME_NOREPLACE != 0 {
            return Err(Errno::EEXIST);
        }
        if target.is_none() && flags & RENAME_EXCHANGE != 0 {
            return Err(Errno::ENOENT);
        }
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
        self.dir_check(olddir, who, MAY_WRITE | MAY_EXEC)?;
        self.dir_check(newdir, who, MAY_WRITE | MAY_EXEC)?;
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
                    may(i, who, MAY_WRITE)?;
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
            may(i, who, MAY_WRITE)?;
        }
        if let Some(s) = self.shards.get_mut(&olddir) {
            s.remove(oldname);
        }
        if let Some(s) = self.shards.get_mut(&newdir) {
            s.insert(newname, old.ino, old.ftype);
        }
        // The new name is replaced or appears: both invalidate.
        self.track.changed(olddir, oldname);
        self.track.changed(newdir, newname);
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
    pub(super) fn relink<'o>(
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
    pub(super) fn reparent(&mut self, d: dir::Dent, parent: InodeId) {
        if d.ftype == FileType::Directory {
            if let Some(s) = self.shards.get_mut(&d.ino) {
                if d.ino.home() == self.cfg.index {
                    s.parent = Some(parent);
                }
            }
        }
    }

    pub(super) fn touch_moved(&mut self, ino: InodeId) {
        if let Some(i) = self.inodes.get_mut(&ino) {
            i.ctime = now();
        }
        self.lease_sync(ino); // a stale atime now (`leases`)
    }

    pub(super) fn readdir<'o>(
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
            watched: self.watched(dir),
        })
    }

    /// A lookup whose answer the session may cache (`track`, Hare §3.7.2).
    pub(super) fn lookup_tracked<'o>(
        &mut self,
        session: SessionId,
        who: &Caller,
        dir: InodeId,
        name: &[u8],
    ) -> R<'o> {
        let r = self.lookup(who, dir, name);
        match r {
            Ok(_) => self.track.record(session, dir, name),
            Err(e) => self.absent_answered(session, dir, name, e),
        }
        r
    }

    /// `Lookup` or `Open` without `O_CREAT` of `(dir, name)` failed with
    /// `e`: an `ENOENT` is an answer the session may cache (`track`), so
    /// record it whatever the reason (no such entry, or the directory is
    /// gone). `.` and `..` are never recorded nor cached.
    pub(super) fn absent_answered(
        &mut self,
        session: SessionId,
        dir: InodeId,
        name: &[u8],
        e: Errno,
    ) {
        if e == Errno::ENOENT {
            self.track.record_absent(session, dir, name);
        }
    }

    /// Open an inode found by a lookup elsewhere; `via` names the entry (for inotify).
    pub(super) fn open_inode_via<'o>(
        &mut self,
        session: SessionId,
        who: &Caller,
        ino: InodeId,
        flags: u32,
        via: Option<atoll_proto::EntryName<'_>>,
    ) -> R<'o> {
        let (desc, attr) = self.open_inode(session, who, ino, flags, true)?;
        if let (Some(v), Some(d)) = (via, self.descs.get_mut(&desc)) {
            d.via = Some((v.dir, v.name.into()));
        }
        Ok(Reply::Opened {
            desc,
            attr,
            created: false,
            watched: self.desc_watched(desc),
            served: 0,
        })
    }

    pub(super) fn count_subdirs<'o>(&mut self, dir: InodeId, delta: i32, epoch: u32) -> R<'o> {
        // Counted in the owner's own shard of the directory, which
        // then holds all its subdirectories (for `nlink` only). A delta
        // from before a swap is in the swap's count already (`adapt`).
        let live = self.inodes.contains_key(&dir) && !self.removed.contains(&dir);
        let (spread, now, _) = self.adapt.mode(dir);
        if self.owns(dir) && spread && live && epoch == now {
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
