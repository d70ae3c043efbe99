//! This process image's *tag*: a random word at a fixed address of the
//! image, drawn on first use.
//!
//! Pipe tickets and splits (`pipeticket`, `pipesplit`; Cosh §5 *move*)
//! name the other end by its process or thread id and copy from or into
//! its memory with `process_vm_readv`/`_writev`. An id outlives the memory
//! it named: `execve` keeps the process id, ends the other threads and
//! gives the leader's thread id to the thread that called it, so after
//! another thread's `execve` the posted id names the new program. Each end
//! therefore also posts where its tag lives and the tag, and the other end
//! reads the tag in the same `process_vm_readv` call as the bytes (one
//! call reads one address space: the kernel takes the memory once, at the
//! start): a different tag means the bytes are not the ones posted, and
//! the copy counts as from a process that is gone. A forked child keeps
//! the tag (its own process id tells it apart); a new image draws a new
//! one. Copies *into* another process cannot be checked this way; the
//! reader that posted its buffer withdraws it before `execve` instead
//! (`pipesplit::quiesce_for_exec`).

use core::sync::atomic::{AtomicU64, Ordering};

use crate::sys;

/// The tag, 0 until drawn. Its address is what the other end reads.
static TAG: AtomicU64 = AtomicU64::new(0);

/// Where a tag lives in a process, and its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tag {
    pub at: u64,
    pub value: u64,
}

/// This image's tag, drawn from the kernel's random pool on first use
/// (never 0, so an unset header word never matches).
pub fn this_image() -> Tag {
    let mut value = TAG.load(Ordering::Relaxed);
    if value == 0 {
        value = draw();
        value = match TAG.compare_exchange(0, value, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => value,
            Err(first) => first,
        };
    }
    Tag {
        at: TAG.as_ptr() as u64,
        value,
    }
}

fn draw() -> u64 {
    let mut v = 0u64;
    // SAFETY: the kernel writes at most 8 bytes into our local.
    let r = unsafe {
        sys::sc(
            libc::SYS_getrandom,
            &mut v as *mut u64 as u64,
            8,
            libc::GRND_NONBLOCK as u64,
            0,
        )
    };
    if r != 8 {
        // No entropy yet (early boot): the clock and this address still
        // make a repeat of the old image's tag at the same address a
        // coincidence.
        let mut ts: libc::timespec = sys::zeroed();
        // SAFETY: the kernel writes the local timespec.
        unsafe {
            sys::sc(
                libc::SYS_clock_gettime,
                libc::CLOCK_MONOTONIC as u64,
                &mut ts as *mut libc::timespec as u64,
                0,
                0,
            )
        };
        v = (ts.tv_sec as u64).rotate_left(32) ^ ts.tv_nsec as u64 ^ (&TAG as *const _ as u64);
    }
    v.max(1)
}

/// `process_vm_readv` of `dst.len()` bytes at `addr` in process or thread
/// `pid`, checked against its `tag` in the same call: the bytes copied,
/// or −errno: `ESRCH` when the process is gone or its memory is no longer
/// the tagged image's, `EFAULT` when none of the bytes could be copied
/// (either side's address).
pub fn read_tagged(pid: u32, tag: Tag, addr: u64, dst: &mut [u8]) -> i64 {
    let mut seen = 0u64;
    let local = [
        libc::iovec {
            iov_base: (&mut seen as *mut u64).cast(),
            iov_len: 8,
        },
        libc::iovec {
            iov_base: dst.as_mut_ptr().cast(),
            iov_len: dst.len(),
        },
    ];
    let remote = [
        libc::iovec {
            iov_base: tag.at as *mut libc::c_void,
            iov_len: 8,
        },
        libc::iovec {
            iov_base: addr as *mut libc::c_void,
            iov_len: dst.len(),
        },
    ];
    // SAFETY: the kernel writes at most 8 bytes into `seen` and
    // `dst.len()` into `dst` (ours), and only reads the other process's
    // memory; both iovec arrays are locals that outlive the call.
    let r = unsafe {
        sys::syscall6(
            libc::SYS_process_vm_readv,
            [
                pid as u64,
                local.as_ptr() as u64,
                2,
                remote.as_ptr() as u64,
                2,
                0,
            ],
        )
    };
    match r {
        // The tag itself is unreadable: the tagged image always maps it.
        r if r == -(libc::EFAULT as i64) => -(libc::ESRCH as i64),
        r if r < 0 => r,
        r if r < 8 || seen != tag.value => -(libc::ESRCH as i64),
        // The tag read, none of the bytes: a bad address on either side.
        8 if !dst.is_empty() => -(libc::EFAULT as i64),
        r => r - 8,
    }
}

/// Is the tagged image of process or thread `pid` gone (the process or
/// thread ended, a zombie included, or its memory is another image's)?
/// `None` when the kernel would not say (no right to read its memory).
pub fn image_gone(pid: u32, tag: Tag) -> Option<bool> {
    match read_tagged(pid, tag, 0, &mut []) {
        0 => Some(false),
        r if r == -(libc::ESRCH as i64) => Some(true),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn me() -> u32 {
        std::process::id()
    }

    #[test]
    fn the_tag_is_drawn_once_and_never_zero() {
        let a = this_image();
        assert_ne!(a.value, 0);
        assert_eq!(this_image(), a);
    }

    #[test]
    fn a_read_with_the_right_tag_gives_the_bytes() {
        let src = *b"posted bytes";
        let mut dst = [0u8; 12];
        let r = read_tagged(me(), this_image(), src.as_ptr() as u64, &mut dst);
        assert_eq!(r, 12);
        assert_eq!(&dst, &src);
        assert_eq!(image_gone(me(), this_image()), Some(false));
    }

    #[test]
    fn a_read_whose_tag_differs_is_from_a_gone_process_and_gives_nothing() {
        let src = *b"another image";
        let mut dst = [0u8; 13];
        let mut other = this_image();
        other.value ^= 1;
        let r = read_tagged(me(), other, src.as_ptr() as u64, &mut dst);
        assert_eq!(r, -(libc::ESRCH as i64));
        assert_eq!(image_gone(me(), other), Some(true));
        // A tag address the process does not map says the same.
        let unmapped = Tag { at: 8, value: 1 };
        assert_eq!(
            read_tagged(me(), unmapped, src.as_ptr() as u64, &mut dst),
            -(libc::ESRCH as i64)
        );
    }

    #[test]
    fn a_read_of_a_process_that_exited_says_it_is_gone() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert_eq!(image_gone(pid, this_image()), Some(true));
    }
}
