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
use crate::rights::{Mode, Strength};
use crate::sys;
use crate::CoshError;

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
                    total += len;
                }
                Part::Inline { len } => {
                    inl += len;
                    total += len;
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
}

impl Parcel {
    /// The descriptors of the remapped blocks, in the ticket's order, to
    /// carry with `SCM_RIGHTS` inside a message of the caller's own (Cosh
    /// §5: a ticket names an aggregate inside an ordinary message). Blocks
    /// handed out so stay out of the sender's pool for good.
    pub fn descriptors(&self) -> Vec<BorrowedFd<'_>> {
        self.blocks
            .iter()
            .map(|b| match b {
                Carried::Local(b) => {
                    b.mark_exported();
                    b.fd()
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
        }
    }
}

/// Send `parcel` to the process at the other end of `sock`.
pub fn send_parcel(sock: &UnixStream, parcel: &Parcel) -> Result<(), CoshError> {
    let t = parcel.ticket.encode();
    let mut head = Vec::with_capacity(4 + t.len());
    head.extend_from_slice(&(t.len() as u32).to_le_bytes());
    head.extend_from_slice(&t);
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
    })
}
