//! The read/write data path of descriptors (`read`, `write`, `pread64`,
//! `pwrite64`, `readv`, `writev`, and the copy emulation's reads and
//! writes of any descriptor). Where the client maps the buffer cache,
//! `Read`/`Write` reserve a range at the server, which answers with the
//! blocks backing it, and the client copies itself (Hare §3.3, Cosh
//! *share*); otherwise the bytes travel in messages (`crate::msgdata`,
//! Cosh §5 *copy*). Pipes and FIFOs go to `crate::pipe`.
//!
//! Hot path: no lock, no allocation (`Extents` replies are decoded in
//! place, `fast`).

use atoll_proto::{DescId, FileType, Request};

use crate::error::{err, Error, Result};
use crate::fdtable::{self, DescRef};
use crate::session::Client;
use crate::session::Lane;
use crate::sys;

/// Largest range one `Read`/`Write` reserves (the reply's extent list must
/// fit one frame; contiguous files need one extent per run).
const CHUNK: usize = 1 << 20;

fn check_readable(d: &DescRef) -> Result<()> {
    let f = d.flags();
    if f & libc::O_PATH as u32 != 0 || f & libc::O_ACCMODE as u32 == libc::O_WRONLY as u32 {
        return err(libc::EBADF);
    }
    if d.ftype() == FileType::Directory {
        return err(libc::EISDIR);
    }
    Ok(())
}

pub(super) fn check_writable(d: &DescRef) -> Result<()> {
    let f = d.flags();
    if f & libc::O_PATH as u32 != 0 || f & libc::O_ACCMODE as u32 == libc::O_RDONLY as u32 {
        return err(libc::EBADF);
    }
    Ok(())
}

/// Read into `buf` from the description (at `off`, or at the shared offset).
/// Hot path.
pub fn read_desc(
    c: &Client,
    lane: &Lane,
    d: &DescRef,
    buf: &mut [u8],
    off: Option<u64>,
) -> Result<usize> {
    if d.ftype() == FileType::Fifo {
        return match off {
            Some(_) => err(libc::ESPIPE),
            None => crate::pipe::read(c, d, buf, crate::pipe::Checked::Whole),
        };
    }
    check_readable(d)?;
    if off.is_none() {
        if let Some(r) = crate::hybrid::read(c, lane, d, buf) {
            return r;
        }
    }
    read_at(c, lane, d, buf, off)
}

/// Read from `d` at `off` (or at the server's offset): a remote process
/// answers what it holds copies of from memory (`rcache`).
pub fn read_at(
    c: &Client,
    lane: &Lane,
    d: &DescRef,
    buf: &mut [u8],
    off: Option<u64>,
) -> Result<usize> {
    if let Some(at) = off {
        if let Some(r) = crate::rcache::read(c, lane, d.ino(), d.desc(), buf, at) {
            return r;
        }
        if c.direct_data() {
            return read_extents(c, lane, d.desc(), buf, off, false, Some(d));
        }
    }
    read_id(c, lane, d.desc(), buf, off)
}

/// Read from a server description without access checks (exec's loader).
pub fn read_id(
    c: &Client,
    lane: &Lane,
    desc: DescId,
    buf: &mut [u8],
    off: Option<u64>,
) -> Result<usize> {
    if !c.direct_data() {
        // The bytes travel in messages (`ReadData`).
        return crate::msgdata::read(c, lane, desc, buf, off);
    }
    read_extents(c, lane, desc, buf, off, false, None)
}

/// `read`/`pread64` into a program buffer nobody has probed yet: only the
/// bytes the reply grants are probed, after the reply and before they are
/// copied, as Linux faults only on the bytes it copies (a 64 KiB buffer at
/// a 4 KiB file costs one page's probe, not sixteen). `None` where this
/// cannot be done without side effects the program could see (the shared
/// server offset, which a `Read` would move before the probe; a remote
/// copy cache or message data, which copy elsewhere; a range of several
/// `Read`s): the caller then probes the whole buffer first. `EFAULT` when
/// the granted bytes are not all writable; nothing has then been copied
/// nor any offset moved, so the caller answers the old way (a partial
/// read, `partial`).
pub fn read_where_copied(
    c: &Client,
    lane: &Lane,
    d: &DescRef,
    buf: &mut [u8],
    off: Option<u64>,
) -> Option<Result<usize>> {
    if d.ftype() != FileType::Regular
        || !c.direct_data()
        || crate::rcache::active(c)
        || buf.len() > CHUNK
    {
        return None;
    }
    if let Err(e) = check_readable(d) {
        return Some(Err(e));
    }
    let mut at_local = |at| read_extents(c, lane, d.desc(), buf, Some(at), true, Some(d));
    match off {
        Some(at) => Some(at_local(at)),
        None => crate::hybrid::read_at_local_offset(c, d, at_local),
    }
}

/// The `Read` loop of [`read_id`] over the mapped buffer cache. With
/// `probe`, `buf` is unchecked program memory: each reply's granted
/// length is probed writable before any byte of it is copied (`EFAULT`
/// if not). With the description `lease` and an offset, blocks an earlier
/// reply named may be read without a message, and the first reply's
/// blocks are remembered for the next reads (`lease`).
fn read_extents(
    c: &Client,
    lane: &Lane,
    desc: DescId,
    buf: &mut [u8],
    off: Option<u64>,
    probe: bool,
    lease: Option<&DescRef>,
) -> Result<usize> {
    let lease = lease.filter(|_| off.is_some() && buf.len() <= CHUNK);
    if let (Some(d), Some(at)) = (lease, off) {
        if let Some(n) = crate::lease::read(c, d, buf, at, probe) {
            return Ok(n);
        }
    }
    let mut learner = lease.and_then(|d| crate::lease::Learner::before(c, d));
    let server = desc.server();
    let mut done = 0usize;
    let mut watched = false;
    // At least one `Read`, also of no bytes: every read moves the atime
    // (relatime) on Linux, which only the server keeps.
    loop {
        let want = (buf.len() - done).min(CHUNK);
        // A learning read asks for a window past the bytes wanted (only
        // `want` of them are copied: the rest is for the reads to come).
        let ask = match learner {
            Some(_) => (want as u64).max(crate::lease::WINDOW),
            None => want as u64,
        };
        let offset = off.map(|o| o + done as u64);
        let dst = &mut buf[done..done + want];
        let got = await_writers(|| {
            // Copy each extent as it is decoded (no allocation).
            let mut ok = true;
            let mut fault = false;
            // A read at a given offset changes nothing a second one would
            // not: it goes again when its server dies on it (`forkshare`).
            let granted = crate::forkshare::again_if(offset.is_some(), || {
                let mut probed = !probe;
                lane.call_extents(
                    c,
                    server,
                    Request::Read {
                        desc,
                        len: ask,
                        offset,
                    },
                    |at, len, e| {
                        if let Some(l) = learner.as_mut() {
                            l.saw(&e);
                        }
                        let n = (len as usize).min(want);
                        if !probed {
                            // Every extent of the reply carries its whole
                            // length: probe it once, before the first copy.
                            // No `pastend` resolution here (it would send
                            // from inside this receive): its buffer faults
                            // and the caller takes the careful way.
                            probed = true;
                            fault = sys::check_writable_as_is(&mut dst[..n]).is_err();
                        }
                        ok = !fault
                            && crate::incoherent::copy_out(c, &e, at, &mut dst[..n]).is_some();
                        ok
                    },
                )
            });
            if fault {
                return err(libc::EFAULT);
            }
            let granted = granted?;
            watched |= granted.watched;
            if let (Some(l), Some(d)) = (learner.take(), lease) {
                l.learnt(d, granted.offset, granted.len, granted.watched);
            }
            Ok((granted.len as usize).min(want))
        })?;
        done += got;
        if got < want || done == buf.len() {
            break;
        }
    }
    if watched && done > 0 {
        // The bytes are copied: one `IN_ACCESS` for the call.
        crate::inotify::accessed(c, lane, desc);
    }
    Ok(done)
}

/// Run one read until the server stops answering `EAGAIN`, which for a
/// regular file means that bytes it would return are still being copied
/// in by a writer (server `fs/inflight.rs`): at most its patience (50 ms)
/// unless the writer is done sooner, which is microseconds. Each attempt
/// rings the server, which so serves the writer's `WriteDone`.
pub(crate) fn await_writers<R>(mut read: impl FnMut() -> Result<R>) -> Result<R> {
    let mut attempt = 0u32;
    loop {
        match read() {
            Err(Error::Errno(libc::EAGAIN)) if attempt < 2_000 => {
                attempt += 1;
                if attempt < 16 {
                    // SAFETY: sched_yield takes no arguments.
                    unsafe { sys::sc(libc::SYS_sched_yield, 0, 0, 0, 0) };
                } else {
                    sys::sleep_ns(50_000);
                }
            }
            Err(Error::Errno(libc::EAGAIN)) => return err(libc::EIO),
            r => return r,
        }
    }
}

/// Write `src` to the description. Hot path.
pub fn write_desc(
    c: &Client,
    lane: &Lane,
    d: &DescRef,
    src: &[u8],
    off: Option<u64>,
) -> Result<usize> {
    if d.ftype() == FileType::Fifo {
        return match off {
            Some(_) => err(libc::ESPIPE),
            None => crate::pipe::write(c, d, src, crate::pipe::Checked::Whole),
        };
    }
    check_writable(d)?;
    if off.is_none() && crate::hybrid::enabled(c) {
        // Hybrid file descriptors choose the offset (Hare §3.5.1).
        return crate::hybrid::write(
            c,
            lane,
            d,
            |o| write_at(c, lane, d, src, o),
            |at| append_at(c, lane, d, src, at),
        );
    }
    write_at(c, lane, d, src, off)
}

/// An `O_APPEND` write of a description whose offset lives here: the
/// server appends at the file's size, in its serial order, and says where
/// (`at` is only what the offset was); the bytes written and the new
/// offset, the end of the last piece, as Linux leaves it.
fn append_at(c: &Client, lane: &Lane, d: &DescRef, src: &[u8], at: u64) -> Result<(usize, u64)> {
    let mut end = at;
    let fsize = crate::fsize::limit();
    let r = write_shared(c, lane, d, src, Some(at), fsize, &mut end);
    if fsize.is_some() && matches!(r, Err(Error::Errno(libc::EFBIG))) {
        crate::intr::raise_in_this_thread(libc::SIGXFSZ);
    }
    r.map(|n| (n, end))
}

/// Write `src` at `off` (or at the server's offset): the data path, under
/// the caller's file size limit. Where the server refuses a write at or
/// past the limit (`EFBIG`), the writer gets `SIGXFSZ` too, as on Linux
/// (`generic_write_check_limits`); a write that crosses it is short.
fn write_at(c: &Client, lane: &Lane, d: &DescRef, src: &[u8], off: Option<u64>) -> Result<usize> {
    let fsize = crate::fsize::limit();
    let r = if c.direct_data() {
        write_shared(c, lane, d, src, off, fsize, &mut 0)
    } else {
        // The bytes travel in messages (`WriteData`).
        crate::msgdata::write(c, lane, d.desc(), src, off, fsize)
    };
    if fsize.is_some() && matches!(r, Err(Error::Errno(libc::EFBIG))) {
        crate::intr::raise_in_this_thread(libc::SIGXFSZ);
    }
    r
}

/// A write the client copies into the buffer-cache blocks the server
/// names (Cosh *share*), at most [`CHUNK`] per `Write`. `end`: where the
/// last piece written ended (what an `O_APPEND` write leaves the offset
/// at: the server chose where each piece went).
fn write_shared(
    c: &Client,
    lane: &Lane,
    d: &DescRef,
    src: &[u8],
    off: Option<u64>,
    fsize: Option<u64>,
    end: &mut u64,
) -> Result<usize> {
    let desc = d.desc();
    let server = desc.server();
    let mut done = 0usize;
    while done < src.len() {
        let want = (src.len() - done).min(CHUNK);
        let offset = off.map(|o| o + done as u64);
        let chunk = &src[done..done + want];
        let mut covered = 0usize;
        let r = lane
            .call_extents(
                c,
                server,
                Request::Write {
                    desc,
                    len: want as u64,
                    offset,
                    fsize,
                },
                |at, len, e| {
                    let n = (len as usize).min(want);
                    match crate::incoherent::copy_in(c, &e, at, &chunk[..n]) {
                        Some(k) => {
                            covered += k;
                            true
                        }
                        None => false,
                    }
                },
            )
            .and_then(|granted| {
                let n = (granted.len as usize).min(want);
                if covered != n {
                    return err(libc::EIO);
                }
                if n > 0 {
                    *end = granted.offset + n as u64;
                }
                if granted.pending {
                    // The bytes are in: readers waiting for the new end of
                    // the file may have them (server `fs/inflight.rs`).
                    let done = Request::WriteDone {
                        ino: d.ino(),
                        offset: granted.offset,
                        len: granted.len,
                    };
                    let _ = lane.post_quietly(c, server, done);
                }
                if granted.watched {
                    // The bytes are in: now the watchers may look.
                    crate::inotify::saw_watched(true);
                    let _ = lane.call_ok(c, server, Request::InotifyModified { desc });
                }
                Ok(n)
            });
        let got = match r {
            Ok(n) => n,
            // A partial write reports what was written (POSIX).
            Err(_) if done > 0 => break,
            Err(e) => return Err(e),
        };
        done += got;
        // A grant ends short at the extents one reply can name, not only
        // at a limit or a full pool: ask for the rest, which then fails
        // if something did stop the write (Linux writes to tmpfs in full
        // unless it fails).
        if got == 0 {
            break;
        }
    }
    Ok(done)
}

/// Read from any descriptor, atoll or host (copy emulation).
pub fn any_read(
    c: &Client,
    lane: &Lane,
    fd: i64,
    buf: &mut [u8],
    off: Option<u64>,
) -> Result<usize> {
    if let Some(d) = fdtable::get(fd) {
        return read_desc(c, lane, &d, buf, off);
    }
    // SAFETY: `buf` is our own buffer of the given length, written by
    // the kernel.
    unsafe {
        host_io(
            libc::SYS_read,
            libc::SYS_pread64,
            fd,
            buf.as_mut_ptr(),
            buf.len(),
            off,
        )
    }
}

/// Write to any descriptor, atoll or host (copy emulation).
pub fn any_write(c: &Client, lane: &Lane, fd: i64, buf: &[u8], off: Option<u64>) -> Result<usize> {
    if let Some(d) = fdtable::get(fd) {
        return write_desc(c, lane, &d, buf, off);
    }
    // SAFETY: `buf` is our own buffer of the given length, only read.
    unsafe {
        host_io(
            libc::SYS_write,
            libc::SYS_pwrite64,
            fd,
            buf.as_ptr() as *mut u8,
            buf.len(),
            off,
        )
    }
}

/// `plain(fd, buf, len)`, or `positioned(fd, buf, len, off)` with an
/// offset, on a host descriptor.
///
/// # Safety
/// `buf` must be valid for `len` bytes, writable if the call writes it.
unsafe fn host_io(
    plain: i64,
    positioned: i64,
    fd: i64,
    buf: *mut u8,
    len: usize,
    off: Option<u64>,
) -> Result<usize> {
    let (nr, at) = match off {
        Some(o) => (positioned, o),
        None => (plain, 0),
    };
    // SAFETY: the caller vouches for `buf` and `len`.
    let r = unsafe { sys::sc(nr, fd as u64, buf as u64, len as u64, at) };
    if r < 0 {
        return err((-r) as i32);
    }
    Ok(r as usize)
}

/// `readv`/`preadv` style: fill the iovecs in order, stop at a short read.
pub fn readv(
    c: &Client,
    lane: &Lane,
    d: &DescRef,
    iov: u64,
    cnt: u64,
    off: Option<u64>,
) -> Result<i64> {
    if cnt > 1024 {
        return err(libc::EINVAL);
    }
    let iovs = sys::get_user_vec::<libc::iovec>(iov, cnt as usize)?;
    crate::inotify::one_access(c, lane, || {
        let mut total = 0u64;
        for v in iovs {
            let buf = sys::user_slice_mut(v.iov_base as u64, v.iov_len)?;
            let n = read_desc(c, lane, d, buf, off.map(|o| o + total))?;
            total += n as u64;
            if n < v.iov_len {
                break;
            }
        }
        Ok(total as i64)
    })
}

pub fn writev(
    c: &Client,
    lane: &Lane,
    d: &DescRef,
    iov: u64,
    cnt: u64,
    off: Option<u64>,
) -> Result<i64> {
    if cnt > 1024 {
        return err(libc::EINVAL);
    }
    let mut total = 0u64;
    for v in sys::get_user_vec::<libc::iovec>(iov, cnt as usize)? {
        let buf = sys::user_slice(v.iov_base as u64, v.iov_len)?;
        let n = match write_desc(c, lane, d, buf, off.map(|o| o + total)) {
            Ok(n) => n,
            Err(_) if total > 0 => break,
            Err(e) => return Err(e),
        };
        total += n as u64;
        if n < v.iov_len {
            break;
        }
    }
    Ok(total as i64)
}
