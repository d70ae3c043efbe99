//! The outcomes a request depended on that are not in the request.
//!
//! A file server's state is a function of the messages it served (fos
//! §3.5: a server that can be rebuilt is one whose inputs were kept), *plus*
//! a few answers from outside: the clock, the shared block pool (whether
//! the root had room, which blocks a claim got), the instance-wide gauges
//! (whether a reservation fit), and words of pipe headers that clients
//! move. While a server serves live, every such answer is appended to the
//! request's *tape*; the journal keeps the tape with the request
//! (`crate::journal`). A replay plays the tape back instead of asking
//! again, so the rebuilt server takes exactly the branches, blocks and
//! timestamps the lost one took. During a replay, effects outside the
//! server (writes to the buffer cache, claims and returns of blocks,
//! gauge moves) are skipped: they already happened and are still there.
//!
//! The tape is per thread (one server per thread, and a server's calls
//! never cross threads), so the layers below the file server consult it
//! without plumbing. With no journal (`--without recovery`, unit tests)
//! it is off and costs one thread-local load per question.

use std::cell::RefCell;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// What a taped value answered; checked on replay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Tag {
    /// Wall-clock time, nanoseconds since the epoch.
    Wall = 1,
    /// Monotonic time, nanoseconds since the process's base instant.
    Mono = 2,
    /// Whether the pool's root had room for a claim.
    PoolRoom = 3,
    /// How many blocks a claim got (that many `PoolBlock` follow).
    PoolClaim = 4,
    PoolBlock = 5,
    /// Whether a listed block was still this server's.
    PoolHolds = 6,
    /// A gauge reservation: `ok | resource << 1 | amount << 8`.
    GaugeTake = 7,
    /// Whether a gauge had room.
    GaugeRoom = 8,
    /// A word of a block that clients change (pipe headers).
    StoreWord = 9,
    /// Whether the machine had a CPU to spare (`adapt::spare`).
    SpareCpu = 10,
}

enum Mode {
    Off,
    Record(Vec<u64>),
    Replay {
        values: Vec<u64>,
        at: usize,
        diverged: bool,
    },
}

thread_local! {
    static TAPE: RefCell<Mode> = const { RefCell::new(Mode::Off) };
}

/// Ask `live` and keep its answer, or play back the kept one.
pub fn value(tag: Tag, live: impl FnOnce() -> u64) -> u64 {
    TAPE.with(|t| {
        let mut t = t.borrow_mut();
        match &mut *t {
            Mode::Off => live(),
            Mode::Record(v) => {
                let x = live();
                v.push(tag as u64);
                v.push(x);
                x
            }
            Mode::Replay {
                values,
                at,
                diverged,
            } => match values.get(*at..*at + 2) {
                Some([t, x]) if *t == tag as u64 => {
                    *at += 2;
                    *x
                }
                _ => {
                    // The replay took a branch the live server did not: the
                    // rebuilt state cannot be trusted (`Replayer::finish`).
                    *diverged = true;
                    live()
                }
            },
        }
    })
}

/// [`value`] for a yes/no answer.
pub fn flag(tag: Tag, live: impl FnOnce() -> bool) -> bool {
    value(tag, || live() as u64) != 0
}

/// Is a replay running on this thread? Effects outside the server are
/// skipped then (module docs).
pub fn replaying() -> bool {
    TAPE.with(|t| matches!(&*t.borrow(), Mode::Replay { .. }))
}

/// The instant every monotonic time on a tape is measured from.
fn base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now)
}

/// Initialise the base instant now, if it is not: a child forked to
/// encode a snapshot (`snapshot_fork`) reads it, and must not be the one
/// to initialise it (another thread of its parent may have been doing so
/// at the fork, holding the `OnceLock`'s lock for good in the child).
pub fn ready_for_fork() {
    base();
}

/// An `Instant` of a server's state in a snapshot (`fs::image`): as the
/// nanoseconds since this process's base instant, the unit the tape keeps
/// monotonic time in, so a snapshot loaded in another process means what a
/// replay there would have made of the same tape.
pub mod instant_serde {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use std::time::{Duration, Instant};

    pub fn serialize<S: Serializer>(t: &Instant, s: S) -> Result<S::Ok, S::Error> {
        (t.saturating_duration_since(super::base()).as_nanos() as u64).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Instant, D::Error> {
        Ok(super::base() + Duration::from_nanos(u64::deserialize(d)?))
    }
}

/// `Instant::now()`, taped.
pub fn instant() -> Instant {
    let b = base();
    let ns = value(Tag::Mono, || {
        Instant::now().saturating_duration_since(b).as_nanos() as u64
    });
    b + Duration::from_nanos(ns)
}

/// Wall-clock time as `(seconds, nanoseconds)` since the epoch, taped.
pub fn wall() -> (i64, u32) {
    let ns = value(Tag::Wall, || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos() as u64
    });
    ((ns / 1_000_000_000) as i64, (ns % 1_000_000_000) as u32)
}

/// Start keeping answers on this thread (a live server with a journal).
pub fn record() {
    TAPE.with(|t| *t.borrow_mut() = Mode::Record(Vec::new()));
}

/// The answers kept since the last call, for the journal; keeps recording.
pub fn take_recorded() -> Vec<u64> {
    TAPE.with(|t| match &mut *t.borrow_mut() {
        Mode::Record(v) => std::mem::take(v),
        _ => Vec::new(),
    })
}

/// Drop the answers kept so far (asked between requests, about nothing
/// that changes the state); keeps recording.
pub fn clear() {
    TAPE.with(|t| {
        if let Mode::Record(v) = &mut *t.borrow_mut() {
            v.clear();
        }
    })
}

/// Hand the answers kept since the last `clear` to `f` (the journal's
/// append), then clear them; without a recording, `f` gets none.
pub fn with_recorded<R>(f: impl FnOnce(&[u64]) -> R) -> R {
    TAPE.with(|t| match &mut *t.borrow_mut() {
        Mode::Record(v) => {
            let r = f(v);
            v.clear();
            r
        }
        _ => f(&[]),
    })
}

/// Stop keeping answers.
pub fn off() {
    TAPE.with(|t| *t.borrow_mut() = Mode::Off);
}

/// Play `values` back to the next requests of this thread.
pub fn replay(values: Vec<u64>) {
    TAPE.with(|t| {
        *t.borrow_mut() = Mode::Replay {
            values,
            at: 0,
            diverged: false,
        }
    });
}

/// End a replay of one request: whether it took exactly the answers it
/// was given (all of them, in order). The tape is off afterwards.
pub fn replayed_exactly() -> bool {
    TAPE.with(|t| {
        let done = match &*t.borrow() {
            Mode::Replay {
                values,
                at,
                diverged,
            } => !*diverged && *at == values.len(),
            _ => false,
        };
        *t.borrow_mut() = Mode::Off;
        done
    })
}

/// Blocks and gauge reservations the answers on `tape` took from shared
/// pools: what a request that died half way leaves to give back.
pub fn taken(tape: &[u64]) -> (Vec<u32>, Vec<(usize, u64)>) {
    let mut blocks = Vec::new();
    let mut reserved = Vec::new();
    for pair in tape.chunks_exact(2) {
        match pair[0] {
            t if t == Tag::PoolBlock as u64 => blocks.push(pair[1] as u32),
            t if t == Tag::GaugeTake as u64 && pair[1] & 1 == 1 => {
                reserved.push((((pair[1] >> 1) & 0x7f) as usize, pair[1] >> 8))
            }
            _ => {}
        }
    }
    (blocks, reserved)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replay_gets_the_recorded_answers_and_notices_a_new_question() {
        record();
        let a = value(Tag::PoolRoom, || 7);
        let t = wall();
        let tape = take_recorded();
        off();
        assert_eq!(a, 7);
        replay(tape.clone());
        assert!(replaying());
        assert_eq!(value(Tag::PoolRoom, || 99), 7, "played back, not asked");
        assert_eq!(wall(), t);
        assert!(replayed_exactly());
        assert!(!replaying());

        replay(tape.clone());
        assert_eq!(value(Tag::GaugeRoom, || 5), 5, "wrong question: asked live");
        assert!(!replayed_exactly());

        replay(tape);
        value(Tag::PoolRoom, || 0);
        assert!(!replayed_exactly(), "an answer left over is a divergence");
    }

    #[test]
    fn taken_lists_claimed_blocks_and_granted_reservations() {
        let tape = vec![
            Tag::PoolClaim as u64,
            2,
            Tag::PoolBlock as u64,
            10,
            Tag::PoolBlock as u64,
            11,
            Tag::GaugeTake as u64,
            1 | (2 << 1) | (3 << 8),
            Tag::GaugeTake as u64,
            (1 << 1) | (1 << 8),
        ];
        assert_eq!(taken(&tape), (vec![10, 11], vec![(2, 3)]));
    }
}
