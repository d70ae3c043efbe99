//! `--servers auto`: the number of server hosts follows the load (Hare
//! §6.1.1, "elastic server count").
//!
//! The signal is how busy each host process is: the CPU time its threads
//! used (`/proc/PID/stat`, user + system) over the wall time since the
//! last look. It counts every cycle a host spends — serving, spinning
//! before it sleeps (`PollMode::Adaptive`), rebuilding — which is what a
//! core given to servers costs the programs. One host busier than `up`
//! adds a host; every host under `down` for `calm` looks in a row removes
//! one. The gap between the two and the `calm` looks keep it from
//! flapping. `ATOLL_SCALE_POLICY="up=0.7,down=0.1,every=1000,calm=3"`
//! changes them (`every` in milliseconds).

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The policy's thresholds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Thresholds {
    /// A host busier than this (0–1) asks for another.
    pub up: f64,
    /// Every host less busy than this, `calm` looks in a row: one fewer.
    pub down: f64,
    pub every: Duration,
    pub calm: u32,
}

impl Default for Thresholds {
    fn default() -> Thresholds {
        Thresholds {
            up: 0.7,
            down: 0.1,
            every: Duration::from_secs(1),
            calm: 3,
        }
    }
}

impl Thresholds {
    /// `up=0.7,down=0.1,every=1000,calm=3`; fields left out keep their
    /// defaults. `None` for anything it does not understand.
    pub fn parse(text: &str) -> Option<Thresholds> {
        let mut t = Thresholds::default();
        for field in text.split(',').map(str::trim).filter(|f| !f.is_empty()) {
            let (key, value) = field.split_once('=')?;
            match key.trim() {
                "up" => t.up = value.trim().parse().ok()?,
                "down" => t.down = value.trim().parse().ok()?,
                "every" => t.every = Duration::from_millis(value.trim().parse().ok()?),
                "calm" => t.calm = value.trim().parse().ok()?,
                _ => return None,
            }
        }
        (t.down >= 0.0 && t.down < t.up && t.every > Duration::ZERO).then_some(t)
    }
}

/// The policy's memory between looks.
pub struct AutoScale {
    pub thresholds: Thresholds,
    next_look: Instant,
    /// CPU ticks each host had used at the last look, and when.
    last: HashMap<u32, u64>,
    last_at: Instant,
    calm_looks: u32,
}

impl AutoScale {
    pub fn new(thresholds: Thresholds) -> AutoScale {
        let now = Instant::now();
        AutoScale {
            thresholds,
            next_look: now + thresholds.every,
            last: HashMap::new(),
            last_at: now,
            calm_looks: 0,
        }
    }

    /// With `ATOLL_SCALE_POLICY`, or the defaults when it is unset or
    /// not understood (said in the log).
    pub fn from_env() -> AutoScale {
        let t = match std::env::var("ATOLL_SCALE_POLICY") {
            Ok(text) => Thresholds::parse(&text).unwrap_or_else(|| {
                tracing::warn!("ATOLL_SCALE_POLICY={text}: not understood; defaults used");
                Thresholds::default()
            }),
            Err(_) => Thresholds::default(),
        };
        AutoScale::new(t)
    }

    /// The host count to go to, if it should change; looks at most once
    /// per `every`. `pids`: the hosts running now.
    pub fn advise(&mut self, pids: &[u32], hosts: usize, max: usize) -> Option<usize> {
        let now = Instant::now();
        if now < self.next_look {
            return None;
        }
        self.next_look = now + self.thresholds.every;
        let wall = now.duration_since(self.last_at).as_secs_f64();
        self.last_at = now;
        let ticks: Vec<(u32, Option<u64>)> = pids.iter().map(|&p| (p, cpu_ticks(p))).collect();
        let busy: Vec<f64> = ticks
            .iter()
            .filter_map(|&(pid, t)| {
                let (t, before) = (t?, *self.last.get(&pid)?);
                Some(t.saturating_sub(before) as f64 / ticks_per_second() / wall.max(1e-3))
            })
            .collect();
        self.last = ticks
            .iter()
            .filter_map(|&(pid, t)| Some((pid, t?)))
            .collect();
        let want = decide(
            &self.thresholds,
            &busy,
            pids.len(),
            &mut self.calm_looks,
            hosts,
            max,
        );
        if want.is_some() {
            // The hosts change: measure afresh from the next look.
            self.last.clear();
        }
        want
    }
}

/// The decision on one look: `busy` has one fraction per host that could
/// be measured (none for a host started since the last look).
fn decide(
    t: &Thresholds,
    busy: &[f64],
    hosts_measured: usize,
    calm_looks: &mut u32,
    hosts: usize,
    max: usize,
) -> Option<usize> {
    if busy.len() < hosts_measured || busy.is_empty() {
        *calm_looks = 0;
        return None;
    }
    if busy.iter().any(|&b| b >= t.up) {
        *calm_looks = 0;
        return (hosts < max).then_some(hosts + 1);
    }
    if busy.iter().all(|&b| b < t.down) {
        *calm_looks += 1;
        if *calm_looks >= t.calm && hosts > 1 {
            *calm_looks = 0;
            return Some(hosts - 1);
        }
        return None;
    }
    *calm_looks = 0;
    None
}

/// User plus system CPU ticks of process `pid`, all its threads.
fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields count from
    // the last `)`. utime and stime are fields 14 and 15.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

fn ticks_per_second() -> f64 {
    rustix::param::clock_ticks_per_second() as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_text_is_read_and_checked() {
        let t = Thresholds::parse("up=0.5, down=0.05,every=200,calm=2").unwrap();
        assert_eq!(
            (t.up, t.down, t.every, t.calm),
            (0.5, 0.05, Duration::from_millis(200), 2)
        );
        assert_eq!(Thresholds::parse(""), Some(Thresholds::default()));
        assert_eq!(
            Thresholds::parse("up=0.1,down=0.2"),
            None,
            "down must be below up"
        );
        assert_eq!(Thresholds::parse("fast=1"), None);
        assert_eq!(Thresholds::parse("every=0"), None);
    }

    #[test]
    fn a_busy_host_adds_one_and_calm_looks_remove_one() {
        let t = Thresholds::default();
        let mut calm = 0;
        assert_eq!(decide(&t, &[0.9], 1, &mut calm, 1, 4), Some(2));
        assert_eq!(
            decide(&t, &[0.9, 0.2], 2, &mut calm, 4, 4),
            None,
            "at the most"
        );
        assert_eq!(decide(&t, &[0.3, 0.2], 2, &mut calm, 2, 4), None);
        for _ in 0..t.calm - 1 {
            assert_eq!(decide(&t, &[0.01, 0.0], 2, &mut calm, 2, 4), None);
        }
        assert_eq!(decide(&t, &[0.01, 0.0], 2, &mut calm, 2, 4), Some(1));
        assert_eq!(
            decide(&t, &[0.0], 1, &mut calm, 1, 4),
            None,
            "never below one"
        );
        // A host not measured yet (new pid) holds the decision.
        assert_eq!(decide(&t, &[0.95], 2, &mut calm, 2, 4), None);
    }

    #[test]
    fn cpu_time_of_this_process_is_read() {
        let pid = std::process::id();
        let before = cpu_ticks(pid).expect("own stat");
        let t0 = Instant::now();
        let mut x = 0u64;
        while t0.elapsed() < Duration::from_millis(60) {
            x = x.wrapping_add(std::hint::black_box(1));
        }
        assert!(x > 0);
        assert!(cpu_ticks(pid).unwrap() >= before);
        assert_eq!(cpu_ticks(u32::MAX), None);
    }
}
