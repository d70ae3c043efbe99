//! Permission checks on directories whose entry servers do not own them
//! (Hare §3.4, §3.7.1): search, write, the sticky bit and set-group-id
//! inheritance.
//!
//! A server knows a directory's mode, owner and group only when it owns
//! the directory's inode. The entries of a distributed directory (Hare
//! §3.4) live on every server, so most of its names are served by servers
//! that do not own it, and a name may name an inode another server owns
//! (creation affinity, hard links, renames).
//!
//! * **Search** ([`check_search`]): before a `Lookup` or `Open` at such a
//!   server the client asks the owner (`Access` with `X_OK`). The grant is
//!   kept in the directory-lookup cache as the directory's entry with the
//!   empty name.
//! * **Name changes** ([`vouch_dir`]): every request that adds, removes or
//!   replaces a name there (`Open` with `O_CREAT`, `MakeNode`, `Link`,
//!   `Unlink`, `Rename`, `Relink`, `CreateInode`) carries the directory's
//!   mode, owner and group as its owner reported them
//!   (`atoll_proto::Vouched`), and the server applies Linux's rules with
//!   them: write and search permission, the sticky bit, the group and
//!   set-group-id bit of new inodes. The attributes are kept in the lookup
//!   cache beside the directory's entries.
//! * **Access ACLs**: when the attributes say the directory has an
//!   extended access ACL (named entries or a mask), its mode does not say
//!   who may write it, and only the owner holds the ACL; so the client
//!   asks the owner (`Access`, `W_OK | X_OK`) and the request carries the
//!   answer for the thread's credentials (`atoll_proto::Verdict`), kept
//!   beside the attributes and asked again under other credentials.
//! * **Default ACLs** ([`inherits_from`]): a new inode in a directory
//!   with a default ACL inherits it (Linux's `posix_acl_create`); the
//!   attributes say whether it has one, and only then does a creation
//!   there read the ACL from the owner and carry it
//!   (`atoll_proto::Inherit`, which says why that is fresh enough).
//! * **Sticky victims** ([`sticky_retry`]): in a sticky directory a server
//!   must know who owns the inode a name names; when another server owns
//!   it the server answers `EPERM`, and the client asks once more with
//!   that inode's attributes.
//!
//! * **Times and link counts** ([`after_change`]): the server that
//!   changes a name updates the directory's mtime, ctime and count of
//!   subdirectories only when it owns the directory, so after a name
//!   change elsewhere the client posts the owner a `SetAttr` of mtime to
//!   now (which moves ctime too), as Linux does to a parent on every name
//!   change, and, when subdirectories came or went, a `Subdirs` with the
//!   difference (a distributed directory's `nlink`). Posted, so each costs
//!   an enqueue, not a round trip; later requests of the same lane are
//!   served after them.
//!
//! The owner's notice on `chmod`/`chown` of a directory, or on a change of
//! its ACLs, drops its cached entries, grant and attributes before the
//! change returns, so each process asks once per directory while its mode,
//! owner and ACLs stay the same.
//! Ordinary directories are owned by the server holding their entries and
//! cost nothing here.
//!
//! Trust: servers take these attributes on the client library's word, as
//! they take the caller's credentials in every frame (one instance belongs
//! to one user, Hare's single fault domain); a name change without them in
//! a directory the server does not own is refused (`EPROTO`).

use atoll_proto::{Cred, FileType, Inherit, InodeId, Reply, Request, Verdict, Vouched};

use crate::error::{Error, Result};
use crate::session::{Client, Lane};

/// Fail with `EACCES` unless the caller may search `dir`, when the server
/// `entry` that will serve the name does not check it itself.
pub fn check_search(c: &Client, lane: &Lane, dir: InodeId, entry: usize) -> Result<()> {
    if entry == dir.owner() {
        return Ok(()); // the server owns the directory and checks
    }
    let dc = c.dcache();
    let mut gen = 0;
    if let Some(dc) = dc {
        if dc.searchable(c.session().channels(), dir) {
            return Ok(());
        }
        gen = dc.generation();
    }
    lane.call_ok(
        c,
        dir.owner(),
        Request::Access {
            ino: dir,
            mask: libc::X_OK as u32,
        },
    )?;
    if let Some(dc) = dc {
        dc.set_searchable(gen, dir);
    }
    Ok(())
}

/// Most attributes one request carries: the two directories of a rename
/// and the two inodes it may remove from sticky directories.
const MAX_VOUCHED: usize = 4;

/// The attributes one request carries (allocation-free).
pub struct Vouches {
    items: [Vouched; MAX_VOUCHED],
    len: usize,
}

impl Default for Vouches {
    fn default() -> Self {
        Self::new()
    }
}

impl Vouches {
    pub const fn new() -> Vouches {
        const NONE: Vouched = Vouched {
            ino: InodeId(0),
            perm: 0,
            uid: 0,
            gid: 0,
            epoch: 0,
            default_acl: false,
            access_acl: false,
            verdict: None,
        };
        Vouches {
            items: [NONE; MAX_VOUCHED],
            len: 0,
        }
    }

    fn push(&mut self, v: Vouched) {
        if let Some(old) = self.items[..self.len].iter_mut().find(|x| x.ino == v.ino) {
            *old = v;
        } else if self.len < MAX_VOUCHED {
            self.items[self.len] = v;
            self.len += 1;
        }
    }

    pub fn as_slice(&self) -> &[Vouched] {
        &self.items[..self.len]
    }
}

/// The attributes of `ino` from its owner.
fn attrs_from_owner(c: &Client, lane: &Lane, ino: InodeId) -> Result<Vouched> {
    lane.call(c, ino.owner(), Request::GetAttr { ino }, |r| match r {
        Reply::Attr(a) => Ok(Vouched {
            ino,
            perm: a.perm & 0o7777,
            uid: a.uid,
            gid: a.gid,
            epoch: 0,
            default_acl: a.default_acl,
            access_acl: a.access_acl,
            verdict: None,
        }),
        _ => Err(Error::Protocol("GetAttr")),
    })
}

/// Add directory `dir`'s attributes to `v` when `server`, which will add,
/// remove or replace a name in it, does not own it. Ordinary directories
/// return at once (their entries live on their owner).
pub fn vouch_dir(
    c: &Client,
    lane: &Lane,
    dir: InodeId,
    server: usize,
    v: &mut Vouches,
) -> Result<()> {
    if server == dir.owner() {
        return Ok(());
    }
    // The epoch is the one routed by now, not the one cached with the
    // attributes (`adapt`).
    let epoch = crate::adapt::epoch(dir);
    v.push(Vouched {
        epoch,
        ..dir_attrs(c, lane, dir)?
    });
    Ok(())
}

/// The attributes of directory `dir` from its owner, kept in the lookup
/// cache until the owner's notice drops them. With an extended access
/// ACL they carry the owner's verdict on write and search for the calling
/// thread's credentials (`atoll_proto::Verdict`), kept beside them and
/// asked again when the thread's credentials are not the ones it was made
/// for (one per directory: threads switching back and forth ask again).
/// Directories without one cost nothing more.
fn dir_attrs(c: &Client, lane: &Lane, dir: InodeId) -> Result<Vouched> {
    let dc = c.dcache();
    let cred = c.cred();
    let mut gen = 0;
    let mut cached = None;
    if let Some(dc) = dc {
        cached = dc.dir_attrs(c.session().channels(), dir);
        if let Some(a) = cached {
            if !a.access_acl || a.verdict.is_some_and(|v| v.cred == cred) {
                return Ok(a);
            }
        }
        gen = dc.generation();
    }
    let mut a = match cached {
        Some(a) => a,
        None => attrs_from_owner(c, lane, dir)?,
    };
    if a.access_acl {
        a.verdict = Some(Verdict {
            cred,
            granted: owner_grants_write_and_search(c, lane, dir)?,
        });
    }
    if let Some(dc) = dc {
        dc.set_dir_attrs(gen, a);
    }
    Ok(a)
}

/// Whether the owner of directory `dir`, which holds its access ACL, lets
/// the caller write and search it (Linux's `posix_acl_permission` there).
fn owner_grants_write_and_search(c: &Client, lane: &Lane, dir: InodeId) -> Result<bool> {
    let mask = (libc::W_OK | libc::X_OK) as u32;
    match lane.call_ok(c, dir.owner(), Request::Access { ino: dir, mask }) {
        Ok(()) => Ok(true),
        Err(Error::Errno(e)) if e == libc::EACCES => Ok(false),
        Err(e) => Err(e),
    }
}

/// The directory whose default ACL creation request `req` must carry to
/// a server that does not own it, going by the attributes `vouched` for
/// it (no message when it has none). `None` for any other request, one
/// that carries the ACL already, a symlink (which inherits nothing), or
/// a server that owns the directory (no vouched attributes: it reads the
/// ACL itself).
pub fn inherits_from(req: &Request<'_>, vouched: &[Vouched]) -> Option<InodeId> {
    let dir = match *req {
        Request::Open {
            dir,
            flags,
            inherit: Inherit::Unread,
            ..
        } if flags & libc::O_CREAT as u32 != 0 => dir,
        Request::MakeNode {
            dir,
            ftype,
            inherit: Inherit::Unread,
            ..
        }
        | Request::CreateInode {
            dir,
            ftype,
            inherit: Inherit::Unread,
            ..
        } if ftype != FileType::Symlink => dir,
        _ => return None,
    };
    vouched
        .iter()
        .any(|v| v.ino == dir && v.default_acl)
        .then_some(dir)
}

/// Give creation request `req` the default ACL `acl` of its directory.
pub fn set_inherit<'a>(req: &mut Request<'a>, acl: &'a [u8]) {
    if let Request::Open { inherit, .. }
    | Request::MakeNode { inherit, .. }
    | Request::CreateInode { inherit, .. } = req
    {
        *inherit = Inherit::Acl(acl);
    }
}

/// The default ACL of directory `dir`, from its owner: empty if it has
/// none (any more).
pub fn default_acl(c: &Client, lane: &Lane, dir: InodeId) -> Result<Vec<u8>> {
    let name = b"system.posix_acl_default";
    let r = lane.call(
        c,
        dir.owner(),
        Request::GetXattr { ino: dir, name },
        |r| match r {
            Reply::Xattr(v) => Ok(v.to_vec()),
            _ => Err(Error::Protocol("GetXattr")),
        },
    );
    match r {
        Err(Error::Errno(e)) if e == libc::ENODATA => Ok(Vec::new()),
        r => r,
    }
}

/// Linux's `may_delete` for the name of `victim` in `dir`: write and search
/// permission on `dir` (`EACCES`), and its sticky bit (`EPERM`).
///
/// Servers check this themselves; a client-coordinated rename or exchange
/// across servers checks it before its first step, because that step (a
/// new name elsewhere) could not be undone if the old name then turned out
/// not to be removable: the undo itself removes a name of the victim, and
/// a sticky directory would refuse it too. Linux checks the source first
/// as well.
pub fn check_removable(c: &Client, lane: &Lane, dir: InodeId, victim: InodeId) -> Result<()> {
    let a = dir_attrs(c, lane, dir)?;
    let cred = c.cred();
    may_write_and_search(&a, cred)?;
    if a.perm & libc::S_ISVTX == 0 || cred.uid == a.uid || cred.caps & Cred::CAP_FOWNER != 0 {
        return Ok(());
    }
    if attrs_from_owner(c, lane, victim)?.uid == cred.uid {
        Ok(())
    } else {
        Err(Error::Errno(libc::EPERM))
    }
}

/// Linux's `may_create` for a new name in `dir`: write and search
/// permission (`EACCES`). Servers check it themselves; a client-coordinated
/// link across servers checks it before its first step (`Ref` at the
/// inode's owner), so a link that will be refused changes nothing there —
/// not even the inode's ctime.
pub fn check_creatable(c: &Client, lane: &Lane, dir: InodeId) -> Result<()> {
    may_write_and_search(&dir_attrs(c, lane, dir)?, c.cred())
}

/// Write and search permission on a directory with attributes `a`, for
/// `cred` (`CAP_DAC_OVERRIDE` passes); with an extended access ACL the
/// owner's verdict for `cred` decides ([`dir_attrs`] asked for it).
fn may_write_and_search(a: &Vouched, cred: Cred) -> Result<()> {
    if a.access_acl {
        return match a.verdict {
            Some(v) if v.cred == cred && v.granted => Ok(()),
            Some(v) if v.cred == cred => Err(Error::Errno(libc::EACCES)),
            _ => Err(Error::Protocol("no ACL verdict")),
        };
    }
    let class = if cred.uid == a.uid {
        a.perm >> 6
    } else if cred.gid == a.gid || in_supplementary_groups(a.gid) {
        a.perm >> 3
    } else {
        a.perm
    };
    let write_search = (libc::W_OK | libc::X_OK) as u32;
    if class & write_search != write_search && cred.caps & Cred::CAP_DAC_OVERRIDE == 0 {
        return Err(Error::Errno(libc::EACCES));
    }
    Ok(())
}

/// Whether `gid` is one of the process's supplementary groups (the ones
/// its session registered with the servers).
fn in_supplementary_groups(gid: u32) -> bool {
    rustix::process::getgroups().is_ok_and(|g| g.iter().any(|g| g.as_raw() == gid))
}

/// [`vouch_dir`] into a fresh set.
pub fn vouches_for(c: &Client, lane: &Lane, dir: InodeId, server: usize) -> Result<Vouches> {
    let mut v = Vouches::new();
    vouch_dir(c, lane, dir, server, &mut v)?;
    Ok(v)
}

/// Add the attributes of the inode `(dir, name)` names, when a server
/// other than the one holding the entry owns it. True if added.
fn vouch_victim(
    c: &Client,
    lane: &Lane,
    dir: InodeId,
    name: &[u8],
    v: &mut Vouches,
) -> Result<bool> {
    let server = crate::adapt::entry_server(c, dir, name);
    let named = lane.call(c, server, Request::Lookup { dir, name }, |r| match r {
        Reply::Entry { ino, .. } => Ok(Some(ino)),
        _ => Err(Error::Protocol("Lookup")),
    });
    let ino = match named {
        Ok(Some(ino)) if ino.owner() != server => ino,
        Ok(_) => return Ok(false),
        Err(Error::Errno(e)) if e == libc::ENOENT => return Ok(false),
        Err(e) => return Err(e),
    };
    v.push(attrs_from_owner(c, lane, ino)?);
    Ok(true)
}

/// Run `op` with the attributes in `v`; if a sticky directory made its
/// server answer `EPERM` because another server owns an inode that
/// `victims` name, ask once more vouching for those inodes (Linux
/// `check_sticky`). A name that changes meanwhile gets `EPERM` again:
/// the vouched inode is no longer the one named.
pub fn sticky_retry<R>(
    c: &Client,
    lane: &Lane,
    victims: &[(InodeId, &[u8])],
    v: &mut Vouches,
    mut op: impl FnMut(&[Vouched]) -> Result<R>,
) -> Result<R> {
    match op(v.as_slice()) {
        Err(Error::Errno(e)) if e == libc::EPERM => {
            let mut added = false;
            for &(dir, name) in victims {
                added |= vouch_victim(c, lane, dir, name, v)?;
            }
            if !added {
                return Err(Error::Errno(e));
            }
            op(v.as_slice())
        }
        r => r,
    }
}

/// What a name-changing request does to the directories it changes at a
/// server that does not own them (`dirs[0]` the directory of the name, or a
/// rename's old directory; `dirs[1]` a rename's new one), for
/// [`after_change`]. Built before the request is sent.
pub struct NameChange {
    dirs: [Option<InodeId>; 2],
    kind: ChangeKind,
}

enum ChangeKind {
    Open,
    Add(FileType),
    Unlink,
    Rename { exchange: bool, same_dir: bool },
    Other,
}

fn is_dir(t: FileType) -> i32 {
    (t == FileType::Directory) as i32
}

impl NameChange {
    pub fn of(req: &Request<'_>, server: usize) -> NameChange {
        let away = |d: InodeId| (d.owner() != server).then_some(d);
        let (dirs, kind) = match *req {
            Request::Open { dir, flags, .. } if flags & libc::O_CREAT as u32 != 0 => {
                ([away(dir), None], ChangeKind::Open)
            }
            Request::MakeNode { dir, ftype, .. } | Request::Link { dir, ftype, .. } => {
                ([away(dir), None], ChangeKind::Add(ftype))
            }
            Request::Unlink { dir, .. } => ([away(dir), None], ChangeKind::Unlink),
            Request::Relink { dir, .. } => ([away(dir), None], ChangeKind::Other),
            Request::Rename {
                olddir,
                newdir,
                flags,
                ..
            } => {
                let same_dir = olddir == newdir;
                (
                    [away(olddir), (!same_dir).then(|| away(newdir)).flatten()],
                    ChangeKind::Rename {
                        exchange: flags & libc::RENAME_EXCHANGE != 0,
                        same_dir,
                    },
                )
            }
            _ => ([None, None], ChangeKind::Other),
        };
        NameChange { dirs, kind }
    }

    /// From the request's good reply: did a name change (an `Open` only
    /// when it created the file), and by how many subdirectories each of
    /// `dirs` changed.
    pub fn outcome(&self, r: &Reply<'_>) -> (bool, [i32; 2]) {
        match (&self.kind, r) {
            (ChangeKind::Open, Reply::Opened { created, .. }) => (*created, [0, 0]),
            (ChangeKind::Open, _) => (false, [0, 0]),
            (ChangeKind::Add(t), Reply::Linked { replaced }) => (
                true,
                [is_dir(*t) - replaced.map_or(0, |(_, f)| is_dir(f)), 0],
            ),
            (ChangeKind::Add(t), _) => (true, [is_dir(*t), 0]),
            (ChangeKind::Unlink, Reply::Unlinked { ftype, .. }) => (true, [-is_dir(*ftype), 0]),
            (
                ChangeKind::Rename { exchange, same_dir },
                Reply::Renamed {
                    ftype, replaced, ..
                },
            ) => {
                let (m, r) = (is_dir(*ftype), replaced.map_or(0, |(_, f, _)| is_dir(f)));
                let old = -m + if *exchange { r } else { 0 };
                let new = m - r;
                if *same_dir {
                    (true, [old + new, 0])
                } else {
                    (true, [old, new])
                }
            }
            _ => (true, [0, 0]),
        }
    }
}

/// Tell the owners of the directories a name change touched: mtime and
/// ctime to the time it was answered, and the change in their number of
/// subdirectories (see the module notes). Posted and best effort: a
/// directory removed meanwhile has nothing left to keep. The time is
/// taken here, before this call returns, so that anything another process
/// does to the directory after learning of the change is later, and wins
/// however the posts are ordered (`Request::Touched`).
pub fn after_change(c: &Client, lane: &Lane, change: &NameChange, deltas: [i32; 2]) {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Realtime);
    let at = atoll_proto::Timespec {
        sec: now.tv_sec,
        nsec: now.tv_nsec as u32,
    };
    for (d, delta) in change.dirs.into_iter().zip(deltas) {
        let Some(d) = d else { continue };
        let _ = lane.post(c, d.owner(), Request::Touched { dir: d, at });
        if delta != 0 && crate::adapt::distributed(d) {
            let epoch = crate::adapt::epoch(d);
            let _ = lane.post(
                c,
                d.owner(),
                Request::Subdirs {
                    dir: d,
                    delta,
                    epoch,
                },
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIR: InodeId = InodeId(0x0100_0000_0000_0007);

    fn attrs(default_acl: bool) -> Vouched {
        Vouched {
            ino: DIR,
            perm: 0o755,
            uid: 1,
            gid: 1,
            epoch: 0,
            default_acl,
            access_acl: false,
            verdict: None,
        }
    }

    fn make(ftype: FileType) -> Request<'static> {
        Request::MakeNode {
            dir: DIR,
            name: b"n",
            ftype,
            perm: 0o777,
            rdev: 0,
            target: b"t",
            home: 0,
            spread: 0,
            umask: 0o022,
            inherit: Inherit::Unread,
        }
    }

    #[test]
    fn only_creations_in_a_directory_with_a_default_acl_read_it() {
        let with = [attrs(true)];
        assert_eq!(inherits_from(&make(FileType::Directory), &with), Some(DIR));
        assert_eq!(
            inherits_from(&make(FileType::Directory), &[attrs(false)]),
            None
        );
        // The owner is the server: nothing vouched, nothing to send.
        assert_eq!(inherits_from(&make(FileType::Regular), &[]), None);
        assert_eq!(inherits_from(&make(FileType::Symlink), &with), None);
        let open = |flags: u32| Request::Open {
            dir: DIR,
            name: b"n",
            flags,
            perm: 0o666,
            umask: 0o022,
            inherit: Inherit::Unread,
        };
        assert_eq!(inherits_from(&open(libc::O_RDONLY as u32), &with), None);
        let mut req = open(libc::O_CREAT as u32);
        assert_eq!(inherits_from(&req, &with), Some(DIR));
        // Once carried, it is not read again (a re-routed request).
        set_inherit(&mut req, b"acl");
        assert!(matches!(
            req,
            Request::Open {
                inherit: Inherit::Acl(b"acl"),
                ..
            }
        ));
        assert_eq!(inherits_from(&req, &with), None);
    }
}
