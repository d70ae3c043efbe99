//! A child a signal killed: its pipe ends stop counting before the
//! parent's `wait` returns.
//!
//! Linux closes a dying process's files before it tells the parent
//! (`do_exit`: `exit_files` before `exit_notify`), so once `wait` reaped a
//! child, a write to a pipe whose only reader was that child fails with
//! `EPIPE`, and a FIFO's next opener finds no old peer. A child that
//! exits closes its pipe ends itself (`exitclose`); one a signal killed
//! runs no code, and its ends go when the servers serve its session's
//! end, which the boot thread starts once it reads that the session
//! socket closed: after the parent may already have gone on. So a `wait`
//! that reaps a killed child asks the boot thread to end the child's
//! sessions now (`BootRequest::Reaped`) and then each server whether it
//! served their ends (`Request::SessionEnded`), before it returns.
//! Children that exit cost nothing more than the row's dispatch, but for
//! exit status 127: the dynamic loader's, when it could not start the
//! program (`error while loading shared libraries`). What it wrote to an
//! atoll stderr is copied there at the end of the child's session
//! (`exec/caught.rs`), so such a `wait` also awaits that end, and the
//! parent then finds the message in the file, as on Linux. (A shell's
//! `command not found` is 127 too: one more round trip, on a path that
//! already failed.)

use core::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

use atoll_proto::{Request, SessionId};

use crate::error::Error;
use crate::session::Client;
use crate::sys;

/// Children whose session this process made at `fork` (pid → session):
/// a child killed before it told the boot thread its pid is found by
/// its session. Only the latest forks matter (a `wait` comes soon).
const CHILDREN: usize = 64;
static CHILD_PIDS: [AtomicU32; CHILDREN] = [const { AtomicU32::new(0) }; CHILDREN];
static CHILD_SESSIONS: [AtomicU64; CHILDREN] = [const { AtomicU64::new(0) }; CHILDREN];
static NEXT_CHILD: AtomicUsize = AtomicUsize::new(0);

/// How long a `wait` waits for one server to serve a session's end:
/// bounded, so a wedged server costs a killed child's parent at most
/// about this much and never hangs it (the end then comes later, as
/// before).
const ATTEMPTS: u32 = 400;

/// As [`ATTEMPTS`], for the end of a session whose loader's message is
/// being copied (`exec/caught.rs`): a short program runs first (a few
/// milliseconds, more with many at once on few cores), so the bound is
/// higher, and still one: a server that never answers costs about ten
/// seconds, not a hang.
const LOADER_ATTEMPTS: u32 = 40_000;

/// After `fork` returned `pid` in the parent: remember the child's session.
pub(crate) fn note_child(pid: i64, session: SessionId) {
    let Ok(pid) = u32::try_from(pid) else {
        return;
    };
    let at = NEXT_CHILD.fetch_add(1, Ordering::Relaxed) % CHILDREN;
    // A reader may pair a pid with a newer session of the same slot: it
    // then asks about one session too many, which ends soon anyway.
    CHILD_PIDS[at].store(0, Ordering::Relaxed);
    CHILD_SESSIONS[at].store(session.0, Ordering::Relaxed);
    CHILD_PIDS[at].store(pid, Ordering::Release);
}

fn child_session(pid: u32) -> Option<SessionId> {
    (0..CHILDREN)
        .find(|&i| CHILD_PIDS[i].load(Ordering::Acquire) == pid)
        .map(|i| SessionId(CHILD_SESSIONS[i].load(Ordering::Relaxed)))
}

/// Is a `wait4` status one of a child a signal ended (`WIFSIGNALED`)?
pub(crate) fn killed_status(status: i32) -> bool {
    let sig = status & 0x7f;
    sig != 0 && sig != 0x7f
}

/// The loader's exit status when it cannot start a program (glibc
/// `_dl_fatal_printf`), as `wait4` encodes it.
const LOADER_FAILED: i32 = 127 << 8;

/// Does a `wait4` status ask for the child's session end (killed, or the
/// loader's failure)?
pub(crate) fn awaits_end(status: i32) -> bool {
    killed_status(status) || status == LOADER_FAILED
}

/// Is a `wait4` status the loader's failure?
pub(crate) fn loader_failed(status: i32) -> bool {
    status == LOADER_FAILED
}

/// Does a `waitid` record ask for the child's session end?
pub(crate) fn awaits_end_of(code: i32, status: i32) -> bool {
    matches!(code, libc::CLD_KILLED | libc::CLD_DUMPED)
        || (code == libc::CLD_EXITED && status == 127)
}

/// `wait` reaped `pid`, which a signal killed (or whose loader failed):
/// return once every server
/// served the end of its sessions (or gave up waiting for one).
pub(crate) fn after_killed_child(c: &Client, pid: i64, loader_failed: bool) {
    let attempts = if loader_failed {
        LOADER_ATTEMPTS
    } else {
        ATTEMPTS
    };
    let Ok(pid) = u32::try_from(pid) else {
        return;
    };
    let Ok(sessions) = c.reaped_sessions(pid, child_session(pid)) else {
        // An instance that is gone: nothing to wait for.
        return;
    };
    if sessions.is_empty() {
        return;
    }
    let Ok(lane) = c.lane() else {
        return;
    };
    for s in sessions {
        for server in (0..c.members()).filter(|&i| !c.control().is_down(i)) {
            await_end(c, &lane, server, s, attempts);
        }
    }
}

fn await_end(c: &Client, lane: &crate::session::Lane, server: usize, s: SessionId, attempts: u32) {
    for attempt in 0..attempts {
        match lane.call_ok(c, server, Request::SessionEnded { session: s }) {
            Err(Error::Errno(libc::EAGAIN)) => {
                if attempt < 16 {
                    // SAFETY: sched_yield takes no arguments.
                    unsafe { sys::sc(libc::SYS_sched_yield, 0, 0, 0, 0) };
                } else {
                    sys::sleep_ns(250_000);
                }
            }
            // Ended, or a server that cannot say (gone, rebuilt): no wait.
            _ => return,
        }
    }
}
