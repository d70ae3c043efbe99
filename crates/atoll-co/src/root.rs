//! Roots and representatives: what a clustered-object implementation
//! provides (K42 §5.2, `CObjRoot` and `CObjRootMultiRep`).
//!
//! A [`Root`] holds the object's global state and answers misses: asked for
//! the representative ("rep") of a slot, it returns the one it already
//! made for that slot or its cluster, or makes one. The translation tables
//! only cache what the root returns; the root is the authority, so it may
//! hand the same rep to every slot (a centralised implementation), one per
//! slot (fully distributed) or one per group of slots ([`RepSet`] with a
//! cluster size: one per NUMA node, or per file server).
//!
//! For hot-swapping, a root also lists the state formats it can export and
//! import, best first; the swap picks the best common one ([`negotiate`],
//! K42 ch. 6, Transfer phase) and moves the state while no call runs.

use std::any::Any;
use std::sync::{Arc, Mutex};

/// The name of a state-transfer format, e.g. `"counter/total"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Format(pub &'static str);

/// State in transit between the old and the new implementation. Its type
/// is fixed by the [`Format`] both sides agreed on.
pub type State = Box<dyn Any + Send>;

/// Why a state transfer failed; the swap is abandoned and the old object
/// stays in place.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TransferError {
    #[error("the exporter and the importer have no state format in common")]
    NoCommonFormat,
    #[error("format {0:?} was negotiated but the exporter produced nothing")]
    ExportFailed(Format),
    #[error("format {0:?} was negotiated but the importer rejected the state")]
    ImportRejected(Format),
}

/// The global part of a clustered object implementing interface `I`
/// (a trait object type such as `dyn Counter`).
pub trait Root<I: ?Sized>: Send + Sync {
    /// The miss handler: the rep for `slot`, made on first use. Reps
    /// returned for one slot must share that slot's state: the local table
    /// caches one, and asks again after an eviction or a swap.
    fn rep(&self, slot: usize) -> Arc<I>;

    /// Formats [`Root::export`] can produce, best first.
    fn export_formats(&self) -> Vec<Format> {
        Vec::new()
    }

    /// Formats [`Root::import`] accepts, best first.
    fn import_formats(&self) -> Vec<Format> {
        Vec::new()
    }

    /// The whole object's state (gathered from its reps). Called only while
    /// no call runs on the object (after the Block phase).
    fn export(&self, format: Format) -> Option<State> {
        let _ = format;
        None
    }

    /// Take over `state`, before any call reaches this object.
    fn import(&self, format: Format, state: State) -> Result<(), TransferError> {
        let _ = state;
        Err(TransferError::ImportRejected(format))
    }
}

/// The best format both sides know: the one with the smallest sum of its
/// ranks in the two lists, ties going to the importer's preference.
///
/// ```
/// use atoll_co::{negotiate, Format};
/// let exporter = [Format("per-slot"), Format("total")];
/// let importer = [Format("total"), Format("per-slot")];
/// // Equal sums (0+1, 1+0): the importer's first choice wins.
/// assert_eq!(negotiate(&exporter, &importer), Some(Format("total")));
/// assert_eq!(negotiate(&exporter, &[Format("log")]), None);
/// ```
pub fn negotiate(exporter: &[Format], importer: &[Format]) -> Option<Format> {
    negotiate_by(exporter, importer)
}

/// [`negotiate`] for any format names (the message-passing variant names
/// formats with strings that travel in messages).
pub fn negotiate_by<F: PartialEq + Clone>(exporter: &[F], importer: &[F]) -> Option<F> {
    importer
        .iter()
        .enumerate()
        .filter_map(|(import_rank, f)| {
            let export_rank = exporter.iter().position(|e| e == f)?;
            Some(((export_rank + import_rank, import_rank), f.clone()))
        })
        .min_by_key(|(rank, _)| *rank)
        .map(|(_, f)| f)
}

/// The reps a root has made, one per cluster of `cluster` consecutive
/// slots, created lazily (K42's `CObjRootMultiRep`).
///
/// The lock is the root's rep lock: misses and walks over the reps take
/// it, calls through the translation table never do. Never call through a
/// clustered-object reference while holding it (K42 §5.2 notes the
/// deadlock: the call may miss and need the same lock); [`RepSet::all`]
/// returns a snapshot for that reason.
pub struct RepSet<R> {
    cluster: usize,
    reps: Mutex<Vec<Option<Arc<R>>>>,
}

impl<R> RepSet<R> {
    /// `slots` slots grouped `cluster` at a time (0 counts as 1).
    pub fn new(slots: usize, cluster: usize) -> RepSet<R> {
        let cluster = cluster.max(1);
        let clusters = slots.max(1).div_ceil(cluster);
        RepSet {
            cluster,
            reps: Mutex::new((0..clusters).map(|_| None).collect()),
        }
    }

    /// Slots per cluster.
    pub fn cluster_size(&self) -> usize {
        self.cluster
    }

    /// Which cluster `slot` belongs to.
    pub fn cluster_of(&self, slot: usize) -> usize {
        let n = self.lock().len();
        (slot / self.cluster) % n
    }

    /// The rep of `slot`'s cluster, made by `make` if it has none yet.
    pub fn get_or_make(&self, slot: usize, make: impl FnOnce() -> R) -> Arc<R> {
        let mut reps = self.lock();
        let n = reps.len();
        reps[(slot / self.cluster) % n]
            .get_or_insert_with(|| Arc::new(make()))
            .clone()
    }

    /// The reps made so far, with their cluster index.
    pub fn all(&self) -> Vec<(usize, Arc<R>)> {
        self.lock()
            .iter()
            .enumerate()
            .filter_map(|(i, r)| Some((i, r.clone()?)))
            .collect()
    }

    /// Number of clusters (the most reps there can be).
    pub fn clusters(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Option<Arc<R>>>> {
        self.reps.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_prefers_the_smallest_rank_sum() {
        let a = [Format("a"), Format("b"), Format("c")];
        let b = [Format("c"), Format("b")];
        // b: 1+1 = 2, c: 2+0 = 2 → tie → importer prefers c.
        assert_eq!(negotiate(&a, &b), Some(Format("c")));
        let b = [Format("x"), Format("b"), Format("c")];
        assert_eq!(negotiate(&a, &b), Some(Format("b")));
        assert_eq!(negotiate(&[], &b), None);
    }

    #[test]
    fn rep_set_makes_one_rep_per_cluster_lazily() {
        let set: RepSet<usize> = RepSet::new(5, 2);
        assert_eq!(set.clusters(), 3);
        assert!(set.all().is_empty());
        let a = set.get_or_make(0, || 10);
        let b = set.get_or_make(1, || 11);
        assert!(Arc::ptr_eq(&a, &b), "slots 0 and 1 share a cluster");
        let c = set.get_or_make(4, || 12);
        assert_eq!(*c, 12);
        assert_eq!(set.cluster_of(4), 2);
        let all: Vec<usize> = set.all().into_iter().map(|(i, _)| i).collect();
        assert_eq!(all, vec![0, 2]);
    }
}
