//! `execve` of atoll programs and hand-over of client state to the new
//! image.
//!
//! The kernel cannot read atoll files, so the client prepares what it can
//! run: a `#!` script becomes its interpreter (host or atoll) with the
//! script's path as argument (as binfmt_script does); an ELF image is
//! copied into a memfd run with `execveat(AT_EMPTY_PATH)` (or
//! `/proc/self/fd/N` for `posix_spawn`).
//!
//! Every new image must stay an atoll client, even if the program passed a
//! stripped environment (`env -i`): `LD_PRELOAD`, `ATOLL_SOCKET`,
//! `ATOLL_PRELOAD`, `ATOLL_SESSION_FD` and `ATOLL_STATE` are (re)inserted.
//!
//! Session hand-over. Before exec the client asks the instance for a child
//! session (`Fork`) and shares with it every description a surviving
//! (non-`FD_CLOEXEC`) fd refers to; the child session's socket is passed
//! without `O_CLOEXEC` in `ATOLL_SESSION_FD` and the new image `Reattach`es
//! on it. The same plan thus works for `execve` (the old session dies with
//! its socket at exec) and for `posix_spawn` (the parent keeps its own
//! session and drops its copy of the child's socket with the plan). A
//! failed exec drops the plan, which closes the child session.
//!
//! Parent of a remote program. A program started by a scheduling server
//! (Hare §3.6.1) is the server's child, but it *is* the process that
//! called `execve`, whose pid its parent knows and which stays behind as
//! its proxy. So `getppid()` answers what the proxy's would: the proxy's
//! current parent, read from `/proc/<proxy>/stat` at each call (after the
//! caller's parent dies, Linux reparents the proxy to the subreaper or
//! init, and the answer follows as it would for a local exec). The proxy's
//! pid travels in `ATOLL_PROXY_PID` to the program and across its own
//! `execve`s; a forked child is a new process with its real parent. If the
//! proxy is already gone (killed; the server is about to kill the program
//! too), the real parent (the scheduling server) is the answer.

use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd};
use std::sync::atomic::{AtomicI32, Ordering};

use atoll_proto::boot::{ENV_SESSION_FD, ENV_SOCKET, ENV_STATE};
use atoll_proto::{DescId, FileType, InodeId, Request, SessionId};

use crate::error::{err, Error, Result};
use crate::fdtable::{self, DescInfo};
use crate::file;
use crate::path::parse_shebang;
use crate::session::{self, Client, Cwd, Lane, LazyLane};
use crate::state::{Attached, CarriedFd, FdState, State};
use crate::sys;
use crate::walk::{NodeStep, Walker};

use atoll_sched::placement::{self, Policy};

/// Environment variable carrying the absolute path of the preload library.
pub const ENV_PRELOAD: &str = "ATOLL_PRELOAD";
/// Environment variable naming the process a remote program stands for
/// (its proxy): see the module comment.
pub const ENV_PROXY: &str = "ATOLL_PROXY_PID";

mod caught;
mod debuggers;
mod selfexe;
use selfexe::{host_self_exe, SELF_EXE};
pub use selfexe::{is_self_exe, readlink_self_exe, started_from_atoll};
mod foreign;
pub use foreign::LOADER_ENV_PREFIX;
mod handover;
mod hostprog;
use hostprog::HostStep;
mod inherit;
use inherit::Inherited;
pub mod libs;
mod rtld;
mod script;
use handover::{hand_over, hand_over_own_session, passes_own_session};
pub use handover::{prime, restore};
use script::{absolute, next_interpreter};

/// The proxy this process stands for (0: none).
static PROXY: AtomicI32 = AtomicI32::new(0);
/// Our pid when `PROXY` was set: a forked child is not the stand-in.
static PROXY_OWNER: AtomicI32 = AtomicI32::new(0);

fn raw_getpid() -> i32 {
    // SAFETY: getpid takes no arguments.
    unsafe { sys::sc(libc::SYS_getpid, 0, 0, 0, 0) as i32 }
}

/// Read `ATOLL_PROXY_PID` at start-up (and drop it from the environment:
/// a program's children are processes of their own).
pub fn init_proxy_parent() {
    if let Some(pid) = std::env::var(ENV_PROXY)
        .ok()
        .and_then(|v| v.parse::<i32>().ok())
        .filter(|&p| p > 0)
    {
        PROXY.store(pid, Ordering::Relaxed);
        PROXY_OWNER.store(raw_getpid(), Ordering::Relaxed);
    }
    std::env::remove_var(ENV_PROXY);
}

/// The proxy this process stands for, if it is a remote program (not a
/// child forked by one).
pub fn proxy_of_self() -> Option<i32> {
    let p = PROXY.load(Ordering::Relaxed);
    (p > 0 && PROXY_OWNER.load(Ordering::Relaxed) == raw_getpid()).then_some(p)
}

/// `getppid()` of a remote program: its proxy's parent (module comment).
pub fn proxy_getppid() -> i64 {
    // SAFETY: getppid takes no arguments.
    let real = || unsafe { sys::sc(libc::SYS_getppid, 0, 0, 0, 0) };
    let Some(proxy) = proxy_of_self() else {
        return real();
    };
    std::fs::read(format!("/proc/{proxy}/stat"))
        .ok()
        .and_then(|s| stat_ppid(&s))
        .map_or_else(real, i64::from)
}

/// Field 4 (ppid) of a `/proc/<pid>/stat` line; the command name before
/// it may contain spaces and parentheses.
fn stat_ppid(line: &[u8]) -> Option<i32> {
    let close = line.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(&line[close + 1..]).ok()?;
    rest.split_ascii_whitespace().nth(1)?.parse().ok()
}

/// `KEY=value` entry of the environment.
fn env_kv(k: &str, v: &str) -> Vec<u8> {
    format!("{k}={v}").into_bytes()
}

/// Is `e` an entry for variable `k`?
fn env_is(e: &[u8], k: &str) -> bool {
    e.len() > k.len() && e.starts_with(k.as_bytes()) && e[k.len()] == b'='
}
const LD_PRELOAD: &str = "LD_PRELOAD";
/// Interpreter nesting Linux allows for `#!` chains.
const MAX_INTERP_DEPTH: u32 = 4;

/// What `execve` should run, owning every string and pointer array.
pub struct ExecPlan {
    path: CString,
    _argv: Vec<CString>,
    argv_ptrs: Vec<*const libc::c_char>,
    _envp: Vec<CString>,
    envp_ptrs: Vec<*const libc::c_char>,
    /// Directory fd for a relative host path given to `execveat`.
    dirfd: i32,
    flags: i32,
    /// The program image copied into a memfd (atoll ELF).
    exec_fd: Option<OwnedFd>,
    /// The session's socket and the instance descriptors handed over with
    /// it (non-CLOEXEC); dropping the plan closes this process's copies.
    _handed_over: Vec<Inherited>,
    /// Placement cursor of this exec (`atoll_sched::placement`).
    cursor: u64,
    /// Copies of the libraries the new image's loader finds in the mount.
    libs: Option<libs::MountLibs>,
    /// The new image inherits copies of mount files (libraries, or the
    /// program the loader runs): it must start from this process.
    copies_inherited: bool,
    /// Is the affinity the program's own (`cpus::own_affinity`), as the
    /// plan's environment says? Asked once per exec (a `gettid` and a
    /// `sched_getaffinity`), for the environment and for placement alike;
    /// `None`: not asked yet.
    own_affinity: Option<bool>,
    /// The memfd the new image's loader writes its stderr to (`caught`).
    catch: Option<caught::Catch>,
    /// The new image's session.
    session: Option<SessionId>,
}

impl ExecPlan {
    /// Path to hand to `execve`/`posix_spawn`.
    pub fn path(&self) -> &CStr {
        &self.path
    }
    pub fn argv(&self) -> *const *const libc::c_char {
        self.argv_ptrs.as_ptr()
    }
    pub fn envp(&self) -> *const *const libc::c_char {
        self.envp_ptrs.as_ptr()
    }
    /// The memfd holding the program (run with `execveat(fd, "",
    /// AT_EMPTY_PATH)`), if the program is an atoll file.
    pub fn exec_fd(&self) -> Option<i32> {
        self.exec_fd.as_ref().map(|f| f.as_raw_fd())
    }

    /// The memfd a spawned child's loader is to find at its fd 2 (the
    /// spawn adds `dup2(fd, 2)` to the child's file actions), if fd 2 is
    /// an atoll descriptor the child inherits (`caught`).
    pub fn loader_stderr(&self) -> Option<i32> {
        self.catch.as_ref().map(|k| k.raw())
    }

    /// The program was started from this plan by another process
    /// (`posix_spawn`) as child `pid` (0: not known): what it inherits for
    /// its loader is its own to remove (`libs`), and a `wait` that reaps
    /// it finds its session.
    pub fn started(&self, pid: i32) {
        if let Some(l) = &self.libs {
            l.started();
        }
        if let (Some(s), true) = (self.session, pid > 0) {
            crate::reaped::note_child(pid as i64, s);
        }
    }

    /// Perform the exec in this process; returns only on failure (−errno,
    /// or `-ERESTARTNOINTR` when a program signal waits: see
    /// `intr::exec_syscall6`).
    pub fn exec(&self) -> i64 {
        // No pipe writer may copy into the new program (lifted if the
        // exec returns).
        let _quiesced = crate::pipesplit::quiesce_for_exec();
        if let Some(k) = &self.catch {
            k.swap_in();
        }
        // SAFETY: every pointer is owned by the plan and NUL-terminated;
        // on success the process image is replaced.
        let r = unsafe {
            match self.exec_fd() {
                Some(fd) => crate::intr::exec_syscall6(
                    libc::SYS_execveat,
                    [
                        fd as u64,
                        c"".as_ptr() as u64,
                        self.argv() as u64,
                        self.envp() as u64,
                        libc::AT_EMPTY_PATH as u64,
                        0,
                    ],
                ),
                None => crate::intr::exec_syscall6(
                    libc::SYS_execveat,
                    [
                        self.dirfd as u64,
                        self.path.as_ptr() as u64,
                        self.argv() as u64,
                        self.envp() as u64,
                        self.flags as u64,
                        0,
                    ],
                ),
            }
        };
        if let (Some(k), Some(c)) = (&self.catch, session::client()) {
            k.swap_out(c);
        }
        r
    }
}

fn cstring(b: &[u8]) -> Result<CString> {
    CString::new(b).map_err(|_| Error::Errno(libc::EINVAL))
}

fn build(
    path: &[u8],
    argv: &[Vec<u8>],
    envp: &[Vec<u8>],
    dirfd: i32,
    flags: i32,
    exec_fd: Option<OwnedFd>,
    handed_over: Vec<Inherited>,
) -> Result<ExecPlan> {
    let argv_c: Vec<CString> = argv.iter().map(|a| cstring(a)).collect::<Result<_>>()?;
    let envp_c: Vec<CString> = envp.iter().map(|a| cstring(a)).collect::<Result<_>>()?;
    let mut argv_ptrs: Vec<*const libc::c_char> = argv_c.iter().map(|s| s.as_ptr()).collect();
    argv_ptrs.push(core::ptr::null());
    let mut envp_ptrs: Vec<*const libc::c_char> = envp_c.iter().map(|s| s.as_ptr()).collect();
    envp_ptrs.push(core::ptr::null());
    Ok(ExecPlan {
        path: cstring(path)?,
        _argv: argv_c,
        argv_ptrs,
        _envp: envp_c,
        envp_ptrs,
        dirfd,
        flags,
        exec_fd,
        _handed_over: handed_over,
        cursor: placement::peek_cursor(),
        libs: None,
        copies_inherited: false,
        own_affinity: None,
        catch: None,
        session: None,
    })
}

/// Environment for the new image: the program's, minus our variables,
/// plus ours. `LD_PRELOAD` keeps the program's other libraries, with ours
/// first if it was missing.
pub fn rewrite_env(
    env: &[&[u8]],
    preload: Option<&str>,
    socket: &str,
    session_fd: Option<i32>,
    state: &str,
) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = Vec::with_capacity(env.len() + 5);
    let mut ld: Option<Vec<u8>> = None;
    let ours =
        |k: &str, e: &[u8]| e.len() > k.len() && e.starts_with(k.as_bytes()) && e[k.len()] == b'=';
    for e in env {
        if ours(LD_PRELOAD, e) {
            ld = Some(e[LD_PRELOAD.len() + 1..].to_vec());
        } else if ours(ENV_SOCKET, e)
            || ours(ENV_PRELOAD, e)
            || ours(ENV_SESSION_FD, e)
            || ours(ENV_STATE, e)
        {
        } else {
            out.push(e.to_vec());
        }
    }
    let ld_value = match (preload, ld) {
        (Some(p), Some(v)) => {
            let has = v
                .split(|&b| b == b':' || b == b' ')
                .any(|x| x == p.as_bytes());
            if has {
                v
            } else if v.is_empty() {
                p.as_bytes().to_vec()
            } else {
                let mut n = p.as_bytes().to_vec();
                n.push(b':');
                n.extend_from_slice(&v);
                n
            }
        }
        (Some(p), None) => p.as_bytes().to_vec(),
        (None, v) => v.unwrap_or_default(),
    };
    let kv = |k: &str, v: &[u8]| {
        let mut e = k.as_bytes().to_vec();
        e.push(b'=');
        e.extend_from_slice(v);
        e
    };
    if !ld_value.is_empty() {
        out.push(kv(LD_PRELOAD, &ld_value));
    }
    out.push(kv(ENV_SOCKET, socket.as_bytes()));
    if let Some(p) = preload {
        out.push(kv(ENV_PRELOAD, p.as_bytes()));
    }
    if let Some(fd) = session_fd {
        out.push(kv(ENV_SESSION_FD, fd.to_string().as_bytes()));
    }
    out.push(kv(ENV_STATE, state.as_bytes()));
    out
}

/// `(ENV_STATE, value)` that makes the first program of `atoll run` start
/// with an atoll cwd (`atoll run --cwd /atoll/src`).
pub fn initial_state_env(cwd: &str) -> (String, String) {
    let st = State {
        cwd: Some((cwd.as_bytes().to_vec(), None)),
        fds: Vec::new(),
        exe: None,
        locks: false,
        counters: Vec::new(),
        attached: None,
        ..State::default()
    };
    (ENV_STATE.to_string(), st.encode())
}

/// A process started by a static program (its relay's supervisor left
/// the cwd it tracks for this pid in `dir`, `ENV_FOREIGN_CWD`): that cwd
/// in place of the one `state` (the program's environment at its start)
/// names; an empty file means the kernel's cwd. A program stored in the
/// mount also finds its path there (`FOREIGN_EXE_SUFFIX`), for its
/// `/proc/self/exe`. Only for a fresh attach: an exec hand-over from a
/// client carries its own cwd.
pub fn foreign_cwd(state: Option<String>, dir: Option<std::ffi::OsString>) -> Option<String> {
    let Some(dir) = dir else {
        return state;
    };
    let pid = std::process::id().to_string();
    let file = std::path::Path::new(&dir).join(&pid);
    let Ok(cwd) = std::fs::read(&file) else {
        return state;
    };
    let _ = std::fs::remove_file(&file);
    let exe_file = std::path::Path::new(&dir).join(pid + atoll_proto::boot::FOREIGN_EXE_SUFFIX);
    let exe = std::fs::read(&exe_file).ok().filter(|e| !e.is_empty());
    if let Some(e) = &exe {
        let _ = std::fs::remove_file(&exe_file);
        // The kernel named the process after `/dev/fd/N` ("N"); Linux
        // names it after the program's file.
        let base = e.rsplit(|&b| b == b'/').next().unwrap_or(e);
        let mut comm = base[..base.len().min(15)].to_vec();
        comm.push(0);
        // SAFETY: PR_SET_NAME reads a NUL-terminated name of at most 16
        // bytes; this is the only thread at the client's start.
        unsafe { libc::prctl(libc::PR_SET_NAME, comm.as_ptr()) };
    }
    let mut st = state.as_deref().and_then(State::decode).unwrap_or_default();
    st.cwd = (!cwd.is_empty()).then_some((cwd, None));
    st.exe = exe;
    Some(st.encode())
}

/// `(interpreter, optional argument)` of a `#!` line.
type Shebang = (Vec<u8>, Option<Vec<u8>>);

/// The program to run.
enum Program {
    /// A host path (possibly rewritten, e.g. `/atoll/../bin/ls`).
    Host(Option<crate::walk::HostPath>),
    Atoll {
        ino: InodeId,
        ftype: FileType,
    },
}

fn resolve_program(
    c: &Client,
    lane: &LazyLane,
    dirfd: i64,
    path: &[u8],
    flags: i32,
) -> Result<Program> {
    let empty_ok = flags & libc::AT_EMPTY_PATH != 0;
    let follow = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
    if path.is_empty() {
        if !empty_ok {
            return err(libc::ENOENT);
        }
        return match fdtable::get(dirfd) {
            Some(d) => Ok(Program::Atoll {
                ino: d.ino(),
                ftype: d.ftype(),
            }),
            None => Ok(Program::Host(None)),
        };
    }
    // A host program takes no lane (the walker would give up at once).
    if !crate::walk::concerns(c, dirfd, path) {
        return Ok(Program::Host(None));
    }
    let Some(mut w) = Walker::start(c, lane.get()?, dirfd, path)? else {
        return Ok(Program::Host(None));
    };
    match w.node(follow)? {
        NodeStep::Host(p) => Ok(Program::Host(Some(p))),
        NodeStep::Node { ino, ftype, .. } => Ok(Program::Atoll { ino, ftype }),
    }
}

/// Open an atoll program for reading after the exec permission check.
fn open_program(c: &Client, lane: &Lane, ino: InodeId, ftype: FileType) -> Result<DescId> {
    if ftype == FileType::Symlink {
        return err(libc::ELOOP);
    }
    if ftype != FileType::Regular {
        return err(libc::EACCES);
    }
    lane.call_ok(
        c,
        ino.owner(),
        Request::Access {
            ino,
            mask: libc::X_OK as u32,
        },
    )?;
    // Reported as an open to run (`FAN_OPEN_EXEC`), as Linux's `execve`.
    let flags = libc::O_RDONLY as u32 | atoll_proto::inotify::OPEN_EXEC;
    let (desc, _) = file::open_inode(c, lane, ino, flags)?;
    Ok(desc)
}

/// Copy an atoll file into a fresh memfd the kernel can execute.
fn copy_to_memfd(c: &Client, lane: &Lane, desc: DescId, name: &[u8]) -> Result<OwnedFd> {
    let base = name.rsplit(|&b| b == b'/').next().unwrap_or(b"atoll-exec");
    let mname = String::from_utf8_lossy(base).into_owned();
    let fd = rustix::fs::memfd_create(mname.as_str(), rustix::fs::MemfdFlags::CLOEXEC)?;
    let mut buf = vec![0u8; 1 << 16];
    let mut off = 0u64;
    loop {
        let n = file::read_id(c, lane, desc, &mut buf, Some(off))?;
        if n == 0 {
            break;
        }
        sys::write_all(fd.as_raw_fd(), &buf[..n]).map_err(Error::Errno)?;
        off += n as u64;
    }
    Ok(fd)
}

/// A copy of atoll file `ino` for a loader, which only reads what it
/// loads (`rtld`'s program, `libs`'s libraries): opened for reading,
/// copied into a memfd, closed.
fn copy_for_loader(c: &Client, lane: &Lane, ino: InodeId, name: &[u8]) -> Result<OwnedFd> {
    let (desc, _) = file::open_inode(c, lane, ino, libc::O_RDONLY as u32)?;
    let copy = copy_to_memfd(c, lane, desc, name);
    let _ = lane.call_ok(c, desc.server(), Request::Close { desc });
    copy
}

/// Prepare `execve(path, argv, envp)` (also used by the preload's
/// `posix_spawn` wrappers). Errors are errno values.
pub fn prepare_exec(
    path: &CStr,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
) -> core::result::Result<ExecPlan, i32> {
    let plan = prepare_inner(libc::AT_FDCWD as i64, path.to_bytes(), argv, envp, 0, true)
        .map_err(|e| e.errno())?;
    // A spawn is a fork + exec: the parent moves its cursor on, like a
    // fork parent, so successive spawns are spread.
    placement::on_fork_parent();
    Ok(plan)
}

/// `execveat` flavour of [`prepare_exec`] (this process's own `execve`).
pub fn prepare_execat(
    dirfd: i64,
    path: &[u8],
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    flags: i32,
) -> Result<ExecPlan> {
    prepare_inner(dirfd, path, argv, envp, flags, false)
}

/// `spawn`: the image runs in a new child process, not in this one.
#[inline(never)]
fn prepare_inner(
    dirfd: i64,
    path: &[u8],
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    flags: i32,
    spawn: bool,
) -> Result<ExecPlan> {
    let argv: Vec<Vec<u8>> = sys::user_str_array(argv)?
        .into_iter()
        .map(<[u8]>::to_vec)
        .collect();
    let env = sys::user_str_array(envp)?;
    let Some(c) = session::client() else {
        let env: Vec<Vec<u8>> = env.into_iter().map(<[u8]>::to_vec).collect();
        return build(path, &argv, &env, dirfd as i32, flags, None, Vec::new());
    };
    // Taken when something needs a server: the exec of a host program by
    // a child that touched nothing in the mount asks for no lane.
    let lane = LazyLane::new(c);
    let mut argv = argv;
    let mut prog_path: Vec<u8> = path.to_vec();
    let mut dirfd = dirfd;
    let mut flags = flags;
    let mut exec_fd = None;
    let mut exe = None;
    let mut text = None;
    let mut depth = 0;
    if is_self_exe(&prog_path) {
        // Linux runs the image's own program again; atoll names it: the
        // atoll path it was started from, or the host file the kernel
        // knows (a remote exec would otherwise start whatever the
        // scheduling server's /proc/self/exe is).
        prog_path = match SELF_EXE.get() {
            Some(p) => p.clone(),
            None => host_self_exe()?,
        };
        dirfd = libc::AT_FDCWD as i64;
    }
    loop {
        let resolved = match resolve_program(c, &lane, dirfd, &prog_path, flags) {
            // A bare name (`posix_spawnp`, `execvp` before its PATH search)
            // that is not in the atoll cwd is left to Linux.
            Err(Error::Errno(e))
                if e == libc::ENOENT && depth == 0 && !prog_path.contains(&b'/') =>
            {
                Program::Host(None)
            }
            r => r?,
        };
        match resolved {
            Program::Host(rewritten) => {
                if let Some(p) = rewritten {
                    prog_path = p.as_bytes().to_vec();
                    dirfd = libc::AT_FDCWD as i64;
                }
                if flags != 0 {
                    break;
                }
                match hostprog::step(c, dirfd, &prog_path)? {
                    HostStep::Kernel => break,
                    HostStep::IntoMount(atoll) => {
                        prog_path = atoll;
                        dirfd = libc::AT_FDCWD as i64;
                    }
                    HostStep::Interpreter(shebang) => {
                        prog_path =
                            next_interpreter(&mut depth, &mut argv, dirfd, &prog_path, shebang)?;
                        dirfd = libc::AT_FDCWD as i64;
                    }
                }
            }
            Program::Atoll { ino, ftype } => {
                let lane = lane.get()?;
                let desc = open_program(c, lane, ino, ftype)?;
                let r = (|| -> Result<Option<Shebang>> {
                    let mut head = [0u8; 256];
                    let n = file::read_id(c, lane, desc, &mut head, Some(0))?;
                    if let Some((interp, arg)) = parse_shebang(&head[..n]) {
                        if n == head.len() && !head.contains(&b'\n') {
                            return err(libc::ENOEXEC);
                        }
                        return Ok(Some((interp.to_vec(), arg.map(<[u8]>::to_vec))));
                    }
                    if n == 0 {
                        return err(libc::ENOEXEC);
                    }
                    // One `IN_ACCESS` for the copy, as for one read.
                    let copy = || copy_to_memfd(c, lane, desc, &prog_path);
                    exec_fd = Some(crate::inotify::one_access(c, lane, copy)?);
                    text = Some(ino);
                    let abs = absolute(c, dirfd, &prog_path)?;
                    exe = Some(
                        crate::path::normalize_abs(&abs).map_or(abs, |p| p.as_bytes().to_vec()),
                    );
                    Ok(None)
                })();
                let _ = lane.call_ok(c, desc.server(), Request::Close { desc });
                match r? {
                    None => break,
                    Some(shebang) => {
                        prog_path =
                            next_interpreter(&mut depth, &mut argv, dirfd, &prog_path, shebang)?;
                        dirfd = libc::AT_FDCWD as i64;
                        flags = 0;
                    }
                }
            }
        }
    }
    // An image that cannot load the client (statically linked, or run in
    // secure execution) takes nothing of atoll across the exec. A static
    // one runs behind a relay (below) that copies the atoll descriptors it
    // inherits and serves the paths it names in the mount; a secure one
    // only when it inherits atoll descriptors, else as it is, with no
    // session and no private descriptor handed over.
    let mut foreign_image = match &exec_fd {
        Some(fd) => foreign::is_static(fd.as_raw_fd()).then_some(foreign::Foreign::Static),
        None if dirfd == libc::AT_FDCWD as i64 => foreign::foreign_at(dirfd, &prog_path),
        None => None,
    };
    // The loader run as a program (`ldd`): a program of the mount it is
    // to load is handed to it as a copy.
    let loaded = match (&foreign_image, &exec_fd) {
        (None, None) if rtld::named_like_loader(&prog_path) => loaded_program(c, &lane, &mut argv)?,
        _ => None,
    };
    if foreign_image.is_none() && exec_fd.is_none() {
        debuggers::quiet_sigsys(&prog_path, &mut argv);
    }
    let lists = loaded.as_ref().is_some_and(|l| l.2 == rtld::Mode::Lists);
    if foreign_image.is_none() && (lists || foreign::traces_loading(&env)) && !foreign::in_relay() {
        foreign_image = Some(foreign::Foreign::Traced);
    }
    let inherits = if foreign_image.is_some() {
        foreign::inherited()
    } else {
        Vec::new()
    };
    let relayed = match foreign_image {
        Some(foreign::Foreign::Static) => true,
        Some(foreign::Foreign::Secure) => !inherits.is_empty(),
        // The relay also removes the copies of its libraries, which a
        // listing loader never starts a client to do.
        Some(foreign::Foreign::Traced) => true,
        None => false,
    };
    if foreign_image.is_some() && !relayed && exec_fd.is_none() {
        // A dynamic program it starts attaches anew (`ATOLL_SOCKET`) in
        // this cwd.
        let st = State {
            cwd: c.cwd().map(|w| (w.path.clone(), Some(w.ino.0))),
            ..State::default()
        };
        let env = rewrite_env(
            &env,
            c.preload.as_deref(),
            &c.socket_path,
            None,
            &st.encode(),
        );
        return build(
            &prog_path,
            &argv,
            &env,
            dirfd as i32,
            flags,
            None,
            Vec::new(),
        );
    }
    // Libraries the new image's loader would look for in the mount.
    let mount_libs = match (&exec_fd, &loaded) {
        (Some(fd), _) => libs::prepare(
            c,
            &lane,
            libs::Image::Copy {
                fd: fd.as_raw_fd(),
                path: exe.as_deref().unwrap_or(&prog_path),
            },
            &env,
        ),
        (None, Some((_, _, rtld::Mode::Verifies))) => None,
        (None, Some((fd, path, _))) => libs::prepare(
            c,
            &lane,
            libs::Image::Copy {
                fd: fd.as_raw_fd(),
                path,
            },
            &env,
        ),
        (None, None) => libs::prepare(
            c,
            &lane,
            libs::Image::Host {
                dirfd,
                path: &prog_path,
            },
            &env,
        ),
    };
    let handed = if passes_own_session(c, &lane, spawn, text) {
        hand_over_own_session(c, exe)?
    } else {
        hand_over(c, &lane, exe, text, spawn)?
    };
    let mut env = rewrite_env(
        &env,
        c.preload.as_deref(),
        &c.socket_path,
        handed.socket.as_ref().map(|f| f.as_raw_fd()),
        &handed.state,
    );
    env.retain(|e| !env_is(e, libs::ENV_LIBS));
    if let Some(l) = &mount_libs {
        let own = libs::llp_of(&env.iter().map(|e| &e[..]).collect::<Vec<_>>()).map(<[u8]>::to_vec);
        env.retain(|e| !env_is(e, "LD_LIBRARY_PATH"));
        env.extend(l.env(own.as_deref()));
    }
    // The new image inherits the placement policy and cursor (Hare §3.6.1).
    let key = placement::ENV_PLACEMENT.as_bytes();
    env.retain(|e| !(e.starts_with(key) && e.get(key.len()) == Some(&b'=')));
    env.push(placement::env_entry(placement::peek_cursor()));
    // An affinity the program chose stays the new image's (`cpus`).
    let key = crate::cpus::ENV_AFFINITY.as_bytes();
    env.retain(|e| !(e.starts_with(key) && e.get(key.len()) == Some(&b'=')));
    let own_affinity = crate::cpus::own_affinity();
    env.extend(crate::cpus::env_entry(own_affinity));
    // A remote program's new image still stands for the same proxy; a
    // spawned child is a process of its own.
    env.retain(|e| !env_is(e, ENV_PROXY));
    if let Some(p) = proxy_of_self().filter(|_| !spawn) {
        env.push(env_kv(ENV_PROXY, &p.to_string()));
    }
    // The relay of an image that cannot load the client (`foreign`).
    let mut relay_image = None;
    if relayed {
        let serves = (foreign_image == Some(foreign::Foreign::Static)).then_some(&c.mount[..]);
        let image = match &exec_fd {
            Some(fd) => {
                // The relay starts the program from our memfd, which it
                // inherits.
                sys::fcntl_int(fd.as_raw_fd(), libc::F_SETFD, 0);
                Some(format!("/proc/self/fd/{}", fd.as_raw_fd()).into_bytes())
            }
            None => Some(prog_path.clone()),
        };
        if let Some((relay, rargv)) =
            image.and_then(|i| foreign::divert(&c.socket_path, serves, &i, &argv, &inherits))
        {
            prog_path = relay;
            argv = rargv;
            flags = 0;
            relay_image = exec_fd.take();
            foreign::hide_loader_vars(&mut env);
            // The relay's pipes to the program are kernel pipes.
            let key = crate::pipe::ENV_PIPES.as_bytes();
            env.retain(|e| !(e.starts_with(key) && e.get(key.len()) == Some(&b'=')));
            env.push(env_kv(crate::pipe::ENV_PIPES, "host"));
        }
    }
    // Another node's program: this process (or the spawned child) becomes
    // its proxy instead. A spawn's relative path stays local: the child
    // may change directory (`posix_spawn_file_actions_addchdir_np`) before
    // it execs, so this process's cwd does not say what the path names.
    if exec_fd.is_none()
        && relay_image.is_none()
        && mount_libs.is_none()
        && loaded.is_none()
        && (!spawn || prog_path.first() == Some(&b'/'))
    {
        let cursor = placement::peek_cursor();
        if let Some((proxy, pargv)) =
            crate::nodeplace::divert(&env, &c.socket_path, &prog_path, dirfd, &argv, cursor)
        {
            prog_path = proxy;
            argv = pargv;
        }
    }
    let (path_bytes, dirfd, flags) = match &exec_fd {
        Some(fd) => (
            format!("/proc/self/fd/{}", fd.as_raw_fd()).into_bytes(),
            libc::AT_FDCWD,
            0,
        ),
        None => (prog_path, dirfd as i32, flags),
    };
    let copied_program = loaded.is_some();
    let kept = handed
        .socket
        .into_iter()
        .chain(handed.carried)
        .chain(relay_image.map(Inherited::made))
        .chain(loaded.map(|(fd, _, _)| Inherited::made(fd)))
        .collect();
    let mut plan = build(&path_bytes, &argv, &env, dirfd, flags, exec_fd, kept)?;
    plan.copies_inherited = mount_libs.is_some() || copied_program;
    plan.libs = mount_libs;
    plan.own_affinity = Some(own_affinity);
    plan.catch = handed.catch;
    plan.session = handed.session;
    Ok(plan)
}

/// For the loader run as a program: the program of the mount it is to
/// load, copied into a memfd it inherits and put in its place in `argv`
/// (`rtld`), with its absolute path. `None` when the program is the
/// host's (the loader opens it itself).
fn loaded_program(
    c: &Client,
    lane: &LazyLane,
    argv: &mut Vec<Vec<u8>>,
) -> Result<Option<(OwnedFd, Vec<u8>, rtld::Mode)>> {
    let Some((at, mode)) = rtld::program_arg(argv) else {
        return Ok(None);
    };
    let path = argv[at].clone();
    let Ok(Program::Atoll { ino, ftype }) =
        resolve_program(c, lane, libc::AT_FDCWD as i64, &path, 0)
    else {
        return Ok(None);
    };
    if ftype != FileType::Regular {
        return Ok(None);
    }
    let lane = lane.get()?;
    // The loader only reads the program (a program it runs must also be
    // executable for it, which it checks itself on the copy's mode).
    let copy = copy_for_loader(c, lane, ino, &path)?;
    sys::fcntl_int(copy.as_raw_fd(), libc::F_SETFD, 0);
    let name = format!("/proc/self/fd/{}", copy.as_raw_fd()).into_bytes();
    *argv = rtld::substitute(argv, at, mode == rtld::Mode::Runs, &name);
    let abs = absolute(c, libc::AT_FDCWD as i64, &path)?;
    let abs = crate::path::normalize_abs(&abs).map_or(abs, |p| p.as_bytes().to_vec());
    Ok(Some((copy, abs, mode)))
}

/// Perform `execve` of a prepared plan where the placement policy says
/// (Hare §3.6.1): here (a plain exec, always so with `--placement local`),
/// in place after moving to another core (`--exec-via place`, the
/// default), or on another core's scheduling server with this process
/// staying behind as its proxy (`--exec-via spawn`). Returns only on
/// failure (−errno).
pub fn execute(plan: &ExecPlan) -> i64 {
    // The new image starts with the affinity and slice the program left.
    crate::msgbound::before_exec();
    let policy = placement::policy();
    // Local placement, or an affinity the program chose (`taskset`): the
    // program runs where it is.
    if policy == Policy::Local || plan.own_affinity.unwrap_or_else(crate::cpus::own_affinity) {
        return plan.exec();
    }
    let Some(c) = session::client() else {
        return plan.exec();
    };
    let Some(dir) = std::path::Path::new(&c.socket_path).parent() else {
        return plan.exec();
    };
    let Some(table) = crate::loadmap::get(dir) else {
        return plan.exec();
    };
    let here = placement::pinned_core();
    let core = match placement::choose(policy, plan.cursor, table, here) {
        Some(k) if Some(k) != here => k,
        other => {
            if let Some(k) = other {
                table.count_exec(k);
            }
            return plan.exec();
        }
    };
    // What the kernel would refuse at once is refused here, without a
    // round trip (execvp tries every PATH entry this way).
    if plan.exec_fd.is_none() && !plan.path.is_empty() {
        // SAFETY: `dirfd` is the caller's execveat directory (or AT_FDCWD);
        // the borrow ends with the call.
        let dirfd = unsafe { std::os::fd::BorrowedFd::borrow_raw(plan.dirfd) };
        if let Err(e) = rustix::fs::accessat(
            dirfd,
            plan.path.as_c_str(),
            rustix::fs::Access::EXEC_OK,
            rustix::fs::AtFlags::empty(),
        ) {
            return -(e.raw_os_error() as i64);
        }
    }
    if placement::exec_via() == placement::ExecVia::Place {
        // Move to the chosen core and exec in place: pid, parent, group
        // and tracer stay, as without atoll; the core's scheduling server
        // counts the process there until it ends.
        match atoll_sched::place_self(dir, core) {
            Ok(()) => {}
            Err(atoll_sched::PlaceError::Uncounted(_)) => table.count_exec(core),
            Err(atoll_sched::PlaceError::NotMoved(_)) => {
                table.count_exec(here.unwrap_or_else(rustix::thread::sched_getcpu))
            }
        }
        return plan.exec();
    }
    if plan.copies_inherited {
        // The copies it inherits are this process's descriptors.
        table.count_exec(here.unwrap_or_else(rustix::thread::sched_getcpu));
        return plan.exec();
    }
    // The program stands for this process (or for the proxy this process
    // already stands for): its getppid() is that process's parent.
    let stands_for = proxy_of_self().unwrap_or_else(raw_getpid);
    let mut envp: Vec<Vec<u8>> = plan
        ._envp
        .iter()
        .map(|a| a.to_bytes().to_vec())
        .filter(|e| !env_is(e, ENV_PROXY))
        .collect();
    envp.push(env_kv(ENV_PROXY, &stands_for.to_string()));
    let image = atoll_sched::Image {
        path: plan.path.to_bytes(),
        argv: plan._argv.iter().map(|a| a.to_bytes().to_vec()).collect(),
        envp,
        flags: plan.flags,
        program_fd: plan.exec_fd(),
        dirfd: (plan.dirfd != libc::AT_FDCWD).then_some(plan.dirfd),
    };
    // The program's loader writes to the catch at fd 2, which travels
    // with the other descriptors (`caught`).
    if let Some(k) = &plan.catch {
        k.swap_in();
    }
    let r = atoll_sched::remote_exec(dir, core, image);
    if let Some(k) = &plan.catch {
        k.swap_out(c);
    }
    match r {
        Err(atoll_sched::RemoteError::Exec(e)) => -(e as i64),
        // Nothing started: run here after all.
        Err(atoll_sched::RemoteError::Fallback(_)) => {
            table.count_exec(here.unwrap_or_else(rustix::thread::sched_getcpu));
            plan.exec()
        }
        Ok(never) => match never {},
    }
}

#[cfg(test)]
mod tests;
