//! Fault containment: a file server that dies takes only its own clients'
//! calls with it.
//!
//! fos plans for failure (§3.5): a service must survive the loss of one of
//! its servers. Here a server that dies — a crash outside the per-request
//! guard, or `atoll chaos --kill` — marks itself down and closes every
//! channel it serves, so each client waiting on it, or asking it later,
//! gets `EIO` at once instead of waiting forever; the other servers, the
//! boot thread and every call that does not need the dead server go on.
//! Channels handed out after the death are closed by whichever side sees
//! the other last (the server drains its mailbox after marking itself
//! down; the boot thread checks the mark after posting), so none is ever
//! left open with nobody serving it.
//!
//! A server process that dies is noticed by the instance's watchdog
//! (`crate::process`), which marks it here and starts a successor.
//!
//! With a journal (the default; `crate::journal`) a server that dies is
//! not left down: it is rebuilt from its journal and goes on serving the
//! same channels (`server::run`), so its clients see at most the one call
//! that was in flight fail with `EIO`. Only a server that cannot be
//! rebuilt (`--without recovery`, a full journal, a replay that went
//! differently) stays down as described above.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use atoll_proto::boot::ServerHealth;

/// Shared by the boot thread and the server threads.
pub struct Health {
    started: Instant,
    servers: Vec<One>,
    /// Server hosts running now, whether `--servers auto` decides, and how
    /// many times the count changed (`hosts`, `watchdog`).
    hosts: AtomicU32,
    auto: AtomicBool,
    scalings: AtomicU64,
    /// Servers `0..members` are members (`servers` has room for more).
    members: AtomicU32,
}

struct One {
    down: AtomicBool,
    /// Milliseconds since `started` until which the server stalls (0: not).
    stalled_until_ms: AtomicU64,
    tid: AtomicU32,
    /// The server's process, when servers are processes (`process`).
    pid: AtomicU32,
    core: AtomicI32,
    /// The host it runs in (`hosts`), and how many times it moved.
    host: AtomicU32,
    moves: AtomicU32,
    reason: Mutex<String>,
    restarts: AtomicU32,
    recovery_us: AtomicU64,
    /// Milliseconds since `started` when the server last (re)started.
    since_ms: AtomicU64,
    journal: Mutex<Option<std::sync::Arc<crate::journal::Journal>>>,
    /// Joined while the instance ran (Hare §6.1.1), not at boot.
    joined: AtomicBool,
}

impl Health {
    /// Health of `members` servers, with room for one per entry of
    /// `cores` (the core each would be pinned to).
    pub fn new(cores: &[Option<usize>], members: usize) -> Health {
        Health {
            started: Instant::now(),
            servers: cores
                .iter()
                .map(|c| One {
                    down: AtomicBool::new(false),
                    stalled_until_ms: AtomicU64::new(0),
                    tid: AtomicU32::new(0),
                    pid: AtomicU32::new(0),
                    core: AtomicI32::new(c.map_or(-1, |c| c as i32)),
                    host: AtomicU32::new(0),
                    moves: AtomicU32::new(0),
                    reason: Mutex::new(String::new()),
                    restarts: AtomicU32::new(0),
                    recovery_us: AtomicU64::new(0),
                    since_ms: AtomicU64::new(0),
                    journal: Mutex::new(None),
                    joined: AtomicBool::new(false),
                })
                .collect(),
            hosts: AtomicU32::new(0),
            auto: AtomicBool::new(false),
            scalings: AtomicU64::new(0),
            members: AtomicU32::new(members.min(cores.len()) as u32),
        }
    }

    /// Server `i` joined the running instance: reported from now on.
    pub fn joined_now(&self, i: usize) {
        if let Some(s) = self.servers.get(i) {
            s.joined.store(true, Ordering::Relaxed);
            s.since_ms.store(self.now_ms(), Ordering::Relaxed);
            self.members.fetch_max(i as u32 + 1, Ordering::AcqRel);
        }
    }

    /// The members that joined while the instance ran.
    pub fn joined(&self) -> Vec<u32> {
        let n = self.members.load(Ordering::Acquire) as usize;
        (0..n)
            .filter(|&i| self.servers[i].joined.load(Ordering::Relaxed))
            .map(|i| i as u32)
            .collect()
    }

    /// Server `i` runs in host `host` (process `pid`, on `core`), having
    /// moved there when `moved` (`watchdog`).
    pub fn placed(&self, i: usize, host: usize, pid: u32, core: Option<usize>, moved: bool) {
        if let Some(s) = self.servers.get(i) {
            s.host.store(host as u32, Ordering::Relaxed);
            s.core
                .store(core.map_or(-1, |c| c as i32), Ordering::Relaxed);
            self.started_pid(i, pid);
            if moved {
                s.moves.fetch_add(1, Ordering::Relaxed);
                s.since_ms.store(self.now_ms(), Ordering::Relaxed);
            }
        }
    }

    /// `hosts` hosts run now; `changed`: the count just changed.
    pub fn set_hosts(&self, hosts: usize, auto: bool, changed: bool) {
        self.hosts.store(hosts as u32, Ordering::Relaxed);
        self.auto.store(auto, Ordering::Relaxed);
        if changed {
            self.scalings.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Hosts running, whether the count is automatic, and its changes.
    pub fn scaling(&self) -> (u32, bool, u64) {
        (
            self.hosts.load(Ordering::Relaxed),
            self.auto.load(Ordering::Relaxed),
            self.scalings.load(Ordering::Relaxed),
        )
    }

    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// Server `i` runs on the calling thread.
    pub fn started(&self, i: usize) {
        if let Some(s) = self.servers.get(i) {
            s.tid.store(
                rustix::thread::gettid().as_raw_nonzero().get() as u32,
                Ordering::Relaxed,
            );
        }
    }

    /// Server `i` runs as process `pid` (`process`).
    pub fn started_pid(&self, i: usize, pid: u32) {
        if let Some(s) = self.servers.get(i) {
            s.pid.store(pid, Ordering::Relaxed);
            s.tid.store(pid, Ordering::Relaxed);
        }
    }

    /// Server `i`'s journal, if it keeps one.
    pub fn journal(&self, i: usize) -> Option<std::sync::Arc<crate::journal::Journal>> {
        self.servers
            .get(i)
            .and_then(|s| s.journal.lock().ok().and_then(|j| j.clone()))
    }

    /// Server `i` keeps its journal in `journal` (for `atoll status`).
    pub fn set_journal(&self, i: usize, journal: std::sync::Arc<crate::journal::Journal>) {
        if let Some(s) = self.servers.get(i) {
            if let Ok(mut j) = s.journal.lock() {
                *j = Some(journal);
            }
        }
    }

    /// Server `i` was rebuilt from its journal after `reason`, which took
    /// `recovery`.
    pub fn restarted(&self, i: usize, reason: &str, recovery: std::time::Duration) {
        if let Some(s) = self.servers.get(i) {
            if let Ok(mut r) = s.reason.lock() {
                *r = reason.to_string();
            }
            s.recovery_us
                .store(recovery.as_micros() as u64, Ordering::Relaxed);
            s.since_ms.store(self.now_ms(), Ordering::Relaxed);
            s.restarts.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Times server `i` was rebuilt.
    pub fn restarts(&self, i: usize) -> u32 {
        self.servers
            .get(i)
            .map_or(0, |s| s.restarts.load(Ordering::SeqCst))
    }

    /// Server `i` died (`reason` says how): from now on its channels are
    /// closed as they appear.
    pub fn mark_down(&self, i: usize, reason: &str) {
        if let Some(s) = self.servers.get(i) {
            if let Ok(mut r) = s.reason.lock() {
                *r = reason.to_string();
            }
            s.down.store(true, Ordering::SeqCst);
        }
    }

    pub fn is_down(&self, i: usize) -> bool {
        self.servers
            .get(i)
            .is_some_and(|s| s.down.load(Ordering::SeqCst))
    }

    /// Server `i` serves nothing for `millis` from now (`atoll chaos`).
    pub fn stall(&self, i: usize, millis: u64) {
        if let Some(s) = self.servers.get(i) {
            s.stalled_until_ms
                .store(self.now_ms() + millis.max(1), Ordering::Relaxed);
        }
    }

    /// How long server `i` must still stall, if at all.
    /// Hot path: the server loop asks every round, so a server that was
    /// never stalled reads no clock.
    pub fn stall_left_ms(&self, i: usize) -> u64 {
        self.servers
            .get(i)
            .map_or(0, |s| match s.stalled_until_ms.load(Ordering::Relaxed) {
                0 => 0,
                until => until.saturating_sub(self.now_ms()),
            })
    }

    /// What `atoll status` shows.
    pub fn report(&self) -> Vec<ServerHealth> {
        let now_ms = self.now_ms();
        let members = self.members.load(Ordering::Acquire) as usize;
        self.servers
            .iter()
            .take(members)
            .enumerate()
            .map(|(i, s)| {
                let down = s.down.load(Ordering::SeqCst);
                let state = if down {
                    "down"
                } else if self.stall_left_ms(i) > 0 {
                    "stalled"
                } else {
                    "up"
                };
                let journal = s.journal.lock().ok().and_then(|j| j.clone());
                // A server process rebuilds itself after a panic, in its
                // own process; its journal counts those rebuilds.
                let (inner, inner_us) = match (s.pid.load(Ordering::Relaxed), &journal) {
                    (0, _) | (_, None) => (0, 0),
                    (_, Some(j)) => j.rebuilds(),
                };
                let snap = journal.as_ref().map_or((0, 0, 0), |j| j.snapshots());
                let (how, encode_us) = journal.as_ref().map_or((0, 0), |j| j.snapshot_how());
                ServerHealth {
                    server: i as u32,
                    state: state.into(),
                    core: s.core.load(Ordering::Relaxed),
                    host: s.host.load(Ordering::Relaxed),
                    joined: s.joined.load(Ordering::Relaxed),
                    moves: s.moves.load(Ordering::Relaxed),
                    tid: s.tid.load(Ordering::Relaxed),
                    pid: s.pid.load(Ordering::Relaxed),
                    uptime_ms: now_ms.saturating_sub(s.since_ms.load(Ordering::Relaxed)),
                    restarts: s.restarts.load(Ordering::SeqCst) + inner as u32,
                    reason: s.reason.lock().map(|r| r.clone()).unwrap_or_default(),
                    recovery_us: match inner_us {
                        0 => s.recovery_us.load(Ordering::Relaxed),
                        us => us,
                    },
                    journal_records: journal.as_ref().map_or(0, |j| j.records()),
                    journal_bytes: journal.as_ref().map_or(0, |j| j.used()),
                    snapshots: snap.0,
                    snapshot_bytes: snap.1,
                    snapshot_us: snap.2,
                    snapshot_mode: crate::snapshot::Mode::name(how).into(),
                    snapshot_encode_us: encode_us,
                    recoverable: !down && journal.as_ref().is_some_and(|j| !j.full()),
                    // From the control block (`Servers::health`).
                    generation: 0,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_is_up_until_marked_down_and_stalls_only_for_a_while() {
        let h = Health::new(&[Some(0), None], 2);
        assert!(!h.is_down(0) && !h.is_down(1));
        h.stall(1, 60_000);
        assert!(h.stall_left_ms(1) > 0);
        assert_eq!(h.stall_left_ms(0), 0);
        h.mark_down(0, "killed by atoll chaos");
        let r = h.report();
        assert_eq!((r[0].state.as_str(), r[0].core), ("down", 0));
        assert_eq!(r[0].reason, "killed by atoll chaos");
        assert_eq!((r[1].state.as_str(), r[1].core), ("stalled", -1));
        assert!(h.is_down(0));
        assert!(!h.is_down(7), "no such server: not down");
    }
}
