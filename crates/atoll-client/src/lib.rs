//! atoll's client library logic: what every program linked with
//! `libatoll_preload.so` runs instead of Linux's file system calls.
//!
//! Layer map:
//! * **this crate** turns one system call `(nr, [u64; 6])` into atoll
//!   requests, or answers [`Dispatch::Host`] so Linux runs it unchanged;
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
mod error;
mod exec;
mod fanotify;
mod fast;
mod fdname;
mod fdpath;
mod fdpub;
mod fdtable;
mod file;
mod forkgate;
mod forkshare;
pub mod hostlink;
mod hybrid;
mod imagetag;
mod incoherent;
mod inotify;
pub mod intr;
mod loadmap;
mod mapping;
mod meta;
mod msgbound;
mod msgdata;
mod names;
mod nodeplace;
mod ns;
mod partial;
mod pastend;
pub mod path;
mod pipe;
mod pipecopy;
mod pipeepoll;
mod pipesplit;
mod pipeticket;
mod procfd;
mod proclink;
mod procmounts;
mod resend;
mod ring;
mod session;
pub mod state;
mod sys;
mod uncoalesced;
mod unixsock;
mod walk;

use std::os::fd::{IntoRawFd, OwnedFd};
use std::sync::atomic::Ordering;

use atoll_proto::boot::{ENV_SESSION_FD, ENV_SOCKET, ENV_STATE};
use atoll_proto::{Request, SessionId, SetAttr, TimeSet};

pub use error::Error;
pub use exec::{
    initial_state_env, prepare_exec, prepare_execat, rewrite_env, ExecPlan, ENV_PRELOAD,
};
pub use meta::{ATOLL_DEV, ATOLL_DEV_MAJOR, ATOLL_DEV_MINOR};

use error::{err, Result};
use meta::Target;
use path::PathBuf;
use session::Client;

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
    let preload = std::env::var(ENV_PRELOAD).ok();
    let inherited = std::env::var(ENV_SESSION_FD)
        .ok()
        .and_then(|v| v.parse::<i32>().ok())
        .filter(|&fd| {
            sys::fstat_id(fd).is_ok_and(|(_, _, mode)| mode & libc::S_IFMT == libc::S_IFSOCK)
        });
    let state = std::env::var(ENV_STATE).ok();
    sys::init_pid();
    atoll_sched::placement::init_from_env();
    cpus::init_from_env();
    msgbound::init_from_env();
    exec::init_proxy_parent();
    // Stale values must not reach programs started behind our back.
    std::env::remove_var(ENV_SESSION_FD);
    std::env::remove_var(ENV_STATE);
    fdtable::set_closer(file::closer);
    let c = match session::attach(&sock, inherited, preload.clone()) {
        Ok(c) => c,
        Err(_) if inherited.is_some() => match session::attach(&sock, None, preload) {
            Ok(c) => c,
            Err(_) => return false,
        },
        Err(_) => return false,
    };
    if let Some(st) = state {
        exec::restore(c, &st, inherited.is_some());
    }
    fdpub::publish_at_start();
    pipe::init();
    counters::install_exit_report();
    true
}

/// Is this process attached to an instance?
pub fn active() -> bool {
    session::client().is_some()
}

/// Does the path argument at `ptr` (relative to `dirfd`) concern atoll?
pub(crate) fn path_concerns(c: &Client, dirfd: i64, ptr: u64) -> bool {
    match sys::user_path(ptr) {
        Ok([]) => fdtable::is_atoll(dirfd) || (dirfd == libc::AT_FDCWD as i64 && c.cwd().is_some()),
        Ok(p) => {
            walk::concerns(c, dirfd, p)
                || names_atoll_fd(p)
                || (p.starts_with(b"/proc/") && proclink::through(c, p, true).is_some())
        }
        Err(libc::ENAMETOOLONG) => true,
        Err(_) => ptr == 0 && fdtable::is_atoll(dirfd),
    }
}

/// `/dev/fd/N`, `/proc/self/fd/N`, `/dev/stderr`, … of an atoll
/// descriptor: outside the mount, but opening it reopens an atoll file
/// (see `fdpath`).
fn names_atoll_fd(path: &[u8]) -> bool {
    path.first() == Some(&b'/') && pipe::fd_path(path).is_some_and(fdtable::is_atoll)
}

/// `/proc/self/mounts` and its relatives (see `procmounts`), or the
/// process's own fd directory (see `procfd`).
fn names_proc_table(ptr: u64) -> bool {
    sys::user_path(ptr).is_ok_and(|p| {
        procmounts::names_table(p).is_some()
            || procfd::names_fd_dir(p)
            || procfd::other_fd_dir(p).is_some()
    })
}

/// `/proc/self/exe` of an image started from the mount (see
/// `exec::readlink_self_exe`), or a cwd or descriptor link of `/proc`
/// that atoll answers (`proclink`).
fn names_proc_link(c: &Client, ptr: u64) -> bool {
    sys::user_path(ptr).is_ok_and(|p| {
        (exec::started_from_atoll() && exec::is_self_exe(p)) || proclink::answers(c, p)
    })
}

/// System calls whose first argument is a descriptor they act on (and
/// that concern atoll when it is an atoll descriptor). On one of atoll's
/// private descriptors they answer `EBADF`: those are the library's, and a
/// program probing its descriptors (`fstat` of every number, as CPython's
/// `fd_status` does) must not find them.
#[allow(non_upper_case_globals)]
fn on_descriptor(nr: i64) -> bool {
    use libc::*;
    matches!(
        nr,
        SYS_read
            | SYS_write
            | SYS_pread64
            | SYS_pwrite64
            | SYS_readv
            | SYS_writev
            | SYS_preadv
            | SYS_pwritev
            | SYS_preadv2
            | SYS_pwritev2
            | SYS_lseek
            | SYS_fstat
            | SYS_fchmod
            | SYS_fchown
            | SYS_ftruncate
            | SYS_fallocate
            | SYS_fsync
            | SYS_fdatasync
            | SYS_syncfs
            | SYS_sync_file_range
            | SYS_fstatfs
            | SYS_fgetxattr
            | SYS_fsetxattr
            | SYS_flistxattr
            | SYS_fremovexattr
            | SYS_flock
            | SYS_ioctl
            | SYS_fadvise64
            | SYS_readahead
            | SYS_fcntl
    )
}

pub(crate) fn fdarg(v: u64) -> i64 {
    v as i32 as i64
}

/// Cheap test used before `dispatch` in hot, signal-sensitive paths: may
/// this system call concern atoll at all? (E.g. `mmap` only with an atoll
/// fd, `brk`/`futex` never.) Lock-free and allocation-free.
pub fn may_concern(nr: i64, a: &[u64; 6]) -> bool {
    // A path checked here is checked again by `dispatch` (see
    // `sys::forget_paths`): the program may change its memory in between.
    sys::forget_paths();
    let r = concerns(nr, a);
    sys::forget_paths();
    r
}

#[allow(non_upper_case_globals)]
fn concerns(nr: i64, a: &[u64; 6]) -> bool {
    use libc::*;
    let Some(c) = session::client() else {
        return false;
    };
    let cwd = || -> i64 { AT_FDCWD as i64 };
    let at = |i: usize| fdtable::is_atoll(fdarg(a[i]));
    match nr {
        SYS_open => path_concerns(c, cwd(), a[0]) || names_proc_table(a[0]),
        SYS_openat => path_concerns(c, fdarg(a[0]), a[1]) || names_proc_table(a[1]),
        SYS_creat | SYS_stat | SYS_lstat | SYS_access | SYS_mkdir | SYS_rmdir | SYS_unlink
        | SYS_chmod | SYS_chown | SYS_lchown | SYS_truncate | SYS_utimes | SYS_utime
        | SYS_statfs | SYS_mknod | SYS_getxattr | SYS_lgetxattr | SYS_setxattr | SYS_lsetxattr
        | SYS_listxattr | SYS_llistxattr | SYS_removexattr | SYS_lremovexattr => {
            path_concerns(c, cwd(), a[0])
        }
        // RESOLVE_IN_ROOT starts even an absolute path at the dirfd.
        SYS_openat2 => path_concerns(c, fdarg(a[0]), a[1]) || at(0),
        SYS_newfstatat | SYS_statx | SYS_faccessat | SYS_faccessat2 | SYS_mkdirat
        | SYS_unlinkat | SYS_fchmodat | SYS_fchmodat2 | SYS_fchownat | SYS_utimensat
        | SYS_futimesat | SYS_mknodat => path_concerns(c, fdarg(a[0]), a[1]),
        SYS_readlink => path_concerns(c, cwd(), a[0]) || names_proc_link(c, a[0]),
        SYS_readlinkat => path_concerns(c, fdarg(a[0]), a[1]) || names_proc_link(c, a[1]),
        SYS_rename | SYS_link => path_concerns(c, cwd(), a[0]) || path_concerns(c, cwd(), a[1]),
        SYS_renameat | SYS_renameat2 | SYS_linkat => {
            path_concerns(c, fdarg(a[0]), a[1]) || path_concerns(c, fdarg(a[2]), a[3])
        }
        SYS_symlink => path_concerns(c, cwd(), a[1]),
        SYS_symlinkat => path_concerns(c, fdarg(a[1]), a[2]),
        SYS_getdents | SYS_getdents64 => at(0) || procfd::is_listing(fdarg(a[0])),
        nr if on_descriptor(nr) => at(0) || c.is_private_fd(a[0] as i32),
        SYS_close => at(0) || c.is_private_fd(a[0] as i32) || procfd::is_listing(fdarg(a[0])),
        SYS_dup => at(0) || c.is_private_fd(a[0] as i32),
        SYS_dup2 | SYS_dup3 => at(0) || at(1) || c.is_private_fd(a[1] as i32),
        SYS_close_range => true,
        SYS_fchdir => at(0) || c.cwd().is_some(),
        SYS_chdir => c.cwd().is_some() || path_concerns(c, cwd(), a[0]),
        SYS_getcwd => c.cwd().is_some(),
        SYS_mmap => {
            (a[3] as i32 & MAP_ANONYMOUS == 0 && at(4))
                || (a[3] as i32 & MAP_FIXED != 0
                    && (mapping::overlaps(a[0], a[1]) || copymap::overlaps(a[0], a[1])))
        }
        SYS_munmap => mapping::overlaps(a[0], a[1]) || copymap::overlaps(a[0], a[1]),
        SYS_msync => copymap::overlaps(a[0], a[1]),
        SYS_mremap => {
            mapping::overlaps(a[0], a[1].max(1))
                || (a[3] as i32 & MREMAP_FIXED != 0 && mapping::overlaps(a[4], a[2]))
                || copymap::overlaps(a[0], a[1].max(1))
        }
        SYS_execve | SYS_execveat | SYS_umask | SYS_io_uring_setup => true,
        nr if creds::changes_credentials(nr) => true,
        SYS_getppid => exec::proxy_of_self().is_some(),
        SYS_sched_getaffinity | SYS_sched_setaffinity => true,
        SYS_copy_file_range | SYS_splice => at(0) || at(2),
        SYS_sendfile => at(0) || at(1),
        SYS_poll | SYS_ppoll => fdtable::any(),
        SYS_inotify_add_watch => at(0) || path_concerns(c, cwd(), a[1]),
        SYS_inotify_rm_watch => at(0),
        SYS_fanotify_mark => path_concerns(c, fdarg(a[3]), a[4]) || (a[4] == 0 && at(3)) || at(0),
        SYS_name_to_handle_at => path_concerns(c, fdarg(a[0]), a[1]),
        SYS_epoll_ctl => at(2),
        SYS_bind | SYS_connect | SYS_sendto | SYS_sendmsg | SYS_getsockname | SYS_getpeername
        | SYS_accept | SYS_accept4 | SYS_recvfrom | SYS_recvmsg => unixsock::may_concern(c, nr, a),
        _ => pipe::may_concern(nr),
    }
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
    let r = match run(c, nr, args) {
        Ok(Out::Done(v)) => Dispatch::Done(v),
        Ok(Out::Host) => Dispatch::Host,
        Ok(Out::Rehost(p)) => Dispatch::Done(rehost(nr, args, &p)),
        Err(e) => Dispatch::Done(-(e.errno() as i64)),
    };
    sys::forget_paths();
    r
}

/// Run a path call on Linux with the path rewritten (it left atoll).
#[allow(non_upper_case_globals)]
fn rehost(nr: i64, a: &[u64; 6], p: &PathBuf) -> i64 {
    use libc::*;
    let (pi, di) = match nr {
        SYS_openat | SYS_openat2 | SYS_newfstatat | SYS_statx | SYS_faccessat | SYS_faccessat2
        | SYS_mkdirat | SYS_unlinkat | SYS_readlinkat | SYS_fchmodat | SYS_fchmodat2
        | SYS_fchownat | SYS_utimensat | SYS_futimesat | SYS_mknodat => (1, Some(0)),
        SYS_symlink | SYS_inotify_add_watch => (1, None),
        SYS_name_to_handle_at => (1, Some(0)),
        SYS_fanotify_mark => (4, Some(3)),
        SYS_symlinkat => (2, Some(1)),
        _ => (0, None),
    };
    let mut b = *a;
    b[pi] = p.as_ptr() as u64;
    if let Some(d) = di {
        b[d] = AT_FDCWD as u64;
    }
    // SAFETY: the program's own call with its path argument replaced by
    // our NUL-terminated buffer, which outlives the call. It may block (a
    // host FIFO): restarted for SA_RESTART handlers (see `intr`).
    unsafe { intr::restartable_host_syscall6(nr, b) }
}

fn done(v: i64) -> Result<Out> {
    Ok(Out::Done(v))
}

/// Resolve a path argument and run `f` on the node (or hand the call back
/// to Linux). Checks cheaply before taking a lane.
#[inline(never)]
fn on_node(
    c: &Client,
    dirfd: i64,
    ptr: u64,
    follow: bool,
    empty_ok: bool,
    f: impl Fn(&session::Lane, atoll_proto::InodeId, atoll_proto::FileType) -> Result<Out>,
) -> Result<Out> {
    on_entry(c, dirfd, ptr, follow, empty_ok, |l, ino, ft, _| {
        f(l, ino, ft)
    })
}

/// [`on_node`] for a change the directory of the entry the path named must
/// hear of (`inotify`): `f` also gets that entry.
fn on_entry(
    c: &Client,
    dirfd: i64,
    ptr: u64,
    follow: bool,
    empty_ok: bool,
    f: impl Fn(
        &session::Lane,
        atoll_proto::InodeId,
        atoll_proto::FileType,
        Option<&walk::Entry>,
    ) -> Result<Out>,
) -> Result<Out> {
    if !(path_concerns(c, dirfd, ptr) || (ptr == 0 && empty_ok && fdtable::is_atoll(dirfd))) {
        return Ok(Out::Host);
    }
    let lane = c.lane()?;
    // The name was resolved to an inode with one message and the operation
    // goes to the inode with another; a rename or unlink in between can free
    // that inode (ENOENT from its owner) although the *name* still exists,
    // naming a new inode. Walk again, as Linux's lookup would have seen the
    // new inode: a reader of a name replaced by rename never sees it missing.
    let mut stale_retries = 8;
    loop {
        let outcome = match meta::resolve(c, &lane, dirfd, ptr, follow, empty_ok)? {
            Target::Host => Ok(Out::Host),
            Target::Rehost(p) => Ok(Out::Rehost(p)),
            Target::Node { ino, ftype, entry } => f(&lane, ino, ftype, entry.as_ref()),
        };
        match outcome {
            Err(Error::Errno(libc::ENOENT)) if ptr != 0 && stale_retries > 0 => stale_retries -= 1,
            other => return other,
        }
    }
}

/// Run `f` with the description behind atoll fd `fd`, else hand to Linux.
#[inline(never)]
fn on_fd(
    c: &Client,
    fd: i64,
    f: impl FnOnce(&session::Lane, &fdtable::DescRef) -> Result<Out>,
) -> Result<Out> {
    let Some(d) = fdtable::get(fd) else {
        return Ok(Out::Host);
    };
    let lane = c.lane()?;
    f(&lane, &d)
}

#[inline(never)]
fn stat_out(c: &Client, lane: &session::Lane, ino: atoll_proto::InodeId, buf: u64) -> Result<Out> {
    let a = meta::getattr(c, lane, ino)?;
    let mut st = meta::to_stat(&a);
    if a.nlink == 0 && inotify::is_queue_inode(ino) {
        inotify::anon_stat(&mut st);
    }
    sys::put_user(buf, st)?;
    done(0)
}

#[inline(never)]
fn statx_out(c: &Client, lane: &session::Lane, ino: atoll_proto::InodeId, buf: u64) -> Result<Out> {
    let a = meta::getattr(c, lane, ino)?;
    let mut x = meta::to_statx(&a);
    if a.nlink == 0 && inotify::is_queue_inode(ino) {
        inotify::anon_statx(&mut x);
    }
    sys::put_user(buf, x)?;
    done(0)
}

fn chown_set(u: u64, g: u64) -> SetAttr {
    let u = u as u32;
    let g = g as u32;
    SetAttr {
        uid: (u != u32::MAX).then_some(u),
        gid: (g != u32::MAX).then_some(g),
        ..SetAttr::NONE
    }
}

fn chmod_set(mode: u64) -> SetAttr {
    SetAttr {
        perm: Some(mode as u32 & 0o7777),
        ..SetAttr::NONE
    }
}

fn times_set((atime, mtime): (TimeSet, TimeSet)) -> SetAttr {
    SetAttr {
        atime,
        mtime,
        ..SetAttr::NONE
    }
}

fn setattr(
    c: &Client,
    lane: &session::Lane,
    ino: atoll_proto::InodeId,
    via: Option<&walk::Entry>,
    set: SetAttr,
) -> Result<Out> {
    if set.size.is_some() {
        // Truncation zeroes and frees blocks at the server (and the inode
        // reuses freed blocks first): private copies of them must go back
        // and be dropped first, or stale bytes reappear (incoherent mode).
        incoherent::invalidate(c);
    }
    meta::setattr(c, lane, ino, via, set)?;
    if let Some(size) = set.size {
        pastend::truncated(c, ino, size);
    }
    done(0)
}

/// Open-style entry: cheap check, then the walk.
#[inline(never)]
fn open_at(c: &Client, dirfd: i64, ptr: u64, flags: u32, mode: u32) -> Result<Out> {
    open_resolved(c, dirfd, ptr, flags, mode, 0)
}

/// `open_at` under `openat2`'s `RESOLVE_*` flags.
fn open_resolved(
    c: &Client,
    dirfd: i64,
    ptr: u64,
    flags: u32,
    mode: u32,
    resolve: u64,
) -> Result<Out> {
    let path = sys::user_path(ptr)?;
    if let Some(o) = procmounts::open(c, path, flags)? {
        return Ok(o);
    }
    if resolve == 0 && procfd::names_fd_dir(path) {
        // SAFETY: the program's own path (checked) and flags.
        let r = unsafe {
            sys::sc(
                libc::SYS_openat,
                libc::AT_FDCWD as i64 as u64,
                ptr,
                flags as u64,
                mode as u64,
            )
        };
        procfd::mark(r, r >= 0);
        return Ok(Out::Done(r));
    }
    if resolve == 0 {
        if let Some(pid) = procfd::other_fd_dir(path) {
            // Another process's descriptors: without atoll's own, when it
            // is a process of the instance (its table says which).
            // SAFETY: the program's own path (checked) and flags.
            let r = unsafe {
                sys::sc(
                    libc::SYS_openat,
                    libc::AT_FDCWD as i64 as u64,
                    ptr,
                    flags as u64,
                    mode as u64,
                )
            };
            procfd::mark(r, false);
            if let Some(t) = (r >= 0).then(|| fdpub::open_table(pid)).flatten() {
                if let Some(list) = fdpub::read_private(t) {
                    procfd::mark_other(r, &list);
                }
                sys::close(t);
            }
            return Ok(Out::Done(r));
        }
    }
    if path.first() == Some(&b'/') && resolve & walk::RESOLVE_NO_MAGICLINKS == 0 {
        if let Some(o) = pipe::reopen(c, path, flags)? {
            return Ok(o);
        }
        if let Some(o) = fdpath::reopen(c, path, flags)? {
            return Ok(o);
        }
    }
    // Under IN_ROOT an absolute path starts at `dirfd`, not at `/`.
    let rooted = resolve & walk::RESOLVE_IN_ROOT != 0 && path.first() == Some(&b'/');
    let concerns = if rooted {
        walk::concerns(c, dirfd, b".")
    } else {
        walk::concerns(c, dirfd, path)
    };
    if path.is_empty() || !concerns {
        return Ok(Out::Host);
    }
    let lane = c.lane()?;
    file::open(c, &lane, dirfd, path, flags, mode, resolve)
}

/// A path-and-parent entry (mkdir, unlink, …): cheap check, then `f`.
#[inline(never)]
fn on_path(
    c: &Client,
    dirfd: i64,
    ptr: u64,
    f: impl FnOnce(&session::Lane, &[u8]) -> Result<Out>,
) -> Result<Out> {
    let path = sys::user_path(ptr)?;
    if path.is_empty() || !walk::concerns(c, dirfd, path) {
        return Ok(Out::Host);
    }
    let lane = c.lane()?;
    f(&lane, path)
}

/// Offset argument of pread-style calls: negative is `EINVAL`.
fn offset(v: u64) -> Result<u64> {
    if (v as i64) < 0 {
        return err(libc::EINVAL);
    }
    Ok(v)
}

/// `close_range(first, last, flags)`: never touches private fds, and drops
/// atoll fds from the table.
#[inline(never)]
fn do_close_range(c: &Client, first: u64, last: u64, flags: u64) -> Result<Out> {
    if first > last {
        return err(libc::EINVAL);
    }
    let (first, last) = (
        first.min(u32::MAX as u64) as u32,
        last.min(u32::MAX as u64) as u32,
    );
    let mut private: Vec<u32> = [&c.socket_fd, &c.template_fd, &c.cache_fd]
        .iter()
        .map(|f| f.load(Ordering::Relaxed))
        .chain(core::iter::once(fdpub::fd()))
        .filter(|&f| f >= 0 && (first..=last).contains(&(f as u32)))
        .map(|f| f as u32)
        .collect();
    private.sort_unstable();
    let cloexec = flags & libc::CLOSE_RANGE_CLOEXEC as u64 != 0;
    if !cloexec {
        let lane = c.lane()?;
        for fd in fdtable::fds() {
            if (first..=last).contains(&(fd as u32)) {
                let _ = file::close(c, &lane, fd as i64);
            }
        }
    }
    let mut lo = first;
    for p in private.iter().copied().chain(core::iter::once(u32::MAX)) {
        let hi = if p == u32::MAX {
            last
        } else {
            p.wrapping_sub(1)
        };
        if p != lo && lo <= hi && (p == u32::MAX || p > lo) {
            // SAFETY: integer arguments only.
            let r = unsafe { sys::sc(libc::SYS_close_range, lo as u64, hi as u64, flags, 0) };
            if r < 0 {
                return done(r);
            }
        }
        if p == u32::MAX {
            break;
        }
        lo = p + 1;
        if lo > last || lo == 0 {
            break;
        }
    }
    done(0)
}

#[allow(non_upper_case_globals)]
fn run(c: &'static Client, nr: i64, a: &[u64; 6]) -> Result<Out> {
    use libc::*;
    let cwd = AT_FDCWD as i64;
    let fd0 = fdarg(a[0]);
    if on_descriptor(nr) && c.is_private_fd(fd0 as i32) {
        return err(EBADF);
    }
    if let Some(o) = pipe::route(c, nr, a)? {
        return Ok(o);
    }
    match nr {
        SYS_bind | SYS_connect | SYS_sendto | SYS_sendmsg | SYS_getsockname | SYS_getpeername
        | SYS_accept | SYS_accept4 | SYS_recvfrom | SYS_recvmsg => {
            Ok(unixsock::route(c, nr, a)?.unwrap_or(Out::Host))
        }
        nr if creds::changes_credentials(nr) => done(creds::change(c, nr, a)),
        SYS_umask => {
            // SAFETY: integer argument.
            let old = unsafe { sys::sc(SYS_umask, a[0], 0, 0, 0) };
            c.umask.store(a[0] as u32 & 0o777, Ordering::Relaxed);
            done(old)
        }
        SYS_getppid => done(exec::proxy_getppid()),
        SYS_sched_getaffinity => cpus::getaffinity(c, a),
        SYS_sched_setaffinity => cpus::setaffinity(a),
        SYS_inotify_add_watch => inotify::add_watch(c, fd0, a[1], a[2] as u32),
        SYS_inotify_rm_watch => inotify::rm_watch(c, fd0, a[1] as i32),
        SYS_fanotify_mark => fanotify::mark(c, a),
        SYS_name_to_handle_at => fanotify::name_to_handle(c, a),
        // io_uring submits file operations the kernel runs without a system
        // call atoll could see (on placeholder descriptors, or on host paths
        // in the program's name). Answer as a kernel built without it, so
        // programs fall back to ordinary calls (liburing, Python, Rust
        // runtimes all do on ENOSYS).
        SYS_io_uring_setup => err(ENOSYS),
        SYS_open => open_at(c, cwd, a[0], a[1] as u32, a[2] as u32),
        SYS_creat => open_at(
            c,
            cwd,
            a[0],
            (O_CREAT | O_WRONLY | O_TRUNC) as u32,
            a[1] as u32,
        ),
        SYS_openat => open_at(c, fd0, a[1], a[2] as u32, a[3] as u32),
        SYS_openat2 => {
            if (a[3] as usize) < core::mem::size_of::<libc::open_how>() {
                return err(EINVAL);
            }
            let how: libc::open_how = sys::get_user(a[2])?;
            // Linux's build_open_how/copy_struct_from_user: unknown bits
            // and a mode without a creating flag are EINVAL.
            let creating = how.flags & (O_CREAT | O_TMPFILE) as u64 != 0;
            if how.flags > u32::MAX as u64
                || how.resolve & !walk::RESOLVE_ALL != 0
                || how.mode & !0o7777 != 0
                || (!creating && how.mode != 0)
                || how.resolve & (walk::RESOLVE_BENEATH | walk::RESOLVE_IN_ROOT)
                    == (walk::RESOLVE_BENEATH | walk::RESOLVE_IN_ROOT)
            {
                return err(EINVAL);
            }
            if how.resolve & walk::RESOLVE_CACHED != 0 {
                // Linux answers EAGAIN when the lookup needs more than its
                // caches; atoll's lookups are messages, so always.
                return err(EAGAIN);
            }
            open_resolved(c, fd0, a[1], how.flags as u32, how.mode as u32, how.resolve)
        }
        SYS_read | SYS_pread64 => on_fd(c, fd0, |l, d| {
            let off = if nr == SYS_read {
                None
            } else {
                Some(offset(a[3])?)
            };
            let (ptr, len) = (a[1], a[2] as usize);
            match sys::user_slice_mut(ptr, len) {
                Ok(buf) => done(file::read_desc(c, l, d, buf, off)? as i64),
                Err(e) => partial::read(c, l, d, (ptr, len), off, e),
            }
        }),
        SYS_write | SYS_pwrite64 => on_fd(c, fd0, |l, d| {
            let off = if nr == SYS_write {
                None
            } else {
                Some(offset(a[3])?)
            };
            let (ptr, len) = (a[1], a[2] as usize);
            match sys::user_slice(ptr, len) {
                Ok(buf) => done(file::write_desc(c, l, d, buf, off)? as i64),
                Err(e) => partial::write(c, l, d, (ptr, len), off, e),
            }
        }),
        SYS_readv => on_fd(c, fd0, |l, d| done(file::readv(c, l, d, a[1], a[2], None)?)),
        SYS_writev => on_fd(c, fd0, |l, d| {
            done(file::writev(c, l, d, a[1], a[2], None)?)
        }),
        SYS_preadv => on_fd(c, fd0, |l, d| {
            done(file::readv(c, l, d, a[1], a[2], Some(offset(a[3])?))?)
        }),
        SYS_pwritev => on_fd(c, fd0, |l, d| {
            done(file::writev(c, l, d, a[1], a[2], Some(offset(a[3])?))?)
        }),
        SYS_preadv2 | SYS_pwritev2 => on_fd(c, fd0, |l, d| {
            let off = if a[3] as i64 == -1 {
                None
            } else {
                Some(offset(a[3])?)
            };
            if nr == SYS_preadv2 {
                done(file::readv(c, l, d, a[1], a[2], off)?)
            } else {
                done(file::writev(c, l, d, a[1], a[2], off)?)
            }
        }),
        SYS_lseek => on_fd(c, fd0, |l, d| {
            done(file::lseek(c, l, d, a[1] as i64, a[2] as u32)?)
        }),
        SYS_close => {
            if c.is_private_fd(fd0 as i32) {
                return err(EBADF);
            }
            procfd::mark(fd0, false);
            if !fdtable::is_atoll(fd0) {
                return Ok(Out::Host);
            }
            let lane = c.lane()?;
            done(file::close(c, &lane, fd0)?)
        }
        SYS_close_range => do_close_range(c, a[0], a[1], a[2]),
        SYS_dup => {
            if c.is_private_fd(fd0 as i32) {
                return err(EBADF);
            }
            let Some(d) = fdtable::get(fd0) else {
                return Ok(Out::Host);
            };
            let r = sys::fcntl_int(fd0 as i32, F_DUPFD, 0);
            if r >= 0 {
                file::after_dup(r, &d);
            }
            done(r)
        }
        SYS_dup2 => done(file::dup3(c, fd0, fdarg(a[1]), 0, true)?),
        SYS_dup3 => {
            if a[2] as i32 & !O_CLOEXEC != 0 {
                return err(EINVAL);
            }
            done(file::dup3(c, fd0, fdarg(a[1]), a[2] as i32, false)?)
        }
        SYS_fcntl => on_fd(c, fd0, |l, d| file::fcntl(c, l, fd0, d, a[1] as i32, a[2])),
        SYS_flock => on_fd(c, fd0, |l, d| done(file::flock(c, l, d, a[1] as i32)?)),
        SYS_ioctl => on_fd(c, fd0, |l, d| file::ioctl(c, l, d, a[1], a[2])),
        SYS_stat => on_node(c, cwd, a[0], true, false, |l, ino, _| {
            stat_out(c, l, ino, a[1])
        }),
        SYS_lstat => on_node(c, cwd, a[0], false, false, |l, ino, _| {
            stat_out(c, l, ino, a[1])
        }),
        SYS_fstat => on_fd(c, fd0, |l, d| stat_out(c, l, d.ino(), a[1])),
        SYS_newfstatat => {
            let fl = a[3] as i32;
            on_node(
                c,
                fd0,
                a[1],
                fl & AT_SYMLINK_NOFOLLOW == 0,
                fl & AT_EMPTY_PATH != 0,
                |l, ino, _| stat_out(c, l, ino, a[2]),
            )
        }
        SYS_statx => {
            let fl = a[2] as i32;
            on_node(
                c,
                fd0,
                a[1],
                fl & AT_SYMLINK_NOFOLLOW == 0,
                fl & AT_EMPTY_PATH != 0,
                |l, ino, _| statx_out(c, l, ino, a[4]),
            )
        }
        SYS_access | SYS_faccessat | SYS_faccessat2 => {
            let (dirfd, ptr, mode, fl) = match nr {
                SYS_access => (cwd, a[0], a[1], 0),
                SYS_faccessat => (fd0, a[1], a[2], 0),
                _ => (fd0, a[1], a[2], a[3] as i32),
            };
            if mode & !7 != 0 || fl & !(AT_EACCESS | AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH) != 0 {
                return err(EINVAL);
            }
            on_node(
                c,
                dirfd,
                ptr,
                fl & AT_SYMLINK_NOFOLLOW == 0,
                fl & AT_EMPTY_PATH != 0,
                |l, ino, _| {
                    if mode == 0 {
                        return done(0);
                    }
                    let cred = if fl & AT_EACCESS != 0 {
                        c.cred()
                    } else {
                        creds::access_cred(c)
                    };
                    l.call_cred(
                        c,
                        cred,
                        ino.owner(),
                        Request::Access {
                            ino,
                            mask: mode as u32,
                        },
                        |r| match r {
                            atoll_proto::Reply::Ok => Ok(()),
                            _ => Err(Error::Protocol("Access")),
                        },
                    )?;
                    done(0)
                },
            )
        }
        SYS_getdents64 | SYS_getdents if procfd::is_listing(fd0) => {
            done(procfd::getdents(c, nr, a))
        }
        SYS_getdents64 | SYS_getdents => on_fd(c, fd0, |l, d| {
            let buf = sys::user_slice_mut(a[1], a[2] as usize)?;
            if nr == SYS_getdents64 {
                done(ns::getdents64(c, l, d, buf)?)
            } else {
                done(ns::getdents(c, l, d, buf)?)
            }
        }),
        SYS_mkdir => on_path(c, cwd, a[0], |l, p| ns::mkdir(c, l, cwd, p, a[1] as u32)),
        SYS_mkdirat => on_path(c, fd0, a[1], |l, p| ns::mkdir(c, l, fd0, p, a[2] as u32)),
        SYS_rmdir => on_path(c, cwd, a[0], |l, p| ns::rmdir(c, l, p)),
        SYS_unlink => on_path(c, cwd, a[0], |l, p| ns::unlink(c, l, cwd, p, 0)),
        SYS_unlinkat => on_path(c, fd0, a[1], |l, p| ns::unlink(c, l, fd0, p, a[2] as i32)),
        SYS_rename | SYS_renameat | SYS_renameat2 => {
            let (d1, p1, d2, p2, fl) = match nr {
                SYS_rename => (cwd, a[0], cwd, a[1], 0),
                SYS_renameat => (fd0, a[1], fdarg(a[2]), a[3], 0),
                _ => (fd0, a[1], fdarg(a[2]), a[3], a[4] as u32),
            };
            if !path_concerns(c, d1, p1) && !path_concerns(c, d2, p2) {
                return Ok(Out::Host);
            }
            let lane = c.lane()?;
            ns::rename(c, &lane, d1, p1, d2, p2, fl)
        }
        SYS_link | SYS_linkat => {
            let (d1, p1, d2, p2, fl) = match nr {
                SYS_link => (cwd, a[0], cwd, a[1], 0),
                _ => (fd0, a[1], fdarg(a[2]), a[3], a[4] as i32),
            };
            if !path_concerns(c, d1, p1) && !path_concerns(c, d2, p2) {
                return Ok(Out::Host);
            }
            let lane = c.lane()?;
            ns::link(c, &lane, d1, p1, d2, p2, fl)
        }
        SYS_symlink => on_path(c, cwd, a[1], |l, p| {
            let t = sys::user_path(a[0])?;
            ns::symlink(c, l, t, cwd, p)
        }),
        SYS_symlinkat => {
            let d = fdarg(a[1]);
            on_path(c, d, a[2], |l, p| {
                let t = sys::user_path(a[0])?;
                ns::symlink(c, l, t, d, p)
            })
        }
        SYS_readlink | SYS_readlinkat => {
            let (d, p, buf, size) = if nr == SYS_readlink {
                (cwd, a[0], a[1], a[2] as i64)
            } else {
                (fd0, a[1], a[2], a[3] as i64)
            };
            if let Some(r) = sys::user_path(p)
                .ok()
                .and_then(|path| exec::readlink_self_exe(path, buf, size))
            {
                return r;
            }
            if let Some(t) = sys::user_path(p)
                .ok()
                .and_then(|path| proclink::target(c, path))
            {
                if size <= 0 {
                    return err(libc::EINVAL);
                }
                let n = t.len().min(size as usize);
                sys::copy_to_user(buf, &t[..n])?;
                return Ok(Out::Done(n as i64));
            }
            if !path_concerns(c, d, p) {
                return Ok(Out::Host);
            }
            let lane = c.lane()?;
            ns::readlink(c, &lane, d, p, buf, size)
        }
        SYS_chmod => on_entry(c, cwd, a[0], true, false, |l, ino, _, via| {
            setattr(c, l, ino, via, chmod_set(a[1]))
        }),
        SYS_fchmod => on_fd(c, fd0, |l, d| setattr(c, l, d.ino(), None, chmod_set(a[1]))),
        SYS_fchmodat | SYS_fchmodat2 => {
            let fl = if nr == SYS_fchmodat2 { a[3] as i32 } else { 0 };
            if fl & !(AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH) != 0 {
                return err(EINVAL);
            }
            on_entry(
                c,
                fd0,
                a[1],
                fl & AT_SYMLINK_NOFOLLOW == 0,
                fl & AT_EMPTY_PATH != 0,
                |l, ino, ft, via| {
                    if ft == atoll_proto::FileType::Symlink {
                        return err(EOPNOTSUPP);
                    }
                    setattr(c, l, ino, via, chmod_set(a[2]))
                },
            )
        }
        SYS_chown => on_entry(c, cwd, a[0], true, false, |l, ino, _, via| {
            setattr(c, l, ino, via, chown_set(a[1], a[2]))
        }),
        SYS_lchown => on_entry(c, cwd, a[0], false, false, |l, ino, _, via| {
            setattr(c, l, ino, via, chown_set(a[1], a[2]))
        }),
        SYS_fchown => on_fd(c, fd0, |l, d| {
            setattr(c, l, d.ino(), None, chown_set(a[1], a[2]))
        }),
        SYS_fchownat => {
            let fl = a[4] as i32;
            on_entry(
                c,
                fd0,
                a[1],
                fl & AT_SYMLINK_NOFOLLOW == 0,
                fl & AT_EMPTY_PATH != 0,
                |l, ino, _, via| setattr(c, l, ino, via, chown_set(a[2], a[3])),
            )
        }
        SYS_truncate => on_entry(c, cwd, a[0], true, false, |l, ino, ft, via| {
            if (a[1] as i64) < 0 {
                return err(EINVAL);
            }
            if ft == atoll_proto::FileType::Directory {
                return err(EISDIR);
            }
            setattr(
                c,
                l,
                ino,
                via,
                SetAttr {
                    size: Some(a[1]),
                    ..SetAttr::NONE
                },
            )
        }),
        SYS_ftruncate => on_fd(c, fd0, |l, d| {
            if (a[1] as i64) < 0 || d.ftype() != atoll_proto::FileType::Regular {
                return err(EINVAL);
            }
            let acc = d.flags() & O_ACCMODE as u32;
            if d.flags() & O_PATH as u32 != 0 {
                return err(EBADF);
            }
            if acc == O_RDONLY as u32 {
                return err(EINVAL);
            }
            setattr(
                c,
                l,
                d.ino(),
                None,
                SetAttr {
                    size: Some(a[1]),
                    ..SetAttr::NONE
                },
            )
        }),
        SYS_fallocate => on_fd(c, fd0, |l, d| {
            if d.flags() & O_ACCMODE as u32 == O_RDONLY as u32 {
                return err(EBADF);
            }
            let ino = d.ino();
            // Punching and zeroing change blocks at the server: as for
            // truncation, no private copy may outlive them.
            incoherent::invalidate(c);
            l.call(
                c,
                ino.owner(),
                Request::Fallocate {
                    ino,
                    mode: a[1] as u32,
                    offset: a[2],
                    len: a[3],
                },
                |_| Ok(()),
            )?;
            done(0)
        }),
        SYS_utimensat => {
            let fl = a[3] as i32;
            let times = meta::times_from_timespecs(a[2])?;
            on_entry(
                c,
                fd0,
                a[1],
                fl & AT_SYMLINK_NOFOLLOW == 0,
                a[1] == 0 || fl & AT_EMPTY_PATH != 0,
                |l, ino, _, via| setattr(c, l, ino, via, times_set(times)),
            )
        }
        SYS_futimesat => {
            let times = meta::times_from_timevals(a[2])?;
            on_entry(c, fd0, a[1], true, a[1] == 0, |l, ino, _, via| {
                setattr(c, l, ino, via, times_set(times))
            })
        }
        SYS_utimes => {
            let times = meta::times_from_timevals(a[1])?;
            on_entry(c, cwd, a[0], true, false, |l, ino, _, via| {
                setattr(c, l, ino, via, times_set(times))
            })
        }
        SYS_utime => {
            let times = meta::times_from_utimbuf(a[1])?;
            on_entry(c, cwd, a[0], true, false, |l, ino, _, via| {
                setattr(c, l, ino, via, times_set(times))
            })
        }
        SYS_fsync | SYS_fdatasync | SYS_syncfs | SYS_sync_file_range | SYS_fadvise64
        | SYS_readahead => {
            // Coherent buffer cache: nothing to write back (Hare §3.3.1);
            // the incoherent emulation writes its private copies back.
            if let Some(d) = fdtable::get(fd0) {
                incoherent::write_back(c);
                copymap::sync_inode(c, d.ino());
                done(0)
            } else {
                Ok(Out::Host)
            }
        }
        SYS_chdir => {
            let p = sys::user_path(a[0])?;
            if p.is_empty() {
                return Ok(Out::Host);
            }
            if c.cwd().is_none() && !walk::concerns(c, cwd, p) {
                return Ok(Out::Host);
            }
            let lane = c.lane()?;
            ns::chdir(c, &lane, p)
        }
        SYS_fchdir => ns::fchdir(c, fd0),
        SYS_getcwd => ns::getcwd(c, a[0], a[1]),
        SYS_statfs => on_node(c, cwd, a[0], true, false, |l, _, _| {
            sys::put_user(a[1], meta::statfs(c, l)?)?;
            done(0)
        }),
        SYS_fstatfs => on_fd(c, fd0, |l, _| {
            sys::put_user(a[1], meta::statfs(c, l)?)?;
            done(0)
        }),
        SYS_mknod => on_path(c, cwd, a[0], |l, p| {
            ns::mknod(c, l, cwd, p, a[1] as u32, a[2])
        }),
        SYS_mknodat => on_path(c, fd0, a[1], |l, p| {
            ns::mknod(c, l, fd0, p, a[2] as u32, a[3])
        }),
        SYS_getxattr => meta::xattr_get(c, None, a, true),
        SYS_lgetxattr => meta::xattr_get(c, None, a, false),
        SYS_fgetxattr => meta::xattr_get(c, Some(fd0), a, true),
        SYS_setxattr => meta::xattr_set(c, None, a, true),
        SYS_lsetxattr => meta::xattr_set(c, None, a, false),
        SYS_fsetxattr => meta::xattr_set(c, Some(fd0), a, true),
        SYS_listxattr => meta::xattr_list(c, None, a, true),
        SYS_llistxattr => meta::xattr_list(c, None, a, false),
        SYS_flistxattr => meta::xattr_list(c, Some(fd0), a, true),
        SYS_removexattr => meta::xattr_remove(c, None, a, true),
        SYS_lremovexattr => meta::xattr_remove(c, None, a, false),
        SYS_fremovexattr => meta::xattr_remove(c, Some(fdarg(a[0])), a, true),
        SYS_mmap => {
            let anonymous = a[3] as i32 & MAP_ANONYMOUS != 0;
            if a[3] as i32 & MAP_FIXED != 0 && copymap::overlaps(a[0], a[1]) {
                // A copy island's shared mapping being replaced: its
                // stores go back first, as Linux's pages are already in.
                copymap::before_mremap(c, a[0], a[1]);
            }
            if anonymous || !fdtable::is_atoll(fdarg(a[4])) {
                // Over a piece of an atoll mapping, the kernel replaces it.
                if a[3] as i32 & MAP_FIXED != 0 && mapping::overlaps(a[0], a[1]) {
                    return mapping::host_fixed(c, a);
                }
                return Ok(Out::Host);
            }
            on_fd(c, fdarg(a[4]), |l, d| done(file::mmap(c, l, d, a)?))
        }
        SYS_munmap => {
            if copymap::overlaps(a[0], a[1]) {
                return done(copymap::munmap(c, a));
            }
            if !mapping::overlaps(a[0], a[1]) {
                return Ok(Out::Host);
            }
            mapping::munmap(c, a)
        }
        SYS_msync => {
            // A copy island's shared mapping: its stores go back now.
            copymap::sync_range(c, a[0], a[1]);
            Ok(Out::Host)
        }
        SYS_mremap => {
            if copymap::overlaps(a[0], a[1].max(1)) {
                copymap::before_mremap(c, a[0], a[1].max(1));
                return Ok(Out::Host);
            }
            let fixed = a[3] as i32 & MREMAP_FIXED != 0;
            let ours =
                mapping::overlaps(a[0], a[1].max(1)) || (fixed && mapping::overlaps(a[4], a[2]));
            if !ours {
                return Ok(Out::Host);
            }
            mapping::mremap(c, a)
        }
        SYS_execve | SYS_execveat => {
            let (d, p, argv, envp, fl) = if nr == SYS_execve {
                (cwd, a[0], a[1], a[2], 0)
            } else {
                (fd0, a[1], a[2], a[3], a[4] as i32)
            };
            let path = sys::user_path(p)?;
            let plan = exec::prepare_execat(
                d,
                path,
                argv as *const *const c_char,
                envp as *const *const c_char,
                fl,
            )?;
            done(exec::execute(&plan))
        }
        SYS_copy_file_range | SYS_splice => {
            if !fdtable::is_atoll(fd0) && !fdtable::is_atoll(fdarg(a[2])) {
                return Ok(Out::Host);
            }
            let lane = c.lane()?;
            let n = crate::inotify::one_access(c, &lane, || {
                file::copy(c, &lane, fd0, a[1], fdarg(a[2]), a[3], a[4])
            })?;
            done(n)
        }
        SYS_sendfile => {
            if !fdtable::is_atoll(fd0) && !fdtable::is_atoll(fdarg(a[1])) {
                return Ok(Out::Host);
            }
            let lane = c.lane()?;
            let n = crate::inotify::one_access(c, &lane, || {
                file::copy(c, &lane, fdarg(a[1]), a[2], fd0, 0, a[3])
            })?;
            done(n)
        }
        SYS_poll | SYS_ppoll => {
            if !fdtable::any() {
                return Ok(Out::Host);
            }
            done(file::poll(a[0], a[1], |fds, n, ready| {
                let zero = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                };
                // SAFETY: `fds` is our own pollfd copy of length n; the
                // timeout/sigmask pointers are the program's (or our zero).
                unsafe {
                    if nr == SYS_poll {
                        let t = if ready { 0 } else { a[2] };
                        intr::host_syscall6(SYS_poll, [fds, n, t, 0, 0, 0])
                    } else {
                        let ts = if ready {
                            &zero as *const _ as u64
                        } else {
                            a[2]
                        };
                        intr::host_syscall6(SYS_ppoll, [fds, n, ts, a[3], a[4], 0])
                    }
                }
            })?)
        }
        SYS_epoll_ctl => {
            if !fdtable::is_atoll(fdarg(a[2])) {
                return Ok(Out::Host);
            }
            // Regular files cannot be watched (Linux answers EPERM).
            if a[1] as i32 == EPOLL_CTL_ADD {
                err(EPERM)
            } else {
                err(ENOENT)
            }
        }
        _ => Ok(Out::Host),
    }
}

/// State carried from `fork_prepare` to `fork_parent`/`fork_child`.
pub struct ForkPrep {
    child: SessionId,
    socket: OwnedFd,
    /// Held until the clone returned, on both sides (see `forkgate`).
    _gate: forkgate::ForkGate,
}

/// Before `fork`: create the child's session and share every open
/// description with it (Hare DUP). `Ok(None)` when not an atoll client.
pub fn fork_prepare() -> core::result::Result<Option<ForkPrep>, i32> {
    let Some(c) = session::client() else {
        return Ok(None);
    };
    // The child's `execve` finds the load table mapped (`loadmap`).
    if let Some(dir) = std::path::Path::new(&c.socket_path).parent() {
        loadmap::map_for_children(dir);
    }
    let (child, socket) = c.fork_session().map_err(|e| e.errno())?;
    let held = session::LazyLane::holding(c, c.lane().map_err(|e| e.errno())?);
    // Shared descriptions keep their offsets on the server (Hare §3.5.1).
    hybrid::share_all(c, &held);
    let Some(l) = held.taken() else {
        return Err(libc::EIO);
    };
    // Each reference goes again if its server dies on it (`forkshare`).
    let mut given = forkshare::Ledger::new(child);
    for desc in fdtable::live_descs() {
        // A description that fails to share (closed meanwhile) is simply
        // not usable in the child.
        let _ = given.share(c, l, desc);
    }
    // The child's copy of our memory maps what we map.
    mapping::share_with(c, l, &mut given);
    copymap::share_with(c, l, &mut given);
    drop(held);
    Ok(Some(ForkPrep {
        child,
        socket,
        _gate: forkgate::ForkGate::close(c),
    }))
}

/// In the parent after `fork` (or after it failed, `child_pid < 0`): close
/// our copy of the child's socket; if the fork failed this ends the child
/// session and releases what it was given.
pub fn fork_parent(prep: ForkPrep, child_pid: i64) {
    if child_pid > 0 {
        // Siblings start their execs from different cores (Hare §3.6.1).
        atoll_sched::placement::on_fork_parent();
        // The child shows our descriptors as of now (under the gate).
        fdpub::after_fork_parent();
    }
    drop(prep);
}

/// In the child after `fork`: switch to the child session.
pub fn fork_child(prep: ForkPrep) {
    // Program memory is reached through our pid, which just changed.
    sys::init_pid();
    cpus::after_fork_child();
    let Some(c) = session::client() else {
        return;
    };
    // Offsets locked by threads that did not come along are free here,
    // and their pipe reads are not ours to withdraw.
    fdtable::after_fork_child();
    pipesplit::forget_after_fork();
    let ForkPrep {
        child,
        socket,
        _gate,
    } = prep;
    let sock = session::to_high(socket.into_raw_fd(), 0);
    let _ = c.adopt_child_session(child, sock);
    drop(_gate);
    counters::forget();
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
    }
    // `_exit` runs no `atexit` handler: its counters go out here (after
    // `exit`, the handler took them and this finds none).
    counters::report_at_exit();
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
