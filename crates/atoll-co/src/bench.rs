//! The thesis's measurements (K42 §3.1 Fig. 3.1 and §7.5), run by
//! `atoll bench co`; the command prints them beside the published numbers.
//!
//! * **Counter ladder** (K42 §3.1): `t` threads, each pinned to a CPU and
//!   given its own slot, increment a counter `iters` times: behind a lock,
//!   one atomic, per-thread cells in one array (false sharing), per-thread
//!   cells on their own cache lines, and a clustered counter (one padded
//!   rep per slot, called through the translation table). Every variant
//!   uses an atomic add, so the ladder shows sharing only; the reported
//!   time is the thread's CPU time per increment (wall-clock time is in
//!   the JSON), and the slowdown is relative to one thread.
//! * **Calls**: a direct virtual call of a rep (the floor), a call through
//!   the translation table (both in CPU time over a loop), and a call that
//!   misses (the slot's entry evicted first, so the root is asked and the
//!   rep installed; each timed alone on the wall clock).
//! * **Mediator** (K42 Table 7.1): attach, a call through the mediator
//!   (CPU time over a loop), detach; attach and detach again with a thread
//!   per CPU calling the object throughout.
//! * **Null swap** (K42 §7.5.2): swap a distributed counter for a fresh
//!   one of the same kind, uncontended and with a thread per CPU calling
//!   it all along; the loaded run checks that no increment was lost.
//!
//! Every figure is measured `repeat` times and reported as the median with
//! the range (min–max): on a shared machine the spread says how far the
//! median can be trusted.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::Instant;

use crossbeam_utils::CachePadded;
use serde::Serialize;

use crate::counter::{Counter, DistributedCounter};
use crate::{allowed_cpus, pin_to_cpu, set_slot, CoRef, Domain, DomainConfig};

/// What to run.
#[derive(Clone, Debug)]
pub struct Config {
    /// Thread counts of the counter ladder.
    pub threads: Vec<usize>,
    /// Increments per thread per ladder run.
    pub iters: u64,
    /// Runs of every measurement.
    pub repeat: usize,
    /// Calls per call-cost sample.
    pub calls: u64,
    /// Attach/detach pairs and swaps per sample.
    pub swaps: usize,
}

impl Config {
    /// Sizes for a full run: a few seconds on two cores.
    pub fn full(threads: Vec<usize>) -> Config {
        Config {
            threads,
            iters: 1_000_000,
            repeat: 7,
            calls: 1_000_000,
            swaps: 100,
        }
    }

    /// CI smoke sizes: every row, in well under a second of measuring.
    pub fn quick(threads: Vec<usize>) -> Config {
        Config {
            threads,
            iters: 20_000,
            repeat: 3,
            calls: 20_000,
            swaps: 10,
        }
    }
}

/// Median and range of the samples of one figure.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq)]
pub struct Stat {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Stat {
    pub fn of(samples: &mut [f64]) -> Stat {
        if samples.is_empty() {
            return Stat::default();
        }
        samples.sort_by(f64::total_cmp);
        let n = samples.len();
        let median = if n % 2 == 1 {
            samples[n / 2]
        } else {
            (samples[n / 2 - 1] + samples[n / 2]) / 2.0
        };
        Stat {
            median,
            min: samples[0],
            max: samples[n - 1],
        }
    }
}

/// The counters of the ladder.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Variant {
    Lock,
    Atomic,
    PerCoreUnpadded,
    PerCorePadded,
    Clustered,
}

impl Variant {
    pub const ALL: [Variant; 5] = [
        Variant::Lock,
        Variant::Atomic,
        Variant::PerCoreUnpadded,
        Variant::PerCorePadded,
        Variant::Clustered,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Variant::Lock => "lock",
            Variant::Atomic => "atomic",
            Variant::PerCoreUnpadded => "per-core unpadded",
            Variant::PerCorePadded => "per-core padded",
            Variant::Clustered => "clustered",
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct LadderRow {
    pub variant: Variant,
    pub threads: usize,
    /// CPU nanoseconds per increment per thread: what an increment costs
    /// while the thread runs, so other processes' load on a shared machine
    /// does not count (time asleep waiting for the lock does not either).
    pub ns_per_op: Stat,
    /// Wall-clock nanoseconds per increment per thread.
    pub wall_ns_per_op: Stat,
    /// Median at this thread count over the median at one thread.
    pub slowdown: Option<f64>,
}

/// Everything `atoll bench co` measures.
#[derive(Clone, Debug, Serialize)]
pub struct Results {
    pub cpus: usize,
    /// Quiescence costs callers no barrier (membarrier accepted).
    pub barrier_free_calls: bool,
    pub repeat: usize,
    pub ladder: Vec<LadderRow>,
    pub call_direct_ns: Stat,
    pub call_table_ns: Stat,
    pub call_miss_ns: Stat,
    pub attach_us: Stat,
    pub call_mediator_ns: Stat,
    pub detach_us: Stat,
    pub null_swap_us: Stat,
    pub null_swap_loaded_us: Stat,
    pub attach_loaded_us: Stat,
    pub detach_loaded_us: Stat,
    /// Threads calling the object during the loaded measurements.
    pub loaders: usize,
    /// Calls the loaders made (all of them were found in the counter).
    pub loaded_calls: u64,
}

/// Run everything. Errors only if a swap fails or loses an increment.
pub fn run(cfg: &Config) -> Result<Results, String> {
    let cpus = allowed_cpus();
    let mut ladder = Vec::new();
    for v in Variant::ALL {
        let mut one = None;
        for &t in &cfg.threads {
            let runs: Vec<Times> = (0..cfg.repeat.max(1))
                .map(|_| ladder_run(v, t, cfg.iters, &cpus))
                .collect();
            let s = Stat::of(&mut runs.iter().map(|r| r.cpu).collect::<Vec<_>>());
            let wall = Stat::of(&mut runs.iter().map(|r| r.wall).collect::<Vec<_>>());
            if t == 1 {
                one = Some(s.median);
            }
            ladder.push(LadderRow {
                variant: v,
                threads: t,
                ns_per_op: s,
                wall_ns_per_op: wall,
                slowdown: one.map(|o| s.median / o),
            });
        }
    }
    let calls = call_costs(cfg, &cpus);
    let mediator = mediator_costs(cfg);
    let uncontended = null_swaps(cfg, 0, &cpus)?;
    let loaders = cpus.len().max(1);
    let loaded = null_swaps(cfg, loaders, &cpus)?;
    let ((attach_loaded, detach_loaded), mediated_calls) =
        mediator_under_load(cfg, loaders, &cpus)?;
    Ok(Results {
        cpus: cpus.len(),
        barrier_free_calls: crate::calls_are_barrier_free(),
        repeat: cfg.repeat,
        ladder,
        call_direct_ns: calls.0,
        call_table_ns: calls.1,
        call_miss_ns: calls.2,
        attach_us: mediator.0,
        call_mediator_ns: mediator.1,
        detach_us: mediator.2,
        null_swap_us: uncontended.0,
        null_swap_loaded_us: loaded.0,
        attach_loaded_us: attach_loaded,
        detach_loaded_us: detach_loaded,
        loaders,
        loaded_calls: loaded.1 + mediated_calls,
    })
}

fn counter_domain(slots: usize) -> (Domain<dyn Counter>, CoRef<dyn Counter>) {
    let d: Domain<dyn Counter> = Domain::new(DomainConfig { slots, capacity: 4 });
    let c = d
        .create(Arc::new(DistributedCounter::new(slots, 1)))
        .expect("an empty table has room");
    (d, c)
}

/// Nanoseconds of CPU time the calling thread has used.
fn thread_cpu_ns() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    t.tv_sec as f64 * 1e9 + t.tv_nsec as f64
}

/// Per-thread time of a ladder run, in ns.
#[derive(Clone, Copy, Default)]
struct Times {
    wall: f64,
    cpu: f64,
}

/// Start `threads` pinned threads with slots 0.., run `body(i)` in each
/// after a common start, and return the mean of their wall-clock and CPU
/// times.
fn in_threads(threads: usize, cpus: &[usize], body: impl Fn(usize) + Sync) -> Times {
    let start = Barrier::new(threads);
    let total = Mutex::new(Times::default());
    std::thread::scope(|s| {
        for i in 0..threads {
            let (start, total, body) = (&start, &total, &body);
            let cpu = cpus.get(i % cpus.len().max(1)).copied();
            s.spawn(move || {
                if let Some(cpu) = cpu {
                    let _ = pin_to_cpu(cpu);
                }
                set_slot(i);
                start.wait();
                let (t, c) = (Instant::now(), thread_cpu_ns());
                body(i);
                let (wall, cpu) = (t.elapsed().as_nanos() as f64, thread_cpu_ns() - c);
                let mut total = total.lock().unwrap();
                total.wall += wall;
                total.cpu += cpu;
            });
        }
    });
    let total = total.into_inner().unwrap();
    Times {
        wall: total.wall / threads as f64,
        cpu: total.cpu / threads as f64,
    }
}

/// One ladder run: nanoseconds per increment per thread.
fn ladder_run(v: Variant, threads: usize, iters: u64, cpus: &[usize]) -> Times {
    let ns = match v {
        Variant::Lock => {
            let m = Mutex::new(0u64);
            in_threads(threads, cpus, |_| {
                for _ in 0..iters {
                    *m.lock().unwrap() += 1;
                }
            })
        }
        Variant::Atomic => {
            let a = AtomicU64::new(0);
            in_threads(threads, cpus, |_| {
                for _ in 0..iters {
                    black_box(&a).fetch_add(1, Ordering::Relaxed);
                }
            })
        }
        Variant::PerCoreUnpadded => {
            let cells: Vec<AtomicU64> = (0..threads).map(|_| AtomicU64::new(0)).collect();
            in_threads(threads, cpus, |i| {
                for _ in 0..iters {
                    black_box(&cells[i]).fetch_add(1, Ordering::Relaxed);
                }
            })
        }
        Variant::PerCorePadded => {
            let cells: Vec<CachePadded<AtomicU64>> = (0..threads)
                .map(|_| CachePadded::new(AtomicU64::new(0)))
                .collect();
            in_threads(threads, cpus, |i| {
                for _ in 0..iters {
                    black_box(&cells[i]).fetch_add(1, Ordering::Relaxed);
                }
            })
        }
        Variant::Clustered => {
            let (_d, c) = counter_domain(threads);
            in_threads(threads, cpus, |_| {
                for _ in 0..iters {
                    black_box(&c).call(|r| r.inc()).expect("live object");
                }
            })
        }
    };
    let n = iters.max(1) as f64;
    Times {
        wall: ns.wall / n,
        cpu: ns.cpu / n,
    }
}

/// Median cost of taking two `Instant`s (subtracted from single-call
/// timings).
fn timer_overhead_ns() -> f64 {
    let mut v: Vec<f64> = (0..1000)
        .map(|_| {
            let t = Instant::now();
            black_box(t.elapsed()).as_nanos() as f64
        })
        .collect();
    Stat::of(&mut v).median
}

/// (direct virtual call, call through the table, call through a miss).
fn call_costs(cfg: &Config, cpus: &[usize]) -> (Stat, Stat, Stat) {
    if let Some(&cpu) = cpus.first() {
        let _ = pin_to_cpu(cpu);
    }
    set_slot(0);
    let (_d, c) = counter_domain(1);
    let direct: Arc<dyn Counter> = DistributedCounter::new(1, 1).rep_for_bench(0);
    let n = cfg.calls.max(1);
    let (mut d, mut t, mut m) = (Vec::new(), Vec::new(), Vec::new());
    let overhead = timer_overhead_ns();
    for _ in 0..cfg.repeat.max(1) {
        let s = thread_cpu_ns();
        for _ in 0..n {
            black_box(&direct).inc();
        }
        d.push((thread_cpu_ns() - s) / n as f64);
        let s = thread_cpu_ns();
        for _ in 0..n {
            black_box(&c).call(|r| r.inc()).expect("live object");
        }
        t.push((thread_cpu_ns() - s) / n as f64);
        // Misses: evicting waits for quiescence, so only the call is timed.
        let misses = (cfg.swaps * 10).max(10);
        let mut one = Vec::with_capacity(misses);
        for _ in 0..misses {
            c.evict(0).expect("live object");
            let s = Instant::now();
            c.call(|r| r.inc()).expect("live object");
            one.push((s.elapsed().as_nanos() as f64 - overhead).max(0.0));
        }
        m.push(Stat::of(&mut one).median);
    }
    (Stat::of(&mut d), Stat::of(&mut t), Stat::of(&mut m))
}

/// (attach µs, call through the mediator ns, detach µs).
fn mediator_costs(cfg: &Config) -> (Stat, Stat, Stat) {
    set_slot(0);
    let slots = allowed_cpus().len().max(1);
    let (d, c) = counter_domain(slots);
    c.call(|r| r.inc()).expect("live object");
    let n = (cfg.calls / 10).max(1);
    let (mut a, mut k, mut x) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..cfg.repeat.max(1) {
        let (mut at, mut ca, mut de) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..cfg.swaps.max(1) {
            let s = Instant::now();
            let m = d.attach(&c).expect("live object");
            at.push(s.elapsed().as_nanos() as f64 / 1e3);
            let s = thread_cpu_ns();
            for _ in 0..n {
                black_box(&c).call(|r| r.inc()).expect("live object");
            }
            ca.push((thread_cpu_ns() - s) / n as f64);
            let s = Instant::now();
            m.detach();
            de.push(s.elapsed().as_nanos() as f64 / 1e3);
        }
        a.push(Stat::of(&mut at).median);
        k.push(Stat::of(&mut ca).median);
        x.push(Stat::of(&mut de).median);
    }
    (Stat::of(&mut a), Stat::of(&mut k), Stat::of(&mut x))
}

/// Run `measure` on a distributed counter while `loaders` threads call
/// it throughout (it starts once every loader is calling); afterwards,
/// check that every call the loaders made is in the counter. Returns what
/// `measure` returned and the loaders' call count.
fn under_load<T>(
    loaders: usize,
    cpus: &[usize],
    measure: impl FnOnce(&Domain<dyn Counter>, &CoRef<dyn Counter>, usize) -> Result<T, String>,
) -> Result<(T, u64), String> {
    let slots = cpus.len().max(1).max(loaders);
    let (d, c) = counter_domain(slots);
    let stop = AtomicBool::new(false);
    let calling = Barrier::new(loaders + 1);
    let (measured, calls) = std::thread::scope(|s| {
        let workers: Vec<_> = (0..loaders)
            .map(|i| {
                let (c, stop, calling) = (&c, &stop, &calling);
                let cpu = cpus.get(i % cpus.len().max(1)).copied();
                s.spawn(move || {
                    if let Some(cpu) = cpu {
                        let _ = pin_to_cpu(cpu);
                    }
                    set_slot(i);
                    c.call(|r| r.inc()).expect("live object");
                    calling.wait();
                    let mut n = 1u64;
                    while !stop.load(Ordering::Relaxed) {
                        c.call(|r| r.inc()).expect("live object");
                        n += 1;
                    }
                    n
                })
            })
            .collect();
        if loaders > 0 {
            calling.wait();
        }
        let measured = measure(&d, &c, slots);
        stop.store(true, Ordering::Relaxed);
        let calls: u64 = workers.into_iter().map(|w| w.join().unwrap_or(0)).sum();
        (measured, calls)
    });
    let measured = measured?;
    let value = c.call(|r| r.value()).map_err(|e| e.to_string())?;
    if value != calls {
        return Err(format!(
            "lost or duplicated increments under load: {calls} calls, counter {value}"
        ));
    }
    Ok((measured, calls))
}

/// Null swaps in µs (median per run), with `loaders` threads calling.
fn null_swaps(cfg: &Config, loaders: usize, cpus: &[usize]) -> Result<(Stat, u64), String> {
    under_load(loaders, cpus, |d, c, slots| {
        let mut samples = Vec::new();
        for _ in 0..cfg.repeat.max(1) {
            let mut one = Vec::new();
            for _ in 0..cfg.swaps.max(1) {
                let s = Instant::now();
                d.swap(c, Arc::new(DistributedCounter::new(slots, 1)))
                    .map_err(|e| format!("null swap failed: {e}"))?;
                one.push(s.elapsed().as_nanos() as f64 / 1e3);
            }
            samples.push(Stat::of(&mut one).median);
        }
        Ok(Stat::of(&mut samples))
    })
}

/// Attach and detach in µs (medians per run) with `loaders` threads
/// calling through the mediator while it is attached.
fn mediator_under_load(
    cfg: &Config,
    loaders: usize,
    cpus: &[usize],
) -> Result<((Stat, Stat), u64), String> {
    under_load(loaders, cpus, |d, c, _| {
        let (mut a, mut x) = (Vec::new(), Vec::new());
        for _ in 0..cfg.repeat.max(1) {
            let (mut at, mut de) = (Vec::new(), Vec::new());
            for _ in 0..cfg.swaps.max(1) {
                let s = Instant::now();
                let m = d.attach(c).map_err(|e| e.to_string())?;
                at.push(s.elapsed().as_nanos() as f64 / 1e3);
                let s = Instant::now();
                m.detach();
                de.push(s.elapsed().as_nanos() as f64 / 1e3);
            }
            a.push(Stat::of(&mut at).median);
            x.push(Stat::of(&mut de).median);
        }
        Ok((Stat::of(&mut a), Stat::of(&mut x)))
    })
}
