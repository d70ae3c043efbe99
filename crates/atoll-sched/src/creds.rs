//! Whose program a remote exec starts (Hare §3.6.1: the server "configures
//! the new process based on the RPC's arguments" — but identity is never
//! an argument). A scheduling server often runs as root; the program must
//! start with exactly the credentials a local `execve` by the caller would
//! give it, so they are taken from the kernel, never from the request:
//!
//! * the sender of the `Exec` packet is the `SCM_CREDENTIALS` pid the
//!   kernel attaches (a process cannot name another pid without
//!   `CAP_SYS_ADMIN`), and it must be the process that connected
//!   (`SO_PEERCRED`), pinned by a pidfd (`SO_PEERPIDFD`) so a recycled pid
//!   is noticed;
//! * its identity is `/proc/<pid>/status` (uids, gids, groups, capability
//!   sets, `NoNewPrivs`, seccomp), read through a `/proc/<pid>` directory
//!   descriptor between two reads of the start time, the pidfd still alive.
//!
//! [`plan`] then decides how the forked child becomes the caller
//! ([`Target`], applied by `spawn`), or that the exec must stay local
//! ([`CredError`] → `Refused`): the caller lives in other namespaces, under
//! another root directory or other seccomp filters (a remote start would
//! escape them); or it holds capabilities the child could not be proven to
//! reproduce exactly; or the server lacks the privilege to switch. When the
//! child does switch, it also refuses set-user-ID, set-group-ID and
//! file-capability executables (`spawn`): those run locally, where the
//! kernel computes their privileges from the caller itself.
//!
//! Securebits are not visible in `/proc`; the proxy reports its own and the
//! child applies them. A false report gains nothing: a caller whose
//! securebits could matter (root with less than the server's full
//! capabilities, or a non-root caller holding capabilities) always execs
//! locally, and a switched child never runs a set-id image.

use std::os::fd::{AsFd, OwnedFd};

use rustix::fs::{Mode, OFlags};

/// Capabilities the server needs to become another caller.
const CAP_SETGID: u32 = 6;
const CAP_SETUID: u32 = 7;
const CAP_SETPCAP: u32 = 8;
/// `SO_PEERPIDFD` (Linux 6.5): a pidfd of the process that connected.
const SO_PEERPIDFD: i32 = 77;

/// Why a remote exec must run locally instead.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CredError {
    #[error("caller not verified: {0}")]
    Unverified(&'static str),
    #[error("caller's {0} differs from the server's")]
    Confined(&'static str),
    #[error("caller's capabilities cannot be reproduced")]
    Capabilities,
    #[error("server lacks the privilege to take the caller's identity")]
    Unprivileged,
}

/// A process's identity as `/proc/<pid>/status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Creds {
    /// Real, effective, saved, filesystem.
    pub uid: [u32; 4],
    pub gid: [u32; 4],
    pub groups: Vec<u32>,
    pub cap_inh: u64,
    pub cap_prm: u64,
    pub cap_eff: u64,
    pub cap_bnd: u64,
    pub cap_amb: u64,
    pub no_new_privs: bool,
    /// `Seccomp` mode and `Seccomp_filters` count.
    pub seccomp: (u32, u32),
}

impl Creds {
    /// Parse a `/proc/<pid>/status` text; `None` if a field is missing.
    pub fn parse(status: &str) -> Option<Creds> {
        let field = |k: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(k)?.strip_prefix(':'))
                .map(str::trim)
        };
        let ids = |k: &str| -> Option<[u32; 4]> {
            let v: Vec<u32> = field(k)?
                .split_whitespace()
                .map(|n| n.parse().ok())
                .collect::<Option<_>>()?;
            v.try_into().ok()
        };
        let cap = |k: &str| u64::from_str_radix(field(k)?, 16).ok();
        Some(Creds {
            uid: ids("Uid")?,
            gid: ids("Gid")?,
            groups: field("Groups")?
                .split_whitespace()
                .map(|n| n.parse().ok())
                .collect::<Option<_>>()?,
            cap_inh: cap("CapInh")?,
            cap_prm: cap("CapPrm")?,
            cap_eff: cap("CapEff")?,
            cap_bnd: cap("CapBnd")?,
            cap_amb: cap("CapAmb")?,
            no_new_privs: field("NoNewPrivs")? == "1",
            // Kernels without seccomp have neither line: none applies.
            seccomp: (
                field("Seccomp").and_then(|v| v.parse().ok()).unwrap_or(0),
                field("Seccomp_filters")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0),
            ),
        })
    }

    fn is_root(&self) -> bool {
        self.uid.contains(&0)
    }

    fn same_identity(&self, o: &Creds) -> bool {
        self.uid == o.uid && self.gid == o.gid && self.groups == o.groups && self.caps() == o.caps()
    }

    /// Inheritable, permitted, effective, bounding, ambient.
    pub fn caps(&self) -> [u64; 5] {
        [
            self.cap_inh,
            self.cap_prm,
            self.cap_eff,
            self.cap_bnd,
            self.cap_amb,
        ]
    }
}

/// What the child must do to start the program as the caller.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Target {
    /// Take `creds`' ids and groups (and check the image is not set-id).
    pub switch: bool,
    pub creds: Creds,
    /// Bounding-set capabilities to drop before the switch.
    pub drop_bounding: u64,
    /// Turn on `no_new_privs` (never off: the kernel cannot).
    pub set_no_new_privs: bool,
    /// Securebits to set, when they differ from the server's.
    pub securebits: Option<u32>,
    /// `oom_score_adj` to write, when it differs from the server's.
    pub oom_score_adj: Option<i32>,
}

/// The server's own identity (its thread's; atoll never changes it).
pub struct Server {
    pub creds: Creds,
    pub securebits: u32,
    pub oom_score_adj: i32,
    ns: Vec<Vec<u8>>,
    root: (u64, u64),
    confinement: Vec<Vec<u8>>,
}

/// Per-process files naming what confines a process besides namespaces:
/// its cgroup (resource limits), LSM label, audit login and session. An
/// absent file (kernel without the feature) reads as empty on both sides.
const CONFINEMENT: [&str; 4] = ["cgroup", "attr/current", "loginuid", "sessionid"];

fn confinement(dir: &OwnedFd) -> Vec<Vec<u8>> {
    CONFINEMENT
        .iter()
        .map(|f| read_at(dir, f).unwrap_or_default())
        .collect()
}

/// Namespaces a remote start must share with the caller.
const NAMESPACES: [&str; 8] = ["user", "mnt", "pid", "net", "ipc", "uts", "cgroup", "time"];

fn read_at(dir: &OwnedFd, name: &str) -> Result<Vec<u8>, CredError> {
    let fd = rustix::fs::openat(dir, name, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())
        .map_err(|_| CredError::Unverified("/proc unreadable"))?;
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match rustix::io::read(&fd, &mut buf) {
            Ok(0) => return Ok(out),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => return Err(CredError::Unverified("/proc unreadable")),
        }
    }
}

/// Namespace links (`mnt:[4026531841]`); an absent one (older kernel) is
/// empty on both sides.
fn namespaces(dir: &OwnedFd) -> Vec<Vec<u8>> {
    NAMESPACES
        .iter()
        .map(|n| {
            rustix::fs::readlinkat(dir, format!("ns/{n}"), Vec::new())
                .map(|c| c.into_bytes())
                .unwrap_or_default()
        })
        .collect()
}

fn root_of(dir: &OwnedFd) -> Result<(u64, u64), CredError> {
    let st = rustix::fs::statat(dir, "root", rustix::fs::AtFlags::empty())
        .map_err(|_| CredError::Unverified("root directory unreadable"))?;
    Ok((st.st_dev, st.st_ino))
}

fn proc_dir(path: &str) -> Result<OwnedFd, CredError> {
    rustix::fs::open(
        path,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|_| CredError::Unverified("no /proc entry"))
}

fn oom_of(dir: &OwnedFd) -> Result<i32, CredError> {
    let b = read_at(dir, "oom_score_adj")?;
    std::str::from_utf8(&b)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .ok_or(CredError::Unverified("oom_score_adj"))
}

fn status_of(dir: &OwnedFd) -> Result<Creds, CredError> {
    let s = read_at(dir, "status")?;
    Creds::parse(&String::from_utf8_lossy(&s)).ok_or(CredError::Unverified("status"))
}

/// Field 22 of `/proc/<pid>/stat` (after the command name, which may hold
/// `)`): the start time, which tells a recycled pid apart.
pub fn starttime(stat: &[u8]) -> Option<u64> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    std::str::from_utf8(&stat[close + 1..])
        .ok()?
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()
}

impl Server {
    /// The calling thread's identity (once per server thread).
    pub fn current() -> Result<Server, CredError> {
        let dir = proc_dir("/proc/thread-self")?;
        // SAFETY: PR_GET_SECUREBITS takes no pointer.
        let bits = unsafe { libc::prctl(libc::PR_GET_SECUREBITS, 0, 0, 0, 0) };
        Ok(Server {
            creds: status_of(&dir)?,
            securebits: bits.max(0) as u32,
            oom_score_adj: oom_of(&dir)?,
            ns: namespaces(&dir),
            root: root_of(&dir)?,
            confinement: confinement(&dir),
        })
    }
}

/// The verified identity of the process that sent an `Exec` packet, and
/// the state a local `execve` keeps that the server would otherwise take
/// from the request: a false report of these would be a privilege (a
/// higher hard limit, a negative nice, another process group), so they
/// come from the kernel too.
pub struct Caller {
    pub creds: Creds,
    pub oom_score_adj: i32,
    pub pgid: i32,
    pub nice: i32,
    /// `(resource, soft, hard)`.
    pub rlimits: Vec<(u32, u64, u64)>,
}

/// Fields after the command name of `/proc/<pid>/stat` (field 3 first).
fn stat_fields(stat: &[u8]) -> Vec<&str> {
    let Some(close) = stat.iter().rposition(|&b| b == b')') else {
        return Vec::new();
    };
    std::str::from_utf8(&stat[close + 1..])
        .map(|s| s.split_whitespace().collect())
        .unwrap_or_default()
}

/// Process group (field 5) and nice value (field 19).
pub fn pgid_and_nice(stat: &[u8]) -> Option<(i32, i32)> {
    let f = stat_fields(stat);
    Some((f.get(2)?.parse().ok()?, f.get(16)?.parse().ok()?))
}

/// Every resource limit of `pid` (all of them, or the caller is not
/// verified: its program must not start with the server's).
fn rlimits_of(pid: i32) -> Result<Vec<(u32, u64, u64)>, CredError> {
    (0..16u32)
        .map(|r| {
            let mut lim = libc::rlimit64 {
                rlim_cur: 0,
                rlim_max: 0,
            };
            // SAFETY: prlimit64 with no new limit writes one rlimit64.
            let rc = unsafe { libc::prlimit64(pid, r as _, core::ptr::null(), &mut lim) };
            if rc == 0 {
                Ok((r, lim.rlim_cur, lim.rlim_max))
            } else {
                Err(CredError::Unverified("resource limits"))
            }
        })
        .collect()
}

fn alive(pidfd: &OwnedFd) -> bool {
    // SAFETY: signal 0 with a null siginfo only checks the process exists
    // (a zombie still holds its pid, which then cannot be recycled).
    unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            std::os::fd::AsRawFd::as_raw_fd(pidfd),
            0,
            core::ptr::null::<libc::siginfo_t>(),
            0u32,
        ) == 0
    }
}

fn peer_pidfd(conn: &OwnedFd, pid: rustix::process::Pid) -> Result<OwnedFd, CredError> {
    let mut fd: i32 = -1;
    let mut len = core::mem::size_of::<i32>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `fd`.
    let r = unsafe {
        libc::getsockopt(
            std::os::fd::AsRawFd::as_raw_fd(conn),
            libc::SOL_SOCKET,
            SO_PEERPIDFD,
            (&mut fd as *mut i32).cast(),
            &mut len,
        )
    };
    if r == 0 && fd >= 0 {
        // SAFETY: the kernel just gave us this descriptor.
        return Ok(unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) });
    }
    // Older kernels: the sender is blocked waiting for our answer, so its
    // pid is still its own; the start-time check below covers the rest.
    rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty())
        .map_err(|_| CredError::Unverified("caller gone"))
}

/// Identify the sender of an `Exec` on `conn`: `sender` is the pid the
/// kernel attached to the packet (`SCM_CREDENTIALS`).
pub fn verify_caller(
    conn: &OwnedFd,
    sender: Option<i32>,
    me: &Server,
) -> Result<Caller, CredError> {
    let peer = rustix::net::sockopt::socket_peercred(conn.as_fd())
        .map_err(|_| CredError::Unverified("no peer credentials"))?;
    let pid = peer.pid.as_raw_nonzero().get();
    if sender != Some(pid) {
        return Err(CredError::Unverified(
            "sender is not the connecting process",
        ));
    }
    let pidfd = peer_pidfd(conn, peer.pid)?;
    let dir = proc_dir(&format!("/proc/{pid}"))?;
    let stat = read_at(&dir, "stat")?;
    let t0 = starttime(&stat);
    let (pgid, nice) = pgid_and_nice(&stat).ok_or(CredError::Unverified("stat"))?;
    let creds = status_of(&dir)?;
    let oom_score_adj = oom_of(&dir)?;
    let ns = namespaces(&dir);
    let root = root_of(&dir)?;
    let confined = confinement(&dir);
    let rlimits = rlimits_of(pid)?;
    let t1 = starttime(&read_at(&dir, "stat")?);
    if t0.is_none() || t0 != t1 || !alive(&pidfd) {
        return Err(CredError::Unverified("caller changed while read"));
    }
    if ns != me.ns {
        return Err(CredError::Confined("namespaces"));
    }
    if root != me.root {
        return Err(CredError::Confined("root directory"));
    }
    if confined != me.confinement {
        return Err(CredError::Confined(
            "cgroup, security label or audit session",
        ));
    }
    Ok(Caller {
        creds,
        oom_score_adj,
        pgid,
        nice,
        rlimits,
    })
}

/// How to start `caller`'s program from a child of the server `me`;
/// `claimed_securebits` is the proxy's report (see the module comment).
pub fn plan(caller: &Caller, me: &Server, claimed_securebits: u32) -> Result<Target, CredError> {
    let (c, s) = (&caller.creds, &me.creds);
    // Filters cannot be compared, only counted: the caller normally
    // descends from the process holding the server threads.
    if c.seccomp != s.seccomp {
        return Err(CredError::Confined("seccomp filters"));
    }
    if s.no_new_privs && !c.no_new_privs {
        return Err(CredError::Confined("no_new_privs"));
    }
    let mut t = Target {
        set_no_new_privs: c.no_new_privs && !s.no_new_privs,
        securebits: (claimed_securebits != me.securebits).then_some(claimed_securebits),
        oom_score_adj: (caller.oom_score_adj != me.oom_score_adj).then_some(caller.oom_score_adj),
        ..Default::default()
    };
    if c.same_identity(s) {
        return Ok(t);
    }
    let needed = [CAP_SETUID, CAP_SETGID, CAP_SETPCAP]
        .iter()
        .fold(0u64, |m, &b| m | 1 << b);
    if s.cap_eff & needed != needed {
        return Err(CredError::Unprivileged);
    }
    if c.is_root() {
        // Root with the server's capabilities can do anything the server
        // can; root with fewer runs locally (its securebits are unknown).
        if c.caps() != s.caps() {
            return Err(CredError::Capabilities);
        }
    } else {
        if c.cap_inh | c.cap_prm | c.cap_eff | c.cap_amb != 0 {
            return Err(CredError::Capabilities);
        }
        if c.cap_bnd & !s.cap_bnd != 0 {
            return Err(CredError::Capabilities);
        }
        t.drop_bounding = s.cap_bnd & !c.cap_bnd;
    }
    t.switch = true;
    t.creds = c.clone();
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: &str = "Name:\tid\nUmask:\t0022\nState:\tR (running)\n\
        Uid:\t65534\t65534\t65534\t65534\nGid:\t100\t100\t100\t101\n\
        Groups:\t5 6 \nCapInh:\t0000000000000000\nCapPrm:\t0000000000000000\n\
        CapEff:\t0000000000000000\nCapBnd:\t000001fffeffffff\n\
        CapAmb:\t0000000000000000\nNoNewPrivs:\t1\nSeccomp:\t0\n\
        Seccomp_filters:\t0\n";

    fn root() -> Creds {
        Creds {
            groups: vec![0],
            cap_prm: 0x1fffeffffff,
            cap_eff: 0x1fffeffffff,
            cap_bnd: 0x1fffeffffff,
            ..Default::default()
        }
    }

    fn server(creds: Creds) -> Server {
        Server {
            creds,
            securebits: 0,
            oom_score_adj: 0,
            ns: vec![],
            root: (1, 2),
            confinement: vec![],
        }
    }

    fn caller(creds: Creds) -> Caller {
        Caller {
            creds,
            oom_score_adj: 0,
            pgid: 1,
            nice: 0,
            rlimits: vec![],
        }
    }

    #[test]
    fn status_fields_are_parsed() {
        let c = Creds::parse(STATUS).unwrap();
        assert_eq!(c.uid, [65534; 4]);
        assert_eq!(c.gid, [100, 100, 100, 101]);
        assert_eq!(c.groups, vec![5, 6]);
        assert_eq!(c.cap_bnd, 0x1fffeffffff);
        assert_eq!(c.cap_prm, 0);
        assert!(c.no_new_privs);
        assert_eq!(c.seccomp, (0, 0));
        assert!(Creds::parse("Uid:\t1 2 3\n").is_none());
        let no_groups = STATUS.replace("Groups:\t5 6 ", "Groups:\t");
        assert_eq!(Creds::parse(&no_groups).unwrap().groups, Vec::<u32>::new());
    }

    #[test]
    fn starttime_skips_odd_command_names() {
        let line = b"42 (a) b) S 1 43 42 0 -1 4194304 1 0 0 0 0 0 0 0 20 -5 1 0 777 1 2";
        assert_eq!(starttime(line), Some(777));
        assert_eq!(pgid_and_nice(line), Some((43, -5)));
        assert_eq!(starttime(b"42 (x) S 1"), None);
    }

    #[test]
    fn own_identity_needs_no_switch() {
        let t = plan(&caller(root()), &server(root()), 0).unwrap();
        assert!(!t.switch);
        assert_eq!(t.drop_bounding, 0);
        assert!(!t.set_no_new_privs);
        assert_eq!(t.securebits, None);
    }

    #[test]
    fn a_plain_user_is_switched_to_with_its_bounding_set() {
        let mut u = Creds::parse(STATUS).unwrap();
        u.cap_bnd &= !(1 << 21);
        let t = plan(&caller(u.clone()), &server(root()), 0).unwrap();
        assert!(t.switch);
        assert_eq!(t.creds, u);
        assert_eq!(t.drop_bounding, 1 << 21);
        assert!(t.set_no_new_privs);
    }

    #[test]
    fn capabilities_that_cannot_be_reproduced_stay_local() {
        // A non-root caller holding a capability.
        let mut u = Creds::parse(STATUS).unwrap();
        u.cap_prm = 1 << 13;
        assert_eq!(
            plan(&caller(u), &server(root()), 0).unwrap_err(),
            CredError::Capabilities
        );
        // Root with a reduced bounding set.
        let mut r = root();
        r.cap_bnd &= !(1 << 21);
        r.gid = [5; 4];
        assert_eq!(
            plan(&caller(r), &server(root()), 0).unwrap_err(),
            CredError::Capabilities
        );
        // Root with all capabilities but other groups: switched.
        let mut r = root();
        r.groups = vec![0, 5];
        assert!(plan(&caller(r), &server(root()), 0).unwrap().switch);
    }

    #[test]
    fn an_unprivileged_server_never_switches() {
        let me = Creds {
            uid: [1000; 4],
            gid: [1000; 4],
            cap_bnd: 0x1fffeffffff,
            ..Default::default()
        };
        let other = Creds::parse(STATUS).unwrap();
        assert_eq!(
            plan(&caller(other), &server(me.clone()), 0).unwrap_err(),
            CredError::Unprivileged
        );
        assert!(!plan(&caller(me.clone()), &server(me), 0).unwrap().switch);
    }

    #[test]
    fn confinement_is_never_escaped() {
        let mut c = root();
        c.seccomp = (2, 1);
        assert_eq!(
            plan(&caller(c), &server(root()), 0).unwrap_err(),
            CredError::Confined("seccomp filters")
        );
        let mut s = root();
        s.no_new_privs = true;
        assert_eq!(
            plan(&caller(root()), &server(s), 0).unwrap_err(),
            CredError::Confined("no_new_privs")
        );
    }

    #[test]
    fn oom_score_and_securebits_follow_the_caller() {
        let mut c = caller(root());
        c.oom_score_adj = 500;
        let t = plan(&c, &server(root()), 0x10).unwrap();
        assert_eq!(t.oom_score_adj, Some(500));
        assert_eq!(t.securebits, Some(0x10));
    }

    #[test]
    fn this_process_verifies_as_itself_over_a_socket() {
        use rustix::net::{socketpair, AddressFamily, SocketFlags, SocketType};
        let (a, _b) = socketpair(
            AddressFamily::UNIX,
            SocketType::SEQPACKET,
            SocketFlags::CLOEXEC,
            None,
        )
        .unwrap();
        let me = Server::current().unwrap();
        let pid = std::process::id() as i32;
        assert_eq!(
            verify_caller(&a, Some(pid + 1), &me).err(),
            Some(CredError::Unverified(
                "sender is not the connecting process"
            ))
        );
        let c = verify_caller(&a, Some(pid), &me).unwrap();
        assert_eq!(c.creds.uid, me.creds.uid);
        assert_eq!(c.oom_score_adj, me.oom_score_adj);
        // SAFETY: getpgid(0) only reads our own process group.
        assert_eq!(c.pgid, unsafe { libc::getpgid(0) });
        let mut lim = libc::rlimit64 {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: writes one rlimit64 into `lim`.
        unsafe { libc::prlimit64(0, libc::RLIMIT_NOFILE, core::ptr::null(), &mut lim) };
        let nofile = libc::RLIMIT_NOFILE;
        assert_eq!(
            c.rlimits.iter().find(|l| l.0 == nofile),
            Some(&(nofile, lim.rlim_cur, lim.rlim_max))
        );
    }
}
