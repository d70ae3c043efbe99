//! Placement policies: which core an `execve` runs on (Hare §3.6.1:
//! random and round-robin, the round-robin cursor propagated from parent to
//! child; fos §4.2: least loaded).
//!
//! State per process: the policy and a cursor. The new image inherits
//! both through `ATOLL_PLACEMENT=<policy>:<cursor>`; a `fork` parent moves
//! its own cursor on, so siblings (the stages of a pipeline) start from
//! different cores.

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

/// `(policy, cursor)` from an `ATOLL_PLACEMENT` value.
pub fn parse_env(v: &str) -> Option<(Policy, u64)> {
    let (p, c) = match v.split_once(':') {
        Some((p, c)) => (p, c.parse().ok()?),
        None => (v, 0),
    };
    Some((Policy::parse(p)?, c))
}

static POLICY: AtomicU8 = AtomicU8::new(Policy::Local as u8);
static CURSOR: AtomicU64 = AtomicU64::new(0);

/// Load the process's placement state from its environment (absent:
/// `local`, today's behaviour for processes started outside `atoll run`).
pub fn init_from_env() {
    if let Some((p, c)) = std::env::var(ENV_PLACEMENT)
        .ok()
        .and_then(|v| parse_env(&v))
    {
        POLICY.store(p as u8, Ordering::Relaxed);
        CURSOR.store(c, Ordering::Relaxed);
    }
}

pub fn policy() -> Policy {
    Policy::from_u8(POLICY.load(Ordering::Relaxed))
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
        "{ENV_PLACEMENT}={}:{}",
        policy().name(),
        cursor.wrapping_add(1)
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
        assert_eq!(parse_env("round-robin:7"), Some((Policy::RoundRobin, 7)));
        assert_eq!(parse_env("least-loaded"), Some((Policy::LeastLoaded, 0)));
        assert_eq!(parse_env("random:x"), None);
        assert_eq!(parse_env("fastest:1"), None);
        for p in [
            Policy::Local,
            Policy::Random,
            Policy::RoundRobin,
            Policy::LeastLoaded,
        ] {
            assert_eq!(Policy::parse(p.name()), Some(p));
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
