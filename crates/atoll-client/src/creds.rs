//! The credentials atoll checks with, kept equal to the kernel's.
//!
//! Linux checks file access with a *thread's* fsuid, fsgid, supplementary
//! groups and effective capabilities. Servers cannot read them, so each
//! request carries the first three words and the number of its thread's
//! group list (`Cred`), and the lists themselves are registered with each
//! server once per lane (`Request::SetGroups`, posted on the channel just
//! before the first request that names the list, so the server has it when
//! it serves that request: a channel is served in order). Rather than
//! re-derive the kernel's rules (`setuid` moving saved ids, fs ids
//! following the effective ids, capabilities raised and dropped with them
//! — `cap_task_fix_setuid`, `SECBIT_*`), every call that may change
//! credentials runs on Linux first and then the client reads back what the
//! kernel made of it, for the calling thread only — as the kernel changes
//! only the calling thread. glibc makes an id change in every thread (its
//! `SIGSETXID` broadcast issues the call once per thread), and each of those
//! calls passes through here; a raw `syscall(SYS_setresuid, …)` on one
//! thread changes that thread alone, here as there.
//!
//! A thread reads its credentials from the kernel on its first atoll call
//! (a thread starts with its creator's, which only the kernel knows for
//! sure), and again after any thread of the process changed credentials
//! (a generation count): glibc's broadcast may run another thread's call
//! where the trap cannot see it (inside a handler that interrupted atoll
//! code), and the caller's own call, which glibc issues last, tells every
//! thread to look. A forked child keeps its forking thread's copy, as the
//! kernel does. Hot path: `Client::cred` is a thread-local load and one
//! relaxed load of the generation.

use core::cell::{Cell, RefCell, UnsafeCell};
use core::sync::atomic::{AtomicU64, Ordering};

use atoll_proto::{Cred, MAX_GROUP_SETS};

use crate::session::Client;
use crate::sys::{self, SpinLock};

/// What the kernel checks this thread's file access with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThreadCred {
    /// fsuid, fsgid, effective file-system capabilities, group list number.
    pub fs: Cred,
    pub ruid: u32,
    pub rgid: u32,
    /// Permitted file-system capabilities (`access` by a root real user).
    pub permitted: u32,
    /// [`GENERATION`] when read.
    generation: u64,
}

/// Bumped by every credential change of any thread of the process.
static GENERATION: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static MINE: Cell<Option<ThreadCred>> = const { Cell::new(None) };
    /// This thread's groups when they live in the scratch list.
    static SCRATCH_GROUPS: RefCell<Vec<u32>> = const { RefCell::new(Vec::new()) };
}

/// The list number used once every other number is taken: its contents
/// are this thread's, sent again before each request that names it.
pub const SCRATCH_SET: u32 = MAX_GROUP_SETS - 1;

/// The calling thread's credentials (read from the kernel on first use).
pub fn current() -> ThreadCred {
    let generation = GENERATION.load(Ordering::Acquire);
    MINE.with(|m| match m.get() {
        Some(t) if t.generation == generation => t,
        _ => {
            let t = from_kernel(generation);
            m.set(Some(t));
            t
        }
    })
}

/// Every distinct supplementary group list threads of this process held,
/// by number. Process-local; its lock is one of the fork gate's.
struct GroupSets {
    lists: UnsafeCell<Vec<Vec<u32>>>,
}

// SAFETY: `lists` is only touched under `fork_lock()`.
unsafe impl Sync for GroupSets {}

static SETS: GroupSets = GroupSets {
    lists: UnsafeCell::new(Vec::new()),
};

/// The group lists' lock, for [`crate::forkgate`].
pub fn fork_lock() -> &'static SpinLock {
    &crate::forkgate::LOCKS.creds
}

/// The number of `groups` among the process's lists (added if new).
fn set_of(groups: &[u32]) -> u32 {
    let _g = fork_lock().lock();
    // SAFETY: the lock is held for the whole use of the lists.
    let lists = unsafe { &mut *SETS.lists.get() };
    if let Some(i) = lists.iter().position(|l| l == groups) {
        return i as u32;
    }
    if lists.len() as u32 >= SCRATCH_SET {
        SCRATCH_GROUPS.with(|g| *g.borrow_mut() = groups.to_vec());
        return SCRATCH_SET;
    }
    lists.push(groups.to_vec());
    (lists.len() - 1) as u32
}

/// The members of list `set` as this thread knows it.
pub fn groups_of(set: u32) -> Vec<u32> {
    if set == SCRATCH_SET {
        return SCRATCH_GROUPS.with(|g| g.borrow().clone());
    }
    let _g = fork_lock().lock();
    // SAFETY: the lock is held for the whole use of the lists.
    let lists = unsafe { &*SETS.lists.get() };
    lists.get(set as usize).cloned().unwrap_or_default()
}

/// Which group lists a lane already registered with each server: one bit
/// per list number below 64 (more lists are registered before every
/// request that names them). Owned by a lane, used by its holder.
pub struct SentSets {
    bits: [AtomicU64; atoll_proto::MAX_SERVERS],
}

impl SentSets {
    pub const fn new() -> SentSets {
        SentSets {
            bits: [const { AtomicU64::new(0) }; atoll_proto::MAX_SERVERS],
        }
    }

    /// Has `set` reached `server` through this lane? (Marks it if not:
    /// the caller sends it now.)
    pub fn check_and_mark(&self, server: usize, set: u32) -> bool {
        if set >= 64 {
            return false;
        }
        let bit = 1u64 << set;
        // Hot path (every request): a plain load, the read-modify-write
        // only the first time.
        if self.bits[server].load(Ordering::Relaxed) & bit != 0 {
            return true;
        }
        self.bits[server].fetch_or(bit, Ordering::Relaxed) & bit != 0
    }

    /// `set` did not go after all.
    pub fn unmark(&self, server: usize, set: u32) {
        if set < 64 {
            self.bits[server].fetch_and(!(1u64 << set), Ordering::Relaxed);
        }
    }
}

impl Default for SentSets {
    fn default() -> Self {
        Self::new()
    }
}

/// Run credential call `nr` on Linux, then take over what it changed.
pub fn change(_c: &Client, nr: i64, a: &[u64; 6]) -> i64 {
    // SAFETY: the program's own call with its own arguments; the kernel
    // validates every pointer (setgroups' list, capset's structs).
    let r = unsafe { sys::syscall6(nr, *a) };
    // setfsuid/setfsgid return the previous id and never fail visibly, so
    // refresh after every call rather than only after success.
    refresh();
    r
}

/// Read the calling thread's credentials from the kernel again, and make
/// every other thread read its own before its next request.
pub fn refresh() {
    let generation = GENERATION.fetch_add(1, Ordering::AcqRel) + 1;
    let t = from_kernel(generation);
    MINE.with(|m| m.set(Some(t)));
}

/// The calling thread's credentials as the kernel holds them.
fn from_kernel(generation: u64) -> ThreadCred {
    let mut fs = kernel_cred();
    let groups: Vec<u32> = rustix::process::getgroups()
        .map(|g| g.iter().map(|g| g.as_raw()).collect())
        .unwrap_or_default();
    fs.groups = set_of(&groups);
    let (ruid, rgid) = real_ids();
    ThreadCred {
        fs,
        ruid,
        rgid,
        permitted: capabilities().1 & Cred::FS_CAPS,
        generation,
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
        groups: 0,
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
pub fn access_cred(_c: &Client) -> Cred {
    let t = current();
    Cred {
        uid: t.ruid,
        gid: t.rgid,
        caps: if t.ruid == 0 { t.permitted } else { 0 },
        groups: t.fs.groups,
    }
}
