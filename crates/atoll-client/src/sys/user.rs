//! The program's memory: every pointer a system call hands atoll is read
//! or written here, with the kernel's fault handling.
//!
//! Every pointer below comes from a system call's raw arguments. The kernel
//! answers EFAULT when such memory is not mapped or lacks the access the
//! call needs, and so must atoll: a bad pointer may never fault inside the
//! client, which would kill the program with SIGSEGV where Linux returns an
//! error. We cannot catch the fault (the program owns SIGSEGV), so memory is
//! first checked through the kernel itself: `process_vm_readv` on our own
//! pid reads program memory with the kernel's fault handling and answers
//! EFAULT without a signal.
//!
//! How, by kind of argument (each costs about one cheap system call):
//! * a path is handed to the kernel as the old name of a `symlinkat` whose
//!   new name is empty: the kernel copies the old name first, with its own
//!   fault handling (EFAULT, ENAMETOOLONG), then fails on the empty name
//!   (ENOENT) before it looks anything up; the path is then used in place.
//!   One entry of the calling thread remembers the last path checked, so
//!   the two or three looks of one emulated call at its path cost one check
//!   ([`forget_paths`] at each entry and exit of the client);
//! * an out-parameter (`put_user`, `copy_to_user`) is first stored into by
//!   `clock_gettime`, a 16-byte store by the kernel per page, then copied;
//! * small in-parameters (`get_user`) are copied by `process_vm_readv` on
//!   our own pid, which reads our memory with the kernel's fault handling;
//! * data buffers are probed, then used in place so the data path keeps its
//!   single memcpy: a buffer within two pages with one futex operation per
//!   page that reads (or atomically adds 0 to) a word of it, a larger one
//!   with `process_vm_readv` touching one byte per page (a write probe
//!   copies each byte onto itself). Neither changes the program's data.
//!
//! A kernel or sandbox refusing one of these calls makes us fall back to
//! trusting the pointer, as a libc wrapper would. A thread of the program
//! that unmaps memory while another passes it to a system call can still
//! fault us between the check and the use; that program races with itself
//! under Linux too (its own later access would fault).

use super::{sc, syscall6};

/// Longest path the kernel accepts, including the NUL (`PATH_MAX`).
pub const PATH_MAX: usize = 4096;

/// Longest argument or environment string `execve` accepts (`MAX_ARG_STRLEN`).
const MAX_ARG_STRLEN: usize = 32 * 4096;

const PAGE: u64 = 4096;

/// First address above user space on x86-64 with 5-level paging; anything
/// at or above is EFAULT at once (the kernel's `access_ok`).
const USER_END: u64 = 1 << 56;

/// Our process id for `process_vm_*` (0 = not known: ask each time). Set
/// only where a process surely has memory of its own — at [`init_pid`]
/// from the client's start and from a fork child's hook — and never
/// lazily: a `CLONE_VM` child (vfork, `posix_spawn`) shares this variable,
/// and a pid it stored would name its own image after its `execve`. Such
/// a child may still use the parent's pid: it names the same memory.
static PID: core::sync::atomic::AtomicI32 = core::sync::atomic::AtomicI32::new(0);

fn getpid() -> i32 {
    // SAFETY: getpid takes no arguments.
    unsafe { sc(libc::SYS_getpid, 0, 0, 0, 0) as i32 }
}

/// Remember our pid (at the client's start, and in a fork child).
pub fn init_pid() {
    PID.store(getpid(), core::sync::atomic::Ordering::Relaxed);
}

/// Is the caller a `CLONE_VM` child (vfork, `posix_spawn`) running in
/// its parent's memory? Its statics are the parent's, so nothing it
/// learns about its own process may be stored in them.
pub(crate) fn in_parent_memory() -> bool {
    let known = PID.load(core::sync::atomic::Ordering::Relaxed);
    known > 0 && getpid() != known
}

pub(crate) fn self_pid() -> u64 {
    match PID.load(core::sync::atomic::Ordering::Relaxed) {
        p if p > 0 => p as u64,
        _ => getpid() as u64,
    }
}

/// Is `[ptr, ptr + len)` a range user memory could occupy at all?
fn in_user_space(ptr: u64, len: usize) -> bool {
    ptr != 0
        && ptr
            .checked_add(len as u64)
            .is_some_and(|end| end <= USER_END)
}

/// `process_vm_readv` (or `_writev` when `write`) on our own pid: the kernel
/// copies between the `local` and `remote` iovecs of this address space,
/// with fault handling. `Ok(())` only when all `want` bytes moved.
fn vm_copy(
    write: bool,
    local: &[libc::iovec],
    remote: &[libc::iovec],
    want: usize,
) -> Result<(), i32> {
    let nr = if write {
        libc::SYS_process_vm_writev
    } else {
        libc::SYS_process_vm_readv
    };
    loop {
        // SAFETY: the iovecs name memory of this process; the kernel checks
        // every page of both sides and answers EFAULT instead of faulting.
        // Our own side is memory we own; the program's side is written only
        // by `put_user`/`copy_to_user` (an out-parameter) or by a probe that
        // stores each byte back onto itself.
        let r = unsafe {
            syscall6(
                nr,
                [
                    self_pid(),
                    local.as_ptr() as u64,
                    local.len() as u64,
                    remote.as_ptr() as u64,
                    remote.len() as u64,
                    0,
                ],
            )
        };
        return match r {
            r if r >= 0 && r as usize == want => Ok(()),
            r if r >= 0 => Err(libc::EFAULT),
            r if r == -(libc::EINTR as i64) => continue,
            // A kernel or sandbox without the call: trust the program's
            // pointers as a libc wrapper does (a bad one faults in the
            // program).
            r if r == -(libc::ENOSYS as i64) || r == -(libc::EPERM as i64) => Err(0),
            // A stale pid (a fork child that missed `init_pid`).
            r if r == -(libc::ESRCH as i64)
                && PID.load(core::sync::atomic::Ordering::Relaxed) != 0 =>
            {
                PID.store(0, core::sync::atomic::Ordering::Relaxed);
                continue;
            }
            _ => Err(libc::EFAULT),
        };
    }
}

fn iov(ptr: u64, len: usize) -> libc::iovec {
    libc::iovec {
        iov_base: ptr as *mut libc::c_void,
        iov_len: len,
    }
}

/// Copy program memory at `ptr` into `dst` with the kernel's fault
/// handling: `false` (and `dst` unspecified) when any of it is unmapped
/// or unreadable, instead of a fault.
pub fn peek(dst: &mut [u8], ptr: u64) -> bool {
    copy_from_user(dst, ptr).is_ok()
}

/// Copy `dst.len()` bytes of program memory at `ptr` into `dst`.
fn copy_from_user(dst: &mut [u8], ptr: u64) -> Result<(), i32> {
    if !in_user_space(ptr, dst.len()) {
        return Err(libc::EFAULT);
    }
    match vm_copy(
        false,
        &[iov(dst.as_mut_ptr() as u64, dst.len())],
        &[iov(ptr, dst.len())],
        dst.len(),
    ) {
        Err(0) => {
            // SAFETY: no fault-safe copy on this kernel: read as a libc
            // wrapper would (the program vouches for `ptr`).
            unsafe {
                core::ptr::copy_nonoverlapping(ptr as *const u8, dst.as_mut_ptr(), dst.len())
            };
            Ok(())
        }
        other => other,
    }
}

/// Copy `src` into program memory at `ptr` (an out-parameter). Hot path
/// (`stat`): the kernel first stores a `timespec` into each page of the
/// destination (cheaper than a `process_vm_writev`), then we copy.
pub fn copy_to_user(ptr: u64, src: &[u8]) -> Result<(), i32> {
    if src.is_empty() {
        return Ok(());
    }
    if !in_user_space(ptr, src.len()) {
        return Err(libc::EFAULT);
    }
    const TS: u64 = core::mem::size_of::<libc::timespec>() as u64;
    let end = ptr + src.len() as u64;
    let mut checked = src.len() as u64 >= TS;
    let mut at = ptr;
    while checked && at < end {
        // A window of the destination that touches `at`'s page.
        let w = at.min(end - TS);
        // SAFETY: the kernel stores 16 bytes at `w`, inside the program's
        // out-parameter, which we overwrite whole right after.
        let r = unsafe {
            sc(
                libc::SYS_clock_gettime,
                libc::CLOCK_MONOTONIC as u64,
                w,
                0,
                0,
            )
        };
        if r == -(libc::EFAULT as i64) {
            return Err(libc::EFAULT);
        }
        checked = r == 0;
        at = (at / PAGE + 1) * PAGE;
    }
    if !checked {
        return match vm_copy(
            true,
            &[iov(src.as_ptr() as u64, src.len())],
            &[iov(ptr, src.len())],
            src.len(),
        ) {
            Err(0) => {
                // SAFETY: as in `copy_from_user`: the program vouches for `ptr`.
                unsafe { core::ptr::copy_nonoverlapping(src.as_ptr(), ptr as *mut u8, src.len()) };
                Ok(())
            }
            other => other,
        };
    }
    // SAFETY: every page of [ptr, end) was just written by the kernel.
    unsafe { core::ptr::copy_nonoverlapping(src.as_ptr(), ptr as *mut u8, src.len()) };
    Ok(())
}

/// Copy as much of `src` to program memory at `ptr` as the program can
/// access, page by page from the start: the number of bytes copied.
pub fn copy_to_user_prefix(ptr: u64, src: &[u8]) -> usize {
    let mut done = 0usize;
    while done < src.len() {
        let at = ptr.wrapping_add(done as u64);
        let n = ((PAGE - at % PAGE) as usize).min(src.len() - done);
        if !in_user_space(at, n)
            || vm_copy(
                true,
                &[iov(src[done..].as_ptr() as u64, n)],
                &[iov(at, n)],
                n,
            )
            .is_err()
        {
            break;
        }
        done += n;
    }
    done
}

/// Fill `dst` from program memory at `ptr` as far as the program can
/// access it, page by page from the start: the number of bytes copied.
pub fn copy_from_user_prefix(dst: &mut [u8], ptr: u64) -> usize {
    let mut done = 0usize;
    while done < dst.len() {
        let at = ptr.wrapping_add(done as u64);
        let n = ((PAGE - at % PAGE) as usize).min(dst.len() - done);
        if !in_user_space(at, n)
            || vm_copy(
                false,
                &[iov(dst[done..].as_mut_ptr() as u64, n)],
                &[iov(at, n)],
                n,
            )
            .is_err()
        {
            break;
        }
        done += n;
    }
    done
}

/// Check that every page of `[ptr, ptr + len)` can be read (and, with
/// `write`, written) by touching one byte per page through the kernel. A
/// write probe copies each probed byte onto itself, which changes nothing.
fn probe(ptr: u64, len: usize, write: bool) -> Result<(), i32> {
    match probe_once(ptr, len, write) {
        // Pages of an atoll mapping past the end of its file fault until
        // the file covers them; the kernel maps such a page on a copy from
        // it once it does, so map what the file covers now and look again
        // (`pastend`).
        Err(libc::EFAULT) if crate::mapping::overlaps(ptr, len as u64) => {
            if crate::pastend::resolve_range(ptr, len as u64) {
                probe_once(ptr, len, write)
            } else {
                Err(libc::EFAULT)
            }
        }
        r => r,
    }
}

fn probe_once(ptr: u64, len: usize, write: bool) -> Result<(), i32> {
    if !in_user_space(ptr, len) {
        return Err(libc::EFAULT);
    }
    let end = ptr + len as u64;
    // Small buffers (the hot case): one futex call per page, about half a
    // `process_vm_readv`; larger ones in batches of pages below.
    if end - (ptr & !(PAGE - 1)) <= 2 * PAGE && futex_probe(ptr, end, write)? {
        return Ok(());
    }
    const BATCH: usize = 64;
    let mut at = ptr;
    let mut scratch = [0u8; BATCH];
    let mut remote = [iov(0, 0); BATCH];
    while at < end {
        let mut n = 0;
        while n < BATCH && at < end {
            remote[n] = iov(at, 1);
            n += 1;
            at = (at / PAGE + 1) * PAGE;
        }
        let local = [iov(scratch.as_mut_ptr() as u64, n)];
        let r = if write {
            vm_copy(false, &remote[..n], &remote[..n], n)
        } else {
            vm_copy(false, &local, &remote[..n], n)
        };
        match r {
            Ok(()) | Err(0) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Probe each page of `[ptr, end)` through a 4-byte word inside the range
/// on that page, with a futex operation the kernel runs with its fault
/// handling: reading, `FUTEX_CMP_REQUEUE` that wakes and moves nobody (it
/// only compares the word); writing, `FUTEX_WAKE_OP` adding 0 to the word
/// atomically (a store that changes nothing, even against a concurrent
/// writer) and waking nobody. `Ok(false)` when a page has no whole aligned
/// word in range or the kernel gave no usable answer: probe another way.
fn futex_probe(ptr: u64, end: u64, write: bool) -> Result<bool, i32> {
    const OP_ADD_ZERO: u64 = 1 << 28; // FUTEX_OP(FUTEX_OP_ADD, 0, FUTEX_OP_CMP_EQ, 0)
    let private = libc::FUTEX_PRIVATE_FLAG as u64;
    let ours: u32 = 0;
    let ours = &ours as *const u32 as u64;
    let mut at = ptr;
    while at < end {
        let page_end = ((at / PAGE + 1) * PAGE).min(end);
        let word = (at + 3) & !3;
        if word + 4 > page_end {
            return Ok(false);
        }
        // SAFETY: futex operations that read (or atomically add 0 to) the
        // program's word at `word` and wake no waiter; `ours` is a local.
        let r = unsafe {
            if write {
                syscall6(
                    libc::SYS_futex,
                    [
                        ours,
                        libc::FUTEX_WAKE_OP as u64 | private,
                        0,
                        0,
                        word,
                        OP_ADD_ZERO,
                    ],
                )
            } else {
                syscall6(
                    libc::SYS_futex,
                    [
                        word,
                        libc::FUTEX_CMP_REQUEUE as u64 | private,
                        0,
                        0,
                        ours,
                        0,
                    ],
                )
            }
        };
        match r {
            0 => {}
            r if r == -(libc::EAGAIN as i64) && !write => {}
            r if r == -(libc::EFAULT as i64) => return Err(libc::EFAULT),
            _ => return Ok(false),
        }
        at = page_end;
    }
    Ok(true)
}

/// The NUL-terminated string at `ptr`, without the NUL, at most `max`
/// bytes before it (else `too_long`). The string is read through the
/// kernel chunk by chunk, never across a page it does not need (like the
/// kernel's `strncpy_from_user`), and then used in place.
fn user_cstr<'a>(ptr: u64, max: usize, too_long: i32) -> Result<&'a [u8], i32> {
    if !in_user_space(ptr, 1) {
        return Err(libc::EFAULT);
    }
    let mut chunk = [0u8; 512];
    let mut n = 0usize;
    while n <= max {
        let at = ptr + n as u64;
        let want = ((PAGE - at % PAGE) as usize).min(chunk.len());
        copy_from_user(&mut chunk[..want], at)?;
        if let Some(i) = chunk[..want].iter().position(|&b| b == 0) {
            if n + i > max {
                break;
            }
            // SAFETY: the kernel just read these n + i bytes of program
            // memory without a fault; the program passed them as a string
            // argument of the call we are emulating.
            return Ok(unsafe { core::slice::from_raw_parts(ptr as *const u8, n + i) });
        }
        n += want;
    }
    Err(too_long)
}

std::thread_local! {
    /// The last path [`user_path`] checked on this thread: (address, length).
    static LAST_PATH: core::cell::Cell<(u64, usize)> = const { core::cell::Cell::new((0, 0)) };
}

/// Forget the path remembered by [`user_path`]: called when the client is
/// entered and left, so a check never outlives the call it was made for
/// (the program may unmap the memory afterwards).
pub fn forget_paths() {
    LAST_PATH.with(|l| l.set((0, 0)));
}

/// Let the kernel check that a path is readable up to its NUL within
/// `PATH_MAX`: `Ok(true)` when it is, `Ok(false)` when the kernel gave no
/// usable answer (a sandbox refusing `symlinkat`), else the errno.
fn kernel_checks_path(ptr: u64) -> Result<bool, i32> {
    // SAFETY: `symlinkat(ptr, AT_FDCWD, "")`: the kernel copies `ptr` as a
    // string with fault handling, then fails on the empty new name before
    // any lookup; nothing is created.
    let r = unsafe {
        sc(
            libc::SYS_symlinkat,
            ptr,
            libc::AT_FDCWD as u64,
            c"".as_ptr() as u64,
            0,
        )
    };
    match -r as i32 {
        libc::ENOENT => Ok(true),
        e @ (libc::EFAULT | libc::ENAMETOOLONG) => Err(e),
        _ => Ok(false),
    }
}

/// The path at `ptr` without its NUL: `EFAULT` for memory the program
/// cannot read, `ENAMETOOLONG` when no NUL appears within `PATH_MAX` bytes.
/// Hot path: one system call, none for the same path again in one call.
pub fn user_path<'a>(ptr: u64) -> Result<&'a [u8], i32> {
    if !in_user_space(ptr, 1) {
        return Err(libc::EFAULT);
    }
    let (last, len) = LAST_PATH.with(|l| l.get());
    if last == ptr {
        // SAFETY: checked by the kernel earlier in this same call.
        return Ok(unsafe { core::slice::from_raw_parts(ptr as *const u8, len) });
    }
    if !kernel_checks_path(ptr)? {
        return user_cstr(ptr, PATH_MAX - 1, libc::ENAMETOOLONG);
    }
    let p = ptr as *const u8;
    let mut n = 0usize;
    // SAFETY: the kernel found a NUL within PATH_MAX readable bytes at
    // `ptr`; we stop at the first NUL (and at PATH_MAX should the program
    // change the string meanwhile).
    unsafe {
        while n < PATH_MAX - 1 && *p.add(n) != 0 {
            n += 1;
        }
    }
    LAST_PATH.with(|l| l.set((ptr, n)));
    // SAFETY: as above: n readable bytes.
    Ok(unsafe { core::slice::from_raw_parts(p, n) })
}

/// Read-only view of a program buffer; `EFAULT` unless all of it is
/// readable. Empty for `len == 0` whatever the pointer (as Linux).
pub fn user_slice<'a>(ptr: u64, len: usize) -> Result<&'a [u8], i32> {
    if len == 0 {
        return Ok(&[]);
    }
    probe(ptr, len, false)?;
    // SAFETY: the program passed (ptr, len) as a buffer argument of a
    // system call that reads it, and every page of it is readable.
    Ok(unsafe { core::slice::from_raw_parts(ptr as *const u8, len) })
}

/// Writable view of a program buffer; `EFAULT` unless all of it is
/// writable.
pub fn user_slice_mut<'a>(ptr: u64, len: usize) -> Result<&'a mut [u8], i32> {
    if len == 0 {
        return Ok(&mut []);
    }
    probe(ptr, len, true)?;
    // SAFETY: the program passed (ptr, len) as a buffer argument of a
    // system call that writes it, every page of it is writable, and
    // nothing else in atoll aliases it.
    Ok(unsafe { core::slice::from_raw_parts_mut(ptr as *mut u8, len) })
}

/// A program buffer that is not checked here: only in the user range. For
/// large pipe transfers, whose bytes the kernel copies (`process_vm_readv`
/// and `_writev` check every page and answer `EFAULT`); the caller checks
/// with [`check_writable`] any part it copies itself, before touching it.
/// Probing a MiB page by page costs about as much as copying it.
pub fn user_slice_mut_unchecked<'a>(ptr: u64, len: usize) -> Result<&'a mut [u8], i32> {
    if len == 0 {
        return Ok(&mut []);
    }
    if !in_user_space(ptr, len) {
        return Err(libc::EFAULT);
    }
    // SAFETY: the program passed (ptr, len) as a buffer argument of a
    // system call that writes it; this process touches no byte of it that
    // `check_writable` did not check first, and hands the rest only to the
    // kernel, which checks it.
    Ok(unsafe { core::slice::from_raw_parts_mut(ptr as *mut u8, len) })
}

/// Read-only twin of [`user_slice_mut_unchecked`] ([`check_readable`]).
pub fn user_slice_unchecked<'a>(ptr: u64, len: usize) -> Result<&'a [u8], i32> {
    if len == 0 {
        return Ok(&[]);
    }
    if !in_user_space(ptr, len) {
        return Err(libc::EFAULT);
    }
    // SAFETY: as `user_slice_mut_unchecked`, for a buffer the call reads.
    Ok(unsafe { core::slice::from_raw_parts(ptr as *const u8, len) })
}

/// `EFAULT` unless every page of `buf` (from an unchecked slice) can be
/// written.
pub fn check_writable(buf: &mut [u8]) -> Result<(), i32> {
    if buf.is_empty() {
        return Ok(());
    }
    probe(buf.as_ptr() as u64, buf.len(), true)
}

/// [`check_writable`] without mapping what a file now covers of an atoll
/// mapping's pages past its end (`pastend`, which sends messages): for a
/// caller inside a receive, which answers `EFAULT` by going the careful
/// way afterwards.
pub fn check_writable_as_is(buf: &mut [u8]) -> Result<(), i32> {
    if buf.is_empty() {
        return Ok(());
    }
    probe_once(buf.as_ptr() as u64, buf.len(), true)
}

/// `EFAULT` unless every page of `buf` (from an unchecked slice) can be
/// read.
pub fn check_readable(buf: &[u8]) -> Result<(), i32> {
    if buf.is_empty() {
        return Ok(());
    }
    probe(buf.as_ptr() as u64, buf.len(), false)
}

/// Store a plain-old-data value at a program address.
pub fn put_user<T: Copy>(ptr: u64, v: T) -> Result<(), i32> {
    // SAFETY: `v` is a live local of size_of::<T>() bytes; T is one of
    // libc's integer-only structs (no padding is read as a value by the
    // program that it did not get from the kernel too).
    let bytes = unsafe {
        core::slice::from_raw_parts(&v as *const T as *const u8, core::mem::size_of::<T>())
    };
    copy_to_user(ptr, bytes)
}

/// Load a plain-old-data value from a program address.
pub fn get_user<T: Copy>(ptr: u64) -> Result<T, i32> {
    let mut v = core::mem::MaybeUninit::<T>::zeroed();
    // SAFETY: `v` is a local of size_of::<T>() bytes, zero-initialised.
    let bytes = unsafe {
        core::slice::from_raw_parts_mut(v.as_mut_ptr() as *mut u8, core::mem::size_of::<T>())
    };
    copy_from_user(bytes, ptr)?;
    // SAFETY: filled from the program's memory; T is a C struct made of
    // integers (every bit pattern is valid).
    Ok(unsafe { v.assume_init() })
}

/// Load an array of `n` plain values from a program address, in one copy.
pub fn get_user_vec<T: Copy>(ptr: u64, n: usize) -> Result<Vec<T>, i32> {
    let size = core::mem::size_of::<T>()
        .checked_mul(n)
        .ok_or(libc::EFAULT)?;
    let mut v: Vec<T> = Vec::with_capacity(n);
    // SAFETY: the spare capacity holds `size` bytes; it is filled whole by
    // the copy below before `set_len`, and T is a C struct made of
    // integers (every bit pattern is valid).
    unsafe {
        let bytes = core::slice::from_raw_parts_mut(v.as_mut_ptr() as *mut u8, size);
        bytes.fill(0);
        if size > 0 {
            copy_from_user(bytes, ptr)?;
        }
        v.set_len(n);
    }
    Ok(v)
}

/// Store an array of plain values at a program address, in one copy.
pub fn put_user_slice<T: Copy>(ptr: u64, v: &[T]) -> Result<(), i32> {
    // SAFETY: a live slice of integer-only C structs, viewed as bytes.
    let bytes =
        unsafe { core::slice::from_raw_parts(v.as_ptr() as *const u8, core::mem::size_of_val(v)) };
    copy_to_user(ptr, bytes)
}

/// A zeroed C struct (all the libc structs we fill are integers only).
pub fn zeroed<T: Copy>() -> T {
    // SAFETY: only used for libc's plain integer structs (stat, statx,
    // statfs, flock), for which all-zero is a valid value.
    unsafe { core::mem::zeroed() }
}

/// The strings of a NULL-terminated array of C strings (argv/envp); a null
/// array is empty. `EFAULT` for an unreadable element or string, `E2BIG`
/// for a string longer than the kernel takes.
///
/// Read a page at a time, not an element at a time: the pointers of the
/// array are consecutive, and so, as a rule, are the strings (the stack an
/// `execve` left, or one environment block), so one fault-checked copy of
/// the rest of a page answers for many of them (two system calls per
/// variable were most of an `execve`'s own cost).
pub fn user_str_array<'a>(ptr: *const *const libc::c_char) -> Result<Vec<&'a [u8]>, i32> {
    let mut out = Vec::new();
    if ptr.is_null() {
        return Ok(out);
    }
    let (mut pointers, mut strings) = (PageRest::default(), PageRest::default());
    let mut at = ptr as u64;
    loop {
        let s = match pointers.bytes(at, 8)? {
            Some(b) => u64::from_ne_bytes(b.try_into().expect("8 bytes")),
            // The element straddles a page end.
            None => get_user(at)?,
        };
        if s == 0 {
            break;
        }
        out.push(strings.cstr(s)?);
        at += 8;
    }
    Ok(out)
}

/// A fault-checked copy of program memory from some address to the end of
/// its page: what [`user_str_array`] reads its elements and strings from.
/// (On the heap: `execve` may be emulated on a small thread stack.)
#[derive(Default)]
struct PageRest {
    buf: Vec<u8>,
    base: u64,
    len: usize,
}

impl PageRest {
    fn holds(&self, at: u64) -> bool {
        self.len > 0 && at >= self.base && at < self.base + self.len as u64
    }

    /// Copy from `at` to the end of its page.
    fn fill(&mut self, at: u64) -> Result<(), i32> {
        let want = (PAGE - at % PAGE) as usize;
        self.buf.resize(PAGE as usize, 0);
        copy_from_user(&mut self.buf[..want], at)?;
        (self.base, self.len) = (at, want);
        Ok(())
    }

    /// The `n` bytes at `at`, or `None` when they cross the page's end.
    fn bytes(&mut self, at: u64, n: usize) -> Result<Option<&[u8]>, i32> {
        if !self.holds(at) {
            self.fill(at)?;
        }
        let off = (at - self.base) as usize;
        Ok(self.buf[..self.len].get(off..off + n))
    }

    /// The string at `ptr`, as [`user_cstr`] gives it.
    fn cstr<'a>(&mut self, ptr: u64) -> Result<&'a [u8], i32> {
        if !in_user_space(ptr, 1) {
            return Err(libc::EFAULT);
        }
        if !self.holds(ptr) {
            self.fill(ptr)?;
        }
        let off = (ptr - self.base) as usize;
        match self.buf[off..self.len].iter().position(|&b| b == 0) {
            // SAFETY: the kernel just read these bytes of program memory
            // without a fault; the program passed them as a string argument
            // of the call we are emulating.
            Some(n) => Ok(unsafe { core::slice::from_raw_parts(ptr as *const u8, n) }),
            // It goes on past this page.
            None => user_cstr(ptr, MAX_ARG_STRLEN - 1, libc::E2BIG),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mapping(prot: i32) -> u64 {
        // SAFETY: a fresh anonymous mapping of two pages.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                2 * PAGE as usize,
                prot,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        p as u64
    }

    #[test]
    fn bad_addresses_are_efault_not_a_crash() {
        for p in [0u64, 0xdead_c0de, u64::MAX - 3, 1 << 60] {
            assert_eq!(user_path(p), Err(libc::EFAULT));
            assert_eq!(user_slice(p, 10).err(), Some(libc::EFAULT));
            assert_eq!(user_slice_mut(p, 10).err(), Some(libc::EFAULT));
            assert_eq!(get_user::<u64>(p), Err(libc::EFAULT));
            assert_eq!(put_user::<u64>(p, 7), Err(libc::EFAULT));
        }
        assert!(user_slice(0xdead_c0de, 0).unwrap().is_empty());
    }

    #[test]
    fn strings_stop_at_their_nul_before_an_unmapped_page() {
        let m = mapping(libc::PROT_READ | libc::PROT_WRITE);
        // SAFETY: unmapping the second page of our own mapping.
        unsafe { libc::munmap((m + PAGE) as *mut libc::c_void, PAGE as usize) };
        let s = m + PAGE - 4;
        // SAFETY: the last 4 bytes of the mapped first page.
        unsafe { core::ptr::copy_nonoverlapping(b"ab\0c".as_ptr(), s as *mut u8, 4) };
        assert_eq!(user_path(s), Ok(&b"ab"[..]));
        // No NUL before the hole: EFAULT, as strncpy_from_user.
        assert_eq!(user_path(s + 3), Err(libc::EFAULT));
        assert_eq!(user_slice(s, 4).map(<[u8]>::len), Ok(4));
        assert_eq!(user_slice(s, 5).err(), Some(libc::EFAULT));
    }

    #[test]
    fn read_only_memory_is_readable_but_not_writable() {
        let m = mapping(libc::PROT_READ);
        assert!(user_slice(m, 8192).is_ok());
        assert_eq!(user_slice_mut(m, 1).err(), Some(libc::EFAULT));
        assert_eq!(put_user::<u32>(m, 1), Err(libc::EFAULT));
        let none = mapping(libc::PROT_NONE);
        assert_eq!(user_slice(none, 1).err(), Some(libc::EFAULT));
        assert_eq!(get_user::<u8>(none), Err(libc::EFAULT));
    }

    #[test]
    fn small_and_large_buffers_are_probed_alike() {
        let rw = mapping(libc::PROT_READ | libc::PROT_WRITE);
        let ro = mapping(libc::PROT_READ);
        let none = mapping(libc::PROT_NONE);
        // SAFETY: writing our own fresh mapping.
        unsafe { core::ptr::write_bytes(rw as *mut u8, 7, 2 * PAGE as usize) };
        for (at, len) in [
            (0, 1),
            (1, 3),
            (3, 64),
            (PAGE - 2, 4),
            (PAGE - 8, 16),
            (0, 8192),
        ] {
            assert!(user_slice(rw + at, len).is_ok(), "{at} {len}");
            assert!(user_slice_mut(rw + at, len).is_ok(), "{at} {len}");
            assert!(user_slice(ro + at, len).is_ok(), "{at} {len}");
            assert_eq!(user_slice_mut(ro + at, len).err(), Some(libc::EFAULT));
            assert_eq!(user_slice(none + at, len).err(), Some(libc::EFAULT));
        }
        // The futex way answers for small buffers (no fallback needed).
        assert_eq!(futex_probe(rw + 1, rw + 70, false), Ok(true));
        assert_eq!(futex_probe(rw + 1, rw + 70, true), Ok(true));
        assert_eq!(futex_probe(ro, ro + 4, true), Err(libc::EFAULT));
        assert_eq!(futex_probe(none, none + 4, false), Err(libc::EFAULT));
        // Probes change nothing.
        // SAFETY: reading our own mapping.
        let all = unsafe { core::slice::from_raw_parts(rw as *const u8, 2 * PAGE as usize) };
        assert!(all.iter().all(|&b| b == 7));
        // A buffer running off the end of a mapping into nothing.
        let tail = mapping(libc::PROT_READ | libc::PROT_WRITE);
        // SAFETY: unmapping the second page of our own mapping.
        unsafe { libc::munmap((tail + PAGE) as *mut libc::c_void, PAGE as usize) };
        assert_eq!(
            user_slice_mut(tail + PAGE - 8, 16).err(),
            Some(libc::EFAULT)
        );
        assert_eq!(user_slice(tail + PAGE - 8, 16).err(), Some(libc::EFAULT));
    }

    #[test]
    fn paths_longer_than_path_max_are_enametoolong() {
        let long = vec![b'a'; PATH_MAX + 10];
        let mut z = long.clone();
        z.push(0);
        assert_eq!(user_path(z.as_ptr() as u64), Err(libc::ENAMETOOLONG));
        let ok = [&long[..PATH_MAX - 1], b"\0"].concat();
        assert_eq!(
            user_path(ok.as_ptr() as u64).map(<[u8]>::len),
            Ok(PATH_MAX - 1)
        );
    }

    #[test]
    fn values_round_trip_through_the_kernel() {
        let mut x: u64 = 0;
        put_user(&mut x as *mut u64 as u64, 0x1234_5678_u64).unwrap();
        assert_eq!(x, 0x1234_5678);
        assert_eq!(get_user::<u64>(&x as *const u64 as u64), Ok(0x1234_5678));
        let mut buf = [1u8, 2, 3];
        let s = user_slice_mut(buf.as_mut_ptr() as u64, 3).unwrap();
        assert_eq!(s, &[1, 2, 3]);
    }

    #[test]
    fn string_arrays_are_read_across_page_ends_and_bad_memory_is_efault() {
        // Strings in the first two pages (one across their border), the
        // arrays across the border of the second and the third.
        let (s, m) = (
            mapping(libc::PROT_READ | libc::PROT_WRITE),
            mapping(libc::PROT_READ | libc::PROT_WRITE),
        );
        let put = |at: u64, bytes: &[u8]| {
            // SAFETY: inside the pages mapped above.
            unsafe { core::ptr::copy_nonoverlapping(bytes.as_ptr(), at as *mut u8, bytes.len()) }
        };
        let long = vec![b'x'; 100];
        let (a, b, c) = (s + 10, s + PAGE - 50, s + PAGE + 200);
        put(a, b"abc\0");
        put(b, &long);
        put(b + 100, b"\0");
        put(c, b"tail\0");
        let want: Vec<&[u8]> = vec![b"abc", &long, b"tail", b"abc"];
        // Arrays whose elements end at the page's end, and straddle it.
        for start in [m + PAGE - 16, m + PAGE - 12] {
            for (k, p) in [a, b, c, a, 0].iter().enumerate() {
                put(start + 8 * k as u64, &p.to_ne_bytes());
            }
            let got = user_str_array(start as *const *const libc::c_char).unwrap();
            assert_eq!(got, want, "array at page end - {}", m + PAGE - start);
        }
        // An element, or a string, on a page that cannot be read.
        let start = m + PAGE - 16;
        put(start + 16, &[0; 8]);
        put(start, &c.to_ne_bytes());
        // SAFETY: the second page of the mapping above.
        unsafe {
            libc::mprotect(
                (m + PAGE) as *mut libc::c_void,
                PAGE as usize,
                libc::PROT_NONE,
            )
        };
        let array = start as *const *const libc::c_char;
        assert_eq!(user_str_array(array), Err(libc::EFAULT));
        let (first_page, second) = (m + PAGE - 48, m + PAGE - 40);
        put(first_page, &a.to_ne_bytes());
        put(first_page + 8, &(m + PAGE + 8).to_ne_bytes());
        put(first_page + 16, &[0; 8]);
        let array = first_page as *const *const libc::c_char;
        assert_eq!(
            user_str_array(array),
            Err(libc::EFAULT),
            "string unreadable"
        );
        put(second, &0u64.to_ne_bytes());
        assert_eq!(user_str_array(array).unwrap(), vec![b"abc" as &[u8]]);
    }
}
