//! Snapshots of a file server's state in its journal, so that the journal
//! stays bounded and a rebuild replays only what came after the newest
//! one (fos §3.5: an operation log plus a periodic checkpoint, both in
//! memory the instance owns).
//!
//! When the records since the last snapshot pass a threshold, the server
//! loop, between two requests (so no request is half done and no
//! invalidation waits for delivery), encodes the state (`fs::image`),
//! commits it to the half of the journal not in use (`journal`: the old
//! half stays in force until the commit's last store), and goes on from
//! its own state: the state a successor decodes from those bytes iterates
//! and answers as the live one (`fs::ordered`, `fs::image` module docs),
//! so a snapshot costs the server its encoding and one copy, not a decode
//! of everything it holds. A snapshot too large for a half is not taken;
//! the journal then fills and stops as it did before snapshots, and the
//! server says so.

use std::time::Instant;

use crate::fs::FileServer;
use crate::journal::Journal;
use crate::store::BlockStore;

/// Record bytes after which a snapshot is taken (tests make it small).
pub const ENV_SNAPSHOT_BYTES: &str = "ATOLL_SNAPSHOT_BYTES";

/// Most record bytes between two snapshots by default, whatever the
/// journal's size: what bounds a rebuild's replay (about 39,000 created
/// files, some 200 ms of replay in `atoll bench recovery` on a busy
/// two-CPU machine).
const DEFAULT_AFTER: u64 = 8 << 20;

/// When one server takes its snapshots.
#[derive(Clone, Copy, Debug)]
pub struct Schedule {
    /// `ATOLL_SNAPSHOT_BYTES`, if set: record bytes between snapshots.
    fixed: Option<u64>,
    /// Record bytes since the last snapshot at which to try next, when a
    /// snapshot did not fit: encoding the state on every round would
    /// stall the server for nothing.
    retry_at: u64,
}

impl Schedule {
    /// A snapshot after every `bytes` of records (tests).
    #[cfg(test)]
    pub fn every(bytes: u64) -> Schedule {
        Schedule {
            fixed: Some(bytes),
            retry_at: 0,
        }
    }

    pub fn from_env() -> Schedule {
        Schedule {
            fixed: std::env::var(ENV_SNAPSHOT_BYTES)
                .ok()
                .and_then(|v| v.trim().parse().ok())
                .filter(|&n| n > 0),
            retry_at: 0,
        }
    }

    /// Is a snapshot due? Yes when the records since the last one pass the
    /// threshold (by default 8 MiB or a quarter of a half of the journal if
    /// that is less, and never less than the last snapshot's size, so that
    /// snapshots cost at most about as many bytes as the records they
    /// replace), and always when the half has little room left, or ran
    /// out of it.
    pub fn due(&self, journal: &Journal) -> bool {
        let since = journal.since_snapshot();
        if since == 0 || since < self.retry_at {
            return false;
        }
        let (_, last, _) = journal.snapshots();
        let after = self
            .fixed
            .unwrap_or_else(|| (journal.half_bytes() / 4).min(DEFAULT_AFTER).max(last));
        let margin = (4 * atoll_proto::MAX_FRAME as u64).min(journal.half_bytes() / 4);
        since >= after || journal.room() < margin || journal.full()
    }

    /// Take a snapshot of `fs` into `journal`. Returns whether one was
    /// committed.
    pub fn take<S: BlockStore>(
        &mut self,
        fs: &mut FileServer<S>,
        journal: &Journal,
        index: usize,
    ) -> bool {
        let t0 = Instant::now();
        let image = match fs.encode_state() {
            Ok(image) => image,
            Err(e) => {
                tracing::error!("file server {index}: its state does not encode: {e}");
                self.retry_at = u64::MAX;
                return false;
            }
        };
        let encoded = t0.elapsed();
        if image.len() > journal.snapshot_room() {
            self.retry_at = journal.since_snapshot().saturating_mul(2);
            tracing::warn!(
                "file server {index}: a snapshot of {} bytes does not fit its journal \
                 (at most {}); ATOLL_JOURNAL_BYTES is too small for its state",
                image.len(),
                journal.snapshot_room()
            );
            return false;
        }
        if !journal.commit_snapshot(&image) {
            self.retry_at = journal.since_snapshot().saturating_mul(2);
            return false;
        }
        self.retry_at = 0;
        // Committed: from here on a successor starts from these bytes. The
        // live server keeps its own state, which those bytes decode to
        // exactly (`fs::image`; `snapshot_tests` replays against it).
        journal.note_snapshot(t0.elapsed().as_micros() as u64);
        tracing::debug!(
            "file server {index}: snapshot of {} bytes in {:?} (encoding {encoded:?})",
            image.len(),
            t0.elapsed()
        );
        true
    }
}

#[cfg(test)]
#[path = "snapshot_tests.rs"]
mod tests;
