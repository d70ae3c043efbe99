//! What `atoll top` shows, computed from two `atoll status` snapshots: the
//! rates are differences over the interval. Pure, so it is unit-tested
//! without an instance.

use std::collections::BTreeMap;

use atoll_proto::boot::InstanceStatus;
use serde::Serialize;

/// One server's row.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct ServerRow {
    pub server: u32,
    pub core: i32,
    /// Requests served per second.
    pub ops_per_s: f64,
    /// The busiest operations, `(name, per second)`, most first.
    pub top_ops: Vec<(String, f64)>,
    /// Share of the interval spent serving requests, in percent.
    pub busy_pct: f64,
    /// Request bytes queued in its rings at the second snapshot.
    pub ring_bytes: u64,
    pub channels: u64,
    pub sessions: u64,
    pub inodes: u64,
    pub blocks_used: u64,
    pub blocks_total: u64,
    /// Times this server was restarted (servers are not restarted yet).
    pub restarts: u64,
}

/// One client process's row.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct ClientRow {
    pub session: u64,
    pub pid: u32,
    /// `/proc/PID/comm`, or empty when the process is not visible.
    pub command: String,
    /// Requests per second to all servers together.
    pub ops_per_s: f64,
    /// System calls per second that reached atoll through a trap.
    pub traps_per_s: f64,
    /// Lookup-cache hit rate in percent so far (`None` before any lookup
    /// was reported).
    pub dcache_hit_pct: Option<f64>,
}

/// One directory of the hot-directory pane: a directory some server saw
/// name operations in (lookups, creations, unlinks, renames, readdir)
/// during the interval.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct DirRow {
    /// The directory's inode number (`st_ino`, as `ls -i` shows it).
    pub ino: u64,
    /// Its path as programs in the instance see it, as far as the servers
    /// know it (`…/name` when an ancestor's name is unknown, empty when
    /// nothing is).
    pub path: String,
    /// Its entries are spread over servers (Hare §3.4).
    pub distributed: bool,
    /// Name operations per second, all servers together.
    pub ops_per_s: f64,
    /// The servers that counted operations in it, busiest first.
    pub servers: Vec<u32>,
}

/// Hot directories shown at most.
pub const MAX_DIRS: usize = 10;

/// One sample of the instance.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct Sample {
    pub id: String,
    pub mount: String,
    pub poll: String,
    pub interval_s: f64,
    pub servers: Vec<ServerRow>,
    pub clients: Vec<ClientRow>,
    /// `(resource, used, limit)` instance-wide.
    pub limits: Vec<(String, u64, u64)>,
    /// The busiest directories, most operations first.
    pub dirs: Vec<DirRow>,
}

/// Difference of two counters that only grow (a counter that went down —
/// a session that ended and restarted its count — reads as zero).
fn delta(new: u64, old: u64) -> f64 {
    new.saturating_sub(old) as f64
}

/// The sample between snapshots `a` (older) and `b`, `secs` apart;
/// `command_of` names a pid's process.
pub fn sample(
    a: &InstanceStatus,
    b: &InstanceStatus,
    secs: f64,
    command_of: impl Fn(u32) -> String,
) -> Sample {
    let secs = secs.max(1e-6);
    let servers = b
        .servers
        .iter()
        .map(|sb| {
            let sa = a.servers.iter().find(|s| s.server == sb.server);
            let old_ops = |name: &str| {
                sa.and_then(|s| s.ops.iter().find(|(n, _, _)| n == name))
                    .map_or((0, 0), |(_, c, ns)| (*c, *ns))
            };
            let mut busy_ns = 0.0;
            let mut top_ops: Vec<(String, f64)> = sb
                .ops
                .iter()
                .map(|(name, count, ns)| {
                    let (c0, ns0) = old_ops(name);
                    busy_ns += delta(*ns, ns0);
                    (name.clone(), delta(*count, c0) / secs)
                })
                .filter(|(_, r)| *r > 0.0)
                .collect();
            top_ops.sort_by(|x, y| y.1.total_cmp(&x.1).then(x.0.cmp(&y.0)));
            top_ops.truncate(3);
            ServerRow {
                server: sb.server,
                core: sb.core,
                ops_per_s: delta(sb.requests, sa.map_or(0, |s| s.requests)) / secs,
                top_ops,
                busy_pct: (busy_ns / (secs * 1e9) * 100.0).min(100.0),
                ring_bytes: sb.ring_bytes,
                channels: sb.channels,
                sessions: sb.sessions,
                inodes: sb.inodes,
                blocks_used: sb.blocks_used,
                blocks_total: sb.blocks_total,
                restarts: 0,
            }
        })
        .collect();
    // Per session: requests summed over servers; reports come from server 0.
    let totals = |st: &InstanceStatus| {
        let mut m: BTreeMap<u64, (u64, u64, u64, u64)> = BTreeMap::new();
        for s in &st.servers {
            for l in &s.sessions_load {
                let e = m.entry(l.session).or_default();
                e.0 += l.requests;
                e.1 += l.dcache_hits;
                e.2 += l.dcache_misses;
                e.3 += l.traps;
            }
        }
        m
    };
    let (ta, tb) = (totals(a), totals(b));
    let clients = b
        .sessions
        .iter()
        .map(|&(session, pid)| {
            let now = tb.get(&session).copied().unwrap_or_default();
            let before = ta.get(&session).copied().unwrap_or_default();
            let lookups = now.1 + now.2;
            ClientRow {
                session,
                pid,
                command: if pid == 0 {
                    String::new()
                } else {
                    command_of(pid)
                },
                ops_per_s: delta(now.0, before.0) / secs,
                traps_per_s: delta(now.3, before.3) / secs,
                dcache_hit_pct: (lookups > 0).then(|| now.1 as f64 * 100.0 / lookups as f64),
            }
        })
        .collect();
    Sample {
        id: b.id.clone(),
        mount: b.mount.clone(),
        poll: b.poll.clone(),
        interval_s: secs,
        servers,
        clients,
        limits: b.limits.clone(),
        dirs: hot_dirs(a, b, secs),
    }
}

/// The hot-directory rows between snapshots `a` and `b`. A server's count
/// for a directory only grows while the directory keeps its place in the
/// server's sketch; a count that went down (the directory lost its place
/// and came back) is all new.
fn hot_dirs(a: &InstanceStatus, b: &InstanceStatus, secs: f64) -> Vec<DirRow> {
    let mut by_dir: BTreeMap<u64, DirRow> = BTreeMap::new();
    let mut per_server: BTreeMap<u64, Vec<(u32, f64)>> = BTreeMap::new();
    for sb in &b.servers {
        let sa = a.servers.iter().find(|s| s.server == sb.server);
        for d in &sb.hot_dirs {
            let before = sa
                .and_then(|s| s.hot_dirs.iter().find(|x| x.ino == d.ino))
                .map_or(0, |x| x.ops);
            let n = if d.ops >= before {
                d.ops - before
            } else {
                d.ops
            };
            if n == 0 {
                continue;
            }
            let rate = n as f64 / secs;
            let row = by_dir.entry(d.ino).or_insert_with(|| DirRow {
                ino: d.ino,
                path: dir_path(&b.mount, &b.dir_names, d.ino),
                distributed: d.distributed,
                ops_per_s: 0.0,
                servers: Vec::new(),
            });
            row.ops_per_s += rate;
            per_server.entry(d.ino).or_default().push((sb.server, rate));
        }
    }
    let mut rows: Vec<DirRow> = by_dir
        .into_values()
        .map(|mut r| {
            let mut v = per_server.remove(&r.ino).unwrap_or_default();
            v.sort_by(|x, y| y.1.total_cmp(&x.1).then(x.0.cmp(&y.0)));
            r.servers = v.into_iter().map(|(s, _)| s).collect();
            r
        })
        .collect();
    rows.sort_by(|x, y| y.ops_per_s.total_cmp(&x.ops_per_s).then(x.ino.cmp(&y.ino)));
    rows.truncate(MAX_DIRS);
    rows
}

/// The path of directory `ino` under `mount`, from the names the servers
/// reported: `/atoll/src/lib` when every ancestor's name is known,
/// `…/lib` when one is not, empty when not even the directory's is.
pub fn dir_path(mount: &str, names: &[atoll_proto::DirName], ino: u64) -> String {
    let mount = mount.trim_end_matches('/');
    let mut parts: Vec<&str> = Vec::new();
    let mut cur = ino;
    // Bounded: names come from several servers at slightly different
    // moments, so a rename in between could make a cycle.
    for _ in 0..64 {
        if cur == atoll_proto::ROOT.0 {
            parts.reverse();
            return if parts.is_empty() {
                if mount.is_empty() { "/" } else { mount }.to_string()
            } else {
                format!("{mount}/{}", parts.join("/"))
            };
        }
        match names.iter().find(|n| n.ino == cur && !n.name.is_empty()) {
            Some(n) => {
                parts.push(&n.name);
                cur = n.parent;
            }
            None => break,
        }
    }
    if parts.is_empty() {
        return String::new();
    }
    parts.reverse();
    format!("…/{}", parts.join("/"))
}

/// `/proc/PID/comm` of a process on this host.
pub fn proc_command(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim_end().to_string())
        .unwrap_or_default()
}

/// How the client table is ordered (`s` cycles through them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientOrder {
    Ops,
    Traps,
    HitRate,
    Pid,
}

impl ClientOrder {
    pub fn next(self) -> Self {
        match self {
            ClientOrder::Ops => ClientOrder::Traps,
            ClientOrder::Traps => ClientOrder::HitRate,
            ClientOrder::HitRate => ClientOrder::Pid,
            ClientOrder::Pid => ClientOrder::Ops,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            ClientOrder::Ops => "ops/s",
            ClientOrder::Traps => "traps/s",
            ClientOrder::HitRate => "hit%",
            ClientOrder::Pid => "pid",
        }
    }
}

/// The client rows to show: those matching `filter` (a substring of the
/// command or pid; empty matches all), in `order`, busiest first.
pub fn clients_view<'a>(s: &'a Sample, order: ClientOrder, filter: &str) -> Vec<&'a ClientRow> {
    let mut v: Vec<&ClientRow> = s
        .clients
        .iter()
        .filter(|c| {
            filter.is_empty() || c.command.contains(filter) || c.pid.to_string().contains(filter)
        })
        .collect();
    match order {
        ClientOrder::Ops => v.sort_by(|a, b| b.ops_per_s.total_cmp(&a.ops_per_s)),
        ClientOrder::Traps => v.sort_by(|a, b| b.traps_per_s.total_cmp(&a.traps_per_s)),
        ClientOrder::HitRate => v.sort_by(|a, b| {
            b.dcache_hit_pct
                .unwrap_or(-1.0)
                .total_cmp(&a.dcache_hit_pct.unwrap_or(-1.0))
        }),
        ClientOrder::Pid => v.sort_by_key(|c| c.pid),
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use atoll_proto::{ServerStats, SessionLoad};

    fn status(
        requests: u64,
        creates: (u64, u64),
        load: u64,
        sessions: Vec<(u64, u32)>,
    ) -> InstanceStatus {
        InstanceStatus {
            id: "abc".into(),
            mount: "/atoll".into(),
            pid: 1,
            clients: sessions.len() as u64,
            lanes: 1,
            servers: vec![ServerStats {
                server: 0,
                requests,
                ops: vec![("Open".into(), creates.0, creates.1)],
                ring_bytes: 128,
                sessions_load: vec![SessionLoad {
                    session: 7,
                    requests: load,
                    dcache_hits: 3,
                    dcache_misses: 1,
                    traps: load / 2,
                    ..Default::default()
                }],
                ..Default::default()
            }],
            limits: vec![],
            poll: "adaptive".into(),
            sessions,
            dir_names: vec![],
            health: vec![],
            island: String::new(),
            fs_policy: Default::default(),
            ..Default::default()
        }
    }

    #[test]
    fn rates_are_differences_over_the_interval() {
        let a = status(100, (10, 1_000_000), 40, vec![(7, 42)]);
        let b = status(300, (110, 251_000_000), 240, vec![(7, 42), (8, 0)]);
        let s = sample(&a, &b, 0.5, |pid| format!("p{pid}"));
        let srv = &s.servers[0];
        assert_eq!(srv.ops_per_s, 400.0);
        assert_eq!(srv.top_ops, vec![("Open".to_string(), 200.0)]);
        assert!((srv.busy_pct - 50.0).abs() < 1e-9, "{}", srv.busy_pct);
        assert_eq!(srv.ring_bytes, 128);
        let c = &s.clients[0];
        assert_eq!((c.pid, c.command.as_str()), (42, "p42"));
        assert_eq!(c.ops_per_s, 400.0);
        assert_eq!(c.traps_per_s, 200.0);
        assert_eq!(c.dcache_hit_pct, Some(75.0));
        // A session whose pid is not known yet is shown without a name.
        assert_eq!(s.clients[1].command, "");
        assert_eq!(s.clients[1].ops_per_s, 0.0);
    }

    #[test]
    fn counters_that_went_down_read_as_zero_and_busy_is_capped() {
        let a = status(500, (100, 9_000_000_000), 40, vec![(7, 42)]);
        let b = status(300, (50, 1_000), 10, vec![(7, 42)]);
        let s = sample(&a, &b, 1.0, |_| String::new());
        assert_eq!(s.servers[0].ops_per_s, 0.0);
        assert_eq!(s.clients[0].ops_per_s, 0.0);
        let c = status(300, (60, 99_000_000_000), 10, vec![(7, 42)]);
        assert_eq!(
            sample(&b, &c, 1.0, |_| String::new()).servers[0].busy_pct,
            100.0
        );
    }

    #[test]
    fn client_view_filters_and_orders() {
        let row = |pid, command: &str, ops| ClientRow {
            session: pid as u64,
            pid,
            command: command.into(),
            ops_per_s: ops,
            traps_per_s: 0.0,
            dcache_hit_pct: None,
        };
        let s = Sample {
            id: String::new(),
            mount: String::new(),
            poll: String::new(),
            interval_s: 1.0,
            servers: vec![],
            clients: vec![
                row(3, "make", 5.0),
                row(1, "cc1", 50.0),
                row(2, "make", 9.0),
            ],
            limits: vec![],
            dirs: vec![],
        };
        let pids = |v: Vec<&ClientRow>| v.iter().map(|c| c.pid).collect::<Vec<_>>();
        assert_eq!(pids(clients_view(&s, ClientOrder::Ops, "")), vec![1, 2, 3]);
        assert_eq!(pids(clients_view(&s, ClientOrder::Pid, "make")), vec![2, 3]);
        assert_eq!(pids(clients_view(&s, ClientOrder::Ops, "1")), vec![1]);
        assert_eq!(ClientOrder::Pid.next(), ClientOrder::Ops);
    }

    fn hot(server: u32, dirs: &[(u64, u64)]) -> ServerStats {
        ServerStats {
            server,
            hot_dirs: dirs
                .iter()
                .map(|&(ino, ops)| atoll_proto::HotDir {
                    ino,
                    ops,
                    distributed: ino & (1 << 40) != 0,
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn hot_directories_sum_servers_and_are_named_by_path() {
        let name = |ino, parent, name: &str| atoll_proto::DirName {
            ino,
            parent,
            name: name.into(),
        };
        let spread = (1u64 << 40) | 77;
        let mut a = status(0, (0, 0), 0, vec![]);
        a.servers = vec![hot(0, &[(10, 100), (spread, 5)]), hot(1, &[(spread, 7)])];
        let mut b = a.clone();
        b.servers = vec![
            hot(0, &[(10, 300), (spread, 25), (1, 4)]),
            hot(1, &[(spread, 47), (12, 9)]),
        ];
        b.dir_names = vec![name(10, 11, "src"), name(11, 1, "proj"), name(12, 99, "x")];
        let s = sample(&a, &b, 2.0, |_| String::new());
        let rows: Vec<(u64, &str, f64, &[u32], bool)> = s
            .dirs
            .iter()
            .map(|d| {
                (
                    d.ino,
                    d.path.as_str(),
                    d.ops_per_s,
                    &d.servers[..],
                    d.distributed,
                )
            })
            .collect();
        assert_eq!(
            rows,
            vec![
                (10, "/atoll/proj/src", 100.0, &[0][..], false),
                (spread, "", 30.0, &[1, 0][..], true),
                // New in the sketch since the first snapshot: all its
                // count is in the interval.
                (12, "…/x", 4.5, &[1][..], false),
                (1, "/atoll", 2.0, &[0][..], false),
            ]
        );
    }
}
