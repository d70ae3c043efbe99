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
//! * for another process, its cwd: every process of the instance names
//!   the removed directory it leaves the kernel with its atoll cwd
//!   (`void_name`), so any process of the same instance reads that
//!   process's cwd back from the kernel's link (`pwdx`, `lsof`,
//!   `readlink /proc/PID/cwd`). A fork inherits the kernel's cwd and so
//!   the name, as it inherits the cwd. Processes outside the instance see
//!   the encoded name under the runtime directory, marked `(deleted)`.
//!
//! A path through one of these links (`ls /proc/self/cwd/`) reaches the
//! mount as any host symlink into it does (`hostlink`), which asks here.

use crate::session::Client;
use crate::sys;

/// Prefix of the kernel-side cwd directories (`Client::void_kernel_cwd`).
pub const VOID_PREFIX: &str = ".void-";

/// The name of the removed directory standing for atoll cwd `path` of
/// thread `tid` at `stamp`: `.void-TID-STAMP-ENCODED`, where ENCODED is
/// the path with `%` and `/` escaped (`%25`, `%2F`), or without the last
/// part when the name would pass `NAME_MAX`.
pub fn void_name(tid: i64, stamp: i64, path: &[u8]) -> Vec<u8> {
    let mut name = format!("{VOID_PREFIX}{tid}-{stamp}").into_bytes();
    let mut enc = Vec::with_capacity(path.len() + 8);
    for &b in path {
        match b {
            b'%' => enc.extend_from_slice(b"%25"),
            b'/' => enc.extend_from_slice(b"%2F"),
            _ => enc.push(b),
        }
    }
    if name.len() + 1 + enc.len() <= 255 {
        name.push(b'-');
        name.extend_from_slice(&enc);
    }
    name
}

/// The atoll cwd a removed directory's name stands for (see `void_name`).
pub fn decode_void(name: &[u8]) -> Option<Vec<u8>> {
    let rest = name.strip_prefix(VOID_PREFIX.as_bytes())?;
    // TID-STAMP-ENCODED: the path starts after the second dash.
    let mut dashes = rest.iter().enumerate().filter(|(_, &b)| b == b'-');
    dashes.next()?;
    let (at, _) = dashes.next()?;
    let enc = &rest[at + 1..];
    let mut out = Vec::with_capacity(enc.len());
    let mut i = 0;
    while i < enc.len() {
        match &enc[i..] {
            [b'%', b'2', b'5', ..] => (out.push(b'%'), i += 3),
            [b'%', b'2', b'F', ..] => (out.push(b'/'), i += 3),
            [b'%', ..] => return None,
            [b, ..] => (out.push(*b), i += 1),
            [] => unreachable!(),
        };
    }
    out.starts_with(b"/").then_some(out)
}

/// What `/proc/<who>/<entry>` links to, when atoll knows better than the
/// kernel; `None`: ask the kernel.
pub fn target(c: &Client, path: &[u8]) -> Option<Vec<u8>> {
    if let Some(entry) = crate::path::proc_self_entry(path) {
        if entry == b"cwd" {
            return c.cwd().map(|w| w.path.clone());
        }
        let n = entry.strip_prefix(b"fd/")?;
        let fd: i64 = core::str::from_utf8(n).ok()?.parse().ok()?;
        return crate::fdtable::get(fd).and_then(|d| d.path().map(<[u8]>::to_vec));
    }
    let rest = path.strip_prefix(b"/proc/")?;
    let slash = rest.iter().position(|&b| b == b'/')?;
    let (pid, entry) = (&rest[..slash], &rest[slash + 1..]);
    if pid.is_empty() || !pid.iter().all(u8::is_ascii_digit) {
        return None;
    }
    if entry == b"cwd" {
        return other_cwd(c, path);
    }
    let n: usize = core::str::from_utf8(entry.strip_prefix(b"fd/")?)
        .ok()?
        .parse()
        .ok()?;
    other_fd(pid, n)
}

/// The kernel's link at `/proc/…` (`path` without its NUL).
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
fn other_fd(pid: &[u8], n: usize) -> Option<Vec<u8>> {
    let pid = core::str::from_utf8(pid).ok()?;
    let link = kernel_link(format!("/proc/{pid}/fd/{n}").as_bytes())?;
    if !link.starts_with(b"/memfd:atoll-placeholder") {
        return None;
    }
    let fd = crate::fdpub::open_table(pid.parse().ok()?)?;
    let path = crate::fdpub::read_slot(fd, n);
    sys::close(fd);
    path
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

/// Another process's atoll cwd, from the name of its kernel cwd.
fn other_cwd(c: &Client, link: &[u8]) -> Option<Vec<u8>> {
    let kernel = kernel_link(link)?;
    let removed = kernel.strip_suffix(b" (deleted)")?;
    let (dir, name) = removed.split_at(removed.iter().rposition(|&b| b == b'/')?);
    // Only this instance's directories: another instance's paths are
    // another file system's.
    if dir != c.runtime_dir().as_bytes() {
        return None;
    }
    decode_void(&name[1..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn void_names_carry_the_cwd_and_give_it_back() {
        for p in [&b"/atoll"[..], b"/atoll/a b/100%/x-y", b"/atoll/-/--"] {
            let n = void_name(42, 7, p);
            assert!(!n.contains(&b'/'), "{n:?}");
            assert_eq!(decode_void(&n).as_deref(), Some(p));
        }
        let long = [b"/atoll/".as_slice(), &[b'x'; 250]].concat();
        let n = void_name(42, 7, &long);
        assert_eq!(n, b".void-42-7");
        assert_eq!(decode_void(&n), None);
        assert_eq!(decode_void(b".void-1-2-%2Fa%zz"), None);
    }
}
