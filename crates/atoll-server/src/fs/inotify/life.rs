//! The life of a queue among servers that never message each other
//! (Hare §6.2.3): which servers hold watches of it (`HOLDERS`) or lent
//! blocks to its ring (`LENDERS`), and how its watches and blocks go once
//! its last description closed (`DEAD`), each server by itself at its
//! next request (`atoll_proto::inotify`).

use atoll_proto::inotify::*;
use atoll_proto::{InodeId, QueueRef};

use crate::fs::FileServer;
use crate::store::BlockStore;

impl<S: BlockStore> FileServer<S> {
    pub(in crate::fs) fn queue_alive(&self, q: QueueRef) -> bool {
        let st = &self.cache.store;
        st.get_u64(q.header, QUEUE_ID) == q.id && st.get_u32(q.header, DEAD) == 0
    }

    /// Keep this server's bit in the queue's `HOLDERS` equal to whether
    /// it holds watches of the queue. Servers update the word with
    /// compare-and-swap loops of the low and high halves, so two servers
    /// never lose each other's bits.
    pub(in crate::fs) fn hold(&mut self, queue: QueueRef) {
        let held = self.notify.held.contains_key(&queue);
        self.set_bit(queue.header, HOLDERS, held);
    }

    /// Set or clear this server's bit in the `u64` bit set at `word` of
    /// header `h` (`HOLDERS`, `LENDERS`).
    pub(in crate::fs) fn set_bit(&mut self, h: u32, word: usize, on: bool) {
        let bit = self.cfg.index;
        let (off, b) = (word + 4 * (bit / 32), 1u32 << (bit % 32));
        let st = &mut self.cache.store;
        loop {
            let v = st.get_u32(h, off);
            let want = if on { v | b } else { v & !b };
            if v == want || st.cas_u32(h, off, v, want) {
                break;
            }
        }
    }

    /// The last description of a queue owned here is gone: mark it dead
    /// and keep its blocks until no server holds watches of it.
    pub(in crate::fs) fn queue_closed(&mut self, ino: InodeId) {
        if let Some(q) = self.notify.queues.remove(&ino) {
            self.cache.store.put_u32(q.header, DEAD, 1);
            self.notify.dying.push(q);
        }
    }

    /// After every request (and when idle with records pending): push
    /// pending records, drop watches of dead queues, free dead queues'
    /// blocks once no server holds watches of them.
    pub(in crate::fs) fn notify_tick(&mut self) {
        if !self.notify.pending.is_empty() && !self.notify.after_notices {
            self.flush();
        }
        // One look per queue with watches here (not per watch).
        let dead: Vec<QueueRef> = (self.notify.held.keys())
            .filter(|q| !self.queue_alive(**q))
            .copied()
            .collect();
        if !dead.is_empty() {
            self.notify.watches.retain(|_, l| {
                l.retain(|w| !dead.contains(&w.queue));
                !l.is_empty()
            });
            for q in dead {
                let owned = InodeId(q.id).owner() == self.cfg.index;
                self.dnotify_forget(q, owned);
                self.notify.held.remove(&q);
                self.notify.names_key = None;
                self.hold(q);
            }
        }
        self.return_lent();
        let mut k = 0;
        while k < self.notify.dying.len() {
            let h = self.notify.dying[k].header;
            let st = &self.cache.store;
            if st.get_u64(h, HOLDERS) == 0 && st.get_u64(h, LENDERS) == 0 {
                let q = self.notify.dying.swap_remove(k);
                self.cache.store.put_u64(q.header, QUEUE_ID, 0);
                self.cache.release(q.header);
                self.cache.release_all(q.data);
            } else {
                k += 1;
            }
        }
    }

    /// Give back the blocks lent to rings of dead queues that no server
    /// writes to any more (`HOLDERS` zero): the owner frees the header
    /// once every lender has (`LENDERS` zero).
    fn return_lent(&mut self) {
        if self.notify.lent.is_empty() {
            return;
        }
        let done: Vec<QueueRef> = (self.notify.lent.keys())
            .filter(|q| !self.queue_alive(**q) && self.cache.store.get_u64(q.header, HOLDERS) == 0)
            .copied()
            .collect();
        for q in done {
            if let Some(blocks) = self.notify.lent.remove(&q) {
                self.cache.release_all(blocks);
            }
            self.set_bit(q.header, LENDERS, false);
        }
    }

    /// Records waiting for a ring lock (the server loop then polls instead
    /// of sleeping on its doorbell).
    pub fn has_pending_events(&self) -> bool {
        !self.notify.pending.is_empty()
    }

    /// Serve what `has_pending_events` reported.
    pub fn flush_events(&mut self) {
        if !self.notify.pending.is_empty() {
            self.flush();
        }
        self.notify_tick();
    }

    /// From now on a request's records wait in `pending` until the
    /// server loop delivered its invalidations and calls `flush_events`
    /// (`Notify::after_notices`): a process that reads an event and then
    /// looks a name up finds its lookup cache told of the change, as the
    /// kernel's dentries are changed before `fsnotify` queues the event.
    pub fn events_after_notices(&mut self) {
        self.notify.after_notices = true;
    }
}
