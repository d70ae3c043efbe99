//! Placement policies: which core an `execve` runs on (Hare §3.6.1:
//! random and round-robin, the round-robin cursor propagated from parent to
//! child; fos §4.2: least loaded).
//!
//! State per process: the policy, how a program reaches its core, and a
//! cursor. The new image inherits them through
//! `ATOLL_PLACEMENT=<policy>[/spawn]:<cursor>`; a `fork` parent moves its
//! own cursor on, so siblings (the stages of a pipeline) start from
//! different cores.
//!
//! How a program reaches the core chosen for it ([`ExecVia`]): by default
//! the exec happens *in place* — the process tells that core's scheduling
//! server, which counts it as running there until it ends, moves itself to
//! the core and execs: its pid, parent, process group and tracer stay, as
//! without atoll. `spawn` has the scheduling server start the program and
//! leaves the caller behind as its proxy (Hare §3.6.1's remote exec; what
//! a spawn on another machine needs).

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

use crate::load::LoadTable;

/// Environment variable carrying `<policy>:<cursor>` across `execve`.
pub const ENV_PLACEMENT: &str = "ATOLL_PLACEMENT";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Policy {
    /// Plain exec where the caller runs (no scheduling server involved).
    Local = 0,
    Random = 1,
    RoundRobin = 2,
    LeastLoaded = 3,
}

impl Policy {
    pub fn name(self) -> &'static str {
        match self {
            Policy::Local => "local",
            Policy::Random => "random",
            Policy::RoundRobin => "round-robin",
            Policy::LeastLoaded => "least-loaded",
        }
    }

    pub fn parse(s: &str) -> Option<Policy> {
        Some(match s {
            "local" => Policy::Local,
            "random" => Policy::Random,
            "round-robin" | "rr" => Policy::RoundRobin,
            "least-loaded" => Policy::LeastLoaded,
            _ => return None,
        })
    }

    fn from_u8(v: u8) -> Policy {
        match v {
            1 => Policy::Random,
            2 => Policy::RoundRobin,
            3 => Policy::LeastLoaded,
            _ => Policy::Local,
        }
    }
}

/// How an exec placed on another core gets there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum ExecVia {
    /// Move to the core and exec in place (the default).
    Place = 0,
    /// The core's scheduling server spawns the program; the caller stays
    /// behind as its proxy.
    Spawn = 1,
}

impl ExecVia {
    pub fn name(self) -> &'static str {
        match self {
            ExecVia::Place => "place",
            ExecVia::Spawn => "spawn",
        }
    }

    pub fn parse(s: &str) -> Option<ExecVia> {
        match s {
            "place" => Some(ExecVia::Place),
            "spawn" => Some(ExecVia::Spawn),
            _ => None,
        }
    }
}

/// `(policy, exec via, cursor)` from an `ATOLL_PLACEMENT` value.
pub fn parse_env(v: &str) -> Option<(Policy, ExecVia, u64)> {
    let (p, c) = match v.split_once(':') {
        Some((p, c)) => (p, c.parse().ok()?),
        None => (v, 0),
    };
    let (p, via) = match p.split_once('/') {
        Some((p, via)) => (p, ExecVia::parse(via)?),
        None => (p, ExecVia::Place),
    };
    Some((Policy::parse(p)?, via, c))
}

/// The `ATOLL_PLACEMENT` value for `policy`, `via` and `cursor`.
pub fn env_value(policy: Policy, via: ExecVia, cursor: u64) -> String {
    match via {
        ExecVia::Place => format!("{}:{cursor}", policy.name()),
        ExecVia::Spawn => format!("{}/spawn:{cursor}", policy.name()),
    }
}

static POLICY: AtomicU8 = AtomicU8::new(Policy::Local as u8);
static VIA: AtomicU8 = AtomicU8::new(ExecVia::Place as u8);
static CURSOR: AtomicU64 = AtomicU64::new(0);

/// Load the process's placement state from its environment (absent:
/// `local`, today's behaviour for processes started outside `atoll run`).
pub fn init_from_env() {
    if let Some(p) = std::env::var(ENV_PLACEMENT)
        .ok()
        .and_then(|v| parse_env(&v))
    {
        POLICY.store(p.0 as u8, Ordering::Relaxed);
        VIA.store(p.1 as u8, Ordering::Relaxed);
        CURSOR.store(p.2, Ordering::Relaxed);
    }
}

pub fn policy() -> Policy {
    Policy::from_u8(POLICY.load(Ordering::Relaxed))
}

pub fn exec_via() -> ExecVia {
    match VIA.load(Ordering::Relaxed) {
        1 => ExecVia::Spawn,
        _ => ExecVia::Place,
    }
}

/// Take the cursor for one exec; the process (and the new image) moves on.
pub fn take_cursor() -> u64 {
    CURSOR.fetch_add(1, Ordering::Relaxed)
}

/// In a fork parent: the child keeps the cursor, the parent moves on.
pub fn on_fork_parent() {
    CURSOR.fetch_add(1, Ordering::Relaxed);
}

/// The cursor the next exec uses (without moving it: an `execve` that
/// fails, e.g. one step of `execvp`'s `PATH` search, changes nothing).
pub fn peek_cursor() -> u64 {
    CURSOR.load(Ordering::Relaxed)
}

/// The `ATOLL_PLACEMENT=...` entry for a new image whose exec used
/// `cursor`: the image starts one further.
pub fn env_entry(cursor: u64) -> Vec<u8> {
    format!(
        "{ENV_PLACEMENT}={}",
        env_value(policy(), exec_via(), cursor.wrapping_add(1))
    )
    .into_bytes()
}

/// The one core this process is pinned to, if its affinity is one core.
pub fn pinned_core() -> Option<usize> {
    let set = rustix::thread::sched_getaffinity(None).ok()?;
    let mut found = None;
    for k in 0..rustix::thread::CpuSet::MAX_CPU {
        if set.is_set(k) {
            if found.is_some() {
                return None;
            }
            found = Some(k);
        }
    }
    found
}

/// Cheap per-process pseudo-random numbers (xorshift), seeded from the
/// cursor, the pid and the clock: placement needs spread, not secrecy.
fn random(cursor: u64) -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    let mut x = cursor
        ^ (rustix::process::getpid().as_raw_nonzero().get() as u64) << 32
        ^ t.tv_nsec as u64
        ^ 0x9e37_79b9_7f4a_7c15;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    x
}

/// The core for an exec under `policy` (`None`: run locally).
pub fn choose(
    policy: Policy,
    cursor: u64,
    table: &LoadTable,
    here: Option<usize>,
) -> Option<usize> {
    let n = table.ncores() as u64;
    if n == 0 {
        return None;
    }
    match policy {
        Policy::Local => None,
        Policy::RoundRobin => Some((cursor % n) as usize),
        Policy::Random => Some((random(cursor) % n) as usize),
        Policy::LeastLoaded => {
            // The core we are on counts one more (this process runs there);
            // ties go to the core the cursor names first.
            let start = cursor % n;
            (0..n)
                .map(|i| ((start + i) % n) as usize)
                .min_by_key(|&k| table.running(k) + u64::from(Some(k) == here))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(n: usize) -> (std::path::PathBuf, LoadTable) {
        let d = std::env::temp_dir().join(format!(
            "atoll-sched-pl-{}-{n}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&d).unwrap();
        let t = LoadTable::create(&d.join("sched.load"), n).unwrap();
        (d, t)
    }

    #[test]
    fn env_round_trip_and_bad_values() {
        use ExecVia::{Place, Spawn};
        assert_eq!(
            parse_env("round-robin:7"),
            Some((Policy::RoundRobin, Place, 7))
        );
        assert_eq!(
            parse_env("least-loaded"),
            Some((Policy::LeastLoaded, Place, 0))
        );
        assert_eq!(
            parse_env("random/spawn:3"),
            Some((Policy::Random, Spawn, 3))
        );
        assert_eq!(parse_env("random:x"), None);
        assert_eq!(parse_env("fastest:1"), None);
        assert_eq!(parse_env("random/teleport:1"), None);
        for p in [
            Policy::Local,
            Policy::Random,
            Policy::RoundRobin,
            Policy::LeastLoaded,
        ] {
            assert_eq!(Policy::parse(p.name()), Some(p));
            for via in [Place, Spawn] {
                assert_eq!(parse_env(&env_value(p, via, 9)), Some((p, via, 9)));
            }
        }
    }

    #[test]
    fn round_robin_walks_the_cores_and_local_never_moves() {
        let (d, t) = table(3);
        let cores: Vec<_> = (0..6)
            .map(|c| choose(Policy::RoundRobin, c, &t, None).unwrap())
            .collect();
        assert_eq!(cores, [0, 1, 2, 0, 1, 2]);
        assert_eq!(choose(Policy::Local, 1, &t, None), None);
        for c in 0..50 {
            assert!(choose(Policy::Random, c, &t, None).unwrap() < 3);
        }
        let _ = std::fs::remove_dir_all(d);
    }

    #[test]
    fn least_loaded_prefers_idle_cores_and_counts_the_caller() {
        let (d, t) = table(3);
        t.add_running(0, 2);
        t.add_running(1, 1);
        assert_eq!(choose(Policy::LeastLoaded, 0, &t, None), Some(2));
        // Caller on core 2: core 2 counts 1, like core 1; cursor 1 → 1.
        assert_eq!(choose(Policy::LeastLoaded, 1, &t, Some(2)), Some(1));
        t.add_running(2, 5);
        assert_eq!(choose(Policy::LeastLoaded, 0, &t, None), Some(1));
        let _ = std::fs::remove_dir_all(d);
    }

    #[test]
    fn fork_parent_moves_on_and_the_child_keeps_the_cursor() {
        let before = take_cursor();
        on_fork_parent();
        assert_eq!(take_cursor(), before + 2);
    }
}
