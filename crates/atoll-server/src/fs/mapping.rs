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
//!  Map{to: self, mapping} ─▶ refs(session, ino) ∪= {mapping} ─▶ Inode::maps += 1 (first)
//!  Map{to: child, mapping} (fork; the caller must hold one itself)
//!  Unmap{mapping} / session death ─▶ refs ∖= {mapping} (all) ─▶ Inode::maps −= 1 (last)
//!        └── Inode::maps == 0: retained blocks released, inode maybe freed
//! ```
//!
//! A reference is the client's number for one `mmap` call (its
//! *mapping*), not a count: the same `Map` or `Unmap` applied twice is
//! applied once. A server killed after journaling one and before its
//! answer leaves its successor answering `EIO`, and the client sends it
//! again (client `forkshare::again`; fos §3.5): the successor, rebuilt
//! from the journal, holds the mapping already (or, for an `Unmap`, no
//! longer) and changes nothing, so no reference counts twice and none is
//! lost, whichever side of the journal the death fell.
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

use super::ordered::Map;

use atoll_proto::{Errno, FileType, InodeId, Reply, SessionId};

use super::{FileServer, R};
use crate::store::BlockStore;

/// Mapping references per `(session, inode)`, for inodes owned here: the
/// client's numbers of the mappings that hold them.
#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Mappings {
    refs: Map<(SessionId, InodeId), Vec<u64>>,
}

impl Mappings {
    /// Does `session` map `ino`?
    pub fn holds(&self, session: SessionId, ino: InodeId) -> bool {
        self.refs.contains_key(&(session, ino))
    }

    /// Does `session` hold `ino` for its mapping `mapping`?
    fn has(&self, session: SessionId, ino: InodeId, mapping: u64) -> bool {
        self.refs
            .get(&(session, ino))
            .is_some_and(|held| held.contains(&mapping))
    }

    /// Add `mapping` (not held yet) to `session`'s references to `ino`;
    /// true when it is the session's first of the inode.
    fn add(&mut self, session: SessionId, ino: InodeId, mapping: u64) -> bool {
        let held = self.refs.entry((session, ino)).or_default();
        held.push(mapping);
        held.len() == 1
    }

    /// Drop `mapping` from `session`'s references to `ino`, if held (an
    /// `Unmap` sent again finds it gone); true when the session's last
    /// one of the inode went.
    fn remove(&mut self, session: SessionId, ino: InodeId, mapping: u64) -> bool {
        let Some(held) = self.refs.get_mut(&(session, ino)) else {
            return false;
        };
        held.retain(|&m| m != mapping);
        if held.is_empty() {
            self.refs.remove(&(session, ino));
            return true;
        }
        false
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
    /// `Request::Map`: `session` (or, at fork, its child `to`) maps `ino`
    /// as its mapping `mapping`.
    pub(super) fn map_inode<'o>(
        &mut self,
        session: SessionId,
        ino: InodeId,
        to: SessionId,
        mapping: u64,
    ) -> R<'o> {
        let i = self.inodes.get(&ino).ok_or(Errno::ENOENT)?;
        if i.ftype != FileType::Regular {
            return Err(Errno::ENODEV);
        }
        if self.maps.has(to, ino, mapping) {
            // Sent again (its answer died with the server that applied
            // it): answered as then, even if the descriptor that entitled
            // it has been closed since.
            return Ok(Reply::Ok);
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
        if to != session {
            self.session_opened(to);
        }
        if self.maps.add(to, ino, mapping) {
            if let Some(i) = self.inodes.get_mut(&ino) {
                i.maps += 1;
            }
        }
        Ok(Reply::Ok)
    }

    /// `Request::Unmap`.
    pub(super) fn unmap_inode<'o>(
        &mut self,
        session: SessionId,
        ino: InodeId,
        mapping: u64,
    ) -> R<'o> {
        if self.maps.remove(session, ino, mapping) {
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
