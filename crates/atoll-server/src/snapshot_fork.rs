//! A snapshot encoded by a forked child while its server serves (fos §3.5:
//! a checkpoint that does not stop the server).
//!
//! Between two requests a server process forks (`sys::fork_worker`): the
//! child holds a copy-on-write image of the server's state at that
//! instant, encodes it, writes it into the journal's half not in use (the
//! journal is `MAP_SHARED`, so the parent sees its stores), sends its
//! verdict (length, checksum, encoding time) down a pipe, rings its
//! server's doorbell and `_exit`s. The parent's pause is the fork (the
//! copy of its page tables). It looks for the child's end between
//! requests ([`Pending::try_finish`], one `waitpid(WNOHANG)` at most
//! every [`LOOK_EVERY`]), copies the records appended since the fork
//! after the snapshot and commits (`Journal::commit_forked`).
//!
//! What the child touches: the server's state (its own copy), malloc
//! (which glibc's `fork` makes usable in the child), the journal's and
//! control block's shared memory (plain and atomic stores, no lock), the
//! tape's base instant (initialised before the fork: [`Pending::start`]),
//! and the pipe. Nothing that another server thread of the same host
//! could hold locked: no `tracing`, no stdio.
//!
//! A child must never write into a half its server's successor uses. The
//! forking *thread*'s end kills it (`PR_SET_PDEATHSIG`): a server moved
//! off its host or killed with its host. A server that stops or panics
//! kills and reaps its child first ([`Pending`]'s `Drop`). And its pid
//! is in the journal (`Journal::set_child`): a successor process makes
//! sure that child is gone before it serves ([`end_stray`]), checking by
//! its name that the pid is still that child's.

use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use crate::fs::FileServer;
use crate::journal::{ForkPoint, Journal};
use crate::store::BlockStore;

/// A snapshot child's name: what [`end_stray`] checks a pid by.
const CHILD_NAME: &str = "atoll-snap";

/// How often the parent looks whether its child ended (the child also
/// rings the doorbell, which wakes a sleeping server).
const LOOK_EVERY: Duration = Duration::from_micros(200);

/// Child exit codes (the verdict itself goes down the pipe).
const EXIT_OK: i32 = 0;
const EXIT_TOO_LARGE: i32 = 4;
const EXIT_NO_ENCODE: i32 = 5;

/// What a child that ended well reports.
#[derive(Clone, Copy, Debug)]
pub struct Verdict {
    pub len: usize,
    pub sum: u64,
    pub encode_us: u64,
}

/// Why a forked snapshot was not taken.
#[derive(Debug)]
pub enum Failed {
    /// The state's encoding is larger than the journal takes.
    TooLarge(usize),
    /// The state does not encode (a bug: trying again will not help).
    NoEncode,
    /// The child died, hung, or could not be started or heard.
    Child(String),
}

/// A child at work.
pub struct Pending {
    pid: u32,
    verdict: OwnedFd,
    pub at: ForkPoint,
    pub started: Instant,
    /// Microseconds the fork stopped the server.
    pub fork_us: u64,
    next_look: Instant,
    reaped: bool,
}

impl Pending {
    /// Fork a child that writes `fs`'s state, as it is now, into
    /// `journal`'s half not in use, then rings `wake`.
    pub fn start<S: BlockStore>(
        fs: &FileServer<S>,
        journal: &Journal,
        index: usize,
        wake: &dyn Fn(),
    ) -> std::io::Result<Pending> {
        let t0 = Instant::now();
        let at = journal.fork_point();
        let (rx, tx) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
        rustix::fs::fcntl_setfl(&rx, rustix::fs::OFlags::NONBLOCK)?;
        // The encoding reads this `OnceLock`: initialised here, so the
        // child never waits on it.
        crate::fs::tape::ready_for_fork();
        let name = std::ffi::CString::new(format!("{CHILD_NAME}{index}"))
            .map_err(std::io::Error::other)?;
        let pid = crate::sys::fork_worker(&name, || {
            // The child: see the module docs for what it may touch. It
            // inherits its server's pinning to one core; it may run on
            // any, so that the server keeps its own (the kernel keeps
            // only the CPUs the process may use of the full set).
            let mut anywhere = rustix::thread::CpuSet::new();
            for cpu in 0..rustix::thread::CpuSet::MAX_CPU {
                anywhere.set(cpu);
            }
            let _ = rustix::thread::sched_setaffinity(None, &anywhere);
            let t0 = Instant::now();
            let (code, len, sum) = match fs.encode_state() {
                Err(_) => (EXIT_NO_ENCODE, 0, 0),
                Ok(image) => match journal.write_forked(at, &image) {
                    Some(sum) => (EXIT_OK, image.len(), sum),
                    None => (EXIT_TOO_LARGE, image.len(), 0),
                },
            };
            let mut msg = [0u8; 24];
            msg[..8].copy_from_slice(&(len as u64).to_le_bytes());
            msg[8..16].copy_from_slice(&sum.to_le_bytes());
            msg[16..].copy_from_slice(&(t0.elapsed().as_micros() as u64).to_le_bytes());
            // Less than `PIPE_BUF` into an empty pipe: one whole write.
            let _ = rustix::io::write(&tx, &msg);
            wake();
            code
        })?;
        drop(tx);
        journal.set_child(pid);
        Ok(Pending {
            pid,
            verdict: rx,
            at,
            started: t0,
            fork_us: t0.elapsed().as_micros() as u64,
            next_look: Instant::now() + LOOK_EVERY,
            reaped: false,
        })
    }

    /// The child's verdict if it ended (`None`: still at work). Cheap
    /// while it works: a clock read, and a `waitpid` now and then.
    pub fn try_finish(&mut self) -> Option<Result<Verdict, Failed>> {
        let now = Instant::now();
        if now < self.next_look {
            return None;
        }
        self.next_look = now + LOOK_EVERY;
        let code = match crate::sys::reap_worker(self.pid) {
            Ok(None) => return None,
            Ok(Some(code)) => code,
            Err(e) => {
                self.reaped = true; // not ours to wait for any more
                return Some(Err(Failed::Child(format!("cannot wait for it: {e}"))));
            }
        };
        self.reaped = true;
        let mut msg = [0u8; 24];
        let heard = matches!(rustix::io::read(&self.verdict, &mut msg), Ok(24));
        let word = |i: usize| u64::from_le_bytes(msg[i * 8..i * 8 + 8].try_into().expect("8"));
        Some(match (code, heard) {
            (EXIT_OK, true) => Ok(Verdict {
                len: word(0) as usize,
                sum: word(1),
                encode_us: word(2),
            }),
            (EXIT_TOO_LARGE, true) => Err(Failed::TooLarge(word(0) as usize)),
            (EXIT_NO_ENCODE, _) => Err(Failed::NoEncode),
            (code, _) if code < 0 => Err(Failed::Child(format!("killed by signal {}", -code))),
            (code, _) => Err(Failed::Child(format!("exited with status {code}"))),
        })
    }

    /// Wait for the child's verdict, at most `limit` (then it is killed).
    pub fn wait(&mut self, limit: Duration) -> Result<Verdict, Failed> {
        let deadline = Instant::now() + limit;
        loop {
            self.next_look = Instant::now();
            if let Some(v) = self.try_finish() {
                return v;
            }
            if Instant::now() >= deadline {
                self.kill();
                return Err(Failed::Child(format!("not done within {limit:?}")));
            }
            // Its end closes the pipe's last writer (or it writes first).
            let mut fds = [rustix::event::PollFd::new(
                &self.verdict,
                rustix::event::PollFlags::IN,
            )];
            let ms = rustix::time::Timespec {
                tv_sec: 0,
                tv_nsec: 1_000_000,
            };
            let _ = rustix::event::poll(&mut fds, Some(&ms));
        }
    }

    /// Kill the child and reap it.
    pub fn kill(&mut self) {
        if self.reaped {
            return;
        }
        let _ = rustix::process::kill_process(
            rustix::process::Pid::from_raw(self.pid as i32).expect("a child's pid"),
            rustix::process::Signal::KILL,
        );
        // SIGKILL ends it soon: wait for that (no zombie left behind).
        while matches!(crate::sys::reap_worker(self.pid), Ok(None)) {
            std::thread::sleep(Duration::from_micros(100));
        }
        self.reaped = true;
    }
}

impl Drop for Pending {
    /// A server that stops (or unwinds) with a child at work ends it
    /// first: its successor may write the half the child writes.
    fn drop(&mut self) {
        self.kill();
    }
}

/// Make sure the snapshot child recorded in `journal` by a predecessor
/// (a server process killed with a child at work) is gone: kill it and
/// wait for its end (at most a second), so that it never writes into the
/// half this server will write. The pid is checked to still name such a
/// child (its name), so a pid reused since is left alone.
pub fn end_stray(journal: &Journal) {
    let pid = journal.child();
    if pid == 0 {
        return;
    }
    if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
        if let Ok(fd) = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()) {
            let name = std::fs::read_to_string(format!("/proc/{}/comm", pid.as_raw_nonzero()))
                .unwrap_or_default();
            // A signal through the pidfd reaches the process it was opened
            // on or none: if that one died and the pid was reused between
            // the open and the read of its name, the kill fails.
            if name.starts_with(CHILD_NAME)
                && rustix::process::pidfd_send_signal(&fd, rustix::process::Signal::KILL).is_ok()
            {
                let mut fds = [rustix::event::PollFd::new(
                    &fd,
                    rustix::event::PollFlags::IN,
                )];
                let s = rustix::time::Timespec {
                    tv_sec: 1,
                    tv_nsec: 0,
                };
                let _ = rustix::event::poll(&mut fds, Some(&s));
            }
        }
    }
    journal.set_child(0);
}
