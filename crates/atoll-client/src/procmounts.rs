//! The mount table as programs read it.
//!
//! atoll is no kernel mount, so Linux's `/proc/self/mounts` and
//! `/proc/self/mountinfo` do not list `/atoll`, and `df`, `findmnt`,
//! `mount` and libmount-based tools would not show it. An interposed
//! process that opens one of these files gets the kernel's text with one
//! line for the instance appended (type `atoll`, source `atoll`), in a
//! sealed memfd it reads like the real file; `statfs` of the mount already
//! answers with the servers' real counts. Not on any hot path: only opens
//! of these few names are looked at, after a one-byte prefix test.

use std::io::Write;
use std::os::fd::IntoRawFd;

use crate::error::{err, Result};
use crate::session::Client;
use crate::sys;
use crate::Out;

/// Which table `path` names, if it is one: `Some(true)` for mountinfo.
pub fn names_table(path: &[u8]) -> Option<bool> {
    if path == b"/etc/mtab" || path == b"/proc/mounts" {
        return Some(false);
    }
    match crate::path::proc_self_entry(path)? {
        b"mounts" => Some(false),
        b"mountinfo" => Some(true),
        _ => None,
    }
}

/// `open` of a mount table for reading: the kernel's text plus the
/// instance's line, in a fresh memfd. `None` for other opens.
pub fn open(c: &Client, path: &[u8], flags: u32) -> Result<Option<Out>> {
    let Some(mountinfo) = names_table(path) else {
        return Ok(None);
    };
    if flags & libc::O_ACCMODE as u32 != libc::O_RDONLY as u32 {
        return Ok(None); // Linux answers (EACCES/EISDIR)
    }
    let kernel = if mountinfo {
        "/proc/self/mountinfo"
    } else {
        "/proc/self/mounts"
    };
    let Ok(mut text) = std::fs::read(kernel) else {
        return Ok(None);
    };
    let mount = String::from_utf8_lossy(&c.mount).into_owned();
    if mountinfo {
        let (major, minor) = (crate::meta::ATOLL_DEV_MAJOR, crate::meta::ATOLL_DEV_MINOR);
        let parent = root_mount_id(&text).unwrap_or(1);
        let _ = writeln!(
            text,
            "{} {parent} {major}:{minor} / {mount} rw,relatime - atoll atoll rw",
            mount_id(),
        );
    } else {
        let _ = writeln!(text, "atoll {mount} atoll rw,relatime 0 0");
    }
    let cloexec = flags & libc::O_CLOEXEC as u32 != 0;
    let mut memfd_flags = rustix::fs::MemfdFlags::ALLOW_SEALING;
    if cloexec {
        memfd_flags |= rustix::fs::MemfdFlags::CLOEXEC;
    }
    let fd = rustix::fs::memfd_create("mounts", memfd_flags)?;
    let mut f = std::fs::File::from(fd);
    if f.write_all(&text).is_err() {
        return err(libc::EIO);
    }
    let raw = f.into_raw_fd();
    // SAFETY: `raw` is the memfd we own; seek it back to the start.
    unsafe { sys::sc(libc::SYS_lseek, raw as u64, 0, libc::SEEK_SET as u64, 0) };
    // Readers must not be able to change what the next reader sees; the
    // content is this process's own copy anyway.
    let _ = rustix::fs::fcntl_add_seals(
        // SAFETY: still ours; the borrow ends here.
        unsafe { std::os::fd::BorrowedFd::borrow_raw(raw) },
        rustix::fs::SealFlags::WRITE | rustix::fs::SealFlags::GROW | rustix::fs::SealFlags::SHRINK,
    );
    Ok(Some(Out::Done(raw as i64)))
}

/// The id of the mount at `/` in a mountinfo text (the new line's parent).
fn root_mount_id(text: &[u8]) -> Option<u64> {
    text.split(|&b| b == b'\n').find_map(|line| {
        let mut f = line.split(|&b| b == b' ');
        let id = f.next()?;
        let _parent = f.next()?;
        let _dev = f.next()?;
        let _root = f.next()?;
        (f.next()? == b"/").then(|| core::str::from_utf8(id).ok()?.parse().ok())?
    })
}

/// The mount id of the atoll mount in this process's `mountinfo` (and
/// what `name_to_handle_at` answers).
pub fn mount_id() -> i32 {
    (0x0a70_0000u32 | (std::process::id() & 0xffff)) as i32
}
