//! Which node this is: `--rank`, else the rank a launcher gave the process
//! (Open MPI, MPICH's PMI, Slurm — launching hosts is theirs, not ours),
//! else the first entry of `--peers` that names an address of this host.

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
    fn the_rank_is_the_first_peer_with_a_local_address() {
        // 192.0.2.0/24 is TEST-NET-1: never an address of this host.
        let peers = parse_peers("192.0.2.7,127.0.0.1,127.0.0.1:9").unwrap();
        assert_eq!(from_addresses(&peers), Some(1));
        assert_eq!(from_addresses(&parse_peers("192.0.2.7").unwrap()), None);
    }
}
