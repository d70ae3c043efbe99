//! Transfers between processes that share one block pool (`crate::pool`):
//! the ticket names blocks by pool offset, so no descriptor travels and
//! the receiver maps (or unhides) the range.
//!
//! Which path a user takes: a [`Cosh`] made with [`Cosh::with_pool`]
//! allocates every block in the pool and sends with
//! [`Cosh::attach_transfer_pooled`] + [`Cosh::send_pooled`] to another
//! domain of the same pool (`atoll bench transfer`'s pool rows). A plain
//! [`Cosh::new`] keeps a memfd per block and sends descriptors
//! ([`crate::send_parcel`]): for peers that share no pool or do not trust
//! each other, and across an `execve` (`atoll-sched`'s argument lists).

use std::sync::Arc;

use super::Cosh;
use crate::block::{BlockManager, Config};
use crate::pool::{Pool, PoolDomain};
use crate::ticket::{Carried, Parcel, PoolTicket};
use crate::{CoshError, DomainId, Received};

impl Cosh {
    /// A `Cosh` whose blocks are ranges of `pool`, where this process is
    /// pool domain `me` (from [`Pool::join`]).
    pub fn with_pool(cfg: Config, pool: Arc<Pool>, me: PoolDomain) -> Cosh {
        Cosh {
            mgr: BlockManager::with_pool(cfg, pool, me),
            domains: Vec::new(),
        }
    }

    /// Hand `parcel` (from [`Cosh::attach_transfer_pooled`]) to pool
    /// domain `to`: each block's reference goes in flight to it (a share
    /// adds one for the receiver and keeps ours), and the ticket to send
    /// by any channel comes back. Every block must be a pool block.
    pub fn send_pooled(
        &mut self,
        mut parcel: Parcel,
        to: PoolDomain,
    ) -> Result<PoolTicket, CoshError> {
        let all_pool = parcel
            .blocks
            .iter()
            .chain(&parcel.inline_block)
            .all(|c| matches!(c, Carried::Local(b) if b.pool_range().is_some()));
        if !all_pool {
            self.discard(parcel);
            return Err(CoshError::Protocol("a block outside the pool"));
        }
        let share = parcel.ticket.mode == crate::Mode::Share;
        let inline = std::mem::take(&mut parcel.inline);
        // Taken, not cloned: `discard` below needs only the blocks.
        let parts = std::mem::take(&mut parcel.ticket.parts);
        let sent = || -> Result<PoolTicket, CoshError> {
            let mut blocks = Vec::with_capacity(parcel.blocks.len());
            for c in &parcel.blocks {
                let Carried::Local(b) = c else {
                    unreachable!("checked")
                };
                blocks.push(self.mgr.send_pool_block(b, to, share)?);
            }
            let inline_block = match &parcel.inline_block {
                Some(Carried::Local(b)) => Some(self.mgr.send_pool_block(b, to, false)?),
                _ => None,
            };
            Ok(PoolTicket {
                ticket: crate::ticket::Ticket {
                    parts,
                    ..parcel.ticket.clone()
                },
                blocks,
                inline_block,
                inline,
            })
        };
        let r = sent();
        self.discard(parcel);
        r
    }

    /// Transfer `a` to pool domain `to` and hand its ticket to `deliver`
    /// (which sends it by any channel): [`Cosh::attach_transfer_pooled`]
    /// and [`Cosh::send_pooled`] in one, with the sender's views hidden
    /// *after* the ticket left instead of before. The receiver makes its
    /// view meanwhile, on its own CPU, and waits until ours are gone
    /// before its program gets the block (`Pool::wait_revoked`), so a
    /// strong move still never leaves the block reachable from both
    /// programs, and its two `mprotect`s run side by side rather than one
    /// after the other on the hop's critical path. Our views go whatever
    /// happens, errors included. `deliver` must not receive the transfer
    /// itself on this thread: that receive would wait for the hide that
    /// follows `deliver`.
    pub fn transfer_pooled(
        &mut self,
        a: crate::Agg,
        mode: crate::Mode,
        strength: crate::Strength,
        to: PoolDomain,
        deliver: impl FnOnce(&PoolTicket) -> Result<(), CoshError>,
    ) -> Result<(), CoshError> {
        self.mgr.defer_hides();
        let sent = self
            .attach_transfer_pooled(a, mode, strength)
            .and_then(|p| self.send_pooled(p, to))
            .and_then(|t| deliver(&t));
        let hidden = self.mgr.hide_deferred();
        if !hidden.is_empty() {
            let (pool, _) = self.mgr.pool().expect("pool blocks have a pool");
            let me = crate::sys::pid();
            for r in hidden {
                pool.revoked(r, me);
            }
        }
        sent
    }

    /// Finish a transfer that arrived as `t` in domain `d`: claim every
    /// block the ticket names (refused unless each is a whole pool block
    /// sent to us), then as [`Cosh::attach_recv`]. On any error, what was
    /// claimed is let go and nothing stays mapped.
    pub fn recv_pooled(&mut self, d: DomainId, mut t: PoolTicket) -> Result<Received, CoshError> {
        self.dom(d)?;
        let inline = std::mem::take(&mut t.inline);
        let mut claimed = Vec::with_capacity(t.blocks.len());
        let mut inline_block = None;
        let mut claim_all = || -> Result<(), CoshError> {
            for &r in &t.blocks {
                claimed.push(Carried::Local(self.mgr.adopt(r)?));
            }
            if let Some(r) = t.inline_block {
                inline_block = Some(Carried::Local(self.mgr.adopt(r)?));
            }
            Ok(())
        };
        let ticket = crate::ticket::Ticket {
            parts: std::mem::take(&mut t.ticket.parts),
            ..t.ticket.clone()
        };
        let parcel = |blocks, inline_block| Parcel {
            ticket,
            blocks,
            inline,
            inline_block,
        };
        if let Err(e) = claim_all() {
            self.discard(parcel(claimed, inline_block));
            return Err(e);
        }
        let got = self.attach_recv(d, parcel(claimed, inline_block))?;
        // A sender using `transfer_pooled` may still be hiding its views.
        let (pool, _) = self.mgr.pool().expect("claimed from a pool");
        for &r in t.blocks.iter().chain(&t.inline_block) {
            pool.wait_revoked(r);
        }
        Ok(got)
    }
}
