//! `execve`/`execveat` by a filtered program of a program stored in the
//! mount (`go test`'s test binary in a `TMPDIR` there, `./a.out` or a
//! `./configure` script run by a static shell in a build tree there).
//!
//! The kernel cannot read the file, so the relay gives it one it can: the
//! program's bytes copied into a sealed memfd, installed in the program
//! (`SECCOMP_IOCTL_NOTIF_ADDFD`, the call still pending), and named by
//! the call's path register, pointed at `/dev/fd/N` (or `/proc/self/fd/N`
//! where `/dev/fd` is not that link) written in the dead part of the
//! thread's stack (`redirect.rs`); the call restarts, and the kernel runs
//! it with the program's `argv` and environment untouched. As Hare
//! §3.6.1 notes, the arguments and the descriptor table are the whole
//! state an exec carries: nothing else needs to change.
//!
//! Why a register and not the string the path points to: a seccomp
//! supervisor can answer a call or let the kernel run it *as made*, and
//! the kernel reads the path's memory again after
//! `SECCOMP_USER_NOTIF_FLAG_CONTINUE`, so rewriting the string in place
//! would look enough. It is not: `/dev/fd/N` is longer than `./a.out`
//! (the bytes after it are other data, often the next argument), the
//! string is very often `argv[0]` itself (`execvp(argv[0], argv)`, a
//! shell's command word), which would then reach the new image
//! rewritten, and a `vfork` or `posix_spawn` child shares it with its
//! parent, which would see it changed after the exec. A string literal
//! cannot be written at all.
//!
//! Races and what they can harm: another thread of the program may close
//! or replace descriptor N, or unmap the stack, between the redirection
//! and the kernel's look; the kernel then runs whatever the program's own
//! table names, with the program's own credentials. That harms only the
//! program, which could have made that call itself; the relay's state
//! and files are not involved. What the kernel refuses after the
//! redirection (`E2BIG`, `ENOMEM`, an ELF it cannot load) leaves
//! descriptor N open in the program; the relay first refuses what it can
//! tell the kernel would (permissions, a missing script interpreter,
//! neither ELF nor `#!`), so that is rare. The path register then still
//! holds the name's address on the dead stack (the kernel keeps argument
//! registers across a call): libc's `execve` wrappers and Go's runtime
//! do not look at it again, but code that inlines the call and reuses
//! the register for its string would find `/dev/fd/N` there, or garbage
//! once the stack grows over it.
//!
//! An ELF image's descriptor is close-on-exec (the kernel holds the file
//! from the exec on; `/proc/self/exe` is the memfd). A `#!` script's is
//! not: its interpreter opens the script by that name in the new image,
//! where a close-on-exec descriptor would already be gone (the kernel
//! itself refuses such a script with `ENOENT`). The script's interpreter
//! thus inherits descriptor N (COMPATIBILITY).

use std::ffi::{CString, OsStr};
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

use super::files;
use super::paths;

/// How much of a file the kernel looks at to tell ELF from `#!`
/// (`BINPRM_BUF_SIZE`).
const HEAD: usize = 256;

/// A program of the mount, ready for the kernel to run.
pub struct Image {
    pub memfd: OwnedFd,
    /// A `#!` script (its descriptor must survive the exec).
    pub script: bool,
}

/// The credentials the kernel checks an exec against: the process's
/// file-system ids and its supplementary groups (`/proc/PID/status`).
#[derive(Debug, PartialEq, Eq)]
pub struct Creds {
    pub fsuid: u32,
    pub fsgid: u32,
    pub groups: Vec<u32>,
}

impl Creds {
    pub fn of(tid: i32) -> Option<Creds> {
        let s = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
        Creds::parse(&s)
    }

    fn parse(status: &str) -> Option<Creds> {
        let field = |key: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .map(|v| v.split_whitespace().filter_map(|w| w.parse::<u32>().ok()))
        };
        // Real, effective, saved, file-system: the fourth decides.
        let fsuid = field("Uid:")?.nth(3)?;
        let fsgid = field("Gid:")?.nth(3)?;
        let groups = field("Groups:").map(Iterator::collect).unwrap_or_default();
        Some(Creds {
            fsuid,
            fsgid,
            groups,
        })
    }

    /// May these credentials run a regular file of mode `mode` owned by
    /// `uid`:`gid`? As `generic_permission` with `MAY_EXEC`: the owner's,
    /// group's or others' execute bit, whichever class applies first; root
    /// needs any execute bit.
    pub fn may_exec(&self, mode: u32, uid: u32, gid: u32) -> bool {
        if self.fsuid == 0 {
            return mode & 0o111 != 0;
        }
        let bit = if self.fsuid == uid {
            0o100
        } else if self.fsgid == gid || self.groups.contains(&gid) {
            0o010
        } else {
            0o001
        };
        mode & bit != 0
    }
}

/// `EACCES` unless thread `tid` may run a file of attributes `st`.
pub fn may_run(tid: i32, st: &libc::stat) -> Result<(), i32> {
    let creds = Creds::of(tid).ok_or(libc::ESRCH)?;
    if st.st_mode & libc::S_IFMT != libc::S_IFREG
        || !creds.may_exec(st.st_mode, st.st_uid, st.st_gid)
    {
        return Err(libc::EACCES);
    }
    Ok(())
}

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Check `path` (absolute, in the mount) as the kernel's exec would for
/// thread `tid`, and copy it into a sealed memfd. `nofollow`:
/// `execveat`'s `AT_SYMLINK_NOFOLLOW`.
pub fn prepare(tid: i32, mount: &[u8], path: &[u8], nofollow: bool) -> Result<Image, i32> {
    let st = files::stat_path(path, nofollow)?;
    match st.st_mode & libc::S_IFMT {
        libc::S_IFREG => {}
        libc::S_IFLNK => return Err(libc::ELOOP),
        // A directory, FIFO, socket or device is not run.
        _ => return Err(libc::EACCES),
    }
    may_run(tid, &st)?;
    // Read with the relay's credentials, which are the program's (same
    // user, `no_new_privs`): an execute-only file is refused here.
    let mut src = std::fs::File::open(OsStr::from_bytes(path))
        .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
    let base = path.rsplit(|&b| b == b'/').next().unwrap_or(b"atoll-exec");
    let mut dst = std::fs::File::from(exec_memfd(base)?);
    let mut head = Vec::with_capacity(HEAD);
    (&mut src)
        .take(HEAD as u64)
        .read_to_end(&mut head)
        .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
    let script = match classify(&head) {
        Kind::Elf => false,
        Kind::Script(interp) => {
            check_interpreter(mount, interp)?;
            true
        }
        // What binfmt_script and binfmt_elf both refuse; a shell then runs
        // the file itself (`sh ./configure` without `#!`), by its own name.
        Kind::Neither => return Err(libc::ENOEXEC),
    };
    let io = |e: std::io::Error| e.raw_os_error().unwrap_or(libc::EIO);
    dst.write_all(&head).map_err(io)?;
    // Read and write, not `io::copy`: its `copy_file_range` would go to
    // the kernel with the client's placeholder descriptor.
    let mut buf = vec![0u8; 1 << 16];
    loop {
        match src.read(&mut buf) {
            Ok(0) => break,
            Ok(k) => dst.write_all(&buf[..k]).map_err(io)?,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io(e)),
        }
    }
    let memfd = OwnedFd::from(dst);
    // Sealed: the image the kernel runs is the one checked here, whoever
    // holds the descriptor.
    let seals = libc::F_SEAL_SEAL | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE;
    // SAFETY: fcntl on a descriptor this function owns, no pointers.
    if unsafe { libc::fcntl(memfd.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
        return Err(errno());
    }
    Ok(Image { memfd, script })
}

/// A memfd the kernel may execute, named after the program (`comm` and
/// `/proc/PID/exe` show `/memfd:NAME`).
fn exec_memfd(base: &[u8]) -> Result<OwnedFd, i32> {
    let name = CString::new(base.to_vec()).map_err(|_| libc::EINVAL)?;
    let flags = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
    // `MFD_EXEC` says so explicitly where the kernel knows it (6.3+;
    // `vm.memfd_noexec` may make it the only way); older kernels refuse
    // the flag and make executable memfds anyway.
    for extra in [libc::MFD_EXEC, 0] {
        // SAFETY: memfd_create of a NUL-terminated name.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), flags | extra) };
        if fd >= 0 {
            // SAFETY: a new descriptor this function owns.
            return Ok(unsafe { OwnedFd::from_raw_fd(fd) });
        }
        if errno() != libc::EINVAL {
            break;
        }
    }
    Err(errno())
}

#[derive(Debug, PartialEq, Eq)]
enum Kind<'a> {
    Elf,
    /// A `#!` line and its interpreter.
    Script(&'a [u8]),
    Neither,
}

fn classify(head: &[u8]) -> Kind<'_> {
    if head.starts_with(b"\x7fELF") {
        return Kind::Elf;
    }
    let Some(line) = head.strip_prefix(b"#!") else {
        return Kind::Neither;
    };
    let line = line.split(|&b| b == b'\n').next().unwrap_or(line);
    let interp = line
        .split(|&b| b == b' ' || b == b'\t')
        .find(|w| !w.is_empty())
        .unwrap_or(b"");
    if interp.is_empty() {
        Kind::Neither
    } else {
        Kind::Script(interp)
    }
}

/// The kernel opens a script's interpreter by path, on the host: one it
/// would not find (missing, or stored in the mount, which the kernel
/// cannot read) is `ENOENT` now, before the program's memory changes.
fn check_interpreter(mount: &[u8], interp: &[u8]) -> Result<(), i32> {
    if interp.first() == Some(&b'/') && paths::passes_through(mount, interp) {
        return Err(libc::ENOENT);
    }
    let c = CString::new(interp.to_vec()).map_err(|_| libc::ENOEXEC)?;
    if !host_exists(&c) {
        return Err(libc::ENOENT);
    }
    Ok(())
}

/// Does the kernel itself (not the relay's client) find `path`?
fn host_exists(path: &CString) -> bool {
    // SAFETY: raw faccessat of a NUL-terminated path: the kernel's own
    // view, which is what the exec will see.
    unsafe {
        libc::syscall(
            libc::SYS_faccessat,
            libc::AT_FDCWD,
            path.as_ptr(),
            libc::F_OK,
        ) == 0
    }
}

/// The name prefix under which a process reaches its own descriptors.
fn fd_prefix() -> &'static str {
    static PREFIX: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();
    PREFIX.get_or_init(|| match std::fs::read_link("/dev/fd") {
        Ok(t) if t.as_os_str() == "/proc/self/fd" => "/dev/fd/",
        _ => "/proc/self/fd/",
    })
}

/// The name (with its NUL) of descriptor `fd` for the process itself.
pub fn fd_name(fd: i64) -> Vec<u8> {
    let mut n = format!("{}{fd}", fd_prefix()).into_bytes();
    n.push(0);
    n
}

/// The parent of process `pid`.
pub fn parent_of(pid: i32) -> Option<i32> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("PPid:"))
        .and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elf_scripts_and_other_files_are_told_apart() {
        assert_eq!(classify(b"\x7fELF\x02\x01"), Kind::Elf);
        assert_eq!(classify(b"#!/bin/sh\necho"), Kind::Script(b"/bin/sh"));
        assert_eq!(
            classify(b"#! \t/usr/bin/env python3\n"),
            Kind::Script(b"/usr/bin/env")
        );
        assert_eq!(classify(b"#!\n"), Kind::Neither);
        assert_eq!(classify(b"echo hi\n"), Kind::Neither);
        assert_eq!(classify(b""), Kind::Neither);
    }

    #[test]
    fn exec_permission_follows_the_first_class_that_applies() {
        let user = Creds {
            fsuid: 1000,
            fsgid: 100,
            groups: vec![100, 20],
        };
        // Owner without x, even though others have it.
        assert!(!user.may_exec(0o601, 1000, 5));
        assert!(user.may_exec(0o700, 1000, 5));
        assert!(user.may_exec(0o010, 1, 20));
        assert!(!user.may_exec(0o001, 1, 20));
        assert!(user.may_exec(0o001, 1, 5));
        assert!(!user.may_exec(0o644, 1000, 100));
        let root = Creds {
            fsuid: 0,
            fsgid: 0,
            groups: vec![],
        };
        assert!(root.may_exec(0o001, 1, 1));
        assert!(!root.may_exec(0o666, 0, 0));
    }

    #[test]
    fn credentials_are_the_file_system_ids() {
        let s = "Name:\tx\nUid:\t1\t2\t3\t4\nGid:\t5\t6\t7\t8\nGroups:\t9 10 \n";
        assert_eq!(
            Creds::parse(s),
            Some(Creds {
                fsuid: 4,
                fsgid: 8,
                groups: vec![9, 10]
            })
        );
        assert!(Creds::of(std::process::id() as i32).is_some());
    }

    #[test]
    fn descriptors_are_named_through_the_process_s_own_table() {
        let name = fd_name(7);
        assert!(name.starts_with(fd_prefix().as_bytes()));
        assert!(name.ends_with(b"/7\0"));
        let me = std::process::id() as i32;
        assert!(parent_of(me).is_some_and(|p| p > 0 && p != me));
    }
}
