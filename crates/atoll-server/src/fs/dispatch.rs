//! One request to the method that serves it: the table of every request
//! a file server answers (the handlers live in the modules named by idea).

use super::*;

impl<S: BlockStore> FileServer<S> {
    pub(super) fn dispatch<'o>(
        &mut self,
        session: SessionId,
        who: &Caller,
        req: Request<'_>,
        out: &'o mut Vec<u8>,
    ) -> R<'o> {
        use Request as Q;
        match req {
            Q::SetGroups { set, groups } => self.set_groups(session, set, groups),
            Q::Lookup { dir, name } => self.lookup_tracked(session, who, dir, name),
            Q::Open {
                dir,
                name,
                flags,
                perm,
                umask,
                inherit,
            } => {
                let mode = (perm, umask, inherit);
                let r = self.open(session, who, dir, name, flags, mode, out);
                match &r {
                    Ok(Reply::Opened { created, .. }) => self.coalesced.opened(*created),
                    Err(e) if flags & libc::O_CREAT as u32 == 0 => {
                        self.absent_answered(session, dir, name, *e)
                    }
                    _ => {}
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
                spread,
                umask,
                inherit,
            } => {
                let node = NewNode {
                    ftype,
                    perm,
                    umask,
                    inherit,
                    rdev,
                    target,
                };
                let r = self.make_node(who, dir, name, node, home, spread);
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
            } => self.link_recorded(session, who, dir, name, ino, ftype, replace),
            Q::Unlink {
                dir,
                name,
                kind,
                expect,
            } => self.unlink_settled(session, who, dir, name, kind, expect),
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
                epoch,
            } => {
                if !self.removed.contains(&dir) {
                    self.adapt.check_epoch(dir, epoch)?;
                }
                self.readdir(dir, cookie, max_bytes, out)
            }
            Q::SetParent { dir, parent } => self.set_parent(dir, parent),
            Q::MarkRmdir { dir, epoch } => {
                if !self.removed.contains(&dir) {
                    self.adapt.check_epoch(dir, epoch)?;
                }
                self.mark_rmdir(session, dir)
            }
            Q::FinishRmdir { dir, commit } => self.finish_rmdir(session, dir, commit),
            Q::Relink {
                dir,
                name,
                ino,
                ftype,
                expect,
            } => self.relink(session, who, dir, name, (ino, ftype), expect),
            Q::RenameLock { acquire } => self.rename_lock(session, acquire),
            Q::MoveDone { dir, name } => self.move_done(session, dir, name),
            Q::GetAttr { ino } => {
                let a = self.attr(ino)?;
                // Its size is asked: the next ask may need no message.
                self.claim_size_slot(ino);
                Ok(Reply::Attr(a))
            }
            Q::Touched { dir, at } => self.touched(who, dir, at),
            Q::SetAttr { ino, set, .. } => self.set_attr(session, who, ino, set, None),
            Q::SetAttrPosted { ino, set, at, .. } => {
                self.set_attr(session, who, ino, set, Some(at))
            }
            Q::Access { ino, mask } => self.access(who, ino, mask),
            Q::ReadLink { ino } => self.read_link(ino, out),
            Q::Ref { ino, .. } => self.add_ref(session, ino),
            Q::Unref { ino, via, replaced } => {
                // An unlink's name elsewhere counts for a non-directory
                // (`rmdir` reports no link count), a rename's for any.
                let ftype = self.inodes.get(&ino).map(|i| i.ftype);
                let counted = replaced || via.is_some() && ftype != Some(FileType::Directory);
                self.drop_ref(session, ino, counted)
            }
            Q::OpenInode { ino, flags, via } => self.open_inode_via(session, who, ino, flags, via),
            Q::GetXattr { ino, name } => self.get_xattr(who, ino, name, out),
            Q::SetXattr {
                ino,
                name,
                value,
                flags,
                ..
            } => self.set_xattr(who, ino, name, Some(value), flags),
            Q::ListXattr { ino } => self.list_xattr(who, ino, out),
            Q::RemoveXattr { ino, name, .. } => self.set_xattr(who, ino, name, None, 0),
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
                let r = self.map_blocks(ino, offset, len, allocate);
                if let Ok(Reply::Extents { len, .. }) = &r {
                    // A mapping shares the blocks it names (Cosh §5).
                    self.transfers.count_share(*len);
                }
                r
            }
            Q::Read { desc, len, offset } => self.read_extents(session, desc, len, offset),
            Q::Write {
                desc,
                len,
                offset,
                fsize,
            } => self.write_extents(session, who, desc, len, offset, fsize),
            Q::ReadData {
                desc,
                len,
                offset,
                report,
            } => self.read_data(session, desc, (len, offset), report, out),
            Q::WriteData {
                desc,
                data,
                offset,
                fsize,
                chain,
            } => self.write_data(session, who, desc, data, offset, fsize, chain),
            Q::Seek {
                desc,
                offset,
                whence,
            } => self.seek(session, desc, offset, whence),
            Q::SetFlags { desc, flags } => self.set_flags(session, desc, flags),
            Q::Share { desc, to, held } => self.share(session, desc, to, held),
            Q::Receive { desc, from } => self.receive(session, desc, from),
            Q::Close { desc } => self.close(session, desc),
            Q::SetLock { desc, lock } => self.set_lock(session, desc, &lock),
            Q::GetLock { desc, lock } => self.get_lock(session, desc, &lock),
            Q::StatFs => self.statfs(),
            Q::Stats => Ok(Reply::Stats(self.stats())),
            Q::Pipe { flags } => self.pipe_create(session, who, flags),
            Q::PipeHeader { desc } => self.pipe_header(session, desc),
            Q::InotifyInit { flags, max_events } => {
                self.inotify_init(session, who, flags, max_events)
            }
            Q::InotifyAddWatch { desc, ino, mask } => {
                self.inotify_add_watch(session, desc, ino, mask)
            }
            Q::InotifyRmWatch { desc, wd } => self.inotify_rm_watch(session, desc, wd),
            Q::InotifyModified { desc } => self.inotify_modified(session, desc),
            Q::InotifyAccessed { desc } => self.inotify_accessed(session, desc),
            Q::InotifyNamed { desc, via } => self.inotify_named(session, desc, via),
            Q::WriteDone { ino, offset, len } => self.write_done(session, ino, offset, len),
            Q::InotifyRegister {
                queue,
                ino,
                wd,
                mask,
            } => self.inotify_register(queue, ino, wd, mask),
            Q::DnotifyRegister {
                queue,
                ino,
                wd,
                shadow,
            } => self.dnotify_register(queue, ino, wd, shadow),
            Q::Reclaim { desc } => self.reclaim(session, desc),
            Q::ClientCounters(k) => {
                self.client_counters.add(session, &k);
                Ok(Reply::Ok)
            }
            Q::CreateInode {
                dir,
                name,
                ftype,
                perm,
                rdev,
                target,
                open,
                umask,
                inherit,
            } => {
                let node = NewNode {
                    ftype,
                    perm,
                    umask,
                    inherit,
                    rdev,
                    target,
                };
                self.create_inode(session, who, (dir, name), node, open)
            }
            Q::Adopt { ino } => self.adopt(session, ino),
            Q::CreateTmpfile {
                dir,
                perm,
                flags,
                umask,
            } => self.create_tmpfile(session, who, dir, perm, umask, flags),
            Q::PassLocks { to } => self.pass_locks(session, to),
            Q::Map { ino, to, mapping } => self.map_inode(session, ino, to, mapping),
            Q::Unmap { ino, mapping } => self.unmap_inode(session, ino, mapping),
            Q::Exec { ino, to } => self.exec_inode(ino, to),
            Q::Subdirs { dir, delta, epoch } => self.count_subdirs(dir, delta, epoch),
            Q::DirMode { dir } => self.dir_mode(dir),
            Q::Adapt { dir, step } => self.adapt_step(session, who, dir, step, out),
            Q::PipeRead { desc, len } => self.pipe_read_copy(session, desc, len, out),
            Q::PipeWrite { desc, data } => self.pipe_write_copy(session, desc, data),
            Q::PipeState { desc } => self.pipe_state(session, desc),
            Q::PipeSetSize { desc, size } => self.pipe_set_size(session, who, desc, size),
            Q::Names { ino } => self.names_of(ino, out),
            Q::SessionEnded { session: ended } => self.session_ended(ended),
        }
    }
}
