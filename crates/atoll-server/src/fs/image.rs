//! A file server's state as bytes: what a snapshot of its journal holds
//! (`crate::snapshot`, fos §3.5).
//!
//! Everything a replay of the journal would rebuild is in it: inodes,
//! shards, descriptions, sessions, pipes, watches, the free list, the
//! accounts' counts, the counters a replay recounts. Not in it: what the
//! server is given, not what it served: its configuration, its handle on
//! the buffer cache and the instance's gauges, the fault it is to meet,
//! the request it served last (for traces).
//!
//! **Iteration order.** Maps of the state iterate in an order that depends
//! on their history (`seeded`), and a decoded map has another history
//! than the live one it was encoded from. So a server that takes a
//! snapshot goes on from the state the snapshot decodes to
//! ([`FileServer::load_state`] of its own bytes): it and any successor
//! that loads the snapshot then hold maps built by the same inserts, in
//! the same order, with the same keys, and every later replay takes the
//! branches the live server took.

use serde::{Deserialize, Serialize};

use atoll_proto::{DescId, InodeId, SessionId, Transfers};

use super::seeded::Map;
use super::*;

/// Declares the fields of a server's state that a snapshot holds, once,
/// as the borrowed form that encodes and the owned form that decodes
/// (postcard encodes `&T` as `T`, so the two read alike).
macro_rules! state_fields {
    ($($field:ident: $ty:ty),* $(,)?) => {
        #[derive(Serialize)]
        struct ImageRef<'a> {
            $($field: &'a $ty,)*
            ops: &'a [(u64, u64)],
            free: Vec<u32>,
            acct: limits::AccountsImage,
        }

        #[derive(Deserialize)]
        struct Image {
            $($field: $ty,)*
            ops: Vec<(u64, u64)>,
            free: Vec<u32>,
            acct: limits::AccountsImage,
        }

        impl<S: BlockStore> FileServer<S> {
            /// The server's state, encoded (see the module docs).
            pub fn encode_state(&self) -> Result<Vec<u8>, String> {
                // Every field is named here, in the image or as left out:
                // a field added to the server and forgotten here would be
                // lost by every rebuild from a snapshot, so it does not
                // compile instead.
                let FileServer {
                    cfg: _,
                    cache: _,
                    fault_at: _,
                    kill_after: _,
                    calls_seen: _,
                    poisoned: _,
                    last_op: _,
                    acct: _,
                    ops: _,
                    $($field: _,)*
                } = self;
                let image = ImageRef {
                    $($field: &self.$field,)*
                    ops: &self.ops,
                    free: self.cache.free_blocks(),
                    acct: self.acct.image(),
                };
                postcard::to_stdvec(&image).map_err(|e| e.to_string())
            }

            /// Replace the server's state by the one `bytes` encode.
            pub fn load_state(&mut self, bytes: &[u8]) -> Result<(), String> {
                let image: Image = postcard::from_bytes(bytes).map_err(|e| e.to_string())?;
                // Old shards leave the count of names as they go, so the
                // image's count is set after them.
                $(self.$field = image.$field;)*
                for (slot, v) in self.ops.iter_mut().zip(image.ops) {
                    *slot = v;
                }
                self.cache.set_free_blocks(image.free);
                self.acct.restore(image.acct);
                for shard in self.shards.values_mut() {
                    shard.names = self.acct.names.clone();
                }
                Ok(())
            }
        }
    };
}

state_fields! {
    inodes: Map<InodeId, Inode>,
    next_serial: u64,
    shards: Map<InodeId, Shard>,
    removed: limits::RemovedDirs,
    descs: Map<DescId, Desc>,
    next_desc: u64,
    sessions: Map<SessionId, Session>,
    pipes: pipe::Pipes,
    transfers: Transfers,
    session_transfers: Map<SessionId, (u64, u64)>,
    notify: inotify::Notify,
    writes: inflight::Writes,
    creating: affinity::Creating,
    requests: u64,
    bad_requests: u64,
    track: track::Tracker,
    client_counters: reports::ClientReports,
    coalesced: Coalesced,
    marks: Map<InodeId, SessionId>,
    move_refs: Vec<(SessionId, InodeId)>,
    move_links: Vec<MoveLink>,
    rename_lock: Option<SessionId>,
    maps: mapping::Mappings,
    texts: text::Texts,
    hot: hotdirs::HotDirs,
    adapt: adapt::Adapt,
}
