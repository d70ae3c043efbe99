//! What a process's end releases before its parent can see it.
//!
//! Linux closes an exiting process's files before it tells the parent
//! (`do_exit`: `exit_files` before `exit_notify`), so once `wait` returns,
//! the child's pipe and FIFO ends no longer count. Programs build on that:
//! a shell runs `cat <&3`, waits for it, closes fd 3 and opens the FIFO
//! again, expecting to wait for a new writer; Python's `multiprocessing`
//! checks that its resource tracker lives by writing to the tracker's
//! pipe (`EPIPE`: relaunch it). atoll's servers would learn of the end
//! only when the session's socket closes, after the parent may already
//! have gone on: a writer then still finds the old reader and writes
//! without `EPIPE`, and a FIFO's new writer does not wait. So an exiting
//! process closes every pipe and FIFO end it holds with a round trip each
//! (as an explicit `close` of one does, `file::closer`) before
//! `exit_group`: one or two in a pipeline's process, three with a make
//! jobserver's. Files and directories go with the session: nothing a
//! program can observe depends on when.
use atoll_proto::FileType;

use crate::fdtable;

/// Close every pipe and FIFO end this process holds, waiting for each
/// server's answer (a server that is gone answers `EIO` at once, so an
/// exit never hangs on it).
pub(crate) fn release_pipe_ends() {
    let pipe_end = |d: &fdtable::DescRef| d.ftype() == FileType::Fifo;
    let ends: Vec<fdtable::DescRef> = fdtable::fds()
        .into_iter()
        .filter(|&fd| fdtable::get(fd as i64).is_some_and(|d| pipe_end(&d)))
        .filter_map(|fd| fdtable::remove(fd as i64))
        .collect();
    // The last reference of each description sends its `Close`.
    drop(ends);
}
