//! Starting a program for a proxy: fork the scheduling server, configure
//! the child as the caller's `execve` would have left it, exec (Hare
//! §3.6.1: "starts a new process on the destination core (by forking
//! itself), configures the new process based on the RPC's arguments").
//!
//! Between `fork` and `execve` the child of this multithreaded process may
//! only make async-signal-safe calls: everything (strings, pointer arrays,
//! the CPU set, descriptor slots) is prepared before the fork and the child
//! only issues system calls.

// TODO(atoll): start the child with clone(CLONE_VM | CLONE_VFORK) on a
// private stack (as posix_spawn does) instead of fork, to save copying the
// server process's page tables on every remote exec.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::wire::{ExecSpec, FdRole};

/// Why no program was started.
#[derive(Debug, PartialEq, Eq)]
pub enum SpawnError {
    /// The server could not set the program up (malformed request, out of
    /// descriptors or processes): the caller may exec locally instead.
    Refused,
    /// `execve` itself failed with this errno.
    Exec(i32),
}

/// A started program.
pub struct Started {
    pub pid: i32,
    /// It joined the proxy's process group.
    pub same_group: bool,
}

fn cstr(b: &[u8]) -> Result<CString, SpawnError> {
    CString::new(b).map_err(|_| SpawnError::Exec(libc::EINVAL))
}

/// Fork, configure and exec `spec` pinned to `core`. `fds` are the
/// descriptors that came with the request (same order as `spec.fds`).
pub fn spawn(spec: &ExecSpec, fds: Vec<OwnedFd>, core: usize) -> Result<Started, SpawnError> {
    if fds.len() != spec.fds.len() || spec.argv.is_empty() && spec.path.is_empty() {
        return Err(SpawnError::Refused);
    }
    let path = cstr(&spec.path)?;
    let argv: Vec<CString> = spec
        .argv
        .iter()
        .map(|a| cstr(a))
        .collect::<Result<_, _>>()?;
    let envp: Vec<CString> = spec
        .envp
        .iter()
        .map(|a| cstr(a))
        .collect::<Result<_, _>>()?;
    let mut argv_p: Vec<*const libc::c_char> = argv.iter().map(|s| s.as_ptr()).collect();
    argv_p.push(core::ptr::null());
    let mut envp_p: Vec<*const libc::c_char> = envp.iter().map(|s| s.as_ptr()).collect();
    envp_p.push(core::ptr::null());

    let srcs: Vec<i32> = fds.iter().map(|f| f.as_raw_fd()).collect();
    // Slots above every source and target number: moving the received
    // descriptors there first means no dup2 can clobber one still needed.
    let high = spec
        .fds
        .iter()
        .filter_map(|r| match r {
            FdRole::Keep(t) => Some(*t),
            _ => None,
        })
        .chain(srcs.iter().copied())
        .max()
        .unwrap_or(2)
        .max(2)
        + 1;
    if spec
        .fds
        .iter()
        .any(|r| matches!(r, FdRole::Keep(t) if *t < 0))
    {
        return Err(SpawnError::Refused);
    }
    let mut moved = vec![-1i32; srcs.len()];
    // SAFETY: cpu_set_t is plain data; CPU_SET only writes inside it
    // (the index is checked against its size).
    let mut cpus: libc::cpu_set_t = unsafe { core::mem::zeroed() };
    if core < libc::CPU_SETSIZE as usize {
        // SAFETY: `core` is below CPU_SETSIZE, inside `cpus`.
        unsafe { libc::CPU_SET(core, &mut cpus) };
    }
    let mut ep = [0i32; 2];
    // SAFETY: pipe2 writes two descriptors into `ep`.
    if unsafe { libc::pipe2(ep.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(SpawnError::Refused);
    }
    // SAFETY: both descriptors were just created and are ours.
    let (err_r, err_w) = unsafe { (OwnedFd::from_raw_fd(ep[0]), OwnedFd::from_raw_fd(ep[1])) };

    // SAFETY: the child only performs system calls on memory prepared
    // above (no allocation, no locks) and ends in execve or _exit.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(SpawnError::Refused);
    }
    if pid == 0 {
        // SAFETY: in the child; see `child`.
        unsafe {
            child(
                spec,
                &srcs,
                &mut moved,
                high,
                &cpus,
                err_w.as_raw_fd(),
                &path,
                &argv_p,
                &envp_p,
            )
        }
    }
    drop(err_w);
    drop(fds);
    let mut e = [0u8; 4];
    let n = loop {
        // SAFETY: reads at most 4 bytes into `e`.
        let n = unsafe { libc::read(err_r.as_raw_fd(), e.as_mut_ptr().cast(), 4) };
        if n < 0 && errno() == libc::EINTR {
            continue;
        }
        break n;
    };
    if n == 4 {
        // The child failed before or in execve and exits at once: reap it.
        let mut st = 0;
        // SAFETY: waiting for our own child.
        unsafe { libc::waitpid(pid, &mut st, 0) };
        return Err(match i32::from_ne_bytes(e) {
            e if e > 0 => SpawnError::Exec(e),
            _ => SpawnError::Refused,
        });
    }
    // SAFETY: getpgid only reads its argument.
    let same_group = unsafe { libc::getpgid(pid) } == spec.pgid;
    Ok(Started { pid, same_group })
}

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// The forked child: configure and exec; reports errno on `err_w`.
///
/// # Safety
/// Only to be called in the child right after `fork`.
#[allow(clippy::too_many_arguments)]
unsafe fn child(
    spec: &ExecSpec,
    srcs: &[i32],
    moved: &mut [i32],
    high: i32,
    cpus: &libc::cpu_set_t,
    err_w: i32,
    path: &CString,
    argv: &[*const libc::c_char],
    envp: &[*const libc::c_char],
) -> ! {
    // SAFETY: system calls on prepared memory only (see `spawn`).
    unsafe {
        // Reports errno (`setup`: negated, the exec itself was not tried).
        let fail = |w: i32, setup: bool| -> ! {
            let e = *libc::__errno_location();
            let b = if setup { -e } else { e }.to_ne_bytes();
            libc::write(w, b.as_ptr().cast(), 4);
            libc::_exit(127)
        };
        let err_w = libc::fcntl(err_w, libc::F_DUPFD_CLOEXEC, high);
        if err_w < 0 {
            libc::_exit(127);
        }
        libc::sched_setaffinity(0, core::mem::size_of::<libc::cpu_set_t>(), cpus);
        // Join the proxy's group so terminal job control treats the program
        // as the caller; outside its session (an `atoll boot` daemon), a
        // session of its own: no controlling terminal, no SIGTTIN/SIGTTOU.
        if libc::setpgid(0, spec.pgid) != 0 {
            libc::setsid();
        }
        for (i, &s) in srcs.iter().enumerate() {
            moved[i] = libc::fcntl(s, libc::F_DUPFD_CLOEXEC, high);
            if moved[i] < 0 {
                fail(err_w, true);
            }
        }
        // Everything the server holds is closed by execve ...
        libc::syscall(
            libc::SYS_close_range,
            0u32,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        );
        // ... except what the caller's image would have kept.
        let mut program = -1;
        let mut dir = libc::AT_FDCWD;
        for (i, role) in spec.fds.iter().enumerate() {
            match *role {
                FdRole::Keep(t) => {
                    if libc::dup3(moved[i], t, 0) < 0 {
                        fail(err_w, true);
                    }
                }
                FdRole::Program => program = moved[i],
                FdRole::Dir => dir = moved[i],
                FdRole::Cwd => {
                    if libc::fchdir(moved[i]) != 0 {
                        fail(err_w, true);
                    }
                }
            }
        }
        libc::umask(spec.umask as libc::mode_t);
        // Only ever lowers the priority for an unprivileged user; a failure
        // leaves the server's (default) priority.
        libc::setpriority(libc::PRIO_PROCESS, 0, spec.nice);
        for &(res, soft, hard) in &spec.rlimits {
            let lim = libc::rlimit64 {
                rlim_cur: soft,
                rlim_max: hard,
            };
            libc::prlimit64(0, res as _, &lim, core::ptr::null_mut());
        }
        // Handlers do not survive execve; ignored signals do. Raw calls:
        // libc refuses its internal signals (32, 33), which the caller may
        // have ignored all the same.
        for sig in 1..=64u64 {
            if sig == libc::SIGKILL as u64 || sig == libc::SIGSTOP as u64 {
                continue;
            }
            let h = if spec.ignored & (1 << (sig - 1)) != 0 {
                libc::SIG_IGN
            } else {
                libc::SIG_DFL
            };
            // Kernel `struct sigaction`: handler, flags, restorer, mask.
            let act: [u64; 4] = [h as u64, 0, 0, 0];
            libc::syscall(libc::SYS_rt_sigaction, sig, act.as_ptr(), 0usize, 8usize);
        }
        let mask: u64 = spec.sigmask;
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK,
            &mask as *const u64,
            0usize,
            8usize,
        );
        if program >= 0 {
            libc::syscall(
                libc::SYS_execveat,
                program,
                c"".as_ptr(),
                argv.as_ptr(),
                envp.as_ptr(),
                libc::AT_EMPTY_PATH,
            );
        } else {
            libc::syscall(
                libc::SYS_execveat,
                dir,
                path.as_ptr(),
                argv.as_ptr(),
                envp.as_ptr(),
                spec.flags,
            );
        }
        fail(err_w, false)
    }
}
