//! What the new image's dynamic loader writes to stderr before its
//! client starts.
//!
//! The loader maps the program's libraries and relocates them before any
//! constructor runs, so before the client serves the atoll descriptor at
//! fd 2: `error while loading shared libraries` (then `_exit(127)`), a
//! missing symbol version's warning, `LD_DEBUG` output all go to the
//! kernel's descriptor there, which for an atoll pipe or file is a bare
//! placeholder. So an exec whose fd 2 stays open and is an atoll
//! descriptor gives the new image a memfd of its own at fd 2 instead, the
//! *catch* (named like a placeholder, which it then is), and the session
//! it hands over a copy of it (`BootRequest::Caught`):
//!
//! * the new image's client, as it restores the descriptor table
//!   ([`drain`]), copies what the memfd holds into the atoll description
//!   through fd 2 (offset, `O_APPEND`, a pipe's readers: as the loader's
//!   own `write` would have), empties it and keeps it as fd 2's
//!   placeholder: before the program's first instruction, so the loader's
//!   lines come first, as on Linux; from then on the client serves fd 2,
//!   the loader's later lines (`LD_DEBUG`'s `calling init`) included;
//! * an image that dies first (the loader's exit status 127) leaves it to
//!   the boot thread, which starts a client on the session to copy it the
//!   same way (server `caught.rs`) before the session ends, so a pipe's
//!   reader sees the message before its end of file, and a parent's `wait`
//!   of status 127 returns once it is there (`reaped`).
//!
//! A memfd never fills: the loader never blocks on it. The exec swaps it
//! in just before the system call and puts a placeholder back if the call
//! returns ([`Catch::swap_in`]); a scheduling server's child (`--exec-via
//! spawn`) receives it at fd 2 with the caller's other descriptors. A
//! `posix_spawn` child gets it through one more file action,
//! `dup2(catch, 2)`, that the child runs before its exec (client
//! `posix_spawn` wrapper): the parent's own fd 2 never changes.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use atoll_proto::boot::{BootRequest, ENV_SOCKET, ENV_STATE};

use super::ENV_PRELOAD;
use crate::fdtable;
use crate::session::{Client, LazyLane};
use crate::state::{FdState, State};
use crate::sys;

/// The descriptor the loader prints its diagnostics to (glibc's
/// `_dl_debug_fd` and `_dl_error_printf`; only listings, which run behind
/// the relay of `foreign.rs`, go to fd 1).
const STDERR: i32 = 2;

/// The memfd an exec leaves at fd 2 for the new image's loader.
pub(super) struct Catch {
    fd: OwnedFd,
    /// The memfd's `(st_dev, st_ino)`, as the new image finds it.
    id: (u64, u64),
    /// What the boot thread is told (`BootRequest::Caught`).
    req: BootRequest,
}

impl Catch {
    /// Put the catch at fd 2, just before the exec system call.
    pub(super) fn swap_in(&self) {
        sys::dup3(self.fd.as_raw_fd(), STDERR, 0);
    }

    /// The exec returned: fd 2 is this image's placeholder again (any
    /// placeholder does: atoll descriptors are told apart by the table).
    pub(super) fn swap_out(&self, c: &Client) {
        if let Ok(t) = c.template() {
            sys::dup3(t, STDERR, 0);
        }
    }
}

/// In `hand_over`: when fd 2 is an atoll descriptor that stays open
/// across the exec, make the catch, and what the boot thread is told of it
/// with the `Fork` of the new image's session ([`Catch::post`]): the
/// memfd, and what a helper needs to copy it there (module comment).
/// `pid`: the process the new image runs in, as its parent's `wait` names
/// it; 0 for a spawn's child, whose pid is not known yet (its parent's
/// `wait` names its session instead, `reaped::note_child`).
pub(super) fn prepare(c: &Client, pid: u32) -> Option<Catch> {
    let d = fdtable::get(STDERR as i64)?;
    let fdflags = sys::fcntl_int(STDERR, libc::F_GETFD, 0);
    if fdflags < 0 || fdflags & libc::FD_CLOEXEC as i64 != 0 {
        return None;
    }
    let fd = rustix::fs::memfd_create("atoll-placeholder", rustix::fs::MemfdFlags::CLOEXEC).ok()?;
    let (dev, ino, _) = sys::fstat_id(fd.as_raw_fd()).ok()?;
    // The helper's table: fd 2 alone, found at its catch.
    let helper = State {
        fds: vec![FdState {
            fd: STDERR,
            desc: d.desc().0,
            ino: d.ino().0,
            flags: d.flags(),
            ftype: fdtable::ftype_code(d.ftype()),
            cookie: d.cookie().load(core::sync::atomic::Ordering::Relaxed),
            placeholder: (dev, ino),
            path: d.path().map(<[u8]>::to_vec),
        }],
        caught: vec![(STDERR, (dev, ino))],
        ..State::default()
    };
    let preload = c.preload.as_deref().unwrap_or_default();
    let env = vec![
        format!("LD_PRELOAD={preload}"),
        format!("{ENV_PRELOAD}={preload}"),
        format!("{ENV_SOCKET}={}", c.socket_path),
        format!("{ENV_STATE}={}", helper.encode()),
    ];
    let req = BootRequest::Caught {
        pid,
        fds: vec![STDERR],
        env,
    };
    Some(Catch {
        fd,
        id: (dev, ino),
        req,
    })
}

impl Catch {
    /// The memfd, for a spawn's `dup2` onto the child's fd 2.
    pub(super) fn raw(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    /// The `Caught` to post ahead of the `Fork`, with the memfd.
    pub(super) fn post(&self) -> (BootRequest, BorrowedFd<'_>) {
        (self.req.clone(), self.fd.as_fd())
    }

    /// Name the catch in the new image's state, if fd 2 is in its table
    /// (its description was shared with the new session); else the new
    /// image keeps the placeholder at fd 2.
    pub(super) fn named_in(self, st: &mut State) -> Option<Catch> {
        if !st.fds.iter().any(|f| f.fd == STDERR) {
            return None;
        }
        st.caught.push((STDERR, self.id));
        Some(self)
    }
}

/// In a new image's `restore`: is `fd`, whose kernel descriptor is
/// `(dev, ino)`, the catch an exec left there?
pub(crate) fn is_catch(st: &State, fd: i32, id: (u64, u64)) -> bool {
    st.caught.contains(&(fd, id))
}

/// Copy what the loader wrote into the catch at `fd` into the atoll
/// description installed there, and empty it (it stays as `fd`'s
/// placeholder). Best effort: a description that refuses (its pipe's
/// readers are gone) gets what it took, as the loader's write would have.
pub(crate) fn drain(c: &Client, lane: &LazyLane, fd: i32) {
    let Ok(st) = sys::fstat(fd) else {
        return;
    };
    if st.st_size <= 0 {
        return;
    }
    let mut bytes = vec![0u8; st.st_size as usize];
    let mut got = 0;
    while got < bytes.len() {
        let n = sys::pread(fd, &mut bytes[got..], got as u64);
        if n <= 0 {
            break;
        }
        got += n as usize;
    }
    bytes.truncate(got);
    // Emptied, at offset 0, as a fresh placeholder is.
    // SAFETY: ftruncate and lseek take integer arguments only.
    unsafe {
        sys::sc(libc::SYS_ftruncate, fd as u64, 0, 0, 0);
        sys::sc(libc::SYS_lseek, fd as u64, 0, libc::SEEK_SET as u64, 0);
    }
    let (Some(d), Ok(l)) = (fdtable::get(fd as i64), lane.get()) else {
        return;
    };
    let mut at = 0;
    while at < bytes.len() {
        match crate::file::write_desc(c, l, &d, &bytes[at..], None) {
            Ok(n) if n > 0 => at += n,
            _ => return,
        }
    }
}
