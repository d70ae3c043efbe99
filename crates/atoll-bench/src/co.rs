//! `atoll bench co`: the clustered-object measurements of the K42 thesis
//! (counter ladder §3.1; mediator costs Table 7.1; null hot-swap §7.5.2),
//! measured by `atoll_co::bench` and printed beside the published numbers.
//!
//! The thesis measured on other machines (a 24-way RS64-IV for the
//! counters, a 4-way Power3 270 workstation for the mediator), so only the
//! shapes compare: the ladder's slowdowns, and the order of magnitude of
//! attach, detach and swap times.

use std::fmt::Write;

use atoll_co::bench::{self as cb, Results, Stat, Variant};

/// Thesis, 4-way Power3 (Table 7.1, §7.5.2).
pub const THESIS_ATTACH_US: f64 = 17.84;
pub const THESIS_MEDIATOR_CALL_US: f64 = 1.40;
pub const THESIS_DETACH_US: f64 = 4.23;
pub const THESIS_NULL_SWAP_CONTENDED_US: f64 = 27.6;
pub const THESIS_NULL_SWAP_UNCONTENDED_US: f64 = 10.8;
/// Thesis, 24-way RS64-IV (§3.1): slowdown at 24 CPUs.
pub const THESIS_LADDER_AT_24: [(Variant, &str); 5] = [
    (Variant::Lock, "~19x"),
    (Variant::Atomic, "~12x"),
    (Variant::PerCoreUnpadded, "~6x"),
    (Variant::PerCorePadded, "flat (1x)"),
    (Variant::Clustered, "(padded per-CPU reps: flat)"),
];

/// Arguments of `atoll bench co`.
#[derive(clap::Args, Clone, Debug)]
pub struct CoArgs {
    /// CI smoke sizes (every row, measured briefly).
    #[arg(long)]
    pub quick: bool,
    /// Thread counts of the counter ladder (default: 1 to the number of
    /// CPUs this process may use; more than that oversubscribes).
    #[arg(long, value_delimiter = ',')]
    pub threads: Vec<usize>,
    /// Shorthand for `--threads 1,2,…,N`.
    #[arg(long, conflicts_with = "threads")]
    pub max_threads: Option<usize>,
    /// Runs of every measurement (default: 7, or 3 with `--quick`).
    #[arg(long)]
    pub repeat: Option<usize>,
}

/// The configuration `args` ask for.
pub fn config(args: &CoArgs, quick: bool) -> cb::Config {
    let cpus = atoll_co::allowed_cpus().len().max(1);
    let threads: Vec<usize> = if let Some(n) = args.max_threads {
        (1..=n.max(1)).collect()
    } else if args.threads.is_empty() {
        (1..=cpus).collect()
    } else {
        args.threads.iter().copied().filter(|&t| t > 0).collect()
    };
    let mut cfg = if quick || args.quick {
        cb::Config::quick(threads)
    } else {
        cb::Config::full(threads)
    };
    if let Some(r) = args.repeat {
        cfg.repeat = r.max(1);
    }
    cfg
}

fn stat(s: &Stat, unit: &str) -> String {
    format!("{:>9.2} {unit} [{:.2}–{:.2}]", s.median, s.min, s.max)
}

/// The report as printed.
pub fn table(r: &Results) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Clustered objects (K42 thesis ch. 3, 6, 7) on this machine: {} CPU(s); \
         median [min–max] of {} runs",
        r.cpus, r.repeat
    );
    let _ = writeln!(
        out,
        "Quiescence on the call path: {}",
        if r.barrier_free_calls {
            "no barrier (the writer issues membarrier)"
        } else {
            "a full fence per call (membarrier refused)"
        }
    );
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "Counter ladder: CPU ns per increment per thread (wall clock in --json), slowdown vs 1 thread"
    );
    let _ = writeln!(
        out,
        "{:<20} {:>7} {:>32} {:>9}   thesis at 24 CPUs",
        "counter", "threads", "ns/op", "slowdown"
    );
    for row in &r.ladder {
        let thesis = THESIS_LADDER_AT_24
            .iter()
            .find(|(v, _)| *v == row.variant)
            .map_or("", |(_, t)| t);
        let slowdown = row
            .slowdown
            .map_or_else(|| "-".to_string(), |s| format!("{s:.2}x"));
        let _ = writeln!(
            out,
            "{:<20} {:>7} {:>32} {:>9}   {}",
            row.variant.name(),
            row.threads,
            stat(&row.ns_per_op, "ns"),
            slowdown,
            if row.threads == 1 { "" } else { thesis }
        );
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:<40} {:>34}   thesis (4-way Power3)",
        "operation", "this machine"
    );
    let rows: [(&str, String, String); 10] = [
        (
            "call, direct (no table)",
            stat(&r.call_direct_ns, "ns"),
            "virtual call ~10 cycles".into(),
        ),
        (
            "call through the translation table",
            stat(&r.call_table_ns, "ns"),
            "one extra load".into(),
        ),
        (
            "call through a miss",
            stat(&r.call_miss_ns, "ns"),
            "-".into(),
        ),
        (
            "mediator attach",
            stat(&r.attach_us, "µs"),
            format!("{THESIS_ATTACH_US} µs"),
        ),
        (
            "call through the mediator",
            stat(&r.call_mediator_ns, "ns"),
            format!("{THESIS_MEDIATOR_CALL_US} µs"),
        ),
        (
            "mediator detach",
            stat(&r.detach_us, "µs"),
            format!("{THESIS_DETACH_US} µs"),
        ),
        (
            "mediator attach, under load",
            stat(&r.attach_loaded_us, "µs"),
            format!("{THESIS_ATTACH_US} µs (uncontended)"),
        ),
        (
            "mediator detach, under load",
            stat(&r.detach_loaded_us, "µs"),
            format!("{THESIS_DETACH_US} µs (uncontended)"),
        ),
        (
            "null hot-swap, uncontended",
            stat(&r.null_swap_us, "µs"),
            format!("{THESIS_NULL_SWAP_UNCONTENDED_US} µs"),
        ),
        (
            "null hot-swap, under load",
            stat(&r.null_swap_loaded_us, "µs"),
            format!("{THESIS_NULL_SWAP_CONTENDED_US} µs mean (SDET)"),
        ),
    ];
    for (name, here, thesis) in rows {
        let _ = writeln!(out, "{name:<40} {here:>34}   {thesis}");
    }
    let _ = writeln!(
        out,
        "(under load: {} calling thread(s), {} calls, none lost or repeated)",
        r.loaders, r.loaded_calls
    );
    out
}

/// `atoll bench co`: measure, print, and write JSON if asked.
pub fn main(args: &CoArgs, quick: bool, json: Option<&std::path::Path>) -> anyhow::Result<()> {
    let cfg = config(args, quick);
    let r = cb::run(&cfg).map_err(|e| anyhow::anyhow!("atoll bench co: {e}"))?;
    print!("{}", table(&r));
    if let Some(p) = json {
        crate::write_results_json(p, "co", &r)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_counts_default_to_the_cpus_and_accept_more() {
        let args = CoArgs {
            quick: true,
            threads: vec![],
            max_threads: None,
            repeat: None,
        };
        let cpus = atoll_co::allowed_cpus().len().max(1);
        assert_eq!(config(&args, false).threads, (1..=cpus).collect::<Vec<_>>());
        let args = CoArgs {
            max_threads: Some(cpus + 2),
            ..args
        };
        assert_eq!(config(&args, false).threads.len(), cpus + 2);
        assert_eq!(config(&args, false).repeat, 3, "--quick");
    }
}
