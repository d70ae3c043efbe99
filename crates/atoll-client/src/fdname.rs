//! The name `/proc/<pid>/fd/N` shows for an atoll descriptor: the file's
//! *current* path, as Linux's `d_path` gives it, not the path it was
//! opened by.
//!
//! A descriptor records the path it was opened by (`fdtable`). That path
//! is still right unless the file, or a directory above it, was renamed
//! or removed since, so it is checked first: if it still resolves to the
//! same inode, it is the answer (a walk, usually answered by the lookup
//! cache). Otherwise the file's owner says whether it still has names
//! (`st_nlink`); a file without names shows the recorded path and
//! ` (deleted)`, as Linux does. A file that has names but not the
//! recorded one was renamed: its names are entries in directory shards
//! that may live on any server (Hare §3.4), so every server is asked for
//! the entries naming it (`Request::Names`), and each directory's path is
//! found the same way up to the root (a directory has one name).
//!
//! An `O_TMPFILE` file records `<dir>/#<st_ino>`, the name Linux gives
//! it, so that it shows as `<dir>/#<st_ino> (deleted)`.

use atoll_proto::{InodeId, Reply, Request, ROOT};

use crate::error::Error;
use crate::session::{Client, Lane};
use crate::walk::{NodeStep, Walker};

/// What Linux appends to the path of a file that has no name left.
const DELETED: &[u8] = b" (deleted)";

/// Directories walked up from a file before giving up (a loop can only
/// come from a rename racing the walk).
const MAX_DEPTH: usize = 4096;

/// The path `/proc/…/fd/N` shows for file `ino`, recorded as `opened`
/// (a path in the mount) when the descriptor was made.
pub fn current(c: &Client, opened: &[u8], ino: InodeId) -> Vec<u8> {
    let Ok(lane) = c.lane() else {
        return opened.to_vec();
    };
    if still_names(c, &lane, opened, ino) {
        return opened.to_vec();
    }
    let nlink = lane.call(c, ino.owner(), Request::GetAttr { ino }, |r| match r {
        Reply::Attr(a) => Ok(a.nlink),
        _ => Err(Error::Protocol("GetAttr")),
    });
    match nlink {
        Ok(0) => [opened, DELETED].concat(),
        Ok(_) => path_of(c, &lane, ino).unwrap_or_else(|| opened.to_vec()),
        // The owner no longer knows it: the last description is gone.
        Err(_) => opened.to_vec(),
    }
}

/// Does `path` (no final symlink followed) still name `ino`?
fn still_names(c: &Client, lane: &Lane, path: &[u8], ino: InodeId) -> bool {
    let Ok(Some(mut w)) = Walker::start(c, lane, libc::AT_FDCWD as i64, path) else {
        return false;
    };
    matches!(w.node(false), Ok(NodeStep::Node { ino: found, .. }) if found == ino)
}

/// One entry naming `ino`, from whichever server holds it.
fn a_name(c: &Client, lane: &Lane, ino: InodeId) -> Option<(InodeId, Vec<u8>)> {
    (0..c.members()).find_map(|s| {
        lane.call(c, s, Request::Names { ino }, |r| match r {
            Reply::Names(data) => Ok(atoll_proto::parse_names(data)
                .next()
                .map(|(dir, name)| (dir, name.to_vec()))),
            _ => Err(Error::Protocol("Names")),
        })
        .ok()
        .flatten()
    })
}

/// The current path of `ino` (one of its names), built from the root
/// down; `None` if a name is missing on the way (a rename in between).
fn path_of(c: &Client, lane: &Lane, ino: InodeId) -> Option<Vec<u8>> {
    let mut names = Vec::new();
    let mut at = ino;
    while at != ROOT {
        if names.len() == MAX_DEPTH {
            return None;
        }
        let (dir, name) = a_name(c, lane, at)?;
        names.push(name);
        at = dir;
    }
    let mut path = c.mount.clone();
    for name in names.iter().rev() {
        path.push(b'/');
        path.extend_from_slice(name);
    }
    (path.len() < crate::sys::PATH_MAX).then_some(path)
}

/// The name an `O_TMPFILE` file gets in `dir` (Linux's `d_tmpfile`).
pub fn tmpfile_path(dir: &[u8], ino: InodeId) -> Vec<u8> {
    let mut p = dir.to_vec();
    if !p.ends_with(b"/") {
        p.push(b'/');
    }
    p.extend_from_slice(format!("#{}", ino.0).as_bytes());
    p
}
