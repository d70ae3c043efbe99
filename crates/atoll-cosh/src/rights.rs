//! Rights, transfer modes and strengths: Cosh's Table 1 as functions.
//!
//! | mode  | sender requires | sender retains | receiver gains |
//! |-------|-----------------|----------------|----------------|
//! | move  | read/write      | no access      | read/write     |
//! | share | read            | read-only      | read-only      |
//! | copy  | read            | unchanged      | read/write copy|
//!
//! Rights are ordered `None < Ro < Rw`; every function here returns at
//! most what it was given for the sender (Cosh §3.2 invariant 2: rights
//! may be downgraded by a transfer, never upgraded).

use serde::{Deserialize, Serialize};

/// A domain's rights on a buffer or an aggregate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Rights {
    None,
    Ro,
    Rw,
}

/// How a transfer hands data over (Cosh §3.2, Table 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Mode {
    Move,
    Share,
    Copy,
}

/// Whether the memory system enforces the new rights at once (Cosh §3.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Strength {
    /// No domain's memory permissions exceed its rights afterwards.
    Strong,
    /// A hint between trusting peers: downgrades may be skipped.
    Weak,
}

impl Mode {
    pub const ALL: [Mode; 3] = [Mode::Move, Mode::Share, Mode::Copy];

    /// The rights the sender must hold.
    pub fn requires(self) -> Rights {
        match self {
            Mode::Move => Rights::Rw,
            Mode::Share | Mode::Copy => Rights::Ro,
        }
    }

    /// The sender's rights after the transfer, given what it held.
    pub fn retains(self, held: Rights) -> Rights {
        match self {
            Mode::Move => Rights::None,
            Mode::Share => held.min(Rights::Ro),
            Mode::Copy => held,
        }
    }

    /// The receiver's rights on what it gets.
    pub fn gains(self) -> Rights {
        match self {
            Mode::Move | Mode::Copy => Rights::Rw,
            Mode::Share => Rights::Ro,
        }
    }

    /// Whether a related aggregate holding `other` rights on the same
    /// blocks forces those blocks to be copied rather than remapped (Cosh
    /// §3.4, option 3): remapping would leave the related aggregate with
    /// more than the sender retains, or make shared data writable.
    pub fn conflicts_with(self, other: Rights) -> bool {
        match self {
            // The sender keeps nothing: any live reference conflicts.
            Mode::Move => other > Rights::None,
            // Shared data must stay read-only everywhere.
            Mode::Share => other == Rights::Rw,
            Mode::Copy => false,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Mode::Move => "move",
            Mode::Share => "share",
            Mode::Copy => "copy",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Rights; 3] = [Rights::None, Rights::Ro, Rights::Rw];

    #[test]
    fn table_1_of_cosh() {
        assert_eq!(Mode::Move.requires(), Rights::Rw);
        assert_eq!(Mode::Share.requires(), Rights::Ro);
        assert_eq!(Mode::Copy.requires(), Rights::Ro);
        assert_eq!(Mode::Move.retains(Rights::Rw), Rights::None);
        assert_eq!(Mode::Share.retains(Rights::Rw), Rights::Ro);
        assert_eq!(Mode::Copy.retains(Rights::Ro), Rights::Ro);
        assert_eq!(Mode::Move.gains(), Rights::Rw);
        assert_eq!(Mode::Share.gains(), Rights::Ro);
        assert_eq!(Mode::Copy.gains(), Rights::Rw);
    }

    #[test]
    fn a_sender_never_gains_rights() {
        for m in Mode::ALL {
            for r in ALL.into_iter().filter(|&r| r >= m.requires()) {
                assert!(m.retains(r) <= r, "{m:?} upgraded {r:?}");
            }
        }
    }

    #[test]
    fn only_copy_leaves_two_writers() {
        for m in Mode::ALL {
            let two_writers = m.retains(Rights::Rw) == Rights::Rw && m.gains() == Rights::Rw;
            assert_eq!(two_writers, m == Mode::Copy);
        }
    }
}
