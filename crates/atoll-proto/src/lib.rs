//! atoll's wire protocol: every message a client and a file server exchange.
//!
//! Layers (bottom to top):
//! * `atoll-msg` moves opaque frames of bytes through shared-memory rings;
//! * this crate gives those bytes meaning: one typed [`Request`] variant per
//!   operation and one [`Reply`], encoded with `postcard` (compact, no
//!   allocation on encode, zero-copy borrowed names on decode);
//! * `atoll-server` implements the requests, `atoll-client` issues them.
//!
//! The protocol follows Hare's RPC list (Hare Table 4.2) with two changes:
//! path resolution is done by the client one component at a time (names only
//! ever travel as single components of at most [`MAX_NAME`] bytes), and
//! operations that Hare splits into several RPCs are coalesced into one
//! message when one server can do all the work (Hare §3.7.4), e.g. [`Request::Open`]
//! with `O_CREAT` creates the inode, adds the entry and opens a description.
//!
//! Ownership rules, stated once:
//! * an inode (attributes, data blocks, open file descriptions, nlink) lives
//!   on its *owner* server, encoded in its [`InodeId`] and never changing;
//! * the entries of a directory live on its *home* server (also encoded in
//!   the id), or, for a distributed directory, on `hash(dir, name) % N`
//!   ([`entry_server`]);
//! * servers never message each other; a client coordinates every operation
//!   that spans servers (Hare §6.2.3).
//!
//! The bootstrap protocol (how a process obtains its channels) lives in
//! [`boot`].

#![forbid(unsafe_code)]

pub mod boot;
pub mod inotify;
pub mod pipe;
pub mod topology;

use serde::{Deserialize, Serialize};

/// Largest name of one directory entry, as Linux's `NAME_MAX`.
pub const MAX_NAME: usize = 255;
/// Largest symlink target, as Linux's `PATH_MAX - 1`.
pub const MAX_TARGET: usize = 4095;
/// Largest extended-attribute value (one block, as ext4 without ea_inode).
pub const MAX_XATTR_VALUE: usize = 4096;
/// Largest extended-attribute value Linux accepts at all; longer ones are
/// `E2BIG`, those between this and `MAX_XATTR_VALUE` `ENOSPC`.
pub const XATTR_SIZE_MAX: usize = 64 * 1024;
/// Largest encoded frame (request or reply) in bytes. Rings must accept it.
pub const MAX_FRAME: usize = 12 * 1024;
/// Supplementary group lists a session may register ([`Request::SetGroups`]);
/// the last number is the client's scratch list, sent again before each
/// request that uses it.
pub const MAX_GROUP_SETS: u32 = 256;
/// Size of one buffer-cache block.
pub const BLOCK_SIZE: usize = 4096;
/// Most servers one instance may have (the id encodes a server in 8 bits).
pub const MAX_SERVERS: usize = 64;

/// An errno value travelling in a reply. Positive, as in `errno.h`.
#[derive(Serialize, Deserialize, Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Errno(pub i32);

impl Errno {
    pub const EPERM: Errno = Errno(libc::EPERM);
    pub const ENOENT: Errno = Errno(libc::ENOENT);
    pub const EIO: Errno = Errno(libc::EIO);
    pub const EBADF: Errno = Errno(libc::EBADF);
    pub const EAGAIN: Errno = Errno(libc::EAGAIN);
    pub const EACCES: Errno = Errno(libc::EACCES);
    pub const EEXIST: Errno = Errno(libc::EEXIST);
    pub const EXDEV: Errno = Errno(libc::EXDEV);
    pub const ENOTDIR: Errno = Errno(libc::ENOTDIR);
    pub const EISDIR: Errno = Errno(libc::EISDIR);
    pub const EINVAL: Errno = Errno(libc::EINVAL);
    pub const EFBIG: Errno = Errno(libc::EFBIG);
    pub const ENOSPC: Errno = Errno(libc::ENOSPC);
    pub const ESPIPE: Errno = Errno(libc::ESPIPE);
    pub const EROFS: Errno = Errno(libc::EROFS);
    pub const EMLINK: Errno = Errno(libc::EMLINK);
    pub const ERANGE: Errno = Errno(libc::ERANGE);
    pub const ENAMETOOLONG: Errno = Errno(libc::ENAMETOOLONG);
    pub const ENOTEMPTY: Errno = Errno(libc::ENOTEMPTY);
    pub const ELOOP: Errno = Errno(libc::ELOOP);
    pub const ENODATA: Errno = Errno(libc::ENODATA);
    pub const ENOTSUP: Errno = Errno(libc::ENOTSUP);
    pub const EPROTO: Errno = Errno(libc::EPROTO);
    pub const EOVERFLOW: Errno = Errno(libc::EOVERFLOW);
    pub const ESTALE: Errno = Errno(libc::ESTALE);
    pub const ETXTBSY: Errno = Errno(libc::ETXTBSY);
    pub const E2BIG: Errno = Errno(libc::E2BIG);
    pub const ENOSYS: Errno = Errno(libc::ENOSYS);
    pub const EDEADLK: Errno = Errno(libc::EDEADLK);
    pub const ENOLCK: Errno = Errno(libc::ENOLCK);
    pub const EBUSY: Errno = Errno(libc::EBUSY);
    pub const ENOMEM: Errno = Errno(libc::ENOMEM);
    pub const EMFILE: Errno = Errno(libc::EMFILE);
    pub const ENFILE: Errno = Errno(libc::ENFILE);
    pub const EINTR: Errno = Errno(libc::EINTR);
    pub const EPIPE: Errno = Errno(libc::EPIPE);
    pub const ENXIO: Errno = Errno(libc::ENXIO);
    pub const ENODEV: Errno = Errno(libc::ENODEV);
    pub const ENOTTY: Errno = Errno(libc::ENOTTY);
    pub const EOPNOTSUPP: Errno = Errno(libc::EOPNOTSUPP);
    /// atoll's own, never returned to a program: the request was routed by
    /// a stale idea of its directory's mode, or reached the directory while
    /// a swap of its mode is under way (Hare §6.1.2, K42 ch. 6 "block").
    /// The client asks the directory's home server for the mode
    /// ([`Request::DirMode`]) and sends the request again.
    pub const EMODE: Errno = Errno(4000);
}

/// Identity of an inode: `owner:8 | home:8 | flags:8 | serial:40`.
///
/// * `owner` — server holding the inode's attributes, blocks and open file
///   descriptions;
/// * `home` — for a directory, the server holding its entries (unless the
///   directory is distributed); equal to `owner` for other inodes;
/// * flags bit 0 — the directory is distributed (Hare §3.4);
/// * `serial` — unique per owner for the life of the instance, never reused.
///
/// The id never changes, not even on rename, so a client may cache it.
#[derive(Serialize, Deserialize, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct InodeId(pub u64);

impl InodeId {
    const DISTRIBUTED: u64 = 1;

    pub fn new(owner: usize, home: usize, distributed: bool, serial: u64) -> Self {
        debug_assert!(owner < MAX_SERVERS && home < MAX_SERVERS && serial < (1 << 40));
        let flags = if distributed { Self::DISTRIBUTED } else { 0 };
        InodeId(
            ((owner as u64) << 56)
                | ((home as u64) << 48)
                | (flags << 40)
                | (serial & ((1 << 40) - 1)),
        )
    }
    /// Server that holds the inode itself.
    pub fn owner(self) -> usize {
        (self.0 >> 56) as usize
    }
    /// Server that holds a (non-distributed) directory's entries.
    pub fn home(self) -> usize {
        ((self.0 >> 48) & 0xff) as usize
    }
    pub fn is_distributed(self) -> bool {
        (self.0 >> 40) & Self::DISTRIBUTED != 0
    }
    pub fn serial(self) -> u64 {
        self.0 & ((1 << 40) - 1)
    }
}

/// The root directory: owned by and homed on server 0, serial 1.
pub const ROOT: InodeId = InodeId(1);

/// Server holding the entry `name` of directory `dir` (Hare §3.4).
pub fn entry_server(dir: InodeId, name: &[u8], nservers: usize) -> usize {
    if dir.is_distributed() && nservers > 1 {
        (name_hash(dir, name) % nservers as u64) as usize
    } else {
        dir.home()
    }
}

/// FNV-1a over the directory id and the name: cheap, stable across
/// processes and builds (clients and servers must agree on it).
pub fn name_hash(dir: InodeId, name: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in dir.0.to_le_bytes().iter().chain(name) {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// An open file description on the inode's owner server:
/// `server:8 | serial:56`. Never reused within an instance.
#[derive(Serialize, Deserialize, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct DescId(pub u64);

impl DescId {
    pub fn new(server: usize, serial: u64) -> Self {
        DescId(((server as u64) << 56) | (serial & ((1 << 56) - 1)))
    }
    pub fn server(self) -> usize {
        (self.0 >> 56) as usize
    }
}

/// A client session (one per process; survives `execve`).
#[derive(Serialize, Deserialize, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct SessionId(pub u64);

#[derive(Serialize, Deserialize, Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum FileType {
    Regular,
    Directory,
    Symlink,
    Fifo,
    Socket,
    CharDevice,
    BlockDevice,
}

impl FileType {
    /// The `S_IFMT` bits of this type.
    pub fn mode_bits(self) -> u32 {
        match self {
            FileType::Regular => libc::S_IFREG,
            FileType::Directory => libc::S_IFDIR,
            FileType::Symlink => libc::S_IFLNK,
            FileType::Fifo => libc::S_IFIFO,
            FileType::Socket => libc::S_IFSOCK,
            FileType::CharDevice => libc::S_IFCHR,
            FileType::BlockDevice => libc::S_IFBLK,
        }
    }
    /// The `d_type` of a `linux_dirent64` for this type.
    pub fn dirent_type(self) -> u8 {
        match self {
            FileType::Regular => libc::DT_REG,
            FileType::Directory => libc::DT_DIR,
            FileType::Symlink => libc::DT_LNK,
            FileType::Fifo => libc::DT_FIFO,
            FileType::Socket => libc::DT_SOCK,
            FileType::CharDevice => libc::DT_CHR,
            FileType::BlockDevice => libc::DT_BLK,
        }
    }
    pub fn from_dirent_type(t: u8) -> Option<FileType> {
        Some(match t {
            libc::DT_REG => FileType::Regular,
            libc::DT_DIR => FileType::Directory,
            libc::DT_LNK => FileType::Symlink,
            libc::DT_FIFO => FileType::Fifo,
            libc::DT_SOCK => FileType::Socket,
            libc::DT_CHR => FileType::CharDevice,
            libc::DT_BLK => FileType::BlockDevice,
            _ => return None,
        })
    }
    pub fn from_mode(mode: u32) -> Option<FileType> {
        Some(match mode & libc::S_IFMT {
            libc::S_IFREG => FileType::Regular,
            libc::S_IFDIR => FileType::Directory,
            libc::S_IFLNK => FileType::Symlink,
            libc::S_IFIFO => FileType::Fifo,
            libc::S_IFSOCK => FileType::Socket,
            libc::S_IFCHR => FileType::CharDevice,
            libc::S_IFBLK => FileType::BlockDevice,
            _ => return None,
        })
    }
}

#[derive(Serialize, Deserialize, Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Timespec {
    pub sec: i64,
    pub nsec: u32,
}

/// Everything `stat`/`statx` report about an inode.
#[derive(Serialize, Deserialize, Clone, Copy, PartialEq, Eq, Debug)]
pub struct Attr {
    pub ino: InodeId,
    pub ftype: FileType,
    /// Permission bits including set-id and sticky bits (`0o7777`).
    pub perm: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub rdev: u64,
    pub size: u64,
    /// 512-byte units actually allocated (sparse files report less).
    pub blocks: u64,
    pub atime: Timespec,
    pub mtime: Timespec,
    pub ctime: Timespec,
    pub btime: Timespec,
    /// A directory with a default ACL (`system.posix_acl_default`): new
    /// inodes in it inherit that ACL instead of taking the umask
    /// ([`Request::Open`]'s `inherit`). Not part of `stat`.
    pub default_acl: bool,
    /// An extended access ACL (`system.posix_acl_access` with named
    /// entries or a mask): it, not the mode alone, decides who may search
    /// or write the inode ([`Vouched::verdict`]). Not part of `stat`.
    pub access_acl: bool,
}

/// Caller credentials for Linux's permission checks: the fsuid and fsgid,
/// and the effective capabilities that bypass them (`caps`, bit `1 << n`
/// for Linux capability number `n`; only the file-system ones below are
/// looked at). The client reads them from the kernel after every
/// credential change of the calling thread, so they are what Linux itself
/// would check with. Supplementary groups are long, so a session registers
/// each list its threads hold once ([`Request::SetGroups`]) and a request
/// names its thread's list by number (`groups`).
#[derive(Serialize, Deserialize, Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Cred {
    pub uid: u32,
    pub gid: u32,
    pub caps: u32,
    /// The session's supplementary group list number ([`Request::SetGroups`]).
    pub groups: u32,
}

impl Cred {
    pub const CAP_CHOWN: u32 = 1 << 0;
    pub const CAP_DAC_OVERRIDE: u32 = 1 << 1;
    pub const CAP_DAC_READ_SEARCH: u32 = 1 << 2;
    pub const CAP_FOWNER: u32 = 1 << 3;
    pub const CAP_FSETID: u32 = 1 << 4;
    pub const CAP_SYS_ADMIN: u32 = 1 << 21;
    /// Pipes beyond `/proc/sys/fs/pipe-max-size` (`F_SETPIPE_SZ`).
    pub const CAP_SYS_RESOURCE: u32 = 1 << 24;
    pub const CAP_MKNOD: u32 = 1 << 27;
    /// The capabilities the checks above use, which root holds by default.
    pub const FS_CAPS: u32 = Self::CAP_CHOWN
        | Self::CAP_DAC_OVERRIDE
        | Self::CAP_DAC_READ_SEARCH
        | Self::CAP_FOWNER
        | Self::CAP_FSETID
        | Self::CAP_SYS_ADMIN
        | Self::CAP_SYS_RESOURCE
        | Self::CAP_MKNOD;

    /// Ids with the capabilities a process of that fsuid has by default
    /// (all of them for 0, none otherwise).
    pub const fn of(uid: u32, gid: u32) -> Cred {
        Cred {
            uid,
            gid,
            caps: if uid == 0 { Self::FS_CAPS } else { 0 },
            groups: 0,
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Copy, PartialEq, Eq, Debug)]
pub enum TimeSet {
    Omit,
    Now,
    Set(Timespec),
}

/// What `chmod`/`chown`/`truncate`/`utimensat` change; `None` = unchanged.
#[derive(Serialize, Deserialize, Clone, Copy, PartialEq, Eq, Debug)]
pub struct SetAttr {
    pub perm: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: TimeSet,
    pub mtime: TimeSet,
}

impl SetAttr {
    pub const NONE: SetAttr = SetAttr {
        perm: None,
        uid: None,
        gid: None,
        size: None,
        atime: TimeSet::Omit,
        mtime: TimeSet::Omit,
    };
}

/// Which kind of entry an unlink may remove.
#[derive(Serialize, Deserialize, Clone, Copy, PartialEq, Eq, Debug)]
pub enum UnlinkKind {
    /// `unlink`: anything but a directory (`EISDIR`).
    NonDirectory,
    /// `rmdir`: only an empty directory (`ENOTDIR`, `ENOTEMPTY`).
    Directory,
    /// The second half of a client-coordinated cross-server move (after
    /// `Link` of the new name): remove the old name of whatever `expect`
    /// names (required, `EINVAL` without), directories included, with no
    /// emptiness check — the directory keeps its entries under its new
    /// name. The entries of a distributed directory live on every server,
    /// so only the client can tell this from an rmdir (Hare §3.4).
    Move,
}

/// POSIX record lock request (`fcntl` `F_GETLK`/`F_SETLK`/`F_OFD_*`, `flock`).
#[derive(Serialize, Deserialize, Clone, Copy, PartialEq, Eq, Debug)]
pub struct LockSpec {
    /// `F_RDLCK`, `F_WRLCK` or `F_UNLCK`.
    pub kind: i16,
    /// Absolute start offset (the client resolves `SEEK_CUR`/`SEEK_END`).
    pub start: u64,
    /// 0 = to end of file.
    pub len: u64,
    /// Lock owner: for classic POSIX locks the process (session id); for OFD
    /// and `flock` locks the open file description.
    pub owner: LockOwner,
    /// The process that asked (what `F_GETLK` reports as `l_pid` for a
    /// record lock; sessions are not pids).
    pub pid: u32,
}

#[derive(Serialize, Deserialize, Clone, Copy, PartialEq, Eq, Debug)]
pub enum LockOwner {
    Process(u64),
    Description(DescId),
    /// `flock(2)` locks: whole file, owned by the description, separate
    /// namespace from record locks as in Linux.
    Flock(DescId),
}

/// Attributes of an inode that another server owns, as the client read them
/// from its owner, carried by a request whose checks need them.
///
/// A server checks write permission, the sticky bit and set-group-id
/// inheritance of a directory itself only when it owns the directory's
/// inode. The entries of a distributed directory (Hare §3.4) live on every
/// server, and a name may name an inode owned elsewhere (creation affinity,
/// hard links, renames), so a request about a name in a directory owned
/// elsewhere carries the directory's attributes, and a request removing a
/// name from a sticky directory may carry those of the inode it removes.
/// Servers trust them as they trust the frame's [`Cred`]: an instance
/// belongs to one user and its client library is trusted to say who calls
/// and what it read (Hare's single fault domain); a server still refuses a
/// name change in a directory it does not own when no attributes come with
/// it, so a client that forgot them fails loudly (`EPROTO`).
#[derive(Serialize, Deserialize, Clone, Copy, PartialEq, Eq, Debug)]
pub struct Vouched {
    pub ino: InodeId,
    /// Permission bits with set-id and sticky bits (`st_mode & 07777`).
    pub perm: u32,
    pub uid: u32,
    pub gid: u32,
    /// For a directory: the mode epoch the client routed the request by
    /// ([`ModeInfo`]). A server that knows another answers `EMODE`, so a
    /// name change is only ever served in the epoch the client names
    /// (what its `Subdirs` then carries).
    pub epoch: u32,
    /// The directory has a default ACL ([`Attr::default_acl`]): a creation
    /// in it carries that ACL (`inherit`), which the server applies.
    pub default_acl: bool,
    /// The directory has an extended access ACL ([`Attr::access_acl`]):
    /// the mode does not say who may write it, so a name change there
    /// carries the owner's [`Verdict`] instead.
    pub access_acl: bool,
    /// With `access_acl`: whether the owner lets the caller write and
    /// search the directory; `None` otherwise (or unasked).
    pub verdict: Option<Verdict>,
}

/// The owner's answer to `Access` with `W_OK | X_OK` on a directory with
/// an extended access ACL, for the credentials it was asked with.
///
/// Linux's `posix_acl_permission` needs the ACL, which only the
/// directory's owner holds; rather than carry the ACL to every server
/// holding the directory's names (Hare §3.4), the client asks the owner
/// once per directory and credentials and vouches for its answer. It is
/// bound to `cred`: a server takes it only for a request with the very
/// same credentials (a thread that changed uid, gid, capabilities or
/// supplementary groups asks again), and the client keeps it beside the
/// directory's cached attributes, which the owner's notice on
/// `chmod`/`chown`/`setfacl` drops before the change returns. Carried in
/// the request frame, so a journal replay decides as the live server did.
#[derive(Serialize, Deserialize, Clone, Copy, PartialEq, Eq, Debug)]
pub struct Verdict {
    pub cred: Cred,
    /// `W_OK | X_OK` granted.
    pub granted: bool,
}

/// The default ACL of the directory a creation request makes an inode in,
/// when the server that makes it does not own the directory (creation
/// affinity, distributed directories, a directory whose entries live
/// away from its inode): Linux's `posix_acl_create` needs it, and only
/// the owner holds it.
///
/// The client learns that a directory has one from its attributes
/// ([`Vouched::default_acl`], read from the owner like the rest of them)
/// and only then reads the ACL from the owner (`GetXattr`) and sends it
/// here, so creations in directories without one cost no message more.
/// It is fresh enough: the owner's notice on setting or removing a
/// directory's default ACL drops every client's cached attributes of it
/// before `setxattr` returns (as for `chmod`), so a creation that starts
/// after that sees the flag as it is now and reads the ACL afterwards.
/// A creation racing a change may see either, as on Linux, where
/// `posix_acl_create` reads the ACL once at some instant of the call.
/// The server owning the directory ignores this and reads its own.
#[derive(Serialize, Deserialize, Clone, Copy, PartialEq, Eq, Debug)]
pub enum Inherit<'a> {
    /// The client did not look: right when the server owns the directory
    /// or the vouched attributes say it has no default ACL. A server that
    /// needs the ACL and got `Unread` answers `EPROTO`.
    Unread,
    /// The default ACL as the owner returned it (its xattr value); empty
    /// if it had none any more.
    Acl(#[serde(borrow)] &'a [u8]),
}

/// A request frame: the header every request carries plus the operation.
#[derive(Serialize, Deserialize, Debug)]
pub struct RequestFrame<'a> {
    /// Chosen by the client; echoed in the reply.
    pub id: u64,
    pub cred: Cred,
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
        distributed: bool,
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
    /// Direct-cache ablation: data travels inside the messages. → `Data`
    ReadData {
        desc: DescId,
        len: u32,
        offset: Option<u64>,
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
    /// Another reference to the description for session `to` (fork,
    /// descriptor passing; Hare DUP). → `Ok`
    Share {
        desc: DescId,
        to: SessionId,
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
    /// O_NONBLOCK`) referenced by this session. → `Pipe` with `read` and
    /// `write` both the description
    InotifyInit {
        flags: u32,
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
    /// `dir.owner()`, posted after a name change in `dir` whose entry
    /// another server holds: mtime and ctime to now, as Linux sets them on
    /// the parent of a name created, removed or moved. Reports no event
    /// (the entry's server reported the change itself). → `Attr`
    Touched {
        dir: InodeId,
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
    /// `deny_write_access`). Ends with the session. → `Ok`
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
    /// → `Ok`
    Map {
        ino: InodeId,
        to: SessionId,
    },
    /// The process unmapped the last range it mapped of `ino` (`munmap`,
    /// `mremap`, a `MAP_FIXED` mapping over it): drops one reference of the
    /// caller's session. A session's death drops all of them, so `exit`,
    /// `execve` (a new session) and `SIGKILL` need no message. → `Ok`
    Unmap {
        ino: InodeId,
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
    Begin { distributed: bool, resume: bool },
    /// Every other server: block the directory (namespace requests on it
    /// answer `EMODE`) and drop cached lookups of its entries. `EBUSY` if
    /// a cross-server move holds a provisional name in it. → `Ok`
    Block {
        epoch: u32,
        distributed: bool,
        base_seq: u64,
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
}

/// Entry server of `name` in `dir` when the directory's mode is
/// `distributed` (which may differ from its id's flag after a swap).
pub fn entry_server_in(dir: InodeId, distributed: bool, name: &[u8], nservers: usize) -> usize {
    if distributed && nservers > 1 && name != b"." && name != b".." {
        (name_hash(dir, name) % nservers as u64) as usize
    } else {
        dir.home()
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
        /// For `Write`: the file is watched (`inotify`) at this server, so
        /// the client posts `InotifyModified` once the bytes are in (an
        /// event sent now could be read before the data is there).
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
        /// so a new watch of its inode gets a new descriptor.
        replaced: i32,
    },
    /// `PipeState`: a pipe's state (copy island).
    PipeState(PipeStateInfo),
    /// A `WriteData` piece not applied: an earlier piece of its [`Chain`]
    /// failed or was short, so the write ended before it.
    Skipped,
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
#[derive(Serialize, Deserialize, Clone, Copy, PartialEq, Eq, Hash, Debug)]
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

/// Encoding errors: a frame that does not decode is answered with `EPROTO`
/// and never crashes a server.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("frame does not fit in {MAX_FRAME} bytes")]
    TooLarge,
    #[error("malformed frame: {0}")]
    Malformed(postcard::Error),
}

/// Encode into `buf`, returning the used prefix. Allocation-free.
pub fn encode<'b, T: Serialize>(value: &T, buf: &'b mut [u8]) -> Result<&'b mut [u8], WireError> {
    postcard::to_slice(value, buf).map_err(|e| match e {
        postcard::Error::SerializeBufferFull => WireError::TooLarge,
        other => WireError::Malformed(other),
    })
}

/// Decode a frame, borrowing names and data from `bytes`.
pub fn decode<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, WireError> {
    postcard::from_bytes(bytes).map_err(WireError::Malformed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inode_id_fields_round_trip() {
        let id = InodeId::new(5, 9, true, 123_456);
        assert_eq!(
            (id.owner(), id.home(), id.is_distributed(), id.serial()),
            (5, 9, true, 123_456)
        );
        let plain = InodeId::new(0, 0, false, 1);
        assert_eq!(plain, ROOT);
        assert!(!plain.is_distributed());
    }

    #[test]
    fn entry_server_uses_home_unless_distributed() {
        let dir = InodeId::new(1, 3, false, 7);
        for name in [&b"a"[..], b"bb", b"ccc"] {
            assert_eq!(entry_server(dir, name, 8), 3);
        }
        let dist = InodeId::new(1, 3, true, 7);
        let servers: std::collections::HashSet<_> = (0..64)
            .map(|i| entry_server(dist, format!("f{i}").as_bytes(), 8))
            .collect();
        assert!(servers.len() > 4, "hash should spread names: {servers:?}");
    }

    #[test]
    fn moved_entries_round_trip_and_adaptive_routing_ignores_the_flag() {
        let mut buf = vec![];
        pack_moved(&mut buf, 7, InodeId(9), FileType::Directory, b"ab");
        pack_moved(&mut buf, 8, InodeId(10), FileType::Regular, b"c");
        assert_eq!(buf.len(), moved_len(b"ab") + moved_len(b"c"));
        let back: Vec<_> = parse_moved(&buf).collect();
        assert_eq!(
            back,
            vec![
                (7, InodeId(9), FileType::Directory, &b"ab"[..]),
                (8, InodeId(10), FileType::Regular, &b"c"[..])
            ]
        );
        assert_eq!(
            parse_moved(&buf[..20]).count(),
            1,
            "a cut record is dropped"
        );
        let dir = InodeId::new(1, 2, false, 7);
        assert_eq!(entry_server_in(dir, false, b"x", 4), 2);
        assert_eq!(entry_server_in(dir, true, b"..", 4), 2);
        let spread: std::collections::HashSet<_> = (0..64)
            .map(|i| entry_server_in(dir, true, format!("f{i}").as_bytes(), 4))
            .collect();
        assert_eq!(spread.len(), 4);
    }

    #[test]
    fn frames_round_trip_and_garbage_is_rejected() {
        let mut buf = [0u8; MAX_FRAME];
        let frame = RequestFrame {
            id: 42,
            cred: Cred::of(1000, 1000),
            req: Request::Lookup {
                dir: ROOT,
                name: b"hello",
            },
            vouched: std::borrow::Cow::Borrowed(&[Vouched {
                ino: ROOT,
                perm: 0o1777,
                uid: 7,
                gid: 8,
                epoch: 0,
                default_acl: false,
                access_acl: false,
                verdict: None,
            }]),
        };
        let bytes = encode(&frame, &mut buf).unwrap().to_vec();
        let back: RequestFrame = decode(&bytes).unwrap();
        assert_eq!(back.id, 42);
        assert_eq!(back.vouched[0].perm, 0o1777);
        match back.req {
            Request::Lookup { dir, name } => {
                assert_eq!(dir, ROOT);
                assert_eq!(name, b"hello");
            }
            other => panic!("wrong variant {other:?}"),
        }
        assert!(decode::<RequestFrame>(&[0xff; 3]).is_err());
        assert!(decode::<RequestFrame>(&bytes[..bytes.len() - 2]).is_err());
    }
}
