//! Events of a description's use rather than of a change: its open
//! (`IN_OPEN`, with `FS_OPEN_EXEC` for a program about to run), its reads
//! (`IN_ACCESS`, posted by the client once the bytes are copied) and its
//! last close (`IN_CLOSE_WRITE`/`IN_CLOSE_NOWRITE`); and which server
//! reports an `IN_ONESHOT` watch every server holds.

use atoll_proto::inotify::*;
use atoll_proto::{DescId, InodeId, Reply, SessionId};

use super::Watch;
use crate::fs::{FileServer, R};
use crate::store::BlockStore;

impl<S: BlockStore> FileServer<S> {
    /// A description of `ino` was opened (its reply is going out):
    /// `IN_OPEN`, then `IN_MODIFY` if the open truncated the file, as
    /// Linux orders them. An `O_PATH` description (Linux 6.x sets
    /// `FMODE_NONOTIFY` on those) or a fanotify reader's makes none.
    pub(in crate::fs) fn notify_opened(&mut self, desc: DescId) {
        let truncated = std::mem::take(&mut self.notify.truncated);
        let Some(d) = self.descs.get(&desc) else {
            return;
        };
        if d.flags & (OPEN_NONOTIFY | libc::O_PATH as u32) != 0 {
            return;
        }
        let (ino, via) = (d.ino, d.via.clone());
        let exec = if d.flags & OPEN_EXEC != 0 {
            FS_OPEN_EXEC
        } else {
            0
        };
        self.emit_changed_via(ino, IN_OPEN | exec, via.clone());
        if truncated {
            self.emit_changed_via(ino, IN_MODIFY, via);
        }
    }

    /// A description of `ino` with open flags `flags` died:
    /// `IN_CLOSE_WRITE` if it could write, else `IN_CLOSE_NOWRITE`.
    pub(in crate::fs) fn notify_closed(
        &mut self,
        ino: InodeId,
        (flags, wrote): (u32, bool),
        via: Option<(InodeId, Box<[u8]>)>,
    ) {
        if self.notify.watches.is_empty() || flags & (OPEN_NONOTIFY | libc::O_PATH as u32) != 0 {
            return;
        }
        let mask = if wrote {
            IN_CLOSE_WRITE
        } else {
            IN_CLOSE_NOWRITE
        };
        self.emit_changed_via(ino, mask, via);
    }

    /// May this server report `IN_ONESHOT` watch `w`? Only the first
    /// server to set its bit in the queue's `FIRED` array does, so a
    /// directory's watch fires once (Linux) though every server holds it.
    pub(super) fn oneshot_fires(&mut self, w: Watch) -> bool {
        let tracked = usize::try_from(w.wd).is_ok_and(|wd| wd < FIRED_BITS);
        if !tracked || !self.queue_alive(w.queue) {
            return true;
        }
        // The bit also tells the queue's owner the watch is gone (`gone.rs`).
        self.mark_gone(w)
    }

    /// A read or `getdents` through `desc` returned bytes (`IN_ACCESS`).
    /// `Request::InotifyNamed`: a description made by creation affinity
    /// was opened through `via`, whose `Link` another server just
    /// reported; its later changes go to that directory's watchers too.
    pub(in crate::fs) fn inotify_named<'o>(
        &mut self,
        session: SessionId,
        desc: DescId,
        via: atoll_proto::EntryName<'_>,
    ) -> R<'o> {
        self.desc(session, desc)?;
        if let Some(d) = self.descs.get_mut(&desc) {
            d.via.get_or_insert_with(|| (via.dir, via.name.into()));
        }
        self.notify_opened(desc);
        Ok(Reply::Ok)
    }

    pub(in crate::fs) fn inotify_accessed<'o>(
        &mut self,
        session: SessionId,
        desc: DescId,
    ) -> R<'o> {
        let d = self.desc(session, desc)?;
        if d.flags & (OPEN_NONOTIFY | libc::O_PATH as u32) == 0 {
            let (ino, via) = (d.ino, d.via.clone());
            self.emit_changed_via(ino, IN_ACCESS, via);
        }
        Ok(Reply::Ok)
    }

    /// A write the client made through a mapping or its own copy.
    pub(in crate::fs) fn inotify_modified<'o>(
        &mut self,
        session: SessionId,
        desc: DescId,
    ) -> R<'o> {
        let d = self.desc(session, desc)?;
        let (ino, via) = (d.ino, d.via.clone());
        self.emit_changed_via(ino, atoll_proto::inotify::IN_MODIFY, via);
        Ok(Reply::Ok)
    }
}
