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
//! journaled, served again if not). A server idle between requests owes
//! nothing and is never suspected; neither is one stalled on purpose
//! (`atoll chaos --stall`), which waits outside any request.

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
}

impl WedgeWatch {
    pub fn new(servers: usize, bound: Duration) -> WedgeWatch {
        WedgeWatch {
            bound,
            seen: vec![None; servers],
        }
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
}
