//! Directory entries held by one server: a *shard* per directory.
//!
//! A plain directory has one shard, on its home server; a distributed
//! directory has one on every server that holds some of its names
//! (`entry_server`, Hare §3.4). A shard is created lazily by the first
//! entry (or `SetParent`/`MarkRmdir`) and dropped when the directory is
//! removed.
//!
//! Life cycle of a shard (three-phase rmdir, Hare §3.4.1):
//!
//! ```text
//!  normal ──MarkRmdir (no entries)──▶ marked ──FinishRmdir(commit)──▶ gone
//!                                       └────FinishRmdir(abort)────▶ normal
//! ```
//!
//! While marked, lookups proceed but creations answer `EAGAIN` and the
//! client retries once the rmdir has committed (→ `ENOENT`) or aborted.
//!
//! Readdir cookies: every entry gets a sequence number from a per-shard
//! counter that only grows, kept in a `BTreeMap<seq, name>` beside the map
//! by name. A `ReadDir` resumes strictly after the cookie, so entries that
//! stay in the directory are returned exactly once however the directory
//! changes between calls. Cookies 1 and 2 are `.` and `..` (home server
//! only); entries start at 3.

use std::cell::Cell;
use std::collections::BTreeMap;

use super::ordered::Map;
use std::rc::Rc;

use atoll_proto::{Errno, FileType, InodeId, MAX_NAME};

/// First sequence number of an entry (1 and 2 are `.` and `..`).
pub const FIRST_SEQ: u64 = 3;

#[derive(Clone, Copy, Debug, serde::Serialize, serde::Deserialize)]
pub struct Dent {
    pub ino: InodeId,
    pub ftype: FileType,
    pub seq: u64,
}

#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Shard {
    /// Parent directory, for `..` (recorded on the home server only).
    pub parent: Option<InodeId>,
    #[serde(deserialize_with = "super::ordered::bulk")]
    by_name: Map<Vec<u8>, Dent>,
    #[serde(deserialize_with = "super::ordered::bulk")]
    by_seq: BTreeMap<u64, Vec<u8>>,
    next_seq: u64,
    /// Phase 1 of rmdir happened; creations wait.
    pub marked: bool,
    /// Entries here that are directories (for the directory's `nlink`).
    pub subdirs: u32,
    /// `(servers, index)` while the directory is distributed by a swap
    /// (`adapt`): new cookies here are `index` modulo `servers`, so no two
    /// shards of the directory hand out the same one and entries keep
    /// their cookies when a swap moves them (Hare §6.1.2).
    pub stride: Option<(u64, u64)>,
    /// Entries in every shard of this server (`limits`): kept here, where
    /// entries come and go, so no caller can forget it. Not in a
    /// snapshot: relinked to the server's count when one is loaded
    /// (`fs::image`).
    #[serde(skip)]
    pub(super) names: Rc<Cell<u64>>,
}

impl Drop for Shard {
    fn drop(&mut self) {
        let n = self.by_name.len() as u64;
        self.names.set(self.names.get().saturating_sub(n));
    }
}

impl Shard {
    /// An empty shard whose entries count in `names`.
    pub fn new(parent: Option<InodeId>, names: &Rc<Cell<u64>>) -> Shard {
        Shard {
            names: names.clone(),
            parent,
            by_name: Map::default(),
            by_seq: BTreeMap::new(),
            next_seq: FIRST_SEQ,
            marked: false,
            subdirs: 0,
            stride: None,
        }
    }
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }
    pub fn len(&self) -> usize {
        self.by_name.len()
    }
    /// Every entry: name, inode, type (in no particular order).
    #[cfg(test)]
    pub fn names(&self) -> impl Iterator<Item = (&[u8], InodeId, String)> {
        self.by_name
            .iter()
            .map(|(n, d)| (n.as_slice(), d.ino, format!("{:?}", d.ftype)))
    }

    /// The names of the entries here that name `ino` (a scan: asked
    /// only when a descriptor's recorded path no longer names its file).
    pub fn naming(&self, ino: InodeId) -> impl Iterator<Item = &[u8]> {
        self.by_name
            .iter()
            .filter(move |(_, d)| d.ino == ino)
            .map(|(n, _)| n.as_slice())
    }

    pub fn get(&self, name: &[u8]) -> Option<Dent> {
        self.by_name.get(name).copied()
    }
    /// Insert or overwrite `name`; the entry gets a fresh cookie.
    pub fn insert(&mut self, name: &[u8], ino: InodeId, ftype: FileType) -> Option<Dent> {
        let old = self.remove(name);
        let mut seq = self.next_seq;
        if let Some((n, i)) = self.stride {
            seq += (i + n - seq % n) % n;
        }
        self.next_seq = seq + 1;
        self.by_seq.insert(seq, name.to_vec());
        self.by_name.insert(name.to_vec(), Dent { ino, ftype, seq });
        self.names.set(self.names.get() + 1);
        if ftype == FileType::Directory {
            self.subdirs += 1;
        }
        old
    }
    pub fn remove(&mut self, name: &[u8]) -> Option<Dent> {
        let d = self.by_name.remove(name)?;
        self.by_seq.remove(&d.seq);
        self.names.set(self.names.get().saturating_sub(1));
        if d.ftype == FileType::Directory {
            self.subdirs = self.subdirs.saturating_sub(1);
        }
        Some(d)
    }
    /// Insert an entry moved here by a swap with the cookie it had
    /// (`adapt`); an entry of that name already here stays (a resumed swap
    /// imports twice). Returns whether it was inserted.
    pub fn insert_moved(&mut self, name: &[u8], ino: InodeId, ftype: FileType, seq: u64) -> bool {
        if self.by_name.contains_key(name) || self.by_seq.contains_key(&seq) || seq < FIRST_SEQ {
            return false;
        }
        self.by_seq.insert(seq, name.to_vec());
        self.by_name.insert(name.to_vec(), Dent { ino, ftype, seq });
        self.names.set(self.names.get() + 1);
        if ftype == FileType::Directory {
            self.subdirs += 1;
        }
        self.next_seq = self.next_seq.max(seq + 1);
        true
    }
    /// New cookies start at `floor` or later.
    pub fn raise_cookies(&mut self, floor: u64) {
        self.next_seq = self.next_seq.max(floor);
    }
    /// Subdirectories among the entries here (after a swap gathered them).
    pub fn count_subdirs(&self) -> u32 {
        self.by_name
            .values()
            .filter(|d| d.ftype == FileType::Directory)
            .count() as u32
    }
    /// The cookie the next entry will get (moves on every insertion).
    pub fn next_cookie(&self) -> u64 {
        self.next_seq
    }
    /// Entries with cookie strictly after `cookie`, in cookie order.
    pub fn after(&self, cookie: u64) -> impl Iterator<Item = (u64, &[u8], Dent)> + '_ {
        self.by_seq
            .range(cookie.saturating_add(1).max(FIRST_SEQ)..)
            .filter_map(|(seq, name)| Some((*seq, name.as_slice(), *self.by_name.get(name)?)))
    }
}

/// Validate one path component sent by a client. `.` and `..` are accepted
/// here; each operation decides what they mean for it.
pub fn check_name(name: &[u8]) -> Result<(), Errno> {
    if name.is_empty() {
        return Err(Errno::ENOENT);
    }
    if name.len() > MAX_NAME {
        return Err(Errno::ENAMETOOLONG);
    }
    if name.contains(&b'/') || name.contains(&0) {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

pub fn is_dot(name: &[u8]) -> bool {
    name == b"." || name == b".."
}

/// Append one `linux_dirent64` record to `buf` unless it would exceed
/// `max` bytes; returns whether it was appended.
///
/// Layout: `d_ino:u64, d_off:i64, d_reclen:u16, d_type:u8, d_name[]` with
/// a NUL and padding to 8 bytes.
pub fn push_dirent(
    buf: &mut Vec<u8>,
    ino: u64,
    off: u64,
    dtype: u8,
    name: &[u8],
    max: usize,
) -> bool {
    let reclen = (19 + name.len() + 1 + 7) & !7;
    if buf.len() + reclen > max {
        return false;
    }
    let start = buf.len();
    buf.extend_from_slice(&ino.to_le_bytes());
    buf.extend_from_slice(&off.to_le_bytes());
    buf.extend_from_slice(&(reclen as u16).to_le_bytes());
    buf.push(dtype);
    buf.extend_from_slice(name);
    buf.resize(start + reclen, 0);
    true
}

/// Parse packed `linux_dirent64` records: `(d_ino, d_off, d_type, name)`.
pub fn parse_dirents(mut buf: &[u8]) -> Vec<(u64, u64, u8, Vec<u8>)> {
    let mut out = vec![];
    while buf.len() >= 19 {
        let ino = u64::from_le_bytes(buf[0..8].try_into().unwrap_or_default());
        let off = u64::from_le_bytes(buf[8..16].try_into().unwrap_or_default());
        let reclen = u16::from_le_bytes([buf[16], buf[17]]) as usize;
        if reclen < 20 || reclen > buf.len() {
            break;
        }
        let name = &buf[19..reclen];
        let end = name.iter().position(|b| *b == 0).unwrap_or(name.len());
        out.push((ino, off, buf[18], name[..end].to_vec()));
        buf = &buf[reclen..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reinsertion_gets_a_new_cookie_and_iteration_skips_removed() {
        let names = Rc::new(Cell::new(0));
        let mut s = Shard::new(None, &names);
        let ino = InodeId(9);
        s.insert(b"a", ino, FileType::Regular);
        s.insert(b"b", ino, FileType::Directory);
        assert_eq!(s.subdirs, 1);
        let first: Vec<_> = s.after(0).map(|(seq, n, _)| (seq, n.to_vec())).collect();
        assert_eq!(first, vec![(3, b"a".to_vec()), (4, b"b".to_vec())]);
        s.insert(b"a", ino, FileType::Regular);
        let after3: Vec<_> = s.after(3).map(|(_, n, _)| n.to_vec()).collect();
        assert_eq!(after3, vec![b"b".to_vec(), b"a".to_vec()]);
        assert_eq!(names.get(), 2, "a re-insertion replaces");
        s.remove(b"b");
        assert_eq!(names.get(), 1);
        assert_eq!(s.subdirs, 0);
        assert!(s.get(b"a").is_some() && s.get(b"b").is_none());
        drop(s);
        assert_eq!(names.get(), 0, "a dropped shard's entries uncount");
    }

    #[test]
    fn strided_cookies_never_collide_and_moved_entries_keep_theirs() {
        let names = Rc::new(Cell::new(0));
        let mut a = Shard::new(None, &names);
        let mut b = Shard::new(None, &names);
        a.stride = Some((3, 0));
        b.stride = Some((3, 1));
        a.raise_cookies(10);
        b.raise_cookies(10);
        let ino = InodeId(9);
        a.insert(b"x", ino, FileType::Regular);
        a.insert(b"y", ino, FileType::Regular);
        b.insert(b"z", ino, FileType::Regular);
        let seqs: Vec<u64> = a.after(0).chain(b.after(0)).map(|(s, _, _)| s).collect();
        assert_eq!(seqs, vec![12, 15, 10]);
        assert!(a.insert_moved(b"z", ino, FileType::Directory, 10));
        assert!(
            !a.insert_moved(b"z", ino, FileType::Directory, 10),
            "idempotent"
        );
        assert_eq!(a.count_subdirs(), 1);
        a.stride = None;
        a.insert(b"w", ino, FileType::Regular);
        assert_eq!(a.get(b"w").map(|d| d.seq), Some(16));
    }

    #[test]
    fn dirent_records_are_aligned_and_parse_back() {
        let mut buf = vec![];
        assert!(push_dirent(&mut buf, 7, 3, libc::DT_REG, b"hello", 4096));
        assert_eq!(buf.len() % 8, 0);
        let max = buf.len() + 8;
        assert!(!push_dirent(&mut buf, 8, 4, libc::DT_DIR, b"x", max));
        let recs = parse_dirents(&buf);
        assert_eq!(recs, vec![(7, 3, libc::DT_REG, b"hello".to_vec())]);
    }

    #[test]
    fn names_are_validated() {
        assert_eq!(check_name(b""), Err(Errno::ENOENT));
        assert_eq!(check_name(&[b'a'; 256]), Err(Errno::ENAMETOOLONG));
        assert_eq!(check_name(b"a/b"), Err(Errno::EINVAL));
        assert!(check_name(&[b'a'; 255]).is_ok());
    }
}
