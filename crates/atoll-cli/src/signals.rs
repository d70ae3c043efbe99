//! Orderly shutdown on SIGINT, SIGTERM and SIGHUP.
//!
//! The driver blocks those signals in every thread and one thread waits for
//! them with `sigwaitinfo`, so atoll itself never dies of them: it relays
//! them to whatever currently runs on its behalf and then cleans up.
//!
//! Life cycle: `install` (before any server thread exists, so they inherit
//! the mask) → for each child: `watch_child` … `unwatch` → `received`
//! decides whether to go on (e.g. with `--export`) → shutdown.
//!
//! Relaying rules:
//! * a child is signalled through its pidfd, so a reaped child's recycled
//!   pid can never be hit;
//! * a signal the kernel generated (`SI_KERNEL`: ^C, terminal hangup) already
//!   reached the whole foreground process group, child included, and is not
//!   sent again while that child runs;
//! * the third signal kills the child with SIGKILL: the user means it;
//! * a detached instance (`atoll boot`) answers by sending itself
//!   `BootRequest::Stop`, which wakes the thread waiting for a stop request.

use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use rustix::process::{Pid, Signal};

use crate::sys;

/// After this many terminating signals the child is killed outright.
const KILL_AFTER: u32 = 3;

enum Target {
    Nothing,
    Child { pid: Pid, pidfd: Option<OwnedFd> },
    StopInstance(PathBuf),
}

struct State {
    target: Target,
    count: u32,
    first: Option<i32>,
    /// A signal that arrived while nothing was running, to be relayed to
    /// the next child (it was started before the caller saw the signal).
    undelivered: Option<i32>,
}

#[derive(Clone)]
pub struct Terminator {
    state: Arc<Mutex<State>>,
}

impl Terminator {
    /// Block the terminating signals and start the thread that waits for
    /// them. Call before creating any other thread.
    pub fn install() -> std::io::Result<Terminator> {
        sys::block_terminating()?;
        let t = Terminator {
            state: Arc::new(Mutex::new(State {
                target: Target::Nothing,
                count: 0,
                first: None,
                undelivered: None,
            })),
        };
        let worker = t.clone();
        std::thread::Builder::new()
            .name("atoll-signals".into())
            .spawn(move || worker.serve())?;
        Ok(t)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A poisoned lock only means another thread panicked while holding
        // it; the state is still meaningful for shutdown.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn serve(&self) {
        loop {
            let (sig, code) = match sys::wait_terminating() {
                Ok(x) => x,
                Err(e) => {
                    tracing::error!("waiting for signals failed: {e}");
                    return;
                }
            };
            tracing::debug!(sig, code, "terminating signal");
            let mut st = self.lock();
            st.count += 1;
            st.first.get_or_insert(sig);
            let count = st.count;
            match &st.target {
                Target::Nothing => st.undelivered = Some(sig),
                Target::Child { pid, pidfd } => {
                    if count >= KILL_AFTER {
                        tracing::warn!("signal {count}: killing the command");
                        send(*pid, pidfd.as_ref(), libc::SIGKILL);
                    } else if code != sys::SI_KERNEL {
                        send(*pid, pidfd.as_ref(), sig);
                    }
                }
                Target::StopInstance(socket) => {
                    let socket = socket.clone();
                    drop(st);
                    if let Err(e) = crate::bootctl::stop(&socket) {
                        // The socket is gone (runtime dir deleted under
                        // us) or the instance hangs: nobody can reach it
                        // any more, so leave rather than linger forever.
                        tracing::error!("cannot stop the instance after signal {sig}: {e}");
                        if let Some(dir) = socket.parent() {
                            let _ = std::fs::remove_dir_all(dir);
                        }
                        std::process::exit(128 + sig);
                    }
                }
            }
        }
    }

    /// The first terminating signal received, if any.
    pub fn received(&self) -> Option<i32> {
        self.lock().first
    }

    /// Relay signals to the child `pid` until [`Terminator::unwatch`].
    pub fn watch_child(&self, pid: u32) {
        let Some(pid) = Pid::from_raw(pid as i32) else {
            return;
        };
        // The child is ours and not yet reaped, so the pid is still its own.
        let pidfd = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok();
        let mut st = self.lock();
        if let Some(sig) = st.undelivered.take() {
            send(pid, pidfd.as_ref(), sig);
        }
        st.target = Target::Child { pid, pidfd };
    }

    /// Stop relaying (call before reaping the child's status is final).
    pub fn unwatch(&self) {
        let mut st = self.lock();
        st.target = Target::Nothing;
        st.undelivered = None;
    }

    /// On a terminating signal, ask the instance at `socket` to stop.
    pub fn stop_instance_on_signal(&self, socket: PathBuf) -> bool {
        let mut st = self.lock();
        st.target = Target::StopInstance(socket);
        st.first.is_some()
    }
}

fn send(pid: Pid, pidfd: Option<&OwnedFd>, sig: i32) {
    let Some(signal) = Signal::from_named_raw(sig) else {
        return;
    };
    let r = match pidfd {
        Some(fd) => rustix::process::pidfd_send_signal(fd, signal),
        None => rustix::process::kill_process(pid, signal),
    };
    if let Err(e) = r {
        // ESRCH: it exited meanwhile, which is what we wanted anyway.
        tracing::debug!("relaying signal {sig} to {pid:?}: {e}");
    }
}
