//! atoll's wire protocol: every message a client and a file server exchange.
//!
//! Layers (bottom to top):
//! * `atoll-msg` moves opaque frames of bytes through shared-memory rings;
//! * this crate gives those bytes meaning: one typed [`Request`] variant per
//!   operation and one [`Reply`], encoded with `postcard` (compact, no
//!   allocation on encode, zero-copy borrowed names on decode);
//! * `atoll-server` implements the requests, `atoll-client` issues them.
//!
//! The protocol follows Hare's RPC list (Hare Table 4.2) with two changes:
//! path resolution is done by the client one component at a time (names only
//! ever travel as single components of at most [`MAX_NAME`] bytes), and
//! operations that Hare splits into several RPCs are coalesced into one
//! message when one server can do all the work (Hare §3.7.4), e.g. [`Request::Open`]
//! with `O_CREAT` creates the inode, adds the entry and opens a description.
//!
//! Ownership rules, stated once:
//! * an inode (attributes, data blocks, open file descriptions, nlink) lives
//!   on its *owner* server, encoded in its [`InodeId`] and never changing;
//! * the entries of a directory live on its *home* server (also encoded in
//!   the id), or, for a distributed directory, on `hash(dir, name) % N`
//!   ([`entry_server`]);
//! * servers never message each other; a client coordinates every operation
//!   that spans servers (Hare §6.2.3).
//!
//! The bootstrap protocol (how a process obtains its channels) lives in
//! [`boot`].

#![forbid(unsafe_code)]

pub mod boot;
pub mod inotify;
pub mod pipe;
pub mod topology;

mod attrs;
mod ids;
mod reply;
mod request;
mod stats;

pub use attrs::*;
pub use ids::*;
pub use reply::*;
pub use request::*;
pub use stats::*;

use serde::{Deserialize, Serialize};

/// Largest name of one directory entry, as Linux's `NAME_MAX`.
pub const MAX_NAME: usize = 255;
/// Largest symlink target, as Linux's `PATH_MAX - 1`.
pub const MAX_TARGET: usize = 4095;
/// Largest extended-attribute value (one block, as ext4 without ea_inode).
pub const MAX_XATTR_VALUE: usize = 4096;
/// Largest extended-attribute value Linux accepts at all; longer ones are
/// `E2BIG`, those between this and `MAX_XATTR_VALUE` `ENOSPC`.
pub const XATTR_SIZE_MAX: usize = 64 * 1024;
/// Largest encoded frame (request or reply) in bytes, on any channel:
/// the limit of a large channel (`atoll_msg::RingSize::Large`), where file
/// data travels in messages. 33 KiB: a `ReadData`/`WriteData` of [`MAX_DATA_CALL`] bytes with its
/// header (issue 16: the data calls of a copy island and of a program on
/// another host move 32 KiB per round trip, not 8 KiB).
pub const MAX_FRAME: usize = 33 * 1024;
/// Largest payload a client puts in one `ReadData`/`WriteData`: what fits
/// [`MAX_FRAME`] with the request's other fields (at most 1 KiB).
pub const MAX_DATA_CALL: usize = 32 * 1024;
/// Largest frame on a small channel (a coherent or incoherent island's,
/// whose data is in the shared buffer cache and whose messages are small;
/// `atoll_msg::RingSize::Small`), and of any inbox notice. Replies that
/// any channel must carry (a directory listing's chunk) stay within it.
pub const SMALL_FRAME: usize = 12 * 1024;
/// Supplementary group lists a session may register ([`Request::SetGroups`]);
/// the last number is the client's scratch list, sent again before each
/// request that uses it.
pub const MAX_GROUP_SETS: u32 = 256;
/// Size of one buffer-cache block.
pub const BLOCK_SIZE: usize = 4096;
/// Most servers one instance may have (the id encodes a server in 8 bits).
pub const MAX_SERVERS: usize = 64;
/// An `OpenInode` flag of atoll's own (no Linux open flag uses the bit):
/// the `O_PATH` directory description a working directory holds, made by
/// `chdir`, which needs search permission on the directory as Linux's
/// `chdir` does. The check and the reference are one round trip.
pub const OPEN_SEARCH: u32 = 0x4000_0000;

/// Encoding errors: a frame that does not decode is answered with `EPROTO`
/// and never crashes a server.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("frame does not fit in {MAX_FRAME} bytes")]
    TooLarge,
    #[error("malformed frame: {0}")]
    Malformed(postcard::Error),
}

/// Encode into `buf`, returning the used prefix. Allocation-free.
pub fn encode<'b, T: Serialize>(value: &T, buf: &'b mut [u8]) -> Result<&'b mut [u8], WireError> {
    postcard::to_slice(value, buf).map_err(|e| match e {
        postcard::Error::SerializeBufferFull => WireError::TooLarge,
        other => WireError::Malformed(other),
    })
}

/// Decode a frame, borrowing names and data from `bytes`.
pub fn decode<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, WireError> {
    postcard::from_bytes(bytes).map_err(WireError::Malformed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inode_id_fields_round_trip() {
        let id = InodeId::new(5, 9, true, 123_456);
        assert_eq!(
            (id.owner(), id.home(), id.is_distributed(), id.serial()),
            (5, 9, true, 123_456)
        );
        let plain = InodeId::new(0, 0, false, 1);
        assert_eq!(plain, ROOT);
        assert!(!plain.is_distributed());
    }

    #[test]
    fn a_recorded_width_routes_whatever_the_member_count() {
        let d = InodeId::spread(3, 1, 2, 99);
        assert!(d.is_distributed());
        assert_eq!((d.owner(), d.home(), d.width(), d.serial()), (3, 1, 2, 99));
        assert_eq!(InodeId::new(3, 1, true, 99).width(), 0);
        let wide = InodeId::spread(0, 0, InodeId::MAX_WIDTH, 1);
        assert_eq!(wide.width(), InodeId::MAX_WIDTH);
        assert_eq!(wide.serial(), 1);
        // Names of a width-2 directory stay on servers 0 and 1 however
        // many members there are, and both are used.
        let mut seen = std::collections::HashSet::new();
        for i in 0..64 {
            let name = format!("f{i}");
            let at = entry_server(d, name.as_bytes(), 1);
            assert_eq!(at, entry_server(d, name.as_bytes(), 64));
            assert_eq!(at, entry_server_in(d, 2, name.as_bytes()));
            seen.insert(at);
        }
        assert_eq!(seen, [0, 1].into_iter().collect());
        // Without a recorded width the caller's count spreads it.
        let old = InodeId::new(3, 1, true, 99);
        let over: std::collections::HashSet<_> = (0..64)
            .map(|i| entry_server(old, format!("f{i}").as_bytes(), 8))
            .collect();
        assert!(over.len() > 2);
    }

    #[test]
    fn entry_server_uses_home_unless_distributed() {
        let dir = InodeId::new(1, 3, false, 7);
        for name in [&b"a"[..], b"bb", b"ccc"] {
            assert_eq!(entry_server(dir, name, 8), 3);
        }
        let dist = InodeId::new(1, 3, true, 7);
        let servers: std::collections::HashSet<_> = (0..64)
            .map(|i| entry_server(dist, format!("f{i}").as_bytes(), 8))
            .collect();
        assert!(servers.len() > 4, "hash should spread names: {servers:?}");
    }

    #[test]
    fn moved_entries_round_trip_and_adaptive_routing_ignores_the_flag() {
        let mut buf = vec![];
        pack_moved(&mut buf, 7, InodeId(9), FileType::Directory, b"ab");
        pack_moved(&mut buf, 8, InodeId(10), FileType::Regular, b"c");
        assert_eq!(buf.len(), moved_len(b"ab") + moved_len(b"c"));
        let back: Vec<_> = parse_moved(&buf).collect();
        assert_eq!(
            back,
            vec![
                (7, InodeId(9), FileType::Directory, &b"ab"[..]),
                (8, InodeId(10), FileType::Regular, &b"c"[..])
            ]
        );
        assert_eq!(
            parse_moved(&buf[..20]).count(),
            1,
            "a cut record is dropped"
        );
        let dir = InodeId::new(1, 2, false, 7);
        assert_eq!(entry_server_in(dir, 0, b"x"), 2);
        assert_eq!(entry_server_in(dir, 4, b".."), 2);
        let spread: std::collections::HashSet<_> = (0..64)
            .map(|i| entry_server_in(dir, 4, format!("f{i}").as_bytes()))
            .collect();
        assert_eq!(spread.len(), 4);
    }

    #[test]
    fn frames_round_trip_and_garbage_is_rejected() {
        let mut buf = [0u8; MAX_FRAME];
        let frame = RequestFrame {
            id: 42,
            cred: Cred::of(1000, 1000),
            pid: 0,
            req: Request::Lookup {
                dir: ROOT,
                name: b"hello",
            },
            vouched: std::borrow::Cow::Borrowed(&[Vouched {
                ino: ROOT,
                perm: 0o1777,
                uid: 7,
                gid: 8,
                epoch: 0,
                default_acl: false,
                access_acl: false,
                verdict: None,
            }]),
        };
        let bytes = encode(&frame, &mut buf).unwrap().to_vec();
        let back: RequestFrame = decode(&bytes).unwrap();
        assert_eq!(back.id, 42);
        assert_eq!(back.vouched[0].perm, 0o1777);
        match back.req {
            Request::Lookup { dir, name } => {
                assert_eq!(dir, ROOT);
                assert_eq!(name, b"hello");
            }
            other => panic!("wrong variant {other:?}"),
        }
        assert!(decode::<RequestFrame>(&[0xff; 3]).is_err());
        assert!(decode::<RequestFrame>(&bytes[..bytes.len() - 2]).is_err());
    }
}
