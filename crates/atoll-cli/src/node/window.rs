//! Flow control of a remote program's stdio relay (`remote.rs`,
//! `spawn.rs`): a sender may have at most [`WINDOW`] bytes sent and not
//! yet taken by the far side, which reports what it took (`StdinTaken`,
//! `OutputTaken`). So a fast writer on one host is held back, as a full
//! pipe holds it on Linux, instead of queueing without bound in the other
//! host's memory; and a proxy reads ahead of its program's reads by at
//! most a window.

use std::sync::{Condvar, Mutex, MutexGuard};

/// Bytes a relay direction may have in flight.
pub const WINDOW: u64 = 256 * 1024;

/// Bytes in flight one way, bounded by a limit.
pub struct Window {
    limit: u64,
    state: Mutex<State>,
    changed: Condvar,
}

struct State {
    in_flight: u64,
    closed: bool,
}

impl Window {
    pub fn new(limit: u64) -> Window {
        Window {
            limit,
            state: Mutex::new(State {
                in_flight: 0,
                closed: false,
            }),
            changed: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Wait until `n` more bytes fit (a piece larger than the window goes
    /// once nothing else is in flight), then count them. `false`: closed.
    pub fn acquire(&self, n: u64) -> bool {
        let mut s = self.lock();
        while !s.closed && s.in_flight > 0 && s.in_flight + n > self.limit {
            s = self.changed.wait(s).unwrap_or_else(|p| p.into_inner());
        }
        if s.closed {
            return false;
        }
        s.in_flight += n;
        true
    }

    /// The far side took `n` bytes.
    pub fn release(&self, n: u64) {
        let mut s = self.lock();
        s.in_flight = s.in_flight.saturating_sub(n);
        self.changed.notify_all();
    }

    /// The link ended: every waiter gives up.
    pub fn close(&self) {
        self.lock().closed = true;
        self.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn a_sender_waits_for_room_and_goes_on_when_bytes_are_taken() {
        let w = Arc::new(Window::new(10));
        assert!(w.acquire(6));
        let (tx, rx) = std::sync::mpsc::channel();
        let w2 = w.clone();
        let t = std::thread::spawn(move || tx.send(w2.acquire(6)).unwrap());
        assert!(
            rx.recv_timeout(Duration::from_millis(100)).is_err(),
            "no room yet"
        );
        w.release(6);
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok(true));
        t.join().unwrap();
    }

    #[test]
    fn a_piece_larger_than_the_window_goes_alone() {
        let w = Window::new(10);
        assert!(w.acquire(25));
        w.release(25);
        assert!(w.acquire(4));
    }

    #[test]
    fn closing_releases_every_waiter() {
        let w = Arc::new(Window::new(4));
        assert!(w.acquire(4));
        let w2 = w.clone();
        let t = std::thread::spawn(move || w2.acquire(1));
        std::thread::sleep(Duration::from_millis(20));
        w.close();
        assert!(!t.join().unwrap());
        assert!(!w.acquire(1));
    }
}
