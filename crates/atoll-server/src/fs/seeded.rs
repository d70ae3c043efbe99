//! Hash maps whose iteration order is a function of their history.
//!
//! A file server is rebuilt after a crash by replaying its journal
//! (`crate::journal`, fos §3.5): the rebuilt state must equal the lost one
//! block for block, and several paths free blocks or descriptions in map
//! order (a session's end walks its descriptions). `std`'s `RandomState`
//! draws new keys for every map, so two maps with the same history iterate
//! differently. Every map of a server's state is built from one set of
//! keys drawn once per process instead: still secret (a client cannot
//! aim names at one bucket), but the same for the live server and its
//! replay.

use std::collections::hash_map::RandomState;
use std::collections::{HashMap, HashSet};
use std::hash::BuildHasher;
use std::sync::OnceLock;

/// The process's one set of hash keys.
#[derive(Clone, Debug)]
pub struct Seeded(RandomState);

impl Default for Seeded {
    fn default() -> Seeded {
        static KEYS: OnceLock<RandomState> = OnceLock::new();
        Seeded(KEYS.get_or_init(RandomState::new).clone())
    }
}

impl BuildHasher for Seeded {
    type Hasher = <RandomState as BuildHasher>::Hasher;
    fn build_hasher(&self) -> Self::Hasher {
        self.0.build_hasher()
    }
}

/// A map of server state (see the module docs).
pub type Map<K, V> = HashMap<K, V, Seeded>;
/// A set of server state (see the module docs).
pub type Set<K> = HashSet<K, Seeded>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_with_one_history_iterate_alike() {
        let build = || {
            let mut m: Map<u64, u64> = Map::default();
            for i in 0..1000u64 {
                m.insert(i.wrapping_mul(0x9e37_79b9_7f4a_7c15), i);
            }
            for i in (0..1000u64).step_by(3) {
                m.remove(&i.wrapping_mul(0x9e37_79b9_7f4a_7c15));
            }
            m.into_values().collect::<Vec<_>>()
        };
        assert_eq!(build(), build());
    }
}
