//! A polled shared-memory channel between two processes, for tickets: the
//! counterpart of Barrelfish's URPC, on which Cosh's numbers were taken
//! (Cosh §6: message channels are shared cache lines the receiver polls).
//!
//! One shared anonymous mapping, made before the fork, holds two
//! mailboxes, one per direction; each is a slot of one message:
//!
//! ```text
//!   word 0  full     0: empty, 1: holds a message (the publication flag)
//!   word 1  sleepers processes asleep on `full`
//!   word 2  len      bytes of the message
//!   64..    the message
//! ```
//!
//! The sender waits for `full == 0`, writes the bytes and `len`, and
//! publishes with `full = 1`; the receiver waits for `full == 1`, copies the
//! message out and frees the slot with `full = 0`. A wait spins on the
//! word for a bounded number of rounds ([`SPINS`]) — on separate cores
//! the other side's store arrives in a cache-line transfer — and then
//! sleeps on a futex, so a waiting side never burns a core for long; a
//! side that changes `full` wakes the sleepers if there are any. A sleeper
//! also wakes every [`NAP`] to ask whether its peer is still alive, so a
//! dead peer gives an error instead of a hang.

use std::time::Duration;

#[cfg(loom)]
use crate::sync::model::Mem;
use crate::sync::{self, AtomicU32, Ordering};
#[cfg(not(loom))]
use crate::sys::{self, Map as Mem};
use crate::CoshError;

/// Polling rounds (each a `pause`) before a wait goes to sleep: a few
/// tens of microseconds, far longer than a hop between two cores that
/// both run, far shorter than a time slice.
#[cfg(not(loom))]
pub const SPINS: u32 = 1 << 13;
#[cfg(loom)]
pub const SPINS: u32 = 2;
/// How long a sleeper waits before checking its peer.
pub const NAP: Duration = Duration::from_millis(20);

/// Room for a ticket carrying `block::DEFAULT_POOL_INLINE_MAX` copied
/// bytes, and its head.
#[cfg(not(loom))]
const SLOT: usize = 5 * 4096;
/// Under loom, slots of two cache lines: every word is a loom object.
#[cfg(loom)]
const SLOT: usize = 128;
const DATA: usize = 64;
/// The longest message.
pub const MAX_MESSAGE: usize = SLOT - DATA;

/// The memory of a channel; [`Channel::end`] gives each side its view.
#[derive(Debug)]
pub struct Channel {
    mem: Mem,
}

/// One side of a channel: sends into one mailbox, receives from the
/// other.
pub struct End<'a> {
    mem: &'a Mem,
    tx: usize,
    rx: usize,
    peer_alive: Box<dyn Fn() -> bool + 'a>,
}

impl Channel {
    pub fn new() -> Result<Channel, CoshError> {
        #[cfg(not(loom))]
        let mem = Mem::shared_anon(2 * SLOT)?;
        #[cfg(loom)]
        let mem = Mem::new(2 * SLOT);
        Ok(Channel { mem })
    }

    /// Side `first` (true in one process, false in the other), with a
    /// check of whether the other process still runs.
    pub fn end<'a>(&'a self, first: bool, peer_alive: impl Fn() -> bool + 'a) -> End<'a> {
        let (tx, rx) = if first { (0, SLOT) } else { (SLOT, 0) };
        End {
            mem: &self.mem,
            tx,
            rx,
            peer_alive: Box::new(peer_alive),
        }
    }
}

impl std::fmt::Debug for End<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("End")
            .field("tx", &self.tx)
            .field("rx", &self.rx)
            .finish_non_exhaustive()
    }
}

impl End<'_> {
    fn words(&self, slot: usize) -> &[AtomicU32] {
        self.mem.atomics32(slot, 3)
    }

    /// Wait until the slot's `full` word reads `want`.
    fn wait(&self, slot: usize, want: u32) -> Result<(), CoshError> {
        let w = self.words(slot);
        for _ in 0..SPINS {
            if w[0].load(Ordering::Acquire) == want {
                return Ok(());
            }
            sync::spin_loop();
        }
        loop {
            w[1].fetch_add(1, Ordering::SeqCst);
            let now = w[0].load(Ordering::SeqCst);
            if now != want {
                sleep_on(&w[0], now);
            }
            w[1].fetch_sub(1, Ordering::SeqCst);
            if w[0].load(Ordering::Acquire) == want {
                return Ok(());
            }
            if !(self.peer_alive)() {
                return Err(CoshError::Protocol("the peer of the channel went away"));
            }
        }
    }

    fn set_full(&self, slot: usize, v: u32) {
        let w = self.words(slot);
        w[0].store(v, Ordering::SeqCst);
        if w[1].load(Ordering::SeqCst) > 0 {
            wake(&w[0]);
        }
    }

    /// Send one message (at most [`MAX_MESSAGE`] bytes).
    pub fn send(&self, msg: &[u8]) -> Result<(), CoshError> {
        if msg.len() > MAX_MESSAGE {
            return Err(CoshError::Protocol("a message too long for the channel"));
        }
        self.wait(self.tx, 0)?;
        self.mem.write_shared(self.tx + DATA, msg);
        self.words(self.tx)[2].store(msg.len() as u32, Ordering::Relaxed);
        self.set_full(self.tx, 1);
        Ok(())
    }

    /// Receive one message into `buf` (cleared first).
    pub fn recv(&self, buf: &mut Vec<u8>) -> Result<(), CoshError> {
        self.wait(self.rx, 1)?;
        let len = self.words(self.rx)[2].load(Ordering::Relaxed) as usize;
        if len > MAX_MESSAGE {
            return Err(CoshError::Protocol("a message too long for the channel"));
        }
        buf.clear();
        self.mem.read_shared(self.rx + DATA, len, buf);
        self.set_full(self.rx, 0);
        Ok(())
    }
}

/// Sleep while `word` holds `now` (at most [`NAP`]). Under loom, a yield:
/// the model has no futex, and a waiter that yields and looks again is
/// what a woken one does.
fn sleep_on(word: &AtomicU32, now: u32) {
    #[cfg(not(loom))]
    sys::futex_wait(word, now, NAP);
    #[cfg(loom)]
    {
        let _ = (word, now, NAP);
        sync::yield_now();
    }
}

/// Wake the processes asleep on `word`.
fn wake(word: &AtomicU32) {
    #[cfg(not(loom))]
    sys::futex_wake(word);
    #[cfg(loom)]
    let _ = word;
}

#[cfg(test)]
mod tests {
    use super::*;

    // Messages between processes: `tests/pool.rs` (forking wants no other
    // test thread running).

    #[test]
    fn an_overlong_message_is_refused() {
        let ch = Channel::new().unwrap();
        let end = ch.end(true, || true);
        assert!(end.send(&vec![0; MAX_MESSAGE + 1]).is_err());
    }

    #[test]
    fn a_message_waits_in_its_slot_until_received() {
        let ch = Channel::new().unwrap();
        let (a, b) = (ch.end(true, || true), ch.end(false, || true));
        let mut buf = Vec::new();
        a.send(b"one").unwrap();
        b.send(b"two").unwrap();
        b.recv(&mut buf).unwrap();
        assert_eq!(buf, b"one");
        a.recv(&mut buf).unwrap();
        assert_eq!(buf, b"two");
    }
}
