//! `--without coalescing` (Hare §3.7.4 ablation): `open` with `O_CREAT`
//! as separate messages, as Hare's RPC list has them, instead of the one
//! coalesced `Open` that finds, creates and opens at the entry's server:
//! `Lookup` (RESOLVE) of the name; if it exists, `OpenInode` at its owner;
//! if not, `MakeNode` (CREATE + ADD_MAP) and then `OpenInode` (OPEN).
//! Only used to measure what coalescing saves.
//!
//! Deviations from the coalesced path (acceptable for an ablation): a new
//! file whose mode denies its creator the requested access cannot be
//! opened by the second message (`EACCES`), and symlinks and special
//! names are left to the coalesced path.

use atoll_proto::{Attr, DescId, FileType, InodeId, Reply, Request};

use crate::error::{err, Error, Result};
use crate::session::Client;
use crate::walk::Walker;

/// Is coalescing off?
pub fn active(c: &Client) -> bool {
    c.info.without.coalescing
}

/// Open or create `name` in `w.dir` with separate messages. `Ok(None)`:
/// the name is a symlink; the caller's coalesced path handles it.
pub fn open(
    c: &Client,
    w: &Walker,
    name: &[u8],
    flags: u32,
    perm: u32,
) -> Result<Option<(DescId, Attr)>> {
    let creat = flags & libc::O_CREAT as u32 != 0;
    let excl = creat && flags & libc::O_EXCL as u32 != 0;
    let plain = flags & !(libc::O_CREAT | libc::O_EXCL) as u32;
    crate::counters::bump(&crate::counters::UNCOALESCED_OPENS);
    for _ in 0..64 {
        match w.lookup(w.dir, name) {
            Ok((_, FileType::Symlink)) => return Ok(None),
            Ok((ino, ftype)) => {
                if excl {
                    return err(libc::EEXIST);
                }
                if flags & libc::O_DIRECTORY as u32 != 0 && ftype != FileType::Directory {
                    return err(libc::ENOTDIR);
                }
                let via = atoll_proto::EntryName { dir: w.dir, name };
                match crate::file::open_inode_via(c, w.lane, ino, plain, Some(via)) {
                    // Unlinked between the two messages: look again.
                    Err(Error::Errno(libc::ENOENT)) => continue,
                    r => return r.map(Some),
                }
            }
            Err(Error::Errno(libc::ENOENT)) if creat => {
                let ino = match make_regular(c, w, name, perm) {
                    Ok(ino) => ino,
                    // Created by someone else meanwhile.
                    Err(Error::Errno(libc::EEXIST)) if !excl => continue,
                    Err(e) => return Err(e),
                };
                let via = atoll_proto::EntryName { dir: w.dir, name };
                let plain = plain & !libc::O_TRUNC as u32;
                return crate::file::open_inode_via(c, w.lane, ino, plain, Some(via)).map(Some);
            }
            Err(e) => return Err(e),
        }
    }
    err(libc::EAGAIN)
}

fn make_regular(c: &Client, w: &Walker, name: &[u8], perm: u32) -> Result<InodeId> {
    let server = crate::adapt::entry_server(c, w.dir, name);
    let vouched = crate::dirperm::vouches_for(c, w.lane, w.dir, server)?;
    crate::session::retry_marked(|| {
        w.lane.call_vouched(
            c,
            server,
            vouched.as_slice(),
            Request::MakeNode {
                dir: w.dir,
                name,
                ftype: FileType::Regular,
                perm,
                rdev: 0,
                target: b"",
                home: server as u8,
                spread: 0,
                umask: crate::ns::umask(c),
                inherit: atoll_proto::Inherit::Unread,
            },
            |r| match r {
                Reply::Entry { ino, .. } => Ok(ino),
                _ => Err(Error::Protocol("MakeNode")),
            },
        )
    })
}
