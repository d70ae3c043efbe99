//! Namespace operations: mkdir/mknod/symlink, unlink/rmdir (three-phase for
//! distributed directories, Hare §3.4.1), rename (one message when both
//! entries live on one server, client-coordinated otherwise, Hare §6.2.3),
//! link, readlink, getdents (directory broadcast, Hare §3.7.3), and the
//! working directory.
//!
//! Reference counting across servers. An entry is one reference to its
//! inode. A server that adds (`Link`, `MakeNode`, `Open` with `O_CREAT`) or
//! removes (`Unlink`, `Rename`) an entry adjusts the link count itself only
//! when it also owns the inode; otherwise the client sends `Ref`/`Unref` to
//! the owner (`Unlinked.freed_here` says which happened).

use atoll_proto::{FileType, InodeId, Reply, Request, UnlinkKind, ROOT};

use crate::error::{err, Error, Result};
use crate::fdtable::{self, DescRef};
use crate::path::matches_distribute;
use crate::session::{Client, Cwd, Lane};
use crate::sys;
use crate::walk::{HostPath, Last, LastKind, NodeStep, Step, Walker};
use crate::Out;

mod create;
mod cwd;
mod dirs;
mod link;
mod remove;
mod rename;

pub use create::*;
pub use cwd::*;
pub use dirs::*;
pub use link::*;
pub use remove::*;
pub use rename::*;

/// xattr a directory may carry to make its new subdirectories distributed.
pub const XATTR_DISTRIBUTED: &[u8] = b"user.atoll.distributed";
/// `getxattr` of it on a directory: how many servers its names are spread
/// over (`0`: centralized), the width recorded when it became distributed
/// (`adapt::width`). Read only; not listed.
pub const XATTR_WIDTH: &[u8] = b"user.atoll.width";

/// Resolve up to the final component. `Ok(Err(out))` when the path is not
/// atoll's (or leaves atoll).
fn parent<'a>(
    c: &'a Client,
    lane: &'a Lane,
    dirfd: i64,
    path: &[u8],
) -> Result<core::result::Result<(Box<Walker<'a>>, Last), Out>> {
    let Some(mut w) = Walker::start(c, lane, dirfd, path)? else {
        return Ok(Err(Out::Host));
    };
    match w.advance()? {
        Step::Host(p) => Ok(Err(Out::Rehost(p))),
        Step::Last(l) => Ok(Ok((w, l))),
    }
}

pub fn umask(c: &Client) -> u32 {
    c.umask.load(core::sync::atomic::Ordering::Relaxed)
}

/// Should a directory created as `name` in `w.dir` be distributed? Yes
/// in a distributed parent (made so, or swapped so by `setfattr -n
/// user.atoll.distributed -v 1`, `adapt`) and under a `--distribute`
/// path.
fn want_distributed(c: &Client, w: &Walker, name: &[u8]) -> bool {
    if c.info.without.dir_distribution || c.members() < 2 {
        return false;
    }
    if crate::adapt::distributed(w.dir) {
        return true;
    }
    if let Ok(p) = w.child_path(name) {
        if matches_distribute(w.rel_to_mount(&p), &c.info.distribute) {
            return true;
        }
    }
    false
}

/// Linux's `filename_create` for a name that may not end in a slash
/// (anything but `mkdir`): given with one, the name is `EEXIST` when it
/// exists and `ENOENT` otherwise; without one, nothing to check here.
fn no_name_to_create(w: &Walker, name: &[u8], trailing_slash: bool) -> Result<()> {
    if !trailing_slash {
        return Ok(());
    }
    match w.lookup(w.dir, name) {
        Ok(_) => err(libc::EEXIST),
        Err(Error::Errno(e)) if e == libc::ENOENT => err(libc::ENOENT),
        Err(e) => Err(e),
    }
}
