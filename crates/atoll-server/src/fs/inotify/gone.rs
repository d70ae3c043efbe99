//! A watched inode losing a name, or its life, in Linux's order.
//!
//! * A name removed (`unlink`, a rename over it) changes the inode's link
//!   count: `IN_ATTRIB` to its watches (Linux's `fsnotify_link_count`),
//!   before its `IN_DELETE_SELF` and its directory's `IN_DELETE`; `rmdir`
//!   reports none.
//! * A rename over a name reports the directories' `IN_MOVED_FROM` and
//!   `IN_MOVED_TO` first, then the replaced inode's `IN_ATTRIB`, the moved
//!   inode's `IN_MOVE_SELF`, and only then the replaced inode's
//!   `IN_DELETE_SELF` and `IN_IGNORED` (`fsnotify_move`, then the last
//!   `dput` of the replaced dentry). The replaced inode is freed inside
//!   the rename, so its end is held ([`Notify::freed_later`]) until the
//!   rename's own events are out.
//! * A watch that went with its inode (or an `IN_ONESHOT` watch that
//!   fired) sets its bit in the queue header's `FIRED` array, where the
//!   queue's owner, which hands out and removes watch descriptors, finds
//!   it: `inotify_rm_watch` of it is then `EINVAL` with no second
//!   `IN_IGNORED`, as Linux, whose mark went with the inode. Servers never
//!   message each other (Hare §6.2.3): the header is where they agree.

use atoll_proto::inotify::{FIRED, FIRED_BITS, IN_ATTRIB};
use atoll_proto::{FileType, InodeId, QueueRef};

use super::{isdir, Plan, Watch};
use crate::fs::FileServer;
use crate::store::BlockStore;

impl<S: BlockStore> FileServer<S> {
    /// Before a request: a rename, or a cross-server rename's `Link`,
    /// may free the inode it replaces; hold that inode's `IN_DELETE_SELF`
    /// until [`Self::release_freed`].
    pub(in crate::fs) fn hold_freed(&mut self, plan: Option<&Plan>) {
        self.notify.hold_freed = matches!(
            plan,
            Some(Plan::Rename { .. } | Plan::Link { from: Some(_), .. })
        );
    }

    /// After a request's events: the ends held back, in order.
    pub(in crate::fs) fn release_freed(&mut self) {
        self.notify.hold_freed = false;
        for (ino, ftype) in std::mem::take(&mut self.notify.freed_later) {
            self.notify_freed(ino, ftype);
        }
    }

    /// `notify_freed` while a rename's events wait: the inode's end is
    /// held (its watches stay until then). True when held.
    pub(super) fn freed_held(&mut self, ino: InodeId, ftype: FileType) -> bool {
        if self.notify.hold_freed {
            self.notify.freed_later.push((ino, ftype));
        }
        self.notify.hold_freed
    }

    /// A name of `ino` (owned here) went: `IN_ATTRIB` (with `IN_ISDIR`
    /// for a directory a rename replaced) to watches of the inode itself.
    pub(in crate::fs) fn notify_link_count(&mut self, ino: InodeId) {
        if self.notify.watches.is_empty() {
            return;
        }
        let ftype = self.inodes.get(&ino).map_or(FileType::Regular, |i| i.ftype);
        self.emit(ino, IN_ATTRIB | isdir(ftype), 0, b"");
    }

    /// Set watch `w`'s bit in its queue's `FIRED` array; true if this
    /// call set it (false: set already, or past the array, or the queue
    /// is dead).
    pub(super) fn mark_gone(&mut self, w: Watch) -> bool {
        let Some((off, bit)) = fired_bit(w.wd) else {
            return false;
        };
        if !self.queue_alive(w.queue) {
            return false;
        }
        let st = &mut self.cache.store;
        loop {
            let v = st.get_u32(w.queue.header, off);
            if v & bit != 0 {
                return false;
            }
            if st.cas_u32(w.queue.header, off, v, v | bit) {
                return true;
            }
        }
    }

    /// Has watch `wd` of `queue` gone on some server ([`Self::mark_gone`])?
    pub(super) fn watch_gone(&self, queue: QueueRef, wd: i32) -> bool {
        fired_bit(wd)
            .is_some_and(|(off, bit)| self.cache.store.get_u32(queue.header, off) & bit != 0)
    }
}

/// Where watch descriptor `wd`'s bit is in a queue header's `FIRED`
/// array: (word offset, bit). None past the array's [`FIRED_BITS`]
/// (such a watch is not known gone: its removal succeeds as before).
fn fired_bit(wd: i32) -> Option<(usize, u32)> {
    let wd = usize::try_from(wd).ok().filter(|&w| w < FIRED_BITS)?;
    Some((FIRED + 4 * (wd / 32), 1u32 << (wd % 32)))
}
