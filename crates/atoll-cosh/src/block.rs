//! The block manager (Cosh §4): owns a pool of memory, hands out blocks,
//! maps and unmaps them into domains, seals them when they are shared, and
//! counts every block.
//!
//! A **block** here is one memfd whose length is a whole number of pool
//! units (`Config::block_size`, 16 KiB by default as in Cosh §4), made for
//! one allocation: Cosh's fixed 16 KiB blocks would cost one descriptor and
//! one mapping per 16 KiB, and a 4 MiB transfer would need more
//! descriptors than one message carries (`SCM_MAX_FD`). Accounting is in
//! units, so the counts read as Cosh's blocks.
//!
//! Life cycle of a block:
//!
//! ```text
//!   pool ──alloc──▶ private (one domain, read/write)
//!                     │  share (strong: F_SEAL_WRITE; weak: rights only)
//!                     ▼
//!                   shared (read-only in every domain, until freed)
//!   private/shared ──last reference dropped──▶ pool (zeroed on reuse) or closed
//! ```
//!
//! A block leaves by a remapped move still private (its new holder has it
//! read/write); once its descriptor has left the process (`exported`) or
//! came from another (`imported`) it is never recycled, since someone
//! else may still map it, and is closed when freed. Sealed blocks are
//! never recycled either: the seal cannot be taken back.
//!
//! Ownership: the manager is used by one thread at a time (`&mut self`);
//! chunks of aggregates hold `Arc<Block>`, and the manager's table holds one
//! more, so a block whose only holder is the table is free.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use serde::Serialize;

use crate::pool::{Pool, PoolDomain, PoolRef};
use crate::rights::{Mode, Strength};
use crate::sys::{self, Map};
use crate::{CoshError, DomainId};

/// Identifies a block within one block manager.
pub type BlockId = u64;

/// A hash map keyed by our own small integer ids (blocks, domains): no
/// peer chooses them, so the keyed SipHash of `HashMap`'s default, a
/// guard against chosen keys, buys nothing and costs a noticeable part of
/// a transfer (`atoll bench transfer`'s step costs).
pub(crate) type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;

/// Multiply-rotate hashing of integers (as rustc's FxHash).
#[derive(Default, Clone, Copy)]
pub(crate) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.write_u64(n as u64);
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
}

/// Sizes and policy of a block manager.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// The pool unit, a multiple of the page size.
    pub block_size: usize,
    /// Units the pool may hand out at once.
    pub capacity_blocks: usize,
    /// Chunks at least this long are remapped on move and share, shorter
    /// ones copied (Cosh §6: remapping beats copying above ~8 KB there;
    /// `atoll bench transfer` measures it here). `0` remaps everything,
    /// `usize::MAX` copies everything.
    pub remap_threshold: usize,
    /// Freed blocks kept for reuse (with a mapping), saving
    /// `memfd_create`, `mmap` and page faults; zeroed when reused.
    pub recycle: usize,
    /// Between domains of one pool, copied bytes up to this many travel in
    /// the ticket's message and are copied out of it by the receiver;
    /// more go once into a fresh pool block that changes hands (Cosh §6:
    /// a copy through the message channel wins for small transfers). The
    /// channel must carry tickets this long (`chan::MAX_MESSAGE`).
    pub pool_inline_max: usize,
    /// Bytes of freed pool blocks a process keeps mapped read/write for
    /// its next allocations instead of giving them back to the pool: a
    /// block it held alone, reused by itself, costs no `mprotect`, no
    /// `mmap` and no pool lock. [`BlockManager::give_back_kept`] returns
    /// them.
    pub pool_keep_bytes: usize,
}

/// Measured with `atoll bench transfer` (docs/BENCHMARKS.md): a remapped
/// transfer costs about the same at every size (a descriptor passed, a
/// mapping made and dropped), a copied one grows with the bytes; on the
/// 2-CPU machine measured, copying won at 4 and 8 KiB and remapping from
/// 16 KiB on — Cosh §6 found the same crossover (~8 KB).
pub const DEFAULT_REMAP_THRESHOLD: usize = 16 * 1024;

/// Copied bytes carried in a pool ticket's message by default: a copy
/// below the remap threshold then never needs a block to change hands.
pub const DEFAULT_POOL_INLINE_MAX: usize = DEFAULT_REMAP_THRESHOLD;

impl Default for Config {
    fn default() -> Config {
        Config {
            block_size: 16 * 1024,
            capacity_blocks: 64 * 1024, // 1 GiB of 16 KiB units
            remap_threshold: DEFAULT_REMAP_THRESHOLD,
            recycle: 64,
            pool_inline_max: DEFAULT_POOL_INLINE_MAX,
            pool_keep_bytes: 256 * 1024,
        }
    }
}

/// Where a block's bytes live.
#[derive(Debug)]
pub enum Backing {
    /// A memfd of its own (sealable; its descriptor travels).
    Memfd(OwnedFd),
    /// A range of the pool shared by the domains of the instance
    /// (`crate::pool`); its offset travels.
    Pool(PoolRef),
}

/// One block: a memfd of its own or a range of the shared pool.
#[derive(Debug)]
pub struct Block {
    id: BlockId,
    backing: Backing,
    len: usize,
    /// `F_SEAL_WRITE` applied: read-only for every process, for ever.
    sealed: AtomicBool,
    /// Shared by a transfer (strong or weak): read-only in every domain's
    /// rights until freed (Cosh §3.2 invariant 2).
    shared: AtomicBool,
    /// The descriptor has been sent to another process.
    exported: AtomicBool,
    /// The descriptor came from another process.
    imported: bool,
    /// A pool block whose reference went to another process with a move
    /// (`Pool::send`): letting go of it here frees nothing.
    handed_over: AtomicBool,
}

impl Block {
    pub fn id(&self) -> BlockId {
        self.id
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The block's own memfd; `None` for a pool block.
    pub fn fd(&self) -> Option<BorrowedFd<'_>> {
        match &self.backing {
            Backing::Memfd(fd) => Some(fd.as_fd()),
            Backing::Pool(_) => None,
        }
    }
    /// The block's range of the shared pool; `None` for a memfd block.
    pub fn pool_range(&self) -> Option<PoolRef> {
        match self.backing {
            Backing::Pool(r) => Some(r),
            Backing::Memfd(_) => None,
        }
    }
    pub(crate) fn mark_handed_over(&self) {
        self.handed_over.store(true, Ordering::Relaxed);
    }
    pub fn sealed(&self) -> bool {
        self.sealed.load(Ordering::Relaxed)
    }
    pub fn shared(&self) -> bool {
        self.shared.load(Ordering::Relaxed)
    }
    pub fn imported(&self) -> bool {
        self.imported
    }
    pub(crate) fn mark_shared(&self) {
        self.shared.store(true, Ordering::Relaxed);
    }
    pub(crate) fn mark_exported(&self) {
        self.exported.store(true, Ordering::Relaxed);
    }
}

/// What the block manager holds and has done, for `atoll status`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Stats {
    pub block_size: usize,
    pub capacity_blocks: usize,
    /// Units of the pool not handed out.
    pub free_blocks: usize,
    /// Units handed out and private to one domain (read/write there).
    pub private_blocks: usize,
    /// Units handed out and shared read-only.
    pub shared_blocks: usize,
    /// Units received from another process's pool (not from ours).
    pub imported_blocks: usize,
    /// Units of blocks mapped into at least one domain now.
    pub mapped_blocks: usize,
    /// Mappings of blocks into domains that exist now.
    pub mappings: usize,
    /// Units handed to another domain by remapping in a move, so far.
    pub moved_blocks: u64,
    /// Units remapped by a share, so far.
    pub shared_by_remap_blocks: u64,
    /// Transfers sent, by mode (move, share, copy) and strength.
    pub transfers_strong: [u64; 3],
    pub transfers_weak: [u64; 3],
    /// Transfers received.
    pub received: u64,
    pub remapped_bytes: u64,
    pub copied_bytes: u64,
    /// Chunks copied because a related aggregate's rights conflicted (Cosh
    /// §3.4, option 3).
    pub conflict_copies: u64,
    /// Shares copied because another process still mapped the block, so
    /// the kernel refused the write seal (Cosh §3.2 invariant 3: a copy
    /// is always correct).
    pub seal_fallbacks: u64,
    /// Blocks reused from the free list / made with `memfd_create`.
    pub recycled: u64,
    pub created: u64,
    /// Bytes of pool blocks freed here and kept mapped for the next
    /// allocations (`Config::pool_keep_bytes`): held in the pool, used by
    /// no aggregate.
    pub kept_bytes: usize,
}

#[derive(Debug)]
struct Free {
    fd: OwnedFd,
    len: usize,
    map: Option<Map>,
}

/// The block manager.
#[derive(Debug)]
pub struct BlockManager {
    cfg: Config,
    next: BlockId,
    blocks: IdMap<BlockId, Arc<Block>>,
    /// Mappings, per domain and block. A domain maps a block at most once.
    maps: IdMap<(DomainId, BlockId), Map>,
    /// Freed blocks ready for reuse, with a mapping their last holder had (kept, so reuse costs neither `mmap` nor page faults).
    /// Their bytes are stale: they are zeroed when handed out.
    free: Vec<Free>,
    /// Units of our pool handed out (not imported).
    used_units: usize,
    stats: Stats,
    /// The pool shared with other processes, and our number in it: blocks
    /// are allocated there when present.
    pool: Option<(Arc<Pool>, PoolDomain)>,
    /// Mappings of pool ranges no domain uses now, hidden (`PROT_NONE`),
    /// most recent last: the same range comes back often (a moved block
    /// returns; first fit hands a freed range out again), and giving a
    /// kept mapping back is one `mprotect`, not an `mmap` and page faults.
    hidden: Vec<(PoolRef, Map)>,
    /// While a pooled transfer is under way (`defer_hides`), the views it
    /// lets go of: hidden once its ticket has left (`hide_deferred`).
    deferred: Option<Vec<(PoolRef, Map)>>,
    /// Pool blocks freed here that only this process ever held, kept with
    /// their read/write mapping (most recent last) instead of going back
    /// to the pool: the next allocation of that size takes one without a
    /// system call or the pool's lock. They stay ours in the pool's
    /// header, so no other domain can be handed a range we still map.
    kept: Vec<(PoolRef, Map)>,
    kept_bytes: usize,
}

/// Hidden pool mappings kept per process.
const HIDDEN_MAPS: usize = 64;
/// Longest pool mapping hidden rather than unmapped. `mprotect` walks
/// every page the mapping has touched, twice per hop (hide here, show
/// there), while `munmap` plus a fresh `mmap` costs about the same at any
/// size when the pages are not touched again (measured on the 2-CPU VM:
/// an `mprotect` pair ~3,400 cycles at 4 KiB, ~11,000 at 64 KiB with
/// every page touched, ~73,000 at 1 MiB; `munmap` + `mmap` + one fault
/// ~17,000–19,000 at every size).
const HIDE_MAX: usize = 64 * 1024;

impl BlockManager {
    pub fn new(cfg: Config) -> BlockManager {
        let page = sys::page_size();
        let block_size = cfg.block_size.max(page).div_ceil(page) * page;
        BlockManager {
            cfg: Config { block_size, ..cfg },
            next: 1,
            blocks: IdMap::default(),
            maps: IdMap::default(),
            free: Vec::new(),
            used_units: 0,
            stats: Stats::default(),
            pool: None,
            hidden: Vec::new(),
            deferred: None,
            kept: Vec::new(),
            kept_bytes: 0,
        }
    }

    /// A manager whose blocks are ranges of `pool`, in which this process
    /// is domain `me`.
    pub fn with_pool(cfg: Config, pool: Arc<Pool>, me: PoolDomain) -> BlockManager {
        let mut m = BlockManager::new(cfg);
        m.pool = Some((pool, me));
        m
    }

    pub fn pool(&self) -> Option<&(Arc<Pool>, PoolDomain)> {
        self.pool.as_ref()
    }

    /// A mapping of `b`, made or taken from the hidden ones.
    fn map_block(&mut self, b: &Block, writable: bool) -> Result<Map, CoshError> {
        match &b.backing {
            Backing::Memfd(fd) => Ok(Map::new(fd.as_fd(), b.len, writable)?),
            Backing::Pool(r) => self.map_range(*r, writable),
        }
    }

    fn map_range(&mut self, r: PoolRef, writable: bool) -> Result<Map, CoshError> {
        self.map_range_for(r, writable, false)
    }

    /// A mapping of pool range `r`; with `filling`, the caller is about to
    /// write all of it, so a new mapping is populated at once.
    fn map_range_for(
        &mut self,
        r: PoolRef,
        writable: bool,
        filling: bool,
    ) -> Result<Map, CoshError> {
        if let Some(i) = self.hidden.iter().rposition(|(h, _)| *h == r) {
            let (_, mut m) = self.hidden.swap_remove(i);
            m.set_writable(writable)?;
            return Ok(m);
        }
        let (pool, _) = self.pool.as_ref().expect("a pool block without a pool");
        let len = r.len as usize;
        Ok(if filling && writable {
            Map::new_populated(pool.fd(), r.off, len)?
        } else {
            Map::new_at(pool.fd(), r.off, len, writable)?
        })
    }

    /// `m`, a mapping of `b`, is no longer used: unmapped, or for a pool
    /// block hidden for reuse.
    fn unmap_block(&mut self, b: &Block, m: Map) {
        if let Backing::Pool(r) = b.backing {
            self.hide(r, m);
        }
    }

    fn hide(&mut self, r: PoolRef, mut m: Map) {
        if let Some(later) = self.deferred.as_mut() {
            later.push((r, m));
            return;
        }
        if m.len() > HIDE_MAX || m.hide().is_err() {
            return; // dropped: unmapped
        }
        if self.hidden.len() >= HIDDEN_MAPS {
            self.hidden.remove(0);
        }
        self.hidden.push((r, m));
    }

    /// From now on keep the views let go of mapped, until
    /// [`BlockManager::hide_deferred`]: a transfer sends its ticket first
    /// and hides the sender's views while the receiver maps its own.
    pub(crate) fn defer_hides(&mut self) {
        self.deferred = Some(Vec::new());
    }

    /// Hide (or unmap) the views kept since [`BlockManager::defer_hides`],
    /// and stop keeping them; returns their ranges.
    pub(crate) fn hide_deferred(&mut self) -> Vec<PoolRef> {
        let later = self.deferred.take().unwrap_or_default();
        let mut ranges = Vec::with_capacity(later.len());
        for (r, m) in later {
            ranges.push(r);
            self.hide(r, m);
        }
        ranges
    }

    /// A fresh pool block of at least `len` bytes, in the table but mapped
    /// in no domain, with a writable mapping for the caller to fill
    /// `0..len` of (the rest is zeroed here): a copy's destination. Give
    /// the mapping back with [`BlockManager::park`].
    pub(crate) fn alloc_detached(&mut self, len: usize) -> Result<(Arc<Block>, Map), CoshError> {
        let (pool, _) = self.pool.as_ref().ok_or(CoshError::Protocol("no pool"))?;
        let whole = (len.max(1).div_ceil(pool.unit()) * pool.unit()) as u64;
        if let Some(i) = self.kept.iter().rposition(|(r, _)| r.len == whole) {
            let (r, mut map) = self.kept.swap_remove(i);
            self.kept_bytes -= r.len as usize;
            // Our own bytes, but a receiver of this block must not read
            // what an earlier aggregate held (Cosh §3.3).
            map.zero(len, r.len as usize - len);
            self.stats.recycled += 1;
            let b = self.insert(Backing::Pool(r), r.len as usize, false, false);
            return Ok((b, map));
        }
        let r = match pool.alloc(len) {
            Err(CoshError::OutOfMemory { .. }) if !self.kept.is_empty() => {
                self.give_back_kept();
                self.pool.as_ref().expect("checked").0.alloc(len)?
            }
            other => other?,
        };
        let mut map = match self.map_range_for(r, true, true) {
            Ok(m) => m,
            Err(e) => {
                self.pool.as_ref().expect("checked").0.release(r);
                return Err(e);
            }
        };
        map.zero(len, r.len as usize - len);
        self.stats.created += 1;
        let b = self.insert(Backing::Pool(r), r.len as usize, false, false);
        Ok((b, map))
    }

    /// Give back a mapping from [`BlockManager::alloc_detached`].
    pub(crate) fn park(&mut self, b: &Block, m: Map) {
        self.unmap_block(b, m);
    }

    /// Adopt pool block `r`, sent to us by another pool domain: the
    /// header must agree (`Pool::claim`), else nothing is mapped.
    pub fn adopt(&mut self, r: PoolRef) -> Result<Arc<Block>, CoshError> {
        let (pool, me) = self
            .pool
            .as_ref()
            .ok_or(CoshError::Protocol("a pool ticket, and no pool"))?;
        let r = pool.claim(r, *me)?;
        Ok(self.insert(Backing::Pool(r), r.len as usize, false, false))
    }

    /// Put `b`'s reference in flight to pool domain `to` (see
    /// `Pool::send`); a move's or a copy's reference travels.
    pub(crate) fn send_pool_block(
        &mut self,
        b: &Block,
        to: PoolDomain,
        share: bool,
    ) -> Result<PoolRef, CoshError> {
        let r = b
            .pool_range()
            .ok_or(CoshError::Protocol("a block outside the pool"))?;
        let (pool, _) = self.pool.as_ref().ok_or(CoshError::Protocol("no pool"))?;
        // A view we still hold travels with a mark the receiver waits on
        // (`Pool::wait_revoked`) until `hide_deferred` has hidden it.
        let deferred = self.deferred.as_ref();
        let viewer = if deferred.is_some_and(|v| v.iter().any(|(h, _)| *h == r)) {
            sys::pid()
        } else {
            0
        };
        pool.send(r, to, share, viewer)?;
        if !share {
            b.mark_handed_over();
        }
        Ok(r)
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    pub fn set_remap_threshold(&mut self, bytes: usize) {
        self.cfg.remap_threshold = bytes;
    }

    fn units(&self, len: usize) -> usize {
        len.div_ceil(self.cfg.block_size)
    }

    /// A fresh private block of at least `len` bytes (whole units), mapped
    /// read/write into `d`, holding `prefix` and then zeros (Cosh §3.3:
    /// nothing a previous holder wrote can be observed).
    pub fn alloc(
        &mut self,
        d: DomainId,
        len: usize,
        prefix: &[u8],
    ) -> Result<Arc<Block>, CoshError> {
        if self.pool.is_some() {
            let (b, mut map) = self.alloc_detached(len.max(prefix.len()))?;
            map.write(0, prefix);
            map.zero(prefix.len(), len.max(prefix.len()) - prefix.len());
            self.maps.insert((d, b.id), map);
            return Ok(b);
        }
        let units = self.units(len.max(prefix.len()).max(1));
        if self.used_units + units > self.cfg.capacity_blocks {
            return Err(CoshError::OutOfMemory {
                wanted: units,
                free: self.cfg.capacity_blocks - self.used_units,
            });
        }
        let len = units * self.cfg.block_size;
        let (fd, map) = match self.free.iter().position(|f| f.len == len) {
            Some(i) => {
                self.stats.recycled += 1;
                let f = self.free.swap_remove(i);
                match f.map {
                    Some(mut m) => {
                        m.set_writable(true)?;
                        m.zero(prefix.len(), len - prefix.len());
                        (f.fd, Some(m))
                    }
                    None => {
                        sys::punch(f.fd.as_fd(), len)?;
                        (f.fd, None)
                    }
                }
            }
            None => {
                self.stats.created += 1;
                (sys::memfd(len)?, None)
            }
        };
        let mut map = match map {
            Some(m) => m,
            None => Map::new(fd.as_fd(), len, true)?,
        };
        map.write(0, prefix);
        self.used_units += units;
        let b = self.insert(Backing::Memfd(fd), len, false, false);
        self.maps.insert((d, b.id), map);
        Ok(b)
    }

    fn insert(&mut self, backing: Backing, len: usize, imported: bool, sealed: bool) -> Arc<Block> {
        let id = self.next;
        self.next += 1;
        let b = Arc::new(Block {
            id,
            backing,
            len,
            sealed: AtomicBool::new(sealed),
            shared: AtomicBool::new(sealed),
            exported: AtomicBool::new(false),
            imported,
            handed_over: AtomicBool::new(false),
        });
        self.blocks.insert(id, b.clone());
        b
    }

    /// Adopt a block another process sent. Checks what the sender cannot
    /// be trusted with: the descriptor is a memfd at least `len` long whose
    /// size is sealed (else it could truncate it under our mapping and make
    /// our reads fault), and, for a strong share, that it is write-sealed.
    pub fn import(
        &mut self,
        fd: OwnedFd,
        len: usize,
        need_sealed: bool,
    ) -> Result<Arc<Block>, CoshError> {
        let (sealed, fixed) = sys::seals(fd.as_fd())
            .map_err(|_| CoshError::Protocol("a transferred descriptor is not a sealable memfd"))?;
        if !fixed {
            return Err(CoshError::Protocol(
                "a transferred block's size is not sealed",
            ));
        }
        if (sys::file_len(fd.as_fd())? as usize) < len
            || len == 0
            || !len.is_multiple_of(sys::page_size())
        {
            return Err(CoshError::Protocol(
                "a transferred block is shorter than announced",
            ));
        }
        if need_sealed && !sealed {
            return Err(CoshError::Protocol(
                "a strong share of a block that is not write-sealed",
            ));
        }
        Ok(self.insert(Backing::Memfd(fd), len, true, sealed))
    }

    /// Seal `b` against writes everywhere (strong share, Cosh §3.3). Every
    /// mapping of it in our domains goes first — the kernel refuses the
    /// seal while any shared mapping exists, read-only ones included, and
    /// a mapping made before the seal could be `mprotect`ed writable after
    /// it. `Ok(false)`: another process still maps it; copy instead.
    ///
    /// A pool block cannot be sealed (a seal covers the whole memfd): it is
    /// marked shared, and the transfer's rights bring every mapping of it
    /// here down to read-only (`sync_map`); see `pool` for whom that binds.
    pub fn seal(&mut self, b: &Block) -> Result<bool, CoshError> {
        let Some(fd) = b.fd() else {
            b.mark_shared();
            return Ok(true);
        };
        if b.sealed() {
            return Ok(true);
        }
        self.maps.retain(|(_, id), _| *id != b.id);
        match sys::seal_write(fd) {
            Ok(()) => {
                b.sealed.store(true, Ordering::Relaxed);
                b.mark_shared();
                Ok(true)
            }
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                self.stats.seal_fallbacks += 1;
                Ok(false)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The mapping of `b` in `d`, if any.
    pub fn mapping(&self, d: DomainId, b: BlockId) -> Option<&Map> {
        self.maps.get(&(d, b))
    }

    pub fn mapping_mut(&mut self, d: DomainId, b: BlockId) -> Option<&mut Map> {
        self.maps.get_mut(&(d, b))
    }

    /// Make `d`'s mapping of `b` match `want` rights: none, read-only or
    /// read/write. A mapping with more than `want` stays only if `keep_more`
    /// (a weak transfer, Cosh §3.3); a missing or weaker one is made anew.
    pub fn sync_map(
        &mut self,
        d: DomainId,
        b: &Block,
        want: crate::Rights,
        keep_more: bool,
    ) -> Result<(), CoshError> {
        use crate::Rights;
        let key = (d, b.id);
        let have = self
            .maps
            .get(&key)
            .map(|m| if m.writable() { Rights::Rw } else { Rights::Ro });
        let have = have.unwrap_or(Rights::None);
        if have == want || (have > want && keep_more) {
            return Ok(());
        }
        // An unsealed block changes protection in place: `mprotect` makes
        // a write fault as surely as a fresh mapping, and costs no page
        // faults afterwards. (A mapping keeps VM_MAYWRITE through
        // `mprotect`, so the kernel would refuse a later seal; `seal`
        // drops every mapping first for that reason.)
        if have > Rights::None && want > Rights::None && !b.sealed() {
            let m = self.maps.get_mut(&key).expect("have > None");
            m.set_writable(want == Rights::Rw)?;
            return Ok(());
        }
        if let Some(m) = self.maps.remove(&key) {
            self.unmap_block(b, m);
        }
        if want > Rights::None {
            let writable = want == Rights::Rw;
            debug_assert!(!(writable && b.sealed()));
            let m = self.map_block(b, writable)?;
            self.maps.insert(key, m);
        }
        Ok(())
    }

    /// Drop every mapping `d` holds (the domain went away).
    pub fn unmap_domain(&mut self, d: DomainId) {
        self.maps.retain(|(dom, _), _| *dom != d);
    }

    /// Called when a holder let go of `b`: if nobody but the table holds
    /// it, unmap it everywhere and return it to the pool (zeroed) or close
    /// it.
    pub fn release(&mut self, b: Arc<Block>) {
        let id = b.id;
        drop(b);
        let Some(entry) = self.blocks.get(&id) else {
            return;
        };
        if Arc::strong_count(entry) > 1 {
            return;
        }
        let block = self.blocks.remove(&id).expect("present");
        // Unmap it everywhere, keeping one mapping for reuse.
        let keys: Vec<_> = self
            .maps
            .keys()
            .filter(|(_, b)| *b == id)
            .copied()
            .collect();
        if let ([key], Some(r)) = (keys.as_slice(), block.pool_range()) {
            if self.keeps(&block, r, &self.maps[key]) {
                let m = self.maps.remove(key).expect("listed");
                self.kept_bytes += r.len as usize;
                self.kept.push((r, m));
                return;
            }
        }
        let mut kept = None;
        for k in keys {
            let m = self.maps.remove(&k).expect("listed");
            if block.pool_range().is_some() {
                self.unmap_block(&block, m);
            } else if kept.is_none() && !block.sealed() {
                kept = Some(m);
            }
        }
        if let Some(r) = block.pool_range() {
            // The pool recycles its ranges; ours goes back unless a move
            // took the reference to another process.
            if !block.handed_over.load(Ordering::Relaxed) {
                self.pool.as_ref().expect("a pool block").0.release(r);
            }
            return;
        }
        if !block.imported {
            self.used_units -= self.units(block.len);
        }
        let Ok(block) = Arc::try_unwrap(block) else {
            unreachable!("the table held the last reference");
        };
        let reusable = !block.imported
            && !block.sealed()
            && !block.exported.load(Ordering::Relaxed)
            && self.free.len() < self.cfg.recycle;
        let Backing::Memfd(fd) = block.backing else {
            unreachable!("pool blocks returned above");
        };
        if reusable {
            self.free.push(Free {
                fd,
                len: block.len,
                map: kept,
            });
        }
    }

    /// Whether freed pool block `b` (range `r`, mapped once, by `m`) is
    /// kept for our next allocation: only if no other domain ever held it
    /// (never shared, not handed over: our reference is its only one),
    /// our view is read/write, and the keep is not full. A process keeps
    /// at most 1/64 of the pool, so that what it keeps brings another's
    /// `OutOfMemory` little nearer (its own gives the keep back first).
    fn keeps(&self, b: &Block, r: PoolRef, m: &Map) -> bool {
        let Some((pool, _)) = self.pool.as_ref() else {
            return false;
        };
        let room = self.cfg.pool_keep_bytes.min(pool.data_bytes() / 64);
        !b.handed_over.load(Ordering::Relaxed)
            && !b.shared()
            && !b.sealed()
            && m.writable()
            && !m.hidden()
            && self.kept_bytes + r.len as usize <= room
    }

    /// Give every kept pool block back to the pool, unmapped first so that
    /// no view of ours outlives our hold on the range.
    pub fn give_back_kept(&mut self) {
        let Some((pool, _)) = self.pool.as_ref() else {
            return;
        };
        for (r, m) in self.kept.drain(..) {
            drop(m);
            pool.release(r);
        }
        self.kept_bytes = 0;
    }

    /// Count a transfer sent.
    pub(crate) fn count_transfer(&mut self, mode: Mode, strength: Strength) {
        let i = Mode::ALL.iter().position(|&m| m == mode).expect("mode");
        match strength {
            Strength::Strong => self.stats.transfers_strong[i] += 1,
            Strength::Weak => self.stats.transfers_weak[i] += 1,
        }
    }

    pub(crate) fn stats_mut(&mut self) -> &mut Stats {
        &mut self.stats
    }

    pub(crate) fn count_units(&self, len: usize) -> u64 {
        self.units(len) as u64
    }

    /// The counts as they are now.
    pub fn stats(&self) -> Stats {
        let mut s = self.stats;
        s.block_size = self.cfg.block_size;
        s.capacity_blocks = self.cfg.capacity_blocks;
        s.free_blocks = self.cfg.capacity_blocks - self.used_units;
        s.private_blocks = 0;
        s.shared_blocks = 0;
        s.imported_blocks = 0;
        for b in self.blocks.values() {
            let u = self.units(b.len);
            if b.imported {
                s.imported_blocks += u;
            } else if b.shared() {
                s.shared_blocks += u;
            } else {
                s.private_blocks += u;
            }
        }
        s.kept_bytes = self.kept_bytes;
        s.mappings = self.maps.len();
        let mut mapped: Vec<BlockId> = self.maps.keys().map(|&(_, b)| b).collect();
        mapped.sort_unstable();
        mapped.dedup();
        s.mapped_blocks = mapped
            .iter()
            .filter_map(|b| self.blocks.get(b))
            .map(|b| self.units(b.len))
            .sum();
        s
    }

    /// Every block the table holds (for audits).
    pub fn blocks(&self) -> impl Iterator<Item = &Arc<Block>> {
        self.blocks.values()
    }

    /// Every mapping: domain, block, writable.
    pub fn mappings(&self) -> impl Iterator<Item = (DomainId, BlockId, bool)> + '_ {
        self.maps.iter().map(|(&(d, b), m)| (d, b, m.writable()))
    }
}

impl Drop for BlockManager {
    /// Kept pool blocks are ours alone: the pool gets them back.
    fn drop(&mut self) {
        self.give_back_kept();
    }
}
