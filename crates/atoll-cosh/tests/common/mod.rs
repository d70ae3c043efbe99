//! What the cosh tests' forked receivers share.

use atoll_cosh::{Agg, Cosh, Rights};

/// A receiver's checks of a strong share it got: read-only, its writes
/// refused, one range holding `len` bytes of `byte`. The range's address
/// (for the store that must fault), or the exit code naming the check that
/// failed.
pub fn read_only_share_of(c: &mut Cosh, agg: Agg, byte: u8, len: usize) -> Result<*mut u8, i32> {
    if c.rights(agg).ok() != Some(Rights::Ro) || c.write(agg, 0, b"x").is_ok() {
        return Err(4);
    }
    let ranges = c.iter(agg, 0).map_err(|_| 5)?;
    if ranges.len() != 1 || ranges[0].len() != len || ranges[0].iter().any(|&b| b != byte) {
        return Err(6);
    }
    Ok(ranges[0].as_ptr() as *mut u8)
}
