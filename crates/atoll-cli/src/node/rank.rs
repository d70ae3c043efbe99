//! Which hosts form the image and which one this node is: `--peers`, else
//! the host list Slurm gave the job (`SLURM_JOB_NODELIST`, in Slurm's
//! compressed form); `--rank`, else the rank a launcher gave the process
//! (Open MPI, MPICH's PMI, Slurm — launching hosts is theirs, not ours),
//! else the first entry of the peers that names an address of this host.

use std::net::{TcpListener, ToSocketAddrs};

/// The port of a peer given without one.
pub const DEFAULT_PORT: u16 = 7207;

/// `host[:port],…` → `host:port` each.
pub fn parse_peers(list: &str) -> Result<Vec<String>, String> {
    let peers: Vec<String> = list
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| {
            if p.rsplit_once(':')
                .is_some_and(|(_, port)| port.parse::<u16>().is_ok())
            {
                p.to_string()
            } else {
                format!("{p}:{DEFAULT_PORT}")
            }
        })
        .collect();
    if peers.is_empty() {
        return Err("--peers names no host".into());
    }
    Ok(peers)
}

/// The peers of a node started without `--peers`: Slurm's host list of the
/// job, one node per host (`srun --ntasks-per-node=1`, the only layout in
/// which Slurm's task rank is the host's place in that list).
pub fn peers_from_slurm(env: &impl Fn(&str) -> Option<String>) -> Result<Vec<String>, String> {
    let list = env("SLURM_JOB_NODELIST")
        .or_else(|| env("SLURM_NODELIST"))
        .ok_or("give --peers HOST[:PORT],… (or run under Slurm, which names the hosts)")?;
    let hosts = expand_hostlist(&list)?;
    if let Some(n) = env("SLURM_NTASKS").and_then(|n| n.trim().parse::<usize>().ok()) {
        if n != hosts.len() {
            return Err(format!(
                "Slurm runs {n} tasks on {} hosts: run one node per host \
                 (srun --ntasks-per-node=1), or give --peers",
                hosts.len()
            ));
        }
    }
    parse_peers(&hosts.join(","))
}

/// Slurm's compressed host list, expanded in order: `n[1-3,07],gpu[01-02]x`
/// → `n1 n2 n3 n07 gpu01x gpu02x`. A range keeps the width of its first
/// number (`[08-10]` → `08 09 10`); several bracket groups in one name
/// multiply out, left group outermost, as `scontrol show hostnames` does.
pub fn expand_hostlist(list: &str) -> Result<Vec<String>, String> {
    let mut hosts = Vec::new();
    for item in split_top_level(list)? {
        hosts.extend(expand_name(item)?);
    }
    if hosts.is_empty() {
        return Err(format!("host list {list:?} names no host"));
    }
    Ok(hosts)
}

/// Items of a host list: split at commas outside brackets.
fn split_top_level(list: &str) -> Result<Vec<&str>, String> {
    let (mut items, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in list.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                items.push(list[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
        if !(0..=1).contains(&depth) {
            return Err(format!("host list {list:?}: unbalanced brackets"));
        }
    }
    if depth != 0 {
        return Err(format!("host list {list:?}: unbalanced brackets"));
    }
    items.push(list[start..].trim());
    Ok(items.into_iter().filter(|i| !i.is_empty()).collect())
}

/// One name with any number of `[ranges]` groups.
fn expand_name(name: &str) -> Result<Vec<String>, String> {
    let Some(open) = name.find('[') else {
        return Ok(vec![name.to_string()]);
    };
    let close = open + name[open..].find(']').ok_or("unbalanced brackets")?;
    let (prefix, ranges, rest) = (&name[..open], &name[open + 1..close], &name[close + 1..]);
    let tails = expand_name(rest)?;
    let mut out = Vec::new();
    for range in ranges.split(',') {
        let (lo, hi) = range.split_once('-').unwrap_or((range, range));
        let bad = || format!("host list range {range:?} in {name:?}");
        let (a, b) = (
            lo.trim().parse::<u64>().map_err(|_| bad())?,
            hi.trim().parse::<u64>().map_err(|_| bad())?,
        );
        if a > b || b - a > 100_000 {
            return Err(bad());
        }
        let width = lo.trim().len();
        for n in a..=b {
            for tail in &tails {
                out.push(format!("{prefix}{n:0width$}{tail}"));
            }
        }
    }
    Ok(out)
}

/// (rank, size) variables of the launchers, most specific first: an MPI
/// launcher inside a Slurm allocation sets its own beside Slurm's.
const LAUNCHERS: [(&str, &str); 4] = [
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
    ("PMI_RANK", "PMI_SIZE"),
    ("SLURM_PROCID", "SLURM_NTASKS"),
    ("SLURM_NODEID", "SLURM_NNODES"),
];

/// The rank a launcher set, checked against the number of peers.
pub fn from_launcher(
    env: &impl Fn(&str) -> Option<String>,
    peers: usize,
) -> Result<Option<usize>, String> {
    for (rank, size) in LAUNCHERS {
        let Some(r) = env(rank) else { continue };
        let r: usize = r
            .trim()
            .parse()
            .map_err(|_| format!("{rank}={r} is not a rank"))?;
        if let Some(n) = env(size).and_then(|s| s.trim().parse::<usize>().ok()) {
            if n != peers {
                return Err(format!("{size}={n} but --peers names {peers} hosts"));
            }
        }
        return Ok(Some(r));
    }
    Ok(None)
}

/// The first peer whose address belongs to this host (binding to it
/// succeeds only here).
pub fn from_addresses(peers: &[String]) -> Option<usize> {
    peers.iter().position(|p| {
        p.to_socket_addrs().ok().is_some_and(|mut addrs| {
            addrs.any(|mut a| {
                a.set_port(0);
                TcpListener::bind(a).is_ok()
            })
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn peers_get_the_default_port_unless_they_name_one() {
        let p = parse_peers("10.0.0.1, h2:9000,,h3").unwrap();
        assert_eq!(p, ["10.0.0.1:7207", "h2:9000", "h3:7207"]);
        assert!(parse_peers(" , ").is_err());
    }

    #[test]
    fn launcher_ranks_are_read_most_specific_first_and_checked() {
        let vars: HashMap<&str, &str> = [
            ("SLURM_PROCID", "2"),
            ("SLURM_NTASKS", "3"),
            ("OMPI_COMM_WORLD_RANK", "1"),
            ("OMPI_COMM_WORLD_SIZE", "3"),
        ]
        .into();
        let env = |k: &str| vars.get(k).map(|v| v.to_string());
        assert_eq!(from_launcher(&env, 3), Ok(Some(1)));
        assert!(from_launcher(&env, 4).is_err());
        let slurm: HashMap<&str, &str> = [("SLURM_PROCID", "2"), ("SLURM_NTASKS", "3")].into();
        let env = |k: &str| slurm.get(k).map(|v| v.to_string());
        assert_eq!(from_launcher(&env, 3), Ok(Some(2)));
        let pmi: HashMap<&str, &str> = [("PMI_RANK", "x")].into();
        let env = |k: &str| pmi.get(k).map(|v| v.to_string());
        assert!(from_launcher(&env, 3).is_err());
        assert_eq!(from_launcher(&|_: &str| None, 3), Ok(None));
    }

    #[test]
    fn slurm_host_lists_expand_as_scontrol_does() {
        let e = |s: &str| expand_hostlist(s).unwrap();
        assert_eq!(e("a,b"), ["a", "b"]);
        assert_eq!(e("n[1-3,07]"), ["n1", "n2", "n3", "n07"]);
        assert_eq!(e("n[08-10]x,gpu1"), ["n08x", "n09x", "n10x", "gpu1"]);
        assert_eq!(e("r[1-2]-n[1-2]"), ["r1-n1", "r1-n2", "r2-n1", "r2-n2"]);
        for bad in ["n[1-", "n]1[", "n[3-1]", "n[a]", "", "n[1-2]]"] {
            assert!(expand_hostlist(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn peers_come_from_slurm_only_with_one_task_per_host() {
        let vars: HashMap<&str, &str> =
            [("SLURM_JOB_NODELIST", "c[1-3]"), ("SLURM_NTASKS", "3")].into();
        let env = |k: &str| vars.get(k).map(|v| v.to_string());
        assert_eq!(
            peers_from_slurm(&env).unwrap(),
            ["c1:7207", "c2:7207", "c3:7207"]
        );
        let vars: HashMap<&str, &str> =
            [("SLURM_NODELIST", "c[1-3]"), ("SLURM_NTASKS", "6")].into();
        let env = |k: &str| vars.get(k).map(|v| v.to_string());
        assert!(peers_from_slurm(&env)
            .unwrap_err()
            .contains("ntasks-per-node"));
        assert!(peers_from_slurm(&|_: &str| None).is_err());
    }

    #[test]
    fn the_rank_is_the_first_peer_with_a_local_address() {
        // 192.0.2.0/24 is TEST-NET-1: never an address of this host.
        let peers = parse_peers("192.0.2.7,127.0.0.1,127.0.0.1:9").unwrap();
        assert_eq!(from_addresses(&peers), Some(1));
        assert_eq!(from_addresses(&parse_peers("192.0.2.7").unwrap()), None);
    }
}
