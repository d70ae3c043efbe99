//! The default shape of an instance: how many file servers and how they
//! wait for messages, chosen from the machine when `--servers` and `--poll`
//! are not given.
//!
//! Hare leaves the choice to the user: the best number of servers depends
//! on the workload and the machine (Hare §5.3.2, Fig. 5-3: throughput of
//! timeshare against split and the best server count per benchmark), and
//! its evaluation runs one server per core in timeshare for want of a
//! better rule. On a small machine that is the worst shape: a lone program shares
//! its core with a server and every request costs a context switch each
//! way (Hare §5.3.3: "the time spent performing individual operations is
//! comparable to the cost of a context switch"). The rule here:
//!
//! * **Servers: half the usable cores, at least one** (at most
//!   `MAX_SERVERS`). Timeshare pins server i to usable core i, so the
//!   other half of the cores runs programs without a server beside them
//!   (what split does by force, Hare §5.3.2, left to the kernel's
//!   scheduler), while metadata still spreads over more servers as cores
//!   grow (Hare §5.3.1: creates, renames and directories scale with the
//!   servers). On 1 and 2 cores this is one server.
//! * **Poll: adaptive while a core is idle, block when the machine is
//!   busy.** A server spins briefly before sleeping (adaptive) only while
//!   the 1-minute load average leaves a CPU idle; with the load at or above
//!   the CPUs, or with one usable core, a spinning server only steals the
//!   CPU the program it waits for needs, so it sleeps at once. Spinning for
//!   good needs dedicated cores: it stays the default of `--split` only.
//!
//! Measured on 2 CPUs and on 1 (docs/BENCHMARKS.md, "Defaults from the
//! machine"): spinning in timeshare is 3–6× slower than either other mode;
//! under load `block` beats `adaptive`; one server beats two on an idle
//! 2-CPU machine. SMT siblings count as cores here.

use atoll_proto::boot::PollMode;

/// What the default shape is chosen from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Machine {
    /// Cores this process may run on (its affinity mask: a `taskset`
    /// restricted run counts only its own).
    pub usable: usize,
    /// CPUs online on the whole machine (what the load average is over).
    pub online: usize,
    /// The 1-minute load average, when known.
    pub load: Option<f64>,
}

impl Machine {
    /// This process's machine: its usable cores, the CPUs online and the
    /// 1-minute load average from `/proc/loadavg`.
    pub fn here(usable: usize) -> Machine {
        let online = std::fs::read_to_string("/sys/devices/system/cpu/online")
            .ok()
            .map(|s| atoll_proto::topology::parse_cpulist(s.trim()).len())
            .filter(|&n| n > 0)
            .unwrap_or(usable);
        let load = std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse().ok());
        Machine {
            usable,
            online: online.max(usable),
            load,
        }
    }

    /// No CPU idle: the load is at or above the CPUs online.
    fn busy(&self) -> bool {
        self.load.is_some_and(|l| l >= self.online as f64)
    }
}

/// The default server count and poll mode, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Shape {
    pub servers: usize,
    pub poll: PollMode,
    /// E.g. "default for 2 usable cores, load 0.30".
    pub why: String,
}

/// The default shape for `m` (module comment: the rule and its reasons).
pub fn default_shape(m: &Machine) -> Shape {
    let usable = m.usable.max(1);
    let servers = (usable / 2).clamp(1, atoll_proto::MAX_SERVERS);
    let poll = if usable == 1 || m.busy() {
        PollMode::Block
    } else {
        PollMode::Adaptive
    };
    let cores = if usable == 1 { "core" } else { "cores" };
    let load = match m.load {
        Some(l) => format!("load {l:.2}"),
        None => "load unknown".into(),
    };
    let of = if m.online != usable {
        format!(" of {}", m.online)
    } else {
        String::new()
    };
    Shape {
        servers,
        poll,
        why: format!("default for {usable} usable {cores}{of}, {load}"),
    }
}

/// `spin`, `block` or `adaptive`, as `--poll` says it.
pub fn poll_name(p: PollMode) -> &'static str {
    match p {
        PollMode::Spin => "spin",
        PollMode::Block => "block",
        PollMode::Adaptive => "adaptive",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(usable: usize, online: usize, load: Option<f64>) -> Machine {
        Machine {
            usable,
            online,
            load,
        }
    }

    #[test]
    fn table_of_machines() {
        use PollMode::{Adaptive as A, Block as B};
        // (usable, online, load) → (servers, poll)
        type Row = ((usize, usize, Option<f64>), (usize, PollMode));
        let table: &[Row] = &[
            ((1, 1, Some(0.0)), (1, B)),
            ((1, 2, Some(0.1)), (1, B)), // `taskset -c 0` on 2 CPUs
            ((2, 2, Some(0.3)), (1, A)),
            ((2, 2, Some(1.9)), (1, A)),
            ((2, 2, Some(2.0)), (1, B)),
            ((2, 2, Some(7.5)), (1, B)),
            ((2, 2, None), (1, A)),
            ((3, 3, Some(0.0)), (1, A)),
            ((4, 4, Some(0.5)), (2, A)),
            ((4, 4, Some(4.0)), (2, B)),
            ((4, 64, Some(8.0)), (2, A)), // 4 cores of an idle-ish 64
            ((8, 8, Some(1.0)), (4, A)),
            ((8, 8, Some(12.0)), (4, B)),
            ((64, 64, Some(3.0)), (32, A)),
            ((64, 64, Some(80.0)), (32, B)),
            ((256, 256, Some(10.0)), (64, A)), // capped at MAX_SERVERS
            ((256, 256, Some(300.0)), (64, B)),
        ];
        for &((usable, online, load), (servers, poll)) in table {
            let s = default_shape(&m(usable, online, load));
            assert_eq!(
                (s.servers, s.poll),
                (servers, poll),
                "{usable} usable of {online}, load {load:?}: {}",
                s.why
            );
        }
    }

    #[test]
    fn why_names_the_cores_and_the_load() {
        assert_eq!(
            default_shape(&m(2, 2, Some(0.3))).why,
            "default for 2 usable cores, load 0.30"
        );
        assert_eq!(
            default_shape(&m(1, 2, Some(1.25))).why,
            "default for 1 usable core of 2, load 1.25"
        );
        assert_eq!(
            default_shape(&m(4, 4, None)).why,
            "default for 4 usable cores, load unknown"
        );
    }

    #[test]
    fn servers_never_exceed_the_protocol_limit() {
        for usable in [1, 2, 127, 128, 129, 1024] {
            let s = default_shape(&m(usable, usable, Some(0.0)));
            assert!(s.servers >= 1 && s.servers <= atoll_proto::MAX_SERVERS);
        }
    }

    #[test]
    fn the_machine_here_counts_the_affinity_mask() {
        let here = Machine::here(1);
        assert_eq!(here.usable, 1);
        assert!(here.online >= 1);
    }
}
