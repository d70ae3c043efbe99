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
//! **Exactness.** A state and the state its bytes decode to must take
//! the same branches on every later request, or a successor's replay of
//! the records after a snapshot would part from what the live server did
//! (and the live server does not reload its snapshot: `crate::snapshot`).
//! So everything here encodes losslessly and decodes to an equal value:
//! maps and sets are ordered by key (`ordered`), so a decoded one iterates
//! as the live one whatever either's history; instants are nanoseconds on
//! the tape's clock (`tape::instant_serde`); what is left out of a type
//! (`serde(skip)`) is either shared bookkeeping made again on load (a
//! shard's count of names, the accounts' own) or empty between requests,
//! when snapshots are taken (the requester's pid). `snapshot_tests` checks
//! it: a successor rebuilt from snapshots taken at random points encodes
//! to the live server's bytes and answers further requests alike.

use serde::{Deserialize, Serialize};

use atoll_proto::{DescId, InodeId, SessionId, Transfers};

use super::ordered::Map;
use super::*;

/// Declares the fields of a server's state that a snapshot holds, once,
/// as the borrowed form that encodes and the owned form that decodes
/// (postcard encodes `&T` as `T`, so the two read alike).
macro_rules! state_fields {
    ($($(#[$decode:meta])* $field:ident: $ty:ty),* $(,)?) => {
        #[derive(Serialize)]
        struct ImageRef<'a> {
            $($field: &'a $ty,)*
            ops: &'a [(u64, u64)],
            free: Vec<u32>,
            acct: limits::AccountsImage,
        }

        #[derive(Deserialize)]
        struct Image {
            $($(#[$decode])* $field: $ty,)*
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
                    sizes: _,
                    leases: _,
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

            /// [`FileServer::encode_state`] without the time each kind
            /// of request took (which a replay measures anew: the one
            /// part of the state that is a measure, not a result), for
            /// tests that compare a server with its successor.
            #[cfg(test)]
            pub fn encode_state_untimed(&self) -> Vec<u8> {
                let ops: Vec<(u64, u64)> = self.ops.iter().map(|&(n, _)| (n, 0)).collect();
                let image = ImageRef {
                    $($field: &self.$field,)*
                    ops: &ops,
                    free: self.cache.free_blocks(),
                    acct: self.acct.image(),
                };
                postcard::to_stdvec(&image).expect("a state encodes")
            }

            /// Replace the server's state by the one `bytes` encode.
            pub fn load_state(&mut self, bytes: &[u8]) -> Result<(), String> {
                let image: Image = postcard::from_bytes(bytes).map_err(|e| e.to_string())?;
                // The slots it held name inodes of the state replaced.
                self.forget_size_slots();
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
    #[serde(deserialize_with = "super::ordered::bulk")]
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
