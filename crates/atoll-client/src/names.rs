//! The client's side of the name service (fos §3.3): a process reaches
//! each file server through its name, `/fs/server/<i>`, not a fixed index.
//!
//! At attach the fleet `/fs/server` is resolved once: each member's name
//! to the lane slot whose channel reaches it (every lane holds one
//! channel per member), at the member's *generation* — which incarnation
//! serves the name, published in the control block by the server each
//! time one starts (fresh, rebuilt in place, a successor process, moved
//! to another host; `Control::advance_generation`). Every request checks
//! its member's binding: one relaxed load and a compare on a line written
//! only when an incarnation starts. A member whose generation moved is
//! re-bound once (`atoll_names::Bindings`): the process drops its cached
//! lookups (the new incarnation does not know who cached what; it also
//! raises every channel's overflow flag, which stays the guarantee when
//! the cache is busy) and counts the re-bind (`names.rebinds` in `atoll
//! status`). The slot stays the same: the instance keeps every channel
//! across restarts and moves, so a lane binds to the member, never to a
//! process. Placement of what may live anywhere goes through the same
//! fleet's policy (`Client::live_server`).

use core::sync::atomic::{AtomicU64, Ordering};

use atoll_msg::Control;
use atoll_names::{Bindings, Bound, Caller, Fleet, Generations, Policy, View};
use atoll_proto::boot::InstanceInfo;

use crate::counters;
use crate::session::Client;

/// The fleet of file servers and this process's bindings of its names.
pub struct FsNames {
    fleet: Fleet,
    bindings: Bindings,
}

impl FsNames {
    /// Resolve `/fs/server/0..n` once, at the generations `control`
    /// publishes now.
    pub fn resolve(info: &InstanceInfo, n: usize, control: &Control) -> FsNames {
        let t = &info.topology;
        let domains: Vec<Option<u32>> = (0..n)
            .map(|s| t.server_domain.get(s).copied())
            .map(|d| d.filter(|&d| d != atoll_proto::topology::UNKNOWN))
            .collect();
        let fleet = Fleet::file_servers(n, &domains, info.fs_policy);
        let bindings = Bindings::resolve(&fleet, &ControlView(control));
        FsNames { fleet, bindings }
    }
}

/// What the fleet of file servers looks like now, from the control block:
/// which servers are up, how many channels each served in its last round
/// (its queue), and which incarnation serves each name.
pub struct ControlView<'a>(pub &'a Control);

impl View for ControlView<'_> {
    /// A server is up when it is a member (it may not have joined yet:
    /// the fleet names every slot of the room) and not down.
    fn up(&self, member: u32) -> bool {
        (member as usize) < self.0.members() && !self.0.is_down(member as usize)
    }
    fn queue(&self, member: u32) -> u64 {
        self.0.load(member as usize)
    }
}

impl Generations for ControlView<'_> {
    fn generation(&self, member: u32) -> u64 {
        self.0.generation(member as usize)
    }
}

impl Client {
    /// The lane slot that reaches `/fs/server/<server>`, re-binding the
    /// name if its member restarted or moved since (see the module
    /// comment). Hot path: every request goes through it. `None` for a
    /// server the instance does not have.
    #[inline]
    pub fn bind_server(&self, server: usize) -> Option<usize> {
        match self
            .fs_names()
            .bindings
            .bind(server, &ControlView(self.control()))?
        {
            Bound::Same(slot) => Some(slot as usize),
            // A member bound before it joined starts its first
            // incarnation: nothing was cached from it.
            Bound::Rebound { slot, from: 0, .. } => Some(slot as usize),
            Bound::Rebound { slot, .. } => {
                counters::bump(&counters::NAME_REBINDS);
                if let Some(dc) = self.dcache() {
                    dc.flush_if_free();
                }
                Some(slot as usize)
            }
        }
    }

    /// The lane slot `/fs/server/<server>` is bound to, not checked again
    /// (for the reply to a request sent through [`Client::bind_server`]).
    #[inline]
    pub fn bound_slot(&self, server: usize) -> Option<usize> {
        self.fs_names().bindings.slot(server).map(|s| s as usize)
    }

    /// The generation `/fs/server/<server>` is bound at in this process.
    pub fn bound_generation(&self, server: usize) -> Option<u64> {
        self.fs_names().bindings.generation(server)
    }

    /// The member of the file-server fleet (`/fs/server`, fos §3.3) that
    /// takes a new object that may live anywhere (pipes, inotify queues, a
    /// process's new files): picked by the instance's `--fleet-policy`
    /// among the live servers (`preferred` is the caller's key for
    /// `hashed`, the default: that server if it is alive, else the next
    /// live one), so a dead server takes only what it held (fault
    /// containment, server `health.rs`).
    pub fn live_server(&self, preferred: usize) -> usize {
        static TURN: AtomicU64 = AtomicU64::new(0);
        // Across hosts, a pipe or queue goes to a member of the caller's
        // node (creation affinity, fos §3.2): its bytes never cross the
        // network between two programs of one host.
        let node = &self.info.node_members;
        if !node.is_empty() {
            let k = preferred % node.len();
            let up = |&&m: &&u32| !self.control().is_down(m as usize);
            let after = node[k..].iter().chain(&node[..k]).find(up);
            return *after.unwrap_or(&node[k]) as usize;
        }
        let n = self.members();
        let t = &self.info.topology;
        let caller = Caller {
            key: preferred as u64,
            turn: match self.info.fs_policy {
                Policy::RoundRobin => TURN.fetch_add(1, Ordering::Relaxed),
                _ => 0,
            },
            domain: Some(t.domain_of_cpu(rustix::thread::sched_getcpu())),
        };
        // Among the members only: the fleet names every slot of the room.
        self.fs_names()
            .fleet
            .pick_within(&caller, &ControlView(self.control()), n)
            .map_or(preferred % n, |s| s as usize)
    }
}
