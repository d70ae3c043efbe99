//! This server's side of the lease board (`atoll_msg::lease`): a data
//! version per regular file a client reads, published where the client
//! checks it around a copy from blocks it learnt from a `Read` reply, so
//! that a read of blocks it knows needs no message (Hare §3.3).
//!
//! A file takes its slot when a client reads it by message (`Read`). The
//! slot then moves to a new version (a server-wide counter, so that a
//! version is never seen twice even across evictions):
//!
//! * at every write grant, before its reply (`data`);
//! * before the server itself changes bytes or blocks a client may know
//!   (`SetAttr` of the size, `O_TRUNC`, `fallocate`): `revoke` publishes
//!   the new version with reads refused, so a copy under way fails;
//! * whenever the file's map fingerprint (size and block counts) moved,
//!   which every request that names the file, and every session's end,
//!   checks after it is served.
//!
//! Beside the version, the slot says until when a read may go without a
//! message (`until`, wall-clock seconds): never (0) while anything here is
//! watched (a read may owe an `IN_ACCESS`, also through `O_NOATIME`) or
//! while the file is mapped (stores through a mapping and blocks retained
//! for it change the map without a request); only through `O_NOATIME`
//! descriptions ([`NOATIME_ONLY`]) when a read now would move the atime
//! (relatime: atime not newer than both mtime and ctime); otherwise until
//! the atime is a day old. A request that makes the atime stale (a write,
//! a `SetAttr`, a link count change) is one that names the file, so its
//! check publishes `until` 0; the next read goes by message, moves the
//! atime, and its check allows reads again.
//!
//! As for the size board: the server keeps its own mirror, never reads
//! the board back, attaches it only once its generation is set, and
//! under `cfg(test)` checks every held slot after every request.

use std::rc::Rc;

use atoll_msg::{slot_of, Control, LEASE_SLOTS};
use atoll_proto::{FileType, InodeId, Request};

use super::{inode::Inode, older, FileServer};
use crate::store::BlockStore;

/// What, of an inode, a block list a client learnt depends on.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
struct Print {
    size: u64,
    blocks: usize,
    retained: usize,
    deferred: usize,
}

impl Print {
    fn of(i: &Inode) -> Print {
        Print {
            size: i.size,
            blocks: i.blocks.len(),
            retained: i.retained.len(),
            deferred: i.deferred.len(),
        }
    }
}

/// One held slot, as this server last wrote it.
#[derive(Clone, Copy, Default)]
struct Held {
    ino: u64,
    version: u64,
    until: u64,
    print: Print,
}

/// The board of one server incarnation, and the mirror of its slots.
pub(super) struct LeaseBoard {
    control: Rc<Control>,
    index: usize,
    generation: u64,
    /// The last version handed out (versions are never reused).
    next: u64,
    held: Box<[Held]>,
    /// Whether anything here was watched at the last check (`busy`).
    watched: bool,
}

impl LeaseBoard {
    pub(super) fn new(control: Rc<Control>, index: usize, generation: u64) -> LeaseBoard {
        LeaseBoard {
            control,
            index,
            generation,
            next: 0,
            held: vec![Held::default(); LEASE_SLOTS].into_boxed_slice(),
            watched: false,
        }
    }

    fn write(&mut self, k: usize, h: Held) {
        self.held[k] = h;
        self.control
            .lease_slot(self.index, k)
            .publish(h.ino, h.version, h.until, self.generation);
    }

    fn fresh(&mut self) -> u64 {
        self.next += 1;
        self.next
    }
}

/// `until` of a file whose reads may go without a message only through
/// `O_NOATIME` descriptions (a read now would move its atime).
pub(super) const NOATIME_ONLY: u64 = 1;

/// Until when (wall-clock seconds) a read of `i` leaves its atime alone
/// and may go without a message; [`NOATIME_ONLY`]: only reads that never
/// move it may; 0: none may now.
fn until(i: &Inode, watched: bool) -> u64 {
    if watched || i.maps > 0 || !i.retained.is_empty() || i.ftype != FileType::Regular {
        return 0;
    }
    // The server's read moves the atime unless it is newer than both
    // mtime and ctime and at most a day old (`data::read`).
    if older(i.mtime, i.atime) && older(i.ctime, i.atime) && i.atime.sec >= 0 {
        i.atime.sec as u64 + 86_400
    } else {
        NOATIME_ONLY
    }
}

impl<S: BlockStore> FileServer<S> {
    /// The inode a request names, whose slot is checked after it.
    pub(super) fn lease_subject(&self, req: &Request<'_>) -> Option<InodeId> {
        use Request as Q;
        self.leases.as_ref()?;
        match req {
            Q::Read { desc, .. }
            | Q::Write { desc, .. }
            | Q::ReadData { desc, .. }
            | Q::WriteData { desc, .. }
            | Q::Close { desc }
            | Q::SetFlags { desc, .. } => self.descs.get(desc).map(|d| d.ino),
            Q::GetAttr { ino }
            | Q::SetAttr { ino, .. }
            | Q::Fallocate { ino, .. }
            | Q::MapBlocks { ino, .. }
            | Q::Map { ino, .. }
            | Q::Unmap { ino, .. }
            | Q::Ref { ino, .. }
            | Q::Unref { ino, .. }
            | Q::Link { ino, .. }
            | Q::Relink { ino, .. }
            | Q::OpenInode { ino, .. }
            | Q::SetXattr { ino, .. }
            | Q::RemoveXattr { ino, .. }
            | Q::WriteDone { ino, .. } => Some(*ino),
            _ => None,
        }
    }

    /// After a request: the subject's slot follows its inode, and every
    /// held slot follows a watch appearing or going.
    pub(super) fn lease_after(&mut self, subject: Option<InodeId>) {
        let busy = self.notify.busy();
        let Some(b) = self.leases.as_mut() else {
            return;
        };
        if b.watched != busy {
            b.watched = busy;
            self.lease_sync_all();
        } else if let Some(ino) = subject {
            self.lease_sync(ino);
        }
    }

    /// A client read `ino` by message: give it its slot (the client's
    /// next read learns the version, the one after may need no message).
    pub(super) fn lease_claim(&mut self, ino: InodeId) {
        let watched = self.notify.busy();
        let Some(b) = self.leases.as_mut() else {
            return;
        };
        let k = slot_of(ino.0);
        if b.held[k].ino == ino.0 {
            self.lease_sync(ino);
            return;
        }
        if let Some(i) = self
            .inodes
            .get(&ino)
            .filter(|i| i.ftype == FileType::Regular)
        {
            let h = Held {
                ino: ino.0,
                version: b.fresh(),
                until: until(i, watched),
                print: Print::of(i),
            };
            b.write(k, h);
        }
    }

    /// `ino`'s slot, if it holds it, follows the inode: a new version if
    /// its map fingerprint moved, a new `until` if that did.
    pub(super) fn lease_sync(&mut self, ino: InodeId) {
        let watched = self.notify.busy();
        let Some(b) = self.leases.as_mut() else {
            return;
        };
        let k = slot_of(ino.0);
        let h = b.held[k];
        if h.ino != ino.0 {
            return;
        }
        let Some(i) = self.inodes.get(&ino) else {
            b.write(k, Held::default());
            return;
        };
        let (print, until) = (Print::of(i), until(i, watched));
        if print != h.print {
            let version = b.fresh();
            b.write(
                k,
                Held {
                    version,
                    until,
                    print,
                    ..h
                },
            );
        } else if until != h.until {
            b.write(k, Held { until, ..h });
        }
    }

    /// Every held slot follows its inode (a watch came or went, a
    /// session ended: rare).
    pub(super) fn lease_sync_all(&mut self) {
        let Some(b) = self.leases.as_ref() else {
            return;
        };
        let held: Vec<u64> = b.held.iter().map(|h| h.ino).filter(|&i| i != 0).collect();
        for ino in held {
            self.lease_sync(InodeId(ino));
        }
    }

    /// Before a change the server makes to bytes or blocks a client may
    /// know (a truncation's zeroed tail, a punched or zeroed range): a new
    /// version, reads refused until the check after the request allows
    /// them again, so a copy that overlaps the change fails.
    pub(super) fn lease_revoke(&mut self, ino: InodeId) {
        let Some(b) = self.leases.as_mut() else {
            return;
        };
        let k = slot_of(ino.0);
        let h = b.held[k];
        if h.ino == ino.0 {
            let version = b.fresh();
            b.write(
                k,
                Held {
                    version,
                    until: 0,
                    ..h
                },
            );
        }
    }

    /// A write grant of `ino`, before its reply: the client copies after
    /// it, so every block list learnt before is of an older version.
    pub(super) fn lease_granted(&mut self, ino: InodeId) {
        self.lease_revoke(ino);
        self.lease_sync(ino);
    }

    /// `ino` was freed: its slot, if it holds it, holds nobody.
    pub(super) fn lease_freed(&mut self, ino: InodeId) {
        let Some(b) = self.leases.as_mut() else {
            return;
        };
        let k = slot_of(ino.0);
        if b.held[k].ino == ino.0 {
            b.write(k, Held::default());
        }
    }

    /// The state is replaced or this incarnation stops serving: the slots
    /// it holds hold nobody.
    pub(super) fn forget_lease_slots(&mut self) {
        let Some(b) = self.leases.as_mut() else {
            return;
        };
        for k in 0..LEASE_SLOTS {
            if b.held[k].ino != 0 {
                b.write(k, Held::default());
            }
        }
    }

    /// Every slot this server holds says its inode's version and `until`
    /// as the mirror has them, the mirror's fingerprint is the inode's (a
    /// change of the map that no check followed fails here), and none
    /// allows reads that the inode would not (after each request, in
    /// tests). A slot may say `until` 0 where reads would be allowed
    /// (a mapping that ended with its session): that only costs messages.
    #[cfg(test)]
    pub(super) fn check_lease_board(&self) {
        let Some(b) = self.leases.as_ref() else {
            return;
        };
        let watched = self.notify.busy();
        for (k, h) in b.held.iter().enumerate().filter(|(_, h)| h.ino != 0) {
            let i = self.inodes.get(&InodeId(h.ino));
            let i = i.unwrap_or_else(|| panic!("lease slot {k} names freed inode {:#x}", h.ino));
            assert_eq!(
                Print::of(i),
                h.print,
                "lease slot {k} of inode {:#x}: the map changed without a new version",
                h.ino
            );
            let want = until(i, watched);
            assert!(
                h.until == want || h.until == 0 || h.until == NOATIME_ONLY && want != 0,
                "lease slot {k} of inode {:#x} allows reads until {} (inode: {want})",
                h.ino,
                h.until
            );
            let t = b.control.lease_slot(b.index, k).begin(h.ino, b.generation);
            assert_eq!(
                t.map(|t| (t.version, t.until)),
                Some((h.version, h.until)),
                "lease slot {k}: the board is not the mirror"
            );
        }
    }

    /// The version and `until` published for `ino`, as a client would
    /// read them (tests).
    #[cfg(test)]
    pub(super) fn published_lease(&self, ino: InodeId) -> Option<(u64, u64)> {
        let b = self.leases.as_ref()?;
        let t = b
            .control
            .lease_slot(b.index, slot_of(ino.0))
            .begin(ino.0, b.generation)?;
        Some((t.version, t.until))
    }
}
