//! Remote spawn, the node's side (fos §4.2 spawning): a program exec'd on
//! another host runs here, in this host's face of the image, while its
//! proxy (`remote.rs`) stays on the caller's host.
//!
//! One transport link per program, opened by the proxy; its first message
//! is a [`SpawnRequest`]. The node starts the program as a client of its
//! own boot socket (edge or instance), with the caller's environment,
//! atoll cwd, identity, umask and limits, in a process group of its own
//! (signals reach it only through the relay), the caller's atoll
//! descriptors (`inherit.rs`), and stdio on pipes:
//!
//! ```text
//!  proxy ──Spawn(req)──▶ node      (Session / Shared first, if it
//!                                   carries atoll descriptors)
//!                                  spawns the program
//!        ◀─Watchable{token}─        names it for the proxy's watcher
//!        ◀─Started{pid}─            (or SpawnFailed{errno})
//!        ──Stdin{bytes}─▶           written to its stdin (empty: closed)
//!        ◀─StdinTaken────           ... and counted off the proxy's window
//!        ◀─Output{fd}────           what it wrote on stdout / stderr
//!        ──OutputTaken──▶           ... once the proxy wrote it out
//!        ──Signal{sig}──▶           kill(pid, sig)
//!        ◀─Stopped{sig} / Continued  job control: it stopped or went on
//!        ◀─Exited | Killed          once it ended and both pipes closed
//!
//!  watcher ──Watch{token}──▶ node  (a second link, `watch.rs`: a process
//!          ──ProxyStopped──▶        of the proxy's host that samples its
//!          ──ProxyContinued─▶       state; see `serve_watch`)
//! ```
//!
//! The link ending before that (the proxy's host died, the proxy was
//! killed) kills the program, as a scheduling server kills a program whose
//! proxy hung up (`atoll_sched::proxy`).

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::io::{Read, Write};
use std::net::{IpAddr, ToSocketAddrs};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use atoll_transport::{Link, Listener};

use super::inherit::{self, Inherited, Refused};
use super::memberhost::MemberHost;
use super::window::{Window, WINDOW};
use super::wire::{self, NodeMsg, SpawnRequest};
use crate::sys;

/// How long a finished spawn waits for its proxy to hang up (so the exit
/// status is not dropped from the link's outbox by an early close).
const LINGER: Duration = Duration::from_secs(5);
/// Largest piece of output per message.
const CHUNK: usize = 64 * 1024;

/// Variables that tie a process to the caller's host: replaced here.
const HOST_BOUND: [&str; 7] = [
    "LD_PRELOAD",
    "ATOLL_PRELOAD",
    "ATOLL_SOCKET",
    "ATOLL_SESSION_FD",
    "ATOLL_STATE",
    "ATOLL_PROXY_PID",
    "ATOLL_AFFINITY",
];

/// What a node offers the programs it starts for other hosts.
pub struct SpawnHost {
    /// The boot socket programs attach to (the edge's, or the instance's).
    pub socket: PathBuf,
    pub mount: String,
    pub preload: PathBuf,
    /// Addresses of the image's hosts: only their proxies may start
    /// programs here.
    pub peers: Vec<IpAddr>,
    /// Programs running here, by the token their proxy's watcher names
    /// them with (`watch.rs`).
    pub watches: Mutex<HashMap<u64, Arc<Watched>>>,
}

/// A program started here, as a watch link sees it.
pub struct Watched {
    pid: i32,
    /// Set once the program is reaped: no signal may reach a reused pid.
    ended: Arc<AtomicBool>,
    /// Its proxy's link, whose silence is excused while the proxy is
    /// stopped.
    proxy: Arc<dyn Link>,
    /// The program's next stop is the one a watch asked for: the proxy is
    /// stopped already and must not be told to stop (had it read such a
    /// `Stopped` after the SIGCONT that continued it, it would stop again).
    quiet_stop: Arc<AtomicBool>,
    /// The program is stopped, as `waitid` last reported.
    stopped: Arc<AtomicBool>,
}

/// Removes a spawn's watch entry when its serving ends.
struct Unwatch<'a> {
    host: &'a SpawnHost,
    token: u64,
}

impl Drop for Unwatch<'_> {
    fn drop(&mut self) {
        self.host
            .watches
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.token);
    }
}

/// A secret no other host's process can guess (a watch link may stop the
/// program it names).
fn new_token() -> u64 {
    let mut b = [0u8; 8];
    let got = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut b));
    if got.is_err() {
        // Still unpredictable enough for a peer that is admitted anyway.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        b = (t.as_nanos() as u64 ^ u64::from(std::process::id()).rotate_left(32)).to_le_bytes();
    }
    u64::from_le_bytes(b)
}

/// Serve a watch link (its first message, `Watch { token }`, read): the
/// proxy of program `token` stopped or went on (fos §4.2's proxy, job
/// control across hosts; the local `atoll_sched::mirror` rule "the proxy
/// stopped on its own: SIGSTOP the program"). A stop stops the program
/// (its pid, as a SIGSTOP to the caller's pid stops that one process on
/// Linux) and excuses the proxy link's silence (a stopped proxy sends no
/// heartbeat; its link would end after 3 s and the program be killed);
/// the continue lifts the excuse (the proxy relays its SIGCONT itself).
/// The watch link ending lifts it too: a proxy whose host died is then
/// found silent as before.
pub fn serve_watch(link: Arc<dyn Link>, token: u64, host: &SpawnHost) {
    let Some(w) = host
        .watches
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&token)
        .cloned()
    else {
        tracing::info!("node: watch of an unknown spawn from {}", link.peer());
        link.close();
        return;
    };
    let mut held = false;
    loop {
        match link.recv(None) {
            Ok(Some(m)) => match wire::decode(&m) {
                Ok(NodeMsg::ProxyStopped) => {
                    w.proxy.hold_silence(true);
                    held = true;
                    // A program stopped already (the proxy's stop
                    // mirrors its own) stays so; a SIGSTOP to it would
                    // report nothing, and a stop marked quiet for it would
                    // silence its next stop of its own.
                    if !w.ended.load(Ordering::Acquire) && !w.stopped.load(Ordering::Acquire) {
                        w.quiet_stop.store(true, Ordering::Release);
                        let _ = sys::kill(w.pid, libc::SIGSTOP);
                    }
                }
                Ok(NodeMsg::ProxyContinued) => {
                    w.proxy.hold_silence(false);
                    held = false;
                }
                _ => {}
            },
            Ok(None) => {}
            Err(_) => break,
        }
        if w.proxy.is_closed() {
            break;
        }
    }
    if held {
        w.proxy.hold_silence(false);
    }
}

impl SpawnHost {
    /// Is the other end of `link` one of the image's hosts?
    pub fn admits(&self, link: &dyn Link) -> bool {
        admits(&self.peers, link)
    }
}

/// Is the other end of `link` one of `peers`?
fn admits(peers: &[IpAddr], link: &dyn Link) -> bool {
    let ok = link
        .peer()
        .parse::<std::net::SocketAddr>()
        .is_ok_and(|a| peers.contains(&a.ip().to_canonical()));
    if !ok {
        tracing::warn!("node: a link from {}, not a peer: refused", link.peer());
    }
    ok
}

/// What an edge's peer address takes: remote spawns (and their watch
/// links) if it offers them, and other nodes' direct links to its members
/// (`peers.rs`) if it serves any, from `peers` only.
pub struct Takes {
    pub spawner: Option<Arc<SpawnHost>>,
    pub members: Option<Arc<MemberHost>>,
    pub peers: Vec<IpAddr>,
}

/// The addresses `peers` (`host:port`) resolve to.
pub fn peer_addresses(peers: &[String]) -> Vec<IpAddr> {
    peers
        .iter()
        .filter_map(|p| p.to_socket_addrs().ok())
        .flatten()
        .map(|a| a.ip().to_canonical())
        .collect()
}

/// Accept remote-spawn links and direct links on an edge (the first node
/// takes spawns on its peer listener, `head.rs`) until `stop`.
pub fn accept(listener: Box<dyn Listener>, takes: Takes, stop: &AtomicBool) {
    let takes = Arc::new(takes);
    while !stop.load(Ordering::Relaxed) {
        let link = match listener.accept(Some(Duration::from_millis(200))) {
            Ok(Some(l)) => Arc::<dyn Link>::from(l),
            Ok(None) => continue,
            Err(e) => {
                tracing::warn!("node: spawn accept: {e}");
                continue;
            }
        };
        let takes = takes.clone();
        let _ = std::thread::Builder::new()
            .name("node-spawn".into())
            .spawn(move || {
                let first = match link.recv(Some(LINGER)) {
                    Ok(Some(m)) => wire::decode(&m),
                    other => {
                        tracing::info!("node: spawn link ended early: {other:?}");
                        return;
                    }
                };
                if !admits(&takes.peers, &*link) {
                    return;
                }
                match (first, &takes.spawner, &takes.members) {
                    (Ok(NodeMsg::Spawn(req)), Some(host), _) => serve(link, req, host),
                    (Ok(NodeMsg::Watch { token }), Some(host), _) => serve_watch(link, token, host),
                    (Ok(NodeMsg::ReachMembers { rank }), _, Some(members)) => {
                        members.clone().serve_peer(rank, link)
                    }
                    (other, _, _) => tracing::warn!("node: not a request taken here: {other:?}"),
                }
            });
    }
}

/// Run `req` here for the proxy at the other end of `link`, until the
/// program ends or the link does.
pub fn serve(link: Arc<dyn Link>, req: SpawnRequest, host: &SpawnHost) {
    let inherited = match inherit::prepare(&*link, &host.socket, &req.fds) {
        Ok(i) => i,
        Err(Refused::Lost) => return,
        Err(Refused::Malformed(errno)) => {
            let _ = wire::send(&*link, 0, &NodeMsg::SpawnFailed { errno });
            linger(&*link);
            return;
        }
    };
    let spawned = command(&req, host, inherited.as_ref()).and_then(|mut c| c.spawn());
    // The program holds its session and descriptors now (or, not started,
    // never will: the session ends here, and its references with it).
    drop(inherited);
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            let errno = e.raw_os_error().unwrap_or(libc::EIO);
            let _ = wire::send(&*link, 0, &NodeMsg::SpawnFailed { errno });
            linger(&*link);
            return;
        }
    };
    let pid = child.id() as i32;
    // Set once the program is reaped: no signal may reach a reused pid.
    let ended = Arc::new(AtomicBool::new(false));
    let quiet_stop = Arc::new(AtomicBool::new(false));
    let stopped = Arc::new(AtomicBool::new(false));
    let token = new_token();
    host.watches
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(
            token,
            Arc::new(Watched {
                pid,
                ended: ended.clone(),
                proxy: link.clone(),
                quiet_stop: quiet_stop.clone(),
                stopped: stopped.clone(),
            }),
        );
    let _unwatch = Unwatch { host, token };
    let _ = wire::send(&*link, 0, &NodeMsg::Watchable { token });
    let _ = wire::send(&*link, 0, &NodeMsg::Started { pid });
    let (to_stdin, stdin_rx) = mpsc::channel::<Vec<u8>>();
    let mut stdin = child.stdin.take();
    let l = link.clone();
    std::thread::spawn(move || {
        for bytes in stdin_rx {
            if bytes.is_empty() {
                break; // end of input: the program's stdin closes
            }
            // A program that closed its stdin drops the rest, as Linux
            // would fail the writer; each piece is reported taken so the
            // proxy's window moves on (`window.rs`).
            if stdin.as_mut().is_some_and(|s| s.write_all(&bytes).is_err()) {
                stdin = None;
            }
            let taken = NodeMsg::StdinTaken {
                bytes: bytes.len() as u64,
            };
            if wire::send(&*l, 0, &taken).is_err() {
                break;
            }
        }
    });
    // What the program wrote and the proxy has not yet written out.
    let output_window = Arc::new(Window::new(WINDOW));
    let mut outputs = Vec::new();
    let pipes: [(u8, Option<Box<dyn Read + Send>>); 2] = [
        (1, child.stdout.take().map(|p| Box::new(p) as _)),
        (2, child.stderr.take().map(|p| Box::new(p) as _)),
    ];
    for (fd, pipe) in pipes {
        if let Some(pipe) = pipe {
            let (l, w) = (link.clone(), output_window.clone());
            outputs.push(std::thread::spawn(move || relay_output(&*l, &w, fd, pipe)));
        }
    }
    let (e, l) = (ended.clone(), link.clone());
    std::thread::spawn(move || {
        // Stops and continues go to the proxy as they happen (job control
        // across hosts: the proxy stops alike); `waitid` reports a stop
        // only while the program is still stopped.
        let end = loop {
            match sys::wait_change(pid) {
                Ok(sys::ChildChange::Stopped(sig)) => {
                    stopped.store(true, Ordering::Release);
                    if !quiet_stop.swap(false, Ordering::AcqRel) {
                        let _ = wire::send(&*l, 0, &NodeMsg::Stopped { sig });
                    }
                }
                Ok(sys::ChildChange::Continued) => {
                    stopped.store(false, Ordering::Release);
                    quiet_stop.store(false, Ordering::Release);
                    let _ = wire::send(&*l, 0, &NodeMsg::Continued);
                }
                Ok(sys::ChildChange::Exited(code)) => break NodeMsg::Exited { code },
                Ok(sys::ChildChange::Killed(sig)) => break NodeMsg::Killed { sig },
                Err(_) => break NodeMsg::Killed { sig: libc::SIGKILL },
            }
        };
        // Reaped by `waitid`: `child` must not be waited for again.
        drop(child);
        e.store(true, Ordering::Release);
        // Everything it wrote goes before its status.
        for o in outputs {
            let _ = o.join();
        }
        let _ = wire::send(&*l, 0, &end);
    });
    loop {
        match link.recv(None) {
            Ok(Some(m)) => match wire::decode(&m) {
                Ok(NodeMsg::Stdin { bytes }) => {
                    let _ = to_stdin.send(bytes);
                }
                Ok(NodeMsg::Signal { sig }) if !ended.load(Ordering::Acquire) => {
                    let _ = sys::kill(pid, sig);
                }
                Ok(NodeMsg::OutputTaken { bytes }) => output_window.release(bytes),
                _ => {}
            },
            Ok(None) => {}
            // The proxy hung up (it ended after the status, or was killed,
            // or its host is gone): nothing may outlive it.
            Err(_) => {
                output_window.close();
                if !ended.load(Ordering::Acquire) {
                    let _ = sys::kill(pid, libc::SIGKILL);
                }
                return;
            }
        }
    }
}

/// Send what `pipe` yields as `Output { fd }` until it closes, at most a
/// window ahead of what the proxy wrote out: a program writing faster
/// than the proxy's reader takes it blocks on its pipe, as on Linux.
fn relay_output(link: &dyn Link, window: &Window, fd: u8, mut pipe: Box<dyn Read + Send>) {
    let mut buf = vec![0u8; CHUNK];
    loop {
        match pipe.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                if !window.acquire(n as u64) {
                    return;
                }
                let msg = NodeMsg::Output {
                    fd,
                    bytes: buf[..n].to_vec(),
                };
                if wire::send(link, 0, &msg).is_err() {
                    return;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

/// Wait (bounded) until the proxy closes the link.
fn linger(link: &dyn Link) {
    let t = Instant::now();
    while t.elapsed() < LINGER {
        if link.recv(Some(LINGER - t.elapsed())).is_err() {
            return;
        }
    }
}

fn os(b: &[u8]) -> &OsStr {
    OsStr::from_bytes(b)
}

/// The program of `req` as a client of this node, in the session of
/// `inherited` with its descriptors if there are any.
fn command(
    req: &SpawnRequest,
    host: &SpawnHost,
    inherited: Option<&Inherited>,
) -> std::io::Result<Command> {
    let Some((argv0, rest)) = req.argv.split_first() else {
        return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
    };
    let mut cmd = Command::new(os(&req.path));
    cmd.arg0(os(argv0)).args(rest.iter().map(|a| os(a)));
    cmd.env_clear();
    let mut other_preloads = Vec::new();
    for e in &req.envp {
        let Some(eq) = e.iter().position(|&b| b == b'=') else {
            continue;
        };
        let (k, v) = (&e[..eq], &e[eq + 1..]);
        if k == b"LD_PRELOAD" {
            other_preloads.extend(
                v.split(|&b| b == b':' || b == b' ')
                    .filter(|p| !p.is_empty() && !p.ends_with(b"libatoll_preload.so"))
                    .map(|p| os(p).to_os_string()),
            );
        }
        if !HOST_BOUND.iter().any(|h| h.as_bytes() == k) {
            cmd.env(os(k), os(v));
        }
    }
    let mut preload = OsString::from(&host.preload);
    for p in other_preloads {
        preload.push(":");
        preload.push(p);
    }
    cmd.env("LD_PRELOAD", preload)
        .env(crate::launch::ENV_PRELOAD, &host.preload)
        .env(atoll_proto::boot::ENV_SOCKET, &host.socket);
    let cwd = Path::new(os(&req.cwd));
    let atoll_cwd = crate::config::under_mount(&host.mount, cwd).map(|_| &req.cwd[..]);
    match atoll_cwd {
        // The kernel has no such directory: the client library starts
        // there, as after an exec.
        Some(_) => {
            cmd.current_dir("/");
        }
        None if cwd.is_dir() => {
            cmd.current_dir(cwd);
        }
        None => {
            cmd.current_dir("/");
        }
    }
    match (inherited, atoll_cwd) {
        // The program joins the session made for it as a new image joins
        // after `execve`, and takes its descriptors as such an image does.
        (Some(inh), _) => {
            let (placeholder, targets, session) = inh.numbers();
            cmd.env(atoll_proto::boot::ENV_STATE, inh.state(atoll_cwd)?)
                .env(atoll_proto::boot::ENV_SESSION_FD, session.to_string());
            sys::inherit_in_child(&mut cmd, placeholder, targets, session);
        }
        (None, Some(c)) => {
            let (k, v) = atoll_client::initial_state_env(&String::from_utf8_lossy(c));
            cmd.env(k, v);
        }
        (None, None) => {}
    }
    // Stdio that is an atoll file or pipe is inherited as that
    // description (put in place over these after std's setup); the rest
    // is relayed through pipes.
    let passed = |fd: i32| inherited.is_some_and(|i| i.fds.iter().any(|f| f.fd == fd));
    let stdio = |fd: i32| {
        if passed(fd) {
            Stdio::null()
        } else {
            Stdio::piped()
        }
    };
    cmd.stdin(stdio(0))
        .stdout(stdio(1))
        .stderr(stdio(2))
        .process_group(0);
    if req.stderr_is_stdout {
        // One pipe for both, as the caller's `2>&1`: the relay keeps the
        // order of what the program writes to either.
        cmd.stderr(Stdio::null());
        sys::stderr_to_stdout_in_child(&mut cmd);
    }
    sys::unblock_terminating_in_child(&mut cmd);
    let (uid, gid) = (rustix::process::getuid(), rustix::process::getgid());
    let user = (uid.as_raw() != req.uid || gid.as_raw() != req.gid)
        .then(|| (req.uid, req.gid, req.groups.clone()));
    if user.is_some() && !uid.is_root() {
        // Only a node run by root can start programs for other users.
        return Err(std::io::Error::from_raw_os_error(libc::EPERM));
    }
    sys::setup_child(
        &mut cmd,
        sys::ChildSetup {
            user,
            umask: req.umask,
            rlimits: req.rlimits.clone(),
        },
    );
    Ok(cmd)
}

#[cfg(test)]
mod tests {
    use super::*;
    use atoll_transport::{Message, TransportError};

    struct From(&'static str);

    impl Link for From {
        fn send(&self, _: Message) -> Result<(), TransportError> {
            Ok(())
        }
        fn recv(&self, _: Option<Duration>) -> Result<Option<Message>, TransportError> {
            Ok(None)
        }
        fn close(&self) {}
        fn peer(&self) -> String {
            self.0.to_string()
        }
        fn is_closed(&self) -> bool {
            false
        }
    }

    fn host() -> SpawnHost {
        SpawnHost {
            socket: "/run/n1/boot.sock".into(),
            mount: "/atoll".into(),
            preload: "/opt/atoll/libatoll_preload.so".into(),
            peers: peer_addresses(&["10.231.0.1:7207".into(), "127.0.0.1:9".into()]),
            watches: Default::default(),
        }
    }

    #[test]
    fn only_peers_may_start_programs() {
        let h = host();
        assert!(h.admits(&From("10.231.0.1:40000")));
        assert!(h.admits(&From("[::ffff:127.0.0.1]:5")));
        assert!(!h.admits(&From("10.231.0.9:40000")));
        assert!(!h.admits(&From("garbage")));
    }

    #[test]
    fn the_program_gets_this_nodes_socket_and_the_callers_atoll_cwd() {
        let req = SpawnRequest {
            path: b"/bin/true".to_vec(),
            argv: vec![b"true".to_vec()],
            envp: vec![
                b"A=1".to_vec(),
                b"ATOLL_SOCKET=/run/n0/boot.sock".to_vec(),
                b"ATOLL_STATE=v1;c:00".to_vec(),
                b"LD_PRELOAD=/x/libatoll_preload.so:/lib/other.so".to_vec(),
            ],
            cwd: b"/atoll/src".to_vec(),
            uid: rustix::process::getuid().as_raw(),
            gid: rustix::process::getgid().as_raw(),
            ..Default::default()
        };
        let cmd = command(&req, &host(), None).unwrap();
        let env: std::collections::HashMap<String, String> = cmd
            .get_envs()
            .filter_map(|(k, v)| Some((k.to_str()?.into(), v?.to_str()?.into())))
            .collect();
        assert_eq!(env["A"], "1");
        assert_eq!(env["ATOLL_SOCKET"], "/run/n1/boot.sock");
        assert_eq!(
            env["LD_PRELOAD"],
            "/opt/atoll/libatoll_preload.so:/lib/other.so"
        );
        assert_eq!(
            env["ATOLL_STATE"],
            atoll_client::initial_state_env("/atoll/src").1
        );
        assert_eq!(cmd.get_current_dir(), Some(Path::new("/")));
        let no_argv = SpawnRequest {
            argv: vec![],
            ..req
        };
        assert!(command(&no_argv, &host(), None).is_err());
    }

    /// With inherited descriptors the program gets the session made for it
    /// and the exec hand-over's state naming them on the placeholder, its
    /// atoll cwd included.
    #[test]
    fn the_program_joins_the_session_made_for_its_descriptors() {
        let (session, _peer) = rustix::net::socketpair(
            rustix::net::AddressFamily::UNIX,
            rustix::net::SocketType::SEQPACKET,
            rustix::net::SocketFlags::CLOEXEC,
            None,
        )
        .unwrap();
        let placeholder =
            rustix::fs::memfd_create("atoll-placeholder", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
        let st = rustix::fs::fstat(&placeholder).unwrap();
        let fds = vec![super::super::wire::InheritedFd {
            fd: 3,
            desc: 5,
            ino: 6,
            flags: libc::O_APPEND as u32,
            ftype: 1,
            ..Default::default()
        }];
        let inh = Inherited {
            session,
            placeholder,
            fds: fds.clone(),
        };
        let req = SpawnRequest {
            path: b"/bin/true".to_vec(),
            argv: vec![b"true".to_vec()],
            cwd: b"/atoll/src".to_vec(),
            uid: rustix::process::getuid().as_raw(),
            gid: rustix::process::getgid().as_raw(),
            fds,
            ..Default::default()
        };
        let cmd = command(&req, &host(), Some(&inh)).unwrap();
        let env: std::collections::HashMap<String, String> = cmd
            .get_envs()
            .filter_map(|(k, v)| Some((k.to_str()?.into(), v?.to_str()?.into())))
            .collect();
        let (_, targets, sock) = inh.numbers();
        assert_eq!(targets, vec![3]);
        assert_eq!(env["ATOLL_SESSION_FD"], sock.to_string());
        assert_eq!(
            env["ATOLL_STATE"],
            inherit::state_text(Some(b"/atoll/src"), &inh.fds, (st.st_dev, st.st_ino))
        );
    }
}
