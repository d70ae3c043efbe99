//! `read` and `write` with a buffer the program can only partly access.
//!
//! The fast path checks a buffer whole before it copies in place
//! (`sys::user_slice`). Linux instead copies until the first inaccessible
//! page and reports what it moved: a short count, 0 at end of file (the
//! buffer is never touched), `EFAULT` only when nothing moved. When the
//! whole-buffer check fails on a regular file, these routines give that
//! answer through a bounce buffer and the kernel's fault-safe copies. Pipes
//! keep `EFAULT` (a byte taken from the ring cannot be put back). Called
//! from `dispatch`; never on the hot path.

use atoll_proto::FileType;

use crate::error::{err, Result};
use crate::fdtable::DescRef;
use crate::session::{Client, Lane};
use crate::{file, sys, Out};

/// Largest bounce buffer: bigger transfers go in several rounds.
const ROUND: usize = 1 << 20;

/// Only regular files take the careful way; a directory answers `EISDIR`
/// first, as Linux checks the file before the buffer.
fn regular(d: &DescRef, e: i32) -> Result<()> {
    match d.ftype() {
        FileType::Regular if e == libc::EFAULT => Ok(()),
        FileType::Directory => err(libc::EISDIR),
        _ => err(e),
    }
}

/// A read into `[ptr, ptr + len)` after the whole-buffer check answered
/// `e`: what Linux would return, with the shared offset (when `off` is
/// `None`) advanced by what reached the program only.
pub fn read(
    c: &Client,
    lane: &Lane,
    d: &DescRef,
    (ptr, len): (u64, usize),
    off: Option<u64>,
    e: i32,
) -> Result<Out> {
    regular(d, e)?;
    let mut bounce = vec![0u8; len.min(ROUND)];
    let mut total = 0usize;
    while total < len {
        let want = (len - total).min(ROUND);
        let n = file::read_desc(
            c,
            lane,
            d,
            &mut bounce[..want],
            off.map(|o| o + total as u64),
        )?;
        if n == 0 {
            break;
        }
        let k = sys::copy_to_user_prefix(ptr + total as u64, &bounce[..n]);
        total += k;
        if k < n {
            if off.is_none() {
                file::lseek(c, lane, d, -((n - k) as i64), libc::SEEK_CUR as u32)?;
            }
            if total == 0 {
                return err(libc::EFAULT);
            }
            break;
        }
        if n < want {
            break;
        }
    }
    Ok(Out::Done(total as i64))
}

/// A write from `[ptr, ptr + len)` after the whole-buffer check answered
/// `e`: the readable start of the buffer is written, `EFAULT` if none.
pub fn write(
    c: &Client,
    lane: &Lane,
    d: &DescRef,
    (ptr, len): (u64, usize),
    off: Option<u64>,
    e: i32,
) -> Result<Out> {
    regular(d, e)?;
    let mut bounce = vec![0u8; len.min(ROUND)];
    let mut total = 0usize;
    while total < len {
        let want = (len - total).min(ROUND);
        let k = sys::copy_from_user_prefix(&mut bounce[..want], ptr + total as u64);
        if k == 0 {
            break;
        }
        let w = match file::write_desc(c, lane, d, &bounce[..k], off.map(|o| o + total as u64)) {
            Ok(w) => w,
            Err(_) if total > 0 => break,
            Err(e) => return Err(e),
        };
        total += w;
        if w < k || k < want {
            break;
        }
    }
    if total == 0 {
        return err(libc::EFAULT);
    }
    Ok(Out::Done(total as i64))
}
