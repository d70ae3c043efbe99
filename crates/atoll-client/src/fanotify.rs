//! `fanotify` on atoll paths: marks are watches of the inotify machinery
//! (`inotify.rs`, server `fs/inotify.rs`), read as fanotify events.
//!
//! `fanotify_init` stays Linux's (its privilege rules are the kernel's).
//! The first `fanotify_mark` of an atoll path on a host fanotify
//! descriptor that has no mark yet turns it into an atoll queue in place,
//! as `inotify_add_watch` does; the group's flags come from the kernel's
//! `fdinfo`. A mark is a watch (`InotifyAddWatch`, then `InotifyRegister`
//! with every server that sees the inode change) whose mask carries
//! [`WATCH_FANOTIFY`]: its records also name the inode the event is about
//! and the process whose request made it (`RequestFrame::pid`).
//! A mount or filesystem mark watches [`ALL_INODES`] on every server.
//!
//! `read` turns records into `struct fanotify_event_metadata` (and info
//! records: `FAN_REPORT_FID`, `FAN_REPORT_DIR_FID`, `FAN_REPORT_NAME`),
//! merging an event into an unread one with the same object and
//! information, as Linux's `fanotify_merge` does while events wait in its
//! queue. In descriptor mode each event gets a new read-only atoll
//! descriptor of its object, opened in the reader. The file handle of an
//! object is what `name_to_handle_at` answers for it ([`handle_of`]).

use std::collections::BTreeMap;
use std::sync::Mutex;

use core::sync::atomic::Ordering;

use atoll_proto::inotify::{self as ino_hdr, ALL_INODES, EVENT_HEADER, OBJECT_LEN, WATCH_FANOTIFY};
use atoll_proto::{FileType, InodeId, QueueRef, Reply, Request};

use crate::error::{err, Error, Result};
use crate::fdtable::{self, DescInfo, DescRef};
use crate::meta::{self, Target};
use crate::ring::Ring;
use crate::session::{Client, Lane};
use crate::{file, inotify, sys, Out};

/// Marks a queue cookie as a fanotify group's (beside `QUEUE_COOKIE`).
pub const FAN_COOKIE: u64 = 1 << 41;

// `<linux/fanotify.h>`.
const FAN_MODIFY: u64 = 0x2;
const FAN_ATTRIB: u64 = 0x4;
const FAN_CLOSE_WRITE: u64 = 0x8;
const FAN_ACCESS: u64 = 0x1;
const FAN_CLOSE_NOWRITE: u64 = 0x10;
const FAN_OPEN: u64 = 0x20;
const FAN_MOVED_FROM: u64 = 0x40;
const FAN_MOVED_TO: u64 = 0x80;
const FAN_CREATE: u64 = 0x100;
const FAN_DELETE: u64 = 0x200;
const FAN_DELETE_SELF: u64 = 0x400;
const FAN_MOVE_SELF: u64 = 0x800;
const FAN_OPEN_EXEC: u64 = 0x1000;
const FAN_Q_OVERFLOW: u64 = 0x4000;
const FAN_PERM_EVENTS: u64 = 0x0001_0000 | 0x0002_0000 | 0x0004_0000 | 0x0008_0000;
const FAN_ONDIR: u64 = 0x4000_0000;
const FAN_EVENT_ON_CHILD: u64 = 0x0800_0000;
/// Events a descriptor-mode group may ask for (`FANOTIFY_FD_EVENTS`).
const FD_EVENTS: u64 =
    FAN_ACCESS | FAN_MODIFY | FAN_CLOSE_WRITE | FAN_CLOSE_NOWRITE | FAN_OPEN | FAN_OPEN_EXEC;
/// Events only groups reporting file handles may ask for.
const FID_EVENTS: u64 = FAN_ATTRIB
    | FAN_MOVED_FROM
    | FAN_MOVED_TO
    | FAN_CREATE
    | FAN_DELETE
    | FAN_DELETE_SELF
    | FAN_MOVE_SELF;
const DIRENT_EVENTS: u64 = FAN_MOVED_FROM | FAN_MOVED_TO | FAN_CREATE | FAN_DELETE;

const FAN_MARK_ADD: u32 = 0x1;
const FAN_MARK_REMOVE: u32 = 0x2;
const FAN_MARK_DONT_FOLLOW: u32 = 0x4;
const FAN_MARK_ONLYDIR: u32 = 0x8;
const FAN_MARK_IGNORED_MASK: u32 = 0x20;
const FAN_MARK_IGNORED_SURV_MODIFY: u32 = 0x40;
const FAN_MARK_FLUSH: u32 = 0x80;
const FAN_MARK_MOUNT: u32 = 0x10;
const FAN_MARK_FILESYSTEM: u32 = 0x100;
const FAN_MARK_EVICTABLE: u32 = 0x200;

const FAN_REPORT_FID: u32 = 0x200;
const FAN_REPORT_DIR_FID: u32 = 0x400;
const FAN_REPORT_NAME: u32 = 0x800;
const FAN_REPORT_TARGET_FID: u32 = 0x1000;
const FAN_REPORT_PIDFD: u32 = 0x80;
const FAN_UNLIMITED_QUEUE: u32 = 0x10;

const INFO_FID: u8 = 1;
const INFO_DFID_NAME: u8 = 2;
const INFO_DFID: u8 = 3;

const METADATA_LEN: usize = 24;
const FANOTIFY_METADATA_VERSION: u8 = 3;
const FAN_NOFD: i32 = -1;

/// `handle_type` of an atoll file handle (`name_to_handle_at`): a zero
/// generation word, then the inode id, which is never reused (Hare §3.1);
/// 12 bytes, as tmpfs's handles.
pub const HANDLE_TYPE: i32 = 0x61;
/// Length of an atoll file handle.
pub const HANDLE_BYTES: usize = 12;
/// `f_fsid` of the mount (`statfs`), which fanotify's info records carry.
pub const FSID: [i32; 2] = [0x6174_6f6c, 0x6c00_0001];

/// One mark of a group.
#[derive(Clone)]
struct Mark {
    key: InodeId,
    ftype: FileType,
    /// The fanotify mask (events and `FAN_ONDIR`/`FAN_EVENT_ON_CHILD`).
    mask: u64,
    /// The path marked (descriptors of events name objects under it).
    path: Vec<u8>,
}

/// What a reader needs of a group: flags from `fanotify_init` and marks
/// by watch descriptor.
#[derive(Clone, Default)]
struct Group {
    flags: u32,
    event_flags: u32,
    marks: BTreeMap<i32, Mark>,
}

/// Groups of this process by the queue's inode id (inherited by `fork`).
static GROUPS: Mutex<BTreeMap<u64, Group>> = Mutex::new(BTreeMap::new());

fn groups() -> std::sync::MutexGuard<'static, BTreeMap<u64, Group>> {
    GROUPS.lock().unwrap_or_else(|p| p.into_inner())
}

/// The groups among `queues`, whose descriptors survive an `execve`
/// (`ATOLL_STATE`): the new image reads them as the old one did.
pub(crate) fn carry(queues: &[u64]) -> Vec<crate::state::GroupState> {
    groups()
        .iter()
        .filter(|(q, _)| queues.contains(q))
        .map(|(&queue, g)| crate::state::GroupState {
            queue,
            flags: g.flags,
            event_flags: g.event_flags,
            marks: g
                .marks
                .iter()
                .map(|(&wd, m)| crate::state::MarkState {
                    wd,
                    key: m.key.0,
                    ftype: fdtable::ftype_code(m.ftype),
                    mask: m.mask,
                    path: m.path.clone(),
                })
                .collect(),
        })
        .collect()
}

/// In a new image: the groups the old one carried.
pub(crate) fn restore(list: &[crate::state::GroupState]) {
    let mut all = groups();
    for g in list {
        let marks = g
            .marks
            .iter()
            .map(|m| {
                let mark = Mark {
                    key: InodeId(m.key),
                    ftype: fdtable::ftype_from_code(m.ftype),
                    mask: m.mask,
                    path: m.path.clone(),
                };
                (m.wd, mark)
            })
            .collect();
        let group = Group {
            flags: g.flags,
            event_flags: g.event_flags,
            marks,
        };
        all.insert(g.queue, group);
    }
}

/// Is this description a fanotify group?
pub fn is_group(d: &DescRef) -> bool {
    inotify::is_queue(d) && d.cookie().load(Ordering::Relaxed) & FAN_COOKIE != 0
}

/// `fanotify_mark(fd, flags, mask, dirfd, path)`.
pub fn mark(c: &Client, a: &[u64; 6]) -> Result<Out> {
    let (fd, flags, mask, dirfd, path) = (
        a[0] as i32 as i64,
        a[1] as u32,
        a[2],
        crate::fdarg(a[3]),
        a[4],
    );
    let group = fdtable::get(fd).filter(is_group);
    if group.is_none() && fdtable::is_atoll(fd) {
        return err(libc::EINVAL); // an atoll descriptor, not a group
    }
    let action = flags & (FAN_MARK_ADD | FAN_MARK_REMOVE | FAN_MARK_FLUSH);
    let kind = flags & (FAN_MARK_MOUNT | FAN_MARK_FILESYSTEM);
    if action.count_ones() != 1 || kind == FAN_MARK_MOUNT | FAN_MARK_FILESYSTEM {
        return err(libc::EINVAL);
    }
    if action == FAN_MARK_FLUSH {
        return match group {
            Some(g) => flush(c, &g, kind != 0),
            None => Ok(Out::Host),
        };
    }
    let lane = c.lane()?;
    let follow = flags & FAN_MARK_DONT_FOLLOW == 0;
    let target = meta::resolve(c, &lane, dirfd, path, follow, true)?;
    let (ino, ftype) = match (target, &group) {
        (Target::Node { ino, ftype, .. }, _) => (ino, ftype),
        (Target::Host, None) => return Ok(Out::Host),
        (Target::Rehost(p), None) => return Ok(Out::Rehost(p)),
        // A host path on an atoll group: not supported (as inotify's).
        (_, Some(_)) => return err(libc::EXDEV),
    };
    let group = match group {
        Some(g) => g,
        None => {
            // Read from the kernel's descriptor before it is replaced.
            let (flags, event_flags) = init_flags(fd)?;
            let g = inotify::convert_host_queue(c, &lane, fd, inotify::Kind::Fanotify)?;
            let mut all = groups();
            all.insert(
                g.ino().0,
                Group {
                    flags,
                    event_flags,
                    ..Group::default()
                },
            );
            drop(all);
            g
        }
    };
    let g = groups().get(&group.ino().0).cloned().unwrap_or_default();
    check_mask(&g, flags, mask, kind)?;
    if flags & FAN_MARK_ONLYDIR != 0 && ftype != FileType::Directory {
        return err(libc::ENOTDIR);
    }
    let key = if kind != 0 { ALL_INODES } else { ino };
    let path = mark_path(c, dirfd, path);
    if action == FAN_MARK_ADD {
        crate::inotify::check_readable(c, &lane, ino)?;
        let old = g
            .marks
            .values()
            .find(|m| m.key == key)
            .map_or(0, |m| m.mask);
        let mark = Mark {
            key,
            ftype,
            mask: old | mask,
            path,
        };
        set_mark(c, &lane, &group, mark, c.members().max(1))
    } else {
        let Some((wd, m)) = g.marks.iter().find(|(_, m)| m.key == key) else {
            return err(libc::ENOENT);
        };
        let left = m.mask & !mask;
        if left & !(FAN_ONDIR | FAN_EVENT_ON_CHILD) == 0 {
            remove_mark(c, &lane, &group, *wd)?;
            return Ok(Out::Done(0));
        }
        let mark = Mark {
            mask: left,
            ..m.clone()
        };
        set_mark(c, &lane, &group, mark, c.members().max(1))
    }
}

/// Linux's checks of a mark's mask against the group
/// (`fanotify_mark`'s `EINVAL` cases for the calls built here).
fn check_mask(g: &Group, flags: u32, mask: u64, kind: u32) -> Result<()> {
    let known = FD_EVENTS | FID_EVENTS | FAN_PERM_EVENTS | FAN_ONDIR | FAN_EVENT_ON_CHILD;
    if mask & !known != 0 || flags & FAN_MARK_ADD != 0 && mask == 0 {
        return err(libc::EINVAL);
    }
    let fid_mode = g.flags & (FAN_REPORT_FID | FAN_REPORT_DIR_FID) != 0;
    if mask & FID_EVENTS != 0 && (!fid_mode || kind == FAN_MARK_MOUNT) {
        return err(libc::EINVAL);
    }
    // Nothing on atoll waits for a listener's permission (opens and
    // reads do not reach a server), and ignore masks and evictable marks
    // are not built: docs/COMPATIBILITY.md.
    let unbuilt = FAN_MARK_IGNORED_MASK | FAN_MARK_IGNORED_SURV_MODIFY | FAN_MARK_EVICTABLE;
    if mask & FAN_PERM_EVENTS != 0 || flags & unbuilt != 0 {
        return err(libc::EOPNOTSUPP);
    }
    Ok(())
}

/// The absolute path `path` (relative to `dirfd`) names, lexically.
fn mark_path(c: &Client, dirfd: i64, path: u64) -> Vec<u8> {
    let p = sys::user_path(path).unwrap_or(&[]);
    if p.starts_with(b"/") {
        return p.to_vec();
    }
    let mut base = if dirfd == libc::AT_FDCWD as i64 {
        c.cwd().map(|w| w.path.clone()).unwrap_or_default()
    } else {
        fdtable::get(dirfd)
            .and_then(|d| d.path().map(<[u8]>::to_vec))
            .unwrap_or_default()
    };
    if !p.is_empty() {
        base.push(b'/');
        base.extend_from_slice(p);
    }
    base
}

/// Add or update a mark: the queue's owner hands out its watch
/// descriptor; the servers that see the inode change hold the watch.
fn set_mark(c: &Client, lane: &Lane, group: &DescRef, mark: Mark, nservers: usize) -> Result<Out> {
    let desc = group.desc();
    let events = (mark.mask as u32 & ino_hdr::WATCH_EVENTS) | WATCH_FANOTIFY;
    let req = Request::InotifyAddWatch {
        desc,
        ino: mark.key,
        mask: events,
    };
    let (wd, qref) = lane.call(c, desc.server(), req, |r| match r {
        Reply::Watch { wd, queue, .. } => Ok((wd, queue)),
        _ => Err(Error::Protocol("InotifyAddWatch")),
    })?;
    // Every server: a file's rename is reported by the server that moved
    // its entry (`FAN_MOVE_SELF`), which need not be its owner.
    for server in 0..nservers {
        let req = Request::InotifyRegister {
            queue: qref,
            ino: mark.key,
            wd,
            mask: events,
        };
        lane.call_ok(c, server, req)?;
    }
    if let Some(g) = groups().get_mut(&group.ino().0) {
        g.marks.insert(wd, mark);
    }
    Ok(Out::Done(0))
}

fn remove_mark(c: &Client, lane: &Lane, group: &DescRef, wd: i32) -> Result<()> {
    let desc = group.desc();
    let (ino, qref): (InodeId, QueueRef) = lane.call(
        c,
        desc.server(),
        Request::InotifyRmWatch { desc, wd },
        |r| match r {
            Reply::Watch { ino, queue, .. } => Ok((ino, queue)),
            _ => Err(Error::Protocol("InotifyRmWatch")),
        },
    )?;
    for server in 0..c.members().max(1) {
        let req = Request::InotifyRegister {
            queue: qref,
            ino,
            wd,
            mask: 0,
        };
        let _ = lane.call_ok(c, server, req);
    }
    if let Some(g) = groups().get_mut(&group.ino().0) {
        g.marks.remove(&wd);
    }
    Ok(())
}

/// `FAN_MARK_FLUSH`: every inode mark, or every mount/filesystem mark.
fn flush(c: &Client, group: &DescRef, whole: bool) -> Result<Out> {
    let lane = c.lane()?;
    let wds: Vec<i32> = groups()
        .get(&group.ino().0)
        .map(|g| {
            g.marks
                .iter()
                .filter(|(_, m)| (m.key == ALL_INODES) == whole)
                .map(|(wd, _)| *wd)
                .collect()
        })
        .unwrap_or_default();
    for wd in wds {
        remove_mark(c, &lane, group, wd)?;
    }
    Ok(Out::Done(0))
}

/// The group flags and event flags of host fanotify descriptor `fd`.
fn init_flags(fd: i64) -> Result<(u32, u32)> {
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}"))
        .map_err(|_| Error::Errno(libc::EBADF))?;
    let line = info
        .lines()
        .find_map(|l| l.strip_prefix("fanotify flags:"))
        .ok_or(Error::Errno(libc::EINVAL))?;
    let mut words = line.split_whitespace();
    let hex = |w: Option<&str>, pre: &str| {
        w.and_then(|w| w.strip_prefix(pre))
            .and_then(|w| u32::from_str_radix(w, 16).ok())
            .unwrap_or(0)
    };
    let flags = hex(words.next(), "");
    let event_flags = hex(words.next(), "event-flags:");
    if flags & (FAN_REPORT_PIDFD | FAN_REPORT_TARGET_FID) != 0 {
        return err(libc::EOPNOTSUPP); // not built: docs/COMPATIBILITY.md
    }
    Ok((flags, event_flags))
}

/// The events group `fdinfo` may queue: none but memory bounds a group
/// made with `FAN_UNLIMITED_QUEUE`, else Linux's `max_queued_events`.
pub fn max_events(info: &str) -> u32 {
    let flags = info
        .lines()
        .find_map(|l| l.strip_prefix("fanotify flags:"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|w| u32::from_str_radix(w, 16).ok())
        .unwrap_or(0);
    if flags & FAN_UNLIMITED_QUEUE != 0 {
        u32::MAX
    } else {
        inotify::max_queued_events("fanotify")
    }
}

/// Does host descriptor `fd`'s `fdinfo` show marks?
pub fn host_has_marks(info: &str) -> bool {
    info.lines().any(|l| {
        l.starts_with("fanotify ino:")
            || l.starts_with("fanotify mnt_id:")
            || l.starts_with("fanotify sdev:")
    })
}

/// An event read out of the ring, before it becomes bytes.
struct Event {
    mask: u64,
    /// The process that made the change (0: not known).
    pid: u32,
    /// The object (descriptor mode, `FAN_REPORT_FID`).
    object: Option<(InodeId, Vec<u8>)>,
    /// Info records: `(type, inode, name)`.
    infos: Vec<(u8, InodeId, Vec<u8>)>,
}

impl Event {
    fn len(&self) -> usize {
        METADATA_LEN
            + self
                .infos
                .iter()
                .map(|(_, _, n)| info_len(n))
                .sum::<usize>()
    }

    /// Linux merges events with the same object, information and
    /// directory-ness (`fanotify_should_merge`).
    fn merges_with(&self, o: &Event) -> bool {
        self.mask & FAN_Q_OVERFLOW == 0
            && o.mask & FAN_Q_OVERFLOW == 0
            && self.mask & FAN_ONDIR == o.mask & FAN_ONDIR
            && self.pid == o.pid
            && self.object.as_ref().map(|o| o.0) == o.object.as_ref().map(|o| o.0)
            && self.infos == o.infos
    }
}

fn info_len(name: &[u8]) -> usize {
    let n = 4 + 8 + 8 + HANDLE_BYTES + if name.is_empty() { 0 } else { name.len() + 1 };
    n.next_multiple_of(4)
}

/// The event a record makes for group `g`, or `None` when the mark does
/// not ask for it.
fn event_of(g: &Group, wd: i32, mask: u32, object: InodeId, name: &[u8]) -> Option<Event> {
    if wd == -1 {
        let mask = FAN_Q_OVERFLOW;
        return Some(Event {
            mask,
            pid: 0,
            object: None,
            infos: Vec::new(),
        });
    }
    let m = g.marks.get(&wd)?;
    let ondir = mask & ino_hdr::IN_ISDIR != 0;
    let ev = (mask & ino_hdr::WATCH_EVENTS) as u64 & m.mask;
    let dirent = ev & DIRENT_EVENTS != 0;
    let on_child = !name.is_empty() && !dirent;
    if ev == 0 || ondir && m.mask & FAN_ONDIR == 0 {
        return None;
    }
    if on_child && m.key != ALL_INODES && m.mask & FAN_EVENT_ON_CHILD == 0 {
        return None;
    }
    let fid_mode = g.flags & (FAN_REPORT_FID | FAN_REPORT_DIR_FID) != 0;
    let mut e = Event {
        mask: ev | if ondir && fid_mode { FAN_ONDIR } else { 0 },
        pid: 0,
        object: None,
        infos: Vec::new(),
    };
    if !fid_mode {
        let mut path = m.path.clone();
        if on_child {
            path.push(b'/');
            path.extend_from_slice(name);
        }
        e.object = Some((object, path));
        return Some(e);
    }
    // The directory reported (`fanotify_dfid_inode`): the one changed
    // for an entry event, the object if a directory, else the parent the
    // event was reported to.
    let dir = if dirent || ondir && !on_child {
        Some((object, if dirent { name.to_vec() } else { b".".to_vec() }))
    } else if on_child {
        Some((m.key, name.to_vec()))
    } else {
        None
    };
    if g.flags & FAN_REPORT_DIR_FID != 0 {
        if let Some((d, n)) = &dir {
            let named = g.flags & FAN_REPORT_NAME != 0;
            let t = if named { INFO_DFID_NAME } else { INFO_DFID };
            e.infos
                .push((t, *d, if named { n.clone() } else { Vec::new() }));
        }
    }
    // The object's own handle: the child for events on it, the directory
    // for entry events (without `FAN_REPORT_TARGET_FID`), not repeated
    // when it is the directory already reported.
    let fid = object;
    let repeated = e.infos.iter().any(|(_, d, _)| *d == fid);
    if g.flags & FAN_REPORT_FID != 0 && !repeated || e.infos.is_empty() {
        e.infos.push((INFO_FID, fid, Vec::new()));
    }
    Some(e)
}

/// `read(2)` on a group: whole events only, merged as Linux merges them.
pub fn read(c: &Client, d: &DescRef, ring: &Ring, buf: &mut [u8]) -> Result<usize> {
    let g = groups().get(&d.ino().0).cloned().unwrap_or_default();
    loop {
        let sig = sys::SigBlock::new();
        ring.lock();
        let head = ring.word64(ino_hdr::HEAD).load(Ordering::Acquire);
        let tail = ring.word64(ino_hdr::TAIL).load(Ordering::Acquire);
        if head != tail {
            let r = take_events(&g, ring, head, tail, buf.len());
            if let Ok((_, used, records)) = &r {
                ring.word64(ino_hdr::TAIL)
                    .store(tail + *used, Ordering::Release);
                inotify::consumed(ring, *records);
            }
            ring.unlock();
            drop(sig);
            let (events, _, _) = r?;
            if events.is_empty() {
                continue; // every record was for events nobody asked for
            }
            return write_events(c, &g, events, buf);
        }
        crate::inotify::wait_for_records(ring, d.flags(), sig)?;
    }
}

/// The events of the records in `[tail, head)` whose bytes fit `room`
/// (lock held), and how many ring bytes and records they used.
fn take_events(
    g: &Group,
    ring: &Ring,
    head: u64,
    tail: u64,
    room: usize,
) -> Result<(Vec<Event>, u64, u32)> {
    let avail = head.wrapping_sub(tail).min(ring.capacity());
    let (mut done, mut size, mut records) = (0u64, 0usize, 0u32);
    let mut events: Vec<Event> = Vec::new();
    while done < avail {
        let mut h = [0u8; EVENT_HEADER];
        if !ring.copy_out(tail + done, &mut h) {
            return err(libc::EIO);
        }
        let (wd, mask, _, len) = ino_hdr::decode_header(&h);
        let n = EVENT_HEADER as u64 + len as u64;
        if done + n > avail || wd != -1 && (len as usize) < OBJECT_LEN {
            return err(libc::EIO); // a server wrote a torn record
        }
        let mut body = vec![0u8; len as usize];
        if !ring.copy_out(tail + done + EVENT_HEADER as u64, &mut body) {
            return err(libc::EIO);
        }
        let (object, pid, name) = if wd == -1 {
            (InodeId(0), 0, &[][..])
        } else {
            let id = u64::from_le_bytes(body[..8].try_into().unwrap_or_default());
            let pid = u32::from_le_bytes(body[8..OBJECT_LEN].try_into().unwrap_or_default());
            let name = &body[OBJECT_LEN..];
            let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
            (InodeId(id), pid, &name[..end])
        };
        if let Some(mut e) = event_of(g, wd, mask, object, name) {
            e.pid = pid;
            if let Some(old) = events.iter_mut().find(|o| o.merges_with(&e)) {
                old.mask |= e.mask;
            } else if size + e.len() > room {
                if events.is_empty() {
                    return err(libc::EINVAL); // the next event does not fit
                }
                break;
            } else {
                size += e.len();
                events.push(e);
            }
        }
        done += n;
        records += 1;
    }
    Ok((events, done, records))
}

/// Copy `events` into `buf` (opening their descriptors in descriptor
/// mode): the bytes written.
fn write_events(c: &Client, g: &Group, events: Vec<Event>, buf: &mut [u8]) -> Result<usize> {
    let lane = c.lane()?;
    let mut out = Vec::with_capacity(buf.len().min(4096));
    let fid_mode = g.flags & (FAN_REPORT_FID | FAN_REPORT_DIR_FID) != 0;
    for e in events {
        let fd = match (&e.object, fid_mode) {
            (Some((ino, path)), false) => open_object(c, &lane, g, *ino, path),
            _ => FAN_NOFD,
        };
        out.extend_from_slice(&(e.len() as u32).to_le_bytes());
        out.push(FANOTIFY_METADATA_VERSION);
        out.push(0);
        out.extend_from_slice(&(METADATA_LEN as u16).to_le_bytes());
        out.extend_from_slice(&e.mask.to_le_bytes());
        out.extend_from_slice(&fd.to_le_bytes());
        out.extend_from_slice(&e.pid.to_le_bytes());
        for (t, ino, name) in &e.infos {
            let len = info_len(name);
            let start = out.len();
            out.push(*t);
            out.push(0);
            out.extend_from_slice(&(len as u16).to_le_bytes());
            out.extend_from_slice(&FSID[0].to_le_bytes());
            out.extend_from_slice(&FSID[1].to_le_bytes());
            out.extend_from_slice(&handle_of(*ino));
            if !name.is_empty() {
                out.extend_from_slice(name);
                out.push(0);
            }
            out.resize(start + len, 0);
        }
    }
    let n = out.len().min(buf.len());
    buf[..n].copy_from_slice(&out[..n]);
    Ok(n)
}

/// A new read-only descriptor of `ino` in this process (descriptor
/// mode), with the group's event flags; `FAN_NOFD` if the object is gone.
fn open_object(c: &Client, lane: &Lane, g: &Group, ino: InodeId, path: &[u8]) -> i32 {
    let keep = (libc::O_NONBLOCK
        | libc::O_CLOEXEC
        | libc::O_NOATIME
        | libc::O_APPEND
        | libc::O_DSYNC
        | libc::O_SYNC) as u32;
    // Its open, reads and close make no events (Linux's `FMODE_NONOTIFY`).
    let flags = libc::O_RDONLY as u32
        | (g.event_flags & keep & !(libc::O_CLOEXEC as u32))
        | atoll_proto::inotify::OPEN_NONOTIFY;
    let Ok((desc, attr)) = file::open_inode_via(c, lane, ino, flags, None) else {
        return FAN_NOFD;
    };
    let info = DescInfo {
        desc,
        ino: attr.ino,
        flags: file::status_flags(flags),
        ftype: attr.ftype,
        cookie: 0,
        path: Some(path.to_vec()),
    };
    let cloexec = g.event_flags & libc::O_CLOEXEC as u32 != 0;
    match file::new_fd(c, info, cloexec) {
        Ok(fd) => fd as i32,
        Err(_) => FAN_NOFD,
    }
}

/// The file handle of atoll inode `ino`: `struct file_handle` with its
/// bytes (what `name_to_handle_at` answers).
pub fn handle_of(ino: InodeId) -> [u8; 8 + HANDLE_BYTES] {
    let mut h = [0u8; 8 + HANDLE_BYTES];
    h[..4].copy_from_slice(&(HANDLE_BYTES as u32).to_le_bytes());
    h[4..8].copy_from_slice(&HANDLE_TYPE.to_le_bytes());
    h[12..].copy_from_slice(&ino.0.to_le_bytes());
    h
}

/// `name_to_handle_at(dirfd, path, handle, mount_id, flags)` of an atoll
/// path.
pub fn name_to_handle(c: &Client, a: &[u64; 6]) -> Result<Out> {
    let (dirfd, path, handle, mount_id, flags) =
        (crate::fdarg(a[0]), a[1], a[2], a[3], a[4] as i32);
    if flags & !(libc::AT_SYMLINK_FOLLOW | libc::AT_EMPTY_PATH | 0x200) != 0 {
        return err(libc::EINVAL);
    }
    let lane = c.lane()?;
    let follow = flags & libc::AT_SYMLINK_FOLLOW != 0;
    let empty_ok = flags & libc::AT_EMPTY_PATH != 0;
    let ino = match meta::resolve(c, &lane, dirfd, path, follow, empty_ok)? {
        Target::Node { ino, .. } => ino,
        Target::Host => return Ok(Out::Host),
        Target::Rehost(p) => return Ok(Out::Rehost(p)),
    };
    let have: u32 = sys::get_user(handle)?;
    let h = handle_of(ino);
    if (have as usize) < HANDLE_BYTES {
        sys::copy_to_user(handle, &h[..4])?;
        return err(libc::EOVERFLOW);
    }
    sys::copy_to_user(handle, &h)?;
    sys::put_user(mount_id, crate::procmounts::mount_id())?;
    Ok(Out::Done(0))
}
