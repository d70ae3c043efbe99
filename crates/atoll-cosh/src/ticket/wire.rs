//! The fixed layout of a [`PoolTicket`] on the wire: every field at a
//! width known in advance, little-endian, no varints and no serde, so a
//! hop's ticket costs a few stores and loads instead of a general codec
//! (postcard took ~900 cycles per encode + decode of a one-block ticket,
//! an eighth of a 4 KiB move).
//!
//! ```text
//!   u8  mode (0 move, 1 share, 2 copy)   u8  strength (0 strong, 1 weak)
//!   u16 parts   u16 blocks   u8 has inline block   u8 0
//!   u64 len     u64 inline_len
//!   parts:  u8 0 (remap), u8 sealed, u16 block, u64 block_len, u64 off, u64 len
//!        or u8 1 (inline), 7 × u8 0,          u64 len, 16 × u8 0
//!   blocks: u64 off, u64 len            (then the inline block, if any)
//!   the copied bytes, inline_len of them, when there is no inline block
//! ```
//!
//! Decoding trusts nothing: the counts must account for every byte, and
//! an unknown tag or a non-zero pad is an error. Whether the parts agree
//! with each other is `Ticket::check`'s business, as for any ticket.

use super::{Part, PoolTicket, Ticket};
use crate::pool::PoolRef;
use crate::rights::{Mode, Strength};
use crate::CoshError;

const HEAD: usize = 24;
const PART: usize = 32;
const BLOCK: usize = 16;

const MALFORMED: CoshError = CoshError::Protocol("malformed ticket");

pub(super) fn encode(t: &PoolTicket, out: &mut Vec<u8>) {
    let k = &t.ticket;
    out.clear();
    let blocks = t.blocks.len() + usize::from(t.inline_block.is_some());
    debug_assert!(
        t.inline.len() as u64
            == if t.inline_block.is_some() {
                0
            } else {
                k.inline_len
            },
        "the copied bytes travel in the message or in the inline block"
    );
    out.reserve(HEAD + k.parts.len() * PART + blocks * BLOCK + t.inline.len());
    out.push(match k.mode {
        Mode::Move => 0,
        Mode::Share => 1,
        Mode::Copy => 2,
    });
    out.push(match k.strength {
        Strength::Strong => 0,
        Strength::Weak => 1,
    });
    let count = |n: usize| u16::try_from(n).expect("a ticket of at most 65,535 parts");
    out.extend_from_slice(&count(k.parts.len()).to_le_bytes());
    out.extend_from_slice(&count(t.blocks.len()).to_le_bytes());
    out.extend_from_slice(&[u8::from(t.inline_block.is_some()), 0]);
    out.extend_from_slice(&k.len.to_le_bytes());
    out.extend_from_slice(&k.inline_len.to_le_bytes());
    for p in &k.parts {
        match *p {
            Part::Remap {
                block,
                block_len,
                sealed,
                off,
                len,
            } => {
                out.extend_from_slice(&[0, u8::from(sealed)]);
                out.extend_from_slice(&block.to_le_bytes());
                out.extend_from_slice(&[0; 4]);
                for w in [block_len, off, len] {
                    out.extend_from_slice(&w.to_le_bytes());
                }
            }
            Part::Inline { len } => {
                out.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0]);
                out.extend_from_slice(&len.to_le_bytes());
                out.extend_from_slice(&[0; 16]);
            }
        }
    }
    for r in t.blocks.iter().chain(&t.inline_block) {
        out.extend_from_slice(&r.off.to_le_bytes());
        out.extend_from_slice(&r.len.to_le_bytes());
    }
    out.extend_from_slice(&t.inline);
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("eight bytes"))
}

pub(super) fn decode(b: &[u8]) -> Result<PoolTicket, CoshError> {
    if b.len() < HEAD || b[7] != 0 {
        return Err(MALFORMED);
    }
    let mode = match b[0] {
        0 => Mode::Move,
        1 => Mode::Share,
        2 => Mode::Copy,
        _ => return Err(MALFORMED),
    };
    let strength = match b[1] {
        0 => Strength::Strong,
        1 => Strength::Weak,
        _ => return Err(MALFORMED),
    };
    let (parts, blocks) = (u16_at(b, 2) as usize, u16_at(b, 4) as usize);
    let has_inline_block = match b[6] {
        0 => false,
        1 => true,
        _ => return Err(MALFORMED),
    };
    let all_blocks = blocks + usize::from(has_inline_block);
    let fixed = HEAD + parts * PART + all_blocks * BLOCK;
    let inline_len = u64_at(b, 16);
    let carried = if has_inline_block { 0 } else { inline_len };
    if b.len() < fixed || (b.len() - fixed) as u64 != carried {
        return Err(MALFORMED);
    }
    let mut ticket = Ticket {
        mode,
        strength,
        len: u64_at(b, 8),
        parts: Vec::with_capacity(parts),
        inline_len,
    };
    for p in b[HEAD..HEAD + parts * PART].chunks_exact(PART) {
        ticket.parts.push(match p[0] {
            0 if p[1] <= 1 && p[4..8] == [0; 4] => Part::Remap {
                block: u16_at(p, 2),
                sealed: p[1] == 1,
                block_len: u64_at(p, 8),
                off: u64_at(p, 16),
                len: u64_at(p, 24),
            },
            1 if p[1..8] == [0; 7] && p[16..32] == [0; 16] => Part::Inline { len: u64_at(p, 8) },
            _ => return Err(MALFORMED),
        });
    }
    let mut refs = b[HEAD + parts * PART..fixed]
        .chunks_exact(BLOCK)
        .map(|r| PoolRef {
            off: u64_at(r, 0),
            len: u64_at(r, 8),
        });
    let blocks: Vec<PoolRef> = refs.by_ref().take(blocks).collect();
    let inline_block = refs.next();
    Ok(PoolTicket {
        ticket,
        blocks,
        inline_block,
        inline: b[fixed..].to_vec(),
    })
}
