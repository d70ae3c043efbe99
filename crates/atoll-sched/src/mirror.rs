//! Job control across the proxy boundary: the scheduling server keeps a
//! remote program and its proxy stopped or running *together* (Hare §3.6.1
//! leaves job control out; this is what a shell's `waitpid(WUNTRACED)`,
//! `fg` and `bg` need).
//!
//! Neither side can see the other's stops directly. The server is the
//! program's parent, so `waitid(WSTOPPED | WCONTINUED)` reports every stop
//! and continue of the program exactly once. The proxy is someone else's
//! child; a stop of the proxy (a SIGSTOP it cannot catch) shows only in
//! `/proc/<pid>/stat`, which the server samples. This module is the pure
//! decision logic over those observations; `server` does the system calls.
//!
//! Rules (the side that changed last leads):
//! * the program stopped (^Z to its foreground group, SIGSTOP, SIGTTIN) and
//!   the proxy runs: ask the proxy to stop with the same signal, so its
//!   parent sees the same `WSTOPSIG` (bash prints "Stopped" for SIGTSTP);
//! * the program continued (`fg`/`bg` signal the group, which the program
//!   is in and the proxy is not) and the proxy is stopped: SIGCONT it;
//! * the proxy stopped on its own (SIGSTOP sent to its pid) while the
//!   program runs: SIGSTOP the program;
//! * the proxy continued on its own: nothing here, the proxy relays the
//!   SIGCONT it received.
//!
//! Races this resolves: a stop request the proxy acknowledges (`Stopping`)
//! makes the proxy's next observed stop "ours" — had the program been
//! continued meanwhile, the proxy is continued rather than the program
//! stopped. A request still unread when the program continues is cancelled
//! with a `Continued` message (the proxy acts on the net state of what it
//! reads). A proxy stop and continue both between two samples goes unseen:
//! the program then only receives the relayed SIGCONT, as a running
//! process does.

/// A change of the program's state reported by `waitid`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProgEvent {
    /// Stopped by this signal.
    Stopped(i32),
    Continued,
}

/// What the server must do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Send `ToProxy::Stopped { sig }`.
    AskProxyStop(i32),
    /// Send `ToProxy::Continued` (cancels an unread stop request).
    CancelProxyStop,
    /// SIGCONT the proxy (through its pidfd).
    ContinueProxy,
    /// SIGSTOP the program.
    StopProgram,
}

/// Per-job state of the mirror.
#[derive(Debug, Default)]
pub struct Mirror {
    prog_stopped: bool,
    /// The proxy's state at the last sample.
    proxy_stopped: bool,
    /// A stop request was sent and not yet acknowledged.
    asked: bool,
    /// The proxy acknowledged a request: its next stop is ours.
    acked: bool,
}

impl Mirror {
    pub fn new() -> Mirror {
        Mirror::default()
    }

    pub fn program_stopped(&self) -> bool {
        self.prog_stopped
    }

    /// The proxy said it is stopping itself on our request.
    pub fn on_stopping(&mut self) {
        self.asked = false;
        self.acked = true;
    }

    /// The proxy relayed a SIGCONT it received: whatever stop we expected
    /// from it has happened and been undone by its sender.
    pub fn on_relayed_continue(&mut self) {
        self.acked = false;
    }

    /// One sample: the program's new events (in order) and whether the
    /// proxy is stopped now. Returns the actions, in order.
    pub fn step(&mut self, events: &[ProgEvent], proxy_stopped: bool) -> Vec<Action> {
        let mut out = Vec::new();
        let mut proxy_now = proxy_stopped;
        for ev in events {
            match *ev {
                ProgEvent::Stopped(sig) => {
                    self.prog_stopped = true;
                    if !proxy_now && !self.asked && !self.acked {
                        self.asked = true;
                        out.push(Action::AskProxyStop(sig));
                    }
                }
                ProgEvent::Continued => {
                    self.prog_stopped = false;
                    if proxy_now {
                        out.push(Action::ContinueProxy);
                        proxy_now = false;
                        self.acked = false;
                        self.asked = false;
                    } else if self.asked {
                        out.push(Action::CancelProxyStop);
                        self.asked = false;
                    }
                    // `acked` stays: the proxy stops shortly and the
                    // transition below continues it.
                }
            }
        }
        if proxy_now && !self.proxy_stopped {
            if self.acked {
                self.acked = false;
                if !self.prog_stopped {
                    out.push(Action::ContinueProxy);
                    proxy_now = false;
                }
            } else if !self.prog_stopped {
                out.push(Action::StopProgram);
            }
        }
        self.proxy_stopped = proxy_now;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Action::*;
    use ProgEvent::*;

    const TSTP: i32 = libc::SIGTSTP;
    const STOP: i32 = libc::SIGSTOP;

    #[test]
    fn terminal_stop_then_fg() {
        let mut m = Mirror::new();
        // ^Z reaches the program: the proxy is asked to stop alike.
        assert_eq!(m.step(&[Stopped(TSTP)], false), [AskProxyStop(TSTP)]);
        // Nothing new until the proxy acts.
        assert_eq!(m.step(&[], false), []);
        m.on_stopping();
        // The proxy's stop is the requested one: nothing to mirror back.
        assert_eq!(m.step(&[], true), []);
        // `fg` continues the program's group: the proxy follows.
        assert_eq!(m.step(&[Continued], true), [ContinueProxy]);
        assert_eq!(m.step(&[], false), []);
        assert!(!m.program_stopped());
    }

    #[test]
    fn sigstop_to_the_proxy_stops_the_program() {
        let mut m = Mirror::new();
        assert_eq!(m.step(&[], true), [StopProgram]);
        // The program's stop (ours) asks nothing of the stopped proxy.
        assert_eq!(m.step(&[Stopped(STOP)], true), []);
        // SIGCONT to the proxy: it runs again and relays the SIGCONT.
        assert_eq!(m.step(&[], false), []);
        m.on_relayed_continue();
        assert_eq!(m.step(&[Continued], false), []);
        // A later stop of the program alone is mirrored again.
        assert_eq!(m.step(&[Stopped(TSTP)], false), [AskProxyStop(TSTP)]);
    }

    #[test]
    fn a_continue_racing_an_unread_request_cancels_it() {
        let mut m = Mirror::new();
        assert_eq!(m.step(&[Stopped(TSTP)], false), [AskProxyStop(TSTP)]);
        assert_eq!(m.step(&[Continued], false), [CancelProxyStop]);
        // Stopped again later: a fresh request.
        assert_eq!(m.step(&[Stopped(TSTP)], false), [AskProxyStop(TSTP)]);
    }

    #[test]
    fn a_continue_racing_an_acknowledged_request_continues_the_proxy() {
        let mut m = Mirror::new();
        assert_eq!(m.step(&[Stopped(TSTP)], false), [AskProxyStop(TSTP)]);
        m.on_stopping();
        // The program was continued before the proxy got to stop.
        assert_eq!(m.step(&[Continued], false), []);
        // The proxy's stop is ours and stale: undo it, never stop the
        // running program.
        assert_eq!(m.step(&[], true), [ContinueProxy]);
        assert_eq!(m.step(&[], false), []);
    }

    #[test]
    fn stop_and_continue_within_one_sample() {
        let mut m = Mirror::new();
        // Both reported at once: the request is cancelled in the same step.
        assert_eq!(
            m.step(&[Stopped(TSTP), Continued], false),
            [AskProxyStop(TSTP), CancelProxyStop]
        );
        assert_eq!(m.step(&[], false), []);
    }

    #[test]
    fn both_stopped_independently_need_nothing() {
        let mut m = Mirror::new();
        // The proxy was SIGSTOPped and the program got ^Z in the same sample.
        assert_eq!(m.step(&[Stopped(TSTP)], true), []);
        assert_eq!(m.step(&[Continued], true), [ContinueProxy]);
    }
}
