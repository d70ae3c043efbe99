//! Answers the node's copies give while replies are owed on a channel,
//! kept in their places among the relayed replies (`Edge`'s `LocalChan`).

use std::collections::HashMap;

/// Answers from the node's copies to reads that came while replies were
/// owed on the channel: each goes into the ring right after the last of
/// those replies, so it passes none (a lane's replies come in order) and
/// the read need not cross. A read waiting for a read-ahead reply
/// (`copies.rs`) takes its place here too, and goes when both that reply
/// has come and the replies owed before it are in the ring.
#[derive(Default)]
pub(super) struct Held {
    /// Relayed replies put in the ring so far.
    delivered: u64,
    /// `(delivered count after which it goes, answer)`, in request order.
    answers: std::collections::VecDeque<(u64, Slot)>,
    /// Answers to waiting reads that came before their place was taken
    /// (the dispatcher relayed the read-ahead reply between the edge's
    /// decision and its taking the place), by request id.
    pub(super) early: HashMap<u64, Vec<u8>>,
}

/// An answer's place in [`Held`].
enum Slot {
    Ready(Vec<u8>),
    /// The read with this request id waits for a read-ahead reply.
    Waiting(u64),
}

impl Held {
    /// Must an answer to a request that comes while `owed` replies are
    /// owed wait? Also behind answers already waiting.
    pub(super) fn must_wait(&self, owed: u64) -> bool {
        owed > 0 || !self.answers.is_empty()
    }

    /// Keep `answer` until the `owed` replies before it are in the ring.
    pub(super) fn hold(&mut self, owed: u64, answer: Vec<u8>) {
        let after = self.delivered + owed;
        self.answers.push_back((after, Slot::Ready(answer)));
    }

    /// Take the place of read `rid`, which waits for a read-ahead reply,
    /// behind the `owed` replies before it.
    pub(super) fn wait(&mut self, owed: u64, rid: u64) {
        let after = self.delivered + owed;
        let slot = match self.early.remove(&rid) {
            Some(a) => Slot::Ready(a),
            None => Slot::Waiting(rid),
        };
        self.answers.push_back((after, slot));
    }

    /// The answer to waiting read `rid` came (from a read-ahead reply).
    pub(super) fn fill(&mut self, rid: u64, answer: Vec<u8>) {
        for (_, slot) in self.answers.iter_mut() {
            if matches!(slot, Slot::Waiting(r) if *r == rid) {
                *slot = Slot::Ready(answer);
                return;
            }
        }
        self.early.insert(rid, answer);
    }

    /// The answers now due, in order: ready, and behind no reply owed.
    pub(super) fn due(&mut self) -> Vec<Vec<u8>> {
        let mut due = Vec::new();
        while let Some((after, Slot::Ready(_))) = self.answers.front() {
            if *after > self.delivered {
                break;
            }
            if let Some((_, Slot::Ready(a))) = self.answers.pop_front() {
                due.push(a);
            }
        }
        due
    }

    /// A relayed reply went into the ring: the answers now due, in order.
    pub(super) fn replied(&mut self) -> Vec<Vec<u8>> {
        self.delivered += 1;
        self.due()
    }
}
