//! Change notification (`inotify`) on atoll paths: the layout of a
//! notification queue and of the records in it.
//!
//! A queue is a ring of buffer-cache blocks laid out as a pipe's
//! ([`crate::pipe`]: lock, `HEAD`/`TAIL`, `RSEQ`/`RSLEEP` wait word, block
//! list), whose only reader is the program's inotify descriptor and whose
//! writers are the file servers where changes happen (Hare §3.6 pipes as
//! server objects; Cosh §4-5 *share*: every server maps the whole buffer
//! cache, so a server appends into a ring another server allocated). The
//! bytes in the ring are Linux's `struct inotify_event` records, whole and
//! padded as Linux pads them, so a read copies them out unchanged.
//!
//! Extra header words, beside the pipe's (all little-endian, atomic):
//! * [`LAST`]: ring position + 1 of the last record appended (0: none),
//!   for Linux's merge of an event identical to the last one queued;
//! * [`QUEUE_ID`]: the queue's identity, stamped by its owner; a server
//!   appends only while it matches the watch it holds;
//! * [`DEAD`]: set by the owner when the last description of the queue
//!   closed; servers then drop their watches of it;
//! * [`FIRED`]: the `IN_ONESHOT` watches that fired, so that one server
//!   reports such a watch of a directory, which every server holds;
//! * [`HOLDERS`]: one bit per server that holds watches of the queue; the
//!   owner frees the blocks only once it is zero, so no server ever writes
//!   into a block that was given to another file (servers never message
//!   each other, Hare §6.2.3: this word is how they agree);
//! * [`COUNT`], [`MAX_EVENTS`], [`OVERFLOW_AT`]: the queue is bounded by
//!   events, as Linux's (`max_queued_events`), not by bytes: records
//!   unread, the limit, and where the unread `IN_Q_OVERFLOW` is;
//! * [`LENDERS`]: one bit per server that grew the ring with blocks of its
//!   own (the ring grows on demand, as far as [`MAX_QUEUE_BLOCKS`]); each
//!   frees its blocks once the queue is dead and [`HOLDERS`] is zero, and
//!   the owner frees the header only once this is zero too.

pub use crate::pipe::{
    BLOCKS, DEFAULT_DATA_BLOCKS, GEN, HEAD, LOCK, MAX_DATA_BLOCKS, NBLOCKS, READERS, RSEQ, RSLEEP,
    TAIL, WRITERS,
};

/// `u64`: ring position + 1 of the last record appended (0: none).
pub const LAST: usize = 72;
/// `u64`: the queue's identity (owner's inode id of the queue).
pub const QUEUE_ID: usize = 80;
/// `u32`: 1 once the queue's last description closed.
pub const DEAD: usize = 88;
/// `u64`: bit `s` set while server `s` holds watches of this queue.
pub const HOLDERS: usize = 96;

/// `u32`: records in the ring not yet read (an `IN_Q_OVERFLOW` counts,
/// as in Linux's `q_len`). Writers add, the reader subtracts, both under
/// the ring lock.
pub const COUNT: usize = 92;

/// Bit array (`u32` words) of the `IN_ONESHOT` watches of the queue that
/// fired, by watch descriptor: a directory's watch is held by every
/// server, and the one that sets the bit (compare-and-swap) is the one
/// that reports; the others drop their copy unheard. At the end of the
/// header block, past the block list and the queue's own words.
pub const FIRED: usize = crate::BLOCK_SIZE - FIRED_BITS / 8;
/// Watch descriptors [`FIRED`] covers (a later one fires on each server).
pub const FIRED_BITS: usize = 4096;

/// `u64`: bit `s` set while server `s` has lent blocks to the ring.
pub const LENDERS: usize = FIRED - 24;
/// `u32`: most records the queue holds before `IN_Q_OVERFLOW` (Linux's
/// `max_queued_events` when the queue was made; `u32::MAX` for
/// `FAN_UNLIMITED_QUEUE`). Stamped by the owner at creation.
pub const MAX_EVENTS: usize = FIRED - 16;
/// `u32`: 1 once a reader appended the `IN_UNMOUNT` records of a queue
/// whose instance is gone (client `inotify/unmount.rs`).
pub const UNMOUNTED: usize = FIRED - 12;
/// `u64`: ring position + 1 of the `IN_Q_OVERFLOW` record appended last
/// (unread while above `TAIL`): Linux queues one overflow event at a
/// time, never a second while the first waits.
pub const OVERFLOW_AT: usize = FIRED - 8;

/// Data blocks a queue's ring may grow to: as many as its header has room
/// for between the block list and the queue's own words (834 blocks,
/// 3336 KiB: 16384 records of names up to 191 bytes, 175 for fanotify's).
pub const MAX_QUEUE_BLOCKS: usize = (LENDERS - BLOCKS) / 4;
const _: () = assert!(MAX_QUEUE_BLOCKS <= MAX_DATA_BLOCKS);

/// Data blocks of a new queue: 64 KiB, grown when more records wait.
pub const DATA_BLOCKS: usize = DEFAULT_DATA_BLOCKS;

/// Linux's default `max_queued_events` (inotify and fanotify alike).
pub const DEFAULT_MAX_EVENTS: u32 = 16384;

/// Size of `struct inotify_event` without its name.
pub const EVENT_HEADER: usize = 16;

// The mask bits of `<sys/inotify.h>`, as Linux numbers them.
pub const IN_ACCESS: u32 = 0x0000_0001;
pub const IN_MODIFY: u32 = 0x0000_0002;
pub const IN_ATTRIB: u32 = 0x0000_0004;
pub const IN_CLOSE_WRITE: u32 = 0x0000_0008;
pub const IN_CLOSE_NOWRITE: u32 = 0x0000_0010;
pub const IN_OPEN: u32 = 0x0000_0020;
pub const IN_MOVED_FROM: u32 = 0x0000_0040;
pub const IN_MOVED_TO: u32 = 0x0000_0080;
pub const IN_CREATE: u32 = 0x0000_0100;
pub const IN_DELETE: u32 = 0x0000_0200;
pub const IN_DELETE_SELF: u32 = 0x0000_0400;
pub const IN_MOVE_SELF: u32 = 0x0000_0800;
pub const IN_UNMOUNT: u32 = 0x0000_2000;
pub const IN_Q_OVERFLOW: u32 = 0x0000_4000;
pub const IN_IGNORED: u32 = 0x0000_8000;
pub const IN_ONLYDIR: u32 = 0x0100_0000;
pub const IN_DONT_FOLLOW: u32 = 0x0200_0000;
pub const IN_EXCL_UNLINK: u32 = 0x0400_0000;
pub const IN_MASK_CREATE: u32 = 0x1000_0000;
pub const IN_MASK_ADD: u32 = 0x2000_0000;
pub const IN_ISDIR: u32 = 0x4000_0000;
pub const IN_ONESHOT: u32 = 0x8000_0000;
/// Every event a watch may ask for.
pub const IN_ALL_EVENTS: u32 = 0x0000_0fff;

/// Bit of a watch's mask (beside the `IN_*` bits, unused by Linux): the
/// watch is a `fanotify` mark, whose records carry the inode the event is
/// about ([`encode_object`]), since a fanotify reader reports that object
/// (a descriptor of it, or its file handle), not only a watch and a name.
pub const WATCH_FANOTIFY: u32 = 0x0800_0000;

/// Bit of a watch's mask: the watch is a dnotify registration
/// (`fcntl(F_NOTIFY)`), whose events the servers play on a host directory
/// instead of appending records (`Request::DnotifyRegister`).
pub const WATCH_DNOTIFY: u32 = 0x0040_0000;

/// The events a dnotify registration's watch asks for: every change
/// Linux's dnotify can signal (`DN_ACCESS`, `DN_MODIFY`, `DN_ATTRIB`,
/// `DN_CREATE`, `DN_DELETE`, `DN_RENAME`); which of them signal is the
/// kernel's choice, by the registration's mask.
pub const DNOTIFY_EVENTS: u32 =
    IN_ACCESS | IN_MODIFY | IN_ATTRIB | IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO;

/// Open flag (beside the `O_*` bits, unused by Linux's `open`): a
/// description that produces no events, as Linux's `FMODE_NONOTIFY`
/// marks the descriptors a fanotify reader gets with its events (their
/// opens, reads and closes must not make events of their own).
pub const OPEN_NONOTIFY: u32 = 0x0400_0000;

/// Open flag: a program opened to be run (`execve`), Linux's
/// `__FMODE_EXEC` (no `O_*` flag has this bit): its open is also
/// [`FS_OPEN_EXEC`].
pub const OPEN_EXEC: u32 = 0x20;

/// Event bit of an open to run a program (Linux's `FS_OPEN_EXEC`, which
/// fanotify reports as `FAN_OPEN_EXEC`; inotify has none: records for
/// inotify watches go without it). Only fanotify marks ask for it.
pub const FS_OPEN_EXEC: u32 = 0x0000_1000;

/// Every event bit a watch's mask may hold.
pub const WATCH_EVENTS: u32 = IN_ALL_EVENTS | FS_OPEN_EXEC;

/// The key of a watch of every inode of the mount (`fanotify`'s
/// `FAN_MARK_MOUNT`/`FAN_MARK_FILESYSTEM`): events on objects and
/// directory-entry events, each once, never an event on a child as seen
/// by its directory. No inode has this id (its server bits are all set).
pub const ALL_INODES: crate::InodeId = crate::InodeId(u64::MAX);

/// Bytes a fanotify record holds between the header and the name: the
/// object's inode id and the pid of the process that made the change.
pub const OBJECT_LEN: usize = 12;

/// Length of the record for an event with `name` (empty: none): the
/// header, then the name with its NUL padded to a multiple of 16 bytes,
/// as Linux's `copy_event_to_user` pads it.
pub fn record_len(name: &[u8]) -> usize {
    EVENT_HEADER + name_field_len(name)
}

fn name_field_len(name: &[u8]) -> usize {
    if name.is_empty() {
        0
    } else {
        (name.len() + 1).next_multiple_of(EVENT_HEADER)
    }
}

/// Append the record of one event to `out`.
pub fn encode(out: &mut Vec<u8>, wd: i32, mask: u32, cookie: u32, name: &[u8]) {
    let len = name_field_len(name);
    out.extend_from_slice(&wd.to_le_bytes());
    out.extend_from_slice(&mask.to_le_bytes());
    out.extend_from_slice(&cookie.to_le_bytes());
    out.extend_from_slice(&(len as u32).to_le_bytes());
    out.extend_from_slice(name);
    out.resize(out.len() + len - name.len(), 0);
}

/// Append the record of one event for a fanotify mark: as [`encode`], with
/// the inode the event is about and the changer's pid before the name
/// (the length field counts them).
pub fn encode_object(
    out: &mut Vec<u8>,
    (wd, mask, cookie): (i32, u32, u32),
    object: u64,
    pid: u32,
    name: &[u8],
) {
    let len = OBJECT_LEN + name_field_len(name);
    out.extend_from_slice(&wd.to_le_bytes());
    out.extend_from_slice(&mask.to_le_bytes());
    out.extend_from_slice(&cookie.to_le_bytes());
    out.extend_from_slice(&(len as u32).to_le_bytes());
    out.extend_from_slice(&object.to_le_bytes());
    out.extend_from_slice(&pid.to_le_bytes());
    out.extend_from_slice(name);
    out.resize(out.len() + len - OBJECT_LEN - name.len(), 0);
}

/// `(wd, mask, cookie, name length field)` of a record header.
pub fn decode_header(h: &[u8; EVENT_HEADER]) -> (i32, u32, u32, u32) {
    let w = |k: usize| u32::from_le_bytes([h[k], h[k + 1], h[k + 2], h[k + 3]]);
    (w(0) as i32, w(4), w(8), w(12))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_padded_as_linux_pads_them() {
        let mut v = Vec::new();
        encode(&mut v, 3, IN_CREATE, 0, b"abc");
        assert_eq!(v.len(), 32);
        assert_eq!(record_len(b"abc"), 32);
        assert_eq!(&v[16..20], b"abc\0");
        assert!(v[20..].iter().all(|&b| b == 0));
        let h: [u8; 16] = v[..16].try_into().unwrap();
        assert_eq!(decode_header(&h), (3, IN_CREATE, 0, 16));
        v.clear();
        encode(&mut v, -1, IN_Q_OVERFLOW, 0, b"");
        assert_eq!(v.len(), 16);
        // A 15-byte name and its NUL fill one 16-byte unit exactly.
        assert_eq!(record_len(&[b'x'; 15]), 32);
        assert_eq!(record_len(&[b'x'; 16]), 48);
    }
}
