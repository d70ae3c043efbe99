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

/// Decode a map whose entries were encoded in key order (every [`Map`]
/// encodes so) by building the tree in bulk: the entries are collected,
/// then `BTreeMap`'s `FromIterator` — which finds them sorted in one pass
/// and builds the tree bottom up — instead of inserting them one by one,
/// a root-to-leaf walk each. For the largest maps of a snapshot (inodes,
/// the names of a big directory), whose decoding a rebuild waits for.
/// Entries out of order or repeated are still taken (sorted, the last of
/// equal keys kept), as one-by-one insertion would.
pub fn bulk<'de, D, K, V>(d: D) -> Result<Map<K, V>, D::Error>
where
    D: serde::Deserializer<'de>,
    K: serde::Deserialize<'de> + Ord,
    V: serde::Deserialize<'de>,
{
    struct Entries<K, V>(std::marker::PhantomData<(K, V)>);
    impl<'de, K, V> serde::de::Visitor<'de> for Entries<K, V>
    where
        K: serde::Deserialize<'de> + Ord,
        V: serde::Deserialize<'de>,
    {
        type Value = Map<K, V>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a map")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, mut a: A) -> Result<Map<K, V>, A::Error> {
            // The hint comes from the bytes: trust it only so far.
            let mut entries = Vec::with_capacity(a.size_hint().unwrap_or(0).min(1 << 16));
            while let Some(e) = a.next_entry()? {
                entries.push(e);
            }
            Ok(entries.into_iter().collect())
        }
    }
    d.deserialize_map(Entries(std::marker::PhantomData))
}

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

    #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
    struct Held {
        #[serde(deserialize_with = "bulk")]
        m: Map<u64, String>,
    }

    /// A map decoded in bulk equals the one encoded, and entries out of
    /// order or repeated (bytes no server wrote) decode as one-by-one
    /// insertion would.
    #[test]
    fn a_bulk_decoded_map_is_the_encoded_one() {
        let m: Map<u64, String> = (0..5000u64).map(|i| (i * 7, format!("v{i}"))).collect();
        let held = Held { m };
        let bytes = postcard::to_stdvec(&held).unwrap();
        assert_eq!(postcard::from_bytes::<Held>(&bytes).unwrap(), held);
        #[derive(serde::Serialize)]
        struct Raw {
            m: Vec<(u64, String)>,
        }
        // postcard encodes a map as a sequence of pairs.
        let raw = Raw {
            m: vec![(3, "a".into()), (1, "b".into()), (3, "c".into())],
        };
        let got: Held = postcard::from_bytes(&postcard::to_stdvec(&raw).unwrap()).unwrap();
        let want: Map<u64, String> = [(1, "b".to_string()), (3, "c".to_string())].into();
        assert_eq!(got.m, want);
    }
}
