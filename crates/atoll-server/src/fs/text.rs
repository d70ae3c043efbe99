//! Programs that run: Linux's `ETXTBSY`.
//!
//! A process runs an atoll program from a copy (the client copies the image
//! into a memfd for `execveat`), so writing the file would not disturb it —
//! but Linux refuses to open a running program for writing or to truncate
//! it (`ETXTBSY`), and refuses to run one that is open for writing
//! (`deny_write_access`), and build tools and conformance suites rely on
//! both. So the owner counts which session runs which inode, as it counts
//! mappings (`mapping`):
//!
//! ```text
//!  Exec{ino, to} ─▶ refs(to, ino) += 1 ─▶ Inode::runs += 1 (first)
//!  session `to` ends (exit, next exec, kill) ─▶ refs gone ─▶ runs −= 1
//! ```

use super::seeded::Map;

use atoll_proto::{Errno, FileType, InodeId, Reply, SessionId};

use super::{FileServer, R};
use crate::store::BlockStore;

/// Which session runs which inode owned here.
#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Texts {
    refs: Map<(SessionId, InodeId), u32>,
}

impl<S: BlockStore> FileServer<S> {
    /// `Request::Exec`.
    pub(super) fn exec_inode<'o>(&mut self, ino: InodeId, to: SessionId) -> R<'o> {
        if self.inode(ino)?.ftype != FileType::Regular {
            return Err(Errno::EACCES);
        }
        if self.descs.values().any(|d| d.ino == ino && d.writable()) {
            return Err(Errno::ETXTBSY);
        }
        let n = self.texts.refs.entry((to, ino)).or_insert(0);
        *n += 1;
        if *n == 1 {
            if let Some(i) = self.inodes.get_mut(&ino) {
                i.runs += 1;
            }
        }
        self.session_opened(to);
        Ok(Reply::Ok)
    }

    /// Session `session` ended: it runs nothing any more.
    pub(super) fn drop_texts(&mut self, session: SessionId) {
        let gone: Vec<InodeId> = self
            .texts
            .refs
            .keys()
            .filter(|(s, _)| *s == session)
            .map(|(_, ino)| *ino)
            .collect();
        for ino in gone {
            self.texts.refs.remove(&(session, ino));
            if let Some(i) = self.inodes.get_mut(&ino) {
                i.runs = i.runs.saturating_sub(1);
            }
        }
    }
}
