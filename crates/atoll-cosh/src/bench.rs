//! The measurements of Cosh §6 (Fig. 2a), run by `atoll bench transfer`;
//! the command prints them beside the published numbers.
//!
//! As in the paper, two domains — here this process and a forked receiver,
//! connected by a Unix socket — transfer the same aggregate back and forth,
//! and the one-way cost is half a round trip. Each hop is a whole Cosh
//! transfer: `attach_transfer` (rights check, downgrade, seal or unmap),
//! the ticket with the blocks' descriptors (`SCM_RIGHTS`) or the copied
//! bytes on the socket, `attach_recv` (checks, mapping or copying into a
//! fresh block) and the `decref` of what the hop left behind. Sizes run
//! from 4 KiB to 4 MiB; the variants are
//!
//! * **move**, **share**, **copy**: strong, with the default remap
//!   threshold ([`crate::DEFAULT_REMAP_THRESHOLD`]);
//! * **weak move**, **weak share**: the downgrades skipped (Cosh §3.3);
//! * **move, remap** and **move, copy**: the threshold forced to 0 and to
//!   infinity, whose crossover is the size above which remapping pays
//!   (Cosh: ~8 KB) — what the default threshold is chosen from.
//!
//! Every figure is the median of `repeat` batches with the range; cycles
//! are TSC ticks (`rdtsc`), which tick at the nominal frequency.

use std::time::Instant;

use serde::Serialize;

use crate::sys::{self, fork_domain, Exit};
use crate::{
    recv_parcel, send_parcel, Agg, Config as CoshConfig, Cosh, CoshError, DomainId, Mode, Strength,
};

/// What to run.
#[derive(Clone, Debug)]
pub struct Config {
    pub sizes: Vec<usize>,
    /// Round trips per batch, for the smallest size (fewer for larger
    /// sizes, so every size moves about the same number of bytes).
    pub iters: usize,
    pub repeat: usize,
}

impl Config {
    /// A full run: a few seconds.
    pub fn full() -> Config {
        Config {
            sizes: (12..=22).step_by(1).map(|s| 1usize << s).collect(),
            iters: 2000,
            repeat: 7,
        }
    }

    /// CI smoke sizes: every variant at three sizes, briefly.
    pub fn quick() -> Config {
        Config {
            sizes: vec![4 << 10, 64 << 10, 1 << 20],
            iters: 100,
            repeat: 3,
        }
    }

    fn iters_for(&self, size: usize) -> usize {
        let scaled = self.iters * (64 << 10) / size.max(64 << 10);
        scaled.max(self.iters / 100).max(5)
    }
}

/// The variants measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Variant {
    Move,
    Share,
    Copy,
    WeakMove,
    WeakShare,
    MoveRemap,
    MoveCopy,
}

impl Variant {
    pub const ALL: [Variant; 7] = [
        Variant::Move,
        Variant::Share,
        Variant::Copy,
        Variant::WeakMove,
        Variant::WeakShare,
        Variant::MoveRemap,
        Variant::MoveCopy,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Variant::Move => "move",
            Variant::Share => "share",
            Variant::Copy => "copy",
            Variant::WeakMove => "weak move",
            Variant::WeakShare => "weak share",
            Variant::MoveRemap => "move, remap",
            Variant::MoveCopy => "move, copy",
        }
    }

    fn mode(self) -> (Mode, Strength) {
        match self {
            Variant::Move | Variant::MoveRemap | Variant::MoveCopy => {
                (Mode::Move, Strength::Strong)
            }
            Variant::Share => (Mode::Share, Strength::Strong),
            Variant::Copy => (Mode::Copy, Strength::Strong),
            Variant::WeakMove => (Mode::Move, Strength::Weak),
            Variant::WeakShare => (Mode::Share, Strength::Weak),
        }
    }

    fn threshold(self) -> usize {
        match self {
            Variant::MoveRemap => 0,
            Variant::MoveCopy => usize::MAX,
            _ => crate::DEFAULT_REMAP_THRESHOLD,
        }
    }
}

/// Median and range of the samples of one figure (shared with the
/// clustered-object benchmark).
pub use atoll_co::bench::Stat;

#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub variant: Variant,
    pub size: usize,
    /// One-way TSC cycles per transfer.
    pub cycles: Stat,
    /// One-way nanoseconds per transfer.
    pub ns: Stat,
}

/// Everything `atoll bench transfer` measures.
#[derive(Clone, Debug, Serialize)]
pub struct Results {
    pub repeat: usize,
    pub rows: Vec<Row>,
    /// TSC ticks per nanosecond, from the measurements.
    pub tsc_ghz: f64,
    /// The smallest size at which remapping a move beat copying it, if any,
    /// by the fastest batch of each (load on a shared machine only ever
    /// slows a batch down).
    pub remap_wins_from: Option<usize>,
    pub default_threshold: usize,
}

fn cosh(threshold: usize) -> Cosh {
    Cosh::new(CoshConfig {
        remap_threshold: threshold,
        recycle: 256,
        ..CoshConfig::default()
    })
}

/// Receive one aggregate, checking it came as agreed (as Cosh §5's pipe
/// checks its transfers).
fn hop(
    c: &mut Cosh,
    d: DomainId,
    sock: &std::os::unix::net::UnixStream,
    mode: Mode,
    strength: Strength,
) -> Result<Agg, CoshError> {
    let p = recv_parcel(sock)?;
    let got = c.attach_recv(d, p)?;
    if got.mode != mode || got.strength != strength {
        return Err(CoshError::Protocol("an unexpected transfer mode"));
    }
    Ok(got.agg)
}

/// Transfer `a` and drop our reference to it.
fn send(
    c: &mut Cosh,
    a: Agg,
    sock: &std::os::unix::net::UnixStream,
    mode: Mode,
    strength: Strength,
) -> Result<(), CoshError> {
    let p = c.attach_transfer(a, mode, strength)?;
    send_parcel(sock, &p)?;
    c.discard(p);
    c.decref(a)
}

/// The receiver: bounce `rounds` transfers back.
fn bounce(sock: std::os::unix::net::UnixStream, v: Variant, rounds: usize) -> i32 {
    let (mode, strength) = v.mode();
    let mut c = cosh(v.threshold());
    let d = c.domain();
    for _ in 0..rounds {
        let r = hop(&mut c, d, &sock, mode, strength)
            .and_then(|a| send(&mut c, a, &sock, mode, strength));
        if r.is_err() {
            return 1;
        }
    }
    0
}

/// Measure one variant at one size: `repeat` batches of round trips.
fn measure(
    v: Variant,
    size: usize,
    iters: usize,
    repeat: usize,
) -> Result<(Stat, Stat), CoshError> {
    let warmup = iters.div_ceil(10).max(2);
    let rounds = warmup + iters * repeat;
    // Fork before any block exists: a child forked while we map a block
    // would keep a mapping and make every share fall back to a copy.
    let child = fork_domain(move |sock| bounce(sock, v, rounds))?;
    let (mode, strength) = v.mode();
    let mut c = cosh(v.threshold());
    let d = c.domain();
    let mut a = c.alloc(d, size)?;
    let pattern: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
    c.write(a, 0, &pattern)?;
    let (mut cycles, mut ns) = (Vec::new(), Vec::new());
    let round = |c: &mut Cosh, a: Agg| -> Result<Agg, CoshError> {
        send(c, a, &child.sock, mode, strength)?;
        hop(c, d, &child.sock, mode, strength)
    };
    for _ in 0..warmup {
        a = round(&mut c, a)?;
    }
    for _ in 0..repeat {
        let (t0, c0) = (Instant::now(), sys::rdtsc());
        for _ in 0..iters {
            a = round(&mut c, a)?;
        }
        let (dc, dt) = (sys::rdtsc() - c0, t0.elapsed());
        let hops = 2.0 * iters as f64;
        cycles.push(dc as f64 / hops);
        ns.push(dt.as_nanos() as f64 / hops);
    }
    let back = c.to_vec(a)?;
    c.decref(a)?;
    let exit = child.wait()?;
    if back != pattern {
        return Err(CoshError::Protocol("bytes changed on the way"));
    }
    if exit != Exit::Code(0) {
        return Err(CoshError::Protocol("the receiver failed"));
    }
    Ok((Stat::of(&mut cycles), Stat::of(&mut ns)))
}

/// Run everything `cfg` asks for. Forks: call it with no other threads
/// running.
pub fn run(cfg: &Config) -> Result<Results, CoshError> {
    let mut rows = Vec::new();
    for v in Variant::ALL {
        for &size in &cfg.sizes {
            let (cycles, ns) = measure(v, size, cfg.iters_for(size), cfg.repeat)?;
            rows.push(Row {
                variant: v,
                size,
                cycles,
                ns,
            });
        }
    }
    let (tc, tn) = rows.iter().fold((0.0, 0.0), |(c, n), r| {
        (c + r.cycles.median, n + r.ns.median)
    });
    let fastest = |v: Variant, s: usize| {
        rows.iter()
            .find(|r| r.variant == v && r.size == s)
            .map(|r| r.cycles.min)
    };
    let remap_wins_from = cfg.sizes.iter().copied().find(|&s| {
        matches!((fastest(Variant::MoveRemap, s), fastest(Variant::MoveCopy, s)), (Some(r), Some(c)) if r < c)
    });
    Ok(Results {
        repeat: cfg.repeat,
        rows,
        tsc_ghz: if tn > 0.0 { tc / tn } else { 0.0 },
        remap_wins_from,
        default_threshold: crate::DEFAULT_REMAP_THRESHOLD,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn larger_sizes_get_fewer_round_trips() {
        let c = Config::full();
        assert_eq!(c.iters_for(4096), c.iters);
        assert!(c.iters_for(4 << 20) < c.iters / 10);
        assert!(c.iters_for(4 << 20) >= 5);
    }
}
