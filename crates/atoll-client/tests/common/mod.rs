//! Shared harness: one instance per test binary (a process can be the
//! client of one instance only), booted in-process, and helpers to drive
//! `dispatch` with raw system-call numbers and pointers to local buffers.
#![allow(dead_code)]

use std::ffi::CString;
use std::sync::OnceLock;

use atoll_client::Dispatch;
use atoll_proto::boot::{PollMode, Without};
use atoll_server::{Instance, InstanceConfig};

pub struct Env {
    pub mount: String,
    pub instance: Instance,
    _dir: tempfile::TempDir,
}

static ENV: OnceLock<Env> = OnceLock::new();

/// Boot the instance (2 servers so that cross-server paths are exercised;
/// `dist` and below are distributed directories) and attach.
pub fn env() -> &'static Env {
    env_with(2)
}

/// [`env`] with `servers` file servers, if this is the first call of the
/// test binary (the instance is booted once).
pub fn env_with(servers: usize) -> &'static Env {
    env_configured(servers, |_| {})
}

/// [`env_with`], the configuration changed by `tweak` first (e.g. server
/// processes started from the test binary itself).
pub fn env_configured(servers: usize, tweak: impl FnOnce(&mut InstanceConfig)) -> &'static Env {
    ENV.get_or_init(|| {
        let dir = tempfile::tempdir().expect("tempdir");
        let mount = format!("/atoll-client-test-{}", std::process::id());
        let mut config = InstanceConfig {
            servers,
            hosts: 0,
            auto_scale: false,
            room: 0,
            memory: 64 << 20,
            mount: mount.clone(),
            poll: PollMode::Adaptive,
            split: false,
            server_cores: Vec::new(),
            island: atoll_proto::boot::Island::Coherent,
            without: Without::default(),
            distribute: vec!["dist".to_string()],
            adaptive_dirs: false,
            fs_policy: Default::default(),
            syscall_sites: Default::default(),
            inodes: None,
            runtime_root: dir.path().to_path_buf(),
            server_exe: None,
        };
        tweak(&mut config);
        let inst = Instance::boot(config).expect("boot instance");
        std::env::set_var(atoll_proto::boot::ENV_SOCKET, inst.socket_path());
        assert!(atoll_client::init(), "client attaches");
        assert!(atoll_client::active());
        Env {
            mount,
            instance: inst,
            _dir: dir,
        }
    })
}

/// Absolute atoll path of `rel`.
pub fn p(rel: &str) -> CString {
    let e = env();
    if rel.is_empty() {
        CString::new(e.mount.clone()).unwrap()
    } else {
        CString::new(format!("{}/{}", e.mount, rel)).unwrap()
    }
}

/// Issue `nr` through the client; it must be atoll's.
pub fn sc(nr: i64, a: &[u64]) -> i64 {
    let mut args = [0u64; 6];
    args[..a.len()].copy_from_slice(a);
    match atoll_client::dispatch(nr, &args) {
        Dispatch::Done(v) => v,
        Dispatch::Host => panic!("syscall {nr} with {a:?} was not handled by atoll"),
    }
}

/// Issue `nr` through the client, expecting Linux to get it.
pub fn host(nr: i64, a: &[u64]) -> Dispatch {
    let mut args = [0u64; 6];
    args[..a.len()].copy_from_slice(a);
    atoll_client::dispatch(nr, &args)
}

pub fn ptr(c: &CString) -> u64 {
    c.as_ptr() as u64
}

pub fn open(path: &CString, flags: i32, mode: u32) -> i64 {
    sc(libc::SYS_open, &[ptr(path), flags as u64, mode as u64])
}

pub fn write(fd: i64, data: &[u8]) -> i64 {
    sc(
        libc::SYS_write,
        &[fd as u64, data.as_ptr() as u64, data.len() as u64],
    )
}

pub fn read(fd: i64, buf: &mut [u8]) -> i64 {
    sc(
        libc::SYS_read,
        &[fd as u64, buf.as_mut_ptr() as u64, buf.len() as u64],
    )
}

pub fn close(fd: i64) -> i64 {
    sc(libc::SYS_close, &[fd as u64])
}

pub fn stat(path: &CString) -> Result<libc::stat, i64> {
    // SAFETY: all-zero is a valid `struct stat`.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let r = sc(libc::SYS_stat, &[ptr(path), &mut st as *mut _ as u64]);
    if r < 0 {
        Err(r)
    } else {
        Ok(st)
    }
}

pub fn lstat(path: &CString) -> Result<libc::stat, i64> {
    // SAFETY: all-zero is a valid `struct stat`.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let r = sc(libc::SYS_lstat, &[ptr(path), &mut st as *mut _ as u64]);
    if r < 0 {
        Err(r)
    } else {
        Ok(st)
    }
}

pub fn mkdir(path: &CString, mode: u32) -> i64 {
    sc(libc::SYS_mkdir, &[ptr(path), mode as u64])
}

/// Create `path` with `data`.
pub fn put(path: &CString, data: &[u8]) {
    let fd = open(path, libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC, 0o644);
    assert!(fd >= 0, "create {path:?}: {fd}");
    assert_eq!(write(fd, data), data.len() as i64);
    assert_eq!(close(fd), 0);
}

/// Whole content of `path`.
pub fn get(path: &CString) -> Vec<u8> {
    let fd = open(path, libc::O_RDONLY, 0);
    assert!(fd >= 0, "open {path:?}: {fd}");
    let mut out = Vec::new();
    let mut buf = [0u8; 3000];
    loop {
        let n = read(fd, &mut buf);
        assert!(n >= 0, "read: {n}");
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n as usize]);
    }
    close(fd);
    out
}

/// Names in a directory via getdents64 (without `.` and `..`), sorted.
pub fn list(path: &CString) -> Vec<String> {
    let fd = open(path, libc::O_RDONLY | libc::O_DIRECTORY, 0);
    assert!(fd >= 0, "opendir {path:?}: {fd}");
    let mut names = Vec::new();
    let mut buf = vec![0u8; 512];
    loop {
        let n = sc(
            libc::SYS_getdents64,
            &[fd as u64, buf.as_mut_ptr() as u64, buf.len() as u64],
        );
        assert!(n >= 0, "getdents64: {n}");
        if n == 0 {
            break;
        }
        let mut pos = 0usize;
        while pos < n as usize {
            let reclen = u16::from_ne_bytes([buf[pos + 16], buf[pos + 17]]) as usize;
            let name = &buf[pos + 19..pos + reclen];
            let name = &name[..name.iter().position(|&b| b == 0).unwrap()];
            let s = String::from_utf8_lossy(name).into_owned();
            if s != "." && s != ".." {
                names.push(s);
            }
            pos += reclen;
        }
    }
    close(fd);
    names.sort();
    names
}

pub const ENOENT: i64 = -(libc::ENOENT as i64);
pub const EEXIST: i64 = -(libc::EEXIST as i64);
pub const ENOTDIR: i64 = -(libc::ENOTDIR as i64);
pub const EISDIR: i64 = -(libc::EISDIR as i64);
pub const ENOTEMPTY: i64 = -(libc::ENOTEMPTY as i64);
pub const ELOOP: i64 = -(libc::ELOOP as i64);
pub const ENAMETOOLONG: i64 = -(libc::ENAMETOOLONG as i64);
pub const EINVAL: i64 = -(libc::EINVAL as i64);
pub const EBADF: i64 = -(libc::EBADF as i64);
