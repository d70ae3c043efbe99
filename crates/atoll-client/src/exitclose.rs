//! What a process's end releases before its parent can see it.
//!
//! Linux closes an exiting process's files before it tells the parent
//! (`do_exit`: `exit_files` before `exit_notify`), so once `wait` returns,
//! the child's pipe and FIFO ends no longer count. Programs build on that:
//! a shell runs `cat <&3`, waits for it, closes fd 3 and opens the FIFO
//! again, expecting to wait for a new writer. atoll's servers would learn
//! of the end only when the session's socket closes, after the parent may
//! already have gone on: a writer opening the FIFO then still finds the
//! old reader, writes without waiting, and its bytes go with the ring
//! when that stale end is finally dropped. So an exiting process closes
//! its FIFO ends with a round trip each (as an explicit `close` of one
//! does, `file::closer`) before `exit_group`. The ends of anonymous pipes
//! (no path) go with the session as files and directories do: no open
//! waits on their counts, so a late release only delays an end of file
//! or `EPIPE` a little, and the processes of a pipeline or a build, which
//! nearly all hold such ends, exit without a round trip.

use atoll_proto::FileType;

use crate::fdtable;

/// Close every FIFO end (a pipe opened by a path) this process holds,
/// waiting for each server's answer (a server that is gone answers `EIO`
/// at once, so an exit never hangs on it).
pub(crate) fn release_fifo_ends() {
    let named_fifo = |d: &fdtable::DescRef| d.ftype() == FileType::Fifo && d.path().is_some();
    let ends: Vec<fdtable::DescRef> = fdtable::fds()
        .into_iter()
        .filter(|&fd| fdtable::get(fd as i64).is_some_and(|d| named_fifo(&d)))
        .filter_map(|fd| fdtable::remove(fd as i64))
        .collect();
    // The last reference of each description sends its `Close`.
    drop(ends);
}
