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
//! replay. A server process that takes over from a dead one replays in
//! another process, so the keys are the instance's, handed to every
//! server process ([`use_keys`], `process`): keyed SipHash, since `std`
//! lets no one choose `RandomState`'s keys.

use std::collections::hash_map::RandomState;
use std::collections::{HashMap, HashSet};
use std::hash::BuildHasher;
use std::sync::OnceLock;

static KEYS: OnceLock<(u64, u64)> = OnceLock::new();

/// This process's hash keys (drawn at first use unless set before).
pub fn keys() -> (u64, u64) {
    *KEYS.get_or_init(|| {
        let random = RandomState::new();
        (random.hash_one(0u64), random.hash_one(1u64))
    })
}

/// Hash with `keys` in this process (a server process, before it builds
/// any state); false if keys were already in use.
pub fn use_keys(keys: (u64, u64)) -> bool {
    KEYS.set(keys).is_ok()
}

/// The process's one set of hash keys.
#[derive(Clone, Copy, Debug)]
pub struct Seeded((u64, u64));

impl Default for Seeded {
    fn default() -> Seeded {
        Seeded(keys())
    }
}

impl BuildHasher for Seeded {
    #[allow(deprecated)] // the one keyed SipHash `std` offers
    type Hasher = std::hash::SipHasher;
    #[allow(deprecated)]
    fn build_hasher(&self) -> Self::Hasher {
        std::hash::SipHasher::new_with_keys(self.0 .0, self.0 .1)
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
