//! Sleeping until any of many channels has something its server sent
//! unasked: an inbox message, an inbox overflow, or the channel's end.
//!
//! A program reads its inbox before each call and never sleeps on it. A
//! proxy that relays channels to another host (`atoll node`'s head proxy,
//! fos §3.2) must instead pass such messages on as soon as they are
//! written, while no call of its own is waiting: it sleeps on the inbox
//! events of all its channels at once (`futex_waitv`, Linux 5.16) and the
//! server's [`ServerChannel::notify`](crate::ServerChannel::notify) wakes
//! it as a reply wakes a sleeping client.
//!
//! The protocol is the one of [`crate::wait`], on every word at once:
//! announce a sleeper on each event, re-check every condition, sleep while
//! every word still holds the value it had after the announcement, take
//! the announcements back. A notifier that bumped an event before the
//! announcement is seen by the re-check; one after it sees a sleeper and
//! wakes the word, and a word changed before the sleep makes the kernel
//! return at once.

use std::time::Duration;

use crate::channel::ClientChannel;
use crate::wait::Event;

/// `futex_waitv` takes at most 128 words; one is the [`Bell`].
pub const MAX_WATCHED: usize = 127;

/// A word the watcher also sleeps on, rung by threads of its own process
/// (a channel was added, the link ended).
pub struct Bell(Event);

impl Default for Bell {
    fn default() -> Self {
        Bell(Event::quiet())
    }
}

impl Bell {
    /// Wake the watcher (a no-op system-call-wise unless it sleeps).
    pub fn ring(&self) {
        self.0.notify();
    }

    /// Rings so far: pass it to [`wait_for_notices`] to sleep only if the
    /// bell has not rung since.
    pub fn rings(&self) -> u32 {
        self.0.ticks()
    }
}

/// `struct futex_waitv` of the kernel's UAPI.
#[repr(C)]
struct FutexWaitv {
    val: u64,
    uaddr: u64,
    flags: u32,
    reserved: u32,
}

/// 32-bit futex, shared between processes (servers may be processes of
/// their own, so no `FUTEX2_PRIVATE`).
const FUTEX2_SIZE_U32: u32 = 0x02;

/// One channel to watch: its notices, and its replies too when `replies`
/// (a call the proxy stopped spinning for, such as a read of an empty
/// pipe, whose answer the server sends when the pipe fills).
pub type Watched<'a> = (&'a ClientChannel, bool);

/// Futex words `chans` need: one per channel, one more per watched reply
/// ring. Above [`MAX_WATCHED`], [`wait_for_notices`] watches only a prefix.
pub fn words(chans: &[Watched<'_>]) -> usize {
    chans.iter().map(|(_, r)| 1 + usize::from(*r)).sum()
}

/// How many of `chans`, from the first, [`wait_for_notices`] watches:
/// as many as fit in [`MAX_WATCHED`] words. The rest are seen only when
/// the caller looks anyway (its timeout, another wake-up).
pub fn watched_prefix(chans: &[Watched<'_>]) -> usize {
    let mut watched = 0;
    let mut used = 0;
    for (_, replies) in chans {
        let need = 1 + usize::from(*replies);
        if used + need > MAX_WATCHED {
            break;
        }
        used += need;
        watched += 1;
    }
    watched
}

/// Sleep until one of `chans` has notices ([`ClientChannel::has_notices`])
/// or, where asked, a reply; `bell` rang since it showed `rings_seen`; or
/// `timeout` passed. Channels past the first [`MAX_WATCHED`] words are
/// not watched. True if something is ready (the caller should look),
/// false if the time ran out first.
pub fn wait_for_notices(
    chans: &[Watched<'_>],
    bell: &Bell,
    rings_seen: u32,
    timeout: Duration,
) -> bool {
    let chans = &chans[..watched_prefix(chans)];
    let ready = || {
        bell.rings() != rings_seen
            || chans
                .iter()
                .any(|(c, replies)| c.has_notices() || (*replies && c.has_reply()))
    };
    if ready() {
        return true;
    }
    let mut events: Vec<&Event> = vec![&bell.0];
    for (c, replies) in chans {
        events.push(c.inbox_event());
        if *replies {
            events.push(c.reply_event());
        }
    }
    let waiters: Vec<FutexWaitv> = events
        .iter()
        .map(|e| FutexWaitv {
            val: u64::from(e.announce()),
            uaddr: e.word() as *const _ as u64,
            flags: FUTEX2_SIZE_U32,
            reserved: 0,
        })
        .collect();
    if !ready() {
        sleep_on(&waiters, timeout);
    }
    for e in &events {
        e.withdraw();
    }
    ready()
}

/// One `futex_waitv` (returns on a wake-up, a changed word, a signal or
/// the deadline alike; the caller re-checks).
fn sleep_on(waiters: &[FutexWaitv], timeout: Duration) {
    // The deadline is absolute on the monotonic clock.
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    let nanos = now.tv_nsec as u64 + u64::from(timeout.subsec_nanos());
    let deadline = libc::timespec {
        tv_sec: (now.tv_sec as u64 + timeout.as_secs() + nanos / 1_000_000_000) as libc::time_t,
        tv_nsec: (nanos % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: `waiters` is a live array of `len` `futex_waitv` records
    // whose addresses are 32-bit words in mappings that outlive the call;
    // the deadline is a timespec on this stack. The kernel only reads them.
    unsafe {
        libc::syscall(
            libc::SYS_futex_waitv,
            waiters.as_ptr(),
            waiters.len() as libc::c_uint,
            0 as libc::c_uint,
            &deadline as *const libc::timespec,
            libc::CLOCK_MONOTONIC,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ServerChannel;
    use std::os::fd::AsFd;
    use std::sync::Arc;

    fn pair() -> (ClientChannel, ServerChannel) {
        let (fd, server) = ServerChannel::create(crate::RingSize::Small).unwrap();
        (ClientChannel::map(fd.as_fd()).unwrap(), server)
    }

    /// One word per channel, two with its replies, 127 in all: the
    /// channels past that are not watched (the head proxy counts their
    /// notices as waiting for a timer).
    #[test]
    fn the_watched_prefix_fits_in_the_words_of_one_wait() {
        let pairs: Vec<_> = (0..MAX_WATCHED + 1).map(|_| pair()).collect();
        let plain: Vec<Watched<'_>> = pairs.iter().map(|(c, _)| (c, false)).collect();
        assert_eq!(watched_prefix(&plain), MAX_WATCHED);
        let replies: Vec<Watched<'_>> = pairs.iter().map(|(c, _)| (c, true)).collect();
        assert_eq!(watched_prefix(&replies), MAX_WATCHED / 2);
        assert_eq!(watched_prefix(&replies[..3]), 3);
    }

    #[test]
    fn nothing_sent_times_out() {
        let (c, _s) = pair();
        let bell = Bell::default();
        assert!(!wait_for_notices(
            &[(&c, true)],
            &bell,
            bell.rings(),
            Duration::from_millis(5)
        ));
    }

    /// A sleeping watcher is woken by a notice on any of its channels, a
    /// channel's end, a reply it watches, or the bell (a lost wake-up would show as a test
    /// taking a minute per case).
    #[test]
    fn a_notice_an_end_or_the_bell_wakes_the_sleeper() {
        for what in ["notice", "end", "bell", "reply"] {
            let (a, _sa) = pair();
            let (b, sb) = pair();
            let bell = Arc::new(Bell::default());
            let seen = bell.rings();
            let (tx, rx) = std::sync::mpsc::channel();
            let ringer = bell.clone();
            let t = std::thread::spawn(move || {
                rx.recv().unwrap();
                match what {
                    "notice" => sb.notify(b"invalidate").unwrap(),
                    "end" => sb.close(),
                    "reply" => sb.reply(b"answer").unwrap(),
                    _ => ringer.ring(),
                }
            });
            tx.send(()).unwrap();
            while !wait_for_notices(
                &[(&a, false), (&b, true)],
                &bell,
                seen,
                Duration::from_secs(60),
            ) {}
            t.join().unwrap();
            if what == "notice" {
                assert_eq!(b.drain_inbox(|_| ()).unwrap(), 1);
            }
        }
    }
}
