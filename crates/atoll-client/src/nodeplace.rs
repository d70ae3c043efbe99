//! `execve` on another host (fos §4.2 spawning; `atoll_sched::nodes`).
//!
//! When the new image's environment asks for another node and this
//! process's instance is an `atoll node` (its runtime directory holds a
//! node file), the exec becomes one of `atoll __remote-spawn ADDR PATH
//! ARGV…` in this process: the proxy keeps the pid, the parent, the
//! descriptor table (atoll pipes included, handed over as for any exec)
//! and the process group, starts the program on the chosen node and ends
//! as it ended.
//!
//! Only host programs (a path the kernel can execute here) go: an atoll
//! ELF is a memfd of this host, and what the kernel would refuse is
//! refused by the local exec, before the image is replaced. A relative
//! path (`./prog`) is made absolute against the kernel's cwd, which is the
//! caller's own when the path names a host program: the other node runs
//! the program at that path of its host, as it would an absolute one.

use atoll_sched::nodes::{self, NodeFile};

/// The proxy's `(path, argv)` replacing `(path, argv)` when the exec runs
/// on another node; `None`: exec here.
pub fn divert(
    env: &[Vec<u8>],
    socket_path: &str,
    path: &[u8],
    dirfd: i64,
    argv: &[Vec<u8>],
    cursor: u64,
) -> Option<(Vec<u8>, Vec<Vec<u8>>)> {
    let policy = nodes::policy_in_env(env.iter().map(Vec::as_slice))?;
    if policy == nodes::NodePolicy::Local || dirfd != libc::AT_FDCWD as i64 || path.is_empty() {
        return None;
    }
    let path = host_absolute(path)?;
    let dir = std::path::Path::new(socket_path).parent()?;
    let file = NodeFile::read(dir)?;
    let target = nodes::choose(policy, cursor, file.rank, file.peers.len())?;
    let host_path = std::ffi::CString::new(path.as_slice()).ok()?;
    rustix::fs::access(host_path.as_c_str(), rustix::fs::Access::EXEC_OK).ok()?;
    let atoll = file.atoll.as_os_str().as_encoded_bytes().to_vec();
    let mut out = vec![
        atoll.clone(),
        nodes::REMOTE_SPAWN.as_bytes().to_vec(),
        file.peers[target].as_bytes().to_vec(),
        path,
    ];
    out.extend(argv.iter().cloned());
    Some((atoll, out))
}

/// `path` as an absolute host path: relative ones joined to the kernel's
/// cwd (a raw `getcwd`, never atoll's).
fn host_absolute(path: &[u8]) -> Option<Vec<u8>> {
    if path.first() == Some(&b'/') {
        return Some(path.to_vec());
    }
    let cwd = rustix::process::getcwd(Vec::new()).ok()?;
    let mut abs = cwd.into_bytes();
    if abs.last() != Some(&b'/') {
        abs.push(b'/');
    }
    abs.extend_from_slice(path);
    Some(abs)
}
