//! Open file descriptions: offsets (`Seek`), `Close` and record locks.

use super::*;

/// Most descriptors a server keeps in flight (passed over Unix sockets,
/// not yet received: `Request::Receive`).
const MAX_IN_FLIGHT: usize = 4096;

impl<S: BlockStore> FileServer<S> {
    pub(super) fn seek<'o>(
        &mut self,
        session: SessionId,
        desc: DescId,
        offset: i64,
        whence: u32,
    ) -> R<'o> {
        let d = self.desc(session, desc)?;
        if d.flags & libc::O_PATH as u32 != 0 {
            return Err(Errno::EBADF);
        }
        let i = self.inode(d.ino)?;
        let cur = d.offset as i64;
        let new = match whence as i32 {
            libc::SEEK_SET => Some(offset),
            libc::SEEK_CUR => cur.checked_add(offset),
            libc::SEEK_END => (i.size as i64).checked_add(offset),
            libc::SEEK_DATA | libc::SEEK_HOLE => {
                if offset < 0 {
                    return Err(Errno::ENXIO);
                }
                if i.ftype != FileType::Regular {
                    return Err(Errno::EINVAL);
                }
                Some(if whence as i32 == libc::SEEK_DATA {
                    i.seek_data(&self.cache, offset as u64)?
                } else {
                    i.seek_hole(&self.cache, offset as u64)?
                } as i64)
            }
            _ => return Err(Errno::EINVAL),
        };
        let new = match new {
            Some(n) if n >= 0 => n as u64,
            Some(_) => return Err(Errno::EINVAL),
            None => return Err(Errno::EOVERFLOW),
        };
        let ino = d.ino;
        if let Some(d) = self.descs.get_mut(&desc) {
            d.offset = new;
        }
        if whence as i32 == libc::SEEK_END {
            // The next `SEEK_END` of it may need no message (`sizes`).
            self.claim_size_slot(ino);
        }
        Ok(Reply::Offset(new))
    }

    /// Drop one reference of `session`. Closing any descriptor of an inode
    /// releases the process's POSIX locks on it (Linux close semantics).
    /// If the client closes one of several fds of a description it keeps
    /// (no `Close` sent), it must send `SetLock` `F_UNLCK` for the whole
    /// file with owner `Process(session)` itself.
    pub(super) fn close<'o>(&mut self, session: SessionId, desc: DescId) -> R<'o> {
        let d = self.desc_mut(session, desc)?;
        let ino = d.ino;
        if let Some(n) = d.refs.get_mut(&session) {
            *n -= 1;
            if *n == 0 {
                d.refs.remove(&session);
            }
        }
        let dead = d.refs.is_empty();
        if let Some(i) = self.inodes.get_mut(&ino) {
            let before = i.locks.len();
            locks::release(&mut i.locks, LockOwner::Process(session.0));
            self.acct.lock_records -= (before - i.locks.len()) as u64;
        }
        if dead {
            self.release_desc(desc);
        }
        Ok(Reply::Ok)
    }

    pub(super) fn set_lock<'o>(
        &mut self,
        session: SessionId,
        desc: DescId,
        spec: &atoll_proto::LockSpec,
    ) -> R<'o> {
        let d = self.desc(session, desc)?;
        if d.flags & libc::O_PATH as u32 != 0 {
            return Err(Errno::EBADF);
        }
        let req = Lock::from_spec(spec)?;
        match req.owner {
            LockOwner::Description(x) | LockOwner::Flock(x) if x != desc => {
                return Err(Errno::EINVAL)
            }
            LockOwner::Process(_) | LockOwner::Description(_) => {
                if (req.kind == locks::RD && !d.readable())
                    || (req.kind == locks::WR && !d.writable())
                {
                    return Err(Errno::EBADF);
                }
            }
            LockOwner::Flock(_) => {}
        }
        let ino = d.ino;
        let i = self.inode(ino).map_err(|_| Errno::EBADF)?;
        if locks::conflict(&i.locks, &req).is_some() {
            return Err(Errno::EAGAIN);
        }
        // Past the limit of lock records a request that would add some
        // (a new range, or the far end of a lock it splits) is refused
        // with `ENOLCK` and changes nothing; one that does not (an unlock
        // of whole locks, a conversion) always succeeds.
        let i = self.inodes.get_mut(&ino).ok_or(Errno::EBADF)?;
        let before = i.locks.clone();
        locks::apply(&mut i.locks, req);
        let grown = i.locks.len().saturating_sub(before.len()) as u64;
        if grown > 0 && self.admit(limits::LOCKS, grown).is_err() {
            if let Some(i) = self.inodes.get_mut(&ino) {
                i.locks = before;
            }
            return Err(Errno::ENOLCK);
        }
        let after = self.inode(ino).map_or(0, |i| i.locks.len());
        self.acct.lock_records = self.acct.lock_records + after as u64 - before.len() as u64;
        Ok(Reply::Ok)
    }

    /// `F_SETFL`: the status flags Linux lets a program change.
    pub(super) fn set_flags<'o>(&mut self, session: SessionId, desc: DescId, flags: u32) -> R<'o> {
        let d = self.desc_mut(session, desc)?;
        d.flags = (d.flags & !SETFL_MASK) | (flags & SETFL_MASK);
        Ok(Reply::Ok)
    }

    /// Another session references the description (fork, the `execve`
    /// hand-over). `held` is what the sender knows `to` holds before this
    /// one: a retry of a `Share` its server applied before it died (the
    /// successor answered `EIO`, fos §3.5) finds `held + 1` and changes
    /// nothing, so references are never counted twice.
    pub(super) fn share<'o>(
        &mut self,
        session: SessionId,
        desc: DescId,
        to: SessionId,
        held: u32,
    ) -> R<'o> {
        // Descriptors passed over sockets and not yet received are
        // bounded, as Linux bounds a user's (`ETOOMANYREFS`).
        if to.is_in_flight()
            && !self.sessions.contains_key(&to)
            && self.sessions.keys().filter(|s| s.is_in_flight()).count() >= MAX_IN_FLIGHT
        {
            return Err(Errno::ETOOMANYREFS);
        }
        let d = self.desc_mut(session, desc)?;
        let n = d.refs.get(&to).copied().unwrap_or(0);
        if n == held.saturating_add(1) {
            return Ok(Reply::Ok); // applied already
        }
        if n != held {
            return Err(Errno::ESTALE);
        }
        d.refs.insert(to, n + 1);
        self.session_opened(to);
        Ok(Reply::Ok)
    }

    /// `Request::Receive`: a descriptor passed over a Unix socket arrived
    /// in `session`'s process. The reference lent to the in-flight holder
    /// `from` becomes `session`'s, or is dropped if `session` holds the
    /// description already: the kernel's `SCM_RIGHTS` keeps a passed file
    /// open while it is in flight, and the receiver's copy is one more
    /// descriptor of the same description.
    pub(super) fn receive<'o>(
        &mut self,
        session: SessionId,
        desc: DescId,
        from: SessionId,
    ) -> R<'o> {
        if !from.is_in_flight() || session.is_in_flight() {
            return Err(Errno::EINVAL);
        }
        let d = self.descs.get_mut(&desc).ok_or(Errno::EBADF)?;
        let mine = d.refs.get(&session).copied().unwrap_or(0);
        let lent = d.refs.get(&from).copied().unwrap_or(0);
        if lent == 0 {
            // Taken already (a request sent again after a server died).
            return if mine > 0 {
                Ok(Reply::Ok)
            } else {
                Err(Errno::EBADF)
            };
        }
        if lent == 1 {
            d.refs.remove(&from);
        } else {
            d.refs.insert(from, lent - 1);
        }
        if mine == 0 {
            d.refs.insert(session, 1);
            self.session_opened(session);
        }
        // An in-flight holder lends one reference to one description.
        if !self.descs.values().any(|d| d.refs.contains_key(&from)) {
            self.sessions.remove(&from);
        }
        Ok(Reply::Ok)
    }

    /// `F_GETLK`: the first lock that conflicts, if any.
    pub(super) fn get_lock<'o>(
        &self,
        session: SessionId,
        desc: DescId,
        lock: &atoll_proto::LockSpec,
    ) -> R<'o> {
        let d = self.desc(session, desc)?;
        let req = Lock::from_spec(lock)?;
        if req.kind == locks::UN {
            return Err(Errno::EINVAL);
        }
        let i = self.inode(d.ino)?;
        Ok(Reply::Lock(
            locks::conflict(&i.locks, &req).map(|l| l.to_spec()),
        ))
    }

    /// The offset of a description only this session references.
    pub(super) fn reclaim<'o>(&self, session: SessionId, desc: DescId) -> R<'o> {
        let d = self.desc(session, desc)?;
        if d.refs.len() != 1 {
            return Err(Errno::EBUSY);
        }
        Ok(Reply::Offset(d.offset))
    }

    /// Record locks follow a process across `execve` into its new session.
    pub(super) fn pass_locks<'o>(&mut self, session: SessionId, to: SessionId) -> R<'o> {
        let (from, owner) = (LockOwner::Process(session.0), LockOwner::Process(to.0));
        for inode in self.inodes.values_mut() {
            locks::pass(&mut inode.locks, from, owner);
        }
        self.session_opened(to);
        Ok(Reply::Ok)
    }
}
