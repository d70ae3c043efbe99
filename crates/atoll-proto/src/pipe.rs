//! Layout of a pipe's *header block*: the shared state of one atoll pipe
//! or FIFO (Hare §3.6: pipes are file-server objects so that pipelines work
//! across cores; fos §4.2).
//!
//! A pipe is a byte ring in buffer-cache blocks that its owner server
//! allocates (one header block plus [`DEFAULT_DATA_BLOCKS`] data blocks,
//! up to [`MAX_DATA_BLOCKS`] after `F_SETPIPE_SZ`). Data never travels in messages and never sits in one core's
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

/// Ring lock: 0 when free, else the holder's id (a client thread's tid, or
/// a server's pid) with [`LOCK_WAITERS`] set while others sleep on it.
/// Holding the id in the lock word itself leaves no moment where the lock
/// is held but its holder unknown: a waiter that sleeps long takes the
/// lock back from a holder that no longer exists (killed while holding).
pub const LOCK: usize = 0;
/// Bit of [`LOCK`] set while threads sleep on the lock (ids never reach
/// it: Linux thread ids stay below 2^22).
pub const LOCK_WAITERS: u32 = 1 << 31;
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
/// (Offset 64 is unused: the lock holder's id lives in [`LOCK`].)
/// Bytes the ring may hold, as set by `F_SETPIPE_SZ` (0: all of it).
/// Writers honour it; positions wrap at the full capacity.
pub const LIMIT: usize = 68;
/// (Offsets 72 to 103 are a notification queue's own words,
/// `atoll_proto::inotify`.)
///
/// Geometry generation: the server bumps it, under the ring lock, each
/// time it changes `NBLOCKS`/`BLOCKS` (a ring grown or shrunk by
/// `F_SETPIPE_SZ`, with the buffered bytes moved to their new places). A
/// client that took the lock compares it with the generation it read the
/// block list at and reads the list again when it moved.
pub const GEN: usize = 104;
/// Ticket of a large write (Cosh §5 *move*, one copy): the writer's
/// process id, state ([`TICKET_NONE`], …), the address and length of the
/// bytes in its memory and how many a reader has taken. Changed only under
/// the ring lock; a posted ticket's bytes come after the ring's.
pub const TICKET_PID: usize = 108;
pub const TICKET_STATE: usize = 112;
/// `u32`: 1 once a reader of this pipe could not read a writer's memory
/// (`process_vm_readv` refused): writers of the pipe post no more tickets.
pub const NO_TICKETS: usize = 116;
/// `u64` words of the ticket.
pub const TICKET_ADDR: usize = 120;
pub const TICKET_LEN: usize = 128;
pub const TICKET_DONE: usize = 136;
/// `u64`: the inode of the writer's pid namespace: a reader in another
/// namespace would read the wrong process by that id, so it refuses.
pub const TICKET_PIDNS: usize = 144;
/// No ticket posted.
pub const TICKET_NONE: u32 = 0;
/// Posted: readers take its bytes straight from the writer's memory.
pub const TICKET_ACTIVE: u32 = 1;
/// A reader was not permitted to read the writer's memory: the writer
/// takes the ticket back and writes the rest through the ring.
pub const TICKET_REFUSED: u32 = 2;
/// A reader could not read the writer's memory (a bad address): the
/// writer takes the ticket back and fails with `EFAULT` (or returns what
/// was taken).
pub const TICKET_FAILED: u32 = 3;
/// A reader's buffer, for both ends to copy at once (`atoll-client`
/// `pipesplit`): a blocking reader about to sleep on an empty pipe posts
/// its thread id, pid namespace, buffer address and length; a writer of a
/// large write that finds it posts its ticket and starts a *split*
/// (or a reader that finds a ticket starts one with its own buffer). In a
/// split the reader copies chunks of `SPLIT_CHUNK` bytes from the front
/// with `process_vm_readv`, the writer from the back into the reader's
/// buffer with `process_vm_writev`, claiming them from `SPLIT_CURSOR`.
/// State and fields change only under the ring lock; the cursor and
/// `SPLIT_WDONE` are atomics used outside it.
pub const RBUF_PID: usize = 152;
/// `u32`: [`RBUF_NONE`], [`RBUF_POSTED`] or [`RBUF_SPLIT`].
pub const RBUF_STATE: usize = 156;
/// `u64`: the reader's buffer.
pub const RBUF_ADDR: usize = 160;
/// `u32`: its length; in a split, the bytes the split moves.
pub const RBUF_LEN: usize = 168;
/// `u32` futex word: chunks the writer finished (bits 0-29), the writer
/// gave up on its last claimed chunk (bit 30), the reader sleeps waiting
/// for it (bit 31).
pub const SPLIT_WDONE: usize = 172;
/// `u64`: the inode of the reader's pid namespace.
pub const RBUF_PIDNS: usize = 176;
/// `u64`: claim cursor: the next chunk from the front (bits 0-23, the
/// reader claims upwards), one past the last unclaimed chunk (bits 24-47,
/// the writer claims downwards) and the split's generation (bits 48-63),
/// so that a claim meant for an ended split fails.
pub const SPLIT_CURSOR: usize = 184;
/// No reader's buffer posted.
pub const RBUF_NONE: u32 = 0;
/// A reader sleeps with its buffer posted.
pub const RBUF_POSTED: u32 = 1;
/// Both ends copy into the posted buffer (the reader ends it).
pub const RBUF_SPLIT: u32 = 2;
/// Bytes per claim of a split.
pub const SPLIT_CHUNK: usize = 128 * 1024;

/// `u64` pairs: where the ticket's writer keeps its image tag, and the
/// tag (`TICKET_TAG_AT`, `TICKET_TAG`); the same for the posted reader
/// (`RBUF_TAG_AT`, `RBUF_TAG`). A process id names a process across its
/// `execve`, and a thread id may then name the new program's thread: the
/// other end reads the tag in the same `process_vm_readv` as the bytes
/// (one call reads one address space) and counts a different tag as a
/// process that is gone (client `imagetag`).
pub const TICKET_TAG_AT: usize = 192;
pub const TICKET_TAG: usize = 200;
pub const RBUF_TAG_AT: usize = 208;
pub const RBUF_TAG: usize = 216;

/// `u32` array of `NBLOCKS` data-block indices.
pub const BLOCKS: usize = 224;
/// Data blocks of a new pipe (64 KiB, Linux's default pipe size).
pub const DEFAULT_DATA_BLOCKS: usize = 16;
/// Most data blocks of one pipe: as many as the header block has room for
/// (968 blocks, 3872 KiB).
pub const MAX_DATA_BLOCKS: usize = (crate::BLOCK_SIZE - BLOCKS) / 4;
/// Writes up to this size are atomic (POSIX `PIPE_BUF` on Linux).
pub const PIPE_BUF: usize = 4096;
