//! Readiness of pipe ends (`poll`, `ppoll`, `select`, `pselect6`) in
//! sets that may mix them with host descriptors: the atoll part is looked
//! at in the rings, the host part polled with a short timeout (see
//! `crate::pipe`'s module comment, "Readiness with host descriptors").

use core::sync::atomic::Ordering;

use atoll_proto::pipe as hdr;
use atoll_proto::FileType;

use crate::error::{err, Result};
use crate::fdtable::{self, DescRef};
use crate::intr;
use crate::pipe::{pipe_fd, ring};
use crate::pipeticket as ticket;
use crate::ring::Ring;
use crate::session::Client;
use crate::sys;
use crate::Out;

/// `poll` events of a pipe end now (level-triggered, as Linux's
/// `pipe_poll`): readable with data or without writers (`POLLHUP`),
/// writable with `PIPE_BUF` bytes of room, `POLLERR` without readers.
pub(crate) fn pipe_events(c: &Client, d: &DescRef) -> i16 {
    if crate::pipecopy::active(c) {
        return crate::pipecopy::events(c, d);
    }
    let Ok(r) = ring(c, d) else {
        return libc::POLLERR;
    };
    let f = d.flags() & libc::O_ACCMODE as u32;
    let head = r.word64(hdr::HEAD).load(Ordering::Acquire);
    let tail = r.word64(hdr::TAIL).load(Ordering::Acquire);
    let used = head.wrapping_sub(tail).min(r.capacity());
    let mut ev = 0i16;
    if f != libc::O_WRONLY as u32 {
        if used > 0 || ticket::offered(&r) > 0 {
            ev |= libc::POLLIN | libc::POLLRDNORM;
        }
        if r.word(hdr::WRITERS).load(Ordering::Acquire) == 0 {
            ev |= libc::POLLHUP;
        }
    }
    if f != libc::O_RDONLY as u32 {
        if !ticket::posted(&r) && r.limit().saturating_sub(used) >= hdr::PIPE_BUF as u64 {
            ev |= libc::POLLOUT | libc::POLLWRNORM;
        }
        if r.word(hdr::READERS).load(Ordering::Acquire) == 0 {
            ev |= libc::POLLERR;
        }
    }
    ev
}

/// Events of any atoll descriptor: regular files and directories are
/// always ready (Linux); pipes as [`pipe_events`]. `None` for host fds.
fn atoll_events(c: &Client, fd: i32) -> Option<i16> {
    let d = fdtable::get(fd as i64)?;
    Some(if d.ftype() == FileType::Fifo {
        pipe_events(c, &d)
    } else {
        libc::POLLIN | libc::POLLOUT | libc::POLLRDNORM | libc::POLLWRNORM
    })
}

/// Wait word that moves when a pipe end's readiness may change.
fn wait_word(c: &Client, fd: i32, events: i16) -> Option<(Ring, usize)> {
    let d = pipe_fd(fd as i64)?;
    let r = ring(c, &d).ok()?;
    let f = d.flags() & libc::O_ACCMODE as u32;
    let word = if events & (libc::POLLOUT | libc::POLLWRNORM) != 0 && f != libc::O_RDONLY as u32 {
        hdr::WSEQ
    } else {
        hdr::RSEQ
    };
    Some((r, word))
}

pub(crate) const NS: i64 = 1_000_000_000;

pub(crate) fn ts(ns: i64) -> libc::timespec {
    libc::timespec {
        tv_sec: ns / NS,
        tv_nsec: ns % NS,
    }
}

/// The core of every readiness call: `fds` is our own pollfd array.
/// Atoll entries are evaluated here, host entries by `ppoll` with `mask`
/// (the program's, or none). `timeout_ns` < 0 waits forever.
fn poll_loop(
    c: &Client,
    fds: &mut [libc::pollfd],
    timeout_ns: i64,
    mask: Option<u64>,
) -> Result<i64> {
    let deadline = (timeout_ns >= 0).then(|| sys::monotonic_ns().saturating_add(timeout_ns));
    let mut host: Vec<libc::pollfd> = fds.to_vec();
    let mut atoll_rev: Vec<Option<i16>> = vec![None; fds.len()];
    let mut slice: i64 = 1_000_000;
    loop {
        // A deferred program signal ends the wait (readiness calls never
        // restart); its handler runs at the boundary.
        if intr::pending() {
            return err(libc::EINTR);
        }
        let mut ready = 0i64;
        let mut pipes = 0usize;
        let mut hosts = 0usize;
        for (i, p) in fds.iter().enumerate() {
            host[i] = *p;
            atoll_rev[i] = None;
            if p.fd < 0 {
                continue;
            }
            if let Some(ev) = atoll_events(c, p.fd) {
                if pipe_fd(p.fd as i64).is_some() {
                    pipes += 1;
                }
                let want = p.events | libc::POLLHUP | libc::POLLERR;
                let rev = ev & want;
                atoll_rev[i] = Some(rev);
                if rev != 0 {
                    ready += 1;
                }
                host[i].fd = -1;
            } else {
                hosts += 1;
            }
        }
        let left = deadline.map(|d| (d - sys::monotonic_ns()).max(0));
        let expired = left == Some(0);
        // One pipe and nothing else to wait for: sleep on its futex.
        if ready == 0 && !expired && pipes == 1 && hosts == 0 && mask.is_none() {
            let i = (0..fds.len())
                .find(|&i| atoll_rev[i].is_some())
                .unwrap_or(0);
            if let Some((r, word)) = wait_word(c, fds[i].fd, fds[i].events) {
                // Count as a sleeper first (so the other side wakes us),
                // then read the word, then re-check: a change after the
                // check moves the word and the futex does not sleep.
                let sleeper = if word == hdr::RSEQ {
                    hdr::RSLEEP
                } else {
                    hdr::WSLEEP
                };
                r.word(sleeper).fetch_add(1, Ordering::SeqCst);
                let seen = r.word(word).load(Ordering::SeqCst);
                let mut w = 0;
                if atoll_events(c, fds[i].fd).unwrap_or(0)
                    & (fds[i].events | libc::POLLHUP | libc::POLLERR)
                    == 0
                {
                    let t = left.map(ts);
                    w = r.futex_wait(word, seen, t.as_ref());
                }
                r.word(sleeper).fetch_sub(1, Ordering::AcqRel);
                if w == -(libc::EIO as i64) {
                    return err(libc::EIO);
                }
                // EINTR: the loop's first check unwinds for a deferred
                // program signal; atoll's own handlers do not end the wait.
                continue;
            }
        }
        let wait = if ready > 0 || expired {
            0
        } else if pipes == 0 {
            left.unwrap_or(-1)
        } else {
            left.map_or(slice, |l| l.min(slice))
        };
        let t = ts(wait.max(0));
        let tp = if wait < 0 { 0 } else { &t as *const _ as u64 };
        // SAFETY: `host` is our own pollfd array; `tp` is null or our
        // local timespec; `mask` is the program's sigset pointer/size
        // pair as it passed them.
        let r = unsafe {
            let (m, msz) = match mask {
                Some(p) => (p, 8),
                None => (0, 0),
            };
            intr::host_syscall6(
                libc::SYS_ppoll,
                [host.as_mut_ptr() as u64, host.len() as u64, tp, m, msz, 0],
            )
        };
        if r == -(libc::EINTR as i64) {
            continue; // see the futex case above
        }
        if r < 0 {
            return err((-r) as i32);
        }
        let total = r + ready;
        if total > 0 || expired || (wait >= 0 && pipes == 0) {
            for (i, p) in fds.iter_mut().enumerate() {
                p.revents = match atoll_rev[i] {
                    Some(rev) => rev,
                    None => host[i].revents,
                };
            }
            return Ok(total);
        }
        slice = (slice * 2).min(8_000_000);
    }
}

/// `poll`/`ppoll` when the process may hold pipe ends.
pub(crate) fn poll(c: &Client, nr: i64, a: &[u64; 6]) -> Result<Out> {
    let (fds, nfds) = (a[0], a[1]);
    if nfds > 1 << 20 {
        return err(libc::EINVAL);
    }
    let mut v: Vec<libc::pollfd> = sys::get_user_vec(fds, nfds as usize)?;
    if !v.iter().any(|p| pipe_fd(p.fd as i64).is_some()) {
        return Ok(Out::Host); // file::poll handles regular atoll files
    }
    let (timeout, mask) = if nr == libc::SYS_poll {
        let t = a[2] as i32;
        (if t < 0 { -1 } else { t as i64 * 1_000_000 }, None)
    } else {
        let t = if a[2] == 0 {
            -1
        } else {
            let t: libc::timespec = sys::get_user(a[2])?;
            t.tv_sec * NS + t.tv_nsec
        };
        (t, (a[3] != 0).then_some(a[3]))
    };
    let n = poll_loop(c, &mut v, timeout, mask)?;
    sys::put_user_slice(fds, &v)?;
    Ok(Out::Done(n))
}

/// `select`/`pselect6` when a set names a pipe end: translated to poll.
pub(crate) fn select(c: &Client, nr: i64, a: &[u64; 6]) -> Result<Out> {
    let n = a[0] as i32;
    if !(0..=1024).contains(&n) {
        return if n < 0 {
            err(libc::EINVAL)
        } else {
            Ok(Out::Host)
        };
    }
    let words = (n as usize).div_ceil(64);
    let load = |p: u64| -> Result<[u64; 16]> {
        let mut s = [0u64; 16];
        if p != 0 {
            for (k, w) in s.iter_mut().enumerate().take(words) {
                *w = sys::get_user(p + 8 * k as u64)?;
            }
        }
        Ok(s)
    };
    let (rs, ws, es) = (load(a[1])?, load(a[2])?, load(a[3])?);
    let has = |s: &[u64; 16], fd: usize| s[fd / 64] >> (fd % 64) & 1 != 0;
    let mut v: Vec<libc::pollfd> = Vec::new();
    let mut any_pipe = false;
    for fd in 0..n as usize {
        let mut ev = 0i16;
        if has(&rs, fd) {
            ev |= libc::POLLIN;
        }
        if has(&ws, fd) {
            ev |= libc::POLLOUT;
        }
        if has(&es, fd) {
            ev |= libc::POLLPRI;
        }
        if ev != 0 {
            any_pipe |= pipe_fd(fd as i64).is_some();
            v.push(libc::pollfd {
                fd: fd as i32,
                events: ev,
                revents: 0,
            });
        }
    }
    if !any_pipe {
        return Ok(Out::Host);
    }
    let (timeout, mask) = if nr == libc::SYS_select {
        let t = if a[4] == 0 {
            -1
        } else {
            let t: libc::timeval = sys::get_user(a[4])?;
            if t.tv_sec < 0 || t.tv_usec < 0 {
                return err(libc::EINVAL);
            }
            t.tv_sec * NS + t.tv_usec * 1000
        };
        (t, None)
    } else {
        let t = if a[4] == 0 {
            -1
        } else {
            let t: libc::timespec = sys::get_user(a[4])?;
            t.tv_sec * NS + t.tv_nsec
        };
        // pselect6's sixth argument: { const sigset_t *ss; size_t len; }.
        let mask = if a[5] != 0 {
            let m: [u64; 2] = sys::get_user(a[5])?;
            (m[0] != 0).then_some(m[0])
        } else {
            None
        };
        (t, mask)
    };
    poll_loop(c, &mut v, timeout, mask)?;
    let (mut ro, mut wo, mut eo) = ([0u64; 16], [0u64; 16], [0u64; 16]);
    let mut count = 0i64;
    for p in &v {
        if p.revents & libc::POLLNVAL != 0 {
            return err(libc::EBADF);
        }
        let fd = p.fd as usize;
        let set = |s: &mut [u64; 16]| s[fd / 64] |= 1 << (fd % 64);
        if p.events & libc::POLLIN != 0
            && p.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0
        {
            set(&mut ro);
            count += 1;
        }
        if p.events & libc::POLLOUT != 0 && p.revents & (libc::POLLOUT | libc::POLLERR) != 0 {
            set(&mut wo);
            count += 1;
        }
        if p.events & libc::POLLPRI != 0 && p.revents & libc::POLLPRI != 0 {
            set(&mut eo);
            count += 1;
        }
    }
    for (p, s) in [(a[1], &ro), (a[2], &wo), (a[3], &eo)] {
        if p != 0 {
            for (k, w) in s.iter().enumerate().take(words) {
                sys::put_user(p + 8 * k as u64, *w)?;
            }
        }
    }
    Ok(Out::Done(count))
}
