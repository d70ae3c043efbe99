//! Per-call costs through `dispatch` (run explicitly:
//! `cargo test --release -p atoll-client --test bench -- --ignored --nocapture`).
//! Prints numbers; asserts only correctness.

mod common;
use common::*;

use std::time::Instant;

fn per_op(n: u32, mut f: impl FnMut()) -> f64 {
    let t = Instant::now();
    for _ in 0..n {
        f();
    }
    t.elapsed().as_nanos() as f64 / n as f64
}

#[test]
#[ignore]
fn bench_call_costs() {
    let _ = env();
    assert_eq!(mkdir(&p("bench"), 0o755), 0);
    let f = p("bench/f");
    put(&f, &vec![7u8; 1 << 20]);
    let deep = p("bench/../bench/./f");
    let n = 20_000;
    let stat_ns = per_op(n, || assert!(stat(&f).is_ok()));
    let stat_deep_ns = per_op(n, || assert!(stat(&deep).is_ok()));
    let open_close_ns = per_op(n, || {
        let fd = open(&f, libc::O_RDONLY, 0);
        assert!(fd >= 0);
        close(fd);
    });
    let fd = open(&f, libc::O_RDWR, 0);
    let mut buf = vec![0u8; 4096];
    let pread_ns = per_op(n, || {
        assert_eq!(
            sc(
                libc::SYS_pread64,
                &[fd as u64, buf.as_mut_ptr() as u64, 4096, 8192]
            ),
            4096
        )
    });
    let pwrite_ns = per_op(n, || {
        assert_eq!(
            sc(
                libc::SYS_pwrite64,
                &[fd as u64, buf.as_ptr() as u64, 4096, 8192]
            ),
            4096
        )
    });
    let mut big = vec![0u8; 1 << 20];
    let read_1m_ns = per_op(200, || {
        assert_eq!(
            sc(
                libc::SYS_pread64,
                &[fd as u64, big.as_mut_ptr() as u64, 1 << 20, 0]
            ),
            1 << 20
        )
    });
    close(fd);
    println!("stat {stat_ns:.0} ns, stat via ../. {stat_deep_ns:.0} ns, open+close {open_close_ns:.0} ns");
    println!(
        "pread 4K {pread_ns:.0} ns, pwrite 4K {pwrite_ns:.0} ns, pread 1M {:.0} us ({:.2} GB/s)",
        read_1m_ns / 1000.0,
        (1u64 << 20) as f64 / read_1m_ns
    );
}
