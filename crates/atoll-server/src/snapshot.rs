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
//!
//! A server *process* does not stop for the encoding ([`Mode::Forked`],
//! `snapshot_fork`): it forks, and the child encodes the state as it was
//! at the fork and writes it into the other half while the parent goes
//! on serving; the parent commits it once the child is done, with the
//! records appended meanwhile copied after it. Its pause is the fork.
//! Server threads (`--without processes`: the instance process, with
//! threads of its own that a fork would leave behind holding locks)
//! encode inline ([`Mode::Inline`]), as does a server process whose
//! journal is about to fill (it cannot wait for a child), and one whose
//! children keep failing.

use std::time::{Duration, Instant};

use crate::fs::FileServer;
use crate::journal::Journal;
use crate::store::BlockStore;

#[path = "snapshot_fork.rs"]
mod forked;
pub use forked::end_stray;
use forked::{Failed, Pending, Verdict};

/// Record bytes after which a snapshot is taken (tests make it small).
pub const ENV_SNAPSHOT_BYTES: &str = "ATOLL_SNAPSHOT_BYTES";

/// Most record bytes between two snapshots by default, whatever the
/// journal's size: what bounds a rebuild's replay (about 39,000 created
/// files, some 200 ms of replay in `atoll bench recovery` on a busy
/// two-CPU machine).
const DEFAULT_AFTER: u64 = 8 << 20;

/// Longest a child may encode before it is killed and its snapshot
/// abandoned (a hung child: one whose panic hook waits on a lock).
const CHILD_LIMIT: Duration = Duration::from_secs(30);

/// Longest a server whose journal is about to fill waits for its child
/// before it kills it and encodes inline: well under the default bound
/// after which a server that does not turn its loop counts as wedged
/// (`wedge::DEFAULT_BOUND`, 10 s).
const URGENT_WAIT: Duration = Duration::from_secs(5);

/// Forked snapshots that fail in a row before a server encodes inline.
const FAILURES_BEFORE_INLINE: u32 = 3;

/// How a server takes its snapshots (`atoll status`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// It encodes its state itself, between two requests: it stops for
    /// the encoding and the copy.
    Inline = 1,
    /// A forked child encodes it while the server serves: it stops for
    /// the fork and for copying the records appended meanwhile.
    Forked = 2,
}

impl Mode {
    /// What `atoll status` says for the word `Journal::note_snapshot`
    /// keeps.
    pub fn name(word: u64) -> &'static str {
        match word {
            1 => "inline",
            2 => "forked",
            _ => "",
        }
    }
}

/// When and how one server takes its snapshots.
pub struct Schedule {
    /// `ATOLL_SNAPSHOT_BYTES`, if set: record bytes between snapshots.
    fixed: Option<u64>,
    /// Record bytes since the last snapshot at which to try next, when a
    /// snapshot did not fit: encoding the state on every round would
    /// stall the server for nothing.
    retry_at: u64,
    mode: Mode,
    /// The child encoding a snapshot now.
    pending: Option<Pending>,
    /// Record bytes since the last snapshot before forking again, after
    /// a child failed (back-off).
    fork_after: u64,
    failures: u32,
}

impl Schedule {
    /// A snapshot after every `bytes` of records (tests).
    #[cfg(test)]
    pub fn every(bytes: u64) -> Schedule {
        Schedule {
            fixed: Some(bytes),
            ..Schedule::new(None, Mode::Inline)
        }
    }

    /// The same, forked (tests).
    #[cfg(test)]
    pub fn forked_every(bytes: u64) -> Schedule {
        Schedule {
            fixed: Some(bytes),
            ..Schedule::new(None, Mode::Forked)
        }
    }

    fn new(fixed: Option<u64>, mode: Mode) -> Schedule {
        Schedule {
            fixed,
            retry_at: 0,
            mode,
            pending: None,
            fork_after: 0,
            failures: 0,
        }
    }

    /// The schedule of a server: forked if `process` (module docs).
    pub fn from_env(process: bool) -> Schedule {
        let fixed = std::env::var(ENV_SNAPSHOT_BYTES)
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .filter(|&n| n > 0);
        let mode = if process { Mode::Forked } else { Mode::Inline };
        Schedule::new(fixed, mode)
    }

    /// Is a child encoding a snapshot now?
    pub fn pending(&self) -> bool {
        self.pending.is_some()
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
        since >= after || urgent(journal)
    }

    /// The server loop's part, between two requests (`quiet`: and no
    /// invalidation waits for delivery, so the state is whole): finish a
    /// forked snapshot whose child is done (waiting for it if the half
    /// is about to fill), or start one that is due. `wake` rings the
    /// server's doorbell (a forked child does when it is done).
    pub fn between_requests<S: BlockStore>(
        &mut self,
        fs: &mut FileServer<S>,
        journal: &Journal,
        index: usize,
        quiet: bool,
        wake: &dyn Fn(),
    ) {
        if self.pending.is_some() {
            self.finish(journal, index);
        }
        if self.pending.is_some() || !quiet || !self.due(journal) {
            return;
        }
        if self.mode == Mode::Inline || urgent(journal) {
            self.take(fs, journal, index);
        } else if journal.since_snapshot() >= self.fork_after {
            match Pending::start(fs, journal, index, wake) {
                Ok(p) => self.pending = Some(p),
                Err(e) => self.failed(journal, index, &format!("cannot fork: {e}")),
            }
        }
    }

    /// Commit the pending snapshot if its child is done; abandon it if
    /// the child failed. If the half is about to fill, wait for the child
    /// (records must not be lost) rather than look.
    fn finish(&mut self, journal: &Journal, index: usize) {
        let p = self.pending.as_mut().expect("pending");
        let verdict = if urgent(journal) {
            Some(p.wait(URGENT_WAIT))
        } else if p.started.elapsed() > CHILD_LIMIT {
            p.kill();
            Some(Err(Failed::Child(format!(
                "not done within {CHILD_LIMIT:?}"
            ))))
        } else {
            p.try_finish()
        };
        if let Some(verdict) = verdict {
            self.conclude(journal, index, verdict);
        }
    }

    /// Wait for the pending child, then commit its snapshot (tests: a
    /// server whose child finishes at that point). Whether it did.
    #[cfg(test)]
    pub fn settle(&mut self, journal: &Journal) -> bool {
        let Some(p) = self.pending.as_mut() else {
            return false;
        };
        let verdict = p.wait(CHILD_LIMIT);
        self.conclude(journal, 0, verdict)
    }

    /// Fork a child that encodes `fs` now (tests). Whether it started.
    #[cfg(test)]
    pub fn fork<S: BlockStore>(&mut self, fs: &FileServer<S>, journal: &Journal) -> bool {
        assert!(self.pending.is_none(), "one child at a time");
        self.pending = Pending::start(fs, journal, 0, &|| {}).ok();
        self.pending.is_some()
    }

    /// Drop the pending child, as a server that stops with one at work
    /// does (tests).
    #[cfg(test)]
    pub fn abandon(&mut self) {
        self.pending = None;
    }

    /// The pending child ended with `verdict`: commit or abandon its
    /// snapshot. Whether it was committed.
    fn conclude(
        &mut self,
        journal: &Journal,
        index: usize,
        verdict: Result<Verdict, Failed>,
    ) -> bool {
        let p = self.pending.take().expect("pending");
        journal.set_child(0);
        match verdict {
            Ok(v) => return self.commit(journal, index, &p, v),
            Err(Failed::TooLarge(len)) => self.too_large(journal, index, len),
            Err(Failed::NoEncode) => {
                tracing::error!("file server {index}: its state does not encode");
                self.retry_at = u64::MAX;
            }
            Err(Failed::Child(why)) => self.failed(journal, index, &why),
        }
        false
    }

    fn commit(&mut self, journal: &Journal, index: usize, p: &Pending, v: Verdict) -> bool {
        let t0 = Instant::now();
        if let Err(why) = journal.commit_forked(p.at, v.len, v.sum) {
            self.failed(journal, index, why);
            return false;
        }
        let copy_us = t0.elapsed().as_micros() as u64;
        let pause = p.fork_us + copy_us;
        journal.note_snapshot(Mode::Forked as u64, pause, v.encode_us);
        self.retry_at = 0;
        self.fork_after = 0;
        self.failures = 0;
        tracing::debug!(
            "file server {index}: forked snapshot of {} bytes in {:?} \
             (encoding {} µs; the server stopped {} µs for the fork, {copy_us} µs \
             for the commit)",
            v.len,
            p.started.elapsed(),
            v.encode_us,
            p.fork_us
        );
        true
    }

    /// A forked snapshot was abandoned: the old half stays in force; try
    /// again once twice as many records came, and encode inline after a
    /// few failures in a row.
    fn failed(&mut self, journal: &Journal, index: usize, why: &str) {
        self.failures += 1;
        self.fork_after = journal.since_snapshot().saturating_mul(2);
        if self.failures >= FAILURES_BEFORE_INLINE {
            self.mode = Mode::Inline;
        }
        tracing::warn!(
            "file server {index}: a forked snapshot was abandoned ({why}){}",
            match self.mode {
                Mode::Inline => "; it encodes its snapshots itself from now on",
                Mode::Forked => "",
            }
        );
    }

    fn too_large(&mut self, journal: &Journal, index: usize, len: usize) {
        self.retry_at = journal.since_snapshot().saturating_mul(2);
        tracing::warn!(
            "file server {index}: a snapshot of {len} bytes does not fit its journal \
             (at most {}); ATOLL_JOURNAL_BYTES is too small for its state",
            journal.snapshot_room()
        );
    }

    /// Take a snapshot of `fs` into `journal` inline. Returns whether
    /// one was committed.
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
            self.too_large(journal, index, image.len());
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
        journal.note_snapshot(
            Mode::Inline as u64,
            t0.elapsed().as_micros() as u64,
            encoded.as_micros() as u64,
        );
        tracing::debug!(
            "file server {index}: snapshot of {} bytes in {:?} (encoding {encoded:?})",
            image.len(),
            t0.elapsed()
        );
        true
    }
}

/// Is the active half about to fill (or did it)? Then a snapshot cannot
/// wait: the next request's record might not fit.
fn urgent(journal: &Journal) -> bool {
    let margin = (4 * atoll_proto::MAX_FRAME as u64).min(journal.half_bytes() / 4);
    journal.room() < margin || journal.full()
}

#[cfg(test)]
#[path = "snapshot_tests.rs"]
mod tests;
