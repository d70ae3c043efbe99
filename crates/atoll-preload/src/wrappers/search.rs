//! `execvp`, `execvpe` and `execlp`: the search of `PATH`. glibc tries an `execve`
//! in each directory with its internal `__execve`, which no wrapper sees,
//! so every attempt that failed because the directory has no such program
//! was a trap (a gcc driver starting `as` tried eleven directories first).
//! The same search is done here, each attempt through the `execve`
//! wrapper: a failed attempt costs no signal, a successful one is the
//! wrapper's exec.
//!
//! The order and the errors are glibc's (`posix/execvpe.c`): `PATH`, or
//! `/bin:/usr/bin` when unset; an empty entry is the working directory;
//! `EACCES` is remembered and the search goes on; `ENOENT`, `ESTALE`,
//! `ENOTDIR`, `ENODEV`, `ETIMEDOUT` go on; any other error ends it. A
//! program that is a script without `#!` (`ENOEXEC`, glibc then runs it
//! with `/bin/sh`), a name with a `/`, or a name or `PATH` too long are
//! left to glibc's own function, which starts over: the attempts before
//! fail again the same way.
//!
//! It may run in the child of a `vfork` (gcc's `pex_unix_exec_child`),
//! which under atoll is a fork (`sigsys::clone::classify`), but allocates
//! nothing anyway: the candidate path is built in a buffer on the stack.

use super::*;

extern "C" {
    static environ: *const *const c_char;
}

type ExecvpeFn = unsafe extern "C-unwind" fn(Path, *const Path, *const Path) -> c_int;
type ExecvpFn = unsafe extern "C-unwind" fn(Path, *const Path) -> c_int;

const PATH_MAX: usize = 4096;
const NAME_MAX: usize = 255;

/// # Safety
/// As `execvp(3)`.
#[no_mangle]
pub unsafe extern "C-unwind" fn execvp(file: Path, argv: *const Path) -> c_int {
    static REAL: Real = Real::new("execvp\0");
    // SAFETY: `environ` is libc's current environment, as execvp uses.
    let envp = unsafe { environ };
    let real = || match REAL.get() {
        // SAFETY: libc's execvp, with the caller's arguments.
        Some(p) => unsafe { core::mem::transmute::<usize, ExecvpFn>(p)(file, argv) },
        None => {
            raw::set_errno(libc::ENOSYS);
            -1
        }
    };
    // SAFETY: the caller's arguments, as execvp takes them.
    unsafe { search(file, argv, envp, real) }
}

/// # Safety
/// As `execvpe(3)`.
#[no_mangle]
pub unsafe extern "C-unwind" fn execvpe(file: Path, argv: *const Path, envp: *const Path) -> c_int {
    static REAL: Real = Real::new("execvpe\0");
    let real = || match REAL.get() {
        // SAFETY: libc's execvpe, with the caller's arguments.
        Some(p) => unsafe { core::mem::transmute::<usize, ExecvpeFn>(p)(file, argv, envp) },
        None => {
            raw::set_errno(libc::ENOSYS);
            -1
        }
    };
    // SAFETY: the caller's arguments, as execvpe takes them.
    unsafe { search(file, argv, envp, real) }
}

// `execlp(file, arg0, ..., NULL)` is `execvp` with an argument vector
// built from its list. The list is variadic, which Rust cannot define:
// this entry turns it into a vector in place. The caller's return address
// is taken off the stack and the five register arguments after `file`
// pushed in its place, so that they lie just below the ones the caller
// passed on the stack: one contiguous array from `arg0` to the caller's
// NULL, however long. The return address waits in RBX (callee-saved, its
// own value pushed below the array), and goes back where it was.
// SAFETY (of the asm): it reads only the caller's argument registers and
// stack arguments, and leaves RSP, RBX and the return address as found.
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn execlp(file: Path, arg0: Path) -> c_int {
    core::arch::naked_asm!(
        "pop r11",
        "push r9",
        "push r8",
        "push rcx",
        "push rdx",
        "push rsi",
        "mov rsi, rsp",
        "push rbx",
        "mov rbx, r11",
        "call {with_argv}",
        "mov r11, rbx",
        "pop rbx",
        "add rsp, 40",
        "push r11",
        "ret",
        with_argv = sym execlp_with_argv,
    )
}

/// `execlp` once its list is a vector: `execvp`'s search (glibc's own
/// `execlp` does the same with its internal `execvpe`).
extern "C" fn execlp_with_argv(file: Path, argv: *const Path) -> c_int {
    // SAFETY: `file` and the vector `execlp`'s entry built from the
    // caller's NULL-terminated list.
    unsafe { execvp(file, argv) }
}

/// What one failed attempt means for the search.
#[derive(Debug, PartialEq, Eq)]
enum Next {
    /// Try the next directory.
    GoOn,
    /// Go on, and fail with `EACCES` if nothing is found.
    Denied,
    /// Leave the search to glibc (a script without `#!`).
    ToLibc,
    /// Fail with this error now.
    Fail,
}

fn after_failure(errno: c_int) -> Next {
    match errno {
        libc::EACCES => Next::Denied,
        libc::ENOENT | libc::ESTALE | libc::ENOTDIR | libc::ENODEV | libc::ETIMEDOUT => Next::GoOn,
        libc::ENOEXEC => Next::ToLibc,
        _ => Next::Fail,
    }
}

/// Build `dir/name` (or `name` for an empty `dir`) NUL-terminated in
/// `buf`; false if it does not fit.
fn candidate(buf: &mut [u8], dir: &[u8], name: &[u8]) -> bool {
    let slash = usize::from(!dir.is_empty());
    let len = dir.len() + slash + name.len();
    if len + 1 > buf.len() {
        return false;
    }
    buf[..dir.len()].copy_from_slice(dir);
    if slash == 1 {
        buf[dir.len()] = b'/';
    }
    buf[dir.len() + slash..len].copy_from_slice(name);
    buf[len] = 0;
    true
}

/// # Safety
/// `file`, `argv`, `envp` as `execvpe(3)` takes them.
unsafe fn search(
    file: Path,
    argv: *const Path,
    envp: *const Path,
    real: impl Fn() -> c_int,
) -> c_int {
    if client::mode() == Mode::Off || selector::inside_atoll() || file.is_null() {
        return real();
    }
    // SAFETY: the caller's NUL-terminated program name.
    let name = unsafe { core::ffi::CStr::from_ptr(file) }.to_bytes();
    // SAFETY: getenv has no preconditions; the result is only read.
    let path = unsafe { libc::getenv(c"PATH".as_ptr()) };
    let path: &[u8] = if path.is_null() {
        b"/bin:/usr/bin"
    } else {
        // SAFETY: getenv returns a NUL-terminated string.
        unsafe { core::ffi::CStr::from_ptr(path) }.to_bytes()
    };
    if name.is_empty() || name.contains(&b'/') || name.len() > NAME_MAX || path.len() >= PATH_MAX {
        return real();
    }
    let mut buf = [0u8; PATH_MAX + NAME_MAX + 2];
    let mut denied = false;
    for dir in path.split(|&b| b == b':') {
        if !candidate(&mut buf, dir, name) {
            continue;
        }
        // SAFETY: `buf` is NUL-terminated; argv and envp are the caller's.
        unsafe { super::process::execve(buf.as_ptr().cast(), argv, envp) };
        match after_failure(raw::errno()) {
            Next::GoOn => {}
            Next::Denied => denied = true,
            Next::ToLibc => return real(),
            Next::Fail => return -1,
        }
    }
    if denied {
        raw::set_errno(libc::EACCES);
    }
    -1
}
