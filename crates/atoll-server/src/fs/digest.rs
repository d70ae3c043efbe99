//! A server's whole state as text, for tests that compare two servers
//! (a live one and the one rebuilt from its journal, `crate::journal`).

use std::fmt::Write;

use super::FileServer;
use crate::store::BlockStore;

impl<S: BlockStore> FileServer<S> {
    /// Everything that decides this server's future answers, in a stable
    /// order: inodes, directory shards, descriptions, counters, free list.
    pub fn state_digest(&self) -> String {
        let mut out = String::new();
        let mut inodes: Vec<_> = self.inodes.iter().collect();
        inodes.sort_by_key(|(id, _)| **id);
        for (id, i) in inodes {
            let _ = writeln!(
                out,
                "inode {id:?} {:?} {:o} {}:{} links={} size={} a={:?} m={:?} c={:?} \
                 blocks={:?} target={:?}/{} xattrs={:?} opens={} deferred={:?} maps={}",
                i.ftype,
                i.perm,
                i.uid,
                i.gid,
                i.links,
                i.size,
                i.atime,
                i.mtime,
                i.ctime,
                i.blocks,
                i.target,
                i.target_len,
                i.xattrs,
                i.opens,
                i.deferred,
                i.maps,
            );
        }
        let mut shards: Vec<_> = self.shards.iter().collect();
        shards.sort_by_key(|(id, _)| **id);
        for (id, s) in shards {
            let mut names: Vec<_> = s.names().collect();
            names.sort();
            let _ = writeln!(
                out,
                "shard {id:?} parent={:?} marked={} subdirs={} {names:?}",
                s.parent, s.marked, s.subdirs
            );
        }
        let mut descs: Vec<_> = self.descs.iter().collect();
        descs.sort_by_key(|(id, _)| **id);
        for (id, d) in descs {
            let mut refs: Vec<_> = d.refs.iter().collect();
            refs.sort();
            let _ = writeln!(
                out,
                "desc {id:?} {:?} flags={:o} offset={} refs={refs:?}",
                d.ino, d.flags, d.offset
            );
        }
        let mut sessions: Vec<_> = self.sessions.keys().collect();
        sessions.sort();
        let _ = writeln!(
            out,
            "next serial={} desc={} sessions={sessions:?} free={:?} held={:?}",
            self.next_serial,
            self.next_desc,
            self.cache.free_list(),
            self.held(),
        );
        out
    }
}
