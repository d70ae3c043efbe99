//! The bytes of one message on a byte stream.
//!
//! ```text
//!  0  magic  u16 = 0xA70C
//!  2  kind   u8  (0 data, 1 heartbeat)
//!  3  zero   u8
//!  4  length u32 (body bytes, at most MAX_BODY; 0 for a heartbeat)
//!  8  id     u64 (the sender's request id)
//! 16  body
//! ```
//!
//! Little-endian throughout. A header that breaks any of these rules is
//! malformed: the stream cannot be resynchronised, so the link ends.

use crate::Message;

pub const HEADER: usize = 16;
/// Largest body: a batch of atoll frames (each at most 12 KiB) with room.
pub const MAX_BODY: usize = 1 << 20;
const MAGIC: u16 = 0xA70C;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Data,
    Heartbeat,
}

/// A decoded header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub kind: Kind,
    pub len: usize,
    pub id: u64,
}

/// Append `msg` as one data frame to `out`.
pub fn encode(msg: &Message, out: &mut Vec<u8>) {
    encode_header(Kind::Data, msg.body.len(), msg.id, out);
    out.extend_from_slice(&msg.body);
}

/// Append a heartbeat frame to `out`.
pub fn encode_heartbeat(out: &mut Vec<u8>) {
    encode_header(Kind::Heartbeat, 0, 0, out);
}

fn encode_header(kind: Kind, len: usize, id: u64, out: &mut Vec<u8>) {
    out.extend_from_slice(&MAGIC.to_le_bytes());
    out.push(match kind {
        Kind::Data => 0,
        Kind::Heartbeat => 1,
    });
    out.push(0);
    out.extend_from_slice(&(len as u32).to_le_bytes());
    out.extend_from_slice(&id.to_le_bytes());
}

/// Check and decode a header; the error says what was wrong.
pub fn decode_header(h: &[u8; HEADER]) -> Result<Header, String> {
    let magic = u16::from_le_bytes([h[0], h[1]]);
    if magic != MAGIC {
        return Err(format!("bad magic {magic:#06x}"));
    }
    let kind = match (h[2], h[3]) {
        (0, 0) => Kind::Data,
        (1, 0) => Kind::Heartbeat,
        (k, z) => return Err(format!("bad kind {k}/{z}")),
    };
    let len = u32::from_le_bytes([h[4], h[5], h[6], h[7]]) as usize;
    if len > MAX_BODY || (kind == Kind::Heartbeat && len != 0) {
        return Err(format!("bad length {len}"));
    }
    let id = u64::from_le_bytes(h[8..16].try_into().expect("8 bytes"));
    Ok(Header { kind, len, id })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_decodes_to_what_was_encoded() {
        let mut out = Vec::new();
        encode(
            &Message {
                id: 0x0102_0304_0506_0708,
                body: vec![9; 5],
            },
            &mut out,
        );
        assert_eq!(out.len(), HEADER + 5);
        let h = decode_header(out[..HEADER].try_into().unwrap()).unwrap();
        assert_eq!(
            h,
            Header {
                kind: Kind::Data,
                len: 5,
                id: 0x0102_0304_0506_0708
            }
        );
    }

    #[test]
    fn bad_magic_kind_or_length_are_refused() {
        let mut out = Vec::new();
        encode_heartbeat(&mut out);
        let good: [u8; HEADER] = out[..].try_into().unwrap();
        assert!(decode_header(&good).is_ok());
        let mut bad = good;
        bad[0] ^= 1;
        assert!(decode_header(&bad).is_err());
        let mut bad = good;
        bad[2] = 7;
        assert!(decode_header(&bad).is_err());
        let mut bad = good;
        bad[4] = 1; // a heartbeat with a body
        assert!(decode_header(&bad).is_err());
        let mut bad = good;
        bad[2] = 0;
        bad[4..8].copy_from_slice(&((MAX_BODY + 1) as u32).to_le_bytes());
        assert!(decode_header(&bad).is_err());
    }
}
