//! The watchdog: starts the hosts the file servers run in (`hosts`),
//! restarts a host that dies with every server it ran (fos §3.5), kills a
//! host whose server is wedged (`wedge`), and changes the number of hosts
//! while programs run — asked by `atoll scale`, or by the load with
//! `--servers auto` (Hare §6.1.1).
//!
//! Everything here happens on the watchdog thread, one thing at a time:
//! a move never meets a restart of the same server, and every host is
//! started by this thread, which lives as long as the instance
//! (`PR_SET_PDEATHSIG` follows the thread that forked).

use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use atoll_msg::BlockPool;
use atoll_proto::ServerStats;

use crate::hosts::{rebalance, Host};
use crate::process::ServerProcess;

/// `atoll scale`, handed to the watchdog: run the servers in `hosts`
/// hosts (`None`: automatically), and say how it went.
pub struct ScaleRequest {
    pub hosts: Option<usize>,
    pub reply: Sender<Result<(usize, usize), String>>,
}

/// Where the hosts go and how many start.
pub struct HostPlan {
    pub exe: PathBuf,
    /// The core of host `h` (one per server: `--max-servers`).
    pub cores: Vec<Option<usize>>,
    /// Hosts started at boot (`--servers`).
    pub initial: usize,
    /// `--servers auto`.
    pub auto: bool,
    /// Servers spin instead of sleeping (`PollMode::Spin`): their clients
    /// do not ring, so a server must beat all the time (`wedge`).
    pub spinning: bool,
}

/// The watchdog's state.
pub struct Watchdog {
    pub servers: Arc<crate::boot::Servers>,
    pub pool: Arc<BlockPool>,
    pub quit: Arc<AtomicBool>,
    pub plan: HostPlan,
    pub requests: Receiver<ScaleRequest>,
    hosts: Vec<Arc<Host>>,
    auto: Option<crate::autoscale::AutoScale>,
    /// Makes the servers that join (`join`; none: the set is fixed).
    maker: Option<Box<crate::ServerMaker>>,
}

impl Watchdog {
    pub fn new(
        servers: Arc<crate::boot::Servers>,
        pool: Arc<BlockPool>,
        quit: Arc<AtomicBool>,
        plan: HostPlan,
        requests: Receiver<ScaleRequest>,
    ) -> Watchdog {
        let auto = plan.auto.then(crate::autoscale::AutoScale::from_env);
        Watchdog {
            servers,
            pool,
            quit,
            plan,
            requests,
            hosts: Vec::new(),
            auto,
            maker: None,
        }
    }

    /// Let servers join past the boot members, made by `maker`.
    pub fn joining_with(mut self, maker: Box<crate::ServerMaker>) -> Watchdog {
        self.maker = Some(maker);
        self
    }

    fn server(&self, i: usize) -> Option<&Arc<ServerProcess>> {
        self.servers.process(i)
    }

    /// The most hosts: one per server the instance may have (its room:
    /// servers join when there are more hosts than members), and one per
    /// core given.
    fn max_hosts(&self) -> usize {
        let servers = match self.maker {
            Some(_) => self.servers.room(),
            None => self.servers.len(),
        };
        servers.min(self.plan.cores.len()).max(1)
    }

    /// Start the hosts and a server in each (from this thread, which lives
    /// as long as the instance: `PR_SET_PDEATHSIG` follows the thread that
    /// forked).
    pub fn start_all(&mut self) -> Result<(), String> {
        let n = self.plan.initial.clamp(1, self.max_hosts());
        for h in 0..n {
            let host = Host::start(&self.plan.exe, h, self.plan.cores[h])?;
            self.hosts.push(Arc::new(host));
        }
        let places = rebalance(&vec![usize::MAX; self.servers.len()], n);
        for (i, &h) in places.iter().enumerate() {
            let Some(p) = self.server(i) else {
                continue;
            };
            let host = self.hosts[h].clone();
            let mut link = p.link();
            p.spawn(&mut link, &host, false)?;
            self.servers
                .health
                .placed(i, h, host.pid(), host.core, false);
        }
        self.servers
            .health
            .set_hosts(self.hosts.len(), self.auto.is_some(), false);
        Ok(())
    }

    /// Stop every server, then every host, and return the servers' final
    /// statistics.
    pub fn stop_all(&mut self) -> Vec<Option<ServerStats>> {
        let stats = (0..self.servers.len())
            .map(|i| {
                let p = self.server(i)?;
                let mut link = p.link();
                p.stop_in(&mut link)
            })
            .collect();
        for h in self.hosts.drain(..) {
            h.finish();
        }
        stats
    }

    /// Kill the host of server `i` if the server owes one request beyond
    /// the bound (`wedge`): its death is then handled as any other.
    fn kill_if_wedged(&self, i: usize, watch: &mut crate::wedge::WedgeWatch) {
        let Some(p) = self.server(i) else {
            return;
        };
        let now = Instant::now();
        let health = &self.servers.health;
        if health.is_down(i) || health.stall_left_ms(i) > 0 {
            watch.forget(i); // stalled on purpose, or not running
            return;
        }
        let owed = health.journal(i).and_then(|j| j.owed());
        let control = &self.servers.control;
        let (beats, unseen) = (control.beats(i), control.doorbell(i).unseen());
        let owed_stuck = watch.observe(i, owed.as_ref(), now);
        let idle_stuck = watch.observe_beats(i, beats, unseen, self.plan.spinning, now);
        let why = match (owed_stuck, idle_stuck) {
            (Some(stuck), _) => format!(
                "wedged: request {} unanswered for {:.1} s; killed",
                owed.map_or(0, |o| o.id),
                stuck.as_secs_f64()
            ),
            (None, Some(stuck)) => format!(
                "wedged: requests waiting, no progress for {:.1} s; killed",
                stuck.as_secs_f64()
            ),
            (None, None) => return,
        };
        let Some(host) = p.host() else {
            return;
        };
        if host.killed() {
            return; // already on its way out
        }
        tracing::error!("file server {i} {why}");
        host.kill(why);
    }

    /// Watch until `quit`.
    pub fn watch(&mut self) {
        let mut wedges =
            crate::wedge::WedgeWatch::new(self.servers.len(), crate::wedge::bound_from_env());
        while !self.quit.load(Ordering::Acquire) {
            while let Ok(req) = self.requests.try_recv() {
                let r = self.scale_request(req.hosts);
                let _ = req.reply.send(r);
                wedges = crate::wedge::WedgeWatch::new(self.servers.len(), wedges.bound());
            }
            if self.consider_load() {
                wedges = crate::wedge::WedgeWatch::new(self.servers.len(), wedges.bound());
            }
            let pidfds: Vec<OwnedFd> = self
                .hosts
                .iter()
                .filter_map(|h| {
                    let pid = rustix::process::Pid::from_raw(h.pid() as i32)?;
                    rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
                })
                .collect();
            let mut pfds: Vec<_> = pidfds
                .iter()
                .map(|fd| rustix::event::PollFd::new(fd, rustix::event::PollFlags::IN))
                .collect();
            let ts = rustix::event::Timespec {
                tv_sec: 0,
                tv_nsec: 50_000_000,
            };
            if pfds.is_empty() {
                std::thread::sleep(Duration::from_millis(50));
            } else {
                let _ = rustix::event::poll(&mut pfds, Some(&ts));
            }
            drop(pfds);
            if self.quit.load(Ordering::Acquire) {
                return;
            }
            // Dead hosts first: their servers' sockets closed too, which
            // is not a server that ended on its own.
            for h in 0..self.hosts.len() {
                if let Some(reason) = self.hosts[h].ended() {
                    self.restart_host(h, &reason);
                    for i in 0..self.servers.len() {
                        wedges.forget(i);
                    }
                }
            }
            for i in 0..self.servers.len() {
                let said = self.server(i).and_then(|p| p.drain_confirmations());
                if let Some(why) = said {
                    // Its host dying closed the socket: the next turn
                    // restarts the host, and the server with it.
                    let host_died = self
                        .server(i)
                        .and_then(|p| p.host())
                        .is_some_and(|h| h.ends_within(Duration::from_millis(500)));
                    if !host_died {
                        self.give_up(i, &why);
                    }
                }
                self.kill_if_wedged(i, &mut wedges);
            }
        }
    }

    /// Host `h` died with its servers: start it again on the same core,
    /// and every server it ran as a successor there.
    fn restart_host(&mut self, h: usize, reason: &str) {
        let old = self.hosts[h].clone();
        tracing::error!("file server host {h} died: {reason}");
        let victims: Vec<usize> = (0..self.servers.len())
            .filter(|&i| {
                self.server(i)
                    .and_then(|p| p.host())
                    .is_some_and(|x| Arc::ptr_eq(&x, &old))
            })
            .collect();
        let fresh = match Host::start(&self.plan.exe, h, old.core) {
            Ok(host) => Arc::new(host),
            Err(why) => {
                for i in victims {
                    if let Some(p) = self.server(i) {
                        let mut link = p.link();
                        p.forget_dead(&mut link);
                    }
                    self.give_up(i, &format!("{reason}; not rebuilt: {why}"));
                }
                return;
            }
        };
        self.hosts[h] = fresh.clone();
        for i in victims {
            self.recover(i, reason, &fresh);
        }
    }

    /// Server `i` died with its host: start a successor in `host`, or
    /// mark it down.
    fn recover(&self, i: usize, reason: &str, host: &Arc<Host>) {
        let Some(p) = self.server(i) else {
            return;
        };
        let t0 = Instant::now();
        let mut link = p.link();
        // What it said last, if anything (a server that gave up says why).
        let said = p.forget_dead(&mut link);
        tracing::error!("file server {i} died: {reason}");
        let journal = self.servers.health.journal(i);
        let cannot = match (said, &journal) {
            (Some(why), _) => Some(why),
            (None, None) => Some("no journal (--without recovery)".to_string()),
            (None, Some(j)) if j.full() => Some("its journal filled up".to_string()),
            _ => None,
        };
        let outcome = match cannot {
            Some(why) => Err(why),
            None => {
                self.pool.release_rep(i);
                p.spawn(&mut link, host, true)
            }
        };
        match outcome {
            Ok(_) => {
                let health = &self.servers.health;
                health.restarted(i, reason, t0.elapsed());
                health.placed(i, host.index, host.pid(), host.core, false);
                tracing::warn!("file server {i} restarted in {:?}", t0.elapsed());
            }
            Err(why) => {
                p.forget_dead(&mut link);
                drop(link);
                self.give_up(i, &format!("{reason}; not rebuilt: {why}"));
            }
        }
    }

    /// Server `i` is down for good: its clients get `EIO`.
    fn give_up(&self, i: usize, reason: &str) {
        let Some(p) = self.server(i) else {
            return;
        };
        if self.servers.health.is_down(i) {
            return;
        }
        tracing::error!("file server {i} is down: {reason}");
        let mut link = p.link();
        p.forget_dead(&mut link);
        let health = &self.servers.health;
        health.mark_down(i, reason);
        health.started_pid(i, 0);
        self.servers.control.set_down(i);
        p.close_channels(&mut link);
    }

    /// `atoll scale`: a count, or `None` for automatic.
    fn scale_request(&mut self, hosts: Option<usize>) -> Result<(usize, usize), String> {
        let max = self.max_hosts();
        match hosts {
            None => {
                self.auto = Some(crate::autoscale::AutoScale::from_env());
                self.servers.health.set_hosts(self.hosts.len(), true, false);
                Ok((self.hosts.len(), 0))
            }
            Some(n) if n == 0 || n > max => Err(format!(
                "--servers {n}: this instance can run 1 to {max} (it has {} file servers{})",
                self.servers.len(),
                if self.plan.cores.len() < self.servers.len() {
                    format!(" and {} cores for them", self.plan.cores.len())
                } else {
                    String::new()
                }
            )),
            Some(n) => {
                self.auto = None;
                let moved = self.scale_to(n)?;
                Ok((self.hosts.len(), moved))
            }
        }
    }

    /// Run the servers in `n` hosts: start the new hosts, move the fewest
    /// servers (`rebalance`), stop the hosts left empty. Returns how many
    /// servers moved.
    fn scale_to(&mut self, n: usize) -> Result<usize, String> {
        let before = self.hosts.len();
        if n == before {
            self.servers.health.set_hosts(n, self.auto.is_some(), false);
            return Ok(0);
        }
        let t0 = Instant::now();
        while self.hosts.len() < n {
            let h = self.hosts.len();
            let host = Host::start(&self.plan.exe, h, self.plan.cores[h])?;
            self.hosts.push(Arc::new(host));
        }
        // More hosts than members: servers join, one per host short
        // (Hare §6.1.1), so every host has one to run.
        let members = self.servers.len();
        let joining = self.make_members(n)?;
        // A server that is down (no host) stays where it is, counted on a
        // host that goes on. One that joins has none yet.
        let now: Vec<usize> = (0..members + joining)
            .map(|i| match i < members {
                true => self.server(i).and_then(|p| p.host()).map_or(0, |h| h.index),
                false => usize::MAX,
            })
            .collect();
        let next = rebalance(&now, n);
        let mut moved = 0;
        let mut failed = None;
        // In order, stopping at the first that fails: members are always
        // `0..count`.
        for (i, &h) in next.iter().enumerate().skip(members) {
            if let Err(why) = self.join(i, &self.hosts[h].clone(), members + joining) {
                failed = Some(why);
                break;
            }
        }
        for i in 0..members {
            if next[i] == now[i] || self.servers.health.is_down(i) {
                continue;
            }
            match self.move_server(i, &self.hosts[next[i]].clone()) {
                Ok(()) => moved += 1,
                Err(why) => failed = Some(why),
            }
        }
        // Hosts beyond `n` end once no server runs in them.
        while self.hosts.len() > n {
            let last = self.hosts.last().cloned().expect("a host");
            let busy = (0..self.servers.len()).any(|i| {
                self.server(i)
                    .and_then(|p| p.host())
                    .is_some_and(|h| Arc::ptr_eq(&h, &last))
            });
            if busy {
                break;
            }
            self.hosts.pop();
            last.finish();
        }
        let changed = self.hosts.len() != before;
        self.servers
            .health
            .set_hosts(self.hosts.len(), self.auto.is_some(), changed);
        tracing::info!(
            "file servers: {before} → {} hosts, {moved} moved, in {:?}",
            self.hosts.len(),
            t0.elapsed()
        );
        match failed {
            Some(why) => Err(why),
            None => Ok(moved),
        }
    }

    /// Make the servers that join so that `hosts` hosts each have one:
    /// their journals and links (`ServerMaker`), and their pool
    /// representatives' room, before any of them starts. Returns how many
    /// join (0 when the members suffice or the set is fixed).
    fn make_members(&mut self, hosts: usize) -> Result<usize, String> {
        let members = self.servers.len();
        let Some(maker) = self.maker.as_ref() else {
            return Ok(0);
        };
        let want = hosts.min(self.servers.room());
        for i in members..want {
            if self.servers.link(i).is_some() {
                continue; // made for a join that failed to start it
            }
            let (link, _) = maker
                .start(i, want)
                .map_err(|e| format!("file server {i} could not join: {e}"))?;
            let _ = self.servers.links[i].set(link);
        }
        // The pool first: a joining server takes its representative as
        // it starts; clients learn of it only from the control block,
        // published once it serves (`join`).
        self.pool.publish_members(want.max(members));
        Ok(want.saturating_sub(members))
    }

    /// Start server `i`, which joins the instance (one of `members` from
    /// now on), in `host`: a fresh server, with nothing to replay, that
    /// serves only what is made after it joins (ids name their owner, and
    /// a distributed directory keeps the width it was made with). Once it
    /// serves, the control block publishes the members that include it:
    /// from then on clients may place new inodes and directories on it,
    /// and each lane makes a channel to it at its first request there
    /// (`BootRequest::Channel`). A joined member stays one (its inodes
    /// live on); scaling down only stops hosts.
    fn join(&self, i: usize, host: &Arc<Host>, members: usize) -> Result<(), String> {
        let p = self.server(i).ok_or("no such server")?;
        let mut link = p.link();
        p.spawn(&mut link, host, false)?;
        drop(link);
        let health = &self.servers.health;
        health.placed(i, host.index, host.pid(), host.core, false);
        health.joined_now(i);
        self.servers.control.publish_members((i + 1).min(members));
        tracing::info!("file server {i} joined in host {}", host.index);
        Ok(())
    }

    /// Move server `i` into `to`: it stops between two requests, and a
    /// successor in `to` replays its journal and maps the same channels
    /// (`server::take_over`); its clients wait meanwhile, and nothing
    /// they sent is lost (it stays in the rings).
    fn move_server(&self, i: usize, to: &Arc<Host>) -> Result<(), String> {
        let p = self.server(i).ok_or("no such server")?;
        if self.servers.health.journal(i).is_none() {
            return Err(format!(
                "file server {i} keeps no journal (--without recovery), so it cannot move"
            ));
        }
        let t0 = Instant::now();
        let mut link = p.link();
        if p.stop_in(&mut link).is_none() {
            // It did not stop: perhaps wedged or dying. Killing its host
            // hands it to the restart path; the move is not made.
            if let Some(h) = &link.host {
                h.kill(format!("did not stop to move to host {}", to.index));
            }
            return Err(format!("file server {i} did not stop to move"));
        }
        self.pool.release_rep(i);
        match p.spawn(&mut link, to, true) {
            Ok(_) => {
                self.servers
                    .health
                    .placed(i, to.index, to.pid(), to.core, true);
                tracing::info!(
                    "file server {i} moved to host {} in {:?}",
                    to.index,
                    t0.elapsed()
                );
                Ok(())
            }
            Err(why) => {
                drop(link);
                self.give_up(i, &format!("moving to host {} failed: {why}", to.index));
                Err(format!("file server {i} could not move: {why}"))
            }
        }
    }

    /// `--servers auto`: look at how busy the hosts are and add or remove
    /// one (`autoscale`).
    /// Whether servers moved (their wedge clocks start again).
    fn consider_load(&mut self) -> bool {
        // Within the members: servers join only when asked (`atoll
        // scale N`), never for a burst of load, since a member stays.
        let max = self.servers.len().min(self.plan.cores.len()).max(1);
        let pids: Vec<u32> = self.hosts.iter().map(|h| h.pid()).collect();
        let Some(auto) = self.auto.as_mut() else {
            return false;
        };
        let Some(want) = auto.advise(&pids, pids.len(), max) else {
            return false;
        };
        if let Err(why) = self.scale_to(want) {
            tracing::warn!("automatic scaling to {want} hosts: {why}");
        }
        true
    }
}
