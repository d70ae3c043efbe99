//! Print the messaging micro-benchmarks (what `atoll bench rpc` reports):
//! `cargo run -p atoll-msg --release --example rpc_bench [iters] [core_a core_b]`.

use atoll_msg::bench::{
    null_syscall, pipe_pingpong, raw_pingpong, rpc_round_trip, unix_socket_pingpong, RoundTrip,
};
use atoll_msg::PollMode;

fn show(name: &str, rt: RoundTrip) {
    println!(
        "{name:<24} {:>10.0} ns {:>10.0} cycles",
        rt.ns_per_op, rt.cycles_per_op
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let iters: u64 = args.first().and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let a = args.get(1).and_then(|a| a.parse().ok());
    let b = args.get(2).and_then(|a| a.parse().ok());
    println!("iters {iters}, cores {a:?}/{b:?}");
    show("raw cache-line pingpong", raw_pingpong(iters, a, b));
    show("null syscall (getppid)", null_syscall(iters));
    for mode in [PollMode::Spin, PollMode::Adaptive, PollMode::Block] {
        show(
            &format!("atoll rpc {mode:?}"),
            rpc_round_trip(mode, iters, a, b),
        );
    }
    show("pipe pingpong", pipe_pingpong(iters / 4 + 1, a, b));
    show(
        "unix socket pingpong",
        unix_socket_pingpong(iters / 4 + 1, a, b),
    );
}
