//! Sessions at a file server: a process's channels arrive (`Admin::NewChannel`),
//! its requests name the process, and its end (socket closed, or a killed
//! child's end asked for by the parent's `wait`, `SessionEnded`) drops
//! every reference, lock and mapping it held, so nothing leaks.

use super::*;

impl<S: BlockStore> FileServer<S> {
    /// A session got a channel to this server.
    pub fn session_opened(&mut self, session: SessionId) {
        self.sessions.entry(session).or_insert_with(|| Session {
            groups: Vec::new(),
            chains: chain::Chains::default(),
            pid: 0,
        });
    }

    /// `session`'s requests come from process `pid`.
    pub(super) fn note_session_pid(&mut self, session: SessionId, pid: u32) {
        if let Some(s) = self.sessions.get_mut(&session) {
            s.pid = pid;
        }
    }

    /// Sessions this server knows.
    pub fn open_sessions(&self) -> Vec<SessionId> {
        self.sessions.keys().copied().collect()
    }

    /// What a session's process reported about itself without a lane, as
    /// it exited (`BootRequest::Counters`, forwarded by the boot thread).
    pub fn client_reported(&mut self, session: SessionId, k: &atoll_proto::ClientCounters) {
        self.client_counters.add(session, k);
    }

    /// The session is gone (process exited or was killed): drop every
    /// reference it held and its POSIX locks, so nothing leaks.
    pub fn session_closed(&mut self, session: SessionId) {
        let pid = self.sessions.remove(&session).map_or(0, |s| s.pid);
        self.set_requester(pid);
        self.client_counters.forget(session);
        self.session_transfers.remove(&session);
        self.abandon_creations(session);
        let held: Vec<DescId> = self
            .descs
            .iter()
            .filter(|(_, d)| d.refs.contains_key(&session))
            .map(|(id, _)| *id)
            .collect();
        for id in held {
            if let Some(d) = self.descs.get_mut(&id) {
                d.refs.remove(&session);
                if d.refs.is_empty() {
                    self.release_desc(id);
                }
            }
        }
        // Its mappings and descriptions may have let blocks go (`leases`).
        self.lease_sync_all();
        self.set_requester(0);
        let owner = LockOwner::Process(session.0);
        for inode in self.inodes.values_mut() {
            if !inode.locks.is_empty() {
                let before = inode.locks.len();
                locks::release(&mut inode.locks, owner);
                self.acct.lock_records -= (before - inode.locks.len()) as u64;
            }
        }
        self.abandon_namespace_ops(session);
        self.adapt.session_closed(session);
        self.drop_mappings(session);
        self.drop_texts(session);
        self.writes.forget_session(session);
        if self.notify.busy() {
            self.notify_tick();
        }
        self.settle();
    }

    /// `SessionEnded`: has this server served the end of `ended`? A
    /// session it holds anything of has a channel here (`sessions`, which
    /// its lanes' requests, locks included, needed) or a reference to a
    /// description (shared with it at its fork, before it had a channel).
    /// Asked only after a child killed by a signal was reaped, so the scan
    /// of the descriptions is off every hot path.
    pub(super) fn session_ended<'o>(&self, ended: SessionId) -> R<'o> {
        let held = self.sessions.contains_key(&ended)
            || self.descs.values().any(|d| d.refs.contains_key(&ended));
        if held {
            return Err(Errno::EAGAIN);
        }
        Ok(Reply::Ok)
    }
}
