//! Spinning round trip against the raw cache-line floor, robust to a noisy
//! (shared, oversubscribed) machine: many short trials, best and median.
//! `cargo run -p atoll-msg --release --example rpc_spin [trials] [iters] [core_a core_b]`.

use atoll_msg::bench::{raw_pingpong, rpc_round_trip};
use atoll_msg::PollMode;

fn stats(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(|a, b| a.total_cmp(b));
    (v[0], v[v.len() / 2])
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let trials: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(30);
    let iters: u64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(20_000);
    let a = Some(args.get(2).and_then(|a| a.parse().ok()).unwrap_or(0));
    let b = Some(args.get(3).and_then(|a| a.parse().ok()).unwrap_or(1));
    let (mut raw, mut rpc, mut rawc, mut rpcc) = (vec![], vec![], vec![], vec![]);
    for _ in 0..trials.max(1) {
        let r = raw_pingpong(iters, a, b);
        raw.push(r.ns_per_op);
        rawc.push(r.cycles_per_op);
        let r = rpc_round_trip(PollMode::Spin, iters, a, b);
        rpc.push(r.ns_per_op);
        rpcc.push(r.cycles_per_op);
    }
    let (rb, rm) = stats(raw);
    let (pb, pm) = stats(rpc);
    let (rbc, _) = stats(rawc);
    let (pbc, _) = stats(rpcc);
    println!("{trials} trials x {iters} round trips, cores {a:?}/{b:?}");
    println!("raw ping-pong   best {rb:7.0} ns ({rbc:.0} cycles)  median {rm:7.0} ns");
    println!("atoll rpc spin  best {pb:7.0} ns ({pbc:.0} cycles)  median {pm:7.0} ns");
    println!("ratio (best)    {:.2}", pb / rb);
}
