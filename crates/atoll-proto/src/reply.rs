//! Replies and notices: what a server answers, and what it tells a
//! client unasked (lookup-cache invalidations, Hare §3.7.2).

use serde::{Deserialize, Serialize};

use super::*;

#[derive(Serialize, Deserialize, Debug)]
pub enum Reply<'a> {
    Ok,
    Err(Errno),
    Entry {
        ino: InodeId,
        ftype: FileType,
    },
    Opened {
        desc: DescId,
        attr: Attr,
        created: bool,
        /// The inode may be watched (`inotify`) at this server: the client
        /// closes it with a round trip, so that `IN_CLOSE_WRITE` is queued
        /// before `close` returns.
        watched: bool,
        /// The server's count of served requests (`Control::served`) as it
        /// stood once it had served this `Open`, 0 where unknown: while the
        /// count still reads so, nothing has changed `attr` at this server
        /// (`client/src/openattr.rs`).
        served: u64,
    },
    Symlink {
        ino: InodeId,
        #[serde(borrow)]
        target: &'a [u8],
    },
    Linked {
        replaced: Option<(InodeId, FileType)>,
    },
    /// `freed_here`: the owner was this server and it already dropped the
    /// link; otherwise the client must send `Unref` to `ino.owner()`.
    Unlinked {
        ino: InodeId,
        ftype: FileType,
        freed_here: bool,
    },
    Renamed {
        moved: InodeId,
        ftype: FileType,
        replaced: Option<(InodeId, FileType, bool)>,
    },
    /// Packed `linux_dirent64` records whose `d_off` is the cookie to resume
    /// after that record; `end` when no entries remain on this server.
    Dirents {
        #[serde(borrow)]
        data: &'a [u8],
        end: bool,
        /// The directory may be watched (`inotify`) at this server: the
        /// client posts `InotifyAccessed` once its `getdents` returns.
        watched: bool,
    },
    Attr(Attr),
    Target(#[serde(borrow)] &'a [u8]),
    /// Extents of a read/write/map; `offset` is where the operation starts
    /// (e.g. the end of file for `O_APPEND`), `len` the bytes granted
    /// (short at end of file; 0 = EOF).
    Extents {
        offset: u64,
        len: u64,
        extents: Vec<Extent>,
        /// The file is watched (`inotify`) at this server, so the client
        /// posts, once the bytes are copied, `InotifyModified` for a
        /// `Write` (an event sent now could be read before the data is
        /// there) or `InotifyAccessed` for a `Read` (once per call).
        watched: bool,
        /// For `Write`: the write extends the file. Until the client posts
        /// `WriteDone` (the bytes are in), reads of the new part wait, as
        /// Linux raises a file's size only after copying the bytes.
        pending: bool,
    },
    Data(#[serde(borrow)] &'a [u8]),
    Written(u64),
    Offset(u64),
    Xattr(#[serde(borrow)] &'a [u8]),
    /// NUL-separated names, as `listxattr` returns them.
    XattrNames(#[serde(borrow)] &'a [u8]),
    /// `F_GETLK` answer: the conflicting lock, or `None` (unlocked).
    Lock(Option<LockSpec>),
    StatFs(StatFsInfo),
    Stats(ServerStats),
    /// A pipe's inode, its ends and its header block ([`pipe`]).
    Pipe {
        ino: InodeId,
        read: DescId,
        write: DescId,
        header: u32,
        /// For `PipeHeader` of a FIFO end opened only for reading (only
        /// for writing): how many write (read) opens the FIFO had counted
        /// when this end was opened, or `None` when a writer (reader) was
        /// open then. A blocking open waits only with `Some`, until the
        /// count moves on or a partner is open, so a partner that opened
        /// and closed in between is never missed (Linux's `fifo_open` and
        /// `wait_for_partner`, decided under the pipe lock). `None`
        /// otherwise.
        partner_opens: Option<u32>,
    },
    /// A directory's mode (`DirMode`, `Adapt::Begin`).
    DirMode(ModeInfo),
    /// Entries to move (`Adapt::Export`), packed by [`pack_moved`]; `next`
    /// is the cookie to export after next time, `None` when done.
    Exported {
        #[serde(borrow)]
        data: &'a [u8],
        next: Option<u64>,
    },
    /// A watch of a notification queue ([`inotify`]).
    Watch {
        wd: i32,
        ino: InodeId,
        mask: u32,
        queue: QueueRef,
        /// For `InotifyAddWatch`: a watch descriptor of the same inode
        /// that the client drops from the servers first (0: none). An
        /// `IN_ONESHOT` watch may have fired and gone on another server,
        /// so a new watch of its inode gets a new descriptor. For
        /// `InotifyRmWatch`: `wd` when the watch was gone already (its
        /// inode freed, or its `IN_ONESHOT` fired, on some server): the
        /// client drops the other servers' copies and fails with
        /// `EINVAL`, as Linux, whose mark went with the inode.
        replaced: i32,
    },
    /// `PipeState`: a pipe's state (copy island).
    PipeState(PipeStateInfo),
    /// `Names`: entries naming an inode, packed by [`pack_name`].
    Names(#[serde(borrow)] &'a [u8]),
    /// A `WriteData` piece not applied: an earlier piece of its [`Chain`]
    /// failed or was short, so the write ended before it.
    Skipped,
}

/// Append one entry naming an inode to `buf` (`dir:u64 len:u8 name`),
/// for [`Reply::Names`].
pub fn pack_name(buf: &mut Vec<u8>, dir: InodeId, name: &[u8]) {
    let name = &name[..name.len().min(255)];
    buf.extend_from_slice(&dir.0.to_le_bytes());
    buf.push(name.len() as u8);
    buf.extend_from_slice(name);
}

/// The entries of a [`Reply::Names`]: `(dir, name)`; stops at the first
/// malformed record.
pub fn parse_names(mut data: &[u8]) -> impl Iterator<Item = (InodeId, &[u8])> {
    std::iter::from_fn(move || {
        let dir = InodeId(u64::from_le_bytes(data.get(..8)?.try_into().ok()?));
        let len = *data.get(8)? as usize;
        let name = data.get(9..9 + len)?;
        data = &data[9 + len..];
        Some((dir, name))
    })
}

/// An entry of a directory: the old name of a rename across servers
/// (`Request::Link`), or the name a file is opened through
/// (`Request::OpenInode`).
#[derive(Serialize, Deserialize, Clone, Copy, PartialEq, Eq, Debug)]
pub struct EntryName<'a> {
    pub dir: InodeId,
    #[serde(borrow)]
    pub name: &'a [u8],
}

/// A notification queue as the servers that append to it know it: its
/// header block and its identity (`inotify::QUEUE_ID`).
#[derive(Serialize, Deserialize, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct QueueRef {
    pub header: u32,
    pub id: u64,
}

/// A server-initiated message in a client's inbox (Hare §3.7.2). Sent
/// without waiting; delivery is atomic, so a client that drains its inbox
/// before trusting its directory-lookup cache never uses an entry that was
/// removed before its call started.
#[derive(Serialize, Deserialize, Debug, PartialEq, Eq)]
pub enum Notice<'a> {
    /// The entry `name` of `dir` was removed or now names another inode:
    /// forget the cached lookup. An empty `name` (never an entry) means
    /// every cached entry of `dir`: the directory's owner changed its mode
    /// or owner, so search permission must be checked again (Hare §3.7.1).
    Invalidate {
        dir: InodeId,
        #[serde(borrow)]
        name: &'a [u8],
    },
    /// Forget every cached lookup (e.g. after the server lost track).
    InvalidateAll,
    /// The home server's policy wants `dir` swapped to `distributed`
    /// (Hare §6.1.2): the client coordinates the swap when it can.
    Adapt { dir: InodeId, distributed: bool },
}
