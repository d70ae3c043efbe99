//! Hash maps with fixed keys for the client's own tables.
//!
//! std's `HashMap::new` draws per-process random keys, through libc's
//! `getrandom`, the first time a thread makes one: a system call in
//! every image as its session is made (the directory cache), and one
//! from libc's text wherever the first map happens to be made later,
//! which SUD traps and which must not happen where no trap can be
//! delivered (signals blocked around a boot exchange, a wrapper that
//! runs with the selector at `BLOCK`). Random keys guard a map against
//! keys chosen to collide; every map here is keyed by what this process
//! looked up, read or loaded itself (names, inodes, library paths), so a
//! program that chose colliding names slows only its own calls: no other
//! process's tables hold them.

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, HashSet};
use std::hash::BuildHasherDefault;

/// SipHash with zero keys: no `getrandom`.
pub type Fixed = BuildHasherDefault<DefaultHasher>;

pub type Map<K, V> = HashMap<K, V, Fixed>;

pub type Set<T> = HashSet<T, Fixed>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_maps_hash_alike() {
        // Fixed keys: the same key lands in the same place in every map
        // (std's random keys differ between maps of one thread).
        use std::hash::BuildHasher;
        let (a, b) = (Fixed::default(), Fixed::default());
        assert_eq!(a.hash_one("name"), b.hash_one("name"));
        let mut m: Map<u64, u64> = Map::default();
        m.insert(1, 2);
        assert_eq!(m.get(&1), Some(&2));
    }
}
