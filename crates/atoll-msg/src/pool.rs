//! The root of the buffer cache's block pool: which server owns each block,
//! and the blocks no server owns.
//!
//! The buffer cache is a clustered object in the sense of K42's Global
//! Page Manager (K42 §4.1.2, "Page Managers and the Global Page Manager"):
//! each file server's free list is a *representative* (kept by the server,
//! `atoll-server`'s `blocks` module), and this pool is the *root*, an
//! overflow of blocks no representative holds. A server that runs out takes
//! a batch from the root ([`PoolRep::claim`]); one that holds more free
//! blocks than its high watermark gives the excess back
//! ([`PoolRep::give_back`]). Servers never message each other (Hare
//! §6.2.3), so the root is not a server but memory every server reaches:
//! one ownership word per block, moved only by compare-exchange, the way
//! the metadata gauges of the control block are reserved from (`control`).
//!
//! ```text
//!   owner[b] == FREE ──claim (CAS FREE→s)──▶ owner[b] == s ──give_back (CAS s→FREE)──▶ FREE
//! ```
//!
//! Rules (the whole protocol):
//!
//! * a block moves out of the root only by a successful compare-exchange
//!   `FREE → s`, so two servers can never both claim it;
//! * a block moves back only by `s → FREE`, done by `s` itself, so a
//!   server cannot give away a block it does not own;
//! * each server also keeps its own *record* of the blocks it holds (one
//!   bit per block, written by it alone): set after its claim, cleared
//!   before its return;
//! * a server hands a block to an inode only while `owner[b] == s` and its
//!   record holds `b` ([`PoolRep::holds`]): a block whose word says
//!   anything else (a scribble, a bug) is dropped, never used; the loss is
//!   bounded by the blocks whose words were scribbled;
//! * a claimer that wins a `FREE` word checks the other servers' records:
//!   a holder clears its record before it frees the word, so a record
//!   still set means the `FREE` was scribbled over a block in use, and the
//!   claimer gives the word back to the holder instead of using the block.
//!
//! So a corrupted owner map can lose blocks but never put one block in two
//! servers' files; that would take corrupting a server's record too. Map
//! and records live in a memfd of their own ([`BlockPool::create`],
//! [`BlockPool::map`]), shared by the instance and its file servers, which
//! may be processes of their own; no client maps it (clients map the
//! cache and the control block, which they could scribble, Hare's single
//! fault domain), unlike the gauges, whose scribbling costs at most a limit.
//!
//! The claim path is lock-free; its `loom` models
//! (`loom_pool_claims_are_exclusive`, `loom_pool_return_races_claim`) run
//! with the ring's (`make loom`).
//!
//! Counts: `root_free` is the number of `FREE` words (moved with each
//! successful exchange), and each server publishes its own counters
//! ([`RepCounts`]) — owned, free in its list, taken from and given back to
//! the root — so that `statfs` reports `root + Σ free lists` and
//! `atoll status` shows where the blocks are without asking any server.
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//! use atoll_msg::BlockPool;
//!
//! let pool = Arc::new(BlockPool::new(0, 100, 2));
//! let mut a = BlockPool::rep(&pool, 0).unwrap();
//! let mut b = BlockPool::rep(&pool, 1).unwrap();
//! let mut got = Vec::new();
//! assert_eq!(a.claim(60, &mut got), 60);
//! assert_eq!(b.claim(60, &mut Vec::new()), 40, "only what the root has");
//! assert!(a.holds(got[0]) && !b.holds(got[0]));
//! assert!(a.give_back(got[0]));
//! assert_eq!(pool.root_free(), 1);
//! ```

#[cfg(loom)]
use loom::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
#[cfg(loom)]
use loom::sync::Arc;
#[cfg(not(loom))]
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
#[cfg(not(loom))]
use std::sync::Arc;

use crossbeam_utils::CachePadded;

/// Owner word of a block in the root.
const FREE: u8 = u8::MAX;
/// Most servers a pool serves (owner words are bytes; `FREE` is not one).
pub const POOL_MAX_SERVERS: usize = FREE as usize;

/// One server's published counts (written by that server only, read by
/// anyone; relaxed: they are statistics, not synchronisation).
#[derive(Default)]
#[repr(C)]
struct Published {
    owned: AtomicU64,
    listed: AtomicU64,
    borrowed: AtomicU64,
    returned: AtomicU64,
    dropped: AtomicU64,
    repaired: AtomicU64,
    /// A representative exists for this server (one at most).
    taken: AtomicBool,
}

/// A server's counts as published (see [`PoolRep::publish`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RepCounts {
    /// Blocks whose owner word names the server.
    pub owned: u64,
    /// Of those, blocks free in its list.
    pub listed: u64,
    /// Blocks ever taken from the root.
    pub borrowed: u64,
    /// Blocks ever given back to the root.
    pub returned: u64,
    /// Blocks dropped because their owner word no longer named the server.
    pub dropped: u64,
    /// Scribbled `FREE` words this server found over blocks another server
    /// holds, and gave back to it.
    pub repaired: u64,
}

/// The root: one owner word per block and the count of free ones.
///
/// The words live in a shared mapping (`memory`, outside `loom`), so a
/// server in another process moves the same words; the slices below point
/// into it and never outlive it (private fields, handed out only as
/// borrows of `self`).
pub struct BlockPool {
    /// Block number of `owner[0]`.
    first: u32,
    owner: &'static [AtomicU8],
    /// Per server, one bit per block it holds: its own record, written by
    /// it alone, which a claimer checks so that a `FREE` scribbled over a
    /// held block is given back to its holder, never claimed.
    held: Box<[&'static [AtomicU64]]>,
    root_free: &'static CachePadded<AtomicU64>,
    /// Servers that are members now (`0..members`), published by the
    /// instance as servers join (release; readers acquire). The pool has
    /// room (`reps`, `held`) for more: a server joins without the pool
    /// being made again (Hare §6.1.1). Loops over servers stop here, so a
    /// slot no member uses is never touched (its memory, sparse in the
    /// memfd, is never made).
    members: &'static AtomicU64,
    /// The member count at boot, fixed for the pool's life: what the
    /// watermarks are sized by, so a server's free-list decisions replay
    /// the same after members join (`atoll_server::fs::blocks`).
    boot_members: usize,
    reps: &'static [CachePadded<Published>],
    /// The mapping the slices point into (declared last: dropped last).
    #[cfg(not(loom))]
    _memory: crate::SharedRegion,
}

/// `BlockPool` memory header: magic, first block, blocks, servers.
#[cfg(not(loom))]
const POOL_MAGIC: u64 = 0x6c6f_6f70_6c6c_6f74; // "tollpool"
#[cfg(not(loom))]
const POOL_HEADER: usize = 128;

/// Where each part of a pool's memory starts, for `blocks` and `servers`.
#[cfg(not(loom))]
struct PoolLayout {
    reps: usize,
    held: usize,
    owner: usize,
    len: usize,
}

#[cfg(not(loom))]
impl PoolLayout {
    fn of(blocks: u32, servers: usize) -> PoolLayout {
        let padded = std::mem::size_of::<CachePadded<AtomicU64>>();
        let reps = POOL_HEADER + padded;
        let held = reps + servers * std::mem::size_of::<CachePadded<Published>>();
        let owner = held + servers * blocks.div_ceil(64) as usize * 8;
        PoolLayout {
            reps,
            held,
            owner,
            len: owner + blocks as usize,
        }
    }
}

impl BlockPool {
    /// A pool of blocks `[first, first + blocks)`, all in the root, for
    /// `servers` servers (at most [`POOL_MAX_SERVERS`]), in memory of its
    /// own (see [`BlockPool::create`] for one to share).
    pub fn new(first: u32, blocks: u32, servers: usize) -> BlockPool {
        #[cfg(not(loom))]
        {
            Self::create(first, blocks, servers)
                .expect("memory for a block pool")
                .1
        }
        #[cfg(loom)]
        {
            Self::on_heap(first, blocks, servers)
        }
    }

    #[cfg(loom)]
    fn on_heap(first: u32, blocks: u32, servers: usize) -> BlockPool {
        assert!(
            (1..=POOL_MAX_SERVERS).contains(&servers),
            "a pool serves 1 to {POOL_MAX_SERVERS} servers"
        );
        // Models are short-lived: their pools are leaked.
        let leak = |b: Box<[AtomicU64]>| -> &'static [AtomicU64] { Box::leak(b) };
        BlockPool {
            first,
            owner: Box::leak((0..blocks).map(|_| AtomicU8::new(FREE)).collect()),
            held: (0..servers)
                .map(|_| {
                    leak(
                        (0..blocks.div_ceil(64))
                            .map(|_| AtomicU64::new(0))
                            .collect(),
                    )
                })
                .collect(),
            root_free: Box::leak(Box::new(CachePadded::new(AtomicU64::new(blocks as u64)))),
            members: Box::leak(Box::new(AtomicU64::new(servers as u64))),
            boot_members: servers,
            reps: Box::leak(
                (0..servers)
                    .map(|_| CachePadded::new(Published::default()))
                    .collect(),
            ),
        }
    }

    /// A pool as [`BlockPool::new`] makes, in a memfd that other processes
    /// map with [`BlockPool::map`] (the instance's file servers).
    #[cfg(not(loom))]
    pub fn create(
        first: u32,
        blocks: u32,
        servers: usize,
    ) -> std::io::Result<(std::os::fd::OwnedFd, BlockPool)> {
        Self::create_with_room(first, blocks, servers, servers)
    }

    /// [`BlockPool::create`] for `members` servers now and room for up to
    /// `servers`, who join with [`BlockPool::publish_members`]. The room
    /// costs `servers × blocks / 8` bytes of the memfd (records) plus 128
    /// per server, made only as members use it.
    #[cfg(not(loom))]
    pub fn create_with_room(
        first: u32,
        blocks: u32,
        members: usize,
        servers: usize,
    ) -> std::io::Result<(std::os::fd::OwnedFd, BlockPool)> {
        assert!(
            (1..=POOL_MAX_SERVERS).contains(&servers) && (1..=servers).contains(&members),
            "a pool serves 1 to {POOL_MAX_SERVERS} servers"
        );
        let layout = PoolLayout::of(blocks, servers);
        let (fd, memory) = crate::SharedRegion::create("atoll-pool", layout.len)?;
        let words = memory.as_ptr() as *mut u64;
        // SAFETY: the fresh mapping is page aligned, zeroed and at least
        // `layout.len` bytes; nobody else has it yet. The owner bytes
        // `[layout.owner, layout.len)` lie inside it.
        unsafe {
            words.write_volatile(POOL_MAGIC);
            words.add(1).write_volatile(u64::from(first));
            words.add(2).write_volatile(u64::from(blocks));
            words.add(3).write_volatile(servers as u64);
            words.add(4).write_volatile(members as u64);
            words.add(5).write_volatile(members as u64);
            std::ptr::write_bytes(memory.as_ptr().add(layout.owner), FREE, blocks as usize);
        }
        let pool = Self::over(memory, first, blocks, servers);
        pool.root_free.store(u64::from(blocks), Ordering::Release);
        Ok((fd, pool))
    }

    /// The pool in the memfd `fd` made by [`BlockPool::create`].
    #[cfg(not(loom))]
    pub fn map(fd: std::os::fd::BorrowedFd<'_>) -> std::io::Result<BlockPool> {
        let memory = crate::SharedRegion::map(fd)?;
        let bad = || std::io::Error::new(std::io::ErrorKind::InvalidData, "not a block pool");
        if memory.len() < POOL_HEADER {
            return Err(bad());
        }
        let words = memory.as_ptr() as *const u64;
        // SAFETY: the mapping holds the header (checked above) and is page
        // aligned; the creator wrote it before handing out the memfd.
        let head: [u64; 5] = unsafe { std::array::from_fn(|i| words.add(i).read_volatile()) };
        let (blocks, servers) = (head[2], head[3] as usize);
        if head[0] != POOL_MAGIC
            || blocks > u64::from(u32::MAX)
            || !(1..=POOL_MAX_SERVERS).contains(&servers)
            || !(1..=servers as u64).contains(&head[4])
            || memory.len() < PoolLayout::of(blocks as u32, servers).len
        {
            return Err(bad());
        }
        Ok(Self::over(memory, head[1] as u32, blocks as u32, servers))
    }

    #[cfg(not(loom))]
    fn over(memory: crate::SharedRegion, first: u32, blocks: u32, servers: usize) -> BlockPool {
        let layout = PoolLayout::of(blocks, servers);
        assert!(memory.len() >= layout.len);
        let base = memory.as_ptr();
        let words_per_server = blocks.div_ceil(64) as usize;
        // SAFETY: every slice lies inside the mapping (`layout`, asserted
        // above), at offsets aligned for its type (the mapping is page
        // aligned; `PoolLayout` places padded parts at multiples of their
        // alignment and the bit words at multiples of 8). All-zero bytes
        // are valid for atomics, and the memory is only ever accessed
        // through atomics (header words 4 and 5, within the 128-byte
        // header, included). The `'static` is private: the slices live in
        // `self` beside the mapping, which is dropped after them.
        unsafe {
            BlockPool {
                first,
                owner: std::slice::from_raw_parts(
                    base.add(layout.owner) as *const AtomicU8,
                    blocks as usize,
                ),
                held: (0..servers)
                    .map(|s| {
                        std::slice::from_raw_parts(
                            (base.add(layout.held) as *const AtomicU64).add(s * words_per_server),
                            words_per_server,
                        )
                    })
                    .collect(),
                root_free: &*(base.add(POOL_HEADER) as *const CachePadded<AtomicU64>),
                // Header words 4 and 5 (checked or written by the caller).
                boot_members: (base as *const u64).add(4).read_volatile() as usize,
                members: &*(base as *const AtomicU64).add(5),
                reps: std::slice::from_raw_parts(
                    base.add(layout.reps) as *const CachePadded<Published>,
                    servers,
                ),
                _memory: memory,
            }
        }
    }

    /// Let a new representative of `server` be taken: the one it had lived
    /// in a process that is gone (a file server process that died; its
    /// successor takes over its words, `atoll_server::process`).
    pub fn release_rep(&self, server: usize) {
        if let Some(p) = self.reps.get(server) {
            p.taken.store(false, Ordering::Release);
        }
    }

    /// The representative of `server`: `None` if there is no such server
    /// or it already has one (each server's words are moved by one rep).
    pub fn rep(pool: &Arc<BlockPool>, server: usize) -> Option<PoolRep> {
        // Only a member's: one that has not joined has no rep yet.
        let p = pool.reps.get(server).filter(|_| server < pool.members())?;
        if p.taken.swap(true, Ordering::AcqRel) {
            return None;
        }
        Some(PoolRep {
            pool: pool.clone(),
            me: server as u8,
            // Spread over the members (not the room), as at boot.
            cursor: (pool.blocks() as usize * server / pool.members()) as u32,
        })
    }

    /// Blocks in the pool.
    pub fn blocks(&self) -> u64 {
        self.owner.len() as u64
    }

    /// Servers the pool has room for.
    pub fn servers(&self) -> usize {
        self.reps.len()
    }

    /// Servers that are members now (`0..members`; see the field).
    pub fn members(&self) -> usize {
        (self.members.load(Ordering::Acquire) as usize).clamp(1, self.reps.len())
    }

    /// The member count at boot (fixed).
    pub fn boot_members(&self) -> usize {
        self.boot_members
    }

    /// Servers `0..n` are members from now on (the count only grows):
    /// published before the new members' representatives are taken, with
    /// release, so that a claimer that sees a member checks its record.
    pub fn publish_members(&self, n: usize) {
        self.members
            .fetch_max(n.min(self.reps.len()) as u64, Ordering::AcqRel);
    }

    /// Blocks in the root now (no server owns them).
    pub fn root_free(&self) -> u64 {
        self.root_free.load(Ordering::Relaxed)
    }

    /// What `server` last published.
    pub fn counts(&self, server: usize) -> RepCounts {
        let Some(p) = self.reps.get(server) else {
            return RepCounts::default();
        };
        RepCounts {
            owned: p.owned.load(Ordering::Relaxed),
            listed: p.listed.load(Ordering::Relaxed),
            borrowed: p.borrowed.load(Ordering::Relaxed),
            returned: p.returned.load(Ordering::Relaxed),
            dropped: p.dropped.load(Ordering::Relaxed),
            repaired: p.repaired.load(Ordering::Relaxed),
        }
    }

    /// Free blocks instance-wide: the root plus every server's free list
    /// (what `statfs` reports).
    pub fn free_blocks(&self) -> u64 {
        let listed: u64 = (0..self.members()).map(|s| self.counts(s).listed).sum();
        self.root_free().saturating_add(listed).min(self.blocks())
    }

    fn word(&self, block: u32) -> Option<&AtomicU8> {
        self.owner.get(block.checked_sub(self.first)? as usize)
    }

    /// Whether `server`'s own record says it holds the block at `index`.
    fn records(&self, server: usize, index: usize) -> bool {
        self.held[server][index / 64].load(Ordering::Acquire) & (1 << (index % 64)) != 0
    }

    /// Another server than `me` whose record holds the block at `index`.
    fn recorded_holder(&self, me: usize, index: usize) -> Option<usize> {
        (0..self.members()).find(|&s| s != me && self.records(s, index))
    }

    /// Overwrite the owner word of `block` (tests of a scribbled map).
    #[doc(hidden)]
    pub fn scribble(&self, block: u32, value: u8) {
        if let Some(w) = self.word(block) {
            w.store(value, Ordering::Relaxed);
        }
    }
}

/// One server's handle on the root: the only way to move words to or from
/// that server. Not `Clone`: one per server ([`BlockPool::rep`]).
pub struct PoolRep {
    pool: Arc<BlockPool>,
    me: u8,
    /// Where the next scan for free words starts (private; servers start
    /// apart so that their claims rarely meet on a word).
    cursor: u32,
}

impl PoolRep {
    pub fn pool(&self) -> &Arc<BlockPool> {
        &self.pool
    }

    pub fn server(&self) -> usize {
        self.me as usize
    }

    /// Move up to `want` blocks from the root to this server, appending
    /// them (ascending from where the scan started) to `out`; returns how
    /// many. Lock-free: one compare-exchange per block; a scan of the
    /// whole map only when the root is nearly empty, and none when it is.
    pub fn claim(&mut self, want: usize, out: &mut Vec<u32>) -> usize {
        let pool = &*self.pool;
        let n = pool.owner.len();
        let mut got = 0;
        let mut looked = 0;
        let mut i = self.cursor as usize % n.max(1);
        while got < want && looked < n && pool.root_free() > 0 {
            // Relaxed load first: most words a scan passes are owned.
            let w = &pool.owner[i];
            if w.load(Ordering::Relaxed) == FREE
                && w.compare_exchange(FREE, self.me, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            {
                // A holder clears its record before it frees the word
                // (`give_back`), and the exchange acquired that: a record
                // still set means the `FREE` was scribbled. Give the word
                // back to its holder; never use the block.
                if let Some(holder) = pool.recorded_holder(self.me as usize, i) {
                    let _ = w.compare_exchange(
                        self.me,
                        holder as u8,
                        Ordering::AcqRel,
                        Ordering::Relaxed,
                    );
                    pool.reps[self.me as usize]
                        .repaired
                        .fetch_add(1, Ordering::Relaxed);
                } else {
                    self.record(i, true);
                    saturating_dec(pool.root_free);
                    out.push(pool.first + i as u32);
                    got += 1;
                }
            }
            looked += 1;
            i = if i + 1 == n { 0 } else { i + 1 };
        }
        self.cursor = i as u32;
        let p = &pool.reps[self.me as usize];
        p.borrowed.fetch_add(got as u64, Ordering::Relaxed);
        p.owned.fetch_add(got as u64, Ordering::Relaxed);
        got
    }

    /// Give `block` back to the root. `false` if its word did not name this
    /// server (a scribble): the block is then dropped, neither returned nor
    /// used, because nobody knows who else may be using it.
    pub fn give_back(&mut self, block: u32) -> bool {
        // The record goes first: a claimer that takes the freed word must
        // not find it (the exchange below releases this store).
        if let Some(i) = self.index(block) {
            self.record(i, false);
        }
        let pool = &*self.pool;
        let p = &pool.reps[self.me as usize];
        // Count first, free second: a claimer decrements only after taking
        // a FREE word, so the count never drops below the FREE words.
        pool.root_free.fetch_add(1, Ordering::Relaxed);
        let ok = pool.word(block).is_some_and(|w| {
            w.compare_exchange(self.me, FREE, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        });
        if ok {
            p.returned.fetch_add(1, Ordering::Relaxed);
        } else {
            saturating_dec(pool.root_free);
            p.dropped.fetch_add(1, Ordering::Relaxed);
        }
        saturating_dec(&p.owned);
        ok
    }

    /// Whether `block`'s owner word names this server and its own record
    /// holds it: checked before a block from the free list is handed to an
    /// inode.
    pub fn holds(&self, block: u32) -> bool {
        self.index(block).is_some_and(|i| {
            self.pool.owner[i].load(Ordering::Acquire) == self.me
                && self.pool.records(self.me as usize, i)
        })
    }

    fn index(&self, block: u32) -> Option<usize> {
        let i = block.checked_sub(self.pool.first)? as usize;
        (i < self.pool.owner.len()).then_some(i)
    }

    /// Set or clear this server's record of the block at `index`.
    fn record(&self, index: usize, held: bool) {
        let w = &self.pool.held[self.me as usize][index / 64];
        let bit = 1u64 << (index % 64);
        if held {
            w.fetch_or(bit, Ordering::Release);
        } else {
            w.fetch_and(!bit, Ordering::Release);
        }
    }

    /// `block`, which this server found not to be its own ([`Self::holds`]
    /// was false): forget it (counted, never used or returned).
    pub fn drop_block(&mut self, block: u32) {
        if let Some(i) = self.index(block) {
            self.record(i, false);
        }
        let p = &self.pool.reps[self.me as usize];
        p.dropped.fetch_add(1, Ordering::Relaxed);
        saturating_dec(&p.owned);
    }

    /// Publish how many of this server's blocks are free in its list.
    pub fn publish(&self, listed: u64) {
        self.pool.reps[self.me as usize]
            .listed
            .store(listed, Ordering::Relaxed);
    }

    /// This server's published counts.
    pub fn counts(&self) -> RepCounts {
        self.pool.counts(self.me as usize)
    }
}

/// Subtract one, never below zero (a scribbled word made `FREE` by no
/// server must not wrap the count).
fn saturating_dec(n: &AtomicU64) {
    let _ = n.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
        Some(v.saturating_sub(1))
    });
}

impl Drop for PoolRep {
    fn drop(&mut self) {
        self.pool.reps[self.me as usize]
            .taken
            .store(false, Ordering::Release);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// A pool with room for more servers than are members: a server that
    /// has not joined gets no representative; once the count is published
    /// it does, its free list counts, and a scribbled `FREE` over one of
    /// its blocks goes back to it (its record is checked). The count only
    /// grows, and the boot count (the watermarks' base) stays.
    #[test]
    fn members_join_a_pool_made_with_room() {
        let (fd, pool) = BlockPool::create_with_room(0, 64, 1, 4).unwrap();
        let pool = Arc::new(pool);
        assert_eq!(
            (pool.members(), pool.servers(), pool.boot_members()),
            (1, 4, 1)
        );
        assert!(BlockPool::rep(&pool, 2).is_none(), "not a member yet");
        let mut a = BlockPool::rep(&pool, 0).unwrap();
        pool.publish_members(3);
        pool.publish_members(2);
        assert_eq!(pool.members(), 3, "the count only grows");
        let seen = BlockPool::map(std::os::fd::AsFd::as_fd(&fd)).unwrap();
        assert_eq!((seen.members(), seen.boot_members()), (3, 1), "shared");
        let mut c = BlockPool::rep(&pool, 2).unwrap();
        let mut got = Vec::new();
        assert_eq!(c.claim(4, &mut got), 4);
        c.publish(4);
        assert_eq!(pool.free_blocks(), 64);
        // Scribble FREE over the joined member's block: another claimer
        // must hand it back to it rather than use it.
        pool.scribble(got[0], FREE);
        let mut b = Vec::new();
        while a.claim(1, &mut b) == 1 {}
        assert!(!b.contains(&got[0]));
        assert!(c.holds(got[0]));
        assert_eq!(pool.counts(0).repaired, 1);
    }

    #[test]
    fn claims_never_exceed_the_root_and_counts_follow() {
        let pool = Arc::new(BlockPool::new(10, 50, 3));
        let mut a = BlockPool::rep(&pool, 0).unwrap();
        assert!(BlockPool::rep(&pool, 0).is_none(), "one rep per server");
        assert!(BlockPool::rep(&pool, 3).is_none(), "no such server");
        let mut got = Vec::new();
        assert_eq!(a.claim(20, &mut got), 20);
        assert!(got.iter().all(|&b| (10..60).contains(&b)));
        assert_eq!(pool.root_free(), 30);
        a.publish(20);
        assert_eq!(pool.free_blocks(), 50);
        for &b in &got[..5] {
            assert!(a.give_back(b));
        }
        let c = a.counts();
        assert_eq!((c.owned, c.borrowed, c.returned), (15, 20, 5));
        assert_eq!(pool.root_free(), 35);
        assert!(!a.give_back(9) && !a.give_back(60), "out of range");
    }

    #[test]
    fn a_mapped_pool_moves_the_same_words_and_a_dead_holders_rep_is_released() {
        use std::os::fd::AsFd;
        let (fd, pool) = BlockPool::create(10, 100, 2).unwrap();
        let pool = Arc::new(pool);
        let other = Arc::new(BlockPool::map(fd.as_fd()).unwrap());
        assert_eq!((other.blocks(), other.servers()), (100, 2));
        let mut a = BlockPool::rep(&pool, 0).unwrap();
        let mut got = Vec::new();
        assert_eq!(a.claim(30, &mut got), 30);
        assert_eq!(other.root_free(), 70, "the other mapping sees the claim");
        let mut b = BlockPool::rep(&other, 1).unwrap();
        let mut theirs = Vec::new();
        assert_eq!(b.claim(100, &mut theirs), 70, "never a block twice");
        assert!(got.iter().all(|g| !theirs.contains(g)));
        // Server 0's process dies holding its rep: its successor, in
        // another mapping, may take it once released, and holds its blocks.
        std::mem::forget(a);
        assert!(BlockPool::rep(&other, 0).is_none());
        other.release_rep(0);
        let a2 = BlockPool::rep(&other, 0).unwrap();
        assert!(a2.holds(got[0]));
        let (plain, _) = crate::SharedRegion::create("not-a-pool", 4096).unwrap();
        assert!(BlockPool::map(plain.as_fd()).is_err());
    }

    #[test]
    fn a_server_cannot_give_back_or_hold_another_servers_block() {
        let pool = Arc::new(BlockPool::new(0, 8, 2));
        let mut a = BlockPool::rep(&pool, 0).unwrap();
        let mut b = BlockPool::rep(&pool, 1).unwrap();
        let mut got = Vec::new();
        a.claim(8, &mut got);
        assert_eq!(b.claim(1, &mut Vec::new()), 0, "the root is empty");
        assert!(!b.holds(got[0]));
        assert!(!b.give_back(got[0]), "not b's to give");
        assert!(a.holds(got[0]), "still a's");
        assert_eq!(pool.root_free(), 0);
    }

    #[test]
    fn scribbled_owner_words_are_dropped_never_shared() {
        let pool = Arc::new(BlockPool::new(0, 16, 2));
        let mut a = BlockPool::rep(&pool, 0).unwrap();
        let mut b = BlockPool::rep(&pool, 1).unwrap();
        let mut mine = Vec::new();
        a.claim(8, &mut mine);
        // Scribbles: one of a's blocks now names b, one names nobody real.
        pool.scribble(mine[0], 1);
        pool.scribble(mine[1], 200);
        assert!(!a.holds(mine[0]) && !a.holds(mine[1]));
        // b's claims only ever take FREE words, so neither block.
        let mut theirs = Vec::new();
        b.claim(16, &mut theirs);
        assert_eq!(theirs.len(), 8);
        assert!(theirs.iter().all(|t| !mine.contains(t)));
        assert!(!a.give_back(mine[1]));
        assert_eq!(a.counts().dropped, 1);
    }

    #[test]
    fn a_free_scribbled_over_a_held_block_goes_back_to_its_holder() {
        let pool = Arc::new(BlockPool::new(0, 16, 3));
        let mut a = BlockPool::rep(&pool, 0).unwrap();
        let mut b = BlockPool::rep(&pool, 1).unwrap();
        let mut mine = Vec::new();
        a.claim(4, &mut mine);
        for &x in &mine {
            pool.scribble(x, FREE);
        }
        let mut theirs = Vec::new();
        b.claim(16, &mut theirs);
        assert_eq!(theirs.len(), 12);
        assert!(theirs.iter().all(|t| !mine.contains(t)));
        assert!(mine.iter().all(|&x| a.holds(x)), "repaired to a");
        assert_eq!(b.counts().repaired, 4);
        // And a returns them as ever.
        assert!(mine.iter().all(|&x| a.give_back(x)));
        assert_eq!(pool.root_free(), 4);
    }

    #[test]
    fn concurrent_claims_and_returns_never_hand_out_a_block_twice() {
        let pool = Arc::new(BlockPool::new(0, 512, 4));
        let held: Vec<Vec<u32>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4)
                .map(|i| {
                    let mut r = BlockPool::rep(&pool, i).unwrap();
                    s.spawn(move || {
                        let mut mine = Vec::new();
                        for round in 0..200 {
                            r.claim(7, &mut mine);
                            for _ in 0..(round % 5) {
                                if let Some(b) = mine.pop() {
                                    assert!(r.give_back(b));
                                }
                            }
                            for &b in &mine {
                                assert!(r.holds(b), "a held block moved away");
                            }
                        }
                        mine
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut seen = HashSet::new();
        for b in held.iter().flatten() {
            assert!(seen.insert(*b), "block {b} held twice");
        }
        assert_eq!(pool.root_free() as usize + seen.len(), 512);
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;

    /// Two servers claiming every block of a two-block root at once: no
    /// block ends with both, and none is lost from the count.
    #[test]
    fn loom_pool_claims_are_exclusive() {
        loom::model(|| {
            let pool = Arc::new(BlockPool::new(0, 2, 2));
            let mut a = BlockPool::rep(&pool, 0).unwrap();
            let mut b = BlockPool::rep(&pool, 1).unwrap();
            let ta = loom::thread::spawn(move || {
                let mut v = Vec::new();
                a.claim(2, &mut v);
                v
            });
            let mut vb = Vec::new();
            b.claim(2, &mut vb);
            let va = ta.join().unwrap();
            for x in &va {
                assert!(!vb.contains(x), "block {x} claimed twice");
            }
            assert_eq!(va.len() + vb.len() + pool.root_free() as usize, 2);
        });
    }

    /// A claim racing a return: the returned block is claimed at most
    /// once, the other server's held block never, and `root_free` ends
    /// equal to the free words.
    #[test]
    fn loom_pool_return_races_claim() {
        loom::model(|| {
            let pool = Arc::new(BlockPool::new(0, 2, 2));
            let mut a = BlockPool::rep(&pool, 0).unwrap();
            let mut b = BlockPool::rep(&pool, 1).unwrap();
            let mut held = Vec::new();
            a.claim(2, &mut held);
            let tb = loom::thread::spawn(move || {
                let mut v = Vec::new();
                b.claim(2, &mut v);
                v
            });
            assert!(a.give_back(held[0]));
            let vb = tb.join().unwrap();
            assert!(!vb.contains(&held[1]), "a's held block taken");
            assert!(a.holds(held[1]));
            assert_eq!(vb.len() + pool.root_free() as usize, 1);
            // A return ordered before the claim is never taken for a
            // scribble (the record is cleared before the word is freed).
            assert_eq!(pool.counts(1).repaired, 0);
        });
    }
}
