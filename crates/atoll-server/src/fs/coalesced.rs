//! What coalescing saved (Hare §3.7.4): requests that did in one
//! message what Hare's protocol does in several, counted for statistics.

/// Requests that did in one message what Hare's protocol does in several
/// (§3.7.4), and the messages that saved: an `Open` that found the name
/// and opened its inode (LOOKUP + OPEN), an `Open` that created the file
/// (CREATE inode + ADD_MAP + OPEN), a `MakeNode` (CREATE inode + ADD_MAP).
#[derive(Default, Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) struct Coalesced {
    pub(super) opens: u64,
    pub(super) creates: u64,
    pub(super) nodes: u64,
}

impl Coalesced {
    pub(super) fn total(&self) -> u64 {
        self.opens + self.creates + self.nodes
    }
    pub(super) fn opened(&mut self, created: bool) {
        if created {
            self.creates += 1;
        } else {
            self.opens += 1;
        }
    }

    pub(super) fn made_node(&mut self) {
        self.nodes += 1;
    }

    /// Messages a client would have sent without coalescing, minus the
    /// ones it sent.
    pub(super) fn messages_saved(&self) -> u64 {
        self.opens + 2 * self.creates + self.nodes
    }

    pub(super) fn counters(&self) -> [(&'static str, u64); 4] {
        [
            ("coalescing.combined_opens", self.opens),
            ("coalescing.combined_creates", self.creates),
            ("coalescing.combined_nodes", self.nodes),
            ("coalescing.messages_saved", self.messages_saved()),
        ]
    }
}
