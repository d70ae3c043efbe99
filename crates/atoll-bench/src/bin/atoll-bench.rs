//! Stand-alone harness: the same `bench` / `bench-worker` subcommands as
//! the `atoll` command, without atoll systems (tmpfs, FUSE and the
//! messaging micro-benchmarks only). Useful on machines without an atoll
//! build and for calibrating the baselines.

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "atoll-bench",
    about = "atoll's benchmark harness (baselines only)"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the benchmark suite (see `atoll bench --help`).
    // Boxed: the options are much larger than the worker's.
    Bench(Box<atoll_bench::BenchArgs>),
    #[command(hide = true)]
    BenchWorker(atoll_bench::WorkerArgs),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().cmd {
        Cmd::Bench(a) => atoll_bench::main_from_cli(*a, &mut atoll_bench::NoAtoll),
        Cmd::BenchWorker(a) => atoll_bench::worker_main(a),
    }
}
