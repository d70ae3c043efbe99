//! The descriptor table: which descriptor numbers are atoll's, and the open
//! file descriptions they refer to. Lock-free (fixed arrays of atomics), so
//! a signal handler may use it while the thread it interrupted is in the
//! middle of an update.
//!
//! Numbers come from Linux: each atoll fd is a *placeholder* descriptor (a
//! dup of one per-process memfd), so numbering, `FD_CLOEXEC`, `fork`
//! inheritance and "lowest free number" behave exactly as Linux's own.
//!
//! Two levels, as in Linux (`fd → struct file`):
//! * `FDS[fd]`: 0, or `(desc slot + 1) | generation << 32`;
//! * `DESCS[slot]`: one open file description as this process sees it
//!   (server `DescId`, inode, open flags, type, readdir cookie, path of a
//!   directory), reference-counted by the fds that name it (`dup`).
//!
//! Life cycle of a description slot:
//! ```text
//!  FREE ──alloc──▶ LIVE(refs ≥ 1) ──last release──▶ DYING ──Close sent──▶ FREE
//! ```
//! A reader takes a temporary reference (CAS `refs` n → n+1 only while
//! n > 0) and then checks the generation, so a slot that was recycled
//! under it is never mistaken for the one it looked up. Whoever drops the
//! last reference (the closer, or such a reader) sends `Close` to the
//! server (Hare CLOSE, §3.5) and frees the slot.

use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use atoll_proto::{DescId, FileType, InodeId};

/// Highest descriptor number atoll can track (+1).
pub const MAX_FDS: usize = 1 << 16;
/// Open descriptions one process can hold at once.
pub const MAX_DESCS: usize = 1 << 14;

const FREE: u32 = 0;
const LIVE: u32 = 1;
const DYING: u32 = 2;

pub struct DescSlot {
    state: AtomicU32,
    refs: AtomicU32,
    gen: AtomicU32,
    desc: AtomicU64,
    ino: AtomicU64,
    /// Open flags: access mode and status flags (`F_GETFL`).
    flags: AtomicU32,
    ftype: AtomicU32,
    /// Readdir position (directories): the next cookie to ask for.
    pub cookie: AtomicU64,
    /// Directories: the cookie, plus one, at which a listing reached the
    /// directory's end (0: not known to be at the end); see
    /// `ns::dirs::listed_to_end`.
    listed_to: AtomicU64,
    /// Canonical path, kept for directories (fchdir, `*at` canon paths).
    path: AtomicPtr<Vec<u8>>,
    /// Hybrid file descriptors (Hare §3.5.1): while `local`, the file
    /// offset is `pos`, here, and the server's copy is stale; once the
    /// description is shared with another process it moves to the server.
    local: AtomicBool,
    pos: AtomicU64,
    /// Identity of the thread updating `pos`, 0 when free (read-modify-
    /// write of the offset is atomic among this process's threads, as
    /// Linux's `f_pos_lock`).
    pos_owner: AtomicU64,
}

impl DescSlot {
    const fn new() -> DescSlot {
        DescSlot {
            state: AtomicU32::new(FREE),
            refs: AtomicU32::new(0),
            gen: AtomicU32::new(0),
            desc: AtomicU64::new(0),
            ino: AtomicU64::new(0),
            flags: AtomicU32::new(0),
            ftype: AtomicU32::new(0),
            cookie: AtomicU64::new(0),
            listed_to: AtomicU64::new(0),
            path: AtomicPtr::new(core::ptr::null_mut()),
            local: AtomicBool::new(false),
            pos: AtomicU64::new(0),
            pos_owner: AtomicU64::new(0),
        }
    }
}

#[allow(clippy::declare_interior_mutable_const)]
const SLOT0: DescSlot = DescSlot::new();
#[allow(clippy::declare_interior_mutable_const)]
const FD0: AtomicU64 = AtomicU64::new(0);

// The two tables (1.6 MiB of zeros) go in a section of their own, which
// libatoll's link puts after all the other zero-initialised statics
// (`atoll-preload/build.rs`): left among them, they spread the few small
// ones every process touches as it starts over as many pages, each a
// zero-page fault and a page to free at exit. Only an all-zero initial
// value may go there (it is never stored in the file).
#[cfg_attr(target_os = "linux", link_section = ".bss.atoll_tables")]
static DESCS: [DescSlot; MAX_DESCS] = [SLOT0; MAX_DESCS];
#[cfg_attr(target_os = "linux", link_section = ".bss.atoll_tables")]
static FDS: [AtomicU64; MAX_FDS] = [FD0; MAX_FDS];
/// Number of atoll fds (fast "is there any?" for poll/select).
static COUNT: AtomicUsize = AtomicUsize::new(0);
/// One past the highest description slot and fd number ever used: `fork`
/// and `exec` walk the tables up to these, not over all 16,384 slots and
/// 65,536 fds (slots are taken lowest first, so this stays small).
static HIGH_SLOT: AtomicUsize = AtomicUsize::new(0);
static HIGH_FD: AtomicUsize = AtomicUsize::new(0);
/// Set when this process has at least one atoll fd open ever; lets
/// `may_concern` answer without touching the table.
static ANY: AtomicBool = AtomicBool::new(false);

pub fn ftype_code(t: FileType) -> u32 {
    match t {
        FileType::Regular => 1,
        FileType::Directory => 2,
        FileType::Symlink => 3,
        FileType::Fifo => 4,
        FileType::Socket => 5,
        FileType::CharDevice => 6,
        FileType::BlockDevice => 7,
    }
}

pub fn ftype_from_code(c: u32) -> FileType {
    match c {
        2 => FileType::Directory,
        3 => FileType::Symlink,
        4 => FileType::Fifo,
        5 => FileType::Socket,
        6 => FileType::CharDevice,
        7 => FileType::BlockDevice,
        _ => FileType::Regular,
    }
}

/// What a new description holds.
#[derive(Clone, Debug)]
pub struct DescInfo {
    pub desc: DescId,
    pub ino: InodeId,
    pub flags: u32,
    pub ftype: FileType,
    pub cookie: u64,
    pub path: Option<Vec<u8>>,
}

/// A counted reference to a live description slot. Dropping the last one
/// hands the slot to [`release`]'s closer.
pub struct DescRef {
    slot: usize,
}

impl DescRef {
    fn s(&self) -> &'static DescSlot {
        &DESCS[self.slot]
    }
    pub fn desc(&self) -> DescId {
        DescId(self.s().desc.load(Ordering::Relaxed))
    }
    /// The slot's index in the table (below [`MAX_DESCS`]): a key for
    /// per-description state kept elsewhere (`lease`).
    pub fn slot_index(&self) -> usize {
        self.slot
    }
    pub fn ino(&self) -> InodeId {
        InodeId(self.s().ino.load(Ordering::Relaxed))
    }
    pub fn flags(&self) -> u32 {
        self.s().flags.load(Ordering::Relaxed)
    }
    pub fn set_flags(&self, f: u32) {
        self.s().flags.store(f, Ordering::Relaxed)
    }
    pub fn ftype(&self) -> FileType {
        ftype_from_code(self.s().ftype.load(Ordering::Relaxed))
    }
    pub fn cookie(&self) -> &AtomicU64 {
        &self.s().cookie
    }
    /// The cookie at which a listing of this directory reached its end,
    /// plus one (0: none since the description was made or last seeked).
    pub fn listed_to(&self) -> &AtomicU64 {
        &self.s().listed_to
    }
    /// Canonical path of a directory description.
    pub fn path(&self) -> Option<&[u8]> {
        let p = self.s().path.load(Ordering::Acquire);
        // SAFETY: the path box is freed only when the slot dies, i.e. after
        // every reference (including this one) was dropped.
        (!p.is_null()).then(|| unsafe { (*p).as_slice() })
    }
    /// What `/proc/PID/fd/N` shows for it: the path it was opened by, or
    /// the anonymous name of a pipe or queue (`proclink::anonymous_name`).
    pub fn link_name(&self) -> Option<std::borrow::Cow<'_, [u8]>> {
        match self.path() {
            Some(p) => Some(std::borrow::Cow::Borrowed(p)),
            None => crate::proclink::anonymous_name(self).map(std::borrow::Cow::Owned),
        }
    }
    /// Is the offset held here (hybrid fd, Hare §3.5.1)?
    pub fn is_local(&self) -> bool {
        self.s().local.load(Ordering::Acquire)
    }
    /// Take the offset (`pos`) into this process: a fresh description
    /// (offset 0), or one nobody else holds any more.
    pub fn make_local(&self, pos: u64) {
        self.s().pos.store(pos, Ordering::Relaxed);
        self.s().local.store(true, Ordering::Release);
    }
    /// The local offset; meaningful under [`DescRef::lock_pos`] while
    /// [`DescRef::is_local`].
    pub fn pos(&self) -> &AtomicU64 {
        &self.s().pos
    }
    /// The offset now lives on the server (the caller pushed it there).
    pub fn set_shared(&self) {
        self.s().local.store(false, Ordering::Release);
    }
    /// Serialize offset updates among this process's threads. A signal
    /// handler re-entering on the thread that holds it proceeds unlocked
    /// (it cannot wait for the code it interrupted).
    pub fn lock_pos(&self) -> PosGuard<'_> {
        thread_local! {
            static ME: u8 = const { 0 };
        }
        let o = &self.s().pos_owner;
        // The address of a thread-local is a cheap, non-zero thread id.
        let me = ME.with(|m| m as *const u8 as u64);
        let mut spins = 0u32;
        loop {
            match o.compare_exchange_weak(0, me, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => return PosGuard { owner: Some(o) },
                Err(cur) if cur == me => return PosGuard { owner: None },
                Err(_) => {
                    spins += 1;
                    if spins > 64 {
                        std::thread::yield_now();
                    } else {
                        core::hint::spin_loop();
                    }
                }
            }
        }
    }
    /// Another counted reference to the same description (dup, fork
    /// sharing bookkeeping).
    pub fn clone_ref(&self) -> DescRef {
        self.s().refs.fetch_add(1, Ordering::AcqRel);
        DescRef { slot: self.slot }
    }
    /// Consume the reference without releasing it (it now belongs to an
    /// fd entry).
    fn into_slot(self) -> usize {
        let s = self.slot;
        core::mem::forget(self);
        s
    }
}

/// Holds a description's offset lock (see [`DescRef::lock_pos`]).
pub struct PosGuard<'a> {
    owner: Option<&'a AtomicU64>,
}

impl Drop for PosGuard<'_> {
    fn drop(&mut self) {
        if let Some(o) = self.owner {
            o.store(0, Ordering::Release);
        }
    }
}

/// A reference to `slot`, taken only while the slot is still live (n → n+1
/// with n > 0, as `get` does).
fn ref_if_live(slot: usize) -> Option<DescRef> {
    let refs = &DESCS[slot].refs;
    let mut n = refs.load(Ordering::Acquire);
    while n > 0 {
        match refs.compare_exchange_weak(n, n + 1, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return Some(DescRef { slot }),
            Err(m) => n = m,
        }
    }
    None
}

/// Every live description whose offset is held here, as a counted
/// reference (to move the offsets to the servers before sharing).
pub fn local_descs() -> Vec<DescRef> {
    let mut v = Vec::new();
    let high = HIGH_SLOT.load(Ordering::Acquire).min(MAX_DESCS);
    for (slot, s) in DESCS[..high].iter().enumerate() {
        if s.state.load(Ordering::Acquire) != LIVE || !s.local.load(Ordering::Acquire) {
            continue;
        }
        v.extend(ref_if_live(slot));
    }
    v
}

/// A counted reference to the live description `desc`, if this process
/// has it (a descriptor passed back to a process that holds it already).
pub fn find_desc(desc: DescId) -> Option<DescRef> {
    let high = HIGH_SLOT.load(Ordering::Acquire).min(MAX_DESCS);
    for (slot, s) in DESCS[..high].iter().enumerate() {
        if s.state.load(Ordering::Acquire) != LIVE || s.desc.load(Ordering::Acquire) != desc.0 {
            continue;
        }
        // The slot may have been freed and reused between the two loads:
        // keep it only if it still names `desc`.
        if let Some(r) = ref_if_live(slot).filter(|_| s.desc.load(Ordering::Acquire) == desc.0) {
            return Some(r);
        }
    }
    None
}

/// The closer run when a description's last reference goes: sends
/// `Close` to its server. Installed by the crate root (it needs a lane).
pub type Closer = fn(DescId, InodeId, FileType);
static CLOSER: AtomicPtr<()> = AtomicPtr::new(core::ptr::null_mut());

pub fn set_closer(f: Closer) {
    CLOSER.store(f as *mut (), Ordering::Release);
}

impl Drop for DescRef {
    fn drop(&mut self) {
        release_slot(self.slot);
    }
}

fn release_slot(slot: usize) {
    let s = &DESCS[slot];
    if s.refs.fetch_sub(1, Ordering::AcqRel) != 1 {
        return;
    }
    // Last reference: the slot is ours alone now.
    s.state.store(DYING, Ordering::Relaxed);
    let desc = DescId(s.desc.load(Ordering::Relaxed));
    let ino = InodeId(s.ino.load(Ordering::Relaxed));
    let ftype = ftype_from_code(s.ftype.load(Ordering::Relaxed));
    let p = s.path.swap(core::ptr::null_mut(), Ordering::AcqRel);
    if !p.is_null() {
        // SAFETY: the path was a leaked Box set by `alloc`; no reference
        // remains (refs reached 0).
        drop(unsafe { Box::from_raw(p) });
    }
    let f = CLOSER.load(Ordering::Acquire);
    if !f.is_null() {
        // SAFETY: only `set_closer` stores here, always a `Closer`.
        let f: Closer = unsafe { core::mem::transmute::<*mut (), Closer>(f) };
        f(desc, ino, ftype);
    }
    s.state.store(FREE, Ordering::Release);
}

/// Allocate a description slot holding `info`, with one reference.
pub fn alloc(info: DescInfo) -> Option<DescRef> {
    for (slot, s) in DESCS.iter().enumerate() {
        if s.state.load(Ordering::Relaxed) != FREE {
            continue;
        }
        if s.state
            .compare_exchange(FREE, LIVE, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            continue;
        }
        HIGH_SLOT.fetch_max(slot + 1, Ordering::AcqRel);
        s.gen.fetch_add(1, Ordering::AcqRel);
        s.desc.store(info.desc.0, Ordering::Relaxed);
        s.ino.store(info.ino.0, Ordering::Relaxed);
        s.flags.store(info.flags, Ordering::Relaxed);
        s.ftype.store(ftype_code(info.ftype), Ordering::Relaxed);
        s.cookie.store(info.cookie, Ordering::Relaxed);
        s.listed_to.store(0, Ordering::Relaxed);
        let p = info
            .path
            .map_or(core::ptr::null_mut(), |p| Box::into_raw(Box::new(p)));
        s.path.store(p, Ordering::Release);
        s.local.store(false, Ordering::Relaxed);
        s.pos.store(0, Ordering::Relaxed);
        s.pos_owner.store(0, Ordering::Relaxed);
        s.refs.store(1, Ordering::Release);
        return Some(DescRef { slot });
    }
    None
}

fn entry(slot: usize) -> u64 {
    let gen = DESCS[slot].gen.load(Ordering::Acquire) as u64;
    (slot as u64 + 1) | (gen << 32)
}

/// Is `fd` an atoll descriptor? (Lock-free, allocation-free.)
pub fn is_atoll(fd: i64) -> bool {
    fd >= 0 && (fd as usize) < MAX_FDS && FDS[fd as usize].load(Ordering::Relaxed) != 0
}

pub fn any() -> bool {
    ANY.load(Ordering::Relaxed) && COUNT.load(Ordering::Relaxed) > 0
}

/// A counted reference to the description behind `fd`, if atoll's.
pub fn get(fd: i64) -> Option<DescRef> {
    if !(0..MAX_FDS as i64).contains(&fd) {
        return None;
    }
    loop {
        let e = FDS[fd as usize].load(Ordering::Acquire);
        if e == 0 {
            return None;
        }
        let slot = (e as u32 as usize) - 1;
        let gen = (e >> 32) as u32;
        let s = &DESCS[slot];
        let mut n = s.refs.load(Ordering::Relaxed);
        let ok = loop {
            if n == 0 {
                break false;
            }
            match s
                .refs
                .compare_exchange_weak(n, n + 1, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => break true,
                Err(m) => n = m,
            }
        };
        if !ok {
            // The description died under us; the fd entry is being
            // cleared or was replaced: look again.
            if FDS[fd as usize].load(Ordering::Acquire) == e {
                return None;
            }
            continue;
        }
        let r = DescRef { slot };
        if s.gen.load(Ordering::Acquire) == gen {
            return Some(r);
        }
        drop(r);
        if FDS[fd as usize].load(Ordering::Acquire) == e {
            return None;
        }
    }
}

/// Make `fd` name the description `r` (consumed: the fd holds its
/// reference). Returns the description `fd` named before, if any.
pub fn install(fd: i32, r: DescRef) -> Option<DescRef> {
    debug_assert!((fd as usize) < MAX_FDS);
    // Other processes of the instance read the path (`fdpub`).
    crate::fdpub::publish(fd, r.link_name().as_deref().map(|p| (p, r.ino())));
    let e = entry(r.slot);
    r.into_slot();
    ANY.store(true, Ordering::Relaxed);
    HIGH_FD.fetch_max(fd as usize + 1, Ordering::AcqRel);
    let old = FDS[fd as usize].swap(e, Ordering::AcqRel);
    if old == 0 {
        COUNT.fetch_add(1, Ordering::Relaxed);
        None
    } else {
        Some(DescRef {
            slot: (old as u32 as usize) - 1,
        })
    }
}

/// Forget `fd`; the returned reference (drop it to release) is the one the
/// fd held.
pub fn remove(fd: i64) -> Option<DescRef> {
    if !(0..MAX_FDS as i64).contains(&fd) {
        return None;
    }
    let old = FDS[fd as usize].swap(0, Ordering::AcqRel);
    if old == 0 {
        return None;
    }
    crate::fdpub::publish(fd as i32, None);
    COUNT.fetch_sub(1, Ordering::Relaxed);
    Some(DescRef {
        slot: (old as u32 as usize) - 1,
    })
}

/// Every atoll fd number currently in the table (exec state, fork
/// sharing, close_range).
pub fn fds() -> Vec<i32> {
    if !ANY.load(Ordering::Relaxed) {
        return Vec::new();
    }
    (0..HIGH_FD.load(Ordering::Acquire).min(MAX_FDS))
        .filter(|&i| FDS[i].load(Ordering::Relaxed) != 0)
        .map(|i| i as i32)
        .collect()
}

/// Every live description (for `Share` before fork).
/// In a forked child: the threads that held offset locks (`lock_pos`)
/// did not come along, so no offset is locked any more.
pub fn after_fork_child() {
    crate::fdpub::after_fork_child();
    let high = HIGH_SLOT.load(Ordering::Acquire).min(MAX_DESCS);
    for s in &DESCS[..high] {
        s.pos_owner.store(0, Ordering::Relaxed);
    }
}

pub fn live_descs() -> Vec<DescId> {
    let high = HIGH_SLOT.load(Ordering::Acquire).min(MAX_DESCS);
    let mut v: Vec<DescId> = DESCS[..high]
        .iter()
        .filter(|s| s.state.load(Ordering::Acquire) == LIVE && s.refs.load(Ordering::Acquire) > 0)
        .map(|s| DescId(s.desc.load(Ordering::Relaxed)))
        .collect();
    v.sort();
    v.dedup();
    v
}

/// A reference to a description held by something other than a
/// descriptor number: the working directory's (`ns::cwd`), which keeps its
/// directory alive at the server as Linux's `fs->pwd` keeps its dentry.
/// Forked children inherit it with the memory, and `fork` shares every
/// live description with the child's session, this one included.
pub struct Held {
    /// Slot + 1 of the description, 0 for none.
    slot: AtomicUsize,
}

impl Held {
    pub fn new(r: Option<DescRef>) -> Held {
        Held {
            slot: AtomicUsize::new(r.map_or(0, |r| r.into_slot() + 1)),
        }
    }

    /// Another counted reference to the held description, if any.
    pub fn get(&self) -> Option<DescRef> {
        match self.slot.load(Ordering::Acquire) {
            0 => None,
            n => ref_if_live(n - 1),
        }
    }

    /// Give up the held reference (dropping it releases the description).
    pub fn take(&self) -> Option<DescRef> {
        match self.slot.swap(0, Ordering::AcqRel) {
            0 => None,
            n => Some(DescRef { slot: n - 1 }),
        }
    }
}

impl core::fmt::Debug for Held {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Held({})", self.slot.load(Ordering::Relaxed))
    }
}
