//! Requests: the frame a client sends and one variant per operation
//! (Hare Table 4.2, coalesced where one server can do it all, §3.7.4).

use serde::{Deserialize, Serialize};

use super::*;

/// A request frame: the header every request carries plus the operation.
#[derive(Serialize, Deserialize, Debug)]
pub struct RequestFrame<'a> {
    /// Chosen by the client; echoed in the reply.
    pub id: u64,
    pub cred: Cred,
    /// The sending process (its pid as it sees it; 0: not said): the
    /// `pid` fanotify reports with the changes the request makes.
    pub pid: u32,
    #[serde(borrow)]
    pub req: Request<'a>,
    /// Attributes of inodes owned by other servers that this request's
    /// checks need (see [`Vouched`]); empty for almost every request.
    pub vouched: std::borrow::Cow<'a, [Vouched]>,
}

/// Request ids with this bit set are *posted*: the server serves them but
/// sends no reply, and the client never waits (e.g. a `Close` whose result
/// nobody reads). A reply the client would never read would otherwise sit
/// in its reply ring until the next call skips it.
pub const POSTED: u64 = 1 << 63;

/// True if the request with this id wants no reply ([`POSTED`]).
pub const fn is_posted(id: u64) -> bool {
    id & POSTED != 0
}

/// A reply frame.
#[derive(Serialize, Deserialize, Debug)]
pub struct ReplyFrame<'a> {
    pub id: u64,
    #[serde(borrow)]
    pub reply: Reply<'a>,
}

/// One message type per operation (Hare Table 4.2, coalesced where noted).
/// The comment on each variant names the server it goes to and its reply.
#[derive(Serialize, Deserialize, Debug, Clone)]
pub enum Request<'a> {
    /// Any server. Register supplementary group list number `set` of the
    /// session (credentials are per thread, so a session may hold several;
    /// a request's [`Cred::groups`] names one). → `Ok`
    SetGroups {
        set: u32,
        groups: Vec<u32>,
    },

    // ---- names: sent to `entry_server(dir, name)` ----
    /// Resolve one component (Hare RESOLVE). `name` may be `..` (answered
    /// by the directory's home server from the parent it records). → `Entry`
    Lookup {
        dir: InodeId,
        #[serde(borrow)]
        name: &'a [u8],
    },
    /// Open (and with `O_CREAT` create) `name` in `dir` (Hare OPEN+CREATE+
    /// ADD_MAP coalesced). A new inode is placed on this server. If the entry
    /// names an inode owned by another server the reply is `Entry` and the
    /// client follows with `OpenInode`; a symlink (without `O_NOFOLLOW`)
    /// gives `Symlink`. A new file's mode is `perm` less the umask, or,
    /// when `dir` has a default ACL, masked by that ACL instead (Linux's
    /// `posix_acl_create`; see [`Inherit`]). → `Opened` | `Entry` | `Symlink`
    Open {
        dir: InodeId,
        #[serde(borrow)]
        name: &'a [u8],
        flags: u32,
        perm: u32,
        umask: u32,
        #[serde(borrow)]
        inherit: Inherit<'a>,
    },
    /// Create a directory, symlink, FIFO, socket or device node (Hare MKDIR,
    /// SYMLINK). The inode is placed on this server; for a directory `home`
    /// picks the server for its entries and `distributed` spreads them.
    /// `target` is a symlink's target, or the address a Unix socket was
    /// bound with (kept for `getsockname`); ignored for other types.
    /// The mode is `perm` less `umask`, or masked by `dir`'s default ACL
    /// (as for `Open`); a symlink's is always `0777`. → `Entry`
    MakeNode {
        dir: InodeId,
        #[serde(borrow)]
        name: &'a [u8],
        ftype: FileType,
        perm: u32,
        rdev: u64,
        #[serde(borrow)]
        target: &'a [u8],
        home: u8,
        /// A new directory's width: 0, a plain one; `w`, distributed over
        /// servers `0..w` for its whole life (the member count the client
        /// saw; recorded in the id, `InodeId::spread`). Chosen by the
        /// client, so a replay of the journal makes the same id whatever
        /// the member count then.
        spread: u8,
        umask: u32,
        #[serde(borrow)]
        inherit: Inherit<'a>,
    },
    /// Add an entry for an existing inode (Hare ADD_MAP; hard links and the
    /// first half of a cross-server rename). With `replace`, an existing
    /// non-directory entry (or empty directory, for directory moves that the
    /// client validated) is replaced atomically and returned. Link counts:
    /// if `ino` is owned by this server its count is raised here (otherwise
    /// the client sends `Ref` to the owner first); a replaced inode owned by
    /// this server loses its link here (otherwise the client sends `Unref`).
    /// → `Linked`
    Link {
        dir: InodeId,
        #[serde(borrow)]
        name: &'a [u8],
        ino: InodeId,
        ftype: FileType,
        replace: bool,
        /// For the first half of a rename across servers: the old entry,
        /// so that this server reports the move (`IN_MOVED_FROM` then
        /// `IN_MOVED_TO`, one cookie) in Linux's order; the `Unlink` that
        /// follows reports nothing.
        #[serde(borrow)]
        moved_from: Option<EntryName<'a>>,
    },
    /// Remove an entry (Hare RM_MAP). If `expect` is set the entry must
    /// still name that inode (`ESTALE` otherwise). If the inode is owned by
    /// this server its link count drops here; otherwise the reply says so
    /// and the client sends `Unref` to the owner. `Directory` removing a
    /// name of a directory that another entry still names (the second half
    /// of a cross-server move, after `Link`) skips the emptiness check.
    /// → `Unlinked`
    Unlink {
        dir: InodeId,
        #[serde(borrow)]
        name: &'a [u8],
        kind: UnlinkKind,
        expect: Option<InodeId>,
    },
    /// Rename when both entries live on this server (atomic, one message).
    /// `flags`: `RENAME_NOREPLACE`, `RENAME_EXCHANGE`. → `Renamed`
    Rename {
        olddir: InodeId,
        #[serde(borrow)]
        oldname: &'a [u8],
        newdir: InodeId,
        #[serde(borrow)]
        newname: &'a [u8],
        flags: u32,
    },
    /// Read entries of `dir` held by this server, starting at `cookie`
    /// (0 = start; `.` and `..` are produced by the home server only).
    /// `epoch` is the mode epoch the client routed by ([`ModeInfo`]); a
    /// server that knows another answers [`Errno::EMODE`]. → `Dirents`
    ReadDir {
        dir: InodeId,
        cookie: u64,
        max_bytes: u32,
        epoch: u32,
    },

    // ---- directories: sent to the directory's home server ----
    /// Record a moved directory's new parent (for `..`). → `Ok`
    SetParent {
        dir: InodeId,
        parent: InodeId,
    },
    /// Phase 1/2 of rmdir (Hare §3.4.1): mark the directory's entries on
    /// this server for deletion; fails with `ENOTEMPTY` if any entry exists.
    /// Creations in a marked directory wait for the outcome: the server
    /// answers them `EAGAIN` and the client retries. A second `MarkRmdir`
    /// while marked also answers `EAGAIN`: a concurrent rmdir (or a rename
    /// over the directory) waits for the first one's outcome and then sees
    /// `ENOENT` (committed) or decides itself (aborted). A mark whose session
    /// dies is aborted. → `Ok`
    MarkRmdir {
        dir: InodeId,
        /// The mode epoch the client chose the marked servers by
        /// (`EMODE` if stale).
        epoch: u32,
    },
    /// Phase 3 of rmdir: commit (drop the directory's entries) or abort.
    /// → `Ok`
    FinishRmdir {
        dir: InodeId,
        commit: bool,
    },

    // ---- inodes: sent to `ino.owner()` ----
    /// → `Attr` (Hare FSTAT)
    GetAttr {
        ino: InodeId,
    },
    /// chmod/chown/truncate/utimens with Linux's permission rules. → `Attr`
    SetAttr {
        ino: InodeId,
        set: SetAttr,
        /// The entry a path named, if the change was made by path: the
        /// owner reports it to that directory's watchers (`inotify`) also
        /// when the entry is held on another server.
        #[serde(borrow)]
        via: Option<EntryName<'a>>,
    },
    /// `access`/`faccessat` check for `mask` (R_OK|W_OK|X_OK|F_OK), with
    /// `effective` false meaning the real ids (already in `cred`). → `Ok`
    Access {
        ino: InodeId,
        mask: u32,
    },
    /// A symlink's target, or the bind address of a socket node.
    /// → `Target`
    ReadLink {
        ino: InodeId,
    },
    /// Link count +1 (cross-server hard link, or the first step of a
    /// cross-server directory move). A directory has a second name only
    /// while one move of it is under way: `EAGAIN` while another is (the
    /// client waits). The owner undoes a directory's `Ref` if the session
    /// dies before its matching `Unref`. → `Attr`
    Ref {
        ino: InodeId,
        /// A hard link's count rather than a move's first step: the owner
        /// reports `IN_ATTRIB` to the inode's watches and the mount's
        /// marks, as Linux's `fsnotify_link_count` (a rename reports none).
        link: bool,
    },
    /// Link count −1; frees the inode when unreferenced (Hare DESTROY).
    /// → `Ok`
    Unref {
        ino: InodeId,
        /// The entry an `unlink`/`rmdir` removed on another server (which
        /// then reported nothing): this owner reports `IN_DELETE` to that
        /// directory's watchers after the inode's own `IN_DELETE_SELF`, in
        /// Linux's order (`inotify`).
        #[serde(borrow)]
        via: Option<EntryName<'a>>,
        /// A rename replaced the name (its entry on another server): the
        /// owner reports the link count (`IN_ATTRIB`, Linux's
        /// `fsnotify_link_count`) before the inode's `IN_DELETE_SELF`.
        /// Without it, and without `via`, the count moved for a rename's
        /// own bookkeeping or an undo, which Linux does not report.
        replaced: bool,
    },
    /// Open a description for an inode (after `Open` answered `Entry`, or
    /// for `O_PATH`/reopen of `/proc/self/fd`). → `Opened`
    OpenInode {
        ino: InodeId,
        flags: u32,
        /// The entry the client resolved to reach `ino`, if any: changes
        /// made through this description are reported to that
        /// directory's watchers (`inotify`), as Linux reports them to the
        /// parent of the name a file was opened through.
        #[serde(borrow)]
        via: Option<EntryName<'a>>,
    },
    /// Extended attributes. → `Ok` | `Xattr` | `XattrNames`
    GetXattr {
        ino: InodeId,
        #[serde(borrow)]
        name: &'a [u8],
    },
    SetXattr {
        ino: InodeId,
        #[serde(borrow)]
        name: &'a [u8],
        #[serde(borrow)]
        value: &'a [u8],
        flags: u32,
        /// The entry a path named, if the change was made by path: the
        /// owner reports it to that directory's watchers (`inotify`) also
        /// when the entry is held on another server.
        #[serde(borrow)]
        via: Option<EntryName<'a>>,
    },
    ListXattr {
        ino: InodeId,
    },
    RemoveXattr {
        ino: InodeId,
        #[serde(borrow)]
        name: &'a [u8],
        /// The entry a path named, if the change was made by path: the
        /// owner reports it to that directory's watchers (`inotify`) also
        /// when the entry is held on another server.
        #[serde(borrow)]
        via: Option<EntryName<'a>>,
    },
    /// Allocate (or with `FALLOC_FL_KEEP_SIZE`/`PUNCH_HOLE` modes) space.
    /// → `Attr`
    Fallocate {
        ino: InodeId,
        mode: u32,
        offset: u64,
        len: u64,
    },
    /// Block list of `[offset, offset+len)` for `mmap` (Hare BLOCKS);
    /// `allocate` (shared mappings) backs holes and pages past the end with
    /// blocks the file retains for its mappings, all of the range's holes
    /// or none (`ENOMEM`). → `Extents`
    MapBlocks {
        ino: InodeId,
        offset: u64,
        len: u64,
        allocate: bool,
    },

    // ---- open file descriptions: sent to `desc.server()` ----
    /// Reserve a read of up to `len` bytes at `offset` (or at the shared
    /// offset, advancing it). The client copies the data straight from the
    /// buffer-cache blocks returned. → `Extents`
    Read {
        desc: DescId,
        len: u64,
        offset: Option<u64>,
    },
    /// Reserve a write of `len` bytes (allocating blocks, extending the
    /// size, honouring `O_APPEND`); the client then copies into the blocks.
    /// `fsize`: the writer's `RLIMIT_FSIZE`, applied at the offset the
    /// server chooses (short at the limit, `EFBIG` at or past it).
    /// → `Extents`
    Write {
        desc: DescId,
        len: u64,
        offset: Option<u64>,
        fsize: Option<u64>,
    },
    /// Direct-cache ablation: data travels inside the messages. `report`:
    /// the first request of the program's call, which reports the read
    /// (`IN_ACCESS`, once per call as Linux's `fsnotify_access`) if it
    /// returns bytes. → `Data`
    ReadData {
        desc: DescId,
        len: u32,
        offset: Option<u64>,
        report: bool,
    },
    /// `fsize` as for `Write`; `chain`: one piece of a larger write sent
    /// with others in flight ([`Chain`]). → `Written`, or `Skipped` for a
    /// piece of a chain that was already cut short.
    WriteData {
        desc: DescId,
        #[serde(borrow)]
        data: &'a [u8],
        offset: Option<u64>,
        fsize: Option<u64>,
        chain: Option<Chain>,
    },
    /// → `Offset` (Hare LSEEK; `SEEK_DATA`/`SEEK_HOLE` included)
    Seek {
        desc: DescId,
        offset: i64,
        whence: u32,
    },
    /// Change status flags (`F_SETFL`: `O_APPEND`, `O_NONBLOCK`, …). → `Ok`
    SetFlags {
        desc: DescId,
        flags: u32,
    },
    /// Another reference to the description for session `to` (fork, the
    /// `execve` hand-over; Hare DUP), which holds `held` references to it
    /// before this one. Idempotent, so a client may send it again after a
    /// server died and its successor answered `EIO` (applied or not,
    /// fos §3.5): `to` holding `held` gets one more, holding `held + 1`
    /// already is `Ok` without change, holding anything else is `ESTALE`.
    /// → `Ok`
    Share {
        desc: DescId,
        to: SessionId,
        held: u32,
    },
    /// Drop this session's reference (Hare CLOSE). Also releases the
    /// POSIX locks owned by `Process(session)` on the inode (Linux close
    /// semantics); a client closing one of several fds that share a
    /// description without sending `Close` sends `SetLock` `F_UNLCK` for
    /// the whole file itself. → `Ok`
    Close {
        desc: DescId,
    },
    /// Record and `flock` locks. `wait` is not supported in the server (the
    /// client retries `EAGAIN` for `F_SETLKW`). → `Ok` | `Lock`
    SetLock {
        desc: DescId,
        lock: LockSpec,
    },
    GetLock {
        desc: DescId,
        lock: LockSpec,
    },

    // ---- whole server ----
    /// `statfs` of this server's share. → `StatFs`
    StatFs,
    /// Counters for `atoll status` / `--stats`. → `Stats`
    Stats,

    // ---- pipes (Hare §3.6; layout in [`pipe`]) ----
    /// Any server (the client picks one). Create an anonymous pipe: an
    /// unnamed FIFO inode, its ring, and two descriptions (read end with
    /// `O_RDONLY`, write end with `O_WRONLY`, both with `flags &
    /// O_NONBLOCK`) referenced by this session. → `Pipe`
    Pipe {
        flags: u32,
    },
    /// `desc.server()`. The ring of an open FIFO description (after `Open`
    /// or `OpenInode` of a FIFO answered `Opened`). → `Pipe` with `read`
    /// and `write` both `desc`
    PipeHeader {
        desc: DescId,
    },

    // ---- change notification (inotify; layout in [`inotify`]) ----
    /// Any server (the client picks one). Create a notification queue: an
    /// anonymous inode, its ring and one read-only description (`flags &
    /// O_NONBLOCK`) referenced by this session, holding at most
    /// `max_events` records (`inotify::MAX_EVENTS`). → `Pipe` with `read`
    /// and `write` both the description
    InotifyInit {
        flags: u32,
        max_events: u32,
    },
    /// `desc.server()`, the queue's owner. Give `ino` its watch descriptor
    /// in the queue behind `desc` (one inode, one descriptor) and work out
    /// the watch's mask (`IN_MASK_ADD` adds to it, `IN_MASK_CREATE` on an
    /// existing watch is `EEXIST`). The client then registers the watch
    /// with the servers that see changes of `ino`. → `Watch`
    InotifyAddWatch {
        desc: DescId,
        ino: InodeId,
        mask: u32,
    },
    /// `desc.server()`. Forget watch `wd` and queue its `IN_IGNORED`
    /// (`EINVAL` for an unknown `wd`); the client then drops it from the
    /// servers it was registered with. → `Watch` (mask: the watch's)
    InotifyRmWatch {
        desc: DescId,
        wd: i32,
    },
    /// The servers that see changes of `ino`: its owner (changes of the
    /// inode itself) and, for a directory, every server (its entries, and
    /// the inodes they name, may live on any). Record watch `wd` of `queue`
    /// with `mask`, or drop it when `mask` is 0. → `Ok`
    InotifyRegister {
        queue: QueueRef,
        ino: InodeId,
        wd: i32,
        mask: u32,
    },
    /// `desc.server()`, posted after the client copied the bytes of a
    /// `Write` whose reply said `watched`: the file was modified
    /// (`IN_MODIFY`). → `Ok`
    InotifyModified {
        desc: DescId,
    },
    /// `desc.server()`, posted after a read or `getdents` through `desc`
    /// returned bytes, when a reply of that call said `watched`: the file
    /// was read (`IN_ACCESS`, once per call as Linux's `fsnotify_access`).
    /// → `Ok`
    InotifyAccessed {
        desc: DescId,
    },
    /// `desc.server()`, after the `Link` of a file made and opened by
    /// creation affinity (`CreateInode` with `open`, whose reply said
    /// `watched`): `desc` was opened through entry `via`, held on another
    /// server; report its open (`IN_OPEN`, after the `IN_CREATE` the
    /// `Link` reported, Linux's order). → `Ok`
    InotifyNamed {
        desc: DescId,
        #[serde(borrow)]
        via: EntryName<'a>,
    },
    /// `dir.owner()`, posted after a name change in `dir` whose entry
    /// another server holds: mtime and ctime to `at`, the client's clock
    /// when the change was answered, as Linux sets them on the parent of a
    /// name created, removed or moved. Posted, so it may be served after a
    /// `utimensat` another process made once it saw the change: the server
    /// keeps the later of the two (`Inode::mtime_set`). Reports no event
    /// (the entry's server reported the change itself). → `Attr`
    Touched {
        dir: InodeId,
        at: Timespec,
    },
    /// `ino.owner()`, posted after the client copied the bytes of a
    /// `Write` whose reply said `pending` (it extended the file): reads of
    /// `[offset, offset + len)` by anyone, which waited for the bytes, may
    /// now see them. Names the inode, not the description: it may be
    /// served after a `Close` the client sent on another lane. → `Ok`
    WriteDone {
        ino: InodeId,
        offset: u64,
        len: u64,
    },

    // ---- statistics ----
    /// Any server. Add a client's event counts (Hare §5.4 techniques seen
    /// only by clients) to this server's `ServerStats::counters`. → `Ok`
    ClientCounters(ClientCounters),

    // ---- hybrid file descriptors ----
    /// `desc.server()`. If this session is the description's only holder
    /// (the processes it was shared with are gone), hand its offset back to
    /// the client, which keeps it from now on (Hare §3.5.1); the client
    /// seeks the server's copy again before it shares the description.
    /// → `Offset` | `EBUSY` (still shared)
    Reclaim {
        desc: DescId,
    },

    // ---- cross-server directory moves ----
    /// The new name's server (`entry_server(dir, name)`), after the old
    /// name of a directory moved there by `Link` was removed (`Unlink` with
    /// [`UnlinkKind::Move`]): the new name is final. Until then a `Link`
    /// that gave a directory a second name is provisional, and the server
    /// removes it again if the session dies (the move never happened).
    /// → `Ok`
    MoveDone {
        dir: InodeId,
        #[serde(borrow)]
        name: &'a [u8],
    },
    /// Server 0. Serializes moves of directories between different parents,
    /// as Linux's `s_vfs_rename_mutex`: the client checks that a directory
    /// does not move into its own subtree by walking `..`, which only such
    /// moves change, so the check holds until its move is done. `acquire`
    /// answers `EAGAIN` while another session holds it (the client waits);
    /// released by `acquire: false` or the holder's death. → `Ok`
    RenameLock {
        acquire: bool,
    },
    /// `entry_server(dir, name)`, one half of a cross-server
    /// `RENAME_EXCHANGE`: the entry must name `expect` (`ESTALE` otherwise)
    /// and now names `ino` (of type `ftype`). No link count changes: each
    /// inode trades one name for the other's. Provisional like a
    /// directory's `Link` until `MoveDone`: if the session dies first, the
    /// entry names `expect` again. → `Ok`
    Relink {
        dir: InodeId,
        #[serde(borrow)]
        name: &'a [u8],
        ino: InodeId,
        ftype: FileType,
        expect: InodeId,
    },

    // ---- creation affinity (Hare §3.7.5) ----
    /// The creator's designated local server, when the entry's server is
    /// on another socket. First half of a two-message creation: make an
    /// inode here that no entry names yet, *pending* for this session
    /// (the session's death, or `Unref`, frees it), and with `open` also
    /// open a description of it (`open` with `O_CREAT`; the new file is
    /// opened with the requested access whatever its mode, as POSIX).
    /// The client then sends `Link` to the entry's server and, once that
    /// succeeded, `Adopt` here. `dir` is the parent (for the set-group-id
    /// rule and permission checks when this server owns it). Not for
    /// directories. → `Opened` (with `open`) | `Entry`
    CreateInode {
        dir: InodeId,
        /// The name the client then links it under in `dir`: a description
        /// opened here was opened through that entry, so a watch of `dir`
        /// added later hears of its changes and close (`inotify`).
        #[serde(borrow)]
        name: &'a [u8],
        ftype: FileType,
        /// Permission bits as asked for; `umask` or `dir`'s default ACL
        /// masks them (as for `Open`).
        perm: u32,
        rdev: u64,
        #[serde(borrow)]
        target: &'a [u8],
        /// Open flags, for `open` with `O_CREAT`.
        open: Option<u32>,
        umask: u32,
        #[serde(borrow)]
        inherit: Inherit<'a>,
    },
    /// `ino.owner()`, usually posted. Second half: the entry `Link` added
    /// for a pending inode is its first link. A no-op when the inode is no
    /// longer pending (that name was removed meanwhile). → `Ok`
    Adopt {
        ino: InodeId,
    },
    /// `dir.owner()`. `open(dir, O_TMPFILE)`: a regular file no name
    /// reaches (link count 0), opened with `flags`; freed at its last
    /// close unless `linkat` gives it a name first, which it may (Linux's
    /// `I_LINKABLE`) unless `flags` has `O_EXCL`. → `Opened`
    CreateTmpfile {
        dir: InodeId,
        /// Permission bits as asked for; `umask` or `dir`'s default ACL
        /// (which this server, the owner, holds) masks them.
        perm: u32,
        flags: u32,
        umask: u32,
    },
    /// Every server, from an image about to `execve`: the POSIX record
    /// locks this session holds now belong to session `to`, the one the
    /// new image runs in. Linux keeps a process's record locks across
    /// `execve`; the old session ends with the old image and would
    /// otherwise release them. → `Ok`
    PassLocks {
        to: SessionId,
    },
    /// `ino.owner()`, from an image about to `execve` atoll program `ino`:
    /// session `to` (the new image's) runs it. While any session does,
    /// opening it for writing and truncating it give `ETXTBSY`; and it
    /// cannot start while a description has it open for writing (Linux's
    /// `deny_write_access`). Ends with the session. A mark, not a count:
    /// sent again after the server that applied it died, it changes
    /// nothing (and is not refused for a writer that its first send
    /// already kept out). → `Ok`
    Exec {
        ino: InodeId,
        to: SessionId,
    },

    // ---- mappings: sent to `ino.owner()` ----
    /// A process maps `ino` (`mmap` of an atoll file, shared or private):
    /// one more mapping reference for session `to`, the caller's own at
    /// `mmap` (sent before the first `MapBlocks`), or at `fork` the
    /// child's, which needs the caller to hold one itself. While any
    /// session maps an inode, no block it ever had goes to another file:
    /// an unlinked inode lives on after its last close, and blocks cut by
    /// truncate or hole punch are zeroed and retained at their offsets
    /// until the last unmap (a page still maps them; a later write there
    /// lands in the same block). `MapBlocks` needs such a reference.
    /// Each reference is named by `mapping`, the number the process gave
    /// that `mmap` call (unique in the process, and so in its session and
    /// in a forked child's, which inherits the numbers with the mappings):
    /// a `Map` of a mapping `to` already holds changes nothing, so one
    /// sent again after the server that applied it died counts once
    /// (fos §3.5). → `Ok`
    Map {
        ino: InodeId,
        to: SessionId,
        mapping: u64,
    },
    /// The process unmapped the last range of mapping `mapping` of `ino`
    /// (`munmap`, `mremap`, a `MAP_FIXED` mapping over it): drops that
    /// reference of the caller's session; one it does not hold (gone
    /// already: a resend) changes nothing. A session's death drops all of
    /// them, so `exit`, `execve` (a new session) and `SIGKILL` need no
    /// message. → `Ok`
    Unmap {
        ino: InodeId,
        mapping: u64,
    },
    /// Owner of a distributed directory: `delta` subdirectories were added
    /// (or, negative, removed) among its entries on another server; kept
    /// for the directory's link count. Posted by the client after the name
    /// change. → `Ok`
    Subdirs {
        dir: InodeId,
        delta: i32,
        /// Mode epoch the name change happened in: a delta from an older
        /// epoch is already in the recount a swap made, and is dropped.
        epoch: u32,
    },

    // ---- adaptive directories (Hare §6.1.2; `adapt` in the server) ----
    /// `dir.home()`. The directory's current mode and epoch, and whether
    /// a swap of it is under way. → `DirMode`
    DirMode {
        dir: InodeId,
    },
    /// One step of a hot-swap of `dir`'s mode (K42 ch. 6), coordinated by
    /// the client that sends them. → see [`AdaptStep`]
    Adapt {
        dir: InodeId,
        #[serde(borrow)]
        step: AdaptStep<'a>,
    },

    // ---- pipes in a copy island (Cosh §5 *copy*; `fs/pipecopy.rs`) ----
    /// `desc.server()`. Take up to `len` bytes out of the pipe behind
    /// `desc` (a read end): the server copies them from the ring into the
    /// reply. Empty `Data` is end of file (no writer left); `EAGAIN`: the
    /// pipe is empty but has writers (the client waits or answers
    /// `EAGAIN` for `O_NONBLOCK`). → `Data`
    PipeRead {
        desc: DescId,
        len: u32,
    },
    /// `desc.server()`. Put `data` into the pipe behind `desc` (a write
    /// end): all of it when it is at most `PIPE_BUF` bytes (atomic), else
    /// as much as fits. `EAGAIN`: no room (yet); `EPIPE`: no reader.
    /// → `Written`
    PipeWrite {
        desc: DescId,
        #[serde(borrow)]
        data: &'a [u8],
    },
    /// `desc.server()`. The state of the pipe behind `desc` (readiness,
    /// `FIONREAD`, `F_GETPIPE_SZ`, waits in `open`). → `PipeState`
    PipeState {
        desc: DescId,
    },
    /// `desc.server()`. `F_SETPIPE_SZ` of the pipe behind `desc` to `size`
    /// bytes, rounded as Linux rounds. → `Offset` (the size set)
    PipeSetSize {
        desc: DescId,
        size: u64,
    },

    // ---- names of an inode: sent to every server ----
    /// The entries held here that name `ino`: its current names, for
    /// `/proc/self/fd/N` of a file renamed since it was opened (a file's
    /// names may live on any server, Hare §3.4). → `Names`
    Names {
        ino: InodeId,
    },
    /// `desc.server()`. A descriptor passed over a Unix socket
    /// (`SCM_RIGHTS`) arrived in this process: take the reference its
    /// sender lent to the in-flight holder `from` (a `Share` to an id no
    /// process has, `SessionId::in_flight`). This session gets it, or, if
    /// it holds the description already (one reference stands for all of
    /// a process's descriptors of one description), it is dropped.
    /// Idempotent: `from` holding nothing while this session holds the
    /// description is `Ok`; neither holding it is `EBADF`. → `Ok`
    Receive {
        desc: DescId,
        from: SessionId,
    },
    /// Every server (a directory's entries may live on any). `fcntl(dirfd,
    /// F_NOTIFY)`: watch `wd` of `queue` on directory `ino` is a dnotify
    /// registration, whose events the server plays on the host directory
    /// `shadow` (`shadow/d`, with `shadow/s` for names moving in and out)
    /// so that the kernel's own dnotify signals the registrant (server
    /// `fs/inotify/dnotify.rs`). The server first gives `shadow/d` the
    /// names of `ino` it holds. → `Ok`
    DnotifyRegister {
        queue: QueueRef,
        ino: InodeId,
        wd: i32,
        #[serde(borrow)]
        shadow: &'a [u8],
    },
    /// Does this server still hold anything of `session` (a channel,
    /// a reference to a description, a lock)? Asked by a parent whose
    /// `wait` reaped a child a signal killed, so that the child's pipe
    /// ends no longer count once `wait` returned, as on Linux
    /// (`BootRequest::Reaped`). → `Ok` when it holds nothing, `EAGAIN`
    /// while its end is still to be served.
    SessionEnded {
        session: SessionId,
    },
    /// `ino.owner()`, *posted*: `fchmod`/`fchown`/`futimens` of a regular
    /// file on a descriptor, sent without waiting (client `meta.rs`,
    /// server `posted.rs`). Only what cannot fail (the client's
    /// capabilities allow it, no size). `ticket`: the owner's count of
    /// posted attribute changes, taken before the frame was enqueued
    /// (`Control::take_attr_ticket`); the owner serves posted heads of its
    /// rings in ticket order, so of two such changes of one inode from two
    /// rings the one made after the other returned is applied last. `at`:
    /// the client's clock at the call, used for `ctime` and `UTIME_NOW`
    /// times instead of the server's (also by the journal's replay).
    /// → `Attr` (nobody reads it)
    SetAttrPosted {
        ino: InodeId,
        set: SetAttr,
        ticket: u64,
        at: Timespec,
    },
}

/// Where a `WriteData` stands in the write it is a piece of, when a client
/// keeps several of them in flight (a copy island, a remote host: Cosh §5
/// *copy*). A short write must have written exactly the prefix it reports
/// (POSIX), yet pieces after a failing one are already on their way; so the
/// server applies piece `seq` of chain `id` only if pieces `0..seq` were
/// all written in full, in order, and answers the others `Skipped`. The
/// chain's state lives in the server's session (`id` is unique within it)
/// and is rebuilt by a journal replay like any other state.
#[derive(Serialize, Deserialize, Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Chain {
    pub id: u64,
    pub seq: u32,
    /// The write's last piece: the server forgets the chain after it.
    pub last: bool,
}
