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
        if !self.notify.after_notices {
            self.flush();
        }
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
            let grew = self.put_record(q, &rec);
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

    /// Copy one record into the ring (lock held), as Linux's
    /// `fsnotify_add_event`: a queue holding `MAX_EVENTS` records takes
    /// one `IN_Q_OVERFLOW` and nothing more until that is read; otherwise
    /// the record merges with an identical last unread one, or goes in,
    /// the ring grown first if its bytes do not fit (an `IN_Q_OVERFLOW`
    /// then only if it cannot grow). Room for the overflow record is
    /// always kept. Whether a record went in.
    fn put_record(&mut self, q: QueueRef, rec: &[u8]) -> bool {
        let h = q.header;
        let st = &self.cache.store;
        let head = st.get_u64(h, HEAD);
        let tail = st.get_u64(h, TAIL);
        let count = st.get_u32(h, COUNT);
        let max = st.get_u32(h, MAX_EVENTS);
        let overflow_unread = st.get_u64(h, OVERFLOW_AT) > tail;
        let full = count >= max;
        if !full && self.last_record(h, head, tail).as_deref() == Some(rec) {
            self.notify.merged += 1;
            return false;
        }
        let need = |used: u64, len: usize| used + (len + EVENT_HEADER) as u64;
        let used = head.wrapping_sub(tail);
        let fits = !full
            && (need(used, rec.len()) <= self.ring_cap(h) || self.grow(q, need(used, rec.len())));
        let mut overflow = Vec::new();
        let rec = if fits {
            rec
        } else {
            self.notify.overflowed += 1;
            if overflow_unread || used + EVENT_HEADER as u64 > self.ring_cap(h) {
                return false;
            }
            encode(&mut overflow, -1, IN_Q_OVERFLOW, 0, b"");
            &overflow
        };
        self.ring_write(h, head, rec);
        let st = &mut self.cache.store;
        st.put_u64(h, LAST, head + 1);
        if !fits {
            st.put_u64(h, OVERFLOW_AT, head + 1);
        }
        st.put_u64(h, HEAD, head + rec.len() as u64);
        st.put_u32(h, COUNT, count.saturating_add(1));
        self.notify.appended += 1;
        true
    }

    /// The last record appended, if it is still unread.
    fn last_record(&self, h: u32, head: u64, tail: u64) -> Option<Vec<u8>> {
        let last = self.cache.store.get_u64(h, LAST);
        if last <= tail || last > head {
            return None;
        }
        let mut hd = [0u8; EVENT_HEADER];
        self.ring_read(h, last - 1, &mut hd);
        let (_, _, _, len) = decode_header(&hd);
        // A scribbled length must not make this server allocate much.
        let len = (len as usize).min(OBJECT_LEN + atoll_proto::MAX_NAME + 1);
        let mut rec = vec![0u8; EVENT_HEADER + len];
        self.ring_read(h, last - 1, &mut rec);
        Some(rec)
    }

    /// Bytes the ring holds.
    fn ring_cap(&self, h: u32) -> u64 {
        let n = (self.cache.store.get_u32(h, NBLOCKS) as usize).clamp(1, MAX_QUEUE_BLOCKS);
        (n * BLOCK_SIZE) as u64
    }

    /// Grow `q`'s ring (lock held) to hold `need` bytes, with blocks of
    /// this server's (doubling, up to [`MAX_QUEUE_BLOCKS`]), as Linux
    /// allocates events as they come: the buffered records move to their
    /// places in the new geometry and `GEN` tells the reader. The blocks
    /// stay this server's, lent to the ring ([`LENDERS`]), until the
    /// queue is dead and no server writes to it (`notify_tick`). Whether
    /// the ring now holds `need` bytes.
    fn grow(&mut self, q: QueueRef, need: u64) -> bool {
        let h = q.header;
        let old = (self.cache.store.get_u32(h, NBLOCKS) as usize).clamp(1, MAX_QUEUE_BLOCKS);
        let want = (need as usize).div_ceil(BLOCK_SIZE);
        let blocks = want.max(2 * old).min(MAX_QUEUE_BLOCKS);
        if blocks < want {
            return false;
        }
        let mut new = Vec::with_capacity(blocks - old);
        while new.len() < blocks - old {
            match self.cache.take() {
                Some(b) => new.push(b),
                None => {
                    self.cache.release_all(new);
                    return false;
                }
            }
        }
        let (head, tail) = (
            self.cache.store.get_u64(h, HEAD),
            self.cache.store.get_u64(h, TAIL),
        );
        let mut bytes = vec![0u8; head.wrapping_sub(tail) as usize];
        self.ring_read(h, tail, &mut bytes);
        let st = &mut self.cache.store;
        for (k, b) in new.iter().enumerate() {
            st.put_u32(h, BLOCKS + 4 * (old + k), *b);
        }
        st.put_u32(h, NBLOCKS, blocks as u32);
        self.ring_write(h, tail, &bytes);
        self.cache.store.add_u32(h, GEN, 1, false);
        self.notify.lent.entry(q).or_default().extend(new);
        self.set_bit(h, LENDERS, true);
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
        let nblocks = (st.get_u32(h, NBLOCKS) as usize).clamp(1, MAX_QUEUE_BLOCKS);
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
