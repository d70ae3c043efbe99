//! Descriptors passed over Unix sockets (`SCM_RIGHTS`).
//!
//! To Linux an atoll descriptor is a duplicate of the process's placeholder
//! memfd. Passed as it is, the receiver would hold an empty file where the
//! sender had a file or a pipe of the mount, and what it wrote there would
//! vanish. So a `sendmsg` that passes atoll descriptors passes *tokens* in
//! their places:
//!
//! 1. the sender moves the description's offset to its server if it kept
//!    it here (`hybrid`: from now on processes share it), then lends one
//!    reference of the description to an *in-flight holder*, an id no
//!    process has (`Share` to `SessionId::in_flight`, as a fork shares
//!    with its child, Hare §3.5): the kernel keeps a passed file open while
//!    it is in flight, and so does the server;
//! 2. it passes a sealed memfd naming the instance, the description and
//!    that holder, which the kernel carries as any file;
//! 3. a `recvmsg` of a process of the instance that finds a token among
//!    the descriptors it received takes the lent reference
//!    (`Request::Receive`) and puts the description behind that descriptor
//!    number, with the close-on-exec flag the kernel gave it.
//!
//! A failed `sendmsg` takes its references back. A token that never
//! reaches a process of the instance (a receiver outside it, a message
//! never read) keeps its description open until the instance stops.

use core::sync::atomic::{AtomicU64, Ordering};

use atoll_proto::{DescId, Reply, Request, SessionId};

use crate::error::{err, Error, Result};
use crate::fdtable::{self, DescInfo, DescRef};
use crate::session::{Client, Lane};
use crate::sys;

/// The memfd name a token carries (`/proc/self/fd/N` reads
/// `/memfd:atoll-passed (deleted)`).
const TOKEN_NAME: &str = "atoll-passed";
const TOKEN_LINK: &[u8] = b"/memfd:atoll-passed";
const MAGIC: &[u8; 8] = b"atollfd1";

/// `struct cmsghdr`'s size on x86-64 (`cmsg_len`: `size_t`, then two ints).
const CMSG_HEADER: usize = 16;

/// Byte offsets of every descriptor an `SCM_RIGHTS` message of `control`
/// carries (the kernel's `__cmsg_nxthdr` walk).
fn rights_offsets(control: &[u8]) -> Vec<usize> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while at + CMSG_HEADER <= control.len() {
        let len = u64::from_ne_bytes(control[at..at + 8].try_into().unwrap()) as usize;
        if len < CMSG_HEADER || at + len > control.len() {
            break;
        }
        let level = i32::from_ne_bytes(control[at + 8..at + 12].try_into().unwrap());
        let kind = i32::from_ne_bytes(control[at + 12..at + 16].try_into().unwrap());
        if level == libc::SOL_SOCKET && kind == libc::SCM_RIGHTS {
            let n = (len - CMSG_HEADER) / 4;
            out.extend((0..n).map(|i| at + CMSG_HEADER + 4 * i));
        }
        at += len.div_ceil(8) * 8;
    }
    out
}

fn fd_at(control: &[u8], off: usize) -> i32 {
    i32::from_ne_bytes(control[off..off + 4].try_into().unwrap())
}

/// The program's control buffer, if `m` has one.
fn control_of(m: &libc::msghdr) -> Result<Option<Vec<u8>>> {
    if m.msg_control.is_null() || m.msg_controllen < CMSG_HEADER {
        return Ok(None);
    }
    let len = m.msg_controllen.min(64 * 1024);
    Ok(Some(
        sys::user_slice(m.msg_control as u64, len)
            .map_err(Error::Errno)?
            .to_vec(),
    ))
}

/// Does `sendmsg(m)` pass an atoll descriptor? (Whether atoll must see it.)
pub fn passes_atoll(m: &libc::msghdr) -> bool {
    if !fdtable::any() {
        return false;
    }
    let Ok(Some(control)) = control_of(m) else {
        return false;
    };
    rights_offsets(&control)
        .into_iter()
        .any(|off| fdtable::is_atoll(fd_at(&control, off) as i64))
}

/// May `recvmsg(m)` receive descriptors? (Whether atoll must look.)
pub fn may_receive(m: &libc::msghdr) -> bool {
    !m.msg_control.is_null() && m.msg_controllen >= CMSG_HEADER + 4
}

/// One token in flight: its memfd here, and the reference it stands for.
struct Token {
    fd: i32,
    desc: DescId,
    holder: SessionId,
}

/// The control buffer of a `sendmsg` with tokens in the places of its
/// atoll descriptors. Settle it with [`Outgoing::sent`] once the call
/// returned.
pub struct Outgoing {
    pub control: Vec<u8>,
    tokens: Vec<Token>,
}

/// Make the tokens for `m`'s atoll descriptors, or `None` if it passes none.
pub fn outgoing(c: &Client, m: &libc::msghdr) -> Result<Option<Outgoing>> {
    if !fdtable::any() {
        return Ok(None);
    }
    let Some(mut control) = control_of(m)? else {
        return Ok(None);
    };
    let mine: Vec<(usize, DescRef)> = rights_offsets(&control)
        .into_iter()
        .filter_map(|off| fdtable::get(fd_at(&control, off) as i64).map(|d| (off, d)))
        .collect();
    if mine.is_empty() {
        return Ok(None);
    }
    let lane = c.lane()?;
    let mut tokens = Vec::with_capacity(mine.len());
    for (off, d) in &mine {
        match lend(c, &lane, d) {
            Ok(t) => {
                control[*off..*off + 4].copy_from_slice(&t.fd.to_ne_bytes());
                tokens.push(t);
            }
            Err(e) => {
                take_back(c, &lane, tokens);
                return Err(e);
            }
        }
    }
    Ok(Some(Outgoing { control, tokens }))
}

impl Outgoing {
    /// The `sendmsg` returned `r`: the kernel holds the tokens now, or,
    /// when it failed, the lent references come back.
    pub fn sent(self, c: &Client, r: i64) {
        if r >= 0 {
            for t in &self.tokens {
                sys::close(t.fd);
            }
        } else if let Ok(lane) = c.lane() {
            take_back(c, &lane, self.tokens);
        }
    }
}

fn take_back(c: &Client, lane: &Lane, tokens: Vec<Token>) {
    for t in tokens {
        sys::close(t.fd);
        // This process holds the description: the lent reference is dropped.
        let _ = receive(c, lane, t.desc, t.holder);
    }
}

/// A fresh in-flight holder: unique among the instance's processes and
/// their tokens (pid, a counter, the clock).
fn new_holder() -> SessionId {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let mixed = (sys::monotonic_ns() as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ (sys::self_pid() << 32)
        ^ n;
    SessionId::in_flight(mixed)
}

/// Lend one reference of `d` to a new holder and write its token.
fn lend(c: &Client, lane: &Lane, d: &DescRef) -> Result<Token> {
    crate::hybrid::share_one(c, lane, d)?;
    let desc = d.desc();
    let holder = new_holder();
    lane.call(
        c,
        desc.server(),
        Request::Share {
            desc,
            to: holder,
            held: 0,
        },
        |r| match r {
            Reply::Ok => Ok(()),
            _ => Err(Error::Protocol("Share")),
        },
    )?;
    let token = Token {
        fd: -1,
        desc,
        holder,
    };
    match write_token(c, d, holder) {
        Ok(fd) => Ok(Token { fd, ..token }),
        Err(e) => {
            take_back(c, lane, vec![token]);
            Err(e)
        }
    }
}

fn receive(c: &Client, lane: &Lane, desc: DescId, from: SessionId) -> Result<()> {
    lane.call(
        c,
        desc.server(),
        Request::Receive { desc, from },
        |r| match r {
            Reply::Ok => Ok(()),
            _ => Err(Error::Protocol("Receive")),
        },
    )
}

/// What a token says.
#[derive(Debug)]
struct Said {
    instance: Vec<u8>,
    holder: SessionId,
    info: DescInfo,
}

fn encode(instance: &[u8], holder: SessionId, info: &DescInfo) -> Vec<u8> {
    let mut v = Vec::with_capacity(64 + instance.len());
    v.extend_from_slice(MAGIC);
    for w in [info.desc.0, holder.0, info.ino.0, info.cookie] {
        v.extend_from_slice(&w.to_le_bytes());
    }
    v.extend_from_slice(&info.flags.to_le_bytes());
    v.extend_from_slice(&fdtable::ftype_code(info.ftype).to_le_bytes());
    v.extend_from_slice(&(instance.len() as u32).to_le_bytes());
    v.extend_from_slice(instance);
    if let Some(p) = &info.path {
        v.extend_from_slice(&(p.len() as u32).to_le_bytes());
        v.extend_from_slice(p);
    }
    v
}

fn decode(b: &[u8]) -> Option<Said> {
    let mut at = 0usize;
    let mut take = |n: usize| {
        let s = b.get(at..at + n)?;
        at += n;
        Some(s)
    };
    if take(8)? != MAGIC {
        return None;
    }
    let mut word = || Some(u64::from_le_bytes(take(8)?.try_into().ok()?));
    let (desc, holder, ino, cookie) = (word()?, word()?, word()?, word()?);
    let mut int = || Some(u32::from_le_bytes(take(4)?.try_into().ok()?));
    let (flags, ftype) = (int()?, int()?);
    let n = int()? as usize;
    let instance = take(n)?.to_vec();
    let path = match take(4) {
        Some(len) => Some(take(u32::from_le_bytes(len.try_into().ok()?) as usize)?.to_vec()),
        None => None,
    };
    Some(Said {
        instance,
        holder: SessionId(holder),
        info: DescInfo {
            desc: DescId(desc),
            ino: atoll_proto::InodeId(ino),
            flags,
            ftype: fdtable::ftype_from_code(ftype),
            cookie,
            path,
        },
    })
}

/// A sealed memfd holding the token of `d` lent to `holder`.
fn write_token(c: &Client, d: &DescRef, holder: SessionId) -> Result<i32> {
    let info = DescInfo {
        desc: d.desc(),
        ino: d.ino(),
        flags: d.flags(),
        ftype: d.ftype(),
        cookie: d.cookie().load(Ordering::Relaxed),
        path: d.path().map(<[u8]>::to_vec),
    };
    let bytes = encode(c.info.id.as_bytes(), holder, &info);
    let fd = rustix::fs::memfd_create(
        TOKEN_NAME,
        rustix::fs::MemfdFlags::CLOEXEC | rustix::fs::MemfdFlags::ALLOW_SEALING,
    )
    .map_err(|e| Error::Errno(e.raw_os_error()))?;
    use std::os::fd::IntoRawFd;
    let fd = fd.into_raw_fd();
    if let Err(e) = sys::write_all(fd, &bytes) {
        sys::close(fd);
        return err(e);
    }
    let seals = libc::F_SEAL_SEAL | libc::F_SEAL_WRITE | libc::F_SEAL_GROW | libc::F_SEAL_SHRINK;
    sys::fcntl_int(fd, libc::F_ADD_SEALS, seals as i64);
    Ok(fd)
}

/// Is descriptor `fd` (just received) a token, and what does it say?
fn read_token(fd: i32) -> Option<Said> {
    let mut link = [0u8; 64];
    let mut path = [0u8; 32];
    let n = sys::proc_path(&mut path, b"/proc/self/fd/", fd as u32, b"\0");
    // SAFETY: raw readlinkat into our own buffers; `path` ends with NUL.
    let got = unsafe {
        sys::sc(
            libc::SYS_readlinkat,
            libc::AT_FDCWD as u64,
            path[..n].as_ptr() as u64,
            link.as_mut_ptr() as u64,
            link.len() as u64,
        )
    };
    if got <= 0 || !link[..got as usize].starts_with(TOKEN_LINK) {
        return None;
    }
    // A token is its header, the instance id and at most a PATH_MAX path.
    let mut buf = vec![0u8; 8192];
    let n = sys::pread(fd, &mut buf, 0);
    if n <= 0 {
        return None;
    }
    decode(&buf[..n as usize])
}

/// After a `recvmsg` that succeeded: put the description of every token
/// among the descriptors received in `control` behind its number.
pub fn received(c: &Client, control: u64, len: usize) {
    if control == 0 || len < CMSG_HEADER {
        return;
    }
    let Ok(bytes) = sys::user_slice(control, len) else {
        return;
    };
    let bytes = bytes.to_vec();
    for off in rights_offsets(&bytes) {
        let fd = fd_at(&bytes, off);
        if let Some(said) = read_token(fd) {
            if said.instance == c.info.id.as_bytes() {
                let _ = install(c, fd, said);
            }
        }
    }
}

/// Take the token's reference and make descriptor `fd` the description.
fn install(c: &Client, fd: i32, said: Said) -> Result<()> {
    if fd < 0 || fd as usize >= fdtable::MAX_FDS {
        return err(libc::EMFILE);
    }
    let lane = c.lane()?;
    let (desc, ino) = (said.info.desc, said.info.ino);
    let held = fdtable::find_desc(desc);
    receive(c, &lane, desc, said.holder)?;
    let r = match held {
        Some(r) => r,
        None => match fdtable::alloc(said.info) {
            Some(r) => r,
            None => {
                crate::file::close_desc(c, desc, ino);
                return err(libc::ENFILE);
            }
        },
    };
    let cloexec = sys::fcntl_int(fd, libc::F_GETFD, 0);
    let flags = if cloexec > 0 && cloexec & libc::FD_CLOEXEC as i64 != 0 {
        libc::O_CLOEXEC
    } else {
        0
    };
    let template = c.template()?;
    // The placeholder takes the token's number in one step: the number is
    // never free for another thread to take.
    let d = sys::dup3(template, fd, flags);
    if d < 0 {
        return err((-d) as i32);
    }
    if let Some(old) = fdtable::install(fd, r) {
        drop(old);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmsg(level: i32, kind: i32, fds: &[i32]) -> Vec<u8> {
        let len = CMSG_HEADER + 4 * fds.len();
        let mut v = (len as u64).to_ne_bytes().to_vec();
        v.extend_from_slice(&level.to_ne_bytes());
        v.extend_from_slice(&kind.to_ne_bytes());
        for fd in fds {
            v.extend_from_slice(&fd.to_ne_bytes());
        }
        v.resize(len.div_ceil(8) * 8, 0);
        v
    }

    #[test]
    fn rights_are_found_in_every_scm_rights_message_and_nowhere_else() {
        let mut control = cmsg(libc::SOL_SOCKET, libc::SCM_CREDENTIALS, &[7, 8, 9]);
        control.extend(cmsg(libc::SOL_SOCKET, libc::SCM_RIGHTS, &[3, 4, 5]));
        control.extend(cmsg(libc::SOL_SOCKET, libc::SCM_RIGHTS, &[6]));
        let fds: Vec<i32> = rights_offsets(&control)
            .into_iter()
            .map(|o| fd_at(&control, o))
            .collect();
        assert_eq!(fds, [3, 4, 5, 6]);
        // A header that claims more than the buffer holds ends the walk.
        let mut bad = cmsg(libc::SOL_SOCKET, libc::SCM_RIGHTS, &[3]);
        bad[0] = 200;
        assert!(rights_offsets(&bad).is_empty());
        assert!(rights_offsets(&control[..10]).is_empty());
    }

    #[test]
    fn tokens_round_trip_and_garbage_is_not_a_token() {
        let info = DescInfo {
            desc: DescId::new(2, 77),
            ino: atoll_proto::InodeId(0x1234),
            flags: libc::O_RDWR as u32,
            ftype: atoll_proto::FileType::Fifo,
            cookie: 9,
            path: Some(b"/atoll/p".to_vec()),
        };
        let holder = SessionId::in_flight(5);
        let b = encode(b"inst", holder, &info);
        let said = decode(&b).expect("a token");
        assert_eq!(said.instance, b"inst");
        assert_eq!(said.holder, holder);
        assert!(said.holder.is_in_flight());
        assert_eq!(said.info.desc, info.desc);
        assert_eq!(said.info.ino, info.ino);
        assert_eq!(said.info.flags, info.flags);
        assert_eq!(said.info.ftype, info.ftype);
        assert_eq!(said.info.cookie, 9);
        assert_eq!(said.info.path.as_deref(), Some(&b"/atoll/p"[..]));
        let unnamed = encode(b"inst", holder, &DescInfo { path: None, ..info });
        assert_eq!(decode(&unnamed).unwrap().info.path, None);
        assert!(decode(&b[..20]).is_none());
        assert!(decode(b"not a token at all, not at all").is_none());
    }
}
