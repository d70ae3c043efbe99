//! Memory mappings of files owned here: which session maps which inode.
//!
//! A `MAP_SHARED` mapping of an atoll file maps the buffer-cache pages
//! themselves (Hare §3.3), and a `MAP_PRIVATE` one maps them copy-on-write,
//! so a process keeps reaching a block for as long as its mapping lasts,
//! without asking this server again. Were the block freed (unlink and last
//! close, truncate, hole punch) and handed to another file, a store through
//! the stale page would land in that file, and a load would read it.
//!
//! So mappings are references, as open descriptions are (Hare §3.5), kept
//! per session:
//!
//! ```text
//!  Map{to: self} ─▶ refs(session, ino) += 1 ─▶ Inode::maps += 1 (first)
//!  Map{to: child} (fork; the caller must hold one itself)
//!  Unmap / session death ─▶ refs −= 1 (all) ─▶ Inode::maps −= 1 (last)
//!        └── Inode::maps == 0: retained blocks released, inode maybe freed
//! ```
//!
//! The client sends `Map` before it asks for blocks (`MapBlocks` answers
//! `EBADF` without a reference, so no block reaches a mapping unheld), one
//! per `mmap` call, and `Unmap` once the kernel unmapped the last page of
//! that call (client `mapping.rs`). While `Inode::maps > 0`, the inode
//! gives up no block: truncate and hole punch zero blocks in place and
//! retain them at their offsets, and shared mappings of holes get retained
//! blocks, so every mapping and every later write meet in one block per
//! offset, as in Linux's page cache (`super::retain`). A stale page of
//! offset 0 never becomes offset 8192 of the same file, nor any offset of
//! another. The inode itself outlives its last link and last close
//! ([`FileServer::maybe_free`]).
//!
//! Where atoll departs from Linux: after a shrinking truncate, Linux gives
//! `SIGBUS` to an access past the new end of file. Here the page keeps its
//! (zeroed, retained) block: loads see zeros, stores are never file data
//! (an extension zeroes them, the last unmap frees the block).

use super::seeded::Map;

use atoll_proto::{Errno, FileType, InodeId, Reply, SessionId};

use super::{FileServer, R};
use crate::store::BlockStore;

/// Mapping references per `(session, inode)`, for inodes owned here.
#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Mappings {
    refs: Map<(SessionId, InodeId), u32>,
}

impl Mappings {
    /// Does `session` map `ino`?
    pub fn holds(&self, session: SessionId, ino: InodeId) -> bool {
        self.refs.contains_key(&(session, ino))
    }

    /// How many references `session` holds to `ino`.
    fn count(&self, session: SessionId, ino: InodeId) -> u32 {
        self.refs.get(&(session, ino)).copied().unwrap_or(0)
    }

    /// One more reference; true when it is the inode's first from this
    /// session.
    fn add(&mut self, session: SessionId, ino: InodeId) -> bool {
        let n = self.refs.entry((session, ino)).or_insert(0);
        *n += 1;
        *n == 1
    }

    /// One reference less; true when the session's last one went.
    fn remove(&mut self, session: SessionId, ino: InodeId) -> Result<bool, Errno> {
        let n = self.refs.get_mut(&(session, ino)).ok_or(Errno::EINVAL)?;
        *n -= 1;
        if *n == 0 {
            self.refs.remove(&(session, ino));
            return Ok(true);
        }
        Ok(false)
    }

    /// Forget every reference of `session`; the inodes it mapped.
    fn drop_session(&mut self, session: SessionId) -> Vec<InodeId> {
        let gone: Vec<InodeId> = self
            .refs
            .keys()
            .filter(|(s, _)| *s == session)
            .map(|&(_, ino)| ino)
            .collect();
        for ino in &gone {
            self.refs.remove(&(session, *ino));
        }
        gone
    }
}

impl<S: BlockStore> FileServer<S> {
    /// `Request::Map`: `session` (or, at fork, its child `to`, which holds
    /// `held` references before this one) maps `ino`.
    pub(super) fn map_inode<'o>(
        &mut self,
        session: SessionId,
        ino: InodeId,
        to: SessionId,
        held: Option<u32>,
    ) -> R<'o> {
        let i = self.inodes.get(&ino).ok_or(Errno::ENOENT)?;
        if i.ftype != FileType::Regular {
            return Err(Errno::ENODEV);
        }
        // `mmap` needs a descriptor, and a child inherits only what its
        // parent maps: no session pins blocks of a file it never opened.
        let entitled = if to == session {
            self.descs
                .values()
                .any(|d| d.ino == ino && d.refs.contains_key(&session))
        } else {
            self.maps.holds(session, ino)
        };
        if !entitled {
            return Err(Errno::EBADF);
        }
        if let Some(held) = held {
            // Idempotent, as `Share` is: a retry after the server that
            // applied it died changes nothing (fos §3.5).
            let n = self.maps.count(to, ino);
            if n == held.saturating_add(1) {
                return Ok(Reply::Ok);
            }
            if n != held {
                return Err(Errno::ESTALE);
            }
        }
        if to != session {
            self.session_opened(to);
        }
        if self.maps.add(to, ino) {
            if let Some(i) = self.inodes.get_mut(&ino) {
                i.maps += 1;
            }
        }
        Ok(Reply::Ok)
    }

    /// `Request::Unmap`.
    pub(super) fn unmap_inode<'o>(&mut self, session: SessionId, ino: InodeId) -> R<'o> {
        if self.maps.remove(session, ino)? {
            self.mapping_gone(ino);
        }
        Ok(Reply::Ok)
    }

    /// `session` died: its mappings died with its process (`exit`, a
    /// successful `execve`, `SIGKILL`).
    pub(super) fn drop_mappings(&mut self, session: SessionId) {
        for ino in self.maps.drop_session(session) {
            self.mapping_gone(ino);
        }
    }

    /// A session stopped mapping `ino`: after the last one, parked blocks
    /// may be reused and an unlinked, closed inode dies.
    fn mapping_gone(&mut self, ino: InodeId) {
        let Some(i) = self.inodes.get_mut(&ino) else {
            return;
        };
        i.maps = i.maps.saturating_sub(1);
        if i.maps == 0 {
            i.release_retained(&mut self.cache);
            self.maybe_free(ino);
        }
    }
}
