//! Where a pooled hop's cycles go: the steps of one transfer timed one by
//! one (`rdtsc` around each), between two `Cosh`es of one pool in this
//! process, and the channel alone between two pinned processes. The sum
//! is what a hop of the two-process measurement costs without the cache
//! lines that cross cores with the data structures (the ticket, the
//! pool's header words).

use std::sync::Arc;

use serde::Serialize;

use super::{pattern, pin_child, Pinned, Stat, Variant};
use crate::chan::Channel;
use crate::sys::{self, fork_domain, Exit};
use crate::{Cosh, CoshError, DomainId, Pool, PoolDomain, PoolTicket};

/// One step and its cycles per hop: the median over the hops (a hop
/// preempted half way would otherwise weigh on a mean for millions of
/// cycles).
#[derive(Clone, Debug, Serialize)]
pub struct Step {
    pub name: &'static str,
    pub cycles: f64,
}

/// The steps of one pooled variant at one size.
#[derive(Clone, Debug, Serialize)]
pub struct Steps {
    pub variant: Variant,
    pub size: usize,
    pub steps: Vec<Step>,
}

/// The names of the steps, in order.
pub const STEP_NAMES: [&str; 5] = [
    "attach + send_pooled (rights, in flight)",
    "ticket encode + decode",
    "sender's views hidden (after the ticket left)",
    "recv_pooled (claim, map, wait)",
    "decref (release)",
];

struct Side {
    c: Cosh,
    d: DomainId,
    me: PoolDomain,
}

/// Time the steps of `hops` transfers of `v` at `size` bouncing between
/// two `Cosh`es on one pool.
pub fn pool_steps(v: Variant, size: usize, hops: usize) -> Result<Steps, CoshError> {
    let pool = Arc::new(Pool::create(3 * size + (1 << 20))?);
    let side = |me: PoolDomain| {
        let mut c = super::pooled_cosh(v, &pool, me);
        let d = c.domain();
        Side { c, d, me }
    };
    let mut sides = [side(pool.join()), side(pool.join())];
    let (mode, strength) = v.mode();
    let want = pattern(size);
    let mut a = sides[0].c.alloc(sides[0].d, size)?;
    sides[0].c.write(a, 0, &want)?;
    let warmup = hops.div_ceil(10).max(2);
    let mut samples: [Vec<f64>; STEP_NAMES.len()] = Default::default();
    let mut wire = Vec::new();
    for i in 0..warmup + hops {
        let (left, right) = sides.split_at_mut(1);
        let (from, to) = if i % 2 == 0 {
            (&mut left[0], &mut right[0])
        } else {
            (&mut right[0], &mut left[0])
        };
        // A hop as the two-process measurement makes it
        // (`Cosh::transfer_pooled`): the ticket goes out before the
        // sender's views are hidden, which between two processes runs
        // beside the receiver's steps.
        let (mut c1, mut c2, mut carried) = (0, 0, None);
        let c0 = sys::rdtsc();
        from.c.transfer_pooled(a, mode, strength, to.me, |t| {
            c1 = sys::rdtsc();
            t.encode_into(&mut wire);
            carried = Some(PoolTicket::decode(&wire)?);
            c2 = sys::rdtsc();
            Ok(())
        })?;
        let c3 = sys::rdtsc();
        let t = carried.take().expect("delivered");
        let got = to.c.recv_pooled(to.d, t)?;
        let c4 = sys::rdtsc();
        from.c.decref(a)?;
        let c5 = sys::rdtsc();
        a = got.agg;
        if i >= warmup {
            for (s, d) in samples
                .iter_mut()
                .zip([c1 - c0, c2 - c1, c3 - c2, c4 - c3, c5 - c4])
            {
                s.push(d as f64);
            }
        }
    }
    let holder = if (warmup + hops).is_multiple_of(2) {
        0
    } else {
        1
    };
    if sides[holder].c.to_vec(a)? != want {
        return Err(CoshError::Protocol("bytes changed on the way"));
    }
    Ok(Steps {
        variant: v,
        size,
        steps: STEP_NAMES
            .iter()
            .zip(samples.iter_mut())
            .map(|(&name, s)| Step {
                name,
                cycles: Stat::of(s).median,
            })
            .collect(),
    })
}

/// One-way cycles of a ticket-sized message on the polled channel between
/// two processes on different CPUs: half a round trip, the median over
/// the rounds.
pub fn channel_one_way(rounds: usize) -> Result<f64, CoshError> {
    let chan = Channel::new()?;
    let parent = std::process::id() as i32;
    let child = fork_domain(|_| {
        pin_child();
        let end = chan.end(false, || sys::parent_pid() == parent);
        let mut buf = Vec::new();
        for _ in 0..rounds {
            if end.recv(&mut buf).and_then(|()| end.send(&buf)).is_err() {
                return 1;
            }
        }
        0
    })?;
    let pinned = Pinned::parent();
    let pid = child.pid;
    let end = chan.end(true, move || !sys::child_ended(pid));
    let msg = [7u8; 32];
    let mut buf = Vec::new();
    let warmup = rounds / 10;
    let mut halves = Vec::with_capacity(rounds);
    for i in 0..rounds {
        let start = sys::rdtsc();
        end.send(&msg)?;
        end.recv(&mut buf)?;
        if i >= warmup {
            halves.push((sys::rdtsc() - start) as f64 / 2.0);
        }
    }
    let cycles = Stat::of(&mut halves).median;
    drop(pinned);
    if child.wait()? != Exit::Code(0) {
        return Err(CoshError::Protocol("the channel's peer failed"));
    }
    Ok(cycles)
}
