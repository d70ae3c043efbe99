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
    },
    /// Edge → head: a packet a program sent on boot connection `conn`.
    Boot { conn: ConnId, packet: Vec<u8> },
    /// Head → edge: the instance's answer, with the channels its
    /// descriptors became (server order) and the child connection of a
    /// `Fork`.
    BootReply {
        conn: ConnId,
        packet: Vec<u8>,
        channels: Vec<ChanId>,
        child: Option<ConnId>,
    },
    /// Edge → head: the program side of `conn` closed (exit, kill).
    ConnClosed { conn: ConnId },
    /// Edge → head: a frame from a client's request ring.
    Request { chan: ChanId, frame: Vec<u8> },
    /// Head → edge: a frame from a server's reply ring.
    Reply { chan: ChanId, frame: Vec<u8> },
    /// Head → edge: a server-initiated message (inbox ring).
    Inbox { chan: ChanId, frame: Vec<u8> },
    /// Head → edge: the server dropped inbox messages of `chan`.
    InboxOverflow { chan: ChanId },
    /// Head → edge: the real channel ended (server down, lanes retired).
    ChanClosed { chan: ChanId },
    /// Head → edge: the image stops on purpose (`atoll stop`, a signal to
    /// the first node): the edge ends too, as a stop, not a fault.
    Stopping,
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
}
