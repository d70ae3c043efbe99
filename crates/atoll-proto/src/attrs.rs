//! Attributes, credentials and the permission facts a request carries
//! (vouched directory attributes, ACL verdicts, inherited default ACLs).

use serde::{Deserialize, Serialize};

use super::*;

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
