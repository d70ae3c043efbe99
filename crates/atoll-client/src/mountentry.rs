//! The mount's own entry in a listing of the directory it appears in.
//!
//! On Linux a mount point is a directory of its parent, so `ls /` shows
//! `atoll`, and `find /`, `du /` and a shell's `*` reach it. atoll's mount
//! is no kernel mount: the host directory it appears in (`/` for
//! `/atoll`) has no such entry, and the kernel's listing of it ends
//! without one. So when the kernel ends a listing (`getdents64` or
//! `getdents` returns 0) of a host directory that is the mount's parent,
//! the client adds one record for the mount (its root's inode number, as
//! `stat` gives it, `DT_DIR`) and ends the listing at the next call. The
//! record's `d_off` is where the kernel's listing ended, so a `seekdir`
//! to it finds the end, as after a last entry on Linux.
//!
//! Which listings already got the record: one bit per descriptor number,
//! set when the record is given and cleared by any call that returns
//! entries (a listing read again from its start, after `rewinddir`, or a
//! new directory under a reused number), so no `lseek` or `close` needs
//! watching. Cheap when unused: a kernel call that returns entries costs
//! a bit clear; the end of a listing, one `fstat`.

use core::sync::atomic::{AtomicU64, Ordering};

use crate::session::Client;
use crate::sys;

// Descriptor numbers tracked: a higher one never gets the record.
use crate::procfd::TRACKED;

/// Listings that ended with the mount's record since their last entries.
static GIVEN: [AtomicU64; TRACKED / 64] = [const { AtomicU64::new(0) }; TRACKED / 64];

/// `d_type` of a directory.
const DT_DIR: u8 = 4;

/// `getdents64`/`getdents` (`nr`) of host descriptor `a[0]`: the kernel's
/// records, and at the end of a listing of the mount's parent, the
/// mount's. Raw result convention.
pub fn getdents(c: &Client, nr: i64, a: &[u64; 6]) -> i64 {
    // SAFETY: the program's call with its own buffer; the kernel
    // validates it.
    let n = unsafe { sys::syscall6(nr, *a) };
    let Some((word, bit)) = slot(a[0] as i32 as i64) else {
        return n;
    };
    if n != 0 {
        if n > 0 {
            word.fetch_and(!bit, Ordering::Relaxed);
        }
        return n;
    }
    if word.load(Ordering::Relaxed) & bit != 0 || !lists_mount_parent(c, a[0] as i32) {
        return 0;
    }
    let fd = a[0] as i32 as i64;
    // SAFETY: `lseek` of the program's descriptor by 0 from where it is:
    // reads its position without moving it.
    let end = unsafe { sys::sc(libc::SYS_lseek, fd as u64, 0, libc::SEEK_CUR as u64, 0) };
    let record = record(mount_name(c), nr == libc::SYS_getdents64, end.max(0) as u64);
    if record.len() > a[2] as usize {
        // Linux: a buffer too small for the next record.
        return -(libc::EINVAL as i64);
    }
    if sys::copy_to_user(a[1], &record).is_err() {
        return -(libc::EFAULT as i64);
    }
    word.fetch_or(bit, Ordering::Relaxed);
    record.len() as i64
}

fn slot(fd: i64) -> Option<(&'static AtomicU64, u64)> {
    crate::procfd::fd_bit(&GIVEN, fd)
}

/// Is host descriptor `fd` a directory that is the mount's parent?
fn lists_mount_parent(c: &Client, fd: i32) -> bool {
    let mut st: libc::stat = sys::zeroed();
    // SAFETY: the program's descriptor, a local stat buffer.
    let r = unsafe {
        sys::sc(
            libc::SYS_fstat,
            fd as u64,
            &mut st as *mut libc::stat as u64,
            0,
            0,
        )
    };
    r == 0
        && st.st_mode & libc::S_IFMT == libc::S_IFDIR
        && crate::walk::is_mount_parent_dir(c, (st.st_dev, st.st_ino))
}

/// The record of the mount's directory entry `name`: `getdents64`'s
/// `linux_dirent64` (`is64`) or `getdents`'s `linux_dirent` (type in the
/// last byte), with the root's inode number and `off` as its `d_off`,
/// padded to 8 bytes as the kernel pads.
fn record(name: &[u8], is64: bool, off: u64) -> Vec<u8> {
    let name_at = if is64 { 19 } else { 18 };
    // The name, its NUL, and for `getdents` the type byte after it.
    let len = (name_at + name.len() + 1 + usize::from(!is64)).next_multiple_of(8);
    let mut rec = vec![0u8; len];
    rec[..8].copy_from_slice(&atoll_proto::ROOT.0.to_ne_bytes());
    rec[8..16].copy_from_slice(&off.to_ne_bytes());
    rec[16..18].copy_from_slice(&(len as u16).to_ne_bytes());
    if is64 {
        rec[18] = DT_DIR;
    } else {
        rec[len - 1] = DT_DIR;
    }
    rec[name_at..name_at + name.len()].copy_from_slice(name);
    rec
}

/// The mount's name in its parent (`atoll` for `/atoll`).
fn mount_name(c: &Client) -> &[u8] {
    c.mount.rsplit(|&b| b == b'/').next().unwrap_or(&[])
}

#[cfg(test)]
mod tests {
    use super::record;

    /// `(ino, off, reclen, type, name)` of one record, read as a program
    /// reads it.
    fn parse(rec: &[u8], is64: bool) -> (u64, u64, usize, u8, Vec<u8>) {
        let ino = u64::from_ne_bytes(rec[..8].try_into().unwrap());
        let off = u64::from_ne_bytes(rec[8..16].try_into().unwrap());
        let reclen = u16::from_ne_bytes([rec[16], rec[17]]) as usize;
        let (name_at, kind) = if is64 {
            (19, rec[18])
        } else {
            (18, rec[reclen - 1])
        };
        let name = &rec[name_at..];
        let end = name.iter().position(|&b| b == 0).unwrap();
        (ino, off, reclen, kind, name[..end].to_vec())
    }

    #[test]
    fn a_record_reads_back_as_the_mount_directory_in_both_layouts() {
        for is64 in [true, false] {
            for name in [&b"a"[..], b"atoll", b"abcd", b"abcde", b"a-long-mount-name"] {
                let rec = record(name, is64, 77);
                assert_eq!(rec.len() % 8, 0, "{name:?}");
                let (ino, off, reclen, kind, got) = parse(&rec, is64);
                assert_eq!(
                    (ino, off, reclen, kind),
                    (atoll_proto::ROOT.0, 77, rec.len(), 4)
                );
                assert_eq!(got, name);
            }
        }
    }
}
