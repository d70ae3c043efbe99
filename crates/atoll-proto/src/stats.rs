//! What servers report: transfers, pipe states, directory modes and swaps
//! (Hare §6.1.2), client counters, loads, `statfs` and server statistics.

use serde::{Deserialize, Serialize};

use super::*;

/// Data transfers of one server by Cosh mode (§5), for `atoll status`:
/// *share* — the server named buffer-cache blocks that a client then read,
/// wrote or mapped itself (`Read`, `Write`, `MapBlocks`); *copy* — the
/// bytes crossed inside messages and the server copied them between the
/// frame and its blocks (`ReadData`, `WriteData`, the pipe requests of a
/// copy island); *move* — ownership of blocks passed between domains,
/// which file data never does today (blocks stay their file's; moves
/// happen between processes in `atoll-cosh`), so it stays 0 here.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Transfers {
    pub copies: u64,
    pub copy_bytes: u64,
    pub shares: u64,
    pub share_bytes: u64,
    pub moves: u64,
    pub move_bytes: u64,
}

impl Transfers {
    /// One copy transfer of `bytes`.
    pub fn count_copy(&mut self, bytes: u64) {
        self.copies += 1;
        self.copy_bytes += bytes;
    }

    /// One share transfer of `bytes` (blocks named to a client).
    pub fn count_share(&mut self, bytes: u64) {
        self.shares += 1;
        self.share_bytes += bytes;
    }

    /// Sum over servers.
    pub fn add(&mut self, o: &Transfers) {
        self.copies += o.copies;
        self.copy_bytes += o.copy_bytes;
        self.shares += o.shares;
        self.share_bytes += o.share_bytes;
        self.moves += o.moves;
        self.move_bytes += o.move_bytes;
    }
}

/// A pipe's state as its server sees it (`Request::PipeState`): what a
/// client of a copy island cannot read from the ring's header itself.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PipeStateInfo {
    /// Bytes waiting to be read.
    pub used: u64,
    /// Bytes the pipe may hold (`F_GETPIPE_SZ`).
    pub limit: u64,
    pub readers: u32,
    pub writers: u32,
    /// Reader and writer opens ever (a FIFO open waits for one to move).
    pub ropens: u32,
    pub wopens: u32,
    /// The wait words ([`pipe::RSEQ`], [`pipe::WSEQ`]): they move when
    /// readiness may have changed (edge-triggered `epoll`).
    pub rseq: u32,
    pub wseq: u32,
}

/// The phases of a directory's hot-swap (K42 ch. 6: forward, block,
/// transfer, complete), each a message from the coordinating client.
#[derive(Serialize, Deserialize, Debug, Clone, Copy)]
pub enum AdaptStep<'a> {
    /// Home server: start a swap to `distributed` (or, `resume`, take over
    /// one whose coordinator died). Blocks the directory here. → `DirMode`
    /// with the new epoch, `swapping` and the swap's `base_seq`
    /// `width`: the servers a directory made distributed spreads over
    /// (the coordinator's member count; in the request so that a replay
    /// of the journal decides the same).
    Begin {
        distributed: bool,
        resume: bool,
        #[serde(default)]
        width: u32,
    },
    /// Every other server: block the directory (namespace requests on it
    /// answer `EMODE`) and drop cached lookups of its entries. `EBUSY` if
    /// a cross-server move holds a provisional name in it. → `Ok`
    Block {
        epoch: u32,
        distributed: bool,
        base_seq: u64,
        /// Servers the names spread over when `distributed` (the home
        /// server chose it at `Begin`: the member count then).
        width: u32,
    },
    /// Any server: entries held here that belong elsewhere under the new
    /// mode, in cookie order after `after` ([`pack_moved`]). → `Exported`
    Export { epoch: u32, after: u64 },
    /// The entries' new server: insert them with their cookies. → `Ok`
    Import {
        epoch: u32,
        #[serde(borrow)]
        data: &'a [u8],
    },
    /// Every server, home last: drop what moved away, publish the new
    /// mode, unblock. → `Ok`
    Complete { epoch: u32 },
    /// Every server: give up a swap before `Complete` (imported entries
    /// are dropped again, the old mode stays). → `Ok`
    Cancel { epoch: u32 },
}

/// A directory's mode as its home server knows it (Hare §6.1.2).
/// `epoch` 0 is the mode the directory was made with (its id's flag);
/// every completed swap adds one.
#[derive(Serialize, Deserialize, Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct ModeInfo {
    pub distributed: bool,
    pub epoch: u32,
    /// A swap is under way: wait and ask again.
    pub swapping: bool,
    /// ... and its coordinator died: the asker resumes it.
    pub orphaned: bool,
    /// Cookies of entries made after the swap start here (`Begin`).
    pub base_seq: u64,
    /// Servers `0..width` hold its names when `distributed`: the member
    /// count when it became distributed, by its id or a swap (fixed until
    /// the next swap, so members that join later change no route).
    pub width: u32,
}

impl ModeInfo {
    /// The width names are routed by (0: centralized).
    pub fn route_width(&self) -> usize {
        if self.distributed {
            self.width.max(1) as usize
        } else {
            0
        }
    }
}

/// Append one moved entry to `buf` (`seq:u64 ino:u64 type:u8 len:u8 name`).
pub fn pack_moved(buf: &mut Vec<u8>, seq: u64, ino: InodeId, ftype: FileType, name: &[u8]) {
    buf.extend_from_slice(&seq.to_le_bytes());
    buf.extend_from_slice(&ino.0.to_le_bytes());
    buf.push(ftype.dirent_type());
    buf.push(name.len().min(255) as u8);
    buf.extend_from_slice(&name[..name.len().min(255)]);
}

/// Bytes one moved entry takes in a packed batch.
pub fn moved_len(name: &[u8]) -> usize {
    18 + name.len().min(255)
}

/// The entries of a packed batch: `(seq, ino, type, name)`; stops at the
/// first malformed record.
pub fn parse_moved(mut data: &[u8]) -> impl Iterator<Item = (u64, InodeId, FileType, &[u8])> {
    std::iter::from_fn(move || {
        if data.len() < 18 {
            return None;
        }
        let seq = u64::from_le_bytes(data[0..8].try_into().ok()?);
        let ino = InodeId(u64::from_le_bytes(data[8..16].try_into().ok()?));
        let ftype = FileType::from_dirent_type(data[16])?;
        let len = data[17] as usize;
        let name = data.get(18..18 + len)?;
        data = &data[18 + len..];
        Some((seq, ino, ftype, name))
    })
}

/// A `Rename` flag for atoll's own use (never a Linux flag): the client has
/// established that a directory it replaces is empty, by marking it on its
/// entry servers (Hare §3.4.1). Without it a server refuses (`ESTALE`) to
/// replace a directory whose entries may live on other servers.
pub const RENAME_VICTIM_MARKED: u32 = 1 << 31;

/// Events only a client sees, reported with [`Request::ClientCounters`]
/// as deltas since its last report.
#[derive(Serialize, Deserialize, Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct ClientCounters {
    /// Lookups answered by the directory-lookup cache (Hare §3.7.1).
    pub dcache_hits: u64,
    /// Lookups sent to a server although the cache was on.
    pub dcache_misses: u64,
    /// Invalidation notices applied (Hare §3.7.2).
    pub dcache_invalidations: u64,
    /// Whole-cache flushes (inbox overflow).
    pub dcache_flushes: u64,
    /// Directory broadcasts: getdents or rmdir marks sent to all servers
    /// at once (Hare §3.7.3).
    pub broadcasts: u64,
    /// Three-phase rmdirs (Hare §3.4.1).
    pub three_phase_rmdirs: u64,
    /// Reads, writes and seeks served with a client-held offset (Hare
    /// §3.5.1).
    pub local_offset_ops: u64,
    /// Offsets moved to a server because a description got shared.
    pub offsets_shared: u64,
    /// Offsets taken back by the client once sharing ended (`Reclaim`).
    pub offsets_reclaimed: u64,
    /// Opens done with separate messages (`--without coalescing`).
    pub uncoalesced_opens: u64,
    /// System calls that reached atoll through a trap rather than a libc
    /// wrapper (the slow entry path).
    pub traps: u64,
    /// Bytes pipe writers copied straight into a waiting reader's buffer
    /// while that reader copied the rest (a *split* of a ticket).
    #[serde(default)]
    pub pipe_split_bytes: u64,
    /// Names of file servers re-bound because their member restarted or
    /// moved (a new generation, fos §3.3; `atoll_names::Bindings`).
    pub name_rebinds: u64,
    /// Times a thread bound by its round trips tried another core (off
    /// the core of the server it talks to, or onto it; client
    /// `msgbound`), and times one got its affinity back.
    #[serde(default)]
    pub msgbound_moves: u64,
    #[serde(default)]
    pub msgbound_returns: u64,
    /// Of those moves, the ones undone because the thread's requests got
    /// slower.
    #[serde(default)]
    pub msgbound_undone: u64,
    /// Reads a program on another host than the servers answered wholly
    /// from its copies of remote data, and reads that fetched (client
    /// `rcache`).
    #[serde(default)]
    pub remote_copy_hits: u64,
    #[serde(default)]
    pub remote_copy_fetches: u64,
    /// `lseek(SEEK_END)`s answered from the size board without a message,
    /// and ones that asked the server because the slot held another
    /// inode or an older incarnation's size (`atoll_msg::sizes`).
    #[serde(default)]
    pub size_board_hits: u64,
    #[serde(default)]
    pub size_board_misses: u64,
    /// Reads of a regular file copied from blocks learnt before, without
    /// a message, and reads that asked because the file's data version
    /// had moved or its atime was due (`atoll_msg::lease`).
    #[serde(default)]
    pub read_lease_hits: u64,
    #[serde(default)]
    pub read_lease_misses: u64,
}

/// What one session (a client process) asked of one server, and what its
/// process reported about itself, for `atoll top`.
#[derive(Serialize, Deserialize, Clone, PartialEq, Eq, Debug, Default)]
pub struct SessionLoad {
    pub session: u64,
    /// Requests this server served for the session.
    pub requests: u64,
    /// Directory-cache hits and misses, and traps, as the process reported
    /// them so far (`Request::ClientCounters`; server 0 only, else zero).
    pub dcache_hits: u64,
    pub dcache_misses: u64,
    pub traps: u64,
    /// Bytes of file and pipe data this server copied for the session
    /// and bytes it shared (blocks named), by Cosh mode (`Transfers`).
    #[serde(default)]
    pub copy_bytes: u64,
    #[serde(default)]
    pub share_bytes: u64,
}

/// One run of buffer-cache blocks backing part of a file.
#[derive(Serialize, Deserialize, Clone, Copy, PartialEq, Eq, Debug)]
pub struct Extent {
    /// File offset of the first byte covered.
    pub file_offset: u64,
    /// Bytes covered (may end mid-block).
    pub len: u64,
    /// First block index in the buffer cache, or `u32::MAX` for a hole
    /// (reads of a hole produce zeros).
    pub block: u32,
}

#[derive(Serialize, Deserialize, Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct StatFsInfo {
    pub blocks: u64,
    pub blocks_free: u64,
    pub files: u64,
    pub files_free: u64,
}

/// Per-server counters (cheap to keep, reported by `atoll status`).
#[derive(Serialize, Deserialize, Clone, PartialEq, Eq, Debug, Default)]
pub struct ServerStats {
    pub server: u32,
    pub core: i32,
    pub sessions: u64,
    pub inodes: u64,
    pub open_descriptions: u64,
    /// Buffer-cache blocks this server holds in files, pipe rings, parked
    /// and pinned lists (owned, not free).
    pub blocks_used: u64,
    /// Blocks whose owner word names this server (used + free in its list).
    pub blocks_total: u64,
    pub requests: u64,
    pub bad_requests: u64,
    /// `(operation name, count, total service nanoseconds)`.
    pub ops: Vec<(String, u64, u64)>,
    /// Pipes and FIFO rings created by this server.
    #[serde(default)]
    pub pipes: u64,
    /// Bytes written into this server's pipes (rings live and freed).
    #[serde(default)]
    pub pipe_bytes: u64,
    /// Reads and writes that moved pipe data.
    #[serde(default)]
    pub pipe_ops: u64,
    /// File and pipe data this server transferred, by Cosh mode (§5).
    /// Boxed: `Reply::Stats` stays within the size of the other replies.
    #[serde(default)]
    pub transfers: Box<Transfers>,
    /// Named event counters of the Hare techniques (`(name, count)`):
    /// directory-cache invalidations sent, inbox overflows, lookups
    /// tracked, client-reported cache hits/misses, broadcasts, … (Hare §5.4).
    #[serde(default)]
    pub counters: Vec<(String, u64)>,
    /// The block pool (K42's Global Page Manager shape): blocks free in
    /// this server's list, ever borrowed from / returned to the root, and
    /// dropped because their owner word was scribbled.
    #[serde(default)]
    pub blocks_free: u64,
    #[serde(default)]
    pub blocks_borrowed: u64,
    #[serde(default)]
    pub blocks_returned: u64,
    #[serde(default)]
    pub blocks_dropped: u64,
    /// Scribbled `FREE` owner words over blocks another server holds,
    /// found by this server's claims and given back to their holder.
    #[serde(default)]
    pub blocks_repaired: u64,
    /// Blocks in the pool's root (no server owns them) and in the whole
    /// instance, as this server saw them.
    #[serde(default)]
    pub root_free_blocks: u64,
    #[serde(default)]
    pub instance_blocks: u64,
    /// Request bytes queued in this server's rings when the snapshot was
    /// taken, and the number of channels (lanes) it serves.
    #[serde(default)]
    pub ring_bytes: u64,
    #[serde(default)]
    pub channels: u64,
    /// Per-session load (sessions that sent this server anything).
    #[serde(default)]
    pub sessions_load: Vec<SessionLoad>,
    /// The directories this server saw the most name operations in
    /// (a bounded sketch, `atoll top`), busiest first.
    #[serde(default)]
    pub hot_dirs: Vec<HotDir>,
    /// Swaps of directory modes this server completed as home server
    /// (Hare §6.1.2), and the directories homed here that are now
    /// distributed by such a swap.
    #[serde(default)]
    pub mode_swaps: u64,
    #[serde(default)]
    pub adapted_dirs: Vec<InodeId>,
    /// Every directory homed here whose mode a swap changed at least once
    /// (or that one is changing), at most [`MAX_SWAPPED_DIRS`] of them,
    /// those swapped most first.
    #[serde(default)]
    pub swapped_dirs: Vec<SwappedDir>,
}

/// Most [`SwappedDir`]s one server reports (its status stays small).
pub const MAX_SWAPPED_DIRS: usize = 64;

/// A directory whose mode swaps changed (Hare §6.1.2), as its home server
/// knows it, for `atoll status`.
#[derive(Serialize, Deserialize, Clone, PartialEq, Eq, Debug, Default)]
pub struct SwappedDir {
    /// The directory's `InodeId` (its `st_ino`).
    pub ino: u64,
    /// Distributed now (else centralized on its home server).
    pub distributed: bool,
    /// Swaps completed: its mode changed this many times (its epoch).
    pub swaps: u32,
    /// A swap is under way.
    pub swapping: bool,
}

/// A directory one server sees many name operations in (lookups,
/// creations, unlinks, renames, readdir), for `atoll top`.
#[derive(Serialize, Deserialize, Clone, PartialEq, Eq, Debug, Default)]
pub struct HotDir {
    /// The directory's `InodeId`.
    pub ino: u64,
    /// Operations counted since the directory took its place in the
    /// sketch; only grows while it keeps the place, so two snapshots give
    /// a rate.
    pub ops: u64,
    /// The directory is distributed over servers (Hare §3.4).
    pub distributed: bool,
}

/// The name of a directory in its parent, as a server holding the entry
/// knows it (`InstanceStatus::dir_names`).
#[derive(Serialize, Deserialize, Clone, PartialEq, Eq, Debug, Default)]
pub struct DirName {
    pub ino: u64,
    pub parent: u64,
    /// Empty when only the parent is known.
    pub name: String,
}
