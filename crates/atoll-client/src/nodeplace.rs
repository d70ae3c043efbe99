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
//! Only host programs (an absolute path the kernel can execute here) go:
//! an atoll ELF is a memfd of this host, and what the kernel would refuse
//! is refused by the local exec, before the image is replaced.

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
    if policy == nodes::NodePolicy::Local
        || dirfd != libc::AT_FDCWD as i64
        || path.first() != Some(&b'/')
    {
        return None;
    }
    let dir = std::path::Path::new(socket_path).parent()?;
    let file = NodeFile::read(dir)?;
    let target = nodes::choose(policy, cursor, file.rank, file.peers.len())?;
    let host_path = std::ffi::CString::new(path).ok()?;
    rustix::fs::access(host_path.as_c_str(), rustix::fs::Access::EXEC_OK).ok()?;
    let atoll = file.atoll.as_os_str().as_encoded_bytes().to_vec();
    let mut out = vec![
        atoll.clone(),
        nodes::REMOTE_SPAWN.as_bytes().to_vec(),
        file.peers[target].as_bytes().to_vec(),
        path.to_vec(),
    ];
    out.extend(argv.iter().cloned());
    Some((atoll, out))
}
