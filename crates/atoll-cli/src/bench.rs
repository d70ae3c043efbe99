//! `atoll bench` and the hidden `atoll bench-worker`: hand-off to the
//! benchmark harness (crate `atoll-bench`), which parses its own options.

use anyhow::{bail, Result};

/// `atoll bench ARGS…`.
pub fn bench(args: Vec<String>) -> Result<i32> {
    // TODO(atoll): call the harness entry point (`atoll_bench::cli_main` or
    // similar) and provide atoll systems through its system trait once the
    // harness exports them.
    let _ = args;
    bail!("the benchmark harness is not part of this build")
}

/// `atoll bench-worker ARGS…`: one worker process of a benchmark.
pub fn worker(args: Vec<String>) -> Result<i32> {
    // TODO(atoll): forward to `atoll_bench::worker_main(args)`.
    let _ = args;
    bail!("the benchmark harness is not part of this build")
}
