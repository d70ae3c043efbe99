//! The maps and sets of a file server's state: ordered by key, so that
//! their iteration order is a function of their contents alone.
//!
//! A file server is rebuilt after a crash from its newest snapshot and
//! the records after it (`crate::journal`, `crate::snapshot`, fos §3.5):
//! the rebuilt state must equal the lost one block for block, and several
//! paths free blocks or descriptions in map order (a session's end walks
//! its descriptions). A hash map iterates in an order that depends on its
//! history (its bucket count, where collisions and deleted slots put an
//! entry), and a map decoded from a snapshot has another history than the
//! live one it was encoded from: it would iterate differently, and a
//! successor's replay would free blocks in another order than the live
//! server. So the live server had to go on from its own decoded snapshot,
//! which stopped it for as long as decoding took (some 200 ms at 78,000
//! files). A B-tree iterates in key order whatever its history: a state
//! and its encode→decode iterate alike, and the live server keeps its own
//! state (`fs::image`). Keys need no secret hash either: no client can
//! aim names at one bucket of a tree.

/// A map of server state (see the module docs).
pub type Map<K, V> = std::collections::BTreeMap<K, V>;
/// A set of server state (see the module docs).
pub type Set<K> = std::collections::BTreeSet<K>;

#[cfg(test)]
mod tests {
    use super::*;

    /// Two maps with the same entries, reached by different histories (one
    /// grew large and shrank), iterate alike: what a hash map does not.
    #[test]
    fn maps_with_one_content_iterate_alike_whatever_their_history() {
        let key = |i: u64| i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let mut grown: Map<u64, u64> = Map::default();
        for i in 0..10_000u64 {
            grown.insert(key(i), i);
        }
        grown.retain(|_, v| *v % 97 == 0);
        let mut built: Map<u64, u64> = Map::default();
        for i in (0..10_000u64).rev().filter(|i| i % 97 == 0) {
            built.insert(key(i), i);
        }
        assert!(grown.values().eq(built.values()));
    }
}
