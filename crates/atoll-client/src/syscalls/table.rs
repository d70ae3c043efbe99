//! The rows: every system call atoll looks at, by family, with its
//! handler, when it is atoll's, and what a program gets (gVisor's
//! `linux64.go` idea). A call with no row is Linux's, unchanged.
//!
//! A note says in a few words how a `Partial` call differs; the reason is
//! in `docs/COMPATIBILITY.md`. `docs/SYSCALLS.md` is generated from these
//! rows (`atoll syscalls > docs/SYSCALLS.md`; a test keeps it current).

use libc::*;

use super::Dir::{Arg, Cwd};
use super::Support::{Full, Host, Partial, Refused};
use super::{attrs, data, dirs, fds, memory, names, notify, open, poll, process, sockets, xattrs};
use super::{Call, Concerns, Handler, PathArg, Support, SLOTS};

const fn row(nr: i64, name: &'static str, run: Handler, concerns: Concerns, s: Support) -> Entry {
    Entry {
        nr,
        call: Call {
            run,
            concerns,
            pipe: false,
            name,
            support: s,
        },
    }
}

/// A call the pipe layer answers first (see `pipe::route`).
const fn piped(r: Entry) -> Entry {
    let mut r = r;
    r.call.pipe = true;
    r
}

/// One call's number and row, as written in [`ROWS`].
pub(super) struct Entry {
    nr: i64,
    call: Call,
}

/// A path relative to the cwd, in argument `i`.
const fn path(i: u8) -> Concerns {
    Concerns::Path(PathArg { dir: Cwd, path: i })
}

/// A path in argument `p` relative to the dirfd in argument `d`.
const fn path_at(d: u8, p: u8) -> Concerns {
    Concerns::Path(PathArg {
        dir: Arg(d),
        path: p,
    })
}

/// `rename`, `link`: either path, each relative to the cwd.
const TWO_PATHS: Concerns =
    Concerns::Paths(PathArg { dir: Cwd, path: 0 }, PathArg { dir: Cwd, path: 1 });
/// `renameat`, `linkat`: either (dirfd a0, path a1) or (dirfd a2, path a3).
const TWO_PATHS_AT: Concerns = Concerns::Paths(
    PathArg {
        dir: Arg(0),
        path: 1,
    },
    PathArg {
        dir: Arg(2),
        path: 3,
    },
);
const ON_FD: Concerns = Concerns::OnFd;
const ALWAYS: Concerns = Concerns::Always;
const fn by(t: super::Test, when: &'static str) -> Concerns {
    Concerns::By(t, when)
}

/// The path in `p`, or the call's own test `t` (`when`: in words).
const fn path_or(p: Concerns, t: super::Test, when: &'static str) -> Concerns {
    match p {
        Concerns::Path(p) => Concerns::PathOr(p, t, when),
        _ => panic!("path_or takes a path"),
    }
}

const MAKES_PIPES: Concerns = by(poll::pipe_concerns, "atoll makes the pipes");
const HOLDS_PIPES: Concerns = by(
    poll::pipe_concerns,
    "the process holds an atoll pipe or queue",
);
const SOCKET_NAME: Concerns = by(
    sockets::socket_concerns,
    "a socket address in the mount, or atoll descriptors passed (SCM_RIGHTS)",
);
const MMSG: Support =
    Partial("passes atoll descriptors; a socket address in the mount is not translated");
const SOCKET_RIGHTS: Concerns = by(
    sockets::socket_concerns,
    "atoll descriptors passed (SCM_RIGHTS)",
);
const PIPE_SIZE: &str = "capacity up to 3872 KiB, no per-user limits";

const PARTLY_READABLE: &str = "a buffer only partly accessible is EFAULT, nothing transferred \
     (read and write transfer the accessible part first)";
const NO_FSIZE: &str = "ignores RLIMIT_FSIZE";
const ST_DEV: &str = "st_dev is atoll's fixed device; a distributed directory's st_size is 4096";
const HOST_CRED: &str = "Linux changes the credentials; atoll reads them again for its requests";

#[rustfmt::skip]
const ROWS: &[Entry] = &[
    // Opening (`open.rs`).
    row(SYS_open, "open", open::open,
        path_or(path(0), open::open_concerns, "a `/proc` table atoll serves"),
        Full),
    row(SYS_creat, "creat", open::creat, path(0), Full),
    row(SYS_openat, "openat", open::openat,
        path_or(path_at(0, 1), open::openat_concerns, "a `/proc` table atoll serves"),
        Full),
    row(SYS_openat2, "openat2", open::openat2,
        path_or(path_at(0, 1), open::openat2_concerns, "fd a0"),
        Partial("RESOLVE_CACHED is always EAGAIN")),
    // Names (`names.rs`).
    row(SYS_mkdir, "mkdir", names::mkdir, path(0), Full),
    row(SYS_mkdirat, "mkdirat", names::mkdirat, path_at(0, 1), Full),
    row(SYS_rmdir, "rmdir", names::rmdir, path(0), Full),
    row(SYS_unlink, "unlink", names::unlink, path(0), Full),
    row(SYS_unlinkat, "unlinkat", names::unlinkat, path_at(0, 1), Full),
    row(SYS_rename, "rename", names::rename,
        TWO_PATHS, Full),
    row(SYS_renameat, "renameat", names::rename,
        TWO_PATHS_AT, Full),
    row(SYS_renameat2, "renameat2", names::rename,
        TWO_PATHS_AT, Full),
    row(SYS_link, "link", names::link,
        TWO_PATHS, Full),
    row(SYS_linkat, "linkat", names::link,
        TWO_PATHS_AT, Full),
    row(SYS_symlink, "symlink", names::symlink, path(1), Full),
    row(SYS_symlinkat, "symlinkat", names::symlinkat, path_at(1, 2), Full),
    row(SYS_readlink, "readlink", names::readlink,
        path_or(path(0), names::readlink_concerns, "a `/proc` link atoll answers"),
        Full),
    row(SYS_readlinkat, "readlinkat", names::readlink,
        path_or(path_at(0, 1), names::readlinkat_concerns, "a `/proc` link atoll answers"),
        Full),
    row(SYS_mknod, "mknod", names::mknod, path(0), Full),
    row(SYS_mknodat, "mknodat", names::mknodat, path_at(0, 1), Full),
    // Directories (`dirs.rs`).
    row(SYS_getdents, "getdents", dirs::getdents,
        by(dirs::getdents_concerns, "every listing: atoll's, `/proc/self/fd`, the mount's parent"),
        Partial("a buffer only partly accessible is EFAULT")),
    row(SYS_getdents64, "getdents64", dirs::getdents,
        by(dirs::getdents_concerns, "every listing: atoll's, `/proc/self/fd`, the mount's parent"),
        Partial("a buffer only partly accessible is EFAULT")),
    row(SYS_chdir, "chdir", dirs::chdir,
        path_or(path(0), dirs::in_atoll_cwd, "the cwd is atoll's"),
        Full),
    row(SYS_fchdir, "fchdir", dirs::fchdir,
        by(dirs::fchdir_concerns, "fd a0, or the cwd is atoll's"),
        Full),
    row(SYS_getcwd, "getcwd", dirs::getcwd, by(dirs::in_atoll_cwd, "the cwd is atoll's"),
        Full),
    // Descriptors (`fds.rs`).
    row(SYS_close, "close", fds::close,
        by(fds::close_concerns, "fd a0 (or private), or a listing of `/proc/self/fd`"),
        Full),
    row(SYS_close_range, "close_range", fds::close_range, ALWAYS, Full),
    row(SYS_dup, "dup", fds::dup, ON_FD, Full),
    row(SYS_dup2, "dup2", fds::dup2, by(fds::dup2_concerns, "fd a0 or a1 (or a1 private)"), Full),
    row(SYS_dup3, "dup3", fds::dup3, by(fds::dup2_concerns, "fd a0 or a1 (or a1 private)"), Full),
    piped(row(SYS_fcntl, "fcntl", fds::fcntl, ON_FD,
        Partial("F_NOTIFY of a program on another host never signals; F_SETPIPE_SZ stops at 3872 KiB"))),
    row(SYS_flock, "flock", fds::flock, ON_FD, Full),
    piped(row(SYS_ioctl, "ioctl", fds::ioctl, ON_FD, Full)),
    // File data (`data.rs`).
    piped(row(SYS_read, "read", data::read, ON_FD, Full)),
    piped(row(SYS_write, "write", data::write, ON_FD, Full)),
    piped(row(SYS_pread64, "pread64", data::read, ON_FD, Full)),
    piped(row(SYS_pwrite64, "pwrite64", data::write, ON_FD, Full)),
    piped(row(SYS_readv, "readv", data::readv, ON_FD, Partial(PARTLY_READABLE))),
    piped(row(SYS_writev, "writev", data::writev, ON_FD, Partial(PARTLY_READABLE))),
    piped(row(SYS_preadv, "preadv", data::preadv, ON_FD, Partial(PARTLY_READABLE))),
    piped(row(SYS_pwritev, "pwritev", data::pwritev, ON_FD, Partial(PARTLY_READABLE))),
    piped(row(SYS_preadv2, "preadv2", data::rwv2, ON_FD, Partial(PARTLY_READABLE))),
    piped(row(SYS_pwritev2, "pwritev2", data::rwv2, ON_FD, Partial(PARTLY_READABLE))),
    piped(row(SYS_lseek, "lseek", data::lseek, ON_FD, Full)),
    row(SYS_fsync, "fsync", data::sync, ON_FD, Full),
    row(SYS_fdatasync, "fdatasync", data::sync, ON_FD, Full),
    row(SYS_syncfs, "syncfs", data::sync, ON_FD, Full),
    row(SYS_sync_file_range, "sync_file_range", data::sync, ON_FD, Full),
    row(SYS_fadvise64, "fadvise64", data::sync, ON_FD, Full),
    row(SYS_readahead, "readahead", data::sync, ON_FD, Full),
    row(SYS_fallocate, "fallocate", data::fallocate, ON_FD, Partial(NO_FSIZE)),
    row(SYS_copy_file_range, "copy_file_range", data::copy_range, Concerns::Fds(0, 2),
        Partial(NO_FSIZE)),
    row(SYS_splice, "splice", data::copy_range, Concerns::Fds(0, 2), Full),
    row(SYS_sendfile, "sendfile", data::sendfile, Concerns::Fds(0, 1), Full),
    // Attributes (`attrs.rs`).
    piped(row(SYS_stat, "stat", attrs::stat, path(0), Partial(ST_DEV))),
    row(SYS_lstat, "lstat", attrs::lstat, path(0), Partial(ST_DEV)),
    row(SYS_fstat, "fstat", attrs::fstat, ON_FD, Partial(ST_DEV)),
    piped(row(SYS_newfstatat, "newfstatat", attrs::newfstatat, path_at(0, 1), Partial(ST_DEV))),
    piped(row(SYS_statx, "statx", attrs::statx, path_at(0, 1), Partial(ST_DEV))),
    row(SYS_access, "access", attrs::access, path(0), Full),
    row(SYS_faccessat, "faccessat", attrs::access, path_at(0, 1), Full),
    row(SYS_faccessat2, "faccessat2", attrs::access, path_at(0, 1), Full),
    row(SYS_chmod, "chmod", attrs::chmod, path(0), Full),
    row(SYS_fchmod, "fchmod", attrs::fchmod, ON_FD, Full),
    row(SYS_fchmodat, "fchmodat", attrs::fchmodat, path_at(0, 1), Full),
    row(SYS_fchmodat2, "fchmodat2", attrs::fchmodat, path_at(0, 1), Full),
    row(SYS_chown, "chown", attrs::chown, path(0), Full),
    row(SYS_lchown, "lchown", attrs::lchown, path(0), Full),
    row(SYS_fchown, "fchown", attrs::fchown, ON_FD, Full),
    row(SYS_fchownat, "fchownat", attrs::fchownat, path_at(0, 1), Full),
    row(SYS_truncate, "truncate", attrs::truncate, path(0), Partial(NO_FSIZE)),
    row(SYS_ftruncate, "ftruncate", attrs::ftruncate, ON_FD, Partial(NO_FSIZE)),
    row(SYS_utimensat, "utimensat", attrs::utimensat, path_at(0, 1), Full),
    row(SYS_futimesat, "futimesat", attrs::futimesat, path_at(0, 1), Full),
    row(SYS_utimes, "utimes", attrs::utimes, path(0), Full),
    row(SYS_utime, "utime", attrs::utime, path(0), Full),
    row(SYS_statfs, "statfs", attrs::statfs, path(0), Full),
    row(SYS_fstatfs, "fstatfs", attrs::fstatfs, ON_FD, Full),
    // Extended attributes (`xattrs.rs`).
    row(SYS_getxattr, "getxattr", xattrs::getxattr, path(0), Full),
    row(SYS_lgetxattr, "lgetxattr", xattrs::lgetxattr, path(0), Full),
    row(SYS_fgetxattr, "fgetxattr", xattrs::fgetxattr, ON_FD, Full),
    row(SYS_setxattr, "setxattr", xattrs::setxattr, path(0),
        Partial("user.atoll.distributed on a directory sets its mode")),
    row(SYS_lsetxattr, "lsetxattr", xattrs::lsetxattr, path(0),
        Partial("user.atoll.distributed on a directory sets its mode")),
    row(SYS_fsetxattr, "fsetxattr", xattrs::fsetxattr, ON_FD,
        Partial("user.atoll.distributed on a directory sets its mode")),
    row(SYS_listxattr, "listxattr", xattrs::listxattr, path(0), Full),
    row(SYS_llistxattr, "llistxattr", xattrs::llistxattr, path(0), Full),
    row(SYS_flistxattr, "flistxattr", xattrs::flistxattr, ON_FD, Full),
    row(SYS_removexattr, "removexattr", xattrs::removexattr, path(0), Full),
    row(SYS_lremovexattr, "lremovexattr", xattrs::lremovexattr, path(0), Full),
    row(SYS_fremovexattr, "fremovexattr", xattrs::fremovexattr, ON_FD, Full),
    // Memory (`memory.rs`).
    row(SYS_mmap, "mmap", memory::mmap,
        by(memory::mmap_concerns, "fd a4 of a file mapping, or `MAP_FIXED` over an atoll mapping"),
        Partial("see COMPATIBILITY, Memory mappings")),
    row(SYS_munmap, "munmap", memory::munmap,
        by(memory::munmap_concerns, "the range holds an atoll mapping"),
        Full),
    row(SYS_msync, "msync", memory::msync,
        by(memory::msync_concerns, "the range holds a copy island's mapping"),
        Host("a copy island writes the range back first")),
    row(SYS_mremap, "mremap", memory::mremap,
        by(memory::mremap_concerns, "the range (or the fixed target) holds an atoll mapping"),
        Full),
    // Processes and credentials (`process.rs`).
    row(SYS_execve, "execve", process::execve, ALWAYS,
        Partial("--exec-via spawn: a new process, its caller a proxy")),
    row(SYS_execveat, "execveat", process::execve, ALWAYS,
        Partial("--exec-via spawn: a new process, its caller a proxy")),
    row(SYS_umask, "umask", process::umask, ALWAYS,
        Host("atoll keeps the mask for the files it creates")),
    row(SYS_setrlimit, "setrlimit", process::rlimit, ALWAYS,
        Host("atoll keeps RLIMIT_FSIZE for its writes")),
    row(SYS_prlimit64, "prlimit64", process::rlimit, ALWAYS,
        Host("atoll keeps its own RLIMIT_FSIZE for its writes; another process's change is seen at exec")),
    // After these the kernel's credentials may differ.
    row(SYS_setuid, "setuid", process::credentials, ALWAYS, Host(HOST_CRED)),
    row(SYS_setgid, "setgid", process::credentials, ALWAYS, Host(HOST_CRED)),
    row(SYS_setreuid, "setreuid", process::credentials, ALWAYS, Host(HOST_CRED)),
    row(SYS_setregid, "setregid", process::credentials, ALWAYS, Host(HOST_CRED)),
    row(SYS_setresuid, "setresuid", process::credentials, ALWAYS, Host(HOST_CRED)),
    row(SYS_setresgid, "setresgid", process::credentials, ALWAYS, Host(HOST_CRED)),
    row(SYS_setfsuid, "setfsuid", process::credentials, ALWAYS, Host(HOST_CRED)),
    row(SYS_setfsgid, "setfsgid", process::credentials, ALWAYS, Host(HOST_CRED)),
    row(SYS_setgroups, "setgroups", process::credentials, ALWAYS, Host(HOST_CRED)),
    row(SYS_capset, "capset", process::credentials, ALWAYS, Host(HOST_CRED)),
    row(SYS_getppid, "getppid", process::getppid,
        by(process::getppid_concerns, "the image runs behind a proxy (`--exec-via spawn`)"),
        Partial("--exec-via spawn: the proxy's parent")),
    row(SYS_sched_getaffinity, "sched_getaffinity", process::sched_getaffinity, ALWAYS,
        Partial("the cores the instance serves, until the thread sets its own")),
    row(SYS_sched_setaffinity, "sched_setaffinity", process::sched_setaffinity, ALWAYS,
        Host("the thread's affinity becomes the program's")),
    row(SYS_wait4, "wait4", process::wait4, ALWAYS,
        Host("a child a signal killed has its pipe ends released before the call returns")),
    row(SYS_waitid, "waitid", process::waitid, ALWAYS,
        Host("a child a signal killed has its pipe ends released before the call returns")),
    row(SYS_io_uring_setup, "io_uring_setup", process::refuse_enosys, ALWAYS,
        Refused(ENOSYS, "the kernel would run file operations atoll never sees")),
    // Notification (`notify.rs`).
    row(SYS_inotify_add_watch, "inotify_add_watch", notify::inotify_add_watch,
        path_or(path(1), notify::add_watch_concerns, "fd a0"),
        Partial("no IN_UNMOUNT; one descriptor watches host or atoll paths, not both (EXDEV)")),
    row(SYS_inotify_rm_watch, "inotify_rm_watch", notify::inotify_rm_watch,
        Concerns::Fds(0, 0), Full),
    row(SYS_fanotify_mark, "fanotify_mark", notify::fanotify_mark,
        path_or(path_at(3, 4), notify::mark_concerns, "fd a0, or dirfd a3 alone"),
        Partial("permission events, ignore masks, FAN_MARK_EVICTABLE: EOPNOTSUPP; \
                 host and atoll marks not mixed")),
    row(SYS_name_to_handle_at, "name_to_handle_at", notify::name_to_handle_at, path_at(0, 1),
        Partial("12-byte handles of type 0x61; open_by_handle_at is not built")),
    // Pipes and readiness (`poll.rs`).
    piped(row(SYS_pipe, "pipe", poll::host, MAKES_PIPES,
        Partial(PIPE_SIZE))),
    piped(row(SYS_pipe2, "pipe2", poll::host, MAKES_PIPES,
        Partial(PIPE_SIZE))),
    piped(row(SYS_poll, "poll", poll::poll,
        by(poll::poll_concerns, "the process holds an atoll descriptor"),
        Full)),
    piped(row(SYS_ppoll, "ppoll", poll::poll,
        by(poll::poll_concerns, "the process holds an atoll descriptor"),
        Full)),
    piped(row(SYS_select, "select", poll::host, HOLDS_PIPES, Full)),
    piped(row(SYS_pselect6, "pselect6", poll::host, HOLDS_PIPES, Full)),
    piped(row(SYS_epoll_ctl, "epoll_ctl", poll::epoll_ctl, Concerns::Fds(2, 2), Full)),
    piped(row(SYS_epoll_wait, "epoll_wait", poll::host, HOLDS_PIPES, Full)),
    piped(row(SYS_epoll_pwait, "epoll_pwait", poll::host, HOLDS_PIPES, Full)),
    piped(row(SYS_epoll_pwait2, "epoll_pwait2", poll::host, HOLDS_PIPES, Full)),
    // Unix socket names (`sockets.rs`).
    row(SYS_bind, "bind", sockets::socket, SOCKET_NAME, Full),
    row(SYS_connect, "connect", sockets::socket, SOCKET_NAME, Full),
    row(SYS_sendto, "sendto", sockets::socket, SOCKET_NAME, Full),
    row(SYS_sendmsg, "sendmsg", sockets::socket, SOCKET_NAME, Full),
    row(SYS_getsockname, "getsockname", sockets::socket, SOCKET_NAME, Full),
    row(SYS_getpeername, "getpeername", sockets::socket, SOCKET_NAME, Full),
    row(SYS_accept, "accept", sockets::socket, SOCKET_NAME, Full),
    row(SYS_accept4, "accept4", sockets::socket, SOCKET_NAME, Full),
    row(SYS_recvfrom, "recvfrom", sockets::socket, SOCKET_NAME, Full),
    row(SYS_recvmsg, "recvmsg", sockets::socket, SOCKET_NAME, Full),
    row(SYS_sendmmsg, "sendmmsg", sockets::socket, SOCKET_RIGHTS, MMSG),
    row(SYS_recvmmsg, "recvmmsg", sockets::socket, SOCKET_RIGHTS, MMSG),];

/// How many rows there are.
pub(super) const COUNT: usize = ROWS.len();

/// The rows as an array, in the order written.
pub(super) const fn calls() -> [Call; COUNT] {
    let mut t = [ROWS[0].call; COUNT];
    let mut i = 0;
    while i < COUNT {
        t[i] = ROWS[i].call;
        i += 1;
    }
    t
}

/// For each system-call number, its row's place in [`calls`] plus one
/// (0: no row); a number twice, or past the table, is a build error.
pub(super) const fn by_number() -> [u8; SLOTS] {
    assert!(COUNT < u8::MAX as usize, "more rows than a byte numbers");
    let mut t = [0u8; SLOTS];
    let mut i = 0;
    while i < COUNT {
        let nr = ROWS[i].nr;
        assert!(
            nr >= 0 && (nr as usize) < SLOTS,
            "system call past the table"
        );
        assert!(t[nr as usize] == 0, "system call with two rows");
        t[nr as usize] = (i + 1) as u8;
        i += 1;
    }
    t
}
