//! `O_TMPFILE`: a regular file born without a name.
//!
//! Life cycle: `CreateTmpfile` makes the inode with link count 0 and one
//! open description. While it has no name it lives as long as its
//! descriptions (the orphan rule of Hare Fig. 3-3, reached from the other
//! side); `linkat` may give it a first name (`Ref` here, or `Link` when the
//! entry lives here too) unless it was made with `O_EXCL`, as Linux's
//! `I_LINKABLE`. After that it is an ordinary file.

use atoll_proto::{Errno, FileType, Inherit, InodeId, Reply, SessionId};

use super::perm::{Caller, MAY_EXEC, MAY_WRITE};
use super::{FileServer, R};
use crate::store::BlockStore;

impl<S: BlockStore> FileServer<S> {
    /// `Request::CreateTmpfile` (at the directory's owner, which checks
    /// write and search permission on it as Linux's `vfs_tmpfile`).
    pub(super) fn create_tmpfile<'o>(
        &mut self,
        session: SessionId,
        who: &Caller,
        dir: InodeId,
        perm: u32,
        umask: u32,
        flags: u32,
    ) -> R<'o> {
        let acc = flags & libc::O_ACCMODE as u32;
        if acc != libc::O_WRONLY as u32 && acc != libc::O_RDWR as u32 {
            return Err(Errno::EINVAL);
        }
        if !self.owns(dir) {
            return Err(Errno::EPROTO); // the client asks the owner
        }
        self.dir_check(dir, who, MAY_WRITE | MAY_EXEC)?;
        let from = self.inheritance(dir, who, FileType::Regular, Inherit::Unread)?;
        let perm = from.perm(FileType::Regular, perm & 0o7777, umask);
        let ino = self.new_inode(who, dir, FileType::Regular, perm, self.cfg.index, 0);
        self.inherit(ino, from)?;
        if let Some(i) = self.inodes.get_mut(&ino) {
            i.links = 0;
            i.linkable = flags & libc::O_EXCL as u32 == 0;
        }
        let open = flags & !(libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC) as u32;
        match self.open_inode(session, who, ino, open, false) {
            Ok((desc, attr)) => Ok(Reply::Opened {
                desc,
                attr,
                created: true,
                watched: self.watched(attr.ino),
                served: 0,
            }),
            Err(e) => {
                self.maybe_free(ino);
                Err(e)
            }
        }
    }
}
