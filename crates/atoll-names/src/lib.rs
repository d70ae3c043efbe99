//! fos's name service (fos §3.3): every service of an instance is
//! registered under a hierarchical name (`/fs/server/3`, `/sched/core/1`;
//! later `/host/B/fs/…`), a **fleet** is the set of members under one name
//! (`/fs/server`), and a **policy** picks the member that serves a request
//! of a given class: by a key the caller hashes (`hashed`), in turn
//! (`round-robin`), nearest to the caller (`closest`, by locality domain),
//! or the least busy (`shortest-queue`) — fos's list.
//!
//! A pick asks a [`View`] which members are up and how long their queues
//! are, so a member that died (or is being rebuilt) is passed over, and
//! one that comes back is picked again, without anyone re-registering.
//! This is the seam through which names of members on other hosts will
//! resolve to a proxy.
//!
//! A client binds the names it reaches once ([`Bindings`]: name → its own
//! lane slot, at the member's *generation*) and re-binds a member whose
//! generation moved — it restarted, or moved to another process.
//!
//! ```
//! use atoll_names::{Caller, Fleet, Policy, View};
//!
//! struct Loads([u64; 3]);
//! impl View for Loads {
//!     fn up(&self, m: u32) -> bool { m != 1 }
//!     fn queue(&self, m: u32) -> u64 { self.0[m as usize] }
//! }
//! let fleet = Fleet::file_servers(3, &[Some(0), Some(0), Some(1)], Policy::ShortestQueue);
//! assert_eq!(fleet.members[2].name, "/fs/server/2");
//! let caller = Caller { key: 7, turn: 0, domain: Some(0) };
//! // Server 1 is down; of the others, server 2 has the shorter queue.
//! assert_eq!(fleet.pick(&caller, &Loads([9, 0, 4])), Some(2));
//! ```

use serde::{Deserialize, Serialize};

/// How a fleet picks the member for a request.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Policy {
    /// The caller's key modulo the members (then the next one up): the
    /// same caller keeps to the same member, callers spread.
    #[default]
    Hashed,
    /// Each pick the next member up, in turn.
    RoundRobin,
    /// A member in the caller's locality domain (then any).
    Closest,
    /// The member with the least queued work.
    ShortestQueue,
}

impl Policy {
    pub const NAMES: [&'static str; 4] = ["hashed", "round-robin", "closest", "shortest-queue"];

    pub fn parse(s: &str) -> Option<Policy> {
        Some(match s {
            "hashed" => Policy::Hashed,
            "round-robin" => Policy::RoundRobin,
            "closest" => Policy::Closest,
            "shortest-queue" => Policy::ShortestQueue,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Policy::Hashed => "hashed",
            Policy::RoundRobin => "round-robin",
            Policy::Closest => "closest",
            Policy::ShortestQueue => "shortest-queue",
        }
    }
}

/// One registered service.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// Its name, under its fleet's (`/fs/server/3`).
    pub name: String,
    /// What the transport addresses it by (a server index, a core).
    pub index: u32,
    /// Its locality domain (socket), if pinned.
    pub domain: Option<u32>,
}

/// The members under one name, and how one is picked.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Fleet {
    pub name: String,
    pub policy: Policy,
    pub members: Vec<Member>,
}

/// Who asks: a key for `hashed`, a turn counter for `round-robin`, and
/// the caller's locality domain for `closest`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Caller {
    pub key: u64,
    pub turn: u64,
    pub domain: Option<u32>,
}

/// What a pick needs to know now about members (by index).
pub trait View {
    fn up(&self, member: u32) -> bool;
    fn queue(&self, member: u32) -> u64;
}

/// Is `name` a valid service name: absolute, components of letters,
/// digits, `-` and `_`, no empty component?
pub fn valid_name(name: &str) -> bool {
    name.len() > 1
        && name.starts_with('/')
        && name[1..].split('/').all(|c| {
            !c.is_empty()
                && c.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

impl Fleet {
    /// A fleet named `name` whose members are `name/<index>`.
    ///
    /// # Panics
    /// If `name` is not a valid name (a caller bug).
    pub fn new(
        name: &str,
        policy: Policy,
        members: impl IntoIterator<Item = (u32, Option<u32>)>,
    ) -> Fleet {
        assert!(valid_name(name), "bad fleet name {name:?}");
        Fleet {
            name: name.to_string(),
            policy,
            members: members
                .into_iter()
                .map(|(index, domain)| Member {
                    name: format!("{name}/{index}"),
                    index,
                    domain,
                })
                .collect(),
        }
    }

    /// The file servers of an instance, `/fs/server/<i>`, with the
    /// locality domain of each one's core.
    pub fn file_servers(n: usize, domains: &[Option<u32>], policy: Policy) -> Fleet {
        Fleet::new(
            "/fs/server",
            policy,
            (0..n).map(|i| (i as u32, domains.get(i).copied().flatten())),
        )
    }

    /// The scheduling servers, `/sched/core/<core>`.
    pub fn sched_servers(cores: &[usize], policy: Policy) -> Fleet {
        Fleet::new(
            "/sched/core",
            policy,
            cores.iter().map(|&c| (c as u32, None)),
        )
    }

    /// The member that serves `caller` now: by the fleet's policy among
    /// the members that are up; `None` when none is.
    pub fn pick(&self, caller: &Caller, view: &impl View) -> Option<u32> {
        self.pick_within(caller, view, usize::MAX)
    }

    /// [`Fleet::pick`] among the first `limit` members only: a fleet named
    /// for every slot an instance has room for, of which the first
    /// `limit` have joined (the file servers, Hare §6.1.1), deals among
    /// those as a fleet of `limit` would.
    pub fn pick_within(&self, caller: &Caller, view: &impl View, limit: usize) -> Option<u32> {
        let n = self.members.len().min(limit);
        if n == 0 {
            return None;
        }
        let up = |k: usize| view.up(self.members[k].index);
        let first_up_from = |start: usize| (0..n).map(|k| (start + k) % n).find(|&k| up(k));
        let k = match self.policy {
            Policy::Hashed => first_up_from((caller.key % n as u64) as usize),
            Policy::RoundRobin => first_up_from((caller.turn % n as u64) as usize),
            Policy::Closest => (0..n)
                .find(|&k| {
                    up(k) && caller.domain.is_some() && self.members[k].domain == caller.domain
                })
                .or_else(|| first_up_from((caller.key % n as u64) as usize)),
            Policy::ShortestQueue => (0..n)
                .filter(|&k| up(k))
                // Ties go to the caller's hashed start, so idle members
                // are not all chosen alike.
                .min_by_key(|&k| {
                    let start = (caller.key % n as u64) as usize;
                    (view.queue(self.members[k].index), (k + n - start) % n)
                }),
        }?;
        Some(self.members[k].index)
    }
}

/// Every fleet of an instance.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct Names {
    pub fleets: Vec<Fleet>,
}

impl Names {
    pub fn add(&mut self, fleet: Fleet) {
        self.fleets.retain(|f| f.name != fleet.name);
        self.fleets.push(fleet);
    }

    pub fn fleet(&self, name: &str) -> Option<&Fleet> {
        self.fleets.iter().find(|f| f.name == name)
    }

    /// The member registered under exactly `name`, and its fleet.
    pub fn resolve(&self, name: &str) -> Option<(&Fleet, &Member)> {
        let (fleet, _) = name.rsplit_once('/')?;
        let f = self.fleet(fleet)?;
        f.members.iter().find(|m| m.name == name).map(|m| (f, m))
    }
}

/// Which incarnation of each member serves now (by member index): a
/// member that restarts, or moves to another process, serves under a
/// new generation. 0: not started yet.
pub trait Generations {
    fn generation(&self, member: u32) -> u64;
}

/// A client's binding of a fleet's names to its own lanes (fos §3.3: a
/// client reaches a service through its name, not a fixed address).
/// Each member's name is resolved once to the lane slot that reaches it
/// and cached with the member's generation; the hot path is one load of
/// that generation and a compare. A member that restarted or moved is
/// resolved again, once: exactly one caller sees [`Bound::Rebound`] and
/// drops what it cached of the old incarnation.
#[derive(Debug)]
pub struct Bindings {
    members: Vec<Binding>,
}

#[derive(Debug)]
struct Binding {
    /// The lane slot the member's name resolved to.
    slot: u32,
    /// The generation it was bound at.
    generation: std::sync::atomic::AtomicU64,
}

/// What [`Bindings::bind`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bound {
    /// The binding holds: use this slot.
    Same(u32),
    /// The member's incarnation changed from `from` to `to` since it was
    /// bound: the slot (re-resolved) is still `slot`, but whatever the
    /// caller cached of the old incarnation is to be dropped.
    Rebound { slot: u32, from: u64, to: u64 },
}

impl Bound {
    pub fn slot(self) -> u32 {
        match self {
            Bound::Same(s) | Bound::Rebound { slot: s, .. } => s,
        }
    }
}

impl Bindings {
    /// Resolve every member of `fleet` (its member `i` reached through
    /// lane slot `member.index`) at its current generation.
    pub fn resolve(fleet: &Fleet, now: &impl Generations) -> Bindings {
        Bindings {
            members: fleet
                .members
                .iter()
                .map(|m| Binding {
                    slot: m.index,
                    generation: std::sync::atomic::AtomicU64::new(now.generation(m.index)),
                })
                .collect(),
        }
    }

    /// The slot of member `member`, re-resolving it if its generation
    /// moved. `None` for a member the fleet does not have.
    #[inline]
    pub fn bind(&self, member: usize, now: &impl Generations) -> Option<Bound> {
        use std::sync::atomic::Ordering;
        let b = self.members.get(member)?;
        let current = now.generation(b.slot);
        let cached = b.generation.load(Ordering::Relaxed);
        if current == cached {
            return Some(Bound::Same(b.slot));
        }
        // Several threads may see the change: one wins the re-bind.
        match b
            .generation
            .compare_exchange(cached, current, Ordering::AcqRel, Ordering::Relaxed)
        {
            Ok(_) => Some(Bound::Rebound {
                slot: b.slot,
                from: cached,
                to: current,
            }),
            Err(_) => Some(Bound::Same(b.slot)),
        }
    }

    /// The slot member `member` is bound to, without checking its
    /// generation (the reply to a request sent through [`Bindings::bind`]).
    #[inline]
    pub fn slot(&self, member: usize) -> Option<u32> {
        self.members.get(member).map(|b| b.slot)
    }

    /// The generation member `member` is bound at.
    pub fn generation(&self, member: usize) -> Option<u64> {
        use std::sync::atomic::Ordering;
        self.members
            .get(member)
            .map(|b| b.generation.load(Ordering::Relaxed))
    }

    pub fn len(&self) -> usize {
        self.members.len()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fleet with room for 8 whose first 3 are members deals round-robin
    /// and hashes over those 3, as a fleet of 3 does.
    #[test]
    fn picking_within_the_first_members_deals_as_a_smaller_fleet() {
        struct AllUp;
        impl View for AllUp {
            fn up(&self, _: u32) -> bool {
                true
            }
            fn queue(&self, _: u32) -> u64 {
                0
            }
        }
        let room = Fleet::file_servers(8, &[], Policy::RoundRobin);
        let three = Fleet::file_servers(3, &[], Policy::RoundRobin);
        for turn in 0..12 {
            let c = Caller {
                key: turn * 7,
                turn,
                domain: None,
            };
            let got = room.pick_within(&c, &AllUp, 3);
            assert_eq!(got, three.pick(&c, &AllUp));
            assert!(got.unwrap() < 3);
        }
    }
    use proptest::prelude::*;

    struct Fixed {
        up: Vec<bool>,
        queue: Vec<u64>,
    }
    impl View for Fixed {
        fn up(&self, m: u32) -> bool {
            self.up[m as usize]
        }
        fn queue(&self, m: u32) -> u64 {
            self.queue[m as usize]
        }
    }

    struct Gens(Vec<u64>);
    impl Generations for Gens {
        fn generation(&self, m: u32) -> u64 {
            self.0[m as usize]
        }
    }

    #[test]
    fn bindings_hold_until_a_member_restarts_then_rebind_once() {
        let fleet = Fleet::file_servers(3, &[], Policy::Hashed);
        let mut gens = Gens(vec![1, 1, 1]);
        let b = Bindings::resolve(&fleet, &gens);
        assert_eq!(b.len(), 3);
        assert_eq!(b.bind(2, &gens), Some(Bound::Same(2)));
        // Member 1 restarts (a new process, or moved to another host).
        gens.0[1] = 2;
        assert_eq!(
            b.bind(1, &gens),
            Some(Bound::Rebound {
                slot: 1,
                from: 1,
                to: 2
            })
        );
        assert_eq!(b.bind(1, &gens), Some(Bound::Same(1)), "re-bound once");
        assert_eq!(b.generation(1), Some(2));
        assert_eq!(b.bind(0, &gens), Some(Bound::Same(0)), "others untouched");
        assert_eq!(b.bind(3, &gens), None, "not a member");
    }

    #[test]
    fn names_resolve_and_bad_ones_are_refused() {
        let mut names = Names::default();
        names.add(Fleet::file_servers(3, &[], Policy::Hashed));
        names.add(Fleet::sched_servers(&[0, 2], Policy::RoundRobin));
        let (f, m) = names.resolve("/sched/core/2").unwrap();
        assert_eq!((f.name.as_str(), m.index), ("/sched/core", 2));
        assert!(names.resolve("/sched/core/1").is_none());
        assert!(names.resolve("/fs/server").is_none());
        for bad in ["", "/", "fs", "/fs//x", "/fs/a b", "/fs/"] {
            assert!(!valid_name(bad), "{bad:?}");
        }
        assert!(valid_name("/host/B/fs/server/3"));
        for p in Policy::NAMES {
            assert_eq!(Policy::parse(p).unwrap().as_str(), p);
        }
        assert!(Policy::parse("fastest").is_none());
    }

    #[test]
    fn each_policy_picks_as_it_says() {
        let view = Fixed {
            up: vec![true, true, true, true],
            queue: vec![5, 3, 9, 3],
        };
        let f = |p| Fleet::file_servers(4, &[Some(0), Some(0), Some(1), Some(1)], p);
        let c = |key, turn, domain| Caller { key, turn, domain };
        assert_eq!(f(Policy::Hashed).pick(&c(6, 0, None), &view), Some(2));
        let rr: Vec<_> = (0..5)
            .map(|t| f(Policy::RoundRobin).pick(&c(0, t, None), &view).unwrap())
            .collect();
        assert_eq!(rr, [0, 1, 2, 3, 0]);
        assert_eq!(f(Policy::Closest).pick(&c(0, 0, Some(1)), &view), Some(2));
        assert_eq!(
            f(Policy::ShortestQueue).pick(&c(0, 0, None), &view),
            Some(1)
        );
        assert_eq!(
            f(Policy::ShortestQueue).pick(&c(3, 0, None), &view),
            Some(3),
            "tie"
        );
    }

    proptest! {
        /// Whatever the policy and caller, a pick is a member that is up,
        /// and there is one whenever any member is up.
        #[test]
        fn a_pick_is_always_a_member_that_is_up(
            up in proptest::collection::vec(any::<bool>(), 1..9),
            queue in proptest::collection::vec(0u64..100, 9),
            policy in 0usize..4, key: u64, turn: u64, domain in proptest::option::of(0u32..3),
        ) {
            let n = up.len();
            let domains: Vec<Option<u32>> = (0..n).map(|i| Some(i as u32 % 3)).collect();
            let fleet = Fleet::file_servers(n, &domains, Policy::parse(Policy::NAMES[policy]).unwrap());
            let view = Fixed { up: up.clone(), queue };
            let got = fleet.pick(&Caller { key, turn, domain }, &view);
            match got {
                Some(m) => prop_assert!(up[m as usize]),
                None => prop_assert!(up.iter().all(|u| !u)),
            }
        }
    }
}
