//! `atoll bench transfer` without the pipe measurements, for profiling
//! one variant: `transfer VARIANT SIZE [REPEAT [ITERS]]`, e.g.
//! `perf record -g target/release/examples/transfer pool-move 4096`.

use atoll_cosh::bench::{self, Variant};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(v), Some(size)) = (
        args.get(1).and_then(|n| Variant::named(n)),
        args.get(2).and_then(|s| s.parse().ok()),
    ) else {
        eprintln!("usage: transfer VARIANT SIZE [REPEAT [ITERS]]");
        std::process::exit(2);
    };
    let repeat = args.get(3).and_then(|r| r.parse().ok()).unwrap_or(7);
    let cfg = bench::Config {
        sizes: vec![size],
        variants: vec![v],
        ..bench::Config::full()
    };
    let iters = args
        .get(4)
        .and_then(|r| r.parse().ok())
        .unwrap_or(cfg.iters);
    let cfg = bench::Config {
        repeat,
        iters,
        ..cfg
    };
    match bench::run(&cfg) {
        Ok(r) => {
            for s in &r.steps {
                for step in &s.steps {
                    println!(
                        "  {} {} B, {}: {:.0}",
                        s.variant.name(),
                        s.size,
                        step.name,
                        step.cycles
                    );
                }
            }
            if r.channel_cycles > 0.0 {
                println!("  channel, one way: {:.0}", r.channel_cycles);
            }
            for row in r.rows {
                println!(
                    "{} {} B: {:.0} cycles [{:.0}-{:.0}]",
                    row.variant.name(),
                    row.size,
                    row.cycles.median,
                    row.cycles.min,
                    row.cycles.max
                );
            }
        }
        Err(e) => {
            eprintln!("transfer: {e}");
            std::process::exit(1);
        }
    }
}
