//! Tickets: an aggregate in flight, named inside an ordinary message
//! (Cosh §5, `attach_transfer` / `attach_recv`).
//!
//! A [`Parcel`] is what a transfer produces: a small serialisable
//! [`Ticket`] (mode, strength, length, and the parts in order), the blocks
//! that travel by remapping, and the bytes that travel by copying. Within
//! one process the blocks go as they are; between processes
//! [`send_parcel`] puts the ticket and the blocks' descriptors in one
//! `sendmsg` (`SCM_RIGHTS`) and the copied bytes after it on the same
//! socket, and [`recv_parcel`] takes them back out.
//!
//! Wire format: `u32` little-endian ticket length, the ticket (postcard),
//! then `inline_len` bytes. The descriptors ride on the first bytes.

use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::block::Block;
use crate::pool::PoolRef;
use crate::rights::{Mode, Strength};
use crate::sys;
use crate::CoshError;

mod wire;

/// Where the bytes of one piece of the aggregate are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Part {
    /// `len` bytes at `off` in block number `block` of the parcel, which is
    /// `block_len` long and, if `sealed`, write-sealed.
    Remap {
        block: u16,
        block_len: u64,
        sealed: bool,
        off: u64,
        len: u64,
    },
    /// The next `len` bytes of the parcel's copied data.
    Inline { len: u64 },
}

/// The serialisable name of an aggregate in flight.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ticket {
    pub mode: Mode,
    pub strength: Strength,
    pub len: u64,
    pub parts: Vec<Part>,
    pub inline_len: u64,
}

impl Ticket {
    pub fn encode(&self) -> Vec<u8> {
        postcard::to_stdvec(self).expect("a ticket always encodes")
    }

    pub fn decode(bytes: &[u8]) -> Result<Ticket, CoshError> {
        postcard::from_bytes(bytes).map_err(|_| CoshError::Protocol("malformed ticket"))
    }

    /// The parts agree with each other and with the blocks and bytes that
    /// came with the ticket (a peer is not trusted to be consistent).
    pub(crate) fn check(&self, blocks: usize, inline: usize) -> Result<(), CoshError> {
        const OVERFLOW: CoshError = CoshError::Protocol("a ticket's lengths overflow");
        let mut total = 0u64;
        let mut inl = 0u64;
        for p in &self.parts {
            match *p {
                Part::Remap {
                    block,
                    block_len,
                    off,
                    len,
                    ..
                } => {
                    if block as usize >= blocks
                        || off.checked_add(len).is_none_or(|e| e > block_len)
                    {
                        return Err(CoshError::Protocol("a ticket part is outside its block"));
                    }
                    total = total.checked_add(len).ok_or(OVERFLOW)?;
                }
                Part::Inline { len } => {
                    inl = inl.checked_add(len).ok_or(OVERFLOW)?;
                    total = total.checked_add(len).ok_or(OVERFLOW)?;
                }
            }
        }
        if total != self.len || inl != self.inline_len || inl != inline as u64 {
            return Err(CoshError::Protocol("a ticket's lengths do not add up"));
        }
        Ok(())
    }
}

/// A block travelling in a parcel.
#[derive(Debug)]
pub enum Carried {
    /// Within one process: the block itself.
    Local(Arc<Block>),
    /// Received from another process: its descriptor.
    Fd(OwnedFd),
}

/// An aggregate in flight: ticket, remapped blocks, copied bytes.
#[derive(Debug)]
pub struct Parcel {
    pub ticket: Ticket,
    pub blocks: Vec<Carried>,
    pub inline: Vec<u8>,
    /// Between domains of one pool, the copied bytes are not carried but
    /// written once into a fresh pool block, which travels instead of
    /// `inline` (then empty): [`crate::Cosh::attach_transfer_pooled`].
    pub inline_block: Option<Carried>,
}

/// A parcel between domains of one pool (`crate::pool`), as it travels:
/// the ticket, and the pool blocks by offset — the remapped ones in the
/// ticket's order, and the one holding the copied bytes, unless they are
/// few enough to travel in the message itself (`inline`, at most
/// [`crate::block::Config::pool_inline_max`]). No descriptor travels.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolTicket {
    pub ticket: Ticket,
    pub blocks: Vec<PoolRef>,
    pub inline_block: Option<PoolRef>,
    /// The copied bytes, when no `inline_block` holds them.
    pub inline: Vec<u8>,
}

impl PoolTicket {
    /// The ticket in its fixed wire layout (`wire`).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode_into(&mut out);
        out
    }

    /// [`PoolTicket::encode`] into `out` (cleared first), for a sender
    /// that keeps one buffer.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        wire::encode(self, out)
    }

    pub fn decode(bytes: &[u8]) -> Result<PoolTicket, CoshError> {
        wire::decode(bytes)
    }
}

impl Parcel {
    /// The descriptors of the remapped blocks, in the ticket's order, to
    /// carry with `SCM_RIGHTS` inside a message of the caller's own (Cosh
    /// §5: a ticket names an aggregate inside an ordinary message). Blocks
    /// handed out so stay out of the sender's pool for good.
    ///
    /// Panics on a block of the shared pool, which has no descriptor of its
    /// own ([`Parcel::pooled`] says whether there is one; such parcels
    /// travel with [`crate::Cosh::send_pooled`]).
    pub fn descriptors(&self) -> Vec<BorrowedFd<'_>> {
        self.blocks
            .iter()
            .map(|b| match b {
                Carried::Local(b) => {
                    b.mark_exported();
                    b.fd().expect("a pool block travels by its offset")
                }
                Carried::Fd(fd) => std::os::fd::AsFd::as_fd(fd),
            })
            .collect()
    }

    /// A parcel received inside a message of the caller's own: its ticket,
    /// the descriptors that came with it, and the copied bytes.
    pub fn received(ticket: Ticket, fds: Vec<OwnedFd>, inline: Vec<u8>) -> Parcel {
        Parcel {
            ticket,
            blocks: fds.into_iter().map(Carried::Fd).collect(),
            inline,
            inline_block: None,
        }
    }

    /// Whether any block of the parcel is a range of the shared pool.
    pub fn pooled(&self) -> bool {
        let pool = |c: &Carried| matches!(c, Carried::Local(b) if b.pool_range().is_some());
        self.blocks.iter().any(pool) || self.inline_block.is_some()
    }
}

/// Send `parcel` to the process at the other end of `sock`.
pub fn send_parcel(sock: &UnixStream, parcel: &Parcel) -> Result<(), CoshError> {
    let t = parcel.ticket.encode();
    let mut head = Vec::with_capacity(4 + t.len());
    head.extend_from_slice(&(t.len() as u32).to_le_bytes());
    head.extend_from_slice(&t);
    if parcel.pooled() {
        return Err(CoshError::Protocol(
            "a pool block cannot travel by descriptor",
        ));
    }
    let fds = parcel.descriptors();
    if fds.len() > sys::MAX_FDS {
        return Err(CoshError::Protocol("too many blocks for one message"));
    }
    sys::send_with_fds(sock, &[&head, &parcel.inline], &fds)?;
    Ok(())
}

/// Longest ticket accepted from a peer.
const MAX_TICKET: usize = 64 * 1024;
/// Most copied bytes accepted in one parcel.
const MAX_INLINE: u64 = 1 << 30;

/// Receive one parcel sent with [`send_parcel`].
pub fn recv_parcel(sock: &UnixStream) -> Result<Parcel, CoshError> {
    let mut len = [0u8; 4];
    let mut fds = sys::recv_with_fds(sock, &mut len)?;
    let n = u32::from_le_bytes(len) as usize;
    if n > MAX_TICKET {
        return Err(CoshError::Protocol("ticket too long"));
    }
    let mut t = vec![0u8; n];
    fds.extend(sys::recv_with_fds(sock, &mut t)?);
    let ticket = Ticket::decode(&t)?;
    if ticket.inline_len > MAX_INLINE {
        return Err(CoshError::Protocol("too many copied bytes"));
    }
    let mut inline = vec![0u8; ticket.inline_len as usize];
    sys::read_exact(sock, &mut inline)?;
    Ok(Parcel {
        ticket,
        blocks: fds.into_iter().map(Carried::Fd).collect(),
        inline,
        inline_block: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ticket() -> PoolTicket {
        PoolTicket {
            ticket: Ticket {
                mode: Mode::Move,
                strength: Strength::Strong,
                len: 100,
                parts: vec![
                    Part::Remap {
                        block: 0,
                        block_len: 4096,
                        sealed: false,
                        off: 10,
                        len: 60,
                    },
                    Part::Inline { len: 40 },
                ],
                inline_len: 40,
            },
            blocks: vec![PoolRef {
                off: 1 << 20,
                len: 4096,
            }],
            inline_block: Some(PoolRef {
                off: 2 << 20,
                len: 4096,
            }),
            inline: Vec::new(),
        }
    }

    #[test]
    fn a_pool_ticket_round_trips_and_fits_the_channel() {
        let t = ticket();
        let bytes = t.encode();
        // Head, two parts, a block and the inline block.
        assert_eq!(bytes.len(), 24 + 2 * 32 + 2 * 16);
        assert_eq!(PoolTicket::decode(&bytes).unwrap(), t);
        let mut no_inline = t;
        no_inline.inline_block = None;
        no_inline.ticket.parts.pop();
        no_inline.ticket.inline_len = 0;
        let bytes = no_inline.encode();
        assert_eq!(bytes.len(), 24 + 32 + 16);
        assert_eq!(PoolTicket::decode(&bytes).unwrap(), no_inline);
    }

    #[test]
    fn copied_bytes_travel_after_the_blocks_and_must_be_all_there() {
        let mut t = ticket();
        t.inline_block = None;
        t.inline = (0..40).collect();
        let bytes = t.encode();
        assert_eq!(bytes.len(), 24 + 2 * 32 + 16 + 40);
        assert_eq!(PoolTicket::decode(&bytes).unwrap(), t);
        for n in [bytes.len() - 1, 24 + 2 * 32 + 16] {
            assert!(PoolTicket::decode(&bytes[..n]).is_err(), "cut at {n}");
        }
        let mut longer = bytes.clone();
        longer.push(7);
        assert!(PoolTicket::decode(&longer).is_err(), "a byte too many");
        // A length that would wrap the sum is refused, not trusted.
        let mut huge = bytes;
        huge[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(PoolTicket::decode(&huge).is_err());
    }

    #[test]
    fn a_truncated_or_garbled_pool_ticket_is_an_error() {
        let bytes = ticket().encode();
        for n in 0..bytes.len() {
            assert!(PoolTicket::decode(&bytes[..n]).is_err(), "cut at {n}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(PoolTicket::decode(&longer).is_err(), "a byte too many");
        // No such mode, strength or part; a flag that is not 0 or 1; a
        // pad that is not zero; counts that do not match the length.
        for (at, v) in [
            (0, 0xff),
            (1, 2),
            (24, 2),
            (6, 2),
            (7, 1),
            (24 + 1, 2),
            (24 + 4, 1),
            (24 + 32 + 1, 1),
            (24 + 32 + 16, 1),
            (2, 3),
            (4, 0),
        ] {
            let mut bad = bytes.clone();
            bad[at] = v;
            assert!(PoolTicket::decode(&bad).is_err(), "byte {at} = {v}");
        }
    }

    #[test]
    fn parts_must_agree_with_the_blocks_and_bytes_carried() {
        let t = ticket().ticket;
        t.check(1, 40).unwrap();
        assert!(t.check(0, 40).is_err(), "a part names a block not carried");
        assert!(t.check(1, 39).is_err(), "fewer copied bytes than announced");
        let mut past = t.clone();
        past.parts[0] = Part::Remap {
            block: 0,
            block_len: 4096,
            sealed: false,
            off: 4090,
            len: 60,
        };
        assert!(past.check(1, 40).is_err(), "a part past its block");
        let mut wrap = t;
        wrap.parts[0] = Part::Remap {
            block: 0,
            block_len: 4096,
            sealed: false,
            off: u64::MAX,
            len: 60,
        };
        assert!(wrap.check(1, 40).is_err(), "an overflowing part");
        let huge = Ticket {
            mode: Mode::Copy,
            strength: Strength::Strong,
            len: 1,
            parts: vec![Part::Inline { len: u64::MAX }, Part::Inline { len: 2 }],
            inline_len: 1,
        };
        assert!(huge.check(0, 1).is_err(), "lengths that wrap around");
    }
}
