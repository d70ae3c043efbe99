//! Machine topology for creation affinity (Hare §3.7.5): which CPUs share
//! a socket (physical package) and NUMA node, and so which file servers are
//! "close by" for a client running on a given CPU.
//!
//! The boot side reads `/sys` once ([`Topology::from_sysfs`]) and hands the
//! result to every client in the boot info, so a client only needs its
//! current CPU (`getcpu`, cheap through the vDSO) to decide where a new
//! inode goes. CPUs are grouped into *domains*: two CPUs are in the same
//! domain when they have the same physical package id and the same NUMA
//! node. Missing files mean "one socket": every CPU is in domain 0.
//!
//! Sources, relative to the sysfs root (`/sys`, or `ATOLL_SYSFS_ROOT` as a
//! testing aid that points at a fake tree):
//! * `devices/system/cpu/cpuN/topology/physical_package_id`;
//! * `devices/system/node/nodeM/cpulist` (e.g. `0-3,8-11`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Environment variable naming a directory to read instead of `/sys`
/// (a testing aid: lets tests describe a multi-socket machine).
pub const ENV_SYSFS_ROOT: &str = "ATOLL_SYSFS_ROOT";

/// Domain of a server that is not pinned: close to every client, so
/// creation affinity never moves an inode to or away from it.
pub const UNKNOWN: u32 = u32::MAX;

/// Locality domains of CPUs and servers.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct Topology {
    /// Domain of each CPU, indexed by CPU number. CPUs past the end are in
    /// domain 0 (the "one socket" fallback).
    pub cpu_domain: Vec<u32>,
    /// Domain of each server's core ([`UNKNOWN`] if not pinned).
    pub server_domain: Vec<u32>,
}

impl Topology {
    /// Read the topology under `root` (see the module docs) and place
    /// servers pinned to `server_cores` (`None`: not pinned).
    pub fn from_sysfs(root: &Path, server_cores: &[Option<usize>]) -> Topology {
        let cpu_domain = read_cpu_domains(root);
        let mut t = Topology {
            cpu_domain,
            server_domain: Vec::new(),
        };
        t.server_domain = server_cores
            .iter()
            .map(|c| c.map_or(UNKNOWN, |c| t.domain_of_cpu(c)))
            .collect();
        t
    }

    /// The sysfs root to read: `ATOLL_SYSFS_ROOT` or `/sys`.
    pub fn sysfs_root() -> PathBuf {
        std::env::var_os(ENV_SYSFS_ROOT)
            .filter(|v| !v.is_empty())
            .map_or_else(|| PathBuf::from("/sys"), PathBuf::from)
    }

    pub fn domain_of_cpu(&self, cpu: usize) -> u32 {
        self.cpu_domain.get(cpu).copied().unwrap_or(0)
    }

    /// Is server `s` close to a client in `domain`? Unpinned servers and
    /// servers the topology does not know are treated as close.
    pub fn near(&self, s: usize, domain: u32) -> bool {
        match self.server_domain.get(s) {
            Some(&d) => d == UNKNOWN || d == domain,
            None => true,
        }
    }

    /// Servers pinned to a core of `domain`, in index order.
    pub fn local_servers(&self, domain: u32) -> impl Iterator<Item = usize> + '_ {
        self.server_domain
            .iter()
            .enumerate()
            .filter(move |(_, &d)| d == domain)
            .map(|(i, _)| i)
    }
}

/// Parse a sysfs CPU list such as `0-3,8,10-11` (whitespace tolerated).
/// Malformed parts are skipped.
pub fn parse_cpulist(s: &str) -> Vec<usize> {
    let mut v = Vec::new();
    for part in s.trim().split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.trim().parse::<usize>(), b.trim().parse::<usize>()) {
                    // Bounded: a corrupt list must not allocate without end.
                    if a <= b && b - a < 1 << 16 {
                        v.extend(a..=b);
                    }
                }
            }
            None => {
                if let Ok(a) = part.parse() {
                    v.push(a);
                }
            }
        }
    }
    v
}

/// Numbered children `prefixN` of `dir`.
fn numbered(dir: &Path, prefix: &str) -> Vec<(usize, PathBuf)> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<(usize, PathBuf)> = rd
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name();
            let n = name.to_str()?.strip_prefix(prefix)?.parse().ok()?;
            Some((n, e.path()))
        })
        .collect();
    v.sort();
    v
}

/// Largest CPU number we describe (bounds memory on a corrupt tree).
const MAX_CPU: usize = 1 << 14;

fn read_cpu_domains(root: &Path) -> Vec<u32> {
    let sys = root.join("devices/system");
    // cpu -> (package, node)
    let mut key: BTreeMap<usize, (i64, i64)> = BTreeMap::new();
    for (cpu, path) in numbered(&sys.join("cpu"), "cpu") {
        if cpu >= MAX_CPU {
            continue;
        }
        let pkg = std::fs::read_to_string(path.join("topology/physical_package_id"))
            .ok()
            .and_then(|s| s.trim().parse::<i64>().ok())
            .unwrap_or(0);
        key.insert(cpu, (pkg, 0));
    }
    for (node, path) in numbered(&sys.join("node"), "node") {
        let Ok(list) = std::fs::read_to_string(path.join("cpulist")) else {
            continue;
        };
        for cpu in parse_cpulist(&list) {
            if cpu < MAX_CPU {
                key.entry(cpu).or_insert((0, 0)).1 = node as i64;
            }
        }
    }
    let Some((&last, _)) = key.iter().next_back() else {
        return Vec::new(); // nothing known: one socket
    };
    // Number the distinct (package, node) pairs in order.
    let ids: BTreeMap<(i64, i64), u32> = key
        .values()
        .copied()
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .enumerate()
        .map(|(i, k)| (k, i as u32))
        .collect();
    let mut v = vec![0u32; last + 1];
    for (cpu, k) in &key {
        v[*cpu] = ids[k];
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Tree(PathBuf);

    impl Tree {
        fn new(tag: &str) -> Tree {
            let p = std::env::temp_dir().join(format!(
                "atoll-topo-{tag}-{}-{:?}",
                std::process::id(),
                std::thread::current().id()
            ));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(&p).unwrap();
            Tree(p)
        }
        fn cpu(&self, cpu: usize, pkg: &str) -> &Self {
            let d = self.0.join(format!("devices/system/cpu/cpu{cpu}/topology"));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("physical_package_id"), pkg).unwrap();
            self
        }
        fn node(&self, node: usize, list: &str) -> &Self {
            let d = self.0.join(format!("devices/system/node/node{node}"));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("cpulist"), list).unwrap();
            self
        }
    }

    impl Drop for Tree {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn cpulists_parse_ranges_singles_and_garbage() {
        assert_eq!(parse_cpulist("0-3,8,10-11\n"), [0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(parse_cpulist(" 5 "), [5]);
        assert_eq!(parse_cpulist(""), Vec::<usize>::new());
        assert_eq!(parse_cpulist("x,3-1,2"), [2]);
    }

    #[test]
    fn two_sockets_split_cpus_and_servers() {
        let t = Tree::new("two");
        t.cpu(0, "0\n").cpu(1, "1\n").cpu(2, "0\n").cpu(3, "1\n");
        let topo = Topology::from_sysfs(&t.0, &[Some(0), Some(1), Some(2), None]);
        assert_eq!(topo.cpu_domain, [0, 1, 0, 1]);
        assert_eq!(topo.server_domain, [0, 1, 0, UNKNOWN]);
        assert_eq!(topo.local_servers(0).collect::<Vec<_>>(), [0, 2]);
        assert_eq!(topo.local_servers(1).collect::<Vec<_>>(), [1]);
        assert!(topo.near(0, 0) && !topo.near(0, 1));
        assert!(topo.near(3, 0) && topo.near(3, 1), "unpinned is near");
    }

    #[test]
    fn numa_nodes_split_one_package() {
        let t = Tree::new("numa");
        t.cpu(0, "0").cpu(1, "0").cpu(2, "0").cpu(3, "0");
        t.node(0, "0-1").node(1, "2-3");
        let topo = Topology::from_sysfs(&t.0, &[Some(1), Some(3)]);
        assert_eq!(topo.cpu_domain, [0, 0, 1, 1]);
        assert_eq!(topo.server_domain, [0, 1]);
    }

    #[test]
    fn missing_tree_is_one_socket() {
        let t = Tree::new("empty");
        let topo = Topology::from_sysfs(&t.0.join("nope"), &[Some(0), Some(7)]);
        assert!(topo.cpu_domain.is_empty());
        assert_eq!(topo.server_domain, [0, 0]);
        assert_eq!(topo.domain_of_cpu(5), 0);
        assert!(topo.near(1, 0));
    }

    #[test]
    fn unreadable_package_ids_count_as_package_zero() {
        let t = Tree::new("bad");
        t.cpu(0, "garbage").cpu(2, "1");
        let topo = Topology::from_sysfs(&t.0, &[]);
        // cpu1 is absent: domain 0 by default; cpu2 in its own domain.
        assert_eq!(topo.cpu_domain, [0, 0, 1]);
    }
}
