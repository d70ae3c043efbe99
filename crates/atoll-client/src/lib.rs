//! atoll's client library logic: what every program linked with
//! `libatoll_preload.so` runs instead of Linux's file system calls.
//!
//! Layer map:
//! * **this crate** turns one system call `(nr, [u64; 6])` into atoll
//!   requests, or answers [`Dispatch::Host`] so Linux runs it unchanged;
//!   * `syscalls` — the table of every call atoll looks at (number →
//!     handler, when it is atoll's, support level) and the handlers, one
//!     module per family; [`may_concern`] and [`dispatch`] below are its
//!     entry points, `docs/SYSCALLS.md` its generated listing;
//!   * `fork` — the fork hooks (sessions and descriptions for the child);
//!   * `session` — bootstrap (Attach/Reattach/NewLane/Fork), lanes, RPC;
//!   * `names` — file servers reached by name (`/fs/server/<i>`), bound
//!     once and re-bound when a member restarts or moves (fos §3.3);
//!   * `walk` + `path` — path resolution one component at a time;
//!   * `fdtable` — lock-free descriptor table over placeholder fds;
//!   * `fdpath` — `/dev/fd/N`, `/proc/self/fd/N`, `/dev/stderr` reopen
//!     an atoll descriptor as Linux's magic links do;
//!   * `hybrid` — offsets kept in the client until a description is
//!     shared (Hare §3.5.1);
//!   * `file` (data, fds), `meta` (attributes, xattrs), `ns` (names,
//!     directories, cwd), `exec` + `state` (exec hand-over);
//!   * `partial` — `read`/`write` with a partly accessible buffer;
//!   * `remotefds` — the descriptors a program started on another node
//!     inherits (described and shared by its proxy);
//!   * `dcache` — directory-lookup cache fed by server invalidations
//!     (Hare §3.7.2);
//!   * `mapping` — which address ranges map which atoll file, so owners
//!     keep mapped blocks from other files;
//!   * `incoherent` — private block copies for `--island incoherent`
//!     (Hare §3.3.1 close-to-open on non-coherent hardware);
//!   * `pipecopy`, `copymap` — a copy island (Cosh §5), whose processes
//!     map no buffer cache: pipe bytes through the pipe's server, `mmap`
//!     as private memory filled and written back by copy;
//!   * `sys` and `cache` — the only `unsafe`: raw syscalls, program
//!     memory, buffer-cache copies;
//! * below: `atoll-proto` (typed messages) over `atoll-msg` (shared-memory
//!   rings), to the file servers of `atoll-server`;
//! * above: `atoll-preload` (libc wrappers and the Syscall User Dispatch
//!   handler) calls [`init`], [`may_concern`], [`dispatch`], the fork hooks
//!   and [`prepare_exec`].
//!
//! Every emulated call runs on a *lane* taken for its duration (lock-free),
//! so concurrent threads and signal handlers re-entering `dispatch` never
//! wait for each other. Errors are typed inside and become `-errno` once,
//! in [`dispatch`].

// Path buffers live on the stack by design (no allocation on the walk):
// enums carrying one are large, and that is the point.
#![allow(clippy::large_enum_variant)]

mod adapt;
mod affinity;
mod bcast;
mod cache;
mod counters;
mod cpus;
pub use counters::count_trap;
mod copymap;
mod creds;
mod dcache;
mod dirperm;
mod dnotify;
mod envfds;
mod error;
mod exec;
mod exitclose;
mod fanotify;
mod fast;
mod fdname;
mod fdpass;
mod fdpath;
mod fdpub;
mod fdtable;
mod file;
mod fixedhash;
mod fork;
mod forkgate;
mod forkshare;
mod fsize;
pub mod hostlink;
mod hybrid;
mod imagetag;
mod incoherent;
mod inotify;
pub mod intr;
mod lease;
mod loadmap;
mod lockmarks;
mod mapping;
mod meta;
mod mountentry;
mod msgbound;
mod msgdata;
mod names;
mod nodeplace;
mod ns;
mod openattr;
mod partial;
mod pastend;
pub mod path;
mod pipe;
mod pipecopy;
mod pipeepoll;
mod pipefifo;
mod pipepoll;
mod pipesplit;
mod pipeticket;
mod postattr;
mod procfd;
mod proclink;
mod procmounts;
mod rcache;
mod reaped;
pub mod remotefds;
mod resend;
mod ring;
mod session;
mod sizes;
pub mod state;
mod sys;
mod syscalls;
mod uncoalesced;
mod unixsock;
mod walk;

use atoll_proto::boot::{ENV_FOREIGN_CWD, ENV_SESSION_FD, ENV_SOCKET, ENV_STATE};
use atoll_proto::SessionId;

pub use error::Error;
pub use exec::libs::{remove_named as exec_libs_remove, ENV_LIBS};
pub use exec::{
    initial_state_env, prepare_exec, prepare_execat, rewrite_env, ExecPlan, ENV_PRELOAD,
    LOADER_ENV_PREFIX,
};
pub use fork::{fork_child, fork_parent, fork_prepare, ForkPrep};
pub use meta::{ATOLL_DEV, ATOLL_DEV_MAJOR, ATOLL_DEV_MINOR};
pub use syscalls::{rows as syscall_rows, Row as SyscallRow, Support};

// What the other layers share with the handlers: descriptor arguments read
// as Linux reads an `int`, and the stat replies (a pipe end's too).
pub(crate) use syscalls::common::{fdarg, stat_out, statx_out};

/// What to do with a system call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dispatch {
    /// Not atoll's: issue the original system call to Linux unchanged.
    Host,
    /// Handled: the raw system-call result (value ≥ 0, or −errno).
    Done(i64),
}

/// Internal outcome of an emulated call.
pub(crate) enum Out {
    Done(i64),
    /// Not atoll's after all.
    Host,
    /// The path left atoll: run the call on Linux with this path.
    Rehost(walk::HostPath),
}

/// Do the instance's clients rewrite trapped system-call sites
/// (`--syscall-sites`)? False when this process is no client.
pub fn rewrites_syscall_sites() -> bool {
    session::client()
        .is_some_and(|c| c.info.syscall_sites == atoll_proto::boot::SyscallSites::Rewrite)
}

/// Do the instance's clients share the sites they rewrite through its
/// table of remembered sites (not `--without remembered-sites`)?
pub fn remembers_syscall_sites() -> bool {
    session::client().is_some_and(|c| !c.info.without.remembered_sites)
}

/// Join the instance named by `ATOLL_SOCKET` (or restore the session
/// inherited across `execve`). Returns false when this process is not an
/// atoll client; every later call then answers `Dispatch::Host`.
pub fn init() -> bool {
    if active() {
        return true;
    }
    let Ok(sock) = std::env::var(ENV_SOCKET) else {
        return false;
    };
    // The loader is done with the libraries an exec copied from the mount.
    exec::libs::at_start();
    let preload = std::env::var(ENV_PRELOAD).ok();
    let inherited = std::env::var(ENV_SESSION_FD)
        .ok()
        .and_then(|v| v.parse::<i32>().ok())
        .filter(|&fd| {
            sys::fstat_id(fd).is_ok_and(|(_, _, mode)| mode & libc::S_IFMT == libc::S_IFSOCK)
        });
    let mut state = std::env::var(ENV_STATE).ok();
    if inherited.is_none() {
        state = exec::foreign_cwd(state, std::env::var_os(ENV_FOREIGN_CWD));
    }
    // The session an exec handed over whole, joined without a round trip.
    let carried = state
        .as_deref()
        .and_then(state::State::decode)
        .and_then(|st| st.attached)
        .filter(|_| inherited.is_some());
    // atoll's own descriptors as the environment names them (`envfds`).
    let named = carried.as_ref().map(|a| {
        let cache = a.cache.map_or(-1, |k| k.fd);
        (inherited.unwrap_or(-1), cache, a.control.fd)
    });
    sys::init_pid();
    atoll_sched::placement::init_from_env();
    cpus::init_from_env();
    msgbound::init_from_env();
    exec::init_proxy_parent();
    // Stale values must not reach programs started behind our back.
    std::env::remove_var(ENV_SESSION_FD);
    std::env::remove_var(ENV_STATE);
    fdtable::set_closer(file::closer);
    let c = match session::attach(&sock, inherited, preload.clone(), carried) {
        Ok(c) => c,
        Err(_) if inherited.is_some() => match session::attach(&sock, None, preload, None) {
            Ok(c) => c,
            Err(_) => return false,
        },
        Err(_) => return false,
    };
    if let Some(st) = state {
        exec::restore(c, &st, inherited.is_some());
    }
    let now = c.private_fds();
    fdpub::publish_at_start(named == Some((now[0], now[2], now[3])) && now[1] < 0 && now[4] < 0);
    pipe::init();
    counters::install_exit_report();
    true
}

/// Is this process attached to an instance?
pub fn active() -> bool {
    session::client().is_some()
}

/// Cheap test used before `dispatch` in hot, signal-sensitive paths: may
/// this system call concern atoll at all? (E.g. `mmap` only with an atoll
/// fd, `brk`/`futex` never.) Lock-free and allocation-free.
pub fn may_concern(nr: i64, a: &[u64; 6]) -> bool {
    // A path checked here is checked again by `dispatch` (see
    // `sys::forget_paths`): the program may change its memory in between.
    sys::forget_paths();
    let r = syscalls::concerns(nr, a);
    sys::forget_paths();
    r
}

/// A host-path call that the kernel answered `ENOENT`, rewritten onto the
/// atoll path a host symlink leads it to (`hostlink`): the new arguments
/// and the buffer their path lives in. The caller dispatches them.
pub fn through_host_link(nr: i64, args: &[u64; 6]) -> Option<(Box<path::PathBuf>, [u64; 6])> {
    let c = session::client()?;
    sys::forget_paths();
    let r = hostlink::rewrite(c, nr, args);
    sys::forget_paths();
    r
}

/// Emulate system call `nr` with raw arguments `args` (x86-64 Linux ABI).
pub fn dispatch(nr: i64, args: &[u64; 6]) -> Dispatch {
    let Some(c) = session::client() else {
        return Dispatch::Host;
    };
    // Paths checked during this call are remembered for its duration only.
    sys::forget_paths();
    // `/proc/self/cwd/…` and the like lead into the mount (`proclink`).
    let proc_path = hostlink::rewrite_proc(c, nr, args);
    let args = proc_path.as_ref().map_or(args, |(_, again)| again);
    let r = match syscalls::run(c, nr, args) {
        Ok(Out::Done(v)) => Dispatch::Done(v),
        Ok(Out::Host) => Dispatch::Host,
        Ok(Out::Rehost(p)) => Dispatch::Done(syscalls::common::rehost(nr, args, &p)),
        Err(e) => Dispatch::Done(-(e.errno() as i64)),
    };
    sys::forget_paths();
    r
}

/// The process is about to end (`exit_group`, also from `_exit`, which
/// runs no `atexit` handler): data held privately goes back first — the
/// incoherent emulation's private copies and a copy island's shared
/// mappings — as Linux's page cache already holds it (Hare §3.3.1's
/// flush at exit).
pub fn before_exit() {
    if let Some(c) = session::client() {
        incoherent::write_back(c);
        copymap::sync_all(c);
        exitclose::release_pipe_ends();
    }
    // `_exit` runs no `atexit` handler: its counters go out here (after
    // `exit`, the handler took them and this finds none).
    counters::report_at_exit();
}

/// As the process exits, after its exit report: does it hold nothing that
/// a later system call could concern (no atoll descriptor, mapping or
/// private copy of file data)? Then what remains of `exit` (stdio's flush
/// of host descriptors, `exit_group`) may go straight to Linux.
pub fn nothing_left_at_exit() -> bool {
    session::client().is_some()
        && fdtable::fds().is_empty()
        && mapping::is_empty()
        && copymap::is_empty()
}

/// The session id (tests and `--stats`).
pub fn session_id() -> Option<SessionId> {
    session::client().map(|c| c.session_id())
}

/// Load a plain value from the program's memory: `EFAULT` where the
/// kernel would give it, never a fault (for the preload library's own
/// emulations, such as `rt_sigaction`).
pub fn read_user<T: Copy>(ptr: u64) -> core::result::Result<T, i32> {
    sys::get_user(ptr)
}

/// Store a plain value into the program's memory (`EFAULT` as above).
pub fn write_user<T: Copy>(ptr: u64, v: T) -> core::result::Result<(), i32> {
    sys::put_user(ptr, v)
}

/// The program's C string at `ptr` (a path): `EFAULT` or `ENAMETOOLONG`
/// as the kernel would answer, never a fault.
pub fn user_path<'a>(ptr: u64) -> core::result::Result<&'a [u8], i32> {
    // Outside `dispatch`: nothing may be remembered past this call.
    sys::forget_paths();
    let r = sys::user_path(ptr);
    sys::forget_paths();
    r
}

/// May `[addr, addr + len)` hold pages of an atoll file this process
/// mapped? (A `MAP_FIXED` mapping there must reach [`dispatch`].) One
/// atomic load while the process maps none.
pub fn maps_atoll_pages(addr: u64, len: u64) -> bool {
    mapping::overlaps(addr, len)
}

/// A `SIGBUS` (`BUS_ADRERR`) at `addr` in program code: if it is a page of
/// an atoll mapping past the end of its file that the file now covers,
/// map it and return true (the access runs again); see `pastend`.
pub fn resolve_fault(addr: u64) -> bool {
    match session::client() {
        Some(c) => pastend::resolve(c, addr),
        None => false,
    }
}

/// Is `fd` an atoll descriptor of this process?
pub fn is_atoll_fd(fd: i32) -> bool {
    fdtable::is_atoll(fd as i64)
}
