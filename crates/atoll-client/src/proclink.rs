//! The links `/proc/<pid>/cwd` and `/proc/<pid>/fd/N` as Linux shows
//! them: the path of the directory or file.
//!
//! The kernel only knows what atoll left it: an atoll descriptor is a
//! placeholder memfd, and while the cwd is atoll's the kernel's cwd is a
//! removed directory (`Client::set_cwd`). So:
//!
//! * for the process itself (`self`, `thread-self` or its own pid) the
//!   answer is the client's: the atoll cwd, and the path a descriptor was
//!   opened by (`fdtable`);
//! * for another process's descriptor, the path it published
//!   (`fdpub`), when the kernel shows a placeholder there;
//! * for another process, its cwd: each process publishes its atoll cwd
//!   beside its descriptors (`fdpub`), and its kernel cwd is then a
//!   removed directory of the instance's runtime directory named
//!   `.void-…`, which tells a reader to look there (`pwdx`, `lsof`,
//!   `readlink /proc/PID/cwd`). Processes outside the instance see the
//!   removed directory.
//!
//! A path through one of these links (`ls /proc/self/cwd/`) reaches the
//! mount as any host symlink into it does (`hostlink`), which asks here.

use crate::session::Client;
use crate::sys;

/// Prefix of the kernel-side cwd directories (`Client::void_kernel_cwd`).
pub const VOID_PREFIX: &str = ".void-";

/// What `/proc/<who>/<entry>` links to, when atoll knows better than the
/// kernel; `None`: ask the kernel. A descriptor's link is its file's
/// current path (`fdname`).
pub fn target(c: &Client, path: &[u8]) -> Option<Vec<u8>> {
    if let Some(entry) = crate::path::proc_self_entry(path) {
        if entry == b"cwd" {
            return c.cwd().map(|w| w.path.clone());
        }
        let d = own_fd(entry)?;
        return match d.path() {
            Some(opened) => Some(crate::fdname::current(c, opened, d.ino())),
            None => anonymous_name(&d),
        };
    }
    let rest = path.strip_prefix(b"/proc/")?;
    let slash = rest.iter().position(|&b| b == b'/')?;
    let (pid, entry) = (&rest[..slash], &rest[slash + 1..]);
    if pid.is_empty() || !pid.iter().all(u8::is_ascii_digit) {
        return None;
    }
    if entry == b"cwd" {
        return other_cwd(c, path, core::str::from_utf8(pid).ok()?.parse().ok()?).map(|(p, _)| p);
    }
    let n: usize = core::str::from_utf8(entry.strip_prefix(b"fd/")?)
        .ok()?
        .parse()
        .ok()?;
    other_fd(core::str::from_utf8(pid).ok()?.parse().ok()?, n)
}

/// What `readlink` of `/proc/<who>/<entry>` gives: [`target`], and for
/// a cwd (the process's own or another's) whose directory was removed,
/// that path with ` (deleted)`, as Linux names an unhashed dentry: the
/// directory's server says so (no links left). (A path *through* the
/// link, [`through`], goes on from the plain path.)
pub fn link(c: &Client, path: &[u8]) -> Option<Vec<u8>> {
    let Some((mut t, ino)) = cwd_link(c, path) else {
        return target(c, path);
    };
    if crate::ns::cwd_removed(c, ino).unwrap_or(false) {
        t.extend_from_slice(b" (deleted)");
    }
    Some(t)
}

/// The atoll cwd `/proc/<who>/cwd` names, with its directory: the
/// process's own, or the one another process published.
fn cwd_link(c: &Client, path: &[u8]) -> Option<(Vec<u8>, atoll_proto::InodeId)> {
    if let Some(entry) = crate::path::proc_self_entry(path) {
        return (entry == b"cwd")
            .then(|| c.cwd().map(|w| (w.path.clone(), w.ino)))
            .flatten();
    }
    let pid = path.strip_prefix(b"/proc/")?.strip_suffix(b"/cwd")?;
    if pid.is_empty() || !pid.iter().all(u8::is_ascii_digit) {
        return None;
    }
    other_cwd(c, path, core::str::from_utf8(pid).ok()?.parse().ok()?)
}

/// Does atoll answer for the link at `path` (`target` is `Some`)? For
/// the process's own descriptors this asks no server.
pub fn answers(c: &Client, path: &[u8]) -> bool {
    match crate::path::proc_self_entry(path) {
        Some(b"cwd") => c.cwd().is_some(),
        Some(entry) => {
            own_fd(entry).is_some_and(|d| d.path().is_some() || anonymous_name(&d).is_some())
        }
        None => target(c, path).is_some(),
    }
}

/// The link Linux shows for a descriptor of a file without a name: an
/// anonymous pipe's `pipe:[INO]` (the `st_ino` its `fstat` gives), a
/// notification queue's anonymous inode. `None` for the others (named
/// files show their path).
pub fn anonymous_name(d: &crate::fdtable::DescRef) -> Option<Vec<u8>> {
    if d.path().is_some() || d.ftype() != atoll_proto::FileType::Fifo {
        return None;
    }
    Some(if crate::fanotify::is_group(d) {
        b"anon_inode:[fanotify]".to_vec()
    } else if crate::inotify::is_queue(d) {
        b"anon_inode:inotify".to_vec()
    } else {
        format!("pipe:[{}]", d.ino().0).into_bytes()
    })
}

/// The process's own atoll descriptor named by `fd/N`.
fn own_fd(entry: &[u8]) -> Option<crate::fdtable::DescRef> {
    let n = entry.strip_prefix(b"fd/")?;
    let fd: i64 = core::str::from_utf8(n).ok()?.parse().ok()?;
    crate::fdtable::get(fd)
}

/// The kernel's link at `path` (without its NUL): `/proc/…` links, and
/// host symlinks (`hostlink`).
pub fn kernel_link(path: &[u8]) -> Option<Vec<u8>> {
    let z = crate::path::PathBuf::from_bytes(path).ok()?;
    let mut buf = [0u8; sys::PATH_MAX];
    // SAFETY: a NUL-terminated local path and a local buffer of that size.
    let n = unsafe {
        sys::sc(
            libc::SYS_readlinkat,
            libc::AT_FDCWD as u64,
            z.as_ptr() as u64,
            buf.as_mut_ptr() as u64,
            buf.len() as u64,
        )
    };
    Some(buf.get(..usize::try_from(n).ok()?)?.to_vec())
}

/// Another process's descriptor `n`, when the kernel shows a placeholder:
/// the path that process published (`fdpub`).
fn other_fd(pid: u32, n: usize) -> Option<Vec<u8>> {
    let link = kernel_link(format!("/proc/{pid}/fd/{n}").as_bytes())?;
    let c = crate::session::client()?;
    if !link.starts_with(b"/memfd:atoll-placeholder") && !crate::dnotify::is_shadow(c, &link) {
        return None;
    }
    let fd = crate::fdpub::open_table(pid)?;
    let slot = crate::fdpub::read_slot(fd, n);
    sys::close(fd);
    let (path, ino) = slot?;
    if path.first() != Some(&b'/') {
        return Some(path); // an anonymous file's name (`anonymous_name`)
    }
    Some(crate::fdname::current(c, &path, ino))
}

/// A path below one of these links (`/proc/self/cwd/x`, `/proc/PID/cwd/`,
/// `/proc/self/fd/N/x`): the atoll path it reaches, when atoll answers
/// for the link. The kernel would walk into the removed directory or the
/// placeholder instead, and `hostlink` steps in only on `ENOENT`, which
/// opening the removed directory itself does not give.
///
/// With `follow`, the cwd link itself too (`stat`, `opendir` of
/// `/proc/self/cwd`), and another process's descriptor link; the
/// process's own descriptors are reopened by `fdpath`.
pub fn through(c: &Client, path: &[u8], follow: bool) -> Option<Vec<u8>> {
    let rest = path.strip_prefix(b"/proc/")?;
    let who = rest.iter().position(|&b| b == b'/')?;
    let after = &rest[who + 1..];
    let itself = crate::path::proc_self_entry(path).is_some();
    let link_len = if after.starts_with(b"cwd/") || (follow && after == b"cwd") {
        3
    } else {
        let n = after.strip_prefix(b"fd/")?;
        match n.iter().position(|&b| b == b'/') {
            Some(end) => 3 + end,
            // Another process's descriptor: its file, by the path it was
            // opened by (`cat /proc/PID/fd/N`).
            None if follow && !itself => after.len(),
            None => return None,
        }
    };
    let split = b"/proc/".len() + who + 1 + link_len;
    let mut t = target(c, &path[..split])?;
    // Only into the mount: elsewhere the kernel's answer stands.
    crate::path::mount_rest(&t, &c.mount)?;
    t.extend_from_slice(&path[split..]);
    Some(t)
}

/// Is `kernel` (what the kernel shows as a cwd) one of this instance's
/// removed `.void-…` directories (`Client::void_kernel_cwd`)?
pub fn is_instance_void(c: &Client, kernel: &[u8]) -> bool {
    let Some(removed) = kernel.strip_suffix(b" (deleted)") else {
        return false;
    };
    let Some(slash) = removed.iter().rposition(|&b| b == b'/') else {
        return false;
    };
    let (dir, name) = removed.split_at(slash);
    dir == c.runtime_dir().as_bytes() && name[1..].starts_with(VOID_PREFIX.as_bytes())
}

/// Another process's atoll cwd and its directory, from the name of its
/// kernel cwd.
fn other_cwd(c: &Client, link: &[u8], pid: u32) -> Option<(Vec<u8>, atoll_proto::InodeId)> {
    let kernel = kernel_link(link)?;
    // Only this instance's directories: another instance's paths are
    // another file system's.
    if !is_instance_void(c, &kernel) {
        return None;
    }
    let fd = crate::fdpub::open_table(pid)?;
    let cwd = crate::fdpub::read_cwd(fd);
    sys::close(fd);
    cwd.filter(|(p, _)| p.starts_with(b"/"))
}
