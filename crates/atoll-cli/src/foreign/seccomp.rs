//! The raw calls of the relay's seccomp user-notification filter, in one
//! audited place: building and installing the filter (in the program's
//! child, between fork and exec), receiving and answering notifications,
//! installing descriptors in the program (`SECCOMP_IOCTL_NOTIF_ADDFD`),
//! and reading and writing the program's memory (`process_vm_readv`/
//! `process_vm_writev`). Everything above works with owned values and
//! errno numbers.
//!
//! Life of a notification: the program enters a filtered call and sleeps;
//! [`recv`] hands the supervisor its number, arguments and thread id; the
//! supervisor reads what it needs, checks [`id_valid`] (the thread may
//! have died and its id been reused), and answers once with [`respond`]
//! (a result or an errno), [`continue_call`] (the kernel runs the call as
//! the program made it) or [`add_fd`] (a new descriptor as the result).
//! An answer to a thread that died meanwhile fails with `ENOENT`, which
//! is ignored: nothing waits for it.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// `AUDIT_ARCH_X86_64`: the only architecture whose calls are let through.
const ARCH_X86_64: u32 = 0xc000_003e;
/// x32 system calls carry this bit; they are refused, not looked at.
const X32_BIT: u32 = 0x4000_0000;
/// `SECCOMP_ADDFD_FLAG_SEND`: install the descriptor and answer the call
/// with its number, in one step.
const ADDFD_FLAG_SEND: u32 = 1 << 1;
/// `PR_SET_SYSCALL_USER_DISPATCH` (its `PR_SYS_DISPATCH_OFF` is 0).
const PR_SET_SYSCALL_USER_DISPATCH: i32 = 59;

/// One notification: which thread, which call, its arguments.
#[derive(Clone, Copy, Debug)]
pub struct Notif {
    pub id: u64,
    pub pid: i32,
    pub nr: i64,
    pub args: [u64; 6],
}

fn stmt(code: u32, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u32, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    }
}

/// The filter program: other architectures and x32 calls get `ENOSYS`
/// (their paths would not be looked at), the calls in `nrs` notify the
/// supervisor, everything else runs.
pub fn program(nrs: &[i64]) -> Vec<libc::sock_filter> {
    use libc::{BPF_ABS, BPF_JEQ, BPF_JGE, BPF_JMP, BPF_K, BPF_LD, BPF_RET, BPF_W};
    let refuse = libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
    let mut p = vec![
        stmt(BPF_LD | BPF_W | BPF_ABS, 4),
        jump(BPF_JMP | BPF_JEQ | BPF_K, ARCH_X86_64, 1, 0),
        stmt(BPF_RET | BPF_K, refuse),
        stmt(BPF_LD | BPF_W | BPF_ABS, 0),
        jump(BPF_JMP | BPF_JGE | BPF_K, X32_BIT, 0, 1),
        stmt(BPF_RET | BPF_K, refuse),
    ];
    let n = nrs.len();
    assert!(n < 250, "jump offsets are one byte");
    for (i, &nr) in nrs.iter().enumerate() {
        p.push(jump(BPF_JMP | BPF_JEQ | BPF_K, nr as u32, (n - i) as u8, 0));
    }
    p.push(stmt(BPF_RET | BPF_K, libc::SECCOMP_RET_ALLOW));
    p.push(stmt(BPF_RET | BPF_K, libc::SECCOMP_RET_USER_NOTIF));
    p
}

/// In the program's child, between fork and exec: set `no_new_privs`,
/// install `prog` with a new listener, and send the listener over the
/// socket `to` (`SCM_RIGHTS`). Only raw calls, no allocation.
///
/// # Safety
/// Only between fork and exec (it changes this process for good); `prog`
/// must be a valid filter program.
pub unsafe fn install_and_send(prog: &[libc::sock_filter], to: RawFd) -> io::Result<()> {
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: plain prctl and seccomp calls on a local, well-formed
    // program; the kernel copies it.
    let listener = unsafe {
        // The client library's Syscall User Dispatch goes first: its
        // handler may make calls the filter holds for a supervisor that
        // does not have the listener yet (exec would end it anyway).
        libc::prctl(PR_SET_SYSCALL_USER_DISPATCH, 0, 0, 0, 0);
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(io::Error::last_os_error());
        }
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            libc::SECCOMP_FILTER_FLAG_NEW_LISTENER,
            &fprog as *const libc::sock_fprog,
        )
    };
    if listener < 0 {
        return Err(io::Error::last_os_error());
    }
    let listener = listener as i32;
    // One descriptor in a control message, on the stack.
    let mut space = [0u64; 4];
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    // SAFETY: msghdr and cmsg point into the local buffers above, sized
    // for one int (CMSG_SPACE(4) = 24 ≤ 32 bytes).
    let r = unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = space.as_mut_ptr().cast();
        msg.msg_controllen = libc::CMSG_SPACE(4) as usize;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(4) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<i32>(), listener);
        // The listener is close-on-exec: no `close` (a filtered call)
        // before the exec.
        libc::sendmsg(to, &msg, 0)
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The listener the child sent over `from`.
pub fn receive_listener(from: RawFd) -> io::Result<OwnedFd> {
    let mut space = [0u64; 4];
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    // SAFETY: as in `install_and_send`, receiving into local buffers; the
    // descriptor taken is checked to be the one control message's.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = space.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&space);
        let r = libc::recvmsg(from, &mut msg, libc::MSG_CMSG_CLOEXEC);
        if r <= 0 {
            return Err(io::Error::other("the program's filter did not arrive"));
        }
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if cmsg.is_null()
            || (*cmsg).cmsg_level != libc::SOL_SOCKET
            || (*cmsg).cmsg_type != libc::SCM_RIGHTS
        {
            return Err(io::Error::other("no filter listener in the message"));
        }
        let fd = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<i32>());
        Ok(OwnedFd::from_raw_fd(fd))
    }
}

/// The next notification; `None` when there is none to take (the thread
/// that made it died, or a signal came).
pub fn recv(listener: &OwnedFd) -> Option<Notif> {
    // SAFETY: the kernel fills a zeroed struct of the size it expects.
    let mut n: libc::seccomp_notif = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let r = unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_RECV as _,
            &mut n,
        )
    };
    (r == 0).then_some(Notif {
        id: n.id,
        pid: n.pid as i32,
        nr: n.data.nr as i64,
        args: n.data.args,
    })
}

/// Is the notification still pending (its thread alive and waiting)?
pub fn id_valid(listener: &OwnedFd, id: u64) -> bool {
    // SAFETY: the ioctl reads one u64.
    unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_ID_VALID as _,
            &id,
        ) == 0
    }
}

fn send(listener: &OwnedFd, id: u64, val: i64, error: i32, flags: u32) {
    let mut resp = libc::seccomp_notif_resp {
        id,
        val,
        error,
        flags,
    };
    // SAFETY: the ioctl reads the local response.
    unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_SEND as _,
            &mut resp,
        )
    };
}

/// Answer with a result (`Ok`) or an errno (`Err`).
pub fn respond(listener: &OwnedFd, id: u64, r: Result<i64, i32>) {
    match r {
        Ok(v) => send(listener, id, v, 0, 0),
        Err(e) => send(listener, id, 0, -e, 0),
    }
}

/// Let the kernel run the call as the program made it.
pub fn continue_call(listener: &OwnedFd, id: u64) {
    send(
        listener,
        id,
        0,
        0,
        libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32,
    );
}

/// Install a duplicate of `fd` in the program (close-on-exec if asked)
/// and answer the call with its number.
pub fn add_fd(listener: &OwnedFd, id: u64, fd: RawFd, cloexec: bool) -> Result<i64, i32> {
    addfd(listener, id, fd, cloexec, ADDFD_FLAG_SEND)
}

/// Install a duplicate of `fd` in the program (close-on-exec if asked)
/// and leave the call pending: its number, for an answer still to come
/// (`exec.rs` names it in the call's path, then lets the call run).
pub fn install_fd(listener: &OwnedFd, id: u64, fd: RawFd, cloexec: bool) -> Result<i64, i32> {
    addfd(listener, id, fd, cloexec, 0)
}

fn addfd(listener: &OwnedFd, id: u64, fd: RawFd, cloexec: bool, flags: u32) -> Result<i64, i32> {
    let mut a = libc::seccomp_notif_addfd {
        id,
        flags,
        srcfd: fd as u32,
        newfd: 0,
        newfd_flags: if cloexec { libc::O_CLOEXEC as u32 } else { 0 },
    };
    // SAFETY: the ioctl reads the local struct.
    let r = unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_ADDFD as _,
            &mut a,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO))
    } else {
        Ok(r as i64)
    }
}

/// Read `buf.len()` bytes of process `pid` at `addr` (`EFAULT` if any is
/// not mapped).
pub fn read_mem(pid: i32, addr: u64, buf: &mut [u8]) -> Result<(), i32> {
    if buf.is_empty() {
        return Ok(());
    }
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: the local iovec covers `buf`; the remote one is only read
    // by the kernel, which checks it.
    let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
    if n == buf.len() as isize {
        Ok(())
    } else {
        Err(libc::EFAULT)
    }
}

/// Write `data` into process `pid` at `addr` (`EFAULT` if not mapped
/// writable).
pub fn write_mem(pid: i32, addr: u64, data: &[u8]) -> Result<(), i32> {
    if data.is_empty() {
        return Ok(());
    }
    let local = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: data.len(),
    };
    // SAFETY: the local iovec covers `data` (only read); the kernel checks
    // the remote one.
    let n = unsafe { libc::process_vm_writev(pid, &local, 1, &remote, 1, 0) };
    if n == data.len() as isize {
        Ok(())
    } else {
        Err(libc::EFAULT)
    }
}

/// The bytes of a plain-old-data value, to write into the program.
pub fn bytes_of<T: Copy>(v: &T) -> &[u8] {
    // SAFETY: `T: Copy` values of the kernel ABI (stat, statx) are plain
    // bytes; the slice lives as long as the borrow.
    unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), std::mem::size_of::<T>()) }
}

/// A duplicate of descriptor `fd` of thread `tid`'s process (same open
/// file description: its offset is the program's), through a pidfd.
pub fn take_fd(tid: i32, fd: i32) -> Result<OwnedFd, i32> {
    let errno = || {
        io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO)
    };
    let open = |pid: i32| {
        // SAFETY: pidfd_open of a pid, no pointers.
        unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) }
    };
    // A notification names the calling thread; a pidfd needs its process
    // (the thread group's leader) unless the thread is that leader.
    let mut pidfd = open(tid);
    if pidfd < 0 {
        match thread_group(tid) {
            Some(tgid) if tgid != tid => pidfd = open(tgid),
            _ => {}
        }
    }
    if pidfd < 0 {
        return Err(errno());
    }
    // SAFETY: a new descriptor this function owns.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd as i32) };
    // SAFETY: pidfd_getfd of a descriptor number, no pointers.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) };
    if fd < 0 {
        return Err(errno());
    }
    // SAFETY: a new descriptor (close-on-exec) this function owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// The process (thread group) of thread `tid`.
fn thread_group(tid: i32) -> Option<i32> {
    let s = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_listed_call_jumps_to_the_notify_return() {
        let p = program(&[2, 257, 4]);
        let notify = p.len() - 1;
        assert_eq!(p[notify].k, libc::SECCOMP_RET_USER_NOTIF);
        assert_eq!(p[notify - 1].k, libc::SECCOMP_RET_ALLOW);
        for (i, ins) in p.iter().enumerate().skip(6).take(3) {
            assert_eq!(i + 1 + ins.jt as usize, notify, "{i}");
            assert_eq!(ins.jf, 0);
        }
    }

    #[test]
    fn a_descriptor_is_taken_from_any_thread_of_its_process() {
        let me = std::process::id() as i32;
        let file = std::fs::File::open("/proc/self/status").unwrap();
        let fd = file.as_raw_fd();
        let tid = std::thread::scope(|s| {
            s.spawn(|| {
                // SAFETY: gettid takes no arguments.
                let tid = unsafe { libc::syscall(libc::SYS_gettid) } as i32;
                assert_ne!(tid, me);
                take_fd(tid, fd).map(drop)
            })
            .join()
            .unwrap()
        });
        assert_eq!(tid, Ok(()));
        assert!(take_fd(me, fd).is_ok());
    }

    #[test]
    fn memory_reads_of_unmapped_addresses_are_efault() {
        let me = std::process::id() as i32;
        let mut b = [0u8; 8];
        assert_eq!(read_mem(me, 8, &mut b), Err(libc::EFAULT));
        let v = 0x1122_3344_5566_7788u64;
        read_mem(me, &v as *const u64 as u64, &mut b).unwrap();
        assert_eq!(u64::from_ne_bytes(b), v);
    }
}
