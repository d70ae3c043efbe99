//! Placement across hosts (fos §4.2 spawning: a new process may start on
//! any machine of the image): which node an `execve` runs on, and what a
//! client needs to know to send it there.
//!
//! Every `atoll node` writes a [`NodeFile`] beside its boot socket: its
//! rank, the `atoll` executable and the peers' addresses. A client whose
//! new image carries `ATOLL_NODE_PLACEMENT` (`local`, `round-robin`, or
//! `rank:K`) and whose socket has such a file asks [`choose`]; when the
//! answer is another node, the client execs the *remote-spawn proxy*
//! (`atoll __remote-spawn ADDR PATH ARGV…`) in its place, which stays on
//! this host and relays the program's stdio, signals and exit status.

use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};

/// File in a node's runtime directory (beside `boot.sock`).
pub const NODE_FILE: &str = "node.peers";
/// Environment variable choosing the node of each `execve`.
pub const ENV_NODE_PLACEMENT: &str = "ATOLL_NODE_PLACEMENT";
/// Hidden `atoll` subcommand: the proxy of a program on another node.
pub const REMOTE_SPAWN: &str = "__remote-spawn";

/// Which node an exec runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodePolicy {
    /// The caller's node (the default).
    Local,
    /// Node `cursor % nodes` (the placement cursor, as for cores).
    RoundRobin,
    /// Always this node (tests, pinned jobs).
    Rank(usize),
}

impl NodePolicy {
    pub fn parse(s: &str) -> Option<NodePolicy> {
        match s {
            "local" => Some(NodePolicy::Local),
            "round-robin" | "rr" => Some(NodePolicy::RoundRobin),
            _ => s
                .strip_prefix("rank:")
                .and_then(|k| k.parse().ok())
                .map(NodePolicy::Rank),
        }
    }
}

/// The policy an environment (a new image's `envp`) asks for, if any.
pub fn policy_in_env<'a>(env: impl IntoIterator<Item = &'a [u8]>) -> Option<NodePolicy> {
    let key = ENV_NODE_PLACEMENT.as_bytes();
    env.into_iter()
        .filter_map(|e| e.strip_prefix(key)?.strip_prefix(b"="))
        .last()
        .and_then(|v| NodePolicy::parse(std::str::from_utf8(v).ok()?))
}

/// The node an exec under `policy` runs on; `None`: here.
pub fn choose(policy: NodePolicy, cursor: u64, me: usize, nodes: usize) -> Option<usize> {
    let k = match policy {
        NodePolicy::Local => return None,
        NodePolicy::RoundRobin if nodes > 0 => (cursor % nodes as u64) as usize,
        NodePolicy::RoundRobin => return None,
        NodePolicy::Rank(k) => k,
    };
    (k != me && k < nodes).then_some(k)
}

/// What a node publishes for its clients.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeFile {
    pub rank: usize,
    /// The `atoll` executable (runs the remote-spawn proxy).
    pub atoll: PathBuf,
    /// `host:port` of every node, by rank.
    pub peers: Vec<String>,
}

/// Largest node file read (a few hundred peers).
const MAX_FILE: usize = 64 * 1024;

impl NodeFile {
    /// `v1`, the rank, the executable, then one peer per line.
    pub fn encode(&self) -> String {
        let mut s = format!("v1\n{}\n{}\n", self.rank, self.atoll.display());
        for p in &self.peers {
            s.push_str(p);
            s.push('\n');
        }
        s
    }

    pub fn parse(s: &str) -> Option<NodeFile> {
        let mut lines = s.lines();
        if lines.next()? != "v1" {
            return None;
        }
        let rank = lines.next()?.parse().ok()?;
        let atoll = PathBuf::from(lines.next()?);
        let peers: Vec<String> = lines.map(str::to_string).collect();
        (rank < peers.len() && atoll.is_absolute()).then_some(NodeFile { rank, atoll, peers })
    }

    /// The file of the node whose runtime directory is `dir`, if any.
    /// Plain system calls (callable from inside the client library).
    pub fn read(dir: &Path) -> Option<NodeFile> {
        let fd = rustix::fs::open(
            dir.join(NODE_FILE),
            OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .ok()?;
        let mut buf = vec![0u8; MAX_FILE];
        let mut len = 0;
        while len < buf.len() {
            match rustix::io::read(fd.as_fd(), &mut buf[len..]) {
                Ok(0) => break,
                Ok(n) => len += n,
                Err(rustix::io::Errno::INTR) => continue,
                Err(_) => return None,
            }
        }
        NodeFile::parse(std::str::from_utf8(&buf[..len]).ok()?)
    }
}

/// This process's resource limits `(resource, soft, hard)`, for a program
/// started elsewhere on its behalf.
pub fn own_rlimits() -> Vec<(u32, u64, u64)> {
    crate::raw::rlimits()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_parse_and_choose_other_nodes_only() {
        assert_eq!(NodePolicy::parse("local"), Some(NodePolicy::Local));
        assert_eq!(NodePolicy::parse("rank:2"), Some(NodePolicy::Rank(2)));
        assert_eq!(NodePolicy::parse("rank:x"), None);
        assert_eq!(NodePolicy::parse("far"), None);
        let env: Vec<&[u8]> = vec![
            b"A=1",
            b"ATOLL_NODE_PLACEMENTX=rank:1",
            b"ATOLL_NODE_PLACEMENT=rr",
        ];
        assert_eq!(policy_in_env(env), Some(NodePolicy::RoundRobin));
        assert_eq!(choose(NodePolicy::Rank(2), 0, 0, 3), Some(2));
        assert_eq!(choose(NodePolicy::Rank(0), 0, 0, 3), None);
        assert_eq!(choose(NodePolicy::Rank(5), 0, 0, 3), None);
        let rr: Vec<_> = (0..4)
            .map(|c| choose(NodePolicy::RoundRobin, c, 1, 3))
            .collect();
        assert_eq!(rr, [Some(0), None, Some(2), Some(0)]);
        assert_eq!(choose(NodePolicy::Local, 1, 0, 3), None);
    }

    #[test]
    fn node_file_round_trips_and_rejects_garbage() {
        let f = NodeFile {
            rank: 1,
            atoll: "/usr/bin/atoll".into(),
            peers: vec!["10.0.0.1:7207".into(), "10.0.0.2:7207".into()],
        };
        assert_eq!(NodeFile::parse(&f.encode()), Some(f));
        assert_eq!(NodeFile::parse("v1\n3\n/bin/atoll\na:1\n"), None);
        assert_eq!(NodeFile::parse("v2\n0\n/bin/atoll\na:1\n"), None);
        assert_eq!(NodeFile::parse("v1\n0\natoll\na:1\n"), None);
    }
}
