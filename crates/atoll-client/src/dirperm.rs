//! Search permission on directories whose entry servers cannot check it
//! (Hare §3.7.1).
//!
//! A server checks that the caller may search a directory only when it
//! owns the directory's inode. The entries of a distributed directory
//! (Hare §3.4) live on every server, so a `Lookup` or `Open` sent to a
//! server that holds a shard but not the inode would go unchecked; the
//! client asks the owner first (`Access` with `X_OK`). The answer is kept
//! in the directory-lookup cache as the directory's entry with the empty
//! name, which the owner's notice on `chmod`/`chown` of the directory
//! drops with the rest of its entries, so each process asks once per
//! directory while its mode and owner stay the same.

use atoll_proto::{InodeId, Request};

use crate::error::Result;
use crate::session::{Client, Lane};

/// Fail with `EACCES` unless the caller may search `dir`, when the server
/// `entry` that will serve the name does not check it itself.
pub fn check_search(c: &Client, lane: &Lane, dir: InodeId, entry: usize) -> Result<()> {
    if entry == dir.owner() {
        return Ok(()); // the server owns the directory and checks
    }
    let dc = c.dcache();
    let mut gen = 0;
    if let Some(dc) = dc {
        if dc.searchable(c.session().channels(), dir) {
            return Ok(());
        }
        gen = dc.generation();
    }
    lane.call_ok(
        c,
        dir.owner(),
        Request::Access {
            ino: dir,
            mask: libc::X_OK as u32,
        },
    )?;
    if let Some(dc) = dc {
        dc.set_searchable(gen, dir);
    }
    Ok(())
}
