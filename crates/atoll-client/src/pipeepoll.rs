//! epoll of atoll pipe ends (the readiness part of `pipe.rs`): pipe ends
//! are watched here, in the client, the rest by the kernel. Watches are
//! level- or edge-triggered (`EPOLLET`: reported once per movement of the
//! ring's wait words) and one-shot; `epoll_wait` on an epoll descriptor
//! that watches pipe ends checks them here and polls the kernel's part
//! with a short timeout in between (1 ms doubling to 8 ms), carrying the
//! program's signal mask.

use core::sync::atomic::{AtomicU32, Ordering};

use atoll_proto::pipe as hdr;

use crate::error::{err, Result};
use crate::intr;
use crate::pipe::{pipe_fd, ring};
use crate::pipepoll::{pipe_events, ts, NS};
use crate::session::Client;
use crate::sys;
use crate::Out;

struct Watch {
    epfd: i32,
    fd: i32,
    events: u32,
    data: u64,
    /// `EPOLLET`: the wait words when last reported.
    seen: u64,
}

const MAX_WATCHES: usize = 256;
static WATCH_COUNT: AtomicU32 = AtomicU32::new(0);
// With the other big zero tables after `.bss` (`fdtable::DESCS` says why).
#[cfg_attr(target_os = "linux", link_section = ".bss.atoll_tables")]
static mut WATCHES: [Option<Watch>; MAX_WATCHES] = [const { None }; MAX_WATCHES];

/// The watch table's lock, for [`crate::forkgate`].
pub fn fork_lock() -> &'static sys::SpinLock {
    &crate::forkgate::LOCKS.pipeepoll
}

/// Run `f` on the watch table under its lock (signals blocked).
fn with_watches<R>(f: impl FnOnce(&mut [Option<Watch>; MAX_WATCHES]) -> R) -> R {
    let _g = fork_lock().lock();
    // SAFETY: the table is only ever touched here, under `fork_lock()`
    // taken with signals blocked, so no other reference exists.
    let t = unsafe { &mut *core::ptr::addr_of_mut!(WATCHES) };
    f(t)
}

pub(crate) fn epoll_ctl(c: &Client, a: &[u64; 6]) -> Result<Out> {
    let (epfd, op, fd) = (a[0] as i32, a[1] as i32, a[2] as i32);
    if pipe_fd(fd as i64).is_none() {
        return Ok(Out::Host);
    }
    // Let the kernel validate the epoll descriptor.
    let mut st: libc::stat = sys::zeroed();
    // SAFETY: writes our local stat buffer.
    let r = unsafe { sys::sc(libc::SYS_fstat, epfd as u64, &mut st as *mut _ as u64, 0, 0) };
    if r < 0 {
        return err((-r) as i32);
    }
    if epfd == fd {
        return err(libc::EINVAL);
    }
    let ev: Option<libc::epoll_event> = if op == libc::EPOLL_CTL_DEL {
        None
    } else {
        Some(sys::get_user(a[3])?)
    };
    let _ = c;
    with_watches(|t| {
        let at = t
            .iter()
            .position(|w| w.as_ref().is_some_and(|w| w.epfd == epfd && w.fd == fd));
        match (op, at) {
            (libc::EPOLL_CTL_ADD, Some(_)) => err(libc::EEXIST),
            (libc::EPOLL_CTL_ADD, None) => {
                let Some(free) = t.iter().position(|w| w.is_none()) else {
                    return err(libc::ENOSPC);
                };
                let e = ev.unwrap_or(libc::epoll_event { events: 0, u64: 0 });
                t[free] = Some(Watch {
                    epfd,
                    fd,
                    events: e.events,
                    data: e.u64,
                    seen: u64::MAX,
                });
                WATCH_COUNT.fetch_add(1, Ordering::Relaxed);
                Ok(Out::Done(0))
            }
            (libc::EPOLL_CTL_MOD, Some(i)) => {
                let e = ev.unwrap_or(libc::epoll_event { events: 0, u64: 0 });
                if let Some(w) = t[i].as_mut() {
                    w.events = e.events;
                    w.data = e.u64;
                    w.seen = u64::MAX;
                }
                Ok(Out::Done(0))
            }
            (libc::EPOLL_CTL_DEL, Some(i)) => {
                t[i] = None;
                WATCH_COUNT.fetch_sub(1, Ordering::Relaxed);
                Ok(Out::Done(0))
            }
            (libc::EPOLL_CTL_MOD | libc::EPOLL_CTL_DEL, None) => err(libc::ENOENT),
            _ => err(libc::EINVAL),
        }
    })
}

/// Pipe-end events ready for `epfd`'s watches, written to `out` (at most
/// `max`). Watches of closed descriptors are dropped (Linux removes them
/// with the description).
fn epoll_ready(c: &Client, epfd: i32, out: u64, max: usize) -> Result<(usize, bool)> {
    let mut got: Vec<libc::epoll_event> = Vec::new();
    let mut mine = false;
    with_watches(|t| {
        for slot in t.iter_mut() {
            let Some(w) = slot.as_mut() else { continue };
            if w.epfd != epfd {
                continue;
            }
            let Some(d) = pipe_fd(w.fd as i64) else {
                *slot = None;
                WATCH_COUNT.fetch_sub(1, Ordering::Relaxed);
                continue;
            };
            mine = true;
            if got.len() >= max {
                continue;
            }
            let pe = pipe_events(c, &d) as u32;
            let want = w.events | libc::EPOLLHUP as u32 | libc::EPOLLERR as u32;
            let ev = pe & want;
            if ev == 0 {
                continue;
            }
            if w.events & libc::EPOLLET as u32 != 0 {
                // Edge-triggered: report only after the ring moved.
                let seq = if crate::pipecopy::active(c) {
                    crate::pipecopy::state(c, &d)
                        .map_or(0, |s| (s.rseq as u64) << 32 | s.wseq as u64)
                } else {
                    ring(c, &d).map_or(0, |r| {
                        (r.word(hdr::RSEQ).load(Ordering::Acquire) as u64) << 32
                            | r.word(hdr::WSEQ).load(Ordering::Acquire) as u64
                    })
                };
                if seq == w.seen {
                    continue;
                }
                w.seen = seq;
            }
            if w.events & libc::EPOLLONESHOT as u32 != 0 {
                w.events = 0;
            }
            got.push(libc::epoll_event {
                events: ev,
                u64: w.data,
            });
        }
    });
    sys::put_user_slice(out, &got)?;
    Ok((got.len(), mine))
}

/// `epoll_wait`/`epoll_pwait`/`epoll_pwait2` on an epoll descriptor that
/// watches pipe ends: pipe ends checked here, the kernel's part polled
/// with a short timeout in between (see the module comment for the cost).
pub(crate) fn epoll_wait(c: &Client, nr: i64, a: &[u64; 6]) -> Result<Out> {
    let (epfd, out, max) = (a[0] as i32, a[1], a[2] as i32);
    if WATCH_COUNT.load(Ordering::Relaxed) == 0 {
        return Ok(Out::Host);
    }
    if max <= 0 {
        return err(libc::EINVAL);
    }
    let timeout = match nr {
        libc::SYS_epoll_pwait2 => {
            if a[3] == 0 {
                -1
            } else {
                let t: libc::timespec = sys::get_user(a[3])?;
                t.tv_sec * NS + t.tv_nsec
            }
        }
        _ => {
            let t = a[3] as i32;
            if t < 0 {
                -1
            } else {
                t as i64 * 1_000_000
            }
        }
    };
    let mask = if nr == libc::SYS_epoll_wait { 0 } else { a[4] };
    let deadline = (timeout >= 0).then(|| sys::monotonic_ns().saturating_add(timeout));
    let mut slice: i64 = 1_000_000;
    let sz = core::mem::size_of::<libc::epoll_event>() as u64;
    loop {
        let (n, mine) = epoll_ready(c, epfd, out, max as usize)?;
        if !mine {
            return Ok(Out::Host);
        }
        // A deferred program signal ends an empty wait (never restarted).
        if n == 0 && intr::pending() {
            return err(libc::EINTR);
        }
        let left = deadline.map(|d| (d - sys::monotonic_ns()).max(0));
        let wait = if n > 0 || left == Some(0) {
            0
        } else {
            left.map_or(slice, |l| l.min(slice))
        };
        let t = ts(wait);
        let rest = (max as usize - n) as u64;
        let r = if rest == 0 {
            0
        } else {
            // SAFETY: the program's event buffer past our entries, our
            // timespec, and the program's mask pointer and size.
            unsafe {
                intr::host_syscall6(
                    libc::SYS_epoll_pwait2,
                    [
                        epfd as u64,
                        out + n as u64 * sz,
                        rest,
                        &t as *const _ as u64,
                        mask,
                        8,
                    ],
                )
            }
        };
        if r < 0 {
            if n > 0 && r == -(libc::EINTR as i64) {
                return Ok(Out::Done(n as i64));
            }
            return err((-r) as i32);
        }
        let total = n as i64 + r;
        if total > 0 || left == Some(0) {
            return Ok(Out::Done(total));
        }
        slice = (slice * 2).min(8_000_000);
    }
}
