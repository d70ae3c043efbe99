//! What a new image's dynamic loader wrote before its client started
//! (`BootRequest::Caught`, client `exec/caught.rs`).
//!
//! The loader maps a program's libraries, and prints why it cannot
//! (`error while loading shared libraries`, then `_exit(127)`) or what
//! `LD_DEBUG` asks for, before any constructor runs: before the client
//! can serve the atoll descriptor at fd 2. An exec therefore gives the new
//! image a memfd there, and this thread a copy of it. A new image whose
//! client starts copies it into the atoll description itself (and its
//! `Reattach`/`Reattached` drops this thread's copy). One that dies
//! first closes its connection with the session's references still held:
//! the thread then hands the session to a short client of its own, the
//! instance's `atoll __loader-drain` started with the memfds at the same
//! numbers and the image's descriptor table, whose client start copies
//! them the same way, and the session ends when that one exits. A parent
//! whose `wait` reaped the dead image (exit status 127, `reaped.rs` in the
//! client) is answered only once the servers served that end, so it
//! finds the message in the file or pipe, as on Linux.

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

use atoll_proto::SessionId;
use rustix::event::epoll;
use rustix::net::SocketFlags;

use super::{Boot, ENDED_KEPT};

/// The session's descriptor the helper finds its connection at.
const HELPER_SESSION_FD: i32 = 3;

/// The memfds an exec left for its new image's loader, by the numbers
/// they stand at there, and the environment of a helper.
pub(super) struct Caught {
    pub(super) fds: Vec<(i32, OwnedFd)>,
    pub(super) env: Vec<String>,
}

impl Caught {
    /// Pair the numbers a `Caught` named with the memfds that came with
    /// it; `None` when they do not match (a packet relayed without its
    /// descriptors, `atoll node`) or name atoll's own numbers.
    pub(super) fn new(numbers: Vec<i32>, fds: Vec<OwnedFd>, env: Vec<String>) -> Option<Caught> {
        let valid = |n: &i32| (0..HELPER_SESSION_FD).contains(n);
        if numbers.len() != fds.len() || numbers.is_empty() || !numbers.iter().all(valid) {
            return None;
        }
        Some(Caught {
            fds: numbers.into_iter().zip(fds).collect(),
            env,
        })
    }

    /// Did the loader write anything? (An image that failed to start at
    /// all, or that started and took its memfds, left them empty.)
    pub(super) fn written(&self) -> bool {
        self.fds
            .iter()
            .any(|(_, f)| rustix::fs::fstat(f).is_ok_and(|st| st.st_size > 0))
    }

    /// Start the helper on `session` (its end of a new connection of the
    /// session). The helper is reaped by a thread of its own; nothing here
    /// waits for it.
    pub(super) fn start_helper(self, exe: &Path, session: OwnedFd) -> std::io::Result<()> {
        let mut cmd = Command::new(exe);
        cmd.arg(atoll_proto::boot::LOADER_DRAIN)
            .env_clear()
            .envs(self.env.iter().filter_map(|e| e.split_once('=')))
            .env(
                atoll_proto::boot::ENV_SESSION_FD,
                HELPER_SESSION_FD.to_string(),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let moves: Vec<(i32, i32)> = self
            .fds
            .iter()
            .map(|(n, f)| (f.as_raw_fd(), *n))
            .chain([(session.as_raw_fd(), HELPER_SESSION_FD)])
            .collect();
        // SAFETY: between fork and exec the closure only makes `dup`,
        // `dup2` and `fcntl` calls, which are async-signal-safe, on
        // descriptors this thread owns until the spawn returns. Each source
        // is first moved above every target, so no `dup2` overwrites a
        // source a later one still needs; `dup2` clears `FD_CLOEXEC`.
        unsafe {
            cmd.pre_exec(move || {
                let mut high = Vec::with_capacity(moves.len());
                for &(from, to) in &moves {
                    let h = libc::fcntl(from, libc::F_DUPFD_CLOEXEC, 10);
                    if h < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    high.push((h, to));
                }
                for (h, to) in high {
                    if libc::dup2(h, to) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        let mut child = cmd.spawn()?;
        drop(session);
        std::thread::Builder::new()
            .name("atoll-loader-drain".into())
            .spawn(move || {
                let _ = child.wait();
            })?;
        Ok(())
    }
}

impl Boot {
    /// Session `s` of `pid` lost its image before the image's client
    /// started, and its loader wrote something: hand the session to the
    /// helper that copies it (`caught`), on a new connection, so that
    /// its end comes when the helper exits. `false`: no helper could be
    /// started (the session then ends now, and the message is lost).
    pub(super) fn drain(&mut self, s: SessionId, pid: u32, caught: Caught) -> bool {
        let Ok((ours, theirs)) = rustix::net::socketpair(
            rustix::net::AddressFamily::UNIX,
            rustix::net::SocketType::SEQPACKET,
            SocketFlags::CLOEXEC,
            None,
        ) else {
            return false;
        };
        let Some(token) = self.register(ours, Some(s)) else {
            return false;
        };
        if let Err(e) = caught.start_helper(&self.p.helper, theirs) {
            tracing::warn!("boot: cannot copy what a loader wrote: {e}");
            if let Some(c) = self.conns.remove(&token) {
                let _ = epoll::delete(&self.epoll, &c.fd);
            }
            return false;
        }
        if let Some(c) = self.conns.get_mut(&token) {
            c.pid = pid;
        }
        // A `Reaped` for `pid` names the session now, so its parent waits
        // for the helper's end (`SessionEnded` says `EAGAIN` until then).
        if self.ended.len() == ENDED_KEPT {
            self.ended.pop_front();
        }
        self.ended.push_back((pid, s));
        true
    }
}
