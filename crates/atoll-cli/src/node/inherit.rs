//! Atoll descriptors a remote program inherits, the node's side (fos §4.2
//! spawning; the proxy's side is `atoll_client::remotefds`).
//!
//! A spawn request that carries atoll descriptors gets a session made
//! here before the program starts, and the proxy gives it a reference to
//! each description (the server counts it: the description lives while
//! either holds it):
//!
//! ```text
//!  proxy ──Spawn(req, fds)──▶ node   makes a session (Fork on its boot socket)
//!        ◀─Session{id}──────         
//!        ──Shared{fds}──────▶        Share done for these
//!        ◀─Started{pid}─────         the program runs in that session, with a
//!                                    placeholder at each of those numbers
//! ```
//!
//! The program joins the session as a new image joins after `execve`
//! (`ATOLL_SESSION_FD`, `Reattach`) and takes the descriptors from
//! `ATOLL_STATE`, exactly as the exec hand-over puts them there. The
//! session ends with the program's last holder of its socket (its exit,
//! a kill by the relay or by the link's end), or with this node (the head
//! ends the sessions of a lost peer), and the servers drop its
//! references then. A request without atoll descriptors costs nothing of
//! this: no session is made before the program's own.

use std::os::fd::{AsRawFd, OwnedFd};

use atoll_client::remotefds::FD_LIMIT;
use atoll_client::state::{FdState, State};
use atoll_transport::Link;

use super::wire::{self, InheritedFd, NodeMsg};

/// The session and descriptors a program is started with.
pub struct Inherited {
    /// The program's session socket (`FD_CLOEXEC` here; the child keeps
    /// it at the same number).
    pub session: OwnedFd,
    /// What each inherited number is a duplicate of in the program (as
    /// the placeholder memfd of a client is: `fdtable`).
    pub placeholder: OwnedFd,
    /// The descriptors whose description the session holds.
    pub fds: Vec<InheritedFd>,
}

/// Why descriptors could not be inherited.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// A list no proxy sends: the spawn fails with this errno.
    Malformed(i32),
    /// The proxy hung up meanwhile: nothing to start.
    Lost,
}

/// Refuse a list no proxy would send: numbers of the client's own range
/// or beyond, one number twice, no description.
pub fn check(fds: &[InheritedFd]) -> Result<(), Refused> {
    for (i, f) in fds.iter().enumerate() {
        let bad =
            !(0..FD_LIMIT).contains(&f.fd) || f.desc == 0 || fds[..i].iter().any(|g| g.fd == f.fd);
        if bad {
            return Err(Refused::Malformed(libc::EINVAL));
        }
    }
    Ok(())
}

/// Make the session for `fds` on the boot socket `socket` and have the
/// proxy at the other end of `link` share the descriptions with it.
/// `Ok(None)`: nothing to inherit, or no session could be made (the
/// program then starts without them, as a local exec does when the
/// instance refuses its child session).
pub fn prepare(
    link: &dyn Link,
    socket: &std::path::Path,
    fds: &[InheritedFd],
) -> Result<Option<Inherited>, Refused> {
    if fds.is_empty() {
        return Ok(None);
    }
    check(fds)?;
    let (session, id) =
        match atoll_client::remotefds::new_program_session(&socket.to_string_lossy()) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("node: no session for inherited descriptors: {e}");
                return Ok(None);
            }
        };
    let placeholder = match placeholder() {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!("node: no placeholder for inherited descriptors: {e}");
            return Ok(None);
        }
    };
    wire::send(link, 0, &NodeMsg::Session { id }).map_err(|_| Refused::Lost)?;
    // The session's socket is held here until the program has it, so the
    // session outlives every `Share` the proxy sends now.
    let shared = loop {
        match link.recv(None) {
            Ok(Some(m)) => match wire::decode(&m) {
                Ok(NodeMsg::Shared { fds }) => break fds,
                Ok(_) => continue,
                Err(_) => return Err(Refused::Lost),
            },
            Ok(None) => continue,
            Err(_) => return Err(Refused::Lost),
        }
    };
    let fds = fds
        .iter()
        .filter(|f| shared.contains(&f.fd))
        .cloned()
        .collect();
    Ok(Some(Inherited {
        session,
        placeholder,
        fds,
    }))
}

/// A memfd named as a client's placeholder template (what `/proc/PID/fd`
/// shows for an atoll descriptor), above the numbers a program inherits.
fn placeholder() -> std::io::Result<OwnedFd> {
    let fd = rustix::fs::memfd_create("atoll-placeholder", rustix::fs::MemfdFlags::CLOEXEC)?;
    Ok(rustix::io::fcntl_dupfd_cloexec(&fd, FD_LIMIT)?)
}

impl Inherited {
    /// `ATOLL_STATE` for the program: the atoll cwd, if any, and the
    /// inherited descriptors on the placeholder.
    pub fn state(&self, cwd: Option<&[u8]>) -> std::io::Result<String> {
        let st = rustix::fs::fstat(&self.placeholder)?;
        let placeholder = (st.st_dev, st.st_ino);
        Ok(state_text(cwd, &self.fds, placeholder))
    }

    /// The numbers the program gets, and the descriptors it gets them
    /// from.
    pub fn numbers(&self) -> (i32, Vec<i32>, i32) {
        (
            self.placeholder.as_raw_fd(),
            self.fds.iter().map(|f| f.fd).collect(),
            self.session.as_raw_fd(),
        )
    }
}

/// The exec hand-over's text for `cwd` and `fds`, each a duplicate of the
/// file `placeholder` (device, inode).
pub fn state_text(cwd: Option<&[u8]>, fds: &[InheritedFd], placeholder: (u64, u64)) -> String {
    State {
        cwd: cwd.map(|c| (c.to_vec(), None)),
        fds: fds
            .iter()
            .map(|f| FdState {
                fd: f.fd,
                desc: f.desc,
                ino: f.ino,
                flags: f.flags,
                ftype: f.ftype,
                cookie: f.cookie,
                placeholder,
                path: f.path.clone(),
            })
            .collect(),
        ..State::default()
    }
    .encode()
}

/// The proxy's side: its inheritable descriptors, as the spawn request
/// carries them (`text` from `atoll_client::remotefds::inheritable`);
/// anything malformed left out.
pub fn from_state_text(text: &str) -> Vec<InheritedFd> {
    let Some(st) = State::decode(text) else {
        return Vec::new();
    };
    st.fds
        .into_iter()
        .filter(|f| (0..FD_LIMIT).contains(&f.fd))
        .map(|f| InheritedFd {
            fd: f.fd,
            desc: f.desc,
            ino: f.ino,
            flags: f.flags,
            ftype: f.ftype,
            cookie: f.cookie,
            path: f.path,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use atoll_transport::Message;

    fn fds() -> Vec<InheritedFd> {
        vec![
            InheritedFd {
                fd: 3,
                desc: 0x0100_0000_0000_0004,
                ino: 42,
                flags: (libc::O_RDONLY | libc::O_LARGEFILE) as u32,
                ftype: 1,
                cookie: 0,
                path: None,
            },
            InheritedFd {
                fd: 4,
                desc: 0x0200_0000_0000_0001,
                ino: 43,
                flags: (libc::O_WRONLY | libc::O_APPEND) as u32,
                ftype: 1,
                cookie: 0,
                path: None,
            },
            InheritedFd {
                fd: 9,
                desc: 7,
                ino: 1,
                flags: libc::O_DIRECTORY as u32,
                ftype: 2,
                cookie: 0x0300_0000_0000_0010,
                path: Some(b"/atoll/a dir".to_vec()),
            },
        ]
    }

    #[test]
    fn inherited_descriptors_round_trip_through_the_spawn_request() {
        let req = NodeMsg::Spawn(wire::SpawnRequest {
            path: b"/bin/sh".to_vec(),
            argv: vec![b"sh".to_vec()],
            fds: fds(),
            ..Default::default()
        });
        let m = wire::message(0, &req);
        assert_eq!(wire::decode(&m).unwrap(), req);
        // Cut anywhere inside the descriptors, the request is refused,
        // never read as a shorter list.
        for cut in 1..m.body.len() {
            let short = Message {
                id: 0,
                body: m.body[..cut].to_vec(),
            };
            assert!(wire::decode(&short).is_err(), "cut at {cut}");
        }
        assert!(check(&fds()).is_ok());
    }

    #[test]
    fn a_list_no_proxy_sends_is_refused() {
        let bad = |f: &dyn Fn(&mut Vec<InheritedFd>)| {
            let mut v = fds();
            f(&mut v);
            check(&v)
        };
        let einval = Err(Refused::Malformed(libc::EINVAL));
        assert_eq!(bad(&|v| v[0].fd = 1), Ok(()), "atoll stdio is inherited");
        assert_eq!(bad(&|v| v[0].fd = -1), einval);
        assert_eq!(bad(&|v| v[1].fd = FD_LIMIT), einval, "client's own");
        assert_eq!(bad(&|v| v[2].fd = 3), einval, "a number twice");
        assert_eq!(bad(&|v| v[1].desc = 0), einval, "no description");
        assert_eq!(check(&[]), Ok(()));
    }

    /// What the node puts in `ATOLL_STATE` is what the exec hand-over
    /// would: the client's own parser reads back every descriptor, on the
    /// node's placeholder, and the cwd; the proxy's side reads the text
    /// the preload library gives, stdio included, leaving out garbage.
    #[test]
    fn the_programs_state_is_the_exec_hand_overs() {
        let text = state_text(Some(b"/atoll/src"), &fds(), (12, 3456));
        let st = State::decode(&text).expect("client parses it");
        assert_eq!(st.cwd, Some((b"/atoll/src".to_vec(), None)));
        assert_eq!(st.fds.len(), 3);
        assert!(st.fds.iter().all(|f| f.placeholder == (12, 3456)));
        assert_eq!(from_state_text(&text), fds());
        assert_eq!(
            State::decode(&state_text(None, &[], (1, 2))),
            Some(State::default())
        );
        let mut with_stdio = fds();
        with_stdio[0].fd = 0;
        let text = state_text(None, &with_stdio, (0, 0));
        assert_eq!(from_state_text(&text), with_stdio);
        assert_eq!(from_state_text("v1;f:3:zz"), vec![]);
        assert_eq!(from_state_text(""), vec![]);
    }
}
