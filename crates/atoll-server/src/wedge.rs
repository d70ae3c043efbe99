//! Finding a server process that is stuck rather than dead (fos §3.5: the
//! watchdog replaces failed servers; a server that stops making progress
//! has failed as surely as one that exited).
//!
//! Servers never block: every request is bounded work (Hare §3.2). So a
//! server process whose journal header has said for a long time that it
//! owes the *same* request (`Journal::owe`, written as it takes a request
//! and cleared as it answers) is wedged — an endless loop, a lost wake-up
//! inside a handler, `SIGSTOP`. The watchdog then kills it, and its
//! successor settles that request as for any death (`EIO` if it was
//! journaled, served again if not).
//!
//! A server can also be stuck *between* requests — stopped (`SIGSTOP`),
//! or asleep through a lost wake-up — while requests wait in its rings:
//! it owes nothing, yet nothing moves. Each server's loop beats once a
//! turn (`Control::beat`) and notes the doorbell's count it polls for
//! (`Doorbell::mark_seen`), and clients ring its doorbell after each
//! request, so "rung beyond what the server looked at, and no beat for
//! longer than the bound" is that wedge (a spinning server, whose clients
//! do not ring, must beat all the time). The server's own note matters:
//! rings counted by the watchdog between a server's last beat and the
//! watchdog's next look would otherwise pass for rings before the beat,
//! and a client that rang once and then waits never rings again. A server
//! idle between requests is not rung and never suspected; neither is one
//! stalled on purpose (`atoll chaos --stall`, which the watchdog knows
//! of).

use std::time::{Duration, Instant};

use atoll_proto::SessionId;

use crate::journal::Owed;

/// `ATOLL_WEDGE_MS`: how long one request may stay unanswered before its
/// server process is taken for wedged (default [`DEFAULT_BOUND`]).
pub const ENV_WEDGE_MS: &str = "ATOLL_WEDGE_MS";

/// Far beyond any request's work (milliseconds at worst, on a loaded
/// machine): only a server that cannot answer at all is replaced.
pub const DEFAULT_BOUND: Duration = Duration::from_secs(10);

/// The bound the environment sets, or the default.
pub fn bound_from_env() -> Duration {
    std::env::var(ENV_WEDGE_MS)
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|&ms| ms > 0)
        .map_or(DEFAULT_BOUND, Duration::from_millis)
}

/// A request a server owes: (session, lane, request id).
type OwedKey = (SessionId, u32, u64);

/// What the watchdog last saw each server owe, and since when.
pub struct WedgeWatch {
    bound: Duration,
    seen: Vec<Option<(OwedKey, Instant)>>,
    /// Per server: its last beat count, and since when it has had rings
    /// it did not look at with that count (or when it was last idle).
    beats: Vec<Option<(u64, Instant)>>,
}

impl WedgeWatch {
    pub fn new(servers: usize, bound: Duration) -> WedgeWatch {
        WedgeWatch {
            bound,
            seen: vec![None; servers],
            beats: vec![None; servers],
        }
    }

    pub fn bound(&self) -> Duration {
        self.bound
    }

    /// Server `i` has beaten `beats` times, and `unseen`: its doorbell was
    /// rung beyond the count it last looked at (`Doorbell::unseen`).
    /// `Some(how long)` once it has had unseen rings and no beat for
    /// longer than the bound (`spinning`: its clients do not ring, so no
    /// beat for that long is enough).
    pub fn observe_beats(
        &mut self,
        i: usize,
        beats: u64,
        unseen: bool,
        spinning: bool,
        now: Instant,
    ) -> Option<Duration> {
        let slot = self.beats.get_mut(i)?;
        match *slot {
            Some((b, since)) if b == beats => {
                let waiting = spinning || unseen;
                let stuck = now.duration_since(since);
                if waiting && stuck >= self.bound {
                    return Some(stuck);
                }
                if !waiting {
                    // Idle and not rung: the clock starts at the next ring.
                    *slot = Some((b, now));
                }
            }
            _ => *slot = Some((beats, now)),
        }
        None
    }

    /// Server `i` owes `owed` now: `Some(how long)` once the same request
    /// has been owed beyond the bound (the server is wedged).
    pub fn observe(&mut self, i: usize, owed: Option<&Owed>, now: Instant) -> Option<Duration> {
        let key = owed.map(|o| (o.session, o.lane, o.id));
        let slot = self.seen.get_mut(i)?;
        match (key, slot.as_ref()) {
            (None, _) => *slot = None,
            (Some(k), Some((seen, since))) if *seen == k => {
                let stuck = now.duration_since(*since);
                if stuck >= self.bound {
                    return Some(stuck);
                }
            }
            (Some(k), _) => *slot = Some((k, now)),
        }
        None
    }

    /// Server `i` was replaced: what its predecessor owed is not its own.
    pub fn forget(&mut self, i: usize) {
        if let Some(slot) = self.seen.get_mut(i) {
            *slot = None;
        }
        if let Some(slot) = self.beats.get_mut(i) {
            *slot = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owed(id: u64) -> Owed {
        Owed {
            session: SessionId(7),
            lane: 1,
            id,
            journaled: false,
            began: 0,
        }
    }

    #[test]
    fn only_the_same_request_owed_beyond_the_bound_is_a_wedge() {
        let t = Instant::now();
        let at = |ms: u64| t + Duration::from_millis(ms);
        let mut w = WedgeWatch::new(2, Duration::from_millis(100));
        assert_eq!(w.observe(0, Some(&owed(1)), at(0)), None);
        assert_eq!(w.observe(0, Some(&owed(1)), at(99)), None);
        assert_eq!(
            w.observe(0, Some(&owed(1)), at(150)),
            Some(Duration::from_millis(150))
        );
        // Progress: another request, or none owed, starts the clock again.
        assert_eq!(w.observe(1, Some(&owed(1)), at(0)), None);
        assert_eq!(w.observe(1, Some(&owed(2)), at(150)), None);
        assert_eq!(w.observe(1, None, at(200)), None);
        assert_eq!(w.observe(1, Some(&owed(2)), at(260)), None);
        assert_eq!(w.observe(1, Some(&owed(2)), at(300)), None);
        // A successor starts afresh; unknown servers are ignored.
        w.forget(0);
        assert_eq!(w.observe(0, Some(&owed(1)), at(500)), None);
        assert_eq!(w.observe(9, Some(&owed(1)), at(500)), None);
    }

    #[test]
    fn rung_but_no_beat_beyond_the_bound_is_a_wedge_and_idle_is_not() {
        let t = Instant::now();
        let at = |ms: u64| t + Duration::from_millis(ms);
        let mut w = WedgeWatch::new(3, Duration::from_millis(100));
        // Idle: no beat, no ring, for a long time.
        assert_eq!(w.observe_beats(0, 5, false, false, at(0)), None);
        assert_eq!(w.observe_beats(0, 5, false, false, at(1000)), None);
        // Rung at 1000 (seen at 1010), no beat since: wedged 100 ms later,
        // counted from the last idle look, not from the beat long ago.
        assert_eq!(w.observe_beats(0, 5, true, false, at(1010)), None);
        assert_eq!(w.observe_beats(0, 5, true, false, at(1090)), None);
        assert_eq!(
            w.observe_beats(0, 5, true, false, at(1100)),
            Some(Duration::from_millis(100))
        );
        // Rung, and beating: busy, not wedged.
        assert_eq!(w.observe_beats(1, 1, true, false, at(0)), None);
        assert_eq!(w.observe_beats(1, 2, true, false, at(150)), None);
        assert_eq!(w.observe_beats(1, 3, true, false, at(300)), None);
        // A spinning server must beat all the time.
        w.forget(1);
        assert_eq!(w.observe_beats(1, 7, false, true, at(400)), None);
        assert_eq!(
            w.observe_beats(1, 7, false, true, at(520)),
            Some(Duration::from_millis(120))
        );
        // Stopped right after a beat, and rung before the watchdog's first
        // look at that beat: the client that rang waits and never rings
        // again, and the server still looked at nothing since.
        assert_eq!(w.observe_beats(2, 40, false, false, at(0)), None);
        assert_eq!(w.observe_beats(2, 41, true, false, at(50)), None);
        assert_eq!(w.observe_beats(2, 41, true, false, at(100)), None);
        assert_eq!(
            w.observe_beats(2, 41, true, false, at(150)),
            Some(Duration::from_millis(100))
        );
    }
}
