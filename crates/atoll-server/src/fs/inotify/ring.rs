//! The rings of notification queues: appending records from a server
//! without ever waiting for a client (a ring whose lock a reader holds
//! keeps its records pending), Linux's merge of an event identical to the
//! last one queued, and the overflow record (`atoll_proto::inotify`).

use std::collections::VecDeque;

use atoll_proto::inotify::*;
use atoll_proto::{QueueRef, BLOCK_SIZE};

use super::STALL_LIMIT;
use crate::fs::FileServer;
use crate::store::BlockStore;

impl<S: BlockStore> FileServer<S> {
    /// Queue `rec` for `queue`, behind anything still pending, and push
    /// what can go in now.
    pub(in crate::fs) fn append(&mut self, queue: QueueRef, rec: Vec<u8>) {
        self.notify.pending.push_back((queue, rec));
        self.flush();
    }

    /// Put pending records into their rings, in order, never waiting: a
    /// ring whose lock a client holds keeps its records (and those of
    /// later events for it) for the next call.
    pub(in crate::fs) fn flush(&mut self) {
        let mut blocked: Vec<QueueRef> = Vec::new();
        let mut kept = VecDeque::new();
        while let Some((q, rec)) = self.notify.pending.pop_front() {
            if blocked.contains(&q) {
                kept.push_back((q, rec));
                continue;
            }
            if !self.queue_alive(q) {
                continue;
            }
            if self.ring_try_lock(q.header).is_err() {
                blocked.push(q);
                kept.push_back((q, rec));
                continue;
            }
            let grew = self.put_record(q.header, &rec);
            self.ring_unlock(q.header);
            // A merged record gives the reader nothing new to wake for.
            if grew {
                let wake = self.cache.store.get_u32(q.header, RSLEEP) > 0;
                self.cache.store.add_u32(q.header, RSEQ, 1, wake);
            }
        }
        if blocked.is_empty() {
            self.notify.stalls = 0;
        } else {
            self.notify.stalls += 1;
            if self.notify.stalls > STALL_LIMIT {
                self.notify.overflowed += kept.len() as u64;
                kept.clear();
                self.notify.stalls = 0;
            }
        }
        self.notify.pending = kept;
    }

    /// Copy one record into the ring (lock held): merged with an identical
    /// last unread record, or replaced by `IN_Q_OVERFLOW` when the ring
    /// has no room for it and the overflow record (Linux's
    /// `fsnotify_add_event` with `max_events`). Whether the ring grew.
    fn put_record(&mut self, h: u32, rec: &[u8]) -> bool {
        let st = &self.cache.store;
        let head = st.get_u64(h, HEAD);
        let tail = st.get_u64(h, TAIL);
        let cap = (st.get_u32(h, NBLOCKS) as u64).min(MAX_DATA_BLOCKS as u64) * BLOCK_SIZE as u64;
        let last = st.get_u64(h, LAST);
        let mut last_rec = Vec::new();
        if last > tail && last <= head {
            let mut hd = [0u8; EVENT_HEADER];
            self.ring_read(h, last - 1, &mut hd);
            let (_, _, _, len) = decode_header(&hd);
            // A scribbled length must not make this server allocate much.
            let len = (len as usize).min(EVENT_HEADER + OBJECT_LEN + atoll_proto::MAX_NAME);
            last_rec.resize(EVENT_HEADER + len, 0);
            self.ring_read(h, last - 1, &mut last_rec);
        }
        if last_rec == rec {
            self.notify.merged += 1;
            return false;
        }
        let used = head.wrapping_sub(tail);
        let mut overflow = Vec::new();
        let rec = if used + (rec.len() + EVENT_HEADER) as u64 <= cap {
            rec
        } else {
            self.notify.overflowed += 1;
            encode(&mut overflow, -1, IN_Q_OVERFLOW, 0, b"");
            if last_rec == overflow || used + EVENT_HEADER as u64 > cap {
                return false;
            }
            &overflow
        };
        self.ring_write(h, head, rec);
        let st = &mut self.cache.store;
        st.put_u64(h, LAST, head + 1);
        st.put_u64(h, HEAD, head + rec.len() as u64);
        self.notify.appended += 1;
        true
    }

    fn ring_span(
        &self,
        h: u32,
        pos: u64,
        len: usize,
        mut f: impl FnMut(&Self, u32, usize, std::ops::Range<usize>),
    ) {
        let st = &self.cache.store;
        let nblocks = (st.get_u32(h, NBLOCKS) as usize).clamp(1, MAX_DATA_BLOCKS);
        let cap = (nblocks * BLOCK_SIZE) as u64;
        let mut done = 0usize;
        while done < len {
            let at = ((pos + done as u64) % cap) as usize;
            let (blk, off) = (at / BLOCK_SIZE, at % BLOCK_SIZE);
            let n = (BLOCK_SIZE - off).min(len - done);
            let b = st.get_u32(h, BLOCKS + 4 * blk);
            f(self, b, off, done..done + n);
            done += n;
        }
    }

    pub(in crate::fs) fn ring_read(&self, h: u32, pos: u64, buf: &mut [u8]) {
        let len = buf.len();
        let mut parts = Vec::new();
        self.ring_span(h, pos, len, |_, b, off, r| parts.push((b, off, r)));
        for (b, off, r) in parts {
            self.cache.store.read(b, off, &mut buf[r]);
        }
    }

    fn ring_write(&mut self, h: u32, pos: u64, data: &[u8]) {
        let mut parts = Vec::new();
        self.ring_span(h, pos, data.len(), |_, b, off, r| parts.push((b, off, r)));
        for (b, off, r) in parts {
            self.cache.store.write(b, off, &data[r]);
        }
    }
}
