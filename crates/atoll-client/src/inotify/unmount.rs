//! `IN_UNMOUNT` when the instance goes: Linux's unmount of a watched file
//! system gives each watch `IN_UNMOUNT` then `IN_IGNORED`, and the queue
//! then reads as one that watches nothing (a blocking read sleeps until a
//! signal). A process that outlives its instance sees the same: the
//! servers that would report are gone, so the reader appends the records
//! itself, once per queue, when it finds the ring empty and the instance
//! gone (its other atoll calls fail with `EIO`, `session::instance_gone`).
//!
//! The reader knows the queue's watches from the calls that made and
//! removed them in this process (its forks' parents, and the images
//! before an `execve`, `carry`): the owner
//! server, which hands out watch descriptors, is gone. Watches whose
//! `IN_IGNORED` is already queued or was read are left out. Linux reports
//! the watched inodes newest first; here the watches go newest first.

use std::collections::BTreeMap;
use std::sync::Mutex;

use core::sync::atomic::Ordering;

use atoll_proto::inotify::{self as ino_hdr, EVENT_HEADER, IN_IGNORED, IN_ISDIR, IN_UNMOUNT};
use atoll_proto::InodeId;

use crate::ring::Ring;

/// Live watches of this process's queues: queue inode → wd → is it a
/// directory's (its `IN_UNMOUNT` carries `IN_ISDIR`, as Linux's).
static WATCHES: Mutex<BTreeMap<u64, BTreeMap<i32, bool>>> = Mutex::new(BTreeMap::new());

fn watches() -> std::sync::MutexGuard<'static, BTreeMap<u64, BTreeMap<i32, bool>>> {
    WATCHES.lock().unwrap_or_else(|e| e.into_inner())
}

/// The watches of `queues`, whose descriptors survive an `execve`
/// (`ATOLL_STATE`): the new image is the same process, and its reader
/// must still name them when the instance goes.
pub(crate) fn carry(queues: &[u64]) -> Vec<crate::state::WatchState> {
    let all = watches();
    let mut out = Vec::new();
    for (&queue, list) in all.iter().filter(|(q, _)| queues.contains(q)) {
        for (&wd, &dir) in list {
            out.push(crate::state::WatchState { queue, wd, dir });
        }
    }
    out
}

/// In a new image: the watches the old one carried.
pub(crate) fn restore(list: &[crate::state::WatchState]) {
    let mut all = watches();
    for w in list {
        all.entry(w.queue).or_default().insert(w.wd, w.dir);
    }
}

/// Watch `wd` of `queue` was made (or changed).
pub(crate) fn added(queue: InodeId, wd: i32, dir: bool) {
    watches().entry(queue.0).or_default().insert(wd, dir);
}

/// Watch `wd` of `queue` is gone.
pub(crate) fn removed(queue: InodeId, wd: i32) {
    if let Some(m) = watches().get_mut(&queue.0) {
        m.remove(&wd);
    }
}

/// The records in `bytes` were read: their `IN_IGNORED` end watches.
pub(crate) fn read(queue: InodeId, bytes: &[u8]) {
    for_each_ignored(bytes, |wd| removed(queue, wd));
}

fn for_each_ignored(bytes: &[u8], mut f: impl FnMut(i32)) {
    let mut at = 0;
    while at + EVENT_HEADER <= bytes.len() {
        let h: [u8; EVENT_HEADER] = bytes[at..at + EVENT_HEADER].try_into().unwrap_or_default();
        let (wd, mask, _, len) = ino_hdr::decode_header(&h);
        if mask & IN_IGNORED != 0 {
            f(wd);
        }
        at += EVENT_HEADER + len as usize;
    }
}

/// Ring lock held, ring empty (`HEAD == TAIL`): if the instance is gone
/// and this queue was not told yet, append `IN_UNMOUNT` and `IN_IGNORED`
/// for each watch; whether records went in.
pub(crate) fn report(queue: InodeId, ring: &Ring) -> bool {
    if !atoll_msg::liveness::check_peers_now() {
        return false;
    }
    // Once per queue, whichever process sharing it reads first.
    let flag = ring.word(ino_hdr::UNMOUNTED);
    if flag.swap(1, Ordering::AcqRel) != 0 {
        return false;
    }
    let list: Vec<(i32, bool)> = watches()
        .remove(&queue.0)
        .map(|m| m.into_iter().rev().collect())
        .unwrap_or_default();
    let mut head = ring.word64(ino_hdr::HEAD).load(Ordering::Acquire);
    let tail = ring.word64(ino_hdr::TAIL).load(Ordering::Acquire);
    let mut records = 0u32;
    for (wd, dir) in list {
        let mut rec = Vec::with_capacity(2 * EVENT_HEADER);
        ino_hdr::encode(
            &mut rec,
            wd,
            IN_UNMOUNT | if dir { IN_ISDIR } else { 0 },
            0,
            b"",
        );
        ino_hdr::encode(&mut rec, wd, IN_IGNORED, 0, b"");
        if head - tail + rec.len() as u64 > ring.capacity() || !ring.copy_in(head, &rec) {
            break;
        }
        head += rec.len() as u64;
        records += 2;
    }
    if records == 0 {
        return false;
    }
    ring.word64(ino_hdr::HEAD).store(head, Ordering::Release);
    ring.word(ino_hdr::COUNT)
        .fetch_add(records, Ordering::AcqRel);
    ring.word(ino_hdr::RSEQ).fetch_add(1, Ordering::SeqCst);
    ring.wake(ino_hdr::RSEQ, u32::MAX);
    true
}

/// A blocking read of an empty queue once the instance is gone: as on
/// Linux after the unmount, it sleeps until a signal (the ring lock and
/// `sig` released first). Nothing will ever write to the ring again.
pub(crate) fn sleep(ring: &Ring, sig: crate::sys::SigBlock) -> crate::error::Result<()> {
    let seen = ring.word(ino_hdr::RSEQ).load(Ordering::Acquire);
    ring.unlock();
    drop(sig);
    ring.futex_wait_raw(ino_hdr::RSEQ, seen, None);
    if crate::intr::pending() {
        return crate::error::err(crate::intr::ERESTARTSYS);
    }
    Ok(())
}
