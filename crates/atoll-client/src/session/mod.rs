//! The process's session with the instance: bootstrap exchanges on the
//! session socket, the mapped buffer cache and control block, and the pool
//! of *lanes* through which requests travel.
//!
//! Life cycle (see `atoll_proto::boot`): neither `AttachLazily` nor
//! `Reattach` (after `execve`) gives a lane, so a process's first call
//! asks `NewLane`, as does a thread that finds every lane taken; `Fork`
//! creates a child session before `fork`, whose first call asks `NewLane`
//! (or whose new image asks `Reattach`). The session
//! socket *is* the session: closing its last copy releases everything.
//!
//! Lanes. A lane is one channel per server. A thread takes a free lane for
//! the duration of one emulated system call by flipping its `busy` flag
//! (lock-free), so neither other threads nor a signal handler that
//! re-enters `dispatch` on the same thread can ever wait for it: the
//! handler simply takes another lane. Lanes are never freed while the
//! session lives (a new image after `execve`, or a forked child, builds a
//! new [`Session`]).
//!
//! Ownership: only the holder of a lane's `busy` flag touches its encode
//! buffer and channels; the boot socket is used under `boot_lock` with
//! signals blocked.

use std::borrow::Cow;
use std::cell::UnsafeCell;
use std::os::fd::{AsFd, BorrowedFd, IntoRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicU64, Ordering};

use atoll_msg::{ClientChannel, Control, PollMode, SharedRegion};
use atoll_proto::boot::{BootReply, BootRequest, InstanceInfo};
use atoll_proto::{
    Cred, Extent, InodeId, Reply, ReplyFrame, Request, RequestFrame, SessionId, Vouched, MAX_FRAME,
};

use crate::dcache::DirCache;
use crate::error::{Error, Result};
use crate::sys::{self, SpinLock};

/// Most lanes one process may hold (threads calling concurrently, plus
/// nested signal-handler calls).
mod bootstrap;
pub use bootstrap::{
    attach, away_from, boot_call, boot_post, boot_post_with, to_high, to_high_or_close,
};

pub const MAX_LANES: usize = 128;

/// Private descriptors are moved at or above this number, out of the way
/// of programs that expect low numbers to be free.
pub const PRIVATE_FD_MIN: i32 = 900;

mod lane;
pub use lane::*;
mod ondemand;
pub use ondemand::OnDemand;

/// One session: its id and its lanes. Replaced wholesale in a forked child.
pub struct Session {
    pub id: SessionId,
    lanes: Vec<AtomicPtr<Lane>>,
    /// Directory-lookup cache (Hare §3.7.2); per session, so a forked
    /// child starts empty.
    pub dcache: DirCache,
}

impl Session {
    /// Every channel of every lane of this session (where invalidations
    /// for it may arrive).
    pub fn channels(&self) -> impl Iterator<Item = &ClientChannel> {
        self.lanes
            .iter()
            .map(|l| l.load(Ordering::Acquire))
            .take_while(|p| !p.is_null())
            // SAFETY: lanes are leaked boxes, never freed.
            .flat_map(|p| unsafe { &*p }.chans.iter().filter_map(|ch| ch.get()))
    }
}

impl Session {
    fn new(id: SessionId, lane0: Lane) -> Session {
        let s = Session::without_lanes(id);
        s.lanes[0].store(Box::into_raw(Box::new(lane0)), Ordering::Release);
        s
    }

    /// A forked child's session: its first call asks for a lane
    /// ([`Client::lane`]).
    fn without_lanes(id: SessionId) -> Session {
        Session {
            id,
            lanes: (0..MAX_LANES)
                .map(|_| AtomicPtr::new(core::ptr::null_mut()))
                .collect(),
            dcache: DirCache::new(),
        }
    }
}

/// A forked child's [`Session`], made by the parent before the clone
/// ([`ChildSession::new`]) and adopted by the child
/// ([`Client::adopt_child_session`]). Made in the child, its allocation
/// (a kilobyte of lane slots and the directory cache) made glibc's
/// `malloc` consolidate its free lists, writing to heap pages the child
/// shares with its parent: about four page copies in every forked child,
/// most of which only exec. The parent keeps its copy, unused, for its
/// next fork ([`SPARE`]): freed after the clone, it was written (the
/// allocator's lists) while the child still shared those pages.
pub struct ChildSession(Option<Box<Session>>);

/// The parent's copy of its last child's [`Session`], never touched by
/// the parent itself, made into the next child's.
static SPARE: AtomicPtr<Session> = AtomicPtr::new(core::ptr::null_mut());

impl ChildSession {
    pub fn new(id: SessionId) -> ChildSession {
        let spare = SPARE.swap(core::ptr::null_mut(), Ordering::AcqRel);
        let s = if spare.is_null() {
            Box::new(Session::without_lanes(id))
        } else {
            // SAFETY: `SPARE` holds only boxes leaked by `Drop` below, and
            // the swap made this one ours alone.
            let mut s = unsafe { Box::from_raw(spare) };
            s.id = id;
            s
        };
        ChildSession(Some(s))
    }

    /// The child's session, as a leaked box (the child's, for good).
    fn into_raw(mut self) -> *mut Session {
        self.0.take().map_or(core::ptr::null_mut(), Box::into_raw)
    }
}

impl Drop for ChildSession {
    /// In the parent (or a child without a client): kept for the next
    /// fork. Only a session no child ever used comes here: lanes empty,
    /// directory cache empty.
    fn drop(&mut self) {
        if let Some(s) = self.0.take() {
            let p = Box::into_raw(s);
            let old = SPARE.swap(p, Ordering::AcqRel);
            if !old.is_null() {
                // SAFETY: as in `new`: a box leaked here, now ours alone.
                drop(unsafe { Box::from_raw(old) });
            }
        }
    }
}

/// The current working directory when it is inside atoll.
pub struct Cwd {
    pub ino: InodeId,
    /// Canonical absolute path (what `getcwd` answers).
    pub path: Vec<u8>,
    /// The `O_PATH` description that keeps the directory alive at its
    /// server while it is the cwd, removed or not (`ns::cwd`); released
    /// when the cwd changes.
    pub hold: crate::fdtable::Held,
}

/// Everything a process knows about its instance. One per process, leaked
/// (`&'static`), created by `init`.
pub struct Client {
    pub info: InstanceInfo,
    pub mount: Vec<u8>,
    /// The mount's parent directory (`..` from the mount root leads there).
    pub mount_parent: Vec<u8>,
    pub poll: PollMode,
    /// The buffer cache and the control block, mapped at their first use
    /// ([`Client::cache`], [`Client::control`]; `ondemand`), with the
    /// sizes read while checking an exec's hand-over (`None`: `fstat`
    /// when mapping).
    cache_map: OnDemand<SharedRegion>,
    cache_size: Option<i64>,
    control_map: OnDemand<Control>,
    control_size: Option<i64>,
    pub socket_path: String,
    /// Absolute path of the preload library (`ATOLL_PRELOAD`).
    pub preload: Option<String>,
    /// Private descriptors (relocatable when a program `dup2`s onto them).
    pub socket_fd: AtomicI32,
    /// The placeholder template, -1 until the first atoll descriptor
    /// ([`Client::template`]).
    pub template_fd: AtomicI32,
    pub cache_fd: AtomicI32,
    /// The control block's memfd, kept for an exec to hand over.
    pub control_fd: AtomicI32,
    /// A forked child that has not yet named its process to the boot
    /// thread (`BootRequest::ChildPid`, sent with its first `NewLane`).
    pid_untold: AtomicBool,
    session: AtomicPtr<Session>,
    pub boot_lock: SpinLock,
    pub umask: AtomicU32,
    cwd: AtomicPtr<Cwd>,
    /// Set once the process takes a POSIX record lock: `execve` then
    /// passes its locks to the new image (`exec::handover`).
    pub posix_locks: AtomicBool,
    /// Set once any lock request (`SetLock`: record, OFD or `flock`) went
    /// out: `execve` then keeps no session of its own.
    pub any_locks: AtomicBool,
    /// The inodes those locks may be on (`lockmarks`): `close` unlocks and
    /// waits only for them.
    pub lock_marks: crate::lockmarks::LockMarks,
    /// This process's bindings of the file servers' names (`names`),
    /// resolved with the control block's first use.
    fs_names: OnDemand<crate::names::FsNames>,
}

impl Client {
    /// The buffer cache, mapped now if this process has not mapped it yet
    /// (`ondemand`); a region of length 0 in a copy island. A mapping
    /// that cannot be made (out of address space) is a panic, which the
    /// call that needed it turns into `EIO`.
    pub fn cache(&self) -> &SharedRegion {
        self.cache_map
            .get_or_make(|| {
                let size = self.cache_size;
                map_private_fd(&self.cache_fd, |fd| match (fd, size) {
                    (None, _) => Ok(SharedRegion::none()),
                    (Some(fd), Some(size)) => SharedRegion::map_sized(fd, size),
                    (Some(fd), None) => SharedRegion::map(fd),
                })
            })
            .expect("atoll: mapping the buffer cache")
    }

    /// The control block, mapped at its first use (as [`Client::cache`]).
    pub fn control(&self) -> &Control {
        self.control_map
            .get_or_make(|| {
                let size = self.control_size;
                map_private_fd(&self.control_fd, |fd| match (fd, size) {
                    (None, _) => Err(std::io::Error::from_raw_os_error(libc::EBADF)),
                    (Some(fd), Some(size)) => Control::map_sized(fd, size),
                    (Some(fd), None) => Control::map(fd),
                })
            })
            .expect("atoll: mapping the control block")
    }

    /// The buffer cache's length, without mapping it (an atoll `mmap`
    /// maps the cache's descriptor itself, not this process's region).
    pub fn cache_len(&self) -> usize {
        if let Some(r) = self.cache_map.get() {
            return r.len();
        }
        let fd = self.cache_fd.load(Ordering::Relaxed);
        let size = self
            .cache_size
            .or_else(|| (fd >= 0).then(|| sys::fstat(fd).ok().map(|st| st.st_size))?);
        size.map_or(0, |s| usize::try_from(s).unwrap_or(0))
    }

    /// The file servers' names, resolved at the first request (`names`).
    pub(crate) fn fs_names(&self) -> &crate::names::FsNames {
        let made = self.fs_names.get_or_make(|| {
            let control = self.control();
            Ok::<_, core::convert::Infallible>(crate::names::FsNames::resolve(
                &self.info,
                control.servers(),
                control,
            ))
        });
        match made {
            Ok(names) => names,
            Err(never) => match never {},
        }
    }

    pub fn session(&self) -> &Session {
        // SAFETY: the pointer is set at construction and only ever replaced
        // by another leaked Box (fork child); sessions are never freed.
        unsafe { &*self.session.load(Ordering::Acquire) }
    }

    /// Does file data take the direct path (Hare §3.3: the client copies
    /// between the program and the buffer-cache blocks a server names)?
    /// Not in a copy island, whose processes do not map the cache: there
    /// the bytes travel in `ReadData`/`WriteData` and the server copies
    /// (Cosh §5 *copy*); nor under `--without direct-cache`. Hot path.
    pub fn direct_data(&self) -> bool {
        !self.info.without.direct_cache && self.info.island.maps_cache()
    }

    /// Does this process map the buffer cache (every island but `copy`)?
    pub fn maps_cache(&self) -> bool {
        self.info.island.maps_cache()
    }

    /// The directory-lookup cache, unless `--without dir-cache`.
    pub fn dcache(&self) -> Option<&DirCache> {
        (!self.info.without.dir_cache).then(|| &self.session().dcache)
    }

    /// The directory-lookup cache, for keeping and using absent names
    /// (`ENOENT` answers), unless `--without dir-cache` or `--without
    /// negative-lookups`. The servers record absent names under the same
    /// switches, so a kept absence always has a server watching it.
    pub fn absent_cache(&self) -> Option<&DirCache> {
        (!self.info.without.negative_lookups)
            .then(|| self.dcache())
            .flatten()
    }

    pub fn session_id(&self) -> SessionId {
        self.session().id
    }

    /// The credentials requests carry: the calling thread's (`creds`).
    pub fn cred(&self) -> Cred {
        crate::creds::current().fs
    }

    /// The atoll cwd, if the cwd is inside atoll.
    pub fn cwd(&self) -> Option<&Cwd> {
        let p = self.cwd.load(Ordering::Acquire);
        // SAFETY: cwd boxes are leaked, never freed (see `set_cwd`), so a
        // reference stays valid even after a concurrent chdir.
        (!p.is_null()).then(|| unsafe { &*p })
    }

    /// Replace the atoll cwd (`None`: the cwd is on the host). Old values
    /// are leaked on purpose: a concurrent walk may still read them, and a
    /// few hundred bytes per `chdir` is cheaper than reclamation here.
    // TODO(atoll): recycle cwd boxes with an epoch once chdir-heavy
    // workloads show up.
    ///
    /// The path is published for other processes of the instance, which
    /// read it for `/proc/PID/cwd` (`fdpub`, `proclink`).
    pub fn set_cwd(&self, cwd: Option<Cwd>) {
        let entering = cwd.is_some() && self.cwd().is_none();
        crate::fdpub::publish_cwd(cwd.as_ref().map(|w| (w.path.as_slice(), w.ino)));
        let p = cwd.map_or(core::ptr::null_mut(), |c| Box::into_raw(Box::new(c)));
        let old = self.cwd.swap(p, Ordering::AcqRel);
        if !old.is_null() {
            // The old directory's reference goes (a posted `Close`); the
            // box stays, for readers of its path.
            // SAFETY: cwd boxes are leaked, never freed.
            drop(unsafe { &*old }.hold.take());
        }
        if entering {
            self.void_kernel_cwd();
        }
    }

    /// The instance's runtime directory (where its boot socket is).
    pub fn runtime_dir(&self) -> &str {
        self.socket_path
            .rsplit_once('/')
            .map_or("/tmp", |(dir, _)| dir)
    }

    /// While the cwd is atoll's, the kernel's cwd is never used by atoll —
    /// but a program atoll cannot see (statically linked, or a raw call
    /// before the library started) would resolve relative paths there. So
    /// the kernel's cwd moves to an empty directory that is then removed:
    /// Linux refuses to create anything in a removed directory (`ENOENT`),
    /// even for root, so such a program fails instead of writing host files
    /// in the program's name. Raw calls only (this runs inside `chdir`).
    /// Its name (`proclink::VOID_PREFIX`) tells other processes of the
    /// instance that the cwd is atoll's.
    fn void_kernel_cwd(&self) {
        // A program started with its cwd in the mount has its parent's
        // removed directory as its kernel cwd already (fork and exec keep
        // it): nothing can be created there either, and it names this
        // instance for `/proc/PID/cwd` readers (`proclink`). Keeping it
        // saves a process start the `mkdir`, the dearest of these calls
        // on the host file system.
        if crate::proclink::kernel_link(b"/proc/self/cwd")
            .is_some_and(|k| crate::proclink::is_instance_void(self, &k))
        {
            return;
        }
        // SAFETY: no arguments.
        let tid = unsafe { sys::sc(libc::SYS_gettid, 0, 0, 0, 0) };
        let stamp = sys::monotonic_ns();
        for base in [self.runtime_dir(), "/tmp"] {
            let mut path =
                format!("{base}/{}{tid}-{stamp}", crate::proclink::VOID_PREFIX).into_bytes();
            path.push(0);
            let at = path.as_ptr() as u64;
            // SAFETY: NUL-terminated local path.
            if unsafe { sys::sc(libc::SYS_mkdir, at, 0o500, 0, 0) } != 0 {
                continue;
            }
            // SAFETY: as above.
            unsafe {
                sys::sc(libc::SYS_chdir, at, 0, 0, 0);
                sys::sc(libc::SYS_rmdir, at, 0, 0, 0);
            }
            return;
        }
    }

    /// The placeholder template: every atoll fd is a dup of it. Made at
    /// the first atoll descriptor, not as the image starts: most images
    /// (a shell's `/bin/true`, `cat` of a host file) never hold one, and a
    /// memfd per image was a `memfd_create`, a move to a high number and
    /// the memfd's teardown at exit. Made under the descriptor table's
    /// lock, which a `fork` holds across the clone (`forkgate`), so a child
    /// never inherits a template it does not know of; then published with
    /// atoll's other own descriptors (`fdpub`).
    pub fn template(&self) -> Result<i32> {
        let fd = self.template_fd.load(Ordering::Acquire);
        if fd >= 0 {
            return Ok(fd);
        }
        {
            let _held = crate::fdpub::fork_lock().lock();
            if self.template_fd.load(Ordering::Acquire) < 0 {
                let made =
                    rustix::fs::memfd_create("atoll-placeholder", rustix::fs::MemfdFlags::CLOEXEC)?;
                self.template_fd
                    .store(to_high(made.into_raw_fd(), 0), Ordering::Release);
            }
        }
        crate::fdpub::publish_private_fds();
        Ok(self.template_fd.load(Ordering::Acquire))
    }

    /// Is `fd` one of atoll's private descriptors?
    pub fn is_private_fd(&self, fd: i32) -> bool {
        fd >= 0
            && (fd == self.socket_fd.load(Ordering::Relaxed)
                || fd == self.template_fd.load(Ordering::Relaxed)
                || fd == self.cache_fd.load(Ordering::Relaxed)
                || fd == self.control_fd.load(Ordering::Relaxed)
                || fd == crate::fdpub::fd())
    }

    /// atoll's own descriptors now (the session socket, the placeholder
    /// template, the buffer cache, the control block, the published
    /// descriptor table). -1 for one that is not open.
    pub fn private_fds(&self) -> [i32; 5] {
        [
            self.socket_fd.load(Ordering::Relaxed),
            self.template_fd.load(Ordering::Relaxed),
            self.cache_fd.load(Ordering::Relaxed),
            self.control_fd.load(Ordering::Relaxed),
            crate::fdpub::fd(),
        ]
    }

    /// Move a private descriptor away from `fd` (the program wants that
    /// number, e.g. `dup2(x, fd)`).
    pub fn relocate_private(&self, fd: i32) {
        for slot in [
            &self.socket_fd,
            &self.template_fd,
            &self.cache_fd,
            &self.control_fd,
        ] {
            if slot.load(Ordering::Relaxed) == fd {
                slot.store(away_from(fd), Ordering::Relaxed);
            }
        }
        crate::fdpub::relocate(fd);
    }

    /// Take a free lane for one call (lock-free), creating one with
    /// `NewLane` when all are busy.
    pub fn lane(&self) -> Result<LaneGuard> {
        let s = self.session();
        loop {
            for slot in &s.lanes {
                let p = slot.load(Ordering::Acquire);
                if p.is_null() {
                    break;
                }
                // SAFETY: lanes are leaked boxes, never freed.
                let lane: &'static Lane = unsafe { &*p };
                if lane
                    .busy
                    .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    lane.drain(self);
                    // A swap a home server's policy asked for (`adapt`).
                    crate::adapt::run_pending(self, lane);
                    return Ok(LaneGuard { lane });
                }
            }
            if let Some(g) = self.new_lane(s)? {
                return Ok(g);
            }
            // Every lane slot is taken: wait for one to come back.
            // SAFETY: sched_yield takes no arguments.
            unsafe { sys::sc(libc::SYS_sched_yield, 0, 0, 0, 0) };
        }
    }

    fn new_lane(&self, s: &Session) -> Result<Option<LaneGuard>> {
        let _g = self.boot_lock.lock();
        let Some(slot) = s.lanes.iter().find(|l| l.load(Ordering::Acquire).is_null()) else {
            return Ok(None);
        };
        let sock = self.socket_fd.load(Ordering::Relaxed);
        // SAFETY: the session socket stays open while the client lives.
        let sock = unsafe { BorrowedFd::borrow_raw(sock) };
        if self.pid_untold.swap(false, Ordering::Relaxed) {
            let pid = std::process::id();
            boot_post(sock, &BootRequest::ChildPid { pid });
        }
        let (reply, fds) = boot_call(sock, &BootRequest::NewLane)?;
        let BootReply::Lane { lane } = reply else {
            return Err(Error::Boot(format!("NewLane answered {reply:?}")));
        };
        let l = Lane::new(lane, fds, self.control().servers())?;
        l.busy.store(true, Ordering::Relaxed);
        let p = Box::into_raw(Box::new(l));
        slot.store(p, Ordering::Release);
        // SAFETY: just leaked, never freed.
        Ok(Some(LaneGuard {
            lane: unsafe { &*p },
        }))
    }

    /// The file servers that are members now: servers `0..members` (the
    /// boot count, and more as servers join the running instance, Hare
    /// §6.1.1). One acquire load of a word written only as members join.
    /// New inodes and directories may go to any of them; a distributed
    /// directory's names go by the width it records (`adapt::width`).
    #[inline]
    pub fn members(&self) -> usize {
        self.control().members()
    }

    /// A channel of lane `lane` to member `server` (`BootRequest::Channel`).
    fn channel_to(&self, lane: u32, server: usize) -> Result<ClientChannel> {
        let _g = self.boot_lock.lock();
        let sock = self.socket_fd.load(Ordering::Relaxed);
        // SAFETY: the session socket stays open while the client lives.
        let sock = unsafe { BorrowedFd::borrow_raw(sock) };
        let req = BootRequest::Channel {
            lane,
            server: server as u32,
        };
        let (reply, fds) = boot_call(sock, &req)?;
        match (reply, fds.as_slice()) {
            (BootReply::Lane { lane: l }, [fd]) if l == lane => Ok(ClientChannel::map(fd.as_fd())?),
            (r, _) => Err(Error::Boot(format!("Channel answered {r:?}"))),
        }
    }

    /// Does this process hold a lane (is its first lane made)? A new image
    /// or a forked child holds none until its first call.
    pub fn holds_lane(&self) -> bool {
        !self.session().lanes[0].load(Ordering::Acquire).is_null()
    }

    /// Report client counters on the session socket, for server 0 through
    /// the boot thread (`BootRequest::Counters`): at exit, by a process
    /// that holds no lane, instead of asking one for them.
    pub fn post_counters(&self, k: atoll_proto::ClientCounters) {
        let _g = self.boot_lock.lock();
        let sock = self.socket_fd.load(Ordering::Relaxed);
        // SAFETY: the session socket stays open while the client lives.
        let sock = unsafe { BorrowedFd::borrow_raw(sock) };
        boot_post(sock, &BootRequest::Counters(k));
    }

    /// Create a child session for `fork` (the caller then shares every
    /// description with it). Returns `(child id, child socket)`; the
    /// child has no lane until it needs one.
    /// `caught`: a `BootRequest::Caught` (and its memfd) for the session
    /// an exec makes, posted just ahead (`exec/caught.rs`).
    pub fn fork_session(
        &self,
        caught: Option<(BootRequest, BorrowedFd<'_>)>,
    ) -> Result<(SessionId, OwnedFd)> {
        let _g = self.boot_lock.lock();
        let sock = self.socket_fd.load(Ordering::Relaxed);
        // SAFETY: the session socket stays open while the client lives.
        let sock = unsafe { BorrowedFd::borrow_raw(sock) };
        if let Some((req, fd)) = caught {
            boot_post_with(sock, &req, &[fd]);
        }
        let (reply, fds) = boot_call(sock, &BootRequest::Fork)?;
        let BootReply::Forked { child } = reply else {
            return Err(Error::Boot(format!("Fork answered {reply:?}")));
        };
        let socket = fds
            .into_iter()
            .next()
            .ok_or_else(|| Error::Boot("Fork without socket".into()))?;
        Ok((child, socket))
    }

    /// Ask the boot thread to end the sessions of `pid`, a child a signal
    /// killed and `wait` reaped (`BootRequest::Reaped`); the sessions the
    /// servers were told ended.
    pub fn reaped_sessions(&self, pid: u32, session: Option<SessionId>) -> Result<Vec<SessionId>> {
        let _g = self.boot_lock.lock();
        let sock = self.socket_fd.load(Ordering::Relaxed);
        // SAFETY: the session socket stays open while the client lives.
        let sock = unsafe { BorrowedFd::borrow_raw(sock) };
        match boot_call(sock, &BootRequest::Reaped { pid, session })?.0 {
            BootReply::Sessions(s) => Ok(s),
            other => Err(Error::Boot(format!("Reaped answered {other:?}"))),
        }
    }

    /// Has this image's session no lane (a forked child that has not
    /// asked a server anything yet)?
    pub fn has_no_lane(&self) -> bool {
        self.session().lanes[0].load(Ordering::Acquire).is_null()
    }

    /// The session socket (atoll's, `FD_CLOEXEC`), for an exec to leave
    /// open to the new image (`exec::inherit`).
    pub fn socket_raw(&self) -> RawFd {
        self.socket_fd.load(Ordering::Relaxed)
    }

    /// In a forked child: switch to the child session, which has no lane
    /// until the child's first call asks for one. The parent's lanes are
    /// dropped from this process (their memory stays mapped in the
    /// parent).
    pub fn adopt_child_session(&self, child: ChildSession, socket: RawFd) -> Result<()> {
        let old_sock = self.socket_fd.swap(socket, Ordering::Relaxed);
        sys::close(old_sock);
        let s = child.into_raw();
        // The parent's Session (and its lanes) is leaked in the child: it is
        // small, and another thread's stale reference could not exist after
        // fork anyway.
        self.session.store(s, Ordering::Release);
        // The child names its process when it first asks for a lane
        // (`new_lane`); a child that only execs names it in its new image's
        // `Reattached`, and one that asks nothing needs no name: a post
        // less per fork, and a wake-up less of the boot thread.
        self.pid_untold.store(true, Ordering::Relaxed);
        Ok(())
    }
}

/// Map one of atoll's private descriptors (`slot` holds its number; -1:
/// none) with `map`. A program's `dup2` onto that number moves the
/// descriptor first (`relocate_private`) and only then lets the kernel
/// put the program's file there, so a mapping made while the number
/// moved may be of the program's file: the number is read again after
/// mapping, and a mapping made through a number that moved is dropped
/// and made again.
fn map_private_fd<T>(
    slot: &AtomicI32,
    map: impl Fn(Option<BorrowedFd<'_>>) -> std::io::Result<T>,
) -> std::io::Result<T> {
    loop {
        let fd = slot.load(Ordering::Acquire);
        // SAFETY: a private descriptor stays open at its number until a
        // relocation, which the check below catches.
        let made = map((fd >= 0).then(|| unsafe { BorrowedFd::borrow_raw(fd) }));
        if slot.load(Ordering::Acquire) == fd {
            return made;
        }
    }
}

/// Global client, set once by `init`.
static CLIENT: AtomicPtr<Client> = AtomicPtr::new(core::ptr::null_mut());

pub fn client() -> Option<&'static Client> {
    let p = CLIENT.load(Ordering::Acquire);
    // SAFETY: set once to a leaked Box by `install`, never freed.
    (!p.is_null()).then(|| unsafe { &*p })
}

fn install(c: Client) -> &'static Client {
    let p = Box::into_raw(Box::new(c));
    CLIENT.store(p, Ordering::Release);
    atoll_msg::liveness::set_peer_check(instance_gone);
    // SAFETY: just leaked.
    unsafe { &*p }
}

/// Is the instance gone? The boot connection is this session (see the
/// module docs): the kernel hangs it up when the instance process dies, so
/// a process that outlived its instance fails its atoll calls with `EIO`
/// instead of waiting for servers that no longer exist. Never blocks.
fn instance_gone() -> bool {
    let Some(c) = client() else {
        return false;
    };
    let mut p = libc::pollfd {
        fd: c.socket_fd.load(Ordering::Relaxed),
        events: libc::POLLRDHUP,
        revents: 0,
    };
    // SAFETY: one pollfd on our stack, timeout 0.
    let r = unsafe { sys::sc(libc::SYS_poll, &mut p as *mut libc::pollfd as u64, 1, 0, 0) };
    r == 1 && p.revents & (libc::POLLHUP | libc::POLLRDHUP | libc::POLLERR) != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_childs_session_is_made_once_and_given_again_fresh() {
        // The only test of this process that forks nothing but makes
        // child sessions: `SPARE` is its own.
        let first = ChildSession::new(SessionId(7));
        let p = first.0.as_deref().map(|s| s as *const Session);
        drop(first);
        let again = ChildSession::new(SessionId(9));
        let s = again.0.as_deref().expect("a session");
        assert_eq!(Some(s as *const Session), p, "the spare is reused");
        assert_eq!(s.id, SessionId(9));
        assert!(s.lanes.iter().all(|l| l.load(Ordering::Relaxed).is_null()));
        // Adopted (`into_raw`), it is no longer the parent's spare.
        let raw = again.into_raw();
        assert!(!raw.is_null());
        assert!(SPARE.load(Ordering::Relaxed).is_null());
        // SAFETY: leaked by `into_raw` just above, ours alone.
        drop(unsafe { Box::from_raw(raw) });
    }
}
