//! Opening an atoll descriptor again through its name in `/proc`:
//! `/dev/stderr`, `/dev/fd/N`, `/proc/self/fd/N`.
//!
//! Linux treats these as "magic links" to the open file itself: opening
//! one makes a *new* open file description of the same inode, with the
//! access the caller asks for, checked against the inode's permissions,
//! `O_TRUNC` applied, offset 0 (unlike `dup`). Scripts rely on it all the
//! time (`echo oops > /dev/stderr`, `sed 'w/dev/stdout'`, `tee /dev/fd/3`).
//! For an atoll fd the kernel only knows the placeholder memfd behind the
//! number, so without this the bytes would land in the placeholder and be
//! lost. Pipe ends have their own reopen (`pipefifo::reopen`, FIFO open rules);
//! this covers regular files, directories and the rest.

use atoll_proto::FileType;

use crate::error::{err, Result};
use crate::fdtable::{self, DescInfo};
use crate::file;
use crate::session::Client;
use crate::Out;

/// `open(path, flags)` where `path` names one of this process's atoll
/// descriptors that is not a pipe end; `None`: not such a path.
pub fn reopen(c: &Client, path: &[u8], flags: u32) -> Result<Option<Out>> {
    let Some(d) = crate::pipefifo::fd_path(path).and_then(fdtable::get) else {
        return Ok(None);
    };
    if d.ftype() == FileType::Fifo {
        return Ok(None);
    }
    let creat = flags & libc::O_CREAT as u32 != 0;
    if creat && flags & libc::O_EXCL as u32 != 0 {
        return err(libc::EEXIST);
    }
    if flags & (libc::O_NOFOLLOW | libc::O_PATH) as u32 == libc::O_NOFOLLOW as u32 {
        // The name is a symlink in /proc; O_NOFOLLOW refuses to follow it.
        return err(libc::ELOOP);
    }
    let lane = c.lane()?;
    let (desc, attr) = file::open_inode(c, &lane, d.ino(), flags & !(libc::O_CREAT as u32))?;
    drop(lane);
    let info = DescInfo {
        desc,
        ino: attr.ino,
        flags: file::status_flags(flags),
        ftype: d.ftype(),
        cookie: 0,
        path: d.path().map(<[u8]>::to_vec),
    };
    let cloexec = flags & libc::O_CLOEXEC as u32 != 0;
    Ok(Some(Out::Done(file::new_fd(c, info, cloexec)?)))
}
