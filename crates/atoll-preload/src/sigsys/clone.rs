//! `clone`, `clone3`, `fork` and `vfork` trapped by Syscall User
//! Dispatch: which kind of child a call makes, how it is issued (inline,
//! or through a trampoline that runs the child's first steps on its new
//! stack before it returns into program code) and what the child does
//! before the program sees it (the client's fork hooks, SUD re-enabled
//! with its own selector).

use super::*;

// Clone trampoline: `atoll_clone_raw(nr, args: *const [u64; 6], block)`.
// Parent (or error): returns RAX like a system call. Child: runs on the new
// stack, calls `clone_child(block)`, then restores the program's registers
// from `block` (layout = the first 17 gregs of `mcontext_t`: r8 … r15, rdi,
// rsi, rbp, rbx, rdx, rax, rcx, rsp, rip) and jumps to the saved RIP with
// RAX = 0. R9 carries `block` across the syscall: neither clone nor clone3
// reads it and the kernel preserves it in both parent and child.
core::arch::global_asm!(
    ".text",
    ".globl atoll_clone_raw",
    ".hidden atoll_clone_raw",
    ".type atoll_clone_raw,@function",
    ".p2align 4",
    "atoll_clone_raw:",
    "    mov r9, rdx",
    "    mov rax, rdi",
    "    mov rdi, [rsi]",
    "    mov rdx, [rsi + 16]",
    "    mov r10, [rsi + 24]",
    "    mov r8, [rsi + 32]",
    "    mov rsi, [rsi + 8]",
    "    syscall",
    "    test rax, rax",
    "    jz 2f",
    "    ret",
    "2:",
    "    mov rbx, r9",
    "    mov rsp, r9",
    "    and rsp, -16",
    "    xor ebp, ebp",
    "    mov rdi, rbx",
    "    call {child}",
    "    mov rax, rbx",
    "    mov r8, [rax + 0]",
    "    mov r9, [rax + 8]",
    "    mov r10, [rax + 16]",
    "    mov r11, [rax + 24]",
    "    mov r12, [rax + 32]",
    "    mov r13, [rax + 40]",
    "    mov r14, [rax + 48]",
    "    mov r15, [rax + 56]",
    "    mov rdi, [rax + 64]",
    "    mov rsi, [rax + 72]",
    "    mov rbp, [rax + 80]",
    "    mov rbx, [rax + 88]",
    "    mov rdx, [rax + 96]",
    "    mov rcx, [rax + 112]",
    "    mov rsp, [rax + 120]",
    "    push qword ptr [rax + 128]",
    "    xor eax, eax",
    "    ret",
    ".size atoll_clone_raw, .-atoll_clone_raw",
    child = sym clone_child,
);

extern "C" {
    fn atoll_clone_raw(nr: i64, args: *const [u64; 6], block: *mut c_void) -> i64;
}

/// What kind of child a clone creates, and with which flags we issue it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum CloneKind {
    /// A new process (own memory): client fork hooks, SUD re-enabled.
    Process,
    /// A new thread with its own TLS: SUD re-enabled with its own selector.
    Thread,
    /// Shares memory and TLS with the parent (`CLONE_VM` without
    /// `CLONE_SETTLS`): its selector byte *is* the parent's, so it runs
    /// without SUD (a known gap; glibc never does this).
    Unmonitored,
    /// Nothing we can reason about (e.g. `CLONE_VM` without a stack); issue
    /// unchanged.
    Raw,
}

/// Decide how to issue a clone with `flags`, given whether the caller
/// supplied a new stack. Returns the flags to use and the kind.
///
/// `CLONE_VM|CLONE_VFORK` (vfork, posix_spawn, system, popen) becomes a
/// plain fork: a child sharing our memory could not run the client (it
/// would scribble on the suspended parent's client state), and POSIX lets
/// vfork be a fork. The cost is that an exec failure in posix_spawn is
/// reported as exit status 127 rather than as an error return.
pub fn classify(flags: u64, has_stack: bool) -> (u64, CloneKind) {
    let vm = libc::CLONE_VM as u64;
    let vfork = libc::CLONE_VFORK as u64;
    if flags & vm != 0 && flags & vfork != 0 {
        return (flags & !(vm | vfork), CloneKind::Process);
    }
    if flags & vm == 0 {
        return (flags, CloneKind::Process);
    }
    if !has_stack {
        return (flags, CloneKind::Raw);
    }
    if flags & libc::CLONE_SETTLS as u64 != 0 {
        (flags, CloneKind::Thread)
    } else {
        (flags, CloneKind::Unmonitored)
    }
}

/// What the child of a trampolined clone finds below its new stack.
#[repr(C)]
struct CloneBlock {
    /// gregs 0..=16 of the interrupted context, RAX = 0, RSP = new stack.
    regs: [i64; 17],
    kind: CloneKind,
    /// Bitwise copy of the parent's `ForkPrep` (valid in the child's own
    /// copy of memory; the parent never drops this copy).
    prep: core::mem::MaybeUninit<ForkPrep>,
    /// For the child of a spawn-style clone: where it reports a failure
    /// (`spawn`); -1 for any other child.
    spawn_report: i32,
}

/// Bytes reserved below the new stack pointer for the block.
const BLOCK_ROOM: usize = 512;
const _: () = assert!(core::mem::size_of::<CloneBlock>() + 16 <= BLOCK_ROOM);

/// `struct clone_args` as far as we read it (clone3).
const CLONE_ARGS_WORDS: usize = 11;
const CA_FLAGS: usize = 0;
const CA_STACK: usize = 5;
const CA_STACK_SIZE: usize = 6;

/// A clone of any kind; `regs` are the caller's first 17 `gregs` (from the
/// SIGSYS frame, or saved by a rewritten site's entry with RIP the site's
/// continuation), which a child on a new stack starts from.
pub(super) fn clone_any(nr: i64, args: [u64; 6], regs: &[i64; 17]) -> i64 {
    if client::mode() == Mode::Off {
        return raw::syscall6(nr, args);
    }
    if makes_process(nr, &args) {
        // Sites remembered since this process started, rewritten now so
        // that the child inherits them (`rewrite::eager::before_fork`).
        crate::rewrite::before_fork();
    }
    let waiter = if is_vfork(nr, &args) {
        VforkWait::new()
    } else {
        None
    };
    // A vfork-style clone with its own stack is glibc's spawn child
    // (posix_spawn, system, popen): it may report a failure (`spawn`).
    // vfork() itself never does.
    let spawn_report = match &waiter {
        Some(w) if nr != libc::SYS_vfork => w.write,
        _ => -1,
    };
    let r = clone_dispatch(nr, args, regs, spawn_report);
    match waiter {
        Some(w) => w.finish(r),
        None => r,
    }
}

/// Does this clone make a process (a fork, or a vfork, which `classify`
/// makes a fork), not a thread?
fn makes_process(nr: i64, args: &[u64; 6]) -> bool {
    let vm = libc::CLONE_VM as u64;
    match nr {
        libc::SYS_fork | libc::SYS_vfork => true,
        libc::SYS_clone => args[0] & vm == 0 || is_vfork(nr, args),
        libc::SYS_clone3 if args[0] != 0 && args[1] >= 8 => {
            // SAFETY: as in `is_vfork`.
            let flags = unsafe { *(args[0] as *const u64) };
            flags & vm == 0 || is_vfork(nr, args)
        }
        _ => false,
    }
}

/// Does this clone ask for vfork semantics (`vfork`, `CLONE_VFORK`)?
fn is_vfork(nr: i64, args: &[u64; 6]) -> bool {
    let vfork = libc::CLONE_VFORK as u64;
    match nr {
        libc::SYS_vfork => true,
        libc::SYS_clone => args[0] & vfork != 0,
        libc::SYS_clone3 if args[0] != 0 && args[1] >= 8 => {
            // SAFETY: the program passed clone3 at least `size` (≥ 8)
            // readable bytes; the first word is `flags`.
            unsafe { *(args[0] as *const u64) & vfork != 0 }
        }
        _ => false,
    }
}

/// A vfork-style clone becomes a fork (`classify`), but the caller must
/// still not run on until the child has called `execve` or exited, as
/// Linux suspends it: `posix_spawn`'s caller, say, then opens the program
/// it started and must get `ETXTBSY`, and sees the child's exec done. The
/// child holds the write end of a close-on-exec pipe, which its exec (or a
/// proxy's, or its exit) closes; the parent reads until end of file. Both
/// ends live high (as atoll's private descriptors do), out of the way of
/// a spawn's `dup2` file actions.
struct VforkWait {
    read: i32,
    write: i32,
}

impl VforkWait {
    fn new() -> Option<VforkWait> {
        let mut fds = [0i32; 2];
        if raw::syscall6(
            libc::SYS_pipe2,
            [fds.as_mut_ptr() as u64, libc::O_CLOEXEC as u64, 0, 0, 0, 0],
        ) != 0
        {
            return None;
        }
        let high = |fd: i32| {
            let n = raw::syscall6(
                libc::SYS_fcntl,
                [fd as u64, libc::F_DUPFD_CLOEXEC as u64, 900, 0, 0, 0],
            );
            if n < 0 {
                return fd;
            }
            raw::syscall6(libc::SYS_close, [fd as u64, 0, 0, 0, 0, 0]);
            n as i32
        };
        Some(VforkWait {
            read: high(fds[0]),
            write: high(fds[1]),
        })
    }

    /// After the clone returned `r` here (in the parent, or in a child
    /// that returns through this handler); what the clone returns: a
    /// spawn child's reported failure becomes the clone's (`spawn`).
    fn finish(self, r: i64) -> i64 {
        let close = |fd: i32| raw::syscall6(libc::SYS_close, [fd as u64, 0, 0, 0, 0, 0]);
        if r == 0 {
            close(self.read); // the child keeps only the write end
            return r;
        }
        close(self.write);
        let failed = if r > 0 {
            spawn::wait_for_report(self.read, r)
        } else {
            None
        };
        close(self.read);
        failed.map_or(r, |e| -(e as i64))
    }
}

fn clone_dispatch(nr: i64, args: [u64; 6], regs: &[i64; 17], spawn_report: i32) -> i64 {
    match nr {
        // fork(): a process on the same stack.
        libc::SYS_fork => clone_inline(nr, args, CloneKind::Process),
        // vfork(): emulated as fork (see `classify`).
        libc::SYS_vfork => clone_inline(libc::SYS_fork, args, CloneKind::Process),
        libc::SYS_clone => {
            // clone(flags, stack, parent_tid, child_tid, tls)
            let (flags, kind) = classify(args[0], args[1] != 0);
            let mut a = args;
            a[0] = flags;
            if args[1] == 0 || kind == CloneKind::Raw {
                return clone_inline(nr, a, kind);
            }
            let mut top = args[1] as usize;
            let _stack = if kind == CloneKind::Process {
                let Some(s) = ChildStack::map() else {
                    return -(libc::ENOMEM as i64);
                };
                // glibc's clone() child pops `fn` and `arg` from the top
                // of the stack it was given: move them along.
                // SAFETY: glibc stored these two words at the stack
                // pointer it passed; the new top has room above it.
                unsafe {
                    core::ptr::copy_nonoverlapping(top as *const u64, s.top() as *mut u64, 2)
                };
                top = s.top();
                a[1] = top as u64;
                Some(s)
            } else {
                None
            };
            clone_trampoline(nr, a, top, kind, regs, spawn_report)
        }
        _ => {
            // clone3(struct clone_args *, size)
            let size = args[1] as usize;
            if args[0] == 0 || !(64..=CLONE_ARGS_WORDS * 8).contains(&size) {
                // Unknown layout (or invalid): let the kernel judge.
                return raw::syscall6(nr, args);
            }
            let mut ca = [0u64; CLONE_ARGS_WORDS];
            // SAFETY: the program passed `size` readable bytes to clone3.
            unsafe {
                core::ptr::copy_nonoverlapping(args[0] as *const u8, ca.as_mut_ptr().cast(), size)
            };
            let stack_top = if ca[CA_STACK] != 0 {
                (ca[CA_STACK] + ca[CA_STACK_SIZE]) as usize
            } else {
                0
            };
            let (flags, kind) = classify(ca[CA_FLAGS], stack_top != 0);
            ca[CA_FLAGS] = flags;
            let mut a = args;
            if stack_top == 0 || kind == CloneKind::Raw {
                a[0] = ca.as_ptr() as u64;
                return clone_inline(nr, a, kind);
            }
            let mut stack_top = stack_top;
            let _stack = if kind == CloneKind::Process {
                let Some(s) = ChildStack::map() else {
                    return -(libc::ENOMEM as i64);
                };
                stack_top = s.top();
                ca[CA_STACK] = s.base as u64;
                ca[CA_STACK_SIZE] = (stack_top - s.base) as u64;
                Some(s)
            } else {
                None
            };
            // Only now, after the last write to `ca`, hand out its address.
            a[0] = ca.as_ptr() as u64;
            clone_trampoline(nr, a, stack_top, kind, regs, spawn_report)
        }
    }
}

/// A roomy stack for the child of a fork-like clone that came with a small
/// one. posix_spawn (hence `system` and `popen`) gives its child a stack of
/// a few tens of KiB, sized for glibc's own child code; once the clone
/// becomes a fork, that child runs the client (its `execve` is emulated)
/// inside a signal frame, which needs more. The child has its own copy of
/// memory, so the parent unmaps its copy as soon as the clone returns, and
/// the child's goes away at its exec (or exit).
struct ChildStack {
    base: usize,
}

const CHILD_STACK_BYTES: usize = 1 << 20;

impl ChildStack {
    fn map() -> Option<ChildStack> {
        let r = raw::syscall(
            libc::SYS_mmap,
            &[
                0,
                CHILD_STACK_BYTES as u64,
                (libc::PROT_READ | libc::PROT_WRITE) as u64,
                (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK) as u64,
                u64::MAX,
                0,
            ],
        );
        (r > 0).then_some(ChildStack { base: r as usize })
    }

    /// Initial stack pointer: 16-aligned, leaving 256 bytes above it.
    fn top(&self) -> usize {
        (self.base + CHILD_STACK_BYTES - 256) & !15
    }
}

impl Drop for ChildStack {
    fn drop(&mut self) {
        raw::syscall(
            libc::SYS_munmap,
            &[self.base as u64, CHILD_STACK_BYTES as u64],
        );
    }
}

/// Clone without a new stack: the child returns through this very handler
/// (a process with its own copy of our stack).
fn clone_inline(nr: i64, args: [u64; 6], kind: CloneKind) -> i64 {
    if kind != CloneKind::Process {
        return raw::syscall6(nr, args);
    }
    let prep = match client::fork_prepare() {
        Ok(p) => p,
        Err(e) => return -(e as i64),
    };
    let r = raw::syscall6(nr, args);
    if r == 0 {
        after_fork_in_child(prep);
    } else {
        client::fork_parent(prep, r);
    }
    r
}

/// Common child-side work after a fork-like clone. Runs with the selector
/// at ALLOW; the caller returns to program code with it at BLOCK.
fn after_fork_in_child(prep: ForkPrep) {
    sigdefer::forget_pending();
    stats::reset();
    client::fork_child(prep);
    let r = selector::enable_sud();
    if r != 0 {
        debug(&[b"enable SUD in child failed"], &[r]);
    }
}

/// Clone with a new stack, through the trampoline.
fn clone_trampoline(
    nr: i64,
    args: [u64; 6],
    stack_top: usize,
    kind: CloneKind,
    caller: &[i64; 17],
    spawn_report: i32,
) -> i64 {
    debug(
        &[b"clone via trampoline, kind/stack top"],
        &[kind as i64, stack_top as i64],
    );
    let block_addr = (stack_top - BLOCK_ROOM) & !15;
    let block = block_addr as *mut CloneBlock;
    let mut regs = *caller;
    regs[libc::REG_RAX as usize] = 0;
    regs[libc::REG_RSP as usize] = stack_top as i64;
    let prep = if kind == CloneKind::Process {
        match client::fork_prepare() {
            Ok(p) => Some(p),
            Err(e) => return -(e as i64),
        }
    } else {
        None
    };
    // SAFETY: `block` lies in the unused top of the new stack the program
    // handed to clone (at least BLOCK_ROOM bytes below its top belong to
    // it); nothing else uses that memory until the child starts.
    unsafe {
        block.write(CloneBlock {
            regs,
            kind,
            prep: core::mem::MaybeUninit::uninit(),
            spawn_report: if kind == CloneKind::Process {
                spawn_report
            } else {
                -1
            },
        });
        if let Some(p) = &prep {
            // Bitwise copy for the child; the parent keeps `prep`.
            (*block).prep.write(core::ptr::read(p as *const ForkPrep));
        }
    }
    // SAFETY: `args` are the program's clone arguments (flags adjusted);
    // the child never returns here (it jumps back into program code).
    let r = unsafe { atoll_clone_raw(nr, &args, block.cast()) };
    if let Some(p) = prep {
        client::fork_parent(p, r);
    }
    r
}

/// First Rust code of a trampolined child, on its new stack.
///
/// # Safety
/// Called only by `atoll_clone_raw` in the child, with the block the parent
/// wrote.
unsafe extern "C" fn clone_child(block: *mut CloneBlock) {
    // SAFETY: the parent wrote a whole CloneBlock here before the clone.
    let kind = unsafe { (*block).kind };
    match kind {
        CloneKind::Process => {
            // Own copy of memory: the selector byte copied from the parent
            // says ALLOW (it was in this handler); take a guard anyway.
            let g = AtollGuard::enter();
            // SAFETY: written by the parent for a Process clone.
            let prep = unsafe { (*block).prep.assume_init_read() };
            after_fork_in_child(prep);
            // SAFETY: as above.
            let report = unsafe { (*block).spawn_report };
            if report >= 0 {
                super::spawn::arm_in_child(report);
            }
            core::mem::forget(g);
            selector::set(BLOCK);
        }
        CloneKind::Thread => {
            // Fresh TLS: this thread's selector starts at BLOCK.
            let g = AtollGuard::enter();
            // Its SIGSYS frames go to atoll's stack from the first trap
            // (the kernel gives a new thread no alternate stack).
            let r = altstack::arm();
            if r != 0 {
                debug(&[b"arming the thread's alternate stack failed"], &[r]);
            }
            // A rewritten site's entry finds this thread's stack at the
            // offset the first thread found, or moves no more.
            crate::stack::check_entry_offset();
            let r = selector::enable_sud();
            if r != 0 {
                debug(&[b"enable SUD in thread failed"], &[r]);
            }
            core::mem::forget(g);
            selector::set(BLOCK);
        }
        // Shared TLS: touching the selector would change the parent's.
        CloneKind::Unmonitored | CloneKind::Raw => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VM: u64 = libc::CLONE_VM as u64;
    const VFORK: u64 = libc::CLONE_VFORK as u64;
    const THREAD_FLAGS: u64 = (libc::CLONE_VM
        | libc::CLONE_FS
        | libc::CLONE_FILES
        | libc::CLONE_SIGHAND
        | libc::CLONE_THREAD
        | libc::CLONE_SYSVSEM
        | libc::CLONE_SETTLS
        | libc::CLONE_PARENT_SETTID
        | libc::CLONE_CHILD_CLEARTID) as u64;

    #[test]
    fn posix_spawn_style_vfork_becomes_a_fork() {
        let flags = VM | VFORK | libc::SIGCHLD as u64;
        let (f, k) = classify(flags, true);
        assert_eq!(k, CloneKind::Process);
        assert_eq!(f, libc::SIGCHLD as u64);
    }

    #[test]
    fn glibc_fork_flags_are_a_process_and_kept() {
        let flags = (libc::CLONE_CHILD_SETTID | libc::CLONE_CHILD_CLEARTID | libc::SIGCHLD) as u64;
        assert_eq!(classify(flags, false), (flags, CloneKind::Process));
    }

    #[test]
    fn pthread_create_flags_are_a_thread() {
        assert_eq!(
            classify(THREAD_FLAGS, true),
            (THREAD_FLAGS, CloneKind::Thread)
        );
    }

    #[test]
    fn shared_vm_without_tls_or_stack_is_left_alone() {
        assert_eq!(classify(VM, true).1, CloneKind::Unmonitored);
        assert_eq!(
            classify(VM | libc::CLONE_SETTLS as u64, false).1,
            CloneKind::Raw
        );
    }

    #[test]
    fn block_layout_matches_the_trampoline() {
        assert_eq!(core::mem::offset_of!(CloneBlock, regs), 0);
        assert_eq!(libc::REG_RAX, 13);
        assert_eq!(libc::REG_RCX, 14);
        assert_eq!(libc::REG_RSP, 15);
        assert_eq!(libc::REG_RIP, 16);
    }
}
