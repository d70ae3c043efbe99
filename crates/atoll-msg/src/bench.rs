//! Micro-benchmarks behind `atoll bench rpc`: the cost of one request/reply
//! over a real channel, next to the floors and alternatives it should be
//! compared with (one cache line bounced between two cores, a null system
//! call, a pipe and a Unix socket round trip).
//!
//! Every function runs `iters` timed round trips after a short warm-up and
//! returns the mean per round trip, in nanoseconds (monotonic clock) and in
//! TSC cycles (`rdtsc`; 0 off x86-64). Two-thread benchmarks pin their
//! threads when cores are given (`sched_setaffinity`).
//!
//! These are tools for a command-line harness: they panic (with a message)
//! if the kernel refuses a resource or a core, rather than returning errors.

use std::hint::black_box;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crossbeam_utils::CachePadded;

use crate::{ClientChannel, Control, PollMode, ServerChannel};

/// Mean cost of one round trip.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RoundTrip {
    pub ns_per_op: f64,
    pub cycles_per_op: f64,
}

const WARMUP: u64 = 1000;

/// Read the time-stamp counter.
#[inline]
pub fn cycles() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `rdtsc` has no preconditions on x86-64; it only reads a
        // counter.
        #[allow(unused_unsafe)]
        unsafe {
            core::arch::x86_64::_rdtsc()
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        0
    }
}

/// Pin the calling thread to `core` (no-op for `None`).
pub fn pin(core: Option<usize>) -> io::Result<()> {
    if let Some(core) = core {
        let mut set = rustix::thread::CpuSet::new();
        if core >= rustix::thread::CpuSet::MAX_CPU {
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        }
        set.set(core);
        rustix::thread::sched_setaffinity(None, &set)?;
    }
    Ok(())
}

fn pin_or_panic(core: Option<usize>) {
    if let Err(e) = pin(core) {
        panic!("cannot pin to core {core:?}: {e}");
    }
}

/// Time `iters` calls of `op` (after a warm-up).
fn measure(iters: u64, mut op: impl FnMut(u64)) -> RoundTrip {
    for i in 0..WARMUP {
        op(i);
    }
    let iters = iters.max(1);
    let t0 = Instant::now();
    let c0 = cycles();
    for i in 0..iters {
        op(WARMUP + i);
    }
    let c1 = cycles();
    let ns = t0.elapsed().as_nanos() as f64;
    RoundTrip {
        ns_per_op: ns / iters as f64,
        cycles_per_op: c1.wrapping_sub(c0) as f64 / iters as f64,
    }
}

/// One 64-byte request and its 64-byte reply over a real channel, with a
/// server thread that waits on its doorbell in `mode` (in `Spin` mode it
/// polls the channel instead and the client does not ring, as atoll's
/// servers on dedicated cores) and echoes each request in place (zero
/// copy); the client waits for replies in `mode`.
pub fn rpc_round_trip(
    mode: PollMode,
    iters: u64,
    client_core: Option<usize>,
    server_core: Option<usize>,
) -> RoundTrip {
    let (_cfd, control) = Control::create(1).expect("control block");
    let (fd, server) = ServerChannel::create(crate::RingSize::Small).expect("channel");
    let client = ClientChannel::map(fd.as_fd()).expect("map channel");
    let doorbell = control.doorbell(0);
    std::thread::scope(|s| {
        s.spawn(|| {
            pin_or_panic(server_core);
            let mut idle = 0u32;
            loop {
                // An empty frame asks the server to stop.
                match server.try_recv(|req| (req.is_empty(), server.reply(req))) {
                    Ok(Some((true, _))) => return,
                    Ok(Some((false, r))) => r.expect("reply"),
                    // A spinning server polls its channels and needs no
                    // doorbell (as atoll-server's loop in split mode).
                    Ok(None) if mode == PollMode::Spin => {
                        idle = idle.wrapping_add(1);
                        if idle.is_multiple_of(1 << 14) {
                            crate::sync::yield_now();
                        } else {
                            crate::sync::spin_hint();
                        }
                    }
                    Ok(None) => doorbell.wait(mode),
                    Err(e) => panic!("server: {e}"),
                }
            }
        });
        pin_or_panic(client_core);
        let frame = [0x5au8; 64];
        let rt = measure(iters, |_| {
            if mode == PollMode::Spin {
                client.send_unrung(&frame).expect("send");
            } else {
                client.send(&frame, doorbell).expect("send");
            }
            let n = client.recv(mode, |rep| rep.len()).expect("recv");
            black_box(n);
        });
        client.send(&[], doorbell).expect("stop");
        rt
    })
}

/// Two threads bouncing one cache line: the physical floor of any
/// cross-core message.
pub fn raw_pingpong(iters: u64, core_a: Option<usize>, core_b: Option<usize>) -> RoundTrip {
    let line = CachePadded::new(AtomicU64::new(0));
    let total = WARMUP + iters.max(1);
    std::thread::scope(|s| {
        s.spawn(|| {
            pin_or_panic(core_b);
            for i in 0..total {
                while line.load(Ordering::Acquire) != 2 * i + 1 {
                    std::hint::spin_loop();
                }
                line.store(2 * i + 2, Ordering::Release);
            }
        });
        pin_or_panic(core_a);
        measure(iters, |i| {
            line.store(2 * i + 1, Ordering::Release);
            while line.load(Ordering::Acquire) != 2 * i + 2 {
                std::hint::spin_loop();
            }
        })
    })
}

/// A null system call (`getppid`, raw, not cached by libc).
pub fn null_syscall(iters: u64) -> RoundTrip {
    measure(iters, |_| {
        black_box(rustix::process::getppid());
    })
}

/// Bounce one byte between two threads through `a` (A's end) and `b`.
fn byte_pingpong(
    iters: u64,
    core_a: Option<usize>,
    core_b: Option<usize>,
    a: (OwnedFd, OwnedFd),
    b: (OwnedFd, OwnedFd),
) -> RoundTrip {
    let total = WARMUP + iters.max(1);
    let (a_tx, a_rx) = a;
    let (b_tx, b_rx) = b;
    std::thread::scope(|s| {
        s.spawn(|| {
            pin_or_panic(core_b);
            let mut buf = [0u8; 1];
            for _ in 0..total {
                rustix::io::read(&b_rx, &mut buf).expect("read");
                rustix::io::write(&b_tx, &buf).expect("write");
            }
        });
        pin_or_panic(core_a);
        let mut buf = [7u8; 1];
        measure(iters, |_| {
            rustix::io::write(&a_tx, &buf).expect("write");
            rustix::io::read(&a_rx, &mut buf).expect("read");
        })
    })
}

/// One byte there and back through two pipes.
pub fn pipe_pingpong(iters: u64, core_a: Option<usize>, core_b: Option<usize>) -> RoundTrip {
    let (to_b_rx, to_b_tx) = rustix::pipe::pipe().expect("pipe");
    let (to_a_rx, to_a_tx) = rustix::pipe::pipe().expect("pipe");
    byte_pingpong(
        iters,
        core_a,
        core_b,
        (to_b_tx, to_a_rx),
        (to_a_tx, to_b_rx),
    )
}

/// One byte there and back through a Unix stream socket pair.
pub fn unix_socket_pingpong(iters: u64, core_a: Option<usize>, core_b: Option<usize>) -> RoundTrip {
    use rustix::net::{socketpair, AddressFamily, SocketFlags, SocketType};
    let (sa, sb) = socketpair(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::CLOEXEC,
        None,
    )
    .expect("socketpair");
    let sa2 = sa.try_clone().expect("dup");
    let sb2 = sb.try_clone().expect("dup");
    byte_pingpong(iters, core_a, core_b, (sa, sa2), (sb, sb2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_benchmark_runs_and_reports_positive_costs() {
        for mode in [PollMode::Spin, PollMode::Block, PollMode::Adaptive] {
            let rt = rpc_round_trip(mode, 200, None, None);
            assert!(rt.ns_per_op > 0.0, "{mode:?}: {rt:?}");
        }
        for rt in [
            raw_pingpong(200, None, None),
            null_syscall(200),
            pipe_pingpong(200, None, None),
            unix_socket_pingpong(200, None, None),
        ] {
            assert!(rt.ns_per_op > 0.0 && rt.ns_per_op.is_finite(), "{rt:?}");
        }
    }
}
