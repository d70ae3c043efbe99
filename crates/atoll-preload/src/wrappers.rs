//! The fast path: exported libc entry points.
//!
//! A program's call to, say, `open` binds to the definition here (we are
//! first in the lookup order). Each wrapper
//!
//! 1. goes straight to the real libc function when atoll is off, or when
//!    atoll code is already running on this thread (the selector says
//!    ALLOW: our own or the client's libc calls land here too);
//! 2. otherwise sets the selector to ALLOW (so the real function's system
//!    call does not trap again), turns the call into the `(nr, args)` of the
//!    system call glibc itself would issue, and asks the client;
//! 3. returns the client's answer (`Done`: value, or -1 with errno) or
//!    calls the real function (`Host`), found once with
//!    `dlsym(RTLD_NEXT)`, as a *host call*: a program handler that
//!    interrupts it runs there as program code (see `sigdefer`).
//!
//! Entry points not wrapped here still work, more slowly, through the SIGSYS
//! net: glibc's composite functions reach the kernel through internal
//! aliases that no wrapper can see (`fopen`, `realpath`, `mkstemp`,
//! `execvp`, `posix_spawn`, `system`, `popen`, `vfork`,
//! `sigaction`/`signal`, …). A wrapper is only
//! worth it where a program calls the entry point often; `remove` and
//! `statvfs` are rebuilt here on the wrappers, `kill` passes through, and
//! directory streams are our own (`wrappers/dir.rs`). Process and thread
//! entry points live in `wrappers/process.rs`.
//!
//! Variadic entry points (`open`, `openat`, `fcntl`, `ioctl`, `mremap`) are
//! defined with their optional argument as a fixed one: on x86-64 the
//! System V ABI passes variadic integer arguments in the same registers as
//! fixed ones, and we only read it where C's `va_arg` would.
//!
//! Wrappers use the "C-unwind" ABI: several real functions are
//! cancellation points, and `pthread_cancel`'s forced unwind must be able to
//! pass through our frame (restoring the selector on the way).

use core::ffi::{c_char, c_int, c_uint, c_ulong, c_void};
use core::sync::atomic::{AtomicUsize, Ordering};

use libc::{mode_t, off_t, size_t, ssize_t};

use crate::client::{self, Dispatch, Mode};
use crate::raw;
use crate::selector::{self, AtollGuard};
use crate::sigdefer;
use crate::sigfix::KSIGSET_SIZE;
use crate::stats;

/// The next definition of a symbol (normally libc's), resolved once.
struct Real {
    name: &'static str,
    ptr: AtomicUsize,
}

/// `ptr` value meaning "looked up, not found".
const MISSING: usize = 1;

impl Real {
    const fn new(name: &'static str) -> Real {
        Real {
            name,
            ptr: AtomicUsize::new(0),
        }
    }

    #[inline]
    fn get(&self) -> Option<usize> {
        match self.ptr.load(Ordering::Relaxed) {
            0 => self.resolve(),
            MISSING => None,
            p => Some(p),
        }
    }

    #[cold]
    fn resolve(&self) -> Option<usize> {
        // SAFETY: `name` is a NUL-terminated literal (see the macros);
        // dlsym/dlvsym have no other preconditions.
        let mut p = unsafe { libc::dlsym(libc::RTLD_NEXT, self.name.as_ptr().cast()) };
        if p.is_null() {
            // Old entry points (`__xstat`, …) survive only as compat
            // symbols, which plain dlsym does not return.
            // SAFETY: as above.
            p = unsafe {
                libc::dlvsym(
                    libc::RTLD_NEXT,
                    self.name.as_ptr().cast(),
                    c"GLIBC_2.2.5".as_ptr(),
                )
            };
        }
        let v = if p.is_null() { MISSING } else { p as usize };
        self.ptr.store(v, Ordering::Relaxed);
        (v != MISSING).then_some(v)
    }
}

/// Raw system-call result → C return value (+ errno).
trait Ret {
    fn from_raw(v: i64) -> Self;
    /// Did the call fail (its errno then says why)?
    fn failed(&self) -> bool;
    /// The value as RAX holds it when the function returns.
    fn rax(&self) -> i64;
}

impl Ret for c_int {
    #[inline]
    fn from_raw(v: i64) -> c_int {
        if v < 0 {
            raw::set_errno(-v as c_int);
            -1
        } else {
            v as c_int
        }
    }
    #[inline]
    fn failed(&self) -> bool {
        *self == -1
    }
    #[inline]
    fn rax(&self) -> i64 {
        *self as i64
    }
}

impl Ret for isize {
    #[inline]
    fn from_raw(v: i64) -> isize {
        if v < 0 {
            raw::set_errno(-v as c_int);
            -1
        } else {
            v as isize
        }
    }
    #[inline]
    fn failed(&self) -> bool {
        *self == -1
    }
    #[inline]
    fn rax(&self) -> i64 {
        *self as i64
    }
}

impl Ret for c_uint {
    /// For calls that cannot fail (`umask`).
    #[inline]
    fn from_raw(v: i64) -> c_uint {
        v as c_uint
    }
    #[inline]
    fn failed(&self) -> bool {
        false
    }
    #[inline]
    fn rax(&self) -> i64 {
        *self as i64
    }
}

impl Ret for i64 {
    #[inline]
    fn from_raw(v: i64) -> i64 {
        if v < 0 {
            raw::set_errno(-v as c_int);
            -1
        } else {
            v
        }
    }
    #[inline]
    fn failed(&self) -> bool {
        *self == -1
    }
    #[inline]
    fn rax(&self) -> i64 {
        *self
    }
}

/// `r`, the host's answer to call `nr`; or, if it is `ENOENT` because a
/// host symlink leads the path into the mount, atoll's answer on the path
/// it reaches (`atoll_client::hostlink`).
#[inline]
fn through_host_link<R: Ret>(nr: i64, args: &[u64; 6], r: R) -> R {
    if r.failed() && raw::errno() == libc::ENOENT {
        if let Some(v) = client::through_host_link(nr, args) {
            return R::from_raw(v);
        }
        raw::set_errno(libc::ENOENT);
    }
    r
}

/// The wrappers' path once a call is offered to atoll: the client's
/// answer, or the real function (`host`) as a host call; signals deferred
/// meanwhile are delivered in the program's frame at this return.
#[inline(always)]
fn routed<R: Ret>(guard: AtollGuard, nr: i64, args: &[u64; 6], host: impl FnOnce() -> R) -> R {
    let frame = sigdefer::FrameDelivery::enter(sigdefer::FrameMode::Return);
    match client::dispatch(nr, args) {
        Dispatch::Host => {
            drop(frame);
            let r = through_host_link(nr, args, sigdefer::host_call(host));
            drop(guard);
            r
        }
        Dispatch::Done(v) => {
            let r = R::from_raw(v);
            crate::retframe::finish(guard, frame, r.rax());
            r
        }
    }
}

/// `Some(guard)` when this call should be offered to atoll.
#[inline]
fn enter() -> Option<AtollGuard> {
    if client::mode() == Mode::Off || selector::inside_atoll() {
        None
    } else {
        Some(AtollGuard::enter())
    }
}

#[inline]
fn args6(a: &[u64]) -> [u64; 6] {
    let mut out = [0u64; 6];
    out[..a.len()].copy_from_slice(a);
    out
}

/// One line per wrapper:
/// `fn name(params) -> ret = NR; [syscall args] (, check COND)?;`
/// `check COND`: when true, call the real function at once (fortify
/// functions let glibc report the overflow).
macro_rules! wrap {
    ($(
        fn $name:ident($($a:ident : $t:ty),* $(,)?) -> $r:ty
            = $nr:expr; [$($arg:expr),* $(,)?] $(, check $chk:expr)?;
    )*) => {$(
        #[no_mangle]
        pub unsafe extern "C-unwind" fn $name($($a: $t),*) -> $r {
            static REAL: Real = Real::new(concat!(stringify!($name), "\0"));
            let nr: i64 = $nr;
            let args = args6(&[$(($arg) as u64),*]);
            let host = || -> $r {
                match REAL.get() {
                    // SAFETY: `p` is libc's definition of this very symbol,
                    // whose C prototype is the signature of this wrapper.
                    Some(p) => unsafe {
                        let f: unsafe extern "C-unwind" fn($($t),*) -> $r =
                            core::mem::transmute::<usize, _>(p);
                        f($($a),*)
                    },
                    None => <$r as Ret>::from_raw(raw::syscall6(nr, args)),
                }
            };
            $( if $chk { return host(); } )?
            let Some(guard) = enter() else { return host() };
            routed(guard, nr, &args, host)
        }
    )*};
}

/// As `wrap!`, for variadic libc functions: the last parameter is passed
/// to the real function as its variadic argument.
macro_rules! wrap_va {
    ($(
        fn $name:ident($($a:ident : $t:ty),*; $va:ident : $vt:ty) -> $r:ty
            = $nr:expr; [$($arg:expr),* $(,)?];
    )*) => {$(
        #[no_mangle]
        pub unsafe extern "C-unwind" fn $name($($a: $t),*, $va: $vt) -> $r {
            static REAL: Real = Real::new(concat!(stringify!($name), "\0"));
            let nr: i64 = $nr;
            let args = args6(&[$(($arg) as u64),*]);
            let host = || -> $r {
                match REAL.get() {
                    // SAFETY: `p` is libc's variadic definition of this
                    // symbol; the variadic argument is an integer or pointer,
                    // as its `va_arg` reads it.
                    Some(p) => unsafe {
                        let f: unsafe extern "C" fn($($t),*, ...) -> $r =
                            core::mem::transmute::<usize, _>(p);
                        f($($a),*, $va)
                    },
                    None => <$r as Ret>::from_raw(raw::syscall6(nr, args)),
                }
            };
            let Some(guard) = enter() else { return host() };
            routed(guard, nr, &args, host)
        }
    )*};
}

const AT_FDCWD: c_int = libc::AT_FDCWD;
const NOFOLLOW: c_int = libc::AT_SYMLINK_NOFOLLOW;
/// `fchmodat2` (Linux 6.6), the only fchmodat taking flags.
const SYS_FCHMODAT2: i64 = 452;

/// `open`'s mode argument exists only with O_CREAT or O_TMPFILE.
#[inline]
fn open_mode(flags: c_int, mode: c_uint) -> u64 {
    if flags & libc::O_CREAT != 0 || flags & libc::O_TMPFILE == libc::O_TMPFILE {
        mode as u64
    } else {
        0
    }
}

type Path = *const c_char;

wrap_va! {
    fn open(path: Path, flags: c_int; mode: c_uint) -> c_int
        = libc::SYS_openat; [AT_FDCWD, path, flags, open_mode(flags, mode)];
    fn open64(path: Path, flags: c_int; mode: c_uint) -> c_int
        = libc::SYS_openat; [AT_FDCWD, path, flags, open_mode(flags, mode)];
    fn openat(dirfd: c_int, path: Path, flags: c_int; mode: c_uint) -> c_int
        = libc::SYS_openat; [dirfd, path, flags, open_mode(flags, mode)];
    fn openat64(dirfd: c_int, path: Path, flags: c_int; mode: c_uint) -> c_int
        = libc::SYS_openat; [dirfd, path, flags, open_mode(flags, mode)];
    fn fcntl(fd: c_int, cmd: c_int; arg: c_ulong) -> c_int
        = libc::SYS_fcntl; [fd, cmd, arg];
    fn fcntl64(fd: c_int, cmd: c_int; arg: c_ulong) -> c_int
        = libc::SYS_fcntl; [fd, cmd, arg];
    fn ioctl(fd: c_int, request: c_ulong; arg: c_ulong) -> c_int
        = libc::SYS_ioctl; [fd, request, arg];
}

wrap! {
    // open & friends
    fn __open_2(path: Path, flags: c_int) -> c_int = libc::SYS_openat; [AT_FDCWD, path, flags, 0];
    fn __open64_2(path: Path, flags: c_int) -> c_int = libc::SYS_openat; [AT_FDCWD, path, flags, 0];
    fn __openat_2(dirfd: c_int, path: Path, flags: c_int) -> c_int = libc::SYS_openat; [dirfd, path, flags, 0];
    fn __openat64_2(dirfd: c_int, path: Path, flags: c_int) -> c_int = libc::SYS_openat; [dirfd, path, flags, 0];
    fn creat(path: Path, mode: mode_t) -> c_int
        = libc::SYS_openat; [AT_FDCWD, path, libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC, mode];
    fn creat64(path: Path, mode: mode_t) -> c_int
        = libc::SYS_openat; [AT_FDCWD, path, libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC, mode];
    fn close(fd: c_int) -> c_int = libc::SYS_close; [fd];
    fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int = libc::SYS_close_range; [first, last, flags];
    fn dup(fd: c_int) -> c_int = libc::SYS_dup; [fd];
    fn dup2(fd: c_int, new: c_int) -> c_int = libc::SYS_dup2; [fd, new];
    fn dup3(fd: c_int, new: c_int, flags: c_int) -> c_int = libc::SYS_dup3; [fd, new, flags];

    // data
    fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t = libc::SYS_read; [fd, buf, n];
    fn __read_chk(fd: c_int, buf: *mut c_void, n: size_t, buflen: size_t) -> ssize_t
        = libc::SYS_read; [fd, buf, n], check n > buflen;
    fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t = libc::SYS_write; [fd, buf, n];
    fn pread(fd: c_int, buf: *mut c_void, n: size_t, off: off_t) -> ssize_t = libc::SYS_pread64; [fd, buf, n, off];
    fn pread64(fd: c_int, buf: *mut c_void, n: size_t, off: off_t) -> ssize_t = libc::SYS_pread64; [fd, buf, n, off];
    fn __pread_chk(fd: c_int, buf: *mut c_void, n: size_t, off: off_t, buflen: size_t) -> ssize_t
        = libc::SYS_pread64; [fd, buf, n, off], check n > buflen;
    fn __pread64_chk(fd: c_int, buf: *mut c_void, n: size_t, off: off_t, buflen: size_t) -> ssize_t
        = libc::SYS_pread64; [fd, buf, n, off], check n > buflen;
    fn pwrite(fd: c_int, buf: *const c_void, n: size_t, off: off_t) -> ssize_t = libc::SYS_pwrite64; [fd, buf, n, off];
    fn pwrite64(fd: c_int, buf: *const c_void, n: size_t, off: off_t) -> ssize_t = libc::SYS_pwrite64; [fd, buf, n, off];
    fn readv(fd: c_int, iov: *const libc::iovec, cnt: c_int) -> ssize_t = libc::SYS_readv; [fd, iov, cnt];
    fn writev(fd: c_int, iov: *const libc::iovec, cnt: c_int) -> ssize_t = libc::SYS_writev; [fd, iov, cnt];
    fn preadv(fd: c_int, iov: *const libc::iovec, cnt: c_int, off: off_t) -> ssize_t = libc::SYS_preadv; [fd, iov, cnt, off, 0];
    fn preadv64(fd: c_int, iov: *const libc::iovec, cnt: c_int, off: off_t) -> ssize_t = libc::SYS_preadv; [fd, iov, cnt, off, 0];
    fn pwritev(fd: c_int, iov: *const libc::iovec, cnt: c_int, off: off_t) -> ssize_t = libc::SYS_pwritev; [fd, iov, cnt, off, 0];
    fn pwritev64(fd: c_int, iov: *const libc::iovec, cnt: c_int, off: off_t) -> ssize_t = libc::SYS_pwritev; [fd, iov, cnt, off, 0];
    fn preadv2(fd: c_int, iov: *const libc::iovec, cnt: c_int, off: off_t, flags: c_int) -> ssize_t
        = libc::SYS_preadv2; [fd, iov, cnt, off, 0, flags];
    fn pwritev2(fd: c_int, iov: *const libc::iovec, cnt: c_int, off: off_t, flags: c_int) -> ssize_t
        = libc::SYS_pwritev2; [fd, iov, cnt, off, 0, flags];
    fn lseek(fd: c_int, off: off_t, whence: c_int) -> off_t = libc::SYS_lseek; [fd, off, whence];
    fn lseek64(fd: c_int, off: off_t, whence: c_int) -> off_t = libc::SYS_lseek; [fd, off, whence];
    fn getdents64(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t = libc::SYS_getdents64; [fd, buf, n];
    fn sendfile(out: c_int, inp: c_int, off: *mut off_t, n: size_t) -> ssize_t = libc::SYS_sendfile; [out, inp, off, n];
    fn sendfile64(out: c_int, inp: c_int, off: *mut off_t, n: size_t) -> ssize_t = libc::SYS_sendfile; [out, inp, off, n];
    fn copy_file_range(fdin: c_int, offin: *mut off_t, fdout: c_int, offout: *mut off_t, n: size_t, flags: c_uint) -> ssize_t
        = libc::SYS_copy_file_range; [fdin, offin, fdout, offout, n, flags];
    fn splice(fdin: c_int, offin: *mut off_t, fdout: c_int, offout: *mut off_t, n: size_t, flags: c_uint) -> ssize_t
        = libc::SYS_splice; [fdin, offin, fdout, offout, n, flags];

    // attributes
    fn stat(path: Path, buf: *mut libc::stat) -> c_int = libc::SYS_newfstatat; [AT_FDCWD, path, buf, 0];
    fn stat64(path: Path, buf: *mut libc::stat64) -> c_int = libc::SYS_newfstatat; [AT_FDCWD, path, buf, 0];
    fn lstat(path: Path, buf: *mut libc::stat) -> c_int = libc::SYS_newfstatat; [AT_FDCWD, path, buf, NOFOLLOW];
    fn lstat64(path: Path, buf: *mut libc::stat64) -> c_int = libc::SYS_newfstatat; [AT_FDCWD, path, buf, NOFOLLOW];
    fn fstat(fd: c_int, buf: *mut libc::stat) -> c_int = libc::SYS_fstat; [fd, buf];
    fn fstat64(fd: c_int, buf: *mut libc::stat64) -> c_int = libc::SYS_fstat; [fd, buf];
    fn fstatat(dirfd: c_int, path: Path, buf: *mut libc::stat, flags: c_int) -> c_int
        = libc::SYS_newfstatat; [dirfd, path, buf, flags];
    fn fstatat64(dirfd: c_int, path: Path, buf: *mut libc::stat64, flags: c_int) -> c_int
        = libc::SYS_newfstatat; [dirfd, path, buf, flags];
    fn statx(dirfd: c_int, path: Path, flags: c_int, mask: c_uint, buf: *mut libc::statx) -> c_int
        = libc::SYS_statx; [dirfd, path, flags, mask, buf];
    fn __xstat(ver: c_int, path: Path, buf: *mut libc::stat) -> c_int = libc::SYS_newfstatat; [AT_FDCWD, path, buf, 0];
    fn __xstat64(ver: c_int, path: Path, buf: *mut libc::stat64) -> c_int = libc::SYS_newfstatat; [AT_FDCWD, path, buf, 0];
    fn __lxstat(ver: c_int, path: Path, buf: *mut libc::stat) -> c_int = libc::SYS_newfstatat; [AT_FDCWD, path, buf, NOFOLLOW];
    fn __lxstat64(ver: c_int, path: Path, buf: *mut libc::stat64) -> c_int = libc::SYS_newfstatat; [AT_FDCWD, path, buf, NOFOLLOW];
    fn __fxstat(ver: c_int, fd: c_int, buf: *mut libc::stat) -> c_int = libc::SYS_fstat; [fd, buf];
    fn __fxstat64(ver: c_int, fd: c_int, buf: *mut libc::stat64) -> c_int = libc::SYS_fstat; [fd, buf];
    fn __fxstatat(ver: c_int, dirfd: c_int, path: Path, buf: *mut libc::stat, flags: c_int) -> c_int
        = libc::SYS_newfstatat; [dirfd, path, buf, flags];
    fn __fxstatat64(ver: c_int, dirfd: c_int, path: Path, buf: *mut libc::stat64, flags: c_int) -> c_int
        = libc::SYS_newfstatat; [dirfd, path, buf, flags];
    fn access(path: Path, mode: c_int) -> c_int = libc::SYS_access; [path, mode];
    fn faccessat(dirfd: c_int, path: Path, mode: c_int, flags: c_int) -> c_int
        = libc::SYS_faccessat2; [dirfd, path, mode, flags];
    fn euidaccess(path: Path, mode: c_int) -> c_int = libc::SYS_faccessat2; [AT_FDCWD, path, mode, libc::AT_EACCESS];
    fn eaccess(path: Path, mode: c_int) -> c_int = libc::SYS_faccessat2; [AT_FDCWD, path, mode, libc::AT_EACCESS];
    fn chmod(path: Path, mode: mode_t) -> c_int = libc::SYS_chmod; [path, mode];
    fn fchmod(fd: c_int, mode: mode_t) -> c_int = libc::SYS_fchmod; [fd, mode];
    fn fchmodat(dirfd: c_int, path: Path, mode: mode_t, flags: c_int) -> c_int
        = if flags == 0 { libc::SYS_fchmodat } else { SYS_FCHMODAT2 }; [dirfd, path, mode, flags];
    fn chown(path: Path, uid: libc::uid_t, gid: libc::gid_t) -> c_int = libc::SYS_chown; [path, uid, gid];
    fn lchown(path: Path, uid: libc::uid_t, gid: libc::gid_t) -> c_int = libc::SYS_lchown; [path, uid, gid];
    fn fchown(fd: c_int, uid: libc::uid_t, gid: libc::gid_t) -> c_int = libc::SYS_fchown; [fd, uid, gid];
    fn fchownat(dirfd: c_int, path: Path, uid: libc::uid_t, gid: libc::gid_t, flags: c_int) -> c_int
        = libc::SYS_fchownat; [dirfd, path, uid, gid, flags];
    fn truncate(path: Path, len: off_t) -> c_int = libc::SYS_truncate; [path, len];
    fn truncate64(path: Path, len: off_t) -> c_int = libc::SYS_truncate; [path, len];
    fn ftruncate(fd: c_int, len: off_t) -> c_int = libc::SYS_ftruncate; [fd, len];
    fn ftruncate64(fd: c_int, len: off_t) -> c_int = libc::SYS_ftruncate; [fd, len];
    fn fallocate(fd: c_int, mode: c_int, off: off_t, len: off_t) -> c_int = libc::SYS_fallocate; [fd, mode, off, len];
    fn fallocate64(fd: c_int, mode: c_int, off: off_t, len: off_t) -> c_int = libc::SYS_fallocate; [fd, mode, off, len];
    fn utimensat(dirfd: c_int, path: Path, times: *const libc::timespec, flags: c_int) -> c_int
        = libc::SYS_utimensat; [dirfd, path, times, flags];
    fn futimens(fd: c_int, times: *const libc::timespec) -> c_int = libc::SYS_utimensat; [fd, 0, times, 0];
    fn utimes(path: Path, tv: *const libc::timeval) -> c_int = libc::SYS_utimes; [path, tv];
    fn utime(path: Path, buf: *const libc::utimbuf) -> c_int = libc::SYS_utime; [path, buf];
    fn futimesat(dirfd: c_int, path: Path, tv: *const libc::timeval) -> c_int = libc::SYS_futimesat; [dirfd, path, tv];
    fn statfs(path: Path, buf: *mut libc::statfs) -> c_int = libc::SYS_statfs; [path, buf];
    fn statfs64(path: Path, buf: *mut libc::statfs64) -> c_int = libc::SYS_statfs; [path, buf];
    fn fstatfs(fd: c_int, buf: *mut libc::statfs) -> c_int = libc::SYS_fstatfs; [fd, buf];
    fn fstatfs64(fd: c_int, buf: *mut libc::statfs64) -> c_int = libc::SYS_fstatfs; [fd, buf];

    // signals: no atoll business, but a program that sends many (dbench
    // asks `kill(pid, 0)` whether its parent lives, ~40 times per
    // operation) would otherwise pay a trap for each
    fn kill(pid: libc::pid_t, sig: c_int) -> c_int = libc::SYS_kill; [pid, sig];

    // sync
    fn fsync(fd: c_int) -> c_int = libc::SYS_fsync; [fd];
    fn fdatasync(fd: c_int) -> c_int = libc::SYS_fdatasync; [fd];
    fn syncfs(fd: c_int) -> c_int = libc::SYS_syncfs; [fd];
    fn sync_file_range(fd: c_int, off: off_t, n: off_t, flags: c_uint) -> c_int
        = libc::SYS_sync_file_range; [fd, off, n, flags];
    fn flock(fd: c_int, op: c_int) -> c_int = libc::SYS_flock; [fd, op];
    fn readahead(fd: c_int, off: off_t, n: size_t) -> ssize_t = libc::SYS_readahead; [fd, off, n];

    // names
    fn mkdir(path: Path, mode: mode_t) -> c_int = libc::SYS_mkdir; [path, mode];
    fn mkdirat(dirfd: c_int, path: Path, mode: mode_t) -> c_int = libc::SYS_mkdirat; [dirfd, path, mode];
    fn rmdir(path: Path) -> c_int = libc::SYS_rmdir; [path];
    fn unlink(path: Path) -> c_int = libc::SYS_unlink; [path];
    fn unlinkat(dirfd: c_int, path: Path, flags: c_int) -> c_int = libc::SYS_unlinkat; [dirfd, path, flags];
    fn rename(old: Path, new: Path) -> c_int = libc::SYS_rename; [old, new];
    fn renameat(olddir: c_int, old: Path, newdir: c_int, new: Path) -> c_int
        = libc::SYS_renameat; [olddir, old, newdir, new];
    fn renameat2(olddir: c_int, old: Path, newdir: c_int, new: Path, flags: c_uint) -> c_int
        = libc::SYS_renameat2; [olddir, old, newdir, new, flags];
    fn link(old: Path, new: Path) -> c_int = libc::SYS_link; [old, new];
    fn linkat(olddir: c_int, old: Path, newdir: c_int, new: Path, flags: c_int) -> c_int
        = libc::SYS_linkat; [olddir, old, newdir, new, flags];
    fn symlink(target: Path, path: Path) -> c_int = libc::SYS_symlink; [target, path];
    fn symlinkat(target: Path, dirfd: c_int, path: Path) -> c_int = libc::SYS_symlinkat; [target, dirfd, path];
    fn readlink(path: Path, buf: *mut c_char, n: size_t) -> ssize_t = libc::SYS_readlink; [path, buf, n];
    fn readlinkat(dirfd: c_int, path: Path, buf: *mut c_char, n: size_t) -> ssize_t
        = libc::SYS_readlinkat; [dirfd, path, buf, n];
    fn __readlink_chk(path: Path, buf: *mut c_char, n: size_t, buflen: size_t) -> ssize_t
        = libc::SYS_readlink; [path, buf, n], check n > buflen;
    fn __readlinkat_chk(dirfd: c_int, path: Path, buf: *mut c_char, n: size_t, buflen: size_t) -> ssize_t
        = libc::SYS_readlinkat; [dirfd, path, buf, n], check n > buflen;
    fn mknod(path: Path, mode: mode_t, dev: libc::dev_t) -> c_int = libc::SYS_mknodat; [AT_FDCWD, path, mode, dev];
    fn mknodat(dirfd: c_int, path: Path, mode: mode_t, dev: libc::dev_t) -> c_int
        = libc::SYS_mknodat; [dirfd, path, mode, dev];
    fn mkfifo(path: Path, mode: mode_t) -> c_int = libc::SYS_mknodat; [AT_FDCWD, path, mode | libc::S_IFIFO, 0];
    fn mkfifoat(dirfd: c_int, path: Path, mode: mode_t) -> c_int
        = libc::SYS_mknodat; [dirfd, path, mode | libc::S_IFIFO, 0];
    fn chdir(path: Path) -> c_int = libc::SYS_chdir; [path];
    fn umask(mask: mode_t) -> mode_t = libc::SYS_umask; [mask];
    fn fchdir(fd: c_int) -> c_int = libc::SYS_fchdir; [fd];

    // extended attributes
    fn getxattr(path: Path, name: Path, value: *mut c_void, size: size_t) -> ssize_t
        = libc::SYS_getxattr; [path, name, value, size];
    fn lgetxattr(path: Path, name: Path, value: *mut c_void, size: size_t) -> ssize_t
        = libc::SYS_lgetxattr; [path, name, value, size];
    fn fgetxattr(fd: c_int, name: Path, value: *mut c_void, size: size_t) -> ssize_t
        = libc::SYS_fgetxattr; [fd, name, value, size];
    fn setxattr(path: Path, name: Path, value: *const c_void, size: size_t, flags: c_int) -> c_int
        = libc::SYS_setxattr; [path, name, value, size, flags];
    fn lsetxattr(path: Path, name: Path, value: *const c_void, size: size_t, flags: c_int) -> c_int
        = libc::SYS_lsetxattr; [path, name, value, size, flags];
    fn fsetxattr(fd: c_int, name: Path, value: *const c_void, size: size_t, flags: c_int) -> c_int
        = libc::SYS_fsetxattr; [fd, name, value, size, flags];
    fn listxattr(path: Path, list: *mut c_char, size: size_t) -> ssize_t = libc::SYS_listxattr; [path, list, size];
    fn llistxattr(path: Path, list: *mut c_char, size: size_t) -> ssize_t = libc::SYS_llistxattr; [path, list, size];
    fn flistxattr(fd: c_int, list: *mut c_char, size: size_t) -> ssize_t = libc::SYS_flistxattr; [fd, list, size];
    fn removexattr(path: Path, name: Path) -> c_int = libc::SYS_removexattr; [path, name];
    fn lremovexattr(path: Path, name: Path) -> c_int = libc::SYS_lremovexattr; [path, name];
    fn fremovexattr(fd: c_int, name: Path) -> c_int = libc::SYS_fremovexattr; [fd, name];

    // memory and readiness
    fn munmap(addr: *mut c_void, len: size_t) -> c_int = libc::SYS_munmap; [addr, len];
    fn msync(addr: *mut c_void, len: size_t, flags: c_int) -> c_int = libc::SYS_msync; [addr, len, flags];
    fn poll(fds: *mut libc::pollfd, n: libc::nfds_t, timeout: c_int) -> c_int = libc::SYS_poll; [fds, n, timeout];
    fn select(n: c_int, r: *mut libc::fd_set, w: *mut libc::fd_set, e: *mut libc::fd_set, tv: *mut libc::timeval) -> c_int
        = libc::SYS_select; [n, r, w, e, tv];
    fn epoll_ctl(epfd: c_int, op: c_int, fd: c_int, ev: *mut libc::epoll_event) -> c_int
        = libc::SYS_epoll_ctl; [epfd, op, fd, ev];
}

// ---------------------------------------------------------------------------
// Entry points that do not fit the one-line pattern.

/// A raw result that is an address (mmap, mremap) → C pointer (+ errno).
fn ptr_from_raw(v: i64) -> *mut c_void {
    if (-4095..0).contains(&v) {
        raw::set_errno(-v as c_int);
        libc::MAP_FAILED
    } else {
        v as usize as *mut c_void
    }
}

type MmapFn =
    unsafe extern "C-unwind" fn(*mut c_void, size_t, c_int, c_int, c_int, off_t) -> *mut c_void;

/// # Safety
/// As `mmap(2)`.
unsafe fn mmap_common(
    real: &Real,
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    let args = args6(&[
        addr as u64,
        len as u64,
        prot as u64,
        flags as u64,
        fd as u64,
        off as u64,
    ]);
    let host = || match real.get() {
        // SAFETY: libc's mmap has exactly this prototype.
        Some(p) => unsafe {
            core::mem::transmute::<usize, MmapFn>(p)(addr, len, prot, flags, fd, off)
        },
        None => ptr_from_raw(raw::syscall6(libc::SYS_mmap, args)),
    };
    // Anonymous mappings concern atoll only when placed over pages of an
    // atoll file's mapping (which they replace): else skip the client.
    let over_atoll =
        || flags & libc::MAP_FIXED != 0 && client::maps_atoll_pages(addr as u64, len as u64);
    if (fd < 0 || flags & libc::MAP_ANONYMOUS != 0) && !over_atoll() {
        return host();
    }
    let Some(_guard) = enter() else { return host() };
    match client::dispatch(libc::SYS_mmap, &args) {
        Dispatch::Host => host(),
        Dispatch::Done(v) => ptr_from_raw(v),
    }
}

/// # Safety
/// As `mmap(2)`.
#[no_mangle]
pub unsafe extern "C-unwind" fn mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    static REAL: Real = Real::new("mmap\0");
    // SAFETY: forwarding the caller's arguments.
    unsafe { mmap_common(&REAL, addr, len, prot, flags, fd, off) }
}

/// # Safety
/// As `mmap(2)`.
#[no_mangle]
pub unsafe extern "C-unwind" fn mmap64(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    static REAL: Real = Real::new("mmap64\0");
    // SAFETY: forwarding the caller's arguments.
    unsafe { mmap_common(&REAL, addr, len, prot, flags, fd, off) }
}

/// `mremap(old, old_size, new_size, flags, ...)`: the optional fifth
/// argument (new address, with MREMAP_FIXED) taken as a fixed one.
///
/// # Safety
/// As `mremap(2)`.
#[no_mangle]
pub unsafe extern "C-unwind" fn mremap(
    old: *mut c_void,
    old_size: size_t,
    new_size: size_t,
    flags: c_int,
    new_addr: *mut c_void,
) -> *mut c_void {
    static REAL: Real = Real::new("mremap\0");
    let args = args6(&[
        old as u64,
        old_size as u64,
        new_size as u64,
        flags as u64,
        new_addr as u64,
    ]);
    let host = || match REAL.get() {
        // SAFETY: libc's variadic mremap; the extra pointer is what its
        // va_arg reads with MREMAP_FIXED.
        Some(p) => unsafe {
            let f: unsafe extern "C" fn(*mut c_void, size_t, size_t, c_int, ...) -> *mut c_void =
                core::mem::transmute::<usize, _>(p);
            f(old, old_size, new_size, flags, new_addr)
        },
        None => ptr_from_raw(raw::syscall6(libc::SYS_mremap, args)),
    };
    let Some(_guard) = enter() else { return host() };
    match client::dispatch(libc::SYS_mremap, &args) {
        Dispatch::Host => host(),
        Dispatch::Done(v) => ptr_from_raw(v),
    }
}

type GetcwdFn = unsafe extern "C-unwind" fn(*mut c_char, size_t) -> *mut c_char;

/// `getcwd`: the client may know a cwd inside the mount that the kernel
/// does not. A NULL buffer is allocated here, as glibc does.
///
/// # Safety
/// As `getcwd(3)`.
#[no_mangle]
pub unsafe extern "C-unwind" fn getcwd(buf: *mut c_char, size: size_t) -> *mut c_char {
    static REAL: Real = Real::new("getcwd\0");
    // SAFETY: forwarding the caller's arguments.
    unsafe { getcwd_common(&REAL, buf, size) }
}

/// # Safety
/// As `getcwd(3)`; `buflen` is the real size of `buf`.
#[no_mangle]
pub unsafe extern "C-unwind" fn __getcwd_chk(
    buf: *mut c_char,
    size: size_t,
    buflen: size_t,
) -> *mut c_char {
    static REAL: Real = Real::new("__getcwd_chk\0");
    if size > buflen {
        if let Some(p) = REAL.get() {
            // SAFETY: libc's __getcwd_chk reports the overflow and aborts.
            return unsafe {
                core::mem::transmute::<
                    usize,
                    unsafe extern "C-unwind" fn(*mut c_char, size_t, size_t) -> *mut c_char,
                >(p)(buf, size, buflen)
            };
        }
    }
    static GETCWD: Real = Real::new("getcwd\0");
    // SAFETY: `size <= buflen`, so this is a plain getcwd.
    unsafe { getcwd_common(&GETCWD, buf, size) }
}

/// # Safety
/// As `getcwd(3)`.
unsafe fn getcwd_common(real: &Real, buf: *mut c_char, size: size_t) -> *mut c_char {
    let host = |b: *mut c_char, s: size_t| match real.get() {
        // SAFETY: libc's getcwd.
        Some(p) => unsafe { core::mem::transmute::<usize, GetcwdFn>(p)(b, s) },
        None => {
            raw::set_errno(libc::ENOSYS);
            core::ptr::null_mut()
        }
    };
    let Some(guard) = enter() else {
        return host(buf, size);
    };
    // SAFETY: the caller's arguments.
    match unsafe { atoll_getcwd(buf, size) } {
        CwdAnswer::Done(p) => p,
        CwdAnswer::Kernel => host(buf, size),
        CwdAnswer::Walk => {
            // A cwd longer than `PATH_MAX`: libc's own `getcwd` meets the
            // same `ENAMETOOLONG` from its system call and walks `..` to
            // `/` itself, as on Linux. Its calls must reach atoll, so the
            // guard (under which they would go straight to the kernel,
            // whose cwd is not the program's) is dropped first.
            drop(guard);
            host(buf, size)
        }
    }
}

/// Who answers a `getcwd`.
enum CwdAnswer {
    /// atoll did: the result.
    Done(*mut c_char),
    /// The cwd is the host's: libc asks the kernel.
    Kernel,
    /// The cwd is longer than `PATH_MAX`: libc walks `..`.
    Walk,
}

/// atoll's answer to `getcwd(buf, size)`.
///
/// # Safety
/// As `getcwd(3)`.
unsafe fn atoll_getcwd(buf: *mut c_char, size: size_t) -> CwdAnswer {
    if !buf.is_null() && size == 0 {
        // glibc's answer before any system call (gnulib's
        // test-getcwd-lgpl); the kernel's would be `ERANGE`.
        raw::set_errno(libc::EINVAL);
        return CwdAnswer::Done(core::ptr::null_mut());
    }
    let (target, cap, owned) = if buf.is_null() {
        let cap = if size == 0 {
            libc::PATH_MAX as size_t
        } else {
            size
        };
        // SAFETY: plain allocation; freed below or handed to the caller
        // (who frees it, as with glibc's getcwd(NULL, …)).
        let p = unsafe { libc::malloc(cap) } as *mut c_char;
        if p.is_null() {
            raw::set_errno(libc::ENOMEM);
            return CwdAnswer::Done(p);
        }
        (p, cap, true)
    } else {
        (buf, size, false)
    };
    let release = || {
        if owned {
            // SAFETY: allocated above and not handed out.
            unsafe { libc::free(target.cast()) }
        }
    };
    let answer = match client::dispatch(libc::SYS_getcwd, &args6(&[target as u64, cap as u64])) {
        Dispatch::Done(v) if v >= 0 => return CwdAnswer::Done(target),
        Dispatch::Done(v) if v == -(libc::ENAMETOOLONG as i64) => CwdAnswer::Walk,
        Dispatch::Done(v) => {
            raw::set_errno(-v as c_int);
            CwdAnswer::Done(core::ptr::null_mut())
        }
        Dispatch::Host => CwdAnswer::Kernel,
    };
    release();
    answer
}

type FallocFn = unsafe extern "C-unwind" fn(c_int, off_t, off_t) -> c_int;

/// # Safety
/// As `posix_fallocate(3)` (returns an error number, not -1/errno).
unsafe fn posix_fallocate_common(real: &Real, fd: c_int, off: off_t, len: off_t) -> c_int {
    let host = || match real.get() {
        // SAFETY: libc's posix_fallocate.
        Some(p) => unsafe { core::mem::transmute::<usize, FallocFn>(p)(fd, off, len) },
        None => libc::ENOSYS,
    };
    let Some(_guard) = enter() else { return host() };
    let args = args6(&[fd as u64, 0, off as u64, len as u64]);
    match client::dispatch(libc::SYS_fallocate, &args) {
        Dispatch::Host => host(),
        Dispatch::Done(v) if v < 0 => -v as c_int,
        Dispatch::Done(_) => 0,
    }
}

/// # Safety
/// As `posix_fallocate(3)`.
#[no_mangle]
pub unsafe extern "C-unwind" fn posix_fallocate(fd: c_int, off: off_t, len: off_t) -> c_int {
    static REAL: Real = Real::new("posix_fallocate\0");
    // SAFETY: forwarding the caller's arguments.
    unsafe { posix_fallocate_common(&REAL, fd, off, len) }
}

/// # Safety
/// As `posix_fallocate(3)`.
#[no_mangle]
pub unsafe extern "C-unwind" fn posix_fallocate64(fd: c_int, off: off_t, len: off_t) -> c_int {
    static REAL: Real = Real::new("posix_fallocate64\0");
    // SAFETY: forwarding the caller's arguments.
    unsafe { posix_fallocate_common(&REAL, fd, off, len) }
}

/// `remove(3)`: glibc's reaches `unlink` and `rmdir` through internal
/// names (a trap each); here through the wrappers above.
///
/// # Safety
/// As `remove(3)`.
#[no_mangle]
pub unsafe extern "C-unwind" fn remove(path: Path) -> c_int {
    let _nested = crate::retframe::Nested::enter();
    // SAFETY: forwarding the caller's argument to our own wrappers.
    unsafe {
        if unlink(path) == 0 {
            return 0;
        }
        if raw::errno() == libc::EISDIR && rmdir(path) == 0 {
            return 0;
        }
    }
    -1
}

/// `struct statvfs` from `struct statfs`, as glibc's `statvfs` builds it
/// (the mount flags are valid: atoll's `statfs` and Linux's say so).
fn statvfs_of(st: &libc::statfs, out: &mut libc::statvfs) {
    // SAFETY: `fsid_t` is two ints, 8 bytes.
    let fsid: [u32; 2] = unsafe { core::mem::transmute(st.f_fsid) };
    // SAFETY: `f_flags` is the word after `f_frsize` (see atoll-client's
    // `meta::statfs`), inside `st`.
    let flags = unsafe { core::ptr::addr_of!(st.f_frsize).add(1).read() };
    out.f_bsize = st.f_bsize as u64;
    out.f_frsize = if st.f_frsize != 0 {
        st.f_frsize
    } else {
        st.f_bsize
    } as u64;
    out.f_blocks = st.f_blocks;
    out.f_bfree = st.f_bfree;
    out.f_bavail = st.f_bavail;
    out.f_files = st.f_files;
    out.f_ffree = st.f_ffree;
    out.f_favail = st.f_ffree;
    out.f_fsid = fsid[0] as u64 | ((fsid[1] as u64) << 32);
    out.f_flag = (flags & !ST_VALID) as u64;
    out.f_namemax = st.f_namelen as u64;
}

/// `statfs`'s `f_flags` bit saying the other bits are mount flags.
const ST_VALID: i64 = 0x0020;

macro_rules! statvfs_from {
    ($($name:ident($arg:ident: $t:ty) via $statfs:ident;)*) => {$(
        /// glibc's reaches `statfs` through an internal name (a trap), and
        /// without valid flags reads `/proc/mounts`; here one wrapped
        /// `statfs` and a field copy.
        ///
        /// # Safety
        /// As `statvfs(3)`.
        #[no_mangle]
        pub unsafe extern "C-unwind" fn $name($arg: $t, buf: *mut libc::statvfs) -> c_int {
            let mut st: libc::statfs = unsafe { core::mem::zeroed() };
            let _nested = crate::retframe::Nested::enter();
            // SAFETY: our own statfs wrapper with a local buffer.
            if unsafe { $statfs($arg, &mut st) } != 0 {
                return -1;
            }
            if buf.is_null() {
                raw::set_errno(libc::EFAULT);
                return -1;
            }
            // SAFETY: the caller's buffer for exactly this struct.
            statvfs_of(&st, unsafe { &mut *buf });
            0
        }
    )*};
}

statvfs_from! {
    statvfs(path: Path) via statfs;
    statvfs64(path: Path) via statfs;
    fstatvfs(fd: c_int) via fstatfs;
    fstatvfs64(fd: c_int) via fstatfs;
}

type FadviseFn = unsafe extern "C-unwind" fn(c_int, off_t, off_t, c_int) -> c_int;

/// # Safety
/// As `posix_fadvise(3)` (returns an error number, not -1/errno).
unsafe fn fadvise_common(real: &Real, fd: c_int, off: off_t, len: off_t, advice: c_int) -> c_int {
    let host = || match real.get() {
        // SAFETY: libc's posix_fadvise.
        Some(p) => unsafe { core::mem::transmute::<usize, FadviseFn>(p)(fd, off, len, advice) },
        None => libc::ENOSYS,
    };
    let Some(_guard) = enter() else { return host() };
    let args = args6(&[fd as u64, off as u64, len as u64, advice as u64]);
    match client::dispatch(libc::SYS_fadvise64, &args) {
        Dispatch::Host => host(),
        Dispatch::Done(v) if v < 0 => -v as c_int,
        Dispatch::Done(_) => 0,
    }
}

/// # Safety
/// As `posix_fadvise(3)`.
#[no_mangle]
pub unsafe extern "C-unwind" fn posix_fadvise(
    fd: c_int,
    off: off_t,
    len: off_t,
    advice: c_int,
) -> c_int {
    static REAL: Real = Real::new("posix_fadvise\0");
    // SAFETY: forwarding the caller's arguments.
    unsafe { fadvise_common(&REAL, fd, off, len, advice) }
}

/// # Safety
/// As `posix_fadvise(3)`.
#[no_mangle]
pub unsafe extern "C-unwind" fn posix_fadvise64(
    fd: c_int,
    off: off_t,
    len: off_t,
    advice: c_int,
) -> c_int {
    static REAL: Real = Real::new("posix_fadvise64\0");
    // SAFETY: forwarding the caller's arguments.
    unsafe { fadvise_common(&REAL, fd, off, len, advice) }
}

mod dir;
mod process;
mod search;
