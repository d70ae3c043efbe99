//! Allocation-free decoding of `Reply::Extents` (the reply to every `Read`
//! and `Write`): the hot path of the client must not call `malloc`, since
//! it may run in a signal handler that interrupted `malloc` itself.
//! Generic `postcard` decoding would build a `Vec<Extent>`; this module
//! walks the same bytes and hands each extent to a callback instead.
//!
//! Robust to protocol evolution: the variant index of `Reply::Extents` is
//! not hard-coded but learnt by encoding a sample frame once; a unit test
//! checks the decoder against `postcard` itself.

use std::sync::atomic::{AtomicU32, Ordering};

use atoll_proto::{Extent, Reply, ReplyFrame};

/// `u32::MAX` until learnt.
static EXTENTS_VARIANT: AtomicU32 = AtomicU32::new(u32::MAX);

/// The variant index postcard writes for `Reply::Extents`.
pub fn extents_variant() -> u32 {
    let v = EXTENTS_VARIANT.load(Ordering::Relaxed);
    if v != u32::MAX {
        return v;
    }
    let frame = ReplyFrame {
        id: 0,
        reply: Reply::Extents {
            offset: 0,
            len: 0,
            extents: Vec::new(),
            watched: false,
            pending: false,
        },
    };
    let mut buf = [0u8; 32];
    let v = atoll_proto::encode(&frame, &mut buf)
        .ok()
        .and_then(|b| {
            let mut r = Reader { b, pos: 1 }; // id 0 is one byte
            r.varint().map(|v| v as u32)
        })
        .unwrap_or(u32::MAX - 1);
    EXTENTS_VARIANT.store(v, Ordering::Relaxed);
    v
}

struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    /// LEB128 unsigned varint, as postcard encodes integers.
    fn varint(&mut self) -> Option<u64> {
        let mut v: u64 = 0;
        for i in 0..10 {
            let byte = *self.b.get(self.pos)?;
            self.pos += 1;
            v |= ((byte & 0x7f) as u64) << (7 * i);
            if byte & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }
}

/// What a reply frame turned out to be.
pub enum Decoded {
    /// `Reply::Extents`: the frame's id, `offset` and `len`; every extent
    /// was handed to the callback.
    Extents {
        id: u64,
        offset: u64,
        len: u64,
        /// The written file is watched (`Reply::Extents::watched`).
        watched: bool,
        /// The write extended the file (`Reply::Extents::pending`).
        pending: bool,
    },
    /// The callback refused an extent (e.g. outside the cache).
    Refused {
        id: u64,
    },
    /// Any other reply (typically `Err`): decode it generically.
    Other {
        id: u64,
    },
    Malformed,
}

/// Walk a reply frame; for `Extents`, call `on(offset, len, extent)` for
/// each extent in order.
pub fn decode_extents(bytes: &[u8], mut on: impl FnMut(u64, u64, Extent) -> bool) -> Decoded {
    let mut r = Reader { b: bytes, pos: 0 };
    let Some(id) = r.varint() else {
        return Decoded::Malformed;
    };
    let Some(variant) = r.varint() else {
        return Decoded::Malformed;
    };
    if variant != extents_variant() as u64 {
        return Decoded::Other { id };
    }
    let (Some(offset), Some(len), Some(n)) = (r.varint(), r.varint(), r.varint()) else {
        return Decoded::Malformed;
    };
    for _ in 0..n {
        let (Some(file_offset), Some(elen), Some(block)) = (r.varint(), r.varint(), r.varint())
        else {
            return Decoded::Malformed;
        };
        if block > u32::MAX as u64 {
            return Decoded::Malformed;
        }
        let e = Extent {
            file_offset,
            len: elen,
            block: block as u32,
        };
        if !on(offset, len, e) {
            return Decoded::Refused { id };
        }
    }
    let flag = |at: usize| match r.b.get(at) {
        Some(0) => Some(false),
        Some(1) => Some(true),
        _ => None,
    };
    let (Some(watched), Some(pending)) = (flag(r.pos), flag(r.pos + 1)) else {
        return Decoded::Malformed;
    };
    Decoded::Extents {
        id,
        offset,
        len,
        watched,
        pending,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_postcard_for_extents_and_defers_other_replies() {
        let extents = vec![
            Extent {
                file_offset: 5000,
                len: 3192,
                block: 7,
            },
            Extent {
                file_offset: 8192,
                len: 1 << 20,
                block: u32::MAX,
            },
        ];
        let frame = ReplyFrame {
            id: 300,
            reply: Reply::Extents {
                offset: 5000,
                len: 3192 + (1 << 20),
                extents: extents.clone(),
                watched: true,
                pending: true,
            },
        };
        let mut buf = [0u8; 256];
        let bytes = atoll_proto::encode(&frame, &mut buf).unwrap();
        let mut seen = Vec::new();
        match decode_extents(bytes, |_, _, e| {
            seen.push(e);
            true
        }) {
            Decoded::Extents {
                id,
                offset,
                len,
                watched,
                pending,
            } => {
                assert_eq!((id, offset, len), (300, 5000, 3192 + (1 << 20)));
                assert!(watched && pending);
            }
            _ => panic!("not decoded as extents"),
        }
        assert_eq!(seen, extents);
        let err = ReplyFrame {
            id: 9,
            reply: Reply::Err(atoll_proto::Errno::ENOSPC),
        };
        let mut buf = [0u8; 64];
        let bytes = atoll_proto::encode(&err, &mut buf).unwrap();
        assert!(matches!(
            decode_extents(bytes, |_, _, _| true),
            Decoded::Other { id: 9 }
        ));
        assert!(matches!(
            decode_extents(&bytes[..1], |_, _, _| true),
            Decoded::Malformed
        ));
    }
}
