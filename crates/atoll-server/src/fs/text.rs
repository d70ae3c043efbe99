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
//!  Exec{ino, to} ─▶ runs ∪= {(to, ino)} ─▶ Inode::runs += 1 (first)
//!  session `to` ends (exit, next exec, kill) ─▶ marks gone ─▶ runs −= 1
//! ```
//!
//! `to` is the session made for the new image, sent one `Exec` only; the
//! mark is set once, so an `Exec` sent again — its answer was lost with a
//! server killed after journaling it (fos §3.5) — finds it set and changes
//! nothing. It is not refused then either: the writer that would make it
//! `ETXTBSY` could not open since the first send.

use super::ordered::Set;

use atoll_proto::{Errno, FileType, InodeId, Reply, SessionId};

use super::{FileServer, R};
use crate::store::BlockStore;

/// Which session runs which inode owned here.
#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Texts {
    runs: Set<(SessionId, InodeId)>,
}

impl<S: BlockStore> FileServer<S> {
    /// `Request::Exec`.
    pub(super) fn exec_inode<'o>(&mut self, ino: InodeId, to: SessionId) -> R<'o> {
        if self.inode(ino)?.ftype != FileType::Regular {
            return Err(Errno::EACCES);
        }
        if self.texts.runs.contains(&(to, ino)) {
            return Ok(Reply::Ok); // sent again: applied before a death
        }
        if self.descs.values().any(|d| d.ino == ino && d.writable()) {
            return Err(Errno::ETXTBSY);
        }
        self.texts.runs.insert((to, ino));
        if let Some(i) = self.inodes.get_mut(&ino) {
            i.runs += 1;
        }
        self.session_opened(to);
        Ok(Reply::Ok)
    }

    /// Session `session` ended: it runs nothing any more.
    pub(super) fn drop_texts(&mut self, session: SessionId) {
        let gone: Vec<InodeId> = self
            .texts
            .runs
            .iter()
            .filter(|(s, _)| *s == session)
            .map(|(_, ino)| *ino)
            .collect();
        for ino in gone {
            self.texts.runs.remove(&(session, ino));
            if let Some(i) = self.inodes.get_mut(&ino) {
                i.runs = i.runs.saturating_sub(1);
            }
        }
    }
}
