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

use crate::creds::Target;
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

/// Everything the child needs to become the caller, prepared before the
/// fork (the child may not allocate).
struct Become<'a> {
    t: &'a Target,
    groups: Vec<libc::gid_t>,
    /// Room for `getgroups` to show the result (one spare slot: a longer
    /// list than asked for fails the comparison).
    seen: Vec<libc::gid_t>,
    oom: Vec<u8>,
}

/// Fork, configure and exec `spec` pinned to `core`, as `target` says
/// (`creds`). `fds` are the descriptors that came with the request (same
/// order as `spec.fds`).
pub fn spawn(
    spec: &ExecSpec,
    target: &Target,
    fds: Vec<OwnedFd>,
    core: usize,
) -> Result<Started, SpawnError> {
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
    let groups: Vec<libc::gid_t> = target.creds.groups.clone();
    let mut who = Become {
        t: target,
        seen: vec![0; groups.len() + 1],
        groups,
        oom: target
            .oom_score_adj
            .map(|v| v.to_string().into_bytes())
            .unwrap_or_default(),
    };
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

    // The program dies with its server (`process`): none runs on with
    // nobody to reap it and tell its proxy.
    let server = std::process::id() as i32;
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
                &mut who,
                server,
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
    who: &mut Become<'_>,
    server: i32,
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
                // Taken out by the server before (`args::unpack`).
                FdRole::Args => {}
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
        // execve keeps the personality (`setarch -R`); the kernel clears
        // its unsafe flags itself for a set-id image.
        libc::syscall(libc::SYS_personality, spec.personality as libc::c_ulong);
        if become_caller(who, spec, path, program, dir).is_err() {
            fail(err_w, true);
        }
        // Killed with the server (kept across execve, except of set-id
        // images; set after the identity changes, which clear it); a
        // server already gone is checked after setting it.
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
        if libc::getppid() != server {
            libc::_exit(127);
        }
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

/// `errno = e`, then `Err`: the child reports a setup failure (`Refused`:
/// the caller execs locally).
///
/// # Safety
/// Writes this thread's errno.
unsafe fn refuse<T>(e: i32) -> Result<T, ()> {
    // SAFETY: the calling thread's errno location.
    unsafe { *libc::__errno_location() = e };
    Err(())
}

/// A raw system call that must succeed (errno is left as it failed).
fn ok(r: libc::c_long) -> Result<(), ()> {
    if r < 0 {
        Err(())
    } else {
        Ok(())
    }
}

/// Take the caller's identity (Hare §3.6.1 "configures the new process";
/// what a local `execve` would keep): oom score, securebits, then — when
/// it is someone else — bounding set, groups, gids, uids (the order that
/// keeps the privilege to do each step), then check the result against
/// what the kernel reported for the caller and that the image is not
/// set-id or file-capability (those exec locally). Raw system calls: the
/// libc wrappers would try to reach the threads of the server, which the
/// child does not have.
///
/// # Safety
/// Only in the child after `fork`: system calls on prepared memory.
unsafe fn become_caller(
    who: &mut Become<'_>,
    spec: &ExecSpec,
    path: &CString,
    program: i32,
    dir: i32,
) -> Result<(), ()> {
    let t = who.t;
    // SAFETY: system calls on memory prepared before the fork.
    unsafe {
        if t.oom_score_adj.is_some() {
            let f = libc::open(
                c"/proc/self/oom_score_adj".as_ptr(),
                libc::O_WRONLY | libc::O_CLOEXEC,
            );
            if f < 0 || libc::write(f, who.oom.as_ptr().cast(), who.oom.len()) < 0 {
                return Err(());
            }
            libc::close(f);
        }
        if let Some(bits) = t.securebits {
            ok(libc::syscall(
                libc::SYS_prctl,
                libc::PR_SET_SECUREBITS,
                bits as libc::c_ulong,
                0,
                0,
                0,
            ))?;
        }
        if t.switch {
            let c = &t.creds;
            for cap in 0..64u64 {
                if t.drop_bounding & (1 << cap) != 0 {
                    ok(libc::syscall(
                        libc::SYS_prctl,
                        libc::PR_CAPBSET_DROP,
                        cap,
                        0,
                        0,
                        0,
                    ))?;
                }
            }
            ok(libc::syscall(
                libc::SYS_setgroups,
                who.groups.len(),
                who.groups.as_ptr(),
            ))?;
            ok(libc::syscall(
                libc::SYS_setresgid,
                c.gid[0],
                c.gid[1],
                c.gid[2],
            ))?;
            libc::syscall(libc::SYS_setfsgid, c.gid[3]);
            ok(libc::syscall(
                libc::SYS_setresuid,
                c.uid[0],
                c.uid[1],
                c.uid[2],
            ))?;
            libc::syscall(libc::SYS_setfsuid, c.uid[3]);
            check_identity(who)?;
            check_image(spec, path, program, dir)?;
        }
        if t.set_no_new_privs {
            ok(libc::syscall(
                libc::SYS_prctl,
                libc::PR_SET_NO_NEW_PRIVS,
                1,
                0,
                0,
                0,
            ))?;
        }
        Ok(())
    }
}

/// `/proc/self/fd/<fd>` as a C string in `out`, without allocating (the
/// number is only known in the child).
fn fd_link(fd: i32, out: &mut [u8; 32]) {
    const PREFIX: &[u8] = b"/proc/self/fd/";
    out[..PREFIX.len()].copy_from_slice(PREFIX);
    let mut digits = [0u8; 10];
    let (mut n, mut len) = (fd.max(0) as u32, 0);
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for i in 0..len {
        out[PREFIX.len() + i] = digits[len - 1 - i];
    }
    out[PREFIX.len() + len] = 0;
}

/// Does the child now hold exactly the caller's ids, groups and
/// capability sets? (A securebits report that kept capabilities across
/// the uid switch, say, shows here.)
///
/// # Safety
/// As [`become_caller`].
unsafe fn check_identity(who: &mut Become<'_>) -> Result<(), ()> {
    let c = &who.t.creds;
    // SAFETY: system calls writing into local variables and `who.seen`.
    unsafe {
        let (mut r, mut e, mut s) = (0u32, 0u32, 0u32);
        libc::syscall(libc::SYS_getresuid, &mut r, &mut e, &mut s);
        // setfsuid(-1) fails and answers the current fsuid.
        let fs = libc::syscall(libc::SYS_setfsuid, u32::MAX) as u32;
        if [r, e, s, fs] != c.uid {
            return refuse(libc::EPERM);
        }
        libc::syscall(libc::SYS_getresgid, &mut r, &mut e, &mut s);
        let fs = libc::syscall(libc::SYS_setfsgid, u32::MAX) as u32;
        if [r, e, s, fs] != c.gid {
            return refuse(libc::EPERM);
        }
        let n = libc::syscall(libc::SYS_getgroups, who.seen.len(), who.seen.as_mut_ptr());
        if n < 0 || who.seen[..n as usize] != who.groups[..] {
            return refuse(libc::EPERM);
        }
        // _LINUX_CAPABILITY_VERSION_3: two 32-bit halves per set.
        let mut head: [u32; 2] = [0x2008_0522, 0];
        let mut data = [[0u32; 3]; 2]; // effective, permitted, inheritable
        ok(libc::syscall(
            libc::SYS_capget,
            head.as_mut_ptr(),
            data.as_mut_ptr(),
        ))?;
        let set = |i: usize| u64::from(data[0][i]) | u64::from(data[1][i]) << 32;
        if [set(2), set(1), set(0)] != [c.cap_inh, c.cap_prm, c.cap_eff] {
            return refuse(libc::EPERM);
        }
        for cap in 0..64u64 {
            let bit = |m: u64| i64::from((m >> cap) & 1 != 0);
            // Beyond the kernel's last capability both answer EINVAL (-1):
            // counted as absent, as /proc shows them.
            let b = libc::syscall(libc::SYS_prctl, libc::PR_CAPBSET_READ, cap, 0, 0, 0).max(0);
            let a = libc::syscall(
                libc::SYS_prctl,
                libc::PR_CAP_AMBIENT,
                libc::PR_CAP_AMBIENT_IS_SET,
                cap,
                0,
                0,
            )
            .max(0);
            if b != bit(c.cap_bnd) || a != bit(c.cap_amb) {
                return refuse(libc::EPERM);
            }
        }
        Ok(())
    }
}

/// Refuse set-user-ID, set-group-ID and file-capability images: the
/// kernel computes their privileges from the caller's whole state
/// (securebits included, which `/proc` does not show), so they exec
/// locally. Opened as the caller, so its search permissions apply.
// TODO(atoll): the image is then executed by path; one swapped in between
// by the caller itself could still be set-id (its privileges are computed
// correctly by the kernel; only a false securebits report would matter).
///
/// # Safety
/// As [`become_caller`].
unsafe fn check_image(spec: &ExecSpec, path: &CString, program: i32, dir: i32) -> Result<(), ()> {
    // SAFETY: system calls on prepared memory and a local `stat`.
    unsafe {
        let fd = if program >= 0 {
            program
        } else if spec.path.is_empty() && spec.flags & libc::AT_EMPTY_PATH != 0 {
            dir
        } else {
            let nofollow = if spec.flags & libc::AT_SYMLINK_NOFOLLOW != 0 {
                libc::O_NOFOLLOW
            } else {
                0
            };
            libc::openat(
                dir,
                path.as_ptr(),
                libc::O_PATH | libc::O_CLOEXEC | nofollow,
            )
        };
        if fd < 0 {
            // execve itself reports why (ENOENT, EACCES, ELOOP...).
            return Ok(());
        }
        let mut st: libc::stat = core::mem::zeroed();
        ok(libc::fstat(fd, &mut st) as libc::c_long)?;
        let setgid = libc::S_ISGID | libc::S_IXGRP;
        if st.st_mode & libc::S_ISUID != 0 || st.st_mode & setgid == setgid {
            return refuse(libc::EPERM);
        }
        let mut link = [0u8; 32];
        fd_link(fd, &mut link);
        let r = libc::getxattr(
            link.as_ptr().cast(),
            c"security.capability".as_ptr(),
            core::ptr::null_mut(),
            0,
        );
        let e = *libc::__errno_location();
        if r >= 0 || e != libc::ENODATA && e != libc::EOPNOTSUPP {
            return refuse(libc::EPERM);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::creds::{Creds, Server};
    use std::os::fd::AsFd;

    fn root() -> bool {
        // SAFETY: geteuid only reads the process's credentials.
        let euid = unsafe { libc::geteuid() };
        if euid != 0 {
            eprintln!("switching identities needs root; checked in CI");
        }
        euid == 0
    }

    fn nobody() -> Creds {
        let me = Server::current().unwrap().creds;
        Creds {
            uid: [65534; 4],
            gid: [65534; 4],
            groups: vec![5, 6],
            cap_bnd: me.cap_bnd,
            ..Default::default()
        }
    }

    /// Run `path args` as `target` says, its stdout captured; `None` if
    /// refused.
    fn run(path: &str, args: &[&str], target: &Target) -> Option<(String, i32)> {
        let (r, w) = rustix::pipe::pipe().unwrap();
        let cwd = rustix::fs::open(
            "/",
            rustix::fs::OFlags::PATH | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .unwrap();
        let spec = ExecSpec {
            path: path.as_bytes().to_vec(),
            argv: std::iter::once(path)
                .chain(args.iter().copied())
                .map(|a| a.as_bytes().to_vec())
                .collect(),
            envp: vec![b"PATH=/usr/bin:/bin".to_vec()],
            fds: vec![FdRole::Keep(1), FdRole::Cwd],
            ..Default::default()
        };
        let fds = vec![
            w.as_fd().try_clone_to_owned().unwrap(),
            cwd.as_fd().try_clone_to_owned().unwrap(),
        ];
        drop(w);
        let s = match spawn(&spec, target, fds, 0) {
            Ok(s) => s,
            Err(SpawnError::Refused) => return None,
            // The copy just written may be open for writing in a child
            // another test forked meanwhile, until that child's exec.
            Err(SpawnError::Exec(libc::ETXTBSY)) => {
                std::thread::sleep(std::time::Duration::from_millis(10));
                return run(path, args, target);
            }
            Err(e) => panic!("{e:?}"),
        };
        let mut st = 0;
        // SAFETY: waiting for our own child.
        unsafe { libc::waitpid(s.pid, &mut st, 0) };
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match rustix::io::read(&r, &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
        Some((String::from_utf8_lossy(&out).into_owned(), st))
    }

    #[test]
    fn descriptor_links_are_spelled_without_allocating() {
        let mut b = [0xffu8; 32];
        fd_link(1207, &mut b);
        assert_eq!(&b[..19], b"/proc/self/fd/1207\0");
        fd_link(0, &mut b);
        assert_eq!(&b[..16], b"/proc/self/fd/0\0");
    }

    #[test]
    fn the_program_starts_with_the_targets_identity() {
        if !root() {
            return;
        }
        let t = Target {
            switch: true,
            creds: nobody(),
            set_no_new_privs: true,
            ..Default::default()
        };
        let script = "id -u; id -g; id -G; grep -E '^(CapPrm|CapEff|NoNewPrivs)' /proc/self/status";
        let (out, st) = run("/bin/sh", &["-c", script], &t).expect("started");
        assert_eq!(st, 0);
        assert_eq!(
            out,
            "65534\n65534\n65534 5 6\nCapPrm:\t0000000000000000\n\
             CapEff:\t0000000000000000\nNoNewPrivs:\t1\n"
        );
    }

    #[test]
    fn set_id_images_and_unreproducible_capabilities_are_refused() {
        if !root() {
            return;
        }
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("atoll-spawn-setid-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let prog = dir.join("true");
        std::fs::copy("/bin/true", &prog).unwrap();
        let prog = prog.to_str().unwrap();
        let switch = Target {
            switch: true,
            creds: nobody(),
            ..Default::default()
        };
        // A plain copy runs as nobody.
        assert!(run(prog, &[], &switch).is_some());
        for mode in [0o4755, 0o2755] {
            std::fs::set_permissions(prog, std::fs::Permissions::from_mode(mode)).unwrap();
            assert_eq!(run(prog, &[], &switch), None, "mode {mode:o}");
            // Without a switch the kernel sees the server's own identity,
            // the caller's: it runs.
            assert!(run(prog, &[], &Target::default()).is_some());
        }
        // A set-group-ID bit without group execute is file locking.
        std::fs::set_permissions(prog, std::fs::Permissions::from_mode(0o2745)).unwrap();
        assert!(run(prog, &[], &switch).is_some());
        // Capabilities a uid switch drops cannot be what the caller had.
        let mut caps = switch.clone();
        caps.creds.cap_prm = 1 << 13;
        std::fs::set_permissions(prog, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(run(prog, &[], &caps), None);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
