//! The measurements of Cosh §6 (Fig. 2a), run by `atoll bench transfer`;
//! the command prints them beside the published numbers.
//!
//! As in the paper, two domains — here this process and a forked receiver,
//! pinned to different CPUs when there are two — transfer the same
//! aggregate back and forth, and the one-way cost is half a round trip.
//! Each hop is a whole Cosh transfer: `attach_transfer` (rights check,
//! downgrade, seal or unmap), the ticket on the channel, `attach_recv`
//! (checks, mapping or copying into a fresh block) and the `decref` of
//! what the hop left behind. Sizes run from 4 KiB to 4 MiB. Two set-ups:
//!
//! **Socket** (a block per memfd): the ticket goes on a Unix socket with
//! the blocks' descriptors (`SCM_RIGHTS`) or the copied bytes; the
//! receiver wakes in a blocking `recvmsg`.
//!
//! * **move**, **share**, **copy**: strong, with the default remap
//!   threshold ([`crate::DEFAULT_REMAP_THRESHOLD`]);
//! * **weak move**, **weak share**: the downgrades skipped (Cosh §3.3);
//! * **move, remap** and **move, copy**: the threshold forced to 0 and to
//!   infinity, whose crossover is the size above which remapping pays
//!   (Cosh: ~8 KB) — what the default threshold is chosen from.
//!
//! **Pool** (Cosh's set-up: one block pool both domains map, and a polled
//! shared-memory channel, `crate::chan`, like the URPC channels Cosh was
//! measured on): the ticket names blocks by pool offset.
//!
//! * **pool move**, **pool share**: strong, every size remapped (the
//!   sender's view hidden or made read-only, the receiver's view made);
//! * **pool copy**: strong copy: up to `Config::pool_inline_max` bytes
//!   travel in the ticket's message and the receiver copies them into a
//!   block it kept from its own frees (no system call on either side);
//!   more are written once into a fresh pool block that moves;
//! * **pool move, copy**: a move by copying, for the crossover with
//!   **pool move** (a strong move with the default threshold is this
//!   below 16 KiB and **pool move** above).
//!
//! Every figure is the median of `repeat` batches with the range; cycles
//! are TSC ticks (`rdtsc`), which tick at the nominal frequency.

use std::time::Instant;

pub mod steps;

use serde::Serialize;

use std::sync::Arc;

use crate::chan::{Channel, End};
use crate::sys::{self, fork_domain, Exit};
use crate::{
    recv_parcel, send_parcel, Agg, Config as CoshConfig, Cosh, CoshError, DomainId, Mode, Pool,
    PoolDomain, PoolTicket, Strength,
};

/// What to run.
#[derive(Clone, Debug)]
pub struct Config {
    pub sizes: Vec<usize>,
    /// Which variants (all by default).
    pub variants: Vec<Variant>,
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
            variants: Variant::ALL.to_vec(),
            iters: 2000,
            repeat: 7,
        }
    }

    /// CI smoke sizes: every variant at three sizes, briefly.
    pub fn quick() -> Config {
        Config {
            sizes: vec![4 << 10, 64 << 10, 1 << 20],
            variants: Variant::ALL.to_vec(),
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
    PoolMove,
    PoolShare,
    PoolCopy,
    PoolMoveCopy,
}

impl Variant {
    pub const ALL: [Variant; 11] = [
        Variant::Move,
        Variant::Share,
        Variant::Copy,
        Variant::WeakMove,
        Variant::WeakShare,
        Variant::MoveRemap,
        Variant::MoveCopy,
        Variant::PoolMove,
        Variant::PoolShare,
        Variant::PoolCopy,
        Variant::PoolMoveCopy,
    ];

    /// Whether the variant runs on the shared pool and polled channel.
    pub fn pooled(self) -> bool {
        matches!(
            self,
            Variant::PoolMove | Variant::PoolShare | Variant::PoolCopy | Variant::PoolMoveCopy
        )
    }

    /// The variant called `name` (as printed, or with dashes for the
    /// spaces and no comma: `pool-move-copy`).
    pub fn named(name: &str) -> Option<Variant> {
        let plain = |s: &str| s.replace(',', "").replace(' ', "-");
        Variant::ALL
            .into_iter()
            .find(|v| v.name() == name || plain(v.name()) == name)
    }

    pub fn name(self) -> &'static str {
        match self {
            Variant::Move => "move",
            Variant::Share => "share",
            Variant::Copy => "copy",
            Variant::WeakMove => "weak move",
            Variant::WeakShare => "weak share",
            Variant::MoveRemap => "move, remap",
            Variant::MoveCopy => "move, copy",
            Variant::PoolMove => "pool move",
            Variant::PoolShare => "pool share",
            Variant::PoolCopy => "pool copy",
            Variant::PoolMoveCopy => "pool move, copy",
        }
    }

    fn mode(self) -> (Mode, Strength) {
        match self {
            Variant::Move
            | Variant::MoveRemap
            | Variant::MoveCopy
            | Variant::PoolMove
            | Variant::PoolMoveCopy => (Mode::Move, Strength::Strong),
            Variant::Share | Variant::PoolShare => (Mode::Share, Strength::Strong),
            Variant::Copy | Variant::PoolCopy => (Mode::Copy, Strength::Strong),
            Variant::WeakMove => (Mode::Move, Strength::Weak),
            Variant::WeakShare => (Mode::Share, Strength::Weak),
        }
    }

    fn threshold(self) -> usize {
        match self {
            Variant::MoveRemap | Variant::PoolMove | Variant::PoolShare => 0,
            Variant::MoveCopy | Variant::PoolMoveCopy => usize::MAX,
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
    /// The same between **pool move** and **pool move, copy**.
    pub pool_remap_wins_from: Option<usize>,
    pub default_threshold: usize,
    /// Where a pooled hop's cycles go, for each pooled variant measured,
    /// at the smallest and the largest size.
    pub steps: Vec<steps::Steps>,
    /// One-way cycles of a ticket on the polled channel alone (0 if no
    /// pooled variant was measured).
    pub channel_cycles: f64,
}

fn cosh(threshold: usize) -> Cosh {
    Cosh::new(CoshConfig {
        remap_threshold: threshold,
        recycle: 256,
        ..CoshConfig::default()
    })
}

/// A `Cosh` of domain `me` on `pool`, with `v`'s remap threshold.
fn pooled_cosh(v: Variant, pool: &Arc<Pool>, me: PoolDomain) -> Cosh {
    Cosh::with_pool(
        CoshConfig {
            remap_threshold: v.threshold(),
            ..CoshConfig::default()
        },
        pool.clone(),
        me,
    )
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
    pin_child();
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

/// The CPUs the two domains run on (the paper's separate cores), if this
/// process may use two.
fn two_cpus() -> Option<(usize, usize)> {
    let cpus = sys::allowed_cpus();
    (cpus.len() >= 2).then(|| (cpus[0], cpus[1]))
}

/// The receiver's first step: its own CPU.
fn pin_child() {
    if let Some((_, theirs)) = two_cpus() {
        let _ = sys::pin_to(&[theirs]);
    }
}

/// This process pinned to its CPU until dropped.
struct Pinned(Vec<usize>);

impl Pinned {
    fn parent() -> Pinned {
        let old = sys::allowed_cpus();
        if let Some((ours, _)) = two_cpus() {
            let _ = sys::pin_to(&[ours]);
        }
        Pinned(old)
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        if !self.0.is_empty() {
            let _ = sys::pin_to(&self.0);
        }
    }
}

/// `repeat` timed batches of `iters` calls of `round` (after a warm-up):
/// one-way cycles and nanoseconds per batch, half a round each.
fn time_rounds(
    warmup: usize,
    iters: usize,
    repeat: usize,
    mut round: impl FnMut() -> Result<(), CoshError>,
) -> Result<(Stat, Stat), CoshError> {
    for _ in 0..warmup {
        round()?;
    }
    let (mut cycles, mut ns) = (Vec::new(), Vec::new());
    for _ in 0..repeat {
        let (t0, c0) = (Instant::now(), sys::rdtsc());
        for _ in 0..iters {
            round()?;
        }
        let (dc, dt) = (sys::rdtsc() - c0, t0.elapsed());
        let hops = 2.0 * iters as f64;
        cycles.push(dc as f64 / hops);
        ns.push(dt.as_nanos() as f64 / hops);
    }
    Ok((Stat::of(&mut cycles), Stat::of(&mut ns)))
}

/// The aggregate's bytes: not all zeros, so a lost copy shows.
fn pattern(size: usize) -> Vec<u8> {
    (0..size).map(|i| (i % 251) as u8).collect()
}

/// The end of a measurement: the bytes came back unchanged, the receiver
/// succeeded.
fn verdict(back: Vec<u8>, want: &[u8], exit: Exit) -> Result<(), CoshError> {
    if back != want {
        return Err(CoshError::Protocol("bytes changed on the way"));
    }
    if exit != Exit::Code(0) {
        return Err(CoshError::Protocol("the receiver failed"));
    }
    Ok(())
}

/// Measure one socket variant at one size: `repeat` batches of round
/// trips.
fn measure(
    v: Variant,
    size: usize,
    iters: usize,
    repeat: usize,
) -> Result<(Stat, Stat), CoshError> {
    if v.pooled() {
        return measure_pooled(v, size, iters, repeat);
    }
    let warmup = iters.div_ceil(10).max(2);
    let rounds = warmup + iters * repeat;
    // Fork before any block exists: a child forked while we map a block
    // would keep a mapping and make every share fall back to a copy.
    let child = fork_domain(move |sock| bounce(sock, v, rounds))?;
    let pinned = Pinned::parent();
    let (mode, strength) = v.mode();
    let mut c = cosh(v.threshold());
    let d = c.domain();
    let mut a = c.alloc(d, size)?;
    let want = pattern(size);
    c.write(a, 0, &want)?;
    let stats = time_rounds(warmup, iters, repeat, || {
        send(&mut c, a, &child.sock, mode, strength)?;
        a = hop(&mut c, d, &child.sock, mode, strength)?;
        Ok(())
    })?;
    drop(pinned);
    let back = c.to_vec(a)?;
    c.decref(a)?;
    verdict(back, &want, child.wait()?)?;
    Ok(stats)
}

/// One domain of a pooled measurement: its `Cosh`, its domain, the pool
/// number of its peer, its end of the channel.
struct PoolSide<'a> {
    c: Cosh,
    d: DomainId,
    peer: PoolDomain,
    end: End<'a>,
    buf: Vec<u8>,
    /// The ticket being sent.
    out: Vec<u8>,
    mode: Mode,
    strength: Strength,
}

impl PoolSide<'_> {
    fn new<'a>(
        v: Variant,
        pool: &Arc<Pool>,
        me: PoolDomain,
        peer: PoolDomain,
        end: End<'a>,
    ) -> PoolSide<'a> {
        let (mode, strength) = v.mode();
        let mut c = pooled_cosh(v, pool, me);
        let d = c.domain();
        PoolSide {
            c,
            d,
            peer,
            end,
            buf: Vec::new(),
            out: Vec::new(),
            mode,
            strength,
        }
    }

    /// Transfer `a` to the peer and drop our reference to it.
    fn send(&mut self, a: Agg) -> Result<(), CoshError> {
        let (end, out) = (&self.end, &mut self.out);
        self.c
            .transfer_pooled(a, self.mode, self.strength, self.peer, |t| {
                t.encode_into(out);
                end.send(out)
            })?;
        self.c.decref(a)
    }

    /// Receive one aggregate, checking it came as agreed.
    fn recv(&mut self) -> Result<Agg, CoshError> {
        self.end.recv(&mut self.buf)?;
        let t = PoolTicket::decode(&self.buf)?;
        let got = self.c.recv_pooled(self.d, t)?;
        if got.mode != self.mode || got.strength != self.strength {
            return Err(CoshError::Protocol("an unexpected transfer mode"));
        }
        Ok(got.agg)
    }
}

/// Measure one pool variant at one size.
fn measure_pooled(
    v: Variant,
    size: usize,
    iters: usize,
    repeat: usize,
) -> Result<(Stat, Stat), CoshError> {
    let warmup = iters.div_ceil(10).max(2);
    let rounds = warmup + iters * repeat;
    // Room for the aggregate, a copy of it in flight, and slack.
    let pool = Arc::new(Pool::create(3 * size + (1 << 20))?);
    let (ours, theirs) = (pool.join(), pool.join());
    let chan = Channel::new()?;
    let parent = std::process::id() as i32;
    let child = fork_domain(|_| {
        pin_child();
        let end = chan.end(false, || sys::parent_pid() == parent);
        let mut side = PoolSide::new(v, &pool, theirs, ours, end);
        for _ in 0..rounds {
            if side.recv().and_then(|a| side.send(a)).is_err() {
                return 1;
            }
        }
        0
    })?;
    let pinned = Pinned::parent();
    let pid = child.pid;
    let end = chan.end(true, move || !sys::child_ended(pid));
    let mut side = PoolSide::new(v, &pool, ours, theirs, end);
    let mut a = side.c.alloc(side.d, size)?;
    let want = pattern(size);
    side.c.write(a, 0, &want)?;
    let stats = time_rounds(warmup, iters, repeat, || {
        side.send(a)?;
        a = side.recv()?;
        Ok(())
    })?;
    drop(pinned);
    let back = side.c.to_vec(a)?;
    side.c.decref(a)?;
    verdict(back, &want, child.wait()?)?;
    Ok(stats)
}

/// Run everything `cfg` asks for. Forks: call it with no other threads
/// running.
pub fn run(cfg: &Config) -> Result<Results, CoshError> {
    let mut rows = Vec::new();
    for &v in &cfg.variants {
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
    let wins_from = |remap: Variant, copy: Variant| {
        cfg.sizes
            .iter()
            .copied()
            .find(|&s| matches!((fastest(remap, s), fastest(copy, s)), (Some(r), Some(c)) if r < c))
    };
    let remap_wins_from = wins_from(Variant::MoveRemap, Variant::MoveCopy);
    let pool_remap_wins_from = wins_from(Variant::PoolMove, Variant::PoolMoveCopy);
    let mut step_rows = Vec::new();
    let mut channel_cycles = 0.0;
    if cfg.variants.iter().any(|v| v.pooled()) {
        channel_cycles = steps::channel_one_way(cfg.iters)?;
        let (small, large) = (cfg.sizes.iter().min(), cfg.sizes.iter().max());
        let mut sizes: Vec<usize> = small.into_iter().chain(large).copied().collect();
        sizes.dedup();
        for &v in cfg.variants.iter().filter(|v| v.pooled()) {
            for &size in &sizes {
                step_rows.push(steps::pool_steps(v, size, 2 * cfg.iters_for(size))?);
            }
        }
    }
    Ok(Results {
        repeat: cfg.repeat,
        rows,
        tsc_ghz: if tn > 0.0 { tc / tn } else { 0.0 },
        remap_wins_from,
        pool_remap_wins_from,
        default_threshold: crate::DEFAULT_REMAP_THRESHOLD,
        steps: step_rows,
        channel_cycles,
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
