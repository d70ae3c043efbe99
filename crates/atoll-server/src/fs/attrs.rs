//! Attributes: `SetAttr` (chmod, chown, utimes, truncate) and `Access`.

use super::*;

impl<S: BlockStore> FileServer<S> {
    /// `at`: the client's clock at the call, for a posted change
    /// (`Request::SetAttrPosted`): its `ctime` and `UTIME_NOW` times,
    /// which must not be when the frame happened to be served (after the
    /// call returned). No later than now (a client may not date an inode
    /// ahead), and `ctime` never goes back for it.
    pub(super) fn set_attr<'o>(
        &mut self,
        session: SessionId,
        who: &Caller,
        ino: InodeId,
        set: SetAttr,
        at: Option<Timespec>,
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
                may(i, who, MAY_WRITE)?;
            }
        }
        let explicit = matches!(set.atime, TimeSet::Set(_)) || matches!(set.mtime, TimeSet::Set(_));
        let any_time = set.atime != TimeSet::Omit || set.mtime != TimeSet::Omit;
        if explicit && !who.owns(i.uid) {
            return Err(Errno::EPERM);
        }
        if any_time && !explicit && !who.owns(i.uid) && may(i, who, MAY_WRITE).is_err() {
            return Err(Errno::EACCES);
        }
        if set.size.is_some() {
            // Before a truncated tail is zeroed: a copy under way fails
            // (`leases`).
            self.lease_revoke(ino);
        }
        let t = match (now(), at) {
            (n, Some(at)) if older(at, n) => at,
            (n, _) => n,
        };
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
            // The access ACL's owner, group-class and other entries are
            // the mode's bits (`posix_acl_chmod`).
            if let Some(a) = i.xattrs.get_mut(acl::ACL_ACCESS) {
                *a = acl::chmod(a, p);
            }
            changed = true;
        }
        if let Some(size) = set.size {
            i.truncate(&mut self.cache, size);
            i.mtime = t;
            i.mtime_set = t;
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
        if set.mtime != TimeSet::Omit {
            i.mtime_set = t;
        }
        if (changed || any_time) && (at.is_none() || older(i.ctime, t)) {
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
        if set.size.is_some() {
            self.size_changed(ino); // before the reply (`sizes`)
        }
        Ok(Reply::Attr(self.attr(ino)?))
    }

    /// `Touched`: a name in `dir` changed at `at` on another server (the
    /// client's clock when that server answered). mtime and ctime become
    /// `at` unless something wrote mtime here after it — the request is
    /// posted, so a `utimensat` that another process made once it saw the
    /// change (rsync's generator fixing a directory's time after its
    /// receiver filled it) may be served first and must win, as on Linux
    /// where the change came first. `at` is no later than this server's
    /// now, so a client cannot date a directory it may only write into.
    pub(super) fn touched<'o>(&mut self, who: &Caller, dir: InodeId, at: Timespec) -> R<'o> {
        let i = self.inode(dir)?;
        if !who.owns(i.uid) && may(i, who, MAY_WRITE).is_err() {
            return Err(Errno::EACCES);
        }
        let t = now();
        let at = if older(t, at) { t } else { at };
        let i = self.inodes.get_mut(&dir).ok_or(Errno::ENOENT)?;
        if !older(at, i.mtime_set) {
            i.mtime = at;
            i.mtime_set = at;
        }
        if older(i.ctime, at) {
            i.ctime = at;
        }
        Ok(Reply::Attr(self.attr(dir)?))
    }

    pub(super) fn access<'o>(&self, who: &Caller, ino: InodeId, mask: u32) -> R<'o> {
        if mask & !7 != 0 {
            return Err(Errno::EINVAL);
        }
        let i = self.inode(ino)?;
        if mask != 0 {
            may(i, who, mask)?;
        }
        Ok(Reply::Ok)
    }

    /// The target of a symlink (or the path a socket was bound to).
    pub(super) fn read_link<'o>(&self, ino: InodeId, out: &'o mut Vec<u8>) -> R<'o> {
        let i = self.inode(ino)?;
        if !matches!(i.ftype, FileType::Symlink | FileType::Socket) {
            return Err(Errno::EINVAL);
        }
        self.read_target(i, out);
        Ok(Reply::Target(out))
    }

    /// `Request::Names`: every entry held here that names `ino`, packed
    /// (`atoll_proto::pack_name`). A file's names may be in the shards of
    /// any server (Hare §3.4), so the client asks each; nothing names a
    /// file here that no shard lists, so the entries are the truth, never
    /// a copy to keep up to date.
    pub(super) fn names_of<'o>(&self, ino: InodeId, out: &'o mut Vec<u8>) -> R<'o> {
        out.clear();
        for (dir, shard) in self.shards.iter() {
            for name in shard.naming(ino) {
                atoll_proto::pack_name(out, *dir, name);
            }
        }
        Ok(Reply::Names(out))
    }

    pub(super) fn statfs<'o>(&self) -> R<'o> {
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
}
