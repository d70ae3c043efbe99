//! What a `fork` (and the `execve` hand-over) gives the new session on the
//! servers: a reference to every description (`Request::Share`) and every
//! mapping (`Request::Map`), sent so that each may go again.
//!
//! A server killed while it serves one of them, before the request
//! reached its journal (else the successor sends the reply its replay
//! computes), or a server thread whose loop died after it, leaves its
//! successor unable to give the answer: it answers `EIO` (server
//! `takeover.rs`; fos §3.5). Ignored, a reference the dead server
//! never applied is missing in the child, and the description dies with
//! the parent's last close (seen: `sort: fstat ENOENT` in a pipeline whose
//! server was killed). Sent blindly again, one it did apply would count
//! twice. So each is made idempotent on the server, and an `EIO` sends it
//! again ([`again`]): a `Share` carries the count the new session holds
//! before it (`held`, kept here in a [`Ledger`]; the session is new, so
//! the count starts at 0 and only this process adds to it), a `Map` the
//! id of the mapping it gives (the child inherits the ids with the
//! mappings, `mapping.rs`, whose own `Map`s and `Unmap`s go again too).

use atoll_proto::{DescId, InodeId, Reply, Request, SessionId};

use crate::error::{Error, Result};
use crate::session::{Client, Lane};

/// Sends of one request at most: each `EIO` means a server died while
/// serving it, so a bound keeps a server that dies on every try from
/// holding the fork forever.
const ATTEMPTS: usize = 4;

/// `Share`s in flight at once ([`Ledger::share_many`]): few enough that
/// their frames and replies fit the lane's rings however large the list.
const WINDOW: usize = 16;

/// Run `call` again while a server answers `EIO`; only for requests that
/// are idempotent (a `Share` with `held`, a `Map` or `Unmap` naming its
/// mapping, an `Exec` or `PassLocks` to a new session, an absolute
/// `Seek`, a `Read` at a given offset, `MapBlocks`).
pub fn again<R>(mut call: impl FnMut() -> Result<R>) -> Result<R> {
    let mut tries = 1;
    loop {
        match call() {
            Err(Error::Errno(libc::EIO)) if tries < ATTEMPTS => tries += 1,
            r => return r,
        }
    }
}

/// [`again`] when `idempotent`, else `call` once (a read at the
/// description's own offset moves it: sent again, it would skip bytes).
pub fn again_if<R>(idempotent: bool, call: impl FnMut() -> Result<R>) -> Result<R> {
    if idempotent {
        again(call)
    } else {
        let mut call = call;
        call()
    }
}

/// References given to one new session so far, by description.
pub struct Ledger {
    to: SessionId,
    descs: Vec<(DescId, u32)>,
}

impl Ledger {
    /// Nothing given yet to `to` (a session just made by `Fork`).
    pub fn new(to: SessionId) -> Ledger {
        Ledger {
            to,
            descs: Vec::new(),
        }
    }

    /// One more reference to `desc` for the new session.
    pub fn share(&mut self, c: &Client, lane: &Lane, desc: DescId) -> Result<()> {
        let to = self.to;
        let held = count(&mut self.descs, desc);
        again(|| {
            lane.call_ok(
                c,
                desc.server(),
                Request::Share {
                    desc,
                    to,
                    held: *held,
                },
            )
        })?;
        *held += 1;
        Ok(())
    }

    /// One more reference to each of `descs` for the new session, several
    /// `Share`s in flight at once: their replies are taken in the order the
    /// requests went, [`WINDOW`] at a time, so `k` descriptions cost about
    /// one round trip per window rather than `k` (a fork of a shell with
    /// its standard descriptors and its cwd in the mount, an exec handing
    /// them over). Where any of them failed, the whole list goes again one
    /// by one from the counts as they were (each `Share` is idempotent
    /// through `held`: one that was applied answers `Ok` again), which
    /// gives each its own answer. Whether each was given.
    pub fn share_many(&mut self, c: &Client, lane: &Lane, descs: &[DescId]) -> Vec<bool> {
        let to = self.to;
        let before = self.descs.clone();
        let mut given = vec![false; descs.len()];
        let mut clean = true;
        let held: Vec<u32> = descs
            .iter()
            .map(|&d| {
                let n = count(&mut self.descs, d);
                *n += 1;
                *n - 1
            })
            .collect();
        for start in (0..descs.len()).step_by(WINDOW) {
            let end = (start + WINDOW).min(descs.len());
            let mut sent = Vec::with_capacity(end - start);
            for i in start..end {
                let (desc, held) = (descs[i], held[i]);
                let req = Request::Share { desc, to, held };
                match lane.send(c, c.cred(), desc.server(), req) {
                    Ok(id) => sent.push((i, id)),
                    Err(_) => clean = false,
                }
            }
            for (i, id) in sent {
                let ok = lane.recv(c, descs[i].server(), id, |r| match r {
                    Reply::Ok => Ok(()),
                    _ => Err(Error::Protocol("Share")),
                });
                given[i] = ok.is_ok();
                clean &= given[i];
            }
        }
        if !clean {
            self.descs = before;
            for (i, &desc) in descs.iter().enumerate() {
                given[i] = self.share(c, lane, desc).is_ok();
            }
        }
        given
    }

    /// The new session's reference to `ino` for mapping `mapping` (one of
    /// this process's, which the child inherits).
    pub fn map(&self, c: &Client, lane: &Lane, ino: InodeId, mapping: u64) -> Result<()> {
        let to = self.to;
        let req = || Request::Map { ino, to, mapping };
        again(|| lane.call_ok(c, ino.owner(), req()))
    }
}

/// The count kept for `key`, 0 if none yet.
fn count<K: PartialEq + Copy>(v: &mut Vec<(K, u32)>, key: K) -> &mut u32 {
    let i = match v.iter().position(|e| e.0 == key) {
        Some(i) => i,
        None => {
            v.push((key, 0));
            v.len() - 1
        }
    };
    &mut v[i].1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn again_repeats_only_eio_and_only_so_often() {
        let mut n = 0;
        let r: Result<()> = again(|| {
            n += 1;
            Err(Error::Errno(libc::EIO))
        });
        assert!(matches!(r, Err(Error::Errno(libc::EIO))));
        assert_eq!(n, ATTEMPTS);
        let mut n = 0;
        let r = again(|| {
            n += 1;
            if n < 3 {
                Err(Error::Errno(libc::EIO))
            } else {
                Ok(n)
            }
        });
        assert!(matches!(r, Ok(3)));
        let mut n = 0;
        let r: Result<()> = again(|| {
            n += 1;
            Err(Error::Errno(libc::EBADF))
        });
        assert!(matches!(r, Err(Error::Errno(libc::EBADF))));
        assert_eq!(n, 1);
    }

    #[test]
    fn counts_are_kept_per_key() {
        let mut v: Vec<(u32, u32)> = Vec::new();
        *count(&mut v, 7) += 1;
        *count(&mut v, 7) += 1;
        *count(&mut v, 8) += 1;
        assert_eq!(*count(&mut v, 7), 2);
        assert_eq!(*count(&mut v, 8), 1);
        assert_eq!(*count(&mut v, 9), 0);
    }
}
