//! The fork hooks the preload library calls around `fork`/`clone`:
//! before it, the child's session is made and every open description and
//! mapping shared with it (Hare DUP, `forkshare`); after it, the parent
//! drops its copy of the child's socket and the child switches to its own
//! session. The fork gate (`forkgate`) holds every process-local client
//! lock across the clone, so none is left held in the child.

use std::os::fd::{IntoRawFd, OwnedFd};

use crate::{
    copymap, counters, cpus, fdpub, fdtable, forkgate, forkshare, fsize, hybrid, loadmap, mapping,
    pipesplit, reaped, session, sys,
};

/// State carried from `fork_prepare` to `fork_parent`/`fork_child`.
pub struct ForkPrep {
    child: session::ChildSession,
    /// The child's session, for a `wait` that reaps it killed (`reaped`).
    child_id: atoll_proto::SessionId,
    socket: OwnedFd,
    /// Held until the clone returned, on both sides (see `forkgate`).
    _gate: forkgate::ForkGate,
}

/// Before `fork`: create the child's session and share every open
/// description with it (Hare DUP). `Ok(None)` when not an atoll client.
pub fn fork_prepare() -> core::result::Result<Option<ForkPrep>, i32> {
    let Some(c) = session::client() else {
        return Ok(None);
    };
    // The child's `execve` finds what it hands over of the instance read
    // (`exec::prime`) and the load table mapped (`loadmap`).
    crate::exec::prime(c);
    if let Some(dir) = std::path::Path::new(&c.socket_path).parent() {
        loadmap::map_for_children(dir);
    }
    let (child, socket) = c.fork_session(None).map_err(|e| e.errno())?;
    let held = session::LazyLane::holding(c, c.lane().map_err(|e| e.errno())?);
    // Shared descriptions keep their offsets on the server (Hare §3.5.1).
    hybrid::share_all(c, &held);
    let Some(l) = held.taken() else {
        return Err(libc::EIO);
    };
    // Each reference goes again if its server dies on it (`forkshare`).
    let mut given = forkshare::Ledger::new(child);
    let child_id = child;
    // The child's own `Session`, made here where the heap is ours alone.
    let child = session::ChildSession::new(child);
    // A description that fails to share (closed meanwhile) is simply not
    // usable in the child.
    given.share_many(c, l, &fdtable::live_descs());
    // The child's copy of our memory maps what we map.
    mapping::share_with(c, l, &mut given);
    copymap::share_with(c, l, &mut given);
    drop(held);
    Ok(Some(ForkPrep {
        child,
        child_id,
        socket,
        _gate: forkgate::ForkGate::close(c),
    }))
}

/// In the parent after `fork` (or after it failed, `child_pid < 0`): close
/// our copy of the child's socket; if the fork failed this ends the child
/// session and releases what it was given.
pub fn fork_parent(prep: ForkPrep, child_pid: i64) {
    if child_pid > 0 {
        // Siblings start their execs from different cores (Hare §3.6.1).
        atoll_sched::placement::on_fork_parent();
        // The child shows our descriptors as of now (under the gate).
        fdpub::after_fork_parent();
        reaped::note_child(child_pid, prep.child_id);
    }
    drop(prep);
}

/// In the child after `fork`: switch to the child session.
pub fn fork_child(prep: ForkPrep) {
    // Program memory is reached through our pid, which just changed.
    sys::init_pid();
    fsize::after_fork_child();
    cpus::after_fork_child();
    let Some(c) = session::client() else {
        return;
    };
    // Offsets locked by threads that did not come along are free here,
    // and their pipe reads are not ours to withdraw.
    fdtable::after_fork_child();
    pipesplit::forget_after_fork();
    let ForkPrep {
        child,
        socket,
        _gate,
        ..
    } = prep;
    let sock = session::to_high(socket.into_raw_fd(), 0);
    let _ = c.adopt_child_session(child, sock);
    drop(_gate);
    counters::forget();
}
