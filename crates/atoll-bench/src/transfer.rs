//! `atoll bench transfer`: Cosh's transfer microbenchmark (Cosh §6, Fig.
//! 2a), measured by `atoll_cosh::bench` between this process and a forked
//! receiver and printed beside the paper's numbers.
//!
//! The paper measured on a 3.2 GHz Core i7-965 under Barrelfish, where each
//! transfer was two RPCs to a user-level block manager (~6,000 cycles) over
//! polled shared-memory channels, and remapping beat copying above ~8 KB.
//! Here two set-ups: the socket rows carry the blocks' descriptors or the
//! bytes on a Unix socket (a block per memfd); the pool rows name blocks of
//! one pool both processes map, by offset, on a polled shared-memory
//! channel — Cosh's own arrangement. The mappings are Linux's.

use std::fmt::Write;

use atoll_cosh::bench::{self as tb, Results, Stat, Variant};

/// Cosh §6: base cost of a transfer through the block manager, in cycles.
pub const COSH_BASE_CYCLES: f64 = 6000.0;
/// Cosh §6: remapping beats copying above about this size.
pub const COSH_REMAP_WINS_ABOVE: usize = 8 * 1024;

/// Arguments of `atoll bench transfer`.
#[derive(clap::Args, Clone, Debug)]
pub struct TransferArgs {
    /// CI smoke sizes (every variant at 4 KiB, 64 KiB and 1 MiB, briefly).
    #[arg(long)]
    pub quick: bool,
    /// Aggregate sizes in bytes (default: powers of two, 4 KiB to 4 MiB).
    #[arg(long, value_delimiter = ',')]
    pub sizes: Vec<usize>,
    /// Only these variants (names as printed, spaces as dashes, no comma:
    /// `pool-move,pool-move-copy`; default: all).
    #[arg(long, value_delimiter = ',')]
    pub variants: Vec<String>,
    /// Batches of every measurement (default: 7, or 3 with `--quick`).
    #[arg(long)]
    pub repeat: Option<usize>,
    /// Internal: measure a pipe inside an instance (CHUNK,TOTAL,REPEAT)
    /// and print bytes per second.
    #[arg(long, hide = true, value_name = "CHUNK,TOTAL,REPEAT")]
    pub pipe_probe: Option<String>,
}

/// The configuration `args` ask for.
pub fn config(args: &TransferArgs, quick: bool) -> anyhow::Result<tb::Config> {
    let mut cfg = if quick || args.quick {
        tb::Config::quick()
    } else {
        tb::Config::full()
    };
    if !args.sizes.is_empty() {
        cfg.sizes = args.sizes.iter().copied().filter(|&s| s > 0).collect();
    }
    if let Some(r) = args.repeat {
        cfg.repeat = r.max(1);
    }
    if !args.variants.is_empty() {
        cfg.variants = args
            .variants
            .iter()
            .map(|n| Variant::named(n).ok_or_else(|| anyhow::anyhow!("no variant called {n:?}")))
            .collect::<anyhow::Result<_>>()?;
    }
    Ok(cfg)
}

fn size(bytes: usize) -> String {
    if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else if bytes >= 1 << 10 && bytes.is_multiple_of(1 << 10) {
        format!("{} KiB", bytes >> 10)
    } else {
        format!("{bytes} B")
    }
}

fn stat(s: &Stat) -> String {
    format!("{:>9.0} [{:.0}–{:.0}]", s.median, s.min, s.max)
}

/// The report as printed.
pub fn table(r: &Results) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Cosh transfers (Cosh §6, Fig. 2a): one-way cost between two processes, \
         median [min–max] of {} batches; TSC {:.2} GHz",
        r.repeat, r.tsc_ghz
    );
    let _ = writeln!(
        out,
        "{:<16} {:>8} {:>28} {:>10} {:>9} {:>9}",
        "variant", "size", "cycles", "ns", "vs Cosh", "vs copy"
    );
    for row in &r.rows {
        // Each set-up against its own copy.
        let copy_variant = if row.variant.pooled() {
            Variant::PoolCopy
        } else {
            Variant::Copy
        };
        let copy = r
            .rows
            .iter()
            .find(|c| c.variant == copy_variant && c.size == row.size)
            .map(|c| c.cycles.median);
        let vs_copy = copy.map_or_else(|| "-".into(), |c| format!("{:.2}x", row.cycles.median / c));
        let _ = writeln!(
            out,
            "{:<16} {:>8} {:>28} {:>10.0} {:>8.2}x {:>9}",
            row.variant.name(),
            size(row.size),
            stat(&row.cycles),
            row.ns.median,
            row.cycles.median / COSH_BASE_CYCLES,
            vs_copy
        );
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "vs Cosh: over Cosh's ~{COSH_BASE_CYCLES:.0}-cycle base cost per transfer (3.2 GHz i7, \
         two RPCs to a user-level block manager); vs copy: over a copy of the same size here."
    );
    let _ = writeln!(
        out,
        "Remapping a move beat copying it from: {} by socket, {} in the pool (Cosh: above ~{}); \
         default remap threshold: {}",
        r.remap_wins_from
            .map_or_else(|| "no size measured".into(), size),
        r.pool_remap_wins_from
            .map_or_else(|| "no size measured".into(), size),
        size(COSH_REMAP_WINS_ABOVE),
        size(r.default_threshold)
    );
    if !r.steps.is_empty() {
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "Where a pool hop goes (cycles, median over the hops; the steps timed one by one \
             in one process, the channel between the two pinned processes; between two \
             processes the sender's hide runs beside the receiver's steps):"
        );
        let _ = writeln!(out, "  polled channel, one way: {:.0}", r.channel_cycles);
        for s in &r.steps {
            let total: f64 = s.steps.iter().map(|x| x.cycles).sum();
            let steps: Vec<String> = s
                .steps
                .iter()
                .map(|x| format!("{} {:.0}", x.name, x.cycles))
                .collect();
            let _ = writeln!(
                out,
                "  {:<16} {:>8}: {:.0} = {}",
                s.variant.name(),
                size(s.size),
                total,
                steps.join(", ")
            );
        }
    }
    out
}

/// `atoll bench transfer`: measure, print, and write JSON if asked.
pub fn main(
    args: &TransferArgs,
    quick: bool,
    json: Option<&std::path::Path>,
) -> anyhow::Result<()> {
    if let Some(spec) = &args.pipe_probe {
        return crate::pipes::probe(spec);
    }
    let cfg = config(args, quick)?;
    let r = tb::run(&cfg).map_err(|e| anyhow::anyhow!("atoll bench transfer: {e}"))?;
    print!("{}", table(&r));
    // Cosh's users: a pipe's bytes, Linux's way and atoll's, same run.
    let pipes = crate::pipes::run(quick || args.quick)
        .map_err(|e| anyhow::anyhow!("atoll bench transfer: pipes: {e}"))?;
    println!();
    print!("{}", crate::pipes::table(&pipes));
    if let Some(p) = json {
        #[derive(serde::Serialize)]
        struct All<'a> {
            #[serde(flatten)]
            transfers: &'a Results,
            pipes: &'a crate::pipes::PipeResults,
        }
        crate::write_results_json(
            p,
            "transfer",
            &All {
                transfers: &r,
                pipes: &pipes,
            },
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_print_in_their_unit() {
        assert_eq!(size(4096), "4 KiB");
        assert_eq!(size(4 << 20), "4 MiB");
        assert_eq!(size(1000), "1000 B");
    }

    #[test]
    fn quick_and_explicit_sizes() {
        let args = TransferArgs {
            quick: true,
            sizes: vec![],
            repeat: None,
            variants: vec![],
            pipe_probe: None,
        };
        assert_eq!(config(&args, false).unwrap().repeat, 3);
        let args = TransferArgs {
            sizes: vec![0, 8192],
            repeat: Some(0),
            ..args
        };
        let c = config(&args, false).unwrap();
        assert_eq!(c.sizes, vec![8192]);
        assert_eq!(c.repeat, 1);
        let args = TransferArgs {
            variants: vec!["pool-move-copy".into(), "pool share".into()],
            ..args
        };
        let c = config(&args, false).unwrap();
        assert_eq!(c.variants, vec![Variant::PoolMoveCopy, Variant::PoolShare]);
        let args = TransferArgs {
            variants: vec!["teleport".into()],
            ..args
        };
        assert!(config(&args, false).is_err());
    }
}
