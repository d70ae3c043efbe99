//! Pointing a held `execve`/`execveat` at another path: the raw `ptrace`
//! calls, in one audited place (`exec.rs` says why a register and not the
//! program's memory).
//!
//! The thread sleeps in the filter's notification. The supervisor
//! attaches (`PTRACE_SEIZE`, which stops nothing by itself) and asks for a
//! stop (`PTRACE_INTERRUPT`): the sleep is interrupted, the pending
//! notification withdrawn, and the call set to restart (`-ERESTARTSYS`,
//! with no handler to run). At the stop, the new path goes into the dead
//! part of the thread's stack (below the red zone: what a signal frame
//! would overwrite anyway) and the path register points there. On detach
//! the call restarts with it, the filter holds it again, and the
//! supervisor lets the kernel run it (the path is no longer in the
//! mount). No byte of the program's live memory changes, so a `vfork`
//! child's parent, `argv[0]` sharing the path's string, or a name shorter
//! than `/dev/fd/N` are all left as they were.
//!
//! While attached, the thread's stops are the supervisor's to collect,
//! and a `waitpid` of the relay's own child by another of its threads
//! would take them for the child's end: the relay's main thread waits
//! for the end through a pidfd first (`mod.rs`).

use std::io;

use super::seccomp;

/// The x86-64 ABI's red zone below the stack pointer, which a leaf
/// function may still use.
const RED_ZONE: u64 = 128;
/// The kernel's "restart this call" code, what an interrupted filter
/// wait leaves in the result register.
const ERESTARTSYS: i64 = 512;

fn errno() -> i32 {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// A ptrace request with no data of ours.
fn request(req: libc::c_uint, tid: i32, data: u64) -> Result<(), i32> {
    // SAFETY: ptrace requests that take no pointer of ours (SEIZE, INTERRUPT,
    // DETACH); the kernel checks the thread and our right to trace it.
    if unsafe { libc::ptrace(req, tid, 0usize, data as usize) } == 0 {
        Ok(())
    } else {
        Err(errno())
    }
}

/// Make thread `tid`'s held `execve`/`execveat` (call `nr`) restart with
/// `name` (NUL-terminated) as its path, written at the address returned.
/// `direct_child`: the thread belongs to the relay's own child, whose end
/// the relay's main thread reaps.
pub fn redirect(tid: i32, nr: i64, name: &[u8], direct_child: bool) -> Result<u64, i32> {
    request(libc::PTRACE_SEIZE, tid, 0)?;
    let r = stopped_rewrite(tid, nr, name, direct_child);
    // A thread that died meanwhile is no longer traced: nothing to undo.
    let _ = request(libc::PTRACE_DETACH, tid, 0);
    r
}

fn stopped_rewrite(tid: i32, nr: i64, name: &[u8], direct_child: bool) -> Result<u64, i32> {
    request(libc::PTRACE_INTERRUPT, tid, 0)?;
    wait_stop(tid, direct_child)?;
    // SAFETY: the kernel fills a zeroed register set of its own layout.
    let mut regs: libc::user_regs_struct = unsafe { std::mem::zeroed() };
    // SAFETY: GETREGS writes one user_regs_struct at the pointer.
    if unsafe { libc::ptrace(libc::PTRACE_GETREGS, tid, 0usize, &mut regs) } != 0 {
        return Err(errno());
    }
    // Stopped anywhere but in the restart of the held call (a signal
    // with a handler came first): the program goes on as it would have.
    if regs.orig_rax as i64 != nr || regs.rax as i64 != -ERESTARTSYS {
        return Err(libc::EINTR);
    }
    let at = regs
        .rsp
        .checked_sub(RED_ZONE + 64 + name.len() as u64)
        .ok_or(libc::EFAULT)?
        & !15;
    let failed = |regs: &mut libc::user_regs_struct| {
        // No restart: the program gets this error from its exec, rather
        // than an endless round of restarts that cannot be redirected.
        regs.rax = (-(libc::EACCES as i64)) as u64;
        // SAFETY: SETREGS reads one user_regs_struct at the pointer.
        unsafe { libc::ptrace(libc::PTRACE_SETREGS, tid, 0usize, &*regs) };
    };
    if seccomp::write_mem(tid, at, name).is_err() {
        failed(&mut regs);
        return Err(libc::EFAULT);
    }
    if nr == libc::SYS_execve {
        regs.rdi = at;
    } else {
        regs.rsi = at;
        // `/dev/fd/N` is a link the kernel must follow; the program's own
        // `AT_SYMLINK_NOFOLLOW` was applied to its path (`exec::prepare`).
        regs.r8 &= !(libc::AT_SYMLINK_NOFOLLOW as u64);
    }
    // SAFETY: SETREGS reads one user_regs_struct at the pointer.
    if unsafe { libc::ptrace(libc::PTRACE_SETREGS, tid, 0usize, &regs) } != 0 {
        return Err(errno());
    }
    Ok(at)
}

/// Wait until `tid` stops for us; `ESRCH` if it ends instead. The end of
/// the relay's own child is left for its main thread to reap; another
/// process's thread is collected (that hands it back to its parent).
fn wait_stop(tid: i32, direct_child: bool) -> Result<(), i32> {
    let wait = |flags: i32| -> Result<libc::siginfo_t, i32> {
        loop {
            // SAFETY: the kernel fills a zeroed siginfo.
            let mut si: libc::siginfo_t = unsafe { std::mem::zeroed() };
            // SAFETY: waitid of one thread id into a local siginfo.
            let r = unsafe { libc::waitid(libc::P_PID, tid as u32, &mut si, flags) };
            if r == 0 {
                return Ok(si);
            }
            if errno() != libc::EINTR {
                return Err(libc::ESRCH);
            }
        }
    };
    let si = wait(libc::WSTOPPED | libc::WEXITED | libc::WNOWAIT | libc::__WALL)?;
    match si.si_code {
        libc::CLD_TRAPPED | libc::CLD_STOPPED => {
            wait(libc::WSTOPPED | libc::__WALL)?;
            Ok(())
        }
        _ => {
            if !direct_child {
                let _ = wait(libc::WEXITED | libc::__WALL);
            }
            Err(libc::ESRCH)
        }
    }
}
