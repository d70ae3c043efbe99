//! Whether the machine has a CPU to spare: the condition under which
//! spreading a hot directory over servers can pay.
//!
//! Distribution turns one server's work on a directory into work for all
//! of them at once; that is faster only if the other servers can run at
//! the same time. Where every CPU is already busy (a small machine whose
//! servers share their cores with the programs, measured in
//! docs/BENCHMARKS.md "Adaptive directories": 2 CPUs, 2 servers, a
//! distributed hot directory cost 1,422 ms against 1,161 centralized), a
//! create hashed to another server is two context switches more and
//! nothing runs in parallel. K42 hot-swaps an object to fit its
//! environment (Appavoo ch. 6); the environment here is whether cores
//! idle. The meter reads the kernel's CPU time counters (`/proc/stat`)
//! and calls the machine spare when, between two readings, the CPUs were
//! idle for at least one CPU's worth of the time.

use std::time::{Duration, Instant};

/// Readings closer together than this say nothing; the verdict of the
/// last longer interval stands.
const MIN_INTERVAL: Duration = Duration::from_millis(20);
/// A reading older than this is not compared with: the load it saw may
/// be long gone.
const MAX_INTERVAL: Duration = Duration::from_secs(1);

/// CPU time of the whole machine: (all, idle), in clock ticks.
pub type CpuTimes = (u64, u64);

/// Successive readings of the CPU time counters.
#[derive(Debug)]
pub struct CpuMeter {
    read: fn() -> Option<(CpuTimes, u64)>,
    last: Option<(Instant, CpuTimes)>,
    verdict: bool,
}

impl Default for CpuMeter {
    fn default() -> Self {
        CpuMeter::with_reader(proc_stat)
    }
}

impl CpuMeter {
    /// A meter on `read`, which gives the CPU times and the number of
    /// CPUs (tests give their own).
    pub fn with_reader(read: fn() -> Option<(CpuTimes, u64)>) -> CpuMeter {
        CpuMeter {
            read,
            last: None,
            verdict: false,
        }
    }

    /// Was at least one CPU's worth of time idle since the previous
    /// reading? With no recent reading, no: the answer comes at the next
    /// call, a window later (the policy asks again while the directory
    /// stays hot).
    pub fn spare(&mut self, now: Instant) -> bool {
        let Some((times, cpus)) = (self.read)() else {
            return false;
        };
        match self.last {
            Some((at, _)) if now.saturating_duration_since(at) < MIN_INTERVAL => self.verdict,
            Some((at, before)) if now.saturating_duration_since(at) <= MAX_INTERVAL => {
                self.verdict = spare_between(before, times, cpus);
                self.last = Some((now, times));
                self.verdict
            }
            _ => {
                self.last = Some((now, times));
                self.verdict = false;
                false
            }
        }
    }
}

/// Idle for at least one CPU's worth of the time between two readings.
fn spare_between(before: CpuTimes, after: CpuTimes, cpus: u64) -> bool {
    let all = after.0.saturating_sub(before.0);
    let idle = after.1.saturating_sub(before.1);
    all > 0 && idle.saturating_mul(cpus.max(1)) >= all
}

/// The first line of `/proc/stat` (all CPUs: user nice system idle iowait
/// irq softirq steal …; guest time is counted in user already) and the
/// number of `cpuN` lines.
fn proc_stat() -> Option<(CpuTimes, u64)> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    parse_proc_stat(&text)
}

fn parse_proc_stat(text: &str) -> Option<(CpuTimes, u64)> {
    let mut lines = text.lines();
    let first = lines.next()?.strip_prefix("cpu ")?;
    let ticks: Vec<u64> = first
        .split_whitespace()
        .take(8)
        .map(|w| w.parse().ok())
        .collect::<Option<_>>()?;
    if ticks.len() < 5 {
        return None;
    }
    let all = ticks.iter().sum();
    let idle = ticks[3] + ticks[4];
    let cpus = lines
        .filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit))
        .count() as u64;
    Some(((all, idle), cpus))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_gives_all_and_idle_ticks_and_counts_the_cpus() {
        let text = "cpu  100 5 50 800 20 1 2 3 7 0\n\
                    cpu0 50 2 25 400 10 1 1 1 3 0\n\
                    cpu1 50 3 25 400 10 0 1 2 4 0\n\
                    intr 12345\n";
        assert_eq!(parse_proc_stat(text), Some(((981, 820), 2)));
        assert_eq!(parse_proc_stat("intr 1\n"), None);
        assert_eq!(parse_proc_stat("cpu  1 x 3 4 5\n"), None);
        // The machine's own file parses.
        let (times, cpus) = proc_stat().expect("/proc/stat");
        assert!(cpus >= 1 && times.0 >= times.1);
    }

    #[test]
    fn one_idle_cpu_of_the_interval_is_spare_less_is_not() {
        // 2 CPUs, 200 ticks: 100 idle is one CPU's worth.
        assert!(spare_between((0, 0), (200, 100), 2));
        assert!(!spare_between((0, 0), (200, 99), 2));
        // 64 CPUs: 1/64 idle suffices.
        assert!(spare_between((1000, 10), (7400, 110), 64));
        assert!(!spare_between((5, 5), (5, 5), 2), "no time passed");
    }

    #[test]
    fn a_verdict_needs_two_readings_a_window_apart() {
        use std::sync::atomic::{AtomicU64, Ordering};
        static IDLE: AtomicU64 = AtomicU64::new(0);
        static ALL: AtomicU64 = AtomicU64::new(0);
        fn read() -> Option<(CpuTimes, u64)> {
            Some((
                (ALL.load(Ordering::Relaxed), IDLE.load(Ordering::Relaxed)),
                2,
            ))
        }
        let mut m = CpuMeter::with_reader(read);
        let t0 = Instant::now();
        assert!(!m.spare(t0), "no earlier reading");
        ALL.store(200, Ordering::Relaxed);
        IDLE.store(150, Ordering::Relaxed);
        assert!(
            !m.spare(t0 + Duration::from_millis(5)),
            "too close: the old verdict"
        );
        assert!(m.spare(t0 + Duration::from_millis(100)));
        ALL.store(400, Ordering::Relaxed);
        IDLE.store(160, Ordering::Relaxed);
        assert!(!m.spare(t0 + Duration::from_millis(200)), "busy since");
        ALL.store(600, Ordering::Relaxed);
        IDLE.store(360, Ordering::Relaxed);
        assert!(
            !m.spare(t0 + Duration::from_secs(5)),
            "the last reading is stale"
        );
        ALL.store(800, Ordering::Relaxed);
        IDLE.store(560, Ordering::Relaxed);
        assert!(m.spare(t0 + Duration::from_millis(5100)));
    }
}
