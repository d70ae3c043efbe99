//! Identities: errno values, inode, description and session ids, file
//! types, and where a name's entry lives (Hare §3.4).

use serde::{Deserialize, Serialize};

use super::*;

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
    pub const ETOOMANYREFS: Errno = Errno(libc::ETOOMANYREFS);
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
    /// atoll's own, never returned to a program: the server that took the
    /// request died before the request reached its journal, and its
    /// successor, rebuilt from that journal, holds nothing of it (fos
    /// §3.5). The client sends the request again (a bounded number of
    /// times, then `EIO`) where a second send is the first one's twin.
    pub const NOT_APPLIED: Errno = Errno(4001);
}

/// Identity of an inode: `owner:8 | home:8 | flags:8 | serial:40`.
///
/// * `owner` — server holding the inode's attributes, blocks and open file
///   descriptions;
/// * `home` — for a directory, the server holding its entries (unless the
///   directory is distributed); equal to `owner` for other inodes;
/// * flags bit 0 — the directory is distributed (Hare §3.4);
/// * flags bits 1‥7 — its *width*: how many servers its names are spread
///   over, the member count when it was made (0: not recorded, the caller's
///   count is used). The set of servers can grow while the instance runs
///   (Hare §6.1.1, "Elastic server count" in ARCHITECTURE): recording the
///   width keeps `hash(dir, name) % width`, and so every cached lookup and
///   cookie, right when members join;
/// * `serial` — unique per owner for the life of the instance, never reused.
///
/// The id never changes, not even on rename, so a client may cache it.
#[derive(Serialize, Deserialize, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct InodeId(pub u64);

impl InodeId {
    const DISTRIBUTED: u64 = 1;
    /// Largest width the flag byte can record (7 bits).
    pub const MAX_WIDTH: usize = 127;

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
    /// A distributed directory whose names are spread over servers
    /// `0..width` for its whole life.
    pub fn spread(owner: usize, home: usize, width: usize, serial: u64) -> Self {
        debug_assert!((1..=Self::MAX_WIDTH).contains(&width) && home < width);
        let id = Self::new(owner, home, true, serial);
        InodeId(id.0 | ((width.min(Self::MAX_WIDTH) as u64) << 41))
    }
    /// The width recorded in the id (0: none; see the type's docs).
    pub fn width(self) -> usize {
        ((self.0 >> 41) & 0x7f) as usize
    }
    pub fn serial(self) -> u64 {
        self.0 & ((1 << 40) - 1)
    }
}

/// The root directory: owned by and homed on server 0, serial 1.
pub const ROOT: InodeId = InodeId(1);

/// Server holding the entry `name` of directory `dir` (Hare §3.4): a
/// distributed directory spreads over the width its id records, or over
/// `members` when it records none (ids made by hand, in tests).
pub fn entry_server(dir: InodeId, name: &[u8], members: usize) -> usize {
    let width = match dir.width() {
        0 => members,
        w => w,
    };
    if dir.is_distributed() && width > 1 {
        (name_hash(dir, name) % width as u64) as usize
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

impl SessionId {
    /// The bit that marks an in-flight holder: the owner of a reference
    /// lent to a descriptor passed over a Unix socket until its receiver
    /// takes it (`Request::Receive`). No process's session has it: they
    /// are numbered from 1 by the boot thread.
    const IN_FLIGHT: u64 = 1 << 63;

    /// The in-flight holder numbered `n` (made unique by the sender).
    pub fn in_flight(n: u64) -> SessionId {
        SessionId(n | Self::IN_FLIGHT)
    }

    pub fn is_in_flight(self) -> bool {
        self.0 & Self::IN_FLIGHT != 0
    }
}

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

/// Entry server of `name` in `dir` when the directory's mode spreads its
/// names over `width` servers (0 or 1: all at home), which may differ from
/// its id's after a swap (`ModeInfo::width`).
pub fn entry_server_in(dir: InodeId, width: usize, name: &[u8]) -> usize {
    if width > 1 && name != b"." && name != b".." {
        (name_hash(dir, name) % width as u64) as usize
    } else {
        dir.home()
    }
}
