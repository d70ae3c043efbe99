//! Images that cannot load the client library: statically linked (no
//! `PT_INTERP`, so no dynamic loader runs `LD_PRELOAD`), or run in
//! secure-execution mode (set-user-ID, set-group-ID, file capabilities),
//! where the loader ignores a preload path.
//!
//! Such a program would inherit atoll descriptors as bare placeholders:
//! what it writes to an atoll pipe or file would vanish, what it reads
//! would be empty. So when the new image is one and it would inherit
//! atoll descriptors (no `FD_CLOEXEC`), the exec runs `atoll __foreign
//! FDS PATH ARGV…` in its place (the CLI's `foreign.rs`): an ordinary
//! atoll client, in this very process, that starts the program with host
//! pipes at those numbers and copies between them and the atoll
//! descriptors, and ends as the program ends. A statically linked image
//! always runs behind the relay, which also serves the paths it names in
//! the mount (a seccomp user-notification filter, CLI `foreign/`); a
//! secure-execution image that inherits no atoll descriptor runs as it
//! is (the filter needs `no_new_privs`, which would drop its privileges).

use std::os::fd::AsRawFd;

use atoll_proto::boot::{EXE_LINK, FOREIGN};

use crate::fdtable;
use crate::sys;

/// Most program headers looked at (a real image has about a dozen).
const MAX_PHDRS: usize = 64;
/// `PT_INTERP`: the image names its dynamic loader.
const PT_INTERP: u32 = 3;

/// Atoll descriptors a new image would inherit (no `FD_CLOEXEC`).
pub(super) fn inherited() -> Vec<i32> {
    fdtable::fds()
        .into_iter()
        .filter(|&fd| {
            // SAFETY: F_GETFD takes no argument.
            let r = unsafe { sys::sc(libc::SYS_fcntl, fd as u64, libc::F_GETFD as u64, 0, 0) };
            r >= 0 && r & libc::FD_CLOEXEC as i64 == 0
        })
        .collect()
}

/// Why an image cannot load the client library.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Foreign {
    /// Statically linked, running with the caller's privileges: the
    /// relay may filter its system calls and serve its mount paths.
    Static,
    /// Secure execution (`AT_SECURE`): the relay only copies its
    /// descriptors, since a filter would cost it its privileges.
    Secure,
    /// A dynamic image asked to list its libraries
    /// (`LD_TRACE_LOADED_OBJECTS`, what `ldd` sets): its loader prints
    /// the list and exits before the client could start, so the relay
    /// gives it host pipes for the atoll descriptors it writes to.
    Traced,
}

/// The loader's own variables, which the relay (itself dynamic) must not
/// obey: passed to it renamed with [`LOADER_ENV_PREFIX`], given back to
/// the program under their names.
const LOADER_VARS: &[&str] = &[
    "LD_TRACE_LOADED_OBJECTS",
    "LD_DEBUG",
    "LD_DEBUG_OUTPUT",
    "LD_AUDIT",
    "LD_PROFILE",
    "LD_PROFILE_OUTPUT",
    "LD_SHOW_AUXV",
    "LD_VERBOSE",
    "LD_WARN",
    "LD_BIND_NOT",
    // Not the loader's, but for the program's loader only: the copies of
    // its libraries (`libs`), which the relay's own start would remove.
    super::libs::ENV_LIBS,
];

/// Prefix of a loader variable hidden from the relay (`atoll __foreign`).
pub const LOADER_ENV_PREFIX: &str = "ATOLL_LOADER_";

/// Does the environment ask the loader to list libraries instead of
/// running the program?
pub(super) fn traces_loading(env: &[&[u8]]) -> bool {
    env.iter().any(|e| {
        e.strip_prefix(b"LD_TRACE_LOADED_OBJECTS=")
            .is_some_and(|v| !v.is_empty())
    })
}

/// Is this process a relay (`atoll __foreign …`), starting its program?
pub(super) fn in_relay() -> bool {
    std::env::args_os().nth(1).as_deref() == Some(std::ffi::OsStr::new(FOREIGN))
}

/// The environment of a relay: the loader's variables renamed.
pub(super) fn hide_loader_vars(env: &mut [Vec<u8>]) {
    for e in env.iter_mut() {
        let name_end = e.iter().position(|&b| b == b'=').unwrap_or(e.len());
        if LOADER_VARS.iter().any(|v| v.as_bytes() == &e[..name_end]) {
            let mut renamed = LOADER_ENV_PREFIX.as_bytes().to_vec();
            renamed.extend_from_slice(e);
            *e = renamed;
        }
    }
}

/// Would the host file at `path` (relative to `dirfd`) run without the
/// client library? A statically linked ELF image, or one that runs in
/// secure-execution mode (`AT_SECURE`: set-user-ID or set-group-ID to
/// someone else, file capabilities), where the loader ignores our
/// `LD_PRELOAD` path. Anything unreadable or not ELF (a `#!` script, whose
/// interpreter the kernel runs) is taken to load it.
#[cfg(test)]
pub(super) fn cannot_load_client_at(dirfd: i64, path: &[u8]) -> bool {
    foreign_at(dirfd, path).is_some()
}

/// As [`cannot_load_client_at`], saying why; secure execution wins over
/// static linking.
pub(super) fn foreign_at(dirfd: i64, path: &[u8]) -> Option<Foreign> {
    let fd = super::libs::open_host(dirfd, path)?;
    if runs_secure(fd.as_raw_fd()) {
        Some(Foreign::Secure)
    } else {
        is_static(fd.as_raw_fd()).then_some(Foreign::Static)
    }
}

/// Does executing the image in `fd` give the process `AT_SECURE` (the
/// kernel's `bprm->secureexec`): a set-user-ID bit for an owner other than
/// our real user, a set-group-ID bit (with group execute) for a group
/// other than our real group, or file capabilities?
fn runs_secure(fd: i32) -> bool {
    let Ok(st) = sys::fstat(fd) else {
        return false;
    };
    let (uid, gid) = (rustix::process::getuid(), rustix::process::getgid());
    let mode = st.st_mode;
    if mode & libc::S_ISUID != 0 && st.st_uid != uid.as_raw() {
        return true;
    }
    if mode & (libc::S_ISGID | libc::S_IXGRP) == libc::S_ISGID | libc::S_IXGRP
        && st.st_gid != gid.as_raw()
    {
        return true;
    }
    // SAFETY: a size query (no buffer) of an attribute of an open file.
    let caps = unsafe {
        sys::sc(
            libc::SYS_fgetxattr,
            fd as u64,
            c"security.capability".as_ptr() as u64,
            0,
            0,
        )
    };
    caps > 0
}

/// Is the image in `fd` a statically linked 64-bit ELF image?
pub(super) fn is_static(fd: i32) -> bool {
    let mut head = [0u8; 64];
    if sys::pread(fd, &mut head, 0) != head.len() as i64 {
        return false;
    }
    let Some(phdrs) = program_headers(&head) else {
        return false;
    };
    let (off, size, count) = phdrs;
    let mut table = vec![0u8; size * count];
    if sys::pread(fd, &mut table, off) != table.len() as i64 {
        return false;
    }
    let interp = table
        .chunks_exact(size)
        .any(|ph| u32::from_le_bytes([ph[0], ph[1], ph[2], ph[3]]) == PT_INTERP);
    // The dynamic loader names no interpreter either, but it has a name
    // of its own and loads `LD_PRELOAD` (`rtld`).
    !interp && super::libs::read_dynamic(fd).is_none_or(|d| d.soname.is_none())
}

/// `(offset, entry size, count)` of the program header table of a 64-bit
/// little-endian ELF header, `None` for anything else.
fn program_headers(head: &[u8; 64]) -> Option<(u64, usize, usize)> {
    if &head[..4] != b"\x7fELF" || head[4] != 2 || head[5] != 1 {
        return None;
    }
    let u16_at = |i: usize| u16::from_le_bytes([head[i], head[i + 1]]) as usize;
    let mut off = [0u8; 8];
    off.copy_from_slice(&head[32..40]);
    let (size, count) = (u16_at(54), u16_at(56));
    (size >= 4 && (1..=MAX_PHDRS).contains(&count)).then_some((
        u64::from_le_bytes(off),
        size,
        count,
    ))
}

/// The relay's `(path, argv)` for the image at `path` given `argv`, which
/// would inherit the atoll descriptors `fds`: `atoll __foreign FDS MOUNT
/// PATH ARGV…`, through the instance's link to its executable. `mount` is
/// the mount whose paths the relay serves (`-`: none, only descriptors).
pub(super) fn divert(
    socket_path: &str,
    mount: Option<&[u8]>,
    path: &[u8],
    argv: &[Vec<u8>],
    fds: &[i32],
) -> Option<(Vec<u8>, Vec<Vec<u8>>)> {
    let dir = std::path::Path::new(socket_path).parent()?;
    let atoll = dir.join(EXE_LINK).into_os_string().into_encoded_bytes();
    let list = if fds.is_empty() {
        "-".to_string()
    } else {
        fds.iter().map(i32::to_string).collect::<Vec<_>>().join(",")
    };
    let mut out = vec![
        atoll.clone(),
        FOREIGN.as_bytes().to_vec(),
        list.into_bytes(),
        mount.unwrap_or(b"-").to_vec(),
        path.to_vec(),
    ];
    out.extend(argv.iter().cloned());
    Some((atoll, out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loader_s_variables_are_hidden_from_the_relay_only() {
        let mut env = vec![
            b"LD_TRACE_LOADED_OBJECTS=1".to_vec(),
            b"LD_PRELOAD=/l.so".to_vec(),
            b"LD_DEBUGX=1".to_vec(),
            b"LD_DEBUG=libs".to_vec(),
        ];
        assert!(traces_loading(
            &env.iter().map(|e| &e[..]).collect::<Vec<_>>()
        ));
        hide_loader_vars(&mut env);
        assert_eq!(
            env,
            [
                b"ATOLL_LOADER_LD_TRACE_LOADED_OBJECTS=1".to_vec(),
                b"LD_PRELOAD=/l.so".to_vec(),
                b"LD_DEBUGX=1".to_vec(),
                b"ATOLL_LOADER_LD_DEBUG=libs".to_vec(),
            ]
        );
        assert!(!traces_loading(&[b"LD_TRACE_LOADED_OBJECTS="]));
    }

    fn header(class: u8, phoff: u64, size: u16, count: u16) -> [u8; 64] {
        let mut h = [0u8; 64];
        h[..4].copy_from_slice(b"\x7fELF");
        h[4] = class;
        h[5] = 1;
        h[32..40].copy_from_slice(&phoff.to_le_bytes());
        h[54..56].copy_from_slice(&size.to_le_bytes());
        h[56..58].copy_from_slice(&count.to_le_bytes());
        h
    }

    #[test]
    fn only_sane_64_bit_elf_headers_name_a_table() {
        assert_eq!(program_headers(&header(2, 64, 56, 13)), Some((64, 56, 13)));
        assert_eq!(program_headers(&header(1, 64, 56, 13)), None);
        assert_eq!(program_headers(&header(2, 64, 56, 0)), None);
        assert_eq!(program_headers(&header(2, 64, 56, 1000)), None);
        let mut script = [0u8; 64];
        script[..2].copy_from_slice(b"#!");
        assert_eq!(program_headers(&script), None);
    }

    #[test]
    fn this_test_binary_is_dynamic_and_a_script_is_not_static() {
        let me = std::fs::read_link("/proc/self/exe").unwrap();
        let path = me.as_os_str().as_encoded_bytes();
        assert!(!cannot_load_client_at(libc::AT_FDCWD as i64, path));
        assert!(!cannot_load_client_at(
            libc::AT_FDCWD as i64,
            b"/nonexistent/prog"
        ));
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("s");
        std::fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
        let p = script.as_os_str().as_encoded_bytes();
        assert!(!cannot_load_client_at(libc::AT_FDCWD as i64, p));
    }

    #[test]
    fn a_relay_with_no_descriptors_serves_paths_and_a_secure_one_does_not() {
        let (_, argv) = divert("/r/boot.sock", None, b"/p", &[b"p".to_vec()], &[]).unwrap();
        assert_eq!(argv[2..4], [b"-".to_vec(), b"-".to_vec()]);
    }

    #[test]
    fn the_relay_runs_the_instance_s_atoll_with_the_descriptor_list() {
        let (path, argv) = divert(
            "/run/atoll/abc/boot.sock",
            Some(b"/atoll"),
            b"/bin/prog",
            &[b"prog".to_vec(), b"-x".to_vec()],
            &[0, 1, 5],
        )
        .unwrap();
        assert_eq!(path, b"/run/atoll/abc/atoll");
        let argv: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
        assert_eq!(
            argv,
            [
                &b"/run/atoll/abc/atoll"[..],
                b"__foreign",
                b"0,1,5",
                b"/atoll",
                b"/bin/prog",
                b"prog",
                b"-x"
            ]
        );
    }
}
