//! One server's representative of the buffer cache's block pool: its free
//! list, and the rules by which it borrows from and returns to the root.
//!
//! The buffer cache is a clustered object shaped like K42's Global Page
//! Manager (K42 §4.1.2): per-server free lists are the representatives,
//! `atoll_msg::BlockPool` is the root (an overflow pool of blocks no server
//! owns, one owner word per block moved by compare-exchange). A fixed
//! split of `--memory` among servers made one server answer `ENOSPC` while
//! others had room, and since all entries of a plain directory live on its
//! home server (Hare §3.4) that happened at half the memory with two
//! servers. Servers never message each other (Hare §6.2.3), so there is no
//! block manager to ask: a server takes from the root itself, as it
//! reserves from the metadata gauges (`limits`).
//!
//! Life of a block (this server's view):
//!
//! ```text
//!   root ──claim (batch)──▶ free list ──alloc (zeroed)──▶ inode / pipe ring
//!     ▲                        ▲   │                           │
//!     └──settle: above `high`──┘   └──────── free ◀────────────┘
//! ```
//!
//! * **Low watermark**: the list is empty when an allocation comes; the
//!   server claims `batch` blocks (or what a request needs, [`Cache::reserve`]).
//! * **High watermark**: after every request the server *settles*
//!   ([`Cache::settle`], called where the gauges are settled); a list
//!   longer than `high` gives back all but `batch` blocks. So an idle
//!   server keeps at most `high` free blocks, and `ENOSPC` comes only when
//!   the root is empty and every other server holds at most `high`: with
//!   `high ≤ blocks / (128 × servers)` that is within 1 % of `--memory`.
//! * Blocks held for open-but-truncated files (`Inode::deferred`), for
//!   mappings (`Inode::pinned`) and by pipe rings are not on the list:
//!   they stay this server's until freed, and no other server can claim
//!   them, since their owner words name this server.
//! * **Zeroing ahead**: a server with nothing to serve zeroes listed
//!   blocks ([`Cache::prezero_one`]) so that `alloc` need not, on a
//!   writer's time; which block `alloc` takes never depends on it.
//! * **Validation**: before a listed block goes to an inode its owner word
//!   must still name this server (and the server's own record hold it); a
//!   block whose word says otherwise is dropped (counted, never used or
//!   returned), so a scribbled word costs at most that block, and a `FREE`
//!   scribbled over a block in use is given back to its holder by whoever
//!   claims it (`atoll_msg::BlockPool`).
//!
//! Counts the server publishes (`atoll status`, `statfs`): blocks owned,
//! free in the list, borrowed from and returned to the root; `statfs`
//! reports the instance's blocks and, as free, the root plus every list
//! (from server 0 only, so the client's sum over servers is right).

use std::sync::Arc;

use atoll_msg::{BlockPool, PoolRep, RepCounts};
use atoll_proto::BLOCK_SIZE;

use super::tape::{self, Tag};
use crate::store::BlockStore;

/// Most free blocks a server keeps at its high watermark.
const MAX_HIGH: u64 = 256;
/// Fewest (tiny instances; the 1 % bound then does not hold).
const MIN_HIGH: u64 = 8;

/// Free blocks a server keeps after settling for a pool of `blocks`
/// shared by `servers`: `(high, batch)`.
pub fn watermarks(blocks: u64, servers: usize) -> (usize, usize) {
    let high = (blocks / (128 * servers.max(1) as u64)).clamp(MIN_HIGH, MAX_HIGH);
    (high as usize, (high / 2).max(1) as usize)
}

/// This server's blocks: its free list, its handle on the root, and a way
/// to touch block contents. Owned by the server thread alone.
pub struct Cache<S> {
    /// Free blocks this server owns; `pop` hands out the next one.
    free: Vec<u32>,
    pub store: S,
    rep: PoolRep,
    high: usize,
    batch: usize,
    /// Where claims are noted while a request is served (a server
    /// process: `Journal::note_claimed`), so its successor gives back
    /// what a request killed before its record had claimed.
    claims: Option<std::sync::Arc<crate::journal::Journal>>,
    /// Blocks on `free` that hold zeros already (one bit per block
    /// number): zeroed by [`Cache::prezero_one`] while the server had
    /// nothing to serve, so [`Cache::alloc`] hands them out without
    /// zeroing on the requester's time. A bit is set only for a block on
    /// `free` and cleared whenever the block leaves it, so a set bit
    /// always means "on the list, and all zeros". Not in snapshots: a
    /// rebuilt server starts with none and zeroes as before.
    zeroed: Vec<u64>,
}

impl<S: BlockStore> Cache<S> {
    /// The representative of `rep`'s server, starting empty (everything is
    /// in the root until claimed).
    pub fn new(rep: PoolRep, store: S) -> Cache<S> {
        // Sized by the boot member count, fixed for the instance's life, so
        // a replay keeps the same lists after members joined.
        let (high, batch) = watermarks(rep.pool().blocks(), rep.pool().boot_members());
        Cache {
            free: Vec::new(),
            store,
            rep,
            high,
            batch,
            claims: None,
            zeroed: Vec::new(),
        }
    }

    /// Note every claim from the pool in `journal` from now on
    /// (`Journal::note_claimed`; a server process).
    pub fn note_claims_in(&mut self, journal: std::sync::Arc<crate::journal::Journal>) {
        self.claims = Some(journal);
    }

    /// A pool of its own over blocks `[first, first + n)` (a server alone,
    /// unit tests).
    pub fn private(first: u32, n: u32, store: S) -> Cache<S> {
        let pool = Arc::new(BlockPool::new(first, n, 1));
        let rep = BlockPool::rep(&pool, 0).expect("a fresh pool has a rep for server 0");
        Cache::new(rep, store)
    }

    /// Blocks this server owns and uses (files, parked, pinned, rings).
    pub fn used(&self) -> u64 {
        self.rep
            .counts()
            .owned
            .saturating_sub(self.free.len() as u64)
    }

    /// What this server published, with its list as it is now.
    pub fn counts(&self) -> RepCounts {
        RepCounts {
            listed: self.free.len() as u64,
            ..self.rep.counts()
        }
    }

    /// The block fields of `atoll status` (the rest left default).
    pub fn stats(&self) -> atoll_proto::ServerStats {
        let c = self.counts();
        atoll_proto::ServerStats {
            blocks_used: self.used(),
            blocks_total: c.owned,
            blocks_free: c.listed,
            blocks_borrowed: c.borrowed,
            blocks_returned: c.returned,
            blocks_dropped: c.dropped,
            blocks_repaired: c.repaired,
            root_free_blocks: self.pool().root_free(),
            instance_blocks: self.pool().blocks(),
            ..Default::default()
        }
    }

    /// The pool all servers share.
    pub fn pool(&self) -> &BlockPool {
        self.rep.pool()
    }

    /// The free list itself (tests compare rebuilt servers by it).
    #[cfg(test)]
    pub fn free_list(&self) -> &[u32] {
        &self.free
    }

    /// The free list, for a snapshot (`fs::image`).
    pub fn free_blocks(&self) -> Vec<u32> {
        self.free.clone()
    }

    /// Take the free list of a snapshot: these blocks' owner words name
    /// this server already (the lost server claimed them).
    pub fn set_free_blocks(&mut self, free: Vec<u32>) {
        self.free = free;
        self.zeroed.clear();
    }

    /// Free blocks on this server's list right now.
    pub fn listed(&self) -> usize {
        self.free.len()
    }

    /// `(blocks, free)` for `statfs`, instance-wide.
    pub fn statfs(&self) -> (u64, u64) {
        let pool = self.rep.pool();
        // This server's list as it is now, not as last published.
        let others: u64 = (0..pool.members())
            .filter(|&s| s != self.rep.server())
            .map(|s| pool.counts(s).listed)
            .sum();
        let free = pool.root_free() + others + self.free.len() as u64;
        (pool.blocks(), free.min(pool.blocks()))
    }

    /// `(blocks, share)`: the pool's blocks, and this server's share of
    /// the free ones — its list now, less what it took from the root and
    /// has not given back. The root starts with every block and moves
    /// only by claims and returns, so [`Cache::statfs`]'s free count is
    /// `blocks + Σ share` over the members (`Control::publish_space`).
    pub fn space(&self) -> (u64, i64) {
        let c = self.rep.counts();
        let share = self.free.len() as i64 - c.borrowed as i64 + c.returned as i64;
        (self.pool().blocks(), share)
    }

    /// Claim from the root until the list holds `n` blocks; whether it
    /// does (it may hold more or fewer either way).
    ///
    /// Taped (`tape`): a replay gets the blocks the live claim got, and
    /// claims nothing (the pool's words already name this server).
    pub fn reserve(&mut self, n: usize) -> bool {
        let short = n.saturating_sub(self.free.len());
        if short > 0 {
            let root_free = self.pool().root_free();
            if !tape::flag(Tag::PoolRoom, || short as u64 <= root_free) {
                return false;
            }
            let want = (n - self.free.len()).max(self.batch);
            let mut got = Vec::with_capacity(want);
            let replaying = tape::replaying();
            let rep = &mut self.rep;
            let count = tape::value(Tag::PoolClaim, || {
                if !replaying {
                    rep.claim(want, &mut got);
                }
                got.len() as u64
            });
            if replaying {
                got = (0..count)
                    .map(|_| tape::value(Tag::PoolBlock, || 0) as u32)
                    .collect();
            } else {
                for &b in &got {
                    tape::value(Tag::PoolBlock, || u64::from(b));
                }
                if let Some(j) = &self.claims {
                    j.note_claimed(&got);
                }
            }
            // Whatever a block held when it went back to the root, it is
            // not known to be zeros now.
            for &b in &got {
                self.unmark(b);
            }
            // Reversed so that `pop` hands out ascending blocks, which
            // lets consecutive allocations merge into one extent.
            self.free.extend(got.into_iter().rev());
        }
        self.free.len() >= n
    }

    /// A block of this server's, not zeroed, from the list or the root;
    /// `None` when the instance's memory is all in use.
    pub fn take(&mut self) -> Option<u32> {
        self.take_noting_zeros().map(|(b, _)| b)
    }

    /// [`Cache::take`], and whether the block holds zeros already.
    ///
    /// Which block comes out does not depend on the zero bits (they are
    /// set outside requests, at times a replay cannot repeat): only
    /// whether it gets zeroed does, and a replay zeroes nothing anyway.
    fn take_noting_zeros(&mut self) -> Option<(u32, bool)> {
        loop {
            if self.free.is_empty() && !self.reserve(1) {
                return None;
            }
            let b = self.free.pop()?;
            let zeros = self.unmark(b);
            let rep = &self.rep;
            if tape::flag(Tag::PoolHolds, || rep.holds(b)) {
                return Some((b, zeros));
            }
            if !tape::replaying() {
                self.rep.drop_block(b);
            }
        }
    }

    /// A zeroed block, preferring `deferred` (the inode's own parked blocks).
    /// Hot path (every write that backs a hole): two loads to validate the
    /// block, a claim from the root once per `batch` blocks, and the
    /// zeroing only for a block not zeroed ahead ([`Cache::prezero_one`]).
    pub fn alloc(&mut self, deferred: &mut Vec<u32>) -> Option<u32> {
        let (b, zeros) = match deferred.pop() {
            Some(b) => (b, false),
            None => self.take_noting_zeros()?,
        };
        if !zeros {
            self.store.zero(b, 0, BLOCK_SIZE);
        }
        Some(b)
    }

    /// `block` is free again (it stays this server's until settled back).
    pub fn release(&mut self, block: u32) {
        self.unmark(block);
        self.free.push(block);
    }

    pub fn release_all(&mut self, blocks: impl IntoIterator<Item = u32>) {
        for b in blocks {
            self.release(b);
        }
    }

    /// Zero one listed block not zeroed yet, among the next `high` to be
    /// handed out; whether there was one. For a server with nothing to
    /// serve: a fresh block's first touch makes the kernel allocate and
    /// clear its page (`shmem_fault`), which took about a quarter of the
    /// server's time in `tar xf` when it happened inside `Write`, with the
    /// writer waiting. One block (4 KiB, a few µs at most) per call, so a
    /// request that comes meanwhile waits no longer than that.
    ///
    /// Outside requests, so untaped: it moves no block and changes nothing
    /// a replay must repeat. A block whose owner word no longer names this
    /// server is skipped (`take` drops it when its turn comes).
    pub fn prezero_one(&mut self) -> bool {
        if tape::replaying() {
            return false;
        }
        let next = self
            .free
            .iter()
            .rev()
            .take(self.high)
            .copied()
            .find(|&b| !self.is_marked(b) && self.rep.holds(b));
        let Some(b) = next else {
            return false;
        };
        self.store.zero(b, 0, BLOCK_SIZE);
        self.mark(b);
        true
    }

    fn is_marked(&self, b: u32) -> bool {
        let (w, bit) = (b as usize / 64, b % 64);
        self.zeroed.get(w).is_some_and(|x| x & (1 << bit) != 0)
    }

    fn mark(&mut self, b: u32) {
        let (w, bit) = (b as usize / 64, b % 64);
        if self.zeroed.len() <= w {
            self.zeroed.resize(w + 1, 0);
        }
        self.zeroed[w] |= 1 << bit;
    }

    /// Clear `b`'s bit; whether it was set.
    fn unmark(&mut self, b: u32) -> bool {
        let (w, bit) = (b as usize / 64, b % 64);
        match self.zeroed.get_mut(w) {
            Some(x) if *x & (1 << bit) != 0 => {
                *x &= !(1 << bit);
                true
            }
            _ => false,
        }
    }

    /// After every request: give back what exceeds the high watermark,
    /// keeping `batch`, and publish the list's length. Hot path: one
    /// comparison and one relaxed store unless the list is long.
    pub fn settle(&mut self) {
        // A replay pops the same blocks, which went back to the root long
        // ago (and may be another server's now): it must not return them.
        let replaying = tape::replaying();
        if self.free.len() > self.high {
            while self.free.len() > self.batch {
                if let Some(b) = self.free.pop() {
                    self.unmark(b);
                    if !replaying {
                        self.rep.give_back(b);
                    }
                }
            }
        }
        if !replaying {
            self.rep.publish(self.free.len() as u64);
        }
    }

    /// Drop from the list every block the pool no longer says is this
    /// server's. A server process killed inside a request may have given
    /// blocks back (`settle`) that its journal, which ends before that
    /// request, still lists; a successor that kept them could claim one
    /// from the root again and hand it out twice. Taped: a replay drops
    /// the same ones.
    pub fn reconcile(&mut self) {
        let rep = &self.rep;
        self.free
            .retain(|&b| tape::flag(Tag::PoolHolds, || rep.holds(b)));
        // Rare (a successor's start): forget which were zeroed.
        self.zeroed.clear();
        if !tape::replaying() {
            self.rep.publish(self.free.len() as u64);
        }
    }

    /// Give `blocks` back to the root: what a request that died half way
    /// had claimed (`tape::taken`), which the rebuilt server never heard of.
    pub fn give_back(&mut self, blocks: &[u32]) {
        for &b in blocks {
            if self.rep.holds(b) && !self.free.contains(&b) {
                self.rep.give_back(b);
            }
        }
    }
}

impl<S: BlockStore> super::FileServer<S> {
    /// Idle work for the server loop: zero one free block ahead of need
    /// ([`Cache::prezero_one`]); whether there was one.
    pub fn prezero_one(&mut self) -> bool {
        self.cache.prezero_one()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemStore;
    use std::collections::HashSet;

    fn pair(blocks: u32) -> (Arc<BlockPool>, Cache<MemStore>, Cache<MemStore>) {
        let pool = Arc::new(BlockPool::new(0, blocks, 2));
        let a = Cache::new(BlockPool::rep(&pool, 0).unwrap(), MemStore::new(0));
        let b = Cache::new(BlockPool::rep(&pool, 1).unwrap(), MemStore::new(0));
        (pool, a, b)
    }

    fn all_zero(c: &Cache<MemStore>, b: u32) -> bool {
        let mut buf = vec![1u8; BLOCK_SIZE];
        c.store.read(b, 0, &mut buf);
        buf.iter().all(|&x| x == 0)
    }

    #[test]
    fn blocks_zeroed_ahead_are_handed_out_zeroed_and_dirty_ones_are_zeroed_on_alloc() {
        let mut c = Cache::private(0, 64, MemStore::new(64));
        assert!(c.reserve(4));
        let listed: Vec<u32> = c.free_list().to_vec();
        for &b in &listed {
            c.store.fill(b, 0xaa);
        }
        // Idle work zeroes each listed block once, then has nothing to do
        // (the server loop must not spin on it).
        let mut zeroed = 0;
        while c.prezero_one() {
            zeroed += 1;
            assert!(zeroed <= listed.len(), "prezero keeps finding work");
        }
        assert_eq!(zeroed, listed.len().min(c.high));
        assert!(listed.iter().all(|&b| all_zero(&c, b)));
        // A block handed out zeroed ahead, then dirtied and freed again,
        // must be zeroed when it is handed out next: freeing forgets it.
        let b = c.alloc(&mut Vec::new()).unwrap();
        assert!(all_zero(&c, b));
        c.store.fill(b, 0x55);
        c.release(b);
        let again = c.alloc(&mut Vec::new()).unwrap();
        assert_eq!(again, b, "the list is a stack");
        assert!(all_zero(&c, again));
        // So is one taken raw (pipes write it themselves).
        let t = c.take().unwrap();
        c.store.fill(t, 0x77);
        c.release_all([t]);
        let next = c.alloc(&mut Vec::new()).unwrap();
        assert_eq!(next, t);
        assert!(all_zero(&c, next));
    }

    #[test]
    fn watermarks_keep_the_unusable_rest_within_one_percent() {
        for (blocks, servers) in [(16384u64, 4usize), (16384, 5), (65536, 2), (1 << 20, 64)] {
            let (high, batch) = watermarks(blocks, servers);
            assert!(batch <= high);
            assert!(
                ((servers - 1) * high) as u64 * 100 <= blocks,
                "{blocks}/{servers}"
            );
        }
    }

    #[test]
    fn one_server_can_use_every_block_and_the_other_gets_them_back() {
        let (pool, mut a, mut b) = pair(1000);
        let mut mine = Vec::new();
        while let Some(x) = a.take() {
            mine.push(x);
        }
        assert_eq!(mine.len(), 1000, "all of it, not half");
        assert_eq!(b.take(), None);
        a.settle();
        assert_eq!(a.statfs(), (1000, 0));
        // a deletes everything; settling returns all but a batch.
        a.release_all(mine.drain(..));
        a.settle();
        assert!(a.listed() <= a.batch);
        assert_eq!(pool.root_free() as usize + a.listed(), 1000);
        assert_eq!(b.statfs(), (1000, 1000));
        let mut theirs = 0;
        while b.take().is_some() {
            theirs += 1;
        }
        assert_eq!(theirs, 1000 - a.listed(), "what a kept is a's alone");
        let c = b.counts();
        assert_eq!(c.borrowed, theirs as u64);
        assert!(a.counts().returned >= 1000 - a.batch as u64);
    }

    /// What the servers publish for `statfs` (`Cache::space`) sums to
    /// what a server's `statfs` answers, through claims by both, frees,
    /// and returns to the root.
    #[test]
    fn published_shares_sum_to_statfs() {
        let (_pool, mut a, mut b) = pair(1000);
        let sum = |a: &Cache<_>, b: &Cache<_>| {
            let ((blocks, sa), (_, sb)) = (a.space(), b.space());
            (blocks, (blocks as i64 + sa + sb) as u64)
        };
        assert_eq!(sum(&a, &b), (1000, 1000));
        let mut mine = Vec::new();
        for _ in 0..700 {
            mine.push(a.take().unwrap());
        }
        let theirs: Vec<u32> = (0..200).map(|_| b.take().unwrap()).collect();
        a.settle();
        b.settle();
        assert_eq!(sum(&a, &b), a.statfs());
        assert_eq!(sum(&a, &b), (1000, 100));
        a.release_all(mine.drain(..));
        b.release_all(theirs);
        a.settle();
        b.settle();
        assert_eq!(sum(&a, &b), (1000, 1000));
        assert_eq!(sum(&a, &b), b.statfs());
    }

    #[test]
    fn a_scribbled_owner_word_makes_a_block_dropped_not_shared() {
        let (pool, mut a, mut b) = pair(64);
        assert!(a.reserve(8));
        let listed: Vec<u32> = a.free.clone();
        // Every listed block of a now claims to be b's.
        for &x in &listed {
            pool.scribble(x, 1);
        }
        let mut handed_a = HashSet::new();
        while let Some(x) = a.take() {
            handed_a.insert(x);
        }
        let mut handed_b = HashSet::new();
        while let Some(x) = b.take() {
            handed_b.insert(x);
        }
        assert!(handed_a.is_disjoint(&handed_b));
        assert!(listed.iter().all(|x| !handed_a.contains(x)));
        assert!(listed.iter().all(|x| !handed_b.contains(x)));
        assert_eq!(a.counts().dropped, 8);
        assert_eq!(handed_a.len() + handed_b.len(), 64 - 8, "bounded loss");
    }

    #[test]
    fn free_scribbled_over_a_block_in_a_file_is_given_back_not_claimed() {
        let (pool, mut a, mut b) = pair(64);
        let in_file = a.take().unwrap();
        a.settle();
        // The word of a block one of a's files uses now says FREE.
        pool.scribble(in_file, u8::MAX);
        let mut handed_b = Vec::new();
        while let Some(x) = b.take() {
            handed_b.push(x);
        }
        assert!(!handed_b.contains(&in_file), "b took a block a uses");
        assert!(a.rep.holds(in_file), "the word names a again");
        assert_eq!(b.counts().repaired, 1);
    }

    #[test]
    fn settling_below_the_high_watermark_keeps_the_list() {
        let (pool, mut a, _b) = pair(10_000);
        assert!(a.reserve(a.high));
        let n = a.listed();
        a.settle();
        assert_eq!(a.listed(), n);
        assert_eq!(pool.free_blocks(), 10_000);
    }
}
