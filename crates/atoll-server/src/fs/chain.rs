//! Write chains: the pieces of one large write that a client keeps in
//! flight together when the bytes travel in `WriteData` messages (a copy
//! island, a program on another host: Cosh §5 *copy*).
//!
//! A write that stops part way must have written exactly the prefix it
//! reports (POSIX), but the pieces after a failing one are already in the
//! channel when it fails. So each piece names its chain and its place in
//! it (`atoll_proto::Chain`), and this server applies piece `seq` only if
//! pieces `0..seq` of the same chain were all written in full; any other
//! piece is answered `Skipped` and changes nothing. A channel is served in
//! order, so "the pieces before it" are always already decided.
//!
//! Life cycle of a chain (per session, `Session::chains`): opened by piece
//! 0 written in full (the entry expects piece 1), advanced by each later
//! piece written in full, closed by its last piece, or by the first piece
//! that fails or comes short (the entry goes, so every later piece finds
//! none and is skipped). A session that ends forgets its chains with it.
//! Forgetting is always safe: a piece of an unknown chain is skipped, and
//! the client reports the prefix it was told was written.
//!
//! Recovery: the state is a function of the requests served, all of which
//! are journaled (a `WriteData` is, even when it fails), so a replay
//! rebuilds it. A request whose outcome a dead server took with it is
//! answered `EIO`; its session's chains are cut then (`Kind::CutChains`),
//! so nothing after a piece the client counts as failed is applied.

use atoll_proto::Chain;

/// Chains one session has open at once: a thread keeps one open at a
/// time, so this bounds the threads writing this way together; past it
/// the oldest is forgotten (its later pieces are skipped: a short write,
/// correctly reported).
const MAX_OPEN: usize = 64;

/// The open chains of one session: `(id, piece expected next)`. Part of
/// the server's state, so in its snapshots (`fs::image`) too.
#[derive(Default, Debug, serde::Serialize, serde::Deserialize)]
pub(super) struct Chains {
    open: Vec<(u64, u32)>,
}

impl Chains {
    /// May piece `c` be written? Piece 0 always (it begins its chain);
    /// a later one only if its chain expects exactly it.
    pub(super) fn admits(&self, c: Chain) -> bool {
        c.seq == 0 || self.open.contains(&(c.id, c.seq))
    }

    /// Piece `c` (admitted) was written, `full`y or not: the chain now
    /// expects the next piece, or is closed (its last piece, or a short or
    /// failed one).
    pub(super) fn settle(&mut self, c: Chain, full: bool) {
        self.open.retain(|&(id, _)| id != c.id);
        if full && !c.last {
            if self.open.len() >= MAX_OPEN {
                self.open.remove(0);
            }
            self.open.push((c.id, c.seq + 1));
        }
    }

    /// Close every chain: their outcome can no longer be told to the
    /// client (a request of the session was answered `EIO`).
    pub(super) fn cut(&mut self) {
        self.open.clear();
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.open.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn piece(id: u64, seq: u32, last: bool) -> Chain {
        Chain { id, seq, last }
    }

    #[test]
    fn pieces_after_a_short_one_are_skipped_and_the_chain_closed() {
        let mut c = Chains::default();
        assert!(c.admits(piece(7, 0, false)));
        c.settle(piece(7, 0, false), true);
        assert!(c.admits(piece(7, 1, false)));
        c.settle(piece(7, 1, false), false); // short: ENOSPC, RLIMIT_FSIZE
        assert!(!c.admits(piece(7, 2, false)));
        assert!(!c.admits(piece(7, 3, true)));
        assert_eq!(c.len(), 0, "a cut chain is forgotten at once");
    }

    #[test]
    fn pieces_must_come_in_order_and_the_last_closes_the_chain() {
        let mut c = Chains::default();
        c.settle(piece(1, 0, false), true);
        assert!(!c.admits(piece(1, 2, false)), "piece 1 not written yet");
        c.settle(piece(1, 1, false), true);
        c.settle(piece(1, 2, true), true);
        assert_eq!(c.len(), 0);
        assert!(!c.admits(piece(1, 3, true)));
    }

    #[test]
    fn chains_of_one_session_are_independent_and_can_be_cut() {
        let mut c = Chains::default();
        c.settle(piece(1, 0, false), true);
        c.settle(piece(2, 0, false), true);
        c.settle(piece(2, 1, false), false);
        assert!(
            c.admits(piece(1, 1, false)),
            "another thread's chain goes on"
        );
        assert!(!c.admits(piece(2, 2, false)));
        c.cut();
        assert!(!c.admits(piece(1, 1, false)));
        assert!(c.admits(piece(3, 0, true)), "a new chain begins anew");
    }

    #[test]
    fn the_oldest_chain_is_forgotten_past_the_bound() {
        let mut c = Chains::default();
        for id in 0..=MAX_OPEN as u64 {
            c.settle(piece(id, 0, false), true);
        }
        assert_eq!(c.len(), MAX_OPEN);
        assert!(
            !c.admits(piece(0, 1, false)),
            "forgotten: skipped, never applied"
        );
        assert!(c.admits(piece(MAX_OPEN as u64, 1, false)));
    }
}
