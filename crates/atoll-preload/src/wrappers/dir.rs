//! Directory streams of our own: `opendir`, `fdopendir`, `readdir` and
//! the rest of `<dirent.h>`'s stream calls.
//!
//! glibc's `opendir` and `readdir` reach the kernel through internal names
//! (`openat`, `fstat`, `fcntl`, `getdents64`, `close`), so every one of
//! their system calls is a Syscall User Dispatch trap (~3 µs): a program
//! that lists directories (dbench, `find`, build systems) paid several per
//! directory and one per buffer of entries. Here a stream is built on the
//! wrapped `open`/`getdents64`/`lseek`/`close`, which cost no trap, for
//! atoll and host directories alike.
//!
//! The calls that take a `DIR *` form a closed set (`readdir`,
//! `readdir64`, `readdir_r`, `readdir64_r`, `closedir`, `dirfd`,
//! `rewinddir`, `telldir`, `seekdir`), all wrapped here, and a program only
//! gets a stream of ours from `opendir`/`fdopendir` here. Streams glibc
//! made itself (inside `scandir`, `nftw`, `glob`, or while atoll is off)
//! are told apart by the first word: ours is [`MAGIC`], whose low half is
//! a negative `int` where a glibc stream keeps its descriptor, and go to
//! the real functions. On x86-64 `struct dirent` and `struct dirent64` are
//! both the kernel's `linux_dirent64`, so `readdir` hands out entries in
//! place, as glibc does.

use core::sync::atomic::AtomicBool;

use super::*;

/// First word of a stream of ours (low half negative: never a descriptor).
const MAGIC: u64 = 0x5354_5245_A701_1D1A;

/// Bytes of entries read at once (glibc reads 32 KiB too).
const BUF: usize = 32 * 1024;

#[repr(C)]
struct Stream {
    magic: u64,
    fd: c_int,
    /// One reader at a time (POSIX leaves concurrent `readdir` of one
    /// stream undefined; glibc serialises it, so do we).
    busy: AtomicBool,
    /// Bytes of `buf` the last `getdents64` filled, and the next entry.
    len: usize,
    pos: usize,
    /// `d_off` of the entry returned last (`telldir`).
    filepos: i64,
    /// 8-aligned, as the kernel writes entries.
    buf: [u64; BUF / 8],
}

/// Ours, or glibc's (`None`)?
fn ours(d: *mut c_void) -> Option<&'static mut Stream> {
    if d.is_null() {
        return None;
    }
    // SAFETY: `d` is a stream the program got from opendir/fdopendir:
    // ours (a `Stream`) or glibc's (whose first 8 bytes are its descriptor
    // and lock word); both are at least 8 bytes and 8-aligned.
    let first = unsafe { (d as *const u64).read() };
    // SAFETY: the magic says it is a live `Stream` of ours, leaked by
    // `stream` until `closedir`.
    (first == MAGIC).then(|| unsafe { &mut *(d as *mut Stream) })
}

/// Should this call make a stream of ours? (Not while atoll is off or
/// atoll's own code is running: glibc's streams serve those.)
fn ours_wanted() -> bool {
    client::mode() != Mode::Off && !selector::inside_atoll()
}

fn stream(fd: c_int) -> *mut c_void {
    let s = Box::new(Stream {
        magic: MAGIC,
        fd,
        busy: AtomicBool::new(false),
        len: 0,
        pos: 0,
        filepos: 0,
        buf: [0; BUF / 8],
    });
    Box::into_raw(s).cast()
}

/// Run `f` holding the stream (one call at a time).
fn held<R>(s: &mut Stream, f: impl FnOnce(&mut Stream) -> R) -> R {
    while s
        .busy
        .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        core::hint::spin_loop();
    }
    // `f` calls wrappers: their returns are not the program's (a signal
    // delivered there would leave the stream busy for good).
    let nested = crate::retframe::Nested::enter();
    let r = f(s);
    drop(nested);
    s.busy.store(false, Ordering::Release);
    r
}

macro_rules! real {
    ($name:expr, $ty:ty) => {{
        static REAL: Real = Real::new(concat!($name, "\0"));
        // SAFETY: libc's definition of this very symbol, of type `$ty`.
        REAL.get()
            .map(|p| unsafe { core::mem::transmute::<usize, $ty>(p) })
    }};
}

type OpendirFn = unsafe extern "C-unwind" fn(Path) -> *mut c_void;
type FdopendirFn = unsafe extern "C-unwind" fn(c_int) -> *mut c_void;
type DirFn<R> = unsafe extern "C-unwind" fn(*mut c_void) -> R;
type ReaddirRFn = unsafe extern "C-unwind" fn(*mut c_void, *mut c_void, *mut *mut c_void) -> c_int;
type SeekdirFn = unsafe extern "C-unwind" fn(*mut c_void, libc::c_long);

/// # Safety
/// As `opendir(3)`.
#[no_mangle]
pub unsafe extern "C-unwind" fn opendir(path: Path) -> *mut c_void {
    if !ours_wanted() {
        return match real!("opendir", OpendirFn) {
            // SAFETY: forwarding the caller's argument.
            Some(f) => unsafe { f(path) },
            None => core::ptr::null_mut(),
        };
    }
    let flags = libc::O_RDONLY | libc::O_NONBLOCK | libc::O_DIRECTORY | libc::O_CLOEXEC;
    let _nested = crate::retframe::Nested::enter();
    // SAFETY: our own `open` wrapper with the caller's path.
    let fd = unsafe { open(path, flags, 0) };
    if fd < 0 {
        return core::ptr::null_mut();
    }
    stream(fd)
}

/// # Safety
/// As `fdopendir(3)`.
#[no_mangle]
pub unsafe extern "C-unwind" fn fdopendir(fd: c_int) -> *mut c_void {
    if !ours_wanted() {
        return match real!("fdopendir", FdopendirFn) {
            // SAFETY: forwarding the caller's argument.
            Some(f) => unsafe { f(fd) },
            None => core::ptr::null_mut(),
        };
    }
    let _nested = crate::retframe::Nested::enter();
    // glibc's checks, in its order: a directory, not O_PATH, readable.
    // SAFETY: a zeroed stat is a valid buffer for our fstat wrapper.
    let mut st: libc::stat = unsafe { core::mem::zeroed() };
    // SAFETY: our own wrappers with a local buffer / integer arguments.
    if unsafe { fstat(fd, &mut st) } != 0 {
        return core::ptr::null_mut();
    }
    if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
        raw::set_errno(libc::ENOTDIR);
        return core::ptr::null_mut();
    }
    // SAFETY: as above.
    let fl = unsafe { fcntl(fd, libc::F_GETFL, 0) };
    if fl < 0 {
        return core::ptr::null_mut();
    }
    if fl & libc::O_PATH != 0 {
        raw::set_errno(libc::EBADF);
        return core::ptr::null_mut();
    }
    if fl & libc::O_ACCMODE == libc::O_WRONLY {
        raw::set_errno(libc::EINVAL);
        return core::ptr::null_mut();
    }
    stream(fd)
}

/// # Safety
/// As `closedir(3)`.
#[no_mangle]
pub unsafe extern "C-unwind" fn closedir(d: *mut c_void) -> c_int {
    let Some(s) = ours(d) else {
        if d.is_null() {
            raw::set_errno(libc::EBADF);
            return -1;
        }
        return match real!("closedir", DirFn<c_int>) {
            // SAFETY: glibc's stream, to glibc.
            Some(f) => unsafe { f(d) },
            None => -1,
        };
    };
    let fd = s.fd;
    s.magic = 0;
    // SAFETY: made by `stream` with Box::into_raw; the program gives it up.
    drop(unsafe { Box::from_raw(d as *mut Stream) });
    let _nested = crate::retframe::Nested::enter();
    // SAFETY: our own close wrapper.
    unsafe { close(fd) }
}

/// The next entry of `s`, or null (errno set on error, kept at the end).
fn next(s: &mut Stream) -> *mut c_void {
    held(s, next_held)
}

fn next_held(s: &mut Stream) -> *mut c_void {
    if s.pos >= s.len {
        let saved = raw::errno();
        // SAFETY: our own getdents64 wrapper into the stream's buffer.
        let n = unsafe { getdents64(s.fd, s.buf.as_mut_ptr().cast(), BUF) };
        if n <= 0 {
            // A directory removed since it was opened (a removed cwd)
            // fails `getdents64` with `ENOENT` on Linux; glibc's readdir,
            // as POSIX asks, takes that for the end, errno untouched.
            if n < 0 && raw::errno() == libc::ENOENT {
                raw::set_errno(saved);
            }
            return core::ptr::null_mut();
        }
        s.len = n as usize;
        s.pos = 0;
    }
    let base = s.buf.as_mut_ptr() as *mut u8;
    // SAFETY: `pos < len <= BUF`: a whole entry the kernel (or atoll)
    // wrote, 8-aligned; `linux_dirent64` is `struct dirent`.
    let entry = unsafe { &*(base.add(s.pos) as *const libc::dirent64) };
    let reclen = (entry.d_reclen as usize).max(1);
    s.filepos = entry.d_off;
    // SAFETY: as above.
    let p = unsafe { base.add(s.pos) };
    s.pos += reclen;
    p.cast()
}

macro_rules! readdir_fns {
    ($($name:ident),*) => {$(
        /// # Safety
        /// As `readdir(3)`.
        #[no_mangle]
        pub unsafe extern "C-unwind" fn $name(d: *mut c_void) -> *mut c_void {
            match ours(d) {
                Some(s) => next(s),
                None if d.is_null() => {
                    raw::set_errno(libc::EBADF);
                    core::ptr::null_mut()
                }
                None => match real!(stringify!($name), DirFn<*mut c_void>) {
                    // SAFETY: glibc's stream, to glibc.
                    Some(f) => unsafe { f(d) },
                    None => core::ptr::null_mut(),
                },
            }
        }
    )*};
}

readdir_fns!(readdir, readdir64);

macro_rules! readdir_r_fns {
    ($($name:ident),*) => {$(
        /// # Safety
        /// As `readdir_r(3)`: `entry` holds a whole `struct dirent`.
        #[no_mangle]
        pub unsafe extern "C-unwind" fn $name(
            d: *mut c_void,
            entry: *mut c_void,
            result: *mut *mut c_void,
        ) -> c_int {
            let Some(s) = ours(d) else {
                return match real!(stringify!($name), ReaddirRFn) {
                    // SAFETY: glibc's stream, to glibc.
                    Some(f) => unsafe { f(d, entry, result) },
                    None => libc::EBADF,
                };
            };
            let saved = raw::errno();
            raw::set_errno(0);
            let p = next(s);
            let err = raw::errno();
            raw::set_errno(saved);
            // SAFETY: `result` is the caller's out pointer.
            unsafe {
                if p.is_null() {
                    *result = core::ptr::null_mut();
                    return err;
                }
                let e = &*(p as *const libc::dirent64);
                let n = (e.d_reclen as usize).min(core::mem::size_of::<libc::dirent64>());
                core::ptr::copy_nonoverlapping(p as *const u8, entry as *mut u8, n);
                *result = entry;
            }
            0
        }
    )*};
}

readdir_r_fns!(readdir_r, readdir64_r);

/// # Safety
/// As `dirfd(3)`.
#[no_mangle]
pub unsafe extern "C-unwind" fn dirfd(d: *mut c_void) -> c_int {
    match ours(d) {
        Some(s) => s.fd,
        None if d.is_null() => {
            raw::set_errno(libc::EINVAL);
            -1
        }
        None => match real!("dirfd", DirFn<c_int>) {
            // SAFETY: glibc's stream, to glibc.
            Some(f) => unsafe { f(d) },
            None => -1,
        },
    }
}

/// Go to position `pos` (a `d_off`) and drop what was read ahead.
fn seek(s: &mut Stream, pos: i64) {
    held(s, |s| {
        // SAFETY: our own lseek wrapper.
        if unsafe { lseek(s.fd, pos, libc::SEEK_SET) } >= 0 {
            s.len = 0;
            s.pos = 0;
            s.filepos = pos;
        }
    })
}

/// # Safety
/// As `rewinddir(3)`.
#[no_mangle]
pub unsafe extern "C-unwind" fn rewinddir(d: *mut c_void) {
    match ours(d) {
        Some(s) => seek(s, 0),
        None if d.is_null() => {}
        None => {
            if let Some(f) = real!("rewinddir", DirFn<()>) {
                // SAFETY: glibc's stream, to glibc.
                unsafe { f(d) }
            }
        }
    }
}

/// # Safety
/// As `telldir(3)`.
#[no_mangle]
pub unsafe extern "C-unwind" fn telldir(d: *mut c_void) -> libc::c_long {
    match ours(d) {
        Some(s) => s.filepos,
        None if d.is_null() => {
            raw::set_errno(libc::EBADF);
            -1
        }
        None => match real!("telldir", DirFn<libc::c_long>) {
            // SAFETY: glibc's stream, to glibc.
            Some(f) => unsafe { f(d) },
            None => -1,
        },
    }
}

/// # Safety
/// As `seekdir(3)`: `pos` came from `telldir` on this stream.
#[no_mangle]
pub unsafe extern "C-unwind" fn seekdir(d: *mut c_void, pos: libc::c_long) {
    match ours(d) {
        Some(s) => seek(s, pos),
        None if d.is_null() => {}
        None => {
            if let Some(f) = real!("seekdir", SeekdirFn) {
                // SAFETY: glibc's stream, to glibc.
                unsafe { f(d, pos) }
            }
        }
    }
}
