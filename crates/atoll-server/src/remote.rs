//! Members of the fleet served on another machine (fos §3.2, §4.2).
//!
//! An instance that spans hosts (`atoll node --servers-here`) has members
//! whose server runs on another node. To the boot thread such a member is
//! a [`RemoteMember`]: the proxy that stands for it takes the channels
//! and the internal messages a local server would (`ServerLink::Remote`),
//! so that nothing in the boot thread, in a client or in a server changes
//! when a member is remote. On the node that serves it, the member is a
//! [`LoneMember`]: an ordinary server thread with a buffer cache, block
//! pool and control block of that host's memory, told of channels and
//! sessions by the proxy there as the boot thread tells its servers.
//!
//! What a lone member shares with the rest of the fleet is what ids and
//! messages carry, never memory: its index is written into every inode it
//! makes (`InodeId`'s owner byte), sessions are the first node's ids, and
//! the member count (the width of distributed directories, the placement
//! hash) is the instance's.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::mpsc::{self, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;

use atoll_msg::{Control, ServerChannel};
use atoll_proto::boot::PollMode;
use atoll_proto::{Cred, ServerStats, SessionId, BLOCK_SIZE};

use crate::server::{Admin, ServerParams};
use crate::{fs, health, server, FsConfig};

/// A member served on another node, as the boot thread reaches it.
pub trait RemoteMember: Send + Sync {
    /// A session's lane got its channel to this member. The member is
    /// unreachable: close it, so its client fails with `EIO` at once.
    fn add_channel(&self, session: SessionId, lane: u32, channel: Arc<ServerChannel>);
    /// An internal message (`SessionClosed`, `RetireLanes`, `Stats`, …);
    /// one the member cannot take is dropped, which answers a question
    /// with nothing (its sender goes).
    fn post(&self, msg: Admin);
    /// Whether its node is reachable now (`atoll status` reports the
    /// member down otherwise).
    fn reachable(&self) -> bool;
}

/// A member served here for an instance booted on another node: one
/// server thread and the shared memory it serves from, all of this
/// host's.
pub struct LoneMember {
    pub index: usize,
    /// The doorbells and published words of this host's copy of the
    /// control block: the member's own doorbell is `doorbell(index)`.
    pub control: Control,
    tx: Sender<Admin>,
    thread: Option<JoinHandle<std::io::Result<ServerStats>>>,
}

impl LoneMember {
    /// Start member `index` of `members`, with `memory` bytes of buffer
    /// cache of its own. It keeps no journal: a node that dies takes its
    /// member's files with it (docs/ARCHITECTURE.md, "Across hosts").
    ///
    /// `control`: the control block the node's programs ring doorbells
    /// in (its edge's), so that a program of this node reaches the member
    /// without a proxy; `None`: one of its own.
    pub fn start(
        index: usize,
        members: usize,
        memory: u64,
        poll: PollMode,
        control: Option<BorrowedFd<'_>>,
    ) -> std::io::Result<LoneMember> {
        if index >= members || members > atoll_proto::MAX_SERVERS {
            return Err(std::io::Error::other(format!(
                "member {index} of {members} is out of range"
            )));
        }
        let blocks = (memory / BLOCK_SIZE as u64).clamp(1, u32::MAX as u64 - 1);
        let cache_bytes = blocks * BLOCK_SIZE as u64;
        let (cache_fd, region) =
            atoll_msg::SharedRegion::create("atoll-cache", cache_bytes as usize)?;
        drop(region);
        let (control_fd, control) = match control {
            Some(fd) => (fd.try_clone_to_owned()?, Control::map(fd)?),
            None => Control::create_with_room(members, members)?,
        };
        let limits = fs::Limits::for_memory(cache_bytes).for_servers(members);
        limits.install(&control);
        // The pool's records name every member; only this one claims.
        let (_pool_fd, pool) =
            atoll_msg::BlockPool::create_with_room(0, blocks as u32, members, members)?;
        let cores = vec![None; members];
        let owner = Cred::of(
            rustix::process::geteuid().as_raw(),
            rustix::process::getegid().as_raw(),
        );
        let params = ServerParams {
            fs: FsConfig {
                index,
                nservers: members,
                first_block: 0,
                nblocks: blocks as u32,
                root_owner: owner,
                core: -1,
                track_lookups: true,
                track_absent: true,
                limits,
            },
            poll,
            pin: None,
            cache_fd,
            control_fd: dup(&control_fd)?,
            pool: Arc::new(pool),
            trace: None,
            adaptive: false,
            health: Arc::new(health::Health::new(&cores, members)),
            journal: None,
            process: false,
            resume: false,
            adopted: Vec::new(),
            ended: Vec::new(),
        };
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name(format!("atoll-fs{index}"))
            .spawn(move || server::run(params, server::Inbox::Thread(rx)))?;
        Ok(LoneMember {
            index,
            control,
            tx,
            thread: Some(thread),
        })
    }

    /// Give the member a channel of `session`'s lane `lane`.
    pub fn add_channel(&self, session: SessionId, lane: u32, channel: Arc<ServerChannel>) {
        self.post(Admin::NewChannel {
            session,
            lane,
            channel,
        });
    }

    /// Post an internal message and ring the member's doorbell.
    pub fn post(&self, msg: Admin) {
        if let Err(mpsc::SendError(Admin::NewChannel { channel, .. })) = self.tx.send(msg) {
            channel.close();
        }
        self.control.doorbell(self.index).ring();
    }

    /// The member's statistics (`None`: it did not answer in time).
    pub fn stats(&self) -> Option<ServerStats> {
        let (tx, rx) = mpsc::channel();
        self.post(Admin::Stats(tx));
        rx.recv_timeout(std::time::Duration::from_secs(2)).ok()
    }
}

impl Drop for LoneMember {
    fn drop(&mut self) {
        self.post(Admin::Shutdown);
        if let Some(h) = self.thread.take() {
            let _ = h.join();
        }
    }
}

fn dup(fd: &OwnedFd) -> std::io::Result<OwnedFd> {
    fd.as_fd().try_clone_to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use atoll_msg::ClientChannel;
    use atoll_proto::{Reply, ReplyFrame, Request, RequestFrame};

    /// One call on `chan` to the member: the id of the reply's frame.
    fn call(m: &LoneMember, chan: &ClientChannel, control: &Control, id: u64) -> Reply<'static> {
        let frame = RequestFrame {
            id,
            cred: Cred::default(),
            pid: 0,
            req: Request::SetGroups {
                set: 0,
                groups: vec![],
            },
            vouched: std::borrow::Cow::Borrowed(&[]),
        };
        let mut buf = vec![0u8; 1024];
        let bytes = atoll_proto::encode(&frame, &mut buf).unwrap();
        chan.send(bytes, control.doorbell(m.index)).unwrap();
        chan.recv(PollMode::Adaptive, |b| {
            let f = atoll_proto::decode::<ReplyFrame<'_>>(b).unwrap();
            assert_eq!(f.id, id);
            match f.reply {
                Reply::Ok => Reply::Ok,
                other => panic!("{other:?}"),
            }
        })
        .unwrap()
    }

    #[test]
    fn a_lone_member_serves_as_its_index_in_the_doorbells_it_is_given() {
        // The control block of a node's programs (its edge's), which the
        // member shares: a program rings doorbell 2 there.
        let (fd, programs) = Control::create(4).unwrap();
        let m = LoneMember::start(2, 4, 1 << 20, PollMode::Adaptive, Some(fd.as_fd())).unwrap();
        let (chan_fd, sc) = ServerChannel::create(atoll_msg::RingSize::Large).unwrap();
        let chan = ClientChannel::map(chan_fd.as_fd()).unwrap();
        m.add_channel(SessionId(7), 0, Arc::new(sc));
        for id in 1..=3 {
            assert!(matches!(call(&m, &chan, &programs, id), Reply::Ok));
        }
        let st = m.stats().expect("the member answers");
        assert_eq!(st.server, 2);
        assert!(st.requests >= 3, "{st:?}");
        // It serves no root: server 0, on the first node, holds it.
        assert_eq!(st.inodes, 0, "{st:?}");
    }

    #[test]
    fn a_member_out_of_the_fleet_is_refused() {
        assert!(LoneMember::start(4, 4, 1 << 20, PollMode::Adaptive, None).is_err());
    }
}
