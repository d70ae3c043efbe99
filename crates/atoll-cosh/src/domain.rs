//! Domains and aggregates: Cosh's client library (Cosh §3.4, §4) over the
//! block manager.
//!
//! Life cycle of an aggregate:
//!
//! ```text
//!   alloc / concat / select / receive ──▶ live (refs ≥ 1, rights R)
//!       incref/decref adjust refs; downgrade and transfer lower R only
//!   decref to 0 ──▶ gone: its chunks let go of their blocks
//! ```
//!
//! An aggregate is a list of chunks (block, offset, length) with one
//! rights value for the whole. Per domain, `uses` counts the chunks of
//! live aggregates on each block by rights, which gives the mapping the
//! domain needs (the most any of its aggregates may do) and, for a
//! transfer, whether a related aggregate holds a block with rights that
//! conflict with the transfer.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use crate::block::{Block, BlockId, BlockManager, Config, IdMap, Stats};
use crate::rights::{Mode, Rights, Strength};
use crate::ticket::{Carried, Parcel, Part, Ticket};
use crate::CoshError;

mod pooled;

/// A protection domain (a process; in tests, several in one process, each
/// with mappings of its own).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DomainId(pub u32);

/// A handle on an aggregate of one domain. Stale handles (of a freed
/// aggregate) are refused: the slot's generation differs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Agg {
    domain: DomainId,
    slot: u32,
    gen: u32,
}

impl Agg {
    pub fn domain(&self) -> DomainId {
        self.domain
    }
}

#[derive(Clone, Debug)]
struct Chunk {
    block: Arc<Block>,
    off: usize,
    len: usize,
}

#[derive(Debug)]
struct AggState {
    chunks: Vec<Chunk>,
    len: usize,
    rights: Rights,
    refs: u32,
}

#[derive(Default, Debug)]
struct Uses {
    ro: u32,
    rw: u32,
}

#[derive(Default, Debug)]
struct DomainState {
    slots: Vec<(u32, Option<AggState>)>,
    free_slots: Vec<u32>,
    uses: IdMap<BlockId, Uses>,
    /// Transfers addressed to this domain, with their source.
    inbox: VecDeque<(DomainId, Parcel)>,
}

/// What `receive` returns: the new aggregate and how it came (the receiver
/// checks both: Cosh §5's pipe rejects anything but a strong move).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Received {
    pub agg: Agg,
    pub mode: Mode,
    pub strength: Strength,
}

/// Domains, their aggregates, and the block manager under them.
#[derive(Debug)]
pub struct Cosh {
    mgr: BlockManager,
    domains: Vec<DomainState>,
}

impl Cosh {
    pub fn new(cfg: Config) -> Cosh {
        Cosh {
            mgr: BlockManager::new(cfg),
            domains: Vec::new(),
        }
    }

    /// A new domain.
    pub fn domain(&mut self) -> DomainId {
        self.domains.push(DomainState::default());
        DomainId(self.domains.len() as u32 - 1)
    }

    pub fn manager(&self) -> &BlockManager {
        &self.mgr
    }

    /// Give the pool blocks this process keeps for its next allocations
    /// back to the pool (`Config::pool_keep_bytes`).
    pub fn give_back_kept(&mut self) {
        self.mgr.give_back_kept();
    }

    pub fn set_remap_threshold(&mut self, bytes: usize) {
        self.mgr.set_remap_threshold(bytes);
    }

    pub fn stats(&self) -> Stats {
        self.mgr.stats()
    }

    fn dom(&self, d: DomainId) -> Result<&DomainState, CoshError> {
        self.domains
            .get(d.0 as usize)
            .ok_or(CoshError::NoSuchDomain)
    }

    fn dom_mut(&mut self, d: DomainId) -> Result<&mut DomainState, CoshError> {
        self.domains
            .get_mut(d.0 as usize)
            .ok_or(CoshError::NoSuchDomain)
    }

    fn state(&self, a: Agg) -> Result<&AggState, CoshError> {
        match self.dom(a.domain)?.slots.get(a.slot as usize) {
            Some((g, Some(s))) if *g == a.gen => Ok(s),
            _ => Err(CoshError::NoSuchAggregate),
        }
    }

    fn state_mut(&mut self, a: Agg) -> Result<&mut AggState, CoshError> {
        match self.dom_mut(a.domain)?.slots.get_mut(a.slot as usize) {
            Some((g, Some(s))) if *g == a.gen => Ok(s),
            _ => Err(CoshError::NoSuchAggregate),
        }
    }

    /// Install an aggregate in `d` and count its uses of blocks.
    fn install(&mut self, d: DomainId, st: AggState) -> Result<Agg, CoshError> {
        let dom = self.dom_mut(d)?;
        for c in &st.chunks {
            count(&mut dom.uses, c.block.id(), st.rights, 1);
        }
        let slot = match dom.free_slots.pop() {
            Some(s) => {
                let e = &mut dom.slots[s as usize];
                e.0 = e.0.wrapping_add(1);
                e.1 = Some(st);
                s
            }
            None => {
                dom.slots.push((0, Some(st)));
                dom.slots.len() as u32 - 1
            }
        };
        let gen = dom.slots[slot as usize].0;
        Ok(Agg {
            domain: d,
            slot,
            gen,
        })
    }

    /// The rights `d` needs on block `b` for its live aggregates.
    fn needed(&self, d: DomainId, b: BlockId) -> Rights {
        match self.domains[d.0 as usize].uses.get(&b) {
            Some(u) if u.rw > 0 => Rights::Rw,
            Some(u) if u.ro > 0 => Rights::Ro,
            _ => Rights::None,
        }
    }

    /// Bring `d`'s mappings of `blocks` in line with its rights.
    fn sync(
        &mut self,
        d: DomainId,
        blocks: &[Arc<Block>],
        keep_more: bool,
    ) -> Result<(), CoshError> {
        for b in blocks {
            let want = self.needed(d, b.id());
            self.mgr.sync_map(d, b, want, keep_more)?;
        }
        Ok(())
    }

    /// Allocate an aggregate of `len` zero bytes, read/write, in one block
    /// (Cosh §3.3: nobody else can observe it until it is transferred).
    pub fn alloc(&mut self, d: DomainId, len: usize) -> Result<Agg, CoshError> {
        self.dom(d)?;
        let chunks = if len == 0 {
            Vec::new()
        } else {
            let block = self.mgr.alloc(d, len, &[])?;
            vec![Chunk { block, off: 0, len }]
        };
        self.install(
            d,
            AggState {
                chunks,
                len,
                rights: Rights::Rw,
                refs: 1,
            },
        )
    }

    pub fn incref(&mut self, a: Agg) -> Result<(), CoshError> {
        self.state_mut(a)?.refs += 1;
        Ok(())
    }

    /// Drop a reference; the last one frees the aggregate, and blocks no
    /// aggregate holds any more go back to the pool.
    pub fn decref(&mut self, a: Agg) -> Result<(), CoshError> {
        let st = self.state_mut(a)?;
        st.refs -= 1;
        if st.refs > 0 {
            return Ok(());
        }
        let dom = &mut self.domains[a.domain.0 as usize];
        let st = dom.slots[a.slot as usize].1.take().expect("live");
        dom.free_slots.push(a.slot);
        let blocks = self.forget_chunks(a.domain, st.chunks, st.rights);
        self.let_go(a.domain, blocks, false)
    }

    /// `d` let go of `blocks`: those nobody else holds go back to the pool
    /// (keeping a mapping for reuse); the others get `d`'s mappings brought
    /// in line with what it still needs.
    fn let_go(
        &mut self,
        d: DomainId,
        blocks: Vec<Arc<Block>>,
        keep_more: bool,
    ) -> Result<(), CoshError> {
        for b in blocks {
            // Two references: ours and the manager's table.
            if Arc::strong_count(&b) > 2 {
                self.sync(d, std::slice::from_ref(&b), keep_more)?;
            }
            self.mgr.release(b);
        }
        Ok(())
    }

    /// Uncount `chunks` from `d`'s uses; the distinct blocks they held.
    fn forget_chunks(
        &mut self,
        d: DomainId,
        chunks: Vec<Chunk>,
        rights: Rights,
    ) -> Vec<Arc<Block>> {
        let dom = &mut self.domains[d.0 as usize];
        let mut blocks: Vec<Arc<Block>> = Vec::new();
        for c in chunks {
            count(&mut dom.uses, c.block.id(), rights, -1);
            if !blocks.iter().any(|b| b.id() == c.block.id()) {
                blocks.push(c.block);
            }
        }
        blocks
    }

    pub fn len(&self, a: Agg) -> Result<usize, CoshError> {
        Ok(self.state(a)?.len)
    }

    pub fn rights(&self, a: Agg) -> Result<Rights, CoshError> {
        Ok(self.state(a)?.rights)
    }

    /// The byte ranges of `a` from `offset`, in order, contiguous chunks
    /// joined (Cosh §4: the iterator hides chunk boundaries).
    pub fn iter(&mut self, a: Agg, offset: usize) -> Result<Vec<&[u8]>, CoshError> {
        let st = self.state(a)?;
        if st.rights == Rights::None {
            return Err(CoshError::Rights {
                needed: Rights::Ro,
                held: st.rights,
            });
        }
        if offset > st.len {
            return Err(CoshError::OutOfRange);
        }
        let chunks = st.chunks.clone();
        // Map lazily: a strong share drops every mapping of the block.
        let blocks: Vec<Arc<Block>> = chunks.iter().map(|c| c.block.clone()).collect();
        for b in &blocks {
            if self.mgr.mapping(a.domain, b.id()).is_none() {
                let want = self.needed(a.domain, b.id());
                self.mgr.sync_map(a.domain, b, want, false)?;
            }
        }
        let mut out: Vec<(BlockId, usize, usize)> = Vec::new();
        let mut skip = offset;
        for c in &chunks {
            if skip >= c.len {
                skip -= c.len;
                continue;
            }
            let (off, len) = (c.off + skip, c.len - skip);
            skip = 0;
            match out.last_mut() {
                Some((b, o, l)) if *b == c.block.id() && *o + *l == off => *l += len,
                _ => out.push((c.block.id(), off, len)),
            }
        }
        let d = a.domain;
        Ok(out
            .into_iter()
            .map(|(b, o, l)| self.mgr.mapping(d, b).expect("mapped above").bytes(o, l))
            .collect())
    }

    /// All of `a`'s bytes.
    pub fn to_vec(&mut self, a: Agg) -> Result<Vec<u8>, CoshError> {
        Ok(self.iter(a, 0)?.concat())
    }

    /// Write `data` at `offset` (needs read/write rights).
    pub fn write(&mut self, a: Agg, offset: usize, data: &[u8]) -> Result<(), CoshError> {
        let st = self.state(a)?;
        if st.rights < Rights::Rw {
            return Err(CoshError::Rights {
                needed: Rights::Rw,
                held: st.rights,
            });
        }
        if offset.checked_add(data.len()).is_none_or(|e| e > st.len) {
            return Err(CoshError::OutOfRange);
        }
        let chunks = st.chunks.clone();
        let (mut skip, mut data) = (offset, data);
        for c in chunks {
            if data.is_empty() {
                break;
            }
            if skip >= c.len {
                skip -= c.len;
                continue;
            }
            let n = (c.len - skip).min(data.len());
            if self
                .mgr
                .mapping(a.domain, c.block.id())
                .is_none_or(|m| !m.writable())
            {
                self.mgr.sync_map(a.domain, &c.block, Rights::Rw, false)?;
            }
            let m = self
                .mgr
                .mapping_mut(a.domain, c.block.id())
                .expect("mapped");
            m.write(c.off + skip, &data[..n]);
            data = &data[n..];
            skip = 0;
        }
        Ok(())
    }

    /// `a` followed by `b`, related to both; rights are the lesser of the
    /// two (Cosh §3.4: an aggregate's rights never exceed its buffers').
    pub fn concat(&mut self, a: Agg, b: Agg) -> Result<Agg, CoshError> {
        if a.domain != b.domain {
            return Err(CoshError::OtherDomain);
        }
        let (sa, sb) = (self.state(a)?, self.state(b)?);
        let mut chunks = sa.chunks.clone();
        chunks.extend(sb.chunks.iter().cloned());
        let st = AggState {
            len: sa.len + sb.len,
            rights: sa.rights.min(sb.rights),
            chunks,
            refs: 1,
        };
        self.install(a.domain, st)
    }

    /// Bytes `offset..offset + len` of `a`, related to it, same rights.
    pub fn select(&mut self, a: Agg, offset: usize, len: usize) -> Result<Agg, CoshError> {
        let sa = self.state(a)?;
        if offset.checked_add(len).is_none_or(|e| e > sa.len) {
            return Err(CoshError::OutOfRange);
        }
        let mut chunks = Vec::new();
        let (mut skip, mut left) = (offset, len);
        for c in &sa.chunks {
            if left == 0 {
                break;
            }
            if skip >= c.len {
                skip -= c.len;
                continue;
            }
            let n = (c.len - skip).min(left);
            chunks.push(Chunk {
                block: c.block.clone(),
                off: c.off + skip,
                len: n,
            });
            left -= n;
            skip = 0;
        }
        let st = AggState {
            chunks,
            len,
            rights: sa.rights,
            refs: 1,
        };
        self.install(a.domain, st)
    }

    /// The other live aggregates of `a`'s domain that share a block with
    /// it and hold at least `min` rights. Cosh relates aggregates by how
    /// they were made (concat/select); what matters for a transfer is
    /// which blocks they share, so that is what this looks at.
    pub fn find_related(&self, a: Agg, min: Rights) -> Result<Vec<Agg>, CoshError> {
        let sa = self.state(a)?;
        let dom = self.dom(a.domain)?;
        let mut out = Vec::new();
        for (slot, (gen, st)) in dom.slots.iter().enumerate() {
            let Some(st) = st else { continue };
            if slot as u32 == a.slot || st.rights < min {
                continue;
            }
            if st
                .chunks
                .iter()
                .any(|c| sa.chunks.iter().any(|x| x.block.id() == c.block.id()))
            {
                out.push(Agg {
                    domain: a.domain,
                    slot: slot as u32,
                    gen: *gen,
                });
            }
        }
        Ok(out)
    }

    /// Lower `a`'s rights to `to` (never raises them); a strong downgrade
    /// also lowers the mappings when no other aggregate needs more.
    pub fn downgrade(&mut self, a: Agg, to: Rights, strength: Strength) -> Result<(), CoshError> {
        let st = self.state(a)?;
        let from = st.rights;
        if to >= from {
            return Ok(());
        }
        let blocks = self.set_rights(a, to)?;
        self.sync(a.domain, &blocks, strength == Strength::Weak)
    }

    /// Change `a`'s rights in place, recounting uses; its distinct blocks.
    fn set_rights(&mut self, a: Agg, to: Rights) -> Result<Vec<Arc<Block>>, CoshError> {
        let st = self.state_mut(a)?;
        let from = std::mem::replace(&mut st.rights, to);
        let chunks = st.chunks.clone();
        let dom = &mut self.domains[a.domain.0 as usize];
        let mut blocks: Vec<Arc<Block>> = Vec::new();
        for c in chunks {
            count(&mut dom.uses, c.block.id(), from, -1);
            count(&mut dom.uses, c.block.id(), to, 1);
            if !blocks.iter().any(|b| b.id() == c.block.id()) {
                blocks.push(c.block);
            }
        }
        Ok(blocks)
    }

    /// Whether a chunk on `b` must be copied rather than remapped because
    /// another aggregate of the domain (or another domain of this manager)
    /// holds `b` with rights the transfer would contradict (Cosh §3.4,
    /// option 3).
    fn conflicts(&self, a: Agg, mode: Mode, b: BlockId) -> Result<bool, CoshError> {
        let own = self.state(a)?;
        let mine = own.chunks.iter().filter(|c| c.block.id() == b).count() as u32;
        let u = &self.domains[a.domain.0 as usize].uses[&b];
        // Our own chunks are in `uses` under our rights; take them out.
        let (mut ro, mut rw) = (u.ro, u.rw);
        match own.rights {
            Rights::Rw => rw -= mine,
            Rights::Ro => ro -= mine,
            Rights::None => {}
        }
        let other = if rw > 0 {
            Rights::Rw
        } else if ro > 0 {
            Rights::Ro
        } else {
            Rights::None
        };
        if mode.conflicts_with(other) {
            return Ok(true);
        }
        // A move hands the block over: no other domain may hold it.
        if mode == Mode::Move {
            for (i, dom) in self.domains.iter().enumerate() {
                if i != a.domain.0 as usize && dom.uses.get(&b).is_some_and(|u| u.ro + u.rw > 0) {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    /// Start a transfer of `a` and return it as a parcel to deliver (Cosh
    /// §3.2 steps 1–3, §5 `attach_transfer`): check the rights, downgrade
    /// the sender, and describe the bytes — remapped blocks for long
    /// chunks, copied bytes for short or conflicting ones.
    pub fn attach_transfer(
        &mut self,
        a: Agg,
        mode: Mode,
        strength: Strength,
    ) -> Result<Parcel, CoshError> {
        self.attach(a, mode, strength, false)
    }

    /// [`Cosh::attach_transfer`] for a receiver in the same pool
    /// (`crate::pool`): more copied bytes than
    /// [`Config::pool_inline_max`](crate::block::Config::pool_inline_max)
    /// go once into a fresh pool block that travels with the parcel
    /// ([`Parcel::inline_block`]) instead of being carried; fewer travel
    /// in the ticket. Send it with [`Cosh::send_pooled`].
    pub fn attach_transfer_pooled(
        &mut self,
        a: Agg,
        mode: Mode,
        strength: Strength,
    ) -> Result<Parcel, CoshError> {
        self.attach(a, mode, strength, true)
    }

    fn attach(
        &mut self,
        a: Agg,
        mode: Mode,
        strength: Strength,
        into_pool: bool,
    ) -> Result<Parcel, CoshError> {
        let st = self.state(a)?;
        if st.rights < mode.requires() {
            return Err(CoshError::Rights {
                needed: mode.requires(),
                held: st.rights,
            });
        }
        let retains = mode.retains(st.rights);
        let chunks = st.chunks.clone();
        let len = st.len;
        let threshold = self.mgr.config().remap_threshold;
        let weak = strength == Strength::Weak;

        // Decide per block: remap or copy.
        let mut remap: Vec<Arc<Block>> = Vec::new();
        let mut copy: Vec<BlockId> = Vec::new();
        for c in &chunks {
            let id = c.block.id();
            if remap.iter().any(|b| b.id() == id) || copy.contains(&id) {
                continue;
            }
            let long = chunks
                .iter()
                .filter(|x| x.block.id() == id)
                .map(|x| x.len)
                .sum::<usize>()
                >= threshold;
            let mut by_remap = mode != Mode::Copy && long;
            // A move gives write access; if the aggregate names some bytes
            // of the block twice, the receiver would see a write at one
            // place appear at another, which a copy never shows (Cosh §3.2
            // invariant 1: only the byte vector is preserved).
            let aliased = mode == Mode::Move && overlapping(&chunks, id);
            if by_remap && (aliased || self.conflicts(a, mode, id)?) {
                self.mgr.stats_mut().conflict_copies += 1;
                by_remap = false;
            }
            if by_remap && mode == Mode::Share && !weak && !c.block.sealed() {
                // A strong share seals the block; the seal needs every
                // mapping gone, ours included (we map it again, read-only,
                // on next use).
                by_remap = self.mgr.seal(&c.block)?;
            }
            if by_remap {
                remap.push(c.block.clone());
            } else {
                copy.push(id);
            }
        }

        // Copy what is copied before anything is unmapped.
        let (parts, inline, inline_block) =
            self.describe(a.domain, &chunks, &remap, &copy, into_pool)?;
        let inline_len: u64 = parts
            .iter()
            .map(|p| match p {
                Part::Inline { len } => *len,
                Part::Remap { .. } => 0,
            })
            .sum();

        // Our copies of the chunks would keep blocks alive past release.
        drop(chunks);

        // Downgrade the sender (Cosh §3.2 step 2).
        self.mgr.stats_mut().copied_bytes += inline_len;
        for b in &remap {
            let units = self.mgr.count_units(b.len());
            let s = self.mgr.stats_mut();
            s.remapped_bytes += b.len() as u64;
            match mode {
                Mode::Move => s.moved_blocks += units,
                Mode::Share => s.shared_by_remap_blocks += units,
                Mode::Copy => {}
            }
            if mode == Mode::Share {
                b.mark_shared();
            }
        }
        if !weak {
            // A strong transfer leaves no domain mappings beyond its
            // rights, including read/write mappings earlier weak
            // transfers left behind (Cosh §3.3).
            for i in 0..self.domains.len() {
                let d = DomainId(i as u32);
                if d != a.domain {
                    self.sync(d, &remap, false)?;
                }
            }
        }
        match mode {
            Mode::Move => {
                // The sender keeps nothing: its chunks go, so the blocks
                // belong to the receiver alone; a strong move unmaps them
                // here, a weak one may leave the mapping (Cosh §3.3).
                let st = self.state_mut(a)?;
                st.rights = Rights::None;
                let old = std::mem::take(&mut st.chunks);
                let from = Rights::Rw;
                let blocks = self.forget_chunks(a.domain, old, from);
                self.let_go(a.domain, blocks, weak)?;
            }
            Mode::Share | Mode::Copy => {
                if retains != self.state(a)?.rights {
                    let blocks = self.set_rights(a, retains)?;
                    // Blocks sealed above are unmapped already and mapped
                    // again read-only on next use; the others follow the
                    // rights unless the transfer is weak.
                    self.sync(a.domain, &blocks, weak)?;
                }
            }
        }
        self.mgr.count_transfer(mode, strength);
        Ok(Parcel {
            ticket: Ticket {
                mode,
                strength,
                len: len as u64,
                parts,
                inline_len,
            },
            blocks: remap.into_iter().map(Carried::Local).collect(),
            inline,
            inline_block: inline_block.map(Carried::Local),
        })
    }

    /// The parts of a transfer of `chunks` of domain `d`: `remap`'s blocks
    /// by index, the others' bytes copied — into a vector, or with
    /// `into_pool` into one fresh pool block.
    #[allow(clippy::type_complexity)]
    fn describe(
        &mut self,
        d: DomainId,
        chunks: &[Chunk],
        remap: &[Arc<Block>],
        copy: &[BlockId],
        into_pool: bool,
    ) -> Result<(Vec<Part>, Vec<u8>, Option<Arc<Block>>), CoshError> {
        let mut need_map = Vec::new();
        for c in chunks {
            if copy.contains(&c.block.id()) && self.mgr.mapping(d, c.block.id()).is_none() {
                need_map.push(c.block.clone());
            }
        }
        for b in need_map {
            let want = self.needed(d, b.id());
            self.mgr.sync_map(d, &b, want, false)?;
        }
        let copied: usize = chunks
            .iter()
            .filter(|c| copy.contains(&c.block.id()))
            .map(|c| c.len)
            .sum();
        // Few bytes travel in the message itself (a copy out of it costs
        // less than the two `mprotect`s that hand a pool block over).
        let mut sink = if into_pool && copied > self.mgr.config().pool_inline_max {
            Some(self.mgr.alloc_detached(copied)?)
        } else {
            None
        };
        let (mut inline, mut at) = (Vec::new(), 0usize);
        let mut parts = Vec::with_capacity(chunks.len());
        for c in chunks {
            let id = c.block.id();
            if let Some(i) = remap.iter().position(|b| b.id() == id) {
                parts.push(Part::Remap {
                    block: i as u16,
                    block_len: c.block.len() as u64,
                    sealed: c.block.sealed(),
                    off: c.off as u64,
                    len: c.len as u64,
                });
            } else {
                let m = self.mgr.mapping(d, id).expect("mapped above");
                match &mut sink {
                    Some((_, dst)) => dst.write(at, m.bytes(c.off, c.len)),
                    None => inline.extend_from_slice(m.bytes(c.off, c.len)),
                }
                at += c.len;
                match parts.last_mut() {
                    Some(Part::Inline { len }) => *len += c.len as u64,
                    _ => parts.push(Part::Inline { len: c.len as u64 }),
                }
            }
        }
        let block = sink.map(|(b, m)| {
            self.mgr.park(&b, m);
            b
        });
        Ok((parts, inline, block))
    }

    /// Finish a transfer in `d` (Cosh §5 `attach_recv`): map the remapped
    /// blocks with the rights the mode gives, put the copied bytes in a
    /// fresh block, and make the aggregate.
    pub fn attach_recv(&mut self, d: DomainId, parcel: Parcel) -> Result<Received, CoshError> {
        self.dom(d)?;
        let copied = match &parcel.inline_block {
            None => Ok(parcel.inline.len()),
            Some(Carried::Local(b))
                if parcel.inline.is_empty() && parcel.ticket.inline_len <= b.len() as u64 =>
            {
                Ok(parcel.ticket.inline_len as usize)
            }
            Some(_) => Err(CoshError::Protocol("a copy's block is not as announced")),
        };
        let mut check = copied.and_then(|n| parcel.ticket.check(parcel.blocks.len(), n));
        if check.is_ok() && parcel.ticket.mode == Mode::Copy && !parcel.blocks.is_empty() {
            check = Err(CoshError::Protocol("a copy transfer carried blocks"));
        }
        if let Err(e) = check {
            // A refused parcel gives its blocks back.
            self.discard(parcel);
            return Err(e);
        }
        let Parcel {
            ticket,
            blocks,
            inline,
            inline_block,
        } = parcel;
        let gains = ticket.mode.gains();
        let strong_share = ticket.mode == Mode::Share && ticket.strength == Strength::Strong;
        let mut held: Vec<Arc<Block>> = Vec::with_capacity(blocks.len());
        for (i, c) in blocks.into_iter().enumerate() {
            let b = match c {
                Carried::Local(b) => b,
                Carried::Fd(fd) => {
                    let block_len = ticket
                        .parts
                        .iter()
                        .find_map(|p| match *p {
                            Part::Remap {
                                block, block_len, ..
                            } if block as usize == i => Some(block_len),
                            _ => None,
                        })
                        .ok_or(CoshError::Protocol("a block no part names"))?;
                    self.mgr.import(fd, block_len as usize, strong_share)?
                }
            };
            if ticket.mode == Mode::Share {
                b.mark_shared();
            }
            held.push(b);
        }
        let fresh = match inline_block {
            Some(Carried::Local(b)) => Some(b),
            Some(Carried::Fd(_)) => unreachable!("checked above"),
            None if inline.is_empty() => None,
            None => Some(self.mgr.alloc(d, inline.len(), &inline)?),
        };
        let mut chunks = Vec::with_capacity(ticket.parts.len());
        let mut at = 0usize;
        for p in &ticket.parts {
            match *p {
                Part::Remap {
                    block, off, len, ..
                } => chunks.push(Chunk {
                    block: held[block as usize].clone(),
                    off: off as usize,
                    len: len as usize,
                }),
                Part::Inline { len } => {
                    let block = fresh.clone().expect("inline bytes present");
                    chunks.push(Chunk {
                        block,
                        off: at,
                        len: len as usize,
                    });
                    at += len as usize;
                }
            }
        }
        let agg = self.install(
            d,
            AggState {
                chunks,
                len: ticket.len as usize,
                rights: gains,
                refs: 1,
            },
        )?;
        // Map with exactly the rights gained (Cosh §3.3: on first access a
        // domain's permissions never exceed its rights).
        let mut all = held;
        all.extend(fresh);
        self.sync(d, &all, false)?;
        for b in all {
            self.mgr.release(b);
        }
        self.mgr.stats_mut().received += 1;
        Ok(Received {
            agg,
            mode: ticket.mode,
            strength: ticket.strength,
        })
    }

    /// Transfer `a` to another domain of this `Cosh` (Cosh §3.2); it waits
    /// in `dest`'s inbox until `receive`.
    pub fn transfer(
        &mut self,
        a: Agg,
        dest: DomainId,
        mode: Mode,
        strength: Strength,
    ) -> Result<(), CoshError> {
        self.dom(dest)?;
        let p = self.attach_transfer(a, mode, strength)?;
        self.dom_mut(dest)?.inbox.push_back((a.domain, p));
        Ok(())
    }

    /// The oldest transfer from `src` waiting for `d`, if any.
    pub fn receive(&mut self, d: DomainId, src: DomainId) -> Result<Option<Received>, CoshError> {
        let inbox = &mut self.dom_mut(d)?.inbox;
        let Some(i) = inbox.iter().position(|(s, _)| *s == src) else {
            return Ok(None);
        };
        let (_, p) = inbox.remove(i).expect("present");
        self.attach_recv(d, p).map(Some)
    }

    /// Drop a parcel that will not be received, giving its blocks back.
    pub fn discard(&mut self, parcel: Parcel) {
        for c in parcel.blocks.into_iter().chain(parcel.inline_block) {
            if let Carried::Local(b) = c {
                self.mgr.release(b);
            }
        }
    }

    /// Check the invariants of Cosh §3.2–3.3 over every domain; the first
    /// broken one, described. Used by the tests; cheap enough for debug
    /// builds of users.
    pub fn audit(&self) -> Result<(), String> {
        let mut holders: HashMap<BlockId, Vec<(DomainId, Rights)>> = HashMap::new();
        for (i, dom) in self.domains.iter().enumerate() {
            for (&b, u) in &dom.uses {
                let r = if u.rw > 0 {
                    Rights::Rw
                } else if u.ro > 0 {
                    Rights::Ro
                } else {
                    continue;
                };
                holders.entry(b).or_default().push((DomainId(i as u32), r));
            }
        }
        for b in self.mgr.blocks() {
            let h = holders.get(&b.id()).map(Vec::as_slice).unwrap_or(&[]);
            if b.shared() && h.iter().any(|(_, r)| *r == Rights::Rw) {
                return Err(format!("shared block {} is read/write in a domain", b.id()));
            }
            if h.iter().any(|(_, r)| *r == Rights::Rw) && h.len() > 1 {
                return Err(format!(
                    "read/write block {} is held by {} domains",
                    b.id(),
                    h.len()
                ));
            }
        }
        for (d, b, writable) in self.mgr.mappings() {
            let block = self
                .mgr
                .blocks()
                .find(|x| x.id() == b)
                .ok_or("a mapping of a freed block")?;
            if writable && block.sealed() {
                return Err(format!("sealed block {b} is mapped writable in {d:?}"));
            }
        }
        Ok(())
    }

    /// Whether `d` has a writable mapping of any block of `a` (for tests
    /// of weak transfers, whose mappings may exceed the rights).
    pub fn writable_mapping(&self, d: DomainId, block_of: Agg) -> Result<bool, CoshError> {
        let st = self.state(block_of)?;
        Ok(st.chunks.iter().any(|c| {
            self.mgr
                .mapping(d, c.block.id())
                .is_some_and(|m| m.writable())
        }))
    }
}

/// Whether two chunks on block `b` cover some byte in common.
fn overlapping(chunks: &[Chunk], b: BlockId) -> bool {
    let mut r: Vec<(usize, usize)> = chunks
        .iter()
        .filter(|c| c.block.id() == b)
        .map(|c| (c.off, c.off + c.len))
        .collect();
    r.sort_unstable();
    r.windows(2).any(|w| w[1].0 < w[0].1)
}

fn count(uses: &mut IdMap<BlockId, Uses>, b: BlockId, r: Rights, delta: i32) {
    let u = uses.entry(b).or_default();
    match r {
        Rights::Rw => u.rw = u.rw.checked_add_signed(delta).expect("use count"),
        Rights::Ro => u.ro = u.ro.checked_add_signed(delta).expect("use count"),
        Rights::None => {}
    }
    if u.ro == 0 && u.rw == 0 {
        uses.remove(&b);
    }
}
