//! Hot directories: which directories this server sees the most name
//! operations in (lookups, creations, unlinks, renames, readdir), for
//! `atoll top`'s directory pane.
//!
//! How it works: a space-saving sketch (Metwally et al., "Efficient
//! computation of frequent and top-k elements in data streams", 2005) of
//! [`SLOTS`] slots in a fixed array. An operation on a directory that has a
//! slot adds one to it; one on a directory without a slot takes a free
//! slot or, when all are taken, the slot with the smallest score, and
//! inherits that score. Any directory that gets more than `1/SLOTS` of the
//! operations since the scores were last halved therefore holds a slot.
//! Scores are halved every [`DECAY_EVERY`] operations so that directories
//! hot an hour ago give their places to the ones hot now.
//!
//! Cost on the hot path ([`HotDirs::record`], called once per request): a
//! scan of [`SLOTS`] inode ids in one array (no hashing, no allocation
//! ever), and a pass over the slots every [`DECAY_EVERY`] operations.
//!
//! What is reported ([`HotDirs::report`]): per slot an operation count
//! that only grows while the directory keeps its slot (the score is only
//! for eviction), so `top` turns two snapshots into a rate. Names are not
//! kept here: [`FileServer::dir_names`] looks them up in the shards when
//! `atoll status` asks, off the hot path.

use std::collections::BTreeMap;

use atoll_proto::{DirName, HotDir, InodeId, Request, ROOT};

use super::FileServer;

/// Directories tracked per server. Small, because the whole array is
/// scanned per operation and reported in every status snapshot.
pub const SLOTS: usize = 16;
/// Operations between two halvings of the scores.
pub const DECAY_EVERY: u32 = 1 << 14;
/// Directories reported per server (the busiest of the slots).
pub const REPORTED: usize = 8;

#[derive(Clone, Copy, Default, Debug, serde::Serialize, serde::Deserialize)]
struct Slot {
    /// Zero when the slot is free (no directory has id 0).
    dir: u64,
    /// Eviction score: operations, halved every `DECAY_EVERY`.
    score: u32,
    /// Operations since this directory took the slot (reported).
    ops: u64,
}

/// The sketch. Owned by one server thread, like the rest of its state.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct HotDirs {
    slots: [Slot; SLOTS],
    until_decay: u32,
}

impl Default for HotDirs {
    fn default() -> Self {
        HotDirs {
            slots: [Slot::default(); SLOTS],
            until_decay: DECAY_EVERY,
        }
    }
}

/// The directory a request names entries of, if it is a name operation.
/// A rename counts in its source directory (the destination sees its own
/// `Link` when it is on another server).
fn dir_of(req: &Request<'_>) -> Option<InodeId> {
    match req {
        Request::ReadDir { dir, .. } => Some(*dir),
        _ => super::adapt::namespace_dir(req),
    }
}

impl HotDirs {
    /// Count `req` if it is a name operation in a directory. Hot path.
    #[inline]
    pub fn record(&mut self, req: &Request<'_>) {
        if let Some(dir) = dir_of(req) {
            self.add(dir.0);
        }
    }

    /// One operation in directory `dir`.
    pub fn add(&mut self, dir: u64) {
        self.until_decay -= 1;
        if self.until_decay == 0 {
            self.until_decay = DECAY_EVERY;
            for s in &mut self.slots {
                s.score /= 2;
            }
        }
        // Find the directory's slot and, on the way, the one to give up
        // (a free slot scores 0, so it is taken first).
        let (mut low, mut low_score) = (0, u32::MAX);
        for (i, s) in self.slots.iter_mut().enumerate() {
            if s.dir == dir {
                s.score = s.score.saturating_add(1);
                s.ops += 1;
                return;
            }
            if s.score < low_score {
                (low, low_score) = (i, s.score);
            }
        }
        // Space-saving: the newcomer inherits the evicted score, an upper
        // bound of what it may have had before.
        self.slots[low] = Slot {
            dir,
            score: low_score.saturating_add(1),
            ops: 1,
        };
    }

    /// The busiest tracked directories (by score, most first), at most
    /// [`REPORTED`].
    pub fn report(&self) -> Vec<HotDir> {
        let mut v: Vec<&Slot> = self.slots.iter().filter(|s| s.dir != 0).collect();
        v.sort_by(|a, b| b.score.cmp(&a.score).then(a.dir.cmp(&b.dir)));
        v.into_iter()
            .take(REPORTED)
            .map(|s| HotDir {
                ino: s.dir,
                ops: s.ops,
                distributed: InodeId(s.dir).is_distributed(),
            })
            .collect()
    }
}

impl<S> FileServer<S> {
    /// This server's hot directories (see [`HotDirs::report`]).
    pub fn hot_dirs(&self) -> Vec<HotDir> {
        // The mode a swap may have changed since the directory was made
        // (the id says only the first one).
        let mut v = self.hot.report();
        for d in &mut v {
            d.distributed = self.adapt.distributed(InodeId(d.ino));
        }
        v
    }

    /// What this server knows of the names of directories `dirs`, each
    /// with its parent when the asker knows it: the parent (recorded in
    /// the directory's shard on its home server) and the name (found in
    /// the parent's shard, if one is held here). One scan of the parent's
    /// entries per directory: called for `atoll status`, not per request.
    pub fn dir_names(&self, dirs: &[(u64, Option<u64>)]) -> Vec<DirName> {
        let mut out = Vec::new();
        for &(ino, parent) in dirs {
            let dir = InodeId(ino);
            let parent = parent
                .map(InodeId)
                .or_else(|| self.shards.get(&dir).and_then(|s| s.parent));
            let Some(parent) = parent else { continue };
            let name = self.shards.get(&parent).and_then(|sh| {
                sh.after(0)
                    .find(|(_, _, d)| d.ino == dir)
                    .map(|(_, n, _)| String::from_utf8_lossy(n).into_owned())
            });
            out.push(DirName {
                ino,
                parent: parent.0,
                name: name.unwrap_or_default(),
            });
        }
        out
    }
}

/// The names of directories `hot` and of their ancestors, found by asking
/// every server (`ask`: the servers' answers to one round of
/// [`FileServer::dir_names`], together, or `None` when a server did not
/// answer: then the names known so far are all there is). Servers never message each
/// other, so the asker goes in rounds: a directory's home server knows its
/// parent, whichever server holds the parent's entries knows its name
/// (asked again with the parent when that is another server), and each
/// round climbs one level, at most [`MAX_DEPTH`] of them. Off the hot
/// path: `atoll status` only.
pub fn name_dirs(
    hot: impl IntoIterator<Item = u64>,
    mut ask: impl FnMut(&[(u64, Option<u64>)]) -> Option<Vec<DirName>>,
) -> Vec<DirName> {
    let mut known: BTreeMap<u64, DirName> = BTreeMap::new();
    let mut want: BTreeMap<u64, Option<u64>> = hot
        .into_iter()
        .filter(|&ino| ino != ROOT.0)
        .map(|ino| (ino, None))
        .collect();
    for _ in 0..2 * MAX_DEPTH {
        if want.is_empty() {
            break;
        }
        let round: Vec<(u64, Option<u64>)> = want.iter().map(|(&d, &p)| (d, p)).collect();
        let Some(answers) = ask(&round) else { break };
        for n in answers {
            let e = known.entry(n.ino).or_insert_with(|| n.clone());
            if e.name.is_empty() {
                e.name = n.name;
            }
        }
        let mut next: BTreeMap<u64, Option<u64>> = BTreeMap::new();
        for (&d, &asked) in &want {
            match known.get(&d) {
                // Parent known, name not yet: ask again with the parent,
                // unless that was this round's question (the entry is gone).
                Some(n) if n.name.is_empty() && asked.is_none() => {
                    next.insert(d, Some(n.parent));
                }
                Some(n) if n.name.is_empty() => {}
                // Named: climb to the parent.
                Some(n) if n.parent != ROOT.0 && !known.contains_key(&n.parent) => {
                    next.insert(n.parent, None);
                }
                _ => {}
            }
        }
        want = next;
    }
    known.into_values().collect()
}

/// Levels of ancestors [`name_dirs`] climbs.
pub const MAX_DEPTH: usize = 16;

#[cfg(test)]
mod tests {
    use super::*;

    fn ops_of(h: &HotDirs, dir: u64) -> Option<u64> {
        h.report().iter().find(|d| d.ino == dir).map(|d| d.ops)
    }

    #[test]
    fn a_busy_directory_is_reported_first_with_its_count() {
        let mut h = HotDirs::default();
        for i in 0..1000u64 {
            h.add(7);
            if i % 10 == 0 {
                h.add(100 + i);
            }
        }
        let r = h.report();
        assert_eq!(r[0].ino, 7, "{r:?}");
        assert_eq!(r[0].ops, 1000);
        assert!(r.len() <= REPORTED);
    }

    #[test]
    fn every_directory_above_the_threshold_keeps_a_slot_among_noise() {
        // Three directories with 10 % of the operations each, among
        // 70 % spread over thousands of others that come once.
        let mut h = HotDirs::default();
        let mut noise = 1_000u64;
        for round in 0..5_000u64 {
            for hot in [11, 22, 33] {
                if round % 3 == 0 {
                    h.add(hot);
                }
            }
            for _ in 0..2 {
                noise += 1;
                h.add(noise);
            }
        }
        let r = h.report();
        let top3: Vec<u64> = r.iter().take(3).map(|d| d.ino).collect();
        for hot in [11, 22, 33] {
            assert!(top3.contains(&hot), "{hot} not among {r:?}");
        }
    }

    #[test]
    fn decay_ranks_the_directory_busy_now_above_one_busier_long_ago() {
        let mut h = HotDirs::default();
        // Directory 1 was very busy; then directory 2 is, a third as much.
        // Without decay 1 would stay on top for good.
        for _ in 0..100_000 {
            h.add(1);
        }
        for _ in 0..(DECAY_EVERY as usize * 2) {
            h.add(2);
        }
        let r = h.report();
        assert_eq!(r[0].ino, 2, "{r:?}");
        // Counts are not decayed: they give `top` its rates.
        assert_eq!(r[1].ops, 100_000);
    }

    #[test]
    fn counts_only_grow_while_a_directory_keeps_its_slot() {
        let mut h = HotDirs::default();
        for _ in 0..50 {
            h.add(5);
        }
        let before = ops_of(&h, 5).unwrap();
        for _ in 0..(DECAY_EVERY * 2) {
            h.add(5);
        }
        assert_eq!(ops_of(&h, 5).unwrap(), before + 2 * DECAY_EVERY as u64);
    }

    #[test]
    fn only_name_operations_are_counted() {
        let mut h = HotDirs::default();
        let dir = InodeId::new(1, 1, true, 42);
        h.record(&Request::Lookup { dir, name: b"x" });
        h.record(&Request::ReadDir {
            dir,
            cookie: 0,
            max_bytes: 4096,
            epoch: 0,
        });
        h.record(&Request::StatFs);
        let r = h.report();
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].ops, 2);
        assert!(r[0].distributed);
    }
}
