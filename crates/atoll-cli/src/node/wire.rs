//! What the proxies of `atoll node` say to each other over a
//! [`atoll_transport::Link`]: one postcard-encoded [`NodeMsg`] per
//! transport message. Boot packets and ring frames travel as the bytes the
//! client and the servers wrote (the proxies never re-encode them), so
//! nothing in a server or a client changes.
//!
//! Request ids (the transport message's `id`): the edge numbers every
//! `Boot` and `Request` it sends; the head answers a `Boot` with a
//! `BootReply` of the same id, and a channel's `Reply` carries the id of
//! the `Request` it follows on that channel (a lane has at most one call
//! outstanding; posted requests get no reply).

use atoll_transport::{Link, Message, TransportError};
use serde::{Deserialize, Serialize};

/// A connection to a boot socket (a session, or one not attached yet),
/// named by whoever opened it: the edge for connections its programs
/// opened, the head (with [`HEAD_CONN`] set) for the child ends of `Fork`.
pub type ConnId = u64;
/// One channel of one lane (client thread × file server), named by the
/// head, which holds the real channel.
pub type ChanId = u64;
/// Bit set in connection ids the head chooses.
pub const HEAD_CONN: u64 = 1 << 63;

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub enum NodeMsg {
    /// Head → edge, first message of a link: the instance's shape.
    Hello {
        servers: u32,
        id: String,
        mount: String,
        /// Members each other node serves (`--servers-here`; 0: every
        /// member is on the first node). Node `k`'s are the `k - 1`th
        /// group of that many after the first node's.
        per_node: u32,
    },
    /// Edge → head: a packet a program sent on boot connection `conn`.
    Boot {
        conn: ConnId,
        #[serde(with = "bytes")]
        packet: Vec<u8>,
    },
    /// Head → edge: the instance's answer, with the channels its
    /// descriptors became (server order) and the child connection of a
    /// `Fork`.
    BootReply {
        conn: ConnId,
        #[serde(with = "bytes")]
        packet: Vec<u8>,
        channels: Vec<ChanId>,
        child: Option<ConnId>,
    },
    /// Edge → head: the program side of `conn` closed (exit, kill).
    ConnClosed { conn: ConnId },
    /// Edge → head: a frame from a client's request ring.
    Request {
        chan: ChanId,
        #[serde(with = "bytes")]
        frame: Vec<u8>,
    },
    /// Head → edge: a frame from a server's reply ring.
    Reply {
        chan: ChanId,
        #[serde(with = "bytes")]
        frame: Vec<u8>,
    },
    /// Head → edge: a server-initiated message (inbox ring).
    Inbox {
        chan: ChanId,
        #[serde(with = "bytes")]
        frame: Vec<u8>,
    },
    /// Head → edge: the server dropped inbox messages of `chan`.
    InboxOverflow { chan: ChanId },
    /// Head → edge: the real channel ended (server down, lanes retired).
    ChanClosed { chan: ChanId },
    /// Head → edge: the image stops on purpose (`atoll stop`, a signal to
    /// the first node): the edge ends too, as a stop, not a fault.
    Stopping,
    /// Proxy → node, first message of a remote-spawn link (`spawn.rs`):
    /// start this program here.
    Spawn(SpawnRequest),
    /// Node → proxy: the program's session is made (`inherit.rs`): give
    /// it a reference to the description of each inherited descriptor.
    Session { id: u64 },
    /// Proxy → node: the descriptors whose description the session now
    /// holds (those the program gets).
    Shared { fds: Vec<i32> },
    /// Node → proxy: the program runs, with this pid on its host.
    Started { pid: i32 },
    /// Node → proxy: the program could not be started (errno).
    SpawnFailed { errno: i32 },
    /// Proxy → node: bytes for the program's stdin; empty: end of input.
    Stdin {
        #[serde(with = "bytes")]
        bytes: Vec<u8>,
    },
    /// Node → proxy: bytes the program wrote on descriptor `fd` (1 or 2).
    Output {
        fd: u8,
        #[serde(with = "bytes")]
        bytes: Vec<u8>,
    },
    /// Proxy → node: a signal sent to the proxy, for the program.
    Signal { sig: i32 },
    /// Node → proxy: the program exited with `code`.
    Exited { code: i32 },
    /// Node → proxy: the program was killed by `sig`.
    Killed { sig: i32 },
    /// Node → proxy: `bytes` of `Stdin` were written to the program (or
    /// dropped: it closed its stdin); the proxy may send as many more
    /// (`window.rs`).
    StdinTaken { bytes: u64 },
    /// Proxy → node: `bytes` of `Output` were written to the proxy's
    /// descriptors; the node may send as many more.
    OutputTaken { bytes: u64 },
    /// Node → proxy: the program stopped, by `sig` (job control: the
    /// proxy stops alike, so its parent sees the job stop).
    Stopped { sig: i32 },
    /// Node → proxy: the program continued.
    Continued,
    // Last, so that the messages before keep their wire form.
    /// Node → head, first message of a link that carries the traffic of
    /// the members node `rank` serves (`members.rs`). On that link the
    /// head sends `MemberChannel`, `Request`, `SessionEnded`,
    /// `RetireLanes` and `MemberStats`; the node answers with `Reply`,
    /// `Inbox`, `InboxOverflow`, `ChanClosed` and `StatsReply`.
    ServeMembers { rank: u32 },
    /// Head → member node: a session's lane got a channel to `member`.
    MemberChannel {
        chan: ChanId,
        member: u32,
        session: u64,
        lane: u32,
    },
    /// Head → member node: a session ended (`member` releases it).
    SessionEnded { member: u32, session: u64 },
    /// Head → member node: the session's lanes below `before` retired.
    RetireLanes {
        member: u32,
        session: u64,
        before: u32,
    },
    /// Head → member node: `member`'s statistics, for `atoll status`.
    MemberStats { member: u32 },
    /// Member node → head: the answer (same transport id).
    StatsReply {
        stats: Option<atoll_proto::ServerStats>,
    },
    /// Edge → head: several frames of one client's request ring, in ring
    /// order ([`pack_frames`]): a read-ahead batch, a program's window of
    /// write pieces. Same meaning as that many `Request`s.
    Requests {
        chan: ChanId,
        #[serde(with = "bytes")]
        frames: Vec<u8>,
    },
    /// Head → edge: several frames of one server's reply ring, in ring
    /// order ([`pack_frames`]). Same meaning as that many `Reply`s.
    Replies {
        chan: ChanId,
        #[serde(with = "bytes")]
        frames: Vec<u8>,
    },
    /// Node → proxy, before `Started`: the secret naming this spawn on a
    /// watch link (`watch.rs`).
    Watchable { token: u64 },
    /// Proxy's watcher → node, first message of a watch link: it reports
    /// the stops of the proxy of spawn `token`.
    Watch { token: u64 },
    /// Watcher → node: the proxy stopped (a SIGSTOP it cannot catch, or
    /// its own stop mirroring the program's).
    ProxyStopped,
    /// Watcher → node: the proxy runs again.
    ProxyContinued,
    /// Node `rank` → another node serving members, first message of a
    /// *direct link* (`peers.rs`): the channels of `rank`'s programs to
    /// that node's members come this way instead of through the first
    /// node. On it `rank` sends `MemberChannel`, `Request` and `Flush`;
    /// the member node answers with `Reply`, `Inbox`, `InboxOverflow`,
    /// `ChanClosed` and `Flushed`.
    ReachMembers { rank: u32 },
    /// Node → member node on a direct link: the session ended at the
    /// sender, whose channels of it to `member` are dropped; the requests
    /// before this on the link are in the member's rings once `Flushed`
    /// (same transport id) comes back.
    Flush { member: u32, session: u64 },
    /// Member node → node: the requests before `Flush` were delivered.
    Flushed,
}

/// Most bytes of frames one `Requests` or `Replies` carries (their
/// length words included): 32 read-ahead replies of 8 KiB, the node's
/// read-ahead window (`copies::AHEAD_BYTES`). Larger messages would save
/// little more per MiB and hold the first reply of a batch back longer.
pub const MAX_BATCH: usize = 256 * 1024 + 32 * (4 + 128);

/// Why packed frames were refused: a peer's message claiming more than
/// the limits is malformed, and nothing is allocated for the claim.
#[derive(Debug, PartialEq, Eq)]
pub enum BatchError {
    TooLarge(usize),
    FrameTooLarge(usize),
    Truncated { claimed: usize, left: usize },
}

impl std::fmt::Display for BatchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BatchError::TooLarge(n) => {
                write!(
                    f,
                    "packed frames of {n} bytes, past the limit of {MAX_BATCH}"
                )
            }
            BatchError::FrameTooLarge(n) => write!(
                f,
                "a packed frame of {n} bytes, past the ring frame limit of {}",
                atoll_proto::MAX_FRAME
            ),
            BatchError::Truncated { claimed, left } => {
                write!(
                    f,
                    "a packed frame claims {claimed} bytes where {left} are left"
                )
            }
        }
    }
}

/// Frames of one channel as one byte string: for each, its length (u32,
/// little-endian) and its bytes. Ring frames are at most
/// `atoll_proto::MAX_FRAME` (33 KiB: a 32 KiB data call, and a server's
/// parked reply); several travel in one message between hosts.
pub fn pack_frames<'a>(frames: impl IntoIterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut out = Vec::new();
    for f in frames {
        out.extend_from_slice(&(f.len() as u32).to_le_bytes());
        out.extend_from_slice(f);
    }
    out
}

/// The frames of a [`pack_frames`] string, checked against the limits
/// before anything is taken: a frame past `MAX_FRAME`, a string past
/// [`MAX_BATCH`], or a length past the end is refused.
pub fn unpack_frames(packed: &[u8]) -> Result<Vec<&[u8]>, BatchError> {
    if packed.len() > MAX_BATCH {
        return Err(BatchError::TooLarge(packed.len()));
    }
    let mut out = Vec::new();
    let mut rest = packed;
    while !rest.is_empty() {
        let Some((len, tail)) = rest.split_first_chunk::<4>() else {
            return Err(BatchError::Truncated {
                claimed: 4,
                left: rest.len(),
            });
        };
        let len = u32::from_le_bytes(*len) as usize;
        if len > atoll_proto::MAX_FRAME {
            return Err(BatchError::FrameTooLarge(len));
        }
        if len > tail.len() {
            return Err(BatchError::Truncated {
                claimed: len,
                left: tail.len(),
            });
        }
        let (frame, tail) = tail.split_at(len);
        out.push(frame);
        rest = tail;
    }
    Ok(out)
}

/// Split `frames` of one channel into packed strings of at most
/// [`MAX_BATCH`] bytes each, in order.
pub fn pack_batches(frames: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut bytes = 0;
    for (i, f) in frames.iter().enumerate() {
        let size = 4 + f.len();
        if i > start && bytes + size > MAX_BATCH {
            out.push(pack_frames(frames[start..i].iter().map(Vec::as_slice)));
            start = i;
            bytes = 0;
        }
        bytes += size;
    }
    if start < frames.len() {
        out.push(pack_frames(frames[start..].iter().map(Vec::as_slice)));
    }
    out
}

/// What `execve` carries to a program started on another node. Host
/// descriptors cannot cross hosts: stdin, stdout and stderr are relayed
/// (`Stdin`, `Output`), any other is closed, as `FD_CLOEXEC` would; atoll
/// descriptors are no host objects and go as such (`fds`); the atoll cwd
/// is a path of the one image.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct SpawnRequest {
    pub path: Vec<u8>,
    pub argv: Vec<Vec<u8>>,
    /// The environment without the variables that tie a process to its
    /// host's instance (socket, session, state, preload).
    pub envp: Vec<Vec<u8>>,
    pub cwd: Vec<u8>,
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
    pub umask: u32,
    /// `(resource, soft, hard)`.
    pub rlimits: Vec<(u32, u64, u64)>,
    /// The caller's inheritable atoll descriptors, stdio included.
    pub fds: Vec<InheritedFd>,
    /// The caller's stdout and stderr are one host open description
    /// (`2>&1`), relayed: the program gets one pipe for both, so the relay
    /// keeps their order.
    pub stderr_is_stdout: bool,
}

/// An atoll descriptor a remote program inherits at its number: what the
/// exec hand-over carries for it (`atoll_client::state::FdState`) but the
/// placeholder, which the node makes (`inherit.rs`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct InheritedFd {
    pub fd: i32,
    /// The server's open description (`DescId`).
    pub desc: u64,
    pub ino: u64,
    /// Open flags (`O_APPEND`, `O_NONBLOCK`, access mode, …).
    pub flags: u32,
    /// `fdtable::ftype_code` of the file type.
    pub ftype: u32,
    /// Directory position (readdir cookie).
    pub cookie: u64,
    /// A directory's path.
    pub path: Option<Vec<u8>>,
}

/// Byte strings (ring frames, boot packets, stdio) as one run of bytes,
/// not a sequence of `u8`: serde's `Vec<u8>` goes element by element,
/// which cost more than the rest of a proxy's work per message. postcard
/// writes both the same way (a length, then the bytes), so the wire is
/// unchanged.
mod bytes {
    use serde::de::{Deserializer, Error, SeqAccess, Visitor};
    use serde::Serializer;

    pub fn serialize<S: Serializer>(b: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(b)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        d.deserialize_byte_buf(ByteBuf)
    }

    struct ByteBuf;

    impl<'de> Visitor<'de> for ByteBuf {
        type Value = Vec<u8>;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("bytes")
        }

        fn visit_bytes<E: Error>(self, v: &[u8]) -> Result<Vec<u8>, E> {
            Ok(v.to_vec())
        }

        fn visit_byte_buf<E: Error>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
            Ok(v)
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u8>, A::Error> {
            let mut v = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 20));
            while let Some(b) = seq.next_element()? {
                v.push(b);
            }
            Ok(v)
        }
    }
}

/// Encode and queue `msg` with request id `id`.
pub fn send(link: &dyn Link, id: u64, msg: &NodeMsg) -> Result<(), TransportError> {
    link.send(message(id, msg))
}

/// `msg` as a transport message with request id `id` (to batch several
/// with [`Link::send_all`]).
pub fn message(id: u64, msg: &NodeMsg) -> Message {
    // Encoding into a Vec cannot fail for these types.
    Message {
        id,
        body: postcard::to_allocvec(msg).unwrap_or_default(),
    }
}

/// Decode a received message; a body that is no `NodeMsg` is malformed.
pub fn decode(m: &Message) -> Result<NodeMsg, TransportError> {
    postcard::from_bytes(&m.body)
        .map_err(|e| TransportError::Malformed("peer".into(), e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_message_round_trips_through_postcard() {
        let all = [
            NodeMsg::Hello {
                servers: 2,
                id: "x".into(),
                mount: "/atoll".into(),
                per_node: 1,
            },
            NodeMsg::ServeMembers { rank: 2 },
            NodeMsg::MemberChannel {
                chan: 3,
                member: 2,
                session: 7,
                lane: 1,
            },
            NodeMsg::SessionEnded {
                member: 2,
                session: 7,
            },
            NodeMsg::RetireLanes {
                member: 2,
                session: 7,
                before: 2,
            },
            NodeMsg::MemberStats { member: 2 },
            NodeMsg::ReachMembers { rank: 2 },
            NodeMsg::Flush {
                member: 2,
                session: 7,
            },
            NodeMsg::Flushed,
            NodeMsg::StatsReply {
                stats: Some(atoll_proto::ServerStats {
                    server: 2,
                    ..Default::default()
                }),
            },
            NodeMsg::Boot {
                conn: 1,
                packet: vec![1, 2],
            },
            NodeMsg::BootReply {
                conn: HEAD_CONN | 3,
                packet: vec![],
                channels: vec![4, 5],
                child: Some(HEAD_CONN),
            },
            NodeMsg::ConnClosed { conn: 9 },
            NodeMsg::Request {
                chan: 1,
                frame: vec![0; 100],
            },
            NodeMsg::Reply {
                chan: 1,
                frame: vec![7],
            },
            NodeMsg::Inbox {
                chan: 2,
                frame: vec![],
            },
            NodeMsg::InboxOverflow { chan: 2 },
            NodeMsg::ChanClosed { chan: 3 },
            NodeMsg::Spawn(SpawnRequest {
                path: b"/bin/cat".to_vec(),
                argv: vec![b"cat".to_vec()],
                rlimits: vec![(7, 1024, 4096)],
                ..Default::default()
            }),
            NodeMsg::Stdin { bytes: vec![1] },
            NodeMsg::Output {
                fd: 2,
                bytes: vec![3],
            },
            NodeMsg::Session { id: 0x2a },
            NodeMsg::Shared { fds: vec![3, 4] },
            NodeMsg::Signal { sig: 15 },
            NodeMsg::Exited { code: 3 },
            NodeMsg::Killed { sig: 9 },
            NodeMsg::StdinTaken { bytes: 5 },
            NodeMsg::OutputTaken { bytes: 6 },
            NodeMsg::Stopped { sig: 20 },
            NodeMsg::Continued,
            NodeMsg::Requests {
                chan: 4,
                frames: pack_frames([&[1u8, 2][..], &[3][..]]),
            },
            NodeMsg::Replies {
                chan: 4,
                frames: pack_frames([&[9u8; 8200][..]]),
            },
            NodeMsg::Watchable { token: u64::MAX },
            NodeMsg::Watch { token: 1 },
            NodeMsg::ProxyStopped,
            NodeMsg::ProxyContinued,
        ];
        for m in all {
            let body = postcard::to_allocvec(&m).unwrap();
            assert_eq!(decode(&Message { id: 0, body }).unwrap(), m);
        }
        assert!(decode(&Message {
            id: 0,
            body: vec![200, 200, 200]
        })
        .is_err());
    }

    /// A frame is written as a length and its bytes, exactly as a `Vec<u8>`
    /// of `u8`s was (nodes of either encoding understand each other).
    #[test]
    fn byte_strings_keep_their_wire_form() {
        #[derive(Serialize)]
        enum Plain {
            _Hello,
            _Boot,
            _BootReply,
            _ConnClosed,
            Request { chan: ChanId, frame: Vec<u8> },
        }
        let frame: Vec<u8> = (0..=255).collect();
        let old = postcard::to_allocvec(&Plain::Request {
            chan: 300,
            frame: frame.clone(),
        })
        .unwrap();
        let new = NodeMsg::Request { chan: 300, frame };
        assert_eq!(postcard::to_allocvec(&new).unwrap(), old);
        assert_eq!(decode(&Message { id: 0, body: old }).unwrap(), new);
    }

    #[test]
    fn packed_frames_come_back_in_order_and_batches_keep_to_the_limit() {
        let frames: Vec<Vec<u8>> = (0..70u8).map(|i| vec![i; 8192 + 64]).collect();
        let batches = pack_batches(&frames);
        assert!(batches.len() >= 3, "{} batches", batches.len());
        let mut back = Vec::new();
        for b in &batches {
            assert!(b.len() <= MAX_BATCH, "{}", b.len());
            back.extend(unpack_frames(b).unwrap().into_iter().map(<[u8]>::to_vec));
        }
        assert_eq!(back, frames);
        assert_eq!(unpack_frames(&[]).unwrap(), Vec::<&[u8]>::new());
        assert_eq!(
            unpack_frames(&pack_frames([&[][..], &[5u8][..]])).unwrap(),
            vec![&[][..], &[5u8][..]]
        );
    }

    #[test]
    fn packed_frames_past_a_limit_are_refused() {
        // A frame larger than a ring carries.
        let big = vec![0u8; atoll_proto::MAX_FRAME + 1];
        assert_eq!(
            unpack_frames(&pack_frames([&big[..]])),
            Err(BatchError::FrameTooLarge(atoll_proto::MAX_FRAME + 1))
        );
        // The largest frame is fine.
        let max = vec![0u8; atoll_proto::MAX_FRAME];
        assert_eq!(unpack_frames(&pack_frames([&max[..]])).unwrap().len(), 1);
        // A length word claiming 4 GiB: refused, nothing allocated for it.
        let mut claim = u32::MAX.to_le_bytes().to_vec();
        claim.extend_from_slice(&[0; 16]);
        assert_eq!(
            unpack_frames(&claim),
            Err(BatchError::FrameTooLarge(u32::MAX as usize))
        );
        // A length past the end, and a cut length word.
        let mut cut = pack_frames([&[1u8; 100][..]]);
        cut.truncate(50);
        assert_eq!(
            unpack_frames(&cut),
            Err(BatchError::Truncated {
                claimed: 100,
                left: 46
            })
        );
        assert!(matches!(
            unpack_frames(&[1, 0]),
            Err(BatchError::Truncated { .. })
        ));
        // A whole string past the batch limit, however well formed.
        let many: Vec<Vec<u8>> = (0..40).map(|_| vec![0u8; 8192]).collect();
        let over = pack_frames(many.iter().map(Vec::as_slice));
        assert!(over.len() > MAX_BATCH);
        assert_eq!(unpack_frames(&over), Err(BatchError::TooLarge(over.len())));
        // Batched, the same frames are accepted.
        assert!(pack_batches(&many).iter().all(|b| unpack_frames(b).is_ok()));
    }
}
