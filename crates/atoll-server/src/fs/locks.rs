//! Advisory locks of one inode, with Linux's semantics on one machine.
//!
//! Three kinds of owner share one table per inode:
//! * classic POSIX record locks, owned by a process ([`LockOwner::Process`],
//!   the session id);
//! * open-file-description locks ([`LockOwner::Description`]), which
//!   conflict with POSIX locks exactly as in Linux (same namespace);
//! * `flock(2)` locks ([`LockOwner::Flock`]), whole-file and in a separate
//!   namespace.
//!
//! A lock request by an owner first removes that owner's coverage of the
//! range (splitting locks that stick out), then adds the new range and
//! merges it with the owner's adjacent or overlapping locks of the same
//! kind, which is how `fcntl(F_SETLK)` converts and coalesces ranges.
//! Blocking requests are not kept here: the client retries `EAGAIN`.

use atoll_proto::{Errno, LockOwner, LockSpec};

pub const RD: i16 = libc::F_RDLCK as i16;
pub const WR: i16 = libc::F_WRLCK as i16;
pub const UN: i16 = libc::F_UNLCK as i16;

/// One held lock; `end` is inclusive, `u64::MAX` meaning "to end of file
/// and beyond" (`len == 0`).
#[derive(Clone, Copy, PartialEq, Eq, Debug, serde::Serialize, serde::Deserialize)]
pub struct Lock {
    pub kind: i16,
    pub start: u64,
    pub end: u64,
    pub owner: LockOwner,
    pub pid: u32,
}

impl Lock {
    /// Validate a request: known kind, range that does not overflow. A
    /// `flock` lock always covers the whole file.
    pub fn from_spec(spec: &LockSpec) -> Result<Lock, Errno> {
        if ![RD, WR, UN].contains(&spec.kind) {
            return Err(Errno::EINVAL);
        }
        let (start, end) = match spec.owner {
            LockOwner::Flock(_) => (0, u64::MAX),
            _ if spec.len == 0 => (spec.start, u64::MAX),
            _ => {
                let end = spec
                    .start
                    .checked_add(spec.len - 1)
                    .filter(|e| *e <= i64::MAX as u64)
                    .ok_or(Errno::EOVERFLOW)?;
                (spec.start, end)
            }
        };
        if start > i64::MAX as u64 {
            return Err(Errno::EINVAL);
        }
        Ok(Lock {
            kind: spec.kind,
            start,
            end,
            owner: spec.owner,
            pid: spec.pid,
        })
    }

    pub fn to_spec(self) -> LockSpec {
        LockSpec {
            kind: self.kind,
            start: self.start,
            len: if self.end == u64::MAX {
                0
            } else {
                self.end - self.start + 1
            },
            owner: self.owner,
            pid: self.pid,
        }
    }

    fn is_flock(&self) -> bool {
        matches!(self.owner, LockOwner::Flock(_))
    }

    fn overlaps(&self, o: &Lock) -> bool {
        self.start <= o.end && o.start <= self.end
    }

    /// Would `self` (held) block request `req`?
    fn conflicts(&self, req: &Lock) -> bool {
        self.is_flock() == req.is_flock()
            && self.owner != req.owner
            && self.overlaps(req)
            && (self.kind == WR || req.kind == WR)
    }
}

/// The first held lock that blocks `req` (the `F_GETLK` answer).
pub fn conflict<'a>(held: &'a [Lock], req: &Lock) -> Option<&'a Lock> {
    if req.kind == UN {
        return None;
    }
    held.iter().find(|l| l.conflicts(req))
}

/// Apply `req` (lock or unlock) for its owner. Caller checked `conflict`.
pub fn apply(held: &mut Vec<Lock>, req: Lock) {
    let mut out = Vec::with_capacity(held.len() + 2);
    for l in held.drain(..) {
        if l.owner != req.owner || !l.overlaps(&req) {
            out.push(l);
            continue;
        }
        if l.start < req.start {
            out.push(Lock {
                end: req.start - 1,
                ..l
            });
        }
        if l.end > req.end {
            out.push(Lock {
                start: req.end + 1,
                ..l
            });
        }
    }
    if req.kind != UN {
        let mut new = req;
        // Merge with the owner's same-kind locks that touch the new range.
        out.retain(|l| {
            let touches = l.owner == new.owner
                && l.kind == new.kind
                && l.start <= new.end.saturating_add(1)
                && new.start <= l.end.saturating_add(1);
            if touches {
                new.start = new.start.min(l.start);
                new.end = new.end.max(l.end);
            }
            !touches
        });
        out.push(new);
    }
    *held = out;
}

/// Give every lock held by `from` to `to` (`Request::PassLocks`).
pub fn pass(held: &mut [Lock], from: LockOwner, to: LockOwner) {
    for l in held.iter_mut().filter(|l| l.owner == from) {
        l.owner = to;
    }
}

/// Drop every lock held by `owner`.
pub fn release(held: &mut Vec<Lock>, owner: LockOwner) {
    held.retain(|l| l.owner != owner);
}

#[cfg(test)]
mod tests {
    use super::*;
    use atoll_proto::DescId;

    fn lk(kind: i16, start: u64, len: u64, p: u64) -> Lock {
        Lock::from_spec(&LockSpec {
            kind,
            start,
            len,
            owner: LockOwner::Process(p),
            pid: 0,
        })
        .unwrap()
    }

    #[test]
    fn unlock_in_the_middle_splits_a_lock() {
        let mut held = vec![];
        apply(&mut held, lk(WR, 0, 100, 1));
        apply(&mut held, lk(UN, 40, 10, 1));
        held.sort_by_key(|l| l.start);
        assert_eq!(held.len(), 2);
        assert_eq!((held[0].start, held[0].end), (0, 39));
        assert_eq!((held[1].start, held[1].end), (50, 99));
    }

    #[test]
    fn adjacent_same_kind_locks_merge_and_conversion_splits() {
        let mut held = vec![];
        apply(&mut held, lk(RD, 0, 10, 1));
        apply(&mut held, lk(RD, 10, 10, 1));
        assert_eq!(held.len(), 1);
        assert_eq!((held[0].start, held[0].end), (0, 19));
        apply(&mut held, lk(WR, 5, 5, 1));
        assert_eq!(held.len(), 3);
    }

    #[test]
    fn conflicts_respect_owner_kind_and_namespace() {
        let mut held = vec![];
        apply(&mut held, lk(RD, 0, 0, 1));
        assert!(conflict(&held, &lk(RD, 5, 1, 2)).is_none());
        assert_eq!(
            conflict(&held, &lk(WR, 5, 1, 2)).unwrap().owner,
            LockOwner::Process(1)
        );
        assert!(conflict(&held, &lk(WR, 5, 1, 1)).is_none());
        let fl = Lock::from_spec(&LockSpec {
            kind: WR,
            start: 0,
            len: 0,
            owner: LockOwner::Flock(DescId(7)),
            pid: 0,
        })
        .unwrap();
        assert!(
            conflict(&held, &fl).is_none(),
            "flock is a separate namespace"
        );
        let ofd = Lock {
            owner: LockOwner::Description(DescId(7)),
            ..lk(WR, 0, 1, 0)
        };
        assert!(
            conflict(&held, &ofd).is_some(),
            "OFD and POSIX locks conflict"
        );
    }

    #[test]
    fn overflowing_range_is_rejected() {
        let r = Lock::from_spec(&LockSpec {
            kind: WR,
            start: i64::MAX as u64,
            len: 2,
            owner: LockOwner::Process(1),
            pid: 0,
        });
        assert_eq!(r, Err(Errno::EOVERFLOW));
    }
}
