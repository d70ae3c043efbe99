//! Shared libraries stored in the mount, for the dynamic loader of a new
//! image.
//!
//! The loader maps a program's libraries before any constructor runs, so
//! before the client library can interpose: a library it looks for in the
//! mount (`LD_LIBRARY_PATH=/atoll/build`, an `RPATH` or `RUNPATH` of
//! `$ORIGIN` or `/atoll/lib`, what CMake, libtool and every `make check`
//! of a project with shared libraries give their test programs) is a
//! path the kernel does not know, and the program would not start. A
//! `dlopen` later is no problem: the client then serves the loader's
//! `open` and `mmap` like any other.
//!
//! So the exec finds those libraries itself, in the loader's order
//! ([`resolve`]: each requester's `RPATH` chain, `LD_LIBRARY_PATH`, its
//! `RUNPATH`; `$ORIGIN` is where the requester was found), copies each
//! one found in the mount into a memfd the new image inherits (as it
//! copies a program stored in the mount), and names the copies in a
//! directory of the instance's runtime directory that holds only symbolic
//! links to `/proc/self/fd/N`. That directory is put first in the new
//! image's `LD_LIBRARY_PATH`, where the loader finds exactly the names
//! that resolve into the mount (every other name falls through to the
//! program's own search path, unchanged). The client of the new image
//! then removes the directory, closes the memfds (the loader has mapped
//! them) and gives the program back its own `LD_LIBRARY_PATH`
//! ([`at_start`]): nothing of this is left for the program to see but
//! its mappings.
//!
//! The copies are snapshots taken at the exec, as the program's own image
//! is. A library a host directory offers earlier in an `RPATH` than the
//! mount directory the exec found it in wins in the loader; hwcaps
//! subdirectories and names with a `/` are left to the loader
//! (docs/COMPATIBILITY.md).

use std::ffi::OsStr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

use atoll_proto::FileType;

use super::Program;
use crate::session::{Client, LazyLane};
use crate::sys;

/// Environment variable that tells the new image what to clean up:
/// `FDS;FLAG;DIR` (the memfds, `s`/`u` for whether the program had set
/// `LD_LIBRARY_PATH`, the directory of links).
pub const ENV_LIBS: &str = "ATOLL_LIBS";
const LD_LIBRARY_PATH: &str = "LD_LIBRARY_PATH";

/// Objects looked at per exec, at most (a large program needs about 100).
const MAX_OBJECTS: usize = 512;
/// Largest string table read from one image.
const MAX_STRTAB: u64 = 4 << 20;
/// Most program headers and dynamic entries looked at.
const MAX_PHDRS: usize = 64;
const MAX_DYNAMIC: u64 = 4096;

const PT_LOAD: u32 = 1;
const PT_DYNAMIC: u32 = 2;
const DT_NULL: u64 = 0;
const DT_NEEDED: u64 = 1;
const DT_STRTAB: u64 = 5;
const DT_STRSZ: u64 = 10;
const DT_SONAME: u64 = 14;
const DT_RPATH: u64 = 15;
const DT_RUNPATH: u64 = 29;

/// What a dynamic image asks of the loader.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Dynamic {
    pub needed: Vec<Vec<u8>>,
    pub rpath: Option<Vec<u8>>,
    pub runpath: Option<Vec<u8>>,
    /// `DT_SONAME`: a shared object's own name (the loader has one).
    pub soname: Option<Vec<u8>>,
}

impl Dynamic {
    /// The `RPATH` the loader uses: none where a `RUNPATH` is present
    /// (glibc's `get-dynamic-info.h`).
    fn effective_rpath(&self) -> Option<&[u8]> {
        match self.runpath {
            Some(_) => None,
            None => self.rpath.as_deref(),
        }
    }
}

fn u16_at(b: &[u8], i: usize) -> u16 {
    u16::from_le_bytes([b[i], b[i + 1]])
}
fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}
fn u64_at(b: &[u8], i: usize) -> u64 {
    let mut v = [0u8; 8];
    v.copy_from_slice(&b[i..i + 8]);
    u64::from_le_bytes(v)
}

/// Read `len` bytes at `off` of `fd`, whole or not at all.
fn read_exact_at(fd: i32, len: u64, off: u64) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; usize::try_from(len).ok()?];
    (sys::pread(fd, &mut buf, off) == len as i64).then_some(buf)
}

/// The dynamic section of the 64-bit little-endian ELF image in `fd`;
/// `None` for anything else, or an image with no dynamic section.
pub fn read_dynamic(fd: i32) -> Option<Dynamic> {
    let head = read_exact_at(fd, 64, 0)?;
    if &head[..4] != b"\x7fELF" || head[4] != 2 || head[5] != 1 {
        return None;
    }
    let (phoff, phsize, phnum) = (
        u64_at(&head, 32),
        u16_at(&head, 54) as u64,
        u16_at(&head, 56) as usize,
    );
    if phsize < 56 || !(1..=MAX_PHDRS).contains(&phnum) {
        return None;
    }
    let table = read_exact_at(fd, phsize * phnum as u64, phoff)?;
    let mut loads = Vec::new();
    let mut dynamic = None;
    for ph in table.chunks_exact(phsize as usize) {
        let (offset, vaddr, filesz) = (u64_at(ph, 8), u64_at(ph, 16), u64_at(ph, 32));
        match u32_at(ph, 0) {
            PT_LOAD => loads.push((vaddr, offset, filesz)),
            PT_DYNAMIC => dynamic = Some((offset, filesz.min(MAX_DYNAMIC * 16))),
            _ => {}
        }
    }
    let (off, size) = dynamic?;
    let entries = read_exact_at(fd, size - size % 16, off)?;
    let (mut strtab, mut strsz) = (None, 0u64);
    let mut needed = Vec::new();
    let (mut rpath, mut runpath, mut soname) = (None, None, None);
    for e in entries.chunks_exact(16) {
        let (tag, val) = (u64_at(e, 0), u64_at(e, 8));
        match tag {
            DT_NULL => break,
            DT_NEEDED => needed.push(val),
            DT_STRTAB => strtab = Some(val),
            DT_STRSZ => strsz = val,
            DT_RPATH => rpath = Some(val),
            DT_RUNPATH => runpath = Some(val),
            DT_SONAME => soname = Some(val),
            _ => {}
        }
    }
    // The string table's address, as a file offset through the segment
    // that maps it.
    let strtab = strtab?;
    let file_off = loads
        .iter()
        .find(|&&(vaddr, _, filesz)| strtab >= vaddr && strtab - vaddr < filesz)
        .map(|&(vaddr, offset, _)| strtab - vaddr + offset)?;
    let strings = read_exact_at(fd, strsz.min(MAX_STRTAB), file_off)?;
    let string = |at: u64| -> Option<Vec<u8>> {
        let rest = strings.get(usize::try_from(at).ok()?..)?;
        let end = rest.iter().position(|&b| b == 0)?;
        Some(rest[..end].to_vec())
    };
    Some(Dynamic {
        needed: needed.into_iter().filter_map(string).collect(),
        rpath: rpath.and_then(string),
        runpath: runpath.and_then(string),
        soname: soname.and_then(string),
    })
}

/// The entries of a search path (`LD_LIBRARY_PATH` takes `:` and `;`;
/// an empty entry is the current directory, as glibc's `fillin_rpath`).
pub fn split_path(list: &[u8], origin: &[u8]) -> Vec<Vec<u8>> {
    list.split(|&b| b == b':' || b == b';')
        .map(|dir| {
            let dir = expand_origin(dir, origin);
            if dir.is_empty() {
                b".".to_vec()
            } else {
                dir
            }
        })
        .collect()
}

/// `$ORIGIN` and `${ORIGIN}` replaced by `origin`.
fn expand_origin(dir: &[u8], origin: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(dir.len());
    let mut i = 0;
    while i < dir.len() {
        let rest = &dir[i..];
        if rest.starts_with(b"${ORIGIN}") {
            out.extend_from_slice(origin);
            i += 9;
        } else if rest.starts_with(b"$ORIGIN")
            && !rest
                .get(7)
                .is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_')
        {
            out.extend_from_slice(origin);
            i += 7;
        } else {
            out.push(dir[i]);
            i += 1;
        }
    }
    out
}

/// The directory part of an absolute path (`/` for `/x`).
pub fn dirname(path: &[u8]) -> Vec<u8> {
    match path.iter().rposition(|&b| b == b'/') {
        Some(0) => b"/".to_vec(),
        Some(i) => path[..i].to_vec(),
        None => b".".to_vec(),
    }
}

/// What the exec can find at a path.
pub enum Found {
    /// A file of the mount: its index among the copies made so far.
    Mount(usize),
    /// A host file.
    Host,
}

/// The file system as the loader of the new image will see it.
pub trait Files {
    /// The image at `path`, if there is a 64-bit ELF file there (a
    /// mount file is copied on the way), and what it asks for.
    fn open(&mut self, path: &[u8]) -> Option<(Found, Dynamic)>;
}

/// One object the loader maps: where it was found, what it asks, and the
/// object whose `DT_NEEDED` brought it in.
struct Object {
    origin: Vec<u8>,
    dynamic: Dynamic,
    loader: Option<usize>,
}

/// The libraries the loader would find in the mount for a program whose
/// image asks `main` and lives in `main_origin`, with `llp` as its
/// `LD_LIBRARY_PATH` entries: `(name, copy)` in load order, breadth
/// first as glibc's `_dl_map_object_deps`. A name the search paths do
/// not find is the system's (`ld.so.cache`, default directories), and
/// what such a library needs is not looked at.
pub fn resolve(
    main: Dynamic,
    main_origin: &[u8],
    llp: &[Vec<u8>],
    files: &mut impl Files,
) -> Vec<(Vec<u8>, usize)> {
    let mut objects = vec![Object {
        origin: main_origin.to_vec(),
        dynamic: main,
        loader: None,
    }];
    let mut seen: crate::fixedhash::Set<Vec<u8>> = Default::default();
    let mut found = Vec::new();
    let mut next = 0;
    while next < objects.len() && objects.len() < MAX_OBJECTS {
        let needed = objects[next].dynamic.needed.clone();
        for name in needed {
            if name.contains(&b'/') || !seen.insert(name.clone()) {
                continue;
            }
            for dir in search_dirs(&objects, next, llp) {
                let mut path = dir;
                if path.last() != Some(&b'/') {
                    path.push(b'/');
                }
                path.extend_from_slice(&name);
                let Some((at, dynamic)) = files.open(&path) else {
                    continue;
                };
                if let Found::Mount(copy) = at {
                    found.push((name.clone(), copy));
                }
                objects.push(Object {
                    origin: dirname(&path),
                    dynamic,
                    loader: Some(next),
                });
                break;
            }
        }
        next += 1;
    }
    found
}

/// Where the loader looks for a name `objects[who]` needs (glibc's
/// `_dl_map_object`): unless it has a `RUNPATH`, the `RPATH`s of it and
/// of the objects that loaded it up to the program, then the program's;
/// `LD_LIBRARY_PATH`; its `RUNPATH`.
fn search_dirs(objects: &[Object], who: usize, llp: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let mut dirs = Vec::new();
    let me = &objects[who];
    if me.dynamic.runpath.is_none() {
        let mut at = Some(who);
        let mut did_main = false;
        while let Some(k) = at {
            if let Some(rp) = objects[k].dynamic.effective_rpath() {
                dirs.extend(split_path(rp, &objects[k].origin));
            }
            did_main |= k == 0;
            at = objects[k].loader;
        }
        if !did_main {
            if let Some(rp) = objects[0].dynamic.effective_rpath() {
                dirs.extend(split_path(rp, &objects[0].origin));
            }
        }
    }
    dirs.extend(llp.iter().cloned());
    if let Some(rp) = &me.dynamic.runpath {
        dirs.extend(split_path(rp, &me.origin));
    }
    dirs
}

/// The program an exec runs, for its libraries.
pub(super) enum Image<'a> {
    /// Copied from the mount: its memfd and absolute path.
    Copy { fd: i32, path: &'a [u8] },
    /// A host file, relative to `dirfd` (or the cwd).
    Host { dirfd: i64, path: &'a [u8] },
}

/// The libraries `image` would look for in the mount, copied and named
/// for its loader (see the module comment); `None` when it looks for
/// none there, which costs no lookup unless a search path leads into the
/// mount.
pub(super) fn prepare(
    c: &Client,
    lane: &LazyLane,
    image: Image<'_>,
    env: &[&[u8]],
) -> Option<MountLibs> {
    let llp_value = llp_of(env);
    let in_mount = |d: &[u8]| crate::walk::concerns(c, libc::AT_FDCWD as i64, d);
    let (main, origin) = match image {
        Image::Copy { fd, path } => (read_dynamic(fd)?, dirname(path)),
        Image::Host { dirfd, path } => {
            // A host program looks into the mount only through its
            // environment (its own paths are the host's).
            let llp = split_path(llp_value?, b"");
            if !llp.iter().any(|d| in_mount(d)) {
                return None;
            }
            let fd = open_host(dirfd, path)?;
            (read_dynamic(fd.as_raw_fd())?, dirname(path))
        }
    };
    let llp = llp_value.map_or_else(Vec::new, |v| split_path(v, &origin));
    let own = [&main.rpath, &main.runpath]
        .into_iter()
        .flatten()
        .flat_map(|p| split_path(p, &origin));
    if !llp.iter().cloned().chain(own).any(|d| in_mount(&d)) {
        return None;
    }
    let mut files = ExecFiles {
        c,
        lane,
        copies: Vec::new(),
    };
    let found = resolve(main, &origin, &llp, &mut files);
    if found.is_empty() {
        return None;
    }
    let mut copies: Vec<Option<OwnedFd>> = files.copies.into_iter().map(Some).collect();
    let named = found
        .into_iter()
        .filter_map(|(name, i)| Some((name, copies.get_mut(i)?.take()?)))
        .collect();
    let runtime = std::path::Path::new(&c.socket_path).parent()?;
    MountLibs::name(runtime.as_os_str().as_bytes(), named)
}

/// Open a host file for reading.
pub(super) fn open_host(dirfd: i64, path: &[u8]) -> Option<OwnedFd> {
    let cpath = std::ffi::CString::new(path).ok()?;
    let fd = sys::open_read(dirfd, cpath.as_bytes_with_nul());
    // SAFETY: a new descriptor this function owns alone.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// [`Files`] as the new image's loader will find them: mount files
/// through the client (copied into memfds), host files as they are.
struct ExecFiles<'a> {
    c: &'a Client,
    lane: &'a LazyLane<'a>,
    copies: Vec<OwnedFd>,
}

impl Files for ExecFiles<'_> {
    fn open(&mut self, path: &[u8]) -> Option<(Found, Dynamic)> {
        let c = self.c;
        match super::resolve_program(c, self.lane, libc::AT_FDCWD as i64, path, 0).ok()? {
            Program::Atoll {
                ino,
                ftype: FileType::Regular,
            } => {
                let lane = self.lane.get().ok()?;
                let fd = super::copy_for_loader(c, lane, ino, path).ok()?;
                let dynamic = read_dynamic(fd.as_raw_fd())?;
                self.copies.push(fd);
                Some((Found::Mount(self.copies.len() - 1), dynamic))
            }
            Program::Atoll { .. } => None,
            Program::Host(rewritten) => {
                let fd = match &rewritten {
                    Some(p) => open_host(libc::AT_FDCWD as i64, p.as_bytes())?,
                    None => open_host(libc::AT_FDCWD as i64, path)?,
                };
                Some((Found::Host, read_dynamic(fd.as_raw_fd())?))
            }
        }
    }
}

/// `LD_LIBRARY_PATH` of an environment, if set.
pub fn llp_of<'a>(env: &[&'a [u8]]) -> Option<&'a [u8]> {
    env.iter()
        .rev()
        .find(|e| e.starts_with(LD_LIBRARY_PATH.as_bytes()) && e.get(15) == Some(&b'='))
        .map(|e| &e[16..])
}

/// The copies a new image inherits and the directory that names them.
/// Dropped without [`MountLibs::started`], the directory goes (the exec
/// failed); once started, the new image removes it ([`at_start`]).
pub struct MountLibs {
    dir: Vec<u8>,
    fds: Vec<OwnedFd>,
    started: core::cell::Cell<bool>,
}

static SEQ: core::sync::atomic::AtomicU32 = core::sync::atomic::AtomicU32::new(0);

impl MountLibs {
    /// Name the copies `(name, memfd)` in a new directory under
    /// `runtime`. `None` if it cannot be made (a process that changed its
    /// credentials may not write there): the loader then fails as before.
    pub fn name(runtime: &[u8], copies: Vec<(Vec<u8>, OwnedFd)>) -> Option<MountLibs> {
        let seq = SEQ.fetch_add(1, core::sync::atomic::Ordering::Relaxed);
        let mut dir = runtime.to_vec();
        dir.extend_from_slice(format!("/libs-{}-{seq}", sys::self_pid()).as_bytes());
        let cdir = std::ffi::CString::new(dir.clone()).ok()?;
        // SAFETY: mkdir of a NUL-terminated path of the runtime directory.
        if unsafe { sys::sc(libc::SYS_mkdir, cdir.as_ptr() as u64, 0o700, 0, 0) } < 0 {
            return None;
        }
        let mut libs = MountLibs {
            dir,
            fds: Vec::new(),
            started: core::cell::Cell::new(false),
        };
        for (name, fd) in copies {
            // The new image inherits the copy.
            sys::fcntl_int(fd.as_raw_fd(), libc::F_SETFD, 0);
            let target = format!("/proc/self/fd/{}\0", fd.as_raw_fd());
            let mut link = libs.dir.clone();
            link.push(b'/');
            link.extend_from_slice(&name);
            let clink = std::ffi::CString::new(link).ok()?;
            // SAFETY: symlinkat of two NUL-terminated local paths.
            let r = unsafe {
                sys::sc(
                    libc::SYS_symlinkat,
                    target.as_ptr() as u64,
                    libc::AT_FDCWD as u64,
                    clink.as_ptr() as u64,
                    0,
                )
            };
            libs.fds.push(fd);
            if r < 0 {
                return None;
            }
        }
        Some(libs)
    }

    /// The new image's `LD_LIBRARY_PATH` and [`ENV_LIBS`], given the
    /// program's own `LD_LIBRARY_PATH`.
    pub fn env(&self, llp: Option<&[u8]>) -> [Vec<u8>; 2] {
        let mut path = format!("{LD_LIBRARY_PATH}=").into_bytes();
        path.extend_from_slice(&self.dir);
        if let Some(v) = llp.filter(|v| !v.is_empty()) {
            path.push(b':');
            path.extend_from_slice(v);
        }
        let fds: Vec<String> = self.fds.iter().map(|f| f.as_raw_fd().to_string()).collect();
        let flag = if llp.is_some() { "s" } else { "u" };
        let mut libs = format!("{ENV_LIBS}={};{flag};", fds.join(",")).into_bytes();
        libs.extend_from_slice(&self.dir);
        [path, libs]
    }

    /// The exec went through: the new image cleans up.
    pub fn started(&self) {
        self.started.set(true);
    }
}

impl Drop for MountLibs {
    fn drop(&mut self) {
        if !self.started.get() {
            remove_dir(&self.dir);
        }
    }
}

/// Remove the directory of links and what it holds.
fn remove_dir(dir: &[u8]) {
    let path = std::path::Path::new(OsStr::from_bytes(dir));
    let _ = std::fs::remove_dir_all(path);
}

/// In a new image, once the loader is done: remove the directory of
/// links, close the copies, and give the program back its own
/// `LD_LIBRARY_PATH`.
pub fn at_start() {
    let Some(v) = std::env::var_os(ENV_LIBS) else {
        return;
    };
    std::env::remove_var(ENV_LIBS);
    let v = v.into_encoded_bytes();
    let mut parts = v.splitn(3, |&b| b == b';');
    let (Some(fds), Some(flag), Some(dir)) = (parts.next(), parts.next(), parts.next()) else {
        return;
    };
    for fd in fds.split(|&b| b == b',') {
        if let Some(fd) = std::str::from_utf8(fd)
            .ok()
            .and_then(|s| s.parse::<i32>().ok())
        {
            // Only a memfd copy: the number was ours at the exec.
            if is_memfd(fd) {
                // SAFETY: the inherited copy, which nothing else uses.
                drop(unsafe { OwnedFd::from_raw_fd(fd) });
            }
        }
    }
    remove_dir(dir);
    let Some(now) = std::env::var_os(LD_LIBRARY_PATH).map(|v| v.into_encoded_bytes()) else {
        return;
    };
    match (flag, now.strip_prefix(dir)) {
        (b"u", Some(b"")) => std::env::remove_var(LD_LIBRARY_PATH),
        (_, Some(rest)) => {
            let rest = rest.strip_prefix(b":").unwrap_or(rest);
            std::env::set_var(LD_LIBRARY_PATH, OsStr::from_bytes(rest));
        }
        _ => {}
    }
}

/// The directory of links an [`ENV_LIBS`] value names, removed (by a
/// relay whose program never starts a client: `ldd`'s listing).
pub fn remove_named(value: &[u8]) {
    if let Some(dir) = value.splitn(3, |&b| b == b';').nth(2) {
        remove_dir(dir);
    }
}

fn is_memfd(fd: i32) -> bool {
    let link = format!("/proc/self/fd/{fd}");
    std::fs::read_link(link).is_ok_and(|p| p.as_os_str().as_encoded_bytes().starts_with(b"/memfd:"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// A file system of images: path → (in the mount?, what it asks).
    struct Fake {
        images: HashMap<Vec<u8>, (bool, Dynamic)>,
        opened: Vec<Vec<u8>>,
        copies: Vec<Vec<u8>>,
    }

    impl Files for Fake {
        fn open(&mut self, path: &[u8]) -> Option<(Found, Dynamic)> {
            self.opened.push(path.to_vec());
            let (mount, d) = self.images.get(path)?.clone();
            if mount {
                self.copies.push(path.to_vec());
                Some((Found::Mount(self.copies.len() - 1), d))
            } else {
                Some((Found::Host, d))
            }
        }
    }

    fn dynamic(needed: &[&str], rpath: Option<&str>, runpath: Option<&str>) -> Dynamic {
        Dynamic {
            needed: needed.iter().map(|n| n.as_bytes().to_vec()).collect(),
            rpath: rpath.map(|r| r.as_bytes().to_vec()),
            runpath: runpath.map(|r| r.as_bytes().to_vec()),
            soname: None,
        }
    }

    fn fake(images: &[(&str, bool, Dynamic)]) -> Fake {
        Fake {
            images: images
                .iter()
                .map(|(p, m, d)| (p.as_bytes().to_vec(), (*m, d.clone())))
                .collect(),
            opened: Vec::new(),
            copies: Vec::new(),
        }
    }

    fn names(found: &[(Vec<u8>, usize)], fs: &Fake) -> Vec<String> {
        found
            .iter()
            .map(|(n, i)| {
                format!(
                    "{}={}",
                    String::from_utf8_lossy(n),
                    String::from_utf8_lossy(&fs.copies[*i])
                )
            })
            .collect()
    }

    #[test]
    fn origin_runpath_finds_libraries_beside_the_program_and_their_own_needs() {
        let mut fs = fake(&[
            (
                "/atoll/b/libfoo.so",
                true,
                dynamic(&["libbar.so", "libc.so.6"], None, Some("$ORIGIN/sub")),
            ),
            (
                "/atoll/b/sub/libbar.so",
                true,
                dynamic(&["libc.so.6"], None, None),
            ),
        ]);
        let main = dynamic(&["libfoo.so", "libc.so.6"], None, Some("$ORIGIN"));
        let found = resolve(main, b"/atoll/b", &[], &mut fs);
        assert_eq!(
            names(&found, &fs),
            [
                "libfoo.so=/atoll/b/libfoo.so",
                "libbar.so=/atoll/b/sub/libbar.so"
            ]
        );
    }

    #[test]
    fn ld_library_path_comes_before_runpath_and_after_rpath() {
        let images = [
            ("/atoll/r/libx.so", true, dynamic(&[], None, None)),
            ("/atoll/l/libx.so", true, dynamic(&[], None, None)),
            ("/atoll/u/libx.so", true, dynamic(&[], None, None)),
        ];
        let llp = vec![b"/atoll/l".to_vec()];
        // RPATH (no RUNPATH) first.
        let mut fs = fake(&images);
        let found = resolve(
            dynamic(&["libx.so"], Some("/atoll/r"), None),
            b"/",
            &llp,
            &mut fs,
        );
        assert_eq!(names(&found, &fs), ["libx.so=/atoll/r/libx.so"]);
        // A RUNPATH hides the RPATH and comes after LD_LIBRARY_PATH.
        let mut fs = fake(&images);
        let main = dynamic(&["libx.so"], Some("/atoll/r"), Some("/atoll/u"));
        let found = resolve(main, b"/", &llp, &mut fs);
        assert_eq!(names(&found, &fs), ["libx.so=/atoll/l/libx.so"]);
        let mut fs = fake(&images);
        let main = dynamic(&["libx.so"], Some("/atoll/r"), Some("/atoll/u"));
        let found = resolve(main, b"/", &[], &mut fs);
        assert_eq!(names(&found, &fs), ["libx.so=/atoll/u/libx.so"]);
    }

    #[test]
    fn the_program_s_rpath_serves_its_libraries_needs_unless_they_have_a_runpath() {
        let mut fs = fake(&[
            ("/atoll/p/liba.so", true, dynamic(&["libb.so"], None, None)),
            (
                "/atoll/p/libb.so",
                true,
                dynamic(&["libc2.so"], None, Some("/nowhere")),
            ),
            ("/atoll/p/libc2.so", true, dynamic(&[], None, None)),
        ]);
        let found = resolve(
            dynamic(&["liba.so"], Some("/atoll/p"), None),
            b"/",
            &[],
            &mut fs,
        );
        // liba (no RUNPATH) finds libb through the program's RPATH; libb
        // has a RUNPATH, so the chain is not searched for libc2.
        assert_eq!(
            names(&found, &fs),
            ["liba.so=/atoll/p/liba.so", "libb.so=/atoll/p/libb.so"]
        );
    }

    #[test]
    fn host_libraries_win_where_they_come_first_and_names_load_once() {
        let mut fs = fake(&[
            (
                "/usr/local/lib/libq.so",
                false,
                dynamic(&["libz.so"], Some("/atoll/z"), None),
            ),
            ("/atoll/z/libz.so", true, dynamic(&[], None, None)),
            ("/atoll/l/libq.so", true, dynamic(&[], None, None)),
        ]);
        let llp = vec![b"/usr/local/lib".to_vec(), b"/atoll/l".to_vec()];
        let main = dynamic(&["libq.so", "libq.so", "libc.so.6"], None, None);
        let found = resolve(main, b"/", &llp, &mut fs);
        assert_eq!(names(&found, &fs), ["libz.so=/atoll/z/libz.so"]);
        let libq_opens = fs.opened.iter().filter(|p| p.ends_with(b"libq.so")).count();
        assert_eq!(libq_opens, 1);
    }

    #[test]
    fn search_paths_split_expand_origin_and_take_empty_entries_as_the_cwd() {
        assert_eq!(
            split_path(b"$ORIGIN/../lib:${ORIGIN}::/x;$ORIGINAL", b"/atoll/bin"),
            [
                b"/atoll/bin/../lib".to_vec(),
                b"/atoll/bin".to_vec(),
                b".".to_vec(),
                b"/x".to_vec(),
                b"$ORIGINAL".to_vec(),
            ]
        );
        assert_eq!(dirname(b"/atoll/b/prog"), b"/atoll/b");
        assert_eq!(dirname(b"/prog"), b"/");
    }

    #[test]
    fn environment_names_the_directory_first_and_keeps_an_empty_path_empty() {
        let libs = MountLibs {
            dir: b"/run/a/libs-1-0".to_vec(),
            fds: Vec::new(),
            started: core::cell::Cell::new(true),
        };
        let [p, l] = libs.env(Some(b"/x:/y"));
        assert_eq!(p, b"LD_LIBRARY_PATH=/run/a/libs-1-0:/x:/y");
        assert_eq!(l, b"ATOLL_LIBS=;s;/run/a/libs-1-0");
        let [p, l] = libs.env(Some(b""));
        assert_eq!(p, b"LD_LIBRARY_PATH=/run/a/libs-1-0");
        assert_eq!(l, b"ATOLL_LIBS=;s;/run/a/libs-1-0");
        let [_, l] = libs.env(None);
        assert_eq!(l, b"ATOLL_LIBS=;u;/run/a/libs-1-0");
        assert_eq!(
            llp_of(&[b"A=1", b"LD_LIBRARY_PATH=/q", b"LD_LIBRARY_PATHX=2"]),
            Some(&b"/q"[..])
        );
    }

    #[test]
    fn the_dynamic_section_of_this_test_binary_names_libc() {
        let exe = std::fs::File::open("/proc/self/exe").unwrap();
        let d = read_dynamic(exe.as_raw_fd()).expect("a dynamic image");
        assert!(
            d.needed.iter().any(|n| n.starts_with(b"libc.so")),
            "{:?}",
            d.needed
        );
    }
}
