//! Creation affinity (Hare §3.7.5): a new file's inode goes to a server
//! close to the creating process.
//!
//! If the entry's server (`entry_server(dir, name)`) is on the socket (and
//! NUMA node) of the CPU the process runs on, the coalesced path stays
//! (one `Open`/`MakeNode` there creates and links, Hare §3.7.4). Otherwise
//! the inode goes to the process's *designated local server* — one of the
//! servers of its socket, chosen by pid so that the processes of a socket
//! spread over its servers — in steps: `CreateInode` there (pending, freed
//! if the session dies), a posted `Adopt` (the inode's first link), then
//! `Link` at the entry's server. A failed `Link` is undone with `Unref`
//! (and `Close`).
//!
//! Crash safety: `Adopt` is enqueued before `Link` is sent, and a server
//! serves what a dead session queued before dropping it, so once a name
//! can exist its inode holds a link: a name never outlives its inode. A
//! process killed between the two sends (or after a failed `Link`, before
//! its `Unref`) leaves an inode that no name reaches: space, never a
//! dangling name.
//!
//! The socket is the one of the CPU the process runs on *now*
//! (`sched_getcpu`, served by the vDSO): processes migrate. Server sockets
//! come with the boot info (`InstanceInfo::topology`). Directories are not
//! placed near their creator: a directory's inode and home decide where its
//! entries live, which every user of the directory shares. They are spread
//! instead ([`directory_home`]): a new plain directory goes, inode and
//! entries, to `name_hash(parent, name) % N` by the same steps.
//! `--without affinity` turns all of this off (every new inode where its
//! entry is).

use atoll_proto::{name_hash, Attr, DescId, FileType, InodeId, Reply, Request};

use crate::error::{Error, Result};
use crate::session::{Client, Lane};

/// The server that should hold a new inode whose entry `(dir, name)`
/// lives on `entry`, if not `entry` itself.
pub fn placement(c: &Client, dir: InodeId, name: &[u8]) -> Option<usize> {
    if c.info.without.affinity || c.members() < 2 {
        return None;
    }
    let entry = crate::adapt::entry_server(c, dir, name);
    if let Some(node) = node_members(c) {
        return node_placement(node, entry);
    }
    let t = &c.info.topology;
    let domain = t.domain_of_cpu(rustix::thread::sched_getcpu());
    if t.near(entry, domain) {
        return None;
    }
    // The topology covers every slot the instance has room for; only
    // members take inodes.
    let members = c.members();
    let local = || t.local_servers(domain).filter(move |&s| s < members);
    let n = local().count();
    if n == 0 {
        return None;
    }
    // One designated server per process, spread by pid (Hare §3.7.5: "to
    // avoid all clients storing files on the same local server").
    let k = std::process::id() as usize % n;
    local()
        .nth(k)
        .map(|s| c.live_server(s))
        .filter(|&s| s != entry)
}

/// The members served on this process's node, when the instance spans
/// nodes (`InstanceInfo::node_members`): creation affinity across hosts
/// (fos §3.2) replaces the socket's, as crossing the network costs far
/// more than crossing sockets.
fn node_members(c: &Client) -> Option<&[u32]> {
    Some(c.info.node_members.as_slice()).filter(|m| !m.is_empty())
}

/// The node's member that takes a new inode whose entry is on `entry`:
/// none (the coalesced path) when the entry is on the node already, else
/// one per process, spread by pid as the designated local server is.
fn node_placement(node: &[u32], entry: usize) -> Option<usize> {
    if node.contains(&(entry as u32)) {
        return None;
    }
    Some(node[std::process::id() as usize % node.len()] as usize)
}

/// The server a new plain directory `(dir, name)` should live on (inode
/// and entries), if not the entry's: `name_hash(dir, name) % N`, so that a
/// tree's directories, and with them their files (created where their
/// directory's entries live), spread over all servers and all of the
/// buffer cache's users borrow from its pool (`atoll-server`'s
/// `fs::blocks`). A directory is one object every user of it shares, so
/// unlike files it is not placed near its creator. `None` under
/// `--without affinity`, with one server, while servers timeshare cores
/// with programs (not spinning; see below), in a distributed parent (whose
/// names already spread by the same hash) and when the hash names the
/// entry's server.
///
/// Cost in messages: `mkdir` takes two round trips and two posted
/// messages (`CreateInode` and `Adopt` here, `Link` and `MoveDone` at the
/// entry's server) instead of one
/// `MakeNode`, and `rmdir` takes the three-phase protocol (mark, unlink,
/// commit) instead of one `Unlink`; everything done inside the directory
/// costs what it did, since its inode and entries share a server.
pub fn directory_home(c: &Client, dir: InodeId, name: &[u8]) -> Option<usize> {
    if c.info.without.affinity || c.members() < 2 || crate::adapt::distributed(dir) {
        return None;
    }
    // Across hosts the tree a program makes stays on its node, as its
    // files do: spread over the node's members, never over the network.
    if let Some(node) = node_members(c) {
        let home = node[(name_hash(dir, name) % node.len() as u64) as usize] as usize;
        return (home != crate::adapt::entry_server(c, dir, name)).then_some(home);
    }
    // Only where servers have cores of their own (`--split`, or any
    // spinning servers). Where they timeshare cores with the programs, a
    // tree spread over servers keeps every server awake and polling on a
    // core a program needs: measured on 2 CPUs with 2 servers, creates ran
    // 3.3x slower spread than on the parent's server, with the same
    // messages per operation. The shared block pool already gives every
    // server all of the cache, so keeping a tree together costs no space.
    if c.info.poll != atoll_proto::boot::PollMode::Spin {
        return None;
    }
    let home = (name_hash(dir, name) % c.members() as u64) as usize;
    (home != crate::adapt::entry_server(c, dir, name)).then_some(home)
}

/// What [`create`] made.
pub struct Created {
    pub ino: InodeId,
    /// The description, when `open` was given.
    pub opened: Option<(DescId, Attr)>,
}

/// Create `name` in `dir` with its inode on `local` and link it at the
/// entry's server. `perm` is the mode asked for (the server applies the
/// umask, or the directory's default ACL). On `EEXIST` (or any
/// failure of the link) nothing is left behind.
#[allow(clippy::too_many_arguments)]
pub fn create(
    c: &Client,
    lane: &Lane,
    local: usize,
    dir: InodeId,
    name: &[u8],
    ftype: FileType,
    perm: u32,
    rdev: u64,
    target: &[u8],
    open: Option<u32>,
) -> Result<Created> {
    // The new inode's group and set-group-id bit follow the directory's
    // (dirperm.rs), wherever the directory lives.
    let vouched = crate::dirperm::vouches_for(c, lane, dir, local)?;
    let made = lane.call_vouched(
        c,
        local,
        vouched.as_slice(),
        Request::CreateInode {
            dir,
            name,
            ftype,
            perm,
            rdev,
            target,
            open,
            umask: crate::ns::umask(c),
            inherit: atoll_proto::Inherit::Unread,
        },
        |r| match r {
            Reply::Entry { ino, .. } => Ok((Created { ino, opened: None }, false)),
            r => {
                let watched = matches!(r, Reply::Opened { watched: true, .. });
                crate::file::opened(r)
                    .map(|(desc, attr)| {
                        let opened = Some((desc, attr));
                        (
                            Created {
                                ino: attr.ino,
                                opened,
                            },
                            watched,
                        )
                    })
                    .ok_or(Error::Protocol("CreateInode"))
            }
        },
    )?;
    let (made, watched) = made;
    // The first link before the name exists (see the module docs). Posted:
    // later requests to `local` on this lane come after it, and one on
    // another lane finds the inode pending, which behaves as linked.
    let undo = |e: Error| {
        let _ = lane.call_ok(
            c,
            local,
            Request::Unref {
                ino: made.ino,
                via: None,
                replaced: false,
            },
        );
        if let Some((desc, _)) = made.opened {
            let _ = lane.call_ok(c, local, Request::Close { desc });
        }
        Err(e)
    };
    if lane
        .post(c, local, Request::Adopt { ino: made.ino })
        .is_err()
    {
        if let Err(e) = lane.call_ok(c, local, Request::Adopt { ino: made.ino }) {
            return undo(e);
        }
    }
    let entry = crate::adapt::entry_server(c, dir, name);
    let vouched = match crate::dirperm::vouches_for(c, lane, dir, entry) {
        Ok(v) => v,
        Err(e) => return undo(e),
    };
    let linked = crate::session::retry_marked(|| {
        lane.call_vouched(
            c,
            entry,
            vouched.as_slice(),
            Request::Link {
                dir,
                name,
                ino: made.ino,
                ftype,
                replace: false,
                moved_from: None,
            },
            |r| match r {
                Reply::Linked { .. } => Ok(()),
                _ => Err(Error::Protocol("Link")),
            },
        )
    });
    match linked {
        Ok(()) => {
            if ftype == FileType::Directory {
                // A directory's `Link` is provisional until `MoveDone`
                // (the entry's server removes it if the session dies, as
                // for a move); posted, served before the session's end.
                let done = Request::MoveDone { dir, name };
                if lane.post(c, entry, done).is_err() {
                    let _ = lane.call_ok(c, entry, Request::MoveDone { dir, name });
                }
            }
            if let (Some((desc, _)), true) = (made.opened, watched) {
                // The open is reported now, after the creation the `Link`
                // reported; a round trip, so it is queued before `open`
                // returns, as on Linux.
                let via = atoll_proto::EntryName { dir, name };
                let _ = lane.call_ok(c, local, Request::InotifyNamed { desc, via });
            }
            Ok(made)
        }
        Err(e) => undo(e),
    }
}

/// `open` with `O_CREAT` under creation affinity: `Ok(None)` when the
/// coalesced `Open` at the entry's server should do it (entry close by,
/// affinity off, the name is known to exist, or it appeared meanwhile).
/// `perm` is the mode asked for.
pub fn try_open(
    c: &Client,
    lane: &Lane,
    dir: InodeId,
    name: &[u8],
    flags: u32,
    perm: u32,
) -> Result<Option<(DescId, Attr)>> {
    let special = (libc::O_DIRECTORY | libc::O_PATH | libc::O_TMPFILE) as u32;
    if flags & libc::O_CREAT as u32 == 0 || flags & special != 0 {
        return Ok(None);
    }
    let Some(local) = placement(c, dir, name) else {
        return Ok(None);
    };
    let excl = flags & libc::O_EXCL as u32 != 0;
    if !excl {
        // A name the lookup cache knows exists: opening it is the
        // coalesced path's job (one message instead of three).
        if let Some(dc) = c.dcache() {
            if dc.get_entry(c.session().channels(), dir, name).is_some() {
                return Ok(None);
            }
        }
    }
    match create(
        c,
        lane,
        local,
        dir,
        name,
        FileType::Regular,
        perm,
        0,
        b"",
        Some(flags),
    ) {
        Ok(m) => Ok(m.opened),
        // Exists: without `O_EXCL` open it where it is.
        Err(Error::Errno(libc::EEXIST)) if !excl => Ok(None),
        // The directory's mode changed under the link (`adapt`): the
        // coalesced path routes again.
        Err(Error::Errno(e)) if e == crate::adapt::EMODE => Ok(None),
        Err(e) => Err(e),
    }
}

/// `MakeNode` of a non-directory under creation affinity: `Ok(None)` when
/// the coalesced `MakeNode` at the entry's server should do it.
#[allow(clippy::too_many_arguments)]
pub fn try_make(
    c: &Client,
    lane: &Lane,
    dir: InodeId,
    name: &[u8],
    ftype: FileType,
    perm: u32,
    rdev: u64,
    target: &[u8],
) -> Result<Option<InodeId>> {
    if ftype == FileType::Directory {
        let r = match directory_home(c, dir, name) {
            Some(home) => create(c, lane, home, dir, name, ftype, perm, 0, b"", None),
            None => return Ok(None),
        };
        return coalesce_on_stale_mode(r.map(|m| m.ino));
    }
    let Some(local) = placement(c, dir, name) else {
        return Ok(None);
    };
    let r = create(c, lane, local, dir, name, ftype, perm, rdev, target, None);
    coalesce_on_stale_mode(r.map(|m| m.ino))
}

/// A creation whose `Link` met a changed directory mode (`adapt`) left
/// nothing behind: the coalesced `MakeNode` routes again.
fn coalesce_on_stale_mode(r: Result<InodeId>) -> Result<Option<InodeId>> {
    match r {
        Ok(ino) => Ok(Some(ino)),
        Err(Error::Errno(e)) if e == crate::adapt::EMODE => Ok(None),
        Err(e) => Err(e),
    }
}
