//! Path resolution, one component at a time (Hare §3.7.1: the client
//! resolves names with RESOLVE messages to the server holding each entry).
//!
//! A [`Walker`] starts at the mount root (absolute paths under the mount),
//! at the atoll cwd (relative paths while the cwd is inside atoll) or at an
//! atoll directory fd (`*at` calls). It follows symlinks (`ELOOP` after 40),
//! handles `.` and `..` (`..` at the mount root leaves atoll: the rest of
//! the path becomes a host path handed to Linux), symlinks to absolute host
//! paths (continue on the host), `ENAMETOOLONG` and trailing slashes.
//!
//! The final component is left to the caller ([`Walker::advance`]) so that
//! one message can both find and act on it (`Open`, `MakeNode`, `Unlink`:
//! Hare §3.7.4 coalescing), or resolved here ([`Walker::node`]).
//!
//! Lookups go through the directory-lookup cache (`dcache`, Hare §3.7.2)
//! unless `--without dir-cache`. `canon` tracks the canonical path of the current directory
//! (what `getcwd` reports after a `chdir` there).

use atoll_proto::{FileType, InodeId, Reply, Request, ROOT};

use crate::dcache::Hit;
use crate::error::{err, Error, Result};
use crate::fdtable;
use crate::path::{is_dot, is_dotdot, mount_rest, next_component, Canon, Comp, PathBuf, MAX_PATH};
use crate::session::{Client, Lane};

/// Linux's limit on symlinks followed in one resolution.
pub const MAX_LINKS: u32 = 40;

/// One name of at most `NAME_MAX` bytes, copied out of the path.
#[derive(Clone)]
pub struct Name {
    buf: [u8; 256],
    len: usize,
}

impl Name {
    pub fn new(b: &[u8]) -> Result<Name> {
        if b.len() > atoll_proto::MAX_NAME {
            return err(libc::ENAMETOOLONG);
        }
        let mut n = Name {
            buf: [0; 256],
            len: b.len(),
        };
        n.buf[..b.len()].copy_from_slice(b);
        Ok(n)
    }
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LastKind {
    /// A real name: the caller acts on `(walker.dir, name)`.
    Name,
    /// `.`: the directory itself.
    Dot,
    /// `..` (not at the mount root: that case leaves atoll).
    DotDot,
    /// No final component: the path named the start directory (`/atoll/`).
    Root,
}

pub struct Last {
    pub kind: LastKind,
    pub name: Name,
    pub trailing_slash: bool,
}

/// A host path the walk ended on (boxed: rare, and keeps every enum that
/// carries it small on the stack of a signal handler).
pub type HostPath = Box<PathBuf>;

pub enum Step {
    /// The path leaves atoll: hand this host path to Linux.
    Host(HostPath),
    Last(Last),
}

pub enum NodeStep {
    Host(HostPath),
    Node {
        ino: InodeId,
        ftype: FileType,
        /// The entry the walk ended on (none for `/`, `.`, `..`).
        entry: Option<Entry>,
    },
}

/// An entry a walk ended on: its directory and name, kept inline (a walk
/// may run in a signal handler that interrupted `malloc`). Changes made
/// through it are reported to that directory's watchers (`inotify`) by the
/// inode's owner, which may not hold the entry itself.
#[derive(Clone, Copy)]
pub struct Entry {
    pub dir: InodeId,
    len: u8,
    name: [u8; 255],
}

impl Entry {
    /// `None` for a name longer than `NAME_MAX` (which no entry has).
    pub fn new(dir: InodeId, name: &[u8]) -> Option<Entry> {
        let mut e = Entry {
            dir,
            len: u8::try_from(name.len()).ok()?,
            name: [0; 255],
        };
        e.name[..name.len()].copy_from_slice(name);
        Some(e)
    }

    pub fn name(&self) -> &[u8] {
        &self.name[..self.len as usize]
    }

    /// The entry as requests name it.
    pub fn proto(&self) -> atoll_proto::EntryName<'_> {
        atoll_proto::EntryName {
            dir: self.dir,
            name: self.name(),
        }
    }
}

pub struct Walker<'a> {
    pub c: &'a Client,
    pub lane: &'a Lane,
    /// Directory the walk is in.
    pub dir: InodeId,
    /// Canonical absolute path of `dir`.
    pub canon: Canon,
    rem: PathBuf,
    pos: usize,
    links: u32,
    /// `openat2`'s `RESOLVE_*` restrictions (0 for every other call).
    resolve: u64,
    /// The directory the walk started in (`RESOLVE_BENEATH`/`IN_ROOT`),
    /// and the length of its canonical path.
    start_dir: InodeId,
    start_canon: usize,
}

/// `openat2` resolution flags (`linux/openat2.h`).
pub const RESOLVE_NO_XDEV: u64 = 0x01;
pub const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
pub const RESOLVE_NO_SYMLINKS: u64 = 0x04;
pub const RESOLVE_BENEATH: u64 = 0x08;
pub const RESOLVE_IN_ROOT: u64 = 0x10;
pub const RESOLVE_CACHED: u64 = 0x20;
/// Every flag Linux knows (others are `EINVAL`).
pub const RESOLVE_ALL: u64 = 0x3f;

/// Does this path (from `dirfd`) concern atoll at all? Cheap and
/// allocation-free: used by `may_concern`.
pub fn concerns(c: &Client, dirfd: i64, path: &[u8]) -> bool {
    if path.first() == Some(&b'/') {
        return mount_rest(path, &c.mount).is_some() || entering_mount(c, dirfd, path).is_some();
    }
    let atoll_base = if dirfd == libc::AT_FDCWD as i64 {
        c.cwd().is_some()
    } else {
        fdtable::is_atoll(dirfd)
    };
    atoll_base || entering_mount(c, dirfd, path).is_some()
}

/// The atoll path that `path`, resolved by Linux from host directory
/// `dirfd`, reaches by entering the mount through the mount's parent:
/// `openat(fd of "/", "atoll/x")`, `cd / && ls atoll`, `../../atoll/x`
/// from a host cwd, `/tmp/../atoll`. Linux would resolve the components
/// before the mount's name physically (symlinks, `..`), so the host is
/// asked where they lead, and only when a component has the mount's name
/// (no cost for other host paths).
fn entering_mount(c: &Client, dirfd: i64, path: &[u8]) -> Option<PathBuf> {
    let name = c.mount.rsplit(|&b| b == b'/').next()?;
    let mut pos = 0;
    while let Some(comp) = next_component(path, pos) {
        if &path[comp.start..comp.end] == name {
            if let Some(abs) = entered_through(c, dirfd, path, comp) {
                return Some(abs);
            }
        }
        pos = comp.end;
    }
    None
}

/// [`entering_mount`] at component `comp` of `path`, which has the
/// mount's name. Apart, so that the scan of every other host path (every
/// `execve` of a host program asks) keeps a small stack frame: this one
/// holds three path buffers, which the compiler probes page by page on
/// entry, a page fault each on a fresh stack.
#[inline(never)]
fn entered_through(c: &Client, dirfd: i64, path: &[u8], comp: Comp) -> Option<PathBuf> {
    if !is_mount_parent(c, dirfd, &path[..comp.start]) {
        return None;
    }
    let mut abs = PathBuf::from_bytes(&c.mount).ok()?;
    abs.push_bytes(&path[comp.end..]).ok()?;
    Some(abs)
}

/// `(st_dev, st_ino)` of host path `path` (relative to `dirfd`), if it
/// exists; follows symlinks.
fn host_dev_ino(dirfd: i64, path: &[u8]) -> Option<(u64, u64)> {
    let mut z = [0u8; crate::sys::PATH_MAX + 1];
    if path.len() >= z.len() {
        return None;
    }
    z[..path.len()].copy_from_slice(path);
    let mut st: libc::stat = crate::sys::zeroed();
    // SAFETY: NUL-terminated local path, local stat buffer.
    let r = unsafe {
        crate::sys::sc(
            libc::SYS_newfstatat,
            dirfd as u64,
            z.as_ptr() as u64,
            &mut st as *mut libc::stat as u64,
            0,
        )
    };
    (r == 0).then_some((st.st_dev, st.st_ino))
}

/// Is host directory `(st_dev, st_ino)` the one the mount appears in?
pub(crate) fn is_mount_parent_dir(c: &Client, id: (u64, u64)) -> bool {
    let mut parent = PathBuf::new();
    parent.push_bytes(&c.mount_parent).is_ok()
        && host_dev_ino(libc::AT_FDCWD as i64, parent.as_bytes()) == Some(id)
}

/// Does host path `prefix` (relative to `dirfd`; empty: `dirfd` itself)
/// name the directory the mount appears in?
fn is_mount_parent(c: &Client, dirfd: i64, prefix: &[u8]) -> bool {
    let mut buf = PathBuf::new();
    if buf.push_bytes(prefix).is_err() || buf.push_bytes(b".").is_err() {
        return false;
    }
    let mut parent = PathBuf::new();
    if parent.push_bytes(&c.mount_parent).is_err() {
        return false;
    }
    let here = host_dev_ino(dirfd, buf.as_bytes());
    here.is_some() && here == host_dev_ino(libc::AT_FDCWD as i64, parent.as_bytes())
}

impl<'a> Walker<'a> {
    /// Start resolving `path` relative to `dirfd` (`AT_FDCWD` or an fd).
    /// `Ok(None)`: the path is not atoll's (Linux handles it unchanged).
    /// The walker is boxed: its two path buffers are large, and moving them
    /// around by value would cost the stack of a signal handler dearly.
    // TODO(atoll): per-lane scratch walkers to avoid this allocation.
    pub fn start(
        c: &'a Client,
        lane: &'a Lane,
        dirfd: i64,
        path: &[u8],
    ) -> Result<Option<Box<Self>>> {
        Self::start_restricted(c, lane, dirfd, path, 0)
    }

    /// [`start`](Self::start) under `openat2`'s `RESOLVE_*` flags, as
    /// Linux's `path_init`/`nd_jump_root`/`follow_dotdot` apply them:
    /// `BENEATH` refuses (`EXDEV`) an absolute path, an absolute symlink
    /// and `..` above the start; `IN_ROOT` treats the start as `/` for all
    /// three; `NO_SYMLINKS` refuses every symlink (`ELOOP`); `NO_XDEV`
    /// refuses crossing into or out of the mount (`EXDEV`).
    pub fn start_restricted(
        c: &'a Client,
        lane: &'a Lane,
        dirfd: i64,
        path: &[u8],
        resolve: u64,
    ) -> Result<Option<Box<Self>>> {
        let mut path = path;
        if resolve & (RESOLVE_BENEATH | RESOLVE_IN_ROOT | RESOLVE_NO_XDEV) != 0
            && path.first() == Some(&b'/')
        {
            if resolve & RESOLVE_IN_ROOT != 0 {
                while path.first() == Some(&b'/') {
                    path = &path[1..];
                }
                if path.is_empty() {
                    path = b".";
                }
            } else if concerns(c, dirfd, path) || concerns(c, dirfd, b".") {
                return err(libc::EXDEV);
            }
        }
        let Some(mut w) = Self::start_unrestricted(c, lane, dirfd, path)? else {
            return Ok(None);
        };
        w.resolve = resolve;
        w.start_dir = w.dir;
        w.start_canon = w.canon.len();
        Ok(Some(w))
    }

    fn start_unrestricted(
        c: &'a Client,
        lane: &'a Lane,
        dirfd: i64,
        path: &[u8],
    ) -> Result<Option<Box<Self>>> {
        if path.is_empty() {
            return err(libc::ENOENT);
        }
        if path.len() > MAX_PATH {
            return err(libc::ENAMETOOLONG);
        }
        let mut w = Box::new(Walker {
            c,
            lane,
            dir: ROOT,
            canon: Canon::new(),
            rem: PathBuf::new(),
            pos: 0,
            links: 0,
            resolve: 0,
            start_dir: ROOT,
            start_canon: 0,
        });
        let host_base = if path[0] == b'/' {
            mount_rest(path, &c.mount).is_none()
        } else if dirfd == libc::AT_FDCWD as i64 {
            c.cwd().is_none()
        } else {
            !fdtable::is_atoll(dirfd)
        };
        if host_base {
            let Some(abs) = entering_mount(c, dirfd, path) else {
                return Ok(None);
            };
            w.canon.push_bytes(&c.mount)?;
            w.rem.push_bytes(&abs.as_bytes()[c.mount.len()..])?;
            return Ok(Some(w));
        }
        if path[0] == b'/' {
            let Some(rest) = mount_rest(path, &c.mount) else {
                return Ok(None);
            };
            w.canon.push_bytes(&c.mount)?;
            w.rem.push_bytes(rest)?;
            return Ok(Some(w));
        }
        if dirfd == libc::AT_FDCWD as i64 {
            let Some(cwd) = c.cwd() else {
                return Ok(None);
            };
            w.dir = cwd.ino;
            w.canon.push_bytes(&cwd.path)?;
        } else {
            let Some(d) = fdtable::get(dirfd) else {
                return Ok(None);
            };
            if d.ftype() != FileType::Directory {
                return err(libc::ENOTDIR);
            }
            w.dir = d.ino();
            match d.path() {
                Some(p) => w.canon.push_bytes(p)?,
                None => w.canon.push_bytes(&c.mount)?,
            }
        }
        w.rem.push_bytes(path)?;
        Ok(Some(w))
    }

    fn floor(&self) -> usize {
        self.c.mount.len()
    }

    /// `Lookup` of one component in `dir` (Hare RESOLVE), answered from
    /// the directory-lookup cache when it holds the name (Hare §3.7.1; see
    /// `dcache` for why a hit is never stale).
    pub fn lookup(&self, dir: InodeId, name: &[u8]) -> Result<(InodeId, FileType)> {
        let special = is_dotdot(name) || is_dot(name);
        let dc = if special { None } else { self.c.dcache() };
        let absent = if special { None } else { self.c.absent_cache() };
        let mut gen = 0;
        if let Some(dc) = dc {
            let s = self.c.session();
            match dc.get(s.channels(), dir, name) {
                Some(Hit::Entry(ino, ftype)) => return Ok((ino, ftype)),
                // Kept only while negative lookups are on (`insert_absent`).
                Some(Hit::Absent) => return err(libc::ENOENT),
                None => {}
            }
            gen = dc.generation();
        }
        let server = if is_dotdot(name) {
            dir.home()
        } else {
            crate::adapt::entry_server(self.c, dir, name)
        };
        crate::dirperm::check_search(self.c, self.lane, dir, server)?;
        let r = self
            .lane
            .call(self.c, server, Request::Lookup { dir, name }, |r| match r {
                Reply::Entry { ino, ftype } => Ok((ino, ftype)),
                _ => Err(Error::Protocol("Lookup")),
            });
        match (&r, dc, absent) {
            (Ok((ino, ftype)), Some(dc), _) => dc.insert(gen, dir, name, *ino, *ftype),
            (Err(Error::Errno(libc::ENOENT)), _, Some(dc)) => dc.insert_absent(gen, dir, name),
            _ => return r,
        }
        crate::counters::maybe_report(self.c, self.lane);
        r
    }

    /// Is the walk at its start directory under `BENEATH`/`IN_ROOT`, where
    /// `..` may not climb?
    fn confined_at_start(&self) -> bool {
        self.resolve & (RESOLVE_BENEATH | RESOLVE_IN_ROOT) != 0 && self.dir == self.start_dir
    }

    fn dotdot(&mut self) -> Result<()> {
        if self.confined_at_start() {
            if self.resolve & RESOLVE_IN_ROOT != 0 {
                return Ok(()); // `..` of the root is the root
            }
            return err(libc::EXDEV);
        }
        let (ino, _) = self.lookup(self.dir, b"..")?;
        self.dir = ino;
        let f = self.floor();
        self.canon.pop_component(f);
        Ok(())
    }

    /// The host path for "leave atoll through `..` at the mount root,
    /// then continue with the rest".
    fn leave(&self, rest_from: usize) -> Result<HostPath> {
        if self.resolve & (RESOLVE_NO_XDEV | RESOLVE_BENEATH) != 0 {
            return err(libc::EXDEV);
        }
        let mut p = Box::new(PathBuf::from_bytes(&self.c.mount_parent)?);
        p.push_bytes(&self.rem.as_bytes()[rest_from..])?;
        Ok(p)
    }

    /// Where the host path a walk left the mount by (`leave`) enters the
    /// mount again (Linux walks it physically; `entering_mount`), go on
    /// walking there: true. False for a host path that stays the host's.
    fn reenter(&mut self, host: &PathBuf) -> Result<bool> {
        let Some(abs) = entering_mount(self.c, libc::AT_FDCWD as i64, host.as_bytes()) else {
            return Ok(false);
        };
        let Some(rest) = mount_rest(abs.as_bytes(), &self.c.mount) else {
            return Ok(false);
        };
        self.dir = ROOT;
        self.canon.clear();
        self.canon.push_bytes(&self.c.mount)?;
        self.rem.clear();
        self.rem.push_bytes(rest)?;
        self.pos = 0;
        Ok(true)
    }

    /// Continue the walk in a symlink's target; `rest_from` is where the
    /// unresolved rest of the current path starts. `Some(host path)` when
    /// the target is an absolute host path.
    #[inline(never)]
    pub fn splice(
        &mut self,
        target: &[u8],
        rest_from: usize,
        trailing: bool,
    ) -> Result<Option<HostPath>> {
        self.links += 1;
        if self.links > MAX_LINKS || self.resolve & RESOLVE_NO_SYMLINKS != 0 {
            return err(libc::ELOOP);
        }
        if target.is_empty() {
            return err(libc::ENOENT);
        }
        let mut target = target;
        if target[0] == b'/' && self.resolve & (RESOLVE_BENEATH | RESOLVE_IN_ROOT) != 0 {
            if self.resolve & RESOLVE_BENEATH != 0 {
                return err(libc::EXDEV);
            }
            // IN_ROOT: an absolute target starts again at the root.
            while target.first() == Some(&b'/') {
                target = &target[1..];
            }
            self.dir = self.start_dir;
            self.canon.truncate(self.start_canon);
            if target.is_empty() {
                target = b".";
            }
        }
        let mut next = Box::new(PathBuf::new());
        next.push_bytes(target)?;
        next.push_bytes(&self.rem.as_bytes()[rest_from..])?;
        if trailing {
            next.push_bytes(b"/")?;
        }
        if next.len() > MAX_PATH {
            return err(libc::ENAMETOOLONG);
        }
        if target[0] == b'/' {
            match mount_rest(next.as_bytes(), &self.c.mount) {
                Some(r) => {
                    self.dir = ROOT;
                    self.canon.clear();
                    self.canon.push_bytes(&self.c.mount)?;
                    self.rem.clear();
                    self.rem.push_bytes(r)?;
                }
                None => return Ok(Some(next)),
            }
        } else {
            self.rem.clear();
            self.rem.push_bytes(next.as_bytes())?;
        }
        self.pos = 0;
        Ok(None)
    }

    #[inline(never)]
    fn readlink(&self, ino: InodeId) -> Result<HostPath> {
        self.lane.call(
            self.c,
            ino.owner(),
            Request::ReadLink { ino },
            |r| match r {
                Reply::Target(t) => {
                    let mut p = Box::new(PathBuf::new());
                    p.push_bytes(t)?;
                    Ok(p)
                }
                _ => Err(Error::Protocol("ReadLink")),
            },
        )
    }

    /// Resolve every component but the last; return the last one (or the
    /// host path when the walk leaves atoll).
    pub fn advance(&mut self) -> Result<Step> {
        loop {
            let Some(comp) = next_component(self.rem.as_bytes(), self.pos) else {
                return Ok(Step::Last(Last {
                    kind: LastKind::Root,
                    name: Name::new(b"")?,
                    trailing_slash: false,
                }));
            };
            let name = Name::new(&self.rem.as_bytes()[comp.start..comp.end])?;
            self.pos = comp.end;
            let n = name.as_bytes();
            if comp.last {
                let kind = if is_dot(n) {
                    LastKind::Dot
                } else if is_dotdot(n) {
                    if self.confined_at_start() {
                        if self.resolve & RESOLVE_IN_ROOT == 0 {
                            return err(libc::EXDEV); // BENEATH
                        }
                        LastKind::Dot
                    } else if self.dir == ROOT {
                        return Ok(Step::Host(self.leave(comp.start + 2)?));
                    } else {
                        LastKind::DotDot
                    }
                } else {
                    LastKind::Name
                };
                return Ok(Step::Last(Last {
                    kind,
                    name,
                    trailing_slash: comp.trailing_slash,
                }));
            }
            if is_dot(n) {
                continue;
            }
            if is_dotdot(n) {
                if self.dir == ROOT && !self.confined_at_start() {
                    let host = self.leave(self.pos)?;
                    // `/atoll/../atoll/d`: the rest comes back in.
                    if !self.reenter(&host)? {
                        return Ok(Step::Host(host));
                    }
                    continue;
                }
                self.dotdot()?;
                continue;
            }
            let (ino, ftype) = self.lookup(self.dir, n)?;
            match ftype {
                FileType::Directory => {
                    self.dir = ino;
                    self.canon.push_component(n)?;
                }
                FileType::Symlink => {
                    let t = self.readlink(ino)?;
                    if let Some(h) = self.splice(t.as_bytes(), self.pos, false)? {
                        return Ok(Step::Host(h));
                    }
                }
                _ => return err(libc::ENOTDIR),
            }
        }
    }

    /// Follow a final-component symlink whose target the server already
    /// sent (e.g. `Open` answered `Symlink`).
    pub fn follow_final(&mut self, target: &[u8], trailing: bool) -> Result<Option<HostPath>> {
        let end = self.rem.len();
        self.splice(target, end, trailing)
    }

    /// Resolve the whole path to a node. `follow`: follow a final symlink
    /// (a trailing slash always does). After success `canon` is the
    /// node's path when it is a directory.
    pub fn node(&mut self, follow: bool) -> Result<NodeStep> {
        loop {
            let last = match self.advance()? {
                Step::Host(p) => return Ok(NodeStep::Host(p)),
                Step::Last(l) => l,
            };
            match last.kind {
                LastKind::Root | LastKind::Dot => {
                    return Ok(NodeStep::Node {
                        ino: self.dir,
                        ftype: FileType::Directory,
                        entry: None,
                    })
                }
                LastKind::DotDot => {
                    self.dotdot()?;
                    return Ok(NodeStep::Node {
                        ino: self.dir,
                        ftype: FileType::Directory,
                        entry: None,
                    });
                }
                LastKind::Name => {
                    let n = last.name.as_bytes();
                    let (ino, ftype) = self.lookup(self.dir, n)?;
                    if ftype == FileType::Symlink && (follow || last.trailing_slash) {
                        let t = self.readlink(ino)?;
                        if let Some(h) = self.follow_final(t.as_bytes(), last.trailing_slash)? {
                            return Ok(NodeStep::Host(h));
                        }
                        continue;
                    }
                    if last.trailing_slash && ftype != FileType::Directory {
                        return err(libc::ENOTDIR);
                    }
                    let entry = Entry::new(self.dir, n);
                    if ftype == FileType::Directory {
                        self.canon.push_component(n)?;
                    }
                    return Ok(NodeStep::Node { ino, ftype, entry });
                }
            }
        }
    }

    /// Canonical path of entry `name` in the current directory.
    pub fn child_path(&self, name: &[u8]) -> Result<PathBuf> {
        let mut p = PathBuf::from_bytes(self.canon.as_bytes())?;
        p.push_component(name)?;
        Ok(p)
    }

    /// Path of the current directory relative to the mount (no leading
    /// slash), for `InstanceInfo.distribute` matching.
    pub fn rel_to_mount<'p>(&self, p: &'p PathBuf) -> &'p [u8] {
        let b = p.as_bytes();
        let f = self.floor().min(b.len());
        let r = &b[f..];
        r.strip_prefix(b"/").unwrap_or(r)
    }
}
