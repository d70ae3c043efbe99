//! Server hosts: the processes that file servers run in, and how servers
//! are spread over them — the elastic server count (Hare §6.1.1).
//!
//! An instance has a fixed set of *file servers* (shards, `0..servers`),
//! chosen at boot with `--max-servers`: each owns the inodes, names and
//! blocks its index is written into (`InodeId`'s owner and home bytes,
//! `hash(dir, name) % servers` for distributed directories), each has its
//! own journal, channels and doorbell. What changes at run time is how
//! many *hosts* serve them: a host is one process pinned to one core
//! (`atoll __fs-server`, named `atoll-fs-hostH`), and every server runs as
//! a thread of exactly one host. `--servers N` starts N hosts; `atoll
//! scale --servers N` starts or stops hosts while programs run and moves
//! servers between them.
//!
//! *Why whole servers move, not entries.* Hare's open problem names two
//! ways (§6.1.1): rehash the entries of distributed directories over the
//! new count (consistent hashing), or migrate state. Ids and the hash are
//! what clients cache (lookup caches, readdir cookies, open descriptions,
//! mappings of blocks), so keeping them fixed and moving the unit that
//! owns them means no client cache is ever wrong and no entry is copied
//! one by one — the virtual-node idea of Dynamo and Ceph's placement
//! groups. A server moves as its successor does after a crash (fos §3.5,
//! `process`): it stops between requests on its old host, its journal
//! is replayed on the new one, which maps the same channels; clients see
//! a pause, not an error. The price: a server count can only grow up to
//! `--max-servers`, and a move costs a replay of the server's journal.
//!
//! *Why a host runs its servers as threads on one core.* The per-server
//! loop, journal and take-over stay what they are for one server per
//! process; the kernel interleaves a host's servers on its core, each
//! sleeping on its own doorbell, so clients ring exactly what they rang
//! before and nothing on their side changes with a move.

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rustix::net::RecvFlags;
use serde::{Deserialize, Serialize};

use crate::process::{recv, send};

/// What the instance tells a host process on its socket (its stdin).
#[derive(Serialize, Deserialize, Debug)]
enum ToHost {
    /// First message.
    Start { index: usize, instance_pid: u32 },
    /// Run a server; its socket is attached (`process::serve_server`).
    Serve,
}

/// A host process as the instance sees it.
pub struct Host {
    pub index: usize,
    /// The core it and its servers are pinned to.
    pub core: Option<usize>,
    child: Mutex<std::process::Child>,
    sock: OwnedFd,
    /// Why the instance killed it itself (`atoll chaos --kill`, a wedge),
    /// told as the reason of the death that follows.
    killed_because: Mutex<Option<String>>,
    pub started: Instant,
}

impl Host {
    /// Start host `index` on `core`.
    pub fn start(exe: &Path, index: usize, core: Option<usize>) -> Result<Host, String> {
        let (ours, theirs) = rustix::net::socketpair(
            rustix::net::AddressFamily::UNIX,
            rustix::net::SocketType::SEQPACKET,
            rustix::net::SocketFlags::CLOEXEC,
            None,
        )
        .map_err(|e| e.to_string())?;
        let child = std::process::Command::new(exe)
            .arg(crate::process::SUBCOMMAND)
            .stdin(std::process::Stdio::from(theirs))
            // A group of its own: a signal aimed at the job's process
            // group (`timeout`, ^C) is not aimed at its file servers,
            // which die with the instance (`PR_SET_PDEATHSIG`).
            .process_group(0)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", exe.display()))?;
        let host = Host {
            index,
            core,
            child: Mutex::new(child),
            sock: ours,
            killed_because: Mutex::new(None),
            started: Instant::now(),
        };
        let start = ToHost::Start {
            index,
            instance_pid: std::process::id(),
        };
        if let Err(e) = send(host.sock.as_fd(), &start, &[]) {
            host.kill("could not be started".into());
            host.reap();
            return Err(format!("host {index}: {e}"));
        }
        Ok(host)
    }

    pub fn pid(&self) -> u32 {
        lock(&self.child).id()
    }

    /// Hand the host a server to run, by the server's socket.
    pub fn serve(&self, server_sock: OwnedFd) -> Result<(), String> {
        send(self.sock.as_fd(), &ToHost::Serve, &[server_sock.as_fd()])
            .map_err(|e| format!("host {} took no server: {e}", self.index))
    }

    /// `SIGKILL` it, saying why (the reason its servers' deaths get).
    pub fn kill(&self, why: String) {
        let mut said = lock(&self.killed_because);
        if said.is_none() {
            *said = Some(why);
        }
        let _ = lock(&self.child).kill();
    }

    /// Whether it was already killed on purpose.
    pub fn killed(&self) -> bool {
        lock(&self.killed_because).is_some()
    }

    /// How it ended, if it did (reaping it).
    pub fn ended(&self) -> Option<String> {
        let status = lock(&self.child).try_wait().ok().flatten()?;
        Some(
            lock(&self.killed_because)
                .take()
                .unwrap_or_else(|| describe(status)),
        )
    }

    /// Does it end within `wait`? A host killed by `SIGKILL` closes its
    /// sockets before it can be reaped, so a server's closed socket may be
    /// its host dying, not the server's thread ending.
    pub fn ends_within(&self, wait: Duration) -> bool {
        let deadline = Instant::now() + wait;
        loop {
            if matches!(lock(&self.child).try_wait(), Ok(Some(_))) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Let it end (its servers are stopped already): its socket is shut,
    /// which a host takes as the end, then it is reaped (killed if it does
    /// not end within 5 s).
    pub fn finish(&self) {
        let _ = rustix::net::shutdown(&self.sock, rustix::net::Shutdown::Both);
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut child = lock(&self.child);
        while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
        if matches!(child.try_wait(), Ok(None)) {
            let _ = child.kill();
        }
        let _ = child.wait();
    }

    fn reap(&self) {
        let _ = lock(&self.child).wait();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// How a process ended, in words.
pub(crate) fn describe(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("its process exited with status {code}"),
        (_, Some(sig)) => format!("its process was killed by signal {sig}"),
        _ => "its process ended".into(),
    }
}

// ------------------------------------------------------------- host side

/// `atoll __fs-server`: run a host whose socket is stdin. Each server it
/// is handed runs in a thread of its own until the server's socket says
/// stop; the host ends when its socket closes and its servers are done.
pub fn host_main(sock: OwnedFd) -> std::io::Result<()> {
    let mut buf = vec![0u8; 4096];
    let Some((
        ToHost::Start {
            index,
            instance_pid,
        },
        _,
    )) = recv(sock.as_fd(), &mut buf, RecvFlags::empty())?
    else {
        return Err(std::io::Error::other("no start message"));
    };
    // Die with the instance (also if it died before this line).
    rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))?;
    if rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get() as u32) != instance_pid {
        return Err(std::io::Error::other("the instance is gone"));
    }
    // `ps` and `top` show which host this is; its threads are named after
    // the servers they run.
    let _ = rustix::thread::set_name(
        &std::ffi::CString::new(format!("atoll-fs-host{index}")).unwrap_or_default(),
    );
    let mut servers = Vec::new();
    loop {
        let (msg, mut fds) = match recv(sock.as_fd(), &mut buf, RecvFlags::empty()) {
            Ok(Some(m)) => m,
            Ok(None) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            // The instance is done with this host (or gone).
            Err(_) => break,
        };
        let (ToHost::Serve, Some(fd)) = (msg, fds.pop()) else {
            continue;
        };
        servers.push(
            std::thread::Builder::new()
                .name(format!("atoll-fs-host{index}"))
                .spawn(move || crate::process::serve_server(fd))?,
        );
        // Threads of servers that stopped (moved away) are joined as the
        // host goes on.
        servers.retain(|h| !h.is_finished());
    }
    let mut failed = None;
    for h in servers {
        if let Ok(Err(e)) = h.join() {
            failed = Some(e);
        }
    }
    failed.map_or(Ok(()), Err)
}

// ------------------------------------------------------------- placement

/// Where servers go when the host count changes: the assignment
/// `server → host` for `hosts` hosts that moves the fewest servers from
/// `now` and leaves every host with ⌊S/H⌋ or ⌈S/H⌉ servers. Servers on
/// hosts that go away (index ≥ `hosts`) always move; a host over its
/// share gives up its highest servers first, and they go to the hosts
/// furthest under it. (Rehashing all servers modulo the new count would
/// move most of them on every change.)
pub fn rebalance(now: &[usize], hosts: usize) -> Vec<usize> {
    let hosts = hosts.max(1);
    let servers = now.len();
    let (base, extra) = (servers / hosts, servers % hosts);
    let mut next: Vec<usize> = now.to_vec();
    let mut load = vec![0usize; hosts];
    let mut homeless = Vec::new();
    for (s, &h) in now.iter().enumerate() {
        if h < hosts {
            load[h] += 1;
        } else {
            homeless.push(s);
        }
    }
    // The `extra` hosts that may keep one more: the most loaded ones, so
    // the fewest servers move.
    let mut order: Vec<usize> = (0..hosts).collect();
    order.sort_by_key(|&h| (std::cmp::Reverse(load[h]), h));
    let mut quota = vec![base; hosts];
    for &h in order.iter().take(extra) {
        quota[h] += 1;
    }
    for h in 0..hosts {
        while load[h] > quota[h] {
            let s = (0..servers)
                .rev()
                .find(|&s| next[s] == h)
                .expect("a loaded host holds a server");
            next[s] = usize::MAX;
            load[h] -= 1;
            homeless.push(s);
        }
    }
    homeless.sort_unstable();
    for s in homeless {
        let h = (0..hosts)
            .filter(|&h| load[h] < quota[h])
            .min_by_key(|&h| (load[h], h))
            .expect("room for every server");
        next[s] = h;
        load[h] += 1;
    }
    next
}

#[cfg(test)]
mod tests {
    use super::rebalance;
    use proptest::prelude::*;

    #[test]
    fn growing_and_shrinking_move_only_what_must() {
        // 4 servers on 1 host → 4 hosts: three move, one stays.
        assert_eq!(rebalance(&[0, 0, 0, 0], 4), [0, 1, 2, 3]);
        // 4 on 4 → 2: the servers of hosts 2 and 3 move, nothing else.
        let two = rebalance(&[0, 1, 2, 3], 2);
        assert_eq!(&two[..2], &[0, 1]);
        assert!(two.iter().all(|&h| h < 2));
        // → 3: one server moves to the new host.
        let three = rebalance(&two, 3);
        assert_eq!(three.iter().zip(&two).filter(|(a, b)| a != b).count(), 1);
    }

    proptest! {
        #[test]
        fn every_server_lands_on_a_host_evenly_and_few_move(
            now in proptest::collection::vec(0usize..8, 1..24),
            hosts in 1usize..8,
        ) {
            let next = rebalance(&now, hosts);
            prop_assert_eq!(next.len(), now.len());
            let mut load = vec![0usize; hosts];
            for &h in &next {
                prop_assert!(h < hosts);
                load[h] += 1;
            }
            let (lo, hi) = (now.len() / hosts, now.len().div_ceil(hosts));
            prop_assert!(load.iter().all(|&l| l >= lo && l <= hi));
            // Fewest moves: servers of vanished hosts, plus each remaining
            // host's excess over the share it can keep.
            let mut before = vec![0usize; hosts];
            for &h in now.iter().filter(|&&h| h < hosts) {
                before[h] += 1;
            }
            let orphans = now.iter().filter(|&&h| h >= hosts).count();
            let mut sorted = before.clone();
            sorted.sort_unstable_by(|a, b| b.cmp(a));
            let extra = now.len() % hosts;
            let excess: usize = sorted
                .iter()
                .enumerate()
                .map(|(k, &l)| l.saturating_sub(lo + usize::from(k < extra)))
                .sum();
            let moved = next.iter().zip(&now).filter(|(a, b)| a != b).count();
            prop_assert_eq!(moved, orphans + excess);
        }
    }
}
