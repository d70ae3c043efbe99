//! The watcher of a remote program's proxy: `atoll __remote-watch ADDR
//! TOKEN PID`, a process of the caller's host that reports the proxy's
//! stops to the node running its program (fos §4.2's proxy, job control
//! across hosts).
//!
//! Why a process of its own: a SIGSTOP sent to the proxy cannot be caught,
//! and it stops every thread of the proxy, its network thread too, so the
//! proxy can neither tell its node nor send heartbeats (its link would end
//! after 3 s of silence, and the node kill the program as for a proxy that
//! died). On one host, the scheduling server that started a program
//! samples its proxy's `/proc/<pid>/stat` (`atoll_sched::mirror`); across
//! hosts nothing on the proxy's host knew the program, so the proxy starts
//! this watcher once its program runs. It opens a link of its own to the
//! node (`Watch { token }`, the secret the node gave the proxy in
//! `Watchable`), samples the proxy's state every [`SAMPLE`], and says
//! `ProxyStopped` when the proxy enters a job-control stop (state `T`) and
//! `ProxyContinued` when it leaves it. The node stops the program and
//! excuses the proxy link's silence meanwhile (`spawn.rs` `serve_watch`);
//! the SIGCONT that continues the proxy is relayed by the proxy itself,
//! as before. A stop of the proxy that mirrors the program's own stop is
//! reported too: the program is stopped already, and the excuse keeps the
//! proxy's link up however long the job stays stopped.
//!
//! The watcher is in a process group of its own (a stop or an interrupt
//! of the job's group does not reach it), holds none of the proxy's
//! descriptors (a pipe end it held would keep its reader from seeing end
//! of file) and no client library (started with an empty environment,
//! through a raw `execve` the library does not see), and ends when the
//! proxy ends (its pidfd) or the link does.

use std::ffi::{CString, OsString};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::time::Duration;

use atoll_sched::raw::{sc, syscall6};
use atoll_transport::{TcpTransport, Transport};

use super::wire::{self, NodeMsg};

/// The hidden subcommand.
pub const SUBCOMMAND: &str = "__remote-watch";
/// How often the proxy's state is sampled: as often as a scheduling
/// server samples a local program's proxy (a mirrored stop lags by up to
/// this much).
const SAMPLE: Duration = Duration::from_millis(25);

/// Entry point; `args` follow the subcommand: ADDR TOKEN PID.
pub fn main(args: Vec<OsString>) -> i32 {
    let [addr, token, pid] = &args[..] else {
        eprintln!("atoll: usage: atoll {SUBCOMMAND} ADDR TOKEN PID");
        return 2;
    };
    let parse = |s: &OsString| s.to_str().and_then(|s| s.parse::<u64>().ok());
    let (Some(token), Some(pid)) = (parse(token), parse(pid)) else {
        return 2;
    };
    let Some(proxy) = Proxy::open(pid as i32) else {
        return 0; // gone already
    };
    let Ok(net) = TcpTransport::new() else {
        return 1;
    };
    let Ok(link) = net.connect(&addr.to_string_lossy()) else {
        return 1;
    };
    if wire::send(&*link, 0, &NodeMsg::Watch { token }).is_err() {
        return 1;
    }
    let mut stopped = false;
    while !proxy.ended(SAMPLE) {
        // Heartbeats of the node; its silence or end ends the watch.
        loop {
            match link.recv(Some(Duration::ZERO)) {
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(_) => return 0,
            }
        }
        let now = proxy.stopped();
        if now != stopped {
            stopped = now;
            let msg = match now {
                true => NodeMsg::ProxyStopped,
                false => NodeMsg::ProxyContinued,
            };
            if wire::send(&*link, 0, &msg).is_err() {
                return 0;
            }
        }
    }
    link.close();
    0
}

/// The proxy: a pidfd (readable once it ended) and its `/proc` state.
struct Proxy {
    pidfd: OwnedFd,
    stat: OwnedFd,
}

impl Proxy {
    fn open(pid: i32) -> Option<Proxy> {
        let pidfd = rustix::process::pidfd_open(
            rustix::process::Pid::from_raw(pid)?,
            rustix::process::PidfdFlags::empty(),
        )
        .ok()?;
        let stat = rustix::fs::open(
            format!("/proc/{pid}/stat"),
            rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .ok()?;
        Some(Proxy { pidfd, stat })
    }

    /// Wait up to `limit`: true if the proxy ended meanwhile.
    fn ended(&self, limit: Duration) -> bool {
        let mut p = libc::pollfd {
            fd: self.pidfd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd on this stack, valid for the call.
        let n = unsafe { libc::poll(&mut p, 1, limit.as_millis() as libc::c_int) };
        n > 0
    }

    /// In a job-control stop (state `T`; `t`, a tracing stop, is not one)?
    fn stopped(&self) -> bool {
        let mut buf = [0u8; 512];
        let Ok(n) = rustix::io::pread(&self.stat, &mut buf, 0) else {
            return false;
        };
        state(&buf[..n]) == Some(b'T')
    }
}

/// The state letter of a `/proc/<pid>/stat` line (after the command name,
/// which may itself contain `)`).
fn state(line: &[u8]) -> Option<u8> {
    let close = line.iter().rposition(|&b| b == b')')?;
    line.get(close + 2).copied()
}

/// Start the watcher of this process (the proxy) for the program `token`
/// names at the node at `addr`. Called from the proxy, which carries the
/// client library and threads: the child does nothing but raw system
/// calls until its `execve` (no allocation, no lock, no libc entry point
/// the library wraps), as `atoll_sched::raw::fork_idle` does.
pub fn start(addr: &str, token: u64) -> bool {
    let me = std::process::id();
    let strings = [
        CString::new("atoll").ok(),
        CString::new(SUBCOMMAND).ok(),
        CString::new(addr).ok(),
        CString::new(token.to_string()).ok(),
        CString::new(me.to_string()).ok(),
    ];
    let Some(strings) = strings.into_iter().collect::<Option<Vec<CString>>>() else {
        return false;
    };
    let exe = match std::env::current_exe() {
        Ok(p) => CString::new(p.as_os_str().as_bytes()).ok(),
        Err(_) => None,
    };
    let Some(exe) = exe else { return false };
    let null = c"/dev/null";
    let mut argv: Vec<*const libc::c_char> = strings.iter().map(|s| s.as_ptr()).collect();
    argv.push(std::ptr::null());
    let envp: [*const libc::c_char; 1] = [std::ptr::null()];
    let empty_mask: u64 = 0;
    // SAFETY: a raw fork. The child touches only memory prepared above
    // (strings, pointer arrays, the mask), read by the kernel, and issues
    // raw system calls until `execve` replaces it or `exit_group` ends it,
    // so the copied state of other threads, of libc or of the client
    // library never matters.
    let pid = unsafe { syscall6(libc::SYS_fork, [0; 6]) };
    if pid != 0 {
        return pid > 0;
    }
    // The child. Its own process group: the job's stops and interrupts are
    // not for it.
    sc(libc::SYS_setpgid, 0, 0, 0);
    // SAFETY: the path is a NUL-terminated string that outlives the call.
    let fd = unsafe {
        syscall6(
            libc::SYS_openat,
            [
                libc::AT_FDCWD as u64,
                null.as_ptr() as u64,
                libc::O_RDWR as u64,
                0,
                0,
                0,
            ],
        )
    };
    if fd >= 0 {
        for target in 0..3u64 {
            if fd as u64 != target {
                sc(libc::SYS_dup2, fd as u64, target, 0);
            }
        }
    }
    // None of the proxy's descriptors (its pipe ends above all).
    sc(libc::SYS_close_range, 3, u32::MAX as u64, 0);
    // The proxy blocks the signals it relays; the watcher blocks none.
    // SAFETY: the kernel reads one 8-byte mask from this stack.
    unsafe {
        syscall6(
            libc::SYS_rt_sigprocmask,
            [
                libc::SIG_SETMASK as u64,
                &empty_mask as *const u64 as u64,
                0,
                8,
                0,
                0,
            ],
        );
    }
    // SAFETY: NUL-terminated path, argument and environment arrays built
    // above, alive until the call replaces this image.
    unsafe {
        syscall6(
            libc::SYS_execve,
            [
                exe.as_ptr() as u64,
                argv.as_ptr() as u64,
                envp.as_ptr() as u64,
                0,
                0,
                0,
            ],
        );
    }
    atoll_sched::raw::exit_group(127)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_is_read_after_the_command_name() {
        assert_eq!(state(b"42 (a) b) T 1 42 42"), Some(b'T'));
        assert_eq!(state(b"42 (bash) S 1 42 42"), Some(b'S'));
        assert_eq!(state(b"42 (x"), None);
    }

    /// A process stopped and continued is seen so by the samples.
    #[test]
    fn a_stop_and_a_continue_of_a_process_are_sampled() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let p = Proxy::open(pid).unwrap();
        assert!(!p.stopped());
        crate::sys::kill(pid, libc::SIGSTOP).unwrap();
        // The stop is reported to the parent once it took effect.
        let mut status = 0;
        // SAFETY: waits for our own child, writing one int.
        unsafe { libc::waitpid(pid, &mut status, libc::WUNTRACED) };
        assert!(libc::WIFSTOPPED(status));
        assert!(p.stopped());
        crate::sys::kill(pid, libc::SIGCONT).unwrap();
        // SAFETY: as above.
        unsafe { libc::waitpid(pid, &mut status, libc::WCONTINUED) };
        assert!(!p.stopped());
        assert!(!p.ended(Duration::ZERO));
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(p.ended(Duration::from_secs(10)));
    }
}
