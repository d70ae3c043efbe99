//! When a directory should change mode (Hare §6.1.2: "heuristics such as
//! the number of entries or the number of operations in a given
//! timeframe"). Kept apart from the swap mechanism (`super`), as K42 keeps
//! the decision to hot-swap apart from the mediator (Appavoo ch. 6).
//!
//! The home server feeds every namespace request on a directory homed
//! here that holds at least `min_entries` entries, or that a swap spread,
//! into [`Policy::observe`] (one hash lookup and a few additions; nothing
//! when the policy is off, no state for small directories). Per directory it
//! counts requests and distinct sessions in windows of [`Thresholds::window`]:
//! * **hot** — a window with at least `hot_ops` requests from at least
//!   `hot_sessions` sessions (contention) while the directory holds at
//!   least `min_entries` entries (size): ask for distributed;
//!   — and only if the machine had a CPU to spare over the last window
//!   (`spare_cpu`, [`super::spare`]): where every CPU is busy, spreading
//!   the work over servers runs nothing in parallel and costs context
//!   switches;
//! * **cool** — `cool_windows` windows in a row under `cool_ops` requests,
//!   or fewer than `min_entries / 2` entries: ask for centralized.
//!
//! Hysteresis: the hot and cool levels are far apart, a directory stays in
//! a mode at least `dwell` after a swap, and a request for a swap is sent
//! at most once per `dwell` (a client may ignore it).
//!
//! The policy looks at a directory only when a request about it reaches
//! its home server: a directory nobody uses any more keeps its mode (it
//! costs nothing either way) until the first request after the quiet
//! spell, which then finds the cool windows counted and asks to go back.
//!
//! `ATOLL_ADAPT_POLICY` (in the instance's environment) overrides the
//! thresholds, e.g. `hot_ops=200,hot_sessions=2,min_entries=64` — for tests
//! that make a directory hot without a machine big enough to reach the
//! defaults, and for measuring other levels ([`Thresholds::parse`]).

use super::spare::CpuMeter;
use crate::fs::ordered::Map;
use crate::fs::tape::{self, Tag};
use std::time::{Duration, Instant};

use atoll_proto::{InodeId, SessionId};

/// The policy's knobs (defaults measured on `atoll bench`, see docs).
#[derive(Clone, Copy, Debug, serde::Serialize, serde::Deserialize)]
pub struct Thresholds {
    pub window: Duration,
    pub hot_ops: u32,
    pub hot_sessions: u32,
    pub min_entries: usize,
    pub cool_ops: u32,
    pub cool_windows: u32,
    pub dwell: Duration,
    /// Ask for distribution only when a CPU was to spare.
    pub spare_cpu: bool,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            window: Duration::from_millis(100),
            hot_ops: 2000,
            hot_sessions: 4,
            min_entries: 256,
            cool_ops: 100,
            cool_windows: 20,
            dwell: Duration::from_secs(2),
            spare_cpu: true,
        }
    }
}

/// Environment variable overriding [`Thresholds`]: `key=value` pairs
/// separated by commas; keys `window_ms`, `hot_ops`, `hot_sessions`,
/// `min_entries`, `cool_ops`, `cool_windows`, `dwell_ms`, `spare_cpu`
/// (0 or 1).
pub const ENV_ADAPT_POLICY: &str = "ATOLL_ADAPT_POLICY";

impl Thresholds {
    /// The defaults with `ATOLL_ADAPT_POLICY` applied; a value that does
    /// not parse is reported and the defaults kept.
    pub fn from_env() -> Thresholds {
        match std::env::var(ENV_ADAPT_POLICY) {
            Ok(v) => Thresholds::parse(&v).unwrap_or_else(|e| {
                tracing::warn!("{ENV_ADAPT_POLICY}={v:?} ignored: {e}");
                Thresholds::default()
            }),
            Err(_) => Thresholds::default(),
        }
    }

    /// The defaults with `key=value,…` applied (see [`ENV_ADAPT_POLICY`]).
    pub fn parse(spec: &str) -> Result<Thresholds, String> {
        let mut t = Thresholds::default();
        for pair in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = pair
                .split_once('=')
                .ok_or_else(|| format!("{pair:?} is not key=value"))?;
            let n: u64 = v
                .trim()
                .parse()
                .map_err(|_| format!("{k}: {v:?} is not a number"))?;
            let small = |n: u64| u32::try_from(n).map_err(|_| format!("{k}: {n} is too large"));
            match k.trim() {
                "window_ms" if n > 0 => t.window = Duration::from_millis(n),
                "hot_ops" => t.hot_ops = small(n)?,
                "hot_sessions" => t.hot_sessions = small(n)?,
                "min_entries" => t.min_entries = n as usize,
                "cool_ops" => t.cool_ops = small(n)?,
                "cool_windows" => t.cool_windows = small(n)?,
                "dwell_ms" => t.dwell = Duration::from_millis(n),
                "spare_cpu" if n <= 1 => t.spare_cpu = n == 1,
                other => return Err(format!("unknown or zero {other:?}")),
            }
        }
        Ok(t)
    }
}

#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Heat {
    #[serde(with = "crate::fs::tape::instant_serde")]
    start: Instant,
    ops: u32,
    sessions: Vec<SessionId>,
    cool: u32,
    /// Last swap or last request for one.
    #[serde(with = "crate::fs::tape::instant_serde")]
    settled: Instant,
    /// This window was hot, but no CPU was to spare: not asked again
    /// before the next window.
    declined: bool,
}

/// Per-directory heat of the directories homed here.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Policy {
    pub on: bool,
    pub limits: Thresholds,
    heat: Map<InodeId, Heat>,
    /// Read only live: its answers are on the request's tape.
    #[serde(skip)]
    meter: CpuMeter,
}

impl Policy {
    /// A namespace request on `dir` (now `distributed`, `entries` here)
    /// from `session` at `now`. Returns the mode to ask for, if any.
    pub fn observe(
        &mut self,
        dir: InodeId,
        distributed: bool,
        entries: usize,
        session: SessionId,
        now: Instant,
    ) -> Option<bool> {
        let t = self.limits;
        let h = self.heat.entry(dir).or_insert_with(|| Heat {
            start: now,
            ops: 0,
            sessions: vec![],
            cool: 0,
            settled: now.checked_sub(t.dwell).unwrap_or(now),
            declined: false,
        });
        h.ops += 1;
        if h.sessions.len() < t.hot_sessions as usize && !h.sessions.contains(&session) {
            h.sessions.push(session);
        }
        if now.duration_since(h.start) < t.window {
            // Hot is decided as soon as the window has seen enough.
            let hot = h.ops >= t.hot_ops && h.sessions.len() >= t.hot_sessions as usize;
            if !hot || distributed || entries < t.min_entries || h.declined {
                return None;
            }
        } else {
            // A window ended: was it cool? (Windows with no request at all
            // count once; the next request ends them.)
            let idle = (now.duration_since(h.start).as_nanos() / t.window.as_nanos().max(1)) as u32;
            if h.ops <= t.cool_ops {
                h.cool = h.cool.saturating_add(idle.max(1));
            } else {
                h.cool = 0;
            }
            h.start = now;
            h.ops = 0;
            h.sessions.clear();
            h.declined = false;
            let cool = h.cool >= t.cool_windows || entries < t.min_entries / 2;
            if !distributed || !cool {
                return None;
            }
        }
        if now.duration_since(h.settled) < t.dwell {
            return None;
        }
        if !distributed && t.spare_cpu {
            let meter = &mut self.meter;
            if !tape::flag(Tag::SpareCpu, || meter.spare(now)) {
                h.declined = true;
                return None;
            }
        }
        h.settled = now;
        Some(!distributed)
    }

    /// A swap of `dir` completed: it stays put for a while.
    pub fn swapped(&mut self, dir: InodeId, _distributed: bool) {
        if let Some(h) = self.heat.get_mut(&dir) {
            h.settled = crate::fs::tape::instant();
            h.cool = 0;
        }
    }

    /// `dir` is gone.
    pub fn forget(&mut self, dir: InodeId) {
        self.heat.remove(&dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> Policy {
        let mut p = Policy {
            on: true,
            ..Policy::default()
        };
        p.limits = Thresholds {
            window: Duration::from_millis(10),
            hot_ops: 8,
            hot_sessions: 2,
            min_entries: 4,
            cool_ops: 1,
            cool_windows: 3,
            dwell: Duration::from_millis(50),
            spare_cpu: false,
        };
        p
    }

    #[test]
    fn contention_on_a_big_directory_asks_for_distribution_once() {
        let mut p = small();
        let d = InodeId(77);
        let t0 = Instant::now();
        let mut asked = vec![];
        for i in 0..20u64 {
            let at = t0 + Duration::from_micros(i * 100);
            if let Some(m) = p.observe(d, false, 10, SessionId(i % 2), at) {
                asked.push((i, m));
            }
        }
        assert_eq!(asked, vec![(7, true)], "hot once, then the dwell holds");
        // One session alone is not contention; a small directory is not hot.
        let mut q = small();
        assert!((0..20).all(|_| q.observe(d, false, 10, SessionId(1), t0).is_none()));
        let mut r = small();
        assert!((0..20u64).all(|i| r.observe(d, false, 2, SessionId(i), t0).is_none()));
    }

    #[test]
    fn a_hot_directory_is_spread_only_when_a_cpu_was_to_spare() {
        use std::sync::atomic::{AtomicU64, Ordering};
        // Two CPUs; each reading advances 200 ticks, IDLE of them idle.
        static TICKS: AtomicU64 = AtomicU64::new(0);
        static IDLE_TOTAL: AtomicU64 = AtomicU64::new(0);
        static IDLE: AtomicU64 = AtomicU64::new(0);
        fn read() -> Option<(super::super::spare::CpuTimes, u64)> {
            let all = TICKS.fetch_add(200, Ordering::Relaxed) + 200;
            let idle = IDLE_TOTAL.fetch_add(IDLE.load(Ordering::Relaxed), Ordering::Relaxed)
                + IDLE.load(Ordering::Relaxed);
            Some(((all, idle), 2))
        }
        let d = InodeId(79);
        let t0 = Instant::now();
        // Hot windows of 10 ms, one request every 100 µs from 2 sessions.
        let run = |p: &mut Policy, idle: u64| {
            IDLE.store(idle, Ordering::Relaxed);
            let mut asked = vec![];
            for i in 0..1000u64 {
                let at = t0 + Duration::from_micros(i * 100);
                if let Some(m) = p.observe(d, false, 10, SessionId(i % 2), at) {
                    asked.push((i / 100, m));
                }
            }
            asked
        };
        let mut busy = small();
        busy.limits.spare_cpu = true;
        busy.meter = CpuMeter::with_reader(read);
        assert_eq!(run(&mut busy, 20), vec![], "every CPU busy: never spread");
        let mut idle = small();
        idle.limits.spare_cpu = true;
        idle.meter = CpuMeter::with_reader(read);
        let asked = run(&mut idle, 150);
        // The first hot window only takes a reading; a later one asks
        // (and, no swap following here, again after each dwell).
        assert!(!asked.is_empty() && asked[0].0 >= 1, "{asked:?}");
        assert!(asked.iter().all(|&(_, m)| m), "{asked:?}");
        assert!(Thresholds::parse("spare_cpu=0").is_ok_and(|t| !t.spare_cpu));
        assert!(Thresholds::parse("spare_cpu=2").is_err());
        assert!(Thresholds::default().spare_cpu);
    }

    #[test]
    fn thresholds_from_key_value_pairs_and_bad_ones_refused() {
        let t = Thresholds::parse("hot_ops=200, hot_sessions=2,window_ms=50,dwell_ms=0").unwrap();
        assert_eq!(t.hot_ops, 200);
        assert_eq!(t.hot_sessions, 2);
        assert_eq!(t.window, Duration::from_millis(50));
        assert_eq!(t.dwell, Duration::ZERO);
        assert_eq!(t.min_entries, Thresholds::default().min_entries);
        assert_eq!(Thresholds::parse("").unwrap().hot_ops, 2000);
        assert!(Thresholds::parse("hot_ops").is_err());
        assert!(Thresholds::parse("hot_ops=x").is_err());
        assert!(Thresholds::parse("heat=3").is_err());
        assert!(Thresholds::parse("window_ms=0").is_err());
        assert!(Thresholds::parse("cool_ops=99999999999").is_err());
    }

    #[test]
    fn a_cooled_directory_goes_back_after_several_quiet_windows() {
        let mut p = small();
        let d = InodeId(78);
        let t0 = Instant::now();
        p.observe(d, true, 10, SessionId(1), t0);
        // One quiet window is not enough (hysteresis) ...
        let next = t0 + Duration::from_millis(15);
        assert_eq!(p.observe(d, true, 10, SessionId(1), next), None);
        // ... a long quiet spell is.
        let late = t0 + Duration::from_millis(200);
        assert_eq!(p.observe(d, true, 10, SessionId(1), late), Some(false));
        // Busy windows reset the count.
        let mut q = small();
        for i in 0..200u64 {
            let at = t0 + Duration::from_micros(i * 500);
            assert_eq!(q.observe(d, true, 10, SessionId(i % 3), at), None);
        }
    }
}
