//! Where a path a filtered program names leads: the kernel's business
//! (outside the mount, from a host cwd or host directory descriptor), or
//! the relay's (inside the mount, or relative to a directory in the
//! mount, which the kernel cannot see).
//!
//! The relay tracks each filtered process's cwd while it is in the mount
//! (`chdir` there is answered without the kernel moving: its kernel cwd
//! stays the harmless one it had, a removed directory when it started in
//! the mount). A process the relay has not seen takes its parent's
//! tracked cwd (a fork copies it), else the cwd the program started in.
//! Directory descriptors the relay gave out are memfds whose name carries
//! the relay's pid and a key (`atoll-relay:PID:KEY`): the kernel's
//! `/proc/PID/fd/N` link says which, through dups and forks alike.

use std::collections::HashMap;

use super::seccomp;

/// Longest path read from the program (`PATH_MAX`, with its NUL).
const PATH_MAX: usize = 4096;
/// Prefix of the names of the relay's memfds.
pub const MEMFD_PREFIX: &str = "atoll-relay:";

/// A process's working directory as the relay sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cwd {
    /// The kernel's cwd is the real one.
    Host,
    /// Tracked by the relay (absolute path): in the mount, or reached
    /// from there by a relative name; the kernel's cwd stays put.
    Tracked(Vec<u8>),
}

/// Where a path argument leads.
#[derive(Debug, PartialEq, Eq)]
pub enum Place {
    /// The kernel resolves it as the program gave it.
    Kernel,
    /// The relay performs the call on this absolute path (in the mount, or
    /// on the host from a cwd in the mount).
    Here(Vec<u8>),
    /// An empty path with `AT_EMPTY_PATH` on a descriptor the relay gave
    /// out: its key.
    Desc(u64),
}

/// The relay's view of the filtered processes.
pub struct Paths {
    /// The mount, e.g. `/atoll`.
    pub mount: Vec<u8>,
    /// The cwd the program started in.
    initial: Cwd,
    /// Tracked cwds by thread-group id.
    cwds: HashMap<i32, Cwd>,
    /// Thread id → thread-group id, as read from `/proc`.
    groups: HashMap<i32, i32>,
    /// The relay's pid (ends a walk up the parents; names its memfds).
    me: i32,
    /// Paths of the directory descriptors the relay gave out, by key.
    dirs: HashMap<u64, Vec<u8>>,
}

impl Paths {
    pub fn new(mount: Vec<u8>, start: &[u8]) -> Paths {
        let initial = if under(&mount, start) {
            Cwd::Tracked(start.to_vec())
        } else {
            Cwd::Host
        };
        Paths {
            mount,
            initial,
            cwds: HashMap::new(),
            groups: HashMap::new(),
            me: std::process::id() as i32,
            dirs: HashMap::new(),
        }
    }

    /// A directory descriptor given out under `key`.
    pub fn add_dir(&mut self, key: u64, path: Vec<u8>) {
        self.dirs.insert(key, path);
    }

    pub fn dir(&self, key: u64) -> Option<&[u8]> {
        self.dirs.get(&key).map(Vec::as_slice)
    }

    pub fn me(&self) -> i32 {
        self.me
    }

    /// The thread group of thread `tid`.
    pub fn group(&mut self, tid: i32) -> i32 {
        if let Some(&g) = self.groups.get(&tid) {
            return g;
        }
        let g = proc_field(tid, "status", "Tgid:").unwrap_or(tid);
        self.groups.insert(tid, g);
        g
    }

    /// The cwd of thread `tid`'s process.
    pub fn cwd(&mut self, tid: i32) -> Cwd {
        let g = self.group(tid);
        if let Some(c) = self.cwds.get(&g) {
            return c.clone();
        }
        let mut p = g;
        let mut found = None;
        for _ in 0..64 {
            match proc_field(p, "status", "PPid:") {
                Some(pp) if pp > 1 && pp != self.me => {
                    if let Some(c) = self.cwds.get(&pp) {
                        found = Some(c.clone());
                        break;
                    }
                    p = pp;
                }
                _ => break,
            }
        }
        let c = found.unwrap_or_else(|| self.initial.clone());
        self.cwds.insert(g, c.clone());
        c
    }

    pub fn set_cwd(&mut self, tid: i32, c: Cwd) {
        let g = self.group(tid);
        self.cwds.insert(g, c);
    }

    /// The key of the relay's memfd at descriptor `fd` of `pid`, if it is
    /// one.
    pub fn desc_key(&self, pid: i32, fd: u64) -> Option<u64> {
        let fd = i32::try_from(fd as i64).ok().filter(|&f| f >= 0)?;
        let link = std::fs::read_link(format!("/proc/{pid}/fd/{fd}")).ok()?;
        parse_memfd_name(link.as_os_str().as_encoded_bytes(), self.me)
    }

    /// Where path argument `ptr` (relative to `dirfd`) of the call `n`
    /// leads. `empty_ok`: an empty path names `dirfd` itself
    /// (`AT_EMPTY_PATH`). A path that cannot be read is `EFAULT`.
    pub fn resolve(
        &mut self,
        n: &seccomp::Notif,
        dirfd: u64,
        ptr: u64,
        empty_ok: bool,
    ) -> Result<Place, i32> {
        if ptr == 0 {
            return if empty_ok {
                Ok(self.fd_place(n.pid, dirfd))
            } else {
                Err(libc::EFAULT)
            };
        }
        let path = read_path(n.pid, ptr)?;
        self.place(n.pid, dirfd, &path, empty_ok)
    }

    /// As [`Self::resolve`], for a path already read.
    pub fn place(
        &mut self,
        pid: i32,
        dirfd: u64,
        path: &[u8],
        empty_ok: bool,
    ) -> Result<Place, i32> {
        if path.is_empty() {
            return Ok(if empty_ok {
                self.fd_place(pid, dirfd)
            } else {
                Place::Kernel
            });
        }
        if path[0] == b'/' {
            // `/atoll/..` leaves the mount, but the kernel, which does not
            // know `/atoll`, could not walk it: the relay's client does.
            return Ok(if passes_through(&self.mount, path) {
                Place::Here(path.to_vec())
            } else {
                Place::Kernel
            });
        }
        let base = if dirfd as i32 == libc::AT_FDCWD {
            self.cwd(pid)
        } else {
            match self.desc_key(pid, dirfd) {
                Some(key) => match self.dirs.get(&key) {
                    Some(p) => Cwd::Tracked(p.clone()),
                    None => return Err(libc::ENOTDIR),
                },
                None => Cwd::Host,
            }
        };
        match base {
            Cwd::Tracked(dir) => Ok(Place::Here(join(&dir, path))),
            Cwd::Host => {
                // `../atoll/f` from a host directory may still enter the
                // mount: only worth a look when a component names it.
                let name = self.mount.rsplit(|&b| b == b'/').next().unwrap_or(b"");
                if name.is_empty() || !contains(path, name) {
                    return Ok(Place::Kernel);
                }
                let link = if dirfd as i32 == libc::AT_FDCWD {
                    format!("/proc/{pid}/cwd")
                } else {
                    format!("/proc/{pid}/fd/{}", dirfd as i32)
                };
                let Ok(host) = std::fs::read_link(link) else {
                    return Ok(Place::Kernel);
                };
                let abs = join(host.as_os_str().as_encoded_bytes(), path);
                Ok(if under(&self.mount, &normalize(&abs)) {
                    Place::Here(abs)
                } else {
                    Place::Kernel
                })
            }
        }
    }

    fn fd_place(&self, pid: i32, fd: u64) -> Place {
        match self.desc_key(pid, fd) {
            Some(k) => Place::Desc(k),
            None => Place::Kernel,
        }
    }
}

/// Is (normalized, absolute) `path` the mount or inside it?
pub fn under(mount: &[u8], path: &[u8]) -> bool {
    path.starts_with(mount) && matches!(path.get(mount.len()), None | Some(b'/'))
}

/// `dir` + `/` + `rel`.
pub fn join(dir: &[u8], rel: &[u8]) -> Vec<u8> {
    let mut p = dir.to_vec();
    if p.last() != Some(&b'/') {
        p.push(b'/');
    }
    p.extend_from_slice(rel);
    p
}

/// Lexical normal form of an absolute path: `"/a/./b/../c//"` → `"/a/c"`.
/// Only to decide whether a path is in the mount; the call itself gets the
/// path as given, so `..` after a symbolic link is the client's to follow.
pub fn normalize(path: &[u8]) -> Vec<u8> {
    let mut parts: Vec<&[u8]> = Vec::new();
    for c in path.split(|&b| b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    let mut out = Vec::new();
    for c in parts {
        out.push(b'/');
        out.extend_from_slice(c);
    }
    if out.is_empty() {
        out.push(b'/');
    }
    out
}

/// Does the absolute `path` end in the mount, or walk through it on the
/// way (`/atoll/..`, `/atoll/../tmp/x`), lexically?
pub fn passes_through(mount: &[u8], path: &[u8]) -> bool {
    let mut at = b"/".to_vec();
    for c in path.split(|&b| b == b'/') {
        match c {
            b"" | b"." => continue,
            b".." => {
                let cut = at.iter().rposition(|&b| b == b'/').unwrap_or(0);
                at.truncate(cut.max(1));
            }
            c => {
                if at.last() != Some(&b'/') {
                    at.push(b'/');
                }
                at.extend_from_slice(c);
            }
        }
        if under(mount, &at) {
            return true;
        }
    }
    false
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// The NUL-terminated path at `ptr` in process `pid`, read a page piece at
/// a time so a short string at the end of a mapping still reads.
pub fn read_path(pid: i32, ptr: u64) -> Result<Vec<u8>, i32> {
    let mut out = Vec::new();
    let mut at = ptr;
    while out.len() < PATH_MAX {
        let room = 4096 - (at % 4096) as usize;
        let mut buf = vec![0u8; room.min(PATH_MAX - out.len() + 1)];
        seccomp::read_mem(pid, at, &mut buf)?;
        if let Some(end) = buf.iter().position(|&b| b == 0) {
            out.extend_from_slice(&buf[..end]);
            return Ok(out);
        }
        out.extend_from_slice(&buf);
        at += buf.len() as u64;
    }
    Err(libc::ENAMETOOLONG)
}

/// A number field of `/proc/PID/FILE` (`"Tgid:"`, `"PPid:"`).
fn proc_field(pid: i32, file: &str, key: &str) -> Option<i32> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/{file}")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().parse().ok())
}

/// The umask of thread `tid`'s process (`/proc/TID/status`, octal).
pub fn umask_of(tid: i32) -> Option<u32> {
    let s = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("Umask:"))
        .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
}

/// `"/memfd:atoll-relay:PID:KEY (deleted)"` → `KEY` when PID is `me`.
pub fn parse_memfd_name(link: &[u8], me: i32) -> Option<u64> {
    let rest = link.strip_prefix(b"/memfd:")?;
    let rest = rest.strip_prefix(MEMFD_PREFIX.as_bytes())?;
    let s = std::str::from_utf8(rest).ok()?;
    let s = s.strip_suffix(" (deleted)").unwrap_or(s);
    let (pid, key) = s.split_once(':')?;
    (pid.parse::<i32>().ok()? == me).then_some(())?;
    key.parse().ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn paths_through_the_mount_are_the_relay_s_even_when_they_leave_it() {
        for p in [
            "/atoll",
            "/atoll/x",
            "/atoll/..",
            "/atoll/../tmp/x",
            "//atoll/./a/../..",
        ] {
            assert!(passes_through(b"/atoll", p.as_bytes()), "{p}");
        }
        for p in [
            "/",
            "/tmp/atoll",
            "/atollx/..",
            "/tmp/../bin",
            "/x/../atollx",
        ] {
            assert!(!passes_through(b"/atoll", p.as_bytes()), "{p}");
        }
    }

    use super::*;

    #[test]
    fn paths_normalize_lexically() {
        assert_eq!(normalize(b"/a/./b/../c//"), b"/a/c");
        assert_eq!(normalize(b"/atoll/../etc/passwd"), b"/etc/passwd");
        assert_eq!(normalize(b"/.."), b"/");
        assert_eq!(normalize(b"/tmp/../atoll/f"), b"/atoll/f");
    }

    #[test]
    fn the_mount_and_what_is_below_it_are_under_it() {
        assert!(under(b"/atoll", b"/atoll"));
        assert!(under(b"/atoll", b"/atoll/d/f"));
        assert!(!under(b"/atoll", b"/atollx"));
        assert!(!under(b"/atoll", b"/tmp/atoll"));
    }

    #[test]
    fn only_this_relay_s_memfds_are_its_descriptors() {
        let me = 42;
        assert_eq!(
            parse_memfd_name(b"/memfd:atoll-relay:42:7 (deleted)", me),
            Some(7)
        );
        assert_eq!(
            parse_memfd_name(b"/memfd:atoll-relay:43:7 (deleted)", me),
            None
        );
        assert_eq!(parse_memfd_name(b"/tmp/atoll-relay:42:7", me), None);
        assert_eq!(parse_memfd_name(b"/memfd:other (deleted)", me), None);
    }

    #[test]
    fn relative_paths_from_a_cwd_in_the_mount_are_the_relay_s() {
        let mut p = Paths::new(b"/atoll".to_vec(), b"/atoll/d");
        let me = std::process::id() as i32;
        let at = libc::AT_FDCWD as u64;
        assert_eq!(
            p.place(me, at, b"f", false),
            Ok(Place::Here(b"/atoll/d/f".to_vec()))
        );
        assert_eq!(p.place(me, at, b"/etc/passwd", false), Ok(Place::Kernel));
        assert_eq!(
            p.place(me, at, b"/atoll/x", false),
            Ok(Place::Here(b"/atoll/x".to_vec()))
        );
        p.set_cwd(me, Cwd::Host);
        assert_eq!(p.place(me, at, b"f", false), Ok(Place::Kernel));
    }

    #[test]
    fn a_path_that_is_not_mapped_is_efault() {
        let me = std::process::id() as i32;
        assert_eq!(read_path(me, 16), Err(libc::EFAULT));
        let s = b"/atoll/f\0";
        assert_eq!(read_path(me, s.as_ptr() as u64), Ok(b"/atoll/f".to_vec()));
    }
}
