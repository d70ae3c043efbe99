//! Unix-domain socket *names* in the mount.
//!
//! A socket is a kernel object and stays one: like a terminal or a host
//! pipe it belongs to the kernel its process runs on (on one machine the
//! per-core kernels are one Linux, and a remote exec hands sockets over
//! with SCM_RIGHTS). What atoll serves is the socket's *name*, because
//! names live in the shared namespace:
//!
//! * `bind` of a path in the mount makes a socket node through the file
//!   servers (mode `0777 & ~umask`, `EADDRINUSE` if the name exists) and
//!   binds the kernel socket to an abstract address made from the instance
//!   and the node's inode. The node remembers the address as given, for
//!   `getsockname`.
//! * `connect`, `sendto` and `sendmsg` resolve the path through atoll
//!   (symlinks, search permission, write permission on the node, as Linux's
//!   `unix_find_bsd`): `ENOENT` for no name, `ECONNREFUSED` for a name that
//!   is not a socket, and otherwise the abstract address.
//! * Addresses the kernel reports (`getsockname`, `getpeername`, `accept`,
//!   `recvfrom`, `recvmsg`) that are such abstract names become the address
//!   the node was bound with again.
//!
//! Nothing is stored as a host file. The abstract name lives as long as
//! the kernel socket: a node whose socket closed refuses connections
//! (`ECONNREFUSED`), like a stale socket file; unlinking the node and
//! binding the name again gives a new inode and so a new abstract name.
//! A relative path from an atoll working directory that leaves the mount
//! is handed to Linux as the absolute host path it names.

use atoll_proto::{FileType, InodeId, Reply, Request};

use crate::error::{err, Error, Result};
use crate::meta::{self, Target};
use crate::session::{Client, Lane};
use crate::sys;
use crate::Out;

/// Bytes of `sun_path` (`struct sockaddr_un` is the family and this).
const SUN_PATH: usize = 108;
/// Offset of `sun_path` in `struct sockaddr_un`.
const PATH_AT: usize = 2;
/// Size of `struct sockaddr_un` (and of the kernel's largest address,
/// `sockaddr_storage`, is 128: we read reports into one of those).
const ADDR_MAX: usize = 128;

/// Prefix of the abstract names atoll binds sockets to (after the NUL).
const PREFIX: &[u8] = b"atoll-";

/// A pathname from a program's `sockaddr_un`, NUL-terminated.
struct SockPath {
    buf: [u8; SUN_PATH + 1],
    len: usize,
}

impl SockPath {
    fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
    fn ptr(&self) -> u64 {
        self.buf.as_ptr() as u64
    }
}

/// The pathname of the `len`-byte address at `ptr`, when it is one: an
/// `AF_UNIX` address that is neither unnamed nor abstract. Malformed
/// addresses are left to Linux, which has the errors for them.
fn pathname(ptr: u64, len: u64) -> Option<SockPath> {
    if ptr == 0 || len <= PATH_AT as u64 || len > ADDR_MAX as u64 {
        return None;
    }
    let family: u16 = sys::get_user(ptr).ok()?;
    if family != libc::AF_UNIX as u16 {
        return None;
    }
    let raw = sys::user_slice(ptr + PATH_AT as u64, (len as usize - PATH_AT).min(SUN_PATH)).ok()?;
    let n = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
    if n == 0 {
        return None; // unnamed or abstract
    }
    let mut p = SockPath {
        buf: [0; SUN_PATH + 1],
        len: n,
    };
    p.buf[..n].copy_from_slice(&raw[..n]);
    Some(p)
}

/// A `sockaddr_un` built here, with its length.
struct Addr {
    buf: [u8; ADDR_MAX],
    len: usize,
}

impl Addr {
    fn new() -> Addr {
        let mut a = Addr {
            buf: [0; ADDR_MAX],
            len: PATH_AT,
        };
        a.buf[..PATH_AT].copy_from_slice(&(libc::AF_UNIX as u16).to_ne_bytes());
        a
    }

    /// `AF_UNIX` with pathname `path` (length as Linux reports it: the
    /// family, the path and its NUL).
    fn pathname(path: &[u8]) -> Result<Addr> {
        if path.len() >= SUN_PATH {
            return err(libc::ENAMETOOLONG);
        }
        let mut a = Addr::new();
        a.buf[PATH_AT..PATH_AT + path.len()].copy_from_slice(path);
        a.len = PATH_AT + path.len() + 1;
        Ok(a)
    }

    /// The abstract address of socket node `ino` in this instance.
    fn of_node(c: &Client, ino: InodeId) -> Addr {
        let mut a = Addr::new();
        let mut at = PATH_AT + 1; // abstract: sun_path[0] == 0
        for part in [PREFIX, &hex(instance_tag(c)), b"-", &hex(ino.0)] {
            a.buf[at..at + part.len()].copy_from_slice(part);
            at += part.len();
        }
        a.len = at;
        a
    }

    fn ptr(&self) -> u64 {
        self.buf.as_ptr() as u64
    }
}

/// Names this instance's sockets apart from another instance's (abstract
/// names are shared by the whole network namespace): FNV-1a of the boot
/// socket's path, which is unique while the instance runs.
fn instance_tag(c: &Client) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in c.socket_path.as_bytes() {
        h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn hex(v: u64) -> [u8; 16] {
    let mut out = [0u8; 16];
    for (i, o) in out.iter_mut().enumerate() {
        let d = (v >> (60 - 4 * i)) & 0xf;
        *o = b"0123456789abcdef"[d as usize];
    }
    out
}

/// The inode behind an abstract address of this instance, if `addr` is one.
fn node_of(c: &Client, addr: &[u8]) -> Option<InodeId> {
    let name = addr
        .get(PATH_AT..)?
        .strip_prefix(&[0])?
        .strip_prefix(PREFIX)?;
    let (tag, ino) = (name.get(..16)?, name.get(17..)?);
    if tag != hex(instance_tag(c)) || name.get(16) != Some(&b'-') || ino.len() != 16 {
        return None;
    }
    let ino = u64::from_str_radix(core::str::from_utf8(ino).ok()?, 16).ok()?;
    let ino = InodeId(ino);
    (ino.owner() < c.members()).then_some(ino)
}

/// Does system call `nr` name a socket address that atoll must serve (or
/// report one it must translate)? Cheap: no messages.
pub fn may_concern(c: &Client, nr: i64, a: &[u64; 6]) -> bool {
    let names_atoll = |ptr: u64, len: u64| {
        pathname(ptr, len)
            .is_some_and(|p| crate::walk::concerns(c, libc::AT_FDCWD as i64, p.bytes()))
    };
    match nr {
        libc::SYS_bind | libc::SYS_connect => names_atoll(a[1], a[2]),
        libc::SYS_sendto => names_atoll(a[4], a[5]),
        libc::SYS_sendmsg => sys::get_user::<libc::msghdr>(a[1]).is_ok_and(|m| {
            names_atoll(m.msg_name as u64, m.msg_namelen as u64) || crate::fdpass::passes_atoll(&m)
        }),
        libc::SYS_getsockname | libc::SYS_getpeername | libc::SYS_accept | libc::SYS_accept4 => {
            a[1] != 0 && a[2] != 0
        }
        libc::SYS_recvfrom => a[4] != 0 && a[5] != 0,
        libc::SYS_sendmmsg => messages(a)
            .iter()
            .any(|m| crate::fdpass::passes_atoll(&m.msg_hdr)),
        libc::SYS_recvmmsg => messages(a)
            .iter()
            .any(|m| crate::fdpass::may_receive(&m.msg_hdr)),
        libc::SYS_recvmsg => sys::get_user::<libc::msghdr>(a[1])
            .is_ok_and(|m| !m.msg_name.is_null() || crate::fdpass::may_receive(&m)),
        _ => false,
    }
}

/// Serve socket call `nr`, or `None` to let Linux run it unchanged.
pub fn route(c: &Client, nr: i64, a: &[u64; 6]) -> Result<Option<Out>> {
    match nr {
        libc::SYS_bind => bind(c, a),
        libc::SYS_connect | libc::SYS_sendto => {
            let (ai, li) = if nr == libc::SYS_connect {
                (1, 2)
            } else {
                (4, 5)
            };
            let Some(to) = destination(c, a[ai], a[li])? else {
                return Ok(None);
            };
            let mut b = *a;
            b[ai] = to.ptr();
            b[li] = to.len as u64;
            Ok(Some(Out::Done(host(nr, b))))
        }
        libc::SYS_sendmsg => sent_msg(c, a),
        libc::SYS_getsockname | libc::SYS_getpeername | libc::SYS_accept | libc::SYS_accept4 => {
            reported(c, nr, a, 1, 2)
        }
        libc::SYS_recvfrom => reported(c, nr, a, 4, 5),
        libc::SYS_recvmsg => received_msg(c, a),
        libc::SYS_sendmmsg => sent_mmsg(c, a),
        libc::SYS_recvmmsg => received_mmsg(c, a),
        _ => Ok(None),
    }
}

/// `sendmsg`: to a socket of the mount by its address there, and with
/// tokens in the places of the atoll descriptors it passes (`fdpass`).
fn sent_msg(c: &Client, a: &[u64; 6]) -> Result<Option<Out>> {
    let mut m: libc::msghdr = sys::get_user(a[1])?;
    let to = destination(c, m.msg_name as u64, m.msg_namelen as u64)?;
    let passed = crate::fdpass::outgoing(c, &m)?;
    if to.is_none() && passed.is_none() {
        return Ok(None);
    }
    if let Some(to) = &to {
        m.msg_name = to.ptr() as *mut _;
        m.msg_namelen = to.len as u32;
    }
    if let Some(p) = &passed {
        m.msg_control = p.control.as_ptr() as *mut _;
    }
    let r = host(
        libc::SYS_sendmsg,
        [a[0], &m as *const _ as u64, a[2], 0, 0, 0],
    );
    if let Some(p) = passed {
        p.sent(c, r);
    }
    Ok(Some(Out::Done(r)))
}

/// The messages of a `sendmmsg`/`recvmmsg` (none when the vector cannot
/// be read: Linux answers the call itself).
fn messages(a: &[u64; 6]) -> Vec<libc::mmsghdr> {
    // Linux takes at most UIO_MAXIOV messages per call.
    let n = (a[2] as usize).min(1024);
    sys::get_user_vec::<libc::mmsghdr>(a[1], n).unwrap_or_default()
}

/// `sendmmsg` passing atoll descriptors: each message's control with
/// tokens (`fdpass`); the messages Linux did not send take theirs back.
fn sent_mmsg(c: &Client, a: &[u64; 6]) -> Result<Option<Out>> {
    let mut msgs = messages(a);
    let mut passed = Vec::with_capacity(msgs.len());
    for m in &mut msgs {
        let p = match crate::fdpass::outgoing(c, &m.msg_hdr) {
            Ok(p) => p,
            Err(e) => {
                for p in passed.into_iter().flatten() {
                    crate::fdpass::Outgoing::sent(p, c, -1);
                }
                return Err(e);
            }
        };
        if let Some(p) = &p {
            m.msg_hdr.msg_control = p.control.as_ptr() as *mut _;
        }
        passed.push(p);
    }
    let r = host(
        libc::SYS_sendmmsg,
        [
            a[0],
            msgs.as_mut_ptr() as u64,
            msgs.len() as u64,
            a[3],
            0,
            0,
        ],
    );
    let sent = r.max(0) as usize;
    for (i, p) in passed.into_iter().enumerate() {
        if let Some(p) = p {
            p.sent(c, if i < sent { 0 } else { -1 });
        }
    }
    // What Linux reports per message (`msg_len`) goes back to the program.
    for (i, m) in msgs.iter().enumerate().take(sent) {
        let at = a[1] + (i * core::mem::size_of::<libc::mmsghdr>()) as u64;
        sys::put_user(
            at + core::mem::offset_of!(libc::mmsghdr, msg_len) as u64,
            m.msg_len,
        )?;
    }
    Ok(Some(Out::Done(r)))
}

/// `recvmmsg` that may receive descriptors: the tokens among them become
/// the descriptions they stand for (`fdpass`).
fn received_mmsg(c: &Client, a: &[u64; 6]) -> Result<Option<Out>> {
    let r = host(libc::SYS_recvmmsg, *a);
    if r > 0 {
        for m in messages(&[a[0], a[1], r as u64, 0, 0, 0]) {
            crate::fdpass::received(c, m.msg_hdr.msg_control as u64, m.msg_hdr.msg_controllen);
        }
    }
    Ok(Some(Out::Done(r)))
}

/// Run the (possibly rewritten) call on Linux. It may block (accept,
/// recvmsg, connect): a program signal ends it and it is issued again for
/// an `SA_RESTART` handler, as Linux restarts socket calls (see `intr`).
fn host(nr: i64, a: [u64; 6]) -> i64 {
    // SAFETY: the program's own call; any pointer we replaced points to a
    // local of the caller that outlives the call.
    unsafe { crate::intr::restartable_host_syscall6(nr, a) }
}

#[inline(never)]
fn bind(c: &Client, a: &[u64; 6]) -> Result<Option<Out>> {
    let Some(p) = pathname(a[1], a[2]) else {
        return Ok(None);
    };
    // Only an unbound AF_UNIX socket gets a name; for anything else
    // (EBADF, ENOTSOCK, another family, bound already) Linux answers.
    let mut cur = [0u8; ADDR_MAX];
    let mut cur_len = ADDR_MAX as u32;
    let fd = a[0];
    let r = host(
        libc::SYS_getsockname,
        [
            fd,
            cur.as_mut_ptr() as u64,
            &mut cur_len as *mut u32 as u64,
            0,
            0,
            0,
        ],
    );
    let family = u16::from_ne_bytes([cur[0], cur[1]]);
    if r < 0 || family != libc::AF_UNIX as u16 || cur_len as usize > PATH_AT {
        return Ok(None);
    }
    let lane = c.lane()?;
    let ino = match crate::ns::make_socket(c, &lane, p.bytes(), p.bytes())? {
        Ok(ino) => ino,
        Err(Out::Rehost(h)) => return rehosted(libc::SYS_bind, a, 1, 2, h.as_bytes()),
        Err(_) => return Ok(None),
    };
    let at = Addr::of_node(c, ino);
    let r = host(libc::SYS_bind, [fd, at.ptr(), at.len as u64, 0, 0, 0]);
    if r < 0 {
        // The node must not outlive a bind that failed.
        let _ = crate::ns::unlink(c, &lane, libc::AT_FDCWD as i64, p.bytes(), 0);
    }
    Ok(Some(Out::Done(r)))
}

/// Run `nr` with the address argument replaced by host path `path`.
fn rehosted(nr: i64, a: &[u64; 6], ai: usize, li: usize, path: &[u8]) -> Result<Option<Out>> {
    let to = Addr::pathname(path)?;
    let mut b = *a;
    b[ai] = to.ptr();
    b[li] = to.len as u64;
    Ok(Some(Out::Done(host(nr, b))))
}

/// Where a `connect`/`sendto`/`sendmsg` to address `(ptr, len)` goes:
/// `None` when Linux should use the program's address as it is.
fn destination(c: &Client, ptr: u64, len: u64) -> Result<Option<Addr>> {
    let Some(p) = pathname(ptr, len) else {
        return Ok(None);
    };
    if !crate::walk::concerns(c, libc::AT_FDCWD as i64, p.bytes()) {
        return Ok(None);
    }
    let lane = c.lane()?;
    match meta::resolve(c, &lane, libc::AT_FDCWD as i64, p.ptr(), true, false)? {
        Target::Host => Ok(None),
        Target::Rehost(h) => Addr::pathname(h.as_bytes()).map(Some),
        Target::Node { ino, ftype, .. } => {
            if ftype != FileType::Socket {
                return err(libc::ECONNREFUSED);
            }
            may_write(c, &lane, ino)?;
            Ok(Some(Addr::of_node(c, ino)))
        }
    }
}

/// Connecting to a socket needs write permission on its node (Linux's
/// `unix_find_bsd`: `path_permission(MAY_WRITE)`).
fn may_write(c: &Client, lane: &Lane, ino: InodeId) -> Result<()> {
    lane.call(
        c,
        ino.owner(),
        Request::Access {
            ino,
            mask: libc::W_OK as u32,
        },
        |r| match r {
            Reply::Ok => Ok(()),
            _ => Err(Error::Protocol("Access")),
        },
    )
}

/// The address a socket node was bound with, for an abstract address of
/// this instance; `None` leaves the kernel's address as it is (not ours,
/// or the node is gone).
fn bound_address(c: &Client, addr: &[u8]) -> Option<Addr> {
    let ino = node_of(c, addr)?;
    let lane = c.lane().ok()?;
    let path = lane
        .call(c, ino.owner(), Request::ReadLink { ino }, |r| match r {
            Reply::Target(t) => Addr::pathname(t),
            _ => Err(Error::Protocol("ReadLink")),
        })
        .ok()?;
    Some(path)
}

/// Copy address `got` (of `got_len` bytes, as the kernel reported it) out
/// to the program's `(addr, lenp)` the way the kernel does: as much as fits,
/// and the full length in `*lenp`.
fn report(c: &Client, got: &[u8; ADDR_MAX], got_len: usize, addr: u64, room: usize) -> Result<u32> {
    let translated = bound_address(c, &got[..got_len.min(ADDR_MAX)]);
    let (bytes, len) = match &translated {
        Some(t) => (&t.buf, t.len),
        None => (got, got_len),
    };
    let n = len.min(room).min(ADDR_MAX);
    sys::copy_to_user(addr, &bytes[..n])?;
    Ok(len as u32)
}

/// `getsockname`, `getpeername`, `accept`, `accept4`, `recvfrom`: run with
/// our own address buffer, then report the address, translated.
fn reported(c: &Client, nr: i64, a: &[u64; 6], ai: usize, li: usize) -> Result<Option<Out>> {
    let room: u32 = sys::get_user(a[li])?;
    if (room as i32) < 0 {
        return err(libc::EINVAL);
    }
    let mut got = [0u8; ADDR_MAX];
    let mut got_len = ADDR_MAX as u32;
    let mut b = *a;
    b[ai] = got.as_mut_ptr() as u64;
    b[li] = &mut got_len as *mut u32 as u64;
    let r = host(nr, b);
    if r < 0 {
        return Ok(Some(Out::Done(r)));
    }
    // A datagram from an unnamed socket reports no address (length 0).
    let len = report(c, &got, got_len as usize, a[ai], room as usize)?;
    sys::put_user(a[li], len)?;
    Ok(Some(Out::Done(r)))
}

/// `recvmsg` with a name buffer: as `reported`, through a copy of the
/// program's `msghdr` whose results go back to it.
fn received_msg(c: &Client, a: &[u64; 6]) -> Result<Option<Out>> {
    let user: libc::msghdr = sys::get_user(a[1])?;
    if user.msg_name.is_null() {
        let r = host(libc::SYS_recvmsg, [a[0], a[1], a[2], 0, 0, 0]);
        if r >= 0 {
            let got: libc::msghdr = sys::get_user(a[1])?;
            crate::fdpass::received(c, got.msg_control as u64, got.msg_controllen);
        }
        return Ok(Some(Out::Done(r)));
    }
    let mut m = user;
    let mut got = [0u8; ADDR_MAX];
    m.msg_name = got.as_mut_ptr() as *mut _;
    m.msg_namelen = ADDR_MAX as u32;
    let r = host(
        libc::SYS_recvmsg,
        [a[0], &mut m as *mut _ as u64, a[2], 0, 0, 0],
    );
    if r < 0 {
        return Ok(Some(Out::Done(r)));
    }
    let len = report(
        c,
        &got,
        m.msg_namelen as usize,
        user.msg_name as u64,
        user.msg_namelen as usize,
    )?;
    let mut back = user;
    back.msg_namelen = len;
    back.msg_controllen = m.msg_controllen;
    back.msg_flags = m.msg_flags;
    sys::put_user(a[1], back)?;
    crate::fdpass::received(c, back.msg_control as u64, back.msg_controllen);
    Ok(Some(Out::Done(r)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_is_fixed_width_and_round_trips() {
        assert_eq!(&hex(0x1f), b"000000000000001f");
        let v = 0xdead_beef_0123_4567u64;
        let h = hex(v);
        assert_eq!(
            u64::from_str_radix(core::str::from_utf8(&h).unwrap(), 16).unwrap(),
            v
        );
    }

    #[test]
    fn pathnames_are_told_from_unnamed_and_abstract_addresses() {
        let mut sa: libc::sockaddr_un = sys::zeroed();
        sa.sun_family = libc::AF_UNIX as u16;
        for (i, b) in b"rel/s".iter().enumerate() {
            sa.sun_path[i] = *b as libc::c_char;
        }
        let at = |sa: &libc::sockaddr_un| sa as *const _ as u64;
        let p = pathname(at(&sa), 2 + 5).expect("pathname without NUL");
        assert_eq!(p.bytes(), b"rel/s");
        assert_eq!(pathname(at(&sa), 110).unwrap().bytes(), b"rel/s");
        assert!(pathname(at(&sa), 2).is_none(), "unnamed");
        sa.sun_path[0] = 0;
        assert!(pathname(at(&sa), 7).is_none(), "abstract");
        sa.sun_family = libc::AF_INET as u16;
        assert!(pathname(at(&sa), 7).is_none(), "not AF_UNIX");
        assert!(pathname(0, 7).is_none());
    }

    #[test]
    fn pathname_addresses_have_linux_lengths() {
        let a = Addr::pathname(b"/atoll/s").unwrap();
        assert_eq!(a.len, 2 + 8 + 1);
        assert_eq!(&a.buf[2..11], b"/atoll/s\0");
        assert!(Addr::pathname(&[b'x'; SUN_PATH]).is_err());
    }
}
