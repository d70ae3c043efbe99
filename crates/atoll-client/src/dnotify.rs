//! `fcntl(dirfd, F_NOTIFY, mask)` (dnotify) on atoll directories.
//!
//! Linux signals the owner of the directory's open file description
//! (the process that called `F_NOTIFY`, or `F_SETOWN`'s) when an entry of
//! the directory changes: `SIGIO`, or `F_SETSIG`'s signal with `si_fd`,
//! `si_code` `POLL_MSG` and `si_band`; one-shot unless `DN_MULTISHOT`;
//! gone when a descriptor of the description closes in that process. All
//! of that is the kernel's, on a file the kernel knows. So the kernel's
//! dnotify does it here too: the first registration of a description
//! makes a host directory, its *shadow* (`<runtime>/dnotify/<queue>/d`),
//! puts a descriptor of it behind the program's numbers of the description
//! (in place of the placeholder memfd), and lets the kernel register
//! `F_NOTIFY` on it. The file servers play the atoll directory's changes
//! on the shadow as they happen (server `fs/inotify/dnotify.rs`): a
//! watch of a queue made for the registration, which every server holds,
//! since a directory's entries may live on any of them. The signal thus
//! comes from the kernel, asynchronously, to a program waiting in
//! `pause()` as to a busy one, and the handler runs as program code.
//!
//! The queue lives while the description does in the registering
//! process: its last descriptor's close there closes the queue, and its
//! owner server then removes the shadow. A child after `fork` shares the
//! kernel description (and the registration stays the parent's, as the
//! owner is); its own `F_NOTIFY` makes its own shadow. `execve` keeps
//! the registrations of the descriptors it keeps: the new image's
//! session gets a reference to their queues (`state`, `n:`).

use std::sync::Mutex;

use atoll_proto::inotify::DNOTIFY_EVENTS;
use atoll_proto::{DescId, FileType, InodeId, Reply, Request};

use crate::error::{err, Error, Result};
use crate::fdtable::{self, DescRef};
use crate::session::{Client, Lane};
use crate::{file, sys, Out};

/// One registration of this process: the description, the queue made for
/// it, and the shadow's host identity.
#[derive(Clone, Debug)]
struct Reg {
    pid: u32,
    desc: DescId,
    queue: (DescId, InodeId),
    shadow: (u64, u64),
    path: Vec<u8>,
}

/// `<fcntl.h>`'s numbers the `libc` crate leaves out.
const DN_MULTISHOT: u32 = 0x8000_0000;
const F_SETSIG: i32 = 10;
const F_GETSIG: i32 = 11;

static REGS: Mutex<Vec<Reg>> = Mutex::new(Vec::new());

fn regs() -> std::sync::MutexGuard<'static, Vec<Reg>> {
    REGS.lock().unwrap_or_else(|e| e.into_inner())
}

/// `fcntl(fd, F_NOTIFY, arg)` on atoll descriptor `fd`.
pub fn fcntl_notify(c: &Client, lane: &Lane, fd: i64, d: &DescRef, arg: u64) -> Result<Out> {
    if d.flags() & libc::O_PATH as u32 != 0 {
        return err(libc::EBADF);
    }
    // A mask of no event removes (Linux does so on any file), and a file
    // that is no directory is `ENOTDIR`: the kernel answers both alike
    // on the placeholder memfd or the shadow.
    if arg as u32 & !(DN_MULTISHOT) == 0 || d.ftype() != FileType::Directory {
        return Ok(Out::Host);
    }
    let pid = std::process::id();
    let known = regs()
        .iter()
        .find(|r| r.pid == pid && r.desc == d.desc())
        .cloned();
    match known {
        Some(r) => {
            if sys::fstat_id(fd as i32).map(|(d, i, _)| (d, i)) != Ok(r.shadow) {
                put_behind(fd as i32, &r.path)?;
            }
        }
        None => {
            // No shadow (a host error): accepted without a signal, as
            // atoll answered before there was dnotify.
            if register(c, lane, fd as i32, d, pid).is_err() {
                return Ok(Out::Done(0));
            }
        }
    }
    Ok(Out::Host)
}

/// The shadow directories' parent: beside the instance's boot socket.
fn base(c: &Client) -> Vec<u8> {
    base_of(c.socket_path.as_bytes())
}

fn base_of(sock: &[u8]) -> Vec<u8> {
    let cut = sock.iter().rposition(|&b| b == b'/').unwrap_or(0);
    [&sock[..cut], b"/dnotify"].concat()
}

fn cpath(p: &[u8]) -> Result<std::ffi::CString> {
    std::ffi::CString::new(p).map_err(|_| Error::Errno(libc::EINVAL))
}

fn mkdir(p: &[u8]) -> Result<()> {
    let cp = cpath(p)?;
    // SAFETY: a NUL-terminated path of ours, integer arguments.
    let r = unsafe {
        sys::sc(
            libc::SYS_mkdirat,
            libc::AT_FDCWD as u64,
            cp.as_ptr() as u64,
            0o700,
            0,
        )
    };
    if r < 0 && r != -(libc::EEXIST as i64) {
        return err((-r) as i32);
    }
    if r == 0 {
        // Whatever the program's umask: the servers (the same user) write
        // there.
        // SAFETY: a NUL-terminated path of ours, integer arguments.
        unsafe {
            sys::sc(
                libc::SYS_fchmodat,
                libc::AT_FDCWD as u64,
                cp.as_ptr() as u64,
                0o700,
                0,
            )
        };
    }
    Ok(())
}

/// Make the registration of `d` (see the module docs).
fn register(c: &Client, lane: &Lane, fd: i32, d: &DescRef, pid: u32) -> Result<()> {
    let server = c.live_server(pid as usize % c.members().max(1));
    let (qino, qdesc) = lane.call(
        c,
        server,
        Request::InotifyInit {
            flags: libc::O_NONBLOCK as u32,
            max_events: atoll_proto::inotify::DEFAULT_MAX_EVENTS,
        },
        |r| match r {
            Reply::Pipe { ino, read, .. } => Ok((ino, read)),
            _ => Err(Error::Protocol("InotifyInit")),
        },
    )?;
    let r = shadow_for(c, lane, d, (qdesc, qino)).and_then(|path| {
        let shadow = put_behind(fd, &path)?;
        Ok(Reg {
            pid,
            desc: d.desc(),
            queue: (qdesc, qino),
            shadow,
            path,
        })
    });
    match r {
        Ok(reg) => {
            regs().push(reg);
            Ok(())
        }
        Err(e) => {
            file::close_desc(c, qdesc, qino);
            Err(e)
        }
    }
}

/// Make the shadow of `d`'s directory for queue `q` and have every server
/// play the directory's changes on it: its path.
fn shadow_for(c: &Client, lane: &Lane, d: &DescRef, q: (DescId, InodeId)) -> Result<Vec<u8>> {
    let (qdesc, qino) = q;
    let (wd, qref) = lane.call(
        c,
        qdesc.server(),
        Request::InotifyAddWatch {
            desc: qdesc,
            ino: d.ino(),
            mask: DNOTIFY_EVENTS,
        },
        |r| match r {
            Reply::Watch { wd, queue, .. } => Ok((wd, queue)),
            _ => Err(Error::Protocol("InotifyAddWatch")),
        },
    )?;
    let mut path = base(c);
    mkdir(&path)?;
    path.extend_from_slice(format!("/{:x}", qino.0).as_bytes());
    mkdir(&path)?;
    for sub in [&b"/d"[..], b"/s"] {
        mkdir(&[&path[..], sub].concat())?;
    }
    for server in 0..c.members().max(1) {
        let req = Request::DnotifyRegister {
            queue: qref,
            ino: d.ino(),
            wd,
            shadow: &path,
        };
        lane.call_ok(c, server, req)?;
    }
    Ok(path)
}

/// Put a descriptor of the shadow `path/d` behind `fd` and every other
/// number of its description in this process (one kernel description,
/// as they share one on Linux), keeping each number's close-on-exec flag
/// and the signal `F_SETSIG` chose on the placeholder: the shadow's
/// `(st_dev, st_ino)`.
fn put_behind(fd: i32, path: &[u8]) -> Result<(u64, u64)> {
    let dir = cpath(&[path, b"/d"].concat())?;
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC;
    // SAFETY: a NUL-terminated path of ours, integer arguments.
    let k = unsafe {
        sys::sc(
            libc::SYS_openat,
            libc::AT_FDCWD as u64,
            dir.as_ptr() as u64,
            flags as u64,
            0,
        )
    };
    if k < 0 {
        return err((-k) as i32);
    }
    let k = k as i32;
    // SAFETY: F_GETSIG and F_SETSIG take an integer argument.
    unsafe {
        let sig = sys::sc(libc::SYS_fcntl, fd as u64, F_GETSIG as u64, 0, 0);
        if sig > 0 {
            sys::sc(libc::SYS_fcntl, k as u64, F_SETSIG as u64, sig as u64, 0);
        }
    }
    let id = sys::fstat_id(k).map(|(d, i, _)| (d, i));
    let desc = fdtable::get(fd as i64).map(|d| d.desc());
    let mut numbers = vec![fd];
    numbers.extend(fdtable::fds().into_iter().filter(|&n| {
        n != fd && desc.is_some() && fdtable::get(n as i64).map(|d| d.desc()) == desc
    }));
    let mut r = Ok(());
    for n in numbers {
        let cloexec = sys::fcntl_int(n, libc::F_GETFD, 0);
        let keep = if cloexec > 0 && cloexec as i32 & libc::FD_CLOEXEC != 0 {
            libc::O_CLOEXEC
        } else {
            0
        };
        let got = sys::dup3(k, n, keep);
        if got < 0 && n == fd {
            r = err((-got) as i32);
        }
    }
    sys::close(k);
    r?;
    id.map_err(Error::Errno)
}

/// The last descriptor of description `desc` closed in this process: its
/// registration's queue goes (its owner server removes the shadow).
pub fn closed(c: &Client, desc: DescId) {
    let pid = std::process::id();
    let gone: Vec<Reg> = {
        let mut regs = regs();
        let (gone, kept) = regs.drain(..).partition(|r| r.desc == desc && r.pid == pid);
        *regs = kept;
        gone
    };
    for r in gone {
        file::close_desc(c, r.queue.0, r.queue.1);
    }
}

/// `execve`: the registrations of this process whose description goes
/// to the new image (`shared`), as the state carries them. The kernel
/// keeps the registration of a descriptor that stays open, as Linux; the
/// caller gives the new session a reference to each queue.
pub fn carry(shared: &[DescId]) -> Vec<crate::state::DnotifyState> {
    let pid = std::process::id();
    regs()
        .iter()
        .filter(|r| r.pid == pid && shared.contains(&r.desc))
        .map(|r| crate::state::DnotifyState {
            desc: r.desc.0,
            queue: r.queue.0 .0,
            queue_ino: r.queue.1 .0,
            shadow: r.shadow,
            path: r.path.clone(),
        })
        .collect()
}

/// In a new image: a registration carried across `execve`.
pub fn restore(n: &crate::state::DnotifyState) {
    regs().push(Reg {
        pid: std::process::id(),
        desc: DescId(n.desc),
        queue: (DescId(n.queue), InodeId(n.queue_ino)),
        shadow: n.shadow,
        path: n.path.clone(),
    });
}

/// Is `link` (the kernel's name of a descriptor) a shadow of this
/// instance? (`proclink`: another process's descriptor whose kernel file
/// is a shadow is an atoll descriptor, as a placeholder is.)
pub fn is_shadow(c: &Client, link: &[u8]) -> bool {
    is_shadow_of(&base(c), link)
}

fn is_shadow_of(base: &[u8], link: &[u8]) -> bool {
    link.len() > base.len() && link.starts_with(base) && link[base.len()] == b'/'
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shadows_live_beside_the_boot_socket() {
        let b = base_of(b"/run/user/1/atoll/abc/boot.sock");
        assert_eq!(b, b"/run/user/1/atoll/abc/dnotify");
        assert!(is_shadow_of(&b, b"/run/user/1/atoll/abc/dnotify/3f/d"));
        assert!(!is_shadow_of(&b, b"/run/user/1/atoll/abc/dnotify"));
        assert!(!is_shadow_of(&b, b"/run/user/1/atoll/abc/dnotifyx/3f/d"));
        assert!(!is_shadow_of(&b, b"/memfd:atoll-placeholder"));
    }
}
