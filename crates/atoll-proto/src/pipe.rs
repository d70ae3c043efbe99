//! Layout of a pipe's *header block*: the shared state of one atoll pipe
//! or FIFO (Hare §3.6: pipes are file-server objects so that pipelines work
//! across cores; fos §4.2).
//!
//! A pipe is a byte ring in buffer-cache blocks that its owner server
//! allocates (one header block plus [`MAX_DATA_BLOCKS`] or fewer data
//! blocks). Data never travels in messages and never sits in one core's
//! kernel: writers copy into the ring and readers copy out of it directly,
//! under the ring lock in the header (Cosh §4-5 *share* semantics: both
//! ends map the same buffer; a non-shared-memory island would need *copy*
//! through the server instead). The server only creates and frees the
//! ring and maintains the reader/writer counts, which change on open,
//! close and session death; it bumps the wait words and wakes sleepers
//! when they do.
//!
//! All fields are little-endian words at fixed byte offsets; `u32` words
//! are used with atomic operations and as futex words (shared mappings of
//! the same memfd, so non-private futexes meet across processes).

/// Ring lock (0 free, 1 held, 2 held with sleepers). Held by clients only.
pub const LOCK: usize = 0;
/// Open descriptions that can read (maintained by the server).
pub const READERS: usize = 4;
/// Open descriptions that can write (maintained by the server).
pub const WRITERS: usize = 8;
/// Futex word readers sleep on: bumped on every write and whenever the
/// writer count changes.
pub const RSEQ: usize = 12;
/// Futex word writers sleep on: bumped on every read and whenever the
/// reader count changes.
pub const WSEQ: usize = 16;
/// Writer opens ever (a FIFO opened for reading waits for this to move).
pub const WOPENS: usize = 20;
/// Reader opens ever (a FIFO opened for writing waits for this to move).
pub const ROPENS: usize = 24;
/// Data blocks in the ring (capacity = `NBLOCKS * BLOCK_SIZE`).
pub const NBLOCKS: usize = 28;
/// `u64`: bytes ever written (ring head).
pub const HEAD: usize = 32;
/// `u64`: bytes ever read (ring tail).
pub const TAIL: usize = 40;
/// `u64`: read and write calls that moved data (statistics).
pub const OPS: usize = 48;
/// Sleepers on `RSEQ` / `WSEQ` (a waker skips the futex call when 0).
pub const RSLEEP: usize = 56;
pub const WSLEEP: usize = 60;
/// Thread id of the lock holder (0 while free), so that waiters can take
/// the lock back from a holder that was killed while holding it.
pub const OWNER: usize = 64;
/// Bytes the ring may hold, as set by `F_SETPIPE_SZ` (0: all of it).
/// Writers honour it; positions still wrap at the full capacity, so a
/// change never moves bytes already in the ring.
pub const LIMIT: usize = 68;
/// `u32` array of `NBLOCKS` data-block indices.
pub const BLOCKS: usize = 128;
/// Most data blocks of one pipe (64 KiB, Linux's default pipe size).
pub const MAX_DATA_BLOCKS: usize = 16;
/// Writes up to this size are atomic (POSIX `PIPE_BUF` on Linux).
pub const PIPE_BUF: usize = 4096;
