//! The system-call surface: one table, indexed by the x86-64 system-call
//! number, of what atoll does with each call (gVisor's `linux64.go` idea).
//!
//! Layer map:
//! * [`table`] — the rows: for each call atoll looks at, its name, its
//!   handler, which arguments make it atoll's ([`Concerns`]), whether the
//!   pipe layer looks first, and its [`Support`] level with a note. A
//!   512-entry index of bytes is built from the rows at compile time, so
//!   finding a call is one bounds check and two loads; a number twice is
//!   a build error.
//! * the families, one module each, a small handler per call:
//!   `open` (open, creat, openat, openat2), `names` (mkdir, unlink,
//!   rename, link, symlink, readlink, mknod), `dirs` (getdents, cwd),
//!   `fds` (close, dup, fcntl, flock, ioctl), `data` (read, write, seek,
//!   sync, copy), `attrs` (stat, access, chmod, chown, truncate, times,
//!   statfs), `xattrs`, `memory` (mmap and friends), `process` (exec,
//!   umask, credentials, affinity, refused calls), `notify` (inotify,
//!   fanotify), `poll` (pipes, poll, select, epoll), `sockets` (unix
//!   socket names);
//! * `common` — what handlers share: resolve a path or a descriptor and
//!   run a closure on it, stat and setattr replies.
//!
//! Who calls it: [`crate::may_concern`] asks [`concerns`] (cheap, no lane,
//! no allocation), [`crate::dispatch`] asks [`run`]. Both are on the path
//! of every trapped system call (hot): two table loads each. Calls with no
//! row go to Linux unchanged; `docs/SYSCALLS.md` is generated from the
//! rows (`atoll syscalls`), so "what does atoll do with `openat2`?" has
//! one answer.

mod attrs;
pub(crate) mod common;
mod data;
mod dirs;
mod fds;
mod memory;
mod names;
mod notify;
mod open;
mod poll;
mod process;
mod sockets;
mod table;
mod xattrs;

use crate::error::{err, Result};
use crate::session::Client;
use crate::{fdtable, pipe, session, Out};
use common::{fdarg, path_concerns};

/// A handler: the call's number (one handler may serve a family of
/// numbers, e.g. `read` and `pread64`) and its raw arguments.
pub(crate) type Handler = fn(&'static Client, i64, &[u64; 6]) -> Result<Out>;

/// How a call's own test of whether it concerns atoll reads.
pub(crate) type Test = fn(&Client, i64, &[u64; 6]) -> bool;

/// Where a path argument is relative to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dir {
    /// The current directory (`open`, `stat`, …).
    Cwd,
    /// The descriptor in this argument (`openat`'s first).
    Arg(u8),
}

/// A path argument: the index of its pointer and what it is relative to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PathArg {
    pub dir: Dir,
    pub path: u8,
}

/// Which arguments make a call atoll's (what `may_concern` decides
/// before anything else runs).
#[derive(Clone, Copy)]
pub(crate) enum Concerns {
    /// Every such call is looked at (`execve`, `umask`, credentials).
    Always,
    /// A path under the mount (or reaching it: `..`, `/proc/self/cwd`).
    Path(PathArg),
    /// A path, or the call's own test (in words: when it holds), e.g.
    /// `open` of a `/proc` table atoll serves.
    PathOr(PathArg, Test, &'static str),
    /// Either of two paths (`rename`, `link`).
    Paths(PathArg, PathArg),
    /// The descriptor the call acts on, in its first argument. On one of
    /// atoll's private descriptors such a call answers `EBADF`: those are
    /// the library's, and a program probing its descriptors (`fstat` of
    /// every number, as CPython's `fd_status` does) must not find them.
    OnFd,
    /// Either of two descriptor arguments is an atoll descriptor.
    Fds(u8, u8),
    /// The call's own test (the handler's module says why), and when it
    /// holds, in words.
    By(Test, &'static str),
}

/// What atoll gives a program that makes the call, as the generated
/// `docs/SYSCALLS.md` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Support {
    /// Served as Linux's tmpfs would answer it.
    Full,
    /// Served, with a difference (the note; `docs/COMPATIBILITY.md` has
    /// the row with its reason).
    Partial(&'static str),
    /// Linux runs it; atoll looks on (the note says what for).
    Host(&'static str),
    /// Answered with this errno, whatever the arguments (the note: why).
    Refused(i32, &'static str),
}

/// One row of the table.
#[derive(Clone, Copy)]
pub(crate) struct Call {
    pub run: Handler,
    pub concerns: Concerns,
    /// The pipe layer (`pipe::route`) looks first: the call may be on a
    /// pipe end, an inotify queue, or name one through `/dev/fd/N`.
    pub pipe: bool,
    pub name: &'static str,
    pub support: Support,
}

/// System-call numbers the table covers (x86-64 ends at 462 in Linux 6.10).
pub(crate) const SLOTS: usize = 512;

/// The rows, and for each number its row's place plus one (0: no row, the
/// call is Linux's). Two tables rather than one array of 512 optional
/// rows: every row holds pointers (its handler, its test, its words),
/// which the dynamic loader writes as each process starts (a relative
/// relocation each), so each page of them is a copy-on-write fault and a
/// private page in every process atoll starts. 512 slots of rows took 11
/// pages; the rows alone take 3, and the index, a byte per number and no
/// pointer, stays in the file's read-only pages, shared.
static CALLS: [Call; table::COUNT] = table::calls();
static INDEX: [u8; SLOTS] = table::by_number();

/// The row of call `nr`. Hot: one bounds check and two loads.
#[inline(always)]
pub(crate) fn lookup(nr: i64) -> Option<&'static Call> {
    let at = *INDEX.get(usize::try_from(nr).ok()?)?;
    CALLS.get(usize::from(at).checked_sub(1)?)
}

/// Does call `nr` with arguments `a` concern atoll? (For `may_concern`:
/// lock-free and allocation-free.)
pub(crate) fn concerns(nr: i64, a: &[u64; 6]) -> bool {
    let Some(c) = session::client() else {
        return false;
    };
    let Some(call) = lookup(nr) else {
        return false;
    };
    let at = |i: u8| fdtable::is_atoll(fdarg(a[i as usize]));
    match call.concerns {
        Concerns::Always => true,
        Concerns::Path(p) => path_arg_concerns(c, p, a),
        Concerns::PathOr(p, test, _) => path_arg_concerns(c, p, a) || test(c, nr, a),
        Concerns::Paths(p, q) => path_arg_concerns(c, p, a) || path_arg_concerns(c, q, a),
        Concerns::OnFd => at(0) || c.is_private_fd(a[0] as i32),
        Concerns::Fds(i, j) => at(i) || at(j),
        Concerns::By(test, _) => test(c, nr, a),
    }
}

impl Concerns {
    /// The one path argument the call names, if it names one: where a
    /// path that left atoll is put back for Linux (`common::rehost`).
    pub(crate) fn path(self) -> Option<PathArg> {
        match self {
            Concerns::Path(p) | Concerns::PathOr(p, ..) => Some(p),
            _ => None,
        }
    }
}

/// The dirfd a path argument is relative to (`AT_FDCWD` for the cwd).
pub(crate) fn dirfd_of(p: PathArg, a: &[u64; 6]) -> i64 {
    match p.dir {
        Dir::Cwd => libc::AT_FDCWD as i64,
        Dir::Arg(i) => fdarg(a[i as usize]),
    }
}

fn path_arg_concerns(c: &Client, p: PathArg, a: &[u64; 6]) -> bool {
    path_concerns(c, dirfd_of(p, a), a[p.path as usize])
}

/// Emulate call `nr` (the body of [`crate::dispatch`]).
pub(crate) fn run(c: &'static Client, nr: i64, a: &[u64; 6]) -> Result<Out> {
    let Some(call) = lookup(nr) else {
        return Ok(Out::Host);
    };
    if matches!(call.concerns, Concerns::OnFd) && c.is_private_fd(a[0] as i32) {
        return err(libc::EBADF);
    }
    if call.pipe {
        if let Some(o) = pipe::route(c, nr, a)? {
            return Ok(o);
        }
    }
    (call.run)(c, nr, a)
}

/// One row as the documentation shows it.
#[derive(Clone, Debug)]
pub struct Row {
    pub nr: i64,
    pub name: &'static str,
    pub support: Support,
    /// When the call is atoll's, in words (`"path a0"`, `"fd a0"`, …).
    pub when: String,
}

/// Every call atoll has a row for, by number.
pub fn rows() -> impl Iterator<Item = Row> {
    (0..SLOTS as i64).filter_map(|nr| {
        lookup(nr).map(|call| Row {
            nr,
            name: call.name,
            support: call.support,
            when: describe(call),
        })
    })
}

fn describe(call: &Call) -> String {
    let path = |p: PathArg| match p.dir {
        Dir::Cwd => format!("path a{}", p.path),
        Dir::Arg(d) => format!("dirfd a{d} + path a{}", p.path),
    };
    match call.concerns {
        Concerns::Always => "always".into(),
        Concerns::Path(p) => path(p),
        Concerns::PathOr(p, _, when) => format!("{}, or {when}", path(p)),
        Concerns::Paths(p, q) => format!("{}, or {}", path(p), path(q)),
        Concerns::OnFd => "fd a0".into(),
        Concerns::Fds(i, j) if i == j => format!("fd a{i}"),
        Concerns::Fds(i, j) => format!("fd a{i} or a{j}"),
        Concerns::By(_, when) => when.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_sits_at_its_own_number() {
        let mut n = 0;
        for (nr, name) in [
            (libc::SYS_read, "read"),
            (libc::SYS_openat2, "openat2"),
            (libc::SYS_io_uring_setup, "io_uring_setup"),
            (libc::SYS_fchmodat2, "fchmodat2"),
            (libc::SYS_epoll_pwait2, "epoll_pwait2"),
        ] {
            assert_eq!(lookup(nr).map(|c| c.name), Some(name));
            n += 1;
        }
        assert_eq!(n, 5);
        for r in rows() {
            assert_eq!(lookup(r.nr).unwrap().name, r.name);
        }
    }

    #[test]
    fn calls_without_a_row_and_odd_numbers_are_linux_s() {
        assert!(lookup(libc::SYS_getpid).is_none());
        assert!(lookup(libc::SYS_futex).is_none());
        assert!(lookup(-1).is_none());
        assert!(lookup(SLOTS as i64).is_none());
        // x32 numbers carry bit 30.
        assert!(lookup(0x4000_0000 | libc::SYS_read).is_none());
    }

    #[test]
    fn descriptor_calls_refuse_private_descriptors() {
        // The calls whose first argument is the descriptor they act on:
        // CPython's `fd_status` probes them with `fstat`.
        for nr in [
            libc::SYS_read,
            libc::SYS_fstat,
            libc::SYS_fcntl,
            libc::SYS_ioctl,
            libc::SYS_lseek,
            libc::SYS_fgetxattr,
            libc::SYS_dup,
        ] {
            assert!(matches!(lookup(nr).unwrap().concerns, Concerns::OnFd));
        }
        for nr in [libc::SYS_close, libc::SYS_dup2, libc::SYS_getdents64] {
            assert!(!matches!(lookup(nr).unwrap().concerns, Concerns::OnFd));
        }
    }

    #[test]
    fn refused_calls_say_their_errno() {
        let r = rows().find(|r| r.name == "io_uring_setup").unwrap();
        assert!(matches!(r.support, Support::Refused(libc::ENOSYS, _)));
    }
}
