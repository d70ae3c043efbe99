//! `/proc/self/fd` as the program should see it.
//!
//! atoll keeps a few descriptors of its own in every process (the session
//! socket, the placeholder template, the buffer cache, the control block; `Client::
//! is_private_fd`). They are the library's, not the program's: a program
//! that lists its descriptors through `/proc/self/fd` (closing them all
//! before an exec, or checking which were inherited, as CPython's
//! `subprocess` tests do) must not find them. So a directory descriptor
//! opened on the process's own fd directory is remembered, and
//! `getdents`/`getdents64` on it drop those entries from what the kernel
//! returned. Cheap when unused: one bit per descriptor number.

use core::sync::atomic::{AtomicI32, AtomicU64, Ordering};

use crate::session::Client;
use crate::sys;

/// Descriptor numbers tracked (higher ones are simply not filtered).
pub(crate) const TRACKED: usize = 1024;

static LISTINGS: [AtomicU64; TRACKED / 64] = [const { AtomicU64::new(0) }; TRACKED / 64];
/// Listings of *another* atoll process's fd directory, and that process's
/// own descriptors (as its published table says, `fdpub`) to leave out.
static OTHERS: [AtomicU64; TRACKED / 64] = [const { AtomicU64::new(0) }; TRACKED / 64];
/// Each number stored plus one (0: none), so that the table starts all
/// zero and lies with the other big zero tables after `.bss`
/// (`fdtable::DESCS` says why): with -1 for none it was 32 KiB of `.data`
/// between the few statics the loader relocates.
#[cfg_attr(target_os = "linux", link_section = ".bss.atoll_tables")]
static OTHERS_PRIVATE: [[AtomicI32; crate::fdpub::PRIVATE_MAX]; TRACKED] =
    [const { [const { AtomicI32::new(0) }; crate::fdpub::PRIVATE_MAX] }; TRACKED];

/// Does `path` name this process's own fd directory?
pub fn names_fd_dir(path: &[u8]) -> bool {
    let p = path.strip_suffix(b"/").unwrap_or(path);
    p == b"/dev/fd" || crate::path::proc_self_entry(p) == Some(b"fd")
}

/// `/proc/PID/fd` of another process: its pid.
pub fn other_fd_dir(path: &[u8]) -> Option<u32> {
    let p = path.strip_suffix(b"/").unwrap_or(path);
    let pid = p.strip_prefix(b"/proc/")?.strip_suffix(b"/fd")?;
    if pid.is_empty() || !pid.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let pid: u32 = core::str::from_utf8(pid).ok()?.parse().ok()?;
    (pid != std::process::id()).then_some(pid)
}

/// `fd` lists another process's fd directory, whose own descriptors
/// are `private`.
pub fn mark_other(fd: i64, private: &[i32]) {
    let Some((w, b)) = slot(fd) else { return };
    let n = fd as usize;
    for (i, cell) in OTHERS_PRIVATE[n].iter().enumerate() {
        cell.store(private.get(i).map_or(0, |&f| f + 1), Ordering::Relaxed);
    }
    OTHERS[n / 64].fetch_or(b, Ordering::Relaxed);
    w.fetch_or(b, Ordering::Release);
}

fn slot(fd: i64) -> Option<(&'static AtomicU64, u64)> {
    fd_bit(&LISTINGS, fd)
}

/// Descriptor `fd`'s word and bit in a table of one bit per descriptor
/// number below [`TRACKED`] (also `mountentry`'s); `None` above.
pub(crate) fn fd_bit(
    table: &'static [AtomicU64; TRACKED / 64],
    fd: i64,
) -> Option<(&'static AtomicU64, u64)> {
    let fd = usize::try_from(fd).ok().filter(|&f| f < TRACKED)?;
    Some((&table[fd / 64], 1u64 << (fd % 64)))
}

/// Is `fd` a listing of our own fd directory?
#[inline]
pub fn is_listing(fd: i64) -> bool {
    slot(fd).is_some_and(|(w, b)| w.load(Ordering::Relaxed) & b != 0)
}

/// `fd` now lists our fd directory (`true`) or is something else.
pub fn mark(fd: i64, listing: bool) {
    if let Some((w, b)) = slot(fd) {
        OTHERS[fd as usize / 64].fetch_and(!b, Ordering::Relaxed);
        if listing {
            w.fetch_or(b, Ordering::Relaxed);
        } else {
            w.fetch_and(!b, Ordering::Relaxed);
        }
    }
}

/// `getdents64`/`getdents` on a listing: the kernel's entries without
/// atoll's own descriptors. Raw result convention.
pub fn getdents(c: &Client, nr: i64, a: &[u64; 6]) -> i64 {
    loop {
        // SAFETY: the program's call with its own buffer; the kernel
        // validates it.
        let n = unsafe { sys::syscall6(nr, *a) };
        if n <= 0 {
            return n;
        }
        let Ok(buf) = sys::user_slice_mut(a[1], n as usize) else {
            return n;
        };
        let fd = a[0] as i32 as i64;
        let other = slot(fd).and_then(|(_, b)| {
            (OTHERS[fd as usize / 64].load(Ordering::Relaxed) & b != 0).then(|| {
                OTHERS_PRIVATE[fd as usize]
                    .each_ref()
                    .map(|x| x.load(Ordering::Relaxed) - 1)
            })
        });
        let private = |n: i32| match &other {
            Some(list) => n >= 0 && list.contains(&n),
            None => c.is_private_fd(n),
        };
        let kept = drop_private(buf, nr == libc::SYS_getdents64, private);
        if kept > 0 {
            return kept as i64;
        }
        // Every entry of this batch was ours: read on, never report an
        // early end of the directory.
    }
}

/// Compact the records of `buf` in place, dropping those whose name is
/// one of atoll's descriptors (`private`). Returns the bytes kept.
fn drop_private(buf: &mut [u8], is64: bool, private: impl Fn(i32) -> bool) -> usize {
    // getdents64: ino u64, off i64, reclen u16, type u8, name.
    // getdents:   ino u64, off u64, reclen u16, name, …, type (last byte).
    let name_at = if is64 { 19 } else { 18 };
    let (mut read, mut write) = (0usize, 0usize);
    while read + name_at <= buf.len() {
        let reclen = u16::from_ne_bytes([buf[read + 16], buf[read + 17]]) as usize;
        if reclen == 0 || read + reclen > buf.len() {
            break;
        }
        let name = &buf[read + name_at..read + reclen];
        let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
        let ours = core::str::from_utf8(name)
            .ok()
            .and_then(|s| s.parse::<i32>().ok())
            .is_some_and(&private);
        if !ours {
            buf.copy_within(read..read + reclen, write);
            write += reclen;
        }
        read += reclen;
    }
    write
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fd_directories_are_recognised() {
        assert!(names_fd_dir(b"/proc/self/fd"));
        assert!(names_fd_dir(b"/proc/self/fd/"));
        assert!(names_fd_dir(b"/dev/fd"));
        let own = format!("/proc/{}/fd", std::process::id());
        assert!(names_fd_dir(own.as_bytes()));
        assert!(!names_fd_dir(b"/proc/1/fd"));
        assert!(!names_fd_dir(b"/proc/self/fdinfo"));
        assert!(!names_fd_dir(b"/proc/self/fd/3"));
    }

    #[test]
    fn listing_bits_follow_marks() {
        mark(700, true);
        assert!(is_listing(700));
        assert!(!is_listing(701));
        mark(700, false);
        assert!(!is_listing(700));
        assert!(!is_listing(5000));
        assert!(!is_listing(-1));
    }
}
