//! The credentials atoll checks with, kept equal to the kernel's.
//!
//! Linux checks file access with a thread's fsuid, fsgid, supplementary
//! groups and effective capabilities. Servers cannot read them, so each
//! request carries the first three words (`Cred`) and each session
//! registers its groups (`Request::SetGroups`). Rather than re-derive the
//! kernel's rules (`setuid` moving saved ids, fs ids following the
//! effective ids, capabilities raised and dropped with them —
//! `cap_task_fix_setuid`, `SECBIT_*`), every call that may change
//! credentials runs on Linux first and then the client reads back what the
//! kernel made of it. glibc makes an id change in every thread (its
//! `SIGSETXID` broadcast issues the call once per thread), and each of those
//! calls passes through here, so the process-wide copy ends equal to every
//! thread's.
//!
//! Hot path: `Client::cred` is three relaxed loads; the kernel is asked
//! only after a credential change.

use core::sync::atomic::Ordering;

use atoll_proto::Cred;

use crate::session::Client;
use crate::sys;

/// System calls after which the kernel's credentials may differ.
pub fn changes_credentials(nr: i64) -> bool {
    matches!(
        nr,
        libc::SYS_setuid
            | libc::SYS_setgid
            | libc::SYS_setreuid
            | libc::SYS_setregid
            | libc::SYS_setresuid
            | libc::SYS_setresgid
            | libc::SYS_setfsuid
            | libc::SYS_setfsgid
            | libc::SYS_setgroups
            | libc::SYS_capset
    )
}

/// Run credential call `nr` on Linux, then take over what it changed.
pub fn change(c: &Client, nr: i64, a: &[u64; 6]) -> i64 {
    // SAFETY: the program's own call with its own arguments; the kernel
    // validates every pointer (setgroups' list, capset's structs).
    let r = unsafe { sys::syscall6(nr, *a) };
    // setfsuid/setfsgid return the previous id and never fail visibly, so
    // refresh after every call rather than only after success.
    refresh(c, nr == libc::SYS_setgroups && r == 0);
    r
}

/// Read the calling thread's credentials from the kernel into `c`; with
/// `groups`, register the supplementary groups with every server again.
pub fn refresh(c: &Client, groups: bool) {
    let now = kernel_cred();
    let (ruid, rgid) = real_ids();
    c.fsuid.store(now.uid, Ordering::Relaxed);
    c.fsgid.store(now.gid, Ordering::Relaxed);
    c.caps.store(now.caps, Ordering::Relaxed);
    c.ruid.store(ruid, Ordering::Relaxed);
    c.rgid.store(rgid, Ordering::Relaxed);
    c.permitted_caps
        .store(capabilities().1 & Cred::FS_CAPS, Ordering::Relaxed);
    if groups {
        c.register_groups();
    }
}

/// The fsuid, fsgid and effective file-system capabilities of this thread.
pub fn kernel_cred() -> Cred {
    // setfsuid/setfsgid with an invalid id change nothing and return the
    // current fs id: the only way to read it without /proc.
    // SAFETY: integer arguments only.
    let uid = unsafe { sys::sc(libc::SYS_setfsuid, u32::MAX as u64, 0, 0, 0) } as u32;
    // SAFETY: as above.
    let gid = unsafe { sys::sc(libc::SYS_setfsgid, u32::MAX as u64, 0, 0, 0) } as u32;
    Cred {
        uid,
        gid,
        caps: capabilities().0 & Cred::FS_CAPS,
    }
}

/// The real user and group ids (what `access` checks with).
fn real_ids() -> (u32, u32) {
    // SAFETY: no arguments.
    let uid = unsafe { sys::sc(libc::SYS_getuid, 0, 0, 0, 0) } as u32;
    // SAFETY: no arguments.
    let gid = unsafe { sys::sc(libc::SYS_getgid, 0, 0, 0, 0) } as u32;
    (uid, gid)
}

/// The low words of this thread's effective and permitted capability sets
/// (every capability atoll looks at is below 32).
fn capabilities() -> (u32, u32) {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
    let mut header = Header {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut data = [Data::default(); 2];
    // SAFETY: capget writes one header and two data words into locals.
    let r = unsafe {
        sys::sc(
            libc::SYS_capget,
            &mut header as *mut Header as u64,
            data.as_mut_ptr() as u64,
            0,
            0,
        )
    };
    if r < 0 {
        return (0, 0);
    }
    (data[0].effective, data[0].permitted)
}

/// The credentials `access`/`faccessat` without `AT_EACCESS` check with:
/// Linux's `access_override_creds` — the real ids as fs ids, and the
/// permitted capabilities when the real user is root, none otherwise.
pub fn access_cred(c: &Client) -> Cred {
    let uid = c.ruid.load(Ordering::Relaxed);
    Cred {
        uid,
        gid: c.rgid.load(Ordering::Relaxed),
        caps: if uid == 0 {
            c.permitted_caps.load(Ordering::Relaxed)
        } else {
            0
        },
    }
}
