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
//! aliases that no wrapper can see (`opendir`/`readdir` → `openat` +
//! `getdents64`, `fopen`, `realpath`, `mkstemp`, `execvp`, `posix_spawn`,
//! `system`, `popen`, `statvfs`, `vfork`, `sigaction`/`signal`, …). A
//! wrapper is only worth it where a program calls the entry point often.
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
}

impl Ret for c_uint {
    /// For calls that cannot fail (`umask`).
    #[inline]
    fn from_raw(v: i64) -> c_uint {
        v as c_uint
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
            let Some(_guard) = enter() else { return host() };
            match client::dispatch(nr, &args) {
                Dispatch::Host => sigdefer::host_call(host),
                Dispatch::Done(v) => <$r as Ret>::from_raw(v),
            }
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
            let Some(_guard) = enter() else { return host() };
            match client::dispatch(nr, &args) {
                Dispatch::Host => sigdefer::host_call(host),
                Dispatch::Done(v) => <$r as Ret>::from_raw(v),
            }
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
    let Some(_guard) = enter() else {
        return host(buf, size);
    };
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
            return p;
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
    match client::dispatch(libc::SYS_getcwd, &args6(&[target as u64, cap as u64])) {
        Dispatch::Host => {
            release();
            host(buf, size)
        }
        Dispatch::Done(v) if v < 0 => {
            release();
            raw::set_errno(-v as c_int);
            core::ptr::null_mut()
        }
        Dispatch::Done(_) => target,
    }
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

// ---------------------------------------------------------------------------
// exec

extern "C" {
    static environ: *const *const c_char;
}

type ExecveFn = unsafe extern "C-unwind" fn(Path, *const Path, *const Path) -> c_int;

/// # Safety
/// As `execve(2)`.
unsafe fn exec_common(
    real: &Real,
    nr: i64,
    args: [u64; 6],
    host: impl Fn(usize) -> c_int,
) -> c_int {
    let Some(_guard) = enter() else {
        return match real.get() {
            Some(p) => host(p),
            None => c_int::from_raw(raw::syscall6(nr, args)),
        };
    };
    // The new image starts with fresh counters: report ours first.
    stats::flush();
    match client::dispatch(nr, &args) {
        Dispatch::Done(v) => c_int::from_raw(v),
        Dispatch::Host => match real.get() {
            Some(p) => host(p),
            None => c_int::from_raw(raw::syscall6(nr, args)),
        },
    }
}

/// # Safety
/// As `execve(2)`.
#[no_mangle]
pub unsafe extern "C-unwind" fn execve(path: Path, argv: *const Path, envp: *const Path) -> c_int {
    static REAL: Real = Real::new("execve\0");
    let args = args6(&[path as u64, argv as u64, envp as u64]);
    // SAFETY: libc's execve, with the caller's arguments.
    unsafe {
        exec_common(&REAL, libc::SYS_execve, args, |p| {
            core::mem::transmute::<usize, ExecveFn>(p)(path, argv, envp)
        })
    }
}

/// # Safety
/// As `execv(3)`.
#[no_mangle]
pub unsafe extern "C-unwind" fn execv(path: Path, argv: *const Path) -> c_int {
    static REAL: Real = Real::new("execv\0");
    // SAFETY: `environ` is libc's current environment.
    let envp = unsafe { environ };
    let args = args6(&[path as u64, argv as u64, envp as u64]);
    // SAFETY: libc's execv, with the caller's arguments.
    unsafe {
        exec_common(&REAL, libc::SYS_execve, args, |p| {
            core::mem::transmute::<usize, unsafe extern "C-unwind" fn(Path, *const Path) -> c_int>(
                p,
            )(path, argv)
        })
    }
}

/// # Safety
/// As `fexecve(3)`.
#[no_mangle]
pub unsafe extern "C-unwind" fn fexecve(fd: c_int, argv: *const Path, envp: *const Path) -> c_int {
    static REAL: Real = Real::new("fexecve\0");
    let args = args6(&[
        fd as u64,
        c"".as_ptr() as u64,
        argv as u64,
        envp as u64,
        libc::AT_EMPTY_PATH as u64,
    ]);
    // SAFETY: libc's fexecve, with the caller's arguments.
    unsafe {
        exec_common(&REAL, libc::SYS_execveat, args, |p| {
            core::mem::transmute::<
                usize,
                unsafe extern "C-unwind" fn(c_int, *const Path, *const Path) -> c_int,
            >(p)(fd, argv, envp)
        })
    }
}

// ---------------------------------------------------------------------------
// processes and threads

/// `fork`: the client prepares the child's session *before* glibc's fork
/// takes its internal locks (malloc's among them), which the trap path
/// cannot do; the real fork then runs with the selector at ALLOW.
///
/// # Safety
/// As `fork(2)`.
#[no_mangle]
pub unsafe extern "C-unwind" fn fork() -> libc::pid_t {
    static REAL: Real = Real::new("fork\0");
    let host = || match REAL.get() {
        // SAFETY: libc's fork.
        Some(p) => unsafe {
            core::mem::transmute::<usize, unsafe extern "C-unwind" fn() -> libc::pid_t>(p)()
        },
        None => c_int::from_raw(raw::syscall(libc::SYS_fork, &[])),
    };
    let Some(guard) = enter() else { return host() };
    let prep = match client::fork_prepare() {
        Ok(p) => p,
        Err(e) => {
            raw::set_errno(e);
            return -1;
        }
    };
    let pid = host();
    let err = raw::errno();
    if pid == 0 {
        sigdefer::forget_pending();
        stats::reset();
        client::fork_child(prep);
        // SUD is not inherited by fork children.
        selector::enable_sud();
    } else {
        client::fork_parent(prep, if pid < 0 { -(err as i64) } else { pid as i64 });
    }
    raw::set_errno(err);
    drop(guard);
    pid
}

struct ThreadStart {
    start: extern "C-unwind" fn(*mut c_void) -> *mut c_void,
    arg: *mut c_void,
}

/// First code of a thread created through our `pthread_create`: arm SUD for
/// it (not inherited by new threads), then run the program's routine.
extern "C-unwind" fn thread_start(p: *mut c_void) -> *mut c_void {
    let ThreadStart { start, arg } = {
        let _guard = AtollGuard::enter();
        // SAFETY: `p` is the Box leaked by `pthread_create` below, handed
        // to exactly this thread.
        let ts = *unsafe { Box::from_raw(p as *mut ThreadStart) };
        selector::enable_sud();
        ts
    };
    start(arg)
}

type PthreadCreateFn = unsafe extern "C-unwind" fn(
    *mut libc::pthread_t,
    *const libc::pthread_attr_t,
    extern "C-unwind" fn(*mut c_void) -> *mut c_void,
    *mut c_void,
) -> c_int;

/// # Safety
/// As `pthread_create(3)`.
#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_create(
    thread: *mut libc::pthread_t,
    attr: *const libc::pthread_attr_t,
    start: extern "C-unwind" fn(*mut c_void) -> *mut c_void,
    arg: *mut c_void,
) -> c_int {
    static REAL: Real = Real::new("pthread_create\0");
    let Some(p) = REAL.get() else {
        return libc::ENOSYS;
    };
    // SAFETY: libc's pthread_create.
    let real = unsafe { core::mem::transmute::<usize, PthreadCreateFn>(p) };
    if client::mode() == Mode::Off || selector::inside_atoll() {
        // SAFETY: the caller's arguments.
        return unsafe { real(thread, attr, start, arg) };
    }
    let _guard = AtollGuard::enter();
    let boxed = Box::into_raw(Box::new(ThreadStart { start, arg }));
    // SAFETY: the caller's arguments, with our start routine in front.
    let r = unsafe { real(thread, attr, thread_start, boxed.cast()) };
    if r != 0 {
        // SAFETY: the thread was not created; the Box is still ours.
        drop(unsafe { Box::from_raw(boxed) });
    }
    r
}

type SigmaskFn =
    unsafe extern "C-unwind" fn(c_int, *const libc::sigset_t, *mut libc::sigset_t) -> c_int;

/// # Safety
/// As `sigprocmask(2)`; `pthread` selects `pthread_sigmask`'s error
/// convention (error number returned, errno untouched).
unsafe fn sigmask_common(
    real: &Real,
    how: c_int,
    set: *const libc::sigset_t,
    old: *mut libc::sigset_t,
    pthread: bool,
) -> c_int {
    let Some(p) = real.get() else {
        raw::set_errno(libc::ENOSYS);
        return -1;
    };
    // SAFETY: libc's sigprocmask/pthread_sigmask.
    let f = unsafe { core::mem::transmute::<usize, SigmaskFn>(p) };
    if client::mode() == Mode::Off || set.is_null() || selector::inside_atoll() {
        // SAFETY: the caller's arguments.
        return unsafe { f(how, set, old) };
    }
    // SAFETY: `set` points to a sigset_t (caller's contract).
    let mut copy = unsafe { *set };
    // A blocked SIGSYS during a trap would kill the process; glibc never
    // blocks its own two internal signals (SIGCANCEL, SIGSETXID) either.
    // SAFETY: `copy` is a valid sigset_t.
    unsafe {
        libc::sigdelset(&mut copy, libc::SIGSYS);
        libc::sigdelset(&mut copy, libc::SIGRTMIN() - 2);
        libc::sigdelset(&mut copy, libc::SIGRTMIN() - 1);
    }
    // The system call itself, from our own text (never trapped), and
    // *without* holding an AtollGuard: signals this call unblocks are
    // delivered as it returns, and their handlers must run as program
    // code whose calls reach atoll (Python's wakeup-fd handler writes to
    // an atoll pipe). Nothing of the client is held here.
    let r = raw::syscall(
        libc::SYS_rt_sigprocmask,
        &[
            how as u64,
            &copy as *const libc::sigset_t as u64,
            old as u64,
            KSIGSET_SIZE,
        ],
    );
    match (r < 0, pthread) {
        (false, _) => 0,
        (true, true) => (-r) as c_int,
        (true, false) => {
            raw::set_errno((-r) as c_int);
            -1
        }
    }
}

/// # Safety
/// As `sigprocmask(2)`.
#[no_mangle]
pub unsafe extern "C-unwind" fn sigprocmask(
    how: c_int,
    set: *const libc::sigset_t,
    old: *mut libc::sigset_t,
) -> c_int {
    static REAL: Real = Real::new("sigprocmask\0");
    // SAFETY: forwarding the caller's arguments.
    unsafe { sigmask_common(&REAL, how, set, old, false) }
}

/// # Safety
/// As `pthread_sigmask(3)`.
#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_sigmask(
    how: c_int,
    set: *const libc::sigset_t,
    old: *mut libc::sigset_t,
) -> c_int {
    static REAL: Real = Real::new("pthread_sigmask\0");
    // SAFETY: forwarding the caller's arguments.
    unsafe { sigmask_common(&REAL, how, set, old, true) }
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

// ---------------------------------------------------------------------------
// posix_spawn

type SpawnFn = unsafe extern "C-unwind" fn(
    *mut libc::pid_t,
    Path,
    *const libc::posix_spawn_file_actions_t,
    *const libc::posix_spawnattr_t,
    *const Path,
    *const Path,
) -> c_int;

/// Is `path` an executable file, asking atoll first? Runs under a guard.
fn executable(path: &core::ffi::CStr) -> bool {
    let args = args6(&[path.as_ptr() as u64, libc::X_OK as u64]);
    let r = match client::dispatch(libc::SYS_access, &args) {
        Dispatch::Done(v) => v,
        Dispatch::Host => raw::syscall6(libc::SYS_access, args),
    };
    r == 0
}

/// `posix_spawnp`'s search of `PATH` (default `/bin:/usr/bin`, as glibc),
/// done here because atoll directories in `PATH` are invisible to the
/// kernel. `None`: not found.
fn search_path(file: &[u8]) -> Option<std::ffi::CString> {
    // SAFETY: getenv has no preconditions; we only read the result.
    let path = unsafe { libc::getenv(c"PATH".as_ptr()) };
    let path: &[u8] = if path.is_null() {
        b"/bin:/usr/bin"
    } else {
        // SAFETY: getenv returns a NUL-terminated string.
        unsafe { core::ffi::CStr::from_ptr(path) }.to_bytes()
    };
    path.split(|&b| b == b':').find_map(|dir| {
        let dir: &[u8] = if dir.is_empty() { b"." } else { dir };
        let mut cand = dir.to_vec();
        cand.push(b'/');
        cand.extend_from_slice(file);
        let cand = std::ffi::CString::new(cand).ok()?;
        executable(&cand).then_some(cand)
    })
}

/// `posix_spawn(p)` without file actions for an atoll client: the client
/// prepares the exec in the parent (program image, environment, child
/// session), then the real
/// function runs with the selector at ALLOW, so its vfork-style clone and
/// the child's exec reach Linux directly — the child never runs atoll code
/// in memory it shares with us.
///
/// # Safety
/// As `posix_spawn(3)`.
#[allow(clippy::too_many_arguments)]
unsafe fn spawn_common(
    real: &Real,
    search: bool,
    pid: *mut libc::pid_t,
    file: Path,
    actions: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
    argv: *const Path,
    envp: *const Path,
) -> c_int {
    let Some(p) = real.get() else {
        return libc::ENOSYS;
    };
    // SAFETY: libc's posix_spawn/posix_spawnp.
    let f = unsafe { core::mem::transmute::<usize, SpawnFn>(p) };
    // File actions (`dup2` of a pipe onto stdout, `open` of an atoll path,
    // …) run in the child before the exec; if they ran with the selector at
    // ALLOW they would act on bare placeholder descriptors the new program
    // cannot map back to atoll objects. Such spawns take the trapped path
    // instead, as `system()` and `popen()` do: the internal clone becomes a
    // fork with a child session, and the child's actions and exec are
    // emulated like any other system call.
    if client::mode() != Mode::Client
        || selector::inside_atoll()
        || file.is_null()
        || !actions.is_null()
    {
        // SAFETY: the caller's arguments.
        return unsafe { f(pid, file, actions, attr, argv, envp) };
    }
    let _guard = AtollGuard::enter();
    // A path the program cannot read fails as the child's execve would.
    let name = match client::user_path(file as u64) {
        // SAFETY: the kernel found `file` readable up to this NUL.
        Ok(p) => unsafe { core::ffi::CStr::from_ptr(p.as_ptr().cast()) },
        Err(e) => return e,
    };
    let resolved;
    let path: &core::ffi::CStr = if search && !name.to_bytes().contains(&b'/') {
        match search_path(name.to_bytes()) {
            Some(p) => {
                resolved = p;
                &resolved
            }
            None => return libc::ENOENT,
        }
    } else {
        name
    };
    let plan = match client::prepare_exec(path, argv, envp) {
        Ok(plan) => plan,
        Err(e) => return e,
    };
    // An atoll program was copied into a memfd the child inherits.
    let fd_path;
    let run: &core::ffi::CStr = match plan.exec_fd() {
        Some(fd) => {
            fd_path = std::ffi::CString::new(format!("/proc/self/fd/{fd}")).unwrap_or_default();
            &fd_path
        }
        None => plan.path(),
    };
    // SAFETY: the plan owns `run`, argv and envp until it drops below.
    let r = unsafe { f(pid, run.as_ptr(), actions, attr, plan.argv(), plan.envp()) };
    drop(plan);
    r
}

/// # Safety
/// As `posix_spawn(3)`.
#[no_mangle]
pub unsafe extern "C-unwind" fn posix_spawn(
    pid: *mut libc::pid_t,
    path: Path,
    actions: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
    argv: *const Path,
    envp: *const Path,
) -> c_int {
    static REAL: Real = Real::new("posix_spawn\0");
    // SAFETY: forwarding the caller's arguments.
    unsafe { spawn_common(&REAL, false, pid, path, actions, attr, argv, envp) }
}

/// # Safety
/// As `posix_spawnp(3)`.
#[no_mangle]
pub unsafe extern "C-unwind" fn posix_spawnp(
    pid: *mut libc::pid_t,
    file: Path,
    actions: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
    argv: *const Path,
    envp: *const Path,
) -> c_int {
    static REAL: Real = Real::new("posix_spawnp\0");
    // SAFETY: forwarding the caller's arguments.
    unsafe { spawn_common(&REAL, true, pid, file, actions, attr, argv, envp) }
}
